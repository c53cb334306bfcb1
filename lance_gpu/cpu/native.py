# SPDX-License-Identifier: Apache-2.0
"""numba-compiled loops for the Lance-specific parts of CPU decoding.

Format-agnostic primitives (bit-unpacking, FSST, RLE, gathers, levels) live in
``cuda_kernels``; what is here knows Lance's byte layouts (mini-block chunk headers,
variable-width chunk buffers, level blocks).  Every loop runs over whole pages or batches
of chunks, never per value from Python, and releases the GIL so columns decode in threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = {"cache": True, "nogil": True}


@njit(**_JIT)
def chunk_layout(meta_words, num_items, large):  # pragma: no cover - compiled
    """Decode mini-block chunk metadata words into chunk starts, sizes and value counts.

    word = ((chunk_bytes / 8 - 1) << 4) | log2(values_in_chunk); the last chunk stores 0 and
    holds the remaining values.  Returns (starts, sizes, counts, ok).
    """
    n = meta_words.size
    starts = np.empty(n, np.int64)
    sizes = np.empty(n, np.int64)
    counts = np.empty(n, np.int64)
    pos = 0
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


@njit(**_JIT)
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
        rb = 0
        db = 0
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


@njit(**_JIT)
def _gather_ranges_into(data, starts, lengths, out):  # pragma: no cover
    pos = 0
    for i in range(starts.size):
        s = starts[i]
        ln = lengths[i]
        out[pos : pos + ln] = data[s : s + ln]
        pos += ln
    return pos


def gather_ranges(data, starts, lengths):
    """Concatenate ``data[starts[i]:starts[i]+lengths[i]]`` for every i.

    Outputs are allocated by numpy (not inside compiled code) so that large ones get
    transparent huge pages: first-touch page faults are what limits decoding threads.
    """
    out = np.empty(int(lengths.sum()), np.uint8)
    _gather_ranges_into(data, starts, lengths, out)
    return out


@njit(**_JIT)
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
            if o > size or (j > 0 and o < prev):
                ok = False
            if j > 0:
                vstart[k] = base + prev
                vlen[k] = o - prev
                k += 1
            prev = o
    return vstart, vlen, ok


@njit(**_JIT)
def _copy_ranges(data, vstart, vlen, offsets, out):  # pragma: no cover
    for i in range(vstart.size):
        s = vstart[i]
        o = offsets[i]
        for j in range(vlen[i]):
            out[o + j] = data[s + j]


def ranges_to_variable(data, vstart, vlen):
    """Copy byte ranges into one contiguous (int64 offsets, bytes) pair."""
    offsets = np.empty(vstart.size + 1, np.int64)
    offsets[0] = 0
    np.cumsum(vlen, out=offsets[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    _copy_ranges(data, vstart, vlen, offsets, out)
    return offsets, out


@njit(**_JIT)
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


@njit(**_JIT)
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


@njit(**_JIT)
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
    p = 0
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
