"""Upstream records' field values, normalised, and the items built from them.

The JSONL files and `vectors.db` hold the same fields under different names; both readers
hand them to `memory_item` and `message_item`, so a record means the same wherever it was read
and is skipped for the same reasons.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any, Final

from langchain_tdai_recall._exchange.records import MAX_CONTENT_CHARS, clean_text
from langchain_tdai_recall.types import MemoryType, iso_utc
from langchain_tdai_recall.upstream.items import DEFAULT_PRIORITY, UpstreamMemory, UpstreamMessage

__all__ = [
    "activity_times",
    "as_str",
    "derived_id",
    "epoch_ms_to_iso",
    "iso_time",
    "map_type",
    "memory_item",
    "message_item",
    "parse_heat",
    "parse_metadata",
    "parse_priority",
    "parse_source_ids",
    "to_int",
    "write_time",
]

_TYPE_MAP: Final[Mapping[str, MemoryType]] = {
    "persona": "persona",
    "episodic": "episodic",
    "instruction": "instruction",
    "episode": "episodic",
    "instruct": "instruction",
    "preference": "persona",
}
"""Upstream type values (current and legacy) to ours."""


_MIN_PRIORITY: Final = -1


_MAX_PRIORITY: Final = 100


def as_str(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return str(value)


def iso_time(value: object) -> str | None:
    """A time as normalised ISO-8601 text (a date stays a date); `None` if empty or invalid."""
    text = as_str(value).strip()
    if not text:
        return None
    try:
        if len(text) == 10:
            return date.fromisoformat(text).isoformat()
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        return None


def write_time(value: str, label: str, skipped: list[str]) -> str:
    """A record's creation time as ISO-8601 text; epoch ms are converted, garbage is dropped."""
    text = value.strip()
    if not text:
        return ""
    try:
        datetime.fromisoformat(text)
    except ValueError:
        converted = epoch_ms_to_iso(text)
        if converted:
            return converted
        skipped.append(
            f"{label}: creation time {text!r} is not a time; imported with the import time"
        )
        return ""
    return text


def activity_times(
    meta: Mapping[str, Any], label: str, skipped: list[str]
) -> tuple[str | None, str | None]:
    """Activity start and end from a record's metadata; invalid values are dropped and noted."""
    out: list[str | None] = []
    for key in ("activity_start_time", "activity_end_time"):
        raw = as_str(meta.get(key)).strip()
        value = iso_time(raw)
        if raw and value is None:
            skipped.append(f"{label}: {key} {raw!r} is not an ISO-8601 time; imported without it")
        out.append(value)
    return out[0], out[1]


def to_int(value: object) -> int | None:
    """An integer from an int, a float or a numeric string; `None` otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        if isinstance(value, float):
            return int(value)
        if isinstance(value, str) and value.strip():
            return int(float(value.strip()))
    except (ValueError, OverflowError):
        return None
    return None


def parse_priority(value: object) -> int:
    number = to_int(value)
    if number is None:
        return DEFAULT_PRIORITY
    return max(_MIN_PRIORITY, min(_MAX_PRIORITY, number))


def parse_metadata(value: object) -> dict[str, Any]:
    """The metadata object of a record: a dict, or a JSON string of one; else empty."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip():
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return {}
        if isinstance(parsed, dict):
            return parsed
    return {}


def epoch_ms_to_iso(value: object) -> str:
    """ISO-8601 UTC (milliseconds, `Z`) for an epoch-milliseconds value; empty when invalid."""
    ms = to_int(value)
    if ms is None or ms <= 0:
        return ""
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return ""
    return iso_utc(moment)


def derived_id(prefix: str, *parts: str) -> str:
    raw = "\x1f".join(parts).encode("utf-8", "surrogatepass")  # a lone surrogate hashes too
    digest = hashlib.sha256(raw).hexdigest()[:16]
    return f"{prefix}_{digest}"


def parse_source_ids(value: object) -> tuple[str, ...]:
    """The message ids a record names (one that is not valid text cannot name a message)."""
    if not isinstance(value, list):
        return ()
    return tuple(
        text for text in (as_str(v).strip() for v in value) if text and clean_text(text) == text
    )


def _bad_id(rid: str) -> bool:
    """Whether an id holds a lone surrogate: ids are never repaired (they must round-trip)."""
    return clean_text(rid) != rid


def map_type(value: object) -> MemoryType | None:
    return _TYPE_MAP.get(as_str(value).strip().lower())


def parse_heat(value: object) -> int | None:
    number = to_int(value)
    return None if number is None else max(0, number)


def memory_item(
    origin: str,
    skipped: list[str],
    *,
    memory_id: object,
    content: object,
    memory_type: object,
    priority: object,
    scene_name: object,
    metadata: object,
    session_key: object,
    source_message_ids: tuple[str, ...],
    created_at: str,
    updated_at: object,
) -> UpstreamMemory | None:
    """One L1 record from its fields, wherever they were read; `None` when it cannot be imported.

    A record without content or of an unknown type is noted in `skipped` (with `origin`), as
    are activity and creation times that are not times (the record is imported without them). A
    record without an id gets one derived from its type, conversation and content.
    """
    text = clean_text(as_str(content)).strip()
    rid = as_str(memory_id).strip()
    named = ascii(rid) if _bad_id(rid) else rid  # the label is printed: no lone surrogate
    label = f"record {named} ({origin})" if rid else f"record ({origin})"
    if _bad_id(rid):
        skipped.append(f"{label}: its id holds a lone surrogate (not valid Unicode text)")
        return None
    if not text:
        skipped.append(f"{label}: empty content")
        return None
    if len(text) > MAX_CONTENT_CHARS:
        skipped.append(f"{label}: {len(text)} characters, over {MAX_CONTENT_CHARS} for a memory")
        return None
    mtype = map_type(memory_type)
    if mtype is None:
        skipped.append(f"{label}: unsupported type {as_str(memory_type)!r}")
        return None
    start, end = activity_times(parse_metadata(metadata), label, skipped)
    key = clean_text(as_str(session_key))
    return UpstreamMemory(
        id=rid or derived_id("m_import", mtype, key, text),
        content=text,
        type=mtype,
        priority=parse_priority(priority),
        scene_name=clean_text(as_str(scene_name)).strip(),
        activity_start_time=start,
        activity_end_time=end,
        session_key=key,
        source_message_ids=source_message_ids,
        created_at=write_time(created_at, label, skipped),
        updated_at=as_str(updated_at),
        origin=origin,
    )


def message_item(
    origin: str,
    skipped: list[str],
    *,
    message_id: object,
    role: object,
    content: object,
    session_key: object,
    session_id: object,
    timestamp: object,
    recorded_at: object,
) -> UpstreamMessage | None:
    """One L0 message from its fields, wherever they were read; `None` when it cannot be imported.

    A message without content or role is noted in `skipped` (with `origin`). The time comes from
    the epoch-ms `timestamp`, else `recorded_at`; a message without an id gets one derived from
    its conversation, role, time and content, so a re-run finds it.
    """
    text = clean_text(as_str(content)).strip()
    mid = as_str(message_id).strip()
    label = f"message {ascii(mid) if _bad_id(mid) else mid}" if mid else "message"
    speaker = as_str(role).strip()
    key = clean_text(as_str(session_key))
    if _bad_id(mid):
        skipped.append(f"{label} ({origin}): its id holds a lone surrogate (not valid text)")
        return None
    if not text:
        skipped.append(f"{label} ({origin}): empty content")
        return None
    if not speaker:
        skipped.append(f"{label} ({origin}): missing role")
        return None
    when = epoch_ms_to_iso(timestamp) or as_str(recorded_at)
    return UpstreamMessage(
        id=mid or derived_id("l0_import", key, speaker, when, text),
        role=speaker,
        content=text,
        session_key=key,
        session_id=clean_text(as_str(session_id)),
        recorded_at=when,
    )
