"""A `dream memory ...` command is a shell call an agent or a person makes often: it imports what the command needs,
never Dagster, pandas or the MCP SDK (each a fraction of a second before the command does anything), also when it
builds the recall index (pyarrow would import pandas for it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dream_assets.options_loader import dream_options
from dream_assets.store import index_file, open_store

from ..conftest import NOW

HEAVY = ("dagster", "pandas", "mcp", "uvicorn", "starlette", "langgraph", "openai")
#: What a search of an agent with no linked folder and no embedding model has no use for: the folder code, the save
#: pipeline and the embeddings client, the log files, undo and review.
NOT_FOR_A_SEARCH = (
    "dream_assets.folders.sync",
    "dream_assets.save_pipeline",
    "dream_assets.llm.embeddings",
    "dream_assets.store.logs",
    "dream_assets.service.changes",
    "dream_assets.service.operator",
)
#: Runs one `dream` command in this interpreter, then prints the heavy packages it imported as one JSON line.
RUN = """
import json, sys
from dream_assets.cli import main
code = main(sys.argv[2:])
heavy = json.loads(sys.argv[1])
present = {m for m, v in sys.modules.items() if v is not None}
loaded = sorted(({m.split(".")[0] for m in present} | present) & set(heavy))
print(json.dumps({"code": code, "loaded": loaded}))
"""


@pytest.fixture
def agent(profile):
    import random

    from dream_assets.demo import _memories

    store = open_store(profile, dream_options())
    store.memories.put_many(_memories(random.Random(7), NOW, 200))
    store.close()
    return profile


def _run(*args: str, heavy: tuple[str, ...] = HEAVY) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(heavy), *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_memory_commands_import_no_dagster_pandas_or_mcp(agent):
    p = str(agent.root)
    path = index_file.index_path(agent.store_path)
    assert not path.exists()  # the first search builds the recall index from the rows
    searched = _run("memory", "search", "--profile", p, "Alice python standup")
    assert searched == {"code": 0, "loaded": []}
    saved = _run("memory", "save", "--profile", p, "The Osprey runbook lives in the ops wiki.")
    assert saved == {"code": 0, "loaded": []}
    assert _run("memory", "list", "--profile", p) == {"code": 0, "loaded": []}
    path.unlink(missing_ok=True)  # a save that builds the index once more
    assert _run("memory", "save", "--profile", p, "The Heron tests run on Fridays.") == {"code": 0, "loaded": []}


#: Runs one `dream` command, then prints whether it imported the pass registry or the loader that needs it.
RUN_PASSES = """
import json, sys
from dream_assets.cli import main
code = main(sys.argv[1:])
known = ("dream_assets.passes.registry", "dream_assets.options_loader")
print(json.dumps({"code": code, "loaded": sorted(m for m in sys.modules if m in known)}))
"""


def test_a_memory_command_reads_its_options_without_importing_a_pass(agent):
    """The options of a memory command are read without the pass sections (the registry imports every pass): a
    pass's setting in the environment is kept for the pass that reads it, not refused and not typed here."""
    env = {**os.environ, "DREAM__ConsolidationMaxClusterSize": "5", "DREAM__PASSES__MEMORY_CONSOLIDATION__MODEL": "m"}
    done = subprocess.run(
        [sys.executable, "-c", RUN_PASSES, "memory", "search", "--profile", str(agent.root), "Alice python standup"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"code": 0, "loaded": []}


def test_a_search_imports_neither_the_folder_code_nor_the_save_pipeline_nor_undo(agent):
    p = str(agent.root)
    assert _run("memory", "search", "--profile", p, "Alice python standup")["code"] == 0  # builds the index file
    searched = _run("memory", "search", "--profile", p, "Alice python standup", heavy=NOT_FOR_A_SEARCH)
    assert searched == {"code": 0, "loaded": []}


def test_a_memory_command_run_in_process_leaves_pandas_importable_after_it(agent):
    # A caller of main() goes on after the command (a test, an agent's own process): the guard that hides pandas
    # while the command runs is gone when it returns, so a Dagster run in the same process can still use it.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom dream_assets.cli import main\n"
            f"assert main(['memory', 'list', '--profile', {str(agent.root)!r}]) == 0\n"
            "import pandas\nprint('pandas', pandas.__name__)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "pandas pandas"
