"""One scenario, five interfaces, one outcome: the memory service behind every interface. The scenario saves a fact,
saves it again (reinforced), saves a corrected version of it (kept apart for the dream), saves near-duplicates,
forgets a note and restores it, forgets another and undoes that forget (the agent's own undo), runs a dream cycle (it
merges the near-duplicates; the correction stays apart from the fact it corrects) and undoes it, then runs a cycle
in review (it proposes those merges again), applies the pending set and undoes the apply. It is driven through the
Python API (``dream_assets.service``), the ``dream`` CLI (a subprocess per command: ``--json`` where the command has
it, else the lines it prints), MCP over stdio and over Streamable HTTP (the real ``mcp`` SDK client against a ``dream
serve`` subprocess) and the LangGraph store, each on a fresh profile of its own, and every interface must leave the
same store (every entry's content, category and status), the same ``history`` for every entry (event, pass, undone)
and the same restore, undo and review results as the Python API.

What an interface has no verb for is done with the Python API on the same profile, and each driver says which
(``BORROWED``): the dream cycle itself for every interface (run in this process with the offline backend, the passes
``dream run`` runs through Dagster); over MCP, the undo of the dream cycle and of the applied review set
(``memory_undo`` undoes the agent's own changes only, and refuses those by name); through LangGraph, everything but
save (put), search and forget (delete).

Times: the Python API, the CLI (``--now``) and the LangGraph store (its clock) get the same injected times, a minute
a step. The MCP tools take no time (they act at the server's clock), so the MCP scenarios, and what they borrow from
the Python API, run at the current time; nothing in the scenario depends on the time between steps (no decay, no
expiry, no purge within minutes), and times are left out of the comparison.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dream_assets.cycle import run_cycle
from dream_assets.options import DreamOptions
from dream_assets.options_loader import load_options
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store
from dream_assets.store.connection import close_all

from ..conftest import NOW

#: The profile's own options: no busy lease (a cycle right after a save would otherwise wait for the agent to go
#: quiet) and no minimum interval between consolidations (the cycle in review follows the first by minutes), so both
#: cycles run their passes whatever the interface's clock.
PROFILE_TOML = "AgentActiveWindow = 0\nConsolidationMinInterval = 0\n"
DREAM_CYCLE = "conformance-dream"
REVIEW_CYCLE = "conformance-review"

FACT = "The release train leaves on Thursdays."
CORRECTION = "The release train leaves on Fridays now, not on Thursdays."
DEPLOYS = (
    "Deploys to production need two approvals.",
    "Production deploys need approval from two reviewers.",
    "Every deploy to production needs two approvals.",
)
HOTFIX = "Hotfixes skip the release train."
PLANT = "The office plant is watered on Mondays."
LATER = "The team offsite is in Lisbon this year."


# --- the interfaces -------------------------------------------------------------------------------------------------


class Clock:
    """The scenario's time: ``NOW`` plus a minute a step (injected), or ``None`` a step (the callee's own clock)."""

    def __init__(self, injected: bool) -> None:
        self.injected, self.at = injected, NOW

    def __call__(self) -> datetime | None:
        if not self.injected:
            return None
        self.at += timedelta(minutes=1)
        return self.at


class PythonDriver:
    """``dream_assets.service``, called directly."""

    name = "python"
    BORROWED: tuple[str, ...] = ()

    def __init__(self, profile: AgentProfile, clock: Clock) -> None:
        self.profile, self.clock = profile, clock

    @property
    def service(self) -> Any:
        from dream_assets import service

        return service

    def save(self, content: str, category: str) -> dict:
        return self.service.save(self.profile, content, category=category, now=self.clock()).model_dump(mode="json")

    def search(self, query: str) -> list[str]:
        return [h.id for h in self.service.search(self.profile, query, now=self.clock()).hits]

    def get(self, entry_id: str) -> dict:
        return self.service.get(self.profile, entry_id, now=self.clock()).model_dump(mode="json")

    def forget(self, entry_id: str, reason: str) -> str:
        return self.service.forget(self.profile, entry_id, reason=reason, now=self.clock()).cycle_id

    def restore(self, entry_id: str) -> dict:
        return self.service.restore(self.profile, entry_id, now=self.clock()).model_dump(mode="json")

    def history(self, entry_id: str) -> list[dict]:
        events = self.service.history(self.profile, entry_id, now=self.clock()).events
        return [e.model_dump(mode="json") for e in events]

    def undo_own(self, cycle_id: str) -> dict:
        return self.service.undo_own(self.profile, cycle_id=cycle_id, now=self.clock()).model_dump(mode="json")

    def undo(self, cycle_id: str) -> dict:
        return self.service.undo(self.profile, cycle_id=cycle_id, now=self.clock()).model_dump(mode="json")

    def review_list(self) -> dict:
        return self.service.review_list(self.profile, now=self.clock()).model_dump(mode="json")

    def review_apply(self, cycle_id: str, reason: str) -> dict:
        decided = self.service.review_decide(self.profile, "apply", cycle_id=cycle_id, reason=reason, now=self.clock())
        return decided.model_dump(mode="json")

    def close(self) -> None:
        pass


class CliDriver(PythonDriver):
    """The ``dream`` command, one subprocess per call: ``dream memory ... --json`` read as JSON; ``dream restore``,
    ``undo``, ``review`` and ``apply`` have no ``--json``, so what they print is read back into the fields of the
    service's result (the targets and kinds an undo put back, the diff lines of a review set, what an apply did) and
    the outcome from the exit code."""

    name = "cli"
    UNDO_OUTCOME = {0: "done", 1: "partial", 3: "nothing"}
    DECIDE_OUTCOME = {0: "done", 1: "partial", 2: "nothing"}

    def _run(self, *args: str, codes: tuple[int, ...] = (0, 1)) -> subprocess.CompletedProcess:
        at = self.clock()
        cmd = [sys.executable, "-m", "dream_assets.cli", *args, "--profile", str(self.profile.root)]
        if at is not None:
            cmd += ["--now", at.isoformat()]
        done = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), timeout=300)
        assert done.returncode in codes, f"{' '.join(args)} exited {done.returncode}: {done.stderr}{done.stdout}"
        return done

    def _json(self, *args: str) -> Any:
        return json.loads(self._run(*args, "--json").stdout)

    def save(self, content: str, category: str) -> dict:
        return self._json("memory", "save", content, "--category", category)

    def search(self, query: str) -> list[str]:
        return [h["id"] for h in self._json("memory", "search", query)["hits"]]

    def get(self, entry_id: str) -> dict:
        return self._json("memory", "get", entry_id)

    def forget(self, entry_id: str, reason: str) -> str:
        return self._json("memory", "forget", entry_id, "--reason", reason)["cycle_id"]

    def history(self, entry_id: str) -> list[dict]:
        return self._json("memory", "history", entry_id)["events"]

    def restore(self, entry_id: str) -> dict:
        out = self._run("restore", "--id", entry_id, codes=(0,)).stdout
        found = re.match(r"restored memory (\S+): (.*)\nrecorded as cycle (\S+);", out, re.DOTALL)
        if found:
            return {"id": found[1], "status": "restored", "content": found[2], "cycle_id": found[3]}
        live = re.match(r"memory (\S+) is live, not archived; nothing to restore: (.*)\n", out, re.DOTALL)
        assert live, out
        return {"id": live[1], "status": "already_live", "content": live[2], "cycle_id": None}

    def undo(self, cycle_id: str) -> dict:
        done = self._run("undo", "--cycle", cycle_id, codes=tuple(self.UNDO_OUTCOME))
        report: dict[str, Any] = {"outcome": self.UNDO_OUTCOME[done.returncode], "put_back": []}
        fields = {"already undone ": "already_undone", "left     ": "left", "NOT restored ": "not_restored"}
        fields["refused  "] = "refused"
        for key in fields.values():
            report[key] = []
        for line in (done.stdout + done.stderr).splitlines():
            lead = next((k for k in fields if line.startswith(k)), None)
            if lead is not None:
                report[fields[lead]].append(line[len(lead) :])
                continue
            put = re.match(r"([a-z][a-z ]*?) ((?:memory|skill) \S+?)(?::|$)", line)
            if put and not line.startswith(("undo of ", "the ", "left as ")):
                report["put_back"].append({"kind": put[1], "target": put[2]})
        return report

    undo_own = undo  # `dream undo` is the CLI's one undo: an agent's forget is a cycle like any other

    def review_list(self) -> dict:
        """The sets as ``dream review`` prints them: each change's lines (``ReviewChange.lines``), two spaces in;
        a line holding a merged text goes on unindented."""
        sets: list[dict] = []
        lines: list[str] | None = None
        for line in self._run("review", codes=(0,)).stdout.splitlines():
            header = re.match(r"set (\S+) \(", line)
            if header:
                sets.append({"cycle_id": header[1], "changes": []})
                lines = None
            elif not sets or not line:
                lines = None if not line else lines
            elif line.startswith("  change "):
                lines = [line[2:]]
                sets[-1]["changes"].append({"lines": lines})
            elif lines is not None:
                if line.startswith("  "):
                    lines.append(line[2:])
                else:
                    lines[-1] += "\n" + line
        return {"sets": sets}

    def review_apply(self, cycle_id: str, reason: str) -> dict:
        done = self._run("apply", "--cycle", cycle_id, "--reason", reason, codes=tuple(self.DECIDE_OUTCOME))
        out, err = done.stdout.splitlines(), done.stderr.splitlines()
        undo = re.search(r"--cycle (\S+?)`", done.stdout)
        return {
            "outcome": self.DECIDE_OUTCOME[done.returncode],
            "done": [line for line in out if line.startswith("applied ")],
            "refused": [line for line in err if line.startswith("refused ")],
            "failed": [line for line in err if line.startswith("NOT applied ")],
            "not_found": [line for line in err if line.startswith("not applied: ")],
            "undo_cycle_id": undo[1] if undo else None,
        }


def _clean_env() -> dict[str, str]:
    from dream_assets_tests.mcp_harness import clean_env

    return clean_env()


class McpDriver(PythonDriver):
    """The MCP tools through the real ``mcp`` SDK client, over stdio (``dream serve --profile``) or Streamable HTTP
    (``dream serve --http``), the session held by a blocking portal so the scenario reads like the others."""

    BORROWED = (
        "undo of the dream cycle and of the applied review set (memory_undo takes the agent's own changes only)",
    )

    def __init__(self, profile: AgentProfile, clock: Clock, transport: str) -> None:
        from anyio.from_thread import start_blocking_portal

        from dream_assets_tests.mcp_harness import HttpServer, http_session, stdio_session

        super().__init__(profile, clock)
        self.name = f"mcp-{transport}"
        self._stack = ExitStack()
        try:
            portal = self._stack.enter_context(start_blocking_portal())
            if transport == "stdio":
                session = stdio_session(profile.root)
            else:
                server = self._stack.enter_context(HttpServer(profile.root.parent))
                session = http_session(server.url(profile.agent_id))
            self.session = self._stack.enter_context(portal.wrap_async_context_manager(session))
            self.portal = portal
        except BaseException:
            self._stack.close()
            raise

    def close(self) -> None:
        self._stack.close()

    def _call(self, tool: str, **arguments: Any) -> dict:
        from dream_assets_tests.mcp_harness import ok

        self.clock()
        return ok(self.portal.call(self.session.call_tool, tool, arguments))

    def save(self, content: str, category: str) -> dict:
        return self._call("memory_save", content=content, category=category)

    def search(self, query: str) -> list[str]:
        return [h["id"] for h in self._call("memory_search", query=query)["hits"]]

    def get(self, entry_id: str) -> dict:
        return self._call("memory_get", id=entry_id)

    def forget(self, entry_id: str, reason: str) -> str:
        return self._call("memory_forget", id=entry_id, reason=reason)["cycle_id"]

    def restore(self, entry_id: str) -> dict:
        return self._call("memory_restore", id=entry_id)

    def history(self, entry_id: str) -> list[dict]:
        return self._call("memory_history", id=entry_id)["events"]

    def undo_own(self, cycle_id: str) -> dict:
        return self._call("memory_undo", cycle_id=cycle_id)

    def undo(self, cycle_id: str) -> dict:
        """A dream cycle or an applied review set is an operator's to undo: ``memory_undo`` refuses it by name and
        changes nothing, and the Python API undoes it."""
        refused = self.portal.call(self.session.call_tool, "memory_undo", {"cycle_id": cycle_id})
        assert refused.is_error and f"cycle {cycle_id} is not the agent's own" in refused.content[0].text
        return super().undo(cycle_id)

    def review_list(self) -> dict:
        return self._call("review_list")

    def review_apply(self, cycle_id: str, reason: str) -> dict:
        return self._call("review_apply", cycle_id=cycle_id, reason=reason)


class LangGraphDriver(PythonDriver):
    """``LangGraphMemoryStore``: a save is a put of ``{"content": ...}`` under the fact's key in the namespace of its
    category (the same fact again is a put to the same key; another text, a new key), a forget is a delete, a search
    is a search with a query. The rest is the Python API on the same profile."""

    name = "langgraph"
    BORROWED = ("get", "history", "restore", "undo of the agent's own forget", "undo", "review list and apply")

    def __init__(self, profile: AgentProfile, clock: Clock) -> None:
        pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
        from dream_assets.langgraph_store import LangGraphMemoryStore

        super().__init__(profile, clock)
        self._at: datetime | None = None
        self.lg = LangGraphMemoryStore(profile, clock=lambda: self._at or datetime.now(NOW.tzinfo))
        self.keys: dict[str, tuple[tuple[str, ...], str]] = {}  # entry id -> (namespace, key)
        self.by_text: dict[tuple[str, str], str] = {}  # (category, text) -> key

    def close(self) -> None:
        self.lg.close()

    def save(self, content: str, category: str) -> dict:
        from dream_assets.langgraph_store import item_id

        self._at = self.clock()
        namespace = (category,)
        key = self.by_text.setdefault((category, content), f"fact-{len(self.by_text) + 1}")
        self.lg.put(namespace, key, {"content": content})
        entry_id = item_id(namespace, key)
        self.keys[entry_id] = (namespace, key)
        return {"id": entry_id, "content": content, "category": category}

    def search(self, query: str) -> list[str]:
        from dream_assets.langgraph_store import item_id

        self._at = self.clock()
        hits = self.lg.search((), query=query)
        return [item_id(h.namespace, h.key) if (h.namespace, h.key) in self.keys.values() else h.key for h in hits]

    def forget(self, entry_id: str, reason: str) -> str:
        self._at = self.clock()
        namespace, key = self.keys[entry_id]
        self.lg.delete(namespace, key)
        # a delete returns nothing: the cycle to undo it with is the one history shows for the archive
        return self.service.history(self.profile, entry_id, now=self._at).events[-1].cycle_id


# --- the scenario ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    """What a scenario left, ids replaced by the content of the entry they name (ids are random per run)."""

    store: list[tuple]
    history: dict[str, list[tuple]]
    steps: dict[str, Any]


def _options(profile: AgentProfile, **overrides: Any) -> DreamOptions:
    options = load_options(env={}, profile_toml=profile.options_path)
    return options.replace(**overrides)


def _cycle(profile: AgentProfile, cycle_id: str, now: datetime | None, **overrides: Any) -> None:
    """A whole dream cycle, in this process (the passes ``dream run`` runs through Dagster), offline backend."""
    reports = run_cycle(profile, _options(profile, **overrides), now, cycle_id=cycle_id)
    failed = [(r.pass_name, r.summary) for r in reports if r.status not in ("completed", "skipped")]
    assert not failed, failed


def run_scenario(driver: PythonDriver) -> Outcome:
    profile, clock = driver.profile, driver.clock
    steps: dict[str, Any] = {}
    first = driver.save(FACT, "process")
    again = driver.save(FACT, "process")
    steps["repeat keeps one entry"] = again["id"] == first["id"]
    correction = driver.save(CORRECTION, "process")
    steps["correction is its own entry"] = correction["id"] != first["id"]
    deploys = [driver.save(text, "process") for text in DEPLOYS]
    hotfix = driver.save(HOTFIX, "general")
    plant = driver.save(PLANT, "general")

    driver.forget(hotfix["id"], "no longer true")
    steps["forgotten is not found"] = hotfix["id"] not in driver.search("hotfixes release train")
    steps["forgotten get"] = _status(driver.get(hotfix["id"]))
    steps["restore"] = _restored(driver.restore(hotfix["id"]))
    steps["restored is found"] = hotfix["id"] in driver.search("hotfixes release train")

    forgot_plant = driver.forget(plant["id"], "wrong office")
    steps["undo own forget"] = _undone(driver.undo_own(forgot_plant))
    steps["plant after undo"] = _status(driver.get(plant["id"]))

    _cycle(profile, DREAM_CYCLE, clock())
    steps["merged get"] = _status(driver.get(deploys[0]["id"]))
    steps["fact and correction after the cycle"] = (
        _status(driver.get(first["id"]))[0],
        _status(driver.get(correction["id"]))[0],
    )
    steps["undo dream cycle"] = _undone(driver.undo(DREAM_CYCLE))
    steps["deploy after undo"] = _status(driver.get(deploys[0]["id"]))

    # the undo left the merged memories apart (a person's decision) until the consolidation cooldown; at zero
    # cooldown, once the agent saved something since (an idle corpus is asked nothing again), the cycle in review
    # proposes those merges again
    driver.save(LATER, "general")
    _cycle(profile, REVIEW_CYCLE, clock(), ApplyMode="review", ConsolidationSettledCooldown=timedelta(0))
    steps["review list"] = _pending(driver.review_list())
    applied = driver.review_apply(REVIEW_CYCLE, "each cluster says one thing")
    steps["review apply"] = _decided(applied)
    steps["undo review apply"] = _undone(driver.undo(applied["undo_cycle_id"]))

    names = _names(profile)
    store = _contents(profile)
    history = {names[i]: [_event(e) for e in driver.history(i)] for i in names}
    return Outcome(store=store, history=history, steps=_renamed(steps, names))


def _status(record: dict) -> tuple:
    """What a get tells about where an entry is (the id it leads to, renamed later)."""
    return record["status"], record["content"], record.get("current_id")


def _restored(result: dict) -> tuple:
    return result["status"], result["content"]


def _undone(report: dict) -> dict:
    """What an undo put back (each target with the kind of put-back), what it found undone already, could not put
    back, was refused or left, and its outcome."""
    return {
        "outcome": report["outcome"],
        "put_back": [(p["kind"], p["target"]) for p in report["put_back"]],
        **{k: report[k] for k in ("already_undone", "not_restored", "refused", "left")},
    }


def _pending(listed: dict) -> list:
    """The pending sets: each change as its readable diff (its header names its pass and kind)."""
    return [(s["cycle_id"], [c["lines"] for c in s["changes"]]) for s in listed["sets"]]


def _decided(decision: dict) -> dict:
    """How many changes an apply applied, refused, failed or did not find, and its outcome (which target a refusal
    names depends on the order of random ids; how many is what must agree)."""
    return {"outcome": decision["outcome"]} | {k: len(decision[k]) for k in ("done", "refused", "failed", "not_found")}


def _event(event: dict) -> tuple:
    return event["event"], event["pass_name"], event.get("undone_at") is not None


def _names(profile: AgentProfile) -> dict[str, str]:
    """Every entry's id -> its category and content (what a person recognises it by; a merged entry's content is
    its sources'); when two entries hold the same, each also names the cycle that made it (the dream cycle and the
    cycle in review merge the same sources into the same text)."""
    store = open_store(profile, _options(profile))
    try:
        entries = store.memories.list_all()
        origin = {}
        for e in entries:
            first = store.changes.for_target("memory", e.id)[0]
            origin[e.id] = first.cycle_id if first.cycle_id in (DREAM_CYCLE, REVIEW_CYCLE) else first.pass_name
    finally:
        store.close()
    names = {e.id: f"[{e.category}] {e.content}" for e in entries}
    shared = {n for n in names.values() if list(names.values()).count(n) > 1}
    return {i: f"{n} (made by {origin[i]})" if n in shared else n for i, n in names.items()}


def _contents(profile: AgentProfile) -> list[tuple]:
    store = open_store(profile, _options(profile))
    try:
        return sorted(
            (e.category, e.content, "archived" if e.is_archived else "live") for e in store.memories.list_all()
        )
    finally:
        store.close()


_VOLATILE = {"at", "created_at", "updated_at", "last_seen_at", "archived_at", "expires_at", "undone_at", "timestamp"}
_ID = re.compile(r"\b(?:lg-)?[0-9a-f]{32}\b")
_TIME = re.compile(r"\b\d{4}-?\d{2}-?\d{2}(?:[T ][\d:.]+Z?(?:[+-]\d{2}:\d{2})?)?")


def _renamed(value: Any, names: dict[str, str]) -> Any:
    """``value`` with every entry id replaced by the entry's name, change-set and change ids by a placeholder
    (drawn at random), times left out."""
    if isinstance(value, dict):
        return {
            k: _renamed(v, names)
            for k, v in value.items()
            if k not in _VOLATILE and not k.endswith(("_command", "cycle_id"))
        }
    if isinstance(value, tuple):
        return tuple(_renamed(v, names) for v in value)
    if isinstance(value, list):
        # what a result lists about several targets comes in the order of their (random) ids
        return sorted((_renamed(v, names) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, str):
        return _TIME.sub("<time>", _ID.sub(lambda m: names.get(m.group(), "<id>"), value))
    return value


# --- the tests ------------------------------------------------------------------------------------------------------


def _fresh(root: Path, name: str) -> AgentProfile:
    profile = AgentProfile(root / name).ensure()
    profile.options_path.write_text(PROFILE_TOML, encoding="utf-8")
    return profile


@contextmanager
def _driver(kind: str, root: Path) -> Iterator[PythonDriver]:
    profile = _fresh(root, "agent")
    makers: dict[str, Callable[[], PythonDriver]] = {
        "python": lambda: PythonDriver(profile, Clock(injected=True)),
        "cli": lambda: CliDriver(profile, Clock(injected=True)),
        "langgraph": lambda: LangGraphDriver(profile, Clock(injected=True)),
        "mcp-stdio": lambda: McpDriver(profile, Clock(injected=False), "stdio"),
        "mcp-http": lambda: McpDriver(profile, Clock(injected=False), "http"),
    }
    driver = makers[kind]()
    try:
        yield driver
    finally:
        driver.close()
        close_all()


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Outcome:
    """The scenario through the Python API: what every other interface must leave."""
    with _driver("python", tmp_path_factory.mktemp("python")) as driver:
        return run_scenario(driver)


def test_the_scenario_through_the_python_api_does_what_it_says(reference):
    """The reference itself is the scenario it claims: every step acted, so agreeing with it means something."""
    steps, history = reference.steps, reference.history
    assert steps["repeat keeps one entry"] and steps["correction is its own entry"]
    fact, hotfix, plant = f"[process] {FACT}", f"[general] {HOTFIX}", f"[general] {PLANT}"
    assert [e[:2] for e in history[plant]] == [("created", "agent"), ("archived", "forget"), ("restored", "undo")]
    assert [e[0] for e in history[fact]][:2] == ["created", "reinforced"]
    assert steps["forgotten get"][0] == "archived" and steps["forgotten is not found"]
    assert steps["restore"] == ("restored", HOTFIX) and steps["restored is found"]
    assert [e[0] for e in history[hotfix]] == ["created", "archived", "restored"]
    assert steps["undo own forget"]["outcome"] == "done" and steps["plant after undo"][0] == "live"
    assert steps["merged get"][0] == "archived", "the dream cycle merged the near-duplicate deploy notes"
    assert steps["fact and correction after the cycle"] == ("live", "live"), "a correction is the sweep's to decide"
    assert steps["undo dream cycle"]["outcome"] == "done" and steps["deploy after undo"][0] == "live"
    assert "merged out" in [e[0] for e in history[f"[process] {DEPLOYS[0]}"]]
    # one merge waits in the set: the three deploy notes (the correction stays apart from the fact it corrects)
    assert steps["review apply"]["done"] == 1, "the cycle in review left a set whose merge the apply applied"
    # the whole set applies: the sweep's marks on entries its merges archived are housekeeping, never "edited since"
    assert steps["review apply"]["outcome"] == "done" and steps["review apply"]["refused"] == 0, steps["review apply"]
    assert steps["undo review apply"]["outcome"] == "done"
    # nothing lost: every source of a merge is live again after the undos, every merged entry archived
    live = {(c, t) for c, t, status in reference.store if status == "live"}
    assert {("process", t) for t in (FACT, CORRECTION, *DEPLOYS)} | {
        ("general", t) for t in (HOTFIX, PLANT, LATER)
    } <= live


INTERFACES = [
    "langgraph",
    pytest.param("cli", marks=pytest.mark.slow),  # a subprocess per command
    pytest.param("mcp-stdio", marks=pytest.mark.slow),  # a `dream serve` subprocess
    pytest.param("mcp-http", marks=pytest.mark.slow),  # a `dream serve --http` subprocess
]


@pytest.mark.parametrize("interface", INTERFACES)
def test_every_interface_leaves_what_the_python_api_leaves(interface, reference, tmp_path):
    with _driver(interface, tmp_path) as driver:
        outcome = run_scenario(driver)
    assert outcome.store == reference.store
    assert outcome.steps == reference.steps
    assert outcome.history == reference.history
