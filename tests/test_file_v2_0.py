# SPDX-License-Identifier: Apache-2.0
"""The Lance 2.0 file reader (lance_gpu.file.v2_0) against pylance 14 as the reference."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

from lance_gpu.io import LOCAL, resolve
from lance_gpu._proto import encodings_v2_0_pb2 as pb  # noqa: E402
from lance_gpu.errors import (  # noqa: E402
    CorruptFileError,
    SchemaMismatchError,
    UnsupportedEncodingError,
)
from lance_gpu.file.container import ColumnInfo, LanceFileReader, PageInfo  # noqa: E402
from lance_gpu.file.encodings.base import DecodeContext  # noqa: E402
from lance_gpu.file.v2_0 import read_field, registry  # noqa: E402
from lance_gpu.file.v2_0.blocks import to_arrow  # noqa: E402
from lance_gpu.file.v2_0.page import PageSource  # noqa: E402
from lance_gpu.table.manifest import read_manifest, resolve_manifest  # noqa: E402

# --------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------


def _types_table(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    idx = np.arange(n)
    ints = {
        name: pa.array(rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, n, dtype=dt, endpoint=True))
        for name, dt in [
            ("i8", np.int8),
            ("i16", np.int16),
            ("i32", np.int32),
            ("i64", np.int64),
            ("u8", np.uint8),
            ("u16", np.uint16),
            ("u32", np.uint32),
            ("u64", np.uint64),
        ]
    }
    mask = idx % 7 == 3
    high = [f"value-{i}-{'x' * (i % 23)}" for i in range(n)]
    low = np.array(["red", "green", "blue", ""])[idx % 4]
    items = [[j * i % 1000 for j in range(i % 5)] if i % 9 else None for i in range(n)]
    structs = [{"a": int(i) if i % 5 else None, "b": f"s{i % 50}" if i % 3 else None} for i in range(n)]
    cols = {
        **ints,
        "f16": pa.array(rng.standard_normal(n).astype(np.float16)),
        "f32": pa.array(rng.standard_normal(n).astype(np.float32)),
        "f64": pa.array(np.where(mask, np.nan, rng.standard_normal(n))),
        "b": pa.array(rng.random(n) > 0.5),
        "b_null": pa.array([None if i % 5 == 0 else bool(i % 2) for i in range(n)], pa.bool_()),
        "s_low": pa.array(low),
        "s_low_null": pa.array([None if m else s for m, s in zip(mask, low)], pa.string()),
        "s_high": pa.array([None if m else s for m, s in zip(mask, high)], pa.string()),
        "ls": pa.array(high, pa.large_string()),
        "bin_low": pa.array([bytes([i % 3]) * 3 for i in range(n)], pa.binary()),
        "bin_high": pa.array([None if m else s.encode() for m, s in zip(mask, high)], pa.binary()),
        "lbin": pa.array([bytes([i % 256]) * (i % 9) for i in range(n)], pa.large_binary()),
        "s_empty": pa.array([""] * n, pa.string()),
        "fsb": pa.array([None if m else bytes([i % 256]) * 16 for i, m in zip(idx, mask)], pa.binary(16)),
        "dec": pa.array([None if m else int(i) * 1001 for i, m in zip(idx, mask)], pa.decimal128(20, 3)),
        "d32": pa.array(idx.astype(np.int32), pa.date32()),
        "d64": pa.array(idx.astype(np.int64) * 86_400_000, pa.date64()),
        "ts": pa.array(idx * 1_000_003, pa.timestamp("us")),
        "ts_tz": pa.array([None if m else int(i) * 17 for i, m in zip(idx, mask)], pa.timestamp("ns", tz="Europe/Paris")),
        "t64": pa.array(idx * 1000, pa.time64("us")),
        "t32": pa.array(idx.astype(np.int32), pa.time32("s")),
        "dur": pa.array(idx * 5, pa.duration("ms")),
        "fsl128": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 128).astype(np.float32)), 128),
        "fsl_i8": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.integers(-128, 128, n * 64).astype(np.int8)), 64
        ),
        "fsl_null": pa.FixedSizeListArray.from_arrays(
            pa.array([None if j % 5 == 0 else float(j) for j in range(n * 4)], pa.float64()),
            4,
            mask=pa.array(idx % 6 == 1),
        ),
        "fsl_bool": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 3) > 0.5), 3),
        "list_i32": pa.array(items, pa.list_(pa.int32())),
        "list_nullitems": pa.array(
            [[None if (i + j) % 4 == 0 else j for j in range(i % 4)] for i in range(n)], pa.list_(pa.int64())
        ),
        "large_list": pa.array(items, pa.large_list(pa.int64())),
        "list_str": pa.array(
            [[f"w{(i * j) % 97}" for j in range(i % 4)] if i % 10 else None for i in range(n)],
            pa.list_(pa.string()),
        ),
        "list_list": pa.array(
            [[[j] * (j % 3) for j in range(i % 3)] if i % 8 else [] for i in range(n)],
            pa.list_(pa.list_(pa.int16())),
        ),
        "list_fsl": pa.array([[[i % 100, 1]] * (i % 3) for i in range(n)], pa.list_(pa.list_(pa.int8(), 2))),
        "struct": pa.array(structs, pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "list_struct": pa.array(
            [[{"x": j, "y": f"y{j}"} for j in range(i % 3)] if i % 4 else None for i in range(n)],
            pa.list_(pa.struct([("x", pa.int16()), ("y", pa.string())])),
        ),
        "struct_nested": pa.array(
            [{"l": list(range(i % 3)), "s": {"z": float(i)}} for i in range(n)],
            pa.struct([("l", pa.list_(pa.int32())), ("s", pa.struct([("z", pa.float64())]))]),
        ),
        "nullable_i32": pa.array([None if m else int(i) for i, m in zip(idx, mask)], pa.int32()),
        "allnull_i32": pa.nulls(n, pa.int32()),
        "allnull_str": pa.nulls(n, pa.string()),
        "allnull_list": pa.nulls(n, pa.list_(pa.int32())),
        "allnull_fsl": pa.nulls(n, pa.list_(pa.float32(), 4)),
        "const_i64": pa.array(np.full(n, 42, np.int64)),
        "const_str": pa.array(["same"] * n),
        "dict": pa.DictionaryArray.from_arrays(
            pa.array([None if i % 6 == 0 else i % 4 for i in range(n)], pa.int16()),
            pa.array(["alpha", "beta", "gamma", "delta"]),
        ),
    }
    return pa.table(cols)


def _paged_table() -> pa.Table:
    """Enough rows that, with small pages, every column has several pages."""
    n = 300_000
    rng = np.random.default_rng(11)
    idx = np.arange(n)
    ns = 100_000
    strs = pa.array([f"s{i:06d}-{'y' * (i % 17)}" if i % 13 else None for i in range(ns)])
    return pa.table(
        {
            "i64": pa.array(rng.integers(-(2**62), 2**62, n, dtype=np.int64)),
            "f32_null": pa.array(rng.random(n).astype(np.float32), mask=idx % 10 == 0),
            "s": pa.concat_arrays([strs, strs, strs]),
            "low": pa.array(np.array(["red", "green", "blue", "cyan"])[rng.integers(0, 4, n)]),
            "li": pa.array([list(range(i % 6)) if i % 11 else None for i in range(n)], pa.list_(pa.int32())),
            "ls": pa.array([[str(j) for j in range(i % 3)] for i in range(n)], pa.list_(pa.string())),
            "st": pa.StructArray.from_arrays(
                [pa.array(idx.astype(np.int32)), pa.array(np.char.add("b", idx.astype(str)))], ["a", "b"]
            ),
            "fsl": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8).astype(np.float32)), 8),
            "b": pa.array(idx % 3 == 0),
        }
    )


def _optin_table(n: int) -> pa.Table:
    """Encodings that 2.0 only uses when the field metadata asks for them."""
    rng = np.random.default_rng(3)
    idx = np.arange(n)
    text = [f"https://example.com/item/{i % 5000}/{'abc' * (i % 7)}" if i % 17 else None for i in range(n)]
    fields = [
        pa.field("zstd", pa.string(), metadata={"lance-encoding:compression": "zstd"}),
        pa.field("lz4", pa.large_binary(), metadata={"lance-encoding:compression": "lz4"}),
        pa.field("fsst", pa.string(), metadata={"lance-encoding:compression": "fsst"}),
        pa.field(
            "packed",
            pa.struct([("a", pa.int32()), ("b", pa.float64()), ("c", pa.list_(pa.int16(), 3))]),
            metadata={"lance-encoding:packed": "true"},
        ),
        pa.field("dict8", pa.dictionary(pa.int8(), pa.string())),
        pa.field("dict32", pa.dictionary(pa.int32(), pa.int64())),
    ]
    cols = [
        pa.array(text),
        pa.array([t.encode() if t else None for t in text], pa.large_binary()),
        pa.array(text),
        pa.StructArray.from_arrays(
            [
                pa.array(idx.astype(np.int32)),
                pa.array(idx * 0.25),
                pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(idx % 1000, 3).astype(np.int16)), 3),
            ],
            fields=list(fields[3].type),
        ),
        pa.DictionaryArray.from_arrays(
            pa.array([None if i % 9 == 0 else int(v) for i, v in enumerate(rng.integers(0, 5, n))], pa.int8()),
            pa.array(["v", "w", "x", "y", "z"]),
        ),
        pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 3, n).astype(np.int32)), pa.array([10, 20, 30], pa.int64())
        ),
    ]
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _write(tbl: pa.Table, uri: Path, batch_rows: int | None = None, **kw) -> Path:
    if batch_rows:
        tbl = pa.Table.from_batches(tbl.to_batches(max_chunksize=batch_rows))
    lance.write_dataset(tbl, str(uri), data_storage_version="2.0", **kw)
    return uri


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("v2_0")
    small_pages = {"data_cache_bytes": 256 * 1024, "max_page_bytes": 256 * 1024}
    return {
        "types": _write(_types_table(6000), root / "types", max_rows_per_file=2500),
        "paged": _write(_paged_table(), root / "paged", batch_rows=20_000, max_rows_per_file=200_000, **small_pages),
        "optin": _write(_optin_table(60_000), root / "optin", batch_rows=10_000, **small_pages),
    }


# --------------------------------------------------------------------------------------
# Helpers: map top-level fields to their columns through the manifest
# --------------------------------------------------------------------------------------


def _fragments(uri: Path):
    """``[(data file path, {top-level field name: [column indices]}, lance fragment)]``."""
    manifest = read_manifest(LOCAL, resolve_manifest(*resolve(uri)).path)
    children: dict[int, list[int]] = {}
    for f in manifest.fields:
        children.setdefault(f.parent_id, []).append(f.id)
    names = {f.id: f.name for f in manifest.fields}

    def subtree(fid: int) -> list[int]:
        out = [fid]
        for c in children.get(fid, []):
            out.extend(subtree(c))
        return out

    ds = lance.dataset(str(uri))
    frags = {fr.fragment_id: fr for fr in ds.get_fragments()}
    out = []
    for frag in manifest.fragments:
        (df,) = frag.files
        assert (df.file_major_version, df.file_minor_version) == (2, 0)
        colmap = {fid: col for fid, col in zip(df.fields, df.column_indices) if col >= 0}
        cols = {names[top]: [colmap[x] for x in subtree(top) if x in colmap] for top in children[-1]}
        out.append((uri / "data" / df.path, cols, frags[frag.id]))
    return out


def _assert_same(got: pa.Array, exp: pa.Array | pa.ChunkedArray, what: str) -> None:
    assert got.type == exp.type, what
    assert len(got) == len(exp), what
    got.validate(full=True)
    if pa.types.is_dictionary(got.type):
        # Pages (and pylance's batches) carry their own dictionaries, which may hold a null
        # (pyarrow cannot unify those): compare the decoded values and the null keys.
        chunks = exp.chunks if isinstance(exp, pa.ChunkedArray) else [exp]
        decoded = pa.concat_arrays([c.dictionary_decode() for c in chunks]) if chunks else pa.array([], got.type.value_type)
        assert got.dictionary_decode().equals(decoded), what
        assert got.null_count == exp.null_count, what
        return
    if isinstance(exp, pa.ChunkedArray):
        exp = exp.combine_chunks()
    if pa.types.is_floating(got.type):
        # NaN != NaN: compare the bit patterns.
        as_int = pa.int16() if pa.types.is_float16(got.type) else pa.from_numpy_dtype(f"i{got.type.bit_width // 8}")
        assert got.view(as_int).equals(exp.view(as_int)), what
    else:
        assert got.equals(exp), what


# --------------------------------------------------------------------------------------
# Whole fields
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["types", "paged", "optin"])
def test_every_field_matches_pylance(datasets, name):
    uri = datasets[name]
    schema = lance.dataset(str(uri)).schema
    frags = _fragments(uri)
    if name in ("types", "paged"):
        assert len(frags) > 1
    for path, cols, frag in frags:
        expected = frag.to_table()
        reader = LanceFileReader(path)
        assert str(reader.version) == "2.0"
        for field in schema:
            got = read_field(reader, field, cols[field.name])
            _assert_same(got, expected.column(field.name), f"{name}:{field.name}")


def test_pages_are_split(datasets):
    """The paged datasets really have several pages per column, list offsets included."""
    for name in ("paged", "optin"):
        path, cols, _ = _fragments(datasets[name])[0]
        reader = LanceFileReader(path)
        for field, columns in cols.items():
            # (a struct's header column always has one page; its children are split)
            assert max(len(reader.column(c).pages) for c in columns) > 1, (name, field)
            if field == "li":
                assert len(reader.column(columns[0]).pages) > 1  # list offsets pages


# --------------------------------------------------------------------------------------
# Row ranges
# --------------------------------------------------------------------------------------


def _page_bounds(reader: LanceFileReader, column: int) -> list[int]:
    return [int(x) for x in np.cumsum([p.num_rows for p in reader.column(column).pages])]


@pytest.mark.parametrize("name", ["paged", "optin", "types"])
def test_row_ranges_match_pylance(datasets, name):
    uri = datasets[name]
    schema = lance.dataset(str(uri)).schema
    path, cols, frag = _fragments(uri)[0]
    expected = frag.to_table()
    reader = LanceFileReader(path)
    n = reader.num_rows
    for field in schema:
        bounds = _page_bounds(reader, cols[field.name][0])
        ranges = {(0, 0), (0, 1), (n - 1, n), (n // 3, n // 3), (17, min(n, 4000)), (0, n)}
        for b in bounds[:-1][:3]:
            ranges |= {(b - 1, b + 1), (b, b + 1), (max(0, b - 7), min(n, b + 1234))}
        if len(bounds) > 2:
            ranges.add((bounds[0] - 3, bounds[2] + 5))
        for start, stop in sorted(ranges):
            got = read_field(reader, field, cols[field.name], (start, stop))
            exp = expected.column(field.name).slice(start, stop - start)
            _assert_same(got, exp, f"{name}:{field.name}[{start}:{stop}]")


def test_lance_file_writer_and_reader(tmp_path):
    """A bare 2.0 file from lance.file.LanceFileWriter; columns are pre-order positions."""
    from lance.file import LanceFileReader as RefReader
    from lance.file import LanceFileWriter

    tbl = _types_table(3000).select(["i32", "s_high", "s_low", "list_struct", "struct_nested", "fsl_null", "dict"])
    path = str(tmp_path / "bare.lance")
    with LanceFileWriter(path, tbl.schema, version="2.0", max_page_bytes=32 * 1024) as w:
        for i in range(0, len(tbl), 500):
            # take() materialises the batch: pylance 14's writer panics on a sliced struct<list>
            w.write_batch(tbl.take(np.arange(i, i + 500)).combine_chunks().to_batches()[0])
    ref = RefReader(path).read_all(batch_size=100_000).to_table()

    def n_columns(t: pa.DataType) -> int:
        if pa.types.is_struct(t):
            return 1 + sum(n_columns(f.type) for f in t)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return 1 + n_columns(t.value_type)
        return 1

    reader = LanceFileReader(path)
    col = 0
    for field in tbl.schema:
        k = n_columns(field.type)
        cols = list(range(col, col + k))
        col += k
        _assert_same(read_field(reader, field, cols), ref.column(field.name), field.name)
        _assert_same(read_field(reader, field, cols, (499, 1501)), ref.column(field.name).slice(499, 1002), field.name)
    assert col == reader.num_columns


# --------------------------------------------------------------------------------------
# What pylance writes in 2.0
# --------------------------------------------------------------------------------------


def _variants(msg, out: set[str]) -> None:
    """Collect the ArrayEncoding variants anywhere under ``msg``."""
    from google.protobuf.message import Message

    if isinstance(msg, pb.ArrayEncoding):
        out.add(msg.WhichOneof("array_encoding"))
    for fd, value in msg.ListFields():
        if fd.message_type is not None:
            for v in [value] if isinstance(value, Message) else list(value):
                _variants(v, out)


def test_variants_pylance_writes(datasets):
    seen: set[str] = set()
    for uri in datasets.values():
        for path, _, _ in _fragments(uri):
            reader = LanceFileReader(path)
            for c in range(reader.num_columns):
                for page in reader.column(c).pages:
                    assert page.encoding.type_url.endswith("lance.encodings.ArrayEncoding")
                    assert page.first_row == 0  # 2.0 pages leave `priority` unset
                    enc = pb.ArrayEncoding()
                    page.encoding.Unpack(enc)
                    _variants(enc, seen)
    assert seen == {
        "flat",
        "nullable",
        "fixed_size_list",
        "list",
        "struct",
        "binary",
        "dictionary",
        "fsst",
        "packed_struct",
    }


# --------------------------------------------------------------------------------------
# Variants pylance does not write in 2.0: synthetic pages
# --------------------------------------------------------------------------------------


class _MemFile:
    path = "<memory>"

    def __init__(self, data: bytes) -> None:
        self.data = np.frombuffer(data, np.uint8)

    def read_buffers(self, ranges):
        return [self.data[o : o + s].copy() for o, s in ranges]


def _source(buffers: list[bytes], num_rows: int) -> PageSource:
    blob, offs, sizes = b"", [], []
    for b in buffers:
        offs.append(len(blob))
        sizes.append(len(b))
        blob += b + b"\0" * (-len(b) % 64)
    page = PageInfo(tuple(offs), tuple(sizes), num_rows, 0, None)
    column = ColumnInfo(0, [page], (), (), None)
    return PageSource(_MemFile(blob), column, page, DecodeContext("<memory>", 0))


def _decode(enc: pb.ArrayEncoding, buffers: list[bytes], num_rows: int, t: pa.DataType, start=0, stop=None):
    src = _source(buffers, num_rows)
    stop = num_rows if stop is None else stop
    return to_arrow(registry.decode(enc, src, start, stop, t), t, src.ctx)


def _pack_lsb(values: np.ndarray, width: int) -> bytes:
    bits = ((values.astype(np.uint64)[:, None] >> np.arange(width, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
    return np.packbits(bits.reshape(-1), bitorder="little").tobytes()


@pytest.mark.parametrize(
    ("width", "ubits", "signed", "dtype"),
    [(3, 8, False, np.uint8), (5, 8, True, np.int8), (13, 32, True, np.int32), (61, 64, False, np.uint64), (64, 64, True, np.int64), (9, 16, False, np.uint16)],
)
def test_bitpacked(width, ubits, signed, dtype):
    if width > ubits:
        pytest.skip("width above the value width")
    rng = np.random.default_rng(width)
    n = 3001
    if signed:
        lo, hi = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    else:
        lo, hi = 0, 2**width - 1
    values = rng.integers(lo, hi, n, dtype=np.int64 if signed or width < 64 else np.uint64, endpoint=True).astype(dtype)
    enc = pb.ArrayEncoding(
        bitpacked=pb.Bitpacked(
            compressed_bits_per_value=width, uncompressed_bits_per_value=ubits, buffer=pb.Buffer(), signed=signed
        )
    )
    raw = _pack_lsb(values.view(f"u{values.itemsize}").astype(np.uint64) & np.uint64((1 << width) - 1 if width < 64 else 2**64 - 1), width)
    t = pa.from_numpy_dtype(dtype)
    assert _decode(enc, [raw], n, t).equals(pa.array(values))
    assert _decode(enc, [raw], n, t, 1027, 2050).equals(pa.array(values[1027:2050]))


@pytest.mark.parametrize(("width", "ubits"), [(0, 32), (3, 8), (11, 16), (20, 32), (33, 64)])
def test_bitpacked_for_non_neg(width, ubits):
    from cuda_kernels.bitunpack import pack_blocks

    rng = np.random.default_rng(width)
    n = 2500
    dtype = np.dtype(f"u{ubits // 8}")
    values = rng.integers(0, 2**width, n, dtype=np.uint64).astype(dtype) if width else np.zeros(n, dtype)
    padded = np.zeros(3 * 1024, dtype)
    padded[:n] = values
    raw = pack_blocks(padded, width).tobytes()
    enc = pb.ArrayEncoding(
        bitpacked_for_non_neg=pb.BitpackedForNonNeg(
            compressed_bits_per_value=width, uncompressed_bits_per_value=ubits, buffer=pb.Buffer()
        )
    )
    t = pa.from_numpy_dtype(dtype)
    assert _decode(enc, [raw], n, t).equals(pa.array(values))
    assert _decode(enc, [raw], n, t, 1000, 2100).equals(pa.array(values[1000:2100]))
    if width:
        with pytest.raises(CorruptFileError):
            _decode(enc, [raw[:-8]], n, t)


def test_constant_and_fixed_size_binary():
    enc = pb.ArrayEncoding(constant=pb.Constant(value=np.int32(-5).tobytes()))
    assert _decode(enc, [], 10, pa.int32()).equals(pa.array([-5] * 10, pa.int32()))
    assert _decode(pb.ArrayEncoding(constant=pb.Constant()), [], 4, pa.int32()).equals(pa.nulls(4, pa.int32()))

    words = [b"abcd", b"efgh", b"ijkl", b"mnop"]
    flat8 = pb.ArrayEncoding(flat=pb.Flat(bits_per_value=8, buffer=pb.Buffer()))
    fsb = pb.ArrayEncoding(fixed_size_binary=pb.FixedSizeBinary(bytes=flat8, byte_width=4))
    assert _decode(fsb, [b"".join(words)], 4, pa.string()).equals(pa.array([w.decode() for w in words]))
    assert _decode(fsb, [b"".join(words)], 4, pa.large_binary(), 1, 3).equals(pa.array(words[1:3], pa.large_binary()))
    flat32 = pb.ArrayEncoding(flat=pb.Flat(bits_per_value=32, buffer=pb.Buffer()))
    fsb32 = pb.ArrayEncoding(fixed_size_binary=pb.FixedSizeBinary(bytes=flat32, byte_width=4))
    assert _decode(fsb32, [b"".join(words)], 4, pa.binary(), 2, 4).equals(pa.array(words[2:], pa.binary()))


@pytest.mark.parametrize("scheme", ["zstd", "zstd-bare", "lz4"])
def test_flat_compression(scheme):
    values = np.arange(5000, dtype=np.int64) % 77
    raw = values.tobytes()
    if scheme == "lz4":
        import lz4.block

        comp = lz4.block.compress(raw, store_size=True)
    else:
        import zstandard

        frame = zstandard.ZstdCompressor().compress(raw)
        comp = frame if scheme == "zstd-bare" else len(raw).to_bytes(8, "little") + frame
    enc = pb.ArrayEncoding(
        flat=pb.Flat(bits_per_value=64, buffer=pb.Buffer(), compression=pb.Compression(scheme=scheme.split("-")[0]))
    )
    assert _decode(enc, [comp], 5000, pa.int64(), 100, 4000).equals(pa.array(values[100:4000]))
    with pytest.raises(CorruptFileError):
        _decode(enc, [comp[: len(comp) // 2]], 5000, pa.int64())


@pytest.mark.parametrize(
    "variant",
    ["inline_bitpacking", "out_of_line_bitpacking", "variable", "block", "rle", "general_mini_block", "byte_stream_split"],
)
def test_unsupported_variants_are_named(variant):
    enc = pb.ArrayEncoding()
    getattr(enc, variant).SetInParent()
    with pytest.raises(UnsupportedEncodingError, match=variant):
        _decode(enc, [b"\0" * 64], 8, pa.int64())


def test_bad_encodings_are_corrupt():
    with pytest.raises(CorruptFileError):
        _decode(pb.ArrayEncoding(), [b"\0" * 64], 8, pa.int64())  # no variant
    flat = pb.ArrayEncoding(flat=pb.Flat(bits_per_value=64, buffer=pb.Buffer(buffer_index=3)))
    with pytest.raises(CorruptFileError, match="<memory>"):
        _decode(flat, [b"\0" * 64], 8, pa.int64())  # no such buffer
    flat = pb.ArrayEncoding(flat=pb.Flat(bits_per_value=64, buffer=pb.Buffer()))
    with pytest.raises(CorruptFileError):
        _decode(flat, [b"\0" * 63], 8, pa.int64())  # buffer too short
    with pytest.raises(CorruptFileError):
        _decode(flat, [b"\0" * 64], 8, pa.string())  # type mismatch
    with pytest.raises(CorruptFileError):
        _decode(pb.ArrayEncoding(list=pb.List()), [b"\0" * 64], 8, pa.int64())  # column-level variant


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


def test_argument_errors(datasets):
    uri = datasets["types"]
    schema = lance.dataset(str(uri)).schema
    path, cols, _ = _fragments(uri)[0]
    reader = LanceFileReader(path)
    field = schema.field("list_struct")
    with pytest.raises(ValueError):
        read_field(reader, field, cols["list_struct"], (5, 3))
    with pytest.raises(ValueError):
        read_field(reader, field, cols["list_struct"], (0, reader.num_rows + 1))
    with pytest.raises(SchemaMismatchError):
        read_field(reader, field, cols["list_struct"][:-1])
    with pytest.raises(SchemaMismatchError):
        read_field(reader, schema.field("i32"), cols["i32"] + cols["i64"])


def test_other_versions_are_refused(tmp_path):
    lance.write_dataset(pa.table({"a": [1, 2, 3]}), str(tmp_path / "v21"), data_storage_version="2.1")
    (data,) = (tmp_path / "v21" / "data").glob("*.lance")
    with pytest.raises(UnsupportedEncodingError):
        read_field(LanceFileReader(data), pa.field("a", pa.int64()), [0])


def _corrupt_copy(src: Path, dst: Path, column: int, buffer: int, fill: bytes) -> LanceFileReader:
    shutil.copy(src, dst)
    reader = LanceFileReader(dst)
    page = reader.column(column).pages[0]
    off, size = page.buffer_offsets[buffer], page.buffer_sizes[buffer]
    reader.close()
    with open(dst, "r+b") as f:
        f.seek(off)
        f.write((fill * size)[:size])
    return LanceFileReader(dst)


@pytest.mark.parametrize(
    ("field", "buffer", "fill"),
    [
        ("s_high", 0, b"\xff"),  # binary end offsets far past the bytes
        ("s_high", 0, b"\x07\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00"),  # offsets run backwards
        ("s_low", 0, b"\xee"),  # dictionary index out of range
        ("list_i32", 0, b"\x05\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"),  # list offsets backwards
        ("list_i32", 0, b"\xff"),  # list offsets beyond the items
        ("dict", 0, b"\x7f\x00"),  # arrow dictionary key out of range
    ],
)
def test_corrupt_page_data(datasets, tmp_path, field, buffer, fill):
    uri = datasets["types"]
    schema = lance.dataset(str(uri)).schema
    path, cols, _ = _fragments(uri)[0]
    reader = _corrupt_copy(path, tmp_path / "bad.lance", cols[field][0], buffer, fill)
    with pytest.raises(CorruptFileError, match="bad.lance"):
        read_field(reader, schema.field(field), cols[field])


def _page_data_end(reader: LanceFileReader) -> int:
    """End of the last page buffer: damage before it hits page data only."""
    return max(
        o + s
        for c in range(reader.num_columns)
        for page in reader.column(c).pages
        for o, s in zip(page.buffer_offsets, page.buffer_sizes)
    )


def test_random_byte_damage_never_crashes(datasets, tmp_path):
    """Random damage to page bytes: a (wrong) answer or CorruptFileError, nothing else."""
    uri = datasets["types"]
    schema = lance.dataset(str(uri)).schema
    path, cols, _ = _fragments(uri)[0]
    original = Path(path).read_bytes()
    data_end = _page_data_end(LanceFileReader(path))
    rng = np.random.default_rng(0)
    dst = tmp_path / "fuzz.lance"
    for trial in range(30):
        blob = bytearray(original)
        for pos in rng.integers(0, data_end, 40):
            blob[pos] = int(rng.integers(0, 256))
        dst.write_bytes(bytes(blob))
        reader = LanceFileReader(dst)
        for field in schema:
            try:
                read_field(reader, field, cols[field.name], (0, reader.num_rows))
            except CorruptFileError as exc:
                assert "fuzz.lance" in str(exc)
        reader.close()


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_legacy_list_encoded_strings(tmp_path, typ):
    """pylance 0.13-era 2.0 files stored a string / binary field as a List offsets column over
    a column of 8-bit items (the manifest names only the first): pylance 14 still reads
    them, and so do we.  The same two columns are what a 2.0 ``list<uint8>`` field is written
    as, so pylance writes the file and the field is read back as ``typ``."""
    from lance.file import LanceFileWriter

    values = [b"foo", None, b"", b"bazz" * 300] * 700
    lists = pa.array([None if v is None else list(v) for v in values], pa.list_(pa.uint8()))
    path = str(tmp_path / "legacy.lance")
    with LanceFileWriter(path, pa.schema([pa.field("n", pa.int64()), pa.field("s", lists.type)]), version="2.0",
                         max_page_bytes=64 * 1024) as w:
        w.write_batch(pa.record_batch([pa.array(np.arange(len(values))), lists], names=["n", "s"]))
    reader = LanceFileReader(path, LOCAL)
    expected = pa.array(values, typ)
    assert read_field(reader, pa.field("s", typ), [1]).equals(expected)
    assert read_field(reader, pa.field("s", typ), [1], (5, 1900)).equals(expected.slice(5, 1895))
    assert read_field(reader, pa.field("n", pa.int64()), [0]).to_pylist() == list(range(len(values)))
