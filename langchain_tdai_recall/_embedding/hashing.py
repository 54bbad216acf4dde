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

__all__ = ["HashEmbeddings"]

_FEATURE_RE: Final = re.compile(r"[\u3400-\u9fff\uac00-\ud7af\u3040-\u30ff]|[^\W_]+")


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-features embedder.

    Lower-cased words and single CJK characters are hashed (blake2b) into `dims` signed buckets,
    and the vector is L2-normalised.

    Example:
        ```python
        emb = HashEmbeddings(dims=64)
        assert emb.embed_query("hello") == emb.embed_query("hello")
        ```
    """

    __test__ = False

    def __init__(self, dims: int = 64) -> None:
        if dims < 2:
            msg = f"dims must be >= 2, got {dims!r}"
            raise ValueError(msg)
        self.dims = dims
        self.identity = f"hash-embeddings-v1-{dims}"

    def _embed(self, text: str) -> list[float]:
        vec = np.zeros(self.dims, dtype=np.float64)
        for feature in _FEATURE_RE.findall(unicodedata.normalize("NFKC", text).lower()):
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            vec[value % self.dims] += 1.0 if (value >> 63) & 1 else -1.0
        norm = float(np.linalg.norm(vec))
        return (vec / norm).tolist() if norm else vec.tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents."""
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """Embed a query."""
        return self._embed(text)
