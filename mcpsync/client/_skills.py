"""Skills (the ``io.modelcontextprotocol/skills`` extension): listing and verified loading.

A skill entry names its ``SKILL.md`` URI, carries the file's frontmatter verbatim and lists
every file of the skill with a ``sha256:`` digest and a byte size. A host may only use what
it verified, so every read here is checked against the entry it came from: size first, then
digest; ``SKILL.md``'s frontmatter is compared with the entry's field by field; a file the
entry does not list is refused. Nothing is read ahead of need: listing reads no file, loading
a skill reads only its ``SKILL.md``, and :meth:`LoadedSkill.read` reads one file when asked.

Entries are kept in a registry keyed by (server identity, uri), so two servers serving the
same URI never vouch for each other's files.
"""
from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpsync.errors import ProtocolError, SkillVerificationError

EXTENSION = "io.modelcontextprotocol/skills"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_FRONTMATTER = re.compile(r"^---\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|$)", re.S)

#: reads a resource: uri -> the raw ``resources/read`` result
Reader = Callable[[str], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class SkillFile:
    """One file of a skill as its entry lists it: where, and what it must hash to."""

    uri: str
    digest: str
    size: int | None   # None: the entry gave no size (then only the digest is checked)


@dataclass(frozen=True, slots=True)
class Skill:
    """A skill entry of ``skills/list`` or ``skills/get``; no file of it has been read.

    ``files`` is ``None`` for a skill generated on the fly, whose entry gives no digests
    (``resources`` absent or ``"dynamic"``): then only ``SKILL.md``'s frontmatter can be
    checked, and its other files are refused.
    """

    uri: str
    frontmatter: dict[str, Any]
    files: tuple[SkillFile, ...] | None
    server: str
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        """The frontmatter's ``name`` (``""`` when it has none)."""
        name = self.frontmatter.get("name")
        return name if isinstance(name, str) else ""

    @property
    def description(self) -> str:
        """The frontmatter's ``description`` (``""`` when it has none)."""
        text = self.frontmatter.get("description")
        return text if isinstance(text, str) else ""

    def file(self, uri: str) -> SkillFile | None:
        """The listed file at ``uri``, or ``None`` when the entry does not list it."""
        for item in self.files or ():
            if item.uri == uri:
                return item
        return None

    @classmethod
    def from_dict(cls, d: Any, server: str) -> Skill:
        if not isinstance(d, dict):
            raise ProtocolError(f"server {server!r}: a skill entry is not an object: {d!r:.200}",
                                server=server)
        uri, front, files = d.get("uri"), d.get("frontmatter"), d.get("resources")
        if not isinstance(uri, str) or not uri:
            raise ProtocolError(f"server {server!r}: a skill entry has no 'uri': {d!r:.200}",
                                server=server)
        if not isinstance(front, dict):
            raise ProtocolError(f"server {server!r}: skill {uri!r} has no 'frontmatter' object",
                                server=server)
        listed: tuple[SkillFile, ...] | None = None
        if files is not None and files != "dynamic":
            if not isinstance(files, list):
                raise ProtocolError(f"server {server!r}: skill {uri!r}: 'resources' is neither "
                                    "a list nor \"dynamic\"", server=server)
            listed = tuple(_file(item, uri, server) for item in files)
        return cls(uri, front, listed, server, d)

    def __repr__(self) -> str:
        count = "dynamic" if self.files is None else len(self.files)
        return f"Skill({self.uri!r}, name={self.name!r}, files={count})"


def _file(item: Any, skill: str, server: str) -> SkillFile:
    if not isinstance(item, dict) or not isinstance(item.get("uri"), str):
        raise ProtocolError(f"server {server!r}: skill {skill!r} lists a file without a 'uri'",
                            server=server)
    digest, size = item.get("digest"), item.get("size")
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise ProtocolError(f"server {server!r}: skill {skill!r}: file {item['uri']!r} has no "
                            f"'sha256:<64 hex>' digest (got {digest!r:.80})", server=server)
    if size is not None and (size.__class__ is not int or size < 0):
        raise ProtocolError(f"server {server!r}: skill {skill!r}: file {item['uri']!r} has a bad "
                            f"byte 'size' (got {size!r:.40})", server=server)
    return SkillFile(item["uri"], digest, size)


class LoadedSkill:
    """A skill whose ``SKILL.md`` was read and verified: :attr:`text`, :attr:`body`, and
    :meth:`read` for its other files, each read (and verified) only when asked for."""

    def __init__(self, skill: Skill, text: str, reader: Reader) -> None:
        self.skill = skill
        self.text = text
        self._reader = reader

    @property
    def uri(self) -> str:
        return self.skill.uri

    @property
    def frontmatter(self) -> dict[str, Any]:
        return self.skill.frontmatter

    @property
    def body(self) -> str:
        """``SKILL.md`` without its frontmatter block."""
        match = _FRONTMATTER.match(self.text.removeprefix("\ufeff"))
        return self.text[match.end():] if match else self.text

    def read(self, uri: str) -> bytes:
        """One file of the skill, verified against its entry (size, then digest). A file the
        entry does not list raises :class:`~mcpsync.errors.SkillVerificationError`."""
        listed = self.skill.file(uri)
        if listed is None:
            raise SkillVerificationError(
                f"server {self.skill.server!r}: skill {self.skill.uri!r} does not list the file "
                f"{uri!r}, so it cannot be verified and is not read", server=self.skill.server,
                uri=uri)
        return fetch_verified(self._reader, listed, self.skill)

    def read_text(self, uri: str) -> str:
        """:meth:`read` decoded as UTF-8."""
        return self.read(uri).decode("utf-8")

    def __repr__(self) -> str:
        return f"LoadedSkill({self.skill.uri!r}, name={self.skill.name!r})"


def fetch_verified(reader: Reader, listed: SkillFile, skill: Skill) -> bytes:
    """Read ``listed`` and return its bytes only when size and digest match the entry."""
    data = _content_bytes(reader(listed.uri), listed.uri, skill.server)
    if listed.size is not None and len(data) != listed.size:
        raise SkillVerificationError(
            f"server {skill.server!r}: skill file {listed.uri!r} is {len(data)} bytes, but its "
            f"entry says {listed.size}; the content is not used", server=skill.server,
            uri=listed.uri)
    import hashlib  # here: only skill files are digested, and OpenSSL is slow to load

    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != listed.digest:
        raise SkillVerificationError(
            f"server {skill.server!r}: skill file {listed.uri!r} does not match its entry's "
            f"digest ({actual} read, {listed.digest} listed); the content is not used",
            server=skill.server, uri=listed.uri)
    return data


def _content_bytes(result: Mapping[str, Any], uri: str, server: str) -> bytes:
    """The bytes of the one content of a ``resources/read`` result for ``uri``."""
    contents = result.get("contents")
    items = [c for c in contents if isinstance(c, dict)] if isinstance(contents, list) else []
    mine = [c for c in items if c.get("uri") == uri] or items
    if len(mine) != 1:
        raise SkillVerificationError(
            f"server {server!r}: reading skill file {uri!r} gave {len(mine)} contents, not "
            "one; the content is not used", server=server, uri=uri)
    item = mine[0]
    if isinstance(item.get("text"), str):
        return str(item["text"]).encode("utf-8")
    if isinstance(item.get("blob"), str):
        try:
            return base64.b64decode(item["blob"], validate=True)
        except (binascii.Error, ValueError):
            pass
    raise SkillVerificationError(f"server {server!r}: skill file {uri!r} came back with "
                                 "neither text nor valid base64 blob", server=server, uri=uri)


def check_frontmatter(skill: Skill, text: str) -> None:
    """Compare ``SKILL.md``'s frontmatter with the entry's, field by field."""
    match = _FRONTMATTER.match(text.removeprefix("\ufeff"))
    parsed = parse_frontmatter(match.group(1)) if match else None
    if parsed is None:
        raise SkillVerificationError(
            f"server {skill.server!r}: {skill.uri!r} has no readable YAML frontmatter; the "
            "skill is not loaded", server=skill.server, uri=skill.uri)
    for key in sorted(set(parsed) | set(skill.frontmatter)):
        if parsed.get(key) != skill.frontmatter.get(key):
            raise SkillVerificationError(
                f"server {skill.server!r}: {skill.uri!r}: frontmatter field {key!r} is "
                f"{parsed.get(key)!r:.120} in the file but {skill.frontmatter.get(key)!r:.120} "
                "in the skill entry; the skill is not loaded", server=skill.server,
                uri=skill.uri)


def parse_frontmatter(block: str) -> dict[str, Any] | None:
    """The frontmatter mapping: PyYAML when installed, else a subset (``key: scalar`` lines
    and one level of nested mappings) that covers what skill frontmatter uses. ``None``
    when the block is not a mapping this can read: the caller treats that as a failure."""
    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return _parse_subset(block)
    try:
        value = yaml.safe_load(block)
    except yaml.YAMLError:
        return None
    return value if isinstance(value, dict) else None


def _parse_subset(block: str) -> dict[str, Any] | None:
    top: dict[str, Any] = {}
    nested: dict[str, Any] | None = None
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indented = line[:1] in (" ", "\t")
        key, sep, value = line.strip().partition(":")
        if not sep or not key:
            return None
        value = value.strip()
        if indented:
            if nested is None:
                return None
            nested[key] = _scalar(value)
        elif value:
            top[key], nested = _scalar(value), None
        else:
            nested = top[key] = {}
    return top


def _scalar(value: str) -> Any:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "~"):
        return None
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    return value
