# SPDX-License-Identifier: Apache-2.0
"""Spark benchmark (local mode): a group-by over the read benchmark's 5M-row mixed table, read
through our Lance data source, through ``read_lance`` (mapInArrow), and as Parquet with
``spark.read.parquet``, in one run.  Needs the ``spark`` extra and Java 17.

Query: ``SELECT category, count(*), sum(value), avg(rand_int), max(ts) GROUP BY category``.
Median of --repeat runs (interleaved across readers) after one warm-up; ratio = our time / Parquet's (target: at most 1.5).
Writes benchmarks/results/spark_local.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def _identity(batches):
    yield from batches


def _identity_map(df):
    return df.mapInArrow(_identity, df.schema)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import bench_read

    bench_read.make_data(args.rows, 1000)
    base = bench_read.DATA / f"mixed_{args.rows}"
    lance_path, parquet_path = str(base.with_suffix(".lance")), str(base.with_suffix(".parquet"))

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import lance_gpu.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "6g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    lance_gpu.spark.register(spark)

    def query(df):
        return (
            df.groupBy("category")
            .agg(F.count("*").alias("n"), F.sum("value").alias("s"), F.avg("rand_int").alias("a"), F.max("ts").alias("m"))
            .orderBy("category")
            .collect()
        )

    cols = "category,value,rand_int,ts"
    readers = {
        "lance_source": lambda: spark.read.format("lance").load(lance_path),
        # Python data sources get no column pruning from Spark: the option is how users prune.
        "lance_source_columns": lambda: spark.read.format("lance").option("columns", cols).load(lance_path),
        "lance_mapInArrow_columns": lambda: lance_gpu.spark.read_lance(spark, lance_path, columns=cols.split(",")),
        "lance_mapInArrow": lambda: lance_gpu.spark.read_lance(spark, lance_path),
        "parquet": lambda: spark.read.parquet(parquet_path),
        # Reference, not a Lance reader: the same Parquet rows passed through an identity
        # mapInArrow, i.e. the cost of Spark's Python/Arrow boundary that every Python data
        # source and mapInArrow pays (rows cross from the Python worker to the JVM as Arrow).
        "parquet_via_python_identity": lambda: _identity_map(spark.read.parquet(parquet_path).select(*cols.split(","))),
    }
    # the readers' runs are interleaved so that drifts of machine speed hit them alike
    results = {name: query(make()) for name, make in readers.items()}  # warm-up (JIT caches, workers, page cache)
    runs: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(args.repeat):
        for name, make in readers.items():
            t0 = time.perf_counter()
            query(make())
            runs[name].append(time.perf_counter() - t0)
    times = {name: statistics.median(r) for name, r in runs.items()}
    def close(a, b) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))  # float sums depend on order
        return a == b

    ref = results["parquet"]
    same = all(
        len(results[k]) == len(ref) and all(close(x, y) for r, q in zip(results[k], ref) for x, y in zip(r, q))
        for k in results
    )
    spark.stop()
    meta = {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "rows": args.rows, "repeat": args.repeat, "same_result": same}
    rows = [{"reader": k, "median_s": v, "vs_parquet": v / times["parquet"]} for k, v in times.items()]
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "spark_local.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [f"# Spark local-mode group-by, {meta['date']}, local[2] on {meta['cpus']} cores, {args.rows} rows", "",
             f"Same result from every reader: {same}. Ratio = time / Parquet's time (target: at most 1.5).",
             "`parquet_via_python_identity` is a reference, not a Lance reader: Parquet's rows passed through an",
             "identity `mapInArrow`, the cost of the Python-to-JVM Arrow boundary that every Python data source pays.", "",
             "| reader | median s | vs parquet |", "|---|---|---|"]
    lines += [f"| {r['reader']} | {r['median_s']:.2f} | {r['vs_parquet']:.2f}x |" for r in rows]
    (out / "spark_local.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
