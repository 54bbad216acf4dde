"""The document store: L3 personas and L2 scene blocks, as every backend keeps them.

A scope has at most one persona and a set of scene blocks, each a short Markdown text. This module
holds what every backend shares: the `DocumentStore` interface, the rules that turn a scene name
into a safe name (`normalize_scene_name`: no separators, no `..`, no control characters, at most
80 code points and 200 UTF-8 bytes), the scene file codec (the original plugin's metadata header,
then the body), and `InMemoryDocuments` for in-memory stores. The directory backend
(`stores.local._documents.FileDocuments`) and PostgreSQL (`stores.postgres._documents`)
implement the interface.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import suppress
from typing import Final

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.text.scene_header import render_scene_header, split_scene_header
from langchain_tdai_recall.types import SceneBlock, SceneInfo, Scope

__all__ = [
    "DocumentStore",
    "InMemoryDocuments",
    "fit_bytes",
    "normalize_scene_name",
    "parse_scene_file",
    "render_scene_file",
    "utc_now_seconds",
]

_UNSAFE_RE: Final = re.compile(r"[\\/:*?\"<>|#%&{}$!'`@=+\[\]^~;,\x00-\x1f\x7f]+")
_MAX_NAME: Final = 80
_SURROGATE_RE: Final = re.compile(r"[\ud800-\udfff]")
_MAX_NAME_BYTES: Final = 200
"""Longest scene file stem in UTF-8 bytes (a file name may have 255; `.md` and `-N` follow)."""


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
    text = fit_bytes(text[:_MAX_NAME], _MAX_NAME_BYTES).strip(".-")
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


def fit_bytes(text: str, limit: int) -> str:
    """The longest prefix of `text` whose UTF-8 encoding has at most `limit` bytes."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode("utf-8", "ignore")


def utc_now_seconds() -> str:
    """The current UTC time in ISO 8601, to the second (`...Z`)."""
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
        now = utc_now_seconds()
        with self._lock:
            name, n = base, 1
            while True:
                found = self._read(scope, name)
                if found is None or found[1] == clean_title:
                    break
                n += 1
                name = f"{fit_bytes(base[: _MAX_NAME - 4], _MAX_NAME_BYTES - 4)}-{n}"
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

    # -- erasure (issue 16) ---------------------------------------------------------------------

    def delete_scope_documents(self, scope: Scope) -> tuple[bool, int]:
        """Delete a scope's persona and every scene; returns (had a persona, scenes deleted)."""
        with self._lock:
            persona = self.get_persona(scope) is not None
            names = self._names(scope)
            for name in names:
                self._remove(scope, name)
            self.set_persona(scope, None)
        return persona, len(names)

    def user_scopes(self, user_id: str) -> list[Scope]:
        """The scopes of one user holding a persona or a scene."""
        return [s for s in self.scopes() if s.user_id == user_id]

    def delete_user_leftovers(self, user_id: str) -> int:
        """Delete what is left of a user after each of their scopes was erased.

        Documents no scope can name (a directory store's folder of a long agent id that lost
        its `.id` file). Returns how many such scope folders were deleted; none here.
        """
        del user_id
        return 0


class InMemoryDocuments(DocumentStore):
    """Documents kept in dictionaries (the `path=None` store)."""

    def __init__(self) -> None:
        super().__init__()
        self._personas: dict[Scope, str] = {}
        self._scenes: dict[Scope, dict[str, str]] = {}

    def get_persona(self, scope: Scope) -> str | None:
        """The persona of `scope`, or `None`."""
        with self._lock:
            return self._personas.get(scope)

    def set_persona(self, scope: Scope, text: str | None) -> None:
        """Replace the persona of `scope`; empty text or `None` removes it."""
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
        """Scopes holding a persona or a scene."""
        with self._lock:
            found = set(self._personas) | {s for s, scenes in self._scenes.items() if scenes}
        return sorted(found, key=lambda s: (s.user_id, s.agent_id or ""))
