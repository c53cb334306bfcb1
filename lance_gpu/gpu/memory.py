# SPDX-License-Identifier: Apache-2.0
"""The device memory budget of the GPU reader, and where its memory comes from.

* **Budget.** A read is cut into *units* (groups of fragments, or of one fragment's fields)
  whose staged file bytes plus decode scratch are estimated to fit the budget; each unit is
  staged, decoded and its scratch released before the next.  The budget is, in order: what
  :func:`set_memory_limit` / :func:`memory_limit` set, ``LANCE_GPU_MEMORY_LIMIT`` (bytes, or
  with a ``K``/``M``/``G`` suffix), else 60% of the device memory free when first asked,
  and never more than 60% of the RMM pool the RAPIDS Accelerator gives a Python worker
  (``RAPIDS_POOLED_MEM_MAX_SIZE`` / ``RAPIDS_POOLED_MEM_SIZE``).
  Decoded columns handed to the caller are not counted (they are the result), but for a
  ``to_cudf`` read of several units with no gather: the fixed-width values, the flat
  columns' validity, the string offsets, and the list offsets and list masks of every
  unit are decoded into arenas allocated for the whole read,
  which the budget counts first; its units are cut from the budget less those arenas, at
  least a quarter of the budget
  (:func:`lance_gpu.gpu.read.scan_device`).
* **Allocator.** When ``rmm`` is importable (it comes with cuDF), its current device
  resource pools memory (cuDF's pool, an async resource ...) and CuPy is not already
  allocating through it, CuPy is pointed at that resource so that the reader shares cuDF's
  pool.  Nothing is imported before the first GPU read.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from lance_gpu.gpu import _array

ENV_LIMIT = "LANCE_GPU_MEMORY_LIMIT"
DEFAULT_FRACTION = 0.6
# Without a device to ask (simulator), a modest fixed budget.
_FALLBACK_BUDGET = 1 << 30

_state = threading.local()
_global: list[int | None] = [None]
_allocator_done: list[bool] = [False]

__all__ = ["ENV_LIMIT", "memory_budget", "memory_limit", "set_memory_limit", "thread_limit", "use_rmm_if_available"]


def _parse_size(text: str) -> int:
    raw = text.strip().upper()
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)):
        if raw.endswith(suffix + "B"):
            raw = raw[:-2]
            mult = m
            break
        if raw.endswith(suffix):
            raw = raw[:-1]
            mult = m
            break
    try:
        value = int(float(raw) * mult)
    except ValueError:
        value = 0
    if value <= 0:
        msg = f"{ENV_LIMIT} must be a positive size such as 4G or 500000000, not {text!r}"
        raise ValueError(msg)
    return value


def set_memory_limit(nbytes: int | None) -> None:
    """Set (or with None clear) the process-wide device memory budget of GPU reads."""
    if nbytes is not None and int(nbytes) <= 0:
        msg = "the device memory limit must be positive"
        raise ValueError(msg)
    _global[0] = None if nbytes is None else int(nbytes)


@contextlib.contextmanager
def memory_limit(nbytes: int) -> Iterator[None]:
    """Context manager: GPU reads in this thread use at most ``nbytes`` of scratch."""
    if int(nbytes) <= 0:
        msg = "the device memory limit must be positive"
        raise ValueError(msg)
    old = getattr(_state, "limit", None)
    _state.limit = int(nbytes)
    try:
        yield
    finally:
        _state.limit = old


def thread_limit() -> int | None:
    """The limit :func:`memory_limit` set for this thread, or None: what a thread that reads on
    behalf of this one (a prefetch thread) enters to plan with the same budget."""
    return getattr(_state, "limit", None)


def memory_budget() -> int:
    """The budget in bytes that the next GPU read plans with."""
    local = thread_limit()
    if local is not None:
        return local
    if _global[0] is not None:
        return _global[0]
    env = os.environ.get(ENV_LIMIT)
    if env:
        return _parse_size(env)
    budget = _FALLBACK_BUDGET
    cp = _array.cupy()
    if cp is not None:
        try:
            free, _total = cp.cuda.runtime.memGetInfo()
            budget = max(int(free * DEFAULT_FRACTION), 64 << 20)
        except Exception:  # pragma: no cover - device query failed
            budget = _FALLBACK_BUDGET
    pool = rapids_python_pool_bytes()
    if pool is not None:
        budget = min(budget, max(int(pool * DEFAULT_FRACTION), 64 << 20))
    return budget


RAPIDS_POOL_ENV = ("RAPIDS_POOLED_MEM_MAX_SIZE", "RAPIDS_POOLED_MEM_SIZE")


def rapids_python_pool_bytes() -> int | None:
    """The RMM pool the RAPIDS Accelerator gives this Python worker (bytes), or None.

    The accelerator's GPU Python execs export ``RAPIDS_POOLED_MEM_ENABLED`` and the pool's
    ``RAPIDS_POOLED_MEM_SIZE`` / ``RAPIDS_POOLED_MEM_MAX_SIZE`` (0 or unset: unbounded); a
    read inside such a worker plans within the pool's bound (the max size, else the size).
    """
    if os.environ.get("RAPIDS_POOLED_MEM_ENABLED", "").strip().lower() not in ("true", "1"):
        return None
    for name in RAPIDS_POOL_ENV:
        raw = os.environ.get(name, "").strip()
        try:
            value = int(raw)
        except ValueError:
            continue
        if value > 0:
            return value
    return None


def _is_pooled(rmm) -> bool:
    """Whether RMM's current device resource pools memory (a pool, arena, async or other
    resource that is not the plain ``cudaMalloc`` one)."""
    try:
        mr = rmm.mr.get_current_device_resource()
        plain = (rmm.mr.CudaMemoryResource, getattr(rmm.mr, "ManagedMemoryResource", ()))
        return not isinstance(mr, plain)
    except Exception:  # pragma: no cover - an RMM without these names
        return False


def use_rmm_if_available() -> bool:
    """Route CuPy allocations through RMM when rmm is importable; True if RMM is in use."""
    if _allocator_done[0]:
        return _allocator_done[0]
    cp = _array.cupy()
    if cp is None:
        return False
    try:
        import rmm
        from rmm.allocators.cupy import rmm_cupy_allocator
    except Exception:
        return False
    if not _is_pooled(rmm):
        # RMM's plain resource would make every CuPy allocation a cudaMalloc and every free
        # a synchronising cudaFree: CuPy's own pool is faster, so keep it.
        return False
    try:
        current = cp.cuda.get_allocator()
        if getattr(current, "__name__", "") != getattr(rmm_cupy_allocator, "__name__", None):
            cp.cuda.set_allocator(rmm_cupy_allocator)
    except Exception:  # pragma: no cover - an exotic CuPy
        return False
    _allocator_done[0] = True
    return True
