"""Several upstreams as one server: the gateway's routing when its config has more than one.

Built on the aggregation helpers (``_aggregate``): tool names are exposed as
``<upstream id>__<name>`` through a :class:`NameTable` (mapped back through the table, never
by splitting), host request ids are remapped per upstream through an :class:`IdTable`, and
server-to-client requests through a :class:`PeerTable`, so ids from different upstreams never
meet. What is served so far:

- ``initialize`` (legacy) and ``server/discover`` (2026-07-28) go to every upstream; the host
  gets one answer: capabilities unioned, the gateway's own ``serverInfo``;
- ``tools/list``, ``prompts/list``, ``resources/list`` and ``resources/templates/list`` are
  merged from every upstream (one host page, a combined cursor): tool and prompt names
  prefixed through a :class:`NameTable` each, resource URIs and templates wrapped as
  ``mcpgw://<upstream>/<original>``;
- ``tools/call`` and ``prompts/get`` go to the upstream that owns the name,
  ``resources/read`` / ``subscribe`` / ``unsubscribe`` to the one whose URI it is (unwrapped),
  ``completion/complete`` by its ref (a prompt name or a resource URI). A name not listed
  yet is listed from the upstreams its prefix names first (see ``_relist``). A tool answer comes
  back with only the id changed unless it holds resource links, whose URIs are wrapped; a
  prompt or a read has its URIs wrapped;
- ``subscriptions/listen`` (2026-07-28) is split per upstream (see ``_listens``);
- ``ping`` is answered by the gateway; ``logging/setLevel`` goes to every upstream;
- notifications: ``notifications/initialized`` to every upstream, ``notifications/cancelled``
  to the upstream of that call with its id there; from upstreams, progress goes back with the
  host's token, ``resources/updated`` with its URI wrapped, notifications on a listen with
  the host's subscription id, list changes and logs pass, and server-to-client requests
  reach the host under an id of the gateway's and their answers return to the upstream
  that asked;
- any other method is answered with -32601 naming it.

An upstream that dies fails the calls it held at once, naming it; a fan-out it was part of
is answered from the others. So is one that is late: each merged request (and a listen's
acknowledgement) has a time limit (``merge_timeout``, see ``_gather``), after which the
host is answered from the upstreams that did answer and the late part is dropped (its
request cancelled, except ``initialize``, which may not be).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from mcpsync._codes import INTERNAL_ERROR, METHOD_NOT_FOUND
from mcpsync._envelope import Envelope, parse_envelope
from mcpsync._version import __version__
from mcpsync.gateway._aggregate import (
    SEP,
    Call,
    IdTable,
    NameTable,
    PeerTable,
    RouteError,
    decode_cursor,
    merge_discover,
    merge_pages,
    split_listen_filter,
    union_capabilities,
    unwrap_uri_params,
    value_key,
    wrap_contents,
    wrap_prompt_result,
    wrap_resources,
    wrap_templates,
    wrap_tool_result,
    wrap_updated,
)
from mcpsync.gateway._aggregate.spelling import dumps, loads
from mcpsync.gateway._gather import Deadlines, Gather, merge_limit
from mcpsync.gateway._guard._core import PROCESS, Caller
from mcpsync.gateway._listens import ListenAcks, host_subscription_meta
from mcpsync.gateway._relist import Relists
from mcpsync.protocol import META_SUBSCRIPTION_ID

if TYPE_CHECKING:
    from mcpsync.gateway._gateway import Gateway
    from mcpsync.gateway._upstream import Upstream

__all__ = ["Aggregator"]

_log = logging.getLogger("mcpsync.gateway")
#: The paginated lists merged from every upstream, by method: the member holding the items.
_LISTS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources",
          "resources/templates/list": "resourceTemplates"}
_FAN_OUT = frozenset({"initialize", "server/discover", "logging/setLevel", *_LISTS})
_BY_URI = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})
_LISTEN = "subscriptions/listen"


#: How a single upstream's answer is rewritten for the host, by method (URIs wrapped).
_WRAP_ANSWER = {"tools/call": wrap_tool_result, "prompts/get": wrap_prompt_result,
                "resources/read": wrap_contents}


class Aggregator:
    """The routing of a :class:`~mcpsync.gateway._gateway.Gateway` with several upstreams."""

    def __init__(self, gateway: Gateway) -> None:
        self._gw = gateway
        self._by_id = {u.id: u for u in gateway.upstreams}
        self._ids = IdTable()
        self._peers = PeerTable(self._ids)
        self._tools = NameTable("tool")
        self._prompts = NameTable("prompt")
        self._acks = ListenAcks()
        self._rewrite = {"tools": self._expose_tools, "prompts": self._expose_prompts,
                         "resources": wrap_resources, "resourceTemplates": wrap_templates}
        self._gathers: dict[str, Gather] = {}   # IdTable call key -> its gather
        self._lock = threading.Lock()
        self._merge_timeout = gateway._merge_timeout
        self._deadlines = Deadlines()   # one thread for every merged request's time limit
        self._relists = Relists(self._deadlines, self._merge_timeout)
        self._relisted: set[str] = set()   # host calls being retried after a relisting

    # ---------------------------------------------------------------- from the host

    def from_host(self, env: Envelope, caller: Caller = PROCESS) -> None:
        # ``caller``: whom the guard counts a tools/call against (see _guard)
        try:
            if env.kind == "request":
                self._host_request(env, caller)
            elif env.kind == "notification":
                self._host_notification(env)
            else:
                self._host_answer(env)
        except RouteError as exc:
            if env.kind == "request" and self._relist(env):
                return   # a name not listed yet: listed from its upstream, then retried
            self._host_leg(env)   # it reaches no upstream: the log still shows it
            if env.kind == "request" and env.id is not None:
                self._gw._write_error(env.id, exc.code, str(exc), None)
            else:
                _log.warning("dropped a frame from the host: %s", exc)

    def _host_request(self, env: Envelope, caller: Caller) -> None:
        assert env.id is not None and env.method is not None
        method = env.method
        params = self._params(env)
        if method == "ping":
            self._host_leg(env)
            self._answer_host(f'{{"jsonrpc":"2.0","id":{env.id},"result":{{}}}}')
            return
        if method in _FAN_OUT:
            self._fan_out(env, method, params)
            return
        if method == "tools/call" or method == "prompts/get":
            table = self._tools if method == "tools/call" else self._prompts
            route, routed = table.route_params(params)
            guard = self._gw._guard
            if method == "tools/call" and guard is not None and guard.screen_call(
                    env, route.upstream, route.name, routed,
                    lambda: self._send(env, route.upstream, routed), caller):
                return   # refused or held by the policy
            self._send(env, route.upstream, routed)
            return
        if method in _BY_URI:
            upstream, routed = self._by_uri(method, params)
            self._send(env, upstream, routed)
            return
        if method == "completion/complete":
            upstream, routed = self._completion(params)
            self._send(env, upstream, routed)
            return
        if method == _LISTEN:
            self._listen(env, params)
            return
        self._host_leg(env)
        self._gw._write_error(env.id, METHOD_NOT_FOUND,
                              f"the gateway does not serve {method!r} across several "
                              "upstreams", None)

    def _host_leg(self, env: Envelope) -> None:
        """Record the host's frame alone (``upstream`` null): one the gateway answers or
        drops itself, or one it sends to several upstreams (then recorded once)."""
        self._gw._record_legs("to_upstream", None, env, None)

    def _by_uri(self, method: str, params: Any) -> tuple[str, Any]:
        found = unwrap_uri_params(params, self._by_id)
        if found is None:
            uri = params.get("uri") if isinstance(params, dict) else None
            raise RouteError(f"{method}: {str(uri)[:100]!r} is not a resource URI of this "
                             "gateway (they start with mcpgw://<server>/); list the "
                             "resources again to see the current URIs")
        return found

    def _completion(self, params: Any) -> tuple[str, Any]:
        ref = params.get("ref") if isinstance(params, dict) else None
        kind = ref.get("type") if isinstance(ref, dict) else None
        if kind == "ref/prompt":
            route, routed = self._prompts.route_params(ref)
            return route.upstream, {**params, "ref": routed}
        if kind == "ref/resource":
            upstream, routed = self._by_uri("completion/complete", ref)
            return upstream, {**params, "ref": routed}
        raise RouteError(f"completion/complete: ref type {kind!r} is neither ref/prompt nor "
                         "ref/resource")

    def _listen(self, env: Envelope, params: Any) -> None:
        assert env.id is not None
        upstreams = list(self._by_id)
        wanted = params.get("notifications") if isinstance(params, dict) else None
        filters = split_listen_filter(wanted, upstreams)
        call = self._ids.open(env.id, upstreams, method=_LISTEN)
        self._acks.opened(call)
        self._deadlines.add(self._merge_timeout, lambda: self._listen_late(call))
        self._gw._record_legs("to_upstream", None, env, None)   # the host's leg, once
        for upstream in upstreams:
            sent = dict(params) if isinstance(params, dict) else {}
            sent["notifications"] = filters[upstream]
            self._submit(upstream, env, call.upstream_id(upstream), sent, host_leg=False)

    def _fan_out(self, env: Envelope, method: str, params: Any) -> None:
        assert env.id is not None
        upstreams = list(self._by_id)
        cursors: dict[str, Any] = {}
        listing = method in _LISTS
        if listing and isinstance(params, dict) and "cursor" in params:
            cursors = decode_cursor(params["cursor"], upstreams)
            upstreams = [u for u in upstreams if u in cursors]
        call = self._ids.open(env.id, upstreams, method=method)
        gather = Gather(method, env.id, set(upstreams),
                        limit=merge_limit(method, self._merge_timeout))
        gather.timer = self._deadlines.add(gather.limit, lambda: self._gather_late(call, gather))
        with self._lock:
            self._gathers[call.key] = gather
        self._gw._record_legs("to_upstream", None, env, None)   # the host's leg, once
        for upstream in upstreams:
            sent = dict(params) if isinstance(params, dict) else {}
            if upstream in cursors:
                sent["cursor"] = cursors[upstream]
            elif listing:
                sent.pop("cursor", None)
            self._submit(upstream, env, call.upstream_id(upstream), sent, host_leg=False)

    def _send(self, env: Envelope, upstream: str, params: Any) -> None:
        assert env.id is not None and env.method is not None
        meta = params.get("_meta") if isinstance(params, dict) else None
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if token is not None and isinstance(meta, dict):
            call = self._ids.open(env.id, upstream, method=env.method, progress_token=token)
            params = {**params, "_meta": {**meta, "progressToken": call.upstream_id(upstream)}}
        else:
            call = self._ids.open(env.id, upstream, method=env.method)
        self._submit(upstream, env, call.upstream_id(upstream), params)

    def _submit(self, upstream: str, env: Envelope, upstream_id: int, params: Any, *,
                host_leg: bool = True) -> None:
        """Send the host's request ``env`` to ``upstream`` under ``upstream_id``; the log's
        host leg carries the host's frame (``host_leg=False``: recorded once already, for a
        request sent to several upstreams), the upstream's leg the frame sent."""
        frame = env.replace("id", str(upstream_id))
        if params is not None:
            frame = frame.replace("params", dumps(params, ensure_ascii=False))
        target = self._by_id[upstream]
        self._gw._record_legs("to_upstream", target, env if host_leg else None, frame)
        target.submit(frame)

    def _host_notification(self, env: Envelope) -> None:
        method = env.method
        params = self._params(env)
        # Recorded once, however many upstreams it goes to (each on its own leg, with the
        # params it carries there), or none (a held call's cancellation).
        self._host_leg(env)
        if method == "notifications/cancelled":
            guard = self._gw._guard
            if guard is not None and isinstance(params, dict) and \
                    guard.cancel_held(params.get("requestId")):
                return   # a held call: no upstream has seen it
            if isinstance(params, dict) and "requestId" in params:
                self._acks.forget(value_key(params["requestId"]))
                self._forget_gather(value_key(params["requestId"]))
            for upstream, sent in self._ids.cancel(params):
                self._notify(upstream, env, sent)
            return
        for upstream in self._by_id:   # initialized, roots/list_changed, others: to each
            self._notify(upstream, env, None)

    def _notify(self, upstream: str, env: Envelope, params: Any) -> None:
        """Send a notification to ``upstream``, recorded on its leg only (the host's frame,
        if it came from the host, is recorded once by the caller)."""
        frame = env if params is None else env.replace("params", dumps(params))
        target = self._by_id[upstream]
        self._gw._record_legs("to_upstream", target, None, frame)
        target.submit(frame)

    def _host_answer(self, env: Envelope) -> None:
        if env.id_key is None:
            self._host_leg(env)   # an answer to no request (id null): dropped, but seen
            return
        peer = self._peers.answered(json.loads(env.id or "null"))
        if peer is None:
            _log.warning("the host answered an id the gateway did not send: %s", env.id)
            self._host_leg(env)
            return
        target = self._by_id[peer.upstream]
        frame = env.replace("id", peer.upstream_id)
        self._gw._record_legs("to_upstream", target, env, frame)
        target.submit(frame)

    # ---------------------------------------------------------------- from an upstream

    def from_upstream(self, upstream: Upstream, env: Envelope) -> None:
        if env.kind in ("response", "error"):
            self._upstream_answer(upstream, env)
        elif env.kind == "request":
            assert env.id is not None
            peer = self._peers.open(upstream.id, env.id)
            self._to_host(upstream, env.replace("id", json.dumps(peer.host_id)), received=env)
        else:
            self._upstream_notification(upstream, env)

    def _upstream_answer(self, upstream: Upstream, env: Envelope) -> None:
        if env.id_key is None:
            return
        upstream_id = json.loads(env.id or "null")
        answered = self._ids.answered(upstream.id, upstream_id)
        if answered is None:   # a call already failed or cancelled, a replayed initialize,
            # or the gateway's own list: logged on the upstream's leg only
            self._gw._record_legs("to_host", upstream, env, None)
            self._relists.answered(upstream.id, upstream_id,
                                   None if env.kind == "error"
                                   else loads(env.raw("result") or "null"))
            return
        call, done = answered
        with self._lock:
            gather = self._gathers.get(call.key)
        if gather is None:
            self._routed_answer(upstream, env, call, done)
            return
        self._gw._record_legs("to_host", upstream, env, None)   # one part of a merged answer
        result = loads(env.raw("result") or "null")
        if env.kind == "error":
            gather.errors[upstream.id] = str(json.loads(env.raw("error") or "null"))
        else:
            gather.results[upstream.id] = result
        self._gather_step(call, gather, upstream.id, done)

    def _gather_step(self, call: Call, gather: Gather, upstream: str, done: bool) -> None:
        with self._lock:
            gather.waiting.discard(upstream)
            if gather.waiting and not done:
                return
            if self._gathers.get(call.key) is not gather:
                return   # answered already: its time limit passed
            del self._gathers[call.key]
        if gather.timer is not None:
            gather.timer.cancel()
        self._answer_gather(gather)

    def _forget_gather(self, key: str) -> None:
        """The host cancelled a merged request: it gets no answer, late or not."""
        with self._lock:
            gather = self._gathers.pop(key, None)
        if gather is not None and gather.timer is not None:
            gather.timer.cancel()

    def _gather_late(self, call: Call, gather: Gather) -> None:
        """The time limit of a merged request passed (on the deadlines thread): answer the
        host from the upstreams that did answer; drop and cancel the late parts."""
        with self._lock:
            if self._gathers.get(call.key) is not gather:
                return   # answered, or cancelled by the host
            del self._gathers[call.key]
            late = sorted(gather.waiting)
        reason = f"no answer within {gather.limit:g} s"
        # Out of the id table: a late answer finds no call there and is dropped.
        legs = self._ids.cancel({"requestId": json.loads(call.host_id),
                                 "reason": f"the gateway stopped waiting: {reason}"})
        if gather.method != "initialize":   # the one request that must not be cancelled
            for upstream, params in legs:
                self._notify(upstream, _cancelled(params), None)
        for upstream in late:
            gather.errors[upstream] = f"{reason}; its answer will be dropped"
        self._answer_gather(gather)

    def _listen_late(self, call: Call) -> None:
        """The time limit of a listen's acknowledgement passed: acknowledge what the others
        honour; the late legs are cancelled, so nothing they say reaches the host."""
        for upstream in self._acks.late(call):
            answered = self._ids.answered(upstream, call.upstream_id(upstream))
            _log.warning("upstream %r did not acknowledge subscriptions/listen within %g s; "
                         "the host listens without it", upstream, self._merge_timeout)
            ack = self._acks.leg_gone(call, upstream)
            if answered is not None:
                self._notify(upstream, _cancelled({"requestId": call.upstream_id(upstream)}),
                             None)
            if ack is not None:
                self._ack_to_host(self._by_id[upstream], ack)
            if answered is not None and answered[1]:
                self._gw._write_error(call.host_id, INTERNAL_ERROR,
                                      "subscriptions/listen: no upstream acknowledged it "
                                      f"within {self._merge_timeout:g} s", None)

    def _relist(self, env: Envelope) -> bool:
        """A ``tools/call`` or ``prompts/get`` by a name the gateway has not listed (a host
        that kept the names of an earlier gateway): list the upstreams whose id prefixes it,
        then route the call again (once). ``False`` when there is nothing to list."""
        method = env.method
        if method not in ("tools/call", "prompts/get") or env.id is None \
                or env.id_key is None:
            return False
        params = self._params(env)
        name = params.get("name") if isinstance(params, dict) else None
        key = str(env.id_key)
        if not isinstance(name, str) or key in self._relisted:
            return False
        owners = [u for u in self._by_id if name.startswith(u + SEP)]
        if not owners:
            return False
        self._relisted.add(key)
        list_method = "tools/list" if method == "tools/call" else "prompts/list"
        meta = params.get("_meta") if isinstance(params, dict) else None
        sent: dict[str, Any] = {}
        if isinstance(meta, dict):   # 2026-07-28: the request's own protocol metadata
            kept = {k: v for k, v in meta.items() if k != "progressToken"}
            if kept:
                sent["_meta"] = kept
        text = dumps(sent, ensure_ascii=False)

        def send(upstream: str, n: int) -> None:
            frame = parse_envelope(f'{{"jsonrpc":"2.0","id":{n},"method":"{list_method}",'
                                   f'"params":{text}}}')
            # the gateway's own request: no host leg
            self._gw._record_legs("to_upstream", self._by_id[upstream], None, frame)
            self._by_id[upstream].submit(frame)

        def done(results: dict[str, Any]) -> None:
            expose = self._expose_tools if method == "tools/call" else self._expose_prompts
            for upstream, result in results.items():
                expose(upstream, result)   # the names enter the table
            try:
                self.from_host(env)
            finally:
                self._relisted.discard(key)

        self._relists.start({u: self._ids.next_id() for u in owners}, send, done)
        return True

    def close(self, deadline: float | None) -> list[threading.Thread]:
        """Stop the time limits' thread; the threads still alive at ``deadline``."""
        return self._deadlines.close(deadline)

    def _answer_gather(self, gather: Gather) -> None:
        results = gather.results
        if not results:
            why = "; ".join(f"{u}: {e}" for u, e in gather.errors.items()) or "no upstream"
            error = json.dumps({"code": INTERNAL_ERROR,
                                "message": f"no upstream answered {gather.method}: {why}"})
            self._answer_host(f'{{"jsonrpc":"2.0","id":{gather.host_id},"error":{error}}}')
            return
        for upstream, error in gather.errors.items():
            _log.warning("upstream %r failed %s: %s", upstream, gather.method, error)
        body: Any
        if gather.method == "initialize":
            versions = sorted({str(r.get("protocolVersion")) for r in results.values()
                               if isinstance(r, dict)})
            body = {"protocolVersion": versions[0] if versions else "",
                    "capabilities": union_capabilities(
                        r.get("capabilities") for r in results.values() if isinstance(r, dict)),
                    "serverInfo": {"name": "mcpsync-gateway", "version": __version__}}
            if len(versions) > 1:
                _log.warning("the upstreams answered different revisions (%s); the host is "
                             "offered %s", ", ".join(versions), versions[0])
        elif gather.method == "server/discover":
            body = merge_discover(results, server_info={"name": "mcpsync-gateway",
                                                        "version": __version__})
        elif gather.method in _LISTS:
            key = _LISTS[gather.method]
            pages = [(u, results[u]) for u in self._by_id if u in results]
            body = merge_pages(key, pages, self._rewrite[key])
        else:
            body = {}
        text = dumps(body, ensure_ascii=False)
        self._answer_host(f'{{"jsonrpc":"2.0","id":{gather.host_id},"result":{text}}}')

    def _answer_host(self, text: str) -> None:
        """A merged answer the gateway made: on the host's leg of the log, then written."""
        inspector = self._gw.inspector
        if inspector is not None and inspector.enabled:   # parsed for the log only
            self._gw._record_legs("to_host", None, None, parse_envelope(text))
        self._gw._write_host(text.encode())

    def _expose_tools(self, upstream: str, result: Any) -> Any:
        exposed = self._tools.expose_list(upstream, result, "tools")
        guard = self._gw._guard
        if guard is None:
            return exposed
        return guard.filter_tools(upstream, exposed, self._tools.resolve)

    def _expose_prompts(self, upstream: str, result: Any) -> Any:
        return self._prompts.expose_list(upstream, result, "prompts")

    def _routed_answer(self, upstream: Upstream, env: Envelope, call: Call, done: bool) -> None:
        """The answer of a call that went to one upstream (or of one listen leg)."""
        if call.method == _LISTEN:
            ack = self._acks.leg_gone(call, upstream.id)
            if ack is not None:
                self._ack_to_host(upstream, ack)
            if not done:
                return   # the host hears how its listen ended when every leg has
        frame = env.replace("id", call.host_id)
        if call.method == "tools/call" and self._gw._guard is not None:
            frame = self._gw._guard.answer_to_host(frame)   # the call's wall time
        if env.kind == "response":
            raw = env.raw("result") or "null"
            wrap = _WRAP_ANSWER.get(call.method)
            if wrap is not None and (call.method != "tools/call" or '"resource' in raw):
                text = dumps(wrap(upstream.id, loads(raw)), ensure_ascii=False)
                frame = frame.replace("result", text)
        self._to_host(upstream, frame, received=env)

    def _ack_to_host(self, upstream: Upstream, params: dict[str, Any]) -> None:
        text = json.dumps({"jsonrpc": "2.0",
                           "method": "notifications/subscriptions/acknowledged",
                           "params": params}, ensure_ascii=False)
        self._to_host(upstream, parse_envelope(text))

    def _upstream_notification(self, upstream: Upstream, env: Envelope) -> None:
        method = env.method
        params = self._params(env)
        if method == "notifications/progress":
            routed = self._ids.progress(upstream.id, params)
            if routed is not None:   # each leg with its own token: the upstream's, the host's
                self._to_host(upstream, env.replace("params", dumps(routed[1])), received=env)
            else:
                self._dropped(upstream, env)
            return
        if method == "notifications/cancelled":
            cancelled = self._peers.cancel(upstream.id, params)
            if cancelled is not None:
                self._to_host(upstream, env.replace("params", dumps(cancelled[1])),
                              received=env)
            else:
                self._dropped(upstream, env)
            return
        if method == "notifications/resources/updated" and isinstance(params, dict):
            params = wrap_updated(upstream.id, params)
            env = env.replace("params", dumps(params, ensure_ascii=False))
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and META_SUBSCRIPTION_ID in meta:
            assert isinstance(params, dict)
            call = self._ids.leg(upstream.id, meta[META_SUBSCRIPTION_ID])
            if call is None:
                self._dropped(upstream, env)
                return   # a listen the host has cancelled
            if method == "notifications/subscriptions/acknowledged":
                ack = self._acks.acknowledged(call, upstream.id, params)
                if ack is not None:
                    self._ack_to_host(upstream, ack)
                return
            env = env.replace("params", dumps(host_subscription_meta(call, params),
                                              ensure_ascii=False))
        self._to_host(upstream, env)   # list changes, logs, and what the gateway does not know

    def _dropped(self, upstream: Upstream, env: Envelope) -> None:
        """A frame from ``upstream`` the gateway does not pass on (progress or a
        cancellation for a call no longer known): its ``upstream->gateway`` record only."""
        self._gw._record_legs("to_host", upstream, env, None)

    def _to_host(self, upstream: Upstream, env: Envelope, received: Envelope | None = None
                 ) -> None:
        """Write ``env`` to the host; ``received``: the upstream's frame it was rewritten
        from (its id), which the log's upstream leg carries."""
        if received is None:
            self._gw._record("to_host", upstream, env, None)
        else:
            self._gw._record_legs("to_host", upstream, received, env)
        self._gw._write_host(env.to_bytes())

    # ---------------------------------------------------------------- failures

    def upstream_down(self, upstream: Upstream, why: str) -> None:
        self._peers.upstream_died(upstream.id)
        for call, done in self._ids.upstream_died(upstream.id):
            with self._lock:
                gather = self._gathers.get(call.key)
            if gather is not None:
                gather.errors[upstream.id] = f"it stopped ({why})"
                self._gather_step(call, gather, upstream.id, done)
                continue
            if call.method == _LISTEN:
                ack = self._acks.leg_gone(call, upstream.id)
                if ack is not None:
                    self._ack_to_host(upstream, ack)
            if done:
                self._gw._write_error(call.host_id, INTERNAL_ERROR,
                                      f"upstream {upstream.id!r} stopped while handling this "
                                      f"request ({why}); it will be restarted on the next "
                                      "call", upstream)

    def call_failed(self, upstream: Upstream, env: Envelope, why: str) -> None:
        """A frame to ``upstream`` was refused or failed below JSON-RPC: answer the host."""
        if env.id_key is None:
            return
        answered = self._ids.answered(upstream.id, json.loads(env.id or "null"))
        if answered is None:
            return
        call, done = answered
        with self._lock:
            gather = self._gathers.get(call.key)
        if gather is not None:
            gather.errors[upstream.id] = why
            self._gather_step(call, gather, upstream.id, done)
        else:
            self._gw._write_error(call.host_id, INTERNAL_ERROR, why, upstream)

    @staticmethod
    def _params(env: Envelope) -> Any:
        raw = env.raw("params")
        return None if raw is None else loads(raw)



def _cancelled(params: dict[str, Any]) -> Envelope:
    """A ``notifications/cancelled`` frame with ``params``."""
    return parse_envelope(json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                      "params": params}))
