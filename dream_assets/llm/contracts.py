"""What every response contract shares: the ``Contract`` base, id-list fields, and ``ModelCall``.

Each pass defines its own contract (the JSON shape it accepts from the model) next to its body, on this base. Field
aliases are the spec's camelCase JSON ("LLM response format": ``toDelete``, ``toSave``, ``sourceIds``); the
snake_case names work too. Unknown keys are ignored, ``null`` for a field with a default means the default, and
numbers where text is expected (ids such as ``42``) are taken as text. Validation is otherwise strict: a response that
does not fit is a failed call, never a partial apply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

#: The package of the built-in directive files: the top-level ``directives/`` folder, installed as package data.
BUILTIN_DIRECTIVES_PACKAGE = "dream_assets.directives"


class Contract(BaseModel):
    """Base of every response model."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", coerce_numbers_to_str=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # Small local models often write `"tags": null`; dropping the key lets the default apply, while a
        # required field that is null still fails validation.
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


#: Stands in for an item of an id or name list that is not text (an object, a list, true, null), so the pass can
#: ignore that one item with a count instead of the whole answer failing validation. Never a real id (NUL).
NOT_TEXT = "\x00not-text"


def _ids_as_text(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    return [
        v if isinstance(v, str) else str(v) if isinstance(v, int | float) and not isinstance(v, bool) else NOT_TEXT
        for v in value
    ]


def _id_as_text(value: Any) -> Any:
    return _ids_as_text([value])[0]


IdList = Annotated[list[str], BeforeValidator(_ids_as_text)]
IdText = Annotated[str, BeforeValidator(_id_as_text)]


def metadata_text(value: Any) -> Any:
    """A metadata mapping with text keys and true/false as ``"true"``/``"false"`` (a field validator's helper)."""
    if isinstance(value, dict):
        return {str(k): (str(v).lower() if isinstance(v, bool) else v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class ModelCall:
    """One kind of model call, defined next to the pass that makes it (its ``PassSpec.model_call``; a pass may make
    other calls of its own besides): the response contract, the directive (the option naming an agent's
    override file, None when there is none, and the built-in file, in the top-level ``directives/`` folder installed
    as the package data of ``dream_assets.directives``) and the offline backend's answer (structured inputs ->
    (answer, note)). The pass hands its call to the model layer (``ModelClient.request``), which never looks a call
    up by name; the table of every call by name is the passes' (``dream_assets.passes.registry.MODEL_CALLS``)."""

    name: str  # the pass name, also the usage and ledger key
    contract: type[Contract]
    directive_file: str
    directive_option: str | None
    offline: Callable[[Mapping[str, Any]], tuple[dict[str, Any], str]]
    #: The package whose data holds ``directive_file`` (the project's ``directives/`` folder unless a pass ships its
    #: directive beside itself).
    directive_package: str = BUILTIN_DIRECTIVES_PACKAGE
