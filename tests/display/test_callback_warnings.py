"""A raising user callback surfaces as ``mcpsync.CallbackWarning`` when logging is not set up.

The main scenario runs in a fresh interpreter: pytest itself installs logging handlers, and
the point is what a plain script (or a notebook) sees with no logging configured at all.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import mcpsync
from mcpsync.server import Context, Server

SCRIPT = r'''
import json, threading, time, warnings
import mcpsync
from mcpsync.server import Context, Server

server = Server("cbs", "1.0")

@server.tool()
def work(ctx: Context) -> str:
    ctx.progress(1, 2, "half")
    ctx.progress(2, 2, "done")
    ctx.log("warning", "careful")
    return "worked"

@server.tool()
def ask(ctx: Context) -> str:
    try:
        ctx.sample("hi", max_tokens=5)
    except Exception as exc:
        return f"sampling failed: {type(exc).__name__}"
    return "sampled"

def bad_progress(progress, total, message):
    raise ZeroDivisionError("progress went wrong")

def bad_log(level, logger, data):
    raise KeyError("no log today")

def bad_sampling(request):
    raise ValueError("x" * 500)

def refusing_elicitation(request):
    raise mcpsync.Rejected("no thanks")

def bad_list_changed(kind):
    raise RuntimeError(f"cannot refresh {kind}")

def bad_notification(method, params):
    raise LookupError("observer is broken")

def fresh() -> str:
    """A tool added while serving."""
    return "fresh"

results = []
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    with mcpsync.connect(server, era="legacy", log_level="info", on_log=bad_log,
                         sampling=bad_sampling, elicitation=refusing_elicitation) as client:
        for _ in range(2):
            results.append(client.call_tool("work", progress=bad_progress).text)
            results.append(client.call_tool("ask").text)
        changed = threading.Event()
        client.on_list_changed("tools", bad_list_changed)
        client.on_list_changed("tools", lambda kind: changed.set())
        server.add_tool(fresh)
        for _ in range(500):     # the announcement comes after the add, on its own thread
            if any("list-changed" in str(w.message) for w in seen):
                break
            time.sleep(0.01)
    with mcpsync.connect(server, era="legacy", log_level="info",
                         notification_observer=bad_notification) as c2:
        c2.call_tool("work")
print(json.dumps({"results": results,
                  "warnings": [[w.category.__name__, str(w.message)] for w in seen]}))
'''


def test_each_failing_callback_warns_once_without_logging(tmp_path: Path) -> None:
    script = tmp_path / "callbacks.py"
    script.write_text(SCRIPT, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # the calls themselves are untouched by their callbacks' failures
    assert out["results"] == ["worked", "sampling failed: RemoteError"] * 2
    found = out["warnings"]
    assert all(kind == "CallbackWarning" for kind, _ in found), found
    texts = sorted(text for _, text in found)
    # progress, on_log, sampling once each over two calls; a list-changed subscription; the
    # second client's notification_observer, which every notification reaches
    assert len(texts) == 5, texts
    progress, log, sampling, changed, observer = (
        next(t for t in texts if f"the {name} callback" in t)
        for name in ("progress", "on_log", "sampling", "list-changed subscription",
                     "notification_observer"))
    assert "RuntimeError: cannot refresh tools" in changed
    assert "LookupError: observer is broken" in observer
    assert "server 'cbs'" in progress and "ZeroDivisionError: progress went wrong" in progress
    assert "KeyError: 'no log today'" in log
    assert "ValueError: xxx" in sampling and len(sampling) < 400 and "…" in sampling
    assert "Rejected" not in " ".join(texts)


def test_no_warning_when_logging_shows_the_failure(caplog: pytest.LogCaptureFixture) -> None:
    server = Server("logged", "1.0")

    @server.tool()
    def work(ctx: Context) -> str:
        ctx.progress(1, 1, "all")
        return "worked"

    def bad_progress(progress: float, total: float | None, message: str | None) -> None:
        raise ZeroDivisionError("progress went wrong")

    caplog.set_level(logging.WARNING, logger="mcpsync")
    with warnings.catch_warnings(record=True) as seen, mcpsync.connect(server) as client:
        warnings.simplefilter("always")
        assert client.call_tool("work", progress=bad_progress).text == "worked"
    assert not [w for w in seen if w.category is mcpsync.CallbackWarning]
    assert any(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in caplog.records)


def test_callback_warning_is_a_runtime_warning() -> None:
    assert issubclass(mcpsync.CallbackWarning, RuntimeWarning)
    assert "CallbackWarning" in mcpsync.__all__
