"""The searches for ``\\u`` escapes: compiled patterns made on first use, asked only of a text
that holds a backslash, must decide exactly as the ``in`` tests they replaced, on short and
long texts alike, and a Ctrl-C while a pattern is compiled must leave the next parse whole."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest

from mcpsync import jsonrpc
from mcpsync.jsonrpc import FrameDecoder, Message, ParseError, parse


def _u_old(text: str) -> bool:
    return "\\u" in text


def _surrogate_old(text: str) -> bool:
    return "\\u" in text and ("\\ud" in text or "\\uD" in text)


def _texts() -> list[str]:
    alphabet = ["\\", "u", "d", "D", "x", '"', "é"]
    short = ["".join(p) for n in range(5) for p in itertools.product(alphabet, repeat=n)]
    rng = random.Random(7)
    long = ["".join(rng.choice(alphabet + ["y"] * 20) for _ in range(rng.randrange(50, 5000)))
            for _ in range(300)]
    big = ["x" * 1_000_000, "x" * 1_000_000 + "\\u", "\\n" + "x" * 1_000_000,
           "x" * 500_000 + "\\\\u" + "x" * 500_000, "x" * 999_999 + "\\uD800"]
    return short + long + big


def test_the_searches_decide_as_the_in_tests_did() -> None:
    for text in _texts():
        assert ("\\" in text and jsonrpc._u_escape(text) is not None) is _u_old(text), text[:40]
        assert (("\\" in text and jsonrpc._surrogate_escape(text) is not None)
                is _surrogate_old(text)), text[:40]


def _line(text: str, *, ensure_ascii: bool = True) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": [
        {"type": "text", "text": text}]}}, ensure_ascii=ensure_ascii).encode() + b"\n"


@pytest.mark.parametrize("text", ["x" * 300_000, ("y" * 79 + "\n") * 4000,
                                  ("y" * 79 + "é") * 4000, "short\nline", "é"],
                         ids=["plain", "newlines", "u-escapes", "short", "one-escape"])
@pytest.mark.parametrize("chunk", [65536, 1 << 30], ids=["pipe-reads", "one-read"])
def test_long_lines_decode_to_their_text(text: str, chunk: int) -> None:
    line = _line(text)
    decoder = FrameDecoder(max_frame_bytes=1 << 26)
    frames = [f for i in range(0, len(line), chunk) for f in decoder.feed(line[i:i + chunk])]
    assert len(frames) == 1 and isinstance(frames[0], Message)
    assert frames[0].result["content"][0]["text"] == text
    assert parse(line[:-1]) == frames[0]


def test_a_lone_surrogate_escape_in_a_long_line_is_refused() -> None:
    body = _line("x" * 200_000)[:-1].replace(b'"x', b'"\\ud800x', 1)
    with pytest.raises(ParseError, match="lone surrogate"):
        parse(body)
    # A pair is one character, not refused; nor is an escaped backslash before "ud800".
    assert isinstance(parse(body.replace(b"\\ud800", b"\\ud83d\\ude00")), Message)
    assert isinstance(parse(body.replace(b"\\ud800", b"\\\\ud800")), Message)


def test_a_ctrl_c_in_the_first_compile_leaves_the_loader(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    # Back to the state before any first use (monkeypatch restores the bound searches).
    monkeypatch.setattr(jsonrpc, "_u_escape", jsonrpc._load_u_escape)
    monkeypatch.setattr(jsonrpc, "_surrogate_escape", jsonrpc._load_surrogate_escape)
    calls: list[str] = []
    real = re.compile

    def interrupted(pattern: str, flags: int = 0) -> re.Pattern[str]:
        calls.append(pattern)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(pattern, flags)

    with monkeypatch.context() as patch:
        patch.setattr(re, "compile", interrupted)
        line = _line("a\nb \u00e9" + "z" * jsonrpc._LONG_TEXT)  # long: the patterns decide
        with pytest.raises(KeyboardInterrupt):
            parse(line[:-1])
        assert jsonrpc._u_escape is jsonrpc._load_u_escape
        message = parse(line[:-1])
    assert isinstance(message, Message)
    assert message.result["content"][0]["text"] == "a\nb \u00e9" + "z" * jsonrpc._LONG_TEXT
    assert calls == ["\\\\u", "\\\\u", "\\\\u[dD]"]
    assert jsonrpc._u_escape is not jsonrpc._load_u_escape
    assert jsonrpc._surrogate_escape is not jsonrpc._load_surrogate_escape


@pytest.mark.parametrize("size", [jsonrpc._LONG_TEXT - 200, jsonrpc._LONG_TEXT + 200])
@pytest.mark.parametrize("middle", ["\\n", "\\u00e9", "\\\\u00e9", "\\ud83d\\ude00", "\\ud800",
                                    "\\uDC00", "\\\\ud800", "x"])
def test_both_sides_of_the_long_text_mark_decide_alike(size: int, middle: str) -> None:
    """Below the mark ``in`` decides, from it the compiled pattern: the same outcome either
    side, through ``parse()`` and through the decoder's one-read fast path."""
    body = ('{"jsonrpc":"2.0","id":3,"result":{"t":"' + "y" * (size // 2) + middle
            + "y" * (size // 2) + '"}}').encode()
    lone = middle in ("\\ud800", "\\uDC00")
    outcomes = []
    for frame in (_outcome(body), _outcome(body, fed=True)):
        outcomes.append(frame)
        if lone:
            assert isinstance(frame, ParseError) and "lone surrogate" in str(frame)
        else:
            assert isinstance(frame, Message)
            assert frame.result["t"] == json.loads(body)["result"]["t"]
    assert type(outcomes[0]) is type(outcomes[1])


def _outcome(body: bytes, *, fed: bool = False) -> Message | ParseError:
    if fed:
        frames = FrameDecoder(max_frame_bytes=1 << 20).feed(body + b"\n")
        assert len(frames) == 1
        frame = frames[0]
        assert not isinstance(frame, list)
        return frame
    try:
        message = parse(body)
    except ParseError as exc:
        return exc
    assert isinstance(message, Message)
    return message


@pytest.mark.parametrize("fed", [False, True], ids=["parse", "feed"])
def test_the_patterns_search_from_the_long_text_mark_only(monkeypatch: pytest.MonkeyPatch,
                                                          fed: bool) -> None:
    """Below the mark a text holding a backslash is searched with ``in`` (the pattern's call
    costs more instructions on a short text); from the mark on, with the patterns."""
    real_u, real_s = jsonrpc._load_u_escape, jsonrpc._load_surrogate_escape
    seen: list[int] = []

    def u_escape(text: str) -> re.Match[str] | None:
        seen.append(len(text))
        return real_u(text)

    def surrogate_escape(text: str) -> re.Match[str] | None:
        seen.append(len(text))
        return real_s(text)

    monkeypatch.setattr(jsonrpc, "_u_escape", u_escape)
    monkeypatch.setattr(jsonrpc, "_surrogate_escape", surrogate_escape)
    head, tail = '{"jsonrpc":"2.0","id":3,"result":{"t":"a\\nb', '"}}'
    for size, searched in ((jsonrpc._LONG_TEXT - 1, False), (jsonrpc._LONG_TEXT, True)):
        body = (head + "y" * (size - len(head) - len(tail)) + tail).encode()
        assert len(body.decode()) == size
        seen.clear()
        frame = _outcome(body, fed=fed)
        assert isinstance(frame, Message) and frame.result["t"].startswith("a\nb")
        assert bool(seen) is searched, (size, seen)
        assert all(n == size for n in seen)
