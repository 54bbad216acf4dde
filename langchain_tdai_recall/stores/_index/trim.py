"""Give the memory freed by a large index build back to the operating system.

Building a scope's index from its rows creates and drops millions of small objects (row
records, texts, token lists, vector blobs). CPython returns them to the C allocator, but glibc
keeps the freed pages in its heap: after building a 100k-memory scope the process stayed about
500 MiB larger, of which only about 200 MiB was the index (`benchmarks/results/scale.md`).
`malloc_trim(0)` hands the free pages back (measured: 512 → 223 MiB). It costs a few
milliseconds and is called once per large build. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
from collections.abc import Callable

__all__ = ["release_freed_memory"]

logger = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    return trim


def release_freed_memory() -> bool:
    """Return freed heap pages to the OS (glibc); whether it could."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
