"""What an installation with given extras provides: for the tests that check the install hints."""

from __future__ import annotations

import ast
import functools
import tomllib
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "langchain-tdai-recall"


def _project_requirements(extras: set[str]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    listed = list(project["dependencies"])
    for extra in extras:
        listed += project["optional-dependencies"][extra]
    return [r for r in map(Requirement, listed) if r.marker is None or r.marker.evaluate()]


def installed_with(extras: set[str]) -> set[str]:
    """Canonical names of every distribution `pip install ".[extras]"` installs (transitively),
    read from the metadata of the distributions installed here."""
    seen: set[str] = {canonicalize_name(PROJECT)}
    todo = [(r, r.extras) for r in _project_requirements(extras)]
    while todo:
        requirement, wanted = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen and not wanted:
            continue
        seen.add(name)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            sub = Requirement(text)
            markers = [{"extra": extra} for extra in wanted] or [{"extra": ""}]
            applies = sub.marker is None or any(sub.marker.evaluate(m) for m in markers)
            if applies and (canonicalize_name(sub.name) not in seen or sub.extras):
                todo.append((sub, sub.extras))
    return seen


@functools.cache
def _packages_distributions() -> Mapping[str, list[str]]:
    """Top-level module -> distributions, read once (it scans every installed distribution)."""
    return metadata.packages_distributions()


def imported_distributions(code: str) -> dict[str, set[str]]:
    """Top-level modules the code imports -> the distributions providing them (third party)."""
    providers = _packages_distributions()
    found: dict[str, set[str]] = {}
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT  # notebooks await at top level
    for node in ast.walk(compile(code, "<code>", "exec", flags=flags)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in providers and top != "langchain_tdai_recall":
                found[top] = {canonicalize_name(d) for d in providers[top]}
    return found


def extras() -> list[str]:
    """The project's extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return sorted(project["optional-dependencies"])
