"""The child's environment and command resolution (pure functions, incl. Windows logic)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mcpsync.errors import ConfigError
from mcpsync.transport.stdio._env import build_env, resolve_argv, resolve_windows, windows_argv

POSIX_ENV = {
    "HOME": "/home/u", "LOGNAME": "u", "PATH": "/usr/bin", "SHELL": "/bin/sh", "TERM": "xterm",
    "USER": "u", "LANG": "C.UTF-8", "LC_ALL": "C", "LC_CTYPE": "C", "TMPDIR": "/tmp",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t", "VIRTUAL_ENV": "/venv", "BASH_FUNC_f%%": "() { :; }",
    "LC_EVIL": "() { :; }",
}

WINDOWS_ENV = {
    "AppData": r"C:\Users\u\AppData\Roaming", "Path": r"C:\Windows;C:\bin",
    "PATHEXT": ".COM;.EXE;.BAT;.CMD", "SystemRoot": r"C:\Windows", "USERPROFILE": r"C:\Users\u",
    "TEMP": r"C:\Temp", "GITHUB_TOKEN": "ghp_x", "HOME": r"C:\Users\u",
}


def test_posix_default_is_the_safe_set() -> None:
    env = build_env(None, environ=POSIX_ENV, windows=False)
    assert env == {k: v for k, v in POSIX_ENV.items()
                   if k not in ("AWS_SECRET_ACCESS_KEY", "VIRTUAL_ENV", "BASH_FUNC_f%%",
                                "LC_EVIL")}


def test_config_env_goes_on_top_and_none_removes() -> None:
    env = build_env({"PATH": "/opt/bin", "TOKEN": "t", "TERM": None, "ABSENT": None},
                    environ=POSIX_ENV, windows=False)
    assert env["PATH"] == "/opt/bin" and env["TOKEN"] == "t"
    assert "TERM" not in env and "ABSENT" not in env
    assert env["HOME"] == "/home/u"  # the user's env adds to the safe set, never replaces it


def test_inherit_env_passes_everything_with_env_on_top() -> None:
    env = build_env({"VIRTUAL_ENV": None, "X": "1"}, inherit_env=True, environ=POSIX_ENV,
                    windows=False)
    assert env["AWS_SECRET_ACCESS_KEY"] == "s3cr3t" and env["X"] == "1"
    assert "VIRTUAL_ENV" not in env


def test_defaults_come_from_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCPSYNC_ENV_TEST", "no")
    monkeypatch.setenv("PATH", "/some/where")
    env = build_env(None)
    assert env["PATH"] == "/some/where" and "MCPSYNC_ENV_TEST" not in env


def test_windows_safe_set_is_case_insensitive() -> None:
    env = build_env({"path": r"D:\tools", "TEMP": None}, environ=WINDOWS_ENV, windows=True)
    assert env == {
        "AppData": r"C:\Users\u\AppData\Roaming", "path": r"D:\tools",
        "PATHEXT": ".COM;.EXE;.BAT;.CMD", "SystemRoot": r"C:\Windows",
        "USERPROFILE": r"C:\Users\u",
    }


# ---------------------------------------------------------------- POSIX resolution


def _exe(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_bare_command_is_found_on_the_childs_path(tmp_path: Path) -> None:
    tool = _exe(tmp_path / "tool")
    assert resolve_argv(["tool", "-x"], {"PATH": str(tmp_path)}, windows=False) == [
        str(tool), "-x"]


def test_not_found_names_the_command_and_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_argv(["tool"], {"PATH": "/a:/b"}, windows=False)
    assert "'tool'" in str(info.value) and "/a:/b" in str(info.value)
    with pytest.raises(ConfigError, match='PATH searched: ""'):
        resolve_argv(["tool"], {}, windows=False)


def test_command_with_separator_is_relative_to_cwd(tmp_path: Path) -> None:
    _exe(tmp_path / "srv")
    assert resolve_argv(["./srv"], {"PATH": ""}, cwd=str(tmp_path), windows=False) == ["./srv"]
    with pytest.raises(ConfigError, match="no such file"):
        resolve_argv(["./srv"], {"PATH": ""}, cwd=os.path.dirname(tmp_path), windows=False)


def test_missing_cwd_and_empty_command_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cwd"):
        resolve_argv(["sh"], {"PATH": "/bin"}, cwd=str(tmp_path / "nope"), windows=False)
    with pytest.raises(ConfigError, match="empty"):
        resolve_argv([], {"PATH": "/bin"}, windows=False)
    assert issubclass(ConfigError, ValueError)


@pytest.mark.skipif(sys.platform == "win32", reason="the POSIX lookup")
def test_the_path_lookup_answers_as_shutil_which(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # The lookup is written out so that a connection does not load shutil: it must find
    # what shutil.which finds, in the same order, for every kind of PATH entry.
    import shutil

    from mcpsync.transport.stdio._env import _which

    first, second, plain, folder = (tmp_path / n for n in ("first", "second", "plain", "dir"))
    for d in (first, second, plain, folder):
        d.mkdir()
    _exe(second / "tool")
    _exe(first / "both")
    _exe(second / "both")
    (plain / "tool").write_text("not executable\n")
    (plain / "both").write_text("not executable\n")
    (folder / "tool").mkdir()
    (second / "link").symlink_to(second / "tool")
    (second / "dangling").symlink_to(second / "nowhere")
    _exe(tmp_path / "here")
    monkeypatch.chdir(tmp_path)
    paths = ["", ":", os.pathsep.join(map(str, (plain, folder, second, first))),
             os.pathsep.join(map(str, (first, second))), f"{plain}::{second}",
             f"{second}{os.sep}:{second}", "first:second", "dir:second", str(tmp_path / "nope"),
             f"{first}:{first}:{second}"]
    for path in paths:
        for command in ("tool", "both", "link", "dangling", "here", "missing", "dir", "."):
            assert _which(command, path) == shutil.which(command, path=path), (command, path)


# ---------------------------------------------------------------- Windows resolution logic


def fake_fs(*files: str) -> Callable[[str], bool]:
    """A case-insensitive file system holding exactly ``files`` (as on Windows)."""
    present = {f.lower() for f in files}
    return lambda p: p.lower() in present


def test_windows_tries_pathext_in_order_along_path() -> None:
    isfile = fake_fs(r"C:\bin\npx.cmd", r"C:\bin\npx.exe", r"C:\Windows\npx.bat")
    found = resolve_windows("npx", r"C:\Windows;C:\bin", pathext=".COM;.EXE;.BAT;.CMD",
                            isfile=isfile)
    assert found == r"C:\Windows\npx.BAT"  # the first directory wins, then PATHEXT order
    found = resolve_windows("npx", r"C:\bin", pathext=".COM;.EXE;.BAT;.CMD", isfile=isfile)
    assert found == r"C:\bin\npx.EXE"


def test_windows_name_with_extension_and_quoted_path_entries() -> None:
    isfile = fake_fs(r"C:\Program Files\node\node.exe")
    assert resolve_windows("node.exe", r'"C:\Program Files\node"', pathext=".EXE",
                           isfile=isfile) == r"C:\Program Files\node\node.exe"
    assert resolve_windows("nothere", r"C:\x", pathext=".EXE", isfile=isfile) is None


def test_windows_command_with_separator_is_relative_to_cwd() -> None:
    isfile = fake_fs(r"D:\proj\tools\srv.cmd")
    assert resolve_windows(r"tools\srv", r"C:\bin", pathext=".CMD", cwd="D:\\proj",
                           isfile=isfile) == r"D:\proj\tools\srv.CMD"
    assert resolve_windows(r"D:\proj\tools\srv.cmd", "", cwd="E:\\",
                           isfile=isfile) == r"D:\proj\tools\srv.cmd"


def test_batch_files_run_through_cmd_exe() -> None:
    assert windows_argv(r"C:\bin\npx.CMD", ["-y", "srv"], comspec=r"C:\Windows\cmd.exe") == [
        r"C:\Windows\cmd.exe", "/c", r"C:\bin\npx.CMD", "-y", "srv"]
    assert windows_argv(r"C:\bin\node.exe", ["a"]) == [r"C:\bin\node.exe", "a"]


def test_resolve_argv_in_windows_mode_uses_the_childs_path_and_pathext(tmp_path: Path) -> None:
    # resolve_argv(windows=True) looks up the child's "Path" (any case) with its PATHEXT.
    env = {"Path": r"C:\nowhere", "PATHEXT": ".EXE;.CMD", "ComSpec": r"C:\Windows\cmd.exe"}
    with pytest.raises(ConfigError) as info:
        resolve_argv(["npx", "-y"], env, windows=True)
    assert "npx" in str(info.value) and r"C:\nowhere" in str(info.value)
