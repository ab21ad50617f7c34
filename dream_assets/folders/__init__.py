"""Markdown memory folders agents already keep (Claude Code auto memory, OpenClaw workspaces, plain notes): linked
to an agent, read into the store before a cycle and written back after it.

This package holds the formats, the parsing, the file safety and the file writing; the operations that read the
store or write memories (``read_folder``, ``plan_write_back``, ``apply_write_back``, ``write_back``) are the memory
service's (``dream_assets.service.folders``) and are named here too, loaded when first asked for (the service
builds on this package)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dream_assets.folders.sync import (
        READ_STEP,
        WRITE_STEP,
        FolderError,
        FolderLink,
        FolderUndo,
        link_folder,
        linked,
        load_link,
        undo_files,
    )
    from dream_assets.service.folders import apply_write_back, plan_write_back, read_folder, write_back

#: The names of folders.sync, loaded when first asked for: a module of the package (the formats, for the choices of
#: a command's --format) is imported without the reading and writing it does not need.
_SYNC = (
    "READ_STEP",
    "WRITE_STEP",
    "FolderError",
    "FolderLink",
    "FolderUndo",
    "link_folder",
    "linked",
    "load_link",
    "undo_files",
)
#: The names that live in the memory service (they read the store).
_SERVICE = ("apply_write_back", "plan_write_back", "read_folder", "write_back")

__all__ = [
    "READ_STEP",
    "WRITE_STEP",
    "FolderError",
    "FolderLink",
    "FolderUndo",
    "apply_write_back",
    "link_folder",
    "linked",
    "load_link",
    "plan_write_back",
    "read_folder",
    "undo_files",
    "write_back",
]


def __getattr__(name: str) -> Any:
    if name in _SYNC:
        from dream_assets.folders import sync

        return getattr(sync, name)
    if name in _SERVICE:
        from dream_assets.service import folders

        return getattr(folders, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
