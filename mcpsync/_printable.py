"""Text from a peer made inert before it reaches a terminal.

A server chooses its tool names, descriptions, progress messages, MIME types and URIs, and
a terminal obeys the control sequences in whatever is written to it: a tool named
``"x\\x1b]0;PWNED\\x07"`` retitles the window, ``"\\x1b[2K\\r"`` erases the line before it,
a bidi mark reorders what follows. Everything such a peer supplies goes through
:func:`printable` before it is shown on a terminal (the CLI's tables and progress lines, the
library's text progress bar, the trust prompt of the CLI). A whole block of text (a tool's
text result shown on a terminal) goes through :func:`terminal_text`, which keeps its line
breaks and tabs.

Every control, format, separator or otherwise invisible character is written as an escape
(ESC as ``\\x1b``, a zero-width space as ``\\u200b``), and a backslash as ``\\\\`` so an
escape the peer wrote cannot pass for one of ours.
"""

from __future__ import annotations

import unicodedata

__all__ = ["printable", "terminal_text"]

# Cc control, Cf format (bidi marks, zero-width), Cs lone surrogates (cannot even be
# written to a UTF-8 stream), Co private use, Cn unassigned, Zl/Zp line and paragraph
# separators. Zs spaces other than U+0020 are escaped too: they look like a space but are not.
_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"})


def _escape(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    if ch == " " or unicodedata.category(ch) not in _ESCAPED:
        return ch
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, limit: int | None = None) -> str:
    """``text`` with every invisible or terminal-controlling character escaped; with a
    ``limit``, cut to about that many characters (never inside an escape) with ``…``
    marking the cut."""
    if limit is None and text.isprintable() and "\\" not in text:
        return text   # the common case: nothing to escape (isprintable is False for Zs)
    out: list[str] = []
    length = 0
    for ch in text:
        piece = _escape(ch)
        if limit is not None and length + len(piece) > limit:
            out.append("…")
            break
        out.append(piece)
        length += len(piece)
    return "".join(out)


# In a block of text (a tool's result) only what can act on the terminal or hide text is
# escaped: controls but newline and tab, format characters (bidi overrides), lone
# surrogates and the two Unicode line separators. Backslashes, non-ASCII spaces and private
# use characters are left as sent, so ordinary text reads as written.
_TEXT_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def terminal_text(text: str) -> str:
    """A block of text made safe to write to a terminal, keeping its line breaks and tabs:
    each control or format character (``ESC``, ``BEL``, a bidi override, ...) becomes an
    escape such as ``\\x1b``; everything else, backslashes included, is left as sent."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch in "\n\t" or unicodedata.category(ch) not in _TEXT_ESCAPED:
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)
