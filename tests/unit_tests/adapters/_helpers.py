"""Small helpers shared by the adapter tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage


def user(text: str) -> dict[str, Any]:
    """Agent input with one user message."""
    return {"messages": [{"role": "user", "content": text}]}


def system_of(request: Sequence[BaseMessage]) -> SystemMessage:
    """The system message of a recorded model request."""
    first = request[0]
    assert isinstance(first, SystemMessage), f"no system message first: {request!r}"
    return first


def last_human(request: Sequence[BaseMessage]) -> HumanMessage:
    """The last human message of a recorded model request."""
    for message in reversed(request):
        if isinstance(message, HumanMessage):
            return message
    msg = "no human message"
    raise AssertionError(msg)


def text_of(message: BaseMessage) -> str:
    """All text of a message, blocks joined."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content)
