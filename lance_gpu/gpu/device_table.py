# SPDX-License-Identifier: Apache-2.0
"""What a read on the GPU gives: tables of device columns, and batches cut across them.

A :class:`DeviceTable` holds the decoded top-level fields of a read unit: device columns
(:class:`~lance_gpu.gpu.columns.DeviceColumn`), plus Arrow arrays for the fields the CPU
reader decoded (no GPU kernel for their encoding).  Its ways out are Arrow (a host copy),
CuPy / DLPack per column, and cuDF (its columns combined into cuDF's layout, wrapped
without a copy).  :func:`rebatch_device` cuts a read's tables into batches of a fixed size;
:func:`read_to_arrow` makes a read's tables one host table, combined and copied back once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from cuda_kernels import _device
from cuda_kernels.errors import deferred_errors
from lance_gpu.gpu import _array
from lance_gpu.gpu._cudf import combined_to_cudf
from lance_gpu.gpu.columns import DeviceColumn
from lance_gpu.gpu.combine import combine, combine_read, combine_tables
from lance_gpu.gpu.gathered import Gathered
from lance_gpu.gpu.readback import result_to_arrow

__all__ = ["DeviceTable", "read_to_arrow", "rebatch_device"]


class DeviceTable:
    """The decoded top-level fields of one fragment (after deletions and the filter).

    ``raw_columns`` holds, by name, a :class:`DeviceColumn` (decoded on the GPU), a
    :class:`~lance_gpu.gpu.gathered.Gathered` (rows of one, selected on the host: deletions,
    takes, filters; not yet written anywhere) or a ``pyarrow.Array`` (decoded by the CPU
    reader).  ``to_cudf`` and :func:`rebatch_device` combine them as held (a selection's rows
    written once, into the final buffers); :attr:`columns` and :meth:`column` give device
    columns, a selection's rows combined into buffers of its own (device layout) on first
    use.  ``row_ids`` (host uint64) is set when they were asked for.

    ``hold_sources``: whether a selection may keep the decoded buffers it selects from until
    it is written (true where the whole read fits the device memory budget: the read holds
    them anyway).  False (a read larger than the budget, decoded unit by unit): selections
    are written out at once (device layout), so that each unit's buffers go as soon as its
    fragments are done; ``to_cudf`` then copies those, as before the selections were kept.
    """

    def __init__(self, names: list[str], columns: Sequence[DeviceColumn | Gathered | pa.Array], num_rows: int, row_ids=None,
                 fragment_id: int = -1, *, hold_sources: bool = True) -> None:
        self.names = list(names)
        self.raw_columns = list(columns)
        self.num_rows = int(num_rows)
        self.row_ids = row_ids
        self.fragment_id = fragment_id
        self.hold_sources = hold_sources
        self._made: dict[int, DeviceColumn] = {}  # selections written out (device layout), by index
        if not hold_sources:
            self.raw_columns = self.columns  # written out now: the buffers they selected from can go

    def __repr__(self) -> str:
        return f"DeviceTable({self.num_rows} rows, {self.names})"

    @property
    def columns(self) -> list[DeviceColumn | pa.Array]:
        """Every column as a device column or Arrow array: the selections not yet written
        out are, together (one :func:`~lance_gpu.gpu.combine.combine` in the device layout)."""
        self._write_out([i for i, c in enumerate(self.raw_columns) if isinstance(c, Gathered)])
        return [self._made.get(i, c) for i, c in enumerate(self.raw_columns)]

    def column(self, name: str) -> DeviceColumn | pa.Array:
        i = self.names.index(name)
        self._write_out([i] if isinstance(self.raw_columns[i], Gathered) else [])
        return self._made.get(i, self.raw_columns[i])

    def raw_column(self, name: str) -> DeviceColumn | Gathered | pa.Array:
        """The column ``name`` as held (a selection not written out: see the class docstring)."""
        return self.raw_columns[self.names.index(name)]

    def _write_out(self, wanted: list[int]) -> None:
        todo = [i for i in wanted if i not in self._made]
        if not todo:
            return
        cols = [c for c in (self.raw_columns[i] for i in todo) if isinstance(c, Gathered)]
        with _array.legacy_stream(), _device.pinned_uploads(), deferred_errors():
            made = combine([c.type for c in cols], [[c.piece(0, c.length)] for c in cols], "device")
        _array.sync_kernels()
        self._made.update(zip(todo, made, strict=True))

    def take(self, rows: np.ndarray) -> DeviceTable:
        """The rows at the host positions ``rows``: device columns as selections (nothing is
        gathered until written out), Arrow columns taken."""
        rows = np.ascontiguousarray(rows, np.int64)
        cols = [c.take(rows) if isinstance(c, Gathered) else Gathered(c, rows) if isinstance(c, DeviceColumn) else c.take(pa.array(rows))
                for c in self.raw_columns]
        ids = None if self.row_ids is None else self.row_ids[rows]
        return DeviceTable(self.names, cols, rows.size, ids, self.fragment_id, hold_sources=self.hold_sources)

    def slice(self, lo: int, hi: int) -> DeviceTable:
        """Rows ``[lo, hi)``: device columns as views (:meth:`DeviceColumn.slice`), selections
        and Arrow columns sliced."""
        cols = [c.slice(lo, hi) if isinstance(c, (DeviceColumn, Gathered)) else c.slice(lo, hi - lo) for c in self.raw_columns]
        ids = None if self.row_ids is None else self.row_ids[lo:hi]
        return DeviceTable(self.names, cols, hi - lo, ids, self.fragment_id, hold_sources=self.hold_sources)

    def to_arrow(self) -> pa.Table:
        """Host copy of every column, a copy per column and buffer (a read's tables go back
        together, combined: :func:`read_to_arrow`)."""
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
        schema = pa.schema([pa.field(n, c.type) for n, c in zip(self.names, self.raw_columns, strict=True)])
        return combined_to_cudf(self.names, combine_read([self], schema), self.num_rows)


def rebatch_device(tables: Iterable[DeviceTable], schema: pa.Schema, batch_size: int) -> Iterator[DeviceTable]:
    """``tables`` (device tables in reading order) cut into batches of exactly
    ``batch_size`` rows (the last one may be shorter).

    Where the read fits the device memory budget (the first table's ``hold_sources``: the
    read's tables are kept anyway), its tables are combined once into buffers of their own
    (``layout="device"``, :func:`_combined`: one batched launch per buffer kind and source
    allocation, however many fragments) and every batch is a view of the combined columns
    (:meth:`DeviceTable.slice`: offsets, masks and lists sliced as views), so the launches do
    not grow with the fragments; the first batch then comes once the read is decoded, and the
    tables' buffers go once combined.  A read of one table is not combined: its batches are
    views of it.  A read larger than the budget (decoded unit by unit) goes table by table:
    a batch inside one table is a view of it, one straddling tables is combined on its own.
    A batch's ``fragment_id`` is that of the table its first row comes from."""
    if batch_size <= 0:
        msg = f"batch_size must be positive, got {batch_size}"
        raise ValueError(msg)
    pending: list[tuple[DeviceTable, int, int]] = []
    have = 0
    for table in _combined(iter(tables), schema):
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


class _Combined(DeviceTable):
    """Tables of a read combined into one (:func:`_combined`): slices keep the
    ``fragment_id`` of the table each one's first row came from (``starts``: where each
    table's rows start, ``ids``: their fragment ids)."""

    def __init__(self, names: list[str], columns: Sequence[DeviceColumn | pa.Array], num_rows: int, row_ids,
                 starts: np.ndarray, ids: np.ndarray) -> None:
        super().__init__(names, columns, num_rows, row_ids, int(ids[0]))
        self.starts = starts
        self.ids = ids

    def slice(self, lo: int, hi: int) -> DeviceTable:
        out = super().slice(lo, hi)
        out.fragment_id = int(self.ids[np.searchsorted(self.starts, lo, side="right") - 1])
        return out


def _combined(tables: Iterator[DeviceTable], schema: pa.Schema) -> Iterator[DeviceTable]:
    """A read's ``tables`` as :func:`rebatch_device` cuts them: every one combined into one
    table where the read fits the budget and holds rows in more than one table, else as they
    come (one by one, never held together)."""
    first = next(tables, None)
    if first is None:
        return
    if not first.hold_sources:
        yield first
        yield from tables
        return
    held = [t for t in (first, *tables) if t.num_rows]
    if len(held) < 2:
        yield from held or [first]
        return
    with _array.legacy_stream(), _device.pinned_uploads(), deferred_errors():
        cols = combine_tables(held, schema, "device")
    _array.sync_kernels()
    ids = [t.row_ids for t in held]
    row_ids = None if any(i is None for i in ids) else np.concatenate(ids)
    starts = np.cumsum([0] + [t.num_rows for t in held[:-1]])
    fragment_ids = np.array([t.fragment_id for t in held], np.int64)
    n = sum(t.num_rows for t in held)
    del held
    yield _Combined(list(schema.names), cols, n, row_ids, starts, fragment_ids)


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


def read_to_arrow(tables: Sequence[DeviceTable], schema: pa.Schema) -> pa.Table:
    """A read's device tables (in reading order, every one holding the fields of ``schema``
    by name) as one host table of ``schema``: the columns some table holds on the device
    combined over every table in cuDF's layout (:func:`~lance_gpu.gpu.combine.combine_read`:
    buffers allocated once for the read, a selection's rows written once) and copied back in
    one copy per allocation (:func:`~lance_gpu.gpu.readback.result_to_arrow`), so the
    launches and copies of the export do not grow with the tables (fragments); the columns
    every table holds on the host (decoded by the CPU reader) concatenated there, never
    uploaded.  A ``schema`` without fields gives a table of no columns and the rows."""
    num_rows = sum(t.num_rows for t in tables)
    if not schema.names:
        return pa.table({"_": pa.nulls(num_rows)}, metadata=schema.metadata).select([])  # (replace_schema_metadata loses the rows)
    # a table of no rows adds nothing (a unit no row of which passed the filter: its columns
    # may be the CPU reader's empty arrays, which combining would upload)
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return schema.empty_table()
    device = [i for i, f in enumerate(schema) if any(not isinstance(t.raw_column(f.name), pa.Array) for t in tables)]
    combined = {}
    if device:
        combined = dict(zip(device, result_to_arrow(combine_read(tables, pa.schema([schema.field(i) for i in device]))), strict=True))
    arrays = [combined[i] if i in combined else pa.concat_arrays([t.raw_column(f.name) for t in tables]) for i, f in enumerate(schema)]
    return pa.Table.from_arrays(arrays, schema=schema)
