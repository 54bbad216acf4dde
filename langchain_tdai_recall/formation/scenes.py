"""L2 scenes and the L3 persona, from newly formed memories, as structured edits.

The model never touches files (upstream G-X16 gave it file tools and, for the persona, write
access to the whole data directory). It returns edits (`create` / `update` / `merge` / `delete`
a scene; `keep` or `rewrite` the persona) and the code checks and applies them (G-X15, G-X17):

- names are normalised (`normalize_scene_name`); update, merge and delete must name existing
  scenes whose full text the model was shown, so no scene is rewritten blind;
- the number of scenes never exceeds `persona.max_scenes`, and one answer creates at most
  `persona.max_new_scenes_per_run` (refused edits are counted, never half-applied);
- summaries, bodies and the persona are cut to their configured sizes;
- heat and dates are the code's: new 1, update +1, merge the sum + 1, `created` kept,
  `updated` set on write;
- an edit that changes nothing is not written, and nothing is written before the whole answer
  validated, so the system context stays byte-stable between real updates;
- an answer holding junk or an edit that cannot be repaired (`schemas.Read`) is not applied
  at all: the queued memories stay queued and the call is retried;
- applying edits is all or nothing: every touched scene is snapshotted first and restored if a
  write fails; a failed or invalid persona answer leaves the stored persona as it was.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from langchain_core.runnables import RunnableConfig

from langchain_tdai_recall.errors import ConfigError
from langchain_tdai_recall.formation._llm import CallResult, StructuredCaller
from langchain_tdai_recall.formation.config import PersonaConfig
from langchain_tdai_recall.formation.prompts import (
    Lang,
    persona_system,
    persona_user,
    scenes_system,
    scenes_user,
)
from langchain_tdai_recall.formation.schemas import (
    InvalidAnswerError,
    PersonaAnswer,
    SceneAnswer,
    SceneEdit,
    read_persona,
    read_scenes,
)
from langchain_tdai_recall.stores.base import BaseMemoryStore
from langchain_tdai_recall.stores.documents import normalize_scene_name
from langchain_tdai_recall.types import MemoryRecord, SceneBlock, SceneInfo, Scope

__all__ = ["PersonaOutcome", "SceneOutcome", "SceneWriter"]

logger = logging.getLogger(__name__)

_SHOWN_CHARS: Final = 12_000
"""Scene text shown in full per call; the most related scenes first, the rest by summary."""
_PERSONA_MEMORIES: Final = 30
_ELLIPSIS: Final = "…"
_WORD_RE: Final = re.compile(r"[\u3400-\u9fff]|[^\W_]{3,}")


@dataclass(slots=True)
class SceneOutcome:
    """What one scene update did."""

    created: int = 0
    updated: int = 0
    merged: int = 0
    deleted: int = 0
    refused: int = 0
    """Edits that broke a rule (unknown or unseen scene, over a limit) and were not applied."""
    unchanged: int = 0
    """Edits that would not change anything (not written)."""
    changed_names: list[str] = field(default_factory=list)
    junk: int = 0
    """Edits of the answer that were junk (`schemas.Read.junk`): the answer was not applied."""
    unrepaired: int = 0
    """Edits with a field that cannot be repaired: the answer was not applied."""
    call: CallResult | None = None
    error: str | None = None

    @property
    def applied(self) -> int:
        """Edits written."""
        return self.created + self.updated + self.merged + self.deleted


@dataclass(slots=True)
class PersonaOutcome:
    """What one persona update did."""

    written: bool = False
    kept: bool = False
    call: CallResult | None = None
    error: str | None = None


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + _ELLIPSIS


def _words(text: str) -> set[str]:
    return set(_WORD_RE.findall(text.casefold()))


@dataclass(slots=True)
class _Current:
    """The scope's scenes as they are before the update."""

    blocks: dict[str, tuple[SceneBlock, str]]
    """name → (block, title)."""
    shown: list[str]
    """Names whose full text is in the prompt."""


@dataclass(slots=True)
class _Pending:
    """Validated edits, before anything is written."""

    writes: dict[str, tuple[str, str, str, int | None]] = field(default_factory=dict)
    """name → (title, summary, body, heat or None for +1)."""
    removes: list[str] = field(default_factory=list)


class _EditCheck:
    """Validates edits one by one against the scenes as they would be after the earlier ones."""

    def __init__(self, config: PersonaConfig, current: _Current, outcome: SceneOutcome) -> None:
        self.config = config
        self.current = current
        self.outcome = outcome
        self.pending = _Pending()
        self.names = set(current.blocks)
        self.created = 0

    def _texts(self, edit: SceneEdit) -> tuple[str, str]:
        summary = _cut(" ".join(edit.summary.split()), self.config.summary_max_chars)
        return summary, _cut(edit.body, self.config.scene_max_chars)

    def _editable(self, name: str) -> bool:
        return name in self.current.shown and name in self.names

    def create(self, name: str, edit: SceneEdit) -> None:
        summary, body = self._texts(edit)
        cfg = self.config
        if (
            not body
            or self.created >= cfg.max_new_scenes_per_run
            or len(self.names) >= cfg.max_scenes
        ):
            self.outcome.refused += 1
            return
        self.names.add(name)
        self.created += 1
        self.pending.writes[name] = (" ".join(edit.name.split()), summary, body, None)
        self.outcome.created += 1

    def update(self, name: str, edit: SceneEdit) -> None:
        summary, body = self._texts(edit)
        if not self._editable(name) or not body:
            self.outcome.refused += 1
            return
        block, title = self.current.blocks[name]
        summary = summary or block.info.summary
        if summary == block.info.summary and body == block.body.strip():
            self.outcome.unchanged += 1
            return
        self.pending.writes[name] = (title, summary, body, None)
        self.outcome.updated += 1

    def merge(self, name: str, edit: SceneEdit) -> None:
        summary, body = self._texts(edit)
        sources: list[str] = []
        for raw in edit.sources:
            try:
                sources.append(normalize_scene_name(raw))
            except ConfigError:
                continue
        sources = [s for s in dict.fromkeys(sources) if s != name]
        if not sources or not body or not all(self._editable(s) for s in [name, *sources]):
            self.outcome.refused += 1
            return
        blocks = self.current.blocks
        heat = sum(blocks[s][0].info.heat for s in [name, *sources]) + 1
        block, title = blocks[name]
        self.pending.writes[name] = (title, summary or block.info.summary, body, heat)
        for source in sources:
            self.names.discard(source)
            self.pending.writes.pop(source, None)
            self.pending.removes.append(source)
        self.outcome.merged += 1

    def delete(self, name: str) -> None:
        if not self._editable(name):
            self.outcome.refused += 1
            return
        self.names.discard(name)
        self.pending.writes.pop(name, None)
        self.pending.removes.append(name)
        self.outcome.deleted += 1


class SceneWriter:
    """Runs the scene and persona calls of one scope and applies their edits."""

    def __init__(
        self,
        *,
        store: BaseMemoryStore,
        config: PersonaConfig,
        timezone_name: str,
    ) -> None:
        self.store = store
        self.config = config
        self.timezone_name = timezone_name

    # -- scenes --------------------------------------------------------------------------------

    def update_scenes(
        self,
        scope: Scope,
        memories: Sequence[MemoryRecord],
        *,
        language: Lang,
        caller: StructuredCaller,
        run_config: RunnableConfig | None = None,
    ) -> SceneOutcome:
        """One scene call for `memories`; edits applied only if the whole answer is usable."""
        outcome = SceneOutcome()
        current = self._current(scope, memories)
        cfg = self.config
        system = scenes_system(
            language,
            language=language,
            timezone=self.timezone_name,
            count=len(current.blocks),
            max_scenes=cfg.max_scenes,
            max_new=cfg.max_new_scenes_per_run,
            summary_chars=cfg.summary_max_chars,
            body_chars=cfg.scene_max_chars,
        )
        user = scenes_user(
            memories=[_memory_item(f"r{i}", m) for i, m in enumerate(memories, 1)],
            scenes=[_scene_item(current.blocks[n][0], full=True) for n in current.shown],
            others=[
                _scene_item(b, full=False)
                for n, (b, _) in sorted(current.blocks.items())
                if n not in current.shown
            ],
        )
        call = caller.call(SceneAnswer, system, user, config=run_config)
        outcome.call = call
        if call.data is None:
            outcome.error = call.error
            return outcome
        try:
            read = read_scenes(call.data)
        except InvalidAnswerError as exc:
            outcome.error = f"invalid scene answer: {exc}"
            return outcome
        outcome.junk, outcome.unrepaired = len(read.junk), len(read.unrepaired)
        if not read.sound:  # an edit whose meaning is unknown: apply none, the queue is retried
            outcome.error = read.failure("scene")
            return outcome
        pending = self._validate(read.answer.edits, current, outcome)
        if self._erased(scope, memories):
            outcome.error = _ERASED
            return outcome
        try:
            outcome.changed_names = self._write(scope, current, pending)
        except Exception as exc:  # restored by _write; the queue stays for a retry
            outcome.error = f"writing scenes failed: {type(exc).__name__}: {exc}"
            outcome.created = outcome.updated = outcome.merged = outcome.deleted = 0
            outcome.changed_names = []
        return outcome

    def _current(self, scope: Scope, memories: Sequence[MemoryRecord]) -> _Current:
        blocks = self.store.scenes_with_titles(scope)  # the titles too
        wanted = _words(" ".join(f"{m.content} {m.scene_name}" for m in memories))

        def overlap(name: str) -> tuple[int, int, str]:
            block, title = blocks[name]
            words = _words(f"{title} {block.info.summary} {block.body}")
            return (-len(words & wanted), -block.info.heat, name)

        shown: list[str] = []
        used = 0
        for name in sorted(blocks, key=overlap):
            size = len(blocks[name][0].body)
            if used + size > _SHOWN_CHARS and shown:
                continue
            shown.append(name)
            used += size
        return _Current(blocks, shown)

    def _validate(
        self, edits: Sequence[SceneEdit], current: _Current, outcome: SceneOutcome
    ) -> _Pending:
        check = _EditCheck(self.config, current, outcome)
        for edit in edits:
            try:
                name = normalize_scene_name(edit.name)
            except ConfigError:
                outcome.refused += 1
                continue
            op = "update" if edit.op == "create" and name in check.names else edit.op
            if op == "create":
                check.create(name, edit)
            elif op == "update":
                check.update(name, edit)
            elif op == "merge":
                check.merge(name, edit)
            else:
                check.delete(name)
        return check.pending

    def _erased(self, scope: Scope, memories: Sequence[MemoryRecord]) -> bool:
        """Whether the scope lost every memory of the call while the model answered.

        `TdaiMemory.forget` (perhaps in another process) erased it: nothing read before may be
        written back as scenes or a persona.
        """
        return bool(memories) and all(self.store.get_memory(scope, m.id) is None for m in memories)

    def _write(self, scope: Scope, current: _Current, pending: _Pending) -> list[str]:
        """Apply the validated edits, all or none (`MemoryStore.apply_scene_edits`)."""
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        writes: list[tuple[SceneBlock, str]] = []
        # written under their own names (not re-derived from titles), heat and dates by code
        for name, (title, summary, body, heat) in pending.writes.items():
            before = current.blocks.get(name)
            old = before[0].info if before is not None else None
            info = SceneInfo(
                name=name,
                summary=summary,
                heat=heat if heat is not None else (old.heat + 1 if old else 1),
                created=(old.created if old and old.created else now),
                updated=now,
            )
            writes.append((SceneBlock(info=info, body=body), title))
        self.store.apply_scene_edits(scope, writes, list(pending.removes))
        return [block.info.name for block, _ in writes]

    # -- persona -------------------------------------------------------------------------------

    def update_persona(
        self,
        scope: Scope,
        memories: Sequence[MemoryRecord],
        changed_scenes: Sequence[str],
        *,
        language: Lang,
        caller: StructuredCaller,
        run_config: RunnableConfig | None = None,
    ) -> PersonaOutcome:
        """One persona call; the stored persona changes only on a valid `rewrite`."""
        outcome = PersonaOutcome()
        store = self.store
        current = store.get_persona(scope) or ""
        infos = store.list_scenes(scope)
        names = list(dict.fromkeys([*changed_scenes, *(i.name for i in infos)]))
        scenes: list[dict[str, object]] = []
        used = 0
        for name in names:
            block = store.read_scene(scope, name)
            if block is None:
                continue
            if used + len(block.body) > _SHOWN_CHARS and scenes:
                break
            scenes.append(_scene_item(block, full=True))
            used += len(block.body)
        important = sorted(memories, key=lambda m: -(101 if m.priority == -1 else m.priority))
        call = caller.call(
            PersonaAnswer,
            persona_system(
                language, language=language, persona_chars=self.config.persona_max_chars
            ),
            persona_user(
                current=current,
                scenes=scenes,
                memories=[
                    _memory_item(f"r{i}", m) for i, m in enumerate(important[:_PERSONA_MEMORIES], 1)
                ],
            ),
            config=run_config,
        )
        outcome.call = call
        if call.data is None:
            outcome.error = call.error
            return outcome
        try:
            answer = read_persona(call.data).answer
        except InvalidAnswerError as exc:
            outcome.error = f"invalid persona answer: {exc}"
            return outcome
        if answer.action == "keep":
            if not current:
                outcome.error = "the model kept a persona that does not exist"
                return outcome
            outcome.kept = True
            return outcome
        text = _cut(answer.persona, self.config.persona_max_chars)
        if text == current.strip():
            outcome.kept = True
        elif self._erased(scope, memories):
            outcome.error = _ERASED
        else:
            store.set_persona(scope, text)
            outcome.written = True
        return outcome


_ERASED: Final = "the scope's memories were erased while the model answered; nothing written"


def _memory_item(alias: str, m: MemoryRecord) -> dict[str, object]:
    item: dict[str, object] = {"id": alias, "type": m.type, "priority": m.priority}
    if m.scene_name:
        item["situation"] = m.scene_name
    when = " .. ".join(t for t in (m.activity_start_time, m.activity_end_time) if t)
    if when or m.timestamp:
        item["time"] = when or m.timestamp
    item["text"] = m.content
    return item


def _scene_item(block: SceneBlock, *, full: bool) -> dict[str, Any]:
    info = block.info
    item: dict[str, Any] = {
        "name": info.name,
        "heat": info.heat,
        "updated": info.updated[:10],
        "summary": info.summary,
    }
    if full:
        item["text"] = block.body
    return item
