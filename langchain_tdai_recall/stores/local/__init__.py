"""The local backend: a directory (SQLite records, Markdown persona and scenes) or memory.

`MemoryStore` is exported as `stores.LocalMemoryStore`; `DB_FILENAME` names the SQLite file that
marks a directory as a store. Everything else here is private to the backend: the package's other
modules reach it only through `stores.base` (a test walks every import to keep it so).
"""

from langchain_tdai_recall.stores.local._schema import DB_FILENAME
from langchain_tdai_recall.stores.local.store import MemoryStore, Scope

__all__ = ["DB_FILENAME", "MemoryStore", "Scope"]
