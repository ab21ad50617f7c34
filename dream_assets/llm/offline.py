"""The offline backend: no model at all, conservative deterministic answers to every contract.

It is the default when no endpoint is configured, so a fresh machine can run a whole cycle. It computes
its answers from the structured ``ModelRequest.inputs`` the passes build next to the rendered prompt:

``memory_consolidation``: ``{"entries": [{"id", "content", "category", "tags": [...], "subject": {...}}],
    "clusters": [[id, ...]]}``
    One merge per near-duplicate cluster with at least two members present in ``entries`` (an id already
    used by an earlier cluster is not used twice). A cluster whose members carry different subject times
    (``subject``: the entry's subject-time metadata) describes distinct real-world moments and is left alone. The merged text keeps every sentence of every member in
    member order; a sentence equal to an earlier one after white-space, case and final-punctuation
    normalisation is kept once. Category = the first member's, tags = the union in order, sourceIds = the
    members. ``toDelete`` is always empty: no ephemeral removals, no invented facts.
``merge_repair``: ``{"merged": str, "sources": [{"id", "content"}], "missing": [str]}``
    The merged text followed by every source sentence that contains a missing string (a whole source when
    the string spans sentences). A string found in no source is not invented, so the repair still fails the
    coverage check and the sources are kept.
``wisp_failure_analysis``: ``{"failure_patterns": [{"description", "skill_name", "count", "failed_steps",
    "errors"}], "success_patterns": [...]}``
    The host's failure patterns echoed with classification "unclassified (offline)", and for each pattern
    with a skill an annotation that quotes only the data. No promotion notes.
``skill_gap_detection``, ``skill_consolidation``, ``skill_optimization``, ``preference_inference``,
``tier_routing_review``: these need judgement the backend cannot make; it answers with the empty response
and a note the pass puts in its report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dream_assets.llm.base import ModelRequest, RawCompletion

OFFLINE_BACKEND = "offline"
OFFLINE_MODEL = "offline-deterministic"
OFFLINE_LABEL = "model backend: offline (no endpoint configured) — deterministic conservative answers"
JUDGEMENT_NOTE = "offline backend: this pass needs model judgement; no changes proposed"

_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
_FINAL_PUNCT = ".!?;:,…"


# --- sentences -------------------------------------------------------------------------------------
def split_sentences(text: str) -> list[list[str]]:
    """Lines of sentences: a line break always ends a sentence; so does . ! or ? before white space."""
    return [[s.strip() for s in _SENTENCE_BREAK.split(line) if s.strip()] for line in text.split("\n")]


def sentence_key(sentence: str) -> str:
    """Normalised form for duplicate detection: white space collapsed, case folded, final punctuation dropped."""
    return " ".join(sentence.split()).casefold().rstrip(_FINAL_PUNCT + " ")


def merge_keeping_every_sentence(texts: Iterable[str]) -> str:
    """All sentences of all texts, in order, each distinct sentence once; line structure kept per text."""
    seen: set[str] = set()
    blocks: list[str] = []
    for text in texts:
        kept_lines: list[str] = []
        for line in split_sentences(text):
            kept = []
            for sentence in line:
                key = sentence_key(sentence)
                if key not in seen:
                    seen.add(key)
                    kept.append(sentence)
            if kept:
                kept_lines.append(" ".join(kept))
        if kept_lines:
            blocks.append("\n".join(kept_lines))
    return "\n".join(blocks)


# --- per-pass answers ----------------------------------------------------------------------------------
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
        if len(members) < 2:
            continue
        subjects = {json.dumps(entries[m].get("subject"), sort_keys=True) for m in members if entries[m].get("subject")}
        if len(subjects) > 1:
            continue  # same words, different moments (spec: preserve distinct real-world moments)
        used.update(members)
        tags: list[str] = []
        for mid in members:
            for tag in entries[mid].get("tags") or []:
                if tag not in tags:
                    tags.append(str(tag))
        saves.append({
            "content": merge_keeping_every_sentence(str(entries[m].get("content") or "") for m in members),
            "category": entries[members[0]].get("category") or "general",
            "tags": tags,
            "sourceIds": members,
        })
    return {"toDelete": [], "toSave": saves}


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


def _annotation(p: Mapping[str, Any]) -> str:
    steps = [str(s) for s in p.get("failed_steps") or []]
    errors = [str(e) for e in p.get("errors") or []]
    text = f'Known failure ({int(p.get("count") or 0)}× in the review window) in wisp "{p.get("description", "")}"'
    detail = []
    if steps:
        detail.append(f"step {', '.join(steps)}")
    if errors:
        detail.append(errors[0])
    return text + (": " + " — ".join(detail) if detail else "")


def _wisp_failure_analysis(inputs: Mapping[str, Any]) -> dict[str, Any]:
    patterns = [p for p in inputs.get("failure_patterns") or [] if isinstance(p, Mapping)]
    return {
        "failurePatterns": [
            {"description": str(p.get("description", "")), "classification": "unclassified (offline)",
             "affectedSteps": [str(s) for s in p.get("failed_steps") or []]}
            for p in patterns
        ],
        "skillAnnotations": [
            {"skillName": str(p["skill_name"]), "annotation": _annotation(p)} for p in patterns if p.get("skill_name")
        ],
        "promotionNotes": {},
    }


_EMPTY: dict[str, dict[str, Any]] = {
    "skill_gap_detection": {"toSave": []},
    "skill_consolidation": {"toDelete": [], "toSave": []},
    "skill_optimization": {"toDelete": [], "toSave": []},
    "preference_inference": {"toDelete": [], "toSave": []},
    "tier_routing_review": {"findings": []},
}


class OfflineBackend:
    """Answers every contract without a model (see the module docstring for what each answer is)."""

    name = OFFLINE_BACKEND
    model = OFFLINE_MODEL
    uses_model = False  # nothing competes with the agent's own model, so no busy wait

    def complete(self, request: ModelRequest) -> RawCompletion:
        answer, note = self.answer(request.pass_name, request.inputs)
        return RawCompletion(text=json.dumps(answer, ensure_ascii=False), prompt_tokens=0, completion_tokens=0,
                             model=OFFLINE_MODEL, note=note)

    def answer(self, pass_name: str, inputs: Mapping[str, Any] | None) -> tuple[dict[str, Any], str]:
        inputs = inputs or {}
        if pass_name == "memory_consolidation":
            return (_memory_consolidation(inputs),
                    "offline backend: near-duplicate clusters merged keeping every source sentence; no removals")
        if pass_name == "merge_repair":
            return _merge_repair(inputs), "offline backend: restored the source sentences carrying the dropped specifics"
        if pass_name == "wisp_failure_analysis":
            return (_wisp_failure_analysis(inputs),
                    "offline backend: failure patterns echoed unclassified; no promotion notes")
        if pass_name in _EMPTY:
            return json.loads(json.dumps(_EMPTY[pass_name])), JUDGEMENT_NOTE
        raise ValueError(f"offline backend: unknown pass {pass_name!r}")


def sentences_of(texts: Sequence[str]) -> set[str]:
    """Normalised sentences of ``texts`` (what a merge must keep)."""
    return {sentence_key(s) for t in texts for line in split_sentences(t) for s in line}
