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
            ],
        }
    )
    first, second = read.answer.memories
    assert read.sound and read.rejected == 0
    assert first.content == "The user flies to Kyoto in May."
    assert first.type == "episodic" and first.priority == 80
    assert first.source_ids == ["m1"] and first.activity_start == "2025-05-20"
    assert second.type == "persona" and second.priority == 50 and second.source_ids == ["m2"]
    assert read.answer.situation == "planning a trip"
    # text, message_ids, Episode, "80", the nested time, source_message_ids, preference, "m2"
    assert read.repaired == 8


def test_junk_and_unrepairable_items_are_named_never_made_into_memories() -> None:
    # issue 26 item 1: `{"content": 42, ...}` was stored as a memory "42", an unknown type
    # became episodic and a word priority 50, and the window was committed past them
    read = read_extraction(
        {
            "memories": [
                {"content": "The user lives in Porto.", "type": "persona", "priority": 70},
                {"content": 42, "type": "banana", "priority": "high"},
                {"content": "", "type": "persona", "priority": 50},
                "The user owns a bike.",
                {"content": "odd", "type": "opinion", "priority": 50},
                {"type": "persona", "priority": 50},
                {"content": {"text": "nested"}, "type": "persona"},
                {"content": "The user plays the cello.", "type": "persona", "priority": 500},
                7,
            ]
        }
    )
    assert [m.content for m in read.answer.memories] == ["The user lives in Porto."]
    assert not read.sound and read.rejected == 8
    assert read.junk == (
        "item 2: content is int, not text",
        "item 3: empty content",
        "item 4: a bare string, not a memory object",
        "item 5: unknown type",
        "item 6: no content",
        "item 7: content is dict, not text",
        "item 9: int, not a memory object",
    )
    assert read.unrepaired == ("item 8: priority 500 is outside -1..100",)
    failure = read.failure("extraction")
    assert failure.startswith("unusable extraction answer: 7 junk item(s) dropped (item 2:")
    assert "Porto" not in failure and "cello" not in failure  # reasons only, no model text


REPAIRED = [
    ("activity_end", 12345, "1970-01-01T03:25:45+00:00"),
    ("activity_end", 1748736000, "2025-06-01T00:00:00+00:00"),
    ("activity_end", 1748736000000, "2025-06-01T00:00:00+00:00"),
    ("activity_end", "1748736000", "2025-06-01T00:00:00+00:00"),
    ("activity_start", 2025, "2025-01-01"),
    ("activity_start", {"date": "2025-06-01"}, None),
    ("activity_start", None, None),
    ("activity_start", "sometime last spring", "sometime last spring"),  # dropped by validation
    ("priority", "80", 80),
    ("priority", " 80.0 ", 80),
    ("priority", 72.0, 72),
    ("priority", None, 50),
    ("priority", -1, -1),
    ("priority", "100", 100),
    ("type", "Persona", "persona"),
    ("type", " EPISODIC ", "episodic"),
    ("type", "Instructions", "instruction"),
    ("situation", None, ""),
    ("situation", 42, ""),
    ("source_ids", None, []),
    ("source_ids", "m1", ["m1"]),
    ("source_ids", "m1, m3", ["m1", "m3"]),
    ("source_ids", 3, ["3"]),
    ("source_ids", [1, "m2", None, True], ["1", "m2"]),
    ("source_ids", {"m1": True}, []),
]


@pytest.mark.parametrize(("field", "value", "expected"), REPAIRED)
def test_fields_are_repaired_only_where_unambiguous(
    field: str, value: object, expected: object
) -> None:
    # issue 18 item 1: `activity_end: 12345` made the whole memory fail validation; it was
    # dropped, the window still counted as answered and the fact was lost
    item: dict[str, object] = {"content": "The user likes tea.", "type": "persona"}
    item[field] = value
    item["confidence"] = 0.9  # extra fields are ignored
    read = read_extraction({"memories": [item]})
    assert read.sound
    assert getattr(read.answer.memories[0], field) == expected


UNUSABLE = [
    ("content", 42, "junk"),
    ("content", ["The user", "likes tea."], "junk"),
    ("content", "   ", "junk"),
    ("content", None, "junk"),
    ("type", None, "junk"),
    ("type", 3, "junk"),
    ("type", "banana", "junk"),
    ("type", "opinion", "junk"),
    ("priority", 500, "unrepaired"),
    ("priority", 101, "unrepaired"),
    ("priority", -7, "unrepaired"),
    ("priority", -2, "unrepaired"),
    ("priority", 1e9, "unrepaired"),
    ("priority", "high", "unrepaired"),
    ("priority", " 72.6 ", "unrepaired"),
    ("priority", 0.8, "unrepaired"),
    ("priority", True, "unrepaired"),
    ("priority", [80], "unrepaired"),
    ("priority", "500", "unrepaired"),
]


@pytest.mark.parametrize(("field", "value", "kind"), UNUSABLE)
def test_unusable_fields_make_the_answer_unsound(field: str, value: object, kind: str) -> None:
    item: dict[str, object] = {"content": "The user likes tea.", "type": "persona", "priority": 60}
    item[field] = value
    read = read_extraction({"memories": [item, {"content": "x", "type": "persona"}]})
    assert not read.sound
    assert len(read.junk if kind == "junk" else read.unrepaired) == 1
    assert read.rejected == 1 and [m.content for m in read.answer.memories] == ["x"]


@pytest.mark.parametrize(
    "raw",
    [
        {"memories": {"content": "The user likes tea.", "type": "persona"}},
        {"memories": '[{"content": "The user likes tea.", "type": "persona"}]'},
        '{"memories": [{"content": "The user likes tea.", "type": "persona"}]}',
        [{"content": "The user likes tea.", "type": "persona"}],
    ],
)
def test_misshapen_answer_containers_are_read(raw: object) -> None:
    read = read_extraction(raw)
    assert [m.content for m in read.answer.memories] == ["The user likes tea."]
    assert read.sound


def test_a_bare_list_of_memories_is_an_answer() -> None:
    read = read_extraction([{"content": "x", "type": "persona", "priority": 1}])
    assert len(read.answer.memories) == 1


@pytest.mark.parametrize("raw", [{}, {"memory": []}, {"memories": "none"}, "text", None, 3])
def test_an_answer_without_a_memories_list_is_invalid(raw: object) -> None:
    with pytest.raises(InvalidAnswerError):
        read_extraction(raw)


def test_consolidation_decisions_are_repaired_or_refused() -> None:
    read = read_consolidation(
        {
            "decisions": [
                {"record_id": "n1", "action": "store"},
                {"new_id": 2, "action": "Skip", "target_ids": "c1"},
                {"new_id": "n3", "action": "MERGE", "targets": ["c1", 2], "merged_priority": "70"},
            ]
        }
    )
    actions = [(d.new_id, d.action, d.target_ids, d.priority) for d in read.answer.decisions]
    assert actions == [
        ("n1", "add", [], None),
        ("n2", "skip", ["c1"], None),
        ("n3", "merge", ["c1", "2"], 70),
    ]
    assert read.sound
    bad = read_consolidation(
        [
            {"new_id": "n1", "action": "obliterate", "target_ids": "c1"},
            {"new_id": "n2", "action": None},
            "add",
            {"action": "add"},
            {"new_id": "n3", "action": "update", "target_ids": ["c1"], "content": 42},
            {"new_id": "n4", "action": "merge", "target_ids": {"c1": 1}},
            {"new_id": "n5", "action": "update", "target_ids": ["c1"], "priority": 500},
            {"new_id": "n6", "action": "update", "target_ids": ["c1"], "type": "banana"},
        ]
    )
    assert bad.answer.decisions == [] and len(bad.junk) == 4 and len(bad.unrepaired) == 4


def test_scene_and_persona_answers() -> None:
    read = read_scenes({"edits": [{"action": "Create", "scene": "Trip", "body": "b"}]})
    assert [(e.op, e.name) for e in read.answer.edits] == [("create", "Trip")]
    assert read.sound and read.repaired == 3
    bad = read_scenes(
        [
            {"op": "??", "name": "Trip"},
            {"op": "create"},
            "create Trip",
            {"op": "create", "name": "Trip", "body": 42},
            {"op": "merge", "name": "Trip", "sources": [1, 2]},
        ]
    )
    assert bad.answer.edits == [] and len(bad.junk) == 3 and len(bad.unrepaired) == 2
    assert read_persona({"action": "keep"}).answer.action == "keep"
    with pytest.raises(InvalidAnswerError):
        read_persona({"action": "rewrite", "persona": "  "})
    with pytest.raises(InvalidAnswerError):
        read_persona({"action": "shrug"})
    with pytest.raises(InvalidAnswerError):
        read_persona({"action": "rewrite", "persona": 42})
    assert read_persona({"action": "Rewrite", "persona": "# P"}).answer.persona == "# P"
