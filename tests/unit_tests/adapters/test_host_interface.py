"""The adapters depend on the facade's narrow interface (`_turn.host.MemoryHost`), not memory.py.

Every import is read from the source (module level, inside functions and under
`TYPE_CHECKING`), so a lazy import back into the facade, or between the tools and formation, is
caught as well as a module-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import langchain_tdai_recall
from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall._turn.host import MemoryHost, StoreHost
from langchain_tdai_recall.testing import HashEmbeddings
from langchain_tdai_recall.types import Scope

_PACKAGE = Path(langchain_tdai_recall.__file__).parent
_ADAPTERS = (
    "_turn/host.py",
    "_turn/__init__.py",
    "_turn/identity.py",
    "_turn/message.py",
    "_turn/recall.py",
    "_turn/budget.py",
    "_turn/report.py",
    "_turn/run.py",
    "middleware.py",
    "lcel.py",
    "legacy.py",
    "retriever.py",
    "tools/__init__.py",
    "tools/_base.py",
    "tools/search.py",
    "tools/manage.py",
    "formation/manager.py",
    "graph_store.py",
)


def _imports(relative: str) -> set[str]:
    """Every module a source file imports (`from pkg import name` also counts `pkg.name`)."""
    tree = ast.parse((_PACKAGE / relative).read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("relative", _ADAPTERS)
def test_no_adapter_imports_the_facade(relative: str) -> None:
    imported = _imports(relative)
    assert "langchain_tdai_recall.memory" not in imported
    assert "langchain_tdai_recall.TdaiMemory" not in imported  # the facade through the root


def test_the_tools_and_formation_import_in_one_direction() -> None:
    for relative in ("tools/__init__.py", "tools/_base.py", "tools/search.py", "tools/manage.py"):
        assert not any(m.startswith("langchain_tdai_recall.formation") for m in _imports(relative))
    assert not any(
        m.startswith("langchain_tdai_recall.tools") for m in _imports("formation/manager.py")
    )


def test_the_facade_is_the_adapters_host(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(dims=16)) as memory:
        assert isinstance(memory, MemoryHost)
        assert memory.store_breaker.remaining() == 0
        memory.check_open()
        handed: list[tuple[Any, Scope, str]] = []

        def capture(messages: Any, *, scope: Scope, session_key: str) -> None:
            handed.append((messages, scope, session_key))

        memory._capture_turn = capture  # type: ignore[method-assign]
        turn = [{"role": "user", "content": "hi"}]
        memory.capture_turn(turn, scope=Scope("alice"), session_key="s")
        assert handed == [(turn, Scope("alice"), "s")]
        assert memory.memory_manager() is memory.memory_manager()
    assert not isinstance(object(), MemoryHost)


def test_the_facade_is_the_langgraph_stores_host(tmp_path: Path) -> None:
    with TdaiMemory.open(tmp_path, embeddings=HashEmbeddings(dims=16)) as memory:
        assert isinstance(memory, StoreHost)
        store = memory.as_store()
        assert store.memory is memory
        assert store.store is memory._store
    assert not isinstance(object(), StoreHost)


def test_the_langgraph_store_reads_no_private_member_of_the_facade() -> None:
    tree = ast.parse((_PACKAGE / "graph_store.py").read_text(encoding="utf-8"))
    reached = sorted(
        f"memory.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and isinstance(node.value, ast.Attribute | ast.Name)
        and (node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id)
        == "memory"
    )
    assert reached == []


def test_the_old_manage_tool_path_hands_out_the_same_objects() -> None:
    from langchain_tdai_recall import tools
    from langchain_tdai_recall.formation import manager, tool

    assert tool.create_manage_memory_tool is tools.create_manage_memory_tool
    assert tool.manage_budget is tools.manage_budget
    assert tool.ManageMemoryInput is tools.ManageMemoryInput
    assert tool.MemoryManager is manager.MemoryManager
    assert set(tool.__all__) == {
        "MANAGE_MEMORY_TOOL",
        "ManageMemoryInput",
        "MemoryManager",
        "create_manage_memory_tool",
        "manage_budget",
    }


def test_the_upstream_importer_writes_through_an_interface_not_the_facade() -> None:
    sources = [p.relative_to(_PACKAGE).as_posix() for p in _PACKAGE.glob("upstream*.py")]
    sources += [p.relative_to(_PACKAGE).as_posix() for p in _PACKAGE.glob("upstream/*.py")]
    assert sources
    for relative in sources:
        assert "langchain_tdai_recall.memory" not in _imports(relative), relative
