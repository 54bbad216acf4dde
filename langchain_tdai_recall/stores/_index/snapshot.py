"""Persisted snapshots of the derived per-scope indexes, so a large scope restarts in a second.

Building a `LayerIndex` from its rows costs about 10 s per 100k memories (reading the rows,
tokenising every text, training the vector quantiser). A snapshot is that index written to a
file at the generation it had caught up to; the next process restores it and catches up from
there with the rows written since, exactly as a running process does.

A snapshot is a cache, never a source of truth, so it is trusted only when every check passes;
otherwise it is ignored, a line is logged, and the index is built from the rows:

- the file starts with a magic string and a format version;
- a JSON header (its own BLAKE2b digest follows it) names the store, scope, layer, generation,
  tokenizer identity, embedder identity and the arrays that follow, with their types and sizes;
- the arrays follow, and the header carries the CRC-32 of each (3.7 GB/s here, against 0.8 for
  BLAKE2b: a snapshot guards against damage, not against an attacker who can write the store
  directory anyway): a truncated or bit-flipped file fails here;
- the identity (store, scope, layer, tokenizer, embedder) must be the reader's;
- the generation must not be ahead of the store's (a store restored from a backup, or replaced);
- after catching up, the index must hold as many rows as the store (checked by the caller).

Nothing is unpickled: the header is JSON, the arrays are raw little-endian numbers read into
numpy buffers, and the vector quantiser uses FAISS's own binary format. A snapshot is written to
a temporary file in the same directory and renamed over the old one, so a reader sees the old
snapshot or the new one, never half of one; concurrent writers (several processes) each rename a
complete file. The data is not fsynced: a file torn by a power cut fails its checksums.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import struct
import sys
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

import numpy as np
import numpy.typing as npt

from langchain_tdai_recall.errors import StoreError
from langchain_tdai_recall.stores._index.extras import extras_from_json, extras_to_json
from langchain_tdai_recall.stores._index.keyword import KeywordState
from langchain_tdai_recall.stores._index.layer import LayerIndex, LayerState, RowMeta, RowSource
from langchain_tdai_recall.stores.records import Layer

__all__ = [
    "SNAPSHOT_MIN_ROWS",
    "SnapshotCache",
    "SnapshotError",
    "SnapshotKey",
    "index_cache_dir",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

logger = logging.getLogger(__name__)

MAGIC: Final = b"TDAI-IDX"
FORMAT: Final = 4
"""4: the rows' sparse fields (expiry, metadata, activity times; `extras`) are kept."""
_DIGEST_SIZE: Final = 16
_MAX_HEADER: Final = 1 << 20
_ALIGN: Final = 64
SNAPSHOT_MIN_ROWS: Final = 2000
"""Indexes smaller than this are not snapshotted: they build in well under a second."""
_DTYPES: Final = {
    "i4": np.int32,
    "i8": np.int64,
    "f2": np.float16,
    "f4": np.float32,
    "u1": np.uint8,
}


class SnapshotError(Exception):
    """A snapshot that cannot be trusted; the message says why."""


@dataclass(frozen=True, slots=True)
class SnapshotKey:
    """What a snapshot must have been built for to be used."""

    store: str
    """The store's identity (`local`, or a PostgreSQL location without credentials)."""
    scope_id: int
    layer: Layer
    tokenizer: str
    embedder: str | None


def index_cache_dir(index_cache: Path | str | None, default: Path | None) -> Path | None:
    """The snapshot directory of an `index_cache` setting: `"auto"` means `default`, `None` off."""
    if index_cache is None or index_cache == "":
        return None
    if index_cache == "auto":
        return default
    return Path(index_cache).expanduser()


def snapshot_path(directory: Path, key: SnapshotKey) -> Path:
    """The file of a scope's layer in a snapshot directory (one directory may serve stores)."""
    store = hashlib.blake2b(key.store.encode("utf-8"), digest_size=6).hexdigest()
    return directory / f"{store}-{key.layer}-{key.scope_id}.tdxs"


def _texts(values: list[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """Strings as one UTF-8 blob and the code-point offset of each string."""
    blob = "".join(values)
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:])
    return np.frombuffer(blob.encode("utf-8"), dtype=np.uint8), offsets


def _untexts(blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> list[str]:
    text = blob.tobytes().decode("utf-8")
    if offsets.size == 0 or int(offsets[0]) != 0 or int(offsets[-1]) != len(text):
        msg = "string offsets do not match their text"
        raise SnapshotError(msg)
    bounds = offsets.tolist()
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _codes(values: list[str]) -> tuple[list[str], npt.NDArray[np.int32]]:
    """Dictionary encoding: the distinct values and each value's number (types, scenes)."""
    table = list(dict.fromkeys(values))
    number = {v: i for i, v in enumerate(table)}
    return table, np.fromiter((number[v] for v in values), np.int32, len(values))


def _arrays(state: LayerState) -> tuple[dict[str, npt.NDArray[Any]], list[str], list[str]]:
    metas = state.metas
    kinds, kind_codes = _codes([m.kind for m in metas])
    groups, group_codes = _codes([m.group for m in metas])
    # `created` is stored only where it differs from `recency` (empty string otherwise)
    meta_text, meta_offsets = _texts(
        [m.id for m in metas]
        + [m.recency for m in metas]
        + ["" if m.created == m.recency else m.created for m in metas]
        + kinds
        + groups
    )
    kw = state.keyword
    tokens, token_offsets = _texts(kw.tokens)
    arrays: dict[str, npt.NDArray[Any]] = {
        "rowids": state.rowids,
        "priority": np.fromiter((m.priority for m in metas), np.int32, len(metas)),
        "meta_text": meta_text,
        "meta_offsets": meta_offsets,
        "kind_codes": kind_codes,
        "group_codes": group_codes,
        "tokens": tokens,
        "token_offsets": token_offsets,
        "posting_starts": kw.posting_starts,
        "slots": kw.slots,
        "weights": kw.weights,
        "doc_ids": kw.doc_ids,
        "order_keys": kw.order_keys,
        "term_starts": kw.term_starts,
        "term_ids": kw.term_ids,
        "extras": np.frombuffer(extras_to_json(state.extras), dtype=np.uint8),
    }
    if state.vectors is not None:
        arrays["vector_ids"] = state.vectors.ids
        arrays["vector_rows"] = state.vectors.rows
        arrays["quantiser"] = state.vectors.quantiser
    return arrays, kinds, groups


def _dtype_code(array: npt.NDArray[Any]) -> str:
    for code, dtype in _DTYPES.items():
        if array.dtype == dtype:
            return code
    msg = f"unsupported array type {array.dtype}"
    raise TypeError(msg)


def write_snapshot(path: Path, key: SnapshotKey, state: LayerState) -> int:
    """Write `state` atomically (temporary file, then rename); returns the bytes written."""
    raw, kinds, groups = _arrays(state)
    arrays = {name: np.ascontiguousarray(a) for name, a in raw.items()}
    sections = []
    for name, array in arrays.items():
        data = array.data.cast("B")
        crc = zlib.crc32(data)
        sections.append([name, _dtype_code(array), list(array.shape), data.nbytes, crc])
    header = json.dumps(
        {
            "format": FORMAT,
            "store": key.store,
            "scope_id": key.scope_id,
            "layer": key.layer,
            "tokenizer": key.tokenizer,
            "embedder": key.embedder,
            "generation": state.generation,
            "rows": len(state.metas),
            "kinds": len(kinds),
            "groups": len(groups),
            "dim": state.vectors.dim if state.vectors is not None else 0,
            "trained_size": state.vectors.trained_size if state.vectors is not None else 0,
            "sections": sections,
        },
        ensure_ascii=True,
        sort_keys=True,
    ).encode("ascii")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(MAGIC + struct.pack("<II", FORMAT, len(header)) + header)
            f.write(hashlib.blake2b(header, digest_size=_DIGEST_SIZE).digest())
            for array in arrays.values():
                f.write(b"\0" * (-f.tell() % _ALIGN))
                f.write(array.data.cast("B"))
            size = f.tell()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return size


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        msg = "the file is truncated"
        raise SnapshotError(msg)
    return data


def _read_header(f: BinaryIO) -> dict[str, Any]:
    if _read_exact(f, len(MAGIC)) != MAGIC:
        msg = "not an index snapshot"
        raise SnapshotError(msg)
    version, length = struct.unpack("<II", _read_exact(f, 8))
    if version != FORMAT or length > _MAX_HEADER:
        msg = f"unknown snapshot format {version}"
        raise SnapshotError(msg)
    raw = _read_exact(f, length)
    if _read_exact(f, _DIGEST_SIZE) != hashlib.blake2b(raw, digest_size=_DIGEST_SIZE).digest():
        msg = "the header's checksum does not match"
        raise SnapshotError(msg)
    header: dict[str, Any] = json.loads(raw)
    return header


def _check_identity(header: dict[str, Any], key: SnapshotKey, generation: int) -> None:
    theirs = (
        header.get("store"),
        header.get("scope_id"),
        header.get("layer"),
        header.get("tokenizer"),
        header.get("embedder"),
    )
    ours = (key.store, key.scope_id, key.layer, key.tokenizer, key.embedder)
    if theirs != ours:
        msg = f"built for another store, scope, tokenizer or embedder ({theirs} != {ours})"
        raise SnapshotError(msg)
    if not isinstance(header.get("generation"), int) or header["generation"] > generation:
        msg = (
            f"its generation {header.get('generation')} is ahead of the store's {generation} "
            "(was the store restored from a backup or replaced?)"
        )
        raise SnapshotError(msg)


def _read_arrays(f: BinaryIO, header: dict[str, Any]) -> dict[str, npt.NDArray[Any]]:
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name, code, shape, nbytes, crc in header["sections"]:
        dtype = np.dtype(_DTYPES[code])
        array = np.empty(tuple(shape), dtype=dtype)
        if array.nbytes != nbytes:
            msg = f"section {name} has an inconsistent size"
            raise SnapshotError(msg)
        f.seek(-f.tell() % _ALIGN, os.SEEK_CUR)
        view = array.data.cast("B")
        if f.readinto(view) != nbytes:  # type: ignore[attr-defined]
            msg = "the file is truncated"
            raise SnapshotError(msg)
        if zlib.crc32(view) != crc:
            msg = f"the data's checksum does not match (section {name})"
            raise SnapshotError(msg)
        arrays[name] = array
    if f.read(1):
        msg = "the file has trailing data"
        raise SnapshotError(msg)
    return arrays


def read_snapshot(path: Path, key: SnapshotKey, generation: int) -> LayerState:
    """Read and validate a snapshot for `key` taken at most at `generation`.

    Raises:
        SnapshotError: If the snapshot cannot be trusted (the message says why).
        OSError: If the file cannot be read.
    """
    with path.open("rb") as f:
        header = _read_header(f)
        _check_identity(header, key, generation)
        try:
            arrays = _read_arrays(f, header)
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"malformed sections ({exc})"
            raise SnapshotError(msg) from exc
    try:
        return _state(header, arrays, key)
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
        msg = f"inconsistent contents ({exc})"
        raise SnapshotError(msg) from exc


def _state(header: dict[str, Any], a: dict[str, npt.NDArray[Any]], key: SnapshotKey) -> LayerState:
    rowids = a["rowids"]
    n = int(rowids.size)
    strings = _untexts(a["meta_text"], a["meta_offsets"])
    priority = a["priority"].tolist()
    n_kinds, n_groups = int(header["kinds"]), int(header["groups"])
    kind_codes, group_codes = a["kind_codes"], a["group_codes"]
    if (
        len(strings) != 3 * n + n_kinds + n_groups
        or len(priority) != n
        or header.get("rows") != n
        or kind_codes.size != n
        or group_codes.size != n
        or (n and not (kind_codes.min() >= 0 and kind_codes.max() < n_kinds))
        or (n and not (group_codes.min() >= 0 and group_codes.max() < n_groups))
    ):
        msg = "row fields of different lengths"
        raise SnapshotError(msg)
    kinds = [sys.intern(k) for k in strings[3 * n : 3 * n + n_kinds]]
    groups = [sys.intern(g) for g in strings[3 * n + n_kinds :]]
    recency = strings[n : 2 * n]
    created = [c or r for c, r in zip(strings[2 * n : 3 * n], recency, strict=True)]
    metas = list(
        map(
            RowMeta._make,
            zip(
                strings[:n],
                [kinds[c] for c in kind_codes.tolist()],
                [groups[c] for c in group_codes.tolist()],
                priority,
                recency,
                created,
                strict=True,
            ),
        )
    )
    keyword = KeywordState(
        tokenizer_identity=key.tokenizer,
        tokens=_untexts(a["tokens"], a["token_offsets"]),
        posting_starts=a["posting_starts"],
        slots=a["slots"],
        weights=a["weights"],
        doc_ids=a["doc_ids"],
        order_keys=a["order_keys"],
        term_starts=a["term_starts"],
        term_ids=a["term_ids"],
    )
    vectors = None
    if "vector_ids" in a:
        from langchain_tdai_recall.stores._index.vectors import VectorState  # noqa: PLC0415 - faiss

        vectors = VectorState(
            dim=int(header["dim"]),
            ids=a["vector_ids"],
            rows=a["vector_rows"],
            quantiser=a["quantiser"],
            trained_size=int(header["trained_size"]),
        )
    return LayerState(
        generation=int(header["generation"]),
        rowids=rowids,
        metas=metas,
        keyword=keyword,
        vectors=vectors,
        extras=extras_from_json(a["extras"].tobytes()),
    )


class SnapshotCache:
    """A directory of index snapshots for one store: restore on first use, save on close.

    Args:
        directory: Where the snapshots live (created on the first save).
        store: The store's identity, recorded in and checked against every snapshot.
        writable: Whether to save snapshots (a read-only store only reads them).
    """

    def __init__(self, directory: Path, store: str, *, writable: bool = True) -> None:
        self.directory = directory
        self.store = store
        self.writable = writable
        self._saved: dict[tuple[int, Layer], int] = {}
        """Generation of the snapshot on disk of each index restored or saved here."""

    def _key(self, index: LayerIndex) -> SnapshotKey:
        return SnapshotKey(
            self.store, index.scope_id, index.layer, index.tokenizer.identity, index.embedder
        )

    def restore(self, index: LayerIndex, source: RowSource) -> bool:
        """Load the index's snapshot into it, if there is one that can be trusted.

        A snapshot that fails a check is logged (WARNING) and left for the next save to
        replace; the caller then builds the index from its rows.
        """
        key = self._key(index)
        path = snapshot_path(self.directory, key)
        if not path.is_file():
            return False
        try:
            state = read_snapshot(path, key, source.generation(index.scope_id))
            index.restore(state)
        except (SnapshotError, ValueError, OSError) as exc:
            logger.warning(
                "ignoring the index snapshot %s: %s; rebuilding the index from the store",
                path,
                exc,
            )
            return False
        self._saved[(index.scope_id, index.layer)] = state.generation
        logger.info(
            "restored %d %s rows of scope %s from %s (generation %d)",
            len(state.metas),
            index.layer,
            index.scope_id,
            path.name,
            state.generation,
        )
        return True

    def verify(self, index: LayerIndex, source: RowSource) -> bool:
        """After catching up, does a restored index hold exactly the store's row count?"""
        for _ in range(2):  # a write by another process may land between refresh and count
            index.refresh()
            expected = source.count(index.layer, index.scope_id)
            if len(index.meta) == expected:
                return True
        logger.warning(
            "the index snapshot of scope %s (%s) holds %d rows where the store has %d; "
            "rebuilding the index from the store",
            index.scope_id,
            index.layer,
            len(index.meta),
            expected,
        )
        self._saved.pop((index.scope_id, index.layer), None)
        return False

    def save(self, index: LayerIndex) -> bool:
        """Write the index's snapshot when it is large and newer than the one on disk."""
        if not self.writable or len(index.meta) < SNAPSHOT_MIN_ROWS:
            return False
        # caught up first: rows deleted meanwhile (by `forget`, perhaps in another process)
        # must not be written back to disk from this process's older view
        index.refresh()
        if len(index.meta) < SNAPSHOT_MIN_ROWS:
            return False
        if self._saved.get((index.scope_id, index.layer)) == index.generation:
            return False
        state = index.export_state()
        path = snapshot_path(self.directory, self._key(index))
        try:
            size = write_snapshot(path, self._key(index), state)
        except OSError as exc:
            logger.warning("cannot write the index snapshot %s: %s", path, exc)
            return False
        self._saved[(index.scope_id, index.layer)] = state.generation
        logger.info("saved the index snapshot %s (%d bytes)", path.name, size)
        return True

    # -- erasure (issue 16) ---------------------------------------------------------------------

    def forget(self, scope_id: int) -> int:
        """Delete this store's snapshot files of a scope; returns how many were deleted.

        Both layers, and any temporary file an interrupted write left.
        """
        deleted = 0
        for layer in ("l1", "l0"):
            self._saved.pop((scope_id, layer), None)
            name = snapshot_path(self.directory, SnapshotKey(self.store, scope_id, layer, "", None))
            for path in (name, *self.directory.glob(f".{name.name}.*.tmp")):
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    msg = (
                        f"cannot delete the index snapshot {path} ({exc.strerror or exc}); "
                        "fix the permissions of the index cache and run forget again"
                    )
                    raise StoreError(msg) from exc
                deleted += 1
        return deleted
