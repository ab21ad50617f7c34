"""Validation of the path-like names agents choose: skill names and session ids."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,199}$")


class InvalidName(ValueError):
    """A skill name or session id that cannot be used as given."""


def validate_skill_name(name: str) -> str:
    """Path-like names (``mcp/email``): no ``..`` segments, not absolute, no control characters or backslashes."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidName("skill name must be a non-empty string")
    if name != name.strip():
        raise InvalidName(f"skill name {name!r} has leading or trailing white space")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidName(f"skill name {name[:40]!r}... is longer than {MAX_NAME_LENGTH} characters")
    if _CONTROL.search(name):
        raise InvalidName(f"skill name {name!r} contains a control character")
    if name.startswith("/") or "\\" in name or re.match(r"^[A-Za-z]:", name):
        raise InvalidName(f"skill name {name!r} must be relative (no leading '/', no drive, no backslash)")
    segments = name.split("/")
    if any(seg in ("", ".", "..") for seg in segments):
        raise InvalidName(f"skill name {name!r} has an empty, '.' or '..' segment")
    return name


def validate_session_id(session_id: str) -> str:
    """Session ids name files (``{sessionId}.jsonl``): letters, digits, ``_ . @ -``; no separators or ``..``."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id) or ".." in session_id:
        raise InvalidName(
            f"invalid session id {session_id!r}: use 1-200 letters, digits, '_', '.', '@' or '-', "
            "starting with a letter or digit, without '..'"
        )
    return session_id
