"""What ``receive()`` does after its poll, for each set of ready descriptors: stdout alone
(the usual wake-up, decided without a loop), the wake-up pipe alone, both at once, and the
server gone (its pidfd) with stdout held open by a grandchild."""

from __future__ import annotations

import errno
import math
import os
import sys
import time

import pytest

from mcpsync.transport.stdio import StdioTransport

pytestmark = pytest.mark.timeout(60)

# Answers each line with {"id": n, "result": {"n": n}}.
COUNTER = r'''
import sys
n = 0
for raw in sys.stdin.buffer:
    n += 1
    sys.stdout.write('{"jsonrpc":"2.0","id":%d,"result":{"n":%d}}\n' % (n, n))
    sys.stdout.flush()
'''

# Leaves a grandchild holding stdout, then exits.
ESCAPES = r'''
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], stdout=sys.stdout)
sys.stdout.write('{"jsonrpc":"2.0","id":1,"result":{"n":1}}\n')
sys.stdout.flush()
os._exit(0)
'''


def _polling(t: StdioTransport) -> StdioTransport:
    t._skip_eager = 10**9   # every receive() polls first, as natively
    return t


def _wake_pipe_empty(t: StdioTransport) -> bool:
    try:
        os.read(t._wake_r, 1)
    except OSError as exc:
        return exc.errno == errno.EAGAIN
    return False


def test_stdout_alone_wake_alone_and_both(no_leaks: None) -> None:
    t = _polling(StdioTransport([sys.executable, "-c", COUNTER], name="counter"))
    t.start()
    try:
        t.send_bytes_until(b'{"a":1}', math.inf)
        items = t.receive(5.0)   # stdout alone: read and decoded
        assert items is not None and [m.result for m in items] == [  # type: ignore[union-attr]
            {"n": 1}]
        t.wake()
        assert t.receive(5.0) == []   # the wake-up alone: drained, nothing read
        assert _wake_pipe_empty(t)
        t.send_bytes_until(b'{"a":2}', math.inf)
        time.sleep(0.3)   # the answer is in the pipe
        t.wake()
        items = t.receive(5.0)   # both: the wake-up drained and stdout read
        assert items is not None and [m.result for m in items] == [  # type: ignore[union-attr]
            {"n": 2}]
        assert _wake_pipe_empty(t)
        assert t.receive(0.05) == []
    finally:
        t.close()


@pytest.mark.needs_pidfds(reads_status=False)
def test_the_server_gone_with_stdout_held_is_the_end(no_leaks: None) -> None:
    t = _polling(StdioTransport([sys.executable, "-c", ESCAPES], name="escapes"))
    t.start()
    try:
        got: list[object] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            items = t.receive(1.0)
            if items is None:
                break
            got.extend(items)
        else:
            pytest.fail("receive() never ended")
        assert [m.result for m in got] == [{"n": 1}]  # type: ignore[attr-defined]
    finally:
        t.close()
