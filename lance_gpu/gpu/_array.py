# SPDX-License-Identifier: Apache-2.0
"""Device arrays for the GPU reader, whichever library provides them.

The decoder keeps every buffer as a numba device array (what the kernels take).  On a GPU
with CuPy, memory is allocated through CuPy (so its pool, or RMM when cuDF set it up, serves
it) and viewed as numba arrays without a copy; under the numba CUDA simulator (no CuPy) the
arrays are the simulator's.  Nothing here imports CUDA at module import time.

Streams: our numba kernels run on the legacy default stream.  The reader does its CuPy work
under :func:`legacy_stream`, so that CuPy's allocations, scans and frees are ordered with the
kernels whatever stream the caller has made current; arrays allocated here are therefore
viewed without the synchronisation ``as_cuda_array`` does by default.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from cuda_kernels import _device
from lance_gpu.errors import GpuUnavailableError

#: a device array: numba's ``DeviceNDArray`` (or the simulator's), a CuPy array, or anything
#: with ``__cuda_array_interface__`` -- typed loosely, as numba and CuPy ship no stubs
DeviceArray = Any


def cuda():
    from numba import cuda as numba_cuda

    return numba_cuda


def cupy():
    """The CuPy module, or None (not installed, or simulator)."""
    return _device.get_cupy()


@contextlib.contextmanager
def legacy_stream() -> Iterator[None]:
    """Make CuPy's legacy default stream (the one our kernels use) current for the block."""
    cp = cupy()
    if cp is None:
        yield
        return
    with cp.cuda.Stream.null:
        yield


@contextlib.contextmanager
def current_stream(owner) -> Iterator[None]:
    """Make the CuPy stream ``owner`` current for the block (nothing when None)."""
    if owner is None:
        yield
        return
    with owner:
        yield


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """An NVTX range around the block (seen by Nsight Systems), where CuPy is in use."""
    cp = cupy()
    if cp is None:
        yield
        return
    cp.cuda.nvtx.RangePush(name)
    try:
        yield
    finally:
        cp.cuda.nvtx.RangePop()


def sync_kernels() -> None:
    """Wait for the work queued on the legacy default stream (our kernels and the reader's
    CuPy work), and for nothing else: copies on non-blocking streams go on."""
    cp = cupy()
    if cp is not None:
        cp.cuda.Stream.null.synchronize()
    else:
        cuda().synchronize()


def _fresh(a) -> DeviceArray:
    """A numba view of a CuPy array just allocated on the legacy stream: no device sync now,
    and none later (the view carries no stream; see ``cuda_kernels._device.adopt``)."""
    return _device.adopt(a)


def empty(n: int, dtype) -> DeviceArray:
    """Uninitialised device array of ``n`` items (at least one byte is allocated)."""
    n = int(n)
    dtype = np.dtype(dtype)
    cp = cupy()
    if cp is not None:
        return _fresh(cp.empty(max(n, 1), dtype=dtype)[:n])
    return cuda().device_array(n, dtype=dtype)


def zeros(n: int, dtype) -> DeviceArray:
    n = int(n)
    cp = cupy()
    if cp is not None:
        return _fresh(cp.zeros(max(n, 1), dtype=np.dtype(dtype))[:n])
    return _device.device_zeros(n, dtype)


def full(n: int, dtype, value) -> DeviceArray:
    cp = cupy()
    if cp is not None:
        return _fresh(cp.full(max(int(n), 1), value, dtype=np.dtype(dtype))[: int(n)])
    return _device.device_full(int(n), dtype, value)


def upload(host: np.ndarray) -> DeviceArray:
    """A device copy of a host array."""
    host = np.ascontiguousarray(host)
    if _device._upload_scope() is not None:  # asynchronous, through pinned memory
        return _device.to_device(host)
    out = empty(host.size, host.dtype)
    if host.size:
        out.copy_to_device(host.reshape(-1))
    return out if host.ndim == 1 else out.reshape(host.shape)


def as_device(x) -> DeviceArray:
    """A numba device array viewing ``x`` (device arrays are not copied)."""
    return _device.to_device(x)


def to_host(x) -> np.ndarray:
    if x is None:
        return None  # type: ignore[return-value]
    return _device.to_host(x)


def to_cupy(x):
    cp = cupy()
    if cp is None:

        msg = "CuPy is not available (or the CUDA simulator is on): device arrays stay numba arrays"
        raise GpuUnavailableError(msg)
    return cp.asarray(x)


def count_false(x) -> int:
    """Number of False items of a device bool array."""
    n = int(x.shape[0])
    if not n:
        return 0
    cp = cupy()
    if cp is not None:
        return n - int(cp.count_nonzero(cp.asarray(x)))
    return n - int(np.count_nonzero(to_host(x)))


def iota(n: int, dtype=np.int64) -> DeviceArray:
    """Device ``arange(n)``."""
    cp = cupy()
    if cp is not None:
        return _fresh(cp.arange(int(n), dtype=dtype))
    from cuda_kernels.segments import expand_ranges_gpu

    idx, _ = expand_ranges_gpu(np.zeros(1, np.int64), np.array([int(n)], np.int64))
    return idx if np.dtype(dtype) == np.int64 else upload(np.arange(int(n), dtype=dtype))


def synchronize() -> None:
    cuda().synchronize()
