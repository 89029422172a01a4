"""Connecting to a program that is not an MCP server fails fast and says so.

Real processes: one printing text lines, one printing a text file and then idling, one printing
nothing, one exiting at once. During the handshake the 10th stdout line that is not JSON-RPC
(before any answer) fails the connection at once; end of output fails at once; silence fails at
the handshake bound (``probe_timeout`` + ``timeout``). Every message quotes the first stdout
line and the stderr tail and says the program may not be an MCP server.
"""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest

import mcpsync

pytestmark = pytest.mark.timeout(60)

PROBE, TIMEOUT = 1.0, 2.0
BOUND = PROBE + TIMEOUT
TALKER = ("import sys, time\n"
          "sys.stderr.write('starting the web server\\n'); sys.stderr.flush()\n"
          "while True:\n"
          "    print('Listening on http://localhost:8080', flush=True)\n"
          "    time.sleep(0.05)\n")


def _connect_fails(argv: list[str]) -> tuple[float, BaseException]:
    start = time.monotonic()
    with pytest.raises(mcpsync.MCPError) as info:
        mcpsync.connect(argv, timeout=TIMEOUT, probe_timeout=PROBE)
    return time.monotonic() - start, info.value


def test_a_program_printing_text_fails_at_its_tenth_line(no_leaks: None) -> None:
    elapsed, error = _connect_fails([sys.executable, "-c", TALKER])
    print(f"text printer: {type(error).__name__} after {elapsed:.2f} s")
    assert isinstance(error, mcpsync.ProtocolError)
    text = str(error)
    assert "may not be an MCP server" in text
    assert "its first line on stdout was 'Listening on http://localhost:8080'" in text
    assert "(and 9 more such lines)" in text
    assert "starting the web server" in text            # the stderr tail
    assert elapsed < 10 * 0.05 + 1, elapsed             # well before the probe even times out


def test_a_text_file_then_silence_fails_at_the_handshake_bound(tmp_path: Path,
                                                               no_leaks: None) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("Shopping list\neggs\n")
    elapsed, error = _connect_fails(["sh", "-c", f"cat '{notes}'; echo 'no config' >&2; "
                                                 "exec sleep 60"])
    print(f"cat + sleep: {type(error).__name__} after {elapsed:.2f} s")
    assert isinstance(error, mcpsync.RequestTimeout)
    text = str(error)
    assert "may not be an MCP server" in text
    assert "its first line on stdout was 'Shopping list' (and 1 more such lines)" in text
    assert "no config" in text
    assert BOUND - 0.1 < elapsed < BOUND + 1, elapsed


def test_silence_fails_at_the_handshake_bound(no_leaks: None) -> None:
    elapsed, error = _connect_fails(["sleep", "60"])
    print(f"sleep 60: {type(error).__name__} after {elapsed:.2f} s")
    assert isinstance(error, mcpsync.RequestTimeout)
    assert "may not be an MCP server: it wrote nothing on stdout" in str(error)
    assert "(it wrote nothing to stderr)" in str(error)
    assert BOUND - 0.1 < elapsed < BOUND + 1, elapsed


def test_a_program_that_exits_at_once_fails_at_once(no_leaks: None) -> None:
    elapsed, error = _connect_fails(["true"])
    print(f"true: {type(error).__name__} after {elapsed:.2f} s")
    assert isinstance(error, mcpsync.ServerExited)
    assert "exited with code 0 before answering, so it may not be an MCP server: it wrote " \
           "nothing on stdout" in str(error)
    assert elapsed < 1, elapsed


def test_a_server_with_a_short_banner_on_stdout_still_connects(no_leaks: None) -> None:
    banner = ("print('demo server 1.0'); print('ready')\n"
              "import runpy; runpy.run_module('mcpsync.demo', run_name='__main__')")
    with mcpsync.connect([sys.executable, "-c", banner], timeout=10) as client:
        assert client.call_tool("echo", {"text": "ok"}).text == "ok"


# Answers server/discover with a result that is not modern (so the client falls back to
# initialize), then never answers initialize; on end of input it notes how it was stopped.
_STALLS_ON_INITIALIZE = textwrap.dedent("""
    import json, signal, sys
    marker = sys.argv[1]

    def stopped(how):
        with open(marker, "w") as f:
            f.write(how)
        sys.exit(0)

    signal.signal(signal.SIGTERM, lambda *_: stopped("SIGTERM"))
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("method") == "server/discover":
            print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}), flush=True)
    stopped("end of input")
""")


def test_a_server_that_answered_the_probe_is_not_called_no_mcp_server(
        tmp_path: Path, no_leaks: None) -> None:
    marker = tmp_path / "stopped"
    elapsed, error = _connect_fails([sys.executable, "-c", _STALLS_ON_INITIALIZE, str(marker)])
    print(f"answers the probe, stalls on initialize: {type(error).__name__} after "
          f"{elapsed:.2f} s")
    assert isinstance(error, mcpsync.RequestTimeout)
    text = str(error)
    assert "initialize" in text
    assert "may not be an MCP server" not in text and "wrote nothing" not in text, text
    # It speaks JSON-RPC, so it gets the MCP shutdown: end of input, then time to exit.
    assert marker.read_text() == "end of input"
