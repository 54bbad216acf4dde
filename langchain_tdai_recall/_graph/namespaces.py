"""Namespaces of the LangGraph store: the template that names the scope, and LangGraph's rules.

A store has one namespace *template*: literals and the placeholders `"{user_id}"` (required,
once) and `"{agent_id}"` (optional, once). A namespace *fits* the template when it is at least
as long, has the template's literals at their places and valid ids at the placeholders; the
elements past the template are free, so `("memories", "alice")` and `("memories", "alice",
"work", "2026")` both fit `("memories", "{user_id}")`. The placeholders name the scope
(`Scope(user_id, agent_id)`, or the store's fixed agent); every element, literal or not, is
part of the item's identity.

Labels follow LangGraph's rules (`InvalidNamespaceError`): strings, not empty, without `.` or
NUL. A namespace or prefix this store cannot use raises `NamespaceError`, which is both a
`ScopeError` and LangGraph's `InvalidNamespaceError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from langgraph.store.base import InvalidNamespaceError, MatchCondition

from langchain_tdai_recall._exchange.records import check_id
from langchain_tdai_recall.errors import ConfigError, ScopeError, TdaiRecallError
from langchain_tdai_recall.types import Scope

__all__ = [
    "AGENT",
    "DEFAULT_NAMESPACE",
    "USER",
    "NamespaceError",
    "NamespaceTemplate",
    "check_labels",
    "condition_matches",
]

USER: Final = "{user_id}"
AGENT: Final = "{agent_id}"
DEFAULT_NAMESPACE: Final = ("memories", USER)
"""The default namespace template, as in LangMem's examples."""


class NamespaceError(ScopeError, InvalidNamespaceError):
    """A namespace the store cannot use: a bad label, or one that does not fit the template."""


def check_labels(namespace: object, what: str) -> tuple[str, ...]:
    """A namespace (or prefix, or listing path) as a tuple, checked with LangGraph's label rules.

    Raises:
        NamespaceError: If it is not a tuple or list of non-empty strings without `.` or NUL.
    """
    if not isinstance(namespace, tuple | list):
        msg = f"{what} must be a tuple of strings, got {type(namespace).__name__} {namespace!r:.60}"
        raise NamespaceError(msg)
    for label in namespace:
        problem = None
        if not isinstance(label, str):
            problem = f"is a {type(label).__name__}, not a string"
        elif not label:
            problem = "is empty"
        elif "." in label:
            problem = "contains a period ('.')"
        elif "\x00" in label:
            problem = "contains a NUL character"
        if problem is not None:
            msg = f"the label {label!r:.40} of the {what} {tuple(namespace)!r:.80} {problem}"
            raise NamespaceError(msg)
    return tuple(namespace)


def condition_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """Whether a namespace matches a listing condition (`"*"` matches any one label)."""
    given: object = condition.path
    path = (given,) if isinstance(given, str) else tuple(condition.path)
    if len(path) > len(namespace):
        return False
    if not path:
        return True
    part = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(p in ("*", n) for p, n in zip(path, part, strict=True))


class NamespaceTemplate:
    """Which elements of a namespace name the scope; see the module docstring.

    Raises:
        ConfigError: If the template is not a non-empty tuple of labels with `"{user_id}"`
            exactly once and `"{agent_id}"` at most once (and then no fixed `agent_id`).
    """

    def __init__(self, template: Sequence[str], *, agent_id: str | None = None) -> None:
        parts = tuple(template) if isinstance(template, list | tuple) else None
        unknown = [
            p
            for p in parts or ()
            if isinstance(p, str) and ("{" in p or "}" in p) and p not in (USER, AGENT)
        ]
        if unknown:  # e.g. LangMem's '{langgraph_user_id}': never kept as a literal label
            msg = (
                f"namespace {template!r:.80}: {unknown[0]!r:.40} is not a placeholder of this "
                f"store; use '{USER}' (required) and '{AGENT}' as whole labels, and no braces in "
                "literal labels"
            )
            raise ConfigError(msg)
        if (
            not parts
            or not all(isinstance(p, str) and p and "." not in p for p in parts)
            or parts.count(USER) != 1
            or parts.count(AGENT) > 1
        ):
            msg = (
                f"namespace must be a tuple of non-empty strings without '.' naming '{USER}' "
                f"once (and '{AGENT}' at most once), e.g. ('memories', '{USER}'); got "
                f"{template!r:.80}"
            )
            raise ConfigError(msg)
        if AGENT in parts and agent_id is not None:
            msg = (
                f"agent_id={agent_id!r} and a namespace with '{AGENT}' both name the agent; "
                "pass only one"
            )
            raise ConfigError(msg)
        if agent_id is not None:
            check_id("agent_id", agent_id)
        self.parts: Final = parts
        self.agent_id: Final = agent_id
        self._user = parts.index(USER)
        self._agent = parts.index(AGENT) if AGENT in parts else None
        self.scope_depth: Final = max(self._user, -1 if self._agent is None else self._agent) + 1
        """How many leading elements a prefix needs to name one scope."""

    def __repr__(self) -> str:
        return repr(self.parts)

    def _literals_match(self, namespace: tuple[str, ...]) -> bool:
        return all(
            p in (USER, AGENT) or p == n for p, n in zip(self.parts, namespace, strict=False)
        )

    def _ids_valid(self, namespace: tuple[str, ...]) -> bool:
        for at in (self._user, self._agent):
            if at is not None and at < len(namespace):
                try:
                    check_id("user_id", namespace[at])
                except TdaiRecallError:
                    return False
        return True

    def fits(self, namespace: tuple[str, ...]) -> bool:
        """Whether an item may live in `namespace` (see the module docstring)."""
        return (
            len(namespace) >= len(self.parts)
            and self._literals_match(namespace)
            and self._ids_valid(namespace)
        )

    def _outside(self, namespace: tuple[str, ...], what: str) -> NamespaceError:
        msg = (
            f"the {what} {namespace!r:.100} does not fit this store's namespace template "
            f"{self.parts!r}: it needs the literals of the template at their places and a "
            f"valid id (no control characters) at each placeholder, e.g. "
            f"{self.example()!r} (memory.as_store(namespace=...) sets the template)"
        )
        return NamespaceError(msg)

    def example(self) -> tuple[str, ...]:
        """The template with example ids, for error messages."""
        return tuple("alice" if p == USER else "planner" if p == AGENT else p for p in self.parts)

    def scope(self, namespace: tuple[str, ...]) -> Scope:
        """The scope of an item's namespace.

        Raises:
            NamespaceError: If the namespace does not fit the template.
        """
        if not self.fits(namespace):
            raise self._outside(namespace, "namespace")
        return self._scope_from(namespace)

    def prefix_scope(self, prefix: tuple[str, ...]) -> Scope | None:
        """The one scope a search prefix names, or `None` when it stops above the scope elements.

        Raises:
            NamespaceError: If the prefix contradicts the template (a literal differs, or an id
                is invalid): nothing this store holds can be under it.
        """
        if not self._literals_match(prefix) or not self._ids_valid(prefix):
            raise self._outside(prefix, "namespace prefix")
        if len(prefix) < self.scope_depth:
            return None
        return self._scope_from(prefix)

    def _scope_from(self, namespace: tuple[str, ...]) -> Scope:
        user = namespace[self._user]
        agent = namespace[self._agent] if self._agent is not None else self.agent_id
        return Scope(user, agent)

    def base(self, scope: Scope) -> tuple[str, ...] | None:
        """The template filled with a scope's ids, or `None` when it cannot name that scope.

        Memories written otherwise than through the store are items of this namespace.
        """
        if self._agent is None and scope.agent_id != self.agent_id:
            return None
        if self._agent is not None and scope.agent_id is None:
            return None
        out = list(self.parts)
        out[self._user] = scope.user_id
        if self._agent is not None:
            out[self._agent] = str(scope.agent_id)
        return tuple(out)

    def owns(self, namespace: tuple[str, ...], scope: Scope) -> bool:
        """Whether `namespace` fits the template and names `scope`."""
        return self.fits(namespace) and self._scope_from(namespace) == scope

    def pinned_scope(self, path: tuple[str, ...]) -> Scope | None:
        """The one scope every namespace under a listing prefix is in, when the prefix says.

        `None` when the prefix has a wildcard at or stops before a scope element, or does not
        fit the template (the listing then looks at every scope).
        """
        if len(path) < self.scope_depth or "*" in path[: self.scope_depth]:
            return None
        head = path[: self.scope_depth]
        if not self._literals_match(head) or not self._ids_valid(head):
            return None
        return self._scope_from(head)
