"""`python -m langchain_tdai_recall ...` runs the `tdai-recall` command line."""

from langchain_tdai_recall.cli import main

raise SystemExit(main())
