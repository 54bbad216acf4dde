"""Validation and normalisation of everything a caller hands the store.

One place decides what a valid id, scope, time, L1 record and L0 message is, so the facade, the
turn capture and the importers agree:

- ids (`user_id`, `agent_id`, memory ids): non-empty strings of at most 256 code points without
  control characters or lone surrogates (an id must round-trip exactly, so it is refused, never
  repaired);
- text (memory content, messages, persona, scenes, queries): lone surrogates, which cannot be
  stored as UTF-8, are replaced with U+FFFD so the data is kept;
- times: activity times are ISO-8601 dates or date-times (a date stays a date), write times are
  ISO-8601 date-times, epoch milliseconds or `datetime`s; the start of an activity may not be
  after its end;
- every problem raises `ConfigError` (`ScopeError` for scope ids) naming the field, the value
  and the fix, before anything is written.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast

from langchain_tdai_recall._exchange.metadata import check_metadata, normalize_expiry
from langchain_tdai_recall.errors import ConfigError, ScopeError
from langchain_tdai_recall.text.clean import content_text, strip_injected_blocks
from langchain_tdai_recall.types import MEMORY_TYPES, MemoryRecord, MessageRecord, Scope, iso_utc

__all__ = [
    "MAX_ID_CHARS",
    "MAX_SQL_INT",
    "TimeInput",
    "check_id",
    "check_int",
    "check_optional_str",
    "check_store_path",
    "clean_text",
    "memory_record",
    "memory_records",
    "message_record",
    "message_records",
    "normalize_instant",
    "normalize_time",
    "now_iso",
    "resolve_scope",
    "turn_records",
]

TimeInput = str | dt.date | dt.datetime | None
"""An activity time as callers may give it."""

MAX_ID_CHARS: Final = 256
MAX_CONTENT_CHARS: Final = 32_768
"""Longest L1 memory text in code points: a memory is a fact or a rule, not a document (a
conversation's messages, L0, have no such bound; scenes and the persona have their own)."""
"""Longest accepted id, in code points."""
MAX_NAME_BYTES: Final = 255
"""Longest file or folder name most file systems accept, in UTF-8 bytes."""
MAX_SQL_INT: Final = 2**63 - 1
"""Largest integer SQLite stores (limits and offsets above it cannot be meant)."""

_ROLES: Final = {"human": "user", "ai": "assistant", "user": "user", "assistant": "assistant"}
"""Message roles kept as conversation memory, mapped to ours (system and tool messages are not)."""
_SURROGATE_RE: Final = re.compile(r"[\ud800-\udfff]")
_SCHEME_RE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_CONNINFO_RE: Final = re.compile(
    r"^\s*(?:host|hostaddr|port|dbname|user|password|passfile|service|sslmode|options|"
    r"connect_timeout|application_name|target_session_attrs|sslrootcert|gssencmode)\s*="
)
"""A libpq key=value connection string ("host=db dbname=memory user=app")."""
IN_MEMORY: Final = ":memory:"
"""The `path` of an in-memory store, as SQLite names it (same as `None`)."""


def is_database_location(text: str) -> bool:
    """Whether `text` names a PostgreSQL database: a `postgresql://` URL or a libpq string."""
    stripped = text.strip()
    return stripped.lower().startswith(("postgresql://", "postgres://")) or bool(
        _CONNINFO_RE.match(stripped)
    )


_MAX_EPOCH_MS: Final = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z, the last instant a `datetime` can hold."""


def now_iso() -> str:
    """The current UTC time as ISO-8601 with milliseconds and `Z`."""
    return iso_utc()


def clean_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (the rest is unchanged)."""
    return _SURROGATE_RE.sub("\ufffd", text)


def _fail(field: str, msg: str) -> ConfigError:
    return ScopeError(msg) if field in ("user_id", "agent_id") else ConfigError(msg)


def check_id(field: str, value: object) -> str:
    """Return `value` if it is a valid id, else raise naming `field`.

    Raises:
        ScopeError: For `user_id` / `agent_id`.
        ConfigError: For any other id field.
    """
    if not isinstance(value, str) or not value.strip():
        msg = f"{field} must be a non-empty string, got {shown(value)}"
        raise _fail(field, msg)
    if (
        len(value) > MAX_ID_CHARS
        or any(ord(c) < 32 or ord(c) == 127 for c in value)
        or _SURROGATE_RE.search(value)
    ):
        msg = (
            f"{field} {value[:40]!r} is invalid: use at most {MAX_ID_CHARS} characters, no "
            "control characters and no lone surrogates"
        )
        raise _fail(field, msg)
    return value


def resolve_scope(user_id: object, agent_id: object, *, default_user: str) -> Scope:
    """Validate a call's scope; `user_id=None` is `default_user`, `agent_id=None` is shared."""
    user = check_id("user_id", default_user if user_id is None else user_id)
    agent = None if agent_id is None else check_id("agent_id", agent_id)
    return Scope(user, agent)


def check_int(field: str, value: object, *, low: int, high: int, fix: str = "") -> int:
    """Return `value` if it is an integer (not a bool) in `low..high`, else raise `ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        msg = f"{field} must be an integer in {low}..{high}, got {shown(value)}{fix}"
        raise ConfigError(msg)
    return value


def check_optional_str(field: str, value: object) -> str | None:
    """Return `value` if it is a string or `None`, else raise `ConfigError`."""
    if value is not None and not isinstance(value, str):
        msg = f"{field} must be a string or None, got {type(value).__name__} {shown(value)}"
        raise ConfigError(msg)
    return value


def check_store_path(path: object) -> Path | str | None:
    """Validate the `path` argument of `TdaiMemory.open`.

    Returns:
        `None` (in-memory: `None` or `":memory:"`), a directory `Path`, or a PostgreSQL location
        as given (a `str`: a `postgresql://` or `postgres://` URL, or a libpq key=value string
        such as `"host=db dbname=memory"`).

    Raises:
        ConfigError: For anything but `None`, a non-empty path string or an `os.PathLike`;
            for a URL of another scheme.
    """
    if path is None or path == IN_MEMORY:
        return None
    if isinstance(path, str):
        text = path
    elif isinstance(path, os.PathLike):
        raw = os.fspath(path)
        if not isinstance(raw, str):
            msg = f"path must be a text path, got bytes {shown(raw)}; decode it first"
            raise ConfigError(msg)
        text = raw
    else:
        msg = (
            f"path must be a directory path (str or os.PathLike), a postgresql:// URL, a store "
            f"object or None for an in-memory store, got {type(path).__name__} {shown(path)}"
        )
        raise ConfigError(msg)
    if not text.strip():
        msg = (
            f"path must name a directory, got {shown(path)}; pass None for an in-memory store or a "
            "directory such as './memory'"
        )
        raise ConfigError(msg)
    if isinstance(path, str) and is_database_location(text):
        return text.strip()
    if _SCHEME_RE.match(text.strip()):
        msg = (
            f"path {_redact(text)!r} is a URL of an unsupported kind; pass a local directory "
            "such as './memory' or a postgresql:// URL"
        )
        raise ConfigError(msg)
    if _SURROGATE_RE.search(text) or "\x00" in text:
        msg = f"path {shown(text)} contains characters no file system accepts"
        raise ConfigError(msg)
    for part in Path(text).parts:
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            msg = (
                f"path {shown(text)} has a folder or file name of {len(part.encode('utf-8'))} "
                f"bytes ({shown(part)}); file systems accept at most {MAX_NAME_BYTES}: use a "
                "shorter directory name"
            )
            raise ConfigError(msg)
    return Path(text).expanduser()


def shown(value: object, limit: int = 80) -> str:
    """`repr(value)` for a message, cut to about `limit` characters with an ellipsis.

    Error messages quote the bad value, but a 100 KB value must not become a 100 KB message.
    """
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # nested too deeply; an int of > 4300 digits
        text = f"<{type(value).__name__} too large to show>"
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def check_lookup(field: str, value: object) -> str:
    """Return `value` if it is a string that could name something stored, else raise.

    A lookup does not apply the length rules of new ids (an id that cannot exist is just not
    found), but a lone surrogate can be neither stored nor encoded.

    Raises:
        ConfigError: Naming `field`.
    """
    if not isinstance(value, str):
        msg = f"{field} must be a string, got {type(value).__name__} {shown(value)}"
        raise ConfigError(msg)
    if _SURROGATE_RE.search(value):
        msg = (
            f"{field} {shown(value)} contains a lone surrogate, which is not valid Unicode text "
            f"and is never part of a stored {field}; pass the {field} as the store returned it"
        )
        raise ConfigError(msg)
    return value


def _redact(url: str) -> str:
    """A URL without its password, for error messages."""
    return re.sub(r"://([^:/@]+):[^@/]*@", r"://\1:***@", url.strip())


# -- times --------------------------------------------------------------------------------------


def _invalid_time(field: str, value: object) -> ConfigError:
    msg = (
        f"{field} must be an ISO-8601 date or date-time (e.g. '2025-05-01' or "
        f"'2025-05-01T14:30:00+08:00'), a date or a datetime, got {shown(value)}"
    )
    return ConfigError(msg)


def normalize_time(field: str, value: object) -> str | None:
    """Validate an activity time and return its ISO-8601 text (a date stays a date)."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                return dt.date.fromisoformat(text).isoformat()
            return dt.datetime.fromisoformat(text).isoformat()
        except ValueError:
            pass
    raise _invalid_time(field, value)


def _moment(text: str, *, end: bool) -> dt.datetime:
    """A comparable naive UTC moment; a date is its first (or, for an end, last) instant."""
    if len(text) == 10:
        day = dt.date.fromisoformat(text)
        return dt.datetime.combine(day, dt.time.max if end else dt.time.min)
    moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return moment


def _check_order(start: str | None, end: str | None) -> None:
    if start is None or end is None:
        return
    if _moment(start, end=False) > _moment(end, end=True):
        msg = (
            f"activity_start_time {shown(start)} is after activity_end_time {shown(end)}; swap "
            "them or correct one of them"
        )
        raise ConfigError(msg)


def normalize_instant(field: str, value: object, *, default: str) -> str:
    """Validate a write time: ISO-8601 date-time text (kept as given), epoch ms, or a datetime.

    `None` or `""` give `default`. Epoch milliseconds become ISO-8601 UTC with `Z`.
    """
    if value is None or value == "":
        return default
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not 0 <= value <= _MAX_EPOCH_MS or not math.isfinite(value):  # a huge int: no isfinite
            msg = (
                f"{field} {shown(value)} is not a time: epoch milliseconds must be in "
                f"0..{_MAX_EPOCH_MS} (years 1970..9999); pass an ISO-8601 date-time instead"
            )
            raise ConfigError(msg)
        moment = dt.datetime.fromtimestamp(value / 1000, dt.UTC)
        return iso_utc(moment)
    if isinstance(value, str):
        text = value.strip()
        try:
            dt.datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            return text
    msg = (
        f"{field} must be an ISO-8601 date-time (e.g. '2025-05-01T14:30:00Z'), epoch "
        f"milliseconds or a datetime, got {shown(value)}"
    )
    raise ConfigError(msg)


# -- L1 memories --------------------------------------------------------------------------------

_MEMORY_FIELDS: Final = frozenset(MemoryRecord.__dataclass_fields__)


def _fields(data: object) -> dict[str, Any]:
    if isinstance(data, MemoryRecord):
        return {k: getattr(data, k) for k in _MEMORY_FIELDS}
    if isinstance(data, Mapping):
        unknown = {str(k) for k in data} - _MEMORY_FIELDS
        if unknown:
            msg = f"unknown memory field(s) {sorted(unknown)}; allowed: {sorted(_MEMORY_FIELDS)}"
            raise ConfigError(msg)
        return {str(k): v for k, v in data.items()}
    msg = f"a memory must be a MemoryRecord or a dict, got {type(data).__name__} {data!r:.60}"
    raise ConfigError(msg)


def _text_field(fields: Mapping[str, Any], name: str) -> str:
    value = fields.get(name) or ""
    if not isinstance(value, str):
        msg = f"{name} must be a string, got {type(value).__name__} {value!r:.60}"
        raise ConfigError(msg)
    return clean_text(value)


def memory_record(data: object, scope: Scope, now: str) -> MemoryRecord:
    """Validate one L1 memory (a `MemoryRecord` or a dict of its fields) for `scope`.

    A record's own `user_id` / `agent_id` are ignored: the scope is the call's. A missing `id`
    is generated; `created_at` defaults to `now`; `updated_at` is always `now`.
    """
    fields = _fields(data)
    content = fields.get("content")
    if not isinstance(content, str) or not content.strip():
        msg = f"content must be a non-empty string, got {content!r:.60}"
        raise ConfigError(msg)
    if len(content.strip()) > MAX_CONTENT_CHARS:
        msg = (
            f"content is {len(content.strip())} characters ({shown(content, 50)}); a memory holds "
            f"at most {MAX_CONTENT_CHARS}: store the facts it states as separate memories, and "
            "a document itself elsewhere (or as conversation messages, which have no such bound)"
        )
        raise ConfigError(msg)
    mtype = fields.get("type", "episodic")
    if mtype not in MEMORY_TYPES:
        msg = f"type must be one of {list(MEMORY_TYPES)}, got {shown(mtype)}"
        raise ConfigError(msg)
    priority = fields.get("priority", 50)
    if isinstance(priority, bool) or not isinstance(priority, int) or not -1 <= priority <= 100:
        msg = (
            "priority must be an integer in -1..100 (-1: strict global rule), "
            f"got {shown(priority)}"
        )
        raise ConfigError(msg)
    raw_sources = fields.get("source_message_ids") or ()
    sources = (
        tuple(raw_sources)
        if isinstance(raw_sources, Iterable) and not isinstance(raw_sources, str | bytes)
        else None
    )
    if sources is None or not all(isinstance(s, str) for s in sources):
        msg = f"source_message_ids must be a list of strings, got {raw_sources!r:.60}"
        raise ConfigError(msg)
    memory_id = fields.get("id") or f"m_{uuid.uuid4().hex}"
    check_id("id", memory_id)
    start = normalize_time("activity_start_time", fields.get("activity_start_time"))
    end = normalize_time("activity_end_time", fields.get("activity_end_time"))
    _check_order(start, end)
    return MemoryRecord(
        id=memory_id,
        content=clean_text(content.strip()),
        type=mtype,
        scene_name=_text_field(fields, "scene_name").strip(),
        priority=priority,
        activity_start_time=start,
        activity_end_time=end,
        timestamp=normalize_time("timestamp", fields.get("timestamp")),
        user_id=scope.user_id,
        agent_id=scope.agent_id,
        session_key=_text_field(fields, "session_key"),
        source_message_ids=tuple(clean_text(s) for s in sources),
        created_at=normalize_instant("created_at", fields.get("created_at"), default=now),
        updated_at=now,
        metadata=check_metadata(fields.get("metadata")),
        expires_at=normalize_expiry(fields.get("expires_at")),
    )


def memory_records(records: object, scope: Scope, now: str) -> list[MemoryRecord]:
    """Validate every record of an `add_memories` call before anything is written."""
    if isinstance(records, str | bytes | Mapping | MemoryRecord) or not isinstance(
        records, Iterable
    ):
        msg = (
            "records must be a list of MemoryRecord objects or dicts, got "
            f"{type(records).__name__} {records!r:.60}; wrap a single record in a list"
        )
        raise ConfigError(msg)
    items = list(records)
    out: list[MemoryRecord] = []
    for i, data in enumerate(items):
        try:
            out.append(memory_record(data, scope, now))
        except ConfigError as exc:
            if len(items) == 1:
                raise
            msg = f"record {i}: {exc}"
            raise type(exc)(msg) from exc
    return out


# -- L0 messages --------------------------------------------------------------------------------


def _message_parts(message: object) -> tuple[object, object, object, object]:
    if isinstance(message, Mapping):
        recorded = message.get("recorded_at")
        if recorded is None or recorded == "":
            recorded = message.get("timestamp")
        return message.get("role"), message.get("content"), message.get("id"), recorded
    return (
        getattr(message, "type", None),
        getattr(message, "content", None),
        getattr(message, "id", None),
        None,
    )


def message_record(
    message: object, scope: Scope, session_key: str, session_id: str, now: str
) -> MessageRecord | None:
    """One L0 message as stored, or `None` when it is not conversation memory.

    Human and AI messages are kept (system and tool messages are not), with injected memory
    blocks removed; empty ones give `None`.

    Raises:
        ConfigError: If the message is neither a LangChain message nor a dict, or its id or
            time is invalid.
    """
    if not isinstance(message, Mapping) and not hasattr(message, "content"):
        msg = (
            "messages must be LangChain messages or {'role', 'content'} dicts, got "
            f"{type(message).__name__} {message!r:.60}"
        )
        raise ConfigError(msg)
    role, content, msg_id, recorded = _message_parts(message)
    mapped = _ROLES.get(str(role))
    if mapped is None:
        return None
    text = strip_injected_blocks(clean_text(content_text(content))).strip()
    if not text:
        return None
    if msg_id is not None and msg_id != "":
        msg_id = check_id("message id", msg_id if isinstance(msg_id, str) else str(msg_id))
    return MessageRecord(
        id=msg_id or f"msg_{uuid.uuid4().hex}",
        role=mapped,
        content=text,
        session_key=session_key,
        session_id=session_id,
        recorded_at=normalize_instant("recorded_at", recorded, default=now),
        user_id=scope.user_id,
        agent_id=scope.agent_id,
    )


def message_records(
    messages: object, scope: Scope, *, session_key: object, session_id: object, now: str
) -> list[MessageRecord]:
    """Validate every message of a `record_messages` call before anything is written."""
    for field, value in (("session_key", session_key), ("session_id", session_id)):
        if not isinstance(value, str):
            msg = f"{field} must be a string, got {type(value).__name__} {value!r:.60}"
            raise ConfigError(msg)
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Iterable):
        msg = (
            "messages must be a list of LangChain messages or {'role', 'content'} dicts, got "
            f"{type(messages).__name__} {messages!r:.60}"
        )
        raise ConfigError(msg)
    key, sid = clean_text(cast("str", session_key)), clean_text(cast("str", session_id))
    items = list(messages)
    out: list[MessageRecord] = []
    for i, message in enumerate(items):
        try:
            record = message_record(message, scope, key, sid, now)
        except ConfigError as exc:
            if len(items) == 1:
                raise
            msg = f"message {i}: {exc}"
            raise type(exc)(msg) from exc
        if record is not None:
            out.append(record)
    return out


def turn_records(
    messages: Sequence[Mapping[str, str]], scope: Scope, session_key: str, now: str
) -> list[MessageRecord]:
    """L0 records of a finished turn, for the background writer; never raises for content.

    Unlike `message_records` nothing is refused: text is repaired (lone surrogates), messages
    that are not conversation memory or have no text are left out.
    """
    key = clean_text(session_key) if isinstance(session_key, str) else ""
    out: list[MessageRecord] = []
    for item in messages:
        message = cast("object", item)
        if not isinstance(message, Mapping):
            continue
        role = _ROLES.get(str(message.get("role")))
        text = strip_injected_blocks(clean_text(content_text(message.get("content")))).strip()
        if role is None or not text:
            continue
        out.append(
            MessageRecord(
                id=f"msg_{uuid.uuid4().hex}",
                role=role,
                content=text,
                session_key=key,
                recorded_at=now,
                user_id=scope.user_id,
                agent_id=scope.agent_id,
            )
        )
    return out
