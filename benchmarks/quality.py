"""Consolidation quality on public long conversations (LoCoMo): duplicates found and finished, distinct moments kept
apart, no specific lost, recall kept — and a year of daily cycles with an imperfect model.

The corpus is built deterministically (fixed seeds) from ``locomo10.json`` in the shared evaluation data (read in
place; path from ``--data`` or ``DREAM_EVAL_DATA``, default ``../shared/eval-data`` next to the repository). Per
conversation:

* every observation fact of a speaker is saved as a memory (category ``people/<speaker>``) at its session's time;
* about a quarter of them are re-observed at one or two later sessions, reworded by rules: synonym swaps, clauses
  reordered, a framing such as "On 25 May 2023, Caroline mentioned again that ...", added context, or a trivial
  respelling (case, spacing, punctuation). A fact and its re-observations are one duplicate group;
* look-alike groups: one fact restated as two or three different events (different dates, sometimes a different
  person or number); half of the groups also carry the event date as subject-time metadata;
* QA items (categories 1 to 4) linked to the facts derived from their evidence dialogue turns.

Each conversation goes into its own real store (a DuckDB file under a temporary directory) through
``save_memory`` (save-time dedup on), then whole dream cycles run daily with the offline backend until a cycle
changes nothing (at most ``--max-cycles``). Where each fact ends up is followed through ``mergedFrom`` provenance and
the change log. One JSON object per line:

* quality.dup_groups_one_live — fraction of duplicate groups whose members all end in one live entry (target >= 0.90);
* quality.groups_left_apart.<reason> — duplicate groups left with two or more live entries, per reason, read from
  the store at the end: never_clustered (the near-duplicate scan puts them in no one cluster), below_merge_rule (one
  cluster, but the offline merge rule leaves them apart), merge_refused_by_coverage (a merge of them was rejected, or
  the rule's merge would be, by the coverage and content checks), settled_after_left_apart (the rule would merge them
  now, but their cluster is settled and no longer offered);
* quality.distinct_merged — pairs of look-alike distinct events that end in the same live entry (target 0);
* quality.specifics_lost — specifics (names, numbers, dates) of saved facts that the fact's live home — its live
  descendant, else the best of its ten best search matches — does not carry (target 0);
* quality.facts_lost — facts whose live home misses a specific or holds under 60 % of their content words;
* quality.recall10_before / quality.recall10_after — fraction of QA items for which, for every evidence turn, a live
  entry holding a fact of that turn is in the top 10 of ``recall_index.search(m, question)`` (after >= before);
* quality.model_calls and the cycles run, the merges and how many unrelated facts share an entry.

Stale facts (every run, ``--quick`` too): per conversation, a store holding the speakers' first observations plus
facts later contradicted, written by rules from the conversation's speakers and session dates: a home, a job or a
manager that changes at a later session, and an agent's claim a user correction contradicts; half of the changes
carry subject time. Look-alike events that are both true (two trips) sit next to them. The contradiction sweep runs
until nothing waits, once with the offline backend and once with a judge that proposes every true supersession among
the pairs it is shown plus hostile ones the host must refuse (the reverse direction where subject time says
otherwise, an agent's claim over a user correction, unknown, unshown, empty and self ids):

* quality.stale_live_after — contradicted facts still live after the sweep (judge; target <= 0.05), and
  quality.stale_live_after.offline for the offline backend (it proposes no supersession: judgement is needed);
* quality.wrong_supersessions — entries archived as superseded that were not stale (target 0), for both;
* quality.current_first — per contradicted fact and each of two questions about it ("Who is Caroline's manager?"),
  the share where ``search(m, question, limit=10)`` ranks the newest version (the later state, or the user's
  correction even when the agent's claim was saved after it) above the stale one, both still live: saved, not yet
  swept (target >= 0.95); quality.current_first.after_sweep (judge) and .after_sweep.offline after the sweep, where a
  stale version archived must not be returned at all.

``--option NAME=VALUE`` (repeatable) sets a dream option for the whole run, e.g. ``--option RecallRecencyWeight=0.2``:
the recall options' defaults were chosen by comparing quality.recall10_* and quality.current_first across values.

``--year``: 365 daily cycles on one or two conversations whose sessions are spread over the year, with a scripted
model that answers like the offline backend but makes a realistic mistake in 1 of 100 decisions (each merge and each
entry it keeps is a decision): a dropped sentence, a respelled date, a swapped number, an id that was not offered, a
deletion without replacement, malformed JSON. Prints quality.year_facts_lost (facts lost as above; target 0), the
same group metrics, and quality.mistakes.<kind>.

Examples of groups left apart or merged wrongly go to stderr (``--examples N``).

    python benchmarks/quality.py            # all 10 conversations (several minutes on 2 cores)
    python benchmarks/quality.py --quick    # 2 conversations (about a minute)
    python benchmarks/quality.py --year [--quick]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dream_assets import recall_index as recall
from dream_assets.changes_model import SuccessorHow  # noqa: E402
from dream_assets.cycle import run_cycle  # noqa: E402
from dream_assets.llm.client import ModelClient  # noqa: E402
from dream_assets.llm.offline import OfflineBackend  # noqa: E402
from dream_assets.llm.scripted import ScriptedBackend  # noqa: E402
from dream_assets.model import MemoryEntry  # noqa: E402
from dream_assets.options import DreamOptions  # noqa: E402
from dream_assets.options_loader import load_options
from dream_assets.passes.memory_consolidation.merge import REJECTED_CLUSTER_KEY  # noqa: E402
from dream_assets.passes.memory_consolidation.offline import answer_memory_consolidation  # noqa: E402
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.save_pipeline import save_memory
from dream_assets.store import open_store  # noqa: E402
from dream_assets.store.connection import close_all  # noqa: E402
from dream_assets.text.coverage import (  # noqa: E402
    BASELINE_VOCABULARY,
    CoverageSource,
    check_merge_coverage,
    dropped_content,
    invented_specifics,
    specifics_of,
)
from dream_assets.text.sentence_merge import split_sentences  # noqa: E402
from dream_assets.text.tokens import content_tokens  # noqa: E402

SEED = 20240809
QUICK_CONVERSATIONS = ("conv-26", "conv-30")
YEAR_CONVERSATIONS = ("conv-26", "conv-30")
WORDS_KEPT = 0.6  # share of a fact's content words its live home must hold


def seed_ids(seed: int) -> None:
    """Entry ids from a seeded generator instead of the system's: BM25 breaks ties by id, so with random ids the
    recall figures move by an item or two from run to run; seeded, every figure repeats."""
    rng = random.Random(f"{seed}:ids")
    uuid.uuid4 = lambda: uuid.UUID(int=rng.getrandbits(128), version=4)  # type: ignore[assignment]


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(float(value), 4), "unit": unit}), flush=True)


def data_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    if os.environ.get("DREAM_EVAL_DATA"):
        return Path(os.environ["DREAM_EVAL_DATA"])
    return Path(__file__).resolve().parents[2] / "shared" / "eval-data"


# ---------------------------------------------------------------------------------------------- corpus
@dataclass
class Fact:
    key: str  # stable id of this saved text within the conversation
    content: str
    category: str
    at: datetime  # when it is saved
    dia_ids: tuple[str, ...]
    base: str  # key of the observation it derives from (itself for an observation)
    kind: str  # observation | reobservation | lookalike
    metadata: dict[str, str] = field(default_factory=dict)
    rules: tuple[str, ...] = ()


@dataclass
class Corpus:
    sample_id: str
    facts: list[Fact]
    dup_groups: list[list[str]]  # fact keys: an observation and its re-observations
    lookalike_groups: list[list[str]]  # fact keys: distinct events on one topic
    qa: list[tuple[str, list[list[str]]]]  # question, per evidence turn the keys of the facts derived from it
    last_at: datetime


_SESSION_TIME = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$")
MONTHS = (
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
)


def session_time(text: str) -> datetime:
    m = _SESSION_TIME.match(text)
    if not m:
        raise ValueError(f"locomo10.json: session date_time {text!r} is not like '1:56 pm on 8 May, 2023'")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return datetime(int(year), MONTHS.index(month.capitalize()) + 1, int(day), h, int(minute), tzinfo=UTC)


def day_text(at: datetime) -> str:
    return f"{at.day} {MONTHS[at.month - 1]} {at.year}"


SYNONYMS = [
    ("attended", "went to"),
    ("is planning to", "plans to"),
    ("planning to", "intending to"),
    ("excited", "thrilled"),
    ("kids", "children"),
    ("loves", "really enjoys"),
    ("recently", "lately"),
    ("started", "began"),
    ("bought", "purchased"),
    ("happy", "glad"),
    ("important", "significant"),
    ("favorite", "favourite"),
    ("wants to", "would like to"),
    ("helps", "assists"),
    ("enjoys", "likes"),
    ("friends", "pals"),
    ("finds", "considers"),
    ("big", "large"),
    ("talked about", "discussed"),
    ("decided to", "chose to"),
    ("received", "got"),
    ("amazing", "wonderful"),
    ("trip", "journey"),
    ("picture", "photo"),
    ("currently", "right now"),
    ("also", "as well"),
    ("hopes to", "wishes to"),
]
_TRAILING_TIME = re.compile(
    r"\s+((?:last|next|this) (?:week|weekend|month|year|summer|winter|spring|fall|"
    r"Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)|recently|yesterday|"
    r"a few (?:days|weeks|months) ago|(?:two|three|a couple of) (?:days|weeks) ago)$"
)
_SYN = [(re.compile(rf"\b{re.escape(a)}\b", re.IGNORECASE), b) for a, b in SYNONYMS]


def _lower_first(text: str, speakers: Sequence[str]) -> str:
    first = text.split(" ", 1)[0].strip("'’s,")
    if first in speakers or (first[:1].isupper() and first[1:2].isupper()):
        return text
    return text[:1].lower() + text[1:]


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def reword(
    rng: random.Random, text: str, speaker: str, other: str, at: datetime, speakers: Sequence[str]
) -> tuple[str, tuple[str, ...]]:
    """A re-observation of ``text`` at ``at``: one to three rules, chosen by ``rng``."""
    body = text.strip().rstrip(".")
    rules: list[str] = []
    if rng.random() < 0.12:  # a trivial respelling only: spacing, final punctuation, case of a common word
        spaced = "  ".join(body.split(" ", 2)) if rng.random() < 0.5 else body
        return (spaced + rng.choice(["", "!", " ."]) if spaced != body else body + "!"), ("respelled",)
    swaps = [(rx, b) for rx, b in _SYN if rx.search(body)]
    if swaps and rng.random() < 0.8:
        for rx, b in rng.sample(swaps, min(len(swaps), rng.randint(1, 2))):
            body = rx.sub(lambda m, b=b: b[:1].upper() + b[1:] if m.group()[:1].isupper() else b, body, count=1)
        rules.append("synonyms")
    if " because " in body and rng.random() < 0.6:
        left, right = body.split(" because ", 1)
        if len(left.split()) >= 3 and len(right.split()) >= 3:
            body = f"Because {_lower_first(right, speakers)}, {_lower_first(left, speakers)}"
            rules.append("reordered")
    else:
        m = _TRAILING_TIME.search(body)
        if m and rng.random() < 0.7:
            body = f"{m.group(1)[:1].upper() + m.group(1)[1:]}, {_lower_first(body[: m.start()], speakers)}"
            rules.append("reordered")
    roll = rng.random()
    if roll < 0.45:
        body = f"On {day_text(at)}, {speaker} mentioned again that {_lower_first(body, speakers)}"
        rules.append("framed")
    elif roll < 0.75:
        context = rng.choice(
            [
                f"{speaker} brought this up again while talking with {other}",
                f"This came up again in a chat with {other} on {day_text(at)}",
                f"{speaker} said so again on {day_text(at)}",
            ]
        )
        body = f"{body}. {context}"
        rules.append("context")
    if not rules:
        body = f"{speaker} mentioned again that {_lower_first(body, speakers)}"
        rules.append("framed")
    return _sentence(body), tuple(rules)


_NUMBER = re.compile(r"\b\d+\b")
# A fact that reports speech ("X mentioned that ...") restated on another date is a re-observation, not a new event.
_REPORTING = re.compile(
    r"\b(?:mention\w*|sa(?:y|ys|id)|shar(?:e|es|ed) that|t(?:ell|ells|old)|express\w*)\b", re.IGNORECASE
)


def lookalikes(
    rng: random.Random, text: str, speaker: str, other: str, at: datetime
) -> list[tuple[str, str, str, str]]:
    """Two or three distinct events restating ``text``: (content, category, event date, how it differs). Different
    dates always (written first, "On 5 May 2023, ...", or last, "... on 5 May 2023."); a different number or a
    different person sometimes."""
    body = text.strip().rstrip(".")
    out = []
    n = rng.choice((2, 2, 3))
    date_first = rng.random() < 0.5
    when = at
    for i in range(n):
        when = when + timedelta(days=rng.randint(20, 60))  # strictly later each time: never the same day twice
        person, event, kind = speaker, body, "date"
        if i == 1 and _NUMBER.search(body):
            event = _NUMBER.sub(lambda m: str(int(m.group()) + rng.randint(1, 9)), body, count=1)
            kind = "number"
        elif i == 2 or (i == 1 and rng.random() < 0.3):
            person = other
            event = re.sub(rf"\b{re.escape(speaker)}\b", other, body)
            if event == body:
                event = f"{other}: {body[:1].lower() + body[1:]}"
            kind = "person"
        content = (
            f"On {day_text(when)}, {_lower_first(event, [speaker, other])}."
            if date_first
            else f"{event} on {day_text(when)}."
        )
        out.append((content, f"people/{person.lower()}", when.date().isoformat(), kind))
    return out


def build_corpus(conv: dict[str, Any], seed: int) -> Corpus:
    sample = conv["sample_id"]
    rng = random.Random(f"{seed}:{sample}")
    talk = conv["conversation"]
    speakers = [talk["speaker_a"], talk["speaker_b"]]
    sessions = sorted(int(k.split("_")[1]) for k in talk if re.fullmatch(r"session_\d+", k))
    when = {s: session_time(talk[f"session_{s}_date_time"]) for s in sessions}
    facts: list[Fact] = []
    by_dia: dict[str, list[str]] = defaultdict(list)
    dup_groups: list[list[str]] = []
    lookalike_groups: list[list[str]] = []
    for s in sessions:
        observed = conv["observation"].get(f"session_{s}_observation", {})
        for speaker in sorted(observed):
            for i, (text, dia) in enumerate(observed[speaker]):
                dias = tuple(dia if isinstance(dia, list) else [dia])
                key = f"s{s}-{speaker.lower()}-{i}"
                at = when[s] + timedelta(minutes=i)
                other = speakers[1] if speaker == speakers[0] else speakers[0]
                fact = Fact(key, _sentence(text), f"people/{speaker.lower()}", at, dias, key, "observation")
                facts.append(fact)
                group = [key]
                later = [t for t in sessions if t > s]
                if later and rng.random() < 0.25:
                    for r, t in enumerate(sorted(rng.sample(later, min(len(later), rng.choice((1, 1, 2)))))):
                        content, rules = reword(rng, fact.content, speaker, other, when[t], speakers)
                        facts.append(
                            Fact(
                                f"{key}-re{r}",
                                content,
                                fact.category,
                                when[t] + timedelta(minutes=30 + i),
                                dias,
                                key,
                                "reobservation",
                                rules=rules,
                            )
                        )
                        group.append(f"{key}-re{r}")
                    dup_groups.append(group)
                elif rng.random() < 0.12 and not _REPORTING.search(fact.content):
                    members = []
                    with_subject = rng.random() < 0.5
                    variants = lookalikes(rng, fact.content, speaker, other, at)
                    for r, (content, category, event_day, how) in enumerate(variants):
                        meta = {"subjectTime": event_day} if with_subject else {}
                        members.append(
                            Fact(
                                f"{key}-la{r}",
                                content,
                                category,
                                max(at, datetime.fromisoformat(event_day).replace(tzinfo=UTC)) + timedelta(hours=20),
                                (),
                                key,
                                "lookalike",
                                meta,
                                (how,),
                            )
                        )
                    facts.extend(members)
                    lookalike_groups.append([m.key for m in members])
    facts.sort(key=lambda f: (f.at, f.key))
    for f in facts:
        for d in f.dia_ids:
            by_dia[d].append(f.key)
    qa = []
    for item in conv["qa"]:
        if item.get("category") == 5 or "answer" not in item:
            continue
        turns = [by_dia[d] for d in item.get("evidence") or [] if by_dia.get(d)]
        if turns:
            qa.append((item["question"], turns))
    return Corpus(sample, facts, dup_groups, lookalike_groups, qa, max(f.at for f in facts))


# ---------------------------------------------------------------------------------------------- measuring
def successors(store: Any) -> dict[str, str]:
    """Source id -> the entry it went into: ``mergedFrom`` provenance, and change-log rows that archived an entry
    into another."""
    succ: dict[str, str] = {}
    for e in store.memories.list_all():
        raw = e.metadata.get("mergedFrom")
        if raw:
            try:
                for src in json.loads(raw):
                    if str(src) != e.id:
                        succ[str(src)] = e.id
            except ValueError:
                pass
    merged = [str(how) for how in SuccessorHow if how.merged]
    with store.connection.session() as conn:
        rows = conn.execute(
            "SELECT target_id, successor_id FROM changes WHERE target_type = 'memory' AND kind = 'archived' "
            "AND undone_at IS NULL AND successor_how IN (SELECT unnest(?)) ORDER BY ordinal",
            [merged],
        ).fetchall()
    for target, into in rows:
        if into != target:
            succ.setdefault(target, into)
    return succ


def live_home(entry_id: str | None, succ: dict[str, str], live: dict[str, MemoryEntry]) -> str | None:
    return _follow(entry_id, succ, live)[0]


def _follow(entry_id: str | None, succ: dict[str, str], live: dict[str, MemoryEntry]) -> tuple[str | None, str | None]:
    """(the live entry ``entry_id`` ended in, or None; the last id of the chain)."""
    seen: set[str] = set()
    last = entry_id
    while entry_id is not None and entry_id not in live and entry_id not in seen:
        seen.add(entry_id)
        last = entry_id
        entry_id = succ.get(entry_id)
    return (entry_id if entry_id in live else None), last


def archive_reason(store: Any, entry_id: str | None) -> str:
    if entry_id is None:
        return "never saved"
    with store.connection.session() as conn:
        row = conn.execute(
            "SELECT reason FROM changes WHERE target_type = 'memory' AND target_id = ? AND "
            "kind IN ('archived', 'purged') ORDER BY ordinal DESC LIMIT 1",
            [entry_id],
        ).fetchone()
    return row[0] if row else "no archive row"


def holds(fact: Fact, content: str) -> tuple[list[str], float]:
    """(specifics of the fact that ``content`` misses, share of the fact's content words it has)."""
    missing = list(
        check_merge_coverage([CoverageSource(fact.content, fact.category)], content, BASELINE_VOCABULARY).missing
    )
    words = content_tokens(fact.content)
    share = len(words & content_tokens(content)) / len(words) if words else 1.0
    return missing, share


@dataclass
class Outcome:
    homes: dict[str, str | None]
    specifics_lost: int = 0
    facts_lost: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)


def locate(store: Any, corpus: Corpus, saved: dict[str, str]) -> Outcome:
    live = {e.id: e for e in store.memories.list_live()}
    succ = successors(store)
    out = Outcome(homes={})
    for f in corpus.facts:
        home, last = _follow(saved.get(f.key), succ, live)
        out.homes[f.key] = home
        candidates = ([home] if home else []) + [e.id for e, _ in recall.search(store.memories, f.content, limit=10)]
        best: tuple[int, float] | None = None
        for cid in dict.fromkeys(candidates):
            if cid not in live:
                continue
            missing, share = holds(f, live[cid].content)
            score = (-len(missing), share)
            if best is None or score > best:
                best = score
            if cid == home and not missing and share >= WORDS_KEPT:
                break
        if best is None:
            best = (-len(specifics_of(f.content, f.category)), 0.0)
        out.specifics_lost += -best[0]
        if best[0] < 0 or best[1] < WORDS_KEPT:
            out.facts_lost.append(f.key)
            out.why[f.key] = (
                f"live home {home} holds {best[1]:.0%} of its words, misses {-best[0]} specific(s)"
                if home
                else f"no live home: {archive_reason(store, last)}"
            )
    return out


def recall10(store: Any, corpus: Corpus, homes: dict[str, str | None]) -> tuple[int, int]:
    hits = 0
    for question, turns in corpus.qa:
        top = {e.id for e, _ in recall.search(store.memories, question, limit=10)}
        if all(any(homes.get(k) in top for k in keys) for keys in turns):
            hits += 1
    return hits, len(corpus.qa)


@dataclass
class GroupScore:
    dup_one_live: int = 0
    dup_total: int = 0
    distinct_merged: int = 0
    lookalike_pairs: int = 0
    by_kind: Counter = field(default_factory=Counter)  # "<kind>:pairs" and "<kind>:merged" per way of differing
    unrelated_shared: int = 0
    apart: list[str] = field(default_factory=list)
    wrongly_merged: list[str] = field(default_factory=list)
    apart_reasons: Counter = field(default_factory=Counter)  # groups with two or more live entries, per reason


#: Why a duplicate group ends with two or more live entries (quality.groups_left_apart.<reason>).
APART_REASONS = (
    "never_clustered",  # the near-duplicate scan puts its live entries in no one cluster
    "below_merge_rule",  # clustered, but the offline merge rule leaves them apart
    "merge_refused_by_coverage",  # the rule merges them, the coverage or content check refuses the merge
    "settled_after_left_apart",  # the rule would merge them now, but their cluster is settled and not offered
)


class ApartReasons:
    """Classifies a duplicate group left with two or more live entries (``APART_REASONS``): the store's lexical scan as
    the pass runs it, the rejection stamps, and the offline rule asked again on the cluster that holds most of them,
    its merge put to the checks the pass applies."""

    def __init__(self, store: Any, options: DreamOptions) -> None:
        self.store = store
        self.live = {e.id: e for e in store.memories.list_live()}
        found = store.memories.duplicate_clusters(max_cluster_size=options.ConsolidationMaxClusterSize)
        self.cluster_of = {i: n for n, c in enumerate(found.clusters) for i in c}
        self.clusters = found.clusters

    def reason(self, ids: set[str]) -> str:
        by_cluster: dict[int, set[str]] = defaultdict(set)
        for i in ids:
            if i in self.cluster_of:
                by_cluster[self.cluster_of[i]].add(i)
        together = max(by_cluster.items(), key=lambda kv: len(kv[1]), default=(None, set()))
        if len(together[1]) < 2:
            return "never_clustered"
        members = [self.live[i] for i in self.clusters[together[0]] if i in self.live]
        if any(REJECTED_CLUSTER_KEY in self.live[i].metadata for i in together[1]):
            return "merge_refused_by_coverage"
        inputs = {
            "entries": [
                {
                    "id": e.id,
                    "content": e.content,
                    "category": e.category,
                    "tags": sorted(e.tags),
                    "subject": e.subject_time or None,
                }
                for e in members
            ],
            "clusters": [[e.id for e in members]],
        }
        answer, _ = answer_memory_consolidation(inputs)
        for save in answer["toSave"]:
            chosen = set(save["sourceIds"])
            if len(chosen & together[1]) < 2:
                continue
            sources = [CoverageSource(self.live[i].content, self.live[i].category) for i in save["sourceIds"]]
            content = save["content"]
            if (
                not check_merge_coverage(sources, content, BASELINE_VOCABULARY).ok
                or invented_specifics(sources, content, BASELINE_VOCABULARY)
                or dropped_content(sources, content)
            ):
                return "merge_refused_by_coverage"
            return "settled_after_left_apart"
        return "below_merge_rule"


def score_groups(
    corpus: Corpus, homes: dict[str, str | None], store: Any, options: DreamOptions | None = None
) -> GroupScore:
    text = {f.key: f.content for f in corpus.facts}
    fact = {f.key: f for f in corpus.facts}
    g = GroupScore()
    reasons = ApartReasons(store, options) if options is not None else None
    for group in corpus.dup_groups:
        g.dup_total += 1
        ends = {homes.get(k) for k in group}
        if len(ends) == 1 and None not in ends:
            g.dup_one_live += 1
        else:
            why = ""
            live_ends = {e for e in ends if e}
            if reasons is not None and len(live_ends) >= 2:
                why = reasons.reason(live_ends)
                g.apart_reasons[why] += 1
            g.apart.append(
                (f"[{why}] " if why else "")
                + " | ".join(f"{text[k]!r} -> {homes.get(k) or 'no live entry'}" for k in group)
            )
    for group in corpus.lookalike_groups:
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                g.lookalike_pairs += 1
                how = (
                    "person"
                    if fact[a].category != fact[b].category
                    else "number"
                    if "number" in fact[a].rules + fact[b].rules
                    else "date"
                )
                how += "_with_subject_time" if fact[a].metadata else "_in_text_only"
                g.by_kind[f"{how}:pairs"] += 1
                if homes.get(a) and homes.get(a) == homes.get(b):
                    g.distinct_merged += 1
                    g.by_kind[f"{how}:merged"] += 1
                    entry = store.memories.get(homes[a])
                    g.wrongly_merged.append(f"{text[a]!r} + {text[b]!r} -> {entry.content if entry else '?'!r}")
    base_of = {f.key: f.base for f in corpus.facts if f.kind != "lookalike"}
    by_home: dict[str, set[str]] = defaultdict(set)
    for k, h in homes.items():
        if h and k in base_of:
            by_home[h].add(base_of[k])
    g.unrelated_shared = sum(len(bases) - 1 for bases in by_home.values() if len(bases) > 1)
    return g


# ---------------------------------------------------------------------------------------------- running
class CountingBackend:
    """Delegates to another backend and counts its calls per pass."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.model = inner.name, inner.model
        self.uses_model = getattr(inner, "uses_model", True)
        self.calls: Counter = Counter()

    def complete(self, request: Any) -> Any:
        self.calls[request.pass_name] += 1
        return self.inner.complete(request)


def save_fact(store: Any, f: Fact) -> str:
    result = save_memory(
        store.memories,
        f.content,
        category=f.category,
        tags=("locomo",),
        metadata=f.metadata or None,
        now=f.at,
        dedupe=True,
    )
    return result.entry.id


def cycle_once(
    profile: AgentProfile, options: DreamOptions, backend: Any, now: datetime, cycle_id: str
) -> dict[str, Any]:
    reports = run_cycle(
        profile,
        options,
        now,
        cycle_id=cycle_id,
        client_factory=lambda: ModelClient(backend, profile=profile, options=options),
    )
    return {r.pass_name: r for r in reports}


def fingerprint(profile: AgentProfile, options: DreamOptions) -> str:
    store = open_store(profile, options)
    try:
        return store.memories.fingerprint()
    finally:
        store.close()


@dataclass
class Totals:
    counts: Counter = field(default_factory=Counter)
    apart: list[str] = field(default_factory=list)
    wrongly_merged: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    calls: Counter = field(default_factory=Counter)
    stale_left: list[str] = field(default_factory=list)
    wrong_supersessions: list[str] = field(default_factory=list)
    stale_first: list[str] = field(default_factory=list)


def run_conversation(corpus: Corpus, root: Path, options: DreamOptions, max_cycles: int, totals: Totals) -> None:
    profile = AgentProfile(root / corpus.sample_id).ensure()
    store = open_store(profile, options)
    saved = {f.key: save_fact(store, f) for f in corpus.facts}
    before = locate(store, corpus, saved)
    hits_before, n_qa = recall10(store, corpus, before.homes)
    store.close()
    backend = CountingBackend(OfflineBackend())
    now = corpus.last_at + timedelta(days=1)
    cycles = merged = 0
    last = fingerprint(profile, options)
    for i in range(max_cycles):
        reports = cycle_once(profile, options, backend, now + timedelta(days=i), f"{corpus.sample_id}-c{i}")
        cycles += 1
        consolidation = reports.get("memory_consolidation")
        if consolidation is not None:
            merged += int(consolidation.counts.get("merged", 0))
            if consolidation.status == "failed":
                totals.counts["failed_passes"] += 1
        current = fingerprint(profile, options)
        if current == last:
            break
        last = current
    store = open_store(profile, options)
    after = locate(store, corpus, saved)
    hits_after, _ = recall10(store, corpus, after.homes)
    groups = score_groups(corpus, after.homes, store, options)
    c = totals.counts
    c["conversations"] += 1
    c["facts"] += len(corpus.facts)
    c.update({f"apart:{k}": v for k, v in groups.apart_reasons.items()})
    c["live_before"] += len(set(filter(None, before.homes.values())))
    c["live_after"] += store.memories.counts()["live"]
    c["dup_one_live"] += groups.dup_one_live
    c["dup_total"] += groups.dup_total
    c["distinct_merged"] += groups.distinct_merged
    c["lookalike_pairs"] += groups.lookalike_pairs
    c.update({f"lookalike:{k}": v for k, v in groups.by_kind.items()})
    c["unrelated_shared"] += groups.unrelated_shared
    c["specifics_lost"] += after.specifics_lost
    c["facts_lost"] += len(after.facts_lost)
    c["recall_before"] += hits_before
    c["recall_after"] += hits_after
    c["qa"] += n_qa
    c["cycles"] += cycles
    c["merged"] += merged
    totals.calls.update(backend.calls)
    totals.apart += [f"{corpus.sample_id}: {a}" for a in groups.apart]
    totals.wrongly_merged += [f"{corpus.sample_id}: {w}" for w in groups.wrongly_merged]
    text = {f.key: f.content for f in corpus.facts}
    totals.lost += [f"{corpus.sample_id}: {text[k]!r} ({after.why[k]})" for k in after.facts_lost]
    store.close()
    close_all()


# ---------------------------------------------------------------------------------------------- the imperfect model
MISTAKES = (
    "dropped_sentence",
    "respelled_date",
    "swapped_number",
    "id_not_offered",
    "deletion_without_replacement",
    "malformed_json",
)
_DATE = re.compile(r"\b(\d{1,2}) (" + "|".join(MONTHS) + r"),? (\d{4})\b")


class ImperfectModel:
    """Answers like the offline backend, but one decision in ``1 / rate`` goes wrong in a realistic way. Each merge
    it proposes and each shown entry it keeps is a decision; the kinds of mistake are taken in turn, so a short run
    still makes every kind."""

    def __init__(self, seed: int, rate: float = 0.01) -> None:
        self.rng = random.Random(seed)
        self.rate = rate
        self.offline = OfflineBackend()
        self.mistakes: Counter = Counter()
        self.decisions = 0
        self.turn = 0
        self.seen_ids: list[str] = []

    def _slip(self) -> str | None:
        self.decisions += 1
        if self.rng.random() >= self.rate:
            return None
        kind = MISTAKES[self.turn % len(MISTAKES)]
        self.turn += 1
        self.mistakes[kind] += 1
        return kind

    def _stale_id(self, shown: set[str]) -> str:
        stale = [i for i in self.seen_ids if i not in shown]
        return self.rng.choice(stale) if stale else "mem-not-offered"

    def _mangle(self, kind: str, content: str) -> str:
        """The text with one sentence dropped, one date respelled or one number changed (a dropped sentence when
        the text has no date or number)."""
        if kind == "respelled_date" and _DATE.search(content):

            def respell(m: re.Match) -> str:
                month = MONTHS.index(m.group(2)) + 1
                return self.rng.choice(
                    [
                        f"{m.group(2)} {m.group(1)}th, {m.group(3)}",
                        f"{month}/{m.group(1)}/{m.group(3)}",
                        f"{m.group(1)} {m.group(2)}",
                    ]
                )

            return _DATE.sub(respell, content, count=1)
        if kind in ("swapped_number", "respelled_date") and _NUMBER.search(content):
            return _NUMBER.sub(lambda m: str(int(m.group()) + self.rng.randint(1, 9)), content, count=1)
        sentences = [s for line in split_sentences(content) for s in line]
        if len(sentences) > 1:
            drop = self.rng.randrange(len(sentences))
            return " ".join(s for i, s in enumerate(sentences) if i != drop)
        words = content.split()
        return " ".join(words[: max(1, len(words) // 2)]) + "."

    def _memory_consolidation(self, answer: dict[str, Any], inputs: dict[str, Any]) -> bool:
        entries = {str(e["id"]): e for e in inputs.get("entries") or []}
        shown = set(entries)
        broken = False
        saves = []
        for save in answer["toSave"]:
            kind = self._slip()
            if kind in ("dropped_sentence", "respelled_date", "swapped_number"):
                save["content"] = self._mangle(kind, save["content"])
            elif kind == "id_not_offered":
                save["sourceIds"] = [*save["sourceIds"], self._stale_id(shown)]
            elif kind == "deletion_without_replacement":
                answer["toDelete"].append(save["sourceIds"][0])
                continue
            broken = broken or kind == "malformed_json"
            saves.append(save)
        answer["toSave"] = saves
        in_merge = {i for s in saves for i in s["sourceIds"]}
        for i, entry in entries.items():
            if i in in_merge:
                continue
            kind = self._slip()
            if kind in (
                "dropped_sentence",
                "respelled_date",
                "swapped_number",
            ):  # a careless rewrite of the entry
                answer["toSave"].append(
                    {
                        "content": self._mangle(kind, str(entry.get("content") or "")),
                        "category": entry.get("category") or "general",
                        "sourceIds": [i],
                    }
                )
            elif kind == "id_not_offered":
                answer["toDelete"].append(self._stale_id(shown))
            elif kind == "deletion_without_replacement":
                answer["toDelete"].append(i)
            broken = broken or kind == "malformed_json"
        self.seen_ids = list(dict.fromkeys(self.seen_ids + list(shown)))[-2000:]
        return broken

    def __call__(self, request: Any) -> Any:
        answer, _note = self.offline.answer(request.call, request.inputs)
        broken = False
        if request.pass_name == "memory_consolidation":
            broken = self._memory_consolidation(answer, request.inputs)
        elif request.pass_name == "merge_repair":
            kind = self._slip()
            if kind in ("dropped_sentence", "respelled_date", "swapped_number"):
                answer["content"] = self._mangle(kind, answer["content"])
            broken = kind == "malformed_json"
        text = json.dumps(answer, ensure_ascii=False)
        if broken:
            return self.rng.choice(
                [
                    text[: max(1, len(text) * 2 // 3)],
                    text.replace('"toSave"', "toSave", 1),
                    text + ",}",
                    "Sure! Here is the JSON: " + text[:-1],
                ]
            )
        return text


def run_year(
    corpus: Corpus, root: Path, options: DreamOptions, days: int, totals: Totals, seed: int, rate: float
) -> None:
    """Sessions spread over ``days`` days (each day: that day's saves, then one cycle) with the imperfect model."""
    profile = AgentProfile(root / f"year-{corpus.sample_id}").ensure()
    start = datetime(2025, 1, 1, 3, 0, tzinfo=UTC)
    first, last = corpus.facts[0].at, corpus.last_at
    span = max((last - first).total_seconds(), 1.0)
    last_save_day = max(1, int(days * 0.85))

    def day_of(f: Fact) -> int:
        return int((f.at - first).total_seconds() / span * last_save_day)

    by_day: dict[int, list[Fact]] = defaultdict(list)
    for f in corpus.facts:
        by_day[day_of(f)].append(f)
    model = ImperfectModel(seed, rate)
    backend = CountingBackend(ScriptedBackend(model))
    saved: dict[str, str] = {}
    failed = 0
    for d in range(days):
        if by_day.get(d):
            store = open_store(profile, options)
            for i, f in enumerate(by_day[d]):
                # Saved in the agent's day, with the fact's own date kept apart from the clock.
                saved[f.key] = save_memory(
                    store.memories,
                    f.content,
                    category=f.category,
                    tags=("locomo",),
                    metadata=f.metadata or None,
                    now=start + timedelta(days=d, hours=8, seconds=i),
                    dedupe=True,
                ).entry.id
            store.close()
        reports = cycle_once(profile, options, backend, start + timedelta(days=d + 1), f"year-{corpus.sample_id}-{d}")
        rep = reports.get("memory_consolidation")
        if rep is not None and rep.status == "failed":
            failed += 1
    store = open_store(profile, options)
    after = locate(store, corpus, saved)
    groups = score_groups(corpus, after.homes, store, options)
    c = totals.counts
    c["conversations"] += 1
    c["facts"] += len(corpus.facts)
    c.update({f"apart:{k}": v for k, v in groups.apart_reasons.items()})
    c["days"] += days
    c["facts_lost"] += len(after.facts_lost)
    c["specifics_lost"] += after.specifics_lost
    c["dup_one_live"] += groups.dup_one_live
    c["dup_total"] += groups.dup_total
    c["distinct_merged"] += groups.distinct_merged
    c["lookalike_pairs"] += groups.lookalike_pairs
    c.update({f"lookalike:{k}": v for k, v in groups.by_kind.items()})
    c["decisions"] += model.decisions
    c["failed_passes"] += failed
    c["live_after"] += store.memories.counts()["live"]
    for kind in MISTAKES:
        c[f"mistake:{kind}"] += model.mistakes[kind]
    totals.calls.update(backend.calls)
    text = {f.key: f.content for f in corpus.facts}
    totals.lost += [f"{corpus.sample_id}: {text[k]!r} ({after.why[k]})" for k in after.facts_lost]
    totals.wrongly_merged += [f"{corpus.sample_id}: {w}" for w in groups.wrongly_merged]
    totals.apart += [f"{corpus.sample_id}: {a}" for a in groups.apart]
    store.close()
    close_all()


# ---------------------------------------------------------------------------------------------- main
# ---------------------------------------------------------------------------------------------- stale facts
MANAGERS = ("Tom Becker", "Priya Shah", "Ana Ruiz", "Kofi Mensah", "Lena Vogel", "Ravi Iyer", "Mei Chen", "Omar Haddad")
CITIES = ("Lisbon", "Toronto", "Osaka", "Denver", "Krakow", "Nairobi", "Austin", "Bergen", "Porto", "Quebec")
JOBS = ("nurse", "barista", "architect", "teacher", "pilot", "chef", "librarian", "welder", "editor", "dentist")


@dataclass
class StaleSet:
    sample_id: str
    facts: list[Fact]
    stale: dict[str, str]  # key of the stale fact -> key of the fact that supersedes it
    reversible: set[str]  # stale keys whose pair carries subject time (a reversed proposal must be refused)
    corrections: set[str]  # stale keys superseded by a user correction
    last_at: datetime
    questions: dict[str, list[str]] = field(default_factory=dict)  # stale key -> questions about the fact


def build_stale_set(conv: dict[str, Any], seed: int, background: int = 60) -> StaleSet:
    """The conversation's first ``background`` observations, then per speaker rule-written changes of state."""
    rng = random.Random(f"{seed}:stale:{conv['sample_id']}")
    # A separate stream for the manager changes, so the other facts stay those of earlier runs.
    managers = random.Random(f"{seed}:stale-managers:{conv['sample_id']}")
    talk = conv["conversation"]
    speakers = [talk["speaker_a"], talk["speaker_b"]]
    sessions = sorted(int(k.split("_")[1]) for k in talk if re.fullmatch(r"session_\d+", k))
    when = {n: session_time(talk[f"session_{n}_date_time"]) for n in sessions}
    facts: list[Fact] = []
    for n in sessions:
        for speaker, items in sorted(conv["observation"].get(f"session_{n}_observation", {}).items()):
            for i, (text, _dia) in enumerate(items):
                if len(facts) < background:
                    facts.append(
                        Fact(f"bg-{n}-{i}-{speaker}", text, f"people/{speaker.lower()}", when[n], (), "", "bg")
                    )
    stale: dict[str, str] = {}
    reversible: set[str] = set()
    corrections: set[str] = set()
    questions: dict[str, list[str]] = {}
    for k, speaker in enumerate(speakers):
        cat = f"people/{speaker.lower()}"
        early, late = sorted(rng.sample(sessions[: max(2, len(sessions) // 2)], 2))
        late = max(late, sessions[-1 - k])
        a, b = rng.sample(CITIES, 2)
        j1, j2 = rng.sample(JOBS, 2)
        t1, t2 = when[early], when[late]
        with_time = k % 2 == 0

        def meta(t: datetime, on: bool) -> dict[str, str]:
            return {"subjectTime": t.strftime("%Y-%m")} if on else {}

        m1, m2 = managers.sample(MANAGERS, 2)
        pairs = [
            (f"{speaker} lives in {a}.", f"{speaker} moved to {b} and lives there now.", with_time, "home"),
            (
                f"{speaker} works as a {j1}.",
                f"{speaker} left the {j1} job and now works as a {j2}.",
                not with_time,
                "job",
            ),
            (
                f"{speaker}'s manager is {m1}.",
                f"{speaker}'s manager is {m2} since {t2.date().isoformat()}.",
                with_time,
                "manager",
            ),
        ]
        asked = {
            "home": [f"Where {speaker} lives", f"{speaker} lives in which city?"],
            "job": [f"What {speaker} works as", f"{speaker} works as what?"],
            "manager": [f"Who is {speaker}'s manager?", f"{speaker}'s manager"],
        }
        for old, new, timed, kind in pairs:
            ok, nk = f"stale-{speaker}-{kind}-old", f"stale-{speaker}-{kind}-new"
            facts.append(Fact(ok, old, cat, t1, (), "", "stale", meta(t1, timed)))
            facts.append(Fact(nk, new, cat, t2, (), "", "stale", meta(t2, timed)))
            stale[ok] = nk
            questions[ok] = asked[kind]
            if timed and t1.strftime("%Y-%m") != t2.strftime("%Y-%m"):
                reversible.add(ok)
        # An agent's claim and the user's correction of it; the claim is the newer entry.
        d1, d2 = rng.sample(range(1, 28), 2)
        month = MONTHS[rng.randrange(12)]
        ck, uk = f"stale-{speaker}-birthday-claim", f"stale-{speaker}-birthday-fix"
        facts.append(
            Fact(
                uk,
                f"{speaker}'s birthday is on {month} {d2}, not {month} {d1}.",
                cat,
                t1,
                (),
                "",
                "stale",
                {"feedbackKind": "Correction"},
            )
        )
        facts.append(Fact(ck, f"{speaker}'s birthday is on {month} {d1}.", cat, t2, (), "", "stale"))
        stale[ck] = uk
        corrections.add(ck)
        questions[ck] = [f"When is {speaker}'s birthday?", f"{speaker}'s birthday"]
        # Two trips: both true, never a supersession.
        c1, c2 = rng.sample(CITIES, 2)
        facts.append(
            Fact(
                f"trip-{speaker}-1",
                f"{speaker} visited {c1} in {MONTHS[t1.month - 1]}.",
                cat,
                t1,
                (),
                "",
                "trip",
                meta(t1, True),
            )
        )
        facts.append(
            Fact(
                f"trip-{speaker}-2",
                f"{speaker} visited {c2} in {MONTHS[t2.month - 1]}.",
                cat,
                t2,
                (),
                "",
                "trip",
                meta(t2, True),
            )
        )
    return StaleSet(conv["sample_id"], facts, stale, reversible, corrections, max(when.values()), questions)


def current_first(store: Any, stale: StaleSet, ids: dict[str, str], label: str, totals: Totals) -> None:
    """Per stale fact and question about it: does the fact's newest version rank above the stale one in
    ``search(m, question, limit=10)``? A stale version not returned ranks below; a newest version not returned
    is a miss."""
    c = totals.counts
    for old_key, questions in sorted(stale.questions.items()):
        old_id, new_id = ids[old_key], ids[stale.stale[old_key]]
        for question in questions:
            found = [e.id for e, _ in recall.search(store.memories, question, limit=10)]
            c[f"current:{label}:total"] += 1
            if new_id in found and (old_id not in found or found.index(new_id) < found.index(old_id)):
                c[f"current:{label}:first"] += 1
            else:
                text = {f.key: f.content for f in stale.facts}
                totals.stale_first.append(
                    f"{label}: {question!r}: {text[stale.stale[old_key]]!r} at "
                    f"{found.index(new_id) + 1 if new_id in found else 'none'}, {text[old_key]!r} at "
                    f"{found.index(old_id) + 1 if old_id in found else 'none'}"
                )


def stale_judge(stale: StaleSet, ids: dict[str, str]) -> Any:
    """A model that proposes every true supersession among the pairs it is shown, and hostile pairs besides."""
    key_of = {v: k for k, v in ids.items()}

    def answer(request: Any) -> dict[str, Any]:
        shown = [e["id"] for e in request.inputs.get("entries", [])]
        out = []
        for d, n in request.inputs.get("pairs", []):
            for old_id, new_id in ((d, n), (n, d)):
                ok, nk = key_of.get(old_id), key_of.get(new_id)
                if ok is None or stale.stale.get(ok) != nk:
                    continue
                out.append({"winnerId": new_id, "loserId": old_id, "reason": "later state"})
                if ok in stale.reversible or ok in stale.corrections:  # the host must refuse the reverse
                    out.append({"winnerId": old_id, "loserId": new_id, "reason": "hostile: reversed"})
        if shown:
            hidden = next((i for i in ids.values() if i not in shown), "")
            out += [
                {"winnerId": shown[0], "loserId": "no-such-id"},
                {"winnerId": shown[0], "loserId": shown[0]},
                {"winnerId": "", "loserId": shown[-1]},
                {"winnerId": shown[0], "loserId": hidden},
            ]
        return {"supersessions": out}

    return answer


def run_stale_set(stale: StaleSet, root: Path, options: DreamOptions, judge: bool, totals: Totals) -> None:
    label = "judge" if judge else "offline"
    profile = AgentProfile(root / f"{stale.sample_id}-stale-{label}").ensure()
    store = open_store(profile, options)
    ids = {
        f.key: save_memory(
            store.memories, f.content, category=f.category, metadata=f.metadata or None, now=f.at, dedupe=False
        ).entry.id
        for f in stale.facts
    }
    if not judge:  # the same store either way: measured once, before any sweep
        current_first(store, stale, ids, "unswept", totals)
    store.close()
    backend = CountingBackend(ScriptedBackend(stale_judge(stale, ids)) if judge else OfflineBackend())
    now = stale.last_at + timedelta(days=1)
    for i in range(5):
        reports = run_cycle(
            profile,
            options,
            now + timedelta(hours=i),
            cycle_id=f"{stale.sample_id}-sweep-{label}-{i}",
            only=["contradiction_sweep"],
            client_factory=lambda: ModelClient(backend, profile=profile, options=options),
        )
        if not reports[0].counts.get("backlog"):
            break
    store = open_store(profile, options)
    try:
        entries = {e.id: e for e in store.memories.list_all()}
        current_first(store, stale, ids, f"swept:{label}", totals)
    finally:
        store.close()
    c = totals.counts
    for key, entry_id in ids.items():
        entry = entries[entry_id]
        if key in stale.stale:
            c[f"stale:{label}:total"] += 1
            c[f"stale:{label}:live"] += not entry.is_archived
            if entry.is_archived:
                continue
            totals.stale_left.append(f"{label}: {entry.content}")
        elif entry.is_archived and entry.metadata.get("supersededBy"):
            c[f"stale:{label}:wrong"] += 1
            totals.wrong_supersessions.append(
                f"{label}: {entry.content} (by {entries[entry.metadata['supersededBy']].content})"
            )
    for pass_name, calls in backend.calls.items():
        totals.calls[pass_name] += calls


def load_conversations(root: Path, wanted: Sequence[str] | None) -> list[dict[str, Any]]:
    path = root / "locomo" / "locomo10.json"
    if not path.exists():
        raise SystemExit(f"{path}: not found (set --data or DREAM_EVAL_DATA to the shared eval-data folder)")
    convs = json.loads(path.read_text(encoding="utf-8"))
    if wanted:
        convs = [c for c in convs if c["sample_id"] in wanted]
    return convs


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def print_examples(totals: Totals, n: int) -> None:
    for title, items in (
        ("duplicate group left apart", totals.apart),
        ("distinct events merged", totals.wrongly_merged),
        ("fact lost", totals.lost),
        ("stale fact still live", totals.stale_left),
        ("wrong supersession", totals.wrong_supersessions),
        ("stale version ranked first", totals.stale_first),
    ):
        for item in items[:n]:
            print(f"example: {title}: {item[:600]}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"conversations {', '.join(QUICK_CONVERSATIONS)} only; with --year: one conversation over 60 days",
    )
    parser.add_argument("--year", action="store_true", help="daily cycles for a year with an imperfect model")
    parser.add_argument("--data", default=None, help="the shared eval-data folder (holds locomo/locomo10.json)")
    parser.add_argument("--conversations", default=None, help="comma-separated sample ids")
    parser.add_argument("--days", type=int, default=None, help="--year: days (default 365; 60 with --quick)")
    parser.add_argument("--max-cycles", type=int, default=10, help="cycles per conversation at most")
    parser.add_argument("--mistake-rate", type=float, default=0.01, help="--year: share of decisions that go wrong")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--examples", type=int, default=5, help="examples of each shortfall printed on stderr")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a dream option for every store and cycle of the run (repeatable), e.g. RecallRecencyWeight=0.2",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    logging.disable(logging.WARNING)
    seed_ids(args.seed)
    started = time.perf_counter()
    if args.conversations:
        wanted: Sequence[str] | None = [s.strip() for s in args.conversations.split(",") if s.strip()]
    elif args.year:
        wanted = YEAR_CONVERSATIONS[:1] if args.quick else YEAR_CONVERSATIONS
    else:
        wanted = QUICK_CONVERSATIONS if args.quick else None
    convs = load_conversations(data_dir(args.data), wanted)
    overrides = dict(item.split("=", 1) for item in args.option if "=" in item)
    if len(overrides) != len(args.option):
        parser.error("--option takes NAME=VALUE")
    options = load_options(env={}, overrides={**overrides, "LlmBackend": "offline"})
    totals = Totals()
    with tempfile.TemporaryDirectory(prefix="dream-bench-quality-") as tmp:
        for conv in convs:
            corpus = build_corpus(conv, args.seed)
            if args.year:
                days = args.days or (60 if args.quick else 365)
                run_year(corpus, Path(tmp), options, days, totals, args.seed, args.mistake_rate)
            else:
                run_conversation(corpus, Path(tmp), options, args.max_cycles, totals)
            stale = build_stale_set(conv, args.seed)
            for judge in (False, True):
                run_stale_set(stale, Path(tmp), options, judge, totals)
    c = totals.counts
    n = int(c["facts"])
    emit("quality.conversations", n, c["conversations"], "count")
    emit("quality.facts", n, c["facts"], "count")
    emit("quality.dup_groups", n, c["dup_total"], "count")
    emit("quality.dup_groups_one_live", n, _ratio(c["dup_one_live"], c["dup_total"]), "fraction")
    for reason in APART_REASONS:
        emit(f"quality.groups_left_apart.{reason}", int(c["dup_total"]), c[f"apart:{reason}"], "groups")
    emit("quality.lookalike_pairs", n, c["lookalike_pairs"], "count")
    emit("quality.distinct_merged", n, c["distinct_merged"], "count")
    for key in sorted(k for k in c if k.startswith("lookalike:") and k.endswith(":pairs")):
        how = key.split(":")[1]
        emit(f"quality.distinct_merged.{how}", int(c[key]), c[f"lookalike:{how}:merged"], "pairs")
    if args.year:
        emit("quality.year_days", n, c["days"], "days")
        emit("quality.year_facts_lost", n, c["facts_lost"], "count")
        emit("quality.year_specifics_lost", n, c["specifics_lost"], "count")
        emit("quality.decisions", n, c["decisions"], "count")
        for kind in MISTAKES:
            emit(f"quality.mistakes.{kind}", n, c[f"mistake:{kind}"], "count")
        emit("quality.failed_consolidations", n, c["failed_passes"], "count")
    else:
        emit("quality.specifics_lost", n, c["specifics_lost"], "count")
        emit("quality.facts_lost", n, c["facts_lost"], "count")
        emit("quality.qa_items", n, c["qa"], "count")
        emit("quality.recall10_before", n, _ratio(c["recall_before"], c["qa"]), "fraction")
        emit("quality.recall10_after", n, _ratio(c["recall_after"], c["qa"]), "fraction")
        emit("quality.unrelated_facts_sharing_an_entry", n, c["unrelated_shared"], "count")
        emit("quality.live_before", n, c["live_before"], "entries")
        emit("quality.cycles", n, c["cycles"], "count")
        emit("quality.merged", n, c["merged"], "count")
        emit("quality.failed_consolidations", n, c["failed_passes"], "count")
    emit("quality.live_after", n, c["live_after"], "entries")
    stale_n = int(c["stale:judge:total"])
    emit("quality.stale_facts", stale_n, stale_n, "count")
    emit("quality.stale_live_after", stale_n, _ratio(c["stale:judge:live"], stale_n), "fraction")
    emit("quality.wrong_supersessions", stale_n, c["stale:judge:wrong"], "count")
    emit(
        "quality.stale_live_after.offline",
        stale_n,
        _ratio(c["stale:offline:live"], c["stale:offline:total"]),
        "fraction",
    )
    emit("quality.wrong_supersessions.offline", stale_n, c["stale:offline:wrong"], "count")
    for label, name in (
        ("unswept", "quality.current_first"),
        ("swept:offline", "quality.current_first.after_sweep.offline"),
        ("swept:judge", "quality.current_first.after_sweep"),
    ):
        asked = int(c[f"current:{label}:total"])
        emit(name, asked, _ratio(c[f"current:{label}:first"], asked), "fraction")
    emit("quality.model_calls", n, sum(totals.calls.values()), "calls")
    for pass_name, calls in sorted(totals.calls.items()):
        emit(f"quality.model_calls.{pass_name}", n, calls, "calls")
    emit("quality.seconds", n, time.perf_counter() - started, "s")
    print_examples(totals, args.examples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
