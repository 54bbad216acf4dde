"""The profile's budget is in estimated tokens: the same facts fit whatever their language."""

from __future__ import annotations

import logging

import pytest

from langchain_tdai_recall import RecallConfig, TdaiConfig, TdaiMemory
from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.recall.prompt import format_memory_line
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.text.tokens import estimate_tokens

# The same 24 facts, in English and in Chinese (each one line of a user's profile).
PARALLEL = [
    ("Works as a nurse at the children's hospital in Leeds", "在利兹的儿童医院当护士"),
    ("Has a golden retriever named Biscuit who is seven", "养了一只七岁的金毛犬，叫饼干"),
    ("Is vegetarian and does not eat fish either", "吃素，也不吃鱼"),
    ("Speaks English and some Portuguese", "会说英语和一点葡萄牙语"),
    ("Lives with her partner Sam and their two children", "和伴侣山姆以及两个孩子住在一起"),
    (
        "Prefers trains to flying for trips under five hours",
        "五小时以内的行程更喜欢坐火车而不是飞机",
    ),
    (
        "Had knee surgery last year and avoids running on pavement",
        "去年做过膝盖手术，避免在硬路面上跑步",
    ),
    ("Drinks oolong tea every morning", "每天早上喝乌龙茶"),
    ("Her mother lives in Porto and visits every summer", "她母亲住在波尔图，每年夏天来探望"),
    ("Plays the cello in a community orchestra", "在社区乐团拉大提琴"),
    ("Is learning to bake sourdough bread", "正在学做酸面包"),
    ("Works night shifts on Tuesdays and Wednesdays", "每周二和周三上夜班"),
    ("Her daughter Lily is allergic to cats", "她女儿莉莉对猫过敏"),
    ("Supports Leeds United", "支持利兹联队"),
    ("Keeps a vegetable garden with tomatoes and beans", "有一个种番茄和豆子的菜园"),
    ("Prefers short answers with bullet points", "喜欢简短、分条列出的回答"),
    ("Drives an electric car", "开一辆电动车"),
    ("Is saving for a house deposit", "正在攒买房的首付"),
    ("Reads crime novels before bed", "睡前读侦探小说"),
    ("Goes swimming on Saturday mornings", "每周六上午去游泳"),
    ("Her son Tom starts secondary school in September", "她儿子汤姆九月上中学"),
    ("Does not drink alcohol", "不喝酒"),
    ("Volunteers at a food bank once a month", "每月去食物银行做一次志愿者"),
    ("Uses a standing desk at home", "在家用站立式办公桌"),
]


def test_the_estimate_is_deterministic_and_treats_scripts_alike() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("   \n ") == 0
    assert estimate_tokens("the") == 1
    assert estimate_tokens("penicillin") == 2  # one token plus one per six further letters
    assert estimate_tokens("2026") == 2  # digits in groups of three
    assert estimate_tokens("…") == 1
    text = "Is vegetarian and does not eat fish either"
    assert estimate_tokens(text) == estimate_tokens(text)
    english = sum(estimate_tokens(en) for en, _ in PARALLEL)
    chinese = sum(estimate_tokens(zh) for _, zh in PARALLEL)
    chars_en = sum(len(en) for en, _ in PARALLEL)
    chars_zh = sum(len(zh) for _, zh in PARALLEL)
    assert chars_en > 2.5 * chars_zh  # code points: English pays more than twice as much
    assert 0.8 < chinese / english < 1.25  # estimated tokens: about the same


def _profile_size(facts: list[str], config: dict[str, object] | None = None) -> int:
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64), config=config) as memory:
        memory.add_memories(
            [{"content": f, "type": "persona", "priority": 60} for f in facts], user_id="u"
        )
        result = memory.recall("hello", user_id="u")
    assert result is not None
    return len(result.profile)


def test_the_same_facts_fit_the_default_budget_whatever_their_language() -> None:
    # more facts than the default budget holds, so it binds in both languages
    english = [en for en, _ in PARALLEL]
    chinese = [zh for _, zh in PARALLEL]
    english += [f"Also: {en}" for en in english] + [f"Besides: {en}" for en in english]
    chinese += [f"另外，{zh}" for zh in chinese] + [f"还有，{zh}" for zh in chinese]
    in_english, in_chinese = _profile_size(english), _profile_size(chinese)
    assert in_english < len(english) and in_chinese < len(chinese)
    assert abs(in_english - in_chinese) <= 0.15 * in_english, (in_english, in_chinese)


def test_the_budget_counts_estimated_tokens_of_the_lines() -> None:
    config = {"recall": {"profile_max_tokens": 120}}
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64), config=config) as memory:
        memory.add_memories(
            [{"content": zh, "type": "persona", "priority": 60} for _, zh in PARALLEL],
            user_id="u",
        )
        result = memory.recall("hello", user_id="u")
    assert result is not None and 0 < len(result.profile) < len(PARALLEL)
    lines = [format_memory_line(rec, tz=None, language="en") for rec in result.profile]
    assert sum(estimate_tokens(line) + 1 for line in lines) <= 120


def test_the_retired_code_point_budget_loads_as_tokens(caplog: pytest.LogCaptureFixture) -> None:
    assert RecallConfig().profile_max_tokens == 600
    with caplog.at_level(logging.INFO, logger="langchain_tdai_recall.config"):
        cfg = TdaiConfig.from_dict({"recall": {"profileMaxChars": 1500}})
    assert cfg.recall.profile_max_tokens == 400
    assert "profile_max_tokens=400" in caplog.text
    assert (
        TdaiConfig.from_dict({"recall": {"profile_max_chars": 300}}).recall.profile_max_tokens == 80
    )
    assert (
        TdaiConfig.from_dict({"recall": {"profile_max_chars": None}}).recall.profile_max_tokens
        is None
    )
    assert RecallConfig(profile_max_tokens=None).profile_max_tokens is None


@pytest.mark.parametrize(
    ("recall", "needle"),
    [
        ({"profile_max_chars": 1500, "profile_max_tokens": 300}, "keep only profile_max_tokens"),
        ({"profile_max_chars": "big"}, "profile_max_chars"),
        ({"profile_max_chars": -5}, "profile_max_chars"),
        ({"profile_max_tokens": 5}, "profile_max_tokens"),
    ],
)
def test_a_bad_profile_budget_is_a_clear_error(recall: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        TdaiConfig.from_dict({"recall": recall})


def test_ties_of_priority_type_and_write_time_keep_the_order_written() -> None:
    """Regression: memories written in the same millisecond came out in random id order."""
    facts = [{"content": f"Fact number {i} about the user", "priority": 60} for i in range(16)]
    with TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64)) as memory:
        memory.add_memories(facts, user_id="u")  # one write: one millisecond, random ids
        result = memory.recall("hello", user_id="u")
        assert result is not None
        assert len({rec.created_at for rec in result.profile}) == 1
        assert [rec.content for rec in result.profile] == [f["content"] for f in facts]
