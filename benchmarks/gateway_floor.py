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
from collections.abc import Callable


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


def serve(argv: list[str], prog: str, down: Callable[[int, int], None],
          up: Callable[[int, int], None]) -> int:
    """Start the server ``argv`` (after an optional ``--``), copy the host's stdin to its
    stdin with ``down(src, dst)`` on this thread and its stdout to the host with ``up`` on
    another; its exit status once the host's input ended. Also what
    ``gateway_check_floor.py`` runs, with its checking pumps."""
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(f"usage: {prog} -- SERVER_COMMAND...", file=sys.stderr)
        return 2
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    out = threading.Thread(target=up, args=(child.stdout.fileno(), 1),
                           name=f"{prog.removesuffix('.py')}-out", daemon=True)
    out.start()
    down(0, child.stdin.fileno())
    child.stdin.close()
    code = child.wait()
    out.join(2)
    return code


def main(argv: list[str]) -> int:
    return serve(argv, "gateway_floor.py", _pump, _pump)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
