"""Every Python example of the README and of `docs/` runs on its own, as written, offline.

The pages are `README.md` and every `docs/**/*.md`. Each ```python block runs in a fresh
namespace (nothing carries over from an earlier block) with a fresh temporary directory as the
working directory, so `TdaiMemory.open("./memory")` creates its store there. Sockets are disabled
as in the whole suite; the blocks use the package's offline fakes (`HashEmbeddings`,
`FakeToolCallingChatModel`, `ScriptedFormationModel`), the bundled embedder, or a throw-away
PostgreSQL on a unix socket.

Only ```python blocks run: a block that must not run is written as ```bash, ```text or another
language. A ```python block followed directly (blank lines only) by a ```text block must print
exactly that text; `PRINTS` holds the expected output of blocks that show theirs otherwise (as
comments, or not at all). The rest of this module keeps the site whole: the MkDocs nav lists
every page, every relative link and anchor resolves, and the README stays a front page.
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from langchain_tdai_recall import TdaiConfig, TdaiMemory

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)]

# The only changes made to a block before it runs, each for a path that exists only elsewhere:
SUBSTITUTIONS = {
    # the data directory of an installation of the original plugin -> the sample directory the
    # importer tests use (tests/fixtures/upstream/data, as the page suggests for trying it out)
    "~/.openclaw/memory-tdai": str(ROOT / "tests" / "fixtures" / "upstream" / "data"),
}

# What a block must print, for the blocks that print without a ```text block after them
# (by page and the heading above the block).
PRINTS = {
    "docs/how-to/memories.md#Write": (
        "- [episodic|travel] Flying to Lisbon for a conference (when: 2026-06-02"
    ),
    "docs/how-to/tools.md#Memory tools: `memory.tools()`": "Prefers window seats on long flights",
    "docs/how-to/retriever.md#Retriever: `memory.as_retriever()`": (
        "Prefers window seats on long flights True persona\nA window seat."
    ),
    "docs/how-to/agent-executor.md#Legacy `AgentExecutor`": "A window seat.",
    "docs/reference/observability.md#The `tdai_agent_turn` event": "'user_id': 'alice'",
    "docs/how-to/formation.md#Memory formation": "I'm vegetarian and I live in Lyon.",
    "docs/how-to/data-lifecycle.md#Forgetting a user": "2 1 [None, 'planner']",
    "docs/how-to/import-upstream.md#Import from TencentDB Agent Memory": (
        "7 5 3 True 0\nskipped: "
    ),
}


@dataclass(frozen=True)
class Block:
    """One ```python block of a page."""

    page: str  # relative to the repository root
    heading: str  # the heading above it
    line: int  # of its opening fence
    code: str
    output: str | None  # the ```text block right after it: what it must print

    @property
    def key(self) -> str:
        return f"{self.page}#{self.heading}"


@dataclass(frozen=True)
class _Fence:
    lang: str
    line: int
    end: int  # the line of the closing fence
    body: str


def _fences_and_headings(path: Path) -> tuple[list[_Fence], list[tuple[int, str]]]:
    """The fenced blocks of a page, and its headings (outside fences) with their lines."""
    lines = path.read_text(encoding="utf-8").splitlines()
    fences: list[_Fence] = []
    headings: list[tuple[int, str]] = []
    n = 0
    while n < len(lines):
        line = lines[n]
        if line.startswith("```"):
            start, body = n, []
            n += 1
            while n < len(lines) and lines[n].strip() != "```":
                body.append(lines[n])
                n += 1
            fences.append(_Fence(line[3:].strip(), start + 1, n + 1, "\n".join(body) + "\n"))
        elif re.match(r"#{1,6} ", line):
            headings.append((n + 1, line.lstrip("#").strip()))
        n += 1
    return fences, headings


def _blocks(path: Path) -> list[Block]:
    fences, headings = _fences_and_headings(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(ROOT).as_posix()
    blocks = []
    for i, fence in enumerate(fences):
        if fence.lang != "python":
            continue
        heading = next((h for at, h in reversed(headings) if at < fence.line), "")
        output = None
        if i + 1 < len(fences) and fences[i + 1].lang == "text":
            between = lines[fence.end : fences[i + 1].line - 1]
            if all(not line.strip() for line in between):
                output = fences[i + 1].body
        blocks.append(Block(page, heading, fence.line, fence.body, output))
    return blocks


BLOCKS = [block for page in PAGES for block in _blocks(page)]


def test_the_pages_have_their_examples() -> None:
    pages = {block.page for block in BLOCKS}
    assert len(BLOCKS) >= 20
    assert {"README.md", "docs/getting-started/quickstart.md", "docs/how-to/langmem.md"} <= pages
    assert set(PRINTS) <= {block.key for block in BLOCKS}
    assert not {block.key for block in BLOCKS if block.output is not None} & set(PRINTS)
    assert all(any(old in block.code for block in BLOCKS) for old in SUBSTITUTIONS)
    assert sum(block.output is not None for block in BLOCKS) >= 6


@pytest.mark.parametrize(
    "block",
    BLOCKS,
    ids=[
        f"{Path(b.page).stem}-{b.line}-{re.sub(r'[^a-z0-9]+', '-', b.heading.lower()).strip('-')}"
        for b in BLOCKS
    ],
)
def test_block_runs_on_its_own(
    block: Block,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = block.code
    for old, new in SUBSTITUTIONS.items():
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    try:
        with warnings.catch_warnings():
            # LangMem's dependency trustcall imports names LangGraph has deprecated
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"trustcall\.")
            # dont_inherit: a block runs as a user's script would, without this module's
            # `from __future__ import annotations` (which would hide annotation errors)
            name = f"{block.page}:{block.line} ({block.heading})"
            exec(compile(code, name, "exec", dont_inherit=True), namespace)
    finally:
        for value in namespace.values():
            if isinstance(value, TdaiMemory):
                value.close()
    out = capsys.readouterr().out
    if block.output is not None:
        assert out.rstrip() == block.output.rstrip()
    if block.key in PRINTS:
        assert PRINTS[block.key] in out


def test_every_import_of_the_docs_is_installed_by_the_package_or_a_listed_extra() -> None:
    """An import is installed by the package, by an extra the README lists, or by the
    `pip install` command its own page gives."""
    from ._deps import extras, imported_distributions, installed_with

    base = installed_with(set())
    readme = README.read_text(encoding="utf-8")
    listed = {e: installed_with({e}) for e in sorted(extras()) if f"| `{e}` |" in readme}
    for block in BLOCKS:
        page = (ROOT / block.page).read_text(encoding="utf-8")
        for module, providers in imported_distributions(block.code).items():
            if providers & base:
                continue
            by = [e for e, installed in listed.items() if providers & installed]
            named = {p for p in providers if re.search(rf"`pip install {re.escape(p)}`", page)}
            assert by or named, f"{block.key} imports {module}: no extra installs it"


# -- the site -------------------------------------------------------------------------------


def _nav_files(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [f for item in node for f in _nav_files(item)]
    if isinstance(node, dict):
        return [f for value in node.values() for f in _nav_files(value)]
    return []


def test_the_site_nav_lists_every_page_once() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_files(config["nav"])
    assert len(nav) == len(set(nav))
    assert set(nav) == {p.relative_to(DOCS).as_posix() for p in PAGES if p != README}
    assert config["strict"] is True


def _slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) and GitHub give a heading."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _links(path: Path) -> list[str]:
    """The relative link targets of a page, outside its code blocks and code spans."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)
    ]


def test_every_relative_link_and_anchor_resolves() -> None:
    for page in PAGES:
        for target in _links(page):
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.is_file(), f"{page.relative_to(ROOT)}: {target} does not exist"
            if path and file.is_relative_to(DOCS):
                assert file in PAGES, f"{page.relative_to(ROOT)}: {target} is not a page"
            if anchor:
                _, headings = _fences_and_headings(file)
                assert anchor in {_slug(h) for _, h in headings}, (
                    f"{page.relative_to(ROOT)}: no heading for #{anchor} in {file.name}"
                )


def test_no_table_cell_escapes_a_pipe() -> None:
    # GitHub needs `\|` for a pipe inside a table cell, and the site shows that backslash:
    # such a cell must be worded without the pipe
    for page in PAGES:
        escaped = [
            n for n, line in enumerate(page.read_text("utf-8").splitlines(), 1) if "\\|" in line
        ]
        assert escaped == [], f"{page.relative_to(ROOT)}: lines {escaped}"


def test_the_configuration_reference_lists_every_field() -> None:
    from pydantic import BaseModel

    table = (DOCS / "reference" / "configuration.md").read_text(encoding="utf-8")
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| `")]

    def documented(section: str, name: str) -> bool:
        # a row names `section.name`, or groups it: `section.a` / `name` / `c`
        for row in rows:
            names = re.findall(r"`([^`]+)`", row)
            same_section = bool(names) and names[0].rpartition(".")[0] == section
            if same_section and name in {n.rpartition(".")[2] for n in names}:
                return True
        return False

    def fields(model: type[BaseModel], section: str) -> list[tuple[str, str]]:
        found = []
        for name, field in model.model_fields.items():
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                found += fields(field.annotation, f"{section}.{name}".lstrip("."))
            else:
                found.append((section, name))
        return found

    every = fields(TdaiConfig, "")
    assert len(every) > 60
    missing = [f"{s}.{n}".lstrip(".") for s, n in every if not documented(s, n)]
    assert missing == []


# -- the README: a front page ---------------------------------------------------------------


def _section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 300
    # what tdai means, the two set-up commands, then an install that works from a checkout
    intro = text.split("\n## ", 1)[0]
    assert "TencentDB Agent Memory" in intro
    assert "make demo" in intro and "make test" in intro
    install = _section(text, "Install")
    first_command = re.search(r"```bash\n(.*?)\n```", install, re.S)
    assert first_command is not None
    assert "pip install -e ." in first_command.group(1)
    assert "pip install langchain-tdai-recall " not in first_command.group(1)
    # it links to every page of the guides, concepts and reference
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in _links(README)}
    guides = [p for p in PAGES if p.parent.name in {"how-to", "concepts", "reference"}]
    assert [p.relative_to(ROOT).as_posix() for p in guides if p not in linked] == []


def test_the_quickstart_prints_what_the_model_received() -> None:
    (block,) = [b for b in BLOCKS if b.page == "README.md" and b.heading == "Quickstart"]
    assert block.output is not None  # checked against the real output by the test above
    for tag in ("key-memories", "user-profile", "relevant-memories"):
        assert f"<{tag}>" in block.output
    assert "[system]" in block.output and "[human]" in block.output


def test_the_quickstart_is_english_first() -> None:
    readme = [b for b in BLOCKS if b.page == "README.md"]
    assert not re.search(r"[\u4e00-\u9fff]", readme[0].code)
    quickstart = (DOCS / "getting-started" / "quickstart.md").read_text(encoding="utf-8")
    assert '--8<-- "README.md:quickstart"' in quickstart.split("## ", 1)[0]
    assert re.search(r"[\u4e00-\u9fff]", quickstart)  # the Chinese example follows


def test_the_sections_the_site_includes_from_the_readme_exist() -> None:
    readme = README.read_text(encoding="utf-8")
    for page in PAGES[1:]:
        for name in re.findall(r'^--8<-- "README\.md:(\w+)"$', page.read_text("utf-8"), re.M):
            start, end = f"<!-- --8<-- [start:{name}] -->", f"<!-- --8<-- [end:{name}] -->"
            assert readme.count(start) == readme.count(end) == 1
            included = readme.split(start, 1)[1].split(end, 1)[0]
            assert "](" not in re.sub(r"`[^`\n]*`", "", included), "links would break in docs/"
