"""Whose turn it is: the scope (user and agent) and the session, from the run or the defaults.

`ScopeResolver` reads, for each id, the run context, then `configurable`, then the adapter's
constructor argument, then the store's default; invalid ids always raise `ScopeError` (the
failure policy never replaces a scope). Every adapter resolves identity here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from langchain_tdai_recall._exchange.records import check_id
from langchain_tdai_recall.errors import ConfigError, ScopeError
from langchain_tdai_recall.types import Scope

if TYPE_CHECKING:
    from langchain_tdai_recall._turn.host import MemoryHost

__all__ = ["DEFAULT_SESSION_KEY", "ScopeResolver", "ScopeSource", "TurnIdentity"]


logger = logging.getLogger("langchain_tdai_recall._turn")


DEFAULT_SESSION_KEY: Final = "default"
"""Session key used when neither the run nor the caller names one."""


# -- identity -------------------------------------------------------------------------------------

ScopeSource = Literal["context", "configurable", "constructor", "default"]
"""Where the user id of a scope came from."""


@dataclass(frozen=True, slots=True)
class TurnIdentity:
    """Whose turn this is: the memory scope, the conversation, and where the user id came from."""

    scope: Scope
    """User (always resolved; the store's default user when the run names none) and agent."""
    session_key: str
    """Conversation the turn belongs to (used by recall and L0 capture)."""
    source: ScopeSource
    """`context`, `configurable`, `constructor` or `default`."""


def _lookup(container: object, key: str) -> object:
    if container is None:
        return None
    if isinstance(container, Mapping):
        return cast("Mapping[str, object]", container).get(key)
    return getattr(container, key, None)


def _check_id(value: object, *, field: str, source: str) -> str:
    """`check_id` (the one id rule of the package), naming where a bad id came from."""
    try:
        return check_id(field, value)
    except ScopeError as exc:
        msg = (
            f"{exc} (from {source}); pass the id of the end user, or leave it out to use the "
            "store's default user"
        )
        raise ScopeError(msg) from exc


class ScopeResolver:
    """Resolves the identity of a call: run context, then `configurable`, then defaults.

    Order for each of `user_id` and `agent_id`: `runtime.context`, `config["configurable"]`,
    the constructor argument, the store's default. The session is `session_key` from the
    context or `configurable`, then `thread_id`, then the constructor's, then `"default"`. The
    first fallback to the default user logs one WARNING (a multi-user deployment that forgot to
    pass a user id would mix its users' memories; a single-user app names its user in the
    constructor); `require_user_id=True` turns a missing user id into a `ScopeError` instead.
    Invalid ids always raise `ScopeError`.
    """

    def __init__(
        self,
        *,
        default_user_id: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        require_user_id: bool = False,
    ) -> None:
        if user_id is not None:
            _check_id(user_id, field="user_id", source="the constructor")
        if agent_id is not None:
            _check_id(agent_id, field="agent_id", source="the constructor")
        if session_key is not None and not isinstance(cast("object", session_key), str):
            msg = f"session_key must be a string, got {session_key!r}"
            raise ConfigError(msg)
        self.default_user_id: Final = default_user_id
        self.user_id: Final = user_id
        self.agent_id: Final = agent_id
        self.session_key: Final = session_key
        self.require_user_id: Final = require_user_id
        self._seen_request_user = False
        self._warned = False

    @classmethod
    def for_memory(
        cls,
        memory: MemoryHost,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_key: str | None = None,
        require_user_id: bool = False,
    ) -> ScopeResolver:
        """A resolver whose default user is the store's `store.default_user_id`."""
        return cls(
            default_user_id=memory.config.store.default_user_id,
            user_id=user_id,
            agent_id=agent_id,
            session_key=session_key,
            require_user_id=require_user_id,
        )

    def resolve(
        self, context: object = None, configurable: Mapping[str, Any] | None = None
    ) -> TurnIdentity:
        """Resolve the identity of one call.

        Args:
            context: `runtime.context` (a mapping, a dataclass or any object), or `None`.
            configurable: `config["configurable"]`, or `None`.

        Returns:
            The identity.

        Raises:
            ScopeError: If an id is not a non-empty string, or no user id was found and
                `require_user_id` is set.
        """
        conf: Mapping[str, Any] = configurable or {}
        user_id, source = self._user(context, conf)
        agent_id = self.agent_id
        for candidate, where in (
            (_lookup(context, "agent_id"), "context"),
            (conf.get("agent_id"), "configurable"),
        ):
            if candidate is not None:
                agent_id = _check_id(candidate, field="agent_id", source=f"runtime {where}")
                break
        session_key = self.session_key or DEFAULT_SESSION_KEY
        for candidate in (
            _lookup(context, "session_key"),
            conf.get("session_key"),
            conf.get("thread_id"),
        ):
            if isinstance(candidate, str | int | uuid.UUID) and str(candidate):
                session_key = str(candidate)
                break
        return TurnIdentity(
            scope=Scope(user_id=user_id, agent_id=agent_id), session_key=session_key, source=source
        )

    def _user(self, context: object, conf: Mapping[str, Any]) -> tuple[str, ScopeSource]:
        for candidate, where in (
            (_lookup(context, "user_id"), "context"),
            (conf.get("user_id"), "configurable"),
        ):
            if candidate is not None:
                self._seen_request_user = True
                user = _check_id(candidate, field="user_id", source=f"runtime {where}")
                return user, "context" if where == "context" else "configurable"
        if self.user_id is not None:
            return self.user_id, "constructor"
        if self.require_user_id:
            msg = (
                "no user_id for this call: pass it in the run context "
                "(context={'user_id': ...}), in config['configurable']['user_id'], or to the "
                "constructor; require_user_id=True forbids falling back to the default user"
            )
            raise ScopeError(msg)
        if not self._warned:
            self._warned = True
            logger.warning(
                "a call without user_id uses the store's default user (store.default_user_id)%s; "
                "calls without one all share its memory. Pass user_id in the run context or "
                "configurable, or to the constructor (memory.middleware(user_id=...)) for a "
                "single-user app; require_user_id=True makes this an error. Logged once.",
                " although other calls passed one" if self._seen_request_user else "",
            )
        return self.default_user_id, "default"
