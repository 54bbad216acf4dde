"""Conformance of the documents a store keeps beside its records: persona and scenes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from langchain_tdai_recall.errors import (
    ConfigError,
)
from langchain_tdai_recall.memory import TdaiMemory
from langchain_tdai_recall.testing.conformance._shared import (
    BackendFactory,
    open_memory,
)
from langchain_tdai_recall.types import (
    SceneBlock,
    SceneInfo,
    Scope,
)


class DocumentTests:
    """Persona and scene documents, and all-or-nothing scene edits (a part of the suite)."""

    # -- documents -----------------------------------------------------------------------------

    def test_documents_behave_like_the_reference(self, memory: TdaiMemory) -> None:
        """Persona and scene calls give the reference's answers (heat, names, order)."""

        def script(mem: TdaiMemory) -> list[Any]:
            out: list[Any] = [mem.get_persona(user_id="d")]
            mem.set_persona("Likes tea.", user_id="d")
            out.append(mem.get_persona(user_id="d"))
            mem.set_persona("   ", user_id="d")
            out.append(mem.get_persona(user_id="d"))
            mem.set_persona("Likes 茶 and ☕.", user_id="d", agent_id="a")
            out.append((mem.get_persona(user_id="d"), mem.get_persona(user_id="d", agent_id="a")))
            for heat in (None, None, 7, None):
                info = mem.upsert_scene(
                    "Weekend hikes", summary=f"s{heat}", body="b", heat=heat, user_id="d"
                )
                out.append((info.name, info.summary, info.heat))
            info = mem.upsert_scene("weekend  hikes", summary="other", body="x", user_id="d")
            out.append((info.name, info.heat))
            info = mem.upsert_scene("周末 徒步", summary="中文", body="正文\n第二行", user_id="d")
            out.append((info.name, info.heat))
            out.append([(s.name, s.summary, s.heat) for s in mem.list_scenes(user_id="d")])
            block = mem.read_scene("周末-徒步", user_id="d")
            out.append(None if block is None else (block.info.summary, block.body))
            out.append(mem.read_scene("missing", user_id="d"))
            with pytest.raises(ConfigError):
                mem.read_scene("../persona", user_id="d")
            out.append(mem.delete_scene("Weekend-hikes", user_id="d"))
            out.append(mem.delete_scene("Weekend-hikes", user_id="d"))
            out.append([s.name for s in mem.list_scenes(user_id="d")])
            stats = mem.stats(user_id="d")
            out.append((stats.scenes, stats.personas))
            return out

        with open_memory(None) as reference:
            expected = script(reference)
        assert script(memory) == expected

    def test_scene_edits_are_all_or_nothing(
        self, factory: BackendFactory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Memory formation's scene edits: a failure half-way leaves every scene as it was."""
        store = factory.open()
        try:
            scope = Scope("scenes")
            store.upsert_scene(scope, "Kitchen", summary="cooking", body="pasta", heat=None)
            store.upsert_scene(scope, "Garden", summary="plants", body="roses", heat=None)
            before = store.scenes_with_titles(scope)
            kitchen, _ = before["Kitchen"]
            changed = SceneBlock(info=replace(kitchen.info, summary="baking"), body="bread")
            new = SceneBlock(
                info=SceneInfo(name="Garage", summary="tools", heat=1, created="", updated=""),
                body="drills",
            )

            docs = store.documents
            real_write = docs._write

            def broken(scope: Scope, block: SceneBlock, title: str) -> None:
                if block.info.name == "Garage":  # the second write of the edit fails
                    msg = "the disk went away"
                    raise RuntimeError(msg)
                real_write(scope, block, title)

            monkeypatch.setattr(docs, "_write", broken)
            with pytest.raises(RuntimeError):
                store.apply_scene_edits(scope, [(changed, "Kitchen"), (new, "Garage")], ["Garden"])
            monkeypatch.undo()
            assert store.scenes_with_titles(scope) == before
            store.apply_scene_edits(scope, [(changed, "Kitchen"), (new, "Garage")], ["Garden"])
            after = store.scenes_with_titles(scope)
            assert sorted(after) == ["Garage", "Kitchen"]
            assert after["Kitchen"][0].body == "bread"
        finally:
            store.close()
