"""The lead rule of the injection gate (issue 22): what the search ranks first, per message part.

The embedder is a table: each text has a fixed vector, so every relevance below is known. The
memories share no word with the requests, so the keyword leg adds nothing and the relevance is
`EMBEDDING_WEIGHT × cosine` (0.7 × 0.4 = 0.28 under the 0.3 threshold).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import pytest
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.recall.gate import LEAD_RANKS, injected, leads
from langchain_tdai_recall.recall.search import RankedHit, SearchOutcome
from langchain_tdai_recall.text.clauses import split_clauses
from langchain_tdai_recall.text.names import capitalised_names

USER = "u1"
DIM = 8
SPARE = DIM - 1
"""The axis no memory lies on: the rest of a request's vector, and every unknown text."""

PEANUTS = "Severely allergic to groundnuts"
KYOTO = "Booked a spring journey to the old Japanese capital"
NURSE = "Works night shifts at the hospital"
TEA = "Oolong every day with breakfast"
FRIEND = "Max from the office brews oolong"
AXES = {PEANUTS: 0, KYOTO: 1, NURSE: 2, TEA: 3, FRIEND: 4}


def _query(**cosines: float) -> list[float]:
    """A unit vector with the given cosine to each memory axis (by memory name)."""
    vector = [0.0] * DIM
    for name, value in cosines.items():
        vector[AXES[globals()[name]]] = value
    vector[SPARE] = math.sqrt(1 - sum(v * v for v in vector))
    return vector


MULTI = "Is satay sauce safe for me and what do I need for my trip?"
QUERIES = {
    "Which beverage do I like best?": _query(TEA=0.4),
    MULTI: _query(PEANUTS=0.4, KYOTO=0.3),
    "Is satay sauce safe for me": _query(PEANUTS=0.4),
    "what do I need for my trip": _query(KYOTO=0.35),
    "What beverage does Einstein like?": _query(TEA=0.4),
    "What beverage does Max like?": _query(TEA=0.1, FRIEND=0.4),
}


class _Table(Embeddings):
    """Fixed vectors: memories on their own axis, requests as in `QUERIES`."""

    def _vector(self, text: str) -> list[float]:
        if text in AXES:
            vector = [0.0] * DIM
            vector[AXES[text]] = 1.0
            return vector
        if text in QUERIES:
            return QUERIES[text]
        if text.startswith("filler"):  # near no request: ranked below every lead
            spare = 0.02 + 0.001 * len(text)
            vector = [0.0] * DIM
            vector[SPARE], vector[AXES[NURSE]] = spare, math.sqrt(1 - spare * spare)
            return vector
        vector = [0.0] * DIM
        vector[SPARE] = 1.0
        return vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


@pytest.fixture
def memory() -> Iterator[TdaiMemory]:
    with TdaiMemory.open(None, embeddings=_Table()) as mem:
        mem.add_memories(
            [{"id": k, "content": k} for k in (PEANUTS, KYOTO, NURSE, TEA, FRIEND)], user_id=USER
        )
        assert mem.flush(timeout=60)
        yield mem


def _block(memory: TdaiMemory, text: str) -> list[str]:
    result = memory.recall(text, user_id=USER)
    assert result is not None and result.error is None
    return [m.content for m in result.memories]


def test_the_premise_scores_are_under_the_threshold(memory: TdaiMemory) -> None:
    hits = memory.search_memories(MULTI, user_id=USER, min_score=0.0, limit=3)
    assert [(h.content, round(h.score, 3)) for h in hits[:2]] == [(PEANUTS, 0.28), (KYOTO, 0.21)]


def test_the_top_ranked_memory_leads_below_the_threshold(memory: TdaiMemory) -> None:
    """ "Which beverage do I like best?" beside the oolong memory (0.28): it is injected."""
    assert _block(memory, "Which beverage do I like best?") == [TEA]


def test_each_part_of_a_message_leads_on_its_own(memory: TdaiMemory) -> None:
    """The peanut + Kyoto case (0.28 / 0.21 for the whole message): the second part's own
    search ranks the trip first (0.245), so both reach the block."""
    assert split_clauses(MULTI) == ("Is satay sauce safe for me", "what do I need for my trip")
    assert _block(memory, MULTI) == [PEANUTS, KYOTO]


def test_lead_share_one_turns_the_rule_off() -> None:
    config = {"recall": {"lead_share": 1.0}}
    with TdaiMemory.open(None, embeddings=_Table(), config=config) as mem:
        mem.add_memories([{"content": k} for k in AXES], user_id=USER)
        assert mem.flush(timeout=60)
        assert _block(mem, MULTI) == []
        assert _block(mem, "Which beverage do I like best?") == []


def test_an_unknown_name_does_not_lead(memory: TdaiMemory) -> None:
    """A name the user's memories never mention: the request is about someone else."""
    assert capitalised_names("What beverage does Einstein like?") == ("Einstein",)
    assert _block(memory, "What beverage does Einstein like?") == []
    # a name the memories mention does not stop the lead
    assert _block(memory, "What beverage does Max like?") == [FRIEND]


def test_deterministic_whatever_the_order_of_writing() -> None:
    blocks = []
    for order in (list(AXES), list(reversed(AXES))):
        with TdaiMemory.open(None, embeddings=_Table()) as mem:
            mem.add_memories([{"content": k} for k in order], user_id=USER)
            assert mem.flush(timeout=60)
            blocks.append([_block(mem, MULTI) for _ in range(3)])
    assert blocks[0] == blocks[1] == [[PEANUTS, KYOTO]] * 3


def test_memories_ranked_below_never_remove_a_lead(memory: TdaiMemory) -> None:
    before = _block(memory, MULTI)
    for n in range(30):
        memory.add_memory("filler " + "x" * n, user_id=USER)
        assert memory.flush(timeout=60)
        assert _block(memory, MULTI) == before, n


def _hit(rowid: int, score: float, *, by_vector: bool = True) -> RankedHit:
    return RankedHit(rowid, score, score, 0.0, score / 0.7, 50, by_vector=by_vector)


def _leads(*hits: RankedHit) -> list[int]:
    outcome = SearchOutcome(list(hits), "hybrid")
    return [h.rowid for h in injected(outcome, threshold=0.3, limit=5, lead_share=0.75)]


def test_only_the_top_ranks_lead() -> None:
    hits = [_hit(i, 0.25) for i in range(LEAD_RANKS + 2)]
    assert _leads(*hits) == list(range(LEAD_RANKS))
    assert leads(hits, threshold=0.3, lead_share=0.75) == set(range(LEAD_RANKS))
    assert _leads(_hit(1, 0.224), _hit(2, 0.225)) == [2]  # the bar is 0.75 × 0.3


def test_a_hit_of_the_keyword_leg_alone_does_not_lead() -> None:
    """A memory the vector leg did not find (only the keyword or the time leg) never leads."""
    assert _leads(_hit(1, 0.28, by_vector=False), _hit(2, 0.26)) == [2]


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("Which tea do I like?", ()),
        ("Can I eat peanuts at the Kyoto trip dinner?", ()),
        (
            "I need to sort out the dog sitter and the mail hold; when am I away for Christmas?",
            ("I need to sort out the dog sitter", "the mail hold", "when am I away for Christmas"),
        ),
        ("我想订机票，另外我的护照什么时候过期？", ("我想订机票", "我的护照什么时候过期")),
        ("salt and pepper", ()),
        ("Book a table. Thanks!", ()),
    ],
)
def test_split_clauses(text: str, parts: Sequence[str]) -> None:
    assert split_clauses(text) == tuple(parts)


def test_capitalised_names_read_english_capitalisation_only() -> None:
    assert capitalised_names("Where did I meet Anna in Lisbon? Lisbon was sunny.") == (
        "Anna",
        "Lisbon",
    )
    assert capitalised_names("I think I'll go on Monday in May") == ()
    assert capitalised_names("我在北京见了谁？") == ()


def test_a_time_question_leads_only_with_a_memory_of_that_time() -> None:
    other_month = RankedHit(1, 0.28, 0.28, 0.0, 0.4, 50, by_vector=True)
    that_month = RankedHit(2, 0.1, 0.25, 0.0, 0.14, 50, in_range=True, by_vector=True)
    outcome = SearchOutcome([other_month, that_month], "hybrid", time_narrow=True)
    chosen = injected(outcome, threshold=0.3, limit=5, lead_share=0.75)
    assert 1 not in {h.rowid for h in chosen}
    outcome.time_narrow = False  # the same ranking without a time: the first leads
    assert 1 in {h.rowid for h in injected(outcome, threshold=0.3, limit=5, lead_share=0.75)}


class _Counting(_Table):
    """`_Table` with a batch method, counting the calls recall makes."""

    def __init__(self) -> None:
        self.single: list[str] = []
        self.batches: list[list[str]] = []

    def embed_query(self, text: str) -> list[float]:
        self.single.append(text)
        return super().embed_query(text)

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.batches.append(list(texts))
        return [super(_Counting, self).embed_query(t) for t in texts]


def test_a_multi_part_message_embeds_its_parts_in_one_call() -> None:
    counting = _Counting()
    with TdaiMemory.open(None, embeddings=counting) as mem:
        mem.add_memories([{"content": k} for k in AXES], user_id=USER)
        assert mem.flush(timeout=60)
        assert _block(mem, MULTI) == [PEANUTS, KYOTO]
        assert counting.batches == [[MULTI, *split_clauses(MULTI)]]
        assert counting.single == []
        # a message of one part keeps the single query embedding
        assert _block(mem, "Which beverage do I like best?") == [TEA]
        assert counting.single == ["Which beverage do I like best?"]
        assert len(counting.batches) == 1


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("我有驾照吗？想周末租车去郊区", ()),
        ("What is my blood type? I lost the report.", ()),
        ("我的驾照是什么时候到期的？需要去换证吗？", ("我的驾照是什么时候到期的", "需要去换证吗")),
        (
            "Can I eat peanuts? And what about the Kyoto dinner.",
            ("Can I eat peanuts", "what about the Kyoto dinner"),
        ),
    ],
)
def test_a_closing_statement_after_a_question_is_no_part(text: str, parts: Sequence[str]) -> None:
    """The sentence after a question that says why it is asked is context, not a request."""
    assert split_clauses(text) == tuple(parts)
