"""Shared data loading and retrieval metrics for the quality benchmarks.

Nothing here talks to `langchain_tdai_recall`; the scripts beside this module do. Keeping the data
parsing and the metrics separate lets them be unit-tested on tiny synthetic fixtures and reused by
both benchmark scripts.

LoCoMo layout and the evidence-id cleaning rules are described in the README next to
`locomo_dev.json`; zh_eval's layout in the README next to `users.json`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall.text.clauses import split_clauses
from langchain_tdai_recall.text.tokens import estimate_tokens

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA_ROOT = REPO_ROOT.parent / "shared" / "data"

# --------------------------------------------------------------------------------------------
# LoCoMo
# --------------------------------------------------------------------------------------------

LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
HEADLINE_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4)

_DIA_ID = re.compile(r"^D:?(\d+):0*(\d+)$")
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_OBS_KEY = re.compile(r"^session_(\d+)_observation$")


@dataclass(frozen=True, slots=True)
class Turn:
    """One dialogue turn of a LoCoMo conversation."""

    dia_id: str
    session: int
    speaker: str
    text: str
    date: datetime | None
    image_caption: str = ""


@dataclass(frozen=True, slots=True)
class Observation:
    """One machine-written fact with the turn ids it was derived from."""

    text: str
    speaker: str
    session: int
    source_ids: tuple[str, ...]
    date: datetime | None


@dataclass(frozen=True, slots=True)
class Question:
    """One QA item with cleaned evidence ids."""

    question: str
    category: int
    evidence: tuple[str, ...]


@dataclass(slots=True)
class Conversation:
    """One LoCoMo sample, parsed."""

    sample_id: str
    speakers: tuple[str, str]
    turns: list[Turn] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    dropped_evidence: int = 0
    dropped_questions: int = 0


def parse_locomo_date(text: str) -> datetime | None:
    """Parse LoCoMo's `1:47 pm on 18 May, 2023` session stamps (None when unparseable)."""
    cleaned = " ".join(text.replace(",", " ").split())
    for fmt in ("%I:%M %p on %d %B %Y", "%I:%M %p on %d %b %Y", "%d %B %Y"):
        try:
            return datetime.strptime(cleaned, fmt)
        except ValueError:
            continue
    return None


def clean_dia_ids(raw: object, known: set[str]) -> tuple[list[str], int]:
    """Normalise a raw evidence/source value into valid dialogue ids.

    Splits on `;`, `,` and whitespace, rewrites `D:11:26` to `D11:26`, strips leading zeros
    (`D30:05` → `D30:5`) and drops ids that do not name an existing turn.

    Returns:
        The cleaned ids (order kept, duplicates removed) and how many raw pieces were dropped.
    """
    pieces: list[str] = []
    values = raw if isinstance(raw, list) else [raw]
    for value in values:
        if not isinstance(value, str):
            continue
        pieces.extend(p for p in re.split(r"[;,\s]+", value) if p)
    out: list[str] = []
    dropped = 0
    for piece in pieces:
        match = _DIA_ID.match(piece)
        if match is None:
            dropped += 1
            continue
        dia_id = f"D{int(match.group(1))}:{int(match.group(2))}"
        if dia_id not in known:
            dropped += 1
            continue
        if dia_id not in out:
            out.append(dia_id)
    return out, dropped


def load_locomo(path: Path) -> list[Conversation]:
    """Load a LoCoMo file (`locomo_dev.json` or a file with the same layout).

    Args:
        path: The JSON file, or a directory holding exactly one `*.json` LoCoMo file.
    """
    if path.is_dir():
        candidates = sorted(p for p in path.glob("*.json"))
        if len(candidates) != 1:
            msg = f"expected one LoCoMo .json file in {path}, found {len(candidates)}"
            raise FileNotFoundError(msg)
        path = candidates[0]
    samples: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    return [_parse_sample(sample) for sample in samples]


def _parse_sample(sample: Mapping[str, Any]) -> Conversation:
    conv = sample["conversation"]
    out = Conversation(
        sample_id=str(sample["sample_id"]),
        speakers=(str(conv.get("speaker_a", "")), str(conv.get("speaker_b", ""))),
    )
    sessions: dict[int, datetime | None] = {}
    for key, value in conv.items():
        match = _SESSION_KEY.match(key)
        if match and isinstance(value, list):
            number = int(match.group(1))
            sessions[number] = parse_locomo_date(str(conv.get(f"{key}_date_time", "")))
            for turn in value:
                out.turns.append(
                    Turn(
                        dia_id=str(turn["dia_id"]),
                        session=number,
                        speaker=str(turn["speaker"]),
                        text=str(turn["text"]),
                        date=sessions[number],
                        image_caption=str(turn.get("blip_caption", "") or ""),
                    )
                )
    out.turns.sort(key=lambda t: (t.session, _turn_number(t.dia_id)))
    known = {t.dia_id for t in out.turns}
    for key, per_speaker in sample.get("observation", {}).items():
        match = _OBS_KEY.match(key)
        if not match:
            continue
        number = int(match.group(1))
        for speaker, facts in per_speaker.items():
            for fact in facts:
                ids, _ = clean_dia_ids(fact[1], known)
                out.observations.append(
                    Observation(
                        text=str(fact[0]),
                        speaker=str(speaker),
                        session=number,
                        source_ids=tuple(ids),
                        date=sessions.get(number),
                    )
                )
    out.observations.sort(key=lambda o: (o.session, o.source_ids, o.text))
    for qa in sample.get("qa", []):
        ids, dropped = clean_dia_ids(qa.get("evidence", []), known)
        out.dropped_evidence += dropped
        if not ids:
            out.dropped_questions += 1
            continue
        out.questions.append(
            Question(
                question=str(qa["question"]), category=int(qa["category"]), evidence=tuple(ids)
            )
        )
    return out


def _turn_number(dia_id: str) -> int:
    return int(dia_id.split(":", 1)[1])


def turn_content(turn: Turn, *, with_caption: bool = True) -> str:
    """The text stored for one turn: `Speaker: text`, plus the shared image's caption if any."""
    text = f"{turn.speaker}: {turn.text}"
    if with_caption and turn.image_caption:
        text += f" [shares a photo: {turn.image_caption}]"
    return text


# --------------------------------------------------------------------------------------------
# zh_eval
# --------------------------------------------------------------------------------------------

ZH_KINDS: tuple[str, ...] = (
    "keyword",
    "paraphrase",
    "short",
    "mixed_lang",
    "multi",
    "temporal",
    "instruction",
    "absent",
)


@dataclass(frozen=True, slots=True)
class ZhMemory:
    """One zh_eval memory."""

    id: str
    content: str
    type: str
    scene_name: str
    priority: int
    activity_start_time: str
    activity_end_time: str


@dataclass(frozen=True, slots=True)
class ZhUser:
    """One zh_eval user and their memories."""

    user_id: str
    memories: list[ZhMemory]


@dataclass(frozen=True, slots=True)
class ZhQuery:
    """One zh_eval query with its relevance labels."""

    qid: str
    user_id: str
    query: str
    relevant: tuple[str, ...]
    kind: str


def load_zh_eval(directory: Path) -> tuple[list[ZhUser], list[ZhQuery]]:
    """Load `users.json` and `queries.json` from a zh_eval directory."""
    users_raw: list[dict[str, Any]] = json.loads(
        (directory / "users.json").read_text(encoding="utf-8")
    )
    queries_raw: list[dict[str, Any]] = json.loads(
        (directory / "queries.json").read_text(encoding="utf-8")
    )
    users = [
        ZhUser(
            user_id=str(u["user_id"]),
            memories=[
                ZhMemory(
                    id=str(m["id"]),
                    content=str(m["content"]),
                    type=str(m.get("type", "episodic")),
                    scene_name=str(m.get("scene_name", "") or ""),
                    priority=int(m.get("priority", 50)),
                    activity_start_time=str(m.get("activity_start_time", "") or ""),
                    activity_end_time=str(m.get("activity_end_time", "") or ""),
                )
                for m in u["memories"]
            ],
        )
        for u in users_raw
    ]
    queries = [
        ZhQuery(
            qid=str(q["qid"]),
            user_id=str(q["user_id"]),
            query=str(q["query"]),
            relevant=tuple(str(r) for r in q.get("relevant", [])),
            kind=str(q["kind"]),
        )
        for q in queries_raw
    ]
    return users, queries


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


def recall_at_k(covered: Sequence[Iterable[str]], relevant: Sequence[str], k: int) -> float:
    """Share of `relevant` ids covered by the first `k` retrieved items (partial credit).

    Args:
        covered: For each retrieved item in rank order, the relevant-id space it covers (a turn
            covers its own id, an observation its source turn ids, a zh_eval memory its id).
        relevant: The relevant ids of the query (non-empty).
        k: Cut-off.
    """
    if not relevant:
        return 0.0
    seen: set[str] = set()
    for ids in covered[:k]:
        seen.update(ids)
    return len(seen.intersection(relevant)) / len(set(relevant))


def hit_at_k(covered: Sequence[Iterable[str]], relevant: Sequence[str], k: int) -> float:
    """1.0 when any of the first `k` items covers a relevant id."""
    rel = set(relevant)
    return 1.0 if any(rel.intersection(ids) for ids in covered[:k]) else 0.0


def reciprocal_rank(covered: Sequence[Iterable[str]], relevant: Sequence[str]) -> float:
    """1 / rank of the first item that covers a relevant id (0 when none does)."""
    rel = set(relevant)
    for rank, ids in enumerate(covered, start=1):
        if rel.intersection(ids):
            return 1.0 / rank
    return 0.0


def ndcg_at_k(
    covered: Sequence[Iterable[str]], relevant: Sequence[str], k: int, *, n_relevant_items: int
) -> float:
    """nDCG@k with binary gains: an item is relevant when it covers any relevant id.

    Args:
        covered: Retrieved items in rank order, as for `recall_at_k`.
        relevant: The relevant ids.
        k: Cut-off.
        n_relevant_items: How many items of the whole collection are relevant (for the ideal DCG).
    """
    rel = set(relevant)
    dcg = sum(
        1.0 / math.log2(rank + 1)
        for rank, ids in enumerate(covered[:k], start=1)
        if rel.intersection(ids)
    )
    ideal = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(k, n_relevant_items) + 1))
    return dcg / ideal if ideal else 0.0


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean, 0.0 for an empty input."""
    vals = list(values)
    return statistics.fmean(vals) if vals else 0.0


def percentiles(
    values: Iterable[float], points: Sequence[float] = (50, 90, 99)
) -> dict[str, float]:
    """Nearest-rank percentiles, keyed `p50`, `p90`, ..."""
    vals = sorted(values)
    if not vals:
        return {f"p{p:g}": 0.0 for p in points}
    out: dict[str, float] = {}
    for p in points:
        idx = min(len(vals) - 1, max(0, math.ceil(p / 100 * len(vals)) - 1))
        out[f"p{p:g}"] = vals[idx]
    return out


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured Markdown table with right-aligned numeric columns."""

    def cell(value: object) -> str:
        if isinstance(value, float):
            return f"{value:.3f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
    lines.extend("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)
    return "\n".join(lines)


MEMORY_BLOCKS: tuple[str, ...] = ("standing-instructions", "key-memories", "user-profile")
"""System-context blocks made of memories (their cost per turn is what the benchmarks report)."""


def _system_memory_blocks(text: str | None) -> list[str]:
    """A system context's memory blocks (rules, pinned, profile), tags included."""
    text = text or ""
    blocks = []
    for tag in MEMORY_BLOCKS:
        start, end = text.find(f"<{tag}>"), text.find(f"</{tag}>")
        if start >= 0 and end > start:
            blocks.append(text[start : end + len(tag) + 3])
    return blocks


def system_memory_chars(text: str | None) -> int:
    """Code points of a system context's memory blocks (rules, pinned, profile), tags included."""
    return sum(len(block) for block in _system_memory_blocks(text))


def system_memory_tokens(text: str | None) -> int:
    """Estimated tokens (`text.tokens`, the profile budget's measure) of those blocks."""
    return sum(estimate_tokens(block) for block in _system_memory_blocks(text))


def write_json(path: Path, payload: Mapping[str, Any]) -> None:
    """Write `payload` as pretty UTF-8 JSON, creating parent directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Embedders for the benchmarks
# --------------------------------------------------------------------------------------------

EMBEDDER_CHOICES: tuple[str, ...] = ("default", "e5", "e5-raw", "use", "use-raw", "hash", "none")


class CachedEmbeddings(Embeddings):
    """Memoises an embedder so several stores (one per mode) embed each text only once.

    Keeps the wrapped embedder's `identity`, so stores see the same embedder. With `path`, the
    cache is read from and written to an `.npz` file (plain arrays, no pickle) keyed by identity.
    """

    def __init__(self, inner: Embeddings, path: Path | None = None) -> None:
        from langchain_tdai_recall.embeddings import embedder_identity

        self.inner = inner
        self.identity = embedder_identity(inner)
        self.path = path
        self._vectors: dict[str, list[float]] = {}
        self.misses = 0
        if path is not None and path.exists():
            with np.load(path, allow_pickle=False) as data:
                if str(data["identity"]) == self.identity:
                    keys = data["keys"].tolist()
                    self._vectors = dict(zip(keys, data["vectors"].tolist(), strict=True))

    def _key(self, text: str, *, query: bool) -> str:
        digest = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=16).hexdigest()
        return ("q:" if query else "d:") + digest

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        keys = [self._key(t, query=False) for t in texts]
        missing = sorted(
            {k: t for k, t in zip(keys, texts, strict=True) if k not in self._vectors}.items()
        )
        if missing:
            self.misses += len(missing)
            vectors = self.inner.embed_documents([t for _, t in missing])
            self._vectors.update(zip((k for k, _ in missing), vectors, strict=True))
        return [self._vectors[k] for k in keys]

    def embed_query(self, text: str) -> list[float]:
        key = self._key(text, query=True)
        if key not in self._vectors:
            self.misses += 1
            self._vectors[key] = self.inner.embed_query(text)
        return self._vectors[key]

    def warm_queries(self, texts: Sequence[str]) -> None:
        """Embed queries ahead of time (so recall's query timeout never sees a cold model),
        with the parts recall searches separately in a multi-part message (`text.clauses`)."""
        for text in texts:
            self.embed_query(text)
            for part in split_clauses(text):
                self.embed_query(part)

    def save(self) -> None:
        """Write the cache file when a path was given."""
        if self.path is None or not self._vectors:
            return
        keys = sorted(self._vectors)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(
            tmp,
            identity=np.array(self.identity),
            keys=np.array(keys),
            vectors=np.array([self._vectors[k] for k in keys], dtype=np.float32),
        )
        tmp.replace(self.path)


def make_embeddings(name: str, *, cache_dir: Path | None = None) -> Embeddings | None:
    """Build the embedder named on the command line (`none` → keyword only).

    - `default`/`e5`: `DefaultEmbeddings()` (multilingual-e5-small, calibrated);
      `e5-raw`: the same without calibration.
    - `use`/`use-raw`: `DefaultEmbeddings(model="use-multilingual-v3")` with/without calibration.
    - `hash`: `langchain_tdai_recall.testing.HashEmbeddings` (fast, deterministic; smoke tests).
    """
    inner: Embeddings
    if name == "none":
        return None
    if name == "hash":
        from langchain_tdai_recall.testing import HashEmbeddings

        inner = HashEmbeddings()
    elif name in ("default", "e5", "e5-raw", "use", "use-raw"):
        from langchain_tdai_recall.embeddings import DefaultEmbeddings, EmbeddingModel

        model: EmbeddingModel = (
            "use-multilingual-v3" if name.startswith("use") else "multilingual-e5-small"
        )
        inner = DefaultEmbeddings(model=model, calibrate=not name.endswith("-raw"))
    else:
        msg = f"unknown embedder {name!r}; choose one of {EMBEDDER_CHOICES}"
        raise ValueError(msg)
    path = None
    if cache_dir is not None:
        from langchain_tdai_recall.embeddings import embedder_identity

        slug = hashlib.blake2b(embedder_identity(inner).encode(), digest_size=6).hexdigest()
        path = cache_dir / f"{name}-{slug}.npz"
    return CachedEmbeddings(inner, path)
