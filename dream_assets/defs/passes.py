"""One asset per dream pass, built from the pass registry. Each asset only wires inputs, calls the pass function and
turns its report into metadata; the pass itself lives in dream_assets/passes/."""


import dagster as dg

from dream_assets.defs.deployment import DreamDeployment, run_now
from dream_assets.defs.metadata import report_metadata
from dream_assets.defs.partitions import agents_partitions
from dream_assets.defs.resources import ModelResource
from dream_assets.passes.context import PassContext
from dream_assets.passes.registry import PASSES, PassSpec

COMPLETED_CHECK = "pass_completed"


def _pass_asset(spec: PassSpec) -> dg.AssetsDefinition:
    @dg.asset(
        name=spec.name,
        group_name=spec.group,
        description=spec.description,
        partitions_def=agents_partitions,
        deps=[*spec.after, *spec.reads],
        pool="llm" if spec.uses_model else None,
        kinds={"python", "llm"} if spec.uses_model else {"python"},
        check_specs=[dg.AssetCheckSpec(COMPLETED_CHECK, asset=spec.name,
                                       description="The pass completed, or skipped for a stated reason (not failed).")],
    )
    def _asset(context: dg.AssetExecutionContext, deployment: DreamDeployment,
               model: ModelResource) -> dg.MaterializeResult:
        profile = deployment.profile(context.partition_key)
        options = deployment.options(profile)
        ctx = PassContext(profile, options, run_now(context), cycle_id=context.run.run_id,
                          client_factory=lambda: model.client(profile, options))
        report = spec.run(ctx)   # never raises: a failed pass is a report with status "failed"
        for line in report.lines:
            context.log.info(line)
        context.log.info(f"{spec.name}: {report.summary or report.reason}")
        return dg.MaterializeResult(
            metadata=report_metadata(report),
            check_results=[dg.AssetCheckResult(
                check_name=COMPLETED_CHECK, passed=report.status != "failed",
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"status": report.status, "reason": report.reason or report.summary},
            )],
        )

    return _asset


pass_assets = [_pass_asset(spec) for spec in PASSES]
dream_cycle = dg.define_asset_job(
    "dream_cycle",
    selection=dg.AssetSelection.assets(*[spec.name for spec in PASSES], "corpus_snapshot"),
    partitions_def=agents_partitions,
    description="One dream cycle for one agent: every pass in the specification's order.",
)
