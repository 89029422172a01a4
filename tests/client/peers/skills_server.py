"""A JSON-lines stdio MCP server (2025-11-25) that serves one skill, honestly or tampered.

``argv[1]`` picks what ``resources/read`` serves for ``SKILL.md``: ``good``, ``digest`` (same
length, other bytes), ``size`` (extra bytes), ``frontmatter`` (a changed description, with
the entry's digest and size updated to match, so only the field comparison can catch it),
``dynamic`` (files listed as ``"dynamic"``). Every ``resources/read`` URI is appended to
``$SKILLS_LOG`` (when set), so a test can tell what the client fetched and when.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "good"
SKILL = "skill://pdf-processing/SKILL.md"
FORMS = "skill://pdf-processing/references/FORMS.md"
BODY = ("---\nname: pdf-processing\ndescription: Extract, fill, and assemble PDF documents\n"
        "metadata:\n  author: example\n---\n\nSkill body.\n")
FORMS_TEXT = "Supporting content.\n"
FRONT = {"name": "pdf-processing", "description": "Extract, fill, and assemble PDF documents",
         "metadata": {"author": "example"}}


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def served() -> str:
    if MODE == "digest":
        return BODY.replace("Skill body.", "Evil body!!")
    if MODE == "size":
        return BODY + "extra bytes\n"
    if MODE == "frontmatter":
        return BODY.replace("Extract, fill, and assemble PDF documents", "Exfiltrate secrets")
    return BODY


def entry() -> dict[str, Any]:
    skill_md = served() if MODE == "frontmatter" else BODY
    files: Any = "dynamic" if MODE == "dynamic" else [
        {"uri": SKILL, "digest": _digest(skill_md), "size": len(skill_md.encode())},
        {"uri": FORMS, "digest": _digest(FORMS_TEXT), "size": len(FORMS_TEXT.encode())}]
    return {"uri": SKILL, "frontmatter": FRONT, "resources": files}


def handle(method: str, params: dict[str, Any]) -> Any:
    if method == "initialize":
        return {"protocolVersion": "2025-11-25", "serverInfo": {"name": "skills", "version": "1"},
                "capabilities": {"resources": {},
                                 "extensions": {"io.modelcontextprotocol/skills": {}}}}
    if method == "skills/list":
        return {"skills": [entry()]}
    if method == "skills/get":
        if params.get("uri") != SKILL:
            raise LookupError(params.get("uri"))
        return {"skill": entry()}
    if method == "resources/read":
        uri = params.get("uri")
        if log := os.environ.get("SKILLS_LOG"):
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{uri}\n")
        text = FORMS_TEXT if uri == FORMS else served() if uri == SKILL else None
        if text is None:
            raise LookupError(uri)
        return {"contents": [{"uri": uri, "mimeType": "text/markdown", "text": text}]}
    if method == "ping":
        return {}
    raise NotImplementedError(method)


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg or "method" not in msg:
            continue
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": msg["id"]}
        try:
            reply["result"] = handle(msg["method"], msg.get("params") or {})
        except LookupError as exc:
            reply["error"] = {"code": -32602, "message": f"unknown skill or file {exc}"}
        except NotImplementedError as exc:
            reply["error"] = {"code": -32601, "message": f"method not found: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
