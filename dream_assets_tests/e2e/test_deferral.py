"""Back-off under contention: a pass deferred by a busy model is retried with an exponential delay, never failed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from dream_assets.llm.busy import model_busy
from dream_assets.llm.client import ModelClient
from dream_assets.llm.scripted import ScriptedBackend
from dream_assets.options_loader import dream_options
from dream_assets.passes.context import PassContext
from dream_assets.passes.deferral import retry_delay, retry_due
from dream_assets.passes.outcome import load_outcome
from dream_assets.passes.registry import by_name
from dream_assets.passes.runner import run_pass
from dream_assets.save_pipeline import save_memory
from dream_assets_tests.conftest import NOW

MIN = timedelta(minutes=1)
DEFAULTS = {"initial": 5 * MIN, "multiplier": 2.0, "cap": 60 * MIN}


@pytest.mark.parametrize(
    ("attempt", "minutes"),
    [(0, 5), (1, 5), (2, 10), (3, 20), (4, 40), (5, 60), (6, 60), (7, 60)],
)
def test_delay_doubles_from_five_minutes_up_to_an_hour(attempt, minutes):
    assert retry_delay(attempt, **DEFAULTS) == minutes * MIN


@pytest.mark.parametrize("attempt", [1_000, 10**6, 10**400, 2**4000])
def test_delay_never_overflows_for_huge_attempt_counts(attempt):
    assert retry_delay(attempt, **DEFAULTS) == 60 * MIN
    assert retry_delay(attempt, initial=5 * MIN, multiplier=1e300, cap=timedelta.max) == timedelta.max
    assert retry_delay(attempt, initial=5 * MIN, multiplier=float("inf"), cap=60 * MIN) == 60 * MIN


@pytest.mark.parametrize("multiplier", [1.0, 0.5, 0.0, -3.0, float("nan")])
def test_a_multiplier_of_one_or_less_keeps_the_initial_delay(multiplier):
    for attempt in (1, 2, 7, 10**300):
        assert retry_delay(attempt, initial=5 * MIN, multiplier=multiplier, cap=60 * MIN) == 5 * MIN


def test_a_cap_below_the_initial_delay_never_shortens_it():
    for attempt in (1, 2, 50):
        assert retry_delay(attempt, initial=5 * MIN, multiplier=2.0, cap=MIN) == 5 * MIN
        assert retry_delay(attempt, initial=5 * MIN, multiplier=2.0, cap=timedelta(0)) == 5 * MIN


def test_zero_initial_delay_means_zero():
    for attempt in (1, 3, 10**50):
        assert retry_delay(attempt, initial=timedelta(0), multiplier=2.0, cap=60 * MIN) == timedelta(0)


def _deferred_run(profile, store, options, now):
    backend = ScriptedBackend([])  # any call reaching the backend fails the test: "no answer left"
    client = ModelClient(backend, profile=profile, options=options)
    ctx = PassContext(
        profile, options, now, cycle_id=f"c-{now.isoformat()}", client_factory=lambda: client, _store=store
    )
    with model_busy(profile, heartbeat_every=None):
        report = run_pass(by_name("contradiction_sweep"), ctx)
    assert not backend.requests
    return report


def test_a_deferred_pass_is_not_failed_and_shows_when_it_retries(profile, store):
    save_memory(store.memories, "Alice lives in Paris.", now=NOW - timedelta(days=3))
    save_memory(store.memories, "Alice moved to Berlin; she lives there now.", now=NOW - timedelta(days=1))
    options = dream_options(BusyMaxWait=timedelta(0), BusyRetryMaxAttempts=3)
    expected = [5, 10, 20]
    now = NOW
    for attempt, minutes in enumerate(expected, 1):
        report = _deferred_run(profile, store, options, now)
        assert report.status == "deferred", report.summary
        retry_at = now + minutes * MIN
        assert f"retries at {retry_at.isoformat().replace('+00:00', 'Z')}" in report.summary
        record = load_outcome(profile, "contradiction_sweep")
        assert record["status"] == "deferred"
        assert record["deferral"]["attempt"] == attempt
        assert retry_due(record, retry_at - timedelta(seconds=1)) is None
        assert retry_due(record, retry_at) == retry_at
        now = retry_at
    report = _deferred_run(profile, store, options, now)
    assert report.status == "deferred" and "retries used up" in report.summary
    assert retry_due(load_outcome(profile, "contradiction_sweep"), now + timedelta(days=1)) is None


def test_a_run_that_is_not_deferred_ends_the_deferral(profile, store):
    save_memory(store.memories, "Alice lives in Paris.", now=NOW - timedelta(days=3))
    save_memory(store.memories, "Alice moved to Berlin; she lives there now.", now=NOW - timedelta(days=1))
    options = dream_options(BusyMaxWait=timedelta(0))
    _deferred_run(profile, store, options, NOW)
    backend = ScriptedBackend([{"supersessions": []}])
    client = ModelClient(backend, profile=profile, options=options)
    ctx = PassContext(profile, options, NOW + 5 * MIN, cycle_id="c2", client_factory=lambda: client, _store=store)
    assert run_pass(by_name("contradiction_sweep"), ctx).status == "completed"
    record = load_outcome(profile, "contradiction_sweep")
    assert record["deferral"] is None and retry_due(record, NOW + timedelta(days=1)) is None
    # The next deferral starts again from the initial delay.
    save_memory(store.memories, "Alice moved back to Paris in December.", now=NOW + 6 * MIN)
    again = _deferred_run(profile, store, options, NOW + 10 * MIN)
    assert load_outcome(profile, "contradiction_sweep")["deferral"]["attempt"] == 1, again.summary


def test_the_retry_sensor_requests_a_deferred_pass_when_its_retry_is_due(root, instance):
    import dagster as dg

    from dream_assets.definitions import build_definitions
    from dream_assets.orchestration.deployment import DreamDeployment
    from dream_assets.orchestration.metadata import report_metadata
    from dream_assets.orchestration.partitions import AGENTS
    from dream_assets.profile import AgentProfile
    from dream_assets.store import open_store

    profile = AgentProfile(root / "a1").ensure()
    (profile.root / "dream.toml").write_text("BusyMaxWait = 0\n", encoding="utf-8")
    store = open_store(profile, dream_options())
    save_memory(store.memories, "Alice lives in Paris.", now=NOW - timedelta(days=3))
    save_memory(store.memories, "Alice moved to Berlin; she lives there now.", now=NOW - timedelta(days=1))
    report = _deferred_run(profile, store, dream_options(BusyMaxWait=timedelta(0)), NOW)
    store.close()
    meta = report_metadata(report)
    assert meta["status"] == "deferred" and meta["retry_at"] == "2026-11-30T12:05:00Z"

    instance.add_dynamic_partitions(AGENTS, ["a1"])
    sensor = build_definitions(DreamDeployment(profile_root=str(root))).get_sensor_def("deferred_retry_sensor")

    def tick(now):
        with dg.build_sensor_context(
            instance=instance, resources={"deployment": DreamDeployment(profile_root=str(root), now=now.isoformat())}
        ) as ctx:
            return sensor(ctx)

    early = tick(NOW + 4 * MIN)
    assert not early.run_requests and "retries at 2026-11-30T12:05:00Z" in early.skip_reason.skip_message
    due = tick(NOW + 5 * MIN)
    (request,) = due.run_requests
    assert request.partition_key == "a1" and request.asset_selection == [dg.AssetKey("contradiction_sweep")]


def test_the_deferred_pass_list_follows_the_outcomes(profile, store):
    from dream_assets.passes.outcome import deferred_index_path, load_deferred

    save_memory(store.memories, "Alice lives in Paris.", now=NOW - timedelta(days=3))
    save_memory(store.memories, "Alice moved to Berlin; she lives there now.", now=NOW - timedelta(days=1))
    options = dream_options(BusyMaxWait=timedelta(0))
    assert not deferred_index_path(profile).exists()
    _deferred_run(profile, store, options, NOW)
    listed = load_deferred(profile)
    assert list(listed) == ["contradiction_sweep"]
    assert listed["contradiction_sweep"]["retry_at"] == "2026-11-30T12:05:00Z"
    assert "retries at 2026-11-30T12:05:00Z" in listed["contradiction_sweep"]["summary"]
    client = ModelClient(ScriptedBackend([{"supersessions": []}]), profile=profile, options=options)
    ctx = PassContext(profile, options, NOW + 5 * MIN, cycle_id="c2", client_factory=lambda: client, _store=store)
    assert run_pass(by_name("contradiction_sweep"), ctx).status == "completed"
    assert load_deferred(profile) == {} and not deferred_index_path(profile).exists()


def test_the_retry_sensor_reads_only_the_deferred_pass_list_of_each_agent(root, instance, monkeypatch):
    import dagster as dg

    from dream_assets.definitions import build_definitions
    from dream_assets.orchestration.deployment import DreamDeployment
    from dream_assets.orchestration.partitions import AGENTS
    from dream_assets.profile import AgentProfile
    from dream_assets.store import open_store
    from dream_assets.store.connection import close_all

    def deferred_agent(agent):
        profile = AgentProfile(root / agent).ensure()
        store = open_store(profile, dream_options())
        save_memory(store.memories, "Alice lives in Paris.", now=NOW - timedelta(days=3))
        save_memory(store.memories, "Alice moved to Berlin; she lives there now.", now=NOW - timedelta(days=1))
        _deferred_run(profile, store, dream_options(BusyMaxWait=timedelta(0)), NOW)
        store.close()
        return profile

    busy = deferred_agent("busy")
    off = deferred_agent("off")
    (off.root / "dream.toml").write_text("ContradictionSweepEnabled = false\n", encoding="utf-8")
    idle = AgentProfile(root / "idle").ensure()
    (idle.root / "dream.toml").write_text("this is not toml = = =\n", encoding="utf-8")
    close_all()
    busy.store_path.write_bytes(b"not a store")  # a retry request never needs the store
    instance.add_dynamic_partitions(AGENTS, ["busy", "idle", "off"])
    sensor = build_definitions(DreamDeployment(profile_root=str(root))).get_sensor_def("deferred_retry_sensor")
    options_read = []
    agent = DreamDeployment.agent
    monkeypatch.setattr(DreamDeployment, "agent", lambda self, a: options_read.append(a) or agent(self, a))
    deployment = DreamDeployment(profile_root=str(root), now=(NOW + 5 * MIN).isoformat())
    with dg.build_sensor_context(instance=instance, resources={"deployment": deployment}) as ctx:
        result = sensor(ctx)
    assert options_read == ["busy", "off"]  # only agents with a retry due; the idle agent costs one absent file
    (request,) = result.run_requests  # the disabled pass is not retried
    assert request.partition_key == "busy" and request.asset_selection == [dg.AssetKey("contradiction_sweep")]
    assert request.run_key == "retry:contradiction_sweep:busy:2026-11-30T12:05:00Z"
