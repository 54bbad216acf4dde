"""Deprecated path of the throw-away PostgreSQL server; use `testing.postgres` instead.

Kept so that existing imports and `python -m langchain_tdai_recall.stores.postgres.testserver`
keep working; the server moved beside the other test kits in `langchain_tdai_recall.testing`.
"""

from __future__ import annotations

import sys

# `__all__`, `main` and, importable from here as before, the module's constants
from langchain_tdai_recall.testing.postgres import (  # noqa: F401
    COPY_DIR,
    OS_USER,
    PORT,
    PREFIX,
    SETTINGS,
    TemporaryPostgres,
    TemporaryPostgresError,
    bundled_binaries,
    main,
)

__all__ = ["TemporaryPostgres", "TemporaryPostgresError", "bundled_binaries"]

if __name__ == "__main__":
    sys.exit(main())
