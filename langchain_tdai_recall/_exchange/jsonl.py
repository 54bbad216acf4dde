"""The JSON Lines exchange format of `tdai-recall export` and `tdai-recall import-jsonl`.

One JSON object per line, UTF-8. The `kind` field says what a line holds; a line without `kind`
is a memory, so a plain list of `{"content": ...}` objects imports as it is. Every line carries
its scope (`user_id`, absent = the default user; `agent_id`, absent or `null` = the user's shared
memory).

- `{"kind": "header", "format": "tdai-recall-jsonl", "version": 1}`: optional first line.
- `memory`: the fields of `MemoryRecord` (`content` is required). `export` writes all of them,
  so an export re-imports with the same ids, types, scenes, priorities, times, sessions, source
  message ids and `created_at`.
- `persona`: `text`.
- `scene`: `name`, `summary`, `body`, `heat` (`created`/`updated` are informational).
- `message`: an L0 message: `role` (`user` or `assistant`; `human`/`ai` accepted), `content`,
  `session_key`, `session_id`, `id`, `recorded_at`. `export --messages` (and `messages export`)
  writes every field, in the order the messages were stored, so a round trip keeps the
  conversations with their ids, sessions and times.

A memory or message line without an `id` gets one derived from its content, so importing the
same file twice adds nothing. This module only converts between lines and plain data; the
command line writes the data through the public `TdaiMemory` API.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from langchain_tdai_recall._exchange.records import clean_text, shown
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.types import MemoryRecord, MessageRecord, SceneBlock

__all__ = [
    "FORMAT",
    "VERSION",
    "Item",
    "JsonlError",
    "header_line",
    "memory_line",
    "message_line",
    "parse_lines",
    "persona_line",
    "scene_line",
]

FORMAT: Final = "tdai-recall-jsonl"
"""Value of `format` in the header line."""
VERSION: Final = 1
"""Format version written by `export`; newer versions are refused on import."""

Kind = Literal["memory", "persona", "scene", "message"]

_SCOPE_FIELDS: Final = frozenset({"kind", "user_id", "agent_id"})
_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "memory": frozenset(f.name for f in dataclasses.fields(MemoryRecord)),
    "persona": frozenset({"text"}),
    "scene": frozenset({"name", "summary", "body", "heat", "created", "updated"}),
    "message": frozenset(
        {"id", "role", "content", "session_key", "session_id", "recorded_at", "timestamp"}
    ),
}
_ROLES: Final = frozenset({"user", "assistant", "human", "ai"})
_TEXT_FIELDS: Final = frozenset(
    {"content", "text", "summary", "body", "session_key", "session_id", "scene_name"}
)
"""Text repaired on reading (lone surrogates become U+FFFD, as the store keeps them), so a
line's derived id and its comparison with what is stored see the text as stored; ids are not
repaired (the store refuses them, naming the field)."""
_REQUIRED: Final[Mapping[str, tuple[str, ...]]] = {
    "memory": ("content",),
    "persona": ("text",),
    "scene": ("name", "body"),
    "message": ("role", "content"),
}


class JsonlError(ConfigError):
    """A line of a JSONL file is not valid; the message names the line."""


@dataclass(frozen=True, slots=True)
class Item:
    """One parsed data line."""

    line: int
    """1-based line number in the file."""
    kind: Kind
    """What the line holds."""
    user_id: str | None
    """The line's user (`None`: the default user)."""
    agent_id: str | None
    """The line's agent (`None`: the user's shared memory)."""
    data: dict[str, Any] = field(default_factory=dict)
    """The kind's fields, scope fields removed; memory and message lines always have an `id`."""


def _dump(data: Mapping[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def header_line() -> str:
    """The optional first line of an export."""
    return _dump({"kind": "header", "format": FORMAT, "version": VERSION})


def memory_line(record: MemoryRecord) -> str:
    """A memory with every field of its record, scope included."""
    data = dataclasses.asdict(record)
    data["source_message_ids"] = list(record.source_message_ids)
    return _dump({"kind": "memory", **data})


def message_line(record: MessageRecord) -> str:
    """An L0 message with its scope, id, session and time (`export --messages`)."""
    return _dump(
        {
            "kind": "message",
            "user_id": record.user_id,
            "agent_id": record.agent_id,
            "id": record.id,
            "role": record.role,
            "content": record.content,
            "session_key": record.session_key,
            "session_id": record.session_id,
            "recorded_at": record.recorded_at,
        }
    )


def persona_line(user_id: str, agent_id: str | None, text: str) -> str:
    """A scope's persona."""
    return _dump({"kind": "persona", "user_id": user_id, "agent_id": agent_id, "text": text})


def scene_line(user_id: str, agent_id: str | None, block: SceneBlock) -> str:
    """One scene block with its metadata."""
    info = block.info
    return _dump(
        {
            "kind": "scene",
            "user_id": user_id,
            "agent_id": agent_id,
            "name": info.name,
            "summary": info.summary,
            "body": block.body,
            "heat": info.heat,
            "created": info.created,
            "updated": info.updated,
        }
    )


def _derived_id(prefix: str, *parts: object) -> str:
    raw = _dump({"p": list(parts)}).encode("utf-8", "surrogatepass")  # lone ones: repaired later
    digest = hashlib.sha256(raw).hexdigest()
    return f"{prefix}{digest[:32]}"


def _item(number: int, obj: object) -> Item | None:
    if not isinstance(obj, dict):
        msg = f"line {number}: expected a JSON object, got {type(obj).__name__}"
        raise JsonlError(msg)
    kind = obj.get("kind", "memory")
    if kind == "header":
        if obj.get("format") != FORMAT or not isinstance(obj.get("version"), int):
            msg = f"line {number}: a header needs format {FORMAT!r} and an integer version"
            raise JsonlError(msg)
        if obj["version"] > VERSION:
            msg = (
                f"line {number}: format version {obj['version']} is newer than this package "
                f"reads ({VERSION}); upgrade langchain-tdai-recall"
            )
            raise JsonlError(msg)
        return None
    if kind not in _FIELDS:
        msg = (
            f"line {number}: unknown kind {shown(kind)}; use one of "
            f"{', '.join(repr(k) for k in (*_FIELDS, 'header'))}"
        )
        raise JsonlError(msg)
    unknown = set(obj) - _FIELDS[kind] - _SCOPE_FIELDS
    if unknown:
        msg = (
            f"line {number}: unknown field(s) {sorted(unknown)} for a {kind} line; allowed: "
            f"{sorted(_FIELDS[kind] | _SCOPE_FIELDS)}"
        )
        raise JsonlError(msg)
    missing = [name for name in _REQUIRED[kind] if name not in obj]
    if missing:
        msg = f"line {number}: a {kind} line needs {', '.join(missing)}"
        raise JsonlError(msg)
    user_id, agent_id = obj.get("user_id"), obj.get("agent_id")
    for name, value in (("user_id", user_id), ("agent_id", agent_id)):
        if value is not None and not isinstance(value, str):
            msg = f"line {number}: {name} must be a string or null, got {shown(value)}"
            raise JsonlError(msg)
    data = {
        k: clean_text(v) if k in _TEXT_FIELDS and isinstance(v, str) else v
        for k, v in obj.items()
        if k not in _SCOPE_FIELDS
    }
    if kind == "message" and data["role"] not in _ROLES:
        msg = f"line {number}: role must be one of {sorted(_ROLES)}, got {shown(data['role'])}"
        raise JsonlError(msg)
    if kind == "memory" and not data.get("id"):
        data["id"] = _derived_id(
            "m_",
            data.get("type", "episodic"),
            data.get("content"),
            data.get("scene_name", ""),
            data.get("activity_start_time"),
            data.get("activity_end_time"),
            data.get("timestamp"),
        )
    if kind == "message" and not data.get("id"):
        data["id"] = _derived_id(
            "msg_",
            data.get("session_key", ""),
            data.get("role"),
            data.get("recorded_at", data.get("timestamp")),
            data.get("content"),
        )
    return Item(number, kind, user_id, agent_id, data)


def _decoded(lines: Iterable[str]) -> Iterator[str]:
    """`lines`, with a file that is not UTF-8 text reported as a `JsonlError`."""
    iterator = iter(lines)
    number = 0
    while True:
        number += 1
        try:
            line = next(iterator)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            msg = (
                f"line {number} or the lines after it: not UTF-8 text ({exc.reason} at byte "
                f"{exc.start} of a block read); import-jsonl reads JSON Lines as written by "
                "'export'. Is this a binary or compressed file?"
            )
            raise JsonlError(msg) from None
        yield line


def parse_lines(lines: Iterable[str]) -> Iterator[Item]:
    """Parse JSONL text line by line; blank lines are skipped.

    Raises:
        JsonlError: On the first line that is not valid JSON or not a valid item; the message
            starts with `line N:`.
    """
    for number, raw in enumerate(_decoded(lines), 1):
        text = raw.strip()
        if number == 1:
            text = text.removeprefix("\ufeff")
        if not text:
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})"
            raise JsonlError(msg) from exc
        except RecursionError:
            msg = f"line {number}: JSON nested too deeply to read; an item is a flat object"
            raise JsonlError(msg) from None
        except ValueError as exc:  # an integer of more than 4300 digits
            msg = f"line {number}: a value JSON cannot be read as ({exc})"
            raise JsonlError(msg) from exc
        item = _item(number, obj)
        if item is not None:
            yield item
