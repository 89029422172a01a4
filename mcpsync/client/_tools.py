"""Tool results: the ``tools/call`` answer as a dataclass, checked against the tool's
``outputSchema`` when :meth:`Client.list_tools` cached one and ``jsonschema`` is installed.

The schemas are kept per client and dropped whenever the server says its tool list changed,
so a result is never judged by a schema the server no longer declares.
"""

from __future__ import annotations

import threading
from typing import Any

from mcpsync.errors import OutputValidationError, ProtocolError, ToolError
from mcpsync.types import CallToolResult, Tool

__all__ = ["ToolSchemas", "required_arguments", "task_required"]


class ToolSchemas:
    """The last listed tools, their output schemas and the validators compiled from them.

    ``schemas`` is falsy when nothing is to be validated, which is what ``call_tool``'s fast
    path tests; the dicts are replaced whole, never mutated, so readers need no lock.
    """

    def __init__(self, *, validate: bool) -> None:
        self._validate_output = validate
        self.tools: dict[str, Tool] = {}
        # tool name -> its required argument names; None until a list is known (then call
        # arguments are not checked at all: tools are never listed just to check them).
        self.required: dict[str, frozenset[str]] | None = None
        self.schemas: dict[str, Any] = {}       # tool name -> outputSchema (validation on)
        # tools that run only as (2025-11-25) tasks: call_tool takes the task path for them;
        # None while no list is known. One attribute, so that a caller reads it once.
        self.task_required: frozenset[str] | None = None
        self._validators: dict[str, Any] = {}   # tool name -> compiled jsonschema validator
        # remember() (a caller's thread) and forget() (the dispatcher's) take turns: a forget
        # landing half-way through a remember would leave a stale part of the old list that
        # looks known (a task-tool set with no list, say) and is never fetched again.
        self._write = threading.Lock()

    def remember(self, tools: list[Tool]) -> None:
        """Keep a fresh ``tools/list`` answer (its schemas only with ``jsonschema``)."""
        by_name = {t.name: t for t in tools}
        required = {t.name: required_arguments(t) for t in tools}
        tasks = task_required(tools)
        schemas: dict[str, Any] = {}
        if self._validate_output and _jsonschema_available():
            schemas = {t.name: t.output_schema for t in tools if t.output_schema is not None}
        with self._write:  # `required` last: listed() tells a list is known from it
            self.tools = by_name
            self.task_required = tasks
            self._validators = {}
            self.schemas = schemas
            self.required = required

    def forget(self) -> None:
        """The server's tool list changed: validate nothing until it is listed again."""
        with self._write:  # `required` first: no list is known from here on
            self.required = None
            self.tools = {}
            self.task_required = None
            self.schemas = {}
            self._validators = {}

    def listed(self) -> list[Tool] | None:
        """The cached tool list, or ``None`` when none is known (never listed, or changed)."""
        return None if self.required is None else list(self.tools.values())

    def result(self, server: str, name: str, result: Any,
               raise_on_error: bool) -> CallToolResult:
        """The final ``tools/call`` result as a dataclass: validated, and raised on request."""
        if type(result) is not dict:
            raise ProtocolError(f"calling tool {name!r} on server {server!r}: the result "
                                f"is not an object: {result!r:.200}", server=server,
                                method="tools/call")
        out = CallToolResult.from_dict(result)
        if self.schemas and name in self.schemas:
            self._validate(server, name, out)
        if raise_on_error and out.is_error:
            raise ToolError(f"calling tool {name!r} on server {server!r}: the tool "
                            f"reported an error: {out.text[:500] or '(no text)'}",
                            result=out, server=server, method="tools/call")
        return out

    def _validate(self, server: str, name: str, result: CallToolResult) -> None:
        """Check ``structuredContent`` against the cached ``outputSchema``."""
        if result.is_error:
            return
        doing = f"calling tool {name!r} on server {server!r}"
        if result.structured is None:
            raise OutputValidationError(
                f"{doing}: the tool has an outputSchema but returned no structuredContent; "
                "pass validate_output=False to connect() to accept it", result=result,
                server=server, method="tools/call")
        validator = self._validators.get(name)
        if validator is None:
            import jsonschema  # checked at list_tools; imported lazily to keep import fast

            schema = self.schemas[name]
            cls = jsonschema.validators.validator_for(
                schema, default=jsonschema.Draft202012Validator)
            validator = cls(schema)
            self._validators = {**self._validators, name: validator}
        error = next(iter(validator.iter_errors(result.structured)), None)
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise OutputValidationError(
                f"{doing}: the structured result does not match the tool's outputSchema at "
                f"{where}: {error.message}; pass validate_output=False to connect() to accept "
                "it", result=result, server=server, method="tools/call")


def task_required(tools: list[Tool]) -> frozenset[str]:
    """The names of the tools that run only as (2025-11-25) tasks."""
    return frozenset(t.name for t in tools if t.task_support == "required")


def required_arguments(tool: Tool) -> frozenset[str]:
    """The ``required`` names of a tool's ``inputSchema`` (strings only; a malformed list
    requires nothing rather than failing every call)."""
    required = tool.input_schema.get("required") if isinstance(tool.input_schema, dict) \
        else None
    if not isinstance(required, list):
        return frozenset()
    return frozenset(r for r in required if isinstance(r, str))


_jsonschema: bool | None = None


def _jsonschema_available() -> bool:
    """Whether the optional ``jsonschema`` extra is installed (checked once, lazily)."""
    global _jsonschema
    if _jsonschema is None:
        import importlib.util

        _jsonschema = importlib.util.find_spec("jsonschema") is not None
    return _jsonschema
