from datetime import timedelta

import pytest

from dream_assets.llm.base import ModelCallError
from dream_assets.model import Skill
from dream_assets.options_loader import dream_options
from dream_assets.passes.wisp_failure_analysis import (
    PASS,
    annotate,
    group_executions,
    is_promotion_candidate,
    run_wisp_failure_analysis,
)
from dream_assets.store.ledger import PassLedger
from dream_assets.store.log_records import WispExecutionEvent
from dream_assets.store.logs import append_event

from ..conftest import NOW, run_scripted, run_without_model

INVOICE = "Convert invoice PDF to spreadsheet row"
DIGEST = "Summarize unread emails"


def wisp(
    profile,
    description,
    *,
    success,
    days_ago=1.0,
    skill="finance/invoice",
    step="parse-pdf-table",
    error="TableNotFound: no table on page 1",
    wisp_id=None,
):
    append_event(
        profile,
        "wisp-executions",
        WispExecutionEvent(
            NOW - timedelta(days=days_ago),
            wisp_id or f"w-{description[:5]}-{days_ago}",
            description,
            success=success,
            skill_name=skill,
            failed_step=None if success else step,
            error=None if success else error,
            steps=["fetch-pdf", step],
        ),
    )


def failures(profile, n, *, description=INVOICE, skill="finance/invoice", start=1.0):
    for i in range(n):
        wisp(profile, description, success=False, days_ago=start + i, skill=skill)


def successes(profile, n, *, description=DIGEST, skill="summarize-emails", start=1.5):
    for i in range(n):
        wisp(profile, description, success=True, days_ago=start + i, skill=skill)


def add_skill(store, name, content="Steps:\n1. Do the thing.", archived=False):
    s = store.skills.put(
        Skill(
            name=name,
            summary=f"{name} skill",
            content=content,
            created_at=NOW - timedelta(days=50),
            updated_at=NOW - timedelta(days=50),
        )
    )
    if archived:
        store.skills.archive(name, now=NOW - timedelta(days=1))
    return s


def answer(annotations=(), patterns=None, notes=None):
    return {
        "failurePatterns": patterns
        if patterns is not None
        else [{"description": INVOICE, "classification": "bad-parameters", "affectedSteps": ["parse-pdf-table"]}],
        "skillAnnotations": [{"skillName": n, "annotation": a} for n, a in annotations],
        "promotionNotes": notes or {},
    }


def run(profile, store, answers, *, options=None, now=NOW, cycle_id="c1"):
    return run_scripted(run_wisp_failure_analysis, profile, store, answers, options=options, now=now, cycle_id=cycle_id)


def run_without_client(profile, store, options=None, now=NOW):
    return run_without_model(run_wisp_failure_analysis, profile, store, options=options, now=now)


# ------------------------------------------------------------------ thresholds (host-computed)
def test_two_failures_are_not_a_pattern_and_make_no_call(profile, store):
    failures(profile, 2)
    report = run_without_client(profile, store)
    assert report.status == "skipped" and "no call" in report.reason


def test_three_failures_are_a_pattern_sent_with_steps_and_producer(profile, store):
    add_skill(store, "finance/invoice")
    failures(profile, 3)
    report, backend = run(profile, store, [answer()])
    [request] = backend.requests
    [pattern] = request.inputs["failure_patterns"]
    assert pattern["description"] == INVOICE and pattern["count"] == 3
    assert pattern["failed_steps"] == ["parse-pdf-table"] and pattern["skill_name"] == "finance/invoice"
    assert INVOICE in request.prompt
    [row] = report.extra["failure_patterns"]
    assert row["classification"] == "bad-parameters"
    assert report.counts["failure_patterns"] == 1


def test_four_successful_runs_are_not_a_promotion_candidate(profile, store):
    successes(profile, 4)
    report = run_without_client(profile, store)
    assert report.status == "skipped" and report.extra["promotion_candidates"] == []


def test_five_successful_runs_are_a_promotion_candidate(profile, store):
    successes(profile, 5)
    report, backend = run(profile, store, [answer(patterns=[], notes={DIGEST: "Stable; store it as a wisp skill."})])
    assert [p["description"] for p in backend.requests[0].inputs["success_patterns"]] == [DIGEST]
    [candidate] = report.extra["promotion_candidates"]
    assert candidate["description"] == DIGEST and candidate["runs"] == 5
    assert candidate["note"] == "Stable; store it as a wisp skill."
    assert report.counts["promotion_candidates"] == 1
    assert [c.target for c in report.changes if c.kind == "promotion-candidate"] == [DIGEST]


@pytest.mark.parametrize(
    "ok,runs,expected",
    [(4, 5, False), (8, 10, False), (9, 10, True), (5, 5, True), (41, 50, True), (40, 50, False)],
)
def test_success_rate_must_be_strictly_above_eighty_percent(ok, runs, expected):
    events = [WispExecutionEvent(NOW, f"w{i}", DIGEST, success=i < ok) for i in range(runs)]
    [group] = group_executions(events).values()
    assert is_promotion_candidate(group, dream_options()) is expected


def test_exactly_eighty_percent_in_the_log_makes_no_call(profile, store):
    successes(profile, 4)
    wisp(profile, DIGEST, success=False, days_ago=9, skill="summarize-emails")
    report = run_without_client(profile, store)
    assert report.status == "skipped"


def test_executions_older_than_fourteen_days_are_ignored(profile, store):
    failures(profile, 2)
    failures(profile, 3, start=15)
    report = run_without_client(profile, store)
    assert report.status == "skipped" and report.counts["executions"] == 2


# ------------------------------------------------------------------ annotations
def test_annotation_is_appended_once_to_the_producing_skill_only(profile, store):
    add_skill(store, "finance/invoice")
    bystander = add_skill(store, "mcp/files")
    failures(profile, 3)
    note = "Check the PDF has a text layer before parsing tables; scanned invoices fail with TableNotFound."
    report, _ = run(
        profile,
        store,
        [
            answer(
                [
                    ("finance/invoice", note),
                    ("mcp/files", "Unrelated advice."),
                    ("ghost/skill", "Should not be created."),
                ]
            )
        ],
    )
    content = store.skills.get("finance/invoice").content
    assert content.count(note) == 1 and "### Known failure (2026-11-30)" in content
    assert store.skills.get("mcp/files") == bystander
    assert store.skills.get("ghost/skill") is None
    assert report.counts["skills_annotated"] == 1 and report.counts["annotations_ignored"] == 2

    wisp(profile, INVOICE, success=False, days_ago=0.5)  # a new failure re-opens the gate
    report2, backend2 = run(profile, store, [answer([("finance/invoice", note)])], cycle_id="c2")
    assert len(backend2.requests) == 1
    assert store.skills.get("finance/invoice").content == content
    assert report2.counts["annotations_already_present"] == 1 and report2.counts["skills_annotated"] == 0
    assert store.changes.list("c2") == []


def test_archived_producer_is_not_annotated_or_restored(profile, store):
    add_skill(store, "finance/invoice", archived=True)
    failures(profile, 3)
    report, _ = run(profile, store, [answer([("finance/invoice", "Check the text layer.")])])
    skill = store.skills.get("finance/invoice")
    assert skill.is_archived and "Known failure" not in skill.content
    assert report.counts["skills_annotated"] == 0


def test_model_output_about_unqualified_descriptions_is_ignored(profile, store):
    add_skill(store, "finance/invoice")
    add_skill(store, "mcp/weather")
    failures(profile, 3)
    failures(profile, 2, description="Fetch weather", skill="mcp/weather")
    report, _ = run(
        profile,
        store,
        [
            answer(
                [("mcp/weather", "Pass a city name.")],
                patterns=[
                    {"description": INVOICE, "classification": "bad-parameters"},
                    {"description": "Fetch weather", "classification": "external-outage"},
                ],
                notes={"Fetch weather": "promote it"},
            )
        ],
    )
    assert [p["description"] for p in report.extra["failure_patterns"]] == [INVOICE]
    assert report.counts["patterns_ignored"] == 1
    assert report.extra["promotion_candidates"] == []
    assert "Known failure" not in store.skills.get("mcp/weather").content


def test_annotate_is_idempotent_on_the_annotation_text():
    content, added = annotate("Body.", ["Use ISO dates.", "use  ISO dates.", "Quote paths."], "### Known failure (d)")
    assert added == ["Use ISO dates.", "Quote paths."]
    again, added_again = annotate(content, ["Use ISO dates."], "### Known failure (e)")
    assert again == content and added_again == []


def test_undoing_the_cycle_removes_the_annotation(profile, store):
    original = add_skill(store, "finance/invoice")
    failures(profile, 3)
    run(profile, store, [answer([("finance/invoice", "Check the text layer first.")])], cycle_id="w1")
    assert "Check the text layer first." in store.skills.get("finance/invoice").content
    assert store.changes.undo_cycle("w1", now=NOW + timedelta(minutes=1)).ok
    assert store.skills.get("finance/invoice").content == original.content


# ------------------------------------------------------------------ the change gate
def test_unchanged_window_makes_no_call_and_a_new_execution_does(profile, store):
    add_skill(store, "finance/invoice")
    failures(profile, 3)
    failures(profile, 1, start=13.5)
    first, b1 = run(profile, store, [answer()])
    assert first.counts["executions"] == 4
    assert first.status == "completed" and len(b1.requests) == 1

    second = run_without_client(profile, store)
    assert second.status == "skipped" and second.counts["gated"] == 1

    # A day later the oldest failure has aged out of the window: still no new input.
    aged = run_without_client(profile, store, now=NOW + timedelta(days=1))
    assert aged.status == "skipped" and aged.counts["gated"] == 1 and aged.counts["executions"] == 3

    wisp(profile, INVOICE, success=True, days_ago=0.1)
    third, b3 = run(profile, store, [answer()], now=NOW + timedelta(days=1))
    assert third.status == "completed" and len(b3.requests) == 1


def test_failed_call_is_not_stamped_and_is_retried(profile, store):
    failures(profile, 3)
    report, _ = run(profile, store, [ModelCallError("HTTP 500")])
    assert report.status == "failed"
    assert PassLedger(profile).get(PASS) is None
    retry, backend = run(profile, store, [answer()])
    assert retry.status == "completed" and len(backend.requests) == 1
    assert PassLedger(profile).get(PASS) is not None


# ------------------------------------------------------------------ optional input and switch
def test_missing_wisp_log_skips_with_a_reason(profile, store):
    report = run_without_client(profile, store)
    assert report.status == "skipped" and "no wisp execution log" in report.reason


def test_disabled_pass_skips(profile, store):
    failures(profile, 3)
    report = run_without_client(profile, store, dream_options(WispFailureAnalysisEnabled=False))
    assert report.status == "skipped" and "WispFailureAnalysisEnabled" in report.reason


# ------------------------------------------------------------------ hostile model text
def test_unusable_annotations_and_notes_are_rejected_with_a_reason_and_the_rest_applies(profile, store):
    add_skill(store, "finance/invoice")
    failures(profile, 3)
    successes(profile, 5)
    good = "Check the PDF has a text layer before parsing tables."
    report, _ = run(
        profile,
        store,
        [
            answer(
                [
                    ("finance/invoice", "Scanned invoices fail\ud800."),
                    ("finance/invoice", "Use OCR\x00 first."),
                    ("finance/\x07invoice", "Bell in the name."),
                    ({"id": "finance/invoice"}, "An object for a name."),
                    ("finance/invoice", good),
                ],
                patterns=[{"description": INVOICE, "classification": "bad\x1bparameters"}],
                notes={DIGEST: "promote\udfff it"},
            )
        ],
    )
    assert report.status == "completed"
    reasons = {c.target: c.detail for c in report.changes if c.kind == "invalid-item"}
    assert set(reasons) == {
        "skillAnnotations[0]",
        "skillAnnotations[1]",
        "skillAnnotations[2]",
        "skillAnnotations[3]",
        "failurePatterns[0]",
        "promotionNotes",
    }
    assert "lone surrogate" in reasons["skillAnnotations[0]"] and "NUL" in reasons["skillAnnotations[1]"]
    assert "skillName is not a string" in reasons["skillAnnotations[3]"]
    assert report.counts["invalid_items"] == 6
    content = store.skills.get("finance/invoice").content
    assert good in content and "Scanned" not in content and "OCR" not in content
    assert report.counts["skills_annotated"] == 1
    [row] = store.changes.list("c1")
    assert row.kind == "updated" and good in row.after["content"]
