"""``dream serve``: the agent's memory as an MCP server, on the official ``mcp`` SDK (``MCPServer``).

Each tool is a thin shell over one function of the memory service ``dream_assets.service`` (the same rules as the
Python API and ``dream memory``): typed arguments, each described with its limits in the schema the model reads, a
typed structured result, annotations saying which tools change nothing (``readOnlyHint``) and which archive, undo or
decide (``destructiveHint``), and a tool error (``isError``) whose text names the field or id when the call cannot be
done. Two transports:

- stdio, for one agent (``dream serve --profile data/agents/NAME``): the way Claude Code, Codex, Cursor and the OpenAI
  Agents SDK start a local server.
- Streamable HTTP (``dream serve --http 127.0.0.1:8765 --profile-root data/agents``): one endpoint per agent,
  ``/agents/<id>/mcp``; a tool call acts on the agent its URL names, so agents never see each other. Stateless, JSON
  responses: every request stands alone.

Both keep each agent warm between calls (service/warm.py): its open store handle, options, recall index and save-time
embeddings stay in memory (an LRU of agents with a memory cap and idle eviction, ``WarmLimits``), the store file is
let go at once when a dream cycle or another process asks for it, and what that process wrote is caught up by row
sequence on the next call, never rebuilt. On shutdown every warm agent's recall index is written to its file. The
start line names the recall index in use (the compiled kernel or the numpy fallback).

HTTP requests pass a gate before the SDK sees them (``HttpGate``): the agent id must be a plain agent id naming an
existing profile folder directly under the profile root (no traversal, no symlink out of it); the bearer token must
match when one is configured (constant-time compare; a per-agent token replaces the shared one for its agent, also
when a symlink inside the root leads to it under another name: the token follows the folder reached); the
``Origin`` header, when sent, must be one of the allowed origins and ``Host`` one of the allowed hosts (DNS
rebinding); the body may not exceed ``max_request_bytes``. A refused request gets a JSON error and changes nothing.
Before the gate, each connection is held to the limits of ``dream_assets.serve_guard`` (header and body timeouts,
connections per client and in all), so slow or half-sent requests cannot take the server's descriptors.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import hmac
import json
import logging
import os
import re
import socket
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from ipaddress import ip_address
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import pydantic_core
from mcp.server.connection import Connection
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.runner import serve_one
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import CONTENT_TYPE_JSON
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp.types import ToolAnnotations
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    ProgressToken,
    RequestId,
)
from mcp_types.jsonrpc import jsonrpc_message_adapter
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import Field
from starlette.requests import Request

from dream_assets import service as svc
from dream_assets.options import DreamOptions, OptionsError
from dream_assets.profile import AgentProfile, ProfileError, holds_profile, validate_agent_id
from dream_assets.serve_guard import ConnectionGuard, ConnectionLimits
from dream_assets.service.warm import WarmAgents, WarmLimits

SERVER_NAME = "dream-memory"
#: The environment variable holding the bearer token every agent endpoint accepts.
TOKEN_ENV = "DREAM_SERVE_TOKEN"
#: The environment variable holding per-agent tokens: ``agent=token`` pairs separated by commas (or a JSON object).
AGENT_TOKENS_ENV = "DREAM_SERVE_AGENT_TOKENS"
#: Largest HTTP request body accepted (a memory is at most MaxContentChars; 1 MiB leaves room for any valid call).
MAX_REQUEST_BYTES = 1024 * 1024
_AGENT_PATH = re.compile(r"^/agents/([^/]*)/mcp/?$")
_SCOPE_KEY = "dream_profile"
log = logging.getLogger(__name__)
T = TypeVar("T")

INSTRUCTIONS = (
    "Long-term memory of this agent, kept healthy by a background dream cycle. Search before answering from memory "
    "(memory_search), save durable facts, preferences and corrections (memory_save: the result says whether the fact "
    "was new, reinforced an existing entry or extended it), forget what is wrong (memory_forget; memory_restore or "
    "memory_undo puts it back). An old id leads to the entry that holds its fact now (memory_get: current_id). "
    "memory_list pages through the memories by category; review_list shows changes the dream waits on a decision for "
    "(review_apply, review_reject)."
)


#: The failures a tool call expects (bad input, an unknown id, a store it cannot reach, a bad option): the caller
#: reads them as the tool's error; anything else is the SDK's unexpected error.
_TOOL_ERRORS = (svc.AgentMemoryError, ProfileError, OptionsError)

#: Agents whose recall index this process has built (see ``_calling``).
_indexed: set[Path] = set()


@contextmanager
def _calling(
    profile: AgentProfile, warm: WarmAgents | None = None, *, builds_index: bool = False
) -> Iterator[AgentProfile | svc.MemoryHandle]:
    """One tool call for ``profile``: its warm handle (``warm``, which also keeps a new recall index out of the
    garbage collector's generations), else the profile. An expected failure becomes a tool error the caller reads;
    anything else is the SDK's unexpected error. Without ``warm``, after an agent's first save or search
    (``builds_index``: it builds the in-process recall index, hundreds of thousands of long-lived objects for a large
    store) those objects are moved out of the garbage collector's generations (``gc.freeze``), so later calls do not
    pay for full collections that scan the index."""
    acquired = False
    try:
        if warm is None:
            yield profile
        else:
            handle = warm.acquire(profile)
            acquired = True
            yield handle
    except _TOOL_ERRORS as exc:
        raise ToolError(str(exc)) from exc
    finally:
        if acquired:
            warm.release(profile)  # type: ignore[union-attr]
        elif builds_index and warm is None and profile.root not in _indexed:
            _indexed.add(profile.root)
            gc.freeze()


async def _answer(
    profile: AgentProfile,
    warm: WarmAgents | None,
    work: Callable[[AgentProfile | svc.MemoryHandle], T],
    *,
    builds_index: bool = False,
) -> T:
    """``work`` done for one tool call, on the event loop when it cannot wait for anything, else in a worker thread
    as the SDK runs a sync tool. On the loop only when the agent is warm and ready (``WarmAgents.acquire_ready``: its
    store open here, its recall index built, no embeddings endpoint or linked folder to ask) and its store is free
    now (``StoreConnection.session_if_free``: held for the whole call, so nothing in it waits for another thread or
    process). The hop to a worker thread and back cost a call about a quarter of a millisecond of CPU time (a warm
    search takes 0.6 to 2 ms); a call that would wait (a dream cycle in another process has the file, a save in
    another thread holds it, the index is being loaded) still takes it, so the loop never blocks."""
    if warm is not None:
        handle = warm.acquire_ready(profile)
        if handle is not None:
            try:
                with handle.connection.session_if_free() as held:
                    if held is not None:
                        try:
                            return work(handle)
                        except _TOOL_ERRORS as exc:
                            raise ToolError(str(exc)) from exc
            finally:
                warm.release(profile, let_go=False)

    def in_thread() -> T:
        with _calling(profile, warm, builds_index=builds_index) as target:
            return work(target)

    return await anyio.to_thread.run_sync(in_thread)


def _arg(description: str, **schema: Any) -> Any:
    """A parameter's description and its limits as the JSON schema shows them to the model (``maxLength``,
    ``minimum``/``maximum``, ``enum``, ``maxItems``). The limits are shown, not enforced here: the memory service
    checks every value and its error names the field (and a limit an agent's options raise is not refused)."""
    return Field(description=description, json_schema_extra=schema or None)


#: The largest memory text by default (``MaxContentChars``; an agent's options may raise it).
MAX_CONTENT = DreamOptions().MaxContentChars
_ID = {"maxLength": svc.MAX_ID_CHARS}
_NAME = {"maxLength": svc.MAX_NAME_CHARS}
_CATEGORY = {"maxLength": svc.MAX_CATEGORY_CHARS}
_TAGS = {"maxItems": svc.MAX_TAGS, "items": {"type": "string", "maxLength": svc.MAX_TAG_CHARS}}
_LOG_TEXT = {"maxLength": svc.MAX_LOG_TEXT_CHARS}
_SESSION = "the conversation (session) the record belongs to"

#: What each tool does to the agent's memory, for the client (hints: the service enforces the rules).
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
ADDS_ONCE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
REPLACES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def build_server(profile_of: Callable[[Context], AgentProfile], warm: WarmAgents | None = None) -> MCPServer:
    """The MCP server with every memory tool; ``profile_of`` says which agent a call is for, ``warm`` keeps the
    agents warm between calls (none: each call opens its agent)."""
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(
        description="Save a fact, preference or correction. Returns its id and whether it was created, "
        "reinforced or extended (with the reason).",
        annotations=ADDS,
    )
    async def memory_save(
        ctx: Context,
        content: Annotated[str, _arg("the fact, in one or a few sentences", maxLength=MAX_CONTENT)],
        category: Annotated[
            str, _arg("where it is filed, '/' separating levels (e.g. prefs/ui); searches by category", **_CATEGORY)
        ] = "general",
        tags: Annotated[list[str] | None, _arg("labels to filter searches by", **_TAGS)] = None,
        importance: Annotated[
            float, _arg("how much it matters, 0 to 1 (0.5 is ordinary)", minimum=0.0, maximum=1.0)
        ] = 0.5,
    ) -> svc.SavedMemory:
        return await _answer(
            profile_of(ctx),
            warm,
            lambda profile: svc.save(profile, content, category=category, tags=tags or (), importance=importance),
            builds_index=True,
        )

    @server.tool(
        description="Search live memories, best first. category keeps that category and its '/' children; "
        "tags keeps entries carrying all of them.",
        annotations=READ_ONLY,
    )
    async def memory_search(
        ctx: Context,
        query: Annotated[str, _arg("what to recall, in words", maxLength=MAX_CONTENT)],
        limit: Annotated[int, _arg("most hits returned", minimum=1, maximum=svc.MAX_SEARCH_LIMIT)] = 10,
        category: Annotated[
            str | None, _arg("only this category and its '/' children (none: every category)", **_CATEGORY)
        ] = None,
        tags: Annotated[list[str] | None, _arg("only entries carrying all of these tags", **_TAGS)] = None,
    ) -> svc.SearchResult:
        return await _answer(
            profile_of(ctx),
            warm,
            lambda profile: svc.search(profile, query, limit=limit, category=category, tags=tags or ()),
            builds_index=True,
        )

    @server.tool(
        description="One memory by id, archived ones too: where it went (merged_into, superseded_by, "
        "archived_reason) and current_id, the live entry holding its fact now.",
        annotations=READ_ONLY,
    )
    async def memory_get(
        ctx: Context, id: Annotated[str, _arg("the memory's id (as save, search or list gave it)", **_ID)]
    ) -> svc.MemoryRecord:
        return await _answer(profile_of(ctx), warm, lambda profile: svc.get(profile, id))

    @server.tool(
        description="The agent's memories a page at a time, oldest first (created time, then id). Give "
        "next_cursor back as cursor for the next page; it is null on the last page.",
        annotations=READ_ONLY,
    )
    def memory_list(
        ctx: Context,
        category: Annotated[
            str | None, _arg("only this category and its '/' children (none: every category)", **_CATEGORY)
        ] = None,
        include_archived: Annotated[bool, _arg("list archived (forgotten, merged, superseded) ones too")] = False,
        cursor: Annotated[
            str | None, _arg("next_cursor of the previous page; none for the first page", maxLength=1000)
        ] = None,
        limit: Annotated[int, _arg("most memories on the page", minimum=1, maximum=svc.MAX_LIST_LIMIT)] = 50,
    ) -> svc.MemoryPage:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.list_memories(
                profile, category=category, include_archived=include_archived, cursor=cursor, limit=limit
            )

    @server.tool(
        description="The fact came up again: move its last-seen time and reinforcement count.", annotations=ADDS
    )
    def memory_reinforce(
        ctx: Context, id: Annotated[str, _arg("the live memory's id (an archived one: use its current_id)", **_ID)]
    ) -> svc.MemoryRecord:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.reinforce(profile, id)

    @server.tool(
        description="Forget a memory: archive it with a reason (never deleted; memory_restore or memory_undo puts "
        "it back).",
        annotations=REPLACES,
    )
    def memory_forget(
        ctx: Context,
        id: Annotated[str, _arg("the memory's id", **_ID)],
        reason: Annotated[str, _arg("why it is wrong or no longer true (recorded)", maxLength=svc.MAX_REASON_CHARS)],
    ) -> svc.ForgetResult:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.forget(profile, id, reason=reason)

    @server.tool(
        description="A memory's versions from the change log: created, reinforced, extended, merged, "
        "superseded, archived, restored, purged, with cycle, pass, reason and text.",
        annotations=READ_ONLY,
    )
    def memory_history(
        ctx: Context, id: Annotated[str, _arg("the memory's id, live or not", **_ID)]
    ) -> svc.MemoryHistory:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.history(profile, id)

    @server.tool(
        description="Put an archived memory back live (forgotten, merged or superseded by mistake). Returns its "
        "text and the cycle_id memory_undo archives it again with; a live memory is left alone (already_live).",
        annotations=ADDS_ONCE,
    )
    def memory_restore(
        ctx: Context, id: Annotated[str, _arg("the archived memory's id (memory_get or memory_list shows it)", **_ID)]
    ) -> svc.RestoreResult:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.restore(profile, id)

    @server.tool(
        description="Undo the agent's own changes: a forget's or restore's cycle_id, a day's saves "
        "(agent-YYYY-MM-DD) or one change_id of them. A dream cycle or review set is refused: an operator undoes "
        "those with dream undo. The result lists what was put back, what was edited since and left alone.",
        annotations=REPLACES,
    )
    def memory_undo(
        ctx: Context,
        cycle_id: Annotated[
            str | None, _arg("the cycle to undo, as memory_forget or memory_restore returned it (or change_id)", **_ID)
        ] = None,
        change_id: Annotated[
            str | None, _arg("one change to undo, a change_id memory_history shows (or cycle_id)", **_ID)
        ] = None,
    ) -> svc.UndoReport:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.undo_own(profile, cycle_id=cycle_id, change_id=change_id)

    @server.tool(
        description="Changes the dream cycle proposes and waits on a decision for (review mode): sets by cycle, each "
        "change with its id, pass, kind, reason, before/after lines and when it expires.",
        annotations=READ_ONLY,
    )
    def review_list(ctx: Context) -> svc.ReviewList:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.review_list(profile)

    @server.tool(
        description="Apply a pending review set (cycle_id) or some of its changes (change_ids). A change whose "
        "memory was edited since is refused (the edit wins); undo_cycle_id undoes the apply.",
        annotations=REPLACES,
    )
    def review_apply(
        ctx: Context,
        cycle_id: Annotated[str | None, _arg("the pending set to apply whole (from review_list)", **_ID)] = None,
        change_ids: Annotated[
            list[str] | None, _arg("single changes to apply (ids from review_list)", items={"type": "string", **_ID})
        ] = None,
        reason: Annotated[str, _arg("why, recorded with the decision", maxLength=svc.MAX_REASON_CHARS)] = "",
    ) -> svc.ReviewDecision:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.review_decide(profile, "apply", cycle_id=cycle_id, change_ids=change_ids or (), reason=reason)

    @server.tool(
        description="Reject a pending review set (cycle_id) or some of its changes (change_ids): they are never "
        "applied, and a rejected merge is not proposed again.",
        annotations=REPLACES,
    )
    def review_reject(
        ctx: Context,
        cycle_id: Annotated[str | None, _arg("the pending set to reject whole (from review_list)", **_ID)] = None,
        change_ids: Annotated[
            list[str] | None, _arg("single changes to reject (ids from review_list)", items={"type": "string", **_ID})
        ] = None,
        reason: Annotated[str, _arg("why, recorded with the decision", maxLength=svc.MAX_REASON_CHARS)] = "",
    ) -> svc.ReviewDecision:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.review_decide(profile, "reject", cycle_id=cycle_id, change_ids=change_ids or (), reason=reason)

    @server.tool(description="The agent's skills (names and summaries).", annotations=READ_ONLY)
    def skill_list(
        ctx: Context, include_archived: Annotated[bool, _arg("list archived skills too")] = False
    ) -> svc.SkillList:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.list_skills(profile, include_archived=include_archived)

    @server.tool(description="One skill with its full text.", annotations=READ_ONLY)
    def skill_get(
        ctx: Context, name: Annotated[str, _arg("the skill's name, e.g. mcp/email", **_NAME)]
    ) -> svc.SkillRecord:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.get_skill(profile, name)

    @server.tool(description="Create or replace a skill (name such as mcp/email).", annotations=REPLACES)
    def skill_save(
        ctx: Context,
        name: Annotated[
            str, _arg("the skill's name, '/' separating levels (e.g. mcp/email)", maxLength=svc.MAX_NAME_CHARS)
        ],
        content: Annotated[str, _arg("the skill's full text (instructions, steps)", maxLength=svc.MAX_SKILL_CHARS)],
        summary: Annotated[str, _arg("one line saying what it is for", maxLength=svc.MAX_SUMMARY_CHARS)] = "",
        see_also: Annotated[
            list[str] | None,
            _arg("names of related skills", items={"type": "string", **_NAME}),
        ] = None,
    ) -> svc.SkillRecord:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.save_skill(profile, name, content, summary=summary, see_also=see_also or ())

    @server.tool(
        description="Record feedback: kind Correction, SessionSummary (needs rating poor/fair/good/"
        "excellent), Positive, Negative or Note.",
        annotations=ADDS,
    )
    def feedback_record(
        ctx: Context,
        session_id: Annotated[str, _arg(_SESSION, **_LOG_TEXT)],
        kind: Annotated[str, _arg("what the feedback is", enum=list(svc.FEEDBACK_KINDS))],
        text: Annotated[str, _arg("the feedback in words", **_LOG_TEXT)],
        rating: Annotated[
            str | None, _arg("how the session went; required for a SessionSummary", enum=[*svc.RATINGS, None])
        ] = None,
        domain: Annotated[
            str | None, _arg("the area it concerns, e.g. calendar (anti-patterns are filed under it)", **_LOG_TEXT)
        ] = None,
        skill_names: Annotated[
            list[str] | None,
            _arg("skills used in the session", items={"type": "string", **_LOG_TEXT}),
        ] = None,
    ) -> svc.Recorded:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.record_feedback(
                profile, session_id, kind, text, rating=rating, domain=domain, skill_names=skill_names or ()
            )

    @server.tool(description="Record that a skill was recalled, invoked or loaded.", annotations=ADDS)
    def skill_usage_record(
        ctx: Context,
        session_id: Annotated[str, _arg(_SESSION, **_LOG_TEXT)],
        skill_name: Annotated[str, _arg("the skill's name, e.g. mcp/email", **_LOG_TEXT)],
        action: Annotated[str, _arg("what was done with it", enum=list(svc.SKILL_ACTIONS))] = "invoked",
    ) -> svc.Recorded:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.record_skill_usage(profile, session_id, skill_name, action=action)

    @server.tool(description="Record one tool call and whether it succeeded.", annotations=ADDS)
    def tool_call_record(
        ctx: Context,
        session_id: Annotated[str, _arg(_SESSION, **_LOG_TEXT)],
        tool: Annotated[str, _arg("the tool called, e.g. calendar.create", **_LOG_TEXT)],
        success: Annotated[bool, _arg("whether the call succeeded")],
        error: Annotated[str | None, _arg("the error it returned, when it failed", **_LOG_TEXT)] = None,
        duration_ms: Annotated[float | None, _arg("how long the call took, in milliseconds")] = None,
        skill_name: Annotated[str | None, _arg("the skill that led to the call", **_LOG_TEXT)] = None,
    ) -> svc.Recorded:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.record_tool_call(
                profile, session_id, tool, success, error=error, duration_ms=duration_ms, skill_name=skill_name
            )

    @server.tool(description="Append one conversation turn (role user, assistant or tool).", annotations=ADDS)
    def conversation_append(
        ctx: Context,
        session_id: Annotated[str, _arg(_SESSION, **_LOG_TEXT)],
        role: Annotated[str, _arg("who spoke", enum=list(svc.ROLES))],
        content: Annotated[str, _arg("what was said", **_LOG_TEXT)],
    ) -> svc.Recorded:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.append_turn(profile, session_id, role, content)

    @server.tool(
        description="Memory counts, whether the agent counts as active, and every dream pass's last outcome.",
        annotations=READ_ONLY,
    )
    def dream_status(ctx: Context) -> svc.DreamStatus:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.status(profile)

    @server.tool(
        description="The last dream cycle's report (or cycle_id's): what changed, what was rejected and why, "
        "how to undo it.",
        annotations=READ_ONLY,
    )
    def dream_last_report(
        ctx: Context,
        cycle_id: Annotated[str | None, _arg("the cycle whose report to show (none: the last cycle)", **_ID)] = None,
    ) -> svc.CycleReportText:
        with _calling(profile_of(ctx), warm) as profile:
            return svc.last_cycle_report(profile, cycle_id=cycle_id)

    return server


TOOL_NAMES = (
    "memory_save",
    "memory_search",
    "memory_get",
    "memory_list",
    "memory_reinforce",
    "memory_forget",
    "memory_history",
    "memory_restore",
    "memory_undo",
    "review_list",
    "review_apply",
    "review_reject",
    "skill_list",
    "skill_get",
    "skill_save",
    "feedback_record",
    "skill_usage_record",
    "tool_call_record",
    "conversation_append",
    "dream_status",
    "dream_last_report",
)


# --- stdio ----------------------------------------------------------------------------------------------------------


def start_line(where: str) -> str:
    """What ``dream serve`` says when it starts (on stderr): where it serves and which recall index is in use."""
    from dream_assets.text.bm25 import kernel_description

    return f"dream serve: {where}; recall index: {kernel_description()}"


def serve_stdio(profile: AgentProfile, limits: WarmLimits | None = None) -> None:
    """Serve one agent over stdin/stdout until the client closes the stream. The agent is opened and its recall index
    loaded in the background at once (the first call waits for what it needs of it, no longer); on the way out its
    recall index is written to its file."""
    import sys

    profile.ensure()
    warm = WarmAgents(limits or WarmLimits(max_agents=1))
    print(start_line(f"agent {profile.root} over stdio"), file=sys.stderr, flush=True)
    warm.preload(profile)
    try:
        server = build_server(lambda _ctx: profile, warm)
        with _claimed_pipes() as pipes:
            if pipes is None:
                server.run("stdio")
            else:
                anyio.run(_serve_pipes, server, *pipes)
    finally:
        warm.close()


#: Longest request line read from a stdin pipe (the SDK's own transport has no limit either; a memory is far less).
_MAX_LINE = 1 << 30
#: How long the replies still buffered when the client closes its end may take to reach it (a client that stopped
#: reading does not hold the server's exit longer).
_DRAIN_S = 5.0


@contextmanager
def _claimed_pipes() -> Iterator[tuple[int, int] | None]:
    """When stdin and stdout are pipes (or sockets), as an MCP client starts its server: copies of both for the
    protocol, while descriptor 0 reads the null device and descriptor 1 writes to stderr, so nothing else in the
    process (a library that prints, a child process) reads the client's requests or writes into the replies; both are
    put back on the way out. None otherwise (a terminal, a file): the SDK's own transport serves those."""
    import sys

    if not all(stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISSOCK(os.fstat(fd).st_mode) for fd in (0, 1)):
        yield None
        return
    sys.stdout.flush()
    kept = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        protocol = os.dup(0), os.dup(1)  # closed with the event loop's transports
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield protocol
    finally:
        sys.stdout.flush()  # what was printed meanwhile goes where descriptor 1 pointed then: stderr
        for fd, original in zip((0, 1), kept, strict=True):
            os.dup2(original, fd)
            os.set_blocking(fd, True)  # the event loop's transports made the pipes non-blocking
            os.close(original)
        os.close(null)


class _RequestLines:
    """The client's requests, a line at a time, read from the stdin pipe on the event loop."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _RequestLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")  # as the SDK reads stdin


class _ReplyWriter:
    """The replies, written to the stdout pipe on the event loop."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


async def _serve_pipes(server: MCPServer, stdin_fd: int, stdout_fd: int) -> None:
    """``server`` over the stdin and stdout pipes, read and written by the event loop itself. The SDK's stdio
    transport hands each line read, each write and each flush to a worker thread: three thread switches a call,
    about a third of a millisecond of the server's CPU time, more than the rest of the transport."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_MAX_LINE)
    reading, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(stdin_fd, "rb", buffering=0)
    )
    writing, flow = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(stdout_fd, "wb", 0))
    writer = asyncio.StreamWriter(writing, flow, None, loop)
    try:
        streams = stdio_server(_RequestLines(reader), _ReplyWriter(writer))  # type: ignore[arg-type]
        async with streams as (read_stream, write_stream):
            lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs over the SDK's own streams
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
    finally:
        reading.close()
        # The last replies still buffered reach the client before the process ends: with a high-water mark of 0,
        # drain waits until the pipe took every byte (a StreamWriter over this protocol has no wait_closed).
        with anyio.move_on_after(_DRAIN_S, shield=True), suppress(OSError):
            writing.set_write_buffer_limits(high=0)
            await writer.drain()
        writer.close()


# --- Streamable HTTP ------------------------------------------------------------------------------------------------


class ServeConfigError(ValueError):
    """The HTTP server cannot start as configured (the message says what to change)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_agent_tokens(text: str | None) -> dict[str, str]:
    """``agent=token,agent=token`` or a JSON object, as ``DREAM_SERVE_AGENT_TOKENS`` holds it."""
    if not text or not text.strip():
        return {}
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ServeConfigError(f"{AGENT_TOKENS_ENV} is not a JSON object: {exc}") from None
        pairs = list(data.items()) if isinstance(data, dict) else None
        if pairs is None:
            raise ServeConfigError(f"{AGENT_TOKENS_ENV} must be a JSON object of agent id to token")
    else:
        pairs = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            agent, sep, token = part.partition("=")
            if not sep:
                raise ServeConfigError(f"{AGENT_TOKENS_ENV}: {part!r} is not agent=token")
            pairs.append((agent.strip(), token.strip()))
    tokens = {}
    for agent, token in pairs:
        try:
            validate_agent_id(str(agent))
        except ProfileError as exc:
            raise ServeConfigError(f"{AGENT_TOKENS_ENV}: {exc}") from None
        if not isinstance(token, str) or len(token) < 16:
            raise ServeConfigError(f"{AGENT_TOKENS_ENV}: the token of agent {agent!r} must be at least 16 characters")
        tokens[str(agent)] = token
    return tokens


@dataclass
class HttpGate:
    """Who may reach which agent's endpoint, and with what (see the module docstring)."""

    profile_root: Path
    host: str
    port: int
    token: str | None = None
    agent_tokens: dict[str, str] = field(default_factory=dict)
    allowed_origins: Sequence[str] = ()
    allowed_hosts: Sequence[str] = ()  # Host header values besides the loopback names and the bound address
    max_request_bytes: int = MAX_REQUEST_BYTES
    _agents: dict[str, tuple[tuple[int, int, int], tuple[Path, bool, AgentProfile | None]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.profile_root = Path(self.profile_root).expanduser().resolve()
        if self.token is not None and len(self.token) < 16:
            raise ServeConfigError(f"the token in {TOKEN_ENV} must be at least 16 characters")
        if not is_loopback(self.host) and not (self.token or self.agent_tokens):
            raise ServeConfigError(
                f"dream serve binds {self.host}, which is not a loopback address: set a bearer token in {TOKEN_ENV} "
                f"(or per-agent tokens in {AGENT_TOKENS_ENV}) first, or bind 127.0.0.1"
            )

    @property
    def hosts(self) -> list[str]:
        names = {"127.0.0.1", "localhost", "[::1]", self.host if ":" not in self.host else f"[{self.host}]"}
        return sorted({f"{n}:{self.port}" for n in names} | set(self.allowed_hosts))

    @property
    def origins(self) -> list[str]:
        return sorted({f"http://{h}" for h in self.hosts} | set(self.allowed_origins))

    def transport_security(self) -> TransportSecuritySettings:
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=self.hosts, allowed_origins=self.origins
        )

    def check(self, path: str, headers: Mapping[str, str]) -> tuple[int, str] | AgentProfile:
        """The agent profile the request may reach, or (HTTP status, reason) when it is refused."""
        m = _AGENT_PATH.fullmatch(path)
        if m is None:
            return 404, "no such endpoint: agents are served at /agents/<agent id>/mcp"
        agent = m.group(1)
        try:
            validate_agent_id(agent)
        except ProfileError as exc:
            return 400, str(exc)
        # The folder the request would reach decides the token: a symlink inside the root (alias -> alpha) reaches
        # alpha, whose own token replaces the shared one whatever name the URL gives it.
        root, inside, profile = self._folder(agent)
        real = root.name if inside else agent
        expected = self.agent_tokens.get(real, self.token)
        if expected is not None:
            given = headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), expected.encode()):
                return 401, "a valid bearer token is required (Authorization: Bearer <token>)"
        elif self.agent_tokens and self.token is None:
            return 401, f"agent {agent!r} has no token in {AGENT_TOKENS_ENV}; it is not served"
        origin = headers.get("origin")
        if origin and origin not in self.origins:
            return 403, f"origin {origin!r} is not allowed (--allow-origin adds one)"
        host = headers.get("host", "")
        if host not in self.hosts:
            return 421, f"host {host!r} is not one this server answers for (--allow-host adds one)"
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_request_bytes):
            return 413, f"request body over {self.max_request_bytes} bytes"
        if profile is None:
            return 404, f"no agent {agent!r} under the profile root (create it with `dream init --profile ...`)"
        return profile

    def _folder(self, agent: str) -> tuple[Path, bool, AgentProfile | None]:
        """Where ``agent`` leads: the folder reached (symlinks followed), whether it lies directly under the root with
        an agent id for a name, and its profile when it holds one. A folder that is no symlink is its own resolved
        path, and whether it holds a profile changes only with its entries (its modification time), so an agent found
        there is kept (by the folder's inode and modification time) instead of being resolved again, part by part,
        for every request; anything else is looked at anew each time."""
        entry = self.profile_root / agent
        try:
            found = os.lstat(entry)
        except OSError:
            found = None
        key = (found.st_dev, found.st_ino, found.st_mtime_ns) if found and stat.S_ISDIR(found.st_mode) else None
        known = self._agents.get(agent)
        if key is not None and known is not None and known[0] == key:
            return known[1]
        root = entry.resolve()
        inside = root.parent == self.profile_root and _is_agent_id(root.name)
        verdict = root, inside, AgentProfile(root) if inside and holds_profile(root) else None
        if key is not None and verdict[2] is not None:
            self._agents[agent] = key, verdict
        else:
            self._agents.pop(agent, None)
        return verdict


def _is_agent_id(name: str) -> bool:
    try:
        validate_agent_id(name)
    except ProfileError:
        return False
    return True


def _profile_from_request(ctx: Context) -> AgentProfile:
    request = ctx.request_context.request
    profile = getattr(request, "scope", {}).get("state", {}).get(_SCOPE_KEY) if request is not None else None
    if not isinstance(profile, AgentProfile):
        raise ToolError("this call did not come through an agent endpoint (/agents/<id>/mcp)")
    return profile  # as the gate resolved it: not resolved again, path part by part, for every call


@dataclass
class _OneCall:
    """What the SDK's handlers see of the request a tool call came in (its ``DispatchContext``): JSON responses carry
    the reply alone, so nothing else is sent back during the call (no server requests, no notifications)."""

    transport: TransportContext
    request_id: RequestId
    message_metadata: ServerMessageMetadata
    progress_token: ProgressToken | None = None
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    can_send_request: bool = field(default=False, init=False)

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> dict:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> None:
        return None

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None


class _ToolCalls:
    """Tool calls answered in their request's own task. The SDK's stateless transport builds, for every request, a
    transport, a message dispatcher with its memory streams and a task of its own to run the one message through:
    two fifths of what the server spent on a call around the store's work (1.7 ms of CPU time against 1.05 ms
    answered here, measured with a save that does no store work). A POST that
    holds one ``tools/call`` request, with the headers the SDK's transport accepts, is answered here instead by the
    SDK's single-request driver (``serve_one``: the same handler chain, arguments validated against the tool's
    schema, the same result), its reply written as that transport writes it. Anything else (``initialize``, a
    notification, a GET, a header or body the transport answers with an error) goes to the SDK as it came. The
    ``Host`` and ``Origin`` headers were checked by the gate against the lists the SDK's transport is given."""

    def __init__(self, server: MCPServer) -> None:
        self._server = server._lowlevel_server

    def takes(self, scope: dict, headers: Mapping[str, str]) -> bool:
        """Whether the request's method and headers are those of a call this lane answers as the SDK would."""
        if scope.get("method") != "POST" or "content-length" not in headers:
            return False
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER.lower())
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return False  # a newer protocol's request: the SDK's own single-exchange entry
        content_type = headers.get("content-type", "")
        if not content_type.lower().startswith(CONTENT_TYPE_JSON):
            return False
        if CONTENT_TYPE_JSON not in (part.strip() for part in content_type.split(";")[0].split(",")):
            return False
        accepted = {t.strip().split(";")[0].strip().lower() for t in headers.get("accept", "").split(",")}
        return bool(accepted & {CONTENT_TYPE_JSON, "application/*", "*/*"})

    async def answer(self, scope: dict, body: bytes, headers: Mapping[str, str], send: Callable) -> bool:
        """Answer the call in ``body``; False (nothing sent) when it is not one this lane answers."""
        try:
            message = jsonrpc_message_adapter.validate_python(pydantic_core.from_json(body), by_name=False)
        except ValueError:  # not JSON, or not a JSON-RPC message (a ValidationError is a ValueError)
            return False
        if not isinstance(message, JSONRPCRequest) or message.method != "tools/call":
            return False
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER.lower(), DEFAULT_NEGOTIATED_VERSION)
        reply: JSONRPCResponse | JSONRPCError
        try:
            result = await serve_call(self._server, message.id, message.method, message.params, version, Request(scope))
        except Exception as exc:  # the SDK's dispatcher maps a handler's failure the same way
            error = handler_exception_to_error_data(exc)
            if error is None:
                log.exception("handler for %r raised", message.method)
                error = ErrorData(code=0, message=str(exc))
            reply = JSONRPCError(jsonrpc="2.0", id=message.id, error=error)
        else:
            reply = JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
        text = reply.model_dump_json(by_alias=True, exclude_unset=True).encode()
        response_headers = [(b"content-type", CONTENT_TYPE_JSON.encode()), (b"content-length", b"%d" % len(text))]
        await send({"type": "http.response.start", "status": 200, "headers": response_headers})
        await send({"type": "http.response.body", "body": text})
        return True


async def serve_call(
    lowlevel: Any,
    request_id: RequestId,
    method: str,
    params: Mapping[str, Any] | None,
    version: str = DEFAULT_NEGOTIATED_VERSION,
    request: Request | None = None,
) -> Any:
    """One request answered by the SDK's single-request driver (``serve_one``) as a stateless HTTP call: the same
    handler chain as the SDK's transports, nothing sent back during the call (``_OneCall``). The HTTP lane answers
    tool calls with it, and benchmarks/serve.py measures what the SDK alone costs a call through it."""
    call = _OneCall(
        transport=TransportContext(kind="streamable-http", can_send_request=False),
        request_id=request_id,
        message_metadata=ServerMessageMetadata(request_context=request, can_send_request=False),
    )
    # The state of the SDK's default lifespan: the server has none of its own.
    connection = Connection.from_envelope(version, None, None)
    return await serve_one(lowlevel, call, method, params, connection=connection, lifespan_state={})


async def _read_body(receive: Callable) -> tuple[bytes, list[dict]]:
    """The request's body and the messages it came in (to hand them on as they came)."""
    messages, chunks = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks), messages


def _replay(messages: list[dict], receive: Callable) -> Callable:
    pending = list(messages)

    async def again() -> dict:
        return pending.pop(0) if pending else await receive()

    return again


def http_app(gate: HttpGate, warm: WarmAgents | None = None) -> Any:
    """The ASGI application: the gate, then the SDK's stateless Streamable HTTP transport at each agent's path (a
    tool call answered in its request's task, ``_ToolCalls``); ``warm`` keeps the agents warm between requests."""
    server = build_server(_profile_from_request, warm)
    inner = server.streamable_http_app(
        streamable_http_path="/mcp",
        json_response=True,
        stateless_http=True,
        max_request_body_size=gate.max_request_bytes,
        transport_security=gate.transport_security(),
        host=gate.host,
    )
    calls = _ToolCalls(server)

    async def app(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)  # lifespan: starts and stops the SDK's session manager
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        verdict = gate.check(scope.get("path", ""), headers)
        if not isinstance(verdict, AgentProfile):
            status, reason = verdict
            await _refuse(send, status, reason)
            return
        state = dict(scope.get("state") or {})
        state[_SCOPE_KEY] = verdict
        scope = {**scope, "path": "/mcp", "raw_path": b"/mcp", "state": state}
        if calls.takes(scope, headers):  # the gate held the body to max_request_bytes by its length
            body, messages = await _read_body(receive)
            if len(body) <= gate.max_request_bytes and await calls.answer(scope, body, headers, send):
                return
            receive = _replay(messages, receive)
        await inner(scope, receive, send)

    return app


async def _refuse(send: Callable, status: int, reason: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": reason}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="dream"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def gate_from_environment(
    profile_root: str | Path,
    host: str,
    port: int,
    *,
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
    max_request_bytes: int = MAX_REQUEST_BYTES,
    env: Mapping[str, str] | None = None,
) -> HttpGate:
    env = os.environ if env is None else env
    return HttpGate(
        profile_root=Path(profile_root),
        host=host,
        port=port,
        token=env.get(TOKEN_ENV) or None,
        agent_tokens=parse_agent_tokens(env.get(AGENT_TOKENS_ENV)),
        allowed_origins=tuple(allowed_origins),
        allowed_hosts=tuple(allowed_hosts),
        max_request_bytes=max_request_bytes,
    )


def connection_limits(options: DreamOptions) -> ConnectionLimits:
    """The HTTP server's connection limits from the options (``ServeHeaderTimeout`` ... ``ServeMaxConnections``)."""
    return ConnectionLimits(
        header_timeout_s=options.ServeHeaderTimeout.total_seconds(),
        body_timeout_s=options.ServeBodyTimeout.total_seconds(),
        max_per_client=options.ServeMaxConnectionsPerClient,
        max_total=options.ServeMaxConnections,
    )


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket on ``host:port``, bound before anything is announced: a port another process
    holds (or an address this machine does not have) is a ``ServeConfigError`` naming it, not a banner and a crash."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ServeConfigError(f"cannot listen on {host}:{port}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        why = "the port is taken by another process" if exc.errno == errno.EADDRINUSE else str(exc)
        raise ServeConfigError(f"cannot listen on {host}:{port}: {why} (choose another port)") from exc
    sock.set_inheritable(True)
    return sock


def serve_http(
    gate: HttpGate,
    limits: ConnectionLimits | None = None,
    sock: socket.socket | None = None,
    warm_limits: WarmLimits | None = None,
) -> None:
    """Serve every agent under the gate's profile root until interrupted, within ``limits`` (``serve_guard``), on
    ``sock`` (from ``listen``) or a socket bound here, keeping agents warm within ``warm_limits``. Idle agents are
    let go by a sweep every minute too (not only when a call comes); on the way out every warm agent's recall index
    is written to its file."""
    import threading

    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    warm = WarmAgents(warm_limits or WarmLimits())
    stop = threading.Event()

    def sweep() -> None:
        while not stop.wait(min(60.0, max(1.0, warm.limits.idle_s / 2))):
            warm.sweep()

    threading.Thread(target=sweep, name="warm-sweep", daemon=True).start()
    guard = ConnectionGuard(limits or ConnectionLimits())
    config = uvicorn.Config(
        guard.asgi(http_app(gate, warm)),
        host=gate.host,
        port=gate.port,
        log_level="warning",
        lifespan="on",
        http=guard.protocol(AutoHTTPProtocol),
        ws="none",
    )
    try:
        uvicorn.Server(config).run(sockets=[sock or listen(gate.host, gate.port)])
    finally:
        stop.set()
        warm.close()
