"""SQL written once for the two SQL backends (the local store's SQLite and PostgreSQL).

`dialect` lists where the two differ; `history` keeps and reads memory versions; `formation` is
memory formation's state and commit. The backends (`stores.local`, `stores.postgres`) spell them
with their own `Dialect` and add only the SQL that really differs.
"""
