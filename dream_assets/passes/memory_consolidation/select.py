"""Candidate gating for memory consolidation: which entries the model is allowed to see this cycle.

Spec "Pass 1 — Memory consolidation", "Candidate gating": an entry is eligible only if it is (a) new or changed since
its last review, or (b) a member of a near-duplicate cluster that is not settled. Everything else is withheld, and
therefore cannot be archived this cycle — exposure compounds, so each entry should face roughly one decision per
content change, not one per cycle.

Review state is a content fingerprint stamped in the entry's metadata (``consolidationReviewedHash``): any write path
(reinforcement, a tool edit, a prior merge) changes it and re-opens the entry, importance decay does not. A cluster
whose members are all reviewed and unchanged was shown to the model together on the cycle that stamped it, so it is
not re-offered; one new or edited member re-opens the whole cluster. When the near-duplicate scan fails the gate
degrades to unreviewed-only, never to the whole corpus.

Settled means "this exact set was shown together and left apart", not "every member is reviewed": a merged entry is
stamped reviewed when it is written, and so is an entry shown on its own, yet neither was ever shown next to the
entries it now clusters with. So each member of a cluster left apart carries the cluster's member-set id
(``consolidationClusterSet``), when it was left apart and how many times (``consolidationClusterLeftAt``,
``consolidationClusterDeclined``). A cluster is settled only when every member is reviewed and carries its set id;
or when every member is reviewed and was last reviewed in one and the same model call (``consolidationReviewedIn``:
that call showed them all, so the model could have merged any of them and did not; a merged entry carries the call
that wrote it, in which all its cluster's other members were shown). Any other membership is a new question and is
offered: the pass's own merges reshape the clusters of their neighbours, and without the call stamp every such
reshaped cluster of untouched entries would be asked again. A settled cluster is offered again once its cooldown has
passed (``ConsolidationSettledCooldown``, doubled for each further time it was left apart, at most 16 times), with
a note in the prompt; such a re-offered cluster is merge-only (the pass ignores a removal of its members).

A cluster is settled under the rules that decided it: every entry a call showed (and every entry a call wrote) carries
the stamp of the rules it was judged by (``consolidationRules``: the backend and model, the directive, and for the
offline backend the version of its merge rules, ``OFFLINE_RULES_VERSION``). A settled cluster whose members do not all
carry the current stamp is re-offered at once, merge-only like any re-offered cluster: a new model, a new directive or
better offline rules heal what older ones left apart, instead of leaving it settled until its cooldown. A merge a
person rejected in review is stamped ``PERSON_RULES``: their decision stands whatever the rules become.

A cluster too large for one call's window is offered in parts (``split_cluster``); each part is judged like a cluster
by its own stamps. Its members shown in a part and the entries merged from a part carry the cluster's lineage
(``consolidationSplitOf``), which joins them into one cluster on the next selection even when the scan no longer
does: merged parts are themselves merged, and no part is left behind as a question never asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import dream_assets.passes.memory_consolidation.offline as offline
from dream_assets.llm.offline import OFFLINE_BACKEND
from dream_assets.model import MemoryEntry, iso, parse_ts
from dream_assets.passes.left_apart import CLUSTER_DECLINED_KEY as CLUSTER_DECLINED_KEY  # the stamps' one home
from dream_assets.passes.left_apart import (
    CLUSTER_LEFT_AT_KEY,
    CLUSTER_SET_KEY,
    PERSON_RULES,
    REVIEWED_KEY,
    RULES_KEY,
    cluster_set_id,
    declined_count,
    review_hash,
)
from dream_assets.passes.left_apart import left_apart_stamps as left_apart_stamps
from dream_assets.store.connection import StoreError
from dream_assets.text.content_hash import stable_hash
from dream_assets.text.similarity import DuplicateClusters
from dream_assets.text.tokens import content_tokens

#: Metadata of every entry a model call showed (and of the merged entries it wrote): which call, and when.
REVIEWED_IN_KEY = "consolidationReviewedIn"
#: Metadata of the entries of a cluster offered in parts (the members shown in a part, the entries merged from one):
#: the cluster's lineage, so the merged parts are offered together again even when the scan no longer joins them.
SPLIT_KEY = "consolidationSplitOf"
#: The cooldown of a settled cluster doubles each time it is left apart again, up to this many times the option.
COOLDOWN_MAX_FACTOR = 16


def rules_stamp(model: str, directive: str) -> str:
    """The stamp of the rules a consolidation call judges by: the backend and model that answer (``model_identity``),
    the directive they are given, and for the offline backend the version of its merge rules, bumped whenever they
    change. A settled cluster stamped with other rules is a question not asked of these ones."""
    version = offline.OFFLINE_RULES_VERSION if model == OFFLINE_BACKEND else ""
    return stable_hash("consolidation-rules", [model, version, directive])[:16]


def reviewed_in_stamp(cycle_id: str, now: datetime, call: int = 1) -> str:
    """The value of ``consolidationReviewedIn`` for one model call: its time, cycle and, after the first, its number
    within the pass run (a run that batches to the window makes several calls, each showing different entries)."""
    return f"{iso(now)} {cycle_id}" + (f" #{call}" if call > 1 else "")


def _shown_in_one_call(members: Sequence[MemoryEntry], cooldown: timedelta) -> datetime | None:
    """When a cluster whose members were all last reviewed in one model call may be offered again; None when they
    were not (or the stamp is unreadable): then the cluster is a new question."""
    stamps = {m.metadata.get(REVIEWED_IN_KEY, "") for m in members}
    if len(stamps) != 1 or not (stamp := stamps.pop()):
        return None
    try:
        return parse_ts(stamp.split(" ", 1)[0]) + cooldown_for(0, cooldown)
    except (TypeError, ValueError):
        return None


def cooldown_for(declined: int, cooldown: timedelta) -> timedelta:
    """The wait before a cluster left apart ``declined`` times is offered again."""
    return cooldown * min(COOLDOWN_MAX_FACTOR, 2 ** max(0, declined - 1))


def _settled_until(members: Sequence[MemoryEntry], cooldown: timedelta) -> datetime | None:
    """When a cluster whose members all carry its set id may be offered again (None: its stamps are unreadable,
    so it is offered now)."""
    latest: datetime | None = None
    declined = 0
    for m in members:
        try:
            left = parse_ts(m.metadata.get(CLUSTER_LEFT_AT_KEY, ""))
        except (TypeError, ValueError):
            return None
        latest = left if latest is None or left > latest else latest
        declined = max(declined, declined_count(m.metadata))
    return None if latest is None else latest + cooldown_for(declined, cooldown)


def kept_apart_by_a_person(members: Sequence[MemoryEntry], now: datetime, cooldown: timedelta) -> bool:
    """The members carry one left-apart set a person stamped (a merge of theirs rejected in review, or undone) and
    its cooldown has not passed: they stay apart even where their words are the same (the exact-duplicate fold)."""
    sets = {m.metadata.get(CLUSTER_SET_KEY) for m in members}
    if len(sets) != 1 or not next(iter(sets)) or any(m.metadata.get(RULES_KEY) != PERSON_RULES for m in members):
        return False
    until = _settled_until(members, cooldown)
    return until is not None and now < until


def is_reviewed(entry: MemoryEntry, current_hash: str | None = None) -> bool:
    """Reviewed and unchanged since: the stamp equals the fingerprint of the entry as it is now."""
    stamp = entry.metadata.get(REVIEWED_KEY)
    return bool(stamp) and stamp == (current_hash if current_hash is not None else review_hash(entry))


@dataclass
class Selection:
    """What the model may see this cycle, and the review fingerprint of each shown entry as it was shown."""

    live: int
    eligible: dict[str, MemoryEntry]  # id -> the entry as shown (the only ids a response can resolve to)
    shown_hash: dict[str, str]  # id -> review fingerprint when shown (compared again at apply time)
    clusters: list[list[str]]  # open near-duplicate clusters offered to the model
    unreviewed: int  # entries new or changed since their last review
    settled_clusters: int  # clusters withheld because every member is reviewed and unchanged
    scan_method: str = ""
    warnings: list[str] = field(default_factory=list)
    backlog: int = 0  # eligible but over the per-call cap: not shown, not stamped, next cycle
    #: Open clusters that cannot be shown even in parts (not two of their members fit one call): said why.
    too_large: list[list[str]] = field(default_factory=list)
    reoffered: list[list[str]] = field(default_factory=list)  # shown clusters that were settled before (merge-only)
    #: Of ``reoffered``, those offered for their cooldown alone (not for a change of rules): they ride along with a
    #: question the call asks anyway, never make a call of their own.
    riders: list[list[str]] = field(default_factory=list)
    #: Open clusters too large for one call alone, offered in parts (each part is a cluster line of its own).
    split: int = 0
    call: int = 1  # which call of the pass run shows it (set by the pass before the call)
    #: Member id -> lineage (``SPLIT_KEY``) of the split cluster whose offered part it is in.
    part_of: dict[str, str] = field(default_factory=dict)
    #: The further calls of the same selection (``batches`` > 1), each with what it shows and what waits after it.
    later: list[Selection] = field(default_factory=list)
    #: The stamp of the rules the calls judge by (``rules_stamp``), stamped on what they show and write ("": none).
    rules: str = ""

    @property
    def withheld(self) -> int:
        return self.live - len(self.eligible)

    def entries(self) -> list[MemoryEntry]:
        return list(self.eligible.values())


def _with_lineage(clusters: Sequence[Sequence[str]], live: Sequence[MemoryEntry]) -> list[list[str]]:
    """The scan's clusters, with the entries of one split cluster's lineage (``SPLIT_KEY``) and every cluster that
    holds one of them joined into one: merged parts stay a question together. Members in corpus order, clusters by
    their first member."""
    lineages: dict[str, list[str]] = {}
    for e in live:
        if key := e.metadata.get(SPLIT_KEY):
            lineages.setdefault(key, []).append(e.id)
    groups = [ids for ids in lineages.values() if len(ids) >= 2]
    if not groups:
        return [list(c) for c in clusters]
    parent: dict[str, str] = {}

    def find(i: str) -> str:
        parent.setdefault(i, i)
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for members in [*clusters, *groups]:
        for i in members[1:]:
            parent[find(i)] = find(members[0])
        find(members[0])
    joined: dict[str, list[str]] = {}
    for e in live:
        if e.id in parent:
            joined.setdefault(find(e.id), []).append(e.id)
    return [ids for ids in joined.values() if len(ids) >= 2]


def _within_scopes(
    clusters: Iterable[Sequence[str]], by_id: Mapping[str, MemoryEntry], scope: Callable[[MemoryEntry], str] | None
) -> list[list[str]]:
    """The clusters of live ids split by scope (members in cluster order, parts in order of their first member);
    parts of fewer than two members are dropped: a near-duplicate in another scope is no merge candidate."""
    out: list[list[str]] = []
    for cluster in clusters:
        members = [i for i in cluster if i in by_id]
        if scope is None:
            parts = [members]
        else:
            grouped: dict[str, list[str]] = {}
            for i in members:
                grouped.setdefault(scope(by_id[i]), []).append(i)
            parts = list(grouped.values())
        out += [part for part in parts if len(part) >= 2]
    return out


def split_cluster(
    members: Sequence[str], cost: Callable[[str], int], budget: int, tokens: Callable[[str], set[str]]
) -> list[list[str]]:
    """Parts of a cluster too large for one call, each fitting ``budget`` and holding the most similar members
    together: a part starts from the earliest member not placed yet and takes, while it fits, the member most
    similar to the part (mean Jaccard over content tokens; ties by corpus order). A member over the budget alone,
    and a last member with no partner left, is in no part (it may be shown on its own). Members keep corpus order."""
    sets = {i: tokens(i) for i in members}

    def similarity(a: str, b: str) -> float:
        inter = len(sets[a] & sets[b])
        return inter / (len(sets[a]) + len(sets[b]) - inter) if inter else 0.0

    rest = [i for i in members if cost(i) <= budget]
    order = {i: n for n, i in enumerate(members)}
    parts: list[list[str]] = []
    while len(rest) >= 2:
        seed = rest.pop(0)
        part, spent = [seed], cost(seed)
        affinity = {i: similarity(seed, i) for i in rest}
        while True:
            fitting = [i for i in rest if spent + cost(i) <= budget]
            if not fitting:
                break
            best = max(fitting, key=lambda i: (affinity[i], -order[i]))
            part.append(best)
            rest.remove(best)
            spent += cost(best)
            for i in rest:
                affinity[i] += similarity(best, i)
        if len(part) >= 2:
            parts.append(sorted(part, key=order.__getitem__))
    return parts


def select_candidates(
    live: Sequence[MemoryEntry],
    scan: Callable[[], DuplicateClusters],
    max_entries: int | None = None,
    *,
    review_all: bool = False,
    now: datetime | None = None,
    cooldown: timedelta = timedelta(days=7),
    cost: Callable[[MemoryEntry], int] | None = None,
    budget: int | None = None,
    exclude: set[str] | frozenset[str] = frozenset(),
    batches: int = 1,
    scope: Callable[[MemoryEntry], str] | None = None,
    rules: str | None = None,
    singles_sent: bool = True,
) -> Selection:
    """Gate the live corpus. ``scan`` returns the near-duplicate clusters of the live corpus (the store's
    duplicate-candidate scan); when it raises, the selection is the unreviewed entries alone, with a warning.

    ``max_entries`` caps what one call shows (whole open clusters first, then single new or changed entries, in
    corpus order); the rest is not shown and not stamped, so it stays eligible for the next cycle.
    ``review_all`` (a forced run, asked for by a person) treats every entry as unreviewed, once. A settled cluster
    is offered again when ``now`` is past its cooldown (never without ``now``).

    A cluster that fits one call is never split, and the members of an open cluster left for a later call are not
    shown on their own meanwhile, so what the model decides does not depend on the cap; when not even one cluster
    fits the entry cap, the first is shown whole anyway so the backlog always moves.

    ``budget`` (with ``cost``, an entry's tokens in the prompt) caps what one call shows in tokens, the same way: whole
    clusters, then single entries, while the total fits. A cluster over the budget alone is offered in parts
    (``split_cluster``), each part a cluster of its own that is settled, re-offered or open by its own stamps; a merge
    of a part is a normal merge, and the merged entry clusters with the rest on the next selection. A cluster of which
    not two members fit one call is ``too_large`` (its members wait, with the reason, until the window is raised); an
    entry over the budget alone likewise waits.

    ``batches`` plans that many calls from one scan (each call's entries disjoint from the earlier ones'): the first
    is the selection itself, the others ``later``; each one's ``backlog`` is what waits after it.

    A settled cluster past its cooldown is offered again only beside a question the call asks anyway: an open
    cluster, a cluster settled under other rules, or (``singles_sent``: the call shows single new or changed entries;
    one call per cluster does not) a new or changed entry. On its own it is the question already answered, about the
    same bytes, so an idle agent costs no model call.

    ``scope`` (dream_assets/scope.py): the wall an entry is behind. A cluster holds entries of one scope only: the
    scan's clusters are split by scope, and a part of one entry is no cluster.

    ``rules`` (``rules_stamp``) is the stamp of the rules this run judges by: a settled cluster a member of which
    carries another stamp (or none) is re-offered now, past its cooldown."""
    hashes = {e.id: review_hash(e) for e in live}
    by_id = {e.id: e for e in live}
    really_unreviewed = {e.id for e in live if not is_reviewed(e, hashes[e.id])}
    # ``exclude``: what an earlier call of the same run already showed (a forced run offers each entry once)
    unreviewed = (set(by_id) - exclude) if review_all else really_unreviewed
    warnings: list[str] = []
    method = ""
    found: DuplicateClusters | None = None
    try:
        found = scan()
    except StoreError:
        raise  # the store itself is busy or damaged: the pass fails (and says so), it does not carry on around it
    except Exception as exc:  # noqa: BLE001 - any scan failure degrades the same way (spec: never the whole corpus)
        warnings.append(
            f"near-duplicate scan failed ({type(exc).__name__}: {exc}); only new or changed entries are "
            "eligible this cycle"
        )
    tokens = budget if budget is not None and cost is not None else None
    costs: dict[str, int] = {}

    def cost_of(ids: Iterable[str]) -> int:
        assert cost is not None
        return sum(costs.setdefault(i, cost(by_id[i])) for i in ids)

    def judge(members: list[str]) -> str:
        """open (new or changed, or never shown together), reoffered (settled, past its cooldown) or settled."""
        if any(i in unreviewed for i in members):
            return "open"
        set_id = cluster_set_id(members)
        entries = [by_id[i] for i in members]
        if all(e.metadata.get(CLUSTER_SET_KEY) == set_id for e in entries):
            until = _settled_until(entries, cooldown)
        elif (until := _shown_in_one_call(entries, cooldown)) is None:
            return "open"
        if rules is not None and any(e.metadata.get(RULES_KEY) not in (rules, PERSON_RULES) for e in entries):
            return "rules"  # settled under other rules: a question these rules were never asked (offered again)
        return "reoffered" if now is not None and (until is None or now >= until) else "settled"

    clusters: list[list[str]] = []  # what may be shown: whole clusters and the parts of split ones
    reoffered: list[list[str]] = []
    riders: list[list[str]] = []
    part_of: dict[str, str] = {}
    in_parts: set[str] = set()  # members of an offered part or a too-large cluster: never shown on their own
    waiting: list[list[str]] = []  # open clusters whose members wait when not shown
    too_large: list[list[str]] = []
    settled = split = 0
    # Each cluster with its parts (None: it fits one call) and the verdict on each: judged first, so that a settled
    # cluster past its cooldown is offered again only beside a question the call asks anyway.
    judged: list[tuple[list[str], list[tuple[list[str], str]] | None, str]] = []
    if found is not None:
        method = found.method
        if found.warning:
            warnings.append(found.warning)
        for members in _within_scopes(_with_lineage(found.clusters, live), by_id, scope):
            if tokens is not None and cost_of(members) > tokens:
                parts = split_cluster(
                    members, lambda i: cost_of([i]), tokens, lambda i: content_tokens(by_id[i].content)
                )
                judged.append((members, [(part, judge(part)) for part in parts], judge(members) if not parts else ""))
            else:
                judged.append((members, None, judge(members)))
    verdicts_given = {v for _, parts, v in judged for v in ([v] if parts is None else [pv for _, pv in parts])}
    asked = review_all or bool(verdicts_given & {"open", "rules"}) or (singles_sent and bool(unreviewed))

    def kept(verdict: str) -> str:
        """A re-offer alone would be a call of its own: it waits, settled, for a run that asks something."""
        return "settled" if verdict == "reoffered" and not asked else verdict

    for members, parts, verdict in judged:
        verdict = kept(verdict)
        if parts is not None:
            parts = [(part, kept(v)) for part, v in parts]
            if not parts:
                if verdict != "settled":
                    too_large.append(members)
                    in_parts.update(members)  # never shown on their own either
                else:
                    settled += 1
                continue
            offered = [(part, v) for part, v in parts if v != "settled"]
            if not offered:
                settled += 1
                continue
            split += 1
            lineage = min(
                (by_id[i].metadata[SPLIT_KEY] for i in members if by_id[i].metadata.get(SPLIT_KEY)),
                default=cluster_set_id(members),
            )
            for part, v in offered:
                part_of.update(dict.fromkeys(part, lineage))
                clusters.append(part)
                in_parts.update(part)
                if v in ("reoffered", "rules"):
                    reoffered.append(part)
                if v == "reoffered":
                    riders.append(part)
            if any(i in really_unreviewed for i in members):
                waiting.append(members)
            continue
        if verdict == "settled":
            settled += 1  # shown together and left apart: not asked again before its cooldown
            continue
        clusters.append(members)
        if verdict in ("reoffered", "rules"):
            reoffered.append(members)
        if verdict == "reoffered":
            riders.append(members)
    cap = max_entries if max_entries and max_entries > 0 else None
    # Only what is really new or changed waits for a later cycle: what a forced run leaves unshown stays reviewed.
    waiting += [c for c in clusters + too_large if not review_all or any(i in really_unreviewed for i in c)]
    must_review = really_unreviewed | {i for c in waiting for i in c}
    position = {e.id: n for n, e in enumerate(live)}
    clustered = in_parts.union(*clusters) if clusters else set(in_parts)
    # Single new or changed entries, in corpus order: the first call takes every one that still fits after the
    # clusters; each later call takes them in order while they fit (one pass over the corpus for all the calls).
    singles = [e.id for e in live if e.id in unreviewed and e.id not in clustered]
    pending = list(clusters)  # whole clusters and parts not shown yet, in scan order
    placed: set[str] = set()  # shown by an earlier batch of this selection
    reviewed_so_far = 0  # of must_review, how many the batches so far show
    planned: list[Selection] = []
    for _ in range(max(1, batches)):
        eligible_ids: set[str] = set()
        shown_clusters: list[list[str]] = []
        spent = 0
        waiting_clusters = []
        for cluster in pending:
            fits = True
            if tokens is not None:
                extra = cost_of(cluster)
                fits = extra <= tokens and spent + extra <= tokens
            if fits and cap is not None and len(eligible_ids) + len(cluster) > cap and eligible_ids:
                fits = False
            if not fits:
                waiting_clusters.append(cluster)
                continue
            if tokens is not None:
                spent += cost_of(cluster)
            eligible_ids.update(cluster)
            shown_clusters.append(cluster)
        pending = waiting_clusters
        left = []
        for n, i in enumerate(singles):
            if cap is not None and len(eligible_ids) >= cap:
                left.extend(singles[n:])
                break
            if tokens is not None:
                extra = cost_of([i])
                if extra > tokens:
                    continue  # over the budget alone: it waits, with the window as it is
                if spent + extra > tokens:
                    if planned:  # a later call stops at the first entry that does not fit
                        left.extend(singles[n:])
                        break
                    left.append(i)
                    continue
                spent += extra
            eligible_ids.add(i)
        singles = left
        if planned and not eligible_ids:
            break
        placed |= eligible_ids
        reviewed_so_far += len(eligible_ids & must_review)
        # Keep corpus order (created_at, id) so everything downstream is deterministic.
        eligible = {i: by_id[i] for i in sorted(eligible_ids, key=position.__getitem__)}
        planned.append(
            Selection(
                live=len(live),
                eligible=eligible,
                shown_hash={i: hashes[i] for i in eligible},
                clusters=shown_clusters,
                unreviewed=len(really_unreviewed),
                settled_clusters=settled,
                scan_method=method,
                warnings=warnings,
                backlog=len(must_review) - reviewed_so_far,
                reoffered=[c for c in reoffered if c in shown_clusters],
                riders=[c for c in riders if c in shown_clusters],
                too_large=too_large,
                split=split,
                part_of={i: part_of[i] for i in eligible if i in part_of},
                rules=rules or "",
            )
        )
        if not pending and not singles:
            break
    planned[0].later = planned[1:]
    return planned[0]
