"""DreamOptions: every option and default of the dream service, bound from a TOML file and the environment.

Names follow the specification (``LogRetentionMaxFileAge``, ``DreamPassMaxSkipInterval`` ...). The environment
binding mirrors the spec's ``Dream__X`` convention as ``DREAM__X``; a section may be spelled out
(``DREAM__Memory__DedupeSimilarityThreshold``, ``DREAM__Llm__BaseUrl``). Durations accept ISO-8601
(``PT6H``, ``P7D``), ``HH:MM:SS``, ``D.HH:MM:SS`` (the .NET TimeSpan form), units as people type them (``90s``,
``30m``, ``4h``, ``7d``, ``2w``, ``1h30m``) or a number of seconds.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Mapping
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

    # --- A model per pass: empty = the Llm* option (pass_model_options) ---
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
        0.88,
        "cosine threshold over embeddings, for near-duplicate clusters and save-time dedup alike",
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
        env = os.environ if env is None else env
        raw: dict[str, tuple[Any, str]] = {}
        paths = [p for p in (toml_path or env.get("DREAM_CONFIG"),) if p]
        if profile_toml and Path(profile_toml).exists():
            paths.append(profile_toml)
        for path in paths:
            for key, value in _read_toml(Path(path)).items():
                raw[_canonical(key, f"{path}")] = (value, f"{path}: {key}")
        for key, value in env.items():
            if key.upper().startswith(ENV_PREFIX):
                raw[_canonical(key[len(ENV_PREFIX) :], key)] = (value, key)
        for key, value in (overrides or {}).items():
            raw[_canonical(key, key)] = (value, key)
        values = {name: _coerce(name, value, where) for name, (value, where) in raw.items()}
        return cls(**values)


def pass_model_options(options: DreamOptions, pass_name: str) -> DreamOptions:
    """The options a pass's model calls use: its ``<Pass>Model``, ``<Pass>BaseUrl`` and ``<Pass>ApiKeyEnv`` in place of
    LlmModel, LlmBaseUrl and LlmApiKeyEnv where set (a cheap model for preference inference, a strong one for
    consolidation); the options unchanged otherwise."""
    camel = "".join(word.capitalize() for word in pass_name.split("_"))
    changes = {
        target: value
        for suffix, target in (("Model", "LlmModel"), ("BaseUrl", "LlmBaseUrl"), ("ApiKeyEnv", "LlmApiKeyEnv"))
        if (value := str(getattr(options, camel + suffix, "") or "").strip())
    }
    return options.replace(**changes) if changes else options


def load_agent_options(profile: AgentProfile, env: Mapping[str, str] | None = None) -> DreamOptions:
    """One agent's options, as every ``dream`` command loads them: the defaults, the deployment file
    (``DREAM_CONFIG``), the agent's ``dream.toml``, then the ``DREAM__*`` environment (``env``, else ``os.environ``)."""
    return DreamOptions.load(env=os.environ if env is None else env, profile_toml=profile.options_path)


_FIELDS = {f.name: f for f in fields(DreamOptions)}
_BY_LOWER = {name.lower(): name for name in _FIELDS}
_SECTIONS = {"dream", "memory"}


def _canonical(key: str, where: str) -> str:
    parts = [p for p in re.split(r"__|:|\.", key) if p]
    if len(parts) > 1 and parts[0].lower() in _SECTIONS:
        parts = parts[1:]
    name = "".join(parts)
    found = _BY_LOWER.get(name.lower())
    if found is None:
        raise OptionsError(f"unknown dream option {key!r} (from {where}); {_closest(name)}{OPTIONS_LISTED}")
    return found


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
    for key, value in data.items():
        if isinstance(value, dict):  # [dream], [memory], [llm] tables
            for inner, inner_value in value.items():
                flat[f"{key}__{inner}"] = inner_value
        else:
            flat[key] = value
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
