"""Reading model answers: tolerant JSON, lenient items, and what counts as invalid."""

from __future__ import annotations

import pytest

from langchain_tdai_recall.formation._llm import parse_json_text
from langchain_tdai_recall.formation.schemas import (
    InvalidAnswerError,
    read_consolidation,
    read_extraction,
    read_persona,
    read_scenes,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"memories": []}', {"memories": []}),
        ('```json\n{"memories": [{"content": "x"}]}\n```', {"memories": [{"content": "x"}]}),
        ('Sure! Here it is: {"memories": []} Hope it helps.', {"memories": []}),
        ('[{"content": "a"}]', [{"content": "a"}]),
        (
            '{"memories": [{"content": "line one\nline two"}]}',
            {"memories": [{"content": "line one\nline two"}]},
        ),
        (
            '{"a": "brace } inside", "b": [1, {"c": "]"}]}',
            {"a": "brace } inside", "b": [1, {"c": "]"}]},
        ),
    ],
)
def test_json_is_found_in_chatty_and_fenced_replies(text: str, expected: object) -> None:
    assert parse_json_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "I could not find anything.",
        '{"memories": [{"content": "cut off',
        "```json\n{\n```",
    ],
)
def test_empty_prose_and_truncated_replies_are_invalid_not_empty(text: str) -> None:
    # G-X1: upstream turned each of these into "nothing extracted" and advanced the cursor
    with pytest.raises(InvalidAnswerError):
        parse_json_text(text)


def test_extraction_items_are_read_leniently() -> None:
    read = read_extraction(
        {
            "situation": "planning a trip",
            "memories": [
                {
                    "text": "The user flies to Kyoto in May.",
                    "type": "Episode",
                    "priority": "80",
                    "message_ids": ["m1"],
                    "metadata": {"activity_start_time": "2025-05-20"},
                },
                {
                    "content": "The user likes tea.",
                    "type": "preference",
                    "source_message_ids": "m2",
                },
                {"content": "", "type": "persona", "priority": 50},
                {"content": "odd", "type": "opinion", "priority": 50},
                "not an object",
            ],
        }
    )
    kept = read.answer.memories
    assert [m.content for m in kept] == [
        "The user flies to Kyoto in May.",
        "The user likes tea.",
        "",
    ]
    assert kept[0].type == "episodic" and kept[0].priority == 80
    assert kept[0].source_ids == ["m1"] and kept[0].activity_start == "2025-05-20"
    assert kept[1].type == "persona" and kept[1].priority == 50 and kept[1].source_ids == ["m2"]
    assert read.rejected == 2  # unknown type, not an object
    assert read.answer.situation == "planning a trip"


def test_a_bare_list_of_memories_is_an_answer() -> None:
    read = read_extraction([{"content": "x", "type": "persona", "priority": 1}])
    assert len(read.answer.memories) == 1


@pytest.mark.parametrize("raw", [{}, {"memory": []}, {"memories": "none"}, "text", None, 3])
def test_an_answer_without_a_memories_list_is_invalid(raw: object) -> None:
    with pytest.raises(InvalidAnswerError):
        read_extraction(raw)


def test_unknown_consolidation_actions_mean_add() -> None:
    read = read_consolidation(
        {
            "decisions": [
                {"record_id": "n1", "action": "store"},
                {"new_id": "n2", "action": "obliterate", "target_ids": "c1"},
                {"new_id": "n3", "action": "MERGE", "targets": ["c1", 2], "merged_priority": "70"},
            ]
        }
    )
    actions = [(d.new_id, d.action, d.target_ids, d.priority) for d in read.answer.decisions]
    assert actions == [
        ("n1", "add", [], None),
        ("n2", "add", ["c1"], None),
        ("n3", "merge", ["c1", "2"], 70),
    ]


def test_scene_and_persona_answers() -> None:
    read = read_scenes(
        {"edits": [{"action": "create", "scene": "Trip", "body": "b"}, {"op": "??"}]}
    )
    assert [(e.op, e.name) for e in read.answer.edits] == [("create", "Trip")]
    assert read.rejected == 1
    assert read_persona({"action": "keep"}).answer.action == "keep"
    with pytest.raises(InvalidAnswerError):
        read_persona({"action": "rewrite", "persona": "  "})
    with pytest.raises(InvalidAnswerError):
        read_persona({"action": "shrug"})
