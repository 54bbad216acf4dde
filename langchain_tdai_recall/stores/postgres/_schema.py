"""The PostgreSQL schema: append-only migrations, applied once by `setup()`.

`MIGRATIONS` is a list of SQL scripts; `tdai_migrations` records the number of each one applied.
`setup()` takes a transaction-scoped advisory lock, so several application servers starting at
once enable pgvector and apply each migration exactly once, and applies what is missing in one
transaction: a database is never left half-migrated. A database migrated by a newer version of
the package is refused rather than misread.

Tables are prefixed `tdai_` and live in the connection's current schema (`search_path`), so the
store can share a database with other applications; put it in its own schema with
`?options=-csearch_path%3Dmemory` in the URL.

Meaning of the columns is the same as in the local store (`stores/local/_schema.py`): a per-scope
`generation` bumped by every write, rows stamped with the generation that wrote them, tombstones
for deletions, vectors next to their rows tagged with the embedder identity (here as pgvector's
`vector`, of any dimension), and each message's `context` (the end of the message before it in
its session).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import psycopg
from psycopg import errors as pg_errors
from psycopg.types import TypeInfo

from langchain_tdai_recall.errors import StoreError
from langchain_tdai_recall.text.fingerprint import content_fingerprint

__all__ = ["MIGRATIONS", "SCHEMA_LOCK", "schema_version", "setup"]

logger = logging.getLogger(__name__)

SCHEMA_LOCK: Final = 0x7464_6169_5F6D_6967  # "tdai_mig"
"""Advisory lock key held while migrating."""

MIGRATIONS: Final[tuple[str, ...]] = (
    # 1: scopes, L1 memories, L0 messages, tombstones, persona and scenes
    """
    CREATE TABLE tdai_scopes (
        scope_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        user_id    text NOT NULL,
        agent_id   text NOT NULL DEFAULT '',
        generation bigint NOT NULL DEFAULT 0,
        UNIQUE (user_id, agent_id)
    );
    CREATE TABLE tdai_memories (
        rowid               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        scope_id            bigint NOT NULL REFERENCES tdai_scopes (scope_id),
        id                  text NOT NULL,
        content             text NOT NULL,
        type                text NOT NULL,
        scene_name          text NOT NULL DEFAULT '',
        priority            integer NOT NULL DEFAULT 50,
        activity_start_time text,
        activity_end_time   text,
        "timestamp"         text,
        session_key         text NOT NULL DEFAULT '',
        source_message_ids  text NOT NULL DEFAULT '[]',
        created_at          text NOT NULL,
        updated_at          text NOT NULL,
        generation          bigint NOT NULL,
        embedder            text,
        vector              vector,
        UNIQUE (scope_id, id)
    );
    CREATE INDEX tdai_memories_scope_generation ON tdai_memories (scope_id, generation);
    CREATE INDEX tdai_memories_scope_created
        ON tdai_memories (scope_id, created_at COLLATE "C", id COLLATE "C");
    CREATE INDEX tdai_memories_unembedded ON tdai_memories (rowid) WHERE vector IS NULL;
    CREATE TABLE tdai_messages (
        rowid       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        scope_id    bigint NOT NULL REFERENCES tdai_scopes (scope_id),
        id          text NOT NULL,
        role        text NOT NULL,
        content     text NOT NULL,
        session_key text NOT NULL DEFAULT '',
        session_id  text NOT NULL DEFAULT '',
        recorded_at text NOT NULL,
        context     text NOT NULL DEFAULT '',
        generation  bigint NOT NULL,
        embedder    text,
        vector      vector,
        UNIQUE (scope_id, id)
    );
    CREATE INDEX tdai_messages_scope_generation ON tdai_messages (scope_id, generation);
    CREATE INDEX tdai_messages_session ON tdai_messages (scope_id, session_key, rowid);
    CREATE INDEX tdai_messages_unembedded ON tdai_messages (rowid) WHERE vector IS NULL;
    CREATE TABLE tdai_tombstones (
        scope_id   bigint NOT NULL,
        layer      text NOT NULL,
        row_ref    bigint NOT NULL,
        generation bigint NOT NULL
    );
    CREATE INDEX tdai_tombstones_scope_generation
        ON tdai_tombstones (scope_id, layer, generation);
    CREATE TABLE tdai_personas (
        scope_id   bigint PRIMARY KEY REFERENCES tdai_scopes (scope_id),
        text       text NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE tdai_scenes (
        scope_id bigint NOT NULL REFERENCES tdai_scopes (scope_id),
        name     text NOT NULL,
        title    text NOT NULL,
        summary  text NOT NULL DEFAULT '',
        heat     bigint NOT NULL DEFAULT 0,
        created  text NOT NULL DEFAULT '',
        updated  text NOT NULL DEFAULT '',
        body     text NOT NULL DEFAULT '',
        PRIMARY KEY (scope_id, name)
    );
    """,
    # 2: memory formation (stores.formation): exact-duplicate fingerprints (`content_key`, filled
    # for existing rows by `_fill_content_keys`), memory version history, session cursors,
    # per-scope scene/persona state, the scene queue and the per-scope leases
    """
    ALTER TABLE tdai_memories ADD COLUMN content_key text;
    CREATE INDEX tdai_memories_scope_content_key ON tdai_memories (scope_id, content_key);
    CREATE TABLE tdai_memory_versions (
        seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        scope_id    bigint NOT NULL,
        memory_id   text NOT NULL,
        version     integer NOT NULL,
        change      text NOT NULL,
        actor       text NOT NULL,
        related_ids text NOT NULL DEFAULT '[]',
        snapshot    text NOT NULL,
        replaced_at text NOT NULL,
        UNIQUE (scope_id, memory_id, version)
    );
    CREATE TABLE tdai_formation_sessions (
        scope_id    bigint NOT NULL,
        session_key text NOT NULL,
        cursor      bigint NOT NULL DEFAULT 0,
        warmup      integer NOT NULL DEFAULT 1,
        situation   text NOT NULL DEFAULT '',
        failures    integer NOT NULL DEFAULT 0,
        retry_at    double precision NOT NULL DEFAULT 0,
        last_error  text NOT NULL DEFAULT '',
        PRIMARY KEY (scope_id, session_key)
    );
    CREATE TABLE tdai_formation_scopes (
        scope_id               bigint PRIMARY KEY,
        scenes_at              double precision NOT NULL DEFAULT 0,
        memories_since_persona integer NOT NULL DEFAULT 0,
        persona_at             double precision NOT NULL DEFAULT 0,
        failures               integer NOT NULL DEFAULT 0,
        retry_at               double precision NOT NULL DEFAULT 0,
        last_error             text NOT NULL DEFAULT ''
    );
    CREATE TABLE tdai_formation_scene_queue (
        seq       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        scope_id  bigint NOT NULL,
        memory_id text NOT NULL
    );
    CREATE INDEX tdai_formation_scene_queue_scope ON tdai_formation_scene_queue (scope_id, seq);
    CREATE TABLE tdai_formation_leases (
        scope_id   bigint PRIMARY KEY,
        owner      text NOT NULL,
        host       text NOT NULL,
        pid        integer NOT NULL,
        expires_at double precision NOT NULL
    );
    """,
    # 3 (issue 16): memory metadata (a JSON object as text) and expiry (UTC ISO text, compared
    # with the clock byte-wise); the background sweep finds expired rows by `..._expiry`
    """
    ALTER TABLE tdai_memories ADD COLUMN metadata text NOT NULL DEFAULT '{}';
    ALTER TABLE tdai_memories ADD COLUMN expires_at text;
    CREATE INDEX tdai_memories_expiry ON tdai_memories (expires_at COLLATE "C")
        WHERE expires_at IS NOT NULL;
    """,
)
"""Append-only schema migrations; never edit one that was released, add another."""


def _fill_content_keys(conn: psycopg.Connection[Any]) -> None:
    """Migration 2: the exact-duplicate fingerprint of every memory stored before it."""
    with conn.cursor(name="tdai_fingerprints") as source:
        source.itersize = 2000
        source.execute("SELECT rowid, content FROM tdai_memories WHERE content_key IS NULL")
        while rows := source.fetchmany(2000):
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE tdai_memories SET content_key = %s WHERE rowid = %s",
                    [(content_fingerprint(str(content)), rowid) for rowid, content in rows],
                )


_AFTER: Final[dict[int, Callable[[psycopg.Connection[Any]], None]]] = {2: _fill_content_keys}
"""Python steps run right after a migration's SQL, in the same transaction."""

_CREATE_MIGRATIONS_TABLE: Final = """
    CREATE TABLE IF NOT EXISTS tdai_migrations (
        version    integer PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
    )
"""


def _newer(display: str, version: int) -> StoreError:
    msg = (
        f"the memory store in PostgreSQL at {display} was written by a newer version of "
        f"langchain-tdai-recall (schema {version}, this version knows {len(MIGRATIONS)}); "
        "upgrade langchain-tdai-recall"
    )
    return StoreError(msg)


def schema_version(conn: psycopg.Connection[Any]) -> int | None:
    """The number of migrations applied, or `None` when the database holds no store."""
    row = conn.execute("SELECT to_regclass('tdai_migrations') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return None
    found = conn.execute("SELECT COALESCE(MAX(version), 0) FROM tdai_migrations").fetchone()
    return int(found[0]) if found else 0


def _ensure_vector_extension(conn: psycopg.Connection[Any], display: str) -> None:
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
        return
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except (pg_errors.InsufficientPrivilege, pg_errors.FeatureNotSupported) as exc:
        msg = (
            f"the pgvector extension is not enabled in PostgreSQL at {display} and this user "
            "may not enable it; ask an administrator to run CREATE EXTENSION vector in that "
            "database"
        )
        raise StoreError(msg) from exc
    except pg_errors.UndefinedFile as exc:
        msg = (
            f"PostgreSQL at {display} has no pgvector extension installed; install pgvector "
            "(https://github.com/pgvector/pgvector) on the server, e.g. the pgvector/pgvector "
            "Docker image"
        )
        raise StoreError(msg) from exc


def setup(conn: psycopg.Connection[Any], display: str, *, upto: int | None = None) -> int:
    """Create or migrate the schema (idempotent); returns the schema version.

    Args:
        conn: An autocommit connection.
        display: The redacted server name for messages.
        upto: Stop after this migration (tests of the migration path).

    Raises:
        StoreError: If the database was migrated by a newer version, or pgvector is missing.
    """
    target = len(MIGRATIONS) if upto is None else upto
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        # under the lock: two processes opening a fresh database at once would otherwise both
        # run CREATE EXTENSION, and the second fails on the catalog's unique index
        _ensure_vector_extension(conn, display)
        conn.execute(_CREATE_MIGRATIONS_TABLE)
        row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM tdai_migrations").fetchone()
        version = int(row[0]) if row else 0
        if version > len(MIGRATIONS):
            raise _newer(display, version)
        for number in range(version + 1, target + 1):
            logger.info("applying schema migration %d to PostgreSQL at %s", number, display)
            conn.execute(MIGRATIONS[number - 1])
            if number in _AFTER:
                _AFTER[number](conn)
            conn.execute("INSERT INTO tdai_migrations (version) VALUES (%s)", (number,))
            version = number
    return version


def check_schema(conn: psycopg.Connection[Any], display: str) -> int:
    """The schema version of a store opened read-only (which cannot migrate).

    Raises:
        StoreError: If the database holds no store, an older one, or a newer one.
    """
    version = schema_version(conn)
    if not version:
        msg = (
            f"PostgreSQL at {display} holds no memory store yet; open it once without "
            "read_only=True to create it"
        )
        raise StoreError(msg)
    if version > len(MIGRATIONS):
        raise _newer(display, version)
    if version < len(MIGRATIONS):
        msg = (
            f"the memory store in PostgreSQL at {display} has schema {version} and needs "
            f"migrating to {len(MIGRATIONS)}; open it once without read_only=True"
        )
        raise StoreError(msg)
    return version


def vector_type(conn: psycopg.Connection[Any]) -> TypeInfo | None:
    """The `vector` type of pgvector in this database."""
    return TypeInfo.fetch(conn, "vector")
