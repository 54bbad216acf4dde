"""Names every part of the `tdai-recall` command line shares.

The program name, the store defaults, and the usage error that the entry point reports as one
line.

It sits below the parser and the commands so that both can use these names without importing
each other.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import argparse

__all__ = ["DEFAULT_STORE", "IN_MEMORY", "PROG", "STORE_ENV", "UsageError", "confirm"]

PROG: Final = "tdai-recall"


STORE_ENV: Final = "TDAI_RECALL_STORE"
"""Environment variable naming the default store directory."""


DEFAULT_STORE: Final = "tdai-store"
"""Store directory used when neither `--store` nor `$TDAI_RECALL_STORE` is given (relative to
the working directory)."""


IN_MEMORY: Final = ":memory:"
"""`--store` value for a throw-away in-memory store."""


class UsageError(Exception):
    """A command-line mistake, reported like any other error (one line, status 1)."""


def confirm(args: argparse.Namespace, question: str, *, command: str) -> bool:
    """Ask on a terminal unless `--yes`; without a terminal and without `--yes`, refuse.

    A script that forgot the flag must not erase anything (the convention of `apt-get -y` and
    `terraform -auto-approve`): with standard input not a terminal there is nobody to ask, so
    the command stops with a usage error naming the flag.

    Raises:
        UsageError: Standard input is not a terminal and `--yes` was not given.
    """
    if args.yes:
        return True
    if not sys.stdin.isatty():
        msg = (
            f"refusing to erase without confirmation: standard input is not a terminal; "
            f"pass --yes (-y) to run '{command}' from a script"
        )
        raise UsageError(msg)
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")
