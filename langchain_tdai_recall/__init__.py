"""Layered long-term memory with automatic recall for LangChain and LangGraph agents.

Open a store with `TdaiMemory.open(path)`, then add `memory.middleware()` to
`langchain.agents.create_agent(...)`, put `memory.as_runnable()` in an LCEL chain, or give
`memory.tools()` to an agent executor; `memory.as_retriever()` is a retriever for RAG chains.
"""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from langchain_tdai_recall.config import (
    CaptureConfig,
    EmbeddingConfig,
    RecallConfig,
    StoreConfig,
    TdaiConfig,
    ToolsConfig,
)
from langchain_tdai_recall.errors import (
    ConfigError,
    EmbeddingError,
    ImportUpstreamError,
    MissingDependencyError,
    RecallTimeoutError,
    ScopeError,
    StoreClosedError,
    StoreCorruptedError,
    StoreError,
    StoreReadOnlyError,
    StoreWriteError,
    TdaiRecallError,
)
from langchain_tdai_recall.formation.config import ExtractionConfig, PersonaConfig, PipelineConfig
from langchain_tdai_recall.formation.report import ExtractionReport
from langchain_tdai_recall.memory import TdaiMemory
from langchain_tdai_recall.types import (
    ErasedScope,
    ForgetReport,
    ImportReport,
    IndexCacheStats,
    MemoryHit,
    MemoryRecord,
    MemoryVersion,
    MessageHit,
    MessageRecord,
    RecalledMemory,
    RecallResult,
    SceneBlock,
    SceneInfo,
    StoreStats,
)

if TYPE_CHECKING:
    from langchain_tdai_recall.graph_store import TdaiStore
    from langchain_tdai_recall.middleware import TdaiRecallMiddleware
    from langchain_tdai_recall.retriever import TdaiRetriever
    from langchain_tdai_recall.tools import create_memory_tools

try:
    __version__ = version("langchain-tdai-recall")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
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


def __getattr__(name: str) -> Any:
    # The LangChain integration pulls in `langchain.agents`; import it only when used so that
    # `import langchain_tdai_recall` stays fast.
    if name == "TdaiRecallMiddleware":
        from langchain_tdai_recall.middleware import TdaiRecallMiddleware  # noqa: PLC0415

        return TdaiRecallMiddleware
    if name == "TdaiRetriever":
        from langchain_tdai_recall.retriever import TdaiRetriever  # noqa: PLC0415

        return TdaiRetriever
    if name == "TdaiStore":  # imports langgraph.store
        from langchain_tdai_recall.graph_store import TdaiStore  # noqa: PLC0415

        return TdaiStore
    if name == "create_memory_tools":
        from langchain_tdai_recall.tools import create_memory_tools  # noqa: PLC0415

        return create_memory_tools
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
