# SPDX-License-Identifier: Apache-2.0
"""What a read on the GPU gives: tables of device columns, and batches cut across them.

A :class:`DeviceTable` holds the decoded top-level fields of a read unit: device columns
(:class:`~lance_gpu.gpu.columns.DeviceColumn`), plus Arrow arrays for the fields the CPU
reader decoded (no GPU kernel for their encoding).  Its ways out are Arrow (a host copy),
CuPy / DLPack per column, and cuDF (its columns combined into cuDF's layout, wrapped
without a copy).  :func:`rebatch_device` cuts a read's tables into batches of a fixed size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from cuda_kernels import _device
from cuda_kernels.errors import deferred_errors
from lance_gpu.gpu import _array
from lance_gpu.gpu._cudf import combined_to_cudf
from lance_gpu.gpu.columns import DeviceColumn
from lance_gpu.gpu.combine import combine_read, combine_tables

__all__ = ["DeviceTable", "rebatch_device"]


class DeviceTable:
    """The decoded top-level fields of one fragment (after deletions and the filter).

    ``columns`` maps names to :class:`DeviceColumn` (decoded on the GPU) or ``pyarrow.Array``
    (decoded by the CPU reader); ``row_ids`` (host uint64) is set when they were asked for.
    """

    def __init__(self, names: list[str], columns: list[DeviceColumn | pa.Array], num_rows: int, row_ids=None, fragment_id: int = -1) -> None:
        self.names = list(names)
        self.columns = list(columns)
        self.num_rows = int(num_rows)
        self.row_ids = row_ids
        self.fragment_id = fragment_id

    def __repr__(self) -> str:
        return f"DeviceTable({self.num_rows} rows, {self.names})"

    def column(self, name: str) -> DeviceColumn | pa.Array:
        return self.columns[self.names.index(name)]

    def take(self, rows: np.ndarray) -> DeviceTable:
        """The rows at the host positions ``rows``."""
        rows = np.ascontiguousarray(rows, np.int64)
        d_rows = _array.upload(rows) if any(isinstance(c, DeviceColumn) for c in self.columns) else None
        cols = [c.take(d_rows) if isinstance(c, DeviceColumn) else c.take(pa.array(rows)) for c in self.columns]
        ids = None if self.row_ids is None else self.row_ids[rows]
        return DeviceTable(self.names, cols, rows.size, ids, self.fragment_id)

    def slice(self, lo: int, hi: int) -> DeviceTable:
        """Rows ``[lo, hi)``: device columns as views (:meth:`DeviceColumn.slice`), Arrow
        columns sliced."""
        cols = [c.slice(lo, hi) if isinstance(c, DeviceColumn) else c.slice(lo, hi - lo) for c in self.columns]
        ids = None if self.row_ids is None else self.row_ids[lo:hi]
        return DeviceTable(self.names, cols, hi - lo, ids, self.fragment_id)

    def to_arrow(self) -> pa.Table:
        """Host copy of every column (the GPU reader's ``to_table`` output)."""
        arrays = [c.to_arrow() if isinstance(c, DeviceColumn) else c for c in self.columns]
        if not arrays:
            return pa.table({"_": pa.nulls(self.num_rows)}).select([])
        return pa.Table.from_arrays(arrays, names=self.names)

    def device_column(self, name: str) -> DeviceColumn:
        c = self.column(name)
        return c if isinstance(c, DeviceColumn) else DeviceColumn.from_arrow(c)

    def to_cupy(self, name: str, **kwargs):
        """One numeric column as a CuPy array (see :meth:`DeviceColumn.to_cupy`)."""
        return self.device_column(name).to_cupy(**kwargs)

    def to_cudf(self):
        """A ``cudf.DataFrame`` of this table: its columns combined into cuDF's layout
        (:func:`lance_gpu.gpu.combine.combine_read`) and wrapped without a copy
        (:mod:`lance_gpu.gpu._cudf`)."""
        schema = pa.schema([pa.field(n, c.type) for n, c in zip(self.names, self.columns, strict=True)])
        return combined_to_cudf(self.names, combine_read([self], schema), self.num_rows)


def rebatch_device(tables: Iterable[DeviceTable], schema: pa.Schema, batch_size: int) -> Iterator[DeviceTable]:
    """``tables`` (device tables in reading order) cut into batches of exactly
    ``batch_size`` rows (the last one may be shorter): a batch inside one table is a view of
    it (:meth:`DeviceTable.slice`), one straddling tables is combined into buffers of its
    own (``layout="device"``, one batched launch per buffer kind and source allocation)."""
    if batch_size <= 0:
        msg = f"batch_size must be positive, got {batch_size}"
        raise ValueError(msg)
    pending: list[tuple[DeviceTable, int, int]] = []
    have = 0
    for table in tables:
        lo = 0
        while lo < table.num_rows:
            take = min(batch_size - have, table.num_rows - lo)
            pending.append((table, lo, lo + take))
            have += take
            lo += take
            if have == batch_size:
                yield _batch(pending, schema)
                pending, have = [], 0
    if have:
        yield _batch(pending, schema)


def _batch(pending: list[tuple[DeviceTable, int, int]], schema: pa.Schema) -> DeviceTable:
    if len(pending) == 1:
        table, lo, hi = pending[0]
        return table.slice(lo, hi)
    with _array.legacy_stream(), _device.pinned_uploads(), deferred_errors():
        cols = combine_tables([p[0] for p in pending], schema, "device", [(lo, hi) for _t, lo, hi in pending])
    _array.sync_kernels()
    ids = [p[0].row_ids for p in pending]
    row_ids = None if any(i is None for i in ids) else np.concatenate([i[lo:hi] for i, (_t, lo, hi) in zip(ids, pending, strict=True)])
    n = sum(hi - lo for _t, lo, hi in pending)
    return DeviceTable(list(schema.names), cols, n, row_ids, pending[0][0].fragment_id)
