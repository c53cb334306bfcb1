# SPDX-License-Identifier: Apache-2.0
"""The process's background I/O threads: requests that release the GIL (fsyncs, file
creations, object-store puts) run here while the calling thread goes on with its Python
work, and the caller waits on the returned future before anything depends on the result.

One pool for the process, started on first use and kept (starting a pool per commit costs
~1 ms of thread start-up), started afresh in a forked child (whose parent's threads do not
exist there).  A task must never wait on another task of this pool (with every thread
waiting, none would run): :func:`in_background` called from one of the pool's own threads
runs its function there and then, so a task that submits work waits on nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

#: Background I/O threads: enough for one commit's fsyncs of several files at once.
IO_THREADS = 8

T = TypeVar("T")

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_THREAD = threading.local()


def _mark_pool_thread() -> None:
    _THREAD.in_pool = True


def io_pool() -> ThreadPoolExecutor:
    """The process's background I/O pool (:data:`IO_THREADS` threads)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="lance-gpu-io", initializer=_mark_pool_thread)
        return _POOL


def in_background(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
    """``fn(*args, **kwargs)`` on the background I/O pool (run at once, in the calling thread,
    when that is one of the pool's: see the module's docstring)."""
    if getattr(_THREAD, "in_pool", False):
        done: Future[T] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            done.set_exception(exc)
        return done
    return io_pool().submit(fn, *args, **kwargs)


def settle(future: Future[Any] | None) -> None:
    """Wait for ``future`` (if any) without raising: its failure is somebody else's to report,
    or nobody's (a cleanup path that only needs the task to have ended)."""
    if future is not None:
        future.exception()


def _forget_pool() -> None:
    """In a forked child the parent's pool threads do not exist: start a new pool on use."""
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)
