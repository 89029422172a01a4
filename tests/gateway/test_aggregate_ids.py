"""Request ids, progress tokens, cancellations and server-to-client requests remapped."""

from __future__ import annotations

import json
import random
import threading

import pytest

from mcpsync.gateway._aggregate import (
    DuplicateId,
    IdTable,
    PeerTable,
    TableFull,
    id_key,
    with_progress_token,
)


@pytest.mark.parametrize("raw", ['7', '"7"', '"a\\u0062"', '1.5', '-0', 'null', 'true',
                                 '{"b":1,"a":[2]}', '""'])
def test_any_json_id_maps_to_an_upstream_id_and_back_as_its_raw_text(raw: str) -> None:
    table = IdTable()
    call = table.open(raw, "up", method="tools/call")
    assert isinstance(call.upstream_id("up"), int)
    assert table.get(raw) is call
    answered = table.answered("up", call.upstream_id("up"))
    assert answered == (call, True)
    assert answered[0].host_id == raw  # written back exactly as the host spelled it
    assert len(table) == 0 and table.get(raw) is None


def test_ids_that_differ_only_in_type_stay_apart_and_spellings_of_one_id_do_not() -> None:
    table = IdTable()
    calls = [table.open(raw, "up") for raw in ('1', '"1"', 'true', '1.0')]
    assert len({c.upstream_id("up") for c in calls}) == 4
    table.open('"ab"', "up")
    with pytest.raises(DuplicateId, match="already in flight"):
        table.open('"a\\u0062"', "up")
    assert id_key('"a\\u0062"') == id_key('"ab"')


def test_the_table_is_bounded_and_frees_room_on_answer() -> None:
    table = IdTable(limit=2)
    a = table.open("1", "up")
    table.open("2", "up")
    with pytest.raises(TableFull, match="2 requests are already in flight"):
        table.open("3", "up")
    table.answered("up", a.upstream_id("up"))
    table.open("3", "up")
    assert len(table) == 2


def test_a_call_to_several_upstreams_ends_with_its_last_leg() -> None:
    table = IdTable()
    call = table.open('"list"', ["a", "b", "c"], method="tools/list")
    assert len(set(call.legs.values())) == 3
    assert table.answered("a", call.legs["a"]) == (call, False)
    assert table.answered("a", call.legs["a"]) is None  # twice: not in the table
    assert table.answered("b", call.legs["c"]) is None  # another upstream's id
    assert table.upstream_died("c") == [(call, False)]
    assert table.answered("b", call.legs["b"]) == (call, True)
    assert len(table) == 0


def test_an_unknown_or_foreign_upstream_id_is_not_routed() -> None:
    table = IdTable()
    own = table.next_id()
    call = table.open("1", "up")
    assert own != call.upstream_id("up")
    assert table.answered("up", own) is None
    assert table.answered("up", str(call.upstream_id("up"))) is None  # ids we send are ints
    assert table.answered("other", call.upstream_id("up")) is None


def test_cancel_translates_the_request_id_per_leg_and_keeps_other_members() -> None:
    table = IdTable()
    call = table.open('"q"', ["a", "b"])
    table.answered("a", call.legs["a"])
    out = table.cancel({"requestId": "q", "reason": "user", "x-new": 1})
    assert out == [("b", {"requestId": call.legs["b"], "reason": "user", "x-new": 1})]
    assert len(table) == 0
    assert table.cancel({"requestId": "q"}) == []  # crossed an answer: nothing to do
    assert table.answered("b", call.legs["b"]) is None  # a late answer is dropped


def test_upstream_death_fails_its_calls_and_leaves_the_others() -> None:
    table = IdTable()
    dead = [table.open(str(n), "dies") for n in range(3)]
    alive = table.open("10", "lives")
    assert sorted(c.host_id for c, done in table.upstream_died("dies") if done) == \
        sorted(c.host_id for c in dead)
    assert len(table) == 1 and table.get("10") is alive


def test_progress_tokens_are_remapped_and_unasked_progress_is_dropped() -> None:
    table = IdTable()
    call = table.open("1", "up", progress_token="host-tok")
    params = with_progress_token({"name": "t", "_meta": {"other": 1}}, call.upstream_id("up"))
    assert params == {"name": "t", "_meta": {"other": 1, "progressToken": call.legs["up"]}}
    note = {"progressToken": call.legs["up"], "progress": 1.50, "total": 2}
    assert table.progress("up", note) == (call, {"progressToken": "host-tok",
                                                 "progress": 1.50, "total": 2})
    quiet = table.open("2", "up")
    assert table.progress("up", {"progressToken": quiet.legs["up"], "progress": 1}) is None
    assert table.progress("up", {"progressToken": 999_999, "progress": 1}) is None
    assert table.progress("other", note) is None


def test_server_to_client_requests_route_back_to_the_call_that_caused_them() -> None:
    calls = IdTable()
    peers = PeerTable(calls)
    call = calls.open('"c1"', "up")
    peer = peers.open("up", '"s-1"')  # the only call in flight at "up"
    assert peer.cause is call
    other = calls.open('"c2"', "up")
    assert peers.open("up", "2").cause is None  # two in flight over stdio: cannot tell
    assert peers.open("up", "3", related=other.legs["up"]).cause is other
    assert peers.caused_by(call) == [peer]
    assert peers.answered(peer.host_id) is peer
    assert peer.upstream_id == '"s-1"'
    assert peers.answered(peer.host_id) is None
    with pytest.raises(DuplicateId):
        peers.open("up", "2")


def test_an_upstream_cancelling_its_request_reaches_the_host_with_the_host_side_id() -> None:
    peers = PeerTable(IdTable())
    peer = peers.open("up", "5")
    got = peers.cancel("up", {"requestId": 5, "reason": "timeout"})
    assert got == (peer, {"requestId": peer.host_id, "reason": "timeout"})
    assert len(peers) == 0
    peers.open("a", "1")
    peers.open("b", "1")  # the same id at two upstreams is two requests
    assert [p.upstream for p in peers.upstream_died("a")] == ["a"]
    assert len(peers) == 1


def test_fifty_threads_never_get_each_others_answers() -> None:
    """50 host threads, three upstreams answering in random order on their own threads."""
    table = IdTable(limit=10_000)
    upstreams = ["a", "b", "c"]
    queues: dict[str, list[tuple[int, str]]] = {u: [] for u in upstreams}
    lock = threading.Lock()
    crossed: list[str] = []
    delivered: dict[str, int] = {}
    per_thread = 200
    done_sending = threading.Event()

    def host(n: int) -> None:
        for i in range(per_thread):
            raw = json.dumps(f"t{n}-{i}") if i % 2 else str(n * 100_000 + i)
            up = upstreams[(n + i) % 3]
            call = table.open(raw, up, progress_token=raw)
            with lock:
                queues[up].append((call.upstream_id(up), raw))

    def upstream(name: str) -> None:
        rng = random.Random(name)
        while True:
            with lock:
                batch, queues[name][:] = list(queues[name]), []
            if not batch and done_sending.is_set():
                return
            rng.shuffle(batch)
            for upstream_id, expected in batch:
                prog = table.progress(name, {"progressToken": upstream_id, "progress": 1})
                got = table.answered(name, upstream_id)
                if got is None or got[0].host_id != expected or prog is None \
                        or prog[1]["progressToken"] != expected:
                    crossed.append(f"{name}:{upstream_id}->{got}")
                else:
                    with lock:
                        delivered[expected] = delivered.get(expected, 0) + 1

    hosts = [threading.Thread(target=host, args=(n,)) for n in range(50)]
    ups = [threading.Thread(target=upstream, args=(u,)) for u in upstreams]
    for t in hosts + ups:
        t.start()
    for t in hosts:
        t.join()
    done_sending.set()
    for t in ups:
        t.join()
    assert crossed == []
    assert len(delivered) == 50 * per_thread and set(delivered.values()) == {1}
    assert len(table) == 0
