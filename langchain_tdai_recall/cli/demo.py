"""`tdai-recall demo`: an offline tour, with its sample data.

Two sample users (English and Chinese), a few recalls each, and one scripted `create_agent` turn
with the memory middleware.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import TYPE_CHECKING, Any, Final

from langchain_tdai_recall.cli._base import DEFAULT_STORE, PROG
from langchain_tdai_recall.cli.opening import open_for_writing, store_path
from langchain_tdai_recall.cli.render import print_json, recall_json, render_recall, rule

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence

    from langchain_tdai_recall.memory import TdaiMemory
    from langchain_tdai_recall.types import Scope

__all__ = ["cmd_demo"]


@dataclasses.dataclass(frozen=True, slots=True)
class _DemoConversation:
    """One sample user of the demo: memories, persona, scenes and the turns recalled for."""

    title: str
    user_suffix: str
    """Appended to the demo's user id (the English sample uses the user id as given)."""
    memories: tuple[dict[str, Any], ...]
    persona: str
    scenes: tuple[tuple[str, str, str], ...]
    turns: tuple[str, ...]


_DEMO_ENGLISH: Final = _DemoConversation(
    title="An English conversation",
    user_suffix="",
    memories=(
        {
            "content": "Works as a backend engineer in Berlin, mostly Python and Go.",
            "type": "persona",
            "priority": 80,
        },
        {"content": "Is vegetarian: no meat and no fish.", "type": "persona", "priority": 90},
        {
            "content": "Plans a trip to Kyoto in late May to see temples and rock gardens.",
            "type": "episodic",
            "scene_name": "Kyoto trip",
            "activity_start_time": "2026-05-20",
            "activity_end_time": "2026-05-27",
        },
        {
            "content": "For technical questions: give the conclusion first, then the code.",
            "type": "instruction",
            "priority": 85,
        },
        {
            "content": "Moved the order service from Flask to FastAPI last week.",
            "type": "episodic",
            "scene_name": "work",
            "timestamp": "2026-04-14",
        },
        {"content": "Daughter Mia is allergic to peanuts.", "type": "persona", "priority": 95},
        {
            "content": "Ran the Berlin half marathon in 1:52.",
            "type": "episodic",
            "activity_start_time": "2026-04-05",
        },
        {"content": "Always give distances and weights in metric units.", "type": "instruction"},
    ),
    persona="""# User profile

- Sam, a backend engineer in Berlin (Python, Go).
- Vegetarian; daughter Mia has a peanut allergy.
- Enjoys running and travelling.""",
    scenes=(
        (
            "Kyoto trip",
            "Late May in Kyoto: temples, gardens, vegetarian food",
            "## Kyoto trip\n\n- 2026-05-20 to 05-27\n- Kiyomizu-dera, Ryoan-ji\n"
            "- Needs vegetarian restaurants",
        ),
        (
            "running",
            "Training log and races",
            "## Running\n\n- Berlin half marathon 1:52 (April)\n- Next goal: sub-1:50",
        ),
    ),
    turns=(
        "Where should we have dinner in Kyoto in May?",
        "Can Mia eat peanut snacks?",
        "What should I pack for my Kyoto trip?",
        "What should I watch out for after moving the order service to FastAPI?",
    ),
)


_DEMO_CHINESE: Final = _DemoConversation(
    title="A Chinese conversation (中文对话)",
    user_suffix="-zh",
    memories=(
        {
            "content": "用户叫李雷，在上海做后端工程师，主要写 Python 和 Go。",
            "type": "persona",
            "priority": 80,
        },
        {"content": "用户吃素，不吃肉也不吃海鲜。", "type": "persona", "priority": 90},
        {
            "content": "用户计划五月下旬去京都旅行，想看寺庙和枯山水庭园。",
            "type": "episodic",
            "scene_name": "京都旅行",
            "activity_start_time": "2026-05-20",
            "activity_end_time": "2026-05-27",
        },
        {
            "content": "回答技术问题时先给结论，再给代码示例。",
            "type": "instruction",
            "priority": 85,
        },
        {
            "content": "用户上周把订单服务从 Flask 迁移到了 FastAPI。",
            "type": "episodic",
            "scene_name": "工作项目",
            "timestamp": "2026-04-14",
        },
        {"content": "用户的女儿 Mia 对花生过敏。", "type": "persona", "priority": 95},
    ),
    persona="""# 用户画像

- 李雷，上海的后端工程师（Python、Go）。
- 素食者；女儿 Mia 对花生过敏。
- 喜欢跑步和旅行。""",
    scenes=(
        (
            "京都旅行",
            "五月下旬京都之行：寺庙、庭园、素食",
            "## 京都旅行\n\n- 2026-05-20 至 05-27\n- 想去清水寺、龙安寺\n- 需要素食餐厅",
        ),
    ),
    turns=(
        "我五月去京都，晚饭去哪吃比较好？",
        "Mia 能吃花生零食吗？",
        "订单服务迁移到 FastAPI 之后要注意什么？",
        "好",
    ),
)


_DEMO_CONVERSATIONS: Final = (_DEMO_ENGLISH, _DEMO_CHINESE)
"""In the order the demo shows them: English first."""


_DEMO_AGENT_TURN: Final = "Plan a dinner for Mia and me."


_DEMO_SEARCH: Final = "Mia allergy"


_DEMO_ANSWER: Final = (
    "A vegetarian bowl for you and a peanut-free pasta for Mia: both fit what I remember."
)


def _demo_scope(memory: TdaiMemory, scope: Scope, sample: _DemoConversation) -> Scope:
    if not sample.user_suffix:
        return scope
    return memory.scope(scope.user_id + sample.user_suffix, scope.agent_id)


def _demo_fill(memory: TdaiMemory, scope: Scope, sample: _DemoConversation) -> None:
    memory.add_memories(
        list(sample.memories), show_progress=False, user_id=scope.user_id, agent_id=scope.agent_id
    )
    memory.set_persona(sample.persona, user_id=scope.user_id, agent_id=scope.agent_id)
    for name, summary, body in sample.scenes:
        memory.upsert_scene(
            name, summary=summary, body=body, user_id=scope.user_id, agent_id=scope.agent_id
        )


def _demo_agent_turn(memory: TdaiMemory, scope: Scope) -> dict[str, Any]:
    """One scripted `create_agent` turn; returns what the model saw on each call."""
    from langchain.agents import create_agent  # noqa: PLC0415
    from langchain_core.messages import HumanMessage  # noqa: PLC0415

    from langchain_tdai_recall.testing import FakeToolCallingChatModel  # noqa: PLC0415

    model = FakeToolCallingChatModel(
        script=[[{"name": "tdai_memory_search", "args": {"query": _DEMO_SEARCH}}], _DEMO_ANSWER]
    )
    agent = create_agent(
        model, system_prompt="You are a helpful assistant.", middleware=[memory.middleware()]
    )
    state = agent.invoke(
        {"messages": [HumanMessage(_DEMO_AGENT_TURN)]},
        config={"configurable": {"user_id": scope.user_id, "agent_id": scope.agent_id}},
    )
    calls = [
        [{"role": m.type, "content": _message_text(m)} for m in request]
        for request in model.requests
    ]
    tool_results = [_message_text(m) for m in state["messages"] if getattr(m, "type", "") == "tool"]
    return {
        "user": _DEMO_AGENT_TURN,
        "model_calls": calls,
        "tool_results": tool_results,
        "answer": _message_text(state["messages"][-1]),
    }


def _message_text(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        text = content
    else:
        text = "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content)
    for call in getattr(message, "tool_calls", None) or []:
        text += f"\n→ calls {call['name']}({json.dumps(call['args'], ensure_ascii=False)})"
    return text.strip()


def _indent(lines: Sequence[str], prefix: str = "   ") -> list[str]:
    """Indent every line, including the lines inside multi-line entries."""
    return [prefix + part for line in lines for part in line.split("\n")]


def _render_agent(agent: Mapping[str, Any]) -> list[str]:
    lines = [f"▶ user: {agent['user']}"]
    shown = 0
    for i, call in enumerate(agent["model_calls"], 1):
        lines.append(rule(f"model call {i}: what the model saw"))
        if shown:
            lines.append(f"(the {shown} messages of call {i - 1}, then:)")
        for msg in call[shown:]:
            lines += [f"[{msg['role']}]", msg["content"]]
        shown = len(call)
    lines += [rule("final answer"), agent["answer"]]
    return lines


def cmd_demo(args: argparse.Namespace) -> int:
    """Offline tour. Uses an in-memory store unless `--store` is given explicitly."""
    started = time.perf_counter()
    path = None if args.store is None else store_path(args)
    out: dict[str, Any] = {"turns": [], "agent": None}
    with open_for_writing(args, path) as memory:
        scope = memory.scope(args.user, args.agent)  # validated; the default user when omitted
        scopes = [_demo_scope(memory, scope, sample) for sample in _DEMO_CONVERSATIONS]
        for sample, sample_scope in zip(_DEMO_CONVERSATIONS, scopes, strict=True):
            _demo_fill(memory, sample_scope, sample)
        # Vectors are computed in the background: wait for them, so that the scores below are
        # the ones users get (right after a write, recall has the keyword leg only).
        memory.flush(show_progress=False)
        embedder = memory.stats().embedder
        text: list[str] = [
            f"{PROG} demo: {'in-memory store' if path is None else path}, "
            f"embedder {embedder or 'none (keyword-only)'}",
            "(tdai: TencentDB Agent Memory, whose layered memory and recall this package brings "
            "to LangChain)",
        ]
        for number, (sample, sample_scope) in enumerate(
            zip(_DEMO_CONVERSATIONS, scopes, strict=True), 1
        ):
            text += ["", f"{number}. {sample.title}: user {sample_scope.user_id!r}"]
            text += _demo_conversation(memory, sample, sample_scope, out["turns"])
        if not args.no_agent:
            agent = _demo_agent_turn(memory, scope)
            out["agent"] = agent
            text += [
                "",
                f"{len(_DEMO_CONVERSATIONS) + 1}. One agent turn: "
                "create_agent(model, middleware=[memory.middleware()]), with a scripted fake model",
                *_render_agent(agent),
            ]
    elapsed = time.perf_counter() - started
    if args.json:
        out["seconds"] = round(elapsed, 3)
        print_json(out)
        return 0
    text += [
        "",
        f"Done in {elapsed:.1f} s. Next: '{PROG} --help', '{PROG} add \"...\"' then "
        f"'{PROG} recall \"...\"' (store: ./{DEFAULT_STORE}), and the notebooks in notebooks/.",
    ]
    print("\n".join(text))
    return 0


def _demo_conversation(
    memory: TdaiMemory, sample: _DemoConversation, scope: Scope, turns: list[dict[str, Any]]
) -> list[str]:
    """The demo's text for one sample user; appends each turn's JSON to `turns`."""
    stats = memory.stats(user_id=scope.user_id, agent_id=scope.agent_id)
    text = [
        f"   The sample memory: {stats.memories} memories (L1), "
        f"{'a persona (L3)' if stats.personas else 'no persona'}, {stats.scenes} "
        f"scene{'' if stats.scenes == 1 else 's'} (L2)",
    ]
    text += [f"   - [{m['type']}] {m['content']}" for m in sample.memories]
    text += ["", "   Recall for a few user turns: what would be injected, and the scores"]
    systems: list[str | None] = []
    for turn in sample.turns:
        result = memory.recall(turn, user_id=scope.user_id, agent_id=scope.agent_id)
        turns.append({"user": turn, "user_id": scope.user_id, "recall": recall_json(result)})
        systems.append(result.append_system_context if result else None)
        text += ["", f"▶ user: {turn}"]
        text += _indent(render_recall(result, show_system=False))
    same = len(set(systems)) == 1
    text += [
        "",
        rule(
            "append_system_context: "
            + ("byte-identical in every turn above" if same else "differs between turns")
        ),
        systems[0] or "(none)",
    ]
    return text
