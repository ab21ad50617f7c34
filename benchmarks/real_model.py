"""The dream cycle with a real model, measured: one corpus from the public LoCoMo conversations, dreamed over for three
cycles (the agent saving between cycles) through the OpenAI-compatible endpoint named by ``DREAM__LlmBaseUrl`` (when
set) and through the offline backend, side by side in one run.

    python benchmarks/real_model.py --quick            # about 40 entries: minutes on a local 0.5B model
    python benchmarks/real_model.py                    # about 150 entries

The corpus (read in place from the shared evaluation data, never copied) is built by the dreambench rules
(``dreambench/scenario.py``) from the first sessions of one LoCoMo conversation: every observation fact (singles with
names, numbers and dates), a quarter of them re-observed later in other words (duplicate groups), about one in ten
restated as two or three distinct moments that read alike (another date, number or person), and a few corrections
planted here: a fact noted first with a wrong name or number, then the speaker's correction. It is scored by the
dreambench scoring (``dreambench/scoring.py``, no model judge).

Each backend gets a profile of its own in a temporary folder and runs the library's own cycle
(``dream_assets.cycle.run_cycle``, the passes ``dream run`` runs, without Dagster). Printed, one JSON object a line,
``{"name": "real_model.<backend>.<metric>", "n": ..., "value": ..., "unit": ...}`` (``backend`` is ``offline`` or
``endpoint``; the endpoint's lines name its ``model``):

* specifics_lost, facts_lost, distinct_merged — after the third cycle;
* dup_groups_one_live.cycle1 / .cycle3 — duplicate groups held by exactly one live entry;
* corrections_newest_first — corrected facts whose question finds the newest version first;
* recall_at_10.before / .after — the corpus's questions over the saved corpus undreamed, and after three cycles;
* answers_unparseable, repairs, calls, prompt_tokens, completion_tokens, seconds_per_call, seconds_per_cycle;
* refused.<reason> — host refusals: invented_id, coverage, high_value_floor, removal_guard, placeholder_copy;
* placeholders_applied — live memories and skills whose content is a placeholder or a directive's example (0 wanted);
* prompt.<pass>.directive_tokens / .items_tokens / .bytes — per model call kind, over every call of the run: the
  directive (system prompt) and the rendered items (user prompt) estimated at the uncalibrated three bytes a token
  (``budget.estimate_prompt_tokens``; a small model's tokenizer makes more of id-heavy text), and their exact UTF-8
  bytes: what a prompt change saves, measured with the offline backend too, without a model;
* on stderr, each question the undreamed corpus answered in its top 10 and the dreamed one no longer does, with what
  now ranks first (what a recall@10 drop is made of);
* prompts_over_window — calls whose prompt, as the endpoint counted it (its ``usage``), went over the window less
  the answer reserve; largest_prompt_tokens beside it; prompts_refused_over_window — prompts the host did not send.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [p for p in (str(HERE.parent), str(HERE)) if p not in sys.path]  # the repository, and benchmarks/

from dreambench.adapters.base import Kept  # noqa: E402
from dreambench.scenario import Correction, Question, Save, Scenario, _Builder, eval_data  # noqa: E402
from dreambench.scoring import snapshot  # noqa: E402

from dream_assets import agent_memory  # noqa: E402
from dream_assets.cycle import run_cycle  # noqa: E402
from dream_assets.llm.budget import estimate_prompt_tokens  # noqa: E402
from dream_assets.llm.client import build_model_client  # noqa: E402
from dream_assets.llm.directives import load_directive  # noqa: E402
from dream_assets.options import load_agent_options  # noqa: E402
from dream_assets.passes.model_text import copied, directive_examples  # noqa: E402
from dream_assets.passes.registry import PASSES  # noqa: E402
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.store import open_store  # noqa: E402
from dream_assets.store.connection import close_all  # noqa: E402

SEED = 20240809
CONVERSATION = "conv-30"
#: Entries the corpus aims at (the sessions of the conversation are taken in order until there are this many).
SIZES = {"quick": 36, "full": 150}
CORRECTIONS = {"quick": 3, "full": 8}
#: Observations of each speaker taken from a session (None: all of them).
PER_SPEAKER = {"quick": 3, "full": None}
CYCLES = 3
#: What the endpoint run uses unless the environment says otherwise: a small local model's window, an answer reserve
#: it can fill in minutes and a timeout its speed needs. Calls a pass stay the default (8): with the 8k window,
#: memory consolidation asks one short call per near-duplicate cluster (ConsolidationCallShape auto).
ENDPOINT_DEFAULTS = {
    "DREAM__LlmContextTokens": "8192",
    "DREAM__LlmMaxTokens": "1024",
    "DREAM__LlmTimeout": "1800",
    "DREAM__LlmMaxRetries": "1",  # a call sent again costs its whole time again on a slow endpoint
}
#: Host refusals by reason: the report counts (any pass) that each sums.
REFUSALS = {
    "invented_id": ("ignored_ids", "invalid_ids", "ignored_names", "invalid_names", "skipped_unknown_sources"),
    "coverage": ("rejected",),
    "high_value_floor": ("protected_floor",),  # computed: protected less guarded
    "removal_guard": ("guarded",),
    "placeholder_copy": ("copied", "shrunk"),
    "supersession": ("refused",),
}
_NUMBER = re.compile(r"\b\d+\b")
_NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")


@dataclass
class Corpus:
    scenario: Scenario
    chunks: list[list[Save]]  # what the agent saves before each cycle
    cycles: list[datetime]  # when each cycle runs
    sources: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------- the corpus
def _trimmed(conv: dict[str, Any], sessions: int, per_speaker: int | None) -> dict[str, Any]:
    """``conv`` with its first ``sessions`` sessions only (at most ``per_speaker`` observations of each speaker a
    session), and the questions whose evidence is all in what is kept."""

    def number(key: str) -> int | None:
        m = re.match(r"session_(\d+)", key)
        return int(m.group(1)) if m else None

    talk = {k: v for k, v in conv["conversation"].items() if number(k) is None or number(k) <= sessions}
    observed = {
        k: {who: facts[:per_speaker] for who, facts in v.items()}
        for k, v in conv["observation"].items()
        if (number(k) or 0) <= sessions
    }
    kept = {d for v in observed.values() for facts in v.values() for _, dia in facts for d in _dias(dia)}
    qa = [q for q in conv["qa"] if q.get("evidence") and all(e in kept for e in q["evidence"])]
    return {**conv, "conversation": talk, "observation": observed, "qa": qa}


def _dias(dia: str | list[str]) -> list[str]:
    return dia if isinstance(dia, list) else [dia]


def _wrong(rng: random.Random, text: str, names: Sequence[str]) -> tuple[str, str, str] | None:
    """(text with one specific changed, the right specific, the wrong one), or None when it has none to change."""
    numbers = _NUMBER.findall(text)
    if numbers:
        right = numbers[0]
        wrong = str(int(right) + rng.randint(2, 9))
        return _NUMBER.sub(wrong, text, count=1), right, wrong
    proper = [w for w in _NAME.findall(text) if w not in names and text.index(w) > 0]
    others = [n for n in names if n not in text]
    if proper and others:
        right = proper[0]
        wrong = rng.choice(others)
        return re.sub(rf"\b{right}\b", wrong, text, count=1), right, wrong
    return None


def build_corpus(data: Path, *, size: str, seed: int = SEED) -> Corpus:
    """About ``SIZES[size]`` entries from LoCoMo ``CONVERSATION``, in three chunks, each followed by a cycle."""
    convs = {c["sample_id"]: c for c in json.loads((data / "locomo" / "locomo10.json").read_text(encoding="utf-8"))}
    conv = convs[CONVERSATION]
    total = len([k for k in conv["observation"]])
    target = SIZES[size]
    builder = _Builder(seed)
    for sessions in range(2, total + 1):
        builder = _Builder(seed)
        builder.locomo(_trimmed(conv, sessions, PER_SPEAKER[size]))
        if len(builder.saves) >= target - CORRECTIONS[size]:
            break
    rng = random.Random(f"{seed}:corrections")
    grouped = {k for g in builder.dup_groups + builder.lookalike_groups for k in g}
    proper_nouns = sorted(
        {w for t in builder.facts.values() for w in _NAME.findall(t)}
        - {conv["conversation"]["speaker_a"], conv["conversation"]["speaker_b"]}
        - {"The", "She", "His", "Her", "They", "And", "But", "When", "After"}
    )
    candidates = [k for k, kind in builder.kinds.items() if kind == "observation" and k not in grouped]
    rng.shuffle(candidates)
    last = max(s.at for s in builder.saves)
    planted = 0
    for key in candidates:
        if planted >= CORRECTIONS[size]:
            break
        text = builder.facts[key]
        changed = _wrong(rng, text, proper_nouns)
        if changed is None:
            continue
        wrong_text, right, wrong = changed
        who = key.split("-")[3].capitalize()
        index = next(i for i, s in enumerate(builder.saves) if s.key == key)
        noted = builder.saves[index]
        builder.saves[index] = Save(noted.at, wrong_text, key)
        builder.facts[key] = wrong_text
        builder.kinds[key] = "stale"
        fix_at = min(noted.at + timedelta(days=30), last - timedelta(minutes=planted + 1))
        fix_key = f"{key}-fix"
        fix = f"Correction from {who}: {text.rstrip('.')}, not {wrong}."
        builder.facts[fix_key] = fix
        builder.kinds[fix_key] = "current"
        builder.saves.append(Save(fix_at, fix, fix_key))
        question = re.sub(rf"\b{re.escape(right)}\b", "what", text.rstrip("."), count=1) + "?"
        builder.corrections.append(Correction(question, key, fix_key, fix_at))
        builder.questions.append(Question(question, [[fix_key]]))
        planted += 1
    builder.saves.sort(key=lambda s: (s.at, s.key))
    saves = builder.saves
    # Half the corpus before the first cycle (so its duplicate groups are there to merge), a quarter before each other.
    bounds = [0, len(saves) // 2, len(saves) * 3 // 4, len(saves)]
    chunks = [saves[bounds[i] : bounds[i + 1]] for i in range(CYCLES)]
    cycles = [chunk[-1].at + timedelta(hours=1) for chunk in chunks]
    scenario = Scenario(
        saves=saves,
        consolidations=cycles,
        facts=builder.facts,
        kinds=builder.kinds,
        dup_groups=builder.dup_groups,
        lookalike_groups=builder.lookalike_groups,
        questions=builder.questions,
        corrections=builder.corrections,
    )
    return Corpus(scenario, chunks, cycles, {"locomo": f"locomo/locomo10.json ({CONVERSATION}, {sessions} sessions)"})


# --------------------------------------------------------------------------------------------------- one backend
class Backend:
    """One profile in ``root`` dreamed over with the options ``env`` selects; every model call recorded."""

    def __init__(self, root: Path, env: Mapping[str, str]) -> None:
        self.profile = AgentProfile(root).ensure()
        self.env = dict(env)
        self.options = load_agent_options(self.profile, self.env)
        self.now: datetime | None = None
        self.records: list[Any] = []  # UsageRecords of every call
        self.reports: list[Any] = []  # PassReports of every cycle
        self.cycle_seconds: list[float] = []
        self.prompt_limit = 0
        self.prompts: list[tuple[str, str, str]] = []  # (call name, system prompt, user prompt) of every call

    def save(self, saves: Sequence[Save]) -> None:
        for s in saves:
            agent_memory.save(self.profile, s.text, options=self.options, now=s.at, active=False)
            self.now = s.at

    def cycle(self, when: datetime, n: int) -> list[Any]:
        client = build_model_client(self.options, self.profile, env=self.env)
        client.progress_listeners.append(
            lambda p: (
                print(f"real_model: cycle {n}: {p.line()}", file=sys.stderr, flush=True)
                if p.phase != "waiting"
                else None
            )
        )
        answer = client.backend.complete

        def complete(request: Any) -> Any:  # every prompt as sent, whatever the backend
            self.prompts.append((request.pass_name, request.system, request.prompt))
            return answer(request)

        client.backend.complete = complete  # type: ignore[method-assign]
        budget = client.budget
        self.prompt_limit = budget.prompt_limit if budget.bounded else 0
        started = time.perf_counter()
        reports = run_cycle(self.profile, self.options, when, client_factory=lambda: client, cycle_id=f"real-model-{n}")
        self.cycle_seconds.append(time.perf_counter() - started)
        self.records += client.usage.records
        self.reports += reports
        self.now = when
        return reports

    def search(self, query: str, k: int) -> list[str]:
        hits = agent_memory.search(self.profile, query, limit=k, options=self.options, now=self.now).hits
        return [h.content for h in hits]

    def dump(self) -> list[Kept]:
        store = open_store(self.profile, self.options)
        try:
            return [Kept(e.content, not e.is_archived) for e in store.memories.list_all()]
        finally:
            store.close()

    def live_contents(self) -> list[str]:
        """The content of every live memory and skill (what a placeholder applied would be)."""
        store = open_store(self.profile, self.options)
        try:
            texts = [e.content for e in store.memories.list_live()]
            texts += [s.content for s in store.skills.list()]
        finally:
            store.close()
        return texts

    def placeholders(self) -> tuple[int, int]:
        """(live memories and skills, those whose content is a placeholder or a directive's example)."""
        examples = self.examples()
        live = self.live_contents()
        return len(live), sum(copied(t, examples=examples) is not None for t in live)

    def examples(self) -> frozenset[str]:
        found: set[str] = set()
        for spec in PASSES:
            if spec.model_call is None:
                continue
            try:
                found |= directive_examples(load_directive(spec.model_call, self.profile, self.options)[0])
            except Exception:  # noqa: BLE001 - a directive that cannot be read has no example to copy
                continue
        return frozenset(found)


def _count(reports: Sequence[Any], key: str) -> int:
    if key == "protected_floor":
        return sum(int(r.counts.get("protected", 0) - r.counts.get("guarded", 0)) for r in reports)
    return sum(int(r.counts.get(key, 0)) for r in reports)


def call_figures(backend: Backend, records: Sequence[Any], reports: Sequence[Any], seconds: Sequence[float], put: Any):
    """The figures of the model calls ``records`` and the pass ``reports`` of one cycle or of all of them."""
    made = [r for r in records if r.outcome != "deferred"]
    put("calls", len(made), len(made), "calls")
    put("answers_unparseable", len(made), sum(r.outcome == "invalid-response" for r in made), "answers")
    put("call_errors", len(made), sum(r.outcome == "error" for r in made), "calls")
    repairs = sum(r.pass_name == "merge_repair" for r in made)
    put("repairs", _count(reports, "repaired"), repairs, "calls")
    put("repairs_applied", repairs, _count(reports, "repaired"), "merges")
    for reason, keys in REFUSALS.items():
        put(f"refused.{reason}", len(reports), sum(_count(reports, k) for k in keys), "items")
    put("prompt_tokens", len(made), sum(r.prompt_tokens for r in made), "tokens")
    put("completion_tokens", len(made), sum(r.completion_tokens for r in made), "tokens")
    latency = [r.latency_s for r in made]
    put("seconds_per_call", len(latency), sum(latency) / len(latency) if latency else math.nan, "s")
    put("seconds_per_cycle", len(seconds), sum(seconds) / len(seconds) if seconds else math.nan, "s")
    measured = [r for r in made if not r.estimated]
    limit = backend.prompt_limit
    over = sum(1 for r in measured if limit and r.prompt_tokens > limit)
    put("prompts_over_window", len(measured), over, "prompts")
    put("largest_prompt_tokens", limit, max((r.prompt_tokens for r in measured), default=0), "tokens")
    put("prompts_refused_over_window", len(reports), _count(reports, "prompts_over_window"), "prompts")
    put("passes_failed", len(reports), sum(r.status == "failed" for r in reports), "passes")


def prompt_figures(prompts: Sequence[tuple[str, str, str]], put: Any) -> None:
    """Per model call kind: its directives' and its items' estimated tokens, and their bytes, over every call."""
    for name in sorted({p[0] for p in prompts}):
        calls = [(system, prompt) for n, system, prompt in prompts if n == name]
        put(f"prompt.{name}.directive_tokens", len(calls), sum(estimate_prompt_tokens(s) for s, _ in calls), "tokens")
        put(f"prompt.{name}.items_tokens", len(calls), sum(estimate_prompt_tokens(p) for _, p in calls), "tokens")
        size = sum(len(s.encode()) + len(p.encode()) for s, p in calls)
        put(f"prompt.{name}.bytes", len(calls), size, "bytes")


def measure(name: str, env: Mapping[str, str], corpus: Corpus, root: Path, emit: Any) -> dict[str, float]:
    """Dream ``corpus`` over three cycles through the backend ``env`` selects; emit and return its figures."""
    scenario = corpus.scenario
    figures: dict[str, float] = {}

    def put(metric: str, n: int, value: float, unit: str) -> None:
        figures[metric] = value
        emit(f"real_model.{name}.{metric}", n, value, unit)

    # Before: the same saves, never dreamed over.
    plain = Backend(root / f"{name}-undreamed", env)
    plain.save(scenario.saves)
    before = snapshot(scenario, corpus.cycles[-1], plain.dump(), plain.search, {s.key for s in scenario.saves})
    put("recall_at_10.before", before.counts["recall_at_10"], before.values["recall_at_10"], "fraction")

    dreamed = Backend(root / name, env)
    saved: set[str] = set()
    after = before
    for n, (chunk, when) in enumerate(zip(corpus.chunks, corpus.cycles, strict=True), 1):
        dreamed.save(chunk)
        saved |= {s.key for s in chunk}
        calls_before = len(dreamed.records)
        reports = dreamed.cycle(when, n)
        call_figures(
            dreamed,
            dreamed.records[calls_before:],
            reports,
            dreamed.cycle_seconds[-1:],
            lambda metric, k, value, unit, n=n: put(f"cycle{n}.{metric}", k, value, unit),
        )
        for r in reports:
            if r.status == "failed":
                print(f"real_model: {name} cycle {n}: {r.pass_name} failed: {r.reason[:300]}", file=sys.stderr)
        after = snapshot(scenario, when, dreamed.dump(), dreamed.search, saved)
        if n in (1, CYCLES):
            put(
                f"dup_groups_one_live.cycle{n}",
                after.counts["dup_groups_one_live"],
                after.values["dup_groups_one_live"],
                "fraction",
            )
        put(f"live_entries.cycle{n}", after.counts["live_entries"], after.values["live_entries"], "entries")
        for metric, unit in (("specifics_lost", "count"), ("distinct_merged", "pairs")):
            put(f"cycle{n}.{metric}", after.counts[metric], after.values[metric], unit)
        put(f"cycle{n}.placeholders_applied", *dreamed.placeholders(), "entries")
    for metric, unit in (("specifics_lost", "count"), ("facts_lost", "count"), ("distinct_merged", "pairs")):
        put(metric, after.counts[metric], after.values[metric], unit)
    due = after.counts["stale_first"]
    newest = due - int(after.values["stale_first"]) - int(after.values["correction_missed"])
    put("corrections_newest_first", due, newest / due if due else math.nan, "fraction")
    put("recall_at_10.after", after.counts["recall_at_10"], after.values["recall_at_10"], "fraction")
    for question in [q for q, hit in before.recalled.items() if hit and not after.recalled.get(q)]:
        top = " | ".join(t[:160] for t in dreamed.search(question, 3))
        print(f"real_model: {name}: recall lost: {question!r}; the top 3 now: {top}", file=sys.stderr)

    call_figures(dreamed, dreamed.records, dreamed.reports, dreamed.cycle_seconds, put)
    prompt_figures(dreamed.prompts, put)
    put("placeholders_applied", *dreamed.placeholders(), "entries")
    return figures


# --------------------------------------------------------------------------------------------------- the command
def backends(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The environment of each backend run: ``offline`` always, ``endpoint`` when ``DREAM__LlmBaseUrl`` is set."""
    base = {k: v for k, v in env.items() if not k.startswith("DREAM__Llm")}
    out = {"offline": {**base, "DREAM__LlmBackend": "offline"}}
    if env.get("DREAM__LlmBaseUrl", "").strip():
        endpoint = dict(env)
        for key, value in ENDPOINT_DEFAULTS.items():
            endpoint.setdefault(key, value)
        out["endpoint"] = endpoint
    return out


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="real_model",
        description="Three dream cycles over a LoCoMo corpus, through the endpoint DREAM__LlmBaseUrl names and "
        "through the offline backend, scored side by side (JSON lines).",
    )
    p.add_argument("--quick", action="store_true", help=f"about {SIZES['quick']} entries instead of {SIZES['full']}")
    p.add_argument(
        "--data", default=None, help="the shared eval-data folder (default: DREAM_EVAL_DATA, else ../shared/eval-data)"
    )
    p.add_argument("--backends", default="offline,endpoint", help="comma-separated, of offline, endpoint")
    p.add_argument("--seed", type=int, default=SEED)
    return p.parse_args(list(argv) if argv is not None else None)


def emit(name: str, n: int, value: float, unit: str, **extra: object) -> None:
    number = None if isinstance(value, float) and math.isnan(value) else round(float(value), 4)
    print(json.dumps({"name": name, "n": int(n), "value": number, "unit": unit, **extra}), flush=True)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = parse(argv)
    env = dict(os.environ if env is None else env)
    logging.disable(logging.WARNING)
    from dreambench.cli import seed_ids

    seed_ids(args.seed)
    data = eval_data(args.data)
    if not (data / "locomo" / "locomo10.json").exists():
        print(f"real_model: {data}/locomo/locomo10.json not found (give --data or DREAM_EVAL_DATA)", file=sys.stderr)
        return 2
    corpus = build_corpus(data, size="quick" if args.quick else "full", seed=args.seed)
    summary = corpus.scenario.summary()
    for key in ("saves", "facts", "dup_groups", "lookalike_groups", "questions", "corrections"):
        emit(f"real_model.corpus.{key}", summary["saves"], summary[key], "count")
    wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in wanted if b not in ("offline", "endpoint")]
    if unknown:
        print(f"real_model: --backends: no backend {', '.join(unknown)} (there are offline, endpoint)", file=sys.stderr)
        return 2
    runs = backends(env)
    if "endpoint" in wanted and "endpoint" not in runs:
        print("real_model: DREAM__LlmBaseUrl is not set: the endpoint run is left out", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="real-model-") as tmp:
        for name in wanted:
            if name not in runs:
                continue
            run_env = runs[name]
            model = run_env.get("DREAM__LlmModel", "") if name == "endpoint" else "offline"

            def out(metric: str, n: int, value: float, unit: str, model: str = model) -> None:
                emit(metric, n, value, unit, model=model)

            started = time.perf_counter()
            try:
                measure(name, run_env, corpus, Path(tmp), out)
            finally:
                close_all()
            out(f"real_model.{name}.seconds", 1, time.perf_counter() - started, "s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
