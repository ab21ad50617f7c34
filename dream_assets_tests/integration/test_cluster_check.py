"""Memory consolidation's cluster call shape (``ConsolidationCallShape``): one short call per near-duplicate cluster,
"same fact or not" and the merged text, for a small model that leaves a whole-batch prompt unanswered. Each verdict
goes through the checks a batch answer does (coverage, copy guard, review stamps); ``auto`` picks the shape from the
endpoint's window and measured speed. Scripted answers, and the real HTTP test server for the schema sent."""

from __future__ import annotations

import json
import re
from datetime import timedelta

from dream_assets.llm.client import build_model_client
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_consolidation import CLUSTER_CHECK, call_shape, run_memory_consolidation
from dream_assets.passes.memory_consolidation.offline import answer_cluster_check
from dream_assets.passes.memory_consolidation.select import CLUSTER_SET_KEY, is_reviewed
from dream_assets_tests.openai_server import OpenAITestServer, Reply, reply

from ..conftest import NOW
from .test_memory_consolidation import NO_FLOOR, Run, entry, live_ids

CLUSTER = dream_options(
    ConsolidationMinInterval=timedelta(0), ConsolidationExactFoldEnabled=False, ConsolidationCallShape="cluster"
)

SAID_AGAIN = [
    entry("g1", "Gina won first place in a regional dance competition at fifteen.", created_days=40),
    entry("g2", "Gina said again that she won first place in a regional dance competition at fifteen.", created_days=9),
]
TWO_FAIRS = [
    entry("f1", "On 3 May 2026, Jon sold bread at the Bergen market.", created_days=30),
    entry("f2", "On 9 June 2026, Jon sold bread at the Bergen market.", created_days=20),
]
STUDIO = [
    entry("j1", "Jon plans to open a dance studio.", created_days=28),
    entry("j2", "Jon plans to open a dance studio downtown.", created_days=18),
]
SINGLE = entry("s", "Ingrid Solberg runs the Oslo office of project Quartz.", created_days=25)


def verdict(decision: str, content: str = "", differences: str = "none") -> dict:
    return {"differences": differences, "decision": decision, "content": content}


def by_cluster(answers: dict[str, dict]):
    """Answers a cluster check by a word of its entries (the prompt names no ids)."""

    def decide(request):
        for word, answer in answers.items():
            if word in request.prompt:
                return answer
        raise AssertionError(f"no scripted verdict for {request.prompt!r}")

    return decide


def test_each_group_the_rules_allow_is_one_short_call_and_its_verdict_merges_or_keeps_it_apart(profile, store):
    store.memories.put_many([*SAID_AGAIN, *TWO_FAIRS, *STUDIO, SINGLE])
    run = Run(profile, store, CLUSTER)
    merged = "Gina won first place in a regional dance competition at fifteen, and said so again."
    report = run(by_cluster({"Gina": verdict("merge", merged), "studio": verdict("keep", differences="where")}))
    assert report.status == "completed", report.reason
    requests = run.requests
    assert [r.pass_name for r in requests] == ["cluster_check", "cluster_check"]  # none for the two fairs
    for r in requests:
        assert re.findall(r"^- ([A-Z]): ", r.prompt, re.MULTILINE) == ["A", "B"]  # letters, no ids, no single
        assert "Ingrid" not in r.prompt and "id=" not in r.prompt and "Bergen" not in r.prompt
    live = {e.id: e for e in store.memories.list_live()}
    assert "g1" not in live and "g2" not in live  # archived into the merge
    (new,) = [e for e in live.values() if e.content == merged]
    assert new.category == "facts" and new.reinforcement_count == 2
    assert {"f1", "f2", "j1", "j2", "s"} <= set(live)  # two fairs, a studio the model kept apart, the unsent single
    for i in ("f1", "f2", "j1", "j2"):
        assert live[i].metadata.get(CLUSTER_SET_KEY) and is_reviewed(live[i])  # settled: not asked again
    assert not is_reviewed(live["s"])
    assert report.counts["merged"] == 1 and report.counts["calls"] == 2
    assert report.counts["kept_apart_by_check"] == 1 and report.counts["kept_apart_by_rules"] == 1

    again = run(by_cluster({}), now=NOW + timedelta(hours=1))
    assert run.requests == [] and again.status == "completed", again.reason
    # A month on, the studio is past its cooldown and the single is still unreviewed (it is never sent): with nothing
    # else to ask, re-offering the studio would be a call of its own, and an idle agent makes none.
    idle = run(by_cluster({}), now=NOW + timedelta(days=30))
    assert run.requests == [] and idle.status == "completed" and idle.counts["settled_clusters"] >= 1, idle.reason
    # A third market day joins the fairs: an open cluster, but the host's rules keep its dates apart without a call,
    # so it asks nothing, and the studio is not asked on its own either.
    store.memories.put_many([entry("f3", "On 14 July 2026, Jon sold bread at the Bergen market.", created_days=-31)])
    busy = run(by_cluster({}), now=NOW + timedelta(days=31))
    assert run.requests == [] and busy.counts["kept_apart_by_rules"] >= 1, busy.reason


def test_a_merge_that_drops_a_specific_is_refused_and_both_entries_stay(profile, store):
    store.memories.put_many(SAID_AGAIN)
    run = Run(profile, store, CLUSTER.replace(MergeRepairEnabled=False))
    report = run(verdict("merge", "Gina won a dance competition."))
    assert report.counts["rejected"] == 1 and report.counts["merged"] == 0
    assert {"g1", "g2"} <= live_ids(store)


def test_a_copied_example_is_refused_and_the_pass_fails(profile, store):
    store.memories.put_many(SAID_AGAIN)
    run = Run(profile, store, CLUSTER)
    report = run(verdict("merge", "Nadia's bakery in Examplia opens at 7:00 on weekdays."))
    assert report.status == "failed" and "cop" in report.reason
    assert {"g1", "g2"} <= live_ids(store)
    assert not any("Examplia" in e.content for e in store.memories.list_live())


def test_a_blank_merge_keeps_the_cluster_open_for_the_next_cycle(profile, store):
    store.memories.put_many(SAID_AGAIN)
    run = Run(profile, store, CLUSTER)
    run(verdict("merge", "  "))
    assert {"g1", "g2"} <= live_ids(store)
    run(verdict("keep"), now=NOW + timedelta(hours=1))
    assert len(run.requests) == 1  # asked again


def test_the_batch_shape_is_unchanged(profile, store):
    store.memories.put_many([*SAID_AGAIN, SINGLE])
    run = Run(profile, store, NO_FLOOR)
    run({"toDelete": [], "toSave": []})
    assert [r.pass_name for r in run.requests] == ["memory_consolidation"]
    assert "Ingrid" in run.requests[0].prompt


def test_the_offline_answer_merges_one_fact_and_keeps_distinct_moments():
    def inputs(*entries):
        return {
            "entries": [{"id": e.id, "content": e.content, "category": e.category, "tags": []} for e in entries],
            "clusters": [[e.id for e in entries]],
        }

    same, _ = answer_cluster_check(inputs(*SAID_AGAIN))
    assert same["decision"] == "merge" and "fifteen" in same["content"]
    apart, _ = answer_cluster_check(inputs(*TWO_FAIRS))
    assert apart == {"differences": "offline backend: distinct moments", "decision": "keep", "content": ""}


def _ctx(profile, options, client):
    return PassContext(profile, options, NOW, cycle_id="c1", client_factory=lambda: client)


def test_auto_picks_the_cluster_shape_for_a_small_window_or_a_slow_endpoint(profile):
    base = {"LlmBaseUrl": "http://127.0.0.1:9/v1", "LlmModel": "m"}
    small = dream_options(**base, LlmContextTokens=8192)
    large = dream_options(**base, LlmContextTokens=32768)
    assert call_shape(_ctx(profile, small, build_model_client(small, profile)))[0] == "cluster"
    client = build_model_client(large, profile)
    assert call_shape(_ctx(profile, large, client))[0] == "batch"
    client.endpoint_profile().update(client.endpoint_key, prompt_tps=20.0, gen_tps=2.5)
    shape, why = call_shape(_ctx(profile, large, client))
    assert shape == "cluster" and "2.5 tokens a second" in why
    offline = dream_options(LlmBackend="offline")
    assert call_shape(_ctx(profile, offline, build_model_client(offline, profile)))[0] == "batch"
    forced = dream_options(**base, LlmContextTokens=8192, ConsolidationCallShape="batch")
    assert call_shape(_ctx(profile, forced, build_model_client(forced, profile)))[0] == "batch"


def test_an_endpoint_with_a_small_window_gets_the_cluster_schema_over_http(profile, store):
    store.memories.put_many([*SAID_AGAIN, *STUDIO])

    def decide(body):
        text = body["messages"][1]["content"]
        if "Gina" in text:
            return reply(
                json.dumps(
                    verdict(
                        "merge", "Gina said again that she won first place in a regional dance competition at fifteen."
                    )
                )
            )
        return reply(json.dumps(verdict("keep", differences="downtown")))

    with OpenAITestServer(default=Reply(decide=decide)) as server:
        opts = dream_options(
            LlmBaseUrl=server.base_url,
            LlmModel="test-model",
            LlmMaxRetries=0,
            LlmContextTokens=8192,
            ConsolidationMinInterval=timedelta(0),
        )
        client = build_model_client(opts, profile)
        ctx = _ctx(profile, opts, client)
        ctx._store = store
        report = run_memory_consolidation(ctx)
        bodies = [r.body for r in server.requests]
    assert report.status == "completed", report.reason
    assert len(bodies) == 2 and report.extra["call_shape"] == "cluster"
    schema = bodies[0]["response_format"]["json_schema"]
    assert schema["name"] == CLUSTER_CHECK.name and re.fullmatch(r"[A-Za-z0-9_-]+", schema["name"])
    assert schema["schema"]["properties"]["decision"]["enum"] == ["merge", "keep"]
    assert list(schema["schema"]["properties"]) == ["differences", "decision", "content"]
    assert {"j1", "j2"} <= live_ids(store) and not {"g1", "g2"} & live_ids(store)


def test_a_run_checks_clusters_until_its_allowance_is_spent_and_the_rest_wait_for_the_next(profile, store):
    people = ["Ana", "Bo", "Cyd", "Dee", "Eli", "Fay", "Gus", "Hal", "Ivy", "Jay"]
    pairs = []
    for n, who in enumerate(people):
        fact = f"{who} keeps {n + 2} beehives behind the barn at Lindholm farm."
        pairs += [
            entry(f"{who}1", fact, created_days=40),
            entry(f"{who}2", f"{who} said again that {fact}", created_days=5),
        ]
    store.memories.put_many(pairs)
    run = Run(profile, store, CLUSTER.replace(LlmMaxCallsPerPass=1))  # unbounded window: 8 checks a call

    def merge_all(request):
        first = re.search(r"^- A: (.*)$", request.prompt, re.MULTILINE)
        return verdict("merge", first.group(1))

    first = run(merge_all)
    assert len(run.requests) == 8 and first.counts["merged"] == 8 and first.counts["checks_waiting"] == 2
    second = run(merge_all, now=NOW + timedelta(hours=1))
    assert len(run.requests) == 2 and second.counts["merged"] == 2
    assert len(store.memories.list_live()) == len(people)


def test_a_group_answered_with_blank_text_is_asked_once_a_run_not_again_and_again(profile, store):
    store.memories.put_many([*SAID_AGAIN, *STUDIO])

    with OpenAITestServer(default=Reply(decide=lambda body: reply(json.dumps(verdict("merge", " "))))) as server:
        opts = dream_options(
            LlmBaseUrl=server.base_url, LlmModel="test-model", LlmMaxRetries=0, LlmContextTokens=8192
        ).replace(ConsolidationMinInterval=timedelta(0))
        for hours in (0, 1):
            client = build_model_client(opts, profile)
            ctx = PassContext(
                profile, opts, NOW + timedelta(hours=hours), cycle_id=f"c{hours}", client_factory=lambda c=client: c
            )
            ctx._store = store
            report = run_memory_consolidation(ctx)
            assert report.status == "completed", report.reason
            assert report.counts["calls"] == 2 and report.counts["skipped_blank"] == 2  # each group once
        assert len(server.requests) == 4  # and asked again by the next run
    assert {"g1", "g2", "j1", "j2"} <= live_ids(store)


def test_a_cluster_the_rules_split_is_settled_whole_once_its_group_is_answered(profile, store):
    # Two wordings of one market day and a look-alike other day: the scan joins all three, the host's rules ask about
    # the pair and keep the other day apart. Once the pair is answered (here a merge that drops specifics, refused),
    # the three are settled together: the next runs ask nothing, where the pair was asked again every run.
    store.memories.put_many(
        [
            entry("m1", "On 3 May 2026, Jon sold bread at the Bergen market.", created_days=40),
            entry("m2", "Jon said again that on 3 May 2026 he sold bread at the Bergen market.", created_days=9),
            entry("m3", "On 9 June 2026, Jon sold bread at the Bergen market.", created_days=5),
        ]
    )
    run = Run(profile, store, CLUSTER.replace(MergeRepairEnabled=False))
    first = run(verdict("merge", "Jon sold bread."))  # drops the date and the market: refused
    assert first.status == "completed", first.reason
    assert len(run.requests) == 1 and first.counts["rejected"] == 1
    assert "9 June" not in run.requests[0].prompt  # the other day is not asked about
    live = {e.id: e for e in store.memories.list_live()}
    assert {"m1", "m2", "m3"} <= set(live)
    sets = {live[i].metadata.get(CLUSTER_SET_KEY) for i in ("m1", "m2", "m3")}
    assert len(sets) == 1 and sets != {None}  # settled as one cluster
    assert all(is_reviewed(live[i]) for i in ("m1", "m2", "m3"))
    for hours in (1, 2):
        again = run(verdict("keep"), now=NOW + timedelta(hours=hours))
        assert run.requests == [] and again.status == "completed", again.reason
    # A third wording of the May day opens the cluster again: then the May entries are asked about once more.
    store.memories.put_many(
        [entry("m4", "Jon told us once more that on 3 May 2026 he sold bread at the Bergen market.", created_days=-1)]
    )
    run(verdict("keep"), now=NOW + timedelta(days=1))
    assert len(run.requests) == 1 and "3 May" in run.requests[0].prompt


def test_a_split_cluster_whose_group_got_a_blank_answer_stays_open_for_the_next_cycle(profile, store):
    # A blank or copied answer is no answer: the pair is asked again next cycle, so the cluster is not settled whole.
    store.memories.put_many(
        [
            entry("m1", "On 3 May 2026, Jon sold bread at the Bergen market.", created_days=40),
            entry("m2", "Jon said again that on 3 May 2026 he sold bread at the Bergen market.", created_days=9),
            entry("m3", "On 9 June 2026, Jon sold bread at the Bergen market.", created_days=5),
        ]
    )
    run = Run(profile, store, CLUSTER)
    first = run(verdict("merge", "  "))
    assert len(run.requests) == 1 and first.counts["skipped_blank"] == 1, first.reason
    assert not first.counts.get("settled_whole")
    live = {e.id: e for e in store.memories.list_live()}
    assert not any(live[i].metadata.get(CLUSTER_SET_KEY) for i in ("m1", "m2", "m3"))
    run(verdict("keep"), now=NOW + timedelta(hours=1))
    assert len(run.requests) == 1 and "3 May" in run.requests[0].prompt  # asked again


def test_two_split_clusters_of_one_run_are_both_settled_whole(profile, store):
    store.memories.put_many(
        [
            entry("m1", "On 3 May 2026, Jon sold bread at the Bergen market.", created_days=40),
            entry("m2", "Jon said again that on 3 May 2026 he sold bread at the Bergen market.", created_days=9),
            entry("m3", "On 9 June 2026, Jon sold bread at the Bergen market.", created_days=5),
            entry("k1", "On 4 May 2026, Ola sold fish at the Tromso harbour.", created_days=38),
            entry("k2", "Ola said again that on 4 May 2026 he sold fish at the Tromso harbour.", created_days=8),
            entry("k3", "On 11 June 2026, Ola sold fish at the Tromso harbour.", created_days=4),
        ]
    )
    run = Run(profile, store, CLUSTER)
    first = run(by_cluster({"Jon": verdict("keep", differences="when"), "Ola": verdict("keep", differences="when")}))
    assert len(run.requests) == 2 and first.counts["settled_whole"] == 2, first.reason
    live = {e.id: e for e in store.memories.list_live()}
    for ids in (("m1", "m2", "m3"), ("k1", "k2", "k3")):
        sets = {live[i].metadata.get(CLUSTER_SET_KEY) for i in ids}
        assert len(sets) == 1 and sets != {None}
    again = run(by_cluster({}), now=NOW + timedelta(hours=1))
    assert run.requests == [] and again.status == "completed", again.reason
