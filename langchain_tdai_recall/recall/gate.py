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

- **The memory is held out of the system context.** A conversation keeps the user profile it
  started with (`recall.holds`), so a memory that would now be in the profile but was written
  after the session's profile was chosen (typically by memory formation during the
  conversation) reaches the model only through this block. The engine passes those rows as
  `held_out` (the signal is just that set of row references); such a memory needs only
  `ON_TOPIC_SHARE × threshold`, as the other memories of an on-topic message do.

- **The memory leads the ranking.** In a store of hundreds, the memory the search ranks first
  for a message means more at relevance 0.25 than the same number does among five memories. The
  top `LEAD_RANKS` candidates of the fused ranking (pinned rows left out) need only
  `recall.lead_share × threshold` (times the priority factor), when the vector leg found them
  itself (`RankedHit.by_vector`: not a hit of the keyword or time leg alone, whose relevance
  says less) and the message names no capitalised name the user's memories never mention
  (`lead_blocked`, decided by the engine with `text.names`: "What did Einstein say?" is about
  someone else). When the message's time picks the writer's memories out (`recall.when`),
  only a memory of that time leads. This is a rule of rank, not of margin: a memory added
  below the leads cannot change them. A multi-part message is split into its parts
  (`text.clauses`) and each part's search leads on its own (see `recall.engine`).

Every rule is monotonic: adding memories can only raise the scope's word coverage and the best
match, and a memory that ranks below the leads leaves them leading, so more memories never
yield fewer injected ones unless they rank above them.

When the message names a time, the memories of that time may pass on a rule of their own
(`recall.when.with_time`: they must match the rest of the words), without pushing out a memory
that reaches the full threshold on its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from langchain_tdai_recall.recall.search import RankedHit, SearchOutcome
from langchain_tdai_recall.recall.when import with_time

__all__ = [
    "ANCHOR_SHARE",
    "BOOST_FROM",
    "BOOST_TO",
    "LEAD_RANKS",
    "ON_TOPIC_COVERAGE",
    "ON_TOPIC_SHARE",
    "injected",
    "leads",
    "priority_factor",
]

ON_TOPIC_COVERAGE: Final = 0.75
"""Share of the message's words that must occur in the scope for the message to be on topic."""

ANCHOR_SHARE: Final = 0.85
"""Share of the threshold the best match must reach for the message to be on topic."""

ON_TOPIC_SHARE: Final = 0.5
"""Share of the threshold the other memories need once the message is on topic."""

LEAD_RANKS: Final = 2
"""How many of the best-ranked candidates may pass on the lead rule (`recall.lead_share`)."""

BOOST_FROM: Final = 70
"""Priority from which a memory's threshold is lowered."""

BOOST_TO: Final = 100
"""Priority at which the threshold would reach zero."""


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
    held_out: Iterable[int] = (),
    lead_share: float = 1.0,
    lead_blocked: bool = False,
) -> list[RankedHit]:
    """The hits recall injects, best ranked first, at most `limit`.

    Args:
        outcome: The ranked candidates of the turn's message.
        threshold: `recall.score_threshold` (or the keyword threshold for keyword-only search).
        limit: `recall.max_results`.
        exclude: Row references already in the system context (pinned memories).
        held_out: Row references of memories the system context would show in the user
            profile but does not, because the session holds the profile it started with
            (`recall.holds`).
        lead_share: `recall.lead_share`: the share of the threshold the top `LEAD_RANKS`
            candidates need (1 turns the lead rule off).
        lead_blocked: Whether no candidate may lead (the message names a name the user's
            memories never mention).
    """
    skip = set(exclude)
    candidates = [h for h in outcome.hits if h.rowid not in skip]
    if not candidates or limit <= 0:
        return []
    best = max(h.score for h in candidates)
    on_topic = outcome.scope_coverage >= ON_TOPIC_COVERAGE and best >= ANCHOR_SHARE * threshold
    base = threshold * (ON_TOPIC_SHARE if on_topic else 1.0)
    relaxed = _held_out(candidates, set(held_out), threshold)
    if not lead_blocked and lead_share < 1.0:
        timed = outcome.time_only or outcome.time_narrow
        relaxed |= leads(candidates, threshold=threshold, lead_share=lead_share, timed=timed)
    relevant = [
        h
        for h in candidates
        if h.score >= base * priority_factor(h.priority) - 1e-6 or h.rowid in relaxed
    ]
    return with_time(
        outcome,
        candidates,
        relevant,
        threshold=threshold,
        limit=limit,
        priority_factor=priority_factor,
    )


def leads(
    candidates: list[RankedHit], *, threshold: float, lead_share: float, timed: bool = False
) -> set[int]:
    """The rows among the top `LEAD_RANKS` candidates that pass on the lead rule (see above).

    `timed`: the message's time picks the writer's memories out (`SearchOutcome.time_narrow`
    or `time_only`); then only a memory of that time may lead ("what did I do last month?"
    leads with nothing of another month).
    """
    return {
        h.rowid
        for h in candidates[:LEAD_RANKS]
        if h.by_vector
        and (h.in_range or not timed)
        and h.score >= lead_share * threshold * priority_factor(h.priority) - 1e-6
    }


def _held_out(candidates: list[RankedHit], held_out: set[int], threshold: float) -> set[int]:
    """The held-out rows (see `injected`) the message is about: at `ON_TOPIC_SHARE` of it."""
    bar = ON_TOPIC_SHARE * threshold
    return {
        h.rowid
        for h in candidates
        if h.rowid in held_out and h.score >= bar * priority_factor(h.priority) - 1e-6
    }
