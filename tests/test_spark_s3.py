# SPDX-License-Identifier: Apache-2.0
"""Spark in local mode reads and writes an ``s3://`` dataset on the moto server: the driver
plans and commits, the executors (Python workers) fetch and write the bytes themselves with
the ``storage_options.<key>`` (or flat) options."""

from __future__ import annotations

import pytest

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning"),
    pytest.mark.filterwarnings("ignore:lance is not fork-safe:UserWarning"),
]

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'lance-gpu[spark]')")
lance = pytest.importorskip("lance")

from test_spark_read import spark  # noqa: E402,F401 - the shared session fixture


def test_spark_reads_and_writes_s3(spark, s3_server) -> None:  # noqa: F811
    opts = s3_server.storage_options
    uri = s3_server.uri("spark")
    df = spark.range(0, 1000, 1, 4).selectExpr("id", "CONCAT('name-', id) AS name", "CAST(id AS DOUBLE) / 4 AS x")
    writer = df.write.format("lance").mode("overwrite").option("max_rows_per_file", 300)
    for key, value in opts.items():
        writer = writer.option(f"storage_options.{key}", value)
    writer.save(uri)
    ref = lance.dataset(uri, storage_options=opts)
    assert ref.count_rows() == 1000 and len(ref.get_fragments()) >= 4
    assert sorted(ref.to_table()["id"].to_pylist()) == list(range(1000))

    df.limit(10).write.format("lance").mode("append").options(**opts).save(uri)  # flat keys
    assert lance.dataset(uri, storage_options=opts).count_rows() == 1010

    reader = spark.read.format("lance")
    for key, value in opts.items():
        reader = reader.option(f"storage_options.{key}", value)
    got = reader.load(uri).filter("x >= 100").select("id", "name").collect()
    expected = lance.dataset(uri, storage_options=opts).to_table(columns=["id", "name"], filter="x >= 100")
    assert sorted((r["id"], r["name"]) for r in got) == sorted(zip(expected["id"].to_pylist(), expected["name"].to_pylist()))
