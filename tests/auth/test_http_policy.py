"""mcpauth._http: the https rule, private networks, redirects, size cap, network errors.

Real loopback servers (``ScriptedServer``, also used by the discovery and registration tests)
where possible; ``responses`` for what needs TLS (an https→http redirect).
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
import requests
import responses

from mcpauth._http import HttpPolicy, HttpResponse, check_url, is_loopback_host, request
from mcpauth.errors import AuthError, InsecureURL

from ._servers import Reply, ScriptedServer

POLICY = HttpPolicy()


# --- loopback and the https rule ------------------------------------------------------------

@pytest.mark.parametrize(("host", "expected"), [
    ("localhost", True), ("LOCALHOST", True), ("localhost.", True),
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True),
    ("::ffff:127.0.0.1", True),
    ("localhost.example.com", False), ("mylocalhost", False), ("128.0.0.1", False),
    ("10.0.0.1", False), ("0.0.0.0", False), ("example.com", False), ("", False),
    ("[::2]", False), ("127.0.0.1.nip.io", False),
])
def test_is_loopback_host(host: str, expected: bool) -> None:
    assert is_loopback_host(host) is expected


@pytest.mark.parametrize("url", [
    "https://a.example/x", "HTTPS://A.EXAMPLE", "https://a.example:8443/",
    "http://localhost:3000/callback", "http://127.0.0.1/x", "http://[::1]:8080/",
    "http://127.5.5.5/",
])
def test_check_url_accepts(url: str) -> None:
    check_url(url, POLICY, what="URL", step="discovery")


@pytest.mark.parametrize("url", [
    "http://a.example/x", "http://10.0.0.1/", "http://localhost.example.com/",
    "ftp://a.example/", "javascript:alert(1)", "file:///etc/passwd", "https:///nohost",
    "a.example/x", "", "http://[::1/",
])
def test_check_url_refuses(url: str) -> None:
    with pytest.raises(InsecureURL) as info:
        check_url(url, POLICY, what="token endpoint", step="discovery")
    assert info.value.step == "discovery"
    assert str(info.value).startswith("discovery: token endpoint")


def test_check_url_message_names_step_what_and_url() -> None:
    with pytest.raises(InsecureURL) as info:
        check_url("http://as.example/token", POLICY, what="token endpoint", step="discovery")
    msg = str(info.value)
    assert "discovery: token endpoint http://as.example/token must be https" in msg
    assert "loopback excepted" in msg
    assert info.value.url == "http://as.example/token"


def test_check_url_message_hides_userinfo_and_query() -> None:
    with pytest.raises(InsecureURL) as info:
        check_url("http://user:hunter2@as.example/x?token=s3cret", POLICY, what="URL",
                  step="discovery")
    assert "hunter2" not in str(info.value)
    assert "s3cret" not in str(info.value)
    assert "hunter2" not in (info.value.url or "")


def test_allow_insecure_http_lifts_the_rule() -> None:
    check_url("http://a.example/x", HttpPolicy(allow_insecure_http=True), what="URL",
              step="discovery")
    with pytest.raises(InsecureURL):  # other schemes stay refused
        check_url("ftp://a.example/x", HttpPolicy(allow_insecure_http=True), what="URL",
                  step="discovery")


BLOCK = HttpPolicy(block_private_networks=True)


@pytest.mark.parametrize("url", [
    "https://10.0.0.1/", "https://172.16.5.4/", "https://192.168.1.1/", "https://127.0.0.1/",
    "http://127.0.0.1/", "http://localhost/", "https://169.254.169.254/latest/meta-data",
    "https://[::1]/", "https://[fe80::1]/", "https://[fc00::1]/", "https://0.0.0.0/",
    "https://[::ffff:10.0.0.1]/", "https://100.64.0.1/",
])
def test_block_private_networks_refuses(url: str) -> None:
    with pytest.raises(InsecureURL, match="block_private_networks"):
        check_url(url, BLOCK, what="URL", step="discovery")


@pytest.mark.parametrize("url", ["https://8.8.8.8/", "https://[2606:4700:4700::1111]/"])
def test_block_private_networks_allows_public_addresses(url: str) -> None:
    check_url(url, BLOCK, what="URL", step="discovery")  # IP literals: no DNS needed


def test_block_private_networks_off_by_default() -> None:
    check_url("https://10.0.0.1/", POLICY, what="URL", step="discovery")


def test_block_private_networks_refuses_a_request(server: ScriptedServer,
                                                  session: requests.Session) -> None:
    server.routes["/x"] = Reply(200, {"a": 1})
    with pytest.raises(InsecureURL):
        request(session, "GET", server.base + "/x", BLOCK, step="discovery")
    assert server.requests == []


def test_policy_defaults_match_the_rules() -> None:
    assert POLICY.connect_timeout == 10.0
    assert POLICY.read_timeout == 30.0
    assert POLICY.max_bytes == 1 << 20
    assert not POLICY.allow_insecure_http and not POLICY.block_private_networks


# --- requests against a loopback server -------------------------------------------------------

def test_get_json(server: ScriptedServer, session: requests.Session) -> None:
    server.routes["/m"] = Reply(200, {"issuer": "x"}, headers={"X-Thing": "1"})
    resp = request(session, "GET", server.base + "/m", POLICY, step="discovery",
                   headers={"MCP-Protocol-Version": "2025-06-18"})
    assert resp.status == 200
    assert resp.json_object() == {"issuer": "x"}
    assert resp.headers["x-thing"] == "1"  # case-insensitive
    assert resp.url == server.base + "/m"
    assert server.requests[0].headers["Accept"] == "application/json"
    assert server.requests[0].headers["MCP-Protocol-Version"] == "2025-06-18"


def test_insecure_url_is_refused_before_any_request(session: requests.Session) -> None:
    with pytest.raises(InsecureURL):
        request(session, "GET", "http://as.invalid/x", POLICY, step="discovery")


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"a": 1}', {"a": 1}), (b"[1, 2]", None), (b"not json", None), (b"", None),
    (b"\xff\xfe", None), (b'"str"', None),
])
def test_json_object(body: bytes, expected: dict[str, Any] | None) -> None:
    assert HttpResponse(200, {}, body, "https://a").json_object() == expected


def test_non_200_statuses_are_returned_not_raised(server: ScriptedServer,
                                                  session: requests.Session) -> None:
    resp = request(session, "GET", server.base + "/missing", POLICY, step="discovery")
    assert resp.status == 404


def test_post_form_and_json(server: ScriptedServer, session: requests.Session) -> None:
    server.routes["/token"] = Reply(200, {"ok": True})
    request(session, "POST", server.base + "/token", POLICY, step="token request",
            data={"grant_type": "client_credentials"}, auth=("id", "sec"))
    request(session, "POST", server.base + "/token", POLICY, step="token request",
            json_body={"client_name": "x"})
    assert server.requests[0].body == b"grant_type=client_credentials"
    assert server.requests[0].headers["Authorization"].startswith("Basic ")
    assert server.requests[1].json() == {"client_name": "x"}


# --- size cap ---------------------------------------------------------------------------------

@pytest.mark.parametrize("chunked", [False, True])
def test_one_mebibyte_is_read(server: ScriptedServer, session: requests.Session,
                              chunked: bool) -> None:
    server.routes["/big"] = Reply(200, b"x" * (1 << 20), chunked=chunked)
    resp = request(session, "GET", server.base + "/big", POLICY, step="discovery")
    assert len(resp.body) == 1 << 20


@pytest.mark.parametrize("chunked", [False, True])
def test_more_than_one_mebibyte_raises(server: ScriptedServer, session: requests.Session,
                                       chunked: bool) -> None:
    server.routes["/big"] = Reply(200, b"x" * ((1 << 20) + 1), chunked=chunked)
    with pytest.raises(AuthError, match="larger than 1048576 bytes") as info:
        request(session, "GET", server.base + "/big", POLICY, step="discovery")
    assert info.value.step == "discovery"
    assert info.value.url == server.base + "/big"


@responses.activate
def test_cap_counts_decoded_bytes_of_a_compressed_body() -> None:
    import gzip
    bomb = gzip.compress(b"{" + b" " * 5000 + b"}")
    responses.get("https://as.example/m", body=bomb,
                  headers={"Content-Encoding": "gzip"}, auto_calculate_content_length=True)
    with requests.Session() as s, pytest.raises(AuthError, match="larger than 1000"):
        request(s, "GET", "https://as.example/m", HttpPolicy(max_bytes=1000), step="discovery")


# --- redirects --------------------------------------------------------------------------------

def _chain(server: ScriptedServer, hops: int) -> None:
    for i in range(hops):
        server.routes[f"/r{i}"] = Reply(302, headers={"Location": f"/r{i + 1}"})
    server.routes[f"/r{hops}"] = Reply(200, {"hops": hops})


def test_five_redirects_are_followed(server: ScriptedServer, session: requests.Session) -> None:
    _chain(server, 5)
    resp = request(session, "GET", server.base + "/r0", POLICY, step="discovery")
    assert resp.json_object() == {"hops": 5}
    assert resp.url == server.base + "/r5"
    assert len(server.requests) == 6


def test_six_redirects_raise(server: ScriptedServer, session: requests.Session) -> None:
    _chain(server, 6)
    with pytest.raises(AuthError, match="more than 5 redirects"):
        request(session, "GET", server.base + "/r0", POLICY, step="discovery")
    assert len(server.requests) == 6  # the sixth hop is never requested


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_post_never_follows_a_redirect(server: ScriptedServer, session: requests.Session,
                                       status: int) -> None:
    server.routes["/token"] = Reply(status, headers={"Location": "/elsewhere"})
    server.routes["/elsewhere"] = Reply(200, {"access_token": "x"})
    with pytest.raises(AuthError, match="never follows redirects") as info:
        request(session, "POST", server.base + "/token", POLICY, step="token request",
                data={"client_secret": "s3cret"})
    assert info.value.step == "token request"
    assert "s3cret" not in str(info.value)
    assert [s.path for s in server.requests] == ["/token"]


def test_redirect_to_non_loopback_http_is_refused(server: ScriptedServer,
                                                  session: requests.Session) -> None:
    server.routes["/m"] = Reply(302, headers={"Location": "http://as.invalid/m"})
    with pytest.raises(InsecureURL, match=r"redirect target http://as\.invalid/m"):
        request(session, "GET", server.base + "/m", POLICY, step="discovery")


@responses.activate
def test_https_to_http_redirect_is_refused() -> None:
    responses.get("https://as.example/m", status=302,
                  headers={"Location": "http://127.0.0.1:9/m"})
    with requests.Session() as s, pytest.raises(InsecureURL, match="from https to"):
        request(s, "GET", "https://as.example/m", HttpPolicy(allow_insecure_http=True),
                step="discovery")
    assert len(responses.calls) == 1


@responses.activate
def test_https_redirects_are_followed_with_each_hop_checked() -> None:
    responses.get("https://as.example/a", status=301,
                  headers={"Location": "https://cdn.example/b"})
    responses.get("https://cdn.example/b", json={"ok": 1})
    with requests.Session() as s:
        resp = request(s, "GET", "https://as.example/a", POLICY, step="discovery")
    assert resp.json_object() == {"ok": 1}
    assert resp.url == "https://cdn.example/b"


@responses.activate
def test_redirect_hop_to_a_private_address_is_refused() -> None:
    responses.get("https://8.8.8.8/a", status=302,
                  headers={"Location": "https://169.254.169.254/latest"})
    with requests.Session() as s, pytest.raises(InsecureURL, match="block_private_networks"):
        request(s, "GET", "https://8.8.8.8/a", BLOCK, step="discovery")


def test_credentials_are_dropped_on_a_cross_origin_hop(
        server: ScriptedServer, server2: ScriptedServer, session: requests.Session) -> None:
    server.routes["/a"] = Reply(302, headers={"Location": "/b"})
    server.routes["/b"] = Reply(302, headers={"Location": server2.base + "/c"})
    server2.routes["/c"] = Reply(200, {"ok": 1})
    headers = {"Authorization": "Bearer tok", "DPoP": "proof", "X-Other": "kept"}
    resp = request(session, "GET", server.base + "/a", POLICY, step="discovery",
                   headers=headers)
    assert resp.json_object() == {"ok": 1}
    # same origin: kept
    assert server.requests[1].headers["Authorization"] == "Bearer tok"
    assert server.requests[1].headers["DPoP"] == "proof"
    # another origin: nothing
    other = server2.requests[0].headers
    assert "Authorization" not in other
    assert "DPoP" not in other
    assert other["X-Other"] == "kept"


def test_basic_auth_is_dropped_on_a_cross_origin_hop(
        server: ScriptedServer, server2: ScriptedServer, session: requests.Session) -> None:
    server.routes["/a"] = Reply(307, headers={"Location": "/b"})
    server.routes["/b"] = Reply(307, headers={"Location": server2.base + "/c"})
    server2.routes["/c"] = Reply(200, {"ok": 1})
    request(session, "GET", server.base + "/a", POLICY, step="discovery", auth=("id", "secret"))
    assert server.requests[1].headers["Authorization"].startswith("Basic ")
    assert "Authorization" not in server2.requests[0].headers


# --- network errors ---------------------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_refused_is_an_auth_error(session: requests.Session) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/token"
    with pytest.raises(AuthError, match=r"request to .* failed") as info:
        request(session, "POST", url, POLICY, step="token request",
                data={"client_secret": "s3cret", "code": "c0de"})
    assert type(info.value) is AuthError
    assert info.value.step == "token request"
    assert info.value.url == url
    assert isinstance(info.value.__cause__, requests.ConnectionError)
    assert "s3cret" not in str(info.value) and "c0de" not in str(info.value)
    assert "refused" in str(info.value).lower()


def test_read_timeout_is_an_auth_error(server: ScriptedServer,
                                       session: requests.Session) -> None:
    server.routes["/slow"] = Reply(200, {"a": 1}, delay=1.0)
    with pytest.raises(AuthError, match=r"no answer within 0\.2 s"):
        request(session, "GET", server.base + "/slow", HttpPolicy(read_timeout=0.2),
                step="discovery")


@responses.activate
def test_network_error_message_does_not_quote_the_exception() -> None:
    responses.post("https://as.example/token",
                   body=requests.ConnectionError("boom with secret=s3cret"))
    with requests.Session() as s, pytest.raises(AuthError) as info:
        request(s, "POST", "https://as.example/token", POLICY, step="refresh",
                data={"refresh_token": "s3cret"})
    assert "s3cret" not in str(info.value)
    assert info.value.step == "refresh"
