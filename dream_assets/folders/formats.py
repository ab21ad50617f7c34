"""The markdown memory folders agents keep, read into notes: one note per bullet or paragraph under its heading path.

Three layouts (``FORMATS``):

- ``claude-code``: an auto-memory folder. ``MEMORY.md`` is the index the agent loads (only its first
  ``INDEX_LINE_BUDGET`` lines count): a line that links to a topic file is an index entry, not a memory; topic files
  carry YAML front matter (``name``, ``description``, ``type``: user, feedback, project or reference, and whatever
  else the tool wrote) and a markdown body whose bullets and paragraphs are the memories.
- ``openclaw``: a workspace with ``MEMORY.md`` (curated long-term memory) and daily notes ``memory/YYYY-MM-DD.md`` or
  ``memory/YYYY-MM-DD-<slug>.md``; ``DREAMS.md`` is the diary of the cycles and is never read as memory.
- ``markdown``: every ``.md`` file under the folder.

``archive/`` (where write-back moves what the dream archived) is never read as memory, nor is a line that is one
HTML comment (a marker such as OpenClaw's ``<!-- openclaw-memory-promotion:... -->``). Front matter is parsed as
the flat ``key: value`` subset (a value is kept as written, flow lists included), capped at
``MAX_FRONT_MATTER_CHARS``: no YAML anchors, aliases or tags are expanded, so a front-matter bomb is only text.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

FORMATS = ("claude-code", "openclaw", "markdown")
#: Lines of MEMORY.md a Claude Code session loads.
INDEX_LINE_BUDGET = 200
#: Longest front matter read; longer is refused (a file with that much front matter is not a memory file).
MAX_FRONT_MATTER_CHARS = 16_384
ARCHIVE_DIR = "archive"
DREAMS_FILE = "DREAMS.md"
INDEX_FILE = "MEMORY.md"
#: Where write-back moves the lines of a Claude Code MEMORY.md past INDEX_LINE_BUDGET (folders/index_budget.py); its
#: link lines are index entries too.
CONTINUED_FILE = "memory_index_continued.md"

_DAILY = re.compile(r"^memory/\d{4}-\d{2}-\d{2}(?:-[A-Za-z0-9][A-Za-z0-9_-]*)?\.md$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)([-*+]|\d{1,9}[.)])(\s+)(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_FM_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)\s*:\s?(.*)$")
_LINK_TO_MD = re.compile(r"\]\(([^)\s]+\.md)\)")
_COMMENT_LINE = re.compile(r"^\s*<!--.*-->\s*$")


class FormatError(ValueError):
    """A file that cannot be read as a memory file; the message names the file."""


@dataclass(frozen=True)
class Block:
    """One memory in a file: ``text`` (the bullet's text without its marker, or the paragraph) and where it is:
    ``start``/``end`` character offsets of the whole block in the file text, and ``text_start`` where ``text``
    begins (after the bullet marker)."""

    heading: tuple[str, ...]
    text: str
    start: int
    end: int
    text_start: int
    bullet: bool


@dataclass
class ParsedFile:
    rel: str
    text: str
    front_matter: dict[str, str] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)
    index_links: list[str] = field(default_factory=list)  # claude-code MEMORY.md: topic files it points to


def note_key(rel: str, heading: tuple[str, ...], text: str) -> str:
    """The identity of one note: its file, heading path and text (whitespace folded)."""
    raw = "\x1f".join([rel, " / ".join(heading), " ".join(text.split())])
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


def is_memory_file(fmt: str, rel: str) -> bool:
    """Whether the file at ``rel`` (POSIX, relative to the folder) holds memories in format ``fmt``."""
    if not rel.endswith(".md") or rel.split("/")[0] == ARCHIVE_DIR:
        return False
    if fmt == "openclaw":
        return rel == INDEX_FILE or bool(_DAILY.fullmatch(rel))
    if fmt == "claude-code":
        return "/" not in rel
    return True


def split_front_matter(rel: str, text: str) -> tuple[dict[str, str], int]:
    """The front matter's ``key: value`` pairs and the offset where the body begins (0 without front matter)."""
    if not text.startswith("---\n") and not text.startswith("---\r\n"):
        return {}, 0
    end = re.search(r"^---[ \t]*\r?$\n?", text[3:], re.MULTILINE)
    if end is None:
        return {}, 0
    body_at = 3 + end.end()
    raw = text[text.index("\n") + 1 : 3 + end.start()]
    if len(raw) > MAX_FRONT_MATTER_CHARS:
        raise FormatError(f"{rel}: front matter is {len(raw)} characters, over the limit of {MAX_FRONT_MATTER_CHARS}")
    meta: dict[str, str] = {}
    last = None
    for line in raw.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _FM_KEY.match(line)
        if match and not line[0].isspace():
            last = match.group(1)
            meta[last] = match.group(2).strip()
        elif last is not None:  # a nested or continued value, kept as written
            meta[last] = (meta[last] + "\n" + line).strip("\n")
    return meta, body_at


def parse_file(fmt: str, rel: str, text: str) -> ParsedFile:
    """The notes of one file. Headings set the path; each bullet (with its indented continuation lines) and each
    paragraph is one block; fenced code stays inside the block it belongs to."""
    meta, body_at = split_front_matter(rel, text)
    parsed = ParsedFile(rel, text, meta)
    heading: list[tuple[int, str]] = []
    lines = text[body_at:].splitlines(keepends=True)
    pos = body_at
    current: dict | None = None
    in_fence = False
    index = fmt == "claude-code" and rel in (INDEX_FILE, CONTINUED_FILE)

    def close() -> None:
        nonlocal current
        if current is not None:
            body = "".join(current["lines"])
            end = current["start"] + len(body.rstrip("\r\n"))
            block_text = text[current["text_start"] : end]
            block_text = "\n".join(part.strip() for part in block_text.splitlines()).strip()
            links = _LINK_TO_MD.findall(block_text) if index else []
            if links:
                parsed.index_links.extend(links)
            elif block_text:
                parsed.blocks.append(
                    Block(
                        tuple(h for _, h in heading),
                        block_text,
                        current["start"],
                        end,
                        current["text_start"],
                        current["bullet"],
                    )
                )
        current = None

    for line in lines:
        stripped = line.strip()
        if in_fence:
            if current is not None:
                current["lines"].append(line)
            if _FENCE.match(line):
                in_fence = False
        elif _FENCE.match(line):
            in_fence = True
            if current is None:
                current = {"start": pos, "text_start": pos, "lines": [], "bullet": False}
            current["lines"].append(line)
        elif not stripped or _COMMENT_LINE.match(line):  # a comment line (a marker) is markup, not a memory
            close()
        elif (h := _HEADING.match(line)) is not None:
            close()
            level = len(h.group(1))
            heading = [x for x in heading if x[0] < level] + [(level, h.group(2))]
        elif (b := _BULLET.match(line)) is not None:
            close()
            marker_len = len(b.group(1)) + len(b.group(2)) + len(b.group(3))
            current = {"start": pos, "text_start": pos + marker_len, "lines": [line], "bullet": True}
        elif current is not None and (not current["bullet"] or line[:1].isspace()):
            current["lines"].append(line)
        else:
            close()
            indent = len(line) - len(line.lstrip())
            current = {"start": pos, "text_start": pos + indent, "lines": [line], "bullet": False}
        pos += len(line)
    close()
    return parsed


def heading_lines(text: str) -> list[str]:
    """The headings in effect at the end of ``text`` (outside code fences), as their lines, outermost first."""
    stack: list[tuple[int, str]] = []
    in_fence = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (h := _HEADING.match(line)) is not None:
            level = len(h.group(1))
            stack = [x for x in stack if x[0] < level] + [(level, line if line.endswith("\n") else line + "\n")]
    return [line for _, line in stack]


def starts_block(line: str) -> bool:
    """Whether ``line`` would begin a heading, a bullet or a code fence when read."""
    return bool(_HEADING.match(line) or _BULLET.match(line) or _FENCE.match(line))


def category_of(fmt: str, parsed: ParsedFile) -> str:
    """The store category of a file's notes: a Claude Code topic file's ``type``, else the format's own."""
    if fmt == "claude-code":
        kind = parsed.front_matter.get("type", "").strip().strip("'\"")
        if kind in ("user", "feedback", "project", "reference"):
            return f"claude-code/{kind}"
        return "claude-code/index" if parsed.rel == INDEX_FILE else "claude-code"
    if fmt == "openclaw":
        return "openclaw/long-term" if parsed.rel == INDEX_FILE else "openclaw/daily"
    return "markdown"
