"""Deprecated location of `tdai_manage_memory`; import from `langchain_tdai_recall.tools`.

The tool now stands beside the other memory tools (`langchain_tdai_recall.tools.manage`) and
the writes it asks for in `langchain_tdai_recall.formation.manager`. This module only re-exports
the names it used to define, so existing imports keep working; it will be removed in a later
release.
"""

from __future__ import annotations

from langchain_tdai_recall.formation.manager import MemoryManager
from langchain_tdai_recall.tools.manage import (  # noqa: F401 - the old module's names, kept
    MANAGE_MEMORY_TOOL,
    ManageMemoryInput,
    ManageMemoryTool,
    build_manage_tool,
    create_manage_memory_tool,
    manage_budget,
)

__all__ = [
    "MANAGE_MEMORY_TOOL",
    "ManageMemoryInput",
    "MemoryManager",
    "create_manage_memory_tool",
    "manage_budget",
]
