"""Memory consolidation's offline answers: what the offline backend says to a consolidation and to a merge repair
(``ModelCall.offline`` of ``MEMORY_CONSOLIDATION`` and ``MERGE_REPAIR``), computed from the structured inputs the
pass builds next to its prompt.

``memory_consolidation``: ``{"entries": [{"id", "content", "category", "tags": [...], "subject": {...}}],
    "clusters": [[id, ...]]}``
    Per near-duplicate cluster and per category in it, one merge of the members that are one fact (an id already
    used by an earlier cluster is not used twice): only entries of the same category merge, so the merged
    category is one every source agrees on (``people/jon`` never merges with ``people/gina``); members are taken
    in order while they describe no distinct moment with any taken before (``distinct_moments``: different
    subject times, each states a name, number or date the other lacks, frame dates set aside, or look-alike
    sentences name another change, not told with other words in its place, or in an episodic category another
    topic). The merged text keeps every sentence of every member in member order; a sentence equal to an earlier
    one after white-space, case and final-punctuation normalisation is kept once, and so is one another kept
    sentence carries whole (text/restated.py: "The user prefers dark mode." and "User prefers dark mode!"). Tags =
    the union in order, sourceIds = the members taken. ``toDelete`` is always empty: no ephemeral removals, no
    invented facts. A change of these rules bumps ``OFFLINE_RULES_VERSION``.
``cluster_check``: the inputs of ``memory_consolidation`` with one cluster
    "merge" with the merged text above when the rules take every member into one merge, "keep" otherwise.
``merge_repair``: ``{"merged": str, "sources": [{"id", "content"}], "missing": [str]}``
    The merged text followed by every source sentence that contains a missing string (a whole source when
    the string spans sentences). A string found in no source is not invented, so the repair still fails the
    coverage check and the sources are kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from dream_assets.text.coverage import (
    BASELINE_VOCABULARY,
    CoverageSource,
    check_merge_coverage,
    content_sentences,
    content_stems,
    specifics_of,
)
from dream_assets.text.framing import FRAMING_WORDS, without_frame_dates
from dream_assets.text.restated import without_restated_sentences
from dream_assets.text.sentence_merge import merge_keeping_every_sentence, sentence_key, split_sentences
from dream_assets.text.tokens import content_token_list, stem, tokenize

#: The version of the offline merge rules (``distinct_moments`` and the merged text). Bump it whenever they change: a
#: cluster the offline backend left apart under older rules is offered again (passes/memory_consolidation/select.py).
OFFLINE_RULES_VERSION = "4"


def _subject(entry: Mapping[str, Any]) -> str:
    return json.dumps(entry.get("subject"), sort_keys=True) if entry.get("subject") else ""


_NUMBER = re.compile(r"(?<![\w.])[0-9]+(?:[.,:][0-9]+)*")
_KIND_GROUP = {"date": "when", "number": "when", "range": "when", "name": "who", "acronym": "who"}


def _lacking(text: str, other: str, category: str) -> set[str]:
    """The kinds ("when": a date or number, "who": a name) of the specifics of ``text`` that ``other`` lacks."""
    kinds = {"when"} if set(_NUMBER.findall(text)) - set(_NUMBER.findall(other)) else set()  # one digit counts too
    missing = set(check_merge_coverage([CoverageSource(text, category)], other, BASELINE_VOCABULARY).missing)
    folded = other.casefold()
    # Capitals are the merge check's business, not a sign of another moment: "bob" and "Bob" are one person.
    missing = {m for m in missing if not re.search(rf"(?<!\w){re.escape(m.casefold())}(?!\w)", folded)}
    if not missing:
        return kinds
    return kinds | {_KIND_GROUP.get(sp.kind, sp.kind) for sp in specifics_of(text, category) if sp.text in missing}


#: Verbs of change, by the change they name (words of one class are one change: "started" and "began" a course):
#: a sentence that names another change than its look-alike tells another moment ("Dave opened his own car shop",
#: "Dave works at a car shop", "Dave quit working at a car shop").
_CHANGE_CLASSES = {
    "start": "start begin began begun launch open found founded establish commence",
    "end": "close stop finish end cancel cancelled shut",
    "leave": "leave left quit resign",
    "join": "join enroll enrol",
    "move": "move relocate",
    "buy": "buy bought purchase acquire",
    "sell": "sell sold",
    "marry": "marry wed",
    "divorce": "divorce",
    "hire": "hire recruit",
    "fire": "fire dismiss",
    "retire": "retire",
    "graduate": "graduate",
    "adopt": "adopt",
    "become": "become became",
    "lose": "lose lost",
    "switch": "switch",
    "promote": "promote",
    "transfer": "transfer transferred",
}
_CHANGE_OF = {stem(word): change for change, words in _CHANGE_CLASSES.items() for word in words.split()}
#: Categories of episodic memories (and everything below them): each entry is one moment, so two whose look-alike
#: sentences each say something the other does not (another topic: "the quarterly planning", "the vendor call")
#: are two moments.
EVENT_CATEGORIES = ("episodes", "events")


def _changes(sentence: str) -> frozenset[str]:
    return frozenset(c for c in (_CHANGE_OF.get(stem(t)) for t in tokenize(sentence)) if c)


#: Past tenses that do not end in -ed: a verb of change is told again with a verb of the same form ("lost her job",
#: "misplaced her job"; "started a class", "took up a class"), another fact with a verb of another form ("opened a
#: shop", "works at a shop").
_IRREGULAR_PAST = frozenset(
    "began became bought brought built came caught chose did drew drove fell felt found gave got grew had heard held "
    "hid kept knew led left lent lost made meant met paid put quit ran rode rose said sang sat saw sent set shut sold "
    "spent spoke stood stole swam taught thought threw told took tore understood wed went woke won wore wrote".split()
)
#: How many words may stand in for one verb of change in a rewording of it ("signed up for" for "joined").
_REWORDING_SPAN = 3


def _form(word: str) -> str:
    """The grammatical form of a word, read from its ending: past, -ing, -s, or the base form."""
    if word in _IRREGULAR_PAST or (len(word) > 4 and word.endswith("ed")):
        return "past"
    if len(word) > 4 and word.endswith("ing"):
        return "ing"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return "s"
    return "base"


def _content_words(sentence: str) -> list[tuple[str, str]]:
    """(word, stem) of the words that carry ``sentence``'s content, in order: no stopwords, framing words or
    numbers (``content_stems``' words, kept in their order), so a frame or a date does not shift the alignment."""
    out = []
    for token in content_token_list(sentence):
        st = stem(token)
        if st not in FRAMING_WORDS and not any(c.isdigit() for c in token):
            out.append((token, st))
    return out


def _stand_in(words: Sequence[tuple[str, str]], n: int, other: Sequence[tuple[str, str]]) -> list[int] | None:
    """Where ``other`` says something in place of ``words[n]``: the positions of ``other`` between the words the two
    share next to it (the nearest shared word before it and after it; at an end of the sentence, the one there is),
    when the stretch of ``words`` there and the stretch of ``other`` are each one to :data:`_REWORDING_SPAN` words.
    None when there is no such place: the word is said where the other says nothing, or the two are not worded alike
    around it."""
    theirs = [st for _, st in other]
    mine = {st for _, st in words}
    before = next((i for i in range(n - 1, -1, -1) if words[i][1] in theirs), None)
    after = next((i for i in range(n + 1, len(words)) if words[i][1] in theirs), None)
    if before is None and after is None:
        return None
    low = before + 1 if before is not None else 0
    high = after if after is not None else len(words)
    if high - low > _REWORDING_SPAN:
        return None
    starts = [j for j, st in enumerate(theirs) if before is not None and st == words[before][1]]
    ends = [j for j, st in enumerate(theirs) if after is not None and st == words[after][1]]
    if starts and ends:
        return next((list(range(p + 1, q)) for p in starts for q in ends if 0 < q - p - 1 <= _REWORDING_SPAN), None)
    # At an end of the sentence: the words of ``other`` next to the one shared word, up to a word both say.
    for anchor in starts or ends:
        steps = range(anchor + 1, len(theirs)) if starts else range(anchor - 1, -1, -1)
        span: list[int] = []
        for j in steps:
            if theirs[j] in mine or len(span) == _REWORDING_SPAN:
                break
            span.append(j)
        if span:
            return sorted(span)
    return None


def _change_reworded(sentence: str, other: str) -> bool:
    """Whether the verbs of change that ``sentence`` and ``other`` do not share are one change told with other
    words: each such verb stands, between the same shared words, where the other sentence has a few other words
    that name no change, one of them in the same form ("Gina lost her job" and "Gina misplaced her job", "John
    started a yoga class" and "John took up a yoga class", "a close bond" and "a near bond"; clauses may be in
    another order). A verb of change said where the other says nothing ("works at a shop", "quit working at a
    shop"), next to another change, or in place of words of another form ("opened his own shop", "works at a shop")
    tells another fact."""
    words = (_content_words(sentence), _content_words(other))
    classes = ([_CHANGE_OF.get(st) for _, st in words[0]], [_CHANGE_OF.get(st) for _, st in words[1]])
    for side in (0, 1):
        own, theirs = classes[side], set(classes[1 - side])
        for n, change in enumerate(own):
            if change is None or change in theirs:
                continue
            span = _stand_in(words[side], n, words[1 - side])
            if span is None or any(classes[1 - side][j] for j in span):
                return False
            if _form(words[side][n][0]) not in {_form(words[1 - side][j][0]) for j in span}:
                return False
    return True


def _told_differently(a: str, b: str, category: str) -> bool:
    """Some sentence of ``a`` and some sentence of ``b`` look alike (they share two content words or more, and at
    least half those of the longer) but tell another moment: they name other changes (:data:`_CHANGE_CLASSES`) that
    are not one change told with other words (:func:`_change_reworded`), or, in an episodic category, each has
    content words the other lacks. Framing ("said again", "mentioned"), numbers and calendar words are not content
    words here: they are the specifics check's."""
    episodic = any(category == root or category.startswith(root + "/") for root in EVENT_CATEGORIES)
    others = [(t, st) for t in content_sentences(b) if (st := content_stems(t))]
    for sentence in content_sentences(a):
        own = content_stems(sentence)
        for other_sentence, other in others:
            shared = len(own & other)
            # One shared word (the person's name in "John has graduated." and "John said so to Maria.") is no
            # likeness.
            if shared < 2 or 2 * shared < max(len(own), len(other)):
                continue
            if episodic and own - other and other - own:
                return True
            if _changes(sentence) != _changes(other_sentence) and not _change_reworded(sentence, other_sentence):
                return True
    return False


#: Words that put a value right: "Correction from Donna: Donna has 15000 in savings, not 12000."
_PUT_RIGHT = re.compile(r"\b(?:corrections?|corrected|actually|in\s+fact|not|no\s+longer)\b|n['’]t\b", re.IGNORECASE)


def _put_right(a: str, b: str, category: str) -> bool:
    """One of ``a`` and ``b`` puts a value right and states one the other lacks: a correction and the fact it
    corrects, which the contradiction sweep decides between (merged, the entry would say both and rank as the old)."""
    right_a, right_b = bool(_PUT_RIGHT.search(a)), bool(_PUT_RIGHT.search(b))
    if right_a == right_b:
        return False
    correction, other = (a, b) if right_a else (b, a)
    return bool(_lacking(correction, other, category))


def distinct_moments(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two entries of one cluster describe different real-world moments or facts: their subject times
    differ; both state a specific of the same kind the other lacks (each its own date or number: "camping on 7 May"
    and "camping on 20 June", "2 kids" and "3 kids"; each its own name: another counterpart) once frame dates are
    set aside ("said again on 12 May that ..." is when the fact came up, not what it says); or look-alike sentences
    tell another moment (:func:`_told_differently`: another verb of change; in an episodic category, another
    topic); or one puts right a value the other states (:func:`_put_right`: a correction and what it corrects).
    Details of different kinds (one adds a year, the other an employer) and added sentences are one fact told with
    more detail."""
    if _subject(a) and _subject(b) and _subject(a) != _subject(b):
        return True
    core_a = without_frame_dates(str(a.get("content") or ""))
    core_b = without_frame_dates(str(b.get("content") or ""))
    category = str(a.get("category") or "general")
    return (
        bool(_lacking(core_a, core_b, category) & _lacking(core_b, core_a, category))
        or _told_differently(core_a, core_b, category)
        or _put_right(core_a, core_b, category)
    )


def _memory_consolidation(inputs: Mapping[str, Any]) -> dict[str, Any]:
    entries = {str(e["id"]): e for e in inputs.get("entries") or [] if isinstance(e, Mapping) and "id" in e}
    used: set[str] = set()
    saves = []
    for cluster in inputs.get("clusters") or []:
        members = []
        for raw_id in cluster:
            mid = str(raw_id)
            if mid in entries and mid not in used and mid not in members:
                members.append(mid)
        # Only entries of one category merge, so a merged entry's category is one every source agrees on and
        # "people/jon" is never merged with "people/gina".
        by_category: dict[str, list[str]] = {}
        for mid in members:
            by_category.setdefault(str(entries[mid].get("category") or "general"), []).append(mid)
        for category, group in by_category.items():
            chosen: list[str] = []
            for mid in group:
                if all(not distinct_moments(entries[mid], entries[c]) for c in chosen):
                    chosen.append(mid)
            if len(chosen) < 2:
                continue
            used.update(chosen)
            tags: list[str] = []
            for mid in chosen:
                for tag in entries[mid].get("tags") or []:
                    if tag not in tags:
                        tags.append(str(tag))
            merged = merge_keeping_every_sentence(str(entries[m].get("content") or "") for m in chosen)
            saves.append(
                {
                    # A sentence another kept sentence carries whole (another wording of it) is said once.
                    "content": without_restated_sentences(merged, category),
                    "category": category,
                    "tags": tags,
                    "sourceIds": chosen,
                }
            )
    return {"toDelete": [], "toSave": saves}


def merge_groups(inputs: Mapping[str, Any]) -> list[list[str]]:
    """The members of each merge these rules would make of ``inputs`` (the consolidation's): per cluster and category,
    the members that describe no distinct moment with one another. What the cluster call shape asks a model about."""
    return [list(save["sourceIds"]) for save in _memory_consolidation(inputs)["toSave"]]


def _merge_repair(inputs: Mapping[str, Any]) -> dict[str, Any]:
    merged = str(inputs.get("merged") or "")
    missing = [str(m) for m in inputs.get("missing") or [] if str(m)]
    have = {sentence_key(s) for line in split_sentences(merged) for s in line}
    added: list[str] = []
    for source in inputs.get("sources") or []:
        content = str(source.get("content") or "") if isinstance(source, Mapping) else str(source)
        sentences = [s for line in split_sentences(content) for s in line]
        wanted = [m for m in missing if m.casefold() in content.casefold()]
        for m in wanted:
            hits = [s for s in sentences if m.casefold() in s.casefold()]
            for piece in hits or [content.strip()]:  # a string spanning sentences: restore the whole source
                key = sentence_key(piece)
                if key not in have:
                    have.add(key)
                    added.append(piece)
    content = merged if not added else (merged.rstrip() + "\n" + " ".join(added)).strip()
    return {"content": content}


def answer_memory_consolidation(inputs: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    return (
        _memory_consolidation(inputs),
        "offline backend: near-duplicate clusters merged keeping every source sentence; no removals",
    )


def answer_merge_repair(inputs: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    return _merge_repair(inputs), "offline backend: restored the source sentences carrying the dropped specifics"


def answer_cluster_check(inputs: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """``{"entries": [...], "clusters": [[id, ...]]}`` of one cluster: "merge" with the consolidation's merged text
    when its rules take every member into one merge, else "keep" (some members are distinct moments)."""
    members = {str(i) for cluster in inputs.get("clusters", []) for i in cluster}
    answer = _memory_consolidation(inputs)
    for save in answer["toSave"]:
        if set(save.get("sourceIds", [])) == members:
            return (
                {"differences": "none", "decision": "merge", "content": save["content"]},
                "offline backend: every member is one fact; merged keeping every source sentence",
            )
    return (
        {"differences": "offline backend: distinct moments", "decision": "keep", "content": ""},
        "offline backend: the cluster holds distinct moments; left whole",
    )
