"""The base of every configuration model: one set of rules, one error type.

Configuration models are frozen pydantic models with snake_case fields and the original
plugin's camelCase keys as aliases; an unknown key is an error, and every validation failure is
a `ConfigError` that names each field, what is wrong and the value (cut to 80 code points). The
recall sections (`config.py`) and memory formation's sections (`_settings/formation.py`, handed
on by `formation.config`) both build on `ConfigModel`.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from langchain_tdai_recall._exchange.records import shown
from langchain_tdai_recall.errors import ConfigError

__all__ = ["ConfigModel", "config_error"]


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    """(dotted field, what is wrong) pairs; nested models' problems get their full path."""
    out: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False):
        loc = ".".join(_key(p) for p in err["loc"])
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, ConfigError) and inner.problems:
            out += [(".".join(x for x in (loc, sub) if x), text) for sub, text in inner.problems]
        elif err["type"] == "extra_forbidden":
            out.append((loc, f"unknown key (value {shown(err['input'])}); check the spelling"))
        else:
            out.append((loc, f"{err['msg']} (got {shown(err['input'])})"))
    return out


def _key(part: object) -> str:
    """One step of a field path for a message (a key may be any length: cut it)."""
    text = str(part)
    return text if len(text) <= 80 else f"{text[:79]}…"


def config_error(exc: ValidationError, *, source: str | None = None) -> ConfigError:
    """A `ConfigError` listing every problem of `exc` (`source`: the file it came from)."""
    problems = _problems(exc)
    where = f" in {source}" if source else ""
    text = "; ".join(f"{loc or '(root)'}: {what}" for loc, what in problems)
    error = ConfigError(f"invalid configuration{where}: {text}")
    error.problems = problems
    return error


class ConfigModel(BaseModel):
    """Frozen, strict-keyed base: snake_case names, camelCase aliases, errors as `ConfigError`."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
    )

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise config_error(exc) from exc

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Validate a dictionary (snake_case or upstream camelCase keys)."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise config_error(exc) from exc

    def to_dict(self, *, by_alias: bool = False) -> dict[str, Any]:
        """Plain JSON-compatible dictionary; `by_alias=True` writes camelCase keys."""
        return self.model_dump(mode="json", by_alias=by_alias)
