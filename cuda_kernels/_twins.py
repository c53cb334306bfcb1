"""numpy twins of CPU drivers, for processes whose kernel cache is cold (:mod:`cuda_kernels._jitcache`).

Each twin takes the arguments of its driver and returns what the driver returns, writing
the same bytes into the same output arguments, for every input the driver accepts; where
the driver would report an error (a bad block, an index out of bounds, invalid UTF-8) the
twin returns ``NotImplemented`` and the driver itself runs, so error results (which block,
which value) are always the driver's.  Twins are tested against their drivers
(tests/test_jit_twins.py).  They only run until the compiled code is in the cache.
"""

from __future__ import annotations

import codecs
from typing import Any

import numpy as np

__all__ = [
    "binary_copy_range",
    "binary_lengths",
    "check_blocks",
    "check_variable",
    "defs_le",
    "gather_range",
    "max_level",
    "unpack_blocks",
    "unpack_range_swar",
    "unravel_count_range",
    "unravel_fill_range",
    "utf8_valid",
]

_U64_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


def _fl_position0(row: int) -> int:
    """:func:`cuda_kernels.bitunpack._fl_position` of (row, lane 0)."""
    g = row >> 3
    order = ((g & 1) << 2) | (g & 2) | ((g >> 2) & 1)
    return order * 16 + (row & 7) * 128


def check_blocks(nwords: int, t: int, offsets: np.ndarray, widths: np.ndarray) -> int:
    """Twin of ``bitunpack._check_blocks_cpu``: the first block not inside ``nwords`` words, or -1."""
    base = np.asarray(offsets).astype(np.int64, copy=False)
    w = np.asarray(widths).astype(np.int64)
    bad = (w < 0) | (w > t) | (base < 0) | (base + (1024 // t) * w > nwords)
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else -1


def unpack_blocks(words: np.ndarray, offsets: np.ndarray, widths: np.ndarray, out: np.ndarray) -> Any:
    """Twin of ``bitunpack._unpack_blocks_serial`` (blocks already checked): one numpy pass per
    (width, row) over every block of that width, the 1024 / T lanes of a row at a time."""
    t = words.itemsize * 8
    lanes = 1024 // t
    widths64 = np.asarray(widths).astype(np.int64)
    offsets64 = np.asarray(offsets).astype(np.int64, copy=False)
    blocks_out = out.reshape(-1, 1024)
    lane = np.arange(lanes, dtype=np.int64)
    for w in np.unique(widths64).tolist():
        which = np.flatnonzero(widths64 == w)
        if w == 0:
            blocks_out[which] = 0
            continue
        res = np.empty((which.size, 1024), words.dtype)
        mask = _U64_ALL >> np.uint64(64 - w)
        base = offsets64[which][:, None] + lane
        for row in range(t):
            bit = row * w
            wi = bit // t
            sh = bit - wi * t
            v = words[base + wi * lanes].astype(np.uint64) >> np.uint64(sh)
            if sh + w > t:
                v |= words[base + (wi + 1) * lanes].astype(np.uint64) << np.uint64(t - sh)
            pos = _fl_position0(row)
            res[:, pos : pos + lanes] = v & mask
        blocks_out[which] = res
    return None


def binary_lengths(item_offsets: np.ndarray, n_bytes: int, indices: np.ndarray, out_offsets: np.ndarray) -> Any:
    """Twin of ``gather._binary_lengths``: out_offsets = scan of the gathered lengths; -1."""
    k = item_offsets.shape[0] - 1
    j = np.asarray(indices).astype(np.int64)
    if j.size and (int(j.min()) < 0 or int(j.max()) >= k):
        return NotImplemented
    offs = np.asarray(item_offsets).astype(np.int64)
    s = offs[j]
    e = offs[j + 1]
    if j.size and (int(s.min()) < 0 or bool((e < s).any()) or int(e.max()) > n_bytes):
        return NotImplemented
    out_offsets[0] = 0
    np.cumsum(e - s, out=out_offsets[1:])
    return -1


def binary_copy_range(
    item_offsets: np.ndarray, item_bytes: np.ndarray, indices: np.ndarray, out_offsets: np.ndarray,
    out_bytes: np.ndarray, lo: int, hi: int,
) -> Any:
    """Twin of ``gather._binary_copy_range``: copy items ``lo..hi`` (validated by the lengths pass)."""
    j = np.asarray(indices[lo:hi]).astype(np.int64)
    starts = np.asarray(item_offsets).astype(np.int64)[j]
    dst = out_offsets[lo : hi + 1]
    lengths = np.diff(dst)
    total = int(dst[-1] - dst[0])
    if total:
        # byte k of the range comes from starts[item] + (k - first byte of that item)
        src = np.repeat(starts - (dst[:-1] - dst[0]), lengths) + np.arange(total, dtype=np.int64)
        out_bytes[int(dst[0]) : int(dst[-1])] = item_bytes[src]
    return None


def utf8_valid(data: np.ndarray, lo: int, hi: int, nchunks: int) -> int:
    """Twin of ``utf8._utf8_valid_cpu``: 0 not UTF-8, 1 UTF-8, 2 ASCII (Python's strict decoder
    is RFC 3629's: no overlong forms, surrogates or code points above U+10FFFF)."""
    seg = data[lo:hi]
    if seg.size == 0 or int(seg.max()) < 0x80:
        return 2
    try:
        codecs.utf_8_decode(np.ascontiguousarray(seg).data, "strict", True)
    except UnicodeDecodeError:
        return 0
    return 1


def check_variable(offsets: np.ndarray, data: np.ndarray, utf8: bool, bytes_ok: bool) -> Any:
    """Twin of ``utf8._check_variable_cpu`` for valid values: ``(VALID, -1)``; else NotImplemented."""
    n = offsets.shape[0] - 1
    if n < 0:
        return 0, np.int64(-1)
    o = np.asarray(offsets).astype(np.int64, copy=False)
    first, last = int(o[0]), int(o[n])
    if first < 0 or last > data.shape[0] or bool((o[1:] < o[:-1]).any()):
        return NotImplemented
    if not utf8:
        return 0, np.int64(-1)
    if not bytes_ok and utf8_valid(data, first, last, 1) == 0:
        return NotImplemented
    if last > first and n > 1:
        inner = o[1:n]
        inner = inner[inner < last]
        if bool(((data[inner] & 0xC0) == 0x80).any()):
            return NotImplemented
    return 0, np.int64(-1)


def unpack_range_swar(
    words_u8: np.ndarray, t: int, offsets: np.ndarray, widths: np.ndarray, out64: np.ndarray, lo: int, hi: int
) -> Any:
    """Twin of ``bitunpack._unpack_range_swar`` (8- or 16-bit words, blocks already checked):
    blocks ``lo..hi`` into ``out64`` viewed as T-bit words, by :func:`unpack_blocks`."""
    dtype = np.uint8 if t == 8 else np.uint16
    words = words_u8[: words_u8.size // (t // 8) * (t // 8)].view(dtype)
    target = out64.view(dtype)[lo * 1024 : hi * 1024]
    unpack_blocks(words, offsets[lo:hi], widths[lo:hi], target)
    return None


def defs_le(def_: np.ndarray, bound: int, out: np.ndarray) -> int:
    """Twin of ``levels._defs_le``: ``out = def_ <= bound``; the number of False."""
    np.less_equal(def_, bound, out=out)
    return int(def_.shape[0] - np.count_nonzero(out))


def max_level(levels: np.ndarray) -> int:
    """Twin of ``levels._max_level``: the largest level, at least 0."""
    return max(0, int(levels.max())) if levels.size else 0


def _in_bounds(indices: np.ndarray, k: int) -> np.ndarray | None:
    """``indices`` as int64 when every one is in ``[0, k)`` (as the kernels read them), else None."""
    j = np.asarray(indices).astype(np.int64)
    if j.size and (int(j.min()) < 0 or int(j.max()) >= k):
        return None
    return j


def gather_range(items: np.ndarray, indices: np.ndarray, out: np.ndarray, lo: int, hi: int) -> Any:
    """Twin of ``gather._gather_range``: ``out[lo:hi] = items[indices[lo:hi]]``; -1."""
    j = _in_bounds(indices[lo:hi], items.shape[0])
    if j is None:
        return NotImplemented
    np.take(items, j, out=out[lo:hi])
    return -1


def _levels(levels: np.ndarray, has: bool, lo: int, hi: int) -> np.ndarray:
    """``levels[lo:hi]`` as int64, zeros when the buffer is absent (``levels._level_at``)."""
    if has:
        return np.asarray(levels[lo:hi]).astype(np.int64)
    return np.zeros(max(hi - lo, 0), np.int64)


def unravel_count_range(
    rep: np.ndarray, has_rep: bool, def_: np.ndarray, has_def: bool, c: np.ndarray, ltr: np.ndarray,
    max_rep: int, max_def: int, counts: np.ndarray, lo: int, hi: int,
) -> Any:
    """Twin of ``levels._unravel_count_range`` for valid levels: ``counts[M]`` = entries of
    layer M among levels ``lo..hi``; -1."""
    r = _levels(rep, has_rep, lo, hi)
    d = _levels(def_, has_def, lo, hi)
    if r.size and (int(r.min()) < 0 or int(r.max()) > max_rep or int(d.min()) < 0 or int(d.max()) > max_def):
        return NotImplemented
    if lo == 0 and r.size and int(r[0]) != max_rep:
        return NotImplemented
    ltr_d = np.asarray(ltr).astype(np.int64)[d]
    for m in range(c.shape[0]):
        cm = int(c[m])
        counts[m] = np.count_nonzero((r >= cm) & (ltr_d <= cm))
    return -1


def unravel_fill_range(
    rep: np.ndarray, has_rep: bool, def_: np.ndarray, has_def: bool, c: np.ndarray, ltr: np.ndarray,
    is_list: np.ndarray, below: np.ndarray, empty_level: np.ndarray, off_base: np.ndarray, val_base: np.ndarray,
    offsets_all: np.ndarray, valid_all: np.ndarray, pos: np.ndarray, null_counts: np.ndarray, scratch: int,
    lo: int, hi: int,
) -> Any:
    """Twin of ``levels._unravel_fill_range`` (levels already validated): per layer M, each
    entry's validity (and, for a list layer, its offset: entries of the next inner layer
    before it) at its slot, and for the last level that is no entry of M, what the kernel
    leaves in M's scratch slots."""
    r = _levels(rep, has_rep, lo, hi)
    d = _levels(def_, has_def, lo, hi)
    ltr_d = np.asarray(ltr).astype(np.int64)[d]
    nl = c.shape[0]
    off_scratch0 = offsets_all.shape[0] - scratch - nl
    val_scratch0 = valid_all.shape[0] - scratch - nl
    for m in range(nl):
        inner = m - 1 if m > 0 else 0
        cm = int(c[m])
        entry = (r >= cm) & (ltr_d <= cm)
        em = int(empty_level[m])
        ok = d <= int(below[m])
        if em > 0:
            ok |= d == em
        at = np.flatnonzero(entry)
        p0 = int(val_base[m]) + int(pos[m])
        valid_all[p0 : p0 + at.size] = ok[at]
        others = np.flatnonzero(~entry)
        if others.size:
            valid_all[val_scratch0 + m] = ok[others[-1]]
        if is_list[m] != 0:
            ci = int(c[inner])
            inner_entry = ((r >= ci) & (ltr_d <= ci)).astype(np.int64)
            q = np.empty(r.size, np.int64)  # entries of the inner layer before each level
            if r.size:
                q[0] = 0
                np.cumsum(inner_entry[:-1], out=q[1:])
            q += int(pos[inner])
            o0 = int(off_base[m]) + int(pos[m])
            offsets_all[o0 : o0 + at.size] = q[at]
            if others.size:
                offsets_all[off_scratch0 + m] = q[others[-1]]
        null_counts[m] = np.count_nonzero(entry & ~ok)
    return None
