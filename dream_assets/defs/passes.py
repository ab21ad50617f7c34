"""One asset per dream pass, built from the pass registry, after the read of the agent's linked memory folder (its
write-back is the cycle's close, cycle_close.py). Each asset only wires inputs, calls the pass function and turns its
report into metadata; the pass itself lives in dream_assets/passes/ and the folder's in dream_assets/folders/.

A failed pass fails its ``pass_completed`` check (ERROR) and the run (see orchestration/pass_checks.py).
"""

from collections.abc import Iterator

import dagster as dg

from dream_assets.llm.client import ModelClient
from dream_assets.orchestration.deployment import DreamDeployment, run_now
from dream_assets.orchestration.metadata import label_metadata, report_metadata, stage_tags
from dream_assets.orchestration.partitions import agents_partitions
from dream_assets.orchestration.pass_checks import COMPLETED_CHECK, completed_check, fail_run_if_passes_failed
from dream_assets.orchestration.resources import ModelResource
from dream_assets.orchestration.run_liveness import LLM_POOL
from dream_assets.orchestration.run_tags import USES_MODEL_TAG, forced_reason
from dream_assets.passes.context import PassContext
from dream_assets.passes.registry import PASSES, PassSpec
from dream_assets.passes.runner import run_pass
from dream_assets.service.folders import READ_STEP, read_folder


def asset_description(spec: PassSpec) -> str:
    """The pass's description, then what each of its counts means (every materialization records every one)."""
    meanings = spec.count_meanings
    if not meanings:
        return spec.description
    listed = "\n".join(f"- `{key}`: {meaning}" for key, meaning in meanings.items())
    return f"{spec.description}\n\nCounts (on every outcome; what the run did is 0 when it did not run):\n{listed}"


@dg.asset(
    name=READ_STEP,
    group_name="inputs",
    partitions_def=agents_partitions,
    kinds={"python"},
    tags=stage_tags("inputs"),
    metadata=label_metadata("Memory folder read"),
    description="Before the passes: the agent's linked markdown memory folder read into the store.\n\n"
    "The folder linked with dream link (Claude Code auto memory, an OpenClaw workspace or plain notes), each note "
    "with its file, heading path and front matter; a folder that cannot be read safely fails this step naming the "
    "file, and the store and the folder stay as they were. Skipped when no folder is linked.",
    check_specs=[
        dg.AssetCheckSpec(
            COMPLETED_CHECK,
            asset=READ_STEP,
            description="The folder was read, or no folder is linked. Fails (ERROR) naming the file that could not be.",
        )
    ],
)
def memory_folder_read(
    context: dg.AssetExecutionContext, deployment: DreamDeployment
) -> Iterator[dg.MaterializeResult]:
    forced_reason(context.run.tags, READ_STEP)  # a mistyped force tag fails the run here, before anything is read
    profile = deployment.run_profile(context.partition_key)
    report = read_folder(profile, deployment.options(profile), run_now(context))
    if report.status == "failed":
        context.log.error(f"{READ_STEP} for agent {profile.agent_id}: {report.reason}")
    yield dg.MaterializeResult(
        metadata=report_metadata(report),
        check_results=[completed_check(READ_STEP, profile.agent_id, report)],
    )


def logging_progress(client: ModelClient, context: dg.AssetExecutionContext) -> ModelClient:
    """The client, with each model call's progress (start, every minute while waiting, end) in the run's log."""
    client.progress_listeners.append(lambda progress: context.log.info(progress.line()))
    return client


def pass_deps(spec: PassSpec) -> list[str]:
    """What a pass asset depends on: the passes it runs after and the inputs it reads; a pass that runs after no
    other pass also waits for the memory-folder read, so a linked folder is in the store before any pass."""
    return [*spec.after, *spec.reads] if spec.after else [READ_STEP, *spec.reads]


def _pass_asset(spec: PassSpec) -> dg.AssetsDefinition:
    @dg.asset(
        name=spec.name,
        group_name=spec.group,
        description=asset_description(spec),
        partitions_def=agents_partitions,
        deps=pass_deps(spec),
        pool=LLM_POOL if spec.uses_model else None,
        kinds={"python", "llm"} if spec.uses_model else {"python"},
        tags=stage_tags(spec.group),
        metadata=label_metadata(spec.description.split(" — ")[0]),
        check_specs=[
            dg.AssetCheckSpec(
                COMPLETED_CHECK,
                asset=spec.name,
                description="The pass completed, or skipped / deferred for a stated reason. "
                "Fails (ERROR) when the pass failed, naming the agent and why.",
            )
        ],
    )
    def _asset(
        context: dg.AssetExecutionContext, deployment: DreamDeployment, model: ModelResource
    ) -> Iterator[dg.MaterializeResult]:
        agent = context.partition_key
        profile = deployment.run_profile(agent)
        # resolved once for the step: the agent's options, the model resource's settings, then the pass's own model;
        # the ledger stamps and the client calls the same model
        options = model.effective_options(deployment.options(profile)).for_pass_model(spec.name)
        ctx = PassContext(
            profile,
            options,
            run_now(context),
            cycle_id=context.run.run_id,
            client_factory=lambda: logging_progress(model.resolved_client(profile, options), context),
            force=forced_reason(context.run.tags, spec.name),
        )
        report = run_pass(spec, ctx)  # never raises: a failed pass is a report with status "failed"
        for line in report.lines:
            context.log.info(line)
        if report.status == "failed":
            context.log.error(f"{spec.name} for agent {agent}: {report.summary or report.reason}")
        else:  # a skip's summary is its cause alone
            said = "skipped — " if report.status == "skipped" else ""
            context.log.info(f"{spec.name}: {said}{report.summary or report.reason}")
        yield dg.MaterializeResult(
            metadata=report_metadata(report), check_results=[completed_check(spec.name, agent, report)]
        )
        fail_run_if_passes_failed(context)

    return _asset


pass_assets = [_pass_asset(spec) for spec in PASSES]
dream_cycle = dg.define_asset_job(
    "dream_cycle",
    selection=dg.AssetSelection.assets(READ_STEP, *[spec.name for spec in PASSES], "corpus_snapshot", "review_queue"),
    partitions_def=agents_partitions,
    description="One dream cycle for one agent: the linked memory folder read, every pass in the specification's "
    "order, the snapshot (which writes the folder back), what waits for review. When a pass fails, the other passes "
    "still run and the run fails at its last step, naming the failed passes.",
    tags={USES_MODEL_TAG: "true"},
)


@dg.definitions
def defs() -> dg.Definitions:
    """One asset per pass, and the dream cycle job over them."""
    return dg.Definitions(assets=[memory_folder_read, *pass_assets], jobs=[dream_cycle])
