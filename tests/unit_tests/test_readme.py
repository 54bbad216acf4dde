"""Every Python example in the README runs on its own, as written, offline.

Each ```python block runs in a fresh namespace (nothing carries over from an earlier block) with a
fresh temporary directory as the working directory, so `TdaiMemory.open("./memory")` creates its
store there. Sockets are disabled as in the whole suite; the blocks use the package's offline
fakes (`HashEmbeddings`, `FakeToolCallingChatModel`, `ScriptedFormationModel`), the bundled
embedder, or a throw-away PostgreSQL on a unix socket.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from langchain_tdai_recall import TdaiMemory

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# The only changes made to a block before it runs, each for a path that exists only elsewhere:
SUBSTITUTIONS = {
    # the data directory of an installation of the original plugin -> the sample directory the
    # importer tests use (tests/fixtures/upstream/data, as the README suggests for trying it out)
    "~/.openclaw/memory-tdai": str(ROOT / "tests" / "fixtures" / "upstream" / "data"),
}

# What a block must print, for the blocks that print (by the heading above the block).
PRINTS = {
    "Writing memories": "- [episodic|travel] Flying to Lisbon for a conference (when: 2026-06-02",
    "Memory tools: `memory.tools()`": "Prefers window seats on long flights",
    "Retriever: `memory.as_retriever()`": (
        "Prefers window seats on long flights True persona\nA window seat."
    ),
    "Combining retrievers: `EnsembleRetriever`": (
        "Prefers window seats on long flights\nSeats can be changed up to 24 hours"
    ),
    "Legacy `AgentExecutor` (the `classic` extra)": "A window seat.",
    "Observability: the `tdai_agent_turn` event": "'user_id': 'alice'",
    "Memory formation": "I'm vegetarian and I live in Lyon.",
    "Forgetting a user: `memory.forget()`": "2 1 [None, 'planner']",
    "Importing from TencentDB Agent Memory": "7 5 3 True 0\nskipped: ",
}


def _blocks() -> list[tuple[str, str]]:
    """(heading above the block, code) for every ```python block, in README order."""
    blocks: list[tuple[str, str]] = []
    heading = ""
    lines = iter(README.read_text(encoding="utf-8").splitlines())
    for line in lines:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.strip() == "```python":
            code = []
            for body in lines:
                if body.strip() == "```":
                    break
                code.append(body)
            blocks.append((heading, "\n".join(code) + "\n"))
    return blocks


BLOCKS = _blocks()


def test_the_readme_has_its_examples() -> None:
    headings = [heading for heading, _ in BLOCKS]
    assert len(BLOCKS) >= 12
    assert set(PRINTS) <= set(headings)
    assert all(any(old in code for _, code in BLOCKS) for old in SUBSTITUTIONS)


@pytest.mark.parametrize(
    ("heading", "code"),
    BLOCKS,
    ids=[
        f"{n}-{re.sub(r'[^a-z0-9]+', '-', h.lower()).strip('-')}"
        for n, (h, _) in enumerate(BLOCKS, 1)
    ],
)
def test_readme_block_runs_on_its_own(
    heading: str,
    code: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for old, new in SUBSTITUTIONS.items():
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__readme__"}
    try:
        exec(compile(code, f"README.md block under {heading!r}", "exec"), namespace)
    finally:
        for value in namespace.values():
            if isinstance(value, TdaiMemory):
                value.close()
    out = capsys.readouterr().out
    if heading in PRINTS:
        assert PRINTS[heading] in out


def test_every_import_of_the_readme_is_installed_by_the_package_or_a_listed_extra() -> None:
    from ._deps import extras, imported_distributions, installed_with

    base = installed_with(set())
    listed = {e for e in extras() if f"| `{e}` |" in README.read_text(encoding="utf-8")}
    for heading, code in BLOCKS:
        for module, providers in imported_distributions(code).items():
            if providers & base:
                continue
            by = [e for e in sorted(listed) if providers & installed_with({e})]
            assert by, f"the block under {heading!r} imports {module}: no extra installs it"


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_table_of_contents_lists_every_section_and_every_link_resolves() -> None:
    text = README.read_text(encoding="utf-8")
    headings = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    anchors = {_slug(h) for h in headings}
    contents = text.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\]\(#([^)]+)\)", contents)
    assert set(links) <= anchors, set(links) - anchors
    sections = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    assert {_slug(h) for h in sections if h != "Contents"} <= set(links)
    # the newcomer's path: what tdai means, then an install that works from a checkout, first
    intro = text.split("\n## ", 1)[0]
    assert "TencentDB Agent Memory" in intro
    install = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    first_command = re.search(r"```bash\n(.*?)\n```", install, re.S)
    assert first_command is not None
    assert "pip install -e ." in first_command.group(1)
    assert "pip install langchain-tdai-recall " not in first_command.group(1)


def test_the_quickstart_is_english_first() -> None:
    text = README.read_text(encoding="utf-8")
    quickstart = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    first_block = quickstart.split("```python\n", 1)[1].split("```", 1)[0]
    assert not re.search(r"[\u4e00-\u9fff]", first_block)
    assert re.search(r"[\u4e00-\u9fff]", quickstart)  # the Chinese example is beside it
