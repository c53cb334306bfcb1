"""Encode primitives on the GPU: FastLanes packing, the statistics encoders choose by, and
levels from validity.

Each ``*_gpu`` function takes and returns numba device arrays (the simulator's under
``NUMBA_ENABLE_CUDASIM=1``) and reads back only what its docstring says it returns as a
Python value.  The FastLanes cores are :mod:`cuda_kernels.bitunpack`'s, so a block packed
here unpacks there bit for bit (and equals what :func:`cuda_kernels.bitunpack.pack_chunks`
writes on the CPU).

* :func:`block_bit_widths_gpu` -- bit width of each 1024-value block (one thread per block;
  the widths, ``n / 1024`` of them, come back to the host: the encoder sizes its output and
  decides on them).
* :func:`pack_chunks_gpu` -- InlineBitpacking chunks: per block its width word, then the
  block packed at that width (one thread per (block, lane)).
* :func:`pack_level_blocks_gpu` -- blocks of u16 levels packed at one width into given word
  offsets (OutOfLineBitpacking of rep / def levels per mini-block chunk).
* :func:`rows_all_equal_gpu`, :func:`run_count_gpu` -- is every ``width``-byte row equal to
  the first; how many runs of equal values (one scalar read back each).
* :func:`def_levels_from_validity_gpu` -- u16 definition levels ``1 - valid``.
* :func:`items_null_in_valid_rows_gpu`, :func:`zip_fsl_rows_gpu` -- fixed-size lists with
  item validity: do items matter (a null item in a valid row, one count read back); rows
  zipped with their validity bits for full-zip pages.
"""

import numpy as np

from . import _device
from ._target import LAZY_CUDA, gpu_kernel
from .bitunpack import BLOCK_SIZE, _fl_pack_value, _fl_position

cuda = LAZY_CUDA

#: bits per word: a compile-time constant bound by each specialisation (``kernel.get(T=32)``)
T: int

__all__ = [
    "block_bit_widths_gpu",
    "def_levels_from_validity_gpu",
    "items_null_in_valid_rows_gpu",
    "mask_fsl_items_gpu",
    "null_slots_to_gpu",
    "pack_chunks_gpu",
    "pack_level_blocks_gpu",
    "rows_all_equal_gpu",
    "run_count_gpu",
    "widen_decimal_to_128_gpu",
    "widen_to_int64_gpu",
    "zero_null_slots_gpu",
    "zip_fsl_rows_gpu",
]


@gpu_kernel
def _widths_kernel(values, n, widths):
    b = cuda.grid(1)
    if b >= widths.shape[0]:
        return
    acc = np.uint64(0)
    hi = min(n, b * 1024 + 1024)
    for i in range(b * 1024, hi):
        acc |= np.uint64(values[i])
    w = 0
    while acc:
        acc >>= np.uint64(1)
        w += 1
    widths[b] = w


@gpu_kernel
def _pack_chunks_kernel(values, n, widths, starts, out):
    # T (bits per word) is a compile-time constant; one thread per (block, lane); ``out``
    # is zeroed, each lane owns its words, so no atomics.
    lanes = 1024 // T  # noqa: F821
    tid = cuda.grid(1)
    b = tid // lanes
    lane = tid - b * lanes
    if b >= widths.shape[0]:
        return
    w = np.int64(widths[b])
    base = np.int64(starts[b])
    if lane == 0:
        out[base] = w
    if w == 0:
        return
    for row in range(T):  # noqa: F821
        pos = b * 1024 + _fl_position(row, lane)
        if pos < n:
            _fl_pack_value(out, base + 1, T, lanes, w, values[pos], row, lane)  # noqa: F821


@gpu_kernel
def _pack_levels_kernel(levels, src, count, dst, w, out):
    # blocks of u16 levels: block k packs levels[src[k] : src[k] + count[k]] (zero padded
    # to 1024) at width w into out[dst[k]:]; one thread per (block, lane), out zeroed
    lanes = 64
    tid = cuda.grid(1)
    k = tid // lanes
    lane = tid - k * lanes
    if k >= src.shape[0]:
        return
    base = np.int64(dst[k])
    first = np.int64(src[k])
    m = np.int64(count[k])
    for row in range(16):
        pos = _fl_position(row, lane)
        if pos < m:
            _fl_pack_value(out, base, 16, lanes, w, levels[first + pos], row, lane)


@gpu_kernel
def _rows_equal_kernel(data, width, nrows, flag):
    # grid-stride: each thread checks its rows and raises the flag once
    for i in range(cuda.grid(1), nrows, cuda.gridsize(1)):
        if flag[0]:
            return
        base = i * width
        for k in range(width):
            if data[base + k] != data[k]:
                flag[0] = 1
                return


@gpu_kernel
def _run_breaks_kernel(values, n, count):
    # grid-stride: one atomic add per thread, not per run
    local = 0
    for i in range(cuda.grid(1) + 1, n, cuda.gridsize(1)):
        if values[i] != values[i - 1]:
            local += 1
    if local:
        cuda.atomic.add(count, 0, local)


@gpu_kernel
def _def_from_valid_kernel(valid, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = 0 if valid[i] else 1


def _tpb(n):
    # the simulator runs each thread as a Python thread: small blocks keep it usable
    return 32 if _device.is_simulator() else 256


def _stride_dims(n):
    """Launch shape of the grid-stride kernels: about 8 items a thread on a GPU; a few
    looping threads under the simulator."""
    if _device.is_simulator():
        return max(1, min(4, -(-n // 256))), 32
    return _device.launch_dims(max(1, -(-n // 8)), 256)


def block_bit_widths_gpu(values):
    """Bit width of each 1024-value block of the unsigned device array ``values`` (the last
    block zero padded), read back as a host int64 array (at least one block)."""
    n = int(values.shape[0])
    nblocks = max(1, -(-n // BLOCK_SIZE))
    widths = _device.device_zeros(nblocks, np.int64)
    if n:
        blocks, tpb = _device.launch_dims(nblocks, _tpb(nblocks))
        _widths_kernel.get()[blocks, tpb](values, np.int64(n), widths)
    return widths.copy_to_host()


def pack_chunks_gpu(values, widths):
    """InlineBitpacking chunks of the unsigned device array ``values`` (uintT) at the host
    ``widths`` (one per 1024-value block, from :func:`block_bit_widths_gpu`): per block one
    T-bit word holding its width, then ``1024 * W / T`` FastLanes words.  Returns
    ``(device words, host words per chunk)``, as :func:`cuda_kernels.bitunpack.pack_chunks`."""
    dt = np.dtype(values.dtype)
    t = dt.itemsize * 8
    widths = np.ascontiguousarray(widths, np.int64)
    per_chunk = 1 + (BLOCK_SIZE // t) * widths
    starts = np.zeros(widths.shape[0], np.int64)
    np.cumsum(per_chunk[:-1], out=starts[1:])
    out = _device.device_zeros(int(per_chunk.sum()), dt)
    lanes = BLOCK_SIZE // t
    nthreads = widths.shape[0] * lanes
    blocks, tpb = _device.launch_dims(nthreads, _tpb(nthreads))
    _pack_chunks_kernel.get(T=t)[blocks, tpb](
        values, np.int64(values.shape[0]), _device.to_device(widths), _device.to_device(starts), out
    )
    return out, per_chunk


def pack_level_blocks_gpu(levels, src_starts, counts, dst_words, width, out):
    """Pack blocks of the device u16 ``levels`` into the zeroed device u16 array ``out``:
    block k takes ``levels[src_starts[k] : + counts[k]]`` (``counts[k] <= 1024``, zero
    padded) packed at ``width`` bits to ``out[dst_words[k] : + 64 * width]``."""
    nblk = int(np.asarray(src_starts).shape[0])
    if not nblk or not width:
        return out
    nthreads = nblk * 64
    blocks, tpb = _device.launch_dims(nthreads, _tpb(nthreads))
    _pack_levels_kernel.get()[blocks, tpb](
        levels,
        _device.to_device(np.ascontiguousarray(src_starts, np.int64)),
        _device.to_device(np.ascontiguousarray(counts, np.int64)),
        _device.to_device(np.ascontiguousarray(dst_words, np.int64)),
        np.int64(width),
        out,
    )
    return out


def rows_all_equal_gpu(data, width):
    """Is every ``width``-byte row of the device uint8 ``data`` equal to the first (one
    flag read back)?"""
    nrows = int(data.shape[0]) // int(width)
    if nrows < 2:
        return True
    flag = _device.device_zeros(1, np.int32)
    blocks, tpb = _stride_dims(nrows)
    _rows_equal_kernel.get()[blocks, tpb](data, np.int64(width), np.int64(nrows), flag)
    return int(flag.copy_to_host()[0]) == 0


def run_count_gpu(values):
    """Number of runs of equal consecutive values of a device array (one count read back)."""
    n = int(values.shape[0])
    if n == 0:
        return 0
    count = _device.device_zeros(1, np.int64)
    blocks, tpb = _stride_dims(n)
    _run_breaks_kernel.get()[blocks, tpb](values, np.int64(n), count)
    return int(count.copy_to_host()[0]) + 1


def def_levels_from_validity_gpu(valid):
    """u16 definition levels of one nullable item layer: 0 where ``valid``, 1 where not."""
    n = int(valid.shape[0])
    out = _device.device_empty(n, np.uint16)
    if n:
        blocks, tpb = _device.launch_dims(n, _tpb(n))
        _def_from_valid_kernel.get()[blocks, tpb](valid, out)
    return out


@gpu_kernel
def _widen_kernel(src, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = src[i]


def widen_to_int64_gpu(values):
    """A device int64 copy of a device integer array (int32 offsets into int64 ones)."""
    n = int(values.shape[0])
    out = _device.device_empty(n, np.int64)
    if n:
        blocks, tpb = _device.launch_dims(n, _tpb(n))
        _widen_kernel.get()[blocks, tpb](values, out)
    return out


@gpu_kernel
def _widen_decimal_kernel(src, out):
    # value i -> words 2i (low) and 2i + 1 (high: the sign, extended)
    i = cuda.grid(1)
    if i < src.shape[0]:
        v = np.int64(src[i])
        out[2 * i] = v
        out[2 * i + 1] = np.int64(-1) if v < 0 else np.int64(0)


def widen_decimal_to_128_gpu(values):
    """Device 32- or 64-bit decimal values (signed integers, cuDF's decimal32 / decimal64
    storage) as 128-bit ones: little-endian two's complement, 16 bytes a value (low word,
    then the sign-extended high word: Arrow's decimal128 layout), as device ``uint8``."""
    n = int(values.shape[0])
    out = _device.device_empty(2 * n, np.int64)
    if n:
        blocks, tpb = _device.launch_dims(n, _tpb(n))
        _widen_decimal_kernel.get()[blocks, tpb](values, out)
    return out.view(np.uint8)


@gpu_kernel
def _null_slots_kernel(indices, valid, sentinel, out):
    k = cuda.grid(1)
    if k < out.shape[0]:
        j = indices[k]
        out[k] = j if valid[j] else sentinel


def null_slots_to_gpu(indices, valid, sentinel):
    """Device int64 ``indices`` with those of null items (device bool ``valid`` at the
    index is False) replaced by ``sentinel``."""
    n = int(indices.shape[0])
    out = _device.device_empty(n, np.int64)
    if n:
        blocks, tpb = _device.launch_dims(n, _tpb(n))
        _null_slots_kernel.get()[blocks, tpb](indices, valid, np.int64(sentinel), out)
    return out


@gpu_kernel
def _zero_null_slots_kernel(data, indices, valid, width, total):
    for i in range(cuda.grid(1), total, cuda.gridsize(1)):
        if not valid[indices[i // width]]:
            data[i] = 0


def zero_null_slots_gpu(data, indices, valid, width):
    """Zero, in place, the ``width``-byte values of device ``uint8`` ``data`` (values
    gathered by ``indices``) whose item is null (device bool ``valid`` at the index is
    False): what ``pyarrow.Array.take`` writes in a null slot."""
    total = int(indices.shape[0]) * int(width)
    if total:
        blocks, tpb = _stride_dims(total)
        _zero_null_slots_kernel.get()[blocks, tpb](data, indices, valid, np.int64(width), np.int64(total))


@gpu_kernel
def _mask_fsl_items_kernel(data, items, rows, has_rows, dim, item_bytes, total):
    for i in range(cuda.grid(1), total, cuda.gridsize(1)):
        if has_rows and not rows[i // dim]:
            items[i] = False
        if not items[i]:
            for b in range(i * item_bytes, (i + 1) * item_bytes):
                data[b] = 0


def mask_fsl_items_gpu(data, items, rows, dim, item_bytes):
    """Gathered fixed-size lists as ``pyarrow.Array.take`` leaves them, in place: the items
    of a null row null (device bool ``items``, ``rows * dim``; ``rows`` device bool or
    None), and every null item's ``item_bytes`` bytes of device ``uint8`` ``data`` zero."""
    total = int(items.shape[0])
    if total == 0:
        return
    has_rows = rows is not None
    rv = rows if has_rows else _device.device_zeros(1, np.bool_)
    blocks, tpb = _stride_dims(total)
    _mask_fsl_items_kernel.get()[blocks, tpb](data, items, rv, has_rows, np.int64(dim), np.int64(item_bytes), np.int64(total))


@gpu_kernel
def _items_null_under_valid_kernel(items, rows_valid, has_rows, dim, total, count):
    # grid-stride: items null in a valid row; one atomic add per thread
    local = 0
    for i in range(cuda.grid(1), total, cuda.gridsize(1)):
        if not items[i] and (not has_rows or rows_valid[i // dim]):
            local += 1
    if local:
        cuda.atomic.add(count, 0, local)


def items_null_in_valid_rows_gpu(items, rows_valid, dim):
    """How many items of a fixed-size list (device bool ``items``, ``rows * dim``) are null
    in a valid row (device bool ``rows_valid``, or None: every row valid); one count read
    back."""
    total = int(items.shape[0])
    if total == 0:
        return 0
    count = _device.device_zeros(1, np.int64)
    has_rows = rows_valid is not None
    rv = rows_valid if has_rows else _device.device_zeros(1, np.bool_)
    blocks, tpb = _stride_dims(total)
    _items_null_under_valid_kernel.get()[blocks, tpb](items, rv, has_rows, np.int64(dim), np.int64(total), count)
    return int(count.copy_to_host()[0])


@gpu_kernel
def _zip_fsl_rows_kernel(items, data, dim, vbytes, row_bytes, total, out):
    # one thread per output byte (grid-stride): a row is its items' validity bits (LSB
    # first, ``vbytes`` bytes) then its ``row_bytes`` value bytes
    width = vbytes + row_bytes
    for k in range(cuda.grid(1), total, cuda.gridsize(1)):
        row = k // width
        j = k - row * width
        if j < vbytes:
            byte = 0
            first = row * dim + 8 * j
            for b in range(8):
                if 8 * j + b < dim and items[first + b]:
                    byte |= 1 << b
            out[k] = byte
        else:
            out[k] = data[row * row_bytes + (j - vbytes)]


def zip_fsl_rows_gpu(items, data, rows, dim, row_bytes):
    """Full-zip values of fixed-size lists with item validity: per row ``ceil(dim / 8)``
    bytes of its items' validity bits (LSB first), then its ``row_bytes`` value bytes
    (``row_bytes`` 0: validity only).  Device uint8 ``rows * (ceil(dim / 8) + row_bytes)``."""
    vbytes = -(-dim // 8)
    total = rows * (vbytes + row_bytes)
    out = _device.device_empty(total, np.uint8)
    if total:
        blocks, tpb = _stride_dims(total)
        src = data if row_bytes else _device.device_zeros(1, np.uint8)
        _zip_fsl_rows_kernel.get()[blocks, tpb](items, src, np.int64(dim), np.int64(vbytes), np.int64(row_bytes), np.int64(total), out)
    return out
