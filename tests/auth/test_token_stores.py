"""The token stores: modes, atomic writes, locking across threads and processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpauth.errors import TokenStoreError
from mcpauth.tokens import (
    FileTokenStore,
    KeyringTokenStore,
    MemoryTokenStore,
    Token,
    TokenStore,
    credential_key,
    default_token_path,
)

POSIX = sys.platform != "win32"
posix_only = pytest.mark.skipif(not POSIX, reason="POSIX file modes and flock")
KEY = credential_key("https://as.example", "c1", "https://mcp.example/mcp")


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    return str(tmp_path / "cfg" / "mcpauth" / "tokens.json")


# -- behaviour common to every store -----------------------------------------------------------

def _stores(tmp_path: Path) -> list[TokenStore]:
    return [MemoryTokenStore(), FileTokenStore(tmp_path / "t.json")]


def test_get_put_delete_on_every_store(tmp_path: Path) -> None:
    for store in _stores(tmp_path):
        assert store.get(KEY) is None
        tok = Token(access_token="AT", refresh_token="RT", expires_at=5.0, issuer="i")
        store.put(KEY, tok.to_dict())
        store.put("registration:i", {"client_id": "c1"})
        got = store.get(KEY)
        assert got is not None and Token.from_dict(got) == tok
        assert store.get("registration:i") == {"client_id": "c1"}
        store.delete(KEY)
        store.delete(KEY)  # deleting twice is fine
        assert store.get(KEY) is None
        assert store.get("registration:i") == {"client_id": "c1"}


def test_values_are_copies(tmp_path: Path) -> None:
    for store in _stores(tmp_path):
        value: dict[str, Any] = {"a": [1]}
        store.put("k", value)
        value["a"].append(2)
        got = store.get("k")
        assert got == {"a": [1]}
        got["a"].append(3)
        assert store.get("k") == {"a": [1]}


def test_unserialisable_value_is_refused(tmp_path: Path) -> None:
    for store in _stores(tmp_path):
        with pytest.raises(TokenStoreError):
            store.put("k", {"bad": object()})


def test_memory_lock_is_per_key_and_reentrant() -> None:
    store = MemoryTokenStore()
    holding = threading.Event()
    release = threading.Event()
    results: list[str] = []

    def holder() -> None:
        with store.locked("a"), store.locked("a"):  # re-entrant
            holding.set()
            release.wait(5)
        results.append("holder done")

    t = threading.Thread(target=holder, name="test-holder", daemon=True)
    t.start()
    assert holding.wait(5)
    with store.locked("b"):  # another key is free
        results.append("b")
    got = threading.Event()

    def waiter() -> None:
        with store.locked("a"):
            got.set()

    w = threading.Thread(target=waiter, name="test-waiter", daemon=True)
    w.start()
    assert not got.wait(0.2)  # blocked while the holder has "a"
    release.set()
    assert got.wait(5)
    t.join(5)
    w.join(5)
    assert results == ["b", "holder done"]


# -- default path ------------------------------------------------------------------------------

def test_default_path_honours_xdg_config_home(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert default_token_path() == str(tmp_path / "xdg" / "mcpauth" / "tokens.json")
    assert FileTokenStore().path == default_token_path()


def test_default_path_without_xdg_is_dot_config(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    expected = str(tmp_path / ".config" / "mcpauth" / "tokens.json")
    assert default_token_path() == expected
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # invalid per the XDG spec
    assert default_token_path() == expected


def test_default_path_on_windows_uses_appdata(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("APPDATA", "/appdata/Roaming")
    assert default_token_path() == os.path.join("/appdata/Roaming", "mcpauth", "tokens.json")


# -- file modes --------------------------------------------------------------------------------

@posix_only
def test_directory_0700_and_file_0600_even_with_an_open_umask(store_path: str) -> None:
    old = os.umask(0)
    try:
        store = FileTokenStore(store_path)
        store.put(KEY, {"access_token": "AT"})
    finally:
        os.umask(old)
    assert _mode(store_path) == 0o600
    assert _mode(os.path.dirname(store_path)) == 0o700
    assert _mode(store.lock_path) == 0o600
    store.put(KEY, {"access_token": "AT2"})  # rewriting never widens it
    assert _mode(store_path) == 0o600


@posix_only
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_group_or_other_readable_file_is_refused(store_path: str, mode: int) -> None:
    store = FileTokenStore(store_path)
    store.put(KEY, {"access_token": "AT"})
    os.chmod(store_path, mode)
    before = Path(store_path).read_bytes()
    with pytest.raises(TokenStoreError) as info:
        store.get(KEY)
    msg = str(info.value)
    assert f"chmod 600 {store_path}" in msg
    assert f"{mode:04o}" in msg
    assert info.value.step == "store" and info.value.url == store_path
    with pytest.raises(TokenStoreError):
        store.put(KEY, {"access_token": "other"})
    assert Path(store_path).read_bytes() == before  # nothing written over it
    assert _mode(store_path) == mode                 # and not silently "fixed"
    os.chmod(store_path, 0o600)
    assert store.get(KEY) == {"access_token": "AT"}


def _refused(store: FileTokenStore) -> list[str]:
    """What each entry point says; every one of them must refuse."""
    messages = []
    for attempt in (lambda: store.get(KEY), lambda: store.put(KEY, {"access_token": "X"}),
                    lambda: store.delete(KEY)):
        with pytest.raises(TokenStoreError) as info:
            attempt()
        assert info.value.step == "store" and info.value.url == store.path
        messages.append(str(info.value))
    with pytest.raises(TokenStoreError) as info, store.locked(KEY):
        pass
    messages.append(str(info.value))
    return messages


@posix_only
@pytest.mark.parametrize("mode", [0o770, 0o730, 0o707, 0o777, 0o1777])
def test_directory_writable_by_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chmod(directory, mode)
    store = FileTokenStore(directory / "tokens.json")
    for message in _refused(store):
        assert f"chmod 700 {directory}" in message and f"{mode:04o}" in message
    assert os.listdir(directory) == []        # no token file, no lock file, no temp file
    assert _mode(directory) == mode           # and not silently "fixed"
    os.chmod(directory, 0o755)                # readable by others is fine: nobody can swap
    store.put(KEY, {"access_token": "AT"})
    assert store.get(KEY) == {"access_token": "AT"}


@posix_only
def test_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        directory = tmp_path / "theirs"
        directory.mkdir(mode=0o700)
        os.chown(directory, 65534, 65534)     # nobody
        owner = 65534
    else:
        directory, owner = Path("/"), os.stat("/").st_uid   # root's, not ours
        assert owner != os.geteuid()
    store = FileTokenStore(directory / "mcpsync-test-tokens.json")
    for message in _refused(store):
        assert f"{directory} belongs to another user (uid {owner})" in message
        assert "FileTokenStore(path=...)" in message
    assert not (directory / "mcpsync-test-tokens.json").exists()
    assert not (directory / "mcpsync-test-tokens.json.lock").exists()


@posix_only
@pytest.mark.parametrize("target_exists", [False, True])
def test_lock_file_planted_as_a_symlink_is_refused(tmp_path: Path,
                                                   target_exists: bool) -> None:
    store = FileTokenStore(tmp_path / "cfg" / "tokens.json")
    store.put(KEY, {"access_token": "AT"})
    os.unlink(store.lock_path)
    victim = tmp_path / "victim"
    if target_exists:
        victim.write_text("keep me", encoding="utf-8")
        os.chmod(victim, 0o644)
    os.symlink(victim, store.lock_path)
    with pytest.raises(TokenStoreError) as info:
        store.put(KEY, {"access_token": "AT2"})
    assert f"{store.lock_path} is a symbolic link; remove it" in str(info.value)
    with pytest.raises(TokenStoreError, match="symbolic link"), store.locked(KEY):
        pass
    # The link was not followed: no file created, nothing changed, no mode touched.
    if target_exists:
        assert victim.read_text(encoding="utf-8") == "keep me" and _mode(victim) == 0o644
    else:
        assert not victim.exists()
    assert store.get(KEY) == {"access_token": "AT"}   # reading takes no lock
    os.unlink(store.lock_path)
    store.put(KEY, {"access_token": "AT2"})
    assert store.get(KEY) == {"access_token": "AT2"}


@posix_only
def test_lock_file_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    store = FileTokenStore(tmp_path / "tokens.json")
    os.mkfifo(store.lock_path, 0o600)
    with pytest.raises(TokenStoreError, match="not a regular file of yours"):
        store.put(KEY, {"access_token": "AT"})
    assert not os.path.exists(store.path)


def test_corrupt_json_names_the_file(store_path: str) -> None:
    os.makedirs(os.path.dirname(store_path), mode=0o700)
    fd = os.open(store_path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b'{"version": 1, "entries": {"k": ')
    os.close(fd)
    store = FileTokenStore(store_path)
    with pytest.raises(TokenStoreError) as info:
        store.get("k")
    assert store_path in str(info.value)
    assert "not valid JSON" in str(info.value)


def test_json_that_is_not_a_token_file_is_refused(store_path: str) -> None:
    os.makedirs(os.path.dirname(store_path), mode=0o700)
    fd = os.open(store_path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"[1, 2, 3]")
    os.close(fd)
    with pytest.raises(TokenStoreError, match="not a token file"):
        FileTokenStore(store_path).get("k")


def test_file_is_plain_json_with_entries(store_path: str) -> None:
    FileTokenStore(store_path).put("k", {"v": 1})
    doc = json.loads(Path(store_path).read_text())
    assert doc == {"version": 1, "entries": {"k": {"v": 1}}}


# -- atomic writes -----------------------------------------------------------------------------

def test_readers_never_see_a_partial_file(store_path: str) -> None:
    """A reader racing a writer of large values only ever sees whole documents."""
    store = FileTokenStore(store_path)
    big = "x" * 200_000
    store.put("k", {"n": 0, "pad": big})
    stop = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                raw = Path(store_path).read_bytes()
                doc = json.loads(raw)  # a torn file would fail here
                entry = doc["entries"]["k"]
                assert entry["pad"] == big
                seen.append(entry["n"])
            except BaseException as exc:
                errors.append(exc)
                return

    t = threading.Thread(target=reader, name="test-reader", daemon=True)
    t.start()
    for n in range(1, 40):
        store.put("k", {"n": n, "pad": big})
    stop.set()
    t.join(10)
    assert not errors, errors[0]
    assert seen == sorted(seen) and len(seen) > 1
    leftovers = [p for p in os.listdir(os.path.dirname(store_path)) if p.endswith(".tmp")]
    assert leftovers == []


def test_failed_replace_keeps_the_old_file(store_path: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileTokenStore(store_path)
    store.put("k", {"v": "old"})

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(TokenStoreError, match="cannot write"):
        store.put("k", {"v": "new"})
    monkeypatch.undo()
    assert store.get("k") == {"v": "old"}
    assert [p for p in os.listdir(os.path.dirname(store_path)) if p.endswith(".tmp")] == []


# -- locking within a process ------------------------------------------------------------------

def test_file_lock_is_reentrant_in_a_thread(store_path: str) -> None:
    store = FileTokenStore(store_path, lock_timeout=0.5)
    with store.locked(KEY), store.locked("other"):
        store.put(KEY, {"v": 1})  # put takes the lock again inside
        assert store.get(KEY) == {"v": 1}
    with store.locked(KEY):  # released properly afterwards
        pass


@contextlib.contextmanager
def _held_by_a_thread(store: TokenStore) -> Iterator[threading.Event]:
    """Hold ``store.locked(KEY)`` in another thread until the yielded event is set (or the
    block ends)."""
    holding = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with store.locked(KEY):
            holding.set()
            release.wait(10)

    t = threading.Thread(target=holder, name="mcpsync-test-holder", daemon=True)
    t.start()
    try:
        assert holding.wait(5)
        yield release
    finally:
        release.set()
        t.join(5)


def test_file_lock_excludes_other_threads_until_timeout(store_path: str) -> None:
    store = FileTokenStore(store_path, lock_timeout=0.3)
    other = FileTokenStore(store_path, lock_timeout=0.3)  # separate fd: flock itself excludes
    with _held_by_a_thread(store):
        for s in (store, other):
            with pytest.raises(TokenStoreError, match="held by another process"), \
                    s.locked(KEY):
                pass
    with other.locked(KEY):
        pass


_HOLD_LOCK = textwrap.dedent("""
    import sys
    from mcpauth.tokens import FileTokenStore
    store = FileTokenStore(sys.argv[1])
    with store.locked("k"):
        print("locked", flush=True)
        sys.stdin.readline()
""")


@posix_only
@pytest.mark.timeout(30)
def test_lock_held_by_another_process_times_out(store_path: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, store_path],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "locked"
        store = FileTokenStore(store_path, lock_timeout=0.3)
        with pytest.raises(TokenStoreError) as info, store.locked("k"):
            pass
        assert store.lock_path in str(info.value)
        assert "0.3 s" in str(info.value)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(10) == 0
        with store.locked("k"):  # free once the other process let go
            pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- two processes, one rotating refresh token -------------------------------------------------

_REFRESHER = textwrap.dedent("""
    import json, os, sys, time
    from mcpauth.tokens import FileTokenStore, Token
    path, key, spent_log, ready, go = sys.argv[1:6]
    store = FileTokenStore(path)
    start = Token.from_dict(store.get(key))
    open(ready + str(os.getpid()), "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    with store.locked(key):
        current = Token.from_dict(store.get(key))          # re-read under the lock
        if current.refresh_token != start.refresh_token:
            print("reused", current.access_token, flush=True)
        else:
            # "Spend" the refresh token at the pretend authorization server.
            with open(spent_log, "a") as f:
                f.write(current.refresh_token + "\\n")
            time.sleep(0.3)                                  # widen the race window
            n = int(current.refresh_token.split("-")[1]) + 1
            new = Token.from_response(
                {"access_token": f"at-{n}", "refresh_token": f"rt-{n}", "expires_in": 3600},
                previous_refresh_token=current.refresh_token)
            store.put(key, new.to_dict())
            print("refreshed", new.access_token, flush=True)
""")


@posix_only
@pytest.mark.timeout(60)
def test_two_processes_refresh_once(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens.json")
    store = FileTokenStore(path)
    store.put(KEY, Token(access_token="at-0", refresh_token="rt-0", expires_at=0.0).to_dict())
    spent = tmp_path / "spent.log"
    ready = str(tmp_path / "ready-")
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", _REFRESHER, path, KEY, str(spent), ready,
                               str(go)], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        deadline = time.monotonic() + 30
        while len([p for p in os.listdir(tmp_path) if p.startswith("ready-")]) < 2:
            assert time.monotonic() < deadline, "refresher processes did not start"
            assert all(p.poll() is None for p in procs)
            time.sleep(0.01)
        go.touch()
        outs = [p.communicate(timeout=30)[0].split() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0]
    assert spent.read_text().splitlines() == ["rt-0"]  # the refresh token was spent once
    assert sorted(o[0] for o in outs) == ["refreshed", "reused"]
    assert {o[1] for o in outs} == {"at-1"}  # both ended up with the same new token
    final = Token.from_dict(store.get(KEY) or {})
    assert (final.access_token, final.refresh_token) == ("at-1", "rt-1")


# -- keyring -----------------------------------------------------------------------------------

@pytest.fixture
def memory_keyring() -> Iterator[dict[tuple[str, str], str]]:
    keyring = pytest.importorskip("keyring")
    from keyring.backend import KeyringBackend
    from keyring.errors import PasswordDeleteError

    items: dict[tuple[str, str], str] = {}

    class _Memory(KeyringBackend):
        priority = 1

        def get_password(self, service: str, username: str) -> str | None:
            return items.get((service, username))

        def set_password(self, service: str, username: str, password: str) -> None:
            items[(service, username)] = password

        def delete_password(self, service: str, username: str) -> None:
            if items.pop((service, username), None) is None:
                raise PasswordDeleteError(username)

    old = keyring.get_keyring()
    keyring.set_keyring(_Memory())  # type: ignore[no-untyped-call]
    try:
        yield items
    finally:
        keyring.set_keyring(old)


def test_keyring_store_round_trip(memory_keyring: dict[tuple[str, str], str]) -> None:
    store: TokenStore = KeyringTokenStore(service="mcpauth-test")
    tok = Token(access_token="AT", refresh_token="RT", expires_at=10.0)
    assert store.get(KEY) is None
    store.put(KEY, tok.to_dict())
    assert ("mcpauth-test", KEY) in memory_keyring
    got = store.get(KEY)
    assert got is not None and Token.from_dict(got) == tok
    with store.locked(KEY), store.locked(KEY):
        store.put(KEY, {"v": 2})
    assert store.get(KEY) == {"v": 2}
    store.delete(KEY)
    store.delete(KEY)  # a missing item is not an error
    assert store.get(KEY) is None
    assert "RT" not in repr(store)


def test_keyring_store_refuses_corrupt_item(memory_keyring: dict[tuple[str, str], str]) -> None:
    memory_keyring[("mcpauth", "k")] = "{not json"
    with pytest.raises(TokenStoreError, match="not valid JSON"):
        KeyringTokenStore().get("k")


def test_keyring_store_without_keyring_says_how_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "keyring", None)  # import keyring -> ImportError
    with pytest.raises(TokenStoreError, match=r"pip install 'mcpsync\[keyring\]'"):
        KeyringTokenStore()


# -- fork --------------------------------------------------------------------------------------

def _fork_and_lock(store: TokenStore, release: threading.Event) -> int:
    """Fork while another thread holds ``store``'s lock; the child takes the lock once the
    parent's thread lets go and exits 0, or exits 1 when it cannot (a lock inherited held)."""
    pid = os.fork()
    if pid == 0:  # child: only this thread exists here
        signal.alarm(10)  # a lock inherited held would block forever: die instead
        code = 1
        try:
            with store.locked(KEY):
                store.put(KEY, {"by": "child"})
                code = 0
        finally:
            os._exit(code)
    release.set()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["memory", "file"])
def test_locks_held_by_a_thread_at_fork_are_fresh_in_the_child(tmp_path: Path,
                                                               kind: str) -> None:
    store: TokenStore = (MemoryTokenStore() if kind == "memory"
                         else FileTokenStore(tmp_path / "t.json", lock_timeout=5))
    with _held_by_a_thread(store) as release:
        assert _fork_and_lock(store, release) == 0
    if kind == "file":
        assert store.get(KEY) == {"by": "child"}


def test_the_lock_wait_is_30_seconds_by_default(store_path: str) -> None:
    """The token-store lock wait (docs/auth.md, "Where tokens live")."""
    from mcpauth.tokens._tokens import LOCK_TIMEOUT

    assert LOCK_TIMEOUT == 30 and FileTokenStore(store_path).lock_timeout == 30
