"""Export and import of an agent's memory: a lossless JSONL of the store, and mem0's memory format both ways.

JSONL (``export_jsonl`` / ``import_jsonl``): one JSON object per line, sorted keys, in a fixed order: a header
(``{"kind": "dream-export", "version": 1}``), the memories (``kind: memory``, every field of the entry, metadata and
provenance included) by creation time and id, the skills (``kind: skill``) by name, then the change log (``kind:
change``, every row as stored: ids, times, before and after, undone) in its order. Without ``archived`` only live
memories and skills, and the change rows about them, are written. Exporting, importing into an empty profile and
exporting again gives the same bytes.

mem0 (``export_mem0`` / ``import_mem0``): the shape mem0's ``get_all`` returns, ``{"results": [{"id", "memory",
"hash", "metadata", "created_at", "updated_at", "user_id", ...}]}``; ``hash`` is the MD5 of the memory text as mem0
computes it. Import also takes a JSON list of such records, one record, or one record per line; a graph export's
``relations`` (before or after ``results``) are not memories: they are counted and left out. mem0's own fields are
kept in metadata (``mem0.metadata`` as JSON, ``mem0.user_id``, ...) so an export gives them back. mem0 has no
archive: with ``archived`` an archived memory's metadata carries a ``dream`` block (``archived_at``,
``archived_reason``, ``merged_into``, ``superseded_by``), and an import makes such a record an archived entry again,
its successor kept in its metadata (``mergedInto``, ``supersededBy``, ``archivedReason``), so a round trip does not
put a corrected fact back beside its correction.

An import checks every field of every record first (``import_checks.py``: the rules a save applies, and no time
more than a year ahead) and refuses the whole file, naming the file, line and field of each problem (an id twice in
the file or already in the store included); otherwise it writes everything in one store transaction. A UTF-8
byte-order mark and CRLF line ends are taken.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from dream_assets.agent_memory import successor
from dream_assets.model import MemoryEntry, Skill, iso, utc_or_now
from dream_assets.passes.model_text import problem, shown
from dream_assets.profile import AgentProfile, as_profile
from dream_assets.service import import_checks as checks
from dream_assets.store import DreamStore, open_store
from dream_assets.store.changes import ChangeRecord
from dream_assets.store.memory import ARCHIVED_REASON_KEY, MERGED_INTO_KEY, SUPERSEDED_BY_KEY

HEADER = {"kind": "dream-export", "version": 1}
#: The key, in an archived memory's mem0 metadata, of its archive state (see the module).
DREAM_STATE_KEY = "dream"
MEM0_SCOPES = ("user_id", "agent_id", "app_id", "run_id", "actor_id", "role")
MAX_REPORTED = 50


class ImportRefused(ValueError):
    """The file was not imported (nothing was); ``problems`` name the file and line of each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = problems[:MAX_REPORTED]
        more = f" (and {len(problems) - len(shown)} more)" if len(problems) > len(shown) else ""
        super().__init__("nothing imported: " + "; ".join(shown) + more)


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False) + "\n"


def _change_dict(row: ChangeRecord) -> dict[str, Any]:
    return {
        "kind": "change",
        "change_id": row.change_id,
        "cycle_id": row.cycle_id,
        "pass_name": row.pass_name,
        "change_kind": row.kind,
        "target_type": row.target_type,
        "target_id": row.target_id,
        "before": row.before,
        "after": row.after,
        "reason": row.reason,
        "created_at": iso(row.created_at),
        "undone_at": iso(row.undone_at),
    }


def export_jsonl(profile: AgentProfile | str | Path, *, archived: bool = False) -> str:
    """The store as JSONL text (see the module)."""
    store = open_store(as_profile(profile))
    memories = store.memories.list_all() if archived else store.memories.list_live()
    skills = store.skills.list(include_archived=archived)
    ids = {m.id for m in memories} | {s.name for s in skills}
    out = [_line(HEADER)]
    out += [_line({"kind": "memory", **m.to_dict()}) for m in sorted(memories, key=lambda m: (m.created_at, m.id))]
    out += [_line({"kind": "skill", **s.to_dict()}) for s in sorted(skills, key=lambda s: s.name)]
    out += [_line(_change_dict(r)) for r in store.changes.list() if archived or r.target_id in ids]
    return "".join(out)


def _parse_lines(path: Path, text: str) -> Iterable[tuple[int, Any, str | None]]:
    # Lines end at "\n" only (a "\r" before it goes too): an export writes U+2028 and U+0085 inside its strings as
    # they are, and ``str.splitlines`` would cut a record there.
    for n, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            yield n, json.loads(raw), None
        except ValueError as exc:
            yield n, None, f"{path}:{n}: not JSON ({exc.msg})"


def _read_text(path: Path) -> str:
    """The file as text; a UTF-8 byte-order mark (which editors on Windows write) is not part of it."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportRefused([f"{path}: not UTF-8 text (byte {exc.start})"]) from exc
    except OSError as exc:
        raise ImportRefused([f"{path}: cannot be read ({exc.strerror})"]) from exc
    return text.removeprefix("\ufeff")


def _max_content(store: DreamStore) -> int:
    return store.options.MaxContentChars


def import_jsonl(profile: AgentProfile | str | Path, path: Path, now: datetime | None = None) -> dict[str, int]:
    """Import a JSONL export (see the module); returns counts per kind. Raises ``ImportRefused``."""
    path = Path(path)
    now = utc_or_now(now)
    text = _read_text(path)
    store = open_store(as_profile(profile))
    problems: list[str] = []
    memories: list[tuple[str, MemoryEntry]] = []
    skills: list[tuple[str, Skill]] = []
    changes: list[tuple[str, dict[str, Any]]] = []
    header_seen = False
    for n, obj, err in _parse_lines(path, text):
        where = f"{path}:{n}"
        if err:
            problems.append(err)
            continue
        if not isinstance(obj, dict) or "kind" not in obj:
            problems.append(f"{where}: not an object with a kind")
            continue
        kind = obj["kind"]
        try:
            if kind == "dream-export":
                if obj.get("version") != 1:
                    problems.append(f"{where}: field version {shown(obj.get('version'), 40)} is not 1")
                header_seen = True
            elif kind == "memory":
                memories.append((where, checks.memory(obj, now, _max_content(store))))
            elif kind == "skill":
                skills.append((where, checks.skill(obj, now)))
            elif kind == "change":
                changes.append((where, checks.change(obj, now)))
            else:
                problems.append(f"{where}: field kind {shown(kind, 40)!r} is not dream-export, memory, skill or change")
        except checks.Bad as exc:
            problems.append(f"{where}: {exc}")
    if not header_seen and not problems:
        problems.append(f"{path}:1: no dream-export header line; use --format mem0 for a mem0 export")
    problems += _clashes(store, memories, skills, changes)
    if problems:
        raise ImportRefused(problems)
    with store.transaction():
        if memories:
            store.memories.put_many([m for _, m in memories])
        for _, skill in skills:
            store.skills.put(skill)
        if changes:
            store.changes.put_exact([c for _, c in changes])
    return {"memories": len(memories), "skills": len(skills), "changes": len(changes)}


def _clashes(
    store: DreamStore,
    memories: list[tuple[str, MemoryEntry]],
    skills: list[tuple[str, Skill]],
    changes: list[tuple[str, dict[str, Any]]],
) -> list[str]:
    """An id twice in the file, or one the store already holds, named with the line of each."""
    problems: list[str] = []
    agent = store.profile.agent_id

    def twice(what: str, items: list[tuple[str, str]], held: set[str]) -> None:
        first: dict[str, str] = {}
        for where, key in items:
            if key in first:
                problems.append(f"{where}: {what} {shown(key)} appears twice (first at {first[key]})")
                continue
            first[key] = where
            if key in held:
                problems.append(f"{where}: {what} {shown(key)} is already in the store of {agent}")

    twice("memory", [(w, m.id) for w, m in memories], set(store.memories.get_many([m.id for _, m in memories])))
    names = {s.name for s in store.skills.list(include_archived=True)} if skills else set()
    twice("skill", [(w, s.name) for w, s in skills], names)
    held = {r.change_id for r in store.changes.list()} if changes else set()
    twice("change", [(w, c["change_id"]) for w, c in changes], held)
    return problems


# --- mem0 -----------------------------------------------------------------------------------------------------------


def _mem0_hash(text: str) -> str:
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def _archive_state(entry: MemoryEntry, rows: list[ChangeRecord]) -> dict[str, Any]:
    """The ``dream`` block of an archived entry's mem0 metadata: when and why it was archived, and the entry its fact
    lives on in (merged into, superseded by) where known."""
    merged, superseded, reason = successor(entry, rows)
    state = {"archived_at": iso(entry.archived_at), "archived_reason": reason}
    state.update({"merged_into": merged, "superseded_by": superseded})
    return {k: v for k, v in state.items() if v}


def _mem0_record(entry: MemoryEntry, rows: list[ChangeRecord]) -> dict[str, Any]:
    meta = entry.metadata
    try:
        own = json.loads(meta["mem0.metadata"]) if "mem0.metadata" in meta else None
    except ValueError:
        own = None
    if not isinstance(own, dict):
        own = {k: v for k, v in meta.items() if not k.startswith("mem0.")}
        own.update({"category": entry.category, "tags": list(entry.tags), "importance": entry.importance})
    if entry.archived_at is not None:
        own[DREAM_STATE_KEY] = _archive_state(entry, rows)
    record: dict[str, Any] = {
        "id": meta.get("mem0.id", entry.id),
        "memory": entry.content,
        "hash": _mem0_hash(entry.content),
        "metadata": own,
        "created_at": meta.get("mem0.created_at", iso(entry.created_at)),
        "updated_at": meta.get("mem0.updated_at", iso(entry.updated_at)),
    }
    for scope in MEM0_SCOPES:
        if f"mem0.{scope}" in meta:
            record[scope] = meta[f"mem0.{scope}"]
    if "mem0.categories" in meta:
        record["categories"] = json.loads(meta["mem0.categories"])
    return record


def export_mem0(profile: AgentProfile | str | Path, *, archived: bool = False) -> str:
    """The memories in mem0's ``get_all`` shape (JSON)."""
    store = open_store(as_profile(profile))
    memories = store.memories.list_all() if archived else store.memories.list_live()
    rows: dict[str, list[ChangeRecord]] = {}
    if any(m.is_archived for m in memories):
        for row in store.changes.list():
            if row.target_type == "memory":
                rows.setdefault(row.target_id, []).append(row)
    records = [_mem0_record(m, rows.get(m.id, [])) for m in sorted(memories, key=lambda m: (m.created_at, m.id))]
    return json.dumps({"results": records}, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


_DECODER = json.JSONDecoder()


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _array_items(text: str, i: int) -> list[tuple[int, Any]]:
    """The items of the JSON array at ``text[i] == "["``, each with where it starts (the document parsed already)."""
    out: list[tuple[int, Any]] = []
    i = _skip(text, i + 1)
    while text[i] != "]":
        item, end = _DECODER.raw_decode(text, i)
        out.append((i, item))
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)
    return out


def _results_at(text: str, i: int) -> int | None:
    """Where the value of key ``results`` starts in the JSON object at ``text[i] == "{"`` (None: no such key)."""
    i = _skip(text, i + 1)
    while text[i] != "}":
        key, i = _DECODER.raw_decode(text, i)
        i = _skip(text, _skip(text, i) + 1)  # the colon
        if key == "results":
            return i
        _, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if text[i] == ",":
            i = _skip(text, i + 1)
    return None


def _mem0_records(path: Path, text: str) -> tuple[list[tuple[str, Any]], int]:
    """The records of a mem0 file with where each starts (``file:line``), and how many graph relations it holds
    beside them (mem0's graph memory; not memories, so not imported). A whole JSON document (``{"results": [...]}``,
    with ``relations`` before or after, or a list) or one record per line."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        if text.lstrip().startswith("["):
            raise ImportRefused([f"{path}:{exc.lineno}: not JSON ({exc.msg})"]) from exc
        doc = None
    line = lambda i: f"{path}:{text.count(chr(10), 0, i) + 1}"  # noqa: E731
    if isinstance(doc, list):
        return [(line(i), item) for i, item in _array_items(text, _skip(text, 0))], 0
    if isinstance(doc, dict) and "results" in doc:
        if not isinstance(doc["results"], list):
            raise ImportRefused([f"{path}: field results is not a list"])
        at = _results_at(text, _skip(text, 0))
        assert at is not None  # the key is there
        relations = doc.get("relations")
        return [(line(i), item) for i, item in _array_items(text, at)], len(relations) if isinstance(
            relations, list
        ) else 0
    if isinstance(doc, dict):  # one record, as a whole document
        return [(line(_skip(text, 0)), doc)], 0
    out: list[tuple[str, Any]] = []
    problems = []
    for n, obj, err in _parse_lines(path, text):
        if err:
            problems.append(err)
        out.append((f"{path}:{n}", obj))
    if problems:
        raise ImportRefused(problems)
    return out, 0


def _archive_from(state: object, now: datetime) -> tuple[datetime, dict[str, str]]:
    """An archived entry's time and metadata from the ``dream`` block of its mem0 metadata (``_archive_state``)."""
    if not isinstance(state, dict):
        raise checks.Bad(f"field metadata.{DREAM_STATE_KEY} is not an object")
    when = checks.timestamp(state, "archived_at", now)
    meta: dict[str, str] = {}
    for name, key, kind in (
        ("merged_into", MERGED_INTO_KEY, "id"),
        ("superseded_by", SUPERSEDED_BY_KEY, "id"),
        ("archived_reason", ARCHIVED_REASON_KEY, "text"),
    ):
        if state.get(name) is not None:
            checks.check(state[name], kind, f"metadata.{DREAM_STATE_KEY}.{name}")
            meta[key] = state[name]
    return when, meta  # type: ignore[return-value]


def _mem0_entry(item: object, now: datetime, max_content: int) -> MemoryEntry:
    if not isinstance(item, dict):
        raise checks.Bad("not an object")
    checks.check(item.get("id"), "id", "id")
    checks.check(item.get("memory"), "content", "memory", max_chars=max_content)
    created = checks.timestamp(item, "created_at", now, required=False) or now
    updated = checks.timestamp(item, "updated_at", now, required=False) or created
    own = {} if item.get("metadata") is None else item["metadata"]
    if not isinstance(own, dict):
        raise checks.Bad(f"field metadata is not an object ({type(own).__name__})")
    own = dict(own)
    archived_at, meta = (None, {}) if DREAM_STATE_KEY not in own else _archive_from(own.pop(DREAM_STATE_KEY), now)
    try:
        meta["mem0.metadata"] = json.dumps(own, sort_keys=True, allow_nan=False)
    except ValueError:
        raise checks.Bad("field metadata holds a number JSON cannot write (NaN or infinity)") from None
    meta["mem0.id"] = item["id"]
    for key in ("created_at", "updated_at"):
        if item.get(key):
            meta[f"mem0.{key}"] = str(item[key])
    for scope in MEM0_SCOPES:
        value = item.get(scope)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise checks.Bad(f"field {scope} is not a string ({type(value).__name__})")
        checks.check(str(value), "text", scope, max_chars=checks.MAX_METADATA_CHARS)
        meta[f"mem0.{scope}"] = str(value)
    if item.get("categories"):
        categories = item["categories"]
        if not isinstance(categories, list) or not all(isinstance(c, str) for c in categories):
            raise checks.Bad("field categories is not a list of strings")
        for i, c in enumerate(categories):
            checks.check(c, "text", f"categories[{i}]", max_chars=checks.MAX_METADATA_CHARS)
        meta["mem0.categories"] = json.dumps(categories)
    # mem0's metadata is free-form: a category there that a save would not take stays in it, the entry is filed
    # under "mem0"
    category = own.get("category")
    if problem(category, "category", field="metadata.category") is not None:
        category = "mem0"
    return MemoryEntry(item["id"], item["memory"], category, (), 0.5, created, updated, updated, 1, meta, archived_at)


def import_mem0(profile: AgentProfile | str | Path, path: Path, now: datetime | None = None) -> dict[str, int]:
    """Import mem0 memories (see the module) in one transaction; raises ``ImportRefused``. A record this project
    exported archived (its metadata's ``dream`` block) comes back archived, with its successor."""
    path = Path(path)
    now = utc_or_now(now)
    store = open_store(as_profile(profile))
    problems: list[str] = []
    entries: list[tuple[str, MemoryEntry]] = []
    records, relations = _mem0_records(path, _read_text(path))
    for where, item in records:
        try:
            entries.append((where, _mem0_entry(item, now, _max_content(store))))
        except checks.Bad as exc:
            problems.append(f"{where}: {exc}")
    problems += _clashes(store, entries, [], [])
    if problems:
        raise ImportRefused(problems)
    with store.transaction():
        if entries:
            store.memories.put_many([e for _, e in entries])
    counts = {"memories": len(entries)}
    if relations:
        counts["graph relations left out (not memories)"] = relations
    return counts
