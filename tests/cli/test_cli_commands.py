"""End to end: the ``describe`` and ``prompt`` commands, the checks ``call`` makes before
calling, every content block of a result, progress, cut tables and the hints of the error
lines, run as a user runs them (``python -m mcpsync`` in a subprocess) against real servers:
the demo, the proxy peer, and ``@modelcontextprotocol/server-everything`` over stdio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import IN_CI, PEERS
from http_peers.everything import ENTRY, NODE

pytestmark = pytest.mark.timeout(120)

PY = sys.executable


@pytest.fixture
def config(tmp_path: Path) -> Path:
    servers = {
        "demo": {"command": PY, "args": ["-m", "mcpsync.demo"]},
        "peer": {"command": PY, "args": [str(PEERS / "proxy_server.py")]},
        "everything": {"command": str(NODE), "args": [str(ENTRY), "stdio"]},
        "hostile": {"command": PY, "args": [str(PEERS / "hostile_server.py")]},
    }
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


@pytest.fixture
def everything() -> None:
    if not (NODE.exists() and ENTRY.exists()):
        why = f"server-everything is not installed under {NODE.parents[3]}"
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


def mcpsync(config: Path, *args: str, columns: int | None = None
            ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MCPSYNC_CONFIG", "COLUMNS")}
    env["XDG_CONFIG_HOME"] = str(config.parent / "xdg")
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([PY, "-m", "mcpsync", "--config", str(config), *args],
                          cwd=config.parent, env=env, capture_output=True, text=True,
                          timeout=90)


def error_line(res: subprocess.CompletedProcess[str], code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mcpsync: error: "), res.stderr
    return lines[0]


def test_describe_shows_the_arguments(config: Path) -> None:
    res = mcpsync(config, "describe", "peer", "get-sum")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "get-sum  (server peer)\n\n  Add a and b.\n\n"
        "ARGUMENT  TYPE     REQUIRED  DESCRIPTION\n"
        "a         integer  yes       the first number\n"
        "b         integer  no        the second number\n")
    doc = json.loads(mcpsync(config, "describe", "demo", "add", "--json").stdout)
    assert doc["server"] == "demo" and doc["inputSchema"]["required"] == ["a", "b"]
    line = error_line(mcpsync(config, "describe", "demo", "ad"), 2)
    assert line == ("mcpsync: error: server 'demo' has no tool 'ad'; did you mean 'add'? "
                    "(list them with 'mcpsync tools demo')")


def test_call_checks_names_and_arguments_before_calling(config: Path) -> None:
    assert error_line(mcpsync(config, "call", "demo", "add", "a=1"), 2) == (
        "mcpsync: error: tool 'add' of server 'demo' needs argument 'b' "
        "(see 'mcpsync describe demo add')")
    assert "did you mean 'echo'?" in error_line(mcpsync(config, "call", "demo", "ecko"), 2)
    # additionalProperties: false makes an unknown argument a usage error too.
    line = error_line(mcpsync(config, "call", "peer", "get-sum", "a=1", "bb=2"), 2)
    assert "takes no argument 'bb'; did you mean 'b'?" in line
    line = error_line(mcpsync(config, "call", "dem", "add", "a=1", "b=2"), 2)
    assert "'dem' is not a server id" in line and "did you mean 'demo'?" in line


def test_call_shows_every_block_and_saves_blobs(config: Path, tmp_path: Path) -> None:
    res = mcpsync(config, "call", "peer", "picture")
    assert res.returncode == 0, res.stderr
    assert res.stdout == ("a picture:\n<image, 70 bytes, image/png>\n"
                          "<audio, 8 bytes, audio/wav>\nfile:///tmp/picture.png\n")
    out = tmp_path / "blobs"
    out.mkdir()
    res = mcpsync(config, "call", "peer", "picture", "--output", str(out))
    assert f"<image, 70 bytes, image/png, saved to {out}/image-2.png>" in res.stdout
    saved = (out / "image-2.png").read_bytes()
    assert saved.startswith(b"\x89PNG") and len(saved) == 70
    assert (out / "audio-3.wav").read_bytes() == b"RIFF0000"
    # Run again into the same folder: the next free names, the earlier files untouched.
    res = mcpsync(config, "call", "peer", "picture", "--output", str(out))
    assert res.returncode == 0, res.stderr
    assert f"<image, 70 bytes, image/png, saved to {out}/image-2-2.png>" in res.stdout
    assert f"<audio, 8 bytes, audio/wav, saved to {out}/audio-3-2.wav>" in res.stdout
    assert (out / "image-2-2.png").read_bytes() == saved
    assert sorted(p.name for p in out.iterdir()) == ["audio-3-2.wav", "audio-3.wav",
                                                     "image-2-2.png", "image-2.png"]
    assert "not a directory" in error_line(
        mcpsync(config, "call", "peer", "picture", "--output", str(tmp_path / "none")), 2)


def test_call_prints_progress_on_stderr(config: Path) -> None:
    res = mcpsync(config, "call", "demo", "slow", "seconds=0.3", "steps=3", "--progress")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "done: 3 steps in 0.3 s\n"
    assert res.stderr.splitlines() == ["progress: slow: 1/3 step 1/3",
                                       "progress: slow: 2/3 step 2/3",
                                       "progress: slow: 3/3 step 3/3"]


def test_progress_is_one_line_rewritten_on_a_terminal(config: Path) -> None:
    import pty

    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [PY, "-m", "mcpsync", "--config", str(config), "call", "demo", "slow",
             "seconds=0.3", "steps=3"], cwd=config.parent, stdout=subprocess.PIPE,
            stderr=follower, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if k != "MCPSYNC_CONFIG"})
        os.close(follower)
        follower = -1
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:   # EIO: the terminal's other end is closed
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    assert proc.returncode == 0 and proc.stdout == "done: 3 steps in 0.3 s\n"
    text = seen.decode()
    assert "\rslow: 1/3 step 1/3\x1b[K" in text and "\rslow: 3/3 step 3/3\x1b[K" in text
    assert text.endswith("\r\x1b[K")   # the line is cleared once the call is done
    assert "\n" not in text.replace("\r\n", "")


TITLE, ERASE = "\x1b]0;PWNED\x07", "\x1b[2K\r"
HOSTILE = f"x{TITLE}"


def _on_a_terminal(config: Path, *args: str) -> tuple[int, str, str]:
    """``mcpsync ARGS`` with stdout on a pseudo-terminal: (exit code, what the terminal got
    (line ends as sent), stderr)."""
    import pty

    leader, follower = pty.openpty()
    try:
        import termios

        attrs = termios.tcgetattr(follower)
        attrs[1] &= ~termios.OPOST            # no "\n" -> "\r\n" on the way out
        termios.tcsetattr(follower, termios.TCSANOW, attrs)
        env = {k: v for k, v in os.environ.items() if k not in ("MCPSYNC_CONFIG", "COLUMNS")}
        env["XDG_CONFIG_HOME"] = str(config.parent / "xdg")
        proc = subprocess.Popen([PY, "-m", "mcpsync", "--config", str(config), *args],
                                cwd=config.parent, stdout=follower, stderr=subprocess.PIPE,
                                env=env)
        os.close(follower)
        follower = -1
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:   # EIO: the terminal's other end is closed
                break
            if not chunk:
                break
            seen += chunk
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        proc.stderr.close()
        code = proc.wait(timeout=60)
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    return code, seen.decode(), err


def test_server_text_cannot_control_the_terminal(config: Path) -> None:
    res = mcpsync(config, "tools", "hostile")
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout and "\r" not in res.stdout
    assert "hostile  x\\x1b]0;PWNED\\x07  Shows\\x1b[2K\n" in res.stdout, res.stdout
    res = mcpsync(config, "describe", "hostile", HOSTILE)
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout and "\r" not in res.stdout
    assert res.stdout.startswith("x\\x1b]0;PWNED\\x07  (server hostile)\n\n"
                                 "  Shows\\x1b[2K\n   escapes.\n"), res.stdout   # \r: a break
    assert "arg\\x1b]0;PWNED\\x07  string  no        an\\x1b[2K argument" in res.stdout
    # To a pipe a tool's text is passed on as sent; the labels around blobs never are.
    res = mcpsync(config, "call", "hostile", HOSTILE, "--progress")
    assert res.returncode == 0, res.stderr
    # (text=True reads the "\r" of ERASE as a line end)
    assert res.stdout == (f"line one{TITLE}\n\tline two\x1b[2K\n\u202eend\n"
                          "<image, 6 bytes, image/gif\\x1b[2K\\x0d>\n"
                          "file:///tmp/x\\x1b]0;PWNED\\x07\n")
    assert res.stderr == "progress: x\\x1b]0;PWNED\\x07: 1/2 step\\x1b]0;PWNED\\x07\n"
    # On a terminal the text is escaped too, keeping its newline and tab.
    code, shown, err = _on_a_terminal(config, "call", "hostile", HOSTILE)
    assert code == 0, err
    assert shown == ("line one\\x1b]0;PWNED\\x07\n\tline two\\x1b[2K\\x0d\\u202eend\n"
                     "<image, 6 bytes, image/gif\\x1b[2K\\x0d>\n"
                     "file:///tmp/x\\x1b]0;PWNED\\x07\n"), repr(shown)


def test_tables_are_cut_to_the_terminal_width(config: Path) -> None:
    res = mcpsync(config, "tools", "demo", columns=40)
    lines = res.stdout.splitlines()
    assert max(len(line) for line in lines) <= 40
    assert lines[2] == "demo    add   Add two numbers; the su..."   # 40 wide
    wide = mcpsync(config, "tools", "demo").stdout.splitlines()
    assert wide[2].endswith('{"sum": a + b}.')   # a pipe: never cut


def test_prompt_and_resources_hints(config: Path) -> None:
    line = error_line(mcpsync(config, "prompt", "demo", "greet"), 2)
    assert line == ("mcpsync: error: server 'demo' has no prompt 'greet' (list them with "
                    "'mcpsync prompts demo')")
    line = error_line(mcpsync(config, "read", "demo", "file:///x"), 1)
    assert line.endswith("(list them with 'mcpsync resources demo')")
    # A server without prompts lists none (exit 0), as the library does.
    assert mcpsync(config, "prompts", "demo").stdout == "SERVER  PROMPT  DESCRIPTION\n"


def test_help_has_examples(config: Path) -> None:
    for command, example in (("describe", "mcpsync describe demo add"),
                             ("prompt", "mcpsync prompt SERVER greeting name=Ada"),
                             ("call", "--output ./shots")):
        res = mcpsync(config, command, "--help")
        assert res.returncode == 0 and "examples:" in res.stdout and example in res.stdout


def test_against_server_everything(config: Path, everything: None, tmp_path: Path) -> None:
    res = mcpsync(config, "prompt", "everything", "args-prompt", "city=Paris")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("[user] ") and "Paris" in res.stdout
    line = error_line(mcpsync(config, "prompt", "everything", "args-prompt"), 2)
    assert "needs argument 'city'" in line
    assert "did you mean 'args-prompt'?" in error_line(
        mcpsync(config, "prompt", "everything", "args-promt", "city=x"), 2)
    res = mcpsync(config, "describe", "everything", "get-sum")
    assert res.returncode == 0, res.stderr
    assert "ARGUMENT" in res.stdout and " yes " in res.stdout
    out = tmp_path / "img"
    out.mkdir()
    res = mcpsync(config, "call", "everything", "get-tiny-image", "--output", str(out))
    assert res.returncode == 0, res.stderr
    assert "<image, " in res.stdout and "image/png, saved to" in res.stdout
    (png,) = out.iterdir()
    assert png.read_bytes().startswith(b"\x89PNG")
    res = mcpsync(config, "call", "everything", "get-resource-links", "count=2")
    assert res.returncode == 0, res.stderr
    assert sum(line.startswith("demo://") for line in res.stdout.splitlines()) == 2, res.stdout
