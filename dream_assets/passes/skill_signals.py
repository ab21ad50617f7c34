"""Signals the skill passes derive from telemetry: usage counts, co-used pairs, prefix clusters, sparse and at-risk
skills.

Spec "Pass 3": usage counts and co-used pairs look back ``SkillUsageWindow`` (30 days); a skill is ``[sparse-content]``
when its content is shorter than ``SparseSkillMaxChars`` (200) and it is older than ``SparseSkillMinAge`` (7 days);
prefix clusters group skills by the first segment of their path-like name (``mcp/*``, ``research/*``).
Spec "Pass 4": a skill is at risk when it was used in a session that has Correction feedback or a SessionSummary rated
poor or fair; a session's skills are the ``skillNames`` of its feedback plus the skills of its skill-usage events.

Everything here is a pure function of what it is given, except ``read_window``, which reads one log's window.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import combinations

from dream_assets.model import Skill, iso, utc
from dream_assets.passes.common import note_malformed  # noqa: F401 - re-exported for the skill passes
from dream_assets.profile import AgentProfile
from dream_assets.store.log_records import FeedbackEvent, SkillUsageEvent
from dream_assets.store.logs import LogRead, read_events

FAILURE_RATINGS = ("poor", "fair")
#: Failure-context lines shown per at-risk skill; identical signals are folded into one line first.
MAX_CONTEXT_LINES = 12


# --- reading -------------------------------------------------------------------------------------------------
@dataclass
class WindowRead:
    """Events of one log inside the window, with what was skipped as malformed."""

    kind: str
    events: list = field(default_factory=list)
    malformed: int = 0
    problems: list[str] = field(default_factory=list)


def read_window(profile: AgentProfile, kind: str, now: datetime, window: timedelta) -> WindowRead:
    """Events of ``kind`` in ``[now - window, now]`` (a non-positive window reads everything up to ``now``), so a
    run with a past ``now`` sees what the agent had logged by then."""
    since = utc(now) - window if window > timedelta(0) else None
    result: LogRead = read_events(profile, kind, since=since, until=utc(now) + timedelta(microseconds=1))
    return WindowRead(kind, list(result.events), result.malformed, list(result.problems))


# --- usage (spec "Pass 3") -------------------------------------------------------------------------------------
def usage_counts(events: Iterable[SkillUsageEvent]) -> dict[str, int]:
    """Skill name -> number of usage events (recalled, invoked or loaded)."""
    return dict(Counter(e.skill_name for e in events))


def session_skills(usage: Iterable[SkillUsageEvent], feedback: Iterable[FeedbackEvent] = ()) -> dict[str, set[str]]:
    """Session id -> the skills it used: skill-usage events plus the ``skillNames`` its feedback carries."""
    out: dict[str, set[str]] = {}
    for e in usage:
        out.setdefault(e.session_id, set()).add(e.skill_name)
    for f in feedback:
        for name in f.skill_names:
            out.setdefault(f.session_id, set()).add(name)
    return out


def co_used_pairs(
    sessions: Mapping[str, Iterable[str]], top: int, *, known: Collection[str] | None = None
) -> list[tuple[str, str, int]]:
    """The ``top`` skill pairs used in the most sessions, as ``(a, b, sessions)`` with ``a < b``.

    Ties are broken by name so the list (and the prompt) is the same on every run. Names outside ``known`` (skills
    no longer in the catalog) are left out: a pair the model cannot act on is noise."""
    if top <= 0:
        return []
    counts: Counter[tuple[str, str]] = Counter()
    for names in sessions.values():
        present = sorted({n for n in names if known is None or n in known})
        counts.update(combinations(present, 2))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [(a, b, n) for (a, b), n in ranked[:top]]


def prefix_clusters(names: Iterable[str], *, min_size: int = 2) -> dict[str, list[str]]:
    """First path segment -> the skills under it (``mcp`` -> [mcp/email, mcp/calendar]). A family needs at least
    ``min_size`` members: a lone ``travel/visa`` has no siblings to guide between."""
    groups: dict[str, list[str]] = {}
    for name in names:
        if "/" in name:
            groups.setdefault(name.split("/", 1)[0], []).append(name)
    return {p: sorted(m) for p, m in sorted(groups.items()) if len(m) >= min_size}


# --- sparse (spec "Pass 3" and "Pass 4") ------------------------------------------------------------------------
def is_sparse(skill: Skill, now: datetime, *, max_chars: int, min_age: timedelta) -> bool:
    """Fewer than ``max_chars`` characters of content (surrounding white space not counted) and created more than
    ``min_age`` ago: young skills get time to grow before they are flagged."""
    return len(skill.content.strip()) < max_chars and utc(now) - skill.created_at > min_age


def sparse_names(skills: Iterable[Skill], now: datetime, *, max_chars: int, min_age: timedelta) -> set[str]:
    return {s.name for s in skills if is_sparse(s, now, max_chars=max_chars, min_age=min_age)}


# --- at risk (spec "Pass 4") ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FailureSignal:
    """A Correction, or a SessionSummary rated poor or fair."""

    timestamp: datetime
    session_id: str
    kind: str
    rating: str | None
    text: str

    @property
    def key(self) -> str:
        """A stable one-line identity (used in fingerprints)."""
        return json.dumps([iso(self.timestamp), self.session_id, self.kind, self.rating, self.text], ensure_ascii=False)

    @property
    def label(self) -> str:
        return f"{self.kind} ({self.rating})" if self.rating else self.kind


def is_failure(event: FeedbackEvent) -> bool:
    return event.kind == "Correction" or (event.kind == "SessionSummary" and event.rating in FAILURE_RATINGS)


def at_risk_signals(
    feedback: Iterable[FeedbackEvent], usage: Iterable[SkillUsageEvent], *, known: Collection[str]
) -> dict[str, list[FailureSignal]]:
    """Skill name -> the failure signals of the sessions that used it, oldest first. Only skills in ``known``."""
    feedback = list(feedback)
    failures: dict[str, list[FailureSignal]] = {}
    for f in feedback:
        if is_failure(f):
            failures.setdefault(f.session_id, []).append(
                FailureSignal(f.timestamp, f.session_id, f.kind, f.rating, f.text)
            )
    if not failures:
        return {}
    used = session_skills(usage, feedback)
    out: dict[str, list[FailureSignal]] = {}
    for session_id, signals in failures.items():
        for name in used.get(session_id, ()):
            if name in known:
                out.setdefault(name, []).extend(signals)
    return {
        name: sorted(sig, key=lambda s: (s.timestamp, s.session_id, s.kind, s.text))
        for name, sig in sorted(out.items())
    }


def failure_context(signals: Sequence[FailureSignal], *, limit: int = MAX_CONTEXT_LINES) -> list[str]:
    """One line per distinct signal text, oldest first, dated by its latest occurrence; a text repeated across
    sessions is folded into one line with its count, so a correction given ten times does not fill the prompt ten
    times. Only the ``limit`` most recent lines are kept."""
    groups: dict[tuple[str, str], list[FailureSignal]] = {}
    for s in signals:
        groups.setdefault((s.label, " ".join(s.text.split())), []).append(s)
    lines: list[tuple[datetime, str]] = []
    for (label, text), members in groups.items():
        latest = max(m.timestamp for m in members)
        sessions = sorted({m.session_id for m in members})
        where = f"session {sessions[0]}" if len(sessions) == 1 else f"{len(sessions)} sessions"
        times = "" if len(members) == 1 else f" ×{len(members)}"
        lines.append((latest, f"{(iso(latest) or '')[:10]} {label}{times} in {where}: {text or '(no text)'}"))
    lines.sort()
    shown = [line for _, line in lines[-limit:]] if limit > 0 else []
    if len(lines) > len(shown):
        shown.insert(0, f"({len(lines) - len(shown)} older signal(s) not shown)")
    return shown
