"""``receive()`` reads through stdout's own file object (its ``readinto``), which is closed
with stdout and only there: nothing else holds the descriptor."""

from __future__ import annotations

import json
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


def test_receive_reads_through_stdouts_file_object_closed_once(no_leaks: None) -> None:
    t = StdioTransport([sys.executable, "-c", RAW_ECHO], name="raw")
    t.start()
    stdout = t._proc.stdout  # type: ignore[union-attr]
    assert stdout is not None
    # The bound readinto of the pipe's own (unbuffered) file object: nothing else to close.
    assert t._read_into == stdout.readinto and t._read_into.__self__ is stdout  # type: ignore[attr-defined]
    t.send_bytes_until(json.dumps({"x": 1}).encode(), math.inf)
    assert [m.result for m in _answers(t, 1)] == [{"raw": '{"x": 1}\n'}]
    t.close()
    assert stdout.closed and t._stdout_fd == -1
    assert t.receive(0.1) is None   # after close: nothing is read, no error


def test_the_eager_read_misses_and_hits_as_before(no_leaks: None) -> None:
    """readinto() answers None where os.readv() raised BlockingIOError: a read before the
    poll that finds nothing still backs off, and one that finds the line decodes it."""
    t = StdioTransport([sys.executable, "-c", RAW_ECHO], name="raw")
    t.start()
    try:
        t._skip_eager = t._eager_misses = 0
        assert t.receive(0.05) == []   # nothing written: the read first finds nothing
        assert (t._eager_misses, t._skip_eager) == (1, 1)
        t.send_bytes_until(b'{"y":2}', math.inf)
        time.sleep(0.3)   # the answer is in the pipe before the next receive()
        t._skip_eager = 0
        items = t.receive(5.0)
        assert items is not None and [m.result for m in items] == [  # type: ignore[union-attr]
            {"raw": '{"y":2}\n'}]
        assert (t._eager_misses, t._skip_eager) == (0, 0)   # read without a poll
    finally:
        t.close()
