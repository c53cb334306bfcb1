"""Columns assembled from pieces of other device buffers, in one launch per source allocation.

A read's result is made of *pieces*: row ranges of columns decoded into the buffers of
several read units (and fragments).  Putting them into one set of final buffers (cuDF's
layout: int32 offsets starting at 0, validity as bitmask words) takes, besides the batched
byte copy (:func:`cuda_kernels.segments.copy_ranges_gpu`), two segmented primitives, each
over every piece of every column that lives in one source allocation:

* :func:`rebase_offsets_segments` -- segment ``s`` writes ``counts[s]`` offsets at
  ``out[dst[s]:]``: ``src[at[s] + i] - base[s] + shift[s]`` when ``at[s] >= 0`` (a piece's
  offsets moved to where its bytes / children land), else the arithmetic run
  ``shift[s] + i * stride[s]`` (the final offset of a column, fixed-size list offsets).
  ``out`` is int32 or int64; ``src`` int64.  A count of one with base 0 and shift 0 is a
  gather of single values (the bounds of pieces whose span the host does not know).  By
  position (``first[s] >= 0``, given ``pos`` and ``delta``): offset ``i`` is
  ``src[at[s] + pos[first[s] + i]] + delta[dfirst[s] + i] - base[s] + shift[s]`` (a
  selection's rows of a column, each moved to where its run lands).
* :func:`pack_bitmask_segments` -- segment ``s`` sets the ``counts[s]`` validity bits
  starting at bit ``dst[s]`` of the uint32 words ``out`` (LSB first, Arrow's order) from
  its source in ``src`` (viewed as bytes), and adds the segment's nulls to
  ``nulls[column[s]]``.  The source is the bool bytes ``src[at[s]:]``, or, where
  ``bits[s]`` is 1, the bits from bit ``at[s]`` of ``src`` read as an Arrow bitmap (uint32
  bitmask words are one: their bytes in memory order); ``at[s] == -1``: all valid, ``-2``:
  all null.  One thread per destination word of a segment: from bits it reads the (at most
  five) source bytes covering the word's bits, shifts them into place and counts the nulls
  with a population count, so a piece lands at any bit whatever its source bit.  Words
  shared by two segments are OR-ed atomically, so ``out`` must start zeroed.  Bytes and
  bits sources of one allocation go in the same launch.
* :func:`copy_bitmask_segments` -- the same with every segment's source bits of uint32
  bitmask words ``src`` (``at`` a bit position).
* :func:`and_bitmask_segments` -- segment ``s`` ANDs the ``counts[s]`` words
  ``out[dst[s]:]`` with the words ``out[src[s]:]`` (a struct child's mask with its
  parent's: cuDF's children carry the parent's nulls) and adds the nulls that made to
  ``nulls[column[s]]`` (population counts before and after); one thread per word.  The
  bits past a column's rows are 0 in both, so whole words are AND-ed.
* :func:`gather_rows_segments` -- segment ``s`` writes ``counts[s]`` rows of ``width[s]``
  bytes at byte ``dst[s]`` of ``out``: row ``i`` is the row ``pos[first[s] + i]`` of the
  rows starting at byte ``at[s]`` of ``src`` (bytes), i.e. a gather of rows by host-known
  positions straight into a final buffer; ``pos`` is shared by the segments (columns of one
  selection), the descriptors are per segment, one thread per output byte.
* :func:`gather_bits_segments` -- :func:`pack_bitmask_segments` with a gather: segment ``s``
  sets the ``counts[s]`` bits from bit ``dst[s]`` of ``out`` to the validity of the rows
  ``pos[first[s] + i]`` of its source (bool bytes from byte ``at[s]``, or, where
  ``bits[s]``, bits from bit ``at[s]``), one thread per destination word, and adds its nulls
  to ``nulls[column[s]]``.
* :func:`gather_var_segments` -- variable-width rows (strings, binary) gathered by host-known
  positions: segment ``s`` copies, for each of its ``counts[s]`` rows ``p = pos[first[s] +
  i]``, the bytes ``offsets[j] .. offsets[j + 1]`` (``j = at[s] + p``; ``offsets`` int64) from
  byte ``data[s]`` of ``src`` to ``out[dst[s] + offsets[j] + delta[dfirst[s] + i]:]``: with
  ``delta`` what moves a row's source offset to its offset in the output (per row; for the
  rows of a run of consecutive rows one value), the rows land one after the other, as the
  offsets :func:`rebase_offsets_segments` writes by position say.  One thread per row, or a
  warp per row (its lanes on consecutive bytes, ``gather.copy_strided``) where the rows
  average ``gather.WARP_COPY_MIN_AVERAGE`` bytes or more.
* :func:`count_zero_bits` -- the 0 bits (nulls) among bits ``[offset, offset + n)`` of uint32
  bitmask words: one thread per word, a population count and one atomic each, no descriptor
  to upload.

Every kernel here numbers its threads, finds its segment
(:func:`~cuda_kernels.segments._segment_of32`) and counts a segment's items or a word's bits
in unsigned 32 bits; positions in the arrays stay 64-bit.  A call covers at most ``2 ** 31 -
1`` threads (destination words, offsets, bytes or rows; more: ``ValueError``); the string
gather takes a thread per row where a warp per row would pass that.

A source outside its array flags ``ERR_OUT_OF_BOUNDS`` (``CorruptInputError``), as the other
segment primitives do.  The CPU functions of the same names are the references.
"""

import numpy as np

from . import _device
from ._target import LAZY_CUDA, dual, gpu_kernel
from .errors import ERR_OUT_OF_BOUNDS, CorruptInputError, new_error_flag, raise_if_flagged
from .gather import WARP_COPY_MIN_AVERAGE, copy_strided
from .segments import MAX_ITEMS32, _descriptor, _i64, _prefix_host, _segment_of32, launch_dims32

cuda = LAZY_CUDA

__all__ = [
    "and_bitmask_segments",
    "and_bitmask_segments_gpu",
    "copy_bitmask_segments",
    "copy_bitmask_segments_gpu",
    "count_zero_bits",
    "count_zero_bits_gpu",
    "gather_bits_segments",
    "gather_bits_segments_gpu",
    "gather_rows_segments",
    "gather_rows_segments_gpu",
    "gather_var_segments",
    "gather_var_segments_gpu",
    "pack_bitmask_segments",
    "pack_bitmask_segments_gpu",
    "rebase_offsets_segments",
    "rebase_offsets_segments_gpu",
    "segment_words",
]


# --------------------------------------------------------------------------
# CPU references
# --------------------------------------------------------------------------


def rebase_offsets_segments(src, at, counts, base, shift, stride, out, dst, *, pos=None, first=None, delta=None, dfirst=None):
    """CPU reference of :func:`rebase_offsets_segments_gpu` (``out`` written in place)."""
    src = np.asarray(src, np.int64)
    nseg = len(_i64(at))
    first = np.full(nseg, -1, np.int64) if first is None else _i64(first)
    dfirst = np.zeros(nseg, np.int64) if dfirst is None else _i64(dfirst)
    pos, delta = _i64(np.zeros(0) if pos is None else pos), _i64(np.zeros(0) if delta is None else delta)
    for a, n, b, sh, st, d, f, df in zip(*(_i64(x).tolist() for x in (at, counts, base, shift, stride, dst, first, dfirst)), strict=True):
        if not n:
            continue
        if f >= 0:
            if f + n > pos.size or df < 0 or df + n > delta.size or d < 0 or d + n > out.size:
                raise CorruptInputError("rebase_offsets_segments: a segment reaches outside its arrays", ERR_OUT_OF_BOUNDS)
            j = a + pos[f : f + n]
            if n and (int(j.min()) < 0 or int(j.max()) >= src.size):
                raise CorruptInputError("rebase_offsets_segments: a row outside its offsets", ERR_OUT_OF_BOUNDS)
            out[d : d + n] = src[j] + delta[df : df + n] - b + sh
        elif a >= 0:
            if a + n > src.size or d < 0 or d + n > out.size:
                raise CorruptInputError("rebase_offsets_segments: a segment reaches outside its arrays", ERR_OUT_OF_BOUNDS)
            out[d : d + n] = src[a : a + n] - b + sh
        else:
            if d < 0 or d + n > out.size:
                raise CorruptInputError("rebase_offsets_segments: a segment reaches outside its arrays", ERR_OUT_OF_BOUNDS)
            out[d : d + n] = sh + np.arange(n, dtype=np.int64) * st
    return out


def pack_bitmask_segments(src, at, counts, dst, column, out, nulls, bits=None):
    """CPU reference of :func:`pack_bitmask_segments_gpu` (``out`` uint32 words, OR-ed into)."""
    src = np.asarray(src)
    as_bits = None
    out_bits = np.unpackbits(out.view(np.uint8), bitorder="little").astype(bool)
    kinds = np.zeros(len(_i64(at)), np.int64) if bits is None else _i64(bits)
    for a, n, d, c, k in zip(*(_i64(x).tolist() for x in (at, counts, dst, column, kinds)), strict=True):
        if not n:
            continue
        if a >= 0 and k:
            if as_bits is None:
                as_bits = np.unpackbits(np.ascontiguousarray(src).view(np.uint8), bitorder="little")
            if a + n > as_bits.size:
                raise CorruptInputError("pack_bitmask_segments: a segment reaches outside its source", ERR_OUT_OF_BOUNDS)
            valid = as_bits[a : a + n] != 0
        elif a >= 0:
            if a + n > src.size:
                raise CorruptInputError("pack_bitmask_segments: a segment reaches outside its source", ERR_OUT_OF_BOUNDS)
            valid = src[a : a + n] != 0
        else:
            valid = np.full(n, a == -1)
        out_bits[d : d + n] |= valid
        nulls[c] += int(n - np.count_nonzero(valid))
    out[:] = np.packbits(out_bits, bitorder="little").view(out.dtype)
    return out


def copy_bitmask_segments(src, at, counts, dst, column, out, nulls):
    """CPU reference of :func:`copy_bitmask_segments_gpu` (``src`` and ``out`` uint32
    words, ``at`` bit positions; ``out`` OR-ed into)."""
    words = np.ascontiguousarray(src, np.uint32)
    return pack_bitmask_segments(words, at, counts, dst, column, out, nulls, np.ones(len(_i64(at)), np.int64))


def and_bitmask_segments(out, dst, src, counts, column, nulls):
    """CPU reference of :func:`and_bitmask_segments_gpu` (``out`` uint32 words, in place)."""
    for d, sr, n, c in zip(*(_i64(x).tolist() for x in (dst, src, counts, column)), strict=True):
        if not n:
            continue
        if min(d, sr) < 0 or max(d, sr) + n > out.size:
            raise CorruptInputError("and_bitmask_segments: a segment reaches outside its words", ERR_OUT_OF_BOUNDS)
        before = out[d : d + n].copy()
        out[d : d + n] &= out[sr : sr + n]
        lost = np.unpackbits(before.view(np.uint8)).sum() - np.unpackbits(out[d : d + n].view(np.uint8)).sum()
        nulls[c] += int(lost)
    return out


def gather_rows_segments(src, pos, at, first, width, nbytes, out, dst):
    """CPU reference of :func:`gather_rows_segments_gpu` (``src`` and ``out`` bytes, ``out``
    written in place; ``nbytes[s]`` = rows times ``width[s]``)."""
    src = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
    pos = _i64(pos)
    for a, f, w, nb, d in zip(*(_i64(x).tolist() for x in (at, first, width, nbytes, dst)), strict=True):
        if not nb:
            continue
        n = nb // w
        p = pos[f : f + n] if 0 <= f and f + n <= pos.size else None
        if p is None or (n and (int(p.min()) < 0 or a < 0 or a + (int(p.max()) + 1) * w > src.size)) or d < 0 or d + nb > out.size:
            raise CorruptInputError("gather_rows_segments: a segment reaches outside its arrays", ERR_OUT_OF_BOUNDS)
        out[d : d + nb] = src[a + p[:, None] * w + np.arange(w)].reshape(-1)
    return out


def gather_bits_segments(src, pos, at, first, counts, dst, column, out, nulls, bits=None):
    """CPU reference of :func:`gather_bits_segments_gpu` (``out`` uint32 words, OR-ed into)."""
    src = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
    pos = _i64(pos)
    as_bits = np.unpackbits(src, bitorder="little")
    out_bits = np.unpackbits(out.view(np.uint8), bitorder="little").astype(bool)
    kinds = np.zeros(len(_i64(at)), np.int64) if bits is None else _i64(bits)
    for a, f, n, d, c, k in zip(*(_i64(x).tolist() for x in (at, first, counts, dst, column, kinds)), strict=True):
        if not n:
            continue
        if f < 0 or f + n > pos.size:
            raise CorruptInputError("gather_bits_segments: a segment reaches outside its positions", ERR_OUT_OF_BOUNDS)
        idx = a + pos[f : f + n]
        source = as_bits if k else src
        if int(idx.min()) < 0 or int(idx.max()) >= source.size or d < 0 or d + n > out_bits.size:
            raise CorruptInputError("gather_bits_segments: a segment reaches outside its arrays", ERR_OUT_OF_BOUNDS)
        valid = source[idx] != 0
        out_bits[d : d + n] |= valid
        nulls[c] += int(n - np.count_nonzero(valid))
    out[:] = np.packbits(out_bits, bitorder="little").view(out.dtype)
    return out


def gather_var_segments(offsets, src, pos, delta, at, data, first, dfirst, counts, dst, out):
    """CPU reference of :func:`gather_var_segments_gpu` (``src`` and ``out`` bytes, ``out``
    written in place)."""
    offsets, pos, delta = _i64(offsets), _i64(pos), _i64(delta)
    src = np.ascontiguousarray(src).reshape(-1).view(np.uint8)
    for a, b, f, df, n, d in zip(*(_i64(x).tolist() for x in (at, data, first, dfirst, counts, dst)), strict=True):
        if not n:
            continue
        if f < 0 or f + n > pos.size or df < 0 or df + n > delta.size:
            raise CorruptInputError("gather_var_segments: a segment reaches outside its positions", ERR_OUT_OF_BOUNDS)
        for p, move in zip(pos[f : f + n].tolist(), delta[df : df + n].tolist(), strict=True):
            j = a + p
            if j < 0 or j + 1 >= offsets.size:
                raise CorruptInputError("gather_var_segments: a row outside its offsets", ERR_OUT_OF_BOUNDS)
            lo, k = int(offsets[j]), int(offsets[j + 1] - offsets[j])
            to = d + lo + move
            if k < 0 or b + lo < 0 or b + lo + k > src.size or to < 0 or to + k > out.size:
                raise CorruptInputError("gather_var_segments: a row's bytes reach outside their arrays", ERR_OUT_OF_BOUNDS)
            out[to : to + k] = src[b + lo : b + lo + k]
    return out


def count_zero_bits(words, offset, n):
    """CPU reference of :func:`count_zero_bits_gpu`."""
    bits = np.unpackbits(np.ascontiguousarray(words, np.uint32).view(np.uint8), bitorder="little")
    if offset < 0 or offset + n > bits.size:
        raise CorruptInputError("count_zero_bits: the bits reach outside the words", ERR_OUT_OF_BOUNDS)
    return int(n - np.count_nonzero(bits[offset : offset + n]))


# --------------------------------------------------------------------------
# GPU kernels
# --------------------------------------------------------------------------


@dual
def _word_of_segment(prefix, nseg, k, dst, counts):
    """Thread ``k`` of a launch over destination words: its segment ``s``, the segment's
    first destination bit ``d0``, the word ``word`` it writes and the segment's bits
    ``[lo, hi)`` in that word (at most 32: a segment's first and last words are partial),
    for segments of ``counts[s]`` bits from bit ``dst[s]`` (``prefix``: their word counts'
    exclusive scan, what :func:`segment_words` gives)."""
    s = _segment_of32(prefix, nseg, k)
    d0 = np.int64(dst[s])
    word = (d0 >> 5) + np.int64(np.uint32(k - np.uint32(prefix[s])))
    lo = max(d0, word * 32)
    hi = min(d0 + np.int64(counts[s]), word * 32 + 32)
    return s, d0, word, lo, hi


@dual
def _or_word_bits(out, word, lo, nb, v, nulls, column):
    """OR the ``nb`` bits ``v`` (bit 0: the segment's bit ``lo``) into word ``word`` of
    ``out`` at bit ``lo % 32`` (atomically: a word two segments share gets both), and add
    the 0 bits among them to ``nulls[column]``.  Device code only (atomics)."""
    zeros = nb - np.int64(cuda.popc(v))
    if v:
        cuda.atomic.or_(out, word, np.uint32(v << np.uint64(lo & 31)))
    if zeros:
        cuda.atomic.add(nulls, np.int64(column), zeros)


@gpu_kernel
def _rebase_kernel(src, at, base, shift, stride, dst, prefix, nseg, total, out, bypos, pos, first, delta, dfirst, err):
    k = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if k >= np.uint32(total):
        return
    s = _segment_of32(prefix, nseg, k)
    rel = np.int64(np.uint32(k - np.uint32(prefix[s])))
    d = np.int64(dst[s]) + rel
    a = np.int64(at[s])
    f = np.int64(first[s]) if bypos else np.int64(-1)
    if d < 0 or d >= out.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    if f >= 0:  # by position: the row's offset moved by its own delta
        q = f + rel
        r = np.int64(dfirst[s]) + rel
        if q >= pos.shape[0] or r < 0 or r >= delta.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        i = a + np.int64(pos[q])
        if i < 0 or i >= src.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        out[d] = np.int64(src[i]) + np.int64(delta[r]) - np.int64(base[s]) + np.int64(shift[s])
    elif a >= 0:
        i = a + rel
        if i >= src.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        out[d] = np.int64(src[i]) - np.int64(base[s]) + np.int64(shift[s])
    else:
        out[d] = np.int64(shift[s]) + rel * np.int64(stride[s])


@gpu_kernel
def _bitmask_kernel(src, at, counts, dst, column, bits, prefix, nseg, total, out, nulls, err):
    """Destination word ``word`` of segment ``s`` takes the segment's bits ``[lo, hi)`` (at
    most 32) from its source: bool bytes, or the bits from ``at + lo - dst`` of ``src`` read
    as a bitmap (the bytes covering them gathered as 64 bits and shifted)."""
    k = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if k >= np.uint32(total):
        return
    s, d0, word, lo, hi = _word_of_segment(prefix, nseg, k, dst, counts)
    nb = hi - lo
    a = np.int64(at[s])
    from_bits = a >= 0 and bits[s] != 0
    if word >= out.shape[0] or (a >= 0 and not from_bits and a + (hi - d0) > src.shape[0]) or (
        from_bits and a + (hi - d0) > src.shape[0] * 8
    ):
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    keep = (np.uint64(1) << np.uint64(nb)) - np.uint64(1)
    v = np.uint64(0)
    m = np.uint32(nb)
    if from_bits:
        sb = a + (lo - d0)
        first = sb >> 3
        nbytes = np.uint32(np.uint32((sb & 7) + m + np.uint32(7)) >> np.uint32(3))  # at most 5
        i = np.uint32(0)
        while i < nbytes:
            v |= np.uint64(src[first + i]) << np.uint64(np.uint32(8) * i)
            i = np.uint32(i + np.uint32(1))
        v = (v >> np.uint64(sb & 7)) & keep
    elif a >= 0:
        base = a + (lo - d0)
        b = np.uint32(0)
        while b < m:
            if src[base + b] != 0:
                v |= np.uint64(1) << np.uint64(b)
            b = np.uint32(b + np.uint32(1))
    elif a == -1:
        v = keep
    _or_word_bits(out, word, lo, nb, v, nulls, column[s])


@gpu_kernel
def _and_bits_kernel(out, dst, src, column, prefix, nseg, total, nulls, err):
    k = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if k >= np.uint32(total):
        return
    s = _segment_of32(prefix, nseg, k)
    rel = np.int64(np.uint32(k - np.uint32(prefix[s])))
    w = np.int64(dst[s]) + rel
    p = np.int64(src[s]) + rel
    if w < 0 or p < 0 or w >= out.shape[0] or p >= out.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    before = out[w]
    after = before & out[p]
    out[w] = after
    lost = np.int64(cuda.popc(before)) - np.int64(cuda.popc(after))
    if lost:
        cuda.atomic.add(nulls, np.int64(column[s]), lost)


@gpu_kernel
def _gather_rows_segments_kernel(src, pos, at, first, width, dst, prefix, nseg, total, out, err):
    k = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if k >= np.uint32(total):
        return
    s = _segment_of32(prefix, nseg, k)
    rel = np.int64(np.uint32(k - np.uint32(prefix[s])))
    w = np.int64(width[s])
    if w <= 0 or w > MAX_ITEMS32:  # a row wider than the launch: corrupt descriptors
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    # the row and the byte in it by a 32-bit division (rel < 2 ** 31)
    w32 = np.uint32(w)
    r32 = np.uint32(rel)
    i = np.uint32(r32 // w32)
    q = np.int64(first[s]) + np.int64(i)
    d = np.int64(dst[s]) + rel
    if q < 0 or q >= pos.shape[0] or d < 0 or d >= out.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    p = np.int64(pos[q])
    a = np.int64(at[s]) + p * w + np.int64(np.uint32(r32 - i * w32))
    if p < 0 or a < 0 or a >= src.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    out[d] = src[a]


@gpu_kernel
def _gather_bits_segments_kernel(src, pos, at, first, counts, dst, column, bits, prefix, nseg, total, out, nulls, err):
    """Destination word ``word`` of segment ``s`` takes the validity of the rows of its bits
    ``[lo, hi)`` (at most 32), each row's source bit or byte read through ``pos``."""
    k = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if k >= np.uint32(total):
        return
    s, d0, word, lo, hi = _word_of_segment(prefix, nseg, k, dst, counts)
    a = np.int64(at[s])
    f = np.int64(first[s])
    from_bits = bits[s] != 0
    if word < 0 or word >= out.shape[0] or f < 0 or f + (hi - d0) > pos.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    limit = src.shape[0] * 8 if from_bits else src.shape[0]
    v = np.uint64(0)
    q = f + (lo - d0)
    m = np.uint32(hi - lo)
    b = np.uint32(0)
    while b < m:
        j = a + np.int64(pos[q + b])
        if j < 0 or j >= limit:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        if from_bits:
            one = (np.uint64(src[j >> 3]) >> np.uint64(j & 7)) & np.uint64(1)
        else:
            one = np.uint64(1) if src[j] != 0 else np.uint64(0)
        v |= one << np.uint64(b)
        b = np.uint32(b + np.uint32(1))
    _or_word_bits(out, word, lo, hi - lo, v, nulls, column[s])


@gpu_kernel
def _gather_var_segments_kernel(offsets, src, pos, delta, at, data, first, dfirst, dst, prefix, nseg, total, lanes, out, err):
    """Row ``k`` (of every segment's rows) is copied by ``lanes`` threads (1, or a warp)."""
    t = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    k = np.uint32(t // np.uint32(lanes))
    if k >= np.uint32(total):
        return
    s = _segment_of32(prefix, nseg, k)
    rel = np.int64(np.uint32(k - np.uint32(prefix[s])))
    q = np.int64(first[s]) + rel
    r = np.int64(dfirst[s]) + rel
    if q < 0 or q >= pos.shape[0] or r < 0 or r >= delta.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    j = np.int64(at[s]) + np.int64(pos[q])
    if j < 0 or j + 1 >= offsets.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    lo = np.int64(offsets[j])
    n = np.int64(offsets[j + 1]) - lo
    a = np.int64(data[s]) + lo
    d = np.int64(dst[s]) + lo + np.int64(delta[r])
    if n < 0 or a < 0 or a + n > src.shape[0] or d < 0 or d + n > out.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    copy_strided(src, a, out, d, n, np.int64(np.uint32(t - k * np.uint32(lanes))), lanes)


@gpu_kernel
def _count_zero_bits_kernel(words, offset, n, first, total, out):
    k = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    if k >= np.uint32(total):
        return
    w = first + k
    lo = max(offset, w * 32)
    hi = min(offset + n, w * 32 + 32)
    keep = ((np.uint64(1) << np.uint64(hi - lo)) - np.uint64(1)) << np.uint64(lo - w * 32)
    zeros = (hi - lo) - np.int64(cuda.popc(np.uint64(words[w]) & keep))
    if zeros:
        cuda.atomic.add(out, 0, zeros)


# --------------------------------------------------------------------------
# Wrappers
# --------------------------------------------------------------------------


def rebase_offsets_segments_gpu(src, at, counts, base, shift, stride, out, dst, *, pos=None, first=None, delta=None, dfirst=None,
                                threads_per_block=256):
    """See the module docstring: one launch over every segment (``src`` an int64 device
    array, ``out`` an int32 / int64 device array written in place; descriptors host or
    device).  ``pos``, ``first``, ``delta``, ``dfirst``: segments by position (all four, or
    none: no segment by position).  Returns ``out``."""
    prefix = _prefix_host(counts)
    total = int(prefix[-1])
    if total:
        bypos = first is not None
        d_at = _descriptor(at)
        if not bypos:  # the kernel reads none of them: a placeholder, nothing uploaded or allocated
            pos = first = delta = dfirst = d_at
        err = new_error_flag()
        blocks, tpb = launch_dims32(total, threads_per_block, "rebase_offsets_segments_gpu")
        _rebase_kernel.get()[blocks, tpb](
            _device.to_device(src), d_at, _descriptor(base), _descriptor(shift), _descriptor(stride),
            _descriptor(dst), _device.to_device(prefix), np.int64(prefix.size - 1), np.int64(total), out, np.int64(bypos), _descriptor(pos),
            _descriptor(first), _descriptor(delta), _descriptor(dfirst), err,
        )
        raise_if_flagged(err, "rebase_offsets_segments_gpu")
    return out


def pack_bitmask_segments_gpu(src, at, counts, dst, column, out, nulls, bits=None, *, words=None, threads_per_block=256):
    """See the module docstring: one launch over every destination word of every segment
    (``src`` a device array read as bytes: bool bytes, or bitmaps where ``bits[s]``; ``out``
    zeroed uint32 device words, ``nulls`` an int64 device array of per-column null counts,
    both updated in place; ``bits`` None: every source bytes).  ``words``: the destination
    words of each segment (:func:`segment_words`), where the caller has them (a work
    table's scanned column: its prefix needs no upload of its own)."""
    counts, bits, prefix, total = _word_segments(dst, counts, bits, words)
    if total:
        d_src = _device_bytes(src)
        err = new_error_flag()
        blocks, tpb = launch_dims32(total, threads_per_block, "pack_bitmask_segments_gpu")
        _bitmask_kernel.get()[blocks, tpb](
            d_src, _descriptor(at), _descriptor(counts), _descriptor(dst), _descriptor(column), _descriptor(bits),
            _device.to_device(prefix), np.int64(prefix.size - 1), np.int64(total), out, nulls, err,
        )
        raise_if_flagged(err, "pack_bitmask_segments_gpu")
    return out


def _device_bytes(src):
    """``src`` on the device as a flat uint8 view (the kernels read every source as bytes)."""
    d_src = _device.to_device(src)
    if d_src.dtype != np.uint8 or d_src.ndim > 1:
        d_src = d_src.reshape(-1).view(np.uint8)
    return d_src


def _word_segments(dst, counts, bits, words):
    """A launch over destination words' set-up: the segments' bit ``counts`` as int64, their
    ``bits`` flags (None: every source bytes), the exclusive scan of their destination words
    (``words`` where the caller has them, else :func:`segment_words`) and its total."""
    counts = _i64(counts)
    if words is None:
        words = segment_words(dst, counts)
    prefix = _prefix_host(words)
    if bits is None:
        bits = np.zeros(counts.size, np.int64)
    return counts, bits, prefix, int(prefix[-1])


def segment_words(dst, counts) -> np.ndarray:
    """The destination words a bitmask segment of ``counts`` bits at bit ``dst`` touches."""
    dst, counts = _i64(dst), _i64(counts)
    return np.where(counts > 0, ((dst + counts - 1) >> 5) - (dst >> 5) + 1, 0)


def copy_bitmask_segments_gpu(src, at, counts, dst, column, out, nulls, *, threads_per_block=256):
    """See the module docstring: :func:`pack_bitmask_segments_gpu` with every source bits of
    the uint32 device words ``src`` (``at``: bit positions in them)."""
    n = len(_i64(at))
    return pack_bitmask_segments_gpu(src, at, counts, dst, column, out, nulls, np.ones(n, np.int64), threads_per_block=threads_per_block)


def and_bitmask_segments_gpu(out, dst, src, counts, column, nulls, *, threads_per_block=256):
    """See the module docstring: one launch over every word of every segment (``out``
    uint32 device words and ``nulls`` int64 device counters, updated in place).  A segment's
    source words must not be another segment's destination in the same launch."""
    prefix = _prefix_host(counts)
    total = int(prefix[-1])
    if total:
        err = new_error_flag()
        blocks, tpb = launch_dims32(total, threads_per_block, "and_bitmask_segments_gpu")
        _and_bits_kernel.get()[blocks, tpb](
            out, _descriptor(dst), _descriptor(src), _descriptor(column), _device.to_device(prefix), np.int64(prefix.size - 1),
            np.int64(total), nulls, err,
        )
        raise_if_flagged(err, "and_bitmask_segments_gpu")
    return out


def gather_rows_segments_gpu(src, pos, at, first, width, nbytes, out, dst, *, threads_per_block=256):
    """See the module docstring: one launch over every output byte of every segment (``src``
    a device array read as bytes, ``pos`` the int64 row positions, host or device, ``out`` a
    uint8 device array written in place; ``nbytes[s]``: the segment's rows times
    ``width[s]``).  Returns ``out``."""
    prefix = _prefix_host(nbytes)
    total = int(prefix[-1])
    if total:
        d_src = _device_bytes(src)
        err = new_error_flag()
        blocks, tpb = launch_dims32(total, threads_per_block, "gather_rows_segments_gpu")
        _gather_rows_segments_kernel.get()[blocks, tpb](
            d_src, _descriptor(pos), _descriptor(at), _descriptor(first), _descriptor(width), _descriptor(dst),
            _device.to_device(prefix), np.int64(prefix.size - 1), np.int64(total), out, err,
        )
        raise_if_flagged(err, "gather_rows_segments_gpu")
    return out


def gather_bits_segments_gpu(src, pos, at, first, counts, dst, column, out, nulls, bits=None, *, words=None, threads_per_block=256):
    """See the module docstring: one launch over every destination word of every segment
    (``src`` a device array read as bytes; ``pos`` the int64 row positions, host or device;
    ``out`` zeroed uint32 device words and ``nulls`` int64 device counters, updated in place;
    ``words`` as :func:`pack_bitmask_segments_gpu`'s)."""
    counts, bits, prefix, total = _word_segments(dst, counts, bits, words)
    if total:
        d_src = _device_bytes(src)
        err = new_error_flag()
        blocks, tpb = launch_dims32(total, threads_per_block, "gather_bits_segments_gpu")
        _gather_bits_segments_kernel.get()[blocks, tpb](
            d_src, _descriptor(pos), _descriptor(at), _descriptor(first), _descriptor(counts), _descriptor(dst), _descriptor(column),
            _descriptor(bits), _device.to_device(prefix), np.int64(prefix.size - 1), np.int64(total), out, nulls, err,
        )
        raise_if_flagged(err, "gather_bits_segments_gpu")
    return out


def gather_var_segments_gpu(offsets, src, pos, delta, at, data, first, dfirst, counts, dst, out, *, nbytes=None, warp_copy=None,
                            threads_per_block=256):
    """See the module docstring: one launch over every row of every segment (``offsets`` an
    int64 device array, ``src`` a device array read as bytes, ``pos`` and ``delta`` int64,
    host or device; ``out`` a uint8 device array written in place).  ``nbytes``: the bytes
    the segments copy, where the caller knows them (a warp per row then if they average
    :data:`~cuda_kernels.gather.WARP_COPY_MIN_AVERAGE` bytes or more; a thread per row
    otherwise); ``warp_copy`` True / False forces one way.  Returns ``out``."""
    prefix = _prefix_host(counts)
    total = int(prefix[-1])
    if total:
        d_src = _device_bytes(src)
        if warp_copy is None:
            warp_copy = nbytes is not None and int(nbytes) >= WARP_COPY_MIN_AVERAGE * total
        lanes = 32 if warp_copy and 32 * total <= MAX_ITEMS32 else 1  # a warp per row while the threads count in 32 bits
        err = new_error_flag()
        blocks, tpb = launch_dims32(total * lanes, threads_per_block, "gather_var_segments_gpu")
        _gather_var_segments_kernel.get()[blocks, tpb](
            _device.to_device(offsets), d_src, _descriptor(pos), _descriptor(delta), _descriptor(at), _descriptor(data),
            _descriptor(first), _descriptor(dfirst), _descriptor(dst), _device.to_device(prefix), np.int64(prefix.size - 1),
            np.int64(total), np.int64(lanes), out, err,
        )
        raise_if_flagged(err, "gather_var_segments_gpu")
    return out


def count_zero_bits_gpu(words, offset, n, *, threads_per_block=256) -> int:
    """See the module docstring (``words`` uint32 device words holding the bits; one
    launch and one readback of the count)."""
    offset, n = int(offset), int(n)
    if offset < 0 or offset + n > int(words.shape[0]) * 32:
        raise CorruptInputError("count_zero_bits_gpu: the bits reach outside the words", ERR_OUT_OF_BOUNDS)
    if not n:
        return 0
    first = offset >> 5
    total = ((offset + n - 1) >> 5) - first + 1
    out = _device.device_zeros(1, np.int64)
    blocks, tpb = launch_dims32(total, threads_per_block, "count_zero_bits_gpu")
    _count_zero_bits_kernel.get()[blocks, tpb](words, np.int64(offset), np.int64(n), np.int64(first), np.int64(total), out)
    return int(_device.to_host(out)[0])
