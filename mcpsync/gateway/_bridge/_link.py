"""The bridging upstream: an :class:`~mcpsync.gateway._upstream.Upstream` whose frames pass
through a translator when the host and the server speak different eras.

It looks like any upstream to the gateway core and to the aggregator (same ``submit``, same
callbacks), so neither knows bridging exists. What it adds:

- the server's era: pinned by the config entry (``"era": "legacy"`` / ``"modern"``) or found
  the way our client finds it: ``server/discover`` is sent as soon as the upstream starts; a
  real discover result (or a -32022 naming a modern version) means modern, any other answer,
  the server exiting, or silence for :data:`PROBE_TIMEOUT` seconds means legacy. The host's
  first frame waits for that verdict (only a silent legacy server makes it wait long);
- the host's era, from its first request: ``initialize`` is legacy, ``server/discover`` or a
  request whose ``_meta`` names a 2026-07-28 version is modern;
- once both are known and differ, a translator (:mod:`.modern_to_legacy` or
  :mod:`.legacy_to_modern`) sees every frame both ways; when they are the same the frames
  pass byte for byte, as without the bridge.

A translator runs under the bridge's lock and only *says* what to send (an :class:`Out`);
the frames go out once the lock is released, so no lock of the bridge is ever held while the
gateway, the aggregator or the upstream's queue take theirs.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from mcpsync._codes import UNSUPPORTED_PROTOCOL_VERSION
from mcpsync._envelope import Envelope, EnvelopeError, IdKey, parse_envelope
from mcpsync._version import __version__
from mcpsync.config import ServerConfig
from mcpsync.errors import ConfigError
from mcpsync.gateway._bridge._frames import BridgeIds, decoded, member, request_frame
from mcpsync.gateway._upstream import Upstream
from mcpsync.jsonrpc import MAX_FRAME_BYTES
from mcpsync.protocol import (
    LATEST_MODERN,
    META_PROTOCOL_VERSION,
    build_meta,
    classify_discover_error,
    classify_discover_result,
    is_modern,
)
from mcpsync.secrets import SecretResolver

__all__ = ["ERAS", "PROBE_TIMEOUT", "BridgedUpstream", "Out", "Translator", "era_of_entry"]

_log = logging.getLogger("mcpsync.gateway")

#: The values of a config entry's ``era`` key.
ERAS: Final = ("auto", "legacy", "modern")
#: How long a silent server may leave ``server/discover`` unanswered before it counts as
#: legacy (our client's default ``probe_timeout``).
PROBE_TIMEOUT: Final = 5.0
#: The ``clientInfo`` the bridge sends for itself when the host gave none.
GATEWAY_INFO: Final = {"name": "mcpsync-gateway", "version": __version__}


def era_of_entry(config: ServerConfig, source: str) -> str:
    """The ``era`` a config entry pins (``"auto"`` when it has none); anything else is a
    ``ConfigError`` naming the entry."""
    value = config.extra.get("era", "auto")
    if value not in ERAS:
        raise ConfigError(f"{source}: server {config.id or config.display_name!r} has "
                          f"\"era\": {value!r}; use one of {', '.join(map(repr, ERAS))} "
                          "(the era the gateway's bridge assumes the server speaks)")
    return str(value)


class Out:
    """What a translator wants sent, in order, once the bridge's lock is released."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[tuple[bool, str | Envelope]] = []

    def up(self, frame: str | Envelope) -> None:
        """Send ``frame`` to the upstream server."""
        self.items.append((True, frame))

    def host(self, frame: str | Envelope) -> None:
        """Hand ``frame`` to the gateway, as if the server had written it."""
        self.items.append((False, frame))


class Translator:
    """One direction of bridging. Every method runs under the bridge's lock."""

    def __init__(self, link: BridgedUpstream) -> None:
        self.link = link
        self.name = link.id
        self.ids = link.ids

    def from_host(self, env: Envelope, out: Out) -> None:
        raise NotImplementedError

    def from_upstream(self, env: Envelope, out: Out) -> None:
        raise NotImplementedError

    def internal_failed(self, env: Envelope, why: str, out: Out) -> None:
        """A request the bridge made itself could not be delivered (or the server died)."""
        raise NotImplementedError

    def host_call(self, env: Envelope, out: Out) -> Envelope | None:
        """The host's view of call ``env`` that failed below JSON-RPC: the envelope to fail
        for the host (its id the host's), or ``None`` when the host is owed nothing."""
        return env

    def down(self, out: Out) -> None:
        """The server's process ended (a restart follows on the next request)."""


class BridgedUpstream(Upstream):
    """An upstream behind the bridge (see the module docstring). Thread-safe."""

    def __init__(self, config: ServerConfig, *,
                 on_line: Callable[[Upstream, bytes], None],
                 on_down: Callable[[Upstream, list[Envelope], str], None],
                 on_refused: Callable[[Upstream, Envelope, str], None],
                 on_failed: Callable[[Upstream, Envelope, str], None],
                 max_frame_bytes: int = MAX_FRAME_BYTES,
                 secret_resolver: SecretResolver | None = None, era: str = "auto") -> None:
        self._gw_line = on_line
        self._gw_down = on_down
        self._gw_refused = on_refused
        self._gw_failed = on_failed
        super().__init__(config, on_line=self._line, on_down=self._down,
                         on_refused=self._refused, on_failed=self._failed,
                         max_frame_bytes=max_frame_bytes, secret_resolver=secret_resolver)
        self.ids = BridgeIds(self._safe)
        self.upstream_era: str | None = None if era == "auto" else era
        self.host_era: str | None = None
        self._probe_key: IdKey | None = None
        self._probed = threading.Event()
        if self.upstream_era is not None:
            self._probed.set()
        self._lock = threading.Lock()
        self._tr: Translator | None = None
        self._decided = False   # host and upstream eras compared (translator or none)

    # ---------------------------------------------------------------- start and the probe

    def start(self) -> None:
        super().start()
        if self.upstream_era is None:
            self._probe()

    def _probe(self) -> None:
        raw, key = self.ids.new()
        self._probe_key = key
        self._probed.clear()
        meta = build_meta(LATEST_MODERN, {}, GATEWAY_INFO)
        params = '{"_meta":' + _dumps(meta) + "}"
        Upstream.submit(self, parse_envelope(request_frame(raw, "server/discover", params)))

    def _probe_answer(self, env: Envelope) -> None:
        if env.kind == "response":
            verdict = classify_discover_result(decoded(env.raw("result")))[0]
        else:
            error = decoded(env.raw("error"))
            error = error if isinstance(error, dict) else {}
            verdict = "modern" if classify_discover_error(
                error.get("code"), error.get("data"))[0] == "retry" else "legacy"
            if error.get("code") == UNSUPPORTED_PROTOCOL_VERSION and verdict == "legacy":
                _log.warning("upstream %r refused server/discover as a modern server that "
                             "speaks none of our versions; bridging it as legacy", self.id)
        self._settle(verdict)

    def _settle(self, era: str) -> None:
        with self._lock:
            if self.upstream_era is None:
                self.upstream_era = era
                _log.info("upstream %r speaks the %s era", self.id, era)
        self._probed.set()

    def _await_era(self) -> None:
        if self._probed.is_set():
            self._probe()   # the last probe never reached the server (it did not start)
        if not self._probed.wait(PROBE_TIMEOUT):
            _log.info("upstream %r left server/discover unanswered for %g s: legacy",
                      self.id, PROBE_TIMEOUT)
            self._settle("legacy")

    # ---------------------------------------------------------------- from the host

    def submit(self, envelope: Envelope) -> bool:
        if self.upstream_era is None:
            self._await_era()
        out = Out()
        with self._lock:
            tr = self._translator_for(envelope)
            if tr is not None:
                tr.from_host(envelope, out)
        if tr is None:
            return super().submit(envelope)
        self._flush(out)
        return True

    def _translator_for(self, env: Envelope) -> Translator | None:
        if self._decided:
            return self._tr
        if self.host_era is None:
            self.host_era = _host_era(env)
        if self.host_era is None or self.upstream_era is None:
            return None   # not known yet: frames pass as they are
        self._decided = True
        if self.host_era != self.upstream_era:
            if self.host_era == "modern":
                importlib.import_module("mcpsync.gateway._bridge.modern_to_legacy")
                from mcpsync.gateway._bridge.modern_to_legacy import ModernHostLegacyServer
                self._tr = ModernHostLegacyServer(self)
            else:
                importlib.import_module("mcpsync.gateway._bridge.legacy_to_modern")
                from mcpsync.gateway._bridge.legacy_to_modern import LegacyHostModernServer
                self._tr = LegacyHostModernServer(self)
            _log.info("upstream %r: bridging a %s host to a %s server", self.id,
                      self.host_era, self.upstream_era)
        return self._tr

    # ---------------------------------------------------------------- from the server

    def _line(self, _upstream: Upstream, line: bytes) -> None:
        try:
            env = parse_envelope(line)
        except EnvelopeError:
            self._gw_line(self, line)   # the gateway logs and drops it
            return
        key = env.id_key
        mine = env.kind in ("response", "error") and self.ids.mine(key)
        if mine:
            if self.answered(key) == -1.0:   # type: ignore[arg-type]
                return   # the answer to a replayed initialize: the bridge had its own
            if key == self._probe_key:
                self._probe_answer(env)
                return
        tr = self._tr
        if tr is None:
            if not mine:
                self._gw_line(self, line)
            return
        out = Out()
        with self._lock:
            tr.from_upstream(env, out)
        self._flush(out)

    def _down(self, _upstream: Upstream, calls: list[Envelope], why: str) -> None:
        out = Out()
        host_calls: list[Envelope] = []
        probe_lost = False
        with self._lock:
            tr = self._tr
            for call in calls:
                if not self.ids.mine(call.id_key):
                    mapped = tr.host_call(call, out) if tr is not None else call
                    if mapped is not None:
                        host_calls.append(mapped)
                elif call.id_key == self._probe_key:
                    probe_lost = True
                elif tr is not None:
                    tr.internal_failed(call, why, out)
            if tr is not None:
                tr.down(out)
        if probe_lost:
            self._settle("legacy")   # it exited on server/discover, as some legacy servers do
        self._gw_down(self, host_calls, why)
        self._flush(out)

    def _refused(self, _upstream: Upstream, env: Envelope, why: str) -> None:
        self._one_failed(env, why, self._gw_refused)

    def _failed(self, _upstream: Upstream, env: Envelope, why: str) -> None:
        self._one_failed(env, why, self._gw_failed)

    def _one_failed(self, env: Envelope, why: str,
                    tell: Callable[[Upstream, Envelope, str], None]) -> None:
        if env.id_key == self._probe_key:
            self._probed.set()   # the server could not be reached: the era stays unknown
            return
        out = Out()
        mapped: Envelope | None = env
        with self._lock:
            tr = self._tr
            if self.ids.mine(env.id_key):
                mapped = None
                if tr is not None:
                    tr.internal_failed(env, why, out)
            elif tr is not None:
                mapped = tr.host_call(env, out)
        if mapped is not None:
            tell(self, mapped, why)
        self._flush(out)

    # ---------------------------------------------------------------- sending

    def _flush(self, out: Out) -> None:
        for to_upstream, frame in out.items:
            env = frame if isinstance(frame, Envelope) else parse_envelope(frame)
            if to_upstream:
                Upstream.submit(self, env)
            else:
                self._gw_line(self, env.to_bytes())


def _host_era(env: Envelope) -> str | None:
    if env.kind != "request":
        return None
    if env.method == "initialize":
        return "legacy"
    if env.method == "server/discover":
        return "modern"
    meta = decoded(member(env.raw("params"), "_meta"))
    version = meta.get(META_PROTOCOL_VERSION) if isinstance(meta, dict) else None
    if isinstance(version, str):
        return "modern" if is_modern(version) else "legacy"
    return None


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
