"""The docstring examples of the integration modules run as written."""

from __future__ import annotations

import importlib
import inspect
import re
import textwrap
from typing import Any

import pytest

_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
_DOCUMENTED = [
    ("langchain_tdai_recall.middleware", "TdaiRecallMiddleware"),
    ("langchain_tdai_recall.tools", "create_memory_tools"),
    ("langchain_tdai_recall.tools", "ToolBudget"),
    ("langchain_tdai_recall.lcel", "create_recall_runnable"),
    ("langchain_tdai_recall.retriever", "TdaiRetriever"),
    ("langchain_tdai_recall.legacy", None),
    ("langchain_tdai_recall.testing._chat", "FakeToolCallingChatModel"),
]


def _examples() -> list[Any]:
    cases = []
    for module_name, attr in _DOCUMENTED:
        module = importlib.import_module(module_name)
        doc = inspect.getdoc(getattr(module, attr) if attr else module) or ""
        blocks = _BLOCK.findall(doc)
        assert blocks, f"{module_name}.{attr} has no example"
        cases.extend(
            pytest.param(textwrap.dedent(b), id=f"{module_name}.{attr or 'module'}-{i}")
            for i, b in enumerate(blocks)
        )
    return cases


@pytest.mark.parametrize("code", _examples())
def test_docstring_example_runs(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    if "langchain_classic" in code:
        pytest.importorskip("langchain_classic")
    namespace: dict[str, Any] = {"__name__": "__example__"}
    exec(compile(code, "<docstring example>", "exec"), namespace)
    memory = namespace.get("memory")
    if memory is not None:
        memory.close()
