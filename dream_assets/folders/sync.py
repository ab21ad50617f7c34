"""A markdown memory folder linked to an agent: read into the store at the start of a cycle, written back at its end.
This module holds the files' side; the store's side (the saves, the forgets, the memories a plan reads) is the memory
service's (``dream_assets.service.folders``), which drives the steps below.

- ``link_folder`` records the folder and its format in the profile (``memory-folder.json``).
- A read (``begin_read``, then ``FolderRead.saved`` and ``FolderRead.finish`` around the service's saves) gives every
  note not seen before to the agent's own save (``agent_memory.save_many``: the save-time rules, the change log, in a
  few bulk transactions) with its provenance in metadata (``folder.file``, ``folder.heading``, ``folder.key``,
  ``folder.format``, front matter as ``fm.<key>``), and names for the agent's forget the memory of a note a person
  removed from its file: only a memory no note of the folder maps to any more (an edited, moved or split note, or one
  copy of two, keeps its memory). It records each file's hash and each note's memory id
  (``memory-folder-state.json``); reading the same folder again changes nothing.
- ``plan_from`` computes what the dream changed, file by file, from the memories a ``StoreView`` reads: a note whose
  memory went into another (merge, supersession) carries the live memory's text in place of the first such note,
  the others leave their file for ``archive/<file>``; a file left with no note moves to ``archive/`` whole (never
  deleted) and its ``MEMORY.md`` index line goes with it. A note whose memory was archived with no successor leaves
  only on a recorded decision (a pass, the agent's forget), never because an undo retired it. Everything else (front
  matter, headings, markers, spacing) stays byte for byte. ``apply_write_back`` writes it, one replace per file,
  archive copies first; a file whose bytes differ from the last read (a person edited it, even in the instant of the
  replace), or that the caller holds (``hold``: the service holds a file whose removed note's memory is live again),
  is left alone with its index line and read again next cycle, so the change computed from its old text is dropped;
  a path that resolves outside the folder when it is written is refused. An idle cycle writes nothing.
- Every write-back keeps what it replaced (``memory-folder-undo/``) with the change sets it wrote out, so
  ``undo_files`` puts the files back with the undo of any of them (a cycle, a review set, a restore, a forget); an
  undo killed part-way is finished by running it again.
- Every file is checked before anything is read into the store (``scan``): a symlink leaving the folder, a name with
  ``..``, a file over ``MaxFileBytes``, text that is not UTF-8, oversized front matter each refuse the read with a
  message naming the file, and the store is left as it was.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

import dream_assets.folders.index_budget as index_budget
import dream_assets.folders.promotion as promotion
from dream_assets.agent_memory import MemoryRecord
from dream_assets.file_safety import (
    UnreadableFile,
    atomic_write,
    is_temp_file,
    read_json_file,
    replace_unless_changed,
)
from dream_assets.folders.formats import (
    ARCHIVE_DIR,
    CONTINUED_FILE,
    DREAMS_FILE,
    FORMATS,
    INDEX_FILE,
    INDEX_LINE_BUDGET,
    Block,
    FormatError,
    ParsedFile,
    category_of,
    is_memory_file,
    note_key,
    parse_file,
    starts_block,
)
from dream_assets.model import iso, parse_ts, utc_or_now
from dream_assets.options import DreamOptions
from dream_assets.passes.model_text import problem
from dream_assets.passes.report import PassReport
from dream_assets.profile import AgentProfile, as_profile
from dream_assets.text.coverage import load_vocabulary

#: Largest file read from a linked folder.
MAX_FILE_BYTES = 4 * 1024 * 1024
READ_STEP = "memory_folder_read"
#: The expected hash of a file a write-back creates: it must still not exist when the write comes.
ABSENT = "absent"
WRITE_STEP = "memory_folder_write"


class FolderError(ValueError):
    """The linked folder could not be read or written; the message names the folder and the file."""


@dataclass(frozen=True)
class FolderLink:
    folder: Path
    format: str
    #: When it was linked: memories the agent keeps from then on (saved through MCP, the shell, LangGraph, or made
    #: by a pass) are written into the folder by the write-back. None for a link recorded before this was kept: the
    #: write-back records its own time then, and nothing older is written out.
    linked_at: datetime | None = None


@dataclass
class FileChange:
    rel: str
    old: str | None  # None: a new file (an archive file, DREAMS.md)
    new: str | None  # None: the file moves to archive/ whole
    move_to: str | None = None
    reason: str = ""
    source: str | None = None  # written only if this file's change was (the index after memory_index_continued.md)
    copy_of: str | None = None  # an archive file's change: the file its notes leave (written before it)
    archive: str | None = None  # the archive file its notes go to: this file is cut only once they are there
    removes: list[str] = field(default_factory=list)  # the memories whose notes it takes out of the file


@dataclass
class WritePlan:
    link: FolderLink
    changes: list[FileChange] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # files not written, and why
    notes: dict[str, dict[str, str]] = field(default_factory=dict)  # the notes map after the plan
    expected: dict[str, str] = field(default_factory=dict)  # rel -> sha256 the file must still have (or ABSENT)
    promotions: list[promotion.Promotion] = field(default_factory=list)  # what goes from daily notes to MEMORY.md
    cycles: set[str] = field(default_factory=set)  # the change sets (cycles, review sets, undos) it writes out
    read_keys: frozenset[str] = frozenset()  # the notes the last read had mapped when the plan was made

    def diff(self) -> str:
        out: list[str] = []
        for change in self.changes:
            if change.new is None:
                out.append(f"move {change.rel} -> {change.move_to} ({change.reason})\n")
                continue
            out.extend(
                difflib.unified_diff(
                    (change.old or "").splitlines(keepends=True),
                    change.new.splitlines(keepends=True),
                    fromfile=f"a/{change.rel}" if change.old is not None else "/dev/null",
                    tofile=f"b/{change.rel}",
                )
            )
        return "".join(out)


# --- link and state ---------------------------------------------------------------------------------------------


def link_folder(
    profile: AgentProfile | str | Path, folder: str | Path, fmt: str, now: datetime | None = None
) -> FolderLink:
    """Attach ``folder`` (format ``fmt``, one of ``FORMATS``) to the agent: every cycle reads it first and writes the
    result back last, memories the agent keeps after ``now`` included. Linking the same folder again keeps the
    first link's time."""
    profile = as_profile(profile)
    if fmt not in FORMATS:
        raise FolderError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise FolderError(f"folder {path} does not exist or is not a folder")
    profile.root.mkdir(parents=True, exist_ok=True)
    before = load_link(profile) if profile.memory_folder_link_path.exists() else None
    at = before.linked_at if before is not None and before.folder == path else None
    return record_link(profile, FolderLink(path, fmt, at or utc_or_now(now)))


def record_link(profile: AgentProfile, link: FolderLink) -> FolderLink:
    raw = {"folder": str(link.folder), "format": link.format}
    if link.linked_at is not None:
        raw["linked_at"] = iso(link.linked_at) or ""
    atomic_write(profile.memory_folder_link_path, json.dumps(raw, indent=2) + "\n")
    return link


def load_link(profile: AgentProfile) -> FolderLink | None:
    path = profile.memory_folder_link_path
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        at = raw.get("linked_at")
        link = FolderLink(Path(raw["folder"]), str(raw["format"]), parse_ts(at) if at else None)
    except (ValueError, KeyError, TypeError) as exc:
        raise FolderError(f"{path}: not a folder link ({exc}); link the folder again with dream link") from exc
    if link.format not in FORMATS:
        raise FolderError(f"{path}: field format {link.format!r} is not one of {', '.join(FORMATS)}")
    return link


def _load_state(profile: AgentProfile) -> dict:
    path = profile.memory_folder_state_path
    if not path.exists():
        return {"files": {}, "notes": {}}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        state.setdefault("files", {})
        state.setdefault("notes", {})
        return state
    except ValueError as exc:
        raise FolderError(f"{path}: not valid JSON ({exc})") from exc


def _save_state(profile: AgentProfile, state: dict) -> None:
    text = json.dumps(state, indent=1, sort_keys=True) + "\n"
    path = profile.memory_folder_state_path
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        atomic_write(path, text)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _text_sha(text: str) -> str:
    return _sha(" ".join(text.split()).encode("utf-8"))[:24]


# --- reading ------------------------------------------------------------------------------------------------------


def file_stats(link: FolderLink) -> dict[str, list[int]]:
    """Size and modification time (ns) of each file a read would read (``scan``'s choice, without its checks): what
    ``changed_since_read`` compares, so finding nothing changed reads no file."""
    root = link.folder
    found: dict[str, list[int]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and not (base / d).is_symlink()]
        for name in filenames:
            full = base / name
            rel = full.relative_to(root).as_posix()
            if is_temp_file(full) or not is_memory_file(link.format, rel) or full.is_symlink():
                continue
            try:
                st = full.stat()
            except OSError:
                continue
            found[rel] = [st.st_size, st.st_mtime_ns]
    return found


def files_moved(profile: AgentProfile) -> bool:
    """Whether a memory file's size or time moved, or a file came or went, since the last read: what
    ``changed_since_read`` looks at first, with nothing written (so it needs no lock)."""
    return _stats_moved(profile) is not None


def _stats_moved(profile: AgentProfile) -> tuple[FolderLink, dict, dict[str, list[int]]] | None:
    """The link, the last read's state and the files' stats now, when the stats differ from those of the last read;
    None when they do not, when no folder is linked, and after a failed read."""
    link = load_link(profile)
    if link is None or not link.folder.is_dir():
        return None
    state = _load_state(profile)
    if state.get("read_failed"):
        return None
    stats = file_stats(link)
    return None if stats == state.get("stat", {}) else (link, state, stats)


def changed_since_read(profile: AgentProfile) -> bool:
    """Whether a memory file of the linked folder was added, removed or changed since the last read (a person or
    the agent's own tool edited the folder): sizes and times first, the bytes of a file only when those moved. False
    when no folder is linked, and after a failed read (the next cycle or ``dream sync`` reads again and reports)."""
    moved = _stats_moved(profile)
    if moved is None:
        return False
    link, state, stats = moved
    known, files = state.get("stat", {}), state["files"]
    if set(stats) != set(files):
        return True
    for rel, st in stats.items():
        if known.get(rel) != st:
            try:
                if _sha((link.folder / rel).read_bytes()) != files[rel]:
                    return True
            except OSError:
                return True
    state["stat"] = stats  # only times moved (a write-back, a touch): nothing to read
    _save_state(profile, state)
    return False


def scan(link: FolderLink, *, max_file_bytes: int = MAX_FILE_BYTES) -> dict[str, bytes]:
    """Every memory file of the folder (POSIX path relative to it -> bytes), after checking each; raises
    ``FolderError`` listing every file that cannot be read safely (nothing is read into the store then)."""
    root = link.folder
    if not root.is_dir():
        raise FolderError(f"linked folder {root} does not exist or is not a folder (link it again with dream link)")
    problems: list[str] = []
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        keep = []
        for d in dirnames:
            full = base / d
            if full.is_symlink():
                target = full.resolve()
                if not target.is_relative_to(root):
                    problems.append(f"{full}: a symlink to {target}, outside the folder {root}")
                continue
            if not d.startswith("."):
                keep.append(d)
        dirnames[:] = keep
        for name in filenames:
            full = base / name
            rel = full.relative_to(root).as_posix()
            if is_temp_file(full) or not is_memory_file(link.format, rel):
                continue
            if ".." in name:
                problems.append(f"{full}: the name contains '..'; rename it to read it")
                continue
            if full.is_symlink():
                target = full.resolve()
                if not target.is_relative_to(root):
                    problems.append(f"{full}: a symlink to {target}, outside the folder {root}")
                continue  # a link inside the folder: its target is read under its own name
            try:
                size = full.stat().st_size
                if size > max_file_bytes:
                    problems.append(f"{full}: {size} bytes, over the limit of {max_file_bytes} bytes")
                    continue
                data = full.read_bytes()
            except FileNotFoundError:
                problems.append(f"{full}: disappeared while the folder {root} was read")
                continue
            except OSError as exc:
                problems.append(f"{full}: cannot be read ({exc.strerror})")
                continue
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                problems.append(f"{full}: not UTF-8 text (byte {exc.start})")
                continue
            found[rel] = data
    if not root.is_dir():
        raise FolderError(f"linked folder {root} disappeared while it was read; nothing was read into the store")
    if problems:
        raise FolderError(f"linked folder {root} was not read, the store is unchanged: " + "; ".join(sorted(problems)))
    return found


def _parse_all(link: FolderLink, files: dict[str, bytes]) -> dict[str, ParsedFile]:
    parsed: dict[str, ParsedFile] = {}
    problems: list[str] = []
    for rel, data in sorted(files.items()):
        try:
            parsed[rel] = parse_file(link.format, rel, data.decode("utf-8"))
        except FormatError as exc:
            problems.append(f"{link.folder / rel}: {exc}")
            continue
        for target in parsed[rel].index_links:
            if target.startswith("/") or ".." in target.split("/"):
                problems.append(f"{link.folder / rel}: index entry {target!r} points outside the folder")
    if problems:
        raise FolderError(f"linked folder {link.folder} was not read, the store is unchanged: " + "; ".join(problems))
    return parsed


def _read_failed(profile: AgentProfile, state: dict, report: PassReport, message: str) -> PassReport:
    """A read refused: the store is untouched; the write-back of this cycle is refused too (``read_failed``)."""
    state["read_failed"] = message
    _save_state(profile, state)
    return report.fail(message)


def _metadata(link: FolderLink, parsed: ParsedFile, block: Block, key: str) -> dict[str, str]:
    meta = {
        "folder.format": link.format,
        "folder.file": parsed.rel,
        "folder.heading": json.dumps(list(block.heading), ensure_ascii=False),
        "folder.key": key,
    }
    for k, v in parsed.front_matter.items():
        meta[f"fm.{k}"] = v
    return meta


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


@dataclass
class FolderRead:
    """A read of the linked folder in progress: the notes not seen before (``batch``, in the shape the agent's
    ``save_many`` takes) and, once they are saved (``saved``), the memories of notes a person removed (``removed``)."""

    link: FolderLink
    state: dict
    files: dict[str, bytes]
    report: PassReport
    todo: list[tuple[ParsedFile, Block, str]]
    seen: set[str]
    stats: dict[str, list[int]] = field(default_factory=dict)  # file_stats as the read began

    @property
    def batch(self) -> list[dict]:
        return [
            {
                "content": block.text,
                "category": category_of(self.link.format, pf),
                "metadata": _metadata(self.link, pf, block, key),
            }
            for pf, block, key in self.todo
        ]

    def saved(self, saves: list) -> list[tuple[str, str]]:
        """Map each new note to the memory its save gave (``saves``: the results of saving ``batch``, in order), and
        return the memories a person removed: (id, reason) of each memory no note of the folder maps to any more, once.
        A note's key is its file, heading path and text, so an edited, moved or split note has a new key, and its save
        may return the memory the old key held (reinforced, extended, a duplicate)."""
        notes: dict[str, dict[str, str]] = self.state["notes"]
        for (pf, block, key), saved in zip(self.todo, saves, strict=True):
            notes[key] = {"id": saved.id, "file": pf.rel, "content": _text_sha(saved.content)}
            self.report.count(f"notes_{saved.outcome}")
            self.report.change(f"folder-{saved.outcome}", saved.id, f"{pf.rel}: {block.text[:80]}")
        mapped = {notes[k]["id"] for k in self.seen if k in notes}
        removed: list[tuple[str, str]] = []
        for key in [k for k in notes if k not in self.seen]:
            info = notes.pop(key)
            if info["id"] in mapped:
                continue
            mapped.add(info["id"])  # forgotten once, however many of its notes went
            removed.append((info["id"], PERSON_REMOVED.format(file=info["file"], folder=self.link.folder)))
        return removed

    def finish(self, profile: AgentProfile, removed: int) -> PassReport:
        """Record the files as read (their hashes, the notes map) once the store has them; ``removed``: how many
        memories were archived because a person removed their notes."""
        if removed:
            self.report.count("notes_removed_by_person", removed)
        self.state["files"] = {rel: _sha(data) for rel, data in self.files.items()}
        self.state["stat"] = self.stats
        self.state["folder"] = str(self.link.folder)
        self.state.pop("read_failed", None)
        _save_state(profile, self.state)
        self.report.summary = (
            f"read {len(self.files)} file(s) of {self.link.folder}: {len(self.todo)} new note(s), {removed} removed "
            "by a person"
        )
        return self.report


def begin_read(profile: AgentProfile, options: DreamOptions) -> FolderRead | PassReport:
    """Check and parse every file of the linked folder (see the module) and find the notes not seen before; a report
    (nothing to save) with status ``skipped`` when no folder is linked, ``failed`` (naming the file) when the folder
    cannot be read safely, the store then unchanged."""
    report = PassReport(READ_STEP)
    try:
        link = load_link(profile)
        if link is None:
            return report.skip("no memory folder linked (dream link)")
        state = _load_state(profile)
    except FolderError as exc:
        return report.fail(str(exc))
    try:
        stats = file_stats(link) if link.folder.is_dir() else {}  # before the bytes: an edit meanwhile is read next
        files = scan(link, max_file_bytes=MAX_FILE_BYTES)
        parsed = _parse_all(link, files)
    except FolderError as exc:
        return _read_failed(profile, state, report, str(exc))
    notes: dict[str, dict[str, str]] = state["notes"]
    todo: list[tuple[ParsedFile, Block, str]] = []
    seen: set[str] = set()
    problems: list[str] = []
    for rel, pf in parsed.items():
        for block in pf.blocks:
            key = note_key(rel, block.heading, block.text)
            if key in seen:
                continue
            seen.add(key)
            if key in notes:
                continue
            found = problem(block.text, "content", field="note", max_chars=options.MaxContentChars)
            if found:
                problems.append(f"{link.folder / rel} line {_line_of(pf.text, block.start)}: {found}")
            todo.append((pf, block, key))
    if problems:
        message = f"linked folder {link.folder} was not read, the store is unchanged: " + "; ".join(problems)
        return _read_failed(profile, state, report, message)
    return FolderRead(link, state, files, report, todo, seen, stats)


# --- writing back -------------------------------------------------------------------------------------------------


def _bullet_text(block: Block, content: str, text: str) -> str:
    """``content`` written in the place of ``block``, so that reading the file again gives one note with that text:
    its lines kept (a bullet's continuation lines indented under it) unless one of them would start a new note, a
    heading or a code fence, or there is a blank line; then it is one line."""
    line_start = text.rfind("\n", 0, block.start) + 1
    return _note_text(content, bullet=block.bullet, indent=" " * (block.text_start - line_start))


def _note_text(content: str, *, bullet: bool, indent: str) -> str:
    """``content`` as the text of one note: a bullet's lines indented by ``indent`` under it, a paragraph's as they
    are; one line when a line would start a new note, a heading or a code fence, or there is a blank line."""
    lines = [ln.strip() for ln in content.strip().splitlines()]
    if any(not ln or starts_block(ln) for ln in lines[1:]):
        lines = [" ".join(ln for ln in lines if ln)]
    return ("\n" + indent).join(lines) if bullet else "\n".join(lines)


def _note(rec: MemoryRecord, rel: str) -> dict[str, str]:
    return {"id": rec.id, "file": rel, "content": _text_sha(rec.content)}


def _crlf(text: str) -> bool:
    """Whether a file ends its lines with CRLF (most of them): text written into it then does too."""
    crlf = text.count("\r\n")
    return crlf > 0 and crlf >= text.count("\n") - crlf


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


#: The reason ``read_folder`` gives a memory whose note a person removed (``_dream_archived`` tells it apart).
PERSON_REMOVED = "removed from {file} in the linked folder {folder}"


def _dream_archived(rec: MemoryRecord) -> bool:
    """Whether ``rec`` was archived by a decision recorded in the change log (a pass, the agent's forget) rather
    than retired by an undo (no reason) or archived by a read that no longer saw its note."""
    reason = rec.archived_reason or ""
    return bool(reason) and not (reason.startswith("removed from ") and " in the linked folder " in reason)


def _remove_span(text: str, block: Block) -> tuple[int, int]:
    end = block.end
    if text.startswith("\r\n", end):
        end += 2
    elif text.startswith("\n", end):
        end += 1
    if not block.bullet and text.startswith("\n", end):
        end += 1
    return block.start, end


def _archive_name(rel: str, existing: set[str], root: Path) -> str:
    target = f"{ARCHIVE_DIR}/{rel}"
    n = 1
    while target in existing or (root / target).exists():
        stem, _, ext = rel.rpartition(".")
        target = f"{ARCHIVE_DIR}/{stem}.{n}.{ext}"
        n += 1
    return target


class StoreView(Protocol):
    """What a write-back plan reads from the agent's memory (the memory service gives it, ``service.folders``)."""

    def record(self, entry_id: str) -> MemoryRecord | None:
        """The memory ``entry_id`` with the live entry its fact lives on in (``current_id``), None if never held."""

    def change_set(self, entry_id: str) -> str | None:
        """The change set (cycle, review set, agent's day, restore, undo) of the last change of ``entry_id`` not
        undone, None when there is none."""

    def text_set(self, entry_id: str) -> str | None:
        """The change set of the change not undone that gave ``entry_id`` its text now (it created the memory or
        changed its content), None when there is none."""

    def same_fact(self, a: str, b: str) -> bool:
        """Whether two texts are near duplicates by the save-time measure."""

    def kept_since(self, since: datetime) -> list[MemoryRecord]:
        """The live memories created after ``since``, oldest first: what the agent kept (a save through any
        interface, a pass's new memory) that the write-back brings into the folder when no note holds it."""


def plan_from(profile: AgentProfile, view: StoreView, options: DreamOptions, now: datetime) -> WritePlan | None:
    """What a write-back would do now (nothing is written), from the memories ``view`` reads; None when no folder is
    linked."""
    link = load_link(profile)
    if link is None:
        return None
    if not link.folder.is_dir():
        raise FolderError(f"linked folder {link.folder} does not exist; nothing was written")
    state = _load_state(profile)
    if state.get("read_failed"):
        raise FolderError(f"not written: the last read of the folder failed ({state['read_failed']})")
    notes = {k: dict(v) for k, v in state["notes"].items()}
    plan = WritePlan(link, notes=notes, read_keys=frozenset(notes))
    by_file: dict[str, list[str]] = {}
    for key, info in notes.items():
        by_file.setdefault(info["file"], []).append(key)
    current: dict[str, tuple[ParsedFile, bytes]] = {}
    for rel in sorted(by_file):
        found = _as_last_read(link, state, rel)
        if isinstance(found, str):
            plan.left.append(found)
        else:
            current[rel] = found
    records: dict[str, MemoryRecord | None] = {}

    def record(entry_id: str) -> MemoryRecord | None:
        if entry_id not in records:
            records[entry_id] = view.record(entry_id)
        return records[entry_id]

    def caused(entry_id: str) -> None:
        """Note the change set whose change of ``entry_id`` the plan writes out: an undo of it puts the files back."""
        cycle = view.change_set(entry_id)
        if cycle is not None:
            plan.cycles.add(cycle)

    def caused_text(entry_id: str) -> None:
        """Note the change set that gave ``entry_id`` the text the plan writes into a note (a merge of merges over
        two change sets: the undo of the later one puts the files back too)."""
        cycle = view.text_set(entry_id)
        if cycle is not None:
            plan.cycles.add(cycle)

    placed: set[str] = set()
    for rel, (pf, _) in current.items():  # a live memory keeps its own note's place
        for block in pf.blocks:
            info = notes.get(note_key(rel, block.heading, block.text))
            rec = record(info["id"]) if info else None
            if rec is not None and rec.status == "live":
                placed.add(rec.id)
    waiting, promotions = (
        _promotions(profile, link, current, notes, record, view.same_fact, options, plan)
        if link.format == "openclaw"
        else (set(), [])
    )
    promoted = {p.record.id for p in promotions}
    archived_blocks: dict[str, list[str]] = {}
    index_drop: set[str] = set()
    for rel, (pf, data) in current.items():
        text = pf.text
        edits: list[tuple[int, int, str]] = []
        removes: list[str] = []
        kept = 0
        for block in pf.blocks:
            key = note_key(rel, block.heading, block.text)
            info = notes.get(key)
            if info is None:
                kept += 1
                continue
            rec = record(info["id"])
            if rec is None:
                kept += 1
                continue
            if rec.status == "live":
                kept += 1
                if info.get("content") != _text_sha(rec.content) and not _same(rec.content, block.text):
                    caused(rec.id)
                    caused_text(rec.id)
                    edits.append((block.text_start, block.end, _bullet_text(block, rec.content, text)))
                    notes.pop(key)
                    notes[note_key(rel, block.heading, rec.content)] = _note(rec, rel)
                continue
            if info.get("promoted") or rec.current_id in waiting:  # a daily note keeps what went into MEMORY.md
                kept += 1
                if rec.current_id in promoted:
                    info["promoted"] = INDEX_FILE
                continue
            successor = record(rec.current_id) if rec.current_id else None
            if successor is not None and successor.id not in placed:
                placed.add(successor.id)
                kept += 1
                caused(rec.id)
                caused_text(successor.id)
                edits.append((block.text_start, block.end, _bullet_text(block, successor.content, text)))
                notes.pop(key)
                notes[note_key(rel, block.heading, successor.content)] = _note(successor, rel)
                continue
            if successor is None and not _dream_archived(rec):
                # Not a dream's decision (an undo retired it, or a read took it for removed): the person's note stays
                # and is read again as a memory of its own next cycle.
                kept += 1
                notes.pop(key)
                continue
            caused(rec.id)
            removes.append(rec.id)
            start, end = _remove_span(text, block)
            edits.append((start, end, ""))
            archived_blocks.setdefault(rel, []).append(text[block.start : block.end])
            notes.pop(key)
        if not edits:
            continue
        plan.expected[rel] = _sha(data)
        if kept == 0 and not (link.format != "markdown" and rel == INDEX_FILE):
            target = _archive_name(rel, {c.rel for c in plan.changes}, link.folder)
            plan.changes.append(
                FileChange(rel, text, None, move_to=target, reason="every note in it was archived", removes=removes)
            )
            archived_blocks.pop(rel, None)
            index_drop.add(rel)
            continue
        new = text
        crlf = _crlf(text)
        for start, end, repl in sorted(edits, reverse=True):
            if crlf:  # the person's line ends, not bare LFs mixed into their file
                repl = repl.replace("\r\n", "\n").replace("\n", "\r\n")
            new = new[:start] + repl + new[end:]
        if new != text:
            plan.changes.append(FileChange(rel, text, new, reason="the dream changed its notes", removes=removes))
    if promotions:
        for p in promotions:
            caused(p.record.id)
        _promote(plan, link, current, promotions, now)
    for rel, blocks in archived_blocks.items():  # each archive copy is written before the notes leave their file
        target = f"{ARCHIVE_DIR}/{rel}"
        path = link.folder / target
        old = path.read_text(encoding="utf-8") if path.exists() else None
        entry = f"\n## Archived {iso(now)}\n\n" + "\n".join(b.rstrip() for b in blocks) + "\n"
        new = (old or f"# Archived from {rel}\n") + entry
        at, cut = next((i, c) for i, c in enumerate(plan.changes) if c.rel == rel and c.new is not None)
        cut.archive = target
        plan.expected[target] = _sha(old.encode("utf-8")) if old is not None else ABSENT
        plan.changes.insert(at, FileChange(target, old, new, reason="archived", copy_of=rel))
    if index_drop and link.format == "claude-code":
        _drop_index_lines(plan, link, index_drop)
    if link.linked_at is not None:
        _write_new(plan, link, state, current, view.kept_since(link.linked_at), placed, caused, now)
    if link.format == "claude-code":
        _trim_index(plan, link, state)
    if plan.changes and link.format == "openclaw":
        _diary(plan, link, now)
    return plan


def _promotions(
    profile: AgentProfile,
    link: FolderLink,
    current: dict[str, tuple[ParsedFile, bytes]],
    notes: dict[str, dict[str, str]],
    record: Callable[[str], MemoryRecord | None],
    near: Callable[[str, str], bool],
    options: DreamOptions,
    plan: WritePlan,
) -> tuple[set[str], list[promotion.Promotion]]:
    """The live memories that recur in daily notes (``promotion.recurring``) and pass the merge's coverage guard:
    the ids whose daily notes stay as they are this cycle, and the promotions to write now (none while MEMORY.md
    was edited since the last read: they wait for the next cycle, the daily notes untouched meanwhile)."""
    by_memory: dict[str, list[promotion.Note]] = {}
    for rel, (pf, _) in current.items():
        for block in pf.blocks:
            info = notes.get(note_key(rel, block.heading, block.text))
            rec = record(info["id"]) if info else None
            target = rec.id if rec is not None and rec.status == "live" else rec.current_id if rec else None
            if rec is not None and target is not None:
                by_memory.setdefault(target, []).append(promotion.Note(rel, pf.text, block, rec))
    vocab, _ = load_vocabulary(profile.coverage_vocabulary_path)
    waiting: set[str] = set()
    found: list[promotion.Promotion] = []
    for target, members in by_memory.items():
        sources = promotion.recurring(members, options.FolderPromotionMinDailyNotes, near)
        live = record(target) if sources else None
        if live is None or live.status != "live":
            continue
        refused = promotion.coverage_problem(live, sources, vocab)
        if refused:
            plan.left.append(refused)
            continue
        waiting.add(target)
        found.append(promotion.Promotion(live, sources))
    index_path = link.folder / INDEX_FILE
    if found and INDEX_FILE not in current and index_path.exists():
        plan.left.append(f"{index_path}: {len(found)} promotion(s) from daily notes wait until it is read again")
        return waiting, []
    return waiting, found


def _promote(
    plan: WritePlan,
    link: FolderLink,
    current: dict[str, tuple[ParsedFile, bytes]],
    promotions: list[promotion.Promotion],
    now: datetime,
) -> None:
    """Append the promotions to MEMORY.md (``promotion.section``) and map its new notes to their memories."""
    change, text = _appending_to(plan, current, INDEX_FILE, promotion.NEW_INDEX_HEADER)
    bullets = [(p, _note_text(p.record.content, bullet=True, indent="  ")) for p in promotions]
    if text and not text.endswith("\n"):
        text += "\n"
    appended = promotion.section(bullets, now)
    new = text + appended
    blocks = [b for b in parse_file(link.format, INDEX_FILE, new).blocks if b.start >= len(text)]
    for p, block in zip(promotions, blocks, strict=True):
        plan.notes[note_key(INDEX_FILE, block.heading, block.text)] = _note(p.record, INDEX_FILE)
    _append_change(
        plan, current, INDEX_FILE, change, new, f"promoted {len(promotions)} note(s) that recur in daily notes"
    )
    plan.promotions.extend(promotions)


def _appending_to(
    plan: WritePlan, current: dict[str, tuple[ParsedFile, bytes]], rel: str, empty: str
) -> tuple[FileChange | None, str]:
    """The text the write-back adds to ``rel`` after: the plan's change of it, else the file as read (its bytes then
    expected at the write), else ``empty`` (a new file: expected absent)."""
    change = next((c for c in plan.changes if c.rel == rel and c.new is not None), None)
    if change is not None:
        return change, change.new or ""
    if rel in current:
        pf, data = current[rel]
        plan.expected[rel] = _sha(data)
        return None, pf.text
    plan.expected[rel] = ABSENT
    return None, empty


def _append_change(
    plan: WritePlan,
    current: dict[str, tuple[ParsedFile, bytes]],
    rel: str,
    change: FileChange | None,
    new: str,
    reason: str,
) -> None:
    """``rel`` becomes ``new``: the plan's change of it (``change``) takes it with both reasons, or a change of its
    own does."""
    if change is not None:
        change.new, change.reason = new, f"{change.reason}; {reason}"
    else:
        plan.changes.append(FileChange(rel, current[rel][0].text if rel in current else None, new, reason=reason))


#: What the write-back writes the memories the agent kept outside the folder under (a markdown topic file's title).
_KEPT_TITLE = "Memories the agent kept: {category}"
_CLAUDE_TYPES = ("user", "feedback", "project", "reference")


def _home_of(link: FolderLink, category: str, now: datetime) -> str:
    """The file a memory of ``category`` kept outside the folder is written into: OpenClaw's daily note of the
    write-back's day, else a topic file named for the category (never the name of the index or the diary)."""
    if link.format == "openclaw":
        return f"memory/{now:%Y-%m-%d}.md"
    slug = re.sub(r"[^a-z0-9]+", "-", category.lower()).strip("-")[:60].strip("-") or "memories"
    if f"{slug}.md" in {n.lower() for n in (INDEX_FILE, DREAMS_FILE, CONTINUED_FILE)}:
        slug += "-notes"
    return f"{slug}.md"


def _claude_type(category: str) -> str:
    """The Claude Code memory type of a topic file started for ``category``."""
    parts = category.lower().split("/")
    if parts[0] == "claude-code" and len(parts) > 1 and parts[1] in _CLAUDE_TYPES:
        return parts[1]
    return next((t for t in _CLAUDE_TYPES if parts[0].startswith(t)), "project")


def _new_file(link: FolderLink, category: str, now: datetime) -> str:
    if link.format == "claude-code":
        return (
            f"---\nname: {category}\ndescription: {_KEPT_TITLE.format(category=category)}\n"
            f"type: {_claude_type(category)}\n---\n\n"
        )
    if link.format == "openclaw":
        return f"# {now:%Y-%m-%d}\n\n"
    return f"# {_KEPT_TITLE.format(category=category)}\n\n"


def _as_last_read(link: FolderLink, state: dict, rel: str) -> tuple[ParsedFile, bytes] | str:
    """``rel`` parsed, when its bytes are still those the last read saw; else why it is left (gone, edited)."""
    path = link.folder / rel
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return f"{path}: gone since the last read; read again next cycle"
    if _sha(data) != state["files"].get(rel):
        return f"{path}: edited since the last read; read again next cycle, its changes wait"
    return parse_file(link.format, rel, data.decode("utf-8")), data


def _write_new(
    plan: WritePlan,
    link: FolderLink,
    state: dict,
    current: dict[str, tuple[ParsedFile, bytes]],
    kept: list[MemoryRecord],
    placed: set[str],
    caused: Callable[[str], None],
    now: datetime,
) -> None:
    """Bring into the folder the live memories the agent kept since the link that no note holds (saved through MCP,
    the shell or LangGraph, or made by a pass): each a bullet at the end of its home file (``_home_of``), a new
    topic file with a line in Claude Code's ``MEMORY.md``. A home file edited since the last read, or the index of
    a new topic file, makes them wait for the next write-back; a memory read from the folder is never written back
    as a second note. The change sets of the saves are the plan's, so their undo takes the notes out again."""
    held = {info["id"] for info in plan.notes.values()} | placed
    homes: dict[str, list[MemoryRecord]] = {}
    for rec in kept:
        if rec.status == "live" and rec.id not in held and not any(k.startswith("folder.") for k in rec.metadata):
            homes.setdefault(_home_of(link, rec.category, now), []).append(rec)
    if not homes:
        return
    # the files the write-back may add to: those the plan read, and the others still as read (an index of links
    # only, a file whose notes all left it)
    current = dict(current)
    for rel in state["files"]:
        if rel in current:
            continue
        try:
            found = _as_last_read(link, state, rel)
        except OSError:  # unreadable: nothing is added to it
            continue
        if not isinstance(found, str):
            current[rel] = found
    index = link.folder / INDEX_FILE
    index_free = (
        any(c.rel == INDEX_FILE and c.new is not None for c in plan.changes)
        or INDEX_FILE in current
        or not (index.exists() or index.is_symlink())
    )
    started: list[FileChange] = []
    for rel, recs in sorted(homes.items()):
        path = link.folder / rel
        change = next((c for c in plan.changes if c.rel == rel), None)
        if change is not None and change.new is None:
            continue  # the file moves to archive/ in this write-back: the next one starts it again
        wait = f"{path}: {len(recs)} memory(ies) the agent kept wait until it is read again"
        if change is not None:
            text = change.new or ""
        elif rel in current:
            pf, data = current[rel]
            text = pf.text
            plan.expected[rel] = _sha(data)
        elif path.exists() or path.is_symlink() or (link.format == "claude-code" and not index_free):
            plan.left.append(wait)
            continue
        else:
            text = ""
        head = text if text else _new_file(link, recs[0].category, now)
        if head.strip() and not head.endswith("\n\n") and not starts_block(head.rstrip("\n").rsplit("\n", 1)[-1]):
            head = head.rstrip("\n") + "\n\n"  # a paragraph before: a blank line, so the bullets are notes of their own
        bullets = "".join(f"- {_note_text(r.content, bullet=True, indent='  ')}\n" for r in recs)
        if _crlf(text):
            bullets = bullets.replace("\n", "\r\n")
            head = head.replace("\r\n", "\n").replace("\n", "\r\n")
        new = head + bullets
        blocks = [b for b in parse_file(link.format, rel, new).blocks if b.start >= len(head)]
        if len(blocks) != len(recs):
            plan.left.append(f"{path}: {len(recs)} memory(ies) the agent kept do not read back as notes; not written")
            continue
        for rec, block in zip(recs, blocks, strict=True):
            plan.notes[note_key(rel, block.heading, block.text)] = _note(rec, rel)
            caused(rec.id)
        reason = f"{len(recs)} memory(ies) the agent kept, written in"
        if change is not None:
            change.new, change.reason = new, f"{change.reason}; {reason}"
        elif text:
            plan.changes.append(FileChange(rel, text, new, reason=reason))
        else:
            plan.expected[rel] = ABSENT
            started.append(FileChange(rel, None, new, reason=reason, source=INDEX_FILE))
    if started and link.format == "claude-code":
        _index_started(plan, link, current, started)
    plan.changes.extend(started)


def _index_started(
    plan: WritePlan, link: FolderLink, current: dict[str, tuple[ParsedFile, bytes]], started: list[FileChange]
) -> None:
    """A line in ``MEMORY.md`` for each topic file the write-back starts (the file is written only if the line is)."""
    change, text = _appending_to(plan, current, INDEX_FILE, "")
    if text and not text.endswith("\n"):
        text += "\n"
    lines = "".join(f"- [{c.rel[:-3]}]({c.rel}) — {_KEPT_TITLE.format(category=c.rel[:-3])}\n" for c in started)
    if _crlf(text):
        lines = lines.replace("\n", "\r\n")
    reason = f"indexed {len(started)} topic file(s) of memories the agent kept"
    _append_change(plan, current, INDEX_FILE, change, text + lines, reason)


def _drop_index_lines(plan: WritePlan, link: FolderLink, gone: set[str]) -> None:
    path = link.folder / INDEX_FILE
    if not path.exists():
        return
    change = next((c for c in plan.changes if c.rel == INDEX_FILE and c.new is not None), None)
    old = path.read_text(encoding="utf-8")
    text = change.new if change else old
    kept = [ln for ln in text.splitlines(keepends=True) if not any(f"]({g})" in ln for g in gone)]
    new = "".join(kept)
    if new == text:
        return
    if change:
        change.new = new
    else:
        plan.expected.setdefault(INDEX_FILE, _sha(old.encode("utf-8")))
        plan.changes.append(FileChange(INDEX_FILE, old, new, reason="index lines of archived topic files"))


def _trim_index(plan: WritePlan, link: FolderLink, state: dict) -> None:
    """Keep MEMORY.md within ``INDEX_LINE_BUDGET`` lines (``index_budget.trim``): the lines past it move to
    ``CONTINUED_FILE``, which is written first; MEMORY.md is written only if that write was (``source``)."""
    path, more = link.folder / INDEX_FILE, link.folder / CONTINUED_FILE
    change = next((c for c in plan.changes if c.rel == INDEX_FILE and c.new is not None), None)
    if change is not None:
        text = change.new or ""
    elif path.exists():
        data = path.read_bytes()
        if _sha(data) != state["files"].get(INDEX_FILE):
            return  # edited since the last read (left for the next cycle, see plan.left)
        text = data.decode("utf-8")
    else:
        return
    if len(text.splitlines()) <= INDEX_LINE_BUDGET:
        return
    known = next((c for c in plan.changes if c.rel == CONTINUED_FILE and c.new is not None), None)
    if known is not None:
        continued: str | None = known.new
    elif more.exists():
        data = more.read_bytes()
        if _sha(data) != state["files"].get(CONTINUED_FILE):
            plan.left.append(f"{path}: over {INDEX_LINE_BUDGET} lines; trimmed once {more} is read again")
            return
        continued = data.decode("utf-8")
    else:
        continued = None
    result = index_budget.trim(text, continued)
    if result is None:
        plan.left.append(f"{path}: over the {INDEX_LINE_BUDGET} lines a session loads, with no cut between notes")
        return
    for old_block, new_block in result.moved:
        info = plan.notes.pop(note_key(INDEX_FILE, old_block.heading, old_block.text), None)
        if info is not None:
            plan.notes[note_key(CONTINUED_FILE, new_block.heading, new_block.text)] = {**info, "file": CONTINUED_FILE}
    reason = f"kept within the {INDEX_LINE_BUDGET} lines a session loads: {result.lines} line(s) to {CONTINUED_FILE}"
    if known is not None:
        known.new = result.continued
    else:
        plan.expected[CONTINUED_FILE] = _sha(continued.encode("utf-8")) if continued is not None else ABSENT
        at = plan.changes.index(change) if change is not None else len(plan.changes)
        plan.changes.insert(at, FileChange(CONTINUED_FILE, continued, result.continued, reason=reason))
    if change is not None:
        change.new, change.reason, change.source = result.index, f"{change.reason}; {reason}", CONTINUED_FILE
    else:
        plan.expected[INDEX_FILE] = _sha(text.encode("utf-8"))
        plan.changes.append(FileChange(INDEX_FILE, text, result.index, reason=reason, source=CONTINUED_FILE))


def _diary(plan: WritePlan, link: FolderLink, now: datetime) -> None:
    path = link.folder / DREAMS_FILE
    old = path.read_text(encoding="utf-8") if path.exists() else None
    lines = [promotion.diary_line(p) for p in plan.promotions]
    lines += [f"{c.rel}: {c.reason}" + (f" (moved to {c.move_to})" if c.move_to else "") + "." for c in plan.changes]
    plan.expected[DREAMS_FILE] = _sha(old.encode("utf-8")) if old is not None else ABSENT
    new = promotion.diary(old, lines, now)
    plan.changes.append(FileChange(DREAMS_FILE, old, new, reason="dream diary"))


def _before_replace(path: Path) -> None:
    """Runs between the last comparison of a file's bytes and its replace (a test widens that window here)."""


def _outside(root: Path, path: Path) -> str | None:
    """Why writing ``path`` would leave the linked folder ``root`` (a symlinked folder or file on the way, resolved
    now), or None."""
    real_root = Path(os.path.realpath(root))
    for step in (path.parent, path):
        real = Path(os.path.realpath(step))
        if not real.is_relative_to(real_root):
            return f"{path}: resolves to {real}, outside the linked folder {root}; not written"
    return None


def _move_unless_changed(path: Path, target: Path, expected: str) -> str | None:
    """Move ``path`` to ``target`` while it holds the bytes hashed ``expected``; a save that lands in the instant
    of the move is moved back in place. None when moved, else why not."""
    if target.exists():
        return f"{target} exists"
    if _sha(path.read_bytes()) != expected:
        return f"{path}: edited while the cycle ran"
    _before_replace(path)
    os.rename(path, target)
    if _sha(target.read_bytes()) == expected:
        return None
    try:
        os.link(target, path)  # the person's save goes back where they made it
    except FileExistsError:
        return f"{path}: edited while the cycle ran; their earlier save is kept at {target}"
    target.unlink()
    return f"{path}: edited while the cycle ran"


def apply_write_back(
    profile: AgentProfile | str | Path,
    plan: WritePlan,
    cycle_id: str | None = None,
    *,
    hold: dict[str, str] | None = None,
) -> PassReport:
    """Write ``plan``: one replace per file, a move into ``archive/`` for a whole file; archived notes reach their
    archive file before they leave theirs. A file whose bytes changed since the plan read them (a person saved it)
    is left alone, even in the instant of the replace (``replace_unless_changed``), and read again next cycle. Every
    path is resolved again right before it is written: one leading out of the linked folder (``archive/`` swapped
    for a symlink) is refused and named, and the write-back fails. With ``cycle_id`` the files' texts before the
    write are kept so ``undo_files`` (``dream undo --cycle``) can put them back. The files of ``hold`` (file ->
    why) are left as they are, like a file a person edited."""
    profile = as_profile(profile)
    report = PassReport(WRITE_STEP)
    root = plan.link.folder
    for line in plan.left:
        report.info(line)
    state = _load_state(profile)
    undo: dict = {
        "folder": str(root),
        "notes": state["notes"],
        "files": {},
        "written": {},
        "cycles": sorted(plan.cycles),
    }
    dropped: set[str] = set()
    refused: list[str] = []
    edited = "edited while the cycle ran; left as the person wrote it, read again next cycle"

    def as_planned(rel: str) -> tuple[bool, bytes | None]:
        """Whether ``rel`` still holds what the plan read (when the plan names it), and its bytes now."""
        path = root / rel
        now = path.read_bytes() if path.exists() else None
        expected = plan.expected.get(rel)
        return expected is None or (_sha(now) if now is not None else ABSENT) == expected, now

    for rel, why in (hold or {}).items():
        dropped.add(rel)
        report.info(why)
    for change in plan.changes:  # files edited since the plan: left, and the archive copies of their notes too
        if change.rel in dropped:
            continue
        if change.copy_of is None and not as_planned(change.rel)[0]:
            dropped.add(change.rel)
            report.info(f"{root / change.rel}: {edited}")
    journal = _UndoJournal(profile, state, cycle_id, undo)
    written = 0
    for change in plan.changes:
        path = root / change.rel
        if not root.is_dir():
            _save_state(profile, state)
            return report.fail(f"linked folder {root} disappeared during the write-back; {path} was not written")
        if change.rel in dropped:
            continue
        if (
            change.source in dropped
            or change.archive in dropped
            or (change.copy_of is not None and change.copy_of in dropped)
        ):
            dropped.add(change.rel)
            continue
        try:
            if change.new is None:
                target = root / str(change.move_to)
                why = _outside(root, path) or _outside(root, target)
                if why is None:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    why = _outside(root, target)
                if why is not None:
                    refused.append(why)
                    dropped.add(change.rel)
                    continue
                journal.before(change.rel, change.old, {"moved_to": change.move_to})
                left = _move_unless_changed(path, target, plan.expected[change.rel])
                if left is not None:
                    journal.not_written(change.rel)
                    report.info(f"{left}; left as the person wrote it, read again next cycle")
                    dropped.add(change.rel)
                    continue
                state["files"].pop(change.rel, None)
                written += 1
                report.change("folder-archived-file", change.rel, f"moved to {change.move_to}")
                continue
            why = _outside(root, path)
            if why is None:
                path.parent.mkdir(parents=True, exist_ok=True)  # archive/ and its subfolders, inside the folder
                why = _outside(root, path)
            if why is not None:
                refused.append(why)
                dropped.add(change.rel)
                continue
            same, before = as_planned(change.rel)
            if not same:
                report.info(f"{path}: {edited}")
                dropped.add(change.rel)
                continue
            kept_files = [c.rel for c in plan.changes if c.new is None and c.rel in dropped]
            if change.rel == INDEX_FILE and change.old is not None and kept_files and plan.link.format == "claude-code":
                change.new = _with_index_lines(change.new, change.old, kept_files)
                if change.new == change.old:
                    continue
            mode = path.stat().st_mode & 0o7777 if path.exists() else None
            entry = {"sha256": _sha(change.new.encode("utf-8"))}
            if change.rel == INDEX_FILE:
                entry["text"] = change.new
            journal.before(change.rel, change.old, entry)  # kept before the write: a kill after it can be undone
            done = replace_unless_changed(path, change.new, before, permissions=mode, before_replace=_before_replace)
            if not done.written:
                journal.not_written(change.rel)
                kept = f"; a save made in the same instant is kept at {done.kept}" if done.kept else ""
                report.info(f"{path}: {edited}{kept}")
                dropped.add(change.rel)
                continue
            if is_memory_file(plan.link.format, change.rel):
                state["files"][change.rel] = _sha(change.new.encode("utf-8"))
            written += 1
            report.change("folder-rewritten", change.rel, change.reason)
        except OSError as exc:
            _save_state(profile, state)
            return report.fail(f"{path}: could not be written ({exc.strerror or exc}); folder {root}")
    notes = {k: v for k, v in plan.notes.items() if v["file"] not in dropped}
    for key, info in state["notes"].items():
        if info["file"] in dropped or key not in plan.read_keys:  # left as they are, or read since the plan
            notes[key] = info
    state["notes"] = notes
    _save_state(profile, state)
    report.count("files_written", written)
    left = len(dropped) - len(refused)
    report.summary = f"wrote {written} file(s) of {root}" + (f", left {left} edited" if left else "")
    report.summary += f", refused {len(refused)} outside the folder" if refused else ""
    if refused:
        return report.fail("; ".join(refused))
    return report


def linked(profile: AgentProfile | str | Path) -> bool:
    """Whether a memory folder is linked to the agent."""
    return as_profile(profile).memory_folder_link_path.exists()


def _undo_path(profile: AgentProfile, cycle_id: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cycle_id)
    return profile.memory_folder_undo_dir / f"{safe}.json"


class _UndoJournal:
    """What a write-back replaces, kept on disk before each write (``memory-folder-undo/<cycle>.json``; a ``dream
    sync`` under a number of its own), with the change sets the write-back writes out (``cycles``), so the undo of
    any of them puts the files back (``undo_files``), a write-back killed half-way included."""

    def __init__(self, profile: AgentProfile, state: dict, cycle_id: str | None, undo: dict) -> None:
        self.profile, self.state, self.cycle_id, self.undo = profile, state, cycle_id, undo
        self.path: Path | None = None
        self.first: dict | None = None

    def before(self, rel: str, old: str | None, written: dict) -> None:
        if self.path is None:
            self.state["undo_seq"] = int(self.state.get("undo_seq", 0)) + 1
            _save_state(self.profile, self.state)
            self.path = _undo_path(self.profile, self.cycle_id or f"sync-{self.state['undo_seq']:06d}")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():  # a second write-back in the same cycle: the first one's "before" is kept
                self.first = json.loads(self.path.read_text(encoding="utf-8"))
        self.undo["files"][rel] = old
        self.undo["written"][rel] = written
        self._save()

    def not_written(self, rel: str) -> None:
        self.undo["files"].pop(rel, None)
        self.undo["written"].pop(rel, None)
        self._save()

    def _save(self) -> None:
        assert self.path is not None
        undo = {**self.undo, "seq": self.state["undo_seq"]}
        first = self.first
        if first is not None:
            undo = {**undo, "notes": first["notes"], "files": {**undo["files"], **first["files"]}}
            undo["written"] = {**first["written"], **self.undo["written"]}
            undo["cycles"] = sorted({*first.get("cycles", []), *self.undo["cycles"]})
        atomic_write(self.path, json.dumps(undo, indent=1, sort_keys=True) + "\n")


@dataclass
class FolderUndo:
    """What ``undo_files`` did: one line per file, and the files it could not put back (each named in a line)."""

    lines: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def put_back(self, line: str) -> None:
        self.lines.append(line)

    def refuse(self, line: str) -> None:
        self.lines.append(f"NOT put back {line}")
        self.refused.append(line)


def _undo_files_of(profile: AgentProfile, cycle_id: str, result: FolderUndo) -> list[tuple[Path, dict]]:
    """The write-backs to undo with change set ``cycle_id``, newest first: its own cycle's, and every write-back
    (a ``dream sync``, a later cycle's) that wrote out its changes. An unreadable record is named as refused."""
    folder = profile.memory_folder_undo_dir
    own = _undo_path(profile, cycle_id)
    found: list[tuple[Path, dict]] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if path.name.endswith(".undone.json"):
            continue
        try:
            undo = read_json_file(path)
            if not isinstance(undo, dict) or not isinstance(undo.get("written"), dict):
                raise UnreadableFile(f"{path}: not a write-back's undo record")
        except (UnreadableFile, FileNotFoundError) as exc:
            result.refuse(f"the files of the write-back recorded in {path}: {exc}")
            continue
        if path == own or cycle_id in undo.get("cycles", []):
            found.append((path, undo))
    return sorted(found, key=lambda item: int(item[1].get("seq", 0)), reverse=True)


def _links_to(line: str, rels: list[str] | set[str]) -> bool:
    return any(f"]({rel})" in line for rel in rels)


def _with_index_lines(text: str, old: str, rels: list[str] | set[str]) -> str:
    """``text`` (an index) with the lines of ``old`` that link one of ``rels`` and that it lacks, each after the line
    it followed in ``old`` (or at the end)."""
    lines = text.splitlines(keepends=True)
    old_lines = old.splitlines(keepends=True)
    for i, line in enumerate(old_lines):
        if not _links_to(line, rels) or line in lines:
            continue
        anchor = next((lines.index(o) for o in reversed(old_lines[:i]) if o in lines), None)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        line = line if line.endswith("\n") else line + "\n"
        lines.insert(len(lines) if anchor is None else anchor + 1, line)
    return "".join(lines)


def _index_lines_back(root: Path, undo: dict, moved_back: list[str], result: FolderUndo, refused: str | None) -> None:
    """Put back the ``MEMORY.md`` lines that linked the files ``moved_back`` when the index itself could not be put
    back whole (``refused``: the agent or a person edited it since): each line goes after the line it followed, or at
    the end, and their edits stay. The index counts as put back when those lines were all the write-back changed in
    it, else as refused."""
    old = undo["files"].get(INDEX_FILE)
    path = root / INDEX_FILE
    if old is not None and moved_back and path.exists():
        data = path.read_bytes()
        new = _with_index_lines(data.decode("utf-8"), old, moved_back)
        if new != data.decode("utf-8"):
            done = replace_unless_changed(path, new, data, permissions=path.stat().st_mode & 0o7777)
            if not done.written:
                result.refuse(f"{path}: edited while the undo ran; the lines linking {', '.join(moved_back)} are not")
                return
            result.put_back(f"put back the line(s) linking {', '.join(moved_back)} in {path}")
        written = undo["written"].get(INDEX_FILE, {}).get("text")
        rest = "".join(ln for ln in old.splitlines(keepends=True) if not _links_to(ln, moved_back))
        if refused and written is not None and written == rest:
            return  # the lines the write-back took out were all it changed, and they are back
    if refused:
        result.refuse(refused)


def undo_files(profile: AgentProfile | str | Path, cycle_id: str) -> FolderUndo:
    """Put back the folder files the write-backs of change set ``cycle_id`` changed (after ``dream undo --cycle``
    put the store back): its cycle's own write-back and any ``dream sync`` or later cycle that wrote its changes
    out, newest first. A file edited since is left as it is and named as refused, except the lines of ``MEMORY.md``
    that linked a file put back, which come back with it; a file the write-back created stays when it only holds
    copies (an archive file) and moves to ``archive/`` when it is a memory file (what it held is back in place: the
    lines a trimmed index moved, a new MEMORY.md of promotions)."""
    profile = as_profile(profile)
    result = FolderUndo()
    for path, undo in _undo_files_of(profile, cycle_id, result):
        _undo_one(profile, path, undo, result)
        os.replace(path, path.with_suffix(".undone.json"))
    return result


def _before_undo_step(path: Path) -> None:
    """Runs before each file an undo puts back, between the two steps of a move back, and before the index lines
    (a test kills the undo at each: run again, it finishes the job)."""


def _undoing(record: Path, undo: dict, rel: str, where: str) -> None:
    """Note in the undo record, before the file is touched, that the undo puts ``rel`` back (``where``: the path it
    ends at, or where it moves to): a run after a kill knows the file it finds as put back from its own work."""
    undo.setdefault("undone", {})[rel] = where
    atomic_write(record, json.dumps(undo, indent=1, sort_keys=True) + "\n")


def _same_bytes(path: Path, text: str) -> bool:
    return path.read_bytes() == text.encode("utf-8")


def _undo_one(profile: AgentProfile, record: Path, undo: dict, result: FolderUndo) -> None:
    """Put back the files of one write-back (its undo record ``record``). Safe to run again after a kill: a file
    already put back by the run that was killed is recognised as put back (never refused as edited)."""
    root = Path(undo["folder"])
    link = load_link(profile)
    fmt = link.format if link is not None else "markdown"
    state = _load_state(profile)
    moved_back: list[str] = []
    left: set[str] = set()  # files not put back
    index_refused: str | None = None
    for rel, written in sorted(undo["written"].items()):
        old = undo["files"].get(rel)
        target = root / rel
        _before_undo_step(target)
        if "moved_to" in written:
            moved = root / written["moved_to"]
            if moved.exists() and target.exists() and os.path.samefile(moved, target):  # killed between link, unlink
                moved.unlink()
            if not moved.exists() and target.is_file() and old is not None and _same_bytes(target, old):
                if rel in undo.get("undone", {}):  # put back by an undo that was killed before it finished
                    state["files"][rel] = _sha(target.read_bytes())
                    moved_back.append(rel)
                    result.put_back(f"put back {target} from {moved}")
                else:
                    result.put_back(f"{target}: as it was (the write-back stopped before moving it)")
                continue
            if target.exists() or not moved.exists():
                result.refuse(f"{target}: {moved} is gone or {target} exists again")
                left.add(rel)
                continue
            _undoing(record, undo, rel, written["moved_to"])
            try:
                os.link(moved, target)  # never over a file that appeared in the meantime
            except FileExistsError:
                result.refuse(f"{target}: exists again")
                left.add(rel)
                continue
            _before_undo_step(moved)
            moved.unlink()
            state["files"][rel] = _sha(target.read_bytes())
            moved_back.append(rel)
            result.put_back(f"put back {target} from {moved}")
            continue
        found = target.read_bytes() if target.is_file() else None
        if found is not None and old is not None and _same_bytes(target, old) and _sha(found) != written["sha256"]:
            if is_memory_file(fmt, rel):
                state["files"][rel] = _sha(found)
            if rel in undo.get("undone", {}):  # put back by an undo that was killed before it finished
                result.put_back(f"put back {target}")
            else:
                result.put_back(f"{target}: as it was (the write-back stopped before writing it)")
            continue
        moved_away = undo.get("undone", {}).get(rel)
        if found is None and old is None and moved_away and (root / moved_away).is_file():
            if _sha((root / moved_away).read_bytes()) == written["sha256"]:  # moved by an undo that was killed
                state["files"].pop(rel, None)
                result.put_back(f"moved {target} to {root / moved_away}: created by the cycle, what it held is back")
                continue
        if found is None or _sha(found) != written["sha256"]:
            if rel == INDEX_FILE and fmt == "claude-code":
                index_refused = f"{target}: edited since the cycle wrote it"
                left.add(rel)
                continue
            result.refuse(f"{target}: edited since the cycle wrote it")
            left.add(rel)
            continue
        if old is None and is_memory_file(fmt, rel):  # what it holds is back where it came from
            moved = root / _archive_name(rel, set(), root)
            why = _outside(root, moved)
            if why is not None:
                result.refuse(why)
                left.add(rel)
                continue
            moved.parent.mkdir(parents=True, exist_ok=True)
            _undoing(record, undo, rel, moved.relative_to(root).as_posix())
            os.rename(target, moved)
            state["files"].pop(rel, None)
            result.put_back(f"moved {target} to {moved}: created by the cycle, what it held is back in place")
            continue
        if old is None:
            result.put_back(f"kept {target}: created by the cycle, it holds copies only")
            continue
        mode = target.stat().st_mode & 0o7777
        _undoing(record, undo, rel, rel)
        if not replace_unless_changed(target, old, found, permissions=mode).written:
            result.refuse(f"{target}: edited while the undo ran")
            left.add(rel)
            continue
        if is_memory_file(fmt, rel):
            state["files"][rel] = _sha(old.encode("utf-8"))
        result.put_back(f"put back {target}")
    _before_undo_step(root / INDEX_FILE)
    if fmt == "claude-code":
        _index_lines_back(root, undo, moved_back, result, index_refused)
    # the notes as the write-back found them, but those of a file left as it is now: they are what it holds
    notes = {k: v for k, v in undo["notes"].items() if v["file"] not in left}
    notes.update({k: v for k, v in state["notes"].items() if v["file"] in left})
    state["notes"] = notes
    _save_state(profile, state)
