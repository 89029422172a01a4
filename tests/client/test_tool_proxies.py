"""Tool proxies (``client.tools``, ``manager.proxy``) and the argument checks of a call by
name, against real server processes: the demo and the proxy peer (names that are not
identifiers, a keyword, a leading digit, a tool added while serving)."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import sys
from pathlib import Path

import pytest
from helpers import PEERS

import mcpsync
from mcpsync.client._proxies import ToolProxy, attribute_name

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "mcpsync.demo"]
PEER = [sys.executable, str(PEERS / "proxy_server.py")]
SCRIPTED = str(PEERS / "scripted_server.py")


def test_attribute_names() -> None:
    assert attribute_name("get-sum") == "get_sum"
    assert attribute_name("a.b c") == "a_b_c"
    assert attribute_name("class") == "class_"
    assert attribute_name("match") == "match"       # a soft keyword is a fine attribute
    assert attribute_name("3d") == "_3d"
    assert attribute_name("__init__") is None
    assert attribute_name("") is None


def test_a_proxy_has_a_signature_a_docstring_and_calls_the_tool() -> None:
    with mcpsync.connect(DEMO) as client:
        tools = client.tools
        assert dir(tools) == ["add", "echo", "fail", "slow"]
        sig = inspect.signature(tools.add)
        params = list(sig.parameters.values())
        assert [p.name for p in params[:2]] == ["a", "b"]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
        assert params[0].default is inspect.Parameter.empty and params[0].annotation is float
        slow = inspect.signature(tools.slow).parameters
        assert slow["seconds"].default == 2.0 and slow["steps"].default == 10
        assert "timeout" in slow and "progress" in slow
        assert tools.add.__doc__.startswith("Add two numbers")
        assert "a (number, required)" in tools.add.__doc__
        assert tools.add(a=1, b=2).structured == {"sum": 3}
        assert tools["echo"](text="hi").text == "hi"
        seen: list[float] = []
        assert tools.slow(seconds=0.05, steps=2,
                          progress=lambda p, t, m: seen.append(p)).text.startswith("done")
        assert seen == [1, 2]
        with pytest.raises(mcpsync.ToolError):
            tools.fail(raise_on_error=True)
        with pytest.raises(mcpsync.RequestTimeout):
            tools.slow(seconds=5, steps=1, timeout=0.2)


def test_a_proxy_checks_keywords_before_sending() -> None:
    with mcpsync.connect(DEMO, name="demo") as client:
        add = client.tools.add
        with pytest.raises(TypeError, match=r"calling tool 'add' on server 'demo': missing "
                                            r"required argument 'b'") as missing:
            add(a=1)
        assert isinstance(missing.value, mcpsync.InvalidArguments)
        assert missing.value.missing == ("b",)
        with pytest.raises(mcpsync.InvalidArguments, match="unexpected argument 'c'"):
            add(a=1, b=2, c=3)
        with pytest.raises(mcpsync.InvalidArguments, match=r"'aa' \(did you mean 'a'\?\)"):
            add(aa=1, b=2)
        with pytest.raises(TypeError, match="keyword arguments only"):
            add(1, 2)
        with pytest.raises(AttributeError, match="did you mean 'add'"):
            client.tools.ad  # noqa: B018
        with pytest.raises(KeyError, match="did you mean 'add'"):
            client.tools["ad"]
        assert client.call_tool("add", {"a": 1, "b": 2}).structured == {"sum": 3}


def test_names_that_are_not_identifiers_and_clashes() -> None:
    with mcpsync.connect(PEER) as client:
        tools = client.tools
        # "get-sum" and "get.sum" both map to get_sum: neither gets the attribute.
        assert dir(tools) == ["_3d", "class_", "grow", "picture"]
        with pytest.raises(AttributeError, match=r"tools\['get_sum'\]|no tool reachable"):
            tools.get_sum  # noqa: B018
        get_sum = tools["get-sum"]
        sig = inspect.signature(get_sum)
        assert str(sig).startswith("(*, a: int, b: int = 5, timeout=None")
        assert get_sum(a=1).text == "6" and tools["get.sum"](a=1, b=1).text == "2"
        assert tools.class_().text == "class ok" and tools._3d().text == "3d ok"
        assert "get-sum" in tools and len(tools) == 6


def test_proxies_follow_a_changed_tool_list(tmp_path: Path) -> None:
    for era in ("legacy", "modern"):
        with mcpsync.connect(PEER, era=era) as client:
            assert "extra" not in client.tools
            client.tools.grow()
            # A legacy client forgets its list on list_changed; a modern server tells only
            # listeners, so a missing name lists once more. Either way: the new tool is there.
            assert client.tools.extra(x="y").text == "extra y", era
            assert "extra" in dir(client.tools)


def test_manager_proxy() -> None:
    config = mcpsync.ServerConfig(id="demo", command=sys.executable, args=["-m", "mcpsync.demo"])
    with mcpsync.Manager(configs=[config]) as manager:
        manager.start_all()
        proxy = manager.proxy("demo")
        assert list(inspect.signature(proxy.add).parameters) == ["a", "b", "timeout",
                                                                 "progress"]
        assert proxy.add(a=2, b=3).structured == {"sum": 5}
        with pytest.raises(mcpsync.InvalidArguments):
            proxy.add(a=2)
        with pytest.raises(mcpsync.UnknownServer):
            manager.proxy("nope")


def _sent(log: Path) -> list[str]:
    return [json.loads(line).get("method") for line in log.read_text().splitlines()]


def test_call_by_name_checks_against_the_cached_list_only(tmp_path: Path) -> None:
    with mcpsync.connect(DEMO, name="demo") as client:
        # Nothing cached: nothing is listed to check; the server judges.
        with pytest.raises(mcpsync.RemoteError):
            client.call_tool("ad", {"a": 1, "b": 2})
        client.list_tools()
        with pytest.raises(KeyError) as unknown:
            client.call_tool("ad", {"a": 1, "b": 2})
        assert isinstance(unknown.value, mcpsync.UnknownTool)
        assert unknown.value.suggestions == ("add",)
        assert "did you mean 'add'?" in str(unknown.value)
        with pytest.raises(TypeError, match="missing required argument 'b'"):
            client.call_tool("add", {"a": 1})
        with pytest.raises(mcpsync.InvalidArguments):
            client.submit_tool("add", {"a": 1})
        # Turned off per call: the server answers instead.
        with pytest.raises(mcpsync.RemoteError):
            client.call_tool("ad", {"a": 1}, validate_input=False)
        assert client.call_tool("add", {"a": 1}, validate_input=False).is_error
        # The same with a progress bar: still off, and no bar for a call refused here.
        with pytest.raises(mcpsync.RemoteError):
            client.call_tool("ad", {"a": 1}, validate_input=False, progress=True)
        bar_output = io.StringIO()
        with contextlib.redirect_stderr(bar_output), pytest.raises(mcpsync.UnknownTool):
            client.call_tool("ad", {"a": 1}, progress=True)
        assert bar_output.getvalue() == ""
    with mcpsync.connect(DEMO, validate_input=False) as client:
        client.list_tools()
        assert client.call_tool("add", {"a": 1}).is_error   # sent; the server refused it


def test_an_unknown_name_lists_once_more(tmp_path: Path) -> None:
    log = tmp_path / "sent.log"
    with mcpsync.connect([sys.executable, SCRIPTED, "legacy"], era="legacy",
                         env={"SCRIPTED_LOG": str(log)}) as client:
        client.list_tools()
        before = _sent(log).count("tools/list")
        with pytest.raises(mcpsync.UnknownTool):
            client.call_tool("zzz")
        after = _sent(log)
    assert before and after.count("tools/list") == 2 * before   # listed again, once
    assert "tools/call" not in after                     # and nothing was called


def test_lists_of_what_a_server_does_not_offer_are_empty() -> None:
    with mcpsync.connect(PEER) as client:
        assert "resources" not in client.capabilities and "prompts" not in client.capabilities
        assert client.list_resources() == [] and client.list_prompts() == []
        assert client.list_resource_templates() == []
        with pytest.raises(mcpsync.CapabilityNotSupported):
            client.read_resource("file:///x")


HOSTILE = [sys.executable, str(PEERS / "hostile_server.py")]


def test_names_of_the_proxies_own_attributes_are_item_access_only() -> None:
    with mcpsync.connect(HOSTILE, name="h") as client:
        tools = client.tools
        assert dir(tools) == ["plain", "tool", "x__0_PWNED_"]
        for name in ("_call", "_find", "_server", "_proxies", "_listed", "_relisted"):
            assert not isinstance(getattr(tools, name), ToolProxy), name
            assert tools[name]().text == f"{name} ran"
        for hook in ("_repr_html_", "_ipython_display_"):
            with pytest.raises(AttributeError):
                getattr(tools, hook)
            assert tools[hook]().text == f"{hook} ran"
        assert tools.tool().text == "tool ran"


def test_an_optional_argument_left_out_is_not_sent() -> None:
    with mcpsync.connect(HOSTILE, name="h") as client:
        plain = client.tools.plain
        param = inspect.signature(plain).parameters["n"]
        assert param.default is mcpsync.NOT_GIVEN and param.annotation is int
        assert str(inspect.signature(plain)).startswith("(*, n: int = NOT_GIVEN, timeout=")
        assert plain().text == "{}"
        assert plain(n=mcpsync.NOT_GIVEN).text == "{}"
        assert plain(n=3).text == '{"n": 3}'
        assert plain(n=None).is_error        # None is JSON null, which the schema refuses


def test_a_missed_name_lists_again_at_most_once_per_list(tmp_path: Path) -> None:
    log = tmp_path / "sent.log"
    with mcpsync.connect([sys.executable, SCRIPTED, "legacy"], era="legacy",
                         env={"SCRIPTED_LOG": str(log)}) as client:
        tools = client.tools
        dir(tools)                               # lists once: nothing was cached
        first = _sent(log).count("tools/list")
        assert not hasattr(tools, "zzz")         # lists again: the tool may be new
        again = _sent(log).count("tools/list")
        for _ in range(5):
            assert not hasattr(tools, "zzz") and not hasattr(tools, "yyy")
            with pytest.raises(KeyError):
                tools["zzz"]
        assert not hasattr(tools, "_private") and not hasattr(tools, "__wrapped__")
        after = _sent(log).count("tools/list")
    assert first and again == 2 * first and after == again
