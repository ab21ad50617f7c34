"""The optional parts of the install (pyproject.toml's extras) and the one error a feature raises when its extra is
missing: the base install gives the library, `dream memory`, `dream serve` and the in-process cycle; the Dagster
layer, the TF-IDF measure, the LangGraph store and exact token counts each come with an extra.

A command that needs a missing extra fails with one line naming it (the CLI's exit 2: nothing was changed)."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

#: The distribution name pip installs the extras of.
DISTRIBUTION = "dream-assets"

#: extra -> the modules it brings (the first one decides whether the extra is installed).
EXTRAS: dict[str, tuple[str, ...]] = {
    "dagster": ("dagster", "dagster_webserver", "pandas"),
    "tfidf": ("sklearn",),
    "tokens": ("tiktoken",),
    "langgraph": ("langgraph",),
}


class MissingExtra(ImportError):
    """A feature whose optional packages are not installed; the message names the extra to install."""

    def __init__(self, what: str, extra: str, module: str) -> None:
        self.what, self.extra = what, extra
        super().__init__(
            f"{what} needs the optional package {module}, which this install lacks: "
            f"pip install '{DISTRIBUTION}[{extra}]'",
            name=module,
        )


def has_extra(extra: str) -> bool:
    """Whether the modules of ``extra`` can be imported (checked without importing them)."""
    return importlib.util.find_spec(EXTRAS[extra][0]) is not None


def require(module: str, extra: str, what: str) -> ModuleType:
    """``module`` imported, or MissingExtra naming ``extra`` when it is not installed. ``what``: the feature that needs
    it, as a person knows it ("LexicalSimilarityMeasure=tfidf")."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module.split(".")[0] != exc.name.split(".")[0]:
            raise  # the module is there and one of its own imports is broken: that is not a missing extra
        raise MissingExtra(what, extra, module.split(".")[0]) from None
