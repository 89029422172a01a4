"""The conformance suite's client scenarios with the gateway in the middle: the suite's mock
server is the gateway's one HTTP upstream, our conformance client the host over stdio
(``tests/gateway/peers/conformance_via_gateway.py``). Each must end as it does without the
gateway.

Which runs: every non-auth (scenario, revision) pair that ``tests/conformance/test_conformance.py``
runs directly, for every suite version it runs (0.1.16 and 0.2.0-alpha.12), taken from the
same listing of the suite (``conformance list --client`` plus the ``--requirements`` sets), so
a scenario a new suite adds is run here too without editing this file. ``LEFT_OUT`` names the
pairs that cannot work through a stdio-front gateway, each with its reason; it is empty today
and a test keeps it honest (every entry a real scenario, nothing else missing).

The ``auth/*`` scenarios are not among them by nature: they judge the OAuth flow the *client*
runs against the mock's authorization server, and through the gateway the host never sees that
server (the gateway holds the upstream's credentials and speaks stdio to the host, which has
nothing to authorize); the gateway's own OAuth is tested in ``test_gateway_oauth.py``.

"The same result" is checked strictly: each pair runs directly and through the gateway, and
the two runs must record the same checks with the same statuses (and the pass, or the failure
``expected-failures.yml`` lists). The runs go three at a time on ``mcpsync-`` threads (each
thread one suite subprocess, which starts Node, our client and, through the gateway, a gateway
process); ``sse-retry`` runs alone afterwards, since it judges a reconnect window of a few
hundred milliseconds. The 50 runs take about 45 s on two idle cores (about 90 s of CPU),
120-140 s when the two cores are shared with five other test jobs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conformance.test_conformance import (
    ANSI,
    CLIENT,
    EXTENSION,
    ROOT,
    RUN_TIMEOUT,
    SUITES,
    Outcome,
    entry_point,
    expected_failure,
    listing,
    missing_tooling,
    node,
    suite_env,
)

from mcpsync._threads import run_parallel

WRAPPER = "tests/gateway/peers/conformance_via_gateway.py"   # relative to the checkout
#: (suite version, scenario, revision) -> why it cannot run through a stdio-front gateway.
LEFT_OUT: dict[tuple[str, str, str], str] = {}
#: Run alone, after the others: it times the client's reconnect, so no other run may load the CPU.
ALONE = frozenset({"sse-retry"})
PARALLEL = 3
#: The whole test's budget: every run bounded by RUN_TIMEOUT, three at a time, plus the alone ones.
BUDGET = 240.0


@dataclass(frozen=True)
class Run:
    version: str
    scenario: str
    revision: str

    def __str__(self) -> str:
        return f"{self.version} {self.scenario} at {self.revision}"


def _runs(version: str) -> list[Run]:
    """The non-auth pairs the direct conformance test runs for this suite version."""
    return [Run(version, scenario, revision) for scenario, revision in listing(version).runs
            if not scenario.startswith("auth/")]


def _available() -> list[str]:
    problems = [problem for version in SUITES if (problem := missing_tooling(version))]
    if problems:
        pytest.skip("; ".join(problems))
    return list(SUITES)


@dataclass
class Result:
    outcome: Outcome
    log: list[dict[str, Any]]    # the gateway's traffic log (empty for a direct run)


def _suite_run(run: Run, via_gateway: bool) -> Result:
    """One ``conformance client`` run: our client directly, or through the gateway wrapper
    (whose traffic log lands in a temporary file named by the environment)."""
    with tempfile.TemporaryDirectory(prefix="mcpsync-gw-conformance-") as out:
        command = WRAPPER if via_gateway else CLIENT
        args = ["client", "--scenario", run.scenario, "--command",
                f"{sys.executable} {command}", "--timeout", "30000", "-o", out]
        if run.revision != EXTENSION:
            args += ["--spec-version", run.revision]
        log = Path(out) / "gateway-traffic.jsonl"
        env = {**suite_env(), "MCPSYNC_GATEWAY_CONFORMANCE_LOG": str(log)}
        try:
            done = subprocess.run([str(node()), str(entry_point(run.version)), *args], cwd=ROOT,
                                  env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
            returncode, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            returncode, output = -1, f"did not finish in {RUN_TIMEOUT} s: {exc}"
        checks: list[dict[str, Any]] = []
        for found in sorted(Path(out).rglob("checks.json")):
            checks += json.loads(found.read_text())
        records = [json.loads(line) for line in log.read_text().splitlines()] \
            if log.exists() else []
        return Result(Outcome(returncode, ANSI.sub("", output), checks), records)


def _checks(outcome: Outcome) -> Counter[tuple[str, str]]:
    return Counter((str(c.get("id")), str(c.get("status"))) for c in outcome.checks)


def _judge(run: Run, direct: Result, gateway: Result) -> str | None:
    """What is wrong with this pair's gateway run, or None when it matches the direct one."""
    if not any(r.get("dir") == "gateway->upstream" and r.get("upstream") == "mock"
               for r in gateway.log):
        return f"{run}: the gateway logged no call to the mock\n{gateway.outcome.report()}"
    reason = expected_failure(run.version, run.scenario)
    for how, result in (("directly", direct), ("through the gateway", gateway)):
        if reason is None and not result.outcome.passed:
            return f"{run} fails {how}\n{result.outcome.report()}"
        if reason is not None and result.outcome.passed:
            return f"{run} passes {how} but is listed as failing ({reason})"
    mine, theirs = _checks(gateway.outcome), _checks(direct.outcome)
    if mine != theirs:
        return (f"{run}: other checks through the gateway\n"
                f"  only directly: {sorted(theirs - mine)}\n"
                f"  only through the gateway: {sorted(mine - theirs)}\n"
                f"{gateway.outcome.report()}")
    return None


@pytest.mark.conformance
def test_every_non_auth_scenario_is_run_or_left_out_with_a_reason() -> None:
    """The runs come from the suite's own listing; ``LEFT_OUT`` only names real pairs."""
    listed = {run for version in _available() for run in _runs(version)}
    assert {"initialize", "tools_call", "sse-retry"} <= {run.scenario for run in listed}
    for (version, scenario, revision), reason in LEFT_OUT.items():
        assert Run(version, scenario, revision) in listed, f"{scenario}: not a listed pair"
        assert reason, f"{scenario}: left out without a reason"
    assert all(not run.scenario.startswith("auth/") for run in listed)


@pytest.mark.conformance
@pytest.mark.timeout(BUDGET + 60)
def test_every_non_auth_scenario_through_the_gateway() -> None:
    runs = [run for version in _available() for run in _runs(version)
            if (run.version, run.scenario, run.revision) not in LEFT_OUT]
    legs = [(run, via) for run in runs if run.scenario not in ALONE for via in (False, True)]
    results, unfinished = run_parallel(lambda leg: _suite_run(*leg), legs,
                                       what="test-conformance", limit=PARALLEL, timeout=BUDGET)
    assert not unfinished, f"unfinished: {[str(legs[i][0]) for i in unfinished]}"
    found: dict[tuple[Run, bool], Result] = {}
    for leg, result in zip(legs, results, strict=True):
        if isinstance(result, BaseException):
            raise result
        assert result is not None
        found[leg] = result
    for run in runs:
        if run.scenario in ALONE:
            for via in (False, True):
                found[(run, via)] = _suite_run(run, via)
    problems = [problem for run in runs
                if (problem := _judge(run, found[(run, False)], found[(run, True)]))]
    assert not problems, f"{len(problems)} of {len(runs)} differ:\n" + "\n\n".join(problems)


def test_a_gateway_run_that_differs_from_the_direct_one_is_caught() -> None:
    """Both pass, but one check is missing through the gateway; or the gateway was bypassed."""
    run = Run("0.2.0-alpha.12", "tools_call", "2025-11-25")
    both = [{"id": "tool-add-numbers", "status": "SUCCESS"},
            {"id": "wire-schema-valid", "status": "SUCCESS"}]
    crossed = [{"dir": "gateway->upstream", "upstream": "mock"}]
    direct = Result(Outcome(0, "", both), [])
    assert _judge(run, direct, Result(Outcome(0, "", both), crossed)) is None
    fewer = _judge(run, direct, Result(Outcome(0, "", both[:1]), crossed))
    assert fewer is not None and "wire-schema-valid" in fewer
    assert "logged no call" in str(_judge(run, direct, Result(Outcome(0, "", both), [])))
    failed = Result(Outcome(1, "", both), crossed)
    assert "fails through the gateway" in str(_judge(run, direct, failed))
