"""FSST decoding (Fast Static Symbol Table string decompression).

A symbol table has up to 255 symbols of 1 to 8 bytes.  Symbol ``c`` is stored
as a ``uint64`` whose little-endian bytes are the symbol's bytes
(``symbols[c] & 0xff`` is the first byte), with its length in
``symbol_lengths[c]``.  A compressed string is a sequence of codes:

* a code ``c < 255`` emits the first ``symbol_lengths[c]`` bytes of ``symbols[c]``;
* the code ``255`` (escape) emits the following byte literally.

Example: symbols ``{0: b"ab", 1: b"c"}``; the codes ``00 01 ff 7a 00`` decode to
``b"abcz" + b"ab"``.

Decoding runs in two passes over the strings: pass 1 computes each decoded
length (and validates the input), an exclusive scan turns the lengths into
output offsets, and pass 2 writes the bytes.  On the GPU both passes use one
thread per string and keep the symbol table in shared memory; the scan is
``cupy.cumsum`` (host scan when CuPy is missing, e.g. under the simulator).

Corrupt input (an escape as the last byte of a string, a code naming a symbol
``>= n_symbols``, offsets outside the compressed buffer, a symbol longer than
8 bytes) never reads out of bounds: the CPU raises
:class:`~cuda_kernels.errors.CorruptInputError`; GPU kernels OR a device error
flag and the host wrapper raises the same error after the kernel.
"""

import numpy as np

from . import _device
from ._cpu import store_u64
from ._jitcache import LAZY_NUMBA as numba
from ._jitcache import prange
from ._target import LAZY_CUDA, cpu_driver, dual, gpu_kernel
from .errors import (
    ERR_BAD_CODE,
    ERR_OUT_OF_BOUNDS,
    ERR_TRUNCATED,
    CorruptInputError,
    new_error_flag,
    raise_if_flagged,
)
from .utf8 import BYTE_NEXT, symbol_next

cuda = LAZY_CUDA

__all__ = [
    "ESCAPE",
    "fsst_decode",
    "fsst_decode_gpu",
    "fsst_decoded_lengths",
    "fsst_decode_segments",
    "fsst_lengths_segments_gpu",
    "pack_tables",
    "fsst_decode_segments_gpu",
]

ESCAPE = 255
MAX_SYMBOLS = 255
#: bytes of a symbol table as the segmented kernels read it (:func:`pack_tables`): 256
#: little-endian u64 symbols, then 256 u8 lengths (a multiple of 8: tables packed back to
#: back stay aligned)
TABLE_BYTES = 256 * 8 + 256

# Negative lengths returned by the length core; mapped to error bits.
_E_TRUNCATED = -1
_E_BAD_CODE = -2
_E_BOUNDS = -3

# prange drivers only above this size and with more than one numba thread: with one
# (pool threads that decode pages) the serial driver runs and the parfor one never compiles.
_PARALLEL_MIN_STRINGS = 4096

# unsigned steps of the decode loops (no negative-index fix-up on the stores they index)
_U1 = np.uint64(1)
_U2 = np.uint64(2)
_U8 = np.uint64(8)


def _nchunks(n):
    """Number of prange chunks: a few per thread, none smaller than ~1k items."""
    return max(1, min(4 * numba.get_num_threads(), n // 1024))


# --------------------------------------------------------------------------
# Cores
# --------------------------------------------------------------------------


@dual
def _fsst_decoded_len(sym_lens, n_symbols, comp, n_comp, start, end):
    """Decoded length of ``comp[start:end]``, or a negative error code."""
    if start < 0 or end < start or end > n_comp:
        return -3
    n: int | np.int64 = 0  # a local annotation: the compiled bytecode is unchanged
    i = start
    while i < end:
        c = np.int64(comp[i])
        if c == 255:
            if i + 1 >= end:
                return -1
            n += 1
            i += 2
        else:
            if c >= n_symbols:
                return -2
            n += np.int64(sym_lens[c])
            i += 1
    return n


@dual
def _fsst_decode_one(symbols, sym_lens, comp, start, end, out, pos, out_end):
    """Write the decoding of ``comp[start:end]`` at ``out[pos:out_end]``; returns the end
    position.

    The input must have been validated by :func:`_fsst_decoded_len`.  While at
    least 8 bytes of this string's output remain, a symbol is written as 8
    unconditional byte stores (the bytes past its length are overwritten by
    the next code; LLVM merges the stores into one unaligned 64-bit store),
    so no byte is ever written outside ``out[pos:out_end]``.  Positions are unsigned:
    numba then emits no negative-index fix-up per store, which kept LLVM from merging
    them (measured 1.7x faster on 1-2 byte symbols).
    """
    i = np.uint64(start)
    e = np.uint64(end)
    p = np.uint64(pos)
    oe = np.uint64(out_end)
    while i < e:
        c = np.uint64(comp[i])
        if c == 255:
            out[p] = comp[i + _U1]
            p += _U1
            i += _U2
        else:
            s = np.uint64(symbols[c])
            n = np.uint64(sym_lens[c])
            _put_symbol(out, p, oe, s, n)
            p += n
            i += _U1
    return np.int64(p)


@dual
def _put_symbol(out, p, oe, s, n):
    """Store the ``n`` bytes of symbol ``s`` (little-endian) at ``out[p:]`` (``p``, ``oe``
    unsigned): 8 unconditional stores while 8 bytes remain before ``oe``, else ``n``."""
    if p + _U8 <= oe:
        out[p] = s & np.uint64(0xFF)
        out[p + _U1] = (s >> np.uint64(8)) & np.uint64(0xFF)
        out[p + _U2] = (s >> np.uint64(16)) & np.uint64(0xFF)
        out[p + np.uint64(3)] = (s >> np.uint64(24)) & np.uint64(0xFF)
        out[p + np.uint64(4)] = (s >> np.uint64(32)) & np.uint64(0xFF)
        out[p + np.uint64(5)] = (s >> np.uint64(40)) & np.uint64(0xFF)
        out[p + np.uint64(6)] = (s >> np.uint64(48)) & np.uint64(0xFF)
        out[p + np.uint64(7)] = (s >> np.uint64(56)) & np.uint64(0xFF)
    else:
        for k in range(n):
            out[p + np.uint64(k)] = (s >> np.uint64(8 * k)) & np.uint64(0xFF)


@dual
def _fsst_decode_one_utf8(symbols, sym_lens, sym_next, byte_next, comp, start, end, out, pos, out_end, st):
    """:func:`_fsst_decode_one` that also runs the UTF-8 automaton (:mod:`cuda_kernels.utf8`)
    over the emitted bytes, a whole symbol per step (``sym_next``) or one escaped byte
    (``byte_next``), from state ``st``; returns the state after the last code (0: every
    character complete and well-formed so far).

    At a character boundary the next state is ``sym_next[code]``, a load that does not
    depend on the previous one: on text that is mostly whole characters per symbol the
    branch is predicted and the automaton adds no dependency chain to the decode loop.
    """
    i = np.uint64(start)
    e = np.uint64(end)
    p = np.uint64(pos)
    oe = np.uint64(out_end)
    while i < e:
        c = np.uint64(comp[i])
        if c == 255:
            b = comp[i + _U1]
            out[p] = b
            st = np.int64(byte_next[np.uint64(st) * np.uint64(256) + np.uint64(b)])
            p += _U1
            i += _U2
        else:
            s = np.uint64(symbols[c])
            n = np.uint64(sym_lens[c])
            _put_symbol(out, p, oe, s, n)
            if st == 0:
                st = np.int64(sym_next[c])
            else:
                st = np.int64(sym_next[np.uint64(st) * np.uint64(256) + c])
            p += n
            i += _U1
    return st


@dual
def _error_bit(code):
    """Map a negative length from :func:`_fsst_decoded_len` to an ``ERR_*`` bit."""
    if code == -1:
        return ERR_TRUNCATED
    if code == -2:
        return ERR_BAD_CODE
    return ERR_OUT_OF_BOUNDS


# --------------------------------------------------------------------------
# CPU drivers
# --------------------------------------------------------------------------


@cpu_driver
def _lengths_range(sym_lens, n_symbols, comp, starts, ends, out_offsets, lo, hi):
    """out_offsets[i + 1] = decoded length of string i (``comp[starts[i]:ends[i]]``) for
    lo <= i < hi.  Returns the first bad string index in the range, or -1."""
    ncomp = comp.shape[0]
    bad = -1
    for i in range(lo, hi):
        length = _fsst_decoded_len(sym_lens, n_symbols, comp, ncomp, np.int64(starts[i]), np.int64(ends[i]))
        out_offsets[i + 1] = length
        if length < 0 and bad < 0:
            bad = i
    return bad


@cpu_driver(parallel=True)
def _lengths_parallel(sym_lens, n_symbols, comp, starts, ends, out_offsets, nchunks):
    # prange over contiguous chunks, each a serial loop: this keeps the inner
    # loop as tight as the serial driver's (a prange over single strings is not).
    n = starts.shape[0]
    bads = np.full(nchunks, -1, dtype=np.int64)
    for ch in prange(nchunks):
        bads[ch] = _lengths_range(
            sym_lens, n_symbols, comp, starts, ends, out_offsets, ch * n // nchunks, (ch + 1) * n // nchunks
        )
    for ch in range(nchunks):
        if bads[ch] >= 0:
            return bads[ch]
    return -1


@cpu_driver
def _scan_inplace(offsets):
    """offsets[0] = 0; offsets[1:] = cumsum(offsets[1:])."""
    offsets[0] = 0
    acc = np.int64(0)
    for i in range(1, offsets.shape[0]):
        acc += offsets[i]
        offsets[i] = acc


@cpu_driver
def _decode_range(symbols, sym_lens, sym_next, byte_next, comp, starts, ends, out_offsets, out, lo, hi):
    """Decode strings ``lo..hi`` (``comp[starts[i]:ends[i]]``); returns the first one that
    is not UTF-8, or -1."""
    bad = -1
    for i in range(lo, hi):
        st = _fsst_decode_one_utf8(
            symbols, sym_lens, sym_next, byte_next, comp, np.int64(starts[i]), np.int64(ends[i]),
            out, out_offsets[i], out_offsets[i + 1], np.int64(0),
        )
        if st != 0 and bad < 0:
            bad = i
    return bad


@cpu_driver(parallel=True)
def _decode_parallel(symbols, sym_lens, sym_next, byte_next, comp, starts, ends, out_offsets, out, nchunks):
    n = starts.shape[0]
    bads = np.full(nchunks, -1, dtype=np.int64)
    for ch in prange(nchunks):
        bads[ch] = _decode_range(
            symbols, sym_lens, sym_next, byte_next, comp, starts, ends, out_offsets, out,
            ch * n // nchunks, (ch + 1) * n // nchunks,
        )
    for ch in range(nchunks):
        if bads[ch] >= 0:
            return bads[ch]
    return -1


@cpu_driver
def decode_checked_cpu(symbols, sym_lens, sym_next, byte_next, n_symbols, comp, start, end, out, pos):
    """Decode ``comp[start:end]`` to ``out[pos:]``, checking every code (CPU, one pass).

    ``out`` must have room for ``8 * (end - start)`` bytes from ``pos``: a code consumes at
    least one byte and emits at most eight, and each symbol is written with one unaligned
    8-byte store whose tail the next code overwrites.  Returns ``(end position, UTF-8
    automaton state)`` (state 0: the string is well-formed UTF-8), or ``(-1, 0)`` (the
    string ends in an escape) / ``(-2, 0)`` (a code beyond the table).
    """
    i = start
    st = np.int64(0)
    while i < end:
        c = np.int64(comp[i])
        if c == 255:
            if i + 1 >= end:
                return np.int64(-1), st
            b = comp[i + 1]
            out[pos] = b
            st = np.int64(byte_next[st * 256 + np.int64(b)])
            pos += 1
            i += 2
        else:
            if c >= n_symbols:
                return np.int64(-2), st
            store_u64(out, pos, symbols[c])  # type: ignore[operator]  # a LazyIntrinsic: compiled code calls it
            if st == 0:
                st = np.int64(sym_next[c])
            else:
                st = np.int64(sym_next[st * 256 + c])
            pos += np.int64(sym_lens[c])
            i += 1
    return pos, st


@cpu_driver
def decode_stream_cpu(symbols, sym_lens, sym_next, byte_next, comp, start, end, out, pos, out_end):
    """As :func:`_fsst_decode_one_utf8` from state 0 (validated input, exact-size output)
    with 8-byte stores; returns the automaton's final state."""
    i = start
    st = np.int64(0)
    while i < end and pos + 8 <= out_end:
        c = np.int64(comp[i])
        if c == 255:
            b = comp[i + 1]
            out[pos] = b
            st = np.int64(byte_next[st * 256 + np.int64(b)])
            pos += 1
            i += 2
        else:
            store_u64(out, pos, symbols[c])  # type: ignore[operator]  # a LazyIntrinsic: compiled code calls it
            if st == 0:
                st = np.int64(sym_next[c])
            else:
                st = np.int64(sym_next[st * 256 + c])
            pos += np.int64(sym_lens[c])
            i += 1
    return _fsst_decode_one_utf8(symbols, sym_lens, sym_next, byte_next, comp, i, end, out, pos, out_end, st)


# --------------------------------------------------------------------------
# GPU kernels
# --------------------------------------------------------------------------


@gpu_kernel
def _lengths_kernel(sym_lens, n_symbols, comp, in_offsets, out_lens, err):
    sh_lens = cuda.shared.array(256, numba.uint8)
    t = cuda.threadIdx.x
    while t < 256:
        sh_lens[t] = sym_lens[t]
        t += cuda.blockDim.x
    cuda.syncthreads()
    i = cuda.grid(1)
    if i < out_lens.shape[0]:
        length = _fsst_decoded_len(
            sh_lens, n_symbols, comp, comp.shape[0], np.int64(in_offsets[i]), np.int64(in_offsets[i + 1])
        )
        if length < 0:
            cuda.atomic.or_(err, 0, _error_bit(length))
            length = 0
        out_lens[i] = length


@gpu_kernel
def _decode_kernel(symbols, sym_lens, comp, in_offsets, out_offsets, out):
    sh_sym = cuda.shared.array(256, numba.uint64)
    sh_lens = cuda.shared.array(256, numba.uint8)
    t = cuda.threadIdx.x
    while t < 256:
        sh_sym[t] = symbols[t]
        sh_lens[t] = sym_lens[t]
        t += cuda.blockDim.x
    cuda.syncthreads()
    i = cuda.grid(1)
    if i < in_offsets.shape[0] - 1:
        _fsst_decode_one(
            sh_sym, sh_lens, comp, np.int64(in_offsets[i]), np.int64(in_offsets[i + 1]),
            out, out_offsets[i], out_offsets[i + 1],
        )


# Segmented kernels: strings of many segments (pages), each with its own symbol
# table.  CUDA block b works on strings blk_first[b]..blk_end[b] of segment
# blk_seg[b] only, so the block loads one table into shared memory.  The tables
# are bytes (``tables``, e.g. the staging arena the strings are in): segment s's
# table starts at byte ``table_pos[s]`` and is TABLE_BYTES long (256 little-endian
# u64 symbols, then 256 u8 lengths; see :func:`pack_tables`).


@dual
def _table_symbol(tables, at):
    """The little-endian u64 symbol at byte ``at`` of ``tables``."""
    v = np.uint64(0)
    for k in range(8):
        v |= np.uint64(tables[at + k]) << np.uint64(8 * k)
    return v


@gpu_kernel
def _seg_lengths_kernel(tables, table_pos, n_symbols, comp, starts, lengths, blk_seg, blk_first, blk_end, out_lens, err):
    sh_lens = cuda.shared.array(256, numba.uint8)
    b = cuda.blockIdx.x
    s = np.int64(blk_seg[b])
    base = np.int64(table_pos[s])
    ok = base >= 0 and base + TABLE_BYTES <= tables.shape[0]
    t = cuda.threadIdx.x
    while t < 256:  # an out-of-range table: no symbols (flagged below)
        sh_lens[t] = tables[base + 2048 + t] if ok else 0
        t += cuda.blockDim.x
    cuda.syncthreads()
    if not ok and cuda.threadIdx.x == 0:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
    i = np.int64(blk_first[b]) + cuda.threadIdx.x
    if i < np.int64(blk_end[b]):
        st = np.int64(starts[i])
        length = _fsst_decoded_len(sh_lens, np.int64(n_symbols[s]), comp, comp.shape[0], st, st + np.int64(lengths[i]))
        if length < 0:
            cuda.atomic.or_(err, 0, _error_bit(length))
            length = 0
        out_lens[i] = length


@gpu_kernel
def _seg_decode_kernel(tables, table_pos, comp, starts, lengths, blk_seg, blk_first, blk_end, out_offsets, out, err):
    sh_sym = cuda.shared.array(256, numba.uint64)
    sh_lens = cuda.shared.array(256, numba.uint8)
    b = cuda.blockIdx.x
    s = np.int64(blk_seg[b])
    base = np.int64(table_pos[s])
    ok = base >= 0 and base + TABLE_BYTES <= tables.shape[0]
    t = cuda.threadIdx.x
    while t < 256:  # an out-of-range table: no symbols (flagged below)
        sh_sym[t] = _table_symbol(tables, base + 8 * t) if ok else np.uint64(0)
        sh_lens[t] = tables[base + 2048 + t] if ok else 0
        t += cuda.blockDim.x
    cuda.syncthreads()
    if not ok and cuda.threadIdx.x == 0:
        cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
    i = np.int64(blk_first[b]) + cuda.threadIdx.x
    if i < np.int64(blk_end[b]):
        st = np.int64(starts[i])
        o0 = np.int64(out_offsets[i])
        o1 = np.int64(out_offsets[i + 1])
        if o0 < 0 or o1 < o0 or o1 > out.shape[0]:
            cuda.atomic.or_(err, 0, ERR_OUT_OF_BOUNDS)
        else:
            _fsst_decode_one(sh_sym, sh_lens, comp, st, st + np.int64(lengths[i]), out, o0, o1)


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def _prepare_table(symbols, symbol_lengths, n_symbols):
    """Validate the symbol table and return 256-entry (u64, u8) host copies and n_symbols."""
    symbols = np.asarray(symbols)
    lens = np.asarray(symbol_lengths)
    if symbols.ndim != 1 or lens.ndim != 1:
        msg = "symbols and symbol_lengths must be 1-D arrays"
        raise ValueError(msg)
    if n_symbols is None:
        n_symbols = min(MAX_SYMBOLS, symbols.shape[0], lens.shape[0])
    n_symbols = int(n_symbols)
    if not 0 <= n_symbols <= MAX_SYMBOLS:
        msg = f"n_symbols must be in 0..255, got {n_symbols}"
        raise CorruptInputError(msg, ERR_BAD_CODE)
    if symbols.shape[0] < n_symbols or lens.shape[0] < n_symbols:
        msg = f"symbol table has fewer than n_symbols={n_symbols} entries"
        raise CorruptInputError(msg, ERR_OUT_OF_BOUNDS)
    sym = np.zeros(256, dtype=np.uint64)
    sym[:n_symbols] = symbols[:n_symbols].astype(np.uint64, copy=False)
    sl = np.zeros(256, dtype=np.uint8)
    raw_lens = lens[:n_symbols].astype(np.int64)
    if n_symbols and (raw_lens.min() < 0 or raw_lens.max() > 8):
        msg = "fsst: a symbol length is outside 0..8"
        raise CorruptInputError(msg, ERR_BAD_CODE)
    sl[:n_symbols] = raw_lens
    return sym, sl, n_symbols


def _raise_for(code, index):
    bit = {_E_TRUNCATED: ERR_TRUNCATED, _E_BAD_CODE: ERR_BAD_CODE}.get(code, ERR_OUT_OF_BOUNDS)
    what = {
        ERR_TRUNCATED: "ends with an escape byte",
        ERR_BAD_CODE: "uses a code beyond the symbol table",
        ERR_OUT_OF_BOUNDS: "has offsets outside the compressed buffer",
    }[bit]
    msg = f"fsst_decode: compressed string {index} {what}"
    raise CorruptInputError(msg, bit)


def _lengths_cpu(sym_lens, n_symbols, comp, starts, ends):
    """Pass 1: ``int64[n + 1]`` with each string's decoded length at ``[i + 1]``."""
    n = starts.shape[0]
    out_offsets = np.empty(n + 1, dtype=np.int64)
    if n >= _PARALLEL_MIN_STRINGS and numba.get_num_threads() > 1:
        bad = _lengths_parallel(sym_lens, n_symbols, comp, starts, ends, out_offsets, _nchunks(n))
    else:
        bad = _lengths_range(sym_lens, n_symbols, comp, starts, ends, out_offsets, 0, n)
    if bad >= 0:
        _raise_for(int(out_offsets[bad + 1]), bad)
    return out_offsets


def _as_spans(in_offsets):
    """``(starts, ends)`` int64 views of ``n + 1`` string offsets (a copy only of int32 ones)."""
    offs = np.asarray(in_offsets)
    if offs.ndim != 1 or offs.shape[0] < 1:
        msg = "in_offsets must be a 1-D array of n + 1 offsets"
        raise ValueError(msg)
    if offs.dtype.kind not in "iu":
        msg = f"in_offsets must be integers, got {offs.dtype}"
        raise TypeError(msg)
    offs = np.ascontiguousarray(offs, dtype=np.int64)
    return offs[:-1], offs[1:]


def _decode_spans(symbols, symbol_lengths, compressed, starts, ends, n_symbols, utf8):
    """Both passes over strings ``compressed[starts[i]:ends[i]]`` (int64 arrays)."""
    sym, sl, nsym = _prepare_table(symbols, symbol_lengths, n_symbols)
    comp = np.ascontiguousarray(compressed, dtype=np.uint8)
    n = starts.shape[0]
    out_offsets = _lengths_cpu(sl, nsym, comp, starts, ends)
    _scan_inplace(out_offsets)
    out = np.empty(int(out_offsets[n]), dtype=np.uint8)
    snext = symbol_next(sym, sl, nsym)
    bad = -1
    if n >= _PARALLEL_MIN_STRINGS and numba.get_num_threads() > 1:
        bad = _decode_parallel(sym, sl, snext, BYTE_NEXT, comp, starts, ends, out_offsets, out, _nchunks(n))
    elif n:
        bad = _decode_range(sym, sl, snext, BYTE_NEXT, comp, starts, ends, out_offsets, out, 0, n)
    if utf8:
        return out_offsets, out, bool(bad < 0)
    return out_offsets, out


def fsst_decoded_lengths(symbols, symbol_lengths, compressed, in_offsets, n_symbols=None):
    """Decoded length of each string (pass 1 alone), as ``int64[n]``."""
    _sym, sl, nsym = _prepare_table(symbols, symbol_lengths, n_symbols)
    comp = np.ascontiguousarray(compressed, dtype=np.uint8)
    starts, ends = _as_spans(in_offsets)
    return _lengths_cpu(sl, nsym, comp, starts, ends)[1:].copy()


def fsst_decode(symbols, symbol_lengths, compressed, in_offsets, n_symbols=None, *, utf8=False):
    """Decode FSST-compressed strings (CPU).

    :param symbols: ``uint64[>= n_symbols]`` symbol bytes (little-endian packed).
    :param symbol_lengths: ``uint8[>= n_symbols]`` symbol lengths (1..8).
    :param compressed: ``uint8`` buffer of all compressed strings.
    :param in_offsets: ``int64[n + 1]`` (int32 accepted); string ``i`` is
        ``compressed[in_offsets[i]:in_offsets[i + 1]]``.
    :param n_symbols: number of valid symbols; codes ``>= n_symbols`` (other
        than 255) are corrupt.  Default: ``min(255, len(symbols))``.
    :param utf8: also return whether every decoded string is well-formed UTF-8, found by
        the decode loop itself (:func:`_fsst_decode_one_utf8`; no second pass).
    :returns: ``(out_offsets int64[n + 1], out_bytes uint8[out_offsets[-1]])``, plus that
        verdict (``bool``) with ``utf8``.  The offsets start at 0, never decrease and end
        at ``len(out_bytes)`` by construction.
    :raises CorruptInputError: on corrupt input.
    """
    starts, ends = _as_spans(in_offsets)
    return _decode_spans(symbols, symbol_lengths, compressed, starts, ends, n_symbols, utf8)


def fsst_decode_spans(symbols, symbol_lengths, compressed, starts, lengths, n_symbols=None, *, utf8=False):
    """Decode FSST strings given as spans: string ``i`` is
    ``compressed[starts[i]:starts[i] + lengths[i]]`` (spans need not be contiguous).

    Same result (and ``utf8`` verdict) and errors as :func:`fsst_decode`, without first
    gathering the spans (one driver serves both: offsets are the spans ``offsets[:-1]``,
    ``offsets[1:]``).
    """
    st = np.ascontiguousarray(starts, dtype=np.int64)
    return _decode_spans(symbols, symbol_lengths, compressed, st, st + np.asarray(lengths, dtype=np.int64), n_symbols, utf8)


def fsst_decode_gpu(symbols, symbol_lengths, compressed, in_offsets, n_symbols=None, *, threads_per_block=256):
    """Decode FSST-compressed strings on the GPU (one thread per string, two passes).

    Same arguments and result as :func:`fsst_decode`; ``compressed`` and
    ``in_offsets`` may be device arrays (numba, CuPy, or anything with
    ``__cuda_array_interface__``); the small symbol table may be host or
    device.  Returns device arrays (CuPy if any input was CuPy).
    """
    use_cp = _device.wants_cupy(symbols, symbol_lengths, compressed, in_offsets)
    sym, sl, nsym = _prepare_table(_device.to_host(symbols), _device.to_host(symbol_lengths), n_symbols)
    d_sym = _device.to_device(sym)
    d_sl = _device.to_device(sl)
    d_comp = _device.to_device(compressed, np.uint8)
    d_offs = _device.to_device(in_offsets)
    if np.dtype(d_offs.dtype).kind not in "iu":
        msg = "in_offsets must be integers"
        raise TypeError(msg)
    n = d_offs.shape[0] - 1
    if n < 0:
        msg = "in_offsets must hold n + 1 offsets"
        raise ValueError(msg)
    d_lens = _device.device_empty(n, np.int64)
    if n:
        err = new_error_flag()
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        _lengths_kernel.get()[blocks, tpb](d_sl, np.int64(nsym), d_comp, d_offs, d_lens, err)
        raise_if_flagged(err, "fsst_decode_gpu")
    d_out_offsets, total = _device.exclusive_scan(d_lens)
    d_out = _device.device_empty(total, np.uint8)
    if n and total:
        blocks, tpb = _device.launch_dims(n, threads_per_block)
        _decode_kernel.get()[blocks, tpb](d_sym, d_sl, d_comp, d_offs, d_out_offsets, d_out)
    return _device.as_output(d_out_offsets, use_cp), _device.as_output(d_out, use_cp)


def _prepare_tables(symbols2d, lengths2d, n_symbols):
    """Validate per-segment tables: (uint64[S, 256], uint8[S, 256], int64[S])."""
    symbols2d = np.asarray(symbols2d)
    lengths2d = np.asarray(lengths2d)
    nsym = np.asarray(n_symbols, np.int64).reshape(-1)
    nseg = nsym.shape[0]
    if symbols2d.ndim != 2 or lengths2d.ndim != 2 or symbols2d.shape[0] != nseg or lengths2d.shape[0] != nseg:
        msg = "symbols and symbol_lengths must be [segments, >= n_symbols] arrays"
        raise ValueError(msg)
    sym = np.zeros((nseg, 256), np.uint64)
    sl = np.zeros((nseg, 256), np.uint8)
    for k in range(nseg):
        sym[k], sl[k], nsym[k] = _prepare_table(symbols2d[k], lengths2d[k], int(nsym[k]))
    return sym, sl, nsym


def _segment_ranges(segments):
    """(lo, hi) string ranges of the segments: ``bounds[S + 1]`` (contiguous segments)
    or ``[S, 2]`` rows of ``[lo, hi)`` (segments may leave strings between them out)."""
    seg = np.asarray(segments, np.int64)
    if seg.ndim == 2 and seg.shape[1] == 2:
        lo, hi = seg[:, 0].copy(), seg[:, 1].copy()
    elif seg.ndim == 1 and seg.size >= 1:
        lo, hi = seg[:-1].copy(), seg[1:].copy()
    else:
        msg = "segments must be bounds[S + 1] or [S, 2] ranges"
        raise ValueError(msg)
    if np.any(hi < lo) or np.any(lo < 0):
        msg = "segment ranges must be non-negative and non-decreasing"
        raise ValueError(msg)
    return lo, hi


def _block_map(segments, tpb):
    """Per CUDA block: (segment, first string, end string) so that no block spans segments."""
    lo, hi = _segment_ranges(segments)
    counts = hi - lo
    nblk = -(-counts // tpb)
    seg = np.repeat(np.arange(counts.size, dtype=np.int64), nblk)
    first_blk = np.zeros(counts.size + 1, np.int64)
    np.cumsum(nblk, out=first_blk[1:])
    k = np.arange(seg.size, dtype=np.int64) - first_blk[seg]
    first = lo[seg] + k * tpb
    end = np.minimum(first + tpb, hi[seg])
    return seg, first, end


def fsst_decode_segments(symbols2d, lengths2d, n_symbols, compressed, starts, lengths, segments):
    """Decode the strings of several segments, each with its own symbol table (CPU).

    String ``i`` is ``compressed[starts[i]:starts[i] + lengths[i]]``; ``segments`` is
    either ``bounds[S + 1]`` (segment ``s`` holds strings ``bounds[s] .. bounds[s + 1]``)
    or ``[S, 2]`` rows ``[lo, hi)``; segment ``s`` uses table ``s`` (``symbols2d[s]``,
    ``lengths2d[s]``, ``n_symbols[s]``).  Returns the decoded strings of all segments, in
    order: ``(out_offsets int64, out_bytes uint8)``.
    """
    sym, sl, nsym = _prepare_tables(symbols2d, lengths2d, n_symbols)
    seg_lo, seg_hi = _segment_ranges(segments)
    st = np.asarray(starts, np.int64)
    ln = np.asarray(lengths, np.int64)
    offs_parts, data_parts = [np.zeros(1, np.int64)], []
    base = 0
    for k in range(nsym.size):
        lo, hi = int(seg_lo[k]), int(seg_hi[k])
        o, d = fsst_decode_spans(sym[k], sl[k], compressed, st[lo:hi], ln[lo:hi], n_symbols=int(nsym[k]))
        offs_parts.append(o[1:] + base)
        data_parts.append(d)
        base += int(o[-1])
    out = np.concatenate(data_parts) if data_parts else np.zeros(0, np.uint8)
    return np.concatenate(offs_parts), out


def pack_tables(symbols2d, lengths2d, n_symbols):
    """Per-segment tables as the segmented kernels read them: ``(tables uint8[S *
    TABLE_BYTES], table_pos int64[S], n_symbols int64[S])``, table ``s`` at byte
    ``table_pos[s]`` (256 little-endian u64 symbols, then 256 u8 lengths), each validated
    as :func:`fsst_decode` validates its table."""
    sym, sl, nsym = _prepare_tables(symbols2d, lengths2d, n_symbols)
    tables = np.concatenate([sym.view(np.uint8).reshape(-1, 2048), sl.reshape(-1, 256)], axis=1).reshape(-1)
    return tables, TABLE_BYTES * np.arange(nsym.size, dtype=np.int64), nsym


def fsst_lengths_segments_gpu(tables, table_pos, n_symbols, compressed, starts, lengths, segments, out_lens, *, threads_per_block=128):
    """Decoded lengths of the strings of every segment (pass 1), one launch for all
    segments: ``out_lens[i]`` is written for every string ``i`` of a segment (in place;
    strings outside the segments are left alone).

    Strings are given as spans, segments as in :func:`fsst_decode_segments`; segment ``s``
    uses the table at byte ``table_pos[s]`` of ``tables`` (:func:`pack_tables`' layout;
    ``tables`` may be the array the strings are in) with ``n_symbols[s]`` symbols (codes
    past them are corrupt).  The tables are trusted to hold symbol lengths in 0..8 (as
    :func:`pack_tables` checks); one outside ``tables`` raises.  ``segments``,
    ``table_pos`` and ``n_symbols`` are host arrays, the rest host or device arrays.
    """
    seg, first, end = _block_map(segments, threads_per_block)
    if seg.size:
        err = new_error_flag()
        _seg_lengths_kernel.get()[seg.size, threads_per_block](
            _device.to_device(tables, np.uint8), _device.to_device(np.asarray(table_pos, np.int64)),
            _device.to_device(np.asarray(n_symbols, np.int64)), _device.to_device(compressed, np.uint8),
            _device.to_device(starts), _device.to_device(lengths),
            _device.to_device(seg), _device.to_device(first), _device.to_device(end), _device.to_device(out_lens), err,
        )
        raise_if_flagged(err, "fsst_lengths_segments_gpu")
    return out_lens


def fsst_decode_segments_gpu(tables, table_pos, compressed, starts, lengths, segments, out_offsets, out_bytes, *, threads_per_block=128):
    """Write the decoded strings of every segment (pass 2): string ``i`` goes to
    ``out_bytes[out_offsets[i]:out_offsets[i + 1]]``, where ``out_offsets`` is an exclusive
    scan of lengths that include pass 1's (which checked the codes).  Tables as in
    :func:`fsst_lengths_segments_gpu`.  One launch for all segments (in place)."""
    seg, first, end = _block_map(segments, threads_per_block)
    if seg.size:
        err = new_error_flag()
        _seg_decode_kernel.get()[seg.size, threads_per_block](
            _device.to_device(tables, np.uint8), _device.to_device(np.asarray(table_pos, np.int64)),
            _device.to_device(compressed, np.uint8), _device.to_device(starts), _device.to_device(lengths),
            _device.to_device(seg), _device.to_device(first), _device.to_device(end),
            _device.to_device(out_offsets), _device.to_device(out_bytes, np.uint8), err,
        )
        raise_if_flagged(err, "fsst_decode_segments_gpu")
    return out_bytes
