"""``mcpsync gateway --http HOST:PORT``: the gateway's HTTP front on the built-in server.

Runs until Ctrl-C or SIGTERM, then ends every host session (their upstream processes stop).
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from mcpsync.cli._errors import EXIT_USAGE, CLIError
from mcpsync.gateway import Gateway

__all__ = ["parse_address", "serve_gateway_http"]


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> ``(host, port)``; a CLIError says what to
    write otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise CLIError(f"mcpsync gateway --http {text!r}: give HOST:PORT, e.g. "
                       "127.0.0.1:8808 (port 0 picks a free one)", EXIT_USAGE)
    return host, int(port)


def serve_gateway_http(gateway: Gateway, args: argparse.Namespace) -> None:
    host, port = parse_address(args.http)
    options: dict[str, Any] = {}
    if args.max_upstream_processes is not None:
        if args.max_upstream_processes < 1:
            raise CLIError("mcpsync gateway --max-upstream-processes takes a number above 0",
                           EXIT_USAGE)
        options["max_upstream_processes"] = args.max_upstream_processes
    if args.session_key_file:
        options["session_key_file"] = args.session_key_file
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        try:
            gateway.serve_http(host, port, stop=stop, **options)
        except OSError as exc:
            raise CLIError(str(exc), EXIT_USAGE) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
