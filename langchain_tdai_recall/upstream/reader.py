"""Reading an upstream data directory into plain items, without touching any store.

When `vectors.db` exists it is the source of truth: L1 records are read from it, JSONL records
it no longer has are superseded and skipped, and L0 messages come from it. Without it the JSONL
files are read (and superseded records cannot be told apart: a warning says so). The persona,
the scene files and the scene index are read from their files either way.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from langchain_tdai_recall._exchange.records import clean_text
from langchain_tdai_recall.errors import ImportUpstreamError
from langchain_tdai_recall.text.scene_header import split_scene_header
from langchain_tdai_recall.upstream._database import (
    open_db,
    read_db_memories,
    read_db_messages,
    table_names,
)
from langchain_tdai_recall.upstream._fields import (
    as_str,
    memory_item,
    message_item,
    parse_heat,
    parse_source_ids,
)
from langchain_tdai_recall.upstream.items import (
    CONVERSATIONS_DIR,
    DB_NAME,
    PERSONA_NAME,
    RECORDS_DIR,
    SCENE_INDEX,
    SCENES_DIR,
    UpstreamData,
    UpstreamMemory,
    UpstreamMessage,
    UpstreamScene,
)

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator, Mapping, Sequence

__all__ = ["read_upstream", "strip_scene_navigation"]

logger = logging.getLogger(__name__)

_NAV_HEADING_RE: Final = re.compile(
    r"^\s*#{1,6}\s*(?:\S+\s+)?(?:scene\s+navigation|场景导航)", re.IGNORECASE
)


_RULE_RE: Final = re.compile(r"^\s*-{3,}\s*$")


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


def _iter_jsonl(
    directory: Path, data_dir: Path, skipped: list[str]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (`origin`, object) for each valid line of each `*.jsonl` file, in name order."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob("*.jsonl")):
        rel = clean_text(path.relative_to(data_dir).as_posix())  # undecodable name bytes
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
    stamps = obj.get("timestamps")
    first_stamp = as_str(stamps[0]) if isinstance(stamps, list) and stamps else ""
    return memory_item(
        origin,
        skipped,
        memory_id=obj.get("id"),
        content=obj.get("content"),
        memory_type=obj.get("type"),
        priority=obj.get("priority"),
        scene_name=obj.get("scene_name"),
        metadata=obj.get("metadata"),
        session_key=obj.get("sessionKey") or obj.get("session_key"),
        source_message_ids=parse_source_ids(obj.get("source_message_ids")),
        created_at=as_str(obj.get("createdAt")) or first_stamp,
        updated_at=obj.get("updatedAt"),
    )


def _message_from_json(
    origin: str, obj: Mapping[str, Any], skipped: list[str]
) -> UpstreamMessage | None:
    return message_item(
        origin,
        skipped,
        message_id=obj.get("id"),
        role=obj.get("role"),
        content=obj.get("content"),
        session_key=obj.get("sessionKey") or obj.get("session_key"),
        session_id=obj.get("sessionId") or obj.get("session_id"),
        timestamp=obj.get("timestamp"),
        recorded_at=obj.get("recordedAt"),
    )


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
        rid = as_str(obj.get("id")).strip()
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

    conn = open_db(db_path)
    try:
        tables = table_names(conn)
        if "l1_records" in tables:
            data.used_database = True
            sources = {
                rid: parse_source_ids(obj.get("source_message_ids"))
                for rid, (_, obj) in raw.items()
            }
            data.memories, db_ids = read_db_memories(conn, sources, skipped)
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
            data.messages = read_db_messages(conn, skipped)
        else:
            data.messages = _read_jsonl_messages(root, skipped)
    except sqlite3.Error as exc:
        msg = f"{db_path} could not be read ({exc})"
        raise ImportUpstreamError(msg) from exc
    finally:
        conn.close()


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
        if isinstance(entry, dict) and as_str(entry.get("filename")).strip():
            index[Path(as_str(entry["filename"]).strip()).stem] = entry
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
        rel = clean_text(path.relative_to(data_dir).as_posix())
        name = clean_text(path.stem)  # a file name's undecodable bytes: U+FFFD, as in text
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
        heat = parse_heat(meta.get("heat"))
        if heat is None:
            heat = parse_heat(entry.get("heat")) or 0
        out.append(
            UpstreamScene(
                name=name,
                summary=" ".join((meta.get("summary") or as_str(entry.get("summary"))).split()),
                heat=heat,
                body=body,
                created=meta.get("created") or as_str(entry.get("created")),
                updated=meta.get("updated") or as_str(entry.get("updated")),
            )
        )
    for stem in sorted(set(index) - seen):
        skipped.append(f"scene {stem!r}: listed in {SCENE_INDEX} but its file is missing")
    return out
