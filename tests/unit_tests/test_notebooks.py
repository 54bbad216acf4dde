"""Execute every notebook in `notebooks/` so that none can go stale.

Each notebook runs in a fresh kernel started with this interpreter (a kernelspec written to a
temporary Jupyter path), talking over Unix-domain sockets, so no TCP port is opened. Notebooks
must be committed without outputs and must run offline.
"""

from __future__ import annotations

import gc
import json
import re
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.manager import KernelManager  # noqa: E402 - after the importorskips

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
KERNEL = "tdai-recall-test"
TIMEOUT_S = 60


@pytest.fixture
def kernel_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "tdai-recall tests",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return KERNEL


def test_there_are_notebooks() -> None:
    names = [p.name for p in PATHS]
    assert names == [
        "01_quickstart_create_agent.ipynb",
        "02_wrap_lcel_chain.ipynb",
        "03_tools_agent_executor.ipynb",
        "04_inspecting_recall.ipynb",
        "05_memory_formation.ipynb",
    ]


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_is_committed_without_outputs(path: Path) -> None:
    book = nbformat.read(path, as_version=4)
    for cell in book.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: strip the outputs before committing"
            assert cell.execution_count is None, f"{path.name}: strip execution counts"


def _execute(book: Any, kernel_name: str, workdir: Path) -> None:
    # ipc: the kernel talks over Unix-domain sockets, so no TCP port is probed or opened. The
    # socket path must be absolute (the kernel runs in another working directory) and short.
    sockets = Path(tempfile.mkdtemp(prefix="tdai-nb-"))
    try:
        km = KernelManager(kernel_name=kernel_name, transport="ipc", ip=str(sockets / "k"))
        client = nbclient.NotebookClient(
            book, km=km, timeout=TIMEOUT_S, resources={"metadata": {"path": str(workdir)}}
        )
        client.execute()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_runs(path: Path, kernel_name: str, tmp_path: Path) -> None:
    book = nbformat.read(path, as_version=4)
    started = time.monotonic()
    with warnings.catch_warnings():
        # The kernel client's zmq sockets are garbage-collected unclosed; collect them here.
        warnings.simplefilter("ignore", ResourceWarning)
        _execute(book, kernel_name, tmp_path)
        gc.collect()
    assert time.monotonic() - started < TIMEOUT_S
    for cell in book.cells:
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error"
            if output.get("name") == "stderr":
                text = output.get("text", "")
                assert "Warning" not in text and "Traceback" not in text, text


_CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
_FIRST_TEXT = re.compile(r'(?:recall\(|"question": |"content": |"query": )"([^"]+)"')


def _code(path: Path) -> str:
    book = nbformat.read(path, as_version=4)
    return "\n".join(cell.source for cell in book.cells if cell.cell_type == "code")


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_uses_the_default_embedder(path: Path) -> None:
    # so that the scores a notebook shows are the ones users get
    code = _code(path)
    assert "HashEmbeddings" not in code
    # 04's build(embeddings="default") passes its argument on; None shows the keyword fallback
    assert set(re.findall(r"embeddings=([\w.\"]+)", code)) <= {'"default"', "embeddings", "None"}


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_speaks_english_first(path: Path) -> None:
    first = _FIRST_TEXT.search(_code(path))
    assert first is not None
    assert not _CJK.search(first.group(1)), f"{path.name} starts in Chinese: {first.group(1)!r}"


def test_the_chinese_examples_are_still_there() -> None:
    assert sum(bool(_CJK.search(_code(path))) for path in PATHS) >= 2


def test_the_notebooks_extra_installs_what_the_notebooks_import() -> None:
    from ._deps import imported_distributions, installed_with

    provided = installed_with({"notebooks"})
    for path in PATHS:
        for module, providers in imported_distributions(_code(path)).items():
            assert providers & provided, (
                f'{path.name} imports {module}: pip install -e ".[notebooks]" does not install it'
            )
    page = (NOTEBOOKS.parent / "docs" / "how-to" / "notebooks.md").read_text(encoding="utf-8")
    assert 'pip install -e ".[notebooks]"' in page
    assert all(f"](../../notebooks/{path.name})" in page for path in PATHS)  # each is linked
