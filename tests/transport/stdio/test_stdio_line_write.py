"""``StdioTransport.send_bytes_until(..., ended=True)`` writes a line that already ends with
its newline as it is (the session's tool calls are serialised so); without it, the frame
gets its newline as before."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import pytest

from mcpsync.transport.stdio import StdioTransport

pytestmark = pytest.mark.timeout(60)

# Answers each raw line it reads (blank ones too) with what the line was, byte for byte.
RAW_ECHO = r'''
import json, sys
n = 0
for raw in sys.stdin.buffer:
    n += 1
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": n,
                                 "result": {"raw": raw.decode("latin-1")}}) + "\n")
    sys.stdout.flush()
'''


def _answers(t: StdioTransport, count: int) -> list[Any]:
    """The next ``count`` items read (one read may hold several lines)."""
    got: list[Any] = []
    deadline = time.monotonic() + 10
    while len(got) < count and time.monotonic() < deadline:
        items = t.receive(1.0)
        assert items is not None, "the server's stdout ended"
        got.extend(items)
    assert len(got) == count, got
    return got


def test_an_ended_line_is_written_as_it_is_and_a_frame_gets_its_newline(
        no_leaks: None) -> None:
    t = StdioTransport([sys.executable, "-c", RAW_ECHO], name="raw")
    t.start()
    try:
        frame = b'{"jsonrpc":"2.0","method":"x","params":{"a":1}}'
        t.send_bytes_until(frame + b"\n", math.inf, True)
        t.send_bytes_until(frame, math.inf)
        t.send_bytes_until(frame, time.monotonic() + 5, False)
        seen = _answers(t, 3)
        # Three lines, each the frame and one newline: no blank line, nothing glued.
        assert [(m.id.value, m.result) for m in seen] == [
            (n, {"raw": frame.decode() + "\n"}) for n in (1, 2, 3)]
    finally:
        t.close()
