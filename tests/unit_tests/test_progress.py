"""The progress helper: silent unless asked or on a terminal, tqdm optional."""

from __future__ import annotations

import io
import sys

import pytest

from langchain_tdai_recall._runtime.progress import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def no_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import tqdm.auto` raise ImportError.
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)


def test_disabled_yields_items_and_writes_nothing() -> None:
    out = io.StringIO()
    assert list(progress([1, 2, 3], desc="x", enabled=False, stream=out)) == [1, 2, 3]
    with progress(5, desc="x", enabled=False, stream=out) as bar:
        bar.update(5)
    assert bar.count == 5
    assert out.getvalue() == ""


def test_auto_is_silent_when_the_stream_is_not_a_terminal() -> None:
    out = io.StringIO()
    assert sum(progress(range(4), desc="x", stream=out)) == 6
    assert out.getvalue() == ""


@pytest.mark.usefixtures("no_tqdm")
def test_text_bar_without_tqdm() -> None:
    out = io.StringIO()
    assert list(progress(["a", "b", "c"], desc="embedding", enabled=True, stream=out)) == [
        "a",
        "b",
        "c",
    ]
    text = out.getvalue()
    assert text.startswith("\rembedding: [")
    assert "3/3" in text
    assert "(100%)" in text
    assert text.endswith("\n")


@pytest.mark.usefixtures("no_tqdm")
def test_text_bar_auto_on_a_terminal_and_unknown_total() -> None:
    out = _Tty()
    bar = progress(iter([1, 2]), desc="rows", stream=out, unit="rows")
    assert list(bar) == [1, 2]
    assert "rows: 2 rows" in out.getvalue()


def test_tqdm_is_used_when_installed() -> None:
    pytest.importorskip("tqdm")
    out = io.StringIO()
    with progress(4, desc="importing", enabled=True, stream=out, unit="msg") as bar:
        bar.update(4)
    assert "importing" in out.getvalue()
    assert "4/4" in out.getvalue()


def test_count_only_bar_cannot_be_iterated() -> None:
    bar = progress(3, desc="x", enabled=False)
    with pytest.raises(TypeError, match="update"):
        list(bar)


def test_close_is_idempotent_and_stops_drawing() -> None:
    out = io.StringIO()
    bar = progress(2, desc="x", enabled=True, stream=out)
    bar.close()
    written = out.getvalue()
    bar.close()
    bar.update(1)
    assert out.getvalue() == written
