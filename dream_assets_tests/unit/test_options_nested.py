"""Nested, typed options: every option has a nested name (``[passes.memory_consolidation] model``,
``DREAM__MODEL__BASE_URL``) and every flat name of today stays its alias, through the environment and ``dream.toml``
alike; ``dream status --options`` names where each value came from."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from dream_assets.options import SECTIONS, DreamOptions, OptionsError, PassOptions
from dream_assets.options_loader import dream_options, load_options, resolve_options, with_passes
from dream_assets.passes import review
from dream_assets.passes.memory_consolidation import MemoryConsolidationOptions
from dream_assets.passes.registry import PASSES

#: Every flat option name as it was before the options nested: each stays accepted, as an attribute, a ``DREAM__``
#: variable and a ``dream.toml`` key. Written out so that the list cannot shrink unnoticed.
FLAT_NAMES = [
    "Enabled",
    "InitialDelay",
    "Interval",
    "BusyPollInterval",
    "BusyMaxWait",
    "BusyRetryInitialDelay",
    "BusyRetryMultiplier",
    "BusyRetryMaxDelay",
    "BusyRetryMaxAttempts",
    "AgentActiveWindow",
    "BusyLeaseStaleAfter",
    "DirectivePath",
    "SkillDirectivePath",
    "SkillOptimizeDirectivePath",
    "PreferenceDirectivePath",
    "SkillGapDirectivePath",
    "WispFailureDirectivePath",
    "TierRoutingDirectivePath",
    "ContradictionSweepDirectivePath",
    "LogRetentionEnabled",
    "ArchivePurgeEnabled",
    "ImportanceDecayEnabled",
    "MemoryConsolidationEnabled",
    "SkillGapEnabled",
    "SkillConsolidationEnabled",
    "SkillOptimizationEnabled",
    "PreferenceInferenceEnabled",
    "WispFailureAnalysisEnabled",
    "TierRoutingReviewEnabled",
    "ContradictionSweepEnabled",
    "DreamPassChangeGateEnabled",
    "DreamPassMaxSkipInterval",
    "TierRoutingReviewWindow",
    "ConsolidationMinInterval",
    "ConsolidationSimilarityThreshold",
    "ConsolidationMaxClusterSize",
    "ConsolidationCallShape",
    "ConsolidationMaxEntriesPerCall",
    "MergeRepairEnabled",
    "MergeRepairMaxPerCycle",
    "PruningProtectionImportance",
    "PruningProtectionReinforcementCount",
    "ConsolidationRemovalGuardEnabled",
    "LexicalSimilarityMeasure",
    "LexicalOverlapThreshold",
    "ConsolidationSettledCooldown",
    "ConsolidationExactFoldEnabled",
    "MemoryScopeCategories",
    "ContradictionSweepNeighbours",
    "ContradictionSweepMaxEntriesPerCall",
    "ContradictionSweepMaxSupersededShare",
    "FeedbackWindow",
    "FeedbackMaxSignals",
    "MemoryArchiveRetention",
    "ImportanceDecayGraceDays",
    "ImportanceDecayHalfLifeDays",
    "ImportanceDecayFloor",
    "SkillUsageWindow",
    "SparseSkillMaxChars",
    "SparseSkillMinAge",
    "SkillCoUsedPairs",
    "WispAnalysisWindow",
    "WispFailureMinFrequency",
    "WispSuccessMinFrequency",
    "WispSuccessMinRate",
    "LogRetentionMaxFileAge",
    "LogRetentionMaxFilesPerDirectory",
    "LogRetentionMaxLinesPerFile",
    "DedupeSimilarityThreshold",
    "MaxContentChars",
    "RecallRecencyWeight",
    "RecallRecencyHalfLife",
    "RecallReinforcementWeight",
    "StoreLockTimeout",
    "FolderPromotionMinDailyNotes",
    "LlmBackend",
    "LlmBaseUrl",
    "LlmModel",
    "LlmApiKeyEnv",
    "LlmTimeout",
    "LlmMaxRetries",
    "LlmTemperature",
    "LlmJsonMode",
    "LlmMaxTokens",
    "LlmContextTokens",
    "LlmMaxCallsPerPass",
    "LlmStructuredOutput",
    "CycleTokenBudget",
    "DailyTokenBudget",
    "LlmPriceInputPerMillion",
    "LlmPriceOutputPerMillion",
    "MemoryConsolidationModel",
    "MemoryConsolidationBaseUrl",
    "MemoryConsolidationApiKeyEnv",
    "SkillGapDetectionModel",
    "SkillGapDetectionBaseUrl",
    "SkillGapDetectionApiKeyEnv",
    "SkillConsolidationModel",
    "SkillConsolidationBaseUrl",
    "SkillConsolidationApiKeyEnv",
    "SkillOptimizationModel",
    "SkillOptimizationBaseUrl",
    "SkillOptimizationApiKeyEnv",
    "PreferenceInferenceModel",
    "PreferenceInferenceBaseUrl",
    "PreferenceInferenceApiKeyEnv",
    "WispFailureAnalysisModel",
    "WispFailureAnalysisBaseUrl",
    "WispFailureAnalysisApiKeyEnv",
    "TierRoutingReviewModel",
    "TierRoutingReviewBaseUrl",
    "TierRoutingReviewApiKeyEnv",
    "ContradictionSweepModel",
    "ContradictionSweepBaseUrl",
    "ContradictionSweepApiKeyEnv",
    "ApplyMode",
    "ReviewExpiryDays",
    "ArchivePurgeApplyMode",
    "ImportanceDecayApplyMode",
    "MemoryConsolidationApplyMode",
    "SkillGapDetectionApplyMode",
    "WispFailureAnalysisApplyMode",
    "SkillConsolidationApplyMode",
    "SkillOptimizationApplyMode",
    "PreferenceInferenceApplyMode",
    "TierRoutingReviewApplyMode",
    "ContradictionSweepApplyMode",
    "EmbeddingModel",
    "EmbeddingBaseUrl",
    "EmbeddingApiKeyEnv",
    "EmbeddingBatchSize",
    "EmbeddingDimensions",
    "EmbeddingSimilarityThreshold",
    "ProfileRoot",
    "ServeHeaderTimeout",
    "ServeBodyTimeout",
    "ServeMaxConnectionsPerClient",
    "ServeMaxConnections",
    "SnapshotRetention",
    "AuditTrendRetention",
    "AuditPauseOnHardDelete",
    "RunRetention",
    "RunTimeout",
]

#: Every option by the name a person sets it by (a pass option by its flat alias) -> its nested path, and its field.
LAYOUT = dream_options().layout()
FIELDS = {name: dream_options().option_field(name) for name in LAYOUT}
PASS_NAMES = tuple(spec.name for spec in PASSES)


def sample(name: str) -> tuple[Any, str, str]:
    """A value other than the default that the option accepts, derived from its type and range: (the value, as a
    ``DREAM__`` variable spells it, as ``dream.toml`` spells it)."""
    f = FIELDS[name]
    meta, default, kind = f.metadata, f.default, f.type
    lo, hi = meta["minimum"], meta["maximum"]
    if kind == "bool":
        value = not default
        return value, str(value).lower(), str(value).lower()
    if kind == "timedelta":
        value = timedelta(minutes=90) if default != timedelta(minutes=90) else timedelta(hours=3)
        return (
            value,
            "90m" if value == timedelta(minutes=90) else "PT3H",
            '"90m"' if value == timedelta(minutes=90) else '"PT3H"',
        )
    if kind == "int":
        value = default + 1 if hi is None or default + 1 <= hi else default - 1
        assert lo is None or value >= lo
        return value, str(value), str(value)
    if kind == "float":
        value = (lo + hi) / 2 if lo is not None and hi is not None else default + 0.5
        value = value if value != default else value / 2
        return value, repr(value), repr(value)
    if meta["choices"]:
        value = next(c for c in meta["choices"] if c and c != default)
    elif meta["url"]:
        value = "http://127.0.0.1:9/v1"
    else:
        value = "sample-value.md"
    return value, value, json.dumps(value)


def nested_view(options: DreamOptions, name: str) -> Any:
    """The option read through its typed place: options.passes[pass].<key> (or .own[key]), options.<section>.<key>."""
    path = LAYOUT[name]
    if path[0] == "passes":
        own: PassOptions = options.passes[path[1]]
        return vars(own)[path[2]]
    return vars(vars(type(options))[path[0]].fget(options))[path[1]]


def test_the_flat_names_of_today_are_all_still_options_and_each_has_one_nested_place():
    assert [name for name in FLAT_NAMES if name in DreamOptions.option_names()] == DreamOptions.option_names()
    assert sorted(LAYOUT) == sorted(FLAT_NAMES)
    paths = [LAYOUT[name] for name in FLAT_NAMES]
    assert len(set(paths)) == len(paths)


def test_the_pass_sections_are_the_registry_s_passes_and_agree_with_each_spec():
    assert tuple(dream_options().passes) == PASS_NAMES
    for spec in PASSES:
        assert spec.options is not None and spec.options.PASS == spec.name
        keys = {key: spec.options.label(key) for key in spec.options.keys()}
        assert keys["enabled"] == spec.enabled_by, spec.name
        assert keys.get("min_interval") == spec.min_interval, spec.name
        directive = spec.model_call.directive_option if spec.model_call is not None else None
        assert keys.get("directive") == directive, spec.name
        assert ("model" in keys) == spec.uses_model, spec.name
    # the passes that write the store (and so have an apply mode) are the ones that had a <Pass>ApplyMode
    assert [p.name for p in PASSES if p.options and p.options.reviewable()] == [
        n for n in PASS_NAMES if n != "log_retention"
    ]


@pytest.mark.parametrize("name", FLAT_NAMES)
def test_every_option_resolves_alike_by_its_flat_and_its_nested_name(name, tmp_path):
    """Through the environment and dream.toml, by the flat name and the nested one: one value, the same as the flat
    name gave before, with its source named."""
    value, env_text, toml_text = sample(name)
    assert value != FIELDS[name].default
    path = LAYOUT[name]
    toml = tmp_path / "dream.toml"
    ways = {
        f"DREAM__{name}": lambda key: resolve_options(env={key: env_text}),
        "DREAM__" + "__".join(path).upper(): lambda key: resolve_options(env={key: env_text}),
        f"{toml}: {name}": lambda _: resolve_options(env={}, profile_toml=toml),
        f"{toml}: {'.'.join(path)}": lambda _: resolve_options(env={}, profile_toml=toml),
    }
    tomls = [None, None, f"{name} = {toml_text}\n", f"[{'.'.join(path[:-1])}]\n{path[-1]} = {toml_text}\n"]
    for (key, resolve), text in zip(ways.items(), tomls, strict=True):
        if text is not None:
            toml.write_text(text, encoding="utf-8")
        resolved = resolve(key)
        options = resolved.options
        assert getattr(options, name) == value, key
        assert options == dream_options().replace(**{name: value}), key  # that option, and nothing else, moved
        assert resolved.source(name) == key
        assert nested_view(options, name) == value, key


def test_a_pass_reads_its_own_model_and_apply_mode_and_falls_back_to_the_global_ones():
    options = load_options(
        env={
            "DREAM__PASSES__PREFERENCE_INFERENCE__MODEL": "small",
            "DREAM__model__model": "big",
            "DREAM__passes__memory_consolidation__apply_mode": "review",
            "DREAM__Review__ApplyMode": "review-risky",
        }
    )
    assert (options.LlmModel, options.PreferenceInferenceModel) == ("big", "small")
    assert options.passes["preference_inference"].model == "small"
    assert options.passes["skill_gap_detection"].model == "big"
    assert options.passes["log_retention"].model is None  # no model: the pass calls none
    assert options.for_pass_model("preference_inference").LlmModel == "small"
    assert options.for_pass_model("log_retention") is options
    assert review.apply_mode(options, "memory_consolidation") == "review"
    assert review.apply_mode(options, "archive_purge") == "review-risky"
    assert review.apply_mode(options, "log_retention") == "auto"
    assert options.passes["memory_consolidation"].min_interval == timedelta(hours=6)
    assert options.passes["contradiction_sweep"].neighbours == 4  # type: ignore[attr-defined]
    assert options.passes["contradiction_sweep"].own == {
        "neighbours": 4,
        "max_entries_per_call": 500,
        "max_superseded_share": 0.25,
    }
    assert options.model.base_url == "" and options.schedule.interval == timedelta(hours=4)


def test_an_option_set_twice_in_one_source_with_different_values_is_refused_naming_both(tmp_path):
    env = {"DREAM__MemoryConsolidationModel": "a", "DREAM__PASSES__MEMORY_CONSOLIDATION__MODEL": "b"}
    with pytest.raises(OptionsError) as err:
        load_options(env=env)
    message = str(err.value)
    assert "MemoryConsolidationModel" in message and "DREAM__PASSES__MEMORY_CONSOLIDATION__MODEL" in message
    assert "DREAM__MemoryConsolidationModel" in message
    # the same value twice is one setting
    same = {"DREAM__SkillGapEnabled": "false", "DREAM__passes__skill_gap_detection__enabled": "no"}
    assert load_options(env=same).SkillGapEnabled is False
    toml = tmp_path / "dream.toml"
    toml.write_text('LlmModel = "a"\n[model]\nmodel = "b"\n', encoding="utf-8")
    with pytest.raises(OptionsError, match="LlmModel") as err:
        load_options(env={}, profile_toml=toml)
    assert f"{toml}: LlmModel" in str(err.value) and f"{toml}: model.model" in str(err.value)


def test_a_later_source_wins_whichever_name_each_uses(tmp_path):
    toml = tmp_path / "dream.toml"
    toml.write_text('[passes.tier_routing_review]\nwindow = "3d"\nenabled = false\n', encoding="utf-8")
    resolved = resolve_options(env={"DREAM__TierRoutingReviewWindow": "5d"}, profile_toml=toml)
    assert resolved.options.TierRoutingReviewWindow == timedelta(days=5)
    assert resolved.source("TierRoutingReviewWindow") == "DREAM__TierRoutingReviewWindow"
    assert resolved.options.passes["tier_routing_review"].enabled is False
    assert resolved.source("TierRoutingReviewEnabled") == f"{toml}: passes.tier_routing_review.enabled"


@pytest.mark.parametrize(
    "key,fragments",
    [
        ("DREAM__PASSES__MEMORY_CONSOLIDATION__MODLE", ["did you mean passes.memory_consolidation.model?"]),
        ("DREAM__PASSES__SKILL_GAP__ENABLED", ["did you mean skill_gap_detection?", "memory_consolidation"]),
        ("DREAM__PASSES__LOG_RETENTION__MODEL", ["the options of pass log_retention: enabled, max_file_age"]),
    ],
)
def test_a_mistyped_pass_option_is_refused_naming_what_there_is(key, fragments):
    with pytest.raises(OptionsError) as err:
        load_options(env={key: "x"})
    message = str(err.value)
    assert f"unknown dream option {key[len('DREAM__') :]!r} (from {key})" in message
    assert all(fragment in message for fragment in fragments), message


def old_spelling(parts: list[str]) -> str | None:
    """The option a ``DREAM__`` key named before the options nested (a leading Dream or Memory section dropped, the
    rest joined, case aside), or None."""
    if len(parts) > 1 and parts[0].lower() in ("dream", "memory"):
        parts = parts[1:]
    return {name.lower(): name for name in FLAT_NAMES}.get("".join(parts).lower())


@pytest.mark.parametrize("section", [*SECTIONS, "passes", "dream", "Dream", "llm", "Llm", "Memory"])
def test_no_spelling_that_named_an_option_before_names_another_now(section):
    spellings = [[section, name] for name in FLAT_NAMES] + [[section, *LAYOUT[name][1:]] for name in FLAT_NAMES]
    spellings += [list(path) for path in LAYOUT.values() if path[0] == section]
    for parts in spellings:
        before = old_spelling(parts)
        if before is None:
            continue
        value, env_text, _ = sample(before)
        assert load_options(env={"DREAM__" + "__".join(parts): env_text}) == dream_options().replace(
            **{before: value}
        ), parts


def test_without_the_pass_sections_a_pass_setting_waits_for_the_section_that_reads_it():
    """Options loaded without the registry (the memory commands) keep each pass setting until the pass reads its own
    section, which types it then; given the sections, an unknown setting is refused as at any load."""
    options = DreamOptions.load(
        env={
            "DREAM__ConsolidationMaxClusterSize": "5",
            "DREAM__PASSES__MEMORY_CONSOLIDATION__MODEL": "m",
            "DREAM__PASSES__MEMORY_CONSOLIDATION__MAX_CLUSTER_SIZ": "4",
        }
    )
    assert dict(options.passes) == {}  # no section known yet: nothing typed, nothing refused
    own = options.section(MemoryConsolidationOptions)
    assert (own.max_cluster_size, own.model, own.min_interval) == (5, "m", timedelta(hours=6))
    with pytest.raises(OptionsError, match="did you mean passes.memory_consolidation.max_cluster_size?"):
        with_passes(options)
    unusable = DreamOptions.load(env={"DREAM__ConsolidationMaxClusterSize": "one"})
    assert unusable.Interval == timedelta(hours=4)  # the global options load
    with pytest.raises(OptionsError, match="invalid value 'one' for option ConsolidationMaxClusterSize"):
        unusable.section(MemoryConsolidationOptions)
