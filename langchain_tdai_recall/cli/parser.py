"""The `tdai-recall` argument parser: the common options, one subcommand per command.

Each subcommand names the function that runs it (`commands`, `transfer`, `demo`); a parse error
raises `UsageError` instead of printing usage and exiting with status 2.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, NoReturn

from langchain_tdai_recall.cli import commands, demo, lifecycle, transfer
from langchain_tdai_recall.cli._base import DEFAULT_STORE, IN_MEMORY, PROG, STORE_ENV, UsageError
from langchain_tdai_recall.types import MEMORY_TYPES

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["build_parser"]


class _Parser(argparse.ArgumentParser):
    """An argument parser that raises instead of printing usage and exiting with status 2."""

    def error(self, message: str) -> NoReturn:
        msg = f"{message} (see '{self.prog} --help')"
        raise UsageError(msg)


def _add_common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Options accepted both before and after the subcommand.

    On subcommands the defaults are suppressed so that a value given before the subcommand is
    not overwritten by the subparser's default.
    """

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("common options")
    group.add_argument(
        "--store",
        metavar="PATH_OR_URL",
        default=default(None),
        help=f"store directory or postgresql:// URL (default: ${STORE_ENV}, else "
        f"./{DEFAULT_STORE}); '{IN_MEMORY}' for a throw-away in-memory store",
    )
    group.add_argument(
        "--user", metavar="ID", default=default(None), help="user id (default: default_user)"
    )
    group.add_argument(
        "--agent",
        metavar="ID",
        default=default(None),
        help="agent id (default: the user's shared memory)",
    )
    group.add_argument(
        "--config",
        metavar="FILE",
        default=default(None),
        help="JSON configuration file (snake_case or the original plugin's camelCase keys)",
    )
    group.add_argument(
        "--embeddings",
        choices=("default", "none", "hash"),
        default=default(None),
        help="'default': the bundled offline embedder; 'none': keyword-only; "
        "'hash': a deterministic test embedder (fast, offline, not semantic). When omitted: "
        "the embedder the store's vectors were made with, if it can be rebuilt offline "
        "(else keyword-only), or the bundled one for a store without vectors. Read commands "
        "never re-embed; 'reindex' and the writing commands with an explicit --embeddings do",
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="machine-readable output",
    )
    progress = group.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress",
        dest="progress",
        action="store_const",
        const=True,
        default=default(None),
        help="always draw progress bars on stderr (default: only on a terminal)",
    )
    progress.add_argument(
        "--no-progress",
        dest="progress",
        action="store_const",
        const=False,
        default=default(None),
        help="never draw progress bars",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default(0),
        help="more log output on stderr (-v info, -vv debug)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="count",
        default=default(0),
        help="less log output on stderr (errors only)",
    )


def _version() -> str:
    from langchain_tdai_recall import __version__  # noqa: PLC0415

    return __version__


def build_parser() -> argparse.ArgumentParser:
    """The `tdai-recall` argument parser."""
    parser = _Parser(
        prog=PROG,
        description="Layered long-term memory for LangChain agents: inspect, fill and try a "
        "memory store from the shell.",
        epilog=f"Run '{PROG} demo' for an offline tour.",
    )
    _add_common(parser, suppress=False)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def command(name: str, func: Callable[[argparse.Namespace], int], help_: str) -> Any:
        p = sub.add_parser(name, help=help_, description=help_)
        _add_common(p, suppress=True)
        p.set_defaults(func=func)
        return p

    p = command(
        "demo",
        demo.cmd_demo,
        "offline tour: build a sample memory (Chinese and English), recall for a few turns "
        "and run one scripted agent turn",
    )
    p.add_argument("--no-agent", action="store_true", help="skip the scripted create_agent turn")

    p = command("add", commands.cmd_add, "add (or update, with --id) one L1 memory")
    p.add_argument("content", help="the memory text")
    p.add_argument("--type", choices=MEMORY_TYPES, default="episodic", help="memory type")
    p.add_argument("--scene", default="", help="situation label")
    p.add_argument("--priority", type=int, default=50, help="0..100, or -1 (default 50)")
    p.add_argument("--start", metavar="TIME", help="activity start (ISO 8601)")
    p.add_argument("--end", metavar="TIME", help="activity end (ISO 8601)")
    p.add_argument("--timestamp", metavar="TIME", help="event time (ISO 8601)")
    p.add_argument("--id", help="memory id (an existing id is updated)")
    p.add_argument("--session", default="", help="session key")

    p = command(
        "search", commands.cmd_search, "search L1 memories (or L0 messages with --messages)"
    )
    p.add_argument("query", help="search text")
    p.add_argument("--limit", type=_limit, default=5, help="1..20 (default 5)")
    p.add_argument("--type", choices=MEMORY_TYPES, help="only this memory type")
    p.add_argument("--scene", help="only this situation label")
    p.add_argument("--messages", action="store_true", help="search raw conversation messages (L0)")
    p.add_argument("--session", help="with --messages: only this session key")

    p = command(
        "recall",
        commands.cmd_recall,
        "run recall for a user message; print both blocks and the scores",
    )
    p.add_argument("text", help="the user's message")
    p.add_argument("--session", help="session key")

    p = command(
        "import-upstream",
        transfer.cmd_import_upstream,
        "import a data directory of the original TencentDB Agent Memory plugin",
    )
    p.add_argument("dir", metavar="DIR", help="e.g. ~/.openclaw/memory-tdai")

    _add_record_commands(command)

    command("stats", commands.cmd_stats, "counts per layer and scope, embedder and index sizes")

    command(
        "reindex",
        commands.cmd_reindex,
        "embed now every stored row whose vector is missing or was made by another embedder: "
        "with the store's own embedder, or with --embeddings (which moves the store to it)",
    )

    p = command(
        "migrate",
        commands.cmd_migrate,
        "copy a whole store (memories with their vectors, messages, personas, scenes) into "
        "another directory or a PostgreSQL database, or back; run it again to resume",
    )
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="PATH_OR_URL",
        help="the store to copy: a directory or a postgresql:// URL",
    )
    p.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="PATH_OR_URL",
        help="where to copy it (created when missing)",
    )
    p.add_argument("--page", type=_page, default=500, help="rows per transaction (default 500)")

    _add_extract_command(command)
    _add_lifecycle_commands(command)

    p = command("config", commands.cmd_config, "print the default configuration or its JSON schema")
    p.add_argument("what", choices=("defaults", "schema"), help="'defaults' or 'schema'")
    p.add_argument(
        "--camel",
        action="store_true",
        help="use the original plugin's camelCase keys",
    )
    return parser


def _add_record_commands(
    command: Callable[[str, Callable[[argparse.Namespace], int], str], Any],
) -> None:
    """`list`, `get`, `delete`, `export` and `import-jsonl`."""
    p = command("list", commands.cmd_list, "list the L1 memories of the scope, oldest first")
    p.add_argument("--type", choices=MEMORY_TYPES, help="only this memory type")
    p.add_argument("--limit", type=_count, help="at most this many (default: all)")
    p.add_argument("--offset", type=_count, default=0, help="skip this many first")

    p = command("get", commands.cmd_get, "print one memory of the scope with all its fields")
    p.add_argument("id", metavar="ID", help="memory id")

    p = command(
        "delete",
        commands.cmd_delete,
        "delete memories of the scope by id (asks first on a terminal, like forget)",
    )
    p.add_argument("ids", metavar="ID", nargs="+", help="memory ids")
    p.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="delete without asking (required when standard input is not a terminal)",
    )

    p = command(
        "export",
        transfer.cmd_export,
        "write memories (and optionally personas and scenes) as JSON Lines that import-jsonl "
        "reads back; every scope with records unless --user or --agent is given",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", default="-", help="output file (default: stdout)"
    )
    p.add_argument("--persona", action="store_true", help="also export the persona (L3)")
    p.add_argument("--scenes", action="store_true", help="also export the scene blocks (L2)")
    p.add_argument(
        "--messages",
        action="store_true",
        help="also export the L0 conversation messages (import-jsonl restores them)",
    )

    p = command(
        "import-jsonl",
        transfer.cmd_import_jsonl,
        "import a JSON Lines file (an export, or one memory object per line); nothing is "
        "written unless every line is valid",
    )
    p.add_argument("file", metavar="FILE", help="JSONL file, or '-' for stdin")


def _add_lifecycle_commands(command: Callable[..., Any]) -> None:
    """`forget` and `messages` (issue 16)."""
    p = command(
        "forget",
        lifecycle.cmd_forget,
        "erase everything of the --user/--agent scope (memories and their history, messages, "
        "scenes, persona, formation state, index snapshots); asks first on a terminal",
    )
    p.add_argument(
        "--all-agents",
        action="store_true",
        help="erase every scope of the user: the shared memory and every agent's",
    )
    p.add_argument(
        "--reclaim",
        choices=("vacuum", "full", "none"),
        default="vacuum",
        help="PostgreSQL: how the erased rows leave the database files afterwards: VACUUM the "
        "touched tables (default), VACUUM (FULL) them (rewrites them; other servers wait), or "
        "leave it to autovacuum",
    )
    p.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="erase without asking (required when standard input is not a terminal)",
    )

    p = command(
        "messages",
        lifecycle.cmd_messages,
        "L0 conversation messages of the scope: 'list', 'export' (JSON Lines that "
        "import-jsonl reads back) or 'delete' (by id, or a whole --session)",
    )
    p.add_argument("action", choices=("list", "export", "delete"), help="what to do")
    p.add_argument("ids", metavar="ID", nargs="*", help="with 'delete': message ids")
    p.add_argument("--session", help="only this session key (with 'delete': the whole session)")
    p.add_argument("--limit", type=_count, help="with 'list': at most this many")
    p.add_argument("--offset", type=_count, default=0, help="with 'list': skip this many first")
    p.add_argument("-o", "--output", metavar="FILE", default="-", help="with 'export': output file")
    p.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="erase without asking (required when standard input is not a terminal)",
    )


def _add_extract_command(command: Callable[..., Any]) -> None:
    p = command(
        "extract",
        commands.cmd_extract,
        "form L1 memories, scenes and the persona from the recorded conversations with a chat "
        "model (every scope with pending messages, or the one given by --user/--agent)",
    )
    p.add_argument(
        "--model",
        metavar="PROVIDER:MODEL",
        help="chat model for init_chat_model, e.g. openai:gpt-4o-mini (default: "
        "extraction.model of --config); its LangChain provider package must be installed",
    )
    p.add_argument("--session", help="only this session (of the --user/--agent scope)")


def _count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        msg = f"expected a non-negative integer, got {value!r}"
        raise argparse.ArgumentTypeError(msg)
    return number


def _page(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= 10_000:
        msg = f"page must be an integer in 1..10000, got {value!r}"
        raise argparse.ArgumentTypeError(msg)
    return number


def _limit(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= 20:
        msg = f"limit must be an integer in 1..20, got {value!r}"
        raise argparse.ArgumentTypeError(msg)
    return number
