"""Batched (segmented) copies, fills and index arithmetic.

A decoder that launches once per kernel family over many pages needs a few
"batched memcpy" style primitives whose work list is a set of *segments*:

* :func:`copy_ranges` -- ``dst[dst_starts[r] : + lengths[r]] = src[src_starts[r] : + lengths[r]]``
  for every range ``r`` (byte arrays; ranges may be empty, must not overlap in ``dst``).
* :func:`fill_patterns` -- fill ``dst[dst_starts[s] : + nbytes[s]]`` with the bytes
  ``patterns[pat_starts[s] : + pat_lens[s]]`` repeated (constants, zero fill).
* :func:`bits_to_bytes` -- unpack LSB-first bit runs into one byte (0 / 1) per bit:
  run ``s`` holds ``counts[s]`` bits starting at bit ``bit_starts[s]`` of ``src``
  and lands at ``dst[dst_starts[s]:]``.
* :func:`expand_ranges` -- ``concat(arange(starts[r], starts[r] + lengths[r]))`` and
  the offsets of each range in it (list / fixed-size-list "take").
* :func:`take_ranges` -- ``(offsets[idx], offsets[idx + 1] - offsets[idx])``.
* :func:`add_segment_base` -- ``out[i] = values[i] + bases[s]`` for ``i`` in
  segment ``s`` (``bounds[s] <= i < bounds[s + 1]``).
* :func:`remap_segments` -- ``out[i] = tables[s, values[i]]`` (per-segment lookup
  tables; a value outside its table is corrupt input).

Example: ``copy_ranges(src=b"abcdef", src_starts=[4, 0], lengths=[2, 3],
dst_starts=[0, 2])`` writes ``b"efabc"``.

Every GPU kernel here finds its segment by a binary search over the segments'
*prefix* (the exclusive scan of their sizes), so work is split evenly however
the sizes vary: one thread per output item, per ``bytes_per_thread`` bytes for
the fills, and one warp per ``32 * bytes_per_thread`` bytes (a *tile*) for the
copies.  A warp copies its tile's ranges with lanes on consecutive 8-byte words
of the destination (one aligned source word each, or two funnel-shifted where
source and destination sit at different offsets within a word), a lane per range
where the tile's ranges are short (:func:`_copy_tile`, :func:`_copy_span`; the
binary gather's copies share that core).  Out-of-bounds sources or destinations never
read or write outside their arrays: the CPU raises
:class:`~cuda_kernels.errors.CorruptInputError`, GPU kernels OR the device
error flag and the wrapper raises the same error.
"""

import numpy as np

from . import _device
from ._target import LAZY_CUDA, cpu_driver, dual, gpu_kernel
from .errors import ERR_OUT_OF_BOUNDS, CorruptInputError, new_error_flag, raise_if_flagged

cuda = LAZY_CUDA

__all__ = [
    "copy_ranges",
    "copy_ranges_gpu",
    "fill_patterns",
    "fill_patterns_gpu",
    "bits_to_bytes",
    "bits_to_bytes_gpu",
    "expand_ranges",
    "expand_ranges_gpu",
    "take_ranges",
    "take_ranges_gpu",
    "add_segment_base",
    "add_segment_base_gpu",
    "remap_segments",
    "remap_segments_gpu",
]

# Bytes per thread in the copy and fill kernels (a copy's warp takes 32 times as many):
# enough to amortise the segment search, small enough to balance work across threads.
BYTES_PER_THREAD = 16
# The CUDA simulator runs every thread as a Python thread: fewer, longer ones.
_SIM_BYTES_PER_THREAD = 1024


# --------------------------------------------------------------------------
# Cores
# --------------------------------------------------------------------------


@dual
def _segment_of(prefix, nseg, k):
    """The segment ``s`` in ``[0, nseg)`` with ``prefix[s] <= k < prefix[s + 1]``.

    ``prefix`` holds ``nseg + 1`` non-decreasing values and ``0 <= k < prefix[nseg]``;
    empty segments are skipped (the last segment starting at or before ``k`` wins).
    """
    lo = np.int64(0)
    hi = np.int64(nseg + 1)
    # upper bound: first index with prefix[index] > k
    while lo < hi:
        mid = (lo + hi) >> 1
        if np.int64(prefix[mid]) <= k:
            lo = mid + 1
        else:
            hi = mid
    s: int | np.int64 = lo - 1  # a local annotation: the compiled bytecode is unchanged
    if s >= nseg:
        s = nseg - 1
    if s < 0:
        s = 0
    return s


@dual
def _segment_of32(prefix, nseg, k):
    """:func:`_segment_of` in 32-bit arithmetic: the segment ``s`` (uint32) in ``[0, nseg)``
    with ``prefix[s] <= k < prefix[s + 1]``.

    For launches of fewer than ``2 ** 31`` items (the wrappers refuse bigger ones): ``k``
    (uint32) and every value of ``prefix`` (int64 or uint32; ``prefix[0] == 0``, read
    truncated to 32 bits, exact below ``2 ** 31``) and ``nseg`` are below ``2 ** 31``, so the
    search's bounds, midpoints and comparisons stay unsigned 32-bit.
    """
    one = np.uint32(1)
    lo = np.uint32(0)
    hi = np.uint32(np.uint32(nseg) + one)
    # upper bound: first index with prefix[index] > k
    while lo < hi:
        mid = np.uint32(np.uint32(lo + hi) >> one)
        if np.uint32(prefix[mid]) <= k:
            lo = np.uint32(mid + one)
        else:
            hi = mid
    # prefix[0] == 0 <= k: lo >= 1; k < prefix[nseg]: lo <= nseg (clamped all the same)
    if lo > np.uint32(nseg):
        lo = np.uint32(nseg)
    if lo == np.uint32(0):
        lo = one
    return np.uint32(lo - one)


#: Items one launch of a kernel that counts in 32 bits (:func:`_segment_of32`) may cover.
MAX_ITEMS32 = (1 << 31) - 1


def launch_dims32(n, threads_per_block, what):
    """``(blocks, threads per block)`` of a launch of ``n`` threads by a kernel that numbers
    its threads and searches its segments in unsigned 32 bits (:func:`_segment_of32`): at
    most :data:`MAX_ITEMS32` threads (more: ``ValueError`` naming ``what``)."""
    if int(n) > MAX_ITEMS32:
        msg = f"{what}: {int(n)} threads, at most 2 ** 31 - 1 in one launch"
        raise ValueError(msg)
    return _device.launch_dims(n, threads_per_block)


#: Bytes per word of the copies' wide loads and stores (a ``uint64`` view of each side).
WORD = 8
#: Lanes of a warp: the GPU copy gives each warp a tile of the concatenated ranges.
WARP = 32


#: The most bytes :func:`_copy_chunk` copies in one call: its loops count in 32 bits.
CHUNK_BYTES = 1 << 30


@dual
def _whole_words(dst_w, dst_w0, d, end):
    """``(j0, j1)``: the words ``dst_w[j0:j1]`` (word 0 at byte ``dst_w0``) that lie wholly
    inside the bytes ``d .. end`` (``j1 <= j0``: none)."""
    j0 = np.int64(0)
    if d > dst_w0:
        j0 = (d - dst_w0 + 7) >> 3
    j1 = np.int64(0)
    if end > dst_w0:
        j1 = min((end - dst_w0) >> 3, dst_w.shape[0])
    return j0, j1


@dual
def _copy_chunk(src, src_w, src_w0, dst, dst_w, dst_w0, s, d, n, lane, nlanes):
    """:func:`_copy_span` of at most :data:`CHUNK_BYTES` bytes: positions and word indices of
    the arrays stay 64-bit (unsigned: no negative-index fix-up), every loop counts bytes or
    words relative to the span in 32 bits."""
    end = d + n
    j0, j1 = _whole_words(dst_w, dst_w0, d, end)
    # destination word j reads the source bytes from 8 * j + c of src_w: word j + ab, shifted by sh bytes
    c = dst_w0 + (s - d) - src_w0
    ab = c >> 3
    sh = c & 7
    j0 = max(j0, -ab)  # and both source words inside src_w
    j1 = min(j1, src_w.shape[0] - ab - (1 if sh else 0))
    if j1 <= j0:  # no whole word: every byte alone
        j0 = j1 = (end - dst_w0 + 7) >> 3
    step = np.uint32(nlanes)
    sb = np.uint64(s)
    db = np.uint64(d)
    head = np.uint32(min(dst_w0 + 8 * j0 - d, n))
    i = np.uint32(lane)
    while i < head:
        dst[db + i] = src[sb + i]
        i = np.uint32(i + step)
    m = np.uint32(max(j1 - j0, 0))
    dwb = np.uint64(max(j0, 0))
    swb = np.uint64(max(j0 + ab, 0))
    j = np.uint32(lane)
    if sh == 0:
        while j < m:
            dst_w[dwb + j] = src_w[swb + j]
            j = np.uint32(j + step)
    else:
        right = np.uint64(8 * sh)
        left = np.uint64(64 - 8 * sh)
        while j < m:
            dst_w[dwb + j] = (src_w[swb + j] >> right) | (src_w[swb + j + np.uint32(1)] << left)
            j = np.uint32(j + step)
    i = np.uint32(max(dst_w0 + 8 * j1 - d, head) + lane)
    stop = np.uint32(n)
    while i < stop:
        dst[db + i] = src[sb + i]
        i = np.uint32(i + step)


@dual
def _copy_span(src, src_w, src_w0, dst, dst_w, dst_w0, s, d, n, lane, nlanes):
    """Copy ``src[s : s + n]`` to ``dst[d : d + n]`` (both checked by the caller), the share of
    lane ``lane`` of ``nlanes`` cooperating lanes (0 of 1: all of it).

    ``src_w`` / ``dst_w`` are ``uint64`` views of the whole aligned words inside ``src`` /
    ``dst``, word 0 at byte ``src_w0`` / ``dst_w0`` (:func:`word_view`).  The span is cut at
    ``dst``'s word boundaries: the whole destination words inside it are stored 8 bytes at a
    time, lane ``l`` taking words ``l, l + nlanes, ...`` (consecutive lanes, consecutive words),
    each loaded as one aligned source word where source and destination sit at the same offset
    within a word, else as two neighbouring aligned words funnel-shifted together (the shift is
    the same for every word of the span).  The bytes before the first and after the last such
    word (up to 7 at each end, more only where the span meets an end of ``src`` that its
    aligned words do not cover) are copied one at a time, lanes on consecutive bytes.  Partial
    words are never stored wide: they may hold another span's bytes, written by another thread.
    A span is copied in pieces of :data:`CHUNK_BYTES` (one, below 1 GiB): the loops inside a
    piece count in 32 bits.
    """
    k = np.int64(0)
    while k < n:
        m = min(n - k, CHUNK_BYTES)
        _copy_chunk(src, src_w, src_w0, dst, dst_w, dst_w0, s + k, d + k, m, lane, nlanes)
        k += m


@dual
def _tile_ranges(prefix, nranges, lo, hi, lane, nlanes):
    """How ``nlanes`` lanes split the ranges of the tile ``lo..hi`` (bytes of the concatenated
    ranges, ``lo < hi``): ``(base, count, first, step, sub, g)``.  The tile holds ranges ``base ..
    base + count``; lanes form groups of ``g`` (a power of two, ``g * 8`` bytes at most the
    tile's average bytes per range: short ranges get a lane each, long ones up to all lanes);
    this lane's group takes ranges ``base + first, base + first + step, ...`` and is lane
    ``sub`` of it.  Counts are 32-bit (fewer than 2 ** 31 ranges: the wrappers check)."""
    r0 = _segment_of(prefix, nranges, lo)
    r1 = _segment_of(prefix, nranges, hi - 1)
    per_range = (hi - lo) // (r1 - r0 + 1)
    g = np.int64(nlanes)
    while g > 1 and g * WORD > per_range:
        g >>= 1
    return np.uint64(r0), np.uint32(r1 - r0 + 1), np.uint32(lane // g), np.uint32(nlanes // g), lane % g, g


@dual
def _tile_piece(prefix, r, lo, hi):
    """``(rel, n)``: the bytes of range ``r`` inside the tile ``lo..hi`` start ``rel`` bytes
    into the range and are ``n`` long (``n <= 0``: none)."""
    p = np.int64(prefix[r])
    a = max(p, lo)
    return a - p, min(np.int64(prefix[r + np.uint32(1)]), hi) - a


@dual
def _copy_tile(src, src_w, src_w0, src_starts, dst, dst_w, dst_w0, dst_starts, prefix, nranges, lo, hi, lane, nlanes):
    """Copy the bytes ``lo..hi`` of the concatenated ranges with ``nlanes`` lanes (this is lane
    ``lane``); False if a range reaches outside ``src`` or ``dst``.

    The lanes form groups of ``g`` (a power of two, ``g * 8`` bytes at most the tile's average
    bytes per range): short ranges get a lane each, long ones up to all lanes, so that lanes
    store consecutive destination words wherever ranges are long enough to have them
    (:func:`_copy_span`).  Group ``k`` copies the tile's ranges ``k, k + nlanes / g, ...``.
    """
    ok = True
    base, count, k, step, sub, g = _tile_ranges(prefix, nranges, lo, hi, lane, nlanes)
    nsrc = src.shape[0]
    ndst = dst.shape[0]
    while k < count:
        r = base + k
        rel, n = _tile_piece(prefix, r, lo, hi)
        if n > 0:
            s = np.int64(src_starts[r]) + rel
            d = np.int64(dst_starts[r]) + rel
            if s < 0 or d < 0 or s + n > nsrc or d + n > ndst:
                ok = False
            else:
                _copy_span(src, src_w, src_w0, dst, dst_w, dst_w0, s, d, n, sub, g)
        k = np.uint32(k + step)
    return ok


@dual
def _fill_span(dst, dst_w, dst_w0, patterns, p0, plen, phase, d, n, lane, nlanes):
    """Fill ``dst[d : d + n]`` (checked by the caller, ``n`` below 2 ** 31) with the pattern
    ``patterns[p0 : p0 + plen]`` repeated from its byte ``phase``: the share of lane ``lane``
    of ``nlanes``.  Where ``plen`` divides 8 every whole destination word inside the span
    holds the same 8 bytes, built once and stored wide by lanes on consecutive words (as
    :func:`_copy_span`); other bytes (the edges, and every byte of other pattern lengths) one
    at a time, lanes on consecutive bytes."""
    end = d + n
    j0, j1 = _whole_words(dst_w, dst_w0, d, end)
    if j1 <= j0 or WORD % plen != 0:  # no whole word, or words that differ: every byte alone
        j0 = j1 = (end - dst_w0 + 7) >> 3
    step = np.uint32(nlanes)
    db = np.uint64(d)
    head = np.uint32(min(dst_w0 + 8 * j0 - d, n))
    i = np.uint32(lane)
    while i < head:
        dst[db + i] = patterns[p0 + (phase + i) % plen]
        i = np.uint32(i + step)
    m = np.uint32(max(j1 - j0, 0))
    if m > 0:
        o = phase + head  # the pattern byte at the first whole word
        v = np.uint64(0)
        for q in range(WORD):
            v |= np.uint64(patterns[p0 + (o + q) % plen]) << np.uint64(8 * q)
        dwb = np.uint64(j0)
        j = np.uint32(lane)
        while j < m:
            dst_w[dwb + j] = v
            j = np.uint32(j + step)
    i = np.uint32(max(dst_w0 + 8 * j1 - d, head) + lane)
    stop = np.uint32(n)
    while i < stop:
        dst[db + i] = patterns[p0 + (phase + i) % plen]
        i = np.uint32(i + step)


@dual
def _fill_tile(dst, dst_w, dst_w0, dst_starts, patterns, pat_starts, pat_lens, prefix, nseg, lo, hi, lane, nlanes):
    """Fill the bytes ``lo..hi`` of the concatenated segments with ``nlanes`` lanes (this is
    lane ``lane``; groups of lanes per segment as :func:`_copy_tile`); False if a segment
    reaches outside ``dst`` or its pattern outside ``patterns``."""
    ok = True
    base, count, k, step, sub, g = _tile_ranges(prefix, nseg, lo, hi, lane, nlanes)
    ndst = dst.shape[0]
    npat = patterns.shape[0]
    while k < count:
        r = base + k
        rel, n = _tile_piece(prefix, r, lo, hi)
        if n > 0:
            d = np.int64(dst_starts[r]) + rel
            p0 = np.int64(pat_starts[r])
            plen = np.int64(pat_lens[r])
            if d < 0 or d + n > ndst or plen <= 0 or p0 < 0 or p0 + plen > npat:
                ok = False
            else:
                _fill_span(dst, dst_w, dst_w0, patterns, p0, plen, rel % plen, d, n, sub, g)
        k = np.uint32(k + step)
    return ok


@dual
def _bit_at(src, bit):
    """Bit ``bit`` (LSB first) of the byte array ``src`` as 0 / 1, or -1 if out of range."""
    b = bit >> 3
    if bit < 0 or b >= src.shape[0]:
        return -1
    return (np.int64(src[b]) >> (bit & 7)) & 1


@dual
def _read_le(data, p, w):
    """Unsigned little-endian integer of ``w`` bytes at ``data[p]`` (caller checks bounds)."""
    v = np.int64(0)
    for q in range(w):
        v |= np.int64(data[p + q]) << (8 * q)
    return v


@dual
def _expand_one(starts, offsets, nranges, k, out):
    r = _segment_of(offsets, nranges, k)
    out[k] = np.int64(starts[r]) + (k - np.int64(offsets[r]))


# --------------------------------------------------------------------------
# CPU drivers
# --------------------------------------------------------------------------


@cpu_driver
def _copy_cpu(src, src_w, src_w0, src_starts, dst, dst_w, dst_w0, dst_starts, prefix, nranges):
    total = np.int64(prefix[nranges])
    step = np.int64(4096)
    ok = True
    lo = np.int64(0)
    while lo < total:
        hi = min(lo + step, total)
        if not _copy_tile(src, src_w, src_w0, src_starts, dst, dst_w, dst_w0, dst_starts, prefix, nranges, lo, hi, 0, 1):
            ok = False
        lo = hi
    return ok


@cpu_driver
def _fill_cpu(dst, dst_w, dst_w0, dst_starts, patterns, pat_starts, pat_lens, prefix, nseg):
    total = np.int64(prefix[nseg])
    step = np.int64(4096)
    ok = True
    lo = np.int64(0)
    while lo < total:
        hi = min(lo + step, total)
        if not _fill_tile(dst, dst_w, dst_w0, dst_starts, patterns, pat_starts, pat_lens, prefix, nseg, lo, hi, 0, 1):
            ok = False
        lo = hi
    return ok


@cpu_driver
def _bits_cpu(src, bit_starts, dst, dst_starts, prefix, nseg):
    ndst = dst.shape[0]
    for s in range(nseg):
        n = np.int64(prefix[s + 1]) - np.int64(prefix[s])
        d0 = np.int64(dst_starts[s])
        b0 = np.int64(bit_starts[s])
        if d0 < 0 or d0 + n > ndst:
            return False
        for j in range(n):
            v = _bit_at(src, b0 + j)
            if v < 0:
                return False
            dst[d0 + j] = v
    return True


@cpu_driver
def _expand_cpu(starts, offsets, nranges, out):
    for k in range(out.shape[0]):
        _expand_one(starts, offsets, nranges, k, out)


# --------------------------------------------------------------------------
# GPU kernels
# --------------------------------------------------------------------------


@gpu_kernel
def _copy_kernel(src, src_starts, dst, dst_starts, prefix, nranges, total, per_thread, err, src_w, src_w0, dst_w, dst_w0):
    """Warp ``w`` copies the bytes ``w * 32 * per_thread`` .. ``+ 32 * per_thread`` of the
    concatenated ranges (:func:`_copy_tile`; ``src_w`` / ``dst_w``: :func:`word_view`)."""
    t = cuda.grid(1)
    tile = WARP * per_thread
    lo = np.int64(t // WARP) * tile
    real = np.int64(prefix[nranges])
    if real > total and t == 0:  # ``total`` is a bound (see copy_ranges_gpu): ranges past it are not copied
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
    total = min(total, real)
    if lo >= total:
        return
    hi = min(lo + tile, total)
    if not _copy_tile(src, src_w, src_w0, src_starts, dst, dst_w, dst_w0, dst_starts, prefix, nranges, lo, hi, t % WARP, WARP):
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)


@gpu_kernel
def _fill_kernel(dst, dst_starts, patterns, pat_starts, pat_lens, prefix, nseg, total, per_thread, err, dst_w, dst_w0):
    """Warp ``w`` fills the bytes ``w * 32 * per_thread`` .. ``+ 32 * per_thread`` of the
    concatenated segments (:func:`_fill_tile`; ``dst_w``: :func:`word_view`)."""
    t = cuda.grid(1)
    tile = WARP * per_thread
    lo = np.int64(t // WARP) * tile
    if lo >= total:
        return
    hi = min(lo + tile, total)
    if not _fill_tile(dst, dst_w, dst_w0, dst_starts, patterns, pat_starts, pat_lens, prefix, nseg, lo, hi, t % WARP, WARP):
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)


@gpu_kernel
def _bits_kernel(src, bit_starts, dst, dst_starts, prefix, nseg, total, err):
    k = cuda.grid(1)
    if k >= total:
        return
    s = _segment_of(prefix, nseg, k)
    rel = k - np.int64(prefix[s])
    d = np.int64(dst_starts[s]) + rel
    v = _bit_at(src, np.int64(bit_starts[s]) + rel)
    if v < 0 or d < 0 or d >= dst.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    dst[d] = v


@gpu_kernel
def _expand_kernel(starts, offsets, nranges, out):
    k = cuda.grid(1)
    if k < out.shape[0]:
        _expand_one(starts, offsets, nranges, k, out)


@gpu_kernel
def _take_ranges_kernel(offsets, indices, starts, lengths, err):
    i = cuda.grid(1)
    if i >= indices.shape[0]:
        return
    j = np.int64(indices[i])
    if j < 0 or j + 1 >= offsets.shape[0]:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        starts[i] = 0
        lengths[i] = 0
        return
    s = np.int64(offsets[j])
    e = np.int64(offsets[j + 1])
    if e < s:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        e = s
    starts[i] = s
    lengths[i] = e - s


@gpu_kernel
def _add_base_kernel(values, bounds, nseg, bases, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        s = _segment_of(bounds, nseg, i)
        out[i] = np.int64(values[i]) + np.int64(bases[s])


@gpu_kernel
def _remap_kernel(values, bounds, nseg, tables, out, err):
    i = cuda.grid(1)
    if i < out.shape[0]:
        s = _segment_of(bounds, nseg, i)
        v = np.int64(values[i])
        if v < 0 or v >= tables.shape[1]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            out[i] = 0
        else:
            out[i] = tables[s, v]


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def _i64(x):
    return np.ascontiguousarray(np.asarray(x), dtype=np.int64).reshape(-1)


def _prefix_host(lengths):
    lengths = _i64(lengths)
    known = _device.table_prefix(lengths)  # scanned with the pass's work table
    if known is not None:
        return known
    if lengths.size and lengths.min() < 0:
        msg = "segment lengths must not be negative"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    prefix = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=prefix[1:])
    return prefix


def _per_thread(per_thread):
    """Bytes per thread of a copy or fill launch; a warp's tile (32 times as many) stays below
    2 ** 31 bytes, the spans of a tile being counted in 32 bits."""
    per = _SIM_BYTES_PER_THREAD if per_thread is None and _device.is_simulator() else BYTES_PER_THREAD
    per = int(per_thread) if per_thread is not None else per
    if not 0 < per * WARP < 1 << 31:
        msg = f"bytes_per_thread={per_thread}: a warp's tile must hold 1 to 2 ** 31 - 1 bytes"
        raise ValueError(msg)
    return per


def _as_bytes_host(a, name):
    a = np.asarray(a)
    if not a.flags.c_contiguous:
        msg = f"{name} must be C-contiguous"
        raise ValueError(msg)
    return a.reshape(-1).view(np.uint8)


def _address(a) -> int:
    """The address of a host, device or simulator array's first byte."""
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    host = getattr(a, "_ary", a)  # the simulator's device arrays wrap a numpy array
    return int(host.__array_interface__["data"][0])


def word_view(a):
    """``(words, w0)``: a ``uint64`` view of the whole 8-byte-aligned words inside the 1-D byte
    array ``a`` (host or device) and the byte of ``a`` where word 0 starts (0..7; the view is
    empty when ``a`` holds no aligned word).  What the copies' wide loads and stores go through."""
    n = a.shape[0]
    w0 = min(-_address(a) % WORD, n)
    m = (n - w0) // WORD
    return a[w0 : w0 + WORD * m].view(np.uint64), np.int64(w0)


def _as_bytes_device(a):
    d = _device.to_device(a)
    if np.dtype(d.dtype) != np.uint8:
        d = d.reshape(-1).view(np.uint8) if d.ndim > 1 else d.view(np.uint8)
    return d


def _descriptor(x):
    """A segment descriptor (starts, lengths, ...): device arrays stay, host ones are copied."""
    if isinstance(x, np.ndarray) or not hasattr(x, "__cuda_array_interface__") and not getattr(x, "__cuda_ndarray__", False):
        return _device.to_device(_i64(x))
    return _device.to_device(x)


def _host_or_scan(lengths):
    """(device prefix int64[n + 1], total) from host or device lengths."""
    if isinstance(lengths, (np.ndarray, list, tuple)):
        prefix = _prefix_host(lengths)
        return _device.to_device(prefix), int(prefix[-1])
    return _device.exclusive_scan(_device.to_device(lengths))


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def copy_ranges(src, src_starts, lengths, dst, dst_starts):
    """Batched byte copy (CPU): every range ``r`` copies ``lengths[r]`` bytes of ``src``
    from ``src_starts[r]`` to ``dst`` at ``dst_starts[r]``.

    ``src`` and ``dst`` are C-contiguous arrays of any dtype, addressed in bytes.
    :raises CorruptInputError: a range reaches outside ``src`` or ``dst``.
    """
    s = _as_bytes_host(src, "src")
    d = _as_bytes_host(dst, "dst")
    ss, dd = _i64(src_starts), _i64(dst_starts)
    prefix = _prefix_host(lengths)
    n = prefix.size - 1
    if ss.size != n or dd.size != n:
        msg = "src_starts, lengths and dst_starts must have the same length"
        raise ValueError(msg)
    if n and not _copy_cpu(s, *word_view(s), ss, d, *word_view(d), dd, prefix, n):
        msg = "copy_ranges: a range reaches outside its source or destination"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    return dst


def copy_ranges_gpu(src, src_starts, lengths, dst, dst_starts, *, max_total=None, bytes_per_thread=None, threads_per_block=128):
    """GPU twin of :func:`copy_ranges` (one launch for all ranges; ``dst`` is written in place):
    warp ``w`` copies the bytes ``w * 32 * bytes_per_thread`` .. ``+ 32 * bytes_per_thread``
    of the concatenated ranges, storing whole aligned 8-byte words of ``dst`` (module docstring).

    ``src`` / ``dst`` are device arrays of any dtype (addressed in bytes); the range
    descriptors may be host or device integer arrays.  With device ``lengths``, their total
    is read back to size the launch unless ``max_total`` bounds it (nothing is read back
    then; threads past the real total do nothing, and a real total past the bound flags
    ``ERR_OUT_OF_BOUNDS``: its ranges past the bound are not copied).  Returns ``dst``.
    """
    d_src = _as_bytes_device(src)
    d_dst = _as_bytes_device(dst)
    if max_total is not None and not isinstance(lengths, (np.ndarray, list, tuple)):
        prefix, total = _device.exclusive_scan_device(_device.to_device(lengths)), int(max_total)
    else:
        prefix, total = _host_or_scan(lengths)
    d_ss = _descriptor(src_starts)
    d_dd = _descriptor(dst_starts)
    n = d_ss.shape[0]
    if d_dd.shape[0] != n or prefix.shape[0] != n + 1:
        msg = "src_starts, lengths and dst_starts must have the same length"
        raise ValueError(msg)
    if n >= 1 << 31:  # the kernel counts a tile's ranges in 32 bits
        msg = f"copy_ranges_gpu: {n} ranges, at most 2 ** 31 - 1 in one call"
        raise ValueError(msg)
    if n and total:
        per = _per_thread(bytes_per_thread)
        err = new_error_flag()
        tpb = -(-int(threads_per_block) // WARP) * WARP  # whole warps: a warp shares a tile
        blocks, tpb = _device.launch_dims(WARP * -(-total // (WARP * per)), tpb)
        _copy_kernel.get()[blocks, tpb](
            d_src, d_ss, d_dst, d_dd, prefix, np.int64(n), np.int64(total), np.int64(per), err, *word_view(d_src), *word_view(d_dst)
        )
        raise_if_flagged(err, "copy_ranges_gpu")
    return dst


def fill_patterns(dst, dst_starts, nbytes, patterns, pat_starts, pat_lens):
    """Fill segments of ``dst`` (bytes) with repeated byte patterns (CPU)."""
    d = _as_bytes_host(dst, "dst")
    pats = _as_bytes_host(np.ascontiguousarray(patterns), "patterns")
    prefix = _prefix_host(nbytes)
    n = prefix.size - 1
    if n and not _fill_cpu(d, *word_view(d), _i64(dst_starts), pats, _i64(pat_starts), _i64(pat_lens), prefix, n):
        msg = "fill_patterns: a segment reaches outside dst or its pattern"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    return dst


def fill_patterns_gpu(dst, dst_starts, nbytes, patterns, pat_starts, pat_lens, *, bytes_per_thread=None, threads_per_block=128):
    """GPU twin of :func:`fill_patterns` (``dst`` written in place; patterns host or device)."""
    d_dst = _as_bytes_device(dst)
    pats = patterns
    if isinstance(pats, (bytes, bytearray)):
        pats = np.frombuffer(pats, np.uint8)
    d_pat = _as_bytes_device(np.ascontiguousarray(pats) if isinstance(pats, np.ndarray) else pats)
    prefix, total = _host_or_scan(nbytes)
    n = prefix.shape[0] - 1
    if n >= 1 << 31:  # the kernel counts a tile's segments in 32 bits
        msg = f"fill_patterns_gpu: {n} segments, at most 2 ** 31 - 1 in one call"
        raise ValueError(msg)
    if n and total:
        per = _per_thread(bytes_per_thread)
        err = new_error_flag()
        tpb = -(-int(threads_per_block) // WARP) * WARP  # whole warps: a warp shares a tile
        blocks, tpb = _device.launch_dims(WARP * -(-total // (WARP * per)), tpb)
        _fill_kernel.get()[blocks, tpb](
            d_dst, _descriptor(dst_starts), d_pat, _descriptor(pat_starts), _descriptor(pat_lens),
            prefix, np.int64(n), np.int64(total), np.int64(per), err, *word_view(d_dst),
        )
        raise_if_flagged(err, "fill_patterns_gpu")
    return dst


def bits_to_bytes(src, bit_starts, counts, dst, dst_starts):
    """Unpack LSB-first bit runs of ``src`` into bytes 0 / 1 of ``dst`` (CPU, in place)."""
    s = _as_bytes_host(src, "src")
    d = _as_bytes_host(dst, "dst")
    prefix = _prefix_host(counts)
    n = prefix.size - 1
    if n and not _bits_cpu(s, _i64(bit_starts), d, _i64(dst_starts), prefix, n):
        msg = "bits_to_bytes: a bit run reaches outside src or dst"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    return dst


def bits_to_bytes_gpu(src, bit_starts, counts, dst, dst_starts, *, threads_per_block=256):
    """GPU twin of :func:`bits_to_bytes` (one thread per bit)."""
    d_src = _as_bytes_device(src)
    d_dst = _as_bytes_device(dst)
    prefix, total = _host_or_scan(counts)
    n = prefix.shape[0] - 1
    if n and total:
        err = new_error_flag()
        blocks, tpb = _device.launch_dims(total, threads_per_block)
        _bits_kernel.get()[blocks, tpb](
            d_src, _descriptor(bit_starts), d_dst, _descriptor(dst_starts), prefix, np.int64(n), np.int64(total), err
        )
        raise_if_flagged(err, "bits_to_bytes_gpu")
    return dst


def expand_ranges(starts, lengths):
    """``(indices, offsets)``: the concatenation of ``arange(starts[r], starts[r] + lengths[r])``
    and the ``n + 1`` offsets of each range in it (CPU)."""
    starts = _i64(starts)
    offsets = _prefix_host(lengths)
    out = np.empty(int(offsets[-1]), np.int64)
    if out.size:
        _expand_cpu(starts, offsets, np.int64(starts.size), out)
    return out, offsets


def expand_ranges_gpu(starts, lengths, *, threads_per_block=256):
    """GPU twin of :func:`expand_ranges`; returns device ``(indices, offsets)``."""
    use_cp = _device.wants_cupy(starts, lengths)
    d_starts = _descriptor(starts)
    offsets, total = _host_or_scan(lengths)
    out = _device.device_empty(total, np.int64)
    n = d_starts.shape[0]
    if total:
        blocks, tpb = _device.launch_dims(total, threads_per_block)
        _expand_kernel.get()[blocks, tpb](d_starts, offsets, np.int64(n), out)
    return _device.as_output(out, use_cp), _device.as_output(offsets, use_cp)


def take_ranges(offsets, indices):
    """``(starts, lengths)`` of the ranges ``offsets[i] .. offsets[i + 1]`` at ``indices`` (CPU)."""
    offsets = _i64(offsets)
    idx = _i64(indices)
    if idx.size and (idx.min() < 0 or idx.max() + 1 >= offsets.size):
        msg = f"take_ranges: an index is out of bounds for {offsets.size - 1} ranges"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    starts = offsets[idx]
    lengths = offsets[idx + 1] - starts
    if lengths.size and lengths.min() < 0:
        msg = "take_ranges: offsets run backwards"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    return starts, lengths


def take_ranges_gpu(offsets, indices, *, threads_per_block=256):
    """GPU twin of :func:`take_ranges`; returns device int64 ``(starts, lengths)``."""
    use_cp = _device.wants_cupy(offsets, indices)
    d_off = _device.to_device(offsets)
    d_idx = _device.to_device(indices)
    n = d_idx.shape[0]
    starts = _device.device_empty(n, np.int64)
    lengths = _device.device_empty(n, np.int64)
    if n:
        err = new_error_flag()
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        _take_ranges_kernel.get()[blocks, tpb](d_off, d_idx, starts, lengths, err)
        raise_if_flagged(err, "take_ranges_gpu")
    return _device.as_output(starts, use_cp), _device.as_output(lengths, use_cp)


def add_segment_base(values, bounds, bases):
    """``out[i] = values[i] + bases[s]`` for ``bounds[s] <= i < bounds[s + 1]`` (CPU, int64)."""
    values = np.asarray(values).astype(np.int64)
    bounds = _i64(bounds)
    seg = np.repeat(np.arange(bounds.size - 1), np.diff(bounds))
    return values + _i64(bases)[seg]


def add_segment_base_gpu(values, bounds, bases, *, threads_per_block=256):
    """GPU twin of :func:`add_segment_base`; returns a device int64 array."""
    use_cp = _device.wants_cupy(values)
    d_vals = _device.to_device(values)
    d_bounds = _descriptor(bounds)
    nseg = d_bounds.shape[0] - 1
    n = d_vals.shape[0]
    out = _device.device_empty(n, np.int64)
    if n:
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        _add_base_kernel.get()[blocks, tpb](d_vals, d_bounds, np.int64(nseg), _descriptor(bases), out)
    return _device.as_output(out, use_cp)


def remap_segments(values, bounds, tables):
    """``out[i] = tables[s, values[i]]`` for ``i`` in segment ``s`` (CPU; same dtype as tables)."""
    values = np.asarray(values).astype(np.int64)
    tables = np.asarray(tables)
    bounds = _i64(bounds)
    seg = np.repeat(np.arange(bounds.size - 1), np.diff(bounds))
    if values.size and (values.min() < 0 or values.max() >= tables.shape[1]):
        msg = f"remap_segments: a value is outside its {tables.shape[1]}-entry table"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    return tables[seg, values]


def remap_segments_gpu(values, bounds, tables, *, threads_per_block=256):
    """GPU twin of :func:`remap_segments` (``tables`` is a small 2-D host or device array)."""
    use_cp = _device.wants_cupy(values)
    d_vals = _device.to_device(values)
    d_tab = _device.to_device(np.ascontiguousarray(tables) if isinstance(tables, np.ndarray) else tables)
    d_bounds = _descriptor(bounds)
    n = d_vals.shape[0]
    out = _device.device_empty(n, d_tab.dtype)
    if n:
        err = new_error_flag()
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        _remap_kernel.get()[blocks, tpb](d_vals, d_bounds, np.int64(d_bounds.shape[0] - 1), d_tab, out, err)
        raise_if_flagged(err, "remap_segments_gpu")
    return _device.as_output(out, use_cp)
