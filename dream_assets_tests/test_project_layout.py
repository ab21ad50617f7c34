"""The project is a `dg` project whose definitions load, and its modules are layered: the library knows nothing of
Dagster; the Dagster building blocks know nothing of the definitions; the definitions know nothing of what launches
them. Nothing reads the environment when the definitions module is imported."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dream_assets"

#: Layer of each top-level part of the package; everything not named here is the library (layer 0).
LAYERS = {
    "dream_assets.orchestration": 1,
    "dream_assets.defs": 2,
    "dream_assets.definitions": 3,
    "dream_assets.launch": 4,
    "dream_assets.cli": 5,
}
LAYER_NAMES = ["library", "orchestration", "defs", "definitions", "launch", "cli"]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _layer(module: str) -> int:
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return 0


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every absolute import in the file (module level or inside a function), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return found


@pytest.mark.slow  # the dg CLI in a subprocess
def test_dg_check_defs_passes(tmp_path: Path) -> None:
    """`dg check defs`, run from the project root with this environment's `dg`, loads every definition."""
    dg = Path(sys.executable).parent / "dg"
    if not dg.exists():
        pytest.fail(f"{dg} is missing: `make setup` installs dagster-dg-cli (the test extra of pyproject.toml)")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DREAM")},
        "DAGSTER_HOME": str(home),
        "VIRTUAL_ENV": str(Path(sys.executable).parent.parent),
        "DREAM__ProfileRoot": str(tmp_path / "agents"),
    }
    result = subprocess.run([str(dg), "check", "defs"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All definitions loaded successfully" in result.stdout + result.stderr


def test_no_module_imports_one_above_its_layer() -> None:
    """library < orchestration < defs < definitions < launch < cli, and the library never imports Dagster."""
    modules = _modules()
    problems = []
    for module, path in sorted(modules.items()):
        layer = _layer(module)
        for name, line in _imports(path):
            if layer == 0 and (name == "dagster" or name.startswith(("dagster.", "dagster_"))):
                problems.append(f"{path.relative_to(ROOT)}:{line}: the library imports {name}")
            if not name.startswith("dream_assets"):
                continue
            target = _layer(name)
            if target > layer:
                problems.append(
                    f"{path.relative_to(ROOT)}:{line}: {LAYER_NAMES[layer]} module {module} imports {name} "
                    f"({LAYER_NAMES[target]})"
                )
    assert not problems, "\n".join(problems)


def _module_level_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules this file imports when it is imported (its top-level import statements)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def test_no_import_cycle_among_module_level_imports() -> None:
    """Importing any module never comes back to a module still being imported."""
    modules = _modules()
    graph = {m: _module_level_imports(p, modules) - {m} for m, p in modules.items()}
    done: set[str] = set()

    def visit(module: str, stack: list[str]) -> list[str] | None:
        if module in stack:
            return [*stack[stack.index(module) :], module]
        if module in done:
            return None
        for target in sorted(graph[module]):
            cycle = visit(target, [*stack, module])
            if cycle:
                return cycle
        done.add(module)
        return None

    for module in sorted(graph):
        cycle = visit(module, [])
        assert cycle is None, " -> ".join(cycle)


def test_defs_holds_only_definition_modules() -> None:
    """Every module of dream_assets/defs assembles its area with @dg.definitions."""
    import importlib

    from dagster.components.definitions import LazyDefinitions

    missing = []
    for path in sorted((PACKAGE / "defs").glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = importlib.import_module(f"dream_assets.defs.{path.stem}")
        if not isinstance(getattr(module, "defs", None), LazyDefinitions):
            missing.append(path.name)
    assert not missing, f"defs modules without a @dg.definitions `defs`: {missing}"


@pytest.mark.slow  # imports Dagster in a subprocess
def test_importing_the_definitions_reads_no_environment(tmp_path: Path) -> None:
    """A broken DREAM__ variable does not break the import; it is reported when the definitions are loaded."""
    code = (
        "import dream_assets.definitions as d\n"
        "print('imported')\n"
        "try:\n"
        "    d.defs()\n"
        "except Exception as exc:\n"
        "    print('load failed:', exc)\n"
    )
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DREAM")}, "DREAM__Interval": "not-a-duration"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "imported", result.stdout + result.stderr
    assert lines[1].startswith("load failed:") and "Interval" in lines[1], result.stdout + result.stderr
