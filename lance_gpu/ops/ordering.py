# SPDX-License-Identifier: Apache-2.0
"""Sorted scans (pylance's ``scanner(order_by=[ColumnOrdering(...)])``).

A scan with ``order_by`` reads every matching row (the filter applies first), sorts them
stably by the orderings in turn -- each ascending or descending, its nulls first or last --
and only then applies ``offset`` and ``limit``, as pylance's sort node does.  A sort column
that is not projected is read for the sort and dropped from the result.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu.errors import ArgumentTypeError, InvalidArgumentError
from lance_gpu.scan import LanceScanner

__all__ = ["ColumnOrdering", "OrderedScanner", "normalize_order_by"]


@dataclass
class ColumnOrdering:
    """One sort key of ``order_by`` (pylance's ``lance.dataset.ColumnOrdering``).

    Parameters
    ----------
    column_name : str
        The column to sort by.
    ascending : bool, default True
        Ascending (else descending) order.
    nulls_first : bool, default False
        Nulls before (else after) the values.
    """

    column_name: str
    ascending: bool = True
    nulls_first: bool = False


def normalize_order_by(order_by: Sequence[ColumnOrdering | str] | None) -> list[ColumnOrdering]:
    """``order_by`` as orderings (a bare column name sorts ascending, nulls last)."""
    if order_by is None:
        return []
    if isinstance(order_by, (str, ColumnOrdering)):
        order_by = [order_by]
    out = []
    for item in order_by:
        if isinstance(item, str):
            out.append(ColumnOrdering(item))
        elif isinstance(item, ColumnOrdering) or all(hasattr(item, a) for a in ("column_name", "ascending", "nulls_first")):
            out.append(ColumnOrdering(item.column_name, bool(item.ascending), bool(item.nulls_first)))
        else:
            raise ArgumentTypeError(f"order_by takes ColumnOrdering or column names, not {type(item).__name__}")
    return out


def sort_indices(table: pa.Table, orderings: Sequence[ColumnOrdering]) -> pa.Array:
    """The stable sort permutation of ``table`` by ``orderings``: per ordering a null-flag
    key (placing its nulls first or last) then the values."""
    keys: dict[str, pa.Array] = {}
    sort_keys = []
    for k, o in enumerate(orderings):
        if o.column_name not in table.column_names:
            raise InvalidArgumentError(f"order_by: no column named {o.column_name!r} (columns are {table.column_names})")
        col = table.column(o.column_name)
        flag = pc.is_valid(col) if o.nulls_first else pc.is_null(col)
        keys[f"n{k}"] = flag
        keys[f"v{k}"] = col
        sort_keys += [(f"n{k}", "ascending"), (f"v{k}", "ascending" if o.ascending else "descending")]
    if not sort_keys:
        return pa.array(np.arange(table.num_rows))
    return pc.sort_indices(pa.table(keys), sort_keys=sort_keys)


class OrderedScanner(LanceScanner):
    """A scanner whose rows come sorted by ``orderings``, ``offset`` / ``limit`` applied
    after the sort; ``drop`` lists sort columns read only for the sort."""

    def __init__(self, inner: LanceScanner, orderings: Sequence[ColumnOrdering], limit: int | None,
                 offset: int | None, drop: Sequence[str] = ()) -> None:
        super().__init__(inner.plan, inner._snapshot, on_cpu_fallback=inner.on_cpu_fallback)
        self.orderings = list(orderings)
        self.limit = limit
        self.offset = offset
        self.drop = list(drop)

    @property
    def projected_schema(self) -> pa.Schema:
        schema = super().projected_schema
        for name in self.drop:
            schema = schema.remove(schema.get_field_index(name))
        return schema

    def to_table(self) -> pa.Table:
        """The scan's rows, sorted, then offset and limited."""
        table = super().to_table()
        table = table.take(sort_indices(table, self.orderings))
        start = int(self.offset or 0)
        table = table.slice(start, None if self.limit is None else int(self.limit))
        return table.drop_columns(self.drop) if self.drop else table

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The sorted rows in batches of ``batch_size``."""
        return iter(self.to_table().combine_chunks().to_batches(max_chunksize=self.plan.batch_size))

    def count_rows(self) -> int:
        """Rows the scan returns."""
        return self.to_table().num_rows

    def head(self, num_rows: int) -> pa.Table:
        """The first ``num_rows`` sorted rows."""
        return self.to_table().slice(0, num_rows)


def ordered_scanner(make_scanner: Any, order_by: Any, columns: Any, limit: int | None, offset: int | None,
                    **kwargs: Any) -> OrderedScanner:
    """``make_scanner(columns=, limit=None, offset=None, **kwargs)`` wrapped to sort by
    ``order_by`` (sort columns missing from a column list are read, then dropped)."""
    orderings = normalize_order_by(order_by)
    if (limit is not None and limit < 0) or (offset is not None and offset < 0):
        raise InvalidArgumentError("limit and offset must be non-negative")
    drop: list[str] = []
    if isinstance(columns, (list, tuple)):
        columns = list(columns)
        for o in orderings:
            if o.column_name not in columns:
                columns.append(o.column_name)
                drop.append(o.column_name)
    inner = make_scanner(columns=columns, limit=None, offset=None, **kwargs)
    return OrderedScanner(inner, orderings, limit, offset, drop)


