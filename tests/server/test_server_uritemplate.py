"""RFC 6570 URI templates: the RFC's expansion examples, matching back, and refused templates."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest
from hypothesis import given, settings, strategies as st

from mcpsync.server._uritemplate import UriTemplate, expand_template

# The example variables of RFC 6570 section 3.2.1.
RFC_VALUES: dict[str, object] = {
    "count": ["one", "two", "three"],
    "dom": ["example", "com"],
    "dub": "me/too",
    "hello": "Hello World!",
    "half": "50%",
    "var": "value",
    "who": "fred",
    "base": "http://example.com/home/",
    "path": "/foo/bar",
    "list": ["red", "green", "blue"],
    "keys": {"semi": ";", "dot": ".", "comma": ","},
    "v": "6",
    "x": "1024",
    "y": "768",
    "empty": "",
    "empty_keys": {},
    "undef": None,
}

# RFC 6570 sections 3.2.2 to 3.2.9: every example, template and expansion.
RFC_EXAMPLES = [
    # 3.2.2 simple string expansion
    ("{var}", "value"),
    ("{hello}", "Hello%20World%21"),
    ("{half}", "50%25"),
    ("O{empty}X", "OX"),
    ("O{undef}X", "OX"),
    ("{x,y}", "1024,768"),
    ("{x,hello,y}", "1024,Hello%20World%21,768"),
    ("?{x,empty}", "?1024,"),
    ("?{x,undef}", "?1024"),
    ("?{undef,y}", "?768"),
    ("{var:3}", "val"),
    ("{var:30}", "value"),
    ("{list}", "red,green,blue"),
    ("{list*}", "red,green,blue"),
    ("{keys}", "semi,%3B,dot,.,comma,%2C"),
    ("{keys*}", "semi=%3B,dot=.,comma=%2C"),
    # 3.2.3 reserved expansion
    ("{+var}", "value"),
    ("{+hello}", "Hello%20World!"),
    ("{+half}", "50%25"),
    ("{base}index", "http%3A%2F%2Fexample.com%2Fhome%2Findex"),
    ("{+base}index", "http://example.com/home/index"),
    ("O{+empty}X", "OX"),
    ("O{+undef}X", "OX"),
    ("{+path}/here", "/foo/bar/here"),
    ("here?ref={+path}", "here?ref=/foo/bar"),
    ("up{+path}{var}/here", "up/foo/barvalue/here"),
    ("{+x,hello,y}", "1024,Hello%20World!,768"),
    ("{+path,x}/here", "/foo/bar,1024/here"),
    ("{+path:6}/here", "/foo/b/here"),
    ("{+list}", "red,green,blue"),
    ("{+list*}", "red,green,blue"),
    ("{+keys}", "semi,;,dot,.,comma,,"),
    ("{+keys*}", "semi=;,dot=.,comma=,"),
    # 3.2.4 fragment expansion
    ("{#var}", "#value"),
    ("{#hello}", "#Hello%20World!"),
    ("{#half}", "#50%25"),
    ("foo{#empty}", "foo#"),
    ("foo{#undef}", "foo"),
    ("{#x,hello,y}", "#1024,Hello%20World!,768"),
    ("{#path,x}/here", "#/foo/bar,1024/here"),
    ("{#path:6}/here", "#/foo/b/here"),
    ("{#list}", "#red,green,blue"),
    ("{#list*}", "#red,green,blue"),
    ("{#keys}", "#semi,;,dot,.,comma,,"),
    ("{#keys*}", "#semi=;,dot=.,comma=,"),
    # 3.2.5 label expansion with dot-prefix
    ("{.who}", ".fred"),
    ("{.who,who}", ".fred.fred"),
    ("{.half,who}", ".50%25.fred"),
    ("www{.dom*}", "www.example.com"),
    ("X{.var}", "X.value"),
    ("X{.empty}", "X."),
    ("X{.undef}", "X"),
    ("X{.var:3}", "X.val"),
    ("X{.list}", "X.red,green,blue"),
    ("X{.list*}", "X.red.green.blue"),
    ("X{.keys}", "X.semi,%3B,dot,.,comma,%2C"),
    ("X{.keys*}", "X.semi=%3B.dot=..comma=%2C"),
    ("X{.empty_keys}", "X"),
    ("X{.empty_keys*}", "X"),
    # 3.2.6 path segment expansion
    ("{/who}", "/fred"),
    ("{/who,who}", "/fred/fred"),
    ("{/half,who}", "/50%25/fred"),
    ("{/who,dub}", "/fred/me%2Ftoo"),
    ("{/var}", "/value"),
    ("{/var,empty}", "/value/"),
    ("{/var,undef}", "/value"),
    ("{/var,x}/here", "/value/1024/here"),
    ("{/var:1,var}", "/v/value"),
    ("{/list}", "/red,green,blue"),
    ("{/list*}", "/red/green/blue"),
    ("{/list*,path:4}", "/red/green/blue/%2Ffoo"),
    ("{/keys}", "/semi,%3B,dot,.,comma,%2C"),
    ("{/keys*}", "/semi=%3B/dot=./comma=%2C"),
    # 3.2.7 path-style parameter expansion
    ("{;who}", ";who=fred"),
    ("{;half}", ";half=50%25"),
    ("{;empty}", ";empty"),
    ("{;v,empty,who}", ";v=6;empty;who=fred"),
    ("{;v,bar,who}", ";v=6;who=fred"),
    ("{;x,y}", ";x=1024;y=768"),
    ("{;x,y,empty}", ";x=1024;y=768;empty"),
    ("{;x,y,undef}", ";x=1024;y=768"),
    ("{;hello:5}", ";hello=Hello"),
    ("{;list}", ";list=red,green,blue"),
    ("{;list*}", ";list=red;list=green;list=blue"),
    ("{;keys}", ";keys=semi,%3B,dot,.,comma,%2C"),
    ("{;keys*}", ";semi=%3B;dot=.;comma=%2C"),
    # 3.2.8 form-style query expansion
    ("{?who}", "?who=fred"),
    ("{?half}", "?half=50%25"),
    ("{?x,y}", "?x=1024&y=768"),
    ("{?x,y,empty}", "?x=1024&y=768&empty="),
    ("{?x,y,undef}", "?x=1024&y=768"),
    ("{?var:3}", "?var=val"),
    ("{?list}", "?list=red,green,blue"),
    ("{?list*}", "?list=red&list=green&list=blue"),
    ("{?keys}", "?keys=semi,%3B,dot,.,comma,%2C"),
    ("{?keys*}", "?semi=%3B&dot=.&comma=%2C"),
    # 3.2.9 form-style query continuation
    ("{&who}", "&who=fred"),
    ("{&half}", "&half=50%25"),
    ("?fixed=yes{&x}", "?fixed=yes&x=1024"),
    ("{&x,y,empty}", "&x=1024&y=768&empty="),
    ("{&var:3}", "&var=val"),
    ("{&list}", "&list=red,green,blue"),
    ("{&list*}", "&list=red&list=green&list=blue"),
    ("{&keys}", "&keys=semi,%3B,dot,.,comma,%2C"),
    ("{&keys*}", "&semi=%3B&dot=.&comma=%2C"),
]


@pytest.mark.parametrize(("template", "expected"), RFC_EXAMPLES)
def test_rfc_6570_examples_expand(template: str, expected: str) -> None:
    assert expand_template(template, RFC_VALUES) == expected


def matchable(template: str) -> UriTemplate | None:
    try:
        return UriTemplate(template)
    except ValueError:
        return None


def test_the_matchable_rfc_examples_expand_the_same_through_the_class() -> None:
    refused = [t for t, _ in RFC_EXAMPLES if matchable(t) is None]
    # Only the explode modifier, a repeated name and two expressions with nothing between
    # them are refused for matching.
    assert refused == [
        "{list*}", "{keys*}", "up{+path}{var}/here", "{+list*}", "{+keys*}", "{#list*}",
        "{#keys*}", "{.who,who}", "www{.dom*}", "X{.list*}", "X{.keys*}", "X{.empty_keys*}",
        "{/who,who}", "{/var:1,var}", "{/list*}", "{/list*,path:4}", "{/keys*}", "{;list*}",
        "{;keys*}", "{?list*}", "{?keys*}", "{&list*}", "{&keys*}"]
    built = [(UriTemplate(t), e) for t, e in RFC_EXAMPLES if t not in refused]
    assert len(built) == 82
    for template, expected in built:
        assert template.expand(RFC_VALUES) == expected, template


# Examples whose expansion can be matched back to the very values: one that drops an empty
# or undefined variable, or stores a list, cannot give the same dict back.
RFC_ROUND_TRIPS = [
    ("{var}", {"var": "value"}),
    ("{hello}", {"hello": "Hello World!"}),
    ("{half}", {"half": "50%"}),
    ("{x,hello,y}", {"x": "1024", "hello": "Hello World!", "y": "768"}),
    ("{base}index", {"base": "http://example.com/home/"}),
    ("{+path}/here", {"path": "/foo/bar"}),
    ("here?ref={+path}", {"path": "/foo/bar"}),
    ("{+path,x}/here", {"path": "/foo/bar", "x": "1024"}),
    ("{#path,x}/here", {"path": "/foo/bar", "x": "1024"}),
    ("{#hello}", {"hello": "Hello World!"}),
    ("{.half,who}", {"half": "50%", "who": "fred"}),
    ("{/who,dub}", {"who": "fred", "dub": "me/too"}),
    ("{/var,x}/here", {"var": "value", "x": "1024"}),
    ("{;v,empty,who}", {"v": "6", "empty": "", "who": "fred"}),
    ("{;x,y}", {"x": "1024", "y": "768"}),
    ("{?x,y,empty}", {"x": "1024", "y": "768", "empty": ""}),
    ("?fixed=yes{&x}", {"x": "1024"}),
]


@pytest.mark.parametrize(("template", "values"), RFC_ROUND_TRIPS)
def test_rfc_examples_match_back_to_their_values(template: str,
                                                 values: dict[str, str]) -> None:
    t = UriTemplate(template)
    assert t.match(t.expand(values)) == values


# --- matching ---------------------------------------------------------------------------------

MATCHES = [
    ("file:///logs/{name}", "file:///logs/app.log", {"name": "app.log"}),
    ("file:///logs/{name}", "file:///logs/a%2Fb%20c", {"name": "a/b c"}),
    ("file:///logs/{name}", "file:///logs/caf%C3%A9", {"name": "café"}),
    ("file:///logs/{name}", "file:///logs/café", {"name": "café"}),
    ("file:///logs/{name}.txt", "file:///logs/a.b.txt", {"name": "a.b"}),
    ("db://{table}/rows/{id}", "db://users/rows/42", {"table": "users", "id": "42"}),
    ("file:///{+path}", "file:///a/b/c.txt", {"path": "a/b/c.txt"}),
    ("file:///{+path}.{ext}", "file:///a.d/b.tar.gz", {"path": "a.d/b.tar", "ext": "gz"}),
    ("file:///{+dir}/{name}.txt", "file:///a/b/c.d.txt", {"dir": "a/b", "name": "c.d"}),
    ("file:///{+path}{?q,limit}", "file:///a/b?q=x&limit=3",
     {"path": "a/b", "q": "x", "limit": "3"}),
    ("file:///{+path}{?q,limit}", "file:///a/b?limit=3&q=x",
     {"path": "a/b", "q": "x", "limit": "3"}),
    ("file:///{+path}{?q,limit}", "file:///a/b?limit=3", {"path": "a/b", "limit": "3"}),
    ("file:///{+path}{?q,limit}", "file:///a/b", {"path": "a/b"}),
    ("file:///{+path}{?q,limit}", "file:///a/b?q=", {"path": "a/b", "q": ""}),
    ("file:///{+path}{?q,limit}", "file:///a/b?q=a%26b%3Dc", {"path": "a/b", "q": "a&b=c"}),
    ("x://h/{x:3}", "x://h/abc", {"x": "abc"}),
    ("x://h/{x:3}", "x://h/%E2%82%AC%F0%9F%98%80a", {"x": "€😀a"}),
    ("x://h{;a,b}", "x://h;b=2;a", {"a": "", "b": "2"}),
    ("x://h{;a,b}", "x://h", {}),
    ("x://h{.fmt}", "x://h.tar.gz", {"fmt": "tar.gz"}),
    ("x://h{/a,b}", "x://h/1/2", {"a": "1", "b": "2"}),
    ("x://h/{a}{#f}", "x://h/1#sec/2?x", {"a": "1", "f": "sec/2?x"}),
    ("x://h/%7Euser/{a}", "x://h/%7euser/1", {"a": "1"}),
    ("x://h/é/{a}", "x://h/%C3%A9/1", {"a": "1"}),
]


@pytest.mark.parametrize(("template", "uri", "expected"), MATCHES)
def test_match(template: str, uri: str, expected: dict[str, str]) -> None:
    assert UriTemplate(template).match(uri) == expected


NON_MATCHES = [
    ("file:///logs/{name}", "file:///logs/a/b"),         # an extra path segment
    ("file:///logs/{name}", "file:///logs/"),            # an empty value
    ("file:///logs/{name}", "file:///log/a"),            # the literal prefix differs
    ("file:///logs/{name}", "http:///logs/a"),
    ("file:///logs/{name}", "file:///logs/a?x=1"),       # a query the template has not
    ("file:///logs/{name}", "file:///logs/a#top"),
    ("file:///logs/{name}", "file:///logs/%zz"),         # not a percent-escape
    ("file:///logs/{name}", "file:///logs/50%"),
    ("file:///logs/{name}", "file:///logs/%C3"),         # a cut UTF-8 sequence
    ("file:///logs/{name}", "file:///logs/%C3%28"),      # a bad continuation byte
    ("file:///logs/{name}", "file:///logs/%FF"),         # never UTF-8
    ("file:///logs/{name}", "file:///logs/%C0%AF"),      # overlong '/'
    ("file:///logs/{name}.txt", "file:///logs/a.md"),
    ("db://{table}/rows/{id}", "db://users/rows"),
    ("x://{host}/{+path}", "x://h/a?b"),                # '+' stops at a query in the path
    ("file:///{+path}{?q}", "file:///a?other=1"),        # a parameter it does not name
    ("file:///{+path}{?q}", "file:///a?q=1&q=2"),        # one given twice
    ("x://h/{x:3}", "x://h/abcd"),                      # longer than the prefix
    ("x://h/{x,y}", "x://h/1"),                         # a positional variable missing
    ("x://h{/a,b}", "x://h/1"),
    ("x://h{.fmt}", "x://h"),
    # A value keeps the longest part the literal after it allows, and matching does not go
    # back to try a shorter one: 'a' takes "p/q/r", and 's' then has no '/' after it.
    ("x://h/{+a}/{b}/{+c}", "x://h/p/q/r/s"),
]


@pytest.mark.parametrize("template", ["x://h/{+a}/{+b}/{+c}/end", "x://h/{a}-{b}-{c}-{d}.txt",
                                      "x://h{/a,b}{;c,d}{?e}{&f}"])
def test_a_uri_built_to_make_matching_backtrack_fails_fast(template: str) -> None:
    # Full backtracking would try every way to split these (cubic or worse in the length:
    # about 7 s for 800 characters with the first template); a client sends the URI.
    t = UriTemplate(template)
    for filler in ("/", "-", ";c", "&f=1", "a"):
        uri = "x://h/" + filler * 20_000 + "!"
        started = time.perf_counter()
        assert t.match(uri) is None
        assert time.perf_counter() - started < 1.0, (template, filler)


@pytest.mark.parametrize(("template", "uri"), NON_MATCHES)
def test_no_match(template: str, uri: str) -> None:
    assert UriTemplate(template).match(uri) is None


# A value alphabet for '{+var}' in a path: reserved characters other than the ones that end
# the path ('?', '#'), the list separator ',' and '%', which '+' would pass through as an
# escape; anything else is encoded and so comes back as it went in.
PATH_TEXT = st.text(st.sampled_from("ab/-._~:@!$&'()*+;= é€😀"), min_size=1, max_size=20)
ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=20)
SOME_TEXT = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)

PROPERTY_CASES: list[tuple[str, st.SearchStrategy[dict[str, str]]]] = [
    ("file:///logs/{name}", st.fixed_dictionaries({"name": SOME_TEXT})),
    ("db://{table}/rows/{id}", st.fixed_dictionaries({"table": SOME_TEXT, "id": SOME_TEXT})),
    ("x://h/{a,b,c}", st.fixed_dictionaries({"a": SOME_TEXT, "b": SOME_TEXT, "c": SOME_TEXT})),
    ("file:///{+path}", st.fixed_dictionaries({"path": PATH_TEXT})),
    ("file:///{+path}{?q,limit}", st.fixed_dictionaries(
        {"path": PATH_TEXT}, optional={"q": ANY_TEXT, "limit": ANY_TEXT})),
    ("x://h{/a,b}{;c,d}{?e}{&f}{#g}", st.fixed_dictionaries(
        {"a": SOME_TEXT, "b": SOME_TEXT, "g": st.text(st.sampled_from("ab/?#,;=é "),
                                                        min_size=1, max_size=20)},
        optional={"c": ANY_TEXT, "d": ANY_TEXT, "e": ANY_TEXT, "f": ANY_TEXT})),
    ("x://h{.x}", st.fixed_dictionaries({"x": SOME_TEXT})),
    ("x://h/{x:3}/{y:1}", st.fixed_dictionaries(
        {"x": st.text(st.characters(codec="utf-8"), min_size=1, max_size=3),
         "y": st.characters(codec="utf-8")})),
]


@pytest.mark.parametrize(("template", "strategy"), PROPERTY_CASES,
                         ids=[t for t, _ in PROPERTY_CASES])
def test_match_inverts_expand(template: str,
                              strategy: st.SearchStrategy[dict[str, str]]) -> None:
    t = UriTemplate(template)

    @settings(max_examples=150, deadline=None)
    @given(strategy)
    def round_trip(values: dict[str, str]) -> None:
        uri = t.expand(values)
        assert t.match(uri) == values, uri

    round_trip()


# --- the class ------------------------------------------------------------------------------


def test_variables_in_order_and_repr() -> None:
    t = UriTemplate("x://{host}{/a,b}{?q}{#frag}")
    assert t.template == "x://{host}{/a,b}{?q}{#frag}"
    assert t.variables == ("host", "a", "b", "q", "frag")
    assert repr(t) == "UriTemplate('x://{host}{/a,b}{?q}{#frag}')"


def test_the_result_lists_variables_in_template_order() -> None:
    t = UriTemplate("x://h{?a,b}")
    assert list(t.match("x://h?b=2&a=1") or {}) == ["a", "b"]


def test_expand_skips_missing_and_none_and_converts_scalars() -> None:
    t = UriTemplate("x://h/{a}{?n,f,flag,missing,gone}")
    values: Mapping[str, object] = {"a": 7, "n": 1.5, "f": False, "flag": True, "gone": None}
    assert t.expand(values) == "x://h/7?n=1.5&f=false&flag=true"


def test_expand_encodes_literal_non_ascii() -> None:
    assert UriTemplate("x://h/é/{a}").expand({"a": "ü"}) == "x://h/%C3%A9/%C3%BC"


def test_expand_refuses_values_it_cannot_write() -> None:
    with pytest.raises(TypeError, match=r"'a' is a bytes"):
        UriTemplate("x://h/{a}").expand({"a": b"raw"})
    with pytest.raises(ValueError, match=r"prefix modifier ':2'.*only to a string"):
        UriTemplate("x://h/{a:2}").expand({"a": ["one", "two"]})


BAD_TEMPLATES = [
    ("x://{a", "never closed"),
    ("x://a}", "closes no expression"),
    ("x://{}", "names no variable"),
    ("x://{=a}", "reserved for future use"),
    ("x://{|a}", "reserved for future use"),
    ("x://{na-me}", "'na-me' in '{na-me}' at offset 4 is not a valid variable"),
    ("x://{a.}", "'a.' in '{a.}'"),
    ("x://{a..b}", "'a..b'"),
    ("x://{a,}", "'' in '{a,}'"),
    ("x://{a:0}", "'a:0'"),
    ("x://{a:10000}", "'a:10000'"),
    ("x://{a:3*}", "'a:3\\*'"),
    ("x://{a b}", "'a b'"),
    ("x://h/{a}/{a}", "'a' appears twice"),
    ("x://h/{a,a}", "'a' appears twice"),
    ("x://h{/list*}", "explode modifier in '{/list\\*}' cannot be matched"),
    ("x://h/{a}{b}", "nothing separates '{b}' from '{a}'"),
    ("x://h{/a}{+b}", "nothing separates '{\\+b}' from '{/a}'"),
    ("x://h/a b/{c}", "character ' ' at offset 7 .*%20"),
    ("x://h/\"{c}\"", "character '\"'"),
    ("x://h/%zz/{c}", "'%' at offset 6 does not start a percent-escape"),
    ("x://h/50%/{c}", "write a literal '%' as %25"),
]


@pytest.mark.parametrize(("template", "message"), BAD_TEMPLATES)
def test_bad_templates_are_refused_naming_the_part(template: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        UriTemplate(template)
    assert repr(template) in str(caught.value)


def test_expand_template_takes_what_the_class_refuses_to_match() -> None:
    assert expand_template("x://h{/list*}", {"list": ["a", "b"]}) == "x://h/a/b"
    assert expand_template("x://{a}/{a}", {"a": 1}) == "x://1/1"
    with pytest.raises(ValueError, match="never closed"):
        expand_template("x://{a", {})
