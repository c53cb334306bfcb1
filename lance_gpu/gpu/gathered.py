# SPDX-License-Identifier: Apache-2.0
"""A row selection of a device column, kept on the host until its rows are written once.

Every gather of a GPU read -- the live rows of a fragment with deletions, a take's rows,
the rows of a late-materialized field, the survivors of a filter -- selects rows whose
positions the host knows.  A :class:`Gathered` is a column with such a selection pending:
the decoded ``column`` (its buffers as the decode wrote them) and the host ``rows`` (int64
positions into it, any order, repeats allowed).  Selections compose on the host (a filter
after deletions is one selection of the decoded column), and the rows are written where
they are needed, once:

* ``to_cudf`` combines them straight into the read's final buffers
  (:func:`lance_gpu.gpu.combine.combine`): the positions become *runs* of consecutive rows
  (:meth:`Gathered.piece`), each a piece ``[lo, hi)`` of the decoded column, so the values,
  string bytes, offsets and validity bits of a gathered column are written by combining's
  batched copies, rebases and packs, per source allocation, into the arenas -- or, where the
  runs are short, by position (a descriptor per column piece, not per run);
* any other consumer (Arrow, CuPy, device batches, a host probe of a filter's columns) gets
  the column combined in the device layout
  (:meth:`lance_gpu.gpu.device_table.DeviceTable.columns`).

A selection keeps the decoded buffers it selects from alive until it is written: where the
whole read fits the device memory budget (it holds them anyway); a read over the budget
writes its selections out as soon as they are made
(:class:`~lance_gpu.gpu.device_table.DeviceTable`'s ``hold_sources``), so each unit's
buffers go.

The work per gather grows with its runs (a deletion vector's or a filter's runs of
surviving rows; a random take: a run per row), as host-built segment lists, not with its
rows times its columns' nesting.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from lance_gpu.gpu.columns import DeviceColumn
from lance_gpu.gpu.rows import ranges_of

__all__ = ["Gathered"]


class Gathered:
    """The rows ``rows`` (host int64 positions) of the device column ``column``, not yet
    written anywhere (see the module docstring)."""

    __slots__ = ("column", "rows")

    def __init__(self, column: DeviceColumn, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, np.int64)
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= column.length):
            msg = f"a row outside the column's {column.length} rows"
            raise IndexError(msg)
        self.column = column
        self.rows = rows

    @property
    def type(self) -> pa.DataType:
        return self.column.type

    @property
    def length(self) -> int:
        return int(self.rows.size)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"Gathered({self.type}, {self.length} of {self.column.length} rows)"

    def take(self, rows: np.ndarray) -> Gathered:
        """Rows ``rows`` of this selection: one selection of the same column."""
        return Gathered(self.column, self.rows[np.asarray(rows, np.int64)])

    def slice(self, lo: int, hi: int) -> Gathered:
        return Gathered(self.column, self.rows[lo:hi])

    def field(self, index: int) -> Gathered:
        """Child ``index`` of a struct column, null where the struct is null (as
        :meth:`DeviceColumn.field`), with the same rows."""
        return Gathered(self.column.field(index), self.rows)

    def piece(self, lo: int, hi: int) -> tuple[DeviceColumn, Any, Any]:
        """Rows ``[lo, hi)`` of the selection as a piece of ``column`` for combining
        (:data:`lance_gpu.gpu.combine.Piece`): one row range where they are one run (written
        then as any range is: a view where the decode's buffers allow), else their runs
        (:func:`~lance_gpu.gpu.rows.ranges_of`: ``lo`` and ``hi`` arrays)."""
        runs = ranges_of(self.rows[lo:hi])
        runs_lo, runs_hi = runs[:, 0], runs[:, 1]
        if runs_lo.size <= 1:
            return (self.column, int(runs_lo[0]), int(runs_hi[0])) if runs_lo.size else (self.column, 0, 0)
        return self.column, runs_lo, runs_hi
