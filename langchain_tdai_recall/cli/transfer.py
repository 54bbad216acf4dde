"""Moving memories in and out of a store.

`export` and `import-jsonl` (the JSON Lines format of `_exchange.jsonl`, read back losslessly) and
`import-upstream` (the original plugin's data directory).

`import-jsonl` checks every line against a throw-away in-memory store first, so a bad line
imports nothing.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from langchain_tdai_recall.cli._base import UsageError
from langchain_tdai_recall.cli.opening import open_existing, open_for_writing, store_path
from langchain_tdai_recall.cli.render import print_json, render_import
from langchain_tdai_recall.errors import TdaiRecallError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator, Sequence

    from langchain_tdai_recall._exchange.jsonl import Item
    from langchain_tdai_recall.memory import TdaiMemory
    from langchain_tdai_recall.types import MemoryRecord, SceneBlock

__all__ = ["cmd_export", "cmd_import_jsonl", "cmd_import_upstream"]

IMPORT_BATCH: Final = 500
"""Records written per call by `import-jsonl`."""


EXPORT_PAGE: Final = 1000
"""Memories read per call by `export`."""


def cmd_import_upstream(args: argparse.Namespace) -> int:
    """`import-upstream`: a data directory of the original plugin."""
    with open_for_writing(args, store_path(args)) as memory:
        started = time.perf_counter()
        report = memory.import_upstream(
            args.dir, show_progress=args.progress, user_id=args.user, agent_id=args.agent
        )
        elapsed = time.perf_counter() - started
    if args.json:
        print_json(report)
    else:
        print("\n".join(render_import(report, elapsed, verbose=args.verbose > 0)))
    return 0


def _export_lines(
    memory: TdaiMemory, args: argparse.Namespace, counts: dict[str, int]
) -> Iterator[str]:
    from langchain_tdai_recall._exchange import jsonl as _jsonl  # noqa: PLC0415
    from langchain_tdai_recall._runtime.progress import progress  # noqa: PLC0415

    if args.user is not None or args.agent is not None:
        scopes = [(s.user_id, s.agent_id) for s in [memory.scope(args.user, args.agent)]]
        total = memory.stats(user_id=args.user, agent_id=args.agent).memories
    else:  # every scope with records (an administrative export, like `stats`)
        stats = memory.stats()
        scopes = [(s.user_id, s.agent_id) for s in stats.scopes]
        total = stats.memories
    yield _jsonl.header_line()
    with progress(total, desc="exporting memories", enabled=args.progress) as bar:
        for user, agent in scopes:
            offset = 0
            while True:
                page = memory.list_memories(
                    user_id=user, agent_id=agent, limit=EXPORT_PAGE, offset=offset
                )
                for record in page:
                    yield _jsonl.memory_line(record)
                counts["memories"] += len(page)
                bar.update(len(page))
                offset += len(page)
                if len(page) < EXPORT_PAGE:
                    break
            yield from _scope_extras(memory, args, user, agent, counts)


def _scope_extras(
    memory: TdaiMemory,
    args: argparse.Namespace,
    user: str,
    agent: str | None,
    counts: dict[str, int],
) -> Iterator[str]:
    """A scope's persona, scenes and messages, as `export`'s flags ask."""
    from langchain_tdai_recall._exchange import jsonl as _jsonl  # noqa: PLC0415

    if args.persona:
        text = memory.get_persona(user_id=user, agent_id=agent)
        if text is not None:
            counts["personas"] += 1
            yield _jsonl.persona_line(user, agent, text)
    if args.scenes:
        for info in memory.list_scenes(user_id=user, agent_id=agent):
            block = memory.read_scene(info.name, user_id=user, agent_id=agent)
            if block is not None:
                counts["scenes"] += 1
                yield _jsonl.scene_line(user, agent, block)
    if args.messages:
        from langchain_tdai_recall.cli.lifecycle import message_lines  # noqa: PLC0415

        for line in message_lines(memory, user, agent, None):
            counts["messages"] += 1
            yield line


def cmd_export(args: argparse.Namespace) -> int:
    """`export`: memories (and personas, scenes, messages) as JSON Lines, to a file or stdout."""
    counts = {"memories": 0, "personas": 0, "scenes": 0, "messages": 0}
    to_stdout = args.output == "-"
    with open_existing(args) as memory:
        if to_stdout:
            for line in _export_lines(memory, args, counts):
                sys.stdout.write(line + "\n")
            return 0
        target = Path(args.output).expanduser()
        partial = target.with_name(f".{target.name}.partial")
        try:
            with partial.open("w", encoding="utf-8", newline="\n") as out:
                for line in _export_lines(memory, args, counts):
                    out.write(line + "\n")
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
    if args.json:
        print_json({"output": str(target), **counts})
    else:
        messages = f" (and {counts['messages']} messages)" if args.messages else ""
        print(
            f"exported {counts['memories']} memories, {counts['personas']} personas and "
            f"{counts['scenes']} scenes{messages} to {target}"
        )
    return 0


def _read_items(name: str) -> list[Item]:
    from langchain_tdai_recall._exchange.jsonl import parse_lines  # noqa: PLC0415

    if name == "-":
        return list(parse_lines(sys.stdin))
    path = Path(name).expanduser()
    if not path.is_file():
        msg = f"{path} {'is not a file' if path.exists() else 'does not exist'}"
        raise UsageError(msg)
    with path.open(encoding="utf-8-sig") as fh:
        return list(parse_lines(fh))


def _batches(
    items: Sequence[Item], scope: Callable[[Item], tuple[str | None, str | None]]
) -> Iterator[list[Item]]:
    """Consecutive items that one call can write.

    Memories or messages of one scope (and session), up to `IMPORT_BATCH` of them; a persona or
    scene line is a batch of its own.
    """
    batch: list[Item] = []
    key: object = None
    for item in items:
        item_key: object = (item.kind, scope(item))
        if item.kind == "message":
            item_key = (item_key, item.data.get("session_key", ""), item.data.get("session_id", ""))
        single = item.kind in ("persona", "scene")
        if batch and (item_key != key or single or len(batch) >= IMPORT_BATCH):
            yield batch
            batch = []
        batch.append(item)
        key = item_key
    if batch:
        yield batch


def _write_batch(
    memory: TdaiMemory, batch: list[Item], scope: tuple[str | None, str | None]
) -> dict[str, int]:
    """Write one batch; returns counts: what it added, updated, and left as it was."""
    user_id, agent_id = scope
    first = batch[0]
    if first.kind == "memory":
        before = {
            item.data["id"]: memory.get_memory(item.data["id"], user_id=user_id, agent_id=agent_id)
            for item in batch
        }
        written = memory.add_memories(
            [item.data for item in batch], user_id=user_id, agent_id=agent_id, show_progress=False
        )
        counts = {"memories_new": 0, "memories_updated": 0, "unchanged": 0}
        for record in written:
            old = before.get(record.id)
            if old is None:
                counts["memories_new"] += 1
            elif _same_memory(old, record):
                counts["unchanged"] += 1
            else:
                counts["memories_updated"] += 1
        return counts
    if first.kind == "message":
        messages = [
            {k: v for k, v in item.data.items() if k not in ("session_key", "session_id")}
            for item in batch
        ]
        kept = memory.record_messages(
            messages,
            session_key=first.data.get("session_key", ""),
            session_id=first.data.get("session_id", ""),
            user_id=user_id,
            agent_id=agent_id,
        )
        return {"messages": kept, "unchanged": len(batch) - kept}
    if first.kind == "persona":
        old_persona = memory.get_persona(user_id=user_id, agent_id=agent_id)
        memory.set_persona(first.data["text"], user_id=user_id, agent_id=agent_id)
        same = memory.get_persona(user_id=user_id, agent_id=agent_id) == old_persona
        return {"unchanged": 1} if same else {"personas": 1}
    data = first.data
    old_scene = memory.read_scene(data["name"], user_id=user_id, agent_id=agent_id)
    memory.upsert_scene(
        data["name"],
        summary=data.get("summary", ""),
        body=data["body"],
        heat=data.get("heat"),
        user_id=user_id,
        agent_id=agent_id,
    )
    new_scene = memory.read_scene(data["name"], user_id=user_id, agent_id=agent_id)
    return {"unchanged": 1} if _same_scene(old_scene, new_scene) else {"scenes": 1}


def _same_memory(old: MemoryRecord, new: MemoryRecord) -> bool:
    """Whether a write left the memory as it was (the update time always moves)."""
    return dataclasses.replace(old, updated_at="") == dataclasses.replace(new, updated_at="")


def _same_scene(old: SceneBlock | None, new: SceneBlock | None) -> bool:
    if old is None or new is None:
        return old is new
    a, b = old.info, new.info
    return (old.body, a.summary, a.heat) == (new.body, b.summary, b.heat)


def _check_items(
    items: Sequence[Item], scope: Callable[[Item], tuple[str | None, str | None]]
) -> None:
    """Write everything to a throw-away in-memory store first, naming the first bad line."""
    from langchain_tdai_recall._exchange.jsonl import JsonlError  # noqa: PLC0415
    from langchain_tdai_recall.memory import TdaiMemory  # noqa: PLC0415

    with TdaiMemory.open(None, embeddings=None) as scratch:
        for batch in _batches(items, scope):
            try:
                _write_batch(scratch, batch, scope(batch[0]))
            except TdaiRecallError:
                for item in batch:  # a failed batch wrote nothing; find its first bad line
                    try:
                        _write_batch(scratch, [item], scope(item))
                    except TdaiRecallError as exc:
                        msg = f"line {item.line}: {exc}; nothing was imported"
                        raise JsonlError(msg) from exc
                raise


def cmd_import_jsonl(args: argparse.Namespace) -> int:
    """`import-jsonl`: a JSON Lines file; nothing is written unless every line is valid."""
    from langchain_tdai_recall._runtime.progress import progress  # noqa: PLC0415

    started = time.perf_counter()
    items = _read_items(args.file)
    override = args.user is not None or args.agent is not None

    def scope(item: Item) -> tuple[str | None, str | None]:
        return (args.user, args.agent) if override else (item.user_id, item.agent_id)

    _check_items(items, scope)
    counts = dict.fromkeys(
        ("memories_new", "memories_updated", "messages", "personas", "scenes", "unchanged"), 0
    )
    with (
        open_for_writing(args, store_path(args)) as memory,
        progress(len(items), desc="importing", enabled=args.progress) as bar,
    ):
        for batch in _batches(items, scope):
            for name, count in _write_batch(memory, batch, scope(batch[0])).items():
                counts[name] += count
            bar.update(len(batch))
    elapsed = time.perf_counter() - started
    memories = counts["memories_new"] + counts["memories_updated"]
    if args.json:
        print_json({"source": args.file, "lines": len(items), "memories": memories, **counts})
    else:
        print(
            f"imported {len(items)} lines from {args.file} in {elapsed:.1f} s: "
            f"{counts['memories_new']} new and {counts['memories_updated']} updated memories, "
            f"{counts['messages']} new messages, {counts['personas']} personas, "
            f"{counts['scenes']} scenes; {counts['unchanged']} lines already stored as they are"
        )
    return 0
