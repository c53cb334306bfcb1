# SPDX-License-Identifier: Apache-2.0
"""Example Spark job: read a Lance dataset with lance-gpu (see docker/spark-submit-example.sh)."""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

import lance_gpu
import lance_gpu.spark


def main(uri: str) -> None:
    spark = SparkSession.builder.appName("lance-gpu example").getOrCreate()
    lance_gpu.spark.register(spark)  # format "lance"; filter pushdown if the session enables it
    try:
        lance_gpu.dataset(uri)
    except lance_gpu.DatasetNotFoundError:
        # No dataset yet: write one through the Spark writer (each task writes its own files,
        # the driver commits one version).
        rows = spark.range(0, 1_000_000, 1, 8).selectExpr("id", "id % 97 AS k", "CONCAT('row-', id) AS s")
        rows.write.format("lance").mode("overwrite").save(uri)

    # 1. The Python data source (a CPU BatchScan to the JVM; pushed filters are evaluated by lance-gpu).
    df = spark.read.format("lance").load(uri)
    df.filter("k = 3").groupBy().count().show()

    # 2. mapInArrow over fragments: the RAPIDS Accelerator runs it as GpuMapInArrowExec, so the
    #    decoded batches go straight into GPU columnar batches for the rest of the plan.
    fast = lance_gpu.spark.read_lance(spark, uri, columns=["id", "k"], filter="id >= 1000")
    fast.groupBy("k").count().orderBy("k").show(5)
    fast.explain()  # look for GpuMapInArrow; spark.rapids.sql.explain=NOT_ON_GPU logs fallbacks
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/work/example.lance")
