import json
from datetime import UTC, datetime, timedelta

import pytest

from dream_assets.profile import AgentProfile
from dream_assets.store.ledger import LedgerRecord, PassLedger, gate, should_skip

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WEEK = timedelta(days=7)


def rec(fp="abc", ago=timedelta(hours=1)):
    return LedgerRecord(fp, NOW - ago)


@pytest.mark.parametrize(
    "record,fingerprint,max_skip,skip",
    [
        (None, "abc", WEEK, False),  # never run -> runs
        (rec(), "abc", WEEK, True),  # unchanged within the floor -> skips
        (rec(), "xyz", WEEK, False),  # changed -> runs at once
        (rec(ago=timedelta(days=7)), "abc", WEEK, False),  # floor elapsed exactly -> runs
        (rec(ago=timedelta(days=30)), "abc", WEEK, False),  # floor long elapsed -> runs
        (rec(ago=timedelta(days=400)), "abc", timedelta(0), True),  # non-positive floor -> skips indefinitely
        (rec(ago=timedelta(days=400)), "abc", -WEEK, True),
        (rec(ago=-timedelta(days=3)), "abc", WEEK, True),  # last run in the future -> not yet due
        (rec(ago=-timedelta(days=3)), "xyz", WEEK, False),  # ... but a changed input still runs
    ],
)
def test_should_skip_semantics(record, fingerprint, max_skip, skip):
    assert should_skip(record, fingerprint, NOW, max_skip) is skip


def test_skip_reason_says_when_the_pass_will_next_be_forced():
    d = gate(rec(ago=timedelta(days=2)), "abc", NOW, WEEK)
    assert d.skip and d.next_forced_at == NOW + timedelta(days=5)
    assert "next forced run at 2026-12-05T12:00:00Z" in d.reason


def test_ledger_round_trip_and_survives_a_restart(tmp_path):
    p = AgentProfile(tmp_path / "a").ensure()
    led = PassLedger(p)
    assert led.get("skill_consolidation") is None
    led.stamp("skill_consolidation", "fp1", NOW)
    again = PassLedger(p)
    assert again.get("skill_consolidation") == LedgerRecord("fp1", NOW)
    assert again.warning is None


def test_ledger_is_written_only_when_something_changed(tmp_path):
    p = AgentProfile(tmp_path / "a").ensure()
    led = PassLedger(p)
    led.stamp("x", "fp", NOW)
    mtime = p.ledger_path.stat().st_mtime_ns
    led.stamp("x", "fp", NOW)
    assert p.ledger_path.stat().st_mtime_ns == mtime
    led.stamp("x", "fp2", NOW)
    assert json.loads(p.ledger_path.read_text())["passes"]["x"]["fingerprint"] == "fp2"


def test_stamps_from_two_ledger_objects_are_both_kept(tmp_path):
    p = AgentProfile(tmp_path / "a").ensure()
    a, b = PassLedger(p), PassLedger(p)
    a.stamp("one", "1", NOW)
    b.stamp("two", "2", NOW)
    assert set(PassLedger(p).records()) == {"one", "two"}


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"passes": {"x": {"lastRunAt": "2026-01-01T00:00:00Z"}}}',
        '{"passes": {"x": {"fingerprint": "a", "lastRunAt": "yesterday"}}}',
    ],
)
def test_corrupt_ledger_degrades_to_run_everything_once_with_a_warning(tmp_path, content):
    p = AgentProfile(tmp_path / "a").ensure()
    p.ledger_path.write_text(content)
    led = PassLedger(p)
    assert led.records() == {}
    assert led.warning and str(p.ledger_path) in led.warning
    assert should_skip(led.get("x"), "a", NOW, WEEK) is False
    led.stamp("x", "a", NOW)  # the next stamp repairs the file
    assert PassLedger(p).get("x") == LedgerRecord("a", NOW)


# --- a last-run time in the future (clock skew, a copied profile) -------------------------------------------------

FUTURE = "2031-03-01T08:00:00Z"


def write_ledger(p: AgentProfile, passes: dict) -> None:
    p.ledger_path.write_text(json.dumps({"version": 1, "passes": passes}))


def test_a_future_last_run_is_read_as_now_with_a_warning_and_written_back(tmp_path):
    p = AgentProfile(tmp_path / "a").ensure()
    write_ledger(
        p,
        {
            "skill_consolidation": {"fingerprint": "fp", "lastRunAt": FUTURE},
            "tier_routing_review": {"fingerprint": "t", "lastRunAt": "2026-11-29T12:00:00Z"},
        },
    )
    led = PassLedger(p, now=NOW)
    assert led.get("skill_consolidation") == LedgerRecord("fp", NOW)
    assert led.get("tier_routing_review") == LedgerRecord("t", NOW - timedelta(days=1))
    assert "skill_consolidation" in led.warning and FUTURE in led.warning and "treated as now" in led.warning
    again = PassLedger(p)  # the correction was written: no future time is left
    assert again.get("skill_consolidation") == LedgerRecord("fp", NOW) and again.warning is None


def test_a_future_last_run_does_not_hold_an_unchanged_pass_until_that_time(tmp_path):
    p = AgentProfile(tmp_path / "a").ensure()
    write_ledger(p, {"skill_consolidation": {"fingerprint": "fp", "lastRunAt": FUTURE}})
    today = PassLedger(p, now=NOW).gate("skill_consolidation", "fp", NOW, WEEK)
    assert today.skip and today.next_forced_at == NOW + WEEK
    a_week_later = NOW + WEEK
    assert PassLedger(p, now=a_week_later).gate("skill_consolidation", "fp", a_week_later, WEEK).skip is False
    # The pure gate says the same of a record it is handed: counted from now, not from the future time.
    decision = gate(LedgerRecord("fp", NOW + timedelta(days=400)), "fp", NOW, WEEK)
    assert decision.next_forced_at == NOW + WEEK and "in the future, treated as now" in decision.reason


def test_a_future_last_run_does_not_hold_consolidation_behind_its_minimum_interval(profile, store):
    from dream_assets.options_loader import dream_options
    from dream_assets.passes.context import PassContext
    from dream_assets.passes.memory_consolidation import run_memory_consolidation

    write_ledger(profile, {"memory_consolidation": {"fingerprint": "memories:0:x", "lastRunAt": FUTURE}})
    options = dream_options(ConsolidationMinInterval=timedelta(hours=6))
    first = run_memory_consolidation(PassContext(profile, options, NOW, _store=store))
    assert first.status == "skipped" and first.reason.startswith("minimum interval")  # last run = now
    assert any("memory_consolidation last ran at 2031-03-01T08:00:00Z" in line for line in first.lines)
    later = run_memory_consolidation(PassContext(profile, options, NOW + timedelta(hours=7), _store=store))
    assert not later.reason.startswith("minimum interval") and "floored" not in later.counts


def test_pending_turns_are_kept_per_pass_and_cleared(tmp_path):
    from dream_assets.store.ledger import PendingTurns

    p = AgentProfile(tmp_path / "a").ensure()
    led = PassLedger(p)
    span = PendingTurns(NOW - timedelta(hours=3), NOW - timedelta(hours=1))
    led.set_pending("preference_inference", span)
    led.stamp("skill_consolidation", "fp", NOW)  # a stamp keeps the pending spans
    again = PassLedger(p)
    assert again.pending("preference_inference") == span and again.pending("skill_gap_detection") is None
    again.set_pending("preference_inference", None)
    assert PassLedger(p).pending("preference_inference") is None
    assert PassLedger(p).get("skill_consolidation") == LedgerRecord("fp", NOW)
