# SPDX-License-Identifier: Apache-2.0
"""The Spark write side: ``df.write.format("lance").mode("append" | "overwrite").save(uri)``.

Tasks write data files with lance_gpu's writer, the driver commits one version; pylance
(the reference) reads the result. Shares the suite's SparkSession with test_spark_read.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning"),
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'lance-gpu[spark]')")
lance = pytest.importorskip("lance")
pytest.importorskip("lance_gpu.write", reason="lance_gpu has no writer in this build")

from test_spark_read import assert_same_rows, spark, types_table  # noqa: E402,F401 - the shared session fixture

ROWS_SQL = """
    id,
    CAST(id % 7 AS INT) AS small,
    IF(id % 5 = 0, NULL, CONCAT('name-', id)) AS name,
    CAST(id / 8 AS DECIMAL(12, 3)) AS price,
    TIMESTAMP'2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS ts,
    DATE'2020-02-01' + CAST(id % 300 AS INT) AS day,
    IF(id % 4 = 0, NULL, sequence(0, CAST(id % 3 AS INT))) AS arr,
    named_struct('a', CAST(id AS DOUBLE) / 2, 'b', IF(id % 6 = 0, NULL, 'x')) AS st,
    map('k', id) AS m,
    CAST(CONCAT('b', id) AS BINARY) AS raw
"""


def frame(spark, n: int, start: int = 0, partitions: int = 4):
    return spark.range(start, start + n, 1, partitions).selectExpr(*[c.strip() for c in ROWS_SQL.strip().split(",\n")])


def data_files(uri: str) -> set[str]:
    return set(os.listdir(Path(uri) / "data")) if (Path(uri) / "data").exists() else set()


def referenced_files(uri: str) -> set[str]:
    return {f.data_files()[0].path for f in lance.dataset(uri).get_fragments()}


def test_overwrite_then_append_roundtrip(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "out.lance")
    df = frame(spark, 1000)
    df.write.format("lance").mode("overwrite").option("max_rows_per_file", 100).save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 1 and ds.count_rows() == 1000
    assert len(ds.get_fragments()) == 12  # 4 tasks x 250 rows in files of <= 100 rows
    assert ds.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    want = df.toArrow()
    assert_same_rows(ds.to_table().cast(want.schema), want)

    more = frame(spark, 200, start=1000, partitions=2)
    more.select(*reversed(more.columns)).write.format("lance").mode("append").save(uri)  # matched by name
    ds = lance.dataset(uri)
    assert ds.version == 2 and ds.count_rows() == 1200
    assert len(ds.get_fragments()) == 12 + 2
    assert sorted(ds.to_table(columns=["id"]).column(0).to_pylist()) == list(range(1200))
    # and back through the data source
    back = spark.read.format("lance").load(uri).toArrow()
    assert_same_rows(back, frame(spark, 1200, partitions=1).toArrow())
    assert referenced_files(uri) == data_files(uri)


def test_append_to_a_pylance_dataset_keeps_its_types(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "pylance.lance")
    # ns timestamps and half floats do not survive Spark exactly; 2.1 files hold no maps
    table = types_table(300).drop(["ts", "f16", "m"])
    lance.write_dataset(table, uri, data_storage_version="2.1")
    spark.read.format("lance").load(uri).write.format("lance").mode("append").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 2 and ds.data_storage_version == "2.1"
    assert ds.schema == lance.dataset(uri, version=1).schema  # u8 stays uint8, vec a fixed-size list ...
    got = ds.to_table()
    assert got.num_rows == 600
    assert got.slice(300).sort_by("id").equals(got.slice(0, 300).sort_by("id"))


def test_overwrite_replaces_schema_and_keeps_history(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "ow.lance")
    lance.write_dataset(pa.table({"a": np.arange(5)}), uri)
    lance.dataset(uri).delete("a = 1")
    frame(spark, 30, partitions=3).select("id", "name").write.format("lance").mode("overwrite").save(uri)
    ds = lance.dataset(uri)
    assert ds.version == 3 and ds.schema.names == ["id", "name"] and ds.count_rows() == 30
    assert lance.dataset(uri, version=2).to_table().column("a").to_pylist() == [0, 2, 3, 4]


def _fail_in_one_task(batches):
    import time

    from pyspark import TaskContext

    if TaskContext.get().partitionId() == 3:
        time.sleep(3)  # let the other tasks finish (and write) first
        raise RuntimeError("boom: task 3 fails")
    yield from batches


def test_failed_job_commits_nothing_and_removes_its_files(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "abort.lance")
    frame(spark, 40, partitions=2).write.format("lance").mode("overwrite").save(uri)
    before = data_files(uri)
    df = frame(spark, 400, partitions=4)
    failing = df.mapInArrow(_fail_in_one_task, df.schema)
    with pytest.raises(Exception, match="boom: task 3 fails"):
        failing.write.format("lance").mode("append").save(uri)
    assert lance.dataset(uri).version == 1
    assert data_files(uri) == before


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda df, p: df.write.format("lance").mode("append").option("max_rows_per_fil", 3).save(p), "unknown option"),
        (lambda df, p: df.select("id").write.format("lance").mode("append").save(p), "the DataFrame has columns"),
        (lambda df, p: df.selectExpr("CAST(id AS INT) AS id", "name").write.format("lance").mode("append").save(p), "column 'id' is bigint"),
        (lambda df, p: df.write.format("lance").mode("overwrite").option("data_storage_version", "0.9").save(p), "data_storage_version"),
        (lambda df, p: df.write.format("lance").save(p), "Append"),
        (lambda df, p: df.write.format("lance").mode("append").option("device", "tpu").save(p), "option 'device'"),
    ],
    ids=["unknown-option", "columns", "types", "storage-version", "errorifexists", "device"],
)
def test_write_errors_before_any_task(spark, tmp_path: Path, write, message: str) -> None:
    uri = str(tmp_path / "err.lance")
    lance.write_dataset(pa.table({"id": np.arange(3), "name": ["a", "b", "c"]}), uri)
    df = frame(spark, 10, partitions=1).select("id", "name")
    tracker = spark.sparkContext.statusTracker()
    jobs_before = len(tracker.getJobIdsForGroup())
    with pytest.raises(Exception, match=re.escape(message)):
        write(df, uri)
    assert len(tracker.getJobIdsForGroup()) == jobs_before
    assert lance.dataset(uri).version == 1
    shutil.rmtree(uri)


def _file_bytes(uri: str) -> list[bytes]:
    """The dataset's data files' contents, sorted (names are random; tasks write the same rows)."""
    return sorted((Path(uri) / "data" / name).read_bytes() for name in data_files(uri))


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["gpu", "auto"])
def test_the_device_option_encodes_on_the_device(spark, tmp_path: Path, device: str) -> None:
    """``device="gpu"`` (and ``"auto"`` where a GPU is usable): each task uploads its host
    batches and encodes its pages on the device -- the CPU sink's files, byte for byte.
    Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1 LANCE_GPU_TEST_SIM_DEVICE=1``, which
    Spark's Python workers inherit) the device is simulated in every task."""
    df = frame(spark, 120, partitions=2)
    cpu, gpu = str(tmp_path / "cpu.lance"), str(tmp_path / "gpu.lance")
    df.write.format("lance").mode("overwrite").save(cpu)
    df.write.format("lance").mode("overwrite").option("device", device).save(gpu)
    assert _file_bytes(gpu) == _file_bytes(cpu)
    want = df.toArrow()
    assert_same_rows(lance.dataset(gpu).to_table().cast(want.schema), want)


def test_the_device_option_without_a_gpu(spark, tmp_path: Path) -> None:
    """Without a usable GPU in the tasks, ``auto`` encodes on the CPU (the same files) and
    ``gpu`` fails the job with :class:`GpuUnavailableError`, committing nothing."""
    from lance_gpu._device import gpu_unusable_reason

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or gpu_unusable_reason() is None:
        pytest.skip("the tasks have a (simulated) GPU")
    df = frame(spark, 40, partitions=2)
    cpu, auto = str(tmp_path / "cpu.lance"), str(tmp_path / "auto.lance")
    df.write.format("lance").mode("overwrite").save(cpu)
    df.write.format("lance").mode("overwrite").option("device", "auto").save(auto)
    assert _file_bytes(auto) == _file_bytes(cpu)
    with pytest.raises(Exception, match=r"GpuUnavailableError|device='gpu' requested"):
        df.write.format("lance").mode("append").option("device", "gpu").save(cpu)
    assert lance.dataset(cpu).version == 1
