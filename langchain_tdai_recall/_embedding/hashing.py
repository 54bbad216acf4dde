"""`HashEmbeddings`: a deterministic, offline bag-of-features embedder.

It is the package's public test double (`testing.HashEmbeddings`), and also an embedder a store
can record and be reopened with: `embeddings.embedder_from_identity` rebuilds it from its
identity (`hash-embeddings-v1-<dims>`) when the command line reopens a store. So it lives on the
ground floor, below `embeddings`, and `testing` hands it on.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Final

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall.errors import ConfigError

__all__ = ["HashEmbeddings"]

MAX_DIMS: Final = 999_999
"""Largest `dims` (what a recorded identity `hash-embeddings-v1-<dims>` can name)."""

_FEATURE_RE: Final = re.compile(r"[\u3400-\u9fff\uac00-\ud7af\u3040-\u30ff]|[^\W_]+")


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-features embedder.

    Lower-cased words and single CJK characters are hashed (blake2b) into `dims` signed buckets,
    and the vector is L2-normalised. A document without any (`"!!"`, `""`) is hashed whole, so
    no stored text gets an all-zero vector (which the vector upkeep takes for a failure and
    retries); such a query stays all zeros (it matches nothing by vector).

    Example:
        ```python
        emb = HashEmbeddings(dims=64)
        assert emb.embed_query("hello") == emb.embed_query("hello")
        ```
    """

    __test__ = False

    def __init__(self, dims: int = 64) -> None:
        if isinstance(dims, bool) or not isinstance(dims, int) or not 2 <= dims <= MAX_DIMS:
            msg = (
                f"HashEmbeddings dims must be an integer in 2..{MAX_DIMS}, got "
                f"{type(dims).__name__} {dims!r:.40}; e.g. HashEmbeddings(dims=64)"
            )
            raise ConfigError(msg)
        self.dims = dims
        self.identity = f"hash-embeddings-v1-{dims}"

    def _embed(self, text: str, *, whole: bool = False) -> list[float]:
        vec = np.zeros(self.dims, dtype=np.float64)
        normal = unicodedata.normalize("NFKC", text).lower()
        features = _FEATURE_RE.findall(normal)
        for feature in features or ([normal] if whole else []):
            digest = hashlib.blake2b(
                feature.encode("utf-8", "surrogatepass"), digest_size=8
            ).digest()
            value = int.from_bytes(digest, "little")
            vec[value % self.dims] += 1.0 if (value >> 63) & 1 else -1.0
        norm = float(np.linalg.norm(vec))
        return (vec / norm).tolist() if norm else vec.tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents."""
        return [self._embed(t, whole=True) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """Embed a query."""
        return self._embed(text)
