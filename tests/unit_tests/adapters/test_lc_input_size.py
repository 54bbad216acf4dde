"""A turn through `create_agent` stays fast whatever the size and shape of the user's message."""

from __future__ import annotations

import time

import pytest
from langchain.agents import create_agent

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import FakeToolCallingChatModel

from ._helpers import last_human, text_of, user

QUESTION = "Which seats do I like on long flights?"


@pytest.mark.timeout(120)
def test_huge_tag_laden_message_does_not_stall_the_turn(mem: TdaiMemory) -> None:
    # 120 KB of unclosed injected-block tags took over 10 s per turn with backtracking cleanup.
    text = f"{QUESTION} " + "<relevant-memories>x" * 6_000
    model = FakeToolCallingChatModel(script=["Window."])
    agent = create_agent(
        model,
        system_prompt="You are a helpful assistant.",
        middleware=[mem.middleware(user_id="alice")],
    )
    agent.invoke(user("warm-up turn"))
    started = time.perf_counter()
    agent.invoke(user(text))
    elapsed = time.perf_counter() - started
    assert elapsed < 3.0, elapsed
    prefix = text_of(last_human(model.requests[-1]))
    assert "window seats" in prefix  # recall still searched for the question
