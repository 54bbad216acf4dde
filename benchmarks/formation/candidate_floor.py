"""Where to put consolidation's similarity floor (`extraction.candidate_floor`).

A stored memory is offered to the consolidation model as a candidate for a new memory when its
relevance to it (`RankedHit.score` of the search recall uses, 0..1: 0.7 x cosine + 0.3 x keyword
coverage with the default hybrid strategy) reaches the floor. Below the floor the new memory is
added without a model call. Too high a floor adds contradictions and paraphrases as new
memories (duplicates that recall later injects side by side); too low a floor asks the model about
memories that have nothing to do with each other (cost, and a chance to merge what should stay
apart).

Measured with the default embedder, for floors 0.30 ... 0.70:

- **pairs** (our own sentences, English and Chinese, `PAIRS` below): for each kind, the share of
  (stored, new) pairs whose relevance reaches the floor. `duplicate` (the same fact reworded) and
  `update` (the same attribute with a new or contradicting value) should reach it; `unrelated`
  (another fact about the same person) should not.
- **LoCoMo** (development observations, in order, per conversation): the share of observations
  with at least one earlier observation of the same conversation at or above the floor, i.e.
  how often consolidation would ask the model for a conversation's stream of distinct facts
  (a cost proxy: LoCoMo observations are nearly all distinct facts).

LoCoMo is CC BY-NC 4.0: it is read from `../shared/data/locomo` and never copied here.

Usage::

    python benchmarks/formation/candidate_floor.py [--data PATH] [--cache-dir DIR]
        [--embeddings default|hash] [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quality"))

from _common import (
    DEFAULT_DATA_ROOT,
    REPO_ROOT,
    load_locomo,
    make_embeddings,
    write_json,
)
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall.formation.consolidation import relevance
from langchain_tdai_recall.text.tokenize import Tokenizer, get_tokenizer

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "formation_candidate_floor.json"
FLOORS: Final = tuple(round(0.30 + 0.05 * i, 2) for i in range(9))

PAIRS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "duplicate": (
        ("The user is vegetarian.", "The user does not eat meat."),
        ("Alice lives in Lyon.", "Alice has been living in Lyon for years."),
        ("The user prefers window seats on flights.", "On planes the user likes a window seat."),
        ("Bob is allergic to peanuts.", "Bob has a peanut allergy."),
        ("The user drinks green tea every morning.", "Every morning the user has green tea."),
        ("Carol works as a nurse at the city hospital.", "Carol is a nurse at the city hospital."),
        ("The user's daughter is called Mia.", "The user has a daughter named Mia."),
        ("The user wants short answers.", "The user prefers brief, short replies."),
        ("Dana runs 5 km three times a week.", "Dana goes running three times a week, 5 km."),
        ("The user plays the guitar.", "The user plays guitar in their free time."),
        ("用户是素食者。", "用户不吃肉。"),
        ("用户住在上海。", "用户一直住在上海。"),
        ("用户对花生过敏。", "用户有花生过敏。"),
        ("用户喜欢喝绿茶。", "用户每天都喝绿茶。"),
        ("用户希望回答简短一些。", "用户喜欢简短的回答。"),
    ),
    "update": (
        ("The user lives in Berlin.", "The user moved to Paris."),
        ("Alice works at Google.", "Alice left Google and joined a startup."),
        ("The user's favourite colour is blue.", "The user's favourite colour is now green."),
        ("Bob is single.", "Bob got married last month."),
        ("The user drives a Toyota.", "The user sold the Toyota and bought a Tesla."),
        ("The user is learning Spanish.", "The user stopped learning Spanish and took up Italian."),
        ("Carol has two cats.", "Carol now has three cats."),
        ("The user's meeting is on Monday.", "The user's meeting moved to Thursday."),
        ("Dana is training for a marathon.", "Dana gave up marathon training after an injury."),
        ("The user wants answers in English.", "The user wants answers in French from now on."),
        ("用户在北京工作。", "用户换工作搬到了深圳。"),
        ("用户养了一只狗。", "用户的狗去年去世了。"),
        ("用户喜欢喝咖啡。", "用户戒掉了咖啡，现在只喝茶。"),
        ("用户每周去健身房三次。", "用户最近不去健身房了。"),
        ("用户的生日是五月三日。", "用户的生日其实是五月十三日。"),
    ),
    "unrelated": (
        ("The user is vegetarian.", "The user plays chess on weekends."),
        ("Alice lives in Lyon.", "Alice has a cat named Tom."),
        ("The user prefers window seats on flights.", "The user is learning Japanese."),
        ("Bob is allergic to peanuts.", "Bob works as a software engineer."),
        ("The user drinks green tea every morning.", "The user's sister lives in Canada."),
        ("Carol works as a nurse at the city hospital.", "Carol loves jazz music."),
        ("The user's daughter is called Mia.", "The user wants answers in bullet points."),
        ("Dana runs 5 km three times a week.", "Dana visited Rome last summer."),
        ("The user plays the guitar.", "The user is allergic to shellfish."),
        ("The user's meeting is on Monday.", "The user likes spicy food."),
        ("用户是素食者。", "用户周末喜欢下象棋。"),
        ("用户住在上海。", "用户养了一只猫。"),
        ("用户对花生过敏。", "用户是一名软件工程师。"),
        ("用户喜欢喝绿茶。", "用户的妹妹住在加拿大。"),
        ("用户希望回答简短一些。", "用户去年去了日本旅行。"),
    ),
}
"""(stored, new) memory pairs, written for this benchmark."""

SHOULD_OFFER: Final = {"duplicate": True, "update": True, "unrelated": False}


def _unit(rows: list[list[float]]) -> npt.NDArray[np.float32]:
    matrix = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: npt.NDArray[np.float32] = (matrix / norms).astype(np.float32)
    return result


def _score(
    tokenizer: Tokenizer,
    stored: str,
    new: str,
    stored_vec: npt.NDArray[np.float32] | None,
    new_vec: npt.NDArray[np.float32] | None,
) -> float:
    """Relevance of `stored` to `new` as consolidation's candidate search computes it."""
    return relevance(tokenizer.query(new), tokenizer.document_tokens(stored), new_vec, stored_vec)


def pairs(embeddings: Embeddings | None, tokenizer: Tokenizer) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, items in PAIRS.items():
        texts = [t for pair in items for t in pair]
        vectors = _unit(embeddings.embed_documents(texts)) if embeddings is not None else None
        scores = [
            _score(
                tokenizer,
                stored,
                new,
                None if vectors is None else vectors[2 * i],
                None if vectors is None else vectors[2 * i + 1],
            )
            for i, (stored, new) in enumerate(items)
        ]
        out[kind] = {
            "pairs": len(scores),
            "scores": [round(s, 3) for s in scores],
            "min": round(min(scores), 3),
            "median": round(float(np.median(scores)), 3),
            "max": round(max(scores), 3),
            "reach_floor_pct": {
                f"{f:.2f}": round(100 * sum(s >= f for s in scores) / len(scores), 1)
                for f in FLOORS
            },
        }
    return out


def locomo(data: Path, embeddings: Embeddings | None, tokenizer: Tokenizer) -> dict[str, Any]:
    convs = load_locomo(data)
    best: list[float] = []
    for conv in convs:
        texts = [o.text for o in conv.observations]
        vectors = _unit(embeddings.embed_documents(texts)) if embeddings is not None else None
        docs = [tokenizer.document_tokens(t) for t in texts]
        for i in range(1, len(texts)):
            query = tokenizer.query(texts[i])
            top = 0.0
            if vectors is not None:  # the embedding leg finds the nearest earlier ones first
                order = np.argsort(-(vectors[:i] @ vectors[i]))[:15].tolist()
            else:
                order = list(range(i))
            for j in order:
                score = relevance(
                    query,
                    docs[j],
                    None if vectors is None else vectors[i],
                    None if vectors is None else vectors[j],
                )
                top = max(top, score)
            best.append(top)
    return {
        "conversations": len(convs),
        "observations": len(best),
        "with_a_candidate_pct": {
            f"{f:.2f}": round(100 * sum(b >= f for b in best) / len(best), 1) for f in FLOORS
        },
        "best_candidate_median": round(float(np.median(best)), 3),
    }


def _print(payload: dict[str, Any]) -> None:
    header = "floor    " + "  ".join(f"{f:.2f}" for f in FLOORS)
    print(header)
    for kind, row in payload["pairs"].items():
        cells = "  ".join(f"{row['reach_floor_pct'][f'{f:.2f}']:4.0f}" for f in FLOORS)
        print(f"{kind:<9}{cells}   (% of pairs offered; should be offered: {SHOULD_OFFER[kind]})")
    lo = payload["locomo"]["with_a_candidate_pct"]
    print("LoCoMo   " + "  ".join(f"{lo[f'{f:.2f}']:4.0f}" for f in FLOORS), end="")
    print("   (% of new observations that would ask the model)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_ROOT / "locomo")
    parser.add_argument("--embeddings", choices=("default", "hash", "none"), default="default")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    embeddings = make_embeddings(args.embeddings, cache_dir=args.cache_dir)
    tokenizer = get_tokenizer("bigram")
    payload: dict[str, Any] = {
        "benchmark": "formation-candidate-floor",
        "embeddings": args.embeddings,
        "embedder_identity": getattr(embeddings, "identity", None),
        "floors": list(FLOORS),
        "pairs": pairs(embeddings, tokenizer),
        "locomo": locomo(args.data, embeddings, tokenizer),
    }
    save = getattr(embeddings, "save", None)
    if callable(save):
        save()
    write_json(args.out, payload)
    if not args.quiet:
        _print(payload)
        print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
