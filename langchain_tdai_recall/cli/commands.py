"""The commands that read, write and maintain one store, one function each.

`add`, `search`, `recall`, `list`, `get`, `delete`, `stats`, `reindex`, `migrate`, `config` and
`extract`.

Moving data in and out (export, import-jsonl, import-upstream) is in `transfer`; the tour is in
`demo`.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING

from langchain_tdai_recall._exchange.records import check_lookup
from langchain_tdai_recall.cli._base import PROG, UsageError, confirm
from langchain_tdai_recall.cli.opening import (
    chosen_embeddings,
    existing_store_path,
    open_backend,
    open_existing,
    open_for_writing,
    open_recorded,
    pending_vectors,
    recorded_embedder,
    store_path,
    warm_up,
)
from langchain_tdai_recall.cli.render import (
    one_line,
    print_json,
    recall_json,
    render_hits,
    render_recall,
    to_jsonable,
)

if TYPE_CHECKING:
    import argparse

    from langchain_tdai_recall.memory import TdaiMemory
    from langchain_tdai_recall.types import MemoryRecord, MessageHit

__all__ = [
    "cmd_add",
    "cmd_config",
    "cmd_delete",
    "cmd_extract",
    "cmd_get",
    "cmd_list",
    "cmd_migrate",
    "cmd_recall",
    "cmd_reindex",
    "cmd_search",
    "cmd_stats",
]


def _parse_time(value: str) -> dt.datetime | dt.date | None:
    text = value.strip()
    try:
        if len(text) == 10:
            return dt.date.fromisoformat(text)
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None  # the library reports the bad value with its own message


def _check_activity_order(start: str | None, end: str | None) -> None:
    """Refuse an activity that ends before it starts.

    Two date-times with the same kind of zone information are compared exactly; otherwise the
    calendar dates are (a date, or a time without a zone, has no exact instant to compare).
    """
    if not start or not end:
        return
    first, last = _parse_time(start), _parse_time(end)
    if first is None or last is None:
        return
    if (
        isinstance(first, dt.datetime)
        and isinstance(last, dt.datetime)
        and (first.tzinfo is None) == (last.tzinfo is None)
    ):
        inverted = last < first
    else:
        as_date = [x.date() if isinstance(x, dt.datetime) else x for x in (first, last)]
        inverted = as_date[1] < as_date[0]
    if inverted:
        msg = f"--end {end!r} is before --start {start!r}; swap them or fix the date"
        raise UsageError(msg)


def cmd_add(args: argparse.Namespace) -> int:
    """`add`: store (or update, with `--id`) one L1 memory."""
    _check_activity_order(args.start, args.end)
    with open_for_writing(args, store_path(args)) as memory:
        record = memory.add_memory(
            args.content,
            type=args.type,
            scene_name=args.scene,
            priority=args.priority,
            activity_start_time=args.start,
            activity_end_time=args.end,
            timestamp=args.timestamp,
            id=args.id,
            session_key=args.session,
            user_id=args.user,
            agent_id=args.agent,
        )
    if args.json:
        print_json(record)
    else:
        tag = record.type + (f"|{record.scene_name}" if record.scene_name else "")
        print(f"stored {record.id} [{tag}] {one_line(record.content)}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    """`search`: L1 memories, or L0 messages with `--messages`."""
    with open_existing(args, searches=True) as memory:
        warm_up(memory)
        if args.messages:
            msgs: list[MessageHit] = memory.search_conversations(
                args.query,
                limit=args.limit,
                session_key=args.session,
                user_id=args.user,
                agent_id=args.agent,
            )
            if args.json:
                print_json(msgs)
                return 0
            if not msgs:
                print("(no matching messages)")
            for i, m in enumerate(msgs, 1):
                print(
                    f"{i:>2}  {m.score:>7.4f}  {m.role:<9}  {m.session_key}  {m.recorded_at}\n"
                    f"    {one_line(m.content, 96)}"
                )
            return 0
        hits = memory.search_memories(
            args.query,
            limit=args.limit,
            type=args.type,
            scene=args.scene,
            user_id=args.user,
            agent_id=args.agent,
        )
    if args.json:
        print_json(hits)
    else:
        print("\n".join(render_hits(hits)))
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    """`recall`: both injected blocks and the scores for one user message."""
    with open_existing(args, searches=True) as memory:
        warm_up(memory)
        result = memory.recall(
            args.text, session_key=args.session, user_id=args.user, agent_id=args.agent
        )
    if args.json:
        print_json(recall_json(result))
    else:
        print("\n".join(render_recall(result)))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    """`stats`: counts per layer and scope, the embedder and the tokenizer."""
    memory, recorded = open_recorded(args, write=False, searches=False)
    with memory:
        stats = (
            memory.stats(user_id=args.user, agent_id=args.agent)
            if (args.user or args.agent)
            else memory.stats()
        )
    if args.json:
        print_json(stats)
        return 0
    print(f"store:      {stats.path or '(in memory)'}")
    dims = f" ({stats.dimensions} dims)" if stats.dimensions else ""
    if recorded is not None and recorded.identity != stats.embedder:
        print(
            f"embedder:   {recorded.identity} ({recorded.dimension} dims; cannot be rebuilt "
            "offline, so this command reads keyword-only)"
        )
    else:
        print(f"embedder:   {stats.embedder or '(none: keyword-only)'}{dims}")
    print(f"tokenizer:  {stats.tokenizer}")
    print(
        f"memories:   {stats.memories}   messages: {stats.messages}   "
        f"scenes: {stats.scenes}   personas: {stats.personas}"
    )
    if stats.scopes:
        print(f"{'user':<20} {'agent':<16} {'L1':>7} {'L0':>7} {'L2':>4}  L3")
        for s in stats.scopes:
            print(
                f"{s.user_id:<20} {s.agent_id or '(shared)':<16} {s.memories:>7} "
                f"{s.messages:>7} {s.scenes:>4}  {'yes' if s.has_persona else '-'}"
            )
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    """`reindex`: embed every row whose vector is missing or another embedder's."""
    from langchain_tdai_recall.embeddings import (  # noqa: PLC0415
        embedder_identity,
        resolve_embeddings,
    )
    from langchain_tdai_recall.memory import TdaiMemory  # noqa: PLC0415

    path = existing_store_path(args)
    recorded = recorded_embedder(path)
    embeddings = resolve_embeddings(chosen_embeddings(args, recorded, searches=False))
    if embeddings is None:
        if args.embeddings == "none":
            msg = "reindex needs an embedder; pass --embeddings default or hash, not none"
        else:
            identity = recorded.identity if recorded is not None else "an unknown embedder"
            msg = (
                f"this store's vectors were made by {identity}, which cannot be rebuilt "
                "offline; re-embed from Python with the application's embedder "
                "(TdaiMemory.open(path, embeddings=...).reindex()), or pass --embeddings "
                "default or hash to move the store to that embedder"
            )
        raise UsageError(msg)
    before = pending_vectors(path, embedder_identity(embeddings))
    with TdaiMemory.open(
        path, embeddings=embeddings, config=args.config, show_progress=args.progress
    ) as memory:
        memory.reindex(show_progress=args.progress)  # the background upkeep may share the work
        stats = memory.stats()
    done = max(before - stats.pending_vectors, 0)
    if args.json:
        print_json({"embedded": done, "pending": stats.pending_vectors, "embedder": stats.embedder})
    else:
        print(f"embedded {done} rows with {stats.embedder}; {stats.pending_vectors} pending")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """`migrate`: copy a whole store into another directory or database (resumable)."""
    from langchain_tdai_recall.stores.migrate import copy_store, report_json  # noqa: PLC0415

    source = open_backend(args.source, read_only=True, what="--from")
    try:
        target = open_backend(args.target, read_only=False, what="--to")
        try:
            report = copy_store(source, target, page=args.page, show_progress=args.progress)
        finally:
            target.close()
    finally:
        source.close()
    if args.json:
        print_json(report_json(report))
        return 0
    print(f"copied {source.location} -> {target.location}")
    print(
        f"scopes: {report.scopes}   copied: memories {report.memories}, messages "
        f"{report.messages}, personas {report.personas}, scenes {report.scenes}, formation state "
        f"{report.formation}   already equal: rows {report.skipped}, personas "
        f"{report.personas_equal}, scenes {report.scenes_equal}"
    )
    return 0


def _scope_text(memory: TdaiMemory, args: argparse.Namespace) -> str:
    scope = memory.scope(args.user, args.agent)
    user, agent = scope.user_id, scope.agent_id
    return f"user {user!r}" + (f", agent {agent!r}" if agent else "")


def _record_tag(record: MemoryRecord) -> str:
    return record.type + (f"|{record.scene_name}" if record.scene_name else "")


def cmd_list(args: argparse.Namespace) -> int:
    """`list`: the L1 memories of the scope, oldest first."""
    with open_existing(args) as memory:
        records = memory.list_memories(
            user_id=args.user,
            agent_id=args.agent,
            type=args.type,
            limit=args.limit,
            offset=args.offset,
        )
    if args.json:
        print_json(records)
        return 0
    if not records:
        print("(no memories)")
    for record in records:
        print(
            f"{record.id}  [{_record_tag(record)}]  p{record.priority}  "
            f"{one_line(record.content, 80)}"
        )
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    """`get`: one memory of the scope with all its fields."""
    with open_existing(args) as memory:
        record = memory.get_memory(args.id, user_id=args.user, agent_id=args.agent)
        if record is None:
            msg = f"no memory {args.id!r} for {_scope_text(memory, args)}; see '{PROG} list'"
            raise UsageError(msg)
    if args.json:
        print_json(record)
        return 0
    for name, value in to_jsonable(record).items():
        if name == "content":
            continue
        if value not in (None, "", []):
            print(f"{name + ':':<21}{value}")
    print(f"\n{record.content}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    """`delete`: memories of the scope by id; a missing id is an error after the rest."""
    deleted: list[str] = []
    missing: list[str] = []
    with open_existing(args, write=True) as memory:
        ids = [check_lookup("memory id", i) for i in dict.fromkeys(args.ids)]  # before asking
        question = f"Delete {len(ids)} memories of {_scope_text(memory, args)}?"
        if not confirm(args, question, command="delete"):
            print("nothing was deleted")
            return 1
        for memory_id in ids:
            found = memory.delete_memory(memory_id, user_id=args.user, agent_id=args.agent)
            (deleted if found else missing).append(memory_id)
        scope = _scope_text(memory, args)
    if args.json:
        print_json({"deleted": deleted, "missing": missing})
    else:
        for memory_id in deleted:
            print(f"deleted {memory_id}")
    if missing:
        rest = "the other ids were deleted" if deleted else "nothing was deleted"
        msg = f"no memory {', '.join(repr(m) for m in missing)} for {scope}; {rest}"
        raise UsageError(msg)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """`config`: the default configuration or its JSON schema."""
    from langchain_tdai_recall.config import TdaiConfig  # noqa: PLC0415

    if args.what == "schema":
        data = TdaiConfig.model_json_schema(by_alias=args.camel)
    else:
        cfg = TdaiConfig.coerce(args.config) if args.config else TdaiConfig()
        data = cfg.to_dict(by_alias=args.camel)
    print(json.dumps(data, ensure_ascii=False, indent=2))
    return 0


def cmd_extract(args: argparse.Namespace) -> int:
    """`extract`: form memories from the recorded conversations with a chat model."""
    from langchain_tdai_recall.errors import ConfigError  # noqa: PLC0415
    from langchain_tdai_recall.memory import TdaiMemory  # noqa: PLC0415

    if args.session and not (args.user or args.agent):
        msg = "--session needs --user (and --agent, if the session belongs to one)"
        raise ConfigError(msg)
    from langchain_tdai_recall.config import TdaiConfig  # noqa: PLC0415

    model = args.model
    config = TdaiConfig.coerce(args.config)
    if model is None and config.extraction.model is None:
        msg = "no chat model: pass --model PROVIDER:MODEL or set extraction.model in --config"
        raise ConfigError(msg)
    # this command is the foreground run: no background scheduling next to it
    config = config.model_copy(
        update={"pipeline": config.pipeline.model_copy(update={"enabled": False})}
    )
    path = existing_store_path(args)
    with TdaiMemory.open(
        path,
        embeddings=chosen_embeddings(args, recorded_embedder(path), searches=False),
        config=config,
        show_progress=args.progress,
        extraction_model=model,
    ) as memory:
        report = memory.extract(
            user_id=args.user,
            agent_id=args.agent,
            session_key=args.session,
            all_scopes=not (args.user or args.agent),
            show_progress=args.progress,
        )
    if args.json:
        print_json(report)
    else:
        decisions = ", ".join(f"{k} {v}" for k, v in report.decisions.items() if v) or "none"
        scenes = ", ".join(f"{k} {v}" for k, v in report.scenes.items() if v) or "none"
        print(
            f"formed {report.windows} window(s) over {report.messages} message(s) in "
            f"{report.scopes} scope(s), {report.elapsed_ms / 1000:.1f} s\n"
            f"  memories written:  {report.written} (deleted {report.deleted})\n"
            f"  decisions:         {decisions}\n"
            f"  scenes:            {scenes}\n"
            f"  persona updated:   {'yes' if report.persona_updated else 'no'}\n"
            f"  model calls:       {report.model_calls} ({report.total_tokens} tokens)\n"
            f"  still pending:     {report.pending_messages} message(s)"
        )
        if report.junk or report.unrepaired:
            print(
                f"  answers not used:  {report.junk} junk item(s), {report.unrepaired} that "
                "could not be repaired (their windows are retried)"
            )
        for error in report.errors:
            print(f"  failed: {error}")
    return 0 if report.ok else 1
