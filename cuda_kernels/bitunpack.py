"""FastLanes bit-unpacking (and packing) of 1024-value blocks.

Layout (the "unified transposed" FastLanes layout, as used by Lance):

* A block holds 1024 values of an unsigned type of ``T`` bits (8, 16, 32, 64)
  packed to ``W`` bits (``0 <= W <= T``) as ``1024 * W / T`` words of type T.
* ``LANES = 1024 / T``.  Each lane holds ``T`` rows.  Row ``r`` of lane ``l``
  keeps its ``W`` bits starting at bit ``(r * W) % T`` of the word
  ``packed[LANES * (r * W // T) + l]``; when they cross the word boundary the
  rest continues in the low bits of ``packed[LANES * (r * W // T + 1) + l]``.
* ``(row r, lane l)`` is the logical value number
  ``FL_ORDER[r // 8] * 16 + (r % 8) * 128 + l`` with
  ``FL_ORDER = [0, 4, 2, 6, 1, 5, 3, 7]`` (the 3-bit reversal of ``r // 8``).

Worked example (T = 8, W = 3, so 3 words per lane and 128 lanes): row 2 of
lane 5 starts at bit 6 of ``packed[0 * 128 + 5]`` and takes its third bit from
bit 0 of ``packed[1 * 128 + 5]``; it is value ``0 * 16 + 2 * 128 + 5 = 261``.

CPU: per block, the loop over rows is outside and the loop over the lanes is
inside, so loads and stores are contiguous and LLVM vectorises the lane loop
(:func:`_fl_unpack_value`, the same core as the GPU's).  8- and 16-bit words
take a SWAR path instead (:func:`_fl_unpack_swar`): a word row of a block is
1024 bits = 16 uint64, so 8 (or 4) lanes are unpacked per 64-bit operation,
which is 2-5x faster than widening every byte to 64 bits.
GPU: one thread per (block, lane) (two of 64-bit words, each on half the
rows: a warp holds one block), looping over the rows; adjacent threads read
adjacent words (coalesced), each word once.  All blocks of many pages are
decoded by one launch: each block names its own word offset and bit width, and
a whole block runs a row loop compiled for its width (a switch over the widths
whose leaves are the loop specialised on each: constant shifts and masks,
unrolled), so one launch serves every width; 32-bit index arithmetic.
"""

import re
import sys

import numpy as np

from . import _device, _twins
from ._cpu import read_only
from ._jitcache import LAZY_NUMBA as numba
from ._jitcache import prange
from ._target import LAZY_CUDA, cpu_driver, device_function, dual, gpu_kernel, gpu_specialised
from .errors import ERR_OUT_OF_BOUNDS, CorruptInputError, new_error_flag, raise_if_flagged

cuda = LAZY_CUDA

#: bits per word in the GPU kernels: a compile-time constant bound by each specialisation
#: (``kernel.get(T=32)``); declared only (no module global exists)
T: int

__all__ = [
    "BLOCK_SIZE",
    "FL_ORDER",
    "unpack_blocks",
    "unpack_selected",
    "pack_blocks",
    "unpack_blocks_gpu",
    "unpack_blocks_scatter",
    "unpack_blocks_scatter_gpu",
    "packed_words_per_block",
]

BLOCK_SIZE = 1024
FL_ORDER = np.array([0, 4, 2, 6, 1, 5, 3, 7], dtype=np.int64)

_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

# Above this many blocks, and with more than one numba thread (pool threads that decode
# pages run with one), the CPU driver uses prange over blocks.  With one thread the
# serial driver does the same work, and the parfor driver is never compiled.
_PARALLEL_MIN_BLOCKS = 256


def packed_words_per_block(bit_width, t):
    """Number of T-bit words of one packed block of width ``bit_width``."""
    return BLOCK_SIZE * int(bit_width) // int(t)


# --------------------------------------------------------------------------
# Cores (compiled for both targets)
# --------------------------------------------------------------------------


@dual
def _fl_position(row, lane):
    """Logical position inside a block of (row, lane); FL_ORDER is a 3-bit reversal."""
    g = row >> 3
    order = ((g & 1) << 2) | (g & 2) | ((g >> 2) & 1)
    return order * 16 + (row & 7) * 128 + lane


@dual
def _fl_mask(w):
    """Low ``w`` bits set (1 <= w <= 64), as uint64."""
    return np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - w)


@dual
def _fl_unpack_value(words, base, t, lanes, w, mask, row, lane):
    """Value of (row, lane) of the block of width ``w`` that starts at ``words[base]``.

    ``t`` is the word size in bits, ``lanes = 1024 // t``, ``1 <= w <= t``,
    ``mask`` is :func:`_fl_mask` of ``w``.  Returned as uint64.
    """
    bit = row * w
    wi = bit // t
    sh = bit - wi * t
    v = np.uint64(words[base + wi * lanes + lane]) >> np.uint64(sh)
    if sh + w > t:
        v |= np.uint64(words[base + (wi + 1) * lanes + lane]) << np.uint64(t - sh)
    return v & mask


@dual
def _fl_pack_value(words, base, t, lanes, w, value, row, lane):
    """OR ``value`` (already < 2**w) into its place of (row, lane); inverse of unpack."""
    bit = row * w
    wi = bit // t
    sh = bit - wi * t
    v = np.uint64(value)
    words[base + wi * lanes + lane] |= v << np.uint64(sh)
    if sh + w > t:
        words[base + (wi + 1) * lanes + lane] |= v >> np.uint64(t - sh)


@dual
def _fl_block_ok(nwords, base, t, w):
    """True if a block of width ``w`` at ``base`` lies inside ``nwords`` words."""
    if w < 0 or w > t or base < 0:
        return False
    return base + (1024 // t) * w <= nwords


@dual
def _fl_unpack_swar(src, wi, sh, t, w, q, lo_rep, mask_rep):
    """64 bits (64 / t lanes) of one row, SWAR style; ``src`` is the block as uint64.

    A FastLanes "word row" (the ``1024 / t`` words that share a word index)
    is exactly 1024 bits = 16 uint64, so the lanes of a row can be unpacked
    64 bits at a time: shifting a uint64 moves every lane field together;
    bits that bleed in from the neighbouring lane are masked away with
    ``lo_rep`` (the low ``t - sh`` bits of every lane) and ``mask_rep`` (the
    low ``w`` bits of every lane).
    """
    x = src[wi * 16 + q] >> np.uint64(sh)
    if sh + w > t:
        y = src[(wi + 1) * 16 + q] << np.uint64(t - sh)
        x = (x & lo_rep) | (y & ~lo_rep)
    return x & mask_rep


# --------------------------------------------------------------------------
# CPU drivers
# --------------------------------------------------------------------------


@cpu_driver
def _unpack_block_cpu(words, base, w, out, ob):
    """Unpack one block (CPU): per row, its ``lanes`` values from one or two word rows.

    The word size is a compile-time constant (``np.iinfo`` of the word type; an array's
    ``itemsize`` is read at run time), so the row arithmetic divides by a constant and
    the lane loops have a constant trip count; each row's word index, shift and whether
    its values cross into the next word row are worked out once, outside the lane loop,
    which LLVM then vectorises (2-4x faster than a per-lane ``_fl_unpack_value``).
    """
    t = np.iinfo(words.dtype).bits
    lanes = 1024 // t
    if w == 0:
        for i in range(1024):
            out[ob + i] = 0
        return
    mask = _fl_mask(w)
    for row in range(t):
        bit = row * w
        wi = bit // t
        sh = bit - wi * t
        pos = ob + _fl_position(row, 0)
        src = base + wi * lanes
        lo_shift = np.uint64(sh)
        if sh + w > t:
            hi_shift = np.uint64(t - sh)
            for lane in range(lanes):
                lo = np.uint64(words[src + lane]) >> lo_shift
                hi = np.uint64(words[src + lanes + lane]) << hi_shift
                out[pos + lane] = (lo | hi) & mask
        else:
            for lane in range(lanes):
                out[pos + lane] = (np.uint64(words[src + lane]) >> lo_shift) & mask


@cpu_driver
def _unpack_block_swar(words_u8, t, base, w, out64, ob64, tmp, tmp_u8):
    """Unpack one block of 8- or 16-bit words, 64 bits at a time (CPU only).

    The block's ``128 * w`` bytes are first copied to the aligned scratch
    ``tmp`` (blocks of narrow words need not be 8-byte aligned in the page).
    """
    if w == 0:
        for k in range(16 * t):
            out64[ob64 + k] = 0
        return
    nbytes = 128 * w
    b0 = base * (t // 8)
    for k in range(nbytes):
        tmp_u8[k] = words_u8[b0 + k]
    rep = np.uint64(0x0101010101010101) if t == 8 else np.uint64(0x0001000100010001)
    mask_rep = _fl_mask(w) * rep
    for row in range(t):
        bit = row * w
        wi = bit // t
        sh = bit - wi * t
        lo_rep = _fl_mask(t - sh) * rep
        o = ob64 + (_fl_position(row, 0) * t) // 64
        for q in range(16):
            out64[o + q] = _fl_unpack_swar(tmp, wi, sh, t, w, q, lo_rep, mask_rep)


@cpu_driver(twin=_twins.unpack_range_swar)
def _unpack_range_swar(words_u8, t, offsets, widths, out64, lo, hi):
    tmp = np.empty(16 * t, dtype=np.uint64)
    tmp_u8 = tmp.view(np.uint8)
    for b in range(lo, hi):
        _unpack_block_swar(words_u8, t, np.int64(offsets[b]), np.int64(widths[b]), out64, b * 16 * t, tmp, tmp_u8)


@cpu_driver(parallel=True)
def _unpack_parallel_swar(words_u8, t, offsets, widths, out64, nchunks):
    n = offsets.shape[0]
    for ch in prange(nchunks):
        _unpack_range_swar(words_u8, t, offsets, widths, out64, ch * n // nchunks, (ch + 1) * n // nchunks)


@cpu_driver(twin=_twins.check_blocks)
def _check_blocks_cpu(nwords, t, offsets, widths):
    for b in range(offsets.shape[0]):
        if not _fl_block_ok(nwords, np.int64(offsets[b]), t, np.int64(widths[b])):
            return b
    return -1


@cpu_driver(twin=_twins.unpack_blocks)
def _unpack_blocks_serial(words, offsets, widths, out):
    for b in range(offsets.shape[0]):
        _unpack_block_cpu(words, np.int64(offsets[b]), np.int64(widths[b]), out, b * 1024)


@cpu_driver(parallel=True)
def _unpack_blocks_parallel(words, offsets, widths, out):
    for b in prange(offsets.shape[0]):
        _unpack_block_cpu(words, np.int64(offsets[b]), np.int64(widths[b]), out, b * 1024)


@dual
def _fl_row_lane(pos, lanes):
    """Inverse of :func:`_fl_position`: (row, lane) of logical position ``pos`` of a block."""
    m = pos & 127
    lane = m % lanes
    order = (m - lane) >> 4
    g = ((order & 1) << 2) | (order & 2) | ((order >> 2) & 1)
    return g * 8 + (pos >> 7), lane


@cpu_driver
def _unpack_selected_cpu(words, offsets, widths, block_of, index, out):
    t = words.itemsize * 8
    lanes = 1024 // t
    for i in range(block_of.shape[0]):
        b = block_of[i]
        w = np.int64(widths[b])
        if w == 0:
            out[i] = 0
            continue
        row, lane = _fl_row_lane(np.int64(index[i]), lanes)
        out[i] = _fl_unpack_value(words, np.int64(offsets[b]), t, lanes, w, _fl_mask(w), row, lane)


@cpu_driver
def _pack_blocks_cpu(values, w, out):
    t = values.itemsize * 8
    lanes = 1024 // t
    nblocks = values.shape[0] // 1024
    wpb = lanes * w
    for b in range(nblocks):
        base = b * wpb
        for row in range(t):
            pos = b * 1024 + _fl_position(row, 0)
            for lane in range(lanes):
                _fl_pack_value(out, base, t, lanes, w, values[pos + lane], row, lane)


@cpu_driver
def _block_widths_cpu(values, n, widths):
    """Bit width of each 1024-value block of ``values[:n]`` (of the OR of its values)."""
    for b in range(widths.shape[0]):
        acc = np.uint64(0)
        for i in range(b * 1024, min(n, b * 1024 + 1024)):
            acc |= np.uint64(values[i])
        w = 0
        while acc:
            acc >>= np.uint64(1)
            w += 1
        widths[b] = w


@cpu_driver
def _pack_chunks_cpu(values, n, widths, starts, out):
    """Block ``b`` of ``values[:n]`` (zero padded to 1024) packed at ``widths[b]`` bits into
    ``out[starts[b] + 1 :]``, its width in the word ``out[starts[b]]``; ``out`` is zeroed."""
    t = values.itemsize * 8
    lanes = 1024 // t
    for b in range(widths.shape[0]):
        w = np.int64(widths[b])
        out[starts[b]] = w
        if w == 0:
            continue
        base = starts[b] + 1
        full = (b + 1) * 1024 <= n
        for row in range(t):
            pos = b * 1024 + _fl_position(row, 0)
            for lane in range(lanes):
                if full or pos + lane < n:
                    _fl_pack_value(out, base, t, lanes, w, values[pos + lane], row, lane)


# --------------------------------------------------------------------------
# GPU kernel
# --------------------------------------------------------------------------


#: threads per launch at most: the kernel counts its threads in 32 bits (the wrappers launch
#: the blocks in slices below it)
_MAX_LAUNCH_THREADS = 1 << 31


def _threads_per_block(t):
    """GPU threads per FastLanes block of ``t``-bit words: one per lane, and two per lane of
    64-bit words (16 lanes; each thread takes 32 of the 64 rows), so that a warp never holds
    two blocks and every branch on a block's width is the same for the whole warp."""
    lanes = BLOCK_SIZE // t
    return lanes * (2 if t == 64 else 1)


@dual
def _fl_order(g):
    """``FL_ORDER[g]`` (``0 <= g < 8``): the 3-bit reversal of ``g``."""
    return ((g & 1) << 2) | (g & 2) | ((g >> 2) & 1)


@dual(gpu_forceinline=True)
def _fl_unpack_rows(words, base, t, lanes, w, row0, nrows, lane, out, d, cnt):
    """Rows ``row0 .. row0 + nrows`` (multiples of 8) of lane ``lane`` of the block of width
    ``w`` (``1 <= w <= t``) at ``words[base]``: the value at logical position ``p`` goes to
    ``out[d + p]`` where ``p < cnt`` (GPU; the width at run time).

    Streamed: the lane's words are loaded one after the other, each once (``w`` loads for
    the whole lane, where :func:`_fl_unpack_value` loads one or two words per row), and only
    when a value needs them (never past the lane's last).  Words of up to 32 bits go through
    a 64-bit window of the lane's next ``avail`` bits: a value is its low ``w`` bits, then
    the window shifts down (a word is ORed in above them when fewer than ``w`` are left).
    64-bit words keep the current word and ``sh``, the bits its earlier rows took.  Rows go
    by groups of 8, the rows of a group ``128`` positions apart (:func:`_fl_position`).
    All arithmetic but the word and output positions (64-bit bases plus 32-bit offsets:
    unsigned, no negative-index fix-up) is 32-bit.
    """
    tt = np.uint32(t)
    ww = np.uint32(w)
    bit = np.uint32(row0 * w)
    wi = np.uint32(bit // tt)
    sh = np.uint32(bit - wi * tt)
    step = np.uint32(lanes)
    src = np.uint64(base) + np.uint32(wi * step + lane)
    dl = np.uint64(d) + np.uint32(lane)
    mask = _fl_mask(w)
    limit = np.uint32(cnt)  # 0..1024
    cur = np.uint64(words[src])
    buf = cur >> np.uint64(sh)  # the window (t <= 32)
    avail = np.uint32(tt - sh)
    for g in range(np.uint32(row0 >> 3), np.uint32((row0 + nrows) >> 3)):
        gpos = np.uint32(_fl_order(g) * 16)
        for j in range(8):
            if t <= 32:
                if avail < ww:  # the next word above the bits left
                    src += step
                    buf |= np.uint64(words[src]) << np.uint64(avail)
                    avail = np.uint32(avail + tt)
                v = buf
                buf >>= np.uint64(ww)
                avail = np.uint32(avail - ww)
            else:
                if sh >= tt:  # the current word used up: the next one
                    src += step
                    cur = np.uint64(words[src])
                    sh = np.uint32(0)
                v = cur >> np.uint64(sh)
                e = np.uint32(sh + ww)
                if e > tt:  # the value's high bits: the low bits of the next word
                    src += step
                    cur = np.uint64(words[src])
                    v |= cur << np.uint64(tt - sh)
                    e = np.uint32(e - tt)
                sh = e
            pos = np.uint32(gpos + np.uint32(j * 128))
            if cnt >= 1024 or np.uint32(pos + lane) < limit:  # a constant 1024: no check
                out[dl + pos] = v & mask


@dual(gpu_forceinline=True)
def _fl_zero_rows(row0, nrows, lane, out, d, cnt):
    """Zeros at the positions of rows ``row0 .. row0 + nrows`` (multiples of 8) of lane
    ``lane`` below ``cnt``, at ``out[d:]``: a block of width 0 (GPU; as
    :func:`_fl_unpack_rows`, 32-bit)."""
    dl = np.uint64(d) + np.uint32(lane)
    limit = np.uint32(cnt)
    for g in range(np.uint32(row0 >> 3), np.uint32((row0 + nrows) >> 3)):
        gpos = np.uint32(_fl_order(g) * 16)
        for j in range(8):
            pos = np.uint32(gpos + np.uint32(j * 128))
            if np.uint32(pos + lane) < limit:
                out[dl + pos] = 0


#: The widest words whose whole blocks take a width-specialised, unrolled leaf
#: (:func:`_fl_full_block`); wider ones take :func:`_fl_unpack_rows`.  Numba spends ~15 ms
#: (one core, measured) compiling each unrolled row: 1 s for 8-bit and 4 s for 16-bit
#: words, but 19 s for 32-bit and 86 s for 64-bit (1056 and 4160 rows), at each process's
#: first read -- and those values are 4-8 bytes each, their unpack bound by the stores.
SPECIALISED_MAX_T = 16


def _leaf_lines(t, w, row0, nrows, pad):
    """Source lines unpacking rows ``row0 .. row0 + nrows`` of a whole block of width ``w``
    (``1 <= w <= t``), unrolled: each word of the lane loaded once into a local (``c0,
    c1, ...``), each value one or two constant shifts of them and a constant mask, stored
    at a constant offset from ``out[dl]`` (``dl``: the block's output position plus the
    lane; ``src``: the block's first word plus the lane).  The constants are globals of the
    generated function (:func:`_switch_constants`): ``U<n>``, the uint64 ``n``."""
    lanes = BLOCK_SIZE // t
    mask = (1 << w) - 1
    lines = []
    loaded = set()

    def load(k):
        if k not in loaded:
            loaded.add(k)
            lines.append(f"{pad}c{k} = np.uint64(words[src + U{k * lanes}])")

    for row in range(row0, row0 + nrows):
        wi, sh = divmod(row * w, t)
        load(wi)
        value = f"(c{wi} >> U{sh})" if sh else f"c{wi}"
        if sh + w > t:
            load(wi + 1)
            value = f"({value} | (c{wi + 1} << U{t - sh}))"
        if sh + w != t:  # a value that ends its word is its top bits: no mask
            value = f"({value} & U{mask})"
        pos = int(FL_ORDER[row // 8]) * 16 + (row % 8) * 128
        lines.append(f"{pad}out[dl + U{pos}] = {value}")
    return lines


def _switch_constants(source):
    """The globals ``U<n>`` (``np.uint64(n)``) that :func:`_switch_source` names."""
    return {f"U{n}": np.uint64(int(n)) for n in set(re.findall(r"\bU(\d+)\b", source))}


def _switch_source(t):
    """Source of :func:`_fl_full_block` for ``t``-bit words: a binary search over the widths
    ``1..t`` whose leaves are the rows of a lane unrolled for that width
    (:func:`_leaf_lines`; 64-bit words: one leaf per half of the rows, ``h``).  Each leaf
    stores ``t`` (or 32) values from ``w`` (or half as many) loads with constant shifts."""
    halves = 2 if t == 64 else 1
    rows = t // halves
    lines = [
        "def _fl_full_block(w, h, words, base, lane, out, d):",
        "    src = np.uint64(base) + lane",
        "    dl = np.uint64(d) + lane",
    ]

    def leaf(w, pad):
        for half in range(halves):
            if halves == 1:
                lines.extend(_leaf_lines(t, w, 0, rows, pad))
            else:
                lines.append(pad + ("if h == 0:" if half == 0 else "else:"))
                lines.extend(_leaf_lines(t, w, half * rows, rows, pad + "    "))

    def tree(lo, hi, pad):  # widths lo .. hi - 1
        if hi - lo == 1:
            leaf(lo, pad)
            return
        mid = (lo + hi) // 2
        lines.append(f"{pad}if w < {mid}:")
        tree(lo, mid, pad + "    ")
        lines.append(f"{pad}else:")
        tree(mid, hi, pad + "    ")

    tree(1, t + 1, "    ")
    return "\n".join(lines) + "\n"


def _generic_source(t):
    """Source of :func:`_fl_full_block` for words wider than :data:`SPECIALISED_MAX_T`: the
    rows of the thread through :func:`_fl_unpack_rows`, the width at run time but every
    other argument constant (inlined: no output bound to check)."""
    halves = 2 if t == 64 else 1
    rows = t // halves
    call = f"_fl_unpack_rows(words, base, {t}, {BLOCK_SIZE // t}, w, h * {rows}, {rows}, lane, out, d, {BLOCK_SIZE})"
    return f"def _fl_full_block(w, h, words, base, lane, out, d):\n    {call}\n"


@gpu_specialised
def _fl_full_block(T):  # noqa: N803 - the kernels' constant
    """The device function ``(w, h, words, base, lane, out, d)`` of ``T``-bit words: rows
    ``h * R .. (h + 1) * R`` (``R`` the rows per thread, :func:`_threads_per_block`) of lane
    ``lane`` of a whole block (1024 values) of width ``w`` (``1 <= w <= T``) at
    ``words[base]`` to ``out[d:]``.  Up to :data:`SPECIALISED_MAX_T` bits, through the leaf
    of its width, the rows unrolled with constant shifts and masks (:func:`_switch_source`);
    wider, :func:`_fl_unpack_rows` (:func:`_generic_source`).  Built per word size when a
    kernel of it is compiled; every branch is the same for a warp (one block)."""
    source = _switch_source(T) if T <= SPECIALISED_MAX_T else _generic_source(T)
    namespace = {**globals(), **_switch_constants(source)}
    exec(compile(source, f"<bitunpack width switch T={T}>", "exec"), namespace)  # noqa: S102 - our generated source
    return device_function(namespace["_fl_full_block"], forceinline=True)


@gpu_kernel
def _unpack_scatter_kernel(words, offsets, widths, dst, counts, out, err):
    """Block ``blk`` keeps its first ``counts[blk]`` values and writes them at
    ``out[dst[blk]:]``: blocks of many pages (partial last blocks included) land straight in
    their columns, in one launch.  ``T`` (bits per word) is a compile-time constant.

    Threads: :func:`_threads_per_block` per block, thread ``k`` of a block on lane ``k %
    lanes``, rows ``(k // lanes) * R ..`` (``R = T`` rows, 32 of 64-bit words).  Whole blocks
    take the leaf of their width (:func:`_fl_full_block`), partial ones the generic
    :func:`_fl_unpack_rows` (the width at run time).  Thread, block and lane numbers are
    32-bit (fewer than 2 ** 31 threads per launch: the wrappers slice the blocks)."""
    lanes = 1024 // T  # noqa: F821
    halves = 2 if T == 64 else 1  # noqa: F821
    rows = T // halves  # noqa: F821
    per = lanes * halves
    tid = np.uint32(np.uint32(cuda.blockIdx.x) * np.uint32(cuda.blockDim.x) + np.uint32(cuda.threadIdx.x))
    blk = np.uint32(tid // per)
    k = np.uint32(tid - blk * per)
    h = np.uint32(k // lanes)
    lane = np.uint32(k - h * lanes)
    if blk >= offsets.shape[0]:
        return
    base = np.int64(offsets[blk])
    w = np.int64(widths[blk])
    d = np.int64(dst[blk])
    cnt = np.int64(counts[blk])
    if not _fl_block_ok(words.shape[0], base, T, w) or cnt < 0 or cnt > 1024 or d < 0 or d + cnt > out.shape[0]:  # noqa: F821
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        return
    dd = np.uint64(d)
    if w == 0:
        _fl_zero_rows(h * rows, rows, lane, out, dd, cnt)
    elif cnt == 1024:
        _fl_full_block(w, h, words, base, lane, out, dd)  # the leaf of its width
    else:
        _fl_unpack_rows(words, base, T, lanes, w, h * rows, rows, lane, out, dd, cnt)  # noqa: F821


def _launch_scatter(t, d_words, d_offsets, d_widths, d_dst, d_counts, d_out, threads_per_block, what):
    """:data:`_unpack_scatter_kernel` over every block, in launches of fewer than 2 ** 31
    threads (slices of the block descriptors), one error flag for all."""
    nblocks = d_offsets.shape[0]
    if not nblocks:
        return
    per = _threads_per_block(t)
    step = _MAX_LAUNCH_THREADS // per
    kernel = _unpack_scatter_kernel.get(T=t)
    err = new_error_flag()
    for b0 in range(0, nblocks, step):
        b1 = min(nblocks, b0 + step)
        blocks, tpb = _device.launch_dims((b1 - b0) * per, threads_per_block)
        kernel[blocks, tpb](d_words, d_offsets[b0:b1], d_widths[b0:b1], d_dst[b0:b1], d_counts[b0:b1], d_out, err)
    raise_if_flagged(err, what)


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def _as_unsigned_words(words):
    words = np.asarray(words)
    if words.ndim != 1:
        msg = "words must be a 1-D array"
        raise ValueError(msg)
    udt = _UNSIGNED.get(words.dtype.itemsize)
    if udt is None or words.dtype.kind not in "ui":
        msg = f"words must be an 8/16/32/64-bit integer array, got {words.dtype}"
        raise TypeError(msg)
    return np.ascontiguousarray(words).view(udt)


def _check_out(out, n, dtype):
    if out is None:
        return np.empty(n, dtype=dtype)
    if out.shape != (n,) or out.dtype.itemsize != np.dtype(dtype).itemsize:
        msg = f"out must have shape ({n},) and itemsize {np.dtype(dtype).itemsize}"
        raise ValueError(msg)
    if not out.flags.c_contiguous:
        msg = "out must be C-contiguous"
        raise ValueError(msg)
    return out


def unpack_blocks(words, block_word_offsets, bit_widths, out=None):
    """Unpack FastLanes blocks (CPU).

    :param words: ``uint8/16/32/64`` array holding the packed blocks (T = its bit size).
    :param block_word_offsets: ``int64[nblocks]``; block ``i`` starts at ``words[block_word_offsets[i]]``.
    :param bit_widths: ``int[nblocks]`` (any integer dtype); width ``W`` of each block, ``0 <= W <= T``.
    :param out: optional ``uintT[nblocks * 1024]`` output array.
    :returns: ``uintT[nblocks * 1024]``, the values in logical order.
    :raises CorruptInputError: a width exceeds T or a block runs past the end of ``words``.
    """
    words = read_only(_as_unsigned_words(words))  # one flavour: file maps are read-only
    offsets = np.ascontiguousarray(block_word_offsets, dtype=np.int64)
    widths = np.ascontiguousarray(bit_widths)
    if widths.dtype.kind not in "ui":
        widths = widths.astype(np.int64)
    if offsets.shape != widths.shape or offsets.ndim != 1:
        msg = "block_word_offsets and bit_widths must be 1-D arrays of the same length"
        raise ValueError(msg)
    nblocks = offsets.shape[0]
    t = words.dtype.itemsize * 8
    out = _check_out(out, nblocks * BLOCK_SIZE, words.dtype)
    if nblocks == 0:
        return out
    bad = _check_blocks_cpu(words.shape[0], t, offsets, widths)
    if bad >= 0:
        msg = (
            f"unpack_blocks: block {bad} (offset {int(offsets[bad])}, width "
            f"{int(widths[bad])}) does not fit in {words.shape[0]} words of {t} bits"
        )
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    target = out.view(words.dtype)
    if t <= 16 and target.ctypes.data % 8 == 0 and sys.byteorder == "little":
        # 8/16-bit words: SWAR path, 64 / t lanes per uint64 operation.
        out64 = target.view(np.uint64)
        words_u8 = words.view(np.uint8)
        if nblocks >= _PARALLEL_MIN_BLOCKS and numba.get_num_threads() > 1:
            nchunks = max(1, min(4 * numba.get_num_threads(), nblocks // 64))
            _unpack_parallel_swar(words_u8, t, offsets, widths, out64, nchunks)
        else:
            _unpack_range_swar(words_u8, t, offsets, widths, out64, 0, nblocks)
        return out
    if nblocks >= _PARALLEL_MIN_BLOCKS and numba.get_num_threads() > 1:
        _unpack_blocks_parallel(words, offsets, widths, target)
    else:
        _unpack_blocks_serial(words, offsets, widths, target)
    return out


def unpack_selected(words, block_word_offsets, bit_widths, block_of, index_in_block):
    """Unpack single values of FastLanes blocks (CPU): value ``index_in_block[i]`` (0..1023)
    of block ``block_of[i]``, for every i; no other value of any block is unpacked.

    :param words: as :func:`unpack_blocks`.
    :param block_word_offsets: ``int64[nblocks]`` as :func:`unpack_blocks`.
    :param bit_widths: ``int[nblocks]`` as :func:`unpack_blocks`.
    :param block_of: ``int64[n]``, block numbers in ``0..nblocks-1``.
    :param index_in_block: ``int64[n]``, logical positions in ``0..1023``.
    :returns: ``uintT[n]``.
    :raises CorruptInputError: a width exceeds T or a block runs past the end of ``words``.
    """
    words = _as_unsigned_words(words)
    offsets = np.ascontiguousarray(block_word_offsets, dtype=np.int64)
    widths = np.ascontiguousarray(bit_widths, dtype=np.int64)
    block_of = np.ascontiguousarray(block_of, dtype=np.int64)
    index = np.ascontiguousarray(index_in_block, dtype=np.int64)
    if offsets.shape != widths.shape or block_of.shape != index.shape:
        msg = "offsets/widths and block_of/index_in_block must have matching shapes"
        raise ValueError(msg)
    out = np.empty(block_of.shape[0], dtype=words.dtype)
    if out.size == 0:
        return out
    if int(block_of.min()) < 0 or int(block_of.max()) >= offsets.shape[0] or int(index.min()) < 0 or int(index.max()) >= BLOCK_SIZE:
        msg = "unpack_selected: block or position out of range"
        raise ValueError(msg)
    t = words.dtype.itemsize * 8
    bad = _check_blocks_cpu(words.shape[0], t, offsets, widths)
    if bad >= 0:
        msg = (
            f"unpack_selected: block {bad} (offset {int(offsets[bad])}, width "
            f"{int(widths[bad])}) does not fit in {words.shape[0]} words of {t} bits"
        )
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    _unpack_selected_cpu(words, offsets, widths, block_of, index, out)
    return out


def pack_blocks(values, bit_width):
    """Pack values into FastLanes blocks of one width (CPU; inverse of :func:`unpack_blocks`).

    :param values: ``uintT`` array whose length is a multiple of 1024 and whose
        values fit in ``bit_width`` bits.
    :param bit_width: ``0 <= W <= T``.
    :returns: ``uintT[nblocks * 1024 * W / T]``; block ``i`` starts at word ``i * 1024 * W / T``.
    """
    values = _as_unsigned_words(values)
    t = values.dtype.itemsize * 8
    w = int(bit_width)
    if not 0 <= w <= t:
        msg = f"bit_width must be in 0..{t}, got {w}"
        raise ValueError(msg)
    if values.shape[0] % BLOCK_SIZE:
        msg = f"pack_blocks needs a multiple of {BLOCK_SIZE} values, got {values.shape[0]}"
        raise ValueError(msg)
    nblocks = values.shape[0] // BLOCK_SIZE
    out = np.zeros(nblocks * packed_words_per_block(w, t), dtype=values.dtype)
    if w == 0 or nblocks == 0:
        if w == 0 and values.size and values.any():
            msg = "values do not fit in 0 bits"
            raise ValueError(msg)
        return out
    if w < t and values.size and int(values.max()) >> w:
        msg = f"values do not fit in {w} bits"
        raise ValueError(msg)
    _pack_blocks_cpu(values, w, out)
    return out


def block_bit_widths(values):
    """Bit width of each 1024-value block of unsigned ``values`` (the last block zero
    padded): int64, one per block (at least one block)."""
    values = _as_unsigned_words(np.ascontiguousarray(values))
    n = values.shape[0]
    widths = np.zeros(max(1, -(-n // BLOCK_SIZE)), np.int64)
    _block_widths_cpu(values, n, widths)
    return widths


def pack_chunks(values, widths):
    """Inline FastLanes chunks: for each 1024-value block of ``values`` (uintT; the last
    zero padded) one T-bit word holding its width ``widths[b]`` followed by the block
    packed at that width (``1024 * W / T`` words).  Returns ``(words, words per chunk)``.
    The widths must hold the blocks' values (:func:`block_bit_widths`)."""
    values = _as_unsigned_words(np.ascontiguousarray(values))
    t = values.dtype.itemsize * 8
    widths = np.ascontiguousarray(widths, np.int64)
    per_chunk = 1 + (BLOCK_SIZE // t) * widths
    starts = np.zeros(widths.shape[0], np.int64)
    np.cumsum(per_chunk[:-1], out=starts[1:])
    out = np.zeros(int(per_chunk.sum()), values.dtype)
    _pack_chunks_cpu(values, values.shape[0], widths, starts, out)
    return out, per_chunk


def unpack_blocks_gpu(words, block_word_offsets, bit_widths, out=None, *, threads_per_block=128):
    """Unpack FastLanes blocks on the GPU: the scatter kernel with every block whole, one launch.

    Same meaning as :func:`unpack_blocks`; arrays may be numba device arrays,
    CuPy arrays or NumPy arrays (copied to the device).  Returns a device array
    (CuPy if any input was CuPy).
    """
    use_cp = _device.wants_cupy(words, block_word_offsets, bit_widths, out)
    d_words = _device.to_device(words)
    dt = np.dtype(d_words.dtype)
    udt = _UNSIGNED.get(dt.itemsize)
    if udt is None or dt.kind not in "ui":
        msg = f"words must be an 8/16/32/64-bit integer array, got {dt}"
        raise TypeError(msg)
    d_words = _device.to_device(d_words, udt)
    d_offsets = _device.to_device(block_word_offsets)
    d_widths = _device.to_device(bit_widths)
    for name, arr in (("block_word_offsets", d_offsets), ("bit_widths", d_widths)):
        if np.dtype(arr.dtype).kind not in "iu":
            msg = f"{name} must be an integer array, got {arr.dtype}"
            raise TypeError(msg)
    nblocks = d_offsets.shape[0]
    if d_widths.shape[0] != nblocks:
        msg = "block_word_offsets and bit_widths must have the same length"
        raise ValueError(msg)
    t = dt.itemsize * 8
    if out is None:
        d_out = _device.device_empty(nblocks * BLOCK_SIZE, udt)
    else:
        d_out = _device.to_device(out, udt)
        if d_out.shape[0] != nblocks * BLOCK_SIZE:
            msg = f"out must have {nblocks * BLOCK_SIZE} items"
            raise ValueError(msg)
    if nblocks:
        # every block whole, one after the other: the scatter kernel's descriptors
        d_dst = _device.to_device(np.arange(nblocks, dtype=np.int64) * BLOCK_SIZE)
        d_counts = _device.to_device(np.full(nblocks, BLOCK_SIZE, np.int64))
        _launch_scatter(t, d_words, d_offsets, d_widths, d_dst, d_counts, d_out, threads_per_block, "unpack_blocks_gpu")
    return _device.as_output(d_out, use_cp)


def _scatter_check(nblocks, dst, counts, out_size):
    if dst.shape != (nblocks,) or counts.shape != (nblocks,):
        msg = "dst and counts must have one entry per block"
        raise ValueError(msg)
    if nblocks and (counts.min() < 0 or counts.max() > BLOCK_SIZE or dst.min() < 0 or int((dst + counts).max()) > out_size):
        msg = "unpack_blocks_scatter: a block's destination lies outside out"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)


def unpack_blocks_scatter(words, block_word_offsets, bit_widths, dst, counts, out):
    """Unpack FastLanes blocks and keep the first ``counts[i]`` values of block ``i`` at
    ``out[dst[i]:dst[i] + counts[i]]`` (CPU; ``out`` is written in place and returned).

    ``out`` has the words' item size.  The same as :func:`unpack_blocks` followed by a
    copy per block; it lets one call place blocks of many pages in their columns.
    """
    words = _as_unsigned_words(words)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    offsets = np.ascontiguousarray(block_word_offsets, dtype=np.int64)
    nblocks = offsets.shape[0]
    if out.dtype.itemsize != words.dtype.itemsize:
        msg = f"out must have itemsize {words.dtype.itemsize}"
        raise ValueError(msg)
    _scatter_check(nblocks, dst, counts, out.shape[0])
    unpacked = unpack_blocks(words, offsets, bit_widths)
    target = out.view(words.dtype)
    for b in range(nblocks):
        c = int(counts[b])
        target[dst[b] : dst[b] + c] = unpacked[b * BLOCK_SIZE : b * BLOCK_SIZE + c]
    return out


def unpack_blocks_scatter_gpu(words, block_word_offsets, bit_widths, dst, counts, out, *, threads_per_block=128):
    """GPU twin of :func:`unpack_blocks_scatter`: one launch, one thread per (block, lane)
    (two per lane of 64-bit words), each block through the leaf of its width.

    ``out`` is a device array (written in place) whose item size is the words';
    block descriptors may be host or device arrays.
    """
    d_words = _device.to_device(words)
    dt = np.dtype(d_words.dtype)
    udt = _UNSIGNED.get(dt.itemsize)
    if udt is None or dt.kind not in "ui":
        msg = f"words must be an 8/16/32/64-bit integer array, got {dt}"
        raise TypeError(msg)
    d_words = _device.to_device(d_words, udt)
    d_out = _device.to_device(out, udt)
    host = [isinstance(a, (np.ndarray, list, tuple)) for a in (block_word_offsets, bit_widths, dst, counts)]
    if all(host):
        offsets = np.ascontiguousarray(block_word_offsets, dtype=np.int64)
        _scatter_check(offsets.shape[0], np.asarray(dst, np.int64), np.asarray(counts, np.int64), d_out.shape[0])
    d_offsets = _device.to_device(np.asarray(block_word_offsets, np.int64) if host[0] else block_word_offsets)
    d_widths = _device.to_device(np.asarray(bit_widths, np.int64) if host[1] else bit_widths)
    d_dst = _device.to_device(np.asarray(dst, np.int64) if host[2] else dst)
    d_counts = _device.to_device(np.asarray(counts, np.int64) if host[3] else counts)
    _launch_scatter(dt.itemsize * 8, d_words, d_offsets, d_widths, d_dst, d_counts, d_out, threads_per_block,
                    "unpack_blocks_scatter_gpu")
    return out
