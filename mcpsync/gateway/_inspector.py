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
import pickle
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Final, Literal, NamedTuple

from mcpsync._codes import APPROVAL_REJECTED, BUDGET_EXCEEDED, DENIED_BY_POLICY
from mcpsync._envelope import Envelope, EnvelopeError, parse_envelope
from mcpsync.gateway._loghelper import LogHelper
from mcpsync.gateway._logqueue import LogQueue
from mcpsync.gateway._redact import Redactor

__all__ = ["DETAILS", "DIRECTIONS", "REFUSALS", "Inspector", "adopt_log_file",
           "check_rules_for_helper"]

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

# Bytes of frames shipped to the helper process per message at most (a frame is not split).
_SHIP_BYTES: Final = 1 << 20
# What a response takes from its request.
_ABOUT: Final = ("method", "tool", "prompt", "uri", "upstream")
# Redacted object keys and names, remembered (they repeat on every call); cleared when full.
_NAMES_CACHED: Final = 4096
# A name (an object key, a tool name, a string written as JSON) longer than this is not
# remembered, nor an object's shape whose keys and inner shapes hold more characters in all:
# an upstream that sends megabyte-long keys would otherwise fill each cache of
# _NAMES_CACHED entries with them. Real names are short; a long one is redacted anew.
_CACHED_CHARS: Final = 256
_CACHED_SHAPE_CHARS: Final = 2048
# A body's skeleton longer than this (keys, types, counts) is not remembered by its shape.
_SKELETON_ITEMS: Final = 512
# Nor one whose object keys hold more characters than this in all: keys that are data (paths,
# record ids) make every body's skeleton new, and each would hold its keys.
_SKELETON_TEXT: Final = 2048
# Body shapes remembered (real bodies repeat a few shapes); cleared when full. With the two
# bounds above, the cache holds a few MB at most.
_BODIES_CACHED: Final = 256

Message = bytes | bytearray | str | Mapping[str, Any]
Callback = Callable[[dict[str, Any]], object]

# One encoder and decoder built once: json.dumps with options builds an encoder per call.
_encode: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode
_DECODER: Final = json.JSONDecoder()
_decode: Callable[[str], Any] = _DECODER.decode
# The same decoder's C scanner: what ``_decode`` runs on a text with no surrounding
# whitespace, without the Python wrapper and its whitespace matches.
_scan: Callable[[str, int], tuple[Any, int]] = getattr(_DECODER, "scan_once")  # noqa: B009
# The shape of a scalar by its exact type (decoded JSON has no subclasses).
_SCALARS: Final[Mapping[type, str]] = {str: "str", int: "int", float: "float", bool: "bool",
                                      type(None): "null"}
_SCALAR_TEXTS: Final[Mapping[type, str]] = {k: f'"{v}"' for k, v in _SCALARS.items()}
_second: tuple[int, str] = (-1, "")   # the last whole second formatted, and its text


_RULES_ADVICE: Final = ("the log's helper process (helper=True) is sent the rules by pickle: "
                         "use a Redactor, or a subclass of it defined in an importable module "
                         "(not the program's __main__) and holding only picklable values")


def _rules_state(rules: Redactor) -> tuple[Redactor, int]:
    """The rules and how often they were changed in place: what records were built with, or
    the helper was sent, is compared by this (see Inspector._sync_rules)."""
    return rules, getattr(rules, "changes", 0)


def _same_rules(a: tuple[Redactor, int], b: tuple[Redactor, int]) -> bool:
    return a[0] is b[0] and a[1] == b[1]


def check_rules_for_helper(rules: Any) -> None:
    """Raise :class:`TypeError` or :class:`ValueError`, saying what to do, unless ``rules``
    can be sent to the log's helper process and loaded there: a :class:`Redactor` whose class
    the helper can import (not one defined in ``__main__``, which is the gateway's program,
    not the helper's) and that survives a pickle round-trip."""
    if not isinstance(rules, Redactor):
        raise TypeError(f"the redaction rules {type(rules).__qualname__!r} are not a "
                        f"Redactor: {_RULES_ADVICE}")
    cls = type(rules)
    if cls is not Redactor and cls.__module__ == "__main__":
        raise ValueError(f"the redaction rules' class {cls.__qualname__!r} is defined in "
                         f"__main__, which the helper process cannot import: {_RULES_ADVICE}")
    try:
        pickle.loads(pickle.dumps(rules, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as exc:
        raise ValueError(f"the redaction rules {cls.__qualname__!r} cannot be sent to the "
                         f"helper process ({type(exc).__name__}: {exc}): "
                         f"{_RULES_ADVICE}") from None


def _iso(epoch: float) -> str:
    """``epoch`` as UTC ISO 8601 with microseconds; the date and time of day are formatted
    once per second."""
    global _second
    whole = int(epoch)
    micro = round((epoch - whole) * 1e6)
    if micro >= 1_000_000:
        whole, micro = whole + 1, 0
    if _second[0] != whole:
        _second = (whole, datetime.fromtimestamp(whole, timezone.utc)
                   .strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_second[1]}.{micro:06d}Z"


class _Single(NamedTuple):
    """A :meth:`Inspector.record` call queued for the helper process, with its times."""

    direction: str
    message: Any
    upstream: str | None
    size: int | None
    session: str | None
    wall: float
    now: float


def adopt_log_file(inspector: Inspector, fd: int, path: str, max_bytes: int,
                   backups: int) -> None:
    """The helper process's side: ``inspector`` writes to the log file ``fd``, opened (and
    checked) by the gateway at ``path``."""
    inspector._file = _LogFile(path, max_bytes, backups, fd=fd)


def _dir_text(record: dict[str, Any]) -> str:
    return f'"dir":"{record["dir"]}"'


def _same_but_dir(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two records (of one frame's legs) differ in their direction alone: then the
    second's line is the first's with the leg replaced (every record starts with ``time``
    then ``dir``, and a time holds no quote, so the first ``"dir":"..."`` is the leg)."""
    if a["dir"] is None or b["dir"] is None or len(a) != len(b):
        return False
    other = dict(b)
    other["dir"] = a["dir"]
    return other == a


class _Line:
    """A raw line decoded for its records: what the record code reads of an
    :class:`Envelope` (its text, bytes and decoded object), without the rest of the
    gateway's parse (id keys, kinds), which the log does not use."""

    __slots__ = ("_data", "_decoded", "text")

    def __init__(self, text: str, data: bytes, decoded: dict[str, Any]) -> None:
        self.text = text
        self._data = data
        self._decoded = decoded

    def decoded(self) -> dict[str, Any]:
        return self._decoded

    def to_bytes(self) -> bytes:
        return self._data


def _line(data: bytes) -> _Line | None:
    """``data`` decoded when :func:`parse_envelope` would take it (UTF-8 JSON, an object
    of a message kind); ``None`` when in doubt, for :func:`parse_envelope` to judge."""
    try:
        text = data.decode("utf-8")
        decoded = _decode(text[1:] if text[:1] == "\ufeff" else text)
    except (ValueError, RecursionError):   # UnicodeDecodeError is a ValueError
        return None
    if type(decoded) is not dict:
        return None
    if "method" in decoded:
        if type(decoded["method"]) is not str:
            return None
    elif "error" not in decoded and "result" not in decoded:
        return None
    return _Line(text, data, decoded)


def _parsed(item: Any) -> Any:
    """A queued item with a raw line decoded for its records (kept raw when it is no
    JSON-RPC message: :meth:`Inspector._other_records` writes it as ``invalid``)."""
    if type(item) is not tuple or type(item[1]) is not bytes:
        return item
    frame: Envelope | _Line | None = _line(item[1])
    if frame is None:
        try:
            frame = parse_envelope(item[1])
        except EnvelopeError:
            return item
    return (item[0], frame, *item[2:])


def _requester(direction: str, is_request: bool) -> str:
    """Who sent the request a message belongs to: the sender of a request, the receiver of a
    response. With the leg, it names the id space the message's id lives in."""
    sender, _, receiver = direction.partition("->")
    return sender if is_request else receiver


_REQUESTERS: Final = {(leg, is_request): _requester(leg, is_request)
                      for leg in DIRECTIONS for is_request in (True, False)}
_HOST_LEGS: Final = (HOST_TO_GATEWAY, GATEWAY_TO_HOST)
# The legs a queued frame may name that :meth:`Inspector._raw_lines` takes: one or two
# valid directions (any other value is checked, and refused, by the way that raises).
_LEG_TUPLES: Final = frozenset([(a,) for a in DIRECTIONS]
                               + [(a, b) for a in DIRECTIONS for b in DIRECTIONS])
# For each of those and a request (True) or a response (False): per leg, the leg, whether
# it is the host's, and the requester (the parts of a pairing key :meth:`Inspector._pair`
# derives per record).
_LEG_ROLES: Final = {(legs, is_request): tuple((leg, leg in _HOST_LEGS,
                                                _requester(leg, is_request)) for leg in legs)
                     for legs in _LEG_TUPLES for is_request in (True, False)}


class _LogFile:
    """An append-only JSON-lines file: 0600, never through a symlink, rotated at a size."""

    def __init__(self, path: str, max_bytes: int, backups: int, *, fd: int | None = None
                 ) -> None:
        if max_bytes <= 0 or backups < 0:
            raise ValueError(f"inspector log {path!r}: max_bytes must be > 0 and backups >= 0 "
                             f"(got {max_bytes}, {backups})")
        self.path = os.fspath(path)
        self.max_bytes = max_bytes
        self.backups = backups
        # ``fd``: the file already opened, by the process that started this one
        self._fd = self._open(exclusive=False) if fd is None else fd
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

    def write_lines(self, lines: Sequence[bytes]) -> None:
        """Append ``lines``, as many per ``write`` as the rotation cap allows; the caller
        holds the lock."""
        if self._size + sum(map(len, lines)) <= self.max_bytes:   # no rotation: one write
            self.write(lines[0] if len(lines) == 1 else b"".join(lines))
            return
        chunk: list[bytes] = []
        size = 0
        for line in lines:
            if chunk and self._size + size + len(line) > self.max_bytes:
                self.write(b"".join(chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += len(line)
        if chunk:
            self.write(chunk[0] if len(chunk) == 1 else b"".join(chunk))

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
    ``redactor`` sets the redaction rules (see :attr:`redactor` for changing them later:
    the new rules apply to every frame queued after the change, in the helper process too);
    ``max_bytes`` and ``backups`` the rotation; ``clock`` the monotonic clock latencies are
    measured with.

    ``helper=True`` builds and writes the file's records in a helper process instead of on
    a thread of this one (see :mod:`mcpsync.gateway._loghelper`): the same lines, without
    the records' cost competing with the traffic for this interpreter. It needs a ``path``
    and no ``callback`` (a callback runs in this process), and rules the helper can load
    (see :func:`check_rules_for_helper`: a bad ``redactor`` fails here).
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *,
                 callback: Callback | None = None, detail: Detail = "summary",
                 redactor: Redactor | None = None, max_bytes: int = 10 * 1024 * 1024,
                 backups: int = 5, clock: Callable[[], float] = time.monotonic,
                 helper: bool = False) -> None:
        if detail not in DETAILS:
            raise ValueError(f"inspector detail {detail!r} is not one of {', '.join(DETAILS)}")
        if helper and (callback is not None or path is None):
            raise ValueError("Inspector(helper=True) writes a log file in a helper process: "
                             "give a path, and no callback (a callback runs in this process)")
        self.detail: Detail = detail
        rules = redactor if redactor is not None else Redactor()
        if helper:   # before the file is opened and the helper spawned
            check_rules_for_helper(rules)
        self._redactor = rules
        # the rules the records are built with and their changes (see _sync_rules)
        self._rules_seen = _rules_state(rules)
        self._callback = callback
        self._clock = clock
        self._lock = threading.Lock()
        # (host session, leg, requester, id): two sessions may use one id at once. The
        # value: when, what the request was about, and (from the text path) that as text.
        self._pending: OrderedDict[tuple[str | None, str | None, str, int | str],
                                   tuple[float, dict[str, Any]] | tuple[float, dict[str, Any],
                                                                         str]]
        self._pending = OrderedDict()
        self._file: _LogFile | None = None
        self._closed = False
        self._names: dict[str, str] = {}
        self._names_of: Redactor = self.redactor
        self._texts: dict[str, str] = {}   # strings as JSON, see _json
        # an object's shape text by its keys and its values' shape texts, see _shape_text
        self._shapes: dict[tuple[Any, ...], str | None] = {}
        self._shapes_of: Redactor = self.redactor
        # a body's shape text by its skeleton, see _body_shape
        self._bodies: dict[tuple[Any, ...], str | None] = {}
        self._bodies_of: Redactor = self.redactor
        # what a tools/call request is about by (tool, upstream), see _raw_lines
        self._tools: dict[tuple[str, str | None], tuple[dict[str, Any], str]] = {}
        self._tools_of: Redactor = self.redactor
        self._queue = LogQueue(self._drain)
        self._helper: LogHelper | None = None
        # the rules the helper has (the object and its changes count when sent)
        self._helper_rules: tuple[Redactor, int] = self._rules_seen
        if path is not None and detail != "off":
            self._file = _LogFile(os.fspath(path), max_bytes, backups)
            if helper:
                log, self._file = self._file, None
                try:   # the child gets the file the checks above opened
                    self._helper = LogHelper(log._fd, log.path, detail=detail,
                                             max_bytes=max_bytes, backups=backups,
                                             redactor=self.redactor)
                finally:
                    log.close()

    @property
    def redactor(self) -> Redactor:
        """The redaction rules. Assigning new rules (or changing ``enabled`` or ``entropy``
        on these) applies them to every frame queued after the change, in the helper process
        too. With a helper process, rules it could not load are refused here
        (:class:`TypeError` or :class:`ValueError`) and the old rules are kept."""
        return self._redactor

    @redactor.setter
    def redactor(self, rules: Redactor) -> None:
        if self._helper is not None:
            check_rules_for_helper(rules)
        self._redactor = rules

    def _sync_rules(self) -> None:
        """Before records are built: when the rules were replaced or changed in place since
        the last records, forget what was redacted with the old ones (the caches of names
        and shapes, and what requests still waiting for their answer were about: their
        tool, prompt or resource, so an answer written later never carries a name the new
        rules would hide)."""
        rules = self._redactor
        state = _rules_state(rules)
        if _same_rules(state, self._rules_seen):
            return
        self._names, self._names_of = {}, rules
        self._shapes, self._shapes_of = {}, rules
        self._bodies, self._bodies_of = {}, rules
        self._tools, self._tools_of = {}, rules
        with self._lock:
            pending = self._pending
            stripped: dict[int, tuple[float, dict[str, Any], str]] = {}
            for key, entry in list(pending.items()):
                new = stripped.get(id(entry))
                if new is None:   # both legs of one request share an entry: still one
                    new = stripped[id(entry)] = (entry[0], {
                        k: v for k, v in entry[1].items() if k in ("method", "upstream")}, "")
                pending[key] = new
        # Marked seen only now: a thread that looks meanwhile clears the caches once more
        # (harmless) rather than trusting caches built with the old rules.
        self._rules_seen = state

    def __repr__(self) -> str:
        where = self._file.path if self._file is not None else None
        return f"Inspector(detail={self.detail!r}, path={where!r})"

    @property
    def enabled(self) -> bool:
        """False when recording does nothing (``detail="off"``, closed, or nowhere to go):
        the gateway may skip building the call."""
        return not self._closed and self.detail != "off" and (
            self._file is not None or self._callback is not None
            or (self._helper is not None and self._helper.alive))

    def record(self, direction: str, message: Message, *, upstream: str | None = None,
               size: int | None = None, session: str | None = None) -> None:
        """Record one message travelling ``direction`` (one of :data:`DIRECTIONS`) to or from
        ``upstream`` (its config id; ``None`` when not known yet, as for a host's
        ``initialize``). ``message`` is its JSON text as sent (bytes or str) or the decoded
        object; ``size`` is its size in bytes when ``message`` is a decoded object.
        Never raises."""
        if not self.enabled:
            return
        if self._helper is not None:   # queued, in order with the frames, for the helper
            if isinstance(message, (bytearray, memoryview)):
                message = bytes(message)
            elif not isinstance(message, (bytes, str, dict)):
                message = dict(message)
            self._queue.put(_Single(direction, message, upstream, size, session,
                                    time.time(), self._clock()))
            return
        try:
            self._sync_rules()
            record = self._build(direction, message, upstream, size, session)
            self._emit(record)
        except Exception:   # the gateway's traffic must never fail because of its log
            _log.warning("inspector: could not record a %s message", direction, exc_info=True)

    def record_frame(self, legs: Sequence[str], envelope: Envelope,
                     upstream: str | None, session: str | None = None) -> None:
        """The gateway's path: record the frame ``envelope`` once on each of ``legs`` (the
        directions it travels, in order). Only queues it: the ``mcpsync-gateway-log``
        thread builds the records and writes them (and calls the callback), with the time
        and clock of this call. Past the queue's bound the frame is counted as dropped and
        a ``dropped`` record says how many. Never raises."""
        if not self.enabled:
            return
        self._queue.put((legs, envelope, upstream, time.time(), self._clock(), session))

    def record_line(self, legs: Sequence[str], line: bytes, upstream: str | None,
                    session: str | None = None) -> None:
        """:meth:`record_frame` for a frame the gateway forwarded without parsing it:
        ``line`` is its bytes as forwarded (no newline). Nothing is parsed here: the log
        thread (or the helper process) parses it, and writes what ``record_frame(legs,
        parse_envelope(line), ...)`` would; a line that is not a JSON-RPC message gets an
        ``invalid`` record per leg. Never raises."""
        if not self.enabled:
            return
        if type(line) is not bytes:   # a bytearray or memoryview would change under us
            line = bytes(line)
        self._queue.put((legs, line, upstream, time.time(), self._clock(), session))

    def _drain(self, batch: list[Any], dropped: int) -> None:
        """The log thread: the records of ``batch``'s frames, written in as few writes as
        the rotation allows; or, with a helper process, the frames shipped to it."""
        helper = self._helper
        if helper is None:
            self.write_batch(batch, dropped)
            return
        rules = self._redactor
        state = _rules_state(rules)
        if not _same_rules(state, self._helper_rules):
            # ``redactor`` was replaced or changed in place: the helper writes this batch
            # and the next ones with the new rules (every frame queued after the change is
            # in them).
            try:
                ok = helper.send(("rules", rules))
            except Exception as exc:   # the setter checks them: only a backstop
                helper.give_up(f"the new redaction rules could not be sent to the log's "
                               f"helper process ({type(exc).__name__}: {exc}); "
                               f"{_RULES_ADVICE}")
                return
            if not ok:
                return
            self._helper_rules = state
        shipped: list[Any] = []
        size = 0
        for item in batch:
            if type(item) is tuple:
                if type(item[1]) is not bytes:
                    legs, envelope, upstream, wall, now, session = item
                    item = (legs, envelope.to_bytes(), upstream, wall, now, session)
                size += len(item[1])
            else:
                size += _SHIP_BYTES // 64   # a record() call's message, about
            shipped.append(item)
            if size >= _SHIP_BYTES:   # a flood of big frames: several writes, bounded
                if not helper.send(("batch", shipped, dropped)):
                    return
                shipped, size, dropped = [], 0, 0
        if shipped or dropped:
            helper.send(("batch", shipped, dropped))

    def write_batch(self, batch: list[Any], dropped: int) -> None:
        """Build and write the records of ``batch`` (queued frames, lines and messages) in
        this process, and a ``dropped`` record first when ``dropped`` frames were not
        queued."""
        self._sync_rules()
        records: list[dict[str, Any]] = []
        if dropped:
            _log.warning("inspector: %d frame(s) were not logged, the log thread was "
                         "behind", dropped)
            records.append({"time": _iso(time.time()), "dir": None, "upstream": None,
                            "kind": "dropped", "count": dropped})
        callback = self._callback
        if callback is None and self.detail == "summary" and self._file is not None:
            self._write(self._summary_lines(records, batch))
            return
        batch = [_parsed(item) for item in batch]
        for item in batch:
            try:
                other = self._other_records(item)
                if other is not None:
                    records += other
                    continue
                legs, envelope, upstream, wall, now, session = item
                records += self._frame_records(legs, envelope, upstream, wall, now, session)
            except Exception:
                _log.warning("inspector: could not record a frame", exc_info=True)
        if callback is not None:
            for record in records:
                try:
                    callback(record)
                except Exception:
                    _log.warning("inspector: the record callback raised", exc_info=True)
        if self._file is not None and records:
            lines: list[bytes] = []
            previous: dict[str, Any] | None = None
            line = ""
            for record in records:
                if previous is not None and _same_but_dir(previous, record):
                    # The next leg of the same frame: only the direction differs.
                    line = line.replace(_dir_text(previous), _dir_text(record), 1)
                else:
                    line = _encode(record) + "\n"
                lines.append(line.encode())
                previous = record
            self._write(lines)

    def _summary_lines(self, records: list[dict[str, Any]], batch: list[Any]) -> list[bytes]:
        """The log thread at ``summary`` detail with no callback: each frame's lines are
        formatted as text (:meth:`_frame_lines`), without the records as dicts; a frame that
        path does not cover (an error answer, a batch, an odd shape) goes through the
        dicts."""
        lines = [(_encode(record) + "\n").encode() for record in records]
        raw = self._raw_lines
        for item in batch:
            try:
                if type(item) is tuple and type(item[1]) is bytes:
                    done = raw(*item)
                    if done is not None:
                        lines += done
                        continue
                    item = _parsed(item)
                other = self._other_records(item)
                if other is not None:
                    lines += [(_encode(record) + "\n").encode() for record in other]
                    continue
                legs, envelope, upstream, wall, now, session = item
                fast = self._frame_lines(legs, envelope, upstream, wall, now, session)
                if fast is None:
                    fast = [(_encode(record) + "\n").encode() for record in
                            self._frame_records(legs, envelope, upstream, wall, now,
                                                session)]
                lines += fast
            except Exception:
                _log.warning("inspector: could not record a frame", exc_info=True)
        return lines

    def _other_records(self, item: Any) -> list[dict[str, Any]] | None:
        """The records of a queued :meth:`record` call, or of a line that is no JSON-RPC
        message (one per leg, as :meth:`record` writes it); ``None`` for a parsed frame."""
        if type(item) is _Single:
            return [self._build(item.direction, item.message, item.upstream, item.size,
                                item.session, at=(item.wall, item.now))]
        legs, data, upstream, wall, now, session = item
        if type(data) is not bytes:
            return None
        return [self._build(leg, data, upstream, None, session, at=(wall, now))
                for leg in legs]

    def _frame_lines(self, legs: Sequence[str], envelope: Envelope, upstream: str | None,
                     wall: float, now: float, session: str | None = None
                     ) -> list[bytes] | None:
        """The lines :meth:`_frame_records` would give at ``summary`` detail, byte for byte,
        built as text: the frame's values are the ones its parse decoded, the shape is written
        as JSON while it is walked, names come encoded from a cache, and the fields are
        joined with one f-string per leg. Measured on a
        tools/call and its answer: about half the dicts' cost. ``None`` for what it
        does not cover (the dicts' path then): an error answer, a message that is not an
        object, a shape with a summarised part or two keys redacted alike."""
        for leg in legs:
            if leg not in DIRECTIONS:
                raise ValueError(f"direction {leg!r} is not one of {DIRECTIONS}")
        decoded: Any = envelope.decoded()
        if decoded is None:
            text = envelope.text
            decoded = _decode(text[1:] if text[:1] == "\ufeff" else text)
        if type(decoded) is not dict or "error" in decoded:
            return None
        method = decoded.get("method")
        rid = decoded.get("id")
        is_call = isinstance(method, str)
        kind = ("request" if rid is not None else "notification") if is_call else "response"
        body = decoded.get("params") if is_call else decoded.get("result")
        shape = "" if body is None else self._body_shape(body)
        if shape is None:
            return None
        target: dict[str, Any] = self._target(method, decoded.get("params")) \
            if kind == "request" else {}
        # what a response's line takes from its request, written once for both legs
        about_text = "".join(f',"{k}":{self._json(v)}' for k, v in target.items()) \
            if target else ""
        rest = f'{about_text},"size":{len(envelope.to_bytes())}'
        if kind == "response":
            result = decoded.get("result")
            tool_error = type(result) is dict and result.get("isError") is True
            rest += ',"outcome":"tool_error"' if tool_error else ',"outcome":"ok"'
        if shape:
            rest += f',"shape":{shape}'
        in_session = "" if session is None else f',"session":{self._json(session)}'
        head = f'{{"time":"{_iso(wall)}","dir":"'
        id_text = str(rid) if type(rid) is int else _encode(rid)
        out = []
        for leg in legs:
            about: Mapping[str, Any] = {}
            tail = ""
            if rid is not None and kind != "notification":
                # As _pair: a request is remembered, a response takes what it was about.
                key = (session, None if leg in _HOST_LEGS else upstream,
                       _REQUESTERS[leg, kind == "request"],
                       rid if type(rid) is int else id_text)
                if kind == "request":
                    kept = {"method": method, **target}
                    if upstream is not None:
                        kept["upstream"] = upstream
                    with self._lock:
                        self._pending[key] = (now, kept, about_text)
                        if len(self._pending) > _MAX_PENDING:
                            self._pending.popitem(last=False)
                else:
                    with self._lock:
                        started = self._pending.pop(key, None)
                    if started is not None:
                        about = started[1]
                        tail = f',"latency_ms":{round((now - started[0]) * 1000.0, 3)!r}'
                        # a request the dicts' path remembered has no text of it
                        tail += started[2] if len(started) > 2 else "".join(
                            f',"{k}":{self._json(about[k])}' for k in _ABOUT[1:4]
                            if k in about)
            name = method if is_call else about.get("method")
            where = upstream if upstream is not None else about.get("upstream")
            out.append(f'{head}{leg}","upstream":{self._json(where)}{in_session},"kind":"{kind}",'
                       f'"method":{self._json(name)},"id":{id_text}{rest}{tail}}}\n'.encode())
        return out

    def _raw_lines(self, legs: Any, data: bytes, upstream: str | None, wall: float,
                   now: float, session: str | None) -> list[bytes] | None:
        """The lines of a raw line queued by :meth:`record_line` (the pass-through's
        frames), at ``summary`` detail with no callback: what :func:`_parsed` then
        :meth:`_frame_lines` write, byte for byte, with less work for the usual frames (a
        request, a notification, a result): the C scanner's decode without the decoder's
        Python wrapper and no :class:`_Line`, the legs checked by one set look-up, a
        ``tools/call``'s tool remembered with what its answer takes from it, and the part
        of the line both legs share formatted once. ``None``, with nothing changed, for
        anything else (an error answer, whitespace or a BOM around the object, a shape
        with a summarised part, ...): the caller takes the way it took before.

        The helper process runs this for every frame of ``mcpsync gateway --log``: there
        it is most of the log's CPU, which with the calls using every core is taken from
        them."""
        if type(legs) is not tuple or legs not in _LEG_TUPLES:
            return None
        try:
            text = data.decode()
            obj, end = _scan(text, 0)
        except (UnicodeDecodeError, StopIteration, ValueError, RecursionError):
            return None
        if end != len(text) or type(obj) is not dict or "error" in obj:
            return None
        method = obj.get("method")
        rid = obj.get("id")
        if method is None:
            if "method" in obj or "result" not in obj:
                return None
            kind = "response"
            body = obj["result"]
        elif type(method) is str:
            kind = "request" if rid is not None else "notification"
            body = obj.get("params")
        else:
            return None
        shape = "" if body is None else self._body_shape(body)
        if shape is None:
            return None
        json_text = self._json
        id_text = str(rid) if type(rid) is int else _encode(rid)
        pair_id = rid if type(rid) is int else id_text
        head = f'{{"time":"{_iso(wall)}","dir":"'
        in_session = "" if session is None else f',"session":{json_text(session)}'
        shape_text = f',"shape":{shape}' if shape else ""
        out = []
        if kind == "response":
            tool_error = type(body) is dict and body.get("isError") is True
            rest = (f',"size":{len(data)},"outcome":"tool_error"{shape_text}' if tool_error
                    else f',"size":{len(data)},"outcome":"ok"{shape_text}')
            pending = self._pending
            with self._lock:
                starts = [(leg, pending.pop((session, None if host else upstream, who,
                                             pair_id), None))
                          for leg, host, who in _LEG_ROLES[legs, False]]
            previous: Any = None
            line = ""
            for leg, started in starts:
                if started is None:
                    out.append(f'{head}{leg}","upstream":{json_text(upstream)}{in_session},'
                               f'"kind":"response","method":null,"id":{id_text}{rest}}}\n'
                               .encode())
                elif started is previous:
                    # Both legs answer one request frame (its legs share one entry): the
                    # same line but for the leg.
                    out.append(f"{head}{leg}{line}".encode())
                else:
                    about = started[1]
                    tail = f',"latency_ms":{round((now - started[0]) * 1000.0, 3)!r}'
                    # a request the dicts' path remembered has no text of it
                    tail += started[2] if len(started) > 2 else "".join(
                        f',"{k}":{json_text(about[k])}' for k in _ABOUT[1:4] if k in about)
                    where = upstream if upstream is not None else about.get("upstream")
                    line = (f'","upstream":{json_text(where)}{in_session},"kind":"response",'
                            f'"method":{json_text(about.get("method"))},"id":{id_text}{rest}'
                            f'{tail}}}\n')
                    out.append(f"{head}{leg}{line}".encode())
                previous = started
            return out
        about_text = ""
        if kind == "request":
            tool = body.get("name") if method == "tools/call" and type(body) is dict else None
            if type(tool) is str:
                kept, about_text = self._tool_about(tool, upstream)
            else:
                target = self._target(method, body)
                about_text = "".join(f',"{k}":{json_text(v)}' for k, v in target.items())
                kept = {"method": method, **target}
                if upstream is not None:
                    kept["upstream"] = upstream
            entry = (now, kept, about_text)
            pending = self._pending
            with self._lock:
                for _, host, who in _LEG_ROLES[legs, True]:
                    pending[session, None if host else upstream, who, pair_id] = entry
                    if len(pending) > _MAX_PENDING:
                        pending.popitem(last=False)
        mid = (f'","upstream":{json_text(upstream)}{in_session},"kind":"{kind}",'
               f'"method":{json_text(method)},"id":{id_text}{about_text},"size":{len(data)}'
               f'{shape_text}}}\n')
        for leg in legs:
            out.append(f"{head}{leg}{mid}".encode())
        return out

    def _tool_about(self, tool: str, upstream: str | None) -> tuple[dict[str, Any], str]:
        """What a ``tools/call`` of ``tool`` is about, as :meth:`_frame_lines` keeps it for
        the answer (the dict) and writes it (the text); remembered, since calls repeat."""
        if self._tools_of is not self.redactor:
            self._tools, self._tools_of = {}, self.redactor
        tools = self._tools
        done = tools.get((tool, upstream))
        if done is None:
            name = self._name(tool)
            kept: dict[str, Any] = {"method": "tools/call", "tool": name}
            if upstream is not None:
                kept["upstream"] = upstream
            done = (kept, f',"tool":{self._json(name)}')
            if len(tool) <= _CACHED_CHARS:
                if len(tools) >= _NAMES_CACHED:
                    tools.clear()
                tools[tool, upstream] = done
        return done

    def _json(self, value: Any) -> str:
        """``value`` as JSON; strings (names, methods, ids of upstreams) remembered."""
        if type(value) is not str:
            return _encode(value)
        texts = self._texts
        done = texts.get(value)
        if done is None:
            done = _encode(value)
            if len(value) <= _CACHED_CHARS:
                if len(texts) >= _NAMES_CACHED:
                    texts.clear()
                texts[value] = done
        return done

    def _body_shape(self, body: Any) -> str | None:
        """``self._shape_text(body, 0)``, remembered by the body's skeleton: its tree of
        object keys, list lengths and value types (every object's values, a list's first
        item: what the shape reads), as one flat tuple in preorder (an object as ``dict``,
        its key count, its keys, then its values' skeletons; a list as ``list``, its length,
        its first item's; any other value as its type), which names one tree only. Calls
        repeat their bodies' shapes, and one loop over the values is about half the cost
        of the walk that builds the text (a call per object, its keys' redaction looked
        up). A skeleton past :data:`_SKELETON_ITEMS` items, or whose keys hold more than
        :data:`_SKELETON_TEXT` characters, is not remembered, and at most
        :data:`_BODIES_CACHED` are: what the cache holds stays small whatever the keys."""
        if type(body) is not dict and type(body) is not list:
            return self._shape_text(body, 0)
        skeleton: list[Any] = []
        add, extend = skeleton.append, skeleton.extend
        stack: list[Any] = [body]
        pop, push, push_all = stack.pop, stack.append, stack.extend
        while stack:
            value = pop()
            kind = type(value)
            if kind is dict:
                if len(value) > _SHAPE_KEYS or len(skeleton) > _SKELETON_ITEMS:
                    return self._shape_text(body, 0)
                add(dict)
                add(len(value))
                extend(value)
                push_all(reversed(value.values()))
            elif kind is list:
                if len(skeleton) > _SKELETON_ITEMS:
                    return self._shape_text(body, 0)
                add(list)
                add(len(value))
                if value:
                    push(value[0])
            else:
                add(kind)
        if self._bodies_of is not self.redactor:
            self._bodies, self._bodies_of = {}, self.redactor
        bodies = self._bodies
        key = tuple(skeleton)
        if key in bodies:
            return bodies[key]
        done = self._shape_text(body, 0)
        # Only a skeleton new to the cache is measured: one found there was measured then.
        if sum(len(part) for part in key if type(part) is str) <= _SKELETON_TEXT:
            if len(bodies) >= _BODIES_CACHED:
                bodies.clear()
            bodies[key] = done
        return done

    def _shape_text(self, value: Any, depth: int) -> str | None:
        """``_encode(self._shape(value, depth))`` written while walking ``value``; ``None``
        where the shape summarises (too deep, too many keys) or two keys redact alike."""
        scalar = _SCALAR_TEXTS.get(type(value))
        if scalar is not None:
            return scalar
        if depth >= _SHAPE_DEPTH:
            return None
        if type(value) is dict:
            if len(value) > _SHAPE_KEYS:
                return None
            scalars, shape, deeper = _SCALAR_TEXTS, self._shape_text, depth + 1
            inners = [scalars.get(type(item)) or shape(item, deeper)
                      for item in value.values()]
            if None in inners:
                return None
            # The same keys with the same inner shapes: the same text (calls repeat).
            key = (*value, "", *inners)   # "" apart: a shape text is never empty
            if self._shapes_of is not self.redactor:
                self._shapes, self._shapes_of = {}, self.redactor
            shapes = self._shapes
            if key in shapes:
                return shapes[key]
            parts = []
            names = set()
            name, text = self._name, self._json
            done: str | None = None
            for item_key, inner in zip(value, inners, strict=True):
                redacted = name(item_key)
                if redacted in names:
                    break
                names.add(redacted)
                parts.append(f"{text(redacted)}:{inner}")
            else:
                done = "{" + ",".join(parts) + "}"
            # Measured only when new to the cache (a key found there was measured then).
            if sum(map(len, key)) <= _CACHED_SHAPE_CHARS:
                if len(shapes) >= _NAMES_CACHED:
                    shapes.clear()
                shapes[key] = done
            return done
        if type(value) is list:
            if not value:
                return "[]"
            first = self._shape_text(value[0], depth + 1)
            if first is None:
                return None
            return f"[{first}]" if len(value) == 1 else f'[{first},"{len(value) - 1} more"]'
        return None

    def _frame_records(self, legs: Sequence[str], envelope: Envelope, upstream: str | None,
                       wall: float, now: float, session: str | None = None
                       ) -> list[dict[str, Any]]:
        """One record per leg of one frame; the frame is decoded and described once."""
        for leg in legs:
            if leg not in DIRECTIONS:
                raise ValueError(f"direction {leg!r} is not one of {DIRECTIONS}")
        base: dict[str, Any] = {"time": _iso(wall), "dir": legs[0], "upstream": upstream}
        if session is not None:
            base["session"] = session
        decoded: Any = envelope.decoded()
        if decoded is None:
            text = envelope.text
            decoded = _decode(text[1:] if text[:1] == "\ufeff" else text)
        self._describe(base, decoded, len(envelope.to_bytes()))
        out = []
        for leg in legs:
            record = dict(base)
            record["dir"] = leg
            self._pair(record, leg, now)
            out.append(record)
        return out

    def _build(self, direction: str, message: Message, upstream: str | None,
               size: int | None, session: str | None = None,
               at: tuple[float, float] | None = None) -> dict[str, Any]:
        """The record of one message; ``at``: its wall-clock and clock times, when it was
        queued rather than recorded now."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction {direction!r} is not one of {DIRECTIONS}")
        wall, now = (time.time(), self._clock()) if at is None else at
        record: dict[str, Any] = {"time": _iso(wall), "dir": direction,
                                  "upstream": upstream}
        if session is not None:
            record["session"] = session
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
        self._describe(record, decoded, size)
        self._pair(record, direction, now)
        return record

    def _describe(self, record: dict[str, Any], decoded: Any, size: int | None) -> None:
        """Fill ``record`` from the decoded message: what it is, its size, its outcome, its
        shape or payload (pairing with its request is :meth:`_pair`'s)."""
        if not isinstance(decoded, Mapping):
            record.update(kind="batch" if isinstance(decoded, list) else "invalid", size=size)
            if isinstance(decoded, list):
                record["count"] = len(decoded)
            if self.detail == "full":
                record["payload"] = self.redactor.value(decoded)
            return
        method = decoded.get("method")
        rid = decoded.get("id")
        is_call = isinstance(method, str)
        kind = ("request" if rid is not None else "notification") if is_call else "response"
        record.update(kind=kind, method=method if is_call else None, id=rid)
        if kind == "request":
            record.update(self._target(method, decoded.get("params")))
        record["size"] = size
        if kind == "response":
            self._outcome(record, decoded)
        if self.detail == "full":
            record["payload"] = self.redactor.value(decoded)
        else:
            body = decoded.get("params") if is_call else decoded.get("result")
            if body is not None:
                record["shape"] = self._shape(body, 0)

    def _pair(self, record: dict[str, Any], direction: str, now: float) -> None:
        """Remember a request by its leg and id; give a response on the same leg the
        request's latency and what it was about."""
        kind = record.get("kind")
        if kind != "request" and kind != "response":
            return
        rid = record["id"]
        if rid is None:
            return
        upstream = record["upstream"]
        leg = None if direction in (HOST_TO_GATEWAY, GATEWAY_TO_HOST) else upstream
        # An int id is its own key; any other id its JSON text (a str: never equal to an
        # int, and "1" the string is '"1"' here).
        key = (record.get("session"), leg, _requester(direction, kind == "request"),
               rid if type(rid) is int else _encode(rid))
        if kind == "request":
            with self._lock:
                self._pending[key] = (now, {k: v for k in _ABOUT
                                            if (v := record.get(k)) is not None})
                if len(self._pending) > _MAX_PENDING:
                    self._pending.popitem(last=False)
            return
        with self._lock:
            started = self._pending.pop(key, None)
        if started is not None:
            record["latency_ms"] = round((now - started[0]) * 1000.0, 3)
            for name, value in started[1].items():
                if record.get(name) is None:
                    record[name] = value

    def _name(self, name: str) -> str:
        """``name`` redacted, remembered: keys and tool names repeat on every call."""
        if self._names_of is not self.redactor:
            self._names, self._names_of = {}, self.redactor
        names = self._names
        done = names.get(name)
        if done is None:
            done = self.redactor.text(name)
            if len(name) <= _CACHED_CHARS:
                if len(names) >= _NAMES_CACHED:
                    names.clear()
                names[name] = done
        return done

    def _target(self, method: Any, params: Any) -> dict[str, Any]:
        """What a request is about: the tool, prompt or resource it names."""
        if not isinstance(params, Mapping):
            return {}
        if method == "tools/call" and isinstance(params.get("name"), str):
            return {"tool": self._name(params["name"])}
        if method == "prompts/get" and isinstance(params.get("name"), str):
            return {"prompt": self._name(params["name"])}
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
        kind = type(value)
        scalar = _SCALARS.get(kind)
        if scalar is not None:
            return scalar
        if kind is dict and depth < _SHAPE_DEPTH and len(value) <= _SHAPE_KEYS:
            # Decoded JSON: exact dicts with str keys, the fast path of the Mapping case.
            name, shape, deeper = self._name, self._shape, depth + 1
            return {name(key): shape(item, deeper) for key, item in value.items()}
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
                out[self._name(str(key))] = self._shape(item, depth + 1)
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
        self._write([(_encode(record) + "\n").encode()])

    def _write(self, lines: list[bytes]) -> None:
        with self._lock:
            log = self._file
            if log is None:
                return
            try:
                log.write_lines(lines)
            except OSError as exc:
                _log.warning("inspector: writing %s failed, the log is given up: %s",
                             log.path, exc)
                self._file = None
                with contextlib.suppress(OSError):
                    log.close()

    def close(self) -> None:
        """Write the frames still queued, stop the log thread and close the log file;
        later :meth:`record` calls do nothing. Idempotent. With a helper process, it then
        waits for the helper to write them and exit."""
        helper = self._helper
        if not self._queue.close() and helper is not None:
            # The log thread is stuck on a helper that stopped reading: free it.
            helper.kill()
            self._queue.close()
        if helper is not None:
            helper.close()
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
