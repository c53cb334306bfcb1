# SPDX-License-Identifier: Apache-2.0
"""FSST compression (Boncz, Neumann, Leis: "FSST: fast random access string compression",
VLDB 2020): symbol-table construction and greedy compression, numba-compiled.

A symbol is up to 8 bytes, held little-endian in a u64 (zero padded) with its length; a
table has at most 255 symbols (codes 0..254), code 255 escapes one literal byte.

Compression is greedy longest match.  The lookup structure (:func:`_lookup`, one byte
buffer) has two parts:

* symbols of 3+ bytes in a hash table keyed by their first 3 bytes: ``SLOTS`` buckets of
  ``BUCKET`` entries, each bucket longest first.  A bucket is tested with one vector
  compare (:func:`_bucket`: ``(w ^ value) << (64 - 8 len) == 0`` and ``len <= avail`` for
  all its entries at once), the first hit is the longest match;
* symbols of 1 and 2 bytes (and escapes) in a table indexed by the next 2 bytes (65536
  entries) plus one indexed by the last byte of a string.

Every step loads the next 8 bytes with one unaligned u64 load and is free of
data-dependent branches; four runs of strings are compressed interleaved (:func:`compress_fast`)
so that the four dependency chains (load -> lookup -> advance) overlap.  The table is
built so that no bucket overflows, so the parse is exactly greedy longest match over the
table (:func:`compress`, the plain reference implementation, gives the same bytes).

Construction (:func:`train`) runs a few rounds over a ~16 KiB sample: compress the sample
with the current table counting how often every code and every pair of consecutive codes
occurs, then keep the 255 candidates (the codes themselves, single bytes weighted 8x, and
concatenations of pairs) with the highest ``count * length`` gain that fit their bucket.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from cuda_kernels._jitcache import njit

_JIT: dict[str, Any] = {"cache": True, "nogil": True}
#: numba's ``intrinsic`` (the same function), typed as returning Any: compiled code calls an
#: intrinsic without the typing context its definition takes first, which numba's hints
#: would make every call here lack
_intrinsic: Callable[[Callable[..., Any]], Any] = intrinsic

ESCAPE = 255
MAX_SYMBOLS = 255
BASE = 256

#: Hash buckets of the 3+ byte symbols (keyed by their first 3 bytes) ...
HASH_BITS = 9
SLOTS = 1 << HASH_BITS
#: ... of this many entries each (one vector compare per lookup).
BUCKET = 8
_MUL = np.uint64(0x9E3779B97F4A7C15)

# Layout of the lookup buffer (bytes): bucket values (u64), shifts ``64 - 8 len`` (u8),
# lengths (u8; 15 = empty), entries (u16, see _match; BUCKET spare entries at the end),
# then the short-code entries (u16): 65536 by the next 2 bytes, 256 by the last byte of a
# string, 256 zeros (nothing left of the string).
_NB = SLOTS * BUCKET
_VALS_OFF = 0
_SH_OFF = 8 * _NB
_LEN_OFF = _SH_OFF + _NB
_META_OFF = _LEN_OFF + _NB
_SHORT_OFF = _META_OFF + 2 * (_NB + BUCKET)
_TAB_SIZE = _SHORT_OFF + 2 * (65536 + 512)
_SHORT_LAST = 65536
_SHORT_NONE = 65536 + 256

#: Strings compressed interleaved by compress_fast (the step is written out 4 times).
LANES = 4


# --------------------------------------------------------------------------------------------
# unchecked memory access (no wraparound / bounds code in the hot loop)


def _c1(arr) -> bool:
    return isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"


def _at(builder, ary, offset, ty):
    return builder.bitcast(builder.gep(ary.data, [offset]), ty.as_pointer())


@_intrinsic
def _load_u64(typingctx, arr, idx):  # pragma: no cover - compiled
    """``arr[idx:idx+8]`` (uint8, C-contiguous) as a little-endian u64, unaligned."""
    if not (_c1(arr) and arr.dtype == types.uint8):
        return None

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.load(_at(builder, a, args[1], ir.IntType(64)), align=1)

    return types.uint64(arr, types.intp), codegen


@_intrinsic
def _store_u64(typingctx, arr, idx, val):  # pragma: no cover - compiled
    """``arr[idx:idx+8] = val`` (little-endian u64), unaligned."""
    if not (_c1(arr) and arr.dtype == types.uint8):
        return None

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        builder.store(args[2], _at(builder, a, args[1], ir.IntType(64)), align=1)
        return context.get_dummy_value()

    return types.none(arr, types.intp, types.uint64), codegen


@_intrinsic
def _ld(typingctx, arr, idx):  # pragma: no cover - compiled
    """``arr[idx]`` for 0 <= idx < arr.size (C-contiguous 1-d array)."""
    if not _c1(arr):
        return None

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.load(builder.gep(a.data, [args[1]]))

    return arr.dtype(arr, types.intp), codegen


@_intrinsic
def _st(typingctx, arr, idx, val):  # pragma: no cover - compiled
    """``arr[idx] = val`` for 0 <= idx < arr.size (C-contiguous 1-d array)."""
    if not _c1(arr):
        return None

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        v = context.cast(builder, args[2], sig.args[2], sig.args[0].dtype)
        builder.store(v, builder.gep(a.data, [args[1]]))
        return context.get_dummy_value()

    return types.none(arr, types.intp, arr.dtype), codegen


@_intrinsic
def _ld16(typingctx, tab, off):  # pragma: no cover - compiled
    """The u16 at byte ``off`` of the lookup buffer, as int64."""
    if not (_c1(tab) and tab.dtype == types.uint8):
        return None

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.zext(builder.load(_at(builder, a, args[1], ir.IntType(16)), align=1), ir.IntType(64))

    return types.int64(tab, types.intp), codegen


@_intrinsic
def _bucket(typingctx, tab, start, w, av):  # pragma: no cover - compiled
    """Index in its bucket (entries ``start .. start + BUCKET``) of the first symbol that is
    a prefix of the bytes ``w`` and at most ``av`` long, or BUCKET: one vector compare."""
    if not (_c1(tab) and tab.dtype == types.uint8):
        return None

    def codegen(context, builder, sig, args):
        a = context.make_array(sig.args[0])(context, builder, args[0])
        start, w, av = args[1], args[2], args[3]
        i64, i32, i8 = ir.IntType(64), ir.IntType(32), ir.IntType(8)
        v64, v8 = ir.VectorType(i64, BUCKET), ir.VectorType(i8, BUCKET)
        const = lambda x: ir.Constant(i64, x)  # noqa: E731
        vals = builder.load(_at(builder, a, builder.add(const(_VALS_OFF), builder.mul(start, const(8))), v64), align=8)
        shift = builder.zext(builder.load(_at(builder, a, builder.add(const(_SH_OFF), start), v8), align=1), v64)
        lens = builder.load(_at(builder, a, builder.add(const(_LEN_OFF), start), v8), align=1)
        zeros = ir.Constant(ir.VectorType(i32, BUCKET), [0] * BUCKET)

        def splat(x, vty):
            one = builder.insert_element(ir.Constant(vty, ir.Undefined), x, ir.Constant(i32, 0))
            return builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined), zeros)

        diff = builder.shl(builder.xor(splat(w, v64), vals), shift)
        hit = builder.and_(
            builder.icmp_unsigned("==", diff, ir.Constant(v64, [0] * BUCKET)),
            builder.icmp_unsigned("<=", lens, splat(builder.trunc(av, i8), v8)),
        )
        bits = builder.or_(builder.zext(builder.bitcast(hit, ir.IntType(BUCKET)), i64), const(1 << BUCKET))
        return builder.cttz(bits, ir.Constant(ir.IntType(1), 1))

    return types.int64(tab, types.intp, types.uint64, types.int64), codegen


# --------------------------------------------------------------------------------------------
# lookup and compression


@njit(**_JIT)
def _mask(length):  # pragma: no cover - compiled
    if length >= 8:
        return np.uint64(0xFFFFFFFFFFFFFFFF)
    return (np.uint64(1) << np.uint64(8 * length)) - np.uint64(1)


@njit(**_JIT)
def _slot(w):  # pragma: no cover - compiled
    """Bucket of the symbols whose first 3 bytes are those of ``w``."""
    return np.int64(((w & np.uint64(0xFFFFFF)) * _MUL) >> np.uint64(64 - HASH_BITS))


@njit(**_JIT)
def _word(data, pos, size):  # pragma: no cover - compiled
    """Up to 8 bytes of ``data[pos:size]`` as a little-endian u64 (zero filled)."""
    if pos + 8 <= size:
        return _load_u64(data, pos)
    w = np.uint64(0)
    for i in range(size - pos):
        w |= np.uint64(data[pos + i]) << np.uint64(8 * i)
    return w


@njit(**_JIT)
def _lookup(vals, lens, n):  # pragma: no cover - compiled
    """The lookup buffer of a table (see the layout above).  Entries: ``code << 8 | bytes
    consumed | bytes written << 4``.  Symbols that do not fit their bucket are left out
    (tables from :func:`make_table` always fit)."""
    tab = np.zeros(_TAB_SIZE, np.uint8)
    bvals = tab[_VALS_OFF:_SH_OFF].view(np.uint64)
    bshift = tab[_SH_OFF:_LEN_OFF]
    blen = tab[_LEN_OFF:_META_OFF]
    bent = tab[_META_OFF:_SHORT_OFF].view(np.uint16)
    short = tab[_SHORT_OFF:].view(np.uint16)
    blen[:] = 15
    fill = np.zeros(SLOTS, np.int64)
    for ln in range(8, 2, -1):
        for i in range(n):
            if lens[i] == ln:
                s = _slot(vals[i])
                if fill[s] < BUCKET:
                    j = s * BUCKET + fill[s]
                    fill[s] += 1
                    bvals[j] = vals[i]
                    bshift[j] = 64 - 8 * ln
                    blen[j] = ln
                    bent[j] = (i << 8) | ln | (1 << 4)
    for b in range(256):
        short[_SHORT_LAST + b] = (ESCAPE << 8) | 1 | (2 << 4)
    for i in range(n):
        if lens[i] == 1:
            short[_SHORT_LAST + np.int64(vals[i] & np.uint64(0xFF))] = (i << 8) | 1 | (1 << 4)
    for k in range(65536):
        short[k] = short[_SHORT_LAST + (k & 0xFF)]
    for i in range(n):
        if lens[i] == 2:
            short[np.int64(vals[i] & np.uint64(0xFFFF))] = (i << 8) | 2 | (1 << 4)
    return tab


@njit(**_JIT)
def _match(w, avail, tab):  # pragma: no cover - compiled
    """Entry of the longest symbol at the bytes ``w`` with ``avail`` bytes left of the
    string (the escape entry if none; 0 if ``avail`` is 0)."""
    d8 = avail - 8
    av = 8 + (d8 & (d8 >> 63))  # min(avail, 8)
    last = _SHORT_LAST + np.int64(w & np.uint64(0xFF)) + (np.int64(avail == 0) << 8)
    two = np.int64(w & np.uint64(0xFFFF))
    sel = (1 - avail) >> 63  # all ones when avail >= 2
    short_off = _SHORT_OFF + 2 * (last ^ ((last ^ two) & sel))
    start = _slot(w) * BUCKET
    k = _bucket(tab, start, w, av)
    return _ld16(tab, short_off if k == BUCKET else _META_OFF + 2 * (start + k))


@njit(**_JIT)
def _step(data, offsets, out, out_off, pos, e, r, q, tab):  # pragma: no cover - compiled
    """One code of string ``r`` (bytes ``pos .. e``) written at ``out[q]``; moves on to
    the next string at its end.  Needs 8 readable bytes at ``pos`` and ``offsets[r + 2]``."""
    w = _load_u64(data, pos)
    ent = _match(w, e - pos, tab)
    _store_u64(out, q, np.uint64(ent >> 8) | (w << np.uint64(8)))
    q += (ent >> 4) & 3
    pos += ent & 15
    _st(out_off, r + 1, q)
    r += np.int64(pos >= e)
    e = _ld(offsets, r + 1)
    return pos, e, r, q


@njit(**_JIT)
def _step_safe(data, size, offsets, last, out, out_off, pos, e, r, q, tab):  # pragma: no cover - compiled
    """:func:`_step` near the end of the data and of the offsets."""
    w = _word(data, pos, size)
    ent = _match(w, e - pos, tab)
    _store_u64(out, q, np.uint64(ent >> 8) | (w << np.uint64(8)))
    q += (ent >> 4) & 3
    pos += ent & 15
    _st(out_off, r + 1, q)
    r += np.int64(pos >= e)
    nxt = r + 1
    e = _ld(offsets, nxt if nxt < last else last)
    return pos, e, r, q


@njit(**_JIT)
def compress_fast(data, offsets, vals, lens, n):  # pragma: no cover - compiled
    """FSST-compress every string ``data[offsets[i]:offsets[i+1]]`` with the table (``n``
    symbols); returns (compressed offsets from 0, compressed bytes).

    ``offsets`` may start anywhere in ``data``.  The strings up to the last one or the last
    8 bytes of ``data`` are split into LANES runs of about equal bytes compressed
    interleaved, each into its own stretch of a scratch buffer (2 bytes per input byte at
    most, plus slack for the 8-byte stores); the rest is compressed alone with bounds-checked
    loads; the runs' outputs are then packed.
    """
    m = offsets.size - 1
    if m <= 0:
        return np.zeros(1, np.int64), np.zeros(0, np.uint8)
    tab = _lookup(vals, lens, n)
    size = data.size
    base = offsets[0]
    total = offsets[m] - base
    ms = m - 1
    while ms > 0 and offsets[ms] + 8 > size:
        ms -= 1
    if ms < 0:
        ms = 0
    # rs[k] .. rs[k + 1]: the rows of lane k; rs[LANES] .. m: the rest
    rs = np.empty(LANES + 2, np.int64)
    rs[0] = 0
    rs[LANES] = ms
    rs[LANES + 1] = m
    span = offsets[ms] - base
    for k in range(1, LANES):
        at = np.searchsorted(offsets[: ms + 1], base + (span * k) // LANES)
        rs[k] = min(max(at, rs[k - 1]), ms)
    out = np.empty(2 * total + 8 * LANES + 32, np.uint8)
    out_off = np.empty(m + 1, np.int64)
    qs = np.empty(LANES + 1, np.int64)
    for k in range(LANES + 1):
        qs[k] = 2 * (offsets[rs[k]] - base) + 8 * k
    r0 = rs[0]
    r1 = rs[1]
    r2 = rs[2]
    r3 = rs[3]
    t0 = rs[1]
    t1 = rs[2]
    t2 = rs[3]
    t3 = rs[4]
    p0 = offsets[r0]
    p1 = offsets[r1]
    p2 = offsets[r2]
    p3 = offsets[r3]
    e0 = offsets[r0 + 1]
    e1 = offsets[r1 + 1]
    e2 = offsets[r2 + 1]
    e3 = offsets[r3 + 1]
    q0 = qs[0]
    q1 = qs[1]
    q2 = qs[2]
    q3 = qs[3]
    while r0 < t0 and r1 < t1 and r2 < t2 and r3 < t3:
        p0, e0, r0, q0 = _step(data, offsets, out, out_off, p0, e0, r0, q0, tab)
        p1, e1, r1, q1 = _step(data, offsets, out, out_off, p1, e1, r1, q1, tab)
        p2, e2, r2, q2 = _step(data, offsets, out, out_off, p2, e2, r2, q2, tab)
        p3, e3, r3, q3 = _step(data, offsets, out, out_off, p3, e3, r3, q3, tab)
    while r0 < t0:
        p0, e0, r0, q0 = _step(data, offsets, out, out_off, p0, e0, r0, q0, tab)
    while r1 < t1:
        p1, e1, r1, q1 = _step(data, offsets, out, out_off, p1, e1, r1, q1, tab)
    while r2 < t2:
        p2, e2, r2, q2 = _step(data, offsets, out, out_off, p2, e2, r2, q2, tab)
    while r3 < t3:
        p3, e3, r3, q3 = _step(data, offsets, out, out_off, p3, e3, r3, q3, tab)
    r = rs[LANES]
    p = offsets[r]
    e = offsets[min(r + 1, m)]
    q = qs[LANES]
    while r < m:
        p, e, r, q = _step_safe(data, size, offsets, m, out, out_off, p, e, r, q, tab)
    ends = np.empty(LANES + 1, np.int64)
    ends[0] = q0
    ends[1] = q1
    ends[2] = q2
    ends[3] = q3
    ends[LANES] = q
    got = 0
    for k in range(LANES + 1):
        got += ends[k] - qs[k]
    res = np.empty(got, np.uint8)
    d = 0
    out_off[0] = 0
    for k in range(LANES + 1):
        a = qs[k]
        ln = ends[k] - a
        res[d : d + ln] = out[a : a + ln]
        shift = a - d
        for i in range(rs[k], rs[k + 1]):
            out_off[i + 1] -= shift
        d += ln
    return out_off, res


# --------------------------------------------------------------------------------------------
# reference compressor (plain greedy longest match; tests compare compress_fast with it)


@njit(**_JIT)
def _index(vals, lens, n):  # pragma: no cover - compiled
    """Symbols of 2+ bytes grouped by their first two bytes, longest first (order, group
    starts), and the one-byte symbol of each byte value (or -1)."""
    multi = 0
    for i in range(n):
        if lens[i] >= 2:
            multi += 1
    keys = np.empty(multi, np.int64)
    ids = np.empty(multi, np.int64)
    k = 0
    single = np.full(256, -1, np.int64)
    for i in range(n):
        if lens[i] >= 2:
            keys[k] = (np.int64(vals[i] & np.uint64(0xFFFF)) << 4) | (8 - np.int64(lens[i]))
            ids[k] = i
            k += 1
        else:
            single[np.int64(vals[i] & np.uint64(0xFF))] = i
    perm = np.argsort(keys, kind="mergesort")
    order = ids[perm]
    starts = np.zeros(65537, np.int64)
    for j in range(multi):
        starts[(keys[j] >> 4) + 1] += 1
    for b in range(65536):
        starts[b + 1] += starts[b]
    return order, starts, single


@njit(**_JIT)
def compress(data, offsets, vals, lens, n):  # pragma: no cover - compiled
    """Greedy longest-match FSST compression, written plainly: the reference for
    :func:`compress_fast` (same output for tables whose buckets do not overflow)."""
    order, starts, single = _index(vals, lens, n)
    m = offsets.size - 1
    total = offsets[m] - offsets[0]
    out = np.empty(2 * total + 8, np.uint8)
    out_off = np.empty(m + 1, np.int64)
    q = 0
    out_off[0] = 0
    for r in range(m):
        pos = offsets[r]
        e = offsets[r + 1]
        while pos < e:
            avail = e - pos
            s = -1
            if avail >= 2:
                key = np.int64(data[pos]) | (np.int64(data[pos + 1]) << 8)
                w = _word(data, pos, e)
                for j in range(starts[key], starts[key + 1]):
                    c = order[j]
                    ln = np.int64(lens[c])
                    if ln <= avail and (w & _mask(ln)) == vals[c]:
                        s = c
                        break
            if s < 0:
                s = single[np.int64(data[pos])]
            if s >= 0:
                out[q] = s
                q += 1
                pos += np.int64(lens[s])
            else:
                out[q] = ESCAPE
                out[q + 1] = data[pos]
                q += 2
                pos += 1
        out_off[r + 1] = q
    return out_off, out[:q]


# --------------------------------------------------------------------------------------------
# construction


@njit(**_JIT)
def count_round(data, offsets, vals, lens, n, count1, count2, pair_a, pair_b, count_pairs):  # pragma: no cover - compiled
    """Compress the sample with the table (``n`` symbols), adding to ``count1`` (per code)
    and ``count2`` (per pair of consecutive codes, the pairs seen first listed in
    ``pair_a`` / ``pair_b``); returns (gain in bytes, number of pairs listed).

    Codes: byte b (escaped) -> b, symbol i -> 256 + i.
    """
    tab = _lookup(vals, lens, n)
    size = data.size
    gain = 0
    npairs = 0
    for r in range(offsets.size - 1):
        a = offsets[r]
        e = offsets[r + 1]
        if a == e:
            continue
        pos = a
        w = _word(data, pos, size)
        ent = _match(w, e - pos, tab)
        ln = ent & 15
        if (ent >> 8) == ESCAPE:
            prev = np.int64(w & np.uint64(0xFF))
            gain -= 1
        else:
            prev = BASE + (ent >> 8)
            gain += ln - 1
        prev_pos = pos
        pos += ln
        while pos < e:
            count1[prev] += 1
            if prev >= BASE and lens[prev - BASE] != 1:
                # the alternative of not extending: the first byte alone
                count1[np.int64(data[prev_pos])] += 1
            w = _word(data, pos, size)
            ent = _match(w, e - pos, tab)
            ln = ent & 15
            if (ent >> 8) == ESCAPE:
                cur = np.int64(w & np.uint64(0xFF))
                gain -= 1
            else:
                cur = BASE + (ent >> 8)
                gain += ln - 1
            if count_pairs:
                if count2[prev, cur] == 0:
                    pair_a[npairs] = prev
                    pair_b[npairs] = cur
                    npairs += 1
                count2[prev, cur] += 1
                if ln > 1:
                    b = np.int64(w & np.uint64(0xFF))
                    if count2[prev, b] == 0:
                        pair_a[npairs] = prev
                        pair_b[npairs] = b
                        npairs += 1
                    count2[prev, b] += 1
            prev_pos = pos
            pos += ln
            prev = cur
        count1[prev] += 1
    return gain, npairs


@njit(**_JIT)
def _add(map_v, map_l, map_c, bits, used, nused, v, ln, cnt):  # pragma: no cover - compiled
    """Add ``cnt`` to candidate (v, ln) of the open-addressing map (``2 ** bits`` slots,
    never full); returns the new number of used slots (listed in ``used``)."""
    h = np.int64(((v ^ np.uint64(ln)) * _MUL) >> np.uint64(64 - bits))
    while True:
        if map_l[h] == 0:
            map_v[h] = v
            map_l[h] = ln
            map_c[h] = cnt
            used[nused] = h
            return nused + 1
        if map_v[h] == v and map_l[h] == ln:
            map_c[h] += cnt
            return nused
        h = (h + 1) & ((1 << bits) - 1)


@njit(**_JIT)
def make_table(count1, count2, pair_a, pair_b, npairs, vals, lens, n, frac, map_v, map_l, map_c, bits, used):  # pragma: no cover - compiled
    """The next table from a round's counts: candidates (codes, pairs of codes merged,
    counted at least ``5 * frac / 128`` times) ranked by gain, then length; the first 255
    that fit their bucket.  Returns (values, lengths, size); the map is left empty."""
    nused = 0
    thr = (5 * frac) // 128
    cv = np.empty(BASE + MAX_SYMBOLS, np.uint64)
    cl = np.empty(BASE + MAX_SYMBOLS, np.int64)
    for c in range(BASE + n):
        if c < BASE:
            cv[c] = np.uint64(c)
            cl[c] = 1
        else:
            cv[c] = vals[c - BASE]
            cl[c] = np.int64(lens[c - BASE])
    for c in range(BASE + n):
        cnt = count1[c]
        if cnt > 0:
            if cl[c] == 1:
                cnt *= 8
            if cnt >= thr:
                nused = _add(map_v, map_l, map_c, bits, used, nused, cv[c], cl[c], cnt)
    if frac < 128:
        for k in range(npairs):
            a = pair_a[k]
            b = pair_b[k]
            la = cl[a]
            if la >= 8:
                continue
            cnt = np.int64(count2[a, b])
            if cnt < thr:
                continue
            ln = min(la + cl[b], 8)
            v = (cv[a] | (cv[b] << np.uint64(8 * la))) & _mask(ln)
            nused = _add(map_v, map_l, map_c, bits, used, nused, v, ln, cnt)
    keys = np.empty(nused, np.int64)
    for k in range(nused):
        h = used[k]
        keys[k] = -(map_c[h] * map_l[h] * 16 + map_l[h])
    order = np.argsort(keys, kind="mergesort")
    out_v = np.zeros(MAX_SYMBOLS, np.uint64)
    out_l = np.zeros(MAX_SYMBOLS, np.uint8)
    fill = np.zeros(SLOTS, np.int64)
    got = 0
    for k in range(nused):
        if got >= MAX_SYMBOLS:
            break
        h = used[order[k]]
        v = map_v[h]
        ln = map_l[h]
        if ln >= 3:
            s = _slot(v)
            if fill[s] >= BUCKET:
                continue
            fill[s] += 1
        out_v[got] = v
        out_l[got] = ln
        got += 1
    for k in range(nused):
        map_l[used[k]] = 0
    return out_v, out_l, got


_FRACS = (8, 38, 68, 98, 108, 128)


@njit(**_JIT)
def train(sdata, soff):  # pragma: no cover - compiled
    """Symbol table (values, lengths) for the sample strings ``sdata`` / ``soff``: the best
    (by gain on the sample) of the tables of the rounds."""
    vals = np.zeros(MAX_SYMBOLS, np.uint64)
    lens = np.zeros(MAX_SYMBOLS, np.uint8)
    n = 0
    best_v = vals.copy()
    best_l = lens.copy()
    best_n = 0
    best_gain = np.iinfo(np.int64).min
    count1 = np.zeros(BASE + MAX_SYMBOLS, np.int64)
    count2 = np.zeros((BASE + MAX_SYMBOLS, BASE + MAX_SYMBOLS), np.int32)
    # distinct pairs: at most 2 per code and one per pair of codes
    cap = min(2 * (soff[soff.size - 1] - soff[0]) + 2, (BASE + MAX_SYMBOLS) ** 2)
    pair_a = np.empty(cap, np.int64)
    pair_b = np.empty(cap, np.int64)
    # candidate map: at most 4/5 full
    need = BASE + MAX_SYMBOLS + cap
    bits = 12
    while (1 << bits) * 4 < need * 5:
        bits += 1
    map_v = np.zeros(1 << bits, np.uint64)
    map_l = np.zeros(1 << bits, np.int64)
    map_c = np.zeros(1 << bits, np.int64)
    used = np.empty(need, np.int64)
    for frac in _FRACS:
        gain, npairs = count_round(sdata, soff, vals, lens, n, count1, count2, pair_a, pair_b, frac < 128)
        if gain >= best_gain:
            best_gain = gain
            best_v[:] = vals
            best_l[:] = lens
            best_n = n
        vals, lens, n = make_table(count1, count2, pair_a, pair_b, npairs, vals, lens, n, frac, map_v, map_l, map_c, bits, used)
        count1[:] = 0
        for k in range(npairs):
            count2[pair_a[k], pair_b[k]] = 0
    gain, _npairs = count_round(sdata, soff, vals, lens, n, count1, count2, pair_a, pair_b, False)
    if gain >= best_gain:
        return vals[:n].copy(), lens[:n].copy()
    return best_v[:best_n].copy(), best_l[:best_n].copy()


SAMPLE_TARGET = 1 << 14


def sample_picks(offsets: np.ndarray, seed: int = 0) -> np.ndarray | None:
    """The strings (indices) of the ~16 KiB training sample: batches of 256 random strings
    until the bytes suffice, cut after the string that reaches :data:`SAMPLE_TARGET` bytes;
    None when the strings hold less than that (all of them are the sample)."""
    total = int(offsets[-1] - offsets[0])
    if total <= SAMPLE_TARGET:
        return None
    rng = np.random.default_rng(seed)
    n = offsets.size - 1
    batches = []
    got = 0
    while got < SAMPLE_TARGET:
        idx = rng.integers(0, n, 256)
        batches.append(idx)
        got += int((offsets[idx + 1] - offsets[idx]).sum())
    idx = np.concatenate(batches)
    cum = np.cumsum(offsets[idx + 1] - offsets[idx])
    return idx[: int(np.searchsorted(cum, SAMPLE_TARGET)) + 1].astype(np.int64)


def sample(data: np.ndarray, offsets: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """About 16 KiB of whole strings picked at random (all of them if there is less)."""
    picks_arr = sample_picks(offsets, seed)
    if picks_arr is None:
        return data, offsets
    starts = offsets[picks_arr]
    plen = offsets[picks_arr + 1] - starts
    new_off = np.zeros(plen.size + 1, np.int64)
    np.cumsum(plen, out=new_off[1:])
    # one gather of every picked byte (a slice per string costs more than the training)
    gather = np.repeat(starts - new_off[:-1], plen) + np.arange(int(new_off[-1]), dtype=np.int64)
    return data[gather], new_off


def build_table(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symbol table (values u64, lengths u8) for strings ``data`` / ``offsets``."""
    sdata, soff = sample(data, offsets)
    sdata = np.ascontiguousarray(sdata, np.uint8)
    soff = np.ascontiguousarray(soff, np.int64)
    return train(sdata, soff)


def _pad(a: np.ndarray) -> np.ndarray:
    out = np.zeros(MAX_SYMBOLS, a.dtype)
    out[: a.size] = a
    return out
