"""What the chat model is asked to return in each formation call, and how an answer is read.

Each call has a pydantic *wire* model: its JSON schema is what the model sees (as a tool, a
response format, or text in the prompt), so field descriptions are written for the model. The
answer is then read leniently, and a field of the wrong type is repaired wherever its meaning
is unambiguous: a model that names a field slightly differently (`message_ids`, `scene_name`),
writes `"80"` for 80, gives an activity time as epoch seconds (or milliseconds, or a four-digit
year), sends `null` for an optional field, nests activity times in `metadata`, adds fields of
its own, returns a memory as a bare string or its list as a JSON string still gives a usable
answer. A priority that is not a number is 50 (as when missing), an unknown type `episodic`, an
activity time that is no time at all is dropped (the memory is kept without it). What cannot be
repaired is counted in `Read.rejected`: an extraction memory without text is not dropped
silently, the pipeline treats the whole answer as failed (the window is retried, never skipped).
A missing or unusable top level (no `memories`, not an object) makes an answer invalid, which
leaves the cursor where it was.

Semantic limits (id sets, priorities, time formats, sizes) are not checked here but in the
modules that know the window and the candidates (`extraction`, `consolidation`, `scenes`).
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


# -- lenient reading ---------------------------------------------------------------------------

_TYPE_ALIASES: Final[dict[str, str]] = {
    "persona": "persona",
    "profile": "persona",
    "preference": "persona",
    "fact": "persona",
    "trait": "persona",
    "episodic": "episodic",
    "episode": "episodic",
    "event": "episodic",
    "instruction": "instruction",
    "instruct": "instruction",
    "rule": "instruction",
    "standing_rule": "instruction",
    "habit": "persona",
    "identity": "persona",
    "activity": "episodic",
    "plan": "episodic",
}
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

T = TypeVar("T", bound=BaseModel)
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Read(Generic[M]):
    """A usable answer and how many of its items had to be dropped."""

    answer: M
    rejected: int


def _rename(item: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in item.items():
        target = names.get(str(key), str(key))
        if target not in out or out[target] in (None, "", []):
            out[target] = value
    return out


_EPOCH_MS: Final = 100_000_000_000
"""Numbers at least this large are epoch milliseconds (seconds would be after the year 5000)."""
_NUMBER_RE: Final = re.compile(r"[+-]?\d+(?:\.\d+)?")


def _as_text(value: object) -> str | None:
    """A text field's value (numbers written out, a list of strings joined), or `None`."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return str(value)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return " ".join(v.strip() for v in value)
    return None


def _as_priority(value: object, missing: int | None) -> int | None:
    """An integer priority from a number or a numeric string; `missing` otherwise."""
    if isinstance(value, bool):
        return missing
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else missing
    if isinstance(value, str) and _NUMBER_RE.fullmatch(value.strip()):
        return int(float(value.strip()))
    return missing


def _as_time(value: object) -> str | None:
    """An activity time as text, or `None` (the time is dropped, the memory kept).

    ISO strings are unchanged; epoch seconds or milliseconds (also as a numeric string) become
    a UTC date-time, a four-digit year its first day.
    """
    if isinstance(value, str) and not _NUMBER_RE.fullmatch(value.strip()):
        return value
    number: float
    if isinstance(value, str):
        number = float(value.strip())
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        return None
    if not math.isfinite(number):
        return None
    if number.is_integer() and 1000 <= number <= 9999:
        return f"{int(number):04d}-01-01"
    if abs(number) >= _EPOCH_MS:
        number /= 1000
    try:
        moment = dt.datetime.fromtimestamp(number, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat(timespec="seconds")


def _as_ids(value: object) -> list[str]:
    if isinstance(value, str | int) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, list):
        return [str(i) for i in value if isinstance(i, str | int) and not isinstance(i, bool)]
    return []


def _as_type(value: object, default: str | None) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return default
    key = value.strip().lower().replace(" ", "_").replace("-", "_")
    return _TYPE_ALIASES.get(key) or _TYPE_ALIASES.get(key.rstrip("s")) or default


def _memory_item(item: object) -> dict[str, Any] | None:
    if isinstance(item, str):
        item = {"content": item}  # a memory given as its bare text
    if not isinstance(item, Mapping):
        return None
    data = _rename(item, _MEMORY_KEYS)
    meta = data.pop("metadata", None)
    if isinstance(meta, Mapping):
        for key, value in _rename(meta, _MEMORY_KEYS).items():
            data.setdefault(key, value)
    content = _as_text(data.get("content"))
    if content is None:
        return None  # no text: nothing can be stored, and nothing may be dropped silently
    data["content"] = content
    data["type"] = _as_type(data.get("type"), "episodic")
    data["priority"] = _as_priority(data.get("priority"), 50)
    data["situation"] = _as_text(data.get("situation")) or ""
    for key in ("activity_start", "activity_end"):
        data[key] = _as_time(data.get(key))
    data["source_ids"] = _as_ids(data.get("source_ids"))
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


def _items(
    items: list[Any],
    model: type[T],
    prepare: Callable[[object], dict[str, Any] | None],
) -> tuple[list[T], int]:
    kept: list[T] = []
    rejected = 0
    for item in items:
        data = prepare(item)
        if data is None:
            rejected += 1
            continue
        try:
            kept.append(model.model_validate(data))
        except ValidationError:
            rejected += 1
    return kept, rejected


def read_extraction(raw: object) -> Read[ExtractionAnswer]:
    """Read an extraction answer (`{"memories": [...]}`; a bare list of memories is accepted).

    `rejected` counts the memories that could not be read (no text); the caller must not
    treat such an answer as complete.

    Raises:
        InvalidAnswerError: If there is no list of memories.
    """
    items = _top(raw, "memories", list_is_items=True)
    memories, rejected = _items(items, MemoryDraft, _memory_item)
    raw = _decoded(raw)
    situation = raw.get("situation", "") if isinstance(raw, Mapping) else ""
    answer = ExtractionAnswer(situation=_as_text(situation) or "", memories=memories)
    return Read(answer, rejected)


def _decision_item(item: object) -> dict[str, Any] | None:
    if not isinstance(item, Mapping):
        return None
    data = _rename(item, _DECISION_KEYS)
    action = str(data.get("action", "")).strip().lower()
    data["action"] = "add" if action == "store" else action
    if data["action"] not in ("add", "update", "merge", "delete", "skip"):
        data["action"] = "add"  # unknown decisions mean add
    targets = data.get("target_ids")
    if isinstance(targets, str):
        data["target_ids"] = [targets]
    elif not isinstance(targets, list):
        data["target_ids"] = []
    else:
        data["target_ids"] = [str(t) for t in targets if isinstance(t, str | int)]
    data["type"] = _as_type(data.get("type"), None)
    data["priority"] = _as_priority(data.get("priority"), None)
    data["content"] = _as_text(data.get("content"))
    for key in ("activity_start", "activity_end"):
        data[key] = _as_time(data.get(key))
    if isinstance(data.get("new_id"), int) and not isinstance(data["new_id"], bool):
        data["new_id"] = f"n{data['new_id']}"
    elif "new_id" in data:
        data["new_id"] = str(data["new_id"])
    return data


def read_consolidation(raw: object) -> Read[ConsolidationAnswer]:
    """Read a consolidation answer (`{"decisions": [...]}` or a bare list)."""
    items = _top(raw, "decisions", list_is_items=True)
    decisions, rejected = _items(items, Decision, _decision_item)
    return Read(ConsolidationAnswer(decisions=decisions), rejected)


def _scene_item(item: object) -> dict[str, Any] | None:
    if not isinstance(item, Mapping):
        return None
    data = _rename(item, {"action": "op", "scene": "name", "merge_from": "sources"})
    data["op"] = str(data.get("op", "")).strip().lower()
    sources = data.get("sources")
    if isinstance(sources, str):
        data["sources"] = [sources]
    elif not isinstance(sources, list):
        data["sources"] = []
    return data


def read_scenes(raw: object) -> Read[SceneAnswer]:
    """Read a scene answer (`{"edits": [...]}` or a bare list)."""
    items = _top(raw, "edits", list_is_items=True)
    edits, rejected = _items(items, SceneEdit, _scene_item)
    return Read(SceneAnswer(edits=edits), rejected)


def read_persona(raw: object) -> Read[PersonaAnswer]:
    """Read a persona answer.

    Raises:
        InvalidAnswerError: If the action is unknown, or `rewrite` comes without text.
    """
    if not isinstance(raw, Mapping):
        msg = f"expected a JSON object, got {type(raw).__name__}"
        raise InvalidAnswerError(msg)
    action = str(raw.get("action", "")).strip().lower()
    text = raw.get("persona") or raw.get("body") or ""
    if action not in ("keep", "rewrite"):
        msg = f"unknown persona action {action!r}"
        raise InvalidAnswerError(msg)
    if action == "rewrite" and (not isinstance(text, str) or not text.strip()):
        msg = "a persona rewrite without text"
        raise InvalidAnswerError(msg)
    answer = PersonaAnswer.model_validate(
        {"action": action, "persona": text if isinstance(text, str) else ""}
    )
    return Read(answer, 0)
