"""Memory consolidation's prompts: the consolidation call, the one-cluster check and the merge repair call
(deterministic: the same inputs give byte-identical prompts; see dream_assets.llm.prompts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dream_assets.llm.prompts import (
    entries_sorted,
    feedback_section,
    fenced,
    one_line,
    render_memory_entry,
    subject_text,
)
from dream_assets.model import MemoryEntry, iso

#: The note on a cluster shown again after it was left apart (a re-offered cluster is merge-only).
LEFT_SEPARATE_NOTE = (
    "left separate before; shown again: merge it if it is one durable fact, otherwise leave it "
    "as it is (removals of its entries are ignored)"
)


def render_memory_consolidation(
    entries: Sequence[MemoryEntry],
    clusters: Sequence[Sequence[str]],
    feedback: Sequence[Mapping[str, Any]],
    now: datetime,
    reoffered: Sequence[Sequence[str]] = (),
) -> str:
    lines = [f"Current time: {iso(now)}", "", f"## Memory entries ({len(entries)})"]
    lines += [render_memory_entry(e) for e in entries_sorted(entries)] or ["(none)"]
    groups = sorted(sorted(str(i) for i in c) for c in clusters)
    again = {tuple(sorted(str(i) for i in c)) for c in reoffered}
    lines += [
        "",
        f"## Near-duplicate clusters ({len(groups)})",
        "Entries the similarity scan found nearly identical. Decide per cluster: one durable fact "
        "(merge) or distinct moments (keep apart).",
    ]
    lines += [
        f"- cluster {n}: {', '.join(ids)}" + (f" ({LEFT_SEPARATE_NOTE})" if tuple(ids) in again else "")
        for n, ids in enumerate(groups, 1)
    ] or ["(none)"]
    lines += [""] + feedback_section(feedback, "Recent feedback signals")
    return "\n".join(lines) + "\n"


#: How the entries of a one-cluster check are named: letters, not ids (the answer names none; the host merges the
#: whole cluster or leaves it whole).
CLUSTER_LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def render_cluster_check(entries: Sequence[MemoryEntry]) -> str:
    """One near-duplicate cluster for the one-cluster check: each member's content under a letter, oldest first, with
    when the thing it tells of happened where the entry says (``about <when>``). No ids, dates seen, categories or
    counts: a small model judges the words, and a re-observation seen months later is still the same fact."""
    lines = [f"## Entries ({len(entries)})"]
    for label, entry in zip(CLUSTER_LABELS, entries_sorted(entries), strict=False):
        when = subject_text(entry)
        lines.append(f"- {label}: {one_line(entry.content)}" + (f" (about {when})" if when else ""))
    return "\n".join(lines) + "\n"


def render_merge_repair(
    merged_text: str,
    sources: Sequence[MemoryEntry],
    missing: Sequence[str],
    invented: Sequence[str] = (),
    dropped: Sequence[str] = (),
) -> str:
    lines = [
        "## Merged text (rejected by the coverage check)",
        fenced(merged_text),
        "",
        f"## Source entries ({len(sources)})",
    ]
    lines += [render_memory_entry(e) for e in entries_sorted(sources)]
    if missing or not (invented or dropped):
        lines += ["", "## Specifics the merged text dropped — restore every one, spelled exactly as here"]
        lines += [f'- "{s}"' for s in sorted(set(missing))] or ["(none)"]
    if dropped:
        lines += [
            "",
            "## Source sentences whose content the merged text dropped — restore what each one says (the "
            "sentence itself, or every point of it)",
        ]
        lines += [f"- {one_line(s)}" for s in dict.fromkeys(dropped)]
    if invented:
        lines += [
            "",
            "## Specifics the merged text invented — no source states them; remove each one, or correct it "
            "to the value the sources state",
        ]
        lines += [f'- "{s}"' for s in sorted(set(invented))]
    return "\n".join(lines) + "\n"
