"""What the chat model is asked to return in each formation call, and how an answer is read.

Each call has a pydantic *wire* model: its JSON schema is what the model sees (as a tool, a
response format, or text in the prompt), so field descriptions are written for the model. The
answer is then read leniently: a model that names a field slightly differently
(`message_ids`, `scene_name`), writes `"80"` for 80 or nests activity times in `metadata` still
gives a usable answer, and one malformed item is dropped (and counted) instead of sinking the
whole answer. Only a missing or unusable top level (no `memories`, not an object) makes an
answer invalid, which leaves the cursor where it was.

Semantic limits (id sets, priorities, time formats, sizes) are not checked here but in the
modules that know the window and the candidates (`extraction`, `consolidation`, `scenes`).
"""

from __future__ import annotations

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


def _memory_item(item: object) -> dict[str, Any] | None:
    if not isinstance(item, Mapping):
        return None
    data = _rename(item, _MEMORY_KEYS)
    meta = data.pop("metadata", None)
    if isinstance(meta, Mapping):
        for key, value in _rename(meta, _MEMORY_KEYS).items():
            data.setdefault(key, value)
    kind = data.get("type")
    data["type"] = _TYPE_ALIASES.get(str(kind).strip().lower(), kind) if kind else "episodic"
    priority = data.get("priority")
    if isinstance(priority, str):
        try:
            data["priority"] = int(float(priority.strip()))
        except ValueError:
            data["priority"] = 50
    elif isinstance(priority, float):
        data["priority"] = int(priority)
    elif priority is None or isinstance(priority, bool):
        data["priority"] = 50
    ids = data.get("source_ids")
    if isinstance(ids, str):
        data["source_ids"] = [ids]
    elif ids is None:
        data["source_ids"] = []
    elif isinstance(ids, list):
        data["source_ids"] = [str(i) for i in ids if isinstance(i, str | int)]
    return data


def _top(raw: object, key: str, *, list_is_items: bool) -> list[Any]:
    if list_is_items and isinstance(raw, list):
        return raw
    if not isinstance(raw, Mapping):
        msg = f"expected a JSON object with {key!r}, got {type(raw).__name__}"
        raise InvalidAnswerError(msg)
    items = raw.get(key)
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

    Raises:
        InvalidAnswerError: If there is no list of memories.
    """
    items = _top(raw, "memories", list_is_items=True)
    memories, rejected = _items(items, MemoryDraft, _memory_item)
    situation = raw.get("situation", "") if isinstance(raw, Mapping) else ""
    answer = ExtractionAnswer(
        situation=situation if isinstance(situation, str) else "", memories=memories
    )
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
    kind = data.get("type")
    data["type"] = _TYPE_ALIASES.get(str(kind).strip().lower()) if kind else None
    priority = data.get("priority")
    if isinstance(priority, str):
        try:
            data["priority"] = int(float(priority))
        except ValueError:
            data["priority"] = None
    elif isinstance(priority, float):
        data["priority"] = int(priority)
    elif isinstance(priority, bool):
        data["priority"] = None
    if "new_id" in data:
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
