"""Skills served from a directory, over real pipes: entries, digests, directory reads, and
the mistakes refused at start-up."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mcpsync.server import Server

from .helpers import PipeServer, modern_meta

SKILL = "---\nname: notes\ndescription: Take notes\nmetadata:\n  team: docs\n---\n\nBody.\n"


def _skills(tmp_path: Path) -> Path:
    (tmp_path / "notes" / "extra").mkdir(parents=True)
    (tmp_path / "notes" / "SKILL.md").write_text(SKILL)
    (tmp_path / "notes" / "extra" / "tips.md").write_text("tips\n")
    (tmp_path / "not-a-skill").mkdir()
    return tmp_path


def test_a_served_directory_answers_list_get_read_and_directory_read(tmp_path: Path) -> None:
    server = Server("skills-test", "1")
    assert server.serve_skills(_skills(tmp_path)) == ["skill://notes/SKILL.md"]
    with PipeServer(server) as p:
        caps = p.request(1, "server/discover", {"_meta": modern_meta()})["result"]["capabilities"]
        assert caps["extensions"]["io.modelcontextprotocol/skills"] == {"directoryRead": True}
        assert "resources" in caps
        listed = p.request(2, "skills/list", {"_meta": modern_meta()})["result"]
        assert "ttlMs" in listed and "cacheScope" in listed
        entry = listed["skills"][0]
        assert entry["frontmatter"] == {"name": "notes", "description": "Take notes",
                                        "metadata": {"team": "docs"}}
        files = {r["uri"]: r for r in entry["resources"]}
        assert files["skill://notes/SKILL.md"] == {
            "uri": "skill://notes/SKILL.md", "size": len(SKILL.encode()),
            "digest": "sha256:" + hashlib.sha256(SKILL.encode()).hexdigest()}
        assert set(files) == {"skill://notes/SKILL.md", "skill://notes/extra/tips.md"}
        got = p.request(3, "skills/get", {"uri": "skill://notes/SKILL.md",
                                          "_meta": modern_meta()})["result"]
        assert got["skill"] == entry and "nextCursor" not in got
        assert p.request(4, "skills/get", {"uri": "skill://x/SKILL.md",
                                           "_meta": modern_meta()})["error"]["code"] == -32602
        read = p.request(5, "resources/read", {"uri": "skill://notes/SKILL.md",
                                               "_meta": modern_meta()})["result"]
        assert read["contents"][0]["text"] == SKILL
        assert read["contents"][0]["mimeType"] == "text/markdown"
        children = p.request(6, "resources/directory/read", {
            "uri": "skill://notes", "_meta": modern_meta()})["result"]["resources"]
        assert {c["uri"]: c["mimeType"] for c in children} == {
            "skill://notes/SKILL.md": "text/markdown", "skill://notes/extra": "inode/directory"}
        bad = p.request(7, "resources/directory/read", {"uri": "skill://notes/SKILL.md",
                                                        "_meta": modern_meta()})["error"]
        assert bad["code"] == -32602


def test_without_skills_the_methods_are_unknown() -> None:
    with PipeServer(Server("plain", "1")) as p:
        assert p.request(1, "skills/list", {"_meta": modern_meta()})["error"]["code"] == -32601


@pytest.mark.parametrize(("text", "problem"), [
    ("no frontmatter\n", "must begin with YAML frontmatter"),
    ("---\nname: other\ndescription: d\n---\n", "must equal the folder's name"),
    ("---\nname: notes\n---\n", "non-empty description"),
])
def test_a_broken_skill_is_refused_naming_its_file(tmp_path: Path, text: str,
                                                   problem: str) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "SKILL.md").write_text(text)
    with pytest.raises(ValueError, match=problem) as info:
        Server("s", "1").serve_skills(tmp_path)
    assert "SKILL.md" in str(info.value)


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        Server("s", "1").serve_skills(tmp_path / "nowhere")


def test_symbolic_links_in_a_skill_are_refused_naming_them(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n", encoding="utf-8")
    skills = _skills(tmp_path)
    link = skills / "notes" / "leak.txt"
    link.symlink_to(outside / "secret.txt")
    with pytest.raises(ValueError, match="symbolic links are not served") as refused:
        Server("s", "1").serve_skills(skills)
    assert "leak.txt" in str(refused.value)
    link.unlink()
    (skills / "notes" / "outdir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match="outdir"):
        Server("s", "1").serve_skills(skills)


def test_hidden_folders_are_neither_files_nor_directories(tmp_path: Path) -> None:
    skills = _skills(tmp_path)
    hidden = skills / "notes" / ".git" / "objects"
    hidden.mkdir(parents=True)
    (hidden / "x").write_text("x", encoding="utf-8")
    server = Server("s", "1")
    server.serve_skills(skills)
    catalog = server._settings.skills
    assert catalog is not None
    assert not [f.uri for f in catalog.files if "/.git" in f.uri]
    assert not [d for d in catalog.directories if "/.git" in d]
    assert all(not c["uri"].endswith("/.git") for c in catalog.directories["skill://notes"])
