"""What the chat model is asked to return in each formation call, and how an answer is read.

Each call has a pydantic *wire* model: its JSON schema is what the model sees (as a tool, a
response format, or text in the prompt), so field descriptions are written for the model.

An answer is then read item by item, under one rule: nothing the model meant to store is lost,
and nothing it did not mean is stored. So only what is unambiguous is repaired, in an otherwise
sound item: a whole-number priority written `"80"` or `80.0`, a type in another case, plural or
a synonym our descriptions use (`"Persona"`, `"preferences"`), an id written as a bare string or
number, a field under a common other name (`text`, `message_ids`, `scene_name`), activity times
as epoch seconds or milliseconds or nested in `metadata`, `null` for an optional field, a
missing priority (50), a list or answer sent as a JSON string, extra fields (ignored).

- **Junk** is an item that is not an object (a bare string or number), whose text is not a
  non-empty string (`42` is not made into "42"), or whose type (action, operation) is none of
  ours. It is dropped and reported, never stored.
- An item is **unrepairable** when a field that says what it is has a value whose meaning is
  not certain: a priority outside -1..100 (`500`, `-7`: clamping would decide for the model,
  and 500 clamped to 100 would pin a memory into every prompt), a fraction, a word or a bool
  for a priority, text fields that are not text.
- Annotations that are unusable (an activity time that is no time, a source id that names no
  new message) are dropped and counted by the caller; the memory is kept.

An answer holding junk or an unrepairable item is not `Read.sound`: the caller acts on none of
it and retries the whole window, batch or scene queue, which stays pending (as for a
malformed answer), so the model's meaning is asked for again instead of being guessed. A
missing or unusable top level (no `memories`, not an object) makes an answer invalid, which
leaves the cursor where it was too.

Semantic limits (id sets, time formats, sizes) are not checked here but in the modules that
know the window and the candidates (`extraction`, `consolidation`, `scenes`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "ConsolidationAnswer",
    "Decision",
    "ExtractionAnswer",
    "InvalidAnswerError",
    "MemoryDraft",
    "PersonaAnswer",
    "Read",
    "SceneAnswer",
    "SceneEdit",
    "read_consolidation",
    "read_extraction",
    "read_persona",
    "read_scenes",
]

Action = Literal["add", "update", "merge", "delete", "skip"]


class InvalidAnswerError(ValueError):
    """A model answer whose top level cannot be used (the call counts as failed)."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


# -- extraction ---------------------------------------------------------------------------------


class MemoryDraft(_Wire):
    """One memory worth keeping, extracted from the new messages."""

    content: str = Field(
        description="One self-contained statement that makes sense without the conversation: "
        "name its subject (the user, or the assistant) and keep names, numbers and places. "
        "Written in the language given in the instructions."
    )
    type: Literal["persona", "episodic", "instruction"] = Field(
        description="persona: stable facts, traits, preferences, skills, relationships. "
        "episodic: something that happened or is planned, with its time when known. "
        "instruction: a lasting rule the user gave the assistant."
    )
    priority: int = Field(
        description="Importance 0-100 (80+ health, safety, identity or core preferences; "
        "50-70 ordinary; below 50 minor). -1 only for an absolute rule the user explicitly "
        "stated for all future conversations."
    )
    situation: str = Field(
        default="",
        description="Short label of the situation the memory belongs to (a few words).",
    )
    activity_start: str | None = Field(
        default=None,
        description="When the activity started or will start: ISO 8601 date or date-time.",
    )
    activity_end: str | None = Field(
        default=None, description="When it ended or will end: ISO 8601 date or date-time."
    )
    source_ids: list[str] = Field(
        default_factory=list,
        description="Ids of the new messages this memory comes from (e.g. ['m3', 'm4']).",
    )


class ExtractionAnswer(_Wire):
    """Memories extracted from the new messages of one conversation window."""

    situation: str = Field(
        default="",
        description="Short label of the situation at the end of the new messages.",
    )
    memories: list[MemoryDraft] = Field(
        description="The memories; an empty list when nothing is worth remembering."
    )


# -- consolidation -----------------------------------------------------------------------------


class Decision(_Wire):
    """What to do with one new memory, given its candidate stored memories."""

    new_id: str = Field(description="Id of the new memory (e.g. 'n1').")
    action: Action = Field(
        description="add: it is new. update: it corrects or refines one candidate (give the "
        "combined text). merge: it and one or more candidates describe one thing (give the "
        "combined text). delete: it contradicts candidates that are no longer true; they are "
        "removed and it is added. skip: a candidate already says it as well or better."
    )
    target_ids: list[str] = Field(
        default_factory=list,
        description="Candidate ids the action applies to (empty for add and skip).",
    )
    content: str | None = Field(
        default=None, description="For update and merge: the combined memory text."
    )
    type: Literal["persona", "episodic", "instruction"] | None = Field(
        default=None, description="For update and merge: the type of the combined memory."
    )
    priority: int | None = Field(
        default=None, description="For update and merge: the priority of the combined memory."
    )
    activity_start: str | None = Field(default=None, description="For update and merge.")
    activity_end: str | None = Field(default=None, description="For update and merge.")


class ConsolidationAnswer(_Wire):
    """One decision per new memory."""

    decisions: list[Decision] = Field(description="One decision for each new memory.")


# -- scenes and persona ------------------------------------------------------------------------


class SceneEdit(_Wire):
    """One change to the scene blocks."""

    op: Literal["create", "update", "merge", "delete"] = Field(
        description="create a new scene, update (rewrite) an existing one, merge `sources` "
        "into the existing scene `name`, or delete an obsolete scene."
    )
    name: str = Field(description="Scene name: an existing name, or a new short name to create.")
    sources: list[str] = Field(
        default_factory=list, description="For merge: existing scenes folded into `name`."
    )
    summary: str = Field(default="", description="One-sentence gist (for create/update/merge).")
    body: str = Field(
        default="", description="The whole scene text in Markdown (for create/update/merge)."
    )


class SceneAnswer(_Wire):
    """Edits to the scene blocks; an empty list when the memories change nothing."""

    edits: list[SceneEdit] = Field(description="The edits, applied in order.")


class PersonaAnswer(_Wire):
    """Whether to rewrite the persona, and the new text."""

    action: Literal["keep", "rewrite"] = Field(
        description="keep: the current persona is still right. rewrite: replace it."
    )
    persona: str = Field(default="", description="For rewrite: the whole new persona, Markdown.")


# -- reading an answer -------------------------------------------------------------------------

MIN_PRIORITY: Final = -1
MAX_PRIORITY: Final = 100
DEFAULT_PRIORITY: Final = 50
"""Priority of a memory whose answer gives none (`null` or no field)."""

_TYPES: Final = frozenset({"persona", "episodic", "instruction"})
_TYPE_ALIASES: Final[dict[str, str]] = {
    "persona": "persona",
    "profile": "persona",
    "preference": "persona",
    "fact": "persona",
    "trait": "persona",
    "habit": "persona",
    "identity": "persona",
    "episodic": "episodic",
    "episode": "episodic",
    "event": "episodic",
    "activity": "episodic",
    "plan": "episodic",
    "instruction": "instruction",
    "instruct": "instruction",
    "rule": "instruction",
    "standing_rule": "instruction",
}
"""Words a model uses for our three types (the types' own descriptions use most of them)."""
_MEMORY_KEYS: Final[dict[str, str]] = {
    "text": "content",
    "memory": "content",
    "scene_name": "situation",
    "scene": "situation",
    "message_ids": "source_ids",
    "source_message_ids": "source_ids",
    "sources": "source_ids",
    "activity_start_time": "activity_start",
    "activity_end_time": "activity_end",
    "start": "activity_start",
    "end": "activity_end",
}
_DECISION_KEYS: Final[dict[str, str]] = {
    "record_id": "new_id",
    "id": "new_id",
    "targets": "target_ids",
    "merged_content": "content",
    "merged_type": "type",
    "merged_priority": "priority",
}
_SCENE_KEYS: Final[dict[str, str]] = {"action": "op", "scene": "name", "merge_from": "sources"}
_ACTIONS: Final = frozenset({"add", "update", "merge", "delete", "skip"})
_SCENE_OPS: Final = frozenset({"create", "update", "merge", "delete"})

T = TypeVar("T", bound=BaseModel)
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Read(Generic[M]):
    """An answer as read: its usable items, and what was wrong with the others.

    Only a `sound` answer may be acted on: an answer holding junk, or an item with a field that
    cannot be repaired, is retried as a whole (its window, batch or scene queue stays pending),
    because what the model meant by it is unknown and may be a fact.
    """

    answer: M
    """The items that could be read (junk and unrepairable items left out)."""
    junk: tuple[str, ...] = ()
    """One reason per item that is junk: not an object (a bare string or number), text that
    is not a non-empty string, an unknown type or action. Never stored, never made into text."""
    unrepaired: tuple[str, ...] = ()
    """One reason per otherwise sound item with a field that cannot be repaired (a priority
    outside -1..100 or not a whole number, a field of the wrong kind)."""
    repaired: int = 0
    """Fields whose unambiguous meaning was restored (`"80"` for 80, `"Persona"`, a known id
    written as a string or number, a renamed field, epoch seconds for a time)."""
    dropped: int = 0
    """Annotations of a kept item that were not usable and were left out (a time or source id
    of the wrong kind, a situation that is not text); the memory itself is kept."""

    @property
    def rejected(self) -> int:
        """Items that could not be used (junk or unrepairable)."""
        return len(self.junk) + len(self.unrepaired)

    @property
    def sound(self) -> bool:
        """Whether every item could be used."""
        return not self.junk and not self.unrepaired

    def failure(self, what: str) -> str:
        """The report line of an answer that is not `sound` (reasons only, no model text)."""
        parts: list[str] = []
        if self.junk:
            parts.append(f"{len(self.junk)} junk item(s) dropped ({'; '.join(self.junk)})")
        if self.unrepaired:
            parts.append(
                f"{len(self.unrepaired)} item(s) that cannot be repaired "
                f"({'; '.join(self.unrepaired)})"
            )
        return f"unusable {what} answer: {', '.join(parts)}; retried"


class _Note:
    """What reading one item found."""

    __slots__ = ("dropped", "junk", "repaired", "unrepaired")

    def __init__(self) -> None:
        self.junk: str | None = None
        self.unrepaired: list[str] = []
        self.repaired = 0
        self.dropped = 0


def _rename(item: Mapping[str, Any], names: Mapping[str, str], note: _Note) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in item.items():
        name = str(key)
        target = names.get(name, name)
        if target not in out or out[target] in (None, "", []):
            out[target] = value
            note.repaired += target != name
    return out


_EPOCH_MS: Final = 100_000_000_000
"""Numbers at least this large are epoch milliseconds (seconds would be after the year 5000)."""
_NUMBER_RE: Final = re.compile(r"[+-]?\d+(?:\.\d+)?")
_WHOLE_RE: Final = re.compile(r"[+-]?\d+(?:\.0*)?")
_ID_SPLIT_RE: Final = re.compile(r"[\s,;]+")


def _as_priority(value: object, note: _Note, missing: int | None) -> int | None:
    """A priority in -1..100: an integer, also written as `80.0` or `"80"`.

    `missing` for `null` or no field. Anything else (a word, a fraction, a bool, a list, a
    number outside -1..100) cannot be repaired: `500` may mean 50 or a 0-1000 scale, `-7` a
    slip for -1 or 7, and clamping would decide for the model (500 to 100 would pin the
    memory into every prompt). It is noted and `None` returned.
    """
    if value is None:
        return missing
    number: int | None = None
    if isinstance(value, bool):
        pass
    elif isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
        note.repaired += 1
    elif isinstance(value, str) and _WHOLE_RE.fullmatch(value.strip()):
        number = int(float(value.strip()))
        note.repaired += 1
    if number is None:
        note.unrepaired.append("priority is not a whole number")
        return None
    if not MIN_PRIORITY <= number <= MAX_PRIORITY:
        note.unrepaired.append(f"priority {number} is outside {MIN_PRIORITY}..{MAX_PRIORITY}")
        return None
    return number


def _as_type(value: object) -> tuple[str | None, bool]:
    """(type, repaired): one of our types from the model's word (any case, plural, synonym).

    `(None, False)` when the word is none of them: an unknown type is not guessed.
    """
    if not isinstance(value, str):
        return None, False
    if value in _TYPES:
        return value, False
    key = value.strip().lower().replace(" ", "_").replace("-", "_")
    found = _TYPE_ALIASES.get(key) or _TYPE_ALIASES.get(key.rstrip("s"))
    return found, found is not None


def _as_time(value: object, note: _Note) -> str | None:
    """An activity time as text, or `None` (the time is dropped, the memory kept).

    Strings are kept for the caller to parse (it drops what is no ISO time); epoch seconds or
    milliseconds (also as a numeric string) become a UTC date-time, a four-digit year its
    first day.
    """
    if value is None:
        return None
    if isinstance(value, str) and not _NUMBER_RE.fullmatch(value.strip()):
        return value
    number = math.nan
    if isinstance(value, str):
        number = float(value.strip())
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    text: str | None = None
    if number.is_integer() and 1000 <= number <= 9999:
        text = f"{int(number):04d}-01-01"
    elif math.isfinite(number):
        seconds = number / 1000 if abs(number) >= _EPOCH_MS else number
        try:
            text = dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="seconds")
        except (OverflowError, OSError, ValueError):
            text = None
    if text is None:
        note.dropped += 1
    else:
        note.repaired += 1
    return text


def _is_id(value: object) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _as_ids(value: object, note: _Note) -> list[str]:
    """Ids as strings: a list of them, or one id (or several, comma separated) written bare.

    Whether an id names a message or a candidate is checked by the caller.
    """
    if value is None:
        return []
    if isinstance(value, str):
        parts = [p for p in _ID_SPLIT_RE.split(value.strip()) if p]
        note.repaired += bool(parts)
        return parts
    if _is_id(value):
        note.repaired += 1
        return [str(value)]
    if not isinstance(value, list):
        note.dropped += 1
        return []
    ids = [str(i) for i in value if _is_id(i)]
    note.dropped += len(value) - len(ids)
    return ids


def _as_label(value: object, note: _Note) -> str:
    """A short label (a situation): text, else empty (a number is not made into text)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    note.dropped += 1
    return ""


def _memory_item(item: object, note: _Note) -> dict[str, Any] | None:
    if isinstance(item, str):
        note.junk = "a bare string, not a memory object"
        return None
    if not isinstance(item, Mapping):
        note.junk = f"{type(item).__name__}, not a memory object"
        return None
    data = _rename(item, _MEMORY_KEYS, note)
    meta = data.pop("metadata", None)
    if isinstance(meta, Mapping):
        for key, value in _rename(meta, _MEMORY_KEYS, _Note()).items():  # one repair each
            if data.get(key) is None:
                data[key] = value
                note.repaired += 1
    content = data.get("content")
    if not isinstance(content, str) or not content.strip():
        note.junk = (
            "no content"
            if content is None
            else "empty content"
            if isinstance(content, str)
            else f"content is {type(content).__name__}, not text"
        )
        return None
    kind, fixed = _as_type(data.get("type"))
    if kind is None:
        note.junk = "no type" if data.get("type") is None else "unknown type"
        return None
    note.repaired += fixed
    data["type"] = kind
    priority = _as_priority(data.get("priority"), note, DEFAULT_PRIORITY)
    data["priority"] = DEFAULT_PRIORITY if priority is None else priority
    data["situation"] = _as_label(data.get("situation"), note)
    for key in ("activity_start", "activity_end"):
        data[key] = _as_time(data.get(key), note)
    data["source_ids"] = _as_ids(data.get("source_ids"), note)
    return data


def _decoded(value: object) -> object:
    """`value`, or the JSON it holds when it is a string (a double-encoded answer)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _top(raw: object, key: str, *, list_is_items: bool) -> list[Any]:
    raw = _decoded(raw)
    if list_is_items and isinstance(raw, list):
        return raw
    if not isinstance(raw, Mapping):
        msg = f"expected a JSON object with {key!r}, got {type(raw).__name__}"
        raise InvalidAnswerError(msg)
    items = _decoded(raw.get(key))
    if isinstance(items, Mapping) and items:
        return [items]  # one item given without its list
    if not isinstance(items, list):
        msg = f"the answer has no {key!r} list"
        raise InvalidAnswerError(msg)
    return items


@dataclass(slots=True)
class _Items(Generic[T]):
    kept: list[T]
    junk: list[str]
    unrepaired: list[str]
    repaired: int = 0
    dropped: int = 0


def _items(
    items: list[Any],
    model: type[T],
    prepare: Callable[[object, _Note], dict[str, Any] | None],
) -> _Items[T]:
    out: _Items[T] = _Items([], [], [])
    for n, item in enumerate(items, 1):
        note = _Note()
        data = prepare(item, note)
        if note.junk is not None or data is None:
            out.junk.append(f"item {n}: {note.junk or 'not an object'}")
            continue
        if note.unrepaired:
            out.unrepaired.append(f"item {n}: {', '.join(note.unrepaired)}")
            continue
        try:
            out.kept.append(model.model_validate(data))
        except ValidationError as exc:
            fields = sorted({str(e["loc"][0]) for e in exc.errors() if e.get("loc")})
            out.unrepaired.append(f"item {n}: {', '.join(fields) or 'a field'} does not fit")
            continue
        out.repaired += note.repaired
        out.dropped += note.dropped
    return out


def _read(answer: M, items: _Items[Any]) -> Read[M]:
    return Read(
        answer,
        junk=tuple(items.junk),
        unrepaired=tuple(items.unrepaired),
        repaired=items.repaired,
        dropped=items.dropped,
    )


def read_extraction(raw: object) -> Read[ExtractionAnswer]:
    """Read an extraction answer (`{"memories": [...]}`; a bare list of memories is accepted).

    An item is junk when it is not an object, its content is not a non-empty string, or its
    type is none of ours (see `Read`); a priority that cannot be repaired makes the item
    unrepairable. The caller must not act on an answer that is not `sound`.

    Raises:
        InvalidAnswerError: If there is no list of memories.
    """
    items = _top(raw, "memories", list_is_items=True)
    read = _items(items, MemoryDraft, _memory_item)
    raw = _decoded(raw)
    situation = raw.get("situation", "") if isinstance(raw, Mapping) else ""
    answer = ExtractionAnswer(
        situation=situation if isinstance(situation, str) else "", memories=read.kept
    )
    return _read(answer, read)


def _decision_item(item: object, note: _Note) -> dict[str, Any] | None:
    if not isinstance(item, Mapping):
        note.junk = f"{type(item).__name__}, not a decision object"
        return None
    data = _rename(item, _DECISION_KEYS, note)
    action = data.get("action")
    key = action.strip().lower() if isinstance(action, str) else ""
    key = "add" if key == "store" else key
    if key not in _ACTIONS:
        note.junk = "no action" if action is None else "unknown action"
        return None
    note.repaired += key != action
    data["action"] = key
    new_id = data.get("new_id")
    if isinstance(new_id, int) and not isinstance(new_id, bool):
        data["new_id"] = f"n{new_id}"
        note.repaired += 1
    elif not isinstance(new_id, str) or not new_id.strip():
        note.junk = "no new memory id"
        return None
    targets = data.get("target_ids")
    ids_ok = all(_is_id(t) for t in targets) if isinstance(targets, list) else True
    if not ids_ok or not (targets is None or isinstance(targets, str | list) or _is_id(targets)):
        note.unrepaired.append("target ids are not a list of ids")
    data["target_ids"] = _as_ids(targets, note)
    content = data.get("content")
    if content is not None and not isinstance(content, str):
        note.unrepaired.append(f"content is {type(content).__name__}, not text")
    if data.get("type") is not None:
        kind, fixed = _as_type(data["type"])
        if kind is None:
            note.unrepaired.append("unknown type")
        note.repaired += fixed
        data["type"] = kind
    data["priority"] = _as_priority(data.get("priority"), note, None)
    for key in ("activity_start", "activity_end"):
        data[key] = _as_time(data.get(key), note)
    return data


def read_consolidation(raw: object) -> Read[ConsolidationAnswer]:
    """Read a consolidation answer (`{"decisions": [...]}` or a bare list).

    A decision is junk when it is not an object, its action is none of ours or it names no new
    memory; a field it gives that cannot be repaired (content that is not text, an unknown
    type, a priority outside -1..100, targets that are not ids) makes it unrepairable.
    """
    items = _top(raw, "decisions", list_is_items=True)
    read = _items(items, Decision, _decision_item)
    return _read(ConsolidationAnswer(decisions=read.kept), read)


def _scene_item(item: object, note: _Note) -> dict[str, Any] | None:
    if not isinstance(item, Mapping):
        note.junk = f"{type(item).__name__}, not an edit object"
        return None
    data = _rename(item, _SCENE_KEYS, note)
    op = data.get("op")
    key = op.strip().lower() if isinstance(op, str) else ""
    if key not in _SCENE_OPS:
        note.junk = "no operation" if op is None else "unknown operation"
        return None
    note.repaired += key != op
    data["op"] = key
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        note.junk = "no scene name"
        return None
    sources = data.get("sources")
    if isinstance(sources, str):
        data["sources"] = [sources]
        note.repaired += 1
    elif sources is None:
        data["sources"] = []
    elif not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        note.unrepaired.append("sources are not scene names")
    for key in ("summary", "body"):
        value = data.get(key)
        if value is None:
            data[key] = ""
        elif not isinstance(value, str):
            note.unrepaired.append(f"{key} is {type(value).__name__}, not text")
    return data


def read_scenes(raw: object) -> Read[SceneAnswer]:
    """Read a scene answer (`{"edits": [...]}` or a bare list).

    An edit is junk when it is not an object, its operation is none of ours or it names no
    scene; a summary, body or source list that is not text makes it unrepairable.
    """
    items = _top(raw, "edits", list_is_items=True)
    read = _items(items, SceneEdit, _scene_item)
    return _read(SceneAnswer(edits=read.kept), read)


def read_persona(raw: object) -> Read[PersonaAnswer]:
    """Read a persona answer.

    Raises:
        InvalidAnswerError: If the action is unknown, or `rewrite` comes without text.
    """
    raw = _decoded(raw)
    if not isinstance(raw, Mapping):
        msg = f"expected a JSON object, got {type(raw).__name__}"
        raise InvalidAnswerError(msg)
    action = raw.get("action")
    key = action.strip().lower() if isinstance(action, str) else ""
    text = raw.get("persona")
    if text is None:
        text = raw.get("body")
    if key not in ("keep", "rewrite"):
        msg = "no persona action" if action is None else "unknown persona action"
        raise InvalidAnswerError(msg)
    if key == "rewrite" and (not isinstance(text, str) or not text.strip()):
        msg = "a persona rewrite without text"
        raise InvalidAnswerError(msg)
    answer = PersonaAnswer.model_validate(
        {"action": key, "persona": text if isinstance(text, str) else ""}
    )
    return Read(answer, repaired=int(key != action))
