"""Model-provided text, checked before anything is applied.

A model answer is untrusted input: it can carry a lone surrogate (``"\\ud800"``, which crashes UTF-8 encoding,
fingerprinting and DuckDB inserts), NUL and other control characters, strings far over the store's limits, blank
strings, and names or ids of the wrong shape or type. Every pass that applies an answer checks each string with
:func:`problem` first and rejects the item that carries a bad one — with the reason in its report — while the rest
of the answer is applied. Nothing invalid reaches a store write, so an answer is never left half applied by an
exception halfway through.

Rules, by ``kind``:

- ``content``: a memory or skill text. Required (not blank after stripping), at most ``max_chars``; ``\\n`` and
  ``\\t`` are the only control characters allowed (and ``\\r`` as part of a ``\\r\\n`` line end).
- ``text``: optional free text (a skill summary, a classification, a note): the rules of ``content``, but blank is
  allowed.
- ``category``: a memory category such as ``anti-patterns/routing``: one line of at most 200 characters, letters,
  digits, spaces and ``- _ . / : + & ' ( ) , # @``, no empty ``/`` segment.
- ``tag``: one tag: at most 64 characters, the characters of a category except ``/`` is allowed too; ``tags`` checks a
  list of them (at most 50).
- ``name``: a skill name (``dream_assets.names.validate_skill_name``: relative, no ``..``, no control character).
- ``id``: an entry id the model refers to: a non-blank string of at most 200 characters, nothing invisible in it.

Every kind refuses lone surrogates and, except ``content`` and ``text``, every invisible formatting character
(bidirectional overrides, zero-width characters), which could make two different names look the same.

A model can also copy instead of answer: a small model given a directive whose example says ``"content": "..."``
answers ``"..."``. :func:`copied` finds content that is a placeholder (only punctuation, a template slot such as
``<content>``, ``TODO``, ``lorem ipsum``) or the text of an example in the pass's directive
(:func:`directive_examples`), contains such a text, or names the made-up subject of the built-in directives'
worked examples (``EXAMPLE_MARKER``, when the directive's examples name it); a pass refuses such an item with the
reason, counts it as ``copied``, and reports the pass as failed (a model that copies is not a healthy model, however
much of its answer applied).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dream_assets.llm.contracts import NOT_TEXT
from dream_assets.names import InvalidName, validate_skill_name

MAX_CATEGORY_CHARS = 200  # the memory store's own limit
MAX_TAG_CHARS = 64
MAX_TAGS = 50  # the memory store's own limit
MAX_ID_CHARS = 200
MAX_TEXT_CHARS = 16_000  # optional free text when the caller gives no limit

_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")  # \t, \n and \r\n allowed
_LINE_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CATEGORY_PUNCT = set(" -_./:+&'(),#@")
KINDS = ("content", "text", "category", "tag", "tags", "name", "id")


def _surrogate(value: str) -> str | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate (U+{ord(value[exc.start]):04X}) at character {exc.start}"
    return None


def _control(value: str, pattern: re.Pattern[str]) -> str | None:
    m = pattern.search(value)
    if m is None:
        return None
    name = "NUL" if m.group() == "\x00" else f"U+{ord(m.group()):04X}"
    return f"a control character ({name}) at character {m.start()}"


def _invisible(value: str) -> str | None:
    for i, ch in enumerate(value):
        if unicodedata.category(ch) == "Cf":
            return f"an invisible formatting character (U+{ord(ch):04X}) at character {i}"
    return None


def _identifier_chars(value: str, extra: str = "") -> str | None:
    for i, ch in enumerate(value):
        if not (ch.isalnum() or ch in _CATEGORY_PUNCT or ch in extra):
            allowed = "letters, digits, spaces and - _ . / : + & ' ( ) , # @ only"
            return f"the character {shown(ch)!s} at character {i} ({allowed})"
    return None


def problem(value: object, kind: str, *, field: str, max_chars: int | None = None) -> str | None:
    """What is wrong with one model-provided value of ``kind`` (see the module docstring), or None when it may be
    applied. ``field`` names the value in the message (``toSave[2].category``)."""
    if kind not in KINDS:
        raise ValueError(f"model_text.problem: unknown kind {kind!r}; one of {', '.join(KINDS)}")
    if kind == "tags":
        if not isinstance(value, (list, tuple)):
            return f"{field} is not a list of tags"
        if len(value) > MAX_TAGS:
            return f"{field} has {len(value)} tags; at most {MAX_TAGS} are accepted"
        for i, tag in enumerate(value):
            found = problem(tag, "tag", field=f"{field}[{i}]")
            if found:
                return found
        return None
    if isinstance(value, str) and value == NOT_TEXT:
        return f"{field} is not a string (an object, a list, a boolean or null)"
    if not isinstance(value, str):
        return f"{field} is not a string ({type(value).__name__})"
    bad = _surrogate(value)
    if kind in ("content", "text"):
        bad = bad or _control(value, _TEXT_CONTROL)
        if bad:
            return f"{field} contains {bad}"
        limit = max_chars if max_chars is not None else MAX_TEXT_CHARS
        if kind == "content" and not value.strip():
            return f"{field} is empty"
        if len(value) > limit:
            return f"{field} is {len(value)} characters, over the limit of {limit}"
        return None
    bad = bad or _control(value, _LINE_CONTROL) or _invisible(value)
    if bad:
        return f"{field} contains {bad}"
    if kind == "name":
        try:
            validate_skill_name(value)
        except InvalidName as exc:
            return f"{field}: {exc}"
        return None
    if not value.strip():
        return f"{field} is empty"
    if kind == "id":
        if len(value) > MAX_ID_CHARS:
            return f"{field} is {len(value)} characters, over the limit of {MAX_ID_CHARS}"
        return None
    limit = MAX_CATEGORY_CHARS if kind == "category" else MAX_TAG_CHARS
    if len(value) > limit:
        return f"{field} is {len(value)} characters, over the limit of {limit}"
    bad = _identifier_chars(value)
    if bad:
        return f"{field} contains {bad}"
    if kind == "category":
        segments = value.strip().split("/")
        if any(not s.strip() for s in segments):
            return f"{field} {shown(value)} has an empty '/' segment"
    return None


#: Whole answers that are a placeholder, compared lower-cased with punctuation and spacing folded.
_PLACEHOLDERS = frozenset(
    {
        "todo",
        "tbd",
        "fixme",
        "xxx",
        "placeholder",
        "content",
        "content here",
        "your content",
        "your content here",
        "insert content here",
        "text",
        "text here",
        "etc",
        "n a",
        "none",
        "null",
        "lorem ipsum",
        "skill content",
        "memory content",
        "the content",
        "new content",
        "improved content",
        "merged content",
    }
)
_SLOT = re.compile(r"[<{\[]{1,2}\s*[\w .:/-]{1,40}?\s*[>}\]]{1,2}")
_EXAMPLE_VALUE = re.compile(r'"(?:content|summary|text|reason|annotation|description)"\s*:\s*"((?:[^"\\]|\\.)*)"')
#: The made-up name the built-in directives' worked examples are about: content naming it was copied from one.
EXAMPLE_MARKER = "examplia"
#: An example text at least this long (folded) inside an answer is a copy even with words around it.
MIN_EMBEDDED_EXAMPLE_CHARS = 24


def _folded(value: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", value.lower()).split())


def directive_examples(directive: str) -> frozenset[str]:
    """The texts a directive's example answers give as content (``"content": "..."``, a summary, a text, a
    reason), folded: an answer that repeats one copied the example instead of answering."""
    found = set()
    for m in _EXAMPLE_VALUE.finditer(directive):
        try:
            value = json.loads(f'"{m.group(1)}"')
        except ValueError:
            value = m.group(1)
        folded = _folded(value)
        if folded:
            found.add(folded)
    return frozenset(found)


def copied(value: str, *, examples: frozenset[str] = frozenset()) -> str | None:
    """Why ``value`` (model-provided content that passed :func:`problem`) is a placeholder or a copy of the
    directive's example rather than content, or None when it is content."""
    inner = value.strip().strip("`'\"*_ \t\n")
    if not any(ch.isalnum() for ch in inner):
        return f"is a placeholder ({shown(value.strip(), 20)}), not content"
    if _SLOT.fullmatch(inner):
        return f"is a template slot ({shown(inner, 40)}), not content"
    folded = _folded(inner)
    if folded in _PLACEHOLDERS:
        return f"is a placeholder ({shown(inner, 40)}), not content"
    if folded in examples:
        return f"copies the directive's example ({shown(inner, 40)}) instead of answering"
    padded = f" {folded} "
    if any(len(e) >= MIN_EMBEDDED_EXAMPLE_CHARS and f" {e} " in padded for e in examples):
        return f"copies the directive's example ({shown(inner, 40)}) into its answer"
    if f" {EXAMPLE_MARKER} " in padded and any(EXAMPLE_MARKER in e.split() for e in examples):
        subject = EXAMPLE_MARKER.title()
        return f"writes about {subject}, the made-up subject of the directive's example ({shown(inner, 40)})"
    return None


def shown(value: object, limit: int = 80) -> str:
    """A value as it may go into a report or a log line: invisible, control and surrogate characters escaped,
    cut at ``limit`` characters. Never raises, whatever the value."""
    if isinstance(value, str) and value == NOT_TEXT:
        return "(not a string)"
    if not isinstance(value, str):
        value = repr(value)
    out: list[str] = []
    for ch in value[:limit]:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "".join(out) + ("…" if len(value) > limit else "")


@dataclass
class IdCheck:
    """The ids of one list in an answer, sorted into the usable and the ignored."""

    usable: list[str] = field(default_factory=list)  # valid, shown, first occurrence
    invalid: list[str] = field(default_factory=list)  # not a string, or a bad one (already made safe to show)
    duplicates: list[str] = field(default_factory=list)
    not_shown: list[str] = field(default_factory=list)

    @property
    def ignored(self) -> int:
        return len(self.invalid) + len(self.duplicates) + len(self.not_shown)


def check_ids(values: Iterable[object], shown_ids: Sequence[str] | set[str] | dict, *, field: str) -> IdCheck:
    """Sort the ids (or names) of one answer list: a bad or non-string id, a repeat, and an id that was not shown
    are ignored; the rest are usable, in the answer's order."""
    result = IdCheck()
    seen: set[str] = set()
    for i, value in enumerate(values):
        bad = problem(value, "id", field=f"{field}[{i}]")
        if bad:
            result.invalid.append(shown(value, 40))
            continue
        assert isinstance(value, str)
        if value in seen:
            result.duplicates.append(value)
            continue
        seen.add(value)
        if value in shown_ids:
            result.usable.append(value)
        else:
            result.not_shown.append(value)
    return result
