"""Every integration test module imports, so a broken import fails one clear test.

`pytest -m compile` runs only this, without starting any server.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tests.integration_tests


@pytest.mark.compile
def test_every_integration_test_module_imports() -> None:
    names = [
        info.name
        for info in pkgutil.walk_packages(
            tests.integration_tests.__path__, "tests.integration_tests."
        )
    ]
    assert "tests.integration_tests.stores.test_postgres" in names
    for name in names:
        importlib.import_module(name)
