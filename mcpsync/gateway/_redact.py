"""Redaction of secrets in what the gateway's inspector writes.

A traffic log is read by people who should not see the credentials that crossed the
gateway, and it outlives the session those credentials belonged to. So the inspector never
writes a value without passing it through a :class:`Redactor` first, at every detail level,
unless the user turns redaction off on purpose.

Two kinds of rule, both on by default:

- **Keys**: a value stored under a secret-sounding name is replaced whatever it looks like.
  Names are compared case- and separator-insensitively (``Access-Token``, ``accessToken``
  and ``access_token`` are one name) and a name *ending* in a secret name counts too
  (``x-api-key``, ``github_token``, ``db_password``, ``set-cookie``). The same names are
  looked for inside strings, as ``name=value`` (query strings, form bodies) and
  ``"name": "value"`` (JSON quoted in a tool's text result).
- **Values**: text that looks like a credential wherever it appears: ``Bearer ...`` and
  ``Basic ...`` credentials (of letters only too, unless they read like English prose),
  JWTs, well-known key prefixes (``sk-``, ``ghp_`` and the other GitHub prefixes, Slack
  ``xox?-``, AWS ``AKIA``/``ASIA``, Google ``AIza``, GitLab ``glpat-``), passwords in a
  URL's user info, and long random-looking words (see :func:`_looks_random`; also such a
  stretch joined to words by ``-`` or ``_``, see :func:`_unglue`), which is how an unknown
  token or authorization code is caught.

The rules are data (:class:`Redactor` takes extra names and patterns) and cheap on values
that hold nothing: one combined regular expression pass per string, and one for an auth
scheme before letters only.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["REDACTED", "SECRET_KEYS", "Redactor", "redact_for_log"]

#: What a redacted value is replaced by.
REDACTED: Final = "[redacted]"

#: The secret names, as compared: lower case, separators (``-``, ``_``, ``.``, space) removed.
SECRET_KEYS: Final = frozenset({
    "token", "password", "passwd", "passphrase", "secret", "authorization", "apikey",
    "accesstoken", "refreshtoken", "idtoken", "clientsecret", "cookie", "codeverifier",
    "privatekey", "credential", "credentials", "sessionid", "xapikey", "assertion",
})

# MCP's own names that end like a secret one but carry none.
_NOT_SECRET: Final = frozenset({"progresstoken"})

_SEPARATORS = re.compile(r"[-_.\s]")

# Credentials recognised by their look, wherever they appear in a string.
_VALUE_PATTERNS: Final = (
    # an auth scheme and a credential with a digit, a token symbol or a lower-then-upper case
    # change in it ("Basic usage" in prose is not one; letters only are _SCHEME_LETTERS'); the
    # case change is an adjacent pair: the same strings as "a lower-case letter, then an
    # upper-case one later", without the backtracking over a long run of letters that made
    # that quadratic
    r"\b(?i:bearer|basic|dpop)\s+(?=[A-Za-z0-9\-._~+/]*(?:[0-9=+/._~-]|[a-z][A-Z]))"
    r"[A-Za-z0-9\-._~+/]{8,}=*",
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
    r"\bsk-[A-Za-z0-9_-]{16,}",
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
    r"\bxox[abprse]-[A-Za-z0-9-]{10,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",
)

# The first of _VALUE_PATTERNS as earlier versions wrote it: rules they pickled hold it in
# their compiled patterns, which Redactor.__setstate__ brings up to date (the first is
# quadratic on a scheme word before a long run of letters, the second took letters only).
_EARLIER_SCHEMES: Final = (
    r"\b(?i:bearer|basic|dpop)\s+(?=[A-Za-z0-9\-._~+/]*(?:[0-9=+/._~-]|[a-z][A-Za-z]*[A-Z]))"
    r"[A-Za-z0-9\-._~+/]{8,}=*",
    r"\b(?i:bearer|basic|dpop)\s+(?:(?=[A-Za-z0-9\-._~+/]*(?:[0-9=+/._~-]|[a-z][A-Za-z]*[A-Z]))"
    r"[A-Za-z0-9\-._~+/]{8,}=*|[A-Za-z]{8,}(?![A-Za-z0-9\-._~+/=]))",
)

# An auth scheme and 8+ letters only, without a lower-then-upper case change (a word, a
# capitalised one, an acronym): a credential unless the letters read like English, which is
# prose ("Basic authentication", "the Bearer tokens"). Redactor.text applies it in a pass
# of its own after every other rule, so that prose it keeps never hides a match of theirs
# (a key, a pattern of the user's) starting inside it, and letters it redacts never take
# what a later rule needed (a URL's scheme, a secret name, a run's end). (The look-ahead
# for b, B, d or D first lets the search skip to those letters: half the cost on a long
# text.)
_SCHEME_LETTERS: Final = re.compile(
    r"(?=[bBdD])\b(?i:bearer|basic|dpop)\s+(?P<word>[A-Z]*[a-z]*)(?<=[A-Za-z]{8})"
    r"(?![A-Za-z0-9\-._~+/=])")

# ``name=value``, ``name: value``, ``"name": "value"``: the name is checked by _secret_name.
# The look-behinds here and in _USERINFO make a name start only where a run of name
# characters starts: without them, every position inside a long run (a base64 blob in a tool
# result) was tried and backtracked over the rest of it, quadratic in the run's length.
_PAIR: Final = re.compile(
    r"""(?<![A-Za-z0-9_.\-])(?P<name>[A-Za-z][A-Za-z0-9_.\-]*)(?P<q>["']?)(?P<sep>\s*[:=]\s*)"""
    r"""(?:"(?P<dq>(?:[^"\\]|\\.)*)"|'(?P<sq>[^']*)'|(?P<bare>(?:(?i:bearer|basic|dpop|token)\s+)?[^\s"'&,;#}\]]+))""")

# Passwords in a URL's user info: scheme://user:password@host
_USERINFO: Final = re.compile(r"(?<![A-Za-z0-9+.\-])(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)[^/\s@]+@")

# Candidates for the entropy check: runs of the base64url alphabet ('/' and '.' split runs so
# paths and dotted names are judged piece by piece; '=' only as padding, so ``code=...`` keeps
# its name).
_RUN: Final = re.compile(r"[A-Za-z0-9_\-+]{20,}={0,2}")


def _norm(name: str) -> str:
    return _SEPARATORS.sub("", name).lower()


def _entropy(text: str) -> float:
    counts: dict[str, int] = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


# The 150 most common letter pairs in English as programs write it (those of the lower-case
# words in the comments and docstrings of CPython 3.11's standard library), for
# _reads_like_words.
_COMMON_PAIR_LIST: Final = """
    ab ac ad ag ai al am an ap ar as at ba be bl bu ca ce ch ci ck cl co ct da de di do du ea
    ec ed ee ef el em en ep er es et ex fa ff fi fo fr ge ha he hi ho ic id ie ig il im in io
    ir is it iv ke la ld le li ll lo lt lu ly ma me mo mp na nc nd ne ng ni no ns nt ob oc od
    ol om on oo op or os ot ou ow pa pe pl po pp pr pt qu ra re rg ri rn ro rr rs rt ry se sh
    si so sp ss st su ta te th ti to tr ts tt tu ty ue ul um un up ur us ut va ve wa wh wi xt
"""
_COMMON_PAIRS: Final = frozenset(_COMMON_PAIR_LIST.split())

# How much likelier each letter pair is in English than in random letters, for
# _reads_like_english: the digit in row ``a``, column ``b`` (columns ``a`` to ``z``) is 5 plus
# log2(share of ``ab`` among the pairs of the lower-case words in the string literals and
# comments of CPython 3.11.7's standard library, site-packages left out, * 676), rounded and
# kept to 0..9 (so 0 is a pair 32 times rarer than in random letters or never seen, 9 one 16
# times more common). ``benchmarks/redact_pair_table.py`` rebuilds it and checks it.
_PAIR_ODDS_ROWS: Final = """
    a 46761461604878050888553352
    b 63527000450610530431600050
    c 71437107506620810537500020
    d 52148220700402600353500030
    e 73786652401768265887254750
    f 50125520700400700524500020
    g 40107034500414300452500001
    h 70009000600110600415300010
    i 55665660303769750688050404
    j 00005000000000200000300000
    k 30006020400203010040002000
    l 72268401700712730256612060
    m 74018000500341660041500020
    n 72787482504424730178540040
    o 35674740404678660867756201
    p 70127002501600650636400050
    q 00000000000000000000500000
    r 73459360704455730666533050
    s 50528226703323661278602050
    t 71448409801431840766604261
    u 44436440500767250777000000
    v 60007000500000300000000000
    w 52015006700203500430003000
    x 42524300400020040005000320
    y 00203000300223350055002021
    z 10005000200000100000000003
"""
# pair -> log2 odds (-5..4); a pair with the space that _reads_like_english puts between
# pieces counts 0 (and is not counted as a pair)
_PAIR_ODDS: Final = {
    **{first + second: int(digit) - 5
       for first, row in (line.split() for line in _PAIR_ODDS_ROWS.split("\n") if line.strip())
       for second, digit in zip("abcdefghijklmnopqrstuvwxyz", row, strict=True)},
    **{f"{ch} ": 0 for ch in "abcdefghijklmnopqrstuvwxyz"},
    **{f" {ch}": 0 for ch in "abcdefghijklmnopqrstuvwxyz"},
}

# The letter pieces of a single-case word (what digits and ``-``/``_``/``+`` separate).
_LETTERS: Final = re.compile(r"[a-z]+")

# Hexadecimal (a random hex key of 32 digits has less than 3.3 bits of entropy per digit
# 1.7% of the time, less than 2.9 about once in 200,000).
_HEX: Final = re.compile(r"[0-9a-f]+|[0-9A-F]+")

# The pieces of a word as camel case splits it: an acronym, a capitalised word, a lower-case
# word (``HTTPServer_nameOf`` is ``HTTP``, ``Server``, ``name``, ``Of``).
_PIECE: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")

# How much of a run _reads_like_words splits at once.
_WINDOW: Final = 4096

# _reads_like_english: the mean log2 odds per letter pair above which letters read as
# English.
# Chosen with benchmarks/redact_random_words.py: at -0.5 no word of 8+ letters after an auth
# scheme in the standard library's sources and /usr/share/doc is taken for a credential,
# and two of the 1,210 words of 8+ letters of the licence texts (``enjoyment``); at 0,
# three and nine, at -1 the misses double.
_ENGLISH_ODDS = -0.5

# The least entropy (bits per character) of a single-case run taken for random: random hex
# of 20 digits has less about once in 10,000, random letters of 20 (about 3.9 bits) almost
# never; "aaaa..." has none.
_SINGLE_CASE_BITS = 2.5


def _reads_like_words(word: str) -> bool:
    """Whether the letters of ``word`` (both cases in it) read like a name made of words
    rather than like a random token.

    Split as camel case, a name gives few pieces (one per word: about one for every five
    letters) whose letter pairs are mostly common English ones (seven in eight). A random
    base64url token changes case about every other letter, so it splits into pieces of one
    to three letters, and about four in five of the letter pairs inside them are rare in
    English. The score, rare pairs plus 1.5 per piece, is 0.26 to 0.53 per letter for nine
    in ten of the standard library's long camel-case names and 0.9 to 1.2 for nine in ten
    random tokens; 0.7 is the line. Measured with ``benchmarks/redact_random_words.py``:
    1 to 4 in 20,000 digitless random tokens of 20 to 28 characters read like words, none
    in 20,000 of 32 or more; 0.2% of the digitless camel-case names of 20+ characters in
    the standard library (5 of 2766) read as random.
    """
    if len(word) <= _WINDOW:   # nearly every word: in one piece, without the loop's cost
        pieces = _PIECE.findall(word)
        # one string, pieces apart: a pair with the space in it is not a common one
        text = " ".join(pieces).lower()
        n = len(text) - len(pieces) + 1
        common = sum(map(_COMMON_PAIRS.__contains__, map(operator.add, text, text[1:])))
        return n - len(pieces) - common + 1.5 * len(pieces) < 0.7 * n
    # A longer run is scored a window at a time, so that it (a frame may be tens of megabytes
    # of one run) never holds more than a window's pieces: the sums are the same but for the
    # pieces a window's edge cuts in two.
    score = letters = 0.0
    for start in range(0, len(word), _WINDOW):
        pieces = _PIECE.findall(word, start, start + _WINDOW)
        if not pieces:
            continue
        # one string, pieces apart: a pair with the space in it is not a common one
        text = " ".join(pieces).lower()
        n = len(text) - len(pieces) + 1
        common = sum(map(_COMMON_PAIRS.__contains__, map(operator.add, text, text[1:])))
        score += n - len(pieces) - common + 1.5 * len(pieces)
        letters += n
    return score < 0.7 * letters


def _reads_like_english(word: str) -> bool:
    """Whether the letters of ``word`` (one case in it) read like English words rather than
    like random letters.

    A name in one case (``snake_case``, ``SCREAMING_CASE``, a lower-case word) has no case
    changes to split at, so :func:`_reads_like_words` cannot judge it; its letter pairs can:
    in English most pairs are more common than in random letters (``th``, ``er``, ``on``),
    in random letters most are much rarer (``qx``, ``jv``, ``zk``). The mean of the pairs'
    log2 odds (:data:`_PAIR_ODDS`, pairs inside a piece of letters only) is above
    _ENGLISH_ODDS for a name and below it for random letters; see _looks_random for the
    rates measured. Letters with no pair at all (each alone between digits: ``a1b2c3...``)
    are not English either: no name is spelt that way. (Judging only runs with six pairs or
    more, and taking the others for words, missed 9.1% of random lower-case ids of letters
    and digits of 20 characters, against 3.7%, and changed one URL fewer.)
    """
    odds = pairs = 0
    # a window at a time, as in _reads_like_words, so that a long run never holds more
    # than a window's pieces
    for start in range(0, len(word), _WINDOW):
        pieces = _LETTERS.findall(word[start:start + _WINDOW].lower())
        if pieces:
            text = " ".join(pieces)
            odds += sum(map(_PAIR_ODDS.__getitem__, map(operator.add, text, text[1:])))
            pairs += len(text) - 2 * len(pieces) + 1   # the letters less one per piece
    return pairs > 0 and odds > _ENGLISH_ODDS * pairs


def _looks_random(word: str) -> bool:
    """A token-like word of 20+ characters. With digits: letters of either case, with either
    all of upper case, lower case and digits and at least 3.6 bits of entropy per character
    (a random base64url token), or 32+ characters and 3.3 bits (long hex keys); camel-case
    names with digits and hex digests of 32+ characters are caught too: in a log that is the
    safe side. A word with both cases whose letters do not read like words
    (:func:`_reads_like_words`) is random whatever its entropy, with digits or without: a
    random base64url token has no digit with a small but real probability (0.4% at 32
    characters, 2.4% at 22) and less than 3.6 bits at 22 characters about once in 1,800.
    Hex of 32+ characters needs only 2.9 bits (a random 32-digit key has less than 3.3
    1.7% of the time). Camel-case names without digits stay readable.

    One case of letters (lower-case ids, base32 secrets such as one-time-password seeds,
    hex), at any length from 20, without ``-`` or ``_``: hex with a digit and 2.5 bits
    (20+ hex digits are an id or a key, rarely anything else); other letters, four or more
    (fewer are a number's: ``1.7976931348623157e+308`` is never redacted), when they do not
    read like English (:func:`_reads_like_english`) and have 2.5 bits. Measured with
    ``benchmarks/redact_random_words.py``: of random lower-case or upper-case letters 0.9%
    are missed at 20 characters, 0.4% at 24, 0.1% at 32; of base32 2.5% at 20, 1.4% at 24;
    of lower-case letters and digits 3.7% at 20, 2.6% at 24 (their letters come in short
    pieces between digits, with few pairs to judge); no hex of 24+ digits. A single-case
    run with ``-`` or ``_`` is a name (``gcloud_sql_export_csv``, ``x86_64-linux-gnu-gcc``),
    judged only by the rule for 32+ characters, so a token joined to words is left to
    :func:`_unglue`.
    """
    if len(word) < 20:
        return False
    digits = any(c.isdigit() for c in word)
    lower = any(c.islower() for c in word)
    upper = any(c.isupper() for c in word)
    if not (lower or upper):
        return False
    if lower and upper:
        if not digits:
            return not _reads_like_words(word)
        bits = _entropy(word)
        return bits >= 3.6 or not _reads_like_words(word) or (len(word) >= 32 and bits >= 3.3)
    # One case of letters. A random token of one case (hex, base32, a lower-case id) has no
    # '-' or '_', a name (snake_case, kebab-case, SCREAMING_CASE) has, often around
    # abbreviations that read like nothing (``gcloud_sql_export_csv``): such a run is taken
    # for random only by the rule for 32+ characters with digits and a token's entropy.
    if "-" in word or "_" in word:
        return digits and len(word) >= 32 and _entropy(word) >= 3.3
    # Hex (with a digit) is an id or a key: a random one of 20 digits has under 2.5 bits
    # about once in 10,000.
    if digits and _HEX.fullmatch(word) is not None:
        return _entropy(word) >= (2.9 if len(word) >= 32 else _SINGLE_CASE_BITS)
    # Letters that read like English are a name (``PYTHONDONTWRITEBYTECODE``,
    # ``internationalization``) but for 32+ characters with digits and the entropy of a
    # token; the pair test goes first, as it is cheaper than the entropy and settles most
    # names. Up to three letters are too few to judge: such a run is digits with a letter or
    # two, as a JSON number writes a large double (the run ``7976931348623157e+308`` of
    # ``1.7976931348623157e+308``) or a source a constant (``0x1234...``), not a token
    # (random lower-case letters and digits of 20 have so few letters about once in 6
    # million), and is judged as a name is.
    if sum(map(str.isalpha, word)) < 4 or _reads_like_english(word):
        return digits and len(word) >= 32 and _entropy(word) >= 3.3
    return _entropy(word) >= _SINGLE_CASE_BITS


# The parts of a run that ``-`` and ``_`` separate, for _unglue, and what a run needs for
# _unglue to find a stretch in it: a part of 7+ letters or one with another character.
_PART: Final = re.compile(r"[^-_]+")
_NOT_SHORT_WORD: Final = re.compile(r"[A-Za-z]{7}|[^A-Za-z_-]")


def _wordy(part: str) -> bool:
    """Whether a part of a run (no ``-`` or ``_`` in it) is a word or a name made of words:
    letters only, and either in one case or capitalised (a word, an acronym) and up to six
    of them (too few to judge: a token's own pieces may be that short too, which _unglue
    allows for) or reading like English, or with case changes inside (``oneOf``) reading
    like a name (:func:`_reads_like_words`)."""
    if not part.isalpha():
        return False
    if part.islower() or part.isupper() or part[1:].islower():
        if len(part) <= 6:
            return True
        lowered = part.lower()
        odds = sum(map(_PAIR_ODDS.__getitem__, map(operator.add, lowered, lowered[1:])))
        return odds > _ENGLISH_ODDS * (len(part) - 1)
    return _reads_like_words(part)


def _unglue(run: str) -> str:
    """``run`` (which does not look random as a whole) with a random-looking stretch inside
    it replaced, the words around it kept: a token joined to words by ``-`` or ``_``
    (``session-<token>``, ``my_app_refresh_token_for_<token>``) is judged with the words
    and reads like a name. The stretch is what is left when words (:func:`_wordy`) are
    taken off both ends; a stretch, not a part, as a base64url token may hold ``-`` and
    ``_`` itself. Under 20 characters, it takes back the short parts (up to six letters,
    which count as words in one case: a token's own pieces may be that short) on both
    sides of it until it has 20; then, if any words were taken off and the stretch
    looks random on its own (:func:`_looks_random`), it is replaced. Runs longer than a
    window (blobs) are left to the judgement of the whole, to keep the cost bounded."""
    if len(run) > _WINDOW or ("-" not in run and "_" not in run) \
            or _NOT_SHORT_WORD.search(run) is None:
        return run
    spans = [m.span() for m in _PART.finditer(run)]
    first, last = 0, len(spans) - 1
    while first <= last and _wordy(run[spans[first][0]:spans[first][1]]):
        first += 1
    while first < last and _wordy(run[spans[last][0]:spans[last][1]]):
        last -= 1
    if first > last:   # all words
        return run
    while spans[last][1] - spans[first][0] < 20:
        # a short part on either side may be the token's own: both are taken back
        grown = False
        if first > 0 and spans[first - 1][1] - spans[first - 1][0] <= 6:
            first, grown = first - 1, True
        if last < len(spans) - 1 and spans[last + 1][1] - spans[last + 1][0] <= 6:
            last, grown = last + 1, True
        if not grown:
            return run
    if (first, last) == (0, len(spans) - 1):   # the whole run: judged already
        return run
    start, end = spans[first][0], spans[last][1]
    if _looks_random(run[start:end]):
        return f"{run[:start]}{REDACTED}{run[end:]}"
    return run


def _judge_scheme_letters(match: re.Match[str]) -> str:
    """What an auth scheme and letters only are written as: kept when the letters read like
    English (prose), else :data:`REDACTED`."""
    return match[0] if _reads_like_english(match["word"]) else REDACTED


# The auth scheme words as _SCHEME_LETTERS takes them, in lower case, for _scheme_letters.
_SCHEME_WORDS: Final = ("bearer", "basic", "dpop")


def _scheme_letters(text: str) -> str:
    """``text`` with each match of :data:`_SCHEME_LETTERS` whose letters do not read like
    English replaced by :data:`REDACTED`.

    A text of ASCII (what ``json.dumps`` writes) is not searched by the pattern, which tries
    every ``b`` and ``d``, but its lower-case copy (of the same length and offsets, as the
    text is ASCII) for the scheme words with ``str.find``, and the pattern is tried only
    where one starts: a match can only start at a scheme word, and two cannot overlap (the
    letters after the first would have to hold a scheme word and a space), so the matches
    are those of a search. On a 452 KB tool result, 0.8 ms of CPU instead of 3.9 ms; on a
    name of 30 characters, 0.13 us instead of 0.44. Other text goes to the pattern (its
    ``(?i)`` also takes letters such as the long s for ``s``, which ``lower()`` does not)."""
    if not text.isascii():
        return _SCHEME_LETTERS.sub(_judge_scheme_letters, text)
    lowered = text.lower()
    if "bearer" not in lowered and "basic" not in lowered and "dpop" not in lowered:
        return text   # nearly every string: three searches, no loop
    starts: list[int] = []
    for word in _SCHEME_WORDS:
        at = lowered.find(word)
        while at >= 0:
            starts.append(at)
            at = lowered.find(word, at + 1)
    parts: list[str] = []
    done = 0   # how much of text is in parts
    for at in sorted(starts):
        found = _SCHEME_LETTERS.match(text, at)
        # (at >= done always holds, by the above: kept as a guard)
        if found is not None and at >= done and not _reads_like_english(found["word"]):
            parts += (text[done:at], REDACTED)
            done = found.end()
    if not parts:
        return text
    parts.append(text[done:])
    return "".join(parts)


def _judge_run(match: re.Match[str]) -> str:
    """What a run of the base64url alphabet is written as (the random-word guess)."""
    run = match[0]
    return REDACTED if _looks_random(run) else _unglue(run)


class Redactor:
    """Replaces secrets in JSON values (see the module docstring for the rules).

    ``extra_keys`` adds names (compared like the built-in ones), ``extra_patterns`` adds
    regular expressions whose matches are replaced, ``entropy=False`` stops the high-entropy
    guess (for logs full of digests), and ``enabled=False`` turns every rule off: values are
    then written as they came.

    ``enabled`` and ``entropy`` may be changed later, also on the rules an inspector is
    using: each change bumps :attr:`changes`, which is how the inspector (and its helper
    process) notices rules edited in place; setting the value they have is no change. The
    names and patterns are fixed, and what a subclass adds is not watched (a subclass may
    make ``enabled`` or ``entropy`` a property of its own: redaction asks it, but its
    changes are not counted): to change those, assign a new :class:`Redactor`.
    """

    # The watched switches behind ``enabled`` and ``entropy`` (set through _change).
    _enabled: bool
    _entropy: bool

    def __init__(self, *, extra_keys: Iterable[str] = (), extra_patterns: Iterable[str] = (),
                 entropy: bool = True, enabled: bool = True) -> None:
        # Through the attributes, as before they were watched: a subclass that makes either
        # a property of its own gets the value; then the count starts at 0.
        self.enabled = enabled
        self.entropy = entropy
        self._changes = 0
        self._keys = SECRET_KEYS | {_norm(k) for k in extra_keys}
        extra = list(extra_patterns)
        try:
            self._values = re.compile("|".join(f"(?:{p})" for p in [*_VALUE_PATTERNS, *extra]))
        except re.error as exc:
            raise ValueError(f"a redaction pattern is not a valid regular expression: {exc} "
                             f"(patterns: {extra!r})") from None

    @property
    def changes(self) -> int:
        """How many times :attr:`enabled` or :attr:`entropy` were set since construction."""
        return self._changes

    @property
    def enabled(self) -> bool:
        """Whether any rule applies (``False``: values are written as they came)."""
        return self._enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        self._change("_enabled", value)

    @property
    def entropy(self) -> bool:
        """Whether long high-entropy words are replaced (see :func:`_looks_random`)."""
        return self._entropy

    @entropy.setter
    def entropy(self, value: bool) -> None:
        self._change("_entropy", value)

    def _change(self, name: str, value: bool) -> None:
        """Set a watched switch; count it when it really changes (the same value is none)."""
        value = bool(value)
        if value != getattr(self, name, None):
            setattr(self, name, value)
            # (a subclass may set it before calling this class's __init__)
            self._changes = getattr(self, "_changes", 0) + 1

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Load rules pickled before ``enabled`` and ``entropy`` were watched (they were
        plain attributes then), as well as current ones. Their value patterns start with the
        scheme pattern as it was then (:data:`_EARLIER_SCHEMES`): it is replaced by today's,
        the user's patterns after it kept. (A development version also kept the user's
        patterns apart, as ``_extra``: no longer used.)"""
        state = dict(state)
        for name in ("enabled", "entropy"):
            if name in state:
                state["_" + name] = bool(state.pop(name))
        state.setdefault("_enabled", True)
        state.setdefault("_entropy", True)
        state.setdefault("_changes", 0)
        state.pop("_extra", None)
        values = state.get("_values")
        if isinstance(values, re.Pattern) and isinstance(values.pattern, str):
            for earlier in _EARLIER_SCHEMES:
                head = f"(?:{earlier})|"
                if values.pattern.startswith(head):
                    state["_values"] = re.compile(
                        f"(?:{_VALUE_PATTERNS[0]})|{values.pattern[len(head):]}", values.flags)
                    break
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (f"Redactor(enabled={self.enabled}, entropy={self.entropy}, "
                f"keys={len(self._keys)}, patterns={self._values.pattern.count('(?:')})")

    def secret_name(self, name: str) -> bool:
        """Whether values under ``name`` are replaced whole."""
        key = _norm(name)
        if key in _NOT_SECRET:
            return False
        return key in self._keys or any(key.endswith(k) for k in self._keys)

    def text(self, value: str) -> str:
        """``value`` with every secret-looking part replaced by :data:`REDACTED`."""
        if not self.enabled or not value:
            return value
        out = self._values.sub(REDACTED, value)
        out = _USERINFO.sub(lambda m: f"{m['head']}{REDACTED}@", out)
        if "=" in out or ":" in out:
            out = _PAIR.sub(self._pair, out)
        if self.entropy:
            out = _RUN.sub(_judge_run, out)
        # last, on what every other rule left: see _SCHEME_LETTERS (its shortest match is
        # "dpop", a space and 8 letters). Earlier, its redaction could take what a later
        # rule needs: a URL's scheme before "://user:password@", a secret name before its
        # ": value", the end of a run holding a token.
        if len(out) >= 13:
            out = _scheme_letters(out)
        return out

    def _pair(self, match: re.Match[str]) -> str:
        found = match["dq"] if match["dq"] is not None else match["sq"] \
            if match["sq"] is not None else match["bare"]
        if not self.secret_name(match["name"]) or found.startswith(REDACTED[:-1]):
            return match[0]
        q = match["q"]
        if match["dq"] is not None:
            return f'{match["name"]}{q}{match["sep"]}"{REDACTED}"'
        if match["sq"] is not None:
            return f"{match['name']}{q}{match['sep']}'{REDACTED}'"
        return f"{match['name']}{q}{match['sep']}{REDACTED}"

    def value(self, value: Any) -> Any:
        """A copy of the JSON value ``value`` with secrets replaced: under a secret name the
        whole value (``null`` and booleans kept), in every other string the parts that look
        like credentials. Object keys are checked as strings too."""
        if not self.enabled:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if self.secret_name(str(key)) and item is not None \
                        and not isinstance(item, bool):
                    out[self.text(str(key))] = REDACTED
                else:
                    out[self.text(str(key))] = self.value(item)
            return out
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value


_FOR_LOGS: Final = Redactor()


def redact_for_log(text: str) -> str:
    """``text`` (an excerpt of a frame that could not be read, a server's stderr) with the
    default rules applied, for the gateway's own log: a malformed line still carries the
    token it was sent with, and stderr is often kept in a file by the host."""
    return _FOR_LOGS.text(text)
