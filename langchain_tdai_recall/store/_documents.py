"""L3 persona and L2 scene blocks: human-readable Markdown per scope.

On disk a scope is a folder `scopes/<user>/<agent or @shared>/` holding `persona.md` and
`scenes/<name>.md`. Folder names percent-encode every byte outside `[A-Za-z0-9_-]`, so no id can
escape the store directory or collide with another. An id whose encoded name would pass 255
bytes (the limit of common file systems) gets a folder named by the start of its encoding, `~`
and a hash of the id (`~` is never part of an encoded name), with the id itself in the folder's
`.id` file; shorter ids keep their readable names. Scene file names are kept under 200 bytes.
Scene files start with a small metadata header (the original plugin's `-----META-START-----`
layout, plus `title`, see `text.scene_header`), then a blank line and the body. Writes go to a
temporary file (`.tmp-<pid>-*.md`) that is renamed over the target, so a killed process leaves
either the old or the new version; temporary files left by dead processes are removed when a
store opens, and are never read.
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import logging
import os
import re
import tempfile
import threading
import time
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import unquote

from langchain_tdai_recall._process import pid_alive
from langchain_tdai_recall.errors import (
    ConfigError,
    StoreError,
    StoreReadOnlyError,
    StoreWriteError,
)
from langchain_tdai_recall.text.scene_header import render_scene_header, split_scene_header
from langchain_tdai_recall.types import SceneBlock, SceneInfo, Scope

__all__ = [
    "DocumentStore",
    "FileDocuments",
    "InMemoryDocuments",
    "normalize_scene_name",
    "parse_scene_file",
    "render_scene_file",
]

logger = logging.getLogger(__name__)

_UNSAFE_RE: Final = re.compile(r"[\\/:*?\"<>|#%&{}$!'`@=+\[\]^~;,\x00-\x1f\x7f]+")
_MAX_NAME: Final = 80
_SURROGATE_RE: Final = re.compile(r"[\ud800-\udfff]")
_MAX_NAME_BYTES: Final = 200
"""Longest scene file stem in UTF-8 bytes (a file name may have 255; `.md` and `-N` follow)."""
_MAX_FOLDER_BYTES: Final = 255
"""Longest folder name most file systems accept (ext4, APFS, NTFS in UTF-16 units: all >= 255)."""
_HASHED_HEAD: Final = 80
"""Bytes of the encoded id kept readable in front of the hash of a long id's folder name."""
_ID_FILE: Final = ".id"
_TMP_PREFIX: Final = ".tmp-"
_TMP_RE: Final = re.compile(r"^\.tmp-(?:(\d+)-)?.*\.md$")
_ABANDONED_AFTER_S: Final = 3600.0
"""A temporary file of a live process older than this is abandoned too (pid reuse)."""
_RACY_NS: Final = 2_000_000_000
"""Coarsest file-time granularity we allow for (FAT: 2 s). A cache entry checked less than this
after its newest file's modification time is "racy": a later edit within the same clock tick
could keep size and time, so its content is compared instead of trusting the stat signature."""


def normalize_scene_name(name: str) -> str:
    """A scene name as a safe file stem: no separators, no `..`, no control characters.

    Whitespace runs become `-`, unsafe punctuation is removed, leading dots and dashes are
    stripped, and the result is at most 80 code points. Raises `ConfigError` when nothing is left.
    """
    if _SURROGATE_RE.search(str(name)):
        msg = (
            f"scene name {_shown(str(name))} contains a lone surrogate (not valid Unicode text); "
            "use letters, digits, CJK characters, '-', '_' or '.'"
        )
        raise ConfigError(msg)
    text = unicodedata.normalize("NFC", str(name)).strip()
    text = re.sub(r"\s+", "-", text)
    text = _UNSAFE_RE.sub("", text)
    text = re.sub(r"\.{2,}", ".", text).strip(".-")
    text = _fit_bytes(text[:_MAX_NAME], _MAX_NAME_BYTES).strip(".-")
    if not text:
        msg = (
            f"scene name {name!r} has no usable characters; use letters, digits, CJK "
            "characters, '-', '_' or '.'"
        )
        raise ConfigError(msg)
    return text


def _shown(text: str) -> str:
    """`text` quoted for a message: at most 80 code points, with an ellipsis when cut."""
    return repr(text if len(text) <= 80 else text[:80] + "…")


def _fit_bytes(text: str, limit: int) -> str:
    """The longest prefix of `text` whose UTF-8 encoding has at most `limit` bytes."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", "ignore")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def render_scene_file(block: SceneBlock, title: str) -> str:
    """The file text of a scene block."""
    info = block.info
    header = render_scene_header(
        {
            "title": title,
            "created": info.created,
            "updated": info.updated,
            "summary": info.summary,
            "heat": info.heat,
        }
    )
    return header + block.body


def parse_scene_file(name: str, text: str) -> tuple[SceneBlock, str]:
    """Parse a scene file into its block and title; a file without a header is all body."""
    fields, body, _ = split_scene_header(text)
    try:
        heat = int(fields.get("heat", "0"))
    except ValueError:
        heat = 0
    info = SceneInfo(
        name=name,
        summary=fields.get("summary", ""),
        heat=heat,
        created=fields.get("created", ""),
        updated=fields.get("updated", ""),
    )
    return SceneBlock(info=info, body=body), fields.get("title", name)


class DocumentStore(ABC):
    """Persona and scene storage for all scopes. Implementations are thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    @abstractmethod
    def get_persona(self, scope: Scope) -> str | None:
        """The persona text, or `None`."""

    @abstractmethod
    def set_persona(self, scope: Scope, text: str | None) -> None:
        """Replace the persona; `None` or blank text deletes it."""

    @abstractmethod
    def _read(self, scope: Scope, name: str) -> tuple[SceneBlock, str] | None:
        """A scene and its title by normalised name."""

    @abstractmethod
    def _write(self, scope: Scope, block: SceneBlock, title: str) -> None:
        """Store a scene under `block.info.name`."""

    @abstractmethod
    def _remove(self, scope: Scope, name: str) -> bool:
        """Delete a scene by normalised name."""

    @abstractmethod
    def _names(self, scope: Scope) -> list[str]:
        """Normalised names of a scope's scenes."""

    @abstractmethod
    def scopes(self) -> list[Scope]:
        """Every scope holding a persona or a scene."""

    def list_scenes(self, scope: Scope) -> list[SceneInfo]:
        """Scenes of a scope, highest heat first, then by name."""
        with self._lock:
            infos = [found[0].info for n in self._names(scope) if (found := self._read(scope, n))]
        return sorted(infos, key=lambda s: (-s.heat, s.name))

    def read_scene(self, scope: Scope, name: str) -> SceneBlock | None:
        """A scene by its name as listed (`list_scenes`, the scene navigation); `None` when absent.

        Raises `ConfigError` for anything that is not a plain scene name (paths, `..`).
        """
        handle = str(name).strip()
        if not handle or handle != normalize_scene_name(handle):
            msg = (
                f"{_shown(str(name))} is not a scene name; use one of the names listed in the "
                "scene navigation (no paths or '..')"
            )
            raise ConfigError(msg)
        with self._lock:
            found = self._read(scope, handle)
            return found[0] if found else None

    def upsert_scene(
        self, scope: Scope, title: str, *, summary: str, body: str, heat: int | None
    ) -> SceneInfo:
        """Create or rewrite a scene; returns its metadata (with its final name).

        The file name is `normalize_scene_name(title)`; when another scene already uses that
        name under a different title, `-2`, `-3`, ... is appended. `heat=None` starts a new scene
        at 1 and adds 1 to an existing one's heat on every rewrite.
        """
        base = normalize_scene_name(title)
        clean_title = " ".join(str(title).split())
        now = _now()
        with self._lock:
            name, n = base, 1
            while True:
                found = self._read(scope, name)
                if found is None or found[1] == clean_title:
                    break
                n += 1
                name = f"{_fit_bytes(base[: _MAX_NAME - 4], _MAX_NAME_BYTES - 4)}-{n}"
            if found is None:
                info = SceneInfo(
                    name=name,
                    summary=summary,
                    heat=1 if heat is None else heat,
                    created=now,
                    updated=now,
                )
            else:
                old = found[0].info
                info = SceneInfo(
                    name=name,
                    summary=summary,
                    heat=old.heat + 1 if heat is None else heat,
                    created=old.created or now,
                    updated=now,
                )
            self._write(scope, SceneBlock(info=info, body=body), clean_title)
            return info

    def delete_scene(self, scope: Scope, name: str) -> bool:
        """Delete a scene by name; returns whether it existed."""
        handle = str(name).strip()
        if _SURROGATE_RE.search(handle):
            normalize_scene_name(handle)  # raises ConfigError naming the problem
        if not handle or handle != normalize_scene_name(handle):
            return False
        with self._lock:
            return self._remove(scope, handle)

    def scenes_with_titles(self, scope: Scope) -> dict[str, tuple[SceneBlock, str]]:
        """Every scene of a scope with its title, by name (for memory formation's edits)."""
        with self._lock:
            return {n: found for n in self._names(scope) if (found := self._read(scope, n))}

    def apply_scene_edits(
        self,
        scope: Scope,
        writes: Sequence[tuple[SceneBlock, str]],
        removes: Sequence[str],
    ) -> None:
        """Write scenes exactly as given (name, metadata, title) and remove others, all or none.

        Every touched scene is read first; when a write or a removal fails, the ones already
        applied are put back as they were and the error is raised. Names must be normalised.
        """
        with self._lock:  # one update of the scope's scenes at a time
            touched = list(dict.fromkeys([*(b.info.name for b, _ in writes), *removes]))
            before = {name: self._read(scope, name) for name in touched}
            try:
                for block, title in writes:
                    self._write(scope, block, title)
                for name in removes:
                    self._remove(scope, name)
            except BaseException:
                for name, found in before.items():
                    with suppress(Exception):  # the original error is the one to report
                        if found is None:
                            self._remove(scope, name)
                        else:
                            self._write(scope, found[0], found[1])
                raise

    def stable_context(self, scope: Scope) -> tuple[str | None, list[SceneInfo]]:
        """The persona and the scenes (highest heat first) that recall puts in the system prompt.

        Backends may cache it.
        """
        return self.get_persona(scope), self.list_scenes(scope)

    def count_scenes(self, scope: Scope) -> int:
        """Number of scenes of a scope."""
        with self._lock:
            return len(self._names(scope))


class InMemoryDocuments(DocumentStore):
    """Documents kept in dictionaries (the `path=None` store)."""

    def __init__(self) -> None:
        super().__init__()
        self._personas: dict[Scope, str] = {}
        self._scenes: dict[Scope, dict[str, str]] = {}

    def get_persona(self, scope: Scope) -> str | None:
        with self._lock:
            return self._personas.get(scope)

    def set_persona(self, scope: Scope, text: str | None) -> None:
        with self._lock:
            if text is None or not text.strip():
                self._personas.pop(scope, None)
            else:
                self._personas[scope] = text

    def _read(self, scope: Scope, name: str) -> tuple[SceneBlock, str] | None:
        text = self._scenes.get(scope, {}).get(name)
        return parse_scene_file(name, text) if text is not None else None

    def _write(self, scope: Scope, block: SceneBlock, title: str) -> None:
        self._scenes.setdefault(scope, {})[block.info.name] = render_scene_file(block, title)

    def _remove(self, scope: Scope, name: str) -> bool:
        return self._scenes.get(scope, {}).pop(name, None) is not None

    def _names(self, scope: Scope) -> list[str]:
        return sorted(self._scenes.get(scope, {}))

    def scopes(self) -> list[Scope]:
        with self._lock:
            found = set(self._personas) | {s for s, scenes in self._scenes.items() if scenes}
        return sorted(found, key=lambda s: (s.user_id, s.agent_id or ""))


def _encode(part: str) -> str:
    """The folder name of an id: readable when it fits, else a readable start and a hash."""
    encoded = "".join(
        ch
        if (ch.isascii() and (ch.isalnum() or ch in "_-"))
        else "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
        for ch in part
    )
    if len(encoded) <= _MAX_FOLDER_BYTES:  # every name that fitted keeps its old form
        return encoded
    head = encoded[:_HASHED_HEAD]
    cut = head.rfind("%", len(head) - 2)  # never split a %XX escape
    head = head[:cut] if cut != -1 else head
    digest = hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{head}~{digest}"


def _decode(folder: Path) -> str | None:
    """The id a scope folder belongs to; `None` for a hashed name whose `.id` file is gone."""
    if "~" not in folder.name:
        return unquote(folder.name)
    try:
        text = (folder / _ID_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        logger.debug("scope folder without a readable %s file ignored: %s", _ID_FILE, folder)
        return None
    return text if _encode(text) == folder.name else None


@contextmanager
def _file_errors(action: str, path: Path) -> Iterator[None]:
    """Translate OS errors of a document read or write into the package's errors."""
    try:
        yield
    except (FileNotFoundError, IsADirectoryError):
        raise
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            msg = (
                f"no space left on the device to {action} {path}; nothing was changed. Free "
                "disk space and retry"
            )
            raise StoreWriteError(msg) from exc
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            msg = (
                f"cannot {action} {path}: {exc.strerror or exc}. Open the store with "
                "TdaiMemory.open(path, read_only=True) to search it, or fix the permissions"
            )
            raise StoreReadOnlyError(msg) from exc
        msg = f"cannot {action} {path}: {exc.strerror or exc}"
        raise StoreError(msg) from exc


def _atomic_write(path: Path, text: str) -> None:
    with _file_errors("write", path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=path.parent, prefix=f"{_TMP_PREFIX}{os.getpid()}-", suffix=".md"
        )
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def remove_abandoned_temp_files(root: Path) -> int:
    """Delete `.tmp-*.md` files that interrupted writes left under `root`; returns how many.

    A file named after a live process (`.tmp-<pid>-...`) is kept unless it is older than an
    hour, since that process may be writing it right now.
    """
    removed = 0
    if not root.is_dir():
        return 0
    now = time.time()
    for path in root.rglob(f"{_TMP_PREFIX}*.md"):
        match = _TMP_RE.match(path.name)
        if match is None:
            continue
        try:
            age = now - path.stat().st_mtime
            if match.group(1) and pid_alive(int(match.group(1))) and age < _ABANDONED_AFTER_S:
                continue
            path.unlink()
            removed += 1
        except OSError:
            continue
    if removed:
        logger.info("removed %d temporary files left by interrupted writes in %s", removed, root)
    return removed


@dataclass(slots=True)
class _Cached:
    """A scope's stable context with what it was read from."""

    signature: tuple[object, ...]
    """Per file: name, modification and status-change times, size, inode."""
    digest: bytes
    """Hash of the files' contents."""
    newest_ns: int
    """Newest modification or status-change time among the files."""
    checked_ns: int
    """When the contents were last read and hashed."""
    value: tuple[str | None, list[SceneInfo]]
    """The persona and scenes."""

    def racy(self) -> bool:
        return self.checked_ns < self.newest_ns + _RACY_NS


class FileDocuments(DocumentStore):
    """Documents as Markdown files under `<root>/scopes/`.

    `stable_context` is cached per scope and revalidated on every call, so edits by this
    process, another process or a person with an editor are all seen. A call first compares a
    stat signature of the persona and scene files (names, modification and status-change times,
    sizes, inodes); when it is unchanged and the files last changed well before the cache was
    checked, the cache is used without reading a file. Otherwise the files are read and their
    contents hashed, so an edit that keeps the size within one tick of a coarse file clock, or
    whose modification time was set back, is still seen.
    """

    def __init__(self, root: Path, *, read_only: bool = False) -> None:
        super().__init__()
        self.root = root / "scopes"
        self.read_only = read_only
        self._context_cache: dict[Scope, _Cached] = {}
        if not read_only:
            remove_abandoned_temp_files(self.root)

    def _files(self, scope: Scope) -> list[tuple[Path, os.stat_result]]:
        folder = self.scope_dir(scope)
        found: list[tuple[Path, os.stat_result]] = []
        with suppress(FileNotFoundError, NotADirectoryError):
            found.append((folder / "persona.md", (folder / "persona.md").stat()))
        try:
            with os.scandir(folder / "scenes") as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.name.endswith(".md") and not entry.name.startswith("."):
                        found.append((Path(entry.path), entry.stat()))
        except (FileNotFoundError, NotADirectoryError):
            pass
        return found

    def _digest(self, files: list[tuple[Path, os.stat_result]]) -> bytes:
        digest = hashlib.blake2b(digest_size=16)
        for path, _ in files:
            digest.update(path.name.encode("utf-8", "surrogateescape") + b"\0")
            try:
                digest.update(path.read_bytes())
            except FileNotFoundError:
                digest.update(b"\1missing")
            digest.update(b"\0")
        return digest.digest()

    def stable_context(self, scope: Scope) -> tuple[str | None, list[SceneInfo]]:
        with self._lock:
            files = self._files(scope)
            signature = tuple(
                (p.name, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino) for p, st in files
            )
            newest = max((max(st.st_mtime_ns, st.st_ctime_ns) for _, st in files), default=0)
            cached = self._context_cache.get(scope)
            if cached is not None and cached.signature == signature and not cached.racy():
                return cached.value[0], list(cached.value[1])
            now = time.time_ns()
            digest = self._digest(files)
            if cached is not None and cached.digest == digest:
                cached.signature, cached.newest_ns, cached.checked_ns = signature, newest, now
                return cached.value[0], list(cached.value[1])
            value = (self.get_persona(scope), self.list_scenes(scope))
            self._context_cache[scope] = _Cached(signature, digest, newest, now, value)
            return value[0], list(value[1])

    def scopes(self) -> list[Scope]:
        found: list[Scope] = []
        if not self.root.is_dir():
            return found
        for user_dir in sorted(self.root.iterdir()):
            user = _decode(user_dir) if user_dir.is_dir() else None
            if user is None:
                continue
            for agent_dir in sorted(user_dir.iterdir()):
                if not agent_dir.is_dir():
                    continue
                agent = None if agent_dir.name == "@shared" else _decode(agent_dir)
                if agent is None and agent_dir.name != "@shared":
                    continue
                scope = Scope(user, agent)
                if self.get_persona(scope) is not None or self._names(scope):
                    found.append(scope)
        return found

    def scope_dir(self, scope: Scope) -> Path:
        """Folder of a scope."""
        agent = scope.agent_id
        return self.root / _encode(scope.user_id) / (_encode(agent) if agent else "@shared")

    def get_persona(self, scope: Scope) -> str | None:
        path = self.scope_dir(scope) / "persona.md"
        with self._lock, _file_errors("read", path):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except (FileNotFoundError, NotADirectoryError):
                return None
        return text if text.strip() else None

    def _label(self, scope: Scope) -> None:
        """Write the `.id` file of each hashed folder of `scope` (before the first file in it)."""
        user_dir = self.root / _encode(scope.user_id)
        folders = [(user_dir, scope.user_id)]
        if scope.agent_id:
            folders.append((user_dir / _encode(scope.agent_id), scope.agent_id))
        for folder, value in folders:
            label = folder / _ID_FILE
            if "~" in folder.name and not label.exists():
                _atomic_write(label, value)

    def set_persona(self, scope: Scope, text: str | None) -> None:
        path = self.scope_dir(scope) / "persona.md"
        with self._lock:
            if text is None or not text.strip():
                with _file_errors("delete", path):
                    path.unlink(missing_ok=True)
            else:
                self._label(scope)
                _atomic_write(path, text)

    def _scene_path(self, scope: Scope, name: str) -> Path:
        return self.scope_dir(scope) / "scenes" / f"{name}.md"

    def _read(self, scope: Scope, name: str) -> tuple[SceneBlock, str] | None:
        path = self._scene_path(scope, name)
        with _file_errors("read", path):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                return None
        return parse_scene_file(name, text)

    def _write(self, scope: Scope, block: SceneBlock, title: str) -> None:
        self._label(scope)
        _atomic_write(self._scene_path(scope, block.info.name), render_scene_file(block, title))

    def _remove(self, scope: Scope, name: str) -> bool:
        path = self._scene_path(scope, name)
        with _file_errors("delete", path):
            existed = path.exists()
            path.unlink(missing_ok=True)
        return existed

    def _names(self, scope: Scope) -> list[str]:
        folder = self.scope_dir(scope) / "scenes"
        if not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob("*.md") if not p.name.startswith("."))
