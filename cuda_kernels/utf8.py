"""Validation of variable-width values: Arrow offsets and UTF-8 bytes.

A variable-width array is ``offsets[n + 1]`` (int32 or int64) into ``data`` (uint8).  It
is valid Arrow when the offsets are non-negative, non-decreasing and at most
``len(data)``; a string array additionally needs every value ``data[offsets[i] :
offsets[i + 1]]`` to be well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
nothing above U+10FFFF) -- what ``pyarrow.Array.validate(full=True)`` checks.

Cores: :func:`_utf8_error_bits` (one byte against the three before it, branch-free) and
:func:`_utf8_first_invalid` (a scalar decoder that finds the first bad byte):

* CPU (:func:`check_variable`): one pass over the offsets, one branch-free (vectorised,
  ``prange``-parallel) pass over ``data[offsets[0] : offsets[n]]`` as a whole, then a check
  that no inner offset points at a continuation byte (a value boundary inside a
  character); :func:`_utf8_first_invalid` locates the bad value only after a failure.  Valid UTF-8 cut only at
  character starts is valid UTF-8 in every piece, so this equals a per-value check.
* GPU (:func:`check_variable_segments_gpu`): one thread per value, over many segments
  (pages) of one offsets / bytes pair at once; the first failing segment is reported with
  an atomic minimum, so that the caller can name the page.  The same threads may write each
  value's offset relative to the first of its column (``rebased``): a column's offsets from
  0 in the width asked for, what cuDF takes, with no launch of their own.
"""

import numpy as np

from . import _device, _twins
from ._cpu import read_only
from ._jitcache import LAZY_NUMBA as numba
from ._jitcache import prange
from ._target import LAZY_CUDA, cpu_driver, dual, gpu_kernel
from .errors import ERR_BAD_UTF8, ERR_OUT_OF_BOUNDS, CorruptInputError, new_error_flag, raise_if_flagged

cuda = LAZY_CUDA

__all__ = [
    "BAD_OFFSETS",
    "BAD_UTF8",
    "BYTE_NEXT",
    "VALID",
    "check_variable",
    "check_variable_segments_gpu",
    "symbol_next",
]

VALID = 0
BAD_OFFSETS = 1
BAD_UTF8 = 2


# --------------------------------------------------------------------------------------------
# UTF-8 as an automaton, for decoders that emit whole symbols (FSST) and validate as they go.
#
# States: 0 at a character boundary; 1, 2, 3 continuation bytes (80..BF) still due; 4 after
# E0 (A0..BF due, then one more), 5 after ED (80..9F, then one), 6 after F0 (90..BF, then
# two), 7 after F4 (80..8F, then two); 8 an error (sticky).  A table is ``uint8[9 * 256]``:
# ``next = table[state * 256 + input]``.  A value is well-formed UTF-8 exactly when the
# automaton, started at 0, ends at 0 after its last byte (RFC 3629; the same language as
# :func:`_utf8_first_invalid`).

UTF8_STATES = 9
UTF8_ERROR = 8


def _byte_next() -> np.ndarray:
    t = np.full((UTF8_STATES, 256), UTF8_ERROR, np.uint8)
    b = np.arange(256)
    t[0, b < 0x80] = 0
    t[0, (b >= 0xC2) & (b <= 0xDF)] = 1
    t[0, 0xE0] = 4
    t[0, (b >= 0xE1) & (b <= 0xEF)] = 2
    t[0, 0xED] = 5
    t[0, 0xF0] = 6
    t[0, (b >= 0xF1) & (b <= 0xF3)] = 3
    t[0, 0xF4] = 7
    cont = (b >= 0x80) & (b <= 0xBF)
    t[1, cont] = 0
    t[2, cont] = 1
    t[3, cont] = 2
    t[4, (b >= 0xA0) & (b <= 0xBF)] = 1
    t[5, (b >= 0x80) & (b <= 0x9F)] = 1
    t[6, (b >= 0x90) & (b <= 0xBF)] = 2
    t[7, (b >= 0x80) & (b <= 0x8F)] = 2
    return t.reshape(-1)


#: The automaton over single bytes (FSST escapes, literal copies).
BYTE_NEXT = _byte_next()


def symbol_next(symbols: np.ndarray, lengths: np.ndarray, n_symbols: int) -> np.ndarray:
    """The automaton over whole FSST symbols: ``uint8[9 * 256]``, entry ``state * 256 + code``
    the state after the symbol's bytes (codes ``>= n_symbols`` lead to the error state).

    ``symbols`` hold a symbol's bytes little-endian in a u64, ``lengths`` 1..8 bytes.  Built
    with eight vectorised steps (a few microseconds per page).
    """
    n = int(n_symbols)
    table = BYTE_NEXT.reshape(UTF8_STATES, 256)
    state = np.repeat(np.arange(UTF8_STATES, dtype=np.int64)[:, None], n, axis=1)
    sym = np.asarray(symbols[:n], np.uint64)
    lens = np.asarray(lengths[:n], np.int64)
    for k in range(8):
        byte = ((sym >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.int64)
        state = np.where(k < lens, table[state, byte], state)
    out = np.full((UTF8_STATES, 256), UTF8_ERROR, np.uint8)
    out[:, :n] = state
    return out.reshape(-1)


@dual
def _is_cont(b):
    return (b & 0xC0) == 0x80


@dual
def _utf8_first_invalid(data, lo, hi):
    """Position of the first byte in ``data[lo:hi]`` that does not start a well-formed
    UTF-8 sequence ending before ``hi``; -1 when the range is valid UTF-8."""
    p = lo
    while p < hi:
        if p + 8 <= hi:
            x = data[p] | data[p + 1] | data[p + 2] | data[p + 3] | data[p + 4] | data[p + 5] | data[p + 6] | data[p + 7]
            if x < 0x80:
                p += 8
                continue
        b = data[p]
        if b < 0x80:
            p += 1
        elif b < 0xC2:  # a continuation byte, or an overlong 2-byte lead
            return p
        elif b < 0xE0:
            if p + 1 >= hi or not _is_cont(data[p + 1]):
                return p
            p += 2
        elif b < 0xF0:
            if p + 2 >= hi or not _is_cont(data[p + 1]) or not _is_cont(data[p + 2]):
                return p
            b1 = data[p + 1]
            if (b == 0xE0 and b1 < 0xA0) or (b == 0xED and b1 >= 0xA0):  # overlong, surrogate
                return p
            p += 3
        elif b < 0xF5:
            if p + 3 >= hi or not _is_cont(data[p + 1]) or not _is_cont(data[p + 2]) or not _is_cont(data[p + 3]):
                return p
            b1 = data[p + 1]
            if (b == 0xF0 and b1 < 0x90) or (b == 0xF4 and b1 >= 0x90):  # overlong, > U+10FFFF
                return p
            p += 4
        else:
            return p
    return -1


@dual
def _utf8_error_bits(b, p1, p2, p3):
    """Nonzero when byte ``b``, after ``p1`` (previous), ``p2``, ``p3``, breaks UTF-8.

    Branch-free (vectorisable): a byte that cannot occur (C0, C1, F5-FF), a continuation
    byte where none is due or a missing one where one is due (due after a lead of 2+ bytes
    one back, 3+ two back, 4+ three back), and the second-byte ranges that rule out
    overlong forms, surrogates and code points above U+10FFFF.
    """
    due = (p1 >= 0xC0) | (p2 >= 0xE0) | (p3 >= 0xF0)
    cont = (b & 0xC0) == 0x80
    bad = (due != cont) | (b == 0xC0) | (b == 0xC1) | (b >= 0xF5)
    bad |= ((p1 == 0xE0) & (b < 0xA0)) | ((p1 == 0xED) & (b > 0x9F))
    bad |= ((p1 == 0xF0) & (b < 0x90)) | ((p1 == 0xF4) & (b > 0x8F))
    return bad


_U1 = np.uint64(1)
_U2 = np.uint64(2)
_U3 = np.uint64(3)


@dual
def _utf8_bytes_bad(data, lo, s, e):
    """Whether any byte of ``data[s:e]`` breaks UTF-8, looking back no further than ``lo``
    (sequences cut off at ``e`` are not checked here).

    The main loop runs on unsigned indices: numba then emits no negative-index wrap-around
    and LLVM vectorises it (about 10 GB/s on one AVX2 core).
    """
    bad = False
    head = min(s + 3, e)
    for i in range(s, head):
        p1 = data[i - 1] if i - 1 >= lo else np.uint8(0)
        p2 = data[i - 2] if i - 2 >= lo else np.uint8(0)
        p3 = data[i - 3] if i - 3 >= lo else np.uint8(0)
        bad |= _utf8_error_bits(data[i], p1, p2, p3)
    for i in range(np.uint64(head), np.uint64(e)):
        bad |= _utf8_error_bits(data[i], data[i - _U1], data[i - _U2], data[i - _U3])
    return bad


@dual
def _utf8_tail_bad(data, lo, hi):
    """Whether ``data[lo:hi]`` ends inside a multi-byte sequence."""
    bad = False
    if hi - 1 >= lo:
        bad |= data[hi - 1] >= 0xC0
    if hi - 2 >= lo:
        bad |= data[hi - 2] >= 0xE0
    if hi - 3 >= lo:
        bad |= data[hi - 3] >= 0xF0
    return bad


# Bytes per prange chunk of the CPU check (a few chunks per thread on large pages).
_CHUNK = 1 << 20


@dual
def _high_bits(data, s, e):
    """OR of the bytes of ``data[s:e]`` (>= 0x80 when any byte is not ASCII)."""
    acc = np.uint8(0)
    for i in range(np.uint64(s), np.uint64(e)):
        acc |= data[i]
    return acc


@cpu_driver(parallel=True, twin=_twins.utf8_valid)
def _utf8_valid_cpu(data, lo, hi, nchunks):
    """0: ``data[lo:hi]`` is not UTF-8; 1: it is; 2: it is ASCII (no value boundary can
    then fall inside a character)."""
    step = (hi - lo + nchunks - 1) // nchunks
    bad = np.zeros(nchunks, np.bool_)
    high = np.zeros(nchunks, np.uint8)
    for c in prange(nchunks):
        s = lo + c * step
        e = min(s + step, hi)
        if s < e:
            high[c] = _high_bits(data, s, e)
            # an ASCII chunk can still break a sequence begun just before it
            bad[c] = _utf8_bytes_bad(data, lo, s, e if high[c] >= 0x80 else min(s + 3, e))
    if bad.any() or _utf8_tail_bad(data, lo, hi):
        return 0
    for c in range(nchunks):
        if high[c] >= 0x80:
            return 1
    return 2


@dual
def _value_ok(offsets, data, n_bytes, i, utf8):
    """Value ``i``: its offsets in order and inside ``n_bytes``, and (``utf8``) its bytes."""
    lo = np.int64(offsets[i])
    hi = np.int64(offsets[i + 1])
    if lo < 0 or hi < lo or hi > n_bytes:
        return BAD_OFFSETS
    if utf8 and _utf8_first_invalid(data, lo, hi) >= 0:
        return BAD_UTF8
    return VALID


@cpu_driver(twin=_twins.check_variable)
def _check_variable_cpu(offsets, data, utf8, bytes_ok):
    n = offsets.shape[0] - 1
    size = np.int64(data.shape[0])
    if n < 0:
        return VALID, np.int64(-1)
    first = np.int64(offsets[0])
    if first < 0 or first > size:
        return BAD_OFFSETS, np.int64(0)
    bad_order = False
    for i in range(np.uint64(n)):
        bad_order |= (offsets[i + _U1] < offsets[i]) | (offsets[i + _U1] > size)
    if bad_order:
        for i in range(n):
            if offsets[i + 1] < offsets[i] or offsets[i + 1] > size:
                return BAD_OFFSETS, np.int64(i)
    if not utf8:
        return VALID, np.int64(-1)
    last = np.int64(offsets[n])
    bad = np.int64(-1) if bytes_ok else _utf8_first_invalid(data, first, last)
    if bad >= 0:
        # the value holding byte ``bad``: the last i with offsets[i] <= bad
        holder = np.int64(np.searchsorted(offsets, bad, side="right")) - 1
        return BAD_UTF8, min(holder, np.int64(n - 1))
    # no value may start inside a character (the last offset may equal ``last``)
    inner = False
    if last > first:
        for i in range(np.uint64(1), np.uint64(n)):
            o = np.uint64(offsets[i])
            inner |= (o < np.uint64(last)) & ((data[min(o, np.uint64(last - 1))] & 0xC0) == 0x80)
    if inner:
        for i in range(1, n):
            start = np.int64(offsets[i])
            if start < last and _is_cont(data[start]):
                return BAD_UTF8, np.int64(i - 1)
    return VALID, np.int64(-1)


def _utf8_verdict(data, lo, hi):
    """:func:`_utf8_valid_cpu` of ``data[lo:hi]`` in chunks of about ``_CHUNK`` bytes.

    One chunk runs with one numba thread: starting the thread pool's parallel region costs
    a scheduler time slice (milliseconds, measured 18 ms on a loaded 2-core machine) while
    the check of a small page takes microseconds.
    """
    nchunks = max(1, (hi - lo) // _CHUNK)
    threads = numba.get_num_threads()
    if nchunks > 1 or threads == 1:
        return _utf8_valid_cpu(data, lo, hi, nchunks)
    numba.set_num_threads(1)
    try:
        return _utf8_valid_cpu(data, lo, hi, 1)
    finally:
        numba.set_num_threads(threads)


def check_variable(offsets, data, utf8):
    """Validate Arrow variable-width values (CPU).

    :param offsets: ``int32/int64[n + 1]``.
    :param data: ``uint8`` bytes the offsets point into.
    :param utf8: also require every value to be well-formed UTF-8 (string types).
    :raises CorruptInputError: with ``code`` ``ERR_OUT_OF_BOUNDS`` (offsets) or
        ``ERR_BAD_UTF8``, and ``index`` the first bad value.
    """
    offsets = np.ascontiguousarray(offsets)
    if offsets.dtype not in (np.int32, np.int64):
        offsets = offsets.astype(np.int64)
    data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    # One array flavour for the compiled drivers: bytes and offsets come both from read-only
    # file maps and from writable decode buffers, and numba compiles (seconds) per flavour.
    offsets, data = read_only(offsets), read_only(data)
    bytes_ok = False
    if utf8 and offsets.size > 1:
        # the bytes as a whole, in parallel; the exact place is only searched for on failure
        lo, hi = int(offsets[0]), int(offsets[-1])
        verdict = _utf8_verdict(data, lo, hi) if 0 <= lo <= hi <= data.size else 0
        bytes_ok = verdict > 0
        if verdict == 2:
            utf8 = False  # ASCII: every offset is a character boundary; offsets are left
    kind, index = _check_variable_cpu(offsets, data, bool(utf8), bytes_ok)
    if kind == VALID:
        return
    if kind == BAD_OFFSETS:
        err = CorruptInputError(f"value {int(index)}: offsets run backwards or leave the {data.size}-byte buffer", ERR_OUT_OF_BOUNDS)
    else:
        err = CorruptInputError(f"value {int(index)}: invalid utf-8 sequence", ERR_BAD_UTF8)
    err.index = int(index)
    raise err


@dual
def _segment_of_value(seg_first, nseg, t):
    """The segment holding thread ``t`` (``seg_first`` ascending, ``nseg + 1`` entries)."""
    lo = np.int64(0)
    hi = np.int64(nseg)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if np.int64(seg_first[mid]) <= t:
            lo = mid
        else:
            hi = mid
    return lo


@gpu_kernel
def _check_segments_kernel(offsets, data, n_bytes, desc, nseg, first_bad, err, emit, out):
    """``desc``: per segment its first slot, UTF-8 flag, column base, column end, output
    position and shift (6 x ``nseg``), then the segments' first threads (``nseg + 1``)."""
    t = cuda.grid(1)
    seg_first = desc[6 * nseg :]
    if t >= np.int64(seg_first[nseg]):
        return
    s = _segment_of_value(seg_first, nseg, t)
    rel = t - np.int64(seg_first[s])
    i = np.int64(desc[s]) + rel
    if i < 0 or i + 1 >= offsets.shape[0] or _value_ok(offsets, data, n_bytes, i, desc[nseg + s] != 0) != VALID:
        cuda.atomic.min(first_bad, 0, s)
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)  # the error flag in the same launch
        return
    if emit:
        b = np.int64(desc[2 * nseg + s])
        if b < 0:
            return
        d = np.int64(desc[4 * nseg + s]) + rel
        last = i + 1 == np.int64(desc[3 * nseg + s])
        if b > i or d < 0 or d + (1 if last else 0) >= out.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
            return
        base = np.int64(offsets[b]) - np.int64(desc[5 * nseg + s])  # (less the column's shift)
        out[d] = np.int64(offsets[i]) - base
        if last:
            out[d + 1] = np.int64(offsets[i + 1]) - base


def check_variable_segments_gpu(offsets, data, n_bytes, seg_slot, seg_count, seg_utf8, *, on_bad=None, rebased=None,
                                threads_per_block=256):
    """Validate segments of device variable-width values in one launch.

    :param offsets: device ``int64[m + 1]`` offsets into ``data``.
    :param data: device ``uint8`` bytes, of which the first ``n_bytes`` are values.
    :param seg_slot: host int64 per segment: index of its first value.
    :param seg_count: host int64 per segment: its number of values.
    :param seg_utf8: host bool per segment: whether its values must be UTF-8.
    :param on_bad: optional ``on_bad(index)`` returning the exception to raise for the
        first bad segment ``index``; with it nothing is read back unless a value is bad,
        and inside :func:`cuda_kernels.errors.deferred_errors` not before the block ends.
    :param rebased: optional ``(out, base, end, dst)`` or ``(out, base, end, dst, shift)``:
        the same launch also writes every value's offset relative to a *column* of
        consecutive values ``[base[s], end[s])`` holding segment ``s``: ``out[dst[s] + j] =
        offsets[slot + j] - offsets[base[s]] + shift[s]`` (``shift`` 0 where not given) for
        the segment's ``j``-th value (``slot = seg_slot[s]``), and the column's final
        offset ``out[dst[s] + j + 1]`` after its last value (``slot + j + 1 == end[s]``);
        ``out`` is a device int32 or int64 array, ``base[s] < 0`` leaves segment ``s`` out.
        So a column whose values the segments cover is its offsets from 0 (from ``shift``:
        the bytes of the column's rows before them, which an earlier call wrote), in
        ``out``'s width (cuDF's layout), written by the launch that reads them for validation.
    :returns: the index of the first segment holding a bad value, or -1 (always -1 with
        ``on_bad``, which raises instead).

    The descriptors go up in one copy (with ``first_bad``, two uploads per call).
    """
    seg_count = np.asarray(seg_count, np.int64)
    nseg = seg_count.size
    if not nseg:
        return -1
    desc = np.zeros(7 * nseg + 1, np.int64)
    np.cumsum(seg_count, out=desc[6 * nseg + 1 :])
    total = int(desc[-1])
    if not total:
        return -1
    desc[:nseg] = np.asarray(seg_slot, np.int64)
    desc[nseg : 2 * nseg] = np.asarray(seg_utf8, np.bool_)
    dev = _device.to_device
    if rebased is None:
        out = _device.device_empty(1, np.int64)  # not written
    else:
        out, base, end, dst = rebased[:4]
        desc[2 * nseg : 3 * nseg] = base
        desc[3 * nseg : 4 * nseg] = end
        desc[4 * nseg : 5 * nseg] = dst
        if len(rebased) > 4:
            desc[5 * nseg : 6 * nseg] = rebased[4]
    first_bad = dev(np.full(1, nseg, np.int64))
    err = new_error_flag() if on_bad is not None else dev(np.zeros(1, np.int32))
    blocks, tpb = _device.launch_dims(total, threads_per_block)
    _check_segments_kernel.get()[blocks, tpb](
        offsets, data, np.int64(n_bytes), dev(desc), np.int64(nseg), first_bad, err, np.int64(rebased is not None), out,
    )
    if on_bad is not None:
        raise_if_flagged(err, "check_variable_segments_gpu", explain=lambda: on_bad(int(_device.to_host(first_bad)[0])))
        return -1
    bad = int(_device.to_host(first_bad)[0])
    return -1 if bad >= nseg else bad
