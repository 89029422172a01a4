"""``progress=True``: a bar on ``sys.stderr`` for the length of a call, against a real server.

The server is ``examples/notebook_server.py`` in its own process; ``crunch`` sends four
progress notifications, ``slow`` none (it only ends when cancelled).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from helpers import ROOT

import mcpsync

SERVER = [sys.executable, str(ROOT / "examples" / "notebook_server.py")]


@pytest.fixture
def client() -> Iterator[mcpsync.Client]:
    with mcpsync.connect(SERVER, name="nb") as c:
        yield c


class _Err:
    """What reached ``sys.stderr`` (pytest's capsys), read as it grows."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys
        self._seen = ""

    def getvalue(self) -> str:
        self._seen += self._capsys.readouterr().err
        return self._seen


@pytest.fixture
def stderr(capsys: pytest.CaptureFixture[str]) -> _Err:
    return _Err(capsys)


def _open_bars() -> int:
    from tqdm import tqdm
    return len(getattr(tqdm, "_instances", ()))


def test_tqdm_bar_follows_the_progress_and_closes(client: mcpsync.Client,
                                                  stderr: _Err) -> None:
    result = client.call_tool("crunch", {"steps": 4, "delay": 0.02}, progress=True)
    assert result.text == "crunched 4 steps"
    out = stderr.getvalue()
    assert "nb: crunch" in out and "4/4" in out and "100%" in out and "step 4/4" in out, out
    assert _open_bars() == 0


def test_bar_closes_when_the_call_fails(client: mcpsync.Client, stderr: _Err) -> None:
    with pytest.raises(mcpsync.RequestTimeout):
        client.call_tool("slow", {"seconds": 30}, progress=True, timeout=0.3)
    assert _open_bars() == 0 and "nb: slow" in stderr.getvalue()


def test_submit_tool_bar_closes_with_the_future(client: mcpsync.Client,
                                                stderr: _Err) -> None:
    future = client.submit_tool("crunch", {"steps": 3, "delay": 0.02}, progress=True)
    assert future.result(10).text == "crunched 3 steps"
    assert "3/3" in stderr.getvalue()
    for _ in range(100):   # the done-callback runs on the dispatcher, just after the result
        if _open_bars() == 0:
            break
        import time
        time.sleep(0.01)
    assert _open_bars() == 0


def test_plain_text_line_without_tqdm(client: mcpsync.Client, stderr: _Err,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)    # what "not installed" looks like
    result = client.call_tool("crunch", {"steps": 4, "delay": 0.02}, progress=True)
    assert result.text == "crunched 4 steps"
    out = stderr.getvalue()
    assert out.startswith("\rnb: crunch: ") and out.endswith("nb: crunch: 4/4 (100%) step 4/4\n")
    assert "it/s" not in out    # not tqdm's


def test_progress_false_is_no_bar(client: mcpsync.Client, stderr: _Err) -> None:
    assert client.call_tool("crunch", {"steps": 2, "delay": 0.01}, progress=False).text
    assert stderr.getvalue() == ""


@pytest.mark.parametrize("bad", ["yes", 3, ["x"]])
def test_anything_else_is_a_type_error_naming_it(client: mcpsync.Client, bad: object) -> None:
    for call in (client.call_tool, client.submit_tool):
        with pytest.raises(TypeError) as info:
            call("crunch", progress=bad)  # type: ignore[operator]
        text = str(info.value)
        assert type(bad).__name__ in text and "'crunch'" in text and "'nb'" in text


def test_manager_takes_progress_true_and_refuses_a_string(stderr: _Err) -> None:
    with mcpsync.Manager() as manager:
        manager.start_server(mcpsync.ServerConfig(id="nb", command=SERVER[0], args=SERVER[1:]))
        result = manager.call_tool("nb", "crunch", {"steps": 2, "delay": 0.01}, progress=True)
        assert result.text == "crunched 2 steps" and "2/2" in stderr.getvalue()
        with pytest.raises(TypeError, match="not str"):
            manager.call_tool("nb", "crunch", progress="yes")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not int"):   # before the id is even looked up
            manager.call_tool("nobody", "crunch", progress=1)  # type: ignore[arg-type]


def test_a_bare_request_takes_no_bar_and_no_string(client: mcpsync.Client) -> None:
    with pytest.raises(TypeError, match="for call_tool"):
        client.submit("tools/call", {"name": "crunch"}, progress=True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not str"):
        client.submit("tools/call", {"name": "crunch"}, progress="yes")  # type: ignore[arg-type]
    future = client.submit("tools/call", {"name": "crunch", "arguments": {"delay": 0}},
                           progress=False)  # type: ignore[arg-type]
    assert future.result(10)["content"][0]["text"] == "crunched 5 steps"


@pytest.mark.parametrize("tqdm", [True, False], ids=["tqdm", "text"])
def test_a_servers_progress_message_cannot_control_the_terminal(
        stderr: _Err, monkeypatch: pytest.MonkeyPatch, tqdm: bool) -> None:
    from helpers import PEERS

    if not tqdm:
        monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with mcpsync.connect([sys.executable, str(PEERS / "hostile_server.py")], name="h") as c:
        name = next(t.name for t in c.list_tools() if t.name.startswith("x"))
        assert c.call_tool(name, progress=True).text.startswith("line one")
    out = stderr.getvalue()
    assert "\x1b]" not in out and "\x07" not in out, repr(out)
    assert "x\\x1b]0;PWNED\\x07" in out and "step\\x1b]0;PWNED\\x07" in out, repr(out)
