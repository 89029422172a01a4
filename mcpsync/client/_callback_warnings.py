"""A user callback that raises is never invisible: :class:`~mcpsync.errors.CallbackWarning`.

Callbacks (progress, log, notification, sampling, elicitation, roots, list-changed and
resource-updated subscriptions) run on mcpsync's threads, where an exception has nobody to
propagate to. mcpsync logs it, as before, but a library never configures logging, so in a
script or a notebook without ``logging.basicConfig()`` that log record goes nowhere and the
callback seems to do nothing. When no handler would show the record, the first failure of
each callback of a client is also issued as a ``CallbackWarning`` (once: a progress callback
that raises on every notification should not flood the output).

The warning names the callback, the server, and the exception's type and message, cut to
200 characters; never its arguments, which may hold what the server sent.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from mcpsync.errors import CallbackWarning, Rejected

__all__ = ["CallbackGuard", "logging_shows"]

F = TypeVar("F", bound=Callable[..., Any])

_MESSAGE_CUT = 200


def logging_shows(name: str = "mcpsync.client") -> bool:
    """Whether a warning logged on ``name`` reaches a handler that is not a ``NullHandler``
    (mcpsync adds one of those to its top logger, so ``hasHandlers()`` is always true)."""
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        if any(not isinstance(h, logging.NullHandler) for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


class CallbackGuard:
    """One client's record of which callbacks have already warned; safe from many threads."""

    def __init__(self, server: Callable[[], str]) -> None:
        self._server = server
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def report(self, callback: str, exc: BaseException, server: str | None = None) -> None:
        """Warn about ``exc`` from ``callback`` unless logging shows it or it already warned.

        A ``Rejected`` is a callback's way of saying no to the server, not a failure.
        ``server`` names the server when the guard serves many (a ``Manager``'s).
        """
        if isinstance(exc, Rejected) or logging_shows():
            return
        with self._lock:
            if callback in self._warned:
                return
            self._warned.add(callback)
        text = str(exc)
        if len(text) > _MESSAGE_CUT:
            text = text[:_MESSAGE_CUT - 1] + "…"
        warnings.warn(CallbackWarning(
            f"server {server or self._server()!r}: the {callback} callback raised "
            f"{type(exc).__name__}{': ' + text if text else ''} (shown once per callback; "
            "configure logging to see every failure with its traceback)"), stacklevel=2)

    def wrap(self, callback: str, fn: F) -> F:
        """``fn``, reporting what it raises before the exception goes on as before."""
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                self.report(callback, exc)
                raise
        return guarded  # type: ignore[return-value]
