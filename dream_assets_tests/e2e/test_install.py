"""The base install as a new user gets it: the wheel built from this checkout, installed with its base dependencies
only into a fresh virtual environment (pip reaches the package registry; its cache makes a second run fast). It
gives `dream init`, `dream memory save/search`, `dream serve` answering the `mcp` SDK client over stdio and a cycle
in the process; what needs an extra it lacks says which one to install."""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from dream_assets_tests.mcp_harness import clean_env as _clean_env
from dream_assets_tests.wheel_env import ROOT, build_wheel, fresh_env, size_mb

pytestmark = pytest.mark.slow  # a wheel build and a fresh environment (about a minute with pip's cache warm)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a fresh environment holding the built wheel and its base dependencies only."""
    work = tmp_path_factory.mktemp("install")
    wheel, _ = build_wheel(work)
    return fresh_env(work / "venv", wheel)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """No DREAM* variable, and no PYTHONPATH: the environment imports the installed wheel, never this checkout."""
    return {k: v for k, v in _clean_env().items() if k != "PYTHONPATH"} | (extra or {})


def _dream(bin_dir: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / "dream"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env(env),
        stdin=subprocess.DEVNULL,
        timeout=600,
    )


def _python(bin_dir: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / "python"), "-c", code], capture_output=True, text=True, cwd=cwd, env=clean_env(), timeout=300
    )


def test_the_base_install_leaves_the_extras_out_and_has_the_compiled_kernel(base: Path, tmp_path: Path) -> None:
    probe = _python(
        base,
        "import importlib.util, json; from dream_assets.text.bm25 import kernel_in_use; print(json.dumps("
        "{'kernel': kernel_in_use(), 'present': [m for m in ('dagster', 'sklearn', 'pandas', 'langgraph', "
        "'tiktoken', 'pyarrow', 'scipy', 'wordfreq', 'duckdb', 'mcp') if importlib.util.find_spec(m)]}))",
        tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {"kernel": "compiled", "present": ["duckdb", "mcp"]}


def test_init_save_and_search_from_the_shell(base: Path, tmp_path: Path) -> None:
    profile = str(tmp_path / "agents" / "alice")
    assert _dream(base, "init", "--profile", profile, cwd=tmp_path).returncode == 0
    saved = _dream(base, "memory", "save", "--profile", profile, "The staging database moved to db2.", cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr
    found = _dream(base, "memory", "search", "--profile", profile, "--json", "staging database", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert "The staging database moved to db2." in found.stdout


def test_dream_serve_answers_the_mcp_client_over_stdio(base: Path, tmp_path: Path) -> None:
    profile = tmp_path / "agents" / "alice"
    assert _dream(base, "init", "--profile", str(profile), cwd=tmp_path).returncode == 0
    params = StdioServerParameters(
        command=str(base / "dream"), args=["serve", "--profile", str(profile)], env=clean_env(), cwd=str(tmp_path)
    )

    async def main() -> tuple[dict, dict]:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                saved = await session.call_tool("memory_save", {"content": "Releases leave on Thursdays."})
                hits = await session.call_tool("memory_search", {"query": "releases thursdays"})
                assert not saved.is_error and not hits.is_error, (saved.content, hits.content)
                return saved.structured_content or {}, hits.structured_content or {}

    saved, hits = anyio.run(main)
    assert saved["outcome"] == "created"
    assert [h["id"] for h in hits["hits"]] == [saved["id"]]
    # what the agent saved is in the store the shell reads
    got = _dream(base, "memory", "get", "--profile", str(profile), saved["id"], cwd=tmp_path)
    assert got.returncode == 0 and "Releases leave on Thursdays." in got.stdout, got.stderr


def test_dream_run_runs_the_cycle_in_process_without_dagster(base: Path, tmp_path: Path) -> None:
    profile = str(tmp_path / "agents" / "alice")
    assert _dream(base, "init", "--profile", profile, cwd=tmp_path).returncode == 0
    for text in ("The staging database moved to db2.", "Deploys need a green build."):
        assert _dream(base, "memory", "save", "--profile", profile, text, cwd=tmp_path).returncode == 0
    run = _dream(base, "run", "--profile", profile, "--force", "importance_decay", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Dagster is not installed: the cycle runs in this process" in run.stdout
    assert "pip install 'dream-assets[dagster]'" in run.stdout
    assert "memory_consolidation   completed" in run.stdout, run.stdout
    assert run.stdout.rstrip().endswith("cycle succeeded")


def test_a_feature_whose_extra_is_missing_names_the_extra(base: Path, tmp_path: Path) -> None:
    profile = str(tmp_path / "agents" / "alice")
    assert _dream(base, "init", "--profile", profile, cwd=tmp_path).returncode == 0
    home = tmp_path / "dagster_home"
    home.mkdir()
    removed = _dream(base, "remove", "--profile", profile, cwd=tmp_path, env={"DAGSTER_HOME": str(home)})
    assert removed.returncode == 2, removed.stdout + removed.stderr
    assert removed.stderr.strip().splitlines() == [
        "dream remove: removing an agent from a Dagster instance needs the optional package dagster, which this "
        "install lacks: pip install 'dream-assets[dagster]'"
    ]
    assert Path(profile).is_dir(), "a refused remove leaves the agent's data where it was"
    for code, extra in (
        ("from dream_assets.text.similarity import tfidf_matrix; tfidf_matrix(['a b', 'a c'])", "tfidf"),
        ("import dream_assets.langgraph_store", "langgraph"),
    ):
        failed = _python(base, code, tmp_path)
        assert failed.returncode == 1
        assert "MissingExtra: " in failed.stderr and f"pip install 'dream-assets[{extra}]'" in failed.stderr


def test_without_a_compiler_the_wheel_builds_and_recall_says_it_uses_numpy(base: Path, tmp_path: Path) -> None:
    wheel, log = build_wheel(tmp_path / "build", compiler=False)
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")]
    assert 'building extension "dream_assets.text._bm25kernel" failed' in log, log[-2000:]
    # that wheel over the base environment's dependencies
    target = tmp_path / "site"
    subprocess.run(
        [str(base / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    profile = str(tmp_path / "agents" / "alice")
    env = {"PYTHONPATH": str(target)}
    cli = [str(base / "python"), "-m", "dream_assets.cli"]
    for args in (["init", "--profile", profile], ["memory", "save", "--profile", profile, "Backups run at 02:00."]):
        done = subprocess.run([*cli, *args], capture_output=True, text=True, env=clean_env(env), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    status = subprocess.run(
        [*cli, "status", "--profile", profile], capture_output=True, text=True, env=clean_env(env), cwd=tmp_path
    )
    assert status.returncode == 0, status.stderr
    assert "numpy BM25 index: the compiled kernel is not built" in status.stdout


def test_the_readme_states_the_size_of_the_base_install(base: Path) -> None:
    """benchmarks/install.py measured the figure; it stays true within 15% (dependencies move between releases)."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    sizes = re.search(r"the base install ([\d,]+) MB, with `\[all\]` ([\d,]+) MB", readme)
    assert sizes, "README.md states the sizes of the base install and of [all]"
    stated = float(sizes.group(1).replace(",", ""))
    assert abs(size_mb(base.parent) - stated) <= 0.15 * stated, (size_mb(base.parent), stated)
