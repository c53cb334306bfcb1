# SPDX-License-Identifier: Apache-2.0
"""The Spark read side: ``spark.read.format("lance")`` and ``lance_gpu.spark.read_lance``.

Datasets are written by pylance (the reference); Spark's rows (``DataFrame.toArrow()``) must
equal pylance's rows cast to the Spark schema with pyarrow's own cast (an oracle independent
of our converter). One local[2] SparkSession serves the whole spark suite (see
:func:`spark_session`); run with ``python -m pytest -q -m spark``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning"),
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'lance-gpu[spark]')")
lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402
from lance_gpu._device import GpuFallbackWarning  # noqa: E402

warnings.simplefilter("ignore", GpuFallbackWarning)

REPO = Path(__file__).resolve().parents[1]


def _java_problem() -> str | None:
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get("JAVA_HOME") else None
    java = java or shutil.which("java")
    if java is None:
        return "no java on PATH or JAVA_HOME (Spark 4 needs Java 17+)"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"java does not run: {exc}"
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if m is None:
        return None
    major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2) or 0)
    return None if major >= 17 else f"Java {major} found; Spark 4 needs Java 17+"


_JAVA = _java_problem()
if _JAVA is not None:
    pytest.skip(_JAVA, allow_module_level=True)

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import datasource as sds  # noqa: E402

import lance_gpu.spark as lgs  # noqa: E402
from lance_gpu.spark._filters import split_filters, to_expression  # noqa: E402
from lance_gpu.spark._options import LanceSparkOptionError, parse_read_options  # noqa: E402
from lance_gpu.spark._scan import plan_scan, read_range  # noqa: E402
from lance_gpu.spark._types import to_spark_arrays  # noqa: E402
from lance_gpu.spark.datasource import LanceDataSource, LanceFilteringReader, LancePartition, LanceReader  # noqa: E402


# --------------------------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------------------------

_SESSION: list[SparkSession] = []


def get_spark() -> SparkSession:
    """The suite's one SparkSession (created on first use, stopped at the end of the run)."""
    if not _SESSION:
        # Python workers are started by the JVM, which inherits this environment; they import
        # lance_gpu and the functions of test modules by name.
        paths = [str(REPO), str(REPO / "tests")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        os.environ.setdefault("PYSPARK_PYTHON", __import__("sys").executable)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("lance-gpu-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.sql.python.filterPushdown.enabled", "true")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.python.worker.reuse", "true")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        lgs.register(spark)
        _SESSION.append(spark)
    return _SESSION[0]


@pytest.fixture(scope="session")
def spark():
    session = get_spark()
    yield session
    session.stop()
    _SESSION.clear()


# --------------------------------------------------------------------------------------------
# Datasets (written by pylance)
# --------------------------------------------------------------------------------------------


def types_table(n: int, start: int = 0, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n, dtype=np.int64)
    nulls = rng.random(n) < 0.15
    words = ["alpha", "", "épsilon ✓", "x" * 30, "beta"]
    return pa.table(
        {
            "id": ids,
            "i8": pa.array(rng.integers(-128, 128, n).astype(np.int8), mask=nulls),
            "i32": pa.array(rng.integers(-(2**31), 2**31, n).astype(np.int32)),
            "u8": pa.array(rng.integers(0, 256, n).astype(np.uint8)),
            "u32": pa.array(rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32), mask=nulls),
            "u64": pa.array(rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2)),
            "f16": pa.array(rng.standard_normal(n).astype(np.float16)),
            "f32": pa.array(rng.standard_normal(n).astype(np.float32), mask=nulls),
            "f64": pa.array(rng.standard_normal(n)),
            "flag": pa.array(rng.random(n) < 0.5, mask=nulls),
            "s": pa.array([words[i % 5] + str(i) for i in range(n)], mask=nulls),
            "ls": pa.array([f"L{i}" for i in range(n)], pa.large_string()),
            "bin": pa.array([bytes(rng.integers(0, 256, i % 7).astype(np.uint8)) for i in range(n)], mask=nulls),
            "fsb": pa.array([int(i).to_bytes(4, "little") for i in ids], pa.binary(4)),
            "dec": pa.array([decimal.Decimal(int(x)).scaleb(-2) for x in rng.integers(-(10**9), 10**9, n)], pa.decimal128(12, 2)),
            "day": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=int(i)) for i in ids], pa.date32()),
            "ts": pa.array((ids * 1_000_000_007).astype("datetime64[ns]"), pa.timestamp("ns", tz="UTC")),
            "ts_ms": pa.array((ids * 86_400_123).astype("datetime64[ms]"), pa.timestamp("ms")),
            "ints": pa.array([[int(i), None, -int(i)][: i % 4] if i % 6 else None for i in ids], pa.list_(pa.int32())),
            "vec": pa.array([[float(i) / 3] * 4 for i in ids], pa.list_(pa.float32(), 4)),
            "st": pa.array(
                [{"a": int(i) % 65536, "b": f"b{i}"} if i % 5 else None for i in ids],
                pa.struct([("a", pa.uint16()), ("b", pa.string())]),
            ),
            "m": pa.array([[("k", int(i)), ("z", None)] if i % 4 else None for i in ids], pa.map_(pa.string(), pa.int64())),
            "dur": pa.array(ids.astype("timedelta64[us]"), pa.duration("us")),
        }
    )


@pytest.fixture(scope="module")
def types_ds(tmp_path_factory) -> str:
    """v1: 1000 rows in 3 fragments; v2: deletions in two of them; v3: an appended fragment."""
    uri = str(tmp_path_factory.mktemp("spark") / "types.lance")
    lance.write_dataset(types_table(1000), uri, max_rows_per_file=400, data_storage_version="2.2")
    ds = lance.dataset(uri)
    ds.delete("id % 10 = 3 OR (id >= 400 AND id < 450)")
    lance.write_dataset(types_table(300, start=1000, seed=1), uri, mode="append")
    return uri


def expected(uri: str, got_schema: pa.Schema, version: int | None = None, **kw) -> pa.Table:
    """pylance's rows, cast by pyarrow to the schema Spark returned."""
    table = lance.dataset(uri, version=version).to_table(**kw)
    return table.cast(got_schema, safe=False)


def assert_same_rows(got: pa.Table, exp: pa.Table) -> None:
    got, exp = got.sort_by("id"), exp.sort_by("id")
    assert got.num_rows == exp.num_rows
    for name in exp.column_names:
        a, b = got.column(name), exp.column(name)
        if not a.equals(b):
            assert a.to_pylist() == b.to_pylist(), name


def scan_rows(df) -> int:
    """Rows the BatchScan (our reader) handed Spark in the last execution of ``df``."""
    plan = df._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    for i in range(leaves.size()):
        leaf = leaves.apply(i)
        if leaf.getClass().getSimpleName() == "BatchScanExec":
            return int(leaf.metrics().get("numOutputRows").get().value())
    raise AssertionError(f"no BatchScanExec in {plan.toString()}")


# --------------------------------------------------------------------------------------------
# The data source
# --------------------------------------------------------------------------------------------


def test_read_matches_pylance(spark, types_ds: str) -> None:
    df = spark.read.format("lance").load(types_ds)
    assert df.rdd.getNumPartitions() == len(lance.dataset(types_ds).get_fragments()) == 4
    schema = df.schema.simpleString()
    assert "u64:decimal(20,0)" in schema and "ts:timestamp," in schema and "ts_ms:timestamp_ntz" in schema
    assert "vec:array<float>" in schema and "st:struct<a:int,b:string>" in schema and "m:map<string,bigint>" in schema
    got = df.toArrow()
    assert_same_rows(got, expected(types_ds, got.schema))


def test_read_old_version_columns_and_filter(spark, types_ds: str) -> None:
    df = (
        spark.read.format("lance")
        .option("version", 1)
        .option("columns", "id,s,st,m")
        .option("filter", "id < 500 AND s IS NOT NULL")
        .option("batch_size", 64)
        .load(types_ds)
    )
    assert df.columns == ["id", "s", "st", "m"]
    assert df.rdd.getNumPartitions() == 3
    got = df.toArrow()
    exp = expected(types_ds, got.schema, version=1, columns=["id", "s", "st", "m"], filter="id < 500 AND s IS NOT NULL")
    assert 0 < got.num_rows < 500
    assert_same_rows(got, exp)


def test_large_fragment_is_split_into_row_ranges(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "big.lance")
    lance.write_dataset(pa.table({"id": np.arange(5000), "x": np.arange(5000) % 7}), uri, max_rows_per_file=3500)
    lance.dataset(uri).delete("id >= 1000 AND id < 1100")
    reader = spark.read.format("lance").option("max_rows_per_partition", 1000)
    df = reader.load(uri)
    assert df.rdd.getNumPartitions() == 4 + 2  # 3500 -> 4 ranges, 1500 -> 2
    got = df.toArrow()
    assert got.num_rows == 4900
    assert sorted(got.column("id").to_pylist()) == [i for i in range(5000) if not 1000 <= i < 1100]


def test_dataset_without_fragments(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "empty.lance")
    lance.write_dataset(pa.table({"id": np.arange(3), "s": ["a", "b", "c"]}), uri)
    lance.dataset(uri).delete("id >= 0")
    assert lance.dataset(uri).get_fragments() == []
    got = spark.read.format("lance").load(uri).toArrow()
    assert got.num_rows == 0 and got.column_names == ["id", "s"]
    assert lgs.read_lance(spark, uri).toArrow().num_rows == 0


def test_dataframe_reads_the_version_resolved_at_load(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "pinned.lance")
    lance.write_dataset(pa.table({"id": np.arange(10)}), uri)
    df = spark.read.format("lance").load(uri)
    lance.write_dataset(pa.table({"id": np.arange(10, 15)}), uri, mode="append")
    assert df.count() == 10
    assert spark.read.format("lance").load(uri).count() == 15


def test_pushed_filters_reduce_rows_read(spark, types_ds: str) -> None:
    df = spark.read.format("lance").load(types_ds)
    total = df.count()
    q = df.filter("id >= 900 AND s LIKE 'alpha%' AND f64 > -0.5 AND u64 > 0 AND day <> DATE'2020-01-01'")
    got = q.toArrow()
    assert scan_rows(q) == got.num_rows  # every conjunct was evaluated by our reader
    assert "Filter (" not in q._jdf.queryExecution().executedPlan().toString()
    exp = lance.dataset(types_ds).to_table(filter="id >= 900 AND s LIKE 'alpha%' AND f64 > -0.5 AND u64 > 0")
    assert 0 < got.num_rows < total and got.num_rows == exp.num_rows
    assert sorted(got.column("id").to_pylist()) == sorted(exp.column("id").to_pylist())
    # A predicate Spark cannot push (OR over two columns) stays in Spark; the pushable one is ours.
    q2 = df.filter("id < 100 AND (i32 > 0 OR s = 'beta4')")
    n2 = q2.toArrow().num_rows
    assert scan_rows(q2) == lance.dataset(types_ds).count_rows("id < 100")
    assert n2 == lance.dataset(types_ds).count_rows("id < 100 AND (i32 > 0 OR s = 'beta4')")


def test_pushdown_can_be_turned_off(spark, types_ds: str) -> None:
    df = spark.read.format("lance").option("pushdown", "false").load(types_ds).filter("id >= 900")
    assert df.toArrow().num_rows == lance.dataset(types_ds).count_rows("id >= 900")
    assert scan_rows(df) == lance.dataset(types_ds).count_rows()


def test_user_schema_is_a_projection(spark, types_ds: str) -> None:
    df = spark.read.format("lance").schema("id long, u8 int, s string").load(types_ds)
    got = df.toArrow()
    exp = lance.dataset(types_ds).to_table(columns=["id", "u8", "s"])
    assert got.column_names == ["id", "u8", "s"]
    assert_same_rows(got, exp.cast(got.schema))


@pytest.mark.parametrize(
    ("configure", "message"),
    [
        (lambda r, p: r.load(p + "_missing"), "does not exist"),
        (lambda r, p: r.load(str(Path(p) / "data")), "is not a Lance dataset: no _versions/"),
        (lambda r, p: r.option("verison", 2).load(p), "unknown option"),
        (lambda r, p: r.option("version", 99).load(p), "has no version 99"),
        (lambda r, p: r.option("version", "no_such_tag").load(p), "no_such_tag"),
        (lambda r, p: r.option("columns", "id,nope").load(p), "nope"),
        (lambda r, p: r.option("filter", "id >>> 3").load(p), "FilterError"),
        (lambda r, p: r.option("batch_size", 0).load(p), "batch_size"),
        (lambda r, p: r.schema("id long, nope int").load(p), "nope"),
        (lambda r, p: r.schema("s int").load(p), "cannot be read as int"),
    ],
    ids=["no-dataset", "not-a-dataset", "unknown-option", "bad-version", "bad-tag", "bad-column", "bad-filter", "bad-batch", "schema-column", "schema-type"],
)
def test_errors_before_any_task(spark, types_ds: str, configure, message: str) -> None:
    from pyspark.errors import AnalysisException

    tracker = spark.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup())
    with pytest.raises(AnalysisException, match=re.escape(message)):
        df = configure(spark.read.format("lance"), types_ds)
        df.collect()  # reader() / partitions() run when the query is planned, on the driver
    assert len(tracker.getJobIdsForGroup()) == jobs_before  # no job, so no task, ran


# --------------------------------------------------------------------------------------------
# mapInArrow
# --------------------------------------------------------------------------------------------


def test_read_lance_matches_data_source(spark, types_ds: str) -> None:
    df = lgs.read_lance(spark, types_ds)
    assert df.rdd.getNumPartitions() == 4
    assert "MapInArrow" in df._jdf.queryExecution().executedPlan().toString()
    got = df.toArrow()
    via_source = spark.read.format("lance").load(types_ds).toArrow()
    assert got.schema == via_source.schema
    assert_same_rows(got, via_source)
    assert_same_rows(got, expected(types_ds, got.schema))


def test_read_lance_options(spark, types_ds: str) -> None:
    df = lgs.read_lance(spark, types_ds, columns=["id", "ls", "vec"], filter="id % 3 = 0", version=2, max_rows_per_partition=150, batch_size=50)
    assert df.rdd.getNumPartitions() == 3 + 3 + 2  # 400 / 400 / 200 physical rows in ranges of <= 150
    got = df.toArrow()
    assert_same_rows(got, expected(types_ds, got.schema, version=2, columns=["id", "ls", "vec"], filter="id % 3 = 0"))
    with pytest.raises(lance_gpu.DatasetNotFoundError):
        lgs.read_lance(spark, types_ds, version=42)
    with pytest.raises(LanceSparkOptionError, match="device"):
        lgs.read_lance(spark, types_ds, device="tpu")


# --------------------------------------------------------------------------------------------
# Filter translation: every pushed filter keeps exactly the rows Spark keeps
# --------------------------------------------------------------------------------------------

NAN = float("nan")
SEMANTICS_CASES = [
    ("f = 0.0", sds.EqualTo(("f",), 0.0)),
    ("f = -0.0", sds.EqualTo(("f",), -0.0)),
    ("f = double('NaN')", sds.EqualTo(("f",), NAN)),
    ("f > 1.0", sds.GreaterThan(("f",), 1.0)),
    ("f >= -1.5", sds.GreaterThanOrEqual(("f",), -1.5)),
    ("f < 1.0", sds.LessThan(("f",), 1.0)),
    ("f <= 0.0", sds.LessThanOrEqual(("f",), 0.0)),
    ("f IN (0.0, 2.5, double('NaN'))", sds.In(("f",), (0.0, 2.5, NAN))),
    ("NOT (f > 1.0)", sds.Not(sds.GreaterThan(("f",), 1.0))),
    ("NOT (f IN (0.0, 2.5))", sds.Not(sds.In(("f",), (0.0, 2.5)))),
    ("f <=> 2.5", sds.EqualNullSafe(("f",), 2.5)),
    ("NOT (f <=> 2.5)", sds.Not(sds.EqualNullSafe(("f",), 2.5))),
    ("g > 0.5", sds.GreaterThan(("g",), 0.5)),
    ("i IN (1, 3)", sds.In(("i",), (1, 3))),
    ("NOT (i IN (1, 3))", sds.Not(sds.In(("i",), (1, 3)))),
    ("i <> 2", sds.Not(sds.EqualTo(("i",), 2))),
    ("u > 200", sds.GreaterThan(("u",), 200)),
    ("i IS NULL", sds.IsNull(("i",))),
    ("NOT (i IS NULL)", sds.Not(sds.IsNull(("i",)))),
    ("s LIKE 'ab%'", sds.StringStartsWith(("s",), "ab")),
    ("s LIKE '%c'", sds.StringEndsWith(("s",), "c")),
    ("NOT (s LIKE '%b%')", sds.Not(sds.StringContains(("s",), "b"))),
    ("s >= 'b'", sds.GreaterThanOrEqual(("s",), "b")),
    ("s <=> NULL", sds.EqualNullSafe(("s",), None)),
    ("big > 10000000000000000000", sds.GreaterThan(("big",), decimal.Decimal(10**19))),
    ("d >= DATE'2024-01-02'", sds.GreaterThanOrEqual(("d",), dt.date(2024, 1, 2))),
    ("ts < TIMESTAMP'2024-01-01 00:00:00.000002'", sds.LessThan(("ts",), dt.datetime(2024, 1, 1, 0, 0, 0, 2, tzinfo=dt.timezone.utc))),
    ("tsn = TIMESTAMP_NTZ'2024-01-01 00:00:00.000001'", sds.EqualTo(("tsn",), dt.datetime(2024, 1, 1, 0, 0, 0, 1))),
    ("NOT (b = true)", sds.Not(sds.EqualTo(("b",), True))),
    ("bin = X'0102'", sds.EqualTo(("bin",), bytearray(b"\x01\x02"))),
]


def test_pushed_filter_semantics_match_spark(spark) -> None:
    """Our expression for each filter keeps exactly the rows Spark's own predicate keeps."""
    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    raw = pa.table(
        {
            "f": pa.array([0.0, -0.0, NAN, 1.0, 2.5, -2.0, None, float("inf"), -float("inf"), 1.5], pa.float64()),
            "g": pa.array([NAN, 0.5, 0.75, None, -0.0, 1.0, NAN, 0.0, 3.0, 0.5], pa.float32()),
            "i": pa.array([1, 2, 3, None, 5, 1, 2, 3, None, 0], pa.int32()),
            "u": pa.array([0, 100, 200, 201, 255, None, 7, 8, 9, 250], pa.uint8()),
            "s": pa.array(["ab", "abc", "b", None, "", "bc", "xbz", "ABc", "ab\u00e9", "c"]),
            "big": pa.array([0, 2**64 - 1, 10**19, 10**19 + 1, None, 5, 6, 7, 8, 9], pa.uint64()),
            "d": pa.array([dt.date(2024, 1, k % 4 + 1) if k != 4 else None for k in range(10)], pa.date32()),
            "ts": pa.array([base + dt.timedelta(microseconds=k) for k in range(10)], pa.timestamp("ns", tz="UTC")),
            "tsn": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=k % 3) for k in range(10)], pa.timestamp("us")),
            "b": pa.array([True, False, None, True, False, True, None, False, True, False]),
            "bin": pa.array([b"\x01\x02", b"\x01", None, b"\x01\x02\x03", b"", b"\x01\x02", b"\xff", None, b"\x00", b"\x01\x02"]),
            "k": pa.array(np.arange(10)),
        }
    )
    schema = lgs.to_spark_schema(raw.schema)
    from lance_gpu.spark._types import spark_arrow_schema

    target = spark_arrow_schema(schema)
    table = to_spark_arrays(raw, target)
    df = spark.createDataFrame(table.to_pylist(), schema)
    exprs = [f"coalesce({sql}, false) AS p{j}" for j, (sql, _f) in enumerate(SEMANTICS_CASES)]
    truth = df.selectExpr("k", *exprs).toArrow().sort_by("k")
    for j, (sql, flt) in enumerate(SEMANTICS_CASES):
        expr = to_expression(flt, target)
        assert expr is not None, f"{sql}: not translated"
        ours = table.filter(expr).column("k").to_pylist()
        spark_keeps = [k for k, p in zip(truth.column("k").to_pylist(), truth.column(f"p{j}").to_pylist()) if p]
        assert sorted(ours) == spark_keeps, sql


def test_untranslatable_filters_are_handed_back() -> None:
    schema = pa.schema([("f", pa.float64()), ("i", pa.int32()), ("st", pa.struct([("a", pa.int32())])), ("l", pa.list_(pa.int32()))])
    keep = [
        sds.GreaterThan(("f",), NAN),  # order against a NaN literal
        sds.EqualTo(("st", "a"), 1),  # nested path
        sds.EqualTo(("l",), [1]),  # array literal
        sds.GreaterThan(("i",), 2**40),  # does not fit the column
        sds.In(("i",), (1, None)),  # NULL in the list
        sds.EqualTo(("nope",), 1),  # not a column
        sds.StringStartsWith(("i",), "1"),  # not a string column
    ]
    pushed = [sds.IsNotNull(("st",)), sds.EqualTo(("i",), 3), sds.Not(sds.IsNull(("l",)))]
    got_pushed, rest = split_filters(keep + pushed, schema)
    assert rest == keep and got_pushed == pushed


# --------------------------------------------------------------------------------------------
# Driver / executor pieces without a Spark job
# --------------------------------------------------------------------------------------------


def test_partitions_are_pinned_and_picklable(types_ds: str, tmp_path: Path) -> None:
    import pickle

    uri = str(tmp_path / "pin.lance")
    shutil.copytree(types_ds, uri)
    source = LanceDataSource({"path": uri, "columns": "id,s"})
    schema = source.schema()
    source = pickle.loads(pickle.dumps(source))  # what Spark does between schema() and reader()
    lance.write_dataset(types_table(5, start=5000), uri, mode="append")
    reader = source.reader(schema)
    assert isinstance(reader, LanceFilteringReader)
    rest = reader.pushFilters([sds.GreaterThan(("id",), 950), sds.Not(sds.EqualTo(("s",), "x"))])
    assert list(rest) == []
    parts = reader.partitions()
    assert [type(p) for p in parts] == [LancePartition] * 4
    assert {p.version for p in parts} == {3}
    reader = pickle.loads(pickle.dumps(reader))
    rows = sum(b.num_rows for p in parts for b in reader.read(p))
    assert rows == lance.dataset(uri, version=3).count_rows("id > 950 AND s <> 'x'")
    plain = LanceDataSource({"path": uri, "pushdown": "false"})
    assert type(plain.reader(plain.schema())) is LanceReader
    assert list(LanceReader(reader.spec, []).read(None)) == []


def test_option_parsing() -> None:
    opts = parse_read_options({"path": "/x", "version": "7", "columns": '["a", "b.c"]', "batch_size": "10", "device": "CPU"})
    assert (opts.version, opts.columns, opts.batch_size, opts.device) == (7, ("a", "b.c"), 10, "cpu")
    assert parse_read_options({"path": "/x", "version": "v1.0"}).version == "v1.0"
    for bad in ({"version": "0"}, {"columns": " , "}, {"device": "tpu"}, {"pushdown": "maybe"}, {"max_rows_per_partition": "-1"}, {"limit": "3"}):
        with pytest.raises(LanceSparkOptionError):
            parse_read_options({"path": "/x", **bad})
    with pytest.raises(LanceSparkOptionError, match="no dataset path"):
        parse_read_options({})
    with pytest.raises(LanceSparkOptionError, match="unknown option"):
        LanceDataSource({"path": "/x", "colums": "a"})


def test_read_range_windows_and_deletions(types_ds: str) -> None:
    spec, ranges = plan_scan(parse_read_options({"path": types_ds, "columns": "id", "batch_size": "7", "max_rows_per_partition": "150"}))
    ids = []
    for r in ranges:
        for b in read_range(spec, *r):
            assert 0 < b.num_rows <= 7
            ids += b.column(0).to_pylist()
    assert ids == sorted(lance.dataset(types_ds).to_table(columns=["id"]).column(0).to_pylist())
