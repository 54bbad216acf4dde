"""Formation at interpreter exit, for a store nobody closed (issue 18, formation item 3).

A store still referenced at exit (a module-level variable, as in the docs) is shut down by
its finalizer after Python stopped its thread pools; the formation call must still reach the
model, or leave the work for the next open with one INFO line, never an error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory
from langchain_tdai_recall.testing import HashEmbeddings

SCRIPT = textwrap.dedent(
    """
    import logging, sys
    from concurrent.futures import ThreadPoolExecutor
    from langchain_tdai_recall import TdaiMemory
    from langchain_tdai_recall.testing import HashEmbeddings, ScriptedFormationModel

    class PooledModel(ScriptedFormationModel):
        # a provider client that runs its request on a thread pool

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            with ThreadPoolExecutor(1) as pool:
                parent = super()._generate
                return pool.submit(parent, messages, stop, run_manager, **kwargs).result()

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    config = {"pipeline": {"enabled": False, "closeTimeoutSeconds": 30}, "timezone": "+08:00"}
    method, pooled = sys.argv[2].split("/")
    config["extraction"] = {"structuredOutput": method}
    model = PooledModel() if pooled == "pooled" else ScriptedFormationModel()
    memory = TdaiMemory.open(  # module level, never closed: shut down by its finalizer at exit
        sys.argv[1], embeddings=HashEmbeddings(dims=64), config=config, extraction_model=model
    )
    memory.record_messages(
        [{"role": "user", "content": "I keep bees."}, {"role": "assistant", "content": "Nice."}],
        session_key="s1",
    )
    print("RECORDED", flush=True)
    """
)


def run_and_exit(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "at_exit.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store"), mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "RECORDED" in done.stdout
    loud = [
        line
        for line in done.stderr.splitlines()
        if line.startswith(("WARNING", "ERROR", "CRITICAL")) or "Traceback" in line
    ]
    assert loud == [], done.stderr
    return done


def formed(tmp_path: Path, *, model: object = None) -> list[str]:
    from langchain_tdai_recall.testing import ScriptedFormationModel

    with TdaiMemory.open(
        tmp_path / "store",
        embeddings=HashEmbeddings(dims=64),
        config={"timezone": "+08:00", "pipeline": {"enabled": False}},
        extraction_model=model or ScriptedFormationModel(),
    ) as reopened:
        if model is not None:
            reopened.extract(all_scopes=True)
        return [m.content for m in reopened.list_memories()]


@pytest.mark.parametrize("method", ["function_calling", "json_schema", "prompt"])
def test_formation_at_exit_reaches_the_model_for_an_unclosed_store(
    tmp_path: Path, method: str
) -> None:
    # the structured call ran the model inside a RunnableParallel, which submits to a thread
    # pool: "cannot schedule new futures after interpreter shutdown", and a WARNING
    done = run_and_exit(tmp_path, f"{method}/plain")
    assert "cannot schedule new futures" not in done.stderr, done.stderr
    assert formed(tmp_path) == ["I keep bees."]  # formed at exit, before the reopen


def test_a_client_that_needs_a_pool_at_exit_leaves_the_work_with_one_info_line(
    tmp_path: Path,
) -> None:
    done = run_and_exit(tmp_path, "function_calling/pooled")
    exit_lines = [line for line in done.stderr.splitlines() if "interpreter exit" in line]
    assert len(exit_lines) == 1 and exit_lines[0].startswith("INFO"), done.stderr
    assert "window" not in done.stderr  # no per-window failure noise either
    from langchain_tdai_recall.testing import ScriptedFormationModel

    assert formed(tmp_path, model=ScriptedFormationModel()) == ["I keep bees."]
