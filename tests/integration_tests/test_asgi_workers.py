"""The deployment example (issue 23): two real uvicorn worker processes sharing one PostgreSQL.

`examples/asgi_workers/app.py` runs in two separate processes (each on its own unix socket, so
the test can address each worker), both on the same fresh database: a memory stored through one
worker is recalled by the other at its next call, users never see each other's memories, and a
request without a user is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "asgi_workers"


def _start(url: str, socket: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TDAI_DATABASE_URL": url, "TDAI_EMBEDDINGS": "hash", "TDAI_POOL_SIZE": "4"}
    env.pop("CHAT_MODEL", None)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "app:app",
            "--app-dir",
            str(EXAMPLE),
            "--uds",
            str(socket),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _client(socket: Path) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(socket)), base_url="http://worker", timeout=30
    )


@pytest.fixture
def workers(postgres_url: str) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Two worker processes of the example on one database, and a client for each."""
    folder = Path(tempfile.mkdtemp(prefix="tdai-asgi-"))
    sockets = [folder / "w0.sock", folder / "w1.sock"]
    procs = [_start(postgres_url, s) for s in sockets]
    clients = [_client(s) for s in sockets]
    try:
        deadline = time.monotonic() + 120
        for proc, sock, client in zip(procs, sockets, clients, strict=True):
            while True:
                if proc.poll() is not None:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    pytest.fail(f"the worker exited with {proc.returncode}: {err[-2000:]}")
                if sock.exists():
                    try:
                        if client.get("/health").json()["ok"]:
                            break
                    except httpx.TransportError:
                        pass
                assert time.monotonic() < deadline, "the worker did not start in 120 s"
                time.sleep(0.1)
        yield clients[0], clients[1]
    finally:
        for client in clients:
            client.close()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for sock in sockets:
            sock.unlink(missing_ok=True)
        folder.rmdir()


def test_two_workers_share_memories_per_user_and_refuse_anonymous_calls(
    workers: tuple[httpx.Client, httpx.Client],
) -> None:
    first, second = workers
    alice, bob = {"X-User-Id": "alice"}, {"X-User-Id": "bob"}
    assert first.get("/health").json()["worker"] != second.get("/health").json()["worker"]

    # no user, no service
    assert first.post("/chat", json={"message": "hello"}).status_code == 401
    assert second.post("/memories", json={"content": "x"}).status_code == 401
    assert first.post("/chat", json={"message": "hi"}, headers={"X-User-Id": ""}).status_code == 401

    # both workers serve alice first, so each holds her scope's search index in its process
    for client in (first, second):
        warm = client.post("/chat", json={"message": "what is my cat called?"}, headers=alice)
        assert warm.status_code == 200 and warm.json()["recalled"] == []

    # freshness: stored through one worker, recalled by the other at its next call
    stored = first.post("/memories", json={"content": "Alice's cat is called Miso"}, headers=alice)
    assert stored.status_code == 201
    turn = second.post("/chat", json={"message": "what is my cat called?"}, headers=alice)
    assert turn.status_code == 200
    assert turn.json()["worker"] != stored.json()["worker"]
    assert any("Miso" in m for m in turn.json()["recalled"])

    # and the other way round
    assert (
        second.post("/memories", json={"content": "Alice drinks oolong tea"}, headers=alice)
    ).status_code == 201
    again = first.post("/chat", json={"message": "which tea do I drink?"}, headers=alice)
    assert any("oolong" in m for m in again.json()["recalled"])

    # users are isolated on both workers
    for client in (first, second):
        other = client.post("/chat", json={"message": "what is my cat called?"}, headers=bob)
        assert other.status_code == 200
        assert not any("Miso" in m or "oolong" in m for m in other.json()["recalled"])
