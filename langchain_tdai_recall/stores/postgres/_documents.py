"""L3 persona and L2 scenes in PostgreSQL tables.

A scene row keeps the exact text the local store would write to its Markdown file (header and
body, `render_scene_file`) and is parsed the same way when read, so both backends return the same
scenes for the same calls; `heat` and `title` are also columns, for ordering and for the name
collision rule. `upsert_scene` reads and writes inside one transaction that locks the scope's row,
so two application servers rewriting a scene at once both count in its heat; memory formation's
`apply_scene_edits` is one transaction too (all edits or none, also if the process dies).

`stable_context` (persona and scene list, read before every recall) is one round trip.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from langchain_tdai_recall.stores.documents import (
    DocumentStore,
    parse_scene_file,
    render_scene_file,
)
from langchain_tdai_recall.stores.postgres._connection import Database
from langchain_tdai_recall.stores.postgres._records import pg_text
from langchain_tdai_recall.types import SceneBlock, SceneInfo, Scope

__all__ = ["PostgresDocuments"]

ScopeResolver = Callable[[Scope, bool], "int | None"]


class PostgresDocuments(DocumentStore):
    """Persona and scene storage for all scopes in PostgreSQL.

    Args:
        db: The connection pool.
        scope_id: Resolves a scope to its id (`create=True` on writes).
    """

    def __init__(self, db: Database, scope_id: ScopeResolver) -> None:
        super().__init__()
        self._db = db
        self._scope_id = scope_id
        self._tx = threading.local()

    @contextmanager
    def _conn(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        """The transaction of the current `upsert_scene`, else a pooled connection."""
        current = getattr(self._tx, "conn", None)
        if current is not None:
            yield current
            return
        with self._db.connection(action) as conn:
            yield conn

    # -- persona --------------------------------------------------------------------------------

    def get_persona(self, scope: Scope) -> str | None:
        scope_id = self._scope_id(scope, False)
        if scope_id is None:
            return None
        with self._conn("read the persona") as conn:
            row = conn.execute(
                "SELECT text FROM tdai_personas WHERE scope_id = %s", (scope_id,)
            ).fetchone()
        text = str(row[0]) if row else None
        return text if text and text.strip() else None

    def set_persona(self, scope: Scope, text: str | None) -> None:
        if text is None or not text.strip():
            scope_id = self._scope_id(scope, False)
            if scope_id is not None:
                with self._conn("delete the persona") as conn:
                    conn.execute("DELETE FROM tdai_personas WHERE scope_id = %s", (scope_id,))
            return
        scope_id = self._scope_id(scope, True)
        with self._conn("write the persona") as conn:
            conn.execute(
                "INSERT INTO tdai_personas (scope_id, text) VALUES (%s, %s) "
                "ON CONFLICT (scope_id) DO UPDATE SET text = excluded.text, updated_at = now()",
                (scope_id, pg_text(text)),
            )

    # -- scenes ---------------------------------------------------------------------------------

    def _read(self, scope: Scope, name: str) -> tuple[SceneBlock, str] | None:
        scope_id = self._scope_id(scope, False)
        if scope_id is None:
            return None
        with self._conn("read a scene") as conn:
            row = conn.execute(
                "SELECT body FROM tdai_scenes WHERE scope_id = %s AND name = %s",
                (scope_id, name),
            ).fetchone()
        return parse_scene_file(name, str(row[0])) if row else None

    def _write(self, scope: Scope, block: SceneBlock, title: str) -> None:
        scope_id = self._scope_id(scope, True)
        text = pg_text(render_scene_file(block, title))
        with self._conn("write a scene") as conn:
            conn.execute(
                "INSERT INTO tdai_scenes (scope_id, name, title, heat, body) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (scope_id, name) DO UPDATE SET "
                "title = excluded.title, heat = excluded.heat, body = excluded.body",
                (scope_id, block.info.name, pg_text(title), block.info.heat, text),
            )

    def _remove(self, scope: Scope, name: str) -> bool:
        scope_id = self._scope_id(scope, False)
        if scope_id is None:
            return False
        with self._conn("delete a scene") as conn:
            cur = conn.execute(
                "DELETE FROM tdai_scenes WHERE scope_id = %s AND name = %s", (scope_id, name)
            )
            return cur.rowcount > 0

    def _names(self, scope: Scope) -> list[str]:
        scope_id = self._scope_id(scope, False)
        if scope_id is None:
            return []
        with self._conn("list scenes") as conn:
            rows = conn.execute(
                'SELECT name FROM tdai_scenes WHERE scope_id = %s ORDER BY name COLLATE "C"',
                (scope_id,),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def upsert_scene(
        self, scope: Scope, title: str, *, summary: str, body: str, heat: int | None
    ) -> SceneInfo:
        """Create or rewrite a scene in one transaction holding the scope's lock."""
        scope_id = self._scope_id(scope, True)
        with self._lock, self._db.transaction("write a scene") as conn:
            conn.execute("SELECT 1 FROM tdai_scopes WHERE scope_id = %s FOR UPDATE", (scope_id,))
            self._tx.conn = conn
            try:
                return super().upsert_scene(scope, title, summary=summary, body=body, heat=heat)
            finally:
                self._tx.conn = None

    def apply_scene_edits(
        self,
        scope: Scope,
        writes: Sequence[tuple[SceneBlock, str]],
        removes: Sequence[str],
    ) -> None:
        """Write scenes exactly as given and remove others in one transaction (all or none)."""
        scope_id = self._scope_id(scope, True)
        with self._lock, self._db.transaction("write scenes") as conn:
            conn.execute("SELECT 1 FROM tdai_scopes WHERE scope_id = %s FOR UPDATE", (scope_id,))
            self._tx.conn = conn
            try:
                for block, title in writes:
                    self._write(scope, block, title)
                for name in removes:
                    self._remove(scope, name)
            finally:
                self._tx.conn = None

    def list_scenes(self, scope: Scope) -> list[SceneInfo]:
        return self.stable_context(scope)[1]

    def stable_context(self, scope: Scope) -> tuple[str | None, list[SceneInfo]]:
        scope_id = self._scope_id(scope, False)
        if scope_id is None:
            return None, []
        with self._conn("read the persona and scenes") as conn:
            rows = conn.execute(
                "SELECT NULL, text FROM tdai_personas WHERE scope_id = %s "
                "UNION ALL SELECT name, body FROM tdai_scenes WHERE scope_id = %s",
                (scope_id, scope_id),
            ).fetchall()
        persona: str | None = None
        scenes: list[SceneInfo] = []
        for name, text in rows:
            if name is None:
                persona = str(text) if str(text).strip() else None
            else:
                scenes.append(parse_scene_file(str(name), str(text))[0].info)
        scenes.sort(key=lambda s: (-s.heat, s.name))
        return persona, scenes

    def scopes(self) -> list[Scope]:
        with self._conn("list scopes with documents") as conn:
            rows = conn.execute(
                "SELECT user_id, agent_id FROM tdai_scopes s WHERE "
                "EXISTS (SELECT 1 FROM tdai_personas p WHERE p.scope_id = s.scope_id) OR "
                "EXISTS (SELECT 1 FROM tdai_scenes c WHERE c.scope_id = s.scope_id) "
                "ORDER BY user_id, agent_id"
            ).fetchall()
        return [Scope(str(u), str(a) or None) for u, a in rows]

    def count_scenes(self, scope: Scope) -> int:
        scope_id = self._scope_id(scope, False)
        if scope_id is None:
            return 0
        with self._conn("count scenes") as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM tdai_scenes WHERE scope_id = %s", (scope_id,)
            ).fetchone()
        return int(row[0]) if row else 0
