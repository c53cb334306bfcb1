# SPDX-License-Identifier: Apache-2.0
"""Blocks of threads run one thread after another under numba's CUDA simulator, where that is
the same computation.

numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) runs a kernel block by block, and every CUDA
thread of a block as a Python thread of its own (``numba.cuda.simulator.kernel.BlockManager``):
it starts the block's threads and polls them, so that a thread calling ``cuda.syncthreads()``
can wait until the others arrive.  Starting and joining a Python thread costs 0.1-0.5 ms, far
more than what a thread of this package's kernels computes on a small input: in a 640-row read
of a list-heavy table, 26.5 s of 29 s went to starting 59,652 threads.

A kernel that never waits on the other threads of its block and shares nothing with them but
global memory -- no ``syncthreads*``, ``syncwarp``, shared memory, warp-level primitive
(``shfl_*_sync``, votes, ``match_*``, ``activemask``, ``laneid``) or cooperative group,
anywhere in its code or the device functions it calls -- gives the same result whatever
order its threads run in (a GPU guarantees no order among them either; atomics are atomic
in any order).  :func:`install` replaces ``BlockManager.run`` by one that runs such a
kernel's threads one after another in the calling thread: each call of the kernel's Python
function sees its own ``threadIdx`` / ``blockIdx`` (the simulator reads both from
``threading.current_thread()``), and a thread that raises ends the launch with the
exception numba's runner gives (its type, ``"tid=[x, y, z] ctaid=[x, y, z]: message"``).
Every other kernel, and every kernel under ``LANCE_GPU_SIM_THREADS=1`` (numba's runner, kept
to compare against), runs as numba runs it.

Whether a kernel may run sequentially is decided once per kernel function (:func:`sequential`),
from the global names its code objects (nested ones included) load and the functions those
names resolve to in its globals (device functions: the simulator's ``FakeCUDAKernel`` wrapping
a Python function; plain functions; a module's attributes of the names loaded), followed
transitively.  The test is conservative: a name that may reach a barrier is enough.
"""

from __future__ import annotations

import contextlib
import os
import threading
import types
from typing import Any

from ._jitcache import global_names

#: names whose use makes a kernel's threads depend on each other within a block
BLOCK_SYNC_NAMES = frozenset({
    "syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or", "syncwarp",
    "shared", "cg", "this_grid", "shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync",
    "all_sync", "any_sync", "eq_sync", "ballot_sync", "match_any_sync", "match_all_sync",
    "activemask", "lanemask_lt", "laneid",
})
#: ``LANCE_GPU_SIM_THREADS=1``: every kernel runs on numba's threaded runner
THREADED_ENV = "LANCE_GPU_SIM_THREADS"

_verdicts: dict[int, tuple[Any, bool, tuple[Any, ...]]] = {}
_THREAD_ATTRIBUTES = ("blockIdx", "threadIdx", "thread_id")
_install_lock = threading.Lock()
_installed = False


def _reaches_block_sync(fn: Any, seen: set[int], device: list[Any]) -> bool:
    """Whether ``fn`` (a Python function, or a simulator kernel / device function wrapping
    one) may reach a name of :data:`BLOCK_SYNC_NAMES` (module docstring); the Python
    functions of the device functions met on the way are appended to ``device``."""
    if getattr(fn, "_device", False) and hasattr(fn, "fn"):
        device.append(fn.fn)
    fn = getattr(fn, "fn", fn)  # FakeCUDAKernel -> its Python function
    fn = getattr(fn, "py_func", fn)
    code = getattr(fn, "__code__", None)
    if code is None or id(fn) in seen:
        return False
    seen.add(id(fn))
    names = global_names(code)
    if names & BLOCK_SYNC_NAMES:
        return True
    glb = getattr(fn, "__globals__", {})
    values = [glb[n] for n in names if n in glb]
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    for value in values:
        if isinstance(value, types.ModuleType):
            members = [getattr(value, n) for n in names if callable(getattr(value, n, None))]
            if any(_reaches_block_sync(m, seen, device) for m in members):
                return True
        elif callable(value) and _reaches_block_sync(value, seen, device):
            return True
    return False


def _verdict(fn: Any) -> tuple[Any, bool, tuple[Any, ...]]:
    got = _verdicts.get(id(fn))
    if got is None or got[0] is not fn:
        device: list[Any] = []
        alone = not _reaches_block_sync(fn, set(), device)
        got = _verdicts[id(fn)] = (fn, alone, tuple({id(f): f for f in device}.values()))
    return got


def sequential(fn: Any) -> bool:
    """Whether the simulator may run the threads of a block of kernel ``fn`` one after another
    (module docstring); decided once per function."""
    return _verdict(fn)[1]


def _run_block_sequentially(manager: Any, grid_point: tuple[int, ...], *args: Any) -> None:
    """``BlockManager.run`` for a kernel :func:`sequential` accepts: its threads, in order,
    in the calling thread.  The device functions it may call keep the launch's fake ``cuda``
    module in their globals for the whole block (numba swaps it in and out at every call,
    scanning the function's globals each time: most of a sequential block's time)."""
    from numba.cuda.simulator.kernel import _get_kernel_context
    from numba.cuda.simulator.kernelapi import Dim3, swapped_cuda_module

    me = threading.current_thread()
    saved = {name: me.__dict__[name] for name in _THREAD_ATTRIBUTES if name in me.__dict__}
    bx, by, _bz = manager._block_dim
    me.blockIdx = Dim3(*grid_point)  # type: ignore[attr-defined]
    try:
        with contextlib.ExitStack() as swapped:
            context = _get_kernel_context()
            for device_fn in _verdict(manager._f)[2]:
                swapped.enter_context(swapped_cuda_module(device_fn, context))
            for x_y_z in _block_points(manager._block_dim):
                x, y, z = x_y_z
                me.threadIdx = Dim3(x, y, z)  # type: ignore[attr-defined]
                me.thread_id = x + bx * (y + by * z)  # type: ignore[attr-defined]
                try:
                    manager._f(*args)
                except Exception as exc:
                    where = f"tid={list(x_y_z)} ctaid={list(grid_point)}"
                    message = f"{where}: {exc}" if str(exc) else where
                    raise type(exc)(message).with_traceback(exc.__traceback__) from None
    finally:
        for name in _THREAD_ATTRIBUTES:
            me.__dict__.pop(name, None)
        me.__dict__.update(saved)


def _block_points(block_dim: tuple[int, int, int]):
    """The thread indices of a block in numba's order (``np.ndindex``: x slowest)."""
    bx, by, bz = block_dim
    for x in range(bx):
        for y in range(by):
            for z in range(bz):
                yield x, y, z


def install() -> None:
    """Run the blocks of :func:`sequential` kernels one thread after another under the CUDA
    simulator, from now on in this process (idempotent; nothing under a real GPU, or with
    ``LANCE_GPU_SIM_THREADS=1``)."""
    global _installed
    if _installed or os.environ.get(THREADED_ENV) == "1":
        return
    from numba import config

    if not getattr(config, "ENABLE_CUDASIM", 0):
        return
    with _install_lock:
        if _installed:
            return
        from numba.cuda.simulator import kernel as simulator_kernel

        numba_run = simulator_kernel.BlockManager.run

        def run(self, grid_point, *args):
            if self._debug or not sequential(self._f):
                return numba_run(self, grid_point, *args)
            return _run_block_sequentially(self, grid_point, *args)

        run.numba_run = numba_run  # type: ignore[attr-defined]
        simulator_kernel.BlockManager.run = run  # type: ignore[method-assign]
        _installed = True


__all__ = ["BLOCK_SYNC_NAMES", "THREADED_ENV", "install", "sequential"]
