"""Deterministic, offline embedders for tests: a hash embedder and wrappers that are slow or fail.

`HashEmbeddings` makes texts that share words or CJK characters similar, so keyword-ish
semantics work without a model download (it is defined in `_embedding.hashing`, below
`embeddings`, which rebuilds it from a store's recorded identity); the wrappers exercise
timeouts and degradation.
"""

from __future__ import annotations

import time

from langchain_core.embeddings import Embeddings

from langchain_tdai_recall._embedding.hashing import HashEmbeddings
from langchain_tdai_recall.errors import ConfigError

__all__ = ["FailingEmbeddings", "HashEmbeddings", "SlowEmbeddings"]


def _check_wrapped(cls: str, inner: object, flags: dict[str, object]) -> None:
    if not isinstance(inner, Embeddings):
        msg = (
            f"{cls} wraps a LangChain Embeddings, got {type(inner).__name__} {inner!r:.40}; "
            f"e.g. {cls}(HashEmbeddings(), ...)"
        )
        raise ConfigError(msg)
    for name, value in flags.items():
        if not isinstance(value, bool):
            msg = f"{cls} {name} must be True or False, got {type(value).__name__} {value!r:.40}"
            raise ConfigError(msg)


class SlowEmbeddings(Embeddings):
    """Wraps an embedder and sleeps before every call (for timeout tests)."""

    __test__ = False

    def __init__(self, inner: Embeddings, *, delay_s: float, queries_only: bool = True) -> None:
        _check_wrapped("SlowEmbeddings", inner, {"queries_only": queries_only})
        if isinstance(delay_s, bool) or not isinstance(delay_s, int | float) or not delay_s >= 0:
            msg = f"SlowEmbeddings delay_s must be seconds >= 0, got {delay_s!r:.40}"
            raise ConfigError(msg)
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
        _check_wrapped("FailingEmbeddings", inner, {"documents": documents})
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
