"""Find the JSON object in a model's answer and validate it against the pass's contract.

Spec, "LLM response format": the host extracts the outermost JSON object from the response, tolerating
``<think>…</think>`` reasoning blocks and prose preamble. Models add more than that in practice, so this
also copes with unterminated reasoning blocks, a closing ``</think>`` whose opening tag the chat template
supplied, code fences, prose after the object, braces inside strings and trailing commas.

What it refuses, on purpose (a failed call is retried next cycle; a wrong apply is not undone):
- a truncated object (an opening brace that is never closed) — even when a nested object inside it is
  complete, because that inner object is a fragment of the answer, not the answer;
- a JSON array where an object is required;
- two different objects that both fit the contract (an example echoed before the answer, say);
- an object that carries none of the contract's keys (``{"error": "..."}``), which would otherwise
  validate to an empty answer and be mistaken for "nothing to do".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError

HEAD_CHARS = 200
T = TypeVar("T", bound=BaseModel)

_OPEN = re.compile(r"<(think|thinking|reasoning)\b[^>]*>", re.IGNORECASE)
_CLOSE = re.compile(r"</(think|thinking|reasoning)\s*>", re.IGNORECASE)
# A brace that starts a JSON object is followed by a key or by the closing brace; prose braces
# ("use {name} placeholders", "the set {a, b") are not, and are skipped rather than matched.
_OBJECT_START = re.compile(r"\{(?=\s*[\"}])")


class ResponseFormatError(ValueError):
    """The model's answer has no usable JSON object for the contract. Carries the head of the raw text."""

    def __init__(self, reason: str, raw: str) -> None:
        self.reason = reason
        self.raw_head = head(raw)
        super().__init__(f"{reason}; the response began: {self.raw_head!r}")


def head(text: str, n: int = HEAD_CHARS) -> str:
    return (text or "")[:n]


@dataclass(frozen=True)
class _Candidate:
    start: int
    value: dict | None  # parsed object, or None when the span is not valid JSON
    error: str = ""  # why it did not parse


def strip_reasoning(text: str) -> tuple[str, str]:
    """Split ``text`` into (visible answer, text of an unterminated reasoning block or "")."""
    # A closing tag before any opening one: the template pre-filled "<think>", so all before it is reasoning.
    while True:
        first_open, first_close = _OPEN.search(text), _CLOSE.search(text)
        if first_close and (first_open is None or first_close.start() < first_open.start()):
            text = text[first_close.end() :]
            continue
        break
    visible: list[str] = []
    pos = 0
    while True:
        m = _OPEN.search(text, pos)
        if m is None:
            visible.append(text[pos:])
            return "".join(visible), ""
        visible.append(text[pos : m.start()])
        close = _CLOSE.search(text, m.end())
        if close is None:
            return "".join(visible), text[m.end() :]
        pos = close.end()


# Scanning by tokens — a JSON string (escapes included), a string left open to the end of the text, a brace or a
# comma — instead of character by character keeps a hostile 200,000-character answer cheap.
_STRING = r'(?P<string>"(?:[^"\\]|\\.)*")|(?P<open>".*)'
_BRACE_TOKENS = re.compile(_STRING + r"|(?P<brace>[{}])", re.DOTALL)
_COMMA_TOKENS = re.compile(_STRING + r"|(?P<comma>,(?=[ \t\r\n]*(?:[}\]]|$)))", re.DOTALL)


def _match_object(text: str, start: int) -> int:
    """Index just past the brace closing the object opened at ``start``; -1 when it is never closed."""
    depth = 0
    for m in _BRACE_TOKENS.finditer(text, start):
        if m.lastgroup == "open":
            return -1  # a string that never closes: everything after its quote is inside it
        if m.lastgroup == "brace":
            depth += 1 if m.group() == "{" else -1
            if depth == 0:
                return m.end()
    return -1


def _without_trailing_commas(text: str) -> str:
    """Drop commas directly before ``}`` or ``]`` outside strings (a common, meaning-free slip)."""
    return _COMMA_TOKENS.sub(lambda m: "" if m.group() == "," else m.group(), text)


def _parse(span: str) -> tuple[dict | None, str]:
    for attempt in (span, _without_trailing_commas(span)):
        try:
            value = json.loads(attempt)
        except json.JSONDecodeError as exc:
            error = f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            continue
        if isinstance(value, dict):
            return value, ""
        return None, f"expected a JSON object, got {type(value).__name__}"
    return None, error


def _candidates(text: str) -> Iterator[_Candidate]:
    """Top-level objects in order. Raises ResponseFormatError on an object that is never closed."""
    pos = 0
    while (m := _OBJECT_START.search(text, pos)) is not None:
        end = _match_object(text, m.start())
        if end == -1:
            raise _Unclosed(m.start())
        value, error = _parse(text[m.start() : end])
        yield _Candidate(m.start(), value, error)
        pos = end  # never descend into an object that failed: its inner objects are fragments


class _Unclosed(Exception):
    def __init__(self, offset: int) -> None:
        self.offset = offset


def _looks_like_array(text: str) -> bool:
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
    return body.lstrip().startswith("[")


def _collect(raw: str) -> tuple[list[_Candidate], bool]:
    """Candidates in preference order, and whether they came from an unterminated reasoning block."""
    visible, tail = strip_reasoning(raw or "")
    if _looks_like_array(visible):
        raise ResponseFormatError("the response is a JSON array; the contract needs a JSON object {...}", raw)
    try:
        found = list(_candidates(visible))
    except _Unclosed as exc:
        raise ResponseFormatError(
            f"the JSON object starting at character {exc.offset} of the answer is never closed "
            "(truncated response? raise LlmMaxTokens)",
            raw,
        ) from None
    if found or not tail:
        return found, False
    # Reasoning that never closed: drafts come first and the answer last, so prefer the last object.
    try:
        in_tail = list(_candidates(tail))
    except _Unclosed:
        in_tail = []
    return list(reversed(in_tail)), True


def extract_json_object(text: str) -> dict:
    """The answer's JSON object. Raises ResponseFormatError naming what is wrong."""
    candidates, _ = _collect(text)
    parsed = [c for c in candidates if c.value is not None]
    if parsed:
        return parsed[0].value  # type: ignore[return-value]
    if candidates:
        raise ResponseFormatError(f"no valid JSON object ({candidates[0].error})", text)
    if not (text or "").strip():
        raise ResponseFormatError("the response is empty", text)
    raise ResponseFormatError("no JSON object found in the response", text)


def parse_response(text: str, contract: type[T]) -> T:
    """Extract and validate. Raises ResponseFormatError (parse or validation) with the raw head."""
    candidates, from_reasoning = _collect(text)
    parsed = [c for c in candidates if c.value is not None]
    if not parsed:
        if candidates:
            raise ResponseFormatError(f"no valid JSON object ({candidates[0].error})", text)
        if not (text or "").strip():
            raise ResponseFormatError("the response is empty", text)
        raise ResponseFormatError("no JSON object found in the response", text)

    known = _known_keys(contract)
    fits: list[tuple[dict, T]] = []
    first_error = ""
    for cand in parsed:
        obj = cand.value or {}
        if not known & obj.keys():
            first_error = first_error or (
                f"the JSON object has none of the expected keys ({', '.join(sorted(known))}); "
                f"it has: {', '.join(sorted(obj)) or 'no keys'}"
            )
            continue
        try:
            fits.append((obj, contract.model_validate(obj)))
        except ValidationError as exc:
            first_error = first_error or f"the JSON object does not match the {contract.__name__} contract: " + _brief(
                exc
            )
    if not fits:
        raise ResponseFormatError(first_error, text)
    if not from_reasoning and len({json.dumps(obj, sort_keys=True) for obj, _ in fits}) > 1:
        raise ResponseFormatError(
            f"ambiguous response: {len(fits)} different JSON objects match the {contract.__name__} contract",
            text,
        )
    return fits[0][1]


def _known_keys(contract: type[BaseModel]) -> set[str]:
    keys: set[str] = set()
    for name, info in contract.model_fields.items():
        keys.add(name)
        if info.alias:
            keys.add(info.alias)
    return keys


def _brief(exc: ValidationError, limit: int = 3) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = exc.error_count() - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
