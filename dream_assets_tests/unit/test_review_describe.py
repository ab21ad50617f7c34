"""`dream review`'s diff of one change names the file and heading of a note read from a linked memory folder (not
only its hex id), and keeps a multi-line text indented under its marker."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from dream_assets.model import folder_place
from dream_assets.passes.review import PendingChange, Target, describe

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _memory(content: str, **metadata: str) -> dict:
    return {"id": "a1b2", "category": "project", "content": content, "metadata": metadata}


def _change(before: dict, after: dict) -> PendingChange:
    return PendingChange(
        change_id="c1",
        cycle_id="cy1",
        pass_name="memory_consolidation",
        position=0,
        label="merge",
        safe=False,
        summary="two notes of one fact",
        targets=(Target("memory", "a1b2", before, after),),
        rows=(),
        created_at=NOW,
        expires_at=NOW,
        status="pending",
        decided_at=None,
        decision_reason=None,
    )


def test_a_folder_note_is_named_by_its_file_and_heading() -> None:
    where = {"folder.file": "deploys.md", "folder.heading": json.dumps(["Deploys", "Staging"])}
    lines = describe(_change(_memory("Deploys are on Tuesdays.", **where), _memory("Deploys: Tuesdays.", **where)))
    assert "  memory a1b2 (deploys.md › Deploys / Staging):" in lines
    assert folder_place(_memory("x", **{"folder.file": "notes.md"})) == "notes.md"
    assert folder_place(_memory("x")) == ""


def test_a_multi_line_text_stays_indented_under_its_marker() -> None:
    lines = describe(_change(_memory("First line.\nSecond line."), _memory("First line.\nSecond line, changed.")))
    at = lines.index("    - [project] First line.")
    continued = ["      Second line.", "    + [project] First line.", "      Second line, changed."]
    assert lines[at + 1 : at + 4] == continued
    assert all("\n" not in line for line in lines)
