"""Erasing a user's data and managing L0 conversation messages (issue 16).

- `forget`: everything of the `--user`/`--agent` scope, or of every scope of the user with
  `--all-agents` (`TdaiMemory.forget`). On a terminal it asks first unless `--yes` is given;
  without a terminal it refuses unless `--yes` is given; it prints what was erased.
- `messages list`: the scope's messages (optionally one `--session`), in the order stored.
- `messages export`: the same as JSON Lines message lines, which `import-jsonl` reads back
  (`export --messages` writes them with the memories); without `--user`/`--agent`, those of
  every scope, as `export` does.
- `messages delete`: messages by id, or a whole `--session` (asks on a terminal and refuses
  without one unless `--yes`, like `forget`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from langchain_tdai_recall.cli._base import UsageError
from langchain_tdai_recall.cli._base import confirm as _confirm
from langchain_tdai_recall.cli.opening import open_existing
from langchain_tdai_recall.cli.render import one_line, print_json

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

    from langchain_tdai_recall.memory import TdaiMemory
    from langchain_tdai_recall.types import ForgetReport

__all__ = ["cmd_forget", "cmd_messages", "message_lines"]

PAGE: Final = 1000
"""Messages read per call."""


def _who(user: str, agent: str | None, *, all_agents: bool = False) -> str:
    if all_agents:
        return f"user {user!r} (every agent)"
    return f"user {user!r}" + (f", agent {agent!r}" if agent else " (shared memory)")


def render_forget(report: ForgetReport) -> list[str]:
    """The lines `forget` prints: one per scope, then the totals."""
    lines = []
    for s in report.scopes:
        lines.append(
            f"{_who(s.user_id, s.agent_id)}: {s.memories} memories, {s.memory_versions} "
            f"history versions, {s.messages} messages, {s.vectors} vectors, {s.scenes} scenes, "
            f"{'a persona' if s.persona else 'no persona'}, {s.formation_state} formation "
            f"state rows, {s.index_snapshots} index snapshot files"
        )
    if report.unnamed_scopes:
        lines.append(
            f"user {report.user_id!r}: {report.unnamed_scopes} scope folder(s) whose agent id "
            "could not be read (a lost .id file), erased whole"
        )
    lines.append(
        f"erased {len(report.scopes) + report.unnamed_scopes} scope(s): {report.memories} "
        f"memories, {report.messages} messages, {report.scenes} scenes, {report.personas} "
        "personas"
    )
    if report.reclaimed:
        lines.append(f"vacuumed ({report.reclaim}): {', '.join(report.reclaimed)}")
    return lines


def cmd_forget(args: argparse.Namespace) -> int:
    """`forget`: erase the scope (or every scope of the user), after confirming on a terminal."""
    if args.all_agents and args.agent is not None:
        msg = "--all-agents erases every agent of the user; leave out --agent"
        raise UsageError(msg)
    if args.user is None:
        # like `TdaiMemory.forget(user_id=...)`, an erasure names its user: no default
        msg = (
            "forget needs --user ID, the user whose data to erase (--user default_user for the "
            "default user)"
        )
        raise UsageError(msg)
    with open_existing(args, write=True) as memory:
        scope = memory.scope(args.user, args.agent)
        who = _who(scope.user_id, scope.agent_id, all_agents=args.all_agents)
        if not _confirm(args, f"Erase everything of {who} in {memory.location}?", command="forget"):
            print("nothing was erased")
            return 1
        report = memory.forget(
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            all_agents=args.all_agents,
            reclaim=args.reclaim,
        )
    if args.json:
        print_json(report)
    else:
        print("\n".join(render_forget(report)))
    return 0


def message_lines(
    memory: TdaiMemory, user: str, agent: str | None, session: str | None
) -> Iterator[str]:
    """The JSON Lines `message` lines of a scope (optionally one session), in stored order."""
    from langchain_tdai_recall._exchange import jsonl as _jsonl  # noqa: PLC0415

    offset = 0
    while True:
        page = memory.list_messages(
            session_key=session, limit=PAGE, offset=offset, user_id=user, agent_id=agent
        )
        for record in page:
            yield _jsonl.message_line(record)
        offset += len(page)
        if len(page) < PAGE:
            return


def cmd_messages(args: argparse.Namespace) -> int:
    """`messages list|export|delete`."""
    if args.action == "delete":
        return _delete(args)
    if args.ids:
        msg = f"'messages {args.action}' takes no ids (did you mean 'messages delete'?)"
        raise UsageError(msg)
    with open_existing(args) as memory:
        scope = memory.scope(args.user, args.agent)
        if args.action == "export":
            if args.user is None and args.agent is None:  # every scope, as `export` does
                scopes = [(s.user_id, s.agent_id) for s in memory.stats().scopes if s.messages]
            else:
                scopes = [(scope.user_id, scope.agent_id)]
            return _export(args, memory, scopes)
        records = memory.list_messages(
            session_key=args.session,
            limit=args.limit,
            offset=args.offset,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
        )
    if args.json:
        print_json(records)
        return 0
    if not records:
        print("(no messages)")
    for r in records:
        print(
            f"{r.id}  [{r.session_key or '-'}]  {r.recorded_at}  {r.role}: "
            f"{one_line(r.content, 80)}"
        )
    return 0


def _export(
    args: argparse.Namespace, memory: TdaiMemory, scopes: list[tuple[str, str | None]]
) -> int:
    from langchain_tdai_recall._exchange import jsonl as _jsonl  # noqa: PLC0415

    lines = (
        line for user, agent in scopes for line in message_lines(memory, user, agent, args.session)
    )
    if args.output == "-":
        sys.stdout.write(_jsonl.header_line() + "\n")
        for line in lines:
            sys.stdout.write(line + "\n")
        return 0
    target = Path(args.output).expanduser()
    partial = target.with_name(f".{target.name}.partial")
    count = 0
    try:
        with partial.open("w", encoding="utf-8", newline="\n") as out:
            out.write(_jsonl.header_line() + "\n")
            for line in lines:
                out.write(line + "\n")
                count += 1
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    if args.json:
        print_json({"output": str(target), "messages": count})
    else:
        print(f"exported {count} messages to {target}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    if bool(args.ids) == (args.session is not None):
        msg = "'messages delete' needs message ids or --session SESSION (one of the two)"
        raise UsageError(msg)
    with open_existing(args, write=True) as memory:
        scope = memory.scope(args.user, args.agent)
        what = (
            f"session {args.session!r}"
            if args.session is not None
            else f"{len(args.ids)} message(s)"
        )
        question = f"Delete {what} of {_who(scope.user_id, scope.agent_id)}?"
        if not _confirm(args, question, command="messages delete"):
            print("nothing was deleted")
            return 1
        deleted = memory.delete_messages(
            list(args.ids) if args.ids else None,
            session_key=args.session,
            user_id=scope.user_id,
            agent_id=scope.agent_id,
        )
    if args.json:
        print_json({"deleted": deleted})
    else:
        print(f"deleted {deleted} message(s)")
    return 0
