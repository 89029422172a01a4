"""Secrets: rendering that survives its readers, private files, cleanup, placeholders.

Each format is read back by an independent reader: ``env`` by a real ``bash`` sourcing the
file (and by a dotenv-style parser for the escapes bash leaves alone), ``properties`` by a
parser written here from the ``java.util.Properties.load`` specification, ``json`` by
``json.loads``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_child
from hypothesis import given, settings, strategies as st

from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError, SecretError
from mcpsync.secrets import (
    SecretFile,
    SecretResolver,
    apply_header_secrets,
    apply_placeholders,
    check_secret_config,
    render_secret,
    write_secret_file,
)

# Values that break naive writers: quoting, expansion, comments, separators, whitespace,
# non-ASCII (Latin-1 and beyond) and astral characters.
NASTY = {
    "PLAIN": "abc-123_./:@+",
    "EMPTY": "",
    "SPACES": "  leading and trailing  ",
    "NEWLINES": "line one\nline two\r\nthree\tTab",
    "EQUALS": "a=b==c",
    "QUOTES": "say \"hi\" and 'bye'",
    "DOLLAR": "$HOME ${HOME} $(echo hi) $$",
    "BACKTICK": "`echo hi` and \\` and \\",
    "HASH": "#not a comment ! either",
    "COLON": "key: value",
    "BACKSLASHES": "C:\\path\\n\\to\\",
    "LATIN1": "café ñ ü ÿ",
    "UNICODE": "Grüße, 日本語, Ελληνικά",
    "ASTRAL": "emoji 😀 and 𝄞 clef",
    "CONTROL": "bell\x07 vt\x0b ff\x0c del\x7f",
}
SECRET_MARK = "SUPERSECRET-VALUE-42"


# -- independent readers -----------------------------------------------------------------

def parse_properties(data: bytes) -> dict[str, str]:
    """A reader for the ``.properties`` format as ``java.util.Properties.load`` defines it."""
    text = data.decode("latin-1")
    natural = re.split(r"\r\n|\r|\n", text)
    result: dict[str, str] = {}
    i = 0
    while i < len(natural):
        line = natural[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # Join continuation lines: an odd number of trailing backslashes continues.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i < len(natural):
            line = line[:-1] + natural[i].lstrip(" \t\f")
            i += 1
        # The key ends at the first unescaped '=', ':' or whitespace.
        pos = 0
        while pos < len(line):
            if line[pos] == "\\":
                pos += 2
                continue
            if line[pos] in "=: \t\f":
                break
            pos += 1
        raw_key, rest = line[:pos], line[pos:]
        rest = rest.lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        result[_unescape_properties(raw_key)] = _unescape_properties(rest)
    return result


def _unescape_properties(text: str) -> str:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch != "\\":
            out.append(ch)
            pos += 1
            continue
        nxt = text[pos + 1]
        if nxt == "u":
            out.append(chr(int(text[pos + 2:pos + 6], 16)))
            pos += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
        pos += 2
    # \uXXXX pairs give UTF-16 surrogates; join them as Java's String would.
    return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le")


def parse_dotenv(text: str) -> dict[str, str]:
    """A dotenv reader (python-dotenv / docker semantics) for the escapes bash keeps."""
    escapes = {"\\": "\\", '"': '"', "n": "\n", "r": "\r", "t": "\t", "$": "$", "`": "`"}
    result: dict[str, str] = {}
    assert text.endswith("\n")
    for line in text[:-1].split("\n"):
        if not line:
            continue
        key, sep, value = line.partition("=")
        assert sep, f"line without '=': {line!r}"
        if value.startswith('"'):
            assert value.endswith('"') and len(value) >= 2
            body = value[1:-1]
            out, pos = [], 0
            while pos < len(body):
                if body[pos] == "\\":
                    out.append(escapes[body[pos + 1]])
                    pos += 2
                else:
                    assert body[pos] not in '"$`', f"unescaped {body[pos]!r} in {key}"
                    out.append(body[pos])
                    pos += 1
            value = "".join(out)
        else:
            assert re.fullmatch(r"[A-Za-z0-9_./:@+-]+", value), f"bare value of {key}"
        result[key] = value
    return result


def source_in_bash(path: Path, cwd: Path) -> dict[str, str]:
    """What a shell gets from ``set -a; . FILE``: the exported environment afterwards."""
    proc = subprocess.run(["bash", "-c", 'set -a; . "$1"; env -0', "bash", str(path)],
                          capture_output=True, cwd=cwd, env={"PATH": os.environ["PATH"]},
                          timeout=30, check=True)
    env: dict[str, str] = {}
    for item in proc.stdout.split(b"\0"):
        if item:
            key, _, value = item.partition(b"=")
            env[key.decode()] = value.decode("utf-8")
    return env


# -- render_secret -----------------------------------------------------------------------

def test_env_sourced_by_bash_gives_every_value_and_runs_nothing(tmp_path: Path) -> None:
    payloads = {
        "SUBSHELL": f"$(touch {tmp_path}/pwned1)",
        "BACKTICKS": f"`touch {tmp_path}/pwned2`",
        "SEMICOLON": f"x; touch {tmp_path}/pwned3",
        "QUOTE_BREAK": f"\"; touch {tmp_path}/pwned4; echo \"",
        "NEWLINE_BREAK": f"x\ntouch {tmp_path}/pwned5",
        "VARIABLE": "${PATH}",
    }
    kv = {**NASTY, **payloads}
    secret = tmp_path / "secret.env"
    secret.write_text(render_secret("env", kv), encoding="utf-8")
    got = source_in_bash(secret, tmp_path)
    for key, value in kv.items():
        # Bash keeps \n, \r and \t as two characters inside double quotes (dotenv readers
        # decode them); every other character arrives exactly.
        expected = value.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
        assert got[key] == expected, key
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.env"]


def test_env_round_trips_through_a_dotenv_reader() -> None:
    text = render_secret("env", NASTY)
    assert parse_dotenv(text) == NASTY


def test_env_quotes_exactly_the_values_that_need_it() -> None:
    text = render_secret("env", {"A": "plain-1.2/x:y@z+w_", "B": "", "C": "a b", "D": "é"})
    assert text == 'A=plain-1.2/x:y@z+w_\nB=""\nC="a b"\nD="é"\n'
    assert render_secret("env", {"X": 'a\\b"c\nd\re\tf$g`h'}) == \
        'X="a\\\\b\\"c\\nd\\re\\tf\\$g\\`h"\n'


def test_properties_round_trip_through_a_java_properties_reader() -> None:
    kv = {**NASTY, "dotted.key": "v", "dash-key": " =:#!", "_x": "\\u0041 literal"}
    text = render_secret("properties", kv)
    assert parse_properties(text.encode("latin-1")) == kv


def test_properties_escapes_follow_the_rules() -> None:
    text = render_secret("properties", {"k": " a=b:c#d!e\\f\ng\rh\ti\fj"})
    assert text == "k=\\ a\\=b\\:c\\#d\\!e\\\\f\\ng\\rh\\ti\\fj\n"
    # Latin-1 stays literal (the file is ISO-8859-1); beyond it \uXXXX, astral as a pair.
    assert render_secret("properties", {"k": "é€😀"}) == "k=é\\u20AC\\uD83D\\uDE00\n"
    # Only a leading space is escaped; inner and trailing spaces survive Properties.load.
    assert render_secret("properties", {"k": "  a b  "}) == "k=\\  a b  \n"


def test_json_round_trips_and_is_the_documented_dump() -> None:
    kv = {**NASTY, "dotted.key": "x"}
    text = render_secret("json", kv)
    assert text == json.dumps(kv, sort_keys=True, ensure_ascii=False) + "\n"
    assert json.loads(text) == kv


@pytest.mark.parametrize("fmt", ["env", "properties", "json"])
def test_render_is_sorted_deterministic_and_ends_with_newline(fmt: str) -> None:
    forward = {"b": "2", "a": "1", "c": "3"} if fmt != "env" else {"B": "2", "A": "1"}
    backward = dict(reversed(list(forward.items())))
    assert render_secret(fmt, forward) == render_secret(fmt, backward)
    assert render_secret(fmt, forward).endswith("\n")
    assert render_secret(fmt, {}).endswith("\n")
    if fmt != "json":
        keys = [line.split("=")[0] for line in render_secret(fmt, forward).splitlines()]
        assert keys == sorted(keys)


_values = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"),
                  max_size=40)
_env_keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
_keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,8}", fullmatch=True)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=6))
def test_properties_and_json_round_trip_any_text(kv: dict[str, str]) -> None:
    assert parse_properties(render_secret("properties", kv).encode("latin-1")) == kv
    assert json.loads(render_secret("json", kv)) == kv


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_env_keys, _values, max_size=6))
def test_env_round_trips_any_text(kv: dict[str, str]) -> None:
    assert parse_dotenv(render_secret("env", kv)) == kv


@pytest.mark.parametrize(("fmt", "key"), [
    ("env", "A.B"), ("env", "A-B"), ("env", "1A"), ("env", ""), ("env", "A B"),
    ("env", "É"), ("properties", "1a"), ("properties", "a b"), ("properties", "a=b"),
    ("properties", ".a"), ("json", "a:b"), ("json", ""),
])
def test_bad_keys_are_named_and_the_value_is_not(fmt: str, key: str) -> None:
    with pytest.raises(ValueError) as info:
        render_secret(fmt, {key: SECRET_MARK})
    assert repr(key) in str(info.value)
    assert SECRET_MARK not in str(info.value)


@pytest.mark.parametrize("value", [SECRET_MARK + "\0", 42, None, b"bytes",
                                   SECRET_MARK + "\ud800"])
def test_bad_values_name_the_key_never_the_value(value: Any) -> None:
    for fmt in ("env", "properties", "json"):
        with pytest.raises(ValueError) as info:
            render_secret(fmt, {"API_KEY": value})
        assert "'API_KEY'" in str(info.value)
        assert SECRET_MARK not in str(info.value)


def test_unknown_format_and_non_mapping() -> None:
    with pytest.raises(ValueError, match="unknown secret format 'yaml'"):
        render_secret("yaml", {"A": "b"})
    with pytest.raises(ValueError, match="mapping"):
        render_secret("env", [("A", "b")])  # type: ignore[arg-type]


# -- check_secret_config -----------------------------------------------------------------

class DictResolver:
    """A resolver over a dict of refs; records what it was asked for."""

    def __init__(self, secrets: Mapping[str, Any]) -> None:
        self.secrets = secrets
        self.asked: list[str] = []

    def resolve(self, ref: str) -> Mapping[str, str]:
        self.asked.append(ref)
        return self.secrets[ref]  # type: ignore[no-any-return]


def test_resolver_satisfies_the_protocol() -> None:
    assert isinstance(DictResolver({}), SecretResolver)


def _stdio(**kwargs: Any) -> ServerConfig:
    return ServerConfig(id="svc", command="server-bin", **kwargs)


def test_check_secret_config_accepts_good_configs() -> None:
    resolver = DictResolver({})
    check_secret_config(_stdio(), None)
    check_secret_config(_stdio(secret_ref="vault/x", args=["--secrets", "{{secret_file}}"]),
                        resolver)
    check_secret_config(_stdio(secret_ref="vault/x", env={"F": "{{secret_file}}"},
                               secret_format="json"), resolver)
    check_secret_config(ServerConfig(id="web", url="https://example.com/mcp"), None)


@pytest.mark.parametrize(("config", "with_resolver", "problem"), [
    (_stdio(secret_ref="vault/x"), False, "needs a secret resolver"),
    (_stdio(args=["{{secret_file}}"]), True, "has no secret_ref"),
    (_stdio(env={"CFG": "--file={{secret_file}}"}), True, "has no secret_ref"),
    (ServerConfig(id="svc", url="https://example.com/mcp", secret_ref="vault/x"), True,
     "needs a header that takes a key of the secret"),
    (ServerConfig(id="svc", url="https://example.com/mcp",
                  headers={"X-Key": "{{secret:KEY}}"}), True, "has no secret_ref"),
])
def test_check_secret_config_errors_name_the_server(config: ServerConfig,
                                                    with_resolver: bool,
                                                    problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_secret_config(config, DictResolver({}) if with_resolver else None)
    assert "server 'svc'" in str(info.value)
    assert problem in str(info.value)
    assert info.value.server == "svc"


def _http(**headers: str) -> ServerConfig:
    return ServerConfig(id="svc", url="https://example.com/mcp", secret_ref="vault/x",
                        headers=headers)


def test_header_secrets_fill_keys_of_the_secret_and_show_only_names() -> None:
    resolver = DictResolver({"vault/x": {"TOKEN": "t0ken-value", "TEAM": "blue"}})
    config = _http(Authorization="Bearer {{secret:TOKEN}}", **{"X-Team": "{{secret:TEAM}}",
                                                               "X-Plain": "as is"})
    check_secret_config(config, resolver)
    filled = apply_header_secrets(config, resolver)
    assert dict(filled.headers) == {"Authorization": "Bearer t0ken-value", "X-Team": "blue",
                                    "X-Plain": "as is"}
    assert "t0ken-value" not in repr(filled)
    assert dict(config.headers)["Authorization"] == "Bearer {{secret:TOKEN}}"   # unchanged
    apply_header_secrets(config, resolver)
    assert resolver.asked == ["vault/x", "vault/x"]   # resolved afresh for each connection


@pytest.mark.parametrize(("secret", "problem"), [
    ({"OTHER": "x"}, "has no string key 'TOKEN'"),
    ({"TOKEN": "s3cr3t\r\nX-Injected: 1"}, "line break or NUL"),
    ({"TOKEN": "s3cr3t\0"}, "line break or NUL"),
])
def test_a_header_secret_that_cannot_go_in_a_header_names_the_key_only(
        secret: Mapping[str, str], problem: str) -> None:
    with pytest.raises(SecretError) as info:
        apply_header_secrets(_http(Authorization="Bearer {{secret:TOKEN}}"),
                             DictResolver({"vault/x": secret}))
    assert problem in str(info.value) and "'svc'" in str(info.value)
    assert "s3cr3t" not in str(info.value) and info.value.ref == "vault/x"


@pytest.mark.parametrize("cwd", ["{{secret_file}}", "/work/{{secret_file}}/run",
                                 "{{worktree_root}}/{{secret_file}}"])
def test_secret_file_in_cwd_is_refused(cwd: str) -> None:
    with pytest.raises(ConfigError) as info:
        _stdio(secret_ref="vault/x", cwd=cwd)
    message = str(info.value)
    assert "'svc'" in message and "cannot be used in cwd" in message
    assert "args or an env value" in message and "{{worktree_root}}" in message
    # Every later copy goes through the same check: replace() cannot sneak it in either.
    with pytest.raises(ConfigError, match="cannot be used in cwd"):
        dataclasses.replace(_stdio(secret_ref="vault/x", cwd="/ok"), cwd=cwd)
    # {{worktree_root}} alone stays allowed in cwd.
    assert _stdio(cwd="{{worktree_root}}/run").cwd == "{{worktree_root}}/run"


# -- secret files ------------------------------------------------------------------------

@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point tempfile at a directory of this test's own, to count what is left behind."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)   # else secret dirs would go there
    return tmp_path


@pytest.mark.parametrize("fmt", ["env", "properties", "json"])
def test_secret_file_is_private_and_holds_the_rendering(fmt: str, private_tmp: Path) -> None:
    kv = {"API_KEY": SECRET_MARK, "OTHER": "x y é 😀"}
    resolver = DictResolver({"vault/x": kv})
    secret = write_secret_file(_stdio(secret_ref="vault/x", secret_format=fmt), resolver)
    try:
        path = Path(secret.path)
        assert path.name == f"secret.{fmt}"
        assert path.parent.parent == private_tmp
        assert path.parent.name.startswith("mcpsync-secret-")
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.stat().st_uid == os.getuid()
        encoding = "latin-1" if fmt == "properties" else "utf-8"
        assert path.read_bytes() == render_secret(fmt, kv).encode(encoding)
        assert resolver.asked == ["vault/x"]
        assert SECRET_MARK not in repr(secret)
    finally:
        secret.remove()
    assert not path.exists()
    assert not path.parent.exists()


def test_mode_is_exact_whatever_the_umask(private_tmp: Path) -> None:
    resolver = DictResolver({"r": {"A": "b"}})
    for mask in (0o000, 0o277):
        old = os.umask(mask)
        try:
            secret = write_secret_file(_stdio(secret_ref="r"), resolver)
        finally:
            os.umask(old)
        assert stat.S_IMODE(os.stat(secret.path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(secret.path)).st_mode) == 0o700
        secret.remove()


def test_file_is_created_exclusively(private_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int, int]] = []
    real_open = os.open

    def recording_open(path: str, flags: int, mode: int = 0o777, **kw: Any) -> int:
        calls.append((path, flags, mode))
        return real_open(path, flags, mode, **kw)

    monkeypatch.setattr(os, "open", recording_open)
    secret = write_secret_file(_stdio(secret_ref="r"), DictResolver({"r": {"A": "b"}}))
    secret.remove()
    [(_path, flags, mode)] = [c for c in calls if c[0] == secret.path]
    wanted = os.O_CREAT | os.O_EXCL | os.O_WRONLY
    assert flags & wanted == wanted
    assert mode == 0o600


def test_each_spawn_gets_a_new_file(private_tmp: Path) -> None:
    resolver = DictResolver({"r": {"A": "b"}})
    first = write_secret_file(_stdio(secret_ref="r"), resolver)
    second = write_secret_file(_stdio(secret_ref="r"), resolver)
    assert os.path.dirname(first.path) != os.path.dirname(second.path)
    first.remove()
    assert os.path.exists(second.path)
    second.remove()
    assert list(private_tmp.iterdir()) == []


def test_remove_is_idempotent_and_never_raises(private_tmp: Path) -> None:
    secret = write_secret_file(_stdio(secret_ref="r"), DictResolver({"r": {"A": "b"}}))
    # The server may leave files of its own in the directory.
    Path(secret.path).with_name("server-cache").write_text("x")
    secret.remove()
    secret.remove()
    assert list(private_tmp.iterdir()) == []
    # Already deleted by someone else: still no error.
    other = write_secret_file(_stdio(secret_ref="r"), DictResolver({"r": {"A": "b"}}))
    os.unlink(other.path)
    os.rmdir(os.path.dirname(other.path))
    other.remove()


def test_remove_from_many_threads_at_once(private_tmp: Path) -> None:
    secret = write_secret_file(_stdio(secret_ref="r"), DictResolver({"r": {"A": "b"}}))
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def remove() -> None:
        barrier.wait(timeout=10)
        try:
            secret.remove()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=remove, name=f"mcpsync-test-remove-{i}", daemon=True)
               for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    assert list(private_tmp.iterdir()) == []


def test_resolver_failure_names_server_and_ref_but_no_value(private_tmp: Path) -> None:
    class Failing:
        def resolve(self, ref: str) -> Mapping[str, str]:
            raise RuntimeError(f"vault said: token {SECRET_MARK} expired")

    with pytest.raises(SecretError) as info:
        write_secret_file(_stdio(secret_ref="vault/prod"), Failing())
    err = info.value
    assert err.ref == "vault/prod"
    assert err.server == "svc"
    assert "'svc'" in str(err) and "'vault/prod'" in str(err) and "RuntimeError" in str(err)
    assert SECRET_MARK not in str(err)
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize("answer", [["A", "b"], {"BAD.KEY": SECRET_MARK},
                                    {"A": SECRET_MARK + "\0"}, None])
def test_bad_resolver_answers_are_secret_errors(answer: Any, private_tmp: Path) -> None:
    with pytest.raises(SecretError) as info:
        write_secret_file(_stdio(secret_ref="r"), DictResolver({"r": answer}))
    assert info.value.ref == "r"
    assert "'svc'" in str(info.value)
    assert SECRET_MARK not in str(info.value)
    assert list(private_tmp.iterdir()) == []


def test_unresolvable_ref_is_a_secret_error(private_tmp: Path) -> None:
    with pytest.raises(SecretError, match="'missing'"):
        write_secret_file(_stdio(secret_ref="missing"), DictResolver({}))


def _run_script(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, env=env)


def test_interpreter_exit_removes_files_not_yet_removed(tmp_path: Path) -> None:
    proc = _run_script("""
        from mcpsync.config import ServerConfig
        from mcpsync.secrets import write_secret_file

        class R:
            def resolve(self, ref):
                return {"A": "b"}

        config = ServerConfig(id="s", command="x", secret_ref="r")
        kept = write_secret_file(config, R())
        removed = write_secret_file(config, R())
        removed.remove()
        print(kept.path)
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    path = proc.stdout.strip()
    assert path.startswith(str(tmp_path))
    assert not os.path.exists(path)
    assert list(tmp_path.iterdir()) == []


def test_forked_child_leaves_the_parents_file_alone(tmp_path: Path) -> None:
    # The child exits normally, so its atexit hooks run too; the file must survive both
    # the child's remove() and its exit, then go when the parent exits.
    proc = _run_script("""
        import os, sys
        from mcpsync.config import ServerConfig
        from mcpsync.secrets import write_secret_file

        class R:
            def resolve(self, ref):
                return {"A": "b"}

        secret = write_secret_file(ServerConfig(id="s", command="x", secret_ref="r"), R())
        pid = os.fork()
        if pid == 0:
            secret.remove()
            sys.exit(0 if os.path.exists(secret.path) else 3)
        _, status = os.waitpid(pid, 0)
        print(secret.path)
        print(os.waitstatus_to_exitcode(status), os.path.exists(secret.path))
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    path, result = proc.stdout.strip().splitlines()
    assert result == "0 True"
    assert not os.path.exists(path)


def test_fork_in_process_child_remove_does_nothing(private_tmp: Path) -> None:
    secret = write_secret_file(_stdio(secret_ref="r"), DictResolver({"r": {"A": "b"}}))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            secret.remove()
            code = 0 if os.path.exists(secret.path) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.path.exists(secret.path)
    secret.remove()
    assert not os.path.exists(secret.path)


def test_a_child_forked_while_the_registry_is_locked_writes_its_own_files(
        private_tmp: Path) -> None:
    """A parent thread holding the registry lock at the fork must not hang the child: it
    gets a fresh lock and none of the parent's files."""
    import warnings

    import mcpsync.secrets as module

    parents = write_secret_file(_stdio(secret_ref="r"), DictResolver({"r": {"A": "b"}}))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with module._registry_lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(10)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            code = 1
            try:
                mine = write_secret_file(_stdio(secret_ref="r"), DictResolver({"r": {"C": "d"}}))
                module._remove_all_at_exit()          # the child's exit hook: its own file
                gone = not os.path.exists(mine.path)
                code = 0 if gone and os.path.exists(parents.path) else 2
            finally:
                os._exit(code)
        assert wait_child(pid, "the secret registry's lock") == 0
    finally:
        release.set()
        holder.join(10)
    assert os.path.exists(parents.path)
    parents.remove()


def test_secret_file_type_is_exported() -> None:
    assert SecretFile.__name__ == "SecretFile"


# -- placeholders ------------------------------------------------------------------------

def test_apply_placeholders_fills_args_env_and_cwd() -> None:
    config = _stdio(args=["--secrets={{secret_file}}", "{{worktree_root}}/src"],
                    env={"SECRETS": "{{secret_file}}", "ROOT": "{{worktree_root}}",
                         "DROP": None},
                    cwd="{{worktree_root}}/sub", secret_ref="r")
    filled = apply_placeholders(config, secret_file="/tmp/s/secret.env",
                                worktree_root="/work/tree")
    assert filled.args == ("--secrets=/tmp/s/secret.env", "/work/tree/src")
    assert dict(filled.env) == {"SECRETS": "/tmp/s/secret.env", "ROOT": "/work/tree",
                                "DROP": None}
    assert filled.cwd == "/work/tree/sub"
    assert filled.id == config.id and filled.secret_ref == "r"
    # The original is untouched (configs are values).
    assert config.args[0] == "--secrets={{secret_file}}"


def test_apply_placeholders_without_placeholders_returns_the_config() -> None:
    config = _stdio(args=["a"], env={"B": "c"})
    assert apply_placeholders(config) is config
    assert apply_placeholders(config, secret_file="/x", worktree_root="/y") is config


@pytest.mark.parametrize(("kwargs", "given", "problem"), [
    ({"args": ["{{secret_file}}"]}, {"worktree_root": "/w"}, "{{secret_file}}"),
    ({"env": {"A": "{{secret_file}}"}}, {}, "{{secret_file}}"),
    ({"args": ["{{worktree_root}}"]}, {"secret_file": "/s"}, "{{worktree_root}}"),
    ({"env": {"A": "{{worktree_root}}"}}, {}, "{{worktree_root}}"),
    ({"cwd": "{{worktree_root}}"}, {}, "{{worktree_root}}"),
])
def test_placeholder_without_value_is_a_config_error(kwargs: dict[str, Any],
                                                     given: dict[str, str],
                                                     problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_placeholders(_stdio(**kwargs), **given)
    assert problem in str(info.value)
    assert "server 'svc'" in str(info.value)
