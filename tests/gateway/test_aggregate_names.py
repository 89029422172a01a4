"""Exposed tool and prompt names: prefixed, always valid, stable, and mapped back by table."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings, strategies as st

from mcpsync.gateway._aggregate import (
    NAME_RULE,
    SEP,
    NameTable,
    Route,
    RouteError,
    assign_names,
    exposed_name,
)
from mcpsync.manager._types import SEP as MANAGER_SEP


def test_the_separator_is_the_managers() -> None:
    assert SEP is MANAGER_SEP
    assert exposed_name("docs", "search") == "docs__search"


def test_odd_characters_are_replaced_and_the_name_carries_a_hash() -> None:
    name = exposed_name("my server", "get.weather")
    assert NAME_RULE.match(name)
    assert name.startswith("my_server__get_weather-")
    assert len(name) == len("my_server__get_weather-") + 8
    # The hash tells apart names that replacing characters would merge.
    assert exposed_name("a", "x.y") != exposed_name("a", "x_y") == "a__x_y"
    assert exposed_name("a", "x.y") != exposed_name("a", "x/y")


def test_a_long_name_gets_a_stable_short_form() -> None:
    long = "t" * 100
    first = exposed_name("up", long)
    assert len(first) == 64 and NAME_RULE.match(first)
    assert first == exposed_name("up", long)
    assert first[:55] == ("up__" + long)[:55]
    assert exposed_name("up", long + "x") != first


def test_an_empty_tool_name_still_makes_a_valid_name() -> None:
    assert NAME_RULE.match(exposed_name("", ""))


def test_upstream_ids_holding_the_separator_do_not_steal_each_others_names() -> None:
    table = assign_names({"a__b": ["c"], "a": ["b__c"]})
    assert "a__b__c" not in table  # neither gets the spelling both want
    assert sorted(table.values(), key=lambda r: r.upstream) == [Route("a", "b__c"),
                                                                 Route("a__b", "c")]
    assert all(NAME_RULE.match(n) for n in table)


def test_resolution_does_not_depend_on_arrival_order() -> None:
    one = NameTable()
    one.update("a__b", ["c"])
    one.update("a", ["b__c", "d"])
    two = NameTable()
    two.update("a", ["d", "b__c"])
    two.update("a__b", ["c"])
    assert one.names() == two.names()


def test_a_spelling_given_out_keeps_leading_to_the_same_tool_after_a_clash() -> None:
    table = NameTable()
    table.update("a__b", ["c"])
    assert table.resolve("a__b__c") == Route("a__b", "c")
    table.update("a", ["b__c"])  # now a clash: both move to the hash form
    assert table.expose("a__b", "c") != "a__b__c"
    assert table.resolve("a__b__c") == Route("a__b", "c")  # the old spelling is retired
    assert table.resolve(table.expose("a", "b__c") or "") == Route("a", "b__c")


def test_a_removed_tool_stays_resolvable_to_its_upstream() -> None:
    table = NameTable()
    table.update("up", ["old", "kept"])
    table.update("up", ["kept", "new"])
    assert table.expose("up", "old") is None
    assert table.resolve("up__old") == Route("up", "old")
    assert set(table.names()) == {"up__kept", "up__new"}
    table.remove("up")
    assert table.names() == {}
    assert table.resolve("up__kept") == Route("up", "kept")


def test_retired_spellings_are_bounded() -> None:
    table = NameTable(keep_retired=3)
    for n in range(6):
        table.update("up", [f"t{n}"])
    assert table.resolve("up__t5") == Route("up", "t5")
    assert [table.resolve(f"up__t{n}") is not None for n in range(5)] == [
        False, False, True, True, True]


def test_expose_list_renames_items_and_keeps_everything_else() -> None:
    table = NameTable()
    page = {"tools": [{"name": "echo", "x-extra": 1.5, "inputSchema": {}}, "junk"],
            "nextCursor": "c2", "future": {"a": 1}}
    view = table.expose_list("srv", page, "tools")
    assert view == {"tools": [{"name": "srv__echo", "x-extra": 1.5, "inputSchema": {}},
                              "junk"], "nextCursor": "c2", "future": {"a": 1}}
    assert page["tools"][0]["name"] == "echo"  # the input is not changed
    table.expose_list("srv", {"tools": [{"name": "two"}]}, "tools")  # a second page adds
    assert set(table.names()) == {"srv__echo", "srv__two"}


def test_route_params_maps_back_and_refuses_unknown_names() -> None:
    table = NameTable("prompt")
    table.update("up", ["greet.me"])
    exposed = table.expose("up", "greet.me")
    assert exposed is not None
    route, params = table.route_params({"name": exposed, "arguments": {"a": "b"}})
    assert route == Route("up", "greet.me")
    assert params == {"name": "greet.me", "arguments": {"a": "b"}}
    with pytest.raises(RouteError, match=r"no prompt named 'up__nope'.*list the prompts"):
        table.route_params({"name": "up__nope"})
    with pytest.raises(RouteError, match="no prompt name"):
        table.route_params({})


def test_lookups_during_rebuilds_never_see_a_half_built_table() -> None:
    table = NameTable()
    table.update("up", ["stay"])
    stop = threading.Event()
    errors: list[str] = []

    def rebuild() -> None:
        for n in range(300):
            table.update("other", [f"x{n}", f"y{n}"])
        stop.set()

    def read() -> None:
        while not stop.is_set():
            if table.resolve("up__stay") != Route("up", "stay"):
                errors.append("lost")

    threads = [threading.Thread(target=rebuild), threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


_ids = st.text(min_size=0, max_size=30)
_names = st.text(min_size=0, max_size=90)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_ids, st.lists(_names, max_size=6), max_size=5))
def test_every_name_is_valid_unique_and_maps_back(names: dict[str, list[str]]) -> None:
    table = assign_names(names)
    assert all(NAME_RULE.match(n) for n in table)
    expected = {(u, n) for u, ns in names.items() for n in ns}
    assert {(r.upstream, r.name) for r in table.values()} == expected
    assert len(table) == len(expected)


@settings(max_examples=200, deadline=None)
@given(_ids, _names)
def test_a_name_that_needs_no_change_is_kept_verbatim(upstream: str, name: str) -> None:
    raw = f"{upstream}__{name}"
    assert (exposed_name(upstream, name) == raw) == bool(NAME_RULE.match(raw))
