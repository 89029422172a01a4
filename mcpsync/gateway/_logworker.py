"""The traffic log's helper process (``python -m mcpsync.gateway._logworker``).

Started by :class:`mcpsync.gateway._loghelper.LogHelper`, never by hand: it inherits the
log file already opened (``--fd``; ``--path`` is where rotation reopens it), reads the
redaction rules and then batches of frames from its stdin (and new rules, in order with
them, when the gateway's are replaced), and builds and writes their records with the
inspector's own code, so the lines are byte for byte the ones an in-process inspector
writes. It stops when its stdin ends (the gateway closed the log,
exited or died), after writing everything it read. Rules it cannot load (a class it cannot
import, an object that is no :class:`Redactor`) end it with a message and exit code 3: it
never writes on with rules older than the gateway's. Ctrl-C in a terminal reaches the whole
process group: the helper ignores it, so the gateway can still hand it the last frames.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from mcpsync.gateway._inspector import DETAILS, Inspector, adopt_log_file
from mcpsync.gateway._loghelper import read_message
from mcpsync.gateway._redact import Redactor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcpsync.gateway._logworker",
                                     description="the gateway's traffic log writer")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--detail", choices=DETAILS[1:], required=True)
    parser.add_argument("--max-bytes", type=int, required=True)
    parser.add_argument("--backups", type=int, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="mcpsync gateway log: %(message)s")
    stream = sys.stdin.buffer
    try:
        first = read_message(stream)
    except Exception as exc:
        return _give_up(exc)
    if not (isinstance(first, tuple) and first[:1] == ("rules",)):
        return 2   # not started by the gateway
    if not isinstance(first[1], Redactor):
        return _give_up(first[1])
    inspector = Inspector(detail=args.detail, redactor=first[1])
    adopt_log_file(inspector, args.fd, args.path, args.max_bytes, args.backups)
    try:
        while True:
            try:
                message = read_message(stream)
            except Exception as exc:
                return _give_up(exc)
            if message is None:
                break
            if message[0] == "batch":
                inspector.write_batch(message[1], message[2])
            elif message[0] == "rules":
                if not isinstance(message[1], Redactor):
                    return _give_up(message[1])
                inspector.redactor = message[1]   # the gateway's rules were replaced
    finally:
        inspector.close()
    return 0


def _give_up(problem: object) -> int:
    """Rules (or a message) this process cannot load: writing on with the old rules would
    log what the new ones hide, so it says why and stops (exit code 3); the gateway then
    reports that the helper exited and gives the log up."""
    if isinstance(problem, BaseException):
        what = (f"a message from the gateway could not be loaded "
                f"({type(problem).__name__}: {problem})")
    else:
        what = f"the redaction rules sent are a {type(problem).__qualname__!r}, not a Redactor"
    logging.error("%s; the log is given up, nothing more is written. The rules must be a "
                  "Redactor, or a subclass of it defined in a module this process can import "
                  "(not the program's __main__) and holding only picklable values", what)
    return 3


if __name__ == "__main__":
    sys.exit(main())
