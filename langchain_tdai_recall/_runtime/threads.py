"""Worker threads that interpreter exit never waits for.

`concurrent.futures.ThreadPoolExecutor` joins its worker threads when the interpreter exits, so
one embedder call that hangs (a dead endpoint without a timeout) holds up process exit for as
long as it hangs. `DaemonExecutor` is the same kind of pool built on daemon threads: callers
still wait on its futures with their own timeouts, and at exit a hung call is simply abandoned.
Use it only for work whose loss at exit is harmless (query embeddings, recall); durable writes
happen on the caller's thread or in the store's writer, which `TdaiMemory.close()` flushes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

__all__ = ["DaemonExecutor"]

P = ParamSpec("P")
T = TypeVar("T")

_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonExecutor(Executor):
    """A thread pool of at most `max_workers` daemon threads, started on demand.

    Example:
        ```python
        pool = DaemonExecutor(2, name="demo")
        assert pool.submit(pow, 2, 10).result(timeout=5) == 1024
        pool.shutdown()
        ```
    """

    def __init__(self, max_workers: int, *, name: str) -> None:
        self._max_workers = max_workers
        self._name = name
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._shutdown = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Schedule `fn(*args, **kwargs)`; raises `RuntimeError` after `shutdown`."""
        with self._lock:
            if self._shutdown:
                msg = "cannot schedule new futures after shutdown"
                raise RuntimeError(msg)
            future: Future[T] = Future()
            self._queue.put((future, fn, args, kwargs))
            if self._idle > 0:
                self._idle -= 1
            elif len(self._threads) < self._max_workers:
                thread = threading.Thread(
                    target=self._work,
                    name=f"{self._name}-{len(self._threads)}",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()
            return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # handed to the waiting caller
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del item, future
            with self._lock:
                if self._shutdown:
                    continue
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting work; with `wait`, join the threads that are not stuck in a call.

        Threads blocked in a call are daemons: they are left behind and never delay exit.
        """
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                thread.join()
