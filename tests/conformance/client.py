"""The client under test for the official MCP conformance suite.

The suite starts a mock server per scenario and runs ``python tests/conformance/client.py
<server-url>`` with the scenario in ``MCP_CONFORMANCE_SCENARIO``. For each scenario this does
what the suite's own reference client ("everything-client") does, using nothing but mcpsync's
public API, so a failing scenario points at mcpsync and not at this script.

- ``MCP_CONFORMANCE_PROTOCOL_VERSION`` (always set by the 0.2.x suites) pins that revision:
  the handshake for dated versions up to 2025-11-25, stateless for 2026-07-28. Without it
  (suite 0.1.16) mcpsync detects the era.
- ``MCP_CONFORMANCE_CONTEXT`` is JSON the scenario hands over (``http-custom-headers`` lists
  the tool calls to make; the auth scenarios carry credentials).
- Exit status: 0 on success, 1 on any error (with a traceback on stderr, which the suite
  prints), 2 for a scenario this client does not handle (an unknown name). It always
  finishes well inside the suite's 30 s.

The ``auth/*`` scenarios run through ``mcpauth.OAuthProvider`` set up like this:
redirect URI ``http://localhost:3000/callback``, an authorization handler that GETs the
authorization URL without following redirects and hands back ``Location`` (the mock
authorization server answers at once), the client-ID metadata URL
``https://conformance-test.local/client-metadata.json``, the grant chosen from the scenario name
and the credentials from ``MCP_CONFORMANCE_CONTEXT``. Then it lists and calls the tools.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import requests

import mcpauth
import mcpsync

# Requests get this long: inside the suite's 30 s kill, so a hang becomes a readable error.
_TIMEOUT = 20.0
_EXIT_ERROR = 1
_EXIT_UNSUPPORTED = 2

_log = logging.getLogger("conformance-client")

Scenario = Callable[[str], None]


class Unsupported(Exception):
    """A scenario this client deliberately does not run (exit status 2)."""


def _step(message: str) -> None:
    """Say what the client is doing, so a failed run's stderr reads as a story."""
    print(f"[client] {message}", file=sys.stderr, flush=True)


def _context() -> dict[str, Any]:
    """The scenario's ``MCP_CONFORMANCE_CONTEXT``, or ``{}`` when the suite set none."""
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    if not raw:
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(f"MCP_CONFORMANCE_CONTEXT is not a JSON object: {raw[:200]}")
    return value


def _connect(url: str, **options: Any) -> mcpsync.Client:
    """Connect the way every scenario does: pinned to the suite's revision when it gives one."""
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") or None
    # MCPSYNC_CONFORMANCE_STDIO (a JSON argv) makes the client reach the scenario's server
    # through a stdio command instead (the gateway in front of it).
    via = os.environ.get("MCPSYNC_CONFORMANCE_STDIO")
    target: Any = json.loads(via) if via else url
    _step(f"connect {target} protocol_version={version or 'auto'}")
    client = mcpsync.connect(target, protocol_version=version, timeout=_TIMEOUT, **options)
    _step(f"connected: era={client.era} protocol_version={client.protocol_version}")
    return client


def _tool_names(client: mcpsync.Client) -> list[str]:
    """List tools, as the reference client does, unless the server offers none (the mocks of
    ``initialize`` and ``request-metadata`` advertise no capabilities; asking anyway would
    raise ``CapabilityNotSupported`` before anything is sent)."""
    if "tools" not in client.capabilities:
        _step("the server advertises no tools capability: not listing tools")
        return []
    names = [tool.name for tool in client.list_tools()]
    _step(f"tools/list -> {names}")
    return names


def _call(client: mcpsync.Client, name: str, arguments: dict[str, Any] | None = None) -> Any:
    """Call a tool and fail on a tool error: every conformance tool is meant to succeed."""
    _step(f"tools/call {name} {json.dumps(arguments or {}, ensure_ascii=False)}")
    result = client.call_tool(name, arguments or {}, raise_on_error=True)
    _step(f"  -> {result.text!r}")
    return result


def _basic(url: str) -> None:
    """``initialize`` and ``json-schema-ref-no-deref``: connect and list tools, nothing more."""
    with _connect(url) as client:
        _tool_names(client)


def _tools_call(url: str) -> None:
    with _connect(url) as client:
        _tool_names(client)
        _call(client, "add_numbers", {"a": 2, "b": 3})


def _elicitation_defaults(url: str) -> None:
    """Accept with an empty form: mcpsync must fill in every schema default (SEP-1034)."""
    def elicit(request: Any) -> dict[str, Any]:
        _step(f"elicitation/create: {request.message!r}")
        return {"action": "accept", "content": {}}

    with _connect(url, elicitation=elicit) as client:
        _tool_names(client)
        _call(client, "test_client_elicitation_defaults")


def _sse_retry(url: str) -> None:
    """The POST stream closes after a priming event; mcpsync must resume with GET (SEP-1699)."""
    with _connect(url) as client:
        _tool_names(client)
        _call(client, "test_reconnection")


def _request_metadata(url: str) -> None:
    """Every request's ``_meta`` and version header (SEP-2575); declare all three client
    capabilities so the suite can check their shape."""
    def sample(request: Any) -> dict[str, Any]:
        return {"role": "assistant", "model": "conformance",
                "content": {"type": "text", "text": "unused"}}

    def elicit(request: Any) -> dict[str, Any]:
        return {"action": "decline"}

    with _connect(url, sampling=sample, elicitation=elicit,
                  roots=["file:///conformance"]) as client:
        _tool_names(client)


def _request_state(url: str) -> None:
    """Input-required rounds (SEP-2322): echo ``requestState`` verbatim, never invent one, and
    keep an unrelated call made between two rounds clean of both."""
    state: dict[str, Any] = {"client": None, "unrelated_done": False}

    def elicit(request: Any) -> dict[str, Any]:
        _step(f"input request: {request.message!r}")
        if not state["unrelated_done"]:
            state["unrelated_done"] = True
            _call(state["client"], "test_mrtr_unrelated")
        return {"action": "accept", "content": {"confirmed": True}}

    with _connect(url, elicitation=elicit) as client:
        state["client"] = client
        _tool_names(client)
        _call(client, "test_mrtr_echo_state")
        if not state["unrelated_done"]:
            raise AssertionError("test_mrtr_echo_state finished without asking for input")
        _call(client, "test_mrtr_no_state")
        _call(client, "test_mrtr_no_result_type")


def _standard_headers(url: str) -> None:
    """``Mcp-Method`` on every request and ``Mcp-Name`` on tools/call, resources/read and
    prompts/get (SEP-2243): exercise each of them once."""
    with _connect(url) as client:
        for name in _tool_names(client):
            _call(client, name)
        resources = client.list_resources()
        _step(f"resources/list -> {[r.uri for r in resources]}")
        for resource in resources:
            _step(f"resources/read {resource.uri}")
            client.read_resource(resource.uri)
        prompts = client.list_prompts()
        _step(f"prompts/list -> {[p.name for p in prompts]}")
        for prompt in prompts:
            _step(f"prompts/get {prompt.name}")
            client.get_prompt(prompt.name)


def _custom_headers(url: str) -> None:
    """Mirror ``x-mcp-header`` arguments into ``Mcp-Param-*`` headers: make exactly the tool
    calls the scenario lists in its context."""
    calls = _context().get("toolCalls")
    if not isinstance(calls, list) or not calls:
        raise ValueError("http-custom-headers: MCP_CONFORMANCE_CONTEXT has no toolCalls")
    with _connect(url) as client:
        _tool_names(client)
        for call in calls:
            _call(client, call["name"], call.get("arguments") or {})


def _placeholder(schema: Any) -> Any:
    """A value of the property's JSON type, to call a tool we know nothing else about."""
    kind = str(schema.get("type")) if isinstance(schema, dict) else ""
    return {"string": "us-west1", "integer": 1, "number": 1.5, "boolean": True,
            "object": {}, "array": [], "null": None}.get(kind, "x")


def _invalid_tool_headers(url: str) -> None:
    """mcpsync must drop every tool whose ``x-mcp-header`` is malformed. Call every tool that
    ``list_tools()`` kept: the suite fails the run if one of the bad ones is among them."""
    with _connect(url) as client:
        tools = client.list_tools()
        _step(f"tools/list kept {[t.name for t in tools]}")
        for tool in tools:
            properties = tool.input_schema.get("properties") or {}
            arguments = {key: _placeholder(value) for key, value in properties.items()}
            _call(client, tool.name, arguments)


def _schema_preservation(url: str) -> None:
    """Echo the focal tool's ``inputSchema`` back exactly as mcpsync exposes it (SEP-1613,
    SEP-2106): any keyword lost in parsing shows up in the suite's checks."""
    with _connect(url) as client:
        tools = {tool.name: tool for tool in client.list_tools()}
        _step(f"tools/list -> {sorted(tools)}")
        focal = tools["json_schema_2020_12_tool"]
        _call(client, "json_schema_echo", {"schema": focal.input_schema})


def _skills_no_prefetch(url: str) -> None:
    """List the skills and load none: no file may be read."""
    with _connect(url) as client:
        skills = client.list_skills()
        _step(f"listed {len(skills)} skill(s): {[s.uri for s in skills]}")


def _skills_verify(url: str) -> None:
    """List the skills, then load each and read its files: a tampered SKILL.md must stop
    the load (SkillVerificationError) before any other file of the skill is read."""
    with _connect(url) as client:
        for skill in client.list_skills():
            try:
                loaded = client.get_skill(skill.uri)
            except mcpsync.SkillVerificationError as exc:
                _step(f"refused {skill.uri}: {exc}")
                continue
            for item in skill.files or ():
                if item.uri != skill.uri:
                    loaded.read(item.uri)
            _step(f"loaded {skill.uri}")


# --- auth scenarios (mcpauth) ---------------------------------------------------------------

_REDIRECT_URI = "http://localhost:3000/callback"
_CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def _follow_once(url: str) -> str:
    """The authorization handler: GET the authorization URL, do not follow the redirect, and
    return where the authorization server sent the browser (its ``Location``)."""
    _step(f"authorize: GET {url.split('?', 1)[0]}")
    response = requests.get(url, allow_redirects=False, timeout=_TIMEOUT)
    location = response.headers.get("Location")
    if not location:
        raise RuntimeError(f"the authorization endpoint answered {response.status_code} "
                           "without a Location header")
    _step(f"  -> {response.status_code} to {location.split('?', 1)[0]}")
    return str(location)


def _auth_provider(scenario: str, url: str) -> mcpauth.OAuthProvider:
    """An ``OAuthProvider`` configured for this scenario from its name and context."""
    context = _context()
    options: dict[str, Any] = {
        "interactive": True,
        "authorization_handler": _follow_once,
        "redirect_uri": _REDIRECT_URI,
        "client_metadata_url": _CLIENT_METADATA_URL,
        "client_name": "mcpsync-conformance",
        "protocol_version": os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") or None,
    }
    if context.get("client_id"):
        options["client_id"] = context["client_id"]
    if context.get("client_secret"):
        options["client_secret"] = context["client_secret"]
    if context.get("private_key_pem"):
        options["private_key"] = context["private_key_pem"]
        options["signing_alg"] = context.get("signing_algorithm") or "ES256"
    name = scenario.removeprefix("auth/")
    if name.startswith("client-credentials-"):
        options["grant"] = "client_credentials"
    elif name in ("cross-app-access-complete-flow", "enterprise-managed-authorization"):
        options.update(grant="id_jag", id_token=context["idp_id_token"],
                       idp_client_id=context["idp_client_id"],
                       idp_client_secret=context.get("idp_client_secret"),
                       idp_token_endpoint=context.get("idp_token_endpoint"),
                       idp_issuer=context.get("idp_issuer"))
    elif name == "wif-jwt-bearer":
        jwt = str(context["valid_jwt"])
        options.update(grant="jwt_bearer", assertion_provider=lambda: jwt)
    _step(f"auth: grant={options.get('grant', 'authorization_code')} "
          f"context keys={sorted(context)}")
    return mcpauth.OAuthProvider(url, **options)


def _auth(scenario: str) -> Scenario:
    def run(url: str) -> None:
        provider = _auth_provider(scenario, url)
        try:
            with _connect(url, auth=provider) as client:
                for name in _tool_names(client):
                    _call(client, name)
        finally:
            provider.close()
    return run


def _unsupported(reason: str) -> Scenario:
    def run(url: str) -> None:
        raise Unsupported(reason)
    return run


_SCENARIOS: dict[str, Scenario] = {
    "initialize": _basic,
    "tools_call": _tools_call,
    "elicitation-sep1034-client-defaults": _elicitation_defaults,
    "sse-retry": _sse_retry,
    "request-metadata": _request_metadata,
    "sep-2322-client-request-state": _request_state,
    "http-standard-headers": _standard_headers,
    "http-custom-headers": _custom_headers,
    "http-invalid-tool-headers": _invalid_tool_headers,
    "json-schema-ref-no-deref": _basic,
    "json-schema-2020-12-preservation": _schema_preservation,
    "sep-2640-client-no-prefetch": _skills_no_prefetch,
    "sep-2640-client-verify-digest": _skills_verify,
    "sep-2640-client-verify-size": _skills_verify,
    "sep-2640-client-verify-frontmatter": _skills_verify,
}


def _handler(scenario: str) -> Scenario:
    if scenario in _SCENARIOS:
        return _SCENARIOS[scenario]
    if scenario.startswith("auth/"):
        return _auth(scenario)
    return _unsupported(f"unknown conformance scenario {scenario!r}")


def main(argv: list[str]) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    if len(argv) != 2 or not scenario:
        print("usage: MCP_CONFORMANCE_SCENARIO=<scenario> python tests/conformance/client.py "
              "<server-url>", file=sys.stderr)
        return _EXIT_UNSUPPORTED
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    _step(f"scenario={scenario} url={argv[1]}")
    try:
        _handler(scenario)(argv[1])
    except Unsupported as exc:
        print(f"[client] NOT RUN: {exc}", file=sys.stderr)
        return _EXIT_UNSUPPORTED
    except Exception:
        traceback.print_exc()
        return _EXIT_ERROR
    _step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
