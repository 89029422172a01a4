"""RFC 6570 URI templates: the server's resource templates, matched and expanded.

A resource template such as ``file:///logs/{name}`` answers every ``resources/read`` whose URI
it matches, so the server has to run a template *backwards*: from a URI to the variable
values. RFC 6570 only defines the forward direction (expansion). This module does both:

* Expansion follows the RFC for all four levels: simple ``{var}``, reserved ``{+var}``,
  fragment ``{#var}``, several variables ``{x,y}``, the operators ``.``, ``/``, ``;``, ``?``,
  ``&``, the prefix modifier ``{var:3}`` and the explode modifier ``{var*}``. Values may be
  strings, numbers, booleans (``true``/``false``), lists or mappings; ``None``, an empty list
  and an empty mapping count as undefined and are skipped, as the RFC says.
* Matching is compiled once, in ``__init__``, to a regular expression anchored to the whole
  URI, because the server tries it on every read. Every construct matches except the explode
  modifier: an exploded list and an exploded mapping look alike in a URI, so no single string
  per variable could be given back. A template with ``*`` (or one that cannot be split
  unambiguously, or that names a variable twice) is refused at construction, so the mistake
  shows when the template is registered rather than when a client reads. ``expand_template``
  expands any template, explode included, without that check.

How a URI is split (the RFC leaves this open):

* ``{var}``, ``{.var}`` and ``{/var}`` values are one or more characters other than ``/``,
  ``?`` and ``#``; ``{+var}`` may hold ``/`` but stops at ``?`` and ``#`` while the template is
  still in the path, so ``{+path}{?q}`` gives the query to ``q``; ``{#var}`` takes the rest.
  Inside ``{x,y}`` the separator (``,``, or ``.`` for ``{.x,y}``) also ends a value. Every
  variable of these operators must be present.
* ``{;x,y}``, ``{?x,y}`` and ``{&x,y}`` take their variables by name, in any order; any of
  them may be missing (it is then absent from the result) and a value may be empty
  (``?x=`` or ``;x``). A name the template does not list, or one given twice, is no match.
* A value also stops where an expression that follows it directly begins (``{/a}{;b}``:
  ``a`` has no ``;``), since that expression may be optional.
* A value takes the longest part that still has the template's next literal after it, and
  keeps it: matching never goes back to try a shorter one. So ``{+dir}/{name}.txt`` splits
  ``a/b/c.txt`` as ``a/b`` and ``c``, but ``{+a}/{b}/{+c}`` cannot match ``p/q/r/s`` (``a``
  keeps ``p/q/r``). This is what keeps a read linear in the URI's length: with free
  backtracking a client could send a URI that makes the server try every split (seconds
  for a few hundred characters with three ``{+var}``).
* ``{var:3}`` matches at most three characters of the decoded value.
* Values come back percent-decoded; one that is not valid UTF-8 once decoded means no match.
  A decoded value can therefore contain ``/`` or ``..``: a handler that turns a value into a
  file path must check it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias
from urllib.parse import quote, unquote

__all__ = ["UriTemplate", "expand_template"]


@dataclass(frozen=True)
class _Operator:
    """One row of the RFC's expansion table (its appendix A)."""

    char: str
    first: str
    sep: str
    named: bool
    ifemp: str
    reserved: bool


_OPERATORS: dict[str, _Operator] = {
    "": _Operator("", "", ",", named=False, ifemp="", reserved=False),
    "+": _Operator("+", "", ",", named=False, ifemp="", reserved=True),
    "#": _Operator("#", "#", ",", named=False, ifemp="", reserved=True),
    ".": _Operator(".", ".", ".", named=False, ifemp="", reserved=False),
    "/": _Operator("/", "/", "/", named=False, ifemp="", reserved=False),
    ";": _Operator(";", ";", ";", named=True, ifemp="", reserved=False),
    "?": _Operator("?", "?", "&", named=True, ifemp="=", reserved=False),
    "&": _Operator("&", "&", "&", named=True, ifemp="=", reserved=False),
}
_FUTURE_OPERATORS = "=,!@|"
_RESERVED = ":/?#[]@!$&'()*+,;="

_HEX = "[0-9A-Fa-f]"
_PCT = re.compile(f"%{_HEX}{_HEX}")
_PCT_SPLIT = re.compile(f"(%{_HEX}{_HEX})")
_VARCHAR = f"(?:[A-Za-z0-9_]|%{_HEX}{_HEX})"
_VARSPEC = re.compile(
    rf"(?P<name>{_VARCHAR}(?:\.?{_VARCHAR})*)(?::(?P<prefix>[1-9][0-9]{{0,3}})|(?P<explode>\*))?"
)
# One decoded character as it may appear in a URI: a percent-escaped UTF-8 sequence (the
# lead byte says how many continuation bytes follow), so ``{var:3}`` can count characters in
# the regular expression itself. Raw characters are added per operator.
_CONT = f"%[89ABab]{_HEX}"
_ESCAPED_CHAR = (
    f"%[0-7]{_HEX}|%[C-Dc-d]{_HEX}{_CONT}|%[Ee]{_HEX}(?:{_CONT}){{2}}|%[Ff][0-7](?:{_CONT}){{3}}"
)
# Characters a template may hold outside expressions (RFC 6570 section 2.1), ASCII part.
_LITERAL_FORBIDDEN = frozenset("\"'%<>\\^`{|}")


@dataclass(frozen=True)
class _VarSpec:
    name: str
    prefix: int | None
    explode: bool


@dataclass(frozen=True)
class _Expression:
    operator: _Operator
    varspecs: tuple[_VarSpec, ...]
    text: str
    offset: int


@dataclass(frozen=True)
class _Literal:
    text: str


_Part: TypeAlias = "_Literal | _Expression"


def _fail(template: str, problem: str) -> ValueError:
    return ValueError(f"URI template {template!r}: {problem}")


def _parse(template: str) -> tuple[_Part, ...]:
    """Split a template into literals and expressions, refusing anything RFC 6570 forbids."""
    parts: list[_Part] = []
    literal: list[str] = []
    i = 0
    while i < len(template):
        char = template[i]
        if char == "{":
            end = template.find("}", i + 1)
            if end < 0:
                raise _fail(template, f"the '{{' at offset {i} is never closed; add a '}}'")
            if literal:
                parts.append(_Literal("".join(literal)))
                literal = []
            parts.append(_parse_expression(template, i, template[i + 1:end]))
            i = end + 1
        elif char == "}":
            raise _fail(template, f"the '}}' at offset {i} closes no expression; remove it")
        elif char == "%":
            if not _PCT.fullmatch(template, i, i + 3):
                raise _fail(template, f"the '%' at offset {i} does not start a percent-escape "
                                      "such as %20; write a literal '%' as %25")
            literal.append(template[i:i + 3])
            i += 3
        elif not _literal_allowed(char):
            raise _fail(template, f"the character {char!r} at offset {i} is not allowed in a "
                                  f"URI template; percent-encode it as {quote(char, safe='')}")
        else:
            literal.append(char)
            i += 1
    if literal:
        parts.append(_Literal("".join(literal)))
    return tuple(parts)


def _literal_allowed(char: str) -> bool:
    code = ord(char)
    if code < 0x80:
        return 0x20 < code < 0x7F and char not in _LITERAL_FORBIDDEN
    return code >= 0xA0


def _parse_expression(template: str, offset: int, body: str) -> _Expression:
    text = "{" + body + "}"
    if not body:
        raise _fail(template, f"the expression '{{}}' at offset {offset} names no variable")
    if body[0] in _FUTURE_OPERATORS:
        raise _fail(template, f"the operator {body[0]!r} in {text!r} at offset {offset} is "
                              "reserved for future use; the operators are + # . / ; ? &")
    operator = _OPERATORS[body[0]] if body[0] in _OPERATORS else _OPERATORS[""]
    specs: list[_VarSpec] = []
    for spec in body[len(operator.char):].split(","):
        found = _VARSPEC.fullmatch(spec)
        if found is None:
            raise _fail(template, f"{spec!r} in {text!r} at offset {offset} is not a valid "
                                  "variable: a name is letters, digits, '_' or percent-escapes, "
                                  "with single dots between, and may end in ':' and a length "
                                  "from 1 to 9999, or in '*'")
        prefix = found.group("prefix")
        specs.append(_VarSpec(found.group("name"), int(prefix) if prefix else None,
                              found.group("explode") is not None))
    return _Expression(operator, tuple(specs), text, offset)


# --- expansion -------------------------------------------------------------------------------

_Value: TypeAlias = "str | list[str] | list[tuple[str, str]]"


def _encode(value: str, reserved: bool) -> str:
    """Percent-encode per the operator: unreserved only, or reserved and escapes kept too."""
    if not reserved:
        return quote(value, safe="")
    return "".join(piece if _PCT.fullmatch(piece) else quote(piece, safe=_RESERVED)
                   for piece in _PCT_SPLIT.split(value))


def _scalar(value: object, template: str, name: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    raise TypeError(f"URI template {template!r}: the value of {name!r} is a "
                    f"{type(value).__name__}; give a string, a number, a boolean, a list or "
                    "a mapping of those")


def _normalise(value: object, template: str, name: str) -> _Value | None:
    """A value as a string, a list or a list of pairs; ``None`` when the RFC calls it undefined."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        pairs = [(_scalar(k, template, name), _scalar(v, template, name))
                 for k, v in value.items() if v is not None]
        return pairs or None
    if isinstance(value, (list, tuple)):
        items = [_scalar(v, template, name) for v in value if v is not None]
        return items or None
    return _scalar(value, template, name)


def _expand_varspec(op: _Operator, spec: _VarSpec, value: _Value, template: str) -> str:
    def enc(text: str) -> str:
        return _encode(text, op.reserved)

    def named(key: str, text: str) -> str:
        return key + ("=" + enc(text) if text else op.ifemp)

    if isinstance(value, str):
        if spec.prefix is not None:
            value = value[:spec.prefix]
        return named(spec.name, value) if op.named else enc(value)
    if spec.prefix is not None:
        raise ValueError(f"URI template {template!r}: {spec.name!r} has a prefix modifier "
                         f"':{spec.prefix}' but its value is a list or mapping; a prefix "
                         "applies only to a string")
    strings = [item for item in value if isinstance(item, str)]
    pairs = [item for item in value if isinstance(item, tuple)]
    if not spec.explode:
        joined = ",".join(enc(s) for s in strings) or ",".join(
            enc(k) + "," + enc(v) for k, v in pairs)
        return spec.name + "=" + joined if op.named else joined
    if strings:
        return op.sep.join(named(spec.name, s) if op.named else enc(s) for s in strings)
    return op.sep.join(named(enc(k), v) if op.named else enc(k) + "=" + enc(v)
                       for k, v in pairs)


def _expand(parts: tuple[_Part, ...], values: Mapping[str, object], template: str) -> str:
    out: list[str] = []
    for part in parts:
        if isinstance(part, _Literal):
            out.append(_encode(part.text, reserved=True))
            continue
        op = part.operator
        items = []
        for spec in part.varspecs:
            value = _normalise(values.get(spec.name), template, spec.name)
            if value is not None:
                items.append(_expand_varspec(op, spec, value, template))
        if items:
            out.append(op.first + op.sep.join(items))
    return "".join(out)


def expand_template(template: str, values: Mapping[str, object]) -> str:
    """Expand any RFC 6570 template, explode modifiers and repeated names included.

    For a template that is only ever expanded (a link a client builds, say); the server's
    templates go through ``UriTemplate``, which also checks that they can be matched.
    """
    return _expand(_parse(template), values, template)


# --- matching --------------------------------------------------------------------------------


def _value_pattern(excluded: str, prefix: int | None, minimum: int) -> str:
    raw = "[^%" + "".join(re.escape(c) for c in excluded) + "]"
    count = f"{{{minimum},{prefix}}}" if prefix is not None else ("+" if minimum else "*")
    return f"(?:{raw}|{_ESCAPED_CHAR}){count}"


def _literal_pattern(text: str) -> str:
    """A literal as a URI may spell it: escapes in any hex case, non-ASCII raw or escaped."""
    out: list[str] = []
    for piece in _PCT_SPLIT.split(text):
        if _PCT.fullmatch(piece):
            out.append("%" + "".join(f"[{c.upper()}{c.lower()}]" for c in piece[1:]))
            continue
        for char in piece:
            if ord(char) < 0x80:
                out.append(re.escape(char))
            else:
                escaped = "".join(f"%{b:02X}" for b in char.encode("utf-8"))
                out.append(f"(?:{re.escape(char)}|{_literal_pattern(escaped)})")
    return "".join(out)


def _decode(raw: str) -> str | None:
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return None


class UriTemplate:
    """A resource template: matches a URI to its variables, and expands variables to a URI.

    Raises ``ValueError`` naming the offending part for a template that is not RFC 6570, that
    repeats a variable, or that this class cannot match (see the module docstring).
    """

    template: str
    variables: tuple[str, ...]

    def __init__(self, template: str) -> None:
        self.template = template
        self._parts = _parse(template)
        names: list[str] = []
        for part in self._parts:
            if isinstance(part, _Expression):
                for spec in part.varspecs:
                    if spec.name in names:
                        raise _fail(template, f"the variable {spec.name!r} appears twice; a "
                                              "URI can bind it only once, so rename one")
                    names.append(spec.name)
        self.variables = tuple(names)
        self._positional: list[tuple[str, str]] = []
        self._named: list[tuple[str, _Expression]] = []
        self._regex = re.compile(self._compile())

    def _compile(self) -> str:
        pieces: list[str] = []
        section = "path"
        previous: _Part | None = None
        for index, part in enumerate(self._parts):
            if isinstance(part, _Literal):
                pieces.append(_literal_pattern(part.text))
                if "#" in part.text:
                    section = "fragment"
                elif "?" in part.text and section == "path":
                    section = "query"
            else:
                self._check_matchable(part, previous)
                after = self._parts[index + 1] if index + 1 < len(self._parts) else None
                follow = _literal_pattern(after.text) if isinstance(after, _Literal) else ""
                pattern = self._expression_pattern(part, section, self._stops(index))
                # Atomic (a lookahead, then a backreference to what it captured): the value
                # takes the longest part the literal after it allows and keeps it, so a URI
                # that does not match fails at once instead of trying every split.
                atomic = f"_a{index}"
                pieces.append(f"(?=(?P<{atomic}>{pattern}){follow})(?P={atomic})")
                if part.operator.char == "#":
                    section = "fragment"
                elif part.operator.char in ("?", "&") and section == "path":
                    section = "query"
            previous = part
        return "".join(pieces)

    def _stops(self, index: int) -> str:
        """The characters that open the expressions right after part ``index``.

        Those expressions may be optional (``{;x}``, ``{?x}``, ``{&x}``), and a greedy value
        before them would swallow their part of the URI; so that value stops at them.
        """
        stops = ""
        for part in self._parts[index + 1:]:
            if not isinstance(part, _Expression):
                break
            stops += part.operator.first
            if not part.operator.named:
                break
        return stops

    def _check_matchable(self, expr: _Expression, previous: _Part | None) -> None:
        for spec in expr.varspecs:
            if spec.explode:
                raise _fail(self.template, f"the explode modifier in {expr.text!r} cannot be "
                                           "matched, because a URI does not show where an "
                                           "exploded value ends; drop the '*' (a '{+var}' "
                                           "may hold several path segments)")
        if isinstance(previous, _Expression) and expr.operator.char in ("", "+"):
            raise _fail(self.template, f"nothing separates {expr.text!r} from "
                                       f"{previous.text!r} before it, so a URI cannot say "
                                       "where one ends; put a literal between them")

    def _expression_pattern(self, expr: _Expression, section: str, stop: str) -> str:
        op = expr.operator
        if op.named:
            excluded = ("/?#;" if op.char == ";" else "&#") + stop
            items = "|".join(
                re.escape(spec.name) + "(?:=" + _value_pattern(excluded, spec.prefix, 0) + ")?"
                for spec in sorted(expr.varspecs, key=lambda s: -len(s.name)))
            item = f"(?:{items})"
            sep = re.escape(op.sep)
            group = f"_e{len(self._named)}"
            self._named.append((group, expr))
            return f"(?:(?P<{group}>{re.escape(op.first)}{item}(?:{sep}{item})*)?)"
        if op.char == "+":
            excluded = {"path": "?#", "query": "#", "fragment": ""}[section]
        elif op.char == "#":
            excluded = ""
        else:
            excluded = "/?#"
        if len(expr.varspecs) > 1 and op.sep not in excluded:
            excluded += op.sep
        values = []
        for number, spec in enumerate(expr.varspecs, 1):
            group = f"_v{len(self._positional)}"
            self._positional.append((group, spec.name))
            last = number == len(expr.varspecs)
            pattern = _value_pattern(excluded + stop if last else excluded, spec.prefix, 1)
            values.append(f"(?P<{group}>{pattern})")
        return re.escape(op.first) + re.escape(op.sep).join(values)

    def match(self, uri: str) -> dict[str, str] | None:
        """The decoded variables if ``uri`` is an expansion of this template, else ``None``."""
        found = self._regex.fullmatch(uri)
        if found is None:
            return None
        result: dict[str, str] = {}
        for group, name in self._positional:
            value = _decode(found.group(group))
            if value is None:
                return None
            result[name] = value
        for group, expr in self._named:
            body = found.group(group)
            if body is None:
                continue
            for item in body[1:].split(expr.operator.sep):
                name, _, raw = item.partition("=")
                value = _decode(raw)
                if value is None or name in result:
                    return None
                result[name] = value
        return {name: result[name] for name in self.variables if name in result}

    def expand(self, values: Mapping[str, object]) -> str:
        """The URI for ``values``, encoded per RFC 6570; missing and ``None`` values are skipped."""
        return _expand(self._parts, values, self.template)

    def __repr__(self) -> str:
        return f"UriTemplate({self.template!r})"
