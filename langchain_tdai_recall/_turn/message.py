"""The turn's message and the injection of recall into a model request (pure functions).

The turn's message is the last human message that is not a summary, as typed; recall's two
blocks are appended to the system message and prepended to that human message, the same bytes
for every model call of the turn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final, cast

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_tdai_recall.types import RecallResult

__all__ = [
    "append_system_context",
    "final_answer",
    "inject_messages",
    "inject_recall",
    "is_summary_message",
    "latest_human_index",
    "message_text",
    "prepend_human_context",
    "turn_key",
]


_SUMMARY_SOURCE: Final = "summarization"
"""`additional_kwargs["lc_source"]` of the summary message `SummarizationMiddleware` writes."""

_BLANK_LINE: Final = "\n\n"


# -- the turn's message ---------------------------------------------------------------------------


def is_summary_message(message: BaseMessage) -> bool:
    """Whether `message` is the summary `SummarizationMiddleware` put in place of old messages."""
    return message.additional_kwargs.get("lc_source") == _SUMMARY_SOURCE


def latest_human_index(messages: Sequence[BaseMessage]) -> int | None:
    """Index of the turn's human message: the last `HumanMessage` that is not a summary."""
    fallback: int | None = None
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if isinstance(message, HumanMessage):
            if not is_summary_message(message):
                return i
            if fallback is None:
                fallback = i
    return fallback


def message_text(message: BaseMessage | None) -> str:
    """The text parts of a message, as typed (images and other blocks are left out)."""
    if message is None:
        return ""
    content = message.content
    if isinstance(content, str):
        return content
    parts = [
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in content
        if isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
    ]
    return "\n".join(p for p in parts if p)


def turn_key(message: BaseMessage | None) -> str:
    """Identity of a turn's human message: its id (when it has one) and a digest of its text."""
    if message is None:
        return ""
    digest = hashlib.sha256(message_text(message).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{message.id or ''}:{digest[:32]}"


def final_answer(messages: Sequence[BaseMessage], start: int) -> str:
    """Text of the turn's final answer: the last AI message from `start` on, if it asks no tool."""
    for message in reversed(messages[start:]):
        if isinstance(message, AIMessage):
            return "" if message.tool_calls else message_text(message)
    return ""


# -- injection (pure) -----------------------------------------------------------------------------


def append_system_context(system: SystemMessage | None, text: str) -> SystemMessage:
    """Return `system` with `text` appended as one more text content block.

    Existing blocks, including their `cache_control`, are kept as they are; a string system
    prompt becomes its own first text block. With no system message, one is created.
    """
    block: dict[str, Any] = {"type": "text", "text": text}
    if system is None:
        return SystemMessage(content=[block])
    content = system.content
    blocks: list[str | dict[str, Any]]
    if isinstance(content, str):
        blocks = [{"type": "text", "text": content}] if content else []
    else:
        blocks = list(content)
    return system.model_copy(update={"content": [*blocks, block]})


def prepend_human_context(message: HumanMessage, text: str) -> HumanMessage:
    """Return `message` with `text` and a blank line in front of what the user typed.

    String content is prefixed; for multimodal content the first text block is prefixed (its
    other keys, such as `cache_control`, are kept) or, when the content does not start with
    text, a new text block is put first.
    """
    prefix = text + _BLANK_LINE
    content = message.content
    new: str | list[str | dict[str, Any]]
    if isinstance(content, str):
        new = prefix + content
    elif content and isinstance(content[0], str):
        new = [prefix + content[0], *content[1:]]
    elif content and isinstance(content[0], dict) and content[0].get("type") == "text":
        first = content[0]
        new = [{**first, "text": prefix + str(first.get("text", ""))}, *content[1:]]
    else:
        new = [{"type": "text", "text": prefix}, *content]
    return message.model_copy(update={"content": new})


def inject_recall(
    system: SystemMessage | None,
    messages: Sequence[BaseMessage],
    result: RecallResult | None,
) -> tuple[SystemMessage | None, list[BaseMessage]]:
    """Apply a recall result to a system message and a conversation, without mutating either.

    Returns:
        The system message (appended to when `append_system_context` is set) and the messages
        (the turn's human message prefixed when `prepend_context` is set).
    """
    out = list(messages)
    if result is None:
        return system, out
    if result.append_system_context:
        system = append_system_context(system, result.append_system_context)
    if result.prepend_context:
        index = latest_human_index(out)
        if index is not None:
            human = out[index]
            if isinstance(human, HumanMessage):
                out[index] = prepend_human_context(human, result.prepend_context)
    return system, out


def inject_messages(
    messages: Sequence[BaseMessage], result: RecallResult | None
) -> list[BaseMessage]:
    """`inject_recall` on a full message list whose system message, if any, is one of them."""
    messages = list(messages)
    index = next((i for i, m in enumerate(messages) if isinstance(m, SystemMessage)), None)
    system = cast("SystemMessage", messages[index]) if index is not None else None
    rest = [m for i, m in enumerate(messages) if i != index]
    new_system, new_rest = inject_recall(system, rest, result)
    if new_system is None:
        return new_rest
    position = index if index is not None else 0
    return [*new_rest[:position], new_system, *new_rest[position:]]
