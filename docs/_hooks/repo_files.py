"""MkDocs hook: the repository files the pages link to become part of the site.

The pages link to files outside `docs/` by their path relative to the page (for example
`../../benchmarks/results/quality.md`), so the links work wherever the Markdown itself is read
(GitHub, an editor). On the site such a file is published under `repo/<its path>`: this hook adds
every linked file that exists (Markdown is rendered, anything else is copied) and points the link
at it. A link to a file that does not exist is left as written, and the strict build fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

PREFIX = "repo"
# [text](target) and [text](target#anchor); the target has no scheme and no spaces
_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:)([^)\s#]+)((?:#[^)\s]*)?)\)")


def _outside(page_uri: str, target: str) -> str | None:
    """The repository path a relative link leaves `docs/` for, or None if it stays inside."""
    if target.startswith("/"):
        return None
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page_uri), target))
    if not resolved.startswith("../") or resolved.startswith("../../"):
        return None
    return resolved[3:]


def on_files(files: Files, config: Any) -> Files:
    """Add each existing repository file that a documentation page links to."""
    docs = Path(config["docs_dir"])
    root = docs.parent
    wanted: set[str] = set()
    for file in files.documentation_pages():
        text = Path(file.abs_src_path or "").read_text(encoding="utf-8")
        for target, _ in _LINK.findall(text):
            path = _outside(file.src_uri, target)
            if path is not None and (root / path).is_file():
                wanted.add(path)
    for path in sorted(wanted):
        files.append(File.generated(config, f"{PREFIX}/{path}", abs_src_path=str(root / path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point the page's links to repository files at their copies under `repo/`."""
    page_uri = page.file.src_uri

    def rewrite(match: re.Match[str]) -> str:
        target, anchor = match.group(1), match.group(2)
        path = _outside(page_uri, target)
        if path is None or files.get_file_from_path(f"{PREFIX}/{path}") is None:
            return match.group(0)
        new = posixpath.relpath(f"{PREFIX}/{path}", posixpath.dirname(page_uri) or ".")
        return f"]({new}{anchor})"

    return _LINK.sub(rewrite, markdown)
