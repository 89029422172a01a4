"""Rebuild the English letter-pair odds table of the gateway's redaction (``_PAIR_ODDS_ROWS``
in ``mcpsync/gateway/_redact.py``) from this Python's standard library, and check it against
the module's.

The table says how much likelier each of the 676 lower-case letter pairs is in English as
programs write it than in random letters. It is counted here as it was built: every word of
lower-case letters only (``\\b[a-z]+\\b``) in every string literal and comment (``tokenize``
STRING and COMMENT tokens) of ``Lib/**/*.py`` (site-packages left out, the test suite in),
each pair of adjacent letters inside a word counted once per occurrence; the digit for pair
``ab`` is ``round(5 + log2(count(ab) / all pairs * 676))`` kept to 0..9, and 0 for a pair
never seen. The module's table was made with CPython 3.11.7's standard library; another
version's gives a slightly different table.

Run from the project root::

    .venv/bin/python benchmarks/redact_pair_table.py           # print the rows
    .venv/bin/python benchmarks/redact_pair_table.py --check   # compare with the module's
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
import string
import sys
import sysconfig
import tokenize
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORD = re.compile(r"\b[a-z]+\b")


def count_pairs(stdlib: Path) -> Counter[str]:
    """The letter pairs of the lower-case words in the string literals and comments of the
    standard library under ``stdlib`` (site-packages left out)."""
    counts: Counter[str] = Counter()
    for path in sorted(stdlib.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        try:
            # all of a file's tokens or none (a file that does not tokenize is left out)
            with path.open("rb") as fh:
                tokens = list(tokenize.tokenize(fh.readline))
        except (SyntaxError, UnicodeDecodeError, tokenize.TokenError, OSError):
            continue
        for tok in tokens:
            if tok.type in (tokenize.STRING, tokenize.COMMENT):
                for word in WORD.findall(tok.string):
                    counts.update(map(str.__add__, word, word[1:]))
    return counts


def table(counts: Counter[str]) -> dict[str, str]:
    """Row letter -> the 26 digits of its row, as ``_PAIR_ODDS_ROWS`` writes them."""
    total = sum(counts.values())
    rows = {}
    for first in string.ascii_lowercase:
        digits = []
        for second in string.ascii_lowercase:
            seen = counts[first + second]
            digit = 0 if seen == 0 else max(0, min(9, round(5 + math.log2(seen / total * 676))))
            digits.append(str(digit))
        rows[first] = "".join(digits)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the module's table; exit 1 if a cell differs")
    args = parser.parse_args(argv)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    counts = count_pairs(stdlib)
    rows = table(counts)
    print(f"# {sum(counts.values())} pairs counted in {stdlib} (Python {sys.version.split()[0]})")
    if not args.check:
        for first, row in rows.items():
            print(f"    {first} {row}")
        return 0
    spec = importlib.util.spec_from_file_location(
        "_redact", ROOT / "mcpsync" / "gateway" / "_redact.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    theirs = dict(line.split() for line in module._PAIR_ODDS_ROWS.split("\n") if line.strip())
    differ = [f"{a}{b}: {rows[a][i]} here, {theirs[a][i]} in the module"
              for a in string.ascii_lowercase for i, b in enumerate(string.ascii_lowercase)
              if rows[a][i] != theirs[a][i]]
    print(f"{len(differ)} of 676 cells differ from the module's table")
    for line in differ:
        print("  ", line)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
