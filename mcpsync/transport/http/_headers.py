"""The modern (2026-07-28) request headers: ``Mcp-Method``, ``Mcp-Name``, ``Mcp-Param-*``.

A 2026-07-28 server routes and authorises on headers without parsing the body, so the client
mirrors the method, the target name and every argument a tool marks with ``x-mcp-header`` into
headers, and the server checks them against the body (-32020 on a mismatch). The two halves here
are the encoding of one value (docs/http.md, "Modern servers (2026-07-28)") and the validity of
a tool's annotations: a client on HTTP must drop a tool whose annotations break the rules,
because it could never call it correctly.

Pure functions: no I/O, no requests import.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Mapping
from typing import Any

from mcpsync.types import Tool

__all__ = [
    "MAX_SAFE_INTEGER",
    "encode_header_value",
    "header_annotations",
    "invalid_header_reason",
    "modern_headers",
    "needs_base64",
]

MAX_SAFE_INTEGER = 2**53 - 1
"""Integers beyond ±(2^53-1) cannot round-trip through a JavaScript server; refused."""

_SENTINEL = re.compile(r"=\?base64\?.*\?=\Z", re.IGNORECASE | re.DOTALL)
_TCHAR = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_HEADER_TYPES = frozenset({"integer", "string", "boolean"})
_NAME_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
                 # the Tasks extension routes a task's requests by its id
                 "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
_ANNOTATION = "x-mcp-header"
# Keywords whose values are data, not subschemas: an "x-mcp-header" key inside them is no
# annotation. Every other nested object (items, anyOf, $defs, ...) is off the properties chain.
_DATA_KEYWORDS = frozenset({_ANNOTATION, "enum", "const", "default", "examples"})


def needs_base64(value: str) -> bool:
    """True when ``value`` cannot go in a header as is: a character outside 0x20-0x7E,
    leading or trailing whitespace, or a value that itself looks like ``=?base64?…?=``."""
    if not value:
        return False
    if not value.isascii() or value != value.strip():
        return True
    if any(c < " " or c == "\x7f" for c in value):
        return True
    return _SENTINEL.match(value) is not None


def encode_header_value(value: Any) -> str:
    """One header value, encoded as docs/http.md, "Modern servers (2026-07-28)", says.

    Strings as is (or ``=?base64?<base64 of UTF-8>?=`` when :func:`needs_base64`), booleans
    ``true``/``false`` (tested before ``int``: ``True`` is an ``int``), integers in decimal.
    An integer beyond ±(2^53-1), or a value of any other type, raises ``ValueError`` before
    anything is sent. A float with an integral value (``3.0``) is sent as an integer.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise ValueError(f"integer {value} is beyond ±(2^53-1) and cannot be sent in a "
                             "header")
        return str(value)
    if isinstance(value, str):
        if needs_base64(value):
            return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="
        return value
    raise ValueError(f"a {type(value).__name__} value cannot be sent in a header (only str, "
                     "int and bool)")


def _schema_of(tool: Tool | Mapping[str, Any]) -> Any:
    if isinstance(tool, Tool):
        return tool.input_schema
    return tool.get("inputSchema") if isinstance(tool, Mapping) else None


def header_annotations(schema: Any) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``(path, annotation value)`` of every ``x-mcp-header`` on a ``properties`` chain from
    the root, e.g. ``(("a", "b"), "B")`` for ``properties.a.properties.b``."""
    if not isinstance(schema, Mapping):
        return
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return
    for name, sub in props.items():
        if not isinstance(sub, Mapping):
            continue
        path = (str(name),)
        if _ANNOTATION in sub:
            yield path, sub[_ANNOTATION]
        for subpath, value in header_annotations(sub):
            yield path + subpath, value


def _stray_annotations(node: Any, where: str, chain: bool) -> Iterator[str]:
    """Where an annotation sits that is not reachable through ``properties`` alone.

    ``chain`` says whether ``node`` is a property reached through ``properties`` only; the
    root is not a property, so it is called with ``chain=False`` and its properties with True.
    """
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield from _stray_annotations(item, f"{where}/{i}", False)
        return
    if not isinstance(node, Mapping):
        return
    if _ANNOTATION in node and not chain:
        yield where or "the schema root"
    for key, sub in node.items():
        if key in _DATA_KEYWORDS or not isinstance(sub, (Mapping, list)):
            continue
        if key == "properties" and isinstance(sub, Mapping):
            on_chain = chain or where == ""
            for name, prop in sub.items():
                yield from _stray_annotations(prop, f"{where}/properties/{name}", on_chain)
        else:
            yield from _stray_annotations(sub, f"{where}/{key}", False)


def invalid_header_reason(tool: Tool | Mapping[str, Any]) -> str | None:
    """Why ``tool``'s ``x-mcp-header`` annotations are invalid, or None when they are fine.

    Invalid: an annotation that is empty or not a string; one with a character outside RFC 9110
    ``tchar`` (so also CR/LF, space, ``:`` and non-ASCII); two that are equal ignoring case; one
    on a property not typed ``integer``, ``string`` or ``boolean``; one reachable other than
    through a chain of ``properties`` from the root (under ``items``, ``anyOf``, ``$defs``, ...,
    or on the root itself). The message names the property.
    """
    schema = _schema_of(tool)
    if not isinstance(schema, Mapping):
        return None
    for where in _stray_annotations(schema, "", False):
        return (f"x-mcp-header at {where} is not reachable through 'properties' alone (only "
                "properties chains from the root may carry it)")
    seen: dict[str, str] = {}
    for path, value in header_annotations(schema):
        prop = ".".join(path)
        if not isinstance(value, str):
            return f"x-mcp-header of property '{prop}' is not a string"
        if not value:
            return f"x-mcp-header of property '{prop}' is empty"
        if _TCHAR.match(value) is None:
            return (f"x-mcp-header {value!r} of property '{prop}' has characters outside the "
                    "HTTP token set")
        lowered = value.lower()
        if lowered in seen:
            return (f"x-mcp-header {value!r} of property '{prop}' duplicates that of "
                    f"'{seen[lowered]}' (header names ignore case)")
        seen[lowered] = prop
        sub: Any = schema
        for name in path:
            sub = sub["properties"][name]
        ptype = sub.get("type")
        if not (isinstance(ptype, str) and ptype in _HEADER_TYPES):
            return (f"x-mcp-header {value!r} is on property '{prop}' of type {ptype!r}; only "
                    "integer, string and boolean properties may carry it")
    return None


def _argument(arguments: Any, path: tuple[str, ...]) -> Any:
    node = arguments
    for name in path:
        if not isinstance(node, Mapping) or name not in node:
            return None
        node = node[name]
    return node


def modern_headers(method: str, params: Any, tool: Tool | Mapping[str, Any] | None = None,
                   ) -> dict[str, str]:
    """The ``Mcp-*`` headers of one 2026-07-28 request (``MCP-Protocol-Version`` is the
    transport's).

    ``Mcp-Method`` always; ``Mcp-Name`` from ``params.name`` (``tools/call``, ``prompts/get``)
    or ``params.uri`` (``resources/read``) or ``params.taskId`` (``tasks/get``, ``tasks/update``,
    ``tasks/cancel``); for ``tools/call`` with the tool's definition, one
    ``Mcp-Param-{Name}`` per annotated argument that is present and not null. Raises
    ``ValueError`` for a value that cannot be encoded (an integer beyond ±(2^53-1)).
    Invalid annotations are skipped (such tools are dropped from ``list_tools()`` anyway).
    """
    headers = {"Mcp-Method": method}
    key = _NAME_METHODS.get(method)
    if key is not None and isinstance(params, Mapping):
        name = params.get(key)
        if isinstance(name, str):
            headers["Mcp-Name"] = encode_header_value(name)
    if method != "tools/call" or tool is None or not isinstance(params, Mapping):
        return headers
    arguments = params.get("arguments")
    if not isinstance(arguments, Mapping):
        return headers
    for path, annotation in header_annotations(_schema_of(tool)):
        if not isinstance(annotation, str) or _TCHAR.match(annotation) is None:
            continue
        value = _argument(arguments, path)
        if value is None:
            continue
        try:
            headers[f"Mcp-Param-{annotation}"] = encode_header_value(value)
        except ValueError as exc:
            raise ValueError(f"argument '{'.'.join(path)}' (header Mcp-Param-{annotation}): "
                             f"{exc}") from None
    return headers
