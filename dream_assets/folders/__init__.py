"""Markdown memory folders agents already keep (Claude Code auto memory, OpenClaw workspaces, plain notes): linked
to an agent, read into the store before a cycle and written back after it."""

from dream_assets.folders.sync import (
    READ_STEP,
    WRITE_STEP,
    FolderError,
    FolderLink,
    apply_write_back,
    link_folder,
    linked,
    load_link,
    plan_write_back,
    read_folder,
    undo_files,
    write_back,
)

__all__ = [
    "READ_STEP",
    "WRITE_STEP",
    "FolderError",
    "FolderLink",
    "apply_write_back",
    "link_folder",
    "linked",
    "load_link",
    "plan_write_back",
    "read_folder",
    "undo_files",
    "write_back",
]
