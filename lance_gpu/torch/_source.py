# SPDX-License-Identifier: Apache-2.0
"""Every read ``lance_gpu.torch`` makes goes through :class:`RowSource` (and nothing else).

The training feed needs four reads, all in terms of *live* rows (deleted rows never count):

* ``fragments()``: ``(fragment_id, live row count)`` of each fragment, in dataset order;
* ``read(pos, start, stop)``: live rows ``[start, stop)`` of the fragment at position ``pos``
  of ``ds.get_fragments()``, with the projected columns, the filter applied (rows failing it
  are dropped, the rest keep their order) and ``_rowid`` appended when asked;
  ``read_many(spans)`` the same for many small spans with one decode (a batch sampler's
  1024-row ranges);
* ``take(indices)``: rows at global live-row positions (no filter), in the order asked;
* ``device_tables(selections)``: the filtered, projected rows of ``(pos, live rows or None)``
  items decoded into device memory (``lance_gpu.gpu.device_table.DeviceTable``), one per item.

Host reads are one scan plan (projection, the filter's columns, row ids) built and resolved
once per source and read by range with :class:`lance_gpu.scan.ranges.RangeReader` (no
planning per read; without a filter or row ids, plain fixed-width columns come as views of the
mapped data files, see there); ``take`` is ``ds.take``; the filter is
``lance_gpu.filter.parse_filter``'s, applied to each read; device reads are
``ds.scanner(fragments=...)`` run by the GPU executor.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from lance_gpu.errors import SchemaMismatchError
from lance_gpu.gpu.columns import DeviceColumn
from lance_gpu.gpu.device_table import DeviceTable
from lance_gpu.scan import LanceScanner, build_plan, resolve
from lance_gpu.scan.plan import ROW_ID
from lance_gpu.scan.ranges import RangeReader

if TYPE_CHECKING:
    from lance_gpu.scan.ranges import RangeReader


class RowSource:
    """The columns, filter and row-id choice of one training feed over one dataset version.

    Picklable (DataLoader workers get a copy): it holds the dataset (which reopens the same
    version with the same storage options) and plain values only.
    """

    def __init__(self, ds, columns: Sequence[str] | None, filter, with_row_id: bool) -> None:  # noqa: A002
        self.ds = ds
        self.columns = list(columns) if columns is not None else list(ds.schema.names)
        self.filter = filter
        self.with_row_id = bool(with_row_id)
        missing = [c for c in self.columns if c not in ds.schema.names and "." not in c]
        if missing:
            msg = f"columns {missing} are not in the dataset's schema {ds.schema.names}"
            raise SchemaMismatchError(msg)
        self._compiled = None
        self._read_columns = list(self.columns)
        if filter is not None:
            from lance_gpu.filter import parse_filter

            self._compiled = parse_filter(filter, ds.schema)
            self._read_columns += [c for c in self._compiled.columns if c not in self._read_columns and c in ds.schema.names]
            # row-identity columns the filter reads (``_rowid % 4 = 0``) are read too, then dropped
            provided = {ROW_ID} if self.with_row_id else set()
            self._read_columns += [v for v in self._compiled.virtual_columns if v not in provided and v not in self._read_columns]
        counts = [int(f.count_rows()) for f in ds.get_fragments()]
        self._ids = [int(f.fragment_id) for f in ds.get_fragments()]
        self._starts = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=self._starts[1:])
        self._ranges: RangeReader | None = None  # the read plan's range reader, made on first read (not pickled)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_compiled"] = None  # rebuilt from the filter text / expression
        state["_ranges"] = None
        return state  # the dataset pickles as its URI, version and storage options

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.filter is not None:
            from lance_gpu.filter import parse_filter

            self._compiled = parse_filter(self.filter, self.ds.schema)

    @property
    def filtered(self) -> bool:
        return self._compiled is not None

    def fragments(self) -> list[tuple[int, int]]:
        """``(fragment_id, live rows)`` per fragment, in dataset order."""
        return [(fid, int(self._starts[i + 1] - self._starts[i])) for i, fid in enumerate(self._ids)]

    @property
    def num_rows(self) -> int:
        """Live rows in the dataset (before the filter)."""
        return int(self._starts[-1])

    def schema(self) -> pa.Schema:
        """The schema of what :meth:`read` returns."""
        return self.read(0, 0, 0).schema if self._ids else pa.schema([self.ds.schema.field(c) for c in self.columns])

    def read(self, pos: int, start: int, stop: int) -> pa.Table:
        """Live rows ``[start, stop)`` of the fragment at position ``pos``, filtered and projected."""
        return self.read_many([(pos, start, stop)])[0]

    def ranges(self) -> RangeReader:
        """The range reader of the read plan (projected columns plus the filter's, row ids),
        built and resolved once per source: every read runs it without planning again."""
        if self._ranges is None:

            snapshot = self.ds.snapshot
            plan = build_plan(snapshot, columns=self._read_columns, with_row_id=self.with_row_id)
            self._ranges = RangeReader(snapshot, resolve(plan, snapshot))
        return self._ranges

    def read_many(self, spans: Sequence[tuple[int, int, int]]) -> list[pa.Table]:
        """``read(pos, start, stop)`` for each span, in the order given (a batch sampler's
        ranges), by :meth:`ranges`, decoded in the calling thread (the feed's read thread)."""
        tables = self.ranges().read_many(spans)
        if self._compiled is None:
            return tables
        keep = self.columns + ([ROW_ID] if self.with_row_id else [])
        return [self._compiled.apply(t).select(keep) for t in tables]

    def take(self, indices: np.ndarray) -> pa.Table:
        """Rows at global live-row positions, in the order given (no filter)."""
        return self.ds.take(np.asarray(indices, np.int64), columns=self.columns, with_row_id=self.with_row_id)

    def device_tables(self, selections: Sequence[tuple[int, np.ndarray | None]], *, on_cpu_fallback: str = "warn") -> Iterator:
        """Per ``(pos, rows)`` item (``rows``: sorted live-row positions in the fragment at
        ``pos``, None for all of them; each fragment at most once), those rows decoded on the
        GPU as one ``DeviceTable`` (filter applied, columns in projection order, ``row_ids`` on
        the host), in the order given: one scan plan whose row selections are these rows,
        run by the GPU executor."""
        top = {f.name for f in self.ds.snapshot.lance_schema.fields}
        dotted = [c for c in self.columns if c not in top]
        if dotted:
            msg = f"the device feed reads top-level columns only, not {dotted}"
            raise SchemaMismatchError(msg)
        snapshot = self.ds.snapshot
        frags = snapshot.fragments
        chosen: dict[int, np.ndarray | None] = {}
        for pos, rows in selections:
            frag = frags[pos]
            live = frag.live_rows
            chosen[int(frag.fragment_id)] = None if rows is None else (rows if live is None else live[rows])
        plan = build_plan(
            snapshot, columns=list(self.columns), filter=self.filter, with_row_id=self.with_row_id,
            selections=chosen, device="gpu",
        )
        for dt in LanceScanner(plan, snapshot, on_cpu_fallback=on_cpu_fallback).to_device_batches():
            if self.with_row_id:  # the row ids travel beside the device columns, on the host
                at = dt.names.index(ROW_ID)
                col = dt.columns[at]
                ids = np.asarray((col.to_arrow() if isinstance(col, DeviceColumn) else col).to_numpy(zero_copy_only=False), np.uint64)
                keep = [i for i in range(len(dt.names)) if i != at]
                dt = DeviceTable([dt.names[i] for i in keep], [dt.columns[i] for i in keep], dt.num_rows, ids, dt.fragment_id)
            yield dt
