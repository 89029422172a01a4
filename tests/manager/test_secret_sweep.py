"""Secret directories a SIGKILLed host left behind are swept by the next Manager, and only
those: a live creator's, a foreign one, a symlink or an unparseable name are kept.

Every test points ``$XDG_RUNTIME_DIR`` and the temporary directory at its own folders, so no
test ever sweeps the machine's real directories.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpsync import _secret_dirs
from mcpsync.config import ServerConfig
from mcpsync.manager import Manager

from .test_manager import pid_gone, wait_for, write_helper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="start times come from /proc (Linux)")


class _Resolver:
    def resolve(self, ref: str) -> dict[str, str]:
        return {"K": "v"}


def _start_time(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[19].decode()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0].decode()


NAMESPACE = str(os.stat("/proc/self/ns/pid").st_ino) if os.path.exists("/proc/self/ns/pid") \
    else ""


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """(runtime dir, temp dir), both private to this test and used by this process."""
    runtime, temp = tmp_path / "runtime", tmp_path / "tmp"
    runtime.mkdir(mode=0o700)
    temp.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    yield runtime, temp


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True, timeout=30)
    return int(proc.stdout)


@pytest.mark.timeout(60)
def test_dir_of_a_sigkilled_host_is_swept_by_the_next_manager(
        no_leaks: None, places: tuple[Path, Path], tmp_path: Path) -> None:
    runtime, temp = places
    helper = write_helper(tmp_path)
    script = tmp_path / "host.py"
    script.write_text(textwrap.dedent(f"""
        import time
        from mcpsync.config import ServerConfig
        from mcpsync.manager import Manager

        class Resolver:
            def resolve(self, ref):
                return {{"K": "v"}}

        m = Manager(Resolver())
        m.start_server(ServerConfig(id="a", command={helper[0]!r}, args=[{helper[1]!r}],
                                    secret_ref="ref", env={{"P": "{{{{secret_file}}}}"}}))
        print(m.call_tool("a", "getenv", {{"name": "P"}}).text, m.client("a").pid, flush=True)
        time.sleep(120)
    """), encoding="utf-8")
    host = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        assert host.stdout is not None
        path, server_pid = host.stdout.readline().split()
        directory = Path(path).parent
        # In the runtime dir, named after the host: pid, start time, pid namespace.
        assert directory.parent == runtime
        assert re.fullmatch(rf"mcpsync-secret-{host.pid}-{_start_time(host.pid)}-"
                            rf"{NAMESPACE}-[A-Za-z0-9_]+", directory.name), directory.name
        # A Manager started while the host lives leaves its directory alone.
        with Manager():
            pass
        assert Path(path).read_text(encoding="utf-8") == "K=v\n"
        host.send_signal(signal.SIGKILL)
        assert host.wait(timeout=10) == -signal.SIGKILL
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        if host.stdout is not None:
            host.stdout.close()
    # The server saw its stdin close and went; nothing cleaned up after the host.
    assert wait_for(lambda: pid_gone(int(server_pid)), timeout=15)
    assert directory.exists() and Path(path).exists()
    with Manager():
        pass
    assert not directory.exists()
    assert os.listdir(runtime) == [] and os.listdir(temp) == []


def _make(base: Path, name: str, mode: int = 0o700) -> Path:
    path = base / name
    path.mkdir()
    (path / "secret.env").write_text("K=v\n", encoding="utf-8")
    os.chmod(path, mode)
    return path


@pytest.mark.timeout(30)
def test_only_provably_dead_creators_are_swept(places: tuple[Path, Path],
                                               tmp_path: Path) -> None:
    runtime, temp = places
    dead, me = _dead_pid(), os.getpid()
    mine = _start_time(me)
    other = str(int(mine) + 1)
    swept = [
        _make(runtime, f"mcpsync-secret-{dead}-{mine}-{NAMESPACE}-gone"),
        # Our pid but another start time: the pid was reused, its creator is gone.
        _make(runtime, f"mcpsync-secret-{me}-{other}-{NAMESPACE}-reused"),
        # The other place a secret directory may be (TMPDIR when there was no runtime dir).
        _make(temp, f"mcpsync-secret-{dead}-1-{NAMESPACE}-intmp"),
    ]
    elsewhere = _make(tmp_path, "target")
    kept = [
        _make(runtime, f"mcpsync-secret-{me}-{mine}-{NAMESPACE}-alive"),
        _make(runtime, f"mcpsync-secret-{dead}-1-{NAMESPACE}-widemode", 0o755),
        _make(runtime, f"mcpsync-secret-{dead}-1-{NAMESPACE}-groupmode", 0o750),
        _make(runtime, f"mcpsync-secret-{dead}-1-1-otherpidns"),
        _make(runtime, "mcpsync-secret-oldstyle_x1"),
        _make(runtime, f"mcpsync-secret-{dead}-x-{NAMESPACE}-nostart"),
        _make(runtime, f"mcpsync-secret-{dead}-1-{NAMESPACE}-bad.name"),
    ]
    link = runtime / f"mcpsync-secret-{dead}-1-{NAMESPACE}-link"
    link.symlink_to(elsewhere)
    plain = runtime / f"mcpsync-secret-{dead}-1-{NAMESPACE}-file"
    plain.write_text("not a directory", encoding="utf-8")
    os.chmod(plain, 0o700)
    kept += [link, plain]
    if os.geteuid() == 0:
        foreign = _make(runtime, f"mcpsync-secret-{dead}-1-{NAMESPACE}-foreign")
        os.chown(foreign, 65534, 65534)
        kept.append(foreign)

    removed = _secret_dirs.sweep()
    assert sorted(removed) == sorted(str(p) for p in swept)
    assert not any(os.path.lexists(p) for p in swept)
    assert all(os.path.lexists(p) for p in kept)
    assert (elsewhere / "secret.env").exists()      # the link was not followed
    assert _secret_dirs.sweep() == []               # nothing more to do


@pytest.mark.timeout(30)
def test_a_zombie_creator_counts_as_dead(places: tuple[Path, Path]) -> None:
    runtime, _temp = places
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = _start_time(child.pid)
        live = _make(runtime, f"mcpsync-secret-{child.pid}-{start}-{NAMESPACE}-child")
        assert _secret_dirs.sweep() == [] and live.exists()
        os.kill(child.pid, signal.SIGKILL)
        assert wait_for(lambda: _state(child.pid) == "Z")   # dead, not yet reaped
        assert _secret_dirs.sweep() == [str(live)]
    finally:
        child.kill()
        child.wait()


def test_secret_files_prefer_a_private_runtime_dir(places: tuple[Path, Path],
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from mcpsync.secrets import write_secret_file

    runtime, temp = places
    config = ServerConfig(id="svc", command="x", secret_ref="r")
    secret = write_secret_file(config, _Resolver())
    try:
        assert Path(secret.directory).parent == runtime
        assert stat.S_IMODE(os.stat(secret.directory).st_mode) == 0o700
    finally:
        secret.remove()
    # A runtime dir others can enter, a relative one, or a missing one is not used.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    for value in (str(shared), "relative/dir", str(tmp_path / "missing")):
        monkeypatch.setenv("XDG_RUNTIME_DIR", value)
        secret = write_secret_file(config, _Resolver())
        try:
            assert Path(secret.directory).parent == temp, value
        finally:
            secret.remove()
    assert os.listdir(shared) == [] and os.listdir(temp) == []
