"""Placeholder (level 1 only) until the full RFC 6570 module lands."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping

__all__ = ["UriTemplate"]


class UriTemplate:
    def __init__(self, template: str) -> None:
        self.template = template
        names: list[str] = []
        pattern = ""
        pos = 0
        for m in re.finditer(r"\{([A-Za-z0-9_]+)\}", template):
            pattern += re.escape(template[pos:m.start()]) + f"(?P<{m.group(1)}>[^/?#]+)"
            names.append(m.group(1))
            pos = m.end()
        pattern += re.escape(template[pos:])
        self.variables = tuple(names)
        self._re = re.compile(pattern + r"\Z")

    def match(self, uri: str) -> dict[str, str] | None:
        m = self._re.match(uri)
        if m is None:
            return None
        return {k: urllib.parse.unquote(v) for k, v in m.groupdict().items()}

    def expand(self, values: Mapping[str, object]) -> str:
        return re.sub(r"\{([A-Za-z0-9_]+)\}",
                      lambda m: urllib.parse.quote(str(values.get(m.group(1), "")), safe=""),
                      self.template)
