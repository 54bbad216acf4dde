"""The parts `TdaiMemory` (`memory.py`) delegates to, each about one step of a store's life.

- `backend`: which store a `path` opens (a directory, `None`, a `postgresql://` URL, an object).
- `lifecycle`: the background parts of an open memory and their order at shutdown.
- `forget`: a scope's erasure, after the background work that could write it again is drained.

Only `memory.py` imports this package.
"""
