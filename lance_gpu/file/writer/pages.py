# SPDX-License-Identifier: Apache-2.0
"""Encoding one leaf column's page (file versions 2.1 and 2.2), choosing like pylance 14.

Layouts, first match wins:

1. **ConstantLayout**, no buffers, for a page whose value slots are all null and whose only
   layer is a nullable item.
2. **ConstantLayout** with raw u16 rep / def buffers for a page without any value slot
   (every row a null or empty list).
3. **ConstantLayout** ``inline_value`` (2.2 only) for a page without nulls or lists whose
   values are all equal and at most 32 bytes wide (bools, ints, floats, FSB ...).
4. **MiniBlockLayout** with a page-level dictionary: Arrow dictionary columns always;
   otherwise strings / binary, 128-bit values and (2.2) 64-bit values when the page has at
   least 100 values, at most 2048 distinct ones (and at most half the values), and the
   estimated size (items plus 4-byte indices) is under 80% of the plain size (values plus
   offsets for strings).  pylance estimates the distinct count with a sketch and lowers its
   cap on big pages (about 300-600 distinct values at 1M rows), so near the cap the two
   writers can disagree.  Items are bit-packed when that pays (InlineBitpacking for up to
   1024 items, else OutOfLineBitpacking), else ``Flat`` / block ``Variable`` wrapped in
   ``General{LZ4}`` in 2.2; the u32 indices are the chunk values (see 5).
5. **MiniBlockLayout** for narrow values -- fixed width under 256 bytes, or strings whose
   longest value is under 256 bytes.  Values: ``Rle{Flat{T}, Flat{8}}`` for 8/16/32/64-bit
   values with fewer runs than half the values; else ``InlineBitpacking{T}`` when its
   FastLanes blocks are smaller than the plain values (the bit pattern is packed, so floats,
   dates and timestamps qualify like ints; negative ints never do); else ``Flat{bits}``
   (bools 1 bit, FSB / decimals 128+); fixed-size lists one ``FixedSizeList{dim,
   has_validity}`` per layer around ``Flat{item bits}`` (with null items: a validity chunk
   buffer per such layer before the values, rows per chunk counting its bytes); strings
   ``Fsst{Variable}`` when the page has 32 KiB of strings, a value of 5+ bytes and FSST
   makes it smaller, else ``Variable{Flat32|64}`` (binary columns never get FSST).  Where
   ``lance-encoding:compression`` names ``zstd`` or ``lz4``, strings and binaries of a page
   holding 32 KiB of them skip FSST and each chunk's buffers are compressed whole:
   ``General{scheme[, level]}(Variable{Flat32|64})``, a chunk buffer stored as ``u64 LE
   uncompressed size | zstd frame`` (``u32 LE size | LZ4 block``), the chunks cut as for
   plain ``Variable`` (pylance 14's layout; the level is ``lance-encoding:compression-level``).
6. **FullZipLayout** for the rest (embeddings, long strings): values zipped with their
   control words.  Variable-width values (strings and binaries alike) whose longest value
   exceeds 32 KiB -- or any, when ``lance-encoding:compression`` names a general scheme
   (``zstd``, ``lz4``, ...) -- on a page holding at least 32 KiB of them are compressed one
   by one: ``General{ZSTD, level 0}(Variable{Flat32|64})``, each valid value (empty ones
   too) stored as ``u32|u64 length | u64 LE uncompressed size | zstd frame``; pylance 14
   does this at 2.1 and 2.2 and names ZSTD even where ``lz4`` was asked for.  Otherwise
   they are FSST-compressed by the same rule as in 5.

Mini-block definition / repetition levels are ``OutOfLineBitpacking{16, Flat{W}}`` per chunk
(W = bit width of the page's largest level); list pages carry the repetition index
(``repetition_index_depth`` 1), byte for byte as pylance computes it.  Field metadata
``lance-encoding:compression``: ``none`` turns off RLE, bitpacking, dictionaries, FSST and
constants, ``fsst`` forces FSST; ``lance-encoding:structural-encoding`` (``miniblock`` /
``fullzip``) forces the layout; ``lance-encoding:dict-size-ratio`` sets the 0.8 above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard, cast

import numpy as np
import pyarrow as pa

from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.file.encodings import _native, bitpacking, flat, fsst, general, rle, variable
from lance_gpu.file.encodings.base import MiniBlockChunks
from lance_gpu.file.encodings.general import ZSTD
from lance_gpu.file.encodings.variable import _native as variable_native
from lance_gpu.file.page import NULLABLE_ITEM
from lance_gpu.file.v2_1.fullzip import _ctrl_bytes
from lance_gpu.file.writer.shred import (
    TEXT_IDS,
    VARIABLE_IDS,
    LeafColumn,
    fixed_width_bytes,
    fsl_layers,
    storage_type,
    variable_parts,
)

__all__ = ["EncodedPage", "LevelOverflow", "PageBackend", "encode_leaf", "COMPRESSION_KEY", "STRUCTURAL_KEY"]

COMPRESSION_KEY = "lance-encoding:compression"
COMPRESSION_LEVEL_KEY = "lance-encoding:compression-level"
#: The general schemes that wrap mini-block chunks (``lance-encoding:compression`` values).
GENERAL_SCHEMES = {"zstd": general.ZSTD, "lz4": general.LZ4}
#: Mini-block strings are chunk-compressed with a general scheme on pages of at least this many value bytes.
GENERAL_MINIBLOCK_MIN_BYTES = 32 * 1024
STRUCTURAL_KEY = "lance-encoding:structural-encoding"
DICT_SIZE_RATIO_KEY = "lance-encoding:dict-size-ratio"

_FIXED_SIZE_LIST = pa.list_(pa.int8(), 1).id
#: Longest value (bytes) a mini-block page holds; wider values go full-zip.
MINIBLOCK_MAX_VALUE_BYTES = 256
#: Dictionary rules (see the module docstring).
DICT_MIN_VALUES = 100
DICT_MAX_ITEMS = 2048
DICT_SIZE_RATIO = 0.8
#: Values sampled to rule out high-cardinality pages before the exact count.
DICT_SAMPLE = 8192
#: FSST is tried when the longest value has at least this many bytes ...
FSST_MIN_MAX_LEN = 5
#: ... and the page holds at least this many bytes of strings.
FSST_MIN_BYTES = 32 * 1024
#: RLE is used when there are fewer runs than this fraction of the values.
RLE_THRESHOLD = 0.5
#: Largest constant stored inline in a ConstantLayout.
MAX_INLINE_CONSTANT = 32
#: Full-zip values are zstd-compressed one by one when the longest is longer than this ...
PER_VALUE_MIN_MAX_LEN = 32 * 1024
#: ... and the page holds at least this many bytes of values.
PER_VALUE_MIN_BYTES = 32 * 1024
_PAD_HEADER = 0xFE


class LevelOverflow(ValueError):
    """A mini-block chunk would hold more than 65535 rep / def levels (long runs of null or
    empty lists between two values): the rows must be split over more pages."""


@dataclass(slots=True)
class EncodedPage:
    """One page of one column: its ``PageLayout`` and its buffers (uint8 arrays; the GPU
    encoder's may be :class:`~lance_gpu.write.device_pages.StagedBuffer` s still being copied
    to the host, which the file writer waits for)."""

    layout: pb.PageLayout
    buffers: list
    num_rows: int


@dataclass(slots=True)
class _Values:
    """The visible values of a leaf in the form the encoders want."""

    variable: bool
    data: np.ndarray  # fixed: packed value bytes; variable: the bytes
    bits: int = 0  # fixed: bits per value (a whole fixed-size list for FSLs, validity excluded)
    offsets: np.ndarray | None = None  # variable: int64 offsets from 0
    offset_bits: int = 32
    num_values: int = 0
    text: bool = False  # variable: strings (FSST applies), not binaries
    #: fixed-size lists: (dimension, item validity or None) per layer, outer first
    fsl: tuple[tuple[int, np.ndarray | None], ...] = ()

    @property
    def var_offsets(self) -> np.ndarray:
        """``offsets`` of variable-width values (set exactly when ``variable``)."""
        assert self.offsets is not None, "fixed-width values have no offsets"
        return self.offsets

    @property
    def fsl_dim(self) -> int:
        """Items per value of a fixed-size list (all layers), 0 for anything else."""
        dim = 0
        for d, _v in self.fsl:
            dim = (dim or 1) * d
        return dim

    @property
    def fsl_has_validity(self) -> bool:
        return any(v is not None for _d, v in self.fsl)

    @property
    def max_len(self) -> int:
        if self.variable:
            return int(np.diff(self.var_offsets).max()) if self.num_values else 0
        return self.bits // 8

    def item_encoding(self) -> pb.CompressiveEncoding:
        """Plain encoding of one value: Flat, Variable, or for fixed-size lists one
        ``FixedSizeList{dim, has_validity}`` per layer around ``Flat{item bits}``."""
        if self.variable:
            return variable.variable_encoding(self.offset_bits)
        if self.fsl:
            enc = pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=self.bits // self.fsl_dim))
            return _fsl_encoding(self.fsl, enc)
        return pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=self.bits))


def _fsl_encoding(layers, inner: pb.CompressiveEncoding) -> pb.CompressiveEncoding:
    for dim, valid in reversed(layers):
        inner = pb.CompressiveEncoding(
            fixed_size_list=pb.FixedSizeList(items_per_value=dim, values=inner, has_validity=valid is not None)
        )
    return inner


def _values_of(arr: pa.Array) -> _Values:
    t = storage_type(arr.type)
    tid = t.id
    if tid in VARIABLE_IDS:
        offsets, data, obits = variable_parts(arr)
        return _Values(True, data, offsets=offsets, offset_bits=obits, num_values=len(arr), text=tid in TEXT_IDS)
    data, bits = fixed_width_bytes(arr)
    layers = tuple(fsl_layers(arr)) if tid == _FIXED_SIZE_LIST else ()
    return _Values(False, data, bits=bits, num_values=len(arr), fsl=layers)


def _meta(leaf: LeafColumn, key: str) -> str | None:
    raw = leaf.field.metadata.get(key)
    if raw is None:
        return None
    return (raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)).strip().lower()


def _layer_values(layers: Sequence[int]) -> list[pb.RepDefLayer]:
    """``layers`` (:mod:`lance_gpu.file.page`'s numbers of the proto's ``RepDefLayer``
    values) as that enum, which the generated stubs type as its own ``int`` subclass."""
    return cast(list[pb.RepDefLayer], list(layers))


def _layers(leaf: LeafColumn) -> list[pb.RepDefLayer]:
    return _layer_values(leaf.layers)


# --------------------------------------------------------------------------------------------
# entry point


def encode_leaf(leaf: LeafColumn, minor: int) -> EncodedPage:
    """Encode one leaf page for file version 2.``minor`` (1 or 2)."""
    if leaf.field.metadata:
        compression = _meta(leaf, COMPRESSION_KEY)
        structural = _meta(leaf, STRUCTURAL_KEY)
    else:
        compression = structural = None
    n = leaf.num_values
    nulls = leaf.null_values
    if n == 0:
        return _complex_all_null(leaf)
    if nulls is not None and bool(nulls.all()) and leaf.rep is None and leaf.layers == (NULLABLE_ITEM,):
        return _simple_all_null(leaf)
    if leaf.dictionary is not None:
        return _dictionary_page(leaf, minor, _values_of(leaf.dictionary), _index_values(leaf.values))
    vals = _values_of(leaf.values)
    if minor >= 2 and leaf.rep is None and leaf.def_ is None and compression != "none" and structural is None:
        page = _maybe_constant(leaf, vals)
        if page is not None:
            return page
    if compression != "none" and structural != "fullzip":
        plan = _dictionary_plan(leaf, vals, minor)
        if plan is not None:
            items, indices = plan
            return _dictionary_page(leaf, minor, items, indices)
    narrow = vals.max_len < MINIBLOCK_MAX_VALUE_BYTES and not _fsl_items_all_null(vals)
    if structural == "miniblock" or (narrow and structural != "fullzip"):
        if vals.variable and wants_general_chunks(compression, vals.data.size):
            level = _meta(leaf, COMPRESSION_LEVEL_KEY)
            chunks = variable.variable_chunks(vals.var_offsets, vals.data, vals.offset_bits)
            return _miniblock(leaf, minor, general_chunks(chunks, compression, None if level is None else int(level)))
        return _miniblock(leaf, minor, _value_chunks(vals, compression))
    return _fullzip(leaf, vals, compression)


# --------------------------------------------------------------------------------------------
# constant layouts


def _simple_all_null(leaf: LeafColumn) -> EncodedPage:
    layout = pb.PageLayout(constant_layout=pb.ConstantLayout(layers=_layer_values([NULLABLE_ITEM])))
    return EncodedPage(layout, [], leaf.num_rows)


def _complex_all_null(leaf: LeafColumn) -> EncodedPage:
    """No value slots at all (every row is a null or empty list): raw u16 levels."""
    if leaf.rep is None:
        raise AssertionError("a page without value slots must have repetition levels")
    rep = leaf.rep.astype("<u2").view(np.uint8)
    def_ = leaf.def_.astype("<u2").view(np.uint8) if leaf.def_ is not None else np.zeros(0, np.uint8)
    cl = pb.ConstantLayout(
        layers=_layers(leaf),
        num_rep_values=leaf.num_levels,
        num_def_values=leaf.num_levels if leaf.def_ is not None else 0,
    )
    return EncodedPage(pb.PageLayout(constant_layout=cl), [rep, def_], leaf.num_rows)


def _maybe_constant(leaf: LeafColumn, vals: _Values) -> EncodedPage | None:
    """2.2: a page of equal fixed-width values (no nulls, no lists) as an inline constant."""
    if vals.variable or vals.fsl_dim or vals.num_values == 0:
        return None
    if vals.bits == 1:
        bits = np.unpackbits(vals.data, bitorder="little")[: vals.num_values]
        if bits.min() != bits.max():
            return None
        value = bytes([int(bits[0])])
    else:
        width = vals.bits // 8
        if width > MAX_INLINE_CONSTANT or vals.bits % 8:
            return None
        data = vals.data[: vals.num_values * width]
        if not _native.all_rows_equal(data, width):
            return None
        value = data[:width].tobytes()
    cl = pb.ConstantLayout(layers=_layers(leaf), inline_value=value)
    return EncodedPage(pb.PageLayout(constant_layout=cl), [], leaf.num_rows)


# --------------------------------------------------------------------------------------------
# value compression for mini-block pages


_UINT: dict[int, np.dtype] = {8: np.dtype("<u1"), 16: np.dtype("<u2"), 32: np.dtype("<u4"), 64: np.dtype("<u8")}


def _uint_view(data: np.ndarray, bits: int) -> np.ndarray:
    """``data`` (bytes) as ``bits``-bit unsigned words, copied first where its address is
    not a multiple of the word size (``flags.aligned`` of the view: no ctypes object made)."""
    words = data.view(_UINT[bits])
    return words if words.flags.aligned else data.copy().view(_UINT[bits])


def _wants_fsst(vals: _Values, compression: str | None) -> bool:
    """pylance's rule: forced by ``compression=fsst``; otherwise strings only (never binary
    columns) whose longest value has 5+ bytes on a page of 32 KiB of them."""
    if compression == "fsst":
        return True
    if compression == "none" or not vals.text:
        return False
    return vals.max_len >= FSST_MIN_MAX_LEN and vals.data.size >= FSST_MIN_BYTES


def _fsst_values(vals: _Values, compression: str | None) -> tuple[bytes, _Values] | None:
    """FSST-compressed values, or None when compression does not pay (unless forced)."""
    table, co, cd = fsst.compress_strings(vals.var_offsets, vals.data)
    if compression != "fsst" and cd.size + len(table) >= vals.data.size:
        return None
    return table, _Values(True, cd, offsets=co, offset_bits=vals.offset_bits, num_values=vals.num_values)


def _decodable(raw: np.ndarray, comp: np.ndarray) -> bool:
    """pylance decodes FSST into 8 bytes per compressed byte with 8-byte stores: every
    group of strings decoded at once must leave that slack."""
    return bool(np.all((raw == 0) | (raw + 8 <= 8 * comp)))


def _fsst_encoding(table: bytes, inner: pb.CompressiveEncoding) -> pb.CompressiveEncoding:
    return pb.CompressiveEncoding(fsst=pb.Fsst(symbol_table=table, values=inner))


def wants_general_chunks(compression: str | None, value_bytes: int) -> TypeGuard[str]:
    """Whether mini-block strings / binaries of ``value_bytes`` are chunk-compressed with a
    general scheme (``compression`` of ``zstd`` / ``lz4`` and 32 KiB of values: pylance's rule)."""
    return compression in GENERAL_SCHEMES and value_bytes >= GENERAL_MINIBLOCK_MIN_BYTES


def general_chunks(chunks: MiniBlockChunks, compression: str, level: int | None = None) -> MiniBlockChunks:
    """``chunks`` with every chunk's part of every buffer compressed on its own with the
    general scheme ``compression`` (framing in :mod:`lance_gpu.file.encodings.general`); the
    value counts stay, the encoding becomes ``General{scheme[, level]}(inner)``."""
    scheme = GENERAL_SCHEMES[compression]
    if isinstance(chunks, variable.VariableChunks):
        chunks.materialize()  # serialise the chunks the compressor reads
    buffers = []
    for data, sizes in chunks.buffers:
        starts = np.zeros(sizes.size, np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        raw = np.ascontiguousarray(data).view(np.uint8)
        parts = [general.compress(scheme, raw[a : a + z], level) for a, z in zip(starts.tolist(), sizes.tolist(), strict=True)]
        buffers.append((np.frombuffer(b"".join(parts), np.uint8), np.array([len(x) for x in parts], np.int64)))
    buffer_compression = pb.BufferCompression(scheme=scheme) if level is None else pb.BufferCompression(scheme=scheme, level=level)
    encoding = pb.CompressiveEncoding(general=pb.General(compression=buffer_compression, values=chunks.encoding))
    return MiniBlockChunks(chunks.counts, buffers, encoding)


def _value_chunks(vals: _Values, compression: str | None) -> MiniBlockChunks:
    if vals.variable:
        if _wants_fsst(vals, compression):
            got = _fsst_values(vals, compression)
            if got is not None:
                table, comp = got
                chunks = variable.variable_chunks(comp.var_offsets, comp.data, comp.offset_bits)
                bounds = np.concatenate([[0], np.cumsum(chunks.counts)])
                if _decodable(np.diff(vals.var_offsets[bounds]), np.diff(comp.var_offsets[bounds])):
                    chunks.encoding = _fsst_encoding(table, chunks.encoding)
                    return chunks
        return variable.variable_chunks(vals.var_offsets, vals.data, vals.offset_bits)
    if vals.fsl:
        return _fsl_chunks(vals)
    if vals.bits in (8, 16, 32, 64) and compression != "none":
        words = _uint_view(vals.data, vals.bits)
        if rle.run_count(words) < RLE_THRESHOLD * vals.num_values:
            return rle.encode_miniblock(words)
        widths = bitpacking.block_bit_widths(words)
        if bitpacking.inline_size(widths, vals.bits) < vals.data.size:
            return bitpacking.encode_miniblock(words, widths)
    return flat.encode_miniblock(vals.data, vals.bits, vals.num_values)


def _fsl_items_all_null(vals: _Values) -> bool:
    """Fixed-size lists whose inner-most items are all null: pylance has no value bytes to
    measure and always writes them full-zip."""
    return bool(vals.fsl) and vals.fsl[-1][1] is not None and not vals.fsl[-1][1].any()


def _fsl_rows_per_chunk(bytes_per_word: int, values_per_word: int) -> int:
    """pylance's rows per mini-block chunk for fixed-size lists: from 2 rows (8 when a row
    is not whole bytes; a word is then 8 rows) double while twice the estimated size stays
    below ``MAX_MINIBLOCK_BYTES`` and the count at most ``MAX_MINIBLOCK_VALUES``."""
    size, rows = 2 * bytes_per_word, (2 if values_per_word == 1 else 8)
    while 2 * size < flat.MAX_MINIBLOCK_BYTES and 2 * rows <= flat.MAX_MINIBLOCK_VALUES:
        size *= 2
        rows *= 2
    return rows


def _pack_bits_per_row(valid: np.ndarray, rows: int, width: int) -> np.ndarray:
    """Each row's ``width`` validity bits packed LSB first into ``ceil(width / 8)`` bytes
    (a ``rows x ceil(width / 8)`` array)."""
    bits = valid.reshape(rows, width)
    pad = -width % 8
    if pad:
        bits = np.concatenate([bits, np.zeros((rows, pad), np.bool_)], axis=1)
    return np.packbits(bits, axis=1, bitorder="little")


def _packbits(valid: np.ndarray) -> np.ndarray:
    return np.packbits(valid, bitorder="little")


def _fsl_chunks(vals: _Values, pack=_packbits) -> MiniBlockChunks:
    """Mini-block chunks of fixed-size lists, as pylance's value encoder cuts them: whole
    rows per chunk, one chunk buffer per layer with item validity (that chunk's items'
    bits, LSB first, in ``ceil(items / 8)`` bytes) and the value bytes last.  Rows per chunk
    count ``ceil(dims so far / 8)`` validity bytes per layer in each row's size.  ``pack``
    packs a whole layer's validity into bits (the GPU encoder's packs on the device; rows
    per chunk are then a multiple of 8, so every chunk starts on a byte)."""
    n = vals.num_values
    if vals.bits % 8 == 0:
        row_bytes, per_word = vals.bits // 8, 1
    else:
        row_bytes, per_word = vals.bits, 8  # bit-packed booleans: 8 rows per word
    valid_layers: list[tuple[int, np.ndarray]] = []
    cum = 1
    for dim, valid in vals.fsl:
        cum *= dim
        if valid is not None:
            valid_layers.append((cum, valid))
    est = sum(-(-c // 8) for c, _v in valid_layers) * per_word + row_bytes
    rows = _fsl_rows_per_chunk(est, per_word)
    nchunks = max(1, -(-n // rows))
    counts = np.full(nchunks, rows, np.int64)
    counts[-1] = n - rows * (nchunks - 1)
    buffers: list[tuple[np.ndarray, np.ndarray]] = []
    for c, valid in valid_layers:
        sizes = (counts * c + 7) // 8
        if (rows * c) % 8 == 0:  # whole chunks end on byte boundaries: one packing
            data = pack(valid)
        else:
            bounds = np.concatenate([[0], np.cumsum(counts * c)])
            data = np.concatenate([np.packbits(valid[a:b], bitorder="little") for a, b in zip(bounds[:-1], bounds[1:])])
        buffers.append((data, sizes))
    sizes = (counts * vals.bits + 7) // 8
    sizes[-1] = vals.data.size - int(sizes[:-1].sum())
    buffers.append((vals.data, sizes))
    return MiniBlockChunks(counts, buffers, vals.item_encoding())


def _fsl_zipped(leaf: LeafColumn, vals: _Values) -> tuple[_Values, pb.CompressiveEncoding]:
    """Fixed-size lists with item validity as full-zip values: per row, each validity
    layer's bits for the row (``ceil(dims so far / 8)`` bytes, outer layer first) and then
    the row's value bytes.  Items that are all null store no value bytes at all: the
    encoding's inner-most values are ``Constant{}`` (what pylance writes)."""
    n = vals.num_values
    if vals.bits % 8:
        raise UnsupportedFeatureError(f"field {leaf.field.dotted_path!r}: full-zip fixed-size lists of booleans with null items")
    parts = []
    cum = 1
    for dim, valid in vals.fsl:
        cum *= dim
        if valid is not None:
            parts.append(_pack_bits_per_row(valid, n, cum))
    *_outer, (_dim, inner_valid) = vals.fsl
    all_null = inner_valid is not None and not inner_valid.any()
    if all_null:
        enc = _fsl_encoding(vals.fsl, pb.CompressiveEncoding(constant=pb.Constant()))
    else:
        parts.append(vals.data[: n * vals.bits // 8].reshape(n, vals.bits // 8))
        enc = vals.item_encoding()
    zipped = np.ascontiguousarray(np.concatenate(parts, axis=1)).reshape(-1)
    width = zipped.size // n if n else sum(p.shape[1] for p in parts)
    return _Values(False, zipped, bits=8 * width, num_values=n), enc


# --------------------------------------------------------------------------------------------
# dictionaries


def _index_values(indices: pa.Array) -> _Values:
    """Arrow dictionary indices as unsigned fixed-width values (nulls as index 0)."""
    arr = indices.fill_null(0) if indices.null_count else indices
    data, bits = fixed_width_bytes(arr)
    return _Values(False, data, bits=bits, num_values=len(arr))


def _sample_distinct(keys: pa.Array) -> int:
    """Distinct values among up to :data:`DICT_SAMPLE` evenly spread ones (a lower bound)."""
    n = len(keys)
    if n <= DICT_SAMPLE:
        return n + 1  # no shortcut: the exact count follows anyway
    pick = np.linspace(0, n - 1, DICT_SAMPLE).astype(np.int64)
    if pa.types.is_uint64(keys.type) and keys.null_count == 0:  # 64-bit values: numpy, no Arrow round trip
        words = np.frombuffer(keys.buffers()[1], np.uint64, count=n, offset=keys.offset * 8)
        return int(np.unique(words[pick]).size)
    return len(keys.take(pa.array(pick)).unique())


def _dictionary_plan(leaf: LeafColumn, vals: _Values, minor: int) -> tuple[_Values, _Values] | None:
    """Dictionary items and u32 indices, if the page should be dictionary encoded.

    Distinct values are found by hashing the raw bytes (floats by bit pattern, so -0.0 and
    NaN payloads survive); a sample rules out high-cardinality pages cheaply first.
    """
    n = vals.num_values
    if n < DICT_MIN_VALUES:
        return None
    if not vals.variable and (vals.fsl_dim or not (vals.bits == 128 or (minor >= 2 and vals.bits == 64))):
        return None
    ratio = DICT_SIZE_RATIO
    raw_ratio = _meta(leaf, DICT_SIZE_RATIO_KEY)
    if raw_ratio is not None:
        try:
            ratio = float(raw_ratio)
        except ValueError:
            pass
    max_items = min(DICT_MAX_ITEMS, n // 2)
    if vals.variable:
        obytes = vals.offset_bits // 8
        keys = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(vals.offsets), pa.py_buffer(vals.data)])
        raw = vals.data.size + n * obytes

        def estimate(card: int) -> int:
            return card * (vals.data.size // n) + card * obytes + n * obytes
    else:
        width = vals.bits // 8
        t = pa.uint64() if vals.bits == 64 else pa.binary(16)
        keys = pa.Array.from_buffers(t, n, [None, pa.py_buffer(np.ascontiguousarray(vals.data))])
        raw = vals.data.size

        def estimate(card: int) -> int:
            return card * width + 4 * n

    low = _sample_distinct(keys)
    if low <= n and (low > max_items or estimate(low) >= ratio * raw):
        return None
    enc = keys.dictionary_encode()
    card = len(enc.dictionary)
    if card > max_items or estimate(card) >= ratio * raw:
        return None
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.uint32)
    if vals.variable:
        offsets, data, _ = variable_parts(enc.dictionary)
        items = _Values(True, data, offsets=offsets, offset_bits=vals.offset_bits, num_values=card)
    else:
        data, _bits = fixed_width_bytes(enc.dictionary)
        items = _Values(False, np.ascontiguousarray(data), bits=vals.bits, num_values=card)
    indices = _Values(False, idx.view(np.uint8), bits=32, num_values=n)
    return items, indices


def _bitpacked_block(items: _Values) -> tuple[pb.CompressiveEncoding, np.ndarray] | None:
    """Fixed-width dictionary items bit-packed as a block, when pylance would: no
    all-zero 1024-value block, some bits saved, and (one block) the packed block smaller
    than the items.  InlineBitpacking for at most 1024 items, else OutOfLineBitpacking."""
    if items.variable or items.bits not in (8, 16, 32, 64):
        return None
    words = _uint_view(items.data, items.bits)
    widths = bitpacking.block_bit_widths(words)
    top = int(widths.max())
    if (widths == 0).any() or top >= items.bits:
        return None
    if widths.size == 1 and 128 * top >= items.data.size:
        return None
    if items.num_values <= 1024:
        chunks = bitpacking.encode_miniblock(words, widths)
        return chunks.encoding, chunks.buffers[0][0]
    return bitpacking.out_of_line_encoding(items.bits, top), bitpacking.encode_out_of_line(words, top)


def _dictionary_block(items: _Values, minor: int) -> tuple[pb.CompressiveEncoding, np.ndarray]:
    packed = _bitpacked_block(items)
    if packed is not None:
        return packed
    if items.variable:
        buf = variable.encode_block(items.var_offsets, items.data, items.offset_bits)
    else:
        buf = items.data
    enc = items.item_encoding()
    if minor >= 2:
        buf = np.frombuffer(general.compress(general.LZ4, buf), np.uint8)
        enc = pb.CompressiveEncoding(
            general=pb.General(compression=pb.BufferCompression(scheme=general.LZ4), values=enc)
        )
    return enc, buf


def _dictionary_page(leaf: LeafColumn, minor: int, items: _Values, indices: _Values) -> EncodedPage:
    if items.fsl_dim:
        raise UnsupportedFeatureError(f"field {leaf.field.dotted_path!r}: dictionaries of fixed-size lists")
    chunks = _value_chunks(indices, None)
    enc, buf = _dictionary_block(items, minor)
    return _miniblock(leaf, minor, chunks, dictionary=(enc, items.num_values, buf))


# --------------------------------------------------------------------------------------------
# mini-block layout


class PageBackend:
    """Where a mini-block page's per-value work happens.  This one, the CPU encoder's, works
    on host arrays; :mod:`lance_gpu.write.device_pages` has the GPU's, whose level and
    value buffers are device arrays (it copies the finished page buffer to the host)."""

    def level_max(self, levels: np.ndarray) -> int:
        """The largest of a leaf's rep or def levels."""
        return int(levels.max())

    def level_chunks(self, levels: np.ndarray, bounds: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """OutOfLineBitpacking of each chunk's levels: (bytes, per-chunk sizes)."""
        return bitpacking.encode_level_chunks(levels, bounds, width)

    def zeros(self, nbytes: int) -> np.ndarray:
        return np.zeros(nbytes, np.uint8)

    def scatter(self, out, dst_starts: np.ndarray, data, src_starts: np.ndarray, sizes: np.ndarray) -> None:
        """``out[dst_starts[i] : +sizes[i]] = data[src_starts[i] : +sizes[i]]`` (bytes)."""
        _native.scatter_ranges(out, dst_starts, np.ascontiguousarray(data), src_starts, sizes)

    def finish(self, out) -> np.ndarray:
        """The assembled page buffer as a host array."""
        return out


HOST = PageBackend()


def _pad8(x: np.ndarray) -> np.ndarray:
    return (x + 7) // 8 * 8


def _level_bounds(leaf: LeafColumn, counts: np.ndarray) -> np.ndarray:
    """Level index where each chunk starts (plus the level count): a chunk's levels run to
    its last value; null or empty lists after it go to the next chunk (all to the last)."""
    bounds = np.zeros(counts.size + 1, np.int64)
    bounds[-1] = leaf.num_levels
    if counts.size == 1:
        return bounds
    ends = np.cumsum(counts)[:-1]  # values before each later chunk
    vis = leaf.visible
    if vis is None:
        bounds[1:-1] = ends
    else:
        pos = np.flatnonzero(vis)
        bounds[1:-1] = pos[ends - 1] + 1
    return bounds


def _repetition_index(rep: np.ndarray, bounds: np.ndarray, max_rep: int) -> np.ndarray:
    """Per chunk (rows finished in it, leftover levels of a row running into the next chunk),
    as pylance computes it; u64 pairs."""
    nchunks = bounds.size - 1
    starts, ends = bounds[:-1], bounds[1:]
    is_row = rep == max_rep
    csum = np.zeros(rep.size + 1, np.int64)
    np.cumsum(is_row, out=csum[1:])
    rows = csum[ends] - csum[np.minimum(starts + 1, ends)]
    idx = np.where(is_row, np.arange(rep.size), -1)
    last = np.maximum.accumulate(idx) if rep.size else idx
    last_in = last[ends - 1]
    left = np.where(last_in >= starts, ends - last_in, ends - starts)
    left[-1] = 0
    rows[-1] += 1
    if nchunks > 1:
        fix = (rep[starts[1:]] == max_rep) & (left[:-1] != 0)
        rows[:-1][fix] += 1
        left[:-1][fix] = 0
    return np.stack([rows, left], axis=1).astype("<u8").reshape(-1)


def _fused_variable_page(chunks: variable.VariableChunks, large: bool, size_word: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_assemble_chunks` of variable-width chunks without levels, written straight
    from the values."""
    sizes = chunks.buffers[0][1]
    if not large and int(sizes.max()) > 0xFFFF:
        raise UnsupportedFeatureError("mini-block chunk buffer too large for the 2.1 chunk grammar")
    head_pad = (2 + size_word.itemsize + 7) // 8 * 8
    out, chunk_bytes = variable_native.variable_miniblock_page(
        chunks.offsets, chunks.data, chunks.bounds, sizes, chunks.width, head_pad, size_word.itemsize
    )
    if not large and int(chunk_bytes.max()) > 32 * 1024:
        raise UnsupportedFeatureError("mini-block chunk larger than 32 KiB in the 2.1 chunk grammar")
    return out, chunk_bytes


def _assemble_chunks(
    chunks: MiniBlockChunks,
    level_sections: list[tuple[np.ndarray, np.ndarray]],
    nlevels: np.ndarray,
    bounds: np.ndarray | None,
    large: bool,
    size_word: np.dtype,
    backend: PageBackend | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The mini-block page's value buffer: per chunk its header, level sections and value
    buffers, each padded to 8; returns ``(bytes, bytes per chunk)`` (with a ``backend``,
    the bytes are where it keeps them: the GPU encoder's are on the device)."""
    nchunks = chunks.counts.size
    nbuf = len(chunks.buffers)
    # header: u16 num_levels | [u16 rep bytes] | [u16 def bytes] | value buffer sizes | pad 8
    head_len = 2 + 2 * len(level_sections) + size_word.itemsize * nbuf
    head_pad = (head_len + 7) // 8 * 8
    if nchunks == 1 and (backend is None or backend is HOST) and all(
        np.asarray(data).dtype == np.uint8 for data, _sizes in [*level_sections, *chunks.buffers]
    ):
        return _assemble_one_chunk(chunks, level_sections, int(nlevels[0]) if bounds is not None else 0,
                                   large, size_word, head_pad)
    header = np.full((nchunks, head_pad), _PAD_HEADER, np.uint8)
    header[:, 0:2] = nlevels.astype("<u2").view(np.uint8).reshape(nchunks, 2) if bounds is not None else 0
    col = 2
    for _data, sizes in level_sections:
        header[:, col : col + 2] = sizes.astype("<u2").view(np.uint8).reshape(nchunks, 2)
        col += 2
    for _data, sizes in chunks.buffers:
        if not large and int(sizes.max()) > 0xFFFF:
            raise UnsupportedFeatureError("mini-block chunk buffer too large for the 2.1 chunk grammar")
        header[:, col : col + size_word.itemsize] = sizes.astype(size_word).view(np.uint8).reshape(nchunks, -1)
        col += size_word.itemsize
    sections = [(header.reshape(-1), np.full(nchunks, head_pad, np.int64))] + level_sections + list(chunks.buffers)
    padded = [_pad8(sizes) for _data, sizes in sections]
    chunk_bytes = np.sum(padded, axis=0)
    if not large and int(chunk_bytes.max()) > 32 * 1024:
        raise UnsupportedFeatureError("mini-block chunk larger than 32 KiB in the 2.1 chunk grammar")
    backend = backend or HOST
    chunk_start = np.zeros(nchunks, np.int64)
    np.cumsum(chunk_bytes[:-1], out=chunk_start[1:])
    out = backend.zeros(int(chunk_bytes.sum()))
    offset_in_chunk = np.zeros(nchunks, np.int64)
    for (data, sizes), pad in zip(sections, padded):
        src = np.zeros(nchunks, np.int64)
        np.cumsum(sizes[:-1], out=src[1:])
        backend.scatter(out, chunk_start + offset_in_chunk, data, src, sizes.astype(np.int64))
        offset_in_chunk += pad
    return out, chunk_bytes


def _assemble_one_chunk(
    chunks: MiniBlockChunks,
    level_sections: list[tuple[np.ndarray, np.ndarray]],
    nlevels: int,
    large: bool,
    size_word: np.dtype,
    head_pad: int,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_assemble_chunks` of a page of one chunk on the host (every small page), from
    Python integers: the chunk's header (``u16`` level count, ``u16`` level section sizes,
    ``size_word`` value buffer sizes, each cast as the general path casts them, then
    :data:`_PAD_HEADER` bytes to ``head_pad``), then each section's bytes padded with zeros
    to a multiple of 8.  Same bytes as the general path (a page's few numpy calls per section
    cost more than its values here); every section is ``uint8``."""
    word = size_word.itemsize
    word_mask = (1 << (8 * word)) - 1
    header = bytearray([_PAD_HEADER]) * head_pad
    header[0:2] = (nlevels & 0xFFFF).to_bytes(2, "little")
    col = 2
    for _data, sizes in level_sections:
        header[col : col + 2] = (int(sizes[0]) & 0xFFFF).to_bytes(2, "little")
        col += 2
    for _data, sizes in chunks.buffers:
        size = int(sizes[0])
        if not large and size > 0xFFFF:
            raise UnsupportedFeatureError("mini-block chunk buffer too large for the 2.1 chunk grammar")
        header[col : col + word] = (size & word_mask).to_bytes(word, "little")
        col += word
    parts: list[tuple[np.ndarray, int]] = [(np.frombuffer(header, np.uint8), head_pad)]
    parts += [(np.asarray(data).reshape(-1), int(sizes[0])) for data, sizes in [*level_sections, *chunks.buffers]]
    total = sum((size + 7) // 8 * 8 for _data, size in parts)
    if not large and total > 32 * 1024:
        raise UnsupportedFeatureError("mini-block chunk larger than 32 KiB in the 2.1 chunk grammar")
    out = np.zeros(total, np.uint8)
    pos = 0
    for data, size in parts:
        out[pos : pos + size] = data[:size]
        pos += (size + 7) // 8 * 8
    return out, np.array([total], np.int64)


def _miniblock(
    leaf: LeafColumn,
    minor: int,
    chunks: MiniBlockChunks,
    dictionary: tuple[pb.CompressiveEncoding, int, np.ndarray] | None = None,
    backend: PageBackend | None = None,
) -> EncodedPage:
    """The MiniBlockLayout page of ``chunks`` with the leaf's levels.  ``backend`` (the GPU
    encoder's) encodes the levels and assembles the chunks where the values are; the chunk
    metadata and layout are made here, on the host, for both."""
    backend = backend or HOST
    large = minor >= 2
    counts = chunks.counts
    nchunks = counts.size
    rep, def_ = leaf.rep, leaf.def_
    level_sections: list[tuple[np.ndarray, np.ndarray]] = []
    rep_enc = def_enc = None
    # the chunks' level ranges, where the leaf has levels
    bounds: np.ndarray | None = None
    if rep is not None or def_ is not None:
        bounds = _level_bounds(leaf, counts)
        nlevels = np.diff(bounds)
        if int(nlevels.max()) > 0xFFFF:
            raise LevelOverflow(f"field {leaf.field.dotted_path!r}: more than 65535 levels in one mini-block chunk")
        if rep is not None:
            w = max(1, int(bitpacking.bit_length(np.array([backend.level_max(rep)]))[0]))
            level_sections.append(backend.level_chunks(rep, bounds, w))
            rep_enc = bitpacking.out_of_line_encoding(16, w)
        if def_ is not None:
            w = max(1, int(bitpacking.bit_length(np.array([backend.level_max(def_)]))[0]))
            level_sections.append(backend.level_chunks(def_, bounds, w))
            def_enc = bitpacking.out_of_line_encoding(16, w)
    else:
        nlevels = np.zeros(nchunks, np.int64)
    nbuf = len(chunks.buffers)
    size_word = np.dtype("<u4") if large else np.dtype("<u2")
    if isinstance(chunks, variable.VariableChunks) and chunks.data is not None and bounds is None:
        out, chunk_bytes = _fused_variable_page(chunks, large, size_word)
    else:
        if isinstance(chunks, variable.VariableChunks):
            chunks.materialize()
        out, chunk_bytes = _assemble_chunks(chunks, level_sections, nlevels, bounds, large, size_word, backend)
        out = backend.finish(out)
    if nchunks == 1:  # (log2 count 0: the last chunk)
        word = (((int(chunk_bytes[0]) // 8 - 1) << 4) & ((1 << (8 * size_word.itemsize)) - 1))
        meta = np.frombuffer(bytearray(word.to_bytes(size_word.itemsize, "little")), np.uint8)
    else:
        words = ((chunk_bytes // 8 - 1) << 4) | chunks.log2_counts
        meta = words.astype(size_word).view(np.uint8)
    buffers = [meta, out]
    mb = pb.MiniBlockLayout(
        value_compression=chunks.encoding,
        layers=_layers(leaf),
        num_buffers=nbuf,
        num_items=leaf.num_values,
    )
    if large:
        mb.has_large_chunk = True
    if rep_enc is not None:
        mb.rep_compression.CopyFrom(rep_enc)
    if def_enc is not None:
        mb.def_compression.CopyFrom(def_enc)
    if dictionary is not None:
        enc, count, buf = dictionary
        mb.dictionary.CopyFrom(enc)
        mb.num_dictionary_items = count
        buffers.append(buf)
    if rep is not None:
        assert bounds is not None  # computed above for a leaf with levels
        mb.repetition_index_depth = 1
        buffers.append(_repetition_index(rep, bounds, leaf.max_rep).view(np.uint8))
    return EncodedPage(pb.PageLayout(mini_block_layout=mb), buffers, leaf.num_rows)


# --------------------------------------------------------------------------------------------
# full-zip layout


def _bytepack(values: np.ndarray) -> np.ndarray:
    """Unsigned integers in the narrowest of 1, 2, 4, 8 bytes that holds the largest."""
    top = int(values.max()) if values.size else 0
    for width in (1, 2, 4, 8):
        if top < (1 << (8 * width)):
            return values.astype(f"<u{width}").view(np.uint8)
    raise AssertionError("unreachable")


def _wants_per_value(vals: _Values, compression: str | None) -> bool:
    """pylance's per-value general compression rule for variable-width full-zip values."""
    if not vals.variable or compression == "none":
        return False
    requested = compression is not None and compression != "fsst"
    return (requested or vals.max_len > PER_VALUE_MIN_MAX_LEN) and vals.data.size >= PER_VALUE_MIN_BYTES


def _zstd_values(vals: _Values, valid: np.ndarray | None) -> tuple[_Values, pb.CompressiveEncoding]:
    """Each valid value (empty ones included) as ``u64 LE size | zstd frame``; null slots
    stay empty.  Offsets keep their width, so the full-zip length prefix is u32 or u64."""
    import zstandard


    cctx = zstandard.ZstdCompressor(level=3)  # what zstd's level 0 ("default") means
    offs = vals.var_offsets
    keep = np.ones(vals.num_values, np.bool_) if valid is None else valid
    raw = vals.data.data  # memoryview(vals.data)
    parts = [
        (b - a).to_bytes(8, "little") + cctx.compress(raw[a:b]) if k else b""
        for a, b, k in zip(offs[:-1].tolist(), offs[1:].tolist(), keep.tolist())
    ]
    lengths = np.fromiter((len(x) for x in parts), np.int64, len(parts))
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(b"".join(parts), np.uint8)
    packed = _Values(True, data, offsets=offsets, offset_bits=vals.offset_bits, num_values=vals.num_values)
    enc = pb.CompressiveEncoding(
        general=pb.General(
            compression=pb.BufferCompression(scheme=ZSTD, level=0), values=vals.item_encoding()
        )
    )
    return packed, enc


def _fullzip(leaf: LeafColumn, vals: _Values, compression: str | None = None) -> EncodedPage:
    value_encoding = vals.item_encoding()
    if _wants_per_value(vals, compression):
        nulls = leaf.null_values
        vals, value_encoding = _zstd_values(vals, None if nulls is None else ~nulls)
    elif vals.fsl_has_validity:
        vals, value_encoding = _fsl_zipped(leaf, vals)
    elif vals.variable and _wants_fsst(vals, compression):
        got = _fsst_values(vals, compression)
        if got is not None:
            table, comp = got
            raw_total = vals.var_offsets[-1:] - vals.var_offsets[:1]
            comp_total = comp.var_offsets[-1:] - comp.var_offsets[:1]
            if _decodable(raw_total, comp_total):
                vals = comp
                value_encoding = _fsst_encoding(table, comp.item_encoding())
    nlev = leaf.num_levels
    rep, def_ = leaf.rep, leaf.def_
    bits_rep = int(bitpacking.bit_length(np.array([rep.max()]))[0]) if rep is not None and nlev else 0
    bits_def = int(bitpacking.bit_length(np.array([def_.max()]))[0]) if def_ is not None and nlev else 0
    ctrl = _ctrl_bytes(bits_rep + bits_def)
    vis = leaf.visible
    visible = np.ones(nlev, np.bool_) if vis is None else vis
    n = vals.num_values
    # per visible value: bytes stored after the control word
    if vals.variable:
        obytes = vals.offset_bits // 8
        lengths = np.diff(vals.var_offsets)
        nulls = leaf.null_values
        valid = np.ones(n, np.bool_) if nulls is None else ~nulls
        body = np.where(valid, obytes + lengths, 0)
    else:
        if vals.bits % 8:
            raise UnsupportedFeatureError(f"field {leaf.field.dotted_path!r}: full-zip values of {vals.bits} bits")
        body = np.full(n, vals.bits // 8, np.int64)
    item = np.full(nlev, ctrl, np.int64)
    item[visible] += body
    starts = np.zeros(nlev + 1, np.int64)
    np.cumsum(item, out=starts[1:])
    out = np.zeros(int(starts[-1]), np.uint8)
    if ctrl:
        word = np.zeros(nlev, np.int64)
        if rep is not None:
            word |= rep.astype(np.int64) << bits_def
        if def_ is not None:
            word |= def_.astype(np.int64)
        wb = word.astype(f"<u{ctrl}").view(np.uint8).reshape(nlev, ctrl)
        idx = starts[:-1, None] + np.arange(ctrl)[None, :]
        out[idx.reshape(-1)] = wb.reshape(-1)
    vstart = starts[:-1][visible] + ctrl
    if vals.variable:
        lens = lengths[valid]
        vs = vstart[valid]
        lb = lens.astype(f"<u{obytes}").view(np.uint8).reshape(-1, obytes)
        idx = vs[:, None] + np.arange(obytes)[None, :]
        out[idx.reshape(-1)] = lb.reshape(-1)
        _native.scatter_ranges(out, vs + obytes, vals.data, vals.var_offsets[:-1][valid], lens.astype(np.int64))
        details = {"bits_per_offset": vals.offset_bits}
    else:
        width = vals.bits // 8
        _native.scatter_ranges(out, vstart, vals.data, np.arange(n, dtype=np.int64) * width, np.full(n, width, np.int64))
        details = {"bits_per_value": vals.bits}
    buffers = [out]
    if vals.variable or rep is not None:
        row_start = np.ones(nlev, np.bool_) if rep is None else rep == leaf.max_rep
        index = np.concatenate([starts[:-1][row_start], starts[-1:]])
        buffers.append(_bytepack(index))
    fz = pb.FullZipLayout(
        bits_rep=bits_rep,
        bits_def=bits_def,
        num_items=nlev,
        num_visible_items=n,
        value_compression=value_encoding,
        layers=_layers(leaf),
        **details,
    )
    return EncodedPage(pb.PageLayout(full_zip_layout=fz), buffers, leaf.num_rows)

