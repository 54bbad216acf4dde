"""Each backend's private modules are its own: nothing else in the package imports them.

Every import of every module of the package is read from its source (module level, inside
functions and under `TYPE_CHECKING` alike). A module outside `stores/local/` may import the local
backend only through its face (`stores.local`, `stores.local.store`), and a module outside
`stores/postgres/` only PostgreSQL's face (`stores.postgres`, `stores.postgres.store`); everything
they share lives in `stores/` itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "langchain_tdai_recall"
BACKENDS = ("langchain_tdai_recall.stores.local", "langchain_tdai_recall.stores.postgres")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, package: str) -> list[str]:
    """Every module `path` imports, as dotted names (`from a import b` gives `a` and `a.b`).

    `package` is the package `path` belongs to (for relative imports).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(base)
            found += [f"{base}.{alias.name}" for alias in node.names]
    return found


def _private_to(name: str, backend: str) -> bool:
    """Whether `name` is a private module (or a name in one) of `backend`."""
    if not name.startswith(backend + "."):
        return False
    return any(part.startswith("_") for part in name[len(backend) + 1 :].split("."))


SOURCES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_reaches_into_another_backend(path: Path) -> None:
    module = _module_name(path)
    for backend in BACKENDS:
        if module == backend or module.startswith(backend + "."):
            continue
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        reached = [name for name in _imports(path, package) if _private_to(name, backend)]
        assert not reached, f"{module} imports private parts of {backend}: {reached}"


def test_the_walk_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from langchain_tdai_recall.stores.local._schema import DB_FILENAME\n"
        "def f():\n"
        "    import langchain_tdai_recall.stores.postgres._records\n"
        "    from .stores.local import _documents\n",
        encoding="utf-8",
    )
    names = _imports(probe, "langchain_tdai_recall")
    assert _private_to("langchain_tdai_recall.stores.local._schema.DB_FILENAME", BACKENDS[0])
    assert [n for n in names if _private_to(n, BACKENDS[0])] == [
        "langchain_tdai_recall.stores.local._schema",
        "langchain_tdai_recall.stores.local._schema.DB_FILENAME",
        "langchain_tdai_recall.stores.local._documents",
    ]
    assert [n for n in names if _private_to(n, BACKENDS[1])] == [
        "langchain_tdai_recall.stores.postgres._records"
    ]
