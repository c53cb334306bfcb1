# SPDX-License-Identifier: Apache-2.0
"""FSST compression (Boncz, Neumann, Leis: "FSST: fast random access string compression",
VLDB 2020): symbol-table construction and greedy compression, numba-compiled.

Codes 0..255 of the construction stand for the single bytes (escapes), codes 256.. for the
table's symbols.  A symbol is up to 8 bytes, held little-endian in a u64 with its length.
Construction runs a few rounds over a sample: compress the sample with the current table
counting how often every code and every pair of consecutive codes occurs, then keep the
255 candidates (the codes themselves, single bytes weighted 8x, and concatenations of
pairs) with the highest ``count * length`` gain.  Compression is greedy longest match;
a byte no symbol covers is written as the escape code 255 followed by the byte.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = {"cache": True, "nogil": True}

ESCAPE = 255
MAX_SYMBOLS = 255
BASE = 256


@njit(**_JIT)
def _load(data, pos, end):  # pragma: no cover - compiled
    """Up to 8 bytes of ``data[pos:end]`` as a little-endian u64 (zero filled)."""
    w = np.uint64(0)
    k = end - pos
    if k > 8:
        k = 8
    for i in range(k):
        w |= np.uint64(data[pos + i]) << np.uint64(8 * i)
    return w


@njit(**_JIT)
def _mask(length):  # pragma: no cover - compiled
    if length >= 8:
        return np.uint64(0xFFFFFFFFFFFFFFFF)
    return (np.uint64(1) << np.uint64(8 * length)) - np.uint64(1)


@njit(**_JIT)
def _index(vals, lens, n):  # pragma: no cover - compiled
    """Lookup structure: symbols of 2+ bytes grouped by their first two bytes, longest first
    (order, group starts), and the one-byte symbol of each byte value (or -1)."""
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
def _longest(data, pos, end, vals, lens, order, starts, single):  # pragma: no cover - compiled
    """Index of the longest symbol matching at ``pos``, or -1."""
    avail = end - pos
    if avail >= 2:
        key = np.int64(data[pos]) | (np.int64(data[pos + 1]) << 8)
        lo = starts[key]
        hi = starts[key + 1]
        if lo < hi:
            word = _load(data, pos, end)
            for j in range(lo, hi):
                s = order[j]
                ln = np.int64(lens[s])
                if ln <= avail and (word & _mask(ln)) == vals[s]:
                    return s
    return single[np.int64(data[pos])]


@njit(**_JIT)
def count_round(data, offsets, vals, lens, n, count_pairs):  # pragma: no cover - compiled
    """Compress the sample with the table (``n`` symbols); return (gain, count1, count2).

    Codes: byte b -> b, symbol i -> 256 + i.
    """
    order, starts, single = _index(vals, lens, n)
    count1 = np.zeros(BASE + MAX_SYMBOLS, np.int64)
    count2 = np.zeros((BASE + MAX_SYMBOLS, BASE + MAX_SYMBOLS), np.int32)
    gain = 0
    for r in range(offsets.size - 1):
        a = offsets[r]
        e = offsets[r + 1]
        if a == e:
            continue
        pos = a
        s = _longest(data, pos, e, vals, lens, order, starts, single)
        if s >= 0:
            prev = BASE + s
            ln = np.int64(lens[s])
            gain += ln - 1
        else:
            prev = np.int64(data[pos])
            ln = 1
            gain -= 1
        prev_pos = pos
        pos += ln
        while pos < e:
            count1[prev] += 1
            if prev >= BASE and lens[prev - BASE] != 1:
                # the alternative of not extending: the first byte alone
                count1[np.int64(data[prev_pos])] += 1
            s = _longest(data, pos, e, vals, lens, order, starts, single)
            if s >= 0:
                cur = BASE + s
                ln = np.int64(lens[s])
                gain += ln - 1
            else:
                cur = np.int64(data[pos])
                ln = 1
                gain -= 1
            if count_pairs:
                count2[prev, cur] += 1
                if ln > 1:
                    count2[prev, np.int64(data[pos])] += 1
            prev_pos = pos
            pos += ln
            prev = cur
        count1[prev] += 1
    return gain, count1, count2


@njit(**_JIT)
def compress(data, offsets, vals, lens, n):  # pragma: no cover - compiled
    """FSST-compress every string; returns (compressed offsets, compressed bytes).

    The symbol lookup of :func:`_longest` is inlined here (the hot loop).
    """
    order, starts, single = _index(vals, lens, n)
    masks = np.empty(n, np.uint64)
    lens64 = np.empty(n, np.int64)
    for i in range(n):
        masks[i] = _mask(np.int64(lens[i]))
        lens64[i] = np.int64(lens[i])
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
                lo = starts[key]
                hi = starts[key + 1]
                if lo < hi:
                    k = avail if avail < 8 else 8
                    w = np.uint64(0)
                    for i in range(k):
                        w |= np.uint64(data[pos + i]) << np.uint64(8 * i)
                    for j in range(lo, hi):
                        c = order[j]
                        if lens64[c] <= avail and (w & masks[c]) == vals[c]:
                            s = c
                            break
            if s < 0:
                s = single[np.int64(data[pos])]
            if s >= 0:
                out[q] = s
                q += 1
                pos += lens64[s]
            else:
                out[q] = ESCAPE
                out[q + 1] = data[pos]
                q += 2
                pos += 1
        out_off[r + 1] = q
    return out_off, out[:q]


def _symbols_of(codes: np.ndarray, vals: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value, length) of construction codes (bytes and table symbols)."""
    vals = _pad(vals)
    lens = _pad(lens)
    v = np.where(codes < BASE, codes.astype(np.uint64), vals[np.maximum(codes - BASE, 0)])
    ln = np.where(codes < BASE, 1, lens[np.maximum(codes - BASE, 0)].astype(np.int64))
    return v.astype(np.uint64), ln.astype(np.int64)


def _make_table(count1: np.ndarray, count2: np.ndarray, vals: np.ndarray, lens: np.ndarray, n: int, frac: int):
    codes_all = np.arange(BASE + n)
    c1 = count1[: BASE + n]
    sel = np.flatnonzero(c1)
    v1, l1 = _symbols_of(codes_all[sel], vals, lens)
    g1 = np.where(l1 == 1, 8, 1) * c1[sel]
    cand_v = [v1]
    cand_l = [l1]
    cand_c = [g1]
    if frac < 128:
        p1, p2 = np.nonzero(count2[: BASE + n, : BASE + n])
        if p1.size:
            cnt = count2[p1, p2]
            a_v, a_l = _symbols_of(p1, vals, lens)
            b_v, b_l = _symbols_of(p2, vals, lens)
            keep = a_l < 8
            a_v, a_l, b_v, b_l, cnt = a_v[keep], a_l[keep], b_v[keep], b_l[keep], cnt[keep]
            ln = np.minimum(a_l + b_l, 8)
            shifted = np.where(a_l < 8, b_v << (8 * a_l).astype(np.uint64), np.uint64(0))
            v = (a_v | shifted) & np.array([(1 << (8 * k)) - 1 if k < 8 else (1 << 64) - 1 for k in range(9)], np.uint64)[ln]
            cand_v.append(v)
            cand_l.append(ln)
            cand_c.append(cnt)
    cv = np.concatenate(cand_v)
    cl = np.concatenate(cand_l)
    cc = np.concatenate(cand_c)
    ok = cc >= (5 * frac) // 128
    cv, cl, cc = cv[ok], cl[ok], cc[ok]
    if cv.size == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint8)
    keys = np.empty(cv.size, dtype=[("v", "<u8"), ("l", "<i8")])
    keys["v"] = cv
    keys["l"] = cl
    uniq, inv = np.unique(keys, return_inverse=True)
    counts = np.zeros(uniq.size, np.int64)
    np.add.at(counts, inv.reshape(-1), cc)
    gains = counts * uniq["l"]
    order = np.lexsort((uniq["v"], -uniq["l"], -gains))[:MAX_SYMBOLS]
    return uniq["v"][order].astype(np.uint64), uniq["l"][order].astype(np.uint8)


SAMPLE_TARGET = 1 << 14


def sample(data: np.ndarray, offsets: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """About 16 KiB of whole strings picked at random (all of them if there is less)."""
    total = int(offsets[-1] - offsets[0])
    if total <= SAMPLE_TARGET:
        return data, offsets
    rng = np.random.default_rng(seed)
    picks = []
    got = 0
    n = offsets.size - 1
    while got < SAMPLE_TARGET:
        idx = rng.integers(0, n, 256)
        lens = (offsets[idx + 1] - offsets[idx]).tolist()
        for i, ln in zip(idx.tolist(), lens):
            picks.append(i)
            got += int(ln)
            if got >= SAMPLE_TARGET:
                break
    picks_arr = np.array(picks, np.int64)
    starts = offsets[picks_arr]
    plen = offsets[picks_arr + 1] - starts
    new_off = np.zeros(plen.size + 1, np.int64)
    np.cumsum(plen, out=new_off[1:])
    out = np.concatenate([data[s : s + k] for s, k in zip(starts.tolist(), plen.tolist())]) if plen.size else data[:0]
    return out, new_off


def build_table(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symbol table (values u64, lengths u8) for strings ``data`` / ``offsets``."""
    sdata, soff = sample(data, offsets)
    sdata = np.ascontiguousarray(sdata, np.uint8)
    soff = np.ascontiguousarray(soff, np.int64)
    vals = np.zeros(0, np.uint64)
    lens = np.zeros(0, np.uint8)
    best = (vals, lens)
    best_gain = None
    for frac in (8, 38, 68, 98, 108, 128):
        gain, c1, c2 = count_round(sdata, soff, _pad(vals), _pad(lens), vals.size, frac < 128)
        if best_gain is None or gain >= best_gain:
            best_gain = gain
            best = (vals, lens)
        vals, lens = _make_table(c1, c2, vals, lens, vals.size, frac)
    gain, _c1, _c2 = count_round(sdata, soff, _pad(vals), _pad(lens), vals.size, False)
    if gain >= best_gain:
        best = (vals, lens)
    return best


def _pad(a: np.ndarray) -> np.ndarray:
    out = np.zeros(MAX_SYMBOLS, a.dtype)
    out[: a.size] = a
    return out


_HASH_BITS = 11
_HASH_MUL = np.uint64(0x9E3779B97F4A7C15)


@njit(**_JIT)
def _slot(v, ln):  # pragma: no cover - compiled
    h = (v ^ np.uint64(ln)) * _HASH_MUL
    return np.int64(h >> np.uint64(64 - _HASH_BITS))


@njit(**_JIT)
def _key4(w):  # pragma: no cover - compiled
    """Hash (16 bits) of the first 4 bytes of ``w``."""
    return np.int64(((w & np.uint64(0xFFFFFFFF)) * _HASH_MUL) >> np.uint64(48))


@njit(**_JIT)
def _lookup_tables(vals, lens, n):  # pragma: no cover - compiled
    """Exact-match lookup of the table: an open-addressing hash of (value, length) for the
    symbols of 3+ bytes, per 2-byte prefix a bit mask of the lengths (3..8) of the symbols
    starting with it, and per 2-byte key the longest symbol of at most 2 bytes matching it."""
    size = 1 << _HASH_BITS
    slots = np.full(size, -1, np.int64)
    lenmask = np.zeros(65536, np.int64)
    lenmask4 = np.zeros(65536, np.int64)
    short2 = np.full(65536, -1, np.int64)
    single = np.full(256, -1, np.int64)
    for i in range(n):
        ln = np.int64(lens[i])
        if ln == 1:
            single[np.int64(vals[i] & np.uint64(0xFF))] = i
    for key in range(65536):
        short2[key] = single[key & 0xFF]
    for i in range(n):
        ln = np.int64(lens[i])
        v = vals[i]
        if ln == 2:
            short2[np.int64(v & np.uint64(0xFFFF))] = i
        elif ln >= 3:
            lenmask[np.int64(v & np.uint64(0xFFFF))] |= np.int64(1) << ln
            if ln >= 4:
                lenmask4[_key4(v)] |= np.int64(1) << ln
            h = _slot(v, ln)
            while slots[h] >= 0:
                h = (h + 1) & (size - 1)
            slots[h] = i
    return slots, lenmask, lenmask4, short2, single


@njit(**_JIT)
def compress_fast(data, offsets, vals, lens, n):  # pragma: no cover - compiled
    """:func:`compress` (same greedy longest match, same output) with hashed lookups and
    word loads; ``offsets`` may start anywhere in ``data`` (compressed offsets from 0)."""
    slots, lenmask, lenmask4, short2, single = _lookup_tables(vals, lens, n)
    size = 1 << _HASH_BITS
    masks = np.empty(9, np.uint64)
    for k in range(9):
        masks[k] = _mask(k)
    lens64 = np.empty(max(n, 1), np.int64)
    for i in range(n):
        lens64[i] = np.int64(lens[i])
    m = offsets.size - 1
    base = offsets[0]
    total = offsets[m] - base
    # the bytes, 8-byte aligned and zero padded, for word loads
    nw = (total + 15) // 8
    words = np.empty(nw, np.uint64)
    wb = words.view(np.uint8)
    wb[:total] = data[base : base + total]
    wb[total:] = 0
    out = np.empty(2 * total + 8, np.uint8)
    out_off = np.empty(m + 1, np.int64)
    q = 0
    out_off[0] = 0
    for r in range(m):
        pos = offsets[r] - base
        e = offsets[r + 1] - base
        while pos < e:
            avail = e - pos
            wi = pos >> 3
            sh = np.uint64(8 * (pos & 7))
            if sh == 0:
                w = words[wi]
            else:
                w = (words[wi] >> sh) | (words[wi + 1] << (np.uint64(64) - sh))
            s = -1
            if avail >= 2:
                key = np.int64(w & np.uint64(0xFFFF))
                lm = lenmask[key]
                if avail >= 4 and lm > 15:
                    # lengths 4..8 only where the 4-byte prefix has them
                    lm = (lm & 8) | lenmask4[_key4(w)]
                if lm != 0:
                    ln = 8 if avail > 8 else avail
                    while ln >= 3:
                        if (lm >> ln) & 1:
                            v = w & masks[ln]
                            h = _slot(v, ln)
                            while True:
                                c = slots[h]
                                if c < 0:
                                    break
                                if vals[c] == v and lens64[c] == ln:
                                    s = c
                                    break
                                h = (h + 1) & (size - 1)
                            if s >= 0:
                                break
                        ln -= 1
                if s < 0:
                    s = short2[key]
            else:
                s = single[np.int64(w & np.uint64(0xFF))]
            if s >= 0:
                out[q] = s
                q += 1
                pos += lens64[s]
            else:
                out[q] = ESCAPE
                out[q + 1] = np.uint8(w & np.uint64(0xFF))
                q += 2
                pos += 1
        out_off[r + 1] = q
    return out_off, out[:q]
