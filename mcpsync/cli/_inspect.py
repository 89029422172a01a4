"""``mcpsync inspect FILE [FILE.1 ...]``: a summary of the gateway's traffic log.

The log is JSON lines written by the gateway's inspector (``mcpsync gateway --log FILE``).
The summary is counted from one vantage point so a call is not counted twice: the host's
(the requests the host sent and the answers it got, refusals included), or the upstreams'
when the log holds no answer to the host. A line that is not a JSON object (a last line cut
short by a crash, say) is skipped and counted; rotated files are read like any other, in the
order given. ``dropped`` records (frames the gateway's log thread could not keep up with) are
added up and reported.

Latency percentiles use the nearest-rank method: p90 is the smallest latency at least 90% of
the answered calls did not exceed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from mcpsync.cli._context import _Context
from mcpsync.cli._errors import EXIT_USAGE, CLIError
from mcpsync.cli._output import _json_doc, _Outcome, _table

_PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
# The vantage points: (the direction of requests, the direction of their answers).
_HOST_LEG = ("host->gateway", "gateway->host")
_UPSTREAM_LEG = ("gateway->upstream", "upstream->gateway")


def _records(paths: Sequence[str], skipped: list[str]) -> Iterator[dict[str, Any]]:
    """Every JSON-object line of every file; ``FILE:LINE`` of each other line into
    ``skipped``."""
    for path in paths:
        try:
            handle = open(path, "rb")   # noqa: SIM115 - closed below, errors worded first
        except FileNotFoundError:
            raise CLIError(f"inspector log {path!r} does not exist (give the file passed to "
                           f"'mcpsync gateway --log')", EXIT_USAGE) from None
        except OSError as exc:
            raise CLIError(f"cannot read inspector log {path!r}: {exc.strerror}",
                           EXIT_USAGE) from None
        with handle:
            for number, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw)
                except ValueError:
                    record = None
                if isinstance(record, dict):
                    yield record
                else:
                    skipped.append(f"{path}:{number}")


def _percentile(ordered: Sequence[float], q: float) -> float:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarize(paths: Sequence[str]) -> dict[str, Any]:
    """The summary of the logs at ``paths`` as a JSON-ready dict (what ``--json`` prints)."""
    skipped: list[str] = []
    records = list(_records(paths, skipped))
    answered_host = any(r.get("dir") == _HOST_LEG[1] and r.get("kind") == "response"
                        for r in records)
    requests_dir, answers_dir = _HOST_LEG if answered_host or not records else _UPSTREAM_LEG
    methods: Counter[str] = Counter()
    errors: Counter[int] = Counter()
    refusals: Counter[str] = Counter()
    tools: dict[tuple[str, str], dict[str, Any]] = {}

    def row(record: dict[str, Any]) -> dict[str, Any]:
        key = (str(record.get("upstream") or "-"), str(record.get("tool")))
        if key not in tools:
            tools[key] = {"upstream": key[0], "tool": key[1], "calls": 0, "ok": 0,
                          "tool_errors": 0, "errors": 0, "refused": 0, "latencies": []}
        return tools[key]

    dropped = 0
    for record in records:
        direction, kind = record.get("dir"), record.get("kind")
        if kind == "dropped" and isinstance(record.get("count"), int):
            dropped += record["count"]   # frames the gateway could not log in time
        if direction == requests_dir and kind == "request":
            methods[str(record.get("method"))] += 1
            if record.get("method") == "tools/call":
                row(record)["calls"] += 1
        if direction != answers_dir or kind != "response":
            continue
        outcome = record.get("outcome")
        code = record.get("code")
        if outcome == "error" and isinstance(code, int):
            errors[code] += 1
        elif outcome == "refused":
            refusals[str(record.get("refusal"))] += 1
        if record.get("method") != "tools/call":
            continue
        entry = row(record)
        entry[{"ok": "ok", "tool_error": "tool_errors", "refused": "refused"}.get(
            str(outcome), "errors")] += 1
        latency = record.get("latency_ms")
        if isinstance(latency, (int, float)) and not isinstance(latency, bool):
            entry["latencies"].append(float(latency))
    rows = []
    for key in sorted(tools):
        entry = tools[key]
        ordered = sorted(entry.pop("latencies"))
        entry["latency_ms"] = ({name: _percentile(ordered, q) for name, q in _PERCENTILES}
                               if ordered else None)
        rows.append(entry)
    times = [r["time"] for r in records if isinstance(r.get("time"), str)]
    return {
        "files": list(paths),
        "records": len(records),
        "skipped_lines": skipped,
        "vantage": "host" if requests_dir == _HOST_LEG[0] else "upstream",
        "first": min(times) if times else None,
        "last": max(times) if times else None,
        "requests": dict(sorted(methods.items())),
        "tools": rows,
        "errors": {str(code): n for code, n in sorted(errors.items())},
        "refusals": dict(sorted(refusals.items())),
        "dropped_frames": dropped,
    }


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _render(summary: dict[str, Any]) -> str:
    skipped = summary["skipped_lines"]
    head = (f"{summary['records']} records in {len(summary['files'])} file"
            f"{'s' if len(summary['files']) != 1 else ''}")
    if summary["first"]:
        head += f", {summary['first']} to {summary['last']}"
    head += f"; counted as the {summary['vantage']} saw them"
    parts = [head + "\n"]
    if skipped:
        parts.append(f"skipped {len(skipped)} unreadable line{'s' if len(skipped) > 1 else ''}"
                     f" (first at {skipped[0]})\n")
    if summary["dropped_frames"]:
        parts.append(f"{summary['dropped_frames']} frames were not logged (the gateway's log "
                     "thread fell behind); the counts below miss them\n")
    if summary["tools"]:
        cells = []
        for t in summary["tools"]:
            lat = t["latency_ms"] or {}
            cells.append((t["upstream"], t["tool"], str(t["calls"]), str(t["ok"]),
                          str(t["tool_errors"]), str(t["errors"]), str(t["refused"]),
                          _ms(lat.get("p50")), _ms(lat.get("p90")), _ms(lat.get("p99"))))
        parts.append("\ntool calls (latency in ms)\n" + _table(
            ("UPSTREAM", "TOOL", "CALLS", "OK", "TOOL-ERR", "ERRORS", "REFUSED", "P50", "P90",
             "P99"), cells))
    else:
        parts.append("\nno tool calls\n")
    if summary["requests"]:
        parts.append("\nrequests by method\n" + _table(
            ("METHOD", "COUNT"), [(m, str(n)) for m, n in summary["requests"].items()]))
    if summary["errors"]:
        parts.append("\nerrors by code\n" + _table(
            ("CODE", "COUNT"), [(c, str(n)) for c, n in summary["errors"].items()]))
    if summary["refusals"]:
        importlib.import_module("mcpsync.gateway._inspector")
        from mcpsync.gateway._inspector import REFUSALS

        codes = {kind: code for code, kind in REFUSALS.items()}
        parts.append("\nrefusals by kind\n" + _table(
            ("KIND", "CODE", "COUNT"), [(k, str(codes.get(k, "")), str(n))
                                        for k, n in summary["refusals"].items()]))
    return "".join(parts)


def _cmd_inspect(args: argparse.Namespace, ctx: _Context) -> _Outcome:
    paths = list(dict.fromkeys(args.files))   # a file named twice is read once
    summary = summarize(paths)
    return _Outcome(_json_doc(summary) if ctx.json else _render(summary))
