"""The compiled BM25 kernel built with AddressSanitizer and UndefinedBehaviorSanitizer, running the differential tests
against the numpy index: an out-of-bounds read, a use after free or an overflow in the C code fails the run instead
of corrupting scores now and then."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from xml.etree import ElementTree

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "dream_assets" / "text" / "_bm25kernel.c"
DIFFERENTIAL = ["test_bm25_kernel.py", "test_bm25_kernel_pruning.py", "test_bm25_kernel_memory.py", "test_text_bm25.py"]

# Loads the sanitized build as dream_assets.text._bm25kernel before anything imports the index, then runs pytest.
_BOOT = """
import ctypes, importlib.util, sys
ctypes.CDLL(None)["__asan_init"]  # the sanitizer runtime is loaded (LD_PRELOAD), or this raises
spec = importlib.util.spec_from_file_location("dream_assets.text._bm25kernel", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules["dream_assets.text._bm25kernel"] = module
from dream_assets.text import bm25
assert bm25._bm25kernel is module, "the sanitized kernel is not the one in use"
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")


@pytest.mark.slow
def test_the_kernel_under_address_and_undefined_behaviour_sanitizers_agrees_with_numpy(tmp_path) -> None:
    cc = _compiler()
    if cc is None or sys.platform != "linux":
        pytest.skip("needs a C compiler with sanitizers on Linux")
    runtime = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not runtime or not Path(runtime).is_file():
        pytest.skip(f"{cc} has no AddressSanitizer runtime")
    built = tmp_path / ("_bm25kernel" + sysconfig.get_config_var("EXT_SUFFIX"))
    compiled = subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            f"-I{sysconfig.get_paths()['include']}",
            str(SOURCE),
            "-o",
            str(built),
        ],
        capture_output=True,
        text=True,
    )
    assert compiled.returncode == 0, compiled.stderr
    env = {
        **os.environ,
        "LD_PRELOAD": runtime,
        # CPython keeps objects alive at exit by design: leaks are not what this run looks for.
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:halt_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    tests = [str(Path(__file__).parent.parent / "unit" / name) for name in DIFFERENTIAL]
    report = tmp_path / "report.xml"
    done = subprocess.run(
        [sys.executable, "-c", _BOOT, str(built), "-q", "-x", "-s", "-p", "no:xdist", "-p", "no:cacheprovider"]
        + [f"--junitxml={report}", *tests],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        cwd=tmp_path,
    )
    found = max(done.stderr.find("ERROR: AddressSanitizer"), done.stderr.find("runtime error:"))
    output = done.stdout[-4000:] + (done.stderr[found : found + 6000] if found >= 0 else done.stderr[-6000:])
    assert done.returncode == 0, output
    assert "ERROR: AddressSanitizer" not in done.stderr and "runtime error:" not in done.stderr, output
    suite = ElementTree.parse(report).getroot().find("testsuite")
    assert suite is not None and int(suite.get("tests", 0)) >= 20, output  # the differential tests did run
    assert suite.get("failures") == "0" and suite.get("errors") == "0", output
