"""The server under test for the official MCP conformance suite ("everything server").

The suite's server scenarios (``conformance server --url http://127.0.0.1:PORT/mcp``) call a
server that exposes a fixed set of tools, resources and prompts with fixed names and
behaviours. :func:`build` makes that set with nothing but ``mcpsync.Server``'s public API, one
function per fixture, so a failing scenario points at mcpsync and not at this script.
``server_expectations.SCENARIOS`` says which scenario uses which fixture.

Asking the client goes through ``ctx.elicit`` / ``ctx.sample`` / ``ctx.list_roots`` only, so
the same fixture serves both eras: a legacy client receives a real request, a 2026-07-28 client
an ``input_required`` result and a sealed ``requestState`` to send back.

Run it as ``python tests/conformance/server.py --port PORT`` (Streamable HTTP at
``http://127.0.0.1:PORT/mcp``, every era at once, until killed) or ``--stdio``.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcpsync.jsonrpc import INTERNAL_ERROR
from mcpsync.server import Ask, Context, Refusal, Server
from mcpsync.types import AudioContent, EmbeddedResource, ImageContent

__all__ = ["AUDIO_WAV", "PNG", "build", "main"]

# A 1x1 red PNG pixel and a minimal WAV file: the suite only checks type, data and mimeType.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAF"
                       "BQIAX8jx0gAAAABJRU5ErkJggg==")
AUDIO_WAV = base64.b64decode("UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=")

# Listed with this raw JSON Schema 2020-12, which tools/list must show unchanged.
JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                          "properties": {"street": {"type": "string"},
                                         "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
                   "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                   "phone": {"type": "string"}, "email": {"type": "string"}},
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

SEP1034_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {"type": "string", "description": "User status",
                   "enum": ["active", "inactive", "pending"], "default": "active"},
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    "required": [],
}

SEP1330_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "description": "Select one option",
                           "enum": ["option1", "option2", "option3"]},
        "titledSingle": {"type": "string", "description": "Select one option with titles",
                         "oneOf": [{"const": "value1", "title": "First Option"},
                                   {"const": "value2", "title": "Second Option"},
                                   {"const": "value3", "title": "Third Option"}]},
        "legacyEnum": {"type": "string", "description": "Select one option (legacy)",
                       "enum": ["opt1", "opt2", "opt3"],
                       "enumNames": ["Option One", "Option Two", "Option Three"]},
        "untitledMulti": {"type": "array", "description": "Select multiple options",
                          "minItems": 1, "maxItems": 3,
                          "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
        "titledMulti": {"type": "array", "description": "Select multiple options with titles",
                        "minItems": 1, "maxItems": 3,
                        "items": {"anyOf": [{"const": "value1", "title": "First Choice"},
                                            {"const": "value2", "title": "Second Choice"},
                                            {"const": "value3", "title": "Third Choice"}]}},
    },
    "required": [],
}

# A tool parameter mirrored into an ``Mcp-Param-Region`` HTTP header (2026-07-28).
HEADER_PARAM_SCHEMA = {
    "type": "object",
    "properties": {"region": {"type": "string", "description": "Where to run",
                              "x-mcp-header": "Region"}},
    "required": ["region"],
}

WATCHED_TEXT = "Watched resource content"
_STEP_DELAY = 0.05   # between the log and progress messages: the suite wants them spread out


def _form(field: str, kind: str = "string") -> dict[str, Any]:
    """A one-field form that requires the field."""
    return {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}


def _answer(content: dict[str, Any] | None, field: str) -> str:
    value = (content or {}).get(field)
    return value if isinstance(value, str) else "unknown"


def build() -> Server:
    """The complete fixture set of the suite's server scenarios, both eras."""
    server = Server("mcpsync-conformance-server", "1.0.0", concurrency=8,
                    cache_ttl_ms=300_000, cache_scope="public",
                    instructions="The fixtures of the MCP conformance suite.")
    _content_tools(server)
    _notifying_tools(server)
    _asking_tools(server)
    _input_required_tools(server)
    _stateless_tools(server)
    _schema_tools(server)
    _task_tools(server)
    _resources(server)
    server.serve_skills(Path(__file__).with_name("skills"))
    _prompts(server)
    return server


# --- tools returning content ------------------------------------------------------------

def _content_tools(server: Server) -> None:
    @server.tool()
    def test_simple_text() -> str:
        """Tests simple text content response."""
        return "This is a simple text response for testing."

    @server.tool()
    def test_image_content() -> list[Any]:
        """Tests image content response."""
        return [ImageContent.from_bytes(PNG, "image/png")]

    @server.tool()
    def test_audio_content() -> list[Any]:
        """Tests audio content response."""
        return [AudioContent.from_bytes(AUDIO_WAV, "audio/wav")]

    @server.tool()
    def test_embedded_resource() -> list[Any]:
        """Tests embedded resource content response."""
        return [EmbeddedResource.from_text("test://embedded-resource",
                                           "This is an embedded resource content.",
                                           "text/plain")]

    @server.tool()
    def test_multiple_content_types() -> list[Any]:
        """Tests response with multiple content types (text, image, resource)."""
        return ["Multiple content types test:", ImageContent.from_bytes(PNG, "image/png"),
                EmbeddedResource.from_text("test://mixed-content-resource",
                                           json.dumps({"test": "data", "value": 123}),
                                           "application/json")]

    @server.tool()
    def test_error_handling() -> str:
        """Tests error response handling (an isError result)."""
        raise RuntimeError("This tool intentionally returns an error for testing")

    @server.tool(polling=True)
    def test_reconnection(ctx: Context) -> str:
        """Tests SSE stream disconnection and client reconnection: on a 2025-11-25 HTTP
        session the reply stream is closed mid-call (after its priming event and a retry
        field) and the result waits for the client's GET with Last-Event-ID; elsewhere
        ``close_stream`` does nothing and the tool simply answers."""
        ctx.close_stream(retry_ms=500)
        ctx.cancelled.wait(0.1)
        return ("Reconnection test completed successfully. If you received this, the client "
                "properly reconnected after stream closure.")


# --- tools sending notifications ---------------------------------------------------------

def _notifying_tools(server: Server) -> None:
    @server.tool()
    def test_tool_with_logging(ctx: Context) -> str:
        """Tests tool that emits log messages during execution."""
        for i, text in enumerate(("Tool execution started", "Tool processing data",
                                  "Tool execution completed")):
            if i:
                ctx.cancelled.wait(_STEP_DELAY)
            ctx.log("info", text)
        return "Tool with logging executed successfully"

    @server.tool()
    def test_tool_with_progress(ctx: Context) -> str:
        """Tests tool that reports progress notifications."""
        for i, step in enumerate((0, 50, 100)):
            if i:
                ctx.cancelled.wait(_STEP_DELAY)
            ctx.progress(step, 100, f"Completed step {step} of 100")
        return str(ctx.meta.get("progressToken", 0))

    @server.tool()
    def test_logging_tool(ctx: Context) -> str:
        """Diagnostic logging validator tool: logs only where the request asked for logs."""
        ctx.log("info", "Diagnostic trace logging activated")
        return "Logging evaluated"

    @server.tool()
    def test_trigger_tool_change() -> str:
        """Changes the tool list (announced as notifications/tools/list_changed)."""
        server.add_tool({"name": "test_dynamic_tool",
                         "description": "Added by test_trigger_tool_change",
                         "inputSchema": {"type": "object", "properties": {}}},
                        lambda arguments, ctx: "This is a dynamically added tool",
                        replace=True)
        return "Mutation triggered"

    @server.tool()
    def test_trigger_prompt_change() -> str:
        """Changes the prompt list (announced as notifications/prompts/list_changed)."""
        server.remove_prompt("test_dynamic_prompt")
        server.add_prompt(_dynamic_prompt, name="test_dynamic_prompt",
                          description="Added by test_trigger_prompt_change")
        return "Mutation triggered"


def _dynamic_prompt() -> str:
    return "This is a dynamically added prompt."


# --- tools asking the client (legacy requests, modern rounds) ---------------------------

def _asking_tools(server: Server) -> None:
    @server.tool()
    def test_sampling(prompt: str, ctx: Context) -> str:
        """Tests server-initiated sampling (LLM completion request)."""
        try:
            reply = ctx.sample(prompt, max_tokens=100)
        except Exception as exc:   # a client without sampling: say so in the result
            return f"Sampling not supported or error: {exc}"
        return f"LLM response: {reply.text or 'No response'}"

    @server.tool()
    def test_elicitation(message: str, ctx: Context) -> str:
        """Tests server-initiated elicitation (user input request)."""
        schema = {"type": "object",
                  "properties": {"response": {"type": "string",
                                              "description": "User's response"}},
                  "required": ["response"]}
        try:
            answer = ctx.elicit(message, schema)
        except Exception as exc:
            return f"Elicitation not supported or error: {exc}"
        return f"User response: action={answer.action}, content={_json(answer.content)}"

    @server.tool()
    def test_elicitation_sep1034_defaults(ctx: Context) -> str:
        """Tests elicitation with default values for every primitive type."""
        answer = ctx.elicit("Please review and update the form fields with defaults",
                            SEP1034_SCHEMA)
        return f"Elicitation completed: action={answer.action}, content={_json(answer.content)}"

    @server.tool()
    def test_elicitation_sep1330_enums(ctx: Context) -> str:
        """Tests elicitation with the five enum schema variants."""
        answer = ctx.elicit("Please select options from the enum fields", SEP1330_SCHEMA)
        return f"Elicitation completed: action={answer.action}, content={_json(answer.content)}"


def _json(content: dict[str, Any] | None) -> str:
    return json.dumps(content or {}, separators=(",", ":"))


def _input_required_tools(server: Server) -> None:
    @server.tool()
    def test_input_required_result_elicitation(ctx: Context) -> str:
        """Asks the user's name, then greets them."""
        answer = ctx.elicit("What is your name?", _form("name"), key="user_name")
        return f"Hello, {_answer(answer.content, 'name')}!"

    @server.tool()
    def test_input_required_result_sampling(ctx: Context) -> str:
        """Asks the client's model a question."""
        reply = ctx.sample("What is the capital of France?", max_tokens=100,
                           key="capital_question")
        return f"Sampling result: {reply.text or 'no response'}"

    @server.tool()
    def test_input_required_result_list_roots(ctx: Context) -> str:
        """Asks for the client's roots and counts them."""
        return f"Found {len(ctx.list_roots(key='client_roots'))} root(s)"

    @server.tool()
    def test_input_required_result_request_state(ctx: Context) -> str:
        """Asks for a confirmation; the answer arrives with the requestState it belongs to,
        which the server opens and checks before this handler sees the answer."""
        answer = ctx.elicit("Please confirm", _form("ok", "boolean"))
        if (answer.content or {}).get("ok") is True:
            return "state-ok: requestState validated"
        return "not confirmed"

    @server.tool()
    def test_input_required_result_multiple_inputs(ctx: Context) -> str:
        """Needs a name, a greeting from the model and the client's roots."""
        got = ctx.ask_all({"user_name": Ask.elicit("What is your name?", _form("name")),
                           "greeting": Ask.sample("Generate a greeting", max_tokens=50),
                           "client_roots": Ask.roots()})
        return (f"Multiple inputs: name={_answer(got['user_name'].content, 'name')}, "
                f"greeting={got['greeting'].text}, roots={len(got['client_roots'])}")

    @server.tool()
    def test_input_required_result_multi_round(ctx: Context) -> str:
        """Two rounds: a name, then a favourite colour."""
        name = ctx.elicit("Step 1: What is your name?", _form("name"))
        color = ctx.elicit("Step 2: What is your favorite color?", _form("color"))
        return (f"Multi-round complete for {_answer(name.content, 'name')} who likes "
                f"{_answer(color.content, 'color')}")

    @server.tool()
    def test_input_required_result_tampered_state(ctx: Context) -> str:
        """Asks for a confirmation; a changed requestState is refused with -32602."""
        ctx.elicit("Please confirm", _form("ok", "boolean"))
        return "integrity-ok: state verified"

    @server.tool()
    def test_input_required_result_capabilities(ctx: Context) -> str:
        """Asks only for what the client declared (elicitation, sampling)."""
        received = []
        if "elicitation" in ctx.client_capabilities:
            ctx.elicit("Elicitation input", _form("value"))
            received.append("elicitation")
        if "sampling" in ctx.client_capabilities:
            ctx.sample("Sample request", max_tokens=50)
            received.append("sampling")
        if not received:
            return "No supported capabilities declared"
        return f"capabilities-ok: received {','.join(received)}"


def _stateless_tools(server: Server) -> None:
    @server.tool()
    def test_missing_capability(ctx: Context) -> str:
        """Test tool requiring sampling: a client that did not declare it gets -32021."""
        reply = ctx.sample("Say 'Success'", max_tokens=10)
        return f"Success: {reply.text}"

    @server.tool()
    def test_streaming_elicitation(ctx: Context) -> str:
        """Diagnostic tool validating response progress streams: progress, then an ask."""
        ctx.progress(50, 100)
        answer = ctx.elicit("Streaming elicitation", _form("value"))
        return f"Streaming complete: {answer.action}"


def _schema_tools(server: Server) -> None:
    def json_schema_tool(arguments: dict[str, Any], ctx: Context) -> str:
        return f"JSON Schema 2020-12 tool called with: {_json(arguments)}"

    server.register_tool({"name": "json_schema_2020_12_tool",
                          "description": "Tool with JSON Schema 2020-12 features for "
                                         "conformance testing (SEP-1613)",
                          "inputSchema": JSON_SCHEMA_2020_12}, json_schema_tool)

    def header_tool(arguments: dict[str, Any], ctx: Context) -> str:
        return f"Ran in {arguments.get('region')}"

    server.register_tool({"name": "test_custom_header_param",
                          "description": "A parameter mirrored into the Mcp-Param-Region "
                                         "header",
                          "inputSchema": HEADER_PARAM_SCHEMA}, header_tool)


# --- resources and prompts ---------------------------------------------------------------

# --- tools that run as tasks (the tasks extension) ---------------------------------------

def _task_tools(server: Server) -> None:
    @server.tool()
    def greet(name: str) -> str:
        """Greets by name; never a task."""
        return f"Hello, {name}!"

    @server.tool(task="optional")
    def slow_compute(ctx: Context, seconds: float = 1.0, label: str = "") -> str:
        """Waits ``seconds`` (a task for clients that accept one); cancellable."""
        if ctx.cancelled.wait(max(0.0, seconds)):
            return f"{label}: cancelled"
        return f"{label}: computed after {seconds} s"

    @server.tool(task="optional")
    def confirm_delete(ctx: Context, filename: str = "file.txt") -> str:
        """Asks the user to confirm, then reports the deletion."""
        answer = ctx.elicit(f"Delete {filename}?", _form("confirm", "boolean"))
        confirmed = answer.accepted and (answer.content or {}).get("confirm") is True
        return f"{filename}: {'deleted' if confirmed else 'kept'}"

    @server.tool(task="optional")
    def multi_input(ctx: Context) -> str:
        """Asks two things at once."""
        got = ctx.ask_all({"first": Ask.elicit("First name?", _form("name")),
                           "second": Ask.elicit("Second name?", _form("name"))})
        return (f"first={_answer(got['first'].content, 'name')}, "
                f"second={_answer(got['second'].content, 'name')}")

    @server.tool(task="required")
    def failing_job(ctx: Context) -> str:
        """Fails as a tool after about a second."""
        ctx.cancelled.wait(1.0)
        raise RuntimeError("the job failed")

    @server.tool(task="optional")
    def protocol_error_job() -> str:
        """Fails with a JSON-RPC error (the task ends ``failed``)."""
        raise Refusal(INTERNAL_ERROR, "the job hit an internal error")

    @server.tool(task="required", rounds_first=True)
    def test_tool_with_task(ctx: Context) -> str:
        """Asks the user's name in a round, then goes on as a task."""
        answer = ctx.elicit("What is your name?", _form("name"), key="user_name")
        ctx.start_task()
        return f"Task done for {_answer(answer.content, 'name')}"


def _resources(server: Server) -> None:
    @server.resource("test://static-text", name="static-text", title="Static Text Resource",
                     description="A static text resource for testing",
                     mime_type="text/plain", cache_scope="private")
    def static_text() -> str:
        return "This is the content of the static text resource."

    @server.resource("test://static-binary", name="static-binary",
                     title="Static Binary Resource",
                     description="A static binary resource (image) for testing",
                     mime_type="image/png", cache_scope="private")
    def static_binary() -> bytes:
        return PNG

    @server.resource_template("test://template/{id}/data", name="template",
                              title="Resource Template",
                              description="A resource template with parameter substitution",
                              mime_type="application/json", cache_scope="private")
    def template(id: str) -> str:
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})

    @server.resource("test://watched-resource", name="watched-resource",
                     title="Watched Resource",
                     description="A resource to subscribe to", mime_type="text/plain",
                     cache_scope="private")
    def watched() -> str:
        return WATCHED_TEXT

    @server.tool()
    def test_update_watched_resource() -> str:
        """Announces that test://watched-resource changed (to its subscribers)."""
        server.notify_resource_updated("test://watched-resource")
        return "Update announced"


def _prompts(server: Server) -> None:
    @server.prompt(title="Simple Test Prompt", description="A simple prompt without arguments")
    def test_simple_prompt() -> list[Any]:
        return [("user", "This is a simple prompt for testing.")]

    @server.prompt(title="Prompt With Arguments", description="A prompt with required arguments")
    def test_prompt_with_arguments(arg1: str, arg2: str) -> list[Any]:
        return [("user", f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]

    @server.prompt(title="Prompt With Embedded Resource",
                   description="A prompt that includes an embedded resource")
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[Any]:
        return [("user", EmbeddedResource.from_text(resourceUri,
                                                    "Embedded resource content for testing.",
                                                    "text/plain")),
                ("user", "Please process the embedded resource above.")]

    @server.prompt(title="Prompt With Image", description="A prompt that includes image content")
    def test_prompt_with_image() -> list[Any]:
        return [("user", ImageContent.from_bytes(PNG, "image/png")),
                ("user", "Please analyze the image above.")]

    @server.prompt(description="A prompt that asks the user for its context first")
    def test_input_required_result_prompt(ctx: Context) -> list[Any]:
        answer = ctx.elicit("What context should the prompt use?", _form("context"))
        return [("user", f"Prompt with context: {_answer(answer.content, 'context')}")]

    @server.completion(prompt="test_prompt_with_arguments")
    def complete_arguments(argument: str, value: str, context: dict[str, str]) -> list[str]:
        words = ("paris", "park", "party", "test", "testing", "tested")
        return [word for word in words if word.startswith(value)]

    @server.completion(resource="test://template/{id}/data")
    def complete_ids(argument: str, value: str, context: dict[str, str]) -> list[str]:
        return [i for i in ("1", "12", "123") if i.startswith(value)]


# --- the command line ----------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """``--port PORT``: Streamable HTTP at ``http://127.0.0.1:PORT/mcp``; ``--stdio``: stdio."""
    parser = argparse.ArgumentParser(prog="conformance-server",
                                     description="The MCP conformance suite's server fixtures")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--port", type=int, help="serve http://127.0.0.1:PORT/mcp")
    mode.add_argument("--stdio", action="store_true", help="serve stdin/stdout")
    args = parser.parse_args(argv)
    server = build()
    if args.stdio:
        server.serve()
        return 0
    serve_http = getattr(server, "serve_http", None)
    if serve_http is None:
        print(f"conformance-server: --port {args.port}: this mcpsync has no "
              "Server.serve_http() yet, so the fixtures cannot be served over HTTP; use "
              "--stdio, or update mcpsync", file=sys.stderr)
        return 2
    serve_http("127.0.0.1", args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
