"""Skill gap detection (pass 2), skill consolidation (pass 3) and skill optimization (pass 4) with scripted answers."""

from datetime import timedelta

import pytest

from dream_assets.llm.base import ModelCallError
from dream_assets.llm.client import ModelClient, build_model_client
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.model import Skill
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.skill_consolidation import run_skill_consolidation
from dream_assets.passes.skill_gap_detection import run_skill_gap_detection
from dream_assets.passes.skill_optimization import run_skill_optimization
from dream_assets.store.ledger import PassLedger
from dream_assets.store.log_records import ConversationTurn, FeedbackEvent, SkillUsageEvent
from dream_assets.store.logs import append_event, clear_conversation_log

from ..conftest import NOW

LONG = (
    "1. Confirm what the user wants.\n2. Gather the inputs and check they are current.\n"
    "3. Do the work, verifying every name, date and number.\n4. Ask before sending anything external.\n"
    "Edge cases: missing access -> say so and stop; an ambiguous request -> ask."
)


def skill(name, content=None, *, summary=None, age=100, used=None, see_also=()):
    return Skill(
        name=name,
        summary=summary or f"About {name}",
        content=content or f"{name}: {LONG}",
        see_also=tuple(see_also),
        created_at=NOW - timedelta(days=age),
        updated_at=NOW - timedelta(days=age),
        last_used_at=None if used is None else NOW - timedelta(days=used),
    )


def scripted(profile, options, answers):
    backend = ScriptedBackend(answers)
    return ModelClient(backend, profile=profile, options=options), backend


def context(profile, store, client=None, *, options=None, now=NOW, cycle="c1"):
    return PassContext(
        profile,
        options or dream_options(),
        now,
        cycle_id=cycle,
        client_factory=(lambda: client) if client is not None else None,
        _store=store,
    )


def say(profile, session, text, *, days_ago=1.0, role="user"):
    append_event(profile, "conversation", ConversationTurn(NOW - timedelta(days=days_ago), session, role, text))


def use(profile, session, name, *, days_ago=1.0):
    append_event(profile, "skill-usage", SkillUsageEvent(NOW - timedelta(days=days_ago), session, name))


def feedback(profile, session, kind, text, *, rating=None, skills=(), days_ago=1.0):
    append_event(
        profile,
        "feedback",
        FeedbackEvent(NOW - timedelta(days=days_ago), session, kind, text, rating=rating, skill_names=list(skills)),
    )


def live_names(store):
    return {s.name for s in store.skills.list()}


# =================================================================== skill gap detection
INVOICE_SKILL = {
    "name": "finance/convert-invoice",
    "summary": "Convert an invoice PDF into a spreadsheet row",
    "content": "1. Open the invoice PDF.\n2. Read vendor, date and amount.\n3. Append a spreadsheet row.",
}
WEATHER_SKILL = {
    "name": "weather/lookup",
    "summary": "Look up the forecast for a city",
    "content": "Call the forecast tool with the city name and report highs and lows.",
}


def gap_sessions(profile):
    say(profile, "s1", "Convert the attached invoice into the expenses spreadsheet", days_ago=3)
    say(profile, "s1", "Done.", days_ago=2.9, role="assistant")
    say(profile, "s2", "Please convert this invoice PDF into a row", days_ago=2)
    say(profile, "s3", "What's the weather in Lisbon?", days_ago=1)


def test_request_type_seen_in_two_sessions_creates_a_skill(profile, store, options):
    gap_sessions(profile)
    client, backend = scripted(profile, options, [{"toSave": [INVOICE_SKILL]}])
    report = run_skill_gap_detection(context(profile, store, client))
    assert report.status == "completed" and report.counts["created"] == 1
    created = store.skills.get("finance/convert-invoice")
    assert created is not None and created.created_at == NOW and not created.is_archived
    prompt = backend.requests[0].prompt
    assert "Recurring topics across sessions (term frequency ≥ 2 sessions):" in prompt
    assert '- "convert": 2 session(s)' in prompt and '- "invoice": 2 session(s)' in prompt
    assert '"weather"' not in prompt.split("Recurring topics")[1]  # one session is not a recurring topic
    [change] = store.changes.list("c1")
    assert (change.kind, change.target_id, change.before) == ("created", "finance/convert-invoice", None)
    assert "s1" in change.reason and "s2" in change.reason


def test_request_type_seen_in_one_session_creates_no_skill(profile, store, options):
    gap_sessions(profile)
    client, backend = scripted(profile, options, [{"toSave": [WEATHER_SKILL]}])
    report = run_skill_gap_detection(context(profile, store, client))
    assert len(backend.requests) == 1
    assert store.skills.get("weather/lookup") is None
    assert report.counts["rejected_single_session"] == 1 and report.counts["created"] == 0


def test_a_single_session_log_makes_no_model_call(profile, store, options):
    say(profile, "only", "Convert the invoice into a spreadsheet row")
    say(profile, "only", "Convert another invoice please", days_ago=0.5)
    client, backend = scripted(profile, options, [{"toSave": [INVOICE_SKILL]}])
    report = run_skill_gap_detection(context(profile, store, client))
    assert report.status == "skipped" and "2+ sessions" in report.reason
    assert backend.requests == [] and live_names(store) == set()


def test_sessions_sharing_no_request_term_make_no_model_call(profile, store, options):
    say(profile, "a", "Summarize my inbox")
    say(profile, "b", "Book a meeting room for Thursday")
    client, backend = scripted(profile, options, [])
    report = run_skill_gap_detection(context(profile, store, client))
    assert report.status == "skipped" and "recurs" in report.reason and backend.requests == []


def test_request_filler_words_are_not_recurring_topics(profile, store, options):
    say(profile, "a", "Please can you help me book flights")
    say(profile, "b", "Please help with my tax return")
    client, backend = scripted(profile, options, [])
    report = run_skill_gap_detection(context(profile, store, client))
    assert report.status == "skipped" and backend.requests == []


@pytest.mark.parametrize("archived", [False, True])
def test_gap_detection_never_overwrites_an_existing_skill(profile, store, options, archived):
    gap_sessions(profile)
    original = store.skills.put(skill("finance/convert-invoice", "The agent's own procedure for invoices."))
    if archived:
        store.skills.archive(original.name, now=NOW - timedelta(days=3))
    client, _ = scripted(profile, options, [{"toSave": [INVOICE_SKILL]}])
    report = run_skill_gap_detection(context(profile, store, client))
    kept = store.skills.get("finance/convert-invoice")
    assert kept.content == "The agent's own procedure for invoices." and kept.is_archived == archived
    assert report.counts["skipped_existing"] == 1 and store.changes.list("c1") == []


@pytest.mark.parametrize("bad", ["/etc/passwd", "../escape", "finance//x", " spaced", "a\\b"])
def test_gap_detection_skips_an_invalid_name_with_a_warning(profile, store, options, bad):
    gap_sessions(profile)
    client, _ = scripted(profile, options, [{"toSave": [dict(INVOICE_SKILL, name=bad), INVOICE_SKILL]}])
    report = run_skill_gap_detection(context(profile, store, client))
    assert live_names(store) == {"finance/convert-invoice"}
    assert report.counts["rejected_invalid_name"] == 1
    assert any(line.startswith("WARNING:") and "skill name" in line for line in report.lines)


@pytest.mark.parametrize(
    "field,value,why",
    [
        ("content", "Open the invoice \ud800 PDF", "surrogate"),
        ("summary", "Convert\x00 invoices", "NUL"),
        ("content", "x" * 200_000, "over the limit"),
    ],
)
def test_gap_detection_rejects_hostile_text_with_its_reason_and_applies_the_rest(
    profile, store, options, field, value, why
):
    gap_sessions(profile)
    hostile = dict(INVOICE_SKILL, name="finance/invoice-hostile", **{field: value})
    client, _ = scripted(profile, options, [{"toSave": [hostile, INVOICE_SKILL]}])
    report = run_skill_gap_detection(context(profile, store, client))
    assert report.status == "completed" and live_names(store) == {"finance/convert-invoice"}
    assert report.counts["rejected_invalid_text"] == 1 and report.counts["created"] == 1
    assert any(c.kind == "rejected" and why in c.detail for c in report.changes)
    assert [c.target_id for c in store.changes.list("c1")] == ["finance/convert-invoice"]


def test_gap_detection_without_a_conversation_log_is_skipped_without_a_call(profile, store, options):
    client, backend = scripted(profile, options, [])
    report = run_skill_gap_detection(context(profile, store, client))
    assert report.status == "skipped" and "no conversation log" in report.reason and backend.requests == []


def test_gap_detection_with_an_emptied_log_is_skipped_without_a_call(profile, store, options):
    gap_sessions(profile)
    clear_conversation_log(profile, NOW)
    client, backend = scripted(profile, options, [])
    report = run_skill_gap_detection(context(profile, store, client))
    assert report.status == "skipped" and "empty" in report.reason and backend.requests == []


def test_disabled_gap_detection_is_skipped(profile, store, options):
    gap_sessions(profile)
    client, backend = scripted(profile, options, [])
    report = run_skill_gap_detection(context(profile, store, client, options=dream_options(SkillGapEnabled=False)))
    assert report.status == "skipped" and "SkillGapEnabled" in report.reason and backend.requests == []


def test_gap_detection_leaves_the_conversation_log_in_place(profile, store, options):
    gap_sessions(profile)
    before = profile.conversation_log_path.read_bytes()
    client, _ = scripted(profile, options, [{"toSave": []}])
    run_skill_gap_detection(context(profile, store, client))
    assert profile.conversation_log_path.read_bytes() == before


@pytest.mark.parametrize("failure", [ModelCallError("connection refused"), "I think you should make a skill!"])
def test_failed_gap_call_is_not_stamped_and_the_next_run_asks_again(profile, store, options, failure):
    gap_sessions(profile)
    client, backend = scripted(profile, options, [failure, {"toSave": [INVOICE_SKILL]}])
    first = run_skill_gap_detection(context(profile, store, client))
    assert first.status == "failed" and live_names(store) == set()
    assert context(profile, store).ledger.get("skill_gap_detection") is None
    second = run_skill_gap_detection(context(profile, store, client, cycle="c2"))
    assert second.status == "completed" and len(backend.requests) == 2
    assert live_names(store) == {"finance/convert-invoice"}


def test_an_uncleared_conversation_log_is_not_sent_twice(profile, store, options):
    gap_sessions(profile)
    client, backend = scripted(profile, options, [{"toSave": []}, {"toSave": []}])
    run_skill_gap_detection(context(profile, store, client))
    again = run_skill_gap_detection(context(profile, store, client, cycle="c2"))
    assert again.status == "skipped" and "change gate" in again.reason and len(backend.requests) == 1
    say(profile, "s4", "Convert the March invoice too", days_ago=0.5)
    run_skill_gap_detection(context(profile, store, client, cycle="c3"))
    assert len(backend.requests) == 2


# =================================================================== skill consolidation
def catalog(store, *skills):
    for s in skills:
        store.skills.put(s)


def some_usage(profile):
    use(profile, "u1", "mcp/email")
    use(profile, "u1", "mcp/calendar")
    use(profile, "u2", "mcp/email")


def test_delete_without_save_is_a_directive_violation_and_nothing_is_applied(profile, store, options):
    catalog(store, skill("mcp/email"), skill("mcp/calendar"))
    some_usage(profile)
    client, backend = scripted(
        profile, options, [{"toDelete": ["mcp/calendar"], "toSave": []}, {"toDelete": [], "toSave": []}]
    )
    report = run_skill_consolidation(context(profile, store, client))
    assert report.status == "skipped" and "directive violation" in report.reason
    assert live_names(store) == {"mcp/email", "mcp/calendar"} and store.changes.list() == []
    assert context(profile, store).ledger.get("skill_consolidation") is None
    again = run_skill_consolidation(context(profile, store, client, cycle="c2"))
    assert again.status == "completed" and len(backend.requests) == 2


def test_prefix_family_guide_is_created_and_unknown_see_also_dropped(profile, store, options):
    catalog(store, skill("mcp/email"), skill("mcp/calendar"), skill("mcp/weather", "Call the weather tool."))
    some_usage(profile)
    guide = {
        "name": "mcp/guide",
        "summary": "Choose between the MCP tools",
        "content": "Email -> mcp/email. Meetings -> mcp/calendar. Forecasts -> mcp/weather.",
        "sourceNames": [],
        "seeAlso": ["mcp/email", "mcp/calendar", "mcp/weather", "mcp/telepathy", "../x"],
    }
    client, backend = scripted(profile, options, [{"toDelete": [], "toSave": [guide]}])
    report = run_skill_consolidation(context(profile, store, client))
    assert report.status == "completed" and report.counts["guides"] == 1
    saved = store.skills.get("mcp/guide")
    assert set(saved.see_also) == {"mcp/email", "mcp/calendar", "mcp/weather"}
    assert live_names(store) == {"mcp/email", "mcp/calendar", "mcp/weather", "mcp/guide"}
    assert report.counts["see_also_dropped"] == 2
    assert "- mcp/*: mcp/calendar, mcp/email, mcp/weather" in backend.requests[0].prompt


def test_merge_keeps_earliest_created_and_latest_used_and_archives_sources(profile, store, options):
    catalog(
        store,
        skill("summarize-emails", age=100, used=10),
        skill("email-summary", "Summarise emails.", age=20, used=1),
        skill("mcp/email", age=300, used=2, see_also=["email-summary"]),
    )
    some_usage(profile)
    merged = {
        "name": "email/summarize-inbox",
        "summary": "Summarise an inbox into action items",
        "content": "List senders, asks and deadlines as bullet points with action items.",
        "sourceNames": ["summarize-emails", "email-summary"],
        "seeAlso": ["mcp/email"],
    }
    client, _ = scripted(profile, options, [{"toDelete": ["email-summary"], "toSave": [merged]}])
    report = run_skill_consolidation(context(profile, store, client))
    assert report.counts["merged"] == 1 and report.counts["archived"] == 2
    new = store.skills.get("email/summarize-inbox")
    assert new.created_at == NOW - timedelta(days=100)
    assert new.last_used_at == NOW - timedelta(days=1)
    for name in ("summarize-emails", "email-summary"):
        assert store.skills.get(name).is_archived  # archived, not deleted
    assert store.skills.get("mcp/email").see_also == ("email/summarize-inbox",)  # link followed the merge
    store.skills.restore("email-summary", now=NOW)
    assert store.skills.get("email-summary").content == "Summarise emails."


def test_sources_in_to_delete_of_a_merge_that_is_not_applied_are_kept_not_pruned(profile, store, options):
    """toDelete naming a merge's sources means the merge: when the merge is refused (here its content is a copied
    placeholder) they are kept, even though another save of the answer applied and would allow a prune."""
    catalog(
        store,
        skill("summarize-emails", age=100, used=10),
        skill("email-summary", age=20, used=1),
        skill("mcp/email", age=300, used=2),
        skill("mcp/calendar", age=300, used=2),
    )
    some_usage(profile)
    copied = {"name": "email/summarize-inbox", "content": "...", "sourceNames": ["summarize-emails", "email-summary"]}
    guide = {
        "name": "mcp/guide",
        "summary": "Choose between the MCP email and calendar tools",
        "content": "Use mcp/email for mail and mcp/calendar for events; both need the user's account linked.",
        "sourceNames": [],
    }
    answer = {"toDelete": ["summarize-emails", "email-summary"], "toSave": [copied, guide]}
    client, _ = scripted(profile, options, [answer])
    report = run_skill_consolidation(context(profile, store, client))
    assert report.counts["guides"] == 1 and report.counts["copied"] == 1
    assert {"summarize-emails", "email-summary", "mcp/guide"} <= live_names(store)
    assert report.counts["archived"] == 0 and report.counts["kept_unmerged_sources"] == 2


def test_merge_into_an_existing_skill_keeps_the_earliest_dates_of_both(profile, store, options):
    catalog(store, skill("writing/report", age=50, used=30), skill("writing/weekly", age=400, used=2))
    some_usage(profile)
    client, _ = scripted(
        profile,
        options,
        [
            {
                "toSave": [
                    {
                        "name": "writing/report",
                        "content": "Weekly report: bullets, metrics first.\n" + LONG,
                        "sourceNames": ["writing/weekly"],
                    }
                ]
            }
        ],
    )
    run_skill_consolidation(context(profile, store, client))
    report_skill = store.skills.get("writing/report")
    assert report_skill.created_at == NOW - timedelta(days=400)
    assert report_skill.last_used_at == NOW - timedelta(days=2)
    assert report_skill.summary == "About writing/report"  # an empty summary keeps the one it had
    assert store.skills.get("writing/weekly").is_archived


def test_a_consolidation_cycle_can_be_undone(profile, store, options):
    originals = [
        skill("summarize-emails"),
        skill("email-summary", "Summarise emails.", see_also=["mcp/email"]),
        skill("mcp/email", see_also=["email-summary"]),
        skill("mcp/calendar"),
    ]
    catalog(store, *originals)
    some_usage(profile)
    answer = {
        "toDelete": ["mcp/calendar"],
        "toSave": [
            {
                "name": "email/summarize",
                "content": "Merged procedure.",
                "sourceNames": ["summarize-emails", "email-summary"],
            },
            {"name": "mcp/guide", "content": "Which MCP tool when.", "seeAlso": ["mcp/email"]},
        ],
    }
    client, _ = scripted(profile, options, [answer])
    run_skill_consolidation(context(profile, store, client))
    assert live_names(store) == {"email/summarize", "mcp/email", "mcp/guide"}
    result = store.changes.undo_cycle("c1", now=NOW + timedelta(hours=1))
    assert result.ok
    assert live_names(store) == {s.name for s in originals}
    for s in originals:
        back = store.skills.get(s.name)
        assert (back.content, back.see_also, back.summary) == (s.content, s.see_also, s.summary)


def test_unchanged_catalog_makes_no_call_and_a_changed_one_does(profile, store, options):
    catalog(store, skill("mcp/email"), skill("mcp/calendar"))
    some_usage(profile)
    client, backend = scripted(profile, options, [{"toSave": []}, {"toSave": []}])
    run_skill_consolidation(context(profile, store, client))
    use(profile, "u3", "mcp/calendar", days_ago=0.1)  # usage counts drift: not a catalog change
    again = run_skill_consolidation(context(profile, store, client, cycle="c2", now=NOW + timedelta(hours=4)))
    assert again.status == "skipped" and "change gate" in again.reason and len(backend.requests) == 1
    store.skills.put(skill("mcp/slack"))
    third = run_skill_consolidation(context(profile, store, client, cycle="c3", now=NOW + timedelta(hours=8)))
    assert third.status == "completed" and len(backend.requests) == 2


@pytest.mark.parametrize("failure", [ModelCallError("HTTP 500"), "no json here at all"])
def test_failed_consolidation_call_is_not_stamped_and_retried(profile, store, options, failure):
    catalog(store, skill("mcp/email"), skill("mcp/calendar"))
    some_usage(profile)
    client, backend = scripted(profile, options, [failure, {"toSave": []}])
    assert run_skill_consolidation(context(profile, store, client)).status == "failed"
    assert context(profile, store).ledger.get("skill_consolidation") is None
    assert run_skill_consolidation(context(profile, store, client, cycle="c2")).status == "completed"
    assert len(backend.requests) == 2


def test_consolidation_prompt_carries_usage_sparse_co_use_and_prefix_clusters(profile, store, options):
    catalog(
        store,
        skill("mcp/email"),
        skill("mcp/calendar"),
        skill("travel/visa", "Check the embassy site.", age=45),
        skill("travel/new", "Tiny.", age=2),
    )
    for sid in ("a", "b", "c"):
        use(profile, sid, "mcp/email")
        use(profile, sid, "mcp/calendar")
    use(profile, "old", "mcp/email", days_ago=45)  # outside SkillUsageWindow
    client, backend = scripted(profile, options, [{"toSave": []}])
    run_skill_consolidation(context(profile, store, client))
    prompt = backend.requests[0].prompt
    assert "### skill: mcp/email — used 3× in 30 days" in prompt
    assert "### skill: travel/visa — used 0× in 30 days [sparse-content]" in prompt
    assert "### skill: travel/new — used 0× in 30 days\n" in prompt  # too young to be sparse
    assert "- mcp/calendar + mcp/email: 3 session(s)" in prompt
    assert "- travel/*: travel/new, travel/visa" in prompt


def test_consolidation_ignores_unknown_sources_and_refuses_deletes_when_no_save_persists(profile, store, options):
    catalog(store, skill("mcp/email"), skill("mcp/calendar"))
    some_usage(profile)
    client, _ = scripted(
        profile,
        options,
        [{"toDelete": ["mcp/calendar", "ghost"], "toSave": [{"name": "../bad", "content": "x"}]}],
    )
    report = run_skill_consolidation(context(profile, store, client))
    assert live_names(store) == {"mcp/email", "mcp/calendar"}
    assert report.counts["refused_deletes"] == 1 and report.counts["rejected"] == 1


def test_a_skill_edited_while_the_model_answers_is_not_merged_away(profile, store, options):
    catalog(store, skill("meeting-notes"), skill("meeting-minutes"))
    some_usage(profile)

    def answer(request):
        store.skills.save(store.skills.get("meeting-minutes").with_(content="Edited by the agent meanwhile."), now=NOW)
        return {
            "toSave": [
                {
                    "name": "meeting/notes",
                    "content": "Merged.",
                    "sourceNames": ["meeting-notes", "meeting-minutes"],
                }
            ]
        }

    client, _ = scripted(profile, options, answer)
    run_skill_consolidation(context(profile, store, client))
    assert live_names(store) == {"meeting-notes", "meeting-minutes"}
    assert store.skills.get("meeting-minutes").content == "Edited by the agent meanwhile."


def test_hostile_strings_reject_their_item_with_a_reason_and_the_rest_of_the_answer_applies(profile, store, options):
    catalog(store, skill("mcp/email"), skill("mcp/calendar"), skill("summarize-emails"), skill("email-summary"))
    some_usage(profile)
    raw = (
        '{"toDelete": [42, {"name": "mcp/calendar"}, null, "ghost", "mcp/calendar\\u0000", "email-summary"],'
        ' "toSave": ['
        '{"name": "mcp/\\ud800", "content": "Surrogate in the name."},'
        '{"name": "mcp/guide", "content": "Pick a tool.\\u0000", "sourceNames": ["mcp/email"]},'
        '{"name": "mcp/guide2", "summary": "bad\\udfff", "content": "Pick a tool."},'
        '{"name": ["mcp", "guide3"], "content": "A list for a name."},'
        '{"name": "email/summarize", "content": "List senders, asks and deadlines.",'
        ' "sourceNames": ["summarize-emails", ["x"], "summarize-emails"], "seeAlso": ["mcp/email", true]}]}'
    )
    client, _ = scripted(profile, options, [raw])
    report = run_skill_consolidation(context(profile, store, client))
    assert report.status == "completed"
    reasons = {c.target: c.detail for c in report.changes if c.kind == "invalid-item"}
    assert set(reasons) == {"toSave[0]", "toSave[1]", "toSave[2]", "toSave[3]"}
    assert "toSave[3].name is not a string" in reasons["toSave[3]"]
    assert "lone surrogate (U+D800)" in reasons["toSave[0]"] and "control character (NUL)" in reasons["toSave[1]"]
    assert "toSave[2].summary contains a lone surrogate" in reasons["toSave[2]"]
    assert "its sources are kept" in reasons["toSave[1]"]
    assert report.counts["invalid_items"] == 4 and report.counts["merged"] == 1
    assert report.counts["invalid_names"] == 4  # 42 is text ("42"); the object, null, NUL name and the list
    assert report.counts["ignored_names"] == 2  # "42" and "ghost" were never shown
    assert report.counts["duplicate_names"] == 1
    assert live_names(store) == {
        "mcp/email",
        "mcp/calendar",
        "email/summarize",
    }  # source merged, prune applied
    assert store.skills.get("email/summarize").see_also == ("mcp/email",)
    store.skills.fingerprint()


def test_a_source_shared_by_two_saves_is_retired_once_and_both_saves_persist(profile, store, options):
    catalog(store, skill("mcp/email"), skill("mail-send"), skill("mail-draft"))
    some_usage(profile)
    client, _ = scripted(
        profile,
        options,
        [
            {
                "toSave": [
                    {
                        "name": "mail/send",
                        "content": "Send mail.",
                        "sourceNames": ["mail-send", "mail-draft"],
                    },
                    {"name": "mail/draft", "content": "Draft mail.", "sourceNames": ["mail-draft"]},
                ]
            }
        ],
    )
    report = run_skill_consolidation(context(profile, store, client))
    assert report.counts["merged"] == 2 and report.counts["archived"] == 2
    assert live_names(store) == {"mcp/email", "mail/send", "mail/draft"}
    rows = [(r.kind, r.target_id) for r in store.changes.list("c1")]
    assert rows.count(("archived", "mail-draft")) == 1
    assert store.changes.undo_cycle("c1", now=NOW + timedelta(minutes=1)).ok
    assert live_names(store) == {"mcp/email", "mail-send", "mail-draft"}


def test_an_invalid_only_save_does_not_unlock_deletions(profile, store, options):
    catalog(store, skill("mcp/email"), skill("mcp/calendar"))
    some_usage(profile)
    client, _ = scripted(
        profile,
        options,
        [{"toDelete": ["mcp/calendar"], "toSave": [{"name": "mcp/guide", "content": "\x00"}]}],
    )
    report = run_skill_consolidation(context(profile, store, client))
    assert live_names(store) == {"mcp/email", "mcp/calendar"}
    assert report.counts["refused_deletes"] == 1 and report.counts["invalid_items"] == 1


def test_malformed_usage_lines_are_reported_not_silently_dropped(profile, store, options):
    catalog(store, skill("mcp/email"), skill("mcp/calendar"))
    some_usage(profile)
    with open(profile.session_log_path("skill-usage", "u1"), "a", encoding="utf-8") as f:
        f.write('{"timestamp": "yesterday", "skillName": "mcp/email"}\n')
    client, backend = scripted(profile, options, [{"toSave": []}])
    report = run_skill_consolidation(context(profile, store, client))
    assert report.status == "completed" and report.counts["malformed_skill_usage_lines"] == 1
    assert any("logs/skill-usage/u1.jsonl:3" in line and "timestamp" in line for line in report.lines)
    assert "### skill: mcp/email — used 2× in 30 days" in backend.requests[0].prompt


def test_consolidation_skips_when_inputs_are_absent_or_disabled(profile, store, options):
    client, backend = scripted(profile, options, [])
    catalog(store, skill("mcp/email"), skill("mcp/calendar"))
    no_usage = run_skill_consolidation(context(profile, store, client))
    assert no_usage.status == "skipped" and "skill-usage" in no_usage.reason
    some_usage(profile)
    off = run_skill_consolidation(
        context(profile, store, client, options=dream_options(SkillConsolidationEnabled=False))
    )
    assert off.status == "skipped" and "SkillConsolidationEnabled" in off.reason
    store.skills.archive("mcp/calendar", now=NOW)
    lonely = run_skill_consolidation(context(profile, store, client))
    assert lonely.status == "skipped" and "1 live skill" in lonely.reason
    assert backend.requests == []


# =================================================================== skill optimization
def risky_world(profile, store):
    catalog(
        store,
        skill("mcp/calendar"),  # used in a session with a correction
        skill("writing/report"),  # named by a poor summary's skillNames only
        skill("research/web"),  # used in a fair session
        skill("code/review"),  # used only in good sessions
        skill("travel/visa", "Check the embassy site.", age=45),  # sparse
        skill("home/recipes", "Vegetarian.", age=3),
    )  # short but young: not sparse
    use(profile, "s1", "mcp/calendar", days_ago=2)
    feedback(profile, "s1", "Correction", "It was double-booked; check the calendar first.", days_ago=2)
    feedback(
        profile,
        "s2",
        "SessionSummary",
        "Report was prose, not bullets.",
        rating="poor",
        skills=["writing/report"],
        days_ago=3,
    )
    use(profile, "s3", "research/web", days_ago=4)
    feedback(profile, "s3", "SessionSummary", "Sources were stale.", rating="fair", days_ago=4)
    use(profile, "s4", "code/review", days_ago=1)
    feedback(profile, "s4", "SessionSummary", "Great review.", rating="excellent", days_ago=1)


def test_at_risk_and_sparse_skills_are_sent_with_their_context(profile, store, options):
    risky_world(profile, store)
    client, backend = scripted(profile, options, [{"toDelete": [], "toSave": []}])
    report = run_skill_optimization(context(profile, store, client))
    assert report.status == "completed"
    request = backend.requests[0]
    assert {i["name"] for i in request.inputs["at_risk"]} == {
        "mcp/calendar",
        "writing/report",
        "research/web",
    }
    assert {i["name"] for i in request.inputs["sparse"]} == {"travel/visa"}
    context_of = {i["name"]: " ".join(i["context"]) for i in request.inputs["at_risk"]}
    assert "double-booked" in context_of["mcp/calendar"] and "Correction" in context_of["mcp/calendar"]
    assert "prose, not bullets" in context_of["writing/report"] and "(poor)" in context_of["writing/report"]
    assert "Sources were stale" in context_of["research/web"] and "double-booked" not in context_of["research/web"]
    prompt = request.prompt
    sparse_part = prompt.split("## Sparse skills")[1]
    assert "### skill: travel/visa" in sparse_part and "### Review note: This skill has minimal content." in sparse_part
    assert "code/review" not in prompt and "home/recipes" not in prompt


def test_optimization_rewrites_only_sent_skills_and_never_deletes(profile, store, options):
    risky_world(profile, store)
    answer = {
        "toDelete": ["research/web"],
        "toSave": [
            {
                "name": "mcp/calendar",
                "content": "Check free/busy first, then create the event; never retry writes twice.\n" + LONG,
            },
            {"name": "code/review", "content": "Rewritten although nobody asked."},
            {
                "name": "travel/visa",
                "summary": "Check visa rules",
                "content": "1. Open the embassy site. 2. ...",
            },
        ],
    }
    client, _ = scripted(profile, options, [answer])
    report = run_skill_optimization(context(profile, store, client))
    assert report.counts["updated"] == 2 and report.counts["ignored"] == 1 and report.counts["ignored_deletes"] == 1
    assert store.skills.get("mcp/calendar").content.startswith("Check free/busy first")
    assert store.skills.get("code/review").content == skill("code/review").content
    assert not store.skills.get("research/web").is_archived
    visa = store.skills.get("travel/visa")
    assert visa.summary == "Check visa rules" and visa.created_at == NOW - timedelta(days=45)
    kinds = {(c.kind, c.target_id) for c in store.changes.list("c1")}
    assert kinds == {("updated", "mcp/calendar"), ("updated", "travel/visa")}
    assert store.changes.undo_cycle("c1", now=NOW).ok
    assert store.skills.get("travel/visa").content == "Check the embassy site."


def test_optimization_rejects_unusable_text_with_a_reason_and_applies_the_rest(profile, store, options):
    risky_world(profile, store)
    answer = {
        "toSave": [
            {"name": "mcp/calendar", "content": "Check free/busy first\ud800."},
            {
                "name": "travel/visa",
                "summary": "Check\u0007 visa rules",
                "content": "1. Open the embassy site.",
            },
            {"name": "mcp/calendar", "content": "Check free/busy first, then create the event.\n" + LONG},
        ]
    }
    client, _ = scripted(profile, options, [answer])
    report = run_skill_optimization(context(profile, store, client))
    assert report.status == "completed" and report.counts["updated"] == 1 and report.counts["invalid_items"] == 2
    reasons = {c.target: c.detail for c in report.changes if c.kind == "invalid-item"}
    assert "lone surrogate" in reasons["toSave[0]"] and "toSave[1].summary contains a control" in reasons["toSave[1]"]
    assert store.skills.get("mcp/calendar").content == "Check free/busy first, then create the event.\n" + LONG
    assert store.skills.get("travel/visa").content == "Check the embassy site."
    assert [(c.kind, c.target_id) for c in store.changes.list("c1")] == [("updated", "mcp/calendar")]


def test_nothing_at_risk_or_sparse_makes_no_call(profile, store, options):
    catalog(store, skill("code/review"))
    use(profile, "s4", "code/review")
    feedback(profile, "s4", "SessionSummary", "Great.", rating="good")
    client, backend = scripted(profile, options, [])
    report = run_skill_optimization(context(profile, store, client))
    assert report.status == "skipped" and "no at-risk or sparse" in report.reason and backend.requests == []


def test_unchanged_selection_is_not_resent_and_a_new_failure_is(profile, store, options):
    risky_world(profile, store)
    client, backend = scripted(profile, options, [{"toSave": []}, {"toSave": []}])
    run_skill_optimization(context(profile, store, client))
    again = run_skill_optimization(context(profile, store, client, cycle="c2", now=NOW + timedelta(hours=4)))
    assert again.status == "skipped" and "change gate" in again.reason and len(backend.requests) == 1
    feedback(profile, "s1", "Correction", "Double-booked again.", days_ago=-0.1)
    third = run_skill_optimization(context(profile, store, client, cycle="c3", now=NOW + timedelta(hours=8)))
    assert third.status == "completed" and len(backend.requests) == 2


def test_failure_signals_ageing_out_are_not_a_change(profile, store, options):
    catalog(store, skill("mcp/calendar"), skill("research/web"))
    use(profile, "old", "mcp/calendar", days_ago=29)
    feedback(profile, "old", "Correction", "Old complaint.", days_ago=29)
    use(profile, "new", "mcp/calendar", days_ago=2)
    feedback(profile, "new", "Correction", "Recent complaint.", days_ago=2)
    use(profile, "web", "research/web", days_ago=29.5)
    feedback(profile, "web", "SessionSummary", "Stale sources.", rating="fair", days_ago=29.5)
    client, backend = scripted(profile, options, [{"toSave": []}, {"toSave": []}])
    first = run_skill_optimization(context(profile, store, client))
    assert first.counts["at_risk"] == 2
    later = run_skill_optimization(context(profile, store, client, cycle="c2", now=NOW + timedelta(days=2)))
    assert later.counts["at_risk"] == 1  # research/web and the old complaint aged out of the window
    assert later.status == "skipped" and "change gate" in later.reason and len(backend.requests) == 1


def test_an_improved_skill_is_not_resent_for_failures_it_already_answered(profile, store, options):
    catalog(store, skill("mcp/calendar"))
    use(profile, "s1", "mcp/calendar", days_ago=2)
    feedback(profile, "s1", "Correction", "Double-booked.", days_ago=2)
    improved = {"toSave": [{"name": "mcp/calendar", "content": "Check free/busy before booking. " + LONG}]}
    client, backend = scripted(profile, options, [improved])
    assert run_skill_optimization(context(profile, store, client)).counts["updated"] == 1
    again = run_skill_optimization(context(profile, store, client, cycle="c2", now=NOW + timedelta(hours=4)))
    assert again.status == "skipped" and again.counts["answered_signals"] == 1 and len(backend.requests) == 1


@pytest.mark.parametrize("failure", [ModelCallError("timeout"), "<think>hmm</think> no answer"])
def test_failed_optimization_call_is_not_stamped_and_retried(profile, store, options, failure):
    risky_world(profile, store)
    client, backend = scripted(profile, options, [failure, {"toSave": []}])
    assert run_skill_optimization(context(profile, store, client)).status == "failed"
    assert context(profile, store).ledger.get("skill_optimization") is None
    assert run_skill_optimization(context(profile, store, client, cycle="c2")).status == "completed"
    assert len(backend.requests) == 2


@pytest.mark.parametrize("missing", ["feedback", "skill-usage"])
def test_optimization_without_feedback_or_usage_is_skipped(profile, store, options, missing):
    catalog(store, skill("travel/visa", "Check the embassy site.", age=45))
    if missing != "feedback":
        feedback(profile, "s1", "Correction", "Wrong.")
    if missing != "skill-usage":
        use(profile, "s1", "travel/visa")
    client, backend = scripted(profile, options, [])
    report = run_skill_optimization(context(profile, store, client))
    assert report.status == "skipped" and missing in report.reason and backend.requests == []


def test_disabled_optimization_is_skipped(profile, store, options):
    risky_world(profile, store)
    client, backend = scripted(profile, options, [])
    report = run_skill_optimization(
        context(profile, store, client, options=dream_options(SkillOptimizationEnabled=False))
    )
    assert report.status == "skipped" and "SkillOptimizationEnabled" in report.reason and backend.requests == []


# =================================================================== the demo agent, offline
@pytest.mark.slow  # every skill pass, twice, on the full demo
def test_demo_agent_runs_offline_and_an_idle_second_run_costs_no_model_call(profile, options):
    from dream_assets.demo import build_demo_profile
    from dream_assets.store import open_store

    build_demo_profile(profile, NOW)
    store = open_store(profile, options)
    try:
        client = build_model_client(options, profile)
        assert client.backend_name == "offline"
        passes = (run_skill_gap_detection, run_skill_consolidation, run_skill_optimization)
        first = [fn(context(profile, store, client)) for fn in passes]
        assert [r.status for r in first] == ["completed", "completed", "completed"]
        assert all(r.model_calls == 1 and r.summary for r in first)
        clear_conversation_log(profile, NOW)  # what preference inference does at the end
        later = NOW + timedelta(hours=4)
        second = [fn(context(profile, store, client, cycle="c2", now=later)) for fn in passes]
        assert [r.model_calls for r in second] == [0, 0, 0]
        assert all(r.status == "skipped" and r.reason for r in second)
    finally:
        store.close()


# =================================================================== copied answers and cut rewrites
def test_placeholders_and_the_directive_example_are_refused_and_the_pass_fails_unstamped(profile, store, options):
    """A small model copies the directive's example (``"content": "..."``) for every skill: nothing of it applies,
    each refusal is counted with its reason, and the pass is a failure (not stamped, so the next cycle asks again)
    while a real improvement in the same answer still applies."""
    risky_world(profile, store)
    before = {s.name: s.content for s in store.skills.list()}
    answer = {
        "toSave": [
            {"name": "mcp/calendar", "summary": "Summarize an inbox digest into key action items", "content": "..."},
            {"name": "writing/report", "content": "<content>"},
            {"name": "research/web", "content": " TODO "},
            {"name": "travel/visa", "content": "1. Open the embassy site.\n2. Read the entry rules for your passport."},
        ]
    }
    client, _ = scripted(profile, options, [answer, answer])
    report = run_skill_optimization(context(profile, store, client))
    assert report.status == "failed" and "copied" in report.reason
    assert report.counts["copied"] == 3 and report.counts["updated"] == 1
    refused = {c.target: c.detail for c in report.changes if c.kind == "copied"}
    assert "placeholder" in refused["skill 'mcp/calendar'"] and "template slot" in refused["skill 'writing/report'"]
    for name in ("mcp/calendar", "writing/report", "research/web"):
        assert store.skills.get(name).content == before[name]
    assert store.skills.get("travel/visa").content.startswith("1. Open the embassy site.")
    assert PassLedger(profile, now=NOW).get("skill_optimization") is None
    # not stamped: the next run asks the model again
    again = run_skill_optimization(context(profile, store, client, cycle="c2"))
    assert again.model_calls == 1


def test_a_rewrite_that_throws_most_of_a_skill_away_is_refused(profile, store, options):
    risky_world(profile, store)
    old = store.skills.get("mcp/calendar").content
    answer = {"toSave": [{"name": "mcp/calendar", "content": "Check the calendar."}]}
    client, _ = scripted(profile, options, [answer])
    report = run_skill_optimization(context(profile, store, client))
    assert report.status == "failed" and report.counts["shrunk"] == 1
    assert store.skills.get("mcp/calendar").content == old
    assert [c.detail for c in report.changes if c.kind == "shrunk"][0].startswith("the rewrite keeps 19 of")


def test_gap_detection_refuses_a_copied_example_skill(profile, store, options):
    gap_sessions(profile)
    answer = {"toSave": [{**INVOICE_SKILL, "content": "..."}]}
    client, _ = scripted(profile, options, [answer])
    report = run_skill_gap_detection(context(profile, store, client))
    assert report.status == "failed" and report.counts["copied"] == 1
    assert store.skills.get("finance/convert-invoice") is None


def test_consolidation_refuses_a_copied_or_cut_merge_and_keeps_its_sources(profile, store, options):
    catalog(store, skill("writing/report"), skill("writing/weekly"))
    some_usage(profile)
    answer = {
        "toSave": [
            {"name": "writing/report", "content": "The merged skill.", "sourceNames": ["writing/weekly"]},
        ]
    }
    client, _ = scripted(profile, options, [answer])
    report = run_skill_consolidation(context(profile, store, client))
    assert report.status == "failed" and report.counts["shrunk"] == 1
    assert not store.skills.get("writing/weekly").is_archived
    assert store.skills.get("writing/report").content == skill("writing/report").content
