# SPDX-License-Identifier: Apache-2.0
"""numpy twins of the loops in :mod:`lance_gpu.cpu.native`, for a cold kernel cache.

Same contract as :mod:`cuda_kernels._twins`: the driver's arguments, results and writes
into output arguments for every input the driver accepts, ``NotImplemented`` (the driver
then runs) wherever it would report an error, so error results are the driver's own.
Tested against the drivers in tests/test_jit_twins.py.
"""

from __future__ import annotations

import codecs
from typing import Any

import numpy as np

from cuda_kernels.utf8 import symbol_next

__all__ = [
    "chunk_headers",
    "chunk_layout",
    "copy_ranges_utf8",
    "fsst_chunks_one_pass",
    "gather_ranges_into",
    "inline_bitpack_blocks",
    "ool_chunk_assemble",
    "ool_chunk_plan",
    "variable_chunks",
]


def _le(data: np.ndarray, pos: np.ndarray, nbytes: int) -> np.ndarray:
    """Little-endian unsigned ``nbytes``-byte values at ``pos``, as int64 (8 bytes: two's complement)."""
    if pos.size and data.ctypes.data % nbytes == 0 and not bool((pos % nbytes).any()):
        # aligned: one gather of whole words
        words = data[: data.size // nbytes * nbytes].view(np.dtype(f"<u{nbytes}"))
        return words[pos // nbytes].astype(np.int64)
    acc = np.zeros(pos.shape, np.uint64)
    for q in range(nbytes):
        acc |= data[pos + q].astype(np.uint64) << np.uint64(8 * q)
    return acc.view(np.int64)


def _copy_ranges(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> int:
    """``out[:total] = concat(data[starts[i] : starts[i] + lengths[i]])``: one slice copy per
    range when ranges are long, else one gather of byte positions."""
    ln = np.asarray(lengths).astype(np.int64)
    total = int(ln.sum())
    if not total:
        return 0
    st = np.asarray(starts).astype(np.int64)
    if total >= 64 * ln.size:
        at = 0
        for s, n in zip(st.tolist(), ln.tolist(), strict=True):
            out[at : at + n] = data[s : s + n]
            at += n
        return total
    dst = np.zeros(ln.size, np.int64)
    np.cumsum(ln[:-1], out=dst[1:])
    out[:total] = data[np.repeat(st - dst, ln) + np.arange(total, dtype=np.int64)]
    return total


def chunk_layout(meta_words: np.ndarray, num_items: int, large: bool) -> Any:
    """Twin of ``native.chunk_layout``."""
    w = np.asarray(meta_words).astype(np.int64)
    n = w.size
    sizes = ((w >> 4) + 1) * 8
    starts = np.zeros(n, np.int64)
    if n > 1:
        np.cumsum(sizes[:-1], out=starts[1:])
    counts = np.left_shift(np.int64(1), w & 0xF)
    if n:
        counts[-1] = num_items - int(counts[:-1].sum())
        if counts[-1] < 0:
            return NotImplemented
    return starts, sizes, counts, bool(int(counts.sum()) == num_items)


def chunk_headers(
    data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, has_rep: bool, has_def: bool, num_buffers: int, large: bool
) -> Any:
    """Twin of ``native.chunk_headers`` (every chunk's header has the same layout, so each
    field is one vectorised read); NotImplemented where a chunk is not ok."""
    n = starts.size
    s = np.asarray(starts).astype(np.int64, copy=False)
    end = s + np.asarray(sizes).astype(np.int64, copy=False)
    levels = np.zeros(n, np.int64)
    rep = np.zeros((n, 2), np.int64)
    dfn = np.zeros((n, 2), np.int64)
    bufs = np.zeros((n, max(num_buffers, 1), 2), np.int64)
    if n == 0:
        return levels, rep, dfn, bufs, True
    width = 4 if large else 2
    header = 2 + 2 * bool(has_rep) + 2 * bool(has_def) + width * num_buffers
    if int(end.max()) > data.size or int(s.max()) + header > data.size:
        return NotImplemented
    levels[:] = _le(data, s, 2)
    p = 2
    rb = db = None
    if has_rep:
        rb = _le(data, s + p, 2)
        p += 2
    if has_def:
        db = _le(data, s + p, 2)
        p += 2
    for b in range(num_buffers):
        bufs[:, b, 1] = _le(data, s + p, width)
        p += width
    pos = s + (p + 7) // 8 * 8
    if rb is not None:
        rep[:, 0] = pos
        rep[:, 1] = rb
        pos = pos + (rb + 7) // 8 * 8
    if db is not None:
        dfn[:, 0] = pos
        dfn[:, 1] = db
        pos = pos + (db + 7) // 8 * 8
    for b in range(num_buffers):
        bufs[:, b, 0] = pos
        pos = pos + (bufs[:, b, 1] + 7) // 8 * 8
    bad = ((pos > end) & (pos - end >= 8)) | (pos - 8 > end)
    bad |= (rep[:, 0] + rep[:, 1] > end) | (dfn[:, 0] + dfn[:, 1] > end)
    if num_buffers:
        bad |= (bufs[:, :num_buffers, 0] + bufs[:, :num_buffers, 1] > end[:, None]).any(axis=1)
    if bool(bad.any()):
        return NotImplemented
    return levels, rep, dfn, bufs, True


def gather_ranges_into(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> Any:
    """Twin of ``native._gather_ranges_into``."""
    return _copy_ranges(data, starts, lengths, out)


def inline_bitpack_blocks(data: np.ndarray, starts: np.ndarray, counts: np.ndarray, word_bytes: int) -> Any:
    """Twin of ``native.inline_bitpack_blocks``: block ``j`` of every chunk at once."""
    s = np.asarray(starts).astype(np.int64)
    cnt = np.asarray(counts).astype(np.int64)
    if cnt.size and (int(cnt.min()) < 0 or bool((s % word_bytes != 0).any())):
        return NotImplemented
    nblk = (cnt + 1023) // 1024
    bits = word_bytes * 8
    total = data.size
    # every block holds at least its width word: more blocks than words means a bad chunk
    if cnt.size and (int(nblk.sum()) * word_bytes > total or int((s + nblk * word_bytes).max()) > total):
        return NotImplemented
    maxb = int(nblk.max()) if nblk.size else 0
    word_off = np.zeros((cnt.size, maxb), np.int64)
    widths = np.zeros((cnt.size, maxb), np.int64)
    nvals = np.zeros((cnt.size, maxb), np.int64)
    p = s.copy()
    for j in range(maxb):
        act = np.flatnonzero(nblk > j)
        pa = p[act]
        if int(pa.max()) + word_bytes > total:
            return NotImplemented
        w = _le(data, pa, word_bytes)
        if bool(((w < 0) | (w > bits)).any()):
            return NotImplemented
        pa = pa + word_bytes
        word_off[act, j] = pa // word_bytes
        widths[act, j] = w
        nvals[act, j] = np.minimum(cnt[act] - 1024 * j, 1024)
        pa = pa + 1024 * w // bits * word_bytes
        if int(pa.max()) > total:
            return NotImplemented
        p[act] = pa
    keep = np.arange(maxb)[None, :] < nblk[:, None]
    return word_off[keep], widths[keep], nvals[keep], True


def fsst_chunks_one_pass(
    data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray, first: np.ndarray, offset_bytes: int,
    symbols: np.ndarray, sym_lens: np.ndarray, sym_next: np.ndarray, nsym: int, out_offsets: np.ndarray,
    out: np.ndarray, c0: int, pos: int, utf8_bad: np.ndarray,
) -> Any:
    """Twin of ``native._fsst_chunks_one_pass``: every string of chunks ``c0..`` decoded at once.

    Each compressed byte becomes its symbol's 8 bytes and a length (two table lookups), and
    the first ``length`` bytes of every row are kept.  Escapes (code 255) are told from
    escaped literals per run of 255 bytes inside a string (a run starts on a code, so codes
    0, 2, 4, ... of a run are escapes), with no byte loop.  The first string that is not
    well-formed UTF-8 (``utf8_bad``) is found by :func:`_first_bad_utf8` over the decoded
    bytes (``sym_next`` must be the automaton of ``symbols``; the kernel steps it).
    """
    nchunks = counts.size
    if c0 >= nchunks:
        return 0, -1, pos
    if symbols.dtype != np.uint64 or not symbols.flags.c_contiguous or not 0 <= nsym <= 255:
        return NotImplemented
    if not np.array_equal(sym_next, symbol_next(symbols, sym_lens, nsym)):
        return NotImplemented
    base = np.asarray(starts[c0:]).astype(np.int64)
    cnt = np.asarray(counts[c0:]).astype(np.int64)
    size = np.asarray(sizes[c0:]).astype(np.int64)
    if bool(((cnt < 0) | ((cnt + 1) * offset_bytes > size) | (base + size > data.size)).any()):
        return NotImplemented
    # every chunk's offsets[cnt + 1], flattened
    per = cnt + 1
    chunk_of = np.repeat(np.arange(cnt.size), per)
    first_off = np.zeros(cnt.size, np.int64)
    np.cumsum(per[:-1], out=first_off[1:])
    j = np.arange(int(per.sum()), dtype=np.int64) - first_off[chunk_of]
    offs = _le(data, base[chunk_of] + j * offset_bytes, offset_bytes)
    o0 = offs[first_off]
    olast = offs[first_off + cnt]
    if bool(((olast > size) | (o0 > olast) | (o0 != per * offset_bytes)).any()):  # bytes right after the offsets
        return NotImplemented
    inner = np.ones(offs.size, bool)
    inner[first_off] = False
    lo_all = offs[np.flatnonzero(inner) - 1]  # each string's [lo, hi) in its chunk
    hi_all = offs[inner]
    str_chunk = chunk_of[inner]
    if bool(((hi_all < lo_all) | (hi_all > olast[str_chunk])).any()):
        return NotImplemented
    # the compressed bytes of every chunk, in order
    clen = olast - o0
    cstart = np.zeros(cnt.size + 1, np.int64)
    np.cumsum(clen, out=cstart[1:])
    ncomp = int(cstart[-1])
    comp = np.empty(ncomp, np.uint8)
    _copy_ranges(data, base + o0, clen, comp)
    str_lo = cstart[str_chunk] + (lo_all - o0[str_chunk])  # each string's bytes in ``comp``
    str_hi = str_lo + (hi_all - lo_all)
    lens_of = np.full(256, 255, np.uint8)
    lens_of[:nsym] = np.asarray(sym_lens[:nsym])
    if nsym and int(lens_of[:nsym].max()) > 8:
        return NotImplemented
    table = np.zeros((256, 8), np.uint8)
    table[:nsym] = symbols[:nsym].view(np.uint8).reshape(-1, 8)
    # keep[L]: a uint64 whose first L bytes are 1 (viewed as 8 bools); per code: keep[its length]
    keep = (np.arange(8)[None, :] < np.arange(9)[:, None]).view(np.uint64).reshape(9)
    keep_of = np.zeros(256, np.uint64)
    keep_of[:nsym] = keep[lens_of[:nsym]]
    idx = comp.astype(np.intp)
    lens = lens_of[idx]
    rows = np.take(table.view(np.uint64).reshape(256), idx)  # each code's 8 bytes
    mask = np.take(keep_of, idx)
    is255 = comp == 255
    if bool(is255.any()):
        head = np.zeros(ncomp + 1, bool)
        head[str_lo[str_hi > str_lo]] = True
        head[ncomp] = True
        run_start = is255.copy()
        run_start[1:] &= ~is255[:-1] | head[1:ncomp]
        run_id = np.cumsum(run_start) - 1
        k = np.arange(ncomp, dtype=np.int64) - np.flatnonzero(run_start)[np.maximum(run_id, 0)]
        esc = is255 & (k % 2 == 0)
        if bool((esc & head[1:]).any()):  # an escape ending its string: truncated
            return NotImplemented
        literal = np.zeros(ncomp, bool)
        literal[1:] = esc[:-1]
        lens[esc] = 0
        lens[literal] = 1
        mask[esc] = 0
        mask[literal] = keep[1]
        rows[literal] = comp[literal]  # little-endian: the byte comes first
    if bool((lens > 8).any()):  # a code beyond the table
        return NotImplemented
    decoded = rows.view(np.uint8)[mask.view(bool)]
    # decoded length of every string (nonempty strings tile ``comp`` in order), then of every chunk
    decoded_at = np.zeros(ncomp + 1, np.int64)  # decoded bytes before each compressed byte
    np.cumsum(lens, out=decoded_at[1:])
    str_len = decoded_at[str_hi] - decoded_at[str_lo]
    chunk_len = np.zeros(cnt.size, np.int64)
    np.add.at(chunk_len, str_chunk, str_len)
    chunk_pos = pos + np.concatenate(([0], np.cumsum(chunk_len)[:-1]))
    short = np.flatnonzero(chunk_pos + 8 * clen > out.size)  # the room the kernel asks for
    stop = int(short[0]) if short.size else cnt.size
    nout = int(chunk_len[:stop].sum())
    out[pos : pos + nout] = decoded[:nout]
    done = str_chunk < stop
    ends = pos + np.cumsum(str_len)
    nbefore = np.concatenate(([0], np.cumsum(cnt)[:-1]))
    slots = np.asarray(first[c0:]).astype(np.int64)[str_chunk] + (np.arange(str_chunk.size) - nbefore[str_chunk])
    out_offsets[slots[done] + 1] = ends[done]
    if int(utf8_bad[0]) < 0:
        ndone = int(np.count_nonzero(done))
        bad = _first_bad_utf8(out[pos : pos + nout], str_len[:ndone])
        if bad >= 0:
            utf8_bad[0] = slots[bad]
    if stop < cnt.size:
        return 1, c0 + stop, pos + nout
    return 0, -1, pos + nout


def _first_bad_utf8(buf: np.ndarray, lengths: np.ndarray) -> int:
    """The first of the strings tiling ``buf`` (``lengths`` bytes each, in order) that is not
    well-formed UTF-8 (RFC 3629, as Python's strict decoder and the kernel's automaton), or -1.

    ``buf`` is decoded once as a whole.  Every string is UTF-8 exactly when the whole is and
    no nonempty string starts on a continuation byte.  Otherwise, with ``e`` the start of the
    whole's first invalid sequence and ``p`` the first nonempty string starting on a
    continuation byte: everything before ``min(e, start of p)`` is whole characters whose
    string starts are character boundaries, so if ``p`` starts before ``e`` the string
    before ``p`` ends inside a character (the first bad one), else the string holding ``e``
    cannot hold a whole character at ``e`` (the first bad one).
    """
    try:
        codecs.utf_8_decode(np.ascontiguousarray(buf).data, "strict", True)
        e = buf.size
    except UnicodeDecodeError as err:
        e = int(err.start)
    nonempty = np.flatnonzero(lengths > 0)
    starts = (np.cumsum(lengths) - lengths)[nonempty]
    cont = np.flatnonzero((buf[starts] & 0xC0) == 0x80)
    if cont.size and int(starts[cont[0]]) < e:
        return int(nonempty[cont[0] - 1])  # cont[0] >= 1: buf[0] on a continuation byte makes e 0
    if e < buf.size:
        return int(nonempty[int(np.searchsorted(starts, e, side="right")) - 1])
    return -1


def ool_chunk_plan(starts: np.ndarray, sizes: np.ndarray, nlevels: np.ndarray, width: int, word_bytes: int) -> Any:
    """Twin of ``native.ool_chunk_plan``."""
    p = np.asarray(starts).astype(np.int64)
    size = np.asarray(sizes).astype(np.int64)
    nl = np.asarray(nlevels).astype(np.int64)
    block_bytes = 128 * width
    nfull = nl // 1024
    rem = nl % 1024
    if bool(((nl < 0) | (p % word_bytes != 0) | (size < nfull * block_bytes)).any()):
        return NotImplemented
    part_block = (rem > 0) & ((block_bytes == 0) | (size >= (nfull + 1) * block_bytes))
    tail = (rem > 0) & ~part_block
    if bool((tail & (size < nfull * block_bytes + rem * word_bytes)).any()):
        return NotImplemented
    nb = nfull + part_block
    chunk_of = np.repeat(np.arange(nl.size), nb)
    first = np.zeros(nl.size, np.int64)
    np.cumsum(nb[:-1], out=first[1:])
    b = np.arange(int(nb.sum()), dtype=np.int64) - first[chunk_of]
    boff = (p[chunk_of] + b * block_bytes) // word_bytes
    bcount = np.where(b < nfull[chunk_of], 1024, rem[chunk_of]).astype(np.int64)
    tail_off = np.where(tail, (p + nfull * block_bytes) // word_bytes, -1).astype(np.int64)
    tail_len = np.where(tail, rem, 0).astype(np.int64)
    return boff, bcount, tail_off, tail_len, True


def ool_chunk_assemble(
    unpacked: np.ndarray, bcount: np.ndarray, words: np.ndarray, nlevels: np.ndarray, tail_off: np.ndarray,
    tail_len: np.ndarray, out: np.ndarray,
) -> Any:
    """Twin of ``native.ool_chunk_assemble`` for a plan of ``ool_chunk_plan`` (each chunk's
    blocks hold exactly its values before the tail); NotImplemented for anything else."""
    nl = np.asarray(nlevels).astype(np.int64)
    tl = np.asarray(tail_len).astype(np.int64)
    to = np.asarray(tail_off).astype(np.int64)
    bc = np.asarray(bcount).astype(np.int64)
    need = nl - tl
    block_ends = np.cumsum(bc)
    chunk_ends = np.cumsum(need)
    if (
        bool(((bc < 0) | (bc > 1024)).any())
        or bc.size * 1024 > unpacked.size
        or bool((need < 0).any())
        or not bool(np.isin(chunk_ends[need > 0], block_ends).all())
        or int(bc.sum()) != int(need.sum())
        or bool(((tl > 0) & ((to < 0) | (to + tl > words.size))).any())
    ):
        return NotImplemented
    total = int(nl.sum())
    if total > out.size:
        return NotImplemented
    values = unpacked[: bc.size * 1024].reshape(-1, 1024)[np.arange(1024)[None, :] < bc[:, None]]
    start = np.zeros(nl.size, np.int64)
    np.cumsum(nl[:-1], out=start[1:])
    is_tail = np.zeros(total, bool)
    has = np.flatnonzero(tl > 0)
    if has.size:
        tail_pos = np.repeat(start[has] + need[has], tl[has])
        tail_pos += np.arange(tail_pos.size) - np.repeat(np.cumsum(tl[has]) - tl[has], tl[has])
        is_tail[tail_pos] = True
        src = np.repeat(to[has], tl[has]) + (np.arange(tail_pos.size) - np.repeat(np.cumsum(tl[has]) - tl[has], tl[has]))
        out[:total][is_tail] = words[src]
    out[:total][~is_tail] = values
    return total


def variable_chunks(data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, counts: np.ndarray, offset_bytes: int) -> Any:
    """Twin of ``native.variable_chunks``: every chunk's ``count + 1`` offsets read in one
    gather; NotImplemented where a chunk is not ok (the kernel then reports it)."""
    st = np.asarray(starts).astype(np.int64, copy=False)
    sz = np.asarray(sizes).astype(np.int64, copy=False)
    ct = np.asarray(counts).astype(np.int64, copy=False)
    n = int(ct.sum())
    if ct.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), True
    per = ct + 1
    if bool(((per * offset_bytes) > sz).any()) or bool((ct < 0).any()):
        return NotImplemented
    chunk = np.repeat(np.arange(ct.size, dtype=np.int64), per)
    first = np.zeros(ct.size, np.int64)
    np.cumsum(per[:-1], out=first[1:])
    j = np.arange(chunk.size, dtype=np.int64) - first[chunk]
    pos = st[chunk] + j * offset_bytes
    if pos.size and (int(pos.min()) < 0 or int(pos.max()) + offset_bytes > data.size):
        return NotImplemented
    o = _le(data, pos, offset_bytes)
    head = j == 0
    if bool((o[head] != per * offset_bytes).any()) or bool((o > sz[chunk]).any()) or bool((o < 0).any()):
        return NotImplemented
    body = ~head
    prev = np.empty_like(o)
    prev[1:] = o[:-1]
    prev[:1] = 0
    if bool((o[body] < prev[body]).any()):
        return NotImplemented
    vstart = (st[chunk] + prev)[body]
    vlen = (o - prev)[body]
    assert vstart.size == n
    return vstart, vlen, True


def copy_ranges_utf8(data: np.ndarray, vstart: np.ndarray, vlen: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> Any:
    """Twin of ``native._copy_ranges``: the ranges copied into ``out`` at ``offsets``, and
    whether every value is well-formed UTF-8 (one strict decode of the whole,
    :func:`_first_bad_utf8`)."""
    st = np.asarray(vstart).astype(np.int64, copy=False)
    ln = np.asarray(vlen).astype(np.int64, copy=False)
    if st.size and (int(st.min()) < 0 or int(ln.min()) < 0 or int((st + ln).max()) > data.size):
        return NotImplemented
    total = _copy_ranges(data, st, ln, out[int(offsets[0]):])
    return _first_bad_utf8(out[int(offsets[0]) : int(offsets[0]) + total], ln) < 0
