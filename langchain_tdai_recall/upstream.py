"""Import a data directory written by the original TencentDB Agent Memory plugin.

The original keeps, under one data directory (typically `~/.openclaw/memory-tdai/`):

- `vectors.db`: SQLite with the L1 table `l1_records` and the L0 table `l0_conversations` (plus
  sqlite-vec and FTS5 tables, which are derived and ignored here);
- `records/*.jsonl`: every L1 record ever written, append-only, so it also holds records that a
  later update or merge superseded;
- `conversations/*.jsonl`: L0 messages;
- `persona.md`: the L3 persona, followed by a generated scene-navigation section;
- `scene_blocks/*.md`: L2 scenes, each with a `-----META-START-----` header;
- `.metadata/scene_index.json`: summary and heat of each scene.

`read_upstream` turns such a directory into plain typed items without touching any store, and
`import_upstream` writes them into one scope of a `TdaiMemory` through its public methods. When
`vectors.db` exists it is the source of truth: L1 records are read from it, JSONL records it no
longer has are superseded and skipped, and L0 messages come from it. Without it the JSONL files
are read (and superseded records cannot be told apart: a warning says so).

Mapping decisions:

- Legacy types are renamed (`episode` → `episodic`, `instruct` → `instruction`, `preference` →
  `persona`); any other type is skipped and reported.
- Activity times come only from the record's metadata (`activity_start_time`,
  `activity_end_time`). The original's `timestamps[0]` / `timestamp_str` is the time the memory
  was *extracted*, not when the remembered thing happened, so it is kept as `created_at` and never
  as an activity time or event timestamp.
- A missing priority is 50; priorities are clamped to -1..100.
- Items without an id get a deterministic one derived from their content, so a re-run finds them.

Re-running an import changes nothing: memories, messages, the persona and scenes that are already
stored with the same content are counted as `unchanged`, and nothing is duplicated.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from langchain_tdai_recall._progress import progress
from langchain_tdai_recall.errors import ConfigError, ImportUpstreamError
from langchain_tdai_recall.text.scene_header import split_scene_header
from langchain_tdai_recall.types import ImportReport, MemoryRecord, MemoryType, Scope

if TYPE_CHECKING:
    import os

    from langchain_tdai_recall._host import ImportTarget as TdaiMemory  # what it writes to

__all__ = [
    "UpstreamData",
    "UpstreamMemory",
    "UpstreamMessage",
    "UpstreamScene",
    "import_upstream",
    "read_upstream",
    "strip_scene_navigation",
]

logger = logging.getLogger(__name__)

DB_NAME: Final = "vectors.db"
"""SQLite database of the original plugin."""
PERSONA_NAME: Final = "persona.md"
"""L3 persona file."""
RECORDS_DIR: Final = "records"
"""Directory of the L1 JSONL files."""
CONVERSATIONS_DIR: Final = "conversations"
"""Directory of the L0 JSONL files."""
SCENES_DIR: Final = "scene_blocks"
"""Directory of the L2 scene files."""
SCENE_INDEX: Final = ".metadata/scene_index.json"
"""L2 index, relative to the data directory."""

_TYPE_MAP: Final[Mapping[str, MemoryType]] = {
    "persona": "persona",
    "episodic": "episodic",
    "instruction": "instruction",
    "episode": "episodic",
    "instruct": "instruction",
    "preference": "persona",
}
"""Upstream type values (current and legacy) to ours."""

_DEFAULT_PRIORITY: Final = 50
_MIN_PRIORITY: Final = -1
_MAX_PRIORITY: Final = 100

_NAV_HEADING_RE: Final = re.compile(
    r"^\s*#{1,6}\s*(?:\S+\s+)?(?:scene\s+navigation|场景导航)", re.IGNORECASE
)
_RULE_RE: Final = re.compile(r"^\s*-{3,}\s*$")

_MESSAGE_BATCH: Final = 256
"""Messages handed to `record_messages` per call (one progress step each)."""


# --------------------------------------------------------------------------------------------
# Plain items


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamMemory:
    """One L1 record read from an upstream directory, already mapped to our vocabulary."""

    id: str
    """Upstream record id (`m_<epoch ms>_<hex>`), or a derived one when it had none."""
    content: str
    """Memory text."""
    type: MemoryType
    """Mapped type."""
    priority: int = _DEFAULT_PRIORITY
    """Priority, clamped to -1..100."""
    scene_name: str = ""
    """Upstream situation label (not an L2 scene file name)."""
    activity_start_time: str | None = None
    """From the record's metadata; `None` when absent."""
    activity_end_time: str | None = None
    """From the record's metadata; `None` when absent."""
    session_key: str = ""
    """Conversation the record was extracted from."""
    source_message_ids: tuple[str, ...] = ()
    """L0 message ids (JSONL only; the database does not keep them)."""
    created_at: str = ""
    """When upstream extracted or first wrote the record (never an activity time)."""
    updated_at: str = ""
    """When upstream last wrote the record."""
    origin: str = ""
    """Where it was read from (`vectors.db` or `records/<file>:<line>`), for reports."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamMessage:
    """One L0 message read from an upstream directory."""

    id: str
    """Upstream message id, or a derived one when it had none."""
    role: str
    """`user` or `assistant`."""
    content: str
    """Message text."""
    session_key: str
    """Conversation key."""
    session_id: str = ""
    """Host session id."""
    recorded_at: str = ""
    """When the message was sent (from its epoch-ms timestamp), else when it was captured."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamScene:
    """One L2 scene block read from an upstream directory."""

    name: str
    """File stem, used as the scene name."""
    summary: str
    """One-line gist."""
    heat: int
    """Upstream heat (an update counter)."""
    body: str
    """Markdown body after the META header."""
    created: str = ""
    """Upstream creation time, as written."""
    updated: str = ""
    """Upstream update time, as written."""


@dataclass(slots=True, kw_only=True)
class UpstreamData:
    """Everything read from an upstream data directory."""

    source: str
    """The data directory."""
    memories: list[UpstreamMemory] = field(default_factory=list)
    """L1 records to import, in upstream order."""
    messages: list[UpstreamMessage] = field(default_factory=list)
    """L0 messages to import, ordered by conversation and time."""
    persona: str | None = None
    """Persona text without the navigation section, or `None`."""
    scenes: list[UpstreamScene] = field(default_factory=list)
    """Scene blocks to import, by name."""
    skipped: list[str] = field(default_factory=list)
    """One line per item that will not be imported, with the reason."""
    superseded: int = 0
    """JSONL records skipped because the database no longer has them."""
    used_database: bool = False
    """Whether `vectors.db` was the source of L1 and L0."""


# --------------------------------------------------------------------------------------------
# Small parsers


def _as_str(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return str(value)


def _iso_time(value: object) -> str | None:
    """A time as normalised ISO-8601 text (a date stays a date); `None` if empty or invalid."""
    text = _as_str(value).strip()
    if not text:
        return None
    try:
        if len(text) == 10:
            return date.fromisoformat(text).isoformat()
        return datetime.fromisoformat(text).isoformat()
    except ValueError:
        return None


def _write_time(value: str, label: str, skipped: list[str]) -> str:
    """A record's creation time as ISO-8601 text; epoch ms are converted, garbage is dropped."""
    text = value.strip()
    if not text:
        return ""
    try:
        datetime.fromisoformat(text)
    except ValueError:
        converted = _epoch_ms_to_iso(text)
        if converted:
            return converted
        skipped.append(
            f"{label}: creation time {text!r} is not a time; imported with the import time"
        )
        return ""
    return text


def _activity_times(
    meta: Mapping[str, Any], label: str, skipped: list[str]
) -> tuple[str | None, str | None]:
    """Activity start and end from a record's metadata; invalid values are dropped and noted."""
    out: list[str | None] = []
    for key in ("activity_start_time", "activity_end_time"):
        raw = _as_str(meta.get(key)).strip()
        value = _iso_time(raw)
        if raw and value is None:
            skipped.append(f"{label}: {key} {raw!r} is not an ISO-8601 time; imported without it")
        out.append(value)
    return out[0], out[1]


def _to_int(value: object) -> int | None:
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


def _priority(value: object) -> int:
    number = _to_int(value)
    if number is None:
        return _DEFAULT_PRIORITY
    return max(_MIN_PRIORITY, min(_MAX_PRIORITY, number))


def _metadata(value: object) -> dict[str, Any]:
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


def _epoch_ms_to_iso(value: object) -> str:
    """ISO-8601 UTC (milliseconds, `Z`) for an epoch-milliseconds value; empty when invalid."""
    ms = _to_int(value)
    if ms is None or ms <= 0:
        return ""
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return ""
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _derived_id(prefix: str, *parts: str) -> str:
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:16]
    return f"{prefix}_{digest}"


def _source_ids(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(text for text in (_as_str(v).strip() for v in value) if text)


def _map_type(value: object) -> MemoryType | None:
    return _TYPE_MAP.get(_as_str(value).strip().lower())


def strip_scene_navigation(text: str) -> str:
    """Remove the scene-navigation section that the original appends to `persona.md`.

    The section starts with a heading naming the scene navigation (for example
    `## 🗺️ Scene Navigation (Scene Index)`), usually preceded by a `---` rule; everything from
    the rule (or the heading, when there is no rule) to the end is removed, and trailing
    whitespace is trimmed. Text without such a heading is returned trimmed of trailing space.

    Args:
        text: The content of `persona.md`.

    Returns:
        The persona body.
    """
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not _NAV_HEADING_RE.match(line):
            continue
        cut = i
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and _RULE_RE.match(lines[j]):
            cut = j
        return "\n".join(lines[:cut]).rstrip()
    return text.rstrip()


def _parse_scene_file(text: str) -> tuple[dict[str, str], str]:
    """Split a scene file into its META fields and its stripped body (see `text.scene_header`)."""
    fields, body, _ = split_scene_header(text)
    return fields, body.strip()


def _heat(value: object) -> int | None:
    number = _to_int(value)
    return None if number is None else max(0, number)


# --------------------------------------------------------------------------------------------
# Readers


def _iter_jsonl(
    directory: Path, data_dir: Path, skipped: list[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (`origin`, object) for each valid line of each `*.jsonl` file, in name order."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob("*.jsonl")):
        rel = path.relative_to(data_dir).as_posix()
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            skipped.append(f"{rel}: unreadable file ({exc.strerror or exc})")
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            origin = f"{rel}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                skipped.append(f"{origin}: malformed JSON line ({exc.msg})")
                continue
            if not isinstance(obj, dict):
                skipped.append(f"{origin}: not a JSON object")
                continue
            yield origin, obj


def _memory_from_json(
    origin: str, obj: Mapping[str, Any], skipped: list[str]
) -> UpstreamMemory | None:
    content = _as_str(obj.get("content")).strip()
    rid = _as_str(obj.get("id")).strip()
    label = f"record {rid}" if rid else "record"
    if not content:
        skipped.append(f"{label} ({origin}): empty content")
        return None
    mtype = _map_type(obj.get("type"))
    if mtype is None:
        skipped.append(f"{label} ({origin}): unsupported type {_as_str(obj.get('type'))!r}")
        return None
    start, end = _activity_times(_metadata(obj.get("metadata")), f"{label} ({origin})", skipped)
    stamps = obj.get("timestamps")
    first_stamp = _as_str(stamps[0]) if isinstance(stamps, list) and stamps else ""
    source_ids = _source_ids(obj.get("source_message_ids"))
    session_key = _as_str(obj.get("sessionKey") or obj.get("session_key"))
    return UpstreamMemory(
        id=rid or _derived_id("m_import", mtype, session_key, content),
        content=content,
        type=mtype,
        priority=_priority(obj.get("priority")),
        scene_name=_as_str(obj.get("scene_name")).strip(),
        activity_start_time=start,
        activity_end_time=end,
        session_key=session_key,
        source_message_ids=source_ids,
        created_at=_write_time(
            _as_str(obj.get("createdAt")) or first_stamp, f"{label} ({origin})", skipped
        ),
        updated_at=_as_str(obj.get("updatedAt")),
        origin=origin,
    )


def _message_from_json(
    origin: str, obj: Mapping[str, Any], skipped: list[str]
) -> UpstreamMessage | None:
    content = _as_str(obj.get("content")).strip()
    mid = _as_str(obj.get("id")).strip()
    label = f"message {mid}" if mid else "message"
    role = _as_str(obj.get("role")).strip()
    session_key = _as_str(obj.get("sessionKey") or obj.get("session_key"))
    if not content:
        skipped.append(f"{label} ({origin}): empty content")
        return None
    if not role:
        skipped.append(f"{label} ({origin}): missing role")
        return None
    recorded_at = _epoch_ms_to_iso(obj.get("timestamp")) or _as_str(obj.get("recordedAt"))
    return UpstreamMessage(
        id=mid or _derived_id("l0_import", session_key, role, recorded_at, content),
        role=role,
        content=content,
        session_key=session_key,
        session_id=_as_str(obj.get("sessionId") or obj.get("session_id")),
        recorded_at=recorded_at,
    )


def _open_db(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error as exc:
        msg = (
            f"{path} is not a readable SQLite database ({exc}); move it aside to import from "
            "the JSONL files instead (superseded records will then be imported too)"
        )
        raise ImportUpstreamError(msg) from exc
    return conn


def _tables(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
    return {str(r[0]) for r in rows}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}


def _select(conn: sqlite3.Connection, table: str, wanted: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of `table` with the wanted columns that exist (missing ones read as `None`)."""
    have = _columns(conn, table)
    cols = [c for c in wanted if c in have]
    if not cols:
        return []
    rows = conn.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY rowid")
    return [{c: row[c] for c in cols} for row in rows]


_L1_COLUMNS: Final = (
    "record_id",
    "content",
    "type",
    "priority",
    "scene_name",
    "session_key",
    "timestamp_str",
    "created_time",
    "updated_time",
    "metadata_json",
)
_L0_COLUMNS: Final = (
    "record_id",
    "session_key",
    "session_id",
    "role",
    "message_text",
    "recorded_at",
    "timestamp",
)


def _read_db_memories(
    conn: sqlite3.Connection,
    sources: Mapping[str, tuple[str, ...]],
    skipped: list[str],
) -> tuple[list[UpstreamMemory], set[str]]:
    """Importable rows of `l1_records`, and the ids of all its rows (importable or not)."""
    out: list[UpstreamMemory] = []
    ids: set[str] = set()
    origin = f"{DB_NAME}:l1_records"
    for row in _select(conn, "l1_records", _L1_COLUMNS):
        rid = _as_str(row.get("record_id")).strip()
        content = _as_str(row.get("content")).strip()
        label = f"record {rid}" if rid else "record"
        if not rid:
            skipped.append(f"{label} ({origin}): missing record_id")
            continue
        ids.add(rid)
        if not content:
            skipped.append(f"{label} ({origin}): empty content")
            continue
        mtype = _map_type(row.get("type"))
        if mtype is None:
            skipped.append(f"{label} ({origin}): unsupported type {_as_str(row.get('type'))!r}")
            continue
        start, end = _activity_times(
            _metadata(row.get("metadata_json")), f"{label} ({origin})", skipped
        )
        out.append(
            UpstreamMemory(
                id=rid,
                content=content,
                type=mtype,
                priority=_priority(row.get("priority")),
                scene_name=_as_str(row.get("scene_name")).strip(),
                activity_start_time=start,
                activity_end_time=end,
                session_key=_as_str(row.get("session_key")),
                source_message_ids=sources.get(rid, ()),
                created_at=_write_time(
                    _as_str(row.get("created_time")) or _as_str(row.get("timestamp_str")),
                    f"{label} ({origin})",
                    skipped,
                ),
                updated_at=_as_str(row.get("updated_time")),
                origin=origin,
            )
        )
    return out, ids


def _read_db_messages(conn: sqlite3.Connection, skipped: list[str]) -> list[UpstreamMessage]:
    out: list[UpstreamMessage] = []
    for row in _select(conn, "l0_conversations", _L0_COLUMNS):
        mid = _as_str(row.get("record_id")).strip()
        content = _as_str(row.get("message_text")).strip()
        role = _as_str(row.get("role")).strip()
        label = f"message {mid}" if mid else "message"
        origin = f"{DB_NAME}:l0_conversations"
        if not content:
            skipped.append(f"{label} ({origin}): empty content")
            continue
        if not role:
            skipped.append(f"{label} ({origin}): missing role")
            continue
        session_key = _as_str(row.get("session_key"))
        recorded_at = _epoch_ms_to_iso(row.get("timestamp")) or _as_str(row.get("recorded_at"))
        out.append(
            UpstreamMessage(
                id=mid or _derived_id("l0_import", session_key, role, recorded_at, content),
                role=role,
                content=content,
                session_key=session_key,
                session_id=_as_str(row.get("session_id")),
                recorded_at=recorded_at,
            )
        )
    return out


def _read_scene_index(data_dir: Path, skipped: list[str]) -> dict[str, dict[str, Any]]:
    """Entries of `.metadata/scene_index.json` by file stem; empty when missing or invalid."""
    path = data_dir / SCENE_INDEX
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        skipped.append(f"{SCENE_INDEX}: unreadable, scene metadata taken from the files ({exc})")
        return {}
    if not isinstance(data, list):
        skipped.append(f"{SCENE_INDEX}: not a JSON array, scene metadata taken from the files")
        return {}
    index: dict[str, dict[str, Any]] = {}
    for entry in data:
        if isinstance(entry, dict) and _as_str(entry.get("filename")).strip():
            index[Path(_as_str(entry["filename"]).strip()).stem] = entry
    return index


def _read_scenes(data_dir: Path, skipped: list[str]) -> list[UpstreamScene]:
    index = _read_scene_index(data_dir, skipped)
    scene_dir = data_dir / SCENES_DIR
    files = (
        sorted(p for p in scene_dir.iterdir() if p.is_file() and p.suffix.lower() == ".md")
        if scene_dir.is_dir()
        else []
    )
    out: list[UpstreamScene] = []
    seen: set[str] = set()
    for path in files:
        rel = path.relative_to(data_dir).as_posix()
        name = path.stem
        if name in seen:
            skipped.append(f"scene {rel}: duplicate name {name!r}")
            continue
        seen.add(name)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            skipped.append(f"scene {rel}: unreadable file ({exc.strerror or exc})")
            continue
        meta, body = _parse_scene_file(text)
        if not body:
            skipped.append(f"scene {rel}: empty body")
            continue
        if body.startswith("[DELETED]"):
            skipped.append(f"scene {rel}: marked [DELETED]")
            continue
        entry = index.get(name, {})
        heat = _heat(meta.get("heat"))
        if heat is None:
            heat = _heat(entry.get("heat")) or 0
        out.append(
            UpstreamScene(
                name=name,
                summary=" ".join((meta.get("summary") or _as_str(entry.get("summary"))).split()),
                heat=heat,
                body=body,
                created=meta.get("created") or _as_str(entry.get("created")),
                updated=meta.get("updated") or _as_str(entry.get("updated")),
            )
        )
    for stem in sorted(set(index) - seen):
        skipped.append(f"scene {stem!r}: listed in {SCENE_INDEX} but its file is missing")
    return out


def read_upstream(data_dir: str | os.PathLike[str]) -> UpstreamData:
    """Read an upstream data directory into plain items, without writing anything.

    Args:
        data_dir: The original plugin's data directory (the one holding `vectors.db`,
            `records/`, `persona.md`, ...).

    Returns:
        The items to import and the list of skipped items with reasons.

    Raises:
        ImportUpstreamError: If the directory does not exist, holds none of the upstream files,
            or its `vectors.db` cannot be read.
    """
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        msg = f"upstream data directory {str(root)!r} does not exist or is not a directory"
        raise ImportUpstreamError(msg)
    markers = (DB_NAME, RECORDS_DIR, CONVERSATIONS_DIR, PERSONA_NAME, SCENES_DIR)
    if not any((root / m).exists() for m in markers):
        msg = (
            f"{str(root)!r} does not look like a TencentDB Agent Memory data directory "
            f"(none of {', '.join(markers)} found); it is usually ~/.openclaw/memory-tdai"
        )
        raise ImportUpstreamError(msg)
    data = UpstreamData(source=str(root))
    _read_records_and_messages(root, data)
    data.messages.sort(key=lambda m: (m.session_key, m.recorded_at))
    data.persona = _read_persona(root, data.skipped)
    data.scenes = _read_scenes(root, data.skipped)
    return data


def _memories_from_jsonl(
    entries: Sequence[tuple[str, dict[str, Any]]], skipped: list[str]
) -> list[UpstreamMemory]:
    out: list[UpstreamMemory] = []
    for origin, obj in entries:
        mem = _memory_from_json(origin, obj, skipped)
        if mem is not None:
            out.append(mem)
    return out


def _raw_jsonl_records(
    root: Path, skipped: list[str]
) -> tuple[dict[str, tuple[str, dict[str, Any]]], list[tuple[str, dict[str, Any]]]]:
    """JSONL records by id (a later line for the same id wins), and those without an id."""
    raw: dict[str, tuple[str, dict[str, Any]]] = {}
    unnamed: list[tuple[str, dict[str, Any]]] = []
    for origin, obj in _iter_jsonl(root / RECORDS_DIR, root, skipped):
        rid = _as_str(obj.get("id")).strip()
        if rid:
            raw[rid] = (origin, obj)
        else:
            unnamed.append((origin, obj))
    return raw, unnamed


def _read_records_and_messages(root: Path, data: UpstreamData) -> None:
    """Fill `data.memories` and `data.messages`, from the database when there is one."""
    skipped = data.skipped
    raw, unnamed = _raw_jsonl_records(root, skipped)

    db_path = root / DB_NAME
    if not db_path.is_file():
        data.memories = _memories_from_jsonl([*raw.values(), *unnamed], skipped)
        if data.memories:
            logger.warning(
                "%s has no %s; importing every JSONL record, including any that the original "
                "later superseded (the JSONL files do not say which)",
                root,
                DB_NAME,
            )
        data.messages = _read_jsonl_messages(root, skipped)
        return

    conn = _open_db(db_path)
    try:
        tables = _tables(conn)
        if "l1_records" in tables:
            data.used_database = True
            sources = {
                rid: _source_ids(obj.get("source_message_ids")) for rid, (_, obj) in raw.items()
            }
            data.memories, db_ids = _read_db_memories(conn, sources, skipped)
            for rid, (origin, _) in raw.items():
                if rid not in db_ids:
                    data.superseded += 1
                    skipped.append(f"record {rid} ({origin}): superseded (no longer in {DB_NAME})")
            for origin, _ in unnamed:
                skipped.append(f"record ({origin}): no id, so not in {DB_NAME}")
        else:
            logger.warning(
                "%s has no l1_records table; reading L1 records from %s/*.jsonl",
                db_path,
                RECORDS_DIR,
            )
            data.memories = _memories_from_jsonl([*raw.values(), *unnamed], skipped)
        if "l0_conversations" in tables:
            data.messages = _read_db_messages(conn, skipped)
        else:
            data.messages = _read_jsonl_messages(root, skipped)
    except sqlite3.Error as exc:
        msg = f"{db_path} could not be read ({exc})"
        raise ImportUpstreamError(msg) from exc
    finally:
        conn.close()


def _read_persona(root: Path, skipped: list[str]) -> str | None:
    path = root / PERSONA_NAME
    if not path.is_file():
        return None
    try:
        persona = strip_scene_navigation(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        skipped.append(f"{PERSONA_NAME}: unreadable ({exc})")
        return None
    if not persona.strip():
        skipped.append(f"{PERSONA_NAME}: empty once the scene navigation is removed")
        return None
    return persona


def _read_jsonl_messages(root: Path, skipped: list[str]) -> list[UpstreamMessage]:
    out: dict[str, UpstreamMessage] = {}
    for origin, obj in _iter_jsonl(root / CONVERSATIONS_DIR, root, skipped):
        msg = _message_from_json(origin, obj, skipped)
        if msg is None:
            continue
        if msg.id in out:
            skipped.append(f"message {msg.id} ({origin}): duplicate id")
            continue
        out[msg.id] = msg
    return list(out.values())


# --------------------------------------------------------------------------------------------
# Import


def _same_memory(stored: MemoryRecord, new: UpstreamMemory) -> bool:
    return (
        stored.content == new.content
        and stored.type == new.type
        and stored.priority == new.priority
        and stored.scene_name == new.scene_name
        and stored.activity_start_time == new.activity_start_time
        and stored.activity_end_time == new.activity_end_time
        and stored.session_key == new.session_key
        and tuple(stored.source_message_ids) == new.source_message_ids
    )


def _memory_payload(mem: UpstreamMemory) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": mem.id,
        "content": mem.content,
        "type": mem.type,
        "priority": mem.priority,
        "scene_name": mem.scene_name,
        "activity_start_time": mem.activity_start_time,
        "activity_end_time": mem.activity_end_time,
        "session_key": mem.session_key,
        "source_message_ids": mem.source_message_ids,
    }
    if mem.created_at:
        payload["created_at"] = mem.created_at
    if mem.updated_at:
        payload["updated_at"] = mem.updated_at
    return payload


@dataclass(slots=True)
class _Tally:
    memories: int = 0
    messages: int = 0
    scenes: int = 0
    persona: bool = False
    unchanged: int = 0


def _import_memories(
    memory: TdaiMemory,
    items: Sequence[UpstreamMemory],
    scope: Scope,
    tally: _Tally,
    show_progress: bool | None,
) -> None:
    """Write new or changed L1 records in one bulk call (the store embeds them in batches)."""
    if not items:
        return
    stored = {r.id: r for r in memory.list_memories(user_id=scope.user_id, agent_id=scope.agent_id)}
    to_write: list[dict[str, Any]] = []
    for mem in items:
        old = stored.get(mem.id)
        if old is not None and _same_memory(old, mem):
            tally.unchanged += 1
        else:
            to_write.append(_memory_payload(mem))
    if to_write:
        memory.add_memories(
            to_write, show_progress=show_progress, user_id=scope.user_id, agent_id=scope.agent_id
        )
    tally.memories += len(to_write)


def _import_messages(
    memory: TdaiMemory,
    items: Sequence[UpstreamMessage],
    scope: Scope,
    tally: _Tally,
    show_progress: bool | None,
) -> None:
    """Record L0 messages per conversation; ids already stored are not stored twice."""
    if not items:
        return
    groups: dict[tuple[str, str], list[UpstreamMessage]] = {}
    for msg in items:
        groups.setdefault((msg.session_key, msg.session_id), []).append(msg)
    with progress(len(items), desc="messages", unit="msg", enabled=show_progress) as bar:
        for (session_key, session_id), msgs in groups.items():
            for start in range(0, len(msgs), _MESSAGE_BATCH):
                chunk = msgs[start : start + _MESSAGE_BATCH]
                kept = memory.record_messages(
                    [
                        {
                            "id": m.id,
                            "role": m.role,
                            "content": m.content,
                            "recorded_at": m.recorded_at,
                        }
                        for m in chunk
                    ],
                    session_key=session_key,
                    session_id=session_id,
                    user_id=scope.user_id,
                    agent_id=scope.agent_id,
                )
                tally.messages += kept
                tally.unchanged += len(chunk) - kept
                bar.update(len(chunk))


def _import_persona_and_scenes(
    memory: TdaiMemory, data: UpstreamData, scope: Scope, tally: _Tally
) -> None:
    if data.persona is not None:
        old_persona = memory.get_persona(user_id=scope.user_id, agent_id=scope.agent_id)
        if old_persona is not None and old_persona.strip() == data.persona.strip():
            tally.unchanged += 1
        else:
            memory.set_persona(data.persona, user_id=scope.user_id, agent_id=scope.agent_id)
            tally.persona = True
    for scene in data.scenes:
        try:
            old = memory.read_scene(scene.name, user_id=scope.user_id, agent_id=scope.agent_id)
        except ConfigError:
            old = None  # not a plain name here; upsert_scene normalises it
        if (
            old is not None
            and old.body.strip() == scene.body
            and old.info.summary == scene.summary
            and old.info.heat == scene.heat
        ):
            tally.unchanged += 1
            continue
        memory.upsert_scene(
            scene.name,
            summary=scene.summary,
            body=scene.body,
            heat=scene.heat,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
        )
        tally.scenes += 1


def import_upstream(
    memory: TdaiMemory,
    data_dir: str | os.PathLike[str],
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    show_progress: bool | None = None,
) -> ImportReport:
    """Import an upstream data directory into one scope of `memory`.

    Memories are re-embedded with `memory`'s embedder. Items already stored with the same id and
    content are left alone and counted as unchanged, so running the import twice writes nothing
    the second time.

    Args:
        memory: The store to write into.
        data_dir: The original plugin's data directory.
        user_id: Scope owner; `None` is the configured default user.
        agent_id: Agent of the scope; `None` is the user's shared memory.
        show_progress: Draw progress bars on standard error (`None`: only on a terminal).

    Returns:
        Counts of what was written, what was unchanged, and one line per skipped item.

    Raises:
        ImportUpstreamError: If the directory cannot be read as an upstream data directory.
    """
    scope = memory.scope(user_id, agent_id)
    data = read_upstream(data_dir)
    tally = _Tally()
    _import_memories(memory, data.memories, scope, tally, show_progress)
    _import_messages(memory, data.messages, scope, tally, show_progress)
    _import_persona_and_scenes(memory, data, scope, tally)
    logger.info(
        "imported %s: %d memories, %d messages, %d scenes, persona=%s, %d unchanged, "
        "%d skipped (%d superseded)",
        data.source,
        tally.memories,
        tally.messages,
        tally.scenes,
        tally.persona,
        tally.unchanged,
        len(data.skipped),
        data.superseded,
    )
    return ImportReport(
        source=data.source,
        memories=tally.memories,
        messages=tally.messages,
        scenes=tally.scenes,
        persona=tally.persona,
        unchanged=tally.unchanged,
        superseded=data.superseded,
        skipped=tuple(data.skipped),
    )
