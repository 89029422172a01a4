"""How well the traffic log's random-word guess tells tokens from names (a measurement, not a
speed benchmark).

The gateway's redaction (``mcpsync/gateway/_redact.py``) replaces a run of 20+ base64url
characters that looks random: that is how a token or an authorization code stored under a
name that is not a secret one is kept out of a log. This counts, for the current rules and
with ``--baseline DIR`` for the copy of the package in DIR in the same run:

- **misses**: random tokens left readable by ``Redactor().text(token)``. Tokens are made as
  ``secrets.token_urlsafe(n)`` and ``secrets.token_hex(n)`` make them, from a seeded
  generator so that a run is repeatable. Digitless tokens (0.07% of 43-character ones, 2.4%
  of 22-character ones) are counted apart: they are drawn directly from the base64url
  alphabet without digits (a random token conditioned on having no digit is exactly
  that), thousands per length. ``Bearer <digitless token>`` is checked with the
  random-word guess off, so that the scheme pattern alone is measured;
- **false positives**: text that is changed though it holds no secret: the names of 20+
  characters in the standard library's source (``tokenize`` over ``Lib/**/*.py`` of this
  Python; site-packages apart), camel-case joins of 3 to 6 words of the licence texts in
  ``/usr/share/common-licenses`` (if present; no word list is downloaded), the paths of the
  files under this Python's prefix, the URLs in its sources, and UUIDs.

Run from the project root::

    .venv/bin/python benchmarks/redact_random_words.py [--tokens 200000] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import os
import random
import re
import string
import sys
import sysconfig
import time
import tokenize
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
DIGITLESS = string.ascii_letters + "-_"
LICENCES = Path("/usr/share/common-licenses")


def _load(package_root: Path, label: str) -> ModuleType:
    """``_redact`` of the package under ``package_root`` (it imports only the standard
    library, so it loads on its own)."""
    spec = importlib.util.spec_from_file_location(
        f"_redact_{label}", package_root / "mcpsync" / "gateway" / "_redact.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _urlsafe(rng: random.Random, nbytes: int) -> str:
    return base64.urlsafe_b64encode(rng.randbytes(nbytes)).rstrip(b"=").decode()


def _names(root: Path, skip_site: bool) -> set[str]:
    names: set[str] = set()
    for path in root.rglob("*.py"):
        if skip_site and "site-packages" in path.parts:
            continue
        try:
            with path.open("rb") as fh:
                names.update(tok.string for tok in tokenize.tokenize(fh.readline)
                             if tok.type == tokenize.NAME and len(tok.string) >= 20
                             and tok.string.isascii())
        except (SyntaxError, UnicodeDecodeError, tokenize.TokenError, OSError):
            continue
    return names


def _digitless_mixed(word: str) -> bool:
    return (not any(c.isdigit() for c in word) and any(c.islower() for c in word)
            and any(c.isupper() for c in word))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=200_000,
                        help="random tokens per size (default 200,000)")
    parser.add_argument("--digitless", type=int, default=20_000,
                        help="digitless tokens per length (default 20,000)")
    parser.add_argument("--seed", type=int, default=20261206)
    parser.add_argument("--baseline", metavar="DIR", help="a copy of main's package")
    parser.add_argument("--show", type=int, default=0,
                        help="print up to N of the names taken for random")
    args = parser.parse_args(argv)
    sides = {"now": _load(ROOT, "now")}
    if args.baseline:
        sides["base"] = _load(Path(args.baseline), "base")
    rules = {label: module.Redactor() for label, module in sides.items()}
    bare = {label: module.Redactor(entropy=False) for label, module in sides.items()}
    print("load average", os.getloadavg(), "| columns:", ", ".join(rules))

    def row(title: str, hit: Callable[[str, str], bool], items: list[str]) -> None:
        cells = []
        for label in rules:
            found = sum(hit(label, item) for item in items)
            total = len(items)
            cells.append(f"{label} {found:>7}/{total:<7} {found / max(total, 1):8.4%}")
        print(f"  {title:<44}" + "   ".join(cells))

    def missed(label: str, token: str) -> bool:
        return token in str(rules[label].text(token))

    def changed(label: str, text: str) -> bool:
        return bool(rules[label].text(text) != text)

    rng = random.Random(args.seed)
    print("misses (random tokens left readable)")
    for nbytes in (16, 24, 32, 48):
        tokens = [_urlsafe(rng, nbytes) for _ in range(args.tokens)]
        row(f"token_urlsafe({nbytes}) ({len(tokens[0])} chars)", missed, tokens)
        no_digit = [t for t in tokens if not any(c.isdigit() for c in t)]
        row("  of which digitless", missed, no_digit)
    for nbytes in (10, 16, 32):
        tokens = [rng.randbytes(nbytes).hex() for _ in range(args.tokens)]
        row(f"token_hex({nbytes}) ({2 * nbytes} chars)", missed, tokens)
        row("  digitless (a-f only)", missed,
            ["".join(rng.choices("abcdef", k=2 * nbytes)) for _ in range(args.digitless)])
    for length in (20, 22, 24, 28, 32, 43, 64):
        row(f"digitless base64url, {length} chars", missed,
            ["".join(rng.choices(DIGITLESS, k=length)) for _ in range(args.digitless)])
    for length in (8, 12, 16, 22, 32, 43):
        tokens = ["".join(rng.choices(DIGITLESS, k=length)) for _ in range(args.digitless)]
        row(f"'Bearer <digitless {length}>', guess off", lambda label, t: t in bare[label].text(
            f"sent Bearer {t} upstream"), tokens)

    print("false positives (text changed that holds no secret)")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    started = time.perf_counter()
    std_names = sorted(_names(stdlib, skip_site=True))
    site_names = sorted(_names(stdlib / "site-packages", skip_site=False) - set(std_names))
    print(f"  (names read in {time.perf_counter() - started:.1f} s)")
    for title, names in (("stdlib names, 20+ chars", std_names),
                         ("site-packages names, 20+ chars", site_names)):
        row(title, changed, names)
        row("  of which without digits", changed,
            [n for n in names if not any(c.isdigit() for c in n)])
        row("  of which digitless, both cases", changed,
            [n for n in names if _digitless_mixed(n)])
    if args.show:
        taken = [n for n in std_names + site_names
                 if _digitless_mixed(n) and changed("now", n)]
        print("  taken for random now:", ", ".join(taken[:args.show]))
    if LICENCES.is_dir():
        words = sorted({w for f in LICENCES.iterdir() if f.is_file()
                        for w in re.findall(r"[A-Za-z]{3,}", f.read_text(errors="replace"))})
        # (none of their words has 20 letters: the joins are the test)
        joins = []
        for _ in range(args.digitless * 5):
            parts = [w.lower() for w in rng.sample(words, rng.randint(3, 6))]
            first = parts[0] if rng.random() < 0.5 else parts[0].capitalize()
            joins.append(first + "".join(p.capitalize() for p in parts[1:]))
        row("camel-case joins of 3-6 licence words", changed,
            [j for j in joins if len(j) >= 20])
    else:
        print(f"  ({LICENCES} is missing: no English words measured)")
    paths: list[str] = []
    for base in (Path(sys.prefix), Path("/usr/share")):
        for dirpath, _dirs, files in os.walk(base):
            paths.extend(os.path.join(dirpath, f) for f in files)
            if len(paths) > 300_000:
                break
    row("file paths (this Python, /usr/share)", changed, sorted(set(paths)))
    urls: set[str] = set()
    for path in stdlib.rglob("*.py"):
        try:
            urls.update(re.findall(r"https?://[^\s\"'<>()\\`]+", path.read_text(errors="replace")))
        except OSError:
            continue
    row("URLs in this Python's sources", changed, sorted(urls))
    row("UUIDs (uuid4, lower case)", changed,
        [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(args.digitless)])

    print("CPU per Redactor().text() of a digitless camel-case name (us)")
    sample = [n for n in std_names if _digitless_mixed(n)]
    for label, redactor in rules.items():
        started = time.process_time()
        for _ in range(20):
            for name in sample:
                redactor.text(name)
        print(f"  {label}: {(time.process_time() - started) / 20 / len(sample) * 1e6:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
