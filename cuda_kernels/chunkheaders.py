"""Chunk headers parsed where the chunks lie: a pre-pass over every chunk of a pass.

A *chunk* is ``size`` bytes at ``start`` of a byte buffer ``data`` (on the device: the
pass's staged arena) laid out as::

    u16 num_levels | [u16 rep_bytes] | [u16 def_bytes] | nbuf sizes (u16, or u32 if large)
    | pad to 8 | rep bytes, pad 8 | def bytes, pad 8 | buffer 0, pad 8 | buffer 1, pad 8
    | buffer 2, pad 8

(the mini-block chunk of the Lance 2.1 / 2.2 file format; this module knows only these
bytes).  Buffer 0 may hold *inline bit-packed blocks* of ``word``-byte words: per 1024
values one word holding the bit width ``W`` (``0 <= W <= 8 * word``) followed by ``1024 * W
/ (8 * word)`` packed words; the chunk's ``count`` values take ``ceil(count / 1024)`` blocks.
The rep and def sections hold ``num_levels`` u16 levels each, either as such blocks (``word``
2) or in *block-form RLE* (``u64 value bytes V | V bytes of u16 run values | V / 2 u8 run
lengths``), or in a form whose work needs only the section's span (raw, out-of-line packed).

Per chunk ``i`` the caller gives (``int64`` columns): ``start``, ``size``, ``count``, ``limit``
(where the bytes the chunk may refer to end in ``data``: its page's end), ``block_first``
(where its blocks go in the block table: an exclusive scan of :func:`block_rows`) and
``shape``, a bit set::

    bit 0  rep_bytes present         bit 1  def_bytes present
    bit 2  u32 buffer sizes          bit 3  num_levels must equal count
    bits 4..7  nbuf (0 to 3)         bits 8..11  word bytes of inline blocks in buffer 0 (0: none)
    bits 12..13  rep levels          bits 14..15  def levels (0: spans only, 1: inline
                                     bit-packed u16 blocks, 2: block-form RLE)

and gets (``out``, ``int64[n, 14]``): ``num_levels``, rep ``(start, size)``, def ``(start,
size)``, buffers 0, 1 and 2 ``(start, size)`` (positions in ``data``; three buffers: nested
fixed-size lists' two layers of item validity, then their items), the run counts of
RLE rep and def sections, and a status: the OR of :data:`BAD_HEADER` (the chunk passes
``limit``, or a section or the padded header passes the chunk's end), :data:`BAD_LEVELS`
(``num_levels != count`` where asked), :data:`BAD_BLOCKS` (an impossible bit width, a
misaligned buffer, a block past ``limit`` or more level blocks than kept for),
:data:`BAD_RLE_SHORT` (an RLE section shorter than its u64) and :data:`BAD_RLE_RANGE` (its
values and run lengths pass its end).  The block table (``int64[nblocks, 2]``: word index
in ``data`` of a block's packed words, its width) keeps, from ``block_first[i]``, the chunk's
value blocks, then its def level blocks, then its rep level blocks (:func:`block_rows`).
A chunk with repetition levels holds an in-band level count (at most 65,535), so its level
sections keep ``min(64, size // 2)`` rows each, used from the first (the rest zeroed).

GPU: one thread per chunk (every chunk's start is known from the caller's chunk metadata,
so chunks are independent), one launch for every chunk of a pass, and the caller reads
``out`` and ``blocks`` back in one copy (they may be views of one allocation).
CPU: the same core in a loop (the reference the device is tested against).
"""

import numpy as np

from . import _device
from ._target import LAZY_CUDA, cpu_driver, dual, gpu_kernel

cuda = LAZY_CUDA

__all__ = [
    "BAD_BLOCKS", "BAD_HEADER", "BAD_LEVELS", "BAD_RLE_RANGE", "BAD_RLE_SHORT", "LEVELS_INLINE", "LEVELS_RLE",
    "LEVELS_SPANS", "OUT_BUF0", "OUT_BUF1", "OUT_BUF2", "OUT_COLUMNS", "OUT_DEF", "OUT_DEF_RUNS", "OUT_LEVELS", "OUT_REP",
    "OUT_REP_RUNS", "OUT_STATUS", "SHAPE_CHECK_LEVELS", "SHAPE_DEF", "SHAPE_DEF_LEVELS_AT", "SHAPE_LARGE",
    "SHAPE_NBUF_AT", "SHAPE_REP", "SHAPE_REP_LEVELS_AT", "SHAPE_WORD_AT", "block_rows", "level_block_offsets",
    "level_form", "parse_chunk_headers", "parse_chunk_headers_gpu", "shape_bits",
]

BAD_HEADER = 1
BAD_LEVELS = 2
BAD_BLOCKS = 4
BAD_RLE_SHORT = 8
BAD_RLE_RANGE = 16
#: columns of ``out``: levels, rep start/size, def start/size, buffer 0 / 1 / 2 start/size
#: (one after the other), rep RLE runs, def RLE runs, status
OUT_LEVELS, OUT_REP, OUT_DEF, OUT_BUF0, OUT_BUF1, OUT_BUF2, OUT_REP_RUNS, OUT_DEF_RUNS, OUT_STATUS = 0, 1, 3, 5, 7, 9, 11, 12, 13
OUT_COLUMNS = 14
#: ``shape`` flags and field positions (the module docstring)
SHAPE_REP, SHAPE_DEF, SHAPE_LARGE, SHAPE_CHECK_LEVELS = 1, 2, 4, 8
SHAPE_NBUF_AT, SHAPE_WORD_AT, SHAPE_REP_LEVELS_AT, SHAPE_DEF_LEVELS_AT = 4, 8, 12, 14
#: level section forms (``shape`` bits 12..13 and 14..15)
LEVELS_SPANS, LEVELS_INLINE, LEVELS_RLE = 0, 1, 2
_LEVEL_BLOCKS_MAX = 64  # ceil(65535 / 1024): blocks of a u16 in-band level count


def shape_bits(has_rep, has_def, large, check_levels, nbuf, inline_word, rep_levels=LEVELS_SPANS, def_levels=LEVELS_SPANS):
    """The ``shape`` bit set of a chunk (see the module docstring)."""
    if not 0 <= nbuf <= 3 or inline_word not in (0, 1, 2, 4, 8) or not {rep_levels, def_levels} <= {0, 1, 2}:
        msg = f"chunk shape nbuf={nbuf} inline_word={inline_word} levels={rep_levels},{def_levels} out of range"
        raise ValueError(msg)
    return (SHAPE_REP * int(has_rep) | SHAPE_DEF * int(has_def) | SHAPE_LARGE * int(large)
            | SHAPE_CHECK_LEVELS * int(check_levels) | nbuf << SHAPE_NBUF_AT | inline_word << SHAPE_WORD_AT
            | rep_levels << SHAPE_REP_LEVELS_AT | def_levels << SHAPE_DEF_LEVELS_AT)


def level_form(shape, rep: bool):
    """The rep (``rep``) or def level form of chunks of ``shape`` (NumPy or int):
    :data:`LEVELS_SPANS` where the chunk has no such levels."""
    flag, at = (SHAPE_REP, SHAPE_REP_LEVELS_AT) if rep else (SHAPE_DEF, SHAPE_DEF_LEVELS_AT)
    return ((shape >> at) & 3) * ((shape & flag) != 0)


def _level_rows(shape, count, size):
    """Rows one inline bit-packed level section of each chunk keeps (``_level_reserve``)."""
    shape = np.asarray(shape, np.int64)
    with_rep = np.minimum(np.maximum(np.asarray(size, np.int64) // 2, 0), _LEVEL_BLOCKS_MAX)
    return np.where(shape & SHAPE_REP != 0, with_rep, -(-np.asarray(count, np.int64) // 1024))


def block_rows(shape, count, size):
    """Rows of the block table each chunk keeps (NumPy over the chunk columns): its value
    blocks, then its def and rep level blocks (see the module docstring)."""
    shape = np.asarray(shape, np.int64)
    word = (shape >> SHAPE_WORD_AT) & 15
    value = np.where(word != 0, -(-np.asarray(count, np.int64) // 1024), 0)
    lev = _level_rows(shape, count, size)
    has_def = level_form(shape, False) == LEVELS_INLINE
    has_rep = level_form(shape, True) == LEVELS_INLINE
    return value + np.where(has_def, lev, 0) + np.where(has_rep, lev, 0)


def level_block_offsets(shape, count, size):
    """Where each chunk's def and rep level blocks start among its rows: ``(def, rep)``."""
    shape = np.asarray(shape, np.int64)
    word = (shape >> SHAPE_WORD_AT) & 15
    value = np.where(word != 0, -(-np.asarray(count, np.int64) // 1024), 0)
    has_def = level_form(shape, False) == LEVELS_INLINE
    return value, value + np.where(has_def, _level_rows(shape, count, size), 0)


@dual
def _u16(data, p):
    return np.int64(data[p]) | (np.int64(data[p + 1]) << 8)


@dual
def _inline_blocks(data, q, lim, word, remaining, k, kend, blocks):
    """Walk the inline bit-packed blocks of ``remaining`` values of ``word`` bytes from byte
    ``q`` (none may pass ``lim``) into ``blocks[k:kend]``; returns 0 or :data:`BAD_BLOCKS`."""
    bits = word * 8
    if q % word != 0:
        return BAD_BLOCKS
    while remaining > 0:
        if k >= kend or q + word > lim:
            return BAD_BLOCKS
        w = np.int64(0)
        for z in range(word):
            w |= np.int64(data[q + z]) << (8 * z)
        if w < 0 or w > bits:
            return BAD_BLOCKS
        q += word
        blocks[k, 0] = q // word
        blocks[k, 1] = w
        q += 1024 * w // bits * word
        if q > lim:
            return BAD_BLOCKS
        k += 1
        remaining -= 1024
    return 0


@dual
def _rle_runs(data, p, sz):
    """The run count of a block-form RLE level buffer (``u64 value bytes | u16 values | u8
    run lengths``) of ``sz`` bytes at ``p``, or ``-1`` (shorter than its header) or ``-2``
    (its sections pass its end)."""
    if sz < 8:
        return np.int64(-1)
    head = np.int64(0)
    for z in range(8):
        head |= np.int64(data[p + z]) << (8 * z)
    if head < 0 or head % 2 != 0 or 8 + head + head // 2 > sz:
        return np.int64(-2)
    return head // 2


@dual
def _section(out, i, col, p, nbytes, end):
    """Record a section of ``nbytes`` at ``p`` (of a chunk ending at ``end``) in ``out[i,
    col:col + 2]``; returns where the next section starts (8-aligned) and 0 or
    :data:`BAD_HEADER` (it passes the chunk's end)."""
    out[i, col] = p
    out[i, col + 1] = nbytes
    bad = np.int64(BAD_HEADER) if p + nbytes > end else np.int64(0)
    return p + ((nbytes + 7) // 8) * 8, bad


@dual
def _rle_section(data, out, i, span, runs):
    """The run count of chunk ``i``'s block-form RLE level section (its ``(start, size)`` in
    ``out[i, span:span + 2]``) into ``out[i, runs]``; returns 0, :data:`BAD_RLE_SHORT` or
    :data:`BAD_RLE_RANGE`."""
    r = _rle_runs(data, out[i, span], out[i, span + 1])
    if r == -1:
        return BAD_RLE_SHORT
    if r < 0:
        return BAD_RLE_RANGE
    out[i, runs] = r
    return 0


@dual
def _level_reserve(has_rep, count, size):
    """Rows of the block table a chunk keeps for one inline bit-packed level buffer: one per
    1024 levels, where the levels are its ``count`` values; with repetition levels their
    count is in-band (a u16: at most 64 blocks, each at least one u16 word of the chunk)."""
    if not has_rep:
        return (count + 1023) // 1024
    r = size // 2
    if r > 64:
        r = 64
    if r < 0:
        r = 0
    return r


@dual
def _parse_chunk(data, i, start, size, count, limit, shape, block_first, out, blocks):
    """Parse chunk ``i`` (see the module docstring) into ``out[i]`` and its blocks."""
    for c in range(OUT_COLUMNS):
        out[i, c] = 0
    s = start[i]
    end = s + size[i]
    total = data.shape[0]
    sh = shape[i]
    has_rep = (sh & SHAPE_REP) != 0
    has_def = (sh & SHAPE_DEF) != 0
    large = (sh & SHAPE_LARGE) != 0
    nbuf = (sh >> SHAPE_NBUF_AT) & 15
    word = (sh >> SHAPE_WORD_AT) & 15
    rep_enc = (sh >> SHAPE_REP_LEVELS_AT) & 3
    def_enc = (sh >> SHAPE_DEF_LEVELS_AT) & 3
    hdr = 2 + (2 if has_rep else 0) + (2 if has_def else 0) + nbuf * (4 if large else 2)
    if s < 0 or end > total or end > limit[i] or hdr > size[i]:
        out[i, OUT_STATUS] = BAD_HEADER
        return
    p = s
    out[i, OUT_LEVELS] = _u16(data, p)
    p += 2
    rb = np.int64(0)
    db = np.int64(0)
    if has_rep:
        rb = _u16(data, p)
        p += 2
    if has_def:
        db = _u16(data, p)
        p += 2
    b0 = np.int64(0)
    b1 = np.int64(0)
    b2 = np.int64(0)
    for b in range(nbuf):
        v = _u16(data, p)
        if large:
            v |= _u16(data, p + 2) << 16
            p += 4
        else:
            p += 2
        if b == 0:
            b0 = v
        elif b == 1:
            b1 = v
        else:
            b2 = v
    p = s + ((p - s + 7) // 8) * 8
    status = np.int64(0)
    if has_rep:
        p, bad = _section(out, i, OUT_REP, p, rb, end)
        status |= bad
    if has_def:
        p, bad = _section(out, i, OUT_DEF, p, db, end)
        status |= bad
    if nbuf >= 1:
        p, bad = _section(out, i, OUT_BUF0, p, b0, end)
        status |= bad
    if nbuf >= 2:
        p, bad = _section(out, i, OUT_BUF1, p, b1, end)
        status |= bad
    if nbuf >= 3:
        p, bad = _section(out, i, OUT_BUF2, p, b2, end)
        status |= bad
    if p - 8 > end:
        status |= BAD_HEADER
    if (sh & SHAPE_CHECK_LEVELS) != 0 and out[i, OUT_LEVELS] != count[i]:
        status |= BAD_LEVELS
    if status != 0:
        out[i, OUT_STATUS] = status
        return
    lim = limit[i]
    if lim > total:
        lim = total
    k = block_first[i]
    vres = (count[i] + 1023) // 1024 if word != 0 else 0
    lres = _level_reserve(has_rep, count[i], size[i])
    nres = vres + (lres if def_enc == LEVELS_INLINE and has_def else 0) + (lres if rep_enc == LEVELS_INLINE and has_rep else 0)
    for r in range(k, k + nres):  # rows kept past a section's last block read as zeros
        blocks[r, 0] = 0
        blocks[r, 1] = 0
    if word != 0:
        status |= _inline_blocks(data, out[i, OUT_BUF0], lim, word, count[i], k, k + vres, blocks)
    k += vres
    nlev = out[i, OUT_LEVELS]
    if def_enc == LEVELS_INLINE and has_def:
        status |= _inline_blocks(data, out[i, OUT_DEF], lim, 2, nlev, k, k + lres, blocks)
        k += lres
    if rep_enc == LEVELS_INLINE and has_rep:
        status |= _inline_blocks(data, out[i, OUT_REP], lim, 2, nlev, k, k + lres, blocks)
    if rep_enc == LEVELS_RLE and has_rep:
        status |= _rle_section(data, out, i, OUT_REP, OUT_REP_RUNS)
    if def_enc == LEVELS_RLE and has_def:
        status |= _rle_section(data, out, i, OUT_DEF, OUT_DEF_RUNS)
    out[i, OUT_STATUS] = status


@cpu_driver
def _parse_cpu(data, start, size, count, limit, shape, block_first, out, blocks):
    for i in range(start.shape[0]):
        _parse_chunk(data, i, start, size, count, limit, shape, block_first, out, blocks)


@gpu_kernel
def _parse_kernel(data, start, size, count, limit, shape, block_first, out, blocks):
    i = cuda.grid(1)
    if i < start.shape[0]:
        _parse_chunk(data, i, start, size, count, limit, shape, block_first, out, blocks)


def _columns(start, size, count, limit, shape, block_first):
    cols = [np.ascontiguousarray(c, np.int64).reshape(-1) for c in (start, size, count, limit, shape, block_first)]
    n = cols[0].size
    if any(c.size != n for c in cols):
        msg = "chunk columns differ in length"
        raise ValueError(msg)
    return cols


def parse_chunk_headers(data, start, size, count, limit, shape, block_first, nblocks):
    """Parse every chunk on the CPU (see the module docstring); returns ``(out, blocks)``."""
    cols = _columns(start, size, count, limit, shape, block_first)
    out = np.zeros((cols[0].size, OUT_COLUMNS), np.int64)
    blocks = np.zeros((max(int(nblocks), 0), 2), np.int64)
    if cols[0].size:
        _parse_cpu(np.ascontiguousarray(data).view(np.uint8), *cols, out, blocks)
    return out, blocks


def parse_chunk_headers_gpu(data, start, size, count, limit, shape, block_first, out, blocks, *, threads_per_block=128):
    """Parse every chunk on the device, one thread per chunk, into the device arrays ``out``
    (``int64[n, 12]``) and ``blocks`` (``int64[nblocks, 2]``); nothing is read back (the
    status column says what is corrupt).  Column arguments may be host arrays (uploaded;
    inside ``_device.work_table`` views of the pass's table)."""
    n = int(np.asarray(start).size) if not hasattr(start, "copy_to_host") else int(start.shape[0])
    if not n:
        return out, blocks
    d = [_device.to_device(c) for c in (start, size, count, limit, shape, block_first)]
    grid, tpb = _device.launch_dims(n, threads_per_block)
    _parse_kernel.get()[grid, tpb](_device.to_device(data), *d, out, blocks)
    return out, blocks
