"""Turning a PassReport into materialization metadata the Dagster UI can show and plot, and the labels that make
the lineage read in order: inputs -> logs -> memory / skills -> audit."""

from typing import Any

import dagster as dg

from dream_assets.passes.report import PassReport

#: Asset group -> the ``stage`` tag: the order the lineage reads in (filter or sort the catalog by it).
STAGES = {
    "inputs": "1-inputs",
    "logs": "2-logs",
    "memory": "3-memory",
    "skills": "3-skills",
    "audit": "4-audit",
}


def stage_tags(group: str) -> dict[str, str]:
    return {"stage": STAGES[group]}


def label_metadata(label: str) -> dict[str, str]:
    """The owner-facing name of an asset (Dagster has no display name for assets: it is shown with its metadata)."""
    return {"label": label}


def report_metadata(report: PassReport) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "status": report.status,
        "summary": report.summary or report.reason,
        "changes": dg.MetadataValue.md(report.changes_markdown()),
        "log": dg.MetadataValue.md("\n".join(f"- {line}" for line in report.lines) or "_nothing logged_"),
    }
    if report.reason:
        meta["reason"] = report.reason
    deferral = report.extra.get("deferral")
    if report.status == "deferred" and isinstance(deferral, dict):
        meta["retry_at"] = deferral.get("retry_at") or "next cycle (retries used up)"
    budget = report.extra.get("budget_deferral")
    if report.status == "deferred" and isinstance(budget, dict):
        meta["deferred"] = (
            f"budget: {budget.get('budget')} {budget.get('limit')}, {budget.get('spent')} spent, this call about "
            f"{budget.get('estimate')}; runs {budget.get('resumes')}"
        )
        meta["retry_at"] = budget.get("resumes") or "next cycle"
    # Numbers are plotted over time on the asset page: merged, archived, rejected, tokens, model calls...
    for key, value in sorted(report.counts.items()):
        meta[key] = (
            dg.MetadataValue.float(float(value))
            if isinstance(value, float) and not value.is_integer()
            else dg.MetadataValue.int(int(value))
        )
    for key, value in sorted(report.usage.items()):
        meta[f"model_{key}"] = dg.MetadataValue.float(float(value))
    meta["model_calls"] = dg.MetadataValue.int(report.model_calls)
    return meta
