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

The modules, from the entry point down: `app` (parse, log, run, exit status), `parser` (the
options and subcommands), `commands`, `transfer` (export and the two imports) and `demo` (one
function per command), `render` (text and JSON output), `opening` (which store and embedder a
command opens, always through `TdaiMemory`), `_base` (names they all share).
"""

from __future__ import annotations

from langchain_tdai_recall.cli._base import DEFAULT_STORE, STORE_ENV
from langchain_tdai_recall.cli.app import main
from langchain_tdai_recall.cli.parser import build_parser
from langchain_tdai_recall.cli.render import render_recall as _render_recall  # noqa: F401 - kept importable

__all__ = ["DEFAULT_STORE", "STORE_ENV", "build_parser", "main"]
