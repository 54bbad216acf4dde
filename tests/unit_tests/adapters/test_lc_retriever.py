"""`memory.as_retriever()`: LangChain's standard retriever tests, scope, options, composition."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_classic.retrievers import EnsembleRetriever
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_tdai_recall import (
    ConfigError,
    ScopeError,
    StoreClosedError,
    TdaiMemory,
    TdaiRetriever,
)
from langchain_tdai_recall.testing import FakeToolCallingChatModel, HashEmbeddings

from ._helpers import text_of
from .conftest import seed

_STANDARD_MEMORY = seed(TdaiMemory.open(None, embeddings=HashEmbeddings(dims=64)))
QUERY = "What does Alice like on flights?"


class TestTdaiRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[TdaiRetriever]:
        return TdaiRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memory": _STANDARD_MEMORY, "user_id": "alice"}

    @property
    def retriever_query_example(self) -> str:
        return "What does Alice like?"


def test_documents_are_the_search_hits_with_their_metadata(mem: TdaiMemory) -> None:
    retriever = mem.as_retriever(user_id="alice", k=4)
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke(QUERY)
    hits = mem.search_memories(QUERY, limit=4, user_id="alice")
    assert [d.page_content for d in docs] == [h.content for h in hits]
    assert len(docs) >= 2
    for doc, hit in zip(docs, hits, strict=True):
        assert doc.id == hit.id == doc.metadata["id"]
        assert hit.record is not None
        assert doc.metadata == {
            "id": hit.id,
            "score": hit.score,
            "keyword_score": hit.keyword_score,
            "embedding_score": hit.embedding_score,
            "type": hit.type,
            "scene_name": hit.scene_name,
            "priority": hit.priority,
            "activity_start_time": hit.record.activity_start_time,
            "activity_end_time": hit.record.activity_end_time,
            "timestamp": hit.record.timestamp,
            "created_at": hit.record.created_at,
            "updated_at": hit.record.updated_at,
            "user_id": "alice",
            "agent_id": None,
        }


async def test_async_returns_what_sync_returns(mem: TdaiMemory) -> None:
    retriever = mem.as_retriever(user_id="alice")
    assert await retriever.ainvoke(QUERY) == retriever.invoke(QUERY)
    assert len(await retriever.ainvoke(QUERY, k=1)) == 1


@pytest.mark.parametrize("use_async", [False, True])
async def test_scope_from_configurable_overrides_the_constructor(
    mem: TdaiMemory, use_async: bool
) -> None:
    retriever = mem.as_retriever(user_id="alice")

    async def contents(config: Any = None) -> set[str]:
        if use_async:
            docs = await retriever.ainvoke("seats", config)
        else:
            docs = retriever.invoke("seats", config)
        return {d.page_content for d in docs}

    alice = await contents()
    bob = await contents({"configurable": {"user_id": "bob"}})
    assert "Alice prefers window seats on long flights" in alice
    assert "Bob prefers aisle seats because he is tall" in bob
    assert not any(c.startswith("Bob") for c in alice)
    assert not any(c.startswith("Alice") for c in bob)
    # an agent scope of its own holds nothing of the user's shared memory
    assert await contents({"configurable": {"user_id": "alice", "agent_id": "planner"}}) == set()


def test_agent_scope_from_the_constructor(mem: TdaiMemory) -> None:
    mem.add_memory("Plans trips three months ahead", user_id="alice", agent_id="planner")
    mem.flush()
    docs = mem.as_retriever(user_id="alice", agent_id="planner").invoke("trips ahead")
    assert [(d.page_content, d.metadata["agent_id"]) for d in docs] == [
        ("Plans trips three months ahead", "planner")
    ]


def test_missing_user_is_refused_when_required(mem: TdaiMemory) -> None:
    retriever = mem.as_retriever(require_user_id=True)
    with pytest.raises(ScopeError, match="no user_id"):
        retriever.invoke("seats")
    assert retriever.invoke("seats", {"configurable": {"user_id": "bob"}})
    with pytest.raises(ScopeError, match="user_id"):
        retriever.invoke("seats", {"configurable": {"user_id": ""}})


def test_score_threshold_keeps_only_relevant_memories(mem: TdaiMemory) -> None:
    everything = mem.as_retriever(user_id="alice", k=10).invoke(QUERY)
    scores = [d.metadata["score"] for d in everything]
    assert len(set(scores)) > 1
    cut = sorted(scores)[len(scores) // 2]
    kept = mem.as_retriever(
        user_id="alice", k=10, search_type="similarity_score_threshold", score_threshold=cut
    ).invoke(QUERY)
    assert kept
    assert [d.page_content for d in kept] == [
        d.page_content for d in everything if d.metadata["score"] >= cut
    ]
    assert len(kept) < len(everything)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"k": 0}, "k must be an integer in 1..100"),
        ({"k": True}, "k must be an integer in 1..100"),
        ({"k": 101}, "k must be an integer in 1..100"),
        ({"search_type": "mmr"}, "search_type must be one of"),
        ({"search_type": "similarity_score_threshold"}, "needs score_threshold"),
        ({"score_threshold": 1.5}, "score_threshold must be a number in 0..1"),
        ({"require_user_id": "yes"}, "require_user_id must be True or False"),
    ],
)
def test_invalid_options_are_config_errors(
    mem: TdaiMemory, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        mem.as_retriever(**options)


def test_constructor_refuses_unknown_options_and_bad_ids(mem: TdaiMemory) -> None:
    with pytest.raises(ConfigError, match=r"unknown TdaiRetriever option\(s\) \['top_k'\]"):
        TdaiRetriever(memory=mem, top_k=3)
    with pytest.raises(ConfigError, match="memory must be a TdaiMemory"):
        TdaiRetriever(memory="./memory")
    with pytest.raises(ScopeError, match="user_id"):
        mem.as_retriever(user_id="")
    with pytest.raises(ConfigError, match="k must be an integer"):
        mem.as_retriever().invoke("seats", k=0)


def test_closed_store_is_refused(empty_mem: TdaiMemory) -> None:
    retriever = empty_mem.as_retriever()
    empty_mem.close()
    with pytest.raises(StoreClosedError):
        retriever.invoke("anything")
    with pytest.raises(StoreClosedError):
        empty_mem.as_retriever()


# -- composition ----------------------------------------------------------------------------------


class _StaticRetriever(BaseRetriever):
    """Another retriever of the ensemble: always the same documents."""

    docs: list[Document]

    def _get_relevant_documents(self, query: str, **kwargs: Any) -> list[Document]:
        return self.docs


def test_drops_into_an_ensemble_retriever(mem: TdaiMemory) -> None:
    web = Document(page_content="Lisbon has mild winters", metadata={"source": "web"})
    ensemble = EnsembleRetriever(
        retrievers=[mem.as_retriever(user_id="alice", k=2), _StaticRetriever(docs=[web])],
        weights=[0.5, 0.5],
    )
    docs = ensemble.invoke("window seats on long flights")
    contents = [d.page_content for d in docs]
    assert contents[0] == "Alice prefers window seats on long flights"
    assert "Lisbon has mild winters" in contents
    assert not any(c.startswith("Bob") for c in contents)
    bob = ensemble.invoke("seats", {"configurable": {"user_id": "bob"}})
    assert "Bob prefers aisle seats because he is tall" in [d.page_content for d in bob]


@pytest.mark.parametrize("use_async", [False, True])
async def test_drops_into_an_lcel_rag_chain(mem: TdaiMemory, use_async: bool) -> None:
    def format_docs(docs: list[Document]) -> str:
        return "\n".join(f"- {d.page_content}" for d in docs)

    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer from these memories:\n{context}"), ("human", "{question}")]
    )
    model = FakeToolCallingChatModel(script=["A window seat."])
    chain = (
        {"context": mem.as_retriever(k=2) | format_docs, "question": RunnablePassthrough()}
        | prompt
        | model
        | StrOutputParser()
    )
    config: Any = {"configurable": {"user_id": "alice"}}
    question = "Which seat do I like on long flights?"
    if use_async:
        answer = await chain.ainvoke(question, config)
    else:
        answer = chain.invoke(question, config)
    assert answer == "A window seat."
    system = text_of(model.requests[0][0])
    assert "- Alice prefers window seats on long flights" in system
    assert "Bob" not in system
