"""Parsing one HTTP/1.x request head into what a WSGI environ needs, refusing what is unsafe.

The head arrives whole (see ``_io.Reader.read_head``) and is parsed once, as latin-1 text
(PEP 3333 hands headers to applications as latin-1 strings). Besides building the ``HTTP_*``
keys, parsing decides how the body is framed, and that is where request smuggling lives, so
the ambiguous cases are refused with 400 instead of guessed: a body framed both by
``Content-Length`` and ``Transfer-Encoding``, conflicting lengths, folded header lines, a
bare CR, whitespace before a header's colon. A header name with an underscore is dropped:
in the environ ``X_User`` and ``X-User`` would both become ``HTTP_X_USER``, so a client could
forge a header a proxy in front had set.

The only regular expressions are compiled once, at import.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import unquote_to_bytes

from mcpsync.server.http._io import HttpError

__all__ = ["Request", "parse_head"]

_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL: Final = re.compile(r"[\x00-\x20\x7f]")
_VERSION: Final = re.compile(r"HTTP/(\d)\.\d")
_VERSIONS: Final = {"HTTP/1.1": True, "HTTP/1.0": False}
_ENV_KEYS: dict[str, str] = {}   # header name -> environ key, memoised (bounded below)
_ENV_KEYS_MAX: Final = 1024


class Request:
    """One parsed request head: the request line, the ``HTTP_*`` environ entries, and how
    the body is framed (``content_length``, ``chunked``) and the connection kept."""

    __slots__ = ("chunked", "content_length", "content_type", "continue_expected", "environ",
                 "http11", "keep_alive", "method", "path", "query", "version")

    def __init__(self, method: str, path: str, query: str, version: str) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.version = version
        self.http11 = _VERSIONS[version]
        self.environ: dict[str, str] = {}
        self.content_length: int | None = None
        self.content_type = ""
        self.chunked = False
        self.continue_expected = False
        self.keep_alive = self.http11


def _bad(detail: str) -> HttpError:
    return HttpError("400 Bad Request", detail)


def _env_key(name: str) -> str:
    key = _ENV_KEYS.get(name)
    if key is None:
        key = "HTTP_" + name.upper().replace("-", "_")
        if len(_ENV_KEYS) < _ENV_KEYS_MAX:   # a client inventing names cannot grow it forever
            _ENV_KEYS[name] = key
    return key


def _request_line(line: str) -> Request:
    parts = line.split(" ")
    if len(parts) != 3:
        raise _bad("the request line is not 'METHOD target HTTP/1.1'")
    method, target, version = parts
    if version not in _VERSIONS:
        match = _VERSION.fullmatch(version)
        if match is None:
            raise _bad("the request line does not end with an HTTP version")
        if match.group(1) != "1":
            raise HttpError("505 HTTP Version Not Supported", "this server speaks HTTP/1.1")
        version = "HTTP/1.1"   # a later 1.x minor version is 1.1-compatible by definition
    if not _TOKEN.fullmatch(method):
        raise _bad("the request method is not a token")
    if _CONTROL.search(target):
        raise _bad("the request target holds a control character")
    if target[:1] != "/":
        if target == "*" and method == "OPTIONS":
            return Request(method, "*", "", version)
        scheme, sep, rest = target.partition("://")
        if not sep or scheme.lower() not in ("http", "https"):
            raise _bad("the request target is neither a path nor an http URL")
        slash = rest.find("/")
        target = rest[slash:] if slash >= 0 else "/"
    path, _, query = target.partition("?")
    if "%" in path:   # PEP 3333: PATH_INFO is the decoded bytes, as latin-1
        path = unquote_to_bytes(path.encode("latin-1")).decode("latin-1")
    return Request(method, path, query, version)


def parse_head(head: bytes) -> Request:
    """The :class:`Request` in ``head`` (without its blank line); raises :class:`HttpError`
    (400, 417, 501, 505) for a head this server will not act on."""
    text = head.decode("latin-1")
    lines = text.split("\n")
    first = lines[0].rstrip("\r")
    request = _request_line(first)
    env = request.environ
    hosts = 0
    lengths: set[str] = set()
    encodings: list[str] = []
    connection = ""
    expect = ""
    for raw in lines[1:]:
        line = raw[:-1] if raw[-1:] == "\r" else raw
        if "\r" in line or "\x00" in line:
            raise _bad("a header holds a bare CR or a NUL")
        if line[:1] in (" ", "\t"):
            raise _bad("a folded header line (obsolete line folding is not accepted)")
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise _bad("a header line is not 'Name: value'")
        value = value.strip(" \t")
        lower = name.lower()
        if lower == "content-length":
            lengths.add(value)
            continue
        if lower == "content-type":
            request.content_type = value
            continue
        if lower == "transfer-encoding":
            encodings.extend(t.strip().lower() for t in value.split(","))
        elif lower == "host":
            hosts += 1
        elif lower == "connection":
            connection = f"{connection},{value.lower()}"
        elif lower == "expect":
            expect = value.lower()
        if "_" in name:
            continue
        key = _env_key(name)
        env[key] = f"{env[key]}, {value}" if key in env else value
    if hosts > 1 or (request.http11 and hosts == 0):
        raise _bad("an HTTP/1.1 request needs exactly one Host header")
    tokens = {t.strip() for t in connection.split(",")}
    if "close" in tokens:
        request.keep_alive = False
    elif not request.http11 and "keep-alive" in tokens:
        request.keep_alive = True
    if encodings:
        if lengths:
            raise _bad("a body framed by both Content-Length and Transfer-Encoding")
        if not request.http11:
            raise _bad("Transfer-Encoding in an HTTP/1.0 request")
        if encodings != ["chunked"]:
            raise HttpError("501 Not Implemented",
                            "only the chunked transfer coding is supported for request bodies")
        request.chunked = True
    elif lengths:
        value = lengths.pop()
        if lengths or not (value.isascii() and value.isdigit()) or len(value) > 18:
            raise _bad("the Content-Length header is not one number")
        request.content_length = int(value)
    if expect:
        if expect != "100-continue":
            raise HttpError("417 Expectation Failed", "only 'Expect: 100-continue' is known")
        request.continue_expected = request.http11
    return request
