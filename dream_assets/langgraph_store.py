"""A LangGraph ``BaseStore`` over an agent's memory store, so a LangGraph agent's long-term store is the one the dream
cycle maintains. Optional: ``pip install 'dream_assets[langgraph]'``.

    from langgraph.graph import StateGraph
    from dream_assets.langgraph_store import LangGraphMemoryStore

    store = LangGraphMemoryStore("data/agents/NAME")
    graph = builder.compile(store=store)          # nodes reach it with langgraph.config.get_store()

How LangGraph's items map onto memory entries:

- **Namespace <-> category.** ``("users", "u1", "facts")`` is the category ``users/u1/facts``; a category is the
  namespace of its labels split on ``/``. So ``list_namespaces`` lists the categories of live entries, and entries
  saved another way (``service.save``, the dream cycle's merges) appear in their category's namespace with their
  id as the key. A namespace label may not hold ``/`` (it would be two labels), besides LangGraph's own rules (no
  ``.``, not empty).
- **Key <-> id.** An item's entry id is ``lg-`` and 32 hex digits of a SHA-256 over the namespace and the key, so it is
  the same for the same namespace and key in every process and never depends on the key's characters. A key that is
  the id of an entry of that category (an entry saved another way, as search returns it) names that entry.
- **Value <-> entry.** The text recall searches is the value's ``"content"`` string, else its ``"text"`` string, else
  the value as JSON; with ``index=[paths]`` (on a put, or ``index_fields`` for the store) the strings at those paths
  (LangGraph's path syntax), joined; a control character in it is a space there. The whole value is kept in the
  entry's metadata, so ``get`` returns it exactly. A text longer than ``MaxContentChars`` is never refused (LangGraph's
  own stores take it): the entry holds its head (cut at a word), recall searches that, ``get`` and ``search`` return
  the whole value, and the dream cycle leaves the entry alone (``textHeadOf``: no merge, fold or removal could check
  what the rest says). When the entry's text changed after the put (a later save extended it), the value comes back
  with that field (or ``"content"``) holding the current text. An entry saved another way reads as
  ``{"content": <its text>}`` until a put to its key (its id) gives it a value, kept like any other.
- **Puts** are the library's exact put (``service.put``: no save-time dedup, so every key keeps its own entry and
  the dream cycle consolidates later; a changed value replaces the text, a key put again after a delete comes back
  live). ``created_at`` is the entry's first save, ``updated_at`` its last edit.
- **Delete archives** (``service.forget``; a value of ``None`` is a delete). Nothing is hard-deleted; an archived
  entry stays restorable until the archive purge. Puts and deletes write their change-log rows as every agent
  operation does, so ``dream memory history`` shows each version and ``dream undo`` takes them back.
- **A namespace is a wall** (dream_assets/scope.py): the dream cycle never merges, supersedes or dedups entries of
  two namespaces into one, whatever a model proposes, nor moves an entry out of its namespace.
- **Get of a key the dream cycle retired** (merged into another entry, or superseded by a later fact) returns the live
  entry its fact lives on in (``service.get``'s ``current_id``), under that entry's own key, when it is in the
  same namespace; a key deleted here, or never put, or whose successor is in another namespace, returns ``None``.
- **Every batch marks the agent active** for ``AgentActiveWindow`` (the busy lease, as every agent operation does), so
  a dream pass does not start a model call in the middle of the agent's conversation.
- **Search** with a ``query`` is the store's recall (``service.recall_entries``: BM25, the current version of a
  fact first), kept to the namespace prefix and the filter, each item with its score; without a query, the live items
  of the prefix, most recently updated first, read a page at a time (``service.live_entries_page``: the
  namespace, order, offset and limit are the store query's, so the cost is the page's, not the corpus's; with a
  filter, pages are read until enough items pass it). ``filter`` matches value fields as LangGraph's stores do:
  equality, nested mappings, and ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``. ``list_namespaces`` reads
  the distinct categories of the live entries, not the entries.
- **batch** is the one primitive (``abatch`` runs it in a worker thread): its operations run in order, so a get after
  a put in one batch sees the put. Time-to-live is not supported (``supports_ttl`` is false), and every item is
  searchable whatever its ``index``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
    from langgraph.store.base.embed import get_text_at_path, tokenize_path
except ImportError as exc:  # pragma: no cover - exercised only without the extra (test_install.py)
    from dream_assets.extras import MissingExtra

    raise MissingExtra("dream_assets.langgraph_store", "langgraph", "langgraph") from exc

try:  # LangGraph releases that have it check the labels of operations passed to batch directly
    from langgraph.store.base import validate_op_namespace
except ImportError:  # pragma: no cover - older LangGraph: its public methods still check them
    validate_op_namespace = None

from dream_assets import service
from dream_assets.model import TEXT_HEAD_KEY, MemoryEntry
from dream_assets.options import DreamOptions
from dream_assets.profile import AgentProfile
from dream_assets.scope import LANGGRAPH_NAMESPACE_KEY

NAMESPACE_KEY = LANGGRAPH_NAMESPACE_KEY
KEY_KEY = "langgraphKey"
VALUE_KEY = "langgraphValue"
#: The value field the entry's text came from ("" when it is the value as JSON or joined index paths) and that text's
#: hash, to tell whether the entry was edited after the put.
FIELD_KEY = "langgraphField"
TEXT_HASH_KEY = "langgraphTextHash"
#: Set on an item's entry when a delete archived it, so a get does not follow it anywhere.
DELETED_KEY = "langgraphDeleted"
_TEXT_FIELDS = ("content", "text")
#: What a memory's text may not hold (control characters but tab, line feed and CR LF; lone surrogates): replaced in
#: the text recall searches, never in the value, which is kept exactly.
_NOT_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)|[\ud800-\udfff]")


def item_id(namespace: Sequence[str], key: str) -> str:
    """The entry id of the item ``key`` in ``namespace``: stable, and the same in every process."""
    digest = hashlib.sha256(json.dumps([list(namespace), key], ensure_ascii=False).encode()).hexdigest()
    return f"lg-{digest[:32]}"


def category_of(namespace: Sequence[str]) -> str:
    return "/".join(namespace)


def namespace_of(category: str) -> tuple[str, ...]:
    return tuple(label for label in category.split("/") if label)


def _text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def head_of(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text`` at most, cut at the last white space of the last tenth when there
    is one (a word is not split), for the entry of a value whose text is longer than an entry may hold."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    cut = max(head.rfind(" "), head.rfind("\n"))
    return (head[:cut] if cut >= limit - max(1, limit // 10) else head).rstrip()


def _check_labels(namespace: Sequence[str]) -> None:
    for label in namespace:
        if isinstance(label, str) and "/" in label:
            raise InvalidNamespaceError(
                f"namespace label {label!r} in {tuple(namespace)} holds '/': a namespace is stored as a category "
                "whose labels are split on '/'"
            )


def _validate_op(op: Op) -> None:
    if validate_op_namespace is not None:
        validate_op_namespace(op)
    if isinstance(op, GetOp | PutOp):
        _check_labels(op.namespace)
    elif isinstance(op, SearchOp):
        _check_labels(op.namespace_prefix)


def text_of(value: Mapping[str, Any], index: Sequence[str] | None) -> tuple[str, str]:
    """(the text recall searches for ``value``, the field it came from or "")."""
    if index:
        parts = [t for path in index for t in get_text_at_path(dict(value), tokenize_path(path)) if t.strip()]
        if parts:
            return "\n".join(parts), ""
    for name in _TEXT_FIELDS:
        if isinstance(value.get(name), str) and value[name].strip():
            return value[name], name
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str), ""


def _compare(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if any(str(k).startswith("$") for k in wanted):
            return all(_operator(actual, op, operand) for op, operand in wanted.items())
        return isinstance(actual, Mapping) and all(_compare(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(_compare(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return actual == wanted


def _operator(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return actual == operand
    if op == "$ne":
        return actual != operand
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"filter operator {op!r} is not supported: use $eq, $ne, $gt, $gte, $lt or $lte")
    if actual is None:
        return False
    try:
        a, b = (float(actual), float(operand)) if not isinstance(operand, str) else (str(actual), operand)
    except (TypeError, ValueError):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def matches(value: Mapping[str, Any], conditions: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` passes a LangGraph search ``filter``."""
    return not conditions or all(_compare(value.get(k), v) for k, v in conditions.items())


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path) :]
    if condition.match_type not in ("prefix", "suffix"):
        raise ValueError(f"namespace match type {condition.match_type!r}: use 'prefix' or 'suffix'")
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


class LangGraphMemoryStore(BaseStore):
    """LangGraph's ``BaseStore`` over one agent's memory store (the module docstring says how items map onto
    entries), every read and write an operation of the memory service (``dream_assets.service``). ``store``: an open
    store handle (``service.connect``), an ``AgentProfile`` or the profile's folder; ``options`` apply when the store
    is opened here (default: the profile's ``dream.toml`` and ``DREAM__*`` settings); ``index_fields``: the value
    paths whose text recall searches, unless a put names its own; ``clock``: the time of writes (default: the current
    UTC time)."""

    supports_ttl = False

    def __init__(
        self,
        store: service.MemoryHandle | AgentProfile | str | Path,
        *,
        options: DreamOptions | None = None,
        index_fields: Sequence[str] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.store = store if isinstance(store, service.MemoryHandle) else service.connect(store, options)
        self.index_fields = list(index_fields) if index_fields else None
        self._clock = clock or (lambda: datetime.now(UTC))

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------------ the primitive
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        for op in ops:
            _validate_op(op)
        # The agent is in a conversation: a dream pass waits before its next model call (AgentActiveWindow).
        service.mark_agent_active(self.store, now=self._clock())
        # A note a person just wrote in the agent's linked folder is read in first (nothing is read when no file moved)
        service.refresh_folder(self.store.profile, self.store.options, self._clock())
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise ValueError(f"unknown store operation {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    # ------------------------------------------------------------------ entries <-> items
    def _entry_for(self, namespace: tuple[str, ...], key: str) -> MemoryEntry | None:
        """The entry that holds ``key`` of ``namespace`` (live or archived), or None."""
        entry = service.read_entry(self.store, item_id(namespace, key))
        if entry is None and not key.startswith("lg-"):
            other = service.read_entry(self.store, key)
            # an entry saved another way, named by its id (a put to it keeps its id as the key)
            if (
                other is not None
                and other.category == category_of(namespace)
                and other.metadata.get(KEY_KEY, key) == key
            ):
                entry = other
        return entry

    def _item(self, entry: MemoryEntry, score: float | None = None, *, scored: bool = False) -> Item:
        meta = entry.metadata
        if VALUE_KEY in meta and KEY_KEY in meta:
            namespace, key = tuple(json.loads(meta[NAMESPACE_KEY])), meta[KEY_KEY]
            value = json.loads(meta[VALUE_KEY])
            if meta.get(TEXT_HASH_KEY) != _text_hash(entry.content) and TEXT_HEAD_KEY not in meta:
                value = {**value, (meta.get(FIELD_KEY) or "content"): entry.content}
        else:
            namespace, key, value = namespace_of(entry.category), entry.id, {"content": entry.content}
        fields = {
            "namespace": namespace,
            "key": key,
            "value": value,
            "created_at": entry.created_at,
            "updated_at": entry.updated_at,
        }
        return SearchItem(**fields, score=score) if scored else Item(**fields)

    def _successor(self, entry: MemoryEntry, now: datetime) -> MemoryEntry | None:
        """The live entry an archived one's fact lives on in (following merges and supersessions), as the agent
        operations' ``get`` finds it."""
        record = service.get(self.store, entry.id, now=now)
        return service.read_entry(self.store, record.current_id) if record.current_id else None

    # ------------------------------------------------------------------ operations
    def _get(self, op: GetOp) -> Item | None:
        entry = self._entry_for(tuple(op.namespace), str(op.key))
        if entry is None:
            return None
        if entry.is_archived:
            if entry.metadata.get(DELETED_KEY):
                return None
            entry = self._successor(entry, self._clock())
            # A successor in another namespace is behind a wall (a merge made before walls were kept): not this key's.
            if entry is None or entry.category != category_of(op.namespace):
                return None
        return self._item(entry)

    def _put(self, op: PutOp) -> None:
        """A put or a delete, through the library's operations (``service.put`` / ``forget``): each writes its
        change-log row, so ``dream memory history`` shows every version and ``dream undo`` takes it back."""
        namespace, key = tuple(op.namespace), str(op.key)
        now = self._clock()
        current = self._entry_for(namespace, key)
        options = self.store.options
        if op.value is None:
            if current is not None:
                # Marked even when the dream cycle archived it already (merged into an entry other keys share), so
                # a get of the deleted key no longer leads there.
                service.forget(
                    self.store,
                    current.id,
                    reason=f"deleted through the LangGraph store: key {key!r} of namespace {namespace}",
                    marks={DELETED_KEY: "true"},
                    now=now,
                    active=False,
                )
            return
        value = dict(op.value)
        try:
            stored_value = json.dumps(value, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the value of key {key!r} in {namespace} is not JSON: {exc}") from None
        index = op.index if isinstance(op.index, list) else self.index_fields
        full, source = text_of(value, index)
        # A value LangGraph accepts is never refused: a text longer than an entry holds is stored as its head (what
        # recall searches), the whole value kept in the metadata as always; the dream leaves such an entry alone.
        full = _NOT_TEXT.sub(lambda m: "\ufffd" if "\ud800" <= m.group() <= "\udfff" else " ", full).strip()
        if not full:  # a text of control characters only: the value as JSON (which escapes them) is searched
            full = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        text = head_of(full, options.MaxContentChars)
        meta = {
            NAMESPACE_KEY: json.dumps(list(namespace), ensure_ascii=False),
            KEY_KEY: key,
            VALUE_KEY: stored_value,
            FIELD_KEY: source,
            TEXT_HASH_KEY: _text_hash(text.strip()),
            **({TEXT_HEAD_KEY: str(len(full))} if text != full else {}),
        }
        drop = [DELETED_KEY] + ([] if text != full else [TEXT_HEAD_KEY])
        service.put(
            self.store,
            current.id if current is not None else item_id(namespace, key),
            text,
            category=category_of(namespace) if current is None else None,
            metadata=meta,
            drop_metadata=drop,
            now=now,
            active=False,
        )

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        wanted = max(0, op.offset) + max(0, op.limit)
        if op.limit <= 0:
            return []
        found: list[SearchItem] = []
        if op.query:
            asked = max(4 * wanted, 50)
            while True:
                hits = service.recall_entries(self.store, op.query, limit=asked)
                found = []
                for entry, score in hits:
                    if entry.is_archived or namespace_of(entry.category)[: len(prefix)] != prefix:
                        continue
                    item = self._item(entry, score, scored=True)
                    if matches(item.value, op.filter):
                        found.append(item)  # type: ignore[arg-type]
                if len(found) >= wanted or len(hits) < asked:
                    break
                asked *= 4
        elif not op.filter:
            # The page alone: the store applies the namespace, the order, the offset and the limit.
            page = service.live_entries_page(self.store, labels=prefix, limit=op.limit, offset=max(0, op.offset))
            return [self._item(entry, scored=True) for entry in page]  # type: ignore[misc]
        else:
            # A filter reads value fields, so pages of the namespace are read and filtered until the page is full.
            after: tuple[datetime, str] | None = None
            chunk = max(4 * wanted, 50)
            while len(found) < wanted:
                page = service.live_entries_page(self.store, labels=prefix, limit=chunk, after=after)
                for entry in page:
                    item = self._item(entry, scored=True)
                    if matches(item.value, op.filter):
                        found.append(item)  # type: ignore[arg-type]
                if len(page) < chunk:
                    break
                after = (page[-1].updated_at, page[-1].id)
                chunk *= 4
        return found[op.offset : op.offset + op.limit]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = {namespace_of(category) for category in service.live_categories(self.store)}
        namespaces.discard(())
        chosen = [ns for ns in namespaces if all(_namespace_matches(c, ns) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            chosen = list({ns[: op.max_depth] for ns in chosen})
        return sorted(chosen)[op.offset : op.offset + op.limit]
