"""Test doubles and test kits for users' tests, notebooks and our suite (offline, deterministic).

The public doubles (`__all__`):

- `HashEmbeddings`: a fast deterministic embedder. Texts that share words or CJK characters get
  similar vectors, so keyword-ish semantics work, but it knows no synonyms.
- `SlowEmbeddings` / `FailingEmbeddings`: wrap an embedder to be slow or to fail, for testing
  timeouts and degradation.
- `FakeToolCallingChatModel`: a scripted chat model that supports `bind_tools`.
- `ScriptedFormationModel`: a chat model that answers memory-formation calls (extraction,
  consolidation, scenes, persona, rating) from Python functions, with useful defaults.

Two kits live beside them as submodules, imported only by who needs them:

- `testing.conformance`: the conformance suite every store backend passes (needs `pytest`).
- `testing.postgres`: a throw-away PostgreSQL 16 + pgvector server (needs the `pgserver` wheel).
"""

from __future__ import annotations

from langchain_tdai_recall.testing._chat import FakeToolCallingChatModel
from langchain_tdai_recall.testing._embeddings import (
    FailingEmbeddings,
    HashEmbeddings,
    SlowEmbeddings,
)
from langchain_tdai_recall.testing._formation import (
    ConsolidationRequest,
    FormationCall,
    FormationWindow,
    PersonaRequest,
    RatingRequest,
    SceneRequest,
    ScriptedFormationModel,
)

__all__ = [
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
