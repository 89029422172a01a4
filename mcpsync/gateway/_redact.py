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
  ``Basic ...`` credentials, JWTs, well-known key prefixes (``sk-``, ``ghp_`` and the other
  GitHub prefixes, Slack ``xox?-``, AWS ``AKIA``/``ASIA``, Google ``AIza``, GitLab
  ``glpat-``), passwords in a URL's user info, and long random-looking words (see
  :func:`_looks_random`), which is how an unknown token or authorization code is caught.

The rules are data (:class:`Redactor` takes extra names and patterns) and cheap on values
that hold nothing: one combined regular expression pass per string.
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
    # change in it ("Basic usage" in prose is not one)
    r"\b(?i:bearer|basic|dpop)\s+(?=[A-Za-z0-9\-._~+/]*(?:[0-9=+/._~-]|[a-z][A-Za-z]*[A-Z]))"
    r"[A-Za-z0-9\-._~+/]{8,}=*",
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*",
    r"\bsk-[A-Za-z0-9_-]{16,}",
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
    r"\bxox[abprse]-[A-Za-z0-9-]{10,}",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",
)

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

# Hexadecimal (a random hex key of 32 digits has less than 3.3 bits of entropy per digit
# 1.7% of the time, less than 2.9 about once in 200,000).
_HEX: Final = re.compile(r"[0-9a-f]+|[0-9A-F]+")

# The pieces of a word as camel case splits it: an acronym, a capitalised word, a lower-case
# word (``HTTPServer_nameOf`` is ``HTTP``, ``Server``, ``name``, ``Of``).
_PIECE: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")

# How much of a run _reads_like_words splits at once.
_WINDOW: Final = 4096


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
    """
    if len(word) < 20:
        return False
    digits = any(c.isdigit() for c in word)
    lower = any(c.islower() for c in word)
    upper = any(c.isupper() for c in word)
    if not digits:
        return lower and upper and not _reads_like_words(word)
    if not (lower or upper):
        return False
    bits = _entropy(word)
    if lower and upper and (bits >= 3.6 or not _reads_like_words(word)):
        return True
    return len(word) >= 32 and (bits >= 3.3 or (bits >= 2.9 and _HEX.fullmatch(word) is not None))


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
        patterns = [*_VALUE_PATTERNS, *extra_patterns]
        try:
            self._values = re.compile("|".join(f"(?:{p})" for p in patterns))
        except re.error as exc:
            raise ValueError(f"a redaction pattern is not a valid regular expression: {exc} "
                             f"(patterns: {list(extra_patterns)!r})") from None

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
        plain attributes then), as well as current ones."""
        state = dict(state)
        for name in ("enabled", "entropy"):
            if name in state:
                state["_" + name] = bool(state.pop(name))
        state.setdefault("_enabled", True)
        state.setdefault("_entropy", True)
        state.setdefault("_changes", 0)
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
            out = _RUN.sub(lambda m: REDACTED if _looks_random(m[0]) else m[0], out)
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
