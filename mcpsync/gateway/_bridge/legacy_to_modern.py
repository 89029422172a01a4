"""A legacy host (2024-11-05 … 2025-11-25) in front of a 2026-07-28 server.

- Handshake: the host's ``initialize`` is answered by the bridge from the server's
  ``server/discover`` (asked with the host's capabilities and client info in ``_meta``); the
  host's ``notifications/initialized`` ends there. Nothing is replayed on a restart: the
  server keeps no state between requests.
- Every request gets the ``_meta`` a modern server needs: the protocol version, the host's
  capabilities (in their modern shape) and client info, and the log level the host set with
  ``logging/setLevel`` (which, like ``ping``, the bridge answers itself). Only ``_meta`` is
  rewritten; the rest of ``params`` stays as the host wrote it.
- ``input_required`` answers become the server-to-client requests a legacy host knows: each
  of ``inputRequests`` goes to the host as ``elicitation/create`` / ``sampling/createMessage``
  / ``roots/list``; once all are answered the same method is sent again with the original
  params, ``inputResponses`` and the ``requestState`` echoed, under a new id. The host sees
  one call, answered under its own id. A request the host refuses (a JSON-RPC error) fails the
  call with that error: a modern server has no way to hear a refusal.
- ``resources/subscribe`` / ``unsubscribe`` keep one ``subscriptions/listen`` open with the
  subscribed URIs (and the list-changed flags the server offers, opened after the
  handshake); a change opens the new listen before the old is cancelled, and a host's
  subscribe is answered once the listen that holds its URI is acknowledged. Notifications of
  a listen that is no longer current are dropped, so none arrives twice.
"""

from __future__ import annotations

import json
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
)
from mcpsync.gateway._bridge._link import GATEWAY_INFO, Out, Translator
from mcpsync.protocol import (
    LATEST_LEGACY,
    LATEST_MODERN,
    LEGACY_VERSIONS,
    META_SERVER_INFO,
    META_SUBSCRIPTION_ID,
    build_meta,
    classify_discover_result,
)

__all__ = ["LegacyHostModernServer"]

#: Input rounds one call may take before the bridge gives up on it.
MAX_ROUNDS: Final = 16
_FLAGS: Final = (("tools", "toolsListChanged"), ("prompts", "promptsListChanged"),
                 ("resources", "resourcesListChanged"))


@dataclass
class _Round:
    """One host call that may take input rounds."""

    host_id: str
    method: str
    params: str                            # the params sent upstream (with _meta)
    asks: dict[IdKey, str] = field(default_factory=dict)   # request to host -> input key
    answers: dict[str, str] = field(default_factory=dict)  # input key -> answer text
    state: str | None = None
    rounds: int = 0


def modern_capabilities(legacy: Any) -> dict[str, Any]:
    """A legacy host's client capabilities in their 2026-07-28 shape: ``roots`` is ``{}``
    (no list_changed in that era) and ``tasks`` is gone (an extension now)."""
    caps = dict(legacy) if isinstance(legacy, dict) else {}
    caps.pop("tasks", None)
    if "roots" in caps:
        caps["roots"] = {}
    return caps


class LegacyHostModernServer(Translator):
    """See the module docstring."""

    def __init__(self, link: Any) -> None:
        super().__init__(link)
        self._caps: dict[str, Any] = {}        # the host's, modern shape
        self._info: dict[str, Any] = dict(GATEWAY_INFO)
        self._version = LATEST_MODERN
        self._log_level: str | None = None
        self._discover: dict[str, Any] = {}
        self._discover_key: IdKey | None = None
        self._init: tuple[str, str] | None = None   # the host's initialize: id, version
        self._rounds: dict[IdKey, _Round] = {}       # by the id of the attempt upstream
        self._asks: dict[IdKey, _Round] = {}         # request to the host -> its round
        self._subs: set[str] = set()
        self._listen: tuple[IdKey, Any] | None = None   # the current listen: key, id value
        self._waiting: list[str] = []    # host subscribes answered on the next listen's ack
        self._relisten = False

    def _meta(self) -> dict[str, Any]:
        return build_meta(self._version, self._caps, self._info, self._log_level)

    def _with_meta(self, params: str | None) -> str:
        meta = decoded(member(params, "_meta"))
        merged = {**meta, **self._meta()} if isinstance(meta, dict) else self._meta()
        return set_member(params, "_meta", json.dumps(merged, ensure_ascii=False))

    def _server_cap(self, name: str, flag: str) -> bool:
        caps = self._discover.get("capabilities")
        value = caps.get(name) if isinstance(caps, dict) else None
        return isinstance(value, dict) and value.get(flag) is True

    # ---------------------------------------------------------------- from the host

    def from_host(self, env: Envelope, out: Out) -> None:
        if env.kind == "request":
            self._request(env, out)
        elif env.kind == "notification":
            self._notification(env, out)
        elif env.id_key is not None and env.id_key in self._asks:
            self._host_answer(env, out)
        elif not self.ids.mine(env.id_key):
            out.up(env)
        # else: an answer for a round that is over (its call was cancelled): no one waits

    def _request(self, env: Envelope, out: Out) -> None:
        assert env.id is not None and env.id_key is not None
        method = env.method
        params = env.raw("params")
        if method == "initialize":
            self._initialize(env, out)
            return
        if method == "ping":
            out.host(result_frame(env.id, "{}"))
            return
        if method == "logging/setLevel":
            level = decoded(member(params, "level"))
            self._log_level = level if isinstance(level, str) else None
            out.host(result_frame(env.id, "{}"))
            return
        if method in ("resources/subscribe", "resources/unsubscribe"):
            self._subscription(env, out)
            return
        if self._relisten:
            self._relisten = False
            self._open_listen(out)
        sent = self._with_meta(params)
        if method in INPUT_REQUIRED_METHODS:
            self._rounds[env.id_key] = _Round(env.id, method, sent)
        out.up(env.replace("params", sent))

    def _initialize(self, env: Envelope, out: Out) -> None:
        assert env.id is not None
        params = decoded(env.raw("params"))
        params = params if isinstance(params, dict) else {}
        self._caps = modern_capabilities(params.get("capabilities"))
        info = params.get("clientInfo")
        if isinstance(info, dict):
            self._info = info
        version = params.get("protocolVersion")
        self._init = (env.id, version if version in LEGACY_VERSIONS else LATEST_LEGACY)
        raw, self._discover_key = self.ids.new()
        out.up(request_frame(raw, "server/discover", json.dumps({"_meta": self._meta()})))

    def _notification(self, env: Envelope, out: Out) -> None:
        method = env.method
        if method == "notifications/initialized":
            self._open_listen(out)
        elif method == "notifications/roots/list_changed":
            return   # 2026-07-28 has none: the server asks for roots when it needs them
        elif method == "notifications/cancelled":
            key = key_of_raw(member(env.raw("params"), "requestId"))
            found = next(((k, r) for k, r in self._rounds.items()
                          if key is not None and key_of_raw(r.host_id) == key), None)
            if found is not None and found[0] != key:
                # A retry is upstream under the bridge's id: cancel that one.
                out.up(env.replace("params", set_member(env.raw("params"), "requestId",
                                                        json.dumps(found[0][1]))))
                return
            waiting = [k for k, r in self._asks.items()
                       if key is not None and key_of_raw(r.host_id) == key]
            for ask_key in waiting:   # it waits on the host: nothing is upstream to cancel
                del self._asks[ask_key]
            if not waiting:
                out.up(env)
        else:
            out.up(env)

    # ---------------------------------------------------------------- input rounds

    def _start_round(self, round_: _Round, env: Envelope, out: Out) -> None:
        round_.rounds += 1
        if round_.rounds > MAX_ROUNDS:
            out.host(error_frame(round_.host_id, INTERNAL_ERROR, (
                f"gateway bridge: upstream {self.name!r} asked for input more than "
                f"{MAX_ROUNDS} times on one call; the bridge gave up"), self.name))
            return
        result = env.raw("result")
        requests = member(result, "inputRequests")
        round_.state = member(result, "requestState")
        round_.answers = {}
        round_.asks = {}
        names = decoded(requests)
        for ask in names if isinstance(names, dict) else {}:
            entry = member(requests, ask)
            method = decoded(member(entry, "method"))
            if not isinstance(method, str):
                continue
            raw, key = self.ids.new()
            round_.asks[key] = ask
            self._asks[key] = round_
            out.host(request_frame(raw, method, member(entry, "params")))
        if not round_.asks:
            self._retry(round_, out)

    def _host_answer(self, env: Envelope, out: Out) -> None:
        assert env.id_key is not None
        round_ = self._asks.pop(env.id_key)
        ask = round_.asks.pop(env.id_key)
        if env.kind == "error":
            for other in round_.asks:
                self._asks.pop(other, None)
            round_.asks.clear()
            error = decoded(env.raw("error"))
            error = error if isinstance(error, dict) else {}
            code = error.get("code")
            code = code if isinstance(code, int) else INTERNAL_ERROR
            out.host(error_frame(round_.host_id, code, (
                f"gateway bridge: the host refused the input {ask!r} that upstream "
                f"{self.name!r} needed for this call: {error.get('message')}"), self.name))
            return
        round_.answers[ask] = env.raw("result") or "{}"
        if not round_.asks:
            self._retry(round_, out)

    def _retry(self, round_: _Round, out: Out) -> None:
        params = round_.params
        if round_.answers:
            answers = ",".join(f"{json.dumps(k)}:{v}" for k, v in round_.answers.items())
            params = set_member(params, "inputResponses", "{" + answers + "}")
        if round_.state is not None:
            params = set_member(params, "requestState", round_.state)
        raw, key = self.ids.new()
        self._rounds[key] = round_
        out.up(request_frame(raw, round_.method, params))

    # ---------------------------------------------------------------- subscriptions

    def _subscription(self, env: Envelope, out: Out) -> None:
        assert env.id is not None
        uri = decoded(member(env.raw("params"), "uri"))
        if not self._server_cap("resources", "subscribe"):
            out.host(error_frame(env.id, METHOD_NOT_FOUND, (
                f"gateway bridge: upstream {self.name!r} offers no resource subscriptions "
                "(capabilities.resources.subscribe)"), self.name))
            return
        if not isinstance(uri, str):
            out.host(error_frame(env.id, INVALID_PARAMS, f"{env.method} needs a uri string",
                                 self.name))
            return
        if env.method == "resources/subscribe":
            if uri in self._subs:
                out.host(result_frame(env.id, "{}"))
                return
            self._subs.add(uri)
            self._waiting.append(env.id)
        else:
            self._subs.discard(uri)
            out.host(result_frame(env.id, "{}"))
        self._open_listen(out)

    def _open_listen(self, out: Out) -> None:
        flags: dict[str, Any] = {flag: True for cap, flag in _FLAGS
                                 if self._server_cap(cap, "listChanged")}
        if self._subs:
            flags["resourceSubscriptions"] = sorted(self._subs)
        old = self._listen
        self._listen = None
        if flags:
            raw, key = self.ids.new()
            self._listen = (key, json.loads(raw))
            params = json.dumps({"notifications": flags, "_meta": self._meta()})
            out.up(request_frame(raw, "subscriptions/listen", params))
        if old is not None:
            self.link.forget(old[0])
            out.up(notification_frame("notifications/cancelled",
                                      json.dumps({"requestId": old[1]})))

    def _acknowledged(self, out: Out) -> None:
        waiting, self._waiting = self._waiting, []
        for host_id in waiting:
            out.host(result_frame(host_id, "{}"))

    # ---------------------------------------------------------------- from the server

    def from_upstream(self, env: Envelope, out: Out) -> None:
        key = env.id_key
        if env.kind in ("response", "error"):
            assert key is not None
            if key == self._discover_key:
                self._discovered(env, out)
                return
            round_ = self._rounds.pop(key, None)
            if round_ is not None:
                self._round_answer(round_, env, out)
                return
            if self._listen is not None and key == self._listen[0]:
                self._listen = None   # the server ended it (or refused it)
                self._relisten = bool(self._subs)
                if env.kind == "error":
                    for host_id in self._waiting:
                        out.host(error_frame(host_id, INTERNAL_ERROR, (
                            f"gateway bridge: upstream {self.name!r} refused the "
                            f"subscriptions/listen behind this subscribe: "
                            f"{env.raw('error')}"), self.name))
                    self._waiting = []
                return
            if not self.ids.mine(key):
                out.host(env)
            return
        if env.kind == "request":
            assert env.id is not None
            out.up(error_frame(env.id, METHOD_NOT_FOUND, (
                f"gateway bridge: upstream {self.name!r} speaks 2026-07-28, where servers "
                f"send no requests; {env.method!r} is not bridged"), self.name))
            return
        meta = decoded(member(env.raw("params"), "_meta"))
        listen = meta.get(META_SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        if listen is not None:
            if self._listen is None or listen != self._listen[1]:
                return   # a listen that is gone (or being replaced): said by the current one
            if env.method == "notifications/subscriptions/acknowledged":
                self._acknowledged(out)
                return
        out.host(env)

    def _discovered(self, env: Envelope, out: Out) -> None:
        assert self._init is not None
        host_id, version = self._init
        result = decoded(env.raw("result")) if env.kind == "response" else None
        chosen = classify_discover_result(result)[1]
        if chosen is None or not isinstance(result, dict):
            out.host(error_frame(host_id, INTERNAL_ERROR, (
                f"gateway bridge: upstream {self.name!r} did not answer server/discover as a "
                f"2026-07-28 server: {env.raw('error') or env.raw('result')}"), self.name))
            return
        self._version = chosen
        self._discover = result
        caps = result.get("capabilities")
        caps = {k: v for k, v in caps.items() if k != "extensions"} \
            if isinstance(caps, dict) else {}
        meta = result.get("_meta")
        info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
        answer: dict[str, Any] = {"protocolVersion": version, "capabilities": caps,
                                  "serverInfo": info if isinstance(info, dict)
                                  else {"name": self.name, "version": "unknown"}}
        if isinstance(result.get("instructions"), str):
            answer["instructions"] = result["instructions"]
        out.host(result_frame(host_id, json.dumps(answer)))

    def _round_answer(self, round_: _Round, env: Envelope, out: Out) -> None:
        assert env.id_key is not None
        if not self.ids.mine(env.id_key):
            self.link.answered(env.id_key)   # the host's own id: the host hears it below
        if env.kind == "response" and \
                decoded(member(env.raw("result"), "resultType")) == "input_required":
            self._start_round(round_, env, out)
            return
        out.host(env if env.id == round_.host_id else env.replace("id", round_.host_id))

    # ---------------------------------------------------------------- failures

    def internal_failed(self, env: Envelope, why: str, out: Out) -> None:
        key = env.id_key
        assert key is not None
        round_ = self._rounds.pop(key, None)
        if round_ is not None:
            out.host(error_frame(round_.host_id, INTERNAL_ERROR, (
                f"upstream {self.name!r} stopped while handling this request ({why}); it "
                "will be restarted on the next call"), self.name))
        elif key == self._discover_key and self._init is not None:
            out.host(error_frame(self._init[0], INTERNAL_ERROR, (
                f"gateway bridge: upstream {self.name!r} could not be asked server/discover: "
                f"{why}"), self.name))
        elif self._listen is not None and key == self._listen[0]:
            self._listen = None

    def host_call(self, env: Envelope, out: Out) -> Envelope | None:
        if env.id_key is not None:
            self._rounds.pop(env.id_key, None)
        return env

    def down(self, out: Out) -> None:
        self._listen = None
        self._relisten = True

