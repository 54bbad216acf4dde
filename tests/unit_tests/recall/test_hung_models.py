"""Recall with a hung model (issue 26 #3): the store work and the breaker never wait for it.

A recall's store work (indexes, records, persona, scenes) runs on the recall worker threads; the
query embedding and a reranker are waited for on the caller's side (`recall.driver`). These tests
hang the models and check that those threads stay free for store work, that concurrent recalls
all return the persona and the keyword results in time, also with every core busy, and that the
store breaker (memory tools fail fast while the store does not answer) stays closed: the store
answered every time.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall import RecallResult, TdaiMemory
from langchain_tdai_recall.stores.base import Scope
from langchain_tdai_recall.testing import HashEmbeddings

USER = "u1"
PERSONA = "A backend engineer who commutes by train."
QUESTION = "trip to Japan in May"


class HungEmbeddings(Embeddings):
    """Documents embed at once; every query embedding blocks until `release` (a dead endpoint)."""

    def __init__(self) -> None:
        self.inner = HashEmbeddings(64)
        self.identity = "hung-queries-64"
        self.release = threading.Event()
        self.queries = 0
        self._lock = threading.Lock()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        with self._lock:
            self.queries += 1
        self.release.wait(60)
        return self.inner.embed_query(text)


class HungReranker(BaseDocumentCompressor):
    """A reranker whose endpoint stopped answering: every call blocks until `release` is set."""

    release: Any = None

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        self.release.wait(60)
        return list(documents)


@contextmanager
def busy_cores() -> Iterator[None]:
    """A loaded machine: one busy-loop process per core (at most four) beside the test."""
    count = min(os.cpu_count() or 1, 4)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


def _seed(memory: TdaiMemory) -> None:
    memory.set_persona(PERSONA, user_id=USER)
    for i in range(30):
        memory.add_memory(f"Note {i} on the garden and the bike repairs", user_id=USER)
    memory.add_memory("Booked the trip to Japan in May", user_id=USER)
    assert memory.flush(timeout=30)


def _kept_persona_and_keywords(results: Sequence[RecallResult | None]) -> None:
    missing = sum(r is None for r in results)
    assert missing == 0, f"{missing} of {len(results)} recalls returned nothing"
    for result in results:
        assert result is not None
        assert result.append_system_context and PERSONA in result.append_system_context
        assert [m.content for m in result.memories][:1] == ["Booked the trip to Japan in May"]


def _store_answered(memory: TdaiMemory) -> None:
    """The breaker stayed closed and a memory tool still answers (it does not fail fast)."""
    assert memory.store_breaker.remaining() == 0
    search = memory.tools(user_id=USER)[0]
    call = {"name": search.name, "args": {"query": "bike"}, "id": "c1", "type": "tool_call"}
    answer = search.invoke(call)
    assert answer.status == "success", answer.content


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    stop = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < stop, "timed out waiting for the condition"
        await asyncio.sleep(0.01)


async def test_recall_threads_stay_free_while_recalls_wait_for_a_hung_embedder() -> None:
    """The mechanism: store work never queues behind recalls waiting for the embedder.

    With the old code the four recall threads sat in the embedding waits, and store work (the
    breaker's probe of the store) queued behind them for the whole embedding timeout.
    """
    hung = HungEmbeddings()
    memory = TdaiMemory.open(None, embeddings=hung, config={"recall": {"timeoutMs": 4000}})
    try:
        _seed(memory)
        loop = asyncio.get_running_loop()
        recalls = [asyncio.create_task(memory.arecall(QUESTION, user_id=USER)) for _ in range(16)]
        await _until(lambda: hung.queries >= 2)  # both embedder threads hang, the rest queue
        await asyncio.sleep(0.3)  # every recall has reached its wait for the embedding
        probe = loop.run_in_executor(memory._recall_pool, memory._store.index, Scope(USER), "l1")
        started = time.monotonic()
        assert await asyncio.wait_for(probe, timeout=0.5) is not None
        assert time.monotonic() - started < 0.5
        assert not any(task.done() for task in recalls)  # still waiting for the embedder
        results = await asyncio.gather(*recalls)
        _kept_persona_and_keywords(results)
        assert {r.strategy for r in results if r is not None} == {"keyword"}
        _store_answered(memory)
    finally:
        hung.release.set()
        memory.close(timeout=1)


async def test_sixteen_recalls_with_a_hung_embedder_on_a_loaded_machine() -> None:
    """The issue's scenario: 16 concurrent recalls, the embedder hung, every core busy."""
    hung = HungEmbeddings()
    memory = TdaiMemory.open(None, embeddings=hung, config={"recall": {"timeoutMs": 1500}})
    try:
        _seed(memory)
        with busy_cores():
            started = time.monotonic()
            results = await asyncio.gather(
                *(memory.arecall(QUESTION, user_id=USER) for _ in range(16))
            )
            elapsed = time.monotonic() - started
        _kept_persona_and_keywords(results)
        assert elapsed < 1.5 + 0.5
        _store_answered(memory)
    finally:
        hung.release.set()
        memory.close(timeout=1)


@pytest.mark.parametrize("use_async", [False, True])
async def test_slow_store_work_before_the_embedding_still_leaves_time_for_keywords(
    monkeypatch: pytest.MonkeyPatch, use_async: bool
) -> None:
    """The embedding's bound counts from the recall's start, on a loaded machine.

    The scope's index is cold and takes most of a second to build (a large scope, a busy
    machine). The old code then still gave the hung embedder its whole timeout and the recall
    ran out of time: nothing came back, not even the persona.
    """
    hung = HungEmbeddings()
    memory = TdaiMemory.open(None, embeddings=hung, config={"recall": {"timeoutMs": 1500}})
    try:
        _seed(memory)
        index = memory._store.index
        cold = threading.Lock()
        built = threading.Event()

        def cold_index(scope: Scope, layer: Any) -> Any:
            with cold:  # the first caller builds the index, the others wait for it
                if not built.is_set():
                    time.sleep(0.95)
                    built.set()
            return index(scope, layer)

        monkeypatch.setattr(memory._store, "index", cold_index)
        with busy_cores():
            if use_async:
                results = await asyncio.gather(
                    *(memory.arecall(QUESTION, user_id=USER) for _ in range(8))
                )
            else:
                results = [memory.recall(QUESTION, user_id=USER)]
        _kept_persona_and_keywords(results)
        for result in results:
            assert result is not None and result.strategy == "keyword"
            assert result.error is not None and "no time left" in result.error
        assert hung.queries == 0  # no embedder call that could not be waited for
        _store_answered(memory)
    finally:
        hung.release.set()
        memory.close(timeout=1)


async def test_a_hung_reranker_neither_starves_recalls_nor_opens_the_breaker() -> None:
    """The same for a reranker: with the old code the recall threads waited for it to the
    deadline, the queued recalls timed out, and the breaker took the store for dead."""
    reranker = HungReranker(release=threading.Event())
    memory = TdaiMemory.open(
        None,
        embeddings=HashEmbeddings(64),
        reranker=reranker,
        config={"recall": {"timeoutMs": 1500}},
    )
    try:
        _seed(memory)
        with busy_cores():
            results = await asyncio.gather(
                *(memory.arecall(QUESTION, user_id=USER) for _ in range(16))
            )
        _kept_persona_and_keywords(results)
        for result in results:
            assert result is not None and not result.reranked
            assert result.error is not None and "reranker" in result.error
        _store_answered(memory)
    finally:
        reranker.release.set()
        memory.close(timeout=1)
