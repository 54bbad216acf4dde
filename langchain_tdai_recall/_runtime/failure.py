"""The package's one failure policy: what a failure that must not stop a turn costs, and its log.

Recall (`recall.engine`), the turn's steps (`_turn`: recall in an adapter, L0 capture, `on_turn`,
event handlers), the memory tools and the facade's turn capture all hand their failures here, so
one rule decides, for every one of them, whether it is raised and how it is logged:

| what fails | `recall.on_error="skip"` (default) | `recall.on_error="raise"` |
|---|---|---|
| an invalid scope (`ScopeError`) | raises: a scope is never replaced by another | raises |
| recall (error or timeout) | injects nothing, one WARNING, the turn goes on | raises |
| the reranker | recall injects the fused order, one WARNING | same: never raises |
| a memory tool's store call | error `ToolMessage` telling the model to answer, WARNING | raises |
| L0 capture, `on_turn`, event handlers | WARNING, the turn goes on | same: never raises |

Above DEBUG a log line names what failed and the exception's type, never its message: a
backend's message may name a user (a path) or quote memory text. The message and the traceback
are logged at DEBUG.
"""

from __future__ import annotations

import logging

from langchain_tdai_recall.errors import RecallTimeoutError, ScopeError
from langchain_tdai_recall.types import OnError

__all__ = ["log_failure", "report_failure", "report_timeout"]

logger = logging.getLogger(__name__)


def report_failure(
    exc: Exception, *, action: str, on_error: OnError = "skip", degraded: str | None = None
) -> None:
    """Apply the failure policy to `exc`, raised by `action`; return when the work may go on.

    Args:
        exc: The failure.
        action: What failed, for the log line (for example `"recall"`).
        on_error: `"raise"` re-raises `exc`; `"skip"` logs it (`log_failure`).
        degraded: What happens instead, for the log line (for example `"skipping memory
            injection for this turn"`).

    Raises:
        ScopeError: Always, when `exc` is one: falling back to another scope would mix users.
        Exception: `exc` itself, when `on_error="raise"`.
    """
    if isinstance(exc, ScopeError) or on_error == "raise":
        raise exc
    log_failure(exc, action=action, degraded=degraded)


def log_failure(exc: Exception, *, action: str, degraded: str | None = None) -> None:
    """Log a failure that does not stop the work: step and type above DEBUG, the rest at DEBUG.

    For the steps that never raise whatever `recall.on_error` says (a reranker, the facade's
    hand-over of a turn to the writer); `report_failure` logs through it too.
    """
    if degraded is None:
        logger.warning("%s failed: %s", action, type(exc).__name__)
    else:
        logger.warning("%s failed (%s); %s", action, type(exc).__name__, degraded)
    logger.debug("%s failure: %s", action, exc, exc_info=exc)


def report_timeout(timeout_ms: int, *, on_error: OnError) -> None:
    """Recall did not answer within `recall.timeout_ms`: one WARNING, or `RecallTimeoutError`."""
    logger.warning(
        "recall exceeded recall.timeout_ms=%d; skipping memory injection for this turn",
        timeout_ms,
    )
    if on_error == "raise":
        raise RecallTimeoutError(timeout_ms)
