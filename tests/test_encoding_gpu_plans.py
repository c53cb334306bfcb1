# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the pure per-encoding device planning (``lance_gpu.file.encodings.<name>.gpu_plan``):
the byte layouts and checks :mod:`lance_gpu.gpu.plan` registers into a unit's work lists.
End to end (planned reads against pylance) they are covered by tests/test_gpu_plan.py."""

from __future__ import annotations

import numpy as np
import pytest

from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.errors import CorruptFileError
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.encodings.fsst import gpu_plan as fsst_plan

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
