# SPDX-License-Identifier: Apache-2.0
"""Unit tests of the per-encoding device planning (``lance_gpu.file.encodings.<name>.gpu_plan``):
the byte layouts and checks, and the work rows each encoding's emission adds to a unit's
work lists (through the registry, as :mod:`lance_gpu.gpu.plan` asks for them).
End to end (planned reads against pylance) they are covered by tests/test_gpu_plan.py."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from lance_gpu._proto import encodings_v2_1_pb2 as pb
from lance_gpu.errors import CorruptFileError
from lance_gpu.file import encodings
from lance_gpu.file.blocks import FixedWidthBlock, VariableWidthBlock
from lance_gpu.file.encodings.base import DecodeContext, DeviceUnsupported
from lance_gpu.file.encodings.bitpacking import gpu_plan as bitpacking_plan
from lance_gpu.file.encodings.dictionary import gpu_plan as dictionary_plan
from lance_gpu.file.encodings.fixed_size_list import gpu_plan as fixed_size_list_plan
from lance_gpu.file.encodings.flat import gpu_plan as flat_plan
from lance_gpu.file.encodings.fsst import gpu_plan as fsst_plan
from lance_gpu.file.encodings.rle import gpu_plan as rle_plan
from lance_gpu.file.encodings.variable import gpu_plan as variable_plan

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


# -- one registry ------------------------------------------------------------------------------

#: modules of the encodings package that are not an encoding's home
_NOT_ENCODINGS = {"base", "dispatch", "_native"}


def test_every_encoding_module_and_package_part_is_registered():
    """Each module / package of ``lance_gpu.file.encodings`` is the home of a registered
    encoding; each package's ``gpu_plan`` is the device planning of one, each ``device``
    module holds a registered device encoder, each ``decode_kernels`` module a registered
    device decoding kernel; every ``CompressiveEncoding`` field is registered (but
    ``variable_packed_struct``, which nothing decodes) and nothing else."""
    homes = {reg.home.__name__ for reg in encodings.ENCODINGS.values()}
    plans = {f"{encodings.__name__}.{reg.gpu_plan}" for reg in encodings.ENCODINGS.values() if reg.gpu_plan is not None}
    device_encoders = {e.device.__module__ for e in encodings.ENCODERS.values() if e.device is not None}
    kernel_modules = {k.partition(":")[0] for reg in encodings.ENCODINGS.values() for k in reg.kernels}
    for info in pkgutil.iter_modules(encodings.__path__):
        if info.name in _NOT_ENCODINGS:
            continue
        name = f"{encodings.__name__}.{info.name}"
        assert name in homes, f"{name} is not registered in lance_gpu.file.encodings.ENCODINGS"
        if not info.ispkg:
            continue
        parts = {p.name for p in pkgutil.iter_modules(importlib.import_module(name).__path__)}
        if "gpu_plan" in parts:
            assert f"{name}.gpu_plan" in plans, f"{name}.gpu_plan is no encoding's device planning"
        if "device" in parts:
            assert f"{name}.device" in device_encoders, f"{name}.device holds no registered device encoder"
        if "decode_kernels" in parts:
            assert f"{name}.decode_kernels" in kernel_modules, f"{name}.decode_kernels holds no registered kernel"
    fields = {f.name for f in pb.CompressiveEncoding.DESCRIPTOR.oneofs_by_name["compression"].fields}
    assert set(encodings.ENCODINGS) == fields - {"variable_packed_struct"}


def test_registered_planning_functions_and_kernels_are_where_the_registry_says():
    """Each form an encoding's registration plans is a function of its ``gpu_plan``; every
    kernel named exists; an encoding the device plans values, levels or full-zip values of
    names kernels (and one it does not plan names none, but page dictionaries)."""
    for kind, reg in encodings.ENCODINGS.items():
        module = encodings.gpu_plan(kind)
        assert (module is None) == (reg.gpu_plan is None), kind
        assert set(reg.plans) <= set(encodings.FORM_FUNCTIONS), kind
        for what in reg.plans:
            assert module is not None and callable(getattr(module, encodings.FORM_FUNCTIONS[what])), (kind, what)
        assert bool(reg.kernels) == (bool(reg.plans) or kind == "dictionary"), kind
        for name in reg.kernels:
            module_name, _, function = name.partition(":")
            assert callable(getattr(importlib.import_module(module_name), function)), name


def test_every_encoding_says_whether_the_device_decodes_it():
    """Each registration has a device planning or says, in ``cpu_only``, why the device does
    not decode it -- never both, never neither; one said CPU only plans, emits and launches
    nothing."""
    for kind, reg in encodings.ENCODINGS.items():
        assert (reg.gpu_plan is None) == (reg.cpu_only is not None), kind
        if reg.cpu_only is not None:
            assert reg.cpu_only.strip(), kind
            assert not (reg.plans or reg.families or reg.kernels), kind
    cpu_only = {kind for kind, reg in encodings.ENCODINGS.items() if reg.cpu_only}
    assert cpu_only == {"constant", "byte_stream_split", "general", "packed_struct"}


def test_registered_emitters_resolve_to_their_homes():
    """Each value family an encoding registers is emitted by its planning's ``emit_values``
    (one registration per family); each level form it plans by its ``emit_levels``; every
    ``emit_values`` of a planning module is registered; an unregistered family or level
    encoding resolves to nothing."""
    owners: dict[str, str] = {}
    for kind, reg in encodings.ENCODINGS.items():
        module = encodings.gpu_plan(kind)
        for family in reg.families:
            assert family not in owners, (family, owners.get(family), kind)
            owners[family] = kind
            assert module is not None
            emit = encodings.device_value_emitter(family)
            assert callable(emit) and emit is getattr(module, encodings.EMIT_FUNCTIONS["values"]), (kind, family)
        if "levels" in reg.plans:
            assert module is not None
            emit = encodings.device_level_emitter(_levels(kind))
            assert callable(emit) and emit is getattr(module, encodings.EMIT_FUNCTIONS["levels"]), kind
        if module is not None and hasattr(module, encodings.EMIT_FUNCTIONS["values"]):
            assert any(reg2.gpu_plan == reg.gpu_plan and reg2.families for reg2 in encodings.ENCODINGS.values()), kind
    # every family a value form names has its encoding's emission (none is the planner's own)
    assert owners == {"flat": "flat", "fsl_valid": "fixed_size_list", "var": "variable",
                      "inline_bitpacking": "inline_bitpacking", "rle": "rle"}
    with pytest.raises(KeyError, match="no encoding emits 'bytes' values"):
        encodings.device_value_emitter("bytes")
    with pytest.raises(DeviceUnsupported, match=r"^variable repetition/definition levels$"):
        encodings.device_level_emitter(_variable(32))


class _Work:
    """A work list that records its rows (as ``UnitPlan``'s take them)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, **cols) -> None:
        self.rows.append({k: np.asarray(v).tolist() for k, v in cols.items()})


class _Unit:
    """A unit (``base.DeviceUnit``) whose work lists record what an emitter adds."""

    def __init__(self) -> None:
        self.copy_fixed, self.copy_level, self.bits, self.var_chunks = _Work(), _Work(), _Work(), _Work()
        self.copy_index = {bits: _Work() for bits in dictionary_plan.INDEX_BITS}
        self.unpack: dict[tuple[str, int], _Work] = {}
        self.rle: list[tuple[int, str, dict]] = []

    def unpack_list(self, dest: str, bits: int) -> _Work:
        return self.unpack.setdefault((dest, bits), _Work())

    def add_rle(self, bits: int, dest: str, **cols) -> None:
        self.rle.append((bits, dest, {k: np.asarray(v).tolist() for k, v in cols.items()}))


def _chunks(bufs: list, counts: list[int], **more) -> SimpleNamespace:
    return SimpleNamespace(bufs=np.array(bufs, np.int64), counts=np.array(counts, np.int64), **more)


def test_value_emitters_write_each_family_work_list():
    """Two chunks through each registered value emitter (found by family): Flat bytes copied,
    Flat bits spread, fixed-size list item validity spread before its items, Variable spans,
    Rle runs, inline blocks unpacked; a short Flat chunk, a short item validity or items
    buffer and an Rle chunk with fewer values than runs are refused as corrupt."""
    dst = np.array([100, 140], np.int64)
    unit = _Unit()
    encodings.device_value_emitter("flat")(unit, None, (1, 32), _chunks([[[8, 40]], [[48, 16]]], [10, 4]), dst, CTX)
    assert unit.copy_fixed.rows == [{"src": [8, 48], "len": [40, 16], "dst": [100, 140]}]
    encodings.device_value_emitter("flat")(unit, None, (3, 1), _chunks([[[8, 4]], [[16, 1]]], [10, 2]), dst, CTX)
    assert unit.bits.rows == [{"src": [64, 128], "count": [30, 6], "dst": [100, 140]}]
    with pytest.raises(CorruptFileError, match="flat chunk shorter"):
        encodings.device_value_emitter("flat")(unit, None, (1, 32), _chunks([[[8, 39]], [[48, 16]]], [10, 4]), dst, CTX)
    # item validity (fsl_valid): chunk buffer 0's bits spread to a byte per item at item_base
    # + value * items, before buffer 1's items as Flat's (copied; 1-bit items spread)
    unit = _Unit()
    fsl_valid = encodings.device_value_emitter("fsl_valid")
    one = ((0, 3),)  # one layer: its region from item_base, 3 bytes a value

    def fchunks(bufs, counts, value, base, nv=(60, 60)):
        return _chunks(bufs, counts, value=np.array(value), item_base=np.array(base), item_values=np.array(nv[: len(counts)]))

    ch = fchunks([[[8, 4], [12, 120], [0, 0]], [[132, 1], [133, 24], [0, 0]]], [10, 2], [0, 10], [500, 500])
    fsl_valid(unit, None, (3, 32, one), ch, dst, CTX)
    assert unit.bits.rows == [{"src": [64, 1056], "count": [30, 6], "dst": [500, 530]}]
    assert unit.copy_fixed.rows == [{"src": [12, 133], "len": [120, 24], "dst": [100, 140]}]
    fsl_valid(unit, None, (3, 1, one), fchunks([[[8, 4], [12, 4], [0, 0]]], [10], [4], [500]), dst[:1], CTX)
    assert unit.bits.rows[1:] == [{"src": [64], "count": [30], "dst": [512]}, {"src": [96], "count": [30], "dst": [100]}]
    with pytest.raises(CorruptFileError, match="fixed-size-list validity chunk shorter than its items"):
        fsl_valid(unit, None, (3, 32, one), fchunks([[[8, 3], [12, 120], [0, 0]]], [10], [0], [0]), dst[:1], CTX)
    with pytest.raises(CorruptFileError, match="flat chunk shorter"):
        fsl_valid(unit, None, (3, 32, one), fchunks([[[8, 4], [12, 119], [0, 0]]], [10], [0], [0]), dst[:1], CTX)
    # nested, both layers (2 lists of 3 items): buffer 0 the lists' bits (2 a value, region from
    # item_base), buffer 1 the items' (6 a value, region from item_base + 2 * the leaf's values),
    # buffer 2 the items
    unit = _Unit()
    two = ((0, 2), (2, 6))
    fsl_valid(unit, None, (6, 32, two), fchunks([[[8, 3], [16, 8], [24, 240]]], [10], [5], [500], (60,)), dst[:1], CTX)
    assert unit.bits.rows == [{"src": [64], "count": [20], "dst": [510]}, {"src": [128], "count": [60], "dst": [500 + 120 + 30]}]
    assert unit.copy_fixed.rows == [{"src": [24], "len": [240], "dst": [100]}]
    with pytest.raises(CorruptFileError, match="fixed-size-list validity chunk shorter than its items"):
        fsl_valid(unit, None, (6, 32, two), fchunks([[[8, 3], [16, 7], [24, 240]]], [10], [5], [500], (60,)), dst[:1], CTX)
    encodings.device_value_emitter("var")(unit, None, 4, _chunks([[[8, 90]], [[98, 7]]], [3, 1]), np.array([5, 8]), CTX)
    assert unit.var_chunks.rows == [{"start": [8, 98], "size": [90, 7], "width": 4, "count": [3, 1], "dst": [5, 8]}]
    rle = _levels("rle", 32)
    encodings.device_value_emitter("rle")(unit, rle, 32, _chunks([[[8, 8], [16, 2]], [[24, 4], [28, 1]]], [9, 5]), dst, CTX)
    assert unit.rle == [(32, "fixed", {"vals": [8, 24], "runs": [16, 28], "nruns": [2, 1], "count": [9, 5], "dst": [100, 140]})]
    with pytest.raises(CorruptFileError, match="RLE values buffer shorter"):
        encodings.device_value_emitter("rle")(unit, rle, 32, _chunks([[[8, 7], [16, 2]]], [9]), dst[:1], CTX)
    blocks = bitpacking_plan.InlineBlocks(np.array([3, 9, 20]), np.array([5, 5, 7]), np.array([1024, 6, 30]),
                                          np.array([0, 0, 1]), np.array([0, 1024, 0]))
    ch = _chunks([[[8, 0]], [[80, 0]]], [1030, 30], blocks=blocks)
    encodings.device_value_emitter("inline_bitpacking")(unit, None, 32, ch, dst, CTX)
    assert unit.unpack[("fixed", 32)].rows == [{"words": [3, 9, 20], "width": [5, 5, 7], "dst": [25, 25 + 1024, 35],
                                                "count": [1024, 6, 30]}]


def test_level_emitters_write_each_level_form():
    """Per-chunk levels through each registered level emitter (found by encoding): Flat16
    copied, block-form Rle expanded after its u64 word, OutOfLineBitpacking blocks unpacked
    and raw tails copied; a short Flat16 buffer is refused as corrupt."""
    starts, sizes, nlevels, dst = np.array([8, 64]), np.array([20, 6]), np.array([10, 3]), np.array([0, 32])
    unit = _Unit()
    flat = _levels("flat")
    encodings.device_level_emitter(flat)(unit, "flat", flat, starts, sizes, nlevels, dst, CTX)
    assert unit.copy_level.rows == [{"src": [8, 64], "len": [20, 6], "dst": [0, 64]}]
    with pytest.raises(CorruptFileError, match="level buffer shorter"):
        encodings.device_level_emitter(flat)(unit, "flat", flat, starts, sizes - 1, nlevels, dst, CTX)
    rle = _levels("rle")
    encodings.device_level_emitter(rle)(unit, "rle", rle, starts, sizes, nlevels, dst, CTX, None, np.array([2, 1]))
    assert unit.rle == [(16, "level", {"vals": [16, 72], "runs": [20, 74], "nruns": [2, 1], "count": [10, 3], "dst": [0, 64]})]
    ool = _levels("out_of_line_bitpacking")
    ool.out_of_line_bitpacking.values.flat.bits_per_value = 3
    unit = _Unit()
    # chunk 0: one whole 1024-level block of 3 bits (384 bytes) then 2 raw u16 levels; chunk 1: 5 raw levels
    starts, sizes, nlevels = np.array([0, 392]), np.array([388, 10]), np.array([1026, 5])
    encodings.device_level_emitter(ool)(unit, "out_of_line_bitpacking", ool, starts, sizes, nlevels, np.array([0, 2048]), CTX)
    (unpacked,) = unit.unpack[("level", 16)].rows
    assert unpacked["width"] == 3 and unpacked["dst"] == [0] and unpacked["count"] == [1024]
    assert unit.copy_level.rows == [{"src": [2 * 192, 2 * 196], "len": [4, 10], "dst": [2 * 1024, 2 * 2048]}]


def test_encoders_and_cpu_decoders_come_from_the_registry():
    """:data:`ENCODERS` is the registrations' encoders; the CPU dispatch decodes with the
    registered decoders (a Flat block of three u16 values through ``decode_block``)."""
    assert encodings.ENCODERS["out_of_line_bitpacking"] is encodings.ENCODINGS["out_of_line_bitpacking"].encoders["out_of_line_bitpacking"]
    assert {"dictionary", "dictionary_strings"} <= set(encodings.ENCODINGS["dictionary"].encoders)
    enc = pb.CompressiveEncoding()
    enc.flat.bits_per_value = 16
    block = encodings.decode_block(enc, np.array([1, 2, 3], "<u2").view(np.uint8), 3, CTX)
    assert block.as_uint().tolist() == [1, 2, 3]


# -- value forms ----------------------------------------------------------------------------------


def _leaf(kind: str, width: int, arrow_type: pa.DataType | None = None):
    """A leaf as the device planning reads it (:class:`base.DeviceLeaf`)."""
    return SimpleNamespace(kind=kind, width=width, arrow_type=pa.int32() if arrow_type is None else arrow_type)


def _variable(offset_bits: int) -> pb.CompressiveEncoding:
    enc = pb.CompressiveEncoding()
    enc.variable.offsets.flat.bits_per_value = offset_bits
    return enc


def test_variable_offset_bytes_and_refusals():
    assert variable_plan.offset_bytes(_variable(32)) == 4 and variable_plan.offset_bytes(_variable(64)) == 8
    with pytest.raises(DeviceUnsupported, match="Variable offsets other than Flat32 / Flat64"):
        variable_plan.offset_bytes(_variable(16))
    packed = pb.CompressiveEncoding()
    packed.variable.offsets.inline_bitpacking.uncompressed_bits_per_value = 32
    with pytest.raises(DeviceUnsupported, match="Variable offsets other than"):
        variable_plan.offset_bytes(packed)
    compressed = _variable(32)
    compressed.variable.values.scheme = 1
    with pytest.raises(DeviceUnsupported, match="Variable with compressed values"):
        variable_plan.offset_bytes(compressed)
    with pytest.raises(DeviceUnsupported, match=r"^flat strings$"):
        variable_plan.offset_bytes(_levels("flat"))


def test_value_forms_name_the_family_and_refuse_with_the_reason():
    """Through the registry (:func:`encodings.device_value_form`): each encoding's form for
    the leaves it decodes into, and the reasons for the others."""
    var, fsst = _variable(64), pb.CompressiveEncoding()
    fsst.fsst.symbol_table = b"x"
    fsst.fsst.values.CopyFrom(_variable(32))
    strings = _leaf("var", 0, pa.string())
    assert encodings.device_value_form(var, strings, 1) == ("var", 8)
    assert encodings.device_value_form(fsst, strings, 1) == ("var", 4)
    with pytest.raises(DeviceUnsupported, match=r"^variable values in mini-block pages$"):
        encodings.device_value_form(var, _leaf("fixed", 4), 1)
    with pytest.raises(DeviceUnsupported, match=r"^mini-block page with 2 buffers$"):
        encodings.device_value_form(fsst, strings, 2)
    flat = _levels("flat", 32)
    assert encodings.device_value_form(flat, _leaf("fixed", 4), 1) == ("flat", (1, 32))
    with pytest.raises(DeviceUnsupported, match=r"^32-bit Flat values for int64$"):
        encodings.device_value_form(flat, _leaf("fixed", 8, pa.int64()), 1)
    with pytest.raises(DeviceUnsupported, match=r"^flat strings$"):
        encodings.device_value_form(flat, strings, 1)
    fsl = pb.CompressiveEncoding()
    fsl.fixed_size_list.items_per_value = 3
    fsl.fixed_size_list.values.flat.bits_per_value = 1
    assert encodings.device_value_form(fsl, _leaf("bool", 3), 1) == ("flat", (3, 1))
    fsl.fixed_size_list.has_validity = True  # item validity: a chunk buffer of bits before the items
    assert encodings.device_value_form(fsl, _leaf("bool", 3), 2) == ("fsl_valid", (3, 1, ((0, 3),)))
    fsl.fixed_size_list.values.flat.bits_per_value = 32
    assert encodings.device_value_form(fsl, _leaf("fixed", 12), 2) == ("fsl_valid", (3, 32, ((0, 3),)))
    with pytest.raises(DeviceUnsupported, match=r"^fixed-size list with item validity in 1 chunk buffers$"):
        encodings.device_value_form(fsl, _leaf("fixed", 12), 1)
    with pytest.raises(DeviceUnsupported, match=r"^32-bit Flat values for int64$"):
        encodings.device_value_form(fsl, _leaf("fixed", 8, pa.int64()), 2)
    nested = pb.CompressiveEncoding()
    nested.fixed_size_list.items_per_value = 2
    nested.fixed_size_list.values.CopyFrom(fsl)  # item validity of the inner layer: its region after the outer's
    assert encodings.device_value_form(nested, _leaf("fixed", 24), 2) == ("fsl_valid", (6, 32, ((2, 6),)))
    with pytest.raises(DeviceUnsupported, match=r"^fixed-size list with item validity in 1 chunk buffers$"):
        encodings.device_value_form(nested, _leaf("fixed", 24), 1)
    nested.fixed_size_list.has_validity = True  # both layers: three chunk buffers
    assert encodings.device_value_form(nested, _leaf("fixed", 24), 3) == ("fsl_valid", (6, 32, ((0, 2), (2, 6))))
    assert fixed_size_list_plan.full_zip_form(nested) == ("fsl_valid", (6, 32, ((0, 2), (2, 6))))
    nested.fixed_size_list.values.fixed_size_list.has_validity = False  # the outer layer's only
    assert encodings.device_value_form(nested, _leaf("fixed", 24), 2) == ("fsl_valid", (6, 32, ((0, 2),)))
    nested.fixed_size_list.values.fixed_size_list.values.flat.data.scheme = 2  # compressed items: on the CPU
    with pytest.raises(DeviceUnsupported, match=r"^fixed-size lists with item validity over items other than Flat$"):
        encodings.device_value_form(nested, _leaf("fixed", 24), 2)
    inline = _levels("inline_bitpacking", 64)
    assert encodings.device_value_form(inline, _leaf("fixed", 8), 1) == ("inline_bitpacking", 64)
    with pytest.raises(DeviceUnsupported, match=r"^this InlineBitpacking layout$"):
        encodings.device_value_form(inline, _leaf("bool", 8), 1)
    rle = _levels("rle", 32)
    assert encodings.device_value_form(rle, _leaf("fixed", 4), 2) == ("rle", 32)
    for leaf, nbuf in ((_leaf("fixed", 4), 1), (_leaf("fixed", 8), 2), (strings, 2)):
        with pytest.raises(DeviceUnsupported, match=r"^this Rle layout$"):
            encodings.device_value_form(rle, leaf, nbuf)
    general = pb.CompressiveEncoding()
    general.general.values.CopyFrom(flat)  # no device planning: refused by the registry
    with pytest.raises(DeviceUnsupported, match=r"^general values in mini-block pages$"):
        encodings.device_value_form(general, _leaf("fixed", 4), 1)
    with pytest.raises(DeviceUnsupported, match=r"^general strings$"):
        encodings.device_value_form(general, strings, 1)
    with pytest.raises(DeviceUnsupported, match=r"^out_of_line_bitpacking values in mini-block pages$"):
        encodings.device_value_form(_levels("out_of_line_bitpacking"), _leaf("fixed", 2), 1)


def test_level_and_full_zip_forms_through_the_registry():
    for kind in ("flat", "inline_bitpacking", "out_of_line_bitpacking", "rle"):
        assert encodings.device_level_form(_levels(kind)) == kind
        with pytest.raises(DeviceUnsupported, match=rf"^{kind} repetition/definition levels$"):
            encodings.device_level_form(_levels(kind, 32))
    with pytest.raises(DeviceUnsupported, match=r"^variable repetition/definition levels$"):
        encodings.device_level_form(_variable(32))
    # the group key of levels: their form, and what their emission reads besides (out-of-line widths)
    ool = _levels("out_of_line_bitpacking")
    assert encodings.device_level_key(ool) == ("out_of_line_bitpacking", 3)
    ool.out_of_line_bitpacking.values.flat.bits_per_value = 5
    assert encodings.device_level_key(ool) == ("out_of_line_bitpacking", 5)
    for kind in ("flat", "inline_bitpacking", "rle"):
        assert encodings.device_level_key(_levels(kind)) == (kind,)
    with pytest.raises(DeviceUnsupported, match=r"^variable repetition/definition levels$"):
        encodings.device_level_key(_variable(32))
    assert encodings.device_full_zip_form(_levels("flat", 32)) == ("flat", (1, 32))
    assert encodings.device_full_zip_form(_variable(32)) == ("var",)
    assert encodings.device_full_zip_form(_levels("rle")) is None
    assert encodings.device_full_zip_form(pb.CompressiveEncoding()) is None  # an empty oneof


def test_fixed_size_lists_are_flat_items_without_item_validity():
    """Nested FixedSizeList(2, FixedSizeList(3, Flat32)) is 6 items of 32 bits per value, in
    mini-block and full-zip pages alike; compressed Flat items leave it to the CPU; item
    validity at a layer makes it the ``fsl_valid`` form (mini-block pages: a chunk buffer per
    such layer before the items; full-zip pages: each row's validity bytes before its items)."""
    enc = pb.CompressiveEncoding()
    enc.fixed_size_list.items_per_value = 2
    inner = enc.fixed_size_list.values.fixed_size_list
    inner.items_per_value = 3
    inner.values.flat.bits_per_value = 32
    assert fixed_size_list_plan.flat_items(enc) == (6, 32)
    assert encodings.device_full_zip_form(enc) == ("flat", (6, 32))
    assert encodings.device_value_form(enc, _leaf("fixed", 24), 1) == ("flat", (6, 32))
    with pytest.raises(DeviceUnsupported, match=r"^32-bit Flat values for int32$"):
        encodings.device_value_form(enc, _leaf("fixed", 4), 1)
    inner.values.flat.data.scheme = 1
    assert fixed_size_list_plan.flat_items(enc) is None and encodings.device_full_zip_form(enc) is None
    inner.values.flat.ClearField("data")
    inner.has_validity = True
    assert fixed_size_list_plan.flat_items(enc) is None
    with pytest.raises(DeviceUnsupported, match=r"^fixed-size list with item validity in 1 chunk buffers$"):
        encodings.device_value_form(enc, _leaf("fixed", 24), 1)
    assert encodings.device_value_form(enc, _leaf("fixed", 24), 2) == ("fsl_valid", (6, 32, ((2, 6),)))
    assert encodings.device_full_zip_form(enc) == ("fsl_valid", (6, 32, ((2, 6),)))  # (walked: the inner layer's bytes)


def test_full_zip_fixed_size_lists_with_item_validity_are_split_by_the_walk():
    """One layer of FixedSizeList{has_validity} over whole-byte Flat items in a full-zip
    page is the ``fsl_valid`` form (the walk splits each row's validity bytes from its
    items); over booleans, or nested, it is left to the CPU."""
    enc = pb.CompressiveEncoding()
    enc.fixed_size_list.items_per_value = 13
    enc.fixed_size_list.has_validity = True
    enc.fixed_size_list.values.flat.bits_per_value = 16
    assert encodings.device_full_zip_form(enc) == ("fsl_valid", (13, 16, ((0, 13),)))
    assert fixed_size_list_plan.validity_bytes(13) == 2 and fixed_size_list_plan.validity_bytes(64) == 8
    enc.fixed_size_list.values.flat.bits_per_value = 1
    assert encodings.device_full_zip_form(enc) is None
    nested = pb.CompressiveEncoding()  # 2 lists of 13 (two layers: 1 + 4 validity bytes a row, walked into two regions)
    nested.fixed_size_list.items_per_value = 2
    nested.fixed_size_list.has_validity = True
    enc.fixed_size_list.values.flat.bits_per_value = 16
    nested.fixed_size_list.values.CopyFrom(enc)
    assert encodings.device_full_zip_form(nested) == ("fsl_valid", (26, 16, ((0, 2), (2, 26))))
    assert fixed_size_list_plan.row_validity_bytes(((0, 2), (2, 26))) == 5
    triple = pb.CompressiveEncoding()  # three layers with item validity: the CPU
    triple.fixed_size_list.items_per_value = 2
    triple.fixed_size_list.has_validity = True
    triple.fixed_size_list.values.CopyFrom(nested)
    assert encodings.device_full_zip_form(triple) is None


def test_inline_word_is_the_packed_word_of_inline_bitpacking_only():
    assert bitpacking_plan.inline_word(_levels("inline_bitpacking", 32)) == 4
    assert bitpacking_plan.inline_word(_levels("out_of_line_bitpacking")) == 0
    assert bitpacking_plan.inline_word(_levels("flat", 32)) == 0


@pytest.fixture(scope="module")
def pylance_datasets(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    lance = pytest.importorskip("lance")
    sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
    import gpu_datasets as gd

    root = tmp_path_factory.mktemp("encoding_gpu_plans")
    return [gd.write_rich(lance, root, "2.1"), gd.write_rich(lance, root, "2.2"), gd.write_fsst(lance, root),
            gd.write_binary(lance, root), gd.write_many_pages(lance, root, "2.2"), gd.write_fallback(lance, root)]


def _value_pages(uri: str):
    """``(layout, buffers, num_rows, leaf, ctx)`` of every mini-block page with values and
    without a dictionary of every leaf column of a dataset's data files."""
    import lance_gpu
    from lance_gpu.file.arrow import leaf_types
    from lance_gpu.file.reader import parse_layout
    from lance_gpu.gpu.plan import leaf_kind

    snap = lance_gpu.dataset(uri)._snapshot
    for frag in snap.fragments:
        for f in snap.lance_schema.fields:
            src = frag.field_source(f)
            if src is None:
                continue
            reader = frag.file_reader(src.path)
            for column, t in zip(src.columns, leaf_types(f.to_arrow().type), strict=True):
                try:
                    kind, width = leaf_kind(t)
                except DeviceUnsupported:
                    continue
                for page in reader.column(column).pages:
                    ctx = DecodeContext(reader.path, column)
                    layout = parse_layout(page, ctx)
                    mb = layout.mini_block_layout
                    if layout.WhichOneof("layout") != "mini_block_layout" or mb.HasField("dictionary") or not mb.num_buffers:
                        continue
                    bufs = reader.read_buffers(list(zip(page.buffer_offsets, page.buffer_sizes, strict=True)))
                    yield mb, bufs, page.num_rows, _leaf(kind, width, t), ctx


def test_value_forms_of_pylance_pages_match_what_the_cpu_decoder_decodes(pylance_datasets):
    """Every mini-block page pylance wrote (flat and bit-packed integers, floats, booleans,
    fixed-size lists, plain and FSST strings, binary, byte-stream-split): where the device
    planning takes its values, the CPU decoder decodes the page to values of the width the
    form promises (fixed: ``8 * width`` bits, ``items * bits`` of Flat; booleans: one bit per
    item; strings: variable width) and the form's family has a registered emitter; where it
    does not, it says why."""
    from lance_gpu.file.v2_1 import miniblock

    forms, refused = set(), set()
    for uri in pylance_datasets:
        for mb, bufs, num_rows, leaf, ctx in _value_pages(uri):
            try:
                family, arg = encodings.device_value_form(mb.value_compression, leaf, int(mb.num_buffers))
            except DeviceUnsupported as exc:
                refused.add(str(exc))
                continue
            forms.add(family)
            values = miniblock.decode(mb, bufs, num_rows, ctx).values
            if family == "var":
                assert isinstance(values, VariableWidthBlock)
                continue
            assert isinstance(values, FixedWidthBlock)
            if family == "flat":
                dim, bits = arg
                assert values.bits_per_value == dim * bits
                assert values.bits_per_value == (leaf.width if leaf.kind == "bool" else 8 * leaf.width)
            else:
                assert values.bits_per_value == arg == 8 * leaf.width
    assert {"var", "flat", "inline_bitpacking", "rle"} <= forms, forms
    for family in forms:  # every form met has its encoding's emission
        assert callable(encodings.device_value_emitter(family)), family
    assert any("values in mini-block pages" in r for r in refused), refused  # byte-stream-split / general
