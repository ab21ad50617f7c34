"""The Dockerfiles of deploy/examples are valid as far as this machine can tell without Docker: every instruction is
one Docker knows, every file copied from the project exists, what is installed is the project with the extras the
image needs, and the command the serve image starts is one `dream` accepts."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from dream_assets.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "deploy" / "examples"
INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG",
    "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def instructions(path: Path) -> list[tuple[str, str]]:
    """(instruction, arguments) of a Dockerfile, continuation lines joined, comments left out."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip().removesuffix("\\") + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


@pytest.mark.parametrize("name", ["Dockerfile", "serve.Dockerfile"])
def test_every_instruction_is_known_and_every_copied_file_exists(name: str) -> None:
    steps = instructions(EXAMPLES / name)
    assert steps[0][0] == "FROM"
    assert {word for word, _ in steps} <= INSTRUCTIONS
    for word, rest in steps:
        if word == "COPY" and not rest.startswith("--from"):
            *sources, _ = shlex.split(rest)
            for source in sources:
                assert (ROOT / source).exists(), f"{name} copies {source}, which the project does not have"
    copied = {
        source
        for word, rest in steps
        if word == "COPY" and not rest.startswith("--from")
        for source in shlex.split(rest)[:-1]
    }
    # what the wheel is built from: setup.py builds the kernel, directives/ is the package dream_assets.directives
    assert {"setup.py", "directives", "dream_assets"} <= copied


def test_the_dagster_image_installs_the_dagster_extra() -> None:
    runs = " ".join(rest for word, rest in instructions(EXAMPLES / "Dockerfile") if word == "RUN")
    assert "'.[dagster]'" in runs


def test_the_serve_image_starts_dream_serve_over_http_on_every_agent() -> None:
    steps = instructions(EXAMPLES / "serve.Dockerfile")
    (cmd,) = [json.loads(rest) for word, rest in steps if word == "CMD"]
    assert cmd[0] == "dream"
    args = build_parser().parse_args(cmd[1:])
    assert (args.command, args.http, args.profile_root, args.create) == ("serve", "0.0.0.0:8765", "/data/agents", True)
    assert ("EXPOSE", "8765") in steps
    runs = " ".join(rest for word, rest in steps if word == "RUN")
    assert "pip wheel" in runs and "gcc" in runs  # the kernel is compiled in the build stage
    assert "dagster" not in runs  # the base install
