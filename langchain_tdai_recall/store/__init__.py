"""Storage: SQLite records, Markdown documents and per-scope derived indexes."""

from langchain_tdai_recall.store.store import MemoryStore, Scope

__all__ = ["MemoryStore", "Scope"]
