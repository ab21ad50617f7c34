"""Linked memory folders at size: a generated folder of 2,000 notes in each format (Claude Code auto memory, OpenClaw
workspace, plain markdown), read into a fresh agent, dreamed over with the offline backend, written back, then
cycled again with nothing to do.

Prints one JSON object per line (``{"name", "n", "value", "unit"}``) per format:

- ``folders.<format>.import_cpu_s``, ``.cycle_cpu_s``, ``.write_back_cpu_s``: CPU time (``time.process_time``) of the
  first read, of the passes, and of the write-back;
- ``folders.<format>.files_rewritten_idle``: files whose bytes or modification time an idle cycle changed (target 0);
- ``folders.<format>.facts_lost``: names, numbers and dates (``text/coverage.specifics_of``) of the notes before the
  first cycle that are in no file of the folder after it, archive/ included (target 0);
- ``folders.<format>.files_written``: files the first write-back wrote (merges of the generated near-duplicates).

    nice -n 10 .venv/bin/python benchmarks/folders.py           # 2,000 notes per format
    nice -n 10 .venv/bin/python benchmarks/folders.py --quick   # 200 notes per format (CI)
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dream_assets.cycle import run_cycle  # noqa: E402
from dream_assets.folders import link_folder, read_folder, write_back  # noqa: E402
from dream_assets.options_loader import dream_options  # noqa: E402
from dream_assets.passes.registry import PASSES  # noqa: E402
from dream_assets.profile import AgentProfile  # noqa: E402
from dream_assets.text.coverage import specifics_of  # noqa: E402

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PEOPLE = ["Dana Whitfield", "Ravi Patel", "Mei Tanaka", "Olu Okafor", "Sara Lindqvist", "Tomás Ruiz"]
THINGS = ["ingest API", "billing job", "mobile app", "search index", "data warehouse", "release train"]
VERBS = ["owns", "reviews", "moved the deadline of", "reported a regression in", "approved the budget of"]


def emit(name: str, n: int, value: float, unit: str) -> None:
    print(json.dumps({"name": name, "n": n, "value": round(value, 3), "unit": unit}), flush=True)


def notes(n: int, rng: random.Random) -> list[str]:
    out: list[str] = []
    for i in range(n):
        if i % 40 == 39:  # a near-duplicate of an earlier note: something for the dream to merge
            out.append(out[i - 7].replace(" on ", " as of ").rstrip(".") + ", as noted again.")
            continue
        who, what, verb = rng.choice(PEOPLE), rng.choice(THINGS), rng.choice(VERBS)
        day = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        out.append(f"{who} {verb} the {what} on {day} (ticket {1000 + i}).")
    return out


def build(fmt: str, folder: Path, texts: list[str]) -> None:
    folder.mkdir(parents=True)
    if fmt == "claude-code":
        per = max(1, len(texts) // 150)
        index = ["# Memory Index", ""]
        for t, start in enumerate(range(0, len(texts), per)):
            kind = ("user", "feedback", "project", "reference")[t % 4]
            name = f"{kind}_topic_{t:03d}.md"
            body = "\n".join(f"- {x}" for x in texts[start : start + per])
            (folder / name).write_text(
                f"---\nname: Topic {t}\ndescription: notes of topic {t}\ntype: {kind}\n---\n# Topic {t}\n\n{body}\n"
            )
            index.append(f"- [Topic {t}]({name}) — notes of topic {t}")
        (folder / "MEMORY.md").write_text("\n".join(index) + "\n")
    elif fmt == "openclaw":
        head = texts[: len(texts) // 10]
        (folder / "MEMORY.md").write_text("# Long-term memory\n\n## Facts\n\n" + "".join(f"- {x}\n" for x in head))
        (folder / "memory").mkdir()
        rest = texts[len(head) :]
        for d, start in enumerate(range(0, len(rest), 30)):
            day = f"2026-{1 + d // 28:02d}-{1 + d % 28:02d}"
            lines = "".join(f"- {x}\n" for x in rest[start : start + 30])
            (folder / "memory" / f"{day}.md").write_text(f"# {day}\n\n{lines}")
    else:
        for f, start in enumerate(range(0, len(texts), 20)):
            sub = folder / f"area-{f % 5}"
            sub.mkdir(exist_ok=True)
            chunk = texts[start : start + 20]
            half = len(chunk) // 2
            text = f"# Notes {f}\n\n## Bullets\n\n" + "".join(f"- {x}\n" for x in chunk[:half])
            text += "\n## Paragraphs\n\n" + "".join(f"{x}\n\n" for x in chunk[half:])
            (sub / f"notes-{f:03d}.md").write_text(text)


def files(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*.md")}


def run_format(fmt: str, n: int, work: Path) -> None:
    rng = random.Random(f"folders-{fmt}")
    texts = notes(n, rng)
    folder = work / fmt
    build(fmt, folder, texts)
    profile = AgentProfile(work / "agents" / fmt).ensure()
    link_folder(profile, folder, fmt)
    options = dream_options()
    before = {s.text for p in folder.rglob("*.md") for s in specifics_of(p.read_text(encoding="utf-8"))}

    t = time.process_time()
    read = read_folder(profile, options, NOW)
    emit(f"folders.{fmt}.import_cpu_s", n, time.process_time() - t, "s")
    if read.status != "completed":
        raise SystemExit(f"{fmt}: read failed: {read.reason}")
    t = time.process_time()
    run_cycle(profile, options, NOW, only=[p.name for p in PASSES])  # the passes alone
    emit(f"folders.{fmt}.cycle_cpu_s", n, time.process_time() - t, "s")
    t = time.process_time()
    written = write_back(profile, options, NOW)
    emit(f"folders.{fmt}.write_back_cpu_s", n, time.process_time() - t, "s")
    if written.status != "completed":
        raise SystemExit(f"{fmt}: write-back failed: {written.reason}")
    emit(f"folders.{fmt}.files_written", n, written.counts.get("files_written", 0), "files")

    after_text = "\n".join(p.read_text(encoding="utf-8") for p in folder.rglob("*.md"))
    lost = [s for s in before if s not in after_text]
    emit(f"folders.{fmt}.facts_lost", n, len(lost), "specifics")

    snapshot = files(folder)
    run_cycle(profile, options, NOW)  # nothing left to do
    now_files = files(folder)
    rewritten = {k for k in snapshot.keys() | now_files.keys() if snapshot.get(k) != now_files.get(k)}
    emit(f"folders.{fmt}.files_rewritten_idle", n, len(rewritten), "files")
    if lost:
        print(f"{fmt}: lost {sorted(lost)[:10]}", file=sys.stderr)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 notes per format instead of 2,000")
    parser.add_argument("--notes", type=int, default=None)
    parser.add_argument("--format", action="append", choices=("claude-code", "openclaw", "markdown"))
    args = parser.parse_args(list(argv) if argv is not None else None)
    n = args.notes or (200 if args.quick else 2000)
    with tempfile.TemporaryDirectory(prefix="dream-folders-") as tmp:
        for fmt in args.format or ("claude-code", "openclaw", "markdown"):
            run_format(fmt, n, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
