"""A synthetic corpus for first reviews at any size, and a model that merges what each consolidation prompt shows:
near-duplicate pairs (the second copy adds one word) among distinct single entries, so the right merges are known
(every pair into its longer copy) whatever the batching. Shared by the context-budget tests and benchmarks/models.py."""

from __future__ import annotations

import json
import random
import re
from datetime import datetime, timedelta

from dream_assets.llm.client import build_model_client
from dream_assets.model import MemoryEntry
from dream_assets.passes.context import PassContext
from dream_assets.passes.memory_consolidation import run_memory_consolidation
from dream_assets.store import open_store
from dream_assets_tests.openai_server import OpenAITestServer, Reply, reply

CLUSTER_LINE = re.compile(r"^- cluster \d+: (.+?)(?: \(|$)", re.MULTILINE)
SYLLABLES = "ka lo mi nu re sa ti vo be da fe gi ho ju ly po qua ri ste wu xe zo".split()


def word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(3))


def entry(ident: str, content: str, stamp) -> MemoryEntry:
    return MemoryEntry(
        id=ident,
        content=content,
        category="facts",
        tags=(),
        importance=0.6,
        created_at=stamp,
        updated_at=stamp,
        last_seen_at=stamp,
        reinforcement_count=1,
        metadata={},
    )


def corpus(n: int, pairs: int, now: datetime) -> list[MemoryEntry]:
    """``n`` entries: ``pairs`` near-duplicate pairs (the second copy adds one word) and distinct singles."""
    rng = random.Random(21)
    out: list[MemoryEntry] = []
    i = 0
    while len(out) < n:
        words = " ".join(word(rng) for _ in range(12))
        text = f"Note {i}: the user keeps the {words} records for project K{i} in drawer {i % 97}."
        stamp = now - timedelta(days=30, minutes=i)
        out.append(entry(f"m{i:04d}a", text, stamp))
        if i < pairs:
            out.append(entry(f"m{i:04d}b", text[:-1] + ", always.", stamp))
        i += 1
    return out[:n]


def merging_model(contents: dict[str, str]) -> Reply:
    """Merges every cluster a prompt shows into its longest member (which covers the others)."""

    def decide(body):
        prompt = body["messages"][1]["content"]
        saves = []
        for match in CLUSTER_LINE.finditer(prompt):
            ids = [i.strip() for i in match.group(1).split(",")]
            longest = max(ids, key=lambda i: len(contents[i]))
            saves.append({"content": contents[longest], "sourceIds": ids})
        return reply(json.dumps({"toDelete": [], "toSave": saves}))

    return Reply(decide=decide)


ENTRY_LINE = re.compile(r"^- id=(\S+) .*? :: (.*)$", re.MULTILINE)


def union_model(contents: dict[str, str]) -> Reply:
    """Merges every cluster a prompt shows into the union of its members' sentences, in order (nothing dropped);
    reads each member's text from the prompt, so merged entries merge again."""

    def decide(body):
        prompt = body["messages"][1]["content"]
        shown = dict(ENTRY_LINE.findall(prompt))
        saves = []
        for match in CLUSTER_LINE.finditer(prompt):
            ids = [i.strip() for i in match.group(1).split(",")]
            sentences = dict.fromkeys(s for i in ids for s in re.split(r"(?<=\.)\s+", shown[i].strip()) if s)
            saves.append({"content": " ".join(sentences), "sourceIds": ids})
        return reply(json.dumps({"toDelete": [], "toSave": saves}))

    return Reply(decide=decide)


def review(profile, options, corpus, now, *, server_kw=None, max_cycles=12, model=merging_model):
    """Cycles of memory consolidation against the test server until nothing waits: (live contents, merged source
    groups, calls, cycles, server)."""
    store = open_store(profile, options)
    store.memories.put_many(corpus)
    contents = {e.id: e.content for e in corpus}
    with OpenAITestServer(default=model(contents), **(server_kw or {})) as server:
        opts = options.replace(LlmBaseUrl=server.base_url, LlmModel="test-model", LlmMaxRetries=0)
        client = build_model_client(opts, profile)
        cycles = 0
        for cycles in range(1, max_cycles + 1):
            ctx = PassContext(
                profile,
                opts,
                now + timedelta(hours=cycles),
                cycle_id=f"c{cycles}",
                client_factory=lambda: client,
            )
            ctx._store = store
            report = run_memory_consolidation(ctx)
            if report.status != "completed":
                raise AssertionError(f"memory consolidation {report.status}: {report.reason}")
            if not report.counts.get("backlog"):
                break
        live = sorted(e.content for e in store.memories.list_live())
        calls = len(server.requests)
    store.close()
    return live, calls, cycles, server
