"""``receive(timeout)`` hands ``poll()`` the same milliseconds for every timeout as
``max(0, int(timeout * 1000 + 0.999))``, which it computed before (it now avoids the two
builtin calls, on the path most reads take natively)."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

from mcpsync.transport.stdio import StdioTransport

TIMEOUTS = [0.0, -0.0, 1e-9, 5e-4, 1e-3, 1e-3 + 1e-12, 1e-3 - 1e-12, 5.0005e-3, 0.0999, 0.1,
            0.25, 1.0, 12.3456, 86400.0, -1e-9, -0.5, -3.0]


class _Recorder:
    def __init__(self) -> None:
        self.asked: list[object] = []

    def poll(self, timeout: object = None) -> list[tuple[int, int]]:
        self.asked.append(timeout)
        return []


def test_the_poll_gets_what_max_of_int_gave(tmp_path: Path, no_leaks: None) -> None:
    path = tmp_path / "quiet.py"
    path.write_text("import sys\nsys.stdin.read()\n")
    t = StdioTransport([sys.executable, str(path)], name="quiet")
    t.start()
    real = t._poller
    recorder = _Recorder()
    rng = random.Random(5)
    timeouts = TIMEOUTS + [rng.uniform(-2, 2) for _ in range(2000)] + [
        rng.uniform(0, 0.003) for _ in range(2000)]
    try:
        t._poller = recorder  # type: ignore[assignment]
        for timeout in timeouts:
            t._skip_eager = 1   # poll at once, without the read that comes first
            assert t.receive(timeout) == []
        t._skip_eager = 1
        with pytest.raises(OverflowError):   # as int(-inf) raised
            t.receive(-math.inf)
    finally:
        t._poller = real
        t.close()
    want = [max(0, int(timeout * 1000 + 0.999)) for timeout in timeouts]
    assert recorder.asked == want
    assert all(type(ms) is int for ms in recorder.asked)
