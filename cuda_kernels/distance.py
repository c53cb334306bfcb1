"""Vector distances and a running top-k, on the GPU (numba-cuda; the simulator runs them too).

Exact nearest-neighbour search over a stream of vector windows keeps, per query, the ``k``
smallest distances seen so far.  Everything here is format-agnostic:

* :func:`distance_tile_gpu` -- ``(queries, rows)`` float32 distances of a window of vectors
  ``x`` (``(rows, dim)``: float16 / float32 / float64, or uint8 for hamming) to the queries
  ``q`` (``(queries, dim)``), one thread per (row, query), operands staged through shared
  memory tile by tile (``TR`` rows x ``TQ`` queries x ``TD`` dimensions), accumulated in
  float32 (float64 for float64 vectors) and rounded to float32:

  - ``l2``: ``sum((x - q)^2)`` (squared, as pylance);
  - ``cosine``: ``1 - x.q / (|q| |x|)`` (a zero vector gives NaN: no distance);
  - ``dot``: ``1 - x.q``;
  - ``hamming``: differing bits of the uint8 bytes.

  Rows whose ``valid`` byte is 0 (null vectors) get NaN.
* :func:`segment_min_sum_gpu` -- multivector distances from a tile over every row's vectors:
  per row, the sum over query vectors of the distance to the row's nearest vector.
* :func:`topk_merge_gpu` -- the running top-k: every distance becomes a 64-bit *key*
  ``sortable(float32 bits) << 32 | seq`` where ``seq`` (below 2**32) is the row's rank in
  the order ties must break (the caller's row-address order), so keys are unique and the k
  smallest keys are exactly the k nearest rows, ties in ``seq`` order.  A NaN distance, or
  one outside ``[lower, upper)``, gets the key :data:`NO_KEY` (never selected).  The k-th
  smallest key of each query's running keys plus the window's is found by an MSB-first radix
  select (8 passes of 8 bits: a shared-memory histogram per block, then one thread per query
  walks it), and the keys at or below it are compacted, with their 64-bit payloads (row
  addresses), into the new running state.  A query with at most ``k`` valid keys keeps them
  all (the passes are skipped when every query is in that case).
* :func:`keys_to_distances` -- a key's float32 distance back (host side).
"""

# ruff: noqa: F821 -- the kernels' compile-time constants are declared for mypy only (below)
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _device
from ._target import LAZY_CUDA, dual, gpu_kernel

cuda = LAZY_CUDA

if TYPE_CHECKING:
    # the kernels' compile-time constants: globals bound by ``GpuKernel.get(...)`` when a
    # specialisation is compiled (declared here for the type checker only)
    METRIC: int
    TR: int
    TQ: int
    TD: int
    TDP: int
    ACC: Any
    HAS_VALID: bool
    NULL_ZERO: bool
    HAS_LOWER: bool
    HAS_UPPER: bool

__all__ = [
    "METRICS",
    "NO_KEY",
    "TopKState",
    "distance_tile_gpu",
    "keys_to_distances",
    "segment_min_sum_gpu",
    "sortable_bits",
    "topk_merge_gpu",
]

#: metric name -> the compile-time code the kernels branch on
METRICS = {"l2": 0, "cosine": 1, "dot": 2, "hamming": 3}
#: the key of "no distance" (null vector, NaN, outside the range, empty slot)
NO_KEY = np.uint64(0xFFFFFFFFFFFFFFFF)
_SIGN = 0x80000000
_LOW32 = 0xFFFFFFFF


# --------------------------------------------------------------------------------------------
# Distances


@gpu_kernel
def _distance_tile_kernel(x, q, valid, out):
    # constants: METRIC, TR (rows per block), TQ (queries per block), TD (dims per step),
    # TDP (TD + 1), ACC (accumulator type), HAS_VALID, NULL_ZERO (null rows are zero vectors,
    # not NaN distances)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    r0 = cuda.blockIdx.x * TR
    j0 = cuda.blockIdx.y * TQ
    i = r0 + tx
    j = j0 + ty
    n = x.shape[0]
    nq = q.shape[0]
    dim = x.shape[1]
    xs = cuda.shared.array((TR, TDP), ACC)  # TDP = TD + 1: a padded row, no bank conflicts
    qs = cuda.shared.array((TQ, TDP), ACC)
    t = ty * TR + tx
    acc = ACC(0)
    xx = ACC(0)
    qq = ACC(0)
    for d0 in range(0, dim, TD):
        for e in range(t, TR * TD, TR * TQ):
            rr = e // TD
            dd = e - rr * TD
            if r0 + rr < n and d0 + dd < dim and not (NULL_ZERO and valid[r0 + rr] == 0):
                xs[rr, dd] = ACC(x[r0 + rr, d0 + dd])
            else:
                xs[rr, dd] = ACC(0)
        for e in range(t, TQ * TD, TR * TQ):
            qr = e // TD
            dd = e - qr * TD
            if j0 + qr < nq and d0 + dd < dim:
                qs[qr, dd] = ACC(q[j0 + qr, d0 + dd])
            else:
                qs[qr, dd] = ACC(0)
        cuda.syncthreads()
        for dd in range(TD):
            a = xs[tx, dd]
            b = qs[ty, dd]
            if METRIC == 0:
                diff = a - b
                acc += diff * diff
            elif METRIC == 3:
                acc += ACC(cuda.popc(np.int32(a) ^ np.int32(b)))
            else:
                acc += a * b
                if METRIC == 1:
                    xx += a * a
                    qq += b * b
        cuda.syncthreads()
    if i < n and j < nq:
        if HAS_VALID and not NULL_ZERO and valid[i] == 0:
            out[j, i] = np.float32(math.nan)
        elif METRIC == 1:
            out[j, i] = np.float32(ACC(1) - acc / math.sqrt(qq) / math.sqrt(xx))
        elif METRIC == 2:
            out[j, i] = np.float32(ACC(1) - acc)
        else:
            out[j, i] = np.float32(acc)


def _threads():
    """Threads per block: 256 on a GPU; 32 under the simulator (a Python thread each)."""
    return 32 if _device.is_simulator() else 256


def _tile_shape(num_queries):
    """(rows, queries) per block: :func:`_threads` threads, up to 8 queries a block."""
    tq = 1
    while tq < min(8, num_queries):
        tq *= 2
    return max(1, _threads() // tq), tq


def distance_tile_gpu(x, q, metric, valid=None, out=None, *, dims_per_step=16, null_as_zero=False):
    """``(queries, rows)`` float32 distances of the device vectors ``x`` to the queries ``q``.

    :param x: device ``(rows, dim)`` float16 / float32 / float64 (uint8 for ``hamming``).
    :param q: ``(queries, dim)``, the same element type as ``x`` (float32 for float16 ``x``).
    :param metric: ``"l2"``, ``"cosine"``, ``"dot"`` or ``"hamming"``.
    :param valid: optional device uint8 / bool ``[rows]``: 0 marks a null vector (NaN out).
    :param out: optional device float32 ``(queries, rows)`` to write into.
    :param null_as_zero: a row whose ``valid`` byte is 0 is a zero vector (the vectors inside a
        multivector row, as pylance) rather than a NaN distance.
    """
    code = METRICS[metric]
    d_x = _device.to_device(x)
    d_q = _device.to_device(q)
    n, dim = int(d_x.shape[0]), int(d_x.shape[1])
    nq = int(d_q.shape[0])
    if out is None:
        out = _device.device_empty((nq, n), np.float32)
    if not n or not nq:
        return out
    acc = np.float64 if np.dtype(d_x.dtype) == np.float64 else np.float32
    tr, tq = _tile_shape(nq)
    has_valid = valid is not None
    d_valid = _device.to_device(valid).view(np.uint8) if has_valid else _device.device_empty(1, np.uint8)
    td = int(min(dims_per_step, max(dim, 1)))
    kernel = _distance_tile_kernel.get(METRIC=code, TR=tr, TQ=tq, TD=td, TDP=td + 1, ACC=acc, HAS_VALID=has_valid,
                                       NULL_ZERO=bool(null_as_zero and has_valid))
    kernel[(-(-n // tr), -(-nq // tq)), (tr, tq)](d_x, d_q, d_valid, out)
    return out


@gpu_kernel
def _segment_min_sum_kernel(dist, offsets, valid, out):
    # constants: HAS_VALID.  Row i owns vectors offsets[i]..offsets[i+1]: its distance is the
    # sum over query vectors j of the smallest dist[j, v] of its vectors (NaN propagates)
    i = cuda.grid(1)
    if i < out.shape[1]:
        start = offsets[i]
        stop = offsets[i + 1]
        if stop <= start or (HAS_VALID and valid[i] == 0):
            out[0, i] = np.float32(math.nan)
        else:
            total = np.float64(0)
            for j in range(dist.shape[0]):
                low = np.float64(math.inf)
                for v in range(start, stop):
                    d = np.float64(dist[j, v])
                    if d < low or d != d:
                        low = d
                    if low != low:
                        break
                total += low
            out[0, i] = np.float32(total)


def segment_min_sum_gpu(dist, offsets, out, valid=None, *, threads_per_block=None):
    """Multivector distances: for row ``i`` (vectors ``offsets[i]`` to ``offsets[i + 1]`` of
    ``dist``'s columns), ``sum_j min_v dist[j, v]`` into ``out[0, i]`` (float32; NaN for an
    empty row, a null row -- ``valid`` 0 -- or a NaN distance).

    :param dist: device float32 ``(query vectors, vectors)``.
    :param offsets: device int64 ``[rows + 1]`` into ``dist``'s columns.
    :param out: device float32 ``(1, rows)`` (may be a strided view).
    """
    d_off = _device.to_device(offsets)
    n = int(d_off.shape[0]) - 1
    if n <= 0:
        return out
    has_valid = valid is not None
    d_valid = _device.to_device(valid).view(np.uint8) if has_valid else _device.device_empty(1, np.uint8)
    blocks, tpb = _device.launch_dims(n, threads_per_block or _threads())
    _segment_min_sum_kernel.get(HAS_VALID=has_valid)[blocks, tpb](_device.to_device(dist), d_off, d_valid, out)
    return out


# --------------------------------------------------------------------------------------------
# Keys


@dual
def _sortable(bits):
    """An unsigned 32-bit image of float32 ``bits`` ordered as the floats (-0.0 as +0.0)."""
    b = np.uint64(bits)
    if b == np.uint64(_SIGN):  # -0.0
        b = np.uint64(0)
    if b & np.uint64(_SIGN):
        return (~b) & np.uint64(_LOW32)
    return b | np.uint64(_SIGN)


def sortable_bits(dist):
    """Host twin of the key's high half: the sortable uint32 image of float32 ``dist``."""
    bits = np.ascontiguousarray(dist, np.float32).view(np.uint32).astype(np.uint64)
    bits[bits == _SIGN] = 0
    neg = (bits & _SIGN) != 0
    return np.where(neg, (~bits) & _LOW32, bits | _SIGN)


def keys_to_distances(keys):
    """float32 distances of keys (:data:`NO_KEY` gives NaN)."""
    keys = np.asarray(keys, np.uint64)
    high = (keys >> np.uint64(32)).astype(np.uint64)
    bits = np.where(high & _SIGN, high & ~np.uint64(_SIGN) & np.uint64(_LOW32), (~high) & np.uint64(_LOW32))
    out = bits.astype(np.uint32).view(np.float32).copy()
    out[keys == NO_KEY] = np.nan
    return out


@gpu_kernel
def _keys_kernel(dist, bits, m, seq, lower, upper, keys, col0):
    # constants: HAS_LOWER, HAS_UPPER
    i, j = cuda.grid(2)
    if i < m and j < dist.shape[0]:
        d = dist[j, i]
        ok = d == d
        if HAS_LOWER and not d >= lower:
            ok = False
        if HAS_UPPER and not d < upper:
            ok = False
        if ok:
            keys[j, col0 + i] = (_sortable(bits[j, i]) << np.uint64(32)) | np.uint64(seq[i])
        else:
            keys[j, col0 + i] = np.uint64(0xFFFFFFFFFFFFFFFF)


@gpu_kernel
def _copy_running_kernel(run_keys, keys):
    i, j = cuda.grid(2)
    if i < run_keys.shape[1] and j < run_keys.shape[0]:
        keys[j, i] = run_keys[j, i]


# --------------------------------------------------------------------------------------------
# Radix select and compaction


@gpu_kernel
def _count_kernel(keys, counts):
    # grid-stride over one query's keys (blockIdx.y): valid keys counted per block, then added
    j = cuda.blockIdx.y
    c = 0
    for i in range(cuda.grid(1), keys.shape[1], cuda.gridDim.x * cuda.blockDim.x):
        if keys[j, i] != np.uint64(0xFFFFFFFFFFFFFFFF):
            c += 1
    if c:
        cuda.atomic.add(counts, j, c)


@gpu_kernel
def _hist_kernel(keys, prefix, shift, hist):
    # keys matching prefix above bit shift + 8: histogram of their 8 bits at shift
    sh = cuda.shared.array(256, np.int32)
    t = cuda.threadIdx.x
    for b in range(t, 256, cuda.blockDim.x):
        sh[b] = 0
    cuda.syncthreads()
    j = cuda.blockIdx.y
    for i in range(cuda.grid(1), keys.shape[1], cuda.gridDim.x * cuda.blockDim.x):
        key = keys[j, i]
        if key != np.uint64(0xFFFFFFFFFFFFFFFF):
            match = True
            if shift < 56:
                high = np.uint64(shift + 8)
                match = (key >> high) == (prefix[j] >> high)
            if match:
                cuda.atomic.add(sh, np.int32((key >> np.uint64(shift)) & np.uint64(255)), 1)
    cuda.syncthreads()
    for b in range(t, 256, cuda.blockDim.x):
        if sh[b]:
            cuda.atomic.add(hist, (j, b), sh[b])


@dual
def _pick_digit(hist, j, shift, rank, prefix):
    """Fix the digit at ``shift`` of query ``j``'s wanted key: the bucket holding rank
    ``rank[j]`` among the keys matching the prefix (the rank then counts within it)."""
    r = rank[j]
    below = 0
    for b in range(256):
        c = hist[j, b]
        if r < below + c:
            prefix[j] = prefix[j] | (np.uint64(b) << np.uint64(shift))
            rank[j] = r - below
            return
        below += c


@gpu_kernel
def _pick_kernel(hist, shift, rank, prefix, counts, k):
    j = cuda.grid(1)
    if j < rank.shape[0] and counts[j] > k:
        _pick_digit(hist, j, shift, rank, prefix)


@gpu_kernel
def _compact_kernel(keys, prefix, counts, k, run_pay, win_pay, fill, out_keys, out_pay):
    # keys at or below the k-th (every valid key where a query has at most k) -> running state
    j = cuda.blockIdx.y
    for i in range(cuda.grid(1), keys.shape[1], cuda.gridDim.x * cuda.blockDim.x):
        key = keys[j, i]
        if key != np.uint64(0xFFFFFFFFFFFFFFFF) and (counts[j] <= k or key <= prefix[j]):
            p = cuda.atomic.add(fill, j, 1)
            out_keys[j, p] = key
            if i < k:
                out_pay[j, p] = run_pay[j, i]
            else:
                out_pay[j, p] = win_pay[i - k]


def _filled(shape, dtype, value):
    """A device array of ``shape`` filled with ``value`` (under the simulator, whose device
    memory is host memory, filled by NumPy rather than by a kernel of Python threads)."""
    if _device.is_simulator():
        return _device.to_device(np.full(shape, value, dtype))
    size = int(np.prod(shape))
    return _device.device_full(size, dtype, value).reshape(shape)


class TopKState:
    """The running top-k of ``queries`` queries on the device: ``keys`` (``(queries, k)``
    uint64, unused slots :data:`NO_KEY`) and ``payload`` (``(queries, k)`` uint64)."""

    def __init__(self, num_queries, k):
        self.k = int(k)
        self.keys = _filled((int(num_queries), self.k), np.uint64, NO_KEY)
        self.payload = _filled((int(num_queries), self.k), np.uint64, 0)

    def to_host(self):
        """Per query, ``(keys, payloads)`` of its valid entries, in key order."""
        keys = _device.to_host(self.keys)
        pay = _device.to_host(self.payload)
        out = []
        for j in range(keys.shape[0]):
            order = np.argsort(keys[j], kind="stable")
            kj, pj = keys[j][order], pay[j][order]
            keep = kj != NO_KEY
            out.append((kj[keep], pj[keep]))
        return out


def topk_merge_gpu(state, dist, payload, seq, lower=None, upper=None, *, rows=None, threads_per_block=None):
    """Merge a window's distances into the running top-k ``state`` (in place).

    :param state: a :class:`TopKState`.
    :param dist: device float32 ``(queries, rows)`` distances (NaN: none; may be a strided view).
    :param payload: device uint64 ``[rows]`` carried with each selected row (its address).
    :param seq: device uint32 ``[rows]``: each row's rank in tie-breaking order, unique
        across every window merged into ``state``.
    :param lower, upper: optional distance range ``lower <= d < upper``.
    :param rows: how many of ``dist``'s columns hold this window's rows (default: all).
    """
    d_dist = _device.to_device(dist)
    nq, m = int(d_dist.shape[0]), int(d_dist.shape[1] if rows is None else rows)
    if not nq or not m:
        return state
    k = state.k
    w = k + m
    keys = _device.device_empty((nq, w), np.uint64)
    tpb = int(threads_per_block or _threads())
    rows_per_block, queries_per_block = _tile_shape(nq)
    if k:
        grid2 = (-(-k // rows_per_block), -(-nq // queries_per_block))
        _copy_running_kernel.get()[grid2, (rows_per_block, queries_per_block)](state.keys, keys)
    kern = _keys_kernel.get(HAS_LOWER=lower is not None, HAS_UPPER=upper is not None)
    kern[(-(-m // rows_per_block), -(-nq // queries_per_block)), (rows_per_block, queries_per_block)](
        d_dist, d_dist.view(np.uint32), np.int64(m), _device.to_device(seq),
        np.float32(0 if lower is None else lower), np.float32(0 if upper is None else upper), keys, np.int64(k))
    # grid-stride kernels: enough blocks per query to fill a GPU, one under the simulator
    grid = (1 if _device.is_simulator() else min(-(-w // tpb), 256), nq)
    counts = _filled(nq, np.int64, 0)
    _count_kernel.get()[grid, tpb](keys, counts)
    host_counts = _device.to_host(counts)
    prefix = _filled(nq, np.uint64, 0)
    if int(host_counts.max()) > k:
        rank = _device.to_device(np.full(nq, k - 1, np.int64))
        hist = _filled((8, nq, 256), np.int32, 0)
        qblocks, qtpb = _device.launch_dims(nq, min(tpb, 64))
        for p, shift in enumerate(range(56, -1, -8)):
            h = hist[p]
            _hist_kernel.get()[grid, tpb](keys, prefix, np.int64(shift), h)
            _pick_kernel.get()[qblocks, qtpb](h, np.int64(shift), rank, prefix, counts, np.int64(k))
    fill = _filled(nq, np.int32, 0)
    out_keys = _filled((nq, k), np.uint64, NO_KEY)
    out_pay = _device.device_empty((nq, k), np.uint64)
    _compact_kernel.get()[grid, tpb](keys, prefix, counts, np.int64(k), state.payload, _device.to_device(payload),
                                      fill, out_keys, out_pay)
    state.keys, state.payload = out_keys, out_pay
    return state
