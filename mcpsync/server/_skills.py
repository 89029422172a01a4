"""Skills served from a directory (the ``io.modelcontextprotocol/skills`` extension).

Each subdirectory of the served directory that holds a ``SKILL.md`` is one skill, named by
the subdirectory, which must equal the ``name`` of the file's YAML frontmatter. Its files
are resources at ``skill://<name>/<path>`` (read through ``resources/read``); ``skills/list``
and ``skills/get`` give each skill's entry: the ``SKILL.md`` URI, the frontmatter as JSON,
and every file with the SHA-256 digest and size of its bytes, so that a client can check
what it reads. ``resources/directory/read`` lists a skill directory's direct children.

The directory is read once, when it is served: digests describe those bytes, so a file
changed afterwards no longer matches its digest (serve the directory again after editing).
Mistakes (no frontmatter, a name that differs from the directory's, a skill above the size
limits) raise ``ValueError`` naming the file, at start-up rather than at a client's call.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpsync.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND
from mcpsync.server._request import Refusal, Request
from mcpsync.server._services import Services, no_cursor

__all__ = ["SKILLS_EXTENSION", "SkillCatalog", "get_skill", "list_skills", "read_directory"]

SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
DIRECTORY_MIME = "inode/directory"
MAX_FILES = 512
MAX_BYTES = 16 * 1024 * 1024
_NAME = re.compile(r"^(?!.*--)[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
_FRONTMATTER = re.compile(r"^---\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|$)", re.DOTALL)


@dataclass
class SkillFile:
    uri: str
    path: Path
    mime_type: str
    size: int
    digest: str


@dataclass
class SkillCatalog:
    """Every skill of one directory: entries by ``SKILL.md`` URI, children by directory URI."""

    root: Path
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: list[SkillFile] = field(default_factory=list)
    directories: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def load(cls, root: str | Path) -> SkillCatalog:
        base = Path(root)
        if not base.is_dir():
            raise ValueError(f"skills directory {str(base)!r} does not exist or is not a "
                             "directory; give the folder that holds one subfolder per skill")
        catalog = cls(base)
        for folder in sorted(p for p in base.iterdir() if p.is_dir()):
            if folder.name.startswith("."):
                continue
            if (folder / "SKILL.md").is_file():
                catalog._add(folder)
        return catalog

    def _add(self, folder: Path) -> None:
        name = folder.name
        manifest = folder / "SKILL.md"
        if not _NAME.fullmatch(name):
            raise ValueError(f"skill folder {str(folder)!r}: the name {name!r} must be 1-64 "
                             "lowercase letters, digits and single hyphens, not at either end")
        frontmatter = _frontmatter(manifest)
        if frontmatter.get("name") != name:
            raise ValueError(f"{str(manifest)!r}: frontmatter name {frontmatter.get('name')!r} "
                             f"must equal the folder's name {name!r}")
        if not isinstance(frontmatter.get("description"), str) or not frontmatter["description"]:
            raise ValueError(f"{str(manifest)!r}: the frontmatter needs a non-empty description")
        files, folders = _walk(folder)
        if len(files) > MAX_FILES:
            raise ValueError(f"skill {name!r} has {len(files)} files; at most {MAX_FILES} "
                             "can be served")
        listed: list[dict[str, Any]] = []
        total = 0
        for path in files:
            total += path.stat().st_size
            if total > MAX_BYTES:
                raise ValueError(f"skill {name!r} holds more than {MAX_BYTES} bytes; at most "
                                 f"{MAX_BYTES} can be served")
            data = _read_no_follow(path)
            relative = path.relative_to(folder).as_posix()
            mime = ("text/markdown" if path.suffix.lower() == ".md"
                    else mimetypes.guess_type(path.name)[0] or "application/octet-stream")
            entry = SkillFile(f"skill://{name}/{relative}", path, mime, len(data),
                              "sha256:" + hashlib.sha256(data).hexdigest())
            self.files.append(entry)
            listed.append({"uri": entry.uri, "digest": entry.digest, "size": entry.size})
        uri = f"skill://{name}/SKILL.md"
        self.entries[uri] = {"uri": uri, "frontmatter": frontmatter, "resources": listed}
        for directory in [folder, *folders]:
            relative = directory.relative_to(folder).as_posix()
            dir_uri = f"skill://{name}" + ("" if relative == "." else f"/{relative}")
            children: list[dict[str, Any]] = []
            for child in sorted(directory.iterdir()):
                if child.name.startswith(".") or child.is_symlink():
                    continue
                child_uri = f"{dir_uri}/{child.name}"
                if child.is_dir():
                    children.append({"uri": child_uri, "name": child.name,
                                     "mimeType": DIRECTORY_MIME})
                else:
                    known = next((f for f in self.files if f.uri == child_uri), None)
                    if known is not None:
                        children.append({"uri": child_uri, "name": child.name,
                                         "mimeType": known.mime_type, "size": known.size})
            self.directories[dir_uri] = children

    def reader(self, item: SkillFile) -> Callable[[], str | bytes]:
        """A resource function (no arguments) that reads ``item`` from disk."""
        return lambda: self.read(item)

    def read(self, item: SkillFile) -> str | bytes:
        data = _read_no_follow(item.path)
        if item.mime_type.startswith("text/"):
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                return data
        return data


def _frontmatter(path: Path) -> dict[str, Any]:
    """The YAML frontmatter of ``SKILL.md`` as a JSON object (PyYAML's safe loader)."""
    text = path.read_text(encoding="utf-8-sig")
    match = _FRONTMATTER.match(text)
    if match is None:
        raise ValueError(f"{str(path)!r} must begin with YAML frontmatter between '---' lines "
                         "holding at least name and description")
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise ValueError("serving skills needs PyYAML to read SKILL.md frontmatter: "
                         "pip install 'mcpsync[skills]'") from None
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise ValueError(f"{str(path)!r}: the frontmatter is not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{str(path)!r}: the frontmatter must be a YAML mapping")
    return data


def _catalog(svc: Services, method: str) -> SkillCatalog:
    catalog = svc.settings.skills
    if catalog is None:
        raise Refusal(METHOD_NOT_FOUND, f"method not found: {method!r} (this server serves "
                      "no skills)")
    assert isinstance(catalog, SkillCatalog)
    return catalog


def list_skills(svc: Services, req: Request) -> dict[str, Any]:
    catalog = _catalog(svc, req.method)
    no_cursor(req)
    return svc.cache({"skills": list(catalog.entries.values())}, req)


def get_skill(svc: Services, req: Request) -> dict[str, Any]:
    catalog = _catalog(svc, req.method)
    uri = req.params.get("uri")
    entry = catalog.entries.get(uri) if isinstance(uri, str) else None
    if entry is None:
        raise Refusal(INVALID_PARAMS, f"skills/get: no skill at {uri!r}; skills/list names "
                      "the skills this server serves", {"uri": uri})
    return svc.cache({"skill": entry}, req)


def read_directory(svc: Services, req: Request) -> dict[str, Any]:
    catalog = _catalog(svc, req.method)
    uri = req.params.get("uri")
    children = catalog.directories.get(uri) if isinstance(uri, str) else None
    if children is None:
        raise Refusal(INVALID_PARAMS, f"resources/directory/read: {uri!r} is not a directory "
                      "this server serves", {"uri": uri})
    return svc.cache({"resources": list(children)}, req)


def _walk(folder: Path) -> tuple[list[Path], list[Path]]:
    """A skill's files and subfolders, hidden ones (a part starting with ``.``) left out.
    A symbolic link anywhere in it is refused, naming it: it could point outside the skills
    directory, and what is served must be what the folder holds."""
    if folder.is_symlink() or (folder / "SKILL.md").is_symlink():
        raise ValueError(f"skill folder {str(folder)!r}: symbolic links are not served (one "
                         "could point outside the skills directory); copy the files in")
    files: list[Path] = []
    folders: list[Path] = []
    for top, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(top)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in [*dirnames, *filenames]:
            if (here / name).is_symlink() and not name.startswith("."):
                raise ValueError(f"{str(here / name)!r}: symbolic links are not served in a "
                                 "skill (one could point outside the skills directory); copy "
                                 "the file in")
        folders.extend(here / d for d in dirnames)
        files.extend(here / f for f in sorted(filenames) if not f.startswith("."))
    return sorted(files), sorted(folders)


def _read_no_follow(path: Path) -> bytes:
    """The file's bytes, refusing a symbolic link put there after the skill was served."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        return f.read()
