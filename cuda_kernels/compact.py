"""Deletion masking and stream compaction.

* :func:`keep_mask_from_deleted` turns a list of deleted row offsets (as read
  from a deletion file) into a boolean keep-mask.
* Compaction keeps the rows whose mask is True:

  - fixed width: ``values[mask]`` (CPU: NumPy; GPU: ``cupy`` boolean indexing,
    or a scan + scatter kernel without CuPy);
  - variable width (Arrow offsets + bytes): the kept row numbers are
    computed once and the rows are gathered with the lengths / scan / copy
    kernels of :mod:`cuda_kernels.gather`.
"""

import numpy as np

from . import _device
from ._target import LAZY_CUDA, cpu_driver, dual, gpu_kernel
from .errors import ERR_OUT_OF_BOUNDS, CorruptInputError, new_error_flag, raise_if_flagged
from .gather import gather_binary, gather_binary_gpu, gather_fixed_gpu

cuda = LAZY_CUDA

__all__ = [
    "keep_mask_from_deleted",
    "keep_mask_from_deleted_gpu",
    "compact_fixed",
    "compact_binary",
    "compact_fixed_gpu",
    "compact_binary_gpu",
    "kept_indices_gpu",
]


@dual
def _clear_deleted(deleted, i, num_rows, mask):
    """mask[deleted[i]] = False; returns False when the offset is out of range."""
    d = np.int64(deleted[i])
    if d < 0 or d >= num_rows:
        return False
    mask[d] = False
    return True


@dual
def _scatter_kept(mask, positions, i, out):
    """If row ``i`` is kept, out[positions[i]] = i (positions = exclusive scan of mask)."""
    if mask[i]:
        out[positions[i]] = i


@cpu_driver
def _keep_mask_cpu(num_rows, deleted, mask):
    for i in range(mask.shape[0]):
        mask[i] = True
    for i in range(deleted.shape[0]):
        if not _clear_deleted(deleted, i, num_rows, mask):
            return i
    return -1


@gpu_kernel
def _clear_deleted_kernel(deleted, num_rows, mask, err):
    i = cuda.grid(1)
    if i < deleted.shape[0]:
        if not _clear_deleted(deleted, i, num_rows, mask):
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)


@gpu_kernel
def _scatter_kept_kernel(mask, positions, out):
    i = cuda.grid(1)
    if i < mask.shape[0]:
        _scatter_kept(mask, positions, i, out)


def keep_mask_from_deleted(num_rows, deleted_offsets):
    """Boolean keep-mask of ``num_rows`` rows with the deleted offsets set to False.

    :param num_rows: number of rows (physical rows of the fragment).
    :param deleted_offsets: integer array of deleted row offsets (any order, duplicates allowed).
    :raises CorruptInputError: an offset is negative or ``>= num_rows``.
    """
    num_rows = int(num_rows)
    deleted = np.ascontiguousarray(deleted_offsets)
    if deleted.dtype.kind not in "iu":
        deleted = deleted.astype(np.int64)
    mask = np.empty(num_rows, dtype=np.bool_)
    bad = _keep_mask_cpu(num_rows, deleted.reshape(-1), mask)
    if bad >= 0:
        msg = f"deleted row offset {int(deleted.reshape(-1)[bad])} is outside 0..{num_rows - 1}"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    return mask


def keep_mask_from_deleted_gpu(num_rows, deleted_offsets, *, threads_per_block=256):
    """GPU twin of :func:`keep_mask_from_deleted`; returns a device bool array."""
    use_cp = _device.wants_cupy(deleted_offsets)
    d_del = _device.to_device(deleted_offsets)
    mask = _device.device_full(num_rows, np.bool_, True)
    n = d_del.shape[0]
    if n:
        err = new_error_flag()
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        _clear_deleted_kernel.get()[blocks, tpb](d_del, np.int64(num_rows), mask, err)
        raise_if_flagged(err, "keep_mask_from_deleted_gpu")
    return _device.as_output(mask, use_cp)


def _check_mask(mask, n):
    mask = np.asarray(mask)
    if mask.dtype != np.bool_ or mask.shape != (n,):
        msg = f"mask must be a bool array of shape ({n},)"
        raise ValueError(msg)
    return mask


def compact_fixed(values, mask):
    """``values[mask]`` (CPU).  ``values`` may be N-D; rows are kept."""
    values = np.asarray(values)
    return values[_check_mask(mask, values.shape[0])]


def compact_binary(offsets, data, mask):
    """Keep the variable-width rows where ``mask`` is True (CPU).

    :param offsets: ``int32/int64[n + 1]`` Arrow offsets.
    :param data: ``uint8`` bytes.
    :param mask: ``bool[n]``.
    :returns: ``(out_offsets int64[m + 1], out_bytes uint8)``.
    """
    offsets = np.asarray(offsets)
    mask = _check_mask(mask, offsets.shape[0] - 1)
    return gather_binary(offsets, data, np.flatnonzero(mask))


def kept_indices_gpu(mask, *, threads_per_block=256):
    """Row numbers where the device bool ``mask`` is True, as a device int64 array."""
    cp = _device.get_cupy()
    if cp is not None:
        return _device.adopt(cp.flatnonzero(cp.asarray(mask)).astype(cp.int64))
    d_mask = _device.to_device(mask)
    n = d_mask.shape[0]
    positions, total = _device.exclusive_scan(d_mask.view(np.uint8) if np.dtype(d_mask.dtype) == np.bool_ else d_mask)
    out = _device.device_empty(total, np.int64)
    if n and total:
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        _scatter_kept_kernel.get()[blocks, tpb](d_mask, positions, out)
    return out


def compact_fixed_gpu(values, mask):
    """``values[mask]`` on the GPU (CuPy boolean indexing, else scan + gather)."""
    use_cp = _device.wants_cupy(values, mask)
    cp = _device.get_cupy()
    if cp is not None:
        res = cp.asarray(values)[cp.asarray(mask)]
        return res if use_cp else _device.adopt(res)
    return gather_fixed_gpu(values, kept_indices_gpu(mask))


def compact_binary_gpu(offsets, data, mask):
    """Keep variable-width rows on the GPU: kept indices, then lengths / scan / copy kernels."""
    use_cp = _device.wants_cupy(offsets, data, mask)
    out_offsets, out_bytes = gather_binary_gpu(offsets, data, kept_indices_gpu(mask))
    if use_cp:
        cp = _device.get_cupy()
        return cp.asarray(out_offsets), cp.asarray(out_bytes)
    return out_offsets, out_bytes
