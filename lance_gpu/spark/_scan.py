# SPDX-License-Identifier: Apache-2.0
"""The scan both Spark entry points share: plan on the driver, read row ranges in tasks.

Planning (driver) opens the dataset once, resolves the version, the projection, the filter and
the Spark schema, and cuts the fragments into row ranges. Everything a task needs travels in
a :class:`ScanSpec` (plain values, the version pinned as a number) plus a
``(fragment_id, start, stop)`` range, so every task of one query reads the same snapshot even
if a writer commits meanwhile.

A task (:func:`read_range`) decodes its range in windows with the decoder picked by
``device`` (see :data:`DECODERS`), applies the pylance SQL ``filter`` on the decoded columns,
converts to Spark's Arrow types, then applies the filters Spark pushed down.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.types import StructType

from lance_gpu._device import resolve_device
from lance_gpu.dataset import LanceDataset, LanceFragment
from lance_gpu.errors import SchemaMismatchError
from lance_gpu.spark._filters import combined_expression
from lance_gpu.spark._gpu import decode_slot, task_gpu
from lance_gpu.spark._options import DEFAULT_BATCH_SIZE, ReadOptions
from lance_gpu.spark._types import spark_arrow_schema, to_spark_arrays, to_spark_schema
from lance_gpu.table.schema import LanceField

__all__ = ["DECODERS", "ScanSpec", "plan_ranges", "plan_scan", "read_range"]

_MIN_WINDOW = 1 << 18  # rows decoded at a time (at least), as in LanceDataset.to_batches


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
    ours = to_spark_schema(ds._result_schema(list(user.names), False))
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
    arrow = ds._result_schema(list(columns), False)
    if user_schema is not None:
        _check_user_schema(ds, user_schema)
        schema = user_schema
    else:
        schema = to_spark_schema(arrow)
    if opts.filter is not None:
        from lance_gpu.filter import parse_filter

        parse_filter(opts.filter, ds.schema)
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
    )
    return spec, plan_ranges(ds, opts.max_rows_per_partition)


# --------------------------------------------------------------------------------------------
# Tasks
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _open(
    uri: str, version: int, device: str, storage_options: tuple[tuple[str, str], ...] = ()
) -> tuple[LanceDataset, dict[int, LanceFragment]]:
    """The dataset at a pinned version, kept open across the tasks a Python worker runs
    (executors fetch the bytes themselves, with the scan's storage options)."""
    ds = LanceDataset(uri, version, device=device, storage_options=dict(storage_options))
    return ds, {f.fragment_id: f for f in ds.fragments}


def _decode_cpu(ds: LanceDataset, frag: LanceFragment, rows: np.ndarray | None, fields: list[LanceField]) -> pa.Table:
    return next(ds._read_fragments([(frag, rows)], fields, False))[1]


def _decode_gpu(ds: LanceDataset, frag: LanceFragment, rows: np.ndarray | None, fields: list[LanceField]) -> pa.Table:
    """Decode on this task's GPU, holding one of the executor's decode slots.

    The dataset's reader dispatches to the GPU decoder; the result is host Arrow memory
    because that is all a Python data source or mapInArrow can hand Spark.
    """
    ordinal, key = task_gpu()
    with decode_slot(key):
        import cupy

        with cupy.cuda.Device(ordinal):
            return _decode_cpu(ds, frag, rows, fields)


DECODERS: dict[str, Callable[[LanceDataset, LanceFragment, np.ndarray | None, list[LanceField]], pa.Table]] = {
    "cpu": _decode_cpu,
    "gpu": _decode_gpu,
}


def _windows(frag: LanceFragment, start: int, stop: int, window: int) -> Iterator[np.ndarray | None]:
    """The live physical rows of ``[start, stop)`` in sorted chunks (None: the whole fragment)."""
    live = frag.live_rows
    if live is None:
        if start == 0 and stop == frag.physical_rows and stop <= window:
            yield None
            return
        for lo in range(start, stop, window):
            yield np.arange(lo, min(lo + window, stop), dtype=np.int64)
        return
    lo, hi = np.searchsorted(live, [start, stop])
    rows = live[lo:hi]
    for i in range(0, rows.size, window):
        yield rows[i : i + window]


def read_range(spec: ScanSpec, fragment_id: int, start: int, stop: int) -> Iterator[pa.RecordBatch]:
    """The rows of physical range ``[start, stop)`` of one fragment, as Spark-typed batches."""
    device = resolve_device(spec.device)
    decode = DECODERS[device]
    ds, frags = _open(spec.uri, spec.version, spec.device, spec.storage_options)
    frag = frags.get(fragment_id)
    if frag is None:
        msg = f"fragment {fragment_id} is not in version {spec.version} of {spec.uri}"
        raise SchemaMismatchError(msg)
    columns = list(spec.columns)
    _fields, projected, compiled, read_fields = ds._read_plan(columns, spec.filter)
    target = spec.arrow_schema()
    pushed = combined_expression(spec.pushed, target) if spec.pushed else None
    batch_size = spec.batch_size
    window = batch_size * max(1, -(-_MIN_WINDOW // batch_size))
    for rows in _windows(frag, start, stop, window):
        table = decode(ds, frag, rows, read_fields)
        if compiled is not None:
            table = compiled.apply(table)
        table = ds._finish(table, projected, columns, False)
        table = to_spark_arrays(table, target)
        if pushed is not None:
            table = table.filter(pushed)
        for batch in table.to_batches(max_chunksize=batch_size):
            if batch.num_rows:
                yield batch
