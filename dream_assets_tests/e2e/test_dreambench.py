"""DreamBench (benchmarks/dreambench): its scoring on small hand-made cases — a loss is counted, a fact said in other
words is not a loss, a correction answered stale first is counted, distinct events merged are counted — and each
adapter run through a tiny year, the model-based ones against the local scripted endpoint."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dream_assets_tests.openai_server import NOTHING_TO_CHANGE, OpenAITestServer, Reply, reply

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from dreambench.adapters import Kept, Unavailable, create  # noqa: E402
from dreambench.runner import run  # noqa: E402
from dreambench.scenario import Correction, Question, Save, Scenario  # noqa: E402
from dreambench.scoring import (  # noqa: E402
    distinct_collapsed,
    distinct_merged,
    dup_one_live,
    fact_holds,
    loss,
    reversible,
    stale_first,
)
from dreambench.textmatch import Entry, EntryIndex, Fact  # noqa: E402

DATA = Path(os.environ.get("DREAM_EVAL_DATA") or ROOT.parent / "shared" / "eval-data")
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def index(*kept: Kept) -> EntryIndex:
    return EntryIndex(Entry(k.text, k.live) for k in kept)


# ---------------------------------------------------------------------------------------------- scoring
def test_a_fact_whose_date_and_place_are_dropped_is_a_loss_of_each_specific():
    facts = {"trip": Fact("Caroline moved to Lisbon on 5 May 2023.")}
    spec_lost, facts_lost, spec_live, facts_live, lost = loss(facts, index(Kept("Caroline moved abroad.")))
    assert (spec_lost, facts_lost) == (4, 1)  # Lisbon, 5, May, 2023
    assert (spec_live, facts_live) == (4, 1) and lost == ["trip: Caroline moved to Lisbon on 5 May 2023."]


def test_a_fact_said_in_other_words_with_its_specifics_is_not_a_loss():
    facts = {"trip": Fact("Caroline moved to Lisbon on 5 May 2023.")}
    kept = index(Kept("On 5 May 2023, Caroline relocated to Lisbon, she said again."))
    assert loss(facts, kept)[:4] == (0, 0, 0, 0)
    assert fact_holds("Melanie's salary is 15700 a month.", "Melanie earns 15,700 a month (salary).")
    assert fact_holds("Martin Mark was born on 1996-08-02.", "Martin Mark: born 2 August 1996.")


def test_a_value_an_entry_denies_is_not_a_value_it_holds():
    stale = "Donna Gonzalez has 12000 in savings."
    assert not fact_holds(stale, "Correction from Donna Gonzalez: Donna Gonzalez has 15000 in savings, not 12000.")
    assert fact_holds("Donna Gonzalez has 15000 in savings.", "Donna Gonzalez has 15000 in savings, not 12000.")
    assert fact_holds(stale, "Donna Gonzalez has 12000 in savings. Correction: she has 15000, not 12000.")
    # A fact that denies a value itself is held by an entry that denies it too, not by one that states it.
    assert fact_holds("Gina's new studio is not Lisbon Dance.", "Gina says her new studio is not Lisbon Dance.")
    assert not fact_holds("Gina's new studio is not Lisbon Dance.", "Gina's new studio is Lisbon Dance.")


def test_a_fact_kept_only_in_a_restorable_entry_is_not_lost_but_missing_from_live_memory():
    facts = {"trip": Fact("Caroline moved to Lisbon on 5 May 2023.")}
    kept = index(Kept("Caroline moved to Lisbon on 5 May 2023.", live=False), Kept("Caroline moved abroad."))
    spec_lost, facts_lost, spec_live, facts_live, _ = loss(facts, kept)
    assert (spec_lost, facts_lost) == (0, 0)
    assert (spec_live, facts_live) == (4, 1)


def test_a_correction_answered_stale_first_is_counted():
    old, new = "Martin Mark lives in Columbus.", "Martin Mark has moved to Seattle. He lives in Seattle now."
    texts = {"old": old, "new": new}
    correction = [Correction("Where does Martin Mark live?", "old", "new", T0)]
    answers = {"stale": [old, new], "current": [new, old], "missed": ["Martin Mark likes Labradors."]}
    counted = {k: stale_first(correction, texts, lambda q, k, a=a: a[:k], T0)[:3] for k, a in answers.items()}
    assert counted == {"stale": (1, 1, 0), "current": (0, 1, 0), "missed": (0, 1, 1)}
    # a correction not yet saved is not asked
    assert stale_first(correction, texts, lambda q, k: [old], T0 - timedelta(days=1))[:2] == (0, 0)


def test_distinct_events_held_by_one_live_entry_are_a_wrong_merge():
    a, b = "On 5 May 2023, Caroline ran a charity race.", "On 20 June 2023, Caroline ran a charity race."
    facts = {"a": Fact(a), "b": Fact(b)}
    merged = index(Kept("On 5 May 2023 and on 20 June 2023, Caroline ran a charity race."))
    assert distinct_merged([["a", "b"]], facts, merged)[:2] == (1, 1)
    assert distinct_merged([["a", "b"]], facts, index(Kept(a), Kept(b)))[:2] == (0, 1)
    # the merged entry archived and both events kept apart: no wrong merge
    apart = index(Kept(merged.entries[0].text, live=False), Kept(a), Kept(b))
    assert distinct_merged([["a", "b"]], facts, apart)[:2] == (0, 1)
    # one event dropped by the merge is a loss, not a merge: the pair collapsed to one event
    assert distinct_merged([["a", "b"]], facts, index(Kept(a)))[:2] == (0, 1)
    assert distinct_collapsed([["a", "b"]], facts, index(Kept(a)))[:2] == (1, 1)
    # archived and restorable is still one event fewer in the live memory; both gone is a loss, not a collapse
    assert distinct_collapsed([["a", "b"]], facts, index(Kept(a), Kept(b, live=False)))[:2] == (1, 1)
    assert distinct_collapsed([["a", "b"]], facts, index(Kept("Caroline likes tea.")))[:2] == (0, 1)
    for kept in (merged, index(Kept(a), Kept(b)), apart):
        assert distinct_collapsed([["a", "b"]], facts, kept)[:2] == (0, 1)


def test_a_duplicate_group_counts_once_its_members_share_one_live_entry():
    first, again = (
        "Melanie bought a red bike in Denver.",
        "Melanie mentioned again that she purchased a red bike in Denver.",
    )
    facts = {"f": Fact(first), "r": Fact(again)}
    assert dup_one_live([["f", "r"]], facts, index(Kept(first), Kept(again))) == (0, 1)
    merged = index(Kept("Melanie bought (purchased) a red bike in Denver, she mentioned again."))
    assert dup_one_live([["f", "r"]], facts, merged) == (1, 1)


def test_a_duplicate_group_with_a_copy_left_over_is_not_one_live_but_another_facts_entry_is_no_copy():
    first, again, other = (
        "Jon finds Gina's success inspiring and her determination awesome.",
        "Jon said again that Jon considers Gina's success inspiring and her determination awesome.",
        "Gina feels inspired by Jon's determination and success, and his words of encouragement mean a lot to her.",
    )
    facts = {"f": Fact(first), "r": Fact(again), "g": Fact(other)}
    merged = Kept(f"{first} {again}")
    assert fact_holds(first, other)  # by its words, Gina's entry holds Jon's fact: it is still her fact's entry
    assert dup_one_live([["f", "r"]], facts, index(merged, Kept(other))) == (1, 1)
    assert dup_one_live([["f", "r"]], facts, index(merged, Kept(other), Kept(first))) == (0, 1)  # a copy is left
    assert dup_one_live([["f", "r"]], facts, index(merged, Kept(first, live=False))) == (1, 1)  # restorable only
    # Gina's entry carrying Jon's fact whole beside hers is Gina's home and a copy of Jon's fact all the same
    assert dup_one_live([["f", "r"]], facts, index(merged, Kept(f"{other} {first}"))) == (0, 1)


def test_changes_are_reversible_only_while_their_text_can_be_restored():
    before = [Kept("A one."), Kept("A one again.")]
    merged = Kept("A one (again).")
    assert reversible(before, [merged, Kept("A one.", live=False), Kept("A one again.", live=False)]) == (2, 2)
    assert reversible(before, [merged]) == (0, 2)
    assert reversible(before, before) == (0, 0)


# ---------------------------------------------------------------------------------------------- adapters
def tiny_year() -> Scenario:
    """Two saves of one fact in other words, two distinct races, a move, noise; a consolidation after each week and
    one idle week."""
    facts = {
        "bike": "Melanie bought a red bike in Denver for 450 dollars.",
        "bike-re0": "On 3 March 2025, Melanie mentioned again that she bought a red bike in Denver for 450 dollars.",
        "race0": "On 5 May 2023, Caroline ran a charity race in Austin.",
        "race1": "On 20 June 2023, Caroline ran a charity race in Austin.",
        "home": "Martin Mark lives in Columbus.",
        "home-new": "Martin Mark has moved to Seattle. He lives in Seattle now.",
    }
    days = {"bike": 0, "race0": 1, "home": 1, "bike-re0": 2, "race1": 8, "home-new": 9}
    saves = [Save(T0 + timedelta(days=d, seconds=i), facts[k], k) for i, (k, d) in enumerate(days.items())]
    saves.append(Save(T0 + timedelta(days=3), "I love italian food and garlic bread.", "noise-0"))
    saves.sort(key=lambda s: s.at)
    return Scenario(
        saves=saves,
        consolidations=[T0 + timedelta(days=d, hours=18) for d in (6, 13, 20)],
        facts=facts,
        kinds={k: "stale" if k == "home" else "observation" for k in facts},
        dup_groups=[["bike", "bike-re0"]],
        lookalike_groups=[["race0", "race1"]],
        questions=[Question("What did Melanie buy in Denver?", [["bike", "bike-re0"]])],
        corrections=[Correction("Where does Martin Mark live?", "home", "home-new", T0 + timedelta(days=9))],
    )


def test_a_save_the_adapter_fails_is_a_failure_and_a_lost_fact_and_the_year_goes_on(tmp_path):
    adapter = create("append_only", root=tmp_path)
    save = adapter.save

    def refuse_races(text, when):
        if "race" in text:
            raise RuntimeError("request (8210 tokens) exceeds the available context size (8192 tokens)")
        save(text, when)

    adapter.save = refuse_races
    result = run(tiny_year(), adapter)
    final = {k: v for k, (v, _n) in result.final.items()}
    assert len(result.cycles) == 3 and final["failures"] == 2
    assert all("exceeds the available context size" in f for f in result.failures)
    assert final["facts_lost"] == 2  # the two races the agent saved are in no entry


def test_append_only_keeps_every_save_and_finds_it_with_bm25(tmp_path):
    result = run(tiny_year(), create("append_only", root=tmp_path))
    final = {k: v for k, (v, _n) in result.final.items()}
    assert final["facts_lost"] == 0 and final["specifics_lost"] == 0
    assert final["dup_groups_one_live"] == 0.0  # both sayings stay apart
    assert final["live_entries"] == 7 and final["recall_at_10"] == 1.0
    # nothing was ever taken out: no share to give
    assert (
        final["tokens_per_idle_cycle"] == 0 and math.isnan(final["reversible"]) and result.final["reversible"][1] == 0
    )
    assert [c["idle"] for c in result.cycles] == [False, False, True]


def test_dream_assets_offline_runs_its_cycles_and_loses_nothing(tmp_path):
    adapter = create("dream_assets", root=tmp_path, env={})
    try:
        result = run(tiny_year(), adapter)
    finally:
        adapter.close()
    final = {k: v for k, (v, _n) in result.final.items()}
    assert result.backend.startswith("offline backend") and not result.failures
    assert final["facts_lost"] == 0 and final["specifics_lost"] == 0 and final["distinct_merged"] == 0
    assert final["tokens_total"] == 0 and final["reversible"] == 1.0
    assert final["recall_at_10"] == 1.0


def test_dream_assets_sizes_the_prompts_a_model_would_be_sent_without_one(tmp_path):
    adapter = create("dream_assets", root=tmp_path, env={"DREAM__ConsolidationCallShape": "cluster"})
    try:
        result = run(tiny_year(), adapter)
    finally:
        adapter.close()
    calls = {call for call, _ in adapter.prompts}
    # The bike's two sayings are one cluster to check; Columbus and Seattle a pair the sweep shows.
    assert {"cluster_check", "contradiction_sweep"} <= calls
    sized = [c["prompt_tokens_estimate"] for c in result.cycles]
    assert sum(sized) == adapter.prompt_tokens_estimate() > 0
    assert sized[-1] == 0  # the idle week asks nothing


def test_dream_assets_through_an_endpoint_counts_its_model_tokens(tmp_path):
    with OpenAITestServer(default=Reply(decide=lambda body: reply(NOTHING_TO_CHANGE))) as server:
        env = {
            "DREAM__LlmBaseUrl": server.base_url,
            "DREAM__LlmModel": "test-model",
            "DREAM__LlmMaxRetries": "0",
        }
        adapter = create("dream_assets", root=tmp_path, env=env)
        try:
            result = run(tiny_year(), adapter)
            kept = adapter.dump()
        finally:
            adapter.close()
        calls = [r for r in server.requests if r.path.endswith("/chat/completions")]
    assert result.backend.startswith(f"openai endpoint {server.base_url}")
    assert calls and adapter.tokens_used() == 18 * len(calls)  # the test server reports 11 + 7 tokens a call
    assert result.final["facts_lost"][0] == 0
    assert {k.text for k in kept if k.live} >= {"Martin Mark has moved to Seattle. He lives in Seattle now."}


def _tidy(drop: str):
    """A scripted model that merges the file's lines about the bike into one and drops every line containing
    ``drop``: the rewrite a careless dream makes."""

    def decide(body):
        memory = body["messages"][-1]["content"]
        lines = [ln for ln in memory.splitlines() if ln.strip() and drop not in ln]
        bikes = [ln for ln in lines if "bike" in ln]
        rest = [ln for ln in lines if "bike" not in ln]
        tidy = ["- Melanie bought a red bike in Denver for 450 dollars (said again 3 March 2025)."] if bikes else []
        return reply("```markdown\n" + "\n".join(tidy + rest) + "\n```")

    return Reply(decide=decide)


def test_llm_rewrite_replaces_the_file_with_the_model_answer_and_what_it_drops_is_lost(tmp_path):
    with OpenAITestServer(default=_tidy("20 June 2023")) as server:
        env = {"DREAM__LlmBaseUrl": server.base_url, "DREAM__LlmModel": "test-model"}
        adapter = create("llm_rewrite", root=tmp_path, env=env)
        result = run(tiny_year(), adapter)
        sent = [r.body["messages"][-1]["content"] for r in server.requests]
    final = {k: v for k, (v, _n) in result.final.items()}
    assert len(sent) == 3 and "Seattle" in sent[2]  # the idle week sends the whole file again
    # the second race: its day and month are gone (its year and the rest live on in the first race's line)
    assert final["facts_lost"] == 1 and final["specifics_lost"] == 2
    assert final["dup_groups_one_live"] == 1.0  # the two sayings of the bike became one line
    assert final["reversible"] == 0.0  # nothing it took out can be restored
    assert final["tokens_per_idle_cycle"] == 18 and adapter.tokens_used() == 54
    assert (tmp_path / "llm_rewrite" / "MEMORY.md").read_text().startswith("- Melanie bought a red bike")


def test_llm_rewrite_never_writes_an_answer_cut_off_at_the_token_limit(tmp_path):
    cut = Reply(decide=lambda body: reply("- Melanie bought a red", finish_reason="length"))
    with OpenAITestServer(default=cut) as server:
        env = {"DREAM__LlmBaseUrl": server.base_url, "DREAM__LlmModel": "test-model"}
        result = run(tiny_year(), create("llm_rewrite", root=tmp_path, env=env))
    assert result.final["failures"][0] == 3 and "token limit" in result.failures[0]
    assert result.final["facts_lost"][0] == 0 and result.final["live_entries"][0] == 7


def test_an_adapter_that_cannot_run_here_says_why():
    with pytest.raises(Unavailable, match="DREAM__LlmBaseUrl"):
        create("llm_rewrite", root=Path("/nonexistent"), env={})
    with pytest.raises(Unavailable, match="mem0ai|DREAM__LlmBaseUrl"):
        create("mem0", root=Path("/nonexistent"), env={})


@pytest.mark.skipif(not (DATA / "locomo" / "locomo10.json").exists(), reason=f"{DATA} is not available")
def test_the_command_reports_an_unavailable_adapter_as_unavailable_not_as_a_result():
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAM__")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "dreambench"), "--quick", "--adapters", "llm_rewrite,mem0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "DREAM_EVAL_DATA": str(DATA), "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = {m["name"]: m for m in map(json.loads, proc.stdout.splitlines())}
    assert lines["dreambench.llm_rewrite.available"]["value"] == 0
    assert lines["dreambench.mem0.available"]["value"] == 0
    assert not [
        n for n in lines if n.startswith(("dreambench.llm_rewrite.", "dreambench.mem0.")) and "available" not in n
    ]
    assert "llm_rewrite unavailable: llm_rewrite needs a model: set DREAM__LlmBaseUrl" in proc.stderr
    assert (
        lines["dreambench.scenario.questions"]["value"] > 100 and lines["dreambench.scenario.corrections"]["value"] > 5
    )


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [("--lookalike-share", "2", "lookalike_share 2.0: a share"), ("--save-share", "0", "save_share 0.0: a share")],
)
def test_a_size_out_of_range_is_a_clear_error_not_a_traceback(option, value, said):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "dreambench"),
            "--quick",
            "offline",
            "--adapters",
            "append_only",
            option,
            value,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DREAM_EVAL_DATA": str(DATA), "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    assert proc.returncode == 2 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stdout == ""


# ---------------------------------------------------------------------------------------------- the command
def test_quick_with_a_model_endpoint_is_the_year_a_small_model_finishes():
    from dreambench.cli import FULL, QUICK, QUICK_MODEL, year_size

    endpoint = {"DREAM__LlmBaseUrl": "http://127.0.0.1:9/v1"}
    assert year_size("auto", ["dream_assets", "append_only"], endpoint) is QUICK_MODEL
    assert year_size("auto", ["llm_rewrite"], endpoint) is QUICK_MODEL
    assert year_size("auto", ["append_only"], endpoint) is QUICK  # nothing here calls the model
    assert year_size("auto", ["dream_assets", "append_only"], {}) is QUICK  # the offline quick, as published
    assert year_size("offline", ["dream_assets"], endpoint) is QUICK
    assert year_size("model", ["dream_assets"], {}) is QUICK_MODEL
    assert year_size(None, ["dream_assets"], endpoint) is FULL


@pytest.mark.skipif(not (DATA / "locomo" / "locomo10.json").exists(), reason=f"{DATA} is not available")
def test_the_model_quick_year_has_every_kind_of_fact_and_an_idle_cycle_in_three_consolidations():
    from dreambench.cli import QUICK_MODEL, memory_file_tokens
    from dreambench.scenario import build

    size = QUICK_MODEL
    year = build(
        DATA,
        conversations=[size["conversations"]],
        profiles=size["profiles"],
        every=size["every"],
        noise_per_day=size["noise"],
        per_speaker=size["per_speaker"],
        save_share=size["save_share"],
    )
    summary = year.summary()
    assert len(year.consolidations) == 3
    assert max(s.at for s in year.saves) < year.consolidations[1]  # the last consolidation is idle
    # enough look-alike events to tell a consolidation that merges them from one that keeps them apart
    assert summary["corrections"] >= 3 and summary["dup_groups"] >= 5 and summary["lookalike_groups"] >= 5
    assert summary["questions"] >= 30 and summary["noise"] > 0
    # Every question is about facts the year saves (a slice of the conversation leaves the others out).
    saved = {s.key for s in year.saves}
    assert all(key in saved for q in year.questions for keys in q.evidence for key in keys)
    # What a whole-file rewrite is sent stays a few thousand tokens.
    assert max(memory_file_tokens(year)) < 3000


@pytest.mark.skipif(not (DATA / "locomo" / "locomo10.json").exists(), reason=f"{DATA} is not available")
def test_the_share_of_look_alike_events_moves_nothing_else_in_the_year():
    from dreambench.scenario import build

    def year(share: float):
        return build(DATA, conversations=["conv-26"], profiles=1, every=120, per_speaker=1, lookalike_share=share)

    few, many = year(0.1), year(0.4)
    assert len(many.lookalike_groups) > len(few.lookalike_groups)
    assert many.dup_groups == few.dup_groups and many.corrections == few.corrections
    assert [q.text for q in many.questions] == [q.text for q in few.questions]
    with pytest.raises(ValueError, match="lookalike_share"):
        year(1.5)


def test_llm_rewrite_lets_the_answer_be_as_long_as_the_file_within_the_window(tmp_path):
    """The per-call reserve of the project's own passes would cut a whole-file rewrite off; the peer sets no such
    limit, so its answer may take what the window leaves after the prompt."""
    from dreambench.adapters.llm_rewrite import BYTES_PER_TOKEN, answer_limit

    with OpenAITestServer(default=_tidy("no such line")) as server:
        env = {
            "DREAM__LlmBaseUrl": server.base_url,
            "DREAM__LlmModel": "test-model",
            "DREAM__LlmMaxTokens": "16",
            "DREAM__LlmContextTokens": "8192",
        }
        run(tiny_year(), create("llm_rewrite", root=tmp_path, env=env))
        sent = [(r.body["messages"][-1]["content"], r.body["max_tokens"]) for r in server.requests]
    for memory, limit in sent:
        assert limit >= len(memory.encode()) // BYTES_PER_TOKEN > 16
    assert answer_limit("x" * 60_000, 1024, 8192) == 1024  # past the window: the reserve (the endpoint refuses)
    assert answer_limit("x" * 9_000, 1024, 8192) <= 8192 - 3000  # within what the prompt leaves
    assert answer_limit("x" * 9_000, 1024, 0) == 2 * 3001 + 256  # no window known: twice the file


def _extract_what_was_said(body):
    """A scripted mem0 extractor: the new message, as the one memory mem0's ADD-only extraction step returns."""
    prompt = body["messages"][-1]["content"]
    said = prompt.split("## New Messages", 1)[1].split("##", 1)[0].strip()
    said = said.removeprefix("user:").strip()
    return reply(json.dumps({"memory": [{"id": "0", "text": said, "attributed_to": "user"}]}))


def _mem0_env(server: OpenAITestServer, embedding_model: str) -> dict[str, str]:
    """The mem0 adapter's settings against the scripted endpoint, which answers embeddings as well."""
    from dream_assets_tests.openai_server import EMBEDDING_DIM

    return {
        "DREAM__LlmBaseUrl": server.base_url,
        "DREAM__LlmModel": "test-model",
        "DREAM__EmbeddingModel": embedding_model,
        "DREAM__EmbeddingDimensions": str(EMBEDDING_DIM),
        "OPENAI_API_KEY": "test",
    }


def test_mem0_extracts_at_each_save_against_a_scripted_endpoint_and_is_scored_like_any_adapter(tmp_path):
    with OpenAITestServer(default=Reply(decide=_extract_what_was_said)) as server:
        adapter = create("mem0", root=tmp_path, env=_mem0_env(server, "test-embedding"))
        result = run(tiny_year(), adapter)
        chats = [r for r in server.requests if r.path.endswith("/chat/completions")]
    final = {k: v for k, (v, _n) in result.final.items()}
    # one extraction call a save, none at the consolidations (mem0 decides at save time), every one counted
    assert len(chats) == 7 and final["tokens_per_idle_cycle"] == 0 and adapter.tokens_used() > 0
    assert "Melanie bought a red bike in Denver for 450 dollars." in chats[0].body["messages"][-1]["content"]
    assert final["facts_lost"] == 0 and final["failures"] == 0
    assert final["dup_groups_one_live"] == 0.0  # the endpoint extracted the re-observation as a memory of its own
    assert final["recall_at_10"] == 1.0
    assert (tmp_path / "mem0" / "qdrant").is_dir()  # its store lives in the run's folder


def test_mem0_gives_an_e5_model_the_prefixes_it_was_trained_with(tmp_path):
    """mem0 sends texts bare; an e5 model reads "query: " before a search and "passage: " before a stored text, as
    dream_assets sends them, so the comparison measures mem0 and not a missing prefix."""
    with OpenAITestServer(default=Reply(decide=_extract_what_was_said)) as server:
        adapter = create("mem0", root=tmp_path, env=_mem0_env(server, "multilingual-e5-small-q4"))
        adapter.save("Melanie bought a red bike in Denver for 450 dollars.", datetime(2025, 1, 6, tzinfo=UTC))
        adapter.search("What did Melanie buy?", 10)
        inputs = [
            text
            for r in server.requests
            if r.path.endswith("/embeddings")
            for text in ([r.body["input"]] if isinstance(r.body["input"], str) else r.body["input"])
        ]
    assert "query: What did Melanie buy?" in inputs
    assert "passage: Melanie bought a red bike in Denver for 450 dollars." in inputs
    assert all(t.startswith(("query: ", "passage: ")) for t in inputs)


def test_a_failed_model_call_is_a_failure_once_whether_or_not_its_pass_failed():
    """A pass can go on past a failed call (a failed merge repair leaves its merge rejected): that call is counted; a
    call whose failure failed its pass is counted once, as the pass."""
    from types import SimpleNamespace

    from dreambench.adapters.dream_assets_adapter import cycle_failures

    when = datetime(2025, 5, 6, tzinfo=UTC)
    reports = [
        SimpleNamespace(pass_name="memory_consolidation", status="ok", reason=""),
        SimpleNamespace(pass_name="contradiction_sweep", status="failed", reason="unusable answer: not JSON"),
    ]
    calls = [("merge_repair", "the JSON object is never closed"), ("contradiction_sweep", "unusable answer: not JSON")]
    assert cycle_failures(when, reports, calls) == [
        "2025-05-06 contradiction_sweep: unusable answer: not JSON",
        "2025-05-06 merge_repair call: the JSON object is never closed",
    ]


def test_dream_assets_counts_each_failed_model_call_against_an_endpoint_that_answers_garbage(tmp_path):
    with OpenAITestServer(default=Reply(decide=lambda body: reply("this is not the JSON asked for"))) as server:
        env = {"DREAM__LlmBaseUrl": server.base_url, "DREAM__LlmModel": "test-model", "DREAM__LlmMaxRetries": "0"}
        adapter = create("dream_assets", root=tmp_path, env=env)
        try:
            result = run(tiny_year(), adapter)
        finally:
            adapter.close()
    assert result.failures, "every model pass got an unusable answer"
    assert len(result.failures) == len(set(result.failures))
    assert result.final["failures"][0] == len(result.failures)
    assert result.final["facts_lost"][0] == 0  # a failed call changes nothing
