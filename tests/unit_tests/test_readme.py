"""Every Python example in the README runs, in order, against the real package."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
# Blocks that need an installation of the original plugin (its data directory) are shown for
# illustration; the importer itself is tested in test_upstream.py on fixture directories.
NEEDS_UPSTREAM_INSTALL = "~/.openclaw"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_readme_examples_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = [b for b in _python_blocks() if NEEDS_UPSTREAM_INSTALL not in b]
    assert len(blocks) >= 9
    namespace: dict[str, object] = {"__name__": "readme"}
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        for number, block in enumerate(blocks, 1):
            try:
                exec(compile(block, f"README.md python block {number}", "exec"), namespace)
            except Exception as exc:
                pytest.fail(f"README python block {number} failed: {exc!r}\n{block}")
    finally:
        os.chdir(cwd)
        memory = namespace.get("memory")
        close = getattr(memory, "close", None)
        if callable(close):
            close()
    assert "京都" in capsys.readouterr().out
