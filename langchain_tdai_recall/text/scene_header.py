"""The metadata header of an L2 scene file: the one parser for our files and upstream's.

A scene file is Markdown that may start with a header in the original plugin's layout::

    -----META-START-----
    created: 2025-05-01T09:00:00Z
    updated: 2025-05-02T10:00:00Z
    summary: one line
    heat: 3
    -----META-END-----

    # the body

`split_scene_header` reads it (tolerating blank lines before the header, spaces around the
markers and CRLF line ends) and returns the `key: value` fields plus the body exactly as written
after the header's line and one blank line. `render_scene_header` writes it. The store's own scene
files and the upstream importer both use these two functions, so the format has one definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["META_END", "META_START", "render_scene_header", "split_scene_header"]

META_START: Final = "-----META-START-----"
"""First line of the header."""
META_END: Final = "-----META-END-----"
"""Last line of the header."""


def split_scene_header(text: str) -> tuple[dict[str, str], str, bool]:
    r"""Split a scene file into its header fields, its body and whether it had a header.

    Only blank lines may precede the start marker; without a start marker, or without an end
    marker after it, the file has no header and the whole text is the body. Header lines
    without a `:` are ignored; keys and values are stripped of surrounding whitespace.

    Args:
        text: The file's text.

    Returns:
        (fields, body, has_header). The body is the text after the end marker's line, minus one
        blank separator line when there is one, and is otherwise byte-exact.

    Example:
        ```python
        fields, body, found = split_scene_header(
            "-----META-START-----\nheat: 2\n-----META-END-----\n\n# Trip\n"
        )
        assert (fields, body, found) == ({"heat": "2"}, "# Trip\n", True)
        ```
    """
    lines = text.splitlines(keepends=True)
    start = None
    for i, line in enumerate(lines):
        if line.strip() == META_START:
            start = i
            break
        if line.strip():
            return {}, text, False
    if start is None:
        return {}, text, False
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() == META_END), None)
    if end is None:
        return {}, text, False
    fields: dict[str, str] = {}
    for line in lines[start + 1 : end]:
        key, sep, value = line.partition(":")
        if sep and key.strip():
            fields[key.strip()] = value.strip()
    rest = lines[end + 1 :]
    if rest and not rest[0].strip():
        rest = rest[1:]
    return fields, "".join(rest), True


def render_scene_header(fields: Mapping[str, object]) -> str:
    """The header for `fields`, each value on one line, followed by one blank line.

    Args:
        fields: Keys and values in the order to write them; whitespace runs in values
            (newlines included) become single spaces so every field stays on its line.

    Returns:
        The header text, ready to be followed by the body.
    """
    body = "".join(f"{key}: {' '.join(str(value).split())}\n" for key, value in fields.items())
    return f"{META_START}\n{body}{META_END}\n\n"
