"""The embedding side of the store, below the public `embeddings` module.

- `upkeep`: batch embedding of stored rows and the upkeep that keeps every row's vector current
  (deferred vectors, re-embedding after an embedder or dimension change).
- `calibration`: the fixed post-processing map of the bundled embedder's vectors.
- `hashing`: `HashEmbeddings`, the deterministic offline embedder (`testing.HashEmbeddings`).
"""
