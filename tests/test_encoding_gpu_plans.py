# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the pure per-encoding device planning (``lance_gpu.file.encodings.<name>.gpu_plan``):
the byte layouts and checks :mod:`lance_gpu.gpu.plan` registers into a unit's work lists.
End to end (planned reads against pylance) they are covered by tests/test_gpu_plan.py."""

from __future__ import annotations

import numpy as np
import pytest

from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.errors import CorruptFileError
from lance_gpu.file.blocks import FixedWidthBlock
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.encodings.bitpacking import gpu_plan as bitpacking_plan
from lance_gpu.file.encodings.dictionary import gpu_plan as dictionary_plan
from lance_gpu.file.encodings.flat import gpu_plan as flat_plan
from lance_gpu.file.encodings.fsst import gpu_plan as fsst_plan
from lance_gpu.file.encodings.rle import gpu_plan as rle_plan

CTX = DecodeContext("t.lance", 0)


def _fsst_table(symbols: list[bytes], compressed: bool = True) -> bytes:
    """A ``symbol_table`` field: u64 header (magic, encoder switch, symbol count), the symbols
    as u64 (zero padded), then their lengths."""
    header = (0x46535354 << 32) | (int(compressed) << 24) | len(symbols)
    body = b"".join(s.ljust(8, b"\0") for s in symbols) + bytes(len(s) for s in symbols)
    return header.to_bytes(8, "little") + body


def _fsst_layout(table: bytes):
    mb = pb.MiniBlockLayout()
    mb.value_compression.fsst.symbol_table = table
    mb.value_compression.fsst.values.variable.offsets.flat.bits_per_value = 32
    mb.num_buffers = 1
    return mb


def test_layout_fsst_names_only_fsst_strings_without_a_dictionary():
    mb = _fsst_layout(_fsst_table([b"ab"]))
    assert fsst_plan.layout_fsst("mini_block_layout", mb, 1) is mb.value_compression.fsst
    assert fsst_plan.layout_fsst("mini_block_layout", mb, 0) is None  # no value buffers
    mb.dictionary.flat.bits_per_value = 8
    assert fsst_plan.layout_fsst("mini_block_layout", mb, 1) is None  # FSST dictionary items, not strings
    assert fsst_plan.layout_fsst("constant_layout", mb, 1) is None
    fz = pb.FullZipLayout()
    fz.value_compression.fsst.symbol_table = _fsst_table([b"x"])
    assert fsst_plan.layout_fsst("full_zip_layout", fz, 1) is None  # fixed width (no bits_per_offset)
    fz.bits_per_offset = 32
    assert fsst_plan.layout_fsst("full_zip_layout", fz, 1) is fz.value_compression.fsst


def test_page_tables_pack_compressed_tables_in_the_arena_layout():
    """Pages of three layouts (FSST, plain, FSST stored uncompressed) and an FSST page with no
    values: only the compressed pages with values are packed, each TABLE_BYTES: its 256 u64
    symbols (little endian, zero past its count), then its 256 lengths."""
    a = _fsst_layout(_fsst_table([b"hello", b"x", b"12345678"]))
    off = _fsst_layout(_fsst_table([b"q"], compressed=False))
    encs = [a.value_compression.fsst, None, off.value_compression.fsst]
    layout = np.array([0, 1, 0, 2, 0], np.int32)
    num_values = np.array([3, 5, 0, 2, 7], np.int64)
    rows, nsym, packed = fsst_plan.page_tables(encs, layout, num_values, CTX)
    assert rows.tolist() == [0, 4] and nsym == [3, 3]
    assert packed.dtype == np.uint8 and packed.shape == (2, fsst_plan.TABLE_BYTES)
    assert fsst_plan.TABLE_BYTES % 8 == 0
    for row in packed:
        symbols = row[:2048].view("<u8")
        assert symbols[:3].tobytes() == b"hello" + bytes(3) + b"x" + bytes(7) + b"12345678"
        assert not symbols[3:].any()
        assert row[2048:2051].tolist() == [5, 1, 8] and not row[2051:].any()
    assert fsst_plan.page_tables([None, None], layout % 2, num_values, CTX) is None
    assert fsst_plan.page_tables(encs[2:], np.zeros(2, np.int32), np.ones(2, np.int64), CTX) is None


def test_page_tables_refuse_a_bad_table():
    bad = _fsst_layout(b"\0" * 8)  # no magic
    with pytest.raises(CorruptFileError, match="magic"):
        fsst_plan.page_tables([bad.value_compression.fsst], np.zeros(5, np.int32), np.ones(5, np.int64), CTX)


def _dictionary_page(items: np.ndarray, index_bits: int = 32):
    """A dictionary page's ``MiniBlockLayout`` with Flat items of ``items``' width and Flat indices."""
    mb = pb.MiniBlockLayout()
    mb.dictionary.flat.bits_per_value = 8 * items.dtype.itemsize
    mb.num_dictionary_items = items.size
    mb.value_compression.flat.bits_per_value = index_bits
    mb.num_buffers = 1
    return mb


def test_index_key_names_the_index_encodings_the_device_decodes():
    enc = pb.CompressiveEncoding()
    enc.flat.bits_per_value = 16
    assert dictionary_plan.index_key(enc) == (16, "flat")
    enc.flat.bits_per_value = 12  # not a word
    assert dictionary_plan.index_key(enc) is None
    enc = pb.CompressiveEncoding()
    enc.inline_bitpacking.uncompressed_bits_per_value = 32
    assert dictionary_plan.index_key(enc) == (32, "inline_bitpacking")
    enc.inline_bitpacking.values.SetInParent()  # a compressed buffer: not on the device
    assert dictionary_plan.index_key(enc) is None
    enc = pb.CompressiveEncoding()
    enc.rle.values.flat.bits_per_value = 8
    enc.rle.run_lengths.flat.bits_per_value = 8
    assert dictionary_plan.index_key(enc) == (8, "rle")
    enc.rle.run_lengths.flat.bits_per_value = 16
    assert dictionary_plan.index_key(enc) is None
    enc = pb.CompressiveEncoding()
    enc.fsst.symbol_table = b""
    assert dictionary_plan.index_key(enc) is None


def test_fixed_items_lay_out_bytes_per_item_and_refuse_other_widths():
    items = FixedWidthBlock(np.array([7, -1, 300], "<i4").view(np.uint8), 32, 3)
    assert dictionary_plan.fixed_items(items, "fixed", 4, "int32", CTX).tobytes() == np.array([7, -1, 300], "<i4").tobytes()
    with pytest.raises(CorruptFileError, match="32-bit dictionary items for int64"):
        dictionary_plan.fixed_items(items, "fixed", 8, "int64", CTX)
    bits = FixedWidthBlock(np.packbits(np.array([1, 0, 1, 1, 0], np.uint8), bitorder="little"), 1, 5)
    assert dictionary_plan.fixed_items(bits, "bool", 1, "bool", CTX).tolist() == [1, 0, 1, 1, 0]
    with pytest.raises(CorruptFileError, match="fixed-width dictionary for a variable-width column"):
        dictionary_plan.fixed_items(items, "var", 0, "string", CTX)


def test_dictionaries_together_put_fixed_items_back_to_back():
    """Two pages' Flat dictionaries decoded together: one blob, page k's items at item_start[k];
    one page alone gives the same bytes; fewer than two pages are not decoded together."""
    a, b = np.array([1, 2, 3], "<i8"), np.array([9, 8], "<i8")
    pages = [_dictionary_page(a), _dictionary_page(b, 8)]
    bufs = [a.view(np.uint8), b.view(np.uint8)]
    got = dictionary_plan.together(pages, bufs, "fixed", 8, "int64", CTX)
    assert got is not None and got.offsets is None
    assert got.blob.tobytes() == a.tobytes() + b.tobytes()
    assert got.item_start.tolist() == [0, 24] and got.nitems.tolist() == [3, 2] and got.first_offset.tolist() == [0, 0]
    items, offsets, n = dictionary_plan.one(pages[1], bufs[1], "fixed", 8, "int64", CTX)
    assert (items.tobytes(), offsets, n) == (b.tobytes(), None, 2)
    assert dictionary_plan.together(pages[:1], bufs[:1], "fixed", 8, "int64", CTX) is None
    with pytest.raises(CorruptFileError, match="64-bit dictionary items for int32"):
        dictionary_plan.together(pages, bufs, "fixed", 4, "int32", CTX)
    assert dictionary_plan.together(pages, bufs, "var", 0, "string", CTX) is None  # Flat items: not Variable


def test_flat_chunk_and_level_bytes_refuse_short_buffers():
    counts = np.array([3, 10], np.int64)
    assert flat_plan.chunk_bytes(np.array([12, 40]), counts, 1, 32, CTX).tolist() == [12, 40]
    assert flat_plan.chunk_bytes(np.array([1, 3]), counts, 2, 1, CTX).tolist() == [1, 3]  # booleans: ceil(bits / 8)
    with pytest.raises(CorruptFileError, match="flat chunk shorter"):
        flat_plan.chunk_bytes(np.array([12, 39]), counts, 1, 32, CTX)
    with pytest.raises(CorruptFileError, match="boolean chunk shorter"):
        flat_plan.chunk_bytes(np.array([1, 2]), counts, 2, 1, CTX)
    assert flat_plan.level_bytes(np.array([6, 20]), counts, CTX).tolist() == [6, 20]
    with pytest.raises(CorruptFileError, match="level buffer shorter"):
        flat_plan.level_bytes(np.array([5, 20]), counts, CTX)


def _levels(kind: str, bits: int = 16) -> pb.CompressiveEncoding:
    enc = pb.CompressiveEncoding()
    if kind == "flat":
        enc.flat.bits_per_value = bits
    elif kind == "inline_bitpacking":
        enc.inline_bitpacking.uncompressed_bits_per_value = bits
    elif kind == "out_of_line_bitpacking":
        enc.out_of_line_bitpacking.uncompressed_bits_per_value = bits
        enc.out_of_line_bitpacking.values.flat.bits_per_value = 3
    else:
        enc.rle.values.flat.bits_per_value = bits
        enc.rle.run_lengths.flat.bits_per_value = 8
    return enc


@pytest.mark.parametrize("kind", ["flat", "inline_bitpacking", "out_of_line_bitpacking", "rle"])
def test_level_encodings_are_claimed_by_their_encoding_only(kind):
    """A 16-bit level encoding is claimed by exactly its own module; 32-bit levels by none."""
    enc = _levels(kind)
    claims = {"flat": flat_plan.is_level(enc), "bitpacking": bitpacking_plan.level_kind(enc) is not None,
              "rle": rle_plan.value_bits(enc) == 16}
    assert [k for k, v in claims.items() if v] == [{"flat": "flat", "rle": "rle"}.get(kind, "bitpacking")]
    wide = _levels(kind, 32)
    assert not flat_plan.is_level(wide) and bitpacking_plan.level_kind(wide) is None and rle_plan.value_bits(wide) != 16
    if kind == "out_of_line_bitpacking":
        assert bitpacking_plan.level_width(enc) == 3


def test_rle_runs_lie_where_the_layouts_say():
    vals, lens = rle_plan.level_runs(np.array([0, 100], np.int64), np.array([4, 1], np.int64))
    assert vals.tolist() == [8, 108] and lens.tolist() == [16, 110]  # u64 values_bytes | u16 values | u8 lengths
    bufs = np.array([[[0, 8], [8, 2]], [[16, 4], [20, 3]]], np.int64)  # chunks x (values, lengths) x (start, size)
    assert rle_plan.chunk_runs(bufs[:1], 4, CTX).tolist() == [2]
    with pytest.raises(CorruptFileError, match="RLE values buffer shorter"):
        rle_plan.chunk_runs(bufs, 4, CTX)  # chunk 1: 3 runs of 4 bytes in 4 bytes
