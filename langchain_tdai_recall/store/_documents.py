"""L3 persona and L2 scene blocks: human-readable Markdown per scope.

On disk a scope is a folder `scopes/<user>/<agent or @shared>/` holding `persona.md` and
`scenes/<name>.md`. Folder names percent-encode every byte outside `[A-Za-z0-9_-]`, so no id can
escape the store directory or collide with another. Scene files start with a small metadata
header (the original plugin's `-----META-START-----` layout, plus `title`), then a blank line and
the body. Writes go to a temporary file that is renamed over the target, so a killed process
leaves either the old or the new version.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import tempfile
import threading
import unicodedata
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Final

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.types import SceneBlock, SceneInfo

__all__ = [
    "DocumentStore",
    "FileDocuments",
    "InMemoryDocuments",
    "normalize_scene_name",
    "parse_scene_file",
    "render_scene_file",
]

Scope = tuple[str, str | None]

_META_START: Final = "-----META-START-----"
_META_END: Final = "-----META-END-----"
_UNSAFE_RE: Final = re.compile(r"[\\/:*?\"<>|#%&{}$!'`@=+\[\]^~;,\x00-\x1f\x7f]+")
_MAX_NAME: Final = 80


def normalize_scene_name(name: str) -> str:
    """A scene name as a safe file stem: no separators, no `..`, no control characters.

    Whitespace runs become `-`, unsafe punctuation is removed, leading dots and dashes are
    stripped, and the result is at most 80 code points. Raises `ConfigError` when nothing is left.
    """
    text = unicodedata.normalize("NFC", str(name)).strip()
    text = re.sub(r"\s+", "-", text)
    text = _UNSAFE_RE.sub("", text)
    text = re.sub(r"\.{2,}", ".", text).strip(".-")[:_MAX_NAME].strip(".-")
    if not text:
        msg = (
            f"scene name {name!r} has no usable characters; use letters, digits, CJK "
            "characters, '-', '_' or '.'"
        )
        raise ConfigError(msg)
    return text


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def render_scene_file(block: SceneBlock, title: str) -> str:
    """The file text of a scene block."""
    info = block.info
    one_line = " ".join(info.summary.split())
    return (
        f"{_META_START}\ntitle: {' '.join(title.split())}\ncreated: {info.created}\n"
        f"updated: {info.updated}\nsummary: {one_line}\nheat: {info.heat}\n{_META_END}\n\n"
        f"{block.body}"
    )


def parse_scene_file(name: str, text: str) -> tuple[SceneBlock, str]:
    """Parse a scene file into its block and title; a file without a header is all body."""
    fields: dict[str, str] = {}
    body = text
    if text.startswith(_META_START):
        end = text.find(_META_END)
        if end != -1:
            for line in text[len(_META_START) : end].splitlines():
                key, sep, value = line.partition(":")
                if sep:
                    fields[key.strip()] = value.strip()
            body = text[end + len(_META_END) :].removeprefix("\n").removeprefix("\n")
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
                f"{name!r} is not a scene name; use one of the names listed in the scene "
                "navigation (no paths or '..')"
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
                name = f"{base[: _MAX_NAME - 4]}-{n}"
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
        if not handle or handle != normalize_scene_name(handle):
            return False
        with self._lock:
            return self._remove(scope, handle)

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


def _encode(part: str) -> str:
    return "".join(
        ch
        if (ch.isascii() and (ch.isalnum() or ch in "_-"))
        else "".join(f"%{b:02X}" for b in ch.encode("utf-8"))
        for ch in part
    )


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".md")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class FileDocuments(DocumentStore):
    """Documents as Markdown files under `<root>/scopes/`.

    `stable_context` is cached per scope and revalidated on every call by a stat signature of
    the persona file and every scene file (names, sizes, modification times), so edits by this
    process, another process or a person with an editor are all seen, and an unchanged scope
    costs a directory scan instead of reading and parsing every file.
    """

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root / "scopes"
        self._context_cache: dict[
            Scope, tuple[tuple[object, ...], tuple[str | None, list[SceneInfo]]]
        ] = {}

    def _signature(self, scope: Scope) -> tuple[object, ...]:
        folder = self.scope_dir(scope)
        parts: list[object] = []
        try:
            st = (folder / "persona.md").stat()
            parts.append(("persona.md", st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            parts.append(None)
        try:
            with os.scandir(folder / "scenes") as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.name.endswith(".md") and not entry.name.startswith("."):
                        st = entry.stat()
                        parts.append((entry.name, st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            pass
        return tuple(parts)

    def stable_context(self, scope: Scope) -> tuple[str | None, list[SceneInfo]]:
        with self._lock:
            signature = self._signature(scope)
            cached = self._context_cache.get(scope)
            if cached is not None and cached[0] == signature:
                persona, scenes = cached[1]
                return persona, list(scenes)
            value = (self.get_persona(scope), self.list_scenes(scope))
            self._context_cache[scope] = (signature, value)
            return value[0], list(value[1])

    def scope_dir(self, scope: Scope) -> Path:
        """Folder of a scope."""
        user, agent = scope
        return self.root / _encode(user) / (_encode(agent) if agent else "@shared")

    def get_persona(self, scope: Scope) -> str | None:
        path = self.scope_dir(scope) / "persona.md"
        with self._lock:
            try:
                text = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                return None
        return text if text.strip() else None

    def set_persona(self, scope: Scope, text: str | None) -> None:
        path = self.scope_dir(scope) / "persona.md"
        with self._lock:
            if text is None or not text.strip():
                path.unlink(missing_ok=True)
            else:
                _atomic_write(path, text)

    def _scene_path(self, scope: Scope, name: str) -> Path:
        return self.scope_dir(scope) / "scenes" / f"{name}.md"

    def _read(self, scope: Scope, name: str) -> tuple[SceneBlock, str] | None:
        try:
            text = self._scene_path(scope, name).read_text(encoding="utf-8")
        except (FileNotFoundError, IsADirectoryError):
            return None
        return parse_scene_file(name, text)

    def _write(self, scope: Scope, block: SceneBlock, title: str) -> None:
        _atomic_write(self._scene_path(scope, block.info.name), render_scene_file(block, title))

    def _remove(self, scope: Scope, name: str) -> bool:
        path = self._scene_path(scope, name)
        existed = path.exists()
        path.unlink(missing_ok=True)
        return existed

    def _names(self, scope: Scope) -> list[str]:
        folder = self.scope_dir(scope) / "scenes"
        if not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob("*.md") if not p.name.startswith("."))
