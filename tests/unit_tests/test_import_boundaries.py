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


# -- the package root shows its rooms (issue 25) ----------------------------------------------

#: The private packages of the root, each about one concern, and the only first-party modules
#: each may import (besides itself). `None`: no rule beyond the floors of the import graph.
PRIVATE_ROOMS: dict[str, tuple[str, ...] | None] = {
    "_runtime": ("langchain_tdai_recall.errors", "langchain_tdai_recall.types"),
    "_settings": (
        "langchain_tdai_recall.errors",
        "langchain_tdai_recall._exchange",
    ),
    "_embedding": (
        "langchain_tdai_recall.errors",
        "langchain_tdai_recall.types",
        "langchain_tdai_recall._runtime",
        "langchain_tdai_recall.stores",
    ),
    "_exchange": (
        "langchain_tdai_recall.errors",
        "langchain_tdai_recall.types",
        "langchain_tdai_recall.text",
        "langchain_tdai_recall.stores",
    ),
    "_facade": None,
    "_turn": None,
    "_graph": (
        "langchain_tdai_recall.errors",
        "langchain_tdai_recall.types",
        "langchain_tdai_recall._exchange",
        "langchain_tdai_recall.stores",
    ),
}


def test_the_package_root_holds_public_modules_and_private_packages_only() -> None:
    private_modules = sorted(
        p.name for p in PACKAGE.glob("_*.py") if p.name not in ("__init__.py", "__main__.py")
    )
    assert private_modules == []
    private_packages = sorted(
        p.name
        for p in PACKAGE.iterdir()
        if p.is_dir() and p.name.startswith("_") and p.name != "__pycache__"
    )
    assert private_packages == sorted(PRIVATE_ROOMS)


@pytest.mark.parametrize("room", [r for r, allowed in PRIVATE_ROOMS.items() if allowed])
def test_a_private_room_imports_only_what_it_stands_on(room: str) -> None:
    allowed = (*(PRIVATE_ROOMS[room] or ()), f"langchain_tdai_recall.{room}")
    for path in sorted((PACKAGE / room).rglob("*.py")):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        first_party = {n for n in _imports(path, package) if n.startswith("langchain_tdai_recall.")}
        outside = sorted(
            n for n in first_party if not any(n == a or n.startswith(a + ".") for a in allowed)
        )
        assert not outside, f"{module} imports {outside}; {room}/ may import only {allowed}"


def test_only_the_facade_imports_its_parts() -> None:
    for path in SOURCES:
        module = _module_name(path)
        if module in ("langchain_tdai_recall.memory",) or module.startswith(
            "langchain_tdai_recall._facade"
        ):
            continue
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        reached = [
            n for n in _imports(path, package) if n.startswith("langchain_tdai_recall._facade")
        ]
        assert not reached, f"{module} imports the facade's parts {reached}; only memory.py may"


def test_only_the_langgraph_store_imports_its_parts() -> None:
    for path in SOURCES:
        module = _module_name(path)
        if module == "langchain_tdai_recall.graph_store" or module.startswith(
            "langchain_tdai_recall._graph"
        ):
            continue
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        reached = [
            n for n in _imports(path, package) if n.startswith("langchain_tdai_recall._graph")
        ]
        assert not reached, f"{module} imports the store's parts {reached}; only graph_store may"
