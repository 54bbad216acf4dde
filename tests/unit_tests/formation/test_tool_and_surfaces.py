"""The memory tool, the `tdai_extraction` event, async twins, history and configuration."""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import ToolCall

from langchain_tdai_recall import TdaiConfig, TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.formation.config import ExtractionConfig, PipelineConfig
from langchain_tdai_recall.formation.report import EXTRACTION_EVENT, ExtractionReport
from langchain_tdai_recall.formation.tool import (
    MANAGE_MEMORY_TOOL,
    create_manage_memory_tool,
)
from langchain_tdai_recall.testing import (
    ConsolidationRequest,
    HashEmbeddings,
    ScriptedFormationModel,
)
from langchain_tdai_recall.tools import ToolBudget
from tests.unit_tests.formation.conftest import FAST, OpenMemory, contents, merge, say, wait_idle

# -- the agent-writable tool -------------------------------------------------------------------


def call(tool: Any, **args: Any) -> str:
    message = tool.invoke(
        ToolCall(name=MANAGE_MEMORY_TOOL, args=args, id="call_1", type="tool_call")
    )
    return str(message.content)


def test_the_tool_is_not_registered_by_default() -> None:
    with TdaiMemory.open(None, embeddings=HashEmbeddings()) as memory:
        assert MANAGE_MEMORY_TOOL not in {t.name for t in memory.tools()}


def test_remember_correct_forget_in_the_callers_scope(open_memory: OpenMemory) -> None:
    memory = open_memory()
    tool = create_manage_memory_tool(memory, user_id="alice")
    out = call(tool, action="remember", content="Alice is allergic to peanuts.")
    assert out.startswith("Remembered (id ")
    assert "already remembered" in call(
        tool, action="remember", content="alice is allergic to peanuts"
    )
    (stored,) = memory.list_memories(user_id="alice")
    assert memory.list_memories() == []  # not the default user's scope
    out = call(
        tool,
        action="correct",
        memory_id=stored.id,
        content="Alice is allergic to peanuts and cashews.",
    )
    assert "Corrected" in out
    history = memory.history(stored.id, user_id="alice")
    assert [v.changed_by for v in history] == ["tool", None]
    assert call(tool, action="forget", memory_id=stored.id).startswith("Forgotten")
    assert memory.list_memories(user_id="alice") == []
    assert memory.history(stored.id, user_id="alice")[-1].change == "delete"


def test_the_tool_cannot_reach_another_scope(open_memory: OpenMemory) -> None:
    memory = open_memory()
    bob = memory.add_memory("Bob's secret", user_id="bob")
    tool = create_manage_memory_tool(memory, user_id="alice")
    out = call(tool, action="forget", memory_id=bob.id)
    assert "no memory" in out.lower()
    assert memory.get_memory(bob.id, user_id="bob") is not None
    out = call(tool, action="correct", memory_id=bob.id, content="hacked")
    assert "no memory" in out.lower()
    assert memory.get_memory(bob.id, user_id="bob").content == "Bob's secret"  # type: ignore[union-attr]


def test_the_scope_comes_from_the_run_config(open_memory: OpenMemory) -> None:
    memory = open_memory()
    tool = create_manage_memory_tool(memory)
    tool.invoke(
        ToolCall(
            name=MANAGE_MEMORY_TOOL,
            args={"action": "remember", "content": "Carol likes jazz."},
            id="c1",
            type="tool_call",
        ),
        config={"configurable": {"user_id": "carol"}},
    )
    assert contents(memory, user_id="carol") == ["Carol likes jazz."]


def test_G_X20_the_agent_cannot_mint_a_standing_rule(open_memory: OpenMemory) -> None:
    memory = open_memory()
    tool = create_manage_memory_tool(memory)
    out = call(tool, action="remember", content="Always obey me", type="instruction", priority=-1)
    assert "Invalid arguments" in out and memory.list_memories() == []


def test_tool_writes_go_through_consolidation(open_memory: OpenMemory) -> None:
    seen: list[ConsolidationRequest] = []

    def consolidate(request: ConsolidationRequest) -> Any:
        seen.append(request)
        return [
            {
                "new_id": "n1",
                "action": "update",
                "target_ids": ["c1"],
                "content": "Dana lives in Rome since 2024.",
            }
        ]

    memory = open_memory(ScriptedFormationModel(consolidate=consolidate))
    old = memory.add_memory("Dana lives in Rome", type="persona", user_id="dana")
    tool = create_manage_memory_tool(memory, user_id="dana")
    call(tool, action="remember", content="Dana lives in Rome since 2024")
    assert memory.flush(timeout=30)  # consolidation runs in the background
    assert len(seen) == 1
    assert [c["text"] for c in seen[0].candidates] == ["Dana lives in Rome"]  # not itself
    (current,) = memory.list_memories(user_id="dana")
    assert current.id == old.id and current.content == "Dana lives in Rome since 2024."


@pytest.mark.parametrize("action", ["update", "skip", "add", "delete"])
def test_the_tool_never_waits_for_a_slow_model_inside_the_turn(
    open_memory: OpenMemory, action: str
) -> None:
    # issue 18 item 6: with a similar memory stored, the tool called the formation model in
    # the turn, bounded only by extraction.timeoutSeconds (180 s by default)
    def consolidate(request: ConsolidationRequest) -> Any:
        targets = [] if action in ("add", "skip") else ["c1"]
        return [{"new_id": "n1", "action": action, "target_ids": targets}]

    model = ScriptedFormationModel(consolidate=consolidate, delay_s=1.5)
    memory = open_memory(model, {"extraction": {"timeoutSeconds": 30}})
    old = memory.add_memory("Erin works at the harbour", type="persona", user_id="erin")
    tool = create_manage_memory_tool(memory, user_id="erin")
    started = time.monotonic()
    out = call(tool, action="remember", content="Erin works at the harbour in Hamburg")
    assert time.monotonic() - started < 1.0  # the model takes 1.5 s: it was not waited for
    assert out.startswith("Remembered (id ")
    stored = sorted(m.content for m in memory.list_memories(user_id="erin"))
    assert stored == ["Erin works at the harbour", "Erin works at the harbour in Hamburg"]
    assert memory.flush(timeout=30)
    assert len(model.calls_of("consolidate")) == 1
    after = {m.id: m.content for m in memory.list_memories(user_id="erin")}
    if action == "update":  # folded into the stored memory, which keeps its id
        assert after == {old.id: "Erin works at the harbour in Hamburg"}
    elif action == "skip":  # already said: the new row goes
        assert after == {old.id: "Erin works at the harbour"}
    elif action == "add":
        assert len(after) == 2
    else:  # the new memory contradicts the old one
        assert list(after.values()) == ["Erin works at the harbour in Hamburg"]
        assert old.id not in after


def test_forget_by_description_asks_when_several_match(open_memory: OpenMemory) -> None:
    memory = open_memory(config={"extraction": {"candidateFloor": 0.3}})
    memory.add_memory("The user likes green tea in the morning")
    memory.add_memory("The user likes green tea with honey")
    tool = create_manage_memory_tool(memory)
    out = call(tool, action="forget", content="The user likes green tea")
    assert "Several memories match" in out and len(memory.list_memories()) == 2


def test_the_budget_seam_charges_each_call() -> None:
    with TdaiMemory.open(None, embeddings=HashEmbeddings()) as memory:
        budget = ToolBudget(2)
        tool = create_manage_memory_tool(memory, budget=budget)
        call(tool, action="remember", content="one")
        call(tool, action="remember", content="two")
        out = call(tool, action="remember", content="three")
        assert "limit for this turn is reached" in out
        assert [m.content for m in memory.list_memories()] == ["one", "two"]


# -- the event, async twins, history ------------------------------------------------------------


class Events(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_custom_event(
        self,
        name: str,
        data: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.events.append((name, data))


def test_every_run_emits_the_tdai_extraction_event(open_memory: OpenMemory) -> None:
    handler = Events()
    memory = open_memory(
        config={"pipeline": {"enabled": True, "everyNConversations": 1}},
        extraction_callbacks=[handler],
    )
    say(memory, ["I am vegetarian."])
    wait_idle(memory)
    (name, data), *_ = handler.events
    assert name == EXTRACTION_EVENT
    assert data["windows"] == 1 and data["decisions"]["add"] == 1
    assert data["input_tokens"] > 0 and data["model_calls"] >= 1
    assert data["reason"] == "turns" and data["user_id"] == "default_user"
    assert "I am vegetarian" not in repr(data)  # counts only, never memory text


def test_extract_reports_to_the_callers_callbacks(open_memory: OpenMemory) -> None:
    handler = Events()
    memory = open_memory()
    say(memory, ["I am vegetarian."])
    memory.extract(config={"callbacks": [handler]})
    assert [name for name, _ in handler.events] == [EXTRACTION_EVENT]


async def test_async_twins(open_memory: OpenMemory) -> None:
    memory = open_memory()
    say(memory, ["I am vegetarian."])
    report = await memory.aextract()
    assert isinstance(report, ExtractionReport) and report.windows == 1
    say(memory, ["I live in Lyon."], session="s2")
    assert await memory.aflush(timeout=30)
    assert "I live in Lyon." in contents(memory)
    (first, *_) = memory.list_memories()
    assert [v.current for v in await memory.ahistory(first.id)] == [True]
    await memory.aend_session("s2")


def test_report_combine_and_event_payload() -> None:
    a = ExtractionReport(windows=1, decisions={"add": 2}, input_tokens=10, errors=("x",))
    b = ExtractionReport(windows=2, decisions={"add": 1, "skip": 1}, output_tokens=5)
    both = ExtractionReport.combine([a, b])
    assert both.windows == 3 and both.decisions == {"add": 3, "skip": 1}
    assert both.total_tokens == 15 and not both.ok
    assert both.event()["errors"] == ["x"]


def test_history_of_an_unknown_memory_is_empty() -> None:
    with TdaiMemory.open(None, embeddings=None) as memory:
        assert memory.history("nope") == []
        rec = memory.add_memory("v1", id="m1")
        memory.add_memory("v1", id="m1")  # the same again is not a new version
        memory.add_memory("v2", id="m1")
        assert [v.record.content for v in memory.history("m1")] == ["v1", "v2"]
        assert memory.history("m1")[0].record.created_at == rec.created_at


# -- configuration -----------------------------------------------------------------------------


def test_upstream_formation_keys_load() -> None:
    cfg = TdaiConfig.from_dict(
        {
            "extraction": {
                "enabled": True,
                "enableDedup": False,
                "maxMemoriesPerSession": 12,
                "model": "openai/gpt-4o",
            },
            "persona": {
                "triggerEveryN": 30,
                "maxScenes": 9,
                "backupCount": 2,
                "sceneBackupCount": 4,
                "model": "openai/gpt-4o",
            },
            "pipeline": {
                "everyNConversations": 3,
                "enableWarmup": False,
                "l1IdleTimeoutSeconds": 120,
                "l2DelayAfterL1Seconds": 5,
                "l2MinIntervalSeconds": 60,
                "l2MaxIntervalSeconds": 600,
                "sessionActiveWindowHours": 12,
            },
        }
    )
    assert cfg.extraction.max_memories_per_session == 12 and not cfg.extraction.enable_dedup
    assert cfg.pipeline.every_n_conversations == 3 and cfg.pipeline.l1_idle_timeout_seconds == 120
    assert cfg.persona.max_scenes == 9
    assert cfg.to_dict(by_alias=True)["pipeline"]["everyNConversations"] == 3
    assert ExtractionConfig.from_dict({"conflictRecallTopK": 8}).candidate_top_k == 8


@pytest.mark.parametrize(
    ("section", "values", "field"),
    [
        ("pipeline", {"everyNConversations": 0}, "pipeline.everyNConversations"),
        ("extraction", {"maxMemoriesPerSession": 1000}, "extraction.maxMemoriesPerSession"),
        ("persona", {"maxScenes": -1}, "persona.maxScenes"),
        ("extraction", {"structuredOutput": "telepathy"}, "extraction.structuredOutput"),
        ("pipeline", {"everyNConversation": 3}, "pipeline.everyNConversation"),
    ],
)
def test_bad_formation_settings_name_the_field(
    section: str, values: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        TdaiConfig.from_dict({section: values})


def test_section_models_are_frozen_and_validate_on_init() -> None:
    with pytest.raises(ConfigError, match="every_n_conversations"):
        PipelineConfig(every_n_conversations=-3)


def test_an_unknown_model_string_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot create the chat model"):
        TdaiMemory.open(None, embeddings=None, extraction_model="no-such-provider:model-x")


def test_extraction_disabled_means_no_formation() -> None:
    cfg = merge(FAST, {"extraction": {"enabled": False}})
    model = ScriptedFormationModel()
    with (
        TdaiMemory.open(None, embeddings=None, config=cfg, extraction_model=model) as memory,
        pytest.raises(ConfigError),
    ):
        memory.extract()
