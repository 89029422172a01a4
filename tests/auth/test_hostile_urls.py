"""mcpauth's URL policy against hostile URLs, at every entry point a URL comes in by.

``urllib.parse`` and urllib3 disagree about some URLs; mcpauth fetches with requests, so the
https rule and the private-network block must judge what urllib3 connects to. The forms
below are tried at each entry point: a fetch, a redirect target, the challenge's
``resource_metadata``, an ``authorization_servers`` entry, every endpoint of the
authorization server's metadata, the provider's own URL, the authorization URL before a
browser opens it, and ``client_metadata_url``. Server A (loopback) plays the metadata;
server B (loopback) is where a parser differential would connect, and records everything:
it must see no request.

No form here makes traffic leave the machine, whichever way it is read: the host urllib3
would connect to is always loopback or an unresolvable ``.invalid`` name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests

from mcpauth import OAuthProvider
from mcpauth._http import HttpPolicy, check_url, request
from mcpauth._urls import Origin
from mcpauth.discovery import discover_authorization_server, discover_resource, resource_covers
from mcpauth.errors import InsecureURL
from mcpauth.flows import _check_browser_url
from mcpauth.registration import client_metadata_document

from ._servers import Reply, ScriptedServer

# {PA}: A's port, {PB}: B's port. Each is refused at every entry point.
HOSTILE = [
    "http://mcp.invalid\\@127.0.0.1:{PA}/x",              # https rule: looks loopback
    "http://127.0.0.1:{PB}\\@93.184.216.34/x",            # private block: looks public
    "https://127.0.0.1:{PB}\\@as.example/x",
    "//127.0.0.1:{PB}\\@127.0.0.1:{PA}/x",
    "http:\\\\127.0.0.1:{PB}/x",
    "http://127.0.0.1:{PA}/x\\y",
    "http://127.0.0.1:{PA}@127.0.0.1:{PB}/x",            # user info
    "https://user:pw@as.example/x",
    "http://127.0.0.1:{PB}%2F@127.0.0.1:{PA}/x",
    "http://127.0.0.1:{PA}%40127.0.0.1:{PB}/x",
    "http://127.0.0.1%3A{PB}/x",
    "http://127.0.0.1:{PB}\t/x",
    "http://127.0.0.1:{PB}\r/x",
    "http://127.0.0.1:{PB}\n/x",
    "http://127.0.0.1:{PB}\x00/x",
    "http://127.0.0.1:{PB} /x",
    "http://127.0.0.1:{PB}\u00a0/x",
    "http://127.0.0.1:{PA}\u200b/x",
    "http://\u24dbocalhost:{PB}/x",                       # not a valid IDNA label
    "http://mcp.invalid/x",                               # plain http, not loopback
    "HTTP://MCP.INVALID:80/x",
    "ftp://127.0.0.1:{PB}/x",
    "javascript:alert(1)",
]


def _fill(form: str, a: ScriptedServer, b: ScriptedServer) -> str:
    return form.replace("{PA}", str(a.port)).replace("{PB}", str(b.port))


def _fetch(url: str, a: ScriptedServer, session: requests.Session) -> None:
    request(session, "GET", url, HttpPolicy(block_private_networks="93.184" in url),
            step="test", what="URL")


def _redirect_target(url: str, a: ScriptedServer, session: requests.Session) -> None:
    a.routes["/start"] = Reply(302, headers={"Location": url.encode().decode("latin-1")})
    request(session, "GET", a.base + "/start", HttpPolicy(), step="test")


def _resource_metadata_hint(url: str, a: ScriptedServer, session: requests.Session) -> None:
    discover_resource(a.base + "/mcp", hint=url, session=session, policy=HttpPolicy())


def _authorization_server(url: str, a: ScriptedServer, session: requests.Session) -> None:
    # The metadata names the hostile URL as its authorization server; the provider then
    # discovers that issuer, which is where the URL is checked.
    a.routes["/.well-known/oauth-protected-resource/mcp"] = Reply(200, {
        "resource": a.base + "/mcp", "authorization_servers": [url]})
    meta = discover_resource(a.base + "/mcp", hint=None, session=session, policy=HttpPolicy())
    assert meta is not None and meta.authorization_servers == (url,)
    discover_authorization_server(meta.authorization_servers[0], session=session,
                                  policy=HttpPolicy())


def _endpoint(name: str) -> Callable[[str, ScriptedServer, requests.Session], None]:
    def run(url: str, a: ScriptedServer, session: requests.Session) -> None:
        issuer = a.base + "/as"
        doc: dict[str, Any] = {
            "issuer": issuer, "authorization_endpoint": issuer + "/authorize",
            "token_endpoint": issuer + "/token", "code_challenge_methods_supported": ["S256"],
            "response_types_supported": ["code"]}
        doc[name] = url
        a.routes["/.well-known/oauth-authorization-server/as"] = Reply(200, doc)
        discover_authorization_server(issuer, session=session, policy=HttpPolicy())
    return run


def _provider_url(url: str, a: ScriptedServer, session: requests.Session) -> None:
    OAuthProvider(url, session=session).close()


def _browser(url: str, a: ScriptedServer, session: requests.Session) -> None:
    _check_browser_url(url)


def _client_metadata_url(url: str, a: ScriptedServer, session: requests.Session) -> None:
    client_metadata_document(url, redirect_uris=["http://127.0.0.1:1/callback"])


def _client_metadata_url_of_a_provider(url: str, a: ScriptedServer,
                                       session: requests.Session) -> None:
    OAuthProvider(a.base + "/mcp", client_metadata_url=url, session=session).close()


ENTRY_POINTS: dict[str, Callable[[str, ScriptedServer, requests.Session], None]] = {
    "fetch": _fetch,
    "redirect-target": _redirect_target,
    "resource_metadata": _resource_metadata_hint,
    "authorization_servers": _authorization_server,
    "authorization_endpoint": _endpoint("authorization_endpoint"),
    "token_endpoint": _endpoint("token_endpoint"),
    "registration_endpoint": _endpoint("registration_endpoint"),
    "device_authorization_endpoint": _endpoint("device_authorization_endpoint"),
    "provider-url": _provider_url,
    "browser": _browser,
    "client_metadata_url": _client_metadata_url,
    "provider-client_metadata_url": _client_metadata_url_of_a_provider,
}

# A header cannot carry CR, LF or NUL (no server can send them as a Location); the fetch
# entry point covers those forms.
_UNSENDABLE_IN_A_HEADER = ("\r", "\n", "\x00")


CASES = [(entry, form) for form in HOSTILE for entry in ENTRY_POINTS
         if not (entry == "redirect-target" and any(c in form for c in _UNSENDABLE_IN_A_HEADER))]


@pytest.mark.parametrize(("entry", "form"), CASES)
def test_hostile_url_refused_at_every_entry_point(
        entry: str, form: str, server: ScriptedServer, server2: ScriptedServer,
        session: requests.Session) -> None:
    url = _fill(form, server, server2)
    with pytest.raises(InsecureURL) as info:
        ENTRY_POINTS[entry](url, server, session)
    assert "pw" not in str(info.value).replace("pw@", "")  # no user info shown
    assert server2.requests == [], [r.path for r in server2.requests]
    # Nothing was fetched from the hostile URL on A either: only A's own metadata paths.
    assert all(r.path.startswith(("/.well-known/", "/start")) for r in server.requests)


def test_an_international_name_is_judged_in_the_form_it_connects_with() -> None:
    # requests IDNA-encodes the host before connecting; the rule sees that form.
    origin = check_url("https://B\u00fccher.example/x", HttpPolicy(), what="URL", step="test")
    assert origin == Origin("https", "xn--bcher-kva.example", 443)


def test_the_backslash_form_is_judged_by_the_host_before_it() -> None:
    # urllib.parse says 127.0.0.1 (loopback, http allowed); urllib3 connects to mcp.invalid.
    with pytest.raises(InsecureURL, match="backslash"):
        check_url("http://mcp.invalid\\@127.0.0.1/x", HttpPolicy(allow_insecure_http=True),
                  what="URL", step="test")


@pytest.mark.parametrize("resource", [
    "http://127.0.0.1:8001\\@127.0.0.1:8000/mcp",
    "http://u@127.0.0.1:8000/mcp",
    "http://127.0.0.1:8000/mcp\t",
])
def test_resource_check_refuses_hostile_resources(resource: str) -> None:
    assert not resource_covers(resource, "http://127.0.0.1:8000/mcp")
    assert not resource_covers("http://127.0.0.1:8000/mcp", resource)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000/mcp/../admin",
    "http://127.0.0.1:8000/mcp/%2e%2e/admin",
    "http://127.0.0.1:8000/mcp/%2E%2E/admin",
    "http://127.0.0.1:8000/mcp/./../admin",
])
def test_dot_segments_are_resolved_before_the_resource_check(url: str) -> None:
    # The request reaches /admin, outside the resource /mcp: no token for it.
    assert not resource_covers("http://127.0.0.1:8000/mcp", url)
    assert resource_covers("http://127.0.0.1:8000/mcp", "http://127.0.0.1:8000/mcp/./x")
