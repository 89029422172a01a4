"""Request-header rules of the MCP endpoint: DNS-rebinding defence and 2026-07-28 headers.

A browser page on an attacker's site can reach a server on ``localhost`` by rebinding its own
name to 127.0.0.1; what gives it away is the ``Host`` it sends (the attacker's name) and its
``Origin``. So ``Host`` must name an allowed host, and ``Origin``, when present, too. The
2026-07-28 revision also repeats parts of the body in headers (for proxies that route without
reading bodies); a disagreement between the two is refused rather than guessed at.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from mcpsync.transport.http._headers import encode_header_value, header_annotations

__all__ = ["DEFAULT_ALLOWED_HOSTS", "HostCheck", "decode_header_value", "expected_name",
           "param_mismatch"]

#: Loopback names, any port: what a local server is reached by.
DEFAULT_ALLOWED_HOSTS = ("localhost", "127.0.0.1", "[::1]")

_BASE64 = re.compile(r"=\?base64\?(.*)\?=\Z", re.DOTALL)
_NAME_FIELDS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
                "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}


class HostCheck:
    """Which ``Host`` values (and ``Origin`` hosts) the endpoint answers.

    An entry without a port (``"localhost"``) allows every port; ``"example.com:8443"`` only
    that one. ``"*"`` allows any host: only behind a proxy that checks it.
    """

    def __init__(self, allowed: Iterable[str] | None) -> None:
        entries = list(DEFAULT_ALLOWED_HOSTS if allowed is None else allowed)
        if isinstance(allowed, str):
            raise ValueError(f"allowed_hosts takes a list of host names, got {allowed!r}")
        self.entries = tuple(e.strip().lower() for e in entries)
        self._any = "*" in self.entries

    def allows(self, host: str) -> bool:
        host = host.strip().lower()
        if self._any:
            return True
        if not host:
            return False
        name, port = _split(host)
        for entry in self.entries:
            e_name, e_port = _split(entry)
            if e_name == name and (e_port is None or e_port == port):
                return True
        return False

    def origin_allowed(self, origin: str) -> bool:
        if self._any:
            return True
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False
        return self.allows(parts.netloc.rpartition("@")[2])


def _split(host: str) -> tuple[str, str | None]:
    """``("name", "port" or None)``; IPv6 literals keep their brackets."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return host, None
        rest = host[end + 1:]
        if not rest:
            return host, None
        if rest.startswith(":") and rest[1:].isdigit():
            return host[:end + 1], rest[1:]
        return host, None    # "[::1]x": not a host name, so it matches no entry
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit():
        return name, port
    return host, None


def decode_header_value(value: str) -> str | None:
    """A header value as the client meant it: ``=?base64?...?=`` decoded (UTF-8); ``None``
    when the encoded form is broken."""
    match = _BASE64.match(value)
    if match is None:
        return value
    try:
        return base64.b64decode(match.group(1), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def expected_name(method: str, params: Mapping[str, Any]) -> tuple[str, Any] | None:
    """``(field, value)`` that ``Mcp-Name`` must repeat for ``method``; ``None``: no name."""
    field = _NAME_FIELDS.get(method)
    if field is None:
        return None
    return field, params.get(field)


def param_mismatch(schema: Any, arguments: Mapping[str, Any],
                   environ: Mapping[str, Any]) -> str | None:
    """What disagrees between a ``tools/call``'s arguments and its ``Mcp-Param-*`` headers:
    every argument the tool's schema marks ``x-mcp-header`` and the call gives a value must
    be repeated in its header, in the same encoding a client uses."""
    for path, header in header_annotations(schema):
        if not isinstance(header, str) or not header:
            continue
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is None:
            continue
        try:
            expected = decode_header_value(encode_header_value(value))
        except ValueError:
            continue   # not a header type: the arguments' own validation speaks for it
        field = ".".join(path)
        got = environ.get("HTTP_MCP_PARAM_" + header.upper().replace("-", "_"))
        if got is None:
            return f"missing Mcp-Param-{header} header; it repeats arguments.{field}"
        decoded = decode_header_value(str(got))
        if decoded is None:
            return f"Mcp-Param-{header} header {got!r} is not valid =?base64?...?= (UTF-8)"
        if decoded != expected:
            return (f"Mcp-Param-{header} header {decoded!r} differs from arguments.{field} "
                    f"{expected!r}")
    return None
