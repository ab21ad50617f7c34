"""Save-time dedup never drops or overwrites information (spec: "Duplicates are avoided at save time").

A save that matches a live entry reinforces it only when it says nothing the entry lacks, extends it only by
adding text, and is otherwise saved as a new entry: after any two saves every specific (name, acronym, number,
date) of both texts is in some live entry, and the first text is still there exactly as it was written.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dream_assets.options_loader import dream_options
from dream_assets.profile import AgentProfile
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store
from dream_assets.store.dedup import CREATE, EXTEND, REINFORCE, decide
from dream_assets.text import coverage
from dream_assets.text.coverage import BASELINE_VOCABULARY, CoverageSource, check_merge_coverage

from ..conftest import NOW

LATER = NOW + timedelta(days=2)
BACKGROUND = [
    "The user drinks green tea in the afternoon.",
    "Invoices are due on the 5th of each month.",
    "Standup is at 9:30 on weekdays.",
]
REVIEW = (
    "Priya from ACME reviews the MCP gateway rollout with the security team on March 6, 2026, in the Lisbon "
    "office, and the review covers the audit logging, the token scopes and the rate limits."
)


def _specifics(text: str, category: str = "general") -> list[coverage.Specific]:
    specifics_of = getattr(coverage, "specifics_of", None)
    if specifics_of is not None:
        return list(specifics_of(text, category, BASELINE_VOCABULARY))
    return coverage.extract_specifics(
        CoverageSource(text, category), BASELINE_VOCABULARY, coverage.lowercase_words([text])
    )


def _has(text: str, phrase: str, *, ignore_case: bool = False) -> bool:
    flags = re.IGNORECASE if ignore_case else 0
    return re.search(rf"(?<![^\W_]){re.escape(phrase)}(?![^\W_])", text, flags) is not None


def _kept(specific: coverage.Specific, source: str, live: list[str], *, exact: bool) -> bool:
    """The specific is in some live entry: the exact string, the same word where only a sentence-opening capital
    differs (unless ``exact``), or, for a date, the same date in another spelling."""
    for content in live:
        if _has(content, specific.text, ignore_case=not (exact or specific.case_sensitive)):
            return True
        if (
            specific.kind == "date"
            and specific.text
            not in check_merge_coverage([CoverageSource(source, "general")], content, BASELINE_VOCABULARY).missing
        ):
            return True
    return False


def _assert_nothing_lost(first: str, second: str, live: list[str]) -> None:
    # Stored text is never rewritten: the first text survives as written (an in-place continuation may only
    # move its closing period).
    head = re.sub(r"[.!?]+$", "", first)
    assert any(head in content for content in live), (first, live)
    for sp in _specifics(first):
        assert _kept(sp, first, live, exact=True), (sp.text, live)
    for sp in _specifics(second):
        assert _kept(sp, second, live, exact=False), (sp.text, live)


@pytest.fixture
def seeded(store):
    for text in BACKGROUND:
        save_memory(store.memories, text, now=NOW)
    return store


def _live(store) -> list[str]:
    return [e.content for e in store.memories.list_live() if e.content not in BACKGROUND]


# --- the examples ------------------------------------------------------------------------------------------


def test_corrected_date_is_saved_as_a_new_entry(store):
    first = save_memory(store.memories, "The launch review is on 2026-03-06.", now=NOW)
    second = save_memory(store.memories, "The launch review is on 2026-06-03.", now=LATER)
    assert second.action == "created"
    assert second.matched_id == first.entry.id  # the near-duplicate is named, for consolidation and the caller
    assert "2026-06-03" in second.reason and "2026-03-06" in second.reason
    live = {e.id: e for e in store.memories.list_live()}
    assert len(live) == 2
    assert live[first.entry.id].content == "The launch review is on 2026-03-06."
    assert live[first.entry.id].reinforcement_count == 1 and live[first.entry.id].last_seen_at == NOW
    assert live[second.entry.id].content == "The launch review is on 2026-06-03."


def test_swapped_names_are_a_different_fact(store):
    first = save_memory(store.memories, "Sam plans a trip with Evan.", now=NOW)
    second = save_memory(store.memories, "Evan plans a trip with Sam.", now=LATER)
    assert second.action == "created" and second.matched_id == first.entry.id
    assert "another order" in second.reason
    assert sorted(_live(store)) == ["Evan plans a trip with Sam.", "Sam plans a trip with Evan."]


@pytest.mark.parametrize(
    "stored,incoming",
    [
        ("The flight to Oslo departs at 10:20.", "The flight to Oslo departs at 20:10."),
        (
            "The error rate of the Atlas service was 3.5 percent.",
            "The error rate of the Atlas service was 5.3 percent.",
        ),
        (
            "The offsite budget for the Berlin team is $1,200.",
            "The offsite budget for the Berlin team is $200.",
        ),
        ("The contract with Globex renews on 3/6/2026.", "The contract with Globex renews on 6/3/2026."),
        ("The user moved from Berlin to Paris in spring.", "The user moved to Berlin from Paris in spring."),
    ],
)
def test_a_changed_value_or_order_is_a_correction_saved_apart(store, stored, incoming):
    first = save_memory(store.memories, stored, now=NOW)
    second = save_memory(store.memories, incoming, now=LATER)
    assert second.action == "created" and second.matched_id == first.entry.id and second.reason
    assert sorted(_live(store)) == sorted([stored, incoming])
    assert store.memories.get(first.entry.id).reinforcement_count == 1


def test_incoming_superset_never_replaces_the_stored_casing(seeded):
    first = save_memory(seeded.memories, REVIEW, now=NOW)
    # The incoming words include all of the stored entry's words, lower-cased, with more detail.
    second = save_memory(seeded.memories, REVIEW.lower()[:-1] + " and the sso setup.", now=LATER)
    assert second.matched_id == first.entry.id
    assert second.action == "created"  # the stored sentence is restated in other spelling: kept apart
    live = _live(seeded)
    assert REVIEW in live and REVIEW.lower()[:-1] + " and the sso setup." in live


def test_repeat_with_a_new_sentence_extends_and_keeps_the_stored_text(seeded):
    first = save_memory(seeded.memories, REVIEW, now=NOW)
    second = save_memory(seeded.memories, REVIEW.lower() + " Bring the threat model.", now=LATER)
    assert second.action == "extended" and second.matched_id == first.entry.id
    assert _live(seeded) == [REVIEW + " Bring the threat model."]
    assert seeded.memories.get(first.entry.id).reinforcement_count == 2


def test_continuing_a_sentence_extends_it_in_place(seeded):
    first = save_memory(seeded.memories, REVIEW, now=NOW)
    second = save_memory(seeded.memories, REVIEW[:-1] + " and the SSO setup.", now=LATER)
    assert second.action == "extended" and second.matched_id == first.entry.id
    assert _live(seeded) == [REVIEW[:-1] + " and the SSO setup."]


def test_extension_over_the_size_cap_creates_a_new_entry(profile):
    body = REVIEW + " The security team sends the audit logging findings and the token scopes to Priya first."
    stored, extra = body + " Lunch is provided.", " Bring snacks."
    options = replace(dream_options(), MaxContentChars=len(stored) + len(extra) - 1)
    store = open_store(profile, options)
    try:
        for text in BACKGROUND:
            save_memory(store.memories, text, now=NOW)
        first = save_memory(store.memories, stored, now=NOW)
        incoming = body + extra  # fits the cap; the stored text plus the incoming's new sentence does not
        assert len(incoming) <= options.MaxContentChars
        second = save_memory(store.memories, incoming, now=LATER)
        assert second.action == "created" and second.matched_id == first.entry.id
        assert "MaxContentChars" in second.reason
        assert sorted(_live(store)) == sorted([stored, incoming])
    finally:
        store.close()


def test_a_respelled_name_is_saved_apart(store):
    save_memory(store.memories, "The user hosts the dotfiles repository on Github.", now=NOW)
    second = save_memory(store.memories, "The user hosts the dotfiles repository on GitHub.", now=LATER)
    assert second.action == "created" and "'GitHub'" in second.reason
    assert len(_live(store)) == 2


def test_a_lowercase_repeat_reinforces_and_keeps_the_stored_spelling(store):
    first = save_memory(store.memories, "The user deploys the MCP gateway to AWS in eu-west-1.", now=NOW)
    second = save_memory(store.memories, "the user deploys the mcp gateway to aws in eu-west-1", now=LATER)
    assert second.action == "reinforced" and second.matched_id == first.entry.id
    assert _live(store) == ["The user deploys the MCP gateway to AWS in eu-west-1."]


def test_the_same_date_in_another_spelling_reinforces_and_keeps_the_stored_spelling(store):
    first = save_memory(store.memories, "The contract with Globex renews on March 6, 2026.", now=NOW)
    second = save_memory(store.memories, "The contract with Globex renews on 6 March 2026", now=LATER)
    assert second.action == "reinforced" and second.matched_id == first.entry.id
    assert _live(store) == ["The contract with Globex renews on March 6, 2026."]


def test_repeating_a_correction_reinforces_the_correction(store):
    save_memory(store.memories, "The launch review is on 2026-03-06.", now=NOW)
    correction = save_memory(store.memories, "The launch review is on 2026-06-03.", now=NOW + timedelta(hours=1))
    again = save_memory(store.memories, "The launch review is on 2026-06-03.", now=LATER)
    assert again.action == "reinforced" and again.matched_id == correction.entry.id
    assert sorted(_live(store)) == [
        "The launch review is on 2026-03-06.",
        "The launch review is on 2026-06-03.",
    ]
    assert store.memories.get(correction.entry.id).reinforcement_count == 2


def test_different_subject_times_are_never_merged_even_for_a_repeat(store):
    save_memory(store.memories, "The user went skiing in Innsbruck.", metadata={"subjectTime": "2026-02-01"}, now=NOW)
    r = save_memory(
        store.memories, "The user went skiing in Innsbruck.", metadata={"subjectTime": "2025-02-01"}, now=LATER
    )
    assert r.action == "created" and r.matched_id is None
    assert len(_live(store)) == 2


def test_a_line_wrapped_sentence_and_the_same_sentence_on_one_line_are_one_sentence(store):
    wrapped = "Rocky has a Red Fletcher show\nat White Rock Lounge on 2026-10-26."
    first = save_memory(store.memories, wrapped, now=NOW)
    again = save_memory(store.memories, "Rocky has a Red Fletcher show at White Rock Lounge on 2026-10-26.", now=LATER)
    assert again.action == "reinforced" and again.matched_id == first.entry.id
    assert _live(store) == [wrapped]
    # And the other way round, with more words: the stored words stay as written, the new ones follow once.
    one_line = save_memory(store.memories, "Tim booked the Lisbon flight for the Web Summit on 2026-11-02.", now=NOW)
    longer = save_memory(
        store.memories, "Tim booked the Lisbon\nflight for the Web Summit on 2026-11-02 with Ana Ribeiro.", now=LATER
    )
    assert longer.action == "extended" and longer.matched_id == one_line.entry.id
    assert longer.entry.content == "Tim booked the Lisbon flight for the Web Summit on 2026-11-02 with Ana Ribeiro."


def test_a_date_wrapped_before_its_year_is_still_one_sentence_and_one_date(store):
    """A line that opens with the year and a full stop ("2026. The ...") is the wrapped end of a date, not item 2026
    of a numbered list."""
    one_line = "Sam plans a trip to Lisbon with Evan on February 1, 2026. The notes were taken by Sam."
    first = save_memory(store.memories, one_line, now=NOW)
    again = save_memory(store.memories, one_line.replace("February 1, 2026", "February 1,\n2026"), now=LATER)
    assert again.action == "reinforced" and again.matched_id == first.entry.id
    assert _live(store) == [one_line]


def test_a_save_in_another_category_never_lands_on_an_entry_there(store):
    john = save_memory(
        store.memories,
        "John supported Tim a lot during the move, as mentioned in the conversation.",
        category="people/john",
        now=NOW,
    )
    tim = save_memory(
        store.memories,
        "Tim appreciates John's support as mentioned in the conversation.",
        category="people/tim",
        now=LATER,
    )
    assert tim.action == "created" and tim.entry.category == "people/tim"
    same = save_memory(store.memories, john.entry.content, category="people/tim", now=LATER)
    assert same.action == "created" and "category" in same.reason  # the same words elsewhere mean another memory
    cased = save_memory(store.memories, john.entry.content, category="People/john", now=LATER)
    assert cased.action == "created"  # categories compare case-sensitively
    assert store.memories.get(john.entry.id).content == john.entry.content
    assert store.memories.get(john.entry.id).reinforcement_count == 1


def test_a_similar_sentence_about_another_fact_is_not_appended(store):
    stored = "Tim moved to Leeds in March. John helped with the move."
    first = save_memory(store.memories, stored, category="people/tim", now=NOW)
    # Close in words (a near-duplicate candidate) but neither sentence of the entry is in it: another fact.
    other = save_memory(
        store.memories, "Tim thanked John for the help with the move to Leeds.", category="people/tim", now=LATER
    )
    assert other.action == "created" and other.matched_id == first.entry.id, other
    assert store.memories.get(first.entry.id).content == stored


@pytest.mark.parametrize(
    ("category", "tags", "metadata"),
    [
        ("feedback/from-user", ("correction",), {}),
        ("feedback", (), {}),
        ("capability-claims/calendar", (), {}),
        ("facts", ("user-correction",), {}),
        ("facts", (), {"feedbackKind": "Correction"}),
    ],
)
def test_each_occurrence_of_a_correction_feedback_or_capability_claim_is_kept(store, category, tags, metadata):
    text = "Do not book meetings before 10:00 on Mondays."
    first = save_memory(store.memories, text, category=category, tags=tags, metadata=metadata, now=NOW)
    second = save_memory(store.memories, text, category=category, tags=tags, metadata=metadata, now=LATER)
    assert first.action == second.action == "created" and first.entry.id != second.entry.id
    assert store.memories.get(first.entry.id).reinforcement_count == 1


def test_a_repeat_keeps_updated_at_and_every_tag_spelling(store):
    first = save_memory(store.memories, "User prefers the dark mode.", tags=("Ops",), now=NOW)
    again = save_memory(store.memories, "The user prefers dark mode!", tags=("ops",), now=LATER)
    assert again.action == "reinforced" and again.matched_id == first.entry.id
    kept = store.memories.get(first.entry.id)
    assert kept.updated_at == first.entry.updated_at and kept.last_seen_at == LATER
    assert kept.tags == ("Ops", "ops") and kept.reinforcement_count == 2


# --- the decision on its own ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stored,incoming,action",
    [
        (
            "The user prefers dark mode in the code editor.",
            "the user prefers dark mode in the code editor",
            REINFORCE,
        ),
        ("The user prefers dark mode.  It helps at night.", "It helps at night.", REINFORCE),
        ("User prefers the dark mode.", "The user prefers dark mode!", REINFORCE),
        ("The user prefers dark mode.", "The user prefers dark mode. The terminal uses Solarized.", EXTEND),
        ("The user prefers dark mode", "The user prefers dark mode. The terminal uses Solarized.", EXTEND),
        ("The user prefers dark mode.", "The user really prefers dark mode.", CREATE),
        (
            "The user prefers dark mode in the editor and terminal.",
            "The user prefers dark mode in the editor.",
            CREATE,
        ),
        ("The user does not drink coffee after 17:00.", "The user does drink coffee after 17:00.", CREATE),
        ("The stand-up is at 9.", "The stand-up is at 9:30.", CREATE),
        ("The fee is $200.", "The fee is €200.", CREATE),
        ("The temperature limit is 5 degrees.", "The temperature limit is -5 degrees.", CREATE),
    ],
)
def test_decision(stored, incoming, action):
    decision = decide(stored, incoming, max_chars=16_000)
    assert decision.action == action, decision.reason
    assert decision.reason
    if action == EXTEND:
        assert decision.content.startswith(stored)
        assert "The terminal uses Solarized." in decision.content


def test_an_extension_that_would_fail_coverage_is_not_applied(monkeypatch):
    from dream_assets.store import dedup

    monkeypatch.setattr(
        dedup,
        "check_merge_coverage",
        lambda sources, merged, vocab: coverage.CoverageResult(False, ("Solarized",), ("Solarized",)),
    )
    decision = decide(
        "The user prefers dark mode.",
        "The user prefers dark mode. The terminal uses Solarized.",
        max_chars=16_000,
    )
    assert decision.action == CREATE and "Solarized" in decision.reason


# --- property: no pair of saves loses a specific -------------------------------------------------------------------

_PEOPLE = ["Sam", "Evan", "Priya", "Tomas", "Mia", "Okafor"]
_PLACES = ["Lisbon", "Oslo", "Berlin", "Austin"]
_PROJECTS = ["Atlas", "Hermes", "MCP gateway", "AWS migration"]
_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def _date(day: int, month: int, style: int) -> str:
    return [
        f"2026-{month:02d}-{day:02d}",
        f"{_MONTHS[month - 1]} {day}, 2026",
        f"{day} {_MONTHS[month - 1]} 2026",
        f"{month}/{day}/2026",
    ][style]


@st.composite
def _fact(draw: st.DrawFn) -> dict[str, object]:
    p1, p2 = draw(st.lists(st.sampled_from(_PEOPLE), min_size=2, max_size=2, unique=True))
    day, month = draw(st.lists(st.integers(1, 12), min_size=2, max_size=2, unique=True))
    return {
        "template": draw(st.integers(0, 3)),
        "p1": p1,
        "p2": p2,
        "place": draw(st.sampled_from(_PLACES)),
        "project": draw(st.sampled_from(_PROJECTS)),
        "day": day,
        "month": month,
        "style": draw(st.integers(0, 3)),
        "hour": draw(st.integers(10, 23)),
        "minute": draw(st.sampled_from([5, 15, 30, 45])),
        "int": draw(st.integers(1, 9)),
        "frac": draw(st.integers(1, 9)),
        "amount": draw(st.sampled_from(["$1,200", "$200", "$2,100", "$12,000"])),
    }


def _render(f: dict[str, object]) -> str:
    date = _date(f["day"], f["month"], f["style"])  # type: ignore[arg-type]
    return [
        f"{f['p1']} plans a trip to {f['place']} with {f['p2']} on {date}.",
        f"The {f['project']} review with {f['p1']} and {f['p2']} is at {f['hour']}:{f['minute']:02d} on {date}.",
        f"The {f['project']} error rate was {f['int']}.{f['frac']} percent after {f['p1']} changed the retries "
        f"in {f['place']}.",
        f"The {f['project']} budget approved by {f['p1']} for the {f['place']} offsite is {f['amount']}.",
    ][f["template"]]  # type: ignore[index]


_FILLER = "The notes were taken by {p} in the shared document and the follow-up items were assigned the same afternoon."
_ADDED = [
    "Bring the threat model.",
    "The agenda is in the shared drive.",
    "Okafor joins from Austin.",
    "The budget line is 4410.",
    "Sign-off is due by 2026-09-30.",
]
_KINDS = [
    "repeat",
    "lowercase",
    "punctuation",
    "swap_date",
    "swap_time",
    "swap_decimal",
    "swap_amount",
    "swap_names",
    "respelled",
    "added",
    "continued",
    "paraphrase",
    "over_cap",
    "other_category",
]
#: The category of the first save, and another one (categories compare case-sensitively).
_CATEGORY = "people/priya"
_OTHER_CATEGORIES = ["people/sam", "People/priya", "general"]
_FILLER_2 = "The security team sends the audit findings and the token scopes to the owners before the review."
_SLOTS = {
    "swap_date": [0, 1],
    "swap_time": [1],
    "swap_decimal": [2],
    "swap_amount": [3],
    "swap_names": [0, 1],
}
_SAME = {"repeat", "lowercase", "punctuation"}
_CHANGED = {"swap_date", "swap_time", "swap_decimal", "swap_amount", "swap_names"}


def _mutate(f: dict[str, object], kind: str) -> str:
    g = dict(f)
    if kind == "swap_date":
        g["day"], g["month"] = f["month"], f["day"]
    elif kind == "swap_time":
        g["minute"] = {5: 50, 15: 51, 30: 3, 45: 54}[f["minute"]]  # type: ignore[index]
    elif kind == "swap_decimal":
        if f["int"] != f["frac"]:
            g["int"], g["frac"] = f["frac"], f["int"]
        else:
            g["frac"] = f["frac"] % 9 + 1  # type: ignore[operator]
    elif kind == "swap_amount":
        g["amount"] = {"$1,200": "$200", "$200": "$1,200", "$2,100": "$1,200", "$12,000": "$1,200"}[f["amount"]]
    elif kind == "swap_names":
        g["p1"], g["p2"] = f["p2"], f["p1"]
    return _render(g)


def _wrap(text: str, at: int) -> str:
    """``text`` with one of its spaces (the ``at``-th, modulo their count) a line break: a wrapped line."""
    spaces = [i for i, ch in enumerate(text) if ch == " " and 0 < i < len(text.rstrip()) - 1]
    if not spaces:
        return text
    i = spaces[at % len(spaces)]
    return text[:i] + "\n" + text[i + 1 :]


@st.composite
def _pair(draw: st.DrawFn) -> tuple[str, str, str, int | None, str, str]:
    """A kind, two texts, a size cap, and the categories of the two saves; either text may be line-wrapped."""
    kind = draw(st.sampled_from(_KINDS))
    f = draw(_fact())
    if kind in _SLOTS:  # a template that has the value this kind changes
        f["template"] = draw(st.sampled_from(_SLOTS[kind]))
    filler = _FILLER.format(p=draw(st.sampled_from(_PEOPLE)))
    long_form = draw(st.booleans()) or kind in ("added", "continued")
    lead = f"{_render(f)} {filler}" if long_form else _render(f)
    extra = draw(st.sampled_from(_ADDED))
    cap = None
    if kind in _SAME | _CHANGED:
        second = _mutate(f, kind) + (f" {filler}" if long_form else "")
        if kind == "lowercase":
            second = second.lower()
        elif kind == "punctuation":
            second = "  " + second.rstrip(".") + " "
        first = lead
    elif kind == "respelled":
        first, second = (
            lead,
            lead.replace(" percent", " Percent")
            .replace(" offsite", " Offsite")
            .replace(" trip", " Trip")
            .replace(" review", " Review"),
        )
    elif kind == "added":
        first, second = lead, f"{lead} {extra}"
    elif kind == "continued":
        first, second = lead, f"{lead[:-1]} and the minutes go to {draw(st.sampled_from(_PEOPLE))}."
    elif kind == "paraphrase":
        first = lead
        second = lead.replace("The ", "", 1) if lead.startswith("The ") else lead.replace(" with ", " together with ")
    elif kind == "other_category":  # the same text, or the text with a new sentence, filed elsewhere
        first, second = lead, draw(st.sampled_from([lead, f"{lead} {extra}"]))
    else:  # over_cap: the stored text plus the incoming's new sentence would not fit, each text alone does
        body = f"{_render(f)} {filler} {_FILLER_2}"
        first, second = f"{body} Lunch is provided.", f"{body} Bring snacks."
        cap = len(first) + len(" Bring snacks.") - 1
    if draw(st.booleans()):
        first = _wrap(first, draw(st.integers(0, 60)))
    if draw(st.booleans()):
        second = _wrap(second, draw(st.integers(0, 60)))
    other = draw(st.sampled_from(_OTHER_CATEGORIES)) if kind == "other_category" else _CATEGORY
    return kind, first, second.strip() if kind != "punctuation" else second, cap, _CATEGORY, other


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pair())
@pytest.mark.slow  # a property search over every pair of saves
def test_no_pair_of_saves_loses_a_specific(pair):
    """Nothing is lost, a repeat (line-wrapped or not) is deduplicated, a change is kept apart, and a save into
    another category never lands on the first entry."""
    kind, first, second, cap, first_category, second_category = pair
    options = dream_options() if cap is None else replace(dream_options(), MaxContentChars=cap)
    with tempfile.TemporaryDirectory() as root:
        store = open_store(AgentProfile(root).ensure(), options)
        try:
            for text in BACKGROUND:
                save_memory(store.memories, text, now=NOW)
            a = save_memory(store.memories, first, category=first_category, now=NOW)
            b = save_memory(store.memories, second, category=second_category, now=LATER)
            live = _live(store)
            first_now = store.memories.get(a.entry.id)
        finally:
            store.close()
    assert a.action == "created"
    _assert_nothing_lost(first, second.strip(), live)
    assert len(live) == (1 if b.action in ("reinforced", "extended") else 2)
    if kind in _SAME:
        # A true repeat is deduplicated: the property cannot hold by never deduplicating.
        assert b.action == "reinforced" and b.matched_id == a.entry.id, b
        assert live == [first]
    if kind in _CHANGED:
        assert first != second and b.action == "created", b
    if kind == "over_cap":
        assert b.action != "extended" and max(len(c) for c in live) <= options.MaxContentChars
        assert b.matched_id is None or "MaxContentChars" in b.reason, b
    if kind == "other_category":
        assert b.action == "created" and b.entry.category == second_category, b
        assert first_now.content == first and first_now.reinforcement_count == 1
    # Line breaks inside a sentence never make text the entry already holds appear twice.
    for content in live:
        flat = [" ".join(s.split()) for s in re.split(r"(?<=[.!?])\s+", content) if s.strip()]
        assert len(flat) == len(set(flat)), content


def test_save_time_dedup_never_absorbs_a_save_into_another_scope(profile):
    """Two users (declared scopes, and LangGraph namespaces) saving the same words keep an entry each: a save is only
    ever reinforced or extended into an entry of its own category, hence of its own scope."""
    from dream_assets import agent_memory

    options = dream_options(MemoryScopeCategories="users/*")
    text = "Standup moved to 09:30 on Mondays."
    first = agent_memory.save(profile, text, category="users/alice", options=options, now=NOW)
    for category in ("users/bob", "memories/bob", "general"):
        other = agent_memory.save(profile, text + " Bring notes.", category=category, options=options, now=NOW)
        assert other.outcome == "created" and other.id != first.id
        again = agent_memory.save(profile, text, category=category, options=options, now=NOW)
        assert again.id != first.id
    assert agent_memory.get(profile, first.id, options=options, now=NOW).content == text
