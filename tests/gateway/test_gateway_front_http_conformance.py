"""The conformance suite's required server scenarios against the gateway's HTTP front.

The command ``mcpsync gateway --http`` runs with our conformance server
(``tests/conformance/server.py --stdio``) as its one upstream, so every legacy session the
suite opens starts a conformance server process of its own and every 2026-07-28 request
goes to the shared one. The suite runs the sets ``2025-11-25`` and ``2026-07-28`` (its
``--requirements`` runs: the scored scenarios and the unscored ones it runs anyway), each one
Node process, and every scenario is judged as ``tests/conformance/test_server_conformance.py``
judges the server alone: a pass needs a SUCCESS, no FAILURE, no WARNING, and no SKIPPED
check calling itself not applicable. The results must be the server's own: every scenario
passes except the suite's placeholders, which never can, and one the gateway cannot mirror
(listed in ``GATEWAY_DIFFERS``, a strict expected failure, with why).

Time: both sets take about 50 s here (2 cores, loaded); each set is bounded by
``SET_TIMEOUT`` (180 s).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.front_http_helpers import Command, write_config

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
sys.path.insert(0, str(CONFORMANCE))   # the server suite's module imports its neighbours

from test_server_conformance import (  # noqa: E402
    PLACEHOLDERS,
    SET_TIMEOUT,
    Runs,
    _problem,
    _unavailable,
    judge,
    listings,
)

SETS = ("2025-11-25", "2026-07-28")
#: Scenarios whose result differs through the gateway, and why.
GATEWAY_DIFFERS = {
    "server-sse-polling": "the tool closes its own reply stream (SSE polling) with "
                          "ctx.close_stream, which a stdio upstream cannot do; the gateway "
                          "has no stream of the tool's to mirror, so the reply stays one "
                          "stream (the suite runs it unscored)",
}


class _GatewayServer:
    """What ``Runs`` needs of the server under test: its URL and its log."""

    def __init__(self, command: Command) -> None:
        self.url = command.url
        self._command = command

    def stderr(self) -> str:
        text = self._command.text()
        return text if len(text) < 6000 else "...\n" + text[-6000:]


def _cases() -> Iterator[Any]:
    problem = _problem()
    if problem is not None:
        yield pytest.param("", "", id="missing")
        return
    sets = listings()
    for name in SETS:
        for scenario in sets[name]:
            marks = []
            reason = PLACEHOLDERS.get(scenario) or GATEWAY_DIFFERS.get(scenario)
            if reason is not None:
                marks.append(pytest.mark.xfail(strict=True, reason=reason))
            yield pytest.param(name, scenario, id=f"{name}-{scenario}", marks=marks)


@pytest.fixture(scope="module")
def runs() -> Iterator[Runs]:
    problem = _problem()
    if problem is not None:
        _unavailable(problem)
    with tempfile.TemporaryDirectory(prefix="mcpsync-gw-http-conformance-") as folder:
        config = write_config(Path(folder), {"conformance": [
            sys.executable, str(CONFORMANCE / "server.py"), "--stdio"]})
        with Command(config, "--max-upstream-processes", "256",
                     log=Path(folder) / "gateway.log") as command:
            sets = listings()
            yield Runs(_GatewayServer(command), Path(folder),  # type: ignore[arg-type]
                       {name: sets[name] for name in SETS})


@pytest.mark.conformance
@pytest.mark.timeout(SET_TIMEOUT + 60)
@pytest.mark.parametrize(("set_name", "scenario"), list(_cases()))
def test_server_scenario_through_the_http_front(set_name: str, scenario: str,
                                                runs: Runs) -> None:
    done = runs.get(set_name)
    verdict = judge(done.checks.get(scenario, []))
    assert verdict.passed, (
        f"conformance {set_name}: {scenario} failed through the gateway's HTTP front\n"
        f"{verdict.report()}\n--- gateway log ---\n{runs.server.stderr()}")


@pytest.mark.conformance
@pytest.mark.timeout(2 * SET_TIMEOUT + 60)
def test_every_scenario_run_is_judged_and_the_sets_are_quick(runs: Runs) -> None:
    for name in SETS:
        done = runs.get(name)
        assert set(done.ran) <= set(runs.sets[name]), name
        assert set(done.checks) <= set(runs.sets[name]), name
        assert done.seconds < 120, f"{name} took {done.seconds:.1f} s"
    assert set(GATEWAY_DIFFERS) <= {s for n in SETS for s in runs.sets[n]}
