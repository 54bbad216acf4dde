"""Malformed formation answers through the real `ChatOpenAI` and `ChatAnthropic` clients.

The local server (`_llm_server`) answers extraction calls, while it is "broken", with the honest
memories of the window carrying wrong fields and with junk items beside them, then recovers.
No junk may be stored at any time, and every fact of the conversation must be formed exactly
once: at once where the answer is usable as it came, after the server recovered otherwise
(issue 26 item 1: a memory "42" was stored and 4 of 6 facts were lost for good, their windows
committed past them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.formation.report import ExtractionReport
from langchain_tdai_recall.testing import FormationWindow, HashEmbeddings, ScriptedFormationModel
from tests.integration_tests.formation._llm_server import llm_server
from tests.unit_tests.formation.conftest import FAST
from tests.unit_tests.formation.test_malformed_answers import REPAIRED, RETRIED, Variant

openai = pytest.importorskip("langchain_openai")
anthropic = pytest.importorskip("langchain_anthropic")

# the only network these tests use: the local server on the loopback interface
pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])

FACTS = [
    "I live in Porto.",
    "I'm allergic to penicillin.",
    "I prefer tea over coffee.",
    "I play the cello.",
    "My sister is called Ana.",
    "I went to Lisbon last spring.",
]
WRONG_FIELDS: list[dict[str, Any]] = [
    {"priority": 500},
    {"priority": "80"},
    {"priority": -7},
    {"type": "Persona"},
    {"source_ids": "<mid>"},
    {"source_ids": ["m99"]},
    {"activity_start": "sometime last spring"},
]
JUNK: list[Any] = [
    {"content": 42, "type": "banana", "priority": "high"},
    {"content": "", "type": "persona", "priority": 50},
    "The user said something.",
]
CLIENTS = ["openai", "anthropic"]


def memory_text(text: str) -> str:
    return f"The user says: {text}"


def honest(message: dict[str, Any], **fields: Any) -> dict[str, Any]:
    item = {
        "content": memory_text(message["text"]),
        "type": "persona",
        "priority": 60,
        "source_ids": [message["id"]],
    }
    item.update({k: message["id"] if v == "<mid>" else v for k, v in fields.items()})
    return item


def client(kind: str, url: str) -> Any:
    if kind == "openai":
        return openai.ChatOpenAI(
            model="gpt-4o-mini", api_key="test-key", base_url=url + "/v1", max_retries=0
        )
    return anthropic.ChatAnthropic(
        model="claude-sonnet-4-5", api_key="test-key", base_url=url, max_retries=0
    )


@contextmanager
def opened(
    kind: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest, extract: Any
) -> Iterator[TdaiMemory]:
    target: Any = (
        request.getfixturevalue("postgres_url") if backend == "postgres" else tmp_path / "s"
    )
    with (
        llm_server(ScriptedFormationModel(extract=extract)) as server,
        TdaiMemory.open(
            target,
            embeddings=HashEmbeddings(),
            config=FAST,
            extraction_model=client(kind, server.url),
        ) as memory,
    ):
        yield memory


def contents(memory: TdaiMemory) -> list[str]:
    return sorted(m.content for m in memory.list_memories())


def record_facts(memory: TdaiMemory) -> None:
    for fact in FACTS:
        memory.record_messages(
            [{"role": "user", "content": fact}, {"role": "assistant", "content": "Noted."}],
            session_key="s1",
        )


@pytest.mark.parametrize("backend", ["directory", "postgres"])
@pytest.mark.parametrize("kind", CLIENTS)
def test_junk_beside_honest_memories_holds_the_window_until_the_model_recovers(
    kind: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    broken = {"on": True}

    def extract(window: FormationWindow) -> Any:
        users = [m for m in window.messages if m["role"] == "user"]
        if not broken["on"]:
            return [honest(m) for m in users]
        mangled = [
            honest(m, **WRONG_FIELDS[FACTS.index(m["text"]) % len(WRONG_FIELDS)]) for m in users
        ]
        return mangled + JUNK

    with opened(kind, backend, tmp_path, request, extract) as memory:
        record_facts(memory)
        during = [memory.extract() for _ in range(3)]
        assert contents(memory) == []  # nothing half-formed, and no "42", "" or bare string
        assert all(r.failed_windows == 1 and r.pending_messages == 12 for r in during)
        assert all(r.junk == 3 and r.unrepaired == 2 for r in during)  # 500 and -7
        assert "unusable extraction answer" in during[0].errors[0]
        assert "penicillin" not in " ".join(during[0].errors)  # reasons, never memory text
        broken["on"] = False
        after = memory.extract()
        assert after.ok and after.pending_messages == 0, after.errors
        assert contents(memory) == sorted(memory_text(f) for f in FACTS)
        assert all(m.priority == 60 for m in memory.list_memories())  # not clamped to 100 or 0


@pytest.mark.parametrize("kind", CLIENTS)
def test_repairable_fields_are_repaired_and_committed(kind: str, tmp_path: Path) -> None:
    repairable: list[dict[str, Any]] = [
        {"priority": "80"},
        {"type": "Persona"},
        {"source_ids": "<mid>"},
        {"source_ids": ["m99"]},
        {"activity_start": "sometime last spring"},
        {"priority": 70.0},
    ]

    def extract(window: FormationWindow) -> Any:
        users = [m for m in window.messages if m["role"] == "user"]
        return [honest(m, **repairable[FACTS.index(m["text"]) % len(repairable)]) for m in users]

    with (
        llm_server(ScriptedFormationModel(extract=extract)) as server,
        TdaiMemory.open(
            tmp_path / "s",
            embeddings=HashEmbeddings(),
            config=FAST,
            extraction_model=client(kind, server.url),
        ) as memory,
    ):
        record_facts(memory)
        report = memory.extract()
        assert report.ok and report.pending_messages == 0, report.errors
        by_text = {m.content: m for m in memory.list_memories()}
        assert sorted(by_text) == sorted(memory_text(f) for f in FACTS)
        porto, penicillin, tea, cello, ana, lisbon = (by_text[memory_text(f)] for f in FACTS)
        assert porto.priority == 80  # "80"
        assert penicillin.type == "persona"  # "Persona"
        assert tea.source_message_ids  # "m1" as a bare string
        assert cello.source_message_ids == ()  # an unknown id is dropped, the fact kept
        assert ana.activity_start_time is None  # "sometime last spring": no time, fact kept
        assert lisbon.priority == 70  # 70.0
        assert report.repaired >= 4 and report.dropped_fields >= 2


def _json_variants(variants: dict[str, Variant]) -> dict[str, Variant]:
    """The variants a provider can carry as tool-call arguments (a JSON object or list)."""
    out: dict[str, Variant] = {}
    for name, variant in variants.items():
        try:
            probe = variant("The user's probe fact.", "m1")
        except Exception:  # a failing model: not an answer
            continue
        if isinstance(probe, dict | list):
            out[name] = variant
    return out


@pytest.mark.parametrize("kind", CLIENTS)
def test_every_malformed_variant_through_the_real_client(kind: str, tmp_path: Path) -> None:
    repaired, retried = _json_variants(REPAIRED), _json_variants(RETRIED)
    variants = {**repaired, **retried}
    facts = {name: f"The user's locker {i} code is {1000 + i}." for i, name in enumerate(variants)}
    by_fact = {fact: name for name, fact in facts.items()}
    attempts = dict.fromkeys(variants, 0)

    def extract(window: FormationWindow) -> Any:
        user = next((m for m in window.messages if m["role"] == "user"), None)
        if user is None:
            return []
        name = by_fact[user["text"]]
        attempts[name] += 1
        answer: Callable[[str, str], Any] = variants[name] if attempts[name] == 1 else good
        return answer(user["text"], user["id"])

    with (
        llm_server(ScriptedFormationModel(extract=extract)) as server,
        TdaiMemory.open(
            tmp_path / "s",
            embeddings=HashEmbeddings(),
            config={**FAST, "extraction": {**FAST["extraction"], "maxWindowsPerRun": 500}},
            extraction_model=client(kind, server.url),
        ) as memory,
    ):
        for i, fact in enumerate(facts.values()):
            memory.record_messages(
                [{"role": "user", "content": fact}, {"role": "assistant", "content": "OK."}],
                session_key=f"s-{i}",
            )
        first = memory.extract()
        assert first.failed_windows == len(retried)
        assert contents(memory) == sorted(facts[n] for n in repaired)  # no junk stored
        reports: list[ExtractionReport] = [memory.extract() for _ in range(2)]
        assert reports[-1].ok and reports[-1].pending_messages == 0
        texts = [m.content for m in memory.list_memories()]
    assert sorted(texts) == sorted(facts.values())  # each fact once, nothing else
    for name in variants:
        assert attempts[name] == (1 if name in repaired else 2), name


def good(fact: str, mid: str) -> list[dict[str, Any]]:
    return [{"content": fact, "type": "persona", "priority": 60, "source_ids": [mid]}]
