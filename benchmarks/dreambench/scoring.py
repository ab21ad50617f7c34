"""The metrics, scored with no model judge: from what an adapter's ``dump()`` keeps and what its ``search()`` returns,
compared with the scenario's facts by their specifics (names, numbers, dates) and content words
(``textmatch.holds``: an entry holds a fact when it carries every specific of the fact and at least 60 % of its
content words, so a fact said in other words still counts as kept).

Per fact saved so far (noise and the stale versions of corrected facts are not scored for loss):

* specifics_lost — specifics of the fact that its best home (the kept entry, live or restorable, lacking fewest of
  them) lacks, summed; specifics_missing_live — the same over live entries only;
* facts_lost — facts no kept entry holds; facts_missing_live — facts no live entry holds;

and per group, question and change:

* dup_groups_one_live — share of duplicate groups (a fact and its re-observations) held by exactly one live entry:
  one live entry holds every member, and no other live entry holding a member is a copy of the group (each is the
  best home of a saved fact outside it and holds the member less fully). A live entry that is another fact's home
  and happens to hold a member by the matcher's words ("Gina feels inspired by Jon's determination and success" for
  "Jon finds Gina's success inspiring") is not a leftover duplicate;
* distinct_merged — pairs of distinct events that read alike held by one live entry, with no live entry holding one
  of them alone; distinct_collapsed — such pairs of which one is held by a live entry and the other by none (taken
  for one event: a merge that kept one of them, or a drop);
* stale_first — corrections (new version saved) whose question, searched, finds an entry holding only the stale
  version before any entry holding the current one; correction_missed — found neither in the top 10;
* recall_at_10 — share of questions for which every evidence item has a fact held by one of the top 10 results;
* reversible — of the live entries a consolidation took out or rewrote, the share whose text is still kept as a
  restorable entry afterwards.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from .adapters.base import Kept
from .scenario import Correction, Question, Scenario
from .textmatch import Entry, EntryIndex, Fact, holds, missing

K = 10


@dataclass
class Snapshot:
    """The metrics after one consolidation (value, and the count it is a share or a sum of)."""

    values: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    #: Each answerable question's text -> whether recall@10 found it (``recalled``).
    recalled: dict[str, bool] = field(default_factory=dict)

    def put(self, name: str, value: float, n: int, examples: Sequence[str] = ()) -> None:
        self.values[name] = value
        self.counts[name] = n
        if examples:
            self.examples[name] = list(examples)


def _ratio(a: int, b: int) -> float:
    """``a / b``; NaN when there is nothing to count yet (printed as null, left out of the plots)."""
    return a / b if b else math.nan


def loss(facts: dict[str, Fact], index: EntryIndex) -> tuple[int, int, int, int, list[str]]:
    """(specifics_lost, facts_lost, specifics_missing_live, facts_missing_live, examples of facts lost)."""
    spec_lost = facts_lost = spec_live = facts_live = 0
    examples = []
    live = EntryIndex(e for e in index.entries if e.live)
    for key, fact in facts.items():
        _, lacking, _ = index.best(fact)
        spec_lost += lacking
        if not index.holders(fact, live_only=False):
            facts_lost += 1
            examples.append(f"{key}: {fact.text}")
        _, lacking_live, _ = live.best(fact)
        spec_live += lacking_live
        if not live.holders(fact):
            facts_live += 1
    return spec_lost, facts_lost, spec_live, facts_live, examples


def dup_one_live(groups: list[list[str]], facts: dict[str, Fact], index: EntryIndex) -> tuple[int, int]:
    """(groups held by exactly one live entry, groups with two or more members saved; ``facts``: every fact saved).

    A group is held by one live entry when a live entry holds every member (the one holding fewest facts besides
    is the group's) and each other live entry holding a member is the best home of a saved fact outside the group
    (of the live entries holding that fact, it has most of its words, and then fewest others) and holds each member
    it holds with fewer of its words than the group's entry: that one is another fact's entry, not a copy left over.
    An entry that only echoes another fact kept elsewhere, as a second copy does, is no other fact's home; an entry
    that carries a member whole beside another fact is a copy of it all the same."""
    grouped = [[k for k in group if k in facts] for group in groups]
    grouped = [g for g in grouped if len(g) >= 2]
    held: dict[int, set[str]] = {}  # live entry holding a member -> the saved facts it holds
    home_of: dict[int, set[str]] = {}  # ... -> the saved facts it is the best home of
    for key in {k for g in grouped for k in g}:
        for e in index.holders(facts[key]):
            held.setdefault(id(e), set())
            home_of.setdefault(id(e), set())
    for key, fact in facts.items():
        holders = index.holders(fact)
        shares = {id(e): (missing(fact, e)[1], -len(e.tokens)) for e in holders}  # most of its words, least else
        top = max(shares.values(), default=None)
        for e in holders:
            if id(e) in held:
                held[id(e)].add(key)
                if shares[id(e)] == top:
                    home_of[id(e)].add(key)
    entries = {id(e): e for key in {k for g in grouped for k in g} for e in index.holders(facts[key])}

    def as_well(h: int, entry: int, group: list[str]) -> bool:
        """Does ``h`` hold a member with as many of its words as the group's entry does (a copy of it)?"""
        return any(
            missing(facts[k], entries[h])[1] >= missing(facts[k], entries[entry])[1] for k in group if k in held[h]
        )

    one = 0
    for group in grouped:
        members = set(group)
        holders = {id(e) for k in group for e in index.holders(facts[k])}
        whole = sorted((len(held[h] - members), h) for h in holders if members <= held[h])
        if whole:  # the group's entry: the one holding every member and the fewest facts besides
            entry = whole[0][1]
            one += all(home_of[h] - members and not as_well(h, entry, group) for h in holders if h != entry)
    return one, len(grouped)


def _lookalike_pairs(groups: list[list[str]], facts: dict[str, Fact]) -> list[tuple[str, str]]:
    """The pairs of distinct look-alike events saved so far."""
    out = []
    for group in groups:
        members = [k for k in group if k in facts]
        out += [(a, b) for i, a in enumerate(members) for b in members[i + 1 :]]
    return out


def distinct_merged(groups: list[list[str]], facts: dict[str, Fact], index: EntryIndex) -> tuple[int, int, list[str]]:
    """(pairs of distinct events wrongly merged, pairs saved, examples)."""
    pairs = _lookalike_pairs(groups, facts)
    merged = 0
    examples = []
    for a, b in pairs:
        ha = {id(e): e for e in index.holders(facts[a])}
        hb = {id(e): e for e in index.holders(facts[b])}
        both = ha.keys() & hb.keys()
        if both and not (ha.keys() - hb.keys()) and not (hb.keys() - ha.keys()):
            merged += 1
            examples.append(f"{facts[a].text!r} + {facts[b].text!r} -> {ha[next(iter(both))].text!r}")
    return merged, len(pairs), examples


def distinct_collapsed(
    groups: list[list[str]], facts: dict[str, Fact], index: EntryIndex
) -> tuple[int, int, list[str]]:
    """(pairs of distinct look-alike events of which one is held by a live entry and the other by none, pairs saved,
    examples): the pair taken for one event, by a merge that kept one of them or by dropping one. A drop for another
    reason counts too (the loss metrics count it as well); a pair of which neither lives is a loss, not a collapse."""
    pairs = _lookalike_pairs(groups, facts)
    collapsed = 0
    examples = []
    for a, b in pairs:
        live_a = any(e.live for e in index.holders(facts[a]))
        live_b = any(e.live for e in index.holders(facts[b]))
        if live_a != live_b:
            collapsed += 1
            kept, gone = (a, b) if live_a else (b, a)
            examples.append(f"{facts[gone].text!r} gone, {facts[kept].text!r} lives")
    return collapsed, len(pairs), examples


def stale_first(
    corrections: list[Correction], texts: dict[str, str], search: Callable[[str, int], list[str]], now: datetime
) -> tuple[int, int, int, list[str]]:
    """(answered stale first, corrections due, found in neither version, examples)."""
    stale = missed = due = 0
    examples = []
    for c in corrections:
        if c.at > now:
            continue
        due += 1
        old, new = Fact(texts[c.old_key]), Fact(texts[c.new_key])
        verdict = "missed"
        for hit in search(c.question, K):
            entry = Entry(hit)
            if holds(new, entry):
                verdict = "current"
                break
            if holds(old, entry):
                verdict = "stale"
                break
        stale += verdict == "stale"
        missed += verdict == "missed"
        if verdict == "stale":
            examples.append(f"{c.question!r}: {old.text!r} before {new.text!r}")
    return stale, due, missed, examples


def recalled(
    questions: list[Question], facts: dict[str, Fact], search: Callable[[str, int], list[str]]
) -> dict[str, bool]:
    """Each answerable question's text -> whether the top ``K`` hold a fact of every piece of its evidence."""
    out: dict[str, bool] = {}
    for q in questions:
        evidence = [[facts[k] for k in keys if k in facts] for keys in q.evidence]
        if not evidence or any(not e for e in evidence):
            continue
        top = [Entry(t) for t in search(q.text, K)]
        out[q.text] = all(any(holds(f, e) for f in keys for e in top) for keys in evidence)
    return out


def reversible(before: list[Kept], after: list[Kept]) -> tuple[int, int]:
    """(live texts a consolidation took out or rewrote that are still kept restorable, all it took out)."""
    was = Counter(k.text for k in before if k.live)
    now_live = Counter(k.text for k in after if k.live)
    restorable = Counter(k.text for k in after if not k.live)
    gone = was - now_live
    kept = sum(min(n, restorable[t]) for t, n in gone.items())
    return kept, sum(gone.values())


def snapshot(
    scenario: Scenario,
    now: datetime,
    kept: list[Kept],
    search: Callable[[str, int], list[str]],
    saved: set[str],
) -> Snapshot:
    """Every metric but tokens and reversibility, after the consolidation at ``now``; ``saved``: keys saved so far."""
    index = EntryIndex(Entry(k.text, k.live) for k in kept)
    scored = {
        k: Fact(t) for k, t in scenario.facts.items() if k in saved and scenario.kinds[k] != "stale"
    }  # the stale versions are meant to go
    every = {k: Fact(t) for k, t in scenario.facts.items() if k in saved}
    s = Snapshot()
    spec_lost, facts_lost, spec_live, facts_live, lost = loss(scored, index)
    n = len(scored)
    s.put("specifics_lost", spec_lost, n, lost[:5])
    s.put("facts_lost", facts_lost, n, lost[:5])
    s.put("specifics_missing_live", spec_live, n)
    s.put("facts_missing_live", facts_live, n)
    one, groups = dup_one_live(scenario.dup_groups, every, index)
    s.put("dup_groups_one_live", _ratio(one, groups), groups)
    merged, pairs, wrong = distinct_merged(scenario.lookalike_groups, every, index)
    s.put("distinct_merged", merged, pairs, wrong[:5])
    collapsed, pairs, gone = distinct_collapsed(scenario.lookalike_groups, every, index)
    s.put("distinct_collapsed", collapsed, pairs, gone[:5])
    stale, due, missed, examples = stale_first(scenario.corrections, scenario.facts, search, now)
    s.put("stale_first", stale, due, examples[:5])
    s.put("correction_missed", missed, due)
    s.recalled = recalled(scenario.questions, every, search)
    s.put("recall_at_10", _ratio(sum(s.recalled.values()), len(s.recalled)), len(s.recalled))
    s.put("live_entries", sum(k.live for k in kept), len(kept))
    return s


def fact_holds(fact: str, entry: str) -> bool:
    """Does ``entry`` hold ``fact`` (every specific, 60 % of the content words)? For tests and one-off checks."""
    return holds(Fact(fact), Entry(entry))
