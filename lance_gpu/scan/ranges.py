# SPDX-License-Identifier: Apache-2.0
"""Reads of live-row ranges of single fragments over one resolved plan (a training feed's
1024-row batches): :class:`RangeReader`.

``RangeReader(ds, resolved).read(pos, start, stop)`` is the table the CPU executor gives for
live rows ``[start, stop)`` of the fragment at position ``pos`` of ``ds.get_fragments()``
(deleted rows never count), in ``resolved.schema``.  Two ways serve it, chosen once per
reader from the plan alone:

* the *range path*, when the plan has no filter, no virtual columns (row ids, addresses)
  and its outputs are exactly its read fields, each a top-level field of a plain fixed-width
  type (integers, floats, fixed-size lists of them: :func:`lance_gpu.file.reader.plain_row_bytes`).
  Each fragment's page layout is planned once: a column stored plain
  (:func:`lance_gpu.file.reader.plain_row_pages`) gives its rows as views of the mapped data
  file, so a range within one page is a zero-copy slice; every other column (dictionary or
  bit-packed, nullable, 2.0 files, object stores) is decoded once for the whole fragment and
  kept, at most ``budget`` bytes (``physical rows x row bytes``) over all fragments; a
  fragment whose columns no longer fit is read by the executor.
* the *executor path* otherwise: the ranges' physical rows, cut into row selections of at
  most ``INLINE_DECODE_ROWS`` rows of one fragment, run by :class:`CpuExecutor` inline (no pool
  threads), each range a slice of its selection's table.

Both give the same rows and schema; tests/test_scan_ranges.py pins that against
``ds.to_table()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from lance_gpu.file.container import LanceFileReader
from lance_gpu.file.reader import plain_row_bytes, plain_row_pages
from lance_gpu.scan.execute import INLINE_DECODE_ROWS, CpuExecutor, ReadUnit

if TYPE_CHECKING:
    from lance_gpu.scan.plan import ResolvedScan
    from lance_gpu.table.schema import LanceField
    from lance_gpu.table.snapshot import FragmentSnapshot, TableSnapshot

#: What a :class:`RangeReader` keeps decoded (columns not stored plain, whole fragments) by
#: default, in bytes over all its fragments.
DECODED_BYTES = 64 << 20


def _rows_array(rows: np.ndarray, t: pa.DataType) -> pa.Array:
    """An Arrow array of plain fixed-width type ``t`` over ``rows`` (``[n, row bytes]``
    uint8, C-contiguous rows), sharing its memory."""
    n = rows.shape[0]
    if pa.types.is_fixed_size_list(t):
        d = t.list_size
        child = _rows_array(rows.reshape(n * d, rows.shape[1] // d), t.value_type)
        return pa.FixedSizeListArray.from_arrays(child, type=t)
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(rows)])


class FragmentColumns:
    """One fragment's read fields for the range path, planned once.

    ``pages[i]``: for a field stored plain, ``(views, starts)``: per page a
    ``[page rows, row bytes]`` uint8 view of the mapped data file, and the physical row each
    page starts at (``len(views) + 1`` entries, the last the fragment's rows); None for a
    field decoded whole on first use (kept in ``decoded[i]``).  ``decoded_bytes``: what the
    decoded fields take, ``physical rows x their row bytes``.
    """

    def __init__(self, frag: FragmentSnapshot, fields: list[LanceField], arrow_fields: list[pa.Field]) -> None:
        self.frag = frag
        self.live = frag.live_rows
        self.fields = fields
        self.arrow_fields = arrow_fields
        self.pages: list[tuple[list[np.ndarray], np.ndarray] | None] = []
        self.decoded: list[pa.Array | None] = [None] * len(fields)
        for lf, af in zip(fields, arrow_fields, strict=True):
            src = frag.field_source(lf)
            views = None
            if src is not None:
                reader = frag.file_reader(src.path)
                if src.version is None and isinstance(reader, LanceFileReader):  # 2.1+ (2.0, legacy: decoded whole)
                    views = plain_row_pages(reader, af, src.columns)
            if views is None:
                self.pages.append(None)
                continue
            starts = np.zeros(len(views) + 1, np.int64)
            np.cumsum([v.shape[0] for v in views], out=starts[1:])
            self.pages.append((views, starts))
        self.decoded_bytes = int(frag.physical_rows) * sum(
            plain_row_bytes(af.type) or 0 for af, paged in zip(arrow_fields, self.pages, strict=True) if paged is None
        )

    def column(self, i: int, lo: int, hi: int, rows: np.ndarray | None) -> pa.Array | pa.ChunkedArray:
        """Physical rows ``[lo, hi)`` of field ``i`` (``rows``: the sorted physical rows
        when they are not that whole range)."""
        t = self.arrow_fields[i].type
        paged = self.pages[i]
        if paged is None:
            arr = self.decoded[i]
            if arr is None:
                got = self.frag.read_field(self.fields[i], self.arrow_fields[i], None)
                arr = self.decoded[i] = got.combine_chunks() if isinstance(got, pa.ChunkedArray) else got
            return arr.slice(lo, hi - lo) if rows is None else arr.take(pa.array(rows))
        views, starts = paged
        first, last = (np.searchsorted(starts, [lo, max(lo, hi - 1)], side="right") - 1).tolist()
        pieces = []
        for p in range(first, last + 1):
            a, b = max(lo, int(starts[p])), min(hi, int(starts[p + 1]))
            page = views[p]
            if rows is None:
                pieces.append(_rows_array(page[a - int(starts[p]) : b - int(starts[p])], t))
            else:
                mine = rows[(rows >= a) & (rows < b)] - int(starts[p])
                pieces.append(_rows_array(page[mine], t))
        return pieces[0] if len(pieces) == 1 else pa.chunked_array(pieces, type=t)

    def read(self, start: int, stop: int, schema: pa.Schema) -> pa.Table:
        """Live rows ``[start, stop)`` of the fragment, as ``schema``."""
        rows = None
        if self.live is None:
            lo, hi = start, min(stop, int(self.frag.physical_rows))
        else:
            rows = self.live[start:stop]
            lo, hi = (int(rows[0]), int(rows[-1]) + 1) if rows.size else (0, 0)
            if hi - lo == rows.size:
                rows = None
        if hi <= lo:
            return schema.empty_table()
        return pa.Table.from_arrays([self.column(i, lo, hi, rows) for i in range(len(self.fields))], schema=schema)


def range_path_applies(resolved: ResolvedScan) -> bool:
    """Whether ``resolved`` can take the range path: no filter, no virtual columns, outputs
    exactly the read fields (top-level, same order, same types) and each of a plain
    fixed-width type."""
    if resolved.filter is not None or resolved.virtual:
        return False
    names = [f.name for f in resolved.read_fields]
    if [o.name for o in resolved.outputs] != names or any(o.path != (o.name,) for o in resolved.outputs):
        return False
    if resolved.schema.names != names:
        return False
    return all(
        plain_row_bytes(resolved.arrow_fields[n].type) is not None and resolved.schema.field(n).type == resolved.arrow_fields[n].type
        for n in names
    )


class RangeReader:
    """Live-row ranges of single fragments of ``ds`` read with ``resolved`` (see the module).

    Parameters
    ----------
    ds : TableSnapshot
        The dataset (one version).
    resolved : ResolvedScan
        The plan, resolved against ``ds`` (its selections and limits are not used: ranges say
        which rows).
    fragments : list of FragmentSnapshot, optional
        ``ds.get_fragments()`` when the caller has them already; positions index this list.
    budget : int, default DECODED_BYTES
        Bytes the range path may keep decoded over all fragments.

    Not picklable (it holds views of mapped files): make one per process.
    """

    def __init__(self, ds: TableSnapshot, resolved: ResolvedScan, fragments: Sequence[FragmentSnapshot] | None = None, *,
                 budget: int = DECODED_BYTES) -> None:
        self.ds = ds
        self.resolved = resolved
        self.fragments = list(ds.get_fragments() if fragments is None else fragments)
        self.budget = int(budget)
        #: whether the plan takes the range path (decided once, by the plan)
        self.ranged = range_path_applies(resolved)
        self.decoded_bytes = 0  # what the planned fragments keep decoded (at most ``budget``)
        # per fragment: not planned yet (None), planned (FragmentColumns), over budget (False)
        self._planned: list[FragmentColumns | bool | None] = [None] * len(self.fragments)
        self._executor = CpuExecutor()

    def fragment_columns(self, pos: int) -> FragmentColumns | None:
        """The range-path plan of the fragment at ``pos`` (made on first use), or None where
        the range path does not apply or its decoded columns do not fit in what is left of
        the budget (its ranges then go to the executor)."""
        if not self.ranged:
            return None
        got = self._planned[pos]
        if got is None:
            fields = list(self.resolved.read_fields)
            cols = FragmentColumns(self.fragments[pos], fields, [self.resolved.arrow_fields[f.name] for f in fields])
            if self.decoded_bytes + cols.decoded_bytes > self.budget:
                got = self._planned[pos] = False
            else:
                self.decoded_bytes += cols.decoded_bytes
                got = self._planned[pos] = cols
        return got if isinstance(got, FragmentColumns) else None

    def read(self, pos: int, start: int, stop: int) -> pa.Table:
        """Live rows ``[start, stop)`` of the fragment at position ``pos``, in
        ``resolved.schema`` (filtered when the plan has a filter)."""
        return self.read_many([(pos, start, stop)])[0]

    def read_many(self, spans: Sequence[tuple[int, int, int]]) -> list[pa.Table]:
        """:meth:`read` of each ``(pos, start, stop)`` span, in the order given: by the range
        path where its fragment has one, the rest with one executor run per row selection."""
        out: list[pa.Table | None] = [None] * len(spans)
        rest = []
        for i, (pos, start, stop) in enumerate(spans):
            cols = self.fragment_columns(pos)
            if cols is None:
                rest.append(i)
            else:
                out[i] = cols.read(start, stop, self.resolved.schema)
        if rest:
            for i, table in zip(rest, self.execute_many([spans[i] for i in rest]), strict=True):
                out[i] = table
        return out  # type: ignore[return-value]

    def execute_many(self, spans: Sequence[tuple[int, int, int]]) -> list[pa.Table]:
        """:meth:`read_many` by the CPU executor alone, decoded in the calling thread.

        Spans are clamped to the fragment's live rows.  Without a filter, the spans'
        physical rows, in dataset order, are cut into row selections of at most
        ``INLINE_DECODE_ROWS`` rows of one fragment, which the executor decodes inline;
        contiguous rows of a plain column arrive as views of the data file, the rest as one
        gather per column and selection.  A span is a zero-copy slice of its selection's
        table (a span cut into several selections, a concatenation of them).  With a
        filter (rows drop out of a selection), each span is one selection.
        """
        clamped = []
        for pos, start, stop in spans:
            live = self.fragments[pos].live_count()
            start = min(max(0, start), live)
            clamped.append((pos, start, min(max(start, stop), live)))
        spans = clamped
        filtered = self.resolved.filter is not None
        pieces: list[list[pa.Table]] = [[] for _ in spans]
        order = sorted(range(len(spans)), key=lambda i: (spans[i][0], spans[i][1]))
        batch: list[tuple[int, int, int]] = []  # (span, start, stop) of one selection
        rows = 0

        def flush() -> None:
            nonlocal batch, rows
            if not batch:
                return
            frag = self.fragments[spans[batch[0][0]][0]]
            local = np.concatenate([np.arange(a, b, dtype=np.int64) for _i, a, b in batch])
            live = frag.live_rows
            (table,) = self._executor.run(self.ds, [ReadUnit(frag, local if live is None else live[local])], self.resolved, None, None)
            if filtered:
                (i, _a, _b), = batch
                pieces[i].append(table)
            else:
                at = 0
                for i, a, b in batch:
                    pieces[i].append(table.slice(at, b - a))
                    at += b - a
            batch, rows = [], 0

        for i in order:
            pos, start, stop = spans[i]
            if batch and (filtered or spans[batch[0][0]][0] != pos or start < batch[-1][2]):
                flush()  # another fragment, overlapping spans or a filter: a new selection
            if filtered:
                batch.append((i, start, stop))
                flush()
                continue
            while True:
                n = min(stop - start, INLINE_DECODE_ROWS - rows)
                batch.append((i, start, start + n))
                rows += n
                start += n
                if rows >= INLINE_DECODE_ROWS:
                    flush()
                if start >= stop:
                    break
        flush()
        return [parts[0] if len(parts) == 1 else pa.concat_tables(parts) for parts in pieces]
