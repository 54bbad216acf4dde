"""A small progress bar for long operations (bulk inserts, re-embedding, imports).

The bar is drawn on standard error. By default it appears only when standard error is a terminal,
so logs, pipes, notebooks' captured output and test runs stay clean; `enabled=True` forces it and
`enabled=False` suppresses it. `tqdm` is used when it happens to be installed; otherwise a plain
text bar is drawn. Neither adds a dependency.

Example:
    ```python
    from langchain_tdai_recall._runtime.progress import progress

    total = 0
    for n in progress(range(3), desc="counting", enabled=False):
        total += n
    with progress(10, desc="embedding", enabled=False) as bar:
        bar.update(10)
    assert total == 3
    ```
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sized
from types import TracebackType
from typing import Any, Final, Generic, Self, TextIO, TypeVar, overload

__all__ = ["Progress", "progress"]

T = TypeVar("T")

_BAR_WIDTH: Final = 24
"""Cells in the plain text bar."""
_REDRAW_SECONDS: Final = 0.1
"""Shortest interval between two redraws of the plain text bar."""


def _stream_is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Progress(Generic[T]):
    """A progress bar over an iterable, or over a count advanced with `update`.

    Use `progress(...)` to build one. It is a context manager; leaving the block (or exhausting
    the iterable) closes the bar and ends its line.
    """

    def __init__(
        self,
        iterable: Iterable[T] | None,
        *,
        total: int | None,
        desc: str,
        enabled: bool,
        stream: TextIO,
        unit: str,
    ) -> None:
        self._iterable = iterable
        self.total = total
        self.desc = desc
        self.enabled = enabled
        self.count = 0
        self._stream = stream
        self._unit = unit
        self._closed = False
        self._last_draw = 0.0
        self._tqdm: Any = None
        if enabled:
            self._tqdm = _make_tqdm(total=total, desc=desc, stream=stream, unit=unit)
            if self._tqdm is None:
                self._draw(force=True)

    def __iter__(self) -> Iterator[T]:
        if self._iterable is None:
            msg = "this progress bar counts with update(); it was not given an iterable"
            raise TypeError(msg)
        try:
            for item in self._iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        """Advance the bar by `n` steps."""
        self.count += n
        if not self.enabled or self._closed:
            return
        if self._tqdm is not None:
            self._tqdm.update(n)
        else:
            self._draw(force=False)

    def close(self) -> None:
        """Finish the bar's line. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if not self.enabled:
            return
        if self._tqdm is not None:
            self._tqdm.close()
            return
        self._draw(force=True)
        self._stream.write("\n")
        self._stream.flush()

    def _draw(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < _REDRAW_SECONDS:
            return
        self._last_draw = now
        if self.total:
            done = min(self.count, self.total)
            filled = _BAR_WIDTH * done // self.total
            bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
            pct = 100 * done // self.total
            line = f"{self.desc}: [{bar}] {self.count}/{self.total} {self._unit} ({pct}%)"
        else:
            line = f"{self.desc}: {self.count} {self._unit}"
        self._stream.write("\r" + line)
        self._stream.flush()


def _make_tqdm(*, total: int | None, desc: str, stream: TextIO, unit: str) -> Any:
    """A tqdm bar when tqdm is importable, else `None`."""
    try:
        from tqdm.auto import tqdm  # noqa: PLC0415 - optional, never a dependency
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, file=stream, unit=unit, leave=True, dynamic_ncols=True)


@overload
def progress(
    iterable_or_total: int,
    *,
    desc: str,
    enabled: bool | None = None,
    unit: str = "it",
    stream: TextIO | None = None,
) -> Progress[int]: ...


@overload
def progress(
    iterable_or_total: Iterable[T],
    *,
    desc: str,
    enabled: bool | None = None,
    unit: str = "it",
    stream: TextIO | None = None,
) -> Progress[T]: ...


def progress(
    iterable_or_total: Iterable[T] | int,
    *,
    desc: str,
    enabled: bool | None = None,
    unit: str = "it",
    stream: TextIO | None = None,
) -> Progress[T] | Progress[int]:
    """Build a progress bar.

    Args:
        iterable_or_total: An iterable to wrap (iterating the bar yields its items and advances
            the bar), or a total count to advance with `Progress.update`.
        desc: Short label shown before the bar.
        enabled: `True` draws the bar, `False` never does, `None` draws it only when `stream`
            is a terminal.
        unit: Name of one step (`"it"`, `"memories"`, ...).
        stream: Where to draw; standard error by default.

    Returns:
        The bar; use it as a context manager or iterate it.
    """
    out = sys.stderr if stream is None else stream
    on = _stream_is_tty(out) if enabled is None else enabled
    if isinstance(iterable_or_total, int):
        return Progress[int](
            None, total=iterable_or_total, desc=desc, enabled=on, stream=out, unit=unit
        )
    total = len(iterable_or_total) if isinstance(iterable_or_total, Sized) else None
    return Progress(iterable_or_total, total=total, desc=desc, enabled=on, stream=out, unit=unit)
