"""The records of the telemetry and conversation logs: one pydantic model per log, keys in camelCase on disk.

A record is built in code with snake_case names (positionally too, in field order) or read from a JSON object with
``from_json``. Every field has one rule, applied both ways, and its error names the field and what is accepted;
``from_json`` raises a ``ValueError`` with that one message (the first failing field, in field order). Timestamps
are aware UTC however the record was given them. docs/log-formats.md shows these schemas; its record tables are
generated from the models (``python -m dream_assets.store.log_records docs/log-formats.md`` rewrites them).
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import core_schema

from dream_assets.file_safety import atomic_write
from dream_assets.model import iso, parse_ts
from dream_assets.store.line_batch import MalformedLine, parse_json_line

CONVERSATION = "conversation"

SKILL_ACTIONS = ("recalled", "invoked", "loaded")
FEEDBACK_KINDS = ("Correction", "SessionSummary", "Positive", "Negative", "Note")
RATINGS = ("poor", "fair", "good", "excellent")
TIER_OUTCOMES = ("success", "failure", "escalated")
ROLES = ("user", "assistant", "tool")


# --- field rules: each error names the field and what is accepted -------------------------------------------------


def _timestamp(key: str, value: Any) -> datetime:
    if value is None:
        raise ValueError(f"field '{key}' is missing: add an ISO-8601 UTC time such as 2024-05-01T12:00:00Z")
    try:
        return parse_ts(value)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"field '{key}' is {value!r}, not an ISO-8601 time: write e.g. 2024-05-01T12:00:00Z") from None


def _text(*, optional: bool = False, nonempty: bool = False) -> Callable[[str, Any], Any]:
    what = f"a {'non-empty ' if nonempty else ''}string"

    def read(key: str, value: Any) -> Any:
        if value is None:
            if optional:
                return None
            raise ValueError(f"field '{key}' is missing: it must be {what}")
        if not isinstance(value, str) or (nonempty and not value.strip()):
            raise ValueError(f"field '{key}' must be {what}, got {value!r}")
        return value

    return read


def _choice(
    choices: tuple[str, ...], *, default: str | None = None, optional: bool = False
) -> Callable[[str, Any], Any]:
    """Accepted in any letter case and stored in the documented spelling."""

    def read(key: str, value: Any) -> Any:
        if value is None:
            if default is not None or optional:
                return default
            raise ValueError(f"field '{key}' is missing: use one of {', '.join(choices)}")
        for choice in choices:
            if isinstance(value, str) and value.lower() == choice.lower():
                return choice
        raise ValueError(f"field '{key}' is {value!r}: use one of {', '.join(choices)}")

    return read


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"field '{key}' must be true or false, got {value!r}")
    return value


def _number(key: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"field '{key}' must be a number or null, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"field '{key}' must be a finite number or null, got {str(value)[:40]}")
    return number


def _texts(key: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"field '{key}' must be a list of strings, got {value!r}")
    return list(value)


@dataclass(frozen=True)
class Rule:
    """How one field is read (``read(key, value)``: the stored value, or a ValueError naming ``key``) and how
    docs/log-formats.md shows its type. The rule alone decides what the field accepts."""

    read: Callable[[str, Any], Any]
    shown: str

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        read = self.read
        return core_schema.with_info_plain_validator_function(lambda value, info: read(_key(info.field_name), value))


@functools.cache
def _key(name: str) -> str:
    """A field's key on disk."""
    return to_camel(name)


def _one_of(choices: tuple[str, ...]) -> str:
    return " \\| ".join(f"`{c}`" for c in choices)


Timestamp = Annotated[datetime, Rule(_timestamp, "string")]
Id = Annotated[str, Rule(_text(nonempty=True), "string")]
Text = Annotated[str, Rule(_text(), "string")]
OptionalText = Annotated[str | None, Rule(_text(optional=True), "string")]
Flag = Annotated[bool, Rule(_flag, "boolean")]
Number = Annotated[float | None, Rule(_number, "number")]
Texts = Annotated[list[str], Rule(_texts, "list of strings")]


class LogRecord(BaseModel):
    """One line of a log. Subclasses declare their fields in the order errors are reported and lines are written."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="ignore",
        defer_build=True,  # built when a record of the kind is first written or read
    )

    #: The log this record belongs to (``LOG_KINDS`` key), and a line shown in the documentation (or None).
    log_kind: ClassVar[str]
    example: ClassVar[str | None] = None

    #: Required on disk; a record built in code without one carries the current UTC time.
    timestamp: Timestamp = Field(default_factory=lambda: datetime.now(UTC), description="ISO-8601, UTC")

    #: The keys on disk, in field order.
    json_keys: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.json_keys = tuple(f.alias or name for name, f in cls.model_fields.items())

    def __init__(self, *args: Any, **data: Any) -> None:
        if args:
            names = list(type(self).model_fields)
            if len(args) > len(names):
                raise TypeError(f"{type(self).__name__} takes at most {len(names)} positional fields, got {len(args)}")
            for name, value in zip(names, args, strict=False):
                if name in data:
                    raise TypeError(f"{type(self).__name__} got two values for field {name!r}")
                data[name] = value
        super().__init__(**data)

    # Positional fields are for code only: validation from JSON goes straight to the model, not through here.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def from_json(cls, d: Any) -> Self:
        """The record a JSON object describes; ``ValueError`` naming the first field that breaks its rule."""
        if not isinstance(d, dict):
            raise ValueError(f"a record must be a JSON object, got {type(d).__name__}")
        data = {key: d.get(key) for key in cls.json_keys}
        try:
            return cls.model_validate(data, by_alias=True, by_name=False)
        except ValidationError as exc:
            raise ValueError(_first_reason(exc)) from None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            out[info.alias or name] = iso(value) if isinstance(value, datetime) else value
        return out


def _first_reason(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, ValueError):
        return str(cause)
    where = ".".join(str(p) for p in error.get("loc", ()))
    return f"field '{where}': {error['msg']}" if where else error["msg"]


# --- the records ----------------------------------------------------------------------------------------------------


class SkillUsageEvent(LogRecord):
    log_kind: ClassVar[str] = "skill-usage"
    example: ClassVar[str | None] = (
        '{"timestamp":"2024-05-01T12:00:00Z","sessionId":"cli-session","skillName":"mcp/email","action":"recalled"}'
    )

    session_id: Id
    skill_name: Id = Field(description="e.g. `mcp/email`")
    action: Annotated[str, Rule(_choice(SKILL_ACTIONS, default="invoked"), _one_of(SKILL_ACTIONS))] = "invoked"


class ToolCallEvent(LogRecord):
    log_kind: ClassVar[str] = "tool-call"
    example: ClassVar[str | None] = (
        '{"timestamp":"2024-05-01T12:00:03Z","sessionId":"cli-session","tool":"calendar.create","success":false,'
        '"error":"409 Conflict","durationMs":412.0,"skillName":"mcp/calendar"}'
    )

    session_id: Id
    tool: Id
    success: Flag = Field(description="`true` / `false`, not a string")
    error: OptionalText = None
    duration_ms: Number = None
    skill_name: OptionalText = Field(None, description="the skill that led to the call")


class FeedbackEvent(LogRecord):
    log_kind: ClassVar[str] = "feedback"
    example: ClassVar[str | None] = (
        '{"timestamp":"2024-05-01T12:05:00Z","sessionId":"cli-session","kind":"SessionSummary",'
        '"text":"Booked, but double-booked first","rating":"fair","domain":"calendar","skillNames":["mcp/calendar"]}'
    )

    session_id: Id
    kind: Annotated[str, Rule(_choice(FEEDBACK_KINDS), _one_of(FEEDBACK_KINDS))]
    text: Text = Field(description="may be empty")
    rating: Annotated[str | None, Rule(_choice(RATINGS, optional=True), _one_of(RATINGS))] = Field(
        None, description="required for a `SessionSummary`"
    )
    domain: OptionalText = Field(None, description="e.g. `calendar` (anti-patterns are filed under it)")
    skill_names: Texts = Field(default_factory=list, description="skills used in the session")

    @model_validator(mode="after")
    def _summary_has_rating(self) -> Self:
        # Skill optimization reads "SessionSummary rated poor or fair" (spec "Pass 4"): a summary needs a rating.
        if self.kind == "SessionSummary" and self.rating is None:
            raise ValueError("field 'rating' is required for a SessionSummary: use one of " + ", ".join(RATINGS))
        return self


class SkillResourceUsageEvent(LogRecord):
    log_kind: ClassVar[str] = "skill-resource-usage"

    session_id: Id
    skill_name: Id
    resource: Id = Field(description="the file or resource of the skill that was read")


class WispExecutionEvent(LogRecord):
    log_kind: ClassVar[str] = "wisp-executions"

    wisp_id: Id
    description: Text = Field(description="what the wisp does; runs are grouped by it")
    success: Flag
    skill_name: OptionalText = Field(None, description="the skill that produced the wisp definition")
    failed_step: OptionalText = None
    error: OptionalText = None
    steps: Texts = Field(default_factory=list)
    definition: OptionalText = Field(
        None,
        description="the wisp definition that ran, verbatim; a steady success can be promoted to a skill resource",
    )

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.definition is None:  # a log written without definitions keeps its lines (and its data version)
            del out["definition"]
        return out


class TierRoutingEvent(LogRecord):
    log_kind: ClassVar[str] = "tier-routing"

    session_id: Id
    tier: Id = Field(description="e.g. `small`")
    task_kind: Id
    outcome: Annotated[str, Rule(_choice(TIER_OUTCOMES), _one_of(TIER_OUTCOMES))]
    latency_ms: Number = None
    cost_usd: Number = None


class ConversationTurn(LogRecord):
    log_kind: ClassVar[str] = CONVERSATION

    session_id: Id
    role: Annotated[str, Rule(_choice(ROLES), _one_of(ROLES))]
    content: Text


LogEvent = (
    SkillUsageEvent
    | ToolCallEvent
    | FeedbackEvent
    | SkillResourceUsageEvent
    | WispExecutionEvent
    | TierRoutingEvent
    | ConversationTurn
)

LOG_KINDS: dict[str, type[LogRecord]] = {
    cls.log_kind: cls
    for cls in (
        SkillUsageEvent,
        ToolCallEvent,
        FeedbackEvent,
        SkillResourceUsageEvent,
        WispExecutionEvent,
        TierRoutingEvent,
        ConversationTurn,
    )
}


def record_class(kind: str) -> type[LogRecord]:
    try:
        return LOG_KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown log kind {kind!r}; expected one of {', '.join(LOG_KINDS)}") from None


# --- the schema tables of docs/log-formats.md ---------------------------------------------------------------------

DOC_BEGIN = "<!-- record tables: generated by `python -m dream_assets.store.log_records docs/log-formats.md` -->"
DOC_END = "<!-- end of generated record tables -->"


# --- one line of a log as a record ---------------------------------------------------------------
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_line(kind: str, raw: bytes, file_session: str | None = None) -> Any:
    """One raw line (without its newline) as a record of ``kind``, by the rules the readers apply, or
    ``MalformedLine`` saying why not. ``file_session``: the session id a per-session file's name gives its lines."""
    return parse_record(record_class(kind), raw, file_session)


def parse_record(cls: Any, raw: bytes, file_session: str | None) -> Any:
    """One line as a record of ``cls``, or ``MalformedLine`` saying why not (whatever the line holds)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedLine("not valid UTF-8") from None
    return parse_text(cls, text, file_session)


def parse_text(cls: Any, text: str, file_session: str | None) -> Any:
    obj = parse_json_line(text)
    # Bytes that are not UTF-8 were refused above, so an unpaired surrogate can only come from a \u escape.
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(obj):
        raise MalformedLine("text holds an unpaired surrogate escape (such as \\ud800), which is not a character")
    if file_session is not None and isinstance(obj, dict) and "sessionId" not in obj:
        obj["sessionId"] = file_session  # the file name is the session id
    try:
        return cls.from_json(obj)
    except (ValueError, TypeError, OverflowError) as exc:
        raise MalformedLine(str(exc)) from None


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def record_table(cls: type[LogRecord]) -> str:
    """The Markdown table of one record's fields: key, type, whether it is required, what it holds."""
    rows = ["| Field | Type | |", "| --- | --- | --- |"]
    for name, info in cls.model_fields.items():
        rule = next(m for m in info.metadata if isinstance(m, Rule))
        if info.is_required() or name == "timestamp":  # only a record built in code may leave it to the clock
            presence = "required"
        else:
            default = info.get_default(call_default_factory=True)
            presence = "optional" if default in (None, []) else f"optional, default `{default}`"
        note = f"{presence}: {info.description}" if info.description else presence
        rows.append(f"| `{info.alias}` | {rule.shown} | {note} |")
    return "\n".join(rows)


def records_section() -> str:
    """Every record's heading, field table and example line, between the markers the doc keeps them in."""
    parts = [DOC_BEGIN]
    for kind, cls in LOG_KINDS.items():
        parts.append(f"### {kind} — `{cls.__name__}`\n\n{record_table(cls)}")
        if cls.example:
            parts.append(f"```json\n{cls.example}\n```")
    parts.append(DOC_END)
    return "\n\n".join(parts)


def with_records_section(doc: str) -> str:
    """``doc`` with the text between the markers replaced by ``records_section()``."""
    start, end = doc.find(DOC_BEGIN), doc.find(DOC_END)
    if start < 0 or end < start:
        raise ValueError(f"the document has no generated record tables: it needs the lines {DOC_BEGIN} and {DOC_END}")
    return doc[:start] + records_section() + doc[end + len(DOC_END) :]


def _main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dream_assets.store.log_records docs/log-formats.md", file=sys.stderr)
        return 2
    path = Path(argv[0])
    atomic_write(path, with_records_section(path.read_text(encoding="utf-8")))
    return 0


def example_records() -> dict[str, LogRecord]:
    """The documented example line of each record that has one, read by the record's own rules."""
    return {kind: cls.from_json(json.loads(cls.example)) for kind, cls in LOG_KINDS.items() if cls.example}


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
