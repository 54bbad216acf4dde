"""Which ranked memories recall injects: the relevance threshold, relaxed where it pays.

The agent's own searches (`search_memories`, the tools) return the best-ranked hits above a low
floor; automatic injection is stricter, because nobody asked for it. One memory is injected when
its relevance (`RankedHit.score`) reaches its threshold, which starts at `recall.score_threshold`
and is relaxed in two cases, both measured in `benchmarks/results/quality.md`:

- **The message is about this user's memories.** When at least `ON_TOPIC_COVERAGE` of its words
  occur somewhere in the scope and its best match reaches `ANCHOR_SHARE × threshold`, the other
  memories need only `ON_TOPIC_SHARE × threshold`: a multi-part question ("can I eat peanuts at
  the Kyoto trip dinner?") then brings the memory that answers each part. A message whose words
  mostly never occur in the user's memories (typically a question about someone or something
  else) keeps the full threshold.
- **The memory is important.** Between priority `BOOST_FROM` and `BOOST_TO` the threshold falls
  linearly towards zero: a safety fact or a standing preference is cheap to show and costly to
  miss. (At `recall.pin_priority` and above, memories are pinned into the system context
  instead, see `recall.engine`.)

A third path serves **time questions** ("what did I buy last month?"): when the message names a
time (`recall.time_aware`), the search flags the candidates whose activity time (else write time)
falls in it (`RankedHit.in_range`, see `recall.search`). When that time picks memories out (a
few months at most, `SearchOutcome.time_narrow`; "this year" rather names the present), such a
memory is injected when its relevance reaches `IN_RANGE_BEST_SHARE` of the best in-range
candidate's and `IN_RANGE_FLOOR × threshold`: the memories of that time that match the rest of
the words ("buy"), not every memory of the month. When the rest of the message is only question
words ("what did I do last weekend?", `SearchOutcome.time_only`) the in-range candidates pass as
ranked, up to `recall.max_results`. The time only adds: a memory that reaches the full
threshold on its own keeps its place (dropped only by `recall.max_results` memories that do so
too), and the on-topic and in-range ones share what is left, by their boosted rank.

Every rule is monotonic: adding memories can only raise the scope's word coverage and the best
match, so more memories never yield fewer injected ones. (A new in-range memory can raise the
in-range bar, but only by ranking above the memories it then leaves out.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from langchain_tdai_recall.recall.search import TIME_RANK_BOOST, RankedHit, SearchOutcome

__all__ = [
    "ANCHOR_SHARE",
    "BOOST_FROM",
    "BOOST_TO",
    "IN_RANGE_BEST_SHARE",
    "IN_RANGE_FLOOR",
    "ON_TOPIC_COVERAGE",
    "ON_TOPIC_SHARE",
    "injected",
    "priority_factor",
]

ON_TOPIC_COVERAGE: Final = 0.75
"""Share of the message's words that must occur in the scope for the message to be on topic."""

ANCHOR_SHARE: Final = 0.85
"""Share of the threshold the best match must reach for the message to be on topic."""

ON_TOPIC_SHARE: Final = 0.5
"""Share of the threshold the other memories need once the message is on topic."""

BOOST_FROM: Final = 70
"""Priority from which a memory's threshold is lowered."""

BOOST_TO: Final = 100
"""Priority at which the threshold would reach zero."""


IN_RANGE_BEST_SHARE: Final = 0.4
"""Share of the best in-range candidate's relevance another in-range memory needs."""

IN_RANGE_FLOOR: Final = 1 / 6
"""Share of the threshold every in-range memory needs (0.05 at the default 0.3), unless the
message asks only about the time."""


def priority_factor(priority: int) -> float:
    """Multiplier of the threshold for a memory of `priority` (1 below `BOOST_FROM`)."""
    if priority <= BOOST_FROM:
        return 1.0
    return max(0.0, 1.0 - (priority - BOOST_FROM) / (BOOST_TO - BOOST_FROM))


def injected(
    outcome: SearchOutcome,
    *,
    threshold: float,
    limit: int,
    exclude: Iterable[int] = (),
) -> list[RankedHit]:
    """The hits recall injects, best ranked first, at most `limit`.

    Args:
        outcome: The ranked candidates of the turn's message.
        threshold: `recall.score_threshold` (or the keyword threshold for keyword-only search).
        limit: `recall.max_results`.
        exclude: Row references already in the system context (pinned memories).
    """
    skip = set(exclude)
    candidates = [h for h in outcome.hits if h.rowid not in skip]
    if not candidates or limit <= 0:
        return []
    best = max(h.score for h in candidates)
    on_topic = outcome.scope_coverage >= ON_TOPIC_COVERAGE and best >= ANCHOR_SHARE * threshold
    base = threshold * (ON_TOPIC_SHARE if on_topic else 1.0)
    relevant = [h for h in candidates if h.score >= base * priority_factor(h.priority) - 1e-6]
    bar = _in_range_bar(candidates, threshold, outcome)
    if bar == float("inf"):
        return relevant[:limit]
    # The time adds memories. It never pushes out one that reaches the full threshold on its
    # own: those are chosen first, in their order without the time's boost. The rest of
    # `limit` goes by the boosted order to the on-topic and in-range ones.
    strong = [h for h in relevant if h.score >= threshold * priority_factor(h.priority) - 1e-6]
    strong.sort(key=lambda h: -(h.rank - TIME_RANK_BOOST if h.in_range else h.rank))
    chosen = {h.rowid for h in strong[:limit]}
    passing = {h.rowid for h in relevant}
    rest = [
        h
        for h in candidates
        if h.rowid not in chosen and (h.rowid in passing or (h.in_range and h.score >= bar - 1e-6))
    ]
    chosen.update(h.rowid for h in rest[: max(limit - len(chosen), 0)])
    return [h for h in candidates if h.rowid in chosen]


def _in_range_bar(candidates: list[RankedHit], threshold: float, outcome: SearchOutcome) -> float:
    """The relevance an in-range candidate needs (infinite when the rule does not apply)."""
    scores = [h.score for h in candidates if h.in_range]
    if not scores:
        return float("inf")
    if outcome.time_only:
        return 0.0
    if not outcome.time_narrow:
        return float("inf")
    return max(IN_RANGE_FLOOR * threshold, IN_RANGE_BEST_SHARE * max(scores))
