"""DreamOptions: every option and default of the dream service, bound from a TOML file and the environment.

Every option has a nested name: a global section (``schedule``, ``change_gate``, ``memory``, ``skills``, ``model``,
``embeddings``, ``store``, ``review``, ``deployment``) or a pass's section ``passes.<pass>`` under the registry's pass
name, with ``enabled``, ``model``, ``base_url``, ``api_key_env``, ``apply_mode``, ``directive`` and ``min_interval``
where the pass has them, and the pass's own options (``LAYOUT`` lists them all). In TOML::

    [passes.memory_consolidation]
    model = "qwen2.5:14b"
    [model]
    base_url = "http://127.0.0.1:11434/v1"

and in the environment ``DREAM__PASSES__MEMORY_CONSOLIDATION__MODEL``, ``DREAM__MODEL__BASE_URL`` (case and the
underscores inside a name aside). Readers use ``options.passes["memory_consolidation"].model`` or
``options.model.base_url``; no option name is built from a pass name.

Every flat name of the specification (``LogRetentionMaxFileAge``, ``DreamPassMaxSkipInterval``,
``MemoryConsolidationModel`` ...) stays accepted as the nested name's alias, and stays the attribute readers and
``DreamOptions(...)`` use: the flat fields hold the values, the nested names are laid over them by one table. The
environment binding mirrors the spec's ``Dream__X`` convention as ``DREAM__X``; a section may be spelled out
(``DREAM__Memory__DedupeSimilarityThreshold``, ``DREAM__Llm__BaseUrl``).

Which wins: sources are read in order — defaults, the deployment file, the agent's ``dream.toml``, the environment,
explicit overrides — and a later source wins. Within one source, one option set twice (a nested name and its alias,
or two spellings of one) with different values is refused with an error naming both; set twice to one value it is
accepted. ``DreamOptions.resolve`` tells where each value came from (``dream status --options``).

Durations accept ISO-8601 (``PT6H``, ``P7D``), ``HH:MM:SS``, ``D.HH:MM:SS`` (the .NET TimeSpan form), units as
people type them (``90s``, ``30m``, ``4h``, ``7d``, ``2w``, ``1h30m``) or a number of seconds.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from dream_assets.profile import AgentProfile

ENV_PREFIX = "DREAM__"


class OptionsError(ValueError):
    """An option has a value that cannot be used. The message names the option, the value and what is accepted."""


#: What a duration option accepts: ``"any"`` (a non-positive value has a documented meaning, e.g. disables),
#: ``"zero"`` (zero or more), ``"positive"`` (more than zero).
DURATION_RANGES = ("any", "zero", "positive")


def _opt(
    default: Any,
    help: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[str, ...] | None = None,
    duration: str = "zero",
    url: bool = False,
) -> Any:
    if duration not in DURATION_RANGES:
        raise ValueError(f"duration range {duration!r}: use one of {', '.join(DURATION_RANGES)}")
    meta = {
        "help": help,
        "minimum": minimum,
        "maximum": maximum,
        "choices": choices,
        "duration": duration,
        "url": url,
    }
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class DreamOptions:
    # --- Scheduling (spec: "Scheduling", DreamOptions) ---
    Enabled: bool = _opt(True, "master switch for the schedule and the start-up sensor")
    InitialDelay: timedelta = _opt(timedelta(minutes=5), "delay between daemon start and the first cycle")
    Interval: timedelta = _opt(timedelta(hours=4), "time between scheduled dream cycles", duration="positive")
    BusyPollInterval: timedelta = _opt(
        timedelta(seconds=5), "poll period while the agent's model is busy", duration="positive"
    )
    BusyMaxWait: timedelta = _opt(timedelta(minutes=30), "longest wait for a busy model before the pass is deferred")
    BusyRetryInitialDelay: timedelta = _opt(
        timedelta(minutes=5), "a deferred pass is retried this long after its first deferral; zero retries at once"
    )
    BusyRetryMultiplier: float = _opt(
        2.0, "each further deferral multiplies the retry delay by this (1 or less keeps it)", minimum=0.0
    )
    BusyRetryMaxDelay: timedelta = _opt(timedelta(hours=1), "longest retry delay (never below BusyRetryInitialDelay)")
    BusyRetryMaxAttempts: int = _opt(
        6, "retries of a deferred pass before it waits for the next cycle; zero never retries early", minimum=0
    )
    AgentActiveWindow: timedelta = _opt(
        timedelta(seconds=60),
        "every call through the agent interfaces (dream serve, dream memory, dream_assets.agent_memory) marks the "
        "agent's model busy for this long, so a dream pass does not start a model call mid-conversation; zero: no mark",
    )
    BusyLeaseStaleAfter: timedelta = _opt(
        timedelta(minutes=10),
        "age after which a busy lease from a crashed agent expires",
        duration="positive",
    )

    # --- Directive files (relative to the agent profile; a file there replaces the built-in one) ---
    DirectivePath: str = _opt("dream.md", "memory consolidation directive")
    SkillDirectivePath: str = _opt("skill-dream.md", "skill consolidation directive")
    SkillOptimizeDirectivePath: str = _opt("skill-optimize.md", "skill optimization directive")
    PreferenceDirectivePath: str = _opt("pref-dream.md", "preference inference directive")
    SkillGapDirectivePath: str = _opt("skill-gap.md", "skill gap detection directive")
    WispFailureDirectivePath: str = _opt("wisp-failure-dream.md", "wisp failure analysis directive")
    TierRoutingDirectivePath: str = _opt("tier-routing-review.md", "tier routing review directive")
    ContradictionSweepDirectivePath: str = _opt("contradiction-sweep.md", "contradiction sweep directive")

    # --- Per-pass switches ---
    LogRetentionEnabled: bool = _opt(True, "pass 0: cap the telemetry logs")
    ArchivePurgeEnabled: bool = _opt(True, "pass 0b: purge long-archived memories")
    ImportanceDecayEnabled: bool = _opt(True, "importance decay (a non-positive half-life also disables it)")
    MemoryConsolidationEnabled: bool = _opt(True, "pass 1: memory consolidation")
    SkillGapEnabled: bool = _opt(True, "pass 2: skill gap detection")
    SkillConsolidationEnabled: bool = _opt(True, "pass 3: skill consolidation")
    SkillOptimizationEnabled: bool = _opt(True, "pass 4: skill optimization")
    PreferenceInferenceEnabled: bool = _opt(True, "pass 5: preference inference")
    WispFailureAnalysisEnabled: bool = _opt(True, "wisp failure analysis")
    TierRoutingReviewEnabled: bool = _opt(True, "tier routing review")
    ContradictionSweepEnabled: bool = _opt(True, "contradiction sweep: a later fact supersedes the stale one")

    # --- Change gate ---
    DreamPassChangeGateEnabled: bool = _opt(True, "skip a corpus-wide pass whose input fingerprint has not moved")
    DreamPassMaxSkipInterval: timedelta = _opt(
        timedelta(days=7),
        "force a gated pass after this long; non-positive skips indefinitely",
        duration="any",
    )
    TierRoutingReviewWindow: timedelta = _opt(timedelta(days=14), "how far back the tier routing review reads")

    # --- Memory consolidation (pass 1) ---
    ConsolidationMinInterval: timedelta = _opt(
        timedelta(hours=6), "minimum time between completed consolidation passes; zero disables"
    )
    ConsolidationSimilarityThreshold: float = _opt(
        0.88, "cosine threshold for near-duplicate clusters", minimum=0.0, maximum=1.0
    )
    ConsolidationMaxClusterSize: int = _opt(3, "largest near-duplicate cluster offered as one group", minimum=2)
    ConsolidationCallShape: str = _opt(
        "auto",
        "how consolidation asks the model: batch (the eligible entries and their near-duplicate clusters in one call, "
        "with noise removal, recategorisation and anti-pattern mining), cluster (one short call per near-duplicate "
        "cluster: same fact or not, and the merged text; what a small model answers reliably) or auto (cluster for an "
        "endpoint whose window is at most 8192 tokens or whose measured generation is under 10 tokens a second, "
        "batch otherwise and offline)",
        choices=("auto", "batch", "cluster"),
    )
    ConsolidationMaxEntriesPerCall: int = _opt(
        500,
        "most entries shown to the model in one consolidation call; the rest "
        "wait for later cycles (a large first review is spread out)",
        minimum=2,
    )
    MergeRepairEnabled: bool = _opt(True, "one narrow repair call for a merge the coverage check rejects")
    MergeRepairMaxPerCycle: int = _opt(10, "repair calls per cycle", minimum=0)
    PruningProtectionImportance: float = _opt(
        0.80,
        "importance at or above which an entry is never an ephemeral removal or purged",
        minimum=0.0,
        maximum=1.0,
    )
    PruningProtectionReinforcementCount: int = _opt(
        5, "reinforcements at or above which an entry is never an ephemeral removal or purged", minimum=0
    )
    ConsolidationRemovalGuardEnabled: bool = _opt(
        True,
        "a stand-alone removal the model proposes is applied only to noise "
        "(no names, numbers or dates, importance below 0.5) or to an entry "
        "whose every specific another live entry carries; others are kept",
    )
    # Near-duplicate measure and settled clusters (consolidation quality).
    LexicalSimilarityMeasure: str = _opt(
        "overlap",
        "measure for save-time dedup and clustering without embeddings: "
        "overlap (weighted containment of stems, framing left out; threshold "
        "LexicalOverlapThreshold) or tfidf (cosine; Dedupe/Consolidation"
        "SimilarityThreshold)",
        choices=("overlap", "tfidf"),
    )
    LexicalOverlapThreshold: float = _opt(
        0.75, "overlap threshold for save-time dedup and clustering alike", minimum=0.0, maximum=1.0
    )
    ConsolidationSettledCooldown: timedelta = _opt(
        timedelta(days=7),
        "a cluster shown together and left apart is "
        "offered again after this long; doubles each time it is left apart "
        "again (at most 16x); zero re-offers it every pass",
    )
    ConsolidationExactFoldEnabled: bool = _opt(
        True,
        "fold live entries of one category whose content is equal after "
        "normalising case, white space and punctuation, before the model",
    )
    MemoryScopeCategories: str = _opt(
        "",
        "comma-separated category patterns that are walls (labels split on '/', '*' matches one label): with "
        "'users/*' the categories under users/alice and users/bob are two scopes, and consolidation, the "
        "contradiction sweep and save-time dedup never join or supersede entries of different scopes; empty: none "
        "beyond LangGraph namespaces, which are always walls",
    )
    # --- Contradiction sweep ---
    ContradictionSweepNeighbours: int = _opt(
        4, "live entries most similar to a new or changed entry shown next to it", minimum=1
    )
    ContradictionSweepMaxEntriesPerCall: int = _opt(
        500, "new or changed entries shown in one sweep call; the rest wait for the next run", minimum=1
    )
    ContradictionSweepMaxSupersededShare: float = _opt(
        0.25,
        "most of the entries one sweep call shows that its answer may supersede (at least one); the rest are "
        "refused and the report says so",
        minimum=0.0,
        maximum=1.0,
    )
    FeedbackWindow: timedelta = _opt(timedelta(days=7), "how far back feedback signals are read")
    FeedbackMaxSignals: int = _opt(50, "most feedback signals shown to the model", minimum=0)

    # --- Archive purge (pass 0b) and importance decay ---
    MemoryArchiveRetention: timedelta = _opt(
        timedelta(days=90),
        "archived entries older than this are purged; non-positive keeps them forever",
        duration="any",
    )
    ImportanceDecayGraceDays: float = _opt(30.0, "days after last_seen_at before decay starts", minimum=0.0)
    ImportanceDecayHalfLifeDays: float = _opt(45.0, "decay half-life in days; zero or negative disables decay")
    ImportanceDecayFloor: float = _opt(0.10, "decay never takes importance below this", minimum=0.0, maximum=1.0)

    # --- Skills ---
    SkillUsageWindow: timedelta = _opt(timedelta(days=30), "usage counts and co-use look back this far")
    SparseSkillMaxChars: int = _opt(200, "content shorter than this is sparse", minimum=0)
    SparseSkillMinAge: timedelta = _opt(timedelta(days=7), "a skill is sparse only when older than this")
    SkillCoUsedPairs: int = _opt(10, "co-used skill pairs shown to skill consolidation", minimum=0)

    # --- Wisps ---
    WispAnalysisWindow: timedelta = _opt(timedelta(days=14), "how far back wisp executions are read")
    WispFailureMinFrequency: int = _opt(3, "failures of one description that make a pattern", minimum=1)
    WispSuccessMinFrequency: int = _opt(5, "runs of one description needed for a promotion candidate", minimum=1)
    WispSuccessMinRate: float = _opt(
        0.80, "success rate that must be exceeded for a promotion candidate", minimum=0.0, maximum=1.0
    )

    # --- Log retention (pass 0) ---
    LogRetentionMaxFileAge: timedelta = _opt(
        timedelta(days=30),
        "per-session files older than this are deleted; non-positive disables",
        duration="any",
    )
    LogRetentionMaxFilesPerDirectory: int = _opt(1000, "per-session files kept per directory; non-positive disables")
    LogRetentionMaxLinesPerFile: int = _opt(50_000, "lines kept per log file; non-positive disables")

    # --- Memory store (Memory: section) ---
    DedupeSimilarityThreshold: float = _opt(
        0.88,
        "save-time dedup cosine threshold (keep aligned with ConsolidationSimilarityThreshold)",
        minimum=0.0,
        maximum=1.0,
    )
    MaxContentChars: int = _opt(16_000, "largest memory content accepted", minimum=1)
    # Recall order (store/recall.py): BM25 x (1 + RecallRecencyWeight x recency + RecallReinforcementWeight x
    # reinforcement), then the current version of a fact before a stale one. Defaults measured by
    # benchmarks/quality.py (quality.recall10_*, quality.current_first): recall@10 before / after cycles is
    # 0.5783 / 0.5929 at 0; recency 0.05, 0.1, 0.2 give 0.5776 / 0.5929, 0.5783 / 0.5952, 0.5753 / 0.5922, and 0.3
    # and 1 are lower on --quick; reinforcement is lower at every weight tried (0.1 to 1). None is a clear gain.
    RecallRecencyWeight: float = _opt(
        0.0,
        "search boost for recently seen entries: 0.5^(age/RecallRecencyHalfLife), age counted back from the most "
        "recently seen match; 0 = none",
        minimum=0.0,
    )
    RecallRecencyHalfLife: timedelta = _opt(
        timedelta(days=30), "age at which the recency boost of search is halved", duration="positive"
    )
    RecallReinforcementWeight: float = _opt(
        0.0, "search boost for reinforced entries: 1 - 1/reinforcement_count; 0 = none", minimum=0.0
    )
    StoreLockTimeout: timedelta = _opt(timedelta(seconds=60), "longest wait for the store's process lock")

    # --- Linked memory folders (dream link) ---
    FolderPromotionMinDailyNotes: int = _opt(
        2,
        "distinct OpenClaw daily notes a fact must recur in (the same fact by the save-time measures) before a "
        "write-back promotes it into MEMORY.md; 0 disables promotion",
        minimum=0,
    )

    # --- Model (Llm: section) ---
    LlmBackend: str = _opt(
        "auto",
        "model backend; auto = openai when LlmBaseUrl or LlmModel is set, else offline",
        choices=("auto", "offline", "openai"),
    )
    LlmBaseUrl: str = _opt("", "OpenAI-compatible endpoint, e.g. http://127.0.0.1:11434/v1; empty: none", url=True)
    LlmModel: str = _opt("", "model name sent to the endpoint")
    LlmApiKeyEnv: str = _opt("OPENAI_API_KEY", "environment variable holding the API key")
    LlmTimeout: timedelta = _opt(
        timedelta(seconds=120),
        "per-request timeout of an endpoint whose speed is not measured; once dream check-model measured it, each "
        "call's timeout follows the speed, and LlmTimeout set to anything but this default is its upper bound",
        duration="positive",
    )
    LlmMaxRetries: int = _opt(3, "retries on 429/5xx/timeouts", minimum=0)
    LlmTemperature: float = _opt(0.2, "sampling temperature", minimum=0.0, maximum=2.0)
    LlmJsonMode: str = _opt("auto", "request JSON mode: auto tries it and falls back", choices=("auto", "on", "off"))
    LlmMaxTokens: int = _opt(4096, "completion token limit, reserved for the answer in every prompt", minimum=1)
    LlmContextTokens: int = _opt(
        32768,
        "the model's context window in tokens (set it to your model's: 8192 for many local models); directive + "
        "items + LlmMaxTokens must fit; 0 = unbounded",
        minimum=0,
    )
    LlmMaxCallsPerPass: int = _opt(
        8, "model calls one batching pass may make in one run; the rest waits for the next cycle", minimum=1
    )
    LlmStructuredOutput: str = _opt(
        "auto",
        "response_format sent: json_schema (the contract's schema), json_object, off; auto tries the schema and "
        "falls back per endpoint",
        choices=("auto", "json_schema", "json_object", "off"),
    )

    CycleTokenBudget: int = _opt(
        0,
        "tokens one cycle's model calls may spend for this agent; a call that would go over is deferred; 0 = no cap",
        minimum=0,
    )
    DailyTokenBudget: int = _opt(
        0,
        "tokens this agent's model calls may spend per UTC day; over it, passes wait for the next day; 0 = no cap",
        minimum=0,
    )
    LlmPriceInputPerMillion: float = _opt(0.0, "price of a million prompt tokens, for the cost figures", minimum=0.0)
    LlmPriceOutputPerMillion: float = _opt(
        0.0, "price of a million completion tokens, for the cost figures", minimum=0.0
    )

    # --- A model per pass: empty = the Llm* option (DreamOptions.for_pass_model) ---
    MemoryConsolidationModel: str = _opt("", "model for memory consolidation; empty = LlmModel")
    MemoryConsolidationBaseUrl: str = _opt("", "endpoint for memory consolidation; empty = LlmBaseUrl", url=True)
    MemoryConsolidationApiKeyEnv: str = _opt("", "API key variable for memory consolidation; empty = LlmApiKeyEnv")
    SkillGapDetectionModel: str = _opt("", "model for skill gap detection; empty = LlmModel")
    SkillGapDetectionBaseUrl: str = _opt("", "endpoint for skill gap detection; empty = LlmBaseUrl", url=True)
    SkillGapDetectionApiKeyEnv: str = _opt("", "API key variable for skill gap detection; empty = LlmApiKeyEnv")
    SkillConsolidationModel: str = _opt("", "model for skill consolidation; empty = LlmModel")
    SkillConsolidationBaseUrl: str = _opt("", "endpoint for skill consolidation; empty = LlmBaseUrl", url=True)
    SkillConsolidationApiKeyEnv: str = _opt("", "API key variable for skill consolidation; empty = LlmApiKeyEnv")
    SkillOptimizationModel: str = _opt("", "model for skill optimization; empty = LlmModel")
    SkillOptimizationBaseUrl: str = _opt("", "endpoint for skill optimization; empty = LlmBaseUrl", url=True)
    SkillOptimizationApiKeyEnv: str = _opt("", "API key variable for skill optimization; empty = LlmApiKeyEnv")
    PreferenceInferenceModel: str = _opt("", "model for preference inference; empty = LlmModel")
    PreferenceInferenceBaseUrl: str = _opt("", "endpoint for preference inference; empty = LlmBaseUrl", url=True)
    PreferenceInferenceApiKeyEnv: str = _opt("", "API key variable for preference inference; empty = LlmApiKeyEnv")
    WispFailureAnalysisModel: str = _opt("", "model for wisp failure analysis; empty = LlmModel")
    WispFailureAnalysisBaseUrl: str = _opt("", "endpoint for wisp failure analysis; empty = LlmBaseUrl", url=True)
    WispFailureAnalysisApiKeyEnv: str = _opt("", "API key variable for wisp failure analysis; empty = LlmApiKeyEnv")
    TierRoutingReviewModel: str = _opt("", "model for tier routing review; empty = LlmModel")
    TierRoutingReviewBaseUrl: str = _opt("", "endpoint for tier routing review; empty = LlmBaseUrl", url=True)
    TierRoutingReviewApiKeyEnv: str = _opt("", "API key variable for tier routing review; empty = LlmApiKeyEnv")
    ContradictionSweepModel: str = _opt("", "model for contradiction sweep; empty = LlmModel")
    ContradictionSweepBaseUrl: str = _opt("", "endpoint for contradiction sweep; empty = LlmBaseUrl", url=True)
    ContradictionSweepApiKeyEnv: str = _opt("", "API key variable for contradiction sweep; empty = LlmApiKeyEnv")

    # --- Review before apply (passes/review.py): per pass, empty = ApplyMode ---
    ApplyMode: str = _opt(
        "auto",
        "auto applies a pass's changes; review holds them as a pending change set until `dream apply`; review-risky "
        "applies the safe kinds (exact folds, reinforcements, noise removals, retention) and holds the rest",
        choices=("auto", "review", "review-risky"),
    )
    ReviewExpiryDays: float = _opt(
        14.0, "days a pending change waits for `dream apply` or `dream reject` before it expires", minimum=0.0
    )
    ArchivePurgeApplyMode: str = _opt(
        "", "ApplyMode of archive purge; empty = ApplyMode", choices=("", "auto", "review", "review-risky")
    )
    ImportanceDecayApplyMode: str = _opt(
        "", "ApplyMode of importance decay; empty = ApplyMode", choices=("", "auto", "review", "review-risky")
    )
    MemoryConsolidationApplyMode: str = _opt(
        "", "ApplyMode of memory consolidation; empty = ApplyMode", choices=("", "auto", "review", "review-risky")
    )
    SkillGapDetectionApplyMode: str = _opt(
        "", "ApplyMode of skill gap detection; empty = ApplyMode", choices=("", "auto", "review", "review-risky")
    )
    WispFailureAnalysisApplyMode: str = _opt(
        "", "ApplyMode of wisp failure analysis; empty = ApplyMode", choices=("", "auto", "review", "review-risky")
    )
    SkillConsolidationApplyMode: str = _opt(
        "", "ApplyMode of skill consolidation; empty = ApplyMode", choices=("", "auto", "review", "review-risky")
    )
    SkillOptimizationApplyMode: str = _opt(
        "", "ApplyMode of skill optimization; empty = ApplyMode", choices=("", "auto", "review", "review-risky")
    )
    PreferenceInferenceApplyMode: str = _opt(
        "", "ApplyMode of preference inference; empty = ApplyMode", choices=("", "auto", "review", "review-risky")
    )
    TierRoutingReviewApplyMode: str = _opt(
        "", "ApplyMode of tier routing review; empty = ApplyMode", choices=("", "auto", "review", "review-risky")
    )
    ContradictionSweepApplyMode: str = _opt(
        "", "ApplyMode of contradiction sweep; empty = ApplyMode", choices=("", "auto", "review", "review-risky")
    )

    # --- Embeddings (the near-duplicate measure where available; LlmTimeout and LlmMaxRetries apply) ---
    EmbeddingModel: str = _opt("", "embedding model sent to /v1/embeddings; empty = no embeddings (lexical measure)")
    EmbeddingBaseUrl: str = _opt("", "OpenAI-compatible endpoint for embeddings; empty = LlmBaseUrl", url=True)
    EmbeddingApiKeyEnv: str = _opt("", "environment variable holding the embeddings API key; empty = LlmApiKeyEnv")
    EmbeddingBatchSize: int = _opt(64, "texts sent in one embeddings request", minimum=1, maximum=2048)
    EmbeddingDimensions: int = _opt(
        0,
        "size of the embedding model's vectors: an answer or a cached vector of another size is refused (the lexical "
        "measure is used); 0 = not fixed, the size first cached for the model holds",
        minimum=0,
        maximum=65536,
    )
    EmbeddingSimilarityThreshold: float = _opt(
        0.0,
        "cosine threshold over embeddings, for near-duplicate clusters and save-time dedup alike; 0 = follow the "
        "model: its measured value (llm/embedding_threshold.py), else calibrated on the agent's own entries",
        minimum=0.0,
        maximum=1.0,
    )

    # --- Deployment ---
    ProfileRoot: str = _opt("data/agents", "folder whose sub-folders are agent profiles")
    ServeHeaderTimeout: timedelta = _opt(
        timedelta(seconds=10),
        "dream serve --http: a connection whose request headers are not complete this long after it opened (or after "
        "its previous response) is closed",
        duration="positive",
    )
    ServeBodyTimeout: timedelta = _opt(
        timedelta(seconds=30),
        "dream serve --http: a connection whose request body is not complete this long after its headers is closed",
        duration="positive",
    )
    ServeMaxConnectionsPerClient: int = _opt(
        64,
        "dream serve --http: connections one client address holds at most; one more takes the place of its "
        "connection waiting longest for its request (503 when every one is being answered)",
        minimum=1,
    )
    ServeMaxConnections: int = _opt(
        512,
        "dream serve --http: connections in all (never more than half the process's descriptor limit); one more "
        "takes the place of the connection waiting longest for its request (503 when every one is being answered)",
        minimum=1,
    )
    SnapshotRetention: timedelta = _opt(
        timedelta(days=30), "snapshots older than this are removed (the newest is always kept)"
    )
    AuditTrendRetention: timedelta = _opt(timedelta(days=400), "how long the memory audit trend file keeps rows")
    AuditPauseOnHardDelete: bool = _opt(False, "audit writes consolidation-paused.json when it finds hard deletes")
    RunRetention: timedelta = _opt(
        timedelta(days=30),
        "finished Dagster runs older than this are deleted daily with their events; zero keeps them all",
    )
    RunTimeout: timedelta = _opt(
        timedelta(minutes=5),
        "a run with no sign of life (its heartbeat) for this long is dead: it is marked failed and the pool slots it "
        "held are freed (a run on the same machine whose process is gone is dead at once); zero waits for ever",
    )

    # ------------------------------------------------------------------
    def replace(self, **changes: Any) -> DreamOptions:
        return dataclasses.replace(self, **changes)

    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    # --- The nested, typed view (LAYOUT): options.passes[name].model, options.schedule.interval ... ---
    @property
    def passes(self) -> Mapping[str, PassOptions]:
        """Each pass's options by the registry's pass name: ``options.passes["memory_consolidation"].model``."""
        return _PassesView(self)

    @property
    def schedule(self) -> Any:
        return _section(self, "schedule")

    @property
    def change_gate(self) -> Any:
        return _section(self, "change_gate")

    @property
    def memory(self) -> Any:
        return _section(self, "memory")

    @property
    def skills(self) -> Any:
        return _section(self, "skills")

    @property
    def model(self) -> Any:
        return _section(self, "model")

    @property
    def embeddings(self) -> Any:
        return _section(self, "embeddings")

    @property
    def store(self) -> Any:
        return _section(self, "store")

    @property
    def review(self) -> Any:
        return _section(self, "review")

    @property
    def deployment(self) -> Any:
        return _section(self, "deployment")

    def for_pass_model(self, pass_name: str) -> DreamOptions:
        """The options a pass's model calls use: the pass's own model, endpoint and API key variable
        (``[passes.<name>] model`` ..., alias ``<Pass>Model``) in place of the model section's where set (a cheap model
        for preference inference, a strong one for consolidation); these options unchanged otherwise (also for a pass
        that has no model options)."""
        own = self.passes.get(pass_name)
        if own is None or own.model is None:
            return self
        model, base_url, api_key_env = own.model, own.base_url or self.LlmBaseUrl, own.api_key_env or self.LlmApiKeyEnv
        if (model, base_url, api_key_env) == (self.LlmModel, self.LlmBaseUrl, self.LlmApiKeyEnv):
            return self
        return self.replace(LlmModel=model, LlmBaseUrl=base_url, LlmApiKeyEnv=api_key_env)

    @classmethod
    def load(
        cls,
        *,
        env: Mapping[str, str] | None = None,
        toml_path: str | Path | None = None,
        overrides: Mapping[str, Any] | None = None,
        profile_toml: str | Path | None = None,
    ) -> DreamOptions:
        """Defaults, then the deployment TOML file (``toml_path`` or ``DREAM_CONFIG``), then the agent's own TOML file
        (``profile_toml``, when it exists), then ``DREAM__*`` variables, then explicit overrides."""
        return cls.resolve(env=env, toml_path=toml_path, overrides=overrides, profile_toml=profile_toml).options

    @classmethod
    def resolve(
        cls,
        *,
        env: Mapping[str, str] | None = None,
        toml_path: str | Path | None = None,
        overrides: Mapping[str, Any] | None = None,
        profile_toml: str | Path | None = None,
    ) -> ResolvedOptions:
        """``load``, and where each option's value came from (``ResolvedOptions.sources``)."""
        env = os.environ if env is None else env
        #: each source: the file (empty for the environment and the overrides) and its (key, value, where) items
        sources: list[tuple[str, list[tuple[str, Any, str]]]] = []
        paths = [p for p in (toml_path or env.get("DREAM_CONFIG"),) if p]
        if profile_toml and Path(profile_toml).exists():
            paths.append(profile_toml)
        for path in paths:
            items = _read_toml(Path(path)).items()
            sources.append((str(path), [(key, value, f"{path}: {key}") for key, value in items]))
        prefixed = [key for key in env if key.upper().startswith(ENV_PREFIX)]
        sources.append(("", [(key[len(ENV_PREFIX) :], env[key], key) for key in prefixed]))
        sources.append(("", [(key, value, key) for key, value in (overrides or {}).items()]))
        values: dict[str, Any] = {}
        where_from: dict[str, str] = {}
        for origin, items in sources:
            seen: dict[str, tuple[Any, str]] = {}
            for key, value, where in items:
                name = _canonical(key, origin or where)
                result = _coerce(name, value, where)
                if name in seen and seen[name][0] != result:
                    raise OptionsError(
                        f"option {name} is set twice with different values: {seen[name][1]} = {seen[name][0]!r} and "
                        f"{where} = {result!r}; keep one of them (a nested name and its flat alias are one option)"
                    )
                seen[name] = (result, where)
            for name, (result, where) in seen.items():
                values[name], where_from[name] = result, where
        return ResolvedOptions(cls(**values), where_from)


@dataclass(frozen=True)
class ResolvedOptions:
    """Options and where each came from: the file and key, or the environment variable (absent: the default)."""

    options: DreamOptions
    sources: Mapping[str, str]

    def source(self, name: str) -> str:
        return self.sources.get(name, "default")

    def rows(self) -> list[OptionRow]:
        """Every option in the nested layout's order, with its resolved value and source."""
        rows = []
        for name, path in LAYOUT.items():
            value = getattr(self.options, name)
            rows.append(OptionRow(".".join(path), name, value, format_value(value), self.source(name)))
        return rows


@dataclass(frozen=True)
class OptionRow:
    nested: str  # "passes.memory_consolidation.model"
    alias: str  # "MemoryConsolidationModel"
    value: Any
    shown: str  # the value as the options file or environment would spell it
    source: str  # "default", "<file>: <key>" or the environment variable's name


def format_value(value: Any) -> str:
    """A resolved value as it would be written in ``dream.toml`` or a ``DREAM__*`` variable."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return _format_duration(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _format_duration(value: timedelta) -> str:
    seconds = value.total_seconds()
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{int(count)}{unit}")
    if seconds:
        parts.append(f"{seconds:g}s")
    return sign + "".join(parts)


def load_agent_options(profile: AgentProfile, env: Mapping[str, str] | None = None) -> DreamOptions:
    """One agent's options, as every ``dream`` command loads them: the defaults, the deployment file
    (``DREAM_CONFIG``), the agent's ``dream.toml``, then the ``DREAM__*`` environment (``env``, else ``os.environ``)."""
    return resolve_agent_options(profile, env).options


def resolve_agent_options(profile: AgentProfile, env: Mapping[str, str] | None = None) -> ResolvedOptions:
    """``load_agent_options`` with where each value came from (``dream status --options``)."""
    return DreamOptions.resolve(env=os.environ if env is None else env, profile_toml=profile.options_path)


# ----------------------------------------------------------------------------------------------------------------
# The nested layout. Every option has one place: a global section or a pass's section. The table is written out
# name by name (never built from a pass name), and import fails when it misses a field or names one that is not.

#: The passes of a dream cycle by the registry's names (passes/registry.py PASSES; a test holds the two equal).
PASS_NAMES = (
    "log_retention",
    "archive_purge",
    "importance_decay",
    "memory_consolidation",
    "skill_gap_detection",
    "wisp_failure_analysis",
    "skill_consolidation",
    "skill_optimization",
    "preference_inference",
    "tier_routing_review",
    "contradiction_sweep",
)

#: The keys every pass section may have (a pass has those that apply to it).
PASS_KEYS = ("enabled", "model", "base_url", "api_key_env", "apply_mode", "directive", "min_interval")

#: Global sections: key -> the flat option name of today (its alias).
SECTIONS: dict[str, dict[str, str]] = {
    "schedule": {
        "enabled": "Enabled",
        "initial_delay": "InitialDelay",
        "interval": "Interval",
        "busy_poll_interval": "BusyPollInterval",
        "busy_max_wait": "BusyMaxWait",
        "busy_retry_initial_delay": "BusyRetryInitialDelay",
        "busy_retry_multiplier": "BusyRetryMultiplier",
        "busy_retry_max_delay": "BusyRetryMaxDelay",
        "busy_retry_max_attempts": "BusyRetryMaxAttempts",
        "agent_active_window": "AgentActiveWindow",
        "busy_lease_stale_after": "BusyLeaseStaleAfter",
    },
    "change_gate": {
        "enabled": "DreamPassChangeGateEnabled",
        "max_skip_interval": "DreamPassMaxSkipInterval",
    },
    "memory": {
        "dedupe_similarity_threshold": "DedupeSimilarityThreshold",
        "max_content_chars": "MaxContentChars",
        "lexical_similarity_measure": "LexicalSimilarityMeasure",
        "lexical_overlap_threshold": "LexicalOverlapThreshold",
        "scope_categories": "MemoryScopeCategories",
        "pruning_protection_importance": "PruningProtectionImportance",
        "pruning_protection_reinforcement_count": "PruningProtectionReinforcementCount",
        "recall_recency_weight": "RecallRecencyWeight",
        "recall_recency_half_life": "RecallRecencyHalfLife",
        "recall_reinforcement_weight": "RecallReinforcementWeight",
        "feedback_window": "FeedbackWindow",
        "feedback_max_signals": "FeedbackMaxSignals",
        "folder_promotion_min_daily_notes": "FolderPromotionMinDailyNotes",
    },
    "skills": {
        "usage_window": "SkillUsageWindow",
        "sparse_max_chars": "SparseSkillMaxChars",
        "sparse_min_age": "SparseSkillMinAge",
    },
    "model": {
        "backend": "LlmBackend",
        "base_url": "LlmBaseUrl",
        "model": "LlmModel",
        "api_key_env": "LlmApiKeyEnv",
        "timeout": "LlmTimeout",
        "max_retries": "LlmMaxRetries",
        "temperature": "LlmTemperature",
        "json_mode": "LlmJsonMode",
        "max_tokens": "LlmMaxTokens",
        "context_tokens": "LlmContextTokens",
        "max_calls_per_pass": "LlmMaxCallsPerPass",
        "structured_output": "LlmStructuredOutput",
        "cycle_token_budget": "CycleTokenBudget",
        "daily_token_budget": "DailyTokenBudget",
        "price_input_per_million": "LlmPriceInputPerMillion",
        "price_output_per_million": "LlmPriceOutputPerMillion",
    },
    "embeddings": {
        "model": "EmbeddingModel",
        "base_url": "EmbeddingBaseUrl",
        "api_key_env": "EmbeddingApiKeyEnv",
        "batch_size": "EmbeddingBatchSize",
        "dimensions": "EmbeddingDimensions",
        "similarity_threshold": "EmbeddingSimilarityThreshold",
    },
    "store": {
        "lock_timeout": "StoreLockTimeout",
        "snapshot_retention": "SnapshotRetention",
        "audit_trend_retention": "AuditTrendRetention",
        "audit_pause_on_hard_delete": "AuditPauseOnHardDelete",
    },
    "review": {
        "apply_mode": "ApplyMode",
        "expiry_days": "ReviewExpiryDays",
    },
    "deployment": {
        "profile_root": "ProfileRoot",
        "serve_header_timeout": "ServeHeaderTimeout",
        "serve_body_timeout": "ServeBodyTimeout",
        "serve_max_connections_per_client": "ServeMaxConnectionsPerClient",
        "serve_max_connections": "ServeMaxConnections",
        "run_retention": "RunRetention",
        "run_timeout": "RunTimeout",
    },
}

#: Each pass's section: key -> the flat option name of today. The PASS_KEYS a pass has, then its own options.
PASS_SECTIONS: dict[str, dict[str, str]] = {
    "log_retention": {
        "enabled": "LogRetentionEnabled",
        "max_file_age": "LogRetentionMaxFileAge",
        "max_files_per_directory": "LogRetentionMaxFilesPerDirectory",
        "max_lines_per_file": "LogRetentionMaxLinesPerFile",
    },
    "archive_purge": {
        "enabled": "ArchivePurgeEnabled",
        "apply_mode": "ArchivePurgeApplyMode",
        "retention": "MemoryArchiveRetention",
    },
    "importance_decay": {
        "enabled": "ImportanceDecayEnabled",
        "apply_mode": "ImportanceDecayApplyMode",
        "grace_days": "ImportanceDecayGraceDays",
        "half_life_days": "ImportanceDecayHalfLifeDays",
        "floor": "ImportanceDecayFloor",
    },
    "memory_consolidation": {
        "enabled": "MemoryConsolidationEnabled",
        "model": "MemoryConsolidationModel",
        "base_url": "MemoryConsolidationBaseUrl",
        "api_key_env": "MemoryConsolidationApiKeyEnv",
        "apply_mode": "MemoryConsolidationApplyMode",
        "directive": "DirectivePath",
        "min_interval": "ConsolidationMinInterval",
        "similarity_threshold": "ConsolidationSimilarityThreshold",
        "call_shape": "ConsolidationCallShape",
        "max_cluster_size": "ConsolidationMaxClusterSize",
        "max_entries_per_call": "ConsolidationMaxEntriesPerCall",
        "merge_repair_enabled": "MergeRepairEnabled",
        "merge_repair_max_per_cycle": "MergeRepairMaxPerCycle",
        "removal_guard_enabled": "ConsolidationRemovalGuardEnabled",
        "settled_cooldown": "ConsolidationSettledCooldown",
        "exact_fold_enabled": "ConsolidationExactFoldEnabled",
    },
    "skill_gap_detection": {
        "enabled": "SkillGapEnabled",
        "model": "SkillGapDetectionModel",
        "base_url": "SkillGapDetectionBaseUrl",
        "api_key_env": "SkillGapDetectionApiKeyEnv",
        "apply_mode": "SkillGapDetectionApplyMode",
        "directive": "SkillGapDirectivePath",
    },
    "wisp_failure_analysis": {
        "enabled": "WispFailureAnalysisEnabled",
        "model": "WispFailureAnalysisModel",
        "base_url": "WispFailureAnalysisBaseUrl",
        "api_key_env": "WispFailureAnalysisApiKeyEnv",
        "apply_mode": "WispFailureAnalysisApplyMode",
        "directive": "WispFailureDirectivePath",
        "window": "WispAnalysisWindow",
        "failure_min_frequency": "WispFailureMinFrequency",
        "success_min_frequency": "WispSuccessMinFrequency",
        "success_min_rate": "WispSuccessMinRate",
    },
    "skill_consolidation": {
        "enabled": "SkillConsolidationEnabled",
        "model": "SkillConsolidationModel",
        "base_url": "SkillConsolidationBaseUrl",
        "api_key_env": "SkillConsolidationApiKeyEnv",
        "apply_mode": "SkillConsolidationApplyMode",
        "directive": "SkillDirectivePath",
        "co_used_pairs": "SkillCoUsedPairs",
    },
    "skill_optimization": {
        "enabled": "SkillOptimizationEnabled",
        "model": "SkillOptimizationModel",
        "base_url": "SkillOptimizationBaseUrl",
        "api_key_env": "SkillOptimizationApiKeyEnv",
        "apply_mode": "SkillOptimizationApplyMode",
        "directive": "SkillOptimizeDirectivePath",
    },
    "preference_inference": {
        "enabled": "PreferenceInferenceEnabled",
        "model": "PreferenceInferenceModel",
        "base_url": "PreferenceInferenceBaseUrl",
        "api_key_env": "PreferenceInferenceApiKeyEnv",
        "apply_mode": "PreferenceInferenceApplyMode",
        "directive": "PreferenceDirectivePath",
    },
    "tier_routing_review": {
        "enabled": "TierRoutingReviewEnabled",
        "model": "TierRoutingReviewModel",
        "base_url": "TierRoutingReviewBaseUrl",
        "api_key_env": "TierRoutingReviewApiKeyEnv",
        "apply_mode": "TierRoutingReviewApplyMode",
        "directive": "TierRoutingDirectivePath",
        "window": "TierRoutingReviewWindow",
    },
    "contradiction_sweep": {
        "enabled": "ContradictionSweepEnabled",
        "model": "ContradictionSweepModel",
        "base_url": "ContradictionSweepBaseUrl",
        "api_key_env": "ContradictionSweepApiKeyEnv",
        "apply_mode": "ContradictionSweepApplyMode",
        "directive": "ContradictionSweepDirectivePath",
        "neighbours": "ContradictionSweepNeighbours",
        "max_entries_per_call": "ContradictionSweepMaxEntriesPerCall",
        "max_superseded_share": "ContradictionSweepMaxSupersededShare",
    },
}

#: Every option's nested path by its flat name: ("model", "base_url"), ("passes", "skill_gap_detection", "enabled").
LAYOUT: dict[str, tuple[str, ...]] = {
    **{flat: (section, key) for section, keys in SECTIONS.items() for key, flat in keys.items()},
    **{flat: ("passes", name, key) for name, keys in PASS_SECTIONS.items() for key, flat in keys.items()},
}


@dataclass(frozen=True)
class PassOptions:
    """One pass's options, resolved: ``None`` for a key the pass does not have (no ``model`` for a pass that calls no
    model, no ``apply_mode`` for one that writes no store). ``model``, ``base_url`` and ``api_key_env`` fall back to
    the model section's, ``apply_mode`` to the review section's. A pass with options of its own has them as fields
    of its own subclass (``PASS_TYPES``): ``options.passes["contradiction_sweep"].neighbours``."""

    name: str
    enabled: bool
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    apply_mode: str | None = None
    directive: str | None = None
    min_interval: timedelta | None = None

    @property
    def writes_store(self) -> bool:
        """Has the pass changes to hold for review (it has an apply mode)?"""
        return self.apply_mode is not None

    @property
    def own(self) -> dict[str, Any]:
        """The pass's own options by key (those beyond PASS_KEYS)."""
        shared = {f.name for f in fields(PassOptions)}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in shared}


def _pass_options(options: DreamOptions, name: str) -> PassOptions:
    keys = PASS_SECTIONS[name]

    def value(key: str) -> Any:
        flat = keys.get(key)
        return None if flat is None else getattr(options, flat)

    model, base_url, api_key_env = value("model"), value("base_url"), value("api_key_env")
    apply_mode = value("apply_mode")
    return PASS_TYPES[name](
        name=name,
        enabled=value("enabled"),
        model=None if model is None else (model.strip() or options.LlmModel),
        base_url=None if base_url is None else (base_url.strip() or options.LlmBaseUrl),
        api_key_env=None if api_key_env is None else (api_key_env.strip() or options.LlmApiKeyEnv),
        apply_mode=None if apply_mode is None else (apply_mode or options.ApplyMode),
        directive=value("directive"),
        min_interval=value("min_interval"),
        **{key: getattr(options, flat) for key, flat in keys.items() if key not in PASS_KEYS},
    )


class _PassesView(Mapping[str, PassOptions]):
    """``options.passes``: each pass's PassOptions, built when asked for."""

    def __init__(self, options: DreamOptions) -> None:
        self._options = options

    def __getitem__(self, name: str) -> PassOptions:
        if name not in PASS_SECTIONS:
            raise KeyError(f"no options section for pass {name!r}; passes: {', '.join(PASS_NAMES)}")
        return _pass_options(self._options, name)

    def __iter__(self) -> Iterator[str]:
        return iter(PASS_NAMES)

    def __len__(self) -> int:
        return len(PASS_NAMES)


_FIELDS = {f.name: f for f in fields(DreamOptions)}

#: One frozen dataclass per global section, its fields typed as the options they hold.
SECTION_TYPES: dict[str, type] = {
    section: dataclasses.make_dataclass(
        "".join(word.capitalize() for word in section.split("_")) + "Options",
        [(key, _FIELDS[flat].type) for key, flat in keys.items()],
        frozen=True,
    )
    for section, keys in SECTIONS.items()
}


#: One frozen PassOptions subclass per pass, with the pass's own options as typed fields.
PASS_TYPES: dict[str, type[PassOptions]] = {
    name: dataclasses.make_dataclass(
        "".join(word.capitalize() for word in name.split("_")) + "Options",
        [(key, _FIELDS[flat].type, field(kw_only=True)) for key, flat in keys.items() if key not in PASS_KEYS],
        bases=(PassOptions,),
        frozen=True,
    )
    for name, keys in PASS_SECTIONS.items()
}


def _section(options: DreamOptions, section: str) -> Any:
    return SECTION_TYPES[section](**{key: getattr(options, flat) for key, flat in SECTIONS[section].items()})


def _check_layout() -> None:
    missing = [name for name in _FIELDS if name not in LAYOUT]
    unknown = [name for name in LAYOUT if name not in _FIELDS]
    placed = [flat for keys in (*SECTIONS.values(), *PASS_SECTIONS.values()) for flat in keys.values()]
    twice = sorted({flat for flat in placed if placed.count(flat) > 1})
    if missing or unknown or twice or tuple(PASS_SECTIONS) != PASS_NAMES:
        raise AssertionError(f"options layout: missing {missing}, unknown {unknown}, placed twice {twice}")


_check_layout()

_BY_LOWER = {name.lower(): name for name in _FIELDS}
_SECTIONS = {"dream", "memory"}


def _squash(word: str) -> str:
    return word.replace("_", "").lower()


#: The nested spellings, case and underscores aside: ("model", "baseurl") -> LlmBaseUrl.
_NESTED: dict[tuple[str, ...], str] = {tuple(_squash(part) for part in path): flat for flat, path in LAYOUT.items()}


def _canonical(key: str, where: str) -> str:
    parts = [p for p in re.split(r"__|:|\.", key) if p]
    nested = _NESTED.get(tuple(_squash(part) for part in parts))
    if nested is not None:
        return nested
    if parts and parts[0].lower() == "passes":
        raise OptionsError(f"unknown dream option {key!r} (from {where}); {_pass_hint(parts[1:])}")
    if len(parts) > 1 and parts[0].lower() in _SECTIONS:
        parts = parts[1:]
    name = "".join(parts)
    found = _BY_LOWER.get(name.lower())
    if found is None:
        raise OptionsError(f"unknown dream option {key!r} (from {where}); {_closest(name)}{OPTIONS_LISTED}")
    return found


def _pass_hint(parts: list[str]) -> str:
    """What a pass option is spelled like, for a ``passes.<pass>.<key>`` that names no option."""
    by_squash = {_squash(name): name for name in PASS_NAMES}
    name = by_squash.get(_squash(parts[0])) if parts else None
    if name is None:
        near = difflib.get_close_matches(parts[0].lower() if parts else "", PASS_NAMES, n=1, cutoff=0.6)
        guess = f"did you mean {near[0]}? " if near else ""
        return f"{guess}a pass option is passes.<pass>.<key>; the passes: {', '.join(PASS_NAMES)}"
    keys = list(PASS_SECTIONS[name])
    near = difflib.get_close_matches("_".join(parts[1:]).lower(), keys, n=1, cutoff=0.6)
    guess = f"did you mean passes.{name}.{near[0]}? " if near else ""
    return f"{guess}the options of pass {name}: {', '.join(keys)}"


#: Where every option is listed with its default and what it accepts.
OPTIONS_LISTED = "(every option, with its default: the DreamOptions class in dream_assets/options.py)"


def _closest(name: str) -> str:
    """`did you mean X? ` for the option nearest a mistyped name (case aside), or nothing when none is near."""
    near = difflib.get_close_matches(name.lower(), list(_BY_LOWER), n=1, cutoff=0.6)
    return f"did you mean {_BY_LOWER[near[0]]}? " if near else ""


def _read_toml(path: Path) -> dict[str, Any]:
    """A TOML options file, flattened. Anything wrong with the file is an ``OptionsError`` naming it and the fault
    (a byte order mark is allowed: editors add one to UTF-8 files)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise OptionsError(f"options file {path} does not exist") from exc
    except IsADirectoryError as exc:
        raise OptionsError(f"options file {path} is a directory, not a TOML file") from exc
    except OSError as exc:
        raise OptionsError(f"options file {path} cannot be read: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise OptionsError(
            f"options file {path} is not UTF-8 text: byte 0x{raw[exc.start]:02x} on line {line} "
            f"(offset {exc.start}) is not valid UTF-8; save the file as UTF-8"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise OptionsError(f"options file {path} is not valid TOML: {exc}") from exc
    flat: dict[str, Any] = {}

    def walk(table: dict[str, Any], prefix: str) -> None:
        # [memory], [model], [passes.memory_consolidation] ... tables: their keys as "passes.memory_consolidation.model"
        for key, value in table.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                flat[prefix + key] = value

    walk(data, "")
    return flat


_TIMESPAN = re.compile(r"^(?:(?P<days>\d+)\.)?(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2}(?:\.\d+)?))?$")
_ISO = re.compile(
    r"^(?P<sign>-)?P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$",
    re.IGNORECASE,
)
#: ``90s``, ``30m``, ``4h``, ``7d``, ``2w`` and runs of them from the largest unit down (``1h30m``, ``1d 12h``).
_UNITS = re.compile(
    r"^(?P<sign>-)?\s*(?:(?P<w>\d+(?:\.\d+)?)\s*w\s*)?(?:(?P<d>\d+(?:\.\d+)?)\s*d\s*)?"
    r"(?:(?P<h>\d+(?:\.\d+)?)\s*h\s*)?(?:(?P<m>\d+(?:\.\d+)?)\s*m\s*)?(?:(?P<s>\d+(?:\.\d+)?)\s*s)?$",
    re.IGNORECASE,
)


_UNIT_NAMES = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_duration(text: str) -> timedelta:
    """ISO-8601 (``P7D``, ``PT6H30M``), ``[-][D.]HH:MM[:SS]``, units (``90s``, ``30m``, ``4h``, ``7d``, ``2w``,
    ``1h30m``) or plain seconds. Raises ValueError, also for a value no ``timedelta`` holds (``1e30``, ``nan``)."""
    try:
        return _parse_duration(text)
    except OverflowError:
        raise ValueError(text) from None


def _parse_duration(text: str) -> timedelta:
    s = text.strip()
    negative = s.startswith("-")
    body = s[1:] if negative else s
    m = _TIMESPAN.fullmatch(body)
    if m:
        td = timedelta(days=int(m["days"] or 0), hours=int(m["h"]), minutes=int(m["m"]), seconds=float(m["s"] or 0))
        return -td if negative else td
    for pattern in (_ISO, _UNITS):
        m = pattern.fullmatch(s)
        if m and any(m[g] for g in ("w", "d", "h", "m", "s")):
            parts = {unit: float(m[g] or 0) for g, unit in _UNIT_NAMES.items()}
            return -timedelta(**parts) if m["sign"] else timedelta(**parts)
    try:
        return timedelta(seconds=float(s))
    except ValueError:
        raise ValueError(text) from None


def _coerce(name: str, value: Any, where: str) -> Any:
    f = _FIELDS[name]
    meta = f.metadata
    kind = f.type if isinstance(f.type, str) else f.type.__name__

    def fail(accepted: str) -> OptionsError:
        return OptionsError(f"invalid value {value!r} for option {name} (from {where}): expected {accepted}")

    if kind == "bool":
        if isinstance(value, bool):
            result: Any = value
        elif str(value).strip().lower() in ("true", "1", "yes", "on"):
            result = True
        elif str(value).strip().lower() in ("false", "0", "no", "off"):
            result = False
        else:
            raise fail("true or false")
    elif kind == "int":
        try:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            result = int(str(value).replace("_", "").strip())
        except ValueError:
            raise fail("a whole number") from None
    elif kind == "float":
        try:
            if isinstance(value, bool):
                raise ValueError
            result = float(value)
        except (TypeError, ValueError):
            raise fail("a number") from None
    elif kind == "timedelta":
        if isinstance(value, timedelta):
            result = value
        else:
            try:
                if isinstance(value, int | float) and not isinstance(value, bool):
                    result = timedelta(seconds=value)
                else:
                    result = parse_duration(str(value))
            except (ValueError, OverflowError):
                raise fail(
                    "a duration: 30m, 4h or 7d, ISO-8601 such as PT6H or P7D, HH:MM:SS, D.HH:MM:SS, or seconds"
                ) from None
        _check_duration_range(name, result, fail)
    else:
        result = str(value)
        if meta.get("url"):
            result = _check_url(result, fail)
        if meta.get("choices") and result.lower() not in meta["choices"]:
            raise fail("one of " + ", ".join(meta["choices"]))
        if meta.get("choices"):
            result = result.lower()
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if lo is not None and result < lo:
        raise fail(f"a value of at least {lo}")
    if hi is not None and result > hi:
        raise fail(f"a value of at most {hi}")
    return result


def _check_duration_range(name: str, value: timedelta, fail: Any) -> None:
    """A negative (or, where it means nothing, zero) duration is refused; options whose help documents a meaning for
    non-positive values (retention, the forced-run interval) take any duration."""
    meta = _FIELDS[name].metadata
    if meta["duration"] == "positive" and value <= timedelta(0):
        raise fail(f"a positive duration such as PT1H: zero or negative has no meaning for {name} ({meta['help']})")
    if meta["duration"] == "zero" and value < timedelta(0):
        raise fail(
            f"a duration of zero or more such as PT1H: a negative one has no meaning for {name} ({meta['help']})"
        )


def _check_url(value: str, fail: Any) -> str:
    """Empty (no endpoint), or an absolute http(s) URL with a host."""
    text = value.strip()
    if not text:
        return ""
    try:
        parts = urlsplit(text)
        ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname) and not any(c.isspace() for c in text)
        _ = parts.port  # a port that is not a number in range raises ValueError
    except ValueError:
        ok = False
    if not ok:
        raise fail("an http:// or https:// URL with a host, such as http://127.0.0.1:11434/v1 (or empty for none)")
    return text
