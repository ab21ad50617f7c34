"""The adapters shipped, by name. A new one is a class with the five calls of ``base.Adapter`` whose constructor
takes keyword arguments (``root``: a folder of its own for the run; ``env``: the environment) and raises
``Unavailable`` when it cannot run here."""

from __future__ import annotations

import importlib
from typing import Any

from .base import Adapter, Kept, Unavailable

#: name -> (module, class); imported only when used, so a missing optional package breaks nothing else.
ADAPTERS = {
    "dream_assets": ("dream_assets_adapter", "DreamAssets"),
    "append_only": ("append_only", "AppendOnly"),
    "llm_rewrite": ("llm_rewrite", "LlmRewrite"),
    "mem0": ("mem0_adapter", "Mem0"),
}


def create(name: str, **kwargs: Any) -> Adapter:
    """The adapter ``name``; raises ``Unavailable`` when it cannot run here, ``KeyError`` for an unknown name."""
    module, cls = ADAPTERS[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)(**kwargs)


__all__ = ["ADAPTERS", "Adapter", "Kept", "Unavailable", "create"]
