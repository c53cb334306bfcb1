# SPDX-License-Identifier: Apache-2.0
"""``spark.read.format("lance")`` / ``df.write.format("lance")``: a Spark 4.1 Python data source.

::

    from lance_gpu.spark import LanceDataSource
    spark.dataSource.register(LanceDataSource)     # or lance_gpu.spark.register(spark)
    df = (spark.read.format("lance")
          .option("version", 3).option("columns", "id,text").option("filter", "id > 10")
          .load("/data/events.lance"))

Planning happens on the driver: ``schema()`` opens the dataset and pins its version;
``reader(schema)`` plans one :class:`LancePartition` per fragment (fragments larger than
``max_rows_per_partition`` rows are split into row ranges), each carrying the pinned version
number; ``pushFilters`` keeps the Spark filters it can evaluate exactly
(:mod:`lance_gpu.spark._filters`). Tasks run :func:`lance_gpu.spark._scan.read_range`, which
yields ``pyarrow.RecordBatch``es. Writes: :mod:`lance_gpu.spark._write`.

Spark refuses to plan a reader that implements ``pushFilters`` unless
``spark.sql.python.filterPushdown.enabled`` is true. :func:`register` reads that setting and
registers a variant without ``pushFilters`` when it is off; the ``pushdown`` option overrides
the choice per read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from lance_gpu.spark._filters import split_filters
from lance_gpu.spark._options import READ_OPTIONS, WRITE_OPTIONS, check_known, parse_read_options
from lance_gpu.spark._scan import ScanSpec, plan_scan, read_range

__all__ = ["LanceDataSource", "LancePartition", "LanceReader", "LanceFilteringReader", "register"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


class LancePartition(InputPartition):
    """One task: physical rows ``[start, stop)`` of fragment ``fragment_id`` at ``version``."""

    def __init__(self, index: int, fragment_id: int, start: int, stop: int, version: int) -> None:
        self.index = index
        self.fragment_id = fragment_id
        self.start = start
        self.stop = stop
        self.version = version


class LanceReader(DataSourceReader):
    """Reads a planned scan; no filter pushdown (see :class:`LanceFilteringReader`)."""

    def __init__(self, spec: ScanSpec, ranges: Sequence[tuple[int, int, int]]) -> None:
        self.spec = spec
        self.ranges = list(ranges)

    def partitions(self) -> list[InputPartition]:
        v = self.spec.version
        return [LancePartition(i, fid, start, stop, v) for i, (fid, start, stop) in enumerate(self.ranges)]

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        if partition is None:  # Spark's stand-in partition for a dataset without fragments
            return iter(())
        if not isinstance(partition, LancePartition):
            msg = f"expected a LancePartition, got {type(partition).__name__}"
            raise TypeError(msg)
        if partition.version != self.spec.version:
            msg = f"partition pinned to version {partition.version} but the scan reads version {self.spec.version}"
            raise ValueError(msg)
        return read_range(self.spec, partition.fragment_id, partition.start, partition.stop)


class LanceFilteringReader(LanceReader):
    """A :class:`LanceReader` that evaluates the Spark filters it can translate exactly."""

    def pushFilters(self, filters: list[Any]) -> list[Any]:  # noqa: N802 - Spark's name
        target = self.spec.arrow_schema()
        pushed, rest = split_filters(filters, target)
        if pushed:
            self.spec = replace(self.spec, pushed=tuple(self.spec.pushed) + tuple(pushed))
        return rest


class LanceDataSource(DataSource):
    """The ``lance`` format: read and write Lance datasets.

    Read options: ``version``, ``columns``, ``filter``, ``batch_size``,
    ``max_rows_per_partition``, ``device``, ``pushdown``; write options:
    ``max_rows_per_file``, ``data_storage_version`` (see ``_options``). Unknown options
    are errors.
    """

    #: whether ``reader()`` returns a reader with ``pushFilters`` when no ``pushdown`` option is given
    pushdown_default = True

    @classmethod
    def name(cls) -> str:
        return "lance"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        check_known(options, {**READ_OPTIONS, **WRITE_OPTIONS}, "read or write")
        self._pinned_version: int | None = None
        self._our_schema: StructType | None = None

    def schema(self) -> StructType:
        opts = parse_read_options(self.options)
        spec, _ranges = plan_scan(opts)
        # schema() and reader() run in different Python workers; this instance is pickled in
        # between, so the version resolved here is the one every partition reads.
        self._pinned_version = spec.version
        self._our_schema = spec.schema
        return spec.schema

    def reader(self, schema: StructType) -> LanceReader:
        opts = parse_read_options(self.options)
        user_schema = None if self._our_schema is not None and schema == self._our_schema else schema
        spec, ranges = plan_scan(opts, user_schema, version=self._pinned_version)
        pushdown = self.pushdown_default if opts.pushdown is None else opts.pushdown
        cls = LanceFilteringReader if pushdown else LanceReader
        return cls(spec, ranges)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        """Plan a write (``mode("overwrite")`` gives ``overwrite=True``); see :mod:`._write`."""
        from lance_gpu.spark._write import make_writer

        return make_writer(self.options, schema, overwrite)


def register(spark: Any, *, name: str = "lance") -> type[LanceDataSource]:
    """Register the lance data source with ``spark`` under ``name``; returns the class registered.

    Filter pushdown is on when the session has ``spark.sql.python.filterPushdown.enabled=true``
    (Spark refuses readers with ``pushFilters`` otherwise). Use ``name="lance_gpu"`` when
    another ``lance`` source (the JVM lance-spark connector) is on the classpath: Spark
    refuses a name that both a JVM and a Python source claim.
    """
    pushdown = str(spark.conf.get(PUSHDOWN_CONF, "false")).strip().lower() == "true"
    if name == LanceDataSource.name() and pushdown:
        cls: type[LanceDataSource] = LanceDataSource
    else:
        source_name = name
        cls = type(
            f"LanceDataSource_{name}",
            (LanceDataSource,),
            {"name": classmethod(lambda _cls: source_name), "pushdown_default": pushdown, "__module__": __name__},
        )
    spark.dataSource.register(cls)
    return cls
