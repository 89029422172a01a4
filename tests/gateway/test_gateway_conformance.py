"""The conformance suite's client scenarios with the gateway in the middle: the suite's mock
server is the gateway's one HTTP upstream, our conformance client the host over stdio
(``tests/gateway/peers/conformance_via_gateway.py``). Each must end as it does without the
gateway: a pass, or the failure ``expected-failures.yml`` lists.

A bounded subset (each run costs a Node start and a gateway start): the non-auth scenarios of
the 0.2 suite at 2025-11-25 and at 2026-07-28.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conformance.test_conformance import (
    ANSI,
    RUN_TIMEOUT,
    Outcome,
    expected_failure,
    missing_tooling,
    suite,
)

VERSION = "0.2.0-alpha.12"
WRAPPER = "tests/gateway/peers/conformance_via_gateway.py"   # relative to the checkout
SCENARIOS = [("initialize", "2025-11-25"), ("tools_call", "2025-11-25"),
             ("elicitation-sep1034-client-defaults", "2025-11-25"),
             ("json-schema-2020-12-preservation", "2025-11-25"),
             ("sse-retry", "2025-11-25"), ("tools_call", "2026-07-28"),
             ("request-metadata", "2026-07-28"), ("sep-2322-client-request-state", "2026-07-28"),
             ("http-standard-headers", "2026-07-28"), ("http-custom-headers", "2026-07-28"),
             ("http-invalid-tool-headers", "2026-07-28")]


def _run(scenario: str, revision: str) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="mcpsync-gw-conformance-") as out:
        done = suite(VERSION, "client", "--scenario", scenario, "--command",
                     f"{sys.executable} {WRAPPER}", "--timeout", "30000", "-o", out,
                     "--spec-version", revision, timeout=RUN_TIMEOUT)
        checks: list[dict[str, Any]] = []
        for found in sorted(Path(out).rglob("checks.json")):
            checks += json.loads(found.read_text())
        return Outcome(done.returncode, ANSI.sub("", done.stdout + done.stderr), checks)


@pytest.mark.conformance
@pytest.mark.timeout(RUN_TIMEOUT + 15)
@pytest.mark.parametrize(("scenario", "revision"), SCENARIOS)
def test_scenario_through_the_gateway(scenario: str, revision: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "gateway.log"
    monkeypatch.setenv("MCPSYNC_GATEWAY_CONFORMANCE_LOG", str(log))
    problem = missing_tooling(VERSION)
    if problem is not None:
        pytest.skip(problem)
    try:
        outcome = _run(scenario, revision)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{scenario} through the gateway did not finish: {exc}")
    # The calls went through the gateway: its traffic log holds them, leg by leg.
    records = [json.loads(line) for line in log.read_text().splitlines()] \
        if log.exists() else []
    assert any(r.get("dir") == "gateway->upstream" and r.get("upstream") == "mock"
               for r in records), f"the gateway logged no call\n{outcome.report()}"
    reason = expected_failure(VERSION, scenario)
    if reason is not None:
        assert not outcome.passed, f"{scenario} passes through the gateway but is listed"
        return
    assert outcome.passed, f"{scenario} at {revision} through the gateway\n{outcome.report()}"
