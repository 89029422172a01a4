"""Skills: listing reads no file, loading verifies SKILL.md, other files are read on demand.

Against ``peers/skills_server.py``, a real subprocess that logs every ``resources/read``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import mcpsync
from mcpsync.client._skills import parse_frontmatter

PEER = Path(__file__).with_name("peers") / "skills_server.py"
SKILL = "skill://pdf-processing/SKILL.md"
FORMS = "skill://pdf-processing/references/FORMS.md"


def _connect(mode: str, log: Path) -> mcpsync.Client:
    return mcpsync.connect([sys.executable, str(PEER), mode], env={"SKILLS_LOG": str(log)})


def _reads(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_listing_reads_nothing_and_loading_reads_only_skill_md(tmp_path: Path) -> None:
    log = tmp_path / "reads"
    with _connect("good", log) as client:
        skills = client.list_skills()
        assert [s.uri for s in skills] == [SKILL]
        assert skills[0].name == "pdf-processing"
        assert [f.uri for f in skills[0].files or ()] == [SKILL, FORMS]
        assert _reads(log) == []                      # no prefetch on listing
        loaded = client.get_skill(SKILL)
        assert _reads(log) == [SKILL]                 # loading reads SKILL.md only
        assert loaded.body.strip() == "Skill body."
        assert loaded.frontmatter["metadata"] == {"author": "example"}
        assert loaded.read_text(FORMS) == "Supporting content.\n"
        assert _reads(log) == [SKILL, FORMS]


@pytest.mark.parametrize(("mode", "words"), [
    ("digest", "does not match its entry's digest"),
    ("size", "bytes, but its entry says"),
    ("frontmatter", "frontmatter field 'description'"),
])
def test_a_tampered_skill_md_is_refused(tmp_path: Path, mode: str, words: str) -> None:
    log = tmp_path / "reads"
    with _connect(mode, log) as client:
        client.list_skills()
        with pytest.raises(mcpsync.SkillVerificationError) as info:
            client.get_skill(SKILL)
        assert words in str(info.value)
        assert info.value.uri == SKILL
        assert SKILL in str(info.value)
        assert _reads(log) == [SKILL]                 # nothing further was fetched


def test_get_skill_without_listing_asks_skills_get(tmp_path: Path) -> None:
    log = tmp_path / "reads"
    with _connect("good", log) as client:
        loaded = client.get_skill(SKILL)
        assert loaded.uri == SKILL
        with pytest.raises(mcpsync.RemoteError):
            client.get_skill("skill://nope/SKILL.md")


def test_an_unlisted_file_is_refused_without_a_read(tmp_path: Path) -> None:
    log = tmp_path / "reads"
    with _connect("good", log) as client:
        loaded = client.get_skill(SKILL)
        with pytest.raises(mcpsync.SkillVerificationError, match="does not list the file"):
            loaded.read("skill://pdf-processing/scripts/run.sh")
        assert _reads(log) == [SKILL]


def test_dynamic_files_check_the_frontmatter_and_refuse_other_files(tmp_path: Path) -> None:
    log = tmp_path / "reads"
    with _connect("dynamic", log) as client:
        (skill,) = client.list_skills()
        assert skill.files is None
        loaded = client.get_skill(SKILL)
        with pytest.raises(mcpsync.SkillVerificationError):
            loaded.read(FORMS)


def test_a_server_without_the_extension_is_refused_before_sending() -> None:
    with mcpsync.connect([sys.executable, "-m", "mcpsync.demo"]) as client, \
            pytest.raises(mcpsync.CapabilityNotSupported, match="skills"):
        client.list_skills()


def test_the_fallback_frontmatter_parser_reads_what_skills_use() -> None:
    from mcpsync.client import _skills

    block = "name: x\ndescription: 'a: b'\nmetadata:\n  version: 2\n  beta: true\n"
    assert _skills._parse_subset(block) == {"name": "x", "description": "a: b",
                                            "metadata": {"version": 2, "beta": True}}
    assert parse_frontmatter(block) == _skills._parse_subset(block)
    assert _skills._parse_subset("- a list\n") is None
