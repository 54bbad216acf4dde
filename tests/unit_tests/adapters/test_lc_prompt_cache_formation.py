"""A 20-turn conversation with memory formation on keeps its system message (issue 22 item 3).

Runs `benchmarks/formation/prompt_cache.py` (fake chat model, scripted formation model, the hash
embedder): formation forms a memory or two per window during the conversation. Before the
profile was held per session, every such window rewrote the `<user-profile>` block and with it
the provider's cached prefix (5 system messages in 20 calls here, 6 in the issue's run).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from langchain_tdai_recall.testing import HashEmbeddings

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "formation" / "prompt_cache.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_prompt_cache", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_twenty_turns_with_formation_keep_one_system_message() -> None:
    bench = _load()
    held = bench.run(hold=True, embeddings=HashEmbeddings(dims=64))
    assert held["model_calls"] == 20 and held["memories_formed"] >= 5
    assert held["system_changes"] <= 1, held
    # what formation added during the conversation still reached the model (memory block)
    assert held["formed_asked"] >= 5 and held["formed_reached"] == held["formed_asked"], held
    per_turn = bench.run(hold=False, embeddings=HashEmbeddings(dims=64))
    assert per_turn["system_changes"] >= 3  # the behaviour the hold replaces
    assert held["cached_prefix_share_mean"] > per_turn["cached_prefix_share_mean"]
