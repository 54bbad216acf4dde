"""The conformance suite's shared data, its backend-factory interface and its comparison helpers.

`fill` writes the same memories, messages, persona and scenes into any store; `snapshot` reads
back everything the suite compares between a backend and the reference (the local in-memory
store), so that every part of the suite holds a backend to the reference's exact results.
"""

from __future__ import annotations

import subprocess
import sys
from abc import ABC, abstractmethod
from typing import Any

from langchain_tdai_recall.memory import TdaiMemory
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.types import (
    MessageRecord,
    Scope,
)

DIMS = 64
"""Dimension of the deterministic test embedder."""

ALICE = Scope("alice")
BOB = Scope("bob")
PLANNER = Scope("alice", "planner")

_MEMORIES: list[dict[str, Any]] = [
    {
        "id": "peanut",
        "content": "The user is allergic to peanuts.",
        "type": "persona",
        "priority": 90,
    },
    {"id": "cat", "content": "The user has a cat named Miso who likes tuna.", "type": "persona"},
    {
        "id": "dog",
        "content": "The user walked the neighbour's dog on Sunday.",
        "activity_start_time": "2025-05-04",
    },
    {
        "id": "seat",
        "content": "The user prefers window seats on long flights.",
        "type": "persona",
        "scene_name": "travel",
    },
    {
        "id": "japan",
        "content": "The user plans a trip to Japan in April to see cherry blossoms.",
        "scene_name": "travel",
        "timestamp": "2025-03-01T10:00:00Z",
    },
    {
        "id": "rule",
        "content": "Always answer in metric units.",
        "type": "instruction",
        "priority": -1,
    },
    {"id": "pinned", "content": "The user's daughter is called Lina.", "priority": 95},
    {"id": "coffee", "content": "用户每天早上喝一杯手冲咖啡。", "scene_name": "饮食"},
    {"id": "tea", "content": "用户下午喜欢喝乌龙茶，不加糖。", "scene_name": "饮食"},
    {"id": "run", "content": "用户每周跑步三次，准备参加半程马拉松。", "type": "persona"},
    {"id": "work", "content": "The user works as a nurse on night shifts.", "priority": 70},
    {
        "id": "book",
        "content": "The user is reading a novel about the sea.",
        "activity_start_time": "2025-04-01",
        "activity_end_time": "2025-04-20",
    },
]
"""Memories of the shared-data tests (English and Chinese, every type, scenes, priorities)."""

_CREATED = "2025-01-01T00:00:00.000Z"

_MESSAGES: list[tuple[str, str, str]] = [
    ("s1", "user", "I went hiking in the Alps last summer."),
    ("s1", "assistant", "That sounds wonderful! Which trail did you take?"),
    ("s1", "user", "The Eiger trail, with my sister."),
    ("s2", "user", "我想学做意大利面。"),
    ("s2", "assistant", "可以先从番茄酱意面开始。"),
    ("s2", "user", "Remind me to buy basil tomorrow."),
]
"""(session, role, text) of the shared-data tests."""

_QUERIES = [
    "Can I eat this peanut cake?",
    "what pets does the user have",
    "book a flight, window or aisle?",
    "plan a trip to Japan",
    "咖啡",
    "用户喜欢什么运动",
    "what does the user drink in the afternoon",
    "daughter",
    "nothing related at all xyzzy",
]
"""Queries compared between the backend and the reference."""


class BackendFactory(ABC):
    """Opens handles on one fresh store of the backend under test."""

    @abstractmethod
    def open(self, *, read_only: bool = False) -> BaseMemoryStore:
        """A new handle on the store (for an in-memory backend: the store, opened once)."""

    def location(self) -> str:
        """What `TdaiMemory.open` takes in another process to open the same store."""
        raise NotImplementedError

    def open_at_schema(self, version: int) -> None:
        """Create the store with only the first `version` schema migrations applied."""
        raise NotImplementedError

    def mark_newer_schema(self) -> None:
        """Make the stored schema look newer than this version of the package knows."""
        raise NotImplementedError

    def latest_schema(self) -> int:
        """The schema version this package writes."""
        raise NotImplementedError


def open_memory(store: BaseMemoryStore | None, **kwargs: Any) -> TdaiMemory:
    """A `TdaiMemory` over `store` (`None`: the reference) with the deterministic embedder."""
    kwargs.setdefault("embeddings", HashEmbeddings(dims=DIMS))
    return TdaiMemory.open(store, **kwargs)


def fill(memory: TdaiMemory) -> None:
    """Write the shared data: memories in three scopes, messages, persona and scenes."""
    records = [{**m, "created_at": _CREATED} for m in _MEMORIES]
    memory.add_memories(records, user_id=ALICE.user_id)
    memory.add_memories(
        [{"id": "bob-peanut", "content": "Bob loves peanut butter.", "created_at": _CREATED}],
        user_id=BOB.user_id,
    )
    memory.add_memories(
        [
            {
                "id": "plan",
                "content": "The planner books trains, not flights.",
                "created_at": _CREATED,
            }
        ],
        user_id=PLANNER.user_id,
        agent_id=PLANNER.agent_id,
    )
    for i, (session, role, text) in enumerate(_MESSAGES):
        memory.record_messages(
            [
                {
                    "role": role,
                    "content": text,
                    "id": f"msg-{i}",
                    "recorded_at": f"2025-02-01T10:00:{i:02d}.000Z",
                }
            ],
            session_key=session,
            user_id=ALICE.user_id,
        )
    memory.set_persona("# Alice\nNurse, runner, allergic to peanuts.", user_id=ALICE.user_id)
    memory.set_persona("Only a persona here.", user_id="persona-only")
    memory.upsert_scene(
        "travel", summary="Trips and flights", body="Japan in April.", user_id=ALICE.user_id
    )
    memory.upsert_scene(
        "饮食", summary="咖啡和茶", body="手冲咖啡，乌龙茶。", user_id=ALICE.user_id
    )
    memory.upsert_scene(
        "travel", summary="Trips, flights", body="Japan in April; Alps.", user_id=ALICE.user_id
    )
    memory.upsert_scene(
        "Travel", summary="another title, same name", body="collides", user_id=ALICE.user_id
    )
    assert memory.flush(timeout=60), "vectors were not computed in time"


def _f(value: float | None) -> float | None:
    return None if value is None else round(value, 9)


def snapshot(memory: TdaiMemory) -> dict[str, Any]:
    """Everything the shared-data tests compare: searches, recalls, lists, documents, counts."""
    out: dict[str, Any] = {}
    for query in _QUERIES:
        for scope in (ALICE, BOB, PLANNER):
            hits = memory.search_memories(
                query, limit=10, user_id=scope.user_id, agent_id=scope.agent_id
            )
            out[f"search {scope} {query}"] = [
                (h.id, _f(h.score), _f(h.keyword_score), _f(h.embedding_score)) for h in hits
            ]
            result = memory.recall(query, user_id=scope.user_id, agent_id=scope.agent_id)
            assert result is not None
            out[f"recall {scope} {query}"] = (
                result.prepend_context,
                result.append_system_context,
                [
                    (m.id, _f(m.score), _f(m.keyword_score), _f(m.embedding_score))
                    for m in result.memories
                ],
                [r.id for r in result.standing_rules],
                [r.id for r in result.pinned],
                result.strategy,
            )
        out[f"persona-only {query}"] = [
            h.id for h in memory.search_memories(query, type="persona", user_id="alice")
        ]
        out[f"scene-only {query}"] = [
            h.id for h in memory.search_memories(query, scene="TRAV", user_id="alice")
        ]
        out[f"conversations {query}"] = [
            (h.id, h.role, h.session_key, h.recorded_at, _f(h.score))
            for h in memory.search_conversations(query, limit=10, user_id="alice")
        ]
        out[f"session s2 {query}"] = [
            h.id for h in memory.search_conversations(query, session_key="s2", user_id="alice")
        ]
    out["list"] = [
        (
            r.id,
            r.content,
            r.type,
            r.priority,
            r.scene_name,
            r.activity_start_time,
            r.activity_end_time,
            r.timestamp,
            r.created_at,
        )
        for r in memory.list_memories(user_id="alice")
    ]
    out["list page"] = [r.id for r in memory.list_memories(user_id="alice", limit=3, offset=2)]
    out["list type"] = [r.id for r in memory.list_memories(user_id="alice", type="persona")]
    out["persona"] = memory.get_persona(user_id="alice")
    out["scenes"] = [(s.name, s.summary, s.heat) for s in memory.list_scenes(user_id="alice")]
    out["scene"] = memory.read_scene("travel", user_id="alice")
    stats = memory.stats()
    out["stats"] = (
        stats.memories,
        stats.messages,
        stats.scenes,
        stats.personas,
        stats.dimensions,
        stats.pending_vectors,
        sorted(
            (s.user_id, s.agent_id or "", s.memories, s.messages, s.scenes) for s in stats.scopes
        ),
    )
    scene = out["scene"]
    if scene is not None:  # times are when each store wrote it
        out["scene"] = (scene.info.name, scene.info.summary, scene.info.heat, scene.body)
    return out


def _message(mid: str, session: str) -> MessageRecord:
    return MessageRecord(
        id=mid,
        role="user",
        content=f"text of {mid}",
        session_key=session,
        user_id="x",
        recorded_at=_CREATED,
    )


def _dead_pid() -> int:
    """A process id that is not running (a finished child's)."""
    done = subprocess.run([sys.executable, "-c", "pass"], check=True)
    del done
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
