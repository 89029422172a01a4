"""The user's sampling, elicitation and roots callbacks, serving both protocol eras.

One set of callbacks answers two wire shapes: a legacy server sends ``sampling/createMessage``,
``elicitation/create`` or ``roots/list`` as a JSON-RPC request (answered on the session's
callback pool), while a modern server returns ``resultType: "input_required"`` and lists the
same requests in ``inputRequests`` (answered by the input-required loop). Both paths end in
:meth:`Callbacks.answer`, so application code never cares which era it talks to.

Capabilities are advertised only for callbacks that were given (docs/architecture.md, "Callbacks and
input required"). Two optional attributes on a callback object extend what is advertised:

- a sampling callback with ``supports_tools = True`` declares ``sampling.tools``;
- an elicitation callback with ``supports_url = True`` declares URL mode, and its optional
  ``on_complete(elicitation_id)`` method receives ``notifications/elicitation/complete``.
"""

from __future__ import annotations

import importlib
import threading
import typing
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, ForwardRef

# The request types load on first use; the aliases below name them as mcpsync.SamplingRequest
# and mcpsync.ElicitationRequest, lazy public names, so typing.get_type_hints() resolves them.
import mcpsync  # noqa: F401
from mcpsync._codes import METHOD_NOT_FOUND
from mcpsync.client._callback_warnings import CallbackGuard
from mcpsync.errors import RemoteError
from mcpsync.protocol import client_capabilities

if TYPE_CHECKING:   # loaded on first access (the module __getattr__ at the end)
    from mcpsync.client._answering import apply_schema_defaults as apply_schema_defaults
    from mcpsync.client._requests import (
        ElicitationRequest as ElicitationRequest,
        SamplingRequest as SamplingRequest,
    )

__all__ = [
    "Callbacks",
    "ElicitationCallback",
    "ElicitationRequest",
    "RootsInput",
    "SamplingCallback",
    "SamplingRequest",
]


# The request types are dataclasses that only a server's request builds, so they live in
# ``_requests``, loaded on first use: building a dataclass generates and compiles its methods
# at import, about 0.4 ms each. At runtime the aliases name them through ``ForwardRef``s that
# carry this module, so typing.get_type_hints() of anything annotated with an alias, in any
# module, evaluates ``mcpsync.SamplingRequest`` here (a lazy public name) and gets the same
# ``Callable[[SamplingRequest], Mapping[str, Any]]`` as before.
if TYPE_CHECKING:
    SamplingCallback = Callable[[SamplingRequest], Mapping[str, Any]]
    ElicitationCallback = Callable[[ElicitationRequest], Mapping[str, Any]]
else:   # typing's Callable: collections.abc's comes out of get_type_hints flattened
    SamplingCallback = typing.Callable[
        [ForwardRef("mcpsync.SamplingRequest", module=__name__)], Mapping[str, Any]]
    ElicitationCallback = typing.Callable[
        [ForwardRef("mcpsync.ElicitationRequest", module=__name__)], Mapping[str, Any]]
RootsInput = Sequence[Any] | Callable[[], Sequence[Any]]
"""Roots: a list of :class:`mcpsync.Root`, ``file://`` URI strings or ``{"uri", "name"}``
dicts, or a callable returning such a list (asked each time the server wants them)."""


def _remote(code: int, message: str) -> RemoteError:
    """An error the session sends back to the server as a JSON-RPC error."""
    return RemoteError(message, code=code, remote_message=message)


def _root_dict(root: Any) -> dict[str, Any]:
    """One root in wire shape, whichever of the accepted forms it came in."""
    if isinstance(root, str):
        return {"uri": root}
    if isinstance(root, Mapping):
        return dict(root)
    to_dict = getattr(root, "to_dict", None)
    if callable(to_dict):
        value = to_dict()
        if isinstance(value, Mapping):
            return dict(value)
    uri = getattr(root, "uri", None)
    if isinstance(uri, str):
        out: dict[str, Any] = {"uri": uri}
        name = getattr(root, "name", None)
        if name:
            out["name"] = name
        return out
    raise TypeError(f"a root must be a URI string, a dict or a Root, got {type(root).__name__}")


class Callbacks:
    """Holds the callbacks and answers server requests with them; safe from many threads."""

    def __init__(self, *, sampling: SamplingCallback | None = None,
                 elicitation: ElicitationCallback | None = None,
                 roots: RootsInput | None = None, guard: CallbackGuard | None = None) -> None:
        if sampling is not None and not callable(sampling):
            raise TypeError("sampling must be a callable")
        if elicitation is not None and not callable(elicitation):
            raise TypeError("elicitation must be a callable")
        self.sampling = sampling
        self.elicitation = elicitation
        self._guard = guard
        self._roots: RootsInput | None = None
        self._roots_lock = threading.Lock()
        self.roots_declared = roots is not None
        if roots is not None:
            self.set_roots(roots)

    # -- what we advertise -------------------------------------------------------------

    @property
    def sampling_tools(self) -> bool:
        return bool(getattr(self.sampling, "supports_tools", False))

    @property
    def elicitation_url(self) -> bool:
        return bool(getattr(self.elicitation, "supports_url", False))

    def capabilities(self, *, modern: bool) -> dict[str, Any]:
        """Client capabilities for the callbacks given; legacy roots add ``listChanged``."""
        return client_capabilities(
            sampling=self.sampling is not None, sampling_tools=self.sampling_tools,
            elicitation=self.elicitation is not None, elicitation_url=self.elicitation_url,
            roots=self.roots_declared, era="modern" if modern else "legacy")

    # -- roots -------------------------------------------------------------------------

    def set_roots(self, roots: RootsInput) -> None:
        """Store the roots; a list is checked now so a bad entry fails at the call site."""
        if not callable(roots):
            roots = [_root_dict(r) for r in roots]
        with self._roots_lock:
            self._roots = roots

    def list_roots(self) -> dict[str, Any]:
        with self._roots_lock:
            roots = self._roots
        items = roots() if callable(roots) else (roots or [])
        return {"roots": [_root_dict(r) for r in items]}

    # -- answering ---------------------------------------------------------------------

    def declared(self, method: str) -> bool:
        """Whether we advertised the capability that ``method`` needs."""
        if method == "sampling/createMessage":
            return self.sampling is not None
        if method == "elicitation/create":
            return self.elicitation is not None
        if method == "roots/list":
            return self.roots_declared
        return False

    def handle_request(self, method: str, params: Any) -> dict[str, Any]:
        """Answer a legacy server→client request (runs on the session's callback pool).

        Raises ``RemoteError`` for the session to send back: -32601 for an unknown method
        or one without a callback, -32602 for an undeclared elicitation mode. A callback's
        ``Rejected`` and other exceptions pass through; the session maps them to -1 and
        -32603.
        """
        if method == "ping":
            return {}
        if not self.declared(method):
            raise _remote(METHOD_NOT_FOUND, f"Method not found: {method}")
        return self.answer(method, params if isinstance(params, Mapping) else {})

    def answer_input_request(self, key: str, request: Any) -> dict[str, Any]:
        """Answer one ``inputRequests`` entry of a modern ``input_required`` result.

        A kind we did not declare is the server breaking the protocol (it must only ask
        for what this request's capabilities declared): ``ProtocolError``.
        """
        load_module("mcpsync.client._answering")
        from mcpsync.client._answering import answer_input_request

        return answer_input_request(self, key, request)

    def answer(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Run the callback for ``method`` and return the result in wire shape; what it
        raises goes on, after a ``CallbackWarning`` when nothing would log it."""
        load_module("mcpsync.client._answering")
        from mcpsync.client._answering import answer

        return answer(self, method, params)

    def elicitation_complete(self, params: Any) -> None:
        """Pass ``notifications/elicitation/complete`` to the callback's ``on_complete`` hook.

        Runs on the dispatcher thread; without a hook the notification is ignored (unknown
        ids are the hook's to ignore, as the spec asks).
        """
        load_module("mcpsync.client._answering")
        from mcpsync.client._answering import elicitation_complete

        elicitation_complete(self, params)


_REQUESTS = frozenset({"SamplingRequest", "ElicitationRequest"})


def load_requests() -> ModuleType:
    """Import ``_requests``; a Ctrl-C that lands while it builds its dataclasses comes out as
    the ``KeyboardInterrupt`` it is. On 3.10 and 3.11 ``type()`` wraps an exception raised in
    a ``__set_name__`` (a dataclass field's) in ``RuntimeError("Error calling __set_name__
    ...")``, which a caller's ``except KeyboardInterrupt`` would not catch. The failed import
    leaves nothing behind: the next use imports the module again (see ``load_module``)."""
    try:
        return load_module("mcpsync.client._requests")
    except RuntimeError as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            raise exc.__cause__ from None
        raise


def load_module(name: str) -> ModuleType:
    """Import the module ``name`` on first use, where the client loads a module lazily:
    call it before the ``from name import ...`` that reads a function or class from it.

    A thread that waited on the module lock while a Ctrl-C stopped another thread's import
    of that module gets a bare ``from`` import's name from the failed, half-built module:
    ``ImportError: cannot import name``. ``importlib.import_module`` looks in ``sys.modules``
    again after the lock and imports the module itself, so the waiting thread's call goes
    on (``from package import module`` does not: it imports through ``__import__``, which
    hands back the half-built module too). Once the module is loaded this is a call and a
    dictionary lookup (about 0.4 us): these loaders are on the paths of lists and features
    (a server's request, a progress bar, a task), never on a plain ``call_tool``'s."""
    return importlib.import_module(name)


if not TYPE_CHECKING:   # the type checker sees the TYPE_CHECKING imports at the top instead
    def __getattr__(name: str) -> Any:
        """``SamplingRequest``, ``ElicitationRequest`` and ``apply_schema_defaults``,
        importable from here as before (and pickles naming this module still load), loaded
        on first access (PEP 562).
        Nothing reads this module's attributes on a call: its users import the names."""
        if name in _REQUESTS:
            return getattr(load_requests(), name)
        if name == "apply_schema_defaults":   # moved to _answering, its one user
            return load_module("mcpsync.client._answering").apply_schema_defaults
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        """The names above too, so that ``dir()`` and ``help()`` list them (PEP 562)."""
        return sorted({*globals(), *_REQUESTS, "apply_schema_defaults"})
