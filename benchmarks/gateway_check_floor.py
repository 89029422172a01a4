"""The checking floor for the gateway benchmark: a proxy that looks at what it forwards and
does nothing else.

``python benchmarks/gateway_check_floor.py -- <server argv>`` starts the server and copies
lines both ways, like ``gateway_floor.py`` (one thread per direction, a blocking ``readv``
into one buffer allocated once, ``os.write``), and adds only what a proxy that keeps the
gateway's promises to both sides must do per frame:

- every line is checked to be one JSON object, with the standard library's C scanner (the
  check the gateway makes: the object must end where the line does; as there, blanks and a
  carriage return around it are allowed);
- a request's id (a number or a string) is entered in an in-flight table, an answer's id is
  taken out of it (what lets a proxy fail the calls in flight when its server dies);
- a host line that is not JSON is answered with a ``-32700`` error instead of being
  forwarded (a server may not answer it at all: the official Python SDK's does not); a
  server line that is not JSON is dropped;
- lines split over reads are put together before they are checked.

It does not poll (the gateway polls a wake-up pipe, to be closed from another thread, and
the server's pidfd, for a grandchild holding its stdout), keeps no lock around the table
(one ``dict`` store or pop each, atomic under the GIL), logs nothing and routes nothing. It
is a reference, not a rival, written as plainly as the check allows;
``benchmarks/gateway_latency.py --check-floor`` measures it beside the plain floor and the
gateway. It serves the benchmark only (one upstream, no restart, no close from outside; a
partial line at the end of the input is dropped).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from gateway_floor import serve  # the same start, threads and end as the plain floor

# The C scanner's entry, as the gateway takes it (typeshed does not list the attribute).
_scan: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009
_PARSE_ERROR = (b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,'
                b'"message":"not a JSON object"}}\n')

#: Ids of the requests forwarded and not yet answered.
_inflight: dict[int | str, None] = {}
#: Both threads write to the host (answers; the -32700 errors of the host's own thread).
_host_lock = threading.Lock()


def _one(line: bytes) -> dict[str, object] | None:
    """``line`` (no newline) as a JSON object, or ``None`` when it is not one."""
    try:
        text = line.decode().strip(" \t\r")
        obj, end = _scan(text, 0)
    except (UnicodeDecodeError, StopIteration, ValueError, RecursionError):
        return None
    return obj if type(obj) is dict and end == len(text) else None


def _request(obj: dict[str, object]) -> None:
    rid = obj.get("id")
    if "method" in obj and (type(rid) is int or type(rid) is str):
        _inflight[rid] = None


def _answer(obj: dict[str, object]) -> None:
    rid = obj.get("id")
    if "method" not in obj and (type(rid) is int or type(rid) is str):
        _inflight.pop(rid, None)


def _write(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _pump(src: int, dst: int, enter: Callable[[dict[str, object]], None],
          from_host: bool) -> None:
    """Copy ``src`` to ``dst`` line by line, each line checked and entered (see the module's
    docstring); a read that is one whole line, the usual case, is written as it came."""
    buf = bytearray(256 * 1024)
    whole = memoryview(buf)
    held = b""   # the start of a line that the next read ends
    try:
        while True:
            n = os.readv(src, [buf])
            if not n:
                break
            if not held and buf[n - 1] == 10:
                data = whole[:n].tobytes()
                # One line, the usual case: one decode, one scan of it all.
                try:
                    text = data.decode()
                    obj, end = _scan(text, 0)
                except (UnicodeDecodeError, StopIteration, ValueError, RecursionError):
                    obj, end = None, -1
                if type(obj) is dict and end == len(text) - 1:
                    enter(obj)
                    if from_host:
                        _write(dst, data)
                    else:
                        with _host_lock:
                            _write(dst, data)
                    continue
            else:
                data = held + whole[:n].tobytes()
                cut = data.rfind(b"\n") + 1
                data, held = data[:cut], data[cut:]
            good = []
            for line in data.split(b"\n")[:-1]:
                if not line.strip():
                    continue
                obj = _one(line)
                if obj is not None:
                    enter(obj)
                    good.append(line + b"\n")
                elif from_host:
                    with _host_lock:
                        _write(1, _PARSE_ERROR)
            if good:
                if from_host:
                    _write(dst, b"".join(good))
                else:
                    with _host_lock:
                        _write(dst, b"".join(good))
    except OSError:
        pass


def main(argv: list[str]) -> int:
    return serve(argv, "gateway_check_floor.py",
                 lambda src, dst: _pump(src, dst, _request, True),
                 lambda src, dst: _pump(src, dst, _answer, False))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
