"""The local store's SQLite schema: the file name and the append-only migrations.

One database per store (`memory.sqlite3` in the store directory, or `:memory:`). Migrations are
applied in order when a store is opened for writing, and `PRAGMA user_version` is the number
applied; a new database is created with all of them at once (`stores.local._connection`).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CONTEXT_SCHEMA",
    "DB_FILENAME",
    "FORMATION_SCHEMA",
    "LIFECYCLE_SCHEMA",
    "MIGRATIONS",
    "OLD_MEMORIES_VIEW",
    "OUR_TABLES",
]

DB_FILENAME: Final = "memory.sqlite3"
"""The database file in a store directory; it marks the directory as a store."""

MIGRATIONS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE scopes (
        scope_id   INTEGER PRIMARY KEY,
        user_id    TEXT NOT NULL,
        agent_id   TEXT NOT NULL,          -- '' is the user's shared memory
        generation INTEGER NOT NULL DEFAULT 0,
        UNIQUE (user_id, agent_id)
    );
    CREATE TABLE memories (
        rowid               INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_id            INTEGER NOT NULL REFERENCES scopes(scope_id),
        id                  TEXT NOT NULL,
        content             TEXT NOT NULL,
        type                TEXT NOT NULL,
        scene_name          TEXT NOT NULL DEFAULT '',
        priority            INTEGER NOT NULL DEFAULT 50,
        activity_start_time TEXT,
        activity_end_time   TEXT,
        timestamp           TEXT,
        session_key         TEXT NOT NULL DEFAULT '',
        source_message_ids  TEXT NOT NULL DEFAULT '[]',
        created_at          TEXT NOT NULL,
        updated_at          TEXT NOT NULL,
        generation          INTEGER NOT NULL,
        embedder            TEXT,
        vector              BLOB,
        UNIQUE (scope_id, id)
    );
    CREATE INDEX memories_scope_generation ON memories (scope_id, generation);
    CREATE TABLE messages (
        rowid       INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_id    INTEGER NOT NULL REFERENCES scopes(scope_id),
        id          TEXT NOT NULL,
        role        TEXT NOT NULL,
        content     TEXT NOT NULL,
        session_key TEXT NOT NULL DEFAULT '',
        session_id  TEXT NOT NULL DEFAULT '',
        recorded_at TEXT NOT NULL,
        generation  INTEGER NOT NULL,
        embedder    TEXT,
        vector      BLOB,
        UNIQUE (scope_id, id)
    );
    CREATE INDEX messages_scope_generation ON messages (scope_id, generation);
    CREATE TABLE tombstones (
        scope_id   INTEGER NOT NULL,
        layer      TEXT NOT NULL,
        row_ref    INTEGER NOT NULL,
        generation INTEGER NOT NULL
    );
    CREATE INDEX tombstones_scope_generation ON tombstones (scope_id, layer, generation);
    """,
    # 2: rows still waiting for a vector, found without scanning the table
    """
    CREATE INDEX memories_unembedded ON memories (rowid) WHERE vector IS NULL;
    CREATE INDEX messages_unembedded ON messages (rowid) WHERE vector IS NULL;
    """,
    # 3: each message keeps the end of the message before it in its session (see
    # `L0_CONTEXT_CHARS`), so a turn is searched with the turn it answers; existing messages get
    # theirs and wait for a new vector made from both
    """
    ALTER TABLE messages ADD COLUMN context TEXT NOT NULL DEFAULT '';
    CREATE INDEX messages_session ON messages (scope_id, session_key, rowid);
    UPDATE messages SET context = COALESCE((
        SELECT substr(prev.content, -300) FROM messages AS prev
        WHERE prev.scope_id = messages.scope_id AND prev.session_key = messages.session_key
            AND prev.rowid < messages.rowid
        ORDER BY prev.rowid DESC LIMIT 1), '');
    UPDATE messages SET vector = NULL, embedder = NULL WHERE context != '';
    """,
    # 4: memory formation (stores/_sql/formation.py, stores/_sql/history.py). `content_key` is the
    # exact-duplicate fingerprint (text/fingerprint.py), filled for existing rows here; the
    # formation cursor reads a session's messages through `messages_session` (migration 3).
    """
    ALTER TABLE memories ADD COLUMN content_key TEXT;
    UPDATE memories SET content_key = tdai_fingerprint(content);
    CREATE INDEX memories_scope_content_key ON memories (scope_id, content_key);
    CREATE TABLE memory_versions (
        seq         INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_id    INTEGER NOT NULL,
        memory_id   TEXT NOT NULL,
        version     INTEGER NOT NULL,
        change      TEXT NOT NULL,         -- update | merge | merged | delete
        actor       TEXT NOT NULL,         -- api | extraction | tool
        related_ids TEXT NOT NULL DEFAULT '[]',
        snapshot    TEXT NOT NULL,         -- the replaced version as JSON
        replaced_at TEXT NOT NULL,
        UNIQUE (scope_id, memory_id, version)
    );
    CREATE TABLE formation_sessions (
        scope_id    INTEGER NOT NULL,
        session_key TEXT NOT NULL,
        cursor      INTEGER NOT NULL DEFAULT 0,   -- last L0 rowid extracted (messages.rowid)
        warmup      INTEGER NOT NULL DEFAULT 1,   -- warm-up threshold, 0 once graduated
        situation   TEXT NOT NULL DEFAULT '',
        failures    INTEGER NOT NULL DEFAULT 0,   -- consecutive failed attempts
        retry_at    REAL NOT NULL DEFAULT 0,      -- epoch seconds, no attempt before
        last_error  TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (scope_id, session_key)
    );
    CREATE TABLE formation_scopes (
        scope_id               INTEGER PRIMARY KEY,
        scenes_at              REAL NOT NULL DEFAULT 0,
        memories_since_persona INTEGER NOT NULL DEFAULT 0,
        persona_at             REAL NOT NULL DEFAULT 0,
        failures               INTEGER NOT NULL DEFAULT 0,
        retry_at               REAL NOT NULL DEFAULT 0,
        last_error             TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE formation_scene_queue (
        seq       INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_id  INTEGER NOT NULL,
        memory_id TEXT NOT NULL
    );
    CREATE INDEX formation_scene_queue_scope ON formation_scene_queue (scope_id, seq);
    CREATE TABLE formation_leases (
        scope_id   INTEGER PRIMARY KEY,
        owner      TEXT NOT NULL,
        host       TEXT NOT NULL,
        pid        INTEGER NOT NULL,
        expires_at REAL NOT NULL
    );
    """,
    # 5 (issue 16): memory metadata (a JSON object) and expiry (UTC ISO text, compared with the
    # clock as text); the background sweep finds expired rows through `memories_expiry`
    """
    ALTER TABLE memories ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
    ALTER TABLE memories ADD COLUMN expires_at TEXT;
    CREATE INDEX memories_expiry ON memories (expires_at) WHERE expires_at IS NOT NULL;
    """,
)
"""Append-only schema migrations; `PRAGMA user_version` is the number applied."""

CONTEXT_SCHEMA: Final = 3
"""Schema from which messages have a context column; a read-only open of an older store (it
cannot migrate) reads them without context."""
FORMATION_SCHEMA: Final = 4
"""Schema from which memories have a fingerprint and the history and formation tables exist;
a read-only open of an older store reads memories without them."""
LIFECYCLE_SCHEMA: Final = 5
"""Schema from which memories have metadata and an expiry; a read-only open of an older store
reads them through `OLD_MEMORIES_VIEW`, which adds both, empty."""
OLD_MEMORIES_VIEW: Final = (
    "CREATE TEMP VIEW IF NOT EXISTS memories AS "
    "SELECT *, '{}' AS metadata, NULL AS expires_at FROM main.memories"
)
"""For a read-only connection to a store older than `LIFECYCLE_SCHEMA`: the temp schema's view
shadows main's table for every unqualified `memories` the shared SQL names."""

OUR_TABLES: Final = frozenset({"scopes", "memories", "messages", "tombstones"})
"""Tables every memory store has (a database without them is not one)."""
