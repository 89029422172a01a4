"""The gateway's traffic inspector: one JSON line per message that crosses the gateway.

The gateway calls :meth:`Inspector.record` for every message on each of its four legs
(:data:`DIRECTIONS`). The inspector reads what it needs from the message (kind, method, id,
tool, error code), pairs a response with its request to give it a latency and the tool it
answers, and hands the record to a callback, a file, or both.

Detail levels (``detail=``), chosen so the default is useful without holding any payload:

- ``"off"``: :meth:`~Inspector.record` returns at once; nothing is parsed or kept.
- ``"summary"`` (default): the fields above, the redacted error message, and the *shape* of
  the params or result: the object keys with each value replaced by its JSON type (``"str"``,
  ``"int"``, ...), lists by their first item's shape and a count. No value is written.
- ``"full"``: the summary plus the whole message as ``payload``, redacted.

Redaction (:class:`~mcpsync.gateway._redact.Redactor`) applies at every level, to keys,
error messages, URIs and payloads; it is turned off only by passing
``Redactor(enabled=False)``.

The log file is the user's to read and nobody else's, and it must survive a crash: it is
opened without following a symbolic link at its path, made 0600, written with one
``os.write`` per line under a lock (so lines from many threads never interleave and a crash
loses at most the line being written), and rotated at ``max_bytes`` into ``FILE.1`` ..
``FILE.<backups>``. One process writes one log; two gateways need two files.

The inspector never raises into the gateway once it is built: a write that fails is logged
once (on the ``mcpsync.gateway`` logger, never stdout) and the file is given up, while the
callback keeps receiving records.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal

from mcpsync._codes import APPROVAL_REJECTED, BUDGET_EXCEEDED, DENIED_BY_POLICY
from mcpsync.gateway._redact import Redactor

__all__ = ["DETAILS", "DIRECTIONS", "REFUSALS", "Inspector"]

_log = logging.getLogger("mcpsync.gateway")

Detail = Literal["off", "summary", "full"]
#: The detail levels, least first.
DETAILS: Final = ("off", "summary", "full")

HOST_TO_GATEWAY: Final = "host->gateway"
GATEWAY_TO_UPSTREAM: Final = "gateway->upstream"
UPSTREAM_TO_GATEWAY: Final = "upstream->gateway"
GATEWAY_TO_HOST: Final = "gateway->host"
#: The four legs a message can travel, as written in a record's ``dir``.
DIRECTIONS: Final = (HOST_TO_GATEWAY, GATEWAY_TO_UPSTREAM, UPSTREAM_TO_GATEWAY, GATEWAY_TO_HOST)

#: The gateway's refusal codes and the kind a record names them by.
REFUSALS: Final[Mapping[int, str]] = {DENIED_BY_POLICY: "policy",
                                      APPROVAL_REJECTED: "approval",
                                      BUDGET_EXCEEDED: "budget"}

# Requests remembered for pairing with their responses; the oldest is dropped past this, so a
# flood of requests that are never answered cannot grow memory.
_MAX_PENDING: Final = 4096
# Bounds of a shape: deeper levels and further keys are summarised.
_SHAPE_DEPTH: Final = 8
_SHAPE_KEYS: Final = 50
# An unparseable message is kept (redacted, at full detail) up to this many characters.
_MAX_RAW_TEXT: Final = 4096

Message = bytes | bytearray | str | Mapping[str, Any]
Callback = Callable[[dict[str, Any]], object]


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds") \
        .replace("+00:00", "Z")


def _requester(direction: str, is_request: bool) -> str:
    """Who sent the request a message belongs to: the sender of a request, the receiver of a
    response. With the leg, it names the id space the message's id lives in."""
    sender, _, receiver = direction.partition("->")
    return sender if is_request else receiver


class _LogFile:
    """An append-only JSON-lines file: 0600, never through a symlink, rotated at a size."""

    def __init__(self, path: str, max_bytes: int, backups: int) -> None:
        if max_bytes <= 0 or backups < 0:
            raise ValueError(f"inspector log {path!r}: max_bytes must be > 0 and backups >= 0 "
                             f"(got {max_bytes}, {backups})")
        self.path = os.fspath(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._fd = self._open(exclusive=False)
        self._size = os.fstat(self._fd).st_size

    def _open(self, *, exclusive: bool) -> int:
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
                 | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        if exclusive:
            flags |= os.O_EXCL
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            if os.path.islink(self.path):
                raise OSError(exc.errno, f"inspector log {self.path!r} is a symbolic link; "
                                         f"the inspector never writes through one (give the "
                                         f"real path)") from None
            raise OSError(exc.errno, f"cannot open inspector log {self.path!r}: "
                                     f"{exc.strerror} (check that its directory exists and "
                                     f"is writable)") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(f"inspector log {self.path!r} is not a regular file "
                              f"(give the path of a file)")
            if stat.S_IMODE(info.st_mode) != 0o600:
                os.fchmod(fd, 0o600)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write(self, line: bytes) -> None:
        """Append one line (rotating first if it would pass the cap); the caller holds the
        lock."""
        if self._size and self._size + len(line) > self.max_bytes:
            self._rotate()
        view = memoryview(line)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(line)

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        if self.backups == 0:
            os.unlink(self.path)
        else:
            for n in range(self.backups - 1, 0, -1):
                older = f"{self.path}.{n}"
                if os.path.lexists(older):
                    os.replace(older, f"{self.path}.{n + 1}")
            os.replace(self.path, f"{self.path}.1")
        # The path is free now: anything found there was put there by someone else.
        self._fd = self._open(exclusive=True)
        self._size = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Inspector:
    """Records every message through the gateway as one JSON object (see the module
    docstring for the fields and detail levels).

    ``path`` (a file, opened at once: a bad path fails here, naming it) and ``callback``
    (called on the recording thread with each record as a dict) may be used together.
    ``redactor`` sets the redaction rules; ``max_bytes`` and ``backups`` the rotation;
    ``clock`` the monotonic clock latencies are measured with.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 callback: Callback | None = None, detail: Detail = "summary",
                 redactor: Redactor | None = None, max_bytes: int = 10 * 1024 * 1024,
                 backups: int = 5, clock: Callable[[], float] = time.monotonic) -> None:
        if detail not in DETAILS:
            raise ValueError(f"inspector detail {detail!r} is not one of {', '.join(DETAILS)}")
        self.detail: Detail = detail
        self.redactor = redactor if redactor is not None else Redactor()
        self._callback = callback
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: OrderedDict[tuple[str | None, str, str], tuple[float, dict[str, Any]]]
        self._pending = OrderedDict()
        self._file: _LogFile | None = None
        self._closed = False
        if path is not None and detail != "off":
            self._file = _LogFile(os.fspath(path), max_bytes, backups)

    def __repr__(self) -> str:
        where = self._file.path if self._file is not None else None
        return f"Inspector(detail={self.detail!r}, path={where!r})"

    @property
    def enabled(self) -> bool:
        """False when recording does nothing (``detail="off"``, closed, or nowhere to go):
        the gateway may skip building the call."""
        return not self._closed and self.detail != "off" and (
            self._file is not None or self._callback is not None)

    def record(self, direction: str, message: Message, *, upstream: str | None = None,
               size: int | None = None) -> None:
        """Record one message travelling ``direction`` (one of :data:`DIRECTIONS`) to or from
        ``upstream`` (its config id; ``None`` when not known yet, as for a host's
        ``initialize``). ``message`` is its JSON text as sent (bytes or str) or the decoded
        object; ``size`` is its size in bytes when ``message`` is a decoded object.
        Never raises."""
        if not self.enabled:
            return
        try:
            record = self._build(direction, message, upstream, size)
            self._emit(record)
        except Exception:   # the gateway's traffic must never fail because of its log
            _log.warning("inspector: could not record a %s message", direction, exc_info=True)

    def _build(self, direction: str, message: Message, upstream: str | None,
               size: int | None) -> dict[str, Any]:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction {direction!r} is not one of {DIRECTIONS}")
        now = self._clock()
        record: dict[str, Any] = {"time": _iso(time.time()), "dir": direction,
                                  "upstream": upstream}
        decoded: Any
        if isinstance(message, (bytes, bytearray, str)):
            if size is None:
                size = len(message) if not isinstance(message, str) \
                    else len(message.encode("utf-8", "surrogatepass"))
            try:
                decoded = json.loads(message)
            except ValueError:
                record.update(kind="invalid", size=size)
                if self.detail == "full":
                    text = message if isinstance(message, str) \
                        else bytes(message).decode("utf-8", "replace")
                    record["text"] = self.redactor.text(text[:_MAX_RAW_TEXT])
                return record
        else:
            decoded = message
        if not isinstance(decoded, Mapping):
            record.update(kind="batch" if isinstance(decoded, list) else "invalid", size=size)
            if isinstance(decoded, list):
                record["count"] = len(decoded)
            if self.detail == "full":
                record["payload"] = self.redactor.value(decoded)
            return record
        method = decoded.get("method")
        rid = decoded.get("id")
        is_call = isinstance(method, str)
        kind = ("request" if rid is not None else "notification") if is_call else "response"
        record.update(kind=kind, method=method if is_call else None, id=rid)
        leg = None if direction in (HOST_TO_GATEWAY, GATEWAY_TO_HOST) else upstream
        if kind == "request":
            record.update(self._target(method, decoded.get("params")))
            key = (leg, _requester(direction, True), json.dumps(rid))
            with self._lock:
                self._pending[key] = (now, {k: record[k] for k in
                                            ("method", "tool", "prompt", "uri", "upstream")
                                            if record.get(k) is not None})
                if len(self._pending) > _MAX_PENDING:
                    self._pending.popitem(last=False)
        elif kind == "response" and rid is not None:
            key = (leg, _requester(direction, False), json.dumps(rid))
            with self._lock:
                started = self._pending.pop(key, None)
            if started is not None:
                record["latency_ms"] = round((now - started[0]) * 1000.0, 3)
                for name, value in started[1].items():
                    if record.get(name) is None:
                        record[name] = value
        record["size"] = size
        if kind == "response":
            self._outcome(record, decoded)
        if self.detail == "full":
            record["payload"] = self.redactor.value(decoded)
        else:
            body = decoded.get("params") if is_call else decoded.get("result")
            if body is not None:
                record["shape"] = self._shape(body, 0)
        return record

    def _target(self, method: Any, params: Any) -> dict[str, Any]:
        """What a request is about: the tool, prompt or resource it names."""
        if not isinstance(params, Mapping):
            return {}
        if method == "tools/call" and isinstance(params.get("name"), str):
            return {"tool": self.redactor.text(params["name"])}
        if method == "prompts/get" and isinstance(params.get("name"), str):
            return {"prompt": self.redactor.text(params["name"])}
        if isinstance(method, str) and method.startswith("resources/") \
                and isinstance(params.get("uri"), str):
            return {"uri": self.redactor.text(params["uri"])}
        return {}

    def _outcome(self, record: dict[str, Any], decoded: Mapping[str, Any]) -> None:
        error = decoded.get("error")
        if isinstance(error, Mapping):
            code = error.get("code")
            refusal = REFUSALS.get(code) if isinstance(code, int) \
                and not isinstance(code, bool) else None
            record["outcome"] = "refused" if refusal else "error"
            record["code"] = code
            if refusal:
                record["refusal"] = refusal
            if isinstance(error.get("message"), str):
                record["message"] = self.redactor.text(error["message"][:_MAX_RAW_TEXT])
            return
        result = decoded.get("result")
        tool_error = isinstance(result, Mapping) and result.get("isError") is True
        record["outcome"] = "tool_error" if tool_error else "ok"

    def _shape(self, value: Any, depth: int) -> Any:
        """The JSON types of ``value``, not its contents (see the module docstring)."""
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "bool"
        if isinstance(value, int):
            return "int"
        if isinstance(value, float):
            return "float"
        if isinstance(value, str):
            return "str"
        if depth >= _SHAPE_DEPTH:
            return "..."
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for i, (key, item) in enumerate(value.items()):
                if i == _SHAPE_KEYS:
                    out["..."] = f"{len(value) - i} more keys"
                    break
                out[self.redactor.text(str(key))] = self._shape(item, depth + 1)
            return out
        if isinstance(value, list):
            if not value:
                return []
            first = self._shape(value[0], depth + 1)
            return [first] if len(value) == 1 else [first, f"{len(value) - 1} more"]
        return type(value).__name__

    def _emit(self, record: dict[str, Any]) -> None:
        if self._callback is not None:
            try:
                self._callback(record)
            except Exception:
                _log.warning("inspector: the record callback raised", exc_info=True)
        log = self._file
        if log is None:
            return
        line = (json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._file is None:
                return
            try:
                log.write(line)
            except OSError as exc:
                _log.warning("inspector: writing %s failed, the log is given up: %s",
                             log.path, exc)
                self._file = None
                with contextlib.suppress(OSError):
                    log.close()

    def close(self) -> None:
        """Close the log file; later :meth:`record` calls do nothing. Idempotent."""
        with self._lock:
            self._closed = True
            log, self._file = self._file, None
            self._pending.clear()
        if log is not None:
            log.close()

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
