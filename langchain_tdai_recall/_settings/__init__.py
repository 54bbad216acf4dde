"""The rules of every configuration model, below `config.py`.

- `base`: `ConfigModel` (frozen, snake_case fields with the original plugin's camelCase keys as
  aliases, unknown keys refused) and the one translation of validation errors to `ConfigError`.
- `formation`: memory formation's sections (`extraction`, `pipeline`, `persona`), defined here so
  both `config.py` and `formation/` can use them (`formation.config` re-exports them).
"""
