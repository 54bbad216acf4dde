"""The `a*` twins of `TdaiMemory`'s blocking calls, each written once as one line.

Every store call blocks on a database or a file, so its async twin runs the sync version on a
worker thread of the event loop's default executor: the loop never waits for the store. Writing
the twins out by hand repeated each signature twice (24 times in the facade); `async_twin` builds
the twin from the sync method instead, so the two cannot drift apart. Type checkers see the
sync method's parameters (a `ParamSpec`), and `help()` and `inspect.signature` show them
(`functools.wraps`), with the docstring "Async version of `name`.".

The few twins that do more than run the sync call on a thread (`arecall`, which awaits the
engine's own async path; `aend_session`, which never blocks) stay written out in `memory.py`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["async_twin", "in_thread"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


async def in_thread(func: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run `func(*args, **kwargs)` on the running loop's default executor and await it."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(func, *args, **kwargs))


def async_twin(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """The async twin of a blocking method: the same parameters, run on a worker thread.

    Used in a class body (`aadd_memory = async_twin(add_memory)`); the twin is an `async def`
    named `a<name>`, so `inspect.iscoroutinefunction` holds for it.
    """

    @functools.wraps(method)
    async def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await in_thread(method, self, *args, **kwargs)

    name = method.__name__
    twin.__name__ = f"a{name}"
    twin.__qualname__ = f"{method.__qualname__.removesuffix(name)}a{name}"
    twin.__doc__ = f"Async version of `{name}`."
    return twin
