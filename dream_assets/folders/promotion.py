"""Promotion of what recurs in an OpenClaw workspace's daily notes into its long-term ``MEMORY.md``.

OpenClaw's own Dreaming (the deep phase of ``memory-core``) appends what it promotes to ``MEMORY.md`` under a heading
``## Promoted From Short-Term Memory (YYYY-MM-DD)``, each bullet after a ``<!-- openclaw-memory-promotion:<key> -->``
marker whose key names the snippet (``memory:<daily note>:<first line>:<last line>``), and leaves the daily notes as
they are: the marker is what tells a later promotion the snippet is done. A write-back does the same, so either
dreamer sees the other's promotions:

- **The host rule** (``recurring``): a live memory is promoted when its notes (the note it was read from, and the
  notes whose memories consolidation merged into it or save-time dedup folded onto it) are in at least
  ``FolderPromotionMinDailyNotes`` distinct daily notes, each of those notes the same fact as a note of another
  daily note (``same_fact``: one carries everything the other says, ``text/restated.carries``, or their similarity
  by the store's lexical measure reaches its threshold), and none of its notes is in ``MEMORY.md`` already.
- **The guard of a merge**: the memory's text must carry every specific (name, number, date) of each of those
  notes (``check_merge_coverage``); a memory that does not is left where it is, and the write-back says why.
- **Nothing removed**: the daily notes keep their lines; their notes are marked ``promoted`` in the folder state, so
  a later write-back leaves them in place too (the fact lives on in ``MEMORY.md``).

The cycle's human-readable diary goes to ``DREAMS.md`` (``diary``) the way OpenClaw writes its Dream Diary: an entry
after a ``---`` rule and the time in italics, between ``<!-- openclaw:dreaming:diary:start -->`` and ``...:end -->``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from dream_assets.agent_memory import MemoryRecord
from dream_assets.folders.formats import INDEX_FILE, Block, is_memory_file
from dream_assets.model import iso
from dream_assets.text.coverage import CoverageSource, CoverageVocabulary, check_merge_coverage
from dream_assets.text.restated import carries
from dream_assets.text.similarity import exact_key

PROMOTED_HEADING = "Promoted From Short-Term Memory"
DIARY_START = "<!-- openclaw:dreaming:diary:start -->"
DIARY_END = "<!-- openclaw:dreaming:diary:end -->"
MARKER_PREFIX = "openclaw-memory-promotion:"
NEW_INDEX_HEADER = "# Long-Term Memory\n"


@dataclass(frozen=True)
class Note:
    """One note of the folder as the write-back sees it: its file, its block there and its memory's record."""

    rel: str
    text: str  # the file's text
    block: Block
    record: MemoryRecord


@dataclass(frozen=True)
class Promotion:
    record: MemoryRecord  # the live memory that goes into MEMORY.md
    sources: tuple[Note, ...]  # the daily-note notes it recurs in


def is_daily(rel: str) -> bool:
    return rel != INDEX_FILE and is_memory_file("openclaw", rel)


def same_fact(a: str, b: str, near: Callable[[str, str], bool]) -> bool:
    """Whether two notes say the same fact: the same text, one carrying everything the other says (restatement), or
    near duplicates by the store's save-time measure (``near``: ``MemoryStore.same_fact``)."""
    return exact_key(a) == exact_key(b) or carries(a, b) or carries(b, a) or near(a, b)


def recurring(notes: Sequence[Note], need: int, near: Callable[[str, str], bool]) -> tuple[Note, ...]:
    """The daily-note notes of one memory that recur: each the same fact as a note of another daily note; empty
    unless they span ``need`` (``FolderPromotionMinDailyNotes``) daily notes and the memory has no note in
    MEMORY.md."""
    if need <= 0 or any(n.rel == INDEX_FILE for n in notes):
        return ()
    daily = [n for n in notes if is_daily(n.rel)]
    if len({n.rel for n in daily}) < need:
        return ()
    found = tuple(
        n for n in daily if any(o.rel != n.rel and same_fact(n.block.text, o.block.text, near) for o in daily)
    )
    return found if len({n.rel for n in found}) >= need else ()


def coverage_problem(record: MemoryRecord, sources: Sequence[Note], vocab: CoverageVocabulary) -> str | None:
    """Why ``record``'s text may not stand for ``sources`` in MEMORY.md (a specific it drops), or None."""
    cover = [CoverageSource(n.block.text, record.category) for n in sources]
    result = check_merge_coverage(cover, record.content, vocab)
    if result.ok:
        return None
    return f"memory {record.id} was not promoted to {INDEX_FILE}: its text drops {', '.join(result.missing)}"


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def marker(note: Note) -> str:
    """OpenClaw's promotion marker for one source note (its key: ``memory:<file>:<first line>:<last line>``)."""
    first, last = _line_of(note.text, note.block.start), _line_of(note.text, note.block.end)
    return f"<!-- {MARKER_PREFIX}memory:{note.rel}:{first}:{last} -->"


def section(promotions: Sequence[tuple[Promotion, str]], now: datetime) -> str:
    """The text appended to MEMORY.md: the dated heading, then per promotion its markers and its bullet
    (``promotions`` pairs each with the bullet's text as it is to be written)."""
    lines = ["", f"## {PROMOTED_HEADING} ({now:%Y-%m-%d})", ""]
    for promotion, text in promotions:
        lines += [marker(n) for n in promotion.sources]
        lines.append(f"- {text}")
    return "\n".join(lines) + "\n"


def diary_line(promotion: Promotion) -> str:
    files = sorted({n.rel for n in promotion.sources})
    text = " ".join(promotion.record.content.split())
    return f"Promoted to {INDEX_FILE}: {text} (it recurred in {', '.join(files)}, which keep their lines)."


def diary(old: str | None, lines: Sequence[str], now: datetime) -> str:
    """``DREAMS.md`` with one more Dream Diary entry (OpenClaw's shape: entries between the diary markers, each after
    a ``---`` rule and the time in italics): the new entry goes last inside the markers, which are added at the end
    of the file when it has none. Everything already in the file stays as it is."""
    entry = f"---\n\n*{iso(now)}*\n\n" + "\n".join(lines) + "\n\n"
    text = old if old is not None else "# Dream Diary\n"
    at = text.rfind(DIARY_END)
    if at >= 0 and text.rfind(DIARY_START, 0, at) >= 0:
        return text[:at] + entry + text[at:]
    if not text.endswith("\n"):
        text += "\n"
    return f"{text}\n{DIARY_START}\n{entry}{DIARY_END}\n"
