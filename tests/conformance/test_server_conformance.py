"""The official MCP conformance suite against mcpsync's server, over Streamable HTTP.

``tests/conformance/server.py --port P`` runs in a subprocess for the whole module; the suite
then judges it in a few sets, each ONE Node process run once per session (a module-scoped
fixture), its results written with ``-o DIR``:

- ``2025-11-25`` and ``2026-07-28``: suite 0.2.0-alpha.12 with ``--requirements R``, the
  scenarios that revision scores plus the ones it runs without scoring (pending, added after
  release, and the tasks extension);
- ``0.1.16``: every server scenario suite 0.1.16 lists (``--suite all``: its active suite
  leaves out the two it calls pending, ``json-schema-2020-12`` and ``server-sse-polling``);
- ``skills``: the ``sep-2640-skills-*`` scenarios of 0.2.0-alpha.12, which no requirement set
  runs; the suite takes one ``--scenario`` per process, so this set is one process each.

One pytest test per (set, scenario), parametrized over what the suite lists, so a new
scenario shows up as a new test. The suite's exit status is no verdict here (in server mode
it ignores WARNINGs, under ``--requirements`` an unscored scenario cannot fail it, and an
inapplicable scenario exits 0), so each scenario's own ``checks.json``
(``DIR/server-<scenario>-<timestamp>/checks.json``) is judged: a scenario **passes** only
with at least one SUCCESS, no FAILURE, no WARNING, and no SKIPPED check that calls itself not
applicable. Scenarios in ``NOT_IMPLEMENTED`` must fail (a strict xfail: one that starts
passing fails its test, so the list stays current).

Node 22 and the suites come from ``.ci/install-conformance.sh`` (``.conformance/`` or
``$MCPSYNC_CONFORMANCE_DIR``); missing, the tests fail under ``CI=true`` and skip elsewhere.
Select them with ``-m conformance``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from server_expectations import COVERED, SCENARIOS
from test_conformance import (
    CONFORMANCE_DIR,
    IN_CI,
    ROOT,
    entry_point,
    missing_tooling,
    node,
    suite,
)

HERE = Path(__file__).resolve().parent
NEW_SUITE = "0.2.0-alpha.12"
OLD_SUITE = "0.1.16"
SKILLS = "skills"
# A whole set takes 2-5 s here; the suite's own per-scenario timeout is 30 s.
SET_TIMEOUT = 180.0
START_TIMEOUT = 30.0
_LISTING_FORMAT = "server-v1"

# Extensions mcpsync.Server does not serve: every one must fail today (none left).
NOT_IMPLEMENTED: dict[str, str] = {}
# Scenarios the suite ships as placeholders that record one SKIPPED check and nothing else:
# they can never pass. What they stand for is proven by our own tests, named here.
PLACEHOLDERS = {
    "tasks-status-notifications": "a placeholder in the suite (one SKIPPED check); "
                                  "notifications/tasks on subscriptions/listen is proven by "
                                  "tests/server/test_server_tasks.py",
}
# Work under way elsewhere: these fail until it lands, then the entry goes.
IN_PROGRESS: dict[str, str] = {}   # scenarios being built: strict expected failures
# Unscored by the requirement sets, but mcpsync must pass them anyway.
CORE_UNSCORED = ("http-header-validation", "http-custom-header-server-validation",
                 "json-schema-2020-12", "server-sse-polling", "server-session-lifecycle")

_LISTED = re.compile(r"^\s+- (\S+)(?: \[[^\]]*\])?\s*$")
_UNSCORED = re.compile(r"^\s+- (\S+) \[server\]\s*$")
_RESULT_DIR = re.compile(r"^server-(.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$")
_RUNNING = re.compile(r"^=== Running scenario: (\S+) ===$", re.MULTILINE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NOT_APPLICABLE = re.compile(r"not applicable", re.IGNORECASE)


# --- judging one scenario --------------------------------------------------------------------

@dataclass
class Verdict:
    """What a scenario's ``checks.json`` says, and whether that counts as a pass."""

    checks: list[dict[str, Any]]

    def count(self, status: str) -> int:
        return sum(1 for check in self.checks if check.get("status") == status)

    def inapplicable(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if c.get("status") == "SKIPPED"
                and _NOT_APPLICABLE.search(f"{c.get('errorMessage')} {c.get('description')} "
                                           f"{json.dumps(c.get('details'))}")]

    @property
    def passed(self) -> bool:
        return (self.count("SUCCESS") > 0 and self.count("FAILURE") == 0
                and self.count("WARNING") == 0 and not self.inapplicable())

    def report(self) -> str:
        counts = ", ".join(f"{self.count(s)} {s}" for s in
                           ("SUCCESS", "FAILURE", "WARNING", "SKIPPED", "INFO"))
        lines = [f"checks: {counts}"]
        if not self.checks:
            lines.append("no checks.json: the suite did not run the scenario")
        elif self.count("SUCCESS") == 0:
            lines.append("no SUCCESS check: the run verified nothing")
        bad = [c for c in self.checks
               if c.get("status") in ("FAILURE", "WARNING") or c in self.inapplicable()]
        if not bad and not self.passed:
            bad = self.checks
        lines += [f"  {c.get('status')} [{c.get('id')}]: "
                  f"{c.get('errorMessage') or c.get('description')}" for c in bad]
        return "\n".join(lines)


def judge(checks: list[dict[str, Any]]) -> Verdict:
    return Verdict(checks)


# --- which scenarios each set runs -----------------------------------------------------------

def _section(output: str, start: str) -> list[str]:
    """The ``  - name`` lines of the block that begins with the line starting ``start``."""
    names: list[str] = []
    inside = False
    for line in output.splitlines():
        if line.startswith(start):
            inside = True
        elif inside:
            match = _LISTED.match(line)
            if match:
                names.append(match.group(1))
            elif line.strip():
                break
    return names


def _required(revision: str) -> list[str]:
    """``list --server --requirements R``: the scored server scenarios, then the unscored
    server ones (``[server]`` under "Run and reported, but never scored")."""
    done = suite(NEW_SUITE, "list", "--server", "--requirements", revision)
    if done.returncode != 0:
        raise RuntimeError(f"`conformance list --server --requirements {revision}` failed:\n"
                           f"{done.stdout}{done.stderr}")
    names = _section(done.stdout, "Server scenarios")
    tail = done.stdout.split("never scored", 1)[1] if "never scored" in done.stdout else ""
    names += [m.group(1) for line in tail.splitlines() if (m := _UNSCORED.match(line))]
    if not names:
        raise RuntimeError(f"`conformance list --requirements {revision}` listed no server "
                           f"scenarios:\n{done.stdout}")
    return names


def _listed(version: str) -> list[str]:
    done = suite(version, "list", "--server")
    names = _section(done.stdout, "Server scenarios")
    if done.returncode != 0 or not names:
        raise RuntimeError(f"`conformance list --server` ({version}) failed or listed "
                           f"nothing:\n{done.stdout}{done.stderr}")
    return names


def _query() -> dict[str, list[str]]:
    return {"2025-11-25": _required("2025-11-25"), "2026-07-28": _required("2026-07-28"),
            OLD_SUITE: _listed(OLD_SUITE),
            SKILLS: [n for n in _listed(NEW_SUITE) if n.startswith("sep-2640-skills-")]}


def listings() -> dict[str, list[str]]:
    """Each set's scenarios, cached next to the new suite (asking Node costs ~0.7 s each)."""
    stamps = [entry_point(v).stat() for v in (NEW_SUITE, OLD_SUITE)]
    key = ":".join([_LISTING_FORMAT, *(f"{s.st_size}:{s.st_mtime_ns}" for s in stamps),
                    str(node().stat().st_mtime_ns)])
    cache = CONFORMANCE_DIR / f"suite-{NEW_SUITE}" / "server-scenarios.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        cached = json.loads(cache.read_text())
        if cached.get("key") == key:
            return {str(k): [str(n) for n in v] for k, v in cached["sets"].items()}
    found = _query()
    with contextlib.suppress(OSError):
        cache.write_text(json.dumps({"key": key, "sets": found}))
    return found


@dataclass(frozen=True)
class Case:
    set: str
    scenario: str | None
    problem: str | None = None


def _problem() -> str | None:
    for version in (NEW_SUITE, OLD_SUITE):
        problem = missing_tooling(version)
        if problem is not None:
            return problem
    return None


def _cases() -> Iterator[Any]:
    problem = _problem()
    if problem is not None:
        yield pytest.param(Case("all", None, problem), id="missing")
        return
    try:
        sets = listings()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        yield pytest.param(Case("all", None, f"broken install: {exc}"), id="broken")
        return
    for name, scenarios in sets.items():
        for scenario in scenarios:
            marks = []
            if scenario in NOT_IMPLEMENTED:
                marks.append(pytest.mark.xfail(strict=True, reason=NOT_IMPLEMENTED[scenario]))
            elif scenario in PLACEHOLDERS:
                marks.append(pytest.mark.xfail(strict=True, reason=PLACEHOLDERS[scenario]))
            elif scenario in IN_PROGRESS:
                marks.append(pytest.mark.xfail(strict=True, reason=IN_PROGRESS[scenario]))
            yield pytest.param(Case(name, scenario), id=f"{name}-{scenario}", marks=marks)


def _unavailable(problem: str) -> None:
    if IN_CI or problem.startswith("broken install"):
        pytest.fail(f"conformance tooling unusable: {problem}")
    pytest.skip(problem)


# --- the server under test and the runs ------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    """True once the server gives any HTTP answer on /mcp."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/mcp", headers={"Accept": "text/event-stream"})
        conn.getresponse().read()
        return True
    except OSError:
        return False
    finally:
        conn.close()


@dataclass
class FixtureServer:
    url: str
    log: Path
    proc: subprocess.Popen[bytes]

    def stderr(self) -> str:
        text = self.log.read_text(errors="replace")
        return text if len(text) < 6000 else "...\n" + text[-6000:]


@contextlib.contextmanager
def fixture_server(folder: Path) -> Iterator[FixtureServer]:
    port = _free_port()
    log = folder / "server.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, str(HERE / "server.py"), "--port", str(port)],
                                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
    server = FixtureServer(f"http://127.0.0.1:{port}/mcp", log, proc)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers(port):
            if proc.poll() is not None:
                raise RuntimeError(f"the fixture server exited ({proc.returncode}):\n"
                                   f"{server.stderr()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the fixture server did not answer on port {port} in "
                                   f"{START_TIMEOUT} s:\n{server.stderr()}")
            time.sleep(0.05)   # polling a socket that is not listening yet
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)   # serve_http stops cleanly on Ctrl-C
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@dataclass
class SetRun:
    """One set's Node processes: their output and each scenario's checks."""

    name: str
    seconds: float = 0.0
    exits: list[int] = field(default_factory=list)
    output: str = ""
    ran: list[str] = field(default_factory=list)
    checks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def collect_checks(out: Path) -> dict[str, list[dict[str, Any]]]:
    """``out/server-<scenario>-<timestamp>/checks.json`` -> {scenario: checks}."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out.glob("*/checks.json")):
        match = _RESULT_DIR.match(path.parent.name)
        if match:
            found.setdefault(match.group(1), []).extend(json.loads(path.read_text()))
    return found


def run_set(name: str, url: str, scenarios: list[str], folder: Path) -> SetRun:
    if name in ("2025-11-25", "2026-07-28"):
        commands = [(NEW_SUITE, ["--requirements", name])]
    elif name == OLD_SUITE:
        commands = [(OLD_SUITE, ["--suite", "all"])]
    else:
        commands = [(NEW_SUITE, ["--scenario", s]) for s in scenarios]
    result = SetRun(name)
    out = folder / name
    started = time.monotonic()
    for version, args in commands:
        done = suite(version, "server", "--url", url, *args, "-o", str(out),
                     timeout=SET_TIMEOUT)
        result.exits.append(done.returncode)
        result.output += _ANSI.sub("", done.stdout + done.stderr)
    result.seconds = time.monotonic() - started
    result.ran = _RUNNING.findall(result.output) or list(scenarios)
    result.checks = collect_checks(out)
    return result


class Runs:
    """The server and every set, each set run the first time a test asks for it."""

    def __init__(self, server: FixtureServer, folder: Path, sets: dict[str, list[str]]):
        self.server, self.folder, self.sets = server, folder, sets
        self.done: dict[str, SetRun] = {}

    def get(self, name: str) -> SetRun:
        if name not in self.done:
            self.done[name] = run_set(name, self.server.url, self.sets[name], self.folder)
        return self.done[name]


@pytest.fixture(scope="module")
def runs() -> Iterator[Runs]:
    problem = _problem()
    if problem is not None:
        _unavailable(problem)
    with tempfile.TemporaryDirectory(prefix="mcpsync-server-conformance-") as folder, \
            fixture_server(Path(folder)) as server:
        yield Runs(server, Path(folder), listings())


# --- the tests -------------------------------------------------------------------------------

@pytest.mark.conformance
@pytest.mark.timeout(SET_TIMEOUT + START_TIMEOUT + 30)
@pytest.mark.parametrize("case", list(_cases()))
def test_server_scenario(case: Case, runs: Runs) -> None:
    if case.problem is not None or case.scenario is None:
        _unavailable(case.problem or "no scenario")
        return
    done = runs.get(case.set)
    verdict = judge(done.checks.get(case.scenario, []))
    assert verdict.passed, (
        f"conformance {case.set}: {case.scenario} failed against {runs.server.url}\n"
        f"{verdict.report()}\n--- server stderr ---\n{runs.server.stderr()}")


@pytest.mark.conformance
@pytest.mark.timeout(4 * SET_TIMEOUT)
def test_every_scenario_a_set_ran_is_judged_and_the_core_ones_are_in(runs: Runs) -> None:
    """Nothing runs unjudged, the core unscored scenarios are among the tests, and each set
    took no more than a few seconds."""
    for name, scenarios in runs.sets.items():
        done = runs.get(name)
        unjudged = set(done.ran) - set(scenarios)
        assert not unjudged, f"{name}: run but not among the tests: {sorted(unjudged)}"
        assert set(done.checks) <= set(scenarios), f"{name}: {sorted(done.checks)}"
        assert done.seconds < 60, f"{name} took {done.seconds:.1f} s"
    judged = {s for names in runs.sets.values() for s in names}
    assert set(CORE_UNSCORED) <= judged, sorted(set(CORE_UNSCORED) - judged)
    assert set(NOT_IMPLEMENTED) <= judged, sorted(set(NOT_IMPLEMENTED) - judged)


def test_the_expectations_table_says_what_the_runs_judge() -> None:
    """``server_expectations.SCENARIOS``' status column agrees with this file: an extension
    status exactly for ``NOT_IMPLEMENTED``, a "needs ..." status exactly for ``IN_PROGRESS``,
    ``covered`` for everything else."""
    for scenario, row in SCENARIOS.items():
        status = row["status"]
        if scenario in NOT_IMPLEMENTED:
            assert status.startswith("extension: "), (scenario, status)
        elif scenario in PLACEHOLDERS:
            assert status.startswith("suite placeholder"), (scenario, status)
        elif scenario in IN_PROGRESS:
            assert status.startswith("needs "), (scenario, status)
        else:
            assert status == COVERED, (scenario, status)
    assert set(NOT_IMPLEMENTED) | set(PLACEHOLDERS) | set(IN_PROGRESS) <= set(SCENARIOS)


def test_a_run_whose_checks_were_all_info_or_skipped_does_not_pass() -> None:
    ok = {"id": "a", "status": "SUCCESS"}
    assert judge([ok]).passed
    assert judge([ok, {"id": "i", "status": "INFO"}]).passed
    assert not judge([]).passed
    assert not judge([{"id": "i", "status": "INFO"}, {"id": "s", "status": "SKIPPED"}]).passed
    assert not judge([ok, {"id": "w", "status": "WARNING"}]).passed
    assert not judge([ok, {"id": "f", "status": "FAILURE", "errorMessage": "x"}]).passed
    # What the skills scenarios record for a server without the extension: one schema check
    # succeeds, everything else is SKIPPED as not applicable, and the suite exits 0.
    inapplicable = {"id": "s", "status": "SKIPPED",
                    "errorMessage": "Server did not declare the extension; checks not "
                                    "applicable."}
    assert not judge([ok, inapplicable]).passed
    assert judge([ok, {"id": "s", "status": "SKIPPED", "errorMessage": "optional"}]).passed
    report = judge([ok, {"id": "f", "status": "FAILURE", "errorMessage": "bad header"}]).report()
    assert "FAILURE [f]: bad header" in report and "1 SUCCESS" in report


def test_result_folders_map_to_scenario_names(tmp_path: Path) -> None:
    for folder, checks in (("server-server-initialize-2026-12-01T15-22-45-951Z", [1]),
                           ("server-tools-call-image-2026-12-01T15-22-47-231Z", [2]),
                           ("not-a-result", [3])):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "checks.json").write_text(json.dumps(checks))
    assert collect_checks(tmp_path) == {"server-initialize": [1], "tools-call-image": [2]}


def test_requirement_listings_are_parsed_with_the_unscored_server_scenarios() -> None:
    listing = ("Required for 2026-07-28 (69 scenarios):\n\nServer scenarios (test against a "
               "server):\n  - server-stateless\n  - caching\n\nClient scenarios (test against "
               "a client):\n  - tools_call\n\nRun and reported, but never scored:\n  extension"
               " (2):\n    - auth/dpop [client]\n    - tasks-lifecycle [server]\n  pending (1)"
               ":\n    - http-header-validation [server]\n")
    assert _section(listing, "Server scenarios") == ["server-stateless", "caching"]
    tail = listing.split("never scored", 1)[1]
    assert [m.group(1) for line in tail.splitlines() if (m := _UNSCORED.match(line))] == [
        "tasks-lifecycle", "http-header-validation"]

