"""k-means steps: nearest-centroid assignment and per-cluster sums, CPU and GPU.

* :func:`assign_nearest` / :func:`assign_nearest_gpu`: for each row of ``x`` (``n x d``
  float32) the index of its nearest centroid of ``c`` (``k x d`` float32) and that distance:
  squared l2, or with ``dot=True`` the largest ``x.c`` (distance ``1 - x.c``).  Ties go to
  the lower centroid index.  A parallel CPU loop / one GPU thread per row.
* :func:`cluster_sums_gpu`: per cluster the sum of its rows (float64, ``k x d``) and the row
  count (int64), by atomic adds (one thread per row), for the centroid update.

Inputs are host or device arrays (numba device arrays or CuPy); the GPU functions return
device arrays (CuPy when the input was CuPy).
"""

import numpy as np

from . import _device
from ._jitcache import prange
from ._target import LAZY_CUDA, cpu_driver, dual, gpu_kernel

cuda = LAZY_CUDA

__all__ = ["assign_nearest", "assign_nearest_gpu", "cluster_sums_gpu"]


@dual
def _nearest_row(x, c, dot, i, labels, dists):
    """labels[i], dists[i] = the nearest centroid of row ``i`` and its distance."""
    best = np.float32(np.inf)
    arg = 0
    d = x.shape[1]
    for j in range(c.shape[0]):
        acc = np.float32(0.0)
        if dot:
            for t in range(d):
                acc += x[i, t] * c[j, t]
            acc = np.float32(1.0) - acc
        else:
            for t in range(d):
                diff = x[i, t] - c[j, t]
                acc += diff * diff
        if acc < best:
            best = acc
            arg = j
    labels[i] = arg
    dists[i] = best


@cpu_driver(parallel=True)
def _assign_cpu(x, c, dot, labels, dists):
    for i in prange(x.shape[0]):
        _nearest_row(x, c, dot, i, labels, dists)


@gpu_kernel
def _assign_kernel(x, c, dot, labels, dists):
    i = cuda.grid(1)
    if i < x.shape[0]:
        _nearest_row(x, c, dot, i, labels, dists)


@gpu_kernel
def _sums_kernel(x, labels, sums, counts):
    i = cuda.grid(1)
    if i < x.shape[0]:
        j = labels[i]
        cuda.atomic.add(counts, j, 1)
        for t in range(x.shape[1]):
            cuda.atomic.add(sums, (j, t), np.float64(x[i, t]))


def _check(x, c):
    if x.ndim != 2 or c.ndim != 2 or x.shape[1] != c.shape[1]:
        raise ValueError(f"rows {x.shape} and centroids {c.shape} must be 2-D of the same width")
    if c.shape[0] == 0:
        raise ValueError("no centroids")


def assign_nearest(x, c, dot=False):
    """(labels int64, distances float32) of the rows of ``x`` to the centroids ``c`` (CPU)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    c = np.ascontiguousarray(c, dtype=np.float32)
    _check(x, c)
    labels = np.empty(x.shape[0], np.int64)
    dists = np.empty(x.shape[0], np.float32)
    if x.shape[0]:
        _assign_cpu(x, c, bool(dot), labels, dists)
    return labels, dists


def assign_nearest_gpu(x, c, dot=False, *, threads_per_block=128):
    """GPU twin of :func:`assign_nearest`: device (labels, distances)."""
    use_cp = _device.wants_cupy(x, c)
    dx = _device.to_device(x, np.float32)
    dc = _device.to_device(c, np.float32)
    _check(dx, dc)
    n = dx.shape[0]
    labels = _device.device_empty(n, np.int64)
    dists = _device.device_empty(n, np.float32)
    if n:
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        _assign_kernel.get()[blocks, tpb](dx, dc, bool(dot), labels, dists)
    return _device.as_output(labels, use_cp), _device.as_output(dists, use_cp)


def cluster_sums_gpu(x, labels, k, *, threads_per_block=128):
    """Device (sums float64 ``k x d``, counts int64 ``k``) of the rows of ``x`` per label."""
    use_cp = _device.wants_cupy(x, labels)
    dx = _device.to_device(x, np.float32)
    dl = _device.to_device(labels, np.int64)
    n, d = dx.shape
    sums = _device.device_zeros(k * d, np.float64).reshape((k, d))
    counts = _device.device_zeros(k, np.int64)
    if n:
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        _sums_kernel.get()[blocks, tpb](dx, dl, sums, counts)
    return _device.as_output(sums, use_cp), _device.as_output(counts, use_cp)
