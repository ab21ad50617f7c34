"""The offline backend: answers every contract, conservatively, and never drops a source sentence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dream_assets.llm.base import ModelRequest
from dream_assets.llm.client import ModelClient, build_model_client
from dream_assets.llm.offline import JUDGEMENT_NOTE, OfflineBackend
from dream_assets.options_loader import dream_options
from dream_assets.passes.registry import MODEL_CALLS, model_call
from dream_assets.text.restated import carries
from dream_assets.text.sentence_merge import merge_keeping_every_sentence, sentence_key, sentences_of, split_sentences

#: pass name -> its response contract, as the pass specs define them
CONTRACTS = {name: call.contract for name, call in MODEL_CALLS.items()}


def _call(pass_name: str, inputs: dict):
    client = ModelClient(OfflineBackend(), profile=None, options=dream_options())
    return client.call(ModelRequest(model_call(pass_name), "directive", "prompt", inputs))


def test_offline_is_the_default_without_an_endpoint(caplog) -> None:
    caplog.set_level("INFO")
    client = build_model_client(dream_options(), None, env={})
    assert (client.backend_name, client.model_name) == ("offline", "offline-deterministic")
    assert "model backend: offline (no endpoint configured)" in caplog.text
    assert client.describe()["llm_backend"] == "offline"


@pytest.mark.parametrize("pass_name", sorted(CONTRACTS))
def test_offline_answers_every_contract_even_without_inputs(pass_name: str) -> None:
    result = _call(pass_name, {})
    assert result.ok, result.error
    assert isinstance(result.response, CONTRACTS[pass_name])
    assert result.backend == "offline"


def test_offline_merges_each_cluster_keeping_every_sentence() -> None:
    entries = [
        {
            "id": "a",
            "content": "Bob lives in Lisbon. He moved in 2024.",
            "category": "people/bob",
            "tags": ["bob"],
        },
        {
            "id": "b",
            "content": "bob lives in lisbon!  He works at Xebia.",
            "category": "people/bob",
            "tags": ["work", "bob"],
        },
        {"id": "c", "content": "Unrelated fact.", "category": "general", "tags": []},
    ]
    result = _call("memory_consolidation", {"entries": entries, "clusters": [["a", "b"], ["c"], ["x", "c"]]})
    assert result.ok
    assert result.response.to_delete == []
    [save] = result.response.to_save
    assert save.content == "Bob lives in Lisbon. He moved in 2024.\nHe works at Xebia."
    assert save.category == "people/bob" and save.tags == ["bob", "work"] and save.source_ids == ["a", "b"]


def test_offline_never_merges_entries_about_different_subjects() -> None:
    entries = [
        {"id": "j1", "content": "Jon loves pottery.", "category": "people/jon", "tags": []},
        {"id": "g", "content": "Gina loves pottery.", "category": "people/gina", "tags": []},
        {
            "id": "j2",
            "content": "Jon said again on 12 May 2023 that he loves pottery.",
            "category": "people/jon",
            "tags": [],
        },
        {"id": "x", "content": "Jon loves pottery.", "category": "general", "tags": []},
    ]
    result = _call("memory_consolidation", {"entries": entries, "clusters": [["j1", "g", "j2"], ["g", "x"]]})
    assert [(s.source_ids, s.category) for s in result.response.to_save] == [(["j1", "j2"], "people/jon")]


@pytest.mark.parametrize(
    ("first", "second", "merged"),
    [
        ("Melanie loves pottery.", "Melanie said again on 12 May 2023 that she loves pottery.", True),
        (
            "On 25 May 2023, Melanie mentioned again that she loves pottery.",
            "Melanie loves pottery. This came up again in a chat with Caroline on 2 July 2023.",
            True,
        ),
        ("Melanie went camping.", "Melanie went camping on 7 May 2023.", True),  # more detail, nothing lost
        (
            "On 7 May 2023, Melanie went camping with her kids.",
            "On 20 June 2023, Melanie went camping with her kids.",
            False,
        ),
        ("Melanie has 2 kids who love camping.", "Melanie has 3 kids who love camping.", False),
        ("Melanie said she went camping on 7 May 2023.", "Melanie went camping on 20 June 2023.", False),
        # A correction and the fact it corrects: the contradiction sweep's to decide, not one fact told twice.
        (
            "Donna Gonzalez has 12000 in savings.",
            "Correction from Donna Gonzalez: Donna Gonzalez has 15000 in savings, not 12000.",
            False,
        ),
        (
            "On 28 February 2023, Maria takes notes about politics.",
            "On 19 April 2023, Maria takes notes about politics.",
            False,
        ),
    ],
)
def test_offline_merges_re_observations_and_keeps_distinct_moments_apart(first, second, merged) -> None:
    entries = [
        {"id": "a", "content": first, "category": "people/melanie", "tags": []},
        {"id": "b", "content": second, "category": "people/melanie", "tags": []},
    ]
    result = _call("memory_consolidation", {"entries": entries, "clusters": [["a", "b"]]})
    assert bool(result.response.to_save) is merged
    if merged:
        assert result.response.to_save[0].source_ids == ["a", "b"]


def test_an_offline_merge_says_a_restated_sentence_once() -> None:
    entries = [
        {"id": "a", "content": "The user prefers dark mode in VS Code.", "category": "prefs", "tags": []},
        {"id": "b", "content": "User prefers dark mode in VS Code.", "category": "prefs", "tags": []},
        {"id": "c", "content": "User prefers dark mode in VS Code! It is easier on the eyes.", "category": "prefs"},
    ]
    [save] = _call("memory_consolidation", {"entries": entries, "clusters": [["a", "b", "c"]]}).response.to_save
    assert save.source_ids == ["a", "b", "c"]
    assert save.content == "The user prefers dark mode in VS Code.\nIt is easier on the eyes."


@pytest.mark.parametrize(
    ("category", "first", "second"),
    [
        ("people/dave", "Dave opened his own car maintenance shop.", "Dave works at a car maintenance shop."),
        ("people/dave", "Dave works at a car maintenance shop.", "Dave quit working at a car maintenance shop."),
        (
            "episodes/meetings",
            "The user met Ingrid Solberg in Bangalore to discuss the quarterly planning.",
            "The user met Ingrid Solberg in Bangalore to discuss the vendor call.",
        ),
        (
            "episodes/meetings",
            "The user met Ingrid Solberg in Bangalore.",
            "The user met Oscar Lindqvist in Bangalore.",
        ),
        ("people/dave", "Dave opened his own car shop on 2026-03-02.", "Dave opened his own car shop on 2026-05-14."),
        ("people/dave", "Dave started a pottery course.", "Dave attends a pottery course."),  # a change, a state
        ("people/gina", "Gina opened her own dance studio.", "Gina closed her own dance studio."),  # two changes
        ("people/gina", "Gina lost her job at the bakery.", "Gina quit her job at the bakery."),
        (
            "people/john",  # sharing a photo is an event: its date is no frame date
            "On 27 December 2023, John shares a photo of a tranquil forest near his hometown.",
            "On 7 February 2024, John shares a photo of a tranquil forest near his hometown.",
        ),
    ],
)
def test_offline_never_merges_different_events(category, first, second) -> None:
    entries = [
        {"id": "a", "content": first, "category": category, "tags": []},
        {"id": "b", "content": second, "category": category, "tags": []},
    ]
    assert _call("memory_consolidation", {"entries": entries, "clusters": [["a", "b"]]}).response.to_save == []


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Dave started a pottery course.", "Dave began a pottery course."),  # one change, two words for it
        ("Melanie is going swimming with the kids.", "Melanie is going swimming with the children."),
        # A verb of change told with words outside its class, in its place and form: one change.
        ("John started a weekend yoga class with a colleague.", "John took up a weekend yoga class with a colleague."),
        (
            "Maria joined a nearby church to feel closer to a community.",
            "Maria signed up for a nearby church to feel closer to a community.",
        ),
        (
            "Andrew found an awesome cafe with amazing pastries.",  # "found": the past of find, not of found
            "On 13 October 2023, Andrew mentioned again that Andrew discovered an awesome cafe with amazing pastries.",
        ),
        ("Dave has a close bond with his sister.", "Dave has a tight bond with his sister."),
        (
            "John recently left his IT job because he wanted something that made a difference.",
            "Because he wanted something that made a difference, John recently walked away from his IT job.",
        ),
        # One shared word (the name) does not make a framing sentence look like the fact.
        (
            "John has recently graduated.",
            "John has lately graduated. John brought this up again while talking with Maria.",
        ),
    ],
)
def test_offline_merges_a_fact_told_with_other_words_outside_episodes(first, second) -> None:
    entries = [
        {"id": "a", "content": first, "category": "people/dave", "tags": []},
        {"id": "b", "content": second, "category": "people/dave", "tags": []},
    ]
    [save] = _call("memory_consolidation", {"entries": entries, "clusters": [["a", "b"]]}).response.to_save
    assert save.source_ids == ["a", "b"]


def test_the_demo_first_cycle_merges_only_rewordings_and_says_each_once(tmp_path) -> None:
    from datetime import timedelta

    from dream_assets.demo import build_demo_profile
    from dream_assets.passes.context import PassContext
    from dream_assets.passes.memory_consolidation import run_memory_consolidation
    from dream_assets.profile import AgentProfile
    from dream_assets.store import open_store
    from dream_assets.text.restated import drop_restated
    from dream_assets_tests.conftest import NOW

    profile = AgentProfile(tmp_path / "demo").ensure()
    options = dream_options(ConsolidationMinInterval=timedelta(0), LlmBackend="offline")
    build_demo_profile(profile, NOW, options=options, with_logs=False)
    report = run_memory_consolidation(PassContext(profile, options, NOW, cycle_id="demo-1"))
    assert report.status == "completed" and report.counts["merged"] >= 3
    store = open_store(profile, options)
    merged = [e for e in store.memories.list_live() if "mergedFrom" in e.metadata and "mergedAt" in e.metadata]
    by_text = {e.content: e for e in merged}
    assert "The user prefers dark mode in VS Code." in by_text
    for e in merged:
        sentences = [s for line in split_sentences(e.content) for s in line]
        assert len(drop_restated(sentences, e.category)) == len(sentences), e.content
        assert not e.category.startswith("episodes/"), e.content  # each meeting or trip is its own moment
    store.close()


def test_offline_never_merges_an_entry_twice_or_invents_ids() -> None:
    entries = [{"id": i, "content": f"Fact {i}.", "category": "general", "tags": []} for i in "abc"]
    result = _call("memory_consolidation", {"entries": entries, "clusters": [["a", "b"], ["b", "c"], ["c", "zz"]]})
    assert [s.source_ids for s in result.response.to_save] == [["a", "b"]]


def test_offline_merge_repair_restores_the_sentences_with_the_dropped_specifics() -> None:
    inputs = {
        "merged": "The team meets weekly.",
        "sources": [
            {"id": "a", "content": "The team meets weekly. Standup is with May in Room 4B."},
            {"id": "b", "content": "Budget review on 2026-08-19. Nothing else."},
        ],
        "missing": ["May", "2026-08-19", "Narnia"],
    }
    result = _call("merge_repair", inputs)
    assert result.response.content == (
        "The team meets weekly.\nStandup is with May in Room 4B. Budget review on 2026-08-19."
    )
    assert "Narnia" not in result.response.content  # never invented


def test_offline_wisp_analysis_quotes_only_the_data() -> None:
    inputs = {
        "failure_patterns": [
            {
                "description": "fetch calendar",
                "skill_name": "mcp/calendar",
                "count": 4,
                "failed_steps": ["fetch"],
                "errors": ["invalid date 'tomorrow'", "timeout"],
            },
            {"description": "digest", "skill_name": None, "count": 3, "failed_steps": [], "errors": []},
        ],
        "success_patterns": [{"description": "weather", "runs": 9}],
    }
    response = _call("wisp_failure_analysis", inputs).response
    assert [(p.description, p.classification, p.affected_steps) for p in response.failure_patterns] == [
        ("fetch calendar", "unclassified (offline)", ["fetch"]),
        ("digest", "unclassified (offline)", []),
    ]
    [note] = response.skill_annotations
    assert note.skill_name == "mcp/calendar"
    assert note.annotation == (
        "Known failure (4× in the review window) in wisp \"fetch calendar\": step fetch — invalid date 'tomorrow'"
    )
    assert response.promotion_notes == {}


@pytest.mark.parametrize(
    "pass_name",
    [
        "skill_gap_detection",
        "skill_consolidation",
        "skill_optimization",
        "preference_inference",
        "tier_routing_review",
    ],
)
def test_judgement_passes_get_an_empty_answer_and_a_note(pass_name: str) -> None:
    result = _call(pass_name, {"sessions": {"s1": []}, "tiers": [{"tier": "small"}]})
    assert result.ok and result.note == JUDGEMENT_NOTE
    dumped = result.response.model_dump()
    assert all(v in ([], {}) for v in dumped.values())


# --- the no-lost-sentence guarantee -------------------------------------------------------------------
_word = st.text(alphabet=st.characters(categories=("L", "N"), max_codepoint=0x2FF), min_size=1, max_size=8)
_sentence = st.builds(
    lambda words, end: " ".join(words) + end,
    st.lists(_word, min_size=1, max_size=6),
    st.sampled_from(["", ".", "!", "?", "...", ";"]),
)
_text = st.builds(
    lambda lines: "\n".join(" ".join(line) for line in lines),
    st.lists(st.lists(_sentence, min_size=0, max_size=4), min_size=1, max_size=4),
)
_messy_text = st.one_of(_text, st.text(max_size=200))


@settings(max_examples=300, deadline=None)
@given(st.lists(_messy_text, min_size=2, max_size=4))
@pytest.mark.slow  # a property search over generated texts
def test_a_merge_never_drops_a_source_sentence(texts: list[str]) -> None:
    merged = merge_keeping_every_sentence(texts)
    assert sentences_of(texts) <= sentences_of([merged])

    # and, independently of how sentences are split: every word of every source is still there
    def words(t: str) -> set[str]:
        return {w.casefold().rstrip(".!?;:,…") for w in t.split()}

    assert set().union(*(words(t) for t in texts)) <= words(merged)


@settings(max_examples=100, deadline=None)
@given(st.lists(_text, min_size=2, max_size=4))
@pytest.mark.slow  # a property search over generated corpora
def test_offline_consolidation_answers_keep_every_source_sentence(texts: list[str]) -> None:
    """Every source sentence is in the merged text, or another sentence of it says it whole (a restated wording is
    said once)."""
    entries = [{"id": f"m{i}", "content": t, "category": "general", "tags": []} for i, t in enumerate(texts)]
    result = _call("memory_consolidation", {"entries": entries, "clusters": [[e["id"] for e in entries]]})
    assert result.ok
    for save in result.response.to_save:
        sources = [e["content"] for e in entries if e["id"] in save.source_ids]
        merged = [s for line in split_sentences(save.content) for s in line]
        kept_keys = sentences_of([save.content])
        for sentence in (s for text in sources for line in split_sentences(text) for s in line):
            if sentence_key(sentence) not in kept_keys:
                assert any(carries(kept, sentence) for kept in merged), (sentence, save.content)


def test_duplicate_sentences_are_kept_once() -> None:
    merged = merge_keeping_every_sentence(["Tea at 5. Coffee never.", "tea at 5!  Biscuits too."])
    assert merged == "Tea at 5. Coffee never.\nBiscuits too."


def test_offline_consolidation_leaves_distinct_moments_apart():
    from dream_assets.llm.offline import OfflineBackend

    entries = [
        {
            "id": "a",
            "content": "Incident retro for the checkout outage.",
            "category": "episodes",
            "tags": [],
            "subject": {"subjectTime": "2026-02-03"},
        },
        {
            "id": "b",
            "content": "Incident retro for the checkout outage.",
            "category": "episodes",
            "tags": [],
            "subject": {"subjectTime": "2026-09-14"},
        },
        {"id": "c", "content": "The user likes tea.", "category": "prefs", "tags": [], "subject": None},
        {"id": "d", "content": "The user likes tea!", "category": "prefs", "tags": [], "subject": None},
    ]
    answer, _ = OfflineBackend().answer(
        model_call("memory_consolidation"), {"entries": entries, "clusters": [["a", "b"], ["c", "d"]]}
    )
    assert [s["sourceIds"] for s in answer["toSave"]] == [["c", "d"]]
