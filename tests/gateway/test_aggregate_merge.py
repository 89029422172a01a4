"""Lists merged behind one cursor, capabilities unioned, discover merged, Mcp-Name kept true."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from mcpsync.gateway._aggregate import (
    NameTable,
    RouteError,
    decode_cursor,
    encode_cursor,
    mcp_name_header,
    merge_cache_hints,
    merge_discover,
    merge_pages,
    union_capabilities,
    wrap_resources,
    wrap_uri,
)


def _pages(upstreams: dict[str, list[list[str]]], cursor: Any) -> tuple[dict[str, Any], Any]:
    """One host page, asking each upstream for the page its cursor names (pages by index)."""
    asks = decode_cursor(cursor, list(upstreams))
    pages = []
    for up, at in asks.items():
        index = 0 if at is None else int(at)
        result: dict[str, Any] = {"tools": [{"name": n} for n in upstreams[up][index]]}
        if index + 1 < len(upstreams[up]):
            result["nextCursor"] = str(index + 1)
        pages.append((up, result))
    table = NameTable()
    merged = merge_pages("tools", pages, lambda up, r: table.expose_list(up, r, "tools"))
    return merged, merged.get("nextCursor")


def test_a_host_walks_every_upstreams_pages_through_one_cursor() -> None:
    ups = {"a": [["a1", "a2"], ["a3"], ["a4"]], "b": [["b1"]], "c": [["c1"], ["c2"]]}
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        merged, cursor = _pages(ups, cursor)
        pages += 1
        seen += [t["name"] for t in merged["tools"]]
        if cursor is None:
            break
        assert isinstance(cursor, str) and "a" not in cursor.split(".", 1)[0]
    assert pages == 3
    assert seen == ["a__a1", "a__a2", "b__b1", "c__c1", "a__a3", "c__c2", "a__a4"]


def test_a_bad_cursor_is_refused_with_invalid_params() -> None:
    for bad in ["nope", "gw1.!!!", "gw1." + base64.urlsafe_b64encode(b'{"a":1}').decode(), 7]:
        with pytest.raises(RouteError, match="not made by this gateway") as info:
            decode_cursor(bad, ["a"])
        assert info.value.code == -32602


def test_a_cursor_naming_a_removed_upstream_skips_it() -> None:
    cursor = encode_cursor({"gone": "x", "a": "y"})
    assert decode_cursor(cursor, ["a", "b"]) == {"a": "y"}
    assert decode_cursor(None, ["a", "b"]) == {"a": None, "b": None}
    assert encode_cursor({}) is None


def test_merge_carries_a_failed_upstream_and_merges_cache_hints() -> None:
    pages = [("a", {"resources": [{"uri": "file:///1"}], "resultType": "complete",
                    "ttlMs": 5000, "cacheScope": "public", "x-a": 1}),
             ("b", {"resources": [], "ttlMs": 200, "cacheScope": "public"})]
    merged = merge_pages("resources", pages, wrap_resources, carry={"c": None})
    assert merged["resources"] == [{"uri": wrap_uri("a", "file:///1")}]
    assert merged["ttlMs"] == 200 and merged["cacheScope"] == "public"
    assert merged["resultType"] == "complete" and "x-a" not in merged
    assert decode_cursor(merged["nextCursor"], ["a", "b", "c"]) == {"c": None}
    legacy = merge_pages("resources", [("a", {"resources": []})], wrap_resources)
    assert legacy == {"resources": []}


def test_cache_hints_take_the_strictest_part() -> None:
    assert merge_cache_hints([{"ttlMs": 10, "cacheScope": "public"},
                              {"ttlMs": 99, "cacheScope": "private"}]) == {
        "ttlMs": 10, "cacheScope": "private"}
    assert merge_cache_hints([{"ttlMs": 10, "cacheScope": "public"}, {}]) == {
        "ttlMs": 0, "cacheScope": "private"}
    assert merge_cache_hints([{"ttlMs": -5, "cacheScope": "public"}])["ttlMs"] == 0
    assert merge_cache_hints([{}, {"x": 1}]) == {}


def test_capabilities_are_unioned_deeply() -> None:
    merged = union_capabilities([
        {"tools": {"listChanged": False}, "logging": {}, "experimental": {"x": {"a": 1}}},
        {"tools": {"listChanged": True}, "resources": {"subscribe": True},
         "experimental": {"x": {"b": 2}, "y": {}}},
        None,
        {"resources": {"listChanged": True, "subscribe": False}},
    ])
    assert merged == {"tools": {"listChanged": True}, "logging": {},
                      "experimental": {"x": {"a": 1, "b": 2}, "y": {}},
                      "resources": {"subscribe": True, "listChanged": True}}


def test_discover_results_merge_as_the_strictest_upstream_allows() -> None:
    merged = merge_discover({
        "a": {"resultType": "complete", "supportedVersions": ["2026-07-28", "2027-01-01"],
              "capabilities": {"tools": {}}, "ttlMs": 60000, "cacheScope": "public",
              "instructions": "Use a for files."},
        "b": {"resultType": "complete", "supportedVersions": ["2027-01-01", "2026-07-28",
                                                              "2099-01-01"],
              "capabilities": {"prompts": {"listChanged": True}}, "ttlMs": 1000,
              "cacheScope": "private"},
    }, server_info={"name": "mcpsync-gateway", "version": "1"})
    assert merged == {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28", "2027-01-01"],
        "capabilities": {"tools": {}, "prompts": {"listChanged": True}},
        "instructions": "a: Use a for files.",
        "ttlMs": 1000, "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "mcpsync-gateway",
                                                         "version": "1"}},
    }
    none = merge_discover({"a": {"supportedVersions": ["x"]}, "b": {"supportedVersions": []}})
    assert none["supportedVersions"] == [] and none["ttlMs"] == 0


def test_mcp_name_follows_the_rewritten_body() -> None:
    table = NameTable()
    table.update("up", ["café"])
    exposed = table.expose("up", "café")
    assert exposed is not None
    _, params = table.route_params({"name": exposed})
    assert mcp_name_header("tools/call", params) == "=?base64?" + base64.b64encode(
        "café".encode()).decode() + "?="
    assert mcp_name_header("prompts/get", {"name": "plain"}) == "plain"
    assert mcp_name_header("resources/read", {"uri": "file:///x"}) == "file:///x"
    assert mcp_name_header("tasks/get", {"taskId": "t1"}) == "t1"
    assert mcp_name_header("tools/list", {"name": "x"}) is None
    assert mcp_name_header("tools/call", {}) is None


_cursors = st.dictionaries(st.text(max_size=20),
                           st.one_of(st.none(), st.text(max_size=40), st.integers()),
                           max_size=6)


@settings(max_examples=300, deadline=None)
@given(_cursors)
def test_cursors_round_trip_and_stay_ascii(cursors: dict[str, Any]) -> None:
    cursor = encode_cursor(cursors)
    if not cursors:
        assert cursor is None
        return
    assert cursor is not None and cursor.isascii()
    assert decode_cursor(cursor, list(cursors)) == cursors
