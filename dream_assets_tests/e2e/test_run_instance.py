"""`dream run` in a shell records its run in the project's persistent Dagster instance when there is one (DAGSTER_HOME,
else the `.dagster_home/` the make targets keep in the working directory), so `make dev`'s UI shows it, and says
where; without one it says the run was recorded nowhere."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import pytest

from dream_assets.cli import main

NOW = "2026-11-30T12:00:00Z"


@pytest.mark.slow  # a cycle through Dagster
def test_dream_run_in_the_project_folder_records_into_its_dagster_home(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / ".dagster_home"
    home.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml", home / "dagster.yaml")
    profile = str(tmp_path / "data" / "agents" / "alice")
    assert main(["init", "--profile", profile]) == 0
    assert main(["run", "--profile", profile, "--now", NOW]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith(f"succeeded; the Dagster UI of the instance in {home} shows it (make dev)"), last
    run_id = last.split()[1]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.job_name == "dream_cycle"


@pytest.mark.slow  # a cycle through Dagster
def test_dream_run_without_an_instance_says_it_was_recorded_nowhere(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    profile = str(tmp_path / "agents" / "alice")
    assert main(["init", "--profile", profile]) == 0
    assert main(["run", "--profile", profile, "--now", NOW]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "recorded in no Dagster instance (set DAGSTER_HOME" in last


@pytest.mark.slow  # a cycle through Dagster
def test_dream_run_says_what_it_read_from_and_wrote_to_a_linked_folder(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "deploys.md").write_text("---\nname: deploys\ntype: project\n---\n\n- Deploys are on Tuesdays.\n")
    profile = str(tmp_path / "agents" / "alice")
    assert main(["init", "--profile", profile]) == 0
    assert main(["link", "--profile", profile, "--folder", str(folder), "--format", "claude-code"]) == 0
    capsys.readouterr()
    assert main(["run", "--profile", profile, "--now", NOW]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"memory folder read: completed: read 1 file(s) of {folder}: 1 new note(s), 0 removed by a person" in lines
    assert f"memory folder write-back: completed: wrote 0 file(s) of {folder}" in lines
