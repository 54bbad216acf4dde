"""The `tdai-recall` command line: a thin shell over the public `TdaiMemory` API.

Usage (also `python -m langchain_tdai_recall ...`)::

    tdai-recall demo                                   # offline tour, in-memory store
    tdai-recall add "The user is vegetarian." --type persona
    tdai-recall list --type persona | get ID | delete ID [ID ...]
    tdai-recall search "what does the user eat?" --limit 3
    tdai-recall recall "Plan dinner for Friday"        # both injected blocks and the scores
    tdai-recall export --persona --scenes -o backup.jsonl
    tdai-recall import-jsonl backup.jsonl              # re-imports an export losslessly
    tdai-recall import-upstream ~/.openclaw/memory-tdai
    tdai-recall extract --model openai:gpt-4o-mini    # form memories from the conversations
    tdai-recall stats
    tdai-recall reindex                                # embed rows whose vector is missing
    tdai-recall migrate --from ./tdai-store --to postgresql://app@db/memory   # resumable copy
    tdai-recall config defaults | config schema

Common options (before or after the subcommand): `--store PATH_OR_URL` (a directory or a
`postgresql://` URL; default: `$TDAI_RECALL_STORE`, else `./tdai-store`; `:memory:` for a
throw-away store), `--user`, `--agent`, `--config FILE`,
`--embeddings default|none|hash`, `--json`, `--progress`/`--no-progress`, `-v`/`-q`.

Only `add`, `import-jsonl`, `import-upstream` and `demo --store` create a store; every other
command refuses a path that holds no store. `search`, `recall`, `list`, `get`, `stats` and
`export` open it read-only: they write nothing and re-embed nothing. Without `--embeddings`,
every command on an existing store uses the embedder its vectors were made with when that can
be rebuilt offline (the bundled one, the test hash embedder), else reads keyword-only (with a
note on stderr); re-embedding happens only with `reindex` or an explicit `--embeddings` on a
writing command. Results go to standard output (`--json` for
machine-readable output); logs and progress bars go to standard error. Every error prints one
line and exits with status 1; when the reader of standard output goes away (`| head`), the
command stops quietly with status 141, as a process ended by SIGPIPE does.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn

from langchain_tdai_recall.errors import TdaiRecallError
from langchain_tdai_recall.store._sqlite import DB_FILENAME
from langchain_tdai_recall.text.tags import KEY_MEMORIES_TAG, STANDING_RULES_TAG, USER_PROFILE_TAG
from langchain_tdai_recall.types import MEMORY_TYPES

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from langchain_tdai_recall._jsonl import Item
    from langchain_tdai_recall.memory import TdaiMemory
    from langchain_tdai_recall.stores.base import BaseMemoryStore, StoredEmbedder
    from langchain_tdai_recall.types import (
        ImportReport,
        MemoryHit,
        MemoryRecord,
        MessageHit,
        RecallResult,
        SceneBlock,
        Scope,
    )

__all__ = ["DEFAULT_STORE", "STORE_ENV", "build_parser", "main"]

PROG: Final = "tdai-recall"
STORE_ENV: Final = "TDAI_RECALL_STORE"
"""Environment variable naming the default store directory."""
DEFAULT_STORE: Final = "tdai-store"
"""Store directory used when neither `--store` nor `$TDAI_RECALL_STORE` is given (relative to
the working directory)."""
IN_MEMORY: Final = ":memory:"
"""`--store` value for a throw-away in-memory store."""
HASH_DIMS: Final = 64
"""Dimension of the `--embeddings hash` test embedder."""
MAX_SKIPPED_SHOWN: Final = 20
"""Skipped import items listed in text output (all of them with `-v` or `--json`)."""
EXIT_BROKEN_PIPE: Final = 141
"""Exit status when standard output is closed by its reader (128 + SIGPIPE)."""
IMPORT_BATCH: Final = 500
"""Records written per call by `import-jsonl`."""
EXPORT_PAGE: Final = 1000
"""Memories read per call by `export`."""

_LOGGER_NAME: Final = "langchain_tdai_recall"

logger = logging.getLogger(__name__)


class _UsageError(Exception):
    """A command-line mistake, reported like any other error (one line, status 1)."""


class _Parser(argparse.ArgumentParser):
    """An argument parser that raises instead of printing usage and exiting with status 2."""

    def error(self, message: str) -> NoReturn:
        msg = f"{message} (see '{self.prog} --help')"
        raise _UsageError(msg)


# --------------------------------------------------------------------------------------------
# Parser


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


def build_parser() -> argparse.ArgumentParser:
    """The `tdai-recall` argument parser."""
    parser = _Parser(
        prog=PROG,
        description="Layered long-term memory for LangChain agents: inspect, fill and try a "
        "memory store from the shell.",
        epilog=f"Run '{PROG} demo' for an offline tour.",
    )
    _add_common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def command(name: str, func: Callable[[argparse.Namespace], int], help_: str) -> Any:
        p = sub.add_parser(name, help=help_, description=help_)
        _add_common(p, suppress=True)
        p.set_defaults(func=func)
        return p

    p = command(
        "demo",
        _cmd_demo,
        "offline tour: build a sample memory (Chinese and English), recall for a few turns "
        "and run one scripted agent turn",
    )
    p.add_argument("--no-agent", action="store_true", help="skip the scripted create_agent turn")

    p = command("add", _cmd_add, "add (or update, with --id) one L1 memory")
    p.add_argument("content", help="the memory text")
    p.add_argument("--type", choices=MEMORY_TYPES, default="episodic", help="memory type")
    p.add_argument("--scene", default="", help="situation label")
    p.add_argument("--priority", type=int, default=50, help="0..100, or -1 (default 50)")
    p.add_argument("--start", metavar="TIME", help="activity start (ISO 8601)")
    p.add_argument("--end", metavar="TIME", help="activity end (ISO 8601)")
    p.add_argument("--timestamp", metavar="TIME", help="event time (ISO 8601)")
    p.add_argument("--id", help="memory id (an existing id is updated)")
    p.add_argument("--session", default="", help="session key")

    p = command("search", _cmd_search, "search L1 memories (or L0 messages with --messages)")
    p.add_argument("query", help="search text")
    p.add_argument("--limit", type=_limit, default=5, help="1..20 (default 5)")
    p.add_argument("--type", choices=MEMORY_TYPES, help="only this memory type")
    p.add_argument("--scene", help="only this situation label")
    p.add_argument("--messages", action="store_true", help="search raw conversation messages (L0)")
    p.add_argument("--session", help="with --messages: only this session key")

    p = command(
        "recall", _cmd_recall, "run recall for a user message; print both blocks and the scores"
    )
    p.add_argument("text", help="the user's message")
    p.add_argument("--session", help="session key")

    p = command(
        "import-upstream",
        _cmd_import,
        "import a data directory of the original TencentDB Agent Memory plugin",
    )
    p.add_argument("dir", metavar="DIR", help="e.g. ~/.openclaw/memory-tdai")

    _add_record_commands(command)

    command("stats", _cmd_stats, "counts per layer and scope, embedder and index sizes")

    command(
        "reindex",
        _cmd_reindex,
        "embed now every stored row whose vector is missing or was made by another embedder: "
        "with the store's own embedder, or with --embeddings (which moves the store to it)",
    )

    p = command(
        "migrate",
        _cmd_migrate,
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

    p = command("config", _cmd_config, "print the default configuration or its JSON schema")
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
    p = command("list", _cmd_list, "list the L1 memories of the scope, oldest first")
    p.add_argument("--type", choices=MEMORY_TYPES, help="only this memory type")
    p.add_argument("--limit", type=_count, help="at most this many (default: all)")
    p.add_argument("--offset", type=_count, default=0, help="skip this many first")

    p = command("get", _cmd_get, "print one memory of the scope with all its fields")
    p.add_argument("id", metavar="ID", help="memory id")

    p = command("delete", _cmd_delete, "delete memories of the scope by id")
    p.add_argument("ids", metavar="ID", nargs="+", help="memory ids")

    p = command(
        "export",
        _cmd_export,
        "write memories (and optionally personas and scenes) as JSON Lines that import-jsonl "
        "reads back; every scope with records unless --user or --agent is given",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", default="-", help="output file (default: stdout)"
    )
    p.add_argument("--persona", action="store_true", help="also export the persona (L3)")
    p.add_argument("--scenes", action="store_true", help="also export the scene blocks (L2)")

    p = command(
        "import-jsonl",
        _cmd_import_jsonl,
        "import a JSON Lines file (an export, or one memory object per line); nothing is "
        "written unless every line is valid",
    )
    p.add_argument("file", metavar="FILE", help="JSONL file, or '-' for stdin")


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


# --------------------------------------------------------------------------------------------
# Entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: Arguments without the program name; `None` reads `sys.argv[1:]`.

    Returns:
        The exit status: 0 on success, 1 on any error, 130 when interrupted, 141 when the
        reader of standard output went away.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        _error(str(exc))
        return 1
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    package_logger = logging.getLogger(_LOGGER_NAME)
    previous_level = package_logger.level
    handler = _setup_logging(args.verbose - args.quiet)
    args.log_handler = handler
    try:
        return _run(args)
    finally:
        package_logger.removeHandler(handler)
        package_logger.setLevel(previous_level)
        handler.close()


def _run(args: argparse.Namespace) -> int:
    """Run the chosen command; every failure becomes one line on stderr and an exit status."""
    status = 1
    try:
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
    except BrokenPipeError:
        _discard_stdout()
        status = EXIT_BROKEN_PIPE
    except (TdaiRecallError, _UsageError) as exc:
        _error(str(exc))
    except OSError as exc:
        _error(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
    except KeyboardInterrupt:
        _error("interrupted")
        status = 130
    except Exception as exc:  # a bug: still one line, the traceback with -vv
        logger.debug("unexpected error", exc_info=True)
        _error(f"unexpected {type(exc).__name__}: {exc} (run with -vv for the traceback)")
    return status


def _error(message: str) -> None:
    one_line = " ".join(message.split())
    print(f"{PROG}: error: {one_line}", file=sys.stderr)


def _discard_stdout() -> None:
    """Point standard output at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        fd = sys.stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (AttributeError, OSError, ValueError):  # in-process callers (tests) have no fd
        return
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _setup_logging(level: int) -> logging.Handler:
    """Send the package's logs to stderr at a level chosen by -v/-q; returns the handler."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger(_LOGGER_NAME)
    if level >= 2:
        logger.setLevel(logging.DEBUG)
    elif level == 1:
        logger.setLevel(logging.INFO)
    elif level < 0:
        logger.setLevel(logging.ERROR)
    else:
        logger.setLevel(logging.WARNING)
    logger.addHandler(handler)
    return handler


# --------------------------------------------------------------------------------------------
# Helpers


def _store_path(args: argparse.Namespace) -> Path | str | None:
    """The store of `--store`: a directory, a PostgreSQL URL, or `None` (in memory)."""
    raw = args.store or os.environ.get(STORE_ENV) or DEFAULT_STORE
    return _location(raw)


def _location(raw: str) -> Path | str | None:
    if raw == IN_MEMORY:
        return None
    if _is_database_url(raw):
        return raw.strip()
    return Path(raw).expanduser()


def _is_database_url(raw: str) -> bool:
    return raw.strip().lower().startswith(("postgresql://", "postgres://"))


def _embeddings(name: str | None) -> Embeddings | Literal["default"] | None:
    if name == "none":
        return None
    if name == "hash":
        from langchain_tdai_recall.testing import HashEmbeddings  # noqa: PLC0415

        return HashEmbeddings(dims=HASH_DIMS)
    return "default"


def _open(args: argparse.Namespace, path: Path | str | None) -> TdaiMemory:
    """Open (creating on first use) the store at `path`; for commands that write.

    Without `--embeddings`, an existing store is opened with the embedder its vectors were made
    with (see `_chosen_embeddings`), so that writing to it does not re-embed it.
    """
    from langchain_tdai_recall.memory import TdaiMemory  # noqa: PLC0415 - keeps --help fast

    embeddings = _embeddings(args.embeddings)
    if args.embeddings is None and _store_exists(path):
        recorded = _recorded_embedder(path, must_exist=False)
        embeddings = _chosen_embeddings(args, recorded, searches=False)
    return TdaiMemory.open(
        path,
        embeddings=embeddings,
        config=args.config,
        show_progress=args.progress,
    )


def _open_existing(
    args: argparse.Namespace, *, write: bool = False, searches: bool = False
) -> TdaiMemory:
    """Open the store of `--store` only if it exists: read commands never create one.

    Read commands (`write=False`) open it read-only: nothing is written, nothing re-embedded.
    Without `--embeddings` the store's own embedder is used (`_chosen_embeddings`); `searches`
    marks the commands for which a keyword-only fallback is worth a note on stderr.

    Raises:
        _UsageError: If the path does not exist or holds no memory store.
    """
    return _open_recorded(args, write=write, searches=searches)[0]


def _open_recorded(
    args: argparse.Namespace, *, write: bool, searches: bool
) -> tuple[TdaiMemory, StoredEmbedder | None]:
    """`_open_existing`, and the embedder that made most of the store's vectors."""
    from langchain_tdai_recall.memory import TdaiMemory  # noqa: PLC0415 - keeps --help fast

    path = _existing_store_path(args)
    recorded = _recorded_embedder(path)
    memory = TdaiMemory.open(
        path,
        embeddings=_chosen_embeddings(args, recorded, searches=searches),
        config=args.config,
        show_progress=args.progress,
        read_only=not write and path is not None,  # `:memory:` starts empty: nothing to keep
    )
    return memory, recorded


def _store_exists(path: Path | str | None) -> bool:
    if path is None:
        return False
    if isinstance(path, Path):
        return (path / DB_FILENAME).is_file()
    return True  # a database URL: `_recorded_embedder` finds out (no store: no vectors)


def _raw_store(path: Path | str) -> BaseMemoryStore:
    """A read-only store object on an existing store (no embedder, no background work)."""
    if isinstance(path, str):
        from langchain_tdai_recall.stores.postgres.store import (  # noqa: PLC0415
            PostgresMemoryStore,
        )

        return PostgresMemoryStore(path, read_only=True)  # raises when it holds no store
    from langchain_tdai_recall.store.store import MemoryStore  # noqa: PLC0415

    return MemoryStore(path, read_only=True)


def _recorded_embedder(
    path: Path | str | None, *, must_exist: bool = True
) -> StoredEmbedder | None:
    """The embedder that made most of the store's vectors (`None`: no vectors, or no store).

    Raises:
        TdaiRecallError: If the store cannot be opened, or (`must_exist`) a database URL holds
            no store.
    """
    if path is None:
        return None
    try:
        store = _raw_store(path)
    except TdaiRecallError:
        if must_exist or isinstance(path, Path):
            raise
        return None  # a database without a store yet (a writing command creates it)
    try:
        return store.recorded_embedder()
    finally:
        store.close()


def _chosen_embeddings(
    args: argparse.Namespace, recorded: StoredEmbedder | None, *, searches: bool
) -> Embeddings | Literal["default"] | None:
    """The embedder a command on an existing store uses.

    `--embeddings` when given. Otherwise the embedder the store's vectors were made with, when
    it can be rebuilt offline (the bundled one, the test hash embedder); keyword-only when it
    cannot (an application's hosted embedder: rebuilding it would need its settings and
    credentials, and another embedder would have to re-embed the whole store); the bundled one
    for a store that holds no vectors yet.
    """
    from langchain_tdai_recall.embeddings import (  # noqa: PLC0415 - keeps --help fast
        embedder_from_identity,
        embedder_identity,
        resolve_embeddings,
    )

    if args.embeddings is not None:
        chosen = _embeddings(args.embeddings)
        if searches and recorded is not None and chosen is not None:
            built = resolve_embeddings(chosen)
            if built is not None and embedder_identity(built) != recorded.identity:
                _note(
                    args,
                    f"the store's vectors were made by {recorded.identity}, not by "
                    f"--embeddings {args.embeddings}: the vector search finds none of them and "
                    f"this read re-embeds nothing ('{PROG} reindex --embeddings "
                    f"{args.embeddings}' re-embeds the store)",
                )
            return built
        return chosen
    if recorded is None:
        return "default"
    rebuilt = embedder_from_identity(recorded.identity, recorded.dimension)
    if rebuilt is None and searches:
        _note(
            args,
            f"this store's vectors were made by {recorded.identity} ({recorded.dimension} "
            "dims), which cannot be rebuilt offline here, so this command searches by keyword "
            "only and re-embeds nothing; for vector search, open the store from Python with "
            "the application's embedder: TdaiMemory.open(path, embeddings=..., read_only=True)",
        )
    return rebuilt


def _note(args: argparse.Namespace, message: str) -> None:
    """One line on stderr (unless `-q`) about a read that cannot use the store's vectors.

    The library's own warnings about the same fact (no embedder; an index snapshot made with
    the store's embedder, not this one) are left out of this run's log output.
    """
    if args.quiet <= 0:
        print(f"{PROG}: note: {message}", file=sys.stderr)
    handler = getattr(args, "log_handler", None)
    if isinstance(handler, logging.Handler):
        handler.addFilter(_not_about_the_embedder)


_EMBEDDER_WARNINGS: Final = ("this memory store has no embedder", "ignoring the index snapshot")


def _not_about_the_embedder(record: logging.LogRecord) -> bool:
    """Log filter: drop the warnings that a `_note` already explained."""
    text = record.getMessage()
    return not (
        text.startswith(_EMBEDDER_WARNINGS)
        and ("snapshot" not in text or "tokenizer or embedder" in text)
    )


def _existing_store_path(args: argparse.Namespace) -> Path | str | None:
    """The path or URL of `--store` when a store exists there (or `None` for `:memory:`).

    Raises:
        _UsageError: If the path does not exist or holds no memory store.
    """
    path = _store_path(args)
    if isinstance(path, str):
        return path  # opening it (read-only first) raises when the database holds no store
    if path is not None and not (path / DB_FILENAME).is_file():
        what = "does not exist" if not path.exists() else "holds no memory store"
        msg = (
            f"{path} {what}; pass the directory of an existing store with --store (or "
            f"${STORE_ENV}), or create one with '{PROG} add', '{PROG} import-jsonl' or "
            f"'{PROG} import-upstream'"
        )
        raise _UsageError(msg)
    return path


def _warm_up(memory: TdaiMemory) -> None:
    """Load the embedder before a timed recall or search.

    A command-line call is a fresh process: the bundled embedder loads lazily, and loading it
    inside the recall would count against `embedding.query_timeout_ms` and could push the query
    onto the keyword-only fallback.
    """
    if memory.embeddings is None:
        return
    started = time.perf_counter()
    try:
        memory.embeddings.embed_query("warm-up")
    except Exception as exc:  # recall itself reports the failure and degrades
        logger.debug("embedder warm-up failed: %s", exc)
    logger.debug("embedder ready in %.0f ms", (time.perf_counter() - started) * 1000)


def _to_jsonable(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_jsonable(v) for v in value]
    return value


def _print_json(value: object) -> None:
    print(json.dumps(_to_jsonable(value), ensure_ascii=False, indent=2))


def _fmt_score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _rule(title: str) -> str:
    return f"── {title} " + "─" * max(3, 72 - len(title))


# --------------------------------------------------------------------------------------------
# Rendering shared by `recall` and `demo`


def _render_hits(hits: Sequence[MemoryHit]) -> list[str]:
    if not hits:
        return ["(no matching memories)"]
    lines = [f"{'#':>2}  {'score':>7}  {'keyword':>7}  {'vector':>7}  {'type':<11}  content"]
    for i, h in enumerate(hits, 1):
        tag = h.type + (f"|{h.scene_name}" if h.scene_name else "")
        lines.append(
            f"{i:>2}  {h.score:>7.4f}  {_fmt_score(h.keyword_score):>7}  "
            f"{_fmt_score(h.embedding_score):>7}  {h.type:<11}  "
            f"{_one_line(h.content, 70)}" + (f"  [{tag}]" if h.scene_name else "")
        )
    return lines


def _render_recall(result: RecallResult | None, *, show_system: bool = True) -> list[str]:
    if result is None:
        return ["recall returned nothing (disabled, timed out, or failed; see the log)"]
    timing = result.timings_ms.get("total")
    head = (
        f"strategy={result.strategy}  memories={len(result.memories)}  "
        f"truncated={result.truncated}  dropped={result.dropped}  "
        f"injected={result.injected_chars} chars"
        + (f"  time={timing:.1f} ms" if timing is not None else "")
        + (f"  error={result.error}" if result.error else "")
    )
    lines = [head]
    if result.memories:
        lines.append(f"{'#':>2}  {'score':>7}  {'keyword':>7}  {'vector':>7}  memory")
        for i, m in enumerate(result.memories, 1):
            tag = m.type + (f"|{m.scene_name}" if m.scene_name else "")
            lines.append(
                f"{i:>2}  {m.score:>7.4f}  {_fmt_score(m.keyword_score):>7}  "
                f"{_fmt_score(m.embedding_score):>7}  [{tag}] {_one_line(m.content, 60)}"
            )
    pinned = len(result.standing_rules) + len(result.pinned) + len(result.profile)
    if pinned:
        blocks = ", ".join(
            f"<{tag}>"
            for tag, held in (
                (STANDING_RULES_TAG, result.standing_rules),
                (KEY_MEMORIES_TAG, result.pinned),
                (USER_PROFILE_TAG, result.profile),
            )
            if held
        )
        lines.append(
            f"+ {pinned} {'memory' if pinned == 1 else 'memories'} pinned in the system context "
            f"({blocks}): in every turn, whatever the score"
        )
    lines.append(_rule("prepend_context (put before the user's message)"))
    if result.prepend_context:
        lines.append(result.prepend_context)
    elif result.strategy == "skipped":
        lines.append("(none: the text is too short to search)")
    elif pinned:
        lines.append(
            f"(none: no memory passed the score threshold for this message; {pinned} "
            f"{'is' if pinned == 1 else 'are'} pinned in the system context)"
        )
    else:
        lines.append("(none: no memory passed the score threshold)")
    if show_system:
        lines.append(_rule("append_system_context (appended to the system message)"))
        lines.append(result.append_system_context or "(none)")
    return lines


def _recall_json(result: RecallResult | None) -> Any:
    if result is None:
        return None
    data = _to_jsonable(result)
    data["injected_chars"] = result.injected_chars
    return data


# --------------------------------------------------------------------------------------------
# Commands


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
        raise _UsageError(msg)


def _cmd_add(args: argparse.Namespace) -> int:
    _check_activity_order(args.start, args.end)
    with _open(args, _store_path(args)) as memory:
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
        _print_json(record)
    else:
        tag = record.type + (f"|{record.scene_name}" if record.scene_name else "")
        print(f"stored {record.id} [{tag}] {_one_line(record.content)}")
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    with _open_existing(args, searches=True) as memory:
        _warm_up(memory)
        if args.messages:
            msgs: list[MessageHit] = memory.search_conversations(
                args.query,
                limit=args.limit,
                session_key=args.session,
                user_id=args.user,
                agent_id=args.agent,
            )
            if args.json:
                _print_json(msgs)
                return 0
            if not msgs:
                print("(no matching messages)")
            for i, m in enumerate(msgs, 1):
                print(
                    f"{i:>2}  {m.score:>7.4f}  {m.role:<9}  {m.session_key}  {m.recorded_at}\n"
                    f"    {_one_line(m.content, 96)}"
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
        _print_json(hits)
    else:
        print("\n".join(_render_hits(hits)))
    return 0


def _cmd_recall(args: argparse.Namespace) -> int:
    with _open_existing(args, searches=True) as memory:
        _warm_up(memory)
        result = memory.recall(
            args.text, session_key=args.session, user_id=args.user, agent_id=args.agent
        )
    if args.json:
        _print_json(_recall_json(result))
    else:
        print("\n".join(_render_recall(result)))
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    with _open(args, _store_path(args)) as memory:
        started = time.perf_counter()
        report = memory.import_upstream(
            args.dir, show_progress=args.progress, user_id=args.user, agent_id=args.agent
        )
        elapsed = time.perf_counter() - started
    if args.json:
        _print_json(report)
    else:
        print("\n".join(_render_import(report, elapsed, verbose=args.verbose > 0)))
    return 0


def _render_import(report: ImportReport, seconds: float, *, verbose: bool) -> list[str]:
    lines = [
        f"imported {report.source} in {seconds:.1f} s",
        f"  memories written:  {report.memories}",
        f"  messages written:  {report.messages}",
        f"  scenes written:    {report.scenes}",
        f"  persona written:   {'yes' if report.persona else 'no'}",
        f"  unchanged:         {report.unchanged}",
        f"  skipped:           {len(report.skipped)}",
    ]
    shown = report.skipped if verbose else report.skipped[:MAX_SKIPPED_SHOWN]
    lines.extend(f"    - {item}" for item in shown)
    if len(shown) < len(report.skipped):
        lines.append(f"    … {len(report.skipped) - len(shown)} more (use -v or --json)")
    return lines


def _cmd_stats(args: argparse.Namespace) -> int:
    memory, recorded = _open_recorded(args, write=False, searches=False)
    with memory:
        stats = (
            memory.stats(user_id=args.user, agent_id=args.agent)
            if (args.user or args.agent)
            else memory.stats()
        )
    if args.json:
        _print_json(stats)
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


def _cmd_reindex(args: argparse.Namespace) -> int:
    from langchain_tdai_recall.embeddings import (  # noqa: PLC0415
        embedder_identity,
        resolve_embeddings,
    )
    from langchain_tdai_recall.memory import TdaiMemory  # noqa: PLC0415

    path = _existing_store_path(args)
    recorded = _recorded_embedder(path)
    embeddings = resolve_embeddings(_chosen_embeddings(args, recorded, searches=False))
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
        raise _UsageError(msg)
    before = _pending_vectors(path, embedder_identity(embeddings))
    with TdaiMemory.open(
        path, embeddings=embeddings, config=args.config, show_progress=args.progress
    ) as memory:
        memory.reindex(show_progress=args.progress)  # the background upkeep may share the work
        stats = memory.stats()
    done = max(before - stats.pending_vectors, 0)
    if args.json:
        _print_json(
            {"embedded": done, "pending": stats.pending_vectors, "embedder": stats.embedder}
        )
    else:
        print(f"embedded {done} rows with {stats.embedder}; {stats.pending_vectors} pending")
    return 0


def _pending_vectors(path: Path | str | None, identity: str) -> int:
    """Rows of the store whose vector `identity` has not made (missing or another's)."""
    if path is None:
        return 0
    store = _raw_store(path)
    try:
        store.bind(tokenizer=store.tokenizer, embedder_id=identity)
        return store.pending_vector_count()
    finally:
        store.close()


def _cmd_migrate(args: argparse.Namespace) -> int:
    from langchain_tdai_recall.stores.migrate import copy_store  # noqa: PLC0415

    source = _open_backend(args.source, read_only=True, what="--from")
    try:
        target = _open_backend(args.target, read_only=False, what="--to")
        try:
            report = copy_store(source, target, page=args.page, show_progress=args.progress)
        finally:
            target.close()
    finally:
        source.close()
    if args.json:
        _print_json({k: v for k, v in dataclasses.asdict(report).items() if k != "per_scope"})
        return 0
    print(f"copied {source.location} -> {target.location}")
    print(
        f"scopes: {report.scopes}   memories: {report.memories}   messages: {report.messages}   "
        f"personas: {report.personas}   scenes: {report.scenes}   formation state: "
        f"{report.formation}   already there: {report.skipped}"
    )
    return 0


def _open_backend(raw: str, *, read_only: bool, what: str) -> BaseMemoryStore:
    """A store object for `migrate` (no embedder, no background work)."""
    where = _location(raw)
    if where is None:
        msg = f"{what} needs a directory or a postgresql:// URL, not {IN_MEMORY}"
        raise _UsageError(msg)
    if isinstance(where, str):
        from langchain_tdai_recall.stores.postgres.store import (  # noqa: PLC0415
            PostgresMemoryStore,
        )

        return PostgresMemoryStore(where, read_only=read_only, timeout_ms=120_000, pool_size=2)
    from langchain_tdai_recall.store.store import MemoryStore  # noqa: PLC0415

    if read_only and not (where / DB_FILENAME).is_file():
        msg = f"{what} {where} holds no memory store; pass the directory of an existing store"
        raise _UsageError(msg)
    return MemoryStore(where, read_only=read_only)


def _scope_text(memory: TdaiMemory, args: argparse.Namespace) -> str:
    scope = memory.scope(args.user, args.agent)
    user, agent = scope.user_id, scope.agent_id
    return f"user {user!r}" + (f", agent {agent!r}" if agent else "")


def _record_tag(record: MemoryRecord) -> str:
    return record.type + (f"|{record.scene_name}" if record.scene_name else "")


def _cmd_list(args: argparse.Namespace) -> int:
    with _open_existing(args) as memory:
        records = memory.list_memories(
            user_id=args.user,
            agent_id=args.agent,
            type=args.type,
            limit=args.limit,
            offset=args.offset,
        )
    if args.json:
        _print_json(records)
        return 0
    if not records:
        print("(no memories)")
    for record in records:
        print(
            f"{record.id}  [{_record_tag(record)}]  p{record.priority}  "
            f"{_one_line(record.content, 80)}"
        )
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    with _open_existing(args) as memory:
        record = memory.get_memory(args.id, user_id=args.user, agent_id=args.agent)
        if record is None:
            msg = f"no memory {args.id!r} for {_scope_text(memory, args)}; see '{PROG} list'"
            raise _UsageError(msg)
    if args.json:
        _print_json(record)
        return 0
    for name, value in _to_jsonable(record).items():
        if name == "content":
            continue
        if value not in (None, "", []):
            print(f"{name + ':':<21}{value}")
    print(f"\n{record.content}")
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    deleted: list[str] = []
    missing: list[str] = []
    with _open_existing(args, write=True) as memory:
        for memory_id in dict.fromkeys(args.ids):
            found = memory.delete_memory(memory_id, user_id=args.user, agent_id=args.agent)
            (deleted if found else missing).append(memory_id)
        scope = _scope_text(memory, args)
    if args.json:
        _print_json({"deleted": deleted, "missing": missing})
    else:
        for memory_id in deleted:
            print(f"deleted {memory_id}")
    if missing:
        rest = "the other ids were deleted" if deleted else "nothing was deleted"
        msg = f"no memory {', '.join(repr(m) for m in missing)} for {scope}; {rest}"
        raise _UsageError(msg)
    return 0


# --------------------------------------------------------------------------------------------
# export / import-jsonl (the format is described in `_jsonl`)


def _export_lines(
    memory: TdaiMemory, args: argparse.Namespace, counts: dict[str, int]
) -> Iterator[str]:
    from langchain_tdai_recall import _jsonl  # noqa: PLC0415
    from langchain_tdai_recall._progress import progress  # noqa: PLC0415

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


def _cmd_export(args: argparse.Namespace) -> int:
    counts = {"memories": 0, "personas": 0, "scenes": 0}
    to_stdout = args.output == "-"
    with _open_existing(args) as memory:
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
        _print_json({"output": str(target), **counts})
    else:
        print(
            f"exported {counts['memories']} memories, {counts['personas']} personas and "
            f"{counts['scenes']} scenes to {target}"
        )
    return 0


def _read_items(name: str) -> list[Item]:
    from langchain_tdai_recall._jsonl import parse_lines  # noqa: PLC0415

    if name == "-":
        return list(parse_lines(sys.stdin))
    path = Path(name).expanduser()
    if not path.is_file():
        msg = f"{path} {'is not a file' if path.exists() else 'does not exist'}"
        raise _UsageError(msg)
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
    from langchain_tdai_recall._jsonl import JsonlError  # noqa: PLC0415
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


def _cmd_import_jsonl(args: argparse.Namespace) -> int:
    from langchain_tdai_recall._progress import progress  # noqa: PLC0415

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
        _open(args, _store_path(args)) as memory,
        progress(len(items), desc="importing", enabled=args.progress) as bar,
    ):
        for batch in _batches(items, scope):
            for name, count in _write_batch(memory, batch, scope(batch[0])).items():
                counts[name] += count
            bar.update(len(batch))
    elapsed = time.perf_counter() - started
    memories = counts["memories_new"] + counts["memories_updated"]
    if args.json:
        _print_json({"source": args.file, "lines": len(items), "memories": memories, **counts})
    else:
        print(
            f"imported {len(items)} lines from {args.file} in {elapsed:.1f} s: "
            f"{counts['memories_new']} new and {counts['memories_updated']} updated memories, "
            f"{counts['messages']} new messages, {counts['personas']} personas, "
            f"{counts['scenes']} scenes; {counts['unchanged']} lines already stored as they are"
        )
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    from langchain_tdai_recall.config import TdaiConfig  # noqa: PLC0415

    if args.what == "schema":
        data = TdaiConfig.model_json_schema(by_alias=args.camel)
    else:
        cfg = TdaiConfig.coerce(args.config) if args.config else TdaiConfig()
        data = cfg.to_dict(by_alias=args.camel)
    print(json.dumps(data, ensure_ascii=False, indent=2))
    return 0


# --------------------------------------------------------------------------------------------
# extract (memory formation)


def _add_extract_command(command: Callable[..., Any]) -> None:
    p = command(
        "extract",
        _cmd_extract,
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


def _cmd_extract(args: argparse.Namespace) -> int:
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
    path = _existing_store_path(args)
    with TdaiMemory.open(
        path,
        embeddings=_chosen_embeddings(args, _recorded_embedder(path), searches=False),
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
        _print_json(report)
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
        for error in report.errors:
            print(f"  failed: {error}")
    return 0 if report.ok else 1


# --------------------------------------------------------------------------------------------
# Demo


@dataclasses.dataclass(frozen=True, slots=True)
class _DemoConversation:
    """One sample user of the demo: memories, persona, scenes and the turns recalled for."""

    title: str
    user_suffix: str
    """Appended to the demo's user id (the English sample uses the user id as given)."""
    memories: tuple[dict[str, Any], ...]
    persona: str
    scenes: tuple[tuple[str, str, str], ...]
    turns: tuple[str, ...]


_DEMO_ENGLISH: Final = _DemoConversation(
    title="An English conversation",
    user_suffix="",
    memories=(
        {
            "content": "Works as a backend engineer in Berlin, mostly Python and Go.",
            "type": "persona",
            "priority": 80,
        },
        {"content": "Is vegetarian: no meat and no fish.", "type": "persona", "priority": 90},
        {
            "content": "Plans a trip to Kyoto in late May to see temples and rock gardens.",
            "type": "episodic",
            "scene_name": "Kyoto trip",
            "activity_start_time": "2026-05-20",
            "activity_end_time": "2026-05-27",
        },
        {
            "content": "For technical questions: give the conclusion first, then the code.",
            "type": "instruction",
            "priority": 85,
        },
        {
            "content": "Moved the order service from Flask to FastAPI last week.",
            "type": "episodic",
            "scene_name": "work",
            "timestamp": "2026-04-14",
        },
        {"content": "Daughter Mia is allergic to peanuts.", "type": "persona", "priority": 95},
        {
            "content": "Ran the Berlin half marathon in 1:52.",
            "type": "episodic",
            "activity_start_time": "2026-04-05",
        },
        {"content": "Always give distances and weights in metric units.", "type": "instruction"},
    ),
    persona="""# User profile

- Sam, a backend engineer in Berlin (Python, Go).
- Vegetarian; daughter Mia has a peanut allergy.
- Enjoys running and travelling.""",
    scenes=(
        (
            "Kyoto trip",
            "Late May in Kyoto: temples, gardens, vegetarian food",
            "## Kyoto trip\n\n- 2026-05-20 to 05-27\n- Kiyomizu-dera, Ryoan-ji\n"
            "- Needs vegetarian restaurants",
        ),
        (
            "running",
            "Training log and races",
            "## Running\n\n- Berlin half marathon 1:52 (April)\n- Next goal: sub-1:50",
        ),
    ),
    turns=(
        "Where should we have dinner in Kyoto in May?",
        "Can Mia eat peanut snacks?",
        "What should I pack for my Kyoto trip?",
        "What should I watch out for after moving the order service to FastAPI?",
    ),
)

_DEMO_CHINESE: Final = _DemoConversation(
    title="A Chinese conversation (中文对话)",
    user_suffix="-zh",
    memories=(
        {
            "content": "用户叫李雷，在上海做后端工程师，主要写 Python 和 Go。",
            "type": "persona",
            "priority": 80,
        },
        {"content": "用户吃素，不吃肉也不吃海鲜。", "type": "persona", "priority": 90},
        {
            "content": "用户计划五月下旬去京都旅行，想看寺庙和枯山水庭园。",
            "type": "episodic",
            "scene_name": "京都旅行",
            "activity_start_time": "2026-05-20",
            "activity_end_time": "2026-05-27",
        },
        {
            "content": "回答技术问题时先给结论，再给代码示例。",
            "type": "instruction",
            "priority": 85,
        },
        {
            "content": "用户上周把订单服务从 Flask 迁移到了 FastAPI。",
            "type": "episodic",
            "scene_name": "工作项目",
            "timestamp": "2026-04-14",
        },
        {"content": "用户的女儿 Mia 对花生过敏。", "type": "persona", "priority": 95},
    ),
    persona="""# 用户画像

- 李雷，上海的后端工程师（Python、Go）。
- 素食者；女儿 Mia 对花生过敏。
- 喜欢跑步和旅行。""",
    scenes=(
        (
            "京都旅行",
            "五月下旬京都之行：寺庙、庭园、素食",
            "## 京都旅行\n\n- 2026-05-20 至 05-27\n- 想去清水寺、龙安寺\n- 需要素食餐厅",
        ),
    ),
    turns=(
        "我五月去京都，晚饭去哪吃比较好？",
        "Mia 能吃花生零食吗？",
        "订单服务迁移到 FastAPI 之后要注意什么？",
        "好",
    ),
)

_DEMO_CONVERSATIONS: Final = (_DEMO_ENGLISH, _DEMO_CHINESE)
"""In the order the demo shows them: English first."""

_DEMO_AGENT_TURN: Final = "Plan a dinner for Mia and me."
_DEMO_SEARCH: Final = "Mia allergy"
_DEMO_ANSWER: Final = (
    "A vegetarian bowl for you and a peanut-free pasta for Mia: both fit what I remember."
)


def _demo_scope(memory: TdaiMemory, scope: Scope, sample: _DemoConversation) -> Scope:
    if not sample.user_suffix:
        return scope
    return memory.scope(scope.user_id + sample.user_suffix, scope.agent_id)


def _demo_fill(memory: TdaiMemory, scope: Scope, sample: _DemoConversation) -> None:
    memory.add_memories(
        list(sample.memories), show_progress=False, user_id=scope.user_id, agent_id=scope.agent_id
    )
    memory.set_persona(sample.persona, user_id=scope.user_id, agent_id=scope.agent_id)
    for name, summary, body in sample.scenes:
        memory.upsert_scene(
            name, summary=summary, body=body, user_id=scope.user_id, agent_id=scope.agent_id
        )


def _demo_agent_turn(memory: TdaiMemory, scope: Scope) -> dict[str, Any]:
    """One scripted `create_agent` turn; returns what the model saw on each call."""
    from langchain.agents import create_agent  # noqa: PLC0415
    from langchain_core.messages import HumanMessage  # noqa: PLC0415

    from langchain_tdai_recall.testing import FakeToolCallingChatModel  # noqa: PLC0415

    model = FakeToolCallingChatModel(
        script=[[{"name": "tdai_memory_search", "args": {"query": _DEMO_SEARCH}}], _DEMO_ANSWER]
    )
    agent = create_agent(
        model, system_prompt="You are a helpful assistant.", middleware=[memory.middleware()]
    )
    state = agent.invoke(
        {"messages": [HumanMessage(_DEMO_AGENT_TURN)]},
        config={"configurable": {"user_id": scope.user_id, "agent_id": scope.agent_id}},
    )
    calls = [
        [{"role": m.type, "content": _message_text(m)} for m in request]
        for request in model.requests
    ]
    tool_results = [_message_text(m) for m in state["messages"] if getattr(m, "type", "") == "tool"]
    return {
        "user": _DEMO_AGENT_TURN,
        "model_calls": calls,
        "tool_results": tool_results,
        "answer": _message_text(state["messages"][-1]),
    }


def _message_text(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        text = content
    else:
        text = "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content)
    for call in getattr(message, "tool_calls", None) or []:
        text += f"\n→ calls {call['name']}({json.dumps(call['args'], ensure_ascii=False)})"
    return text.strip()


def _indent(lines: Sequence[str], prefix: str = "   ") -> list[str]:
    """Indent every line, including the lines inside multi-line entries."""
    return [prefix + part for line in lines for part in line.split("\n")]


def _render_agent(agent: Mapping[str, Any]) -> list[str]:
    lines = [f"▶ user: {agent['user']}"]
    shown = 0
    for i, call in enumerate(agent["model_calls"], 1):
        lines.append(_rule(f"model call {i}: what the model saw"))
        if shown:
            lines.append(f"(the {shown} messages of call {i - 1}, then:)")
        for msg in call[shown:]:
            lines += [f"[{msg['role']}]", msg["content"]]
        shown = len(call)
    lines += [_rule("final answer"), agent["answer"]]
    return lines


def _cmd_demo(args: argparse.Namespace) -> int:
    """Offline tour. Uses an in-memory store unless `--store` is given explicitly."""
    started = time.perf_counter()
    path = None if args.store is None else _store_path(args)
    out: dict[str, Any] = {"turns": [], "agent": None}
    with _open(args, path) as memory:
        scope = memory.scope(args.user, args.agent)  # validated; the default user when omitted
        scopes = [_demo_scope(memory, scope, sample) for sample in _DEMO_CONVERSATIONS]
        for sample, sample_scope in zip(_DEMO_CONVERSATIONS, scopes, strict=True):
            _demo_fill(memory, sample_scope, sample)
        # Vectors are computed in the background: wait for them, so that the scores below are
        # the ones users get (right after a write, recall has the keyword leg only).
        memory.flush(show_progress=False)
        embedder = memory.stats().embedder
        text: list[str] = [
            f"{PROG} demo: {'in-memory store' if path is None else path}, "
            f"embedder {embedder or 'none (keyword-only)'}",
            "(tdai: TencentDB Agent Memory, whose layered memory and recall this package brings "
            "to LangChain)",
        ]
        for number, (sample, sample_scope) in enumerate(
            zip(_DEMO_CONVERSATIONS, scopes, strict=True), 1
        ):
            text += ["", f"{number}. {sample.title}: user {sample_scope.user_id!r}"]
            text += _demo_conversation(memory, sample, sample_scope, out["turns"])
        if not args.no_agent:
            agent = _demo_agent_turn(memory, scope)
            out["agent"] = agent
            text += [
                "",
                f"{len(_DEMO_CONVERSATIONS) + 1}. One agent turn: "
                "create_agent(model, middleware=[memory.middleware()]), with a scripted fake model",
                *_render_agent(agent),
            ]
    elapsed = time.perf_counter() - started
    if args.json:
        out["seconds"] = round(elapsed, 3)
        _print_json(out)
        return 0
    text += [
        "",
        f"Done in {elapsed:.1f} s. Next: '{PROG} --help', '{PROG} add \"...\"' then "
        f"'{PROG} recall \"...\"' (store: ./{DEFAULT_STORE}), and the notebooks in notebooks/.",
    ]
    print("\n".join(text))
    return 0


def _demo_conversation(
    memory: TdaiMemory, sample: _DemoConversation, scope: Scope, turns: list[dict[str, Any]]
) -> list[str]:
    """The demo's text for one sample user; appends each turn's JSON to `turns`."""
    stats = memory.stats(user_id=scope.user_id, agent_id=scope.agent_id)
    text = [
        f"   The sample memory: {stats.memories} memories (L1), "
        f"{'a persona (L3)' if stats.personas else 'no persona'}, {stats.scenes} "
        f"scene{'' if stats.scenes == 1 else 's'} (L2)",
    ]
    text += [f"   - [{m['type']}] {m['content']}" for m in sample.memories]
    text += ["", "   Recall for a few user turns: what would be injected, and the scores"]
    systems: list[str | None] = []
    for turn in sample.turns:
        result = memory.recall(turn, user_id=scope.user_id, agent_id=scope.agent_id)
        turns.append({"user": turn, "user_id": scope.user_id, "recall": _recall_json(result)})
        systems.append(result.append_system_context if result else None)
        text += ["", f"▶ user: {turn}"]
        text += _indent(_render_recall(result, show_system=False))
    same = len(set(systems)) == 1
    text += [
        "",
        _rule(
            "append_system_context: "
            + ("byte-identical in every turn above" if same else "differs between turns")
        ),
        systems[0] or "(none)",
    ]
    return text
