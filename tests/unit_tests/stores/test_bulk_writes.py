"""Bulk writes: acknowledged durably and keyword-searchable at once; vectors resume after a kill.

The background embedder's to-do list is the rows without a vector, so a process killed in the
middle of a long backlog loses nothing, and the next process embeds only what is still missing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings

N = 1500

_WRITER = textwrap.dedent(
    """
    import json, sys, time
    from langchain_tdai_recall import TdaiMemory
    from langchain_tdai_recall.testing import HashEmbeddings

    class Slow(HashEmbeddings):
        identity = "hash-32"
        def embed_documents(self, texts):
            time.sleep(0.05)
            with open(sys.argv[2], "a", encoding="utf-8") as log:
                log.write(json.dumps(texts) + "\\n")
            return super().embed_documents(texts)

    mem = TdaiMemory.open(sys.argv[1], embeddings=Slow(dims=32),
                          config={"embedding": {"batchSize": 50}})
    n = int(sys.argv[3])
    records = [{"id": f"r{i}", "content": f"bulk record {i} about kites"} for i in range(n)]
    mem.add_memories(records, user_id="u", show_progress=False)
    hits = mem.search_memories("bulk record 1234 kites", limit=3, user_id="u")
    print(json.dumps({"acked": True, "top": hits[0].id, "pending": mem.stats().pending_vectors}),
          flush=True)
    time.sleep(600)  # killed while the background embedder works through the backlog
    """
)


class _Counting(HashEmbeddings):
    identity = "hash-32"

    def __init__(self) -> None:
        super().__init__(dims=32)
        self.texts: list[str] = []
        self.started = threading.Event()
        """Set by the test once it has read the backlog: the background upkeep starts at open and
        would otherwise shrink it before the test looks."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        bulk = [t for t in texts if t.startswith("bulk record")]  # not the dimension probe
        if bulk:
            assert self.started.wait(30)
        self.texts += bulk
        return super().embed_documents(texts)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_killed_bulk_import_keeps_its_rows_and_the_next_process_embeds_only_the_rest(
    tmp_path: Path,
) -> None:
    store, log = tmp_path / "store", tmp_path / "embedded.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(store), str(log), str(N)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        # acknowledged: every row durable and found by keyword before any vector exists
        assert first == {"acked": True, "top": "r1234", "pending": first["pending"]}
        assert first["pending"] > N // 2
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = log.read_text(encoding="utf-8").count("\n") if log.exists() else 0
            if done >= 4:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    embedded_before = [t for line in log.read_text().splitlines() for t in json.loads(line)]
    assert 0 < len(embedded_before) < N

    counting = _Counting()
    with TdaiMemory.open(store, embeddings=counting) as memory:
        pending = memory.stats().pending_vectors
        assert memory.stats().memories == N
        # the vectors stored before the kill are kept (at most the batch in flight is lost)
        assert N - len(embedded_before) <= pending <= N - len(embedded_before) + 50
        counting.started.set()
        assert memory.flush(timeout=60)
        assert memory.stats().pending_vectors == 0
        # no duplicate work: each missing row embedded once, none of the stored ones again
        assert len(counting.texts) == pending
        assert len(set(counting.texts)) == pending
        hit = memory.search_memories("bulk record 7 about kites", limit=1, user_id="u")[0]
        assert hit.embedding_score is not None


def test_a_bulk_add_is_keyword_searchable_before_its_vectors(tmp_path: Path) -> None:
    """`add_memories` (also behind `import_upstream`) returns before the embedder has seen a
    row, and the rows are found by keyword at once."""

    class Blocked(HashEmbeddings):
        identity = "hash-blocked"

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            time.sleep(5)
            return super().embed_documents(texts)

    with TdaiMemory.open(tmp_path / "s", embeddings=Blocked(dims=16), close_timeout=0.1) as mem:
        started = time.perf_counter()
        mem.add_memories([{"content": f"note {i} on sailing"} for i in range(300)], user_id="u")
        assert time.perf_counter() - started < 4
        assert mem.stats().pending_vectors >= 299
        hits = mem.search_memories("note 42 sailing", limit=1, user_id="u")
        assert hits and hits[0].content == "note 42 on sailing"
