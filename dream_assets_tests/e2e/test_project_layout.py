"""The project is a `dg` project whose definitions load, and its modules are layered: the library knows nothing of
Dagster; the Dagster building blocks know nothing of the definitions; the definitions know nothing of what launches
them. Nothing reads the environment when the definitions module is imported."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


#: Layers inside the library (layer 0 above), lowest first. A module may import its own layer and the ones below, never
#: one above, whether at module level, inside a function, under TYPE_CHECKING, relatively or through importlib. The
#: store sits below the model layer: it keeps rows, SQL and cached vectors, makes no network call and imports nothing
#: of the model layer, which may read the store's vectors cache (llm/embedding_index.py). ``input_fingerprints`` (the
#: data versions of the stores and logs the passes read) sits between the store and the passes, which stamp those
#: versions. Everything not named here is the rest of the library (gates, cycle, cycle_report, log_analyses,
#: memory_audit, demo, the memory service, ...), above the passes: a module the passes use (their outcome record, say)
#: lives inside ``passes/`` or below, never beside the rest as a named exception; what the passes need of the service
#: (its save) is handed to them in their ``PassContext``.
LIBRARY_LAYERS = {
    "dream_assets": 0,  # the package itself (empty)
    "dream_assets.model": 0,
    "dream_assets.names": 0,
    "dream_assets.profile": 0,
    "dream_assets.options": 0,
    "dream_assets.file_safety": 0,
    "dream_assets.liveness": 0,  # a heartbeat thread and whether a process lives: runs, cycles and busy leases
    "dream_assets.scope": 0,  # the walls between namespaces: a rule over entries, read by the store and the passes
    "dream_assets.changes_model": 0,  # the typed change row, written by the store and built by everyone who changes
    "dream_assets.cycle_ids": 0,  # the one cycle-id scheme: the store, the passes, the agent's calls, the CLI
    "dream_assets.directives": 0,  # package data
    "dream_assets.extras": 0,  # which optional packages the install has: asked by any layer that needs one
    "dream_assets.text": 1,
    "dream_assets.store": 2,
    "dream_assets.llm": 3,
    "dream_assets.input_fingerprints": 4,
    "dream_assets.save_pipeline": 4,  # the save-time rules over the store: the agent's saves and the passes' alike
    "dream_assets.recall_index": 4,  # the recall index over the store's rows: searches and the save pipeline's reads
    "dream_assets.passes": 5,
}
LIBRARY_LAYER_NAMES = ["base", "text", "store", "llm", "inputs and the save pipeline", "passes", "rest of the library"]


def test_the_library_layers_are_the_documented_ones() -> None:
    """The table above is the house layering and nothing more: every top-level module it names is a base module or
    the inputs layer, and every package it names is a whole layer. A module of the rest of the library cannot be
    declared part of a lower layer to let a lower module import it; it moves down instead."""
    above_base = {name: layer for name, layer in LIBRARY_LAYERS.items() if layer > 0}
    assert above_base == {
        "dream_assets.text": 1,
        "dream_assets.store": 2,
        "dream_assets.llm": 3,
        "dream_assets.input_fingerprints": 4,
        "dream_assets.save_pipeline": 4,
        "dream_assets.recall_index": 4,
        "dream_assets.passes": 5,
    }
    for name in LIBRARY_LAYERS:
        assert name.count(".") <= 1, f"{name}: a layer is a package or a top-level module, not a part of one"


def _library_layer(name: str) -> int:
    """The library layer of a module (or of a name inside one): its longest prefix in LIBRARY_LAYERS, else the rest."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LIBRARY_LAYERS and (n > 1 or name == "dream_assets"):
            return LIBRARY_LAYERS[prefix]
    return len(LIBRARY_LAYER_NAMES) - 1


def _package_imports(path: Path, module: str) -> list[tuple[str, int]]:
    """Every import of a ``dream_assets`` module in the file, anywhere in it: absolute and relative import statements
    (module level, in functions, under TYPE_CHECKING) and ``importlib.import_module`` / ``__import__`` of a literal."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.args[0].value, node.lineno))
    return [(name, line) for name, line in found if name == "dream_assets" or name.startswith("dream_assets.")]


def _library_layer_problems(modules: dict[str, Path], root: Path) -> list[str]:
    problems = []
    for module, path in sorted(modules.items()):
        if _layer(module) != 0:
            continue  # orchestration and above: the outer layers, checked above
        layer = _library_layer(module)
        for name, line in _package_imports(path, module):
            if _layer(name) != 0:
                continue  # the library importing an outer layer is the test above's finding
            target = _library_layer(name)
            if target > layer:
                problems.append(
                    f"{path.relative_to(root)}:{line}: {LIBRARY_LAYER_NAMES[layer]} module {module} imports {name} "
                    f"({LIBRARY_LAYER_NAMES[target]})"
                )
    return problems


def test_no_library_module_imports_one_of_a_higher_library_layer() -> None:
    """base < text < llm < store < inputs < passes < the rest of the library: the model layer is handed each pass's
    model call and never reaches up for the pass registry."""
    problems = _library_layer_problems(_modules(), ROOT)
    assert not problems, "\n".join(problems)


def test_the_library_layer_check_finds_every_kind_of_upward_import(tmp_path: Path) -> None:
    """A function-level, a TYPE_CHECKING, a relative and an importlib import of a higher layer are each reported; an
    import of the same or a lower layer is not."""
    files = {
        "dream_assets/llm/contracts.py": [
            "def model_calls():",
            "    from dream_assets.passes.registry import MODEL_CALLS",
            "    return MODEL_CALLS",
        ],
        "dream_assets/llm/client.py": [
            "from dream_assets.llm.contracts import Contract",
            "from dream_assets.text import bm25",
        ],
        "dream_assets/text/bm25.py": [
            "from typing import TYPE_CHECKING",
            "if TYPE_CHECKING:",
            "    from dream_assets.store import x",
        ],
        "dream_assets/store/memory.py": [
            "from ..passes import spec",
            "from . import schema",
            "from ..llm.base import M",
        ],
        "dream_assets/passes/spec.py": [
            "import importlib",
            "importlib.import_module('dream_assets.gates')",
            "from dream_assets.pass_status import record_outcome",
            "from dream_assets.passes.outcome import load_outcome",
        ],
        "dream_assets/gates.py": [
            "from dream_assets.passes.registry import PASSES",
            "from dream_assets.cycle import run",
        ],
    }
    modules = {}
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(text) + "\n", encoding="utf-8")
        modules[".".join(Path(rel).with_suffix("").parts)] = path
    problems = _library_layer_problems(modules, tmp_path)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "llm module dream_assets.llm.contracts imports dream_assets.passes.registry.MODEL_CALLS (passes)",
        "passes module dream_assets.passes.spec imports dream_assets.pass_status.record_outcome (rest of the library)",
        "passes module dream_assets.passes.spec imports dream_assets.gates (rest of the library)",
        "store module dream_assets.store.memory imports dream_assets.passes.spec (passes)",
        "store module dream_assets.store.memory imports dream_assets.llm.base.M (llm)",
        "text module dream_assets.text.bm25 imports dream_assets.store.x (store)",
    ], problems
    assert problems[0].startswith("dream_assets/llm/contracts.py:2: ")


def test_the_store_imports_nothing_of_the_model_layer() -> None:
    """The store keeps rows, SQL and cached vectors: no module under store/ imports from llm/, at module level or
    inside a function, so the store makes no model or embeddings call (the save pipeline, save_pipeline.py, asks for
    vectors before it opens the store)."""
    modules = _modules()
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {module} imports {name}"
        for module, path in sorted(modules.items())
        if module == "dream_assets.store" or module.startswith("dream_assets.store.")
        for name, line in _package_imports(path, module)
        if name == "dream_assets.llm" or name.startswith("dream_assets.llm.")
    ]
    assert not problems, "\n".join(problems)


def test_the_store_imports_nothing_of_the_recall_index() -> None:
    """The store keeps rows and SQL; the recall index (recall_index.py) follows the rows through the connection's row
    observers: no module under store/ imports it, at module level or inside a function, and none builds or holds a
    BM25 index itself."""
    modules = _modules()
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {module} imports {name}"
        for module, path in sorted(modules.items())
        if module == "dream_assets.store" or module.startswith("dream_assets.store.")
        for name, line in _package_imports(path, module)
        if name == "dream_assets.recall_index"
        or name.startswith("dream_assets.recall_index.")
        or name.startswith("dream_assets.text.bm25")
    ]
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


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_wheel_lists_every_package_and_maps_the_top_level_directives_onto_the_package() -> None:
    """Every package folder of dream_assets/ is in the wheel's package list (a list, because the mapped directives
    package cannot be found by scanning), and dream_assets.directives is the top-level directives/ folder, which
    holds the built-in file of every model call."""
    from dream_assets.passes.registry import MODEL_CALLS

    setuptools = _pyproject()["tool"]["setuptools"]
    folders = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts
    }
    assert set(setuptools["packages"]) == folders | {"dream_assets.directives"}
    assert setuptools["package-dir"] == {"dream_assets.directives": "directives"}
    assert setuptools["package-data"]["dream_assets.directives"] == ["*.md"]
    assert not (PACKAGE / "directives").exists(), "the built-in directives live in the top-level directives/ folder"
    shipped = {p.name for p in (ROOT / "directives").glob("*.md")}
    assert {call.directive_file for call in MODEL_CALLS.values()} <= shipped


@pytest.mark.slow  # builds a wheel (pip, a few seconds)
def test_an_installed_wheel_finds_the_built_in_directives(tmp_path: Path) -> None:
    """A wheel built from the project holds the directive files as package data, and the package installed from it
    (unpacked onto the path, as an install lays it out) loads every model call's built-in directive from there."""
    import shutil
    import zipfile

    from dream_assets.passes.registry import MODEL_CALLS

    source = tmp_path / "source"
    source.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("dream_assets", "directives"):
        shutil.copytree(ROOT / name, source / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(dist)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = dist.glob("dream_assets-*.whl")
    files = {call.directive_file for call in MODEL_CALLS.values()}
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert {f"dream_assets/directives/{name}" for name in files} <= names, sorted(names)
        assert not any(name.startswith("directives/") for name in names)
        site = tmp_path / "site"
        archive.extractall(site)
    code = textwrap.dedent(
        """
        import json, sys
        import dream_assets
        from dream_assets.llm.directives import load_directive
        from dream_assets.options_loader import dream_options
        from dream_assets.passes.registry import MODEL_CALLS
        loaded = {
            call.directive_file: load_directive(call, None, dream_options()) for call in MODEL_CALLS.values()
        }
        print(json.dumps({"package": dream_assets.__file__, "loaded": loaded}))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    ran = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert Path(result["package"]).is_relative_to(site), result["package"]
    for name, (text, where) in result["loaded"].items():
        assert where == "built-in" and text == (ROOT / "directives" / name).read_text(encoding="utf-8"), name


#: The interfaces agents and people reach the memory through: thin shells over the memory service.
INTERFACES = ("dream_assets.cli", "dream_assets.mcp_server", "dream_assets.langgraph_store", "dream_assets.folders")
#: What only the memory service (and the passes, through the cycle runner) may import.
SERVICE_ONLY = ("dream_assets.store", "dream_assets.passes.review")


def _writes_rows(func: ast.expr) -> bool:
    """A call that writes change rows: ``<...>.changes.record(...)``, ``<...>.changes.record_many(...)`` or
    ``insert_change(...)``."""
    if isinstance(func, ast.Name):
        return func.id == "insert_change"
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr == "insert_change":
        return True
    owner = func.value
    named = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else ""
    return func.attr in ("record", "record_many") and named == "changes"


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _is_interface(module: str) -> bool:
    return any(module == i or module.startswith(f"{i}.") for i in INTERFACES)


def _interface_problems(modules: dict[str, Path]) -> list[str]:
    """Every import of the store (or of the review rules) in an interface module, anywhere in a file, and every call
    there that writes change rows."""
    problems = [
        f"{_shown(path)}:{line}: {module} imports {name}"
        for module, path in sorted(modules.items())
        if _is_interface(module)
        for name, line in _package_imports(path, module)
        if any(name == s or name.startswith(f"{s}.") for s in SERVICE_ONLY)
    ]
    for module, path in sorted(modules.items()):
        if not _is_interface(module):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _writes_rows(node.func):
                problems.append(f"{_shown(path)}:{node.lineno}: {module} writes change rows ({ast.unparse(node.func)})")
    return problems


def test_every_interface_reaches_the_store_only_through_the_memory_service() -> None:
    """The CLI, the MCP server, the LangGraph store and the folder sync are thin shells over the memory service
    (``dream_assets.service``): none imports the store or the review rules, anywhere in a file, and none writes a
    change row itself."""
    problems = _interface_problems(_modules())
    assert not problems, "\n".join(problems)


def test_the_interface_check_finds_a_store_import_and_a_row_write(tmp_path: Path) -> None:
    """The check above is not vacuous: a shell that imports the store inside a function and records a row is named."""
    bad = tmp_path / "cli.py"
    bad.write_text(
        "def cmd(store, row):\n    from dream_assets.store import open_store\n    store.changes.record(row)\n",
        encoding="utf-8",
    )
    problems = _interface_problems({"dream_assets.cli": bad})
    assert (
        len(problems) == 2 and "imports dream_assets.store" in problems[0] and "(store.changes.record)" in problems[1]
    ), problems


def test_the_store_makes_no_network_call() -> None:
    """No module under store/ imports a network client: the store reads and writes files, the model layer calls."""
    network = ("openai", "httpx", "requests", "urllib.request", "http.client", "aiohttp", "mcp")
    problems = []
    for module, path in sorted(_modules().items()):
        if not (module == "dream_assets.store" or module.startswith("dream_assets.store.")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            problems += [
                f"{path.relative_to(ROOT)}:{node.lineno}: imports {n}"
                for n in names
                if any(n == x or n.startswith(f"{x}.") for x in network)
            ]
    assert not problems, "\n".join(problems)


# --- passes: one module each, the model layer names none, no circles ---------------------------------------------
def _resolve(name: str, modules: Iterable[str]) -> str | None:
    """The package module an imported name lives in: its longest prefix that is a module (None: not the package's)."""
    known = set(modules)
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Every package module -> the package modules it imports anywhere in its file (module level, in a function,
    under TYPE_CHECKING, relatively, through importlib)."""
    graph = {}
    for module, path in modules.items():
        targets = {_resolve(name, modules) for name, _ in _package_imports(path, module)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted; sorted by first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(circles)


def test_no_import_circle_counting_imports_inside_functions() -> None:
    """Importing a module at module level or inside a function (or naming it under TYPE_CHECKING) never comes back
    to it: the passes, the registry, review mode and the model layer are layered without a circle."""
    circles = _import_circles(_import_graph(_modules()))
    assert not circles, "\n".join(" <-> ".join(c) for c in circles)


def test_the_circle_check_finds_a_circle_through_a_function_level_import(tmp_path: Path) -> None:
    """The check above is not vacuous: a circle closed by an import inside a function, or under TYPE_CHECKING, is
    found; a chain without a way back is not."""
    files = {
        "dream_assets/passes/spec.py": ["def run():", "    from dream_assets.passes.review import run_in_review"],
        "dream_assets/passes/review.py": [
            "from typing import TYPE_CHECKING",
            "if TYPE_CHECKING:",
            "    from . import spec",
        ],
        "dream_assets/passes/registry.py": ["from dream_assets.passes import spec"],
    }
    modules = {}
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(text) + "\n", encoding="utf-8")
        modules[".".join(Path(rel).with_suffix("").parts)] = path
    assert _import_circles(_import_graph(modules)) == [["dream_assets.passes.review", "dream_assets.passes.spec"]]


def _pass_homes() -> dict[str, str]:
    """Each registered pass -> the module that holds it (its body's module; a package is the pass's whole folder)."""
    from dream_assets.passes.registry import PASSES

    return {spec.name: spec.body.__module__ for spec in PASSES}


def _home_of(module: str, homes: Iterable[str]) -> str | None:
    return next((h for h in homes if module == h or module.startswith(h + ".")), None)


def _cross_pass_imports(modules: dict[str, Path], homes: Iterable[str]) -> list[str]:
    """Every import, anywhere in a pass's module (or package), of another pass's module."""
    problems = []
    homes = sorted(set(homes))
    for module, path in sorted(modules.items()):
        own = _home_of(module, homes)
        if own is None:
            continue
        for name, line in _package_imports(path, module):
            target = _resolve(name, modules)
            other = _home_of(target, homes) if target else None
            if other is not None and other != own:
                problems.append(f"{_shown(path)}:{line}: pass module {module} imports {name} (pass {other})")
    return problems


def test_no_pass_imports_another_pass() -> None:
    """What several passes share lives in a shared module (memory_vocabulary, skill_vocabulary, common, ...), never
    in one of them: a pass changes without touching another."""
    homes = _pass_homes().values()
    assert len(set(homes)) == len(list(homes)), "two passes share a module"
    problems = _cross_pass_imports(_modules(), homes)
    assert not problems, "\n".join(problems)


def test_the_cross_pass_check_finds_an_import_inside_a_function(tmp_path: Path) -> None:
    files = {
        "dream_assets/passes/alpha/__init__.py": ["from dream_assets.passes.alpha import helper"],
        "dream_assets/passes/alpha/helper.py": ["def f():", "    from dream_assets.passes.beta import thing"],
        "dream_assets/passes/beta.py": ["from dream_assets.passes.shared import x"],
        "dream_assets/passes/shared.py": ["x = 1"],
    }
    modules = {}
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(text) + "\n", encoding="utf-8")
        parts = list(Path(rel).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    problems = _cross_pass_imports(modules, ["dream_assets.passes.alpha", "dream_assets.passes.beta"])
    assert problems == [
        "helper.py:2: pass module dream_assets.passes.alpha.helper imports dream_assets.passes.beta.thing "
        "(pass dream_assets.passes.beta)"
    ], problems


def _pass_vocabulary() -> set[str]:
    """Every word that names a pass: the registered pass names, the model call names, the pass modules' names and
    the names of the response contracts the passes define."""
    from dream_assets.llm.contracts import Contract
    from dream_assets.passes.registry import MODEL_CALLS, PASSES

    words = {spec.name for spec in PASSES} | set(MODEL_CALLS)
    words |= {spec.body.__module__.rpartition(".")[2] for spec in PASSES}
    pending = list(Contract.__subclasses__())
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        if cls.__module__.startswith("dream_assets.passes."):
            words.add(cls.__name__)
    return words


def test_the_model_layer_names_no_pass() -> None:
    """llm/ offers the client, the backends, extraction, structured output, budgets and the contract base: no module
    of it names a pass, a model call or a pass's contract, in code or in prose. A pass changes without the model
    layer changing."""
    words = _pass_vocabulary()
    assert {"memory_consolidation", "merge_repair", "MemoryConsolidationResponse", "SkillSave"} <= words
    problems = []
    for path in sorted((PACKAGE / "llm").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for word in sorted(words):
            for n, line in enumerate(text.splitlines(), 1):
                if re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", line):
                    problems.append(f"{path.relative_to(ROOT)}:{n}: names {word!r}")
    assert not problems, "\n".join(problems)


def test_the_review_order_is_the_registry_order() -> None:
    """Review mode applies a cycle's held changes in the cycle's pass order without importing the registry (which
    imports every pass): its table of names is the registry's order."""
    from dream_assets.passes.cycle_order import CYCLE_ORDER
    from dream_assets.passes.registry import PASSES

    assert CYCLE_ORDER == tuple(spec.name for spec in PASSES)


def test_a_pass_has_one_name_for_its_module_asset_and_options_section() -> None:
    """``skill_gap_detection`` lives in ``passes/skill_gap_detection.py``, is the asset ``skill_gap_detection`` and is
    configured under ``passes.skill_gap_detection``: whoever knows one of the names finds the others."""
    from dream_assets.passes.registry import PASSES

    problems = []
    for spec in PASSES:
        module = spec.body.__module__.removeprefix("dream_assets.passes.").partition(".")[0]
        if module != spec.name:
            problems.append(f"pass {spec.name} lives in module {spec.body.__module__}")
        if spec.options is None or spec.options.PASS != spec.name:
            problems.append(f"pass {spec.name} has no options section passes.{spec.name}")
    assert not problems, "\n".join(problems)


def test_each_pass_owns_its_options_section_and_the_options_module_names_no_pass() -> None:
    """A pass's options (its switch, model, directive file, minimum interval and own options, with their defaults,
    ranges and flat aliases) are declared in the pass's own module: options.py holds the global sections and the
    machinery every section shares, and names no pass, no pass option and no alias of one."""
    from dream_assets.passes.registry import PASSES

    homes = _pass_homes()
    words = _pass_vocabulary()
    problems = []
    for spec in PASSES:
        assert spec.options is not None
        declared_in = spec.options.__module__
        if _home_of(declared_in, [homes[spec.name]]) is None:
            problems.append(f"pass {spec.name}: its options section is declared in {declared_in}")
        words |= {spec.options.__name__, *spec.options.by_alias()}
    text = (PACKAGE / "options.py").read_text(encoding="utf-8")
    for word in sorted(words):
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", line):
                problems.append(f"dream_assets/options.py:{n}: names {word!r}")
    assert not problems, "\n".join(problems)


def test_the_runner_and_the_options_import_no_pass() -> None:
    """The runner applies one protocol to whatever spec it is handed, and the options type a pass's section by the
    declaration they are given: neither imports a pass module (nor the registry, which imports them all)."""
    modules = _modules()
    homes = sorted(set(_pass_homes().values()))
    problems = []
    for module in ("dream_assets.passes.runner", "dream_assets.options", "dream_assets.passes.spec"):
        for name, line in _package_imports(modules[module], module):
            target = _resolve(name, modules) or name
            if _home_of(target, homes) is not None or target == "dream_assets.passes.registry":
                problems.append(f"{module}:{line} imports {name}")
    assert not problems, "\n".join(problems)


_ATTRIBUTE_CALLS = {"getattr", "setattr", "hasattr", "delattr"}


def _built_attribute_names(source: str) -> list[int]:
    """Lines where getattr/setattr/hasattr/delattr (or operator.attrgetter) is given a name built in place: an
    f-string, a concatenation, a %-format or a ``.format``/``.join`` call."""

    def built(node: ast.expr) -> bool:
        if isinstance(node, ast.JoinedStr | ast.BinOp):
            return True
        return (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "join")
        )

    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name in _ATTRIBUTE_CALLS and len(node.args) >= 2 and built(node.args[1]):
            lines.append(node.lineno)
        elif name == "attrgetter" and any(built(arg) for arg in node.args):
            lines.append(node.lineno)
    return lines


def test_no_attribute_name_is_built_from_a_string() -> None:
    """An option (or any attribute) reached by a name built from a pass name silently never applies when the two
    spellings drift apart: the package reads options by their typed place (``options.passes[name].apply_mode``)."""
    problems = [
        f"{_shown(path)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in _built_attribute_names(path.read_text(encoding="utf-8"))
    ]
    assert not problems, "attribute names built from strings: " + ", ".join(problems)


def test_the_built_attribute_name_check_finds_every_form() -> None:
    source = textwrap.dedent(
        """
        getattr(options, camel + "ApplyMode")
        hasattr(DreamOptions, f"{camel}Model")
        setattr(obj, "_".join(parts), 1)
        getattr(obj, "{}Enabled".format(camel), None)
        operator.attrgetter(prefix + "Model")
        getattr(options, "LlmModel")
        getattr(options, spec.enabled_by)
        """
    )
    assert _built_attribute_names(source) == [2, 3, 4, 5, 6]


def test_the_unit_tier_imports_no_dagster_and_every_test_file_is_in_a_tier():
    """unit/ is pure (its conftest fails a DuckDB file, a process or a socket at run time; Dagster is checked here), and
    no test file sits outside the three tiers, where `make test-unit` / `make test-fast` would not find it."""
    tests = ROOT / "dream_assets_tests"
    for path in sorted((tests / "unit").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert not name.startswith(("dagster", "dream_assets.definitions", "dream_assets.defs")), (
                    f"{path.name} imports {name}: a unit test is pure, move it to integration/ or e2e/"
                )
                assert not name.startswith(("dream_assets.orchestration", "dream_assets.launch")), (
                    f"{path.name} imports {name}: a unit test is pure, move it to integration/ or e2e/"
                )
    outside = sorted(p.name for p in tests.glob("test_*.py"))
    assert not outside, f"test files outside unit/, integration/ and e2e/: {outside}"
