# SPDX-License-Identifier: Apache-2.0
"""write_dataset round trips: pylance 14 (the reference) and our reader read back exactly
what we wrote, for every type the reader supports, in file versions 2.1 and 2.2, with
nulls, all nulls and constants, across 1024-value chunks, pages and several files."""

from __future__ import annotations

import decimal
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lance_gpu
import lance_gpu.file.writer.container as file_writer

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")

N = 2500  # crosses 1024-value chunks; with max_rows_per_file=1000 three files
ROWS_PER_FILE = 1000
TAKE = [0, 1, 999, 1000, 1023, 1024, 1500, 2047, 2048, 2499]


def _values(t: pa.DataType, n: int, rng: np.random.Generator) -> pa.Array:
    """``n`` random non-null values of type ``t``."""
    if pa.types.is_boolean(t):
        return pa.array(rng.random(n) < 0.5)
    if pa.types.is_integer(t):
        dt = np.dtype(t.to_pandas_dtype())
        info = np.iinfo(dt)
        return pa.array(rng.integers(max(info.min, -(10**12)), min(info.max, 10**12), n, endpoint=True).astype(dt), t)
    if pa.types.is_floating(t):
        return pa.array(rng.standard_normal(n).astype(t.to_pandas_dtype()), t)
    if pa.types.is_decimal(t):
        return pa.array([decimal.Decimal(int(x)).scaleb(-t.scale) for x in rng.integers(-(10**12), 10**12, n)], t)
    if pa.types.is_date32(t):
        return pa.array(rng.integers(0, 40000, n).astype(np.int32)).cast(t)
    if pa.types.is_date64(t):
        return pa.array(rng.integers(0, 40000, n) * 86_400_000).cast(t)
    if pa.types.is_time32(t):
        return pa.array(rng.integers(0, 86400, n).astype(np.int32) * (1000 if t.unit == "ms" else 1)).cast(t)
    if pa.types.is_time64(t):
        return pa.array(rng.integers(0, 86400 * 10**6, n) * (1000 if t.unit == "ns" else 1)).cast(t)
    if pa.types.is_timestamp(t) or pa.types.is_duration(t):
        return pa.array(rng.integers(-(10**10), 10**10, n) * (1000 if t.unit == "ns" else 1)).cast(t)
    if pa.types.is_fixed_size_binary(t):
        return pa.array([rng.bytes(t.byte_width) for _ in range(n)], t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.array([f"s{rng.integers(0, 10**9)}" * int(rng.integers(0, 3)) for _ in range(n)], t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.array([rng.bytes(int(rng.integers(0, 20))) for _ in range(n)], t)
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(_values(t.value_type, n * t.list_size, rng), t.list_size)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offs = np.concatenate([[0], np.cumsum(rng.integers(0, 5, n))])
        child = _values(t.value_type, int(offs[-1]), rng)
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return cls.from_arrays(pa.array(offs.astype(np.int32 if pa.types.is_list(t) else np.int64)), child, type=t)
    if pa.types.is_map(t):
        offs = np.concatenate([[0], np.cumsum(rng.integers(0, 4, n))]).astype(np.int32)
        keys = pa.array([f"k{i}" for i in range(int(offs[-1]))])
        return pa.MapArray.from_arrays(pa.array(offs), keys, _values(t.item_type, int(offs[-1]), rng), type=t)
    if pa.types.is_struct(t):
        return pa.StructArray.from_arrays([_values(f.type, n, rng) for f in t], fields=list(t))
    if pa.types.is_dictionary(t):
        items = pa.array([f"v{i}" for i in range(7)])
        return pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 7, n).astype(t.index_type.to_pandas_dtype())), items)
    raise NotImplementedError(t)


def _with_nulls(arr: pa.Array, p: float, rng: np.random.Generator) -> pa.Array:
    mask = rng.random(len(arr)) < p
    t = arr.type
    if pa.types.is_struct(t):
        # a null struct, and nulls inside it
        kids = [_with_nulls(arr.field(i), p, rng) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(kids, fields=list(t), mask=pa.array(mask))
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(arr.values, t.list_size, mask=pa.array(mask))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        # null lists, empty lists and null items
        child = arr.values
        if not pa.types.is_struct(child.type) and not pa.types.is_list(child.type):
            child = _with_nulls(child, p, rng)
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return cls.from_arrays(arr.offsets, child, type=t, mask=pa.array(mask))
    return pc.if_else(pa.array(mask), pa.nulls(len(arr), t), arr)


def _table(t: pa.DataType, n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    base = _values(t, n, rng)
    return pa.table(
        {
            "rand": base,
            "nulls": _with_nulls(base, 0.2, rng),
            "allnull": pa.nulls(n, t),
            "const": base.take(pa.array(np.zeros(n, np.int64))),
        }
    )


TYPES = [
    pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
    pa.float16(), pa.float32(), pa.float64(), pa.bool_(),
    pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
    pa.decimal128(20, 2), pa.decimal256(40, 5),
    pa.date32(), pa.date64(), pa.time32("s"), pa.time32("ms"), pa.time64("us"), pa.time64("ns"),
    pa.timestamp("s"), pa.timestamp("ms"), pa.timestamp("us", "UTC"), pa.timestamp("ns", "America/New_York"),
    pa.duration("s"), pa.duration("ms"), pa.duration("us"), pa.duration("ns"),
    pa.binary(16), pa.binary(3),
    pa.list_(pa.float32(), 8), pa.list_(pa.float32(), 128), pa.list_(pa.int8(), 64),
    pa.list_(pa.int32()), pa.large_list(pa.string()), pa.list_(pa.list_(pa.int16())),
    pa.list_(pa.struct([("a", pa.int32()), ("b", pa.string())])),
    pa.struct([("x", pa.int64()), ("y", pa.string()), ("z", pa.struct([("w", pa.float32())]))]),
    pa.map_(pa.string(), pa.int32()),
    pa.dictionary(pa.int8(), pa.string()), pa.dictionary(pa.int32(), pa.string()),
]


def _plain(col: pa.ChunkedArray | pa.Array) -> list:
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    return col.to_pylist()


def _check(uri: str, expected: pa.Table, *, exact: bool = True) -> None:
    ds = lance.dataset(uri)
    got = ds.to_table()
    if exact:
        assert got.equals(expected), [c for c in expected.column_names if not got.column(c).equals(expected.column(c))]
    else:
        for c in expected.column_names:
            assert _plain(got.column(c)) == _plain(expected.column(c)), c
    idx = [i for i in TAKE if i < expected.num_rows]
    taken = ds.take(idx)
    for c in expected.column_names:
        assert _plain(taken.column(c)) == _plain(expected.column(c).take(idx)), c


def _check_ours(uri: str, expected: pa.Table) -> None:
    got = lance_gpu.dataset(uri, device="cpu").to_table()
    assert got.schema.names == expected.schema.names
    for c in expected.column_names:
        assert _plain(got.column(c)) == _plain(expected.column(c)), c


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("t", TYPES, ids=str)
def test_types_round_trip(tmp_path, t, version):
    if pa.types.is_map(t) and version == "2.1":
        pytest.skip("maps need 2.2")
    tbl = _table(t, N)
    uri = str(tmp_path / "ds")
    ds = lance_gpu.write_dataset(tbl, uri, data_storage_version=version, max_rows_per_file=ROWS_PER_FILE)
    assert ds.version == 1
    frags = lance.dataset(uri).get_fragments()
    assert [f.count_rows() for f in frags] == [1000, 1000, 500]
    assert lance.dataset(uri).data_storage_version == version
    _check(uri, tbl)
    _check_ours(uri, tbl)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_many_pages_per_file(tmp_path, monkeypatch, version):
    """Small pages: every column has several pages per file, cut at different rows."""
    monkeypatch.setattr(file_writer, "PAGE_BYTES", 3000)
    cols = {}
    for i, t in enumerate([pa.int32(), pa.float64(), pa.string(), pa.list_(pa.int32()),
                           pa.struct([("x", pa.int64()), ("y", pa.string())]), pa.list_(pa.float32(), 8),
                           pa.dictionary(pa.int32(), pa.string())]):
        tbl = _table(t, N, seed=i)
        cols[f"c{i}"] = tbl.column("rand")
        cols[f"n{i}"] = tbl.column("nulls")
    tbl = pa.table(cols)
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(tbl.to_batches(max_chunksize=300), uri, data_storage_version=version,
                            max_rows_per_file=ROWS_PER_FILE)
    from lance_gpu.file.container import LanceFileReader

    frag = lance.dataset(uri).get_fragments()[0]
    reader = LanceFileReader(str(tmp_path / "ds" / "data" / frag.data_files()[0].path))
    assert all(len(reader.column(c).pages) > 1 for c in range(reader.num_columns))
    # pylance itself concatenates the dictionaries of a multi-page dictionary column
    _check(uri, tbl, exact=False)
    _check_ours(uri, tbl)


def test_many_pages_all_null_and_constant_our_reader(tmp_path, monkeypatch):
    monkeypatch.setattr(file_writer, "PAGE_BYTES", 3000)
    tbl = pa.table({"allnull": pa.nulls(N, pa.int32()), "const": pa.array(np.full(N, 5, np.int32))})
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(tbl.to_batches(max_chunksize=300), uri, max_rows_per_file=ROWS_PER_FILE)
    _check(uri, tbl)  # pylance is fine
    _check_ours(uri, tbl)


def test_default_version_is_2_2(tmp_path):
    tbl = pa.table({"a": pa.array(np.arange(10))})
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(tbl, uri)
    ds = lance.dataset(uri)
    assert ds.data_storage_version == "2.2"
    assert ds.to_table().equals(tbl)


def test_empty_and_tiny(tmp_path):
    for n in (1, 7):
        tbl = _table(pa.int64(), n)
        uri = str(tmp_path / f"ds{n}")
        lance_gpu.write_dataset(tbl, uri)
        _check(uri, tbl)
    uri = str(tmp_path / "empty")
    empty = pa.table({"a": pa.array([], pa.int64())})
    lance_gpu.write_dataset(empty, uri)
    ds = lance.dataset(uri)
    assert ds.count_rows() == 0
    assert ds.schema == empty.schema


def test_inputs(tmp_path):
    pd = pytest.importorskip("pandas")
    tbl = _table(pa.int32(), 3000)
    # RecordBatchReader
    uri = str(tmp_path / "reader")
    lance_gpu.write_dataset(pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=700)), uri)
    _check(uri, tbl)
    # iterable of batches (a generator)
    uri = str(tmp_path / "gen")
    lance_gpu.write_dataset((b for b in tbl.to_batches(max_chunksize=700)), uri)
    _check(uri, tbl)
    # a single RecordBatch
    uri = str(tmp_path / "batch")
    lance_gpu.write_dataset(tbl.combine_chunks().to_batches()[0], uri)
    _check(uri, tbl)
    # pandas
    df = pd.DataFrame({"a": np.arange(100), "b": [f"x{i}" for i in range(100)], "c": np.linspace(0, 1, 100)})
    uri = str(tmp_path / "pandas")
    lance_gpu.write_dataset(df, uri)
    got = lance.dataset(uri).to_table()
    assert got.equals(pa.Table.from_pandas(df))
    pd.testing.assert_frame_equal(got.to_pandas(), df)


class _CudfLikeFrame:
    """Stands in for ``cudf.DataFrame`` where cuDF is missing: it lives in a ``cudf`` module,
    iterates over its column names (as cuDF and pandas frames do) and has
    ``to_arrow(preserve_index=)``."""

    __module__ = "cudf.core.dataframe"

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __iter__(self):
        return iter(self._table.column_names)

    def to_arrow(self, preserve_index: bool | None = None) -> pa.Table:
        assert preserve_index is False
        return self._table


def test_cudf_dataframe_input(tmp_path):
    tbl = _table(pa.int32(), 500).append_column("s", pa.array([f"v{i}" for i in range(500)]))
    uri = str(tmp_path / "cudf_like")
    lance_gpu.write_dataset(_CudfLikeFrame(tbl), uri)
    _check(uri, tbl)


@pytest.mark.gpu
def test_real_cudf_dataframe_input(tmp_path):
    cudf = pytest.importorskip("cudf")
    tbl = _table(pa.int32(), 500).append_column("s", pa.array([f"v{i}" for i in range(500)]))
    uri = str(tmp_path / "cudf")
    frame = cudf.DataFrame.from_arrow(tbl)
    lance_gpu.write_dataset(frame, uri)
    # written as the frame's own Arrow form (cuDF hands strings over as large_string), as
    # pylance writes ``frame.to_arrow()``
    _check(uri, frame.to_arrow())
    assert lance.dataset(uri).to_table().cast(tbl.schema).equals(tbl)


def test_streaming_files(tmp_path):
    """Batches are consumed lazily: files are finished while the input is still running."""
    uri = tmp_path / "ds"
    seen_files = []

    def gen():
        for k in range(10):
            # published files and those still being written (staged as .tmp_{name}_{uuid})
            seen_files.append(len(list((uri / "data").glob("*.lance*"))) if (uri / "data").exists() else 0)
            yield pa.record_batch({"a": pa.array(np.arange(k * 500, (k + 1) * 500))})

    lance_gpu.write_dataset(gen(), str(uri), max_rows_per_file=1000)
    assert seen_files[-1] >= 4  # four files already on disk before the last batch was asked for
    ds = lance.dataset(str(uri))
    assert [f.count_rows() for f in ds.get_fragments()] == [1000] * 5
    assert ds.to_table()["a"].to_pylist() == list(range(5000))


def test_max_bytes_per_file(tmp_path):
    tbl = pa.table({"a": pa.array(np.random.default_rng(0).standard_normal(20_000))})
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(tbl.to_batches(max_chunksize=2000), uri, max_bytes_per_file=30_000)
    ds = lance.dataset(uri)
    # 16 kB of Arrow data per batch: each file closes at the first batch boundary past 30 kB
    assert [f.count_rows() for f in ds.get_fragments()] == [4000] * 5
    assert ds.to_table().equals(tbl)


def test_string_view_and_extension(tmp_path):
    tbl = pa.table({
        "sv": pa.array(["a", None, "ccc"] * 50, pa.string_view()),
        "uuid": pa.ExtensionArray.from_storage(pa.uuid(), pa.array([bytes(range(16))] * 150, pa.binary(16))),
    })
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(tbl, uri)
    got = lance.dataset(uri).to_table()
    assert got["sv"].to_pylist() == tbl["sv"].to_pylist()
    assert got["uuid"].to_pylist() == tbl["uuid"].to_pylist()


def test_non_nullable_fields(tmp_path):
    schema = pa.schema([pa.field("a", pa.int64(), nullable=False), pa.field("s", pa.string(), nullable=False)])
    tbl = pa.table({"a": np.arange(3000), "s": [str(i) for i in range(3000)]}, schema=schema)
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(tbl, uri)
    got = lance.dataset(uri).to_table()
    assert got.equals(tbl) and got.schema == schema
    bad = pa.table({"a": pa.array([1, None]), "s": ["x", "y"]}).cast(pa.schema([pa.field("a", pa.int64()), pa.field("s", pa.string())]))
    with pytest.raises(lance_gpu.SchemaMismatchError):
        lance_gpu.write_dataset(bad, str(tmp_path / "bad"), schema=schema)


def test_unsupported_inputs(tmp_path):
    with pytest.raises(lance_gpu.UnsupportedFeatureError):
        lance_gpu.write_dataset(pa.table({"m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int32()))}),
                                str(tmp_path / "y"), data_storage_version="2.1")
    with pytest.raises(ValueError):
        lance_gpu.write_dataset(pa.table({"a": [1]}), str(tmp_path / "z"), mode="upsert")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TypeError):
            lance_gpu.write_dataset(42, str(tmp_path / "w"))


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_sliced_inputs(tmp_path, version):
    """Arrays with odd offsets (bit offsets inside a byte, sliced lists and structs) and
    files cut at odd rows."""
    cols = {}
    for i, t in enumerate([pa.bool_(), pa.int16(), pa.string(), pa.binary(3), pa.list_(pa.bool_()),
                           pa.list_(pa.float32(), 3), pa.struct([("b", pa.bool_()), ("s", pa.string())]),
                           pa.map_(pa.string(), pa.int32()) if version == "2.2" else pa.large_binary(),
                           pa.dictionary(pa.int16(), pa.string()), pa.list_(pa.list_(pa.int8()))]):
        tbl = _table(t, N + 11, seed=i).slice(5, N)
        cols[f"c{i}"] = tbl.column("rand")
        cols[f"n{i}"] = tbl.column("nulls")
    tbl = pa.table(cols)
    batches = []
    pos = 3
    for size in (1, 7, 333, 1000, 1024, 99):
        batches.append(tbl.slice(pos, size).to_batches()[0] if tbl.slice(pos, size).num_rows else None)
        pos += size
    batches = [b for b in batches if b is not None]
    expected = pa.Table.from_batches(batches)
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(batches, uri, data_storage_version=version, max_rows_per_file=777)
    assert [f.count_rows() for f in lance.dataset(uri).get_fragments()] == [777, 777, 777, 133]
    _check(uri, expected, exact=False)
    _check_ours(uri, expected)


def test_long_runs_of_empty_lists(tmp_path):
    """More than 65535 levels would land in one mini-block chunk: the rows are split over
    several pages (pylance splits such pages too)."""
    vals = [[1, 2]] + [[]] * 100_000 + [[3]] * 10 + [None] * 70_000 + [[4]]
    lst = pa.array(vals, pa.list_(pa.int32()))
    tbl = pa.table({"l": lst, "s": pa.StructArray.from_arrays([lst], ["x"]), "i": pa.array(np.arange(len(vals)))})
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(tbl, uri)
    _check(uri, tbl)
    _check_ours(uri, tbl)


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_empty_struct_column_writes_as_pylance_writes_it(tmp_path, version: str) -> None:
    """A top-level empty struct (issue 26 item 5): the placeholder column pylance writes (same
    page encoding), read back by pylance and by us, scan and take."""
    from lance.file import LanceFileReader

    schema = pa.schema([pa.field("id", pa.int32()), pa.field("empties", pa.struct([]))])
    table = pa.table({"id": [0, 1, 2], "empties": [{}] * 3}, schema=schema)
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    lance_gpu.write_dataset(table, ours, data_storage_version=version)
    lance.write_dataset(table, ref, data_storage_version=version)
    assert lance.dataset(ours).to_table() == table
    assert lance.dataset(ours).take([2, 0, 1]) == table.take([2, 0, 1])
    assert lance_gpu.dataset(ours).take([2, 0, 1]) == table.take([2, 0, 1])

    def page_encodings(uri: str) -> list[str]:
        (frag,) = lance.dataset(uri).get_fragments()
        path = f"{uri}/data/{frag.data_files()[0].path}"
        return [p.encoding for c in LanceFileReader(path).metadata().columns for p in c.pages]

    assert page_encodings(ours)[1:] == page_encodings(ref)[1:]


def test_empty_structs_pylance_cannot_write_are_refused(tmp_path) -> None:
    """pylance refuses a nullable empty struct; one inside a struct it writes but then reads
    the other fields of that struct as NULL: both are refused, nothing is written."""
    from lance_gpu.errors import UnsupportedFeatureError

    nullable = pa.table({"e": pa.array([{}, None], pa.struct([]))})
    with pytest.raises(OSError, match="rep/def"):
        lance.write_dataset(nullable, str(tmp_path / "ref"))
    nested_type = pa.struct([pa.field("e", pa.struct([])), pa.field("x", pa.int32())])
    for i, data in enumerate([nullable, pa.table({"s": pa.array([{"e": {}, "x": 1}], nested_type)})]):
        with pytest.raises(UnsupportedFeatureError, match="empty struct"):
            lance_gpu.write_dataset(data, str(tmp_path / f"ours{i}"))
        with pytest.raises(ValueError):  # nothing was committed
            lance.dataset(str(tmp_path / f"ours{i}"))
