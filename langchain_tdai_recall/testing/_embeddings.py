"""Deterministic, offline embedders for tests: a hash embedder and wrappers that are slow or fail.

`HashEmbeddings` makes texts that share words or CJK characters similar, so keyword-ish
semantics work without a model download; the wrappers exercise timeouts and degradation.
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from typing import Final

import numpy as np
from langchain_core.embeddings import Embeddings

__all__ = ["FailingEmbeddings", "HashEmbeddings", "SlowEmbeddings"]

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


class SlowEmbeddings(Embeddings):
    """Wraps an embedder and sleeps before every call (for timeout tests)."""

    __test__ = False

    def __init__(self, inner: Embeddings, *, delay_s: float, queries_only: bool = True) -> None:
        self.inner = inner
        self.delay_s = delay_s
        self.queries_only = queries_only
        self.identity = getattr(inner, "identity", type(inner).__name__)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents (slowly unless `queries_only`)."""
        if not self.queries_only:
            time.sleep(self.delay_s)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """Embed a query, slowly."""
        time.sleep(self.delay_s)
        return self.inner.embed_query(text)


class FailingEmbeddings(Embeddings):
    """Wraps an embedder and raises on queries (and on documents when `documents=True`)."""

    __test__ = False

    def __init__(self, inner: Embeddings, *, documents: bool = False) -> None:
        self.inner = inner
        self.documents = documents
        self.identity = getattr(inner, "identity", type(inner).__name__)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents, or fail when `documents=True`."""
        if self.documents:
            msg = "embedding service unavailable"
            raise RuntimeError(msg)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        """Always fails."""
        msg = "embedding service unavailable"
        raise RuntimeError(msg)
