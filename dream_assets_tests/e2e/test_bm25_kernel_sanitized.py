"""The compiled BM25 kernel built with AddressSanitizer and UndefinedBehaviorSanitizer, running the differential tests
against the numpy index: an out-of-bounds read, a use after free or an overflow in the C code fails the run instead
of corrupting scores now and then. The same build, run and verdict first catch a deliberately broken C file, so a
sanitizer that reports nothing is a clean kernel, not a check that cannot fail. Without a C compiler and its
sanitizer runtimes the test fails (the kernel ships as C: a machine that tests it has gcc)."""

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


#: Reads one int past a heap block and overflows a signed int: AddressSanitizer and UndefinedBehaviorSanitizer each
#: have something to report (an 8-byte block, so the read lands in the redzone whatever the allocator rounds to).
_BROKEN_C = r"""
#include <limits.h>
#include <stdlib.h>
__attribute__((noinline)) static int at(const int *p, int i) { return p[i]; }
int read_past_the_end(int n) {
    int *block = malloc(2 * sizeof(int));
    block[0] = block[1] = n;
    volatile int past = at(block, n + 1);
    free(block);
    return past;
}
int overflow(int n) { volatile int big = INT_MAX; return big + n; }
"""
_CALL_BROKEN = """
import ctypes, sys
ctypes.CDLL(None)["__asan_init"]
getattr(ctypes.CDLL(sys.argv[1]), sys.argv[2])(1)
"""
_SANITIZE = [
    "-shared",
    "-fPIC",
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
]


def _toolchain() -> tuple[str, str]:
    """The C compiler and its AddressSanitizer runtime (for LD_PRELOAD: python itself is not built with it)."""
    if sys.platform != "linux":
        pytest.skip("the sanitizer runtimes are preloaded the Linux way (LD_PRELOAD)")
    cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if cc is None:
        pytest.fail(
            "no C compiler: this test builds dream_assets/text/_bm25kernel.c with -fsanitize=address,undefined; "
            "install gcc (e.g. `apt-get install gcc`) or point CC at one",
            pytrace=False,
        )
    runtime = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not runtime or not Path(runtime).is_file():
        pytest.fail(f"{cc} has no AddressSanitizer runtime (libasan.so); install gcc's libasan", pytrace=False)
    return cc, runtime


def _compile(cc: str, source: Path, built: Path, *flags: str) -> None:
    compiled = subprocess.run(
        [cc, *_SANITIZE, *flags, f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(built)],
        capture_output=True,
        text=True,
    )
    assert compiled.returncode == 0, f"{source} did not compile with sanitizers:\n{compiled.stderr}"


def _sanitized_run(runtime: str, args: list[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LD_PRELOAD": runtime,
        # CPython keeps objects alive at exit by design: leaks are not what this run looks for.
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:halt_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout_s, cwd=cwd)


def _reported(done: subprocess.CompletedProcess[str]) -> str | None:
    """What the sanitizers said, when they said anything: the verdict of every sanitized run here."""
    found = [at for at in (done.stderr.find("ERROR: AddressSanitizer"), done.stderr.find("runtime error:")) if at >= 0]
    return done.stderr[min(found) : min(found) + 6000] if found else None


@pytest.mark.parametrize(
    ("function", "said"),
    [
        ("read_past_the_end", "AddressSanitizer: heap-buffer-overflow"),
        ("overflow", "runtime error: signed integer overflow"),
    ],
)
def test_the_sanitized_run_catches_a_broken_c_file(tmp_path, function, said) -> None:
    cc, runtime = _toolchain()
    source = tmp_path / "broken.c"
    source.write_text(_BROKEN_C, encoding="utf-8")
    built = tmp_path / "broken.so"
    _compile(cc, source, built)
    done = _sanitized_run(runtime, ["-c", _CALL_BROKEN, str(built), function], tmp_path, timeout_s=120)
    report = _reported(done)
    assert done.returncode != 0 and report is not None, (done.returncode, done.stderr[-3000:])
    assert said in report, report


@pytest.mark.slow
def test_the_kernel_under_address_and_undefined_behaviour_sanitizers_agrees_with_numpy(tmp_path) -> None:
    cc, runtime = _toolchain()
    built = tmp_path / ("_bm25kernel" + sysconfig.get_config_var("EXT_SUFFIX"))
    _compile(cc, SOURCE, built, "-ffp-contract=off", "-fno-fast-math")
    tests = [str(Path(__file__).parent.parent / "unit" / name) for name in DIFFERENTIAL]
    report = tmp_path / "report.xml"
    done = _sanitized_run(
        runtime,
        ["-c", _BOOT, str(built), "-q", "-x", "-s", "-p", "no:xdist", "-p", "no:cacheprovider"]
        + [f"--junitxml={report}", *tests],
        tmp_path,
        timeout_s=1800,
    )
    said = _reported(done)
    output = done.stdout[-4000:] + (said if said is not None else done.stderr[-6000:])
    assert done.returncode == 0, output
    assert said is None, output
    suite = ElementTree.parse(report).getroot().find("testsuite")
    assert suite is not None and int(suite.get("tests", 0)) >= 20, output  # the differential tests did run
    assert suite.get("failures") == "0" and suite.get("errors") == "0", output
