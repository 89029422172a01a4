"""Import time of mcpsync's client against the official MCP SDK's (a benchmark, not a test).

Each figure is the median, over several fresh interpreters, of the wall time (and the CPU
time, which a busy machine inflates less) of the import statements themselves (the
interpreter's own start-up, ``site`` included, is not counted), in two conditions:

- **cached**: with bytecode. Every interpreter runs with ``-X pycache_prefix=DIR``, a fresh
  temporary directory that one untimed run fills first; so the figure does not depend on
  whatever ``__pycache__`` directories the machine happens to have (or on
  ``PYTHONDONTWRITEBYTECODE`` being set around it).
- **uncached**: no bytecode for the packages (mcpsync's own modules; the SDK and its
  dependencies), the standard library's in place: each interpreter gets a fresh copy of that
  cache with everything outside the standard library removed, and
  ``PYTHONDONTWRITEBYTECODE=1``. This is a fresh checkout or an install that compiled
  nothing: each side compiles its own code.
- **cold**: no bytecode at all. Each interpreter gets an empty ``-X pycache_prefix``: every
  module it imports, the standard library's included, is compiled from source.

What is imported:

- ``mcpsync``: ``import mcpsync`` alone;
- ``mcpsync client``: ``mcpsync`` plus ``mcpsync.client`` and the two transports a
  connection loads (``mcpsync.transport.stdio``, ``mcpsync.transport.http``);
- ``official client``: ``mcp.client.session``, ``mcp.client.stdio`` and
  ``mcp.client.streamable_http`` of the ``mcp`` package, if installed.

Run: ``python benchmarks/import_time.py [--runs 9] [--json]``. ``python -X importtime -c 'import
mcpsync.client'`` then shows which module costs what.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile

SETS: dict[str, list[str]] = {
    "mcpsync": ["mcpsync"],
    "mcpsync client": ["mcpsync", "mcpsync.client", "mcpsync.transport.stdio",
                       "mcpsync.transport.http"],
    "official client": ["mcp.client.session", "mcp.client.stdio",
                        "mcp.client.streamable_http"],
}


def _code(modules: list[str]) -> str:
    imports = "; ".join(f"import {m}" for m in modules)
    return ("import time; t, c = time.perf_counter(), time.process_time(); " + imports +
            "; print((time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000)")


def _one(modules: list[str], prefix: str, *, write: bool) -> tuple[float, float]:
    """Wall and CPU milliseconds of the imports in one fresh interpreter with that bytecode
    prefix."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = subprocess.run([sys.executable, "-X", f"pycache_prefix={prefix}", "-c",
                           _code(modules)], env=env, capture_output=True, text=True,
                          check=True)
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def _stdlib_only(cache: str, into: str) -> None:
    """Copy the standard library's part of a bytecode cache (the prefix mirrors the sources'
    absolute paths), leaving out every ``site-packages`` below it."""
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    source = os.path.join(cache, stdlib.lstrip(os.sep))
    if os.path.isdir(source):
        shutil.copytree(source, os.path.join(into, stdlib.lstrip(os.sep)),
                        ignore=shutil.ignore_patterns("site-packages"))


def measure(modules: list[str], runs: int) -> dict[str, float]:
    """Median wall and CPU milliseconds in each condition (see the module docstring)."""
    times: dict[str, list[tuple[float, float]]] = {"cached": [], "uncached": [], "cold": []}
    with tempfile.TemporaryDirectory(prefix="mcpsync-import-") as work:
        cache = os.path.join(work, "cache")
        _one(modules, cache, write=True)   # fills the cache; not timed
        for n in range(runs):   # interleaved, so that all three see the same load
            times["cached"].append(_one(modules, cache, write=False))
            partial = os.path.join(work, f"stdlib-{n}")
            _stdlib_only(cache, partial)
            times["uncached"].append(_one(modules, partial, write=False))
            empty = os.path.join(work, f"empty-{n}")
            os.mkdir(empty)
            times["cold"].append(_one(modules, empty, write=False))
    out: dict[str, float] = {}
    for condition, pairs in times.items():
        out[condition] = statistics.median(w for w, _ in pairs)
        out[f"{condition} CPU"] = statistics.median(c for _, c in pairs)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--json", action="store_true", help="print the medians as JSON")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    for label, modules in SETS.items():
        if importlib.util.find_spec(modules[0].split(".")[0]) is None:
            print(f"{label}: not installed, skipped")
            continue
        results[label] = measure(modules, args.runs)
    if args.json:
        print(json.dumps({"runs": args.runs, "medians": results}))
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.runs} fresh interpreters each, medians, ms, load average {load:.2f}")
    official = results.get("official client")
    keys = ("cached", "cached CPU", "uncached", "uncached CPU", "cold", "cold CPU")
    print(f"{'imports':<16}" + "".join(f" {k:>12} {'x off.':>6}" for k in keys))
    for label, r in results.items():
        print(f"{label:<16}" + "".join(
            f" {r[k]:12.1f} " + (f"{r[k] / official[k]:6.3f}" if official else f"{'-':>6}")
            for k in keys))

if __name__ == "__main__":
    main()
