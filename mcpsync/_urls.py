"""The character screen every URL passes before anything parses it.

Parsers disagree about a few characters in URLs: ``urllib.parse`` silently drops tab, CR and
LF, browsers (WHATWG) read a backslash as a slash, urllib3 ends the authority at a
backslash, and IDNA drops some format characters. A URL holding any of them can mean two
different hosts to two parsers, so it is refused rather than normalised. No honest server
or config needs them.

Pure and import-free (no requests): the config layer uses it for configured URLs, and the
HTTP transport's origin check (``mcpsync/transport/_origin.py``) builds on it for URLs a
server hands us.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["bad_character", "has_userinfo"]

# Cc: controls (C0, DEL, C1); Cf: format characters (zero-width, bidi marks, soft hyphen),
# which IDNA may silently drop; Zs/Zl/Zp: every kind of space and line break.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
# The authority of an absolute or scheme-relative URL (RFC 3986 §3.2): after "//", up to the
# first "/", "?" or "#".
_AUTHORITY = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.\-]*:)?//([^/?#]*)")


def bad_character(url: str) -> str | None:
    """Why ``url`` holds a character parsers disagree on (a backslash, a control, format or
    whitespace character), or None."""
    for ch in url:
        if ch == "\\":
            return "it contains a backslash"
        if ch.isspace() or unicodedata.category(ch) in _REFUSED_CATEGORIES:
            return f"it contains the character U+{ord(ch):04X}"
    return None


def has_userinfo(url: str) -> bool:
    """True when the authority carries user info: an ``@`` (or ``%40``) before the host."""
    match = _AUTHORITY.match(url)
    authority = match.group(1) if match else ""
    return "@" in authority or "%40" in authority.lower()
