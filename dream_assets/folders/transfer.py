"""Export and import of an agent's memory: a lossless JSONL of the store, and mem0's memory format both ways.

JSONL (``export_jsonl`` / ``import_jsonl``): one JSON object per line, sorted keys, in a fixed order: a header
(``{"kind": "dream-export", "version": 1}``), the memories (``kind: memory``, every field of the entry, metadata and
provenance included) by creation time and id, the skills (``kind: skill``) by name, then the change log (``kind:
change``, every row as stored: ids, times, before and after, undone) in its order. Without ``archived`` only live
memories and skills, and the change rows about them, are written. Exporting, importing into an empty profile and
exporting again gives the same bytes.

mem0 (``export_mem0`` / ``import_mem0``): the shape mem0's ``get_all`` returns, ``{"results": [{"id", "memory",
"hash", "metadata", "created_at", "updated_at", "user_id", ...}]}``; ``hash`` is the MD5 of the memory text as mem0
computes it. Import also takes a JSON list of such records or one record per line. mem0's own fields are kept in
metadata (``mem0.metadata`` as JSON, ``mem0.user_id``, ...) so an export gives them back.

An import checks every line first and refuses the whole file, naming the file and line of each problem (an id the
store already holds included); otherwise it writes everything in one store transaction.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from dream_assets.model import MemoryEntry, Skill, iso, parse_ts, utc_or_now
from dream_assets.passes.model_text import problem
from dream_assets.profile import AgentProfile, as_profile
from dream_assets.store import DreamStore, open_store
from dream_assets.store.changes import ChangeRecord

HEADER = {"kind": "dream-export", "version": 1}
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
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield n, json.loads(raw), None
        except ValueError as exc:
            yield n, None, f"{path}:{n}: not JSON ({exc.msg})"


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportRefused([f"{path}: not UTF-8 text (byte {exc.start})"]) from exc
    except OSError as exc:
        raise ImportRefused([f"{path}: cannot be read ({exc.strerror})"]) from exc


def _content_problem(where: str, entry: MemoryEntry) -> str | None:
    found = problem(entry.content, "content", field="content") or problem(entry.category, "category", field="category")
    return f"{where}: {found}" if found else None


def import_jsonl(profile: AgentProfile | str | Path, path: Path, now: datetime | None = None) -> dict[str, int]:
    """Import a JSONL export (see the module); returns counts per kind. Raises ``ImportRefused``."""
    path = Path(path)
    text = _read_text(path)
    store = open_store(as_profile(profile))
    problems: list[str] = []
    memories: list[MemoryEntry] = []
    skills: list[Skill] = []
    changes: list[dict[str, Any]] = []
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
                    problems.append(f"{where}: field version {obj.get('version')!r} is not 1")
                header_seen = True
            elif kind == "memory":
                entry = MemoryEntry.from_dict(obj)
                found = _content_problem(where, entry)
                if found:
                    problems.append(found)
                memories.append(entry)
            elif kind == "skill":
                skills.append(Skill.from_dict(obj))
            elif kind == "change":
                for name in ("change_id", "cycle_id", "pass_name", "change_kind", "target_type", "target_id"):
                    if not isinstance(obj.get(name), str) or not obj[name]:
                        raise KeyError(name)
                parse_ts(obj["created_at"])
                if obj.get("undone_at"):
                    parse_ts(obj["undone_at"])
                changes.append(obj)
            else:
                problems.append(f"{where}: field kind {kind!r} is not dream-export, memory, skill or change")
        except KeyError as exc:
            problems.append(f"{where}: field {exc.args[0]} is missing or empty")
        except (TypeError, ValueError) as exc:
            problems.append(f"{where}: {exc}")
    if not header_seen and not problems:
        problems.append(f"{path}:1: no dream-export header line; use --format mem0 for a mem0 export")
    problems += _clashes(store, path, memories, skills, changes)
    if problems:
        raise ImportRefused(problems)
    with store.transaction():
        if memories:
            store.memories.put_many(memories)
        for skill in skills:
            store.skills.put(skill)
        if changes:
            store.changes.put_exact(changes)
    return {"memories": len(memories), "skills": len(skills), "changes": len(changes)}


def _clashes(
    store: DreamStore, path: Path, memories: list[MemoryEntry], skills: list[Skill], changes: list[dict]
) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    held = store.memories.get_many([m.id for m in memories])
    for m in memories:
        if m.id in seen:
            problems.append(f"{path}: memory {m.id} appears twice")
        elif m.id in held:
            problems.append(f"{path}: memory {m.id} is already in the store of {store.profile.agent_id}")
        seen.add(m.id)
    for s in skills:
        if store.skills.get(s.name) is not None:
            problems.append(f"{path}: skill {s.name!r} is already in the store of {store.profile.agent_id}")
    held_changes = {r.change_id for r in store.changes.list()} if changes else set()
    for c in changes:
        if c["change_id"] in held_changes:
            problems.append(f"{path}: change {c['change_id']} is already in the change log")
    return problems


# --- mem0 -----------------------------------------------------------------------------------------------------------


def _mem0_hash(text: str) -> str:
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def _mem0_record(entry: MemoryEntry) -> dict[str, Any]:
    meta = entry.metadata
    try:
        own = json.loads(meta["mem0.metadata"]) if "mem0.metadata" in meta else None
    except ValueError:
        own = None
    if own is None:
        own = {k: v for k, v in meta.items() if not k.startswith("mem0.")}
        own.update({"category": entry.category, "tags": list(entry.tags), "importance": entry.importance})
        if entry.archived_at is not None:
            own["archived_at"] = iso(entry.archived_at)
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
    records = [_mem0_record(m) for m in sorted(memories, key=lambda m: (m.created_at, m.id))]
    return json.dumps({"results": records}, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _mem0_records(path: Path, text: str) -> list[tuple[str, Any]]:
    stripped = text.lstrip()
    if stripped.startswith("{") and '"results"' in stripped[:4096] or stripped.startswith("["):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ImportRefused([f"{path}:{exc.lineno}: not JSON ({exc.msg})"]) from exc
        items = doc.get("results") if isinstance(doc, dict) else doc
        if not isinstance(items, list):
            raise ImportRefused([f"{path}: field results is not a list"])
        return [(f"{path}: record {i + 1}", item) for i, item in enumerate(items)]
    out: list[tuple[str, Any]] = []
    problems = []
    for n, obj, err in _parse_lines(path, text):
        if err:
            problems.append(err)
        out.append((f"{path}:{n}", obj))
    if problems:
        raise ImportRefused(problems)
    return out


def import_mem0(profile: AgentProfile | str | Path, path: Path, now: datetime | None = None) -> dict[str, int]:
    """Import mem0 memories (see the module) as live entries in one transaction; raises ``ImportRefused``."""
    path = Path(path)
    now = utc_or_now(now)
    store = open_store(as_profile(profile))
    problems: list[str] = []
    entries: list[MemoryEntry] = []
    for where, item in _mem0_records(path, _read_text(path)):
        if not isinstance(item, dict):
            problems.append(f"{where}: not an object")
            continue
        text = item.get("memory")
        if not isinstance(text, str) or not text.strip():
            problems.append(f"{where}: field memory is missing or empty")
            continue
        mid = item.get("id")
        if not isinstance(mid, str) or not mid:
            problems.append(f"{where}: field id is missing or empty")
            continue
        try:
            created = parse_ts(item["created_at"]) if item.get("created_at") else now
            updated = parse_ts(item["updated_at"]) if item.get("updated_at") else created
        except (TypeError, ValueError) as exc:
            problems.append(f"{where}: field created_at/updated_at: {exc}")
            continue
        meta = {"mem0.id": mid, "mem0.metadata": json.dumps(item.get("metadata") or {}, sort_keys=True)}
        for key in ("created_at", "updated_at"):
            if item.get(key):
                meta[f"mem0.{key}"] = str(item[key])
        for scope in MEM0_SCOPES:
            if item.get(scope) is not None:
                meta[f"mem0.{scope}"] = str(item[scope])
        if item.get("categories"):
            meta["mem0.categories"] = json.dumps(item["categories"])
        own = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
        category = own.get("category") if isinstance(own.get("category"), str) else "mem0"
        entry = MemoryEntry(mid, text, category, (), 0.5, created, updated, updated, 1, meta)
        found = _content_problem(where, entry)
        if found:
            problems.append(found)
            continue
        entries.append(entry)
    problems += _clashes(store, path, entries, [], [])
    if problems:
        raise ImportRefused(problems)
    with store.transaction():
        if entries:
            store.memories.put_many(entries)
    return {"memories": len(entries)}
