"""The per-cycle report for people who do not open Dagster: what the cycle changed — merged, archived, superseded,
protected, rejected with the reasons — the model calls and tokens, and the commands that undo it.

Built from the pass records of the cycle (``pass-reports/``, see ``dream_assets.passes.outcome``) and the change log
(what is still undoable). The cycle writes it as Markdown under ``reports/<cycle-id>.md`` in the profile and keeps the
newest ``REPORTS_KEEP``; `dream report` prints it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from dream_assets.file_safety import atomic_write
from dream_assets.model import folder_place, iso
from dream_assets.passes.outcome import changes_of, load_outcomes, recorded_at
from dream_assets.passes.report import Change
from dream_assets.passes.review import PENDING, decisions
from dream_assets.profile import AgentProfile
from dream_assets.store.changes import PassChanges

REPORTS_KEEP = 30
#: Lines per section; the rest is counted ("… N more").
SECTION_LIMIT = 50

#: Section title -> change kinds of the pass reports that belong to it (superseded is split off archived by reason).
SECTIONS: dict[str, tuple[str, ...]] = {
    "Merged": ("merge-created", "skill-merged"),
    "Archived": ("archived", "skill-archived", "purged"),
    "Superseded": (),
    "Protected": ("protected", "kept"),
    "Rejected": (
        "merge-rejected",
        "rejected",
        "preference-rejected",
        "invalid-item",
        "merge-deferred",
        "skipped",
    ),
}


@dataclass
class CycleReport:
    agent: str
    cycle_id: str
    profile_arg: str  # how the undo commands name the profile
    passes: list[dict[str, Any]]  # the pass records of this cycle, in pass order
    undoable: list[PassChanges] = field(default_factory=list)
    finished_at: datetime | None = None
    #: This cycle's changes held for review (passes in ApplyMode review / review-risky), every status.
    held: list[Any] = field(default_factory=list)
    #: Lines said under the title: e.g. how a run that failed after its passes applied was reconciled with them.
    notes: list[str] = field(default_factory=list)
    #: A changed memory read from the linked memory folder -> its file and heading (model.folder_place).
    places: dict[str, str] = field(default_factory=dict)

    # --- what a person reads ---------------------------------------------------------------------------------------
    @property
    def model_calls(self) -> int:
        return sum(int(p.get("model_calls") or 0) for p in self.passes)

    def usage_total(self, key: str) -> int:
        return int(sum(float((p.get("usage") or {}).get(key, 0)) for p in self.passes))

    def usage_cost(self) -> float:
        """The cycle's estimated model cost (LlmPriceInputPerMillion, LlmPriceOutputPerMillion); 0 without prices."""
        return sum(float((p.get("usage") or {}).get("cost", 0)) for p in self.passes)

    def sections(self) -> dict[str, list[tuple[str, Change]]]:
        out: dict[str, list[tuple[str, Change]]] = {title: [] for title in SECTIONS}
        out["Other changes"] = []
        for p in self.passes:
            for c in changes_of(p):
                out[_section_of(c)].append((str(p["pass"]), c))
        return out

    def undo_commands(self) -> list[str]:
        base = f"dream undo --profile {self.profile_arg} --cycle {self.cycle_id}"
        pending = [r for r in self.undoable if r.undoable]
        if not pending:
            return []
        return [base] + [f"{base} --pass {r.pass_name}" for r in pending]

    def markdown(self) -> str:
        when = f", finished {iso(self.finished_at)}" if self.finished_at else ""
        lines = [
            f"# Dream cycle {self.cycle_id}",
            "",
            f"Agent `{self.agent}`{when}. Model calls: {self.model_calls}; tokens: "
            f"{self.usage_total('prompt_tokens')} prompt + {self.usage_total('completion_tokens')} completion = "
            f"{self.usage_total('total_tokens')}."
            + (f" Estimated cost: {self.usage_cost():.4f}." if self.usage_cost() else ""),
            "",
        ]
        for note in self.notes:
            lines += [" ".join(str(note).split()), ""]
        if not self.passes:
            lines += [
                "_No pass record of this cycle is left (a later run of every pass replaced them); the change "
                "log below still says what it changed._",
                "",
            ]
        else:
            lines += [
                "## Passes",
                "",
                "| pass | status | what happened | model calls | tokens |",
                "| --- | --- | --- | --- | --- |",
            ]
            for p in self.passes:
                what = p.get("summary") or p.get("reason") or ""
                if p.get("status") != "completed" and p.get("reason") and p.get("reason") not in what:
                    what = f"{what} ({p['reason']})" if what else p["reason"]
                tokens = int(float((p.get("usage") or {}).get("total_tokens", 0)))
                lines.append(
                    f"| {p['pass']} | {p.get('status', '?')} | {_cell(what)} | {int(p.get('model_calls') or 0)}"
                    f" | {tokens} |"
                )
            lines.append("")
        for title, rows in self.sections().items():
            if not rows:
                continue
            lines += [f"## {title} ({len(rows)})", ""]
            for pass_name, c in rows[:SECTION_LIMIT]:
                detail = f": {_inline(c.detail)}" if c.detail else ""
                place = f" ({_inline(self.places[c.target])})" if c.target in self.places else ""
                lines.append(f"- {pass_name} {c.kind} `{_inline(c.target)}`{place}{detail}")
            if len(rows) > SECTION_LIMIT:
                lines.append(f"- … {len(rows) - SECTION_LIMIT} more (see the pass's `changes` in Dagster)")
            lines.append("")
        truncated = [p["pass"] for p in self.passes if int(p.get("changes_total") or 0) > len(p.get("changes") or [])]
        if truncated:
            lines += [f"_Only the first changes of {', '.join(truncated)} were kept in its record._", ""]
        lines += self._review_lines()
        lines += ["## Undo", ""]
        commands = self.undo_commands()
        for r in self.undoable:
            kinds = ", ".join(f"{n} {k}" for k, n in r.kinds.items())
            stamps = f"; {r.stamps} review stamp(s), not changes" if r.stamps else ""
            lines.append(
                f"- {r.pass_name}: {r.changes} change(s) ({kinds or 'none'}), {r.undoable} still undoable{stamps}"
            )
        created = sum(r.kinds.get("created", 0) for r in self.undoable if r.undoable)
        if commands and created:
            lines += [
                "",
                f"An undo retires the {created} entr{'y' if created == 1 else 'ies'} this cycle created (merged "
                "entries among them): it archives them, so they stay as archived rows; it never deletes.",
            ]
        if commands:
            lines += ["", "Undo the whole cycle, or one pass of it:", "", "```sh", *commands, "```", ""]
        else:
            lines += [
                "",
                "Nothing of this cycle is left to undo (no change to the memories or skills, or all of it was undone).",
                "",
            ]
        return "\n".join(lines)

    def _review_lines(self) -> list[str]:
        """What of this cycle waits for review, what was decided on it, what expired (empty without review)."""
        if not self.held:
            return []
        waiting = [c for c in self.held if c.status == PENDING]
        lines = [f"## Waiting for review ({len(waiting)})", ""]
        passes = list(dict.fromkeys(c.pass_name for c in self.held))
        lines.append(
            f"The changes of {', '.join(passes)} listed above are proposals held for review (ApplyMode review or "
            "review-risky): only those shown applied here reached the store."
        )
        lines.append("")
        by: dict[tuple[str, str], dict[str, int]] = {}
        for c in self.held:
            counts = by.setdefault((c.pass_name, c.status), {})
            counts[c.label] = counts.get(c.label, 0) + 1
        for (pass_name, status), labels in by.items():
            what = ", ".join(f"{n} {label}" for label, n in labels.items())
            note = " (not decided within ReviewExpiryDays; not applied)" if status == "expired" else ""
            lines.append(f"- {pass_name}, {status}: {what}{note}")
        if waiting:
            lines += [
                "",
                f"They expire {iso(min(c.expires_at for c in waiting))} unless applied (ReviewExpiryDays). See each "
                "change and decide:",
                "",
                "```sh",
                f"dream review --profile {self.profile_arg}",
                f"dream apply --profile {self.profile_arg} --cycle {self.cycle_id} --reason TEXT",
                f"dream reject --profile {self.profile_arg} --cycle {self.cycle_id} --reason TEXT",
                "```",
            ]
        lines.append("")
        return lines


def latest_cycle_id(profile: AgentProfile, pass_names: Sequence[str]) -> str | None:
    """The cycle of the newest pass record (by when it was written), or None when no pass has run."""
    newest: tuple[float, str] | None = None
    for name in pass_names:
        path = profile.pass_report_path(name)
        try:
            written = path.stat().st_mtime
        except OSError:
            continue
        record = load_outcomes(profile, [name]).get(name)
        if record and record.get("cycle_id") and (newest is None or written > newest[0]):
            newest = (written, str(record["cycle_id"]))
    return newest[1] if newest else None


def build_cycle_report(
    profile: AgentProfile,
    store: Any,
    cycle_id: str,
    pass_names: Sequence[str],
    *,
    profile_arg: str | None = None,
    notes: Sequence[str] = (),
) -> CycleReport:
    """The report of ``cycle_id``: the pass records written by that cycle, and its change log rows; ``notes`` are
    said under its title."""
    records = load_outcomes(profile, list(pass_names))
    passes = [records[n] for n in pass_names if n in records and records[n].get("cycle_id") == cycle_id]
    times = [t for p in passes if (t := recorded_at(p)) is not None]
    report = CycleReport(
        agent=profile.agent_id,
        cycle_id=cycle_id,
        profile_arg=profile_arg or str(profile.root),
        passes=passes,
        undoable=store.changes.by_pass(cycle_id),
        finished_at=max(times) if times else None,
        held=decisions(store, status=None, cycle_id=cycle_id),
        notes=list(notes),
    )
    shown = {c.target for rows in report.sections().values() for _, c in rows[:SECTION_LIMIT]}
    for target in sorted(shown):  # the changes the report lists, each looked up once
        entry = store.memories.get(target) if target and " " not in target else None
        if entry is not None and (place := folder_place(entry.to_dict())):
            report.places[target] = place
    return report


def write_cycle_report(profile: AgentProfile, report: CycleReport, *, keep: int = REPORTS_KEEP) -> Path:
    """Write ``reports/<cycle-id>.md`` atomically and remove all but the newest ``keep`` reports."""
    folder = profile.cycle_reports_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_safe(report.cycle_id)}.md"
    atomic_write(path, report.markdown())
    prune_reports(profile, keep)
    return path


def prune_reports(profile: AgentProfile, keep: int) -> int:
    reports = sorted(profile.cycle_reports_dir.glob("*.md"), key=lambda p: (p.stat().st_mtime, p.name), reverse=True)
    for old in reports[max(keep, 1) :]:
        old.unlink(missing_ok=True)
    return max(len(reports) - max(keep, 1), 0)


def saved_report(profile: AgentProfile, cycle_id: str) -> Path | None:
    path = profile.cycle_reports_dir / f"{_safe(cycle_id)}.md"
    return path if path.is_file() else None


def _section_of(c: Change) -> str:
    if c.kind in ("archived", "skill-archived") and "superseded" in c.detail:
        return "Superseded"
    for title, kinds in SECTIONS.items():
        if c.kind in kinds:
            return title
    if c.kind.startswith("rejected") or c.kind.endswith("-rejected"):
        return "Rejected"
    return "Other changes"


def _safe(cycle_id: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in cycle_id)[:200] or "cycle"


def _inline(text: str) -> str:
    return " ".join(str(text).split())[:300]


def _cell(text: str) -> str:
    return _inline(text).replace("|", "\\|")
