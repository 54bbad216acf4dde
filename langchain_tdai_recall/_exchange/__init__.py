"""What crosses the package's edge as data: validation of what callers hand in, and JSON Lines.

- `records`: ids, scopes, times, L1 records and L0 messages, validated and normalised once for
  the facade, the turn capture and the importers.
- `metadata`: memory metadata, expiry and search filters.
- `jsonl`: the JSON Lines format of `tdai-recall export` and `import-jsonl`.
"""
