"""How much disk a new user's environment takes: the wheel built from this checkout installed into a fresh virtual
environment with its base dependencies only (the library, `dream memory`, `dream serve`, the in-process cycle) and
with every extra (`[all]`: the Dagster project with its UI, TF-IDF, LangGraph, token counts).

    python benchmarks/install.py            # install.base_mb, install.full_mb, install.base_share
    python benchmarks/install.py --quick    # the base environment only

Sizes are the bytes of every file in the environment (pip and setuptools included, as `python -m venv` makes them),
in MB (10^6 bytes). Dependencies come from the package registry; pip's cache makes a second run fast."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dream_assets_tests.wheel_env import build_wheel, fresh_env, size_mb  # noqa: E402


def emit(name: str, value: float, unit: str, n: int = 1) -> None:
    print(json.dumps({"name": f"install.{name}", "n": n, "value": round(value, 1), "unit": unit}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="measure the base environment only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dream-install-") as tmp:
        work = Path(tmp)
        wheel, _ = build_wheel(work)
        base = size_mb(fresh_env(work / "base", wheel).parent)
        emit("base_mb", base, "MB")
        if args.quick:
            return 0
        full = size_mb(fresh_env(work / "full", wheel, "all").parent)
        emit("full_mb", full, "MB")
        emit("base_share", base / full, "ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
