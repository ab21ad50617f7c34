"""A Claude Code ``MEMORY.md`` kept within the lines a session loads (``INDEX_LINE_BUDGET``), nothing lost.

Claude Code loads only the first 200 lines of the index; an entry below them is as good as gone for the agent. When
the index is longer, write-back moves the lines past the budget into the topic file ``CONTINUED_FILE`` (appended
after what an earlier trim moved there) and ends the index with one entry linking to it, so every entry and every
note stays one link away and the index is within the budget. The cut falls between notes (never inside a bullet
with its continuation lines or a code fence), and the moved lines are preceded by the headings they stood under, so
each moved note keeps its heading path. The continuation file's link lines are index entries like the index's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from dream_assets.folders.formats import (
    CONTINUED_FILE,
    INDEX_FILE,
    INDEX_LINE_BUDGET,
    Block,
    heading_lines,
    parse_file,
)

CONTINUED_LINK = (
    f"- [Memory index, continued]({CONTINUED_FILE}) — the entries after the first {INDEX_LINE_BUDGET} lines of "
    f"{INDEX_FILE}\n"
)
CONTINUED_HEAD = (
    "---\n"
    "name: Memory index, continued\n"
    f"description: index entries and notes moved here to keep {INDEX_FILE} within the {INDEX_LINE_BUDGET} lines a "
    "session loads\n"
    "type: reference\n"
    "---\n"
)


@dataclass(frozen=True)
class Trim:
    index: str  # MEMORY.md's new text
    continued: str  # the continuation file's new text
    moved: list[tuple[Block, Block]]  # each moved note: its block in MEMORY.md, then in the continuation file
    lines: int  # lines moved


def _without_link(text: str) -> str:
    return "".join(ln for ln in text.splitlines(keepends=True) if f"]({CONTINUED_FILE})" not in ln)


def _line_count(text: str) -> int:
    return len(text.splitlines())


def trim(text: str, continued: str | None, budget: int = INDEX_LINE_BUDGET) -> Trim | None:
    """``text`` (MEMORY.md) within ``budget`` lines and the continuation file after the move, or None when it fits
    already (or no cut between notes leaves room for the link)."""
    if _line_count(text) <= budget:
        return None
    body = _without_link(text)
    if not body.endswith("\n"):
        body += "\n"
    lines = body.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    blocks = parse_file("claude-code", INDEX_FILE, body).blocks
    spans = [(b.start, b.end) for b in blocks]
    cut = next(
        (k for k in range(min(budget - 1, len(lines)), 0, -1) if not any(s < starts[k] <= e for s, e in spans)),
        None,
    )
    if cut is None:
        return None
    kept, moved = "".join(lines[:cut]), "".join(lines[cut:])
    prefix = "\n".join(heading_lines(kept))
    if continued is None:
        base = CONTINUED_HEAD
    else:  # after what an earlier trim moved, a blank line apart (a paragraph there must not run on into these)
        base = continued + ("\n" if continued.endswith("\n") else "\n\n")
    new = base + (prefix + "\n" if prefix else "") + moved.lstrip("\n")
    old_blocks = [b for b in blocks if b.start >= starts[cut]]
    new_blocks = [b for b in parse_file("claude-code", CONTINUED_FILE, new).blocks if b.start >= len(base)]
    if len(old_blocks) != len(new_blocks):  # a cut that would read back as other notes: not made
        return None
    return Trim(kept + CONTINUED_LINK, new, list(zip(old_blocks, new_blocks, strict=True)), len(lines) - cut)
