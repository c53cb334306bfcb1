# SPDX-License-Identifier: Apache-2.0
"""numba-compiled loops for the Lance-specific parts of CPU decoding.

Format-agnostic primitives (bit-unpacking, FSST, RLE, gathers, levels) live in
``cuda_kernels``; what is here knows Lance's byte layouts (mini-block chunk headers,
variable-width chunk buffers, level blocks).  Every loop runs over whole pages or batches
of chunks, never per value from Python, and releases the GIL so columns decode in threads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cuda_kernels._jitcache import get_num_threads, njit, prange
from lance_gpu.cpu import memory, twins

_JIT: dict[str, Any] = {"cache": True, "nogil": True}


@njit(**_JIT, twin=twins.chunk_layout)
def chunk_layout(meta_words, num_items, large):  # pragma: no cover - compiled
    """Decode mini-block chunk metadata words into chunk starts, sizes and value counts.

    word = ((chunk_bytes / 8 - 1) << 4) | log2(values_in_chunk); the last chunk stores 0 and
    holds the remaining values.  Returns (starts, sizes, counts, ok).
    """
    n = meta_words.size
    starts = np.empty(n, np.int64)
    sizes = np.empty(n, np.int64)
    counts = np.empty(n, np.int64)
    pos: int | np.int64 = 0  # local annotations: the compiled bytecode is unchanged
    seen = 0
    ok = True
    for i in range(n):
        w = np.int64(meta_words[i])
        size = ((w >> 4) + 1) * 8
        starts[i] = pos
        sizes[i] = size
        pos += size
        if i == n - 1:
            counts[i] = num_items - seen
        else:
            log2 = w & 0xF
            counts[i] = np.int64(1) << log2
        if counts[i] < 0:
            ok = False
            counts[i] = 0
        seen += counts[i]
    return starts, sizes, counts, ok and seen == num_items


@njit(**_JIT, twin=twins.chunk_headers)
def chunk_headers(data, starts, sizes, has_rep, has_def, num_buffers, large):  # pragma: no cover
    """Parse every chunk header of a mini-block page.

    Header: u16 num_levels | [u16 rep_bytes] | [u16 def_bytes] | num_buffers sizes (u16, or u32
    when ``large``) | pad to 8.  Then rep bytes (pad 8), def bytes (pad 8), each buffer (pad 8).
    Returns num_levels, rep (start, size), def (start, size), buffers (start, size) per chunk,
    and ok=False if anything would read past its chunk.
    """
    n = starts.size
    levels = np.zeros(n, np.int64)
    rep = np.zeros((n, 2), np.int64)
    dfn = np.zeros((n, 2), np.int64)
    bufs = np.zeros((n, max(num_buffers, 1), 2), np.int64)
    ok = True
    total = data.size
    for i in range(n):
        s = starts[i]
        end = s + sizes[i]
        if end > total:
            ok = False
            break
        p = s
        levels[i] = np.int64(data[p]) | (np.int64(data[p + 1]) << 8)
        p += 2
        rb: int | np.int64 = 0
        db: int | np.int64 = 0
        if has_rep:
            rb = np.int64(data[p]) | (np.int64(data[p + 1]) << 8)
            p += 2
        if has_def:
            db = np.int64(data[p]) | (np.int64(data[p + 1]) << 8)
            p += 2
        for b in range(num_buffers):
            if large:
                v = (
                    np.int64(data[p])
                    | (np.int64(data[p + 1]) << 8)
                    | (np.int64(data[p + 2]) << 16)
                    | (np.int64(data[p + 3]) << 24)
                )
                p += 4
            else:
                v = np.int64(data[p]) | (np.int64(data[p + 1]) << 8)
                p += 2
            bufs[i, b, 1] = v
        p = s + ((p - s + 7) // 8) * 8
        if has_rep:
            rep[i, 0] = p
            rep[i, 1] = rb
            p += ((rb + 7) // 8) * 8
        if has_def:
            dfn[i, 0] = p
            dfn[i, 1] = db
            p += ((db + 7) // 8) * 8
        for b in range(num_buffers):
            bufs[i, b, 0] = p
            p += ((bufs[i, b, 1] + 7) // 8) * 8
        if p > end and p - end >= 8:
            ok = False
        if p - 8 > end:
            ok = False
        for b in range(num_buffers):
            if bufs[i, b, 0] + bufs[i, b, 1] > end:
                ok = False
        if rep[i, 0] + rep[i, 1] > end or dfn[i, 0] + dfn[i, 1] > end:
            ok = False
    return levels, rep, dfn, bufs, ok


@njit(**_JIT, twin=twins.gather_ranges_into)
def _gather_ranges_into(data, starts, lengths, out):  # pragma: no cover
    pos = 0
    for i in range(starts.size):
        s = starts[i]
        ln = lengths[i]
        # An explicit loop, not a slice assignment: numba compiles a slice assignment's
        # shape-mismatch error path (string formatting, ~2 s on a fresh cache).
        for j in range(ln):
            out[pos + j] = data[s + j]
        pos += ln
    return pos


#: Ranges at least this long on average are copied one numpy slice (a memcpy) each: the
#: compiled byte loop moves about 1 GB/s, a memcpy several times that, and the per-range
#: Python cost is then negligible.
MEMCPY_MEAN_RANGE = 4096
#: Evenly spaced ranges at least this long are copied as one strided view.
STRIDED_MIN_RANGE = 256


def gather_ranges(data, starts, lengths):
    """Concatenate ``data[starts[i]:starts[i]+lengths[i]]`` for every i.

    Outputs are allocated outside compiled code, from Arrow's pool
    (:func:`lance_gpu.cpu.memory.empty`): first-touch page faults are what limits
    decoding threads, and the pool's freed pages are reused without faulting again.
    Evenly spaced ranges of one length (the chunks of a mini-block page of fixed-width
    values, but for the last) are copied as one strided 2-D view; few long ranges one
    memcpy each; many short ones by the compiled loop.  numpy copies release the GIL.
    """
    n = int(starts.size)
    total = int(lengths.sum())
    out = memory.empty(total, np.uint8)
    if n == 0:
        return out
    if n >= 3 and int(lengths[0]) >= STRIDED_MIN_RANGE:
        width = int(lengths[0])
        step = int(starts[1]) - int(starts[0])
        body = n - 1  # every range but the last, which may be shorter
        if (width > 0 and step >= width and int(starts[0]) >= 0
                and int(starts[body - 1]) + width <= data.size
                and np.all(lengths[:body] == width) and np.all(np.diff(starts[:body + 1]) == step)):
            first = int(starts[0])
            view = np.lib.stride_tricks.as_strided(data[first:], shape=(body, width), strides=(step, data.strides[0]))
            out[: body * width].reshape(body, width)[...] = view
            last, size = int(starts[body]), int(lengths[body])
            out[body * width :] = data[last : last + size]
            return out
    if total >= MEMCPY_MEAN_RANGE * n:
        at = 0
        for s, size in zip(starts.tolist(), lengths.tolist(), strict=True):
            out[at : at + size] = data[s : s + size]
            at += size
        return out
    _gather_ranges_into(data, starts, lengths, out)
    return out


@njit(**_JIT, twin=twins.variable_chunks)
def variable_chunks(data, starts, sizes, counts, offset_bytes):  # pragma: no cover
    """Assemble the values of variable-width mini-block chunk buffers.

    Each chunk buffer is ``offsets[count + 1]`` (u32 or u64, measured from the chunk buffer's
    start) followed by the bytes.  Returns (value starts, value lengths) absolute in ``data``
    and ok=False if an offset leaves its chunk buffer or runs backwards.
    """
    n = 0
    for i in range(counts.size):
        n += counts[i]
    vstart = np.empty(n, np.int64)
    vlen = np.empty(n, np.int64)
    ok = True
    k = 0
    for i in range(counts.size):
        base = starts[i]
        c = counts[i]
        size = sizes[i]
        if (c + 1) * offset_bytes > size:
            ok = False
            break
        prev = np.int64(0)
        for j in range(c + 1):
            p = base + j * offset_bytes
            if offset_bytes == 4:
                o = (
                    np.int64(data[p])
                    | (np.int64(data[p + 1]) << 8)
                    | (np.int64(data[p + 2]) << 16)
                    | (np.int64(data[p + 3]) << 24)
                )
            else:
                o = np.int64(0)
                for q in range(8):
                    o |= np.int64(data[p + q]) << (8 * q)
            if o > size or (j > 0 and o < prev) or (j == 0 and o != (c + 1) * offset_bytes):
                # offsets[0] is where the bytes start: right after the offsets themselves
                ok = False
            if j > 0:
                vstart[k] = base + prev
                vlen[k] = o - prev
                k += 1
            prev = o
    return vstart, vlen, ok


@njit(**_JIT)
def variable_selected(data, starts, sizes, counts, offset_bytes, chunk, index):  # pragma: no cover
    """(start, length) absolute in ``data`` of value ``index[i]`` of chunk ``chunk[i]`` of
    variable-width mini-block chunk buffers (layout as :func:`variable_chunks`), reading
    only the two offsets around each selected value and the chunk's first offset; ok=False
    if one leaves its chunk buffer, runs backwards, or starts inside the offsets (the first
    offset must be where the bytes begin, as :func:`variable_chunks` checks)."""
    n = chunk.size
    vstart = np.empty(n, np.int64)
    vlen = np.empty(n, np.int64)
    ok = True
    for i in range(n):
        c = chunk[i]
        j = index[i]
        base = starts[c]
        size = sizes[c]
        header = (counts[c] + 1) * offset_bytes
        if j < 0 or j >= counts[c] or header > size:
            ok = False
            break
        p = base + j * offset_bytes
        first = np.int64(0)
        o0 = np.int64(0)
        o1 = np.int64(0)
        for q in range(offset_bytes):
            first |= np.int64(data[base + q]) << (8 * q)
            o0 |= np.int64(data[p + q]) << (8 * q)
            o1 |= np.int64(data[p + offset_bytes + q]) << (8 * q)
        if first != header or o0 < header or o1 > size or o1 < o0:
            ok = False
            break
        vstart[i] = base + o0
        vlen[i] = o1 - o0
    return vstart, vlen, ok


#: Bytes of copied values validated at a time, while they are still in the L1/L2 cache.
UTF8_GROUP_BYTES = 1 << 14


@njit(**_JIT, twin=twins.copy_ranges_utf8)
def _copy_ranges(data, vstart, vlen, offsets, out):  # pragma: no cover
    """Copy the ranges; returns whether every value is well-formed UTF-8, checked group by
    group of values (about :data:`UTF8_GROUP_BYTES`) right after their copy: a group's bytes
    with the vectorised check of :mod:`cuda_kernels.utf8`, looking back no further than
    the group's start, and no value of it starting on a continuation byte."""
    ok = True
    g = 0  # first value of the group being copied
    n = vstart.size
    for i in range(n):
        s = vstart[i]
        o = offsets[i]
        for j in range(vlen[i]):
            out[o + j] = data[s + j]
        if ok and (offsets[i + 1] - offsets[g] >= UTF8_GROUP_BYTES or i == n - 1):
            lo = offsets[g]
            hi = offsets[i + 1]
            bad = _utf8_bytes_bad(out, lo, lo, hi) | _utf8_tail_bad(out, lo, hi)
            for k in range(g + 1, i + 1):
                p = offsets[k]
                bad |= (p < hi) & ((out[min(p, hi - 1)] & 0xC0) == 0x80)
            ok = not bad
            g = i + 1
    return ok


def ranges_to_variable(data, vstart, vlen):
    """Copy byte ranges (``vlen`` >= 0) into one contiguous (int64 offsets, bytes) pair.

    Returns ``(offsets, bytes, utf8)``: the offsets start at 0, never decrease and end at
    ``len(bytes)`` by construction; ``utf8`` whether every value is well-formed UTF-8,
    found by the copy loop (see :func:`_copy_ranges`).
    """
    offsets = memory.empty(vstart.size + 1, np.int64)
    offsets[0] = 0
    np.cumsum(vlen, out=offsets[1:])
    out = memory.empty(int(offsets[-1]), np.uint8)
    utf8 = bool(_copy_ranges(data, vstart, vlen, offsets, out)) if vstart.size else True
    return offsets, out, utf8


from cuda_kernels.utf8 import _utf8_bytes_bad as _utf8_bytes_bad_dual  # noqa: E402
from cuda_kernels.utf8 import _utf8_tail_bad as _utf8_tail_bad_dual  # noqa: E402

_utf8_bytes_bad = _utf8_bytes_bad_dual.cpu
_utf8_tail_bad = _utf8_tail_bad_dual.cpu


@njit(**_JIT, twin=twins.inline_bitpack_blocks)
def inline_bitpack_blocks(data, starts, counts, word_bytes):  # pragma: no cover
    """Locate the FastLanes blocks of InlineBitpacking chunk buffers.

    A chunk buffer holds ceil(count / 1024) blocks, each one ``word_bytes``-wide word holding
    the bit width W, then 1024 * W / (8 * word_bytes) packed words.  Returns, per block, the
    word index of its packed data in ``data`` viewed as words, its width, and the number of
    values it contributes; ok=False on an impossible width or misaligned chunk.
    """
    nblocks = 0
    for i in range(counts.size):
        nblocks += (counts[i] + 1023) // 1024
    word_off = np.empty(nblocks, np.int64)
    widths = np.empty(nblocks, np.int64)
    nvals = np.empty(nblocks, np.int64)
    ok = True
    bits = word_bytes * 8
    k = 0
    total = data.size
    for i in range(counts.size):
        p = starts[i]
        if p % word_bytes != 0:
            ok = False
            break
        remaining = counts[i]
        while remaining > 0:
            if p + word_bytes > total:
                ok = False
                break
            w = np.int64(0)
            for q in range(word_bytes):
                w |= np.int64(data[p + q]) << (8 * q)
            if w < 0 or w > bits:
                ok = False
                break
            p += word_bytes
            word_off[k] = p // word_bytes
            widths[k] = w
            nvals[k] = min(remaining, 1024)
            p += 1024 * w // bits * word_bytes
            if p > total:
                ok = False
                break
            remaining -= 1024
            k += 1
        if not ok:
            break
    return word_off[:k], widths[:k], nvals[:k], ok


@njit(**_JIT)
def compact_blocks(unpacked, nvals, out):  # pragma: no cover
    """Copy the first nvals[i] values of each 1024-value block i into ``out``."""
    pos = 0
    for i in range(nvals.size):
        c = nvals[i]
        out[pos : pos + c] = unpacked[i * 1024 : i * 1024 + c]
        pos += c
    return pos


@njit(**_JIT)
def byte_stream_unsplit(data, starts, counts, width, out):  # pragma: no cover
    """Undo byte-stream-split per chunk: ``width`` streams of ``count`` bytes each."""
    pos = 0
    for i in range(counts.size):
        s = starts[i]
        c = counts[i]
        for j in range(c):
            for b in range(width):
                out[(pos + j) * width + b] = data[s + b * c + j]
        pos += c
    return pos


@njit(**_JIT)
def bits_concat(data, starts, counts, out):  # pragma: no cover
    """Concatenate LSB-first bitmaps, chunk i holding counts[i] bits from byte starts[i]."""
    pos = 0
    for i in range(counts.size):
        s = starts[i]
        for j in range(counts[i]):
            bit = (data[s + (j >> 3)] >> (j & 7)) & 1
            if bit:
                out[(pos + j) >> 3] |= np.uint8(1 << ((pos + j) & 7))
        pos += counts[i]
    return pos


@njit(**_JIT, twin=twins.ool_chunk_plan)
def ool_chunk_plan(starts, sizes, nlevels, width, word_bytes):  # pragma: no cover
    """Plan the OutOfLineBitpacking level buffers of many mini-block chunks.

    Chunk i's buffer holds nlevels[i] values: whole 1024-value blocks of ``width`` bits,
    then either one padded block or raw ``word_bytes`` words for the tail.  Returns the
    block word offsets (in the chunk data viewed as words), per block value counts, the raw
    tail word offsets and lengths per chunk, and ok.
    """
    block_bytes = 128 * width
    nb = 0
    for i in range(starts.size):
        nfull = nlevels[i] // 1024
        rem = nlevels[i] % 1024
        nb += nfull
        if rem and sizes[i] >= (nfull + 1) * block_bytes and block_bytes > 0:
            nb += 1
        elif rem and block_bytes == 0:
            nb += 1
    boff = np.empty(nb, np.int64)
    bcount = np.empty(nb, np.int64)
    tail_off = np.full(starts.size, -1, np.int64)
    tail_len = np.zeros(starts.size, np.int64)
    ok = True
    k = 0
    for i in range(starts.size):
        nfull = nlevels[i] // 1024
        rem = nlevels[i] % 1024
        p = starts[i]
        if p % word_bytes:
            ok = False
            break
        if sizes[i] < nfull * block_bytes:
            ok = False
            break
        for b in range(nfull):
            boff[k] = (p + b * block_bytes) // word_bytes
            bcount[k] = 1024
            k += 1
        if rem:
            if block_bytes == 0 or sizes[i] >= (nfull + 1) * block_bytes:
                boff[k] = (p + nfull * block_bytes) // word_bytes
                bcount[k] = rem
                k += 1
            else:
                if sizes[i] < nfull * block_bytes + rem * word_bytes:
                    ok = False
                    break
                tail_off[i] = (p + nfull * block_bytes) // word_bytes
                tail_len[i] = rem
    return boff, bcount, tail_off, tail_len, ok


@njit(**_JIT, twin=twins.ool_chunk_assemble)
def ool_chunk_assemble(unpacked, bcount, words, nlevels, tail_off, tail_len, out):  # pragma: no cover
    """Lay the unpacked blocks and raw tails of ``ool_chunk_plan`` out in chunk order."""
    pos = 0
    k = 0
    for i in range(nlevels.size):
        got = 0
        while got < nlevels[i] - tail_len[i]:
            c = bcount[k]
            out[pos : pos + c] = unpacked[k * 1024 : k * 1024 + c]
            pos += c
            got += c
            k += 1
        if tail_len[i]:
            t = tail_off[i]
            out[pos : pos + tail_len[i]] = words[t : t + tail_len[i]]
            pos += tail_len[i]
    return pos


@njit(**_JIT)
def fullzip_scan(data, num_items, ctrl_bytes, bits_def, offset_bytes, value_bytes, invisible):  # pragma: no cover
    """Walk a full-zip buffer item by item.

    Each item is ``[control word: ctrl_bytes LE, (rep << bits_def) | def]`` ``[length:
    offset_bytes LE, variable width only]`` ``[value bytes, visible items only]``.  An item
    is invisible when ``invisible[def]`` (a null or empty list).  Fixed width values take
    ``value_bytes`` each; a visible null item (def > 0) of a variable-width column has
    neither length nor bytes (an empty value).  Returns rep, def, per visible value (start, length), and ok.
    """
    rep = np.zeros(num_items, np.uint16)
    dfn = np.zeros(num_items, np.uint16)
    vstart = np.empty(num_items, np.int64)
    vlen = np.empty(num_items, np.int64)
    p: int | np.int64 = 0  # a local annotation: the compiled bytecode is unchanged
    k = 0
    total = data.size
    ok = True
    dmask = (1 << bits_def) - 1
    for i in range(num_items):
        c = np.int64(0)
        if ctrl_bytes:
            if p + ctrl_bytes > total:
                ok = False
                break
            for q in range(ctrl_bytes):
                c |= np.int64(data[p + q]) << (8 * q)
            p += ctrl_bytes
        d = c & dmask
        r = c >> bits_def
        rep[i] = r
        dfn[i] = d
        if d >= invisible.size:
            ok = False
            break
        if invisible[d]:
            continue
        if offset_bytes and d != 0:
            # A visible but null item of a variable-width column: no length, no bytes.
            vstart[k] = p
            vlen[k] = 0
            k += 1
            continue
        if offset_bytes:
            if p + offset_bytes > total:
                ok = False
                break
            ln = np.int64(0)
            for q in range(offset_bytes):
                ln |= np.int64(data[p + q]) << (8 * q)
            p += offset_bytes
        else:
            ln = value_bytes
        if ln < 0 or p + ln > total:
            ok = False
            break
        vstart[k] = p
        vlen[k] = ln
        k += 1
        p += ln
    return rep, dfn, vstart[:k], vlen[:k], ok


# --------------------------------------------------------------------------------------------
# FSST over variable-width mini-block chunks, fused: the FSST cores come from cuda_kernels.fsst
# (one algorithm for both targets); what is here walks Lance's chunk buffers.

from cuda_kernels.fsst import _fsst_decoded_len, decode_checked_cpu, decode_stream_cpu  # noqa: E402
from cuda_kernels.utf8 import BYTE_NEXT, symbol_next  # noqa: E402

_fsst_len_core = _fsst_decoded_len.cpu
_fsst_stream = decode_stream_cpu.dispatcher
_fsst_checked = decode_checked_cpu.dispatcher

#: Status codes of :func:`fsst_chunk_lengths` (FSST's own are -1 truncated, -2 bad code,
#: -3 out of bounds).
FSST_BAD_OFFSETS = -4


@njit(**_JIT)
def _chunk_offset(data, p, offset_bytes):  # pragma: no cover - compiled
    if offset_bytes == 4:
        return (
            np.int64(data[p])
            | (np.int64(data[p + 1]) << 8)
            | (np.int64(data[p + 2]) << 16)
            | (np.int64(data[p + 3]) << 24)
        )
    o = np.int64(0)
    for q in range(8):
        o |= np.int64(data[p + q]) << (8 * q)
    return o


@njit(**_JIT)
def _fsst_chunk_lengths_range(data, starts, sizes, counts, first, offset_bytes, sym_lens, nsym, out_lens, lo, hi):  # pragma: no cover
    n_data = data.size
    for c in range(lo, hi):
        base = starts[c]
        cnt = counts[c]
        size = sizes[c]
        if (cnt + 1) * offset_bytes > size or base + size > n_data:
            return FSST_BAD_OFFSETS, c
        prev = _chunk_offset(data, base, offset_bytes)
        if prev != (cnt + 1) * offset_bytes:  # the bytes start right after the offsets
            return FSST_BAD_OFFSETS, c
        k = first[c]
        for j in range(cnt):
            o = _chunk_offset(data, base + (j + 1) * offset_bytes, offset_bytes)
            if o < prev or o > size:
                return FSST_BAD_OFFSETS, c
            ln = _fsst_len_core(sym_lens, nsym, data, n_data, base + prev, base + o)
            if ln < 0:
                return ln, c
            out_lens[k + j + 1] = ln
            prev = o
    return 0, -1


@njit(**_JIT)
def _fsst_chunk_decode_range(data, starts, counts, first, offset_bytes, symbols, sym_lens, sym_next, out_offsets, out, lo, hi):  # pragma: no cover
    """Decode chunks ``lo..hi``; returns the first chunk holding a string that is not
    well-formed UTF-8, or -1."""
    bad = -1
    for c in range(lo, hi):
        base = starts[c]
        cnt = counts[c]
        o0 = _chunk_offset(data, base, offset_bytes)
        on = _chunk_offset(data, base + cnt * offset_bytes, offset_bytes)
        k = first[c]
        # The chunk's strings are contiguous in both input and output: decode them as one
        # stream (every string was checked to end on a code boundary by the lengths pass).
        # The stream is UTF-8 and no string starts on a continuation byte exactly when
        # every string is UTF-8 (a string cut inside a character leaves the next one
        # starting on a continuation byte).
        lo_out = out_offsets[k]
        hi_out = out_offsets[k + cnt]
        st = _fsst_stream(symbols, sym_lens, sym_next, BYTE_NEXT, data, base + o0, base + on, out, lo_out, hi_out)
        cut = False
        for j in range(1, cnt):
            o = out_offsets[k + j]
            if o < hi_out:
                cut |= (out[o] & 0xC0) == 0x80
        if (st != 0 or cut) and bad < 0:
            bad = c
    return bad


@njit(**_JIT, parallel=True)
def _fsst_chunks_parallel(data, starts, sizes, counts, first, offset_bytes, symbols, sym_lens, sym_next, nsym, out_offsets, out, phase, ngroups):  # pragma: no cover
    """Phase 0: lengths, ``(status, chunk)``; phase 1: decode, ``(0, first chunk that is
    not UTF-8 or -1)``."""
    nchunks = counts.size
    status = np.zeros(ngroups, np.int64)
    where = np.full(ngroups, -1, np.int64)
    for g in prange(ngroups):
        lo = g * nchunks // ngroups
        hi = (g + 1) * nchunks // ngroups
        if phase == 0:
            s, w = _fsst_chunk_lengths_range(data, starts, sizes, counts, first, offset_bytes, sym_lens, nsym, out_offsets, lo, hi)
            status[g] = s
            where[g] = w
        else:
            where[g] = _fsst_chunk_decode_range(data, starts, counts, first, offset_bytes, symbols, sym_lens, sym_next, out_offsets, out, lo, hi)
    for g in range(ngroups):
        if status[g] != 0 or where[g] >= 0:
            return status[g], where[g]
    return 0, -1


@njit(**_JIT)
def _inclusive_scan_from_1(offsets):  # pragma: no cover
    offsets[0] = 0
    acc = np.int64(0)
    for i in range(1, offsets.size):
        acc += offsets[i]
        offsets[i] = acc


@njit(**_JIT, twin=twins.fsst_chunks_one_pass)
def _fsst_chunks_one_pass(data, starts, sizes, counts, first, offset_bytes, symbols, sym_lens, sym_next, nsym, out_offsets, out, c0, pos, utf8_bad):  # pragma: no cover
    """Decode chunks ``c0..`` at ``out[pos:]`` in one pass while ``out`` has room.

    Returns ``(status, chunk, pos)``: status 0 when done, 1 when chunk ``chunk`` needs
    more room than ``out`` has past ``pos`` (grow it and resume there), or an error code.
    ``utf8_bad[0]`` becomes the first string that is not well-formed UTF-8 (left as is
    when there is none).
    """
    n_data = data.size
    cap = out.size
    for c in range(c0, counts.size):
        base = starts[c]
        cnt = counts[c]
        size = sizes[c]
        if (cnt + 1) * offset_bytes > size or base + size > n_data:
            return FSST_BAD_OFFSETS, c, pos
        prev = _chunk_offset(data, base, offset_bytes)
        last = _chunk_offset(data, base + cnt * offset_bytes, offset_bytes)
        if last > size or prev > last or prev != (cnt + 1) * offset_bytes:  # bytes right after the offsets
            return FSST_BAD_OFFSETS, c, pos
        if pos + 8 * (last - prev) > cap:
            return 1, c, pos
        k = first[c]
        for j in range(cnt):
            o = _chunk_offset(data, base + (j + 1) * offset_bytes, offset_bytes)
            if o < prev or o > last:
                return FSST_BAD_OFFSETS, c, pos
            r, st = _fsst_checked(symbols, sym_lens, sym_next, BYTE_NEXT, nsym, data, base + prev, base + o, out, pos)
            if r < 0:
                return r, c, pos
            if st != 0 and utf8_bad[0] < 0:
                utf8_bad[0] = k + j
            pos = r
            out_offsets[k + j + 1] = pos
            prev = o
    return 0, -1, pos


def fsst_decode_chunks(data, starts, sizes, counts, offset_bytes, symbols, sym_lens, nsym):
    """FSST-decode the Variable chunk buffers of a mini-block page.

    Each chunk buffer is ``offsets[count + 1]`` (``offset_bytes`` each, relative to the
    buffer) then the compressed strings.  Returns ``(status, chunk, offsets, bytes,
    utf8)``; ``status`` is 0, an FSST error code (-1 truncated, -2 bad code, -3 bounds) or
    :data:`FSST_BAD_OFFSETS`, with ``chunk`` the first bad chunk; ``utf8`` whether every
    decoded string is well-formed UTF-8, found by the decode loop itself (the UTF-8
    automaton of :mod:`cuda_kernels.utf8` stepped once per symbol).  The offsets start
    at 0, never decrease and end at ``len(bytes)`` by construction.

    With one numba thread (the usual case: pages decode in a pool of such threads) it
    decodes in one pass into a buffer sized from the compressed bytes, growing it if a
    chunk expands beyond the estimate; with more, lengths pass, scan, then a parallel write.
    """
    counts = np.ascontiguousarray(counts, np.int64)
    first = np.zeros(counts.size, np.int64)
    if counts.size > 1:
        np.cumsum(counts[:-1], out=first[1:])
    n = int(counts.sum())
    out_offsets = memory.empty(n + 1, np.int64)
    out_offsets[0] = 0
    threads = get_num_threads()
    sym_next = symbol_next(symbols, sym_lens, nsym)
    ngroups = max(1, min(4 * threads, counts.size // 16)) if threads > 1 and n >= 65536 else 1
    if ngroups == 1:
        # Strings rarely expand more than 4x; each grow copies what is decoded so far.
        comp_bytes = int(np.asarray(sizes).sum())
        out = memory.empty(min(8 * comp_bytes, 4 * comp_bytes + (1 << 16)), np.uint8)
        chunk, pos = 0, 0
        utf8_bad = np.full(1, -1, np.int64)
        while True:
            status, chunk, pos = _fsst_chunks_one_pass(
                data, starts, sizes, counts, first, offset_bytes, symbols, sym_lens, sym_next, nsym, out_offsets, out,
                chunk, pos, utf8_bad,
            )
            if status != 1:
                break
            grown = memory.empty(max(2 * out.size, pos + 8 * int(sizes[chunk])), np.uint8)
            grown[:pos] = out[:pos]
            out = grown
        if status != 0:
            return int(status), int(chunk), None, None, False
        return 0, -1, out_offsets, out[:pos], bool(utf8_bad[0] < 0)
    args = (data, starts, sizes, counts, first, offset_bytes, symbols, sym_lens, sym_next, nsym)
    status, where = _fsst_chunks_parallel(*args, out_offsets, np.empty(0, np.uint8), 0, ngroups)
    if status != 0:
        return int(status), int(where), None, None, False
    _inclusive_scan_from_1(out_offsets)
    out = memory.empty(int(out_offsets[-1]), np.uint8)
    _status, where = _fsst_chunks_parallel(*args, out_offsets, out, 1, ngroups)
    return 0, -1, out_offsets, out, bool(where < 0)
