"""The memory service: the one entry point for every operation an agent or an operator performs on an agent's
memory. The ``dream`` CLI, the MCP tools, the LangGraph store, the folder sync and the Dagster jobs are shells over
it: none of them opens the store, writes a change row or decides a rule.

Each operation is one function taking the agent's ``profile`` (its folder, or an ``AgentProfile``) and keyword
arguments, with ``options`` (default: the agent's own) and ``now`` (default: the current UTC time), returning a
pydantic model (``model_dump(mode="json")`` is JSON-ready). Errors are ``AgentMemoryError`` subclasses whose message
says why and names the field or id: ``InvalidInput``, ``NotFound``, ``StoreUnavailable`` (busy or damaged: nothing
changed), ``Refused`` (a running cycle or pass, or an edit, refused it before it acted). An operation that partly
happened says so in its result (an ``outcome`` of ``partial``), never by an exception.

The memory operations are ``agent_memory``'s (save, search, get, forget, history, skills, telemetry ...); undo,
restore and the change log are ``service.changes``'s, review is ``service.review``'s, the status ``service.status``'s,
reports, log imports and rebuilds ``service.operator``'s.
"""

import functools
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dream_assets.profile import AgentProfile, as_profile

# A module of the package named like an operation takes its place on the package when that module is first imported
# (``service.status``): bound now, so an import of the module later leaves the operation in place.
from dream_assets.service.status import status

if TYPE_CHECKING:
    from dream_assets.agent_memory import (
        AGENT_PASS,
        FEEDBACK_KINDS,
        FORGET_PASS,
        MAX_CATEGORY_CHARS,
        MAX_ID_CHARS,
        MAX_LIST_LIMIT,
        MAX_LOG_TEXT_CHARS,
        MAX_NAME_CHARS,
        MAX_REASON_CHARS,
        MAX_SEARCH_LIMIT,
        MAX_SKILL_CHARS,
        MAX_SUMMARY_CHARS,
        MAX_TAG_CHARS,
        MAX_TAGS,
        RATINGS,
        ROLES,
        SKILL_ACTIONS,
        AgentMemoryError,
        CycleReportText,
        DreamStatus,
        ForgetResult,
        HistoryEvent,
        InvalidInput,
        MemoryHandle,
        MemoryHistory,
        MemoryHit,
        MemoryListItem,
        MemoryPage,
        MemoryRecord,
        NotFound,
        PassState,
        PutMemory,
        Recorded,
        Refused,
        ReviewWaits,
        SavedMemory,
        SearchResult,
        SkillList,
        SkillRecord,
        SkillSummary,
        StoreUnavailable,
        append_turn,
        connect,
        forget,
        get,
        get_skill,
        history,
        last_cycle_report,
        list_memories,
        list_skills,
        live_categories,
        live_entries_page,
        mark_agent_active,
        parse_time,
        put,
        read_entry,
        recall_entries,
        record_feedback,
        record_skill_usage,
        record_tool_call,
        reinforce,
        save_skill,
    )
    from dream_assets.service.changes import (
        OWN_ACTORS,
        RESTORE_PASS,
        ChangeSetSummary,
        PutBack,
        RestoreResult,
        UndoReport,
        list_changes,
        restore,
        undo,
        undo_own,
    )
    from dream_assets.service.folders import refresh as refresh_folder
    from dream_assets.service.operator import (
        FileImport,
        LogImport,
        RebuildReport,
        import_logs,
        rebuild,
        report,
    )
    from dream_assets.service.review import (
        DecidedChange,
        ReviewChange,
        ReviewDecision,
        ReviewList,
        ReviewSet,
        ReviewTarget,
        review_decide,
        review_list,
        review_waits,
    )
    from dream_assets.store.connection import StoreError

#: Where each name of the service comes from, imported when first asked for: a command that searches (``dream memory
#: search``) loads what a search needs, not the modules of undo, review, reports and folder write-backs.
_HOMES: dict[str, str] = {
    **dict.fromkeys(
        (
            "AGENT_PASS",
            "FEEDBACK_KINDS",
            "FORGET_PASS",
            "MAX_CATEGORY_CHARS",
            "MAX_ID_CHARS",
            "MAX_LIST_LIMIT",
            "MAX_LOG_TEXT_CHARS",
            "MAX_NAME_CHARS",
            "MAX_REASON_CHARS",
            "MAX_SEARCH_LIMIT",
            "MAX_SKILL_CHARS",
            "MAX_SUMMARY_CHARS",
            "MAX_TAG_CHARS",
            "MAX_TAGS",
            "RATINGS",
            "ROLES",
            "SKILL_ACTIONS",
            "AgentMemoryError",
            "CycleReportText",
            "DreamStatus",
            "ForgetResult",
            "HistoryEvent",
            "InvalidInput",
            "MemoryHandle",
            "MemoryHistory",
            "MemoryHit",
            "MemoryListItem",
            "MemoryPage",
            "MemoryRecord",
            "NotFound",
            "PassState",
            "PutMemory",
            "Recorded",
            "Refused",
            "ReviewWaits",
            "SavedMemory",
            "SearchResult",
            "SkillList",
            "SkillRecord",
            "SkillSummary",
            "StoreUnavailable",
            "append_turn",
            "connect",
            "forget",
            "get",
            "get_skill",
            "history",
            "last_cycle_report",
            "list_memories",
            "list_skills",
            "live_categories",
            "live_entries_page",
            "mark_agent_active",
            "parse_time",
            "put",
            "read_entry",
            "recall_entries",
            "record_feedback",
            "record_skill_usage",
            "record_tool_call",
            "reinforce",
            "save_skill",
        ),
        "dream_assets.agent_memory",
    ),
    **dict.fromkeys(
        (
            "OWN_ACTORS",
            "RESTORE_PASS",
            "ChangeSetSummary",
            "PutBack",
            "RestoreResult",
            "UndoReport",
            "list_changes",
            "restore",
            "undo",
            "undo_own",
        ),
        "dream_assets.service.changes",
    ),
    **dict.fromkeys(
        (
            "FileImport",
            "LogImport",
            "RebuildReport",
            "import_logs",
            "rebuild",
            "report",
        ),
        "dream_assets.service.operator",
    ),
    **dict.fromkeys(
        (
            "DecidedChange",
            "ReviewChange",
            "ReviewDecision",
            "ReviewList",
            "ReviewSet",
            "ReviewTarget",
            "review_decide",
            "review_list",
            "review_waits",
        ),
        "dream_assets.service.review",
    ),
    **dict.fromkeys(
        ("StoreError",),
        "dream_assets.store.connection",
    ),
}

#: The operations that read the agent's linked folder first (``_with_folder_read``).
_READ_FOLDER_FIRST = ("save", "save_many", "search")

__all__ = [
    "AGENT_PASS",
    "FEEDBACK_KINDS",
    "FORGET_PASS",
    "MAX_CATEGORY_CHARS",
    "MAX_ID_CHARS",
    "MAX_LIST_LIMIT",
    "MAX_LOG_TEXT_CHARS",
    "MAX_NAME_CHARS",
    "MAX_REASON_CHARS",
    "MAX_SEARCH_LIMIT",
    "MAX_SKILL_CHARS",
    "MAX_SUMMARY_CHARS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "OWN_ACTORS",
    "RATINGS",
    "RESTORE_PASS",
    "ROLES",
    "SKILL_ACTIONS",
    "AgentMemoryError",
    "ChangeSetSummary",
    "CycleReportText",
    "DecidedChange",
    "DreamStatus",
    "FileImport",
    "ForgetResult",
    "HistoryEvent",
    "InvalidInput",
    "LogImport",
    "MemoryHandle",
    "MemoryHistory",
    "MemoryHit",
    "MemoryListItem",
    "MemoryPage",
    "MemoryRecord",
    "NotFound",
    "PassState",
    "PutBack",
    "PutMemory",
    "RebuildReport",
    "Recorded",
    "Refused",
    "RestoreResult",
    "ReviewChange",
    "ReviewDecision",
    "ReviewList",
    "ReviewSet",
    "ReviewTarget",
    "ReviewWaits",
    "SavedMemory",
    "SearchResult",
    "SkillList",
    "SkillRecord",
    "SkillSummary",
    "StoreError",
    "StoreUnavailable",
    "UndoReport",
    "append_turn",
    "connect",
    "forget",
    "get",
    "get_skill",
    "history",
    "import_logs",
    "last_cycle_report",
    "list_changes",
    "list_memories",
    "list_skills",
    "live_categories",
    "live_entries_page",
    "mark_agent_active",
    "parse_time",
    "put",
    "read_entry",
    "rebuild",
    "recall_entries",
    "record_feedback",
    "record_skill_usage",
    "record_tool_call",
    "refresh_folder",
    "reinforce",
    "report",
    "restore",
    "review_decide",
    "review_list",
    "review_waits",
    "save",
    "save_many",
    "save_skill",
    "search",
    "status",
    "undo",
    "undo_own",
]


def __getattr__(name: str) -> Any:
    if name in _READ_FOLDER_FIRST:
        from dream_assets import agent_memory

        value = _with_folder_read(getattr(agent_memory, name))
    elif name == "refresh_folder":
        from dream_assets.service.folders import refresh as value
    elif name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # found directly from now on
    return value


def _with_folder_read(op):  # type: ignore[no-untyped-def]
    """``op`` after a read of the agent's linked folder when a file of it changed since the last read
    (``service.folders.refresh``): what a person or the agent's own tool just wrote there is found and deduplicated
    against without waiting for a cycle. An agent with no linked folder pays one file-existence check, and its calls
    never load the folder code."""
    from dream_assets.agent_memory import MemoryHandle

    @functools.wraps(op)
    def call(profile, *args, **kwargs):  # type: ignore[no-untyped-def]
        options = kwargs.get("options")
        if isinstance(profile, MemoryHandle):  # a handle kept open between calls (dream serve's warm agents)
            prof, options = profile.profile, options or profile.options
        elif isinstance(profile, str | Path | AgentProfile):
            prof = as_profile(profile)
        else:
            return op(profile, *args, **kwargs)
        if prof.memory_folder_link_path.exists():  # a linked folder (folders.sync.linked)
            from dream_assets.service.folders import refresh

            refresh(prof, options, kwargs.get("now"))
        return op(profile, *args, **kwargs)

    return call
