# SPDX-License-Identifier: Apache-2.0
"""The scan both Spark entry points share: plan on the driver, read row ranges in tasks.

Planning (driver) opens the dataset once, resolves the version, the projection, the filter and
the Spark schema, and cuts the fragments into row ranges. Everything a task needs travels in
a :class:`ScanSpec` (plain values, the version pinned as a number) plus a
``(fragment_id, start, stop)`` range, so every task of one query reads the same snapshot even
if a writer commits meanwhile.

The driver builds one :class:`~lance_gpu.scan.ScanPlan` (projection, filter, batch size)
carried in the spec.  A task (:func:`read_range`) restricts it to the live rows of its range
and runs it with the executor picked by ``device`` (see :data:`EXECUTORS`: with "gpu" the
GPU executor decodes on the task's GPU, holding one of the executor's decode slots),
converts to Spark's Arrow types, then applies the filters Spark pushed down.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.types import StructType

from lance_gpu._device import resolve_device
from lance_gpu.dataset import LanceDataset
from lance_gpu.table.snapshot import TableSnapshot
from lance_gpu.errors import SchemaMismatchError
from lance_gpu.scan import CpuExecutor, Executor, GpuExecutor, ScanPlan, build_plan, open_snapshot, resolve, run_plan
from lance_gpu.scan.execute import STREAM_WINDOW_ROWS
from lance_gpu.spark._filters import combined_expression
from lance_gpu.spark._gpu import decode_slot, task_gpu
from lance_gpu.spark._options import DEFAULT_BATCH_SIZE, ReadOptions
from lance_gpu.spark._types import spark_arrow_schema, to_spark_arrays, to_spark_schema

__all__ = ["EXECUTORS", "ScanSpec", "plan_ranges", "plan_scan", "read_range"]


@dataclass(frozen=True)
class ScanSpec:
    """What every task of one scan reads. Plain values only: it is pickled into every task."""

    uri: str
    version: int
    columns: tuple[str, ...]
    schema: StructType
    filter: str | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    device: str = "auto"
    large_types: bool = False
    pushed: tuple[Any, ...] = field(default=())
    storage_options: tuple[tuple[str, str], ...] = ()
    plan: ScanPlan | None = None  # the whole scan; tasks restrict it to their range

    def arrow_schema(self) -> pa.Schema:
        return spark_arrow_schema(self.schema, large_types=self.large_types)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def plan_ranges(ds: LanceDataset, max_rows: int) -> list[tuple[int, int, int]]:
    """``(fragment_id, start, stop)`` physical row ranges: one per fragment, or several
    equal ones for a fragment of more than ``max_rows`` rows."""
    out = []
    for frag in ds.fragments:
        n = frag.physical_rows
        parts = max(1, -(-n // max_rows))
        bounds = [n * i // parts for i in range(parts + 1)]
        out += [(frag.fragment_id, bounds[i], bounds[i + 1]) for i in range(parts)]
    return out


_NUMERIC = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)


def _readable_as(ours: T.DataType, user: T.DataType) -> bool:
    """Whether values of Spark type ``ours`` may be handed to Spark as ``user``: the same
    type, a numeric one as another numeric one (a value that does not fit fails the task),
    or a string as binary."""
    if ours == user:
        return True
    if isinstance(ours, _NUMERIC) and isinstance(user, _NUMERIC):
        return True
    return isinstance(ours, T.StringType) and isinstance(user, T.BinaryType)


def _check_user_schema(ds: LanceDataset, user: StructType) -> None:
    """A schema given with ``.schema(...)`` must name dataset columns readable as its types."""
    ours = to_spark_schema(ds.scanner(columns=list(user.names)).projected_schema)
    for uf, of in zip(user.fields, ours.fields):
        if not _readable_as(of.dataType, uf.dataType):
            msg = (
                f"column {uf.name!r} is {of.dataType.simpleString()} in Spark's view of the dataset "
                f"and cannot be read as {uf.dataType.simpleString()}"
            )
            raise SchemaMismatchError(msg)


def plan_scan(opts: ReadOptions, user_schema: StructType | None = None, *, version: int | None = None, large_types: bool = False) -> tuple[ScanSpec, list[tuple[int, int, int]]]:
    """Open the dataset at ``version`` (default ``opts.version``) and plan its scan.

    Raises on the driver for a path that is not a dataset, a version that does not exist,
    unknown columns, a filter that does not compile, or a user schema that does not fit.
    """
    ds = LanceDataset(
        opts.path, opts.version if version is None else version, device=opts.device,
        storage_options=dict(opts.storage_options),
    )
    if user_schema is not None:
        columns = tuple(user_schema.names)
        if opts.columns is not None and tuple(opts.columns) != columns:
            msg = f"the 'columns' option {list(opts.columns)} and the given schema's columns {list(columns)} differ; give one of them"
            raise SchemaMismatchError(msg)
    else:
        columns = tuple(opts.columns) if opts.columns is not None else tuple(ds.schema.names)
    if not columns:
        msg = "a lance scan must read at least one column"
        raise SchemaMismatchError(msg)
    plan = build_plan(ds.snapshot, columns=list(columns), filter=opts.filter, batch_size=opts.batch_size, device=opts.device)
    arrow = resolve(plan, ds.snapshot).schema
    if user_schema is not None:
        _check_user_schema(ds, user_schema)
        schema = user_schema
    else:
        schema = to_spark_schema(arrow)
    spec = ScanSpec(
        uri=ds.uri,
        version=ds.version,
        columns=columns,
        schema=schema,
        filter=opts.filter,
        batch_size=opts.batch_size,
        device=opts.device,
        large_types=large_types,
        storage_options=opts.storage_options,
        plan=plan,
    )
    return spec, plan_ranges(ds, opts.max_rows_per_partition)


# --------------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------------


class GpuTaskExecutor(GpuExecutor):
    """The GPU executor on this Spark task's GPU, holding one of the executor's decode
    slots while it decodes (the result is host Arrow memory: all a Python data source or
    mapInArrow can hand Spark)."""

    def decode_device(self, ds, units, fields):
        # The one entry point of every GPU decode (host tables and device tables alike), so
        # the slot and the device are held for as long as this task's decode runs.
        ordinal, key = task_gpu()
        with decode_slot(key), select_device(ordinal):
            yield from super().decode_device(ds, units, fields)

    def device_scope(self):
        # what follows a decode (the filter's evaluation, combining, the copy back) runs on
        # this task's GPU too, holding no decode slot
        return select_device(task_gpu()[0])


def select_device(ordinal: int) -> Any:
    """CuPy's context manager making ``ordinal`` the current CUDA device."""
    import cupy

    return cupy.cuda.Device(ordinal)


EXECUTORS: dict[str, Callable[[], Executor]] = {
    "cpu": CpuExecutor,
    "gpu": GpuTaskExecutor,
}


def range_rows(ds: TableSnapshot, fragment_id: int, start: int, stop: int) -> np.ndarray | None:
    """The live physical rows of ``[start, stop)`` of a fragment (None: all live rows)."""
    frag = ds.get_fragment(fragment_id)
    if frag is None:
        msg = f"fragment {fragment_id} is not in version {ds.version} of {ds.uri}"
        raise SchemaMismatchError(msg)
    live = frag.live_rows
    if start == 0 and stop >= frag.physical_rows:
        return None
    if live is None:
        return np.arange(start, min(stop, frag.physical_rows), dtype=np.int64)
    lo, hi = np.searchsorted(live, [start, stop])
    return live[lo:hi].astype(np.int64)


def task_device(choice: str) -> str:
    """The executor ("gpu" or "cpu") a task decodes with for the ``device`` option.

    ``"auto"`` decodes on the CPU.  A task's batches cross to the JVM as host Arrow (the
    Python data source and ``mapInArrow`` alike, with or without the RAPIDS Accelerator), so
    a GPU decode pays a device-to-host copy of everything it decoded; measured on an H200
    with 16 cores (``benchmarks/results/gpu_nvidia-h200.md``, the rows "to_table(device='gpu')
    (Arrow on host)" and "to_table(device='cpu')"), GPU decode plus that copy took 0.432 s
    against 0.073 s for the CPU decode of 5M mixed rows, and 0.120 s against 0.003 s for
    500k embeddings.  ``"gpu"`` still decodes on the GPU (and raises without one).
    """
    if choice == "auto":
        return "cpu"
    return resolve_device(choice)


def read_range(spec: ScanSpec, fragment_id: int, start: int, stop: int) -> Iterator[pa.RecordBatch]:
    """The rows of physical range ``[start, stop)`` of one fragment, as Spark-typed batches
    (decoded where :func:`task_device` says)."""
    device = task_device(spec.device)
    ds = open_snapshot(spec.uri, spec.version, spec.storage_options)
    base = spec.plan
    if base is None:  # a spec built by hand: plan its columns and filter here
        base = build_plan(ds, columns=list(spec.columns), filter=spec.filter, batch_size=spec.batch_size, device=spec.device)
    plan = replace(base, fragment_ids=(fragment_id,), selections=(range_rows(ds, fragment_id, start, stop),))
    target = spec.arrow_schema()
    pushed = combined_expression(spec.pushed, target) if spec.pushed else None
    batch_size = spec.batch_size
    window = batch_size * max(1, -(-STREAM_WINDOW_ROWS // batch_size))
    for table in run_plan(plan, EXECUTORS[device](), ds, window=window, ahead=2):
        table = to_spark_arrays(table, target)
        if pushed is not None:
            table = table.filter(pushed)
        for batch in table.to_batches(max_chunksize=batch_size):
            if batch.num_rows:
                yield batch
