"""The WWW-Authenticate parser: the grammar, tolerated breakage, never raising."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings, strategies as st

from mcpauth.challenge import Challenge, parse_challenges, select_challenge


def one(value: str) -> Challenge:
    found = parse_challenges([value])
    assert len(found) == 1, found
    return found[0]


def test_bearer_with_rfc9728_and_rfc6750_params() -> None:
    c = one('Bearer resource_metadata="https://mcp.example.com/.well-known/'
            'oauth-protected-resource", scope="files:read files:write", '
            'error="insufficient_scope", error_description="need write", '
            'error_uri="https://docs.example/e"')
    assert c.scheme == "bearer"
    assert c.resource_metadata == ("https://mcp.example.com/.well-known/"
                                   "oauth-protected-resource")
    assert c.scopes == ["files:read", "files:write"]
    assert c.error == "insufficient_scope"
    assert c.error_description == "need write"
    assert c.error_uri == "https://docs.example/e"
    assert c.token68 is None


def test_bare_scheme() -> None:
    c = one("Bearer")
    assert c == Challenge("bearer")
    assert c.scopes == [] and c.error is None and c.resource_metadata is None


def test_several_challenges_in_one_value() -> None:
    found = parse_challenges(['Basic realm="simple", Newauth realm="apps", type=1, '
                              'title="Login to \\"apps\\"", Bearer scope="a b"'])
    assert [c.scheme for c in found] == ["basic", "newauth", "bearer"]
    assert found[0].params == {"realm": "simple"}
    assert found[1].params == {"realm": "apps", "type": "1", "title": 'Login to "apps"'}
    assert found[2].scopes == ["a", "b"]


def test_challenges_across_values_keep_order() -> None:
    found = parse_challenges(['DPoP algs="ES256 PS256", error="use_dpop_nonce"',
                              "Basic realm=x", 'Bearer error="invalid_token"'])
    assert [c.scheme for c in found] == ["dpop", "basic", "bearer"]
    assert found[0].algs == ["ES256", "PS256"]
    assert found[0].error == "use_dpop_nonce"
    assert found[2].error == "invalid_token"


def test_bare_schemes_separated_by_commas() -> None:
    assert [c.scheme for c in parse_challenges(["Basic, Bearer"])] == ["basic", "bearer"]


def test_token68() -> None:
    c = one("Negotiate YWxhZGRpbjpvcGVuc2VzYW1l==")
    assert c.scheme == "negotiate"
    assert c.token68 == "YWxhZGRpbjpvcGVuc2VzYW1l=="
    assert dict(c.params) == {}


def test_token68_then_another_challenge() -> None:
    found = parse_challenges(['Negotiate abc+/def=, Bearer realm="r"'])
    assert [(c.scheme, c.token68) for c in found] == [("negotiate", "abc+/def="),
                                                      ("bearer", None)]
    assert found[1].param("realm") == "r"


def test_token68_only_as_the_whole_rest() -> None:
    # "abc" followed by a parameter is not a token68
    c = one("Foo realm=abc")
    assert c.token68 is None
    assert c.params == {"realm": "abc"}


def test_quoted_string_escapes() -> None:
    c = one(r'Bearer realm="a\"b\\c\d"')
    assert c.param("realm") == 'a"b\\cd'


def test_commas_inside_quotes_separate_nothing() -> None:
    found = parse_challenges(['Bearer error_description="one, Basic two", scope="x,y"'])
    assert len(found) == 1
    assert found[0].error_description == "one, Basic two"
    assert found[0].param("scope") == "x,y"


def test_names_are_case_insensitive_values_unchanged() -> None:
    c = one('BEARER Scope="Read WRITE", ERROR=Invalid_Token')
    assert c.scheme == "bearer"
    assert c.scopes == ["Read", "WRITE"]
    assert c.param("SCOPE") == "Read WRITE"
    assert c.error == "Invalid_Token"
    assert set(c.params) == {"scope", "error"}


def test_names_match_exactly_not_by_substring() -> None:
    c = one('Bearer error_scope="admin", x_resource_metadata="https://evil", '
            'scopes="a", error_uri_x="u"')
    assert c.scopes == []
    assert c.param("scope") is None
    assert c.resource_metadata is None
    assert c.error is None
    assert c.error_uri is None
    assert c.param("error_scope") == "admin"


def test_duplicates_first_wins_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="mcpauth.challenge"):
        c = one('Bearer scope="first", scope="second", Scope=third')
    assert c.param("scope") == "first"
    assert "duplicate parameter 'scope'" in caplog.text


def test_spaces_around_equals() -> None:
    c = one('Bearer scope = "a b" , error =invalid_token,realm= x')
    assert c.scopes == ["a", "b"]
    assert c.error == "invalid_token"
    assert c.param("realm") == "x"


def test_single_quoted_values_without_escapes() -> None:
    c = one(r"Bearer scope='a b', realm='x\y', error=e")
    assert c.scopes == ["a", "b"]
    assert c.param("realm") == "x\\y"
    assert c.error == "e"


def test_single_quote_inside_double_quotes_is_literal() -> None:
    assert one('Bearer realm="it\'s, fine"').param("realm") == "it's, fine"


def test_unterminated_quote_runs_to_the_end() -> None:
    c = one('Bearer error="invalid_token", error_description="never closed, Basic x=y')
    assert c.error == "invalid_token"
    assert c.error_description == "never closed, Basic x=y"


def test_unquoted_url_value_survives() -> None:
    c = one("Bearer resource_metadata=https://a.example/.well-known/oauth-protected-resource/"
            "mcp?x=1, scope=a")
    assert c.resource_metadata == ("https://a.example/.well-known/oauth-protected-resource/"
                                   "mcp?x=1")
    assert c.scopes == ["a"]


def test_empty_list_elements_are_skipped() -> None:
    found = parse_challenges([", ,Bearer realm=x,, ,scope=y,,", ",", ""])
    assert len(found) == 1
    assert found[0].params == {"realm": "x", "scope": "y"}


def test_missing_comma_between_params_is_forgiven() -> None:
    c = one('Bearer realm="x" scope="a"')
    assert c.params == {"realm": "x", "scope": "a"}


def test_empty_value() -> None:
    c = one('Bearer scope="", error=')
    assert c.scopes == []
    assert c.param("scope") == ""
    assert c.error == ""


def test_unparseable_challenge_skipped_others_survive() -> None:
    found = parse_challenges(['@@@ garbage="x, y", Bearer scope="a"',
                              "=== nothing",
                              "Basic=weird, DPoP algs=ES256"])
    assert [c.scheme for c in found] == ["bearer", "dpop"]
    assert found[0].scopes == ["a"]
    assert found[1].algs == ["ES256"]


def test_garbage_inside_a_challenge_drops_only_that_element() -> None:
    c = one('Bearer realm="x", @@ junk, scope="a"')
    assert c.params == {"realm": "x", "scope": "a"}


def test_non_string_values_are_skipped() -> None:
    assert parse_challenges([None, b"Bearer", "Bearer"]) == [Challenge("bearer")]  # type: ignore[list-item]


@pytest.mark.parametrize("value", [
    "", " ", ",", '"', "'", "\\", "=", "Bearer =", "Bearer ,=,", 'Bearer a="\\', "Bearer a='",
    "Bearer a=\"b\\\"", "\x00\x01", "Bearer\tscope=x", "Bearer a==b", "B a b c d", "ü=ü",
    'Bearer realm="x"garbage, scope=y',
])
def test_garbage_never_raises(value: str) -> None:
    for challenge in parse_challenges([value]):
        assert isinstance(challenge.scheme, str)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(
    [*list("Bearer DPoP scope=\"',\\ \t=abcABC:/.-_~+"), "\x00", "é"]), max_size=60),
    max_size=4))
def test_parse_challenges_never_raises(values: list[str]) -> None:
    for challenge in parse_challenges(values):
        assert challenge.scheme == challenge.scheme.lower()
        assert all(name == name.lower() for name in challenge.params)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=3))
def test_parse_challenges_never_raises_on_any_text(values: list[str]) -> None:
    parse_challenges(values)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
                       st.text(alphabet=st.characters(codec="ascii", exclude_categories=["Cc"]),
                               max_size=20),
                       min_size=1, max_size=5))
def test_quoted_values_round_trip(params: dict[str, str]) -> None:
    def quote(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    header = "Bearer " + ", ".join(f"{k}={quote(v)}" for k, v in params.items())
    c = one(header)
    assert dict(c.params) == params


# --- choosing a challenge ---------------------------------------------------------------------

B = Challenge("bearer", {"scope": "b"})
D = Challenge("dpop", {"algs": "ES256"})
X = Challenge("basic", {"realm": "x"})


@pytest.mark.parametrize(("challenges", "dpop", "expected"), [
    ([X, B, D], False, B),
    ([X, B, D], True, D),
    ([D, B], False, B),
    ([B], True, B),          # DPoP wanted but only Bearer offered
    ([D], False, D),         # only a DPoP one exists
    ([X], False, None),
    ([X], True, None),
    ([], True, None),
])
def test_select_challenge(challenges: list[Challenge], dpop: bool,
                          expected: Challenge | None) -> None:
    assert select_challenge(challenges, dpop=dpop) is expected


def test_select_first_of_a_scheme() -> None:
    first, second = Challenge("bearer", {"scope": "1"}), Challenge("bearer", {"scope": "2"})
    assert select_challenge([first, second], dpop=False) is first
