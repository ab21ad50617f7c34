"""Merge coverage check (spec: Pass 1 — "Merge coverage check" through "Numbers can be exempted by category")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dream_assets.profile import AgentProfile
from dream_assets.text.coverage import (
    BASELINE_COMMON_WORDS,
    BASELINE_VOCABULARY,
    FREQUENCY_BASELINE_SIZE,
    NEVER_COMMON_WORDS,
    CoverageResult,
    CoverageSource,
    CoverageVocabulary,
    build_frequency_baseline,
    check_merge_coverage,
    content_sentences,
    dropped_content,
    extract_specifics,
    frequency_baseline,
    invented_specifics,
    load_vocabulary,
    lowercase_words,
    specifics_of,
)


def check(
    sources: list[str] | str,
    merged: str,
    vocab: CoverageVocabulary = BASELINE_VOCABULARY,
    category: str = "general",
) -> CoverageResult:
    texts = [sources] if isinstance(sources, str) else sources
    return check_merge_coverage([CoverageSource(t, category) for t in texts], merged, vocab)


def vocab(**kw: object) -> CoverageVocabulary:
    return CoverageVocabulary(**kw)  # type: ignore[arg-type]


# --- the basic contract -------------------------------------------------------------------------


def test_merge_preserving_all_content_passes() -> None:
    sources = [
        "Austin prefers the Eventbrite export; the MCP server runs Python 3.11 on port 8080.",
        "Austin's meetup is on August 19, 2026 and costs $1,200.",
    ]
    merged = (
        "Austin prefers the Eventbrite export (MCP server, Python 3.11, port 8080); "
        "his meetup is on August 19, 2026 and costs $1,200."
    )
    result = check(sources, merged)
    assert result.ok, result.missing
    assert result.missing == ()
    assert {"Austin", "Eventbrite", "MCP", "3.11", "8080", "August 19, 2026", "1,200"} <= set(result.specifics)


def test_merge_dropping_a_name_is_rejected() -> None:
    result = check(
        ["Met Xebia recruiters with Austin at the fair.", "Met Xebia recruiters at the fair."],
        "Met Xebia recruiters at the fair.",
    )
    assert not result.ok
    assert result.missing == ("Austin",)


def test_merge_dropping_an_acronym_is_rejected() -> None:
    result = check("The calendar tool talks MCP over stdio.", "The calendar tool talks over stdio.")
    assert not result.ok
    assert result.missing == ("MCP",)


def test_merge_dropping_a_multi_digit_number_is_rejected() -> None:
    result = check("the retry budget is 45 seconds", "the retry budget is a few seconds")
    assert result.missing == ("45",)


def test_merge_changing_a_number_is_rejected() -> None:
    assert check("the gateway listens on port 8080", "the gateway listens on port 8081").missing == ("8080",)


def test_merge_dropping_a_date_in_both_spellings_is_rejected() -> None:
    result = check("the visa interview is on August 19, 2026 in the morning", "the visa interview is in the morning")
    assert not result.ok
    assert result.missing == ("August 19, 2026",)
    assert not check("renewal due 2026-08-19", "renewal due soon").ok


def test_single_digit_numbers_are_not_required() -> None:
    assert check("keep 3 backups and retry 5 times", "keep backups and retry").ok


def test_missing_lists_each_exact_source_string_once_in_first_seen_order() -> None:
    result = check(["Ping Xebia and NASA about 4096.", "NASA replied; Xebia did not."], "Someone replied.")
    assert result.missing == ("Ping", "Xebia", "NASA", "4096")


def test_mixed_case_and_alphanumeric_identifiers_are_required() -> None:
    assert check("the app targets iOS only", "the app targets phones only").missing == ("iOS",)
    assert check("train on the A100 nodes", "train on the H100 nodes").missing == ("A100",)


def test_pronoun_i_is_never_evidence_of_a_name() -> None:
    assert check("Yesterday I moved the backups to cold storage.", "The backups moved to cold storage.").ok


# --- numbers: the unit is the whole number ---------------------------------------------------------


def test_thousands_separator_respelling_is_accepted_but_a_truncated_amount_is_rejected() -> None:
    assert check("the invoice was $1,200", "invoice: $1200").ok
    assert check("the invoice was $1,200", "the invoice was $200").missing == ("1,200",)


def test_an_identifier_ending_in_a_number_keeps_its_thousands_groups_as_one_unit() -> None:
    assert check("agreed to pay $US346,807 in gains", "agreed to pay $US346807 in gains").ok
    assert invented("agreed to pay $US346,807 in gains", "Agreed to pay $US346807 in gains.") == ()
    assert check("agreed to pay $US346,807 in gains", "agreed to pay $US346 in gains").missing == (
        "US346,807",
        "346,807",
    )


def test_a_decimal_comma_number_is_one_unit() -> None:
    assert check("about 1,2 million women", "about 1,2 million women").ok
    assert check("about 1,2 million women", "about 2 million women, 1 in 3").missing == ("1,2",)
    assert invented("about 1,2 million women", "about 1,3 million women") == ("1,3",)


def test_version_number_is_not_covered_by_a_longer_version() -> None:
    assert check("pin Python 3.11 for the build", "pin Python 3.11 for the build").ok
    assert check("needs 3.11 exactly", "needs 3.12 or 11 of them").missing == ("3.11",)


def test_twelve_hour_to_24_hour_clock_rewrite_is_rejected() -> None:
    # A known conservative false positive (spec: "Known conservative false positives").
    assert not check("standup at 2:30 PM", "standup at 14:30").ok


# --- equivalent date spellings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "August 19, 2026",
        "Aug 19, 2026",
        "19 August 2026",
        "Aug. 19th, 2026",
        "the 19th of August, 2026",
        "AUGUST 19 2026",
    ],
)
@pytest.mark.parametrize("merged", ["2026-08-19", "8/19/2026", "2026/08/19", "19/08/2026"])
def test_month_name_date_is_kept_by_the_same_date_written_numerically(source: str, merged: str) -> None:
    result = check(f"the hearing is on {source}.", f"hearing on {merged}")
    assert result.ok, result.missing


@pytest.mark.parametrize("merged", ["August 19, 2026", "19 August 2026", "Aug 19, 2026", "8/19/2026"])
def test_numeric_date_is_kept_by_the_same_date_spelled_with_a_month_name(merged: str) -> None:
    result = check("the hearing is on 2026-08-19.", f"hearing on {merged}")
    assert result.ok, result.missing


def test_month_and_day_without_year_is_kept_by_a_numeric_date_with_any_year() -> None:
    assert check("her birthday is March 3", "birthday: 2026-03-03").ok


def test_month_and_year_is_kept_by_a_numeric_date_in_that_month() -> None:
    assert check("moved to Lisbon in March 2026", "moved to Lisbon on 2026-03-14").ok


def test_numeric_date_with_a_different_year_is_rejected() -> None:
    assert check("the hearing is on August 19, 2026.", "hearing on 2025-08-19").missing == ("August 19, 2026",)
    assert check("the hearing is on 2026-08-19.", "hearing on August 19, 2025").missing == ("2026-08-19",)


def test_dropping_the_year_of_a_date_is_rejected() -> None:
    assert not check("the hearing is on 2026-08-19.", "hearing on August 19").ok
    assert not check("the hearing is on August 19, 2026.", "hearing on August 19").ok


def test_numeric_date_with_a_different_day_is_rejected() -> None:
    assert not check("the hearing is on August 19, 2026.", "hearing on 2026-08-18").ok


def test_person_named_august_is_not_credited_by_a_numeric_date() -> None:
    # Guard 1: the month must be adjacent to a day or a year in the source.
    result = check("Reviewed the draft with August; he approved it.", "Reviewed and approved the draft on 2026-08-19.")
    assert not result.ok
    assert result.missing == ("August",)


def test_sentence_initial_may_date_is_protected_even_when_siblings_write_may() -> None:
    sources = ["May 6, 2026 is the launch.", "the launch may slip"]
    assert check(sources, "The launch may slip.").missing == ("May 6, 2026",)
    assert check(sources, "Launch on 2026-05-06; it may slip.").ok


# --- position scoping of the vocabulary ---------------------------------------------------------------


def test_baseline_has_sentence_openers_and_not_title_words() -> None:
    assert {
        "may",
        "will",
        "some",
        "first",
        "last",
        "valid",
        "direct",
        "alternative",
        "through",
    } <= BASELINE_COMMON_WORDS
    assert not {"personal", "class", "benefit", "extended"} & BASELINE_COMMON_WORDS
    assert not {"monday", "august", "june", "mark", "rose"} & BASELINE_COMMON_WORDS


def test_sentence_initial_baseline_words_are_ignored_but_the_same_word_mid_sentence_is_kept() -> None:
    assert check("Some caches are warm. Direct calls skip them.", "caches are warm; calls skip them").ok
    mid = check(
        "Sync files with OneDrive Personal and join the Blazor Online Class.",
        "Sync files with OneDrive and join the Blazor Online course.",
    )
    assert mid.missing == ("Personal", "Class")
    assert check("the card is MVP Azure Extended Benefit", "the card is MVP Azure").missing == (
        "Extended",
        "Benefit",
    )


def test_sentence_initial_word_outside_the_baseline_is_still_required() -> None:
    assert check("Eventbrite sends the ticket emails.", "The ticket emails arrive.").missing == ("Eventbrite",)
    # Its capital is positional, so the word moved into mid-sentence lower case still keeps it.
    assert check("Rebooting fixes the hang.", "A hang is fixed by rebooting.").ok


def test_may_as_a_character_needs_always_specific_words_at_a_sentence_start() -> None:
    story = "May found the key in the well. The guards never saw May leave."
    merged = "The guards never saw her leave with the key."
    # Without the operator's word, only the mid-sentence May is evidence of a name...
    assert check(story, merged).missing == ("May",)
    assert check("May found the key.", "The key was found.").ok
    # ...with it, May is protected in both positions.
    cast = vocab(always_specific_words=frozenset({"May"}))
    assert check("May found the key.", "The key was found.", cast).missing == ("May",)
    assert check(story, merged, cast).missing == ("May",)
    assert check(story, "May found the key; the guards never saw May leave.", cast).ok


def test_lowercase_modal_does_not_keep_a_character_named_will() -> None:
    cast = vocab(always_specific_words=frozenset({"will"}))
    assert check("Will opened the gate.", "The gate will open.", cast).missing == ("Will",)
    assert check("they paid Will in gold", "they will pay in gold").missing == ("Will",)


def test_extra_common_words_suppress_a_word_in_every_position() -> None:
    source = "Rocky's calendar-mcp requires OAuth. In Rocky's environment the Triage label is noise."
    merged = "calendar-mcp requires OAuth; the label is noise."
    assert set(check(source, merged).missing) == {"Rocky", "Triage"}
    framing = vocab(extra_common_words=frozenset({"Rocky", "triage"}))
    assert check(source, merged, framing).ok


def test_always_specific_words_win_over_extra_common_words() -> None:
    both = vocab(extra_common_words=frozenset({"rose"}), always_specific_words=frozenset({"rose"}))
    assert check("the gift was for Rose", "the gift was for her", both).missing == ("Rose",)


# --- corpus evidence ----------------------------------------------------------------------------------


def test_capitalized_word_written_lowercase_by_a_sibling_is_ordinary() -> None:
    # Mid-phrase, "Marking" reads as a proper noun; the sibling's "marking" says it is not one.
    sources = [
        "The tasks API guide covers Marking a task complete.",
        "marking a task done archives it in the tasks API",
    ]
    assert check(sources, "The tasks API guide covers marking a task done, which archives it.").ok
    assert check(sources[:1], "The tasks API guide covers marking a task done.").missing == ("Marking",)


def test_acronym_written_lowercase_by_a_sibling_is_ordinary() -> None:
    sources = ["Contact IDs are account-scoped.", "Never reuse the contact ids across accounts."]
    assert check(sources, "Contact identifiers are account-scoped; never reuse them across accounts.").ok


def test_names_never_written_lowercase_stay_required() -> None:
    sources = [
        "Eventbrite tickets for the Xebia meetup in Austin.",
        "tickets for the meetup go to the eventbrite-free inbox; the venue is near the capitol",
    ]
    result = check(sources, "Tickets for the meetup go to the inbox.")
    assert result.missing == ("Eventbrite", "Xebia", "Austin")


def test_lowercase_part_of_an_identifier_is_not_evidence() -> None:
    sources = ["The MCP server needs a token.", "in Rocky's environment calendar-mcp requires a token"]
    assert "MCP" in check(sources, "calendar-mcp requires a token").missing


def test_always_specific_words_override_sibling_lowercase_evidence() -> None:
    sources = ["The knight Will rode north.", "it will rain"]
    assert check(sources, "A knight rode north; it will rain.").ok
    cast = vocab(always_specific_words=frozenset({"Will"}))
    assert check(sources, "A knight rode north; it will rain.", cast).missing == ("Will",)


def test_lowercase_words_collects_only_standalone_lowercase_prose_words() -> None:
    words = lowercase_words(["the contact ids; Marking, calendar-mcp and github.com/austin 42"])
    assert {"the", "contact", "ids"} <= words
    assert not {"marking", "calendar", "mcp", "austin", "github", "com", "42"} & words


# --- numbers exempt by category --------------------------------------------------------------------


def test_numbers_in_a_numeric_exempt_category_are_not_required() -> None:
    cost = vocab(numeric_exempt_categories=("metrics/cost",))
    sources = ["Haiku averages 0.31 cents per call across 412 calls.", "Haiku averages 0.29 cents per call."]
    assert check(sources, "Haiku averages about 0.3 cents per call.", cost, category="metrics/cost").ok
    assert not check(sources, "Haiku averages about 0.3 cents per call.", category="metrics/cost").ok


def test_exemption_still_requires_names_in_exempt_entries() -> None:
    cost = vocab(numeric_exempt_categories=("metrics/cost",))
    assert check("Haiku costs 31 cents", "it costs 40 cents", cost, category="metrics/cost").missing == ("Haiku",)


@pytest.mark.parametrize(
    ("category", "exempt"),
    [
        ("anti-patterns/routing", True),
        ("anti-patterns/routing/high-tier", True),
        ("anti-patterns/routing-notes", False),
        ("anti-patterns", False),
        ("metrics/cost", True),
        ("metrics/cost/daily", True),
        ("metrics/costs", False),
        ("metrics", False),
    ],
)
def test_numeric_exemption_matches_whole_category_segments(category: str, exempt: bool) -> None:
    cost = vocab(numeric_exempt_categories=("metrics/cost",))
    result = check("tier 2 averaged 412 ms", "tier 2 averaged 388 ms", cost, category=category)
    assert result.ok is exempt


def test_built_in_routing_exemption_cannot_be_removed(tmp_path: Path) -> None:
    assert "anti-patterns/routing" in vocab(numeric_exempt_categories=()).numeric_exempt_categories
    path = AgentProfile(tmp_path).coverage_vocabulary_path
    path.write_text(json.dumps({"numericExemptCategories": []}))
    loaded, warning = load_vocabulary(path)
    assert warning is None
    assert check(
        "routed 412 calls to tier 3", "routed 388 calls to tier 3", loaded, category="anti-patterns/routing"
    ).ok


def test_exemption_skips_a_bare_numeric_date_but_not_a_month_name_date() -> None:
    routing = "anti-patterns/routing"
    assert check("escalations spiked on 2026-08-19", "escalations spiked", category=routing).ok
    assert check("escalations spiked on August 19, 2026", "escalations spiked", category=routing).missing == ("August",)
    assert check("escalations spiked on August 19, 2026", "escalations spiked in August", category=routing).ok
    assert check("escalations spiked on August 19, 2026", "escalations spiked 2026-08-19", category=routing).ok


# --- the vocabulary file -----------------------------------------------------------------------------


def test_missing_vocabulary_file_is_the_baseline_without_warning(tmp_path: Path) -> None:
    loaded, warning = load_vocabulary(AgentProfile(tmp_path).coverage_vocabulary_path)
    assert loaded == BASELINE_VOCABULARY
    assert warning is None


def test_vocabulary_file_is_loaded_case_insensitively(tmp_path: Path) -> None:
    path = AgentProfile(tmp_path).coverage_vocabulary_path
    path.write_text(
        json.dumps(
            {
                "extraCommonWords": ["briefing", "Triage"],
                "alwaysSpecificWords": ["May", "Will"],
                "numericExemptCategories": ["metrics/cost"],
            }
        )
    )
    loaded, warning = load_vocabulary(path)
    assert warning is None
    assert loaded.extra_common_words == {"briefing", "triage"}
    assert loaded.always_specific_words == {"may", "will"}
    assert loaded.numeric_exempt_categories == ("anti-patterns/routing", "metrics/cost")
    assert check("May found the key.", "The key was found.", loaded).missing == ("May",)


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ('{"extraCommonWords": ["briefing",', "not valid JSON"),
        ('["briefing"]', "JSON object"),
        ('{"extraCommonWords": "briefing"}', '"extraCommonWords"'),
        ('{"alwaysSpecificWords": ["May", 7]}', '"alwaysSpecificWords" item 1'),
        ('{"alwaysSpecificWords": null}', '"alwaysSpecificWords"'),
        ('{"extraCommonWords": ["New York"]}', '"extraCommonWords" item 0'),
        ('{"numericExemptCategories": ["/"]}', '"numericExemptCategories" item 0'),
    ],
)
def test_malformed_vocabulary_file_falls_back_to_the_baseline_with_a_warning(
    tmp_path: Path, content: str, named: str
) -> None:
    path = AgentProfile(tmp_path).coverage_vocabulary_path
    path.write_text(content)
    loaded, warning = load_vocabulary(path)
    assert loaded == BASELINE_VOCABULARY
    assert warning is not None and str(path) in warning and named in warning
    # Checking is not disabled by bad config.
    assert not check("met Austin", "met someone", loaded).ok


def test_unknown_vocabulary_field_is_reported_and_known_fields_still_apply(tmp_path: Path) -> None:
    path = AgentProfile(tmp_path).coverage_vocabulary_path
    path.write_text(json.dumps({"alwaysSpecificWords": ["May"], "extraCommonWord": ["rocky"]}))
    loaded, warning = load_vocabulary(path)
    assert warning is not None and '"extraCommonWord"' in warning and "extraCommonWords" in warning
    assert loaded.always_specific_words == {"may"}
    assert loaded.extra_common_words == frozenset()


# --- extraction and an invariant -------------------------------------------------------------------


def test_extract_specifics_reports_kinds_in_text_order() -> None:
    found = extract_specifics(
        CoverageSource("Email NASA about Artemis on 2026-08-19 at 14:30.", "general"),
        BASELINE_VOCABULARY,
        set(),
    )
    assert [(s.text, s.kind) for s in found] == [
        ("Email", "name"),
        ("NASA", "acronym"),
        ("Artemis", "name"),
        ("2026-08-19", "date"),
        ("14:30", "number"),
    ]


_PIECES = list("abcdefgAMJSDOIWXYZ0123456789 .,:;/-'\n") + ["May", "August ", "19", "2026", "Aug. ", "of "]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=3), st.sampled_from(["general", "anti-patterns/routing"]))
def test_merge_that_keeps_every_source_verbatim_always_passes(texts: list[str], category: str) -> None:
    result = check(texts, "\n".join(texts), category=category)
    assert result.ok, result.missing


# --- number ranges are one unit ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("merged", "ok"),
    [
        ("the window is 30-60 minutes", True),
        ("the window is 30–60 minutes", True),
        ("the window is 30 to 60 minutes", True),
        ("the window is between 30 and 60 minutes", True),
        ("the window is 30 minutes, then 60 seconds", False),
        ("the window is 30-59 minutes, of 60", False),
    ],
)
def test_a_number_range_is_kept_only_as_a_range_with_the_same_ends(merged: str, ok: bool) -> None:
    result = check("the window is 30-60 minutes", merged)
    assert result.ok is ok
    assert result.missing == (() if ok else ("30-60",))


# --- invented specifics ------------------------------------------------------------------------------


def invented(
    sources: list[str] | str,
    merged: str,
    vocabulary: CoverageVocabulary = BASELINE_VOCABULARY,
    category: str = "general",
) -> tuple[str, ...]:
    texts = [sources] if isinstance(sources, str) else sources
    return invented_specifics([CoverageSource(t, category) for t in texts], merged, vocabulary)


@pytest.mark.parametrize(
    ("sources", "merged", "expected"),
    [
        # a swapped figure, a wrong year, a new name, a new acronym
        ("the gateway listens on port 8080", "the gateway listens on port 8081", ("8081",)),
        ("The launch review is on 2026-03-06.", "The launch review is on 2026-06-03.", ("2026-06-03",)),
        ("The hearing is on August 19, 2026.", "The hearing is on August 19, 2025.", ("August 19, 2025",)),
        ("Met Austin at the fair.", "Met Austin and Priya at the fair.", ("Priya",)),
        ("the calendar tool talks over stdio", "the calendar tool talks MCP over stdio", ("MCP",)),
        # a range is one unit, judged in its own sentence: "30-60" elsewhere does not excuse "30-59"
        (
            ["The window is 30-60 minutes.", "Retries stop after 59 seconds."],
            "The window is 30-60 minutes. Retries stop within 30-59 seconds.",
            ("30-59",),
        ),
        # a date is one unit: a "19" and a "2026" scattered through the sources do not excuse it
        (
            ["The fee is 19 dollars.", "It went up in 2026, in August."],
            "The fee went up on August 19, 2026.",
            ("August 19, 2026",),
        ),
        # a year the source date does not state is invented
        ("the review is on August 19", "the review is on August 19, 2026", ("August 19, 2026",)),
        # exact merged-text strings, first-seen order, deduplicated
        ("Met Austin in 2024.", "Met Priya and Austin in 2025; Priya stayed until 2025.", ("Priya", "2025")),
    ],
)
def test_invented_specifics_are_reported(sources: list[str] | str, merged: str, expected: tuple[str, ...]) -> None:
    assert invented(sources, merged) == expected


@pytest.mark.parametrize(
    ("sources", "merged"),
    [
        ("The hearing is on August 19, 2026.", "The hearing is on 2026-08-19."),
        ("The hearing is on 2026-08-19.", "Hearing: 19 August 2026, in the morning."),
        ("The hearing is on August 19, 2026.", "The hearing is in August 2026."),
        ("the invoice was $1200", "The invoice was $1,200."),
        ("the invoice was $1,200", "The invoice was $1200."),
        ("deploy the service before the freeze", "Deploy the service before the freeze."),
        ("the app targets iPhone users", "The app targets IPHONE users."),
        ("Contact IDs are account-scoped", "contact ids are account-scoped"),
        ("the API returns contact IDs", "The APIs return a contact ID."),
        ("the window is 30-60 minutes", "The window is between 30 and 60 minutes."),
        ("the window is 30 to 60 minutes", "The window runs 30 minutes at least."),
        ("pin Python 3.11 on port 8080", "Python 3.11 is pinned; the port is 8080."),
        ("released on 2026-08-19", "released in 2026"),
        (
            ["Eventbrite sends the tickets.", "tickets arrive at 9"],
            "Eventually, Eventbrite sends the tickets.",
        ),
        ("the export failed twice", "Sadly, the export failed twice. Meanwhile, nothing else did."),
    ],
)
def test_content_preserving_rewrites_invent_nothing(sources: list[str] | str, merged: str) -> None:
    assert invented(sources, merged) == ()


def test_a_word_a_source_writes_in_any_case_is_not_an_invented_name() -> None:
    assert invented("the knight will ride north", "The knight Will rides north.") == ()
    cast = vocab(always_specific_words=frozenset({"Will"}))
    assert invented("the knight will ride north", "The knight Will rides north.", cast) == ("Will",)
    assert invented("The knight Will rides north.", "Will rides north.", cast) == ()


def test_numbers_are_not_checked_when_every_source_is_numeric_exempt() -> None:
    routing = "anti-patterns/routing"
    assert invented("tier 2 averaged 412 ms on Haiku", "tier 2 averaged 388 ms on Haiku", category=routing) == ()
    assert invented("tier 2 averaged 412 ms", "tier 2 averaged 388 ms on Sonnet", category=routing) == ("Sonnet",)
    mixed = [CoverageSource("tier 2 averaged 412 ms", routing), CoverageSource("tier 2 is slow", "general")]
    assert invented_specifics(mixed, "tier 2 averaged 388 ms", BASELINE_VOCABULARY) == ("388",)


def test_a_merge_with_no_sources_invents_every_specific() -> None:
    assert invented([], "Met Austin in 2024.") == ("Austin", "2024")


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=3), st.sampled_from(["general", "anti-patterns/routing"]))
def test_a_merge_that_keeps_every_source_verbatim_invents_nothing(texts: list[str], category: str) -> None:
    assert invented(texts, "\n".join(texts), category=category) == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Email NASA about Artemis on 2026-08-19 at 14:30.",
            [
                ("Email", "name"),
                ("NASA", "acronym"),
                ("Artemis", "name"),
                ("2026-08-19", "date"),
                ("14:30", "number"),
            ],
        ),
        ("the window is 30-60 minutes for 5 retries", [("30-60", "range")]),
        # the text's own lower-case words are its corpus evidence
        ("Marking a task done archives it; marking is cheap.", []),
        ("The Triage label is noise.", [("Triage", "name")]),
    ],
)
def test_specifics_of_a_text_on_its_own(text: str, expected: list[tuple[str, str]]) -> None:
    assert [(s.text, s.kind) for s in specifics_of(text)] == expected


def test_specifics_of_honours_category_and_vocabulary() -> None:
    assert [s.text for s in specifics_of("routed 412 calls via Haiku", "anti-patterns/routing")] == ["Haiku"]
    framing = vocab(extra_common_words=frozenset({"triage"}))
    assert specifics_of("The Triage label is noise.", vocab=framing) == []


# --- abbreviation periods are not sentence ends --------------------------------------------------------


@pytest.mark.parametrize("abbreviation", ["Dr.", "Mr.", "Mrs.", "Ms.", "Prof.", "St.", "Jr.", "e.g.", "i.e.", "vs."])
def test_a_name_after_an_abbreviation_stays_required(abbreviation: str) -> None:
    # "May" opening a sentence is ordinary English; after an abbreviation it is mid-sentence, so a name.
    result = check(f"The form names {abbreviation} May as the owner.", f"The form names {abbreviation} as the owner.")
    assert result.missing == ("May",)


def test_a_baseline_word_after_a_real_sentence_end_is_still_ordinary() -> None:
    assert check("The form was signed. May we file it?", "The form was signed; we may file it.").ok


def test_mr_will_turner_keeps_both_names() -> None:
    result = check("Ask Mr. Will Turner about the lease.", "Ask Mr. Turner about the lease.")
    assert result.missing == ("Will",)
    assert check("Ask Mr. Will Turner about the lease.", "Ask will turner about the lease.").missing == (
        "Mr",
        "Will",
        "Turner",
    )


def test_a_name_after_saint_keeps_its_capital() -> None:
    # Mid-sentence, the name is not kept by the all-lowercase word.
    assert check("Drive to St. Paul on Monday.", "Drive to St. paul on Monday.").missing == ("Paul",)


def test_initials_do_not_end_a_sentence() -> None:
    result = check("Books by J. R. R. Tolkien sell well.", "Books by tolkien sell well.")
    assert "Tolkien" in result.missing
    assert check("Signed by George W. Bush.", "Signed by george w. bush.").missing == ("George", "W", "Bush")


def test_etc_ends_a_sentence_only_before_common_english() -> None:
    assert check("Bring pens, paper, etc. Then we leave.", "Bring pens and paper; then we leave.").ok
    result = check(
        "Bring pens, paper, etc. Eventbrite sends the tickets.",
        "Bring pens and paper; eventbrite sends the tickets.",
    )
    assert result.missing == ("Eventbrite",)


def test_a_letter_list_marker_is_still_a_line_opening() -> None:
    assert check("a. Some caches are warm.\nb) Direct calls skip them.", "caches are warm; calls skip them").ok


# --- the word-frequency baseline ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "opener",
    [
        "Eventually",
        "Sadly",
        "Meanwhile",
        "Honestly",
        "Luckily",
        "Admittedly",
        "Interestingly",
        "Thankfully",
        "Hope",
    ],
)
def test_ordinary_sentence_openers_are_not_specifics(opener: str) -> None:
    assert check(f"{opener}, the Xebia export finished on time.", "The Xebia export finished on time.").ok


@pytest.mark.parametrize("name", ["John", "Austin", "Paris", "Joy", "Hunter", "Monday", "June", "Eventbrite"])
def test_names_opening_a_sentence_stay_required(name: str) -> None:
    assert check(f"{name} approved the Xebia export.", "The Xebia export was approved.").missing == (name,)


def test_a_baseline_word_used_as_a_name_mid_sentence_stays_required() -> None:
    # "Hope" opens sentences as ordinary English; mid-sentence it is a name, and the baseline does not apply.
    assert check("We asked Hope about the lease.", "We asked about the lease.").missing == ("Hope",)
    assert check("Hope is all we have.", "All we have is hope.").ok


def test_always_specific_words_win_over_the_frequency_baseline() -> None:
    cast = vocab(always_specific_words=frozenset({"Hope"}))
    assert check("Hope signed the lease.", "The lease was signed.", cast).missing == ("Hope",)


def test_frequency_baseline_keeps_months_weekdays_and_reviewed_exclusions_out() -> None:
    baseline = frequency_baseline()
    assert {"eventually", "sadly", "meanwhile", "honestly", "admittedly"} <= baseline
    assert not NEVER_COMMON_WORDS & baseline
    assert not {"john", "austin", "paris", "london", "google", "python"} & baseline


def test_frequency_baseline_is_built_from_packaged_data_without_the_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    def no_network(*args: object, **kwargs: object) -> None:
        raise OSError("network access attempted")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    built = build_frequency_baseline(2_000)
    assert "eventually" in built
    assert "john" not in built


def test_the_shipped_frequency_baseline_is_the_one_wordfreq_builds() -> None:
    # The install reads the list from the package (no wordfreq); it must be what the rule gives from wordfreq's data.
    assert frequency_baseline() == build_frequency_baseline(FREQUENCY_BASELINE_SIZE)
    assert len(frequency_baseline()) > 15_000


# --- names that differ only in case ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("merged", "ok"),
    [
        ("The app targets iPhone users.", True),
        ("The app targets IPHONE users.", True),
        ("The app targets Iphone users.", True),
        ("The app targets iphone users.", False),  # no longer written as a name
        ("The app targets phone users.", False),
    ],
)
def test_a_name_is_kept_by_the_same_word_in_another_case_while_it_is_still_written_as_a_name(
    merged: str, ok: bool
) -> None:
    assert check("the app targets iPhone users", merged).ok is ok


def test_an_acronym_in_another_case_is_kept_but_not_by_an_identifier_part() -> None:
    assert check("the calendar tool talks MCP over stdio", "The calendar tool talks Mcp over stdio.").ok
    assert check("the calendar tool talks MCP over stdio", "calendar-mcp talks over stdio").missing == ("MCP",)


def test_a_name_lowercased_into_an_ordinary_word_is_not_kept() -> None:
    assert check("they paid Will in gold", "They paid WILL in gold.").ok
    assert check("they paid Will in gold", "they will pay in gold").missing == ("Will",)


def test_always_specific_words_are_matched_in_their_exact_case() -> None:
    cast = vocab(always_specific_words=frozenset({"Will"}))
    assert check("they paid Will in gold", "They paid WILL in gold.", cast).missing == ("Will",)
    assert check("they paid Will in gold", "Will was paid in gold.", cast).ok


# --- content: the words between the specifics ----------------------------------------------------------

FLOWERS = "Melanie finds joy in flowers which represent growth, beauty, and appreciating small moments."
POTTERY = "She took up pottery last year and finds it calming."


@pytest.mark.parametrize(
    "sources,merged,dropped",
    [
        # Every source sentence kept: verbatim, re-ordered, re-cased, re-punctuated, inflected, merged into one line.
        ([FLOWERS, POTTERY], f"{FLOWERS}\n{POTTERY}", ()),
        ([FLOWERS, POTTERY], f"{POTTERY} {FLOWERS}", ()),
        ([FLOWERS, POTTERY], f"{FLOWERS} {POTTERY}".upper(), ()),
        ([FLOWERS, POTTERY], f"{FLOWERS.rstrip('.')}; {POTTERY[0].lower()}{POTTERY[1:]}", ()),
        (
            [FLOWERS],
            "Melanie found joy in a flower, which represents growing, beauty and appreciating small moments!",
            (),
        ),
        # Dates and thousands re-spelled: numbers and calendar words are the specifics check's business.
        (
            ["The venue holds 1,200 guests on 19 August 2026 for the launch party."],
            "On 2026-08-19 the venue holds 1200 guests for the launch party.",
            (),
        ),
        # Framing words are not content: a re-observation's "mentioned again" may go.
        (["Melanie mentioned again that she loves pottery classes."], "Melanie loves pottery classes.", ()),
        # A sentence carried by another source's sentence in the merge is not dropped.
        (
            ["Jon loves hiking in the mountains.", "Jon really loves mountain hiking."],
            "Jon loves hiking in the mountains.",
            (),
        ),
        # A whole sentence dropped, with no name, number or date to give it away.
        ([FLOWERS, POTTERY], FLOWERS, (POTTERY,)),
        (
            ["Caroline plans to adopt. The process takes patience and paperwork."],
            "Caroline plans to adopt.",
            ("The process takes patience and paperwork.",),
        ),
        # A sentence rewritten down to half its words.
        ([FLOWERS], "Melanie finds joy in flowers which represent growth.", (FLOWERS,)),
        ([FLOWERS, POTTERY], f"{POTTERY} Flowers represent appreciating small moments.", (FLOWERS,)),
        # Two content words are enough to judge; one is not.
        (
            ["A man is speaking.", "Kestrel ships on Fridays."],
            "Kestrel ships on Fridays.",
            ("A man is speaking.",),
        ),
        (["Noted.", "Kestrel ships on Fridays."], "Kestrel ships on Fridays.", ()),
    ],
)
def test_dropped_content_lists_the_source_sentences_a_merge_no_longer_says(
    sources: list[str], merged: str, dropped: tuple[str, ...]
) -> None:
    assert dropped_content([CoverageSource(t, "general") for t in sources], merged) == dropped


def test_dropped_content_lists_each_sentence_once_in_source_order_and_takes_plain_strings() -> None:
    sources = [POTTERY, FLOWERS, POTTERY]
    assert dropped_content(sources, "Nothing of either survives here.") == (POTTERY, FLOWERS)


@pytest.mark.parametrize(
    "threshold,min_words,dropped",
    [
        (0.7, 2, (FLOWERS,)),  # 6 of 10 content stems kept: below 0.7
        (0.5, 2, ()),  # ... but above 0.5
        (0.7, 11, ()),  # a sentence with fewer content stems than min_words is not judged
    ],
)
def test_dropped_content_threshold_and_minimum_size(threshold: float, min_words: int, dropped: tuple[str, ...]) -> None:
    merged = "Melanie finds joy in flowers which represent growth."
    assert dropped_content([FLOWERS], merged, threshold=threshold, min_words=min_words) == dropped


@pytest.mark.parametrize(
    "text,sentences",
    [
        ("Dr. May met J. R. R. Tolkien. He left!", ["Dr. May met J. R. R. Tolkien.", "He left!"]),
        ("Use a linter, e.g. ruff. It is fast.", ["Use a linter, e.g. ruff.", "It is fast."]),
        ('She said "done." Then she left', ['She said "done."', "Then she left"]),
        ("- first point\n- second point", ["- first point", "- second point"]),
    ],
)
def test_content_sentences_end_at_stops_and_line_breaks_but_not_at_abbreviations(
    text: str, sentences: list[str]
) -> None:
    assert content_sentences(text) == sentences


def test_a_date_wrapped_across_a_line_is_kept_but_not_one_that_reads_another_number() -> None:
    source = [CoverageSource("The Atlas review is on February 1, 2026.", "general")]
    assert check_merge_coverage(source, "The Atlas review is on February\n1, 2026.", BASELINE_VOCABULARY).ok
    assert check_merge_coverage(source, "The Atlas review is on February  1,\n 2026.", BASELINE_VOCABULARY).ok
    lost = check_merge_coverage(source, "The Atlas review is on February\n11, 2026.", BASELINE_VOCABULARY)
    assert not lost.ok and "February 1, 2026" in lost.missing
