"""Writing what the reader found into one scope of a `TdaiMemory`, through its public methods.

Re-running an import changes nothing: memories, messages, the persona and scenes that are
already stored with the same content are counted as `unchanged` in the `ImportReport`, and
nothing is duplicated.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from langchain_tdai_recall._runtime.progress import progress
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.types import ImportReport
from langchain_tdai_recall.upstream.reader import read_upstream

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable, Mapping, Sequence

    from langchain_tdai_recall.types import MemoryRecord, SceneBlock, SceneInfo, Scope
    from langchain_tdai_recall.upstream.items import UpstreamData, UpstreamMemory, UpstreamMessage

__all__ = ["ImportReport", "ImportTarget", "import_upstream"]

logger = logging.getLogger(__name__)


class ImportTarget(Protocol):
    """The part of `TdaiMemory` an import writes through (its public methods, nothing else).

    Typing the target by what it is used for keeps this module below the facade it serves.
    """

    def scope(self, user_id: str | None = None, agent_id: str | None = None) -> Scope:
        """See `TdaiMemory.scope`."""
        ...

    def list_memories(
        self, *, user_id: str | None = None, agent_id: str | None = None
    ) -> list[MemoryRecord]:
        """See `TdaiMemory.list_memories`."""
        ...

    def add_memories(
        self,
        records: Iterable[MemoryRecord | Mapping[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        show_progress: bool | None = None,
    ) -> list[MemoryRecord]:
        """See `TdaiMemory.add_memories`."""
        ...

    def record_messages(
        self,
        messages: Iterable[object],
        *,
        session_key: str,
        session_id: str = "",
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> int:
        """See `TdaiMemory.record_messages`."""
        ...

    def get_persona(self, *, user_id: str | None = None, agent_id: str | None = None) -> str | None:
        """See `TdaiMemory.get_persona`."""
        ...

    def set_persona(
        self, text: str | None, *, user_id: str | None = None, agent_id: str | None = None
    ) -> None:
        """See `TdaiMemory.set_persona`."""
        ...

    def read_scene(
        self, name: str, *, user_id: str | None = None, agent_id: str | None = None
    ) -> SceneBlock | None:
        """See `TdaiMemory.read_scene`."""
        ...

    def upsert_scene(
        self,
        name: str,
        *,
        summary: str,
        body: str,
        heat: int | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> SceneInfo:
        """See `TdaiMemory.upsert_scene`."""
        ...


_MESSAGE_BATCH: Final = 256
"""Messages handed to `record_messages` per call (one progress step each)."""


def import_upstream(
    memory: ImportTarget,
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
    memory: ImportTarget,
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
    memory: ImportTarget,
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
    memory: ImportTarget, data: UpstreamData, scope: Scope, tally: _Tally
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
