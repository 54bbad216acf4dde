"""The old paths of the test kits (`stores.conformance`, `stores.postgres.testserver`).

They keep every name they had, as the very objects of their new homes in `testing/`, and
importing them costs the storage package nothing: the names are looked up on first use, so
`stores/` never imports the test kits, which stand above it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import langchain_tdai_recall.stores.conformance as old_suite
import langchain_tdai_recall.stores.postgres.testserver as old_server
import langchain_tdai_recall.testing.conformance as suite
import langchain_tdai_recall.testing.postgres as server
from langchain_tdai_recall.testing.conformance import _shared
from langchain_tdai_recall.testing.conformance import formation as formation_part

SUITE_NAMES = ["BackendConformance", "BackendFactory", "DurableBackendConformance"]
SHARED_NAMES = ["ALICE", "BOB", "DIMS", "PLANNER", "fill", "open_memory", "snapshot"]
SERVER_NAMES = ["TemporaryPostgres", "TemporaryPostgresError", "bundled_binaries", "main"]
SERVER_CONSTANTS = ["COPY_DIR", "OS_USER", "PORT", "PREFIX", "SETTINGS"]


def test_the_old_paths_keep_every_name_as_the_new_objects() -> None:
    assert old_suite.__all__ == suite.__all__ == SUITE_NAMES
    for name in SUITE_NAMES:
        assert getattr(old_suite, name) is getattr(suite, name)
    for name in SHARED_NAMES:
        assert getattr(old_suite, name) is getattr(_shared, name)
    assert old_suite.FORMATION_CONFIG is formation_part.FORMATION_CONFIG
    assert old_server.__all__ == server.__all__
    for name in SERVER_NAMES + SERVER_CONSTANTS:
        assert getattr(old_server, name) is getattr(server, name)
    assert set(SUITE_NAMES + SHARED_NAMES) <= set(dir(old_suite))


def test_a_name_the_old_paths_never_had_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = old_suite.Nope
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = old_server.Nope


def test_importing_the_old_paths_imports_no_test_kit() -> None:
    code = (
        "import sys\n"
        "import langchain_tdai_recall.stores.conformance\n"
        "import langchain_tdai_recall.stores.postgres.testserver\n"
        "print(sorted(m for m in sys.modules if m.startswith('langchain_tdai_recall.testing')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"
