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

The modules: `items` (the file names and the plain items), `reader` (the directory: JSONL files,
persona, scene files and index) over `_database` (`vectors.db`) and `_fields` (value
normalisation), and `importer` (the writes into a `TdaiMemory`).
"""

from __future__ import annotations

from langchain_tdai_recall.types import ImportReport as ImportReport
from langchain_tdai_recall.upstream.importer import import_upstream
from langchain_tdai_recall.upstream.items import CONVERSATIONS_DIR as CONVERSATIONS_DIR
from langchain_tdai_recall.upstream.items import DB_NAME as DB_NAME
from langchain_tdai_recall.upstream.items import PERSONA_NAME as PERSONA_NAME
from langchain_tdai_recall.upstream.items import RECORDS_DIR as RECORDS_DIR
from langchain_tdai_recall.upstream.items import SCENE_INDEX as SCENE_INDEX
from langchain_tdai_recall.upstream.items import SCENES_DIR as SCENES_DIR
from langchain_tdai_recall.upstream.items import (
    UpstreamData,
    UpstreamMemory,
    UpstreamMessage,
    UpstreamScene,
)
from langchain_tdai_recall.upstream.reader import read_upstream, strip_scene_navigation

__all__ = [
    "UpstreamData",
    "UpstreamMemory",
    "UpstreamMessage",
    "UpstreamScene",
    "import_upstream",
    "read_upstream",
    "strip_scene_navigation",
]
