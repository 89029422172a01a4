"""An mkdocs hook: show the docstrings' reStructuredText roles as plain code in the site.

The docstrings cross-reference with Sphinx roles (``:class:`~mcpsync.types.Tool```), which
Markdown renders as the role's name next to a code span. This drops the role and, as Sphinx
does for a leading ``~``, keeps only the last part of the dotted name.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|mod|exc|data|obj|const):<code>(~?)([^<]*)</code>")


def _plain(match: re.Match[str]) -> str:
    tilde, name = match.groups()
    return f"<code>{name.rsplit('.', 1)[-1] if tilde else name}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return _ROLE.sub(_plain, html)
