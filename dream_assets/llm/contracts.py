"""What every response contract shares: the ``Contract`` base, id-list fields, and ``ModelCall``.

Each pass defines its own contract (the JSON shape it accepts from the model) next to its body, on this base. Field
aliases are the spec's camelCase JSON ("LLM response format": ``toDelete``, ``toSave``, ``sourceIds``); the
snake_case names work too. Unknown keys are ignored, ``null`` for a field with a default means the default, and
numbers where text is expected (ids such as ``42``) are taken as text. Validation is otherwise strict: a response that
does not fit is a failed call, never a partial apply.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

#: The package of the built-in directive files: the top-level ``directives/`` folder, installed as package data.
BUILTIN_DIRECTIVES_PACKAGE = "dream_assets.directives"


class Contract(BaseModel):
    """Base of every response model."""

    # Built when a pass first reads an answer: a process that runs no pass (a shell search) builds none.
    model_config = ConfigDict(populate_by_name=True, extra="ignore", coerce_numbers_to_str=True, defer_build=True)

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


# --- the ids an answer may name --------------------------------------------------------------------------------------
#: The JSON-schema key a ``ShownIds`` field carries in the contract's own schema; ``call_schema`` replaces it by the
#: call's ``enum`` and never sends it.
SHOWN_IDS_KEY = "x-shown-ids"
#: Above this many ids a field is sent without its ``enum`` (a grammar of thousands of alternatives costs the endpoint
#: more than it saves; no prompt that fits a window shows that many entries): the host's own check of the ids named,
#: which every pass keeps, then refuses an id that was not shown.
MAX_ENUM_IDS = 1000


@dataclass(frozen=True)
class ShownIds:
    """Marks an id field (``Annotated[IdList, ShownIds("entries.id")]``, or an ``IdText``): the ids it may name are the
    ones the call shows, found in the call's structured inputs at ``paths`` (dotted keys; a list on the way is walked
    item by item: ``"entries.id"`` is the ``id`` of every item of ``inputs["entries"]``). The JSON schema sent with the
    call (``call_schema``) constrains the field to an ``enum`` of exactly those ids, so a grammar-constrained model
    cannot name an entry it was not shown; a list whose inputs show none may hold none (``maxItems: 0``). The host
    still checks every id an answer names (a model without constrained decoding ignores the schema)."""

    paths: tuple[str, ...]

    def __init__(self, *paths: str) -> None:
        object.__setattr__(self, "paths", tuple(paths))

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = handler(core_schema)
        schema[SHOWN_IDS_KEY] = list(self.paths)
        return schema


def shown_ids(inputs: Mapping[str, Any], paths: tuple[str, ...] | list[str]) -> list[str]:
    """The ids at ``paths`` in ``inputs`` (see ``ShownIds``), in the order shown, each once; blank ones left out."""

    def walk(value: Any, keys: list[str]) -> Iterator[Any]:
        if isinstance(value, list | tuple):
            for item in value:
                yield from walk(item, keys)
        elif not keys:
            yield value
        elif isinstance(value, Mapping) and keys[0] in value:
            yield from walk(value[keys[0]], keys[1:])

    found: dict[str, None] = {}
    for path in paths:
        for value in walk(inputs, path.split(".")):
            if isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
                text = str(value)
                if text.strip():
                    found.setdefault(text, None)
    return list(found)


def call_schema(
    contract: type[BaseModel], inputs: Mapping[str, Any], aliases: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The JSON schema of one call: the contract's (by alias), each ``ShownIds`` field constrained to the ids this
    call's ``inputs`` show — an ``enum`` of them (for a list, of its items). Where none are shown, a list of ids gets
    ``maxItems: 0``, and an item that must name one (a promotion naming its definition, when no definition is shown)
    cannot be given: the lists of such items get ``maxItems: 0`` too. Above ``MAX_ENUM_IDS`` ids a field stays plain
    text (the host's check refuses an id that was not shown). With ``aliases`` (``id_aliases``) the enum lists the
    short names the prompt shows instead of the ids. The marker key itself is never sent."""
    aliases = aliases or {}
    schema = contract.model_json_schema(by_alias=True)
    impossible: set[str] = set()  # $defs whose items would have to name an id when none is shown

    def constrain(node: dict[str, Any], ids: list[str]) -> bool:
        """Narrow ``node`` to ``ids``; False when it is a single id and there is none to name."""
        if node.get("type") == "array":
            if not ids:
                node["maxItems"] = 0
            elif len(ids) <= MAX_ENUM_IDS and isinstance(node.get("items"), dict):
                node["items"]["enum"] = list(ids)
            return True
        if not ids:
            return False
        branches = node.get("anyOf") or [node]  # an optional id: its text branch
        for branch in branches:
            if isinstance(branch, dict) and branch.get("type") == "string" and len(ids) <= MAX_ENUM_IDS:
                branch["enum"] = list(ids)
        return True

    def visit(node: Any, owner: str) -> None:
        if isinstance(node, dict):
            paths = node.pop(SHOWN_IDS_KEY, None)
            for value in node.values():
                visit(value, owner)
            ids = [aliases.get(i, i) for i in shown_ids(inputs, paths)] if paths is not None else []
            if paths is not None and not constrain(node, ids) and owner:
                impossible.add(owner)
        elif isinstance(node, list):
            for value in node:
                visit(value, owner)

    for name, definition in (schema.get("$defs") or {}).items():
        visit(definition, name)
    visit({k: v for k, v in schema.items() if k != "$defs"}, "")

    def close(node: Any) -> None:
        if isinstance(node, dict):
            items = node.get("items")
            if node.get("type") == "array" and isinstance(items, dict):
                ref = str(items.get("$ref", ""))
                if ref.rsplit("/", 1)[-1] in impossible and ref.startswith("#/$defs/"):
                    node["maxItems"] = 0
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    if impossible:
        close(schema)
    return schema


# --- short names for long ids ----------------------------------------------------------------------------------------
#: An id a tokenizer makes many tokens of: a long run of hex digits (a uuid, with or without dashes, a content hash).
_OPAQUE_ID = re.compile(r"[0-9a-f][0-9a-f-]{15,}")
_OPAQUE_TOKEN = re.compile(r"(?<![0-9A-Za-z_-])[0-9a-f][0-9a-f-]{15,}(?![0-9A-Za-z_-])")
#: The short name of the n-th long id a call shows.
ALIAS_PREFIX = "e"


def id_aliases(contract: type[BaseModel], inputs: Mapping[str, Any]) -> dict[str, str]:
    """Short names (``e1``, ``e2`` ...) for the long opaque ids (32 hex digits: about 20 tokens each for a small model's
    tokenizer) a call shows in its ``ShownIds`` fields, in the order shown: the prompt and the schema show the short
    names, and the answer's id fields are mapped back (``restore_ids``) before the pass reads them, so the pass, its
    checks and its records see the real ids only. Empty when the call shows no such id, or when a short name would be
    one of the ids it shows."""
    shown: dict[str, None] = {}
    for paths in id_fields(contract).values():
        for i in shown_ids(inputs, paths):
            shown.setdefault(i, None)
    long_ids = [i for i in shown if is_long_id(i)]
    aliases = {real: f"{ALIAS_PREFIX}{n}" for n, real in enumerate(long_ids, 1)}
    if set(aliases.values()) & set(shown):
        return {}
    return aliases


def is_long_id(value: str) -> bool:
    """An id shown to a model by a short name when a call shows it (see ``id_aliases``)."""
    return _OPAQUE_ID.fullmatch(value) is not None


def with_aliases(text: str, aliases: Mapping[str, str]) -> str:
    """``text`` with every long id of ``aliases`` replaced by its short name."""
    if not aliases:
        return text
    return _OPAQUE_TOKEN.sub(lambda m: aliases.get(m.group(), m.group()), text)


def restore_ids(response: BaseModel, aliases: Mapping[str, str]) -> BaseModel:
    """``response`` with each short name in a ``ShownIds`` field (nested answers too) mapped back to its id; anything
    else (an id the model was not shown, a real id) is left as it is for the pass's own check."""
    if not aliases:
        return response
    real = {alias: i for i, alias in aliases.items()}

    def restored(value: Any) -> Any:
        if isinstance(value, str):
            return real.get(value, value)
        if isinstance(value, list):
            return [restored(v) for v in value]
        return value

    def walk(model: BaseModel) -> BaseModel:
        update: dict[str, Any] = {}
        for name, info in type(model).model_fields.items():
            value = getattr(model, name)
            if any(isinstance(m, ShownIds) for m in info.metadata):
                update[name] = restored(value)
            elif isinstance(value, BaseModel):
                update[name] = walk(value)
            elif isinstance(value, list) and any(isinstance(v, BaseModel) for v in value):
                update[name] = [walk(v) if isinstance(v, BaseModel) else v for v in value]
        return model.model_copy(update=update) if update else model

    return walk(response)


def id_fields(contract: type[BaseModel]) -> dict[str, tuple[str, ...]]:
    """Where the contract's ``ShownIds`` fields are in its JSON schema (``"$defs.<Item>.properties.<field>"``)
    and the input paths each takes its ids from: what a test checks every sent schema constrains."""
    found: dict[str, tuple[str, ...]] = {}

    def visit(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if SHOWN_IDS_KEY in node:
                found[where] = tuple(node[SHOWN_IDS_KEY])
            for key, value in node.items():
                visit(value, f"{where}.{key}" if where else key)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                visit(value, f"{where}.{i}")

    visit(contract.model_json_schema(by_alias=True), "")
    return found


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
