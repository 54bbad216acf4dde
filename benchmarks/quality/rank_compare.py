"""Do float16 vector rows change rankings? Top-10 of every benchmark question, before and after.

The vector index stores float16 rows only while its product quantiser exists (scopes above
4,096 vectors), so at the sizes of LoCoMo and zh_eval the default settings take the exact
float32 path and rank exactly as before by construction. To measure the effect anyway, this
script forces the quantised path on every scope (quantiser from 128 vectors) and ranks every
question twice with the default embedder, hybrid strategy and `min_score=0`:

- `float32`: quantiser candidates rescored with float32 rows (the behaviour before float16),
- `float16`: the same with float16 rows (the behaviour now, above 4,096 vectors),

and reports the fraction of questions whose top 10 (ids and order) is identical, the fraction
with the same set of ids, and the largest score difference of a memory present in both.

    python benchmarks/quality/rank_compare.py [--cache-dir DIR] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_DATA_ROOT, REPO_ROOT, load_locomo, load_zh_eval, make_embeddings
from langchain_core.embeddings import Embeddings
from locomo import build_records
from zh_eval import _records as zh_records

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.stores._index import vectors as _vectors

K = 10
Ranking = list[tuple[str, float]]


@contextmanager
def quantised(*, half: bool) -> Iterator[None]:
    """Force the quantised path from 128 vectors, with float16 or float32 rows."""
    saved = (
        _vectors.EXACT_MAX_VECTORS,
        _vectors._PQ_DROP_BELOW,
        _vectors._TRAIN_SAMPLE,
        _vectors._HALF_ROWS,
    )
    _vectors.EXACT_MAX_VECTORS, _vectors._PQ_DROP_BELOW = 128, 64
    _vectors._TRAIN_SAMPLE, _vectors._HALF_ROWS = 128, half
    try:
        yield
    finally:
        (
            _vectors.EXACT_MAX_VECTORS,
            _vectors._PQ_DROP_BELOW,
            _vectors._TRAIN_SAMPLE,
            _vectors._HALF_ROWS,
        ) = saved


def rank(
    scopes: dict[str, list[dict[str, Any]]],
    questions: list[tuple[str, str]],
    embeddings: Embeddings,
) -> list[Ranking]:
    """Top-K (id, score) of each (scope, question), hybrid, no score floor."""
    config = {"recall": {"strategy": "hybrid"}}
    with TdaiMemory.open(None, embeddings=embeddings, config=config) as memory:
        for scope, records in scopes.items():
            memory.add_memories(records, user_id=scope, show_progress=False)
        memory.flush()
        return [
            [
                (h.id, h.score)
                for h in memory.search_memories(q, limit=K, user_id=scope, min_score=0.0)
            ]
            for scope, q in questions
        ]


def compare(before: list[Ranking], after: list[Ranking]) -> dict[str, Any]:
    """Identical top-K fraction, same-set fraction and the largest score difference."""
    identical = same_set = 0
    max_diff = 0.0
    for b, a in zip(before, after, strict=True):
        identical += [i for i, _ in b] == [i for i, _ in a]
        same_set += {i for i, _ in b} == {i for i, _ in a}
        scores = dict(b)
        for i, s in a:
            if i in scores:
                max_diff = max(max_diff, abs(s - scores[i]))
    n = len(before)
    return {
        "questions": n,
        "identical_top10": round(identical / n, 4),
        "same_top10_set": round(same_set / n, 4),
        "max_score_diff": float(f"{max_diff:.3g}"),
    }


def datasets(
    data: Path,
) -> dict[str, tuple[dict[str, list[dict[str, Any]]], list[tuple[str, str]]]]:
    """The benchmark scopes and questions: LoCoMo observations and turns, zh_eval."""
    out = {}
    convs = load_locomo(data / "locomo")
    for variant in ("observations", "turns"):
        scopes = {c.sample_id: build_records(c, variant)[0] for c in convs}
        questions = [
            (c.sample_id, q.question) for c in convs for q in c.questions if q.category != 5
        ]
        out[f"locomo_{variant}"] = (scopes, questions)
    users, queries = load_zh_eval(data / "zh_eval")
    out["zh_eval"] = (
        {u.user_id: zh_records(u) for u in users},
        [(q.user_id, q.query) for q in queries],
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_ROOT)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--embeddings", default="default")
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "benchmarks/results/quality_float16.json"
    )
    args = parser.parse_args(argv)
    embeddings = make_embeddings(args.embeddings, cache_dir=args.cache_dir)
    assert embeddings is not None
    report: dict[str, Any] = {"embeddings": args.embeddings, "k": K}
    for name, (scopes, questions) in datasets(args.data).items():
        with quantised(half=False):
            before = rank(scopes, questions, embeddings)
        with quantised(half=True):
            after = rank(scopes, questions, embeddings)
        report[name] = compare(before, after)
        print(name, report[name], file=sys.stderr)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
