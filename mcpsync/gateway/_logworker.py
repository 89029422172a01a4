"""The traffic log's helper process (``python -m mcpsync.gateway._logworker``).

Started by :class:`mcpsync.gateway._loghelper.LogHelper`, never by hand: it inherits the
log file already opened (``--fd``; ``--path`` is where rotation reopens it), reads the
redaction rules and then batches of frames from its stdin (and new rules, in order with
them, when the gateway's are replaced), and builds and writes their records with the
inspector's own code, so the lines are byte for byte the ones an in-process inspector
writes. It stops when its stdin ends (the gateway closed the log,
exited or died), after writing everything it read. Ctrl-C in a terminal reaches the whole
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
    first = read_message(stream)
    if not (isinstance(first, tuple) and first[:1] == ("rules",)
            and isinstance(first[1], Redactor)):
        return 2   # not started by the gateway
    inspector = Inspector(detail=args.detail, redactor=first[1])
    adopt_log_file(inspector, args.fd, args.path, args.max_bytes, args.backups)
    try:
        while (message := read_message(stream)) is not None:
            if message[0] == "batch":
                inspector.write_batch(message[1], message[2])
            elif message[0] == "rules" and isinstance(message[1], Redactor):
                inspector.redactor = message[1]   # the gateway's rules were replaced
    finally:
        inspector.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
