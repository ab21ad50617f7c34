"""The linked memory folder's operations of the memory service: read it into the store, plan and write the
write-back from the store, put its files back with an undo; ``dream link`` / ``dream sync`` and the cycle call these.

``dream_assets.folders`` holds the formats, the parsing, the file safety and the file writing; everything that reads
the store or writes a memory or a change row is here: the notes a read finds are saved and the memories of notes a
person removed forgotten through the agent's own operations (``agent_memory.save_many``, ``agent_memory.forget``,
with their change rows), a write-back plan reads the memories through ``StoreReader``, and right before a plan is
written the memories of the notes it takes out of their files are read again: a note whose memory is live in the
store now (restored, or put back by an undo since the plan) stays in its file (``live_again``)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from dream_assets import agent_memory
from dream_assets import recall_index as recall
from dream_assets.agent_memory import MemoryRecord
from dream_assets.folders import sync
from dream_assets.folders.sync import (
    READ_STEP,
    WRITE_STEP,
    FolderError,
    FolderLink,
    FolderUndo,
    WritePlan,
    link_folder,
    linked,
    load_link,
    undo_files,
)
from dream_assets.model import utc_or_now
from dream_assets.options import DreamOptions, load_agent_options
from dream_assets.passes.report import PassReport
from dream_assets.profile import AgentProfile, as_profile
from dream_assets.store import DreamStore, open_store
from dream_assets.store.locks import LockTimeout, path_lock

#: How long a read or a write-back of the linked folder waits for another one to finish.
FOLDER_LOCK_WAIT_S = 120.0

__all__ = [
    "READ_STEP",
    "WRITE_STEP",
    "FolderError",
    "FolderLink",
    "FolderUndo",
    "StoreReader",
    "WritePlan",
    "apply_write_back",
    "link_folder",
    "linked",
    "live_again",
    "load_link",
    "plan_write_back",
    "read_folder",
    "refresh",
    "undo_files",
    "write_back",
]


class StoreReader:
    """The memories a write-back plan reads (``sync.StoreView``), from the agent's store."""

    def __init__(self, store: DreamStore) -> None:
        self.store = store

    def record(self, entry_id: str) -> MemoryRecord | None:
        return agent_memory.resolve_record(self.store, entry_id)

    def change_set(self, entry_id: str) -> str | None:
        rows = [r for r in self.store.changes.for_target("memory", entry_id) if r.undone_at is None]
        return rows[-1].cycle_id if rows else None

    def text_set(self, entry_id: str) -> str | None:
        rows = [
            r
            for r in self.store.changes.for_target("memory", entry_id)
            if r.undone_at is None
            and r.after is not None
            and (r.before is None or r.before.get("content") != r.after.get("content"))
        ]
        return rows[-1].cycle_id if rows else None

    def same_fact(self, a: str, b: str) -> bool:
        return recall.same_fact(self.store.memories, a, b)

    def kept_since(self, since: datetime) -> list[MemoryRecord]:
        return [agent_memory.live_record(e) for e in self.store.memories.live_created_after(since)]


def read_folder(
    profile: AgentProfile | str | Path, options: DreamOptions | None = None, now: datetime | None = None
) -> PassReport:
    """Read the linked folder into the store (``dream_assets.folders.sync``): every note not seen before is saved
    through the agent's save, and the memory of a note a person removed from its file is forgotten. A report with
    status ``skipped`` when no folder is linked, ``failed`` (naming the file) when the folder cannot be read safely,
    the store then unchanged."""
    profile = as_profile(profile)
    with path_lock(profile.memory_folder_lock_path, timeout=FOLDER_LOCK_WAIT_S):
        return _read(profile, options, now)


def refresh(
    profile: AgentProfile | str | Path, options: DreamOptions | None = None, now: datetime | None = None
) -> PassReport | None:
    """Before a search or a save: read the linked folder first when one of its files changed since the last read
    (``sync.changed_since_read``: a stat of each file, nothing read when none moved), so a note a person or the
    agent's own tool just wrote is found without waiting for a cycle. None when there was nothing to read, or the
    folder is being read or written back right now (a cycle, ``dream sync``: the search answers from the store)."""
    profile = as_profile(profile)
    if not linked(profile):
        return None
    try:
        if not sync.files_moved(profile):  # the usual call: a stat per file, no lock taken
            return None
        with path_lock(profile.memory_folder_lock_path, timeout=0):
            if not sync.changed_since_read(profile):
                return None
            return _read(profile, options, now)
    except (LockTimeout, FolderError):
        return None


def _read(profile: AgentProfile, options: DreamOptions | None, now: datetime | None) -> PassReport:
    options = load_agent_options(profile) if options is None else options
    now = utc_or_now(now)
    read = sync.begin_read(profile, options)
    if isinstance(read, PassReport):
        return read
    saves = agent_memory.save_many(profile, read.batch, options=options, now=now, active=False)
    removed = 0
    for entry_id, reason in read.saved(saves):
        try:
            agent_memory.forget(profile, entry_id, reason=reason, options=options, now=now, active=False)
            removed += 1
        except agent_memory.NotFound:
            pass
    return read.finish(profile, removed)


def plan_write_back(
    profile: AgentProfile | str | Path, options: DreamOptions | None = None, now: datetime | None = None
) -> WritePlan | None:
    """What a write-back would do now, from the store (nothing is written); None when no folder is linked."""
    profile = as_profile(profile)
    options = load_agent_options(profile) if options is None else options
    return sync.plan_from(profile, StoreReader(open_store(profile, options)), options, utc_or_now(now))


def live_again(profile: AgentProfile, plan: WritePlan, options: DreamOptions | None = None) -> dict[str, str]:
    """The files of ``plan`` that would take out a note whose memory is live in the store now (restored, or put
    back by an undo, since the plan was made), each with why it is left as it is."""
    ids = {i for change in plan.changes for i in change.removes}
    if not ids:
        return {}
    store = open_store(profile, load_agent_options(profile) if options is None else options)
    live = {i for i in ids if (e := store.memories.get(i)) is not None and not e.is_archived}
    return {
        c.rel: f"{plan.link.folder / c.rel}: left as it is, the memory of a note it would take out is live again "
        f"({', '.join(sorted(live & set(c.removes)))}); written next cycle"
        for c in plan.changes
        if live & set(c.removes)
    }


def apply_write_back(
    profile: AgentProfile | str | Path, plan: WritePlan, cycle_id: str | None = None, now: datetime | None = None
) -> PassReport:
    """Write ``plan`` (``sync.apply_write_back``), leaving every file that would take out a note whose memory is
    live in the store now (``live_again``). A link recorded before links kept their time gets ``now``: the memories
    the agent keeps from then on are written into the folder by the next write-back, none kept before."""
    profile = as_profile(profile)
    with path_lock(profile.memory_folder_lock_path, timeout=FOLDER_LOCK_WAIT_S):
        report = sync.apply_write_back(profile, plan, cycle_id, hold=live_again(profile, plan))
    if plan.link.linked_at is None and report.status != "failed":
        sync.record_link(profile, FolderLink(plan.link.folder, plan.link.format, utc_or_now(now)))
    return report


def write_back(
    profile: AgentProfile | str | Path,
    options: DreamOptions | None = None,
    now: datetime | None = None,
    *,
    cycle_id: str | None = None,
) -> PassReport:
    """Plan and apply the write-back of the linked folder (the last step of a cycle). When the last read of the
    folder failed nothing is written (the folder is not what the store was read from)."""
    profile = as_profile(profile)
    try:
        plan = plan_write_back(profile, options, now)
    except FolderError as exc:
        return PassReport(WRITE_STEP).fail(str(exc))
    except OSError as exc:
        return PassReport(WRITE_STEP).fail(f"{exc.filename or 'the linked folder'}: could not be read ({exc})")
    if plan is None:
        return PassReport(WRITE_STEP).skip("no memory folder linked (dream link)")
    return apply_write_back(profile, plan, cycle_id, now)
