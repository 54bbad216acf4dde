"""What an upstream data directory holds: its file names and the plain items read from it.

The reader fills these items and the importer writes them; neither touches the other's side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from langchain_tdai_recall.types import MemoryType

__all__ = [
    "CONVERSATIONS_DIR",
    "DB_NAME",
    "DEFAULT_PRIORITY",
    "PERSONA_NAME",
    "RECORDS_DIR",
    "SCENES_DIR",
    "SCENE_INDEX",
    "UpstreamData",
    "UpstreamMemory",
    "UpstreamMessage",
    "UpstreamScene",
]

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


DEFAULT_PRIORITY: Final = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamMemory:
    """One L1 record read from an upstream directory, already mapped to our vocabulary."""

    id: str
    """Upstream record id (`m_<epoch ms>_<hex>`), or a derived one when it had none."""
    content: str
    """Memory text."""
    type: MemoryType
    """Mapped type."""
    priority: int = DEFAULT_PRIORITY
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
