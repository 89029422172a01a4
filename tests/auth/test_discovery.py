"""Discovery: URL construction, the resource check, issuer exactness, PKCE and
the 2025-03-26 fallback, against real loopback servers."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import requests
import responses

from mcpauth._http import HttpPolicy
from mcpauth.discovery import (
    ServerMetadata,
    authorization_server_metadata_urls,
    canonical_resource,
    discover_authorization_server,
    discover_resource,
    legacy_authorization_server,
    require_pkce_s256,
    resource_covers,
    resource_metadata_urls,
    same_identifier,
)
from mcpauth.errors import (
    DiscoveryError,
    InsecureURL,
    IssuerMismatch,
    PKCENotSupported,
    ResourceMismatch,
)

from ._servers import Reply, ScriptedServer

POLICY = HttpPolicy()
PRM = "/.well-known/oauth-protected-resource"





# --- URL construction -------------------------------------------------------------------------

@pytest.mark.parametrize(("server_url", "hint", "expected"), [
    ("https://mcp.example.com/mcp", None,
     ["https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
      "https://mcp.example.com/.well-known/oauth-protected-resource"]),
    ("https://mcp.example.com/mcp/", None,
     ["https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
      "https://mcp.example.com/.well-known/oauth-protected-resource"]),
    ("https://mcp.example.com/public/mcp", None,
     ["https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp",
      "https://mcp.example.com/.well-known/oauth-protected-resource"]),
    ("https://mcp.example.com", None,
     ["https://mcp.example.com/.well-known/oauth-protected-resource"]),
    ("https://mcp.example.com/", None,
     ["https://mcp.example.com/.well-known/oauth-protected-resource"]),
    ("HTTPS://MCP.Example.COM:443/mcp?x=1#f", None,
     ["https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
      "https://mcp.example.com/.well-known/oauth-protected-resource"]),
    ("http://127.0.0.1:8080/mcp", None,
     ["http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp",
      "http://127.0.0.1:8080/.well-known/oauth-protected-resource"]),
    ("https://mcp.example.com/mcp", "https://meta.example.com/prm",
     ["https://meta.example.com/prm",
      "https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
      "https://mcp.example.com/.well-known/oauth-protected-resource"]),
    ("https://mcp.example.com/mcp", "/custom/prm",
     ["https://mcp.example.com/custom/prm",
      "https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
      "https://mcp.example.com/.well-known/oauth-protected-resource"]),
    ("https://mcp.example.com/mcp",
     "https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
     ["https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
      "https://mcp.example.com/.well-known/oauth-protected-resource"]),
])
def test_resource_metadata_urls(server_url: str, hint: str | None,
                                expected: list[str]) -> None:
    assert resource_metadata_urls(server_url, hint) == expected


@pytest.mark.parametrize(("issuer", "expected"), [
    ("https://auth.example.com/tenant1",
     ["https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
      "https://auth.example.com/.well-known/openid-configuration/tenant1",
      "https://auth.example.com/tenant1/.well-known/openid-configuration"]),
    ("https://auth.example.com/tenant1/",
     ["https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
      "https://auth.example.com/.well-known/openid-configuration/tenant1",
      "https://auth.example.com/tenant1/.well-known/openid-configuration"]),
    ("https://auth.example.com/a/b",
     ["https://auth.example.com/.well-known/oauth-authorization-server/a/b",
      "https://auth.example.com/.well-known/openid-configuration/a/b",
      "https://auth.example.com/a/b/.well-known/openid-configuration"]),
    ("https://auth.example.com",
     ["https://auth.example.com/.well-known/oauth-authorization-server",
      "https://auth.example.com/.well-known/openid-configuration"]),
    ("https://auth.example.com/",
     ["https://auth.example.com/.well-known/oauth-authorization-server",
      "https://auth.example.com/.well-known/openid-configuration"]),
    ("http://127.0.0.1:9000",
     ["http://127.0.0.1:9000/.well-known/oauth-authorization-server",
      "http://127.0.0.1:9000/.well-known/openid-configuration"]),
])
def test_authorization_server_metadata_urls(issuer: str, expected: list[str]) -> None:
    assert authorization_server_metadata_urls(issuer) == expected


@pytest.mark.parametrize(("url", "expected"), [
    ("https://mcp.example.com/mcp", "https://mcp.example.com/mcp"),
    ("HTTPS://MCP.EXAMPLE.COM/MCP", "https://mcp.example.com/MCP"),
    ("https://mcp.example.com:443/mcp/", "https://mcp.example.com/mcp"),
    ("https://mcp.example.com:8443", "https://mcp.example.com:8443/"),
    ("http://localhost:80/x#frag", "http://localhost/x"),
    ("http://localhost:3000/mcp", "http://localhost:3000/mcp"),
    ("https://mcp.example.com", "https://mcp.example.com/"),
    ("https://mcp.example.com/", "https://mcp.example.com/"),
    ("https://user:pw@mcp.example.com/mcp", "https://mcp.example.com/mcp"),
    ("https://mcp.example.com/mcp?tenant=a", "https://mcp.example.com/mcp?tenant=a"),
    ("http://[::1]:8080/mcp", "http://[::1]:8080/mcp"),
])
def test_canonical_resource(url: str, expected: str) -> None:
    assert canonical_resource(url) == expected


@pytest.mark.parametrize(("resource", "server_url", "covers"), [
    ("https://a.example/mcp", "https://a.example/mcp", True),
    ("https://a.example/mcp", "https://a.example/mcp/", True),
    ("https://a.example/mcp/", "https://a.example/mcp", True),
    ("https://a.example/mcp", "https://a.example/mcp/x", True),
    ("https://a.example/mcp", "https://a.example/mcpx", False),
    ("https://a.example/mcp/x", "https://a.example/mcp", False),
    ("https://a.example", "https://a.example/mcp", True),       # auth/metadata-var2
    ("https://a.example/", "https://a.example/any/path", True),
    ("https://A.EXAMPLE/mcp", "https://a.example/mcp", True),
    ("HTTPS://a.example/mcp", "https://a.example/mcp", True),
    ("https://a.example:443/mcp", "https://a.example/mcp", True),
    ("http://a.example:80/mcp", "http://a.example/mcp", True),
    ("https://a.example:8443/mcp", "https://a.example/mcp", False),
    ("http://a.example/mcp", "https://a.example/mcp", False),
    ("https://b.example/mcp", "https://a.example/mcp", False),
    ("https://a.example.evil/mcp", "https://a.example/mcp", False),
    ("https://a.example/MCP", "https://a.example/mcp", False),
    ("not a url", "https://a.example/mcp", False),
    ("https://a.example:99999/mcp", "https://a.example/mcp", False),
])
def test_resource_covers(resource: str, server_url: str, covers: bool) -> None:
    assert resource_covers(resource, server_url) is covers


@pytest.mark.parametrize(("a", "b", "same"), [
    ("https://a.example", "https://a.example", True),
    ("https://a.example", "https://a.example/", False),
    ("https://a.example", "https://A.example", False),
    ("https://a.example", "https://a.example:443", False),
    ("https://a.example/t%41", "https://a.example/tA", False),
    ("https://a.example/t", "https://a.example/t/", False),
])
def test_same_identifier_is_exact(a: str, b: str, same: bool) -> None:
    assert same_identifier(a, b) is same
    assert same_identifier(b, a) is same


# --- protected-resource metadata ---------------------------------------------------------------

def prm(resource: str, **extra: Any) -> dict[str, Any]:
    return {"resource": resource, "authorization_servers": ["https://as.example"], **extra}


def test_hint_is_tried_first(server: ScriptedServer, session: requests.Session) -> None:
    server.routes["/meta"] = Reply(200, prm(server.base + "/mcp", scopes_supported=["a", "b"],
                                            dpop_bound_access_tokens_required=True))
    server.routes[PRM + "/mcp"] = Reply(200, prm(server.base + "/other"))
    meta = discover_resource(server.base + "/mcp", hint=server.base + "/meta", session=session,
                             policy=POLICY, protocol_version="2025-11-25")
    assert meta is not None
    assert meta.resource == server.base + "/mcp"
    assert meta.authorization_servers == ("https://as.example",)
    assert meta.scopes_supported == ("a", "b")
    assert meta.dpop_bound_access_tokens_required is True
    assert meta.url == server.base + "/meta"
    assert meta.raw["scopes_supported"] == ["a", "b"]
    assert [s.path for s in server.requests] == ["/meta"]
    assert server.requests[0].headers["MCP-Protocol-Version"] == "2025-11-25"
    assert server.requests[0].headers["Accept"] == "application/json"


@pytest.mark.parametrize("bad", [
    Reply(404, {"error": "nope"}),
    Reply(500, prm("x")),
    Reply(200, "not json"),
    Reply(200, [1, 2]),
    Reply(200, {"authorization_servers": ["https://as.example"]}),          # no resource
    Reply(200, {"resource": "R", "authorization_servers": []}),             # empty list
    Reply(200, {"resource": "R", "authorization_servers": "https://as"}),   # not a list
    Reply(200, {"resource": "R", "authorization_servers": [1]}),            # not strings
    Reply(200, {"resource": 5, "authorization_servers": ["https://as"]}),
], ids=["404", "500", "non-json", "list", "no-resource", "empty-as", "as-string", "as-int",
        "resource-int"])
def test_invalid_answers_move_on(server: ScriptedServer, session: requests.Session,
                                 bad: Reply) -> None:
    server.routes["/meta"] = bad
    server.routes[PRM + "/mcp"] = bad
    server.routes[PRM] = Reply(200, prm(server.base))
    meta = discover_resource(server.base + "/mcp", hint=server.base + "/meta", session=session,
                             policy=POLICY)
    assert meta is not None and meta.url == server.base + PRM
    assert [s.path for s in server.requests] == ["/meta", PRM + "/mcp", PRM]
    assert meta.scopes_supported is None
    assert meta.dpop_bound_access_tokens_required is False


def test_path_well_known_before_root(server: ScriptedServer, session: requests.Session) -> None:
    server.routes[PRM + "/public/mcp"] = Reply(200, prm(server.base + "/public/mcp"))
    server.routes[PRM] = Reply(200, prm(server.base))
    meta = discover_resource(server.base + "/public/mcp/", hint=None, session=session,
                             policy=POLICY)
    assert meta is not None and meta.url == server.base + PRM + "/public/mcp"


def test_root_server_url_tries_root_only(server: ScriptedServer,
                                         session: requests.Session) -> None:
    assert discover_resource(server.base + "/", hint=None, session=session,
                             policy=POLICY) is None
    assert [s.path for s in server.requests] == [PRM]


def test_no_metadata_anywhere_is_none(server: ScriptedServer,
                                      session: requests.Session) -> None:
    assert discover_resource(server.base + "/mcp", hint=None, session=session,
                             policy=POLICY) is None
    assert [s.path for s in server.requests] == [PRM + "/mcp", PRM]


def test_network_error_on_the_hint_moves_on(server: ScriptedServer,
                                            session: requests.Session) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/meta"
    server.routes[PRM + "/mcp"] = Reply(200, prm(server.base + "/mcp"))
    meta = discover_resource(server.base + "/mcp", hint=dead, session=session, policy=POLICY)
    assert meta is not None and meta.url == server.base + PRM + "/mcp"


def test_oversize_metadata_moves_on(server: ScriptedServer, session: requests.Session) -> None:
    big = prm(server.base + "/mcp", padding="x" * (1 << 20))
    server.routes[PRM + "/mcp"] = Reply(200, big)
    server.routes[PRM] = Reply(200, prm(server.base))
    meta = discover_resource(server.base + "/mcp", hint=None, session=session, policy=POLICY)
    assert meta is not None and meta.url == server.base + PRM


@pytest.mark.parametrize("resource", ["/mcpx", "/other", ":1/mcp"])
def test_resource_mismatch(server: ScriptedServer, session: requests.Session,
                           resource: str) -> None:
    claimed = (f"http://127.0.0.1{resource}" if resource.startswith(":")
               else server.base + resource)
    server.routes[PRM + "/mcp"] = Reply(200, prm(claimed))
    with pytest.raises(ResourceMismatch) as info:
        discover_resource(server.base + "/mcp", hint=None, session=session, policy=POLICY)
    assert info.value.resource == claimed
    assert info.value.server_url == server.base + "/mcp"
    assert info.value.step == "discovery"
    assert claimed in str(info.value)


def test_resource_mismatch_from_another_host(server: ScriptedServer,
                                             session: requests.Session) -> None:
    server.routes["/meta"] = Reply(200, prm("https://evil.example/mcp"))
    with pytest.raises(ResourceMismatch):
        discover_resource(server.base + "/mcp", hint=server.base + "/meta", session=session,
                          policy=POLICY)


def test_origin_resource_is_accepted_for_root_metadata(server: ScriptedServer,
                                                       session: requests.Session) -> None:
    server.routes[PRM] = Reply(200, prm(server.base))
    meta = discover_resource(server.base + "/mcp", hint=None, session=session, policy=POLICY)
    assert meta is not None and meta.resource == server.base


def test_unresolvable_hosts_move_on_with_block_private_networks(
        monkeypatch: pytest.MonkeyPatch, session: requests.Session) -> None:
    def no_dns(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    assert discover_resource("https://mcp.example/mcp", hint="https://meta.example/prm",
                             session=session,
                             policy=HttpPolicy(block_private_networks=True)) is None


def test_private_hint_is_refused_with_block_private_networks(
        session: requests.Session) -> None:
    with pytest.raises(InsecureURL, match="block_private_networks"):
        discover_resource("https://8.8.8.8/mcp", hint="https://169.254.169.254/prm",
                          session=session, policy=HttpPolicy(block_private_networks=True))


def test_insecure_hint_raises(session: requests.Session) -> None:
    with pytest.raises(InsecureURL, match="resource_metadata URL"):
        discover_resource("https://mcp.example/mcp", hint="http://evil.example/prm",
                          session=session, policy=POLICY)


@responses.activate
def test_https_discovery_with_responses() -> None:
    responses.get("https://mcp.example/.well-known/oauth-protected-resource/mcp", status=404)
    responses.get("https://mcp.example/.well-known/oauth-protected-resource",
                  json=prm("https://mcp.example/"))
    with requests.Session() as s:
        meta = discover_resource("https://mcp.example/mcp", hint=None, session=s,
                                 policy=POLICY)
    assert meta is not None and meta.resource == "https://mcp.example/"


@responses.activate
def test_redirect_to_http_is_refused_when_nothing_else_answers() -> None:
    responses.get("https://mcp.example/.well-known/oauth-protected-resource/mcp", status=302,
                  headers={"Location": "http://mcp.example/prm"})
    responses.get("https://mcp.example/.well-known/oauth-protected-resource", status=404)
    with requests.Session() as s, pytest.raises(InsecureURL):
        discover_resource("https://mcp.example/mcp", hint=None, session=s, policy=POLICY)


# --- authorization-server metadata ------------------------------------------------------------

def asm(issuer: str, **extra: Any) -> dict[str, Any]:
    return {"issuer": issuer, "authorization_endpoint": issuer + "/authorize",
            "token_endpoint": issuer + "/token", "code_challenge_methods_supported": ["S256"],
            "response_types_supported": ["code"], **extra}


def test_full_metadata_is_read(server: ScriptedServer, session: requests.Session) -> None:
    issuer = server.base
    server.routes["/.well-known/oauth-authorization-server"] = Reply(200, asm(
        issuer, registration_endpoint=issuer + "/register",
        device_authorization_endpoint=issuer + "/device", scopes_supported=["a", "offline_access"],
        grant_types_supported=["authorization_code"],
        token_endpoint_auth_methods_supported=["none"],
        dpop_signing_alg_values_supported=["ES256"],
        authorization_response_iss_parameter_supported=True,
        client_id_metadata_document_supported=True))
    meta = discover_authorization_server(issuer, session=session, policy=POLICY)
    assert meta.issuer == issuer
    assert meta.authorization_endpoint == issuer + "/authorize"
    assert meta.token_endpoint == issuer + "/token"
    assert meta.registration_endpoint == issuer + "/register"
    assert meta.device_authorization_endpoint == issuer + "/device"
    assert meta.scopes_supported == ("a", "offline_access")
    assert meta.grant_types_supported == ("authorization_code",)
    assert meta.token_endpoint_auth_methods_supported == ("none",)
    assert meta.code_challenge_methods_supported == ("S256",)
    assert meta.dpop_signing_alg_values_supported == ("ES256",)
    assert meta.authorization_response_iss_parameter_supported is True
    assert meta.client_id_metadata_document_supported is True
    assert meta.fallback is False
    assert len(server.requests) == 1


def test_well_known_order_with_a_path(server: ScriptedServer,
                                      session: requests.Session) -> None:
    with pytest.raises(DiscoveryError) as info:
        discover_authorization_server(server.base + "/tenant1", session=session, policy=POLICY)
    assert [s.path for s in server.requests] == [
        "/.well-known/oauth-authorization-server/tenant1",
        "/.well-known/openid-configuration/tenant1",
        "/tenant1/.well-known/openid-configuration"]
    assert info.value.step == "discovery"
    assert info.value.url == server.base + "/tenant1"


def test_well_known_order_without_a_path(server: ScriptedServer,
                                         session: requests.Session) -> None:
    with pytest.raises(DiscoveryError):
        discover_authorization_server(server.base, session=session, policy=POLICY)
    assert [s.path for s in server.requests] == ["/.well-known/oauth-authorization-server",
                                             "/.well-known/openid-configuration"]


def test_oidc_path_appended_is_used_last(server: ScriptedServer,
                                         session: requests.Session) -> None:
    issuer = server.base + "/tenant1"
    server.routes["/tenant1/.well-known/openid-configuration"] = Reply(200, asm(issuer))
    meta = discover_authorization_server(issuer, session=session, policy=POLICY)
    assert meta.issuer == issuer
    assert len(server.requests) == 3


def test_issuer_mismatch_skips_to_the_next_url(server: ScriptedServer,
                                               session: requests.Session) -> None:
    issuer = server.base + "/tenant1"
    server.routes["/.well-known/oauth-authorization-server/tenant1"] = Reply(
        200, asm(server.base + "/tenant1/"))
    server.routes["/.well-known/openid-configuration/tenant1"] = Reply(200, asm(issuer))
    meta = discover_authorization_server(issuer, session=session, policy=POLICY)
    assert meta.issuer == issuer
    assert meta.raw["issuer"] == issuer


@pytest.mark.parametrize("claimed", ["{base}/", "{upper}", "{base}/other", "https://evil.example"])
def test_issuer_mismatch_raises_naming_both(server: ScriptedServer, session: requests.Session,
                                            claimed: str) -> None:
    actual = claimed.format(base=server.base, upper=server.base.replace("http", "HTTP"))
    server.routes["/.well-known/oauth-authorization-server"] = Reply(200, asm(actual))
    with pytest.raises(IssuerMismatch) as info:
        discover_authorization_server(server.base, session=session, policy=POLICY)
    assert info.value.expected == server.base
    assert info.value.actual == actual
    assert server.base in str(info.value) and actual in str(info.value)


def test_invalid_documents_give_discovery_error(server: ScriptedServer,
                                                session: requests.Session) -> None:
    server.routes["/.well-known/oauth-authorization-server"] = Reply(
        200, {"issuer": server.base})  # no token endpoint
    server.routes["/.well-known/openid-configuration"] = Reply(200, "<html>")
    with pytest.raises(DiscoveryError, match="no usable authorization server metadata"):
        discover_authorization_server(server.base, session=session, policy=POLICY)


def test_insecure_issuer_is_refused(session: requests.Session) -> None:
    with pytest.raises(InsecureURL, match="authorization server issuer"):
        discover_authorization_server("http://as.example", session=session, policy=POLICY)


@pytest.mark.parametrize("field", ["token_endpoint", "authorization_endpoint",
                                   "registration_endpoint", "device_authorization_endpoint"])
def test_insecure_endpoint_in_metadata_is_refused(server: ScriptedServer,
                                                  session: requests.Session,
                                                  field: str) -> None:
    server.routes["/.well-known/oauth-authorization-server"] = Reply(
        200, asm(server.base, **{field: "http://as.example/x"}))
    with pytest.raises(InsecureURL, match=r"http://as\.example/x"):
        discover_authorization_server(server.base, session=session, policy=POLICY)


# --- PKCE -------------------------------------------------------------------------------------

def meta_with(methods: tuple[str, ...] | None, fallback: bool = False) -> ServerMetadata:
    return ServerMetadata(
        issuer="https://as.example", authorization_endpoint="https://as.example/a",
        token_endpoint="https://as.example/t", registration_endpoint=None,
        device_authorization_endpoint=None, scopes_supported=None, grant_types_supported=None,
        token_endpoint_auth_methods_supported=None, code_challenge_methods_supported=methods,
        dpop_signing_alg_values_supported=None,
        authorization_response_iss_parameter_supported=False,
        client_id_metadata_document_supported=False, fallback=fallback, raw={})


@pytest.mark.parametrize("methods", [None, (), ("plain",), ("s256",)])
def test_pkce_s256_required(methods: tuple[str, ...] | None) -> None:
    with pytest.raises(PKCENotSupported) as info:
        require_pkce_s256(meta_with(methods))
    assert "https://as.example" in str(info.value)
    assert info.value.url == "https://as.example"


@pytest.mark.parametrize("methods", [("S256",), ("plain", "S256")])
def test_pkce_s256_accepted(methods: tuple[str, ...]) -> None:
    require_pkce_s256(meta_with(methods))


def test_pkce_check_skipped_only_for_the_endpoint_fallback() -> None:
    require_pkce_s256(meta_with(None, fallback=True))


# --- the 2025-03-26 fallback ------------------------------------------------------------------

def test_legacy_metadata_at_the_origin(server: ScriptedServer,
                                       session: requests.Session) -> None:
    server.routes["/.well-known/oauth-authorization-server"] = Reply(200, asm(server.base))
    meta = legacy_authorization_server(server.base + "/mcp", session=session, policy=POLICY,
                                       protocol_version="2025-03-26")
    assert meta.issuer == server.base
    assert meta.fallback is False
    assert [s.path for s in server.requests] == ["/.well-known/oauth-authorization-server"]
    assert server.requests[0].headers["MCP-Protocol-Version"] == "2025-03-26"
    require_pkce_s256(meta)


def test_legacy_404_guesses_the_endpoints(server: ScriptedServer,
                                          session: requests.Session) -> None:
    meta = legacy_authorization_server(server.base + "/deep/mcp/", session=session,
                                       policy=POLICY)
    assert meta.fallback is True
    assert meta.issuer == server.base
    assert meta.authorization_endpoint == server.base + "/authorize"
    assert meta.token_endpoint == server.base + "/token"
    assert meta.registration_endpoint == server.base + "/register"
    assert meta.code_challenge_methods_supported is None
    require_pkce_s256(meta)  # exempt
    assert "MCP-Protocol-Version" not in server.requests[0].headers


def test_legacy_issuer_must_be_the_origin(server: ScriptedServer,
                                          session: requests.Session) -> None:
    server.routes["/.well-known/oauth-authorization-server"] = Reply(
        200, asm(server.base + "/"))
    with pytest.raises(IssuerMismatch) as info:
        legacy_authorization_server(server.base + "/mcp", session=session, policy=POLICY)
    assert info.value.expected == server.base
    assert info.value.actual == server.base + "/"


@pytest.mark.parametrize("reply", [Reply(500, {}), Reply(200, "<html>"), Reply(403, {})])
def test_legacy_other_failures_are_discovery_errors(server: ScriptedServer,
                                                    session: requests.Session,
                                                    reply: Reply) -> None:
    server.routes["/.well-known/oauth-authorization-server"] = reply
    with pytest.raises(DiscoveryError):
        legacy_authorization_server(server.base + "/mcp", session=session, policy=POLICY)


def test_legacy_refuses_a_non_loopback_http_server(session: requests.Session) -> None:
    with pytest.raises(InsecureURL):
        legacy_authorization_server("http://mcp.example/mcp", session=session, policy=POLICY)
