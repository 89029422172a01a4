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
  random-word guess off, so that the scheme pattern alone is measured, and so are
  ``Basic <random letters of one case>`` (8 to 20) and single-case tokens under 20
  characters after ``Bearer``; AWS key ids of letters only after ``Bearer``;
- misses of single-case tokens: random lower-case and upper-case letters, lower-case
  letters and digits, base32 (``A-Z2-7``, one-time-password seeds) of 20 to 32 characters,
  and hex of 20 to 28 digits; and of tokens joined to words in one run
  (``my_application_refresh_token_for_the_user_<token>``, ``session-<token>``,
  ``<token>_for_the_user``: ``-`` and ``_`` do not end a run);
- **false positives**: text that is changed though it holds no secret: the names of 20+
  characters in the standard library's source (``tokenize`` over ``Lib/**/*.py`` of this
  Python; site-packages apart), camel-case joins of 3 to 6 words of the licence texts in
  ``/usr/share/common-licenses`` (if present; no word list is downloaded), the paths of the
  files under this Python's prefix, the URLs in its sources, and UUIDs; snake_case,
  kebab-case and SCREAMING_CASE joins of 3 to 6 licence words; every auth scheme word
  followed by a word of 8+ letters in the standard library's sources, ``/usr/share/doc``
  and this repository's docs but the inspector page, whose examples are credentials
  (prose: "Basic authentication"), and ``Basic`` before each word of 8+ letters of the
  licence texts, with the guess off; the distinct runs of 20+ base64url characters in the
  string literals and comments of the standard library (its test suite, full of made-up
  keys, left out); numbers as ``json.dumps`` writes them (random large and small doubles,
  integers of 20 to 120 digits);
- the CPU time of ``Redactor().text()`` on a digitless camel-case name and on a tool result
  of about 450 KB (JSON of the standard library's modules: paths, long names, docstrings).

Run from the project root::

    .venv/bin/python benchmarks/redact_random_words.py [--tokens 200000] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
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


# the redaction's candidates for the random-word guess (its _RUN)
_RUN = re.compile(r"[A-Za-z0-9_\-+]{20,}={0,2}")


def _names(root: Path, skip_site: bool, literals: set[str] | None = None) -> set[str]:
    """The names of 20+ characters in the sources under ``root``; with ``literals``, also
    the runs of 20+ base64url characters in their string literals and comments, the test
    suite's left out (it is full of made-up keys), into that set."""
    names: set[str] = set()
    for path in root.rglob("*.py"):
        if skip_site and "site-packages" in path.parts:
            continue
        try:
            with path.open("rb") as fh:
                for tok in tokenize.tokenize(fh.readline):
                    if tok.type == tokenize.NAME:
                        if len(tok.string) >= 20 and tok.string.isascii():
                            names.add(tok.string)
                    elif literals is not None and "test" not in path.parts \
                            and tok.type in (tokenize.STRING, tokenize.COMMENT):
                        literals.update(_RUN.findall(tok.string))
        except (SyntaxError, UnicodeDecodeError, tokenize.TokenError, OSError):
            continue
    return names


def _digitless_mixed(word: str) -> bool:
    return (not any(c.isdigit() for c in word) and any(c.islower() for c in word)
            and any(c.isupper() for c in word))


def _single_case(word: str) -> bool:
    return any(c.isalpha() for c in word) and not (any(c.islower() for c in word)
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
    for alphabet, shape in ((string.ascii_lowercase, "lower-case"),
                            (string.ascii_uppercase, "upper-case")):
        for length in (8, 12, 16, 20):
            tokens = ["".join(rng.choices(alphabet, k=length)) for _ in range(args.digitless)]
            row(f"'Basic <{shape} letters {length}>', guess off",
                lambda label, t: t in bare[label].text(f"sent Basic {t} upstream"), tokens)
    # a key of letters only after a scheme word: its own pattern finds it wherever the
    # letters read like English (kept as prose); rows added later draw from generators of
    # their own, so that the earlier rows' draws (and counts) stay as they were
    added = random.Random(args.seed + 1)
    keys = ["AKIA" + "".join(added.choices(string.ascii_uppercase, k=16))
            for _ in range(args.digitless)]
    row("'Bearer AKIA<16 upper-case letters>'", lambda label, k: k in rules[label].text(
        f"X-Upstream: Bearer {k}"), keys)
    # single-case tokens: the letters of a base32 secret (one-time-password seeds) and of
    # lower-case random ids, with digits and without
    for alphabet, shape in ((string.ascii_lowercase, "lower-case letters"),
                            (string.ascii_uppercase, "upper-case letters"),
                            (string.ascii_lowercase + string.digits, "lower-case letters+digits"),
                            (string.ascii_uppercase + "234567", "base32 (A-Z, 2-7)")):
        for length in (16, 20, 24, 32):
            tokens = ["".join(rng.choices(alphabet, k=length)) for _ in range(args.digitless)]
            if length < 20:
                # under 20 characters only an auth scheme before it can tell
                row(f"{shape}, {length}, after 'Bearer', guess off",
                    lambda label, t: t in bare[label].text(f"Bearer {t}"), tokens)
                continue
            row(f"{shape}, {length} chars", missed, tokens)
    for length in (20, 24, 28):
        row(f"lower-case hex, {length} digits", missed,
            [rng.randbytes(16).hex()[:length] for _ in range(args.digitless)])
    # a token joined to words in one run ('-' and '_' do not end a run)
    kinds = {"digitless 22": lambda: "".join(rng.choices(DIGITLESS, k=22)),
             "token_urlsafe(16)": lambda: _urlsafe(rng, 16),
             "lower-case letters 24": lambda: "".join(rng.choices(string.ascii_lowercase, k=24))}
    for head, tail, title in (("my_application_refresh_token_for_the_user_", "", "words_<"),
                              ("session-", "", "session-<"), ("", "_for_the_user", "<")):
        for kind, make in kinds.items():
            tokens = [make() for _ in range(args.digitless)]
            row(f"'{title}{kind}>{tail}'", lambda label, t, h=head, e=tail:
                t in rules[label].text(f"{h}{t}{e}"), tokens)

    print("false positives (text changed that holds no secret)")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    started = time.perf_counter()
    std_literals: set[str] = set()
    std_names = sorted(_names(stdlib, skip_site=True, literals=std_literals))
    site_names = sorted(_names(stdlib / "site-packages", skip_site=False) - set(std_names))
    print(f"  (names read in {time.perf_counter() - started:.1f} s)")
    for title, names in (("stdlib names, 20+ chars", std_names),
                         ("site-packages names, 20+ chars", site_names)):
        row(title, changed, names)
        row("  of which without digits", changed,
            [n for n in names if not any(c.isdigit() for c in n)])
        row("  of which digitless, both cases", changed,
            [n for n in names if _digitless_mixed(n)])
        row("  of which one case (snake_case, SCREAMING_CASE)", changed,
            [n for n in names if _single_case(n)])
    if args.show:
        taken = [n for n in std_names + site_names
                 if _digitless_mixed(n) and changed("now", n)]
        print("  taken for random now:", ", ".join(taken[:args.show]))
        taken = [n for n in std_names + site_names if _single_case(n) and changed("now", n)
                 and not any(changed(label, n) for label in rules if label != "now")]
        print("  single-case names taken for random now only:", ", ".join(taken[:args.show]))
    # prose: every auth scheme word followed by a word of 8+ letters in the standard library's
    # sources (docstrings, comments) and in the documentation under /usr/share/doc
    scheme = re.compile(r"\b(?i:bearer|basic|dpop)\s+[A-Za-z]{8,}\b")
    prose: list[str] = []
    docs = {".txt", ".md", ".rst", ".html", ""}
    for base, suffixes in ((stdlib, {".py"}), (Path("/usr/share/doc"), docs),
                           (ROOT / "docs", {".md"})):
        for path in base.rglob("*"):
            # (the inspector page's examples of what is redacted are credentials)
            if path.suffix in suffixes and path.is_file() and path.name != "gateway-inspector.md":
                try:
                    prose.extend(scheme.findall(path.read_text(errors="replace")))
                except OSError:
                    continue
    row("'Basic|Bearer|DPoP <word>' in prose, guess off", lambda label, t: bare[label].text(t) != t,
        prose)
    if args.show:
        print("  changed now:", sorted({t for t in prose if bare["now"].text(t) != t})[:args.show])
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
        snakes = []
        for _ in range(args.digitless * 5):
            parts = [w.lower() for w in rng.sample(words, rng.randint(3, 6))]
            joined = rng.choice("_-").join(parts)
            snakes.append(joined.upper() if rng.random() < 0.3 else joined)
        row("snake/kebab/SCREAMING joins of 3-6 words", changed,
            [j for j in snakes if len(j) >= 20])
        long_words = sorted({w for f in LICENCES.iterdir() if f.is_file()
                             for w in re.findall(r"[A-Za-z]{8,}", f.read_text(errors="replace"))})
        row("'Basic <licence word of 8+ letters>', guess off",
            lambda label, w: bare[label].text(f"Basic {w}") != f"Basic {w}", long_words)
        if args.show:
            print("  changed now:", [w for w in long_words
                                     if bare["now"].text(f"Basic {w}") != f"Basic {w}"][:args.show])
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
    literals = sorted(std_literals)
    row("runs in stdlib string literals, comments", changed, literals)
    if args.show:
        print("  changed now only:", [r for r in literals if changed("now", r) and not any(
            changed(label, r) for label in rules if label != "now")][:args.show])
    # numbers as JSON writes them: a large double is a run of digits, 'e' and the exponent
    row("JSON doubles 1e16..1e300 (json.dumps)", changed,
        [json.dumps(added.random() * 10 ** added.randint(16, 300))
         for _ in range(args.digitless)])
    row("JSON doubles -1e-5..-1e-300 (json.dumps)", changed,
        [json.dumps(-added.random() * 10.0 ** -added.randint(5, 300))
         for _ in range(args.digitless)])
    row("JSON integers of 20 to 120 digits", changed,
        [json.dumps(added.randrange(10 ** 19, 10 ** added.randint(20, 120)))
         for _ in range(args.digitless)])

    print("CPU per Redactor().text() of a digitless camel-case name (us)")
    sample = [n for n in std_names if _digitless_mixed(n)]
    for label, redactor in rules.items():
        started = time.process_time()
        for _ in range(20):
            for name in sample:
                redactor.text(name)
        print(f"  {label}: {(time.process_time() - started) / 20 / len(sample) * 1e6:.2f}")

    # a large tool result: JSON of the standard library's modules, each with its path, its
    # long names and its docstring (identifiers, paths and prose, about 400 KB)
    entries = []
    for path in sorted(stdlib.glob("*.py"))[:150]:
        text = path.read_text(errors="replace")
        doc = re.search(r'"""(.*?)"""', text, re.S)
        entries.append({"path": str(path), "names": sorted(set(
            re.findall(r"\b[A-Za-z_][A-Za-z0-9_]{11,}\b", text)))[:60],
            "doc": doc[1] if doc else ""})
    result = json.dumps({"content": [{"type": "text", "text": json.dumps(entries)}],
                         "structuredContent": {"modules": entries}})
    print(f"CPU per Redactor().text() of a {len(result) // 1000} KB tool result (ms)")
    for label, redactor in rules.items():
        started = time.process_time()
        for _ in range(10):
            redactor.text(result)
        print(f"  {label}: {(time.process_time() - started) / 10 * 1e3:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
