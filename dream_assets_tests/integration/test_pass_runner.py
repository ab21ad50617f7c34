"""The runner applies one protocol to any pass spec it is given, in one order — lock, enabled, inputs present,
floor, change gate, body, ledger stamp after a usable answer, review mode, recorded outcome — and a pass body never
gates or stamps itself: it says what it is about to send (``AboutToCall``) and returns what it did. A toy pass, which
no registry knows, shows it; the layout tests keep the gate and the stamp in the runner and the gate module."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import pytest

from dream_assets.cli import pass_line
from dream_assets.cycle_report import CycleReport
from dream_assets.options import PassOptions, pass_option
from dream_assets.options_loader import dream_options, pass_sections
from dream_assets.passes.context import PassContext
from dream_assets.passes.outcome import load_outcome, outcome_record
from dream_assets.passes.registry import PASSES, by_name
from dream_assets.passes.report import AboutToCall, PassReport
from dream_assets.passes.runner import run_pass
from dream_assets.passes.spec import PassSpec, spec_problems
from dream_assets.store.ledger import PassLedger
from dream_assets.store.locks import path_lock

from ..conftest import NOW

ROOT = Path(__file__).resolve().parents[2]
PASSES_DIR = ROOT / "dream_assets" / "passes"
TOY = "toy_pass"


@dataclass(frozen=True, kw_only=True)
class ToyOptions(PassOptions):
    """The toy pass's options section: a switch."""

    PASS: ClassVar[str] = TOY
    enabled: bool = pass_option(True, "the toy pass", alias="ToyPassEnabled")


@dataclass(frozen=True, kw_only=True)
class FlooredToyOptions(ToyOptions):
    """The toy pass's section when it has a minimum interval."""

    min_interval: timedelta = pass_option(
        timedelta(hours=6), "the toy pass's minimum interval", alias="ToyPassMinInterval"
    )


def toy_options(**flat) -> object:
    """Options that know the toy pass's section, with ``flat`` set (``ToyPassEnabled=False``)."""
    return dream_options(sections=(*pass_sections(), ToyOptions), **flat)


class Toy:
    """A toy pass: records which steps of the protocol reached it, and answers as it is told."""

    def __init__(self, answer: str = "usable", fingerprint: str = "fp-1") -> None:
        self.answer, self.fingerprint = answer, fingerprint
        self.calls: list[str] = []

    def missing_input(self, ctx: PassContext) -> str | None:
        self.calls.append("inputs")
        return None

    def body(self, ctx: PassContext):
        report = PassReport(TOY)
        self.calls.append("body")
        if not (yield AboutToCall(self.fingerprint, report)):
            self.calls.append("gated")
            return report
        self.calls.append("model call")
        if self.answer == "usable":
            return report.finish("1 thing done")
        if self.answer == "unparseable":
            return report.fail("the model's answer is not JSON: retried next cycle")
        if self.answer == "deferred":
            return report.defer("the agent's model is busy")
        if self.answer == "raises":
            raise RuntimeError("the body broke")
        raise AssertionError(self.answer)

    def spec(self, **kw) -> PassSpec:
        fields = {
            "name": TOY,
            "group": "memory",
            "description": "Toy pass — does one thing.\n\nA pass only this test knows.",
            "body": self.body,
            "options": FlooredToyOptions if kw.pop("floored", False) else ToyOptions,
            "reads": ("tier_routing_log",),
            "missing_input": self.missing_input,
            "gate": "tier_routing_log",
        }
        return PassSpec(**{**fields, **kw})


def ctx_for(profile, options=None, now=NOW, **kw) -> PassContext:
    return PassContext(profile, options or dream_options(), now, cycle_id="c1", **kw)


def test_the_toy_pass_is_a_complete_spec():
    assert spec_problems(Toy().spec()) == []


def test_a_body_that_never_stamps_is_stamped_by_the_runner_after_a_usable_answer(profile):
    toy = Toy()
    report = run_pass(toy.spec(), ctx_for(profile))
    assert report.status == "completed" and toy.calls == ["inputs", "body", "model call"]
    record = PassLedger(profile).get(TOY)
    assert record is not None and record.fingerprint == "fp-1" and record.last_run_at == NOW
    assert record.answered_by == "offline" and record.forced is None
    assert load_outcome(profile, TOY)["status"] == "completed"  # the outcome is recorded too

    # The same input an hour later: the gate answers the body, which goes no further (no model call, no stamp).
    again = Toy()
    later = run_pass(again.spec(), ctx_for(profile, now=NOW + timedelta(hours=1)))
    assert later.status == "skipped" and later.reason.startswith("change gate: input unchanged since")
    assert later.counts["gated"] == 1 and again.calls == ["inputs", "body", "gated"]
    assert PassLedger(profile).get(TOY).last_run_at == NOW

    # New input: the gate lets the body through and the new fingerprint is stamped.
    moved = Toy(fingerprint="fp-2")
    assert run_pass(moved.spec(), ctx_for(profile, now=NOW + timedelta(hours=2))).status == "completed"
    assert PassLedger(profile).get(TOY).fingerprint == "fp-2"


@pytest.mark.parametrize("answer", ["unparseable", "deferred", "raises"])
def test_a_failed_unparseable_or_deferred_run_is_not_stamped_and_runs_again(profile, answer):
    toy = Toy(answer)
    report = run_pass(toy.spec(), ctx_for(profile))
    assert report.status == ("deferred" if answer == "deferred" else "failed")
    assert "model call" in toy.calls
    assert PassLedger(profile).get(TOY) is None
    retry = Toy()
    assert run_pass(retry.spec(), ctx_for(profile, now=NOW + timedelta(minutes=5))).status == "completed"
    assert retry.calls[-1] == "model call"  # not gated: the failed run did not count as done


def test_a_completion_stamp_of_the_body_is_what_the_runner_writes(profile):
    def body(ctx):
        report = PassReport(TOY)
        report.stamp = "backlog:3:fp-1"  # e.g. the contradiction sweep: entries still wait, so the gate stays open
        return report.skip("nothing to ask this time")

    report = run_pass(Toy().spec(body=body), ctx_for(profile))
    assert report.status == "skipped"
    assert PassLedger(profile).get(TOY).fingerprint == "backlog:3:fp-1"


def test_a_forced_run_passes_the_gate_and_is_stamped_as_forced(profile):
    run_pass(Toy().spec(), ctx_for(profile))
    toy = Toy()
    report = run_pass(toy.spec(), ctx_for(profile, now=NOW + timedelta(hours=1), force="operator"))
    assert report.status == "completed" and toy.calls[-1] == "model call"
    assert report.counts["forced"] == 1 and any("change gate ignored" in line for line in report.lines)
    assert PassLedger(profile).get(TOY).forced == "operator"


def test_with_the_change_gate_off_the_body_always_runs(profile):
    options = dream_options().replace(DreamPassChangeGateEnabled=False)
    run_pass(Toy().spec(), ctx_for(profile, options))
    toy = Toy()
    assert run_pass(toy.spec(), ctx_for(profile, options, now=NOW + timedelta(hours=1))).status == "completed"
    assert toy.calls[-1] == "model call"


# ------------------------------------------------------------------ the order
def test_the_lock_comes_first_then_enabled(profile):
    toy = Toy()
    options = toy_options(ToyPassEnabled=False)
    with path_lock(profile.pass_lock_path(TOY), timeout=0):
        held = run_pass(toy.spec(), ctx_for(profile, options))
    assert held.status == "skipped" and held.reason == "another run of this pass is in progress for this agent"
    disabled = run_pass(toy.spec(), ctx_for(profile, options))
    assert disabled.reason == "disabled (ToyPassEnabled = false)"
    assert toy.calls == []  # neither the inputs, the floor, the gate nor the body were consulted


def test_a_disabled_pass_is_not_gated_and_not_stamped(profile):
    run_pass(Toy().spec(), ctx_for(profile))
    options = toy_options(ToyPassEnabled=False)
    toy = Toy(fingerprint="fp-2")
    report = run_pass(toy.spec(), ctx_for(profile, options, now=NOW + timedelta(hours=1)))
    assert report.status == "skipped" and "gated" not in report.counts and toy.calls == []
    assert PassLedger(profile).get(TOY).fingerprint == "fp-1"


def test_an_absent_input_comes_before_the_floor(profile):
    PassLedger(profile).stamp(TOY, "fp-1", NOW - timedelta(hours=1))
    spec = Toy().spec(missing_input=lambda ctx: "no toy log", floored=True)
    report = run_pass(spec, ctx_for(profile))
    assert report.status == "skipped" and report.reason == "no toy log" and not report.counts.get("floored")


def test_every_skip_the_runner_gives_says_its_cause_once(profile):
    # The cause each skip names, as the runner words it.
    causes = {
        "lock": "another run of this pass is in progress",
        "disabled": "ToyPassEnabled = false",
        "input absent": "no toy log",
        "change gate": "input unchanged since",
        "minimum interval": "ToyPassMinInterval",
    }
    skips: dict[str, PassReport] = {}
    with path_lock(profile.pass_lock_path(TOY), timeout=0):
        skips["lock"] = run_pass(Toy().spec(), ctx_for(profile))
    disabled = toy_options(ToyPassEnabled=False)
    skips["disabled"] = run_pass(Toy().spec(), ctx_for(profile, disabled))
    skips["input absent"] = run_pass(Toy().spec(missing_input=lambda ctx: "no toy log"), ctx_for(profile))
    assert run_pass(Toy().spec(), ctx_for(profile)).status == "completed"  # the ledger's stamp: gate and floor hold
    later = NOW + timedelta(hours=1)
    skips["change gate"] = run_pass(Toy().spec(), ctx_for(profile, now=later))
    skips["minimum interval"] = run_pass(Toy(fingerprint="fp-2").spec(floored=True), ctx_for(profile, now=later))
    for why, report in skips.items():
        assert report.status == "skipped", why
        # `dream run`'s line names the pass, its status and the cause once each.
        line = pass_line(report.pass_name, report.status, report.summary or report.reason, len(TOY))
        for part in (TOY, "skipped", causes[why], "last completed", "next allowed at", "next forced run at"):
            assert line.count(part) == (part in (report.reason or "") or part in (TOY, "skipped")), (why, part, line)
        # So do the pass's log line and its row in the cycle report (which has columns for the pass and status).
        (logged,) = [said for said in report.lines if causes[why] in said]
        assert logged.count(causes[why]) == 1 and TOY not in logged, (why, logged)
        record = outcome_record(report, now=later, cycle_id="c2")
        table = CycleReport("alice", "c2", "--profile alice", [record]).markdown()
        (row,) = [r for r in table.splitlines() if r.startswith(f"| {TOY} |")]
        assert row.count(causes[why]) == 1 and row.count(TOY) == 1 and row.count("skipped") == 1, (why, row)
        assert row.count("last completed") == ("last completed" in report.reason), (why, row)
    floor = skips["minimum interval"].reason
    assert floor.startswith("minimum interval: last completed 2026-") and "next allowed at" in floor


def test_a_floored_pass_does_not_consult_the_gate(profile):
    PassLedger(profile).stamp(TOY, "fp-old", NOW - timedelta(hours=1))
    toy = Toy(fingerprint="fp-new")  # new input: the gate would let it through
    report = run_pass(toy.spec(floored=True), ctx_for(profile))
    assert report.status == "skipped" and report.reason.startswith("minimum interval: last completed")
    assert report.counts["floored"] == 1 and report.counts.get("gated", 0) == 0
    assert toy.calls == ["inputs"]  # the floor held it before the body could ask the gate
    assert PassLedger(profile).get(TOY).fingerprint == "fp-old"


def test_a_body_that_yields_anything_but_about_to_call_fails_with_the_pass_named(profile):
    def body(ctx):
        yield "fp-1"
        return PassReport(TOY).finish("done")

    report = run_pass(Toy().spec(body=body), ctx_for(profile))
    assert report.status == "failed" and "pass toy_pass yielded str, not AboutToCall" in report.reason
    assert PassLedger(profile).get(TOY) is None


# ------------------------------------------------------------------ the layout
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _imported(path: Path) -> set[str]:
    """Every absolute module a file imports (module level or inside a function), and each imported name as
    ``module.name``."""
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


#: What only the runner and the gate module may call: the ledger's stamp and gate, and the gate module's decision.
GATE_CALLS = {"stamp", "gate", "should_skip", "let_through", "gate_decision", "gate_says_skip"}


def _gate_calls(path: Path) -> list[str]:
    out = []
    for node in ast.walk(_tree(path)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in GATE_CALLS:
            out.append(f"{path.name}:{node.lineno} calls {name}()")
    out.sort()
    imports = _imported(path)
    out += [
        f"{path.name} imports {m}"
        for m in sorted(imports)
        if m == "dream_assets.passes.gate"
        or m.startswith("dream_assets.passes.gate.")
        or m in {"dream_assets.store.ledger.gate", "dream_assets.store.ledger.should_skip"}
    ]
    return out


def test_no_module_under_passes_but_the_runner_and_the_gate_module_gates_or_stamps():
    found = []
    for path in sorted(PASSES_DIR.glob("*.py")):
        if path.name not in ("runner.py", "gate.py"):
            found += _gate_calls(path)
    assert found == []


def test_the_gate_check_finds_a_stamp_and_a_gate_call(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from dream_assets.passes.gate import let_through\n"
        "def body(ctx, report):\n"
        "    if not let_through(ctx, 'x', 'fp', report):\n"
        "        return report\n"
        "    ctx.ledger.stamp('x', 'fp', ctx.now)\n"
    )
    assert _gate_calls(bad) == [
        "bad.py:3 calls let_through()",
        "bad.py:5 calls stamp()",
        "bad.py imports dream_assets.passes.gate",
        "bad.py imports dream_assets.passes.gate.let_through",
    ]


def _pass_modules() -> set[str]:
    """The modules that are passes: each registered pass's own module, and every module that declares a SPEC."""
    out = {spec.body.__module__ for spec in PASSES}
    for path in PASSES_DIR.glob("*.py"):
        if any(
            isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SPEC" for t in n.targets)
            for n in _tree(path).body
        ):
            out.add(f"dream_assets.passes.{path.stem}")
    return out


@pytest.mark.parametrize("module", ["runner", "gate", "spec", "review"])
def test_the_runner_and_what_it_is_built_on_import_no_pass(module):
    passes = _pass_modules()
    assert "dream_assets.passes.tier_routing_review" in passes and len(passes) >= len(PASSES)
    imported = _imported(PASSES_DIR / f"{module}.py")
    assert not {m for m in imported if m in passes or any(m.startswith(p + ".") for p in passes)}
    if module != "review":  # review.py reads the cycle's order of the passes from the registry (one rank function)
        assert not any("passes.registry" in m for m in imported)


def test_the_spec_and_the_review_module_do_not_import_each_other_at_any_level():
    assert not any("passes.review" in m for m in _imported(PASSES_DIR / "spec.py"))
    assert not any("passes.spec" in m or "passes.runner" in m for m in _imported(PASSES_DIR / "review.py"))


def test_every_gated_pass_of_the_registry_is_gated_by_a_sensor_and_by_the_runner():
    """A pass whose body asks the gate (``AboutToCall``) declares the input its sensor watches, and the other way
    round every sensor-gated pass but memory consolidation (gated per entry, by its review stamps) asks the gate."""
    asks = set()
    for spec in PASSES:
        source = Path(__import__(spec.body.__module__, fromlist=["x"]).__file__).read_text(encoding="utf-8")
        if "AboutToCall(" in source:
            asks.add(spec.name)
    sensor_gated = {spec.name for spec in PASSES if spec.gate is not None}
    assert asks == sensor_gated - {"memory_consolidation"}
    assert {"skill_gap_detection", "skill_optimization"} <= asks
    assert by_name("memory_consolidation").gate == "memory_corpus"
