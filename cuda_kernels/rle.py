"""Run-length expansion.

``values[i]`` repeated ``run_lengths[i]`` times, for every run, concatenated::

    rle_expand([7, 9], [2, 3]) == [7, 7, 9, 9, 9]

An exclusive scan of the run lengths gives each run's first output position.
CPU: one loop over the runs (chunks of runs in parallel for large inputs).
GPU: one thread per run (Lance splits runs at 255 values, so the per-thread
work is small and bounded); the scan is ``cupy.cumsum`` (host without CuPy).
Thread numbers and a run's value counter are 32-bit, positions unsigned.

Batches of many chunks are handled by concatenating their values and run
lengths before the call.
"""

import numpy as np

from . import _device
from ._jitcache import LAZY_NUMBA as numba
from ._jitcache import prange
from ._target import LAZY_CUDA, cpu_driver, dual, gpu_kernel
from .errors import ERR_OUT_OF_BOUNDS, CorruptInputError

cuda = LAZY_CUDA

__all__ = ["rle_expand", "rle_expand_gpu"]

# prange drivers only above this size and with more than one numba thread: with one
# (pool threads that decode pages) the serial driver runs and the parfor one never compiles.
_PARALLEL_MIN_RUNS = 1 << 15
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dual
def _rle_fill_run(values, i, start, end, out):
    """Write run ``i`` (``values[i]``) at ``out[start:end]`` (``0 <= start <= end``): unsigned
    positions (no negative-index fix-up), counted in 32 bits by pieces of up to 2 ** 31."""
    v = values[i]
    o = np.uint64(start)
    left = np.uint64(end - start)
    while left > 0:
        n = np.uint32(min(left, np.uint64(1 << 31)))
        j = np.uint32(0)
        while j < n:
            out[o + j] = v
            j = np.uint32(j + 1)
        o += n
        left -= n


@cpu_driver
def _run_starts(run_lengths, starts):
    """starts[0] = 0, starts[i + 1] = starts[i] + run_lengths[i]; -1-based index of a negative run."""
    acc = np.int64(0)
    starts[0] = 0
    for i in range(run_lengths.shape[0]):
        n = np.int64(run_lengths[i])
        if n < 0:
            return i
        acc += n
        starts[i + 1] = acc
    return -1


@cpu_driver
def _expand_range(values, starts, out, lo, hi):
    for i in range(lo, hi):
        _rle_fill_run(values, i, starts[i], starts[i + 1], out)


@cpu_driver(parallel=True)
def _expand_parallel(values, starts, out, nchunks):
    n = values.shape[0]
    for ch in prange(nchunks):
        _expand_range(values, starts, out, ch * n // nchunks, (ch + 1) * n // nchunks)


@gpu_kernel
def _expand_kernel(values, starts, out):
    """Thread ``i`` (32-bit: fewer than 2 ** 31 runs per launch, the wrapper checks) writes run ``i``."""
    i = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if i < values.shape[0]:
        _rle_fill_run(values, i, starts[i], starts[i + 1], out)


def _as_numba_values(values):
    """View ``values`` as a dtype numba handles; returns (view, restore_dtype)."""
    values = np.ascontiguousarray(values)
    if values.ndim != 1:
        msg = "values must be a 1-D array"
        raise ValueError(msg)
    dt = values.dtype
    if dt.kind in "biuf" and dt.itemsize in _UNSIGNED and dt != np.float16:
        return values, dt
    udt = _UNSIGNED.get(dt.itemsize)
    if udt is not None:
        return values.view(udt), dt
    return None, dt


def rle_expand(values, run_lengths, out=None):
    """Expand runs (CPU).

    :param values: ``T[nruns]``, any fixed-width dtype.
    :param run_lengths: ``uint8/uint16/uint32/int64[nruns]``.
    :param out: optional ``T[sum(run_lengths)]`` output.
    :returns: ``T[sum(run_lengths)]``.
    :raises CorruptInputError: a run length is negative.
    """
    values = np.asarray(values)
    runs = np.ascontiguousarray(run_lengths)
    if runs.dtype.kind not in "iu" or runs.ndim != 1:
        msg = f"run_lengths must be a 1-D integer array, got {runs.dtype}"
        raise TypeError(msg)
    if runs.shape[0] != values.shape[0]:
        msg = f"values ({values.shape[0]}) and run_lengths ({runs.shape[0]}) differ in length"
        raise ValueError(msg)
    nruns = runs.shape[0]
    starts = np.empty(nruns + 1, dtype=np.int64)
    bad = _run_starts(runs, starts)
    if bad >= 0:
        msg = f"rle_expand: run {bad} has a negative length {int(runs[bad])}"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    total = int(starts[nruns])
    if out is None:
        out = np.empty(total, dtype=values.dtype)
    elif out.shape != (total,) or out.dtype != values.dtype:
        msg = f"out must be a {values.dtype} array of shape ({total},)"
        raise ValueError(msg)
    view, _ = _as_numba_values(values)
    if view is None:
        # Exotic widths (e.g. 16-byte decimals): expand an index instead.
        idx = rle_expand(np.arange(nruns, dtype=np.int64), runs)
        np.take(values, idx, axis=0, out=out)
        return out
    out_view = out.view(view.dtype)
    if nruns >= _PARALLEL_MIN_RUNS and numba.get_num_threads() > 1:
        nchunks = max(1, min(4 * numba.get_num_threads(), nruns // 4096))
        _expand_parallel(view, starts, out_view, nchunks)
    elif nruns:
        _expand_range(view, starts, out_view, 0, nruns)
    return out


def rle_expand_gpu(values, run_lengths, out=None, *, threads_per_block=256):
    """Expand runs on the GPU (one thread per run).  See :func:`rle_expand`.

    Inputs may be device arrays (numba, CuPy, ``__cuda_array_interface__``)
    or NumPy arrays.  Returns a device array (CuPy if any input was CuPy).
    Run lengths must be unsigned or non-negative (not checked on the device).
    """
    use_cp = _device.wants_cupy(values, run_lengths, out)
    d_vals = _device.to_device(values)
    dt = np.dtype(d_vals.dtype)
    if not (dt.kind in "biuf" and dt.itemsize in _UNSIGNED and dt != np.float16):
        udt = _UNSIGNED.get(dt.itemsize)
        if udt is None:
            msg = f"rle_expand_gpu: unsupported dtype {dt}"
            raise TypeError(msg)
        d_vals = d_vals.view(udt)
    d_runs = _device.to_device(run_lengths)
    nruns = d_vals.shape[0]
    if d_runs.shape[0] != nruns:
        msg = "values and run_lengths differ in length"
        raise ValueError(msg)
    d_starts, total = _device.exclusive_scan(d_runs)
    if out is None:
        d_out = _device.device_empty(total, d_vals.dtype)
    else:
        d_out = _device.to_device(out, d_vals.dtype)
        if d_out.shape[0] != total:
            msg = f"out must have {total} items"
            raise ValueError(msg)
    if nruns >= 1 << 31:  # the kernel counts its threads in 32 bits
        msg = f"rle_expand_gpu: {nruns} runs, at most 2 ** 31 - 1 in one call"
        raise ValueError(msg)
    if nruns and total:
        blocks, tpb = _device.launch_dims(nruns, threads_per_block)
        _expand_kernel.get()[blocks, tpb](d_vals, d_starts, d_out)
    if d_out.dtype != dt and out is None:
        d_out = d_out.view(dt)
    return _device.as_output(d_out, use_cp)
