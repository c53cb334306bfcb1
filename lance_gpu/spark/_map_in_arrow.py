# SPDX-License-Identifier: Apache-2.0
"""``read_lance(spark, uri)``: a Lance scan as ``mapInArrow`` over fragment row ranges.

The DataFrame is ``createDataFrame([(task, fragment_id, start, stop), ...])`` range-repartitioned into one
partition per range, then ``mapInArrow`` of a function that reads each range with lance_gpu.
Unlike a Python data source scan (a row-based ``BatchScanExec`` to the JVM), the RAPIDS
Accelerator runs ``mapInArrow`` as a GPU exec (``GpuMapInArrowExec``) and reads its Arrow
output straight into GPU columnar batches.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from lance_gpu.spark._options import DEFAULT_BATCH_SIZE, DEFAULT_MAX_ROWS_PER_PARTITION, parse_read_options
from lance_gpu.spark._scan import ScanSpec, plan_scan, read_range

__all__ = ["read_lance"]

_LARGE_VAR_TYPES = "spark.sql.execution.arrow.useLargeVarTypes"


class _RangeReader:
    """The mapInArrow function: reads the ranges of its input rows (pickled into every task)."""

    def __init__(self, spec: ScanSpec) -> None:
        self.spec = spec

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            cols = batch.to_pydict()
            for fid, start, stop in zip(cols["fragment_id"], cols["start"], cols["stop"]):
                yield from read_range(self.spec, int(fid), int(start), int(stop))


def read_lance(
    spark: Any,
    uri: str,
    columns: Sequence[str] | str | None = None,
    filter: str | None = None,  # noqa: A002 - pylance's name
    version: int | str | None = None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_rows_per_partition: int = DEFAULT_MAX_ROWS_PER_PARTITION,
    device: str = "auto",
) -> Any:
    """A Spark DataFrame of a Lance dataset, read by ``mapInArrow`` tasks.

    Parameters
    ----------
    spark : SparkSession
    uri : str
        The dataset.
    columns : list of str or str, optional
        Columns to read (default all); a string is comma separated. Dotted names select
        struct fields, as in ``LanceDataset.to_table``.
    filter : str, optional
        A pylance SQL predicate, applied while reading.
    version : int or str, optional
        Version number or tag; default the latest. Resolved here, on the driver, and pinned
        for every task.
    batch_size : int
        Rows per Arrow batch a task returns.
    max_rows_per_partition : int
        Fragments with more physical rows are read by several tasks.
    device : {"auto", "gpu", "cpu"}
        Where tasks decode; GPU decodes honour ``CUDA_VISIBLE_DEVICES`` and the
        ``LANCE_GPU_MAX_CONCURRENT_DECODES`` cap (default 1 per GPU).

    Returns
    -------
    pyspark.sql.DataFrame
        One partition per fragment row range; the schema is the data source's.

    Examples
    --------
    >>> df = read_lance(spark, "/data/events.lance", columns=["id", "text"], filter="id > 10")  # doctest: +SKIP
    """
    raw: dict[str, str] = {
        "path": str(uri),
        "batch_size": str(batch_size),
        "max_rows_per_partition": str(max_rows_per_partition),
        "device": str(device),
    }
    if columns is not None:
        raw["columns"] = columns if isinstance(columns, str) else json.dumps(list(columns))
    if filter is not None:
        raw["filter"] = filter
    if version is not None:
        raw["version"] = str(version)
    opts = parse_read_options(raw)
    large = str(spark.conf.get(_LARGE_VAR_TYPES, "false")).strip().lower() == "true"
    spec, ranges = plan_scan(opts, large_types=large)
    if not ranges:
        return spark.createDataFrame([], spec.schema)
    tasks = [(i, fid, start, stop) for i, (fid, start, stop) in enumerate(ranges)]
    plan = spark.createDataFrame(tasks, "task long, fragment_id long, start long, stop long")
    # A range repartition on the distinct task numbers gives exactly one range per partition
    # (a round-robin repartition(n) of several input partitions can put two in one).
    plan = plan.repartitionByRange(len(tasks), "task")
    return plan.mapInArrow(_RangeReader(spec), spec.schema)
