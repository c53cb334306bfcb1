"""Dictionary gather: ``out[i] = items[indices[i]]`` with bounds checking.

* Fixed width: :func:`gather_fixed` (1-D items of any fixed-width dtype, or
  2-D items whose rows are gathered, e.g. ``fixed_size_binary`` as
  ``uint8[k, width]``).
* Variable width: :func:`gather_binary` takes Arrow-style ``item_offsets``
  (``k + 1``) and ``item_bytes`` and gathers whole items in three steps:
  lengths pass, exclusive scan, copy pass.

An index outside ``0 <= index < k`` (or item offsets outside the byte buffer)
is corrupt input: the CPU raises
:class:`~cuda_kernels.errors.CorruptInputError`; GPU kernels OR a device
error flag that the host wrapper turns into the same error.

GPU: one thread per output item in the lengths pass; the copy pass gives each item a
thread, or a warp when items are long (``gather_binary_gpu``), and stores whole aligned
8-byte words of the output where an item covers them (``segments._copy_span``, the
batched range copy's core).
"""

import numpy as np

from . import _device, _twins
from ._cpu import load_u64, store_u64
from ._jitcache import LAZY_NUMBA as numba
from ._jitcache import prange
from ._target import LAZY_CUDA, cpu_driver, dual, gpu_kernel
from .errors import ERR_OUT_OF_BOUNDS, CorruptInputError, new_error_flag, raise_if_flagged
from .segments import WARP, _copy_span, word_view

cuda = LAZY_CUDA

__all__ = ["gather_fixed", "gather_binary", "gather_fixed_gpu", "gather_binary_gpu"]

_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
# prange drivers only above this size and with more than one numba thread: with one
# (pool threads that decode pages) the serial driver runs and the parfor one never compiles.
_PARALLEL_MIN = 1 << 16


def _nchunks(n):
    return max(1, min(4 * numba.get_num_threads(), n // 4096))


# --------------------------------------------------------------------------
# Cores
# --------------------------------------------------------------------------


@dual
def _gather_one(items, indices, i, out):
    """out[i] = items[indices[i]]; returns False (and writes nothing) when out of bounds.
    The index is taken unsigned: a negative one wraps past every bound (one comparison, no
    negative-index fix-up)."""
    j = np.uint64(np.int64(indices[i]))
    if j >= np.uint64(items.shape[0]):
        return False
    out[i] = items[j]
    return True


@dual
def _gather_row(items, indices, i, out):
    """out[i, :] = items[indices[i], :] for 2-D arrays; False when out of bounds."""
    j = np.int64(indices[i])
    if j < 0 or j >= items.shape[0]:
        return False
    for k in range(items.shape[1]):
        out[i, k] = items[j, k]
    return True


@dual
def _item_length(item_offsets, n_bytes, indices, i):
    """Byte length of item ``indices[i]``, or -1 if the index or its offsets are out of bounds."""
    j = np.int64(indices[i])
    if j < 0 or j + 1 >= item_offsets.shape[0]:
        return -1
    s = np.int64(item_offsets[j])
    e = np.int64(item_offsets[j + 1])
    if s < 0 or e < s or e > n_bytes:
        return -1
    return e - s


@dual
def copy_strided(src, s, out, d, n, k, step):
    """``out[d + j] = src[s + j]`` for ``j = k, k + step, ... < n``: an item's bytes copied by
    one thread (``k = 0, step = 1``) or by the lanes of a warp (``k`` the lane, ``step`` 32:
    consecutive lanes on consecutive bytes, coalesced).  Bounds are the caller's to check."""
    k = np.int64(k)
    while k < n:
        out[d + k] = src[s + k]
        k += step


# --------------------------------------------------------------------------
# CPU drivers
# --------------------------------------------------------------------------


@cpu_driver(twin=_twins.gather_range)
def _gather_range(items, indices, out, lo, hi):
    bad = -1
    for i in range(lo, hi):
        if not _gather_one(items, indices, i, out) and bad < 0:
            bad = i
    return bad


@cpu_driver(parallel=True)
def _gather_parallel(items, indices, out, nchunks):
    n = indices.shape[0]
    bads = np.full(nchunks, -1, dtype=np.int64)
    for ch in prange(nchunks):
        bads[ch] = _gather_range(items, indices, out, ch * n // nchunks, (ch + 1) * n // nchunks)
    for ch in range(nchunks):
        if bads[ch] >= 0:
            return bads[ch]
    return -1


@cpu_driver
def _gather_rows(items, indices, out):
    for i in range(indices.shape[0]):
        if not _gather_row(items, indices, i, out):
            return i
    return -1


@cpu_driver(twin=_twins.binary_lengths)
def _binary_lengths(item_offsets, n_bytes, indices, out_offsets):
    """out_offsets = exclusive scan of the gathered lengths; returns first bad index or -1."""
    out_offsets[0] = 0
    acc = np.int64(0)
    for i in range(indices.shape[0]):
        n = _item_length(item_offsets, n_bytes, indices, i)
        if n < 0:
            return i
        acc += n
        out_offsets[i + 1] = acc
    return -1


@cpu_driver(twin=_twins.binary_copy_range)
def _binary_copy_range(item_offsets, item_bytes, indices, out_offsets, out_bytes, lo, hi):
    """Copy items lo..hi, eight bytes at a time where both sides have room.

    A wide store may spill up to seven bytes past its item; that is overwritten by the
    next item of this range, and never crosses ``out_offsets[hi]`` (another range's).
    """
    limit = out_offsets[hi]
    nb = item_bytes.shape[0]
    for i in range(lo, hi):
        s = np.int64(item_offsets[np.int64(indices[i])])
        d = out_offsets[i]
        n = out_offsets[i + 1] - d
        k = 0
        while k < n and d + k + 8 <= limit and s + k + 8 <= nb:
            store_u64(out_bytes, d + k, load_u64(item_bytes, s + k))  # type: ignore[operator]  # LazyIntrinsics: compiled code calls them
            k += 8
        while k < n:
            out_bytes[d + k] = item_bytes[s + k]
            k += 1


@cpu_driver(parallel=True)
def _binary_copy_parallel(item_offsets, item_bytes, indices, out_offsets, out_bytes, nchunks):
    n = indices.shape[0]
    for ch in prange(nchunks):
        _binary_copy_range(
            item_offsets, item_bytes, indices, out_offsets, out_bytes, ch * n // nchunks, (ch + 1) * n // nchunks
        )


# --------------------------------------------------------------------------
# GPU kernels
# --------------------------------------------------------------------------


@gpu_kernel
def _gather_kernel(items, indices, out, err):
    """Thread ``i`` (32-bit: fewer than 2 ** 31 indices per launch, the wrapper checks) gathers item ``indices[i]``."""
    i = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if i < indices.shape[0]:
        if not _gather_one(items, indices, i, out):
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)


@gpu_kernel
def _gather_rows_kernel(items, indices, out, err):
    i = cuda.grid(1)
    if i < indices.shape[0]:
        if not _gather_row(items, indices, i, out):
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)


@gpu_kernel
def _binary_lengths_kernel(item_offsets, n_bytes, indices, lengths, err):
    i = cuda.grid(1)
    if i < indices.shape[0]:
        n = _item_length(item_offsets, n_bytes, indices, i)
        if n < 0:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            n = 0
        lengths[i] = n


@gpu_kernel
def _binary_copy_kernel(item_offsets, item_bytes, indices, out_offsets, out_bytes, src_w, src_w0, dst_w, dst_w0):
    """Thread ``i`` copies item ``indices[i]`` (the lengths kernel has validated every index and
    offset), whole aligned words of ``out_bytes`` at a time (``segments._copy_span``)."""
    i = cuda.grid(1)
    if i < indices.shape[0]:
        s = np.int64(item_offsets[np.int64(indices[i])])
        d = out_offsets[i]
        _copy_span(item_bytes, src_w, src_w0, out_bytes, dst_w, dst_w0, s, d, out_offsets[i + 1] - d, 0, 1)


#: Items copied by a whole warp each (lanes on consecutive words, coalesced loads and stores)
#: once the gathered items average this many bytes; shorter ones one thread each.
WARP_COPY_MIN_AVERAGE = 32


@gpu_kernel
def _binary_copy_warps_kernel(item_offsets, item_bytes, indices, out_offsets, out_bytes, src_w, src_w0, dst_w, dst_w0):
    """Warp ``w`` copies item ``indices[w]``, lane ``l`` its destination words ``l, l + 32, ...``
    and its head and tail bytes (``segments._copy_span``; the lengths kernel has validated
    every index and offset)."""
    t = cuda.grid(1)
    w = t // WARP
    if w < indices.shape[0]:
        s = np.int64(item_offsets[np.int64(indices[w])])
        d = out_offsets[w]
        _copy_span(item_bytes, src_w, src_w0, out_bytes, dst_w, dst_w0, s, d, out_offsets[w + 1] - d, t % WARP, WARP)


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def _check_indices(indices):
    idx = np.ascontiguousarray(indices)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        msg = f"indices must be a 1-D integer array, got {idx.dtype} with {idx.ndim} dims"
        raise TypeError(msg)
    return idx


def _oob(what, i, j, k):
    msg = f"{what}: index {j} at position {i} is out of bounds for {k} items"
    return CorruptInputError(msg, ERR_OUT_OF_BOUNDS)


def _numba_view(items):
    """View ``items`` so numba can gather it: 1-D numeric, or 2-D uint8 rows."""
    dt = items.dtype
    if items.ndim == 1:
        if dt.kind in "biuf" and dt.itemsize in _UNSIGNED and dt != np.float16:
            return items
        udt = _UNSIGNED.get(dt.itemsize)
        if udt is not None:
            return items.view(udt)
    rows = items.reshape(items.shape[0], -1) if items.ndim > 1 else items.reshape(-1, 1)
    return np.ascontiguousarray(rows).view(np.uint8).reshape(items.shape[0], -1)


def gather_fixed(items, indices, empty=np.empty):
    """``items[indices]`` with bounds checking (CPU).

    :param items: ``T[k]`` (any fixed-width dtype) or ``T[k, ...]`` (rows are gathered).
    :param indices: integer ``[n]`` (any integer dtype).
    :param empty: allocator of the output, called as ``empty(count, dtype)`` for a 1-D
        array (numpy's by default; a caller may hand out pooled memory).
    :returns: ``T[n]`` (or ``T[n, ...]``).
    :raises CorruptInputError: an index is negative or ``>= k``.
    """
    items = np.ascontiguousarray(items)
    idx = _check_indices(indices)
    n = idx.shape[0]
    out = empty(n * int(np.prod(items.shape[1:], dtype=np.int64)), items.dtype).reshape((n, *items.shape[1:]))
    if n == 0:
        return out
    view = _numba_view(items)
    if view.ndim == 1:
        ov = out.view(view.dtype)
        if n >= _PARALLEL_MIN and numba.get_num_threads() > 1:
            bad = _gather_parallel(view, idx, ov, _nchunks(n))
        else:
            bad = _gather_range(view, idx, ov, 0, n)
    else:
        ov = out.reshape(n, -1).view(np.uint8).reshape(n, -1)
        bad = _gather_rows(view, idx, ov)
    if bad >= 0:
        raise _oob("gather_fixed", int(bad), int(idx[bad]), items.shape[0])
    return out


def gather_binary(item_offsets, item_bytes, indices, empty=np.empty):
    """Gather variable-width items (CPU): lengths pass, scan, copy pass.

    :param item_offsets: ``int64[k + 1]`` (int32 accepted) Arrow-style offsets.
    :param item_bytes: ``uint8`` buffer of the items.
    :param indices: integer ``[n]``.
    :param empty: allocator of the outputs, called as ``empty(count, dtype)`` (numpy's
        by default; a caller may hand out pooled memory).
    :returns: ``(out_offsets int64[n + 1], out_bytes uint8[out_offsets[-1]])``.
    :raises CorruptInputError: an index is out of bounds, or the offsets of a
        gathered item lie outside ``item_bytes``.
    """
    offs = np.ascontiguousarray(item_offsets)
    if offs.dtype.kind not in "iu" or offs.ndim != 1:
        msg = "item_offsets must be a 1-D integer array"
        raise TypeError(msg)
    data = np.ascontiguousarray(item_bytes).view(np.uint8).reshape(-1)
    idx = _check_indices(indices)
    n = idx.shape[0]
    out_offsets = empty(n + 1, np.int64)
    bad = _binary_lengths(offs, data.shape[0], idx, out_offsets)
    if bad >= 0:
        j = int(idx[bad])
        k = offs.shape[0] - 1
        if 0 <= j < k:
            msg = f"gather_binary: offsets of item {j} lie outside the {data.shape[0]}-byte buffer"
            raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
        raise _oob("gather_binary", int(bad), j, k)
    out_bytes = empty(int(out_offsets[n]), np.uint8)
    if n >= _PARALLEL_MIN and numba.get_num_threads() > 1:
        _binary_copy_parallel(offs, data, idx, out_offsets, out_bytes, _nchunks(n))
    elif n:
        _binary_copy_range(offs, data, idx, out_offsets, out_bytes, 0, n)
    return out_offsets, out_bytes


def gather_fixed_gpu(items, indices, *, threads_per_block=256):
    """``items[indices]`` on the GPU with bounds checking (one thread per output).

    1-D items of a 1/2/4/8-byte dtype, or 2-D items (rows are gathered).
    Returns a device array (CuPy if any input was CuPy).
    """
    use_cp = _device.wants_cupy(items, indices)
    d_items = _device.to_device(items)
    d_idx = _device.to_device(indices)
    if np.dtype(d_idx.dtype).kind not in "iu":
        msg = f"indices must be integers, got {d_idx.dtype}"
        raise TypeError(msg)
    n = d_idx.shape[0]
    k = d_items.shape[0]
    dt = np.dtype(d_items.dtype)
    shape = (n,) + tuple(d_items.shape[1:])
    d_out = _device.device_empty(shape, dt)
    if n >= 1 << 31:  # the kernels count their threads in 32 bits
        msg = f"gather_fixed_gpu: {n} indices, at most 2 ** 31 - 1 in one call"
        raise ValueError(msg)
    if n:
        err = new_error_flag()
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        plain = dt.kind in "biuf" and dt.itemsize in _UNSIGNED and dt != np.float16
        if d_items.ndim == 1 and (plain or dt.itemsize in _UNSIGNED):
            # exotic 1/2/4/8-byte dtypes (float16, datetime64, ...) move as unsigned ints
            udt = dt if plain else np.dtype(_UNSIGNED[dt.itemsize])
            _gather_kernel.get()[blocks, tpb](d_items.view(udt), d_idx, d_out.view(udt), err)
        else:
            # rows (2-D items, 16-byte values, ...) move as bytes
            per_row = int(np.prod(d_items.shape[1:], dtype=np.int64))
            row_bytes = dt.itemsize * per_row
            src = d_items.reshape(k, per_row).view(np.uint8)
            dst = d_out.reshape(n, per_row).view(np.uint8)
            assert src.shape[1] == row_bytes and dst.shape[1] == row_bytes
            _gather_rows_kernel.get()[blocks, tpb](src, d_idx, dst, err)
        raise_if_flagged(err, "gather_fixed_gpu")
    return _device.as_output(d_out, use_cp)


def gather_binary_gpu(item_offsets, item_bytes, indices, *, threads_per_block=256, warp_copy=None):
    """Gather variable-width items on the GPU: lengths kernel, scan, copy kernel.

    See :func:`gather_binary`.  Returns ``(out_offsets, out_bytes)`` device
    arrays (CuPy if any input was CuPy).  The copy gives each item a warp (lanes
    on consecutive bytes) when the items average :data:`WARP_COPY_MIN_AVERAGE`
    bytes or more (the scan's total is on the host by then), a thread otherwise;
    ``warp_copy`` True / False forces one way.
    """
    use_cp = _device.wants_cupy(item_offsets, item_bytes, indices)
    d_offs = _device.to_device(item_offsets)
    d_bytes = _device.to_device(item_bytes, np.uint8)
    d_idx = _device.to_device(indices)
    n = d_idx.shape[0]
    d_lens = _device.device_empty(n, np.int64)
    if n:
        err = new_error_flag()
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        _binary_lengths_kernel.get()[blocks, tpb](d_offs, np.int64(d_bytes.shape[0]), d_idx, d_lens, err)
        raise_if_flagged(err, "gather_binary_gpu")
    d_out_offsets, total = _device.exclusive_scan(d_lens)
    d_out = _device.device_empty(total, np.uint8)
    if n and total:
        by_warp = total >= WARP_COPY_MIN_AVERAGE * n if warp_copy is None else bool(warp_copy)
        words = (*word_view(d_bytes), *word_view(d_out))
        if by_warp:
            blocks, tpb = _device.launch_dims(n * WARP, threads_per_block)
            _binary_copy_warps_kernel.get()[blocks, tpb](d_offs, d_bytes, d_idx, d_out_offsets, d_out, *words)
        else:
            blocks, tpb = _device.launch_dims(n, threads_per_block)
            _binary_copy_kernel.get()[blocks, tpb](d_offs, d_bytes, d_idx, d_out_offsets, d_out, *words)
    return _device.as_output(d_out_offsets, use_cp), _device.as_output(d_out, use_cp)
