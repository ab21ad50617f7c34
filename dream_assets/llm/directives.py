"""Directive files: the system prompt of each pass.

Spec, "Directive files": each pass has a directive file on the agent data volume; when it does not exist
the built-in one is used. A custom file replaces the built-in prompt entirely — a complete replacement,
not a diff. The file name comes from the option the pass's model call names (``ModelCall.directive_option``:
``DirectivePath`` = ``dream.md`` ..., a pass section's ``directive`` key by its alias or nested name), the call the
pass hands in, and is the built-in file's name where the options know no such option; a call without such an option
(``directive_option`` None) has only its built-in directive.

Built-in directives are the files of the project's top-level ``directives/`` folder, installed as the package
``dream_assets.directives`` (``pyproject.toml`` maps the folder onto it) and read through ``importlib.resources``, so
they are found the same way in an editable install and in a wheel.
"""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path

from dream_assets.llm.contracts import BUILTIN_DIRECTIVES_PACKAGE, ModelCall
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile, ProfileError

log = logging.getLogger("dream_assets.llm.directives")

BUILTIN_SOURCE = "built-in"


class DirectiveError(ValueError):
    """A directive cannot be read. The message names the file and the fix."""


def builtin_directive(file_name: str, package: str = BUILTIN_DIRECTIVES_PACKAGE) -> str:
    """Text of a built-in directive file (in the package data of ``package``)."""
    packaged = resources.files(package).joinpath(file_name)
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    raise DirectiveError(
        f"built-in directive {file_name} is missing from the package data {package}; reinstall dream_assets"
    )


def override_path(call: ModelCall, profile: AgentProfile, options: DreamOptions) -> Path | None:
    """Where an agent's own directive for ``call`` would be (None for calls without overrides)."""
    option = call.directive_option
    if option is None:
        return None
    try:
        file_name = options.value_of(option)
    except KeyError:  # options that know no section of the call's pass: the built-in file's name, its default
        file_name = call.directive_file
    try:
        return profile.directive_override_path(file_name)
    except ProfileError as exc:
        raise DirectiveError(f"option {option}={file_name!r}: {exc}") from None


def load_directive(call: ModelCall, profile: AgentProfile | None, options: DreamOptions) -> tuple[str, str]:
    """(directive text, source) of ``call``: source is "built-in" or the path of the agent's override file."""
    option, builtin_name = call.directive_option, call.directive_file
    path = override_path(call, profile, options) if profile is not None else None
    if path is not None and path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DirectiveError(
                f"directive {path} (option {option}) is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                "save it as UTF-8 or delete it to use the built-in directive"
            ) from None
        if text.strip():
            return text, str(path)
        log.warning(
            "directive %s (option %s) is empty; using the built-in %s instead — write a complete "
            "directive there or delete the file",
            path,
            option,
            builtin_name,
        )
    return builtin_directive(builtin_name, call.directive_package), BUILTIN_SOURCE
