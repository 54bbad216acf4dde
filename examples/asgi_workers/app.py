"""A chat endpoint with long-term memory, served by several worker processes sharing one PostgreSQL.

Every worker process (`uvicorn --workers N`, gunicorn's uvicorn workers, or N containers) opens
its own `TdaiMemory` on the same database at startup and closes it at shutdown. Nothing is
shared between workers but PostgreSQL: a memory written through one worker is found by the next
call on any other (each call checks the scope's write counter, one indexed read), and each
worker keeps in-process search indexes only for the users it serves.

Run it (the memory store is created on the first start)::

    pip install "langchain-tdai-recall[postgres]" starlette uvicorn
    export TDAI_DATABASE_URL=postgresql://app:secret@db.internal/memory
    uvicorn app:app --app-dir examples/asgi_workers --workers 4 --port 8000

    curl -s localhost:8000/memories -H 'X-User-Id: alice' -d '{"content": "My cat is Miso"}'
    curl -s localhost:8000/chat -H 'X-User-Id: alice' -d '{"message": "What is my cat called?"}'

Settings (environment):

- `TDAI_DATABASE_URL` (required): the shared PostgreSQL with pgvector.
- `TDAI_POOL_SIZE`: connections per worker (default 8); the server needs workers x pool size
  connections, plus formation's and the administrators'.
- `TDAI_CONFIG`: a JSON file of `TdaiConfig` settings (recall, formation, index cache...).
- `TDAI_EMBEDDINGS`: `default` (the bundled offline embedder, loaded by each worker) or `hash`
  (the deterministic test embedder: no model to load, for trials and tests).
- `CHAT_MODEL`: a `provider:model` for LangChain's `init_chat_model` (e.g.
  `openai:gpt-4o-mini`, with that provider's package and key); without it the reply only says
  what the model would have been given, so the example runs offline.

Authentication is a stand-in: the user id comes from the `X-User-Id` header, and a request
without it is refused with 401. In a real deployment take the user id from your verified
session or token, never from a header the client sets: it decides whose memories are searched.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores.postgres import PostgresMemoryStore

SYSTEM_PROMPT = "You are a helpful assistant."


def open_memory() -> TdaiMemory:
    """This worker's memory on the shared database, from the environment."""
    url = os.environ.get("TDAI_DATABASE_URL")
    if not url:
        msg = "set TDAI_DATABASE_URL to the shared PostgreSQL (postgresql://user@host/db)"
        raise RuntimeError(msg)
    store = PostgresMemoryStore(url, pool_size=int(os.environ.get("TDAI_POOL_SIZE", "8")))
    embeddings: Any = "default"
    if os.environ.get("TDAI_EMBEDDINGS") == "hash":
        from langchain_tdai_recall.testing import HashEmbeddings  # noqa: PLC0415 - tests only

        embeddings = HashEmbeddings(dims=64)
    return TdaiMemory.open(store, embeddings=embeddings, config=os.environ.get("TDAI_CONFIG"))


def open_model() -> BaseChatModel | None:
    """The chat model named by `CHAT_MODEL`, or `None` to run without one."""
    name = os.environ.get("CHAT_MODEL")
    if not name:
        return None
    from langchain.chat_models import init_chat_model  # noqa: PLC0415 - only when configured

    return init_chat_model(name)


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Open this worker's memory (and model) at startup; close them at shutdown."""
    app.state.memory = await run_in_threadpool(open_memory)
    app.state.model = open_model()
    try:
        yield
    finally:
        await run_in_threadpool(app.state.memory.close)


def user_of(request: Request) -> str | None:
    """The authenticated user (see the module docstring: a stand-in for real auth)."""
    user = request.headers.get("x-user-id", "").strip()
    return user or None


def unauthorized() -> JSONResponse:
    """The answer to a request without a user."""
    return JSONResponse({"error": "missing X-User-Id header"}, status_code=401)


async def read_text(request: Request, field: str) -> str | None:
    """A non-empty string field of the JSON body, or `None`."""
    try:
        body = await request.json()
    except ValueError:
        return None
    value = body.get(field) if isinstance(body, dict) else None
    return value if isinstance(value, str) and value.strip() else None


async def chat(request: Request) -> JSONResponse:
    """One chat turn: recall for the user, answer, record the turn."""
    user = user_of(request)
    if user is None:
        return unauthorized()
    message = await read_text(request, "message")
    if message is None:
        return JSONResponse({"error": 'send {"message": "..."}'}, status_code=422)
    session = request.headers.get("x-session-id") or "default"
    memory: TdaiMemory = request.app.state.memory
    recalled = await memory.arecall(
        message, user_id=user, session_key=session, system_prompt=SYSTEM_PROMPT
    )
    system = SYSTEM_PROMPT
    user_text = message
    if recalled is not None:
        if recalled.append_system_context:
            system = f"{system}\n\n{recalled.append_system_context}"
        if recalled.prepend_context:
            user_text = f"{recalled.prepend_context}\n\n{message}"
    messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(user_text)]
    model: BaseChatModel | None = request.app.state.model
    if model is not None:
        answer = await model.ainvoke(messages)
        reply = str(answer.text)
    else:
        reply = f"(no CHAT_MODEL set) the model would get {len(user_text)} characters"
    await run_in_threadpool(
        memory.record_messages,
        [{"role": "user", "content": message}, {"role": "assistant", "content": reply}],
        session_key=session,
        user_id=user,
    )
    memories = [m.content for m in recalled.memories] if recalled is not None else []
    return JSONResponse({"reply": reply, "recalled": memories, "worker": os.getpid()})


async def remember(request: Request) -> JSONResponse:
    """Store a memory the user asked to keep (what a 'remember this' button or tool does)."""
    user = user_of(request)
    if user is None:
        return unauthorized()
    content = await read_text(request, "content")
    if content is None:
        return JSONResponse({"error": 'send {"content": "..."}'}, status_code=422)
    memory: TdaiMemory = request.app.state.memory
    stored = await run_in_threadpool(memory.add_memory, content, user_id=user)
    return JSONResponse({"id": stored.id, "worker": os.getpid()}, status_code=201)


async def health(request: Request) -> JSONResponse:
    """Liveness: this worker's store answers."""
    memory: TdaiMemory = request.app.state.memory
    return JSONResponse({"ok": not memory.closed, "worker": os.getpid()})


app = Starlette(
    routes=[
        Route("/chat", chat, methods=["POST"]),
        Route("/memories", remember, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
    ],
    lifespan=lifespan,
)
