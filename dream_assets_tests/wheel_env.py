"""The project as a user installs it: the wheel built from this checkout, installed into a fresh virtual environment
with pip (its dependencies come from the package registry; pip's own cache makes a second run fast).

Used by test_install.py and benchmarks/install.py (`install.base_mb`, `install.full_mb`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: What the wheel is built from (pyproject.toml and setup.py name nothing else).
SOURCES = ("pyproject.toml", "setup.py", "README.md", "directives", "dream_assets")
#: Generous: a first run downloads every dependency from the registry.
PIP_TIMEOUT_S = 1800


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = PIP_TIMEOUT_S) -> str:
    # Without PYTHONPATH: a checkout on it would count for pip as the project already installed, and the fresh
    # environment would be left without the wheel.
    env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONPATH"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout + proc.stderr


def build_wheel(out: Path, *, compiler: bool = True) -> tuple[Path, str]:
    """The project's wheel, built by pip from a copy of this checkout's sources in ``out`` (the build leaves its
    build/ and egg-info there, not in the checkout). ``compiler=False`` builds as on a machine without a C
    compiler. Returns the wheel and the build's output."""
    src = out / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", "build", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    env = dict(os.environ)
    if not compiler:
        env["CC"] = "/bin/false"  # distutils' compiler command: every compile fails, as with no compiler at all
    dist = out / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    log = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--verbose", "--wheel-dir", str(dist), str(src)],
        env=env,
    )
    (wheel,) = dist.glob("dream_assets-*.whl")
    return wheel, log


def fresh_env(venv: Path, wheel: Path, extras: str = "") -> Path:
    """A new virtual environment at ``venv`` with ``wheel`` installed (``extras``: "all", "dagster", ...; none: the
    base install). Returns its bin folder."""
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)])
    bin_dir = venv / "bin"
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    _run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", target])
    return bin_dir


def size_mb(folder: Path) -> float:
    """The bytes of every file under ``folder`` (symbolic links not followed), in MB (10^6 bytes)."""
    total = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total / 1e6
