"""Hostile URLs a server hands the client, tried as an attacker would.

A server can name a URL in a redirect's ``Location`` or in the 2024-11-05 ``endpoint`` event.
Each form below is one a parser differential or a sloppy check would let through to another
host. They are served by a real loopback MCP server (A) while a second real loopback server
(B) records every request it gets. For every form the client must refuse, and B must see
nothing: no bearer token, no static header, no session id.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from http_peers.fault_server import FaultServer, redirect

import mcpsync
from mcpsync._origin import (
    Origin,
    UnsafeURL,
    check_same_origin,
    connection_origin,
    refuse_hostile,
)
from mcpsync.errors import MCPError, TransportError

TOKEN = "tok-a-secret-7f3e"
# What a refusal says: the origin check's verdict, or requests' own refusal to parse the
# Location; never a connection error, which would mean the target was tried.
_REFUSED = re.compile(r"refused because|could not be parsed")
STATIC = "static-header-secret-91c2"

# {A}: host:port of the MCP server, {PA}/{PB}: the two ports. Each refused, whatever B is.
HOSTILE = [
    "http://localhost:{PB}\\@127.0.0.1:{PA}/mcp",          # the reported leak
    "//localhost:{PB}\\@127.0.0.1:{PA}/mcp",               # the same, scheme-relative
    "http://127.0.0.1:{PB}\\@127.0.0.1:{PA}/mcp",
    "http://127.0.0.1:{PB}\\\\@127.0.0.1:{PA}/mcp",
    "http:\\\\127.0.0.1:{PB}/mcp",                          # backslashes for slashes
    "/\\127.0.0.1:{PB}/mcp",                                # WHATWG reads /\ as //
    "http://127.0.0.1:{PA}\\.localhost:{PB}/mcp",
    "http://127.0.0.1:{PA}/mcp\\x",                         # backslash in the path
    "http://127.0.0.1:{PA}@127.0.0.1:{PB}/mcp",           # user info, classic
    "http://u:p@127.0.0.1:{PA}/mcp",                       # user info on the right host
    "http://127.0.0.1:{PB}%2F@127.0.0.1:{PA}/mcp",         # encoded '/' in user info
    "http://127.0.0.1:{PA}%40127.0.0.1:{PB}/mcp",          # encoded '@'
    "http://127.0.0.1%3A{PB}/mcp",                          # encoded ':'
    "http://[::ffff:127.0.0.1]:{PB}/mcp",                   # IPv4-mapped IPv6 literal
    "http://[::1]:{PB}/mcp",
    "HTTP://127.0.0.1:{PB}/mcp",                            # upper-case scheme, other port
    "http://LOCALHOST:{PB}/mcp",
    "http://127.0.0.1:80/mcp",                              # the default port written out
    "https://127.0.0.1:{PA}/mcp",                           # same host and port, other scheme
    "http://localhost.:{PB}/mcp",                           # trailing dot
    "http://127.0.0.1.:{PA}/mcp",
    "http://127.0.0.1:{PB}\t/mcp",                          # tab inside
    "http://loc\talhost:{PB}/mcp",
    "http://127.0.0.1:{PB}\x0b/mcp",                        # vertical tab
    "http://127.0.0.1:{PB}\u00a0/mcp",                      # no-break space
    "http://127.0.0.1:{PB}\u3000/mcp",                      # ideographic space
    "http://127.0.0.1:{PA}\u200b/mcp",                      # zero-width space
    "http://\u24dbocalhost:{PB}/mcp",                       # IDNA: circled l
    "http://\uff11\uff12\uff17.0.0.1:{PB}/mcp",             # IDNA: full-width digits
    "http://xn--localhost-.:{PB}/mcp",
]

# Forms that only a unit test can send: CR, LF and NUL cannot be put in a header or an SSE
# line by a server (they end it).
UNSENDABLE = [
    "http://127.0.0.1:{PB}\r/mcp",
    "http://127.0.0.1:{PB}\n/mcp",
    "http://127.0.0.1:{PA}/mcp\r\nX: y",
    "http://127.0.0.1:{PB}\x00/mcp",
    "http://127.0.0.1:{PA}\x7f/mcp",
    "http://127.0.0.1:{PA}/\x85",
    "http://127.0.0.1:{PA}/mcp\u2028",
]

# The same origin however written: these redirects are followed.
SAME_ORIGIN = [
    "/mcp2",
    "http://127.0.0.1:{PA}/mcp2",
    "HTTP://127.0.0.1:{PA}/mcp2",
    "//127.0.0.1:{PA}/mcp2",
    "http://127.0.0.1:{PA}/mcp2?x=%40&y=@",                 # '@' in the query is no user info
    "http://127.0.0.1:{PA}/a/@b/../../mcp2",                # nor in the path
]


def _fill(form: str, pa: int, pb: int) -> str:
    return form.replace("{PA}", str(pa)).replace("{PB}", str(pb))


def _location(form: str, pa: int, pb: int) -> str:
    """The header as a server puts it on the wire (UTF-8 bytes), as the client reads it
    back (http.client decodes header bytes as Latin-1)."""
    return _fill(form, pa, pb).encode("utf-8").decode("latin-1")


# ---- the function itself -------------------------------------------------------------------


@pytest.mark.parametrize("form", HOSTILE + UNSENDABLE)
def test_every_hostile_form_is_refused_by_the_check(form: str) -> None:
    base = "http://127.0.0.1:8000/mcp"
    url = _fill(form, 8000, 8001)
    target = url if "//" in url[:8] or url.startswith("http") else "http://127.0.0.1:8000" + url
    with pytest.raises(UnsafeURL):
        refuse_hostile(url)
        check_same_origin(target, base)


@pytest.mark.parametrize("form", SAME_ORIGIN)
def test_same_origin_forms_pass_the_check(form: str) -> None:
    url = _fill(form, 8000, 8001)
    refuse_hostile(url)
    if url.startswith("/") and not url.startswith("//"):
        url = "http://127.0.0.1:8000" + url
    elif url.startswith("//"):
        url = "http:" + url
    assert check_same_origin(url, "http://127.0.0.1:8000/mcp") == Origin(
        "http", "127.0.0.1", 8000)


def test_connection_origin_is_what_urllib3_connects_to() -> None:
    # urllib.parse says 127.0.0.1:8000 here; the connection goes to localhost:8001.
    assert connection_origin("http://localhost:8001\\@127.0.0.1:8000/mcp") == Origin(
        "http", "localhost", 8001)
    assert connection_origin("HTTPS://Example.COM/p") == Origin("https", "example.com", 443)
    assert connection_origin("http://example.com:80/") == connection_origin("http://example.com/")
    assert connection_origin("http://[::1]:5/").host == "[::1]"
    with pytest.raises(UnsafeURL, match="not an http"):
        connection_origin("ftp://example.com/")
    with pytest.raises(UnsafeURL, match="not a valid URL"):
        connection_origin("http://\u24dbocalhost/")


# ---- against real servers ------------------------------------------------------------------


@pytest.fixture
def pair(fault_server_factory: Callable[[], FaultServer]) -> tuple[FaultServer, FaultServer]:
    """A: the MCP server the client is configured for; B: the other origin, recording."""
    return fault_server_factory(), fault_server_factory()


def _port(server: FaultServer) -> int:
    return int(server.origin.rsplit(":", 1)[1])


def _nothing_reached(other: FaultServer, a: FaultServer) -> None:
    assert other.requests == [], [r.path for r in other.requests]
    # Nothing but A's own path ever carried the credentials either.
    for req in a.requests:
        assert req.path.startswith("/mcp") and req.path in ("/mcp", "/mcp2"), req.path


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("form", HOSTILE)
def test_hostile_redirect_during_the_handshake(pair: tuple[FaultServer, FaultServer],
                                               form: str, era: str) -> None:
    a, b = pair
    a.faults.era = era  # type: ignore[assignment]
    a.faults.script.append(redirect(307, _location(form, _port(a), _port(b))))
    with pytest.raises(MCPError) as info:
        mcpsync.connect(a.url, auth=TOKEN, headers={"X-Static": STATIC}, timeout=5,
                        probe_timeout=2)
    assert isinstance(info.value, TransportError), repr(info.value)
    # Refused by the check, not a failed attempt to reach the target.
    assert _REFUSED.search(str(info.value)), str(info.value)
    assert TOKEN not in str(info.value) and STATIC not in str(info.value)
    _nothing_reached(b, a)


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("form", HOSTILE)
def test_hostile_redirect_of_a_tool_call(pair: tuple[FaultServer, FaultServer],
                                         form: str, era: str) -> None:
    a, b = pair
    a.faults.era = era  # type: ignore[assignment]
    with mcpsync.connect(a.url, auth=TOKEN, headers={"X-Static": STATIC}, timeout=5) as client:
        a.faults.script.append(redirect(308, _location(form, _port(a), _port(b)),
                                           "tools/call"))
        with pytest.raises(TransportError, match=_REFUSED):
            client.call_tool("echo", {"text": "hi"})
    _nothing_reached(b, a)


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("form", SAME_ORIGIN)
def test_same_origin_redirects_are_followed(pair: tuple[FaultServer, FaultServer],
                                            form: str, era: str) -> None:
    a, b = pair
    a.faults.era = era  # type: ignore[assignment]
    with mcpsync.connect(a.url, auth=TOKEN, timeout=5) as client:
        a.faults.script.append(redirect(307, _fill(form, _port(a), _port(b)), "tools/call"))
        client.call_tool("echo", {"text": "hi"})
    followed = [r for r in a.requests if r.path.startswith("/mcp2")]
    assert followed and followed[0].header("Authorization") == f"Bearer {TOKEN}"
    assert b.requests == []


@pytest.mark.parametrize("form", [*HOSTILE,
    "http://127.0.0.1:{PB}/messages?session_id=x",
    "//127.0.0.1:{PB}/messages"])
def test_hostile_http_sse_endpoint_event(pair: tuple[FaultServer, FaultServer],
                                         form: str) -> None:
    a, b = pair
    a.faults.era = "sse2024"
    a.faults.endpoint = _fill(form, _port(a), _port(b))
    with pytest.raises(TransportError, match="endpoint"):
        mcpsync.connect(a.url, auth=TOKEN, headers={"X-Static": STATIC}, timeout=5)
    assert b.requests == []
    assert all(r.path == "/mcp" for r in a.requests), [r.path for r in a.requests]
