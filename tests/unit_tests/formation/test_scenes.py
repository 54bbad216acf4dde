"""Scenes (L2) and persona (L3): structured edits whose limits the code enforces."""

from __future__ import annotations

from typing import Any

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import PersonaRequest, SceneRequest, ScriptedFormationModel
from tests.unit_tests.formation.conftest import OpenMemory, say


def scenes_model(*answers: Any, persona: Any = None) -> ScriptedFormationModel:
    """Scene answers in order (the last one repeats)."""
    queue = list(answers)

    def scenes(request: SceneRequest) -> Any:
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        return answer(request) if callable(answer) else answer

    return ScriptedFormationModel(scenes=scenes, persona=persona)


def form(memory: TdaiMemory, texts: list[str], session: str = "s1") -> Any:
    say(memory, texts, session=session)
    return memory.extract()


def create(name: str, body: str = "Body.", summary: str = "Summary.") -> dict[str, Any]:
    return {"op": "create", "name": name, "summary": summary, "body": body}


def test_scenes_are_created_with_code_owned_heat_and_dates(open_memory: OpenMemory) -> None:
    memory = open_memory(scenes_model([create("Kyoto trip", "## Kyoto\n- May 20-27")]))
    report = form(memory, ["I fly to Kyoto on May 20."])
    assert report.scenes["created"] == 1
    (info,) = memory.list_scenes()
    assert info.name == "Kyoto-trip" and info.heat == 1 and info.created == info.updated
    block = memory.read_scene("Kyoto-trip")
    assert block is not None and block.body == "## Kyoto\n- May 20-27"


def test_G_X15_the_scene_limit_is_enforced_in_code(open_memory: OpenMemory) -> None:
    many = [create(f"scene {i}") for i in range(6)]
    memory = open_memory(
        scenes_model(many), {"persona": {"maxScenes": 3, "maxNewScenesPerRun": 10}}
    )
    report = form(memory, ["a"])
    assert report.scenes["created"] == 3 and report.scenes["refused"] == 3
    form(memory, ["b"], session="s2")
    assert len(memory.list_scenes()) == 3  # never more than max_scenes


def test_creates_per_answer_are_limited(open_memory: OpenMemory) -> None:
    memory = open_memory(scenes_model([create(f"s{i}") for i in range(4)]))
    report = form(memory, ["a"])
    assert report.scenes == {"created": 2, "updated": 0, "merged": 0, "deleted": 0, "refused": 2}


def test_updates_need_a_scene_whose_text_the_model_saw(open_memory: OpenMemory) -> None:
    first = [create("Running", "Ran 5 km.")]

    def second(request: SceneRequest) -> Any:
        assert [s["name"] for s in request.scenes] == ["Running"]
        assert request.scenes[0]["text"] == "Ran 5 km."
        return [
            {"op": "update", "name": "Running", "summary": "Runs weekly.", "body": "Ran 10 km."},
            {"op": "update", "name": "Chess", "body": "New chess scene?"},
            {"op": "delete", "name": "../../etc/passwd"},
        ]

    memory = open_memory(scenes_model(first, second))
    form(memory, ["I ran 5 km."])
    report = form(memory, ["I ran 10 km."], session="s2")
    assert report.scenes["updated"] == 1 and report.scenes["refused"] == 2
    (info,) = memory.list_scenes()
    assert info.heat == 2 and info.summary == "Runs weekly."


def test_merge_sums_the_heat_and_removes_the_sources(open_memory: OpenMemory) -> None:
    first = [create("Running", "Runs."), create("Marathon", "Half marathon.")]
    merge = [
        {
            "op": "merge",
            "name": "Running",
            "sources": ["Marathon"],
            "summary": "Running and races.",
            "body": "Runs; did a half marathon.",
        }
    ]
    memory = open_memory(scenes_model(first, merge))
    form(memory, ["I run."])
    report = form(memory, ["I did a half marathon."], session="s2")
    assert report.scenes["merged"] == 1
    (info,) = memory.list_scenes()
    assert info.name == "Running" and info.heat == 3  # 1 + 1 + 1


def test_sizes_are_cut_to_the_configured_limits(open_memory: OpenMemory) -> None:
    cfg = {"persona": {"sceneMaxChars": 300, "summaryMaxChars": 40}}
    memory = open_memory(scenes_model([create("Long", "x" * 5000, "s" * 500)]), cfg)
    form(memory, ["a"])
    block = memory.read_scene("Long")
    assert block is not None and len(block.body) == 300 and len(block.info.summary) == 40


def test_G_X15_a_failed_scene_update_changes_nothing_and_is_retried(
    open_memory: OpenMemory,
) -> None:
    memory = open_memory(scenes_model([create("Running", "Runs.")], "not json", [create("Chess")]))
    form(memory, ["I run."])
    before = memory.list_scenes()
    failed = form(memory, ["I play chess."], session="s2")
    assert failed.errors and memory.list_scenes() == before
    assert failed.persona_updated is False  # a failed scene update does not trigger L3
    retried = memory.extract()  # the queued memories are still waiting for the scenes
    assert retried.scenes["created"] == 1
    assert {s.name for s in memory.list_scenes()} == {"Running", "Chess"}


def test_a_scene_write_failure_restores_every_touched_scene(
    open_memory: OpenMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = [create("Running", "Runs."), create("Chess", "Plays.")]
    second = [
        {"op": "update", "name": "Running", "body": "Runs more."},
        {"op": "update", "name": "Chess", "body": "Plays more."},
    ]
    memory = open_memory(scenes_model(first, second))
    form(memory, ["I run and play chess."])
    before = {s.name: memory.read_scene(s.name) for s in memory.list_scenes()}
    docs = memory._store.documents
    original = docs._write
    calls = {"n": 0}

    def flaky(scope: Any, block: Any, title: str) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            msg = "disk full"
            raise OSError(msg)
        original(scope, block, title)

    monkeypatch.setattr(docs, "_write", flaky)
    report = form(memory, ["More running and chess."], session="s2")
    assert report.errors and "disk full" in report.errors[0]
    monkeypatch.setattr(docs, "_write", original)
    assert {s.name: memory.read_scene(s.name) for s in memory.list_scenes()} == before


def test_G_X16_the_model_gets_no_tools_and_no_files(open_memory: OpenMemory) -> None:
    model = scenes_model([create("Running")])
    memory = open_memory(model)
    form(memory, ["I run."])
    schemas = {
        "extract": "ExtractionAnswer",
        "scenes": "SceneAnswer",
        "persona": "PersonaAnswer",
        "consolidate": "ConsolidationAnswer",
    }
    assert {c.kind for c in model.calls} >= {"extract", "scenes", "persona"}
    for call in model.calls:  # only its answer schema: no read/write/edit tools, no paths
        assert call.tools == (schemas[call.kind],)
        assert memory.path is None or str(memory.path) not in call.system + call.user


def test_G_X14_scene_input_keeps_type_priority_situation_and_time(open_memory: OpenMemory) -> None:
    seen: list[SceneRequest] = []

    def scenes(request: SceneRequest) -> Any:
        seen.append(request)
        return []

    def extract(window: Any) -> Any:
        return {
            "situation": "trip planning",
            "memories": [
                {
                    "content": "The user flies to Kyoto on May 20.",
                    "type": "episodic",
                    "priority": 75,
                    "activity_start": "2025-05-20",
                }
            ],
        }

    memory = open_memory(ScriptedFormationModel(extract=extract, scenes=scenes))
    form(memory, ["Kyoto on May 20!"])
    (item,) = seen[0].memories
    assert item["type"] == "episodic" and item["priority"] == 75
    assert item["situation"] == "trip planning" and item["time"] == "2025-05-20"


def test_a_persona_is_written_once_scenes_exist(open_memory: OpenMemory) -> None:
    memory = open_memory(scenes_model([create("Running", "Runs 10 km.")]))
    report = form(memory, ["I run 10 km every Sunday."])
    assert report.persona_updated
    persona = memory.get_persona()
    assert persona is not None and "I run 10 km every Sunday." in persona


def test_G_X17_a_failed_persona_answer_leaves_the_persona(open_memory: OpenMemory) -> None:
    answers = iter(["garbage", {"action": "rewrite", "persona": ""}, {"action": "keep"}])

    def persona(request: PersonaRequest) -> Any:
        return next(answers)

    cfg = {"persona": {"triggerEveryN": 1}}
    memory = open_memory(scenes_model([create("Running")], persona=persona), cfg)
    memory.set_persona("# Profile\n- Runner")
    first = form(memory, ["I run."])
    assert first.errors and memory.get_persona() == "# Profile\n- Runner"
    second = form(memory, ["I swim."], session="s2")
    assert second.errors and memory.get_persona() == "# Profile\n- Runner"  # no-write = failure
    third = form(memory, ["I cycle."], session="s3")
    assert third.ok and not third.persona_updated and memory.get_persona() == "# Profile\n- Runner"


def test_keeping_a_persona_that_does_not_exist_is_a_failure(open_memory: OpenMemory) -> None:
    memory = open_memory(scenes_model([create("Running")], persona=lambda r: {"action": "keep"}))
    report = form(memory, ["I run."])
    assert report.errors and memory.get_persona() is None


def test_the_persona_is_cut_to_its_limit(open_memory: OpenMemory) -> None:
    long = {"action": "rewrite", "persona": "# P\n" + "y" * 10_000}
    memory = open_memory(
        scenes_model([create("Running")], persona=lambda r: long),
        {"persona": {"personaMaxChars": 500}},
    )
    form(memory, ["I run."])
    persona = memory.get_persona()
    assert persona is not None and len(persona) == 500


def test_system_context_is_byte_stable_when_edits_change_nothing(open_memory: OpenMemory) -> None:
    same = {"op": "update", "name": "Running", "summary": "Summary.", "body": "Body."}
    persona = {"action": "rewrite", "persona": "# Profile\n- Runner"}  # the same text again
    # the second window adds a memory, which the user profile would show: this test is about
    # scenes and the persona, so the profile is off
    memory = open_memory(
        scenes_model([create("Running")], [same], persona=lambda r: persona),
        {"recall": {"profile_max_tokens": None}},
    )
    form(memory, ["I run."])
    before = memory.recall("running")
    report = form(memory, ["Still running."], session="s2")
    assert report.scenes["updated"] == 0
    after = memory.recall("running")
    assert before is not None and after is not None
    assert before.append_system_context == after.append_system_context


def test_scene_language_follows_the_memories(open_memory: OpenMemory) -> None:
    seen: list[str] = []

    def scenes(request: SceneRequest) -> Any:
        seen.append(request.system)
        return []

    memory = open_memory(ScriptedFormationModel(scenes=scenes))
    form(memory, ["我每周日跑十公里。"])
    assert seen and "中文" in seen[0]


@pytest.mark.parametrize("background", [False, True])
def test_after_flush_the_persona_reflects_a_corrected_fact(
    open_memory: OpenMemory, background: bool
) -> None:
    # issue 18 item 7: the persona was rewritten only at its first scene update and then every
    # 50 memories, so after "Lisbon" was corrected to "Porto" it still said Lisbon
    from langchain_tdai_recall.testing import ConsolidationRequest

    def consolidate(request: ConsolidationRequest) -> Any:
        out = []
        for new in request.new:
            old = next((c for c in request.candidates if "Lisbon" in c["text"]), None)
            if "Porto" in new["text"] and old is not None:
                out.append({"new_id": new["id"], "action": "update", "target_ids": [old["id"]]})
            else:
                out.append({"new_id": new["id"], "action": "add"})
        return out

    model = ScriptedFormationModel(
        scenes=lambda request: [create("Home")] if not request.scenes else [],
        consolidate=consolidate,
    )
    memory = open_memory(model, {"pipeline": {"enabled": background}})
    say(memory, ["The user lives in Lisbon."])
    assert memory.flush(timeout=30)
    assert "Lisbon" in (memory.get_persona() or "")
    say(memory, ["The user lives in Porto, not Lisbon any more."], session="s2")
    assert memory.flush(timeout=30)
    (home,) = memory.list_memories()
    assert "Porto" in home.content
    persona = memory.get_persona() or ""
    assert "Porto" in persona and "lives in Lisbon." not in persona


def test_after_flush_the_persona_forgets_a_forgotten_memory(open_memory: OpenMemory) -> None:
    from langchain_tdai_recall.formation.tool import create_manage_memory_tool

    model = ScriptedFormationModel(
        scenes=lambda request: [create("Home")] if not request.scenes else []
    )
    memory = open_memory(model)
    say(memory, ["The user lives in Lisbon.", "The user plays the cello."])
    assert memory.flush(timeout=30)
    assert "cello" in (memory.get_persona() or "")
    cello = next(m for m in memory.list_memories() if "cello" in m.content)
    tool = create_manage_memory_tool(memory)
    tool.invoke({"action": "forget", "memory_id": cello.id})
    assert memory.flush(timeout=30)  # nothing pending but the persona: it is rewritten
    persona = memory.get_persona() or ""
    assert "Lisbon" in persona and "cello" not in persona
    calls = len(model.calls_of("persona"))
    assert memory.flush(timeout=30) and len(model.calls_of("persona")) == calls  # once only
