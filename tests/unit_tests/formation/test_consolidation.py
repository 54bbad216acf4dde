"""Consolidation: exact duplicates, candidates, validated decisions, stable identity, history."""

from __future__ import annotations

from typing import Any

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import (
    ConsolidationRequest,
    FormationWindow,
    HashEmbeddings,
    ScriptedFormationModel,
)
from tests.unit_tests.formation.conftest import OpenMemory, contents, say


def memories_from(*items: dict[str, Any]) -> Any:
    """An extract handler answering the given memories, citing the first new message."""

    def extract(window: FormationWindow) -> Any:
        return [{"source_ids": [window.messages[0]["id"]], **item} for item in items]

    return extract


def fact(content: str, **extra: Any) -> dict[str, Any]:
    return {"content": content, "type": "persona", "priority": 50, **extra}


# -- exact duplicates ----------------------------------------------------------------------------


def test_add_memory_of_an_identical_text_returns_the_existing_id() -> None:
    with TdaiMemory.open(None, embeddings=HashEmbeddings()) as memory:
        first = memory.add_memory("The user is vegetarian.", type="persona")
        again = memory.add_memory("the user is  VEGETARIAN", type="persona")
        batch = memory.add_memories([{"content": "The user is vegetarian."}, {"content": "New."}])
        assert again.id == first.id and batch[0].id == first.id
        # two writes in the same millisecond list in id order: compare as a set
        assert sorted(m.content for m in memory.list_memories()) == [
            "New.",
            "The user is vegetarian.",
        ]
        other = memory.add_memory("The user is vegetarian.", user_id="someone-else")
        assert other.id != first.id  # another scope is another memory
        explicit = memory.add_memory("The user is vegetarian.", id="mine")
        assert explicit.id == "mine"  # a given id is always written


def test_exact_duplicates_never_reach_the_model(open_memory: OpenMemory) -> None:
    model = ScriptedFormationModel(
        extract=memories_from(fact("The user is vegetarian."), fact("THE USER IS VEGETARIAN"))
    )
    memory = open_memory(model)
    memory.add_memory("The user is vegetarian.", type="persona")
    say(memory, ["I don't eat meat, as you know."])
    report = memory.extract()
    assert report.decisions["duplicate"] == 2 and report.decisions["add"] == 0
    assert model.calls_of("consolidate") == []
    assert contents(memory) == ["The user is vegetarian."]


def test_quickstart_run_three_times_stores_each_memory_once(open_memory: OpenMemory) -> None:
    memory = open_memory()
    for run in range(3):
        say(
            memory,
            ["I am vegetarian.", "My daughter Mia is allergic to peanuts."],
            session=f"s{run}",
        )
        memory.extract()
    assert contents(memory) == ["I am vegetarian.", "My daughter Mia is allergic to peanuts."]


# -- candidates ---------------------------------------------------------------------------------


def test_G_X8_unrelated_memories_cost_no_consolidation_call(open_memory: OpenMemory) -> None:
    model = ScriptedFormationModel(extract=memories_from(fact("The user plays the cello.")))
    memory = open_memory(model)
    memory.add_memory("Quarterly revenue grew by four percent in Berlin.")
    say(memory, ["I play the cello."])
    report = memory.extract()
    assert report.decisions["add"] == 1 and model.calls_of("consolidate") == []


def test_candidates_are_gated_by_the_search_relevance_score(open_memory: OpenMemory) -> None:
    stored_text, new_text = "The user lives in Berlin.", "The user moved to Paris from Berlin."
    probe = open_memory()
    probe.add_memory(stored_text)
    assert probe.flush(timeout=30)  # the stored memory's vector is in
    (hit,) = probe.search_memories(new_text, min_score=0.0)
    assert 0.05 < hit.score < 0.95 and hit.embedding_score is not None
    offered: list[int] = []
    for floor, expected in ((hit.score - 0.02, 1), (hit.score + 0.02, 0)):
        model = ScriptedFormationModel(extract=memories_from(fact(new_text)))
        memory = open_memory(model, {"extraction": {"candidateFloor": round(floor, 4)}})
        memory.add_memory(stored_text, user_id=f"u{expected}")
        assert memory.flush(timeout=30)
        say(memory, ["I moved."], user_id=f"u{expected}")
        memory.extract(user_id=f"u{expected}")
        calls = model.calls_of("consolidate")
        offered.append(len(calls))
        assert len(calls) == expected
    assert offered == [1, 0]  # the floor compares RankedHit.score (0..1), as recall does


def test_G_X8_candidates_come_from_the_same_scope_only(open_memory: OpenMemory) -> None:
    seen: list[ConsolidationRequest] = []

    def consolidate(request: ConsolidationRequest) -> Any:
        seen.append(request)
        return [{"new_id": n["id"], "action": "add"} for n in request.new]

    model = ScriptedFormationModel(
        extract=lambda window: [
            fact(f"The user likes green tea in the {window.messages[0]['text']}")
        ],
        consolidate=consolidate,
    )
    memory = open_memory(model)
    memory.add_memory("The user likes green tea in the morning and evening", user_id="bob")
    say(memory, ["morning"], user_id="alice")
    memory.extract(user_id="alice")
    assert seen == []  # bob's nearly identical memory is not a candidate for alice
    memory.add_memory("The user likes green tea in the morning and evening", user_id="alice")
    say(memory, ["evening"], user_id="alice", session="s2")
    memory.extract(user_id="alice")
    assert len(seen) == 1
    assert "The user likes green tea in the morning and evening" in [
        c["text"] for c in seen[0].candidates
    ]
    assert all(c.get("text") for c in seen[0].candidates)


def test_G_X8_duplicates_within_one_batch_are_compared(open_memory: OpenMemory) -> None:
    seen: list[ConsolidationRequest] = []

    def consolidate(request: ConsolidationRequest) -> Any:
        seen.append(request)
        return [
            {"new_id": "n1", "action": "add"},
            {"new_id": "n2", "action": "skip", "target_ids": ["n1"]},
        ]

    model = ScriptedFormationModel(
        extract=memories_from(
            fact("The user has a dog called Rex"), fact("The user has a dog called Rex, a beagle")
        ),
        consolidate=consolidate,
    )
    memory = open_memory(model)
    say(memory, ["My dog Rex is a beagle."])
    report = memory.extract()
    assert seen and seen[0].new[1]["candidates"] == ["n1"]
    assert report.decisions["skip"] == 1
    assert contents(memory) == ["The user has a dog called Rex"]


# -- decisions -----------------------------------------------------------------------------------


def _with_decision(*decisions: dict[str, Any], new: list[dict[str, Any]]) -> ScriptedFormationModel:
    return ScriptedFormationModel(
        extract=memories_from(*new), consolidate=lambda request: list(decisions)
    )


def test_G_X9_targets_outside_the_candidates_are_ignored(open_memory: OpenMemory) -> None:
    model = _with_decision(
        {"new_id": "n1", "action": "delete", "target_ids": ["c7", "m_other"]},
        new=[fact("The user lives in Paris now")],
    )
    memory = open_memory(model)
    kept = memory.add_memory("The user lives in Paris and works remotely", type="persona")
    far = memory.add_memory("Tax forms are due in April.")
    say(memory, ["I live in Paris now."])
    report = memory.extract()
    assert report.decisions["add"] == 1 and report.invalid_decisions == 2
    ids = {m.id for m in memory.list_memories()}
    assert {kept.id, far.id} <= ids and len(ids) == 3


def test_missing_decisions_mean_add_and_unknown_ones_are_asked_again(
    open_memory: OpenMemory,
) -> None:
    answers = [
        [{"new_id": "n9", "action": "skip"}, {"new_id": "n1", "action": "teleport"}],
        [{"new_id": "n9", "action": "skip"}],
    ]
    model = ScriptedFormationModel(
        extract=memories_from(
            fact("The user likes green tea"), fact("The user likes green tea with honey")
        ),
        consolidate=lambda request: answers.pop(0),
    )
    memory = open_memory(model)
    memory.add_memory("The user likes green tea with lemon", type="persona")
    say(memory, ["I like green tea, with honey."])
    first = memory.extract()  # an unknown action may have been an update: not guessed as add
    assert first.failed_windows == 1 and first.junk == 1 and len(memory.list_memories()) == 1
    report = memory.extract()
    assert report.decisions["add"] == 2 and report.invalid_decisions == 1
    assert len(memory.list_memories()) == 3


def test_G_X10_update_keeps_the_id_creation_time_and_history(open_memory: OpenMemory) -> None:
    model = _with_decision(
        {
            "new_id": "n1",
            "action": "update",
            "target_ids": ["c1"],
            "content": "The user lives in Paris (moved from Berlin in 2025).",
            "priority": "95",
        },
        new=[fact("The user lives in Paris now", priority=70)],
    )
    memory = open_memory(model)
    old = memory.add_memory("The user lives in Berlin now", type="persona", scene_name="home")
    say(memory, ["I live in Paris now."])
    report = memory.extract()
    assert report.decisions["update"] == 1
    (current,) = memory.list_memories()
    assert current.id == old.id and current.created_at == old.created_at
    assert current.content == "The user lives in Paris (moved from Berlin in 2025)."
    assert current.priority == 95 and current.scene_name == "home"
    assert len(current.source_message_ids) == 1
    history = memory.history(old.id)
    assert [v.record.content for v in history] == [old.content, current.content]
    assert history[0].change == "update" and history[0].changed_by == "extraction"
    assert history[1].current


def test_G_X10_merge_keeps_the_oldest_id_and_records_the_absorbed(open_memory: OpenMemory) -> None:
    model = _with_decision(
        {
            "new_id": "n1",
            "action": "merge",
            "target_ids": ["c1", "c2"],
            "content": "The user runs 10 km three times a week and did a half marathon.",
        },
        new=[fact("The user runs 10 km three times a week")],
    )
    memory = open_memory(model)
    older = memory.add_memory("The user runs three times a week")
    newer = memory.add_memory("The user runs 10 km and did a half marathon")
    say(memory, ["I run 10 km three times a week."])
    report = memory.extract()
    assert report.decisions["merge"] == 1 and report.deleted == 1
    (current,) = memory.list_memories()
    survivor, absorbed = (older, newer) if current.id == older.id else (newer, older)
    assert current.id == survivor.id and current.created_at == survivor.created_at
    absorbed_history = memory.history(absorbed.id)
    assert absorbed_history[-1].change == "merged"
    assert absorbed_history[-1].related_ids == (survivor.id,)
    assert memory.history(survivor.id)[0].change == "merge"
    assert memory.history(survivor.id)[0].related_ids == (absorbed.id,)


def test_delete_removes_contradicted_memories_and_adds_the_new_one(
    open_memory: OpenMemory,
) -> None:
    model = _with_decision(
        {"new_id": "n1", "action": "delete", "target_ids": ["c1"]},
        new=[fact("The user no longer eats fish; fully vegetarian now")],
    )
    memory = open_memory(model, {"extraction": {"candidateFloor": 0.3}})
    old = memory.add_memory("The user eats fish but no other meat")
    say(memory, ["I stopped eating fish, fully vegetarian now."])
    report = memory.extract()
    assert report.decisions["delete"] == 1 and report.deleted == 1
    assert contents(memory) == ["The user no longer eats fish; fully vegetarian now"]
    assert memory.history(old.id)[-1].change == "delete"


def test_G_X9_merges_keep_minus_one_and_never_mint_it(open_memory: OpenMemory) -> None:
    model = _with_decision(
        {"new_id": "n1", "action": "update", "target_ids": ["c1"], "priority": 40},
        new=[fact("Always answer in English, the user said again", type="instruction")],
    )
    memory = open_memory(model)
    rule = memory.add_memory("Always answer in English", type="instruction", priority=-1)
    say(memory, ["Answer in English, always."])
    memory.extract()
    assert memory.get_memory(rule.id).priority == -1  # type: ignore[union-attr]

    model2 = _with_decision(
        {"new_id": "n1", "action": "merge", "target_ids": ["c1"], "priority": -1},
        new=[fact("The user prefers short answers", priority=60)],
    )
    memory2 = open_memory(model2, embeddings=HashEmbeddings(dims=64))
    note = memory2.add_memory("The user prefers short answers with examples", priority=70)
    say(memory2, ["Short answers please."])
    memory2.extract()
    merged = memory2.get_memory(note.id)
    assert merged is not None and merged.priority == 70  # the max of the inputs, not -1


def test_G_X11_merged_activity_times_span_the_inputs(open_memory: OpenMemory) -> None:
    model = _with_decision(
        {"new_id": "n1", "action": "merge", "target_ids": ["c1"], "content": "Trip to Kyoto."},
        new=[
            fact(
                "The user travels to Kyoto",
                type="episodic",
                activity_start="2025-05-20T09:00:00+09:00",
                activity_end="2025-05-27",
            )
        ],
    )
    memory = open_memory(model)
    old = memory.add_memory(
        "The user travels to Kyoto in May",
        activity_start_time="2025-05-21",
        activity_end_time="2025-05-25T18:00:00+08:00",
    )
    say(memory, ["Kyoto from the 20th to the 27th."])
    memory.extract()
    merged = memory.get_memory(old.id)
    assert merged is not None
    # compared as instants, not strings; shown in the configured zone (+08:00)
    assert merged.activity_start_time == "2025-05-20T08:00+08:00"
    assert merged.activity_end_time == "2025-05-27"


def test_a_failed_consolidation_call_fails_the_window(open_memory: OpenMemory) -> None:
    def consolidate(request: ConsolidationRequest) -> Any:
        return "I think these are all fine"

    model = ScriptedFormationModel(
        extract=memories_from(fact("The user likes green tea")), consolidate=consolidate
    )
    memory = open_memory(model)
    memory.add_memory("The user likes green tea with honey")
    say(memory, ["I like green tea."])
    report = memory.extract()
    assert report.failed_windows == 1 and report.windows == 0
    assert contents(memory) == ["The user likes green tea with honey"]
