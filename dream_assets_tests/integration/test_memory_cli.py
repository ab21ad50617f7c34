"""`dream memory save|search|get|forget|history`: the agent operations from a shell, with exit codes that say what
happened (0 done, 1 nothing found, 2 refused, 3 store busy) and --json for scripts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dream_assets.cli import MEMORY_INVALID, MEMORY_NOT_FOUND, MEMORY_OK
from dream_assets.cli import main as dream
from dream_assets.profile import AgentProfile
from dream_assets.store import open_store


@pytest.fixture
def agent(tmp_path: Path) -> str:
    AgentProfile(tmp_path / "a").ensure()
    return str(tmp_path / "a")


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_save_search_get_forget_history_from_the_shell(agent: str, capsys) -> None:
    assert dream(["memory", "save", "Invoices go to billing@example.org.", "--profile", agent, "--json"]) == MEMORY_OK
    saved = _json(capsys)
    assert saved["outcome"] == "created"
    assert dream(["memory", "save", "invoices go to billing@example.org", "--profile", agent, "--json"]) == MEMORY_OK
    assert _json(capsys)["outcome"] == "reinforced"
    assert dream(["memory", "search", "invoices", "--profile", agent, "--json"]) == MEMORY_OK
    assert [h["id"] for h in _json(capsys)["hits"]] == [saved["id"]]
    assert dream(["memory", "forget", saved["id"], "--reason", "moved to AP", "--profile", agent]) == MEMORY_OK
    assert "dream undo --profile" in capsys.readouterr().out
    assert dream(["memory", "get", saved["id"], "--profile", agent, "--json"]) == MEMORY_OK
    record = _json(capsys)
    assert record["status"] == "archived" and "moved to AP" in record["archived_reason"]
    assert dream(["memory", "history", saved["id"], "--profile", agent, "--json"]) == MEMORY_OK
    assert [e["event"] for e in _json(capsys)["events"]] == ["created", "reinforced", "archived"]
    assert dream(["memory", "search", "invoices", "--profile", agent]) == MEMORY_NOT_FOUND


def _shell(*args: str) -> subprocess.CompletedProcess[str]:
    """``dream`` in a process of its own, as a shell runs it."""
    command = [sys.executable, "-m", "dream_assets.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_a_memory_call_in_a_process_of_its_own_ends_with_its_output_and_its_exit_code(agent: str) -> None:
    """A shell's `dream memory` call ends its process without the interpreter's teardown: what it printed, its exit
    code and what it saved are there all the same, for the next process."""
    saved = _shell("memory", "save", "Invoices go to billing@example.org.", "--profile", agent, "--json")
    assert saved.returncode == MEMORY_OK, saved.stderr
    entry = json.loads(saved.stdout)
    found = _shell("memory", "search", "invoices", "--profile", agent)
    assert found.returncode == MEMORY_OK and found.stdout.startswith(entry["id"]), found.stderr
    missing = _shell("memory", "search", "zebras", "--profile", agent)
    assert (missing.returncode, missing.stdout, missing.stderr) == (MEMORY_NOT_FOUND, "", "no memory matches\n")
    refused = _shell("memory", "search", "x", "--limit", "0", "--profile", agent)
    assert refused.returncode == MEMORY_INVALID and "limit" in refused.stderr
    store = open_store(agent)
    try:
        assert [c.kind for c in store.changes.for_target("memory", entry["id"])] == ["created"]
    finally:
        store.close()


def test_exit_codes_for_nothing_found_and_refused_input(agent: str, capsys) -> None:
    assert dream(["memory", "get", "f" * 32, "--profile", agent]) == MEMORY_NOT_FOUND
    assert "no memory with id" in capsys.readouterr().err
    assert dream(["memory", "save", "bad\x01text", "--profile", agent]) == MEMORY_INVALID
    assert capsys.readouterr().err.startswith("dream memory save: content ")
    assert dream(["memory", "search", "x", "--limit", "0", "--profile", agent]) == MEMORY_INVALID
    assert open_store(agent).memories.counts() == {"live": 0, "archived": 0}


def test_errors_under_json_are_json_on_standard_output(agent: str, tmp_path: Path, capsys) -> None:
    assert dream(["memory", "get", "f" * 32, "--profile", agent, "--json"]) == MEMORY_NOT_FOUND
    out = _json(capsys)
    assert out["exit"] == MEMORY_NOT_FOUND and "no memory with id" in out["error"]
    assert dream(["memory", "save", "bad\x01text", "--profile", agent, "--json"]) == MEMORY_INVALID
    assert _json(capsys)["error"].startswith("dream memory save: content ")
    assert dream(["memory", "search", "x", "--profile", str(tmp_path / "typo"), "--json"]) == 2
    out = _json(capsys)
    assert out["exit"] == 2 and "no agent profile at" in out["error"]


@pytest.mark.parametrize(
    "argv,usage,hint",
    [
        (["memory", "save", "x", "--catgory", "a"], "usage: dream memory save", "did you mean --category?"),
        (["status", "--profil", "{agent}"], "usage: dream status", "did you mean --profile?"),
        (["run", "--profil", "{agent}"], "usage: dream run", "did you mean --profile?"),
        (["memory", "search", "x", "--lim", "3"], "usage: dream memory search", "did you mean --limit?"),
    ],
)
def test_a_mistyped_or_abbreviated_flag_is_refused_with_the_command_s_usage_and_the_closest_flag(
    agent: str, capsys, argv: list[str], usage: str, hint: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        dream([a.format(agent=agent) for a in argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert usage in err and hint in err
    assert open_store(agent).memories.counts() == {"live": 0, "archived": 0}


def test_a_missing_profile_is_refused_and_not_created(tmp_path: Path, capsys) -> None:
    assert dream(["memory", "save", "x", "--profile", str(tmp_path / "typo")]) == 2
    assert not (tmp_path / "typo").exists()


def test_save_reads_standard_input(agent: str, capsys, monkeypatch) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("The on-call phone is +49 30 1234567.\n"))
    assert dream(["memory", "save", "-", "--profile", agent, "--json"]) == MEMORY_OK
    assert _json(capsys)["content"] == "The on-call phone is +49 30 1234567."


@pytest.mark.parametrize("action", [["save", "a fact"], ["search", "fact"], ["get", "f" * 32]])
def test_a_now_at_the_end_of_the_calendar_is_refused_naming_it_not_an_overflow(agent: str, capsys, action) -> None:
    with pytest.raises(SystemExit) as done:
        dream(["memory", *action, "--profile", agent, "--now", "9999-12-31T23:59:59Z"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "--now 9999-12-31T23:59:59Z is outside the times a clock may take" in err
    assert "OverflowError" not in err
    assert open_store(agent).memories.counts() == {"live": 0, "archived": 0}


def test_a_library_call_with_a_clock_past_the_calendar_is_invalid_input(agent: str) -> None:
    from datetime import UTC, datetime

    from dream_assets import agent_memory

    with pytest.raises(agent_memory.InvalidInput, match="now 9999-12-31T23:59:59Z is outside"):
        agent_memory.save(agent, "a fact", now=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC))


def test_memory_list_pages_from_the_shell(agent: str, capsys) -> None:
    """`dream memory list`: a page of a category with the cursor of the next one, archived ones with --archived,
    exit 1 for an empty page and 2 for a cursor it never printed."""
    for fact, category in (
        ("Invoices go to billing@example.org.", "finance"),
        ("Quarterly reports are due on the fifth.", "finance/reports"),
        ("The office closes at six on Fridays.", "office"),
    ):
        assert dream(["memory", "save", fact, "--category", category, "--profile", agent, "--json"]) == MEMORY_OK
        capsys.readouterr()
    assert dream(["memory", "list", "--category", "finance", "--limit", "1", "--profile", agent, "--json"]) == MEMORY_OK
    first = _json(capsys)
    assert [m["category"] for m in first["items"]] == ["finance"] and first["next_cursor"]
    cursor = first["next_cursor"]
    assert dream(["memory", "list", "--category", "finance", "--cursor", cursor, "--profile", agent]) == MEMORY_OK
    out = capsys.readouterr().out
    assert "[finance/reports]" in out and "Quarterly reports" in out and "next page" not in out
    invoices = first["items"][0]["id"]
    assert dream(["memory", "forget", invoices, "--reason", "moved", "--profile", agent]) == MEMORY_OK
    capsys.readouterr()
    assert dream(["memory", "list", "--category", "finance/reports", "--profile", agent, "--json"]) == MEMORY_OK
    assert len(_json(capsys)["items"]) == 1
    assert dream(["memory", "list", "--category", "finance", "--profile", agent, "--json"]) == MEMORY_OK
    assert [m["category"] for m in _json(capsys)["items"]] == ["finance/reports"]
    assert dream(["memory", "list", "--category", "finance", "--archived", "--profile", agent, "--json"]) == MEMORY_OK
    assert [m["status"] for m in _json(capsys)["items"]] == ["archived", "live"]
    assert dream(["memory", "list", "--category", "nowhere", "--profile", agent]) == MEMORY_NOT_FOUND
    assert dream(["memory", "list", "--cursor", "bogus", "--profile", agent]) == MEMORY_INVALID
    assert "cursor 'bogus'" in capsys.readouterr().err
