"""Memory metadata, expiry and search filters: validation of what callers pass.

- `check_metadata`: a memory's metadata is a small JSON object (str keys, JSON values) of at
  most `MAX_METADATA_BYTES` bytes as compact JSON; a lone surrogate in a text value becomes
  U+FFFD (as in memory text), one in a key is refused (two keys could become one).
- `normalize_expiry` / `expiry_after`: `expires_at` is stored as UTC ISO-8601 text with
  milliseconds and `Z`, the form `_exchange.records.now_iso()` writes, so the backends compare
  it with the clock as text; a `ttl` (seconds or a `timedelta`) is turned into one.
- `memory_filter`: the optional filters of `search_memories`, the tools and the retriever, as
  the index's `MemoryFilter`; the metadata filter is the one filter language of
  `_exchange.filters` (the LangGraph store's too).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from langchain_tdai_recall._exchange.filters import ValueTest, compile_value_filter
from langchain_tdai_recall._runtime.foreground import mark_background
from langchain_tdai_recall.errors import ConfigError, StoreClosedError, StoreReadOnlyError
from langchain_tdai_recall.stores._index.extras import MemoryFilter, epoch
from langchain_tdai_recall.types import MemoryRecord, iso_utc

if TYPE_CHECKING:
    from langchain_tdai_recall.stores.base import BaseMemoryStore

__all__ = [
    "MAX_METADATA_BYTES",
    "MAX_TTL_SECONDS",
    "SWEEP_BATCH",
    "ExpirySweeper",
    "check_metadata",
    "check_ttl",
    "expiry_after",
    "is_expired",
    "iso_utc",
    "memory_filter",
    "normalize_expiry",
    "states_expiry",
    "time_bound",
    "with_expiry",
]

MAX_METADATA_BYTES: Final = 16_384
"""Largest metadata object, in bytes of compact UTF-8 JSON."""

MAX_TTL_SECONDS: Final = 100 * 366 * 86_400
"""Longest time to live (about a century)."""

SWEEP_BATCH: Final = 500
"""Most expired memories one sweep pass deletes (one pass follows another at once while they
come back full, so the work per transaction stays bounded)."""

logger = logging.getLogger(__name__)


_SURROGATE_RE: Final = re.compile(r"[\ud800-\udfff]")


def _shown(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _check_json(value: object, path: str, depth: int = 0) -> None:
    if depth > 32:
        msg = f"{path} is nested more than 32 levels deep; flatten it"
        raise ConfigError(msg)
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            msg = f"{path} is {value!r}, which JSON cannot hold; use null or a number"
            raise ConfigError(msg)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                msg = (
                    f"{path} has the key {_shown(key)} of type {type(key).__name__}; "
                    "metadata keys must be strings"
                )
                raise ConfigError(msg)
            if _SURROGATE_RE.search(key):
                msg = (
                    f"{path} has the key {_shown(key)}, which holds a lone surrogate "
                    "(not valid Unicode text); decode the text that made it correctly"
                )
                raise ConfigError(msg)
            _check_json(item, f"{path}[{key!r}]", depth + 1)
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]", depth + 1)
        return
    msg = (
        f"{path} is a {type(value).__name__} ({_shown(value)}); metadata values must be "
        "JSON: str, int, float, bool, None, lists or dicts of them (convert it, e.g. a datetime "
        "with .isoformat())"
    )
    raise ConfigError(msg)


def check_metadata(value: object, *, field: str = "metadata") -> dict[str, Any]:
    """A validated copy of a memory's metadata (`None` is an empty object).

    Raises:
        ConfigError: If it is not a JSON object with string keys, or is too large.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        msg = (
            f"{field} must be a dict of JSON values with string keys, got "
            f"{type(value).__name__} {_shown(value)}"
        )
        raise ConfigError(msg)
    _check_json(value, field)
    # lone surrogates of text values pass through as themselves: repaired like memory text
    text = _SURROGATE_RE.sub("\ufffd", json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    size = len(text.encode("utf-8"))
    if size > MAX_METADATA_BYTES:
        msg = (
            f"{field} is {size} bytes as JSON ({_shown(text, 60)}); at most "
            f"{MAX_METADATA_BYTES} bytes are allowed: keep large data elsewhere and store a "
            "reference to it"
        )
        raise ConfigError(msg)
    copy: dict[str, Any] = json.loads(text)
    return copy


def normalize_expiry(value: object, *, field: str = "expires_at") -> str | None:
    """An expiry as stored: UTC ISO-8601 with milliseconds and `Z`, or `None` for never.

    Accepts a `datetime` (naive = UTC), an ISO-8601 date-time text, or `None`.

    Raises:
        ConfigError: For anything else.
    """
    if value is None or value == "":
        return None
    try:
        if isinstance(value, dt.datetime):
            return iso_utc(value)
        if isinstance(value, str):
            return iso_utc(dt.datetime.fromisoformat(value.strip()))
    except OverflowError:
        msg = (
            f"{field} {_shown(value)} falls outside years 1..9999 once converted to UTC; "
            "give a time within them, or None for never"
        )
        raise ConfigError(msg) from None
    except ValueError:
        pass
    msg = (
        f"{field} must be a datetime or an ISO-8601 date-time such as '2026-01-31T12:00:00Z' "
        f"(UTC when it has no offset), or None for never; got {_shown(value)}"
    )
    raise ConfigError(msg)


def check_ttl(value: object, *, field: str = "ttl") -> float | None:
    """A time to live in seconds (`None`: never expires).

    Raises:
        ConfigError: Unless it is a positive number of seconds or a `timedelta`.
    """
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or not 0 < seconds <= MAX_TTL_SECONDS
    ):
        msg = (
            f"{field} must be a positive number of seconds (at most {MAX_TTL_SECONDS}) or a "
            f"datetime.timedelta, or None for never; got {_shown(value)}"
        )
        raise ConfigError(msg)
    return float(seconds)


def expiry_after(ttl: float, now: dt.datetime | None = None) -> str:
    """The stored expiry `ttl` seconds after `now` (default: the current time)."""
    start = now if now is not None else dt.datetime.now(dt.UTC)
    return iso_utc(start + dt.timedelta(seconds=ttl))


def is_expired(record: MemoryRecord, now: float | None = None) -> bool:
    """Whether a memory's expiry has passed (at `now`, epoch seconds; default: the clock)."""
    if record.expires_at is None:
        return False
    moment = epoch(record.expires_at)
    return moment is not None and moment <= (time.time() if now is None else now)


def with_expiry(
    records: Sequence[MemoryRecord], ttl: float | None, stated: Sequence[bool]
) -> list[MemoryRecord]:
    """The records, those whose expiry was not `stated` expiring `ttl` seconds from now.

    A record that stated its expiry keeps it, `None` (never) included: a restored or copied
    memory without an expiry stays permanent.
    """
    if ttl is None:
        return list(records)
    expiry = expiry_after(ttl)
    pairs = zip(records, stated, strict=True)
    return [r if said else replace(r, expires_at=expiry) for r, said in pairs]


def states_expiry(data: object) -> bool:
    """Whether a record given to `add_memories` says when it expires (`None`: never).

    A `MemoryRecord` always does (it is a whole record, e.g. one read from another store); a
    mapping does when it has an `expires_at` key, `null` included (an exported line).
    """
    return isinstance(data, MemoryRecord) or (isinstance(data, Mapping) and "expires_at" in data)


def time_bound(field: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime | dt.date) and not isinstance(value, dt.datetime):
        value = value.isoformat()
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return moment.timestamp()
    if isinstance(value, str):
        found = epoch(value.strip(), end=field.endswith("_before"))
        if found is not None:
            return found
    msg = (
        f"{field} must be a datetime, a date or an ISO-8601 text such as '2026-01-31' or "
        f"'2026-01-31T12:00:00Z' (UTC when it has no offset), got {_shown(value)}"
    )
    raise ConfigError(msg)


def memory_filter(
    *,
    metadata: object = None,
    created_after: object = None,
    created_before: object = None,
    active_after: object = None,
    active_before: object = None,
) -> MemoryFilter | None:
    """The index filter of a search's optional arguments, or `None` when there are none.

    `metadata` is a filter of `_exchange.filters` over the memory's metadata (equality,
    `$eq $ne $gt $gte $lt $lte $in $nin`, times as ranges), the LangGraph store's language.

    Raises:
        ConfigError: Naming the argument, the value and the accepted forms (an unsupported
            operator included).
    """
    test = compile_value_filter(metadata, field="metadata")
    where = MemoryFilter(
        where=None if test is None else _metadata_test(test),
        created_after=time_bound("created_after", created_after),
        created_before=time_bound("created_before", created_before),
        active_after=time_bound("active_after", active_after),
        active_before=time_bound("active_before", active_before),
    )
    for low, high in (("created_after", "created_before"), ("active_after", "active_before")):
        a, b = getattr(where, low), getattr(where, high)
        if a is not None and b is not None and a > b:
            msg = f"{low} ({_shown_bound(low, where)}) is after {high}; swap them"
            raise ConfigError(msg)
    return None if where.empty else where


def _metadata_test(test: ValueTest) -> Callable[[Mapping[str, Any] | None, str], bool]:
    def where(metadata: Mapping[str, Any] | None, kind: str) -> bool:
        return test(metadata or {})

    return where


def _shown_bound(name: str, where: MemoryFilter) -> str:
    """A bound of a filter as UTC ISO text (for messages)."""
    value = getattr(where, name)
    return iso_utc(dt.datetime.fromtimestamp(value, dt.UTC)) if value is not None else "None"


class ExpirySweeper:
    """Deletes expired memories on a background daemon thread: at start, then periodically.

    Reads never depend on it (the index hides expired memories at once); it only frees the
    space. Each pass deletes at most `SWEEP_BATCH` memories, one transaction per scope.

    Args:
        store: A writable store.
        interval: Seconds between passes.
    """

    def __init__(self, store: BaseMemoryStore, interval: float) -> None:
        self._store = store
        self._interval = interval
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.swept = 0
        """Memories deleted so far (for tests and stats)."""

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tdai-expiry-sweep", daemon=True)
            self._thread.start()

    def sweep(self) -> int:
        """One pass now, on the caller's thread; returns how many memories were deleted."""
        now = iso_utc()
        deleted = self._store.sweep_expired(now, limit=SWEEP_BATCH)
        self.swept += deleted
        if deleted:
            logger.info("deleted %d expired memories", deleted)
        return deleted

    def _run(self) -> None:
        mark_background()
        while not self._stop.is_set():
            try:
                full = self.sweep() >= SWEEP_BATCH
            except (StoreClosedError, StoreReadOnlyError):
                return
            except Exception as exc:  # a failed pass is retried at the next interval
                logger.warning("the expiry sweep failed (%s); retrying later", type(exc).__name__)
                logger.debug("expiry sweep failure", exc_info=True)
                full = False
            self._wake.wait(0.05 if full else self._interval)
            self._wake.clear()

    @property
    def interval(self) -> float:
        """Seconds between passes."""
        return self._interval

    def sweep_at_least_every(self, seconds: float) -> None:
        """Shorten the interval to `seconds` if it is longer (a shorter one is kept).

        A waiting thread starts its next pass now, then keeps the new interval.
        """
        if seconds < self._interval:
            self._interval = seconds
            self._wake.set()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the thread, waiting at most `timeout` seconds for a pass in progress."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(timeout, 0.0))
