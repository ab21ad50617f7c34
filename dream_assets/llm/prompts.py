"""Deterministic prompt renderers: the same inputs give byte-identical prompts.

Nothing here reads a clock (``now`` is a parameter) and wherever the order of the inputs carries no
meaning it is sorted, so a store that returns rows in a different order does not produce a different
prompt (which would also defeat prompt caching on the endpoint). Orders that do mean something are kept:
messages within a session, the failure context of a skill.

Memory entries carry their temporal context (spec, pass 1): ``first=`` (CreatedAt), ``last=``
(LastSeenAt), ``reinforced=N×`` (ReinforcementCount) and ``subject=`` when subject-time metadata exists.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from dream_assets.model import MemoryEntry, Skill, iso, parse_ts

SPARSE_REVIEW_NOTE = (
    "### Review note: This skill has minimal content.\nExpand it with concrete steps, examples, and edge cases."
)
RECURRING_TOPICS_HEADER = "Recurring topics across sessions (term frequency ≥ 2 sessions):"


# --- helpers -----------------------------------------------------------------------------------------
def _one_line(text: Any) -> str:
    """Continuation lines indented, so a multi-line value stays inside its list item."""
    return "\n    ".join(str(text).strip().splitlines()) if str(text).strip() else ""


def _date(dt: datetime) -> str:
    return (iso(dt) or "")[:10]


def _fenced(text: str) -> str:
    """A code fence longer than any backtick run inside ``text``, so skill markdown cannot break out."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"


def _ts_key(value: Any) -> tuple[int, str]:
    """Sort key for a timestamp that may be missing or malformed (those sort oldest)."""
    try:
        return (1, iso(parse_ts(value)) or "")
    except (TypeError, ValueError):
        return (0, str(value or ""))


def _ts_text(value: Any) -> str:
    try:
        return iso(parse_ts(value)) or ""
    except (TypeError, ValueError):
        return str(value or "")


def _first(item: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if item.get(key) not in (None, ""):
            return item[key]
    return None


def _extras(item: Mapping[str, Any], shown: Collection[str]) -> str:
    rest = {k: v for k, v in item.items() if k not in shown and v not in (None, "", [], {})}
    return " ".join(f"{k}={_value(rest[k])}" for k in sorted(rest))


def _value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# --- memory ---------------------------------------------------------------------------------------------
def _subject(entry: MemoryEntry) -> str:
    st = entry.subject_time
    if "subjectTime" in st:
        return st["subjectTime"]
    start, end = st.get("subjectTimeStart", ""), st.get("subjectTimeEnd", "")
    if start or end:
        return f"{start}..{end}"
    return ""


def render_memory_entry(entry: MemoryEntry) -> str:
    """``- id=<id> [<category>] tags=<a,b> first=<date> last=<date> reinforced=N× subject=<..> :: <content>``"""
    parts = [f"- id={entry.id}", f"[{entry.category}]"]
    if entry.tags:
        parts.append("tags=" + ",".join(sorted(entry.tags)))
    parts += [
        f"first={_date(entry.created_at)}",
        f"last={_date(entry.last_seen_at)}",
        f"reinforced={entry.reinforcement_count}×",
    ]
    subject = _subject(entry)
    if subject:
        parts.append(f"subject={subject}")
    return " ".join(parts) + " :: " + _one_line(entry.content)


def _entries_sorted(entries: Iterable[MemoryEntry]) -> list[MemoryEntry]:
    return sorted(entries, key=lambda e: (iso(e.created_at) or "", e.id))


def render_feedback_item(item: Mapping[str, Any]) -> str:
    """``- <timestamp> [<kind>] rating=<r> session=<id> :: <text>``"""
    parts = ["-", _ts_text(item.get("timestamp")) or "(no time)"]
    if item.get("kind"):
        parts.append(f"[{item['kind']}]")
    if item.get("rating") not in (None, ""):
        parts.append(f"rating={item['rating']}")
    if item.get("sessionId"):
        parts.append(f"session={item['sessionId']}")
    extra = _extras(item, {"timestamp", "kind", "rating", "sessionId", "text"})
    if extra:
        parts.append(extra)
    return " ".join(parts) + " :: " + _one_line(item.get("text") or "")


def _feedback_section(feedback: Sequence[Mapping[str, Any]], title: str) -> list[str]:
    items = sorted(
        feedback,
        key=lambda f: (
            _ts_key(f.get("timestamp")),
            str(f.get("sessionId") or ""),
            str(f.get("kind") or ""),
            str(f.get("text") or ""),
        ),
        reverse=True,
    )
    lines = [f"## {title} ({len(items)}, newest first)"]
    lines += [render_feedback_item(f) for f in items] or ["(none)"]
    return lines


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
    lines += [render_memory_entry(e) for e in _entries_sorted(entries)] or ["(none)"]
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
    lines += [""] + _feedback_section(feedback, "Recent feedback signals")
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
        _fenced(merged_text),
        "",
        f"## Source entries ({len(sources)})",
    ]
    lines += [render_memory_entry(e) for e in _entries_sorted(sources)]
    if missing or not (invented or dropped):
        lines += ["", "## Specifics the merged text dropped — restore every one, spelled exactly as here"]
        lines += [f'- "{s}"' for s in sorted(set(missing))] or ["(none)"]
    if dropped:
        lines += [
            "",
            "## Source sentences whose content the merged text dropped — restore what each one says (the "
            "sentence itself, or every point of it)",
        ]
        lines += [f"- {_one_line(s)}" for s in dict.fromkeys(dropped)]
    if invented:
        lines += [
            "",
            "## Specifics the merged text invented — no source states them; remove each one, or correct it "
            "to the value the sources state",
        ]
        lines += [f'- "{s}"' for s in sorted(set(invented))]
    return "\n".join(lines) + "\n"


# --- skills ---------------------------------------------------------------------------------------------
def _skill_block(skill: Skill, notes: Sequence[str] = ()) -> list[str]:
    title = f"### skill: {skill.name}"
    if notes:
        title += " — " + " ".join(notes)
    lines = [title]
    if skill.summary:
        lines.append(f"Summary: {_one_line(skill.summary)}")
    if skill.see_also:
        lines.append("See also: " + ", ".join(sorted(skill.see_also)))
    lines.append(_fenced(skill.content))
    return lines


def render_skill_consolidation(
    skills: Sequence[Skill],
    usage_counts: Mapping[str, int],
    sparse: Collection[str],
    co_used: Sequence[tuple[str, str, int]],
    prefix_clusters: Mapping[str, Sequence[str]],
    *,
    window_days: float = 30,
) -> str:
    days = f"{window_days:g}"
    lines = [f"## Skills ({len(skills)})"]
    for skill in sorted(skills, key=lambda s: s.name):
        notes = [f"used {int(usage_counts.get(skill.name, 0))}× in {days} days"]
        if skill.name in sparse:
            notes.append("[sparse-content]")
        lines += _skill_block(skill, notes) + [""]
    pairs = sorted(((min(a, b), max(a, b), int(n)) for a, b, n in co_used), key=lambda p: (-p[2], p[0], p[1]))
    lines.append(f"## Top co-used skill pairs (invoked in the same session, last {days} days)")
    lines += [f"- {a} + {b}: {n} session(s)" for a, b, n in pairs] or ["(none)"]
    lines += ["", "## Prefix clusters (skills grouped by name prefix)"]
    lines += [f"- {prefix}/*: {', '.join(sorted(members))}" for prefix, members in sorted(prefix_clusters.items())] or [
        "(none)"
    ]
    return "\n".join(lines) + "\n"


def _catalog(skills: Sequence[Skill]) -> list[str]:
    lines = [f"## Existing skills ({len(skills)})"]
    lines += [f"- {s.name}: {_one_line(s.summary) or '(no summary)'}" for s in sorted(skills, key=lambda s: s.name)]
    return lines if skills else lines + ["(none)"]


def render_message(item: Mapping[str, Any]) -> str:
    """One conversation-log line: ``- [<timestamp>] <role>: <content>``."""
    when = _ts_text(_first(item, "timestamp", "time", "ts"))
    role = _first(item, "role", "speaker", "author") or "message"
    text = _first(item, "content", "text", "message") or ""
    return (f"- [{when}] " if when else "- ") + f"{role}: {_one_line(text)}"


def _sessions(sessions: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    def first_time(sid: str) -> tuple[tuple[int, str], str]:
        times = [_ts_key(_first(m, "timestamp", "time", "ts")) for m in sessions[sid]]
        return (min(times) if times else (0, ""), sid)

    lines = [f"## Conversation log ({len(sessions)} session(s))"]
    for sid in sorted(sessions, key=first_time):
        msgs = sessions[sid]
        lines.append(f"### Session {sid} ({len(msgs)} message(s))")
        lines += [render_message(m) for m in msgs]  # conversation order is meaningful: kept
    return lines if sessions else lines + ["(none)"]


def render_skill_gap(
    sessions: Mapping[str, Sequence[Mapping[str, Any]]],
    skills: Sequence[Skill],
    recurring_terms: Sequence[tuple[str, int]],
) -> str:
    lines = _sessions(sessions) + [""] + _catalog(skills)
    terms = sorted(((str(t), int(n)) for t, n in recurring_terms), key=lambda p: (-p[1], p[0]))
    if terms:  # spec, pass 2: the quantitative nudge, in exactly this form
        lines += ["", RECURRING_TOPICS_HEADER] + [f'- "{t}": {n} session(s)' for t, n in terms]
    return "\n".join(lines) + "\n"


def render_skill_optimization(at_risk: Sequence[tuple[Skill, Sequence[str]]], sparse: Sequence[Skill]) -> str:
    lines = [f"## At-risk skills ({len(at_risk)}): used in sessions with corrections or poor/fair summaries"]
    for skill, context in sorted(at_risk, key=lambda p: p[0].name):
        lines += _skill_block(skill)
        lines.append("#### Failure context")
        lines += [f"- {_one_line(c)}" for c in context] or ["(none recorded)"]
        lines.append("")
    if not at_risk:
        lines += ["(none)", ""]
    lines.append(f"## Sparse skills ({len(sparse)})")
    for skill in sorted(sparse, key=lambda s: s.name):
        lines += _skill_block(skill) + [SPARSE_REVIEW_NOTE, ""]
    if not sparse:
        lines.append("(none)")
    return "\n".join(lines).rstrip("\n") + "\n"


def render_preference_inference(
    sessions: Mapping[str, Sequence[Mapping[str, Any]]], feedback: Sequence[Mapping[str, Any]]
) -> str:
    lines = _sessions(sessions) + [""] + _feedback_section(feedback, "Recent feedback signals")
    return "\n".join(lines) + "\n"


# --- wisps and tier routing -------------------------------------------------------------------------
def _pattern_line(p: Mapping[str, Any], shown: Sequence[str]) -> list[str]:
    head = f'- "{p.get("description", "")}"'
    if p.get("skill_name"):
        head += f" (skill {p['skill_name']})"
    for key in shown:
        if p.get(key) not in (None, "", [], {}):
            head += f" {key}={_value(p[key])}"
    extra = _extras(p, {"description", "skill_name", "errors", *shown})
    lines = [head + (f" {extra}" if extra else "")]
    for err in p.get("errors") or []:
        lines.append(f"    error: {_one_line(err)}")
    return lines


def render_wisp_failures(
    failure_patterns: Sequence[Mapping[str, Any]], success_patterns: Sequence[Mapping[str, Any]]
) -> str:
    def order(p: Mapping[str, Any]) -> tuple[int, str]:
        return (-int(p.get("count") or p.get("runs") or 0), str(p.get("description", "")))

    lines = [f"## Recurring failure patterns ({len(failure_patterns)})"]
    for p in sorted(failure_patterns, key=order):
        lines += _pattern_line(p, ("count", "failed_steps"))
    if not failure_patterns:
        lines.append("(none)")
    lines += ["", f"## Consistent success patterns — promotion candidates ({len(success_patterns)})"]
    for p in sorted(success_patterns, key=order):
        lines += _pattern_line(p, ("runs", "successes", "success_rate"))
    if not success_patterns:
        lines.append("(none)")
    return "\n".join(lines) + "\n"


def render_tier_routing(tier_stats: Sequence[Mapping[str, Any]], window_days: float) -> str:
    lines = [f"## Tier routing over the last {window_days:g} days ({len(tier_stats)} tier(s))"]
    for stats in sorted(tier_stats, key=lambda s: str(s.get("tier", ""))):
        rest = _extras(stats, {"tier"})
        lines.append(f"- tier {stats.get('tier', '(unnamed)')}" + (f": {rest}" if rest else ""))
    if not tier_stats:
        lines.append("(none)")
    return "\n".join(lines) + "\n"
