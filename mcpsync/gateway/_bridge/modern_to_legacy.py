"""A 2026-07-28 host in front of a legacy server (2024-11-05 … 2025-11-25).

- Handshake: the host has none, the server needs one. On the host's first request the bridge
  sends ``initialize`` itself (the host's ``clientCapabilities`` and ``clientInfo`` from that
  request's ``_meta``) and ``notifications/initialized``; the upstream replays that exchange
  on a restart. The host's ``server/discover`` is answered from the initialize result.
- Calls pass as they are, but for the modern keys of ``_meta`` (protocol version, client
  capabilities and info, log level), which are taken out: a dual-era server would otherwise
  serve the call as a modern one. A ``logLevel`` in a
  request's ``_meta`` becomes one ``logging/setLevel`` when it changes; log messages reach the
  host only once it asked for a level.
- A server-to-client request (``elicitation/create``, ``sampling/createMessage``,
  ``roots/list``) that arrives while a host call is in flight answers that call with an
  ``input_required`` result; the host's retry (its ``requestState`` is the bridge's token)
  answers the server's request, and the server's real result goes back under the retry's id.
  The server sees one call throughout; the host sees rounds, as from a modern server.
  Legacy requests carry no link to a call, so with several calls in flight the request is
  given to the one being retried, else the oldest.
- ``subscriptions/listen`` becomes ``resources/subscribe`` per URI (once per URI across the
  host's listens; ``unsubscribe`` when the last listen on it ends) and the server's
  ``resources/updated`` and list-changed notifications go to each listen that asked for them,
  tagged with its subscription id. After a restart the URIs are subscribed again.
- Every result gets the ``"resultType": "complete"`` a 2026-07-28 result carries, and lists
  and reads ``"ttlMs": 0, "cacheScope": "private"`` (appended when missing; the rest of the
  result stays as the server wrote it).
- The server's ``ping`` is answered by the bridge.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any, Final

from mcpsync._codes import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from mcpsync._envelope import Envelope, IdKey
from mcpsync.client._input_required import INPUT_REQUIRED_METHODS
from mcpsync.gateway._bridge._frames import (
    decoded,
    error_frame,
    key_of_raw,
    member,
    notification_frame,
    request_frame,
    result_frame,
    set_member,
    without_keys,
)
from mcpsync.gateway._bridge._link import GATEWAY_INFO, Out, Translator
from mcpsync.protocol import (
    LATEST_LEGACY,
    LEGACY_VERSIONS,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
    MODERN_VERSIONS,
)

__all__ = ["ModernHostLegacyServer"]

#: What a legacy server may ask a client for, which a modern host answers in rounds.
ASKS: Final = frozenset({"elicitation/create", "sampling/createMessage", "roots/list"})
#: The start of every ``requestState`` the bridge hands out.
STATE_PREFIX: Final = "mcpsync-bridge:"
_LIST_CHANGED: Final = {"notifications/tools/list_changed": ("toolsListChanged", "tools"),
                        "notifications/prompts/list_changed": ("promptsListChanged", "prompts"),
                        "notifications/resources/list_changed":
                            ("resourcesListChanged", "resources")}
#: The modern ``_meta`` keys taken out of every request: a dual-era server would serve a
#: request naming 2026-07-28 as a modern one, which is what the bridge is there to avoid.
MODERN_META: Final = frozenset({META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES,
                                META_CLIENT_INFO, META_LOG_LEVEL})
#: The methods whose 2026-07-28 results carry cache hints (``ttlMs``, ``cacheScope``).
CACHEABLE: Final = frozenset({"tools/list", "prompts/list", "resources/list",
                              "resources/templates/list", "resources/read"})
#: Calls parked between an ``input_required`` answer and the host's retry.
MAX_PARKED: Final = 256


@dataclass
class _Parked:
    """A host call the server is still working on, paused on requests for the host."""

    host_id: str | None                  # the host id waiting for it (None: a retry is due)
    asks: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)
    sent: set[str] = field(default_factory=set)   # keys handed to the host, not answered
    token: str = ""
    final: Envelope | None = None        # the server's answer, when it came before the retry
    cancelled: bool = False              # the host cancelled the retry: drop the answer


@dataclass
class _Listen:
    raw_id: str
    flags: dict[str, bool]
    uris: list[str]
    waiting: set[IdKey] = field(default_factory=set)
    acked: bool = False


class ModernHostLegacyServer(Translator):
    """See the module docstring."""

    def __init__(self, link: Any) -> None:
        super().__init__(link)
        self._init_state = "none"            # none | sent | done
        self._init_key: IdKey | None = None
        self._init: dict[str, Any] = {}
        self._queued: list[Envelope] = []
        self._calls: dict[IdKey, str] = {}   # host calls in flight (the rounds' methods)
        self._cacheable: dict[IdKey, bool] = {}   # host calls whose results need cache hints
        self._parked: dict[IdKey, _Parked] = {}
        self._by_token: dict[str, IdKey] = {}
        self._asks_n = 0
        self._listens: dict[IdKey, _Listen] = {}
        self._subs: dict[IdKey, tuple[str, IdKey | None]] = {}   # subscribe call -> uri, listen
        self._subscribed: set[str] = set()
        self._resubscribe = False
        self._log_level: str | None = None

    # ---------------------------------------------------------------- capabilities

    def _caps(self) -> dict[str, Any]:
        caps = self._init.get("capabilities")
        return caps if isinstance(caps, dict) else {}

    def _cap(self, name: str, flag: str) -> bool:
        value = self._caps().get(name)
        return isinstance(value, dict) and value.get(flag) is True

    # ---------------------------------------------------------------- from the host

    def from_host(self, env: Envelope, out: Out) -> None:
        if env.kind == "request":
            if self._init_state != "done":
                self._queued.append(env)
                if self._init_state == "none":
                    self._initialize(env, out)
                return
            self._request(env, out)
        elif env.kind == "notification" and env.method == "notifications/cancelled":
            key = key_of_raw(member(env.raw("params"), "requestId"))
            if key is not None and key in self._listens:
                self._end_listen(key, out)
                return
            retried = next((k for k, p in self._parked.items()
                            if p.host_id is not None and key_of_raw(p.host_id) == key), None)
            if retried is not None:   # the server knows the call by its first id
                self._parked[retried].host_id = None
                self._parked[retried].cancelled = True   # its answer goes nowhere now
                out.up(env.replace("params", set_member(env.raw("params"), "requestId",
                                                        _raw_of(retried))))
                return
            out.up(env)
        else:
            out.up(env)

    def _initialize(self, env: Envelope, out: Out) -> None:
        meta = decoded(member(env.raw("params"), "_meta"))
        meta = meta if isinstance(meta, dict) else {}
        caps = meta.get(META_CLIENT_CAPABILITIES)
        caps = {k: v for k, v in caps.items() if k != "extensions"} \
            if isinstance(caps, dict) else {}
        info = meta.get(META_CLIENT_INFO)
        params = {"protocolVersion": LATEST_LEGACY, "capabilities": caps,
                  "clientInfo": info if isinstance(info, dict) else GATEWAY_INFO}
        raw, self._init_key = self.ids.new()
        self._init_state = "sent"
        out.up(request_frame(raw, "initialize", json.dumps(params)))

    def _request(self, env: Envelope, out: Out) -> None:
        assert env.id is not None and env.id_key is not None
        if self._resubscribe:
            self._resubscribe = False
            for uri in sorted(self._subscribed):
                self._subscribe(uri, None, out)
        method = env.method
        params = env.raw("params")
        if method == "server/discover":
            out.host(result_frame(env.id, self._discover_result()))
            return
        if method == "subscriptions/listen":
            self._listen(env, out)
            return
        if method in INPUT_REQUIRED_METHODS:
            state = decoded(member(params, "requestState"))
            if isinstance(state, str) and state.startswith(STATE_PREFIX):
                self._retry(env, state, out)   # the server still has the first request
                return
            self._calls[env.id_key] = env.id
        if method in CACHEABLE:
            self._cacheable[env.id_key] = True
        meta = decoded(member(params, "_meta"))
        level = meta.get(META_LOG_LEVEL) if isinstance(meta, dict) else None
        if isinstance(level, str) and level != self._log_level:
            self._log_level = level
            if "logging" in self._caps():
                raw, _ = self.ids.new()
                out.up(request_frame(raw, "logging/setLevel", json.dumps({"level": level})))
        stripped = without_keys(params, MODERN_META)
        out.up(env if stripped is params or stripped is None else env.replace("params", stripped))

    def _discover_result(self) -> str:
        init = self._init
        caps = {k: v for k, v in self._caps().items() if k != "tasks"}
        result: dict[str, Any] = {"resultType": "complete",
                                  "supportedVersions": list(MODERN_VERSIONS),
                                  "capabilities": caps}
        if isinstance(init.get("instructions"), str):
            result["instructions"] = init["instructions"]
        result["ttlMs"] = 0
        result["cacheScope"] = "private"
        info = init.get("serverInfo")
        result["_meta"] = {META_SERVER_INFO: info if isinstance(info, dict) else {}}
        return json.dumps(result)

    # ---------------------------------------------------------------- input rounds

    def _retry(self, env: Envelope, state: str, out: Out) -> None:
        assert env.id is not None
        key = self._by_token.pop(state, None)
        parked = self._parked.get(key) if key is not None else None
        if parked is None:
            out.host(error_frame(env.id, INVALID_PARAMS, (
                f"gateway bridge: upstream {self.name!r} holds no call for this requestState "
                "(it was answered already, or the server restarted meanwhile); make the "
                "call again without requestState"), self.name))
            return
        assert key is not None
        responses = member(env.raw("params"), "inputResponses")
        for ask in sorted(parked.sent):
            answer = member(responses, ask)
            if answer is None:
                continue   # not answered: asked again below
            raw_id, _method, _params = parked.asks.pop(ask)
            out.up(result_frame(raw_id, answer))
        parked.sent.clear()
        parked.host_id = env.id
        if parked.final is not None:
            del self._parked[key]
            out.host(parked.final.replace("id", env.id))
        elif parked.asks:
            self._ask(parked, out)

    def _upstream_asks(self, env: Envelope, out: Out) -> None:
        assert env.id is not None and env.method is not None
        live = {k: p for k, p in self._parked.items() if not p.cancelled}
        key = next((k for k, p in live.items() if p.host_id is not None), None)
        if key is None and self._calls:
            key = next(iter(self._calls))
            if len(self._parked) >= MAX_PARKED:
                self._evict(next(iter(self._parked)), out)
            self._parked[key] = _Parked(self._calls.pop(key))
        if key is None:
            key = next(iter(live), None)
        if key is None:
            out.up(error_frame(env.id, INTERNAL_ERROR, (
                f"gateway bridge: upstream {self.name!r} sent {env.method} while no call of "
                "the host was in flight; the host speaks 2026-07-28, where a server can ask "
                "for input only as the answer to a call"), self.name))
            return
        parked = self._parked[key]
        self._asks_n += 1
        parked.asks[f"{env.method.split('/')[0]}-{self._asks_n}"] = (
            env.id, env.method, env.raw("params"))
        if parked.host_id is not None:
            self._ask(parked, out)

    def _evict(self, key: IdKey, out: Out) -> None:
        """Give up the oldest parked call (its host never retried): refuse the requests it
        still holds and cancel the call, so the server stops waiting for them."""
        parked = self._parked.pop(key)
        self._by_token.pop(parked.token, None)
        for raw_id, method, _params in parked.asks.values():
            out.up(error_frame(raw_id, INTERNAL_ERROR, (
                f"gateway bridge: the host never answered this {method} (it did not retry "
                f"the call, and the bridge holds at most {MAX_PARKED} such calls)"), self.name))
        out.up(notification_frame("notifications/cancelled", json.dumps(
            {"requestId": json.loads(_raw_of(key)),
             "reason": "the host did not come back for this call"})))

    def _ask(self, parked: _Parked, out: Out) -> None:
        assert parked.host_id is not None
        key = next(k for k, p in self._parked.items() if p is parked)
        parked.token = STATE_PREFIX + secrets.token_urlsafe(12)
        self._by_token[parked.token] = key
        requests = ",".join(
            f'{json.dumps(ask)}:{{"method":{json.dumps(method)},"params":{params or "{}"}}}'
            for ask, (_raw, method, params) in parked.asks.items())
        parked.sent = set(parked.asks)
        result = (f'{{"resultType":"input_required","inputRequests":{{{requests}}},'
                  f'"requestState":{json.dumps(parked.token)}}}')
        out.host(result_frame(parked.host_id, result))
        parked.host_id = None

    # ---------------------------------------------------------------- subscriptions

    def _listen(self, env: Envelope, out: Out) -> None:
        assert env.id is not None and env.id_key is not None
        wanted = decoded(member(env.raw("params"), "notifications"))
        wanted = wanted if isinstance(wanted, dict) else {}
        flags = {flag: True for _method, (flag, cap) in _LIST_CHANGED.items()
                 if wanted.get(flag) is True and self._cap(cap, "listChanged")}
        uris = wanted.get("resourceSubscriptions")
        uris = [u for u in uris if isinstance(u, str)] \
            if isinstance(uris, list) and self._cap("resources", "subscribe") else []
        listen = self._listens[env.id_key] = _Listen(env.id, flags, list(dict.fromkeys(uris)))
        for uri in listen.uris:
            if uri not in self._subscribed:
                listen.waiting.add(self._subscribe(uri, env.id_key, out))
        if not listen.waiting:
            self._ack(listen, out)

    def _subscribe(self, uri: str, listen: IdKey | None, out: Out) -> IdKey:
        raw, key = self.ids.new()
        self._subs[key] = (uri, listen)
        self._subscribed.add(uri)
        out.up(request_frame(raw, "resources/subscribe", json.dumps({"uri": uri})))
        return key

    def _ack(self, listen: _Listen, out: Out) -> None:
        listen.acked = True
        honoured: dict[str, Any] = dict(listen.flags)
        if listen.uris:
            honoured["resourceSubscriptions"] = listen.uris
        params = json.dumps({"notifications": honoured,
                             "_meta": {META_SUBSCRIPTION_ID: json.loads(listen.raw_id)}})
        out.host(notification_frame("notifications/subscriptions/acknowledged", params))

    def _end_listen(self, key: IdKey, out: Out) -> None:
        listen = self._listens.pop(key)
        still = {uri for other in self._listens.values() for uri in other.uris}
        for uri in listen.uris:
            if uri not in still and uri in self._subscribed:
                self._subscribed.discard(uri)
                raw, _ = self.ids.new()
                out.up(request_frame(raw, "resources/unsubscribe", json.dumps({"uri": uri})))

    def _to_listens(self, env: Envelope, wants: Any, out: Out) -> None:
        params = env.raw("params")
        for listen in self._listens.values():
            if listen.acked and wants(listen):
                meta = set_member(member(params, "_meta"), META_SUBSCRIPTION_ID, listen.raw_id)
                out.host(notification_frame(env.method or "", set_member(params, "_meta", meta)))

    # ---------------------------------------------------------------- from the server

    def from_upstream(self, env: Envelope, out: Out) -> None:
        key = env.id_key
        if env.kind in ("response", "error"):
            if self.ids.mine(key):
                self._internal_answer(env, out)
                return
            assert key is not None
            env = _complete(env, self._cacheable.pop(key, False))
            parked = self._parked.get(key)
            if parked is None:
                self._calls.pop(key, None)
                out.host(env)
                return
            self.link.answered(key)
            if parked.cancelled:
                del self._parked[key]
            elif parked.host_id is not None:
                del self._parked[key]
                out.host(env.replace("id", parked.host_id))
            else:
                parked.final = env
            return
        if env.kind == "request":
            assert env.id is not None
            if env.method == "ping":
                out.up(result_frame(env.id, "{}"))
            elif env.method in ASKS:
                self._upstream_asks(env, out)
            else:
                out.up(error_frame(env.id, METHOD_NOT_FOUND, (
                    f"gateway bridge: upstream {self.name!r} sent {env.method!r}, which a "
                    "2026-07-28 host has no way to receive"), self.name))
            return
        method = env.method or ""
        if method == "notifications/resources/updated":
            uri = decoded(member(env.raw("params"), "uri"))
            self._to_listens(env, lambda listen: uri in listen.uris, out)
        elif method in _LIST_CHANGED:
            flag = _LIST_CHANGED[method][0]
            self._to_listens(env, lambda listen: flag in listen.flags, out)
        elif method == "notifications/message":
            if self._log_level is not None:
                out.host(env)
        elif method != "notifications/cancelled":   # a legacy server's own cancel: no one to tell
            out.host(env)

    def _internal_answer(self, env: Envelope, out: Out) -> None:
        key = env.id_key
        if key == self._init_key:
            result = decoded(env.raw("result")) if env.kind == "response" else None
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            if isinstance(result, dict) and version in LEGACY_VERSIONS:
                self._init = result
                self._init_state = "done"
                out.up(notification_frame("notifications/initialized", None))
                queued, self._queued = self._queued, []
                for each in queued:
                    self._request(each, out)
                return
            why = (f"it answered protocol version {version!r}, which is no legacy revision"
                   if isinstance(result, dict) else f"it answered {env.raw('error')}")
            self._init_failed(f"upstream {self.name!r} refused the initialize the bridge "
                              f"sent for this 2026-07-28 host: {why}", out)
            return
        if key is not None and key in self._subs:
            self._subscribed_answer(key, env.kind == "response", out)

    def _subscribed_answer(self, key: IdKey, ok: bool, out: Out) -> None:
        uri, listen_key = self._subs.pop(key)
        listen = self._listens.get(listen_key) if listen_key is not None else None
        if not ok:
            self._subscribed.discard(uri)
            if listen is not None:
                listen.uris.remove(uri)
        if listen is not None and key in listen.waiting:
            listen.waiting.discard(key)
            if not listen.waiting:
                self._ack(listen, out)

    def _init_failed(self, why: str, out: Out) -> None:
        self._init_state = "none"
        queued, self._queued = self._queued, []
        for each in queued:
            if each.id is not None:
                out.host(error_frame(each.id, INTERNAL_ERROR, f"gateway bridge: {why}",
                                     self.name))

    def internal_failed(self, env: Envelope, why: str, out: Out) -> None:
        if env.id_key == self._init_key and self._init_state == "sent":
            self._init_failed(f"upstream {self.name!r} could not be initialized: {why}", out)
        elif env.id_key is not None and env.id_key in self._subs:
            self._subscribed_answer(env.id_key, False, out)

    def host_call(self, env: Envelope, out: Out) -> Envelope | None:
        key = env.id_key
        assert key is not None
        self._calls.pop(key, None)
        self._cacheable.pop(key, None)
        parked = self._parked.pop(key, None)
        if parked is None:
            return env
        self._by_token.pop(parked.token, None)
        return env.replace("id", parked.host_id) if parked.host_id is not None else None

    def down(self, out: Out) -> None:
        if self._subscribed:
            self._resubscribe = True


def _complete(env: Envelope, cacheable: bool) -> Envelope:
    """A legacy result with the members a 2026-07-28 result must carry appended when
    missing: ``"resultType": "complete"``, and for the cacheable results (lists, reads)
    ``"ttlMs": 0`` and ``"cacheScope": "private"`` (never cached, never shared: the server
    said nothing about freshness). Strict clients, the official SDK's among them, refuse a
    result without them. Only these members are added; every other byte stays."""
    if env.kind != "response":
        return env
    result = env.raw("result")
    if result is None or not result.lstrip().startswith("{"):
        return env
    added = result
    for key, value in (("resultType", '"complete"'), ("ttlMs", "0"),
                       ("cacheScope", '"private"'))[:3 if cacheable else 1]:
        if member(added, key) is None:
            added = set_member(added, key, value)
    return env if added is result else env.replace("result", added)


def _raw_of(key: IdKey) -> str:
    """The JSON text of the id ``key`` stands for."""
    kind, value = key
    return str(value) if kind == "int" else json.dumps(value) if kind == "str" else str(value)
