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
    "max_level",
    "unpack_blocks",
    "unpack_range_swar",
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
