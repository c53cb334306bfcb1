# SPDX-License-Identifier: Apache-2.0
"""FSST: strings compressed with a per-page static symbol table.

``symbol_table`` (2312 bytes): u64 LE header (bits 63..32 magic "FSST", bit 24 encoder
switch, bits 23..16 suffix_lim, 15..8 terminator, 7..0 n_symbols); then n_symbols u64
symbols (bytes in order, zero padded); then n_symbols one-byte lengths at 8 + 8*n_symbols.
The compressed strings are a Variable block (mini-block chunks or full-zip values).  Code
c < 255 emits symbol c, code 255 escapes one literal byte.  With the encoder switch off the
strings are stored uncompressed.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.cpu import native
from lance_gpu.file.blocks import VariableWidthBlock
from lance_gpu.file.encodings import dispatch, variable
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext

_MAGIC = 0x46535354
#: :func:`symbol_tables` of fewer tables parses them one by one
_FEW_TABLES = 4
_FSST_ERRORS = {-1: "a string ends with an escape byte", -2: "a code beyond the symbol table", -3: "offsets outside the data"}


class SymbolTable:
    __slots__ = ("symbols", "lengths", "n_symbols", "compressed")

    def __init__(self, raw: bytes, ctx: DecodeContext) -> None:
        if len(raw) < 8:
            raise ctx.corrupt("FSST symbol table shorter than its header")
        header = int.from_bytes(raw[:8], "little")
        if header >> 32 != _MAGIC:
            raise ctx.corrupt("FSST symbol table has a bad magic number")
        self.compressed = bool((header >> 24) & 1)
        n = header & 0xFF
        if len(raw) < 8 + 9 * n:
            raise ctx.corrupt("FSST symbol table truncated")
        symbols = np.zeros(256, np.uint64)
        lengths = np.zeros(256, np.uint8)
        symbols[:n] = np.frombuffer(raw, "<u8", count=n, offset=8)
        lengths[:n] = np.frombuffer(raw, np.uint8, count=n, offset=8 + 8 * n)
        if n and (lengths[:n].min() < 1 or lengths[:n].max() > 8):
            raise ctx.corrupt("FSST symbol lengths outside 1..8")
        self.symbols = symbols
        self.lengths = lengths
        self.n_symbols = n


def symbol_tables(raws: list[bytes], ctx: DecodeContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Many ``symbol_table`` protobuf fields parsed together (NumPy over all their bytes, no
    Python per table): ``(symbols uint64[k, 256], lengths uint8[k, 256], n_symbols int64[k],
    compressed bool[k])``, row ``j`` as :class:`SymbolTable` gives for ``raws[j]`` (entries
    past ``n_symbols`` zero).  A bad table raises :class:`SymbolTable`'s error for the first."""
    k = len(raws)
    if 0 < k < _FEW_TABLES:  # a few: parsed one by one (the NumPy path's fixed cost is higher)
        symbols = np.empty((k, 256), np.uint64)
        lengths = np.empty((k, 256), np.uint8)
        n = np.empty(k, np.int64)
        compressed = np.empty(k, np.bool_)
        for j, raw in enumerate(raws):
            t = SymbolTable(raw, ctx)
            symbols[j], lengths[j], n[j], compressed[j] = t.symbols, t.lengths, t.n_symbols, t.compressed
        return symbols, lengths, n, compressed
    size = np.fromiter(map(len, raws), np.int64, k)
    if not k or int(size.min()) < 8:
        _refuse(raws, ctx)
        if not k:
            return np.zeros((0, 256), np.uint64), np.zeros((0, 256), np.uint8), np.zeros(0, np.int64), np.zeros(0, np.bool_)
    start = np.zeros(k, np.int64)
    np.cumsum(size[:-1], out=start[1:])
    # padded so that every table's 256 symbol and length slots can be gathered
    blob = np.frombuffer(b"".join(raws) + bytes(9 * 256 + 8), np.uint8)
    header = np.ascontiguousarray(blob[start[:, None] + np.arange(8)]).view("<u8").reshape(k)
    n = (header & np.uint64(0xFF)).astype(np.int64)
    compressed = ((header >> np.uint64(24)) & np.uint64(1)).astype(np.bool_)
    slot = np.arange(256)
    held = slot[None, :] < n[:, None]
    at = start[:, None] + 8 + 8 * slot[None, :]
    symbols = np.ascontiguousarray(blob[at[:, :, None] + np.arange(8)]).view("<u8").reshape(k, 256)
    lengths = blob[start[:, None] + 8 + 8 * n[:, None] + slot[None, :]]
    symbols = np.where(held, symbols, np.uint64(0))
    lengths = np.where(held, lengths, np.uint8(0)).astype(np.uint8)
    bad = ((header >> np.uint64(32)) != _MAGIC) | (size < 8 + 9 * n) | np.any(held & ((lengths < 1) | (lengths > 8)), axis=1)
    if bad.any():
        _refuse(raws, ctx)
    return symbols, lengths, n, compressed


def _refuse(raws: list[bytes], ctx: DecodeContext) -> None:
    """Raise :class:`SymbolTable`'s error for the first bad table of ``raws`` (none: return)."""
    for raw in raws:
        SymbolTable(raw, ctx)


def decompress(table: SymbolTable, compressed: VariableWidthBlock, ctx: DecodeContext) -> VariableWidthBlock:
    if not table.compressed:
        return compressed
    from cuda_kernels.errors import CorruptInputError
    from cuda_kernels.fsst import fsst_decode

    try:
        offsets, data, utf8_valid = fsst_decode(
            table.symbols, table.lengths, compressed.data, compressed.offsets, n_symbols=table.n_symbols, utf8=True
        )
    except CorruptInputError as exc:
        raise ctx.corrupt(f"FSST data ({exc})") from exc
    return VariableWidthBlock(offsets, data, True, utf8_valid)


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext, select: np.ndarray | None = None) -> VariableWidthBlock:
    table = SymbolTable(enc.symbol_table, ctx)
    inner = enc.values
    if inner.WhichOneof("compression") != "variable":
        raise ctx.unsupported("FSST over anything but Variable")
    cb = bufs[0]
    if select is None and table.compressed:
        if inner.variable.HasField("values"):
            raise ctx.unsupported("Variable with per-chunk value compression")
        bits = variable.offset_bits(inner.variable, ctx)
        status, chunk, offsets, data, utf8_valid = native.fsst_decode_chunks(
            cb.data, cb.starts, cb.sizes, cb.counts, bits // 8, table.symbols, table.lengths, table.n_symbols
        )
        if status == native.FSST_BAD_OFFSETS:
            raise ctx.corrupt(f"variable-width chunk offsets out of range (chunk {chunk})")
        if status != 0:
            raise ctx.corrupt(f"FSST data in chunk {chunk} is malformed ({_FSST_ERRORS.get(status, 'bad input')})")
        return VariableWidthBlock(offsets, data, True, utf8_valid)
    vstart, vlen = variable.value_ranges(inner.variable, cb, ctx, select)
    return decompress_spans(table, cb.data, vstart, vlen, ctx)


def decompress_spans(table: SymbolTable, data: np.ndarray, vstart: np.ndarray, vlen: np.ndarray, ctx: DecodeContext) -> VariableWidthBlock:
    """The values ``data[vstart[i] : vstart[i] + vlen[i]]``, decompressed straight from
    where they lie (no gathering copy first); copied out as they are without a table."""
    if not table.compressed:
        offsets, out, utf8_valid = native.ranges_to_variable(data, vstart, vlen)
        return VariableWidthBlock(offsets, out, True, utf8_valid)
    from cuda_kernels.errors import CorruptInputError
    from cuda_kernels.fsst import fsst_decode_spans

    try:
        offsets, out, utf8_valid = fsst_decode_spans(
            table.symbols, table.lengths, data, vstart, vlen, n_symbols=table.n_symbols, utf8=True
        )
    except CorruptInputError as exc:
        raise ctx.corrupt(f"FSST data ({exc})") from exc
    return VariableWidthBlock(offsets, out, True, utf8_valid)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> VariableWidthBlock:
    table = SymbolTable(enc.symbol_table, ctx)
    comp = dispatch.decode_block(enc.values, buf, num_values, ctx)
    return decompress(table, comp, ctx)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Encoder

#: Size of the serialized symbol table (header, 256 symbols, 256 lengths).
SYMBOL_TABLE_SIZE = 8 + 256 * 8 + 256


def symbol_table_bytes(symbols: np.ndarray, lengths: np.ndarray) -> bytes:
    """Serialize a symbol table (encoder switch on), zero-filled to 2312 bytes."""
    n = int(symbols.size)
    header = (_MAGIC << 32) | (1 << 24) | n
    out = bytearray(SYMBOL_TABLE_SIZE)
    out[0:8] = header.to_bytes(8, "little")
    out[8 : 8 + 8 * n] = np.asarray(symbols, "<u8").tobytes()
    out[8 + 8 * n : 8 + 9 * n] = np.asarray(lengths, np.uint8).tobytes()
    return bytes(out)


def compress_strings(offsets: np.ndarray, data: np.ndarray) -> tuple[bytes, np.ndarray, np.ndarray]:
    """FSST-compress strings: ``(symbol table bytes, compressed offsets, compressed bytes)``.

    ``offsets`` (int64, from 0) index into ``data`` (uint8).
    """
    from lance_gpu.file.encodings.fsst import _encoder as _fsst

    offsets = np.ascontiguousarray(offsets, np.int64)
    data = np.ascontiguousarray(data, np.uint8)
    vals, lens = _fsst.build_table(data, offsets)
    comp_off, comp = _fsst.compress_fast(data, offsets, _fsst._pad(vals), _fsst._pad(lens), vals.size)
    return symbol_table_bytes(vals, lens), comp_off, comp
