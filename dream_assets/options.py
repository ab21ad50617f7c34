"""DreamOptions: every option and default of the dream service, bound from a TOML file and the environment.

Every option has a nested name: a global section (``schedule``, ``change_gate``, ``memory``, ``skills``, ``model``,
``embeddings``, ``store``, ``review``, ``deployment``), declared here, or a pass's section ``passes.<pass>`` under the
registry's pass name, declared by the pass itself next to its body (a ``PassOptions`` subclass, its ``SPEC.options``):
the shared keys ``enabled``, ``model``, ``base_url``, ``api_key_env``, ``apply_mode``, ``directive`` and
``min_interval`` where the pass has them, and the pass's own options. This module names no pass: it holds the global
options, the machinery every pass section shares (``PassOptions``, ``pass_option``, the coercion and the checks) and
the pass settings a source made, by pass and key, for whichever section reads them. In TOML::

    [passes.<pass>]
    model = "qwen2.5:14b"
    [model]
    base_url = "http://127.0.0.1:11434/v1"

and in the environment ``DREAM__PASSES__<PASS>__MODEL``, ``DREAM__MODEL__BASE_URL`` (case and the underscores inside a
name aside). Readers use ``options.model.base_url`` and a pass's section: ``options.section(<Pass>Options)`` (typed
by the pass's own declaration) or ``options.passes[name]``; no option name is built from a pass name.

Loading takes two steps. ``DreamOptions.resolve`` types the global options and keeps what names none of them as
pending; given the pass sections (``passes=``, the registry's: dream_assets/options_loader.py, which every entry point
that knows the passes loads through), it types each pending setting by the section that has it and refuses one that no
section has, with a did-you-mean. Without them (the memory commands, which import no pass) a pass's settings are typed
when the pass reads its section.

Every flat name of the specification (``DreamPassMaxSkipInterval``, ``LlmBaseUrl``, and each pass option's alias, such
as ``<Pass>Model``) stays accepted as the nested name's alias, in the environment, in TOML and in ``replace``; a global
option's flat name is its attribute. The environment binding mirrors the spec's ``Dream__X`` convention as
``DREAM__X``; a section may be spelled out (``DREAM__Memory__DedupeSimilarityThreshold``, ``DREAM__Llm__BaseUrl``).

Which wins: sources are read in order — defaults, the deployment file, the agent's ``dream.toml``, the environment,
explicit overrides — and a later source wins. Within one source, one option set twice (a nested name and its alias,
or two spellings of one) with different values is refused with an error naming both; set twice to one value it is
accepted. ``ResolvedOptions.source`` tells where each value came from (``dream status --options``).

Durations accept ISO-8601 (``PT6H``, ``P7D``), ``HH:MM:SS``, ``D.HH:MM:SS`` (the .NET TimeSpan form), units as
people type them (``90s``, ``30m``, ``4h``, ``7d``, ``2w``, ``1h30m``) or a number of seconds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import Field, dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from dream_assets.profile import AgentProfile

ENV_PREFIX = "DREAM__"

#: A pass's options section (``DreamOptions.section`` returns the type it is given).
P = TypeVar("P", bound="PassOptions")


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
    alias: str | None = None,
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
        "alias": alias,
    }
    return field(default=default, metadata=meta)


def pass_option(
    default: Any,
    help: str,
    *,
    alias: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    choices: tuple[str, ...] | None = None,
    duration: str = "zero",
    url: bool = False,
) -> Any:
    """One key of a pass's options section (a field of its ``PassOptions`` subclass): its default, what it means, what
    it accepts and ``alias``, the flat name it had before the options nested (``<Pass><Option>``), which
    the environment, ``dream.toml`` and ``DreamOptions.replace`` accept for it. A new pass's option needs no alias."""
    return _opt(
        default, help, minimum=minimum, maximum=maximum, choices=choices, duration=duration, url=url, alias=alias
    )


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

    # --- Change gate ---
    DreamPassChangeGateEnabled: bool = _opt(True, "skip a corpus-wide pass whose input fingerprint has not moved")
    DreamPassMaxSkipInterval: timedelta = _opt(
        timedelta(days=7),
        "force a gated pass after this long; non-positive skips indefinitely",
        duration="any",
    )

    # --- Memory (what a pass never removes, the near-duplicate measure, the walls between scopes, feedback) ---
    PruningProtectionImportance: float = _opt(
        0.80,
        "importance at or above which an entry is never an ephemeral removal or purged",
        minimum=0.0,
        maximum=1.0,
    )
    PruningProtectionReinforcementCount: int = _opt(
        5, "reinforcements at or above which an entry is never an ephemeral removal or purged", minimum=0
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
    MemoryScopeCategories: str = _opt(
        "",
        "comma-separated category patterns that are walls (labels split on '/', '*' matches one label): with "
        "'users/*' the categories under users/alice and users/bob are two scopes, and consolidation, the "
        "contradiction sweep and save-time dedup never join or supersede entries of different scopes; empty: none "
        "beyond LangGraph namespaces, which are always walls",
    )
    FeedbackWindow: timedelta = _opt(timedelta(days=7), "how far back feedback signals are read")
    FeedbackMaxSignals: int = _opt(50, "most feedback signals shown to the model", minimum=0)

    # --- Skills ---
    SkillUsageWindow: timedelta = _opt(timedelta(days=30), "usage counts and co-use look back this far")
    SparseSkillMaxChars: int = _opt(200, "content shorter than this is sparse", minimum=0)
    SparseSkillMinAge: timedelta = _opt(timedelta(days=7), "a skill is sparse only when older than this")

    # --- Memory store (Memory: section) ---
    DedupeSimilarityThreshold: float = _opt(
        0.88,
        "save-time dedup cosine threshold (keep aligned with the similarity threshold of memory consolidation)",
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

    # --- Review before apply (passes/review.py): a pass's apply_mode, where set, replaces ApplyMode ---
    ApplyMode: str = _opt(
        "auto",
        "auto applies a pass's changes; review holds them as a pending change set until `dream apply`; review-risky "
        "applies the safe kinds (exact folds, reinforcements, noise removals, retention) and holds the rest",
        choices=("auto", "review", "review-risky"),
    )
    ReviewExpiryDays: float = _opt(
        14.0, "days a pending change waits for `dream apply` or `dream reject` before it expires", minimum=0.0
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

    # --- The passes' sections (passes.<pass>.<key>): each pass declares its own (a PassOptions subclass) ---
    #: The pass options set (those at their default left out): (pass, key, value), sorted.
    pass_values: tuple[tuple[str, str, Any], ...] = field(default=(), repr=False)
    #: The pass sections these options know, in the cycle's order: the registry's, attached by ``with_passes`` (the
    #: loader, dream_assets/options_loader.py, attaches them). ``passes`` lists them, flat aliases name their keys.
    declared: tuple[type[PassOptions], ...] = field(default=(), repr=False)
    #: What a source set that names no global option, kept until the pass sections are known: (source, key, value,
    #: where, origin). A pass's ``section`` reads its own from here; ``with_passes`` refuses what no section has.
    pending: tuple[tuple[int, str, Any, str, str], ...] = field(default=(), repr=False)

    # ------------------------------------------------------------------
    def replace(self, **changes: Any) -> DreamOptions:
        """These options with ``changes``: global options by name, a pass option by its flat alias
        (``<Pass><Option>``) or nested name (``passes.<pass>.<key>``) for the pass sections these options know."""
        own = {name: value for name, value in changes.items() if name in _FIELDS or name in _PASS_FIELDS}
        result = dataclasses.replace(self, **own)
        if len(own) == len(changes):
            return result
        values = {(name, key): value for name, key, value in self.pass_values}
        for name, value in changes.items():
            if name in own:
                continue
            place = _pass_place(_split(name), self.declared)
            if place is None:
                raise TypeError(f"DreamOptions.replace: no option {name!r}; {_closest(name, self.declared)}")
            values[(place[0].PASS, place[1])] = value
        return dataclasses.replace(result, pass_values=_normal(values, self.declared))

    @classmethod
    def option_names(cls) -> list[str]:
        """The global options' names (a pass's options are its section's: ``layout``)."""
        return list(_FIELDS)

    def layout(self) -> dict[str, tuple[str, ...]]:
        """Every option these options know by the name a person sets it by (the flat alias where it has one) ->
        its nested path: the global sections' (``LAYOUT``), then each known pass section's."""
        return {
            **LAYOUT,
            **{
                declared.label(key): ("passes", declared.PASS, key)
                for declared in self.declared
                for key in declared.keys()
            },
        }

    def option_field(self, name: str) -> Field[Any]:
        """The declaration of the option ``name`` (as ``layout`` names it): its type, default and what it accepts."""
        if name in _FIELDS:
            return _FIELDS[name]
        place = _pass_place(_split(name), self.declared)
        if place is None:
            raise KeyError(f"no option {name!r}")
        return place[0].keys()[place[1]]

    # --- The passes' sections: options.passes[name], options.section(<Pass>Options) ---
    @property
    def passes(self) -> Mapping[str, PassOptions]:
        """Each known pass's options by the registry's pass name: ``options.passes[name].model``
        (the sections ``declared`` holds; none for options built without them)."""
        return _PassesView(self)

    def section(self, declared: type[P]) -> P:
        """The pass's options, typed by its own section: what was set (in ``pass_values``, or a source's setting
        still ``pending``), else the section's defaults, with ``model``/``base_url``/``api_key_env`` falling back to
        the model section's and ``apply_mode`` to the review section's. An unusable pending value is an
        ``OptionsError`` here, where the pass first reads it."""
        values = {key: value for name, key, value in self.pass_values if name == declared.PASS}
        if self.pending and declared not in self.declared:
            found, _, _ = _resolve_pending(self.pending, (declared,), strict=False)
            values = {**{key: value for (_, key), value in found.items()}, **values}
        return declared.build(self, values)

    def with_passes(self, sections: Sequence[type[PassOptions]], *, strict: bool = True) -> DreamOptions:
        """These options knowing ``sections`` too (``declared``): the pending settings are typed by them, and with
        ``strict`` one that names no option of any section is an ``OptionsError`` with a did-you-mean."""
        return ResolvedOptions(self, {}).with_passes(sections, strict=strict).options

    def pass_value(self, declared: type[PassOptions], key: str) -> Any:
        """The value set for a pass's key, else the key's default: what its flat alias names (no fallback)."""
        for name, own, value in self.pass_values:
            if (name, own) == (declared.PASS, key):
                return value
        if self.pending and declared not in self.declared:
            found, _, _ = _resolve_pending(self.pending, (declared,), strict=False)
            if (declared.PASS, key) in found:
                return found[(declared.PASS, key)]
        return declared.keys()[key].default

    def value_of(self, name: str) -> Any:
        """The option a person names ``name`` (a global option's flat or nested name, a known pass section's flat
        alias or ``passes.<pass>.<key>``): its value, a pass option's as set (before the fallbacks). KeyError when
        these options know no such option."""
        parts = _split(name)
        found = _global_name(parts)
        if found is not None:
            return getattr(self, found)
        place = _pass_place(parts, self.declared)
        if place is None:
            raise KeyError(f"no option {name!r} among the global options and the known pass sections")
        return self.pass_value(*place)

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            # A pass option by its flat alias of today (options.<Pass><Option>), for the sections these options know.
            # The package reads a pass's options through its section; type checkers see no such attribute.
            if not name.startswith("_"):
                for declared in self.__dict__.get("declared", ()):
                    key = declared.by_alias().get(name)
                    if key is not None:
                        return self.pass_value(declared, key)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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
        passes: Sequence[type[PassOptions]] | None = None,
    ) -> DreamOptions:
        """Defaults, then the deployment TOML file (``toml_path`` or ``DREAM_CONFIG``), then the agent's own TOML file
        (``profile_toml``, when it exists), then ``DREAM__*`` variables, then explicit overrides. ``passes``: the pass
        sections to check and type every pass setting by (the registry's: dream_assets/options_loader.py); without
        them a setting that names no global option waits in ``pending`` for the section that reads it."""
        return cls.resolve(
            env=env, toml_path=toml_path, overrides=overrides, profile_toml=profile_toml, passes=passes
        ).options

    @classmethod
    def resolve(
        cls,
        *,
        env: Mapping[str, str] | None = None,
        toml_path: str | Path | None = None,
        overrides: Mapping[str, Any] | None = None,
        profile_toml: str | Path | None = None,
        passes: Sequence[type[PassOptions]] | None = None,
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
        pending: list[tuple[int, str, Any, str, str]] = []
        for index, (origin, items) in enumerate(sources):
            seen: dict[str, tuple[Any, str]] = {}
            for key, value, where in items:
                name = _global_name(_split(key))
                if name is None:  # a pass's option, or no option: the pass sections tell
                    pending.append((index, key, value, where, origin))
                    continue
                _once(seen, name, _coerce(_FIELDS[name], name, value, where), where)
            for name, (result, where) in seen.items():
                values[name], where_from[name] = result, where
        resolved = ResolvedOptions(cls(**values, pending=tuple(pending)), where_from)
        return resolved if passes is None else resolved.with_passes(passes)


class _PassesView(Mapping[str, "PassOptions"]):
    """``options.passes``: each known pass's options, built when asked for."""

    def __init__(self, options: DreamOptions) -> None:
        self._options = options

    def __getitem__(self, name: str) -> PassOptions:
        for declared in self._options.declared:
            if declared.PASS == name:
                return self._options.section(declared)
        known = ", ".join(self) or "none known (options built without the pass sections)"
        raise KeyError(f"no options section for pass {name!r}; passes: {known}")

    def __iter__(self) -> Iterator[str]:
        return iter([declared.PASS for declared in self._options.declared])

    def __len__(self) -> int:
        return len(self._options.declared)


@dataclass(frozen=True)
class ResolvedOptions:
    """Options and where each came from: the file and key, or the environment variable (absent: the default). A
    global option is named by its flat name, a pass option by its nested name (``passes.<pass>.<key>``); ``source``
    takes either name."""

    options: DreamOptions
    sources: Mapping[str, str]

    def source(self, name: str) -> str:
        place = None if name in _FIELDS else _pass_place(_split(name), self.options.declared)
        key = name if place is None else f"passes.{place[0].PASS}.{place[1]}"
        return self.sources.get(key, "default")

    def with_passes(self, sections: Sequence[type[PassOptions]], *, strict: bool = True) -> ResolvedOptions:
        """These options knowing ``sections`` too: each pending setting is typed by the section that has it (a
        nested name and its flat alias set to two values in one source are refused, a later source wins), and with
        ``strict`` one that no section has is an ``OptionsError`` naming the nearest option."""
        options = self.options
        new = tuple(s for s in sections if s not in options.declared)
        if not new and not (strict and options.pending):
            return self
        found, where_from, left = _resolve_pending(options.pending, new, strict=strict)
        declared = (*options.declared, *new)
        values = {**found, **{(name, key): value for name, key, value in options.pass_values}}
        options = dataclasses.replace(options, declared=declared, pass_values=_normal(values, declared), pending=left)
        sources = {**self.sources, **{f"passes.{name}.{key}": where for (name, key), where in where_from.items()}}
        return ResolvedOptions(options, sources)

    def rows(self) -> list[OptionRow]:
        """Every option in the nested layout's order (the global sections, then each known pass's section), with
        its value (a pass's as set, before the model and review sections fill an empty one) and source."""
        rows = []
        for name, path in LAYOUT.items():
            value = getattr(self.options, name)
            rows.append(OptionRow(".".join(path), name, value, format_value(value), self.source(name)))
        for declared in self.options.declared:
            for key in declared.keys():
                nested = f"passes.{declared.PASS}.{key}"
                value = self.options.pass_value(declared, key)
                alias = declared.keys()[key].metadata["alias"] or ""
                rows.append(OptionRow(nested, alias, value, format_value(value), self.source(nested)))
        return rows


@dataclass(frozen=True)
class OptionRow:
    nested: str  # "passes.<pass>.model", "model.base_url"
    alias: str  # the flat name of today, "LlmBaseUrl" (empty for a pass option that has none)
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


def load_agent_options(
    profile: AgentProfile,
    env: Mapping[str, str] | None = None,
    *,
    passes: Sequence[type[PassOptions]] | None = None,
) -> DreamOptions:
    """One agent's options, as every ``dream`` command loads them: the defaults, the deployment file
    (``DREAM_CONFIG``), the agent's ``dream.toml``, then the ``DREAM__*`` environment (``env``, else ``os.environ``).
    Without ``passes`` (the memory commands, which import no pass) a pass's settings are checked when the pass reads
    them; dream_assets/options_loader.py loads with the registry's sections and checks every setting at once."""
    return resolve_agent_options(profile, env, passes=passes).options


def resolve_agent_options(
    profile: AgentProfile,
    env: Mapping[str, str] | None = None,
    *,
    passes: Sequence[type[PassOptions]] | None = None,
) -> ResolvedOptions:
    """``load_agent_options`` with where each value came from (``dream status --options``)."""
    return DreamOptions.resolve(
        env=os.environ if env is None else env, profile_toml=profile.options_path, passes=passes
    )


# ----------------------------------------------------------------------------------------------------------------
# The nested layout. Every global option has one place in a global section; the table is written out name by name,
# and import fails when it misses a field or names one that is not. A pass's options are its own section, declared
# next to the pass (a PassOptions subclass): nothing here names a pass.

#: The keys every pass section may have (a pass declares those that apply to it).
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

#: Every global option's nested path by its flat name: ("model", "base_url"), ("schedule", "interval").
LAYOUT: dict[str, tuple[str, ...]] = {
    flat: (section, key) for section, keys in SECTIONS.items() for key, flat in keys.items()
}


@dataclass(frozen=True, kw_only=True)
class PassOptions:
    """One pass's options section, resolved. Each pass declares its own as a subclass next to it (``PASS``: the
    registry's pass name), with the keys of ``PASS_KEYS`` it has and its own options, each a ``pass_option`` field::

        @dataclass(frozen=True, kw_only=True)
        class MemoryCensusOptions(PassOptions):
            PASS: ClassVar[str] = "memory_census"
            enabled: bool = pass_option(True, "memory census: count the live memories by category")
            top_categories: int = pass_option(10, "categories named in the report", minimum=1)

    A key the pass does not declare is ``None`` (no ``model`` for a pass that calls no model, no ``apply_mode`` for
    one that writes no store); ``enabled`` is True for a pass without a switch. ``model``, ``base_url`` and
    ``api_key_env`` fall back to the model section's, ``apply_mode`` to the review section's. Read through the
    options: ``options.section(MemoryCensusOptions).top_categories`` or ``options.passes["memory_census"]``.
    """

    PASS: ClassVar[str] = ""

    name: str = ""
    enabled: bool = True
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    apply_mode: str | None = None
    directive: str | None = None
    min_interval: timedelta | None = None

    @classmethod
    def keys(cls) -> dict[str, Field[Any]]:
        """The section's keys (those declared with ``pass_option``) in order, with their declarations."""
        return {f.name: f for f in fields(cls) if "help" in f.metadata}

    @classmethod
    def by_alias(cls) -> dict[str, str]:
        """The flat alias of today -> its key."""
        return {f.metadata["alias"]: key for key, f in cls.keys().items() if f.metadata["alias"]}

    @classmethod
    def label(cls, key: str) -> str:
        """The key as a message names it: its flat alias, else its nested name."""
        return cls.keys()[key].metadata["alias"] or f"passes.{cls.PASS}.{key}"

    @classmethod
    def build(cls, options: DreamOptions, values: Mapping[str, Any]) -> Any:
        """The section from the values set (the rest at their defaults), with the fallbacks filled in."""
        kw = {key: values.get(key, f.default) for key, f in cls.keys().items()}
        for key, fallback in (("model", options.LlmModel), ("base_url", options.LlmBaseUrl)):
            if key in kw:
                kw[key] = kw[key].strip() or fallback
        if "api_key_env" in kw:
            kw["api_key_env"] = kw["api_key_env"].strip() or options.LlmApiKeyEnv
        if "apply_mode" in kw:
            kw["apply_mode"] = kw["apply_mode"] or options.ApplyMode
        return cls(name=cls.PASS, **kw)

    @classmethod
    def reviewable(cls) -> bool:
        """Does the pass write the store, so that it has changes to hold (it declares an ``apply_mode``)?"""
        return "apply_mode" in cls.keys()

    @property
    def writes_store(self) -> bool:
        """Has the pass changes to hold for review (it has an apply mode)?"""
        return self.apply_mode is not None

    @property
    def own(self) -> dict[str, Any]:
        """The pass's own options by key (those beyond PASS_KEYS)."""
        return {key: getattr(self, key) for key in self.keys() if key not in PASS_KEYS}


_FIELDS = {f.name: f for f in fields(DreamOptions) if "help" in f.metadata}
_PASS_FIELDS = ("pass_values", "declared", "pending")

#: One frozen dataclass per global section, its fields typed as the options they hold.
SECTION_TYPES: dict[str, type] = {
    section: dataclasses.make_dataclass(
        "".join(word.capitalize() for word in section.split("_")) + "Options",
        [(key, _FIELDS[flat].type) for key, flat in keys.items()],
        frozen=True,
    )
    for section, keys in SECTIONS.items()
}


def _section(options: DreamOptions, section: str) -> Any:
    return SECTION_TYPES[section](**{key: getattr(options, flat) for key, flat in SECTIONS[section].items()})


def _check_layout() -> None:
    missing = [name for name in _FIELDS if name not in LAYOUT]
    unknown = [name for name in LAYOUT if name not in _FIELDS]
    placed = [flat for keys in SECTIONS.values() for flat in keys.values()]
    twice = sorted({flat for flat in placed if placed.count(flat) > 1})
    if missing or unknown or twice:
        raise AssertionError(f"options layout: missing {missing}, unknown {unknown}, placed twice {twice}")


_check_layout()

_BY_LOWER = {name.lower(): name for name in _FIELDS}
_SECTIONS = {"dream", "memory"}


def _squash(word: str) -> str:
    return word.replace("_", "").lower()


#: The nested spellings, case and underscores aside: ("model", "baseurl") -> LlmBaseUrl.
_NESTED: dict[tuple[str, ...], str] = {tuple(_squash(part) for part in path): flat for flat, path in LAYOUT.items()}


def _split(key: str) -> list[str]:
    return [p for p in re.split(r"__|:|\.", key) if p]


def _flat(parts: list[str]) -> str:
    """A flat spelling's name: a leading Dream or Memory section dropped, the rest joined."""
    return "".join(parts[1:] if len(parts) > 1 and parts[0].lower() in _SECTIONS else parts)


def _global_name(parts: list[str]) -> str | None:
    """The global option a key names (its nested name or its flat one), or None: a pass's, or none."""
    nested = _NESTED.get(tuple(_squash(part) for part in parts))
    if nested is not None:
        return nested
    if parts and parts[0].lower() == "passes":
        return None
    return _BY_LOWER.get(_flat(parts).lower())


def _pass_place(parts: list[str], sections: Sequence[type[PassOptions]]) -> tuple[type[PassOptions], str] | None:
    """The section and key a key names (``passes.<pass>.<key>`` or a flat alias), among ``sections``; else None."""
    if parts and parts[0].lower() == "passes":
        if len(parts) != 3:
            return None
        for declared in sections:
            if _squash(parts[1]) == _squash(declared.PASS):
                return next(((declared, k) for k in declared.keys() if _squash(k) == _squash(parts[2])), None)
        return None
    name = _flat(parts).lower()
    for declared in sections:
        for alias, key in declared.by_alias().items():
            if alias.lower() == name:
                return declared, key
    return None


def _once(seen: dict[Any, tuple[Any, str]], name: Any, result: Any, where: str, label: str | None = None) -> None:
    """One source's setting of one option: set twice to different values it is refused, naming both."""
    if name in seen and seen[name][0] != result:
        raise OptionsError(
            f"option {label or name} is set twice with different values: {seen[name][1]} = {seen[name][0]!r} and "
            f"{where} = {result!r}; keep one of them (a nested name and its flat alias are one option)"
        )
    seen[name] = (result, where)


def _resolve_pending(
    pending: Sequence[tuple[int, str, Any, str, str]], sections: Sequence[type[PassOptions]], *, strict: bool
) -> tuple[dict[tuple[str, str], Any], dict[tuple[str, str], str], tuple[tuple[int, str, Any, str, str], ...]]:
    """The pending settings that ``sections`` have, typed, a later source winning: ({(pass, key): value}, where each
    came from, the settings left). With ``strict`` a setting no section has is refused instead of left."""
    values: dict[tuple[str, str], Any] = {}
    where_from: dict[tuple[str, str], str] = {}
    left = []
    for index in sorted({item[0] for item in pending}):
        seen: dict[Any, tuple[Any, str]] = {}
        for item in pending:
            if item[0] != index:
                continue
            _, key, value, where, origin = item
            parts = _split(key)
            place = _pass_place(parts, sections)
            if place is None:
                if strict:
                    raise _unknown(key, parts, origin or where, sections)
                left.append(item)
                continue
            declared, own = place
            label = declared.label(own)
            result = _coerce(declared.keys()[own], label, value, where)
            _once(seen, (declared.PASS, own), result, where, label)
        for place_key, (result, where) in seen.items():
            values[place_key], where_from[place_key] = result, where
    return values, where_from, tuple(left)


def _normal(values: Mapping[tuple[str, str], Any], sections: Sequence[type[PassOptions]]) -> tuple[Any, ...]:
    """Pass values as ``DreamOptions.pass_values`` holds them: sorted, those at their section's default left out."""
    defaults = {(s.PASS, key): f.default for s in sections for key, f in s.keys().items()}
    kept = [(name, key, value) for (name, key), value in values.items() if defaults.get((name, key), ...) != value]
    return tuple(sorted(kept, key=lambda item: (item[0], item[1])))


def _unknown(key: str, parts: list[str], where: str, sections: Sequence[type[PassOptions]]) -> OptionsError:
    if parts and parts[0].lower() == "passes":
        return OptionsError(f"unknown dream option {key!r} (from {where}); {_pass_hint(parts[1:], sections)}")
    return OptionsError(
        f"unknown dream option {key!r} (from {where}); {_closest(_flat(parts), sections)}{OPTIONS_LISTED}"
    )


def _pass_hint(parts: list[str], sections: Sequence[type[PassOptions]]) -> str:
    """What a pass option is spelled like, for a ``passes.<pass>.<key>`` that names no option."""
    import difflib  # only for a mistyped option's hint

    names = [declared.PASS for declared in sections]
    by_squash = {_squash(declared.PASS): declared for declared in sections}
    declared = by_squash.get(_squash(parts[0])) if parts else None
    if declared is None:
        near = difflib.get_close_matches(parts[0].lower() if parts else "", names, n=1, cutoff=0.6)
        guess = f"did you mean {near[0]}? " if near else ""
        return f"{guess}a pass option is passes.<pass>.<key>; the passes: {', '.join(names)}"
    keys = list(declared.keys())
    near = difflib.get_close_matches("_".join(parts[1:]).lower(), keys, n=1, cutoff=0.6)
    guess = f"did you mean passes.{declared.PASS}.{near[0]}? " if near else ""
    return f"{guess}the options of pass {declared.PASS}: {', '.join(keys)}"


#: Where every option is listed with its default and what it accepts.
OPTIONS_LISTED = (
    "(every option, with its default: `dream status --options`, dream_assets/options.py, each pass's module)"
)


def _closest(name: str, sections: Sequence[type[PassOptions]] = ()) -> str:
    """`did you mean X? ` for the option nearest a mistyped name (case aside), or nothing when none is near."""
    import difflib  # only for a mistyped option's hint

    names = {**_BY_LOWER, **{alias.lower(): alias for s in sections for alias in s.by_alias()}}
    near = difflib.get_close_matches(name.lower(), list(names), n=1, cutoff=0.6)
    return f"did you mean {names[near[0]]}? " if near else ""


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
        # [memory], [model], [passes.<pass>] ... tables: their keys as "passes.<pass>.model"
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


def _coerce(f: Field[Any], name: str, value: Any, where: str) -> Any:
    """``value`` as the option ``f`` (named ``name`` in messages) holds it, or an ``OptionsError`` naming the option,
    the value, where it was set and what is accepted."""
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
        _check_duration_range(name, meta, result, fail)
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


def _check_duration_range(name: str, meta: Mapping[str, Any], value: timedelta, fail: Any) -> None:
    """A negative (or, where it means nothing, zero) duration is refused; options whose help documents a meaning for
    non-positive values (retention, the forced-run interval) take any duration."""
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
