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
                "The user owns a bike.",
                {"type": "persona", "priority": 50},
                {"content": {"text": "nested"}},
                7,
            ],
        }
    )
    kept = read.answer.memories
    assert [m.content for m in kept] == [
        "The user flies to Kyoto in May.",
        "The user likes tea.",
        "",
        "odd",
        "The user owns a bike.",
    ]
    assert kept[0].type == "episodic" and kept[0].priority == 80
    assert kept[0].source_ids == ["m1"] and kept[0].activity_start == "2025-05-20"
    assert kept[1].type == "persona" and kept[1].priority == 50 and kept[1].source_ids == ["m2"]
    assert kept[3].type == "episodic"  # an unknown type is the default type, not a lost memory
    assert read.rejected == 3  # no text, text that is not text, not an item at all
    assert read.answer.situation == "planning a trip"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("activity_end", 12345, "1970-01-01T03:25:45+00:00"),
        ("activity_end", 1748736000, "2025-06-01T00:00:00+00:00"),
        ("activity_end", 1748736000000, "2025-06-01T00:00:00+00:00"),
        ("activity_end", "1748736000", "2025-06-01T00:00:00+00:00"),
        ("activity_start", 2025, "2025-01-01"),
        ("activity_start", {"date": "2025-06-01"}, None),
        ("activity_start", None, None),
        ("priority", "80", 80),
        ("priority", " 72.6 ", 72),
        ("priority", 72.6, 72),
        ("priority", "high", 50),
        ("priority", None, 50),
        ("priority", True, 50),
        ("priority", [80], 50),
        ("type", None, "episodic"),
        ("type", 3, "episodic"),
        ("type", "Instructions", "instruction"),
        ("situation", None, ""),
        ("situation", 42, "42"),
        ("source_ids", None, []),
        ("source_ids", "m1", ["m1"]),
        ("source_ids", [1, "m2", None, True], ["1", "m2"]),
        ("source_ids", {"m1": True}, []),
        ("content", 42, "42"),
        ("content", ["The user", "likes tea."], "The user likes tea."),
    ],
)
def test_wrongly_typed_fields_are_repaired_not_dropped(
    field: str, value: object, expected: object
) -> None:
    # issue 18 item 1: `activity_end: 12345` made the whole memory fail validation; it was
    # dropped, the window still counted as answered and the fact was lost
    item: dict[str, object] = {"content": "The user likes tea.", "type": "persona"}
    item[field] = value
    item["confidence"] = 0.9  # extra fields are ignored
    read = read_extraction({"memories": [item]})
    assert read.rejected == 0
    assert getattr(read.answer.memories[0], field) == expected


@pytest.mark.parametrize(
    "raw",
    [
        {"memories": {"content": "The user likes tea."}},
        {"memories": '[{"content": "The user likes tea."}]'},
        '{"memories": [{"content": "The user likes tea."}]}',
        ["The user likes tea."],
    ],
)
def test_misshapen_answer_containers_are_read(raw: object) -> None:
    read = read_extraction(raw)
    assert [m.content for m in read.answer.memories] == ["The user likes tea."]
    assert read.rejected == 0


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
