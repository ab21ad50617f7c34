"""A cycle run launched by the daemon that ends FAILURE after its pass applied and stamped the ledger is reconciled
with the pass record (orchestration/reconcile.py, evaluated by ``dead_run_sensor``): the asset shows the
materialization, naming the run, and the cycle report says so — what the UI says matches the store. On a real Dagster
instance, with the instance's database failing as the pass's materialization is written (after the store commit)."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from dream_assets.definitions import build_definitions
from dream_assets.llm.offline import OfflineBackend
from dream_assets.orchestration.deployment import NOW_TAG, DreamDeployment
from dream_assets.orchestration.partitions import AGENTS
from dream_assets.orchestration.reconcile import RECONCILED_TAG
from dream_assets.orchestration.resources import ModelResource
from dream_assets.passes.outcome import load_outcome
from dream_assets.store.ledger import PassLedger

from ..conftest import NOW
from ..postgres_server import PostgresUnavailable, start_postgres

ROOT = Path(__file__).resolve().parents[2]

PASS = "memory_consolidation"


def _fail_event_write_of(monkeypatch, asset: str) -> list:
    """The instance's database fails once, as the materialization of ``asset`` is written (the pass's changes and
    pass record are committed by then)."""
    handle = dg.DagsterInstance.handle_new_event
    outages: list = []

    def outage(self, event, *args, **kwargs):
        de = event.dagster_event
        if de is not None and de.event_type_value == "ASSET_MATERIALIZATION" and not outages:
            if de.asset_key.to_user_string() == asset:
                outages.append(de)
                raise ConnectionError("server closed the connection unexpectedly")
        return handle(self, event, *args, **kwargs)

    monkeypatch.setattr(dg.DagsterInstance, "handle_new_event", outage)
    return outages


def _materializations(instance: dg.DagsterInstance) -> list[dg.EventLogRecord]:
    return list(instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey(PASS)), limit=100).records)


def _sensor(defs, instance, deployment) -> str:
    with dg.build_sensor_context(instance=instance, resources={"deployment": deployment}) as ctx:
        return defs.get_sensor_def("dead_run_sensor")(ctx).skip_message


@pytest.mark.slow  # a Dagster run of memory consolidation, then the sensor twice
def test_a_run_that_failed_after_its_pass_applied_shows_the_pass_from_its_record(demo, instance, monkeypatch):
    _failed_after_apply_is_reconciled_once(demo, instance, monkeypatch)


@pytest.fixture
def postgres_instance(tmp_path, monkeypatch):
    """A Dagster instance on the fleet deployment's PostgreSQL storage (deploy/dagster-postgres.yaml), on a fresh
    database of a throwaway server."""
    try:
        with start_postgres() as server:
            for key, value in server.env(server.create_database("dream_reconcile")).items():
                monkeypatch.setenv(key, value)
            home = tmp_path / "dagster_home"
            home.mkdir()
            shutil.copy(ROOT / "deploy" / "dagster-postgres.yaml", home / "dagster.yaml")
            with dg.DagsterInstance.from_config(str(home)) as inst:
                yield inst
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server for the fleet deployment's storage: {exc}")


@pytest.mark.slow  # a PostgreSQL server, a Dagster run of memory consolidation, then the sensor twice
def test_the_fleets_postgres_storage_reconciles_a_run_that_failed_after_its_pass_applied(
    demo, postgres_instance, monkeypatch
):
    """The same reconciliation on the fleet's storage: the run, its tags and the runless materialization in
    PostgreSQL."""
    _failed_after_apply_is_reconciled_once(demo, postgres_instance, monkeypatch)


def _run_losing_its_record(demo, instance, monkeypatch, backend):
    """A ``dream_cycle`` run of the pass alone on ``backend`` whose materialization fails to be written: its
    definitions, deployment and result."""
    monkeypatch.setenv("DREAM__ConsolidationMinInterval", "0")
    instance.add_dynamic_partitions(AGENTS, ["demo"])
    deployment = DreamDeployment(profile_root=str(demo.root.parent))
    defs = build_definitions(deployment, model=ModelResource.with_backend(backend))
    outages = _fail_event_write_of(monkeypatch, PASS)
    result = defs.resolve_job_def("dream_cycle").execute_in_process(
        instance=instance,
        partition_key="demo",
        tags={NOW_TAG: NOW.isoformat()},
        asset_selection=[dg.AssetKey(PASS)],
        raise_on_error=False,
    )
    assert outages and not result.success
    return defs, deployment, result


def _failed_after_apply_is_reconciled_once(demo, instance, monkeypatch) -> None:
    defs, deployment, result = _run_losing_its_record(demo, instance, monkeypatch, OfflineBackend())
    assert instance.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.FAILURE
    record = load_outcome(demo, PASS)
    assert record["status"] == "completed" and record["cycle_id"] == result.run_id  # the pass applied
    assert PassLedger(demo).get(PASS)  # and stamped its ledger
    assert _materializations(instance) == []  # yet Dagster shows nothing: the run's own record failed

    said = _sensor(defs, instance, deployment)
    assert f"run {result.run_id} of agent demo ({PASS} applied)" in said
    [shown] = _materializations(instance)
    mat = shown.asset_materialization
    assert mat.partition == "demo"
    assert mat.metadata["status"].value == "completed" and mat.metadata["summary"].value == record["summary"]
    recorded_from = mat.metadata["recorded_from"].value
    assert result.run_id in recorded_from and "applied; the run's own record failed" in recorded_from
    report = (demo.cycle_reports_dir / f"{result.run_id}.md").read_text()
    assert f"Reconciled after the run ended FAILURE: {PASS} applied its changes" in report
    assert f"| {PASS} | completed |" in report  # the report shows the pass from its record, as `dream report` prints
    assert RECONCILED_TAG in instance.get_run_by_id(result.run_id).tags

    # Reconciled once: the next evaluation says nothing more and records nothing twice.
    assert _sensor(defs, instance, deployment) == "no dead run holds a pool slot"
    assert len(_materializations(instance)) == 1


@pytest.mark.slow  # a Dagster run with a failing pass, then the sensor
def test_a_failed_pass_whose_record_was_lost_too_is_never_shown_as_materialized(demo, instance, monkeypatch):
    """Only what applied is reconciled: a pass that failed stays a failure, never a green materialization."""
    from dream_assets.llm.base import ModelCallError
    from dream_assets.llm.scripted import ScriptedBackend

    failing = ScriptedBackend(lambda req: ModelCallError("HTTP 503 from the endpoint: overloaded"))
    defs, deployment, result = _run_losing_its_record(demo, instance, monkeypatch, failing)
    assert load_outcome(demo, PASS)["status"] == "failed"
    assert "reconciled" not in _sensor(defs, instance, deployment)
    assert _materializations(instance) == []
    assert instance.get_run_by_id(result.run_id).tags[RECONCILED_TAG] == "none"
