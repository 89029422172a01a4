"""Resource URIs and templates rewritten per upstream and mapped back, on every path."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from mcpsync.gateway._aggregate import (
    SCHEME,
    split_listen_filter,
    unwrap_uri,
    unwrap_uri_params,
    wrap_contents,
    wrap_listen_filter,
    wrap_prompt_result,
    wrap_resources,
    wrap_templates,
    wrap_tool_result,
    wrap_updated,
    wrap_uri,
)
from mcpsync.server._uritemplate import UriTemplate, expand_template

ODD = [
    "file:///",
    "file:///home/me/notes.md",
    "https://example.com/a/b?x=1&y=%2F#frag",
    "db://table?select=*#",
    "urn:isbn:0451450523",
    "café://résumé/ünïcode/文件?q=✓#片段",
    "mcpgw://nested/file:///x",
    "",
    "no scheme at all / spaces %zz",
    "a//b///c?#",
]


@pytest.mark.parametrize("uri", ODD)
@pytest.mark.parametrize("upstream", ["files", "my server", "a/b", "ünï", "", "x%2Fy"])
def test_odd_uris_round_trip(upstream: str, uri: str) -> None:
    wrapped = wrap_uri(upstream, uri)
    assert wrapped.startswith(f"{SCHEME}://")
    assert unwrap_uri(wrapped) == (upstream, uri)
    assert unwrap_uri(wrapped, [upstream, "other"]) == (upstream, uri)


def test_the_same_uri_at_two_upstreams_becomes_two_uris() -> None:
    assert wrap_uri("a", "file:///x") != wrap_uri("b", "file:///x")


def test_a_uri_not_made_by_the_gateway_is_refused() -> None:
    assert unwrap_uri("file:///x") is None
    assert unwrap_uri("mcpgw://only-authority") is None
    assert unwrap_uri("mcpgw://%FF/x") is None  # not UTF-8
    assert unwrap_uri(wrap_uri("gone", "file:///x"), ["here"]) is None


def test_a_lowercased_authority_still_finds_its_upstream_when_unambiguous() -> None:
    uri = wrap_uri("Docs", "file:///x").replace("Docs", "docs")
    assert unwrap_uri(uri, ["Docs", "other"]) == ("Docs", "file:///x")
    assert unwrap_uri(uri, ["Docs", "DOCS"]) is None


@pytest.mark.parametrize(("template", "values"), [
    ("file:///logs/{name}", {"name": "a b"}),
    ("{+base}/x{?q,lang}", {"base": "https://h/p", "q": "ü?", "lang": "en"}),
    ("db://{table}{/id*}{#frag}", {"table": "t", "id": ["1", "2"], "frag": "f"}),
    ("weather://{city}/{day}{;unit}", {"city": "Zürich", "day": "mon", "unit": "C"}),
])
@pytest.mark.parametrize("upstream", ["weather", "my {odd} id"])
def test_templates_stay_templates_whose_expansion_maps_back(
        upstream: str, template: str, values: dict[str, object]) -> None:
    wrapped = wrap_uri(upstream, template)
    expanded = expand_template(wrapped, values)
    assert expanded == wrap_uri(upstream, expand_template(template, values))
    assert unwrap_uri(expanded) == (upstream, expand_template(template, values))


def test_a_wrapped_template_matches_as_the_original_does() -> None:
    template = "file:///logs/{name}{?tail}"
    wrapped = UriTemplate(wrap_uri("logs", template))
    uri = wrap_uri("logs", "file:///logs/app.log?tail=20")
    assert wrapped.match(uri) == UriTemplate(template).match("file:///logs/app.log?tail=20")


def test_list_results_keep_every_other_member() -> None:
    page = {"resources": [{"uri": "file:///a", "name": "a", "x-new": [1.50]}, {"name": "no"}],
            "nextCursor": "n", "ttlMs": 5}
    assert wrap_resources("u", page) == {
        "resources": [{"uri": "mcpgw://u/file:///a", "name": "a", "x-new": [1.50]},
                      {"name": "no"}], "nextCursor": "n", "ttlMs": 5}
    assert page["resources"][0]["uri"] == "file:///a"
    templates = {"resourceTemplates": [{"uriTemplate": "t://{x}", "name": "t"}]}
    assert wrap_templates("u", templates)["resourceTemplates"][0]["uriTemplate"] == \
        "mcpgw://u/t://{x}"
    assert wrap_resources("u", {"weird": True}) == {"weird": True}


def test_read_results_tool_results_and_prompts_point_back_through_the_gateway() -> None:
    read = {"contents": [{"uri": "file:///d/1", "text": "x"}, {"uri": "file:///d/2",
                                                               "blob": "AA=="}]}
    assert [c["uri"] for c in wrap_contents("u", read)["contents"]] == [
        "mcpgw://u/file:///d/1", "mcpgw://u/file:///d/2"]
    tool = {"content": [{"type": "text", "text": "see"},
                        {"type": "resource_link", "uri": "file:///r", "name": "r"},
                        {"type": "resource", "resource": {"uri": "file:///e", "text": "t"}}],
            "isError": False}
    got = wrap_tool_result("u", tool)
    assert got["content"][0] == tool["content"][0]
    assert got["content"][1]["uri"] == "mcpgw://u/file:///r"
    assert got["content"][2]["resource"]["uri"] == "mcpgw://u/file:///e"
    prompt = {"messages": [{"role": "user", "content": {"type": "resource_link",
                                                        "uri": "file:///p", "name": "p"}}]}
    assert wrap_prompt_result("u", prompt)["messages"][0]["content"]["uri"] == \
        "mcpgw://u/file:///p"


def test_read_subscribe_and_unsubscribe_params_map_back() -> None:
    params = {"uri": wrap_uri("b", "file:///x?y#z"), "_meta": {"k": 1}}
    assert unwrap_uri_params(params, ["a", "b"]) == ("b", {"uri": "file:///x?y#z",
                                                            "_meta": {"k": 1}})
    assert unwrap_uri_params({"uri": "file:///x"}, ["a"]) is None
    assert unwrap_uri_params({}, ["a"]) is None


def test_updated_notifications_are_rewritten() -> None:
    assert wrap_updated("a", {"uri": "file:///x", "title": "t"}) == {
        "uri": "mcpgw://a/file:///x", "title": "t"}


def test_a_listen_filter_is_split_per_upstream_and_acknowledged_back() -> None:
    host = {"toolsListChanged": True, "x-future": 1,
            "resourceSubscriptions": [wrap_uri("a", "file:///1"), wrap_uri("b", "db://2"),
                                      wrap_uri("a", "file:///3"), "file:///nobody", 7]}
    split = split_listen_filter(host, ["a", "b", "c"])
    assert split == {
        "a": {"toolsListChanged": True, "x-future": 1,
              "resourceSubscriptions": ["file:///1", "file:///3"]},
        "b": {"toolsListChanged": True, "x-future": 1, "resourceSubscriptions": ["db://2"]},
        "c": {"toolsListChanged": True, "x-future": 1},
    }
    ack = wrap_listen_filter("a", {"resourceSubscriptions": ["file:///1"]})
    assert ack == {"resourceSubscriptions": [wrap_uri("a", "file:///1")]}
    assert split_listen_filter(None, ["a"]) == {"a": {}}


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=20), st.text(max_size=80))
def test_any_uri_round_trips(upstream: str, uri: str) -> None:
    assert unwrap_uri(wrap_uri(upstream, uri), [upstream]) == (upstream, uri)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20),
       st.text(alphabet=st.sampled_from(list("azAZ09:/?#[]@!$&()*+,;=-._~%20üé文")),
               max_size=40).map(lambda s: s.replace("%", "%25")),
       st.text(alphabet=st.characters(codec="utf-8"), max_size=20))
def test_template_expansion_commutes_with_the_prefix(upstream: str, literal: str,
                                                     value: str) -> None:
    template = literal + "{+v}/{w}"
    expected = expand_template(template, {"v": value, "w": value})
    wrapped = expand_template(wrap_uri(upstream, template), {"v": value, "w": value})
    assert wrapped == wrap_uri(upstream, expected)
    assert unwrap_uri(wrapped) == (upstream, expected)
