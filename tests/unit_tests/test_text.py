"""Query cleaning, tokenisation and code-point budgets."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from langchain_tdai_recall.text.budget import (
    MIN_CUT_CONTENT_CHARS,
    MIN_PARTIAL_LINE_CHARS,
    apply_budget,
    truncate_line,
)
from langchain_tdai_recall.text.clean import (
    MAX_CLEAN_INPUT_CHARS,
    MAX_QUERY_CHARS,
    clean_query,
    content_text,
    strip_injected_blocks,
)
from langchain_tdai_recall.text.tokenize import get_tokenizer

SUFFIX = "…（已截断；可用 tdai_memory_search 或 tdai_conversation_search 查看详情）"


# -- cleaning -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tag", ["relevant-memories", "user-persona", "scene-navigation", "memory-tools-guide"]
)
def test_clean_removes_injected_blocks_with_contents(tag: str) -> None:
    text = f"<{tag}>\n- [persona] secret stuff\n</{tag}>\n\nwhat is my name?"
    assert clean_query(text) == "what is my name?"


def test_clean_removes_data_uris_control_chars_and_normalises_whitespace() -> None:
    text = "look\x00 at\tthis  data:image/png;base64,iVBORw0KGgo= \n\n\n picture\x07"
    assert clean_query(text) == "look at this picture"


def test_clean_removes_stray_tags_and_is_case_insensitive() -> None:
    assert clean_query("a </RELEVANT-MEMORIES> b <user-persona x='1'> c") == "a b c"


def test_content_text_takes_only_text_blocks() -> None:
    blocks = [
        {"type": "text", "text": "hello"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
        "world",
    ]
    assert content_text(blocks) == "hello\nworld"
    assert content_text(None) == ""


def test_clean_pairs_blocks_like_before_on_nested_and_unclosed_tags() -> None:
    # The first closing tag of the same name ends a block; a tag never closed is a stray tag.
    text = "<relevant-memories>a<relevant-memories>b</relevant-memories> c</relevant-memories> d"
    assert clean_query(text) == "c d"
    assert clean_query("<user-persona>never closed, kept") == "never closed, kept"
    assert clean_query("x <scene-navigation>a</relevant-memories> y") == "x a y"
    # A closing tag with anything but spaces after its name does not end a block.
    assert clean_query("<user-persona>a</user-persona x> b</user-persona> c") == "c"


# Inputs that made the old tag regexes backtrack: quadratic (or worse) in their length.
_PATHOLOGICAL: dict[str, Callable[[int], str]] = {
    "unclosed opening tags": lambda n: "<relevant-memories>x" * (n // 20),
    "unterminated tags": lambda n: "<relevant-memories" * (n // 18),
    "closing tags": lambda n: "</user-persona>x" * (n // 16),
    "spaces after <": lambda n: "<" + " " * n,
    "spaces after </": lambda n: "< /" + " " * n,
    "many blocks": lambda n: "<scene-navigation>a</scene-navigation>" * (n // 38),
}


def _best_seconds(func: Callable[[str], object], text: str, *, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        func(text)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", list(_PATHOLOGICAL))
@pytest.mark.parametrize("func", [strip_injected_blocks, clean_query], ids=["strip", "clean"])
def test_cleaning_time_is_linear_in_input_length(shape: str, func: Callable[[str], object]) -> None:
    make = _PATHOLOGICAL[shape]
    small = _best_seconds(func, make(20_000))
    large = _best_seconds(func, make(160_000))
    # Linear: about 8x for 8x the input. Quadratic code took over 60x (9.5 s at 160 KB for
    # the first shape). The slack absorbs a busy machine.
    assert large < 12 * small + 0.25, (shape, small, large)


def test_query_keeps_both_ends_of_a_long_message_within_the_cap() -> None:
    head = "Please summarise this report about the Lisbon office."
    tail = "Does it mention my peanut allergy?"
    query = clean_query(f"{head} {'lorem ipsum ' * 10_000} {tail}")
    assert len(query) <= MAX_QUERY_CHARS
    assert query.startswith(head)
    assert query.endswith(tail)


def test_block_spanning_the_input_cap_is_still_removed() -> None:
    memories = "- [persona] secret " * (MAX_CLEAN_INPUT_CHARS // 10)
    text = f"<relevant-memories>\n{memories}\n</relevant-memories>\n\nwhat is my name?"
    assert len(text) > MAX_CLEAN_INPUT_CHARS
    assert clean_query(text) == "what is my name?"


def test_stored_text_is_cleaned_whole() -> None:
    body = "word " * 50_000
    assert strip_injected_blocks(f"<user-persona>p</user-persona>{body}") == body


# -- tokenisation -------------------------------------------------------------------------------


def test_english_tokens_are_lowercased_stemmed_and_skip_stop_words() -> None:
    tok = get_tokenizer("bigram")
    assert tok.document_tokens("The Dogs were RUNNING to the parties") == [
        "dog",
        "run",
        "party",
    ]


def test_cjk_uses_bigrams_and_unigrams_without_dependencies() -> None:
    tokens = get_tokenizer("bigram").document_tokens("喜欢咖啡")
    assert {"喜欢", "欢咖", "咖啡", "咖", "啡"} <= set(tokens)


def test_short_cjk_query_matches_inside_longer_word() -> None:
    tok = get_tokenizer("bigram")
    query = tok.query("咖啡")
    assert "咖啡" in query.tokens
    assert "咖啡" in tok.document_tokens("我常去咖啡店")


def test_query_syntax_is_plain_text() -> None:
    tok = get_tokenizer("bigram")
    query = tok.query('"peanut" OR allergy* -cake title:foo')
    assert set(query.tokens) == {"peanut", "allergy", "cake", "title", "foo"}


def test_mixed_language_and_fullwidth_text() -> None:
    tok = get_tokenizer("bigram")
    tokens = tok.document_tokens("我用ＦＡＩＳＳ做向量检索")
    assert "faiss" in tokens
    assert "向量" in tokens


def test_tokenizer_identity_is_versioned() -> None:
    assert get_tokenizer("bigram").identity == "bigram-v1"


# -- budgets ------------------------------------------------------------------------------------


def test_truncate_keeps_lines_that_fit_and_marks_cuts() -> None:
    line = "x" * 100
    assert truncate_line(line, 100, SUFFIX) == line
    cut = truncate_line(line, 99, SUFFIX)
    assert len(cut) == 99
    assert cut.endswith(SUFFIX)


def test_truncate_counts_code_points_for_emoji_and_cjk() -> None:
    line = "😀" * 80 + "中" * 80
    cut = truncate_line(line, 70, SUFFIX)
    assert len(cut) == 70
    assert cut == "😀" * (70 - len(SUFFIX)) + SUFFIX
    assert len(cut.encode("utf-16-le")) // 2 > 70  # UTF-16 units would have cut differently


def test_truncate_below_suffix_length_still_marks_the_cut() -> None:
    cut = truncate_line("y" * 100, 30, SUFFIX)
    assert len(cut) == 30
    assert cut.endswith("…")


def test_zero_disables_both_limits() -> None:
    lines = ["a" * 500, "b" * 500]
    out = apply_budget(lines, per_line=0, total=0, suffix=SUFFIX)
    assert out.lines == lines
    assert out.dropped == 0


def test_total_budget_counts_separators_exactly() -> None:
    lines = ["a" * 10, "b" * 10, "c" * 10]
    exact = apply_budget(lines, per_line=0, total=32, suffix=SUFFIX)  # 10 + 1 + 10 + 1 + 10
    assert exact.lines == lines
    short = apply_budget(lines, per_line=0, total=31, suffix=SUFFIX)
    assert short.lines == lines[:2]  # 9 code points left for the third: below 40, dropped
    assert short.dropped == 1


def test_partial_line_kept_only_with_at_least_40_code_points() -> None:
    lines = ["a" * 10, "b" * 200, "c" * 5]
    room = 10 + 1 + MIN_PARTIAL_LINE_CHARS
    kept = apply_budget(lines, per_line=0, total=room, suffix=SUFFIX)
    assert len(kept.lines) == 2
    assert len(kept.lines[1]) == MIN_PARTIAL_LINE_CHARS
    assert kept.truncated == [False, True]
    assert kept.dropped == 1  # the later short line is discarded too

    dropped = apply_budget(lines, per_line=0, total=room - 1, suffix=SUFFIX)
    assert dropped.lines == ["a" * 10]
    assert dropped.dropped == 2


def test_per_line_limit_applies_before_total() -> None:
    lines = ["a" * 300, "b" * 300]
    out = apply_budget(lines, per_line=100, total=0, suffix=SUFFIX)
    assert [len(x) for x in out.lines] == [100, 100]
    assert all(x.endswith(SUFFIX) for x in out.lines)
    assert out.truncated == [True, True]


PREFIX = "- [episodic] "


def _split_cut(cut: str) -> tuple[str, str]:
    """(text before the marker, marker) of a cut line."""
    for marker in (SUFFIX, "…"):
        if cut.endswith(marker):
            return cut[: -len(marker)], marker
    msg = f"not marked as cut: {cut!r}"
    raise AssertionError(msg)


@pytest.mark.parametrize("fragment", ["&lt;relevant-memories>", "&lt;/system>", "<|im_end|>"])
def test_cut_never_leaves_a_fragment_of_a_tag(fragment: str) -> None:
    line = PREFIX + "a" * 30 + " " + fragment + " " + "b" * 150
    start = line.index(fragment)
    end = start + len(fragment)
    for limit in range(1, len(line)):
        head, _ = _split_cut(truncate_line(line, limit, SUFFIX))
        assert not start < len(head) < end, (limit, head[-12:])
        # a limit below the head and the first content words is exceeded, never obeyed by
        # emitting the head alone
        room = max(limit, len(PREFIX) + MIN_CUT_CONTENT_CHARS + len("…"))
        assert len(head) + len(_split_cut(truncate_line(line, limit, SUFFIX))[1]) <= room


@pytest.mark.parametrize("limit", range(len(SUFFIX) + 1, len(SUFFIX) + 40))
def test_cut_just_above_the_suffix_length_keeps_content(limit: int) -> None:
    line = PREFIX + "meaningful content of the memory " * 10
    cut = truncate_line(line, limit, SUFFIX)
    head, marker = _split_cut(cut)
    assert len(cut) <= limit
    assert head.startswith(PREFIX)
    content = head[len(PREFIX) :]
    assert content.strip()  # never a prefix and a marker alone
    if marker == SUFFIX:
        assert len(content) >= MIN_CUT_CONTENT_CHARS
    out = apply_budget([line], per_line=limit, total=0, suffix=SUFFIX)
    assert _split_cut(out.lines[0])[0][len(PREFIX) :].strip()


@pytest.mark.parametrize("prefix", [PREFIX, "- [persona|Travel plans for the summer] ", ""])
def test_a_limit_smaller_than_the_head_still_keeps_content(prefix: str) -> None:
    content = "Allergic to peanuts and carries an epipen"
    line = prefix + content
    for limit in range(1, len(line)):
        head, marker = _split_cut(truncate_line(line, limit, SUFFIX))
        assert head.startswith(prefix)
        kept = head[len(prefix) :]
        assert len(kept) >= MIN_CUT_CONTENT_CHARS, (limit, head)  # never the head alone
        assert content.startswith(kept)
        assert len(head) + len(marker) <= max(limit, len(prefix) + MIN_CUT_CONTENT_CHARS + 1)
    out = apply_budget([line], per_line=5, total=0, suffix=SUFFIX)
    assert out.lines[0][len(prefix) :].startswith(content[:MIN_CUT_CONTENT_CHARS])
    assert out.truncated == [True]
    # a line only slightly longer than its head and ten code points is kept whole
    short = prefix + "Vegetarian!"
    assert truncate_line(short, 3, SUFFIX) == short


def test_total_budget_never_keeps_a_partial_line_past_its_room() -> None:
    long_head = "- [persona|" + "s" * 60 + "] "
    out = apply_budget(["a" * 10, long_head + "x" * 100], per_line=0, total=10 + 1 + 45, suffix="…")
    assert out.lines == ["a" * 10]
    assert out.dropped == 1


def test_total_budget_never_cuts_through_a_truncation_suffix() -> None:
    lines = ["a" * 10, PREFIX + "x" * 300]
    out = apply_budget(lines, per_line=100, total=10 + 1 + 50, suffix=SUFFIX)
    assert len(out.lines) == 2
    head, _ = _split_cut(out.lines[1])
    assert set(head[len(PREFIX) :]) == {"x"}  # no piece of the suffix left inside
    assert len(out.lines[1]) <= 50


def test_bulk_index_build_matches_one_by_one() -> None:
    import random

    import numpy as np

    from langchain_tdai_recall.stores._index.keyword import KeywordIndex

    tok = get_tokenizer("bigram")
    rng = random.Random(3)
    words = ["coffee", "tea", "kyoto", "trip", "cat", "user", "用户", "喜欢", "咖啡", "旅行"]
    docs = [" ".join(rng.choices(words, k=rng.randint(1, 8))) for _ in range(300)]
    one, bulk = KeywordIndex("t"), KeywordIndex("t")
    for i, doc in enumerate(docs):
        one.add(i * 3, tok.document_tokens(doc))
    bulk.add_many([i * 3 for i in range(len(docs))], [tok.document_tokens(d) for d in docs])
    bulk.add_many([0, 0], [tok.document_tokens("cat"), tok.document_tokens("旅行 kyoto")])
    one.add(0, tok.document_tokens("旅行 kyoto"))
    for query in ["coffee trip", "用户喜欢咖啡", "cat", "kyoto tea user", "旅行"]:
        a = one.search(tok.query(query), limit=50)
        b = bulk.search(tok.query(query), limit=50)
        assert a.ids.tolist() == b.ids.tolist()
        assert np.allclose(a.bm25, b.bm25)
        assert np.allclose(a.coverage, b.coverage)
        assert np.allclose(a.ranked, b.ranked)
        assert a.scope_coverage == b.scope_coverage


def test_a_tiny_limit_on_a_line_of_one_long_tag_stays_cheap() -> None:
    import time

    line = PREFIX + "<" + "a" * 200_000
    started = time.perf_counter()
    cut = truncate_line(line, 5, SUFFIX)
    assert time.perf_counter() - started < 1.0
    assert len(cut) < 100
