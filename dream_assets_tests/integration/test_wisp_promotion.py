"""Wisp success promotion: the model may promote a steady success's definition to a resource of an existing skill;
the host attaches the candidate's own body, hash and creation time, and skips anything it cannot vouch for."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dream_assets.model import Skill
from dream_assets.passes.wisp_failure_analysis import definition_hash, run_wisp_failure_analysis
from dream_assets.store.log_records import WispExecutionEvent
from dream_assets.store.logs import append_event

from ..conftest import NOW, run_scripted

DIGEST = "Summarize unread emails"
BODY = 'steps:\n  - fetch: inbox?unread=true\n  - summarize: "```keep fences```"\n'
HASH = definition_hash(BODY)


@pytest.fixture
def steady(profile, store):
    for i in range(6):
        append_event(
            profile,
            "wisp-executions",
            WispExecutionEvent(
                NOW - timedelta(days=6 - i),
                f"w{i}",
                DIGEST,
                success=True,
                skill_name="summarize-emails",
                definition=BODY if i else "an older draft",
            ),
        )
    store.skills.save(Skill("summarize-emails", "Summarize emails", "Read the inbox and summarize."), now=NOW)
    return store


def promote(**fields):
    item = {"skillName": "summarize-emails", "fileName": "workflows/digest.yaml", "definitionHash": HASH}
    item.update(fields)
    return {"failurePatterns": [], "skillAnnotations": [], "promotionNotes": {}, "promotions": [item]}


def test_a_promotion_attaches_the_candidate_body_verbatim_and_can_be_undone(profile, steady):
    before = steady.skills.get("summarize-emails")
    report, backend = run_scripted(run_wisp_failure_analysis, profile, steady, [promote(description="")])
    assert report.status == "completed", report.reason
    assert HASH in backend.requests[0].prompt and BODY.rstrip() in backend.requests[0].prompt
    content = steady.skills.get("summarize-emails").content
    assert BODY.rstrip("\n") in content
    assert f"definitionHash: {HASH}" in content
    assert "createdAt: 2026-11-25T12:00:00Z" in content  # first successful run with this body, not the older draft
    assert f"description: {DIGEST}" in content  # no description given: the candidate's
    assert "`workflows/digest.yaml`" in content
    assert report.counts["promotions_applied"] == 1
    assert [c.kind for c in report.changes if c.target == "summarize-emails"] == ["wisp-promoted"]

    assert steady.changes.undo_cycle("c1", now=NOW + timedelta(hours=1)).ok
    assert steady.skills.get("summarize-emails").content == before.content


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"skillName": "no-such-skill"}, "does not exist"),
        ({"definitionHash": "sha256:" + "0" * 64}, "matches no promotion candidate"),
        ({"definitionHash": definition_hash("an invented body")}, "matches no promotion candidate"),
        ({"skillName": ""}, "skillName is empty"),
        ({"fileName": "  "}, "fileName is empty"),
        ({"definitionHash": ""}, "definitionHash is empty"),
        ({"fileName": "../escape.yaml"}, "not a relative file name"),
    ],
)
def test_promotions_the_host_cannot_vouch_for_are_skipped(profile, steady, fields, why):
    before = steady.skills.get("summarize-emails")
    report, _ = run_scripted(run_wisp_failure_analysis, profile, steady, [promote(**fields)])
    assert report.status == "completed", report.reason
    assert steady.skills.get("summarize-emails").content == before.content
    assert report.counts["promotions_skipped"] == 1 and report.counts["promotions_applied"] == 0
    (skipped,) = [c for c in report.changes if c.kind == "promotion-rejected"]
    assert why in skipped.detail


def test_an_archived_skill_is_not_revived_by_a_promotion(profile, steady):
    steady.skills.archive("summarize-emails", now=NOW)
    report, _ = run_scripted(run_wisp_failure_analysis, profile, steady, [promote()])
    assert steady.skills.get("summarize-emails").is_archived
    assert report.counts["promotions_skipped"] == 1


def test_a_definition_that_mentions_another_candidates_hash_does_not_block_its_promotion(profile, steady):
    from dream_assets.passes.wisp_failure_analysis import PromotionCandidate, promoted_hashes, resource_section

    quoting = f"steps:\n  - note: 'replaces definitionHash: {HASH}'\ndefinitionHash: {HASH}\n"
    other = PromotionCandidate("Quote the digest", quoting, definition_hash(quoting), NOW - timedelta(days=9))
    skill = steady.skills.get("summarize-emails")
    prose = f"{skill.content}\nSee definitionHash: {HASH} for the digest.\n\n"
    steady.skills.save(skill.with_(content=prose + resource_section("quote.yaml", "q", other, NOW)), now=NOW)
    report, _ = run_scripted(run_wisp_failure_analysis, profile, steady, [promote()])
    assert report.counts["promotions_applied"] == 1, [c.detail for c in report.changes]
    content = steady.skills.get("summarize-emails").content
    assert "`workflows/digest.yaml`" in content and BODY.rstrip("\n") in content
    # the same definition promoted again is still refused: the resource headers name exactly these two
    assert promoted_hashes(content) == {other.definition_hash, HASH}
