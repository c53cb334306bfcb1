# SPDX-License-Identifier: Apache-2.0
"""The read interop matrix: lance_gpu must return exactly what pylance returns.

Datasets are written by pylance (the reference) once per session, across column types x
data storage versions 2.0 / 2.1 / 2.2 x nulls x page / chunk / fragment boundaries x both
kinds of deletion files x stable row ids, then read by both libraries and compared with
``Table.equals`` (schema and its metadata included).

Families:

* ``types``: every column type, 2 600 rows in 4 fragments; version 1 (write), 2 (append),
  3 (delete < 5000 rows per fragment -> ``.arrow`` deletion files).
* ``big``: 70 000 rows in 3 fragments of encodings that need volume (RLE runs, dictionary,
  FSST, ~300 B strings -> full-zip, >= 32 KiB values -> per-value zstd, lists of long
  strings), written in small batches with a small ``max_page_bytes`` so that columns span
  many pages (a column mixing constant, all-null, mini-block and full-zip pages; a struct
  whose leaves cut pages at different rows); one fragment loses > 5000 rows (``.bin``
  bitmap), the others < 5000 (``.arrow``).
* ``stable``: ``enable_stable_row_ids=True``, deletes, an update (rows move to a new
  fragment with non-contiguous ids) and an append.
"""

from __future__ import annotations

import datetime as dt
import decimal
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
import lance.arrow  # noqa: E402

import lance_gpu  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning")

VERSIONS = ["2.0", "2.1", "2.2"]
HAS_BF16 = hasattr(lance.arrow, "bfloat16_array")


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------

WORDS = ["alpha", "beta", "gamma", "delta", "", "épsilon ünïcode ✓", "x" * 40]


def types_table(n: int, *, nulls: bool, version: str, seed: int, id_start: int = 0) -> pa.Table:
    """One column of every type pylance writes (``nulls``: ~20% nulls, plus all-null columns)."""
    rng = np.random.default_rng(seed)

    def mask(p: float = 0.2) -> np.ndarray | None:
        return rng.random(n) < p if nulls else None

    def arr(values, t: pa.DataType) -> pa.Array:
        return pa.array(values, t, mask=mask())

    cols: dict[str, pa.Array] = {"id": pa.array(np.arange(id_start, id_start + n, dtype=np.int64))}
    for name, dtype in [("i8", np.int8), ("i16", np.int16), ("i32", np.int32), ("i64", np.int64),
                        ("u8", np.uint8), ("u16", np.uint16), ("u32", np.uint32), ("u64", np.uint64)]:
        info = np.iinfo(dtype)
        cols[name] = arr(rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True), pa.from_numpy_dtype(dtype))
    cols["small"] = arr(rng.integers(0, 10, n).astype(np.int32), pa.int32())  # narrow bit-packing
    cols["f16"] = arr(rng.standard_normal(n).astype(np.float16), pa.float16())
    cols["f32"] = arr(rng.standard_normal(n).astype(np.float32), pa.float32())
    cols["f64"] = arr(rng.standard_normal(n), pa.float64())
    cols["b"] = arr(rng.random(n) < 0.5, pa.bool_())
    strs = [WORDS[i % len(WORDS)] + str(int(x)) for i, x in enumerate(rng.integers(0, 1000, n))]
    cols["s"] = arr(strs, pa.string())
    cols["ls"] = arr(strs[::-1], pa.large_string())
    bins = [rng.bytes(int(k)) for k in rng.integers(0, 24, n)]
    cols["bin"] = arr(bins, pa.binary())
    cols["lbin"] = arr(bins[::-1], pa.large_binary())
    cols["dec"] = arr([decimal.Decimal(int(x)).scaleb(-2) for x in rng.integers(-10**9, 10**9, n)], pa.decimal128(10, 2))
    cols["dec256"] = arr(
        [decimal.Decimal(int(x)).scaleb(-5) for x in rng.integers(-10**17, 10**17, n)], pa.decimal256(40, 5)
    )
    days = rng.integers(-20000, 30000, n).astype(np.int32)
    cols["d32"] = arr(days, pa.date32())
    cols["d64"] = arr(days.astype(np.int64) * 86_400_000, pa.date64())
    cols["t32s"] = arr(rng.integers(0, 86400, n).astype(np.int32), pa.time32("s"))
    cols["t32ms"] = arr(rng.integers(0, 86_400_000, n).astype(np.int32), pa.time32("ms"))
    cols["t64us"] = arr(rng.integers(0, 86400 * 10**6, n), pa.time64("us"))
    cols["t64ns"] = arr(rng.integers(0, 86400 * 10**9, n), pa.time64("ns"))
    secs = rng.integers(0, 2 * 10**9, n)
    for unit, mul in [("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)]:
        cols[f"ts_{unit}"] = arr(secs * mul, pa.timestamp(unit))
        cols[f"tstz_{unit}"] = arr(secs * mul, pa.timestamp(unit, tz="Europe/Paris" if unit == "ms" else "UTC"))
    cols["dur"] = arr(rng.integers(-10**12, 10**12, n), pa.duration("us"))
    cols["dur_s"] = arr(rng.integers(-10**6, 10**6, n), pa.duration("s"))
    cols["fsb"] = arr([rng.bytes(16) for _ in range(n)], pa.binary(16))
    emb = pa.array(rng.standard_normal(n * 128).astype(np.float32))
    cols["emb"] = pa.FixedSizeListArray.from_arrays(emb, 128)  # 512 B a row: full-zip
    m = mask()
    cols["emb_n"] = pa.FixedSizeListArray.from_arrays(emb, 128, mask=None if m is None else pa.array(m))
    cols["fsl_i8"] = pa.FixedSizeListArray.from_arrays(pa.array(rng.integers(-128, 128, n * 64).astype(np.int8)), 64)
    m = mask()
    cols["fsl_n"] = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.standard_normal(n * 8).astype(np.float32)), 8, mask=None if m is None else pa.array(m)
    )
    if HAS_BF16:
        m = mask()
        vals = [float(x) for x in rng.standard_normal(n).astype(np.float32)]
        cols["bf16"] = lance.arrow.bfloat16_array([None if m is not None and m[i] else v for i, v in enumerate(vals)])
    lists: list[list[int | None] | None] = []
    for _ in range(n):
        r = rng.random()
        if nulls and r < 0.1:
            lists.append(None)
        elif r < 0.2:
            lists.append([])
        else:
            items = rng.integers(0, 1000, int(rng.integers(1, 6)))
            lists.append([None if nulls and x % 7 == 0 else int(x) for x in items])
    cols["li"] = pa.array(lists, pa.list_(pa.int32()))
    cols["lli"] = pa.array(lists[::-1], pa.large_list(pa.int64()))
    cols["lstr"] = pa.array(
        [None if l is None else [None if x is None else WORDS[x % 7] + str(x) for x in l] for l in lists],
        pa.list_(pa.string()),
    )
    cols["llist"] = pa.array(
        [None if l is None else [l[:2], [], None if nulls else [1]] for l in lists], pa.list_(pa.list_(pa.int16()))
    )
    st_a = arr(rng.integers(0, 100, n).astype(np.int32), pa.int32())
    st_b = arr(strs, pa.string())
    smask = pa.array(rng.random(n) < 0.15) if nulls and version != "2.0" else None  # 2.0: no null structs
    cols["st"] = pa.StructArray.from_arrays([st_a, st_b], names=["a", "b"], mask=smask)
    cols["nest"] = pa.StructArray.from_arrays(
        [pa.StructArray.from_arrays([st_b, st_a], names=["s", "i"]), cols["f64"]], names=["inner", "f"]
    )
    cols["lst"] = pa.array(
        [None if l is None else [{"x": x, "y": None if x is None else WORDS[x % 7]} for x in l] for l in lists],
        pa.list_(pa.struct([("x", pa.int32()), ("y", pa.string())])),
    )
    cols["stl"] = pa.StructArray.from_arrays([pa.array(lists, pa.list_(pa.int32())), st_a], names=["l", "k"])
    if version == "2.2":  # map is refused before 2.2
        cols["map"] = pa.array(
            [None if l is None else [(f"k{j}", x) for j, x in enumerate(l)] for l in lists], pa.map_(pa.string(), pa.int32())
        )
    idx = rng.integers(0, 4, n).astype(np.int32)
    cols["dict"] = pa.DictionaryArray.from_arrays(pa.array(idx, mask=mask()), pa.array(["red", "green", "blue", "cyan"]))
    cols["const"] = pa.array(np.full(n, 42, np.int32))
    cols["const_s"] = pa.array(["same"] * n)
    cols["const_in"] = pa.array(np.full(n, 7, np.int32), mask=mask())  # constant + definition levels
    cols["const_sn"] = pa.array(["constant string value"] * n, mask=mask())
    cols["const_l"] = pa.array([["zz"] * (i % 3) for i in range(n)], pa.list_(pa.string()))
    cols["null_i"] = pa.nulls(n, pa.int32())
    cols["null_s"] = pa.nulls(n, pa.string())
    cols["null_l"] = pa.nulls(n, pa.list_(pa.int32()))
    cols["null_ll"] = pa.nulls(n, pa.list_(pa.list_(pa.int16())))
    if version != "2.0":
        cols["null_st"] = pa.nulls(n, pa.struct([("a", pa.int32()), ("b", pa.string())]))
    tbl = pa.table(cols)
    fields = [f.with_metadata({"unit": "m", "note": "field metadata"}) if f.name == "i32" else f for f in tbl.schema]
    return tbl.cast(pa.schema(fields, metadata={"origin": "test_read_matrix"}))


def big_table(n: int, *, seed: int, version: str) -> pa.Table:
    """Columns whose encodings need volume: runs, dictionaries, FSST, full-zip, zstd."""
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789 ", np.uint8)
    lens = rng.integers(5, 40, n)
    raw = alphabet[rng.integers(0, alphabet.size, int(lens.sum()))].tobytes().decode()
    offs = np.concatenate([[0], np.cumsum(lens)])
    rnd = [raw[offs[i] : offs[i + 1]] for i in range(n)]
    longs = [f"{i:06d}" + (rnd[i] * 12)[:300] for i in range(n)]
    huge: list[bytes | None] = []
    for i in range(n):
        if i % 9000 == 17:
            huge.append((b"%d-" % i) * 12000)  # >= 32 KiB: zstd per value
        elif i % 3 == 0:
            huge.append(None)
        else:
            huge.append(rnd[i].encode())
    lists = [None if i % 11 == 0 else list(range(i % 4)) for i in range(n)]
    long_arr = pa.array(longs, mask=rng.random(n) < 0.05)
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "runs": pa.array(np.repeat(rng.integers(0, 1000, n // 50 + 1), 50)[:n]),
            "lowcard": pa.array([WORDS[i] for i in rng.integers(0, 4, n)], mask=rng.random(n) < 0.1),
            "fsst": pa.array(rnd, mask=rng.random(n) < 0.05),
            "long": long_arr,
            "long_ls": pa.array(longs[::-1], pa.large_string()),
            "huge": pa.array(huge, pa.large_binary()),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 16).astype(np.float32)), 16),
            "ts": pa.array(1_600_000_000_000_000 + np.arange(n) * 1_000_000, pa.timestamp("us")),
            "f": pa.array(rng.standard_normal(n), mask=rng.random(n) < 0.3),
            "li": pa.array(lists, pa.list_(pa.int32())),
            "lstr_long": pa.array(
                [None if l is None else [longs[(i + j) % n] for j in l] for i, l in enumerate(lists)], pa.list_(pa.string())
            ),
            # pages of one column in different layouts: constant, all-null, mini-block, full-zip
            "phases": pa.array(
                [
                    [f"c{'c' * 299}", None, longs[i], f"k{'k' * 299}" if i % 3 else None][(i // 7000) % 4]
                    for i in range(n)
                ]
            ),
            # leaves of one struct whose pages end at different rows
            "pair": pa.StructArray.from_arrays(
                [long_arr, pa.array(np.arange(n, dtype=np.int64) * 3)], names=["s", "i"],
                mask=pa.array(rng.random(n) < 0.02) if version != "2.0" else None,
            ),
        }
    )


# --------------------------------------------------------------------------------------------
# Datasets (built once per session)
# --------------------------------------------------------------------------------------------


@dataclass
class Built:
    name: str
    uri: str
    version: str
    versions: list[int]  # versions worth comparing (all of them)
    filters: list[str]
    projections: list[list[str]]
    heavy: bool = False  # large: filters after the first read a projection, not every column


_CACHE: dict[tuple, Built] = {}


@pytest.fixture(scope="session")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("read_matrix")


def _types_dataset(root: Path, version: str, nulls: bool) -> Built:
    key = ("types", version, nulls)
    if key not in _CACHE:
        uri = str(root / f"types_{version}_{'nulls' if nulls else 'dense'}")
        lance.write_dataset(
            types_table(2000, nulls=nulls, version=version, seed=1), uri, data_storage_version=version, max_rows_per_file=700
        )
        lance.write_dataset(
            types_table(600, nulls=nulls, version=version, seed=2, id_start=2000), uri, mode="append",
            data_storage_version=version,
        )
        ds = lance.dataset(uri)
        ds.delete("id % 10 = 3 OR (id >= 650 AND id < 760) OR id = 2599")
        assert lance.dataset(uri).version == 3
        filters = [
            "i32 > 0",
            "id BETWEEN 500 AND 1500",
            "s LIKE 'alpha%'",
            "s IS NULL",
            "i64 IS NOT NULL AND f64 < 0.5",
            "u8 IN (1, 2, 3, 200, 255)",
            "ts_us > timestamp '2010-01-01 00:00:00'",
            "d32 < date '1990-06-01' OR b = true",
            "st.a < 30",
            "small = 3 AND NOT (s LIKE '%5')",
            "id < 0",
        ]
        projections = [
            ["id"],
            ["s", "id"],
            ["emb", "li", "st", "i8"],
            ["st.b", "id"],
            ["nest.inner.s", "nest.f"],
            ["dict", "null_s", "const"],
        ]
        _CACHE[key] = Built(f"types-{version}-{nulls}", uri, version, [1, 2, 3], filters, projections)
    return _CACHE[key]


def _big_dataset(root: Path, version: str) -> Built:
    key = ("big", version)
    if key not in _CACHE:
        uri = str(root / f"big_{version}")
        tbl = big_table(70_000, seed=3, version=version)
        # Small batches + max_page_bytes: 2.1 / 2.2 then cut the wide columns into many pages.
        reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches(max_chunksize=5000))
        lance.write_dataset(
            reader, uri, data_storage_version=version, max_rows_per_file=30_000, max_page_bytes=256 * 1024
        )
        ds = lance.dataset(uri)
        ds.delete("id >= 1000 AND id < 7500")  # 6500 in fragment 0: .bin bitmap
        ds.delete("id % 1000 = 999 AND id >= 30000")  # < 5000 per fragment: .arrow
        filters = [
            "runs < 100",
            "lowcard = 'gamma'",
            "fsst LIKE 'a%'",
            "long IS NULL",
            "ts BETWEEN timestamp '2020-09-14 00:00:00' AND timestamp '2020-09-14 06:00:00'",
            "id IN (0, 999, 1000, 7499, 7500, 29999, 30000, 69998, 69999)",
        ]
        projections = [["long"], ["huge", "id"], ["lstr_long"], ["vec", "runs"], ["pair.i", "pair"]]
        _CACHE[key] = Built(f"big-{version}", uri, version, [1, 2, 3], filters, projections, heavy=True)
    return _CACHE[key]


def _stable_dataset(root: Path, version: str) -> Built:
    key = ("stable", version)
    if key not in _CACHE:
        uri = str(root / f"stable_{version}")
        n = 3000
        rng = np.random.default_rng(4)
        tbl = pa.table(
            {
                "id": pa.array(np.arange(n, dtype=np.int64)),
                "val": pa.array(rng.integers(0, 100, n).astype(np.int32)),
                "name": pa.array([f"name-{i % 37}" for i in range(n)]),
                "li": pa.array([list(range(i % 3)) for i in range(n)], pa.list_(pa.int64())),
            }
        )
        lance.write_dataset(tbl, uri, data_storage_version=version, max_rows_per_file=1000, enable_stable_row_ids=True)
        ds = lance.dataset(uri)
        ds.delete("id % 5 = 0 AND id < 1500")
        ds = lance.dataset(uri)
        ds.update({"val": "val + 1000"}, where="id % 7 = 1")  # rows move: non-contiguous ids
        lance.write_dataset(tbl.slice(0, 500), uri, mode="append", data_storage_version=version)
        filters = ["val > 1000", "name = 'name-3'", "id < 100"]
        projections = [["val", "id"], ["li"]]
        _CACHE[key] = Built(f"stable-{version}", uri, version, [1, 2, 3, 4], filters, projections)
    return _CACHE[key]


TYPE_CASES = [pytest.param(v, nulls, id=f"types-{v}-{'nulls' if nulls else 'dense'}") for v in VERSIONS for nulls in (False, True)]
ALL_CASES = TYPE_CASES + [pytest.param("big", v, id=f"big-{v}") for v in VERSIONS] + [
    pytest.param("stable", v, id=f"stable-{v}") for v in VERSIONS
]


@pytest.fixture(scope="session", params=[p.values for p in ALL_CASES], ids=[p.id for p in ALL_CASES])
def built(request: pytest.FixtureRequest, root: Path) -> Built:
    a, b = request.param
    if a == "big":
        return _big_dataset(root, b)
    if a == "stable":
        return _stable_dataset(root, b)
    return _types_dataset(root, a, b)


# --------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------


def assert_same(ours: pa.Table, ref: pa.Table, what: str = "", *, exact_dictionaries: bool = True) -> None:
    """``ours`` must equal ``ref``: schema (with metadata), then every column's values.

    ``exact_dictionaries=False`` (filter and take paths) compares dictionary columns by value:
    there pylance concatenates the per-fragment dictionaries into one (filter) or rebuilds
    it from the taken rows (take), an artifact of its batching, not of the data.  Unsorted
    ``take`` also makes pylance drop the schema-level metadata; that loss is not copied.
    """
    if ref.schema.metadata is None and ours.schema.metadata is not None and not exact_dictionaries:
        ours = ours.replace_schema_metadata(None)
    if not ours.schema.equals(ref.schema, check_metadata=True):
        diffs = [
            f"{a} {a.metadata} != {b} {b.metadata}"
            for a, b in zip(ours.schema, ref.schema)
            if not a.equals(b, check_metadata=True)
        ]
        if ours.schema.names != ref.schema.names:
            diffs.append(f"names {ours.schema.names} != {ref.schema.names}")
        if ours.schema.metadata != ref.schema.metadata:
            diffs.append(f"schema metadata {ours.schema.metadata} != {ref.schema.metadata}")
        pytest.fail(f"{what}: schema differs: {diffs}")
    if ours.num_rows != ref.num_rows:
        pytest.fail(f"{what}: {ours.num_rows} rows, reference {ref.num_rows}")
    bad = []
    for name in ref.column_names:
        a, b = ours.column(name), ref.column(name)
        if not exact_dictionaries and pa.types.is_dictionary(a.type):
            a, b = a.cast(a.type.value_type), b.cast(b.type.value_type)
        if not a.equals(b):
            la, lb = a.to_pylist(), b.to_pylist()
            first = next((i for i, (x, y) in enumerate(zip(la, lb)) if x != y), None)
            detail = f"row {first}: {la[first]!r} != {lb[first]!r}" if first is not None else "same values, different layout"
            bad.append(f"{name} ({detail})")
    if bad:
        pytest.fail(f"{what}: columns differ: {bad}")


def _ref(built: Built, version: int | None = None):
    return lance.dataset(built.uri, version=version)


def _ours(built: Built, version: int | None = None, device: str = "cpu"):
    return lance_gpu.dataset(built.uri, version=version, device=device)


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request: pytest.FixtureRequest) -> str:
    """The decoding path of the scans (``gpu``: skipped where no GPU is usable)."""
    return request.param


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


def test_schema_and_versions(built: Built) -> None:
    ref, ours = _ref(built), _ours(built)
    assert ours.schema.equals(ref.schema, check_metadata=True)
    assert ours.version == ref.version
    assert [v["version"] for v in ours.versions()] == [v["version"] for v in ref.versions()]
    assert len(ours.get_fragments()) == len(ref.get_fragments())


def test_to_table(built: Built, device: str) -> None:
    assert_same(_ours(built, device=device).to_table(), _ref(built).to_table(), built.name)


def test_older_versions(built: Built, device: str) -> None:
    for v in built.versions:
        ref, ours = _ref(built, v), _ours(built, v, device)
        assert ours.version == v
        assert ours.count_rows() == ref.count_rows()
        assert_same(ours.to_table(), ref.to_table(), f"{built.name}@v{v}")
        # checkout_version gives the same as opening at the version
        assert ours.checkout_version(v).count_rows() == ref.count_rows()


def test_projections(built: Built, device: str) -> None:
    ref, ours = _ref(built), _ours(built, device=device)
    for cols in built.projections:
        assert_same(ours.to_table(columns=cols), ref.to_table(columns=cols), f"{built.name} columns={cols}")
    # every column on its own (to_table already reads all of a heavy dataset's), reordered
    names = list(ref.schema.names)
    for cols in ([] if built.heavy else ([n] for n in names)):
        assert_same(ours.to_table(columns=cols), ref.to_table(columns=cols), f"{built.name} columns={cols}")
    assert_same(ours.to_table(columns=names[::-1]), ref.to_table(columns=names[::-1]), f"{built.name} reversed")


def test_filters(built: Built, device: str) -> None:
    ref, ours = _ref(built), _ours(built, device=device)
    for k, f in enumerate(built.filters):
        cols = ["id", "ts", "lowcard"] if built.heavy and k else None
        assert_same(
            ours.to_table(columns=cols, filter=f), ref.to_table(columns=cols, filter=f), f"{built.name} filter={f!r}",
            exact_dictionaries=False,
        )
        assert ours.count_rows(f) == ref.count_rows(f), f"{built.name} count_rows({f!r})"
    f = built.filters[0]
    cols = built.projections[0]
    assert_same(
        ours.to_table(columns=cols, filter=f), ref.to_table(columns=cols, filter=f), f"{built.name} {cols} {f}", exact_dictionaries=False
    )


def test_count_rows(built: Built) -> None:
    for v in [None, *built.versions]:
        assert _ours(built, v).count_rows() == _ref(built, v).count_rows()


def test_with_row_id(built: Built, device: str) -> None:
    ref, ours = _ref(built), _ours(built, device=device)
    assert_same(ours.to_table(with_row_id=True), ref.to_table(with_row_id=True), f"{built.name} with_row_id")
    cols = built.projections[0]
    f = built.filters[0]
    assert_same(
        ours.to_table(columns=cols, filter=f, with_row_id=True),
        ref.to_table(columns=cols, filter=f, with_row_id=True),
        f"{built.name} with_row_id + filter",
        exact_dictionaries=False,
    )
    for v in built.versions:
        assert_same(
            _ours(built, v, device).to_table(columns=["id"], with_row_id=True),
            _ref(built, v).to_table(columns=["id"], with_row_id=True),
            f"{built.name}@v{v} _rowid",
        )


def test_take(built: Built) -> None:
    ref, ours = _ref(built), _ours(built)
    n = ref.count_rows()
    rng = np.random.default_rng(7)
    idx_sets = [
        [0],
        [n - 1],
        [0, n - 1, 0, n // 2],
        sorted(rng.choice(n, 40, replace=False).tolist()),
        rng.integers(0, n, 60).tolist(),  # unsorted, duplicates, across fragments
        list(range(min(n, 1200) - 1, -1, -3)),  # descending, crosses fragment / page bounds
    ]
    for idx in idx_sets:
        assert_same(ours.take(idx), ref.take(idx), f"{built.name} take {idx[:6]}...", exact_dictionaries=False)
        for cols in built.projections[:2]:
            if any("." in c for c in cols):
                continue
            assert_same(ours.take(idx, columns=cols), ref.take(idx, columns=cols), f"{built.name} take {cols}", exact_dictionaries=False)
    assert_same(ours.take(pa.array([n - 1, 0], pa.int64())), ref.take(pa.array([n - 1, 0], pa.int64())), "take", exact_dictionaries=False)
    for v in built.versions[:1]:
        assert_same(_ours(built, v).take([0, 5, 3]), _ref(built, v).take([0, 5, 3]), f"{built.name}@v{v} take", exact_dictionaries=False)


@pytest.mark.parametrize(("batch_size", "window"), [(1000, None), (4096, None), (1000, 1777)])
def test_to_batches(built: Built, device: str, batch_size: int, window: int | None, monkeypatch) -> None:
    """Streamed batches equal pylance's scan; with a small decode window (1777 rows, cut
    into pages, chunks and fragments at odd places) the CPU executor decodes row spans."""
    if window is not None:
        monkeypatch.setattr("lance_gpu.scan.scanner.STREAM_WINDOW_ROWS", window)
    ref, ours = _ref(built), _ours(built, device=device)
    batches = list(ours.to_batches(batch_size=batch_size))
    assert all(b.num_rows <= batch_size for b in batches)
    expected = ref.to_table()
    got = pa.Table.from_batches(batches, schema=expected.schema) if batches else expected.slice(0, 0)
    assert_same(got, expected, f"{built.name} to_batches({batch_size})")
    f = built.filters[0]
    cols = built.projections[0]
    got = list(ours.to_batches(batch_size=batch_size, columns=cols, filter=f, with_row_id=True))
    exp = ref.to_table(columns=cols, filter=f, with_row_id=True)
    assert all(b.num_rows <= batch_size for b in got)
    assert_same(pa.Table.from_batches(got, schema=exp.schema), exp, f"{built.name} to_batches filtered", exact_dictionaries=False)


def test_deletion_files_present(built: Built) -> None:
    """The matrix really exercises both kinds of deletion file."""
    kinds = {p.suffix for p in Path(built.uri, "_deletions").glob("*")}
    if built.name.startswith("big"):
        assert kinds == {".bin", ".arrow"}
    else:
        assert ".arrow" in kinds


def test_stable_row_ids_differ_from_addresses(root: Path) -> None:
    built = _stable_dataset(root, "2.2")
    ids = lance.dataset(built.uri).to_table(columns=["id"], with_row_id=True).column("_rowid").to_numpy()
    assert ids.max() < (1 << 32) and not np.array_equal(ids, np.sort(ids))  # ids, not addresses, and moved


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_encodings_exercised(root: Path, version: str) -> None:
    """The datasets really hold the layouts and encodings the matrix is meant to cover."""
    from lance_gpu.file.container import LanceFileReader
    from lance_gpu.file.encodings.base import DecodeContext
    from lance_gpu.file.reader import parse_layout

    seen: set[str] = set()
    multi_page = False
    for built in (_types_dataset(root, version, True), _big_dataset(root, version)):
        for path in Path(built.uri, "data").glob("*.lance"):
            reader = LanceFileReader(path)
            for ci in range(reader.num_columns):
                pages = reader.column(ci).pages
                multi_page |= len(pages) > 1
                for page in pages:
                    layout = parse_layout(page, DecodeContext(str(path), ci))
                    seen.add(layout.WhichOneof("layout"))
                    text = str(layout)
                    seen.update(t for t in ("fsst", "ZSTD", "dictionary", "rle", "bits_rep", "inline_value") if t in text)
    expected = {"mini_block_layout", "full_zip_layout", "constant_layout", "fsst", "ZSTD", "dictionary", "rle", "bits_rep"}
    if version == "2.2":
        expected.add("inline_value")
    assert expected <= seen, expected - seen
    assert multi_page
