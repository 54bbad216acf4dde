"""Embedders and file-system helpers for the storage hardening tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from langchain_core.embeddings import Embeddings

from langchain_tdai_recall.testing import HashEmbeddings

FAST_QUERY = {"embedding": {"queryTimeoutMs": 100}, "recall": {"timeoutMs": 2000}}
"""Config whose query embedding gives up quickly (for embedders that hang)."""


class HangingEmbeddings(Embeddings):
    """Blocks every call until `release` is set (a dead endpoint without a timeout)."""

    def __init__(self, release: threading.Event, *, dims: int = 32) -> None:
        self.release = release
        self.inner = HashEmbeddings(dims)
        self.identity = f"hanging-{dims}"
        self.calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.release.wait()
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self.release.wait()
        return self.inner.embed_query(text)


class SwitchableEmbeddings(Embeddings):
    """Hash vectors, except non-finite ones for texts containing `bad` while `broken` is set."""

    def __init__(self, *, dims: int = 32, identity: str = "switchable") -> None:
        self.inner = HashEmbeddings(dims)
        self.identity = identity
        self.broken = True
        self.document_calls = 0

    def _one(self, text: str) -> list[float]:
        if self.broken and "bad" in text:
            return [float("nan")] * self.inner.dims
        return self.inner.embed_query(text)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls += 1
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def _chattr(flag: str, path: Path) -> bool:
    chattr = shutil.which("chattr")
    if chattr is None:
        return False
    done = subprocess.run([chattr, flag, str(path)], capture_output=True, check=False)
    return done.returncode == 0


def _writable(path: Path) -> bool:
    probe = path / f".probe-{uuid.uuid4().hex}"
    try:
        probe.touch()
    except OSError:
        return False
    probe.unlink()
    return True


@contextlib.contextmanager
def read_only_directory(path: Path) -> Iterator[None]:
    """Make `path` unwritable for this process (as root too), and restore it afterwards.

    `chmod` is enough for an ordinary user; root ignores permission bits, so the directory is
    also made immutable (`chattr +i`), which binds root as well.
    """
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(0o555)
    immutable = os.geteuid() == 0 and _chattr("+i", path)
    try:
        assert not _writable(path), "could not make the directory read-only for this test"
        yield
    finally:
        if immutable:
            _chattr("-i", path)
        path.chmod(mode)
