"""Typed records and results shared by the store, the recall engine, the tools and the CLI."""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = [
    "MEMORY_TYPES",
    "Change",
    "ErasedScope",
    "ForgetReport",
    "ImportReport",
    "IndexCacheStats",
    "Language",
    "LanguageSetting",
    "MemoryChannel",
    "MemoryHit",
    "MemoryRecord",
    "MemoryType",
    "MemoryVersion",
    "MessageHit",
    "MessageRecord",
    "OnError",
    "RecallResult",
    "RecallStrategy",
    "RecalledMemory",
    "Reclaim",
    "SceneBlock",
    "SceneInfo",
    "Scope",
    "ScopeStats",
    "StoreStats",
    "Strategy",
]


def iso_utc(moment: dt.datetime | None = None) -> str:
    """A moment (default: now) as every store writes times.

    UTC ISO-8601 with milliseconds and `Z`, so stored times compare correctly as text. A naive
    moment is taken as UTC.
    """
    if moment is None:
        moment = dt.datetime.now(dt.UTC)
    elif moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


MemoryType: TypeAlias = Literal["persona", "episodic", "instruction"]
"""Kind of an L1 memory.

- `persona`: identity, preferences and stable facts about the user.
- `episodic`: an event or activity, optionally with activity times.
- `instruction`: a standing rule the user gave the assistant.
"""

MEMORY_TYPES: tuple[MemoryType, ...] = ("persona", "episodic", "instruction")

Strategy: TypeAlias = Literal["hybrid", "embedding", "keyword"]
"""Configured L1 search strategy.

- `hybrid`: keyword and embedding legs, each thresholded, fused by reciprocal rank fusion.
- `embedding`: vector similarity only.
- `keyword`: keyword relevance only.
"""

RecallStrategy: TypeAlias = Literal["hybrid", "embedding", "keyword", "skipped"]
"""Strategy a recall actually used: the legs whose scores ranked its candidates.

`hybrid` or `embedding` only when the embedding leg scored at least one memory for this message;
`keyword` when only the keyword leg did (no embedder, an embedder that failed or timed out, no
vector computed yet or a store re-embedding after an embedder change, an empty scope); `skipped`
when the text was too short to search.
"""

MemoryChannel: TypeAlias = Literal["block", "standing_rule", "pinned", "profile"]
"""Where a recalled memory reached the model.

- `block`: the `<relevant-memories>` block in front of the user's message, chosen by search for
  this message.
- `standing_rule`: `<standing-instructions>` in the system context (instructions of priority -1),
  every turn.
- `pinned`: `<key-memories>` in the system context (priority >= `recall.pin_priority`), every turn.
- `profile`: `<user-profile>` in the system context (the scope's other important memories, as far
  as the profile's budget reaches), every turn.
"""

Language: TypeAlias = Literal["zh", "en"]
"""Language of the text this package writes into prompts."""

LanguageSetting: TypeAlias = Literal["auto", "zh", "en"]
"""Configured language of that text.

- `auto`: the memory block follows the language of the user's message; the system context follows
  a signal that does not change from turn to turn (the app's own system prompt, else English), so
  it stays byte-identical.
- `zh` / `en`: always Chinese / always English.
"""

OnError: TypeAlias = Literal["skip", "raise"]
"""Failure policy of the recall path.

- `skip`: log a warning and inject nothing (the default; recall never breaks an agent).
- `raise`: raise the error to the caller.
"""


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memory a call reads or writes: one user, and optionally one of their agents.

    Every L0-L3 item belongs to exactly one scope, and every search sees only its own scope.
    `agent_id=None` is the user's memory shared by all their agents.
    """

    user_id: str
    """Owner of the memory."""
    agent_id: str | None = None
    """Agent the memory belongs to; `None` is the user's shared memory."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryRecord:
    """One L1 memory as stored.

    Times are ISO-8601 strings. `activity_start_time`, `activity_end_time` and `timestamp` describe
    when the remembered thing happened (a date such as `2025-05-01` or a full date-time);
    `created_at` and `updated_at` are write times in UTC and are never shown as activity times.
    """

    id: str
    """Unique within its scope."""
    content: str
    """The memory text."""
    type: MemoryType = "episodic"
    """`persona`, `episodic` or `instruction`."""
    scene_name: str = ""
    """Free-form situation label; empty when none."""
    priority: int = 50
    """0..100 (higher is more important); -1 marks a strict global instruction."""
    activity_start_time: str | None = None
    """Start of the remembered activity."""
    activity_end_time: str | None = None
    """End of the remembered activity."""
    timestamp: str | None = None
    """Point in time of the remembered event, when it has no start/end."""
    user_id: str = "default_user"
    """Owner of the memory."""
    agent_id: str | None = None
    """Agent the memory belongs to; `None` is the user's shared memory."""
    session_key: str = ""
    """Conversation the memory was extracted from."""
    source_message_ids: tuple[str, ...] = ()
    """L0 message ids the memory was extracted from."""
    created_at: str = ""
    """First write time (UTC, ISO-8601)."""
    updated_at: str = ""
    """Last write time (UTC, ISO-8601)."""
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """A small JSON object of the application's own (str keys, JSON values); `search_memories`
    filters on it by equality. Items of `TdaiStore` keep their value, namespace and key under
    `"tdai_store"`."""
    expires_at: str | None = None
    """When the memory expires (UTC, ISO-8601), or `None` for never. An expired memory is never
    searched, recalled, pinned or shown, and is deleted by the background sweep."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRecord:
    """One L0 conversation message as stored."""

    id: str
    """Unique within its scope."""
    role: str
    """`user` or `assistant` (other roles are kept as given)."""
    content: str
    """The message text as typed, without any injected memory."""
    session_key: str
    """Conversation the message belongs to."""
    session_id: str = ""
    """Host session id, when known."""
    recorded_at: str = ""
    """Write time (UTC, ISO-8601)."""
    user_id: str = "default_user"
    """Owner of the message."""
    agent_id: str | None = None
    """Agent of the conversation; `None` is the user's shared memory."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryHit:
    """An L1 search result."""

    id: str
    """Memory id."""
    content: str
    """Memory text."""
    type: MemoryType
    """Memory type."""
    scene_name: str
    """Situation label, or empty."""
    priority: int
    """Priority of the memory."""
    score: float
    """Relevance in [0, 1]: 0.7 x cosine + 0.3 x keyword coverage (hybrid), or the one leg's
    number (see `recall.search`). Hits come ranked best first; the order also weighs how rare
    the matched words are, so it can differ slightly from the order of `score`."""
    keyword_score: float | None = None
    """Keyword coverage in [0, 1]: the weighted share of the query's words the text contains."""
    embedding_score: float | None = None
    """Cosine similarity, when the embedding leg ran and the memory has a vector."""
    record: MemoryRecord | None = field(default=None, repr=False, compare=False)
    """The full stored record."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageHit:
    """An L0 conversation-search result."""

    id: str
    """Message id."""
    role: str
    """`user` or `assistant`."""
    content: str
    """Message text."""
    session_key: str
    """Conversation the message belongs to."""
    recorded_at: str
    """Write time (UTC, ISO-8601)."""
    score: float
    """Relevance in [0, 1]: 0.7 x cosine + 0.3 x keyword coverage (hybrid), or the one leg's
    number (see `recall.search`). Hits come ranked best first; the order also weighs how rare
    the matched words are, so it can differ slightly from the order of `score`."""
    keyword_score: float | None = None
    """Keyword coverage in [0, 1]: the weighted share of the query's words the text contains."""
    embedding_score: float | None = None
    """Cosine similarity, when the embedding leg ran and the memory has a vector."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecalledMemory:
    """One L1 memory injected by recall, where it reached the model, with its real scores."""

    id: str
    """Memory id."""
    content: str
    """Memory text as stored (before escaping and budgeting)."""
    score: float | None
    """Relevance to this turn's message in [0, 1]: 0.7 x cosine + 0.3 x keyword coverage
    (hybrid), or the one leg's number (see `recall.search`). For the memory block, the number
    the injection threshold compared (never `None`). A memory of the system context (`channel`
    other than `block`) is injected whatever the message; it has the score this turn's search
    gave it when the search scored it, and `None` when the search did not (it was not among
    the candidates, or no search ran)."""
    type: MemoryType
    """Memory type."""
    scene_name: str = ""
    """Situation label, or empty."""
    keyword_score: float | None = None
    """Keyword coverage in [0, 1], when the keyword leg ran."""
    embedding_score: float | None = None
    """Cosine similarity, when the embedding leg ran and the memory has a vector."""
    rerank_score: float | None = None
    """The reranker's `relevance_score`, when a reranker chose the memory and gave one."""
    truncated: bool = False
    """Whether the injected line was cut to fit a budget."""
    channel: MemoryChannel = "block"
    """Where the memory reached the model: the memory block, or a part of the system context."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SceneInfo:
    """Metadata of one L2 scene block."""

    name: str
    """Scene name: the handle used by `read_scene` and `tdai_read_scene`."""
    summary: str
    """One-line gist of the scene."""
    heat: int
    """How often the scene was reinforced; higher is more important."""
    created: str
    """Creation time (UTC, ISO-8601)."""
    updated: str
    """Last rewrite time (UTC, ISO-8601)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SceneBlock:
    """One L2 scene block: metadata plus its Markdown body."""

    info: SceneInfo
    """Metadata."""
    body: str
    """Markdown body."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallResult:
    """What recall found for one turn, ready to inject.

    `prepend_context` goes in front of the latest human message (it changes every turn);
    `append_system_context` is appended to the system message (it changes only when the persona
    or scenes change, so provider prompt caches stay warm).
    """

    prepend_context: str | None
    """The `<relevant-memories>` block, or `None` when no memory survived."""
    append_system_context: str | None
    """Persona, scene navigation and tools guide, or `None` when there is nothing to add."""
    memories: tuple[RecalledMemory, ...] = ()
    """The memory block's L1 memories in order, each with its score (`channel="block"`): one per
    line of `prepend_context`. The memories of the system context are in `injected`."""
    persona: str | None = None
    """The persona text that was injected."""
    scene_count: int = 0
    """Number of scenes listed in the navigation."""
    strategy: RecallStrategy = "skipped"
    """Strategy actually used."""
    timings_ms: dict[str, float] = field(default_factory=dict)
    """Per-step durations in milliseconds (`total`, `keyword`, `embed`, `vector`, ...)."""
    truncated: int = 0
    """Number of memory lines cut to fit a budget."""
    dropped: int = 0
    """Number of memory lines dropped by the total budget."""
    error: str | None = None
    """Set when a search leg failed and recall degraded."""
    standing_rules: tuple[MemoryRecord, ...] = ()
    """Instructions with priority -1 (absolute standing rules), injected in the system context every
    turn instead of being left to search; oldest first."""
    pinned: tuple[MemoryRecord, ...] = ()
    """Memories of priority >= `recall.pin_priority` (and instructions >=
    `recall.pin_instruction_priority`), injected in the system context every turn; highest
    priority first. They are left out of the memory block."""
    profile: tuple[MemoryRecord, ...] = ()
    """The user's profile in the system context (`<user-profile>`): the scope's other memories of
    priority 30 or more in profile order (`stores._index.profile`) whose lines fit
    `recall.profile_max_tokens` (estimated tokens). Stable across turns until those memories
    change, and within a session (`session_key`) until it ends or the pinned memories change
    (`recall.holds`); a profile memory the request is about may also appear in the memory
    block."""
    pending_vectors: int = 0
    """Memories of the scope without a vector at recall time (computed in the background after a
    write, or being re-embedded): the vector leg could not see them. With none computed at all
    the search ran on keywords and `strategy` says `keyword`."""
    reranked: bool = False
    """Whether a reranker chose `memories` (otherwise the relevance threshold did)."""
    language: Language = "en"
    """Language the memory block was written in."""
    injected: tuple[RecalledMemory, ...] = ()
    """Every L1 memory that reached the model this turn, with its channel and score, in the
    order the model reads them: the system context's standing rules, pinned memories and
    profile, then the memory block (`memories`). A profile memory the message is about is
    listed twice, once per channel that carries it."""
    time_ranges: tuple[tuple[str, str], ...] = ()
    """Local date ranges the message was read as asking about (`recall.time_aware`), as ISO
    dates (first, last, inclusive), like the record's times: memories whose activity time (else
    write time) falls in them were favoured. Empty when the message names no time."""

    @property
    def injected_chars(self) -> int:
        """Code points this result adds to the prompt (both blocks)."""
        return len(self.prepend_context or "") + len(self.append_system_context or "")

    def _repr_html_(self) -> str:
        """Render for Jupyter: a summary line, a score table and both blocks."""
        esc = html.escape
        rows = "".join(
            "<tr>"
            f"<td>{i}</td><td>{'' if m.score is None else f'{m.score:.4f}'}</td>"
            f"<td>{'' if m.keyword_score is None else f'{m.keyword_score:.3f}'}</td>"
            f"<td>{'' if m.embedding_score is None else f'{m.embedding_score:.3f}'}</td>"
            f"<td>{esc(m.type)}</td><td>{esc(m.scene_name)}</td>"
            f"<td>{esc(m.content)}{' ✂' if m.truncated else ''}</td>"
            "</tr>"
            for i, m in enumerate(self.memories, 1)
        )
        timings = ", ".join(f"{k}={v:.1f} ms" for k, v in self.timings_ms.items())
        parts = [
            "<div class='tdai-recall-result'>",
            f"<p><b>RecallResult</b> strategy=<code>{esc(self.strategy)}</code>, "
            f"memories={len(self.memories)}, truncated={self.truncated}, "
            f"dropped={self.dropped}, injected={self.injected_chars} chars, "
            f"pinned={len(self.pinned)}, profile={len(self.profile)}"
            f"{f', pending vectors={self.pending_vectors}' if self.pending_vectors else ''}"
            f"{', error=' + esc(self.error) if self.error else ''}<br/>"
            f"<small>{esc(timings)}</small></p>",
        ]
        if rows:
            parts.append(
                "<table><thead><tr><th>#</th><th>score</th><th>keyword</th>"
                "<th>embedding</th><th>type</th><th>scene</th><th>content</th></tr></thead>"
                f"<tbody>{rows}</tbody></table>"
            )
        for title, text in (
            ("prepend_context", self.prepend_context),
            ("append_system_context", self.append_system_context),
        ):
            if text:
                parts.append(
                    f"<details><summary>{title}</summary>"
                    f"<pre style='white-space:pre-wrap'>{esc(text)}</pre></details>"
                )
        parts.append("</div>")
        return "".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScopeStats:
    """Counts for one scope."""

    user_id: str
    """Owner."""
    agent_id: str | None
    """Agent, or `None` for the user's shared memory."""
    memories: int
    """L1 memories that have not expired (what `list_memories` returns, swept or not)."""
    messages: int
    """L0 messages."""
    scenes: int
    """L2 scene blocks."""
    has_persona: bool
    """Whether an L3 persona is stored."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexCacheStats:
    """This process's cache of derived search indexes (`store.index_cache_mib`).

    Counts since the store was opened. An eviction releases a scope's index; its next search
    rebuilds it from the rows (or its snapshot), which `misses` counts.
    """

    entries: int
    """(scope, layer) indexes held now."""
    bytes: int
    """Their estimated size in bytes."""
    budget: int | None
    """The bound in bytes (`None`: unbounded)."""
    hits: int = 0
    """Uses of an index already held."""
    misses: int = 0
    """Uses that had to build (or restore) an index."""
    evictions: int = 0
    """Indexes released to keep within the budget."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreStats:
    """What a store holds, and how it is indexed."""

    path: str | None
    """Store directory, or `None` for an in-memory store."""
    embedder: str | None
    """Identity of the embedder (`None`: keyword-only)."""
    dimensions: int | None
    """Vector dimension, once known."""
    tokenizer: str
    """Identity of the keyword tokeniser."""
    memories: int
    """Unexpired L1 memories in the selected scopes."""
    messages: int
    """L0 messages in the selected scopes."""
    scenes: int
    """L2 scene blocks in the selected scopes."""
    personas: int
    """Scopes with an L3 persona."""
    indexed_scopes: int
    """Scopes whose derived indexes are loaded in this process."""
    scopes: tuple[ScopeStats, ...] = ()
    """Per-scope counts."""
    pending_vectors: int = 0
    """Memories and messages in the selected scopes still waiting for a vector from the current
    embedder (written moments ago, re-embedding after an embedder change, or failed and due for
    a retry); they are keyword-searchable meanwhile."""
    index_cache: IndexCacheStats | None = None
    """This process's index cache: size, budget, hit rate and evictions."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportReport:
    """Outcome of `TdaiMemory.import_upstream`."""

    source: str
    """The data directory that was read."""
    memories: int = 0
    """L1 memories written (new or updated)."""
    messages: int = 0
    """L0 messages written."""
    scenes: int = 0
    """Scene blocks written."""
    persona: bool = False
    """Whether a persona was imported."""
    unchanged: int = 0
    """Items already present from an earlier import."""
    superseded: int = 0
    """Records skipped because the database says a later update or merge replaced them."""
    skipped: tuple[str, ...] = ()
    """One line per skipped item, saying what and why."""


Change = Literal["update", "merge", "merged", "delete"]
"""What ended a version of a memory: an update, a merge into a new memory (`merge`), being merged
into another memory (`merged`), or a deletion."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryVersion:
    """One version of an L1 memory, as listed by `TdaiMemory.history(memory_id)`.

    Versions are numbered from 1; the last one is the memory as it is now (`current=True`)
    unless the memory was deleted or merged into another one.
    """

    version: int
    """1 for the first version, then one more for every change."""
    record: MemoryRecord
    """The memory as it was in this version (`updated_at` is when this version was written)."""
    current: bool
    """Whether this is the stored memory now."""
    change: Change | None
    """What ended this version: `update`, `merge` (it absorbed other memories), `merged` (it
    was absorbed into `related_ids[0]`) or `delete`; `None` for the current version."""
    changed_by: str | None
    """Who ended it: `api`, `extraction` or `tool`; `None` for the current version."""
    changed_at: str | None
    """When it was ended (UTC, ISO-8601); `None` for the current version."""
    related_ids: tuple[str, ...] = ()
    """For `merge` the absorbed memories; for `merged` the memory that absorbed this one."""


# -- erasure (issue 16) ---------------------------------------------------------------------------


Reclaim: TypeAlias = Literal["vacuum", "full", "none"]
"""How `TdaiMemory.forget` makes a PostgreSQL server drop the erased rows from its files:
`vacuum` (`VACUUM` of the touched tables: the rows leave the tables and their indexes at once,
readers and writers are not blocked), `full` (`VACUUM (FULL)`: the tables are rewritten without
them; every server waits for each rewrite), `none` (left to autovacuum). The directory store
overwrites what it frees while it erases, whatever is asked."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ErasedScope:
    """What `TdaiMemory.forget` erased in one scope (counts of rows, files and documents)."""

    user_id: str
    agent_id: str | None
    """`None`: the user's shared memory."""
    memories: int = 0
    """L1 memories."""
    memory_versions: int = 0
    """Earlier versions of memories kept in the history (deleted memories included)."""
    messages: int = 0
    """L0 conversation messages."""
    vectors: int = 0
    """Stored vectors among the erased memories and messages."""
    scenes: int = 0
    """L2 scene blocks."""
    persona: bool = False
    """Whether an L3 persona was erased."""
    formation_state: int = 0
    """Memory formation's rows: session cursors, the scope's state, queued scene work, leases."""
    index_snapshots: int = 0
    """Persisted index snapshot files of the scope (the store's index cache)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForgetReport:
    """Outcome of `TdaiMemory.forget`: one `ErasedScope` per scope erased, and the totals."""

    user_id: str
    agent_id: str | None
    """The scope asked for (`None` with `all_agents=False`: the user's shared memory)."""
    all_agents: bool
    """Whether every scope of the user was erased."""
    scopes: tuple[ErasedScope, ...] = ()
    """Each scope erased, the shared one first (a scope that held nothing is listed too)."""
    unnamed_scopes: int = 0
    """With `all_agents`: scopes of the user erased although their agent id could not be read
    back (a directory store's folder of a long agent id that lost its `.id` file), with their
    persona and scenes; not in `scopes`."""
    reclaim: Reclaim = "vacuum"
    """How the erased rows were reclaimed from the database files (see `Reclaim`)."""
    reclaimed: tuple[str, ...] = ()
    """PostgreSQL tables vacuumed after the erasure (empty for the directory store, with
    `reclaim="none"`, and for a table the server refused to vacuum, which is logged)."""

    def _total(self, name: str) -> int:
        return sum(int(getattr(s, name)) for s in self.scopes)

    @property
    def memories(self) -> int:
        """L1 memories erased."""
        return self._total("memories")

    @property
    def memory_versions(self) -> int:
        """History versions erased."""
        return self._total("memory_versions")

    @property
    def messages(self) -> int:
        """L0 messages erased."""
        return self._total("messages")

    @property
    def vectors(self) -> int:
        """Stored vectors erased."""
        return self._total("vectors")

    @property
    def scenes(self) -> int:
        """Scene blocks erased."""
        return self._total("scenes")

    @property
    def personas(self) -> int:
        """Personas erased."""
        return self._total("persona")

    @property
    def formation_state(self) -> int:
        """Formation state rows erased."""
        return self._total("formation_state")

    @property
    def index_snapshots(self) -> int:
        """Index snapshot files erased."""
        return self._total("index_snapshots")
