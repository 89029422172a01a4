"""The floor proxy for the gateway benchmark: forwards stdio lines without parsing them.

``python benchmarks/gateway_floor.py -- <server argv>`` starts the server and copies lines
both ways, host stdin to server stdin and server stdout to host stdout, one thread each, with
no JSON work at all. Whatever latency it adds is the cost of a process hop (two extra pipe
crossings and two wake-ups per message); a proxy that does anything useful cannot add less.
``benchmarks/gateway_latency.py`` measures the gateway against it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading


def _pump(src: int, dst: int) -> None:
    """Copy whole reads (a read holds whole lines or a part of one: order is kept), into
    one buffer allocated once: ``os.read(src, 256 KiB)`` would allocate (``mmap``) and
    free (``munmap``) a 256 KiB result per read, which costs tens of microseconds per
    message in a threaded process and is no part of what a proxy must do."""
    buf = bytearray(256 * 1024)
    whole = memoryview(buf)
    try:
        while True:
            n = os.readv(src, [buf])
            if not n:
                break
            view = whole[:n]
            while view:
                view = view[os.write(dst, view):]
    except OSError:
        pass


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: gateway_floor.py -- SERVER_COMMAND...", file=sys.stderr)
        return 2
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    out = threading.Thread(target=_pump, args=(child.stdout.fileno(), 1),
                           name="floor-out", daemon=True)
    out.start()
    _pump(0, child.stdin.fileno())
    child.stdin.close()
    code = child.wait()
    out.join(2)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
