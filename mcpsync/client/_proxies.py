"""Tool proxies: ``client.tools.get_sum(a=1, b=2)`` (docs/client.md, "Tool proxies").

Each listed tool becomes a callable with a real ``inspect.Signature`` made from its
``inputSchema`` (keyword-only: required parameters first, then the optional ones with their
schema ``default`` or :data:`NOT_GIVEN`), a docstring from its description and arguments, and the
call options of the call behind it (``timeout=``, ``progress=``, ...). Arguments are checked
before anything is sent: an unknown or missing one raises
:class:`~mcpsync.errors.InvalidArguments`, which is a ``TypeError`` as Python's own is.
Optional arguments not given (or given as ``NOT_GIVEN``) are not sent: their default is the
server's. ``None`` is not that marker: it is sent as JSON ``null``, which a schema refuses
unless it allows ``"null"``.

Attribute names: every character outside ``[A-Za-z0-9_]`` becomes ``_``; a Python keyword
gets ``_`` appended (``class_``), a leading digit gets ``_`` prepended (``_3d``). When two
tools map to one attribute, a tool whose name already is that identifier keeps it and the
others have none; item access by the real name (``tools["get-sum"]``) always works. A name
that is one of ``ToolProxies``' own attributes (``_call``, ``_server``, ...) or looks like a
display hook (``_repr_*``, ``_ipython_*``) gets no attribute either, as for a clash.

The proxies are made from the cached tool list and made again when it changes (after a
``list_changed`` the client forgets its list, and the next access lists once); nothing is
listed while a list is cached. A name that is not found lists again at most once per list
(so ``hasattr`` and IPython's ``obj?`` do not ask the server each time), and a name starting
with ``_`` is never listed for.
"""

from __future__ import annotations

import inspect
import keyword
import re
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from mcpsync.client._arguments import did_you_mean, missing_arguments, unknown_tool
from mcpsync.errors import InvalidArguments
from mcpsync.types import CallToolResult, Tool

__all__ = ["NOT_GIVEN", "ToolProxies", "ToolProxy", "attribute_name"]

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")
_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool,
                          "array": list, "object": dict, "null": type(None)}


class _NotGiven:
    """The type of :data:`NOT_GIVEN`; one instance, falsy, shown as ``NOT_GIVEN``."""

    _instance: _NotGiven | None = None

    def __new__(cls) -> _NotGiven:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_GIVEN"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()
"""The default of a tool proxy's optional parameter: an argument left at it is not sent."""


def attribute_name(tool_name: str) -> str | None:
    """The attribute a tool is reachable as (``None``: item access only)."""
    name = _NOT_IDENT.sub("_", tool_name)
    if not name or name.startswith("__"):
        return None
    if keyword.iskeyword(name):   # soft keywords (match, type) are fine as attributes
        name += "_"
    if name[0].isdigit():
        name = "_" + name
    return name


def _annotation(schema: Any) -> Any:
    """The Python type of a property schema, for the signature (``Any`` when unsure)."""
    if not isinstance(schema, Mapping):
        return Any
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else None
    if not kinds:
        return Any
    types = [_TYPES[k] for k in kinds if isinstance(k, str) and k in _TYPES]
    if not types:
        return Any
    return types[0] if len(types) == 1 else typing.Union[tuple(types)]  # noqa: UP007


def _type_word(schema: Any) -> str:
    if isinstance(schema, Mapping):
        kind = schema.get("type")
        if isinstance(kind, str):
            return kind
        if isinstance(kind, list):
            return " | ".join(str(k) for k in kind)
        if "enum" in schema:
            return "one of " + ", ".join(repr(v) for v in schema["enum"])
    return "any"


def describe_arguments(tool: Tool) -> list[tuple[str, str, bool, str]]:
    """``(name, type, required, description)`` of each argument, required ones first."""
    props = tool.input_schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = tool.input_schema.get("required")
    required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
    names = [r for r in required if r in props] + [p for p in props if p not in required]
    names += [r for r in required if r not in props]
    out = []
    for name in names:
        schema = props.get(name)
        desc = schema.get("description") if isinstance(schema, Mapping) else None
        out.append((name, _type_word(schema), name in required,
                    " ".join(str(desc).split()) if desc else ""))
    return out


class ToolProxy:
    """One tool as a Python callable: ``proxy(a=1, b=2)`` calls it and returns its
    :class:`~mcpsync.types.CallToolResult`, with every error ``call_tool`` raises."""

    def __init__(self, tool: Tool, server: str, call: Callable[..., CallToolResult],
                 options: Mapping[str, Any]) -> None:
        self.tool = tool
        self.__name__ = attribute_name(tool.name) or "tool"
        self.__qualname__ = self.__name__
        self._server = server
        self._call = call
        props = tool.input_schema.get("properties")
        self._props: Mapping[str, Any] = props if isinstance(props, Mapping) else {}
        self._required = frozenset(name for name, _t, req, _d in describe_arguments(tool)
                                   if req)
        extra = tool.input_schema.get("additionalProperties")
        # Python refuses unknown keywords; so do we, unless the schema invites extra ones.
        self._open = extra is True or isinstance(extra, Mapping)
        # The call options the tool's own arguments do not shadow.
        self._options = {k: v for k, v in options.items() if k not in self._props}
        self.__signature__ = self._signature()
        self.__doc__ = self._docstring()

    def _signature(self) -> inspect.Signature:
        params = []
        args = describe_arguments(self.tool)
        for name, _kind, required, _desc in args:
            if not name.isidentifier() or keyword.iskeyword(name):
                continue   # reachable through **arguments only
            schema = self._props.get(name)
            default = inspect.Parameter.empty if required else (
                schema["default"] if isinstance(schema, Mapping) and "default" in schema
                else NOT_GIVEN)
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                            default=default,
                                            annotation=_annotation(schema)))
        taken = {p.name for p in params}
        for name, default in self._options.items():
            if name not in taken:
                params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                                default=default))
        if self._open or any(not n.isidentifier() or keyword.iskeyword(n)
                             for n, *_ in args):
            params.append(inspect.Parameter("arguments", inspect.Parameter.VAR_KEYWORD))
        return inspect.Signature(params, return_annotation=CallToolResult)

    def _docstring(self) -> str:
        lines = [self.tool.description.strip() if self.tool.description else
                 f"The tool {self.tool.name!r} of server {self._server!r}."]
        args = describe_arguments(self.tool)
        if args:
            lines += ["", "Arguments:"]
            for name, kind, required, desc in args:
                mark = "required" if required else "optional"
                lines.append(f"    {name} ({kind}, {mark})" + (f": {desc}" if desc else ""))
        if self._options:
            lines += ["", "Call options (as for call_tool): " + ", ".join(self._options)]
        return "\n".join(lines)

    def __call__(self, *args: Any, **kwargs: Any) -> CallToolResult:
        doing = f"calling tool {self.tool.name!r} on server {self._server!r}"
        if args:
            raise InvalidArguments(f"{doing}: tool proxies take keyword arguments only "
                                   f"(got {len(args)} positional)", server=self._server,
                                   method="tools/call")
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in self._options}
        kwargs = {k: v for k, v in kwargs.items() if v is not NOT_GIVEN}
        unknown = [k for k in kwargs if k not in self._props]
        if unknown and not self._open:
            hints = [f"{k!r}" + (f" (did you mean {m[0]!r}?)"
                                 if (m := did_you_mean(k, self._props)) else "")
                     for k in unknown]
            raise InvalidArguments(
                f"{doing}: unexpected argument{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(hints)} (the tool takes: {', '.join(self._props) or 'nothing'})",
                unexpected=tuple(unknown), server=self._server, method="tools/call")
        missing = self._required - kwargs.keys()
        if missing:
            raise missing_arguments(self._server, self.tool.name, missing, list(self._props))
        return self._call(self.tool.name, kwargs, **options)

    def __repr__(self) -> str:
        return f"<tool proxy {self.tool.name!r} of server {self._server!r}{self.__signature__}>"


def _taken(proxies: object) -> frozenset[str]:
    """Names that attribute access finds before ``__getattr__`` (the class's and the
    instance's own) or that IPython probes as display hooks: no tool gets them."""
    return frozenset({*dir(type(proxies)), *vars(proxies)})


def _is_hook(name: str) -> bool:
    return name.startswith(("_repr_", "_ipython_"))


class ToolProxies:
    """The tools of one server as attributes and items (``client.tools``,
    ``manager.proxy(server_id)``); iterating gives the proxies in the server's order."""

    def __init__(self, server: Callable[[], str], listed: Callable[[], Sequence[Tool]],
                 call: Callable[..., CallToolResult], options: Mapping[str, Any],
                 relist: Callable[[], object] | None = None) -> None:
        self._server = server
        self._listed = listed
        self._relist = relist
        self._call = call
        self._options = dict(options)
        self._key: tuple[int, ...] | None = None
        self._relisted: tuple[int, ...] | None = None   # the list a miss last re-listed
        self._by_name: dict[str, ToolProxy] = {}
        self._by_attr: dict[str, ToolProxy] = {}

    def _proxies(self) -> tuple[dict[str, ToolProxy], dict[str, ToolProxy]]:
        tools = self._listed()
        key = tuple(id(t) for t in tools)  # the old Tools are held, so ids are not reused
        if key != self._key:
            server = self._server()
            by_name = {t.name: ToolProxy(t, server, self._call, self._options) for t in tools}
            by_attr: dict[str, ToolProxy] = {}
            clashed: set[str] = set()
            taken = _taken(self)
            for name, proxy in by_name.items():
                attr = attribute_name(name)
                if attr is None or attr in clashed or attr in taken or _is_hook(attr):
                    continue
                if attr in by_attr:
                    clashed.add(attr)
                    del by_attr[attr]
                    continue
                by_attr[attr] = proxy
            for attr in clashed:   # an exact identifier keeps its own name
                if attr in by_name and attribute_name(attr) == attr:
                    by_attr[attr] = by_name[attr]
            self._by_name, self._by_attr, self._key = by_name, by_attr, key
        return self._by_name, self._by_attr

    def _find(self, key: str, by_attr: bool, relist: bool = True) -> ToolProxy | None:
        """The proxy by attribute or real name. A miss lists the tools once more (the
        server may have added the tool since, and a modern server tells only listeners),
        but only once per list: the next miss on the same list answers from it."""
        found = self._proxies()[1 if by_attr else 0].get(key)
        if found is None and relist and self._relist is not None \
                and self._relisted != self._key:
            self._relist()
            found = self._proxies()[1 if by_attr else 0].get(key)
            self._relisted = self._key
        return found

    def __getattr__(self, attr: str) -> ToolProxy:
        if attr.startswith("__") or attr.startswith(("_repr_", "_ipython_")):
            raise AttributeError(attr)   # display hooks probed by IPython, never tools
        # A private-looking name (IPython and other tools probe many) never lists again.
        proxy = self._find(attr, by_attr=True, relist=not attr.startswith("_"))
        if proxy is None:
            by_name, by_attr = self._proxies()
            hint = did_you_mean(attr, by_attr)
            exact = f"; tools[{attr!r}] reaches it by its real name" if attr in by_name \
                else ""
            raise AttributeError(
                f"server {self._server()!r} has no tool reachable as {attr!r}"
                + (f"; did you mean {hint[0]!r}?" if hint else "") + exact)
        return proxy

    def __getitem__(self, name: str) -> ToolProxy:
        proxy = self._find(name, by_attr=False)
        if proxy is None:
            raise unknown_tool(self._server(), name, self._proxies()[0])
        return proxy

    def __contains__(self, name: object) -> bool:
        return name in self._proxies()[0]

    def __iter__(self) -> Iterator[ToolProxy]:
        return iter(list(self._proxies()[0].values()))

    def __len__(self) -> int:
        return len(self._proxies()[0])

    def __dir__(self) -> list[str]:
        return sorted(self._proxies()[1])

    def __repr__(self) -> str:
        names = ", ".join(self._proxies()[0])
        return f"<tools of server {self._server()!r}: {names or 'none'}>"
