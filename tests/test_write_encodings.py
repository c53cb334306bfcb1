# SPDX-License-Identifier: Apache-2.0
"""Encoder functions and encoding choices of the writer, checked against our decoders and
against what pylance 14 writes for the same data; and file sizes against pylance's."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.file.blocks import VariableWidthBlock
from lance_gpu.file.container import LanceFileReader
from lance_gpu.file.encodings import bitpacking, flat, fsst, general, variable
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext
from lance_gpu.file.reader import parse_layout

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")
CTX = DecodeContext("<test>")


# --------------------------------------------------------------------------------------------
# encoder functions against the decoders


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_one_block_shortcuts_agree_with_the_general_forms(bits):
    """Pages of at most one block / chunk take shortcuts (the bit width as the OR's bit
    length, no kernel; Python integers for the chunk's counts and sizes): the same widths as
    the kernel's, the same inline size and chunks as the general formulas, at every size
    around the block boundary, zeros and full-width values included."""
    from cuda_kernels.bitunpack import block_bit_widths as kernel_widths

    rng = np.random.default_rng(bits)
    dt = np.dtype(f"<u{bits // 8}")
    for n in (0, 1, 2, 16, 1023, 1024, 1025, 3000):
        for top in (1, 2 ** (bits // 2), 2**bits):
            values = rng.integers(0, top, n, dtype=np.uint64).astype(dt) if n else np.zeros(0, dt)
            widths = bitpacking.block_bit_widths(values)
            assert widths.dtype == np.int64
            assert widths.tolist() == kernel_widths(values).tolist()
            assert bitpacking.inline_size(widths, bits) == int((128 * widths).sum()) + widths.size * (bits // 8)
            data = values.view(np.uint8)
            chunks = flat.encode_miniblock(data, bits, n)
            vpc = flat.values_per_chunk(bits)
            nchunks = max(1, -(-n // vpc))
            counts = [vpc] * (nchunks - 1) + [n - vpc * (nchunks - 1)]
            assert chunks.counts.tolist() == counts
            sizes = [(c * bits + 7) // 8 for c in counts[:-1]]
            assert chunks.buffers[0][1].tolist() == [*sizes, data.size - sum(sizes)]


@pytest.mark.parametrize("bits", [8, 16, 32, 64])
def test_inline_bitpacking_round_trip(bits):
    rng = np.random.default_rng(bits)
    dt = np.dtype(f"<u{bits // 8}")
    values = rng.integers(0, 2 ** (bits - 3), 3000, dtype=np.uint64).astype(dt)
    values[1024:2048] = 0  # a block of width 0
    values[2048:2100] = np.iinfo(dt).max  # a block of full width
    chunks = bitpacking.encode_miniblock(values)
    assert chunks.counts.tolist() == [1024, 1024, 952]
    assert chunks.log2_counts.tolist() == [10, 10, 0]
    data, sizes = chunks.buffers[0]
    widths = bitpacking.block_bit_widths(values)
    assert widths.tolist() == [bits - 3, 0, bits]
    assert sizes.tolist() == [(1 + 1024 * w // bits) * bits // 8 for w in widths]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    cb = ChunkBuffers(data, starts, sizes, chunks.counts)
    got = bitpacking.decode_miniblock(chunks.encoding.inline_bitpacking, [cb], CTX)
    assert np.array_equal(got.as_uint(), values)


@pytest.mark.parametrize("n,width", [(1024, 1), (3000, 2), (5, 1), (1000, 3), (2047, 16 - 1)])
def test_out_of_line_bitpacking_round_trip(n, width):
    rng = np.random.default_rng(n)
    values = rng.integers(0, 2**width, n).astype(np.uint16)
    raw = bitpacking.encode_out_of_line(values, width)
    enc = bitpacking.out_of_line_encoding(16, width).out_of_line_bitpacking
    got = bitpacking.decode_block(enc, raw, n, CTX)
    assert np.array_equal(got.as_uint(), values)
    # the tail is padded to a block only when that costs fewer bits than packing saves
    tail = n % 1024
    padded = tail and width * (1024 - tail) < (16 - width) * tail
    assert raw.size == (n // 1024 + (1 if padded else 0)) * 128 * width + (0 if padded else tail * 2)


def test_bitpacking_is_chosen_only_when_smaller(tmp_path):
    rng = np.random.default_rng(0)
    n = 20000
    cols = {}
    for bits, dt in ((8, np.uint8), (16, np.uint16), (32, np.uint32), (64, np.uint64)):
        for w in (bits - 2, bits - 1):
            cols[f"u{bits}_w{w}"] = pa.array((rng.integers(0, 2**w, n, dtype=np.uint64) | np.uint64(2 ** (w - 1))).astype(dt))
    tbl = pa.table(cols)
    kinds = _value_kinds(_write_ours(tmp_path, tbl))
    # 64-bit values needing 63 bits: 20 chunks of 1024*63/8 + 8 bytes exceed the plain 160000 bytes
    expected = {k: "inline_bitpacking" for k in cols}
    expected["u64_w63"] = "flat"
    assert kinds == expected
    assert kinds == _value_kinds(_write_pylance(tmp_path, tbl))


@pytest.mark.parametrize("bits,expected", [(1, 4096), (8, 4096), (16, 2048), (32, 1024), (64, 512), (128, 256), (24, 2048), (2040, 32)])
def test_flat_values_per_chunk(bits, expected):
    assert flat.values_per_chunk(bits) == expected


def test_flat_chunks_decode():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 2**63, 1300, dtype=np.uint64)
    chunks = flat.encode_miniblock(values.view(np.uint8), 64, values.size)
    assert chunks.counts.tolist() == [512, 512, 276]
    data, sizes = chunks.buffers[0]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    got = flat.decode_miniblock(chunks.encoding.flat, [ChunkBuffers(data, starts, sizes, chunks.counts)], CTX)
    assert np.array_equal(got.as_bytes().view(np.uint64), values)


@pytest.mark.parametrize("offset_bits", [32, 64])
def test_variable_chunks_round_trip(offset_bits):
    rng = np.random.default_rng(offset_bits)
    strs = [rng.bytes(int(rng.integers(0, 60))) for _ in range(5000)]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in strs])]).astype(np.int64)
    data = np.frombuffer(b"".join(strs), np.uint8)
    chunks = variable.encode_miniblock(offsets, data, offset_bits)
    buf, sizes = chunks.buffers[0]
    assert np.all(sizes % (offset_bits // 8) == 0)
    # power-of-two chunks that fit 4 KiB, the last one takes the rest
    c = chunks.counts
    assert np.all((c[:-1] & (c[:-1] - 1)) == 0)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    got = variable.decode_miniblock(chunks.encoding.variable, [ChunkBuffers(buf, starts, sizes, c)], CTX)
    assert np.array_equal(got.offsets, offsets) and np.array_equal(got.data, data)
    block = variable.encode_block(offsets, data, offset_bits)
    got = variable.decode_block(chunks.encoding.variable, block, 5000, CTX)
    assert np.array_equal(got.offsets, offsets) and np.array_equal(got.data, data)


def test_variable_chunk_bounds_rule():
    # 16-byte values with 4-byte offsets: 128 per chunk (129*4 + 128*16 <= 4096, 256 would not fit)
    offsets = np.arange(0, 16 * 20001, 16, dtype=np.int64)
    counts = np.diff(variable.chunk_bounds(offsets, 4))
    assert counts[:-1].tolist() == [128] * 155 and counts[-1] == 160


def test_general_round_trip():
    data = np.frombuffer(b"lance " * 1000, np.uint8)
    for scheme in (general.LZ4, general.ZSTD):
        comp = general.compress(scheme, data)
        assert len(comp) < data.size
        enc = type("C", (), {"scheme": scheme})()
        assert np.array_equal(general.decompress(enc, comp, CTX), data)


def test_rle_round_trip():
    from lance_gpu.file.encodings import rle

    rng = np.random.default_rng(4)
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        values = np.repeat(rng.integers(0, 200, 400), rng.integers(1, 700, 400)).astype(dt)
        assert rle.run_count(values) <= 400
        chunks = rle.encode_miniblock(values)
        c = chunks.counts
        assert np.all((c[:-1] & (c[:-1] - 1)) == 0) and c[:-1].max() <= 4096 and c.sum() == values.size
        (vdata, vsizes), (ldata, lsizes) = chunks.buffers
        assert np.all(vsizes + lsizes <= flat.MAX_MINIBLOCK_BYTES)
        bufs = [ChunkBuffers(d, np.concatenate([[0], np.cumsum(z)[:-1]]), z, c) for d, z in ((vdata, vsizes), (ldata, lsizes))]
        got = rle.decode_miniblock(chunks.encoding.rle, bufs, CTX)
        assert np.array_equal(got.as_uint(), values)
    # every value distinct: chunks shrink until their runs fit
    values = np.arange(5000, dtype=np.uint64)
    chunks = rle.encode_miniblock(values)
    assert chunks.counts[0] == 512  # 512 runs * (8 + 1) bytes <= 8186


def test_fsst_round_trip():
    rng = np.random.default_rng(2)
    words = ["alpha", "beta", "gamma", "delta", "lorem", "ipsum", "quick", "brown", "fox", ""]
    strs = [" ".join(rng.choice(words, int(rng.integers(0, 12)))).encode() for _ in range(20000)]
    strs[7] = bytes(range(256))  # bytes no symbol covers: escapes
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in strs])]).astype(np.int64)
    data = np.frombuffer(b"".join(strs), np.uint8)
    table, co, cd = fsst.compress_strings(offsets, data)
    assert len(table) == fsst.SYMBOL_TABLE_SIZE
    assert cd.size < 0.5 * data.size
    st = fsst.SymbolTable(table, CTX)
    assert st.compressed and 0 < st.n_symbols <= 255
    got = fsst.decompress(st, VariableWidthBlock(co, cd), CTX)
    assert np.array_equal(got.offsets, offsets) and np.array_equal(got.data, data)


# --------------------------------------------------------------------------------------------
# encoding choices, compared with pylance's for the same data


def _write_ours(tmp_path, tbl, version="2.2", name="ours"):
    uri = str(tmp_path / f"{name}_{version}")
    lance_gpu.write_dataset(tbl, uri, data_storage_version=version)
    return uri


def _write_pylance(tmp_path, tbl, version="2.2"):
    uri = str(tmp_path / f"pylance_{version}")
    lance.write_dataset(tbl, uri, data_storage_version=version)
    return uri


def _layouts(uri):
    path = sorted(glob.glob(os.path.join(uri, "data", "*.lance")))[0]
    reader = LanceFileReader(path)
    out = []
    for c in range(reader.num_columns):
        page = reader.column(c).pages[0]
        layout = parse_layout(page, DecodeContext(path, c))
        out.append((reader, page, layout))
    return out


def _value_kinds(uri):
    out = {}
    names = pa.schema(lance.dataset(uri).schema).names
    for name, (_r, _p, layout) in zip(names, _layouts(uri)):
        mb = layout.mini_block_layout
        out[name] = mb.value_compression.WhichOneof("compression")
    return out


def _chain(enc) -> str:
    parts = []
    while enc is not None and enc.WhichOneof("compression"):
        kind = enc.WhichOneof("compression")
        m = getattr(enc, kind)
        if kind == "flat":
            parts.append(f"flat{m.bits_per_value}")
            break
        if kind == "inline_bitpacking":
            parts.append(f"inline{m.uncompressed_bits_per_value}")
            break
        if kind == "variable":
            parts.append(f"variable{m.offsets.flat.bits_per_value}")
            break
        parts.append(kind if kind != "fixed_size_list" else f"fsl{m.items_per_value}")
        enc = m.values
    return ">".join(parts)


def _signature(reader, page, layout):
    kind = layout.WhichOneof("layout")
    m = getattr(layout, kind)
    if kind == "mini_block_layout":
        rep_index = None
        if m.repetition_index_depth:
            rep_index = reader.read_buffers([(page.buffer_offsets[-1], page.buffer_sizes[-1])])[0].tobytes()
        return (kind, _chain(m.value_compression), _chain(m.dictionary) if m.HasField("dictionary") else None,
                tuple(m.layers), m.num_buffers, m.has_large_chunk, page.buffer_sizes[0], rep_index)
    if kind == "full_zip_layout":
        return (kind, _chain(m.value_compression), m.bits_rep, m.bits_def, m.WhichOneof("details"), tuple(m.layers))
    return (kind, tuple(m.layers), m.HasField("inline_value"))


def _mixed(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)

    def lists(null_p, empty_p):
        return pa.array([None if r < null_p else ([] if r < null_p + empty_p else rng.integers(0, 1000, rng.integers(1, 6)).astype(np.int32).tolist())
                         for r in rng.random(n)], pa.list_(pa.int32()))

    return pa.table({
        "i64_small": rng.integers(0, 100, n), "i64_seq": np.arange(n), "i64_neg": rng.integers(-1000, 1000, n) * 10**9,
        "i32_const": np.full(n, 7, np.int32),
        "i32_null": pa.array(rng.integers(0, 10**6, n).astype(np.int32), mask=rng.random(n) < 0.1),
        "allnull": pa.nulls(n, pa.int32()), "f32": rng.random(n).astype(np.float32), "f64": rng.standard_normal(n),
        "f16": rng.random(n).astype(np.float16), "b": rng.random(n) < 0.5, "u8": rng.integers(0, 256, n).astype(np.uint8),
        "ts": pa.array(rng.integers(0, 10**12, n), pa.timestamp("us")),
        "d32": pa.array(rng.integers(0, 30000, n).astype(np.int32)).cast(pa.date32()),
        "s_low": rng.choice(["a", "bb", "ccc", "dddd"], n),
        "s_hi": [f"str-{i}-{rng.integers(0, 10**9)}" for i in range(n)],
        "s_null": pa.array([f"name-{rng.integers(0, 10**9)}" for _ in range(n)], mask=rng.random(n) < 0.1),
        "bin16": [rng.bytes(16) for _ in range(n)], "fsb": pa.array([rng.bytes(16) for _ in range(n)], pa.binary(16)),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 128).astype(np.float32)), 128),
        "fsl8n": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8).astype(np.float32)), 8, mask=pa.array(rng.random(n) < 0.1)),
        "fsl_i8": pa.FixedSizeListArray.from_arrays(pa.array(rng.integers(-100, 100, n * 64).astype(np.int8)), 64),
        "list_ne": lists(0.1, 0.1), "list_e": lists(0, 0.2), "list_n": lists(0.2, 0), "list_v": lists(0, 0),
        "list_s": pa.array([None if rng.random() < 0.1 else list(rng.choice(["a", "b", "c"], rng.integers(0, 4))) for _ in range(n)], pa.list_(pa.string())),
        "st2": pa.StructArray.from_arrays([pa.array(rng.integers(0, 10**6, n).astype(np.int32)), pa.array(rng.choice(["p", "q"], n))], ["a", "b"]),
        "str_long": [rng.bytes(150).hex() for _ in range(n)],
        "str_long_null": pa.array([rng.bytes(150).hex() for _ in range(n)], mask=rng.random(n) < 0.1),
        "bin_long": [rng.bytes(300) for _ in range(n)],
        "dec": pa.array([int(x) for x in rng.integers(-(10**15), 10**15, n)], pa.decimal128(20, 2)),
        "dec_low": pa.array([int(x) for x in rng.choice(rng.integers(-(10**15), 10**15, 50), n)], pa.decimal128(20, 2)),
        "i64_runs": np.repeat(rng.integers(-(10**12), 10**12, n // 50), 50),
        "i32_runs": np.repeat(rng.integers(0, 10**6, n // 20).astype(np.int32), 20),
        "s_runs": np.repeat([f"cat-{i}" for i in rng.integers(0, 30, n // 100)], 100),
        "u8_runs": np.repeat(rng.integers(0, 256, n // 10).astype(np.uint8), 10),
        "runs_null": pa.array(np.repeat(rng.integers(0, 1000, n // 25), 25), mask=rng.random(n) < 0.01),
        "dict_items_ool": rng.permutation(np.resize(rng.choice(2**40, 1100, replace=False), n)),
    })


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_encodings_match_pylance(tmp_path, version):
    """Layout, value compression (bitpacking, RLE, FSST ...), dictionary and its item
    encoding, layers, chunk count and repetition index are those pylance picks."""
    tbl = _mixed(5000)
    ours = _layouts(_write_ours(tmp_path, tbl, version))
    theirs = _layouts(_write_pylance(tmp_path, tbl, version))
    names = []
    for f in tbl.schema:
        names += [f.name] * (f.type.num_fields if pa.types.is_struct(f.type) else 1)
    diffs = {}
    for name, a, b in zip(names, ours, theirs):
        sa, sb = _signature(*a), _signature(*b)
        if sa != sb:
            diffs[name] = (sa, sb)
    assert not diffs, diffs
    assert lance.dataset(str(tmp_path / f"ours_{version}")).to_table().equals(tbl)


def test_compression_metadata(tmp_path):
    rng = np.random.default_rng(3)
    n = 20000
    none = {b"lance-encoding:compression": b"none"}
    schema = pa.schema([
        pa.field("i", pa.int64(), metadata=none),
        pa.field("s", pa.string(), metadata=none),
        pa.field("low", pa.string(), metadata=none),
        pa.field("c", pa.int32(), metadata=none),
        pa.field("fz", pa.int64(), metadata={b"lance-encoding:structural-encoding": b"fullzip"}),
        pa.field("mb", pa.string(), metadata={b"lance-encoding:structural-encoding": b"miniblock"}),
        pa.field("fs", pa.string(), metadata={b"lance-encoding:compression": b"fsst"}),
    ])
    tbl = pa.table({
        "i": np.arange(n), "s": [f"word-{i % 977}-{i}" for i in range(n)], "low": rng.choice(["x", "y"], n),
        "c": np.full(n, 3, np.int32), "fz": np.arange(n), "mb": [rng.bytes(300).hex() for _ in range(n // 10)] * 10,
        "fs": [f"k{i}" for i in range(n)],
    }, schema=schema)
    uri = _write_ours(tmp_path, tbl)
    got = {name: layout for name, (_r, _p, layout) in zip(tbl.column_names, _layouts(uri))}
    assert _chain(got["i"].mini_block_layout.value_compression) == "flat64"
    assert _chain(got["s"].mini_block_layout.value_compression) == "variable32"
    assert not got["low"].mini_block_layout.HasField("dictionary")
    assert got["c"].WhichOneof("layout") == "mini_block_layout"
    assert got["fz"].WhichOneof("layout") == "full_zip_layout"
    assert got["mb"].WhichOneof("layout") == "mini_block_layout"
    assert _chain(got["fs"].mini_block_layout.value_compression) == "fsst>variable32"
    ds = lance.dataset(uri)
    assert ds.to_table().equals(tbl)
    assert ds.schema.field("i").metadata == none  # field metadata is kept


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_general_compressed_miniblock_strings_as_pylance(tmp_path, version):
    """``lance-encoding:compression`` of ``zstd`` / ``lz4`` on a page of 32 KiB of strings:
    pylance skips FSST and compresses each mini-block chunk (``General{scheme}(Variable)``),
    our layout is the same -- chunk words, encoding, and for zstd the same buffer sizes --
    and each library reads the other's file (upstream ``test_compression``)."""
    def field(name, kind, **meta):
        return pa.field(name, kind, metadata={f"lance-encoding:{k.replace('_', '-')}": v for k, v in meta.items()})

    n = 10240
    words = [f"compress_me_please-{i}" for i in range(n)]
    schema = pa.schema([
        field("z", pa.string(), compression="zstd"),
        field("l", pa.string(), compression="lz4"),
        field("b", pa.large_binary(), compression="zstd", compression_level="3"),
        pa.field("plain", pa.string()),
    ])
    tbl = pa.table({"z": words, "l": [w if i % 7 else None for i, w in enumerate(words)],
                    "b": [w.encode() for w in words], "plain": words}, schema=schema)
    ours, theirs = _write_ours(tmp_path, tbl, version), _write_pylance(tmp_path, tbl, version)
    for name, (got, expected) in zip(tbl.column_names, zip(_layouts(ours), _layouts(theirs), strict=True), strict=True):
        assert _signature(*got) == _signature(*expected), name
        if name in ("z", "b"):  # libzstd's frames: the same sizes
            assert got[1].buffer_sizes == expected[1].buffer_sizes, name
    kinds = {name: _chain(layout.mini_block_layout.value_compression) for name, (_r, _p, layout) in
             zip(tbl.column_names, _layouts(ours), strict=True)}
    assert kinds["z"] == kinds["l"] == "general>variable32" and kinds["b"] == "general>variable64"
    assert kinds["plain"] == "fsst>variable32"
    small = pa.table({"small": [f"c{i}" for i in range(300)]}, pa.schema([field("small", pa.string(), compression="zstd")]))
    got, expected = _layouts(_write_ours(tmp_path, small, version, "small"))[0], _layouts(_write_pylance(tmp_path / "p", small, version))[0]
    assert _signature(*got) == _signature(*expected) and _chain(got[2].mini_block_layout.value_compression) == "variable32"
    for uri in (ours, theirs):
        assert lance.dataset(uri).to_table().equals(tbl)
        assert lance_gpu.dataset(uri).to_table().equals(tbl)
    assert sum(os.path.getsize(p) for p in glob.glob(os.path.join(ours, "data", "*.lance"))) < \
        sum(os.path.getsize(p) for p in glob.glob(os.path.join(_write_ours(tmp_path, tbl.replace_schema_metadata(None).cast(
            pa.schema([pa.field(f.name, f.type) for f in schema])), version, "nometa"), "data", "*.lance")))


def test_chunk_grammar(tmp_path):
    """2.1 mini-block pages use u16 chunk words and sizes, 2.2 u32 and has_large_chunk."""
    tbl = pa.table({"f": np.random.default_rng(0).standard_normal(3000)})
    for version, word in (("2.1", 2), ("2.2", 4)):
        (reader, page, layout) = _layouts(_write_ours(tmp_path, tbl, version))[0]
        mb = layout.mini_block_layout
        assert mb.has_large_chunk == (version == "2.2")
        assert page.buffer_sizes[0] == word * 6  # 512 f64 per chunk: 6 chunks
        meta = reader.read_buffers([(page.buffer_offsets[0], page.buffer_sizes[0])])[0]
        words = meta.view(np.uint16 if word == 2 else np.uint32)
        assert (words[0] & 0xF) == 9 and ((words[0] >> 4) + 1) * 8 == 4104
        assert page.buffer_offsets[0] % 64 == 0 and page.buffer_offsets[1] % 64 == 0


# --------------------------------------------------------------------------------------------
# file sizes


def _benchmark_like(n: int) -> pa.Table:
    rng = np.random.default_rng(0)
    cats = np.array(["electronics", "books", "clothing", "home", "garden", "toys", "sports", "food"])
    words = np.array(["alpha", "beta", "gamma", "delta", "lorem", "ipsum", "dolor", "sit", "amet", "quick", "brown", "fox"])
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "user_id": pa.array(rng.integers(0, 50_000, n)),
        "category": pa.array(rng.choice(cats, n)),
        "price": pa.array(np.round(rng.random(n) * 1000, 2)),
        "quantity": pa.array(rng.integers(1, 20, n).astype(np.int32)),
        "ts": pa.array(1_700_000_000_000_000 + np.sort(rng.integers(0, 10**12, n)), pa.timestamp("us")),
        "flag": pa.array(rng.random(n) < 0.3),
        "score": pa.array(rng.standard_normal(n).astype(np.float32), mask=rng.random(n) < 0.05),
        "name": pa.array([f"user_{i}_{rng.integers(0, 10**6)}" for i in range(n)]),
        "comment": pa.array([" ".join(rng.choice(words, rng.integers(3, 12))) for _ in range(n)]),
        "tags": pa.array([list(rng.choice(cats, rng.integers(0, 4))) for _ in range(n)], pa.list_(pa.string())),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 32).astype(np.float32)), 32),
    })


@pytest.fixture(scope="module")
def benchmark_table() -> pa.Table:
    return _benchmark_like(100_000)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_file_size_vs_pylance(tmp_path, version, benchmark_table, record_property, capsys):
    """Data files of a mixed benchmark-like table are no more than 1.1x pylance's."""
    tbl = benchmark_table
    ours = _write_ours(tmp_path, tbl, version)
    theirs = _write_pylance(tmp_path, tbl, version)

    def size(uri):
        return sum(os.path.getsize(p) for p in glob.glob(os.path.join(uri, "data", "*.lance")))

    ratio = size(ours) / size(theirs)
    record_property("size_ratio", ratio)
    with capsys.disabled():
        print(f"\n[{version}] data bytes: lance-gpu {size(ours)}, pylance {size(theirs)}, ratio {ratio:.3f}")
    assert ratio <= 1.1
    assert lance.dataset(ours).to_table().equals(tbl)


@pytest.mark.parametrize(
    "array",
    [
        pa.array([1, None, 3, 4, None], pa.int64()),
        pa.array(np.arange(16, dtype=np.float64)),
        pa.array([[1, 2], None, [], [3, None, 5]], pa.list_(pa.int32())),
        pa.FixedSizeListArray.from_arrays(pa.array(np.arange(24, dtype=np.float32)), 8),
        pa.array([True, None, False, True]),
        pa.array(["a", None, "bcd", ""]),
        pa.array([[["x"], []], None, [["y", None]]], pa.list_(pa.list_(pa.string()))),
    ],
)
def test_one_chunk_pages_assemble_as_the_general_path(array, monkeypatch):
    """A page of one mini-block chunk is joined section by section; the bytes are those of
    the general (per-chunk scatter) assembly."""
    from lance_gpu.file.writer import pages
    from lance_gpu.file.writer.shred import shred
    from lance_gpu.table.schema import LanceSchema

    field = LanceSchema.from_arrow(pa.schema([pa.field("c", array.type)])).fields[0]
    scattered: list[bool] = []
    real_scatter, real_assemble = pages.PageBackend.scatter, pages._assemble_chunks

    def counted_scatter(self, *args):
        scattered.append(self is pages.HOST)
        real_scatter(self, *args)

    monkeypatch.setattr(pages.PageBackend, "scatter", counted_scatter)
    fast = [pages.encode_leaf(leaf, 2) for leaf in shred(array, field)]
    assert True not in scattered  # the host's one-chunk pages were joined, not scattered
    # another backend than the host's: the general path
    monkeypatch.setattr(pages, "_assemble_chunks", lambda *args: real_assemble(*args[:6], pages.PageBackend()))
    general_path = [pages.encode_leaf(leaf, 2) for leaf in shred(array, field)]
    assert len(fast) == len(general_path)
    for a, b in zip(fast, general_path, strict=True):
        assert a.layout == b.layout
        assert [bytes(np.asarray(x).data) for x in a.buffers] == [bytes(np.asarray(x).data) for x in b.buffers]


@pytest.mark.parametrize(
    "array",
    [
        pa.array([1, None, 3], pa.int64()),
        pa.array(np.arange(5, dtype=np.uint16)),
        pa.array([1.5, None], pa.float32()),
        pa.array([True, None, False]),
        pa.array(["a", None, "bcd"]),
        pa.array([b"x", b""], pa.large_binary()),
        pa.array(["p", None], pa.large_string()),
        pa.array([b"ab", None, b"cd"], pa.binary(2)),
        pa.array([1, None], pa.date32()),
        pa.array([1, 2], pa.timestamp("us", tz="UTC")),
        pa.array([1, None], pa.decimal128(5, 2)),
        pa.array([None, None], pa.null()),
        pa.array(["v", None], pa.string_view()),
        pa.FixedSizeListArray.from_arrays(pa.array(np.arange(6, dtype=np.float32)), 3),
        pa.array([{"a": 1}, None], pa.struct([("a", pa.int8())])),
        pa.array(["k", "k", None]).dictionary_encode(),
    ],
)
def test_top_level_plain_leaves_shred_as_the_general_path(array, monkeypatch):
    """A top-level array of a plain type (not nested, a dictionary, nulls, a view or an
    extension) is its own leaf at once; the leaf is what the general walk makes of it, and
    other types still take that walk."""
    from lance_gpu.file.writer import shred as shred_module
    from lance_gpu.table.schema import LanceSchema

    field = LanceSchema.from_arrow(pa.schema([pa.field("c", array.type)])).fields[0]
    quick = shred_module.shred(array, field)
    plain = array.type.id in shred_module._PLAIN_LEAF_IDS
    monkeypatch.setattr(shred_module, "_PLAIN_LEAF_IDS", frozenset())
    walked = shred_module.shred(array, field)
    assert len(quick) == len(walked)
    for a, b in zip(quick, walked, strict=True):
        assert a.values.equals(b.values) and a.values.type == b.values.type
        assert (a.layers, a.num_levels, a.num_rows, a.rep) == (b.layers, b.num_levels, b.num_rows, b.rep)
        assert (a.def_ is None) == (b.def_ is None) and (a.def_ is None or np.array_equal(a.def_, b.def_))
        assert (a.dictionary is None) == (b.dictionary is None)
    t = array.type
    expected = (pa.types.is_primitive(t) or shred_module.is_variable(t) or pa.types.is_fixed_size_binary(t)
                or pa.types.is_decimal(t)) and not (pa.types.is_null(t) or pa.types.is_fixed_size_list(t))
    assert plain == expected


@pytest.mark.parametrize("rows", [16, 200_000])
def test_small_pieces_of_a_file_are_written_together_with_the_same_bytes(tmp_path, rows, monkeypatch):
    """The writer gathers a file's small pieces (page buffers, pads, metadata) and writes
    them together: a small file is one write to its handle; the file's bytes are those of
    writing every piece by itself, for small and large (directly written) pages alike."""
    from lance_gpu.file.writer import container
    from lance_gpu.io.local import LocalStore
    from lance_gpu.table.schema import LanceSchema
    from lance_gpu.write.file_writer import LanceFileWriter

    ids = np.arange(rows, dtype=np.int64)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(rows * 8, np.float32)), 8)
    table = pa.table({"id": ids, "s": pa.array([f"s{i % 97}" for i in ids]), "x": ids * 0.5, "emb": emb})
    schema = LanceSchema.from_arrow(table.schema)
    store = LocalStore()
    writes: list[int] = []
    real_open = LocalStore.open_writer

    def counting_open(self, path):
        writer = real_open(self, path)
        real_write = writer.write

        def write(data):
            writes.append(memoryview(data).nbytes)
            return real_write(data)

        writer.write = write
        return writer

    monkeypatch.setattr(LocalStore, "open_writer", counting_open)

    def written(name: str) -> bytes:
        writes.clear()
        w = LanceFileWriter(str(tmp_path / name), schema, 2, store=store)
        w.write(table)
        w.finish()
        return (tmp_path / name).read_bytes()

    gathered = written("gathered.lance")
    if rows == 16:
        assert len(writes) == 1
    else:
        assert max(writes) >= container.GATHER_BYTES  # big page buffers go out directly
    monkeypatch.setattr(container, "GATHER_BYTES", 1)
    alone = written("alone.lance")
    assert len(writes) > 10
    assert gathered == alone
    assert lance.file.LanceFileReader(str(tmp_path / "gathered.lance")).read_all().to_table().equals(table)
