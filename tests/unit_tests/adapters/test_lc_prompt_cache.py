"""Prompt-cache stability on real provider payloads, and ordering next to other middleware."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_anthropic import ChatAnthropic
from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware
from langchain_core.messages import SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import FakeToolCallingChatModel

from ._helpers import last_human, system_of, user

TOPICS = (
    ("colour", "teal"),
    ("city", "Lisbon"),
    ("dessert", "tiramisu"),
    ("composer", "Satie"),
    ("sport", "climbing"),
    ("airline", "Finnair"),
    ("tea", "sencha"),
    ("novel", "Dune"),
    ("cheese", "comte"),
    ("editor", "vim"),
)


def _seed_topics(memory: TdaiMemory) -> None:
    for topic, value in TOPICS:
        memory.add_memory(f"Alice's favourite {topic} is {value}", type="persona", user_id="alice")


def _openai_reply(content: str | None, tool_calls: list[dict[str, Any]] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }


def _openai_transport(bodies: list[dict[str, Any]]) -> httpx.MockTransport:
    """Every third turn the model searches memory first; tool results get a final answer."""
    counter = {"n": 0}

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        last = body["messages"][-1]
        if last["role"] == "tool":
            return httpx.Response(200, json=_openai_reply("Here is what I found.", None))
        turn = sum(1 for m in body["messages"] if m["role"] == "user")
        if turn % 3 == 0:
            counter["n"] += 1
            call = {
                "id": f"call_{counter['n']}",
                "type": "function",
                "function": {
                    "name": "tdai_memory_search",
                    "arguments": json.dumps({"query": "favourite", "limit": 3}),
                },
            }
            return httpx.Response(200, json=_openai_reply(None, [call]))
        return httpx.Response(200, json=_openai_reply(f"Answer {turn}.", None))

    return httpx.MockTransport(handle)


def test_openai_system_message_byte_identical_over_20_turns(mem: TdaiMemory) -> None:
    _seed_topics(mem)
    bodies: list[dict[str, Any]] = []
    model = ChatOpenAI(
        model="gpt-4o-mini",
        api_key="sk-test",  # type: ignore[arg-type]
        base_url="https://api.openai.test/v1",
        use_responses_api=False,
        max_retries=0,
        http_client=httpx.Client(transport=_openai_transport(bodies)),
    )
    agent = create_agent(
        model,
        system_prompt="You are Alice's assistant.",
        middleware=[mem.middleware()],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "twenty"}}
    for i in range(20):
        topic = TOPICS[i % len(TOPICS)][0]
        agent.invoke(user(f"What is my favourite {topic}?"), config, context={"user_id": "alice"})

    assert len(bodies) > 20  # some turns call a tool, so a turn can have several model calls
    systems = {json.dumps(b["messages"][0], ensure_ascii=False) for b in bodies}
    assert len(systems) == 1, "the system message changed between model calls"
    system = bodies[0]["messages"][0]
    assert system["role"] == "system"
    assert system["content"][0] == {"type": "text", "text": "You are Alice's assistant."}
    assert "<user-persona>" in system["content"][1]["text"]
    assert len({json.dumps(b["tools"]) for b in bodies}) == 1

    # Recalls differ from turn to turn, and only the latest user message carries them.
    injected = set()
    for body in bodies:
        users = [m for m in body["messages"] if m["role"] == "user"]
        assert users[-1]["content"].startswith("<relevant-memories>")
        assert not any("<relevant-memories>" in str(m["content"]) for m in users[:-1])
        injected.add(users[-1]["content"].split("</relevant-memories>", 1)[0])
    assert len(injected) >= len(TOPICS) // 2
    state = agent.get_state(config).values
    assert not any("relevant-memories" in str(m.content) for m in state["messages"])


def _anthropic_reply() -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }


@pytest.fixture
def anthropic_payloads(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Request bodies ChatAnthropic sends, through a mock transport of the SDK's HTTP client."""
    httpx2 = pytest.importorskip("httpx2")  # the anthropic SDK's own httpx fork
    payloads: list[dict[str, Any]] = []

    def handle(request: Any) -> Any:
        payloads.append(json.loads(request.content))
        return httpx2.Response(200, json=_anthropic_reply())

    def client(**kwargs: Any) -> Any:
        return httpx2.Client(base_url=kwargs["base_url"], transport=httpx2.MockTransport(handle))

    monkeypatch.setattr("langchain_anthropic.chat_models._get_default_httpx_client", client)
    return payloads


def test_anthropic_payload_keeps_cache_control(
    mem: TdaiMemory, anthropic_payloads: list[dict[str, Any]]
) -> None:
    model = ChatAnthropic(model="claude-sonnet-4-5", api_key="sk-test", max_retries=0)  # type: ignore[call-arg,arg-type]
    base = SystemMessage(
        content=[{"type": "text", "text": "Stable rules.", "cache_control": {"type": "ephemeral"}}]
    )
    agent = create_agent(
        model,
        system_prompt=base,
        middleware=[mem.middleware(), AnthropicPromptCachingMiddleware()],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "claude"}}
    agent.invoke(user("Which seats do I prefer?"), config, context={"user_id": "alice"})
    agent.invoke(user("Am I allergic to peanuts?"), config, context={"user_id": "alice"})

    assert len(anthropic_payloads) == 2
    first, second = anthropic_payloads
    system = first["system"]
    assert system[0] == {
        "type": "text",
        "text": "Stable rules.",
        "cache_control": {"type": "ephemeral"},
    }
    assert system[-1]["text"].startswith("<user-persona>")
    assert "cache_control" in system[-1]  # the breakpoint covers the appended block too
    assert second["system"] == system
    assert first["messages"][0]["role"] == "user"
    assert "<relevant-memories>" in json.dumps(first["messages"][0]["content"])


def test_with_summarization_middleware(mem: TdaiMemory) -> None:
    summarizer = FakeToolCallingChatModel(default_reply="Summary of earlier turns.")
    model = FakeToolCallingChatModel(default_reply="ok")
    agent = create_agent(
        model,
        system_prompt="Base.",
        middleware=[
            mem.middleware(user_id="alice"),
            SummarizationMiddleware(
                model=summarizer, trigger=("messages", 6), keep=("messages", 2)
            ),
        ],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "sum"}}
    questions = ["Which seats do I prefer?", "Any peanuts?", "Tokyo?", "Long flights?", "Seats?"]
    for text in questions:
        agent.invoke(user(text), config)
    assert summarizer.requests, "summarization never ran"
    assert len({json.dumps(system_of(r).content) for r in model.requests}) == 1
    for request, text in zip(model.requests, questions, strict=True):
        human = str(last_human(request).content)
        assert human.startswith("<relevant-memories>")
        assert human.endswith("\n\n" + text)
    state = agent.get_state(config).values
    dumped = json.dumps([m.content for m in state["messages"]], default=str)
    assert "relevant-memories" not in dumped
    # The summarizer never saw an injection either.
    assert not any("relevant-memories" in str(m.content) for r in summarizer.requests for m in r)
