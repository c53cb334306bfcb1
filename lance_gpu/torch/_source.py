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
  items decoded into device memory (``lance_gpu.gpu.columns.DeviceTable``), one per item.

Host reads are one scan plan (projection, the filter's columns, row ids) built and resolved
once per source, run by the CPU executor over per-fragment row selections (no planning per
read).  Without a filter or row ids, reads whose columns are all fixed width take the *direct*
path (:class:`_DirectFragment`): a plain column's rows are views of the mapped data file
(:func:`lance_gpu.file.reader.plain_row_pages`) and every other column is decoded once per
fragment and sliced, so a 1024-row read costs a few slices, not a decode; ``take`` is ``ds.take``; the filter is ``lance_gpu.filter.parse_filter``'s; device
reads are ``ds.scanner(fragments=...)`` run by the GPU executor.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from lance_gpu.errors import SchemaMismatchError

if TYPE_CHECKING:
    from lance_gpu.scan import ResolvedScan

ROW_ID = "_rowid"
#: The direct read path keeps the columns that are not stored plain decoded, per fragment, for
#: the source's life, at most this many bytes in all (fragments beyond it are read by the scan).
DIRECT_DECODED_BYTES = 64 << 20


def _rows_array(rows: np.ndarray, t: pa.DataType) -> pa.Array:
    """An Arrow array of plain fixed-width type ``t`` over ``rows`` (``[n, row bytes]``
    uint8, C-contiguous), sharing its memory."""
    n = rows.shape[0]
    if pa.types.is_fixed_size_list(t):
        d = t.list_size
        child = _rows_array(rows.reshape(n * d, rows.shape[1] // d), t.value_type)
        return pa.FixedSizeListArray.from_arrays(child, type=t)
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(rows)])


class _DirectFragment:
    """One fragment's columns for the direct read path, planned once: per read field either
    the page views of a plain column (``[page rows, row bytes]`` of the mapped file) or the
    whole column decoded (first use, then kept)."""

    def __init__(self, frag, fields: list, arrow_fields: list[pa.Field]) -> None:
        from lance_gpu.file.container import FileVersion
        from lance_gpu.file.reader import plain_row_bytes, plain_row_pages

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
                if reader.version != FileVersion(2, 0):
                    views = plain_row_pages(reader, af, src.columns)
            if views is None:
                self.pages.append(None)
                continue
            starts = np.zeros(len(views) + 1, np.int64)
            np.cumsum([v.shape[0] for v in views], out=starts[1:])
            self.pages.append((views, starts))
        #: what :meth:`column` keeps decoded: every physical row of the columns not stored plain
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
            lo, hi = start, stop
        else:
            rows = self.live[start:stop]
            lo, hi = (int(rows[0]), int(rows[-1]) + 1) if rows.size else (0, 0)
            if hi - lo == rows.size:
                rows = None
        if hi <= lo:
            return schema.empty_table()
        return pa.Table.from_arrays([self.column(i, lo, hi, rows) for i in range(len(self.fields))], schema=schema)


def dataset_ref(ds) -> tuple[str, int]:
    """What a pickled feed keeps of its dataset: URI and version (spawned DataLoader workers
    reopen that exact version)."""
    return (ds.uri, int(ds.version))


def open_ref(ref: tuple[str, int]):
    import lance_gpu

    return lance_gpu.dataset(ref[0], ref[1])


class RowSource:
    """The columns, filter and row-id choice of one training feed over one dataset version.

    Picklable (DataLoader workers get a copy): it holds the dataset and plain values only.
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
        counts = [int(f.count_rows()) for f in ds.get_fragments()]
        self._ids = [int(f.fragment_id) for f in ds.get_fragments()]
        self._starts = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=self._starts[1:])
        self._resolved: ResolvedScan | None = None  # the read plan, resolved on first read (not pickled)
        self._frags: list = []
        self._direct: list[_DirectFragment | bool | None] | None = None  # per fragment, False: by the scan (not pickled)
        self._direct_bytes = 0  # what the direct readers keep decoded
        self._direct_ok: bool | None = None  # the direct path applies (decided on first read)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_compiled"] = None  # rebuilt from the filter text / expression
        state["_resolved"] = None
        state["_frags"] = []
        state["_direct"] = None
        state["_direct_bytes"] = 0
        state["_direct_ok"] = None
        state["ds"] = dataset_ref(self.ds)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.ds = open_ref(self.ds)
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

    def _resolved_plan(self):
        """The read plan (projected columns plus the filter's, row ids), resolved once per
        source: every read runs it over row selections without planning again."""
        if self._resolved is None:
            from lance_gpu.scan import build_plan, resolve

            plan = build_plan(self.ds, columns=self._read_columns, with_row_id=self.with_row_id)
            self._resolved = resolve(plan, self.ds)
            self._frags = self.ds.get_fragments()
        return self._resolved

    def _direct_fragment(self, pos: int) -> _DirectFragment | None:
        """The direct reader of the fragment at ``pos`` (planned on first use), or None when
        the columns it would keep decoded no longer fit in ``DIRECT_DECODED_BYTES`` (its
        reads then take the scan)."""
        assert self._direct is not None
        got = self._direct[pos]
        if got is None:
            resolved = self._resolved_plan()
            fields = list(resolved.read_fields)
            frag = _DirectFragment(self._frags[pos], fields, [resolved.arrow_fields[f.name] for f in fields])
            if self._direct_bytes + frag.decoded_bytes > DIRECT_DECODED_BYTES:
                got = self._direct[pos] = False
            else:
                self._direct_bytes += frag.decoded_bytes
                got = self._direct[pos] = frag
        return got if isinstance(got, _DirectFragment) else None

    def direct(self) -> bool:
        """Whether reads take the direct path: no filter, no row ids, every output a
        top-level column of a plain fixed-width type, and the direct read of a fragment's
        first rows equal to the scan's (checked once).  A fragment whose columns that are
        not stored plain do not fit in what is left of ``DIRECT_DECODED_BYTES`` is read by
        the scan."""
        if self._direct_ok is None:
            self._direct_ok = self._decide_direct()
        return self._direct_ok

    def _decide_direct(self) -> bool:
        from lance_gpu.file.reader import plain_row_bytes

        if self._compiled is not None or self.with_row_id or not self.num_rows:
            return False
        resolved = self._resolved_plan()
        names = [f.name for f in resolved.read_fields]
        if [o.name for o in resolved.outputs] != names or any(o.path != (o.name,) for o in resolved.outputs):
            return False
        if any(plain_row_bytes(resolved.arrow_fields[n].type) is None for n in names):
            return False
        self._direct = [None] * len(self._ids)
        self._direct_bytes = 0
        probe = next(i for i in range(len(self._ids)) if self._starts[i + 1] > self._starts[i])
        first = self._direct_fragment(probe)
        if first is None:
            self._direct = None
            return False
        n = int(min(8, self._starts[probe + 1] - self._starts[probe]))
        direct = first.read(0, n, resolved.schema)
        (general,) = self._scan_many([(probe, 0, n)])
        if not direct.equals(general, check_metadata=True):
            self._direct = None
            return False
        return True

    def read_many(self, spans: Sequence[tuple[int, int, int]]) -> list[pa.Table]:
        """``read(pos, start, stop)`` for each span, in the order given: by the direct path
        where it applies (:meth:`direct`; each span a few slices, zero-copy within a page),
        else by the scan (:meth:`_scan_many`)."""
        if not self.direct():
            return self._scan_many(spans)
        schema = self._resolved_plan().schema
        out: list[pa.Table | None] = [None] * len(spans)
        rest = []
        for i, (pos, start, stop) in enumerate(spans):
            frag = self._direct_fragment(pos)
            if frag is None:
                rest.append(i)
            else:
                out[i] = frag.read(start, stop, schema)
        for i, table in zip(rest, self._scan_many([spans[i] for i in rest]), strict=True):
            out[i] = table
        return out  # type: ignore[return-value]

    def _scan_many(self, spans: Sequence[tuple[int, int, int]]) -> list[pa.Table]:
        """``read(pos, start, stop)`` for each span, in the order given, decoded in the calling
        thread (the feed's read thread) over the plan resolved once.

        The spans' physical rows, in dataset order, are cut into row selections of at most
        ``INLINE_DECODE_ROWS`` rows of one fragment, which the CPU executor decodes inline
        (no pool threads: the feed already reads in its own thread, beside the training
        loop); contiguous rows of a plain column arrive as views of the data file, the rest
        as one gather per column and selection.  A span is a zero-copy slice of its
        selection's table (a span cut into several selections, a concatenation of them).
        """
        from lance_gpu.scan import CpuExecutor, ReadUnit
        from lance_gpu.scan.execute import INLINE_DECODE_ROWS

        resolved = self._resolved_plan()
        executor = CpuExecutor()
        pieces: list[list[pa.Table]] = [[] for _ in spans]
        order = sorted(range(len(spans)), key=lambda i: (spans[i][0], spans[i][1]))
        batch: list[tuple[int, int, int]] = []  # (span, start, stop) of one selection
        rows = 0

        def flush() -> None:
            nonlocal batch, rows
            if not batch:
                return
            frag = self._frags[spans[batch[0][0]][0]]
            local = np.concatenate([np.arange(a, b, dtype=np.int64) for _i, a, b in batch])
            live = frag.live_rows
            (table,) = executor.run(self.ds, [ReadUnit(frag, local if live is None else live[local])], resolved, None, None)
            at = 0
            for i, a, b in batch:
                pieces[i].append(table.slice(at, b - a))
                at += b - a
            batch, rows = [], 0

        for i in order:
            pos, start, stop = spans[i]
            if batch and spans[batch[0][0]][0] != pos:
                flush()
            if batch and start < batch[-1][2]:  # overlapping spans: read apart
                flush()
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
        out = []
        for parts in pieces:
            table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
            if self._compiled is not None:
                table = self._compiled.apply(table).select(self.columns + ([ROW_ID] if self.with_row_id else []))
            out.append(table)
        return out

    def take(self, indices: np.ndarray) -> pa.Table:
        """Rows at global live-row positions, in the order given (no filter)."""
        return self.ds.take(np.asarray(indices, np.int64), columns=self.columns, with_row_id=self.with_row_id)

    def device_tables(self, selections: Sequence[tuple[int, np.ndarray | None]], *, on_cpu_fallback: str = "warn") -> Iterator:
        """Per ``(pos, rows)`` item (``rows``: sorted live-row positions in the fragment at
        ``pos``, None for all of them; each fragment at most once), those rows decoded on the
        GPU as one ``DeviceTable`` (filter applied, columns in projection order, ``row_ids`` on
        the host), in the order given: one scan plan whose row selections are these rows,
        run by the GPU executor."""
        from lance_gpu.gpu.columns import DeviceColumn, DeviceTable
        from lance_gpu.scan import LanceScanner, build_plan
        from lance_gpu.scan.plan import ROW_ID

        top = {f.name for f in self.ds.lance_schema.fields}
        dotted = [c for c in self.columns if c not in top]
        if dotted:
            msg = f"the device feed reads top-level columns only, not {dotted}"
            raise SchemaMismatchError(msg)
        frags = self.ds.get_fragments()
        chosen: dict[int, np.ndarray | None] = {}
        for pos, rows in selections:
            frag = frags[pos]
            live = frag.live_rows
            chosen[int(frag.fragment_id)] = None if rows is None else (rows if live is None else live[rows])
        plan = build_plan(
            self.ds, columns=list(self.columns), filter=self.filter, with_row_id=self.with_row_id,
            selections=chosen, device="gpu",
        )
        for dt in LanceScanner(plan, self.ds, on_cpu_fallback=on_cpu_fallback).to_device_batches():
            if self.with_row_id:  # the row ids travel beside the device columns, on the host
                at = dt.names.index(ROW_ID)
                col = dt.columns[at]
                ids = np.asarray((col.to_arrow() if isinstance(col, DeviceColumn) else col).to_numpy(zero_copy_only=False), np.uint64)
                keep = [i for i in range(len(dt.names)) if i != at]
                dt = DeviceTable([dt.names[i] for i in keep], [dt.columns[i] for i in keep], dt.num_rows, ids, dt.fragment_id)
            yield dt
