"""The entry point of `tdai-recall`.

Parse, set up logging, run one command, and turn every failure into one line on stderr and an
exit status.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Final

from langchain_tdai_recall.cli._base import PROG, UsageError
from langchain_tdai_recall.cli.parser import build_parser
from langchain_tdai_recall.errors import TdaiRecallError

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

__all__ = ["main"]

logger = logging.getLogger(__name__)

EXIT_BROKEN_PIPE: Final = 141
"""Exit status when standard output is closed by its reader (128 + SIGPIPE)."""


_LOGGER_NAME: Final = "langchain_tdai_recall"


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
        args, extra = parser.parse_known_args(argv)
        if extra:
            # argparse gives `messages`' optional ids their (empty) value with the action, so
            # ids after an option (`messages delete --user u ID`) come back unparsed
            if getattr(args, "command", None) == "messages" and not any(
                e.startswith("-") for e in extra
            ):
                args.ids = [*args.ids, *extra]
            else:
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except UsageError as exc:
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
    except (TdaiRecallError, UsageError) as exc:
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
