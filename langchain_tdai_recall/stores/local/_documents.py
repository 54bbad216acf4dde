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

import errno
import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import unquote

from langchain_tdai_recall._runtime.process import pid_alive
from langchain_tdai_recall.errors import (
    StoreError,
    StoreReadOnlyError,
    StoreWriteError,
)
from langchain_tdai_recall.stores._index.cache import SCOPE_SIDE_CACHE, LruDict
from langchain_tdai_recall.stores.documents import (
    DocumentStore,
    parse_scene_file,
    render_scene_file,
)
from langchain_tdai_recall.types import SceneBlock, SceneInfo, Scope

__all__ = ["FileDocuments", "remove_abandoned_temp_files"]

logger = logging.getLogger(__name__)

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
        self._context_cache: LruDict[Scope, _Cached] = LruDict(SCOPE_SIDE_CACHE)
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

    # -- erasure (issue 16) ---------------------------------------------------------------------

    def delete_scope_documents(self, scope: Scope) -> tuple[bool, int]:
        """Delete the scope's folder: persona, scenes, interrupted writes.

        The user's folder goes too when no other scope of the user is left in it (its `.id`
        file names the user).
        """
        with self._lock:
            persona = self.get_persona(scope) is not None
            scenes = len(self._names(scope))
            folder = self.scope_dir(scope)
            self._context_cache.pop(scope, None)
            with _file_errors("delete", folder):
                if folder.is_dir():
                    shutil.rmtree(folder)
            user_dir = folder.parent
            with _file_errors("delete", user_dir):
                left = (
                    [p for p in user_dir.iterdir() if p.name != _ID_FILE]
                    if user_dir.is_dir()
                    else None
                )
                if left == []:
                    shutil.rmtree(user_dir)
        return persona, scenes

    def delete_user_leftovers(self, user_id: str) -> int:
        """Delete the user's folder with everything still in it; returns the scope folders.

        Called after each scope of the user was erased (`forget(all_agents=True)`): what is
        left is a folder no scope can name (a long agent id's hashed folder whose `.id` file
        was lost, so `user_scopes` cannot list it) or stray files. All of it is the user's.
        """
        user_dir = self.root / _encode(user_id)
        with self._lock, _file_errors("delete", user_dir):
            if not user_dir.is_dir():
                return 0
            folders = [p for p in user_dir.iterdir() if p.is_dir()]
            if folders:
                logger.warning(
                    "forget: erasing %d scope folder(s) of the user whose agent id could not "
                    "be read (the %s file is missing or does not match)",
                    len(folders),
                    _ID_FILE,
                )
            self._context_cache.clear()  # entries of the unnamed scopes cannot be told apart
            shutil.rmtree(user_dir)
        return len(folders)

    def user_scopes(self, user_id: str) -> list[Scope]:
        """The scopes of one user with a folder (only that user's folder is read)."""
        user_dir = self.root / _encode(user_id)
        if not user_dir.is_dir():
            return []
        found: list[Scope] = []
        for agent_dir in sorted(user_dir.iterdir()):
            if not agent_dir.is_dir():
                continue
            agent = None if agent_dir.name == "@shared" else _decode(agent_dir)
            if agent is not None or agent_dir.name == "@shared":
                found.append(Scope(user_id, agent))
        return found
