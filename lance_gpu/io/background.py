# SPDX-License-Identifier: Apache-2.0
"""The process's background I/O threads: requests that release the GIL (fsyncs, file
creations, object-store puts) run here while the calling thread goes on with its Python
work, and the caller waits on the returned future before anything depends on the result.

One pool for the process, started on first use and kept (starting a pool per commit costs
~1 ms of thread start-up), started afresh in a forked child (whose parent's threads do not
exist there).  A task must never wait on another task of this pool (with every thread
waiting, none would run): :func:`in_background` called from one of the pool's own threads
runs its function there and then, so a task that submits work waits on nothing.

Overlapping pays only where a core is idle.  A file creation, for one, is CPU work in the
kernel (0.3-0.5 ms on ext4 in a VM), not a wait; on a machine whose cores are all busy a
background thread only adds a hand-off, and a thread descheduled while holding the GIL
stalls the caller.  So :func:`in_background` runs its function in the calling thread
unless :func:`spare_core` says a core is free (``$LANCE_GPU_IO_OVERLAP``: ``auto``, the
default, ``always`` or ``never``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures._base import FINISHED
from typing import Any, TypeVar

#: Background I/O threads: enough for one commit's fsyncs of several files at once.
IO_THREADS = 8
#: ``auto`` (overlap where :func:`spare_core`), ``always`` or ``never``.
OVERLAP = os.environ.get("LANCE_GPU_IO_OVERLAP", "auto").strip().lower()
#: Seconds a :func:`spare_core` answer is kept (the load average moves slowly).
SPARE_CORE_TTL = 1.0

T = TypeVar("T")

_THREAD = threading.local()


class ProcessPool:
    """A process-wide ``ThreadPoolExecutor`` started on first use (:meth:`get`) and kept,
    and started afresh in a forked child, where the parent's pool threads do not exist
    (the fork resets it: ``os.register_at_fork``).  ``threads`` is called when the pool
    starts; ``name`` prefixes its threads' names."""

    def __init__(self, threads: Callable[[], int], name: str, initializer: Callable[[], None] | None = None) -> None:
        self._threads = threads
        self._name = name
        self._initializer = initializer
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget)

    def get(self) -> ThreadPoolExecutor:
        """The pool, started now if this process has none."""
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._threads(), thread_name_prefix=self._name, initializer=self._initializer)
                pool = self._pool
        return pool

    def _forget(self) -> None:
        self._pool = None
        self._lock = threading.Lock()


def _mark_pool_thread() -> None:
    _THREAD.in_pool = True


_IO_POOL = ProcessPool(lambda: IO_THREADS, "lance-gpu-io", _mark_pool_thread)


def io_pool() -> ThreadPoolExecutor:
    """The process's background I/O pool (:data:`IO_THREADS` threads)."""
    return _IO_POOL.get()


_spare: tuple[float, bool] = (-SPARE_CORE_TTL, False)  # (when checked, the answer)


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def spare_core() -> bool:
    """Whether a background thread can expect a core of its own: the load average of the
    last minute (this process's own work included) plus one fits the CPUs this process may
    use.  Looked up at most once per :data:`SPARE_CORE_TTL` seconds."""
    global _spare
    if OVERLAP in ("always", "never"):
        return OVERLAP == "always"
    now = time.monotonic()
    checked, answer = _spare
    if now - checked >= SPARE_CORE_TTL:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
        answer = load + 1.0 <= _usable_cpus()
        _spare = (now, answer)
    return answer


def in_background(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
    """``fn(*args, **kwargs)`` -- work that keeps a core busy (a file creation) -- on the
    background I/O pool; run at once in the calling thread when that is one of the pool's,
    or when no core is spare (see the module's docstring).  Either way the caller gets a
    future holding the outcome."""
    if getattr(_THREAD, "in_pool", False) or not spare_core():
        return done_now(fn, *args, **kwargs)
    return io_pool().submit(fn, *args, **kwargs)


def waiting_in_background(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
    """``fn(*args, **kwargs)`` -- work that mostly waits on a device (an fsync) -- on the
    background I/O pool, busy cores or not (run at once only when called from one of the
    pool's threads)."""
    if getattr(_THREAD, "in_pool", False):
        return done_now(fn, *args, **kwargs)
    return io_pool().submit(fn, *args, **kwargs)


#: The one condition of every :class:`Finished` future: nobody ever waits on it (a finished
#: future's state never changes), it only serves ``concurrent.futures.wait`` and the base
#: class's methods that take it (re-entrant: taking it for several futures at once is fine).
_FINISHED_CONDITION = threading.Condition()


class Finished(Future[T]):
    """A :class:`~concurrent.futures.Future` finished when it is made, holding ``result`` or
    (not None) ``exception``: what :func:`done_now` returns.

    A plain ``Future()`` builds a ``threading.Condition`` (an ``RLock`` and ~15 Python calls
    with ``set_result``'s notify) that a future finished at once never needs: a small commit
    makes ~9 of them.  This one sets the base class's attributes directly, in their finished
    state (``FINISHED``, no waiters, no callbacks), sharing one condition, so every method of
    ``Future`` (``add_done_callback`` runs the callback at once, ``cancel`` is False,
    ``set_result`` raises ``InvalidStateError``) and ``concurrent.futures.wait`` work on it
    as on any finished future; ``result`` / ``exception`` / ``done`` answer without the lock."""

    def __init__(self, result: T | None = None, exception: BaseException | None = None) -> None:
        # (no super().__init__(): its condition and fresh state are what this skips)
        self._condition = _FINISHED_CONDITION
        self._state = FINISHED
        self._result = result
        self._exception = exception
        self._waiters: list[Any] = []
        self._done_callbacks: list[Callable[[Future[T]], object]] = []

    def done(self) -> bool:
        return True

    def result(self, timeout: float | None = None) -> T:
        if self._exception is not None:
            try:
                raise self._exception
            finally:
                self = None  # type: ignore[assignment]  # (no cycle through the traceback, as Future does)
        return self._result  # type: ignore[return-value]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._exception


def done_now(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
    """``fn(*args, **kwargs)`` run now, in the calling thread, as a :class:`Finished` future
    holding its result or exception (for callers that hand out futures whether the work ran
    here or on a pool)."""
    try:
        return Finished(fn(*args, **kwargs))
    except BaseException as exc:
        return Finished(None, exc)


def settle(future: Future[Any] | None) -> None:
    """Wait for ``future`` (if any) without raising: its failure is somebody else's to report,
    or nobody's (a cleanup path that only needs the task to have ended)."""
    if future is not None:
        future.exception()
