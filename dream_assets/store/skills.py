"""Skill catalog on DuckDB: save, get, list, archive, restore. Skills are archived, never deleted."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import duckdb

from dream_assets.model import Skill, utc, utc_or_now
from dream_assets.names import validate_skill_name
from dream_assets.store.connection import StoreConnection
from dream_assets.store.schema import ensure_schema, from_db, to_db

_COLUMNS = "name, summary, content, see_also, created_at, updated_at, last_used_at, archived_at"
MAX_SKILL_CHARS = 64_000


class SkillError(ValueError):
    pass


def _row(row: Sequence[Any]) -> Skill:
    return Skill(
        name=row[0],
        summary=row[1],
        content=row[2],
        see_also=tuple(json.loads(row[3])),
        created_at=from_db(row[4]),
        updated_at=from_db(row[5]),  # type: ignore[arg-type]
        last_used_at=from_db(row[6]),
        archived_at=from_db(row[7]),
    )


class SkillStore:
    def __init__(self, conn: StoreConnection) -> None:
        self._conn = conn
        conn.add_open_hook(ensure_schema)

    @staticmethod
    def validate(skill: Skill) -> Skill:
        validate_skill_name(skill.name)
        if not skill.content.strip():
            raise SkillError(f"skill {skill.name!r}: field 'content' is empty")
        if len(skill.content) > MAX_SKILL_CHARS:
            raise SkillError(
                f"skill {skill.name!r}: content is {len(skill.content)} characters, over {MAX_SKILL_CHARS}"
            )
        see_also = tuple(dict.fromkeys(validate_skill_name(s) for s in skill.see_also if s != skill.name))
        return skill.with_(see_also=see_also, summary=skill.summary.strip())

    def get(self, name: str, *, include_archived: bool = True) -> Skill | None:
        with self._conn.session() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM skills WHERE name = ?", [name]).fetchone()
        if row is None:
            return None
        skill = _row(row)
        return None if skill.is_archived and not include_archived else skill

    def list(self, *, include_archived: bool = False) -> list[Skill]:
        where = "TRUE" if include_archived else "archived_at IS NULL"
        with self._conn.session() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM skills WHERE {where} ORDER BY name").fetchall()
        return [_row(r) for r in rows]

    def list_archived(self) -> list[Skill]:
        with self._conn.session() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM skills WHERE archived_at IS NOT NULL ORDER BY name").fetchall()
        return [_row(r) for r in rows]

    def save(self, skill: Skill, *, now: datetime | None = None) -> Skill:
        """Create or replace a skill (an archived one of the same name is brought back). Keeps created_at of an
        existing skill
        unless the caller set an earlier one (merges carry the earliest)."""
        skill = self.validate(skill)
        now = utc_or_now(now)
        with self._conn.transaction() as conn:
            cur_row = conn.execute(f"SELECT {_COLUMNS} FROM skills WHERE name = ?", [skill.name]).fetchone()
            if cur_row is None:
                created = skill.created_at if skill.created_at.year > 1970 else now
                new = skill.with_(created_at=created, updated_at=now, archived_at=None)
                self._insert(conn, new)
            else:
                cur = _row(cur_row)
                created = min(cur.created_at, skill.created_at) if skill.created_at.year > 1970 else cur.created_at
                last_used = max([d for d in (cur.last_used_at, skill.last_used_at) if d is not None], default=None)
                new = skill.with_(created_at=created, updated_at=now, last_used_at=last_used, archived_at=None)
                self._update(conn, new)
        return new

    def put(self, skill: Skill) -> Skill:
        """Insert exactly as given (demo generator, imports)."""
        skill = self.validate(skill)
        with self._conn.transaction() as conn:
            self._insert(conn, skill)
        return skill

    def replace(self, skill: Skill) -> Skill:
        """Write a whole record back as given (undo)."""
        skill = self.validate(skill)
        with self._conn.transaction() as conn:
            if conn.execute("SELECT 1 FROM skills WHERE name = ?", [skill.name]).fetchone() is None:
                self._insert(conn, skill)
            else:
                self._update(conn, skill)
        return skill

    def archive(self, name: str, *, now: datetime | None = None) -> Skill:
        return self._set_archived(name, utc_or_now(now))

    def restore(self, name: str, *, now: datetime | None = None) -> Skill:
        return self._set_archived(name, None)

    def _set_archived(self, name: str, when: datetime | None) -> Skill:
        with self._conn.transaction() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM skills WHERE name = ?", [name]).fetchone()
            if row is None:
                raise KeyError(f"no skill named {name!r}")
            cur = _row(row)
            if (cur.archived_at is None) == (when is None):
                return cur
            new = cur.with_(archived_at=when)
            self._update(conn, new)
        return new

    def touch_used(self, name: str, *, now: datetime | None = None) -> None:
        now = utc_or_now(now)
        with self._conn.session() as conn:
            conn.execute(
                "UPDATE skills SET last_used_at = greatest(coalesce(last_used_at, ?), ?) WHERE name = ?",
                [to_db(utc(now)), to_db(utc(now)), name],
            )

    def fingerprint(self) -> str:
        """Order-independent hash of the live catalog's names, summaries, content and seeAlso (not usage timestamps)."""
        with self._conn.session() as conn:
            n, digest = conn.execute(
                """SELECT count(*), coalesce(sha256(string_agg(h, ',' ORDER BY h)), '') FROM (
                       SELECT sha256(concat(length(name), ':', name, '|', length(summary), ':', summary, '|',
                                            length(content), ':', content, '|', length(see_also), ':', see_also)) AS h
                       FROM skills WHERE archived_at IS NULL)"""
            ).fetchone()  # type: ignore[misc]
        return f"skills:{n}:{digest}"

    def _params(self, s: Skill) -> list[Any]:
        return [
            s.summary,
            s.content,
            json.dumps(list(s.see_also)),
            to_db(s.created_at),
            to_db(s.updated_at),
            to_db(s.last_used_at),
            to_db(s.archived_at),
        ]

    def _insert(self, conn: duckdb.DuckDBPyConnection, s: Skill) -> None:
        # Checked first rather than left to the key constraint: a constraint error would abort a caller's transaction.
        if conn.execute("SELECT 1 FROM skills WHERE name = ?", [s.name]).fetchone() is not None:
            raise SkillError(f"a skill named {s.name!r} already exists")
        try:
            conn.execute(
                f"INSERT INTO skills ({_COLUMNS}, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, nextval('row_seq'))",
                [s.name, *self._params(s)],
            )
        except duckdb.ConstraintException as exc:
            raise SkillError(f"a skill named {s.name!r} already exists") from exc

    def _update(self, conn: duckdb.DuckDBPyConnection, s: Skill) -> None:
        conn.execute(
            "UPDATE skills SET summary = ?, content = ?, see_also = ?, created_at = ?, updated_at = ?, "
            "last_used_at = ?, archived_at = ?, seq = nextval('row_seq') WHERE name = ?",
            [*self._params(s), s.name],
        )
