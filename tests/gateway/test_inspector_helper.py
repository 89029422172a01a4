"""The traffic log written by a helper process (``Inspector(path, helper=True)``, what
``mcpsync gateway --log FILE`` uses), and ``record_line``, the raw-bytes way to queue a frame.

The helper must write exactly the lines the in-process inspector writes, rotate and cap like
it, keep the file 0600, count what it could not take as dropped, never hold the gateway's
secrets in its argv or environment, end with the gateway, and never stall the traffic when
it dies."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.test_inspector_lines import TRAFFIC
from mcpsync._envelope import parse_envelope
from mcpsync.cli._inspect import summarize
from mcpsync.gateway._inspector import Inspector
from mcpsync.gateway._logqueue import LogQueue
from mcpsync.gateway._redact import Redactor

TO_UPSTREAM = ("host->gateway", "gateway->upstream")
_TIME = re.compile(rb'^\{"time":"[^"]*",')


def _clock() -> Any:
    now = [100.0]

    def clock() -> float:
        now[0] += 0.0125
        return now[0]
    return clock


def _write(path: Path, *, helper: bool, raw: bool, session: str | None = None) -> list[bytes]:
    inspector = Inspector(path, clock=_clock(), helper=helper)
    for legs, upstream, frame in TRAFFIC:
        if raw:
            inspector.record_line(legs, frame, upstream, session)
        else:
            inspector.record_frame(legs, parse_envelope(frame), upstream, session)
    inspector.close()
    assert inspector._helper is None or inspector._helper._proc.returncode == 0
    return [_TIME.sub(b"{", line) for line in path.read_bytes().splitlines()]


def _call(rid: int | str, text: str = "hi") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"text": text}}}).encode()


def _state(pid: int) -> str:
    """A process's state letter (``Z`` for a zombie), ``""`` once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


@pytest.mark.parametrize("session", [None, "0123456789ab"])
def test_record_line_writes_what_record_frame_writes(tmp_path: Path,
                                                     session: str | None) -> None:
    framed = _write(tmp_path / "frame.log", helper=False, raw=False, session=session)
    lined = _write(tmp_path / "line.log", helper=False, raw=True, session=session)
    assert len(framed) == sum(len(legs) for legs, _, _ in TRAFFIC)
    assert lined == framed


def test_the_helper_writes_the_same_bytes_as_the_log_thread(tmp_path: Path) -> None:
    here = _write(tmp_path / "here.log", helper=False, raw=False)
    there = _write(tmp_path / "there.log", helper=True, raw=False)
    there_raw = _write(tmp_path / "raw.log", helper=True, raw=True)
    assert there == here and there_raw == here
    assert (tmp_path / "there.log").stat().st_mode & 0o777 == 0o600
    records = [json.loads(line) for line in there]
    assert records[11]["latency_ms"] == 25.0 and records[11]["tool"] == "échö"
    assert "pw" not in there[16].decode() and "abc" not in there[16].decode()


def test_record_goes_through_the_helper_in_order_with_the_frames(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    inspector = Inspector(log, helper=True, detail="full")
    inspector.record_line(TO_UPSTREAM, _call(1), "demo")
    inspector.record("gateway->host", {"jsonrpc": "2.0", "id": 1, "result": {
        "content": [], "api_key": "sk-" + "a1B2" * 8}}, upstream="demo", size=52)
    inspector.record("host->gateway", b"not json {", upstream="demo")
    inspector.record_line(TO_UPSTREAM, b"[1, 2", "demo")
    inspector.record_line(("host->gateway",), bytearray(_call(2)), "demo")
    inspector.close()
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    assert [(r["dir"], r["kind"]) for r in records] == [
        ("host->gateway", "request"), ("gateway->upstream", "request"),
        ("gateway->host", "response"), ("host->gateway", "invalid"),
        ("host->gateway", "invalid"), ("gateway->upstream", "invalid"),
        ("host->gateway", "request")]
    assert records[2]["tool"] == "echo" and records[2]["size"] == 52
    assert records[2]["payload"]["result"]["api_key"] == "[redacted]"
    assert "a1B2" not in log.read_text()


def test_the_helper_rotates_at_the_cap_and_keeps_every_file_private(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    inspector = Inspector(log, helper=True, max_bytes=2000, backups=2)
    for rid in range(60):
        inspector.record_line(TO_UPSTREAM, _call(rid), "demo")
    inspector.close()
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["g.log", "g.log.1", "g.log.2"]
    assert all(f.stat().st_size <= 2000 and f.stat().st_mode & 0o777 == 0o600 for f in files)
    ids = [json.loads(line)["id"] for f in (files[2], files[1], files[0])
           for line in f.read_bytes().splitlines()]
    assert ids == sorted(ids) and ids[-1] == 59   # the newest kept, in order


def test_a_stalled_helper_makes_frames_dropped_and_counted(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    inspector = Inspector(log, helper=True)
    inspector._queue = LogQueue(inspector._drain, limit=64)
    helper = inspector._helper
    assert helper is not None
    big = "x" * 4000
    os.kill(helper.pid, signal.SIGSTOP)   # it reads nothing: its pipe fills up
    try:
        for rid in range(1, 401):
            inspector.record_line(TO_UPSTREAM, _call(rid, big), "demo")
            time.sleep(0.0005)
    finally:
        os.kill(helper.pid, signal.SIGCONT)
    inspector.close()
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    lost = sum(r["count"] for r in records if r["kind"] == "dropped")
    logged = [r for r in records if r["kind"] == "request"]
    assert lost > 0 and len(logged) // 2 + lost == 400, "every frame is logged or counted"
    assert summarize([str(log)])["dropped_frames"] == lost


def test_a_helper_that_dies_is_reported_once_and_the_traffic_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "g.log"
    inspector = Inspector(log, helper=True)
    helper = inspector._helper
    assert helper is not None
    inspector.record_line(TO_UPSTREAM, _call(1), "demo")
    time.sleep(0.3)
    os.kill(helper.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _state(helper.pid) not in ("Z", "") and time.monotonic() < deadline:
        time.sleep(0.01)
    with caplog.at_level(logging.WARNING, logger="mcpsync.gateway"):
        started = time.monotonic()
        for rid in range(2, 200):
            inspector.record_line(TO_UPSTREAM, _call(rid), "demo")
        assert time.monotonic() - started < 1.0
        deadline = time.monotonic() + 10
        while inspector.enabled and time.monotonic() < deadline:
            inspector.record_line(TO_UPSTREAM, _call(999), "demo")
            time.sleep(0.01)
        assert not inspector.enabled
        inspector.close()
    said = [r.getMessage() for r in caplog.records if "helper process" in r.getMessage()]
    assert len(said) == 1 and "given up" in said[0], said


def test_the_helper_holds_no_secret_of_the_gateway(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "ghp_" + "Zx9" * 12
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    inspector = Inspector(tmp_path / "g.log", helper=True)
    helper = inspector._helper
    assert helper is not None
    try:
        environ = Path(f"/proc/{helper.pid}/environ").read_bytes()
        argv = Path(f"/proc/{helper.pid}/cmdline").read_bytes().split(b"\0")
    finally:
        inspector.close()
    assert secret.encode() not in environ and b"GITHUB_TOKEN" not in environ
    assert secret.encode() not in b" ".join(argv)
    assert all(a.startswith(b"--") for a in argv[3::2] if a), argv


def test_the_helper_never_runs_code_from_the_gateways_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host may start the gateway in a workspace that holds a folder named ``mcpsync``:
    the helper, which is handed every frame, must import the gateway's own package, not
    that one; and a relative log path still names the file the gateway opened."""
    workspace = tmp_path / "workspace"
    planted = workspace / "mcpsync" / "gateway"
    planted.mkdir(parents=True)
    marker = tmp_path / "planted-code-ran"
    for folder in (workspace / "mcpsync", planted):
        (folder / "__init__.py").write_text(
            f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    monkeypatch.chdir(workspace)
    inspector = Inspector("traffic.log", clock=_clock(), helper=True)
    for legs, upstream, frame in TRAFFIC:
        inspector.record_line(legs, frame, upstream, None)
    inspector.close()
    assert not marker.exists(), "the helper imported the workspace's mcpsync"
    assert inspector._helper is None or inspector._helper._proc.returncode == 0
    lines = (workspace / "traffic.log").read_bytes().splitlines()
    assert len(lines) == sum(len(legs) for legs, _, _ in TRAFFIC)


def test_the_helper_ends_with_a_gateway_that_is_killed(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    code = textwrap.dedent(f"""
        import json, os, signal, sys, time
        from mcpsync.gateway._inspector import Inspector
        inspector = Inspector({str(log)!r}, helper=True)
        for rid in range(5):
            inspector.record_line(("host->gateway",), json.dumps(
                {{"jsonrpc": "2.0", "id": rid, "method": "ping"}}).encode(), "demo")
        time.sleep(0.5)   # the log thread ships them
        print(inspector._helper.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _state(pid) not in ("", "Z") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _state(pid) in ("", "Z"), "the helper outlived the gateway"
    assert [json.loads(line)["id"] for line in log.read_bytes().splitlines()] == \
        [0, 1, 2, 3, 4]


def test_a_helper_needs_a_file_and_no_callback(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="helper"):
        Inspector(tmp_path / "g.log", helper=True, callback=print)
    with pytest.raises(ValueError, match="helper"):
        Inspector(helper=True)
    with pytest.raises(OSError, match="missing"):
        Inspector(tmp_path / "missing" / "g.log", helper=True)


def test_a_flood_of_big_frames_reaches_the_helper_in_bounded_writes(tmp_path: Path) -> None:
    log = tmp_path / "g.log"
    inspector = Inspector(log, helper=True, max_bytes=100_000_000)
    helper = inspector._helper
    assert helper is not None
    sizes: list[int] = []
    real_write = helper._write

    def write(data: bytes) -> bool:
        sizes.append(len(data))
        return real_write(data)

    helper._write = write   # type: ignore[method-assign]
    blob = "y" * 300_000
    for rid in range(1, 21):
        inspector.record_line(TO_UPSTREAM, _call(rid, blob), "demo")
    inspector.close()
    ids = [json.loads(line)["id"] for line in log.read_bytes().splitlines()]
    assert ids == [rid for rid in range(1, 21) for _ in TO_UPSTREAM]
    assert len(sizes) >= 5 and max(sizes) < 2_000_000, sizes   # 6 MB in all


def test_raw_lines_write_what_the_dicts_write_for_repeated_calls(tmp_path: Path) -> None:
    # record_line's frames take a shorter way at summary detail (a tool's about-fields
    # remembered per tool and upstream, one line for both legs of an answer): the bytes
    # must still be the dicts' (a callback's records), including after the redaction rules
    # change and for the frames that way hands back (spaces around, an error answer).
    from mcpsync.gateway._redact import Redactor

    secret_tool = "ghp_" + "a1B2" * 9
    traffic: list[tuple[tuple[str, ...], str | None, bytes]] = []
    for rid, tool in [(1, "echo"), ("s2", "echo"), (3, secret_tool), (4, "echo"),
                      (5, "slow")]:
        traffic.append((TO_UPSTREAM, "demo", _call(rid, f"x{rid}").replace(
            b'"echo"', json.dumps(tool).encode())))
    traffic += [(("upstream->gateway", "gateway->host"), "demo", json.dumps(
        {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "x"}],
                                                 "isError": rid == 4}}).encode())
        for rid in (1, "s2", 3, 4)]
    traffic += [
        (("host->gateway",), "demo", _call(6)),          # one leg only
        (("gateway->host",), "demo", b'{"jsonrpc":"2.0","id":6,"result":{}}'),
        (TO_UPSTREAM, "demo", b' {"jsonrpc":"2.0","id":7,"method":"tools/call",'
                              b'"params":{"name":"echo","arguments":{}}} '),
        (("upstream->gateway", "gateway->host"), "demo",
         b'{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"token=abc"}}'),
        (TO_UPSTREAM, None, b'{"jsonrpc":"2.0","method":"notifications/progress",'
                            b'"params":{"progressToken":1,"progress":0.5}}'),
        (("upstream->gateway", "gateway->host"), "demo",
         b'{"jsonrpc":"2.0","id":5,"result":{"content":[]}}'),
    ]
    # As record_line queues them (legs, line, upstream, wall time, clock, session), written
    # here in two batches, as the log thread (or the helper) writes them.
    queued = [(legs, frame, upstream, 1_700_000_000.0 + n, 100.0 + 0.0125 * n, None)
              for n, (legs, upstream, frame) in enumerate(traffic)]
    written: dict[bool, list[bytes]] = {}
    for raw in (True, False):
        path = tmp_path / f"{raw}.log"
        inspector = Inspector(path, callback=None if raw else (lambda record: None))
        inspector.write_batch(list(queued), 0)
        # "echo" is secret now, and so is the key "text" (the remembered shapes must go)
        inspector.redactor = Redactor(extra_patterns=["echo", "^text$"])
        inspector.write_batch(list(queued), 0)
        inspector.close()
        written[raw] = path.read_bytes().splitlines()
    assert written[True] == written[False]
    records = [json.loads(line) for line in written[True]]
    assert len(records) == 2 * sum(len(legs) for legs, _, _ in traffic)
    assert secret_tool not in b"".join(written[True]).decode()
    assert [r.get("tool") for r in records[:2]] == ["echo", "echo"]
    assert [r.get("tool") for r in records[len(records) // 2:][:2]] == ["[redacted]"] * 2
    shapes = [r.get("shape") for r in records]
    assert shapes[0] == {"name": "str", "arguments": {"text": "str"}}
    assert shapes[len(records) // 2] == {"name": "str", "arguments": {"[redacted]": "str"}}
    assert not any('"text":' in json.dumps(shape) for shape in shapes[len(records) // 2:])
    assert [r.get("latency_ms") for r in records[10:12]] == [62.5, 62.5]   # id 1: 5 later


def test_new_redaction_rules_reach_the_helper(tmp_path: Path) -> None:
    # Rules replaced after the helper started: the frames queued after the change are
    # written with the new rules (the helper got its rules once, at spawn, before).
    from mcpsync.gateway._redact import Redactor

    log = tmp_path / "rules.log"
    inspector = Inspector(log, helper=True)
    line = (b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
            b'"arguments":{"customer":"x"}}}')
    inspector.record_line(("host->gateway",), line % 1, "up")
    deadline = time.monotonic() + 10
    while not log.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    inspector.redactor = Redactor(extra_patterns=["echo", "^customer$"])
    inspector.record_line(("host->gateway",), line % 2, "up")
    inspector.record("host->gateway", line % 3, upstream="up")
    inspector.close()
    assert inspector._helper is not None and inspector._helper._proc.returncode == 0
    records = [json.loads(text) for text in log.read_bytes().splitlines()]
    assert [(r["id"], r["tool"], r["shape"]["arguments"]) for r in records] == [
        (1, "echo", {"customer": "str"}),
        (2, "[redacted]", {"[redacted]": "str"}),
        (3, "[redacted]", {"[redacted]": "str"})]


class _LambdaRules(Redactor):
    """Rules holding a lambda: they cannot be pickled, so never reach a helper."""

    def __init__(self) -> None:
        super().__init__(extra_patterns=["echo"])
        self.hook = lambda text: text


class _DuckRules:
    """Rules by duck typing, not a Redactor: the helper cannot use them."""

    enabled = True

    def text(self, value: str) -> str:
        return value


def _wait_for_lines(log: Path, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(log.read_bytes().splitlines()) < count and time.monotonic() < deadline:
        time.sleep(0.01)


def test_rules_the_helper_cannot_load_are_refused_where_they_are_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A class of the program's __main__ pickles here but not in the helper: refused too.
    main_rules = type("MainRules", (Redactor,), {"__module__": "__main__"})
    monkeypatch.setattr(sys.modules["__main__"], "MainRules", main_rules, raising=False)
    inspector = Inspector(tmp_path / "a.log", helper=True)
    old = inspector.redactor
    try:
        with pytest.raises(ValueError, match="picklable") as info:
            inspector.redactor = _LambdaRules()
        assert "cannot be sent" in str(info.value)
        with pytest.raises(ValueError, match=r"defined in __main__.*importable module"):
            inspector.redactor = main_rules()
        with pytest.raises(TypeError, match="not a Redactor"):
            inspector.redactor = _DuckRules()  # type: ignore[assignment]
        assert inspector.redactor is old and inspector.enabled
    finally:
        inspector.close()
    assert inspector._helper is not None and inspector._helper._proc.returncode == 0
    for rules in (_LambdaRules(), main_rules()):
        with pytest.raises(ValueError, match="Redactor, or a subclass"):
            Inspector(tmp_path / "b.log", helper=True, redactor=rules)
    assert not (tmp_path / "b.log").exists()
    # In this process any rules do: nothing is sent.
    inspector = Inspector(tmp_path / "c.log")
    inspector.redactor = _LambdaRules()
    inspector.close()


def test_rules_that_cannot_be_sent_give_the_log_up_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The setter's check is passed by (an attribute set behind its back): the log thread
    # gives the log up with one message, rather than failing on every batch.
    log = tmp_path / "g.log"
    inspector = Inspector(log, helper=True)
    inspector.record_line(TO_UPSTREAM, _call(1), "demo")
    _wait_for_lines(log, 2)
    with caplog.at_level(logging.WARNING, logger="mcpsync"):
        inspector._redactor = _LambdaRules()
        deadline = time.monotonic() + 10
        rid = 2
        while inspector.enabled and time.monotonic() < deadline:
            inspector.record_line(TO_UPSTREAM, _call(rid), "demo")
            rid += 1
            time.sleep(0.01)
        assert not inspector.enabled
        for rid in range(100, 110):
            inspector.record_line(TO_UPSTREAM, _call(rid), "demo")
        inspector.close()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "could not be sent" in said[0] and "given up" in said[0], said
    assert inspector._helper is not None and inspector._helper._proc.returncode == 0
    assert len(log.read_bytes().splitlines()) == 2


@pytest.mark.parametrize("rules", [_DuckRules(), {"enabled": True}], ids=["class", "dict"])
def test_rules_the_helper_cannot_load_end_its_log_with_a_message(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], rules: Any) -> None:
    # Past the setter's check (set behind its back): the helper must not write on with
    # its old rules. A class it cannot import fails to load; a dict loads but is no rules.
    log = tmp_path / "g.log"
    inspector = Inspector(log, helper=True)
    inspector.record_line(TO_UPSTREAM, _call(1), "demo")
    _wait_for_lines(log, 2)
    inspector._redactor = rules
    for rid in range(2, 5):
        inspector.record_line(TO_UPSTREAM, _call(rid), "demo")
        time.sleep(0.05)
    inspector.close()
    assert inspector._helper is not None and inspector._helper._proc.returncode == 3
    assert len(log.read_bytes().splitlines()) == 2   # nothing written with the old rules
    err = capfd.readouterr().err
    assert "the log is given up" in err and "can import" in err, err
    assert ("could not be loaded" if rules.__class__ is _DuckRules else "not a Redactor") in err


@pytest.mark.parametrize(("helper", "detail"),
                         [(True, "full"), (True, "summary"), (False, "full"),
                          (False, "summary")])
def test_rules_changed_in_place_apply_to_the_next_frames(
        tmp_path: Path, helper: bool, detail: Any) -> None:
    # ``redactor.enabled = True`` on the rules in use (no new object): the frames queued
    # after it are redacted, their tool name too (names redacted before were remembered).
    log = tmp_path / "g.log"
    inspector = Inspector(log, helper=helper, detail=detail,
                          redactor=Redactor(enabled=False))
    secret = "sk-live4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c"

    def call(rid: int) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                           "params": {"name": secret, "arguments": {"text": secret}}}).encode()
    inspector.record_line(TO_UPSTREAM, call(1), "demo")
    _wait_for_lines(log, 2)
    inspector.redactor.enabled = True
    inspector.record_line(TO_UPSTREAM, call(2), "demo")
    inspector.close()
    assert inspector._helper is None or inspector._helper._proc.returncode == 0
    lines = log.read_bytes().splitlines()
    assert len(lines) == 4 and secret.encode() in lines[0]
    assert not any(secret.encode() in line for line in lines[2:]), lines[2:]


@pytest.mark.parametrize("helper", [True, False])
@pytest.mark.parametrize("way", ["line", "frame", "full"])
def test_an_answer_after_new_rules_does_not_carry_what_they_hide(
        tmp_path: Path, helper: bool, way: str) -> None:
    # A request written before the rules change, its answer queued after: the answer's
    # lines no longer name the tool the new rules hide (it was kept redacted by the old).
    log = tmp_path / "g.log"
    inspector = Inspector(log, helper=helper, detail="full" if way == "full" else "summary")
    answer = b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}'

    def record(legs: tuple[str, ...], frame: bytes) -> None:
        if way == "line":
            inspector.record_line(legs, frame, "demo")
        else:
            inspector.record_frame(legs, parse_envelope(frame), "demo")
    record(TO_UPSTREAM, _call(1))
    _wait_for_lines(log, 2)
    inspector.redactor = Redactor(extra_patterns=["echo"])
    record(("upstream->gateway", "gateway->host"), answer)
    inspector.close()
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    assert [r.get("tool") for r in records] == ["echo", "echo", None, None]
    assert [r["method"] for r in records] == ["tools/call"] * 4
    assert all("latency_ms" in r for r in records[2:])
