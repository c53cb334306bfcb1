# SPDX-License-Identifier: Apache-2.0
"""Running a :class:`~lance_gpu.scan.plan.ScanPlan`: executors decode, one epilogue finishes.

A plan is cut into *read units* ``(fragment, physical rows)`` (a whole fragment, or windows
of it when streaming).  An executor decodes the plan's top-level fields of each unit, in
unit order, keeping a bounded number of units decoding ahead of the consumer:

* :class:`CpuExecutor` decodes (unit, field) pairs in a thread pool (the numba decoders
  release the GIL);
* :class:`GpuExecutor` runs the device pipeline of :mod:`lance_gpu.gpu.read` (pages staged
  and decoded on the GPU, deleted / unselected rows dropped on the device).

Both take row selections, so a ``take`` or a pushed-down ``limit`` decodes on either.  The
epilogue (:func:`finish_table`, :func:`_finish_span`) is the only place that adds virtual
columns, applies the filter and shapes the projection; :func:`run_plan` adds ``offset`` /
``limit`` after a filter and stops decoding once the limit is reached.

Many small fragments (a history of small appends) are read as one: on a mapped store the CPU
executor joins consecutive units of small fragments into *spans* (:func:`span_groups`), each
decoded with one decode per field over all its data files, one filter evaluation and one
output table; deletes and compactions read through the same spans (:func:`decode_spans`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import os
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuda_kernels._jitcache import set_num_threads
from lance_gpu import gpu
from lance_gpu._device import resolve_device
from lance_gpu.errors import ArgumentTypeError, NegativeArgumentError, RowIndexError, UnsupportedFeatureError
from lance_gpu.file.container import LanceFileReader
from lance_gpu.file.reader import SELECT_SHARE_CHUNKED
from lance_gpu.file.reader import selective_share as file_share
from lance_gpu.io import resolve as resolve_uri
from lance_gpu.scan.plan import ROW_ADDR, ROW_ID, ROW_OFFSET, VIRTUAL_COLUMNS, ResolvedScan, ScanPlan, build_plan, nested_path, resolve
from lance_gpu.table.blobs import blob_kind, read_blob_bytes
from lance_gpu.table.packed import packed_struct
from lance_gpu.table.schema import LanceField
from lance_gpu.table.snapshot import FragmentSnapshot, TableSnapshot, read_field_span

if TYPE_CHECKING:
    from lance_gpu.gpu.device_table import DeviceTable

_THREADS = max(1, min(8, os.cpu_count() or 1))
STREAM_WINDOW_ROWS = 1 << 18  # rows decoded at a time (at least) when streaming on the CPU
# Row selections of at most this many rows in all, read without a read-ahead bound (a take),
# are decoded in the calling thread: starting a pool thread costs more than the decode.
INLINE_DECODE_ROWS = 1 << 14
#: Units of at most this many values (rows x fields) decode all their fields in one pool
#: task; larger ones decode a task per field (fields of a window decode in parallel).
SMALL_UNIT_VALUES = 1 << 16
#: Units of fewer rows are decoded in the consumer's thread, one after the other, not in a
#: pool: decoding them is mostly Python (page metadata, Arrow assembly) holding the GIL, and
#: threads taking turns at the GIL around the decoders' short GIL-free kernels ran slower
#: than one thread (measured on 2 cores: 200 fragments of 5,000 rows 2x slower, one of
#: 50,000 rows x 200 columns 1.2x slower in a pool; issue 14's 250,000-row fragments gain).
POOL_MIN_ROWS = 1 << 17


class _Deferred:
    """A task run in the consumer's thread when its result is first asked for (a
    :class:`~concurrent.futures.Future` look-alike for :meth:`CpuExecutor._ordered`)."""

    __slots__ = ("_args", "_done", "_fn", "_result")

    def __init__(self, fn: Any, args: tuple[Any, ...]) -> None:
        self._fn: Any = fn
        self._args: tuple[Any, ...] | None = args
        self._done = False
        self._result: Any = None

    def result(self) -> Any:
        if not self._done:
            fn, args = self._fn, self._args
            self._fn = self._args = None
            self._result = fn(*(args or ()))
            self._done = True
        return self._result

    def cancel(self) -> bool:
        self._fn = self._args = None
        return True


class _InlinePool:
    """Runs submitted tasks lazily in the consumer's thread (see :data:`POOL_MIN_ROWS`)."""

    def submit(self, fn: Any, *args: Any) -> _Deferred:
        return _Deferred(fn, args)


def decode_inline(units: Sequence[ReadUnit], ahead: int | None) -> bool:
    """Whether the units decode in the consumer's thread (:data:`POOL_MIN_ROWS`): all
    those in the first read-ahead window are small."""
    return all(u.num_rows < POOL_MIN_ROWS for u in units[: max(1, ahead or len(units))])


@dataclass(slots=True)
class ReadUnit:
    """Physical ``rows`` (sorted; None = every physical row) of one fragment."""

    fragment: FragmentSnapshot
    rows: np.ndarray | None

    @property
    def num_rows(self) -> int:
        return self.fragment.physical_rows if self.rows is None else int(self.rows.size)


def rows_where(units: Sequence[ReadUnit], positions: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``positions`` (ascending row numbers over the rows of ``units``, one unit after the
    other: a filter's hits on their decoded table) split by unit: ``(unit index, the physical
    row offsets (int64) in its fragment)`` for every unit that holds one, in order."""
    positions = np.asarray(positions, np.int64)
    if not positions.size:
        return []
    ends = np.cumsum([u.num_rows for u in units])
    which = np.searchsorted(ends, positions, side="right")
    held = np.unique(which)
    lo, hi = np.searchsorted(which, held, side="left"), np.searchsorted(which, held, side="right")
    out = []
    for k, a, b in zip(held.tolist(), lo.tolist(), hi.tolist(), strict=True):
        local = positions[a:b] - (int(ends[k - 1]) if k else 0)
        rows = units[k].rows
        out.append((k, local if rows is None else rows[local].astype(np.int64)))
    return out


class Executor(Protocol):
    """Decodes ``fields`` of each unit; yields one Arrow table per unit, in unit order
    (:meth:`run`: one finished table per unit or per span of units, in unit order)."""

    name: str
    whole_fragments: bool  # units must be whole fragments (one unit per fragment)

    def decode(self, ds: TableSnapshot, units: Sequence[ReadUnit], fields: Sequence[LanceField], ahead: int | None) -> Iterator[pa.Table]: ...

    def run(self, ds: TableSnapshot, units: Sequence[ReadUnit], resolved: ResolvedScan, offsets: _Offsets | None,
            ahead: int | None, unit_edges: bool = False, want: int | None = None) -> Iterator[pa.Table]:
        """Decode and finish (virtual columns, filter, projection) each unit, in order
        (``unit_edges``: no table holds rows of two units; ``want``: the consumer stops after
        that many finished rows (a plan's ``offset + limit``), so an executor that decodes
        units in groups makes its first groups small; None: every row is read)."""
        ...


def _serial_kernels() -> None:
    """Pool-thread initializer: this thread's numba kernels use one thread (thread-local;
    numba is told when it is loaded, see :func:`cuda_kernels._jitcache.set_num_threads`)."""
    set_num_threads(1)


def empty_table(num_rows: int, metadata: dict | None = None) -> pa.Table:
    """A table of ``num_rows`` rows and no columns (pyarrow's replace_schema_metadata and
    concat_tables both lose the row count of such tables)."""
    return pa.table({"_": pa.nulls(num_rows)}, metadata=metadata).select([])


#: Fragments fetched at once from an object store during a scan, each by one coalesced
#: concurrent read of its data files (measured on moto at loadavg 12-16: splitting the
#: fetch by field, or fetching every fragment at once, gave no gain and more requests):
#: the next fragment arrives while the current one decodes.
IO_THREADS = 2


def _read_after(fetch: Future | None, frag: FragmentSnapshot, field: LanceField, arrow_field: pa.Field,
                rows: np.ndarray | None) -> pa.Array:
    """``frag.read_field`` once the fragment's prefetch (if any) is done."""
    if fetch is not None:
        fetch.result()
    return frag.read_field(field, arrow_field, rows)


def _read_unit(fetch: Future | None, unit: ReadUnit, fields: Sequence[LanceField], arrow_fields: dict[str, pa.Field]) -> list[pa.Array]:
    """Every field of one unit, in one pool task (once the fragment's prefetch is done)."""
    if fetch is not None:
        fetch.result()
    return [unit.fragment.read_field(f, arrow_fields[f.name], unit.rows) for f in fields]


def selective_share(frag: FragmentSnapshot, field: LanceField, arrow_field: pa.Field) -> float:
    """Late materialization: the survivor share of a unit up to which ``field`` is decoded
    for the surviving rows only; above it, decoding the fragment's whole pages and taking
    the survivors is cheaper.  It depends on how the pages store the values
    (:func:`lance_gpu.file.reader.selective_share`); blob descriptors, fields the
    fragment holds no data for, packed structs and fields of legacy files are always read for the survivors."""
    if blob_kind(field) or packed_struct(field):
        return 1.0
    src = frag.field_source(field)
    if src is None:
        return 1.0
    reader = frag.file_reader(src.path)
    if not isinstance(reader, LanceFileReader):
        return 1.0  # legacy files: their reader decodes the batches over the rows and takes
    return file_share(reader, arrow_field, src.columns)


def take_sorted(column: pa.Array | pa.ChunkedArray, positions: np.ndarray) -> pa.Array | pa.ChunkedArray:
    """``column`` at the sorted ``positions``, chunk by chunk (pyarrow's take of a chunked
    array joins the chunks first: a copy of the whole column)."""
    if not isinstance(column, pa.ChunkedArray) or column.num_chunks < 2:
        return column.take(pa.array(positions))
    bounds = np.cumsum([0, *(len(c) for c in column.chunks)])
    cuts = np.searchsorted(positions, bounds)
    parts = [chunk.take(pa.array(positions[cuts[i] : cuts[i + 1]] - bounds[i])) for i, chunk in enumerate(column.chunks)]
    return pa.chunked_array(parts, type=column.type)


def take_table_sorted(table: pa.Table, positions: np.ndarray) -> pa.Table:
    """The rows of ``table`` at the sorted ``positions``, column by column and chunk by chunk."""
    if positions.size == table.num_rows:
        return table
    if not table.num_columns:
        return empty_table(int(positions.size), table.schema.metadata)
    return pa.Table.from_arrays([take_sorted(c, positions) for c in table.columns], schema=table.schema)


def _filtered_unit(fetch: Future | None, resolved: ResolvedScan, unit: ReadUnit, early: Sequence[LanceField],
                   late: Sequence[LanceField], arrow_fields: dict[str, pa.Field], offsets: _Offsets | None) -> pa.Table:
    """One unit of a filtered read with late materialization, start to finish (a pool task):
    decode the filter's fields, filter, then decode each late field for the survivors only
    (or for the whole unit, taking the survivors, when they are a large share of it)."""
    if fetch is not None:
        fetch.result()
    return _filtered_group(resolved, [unit], early, late, arrow_fields, offsets)[0]


def _filtered_group(resolved: ResolvedScan, group: Sequence[ReadUnit], early: Sequence[LanceField],
                    late: Sequence[LanceField], arrow_fields: dict[str, pa.Field], offsets: _Offsets | None) -> list[pa.Table]:
    """:func:`_filtered_unit` of each unit of ``group``, one by one."""
    assert resolved.filter is not None  # late fields exist only under a filter
    out = []
    for unit in group:
        table = _early_table(resolved, unit, early, arrow_fields, offsets)
        out.append(_late_unit(resolved, unit, table, resolved.filter.positions(table), late, arrow_fields, offsets))
    return out


def _early_table(resolved: ResolvedScan, unit: ReadUnit, early: Sequence[LanceField], arrow_fields: dict[str, pa.Field],
                 offsets: _Offsets | None) -> pa.Table:
    """The filter's fields of ``unit`` and the virtual columns the filter reads."""
    frag = unit.fragment
    arrays = [frag.read_field(f, arrow_fields[f.name], unit.rows) for f in early]
    table = pa.Table.from_arrays(arrays, names=[f.name for f in early]) if arrays else empty_table(unit.num_rows)
    assert resolved.filter is not None  # late fields exist only under a filter
    return add_virtual(table, unit, resolved.virtual & set(resolved.filter.virtual_columns), offsets)


def _late_unit(resolved: ResolvedScan, unit: ReadUnit, table: pa.Table, keep: np.ndarray, late: Sequence[LanceField],
               arrow_fields: dict[str, pa.Field], offsets: _Offsets | None) -> pa.Table:
    """A unit's rows that pass the filter (``keep``, rows of its early ``table``): the late
    fields decoded for them, the other virtual columns added, the projection applied."""
    frag = unit.fragment
    assert resolved.filter is not None  # late fields exist only under a filter
    early_virtual = resolved.virtual & set(resolved.filter.virtual_columns)
    table = take_table_sorted(table, keep)
    # the surviving physical rows (a whole unit's position is its physical row)
    kept_rows = keep.astype(np.int64, copy=False) if unit.rows is None else unit.rows[keep]
    # virtual columns the filter does not read are made for the surviving rows only
    table = add_virtual(table, ReadUnit(frag, kept_rows), resolved.virtual - early_virtual, offsets)
    share = keep.size / max(1, unit.num_rows)
    selective = {}
    for f in late:
        af = arrow_fields[f.name]
        selective[f.name] = share <= SELECT_SHARE_CHUNKED or share <= selective_share(frag, f, af)
    if not getattr(frag.snapshot.store, "maps_files", False):
        # an object store: the late fields' bytes for the survivors (or the unit) at once
        frag.prefetch([f for f in late if selective[f.name]], kept_rows)
        frag.prefetch([f for f in late if not selective[f.name]], unit.rows)
    for f in late:
        af = arrow_fields[f.name]
        if selective[f.name]:
            col = frag.read_field(f, af, kept_rows)
        else:
            col = take_sorted(frag.read_field(f, af, unit.rows), keep)
        table = table.append_column(f.name, col)
    return project(resolved, table)


# -- spans: many small fragments read as one ---------------------------------------------
#
# A dataset of many small appends has thousands of fragments of a few rows.  Read one by
# one, each costs a decode per field (page metadata, Arrow assembly), a filter evaluation
# and a table, all fixed Python costs far above the work on its rows.  On a mapped store,
# where units decode in the consumer's thread (:func:`decode_inline`), consecutive units of
# small fragments are read as one *span*: each field decoded once for all their data files
# (:func:`~lance_gpu.table.snapshot.read_field_span`), the virtual columns built for the
# span, the filter evaluated once, the projection applied once; one table per span.

#: Units of fragments of at most this many physical rows (each the only unit of its
#: fragment) join spans: their fragments are decoded whole and the unit's rows taken.
#: Whether small fragments are read in spans (tests turn it off to compare both paths).
SPANS = True
SPAN_FRAGMENT_ROWS = 1 << 14
#: A span holds at most this many physical rows (more than one unit: a larger unit alone).
SPAN_ROWS = 1 << 16


def span_groups(units: Sequence[ReadUnit]) -> list[list[ReadUnit]]:
    """Consecutive units in spans of small fragments (:data:`SPAN_FRAGMENT_ROWS`, at most
    :data:`SPAN_ROWS` physical rows in all); other units, and units of a fragment cut into
    several, alone."""
    units_of = Counter(u.fragment.fragment_id for u in units)
    groups: list[list[ReadUnit]] = []
    rows = 0
    spanning = False
    for unit in units:
        n = unit.fragment.physical_rows
        if n > SPAN_FRAGMENT_ROWS or units_of[unit.fragment.fragment_id] > 1:
            groups.append([unit])
            spanning = False
            continue
        if not spanning or rows + n > SPAN_ROWS:
            groups.append([])
            rows = 0
            spanning = True
        groups[-1].append(unit)
        rows += n
    return groups


def _use_spans(ds: TableSnapshot, units: Sequence[ReadUnit], ahead: int | None) -> list[list[ReadUnit]] | None:
    """The spans to read ``units`` in, or None where they are read unit by unit: object
    stores (their fetches run per fragment, ahead of the decode), units decoded in a pool
    (:func:`decode_inline`), and plans without a span of two units."""
    if not SPANS or len(units) < 2 or not getattr(ds.store, "maps_files", False) or not decode_inline(units, ahead):
        return None
    groups = span_groups(units)
    return groups if any(len(g) > 1 for g in groups) else None


def span_rows(group: Sequence[ReadUnit]) -> int:
    """Rows the units of a span select."""
    return sum(u.num_rows for u in group)


def read_span(group: Sequence[ReadUnit], fields: Sequence[LanceField], arrow_fields: dict[str, pa.Field]) -> pa.Table:
    """``fields`` of the units of one span, their rows back to back, as one table."""
    parts = [(u.fragment, u.rows) for u in group]
    arrays = [read_field_span(parts, f, arrow_fields[f.name]) for f in fields]
    return pa.Table.from_arrays(arrays, names=[f.name for f in fields]) if arrays else empty_table(span_rows(group))


def add_virtual_span(table: pa.Table, group: Sequence[ReadUnit], virtual: set[str], offsets: _Offsets | None) -> pa.Table:
    """:func:`add_virtual` of the units of a span, over their joined rows (each column one
    array: the units' values joined with numpy)."""
    if len(group) == 1 or not virtual:
        return add_virtual(table, group[0], virtual, offsets)
    rows = [np.arange(u.fragment.physical_rows, dtype=np.int64) if u.rows is None else u.rows for u in group]
    if ROW_ID in virtual:
        ids = np.concatenate([u.fragment.row_ids[r] for u, r in zip(group, rows, strict=True)])
        masks = [np.isin(r, u.fragment.deleted_rows) if u.fragment.deleted_rows.size else np.zeros(r.size, np.bool_)
                 for u, r in zip(group, rows, strict=True)]
        mask = np.concatenate(masks)
        table = table.append_column(ROW_ID, pa.array(ids, pa.uint64(), mask=mask if mask.any() else None))
    if ROW_ADDR in virtual:
        bases = np.array([u.fragment.fragment_id for u in group], np.uint64) << np.uint64(32)
        sizes = [r.size for r in rows]
        addresses = np.repeat(bases, sizes) | np.concatenate(rows).astype(np.uint64)
        table = table.append_column(ROW_ADDR, pa.array(addresses, pa.uint64()))
    if ROW_OFFSET in virtual and offsets is not None:
        positions = np.concatenate([offsets(u.fragment, r) for u, r in zip(group, rows, strict=True)])
        table = table.append_column(ROW_OFFSET, pa.array(positions, pa.uint64()))
    return table


def _unit_positions(group: Sequence[ReadUnit], keep: np.ndarray) -> list[tuple[ReadUnit, np.ndarray]]:
    """Span positions ``keep`` (ascending) as ``(unit, its physical rows)`` for each unit
    holding any."""
    bounds = np.zeros(len(group) + 1, np.int64)
    np.cumsum([u.num_rows for u in group], out=bounds[1:])
    cuts = np.searchsorted(keep, bounds)
    out = []
    for i, unit in enumerate(group):
        if cuts[i + 1] > cuts[i]:
            local = keep[cuts[i] : cuts[i + 1]] - bounds[i]
            out.append((unit, local if unit.rows is None else unit.rows[local]))
    return out


def _finish_span(resolved: ResolvedScan, group: Sequence[ReadUnit], early: Sequence[LanceField],
                 late: Sequence[LanceField], arrow_fields: dict[str, pa.Field], offsets: _Offsets | None,
                 ) -> tuple[pa.Table, np.ndarray]:
    """One span read start to finish: the ``early`` fields (all of them without late
    materialization) and the virtual columns decoded for the span, the filter evaluated
    once, the ``late`` fields decoded for the surviving rows of the units holding any, the
    projection applied.  Returns the table and how many of its rows each unit gave (in
    order; they add up to the table's rows)."""
    table = add_virtual_span(read_span(group, early, arrow_fields), group, resolved.virtual, offsets)
    if resolved.filter is None:
        return project(resolved, table), np.fromiter((u.num_rows for u in group), np.int64, len(group))
    keep = resolved.filter.positions(table)
    bounds = np.zeros(len(group) + 1, np.int64)
    np.cumsum([u.num_rows for u in group], out=bounds[1:])
    per_unit = np.diff(np.searchsorted(keep, bounds))
    if not resolved.outputs:  # counting: no row is built
        return empty_table(int(keep.size), resolved.schema.metadata), per_unit
    table = take_table_sorted(table, keep)
    if late:
        parts = [(u.fragment, rows) for u, rows in _unit_positions(group, keep)]
        for f in late:
            af = arrow_fields[f.name]
            # (no survivor: an empty column of the type the field reads as)
            col = read_field_span(parts, f, af) if parts else group[0].fragment.read_field(f, af, np.zeros(0, np.int64))
            table = table.append_column(f.name, col)
    return project(resolved, table), per_unit


def _split_at_units(table: pa.Table, per_unit: np.ndarray) -> Iterator[pa.Table]:
    """``table`` (a span's rows) as one zero-copy slice per unit that gave rows."""
    start = 0
    for n in per_unit.tolist():
        if n:
            yield table.slice(start, n)
            start += n


def _prefetch_rows(ds: TableSnapshot, units: Sequence[ReadUnit], fields: Sequence[LanceField]) -> list[FragmentSnapshot]:
    """On an object store, fetch the bytes a take of each unit's rows reads, the fragments
    concurrently (:meth:`FragmentSnapshot.prefetch`); returns the fragments to drop them from."""
    if getattr(ds.store, "maps_files", False) or not fields or not units:
        return []
    frags = [u.fragment for u in units]
    if len(units) == 1:
        frags[0].prefetch(fields, units[0].rows)
    else:
        with ThreadPoolExecutor(min(len(units), _THREADS * 2)) as pool:
            list(pool.map(lambda u: u.fragment.prefetch(fields, u.rows), units))
    return frags


def _arrow_fields(ds: TableSnapshot, physical: bool) -> dict[str, pa.Field]:
    """Top-level field name -> Arrow field to decode as (``physical``: as stored, JSON
    columns as their JSONB large_binary)."""
    arrow_schema = ds.lance_schema.to_arrow(physical=True) if physical else ds.schema
    return {f.name: af for f, af in zip(ds.lance_schema.fields, arrow_schema, strict=True)}


class CpuExecutor:
    """Decodes on the CPU in a pool of threads (the numba decoders release the GIL): tasks
    are (unit, field) pairs, or whole units for filtered reads with late materialization.
    The pool's numba kernels are serial when there are enough tasks in flight to keep every
    core busy, else one thread runs them with kernels using every core."""

    name = "cpu"
    whole_fragments = False

    def _ordered(self, ds: TableSnapshot, units: Sequence[ReadUnit], fields: Sequence[LanceField], ahead: int | None,
                 tasks_per_unit: int, submit: Any) -> Iterator[tuple[ReadUnit, list[Any]]]:
        """Run ``submit(pool, unit, fetch) -> futures`` for each unit, at most ``ahead`` units
        ahead of the consumer (None: all), and yield ``(unit, results)`` in unit order.
        Small units (:func:`decode_inline`) run in the consumer's thread when it reaches
        them (their fetches, on object stores, still run ahead).

        On object stores, each fragment's bytes of ``fields`` are fetched by a pool of
        :data:`IO_THREADS` threads of their own (decode threads never wait for a fetch they
        would have to run) once its first unit is queued, in one coalesced concurrent read
        per data file (its tasks wait for it), and dropped once the consumer moves on.
        """
        in_flight = len(units) if ahead is None else max(1, ahead)
        pooled = min(in_flight, len(units)) * tasks_per_unit >= 2 * _THREADS and _THREADS > 1
        remote = not getattr(ds.store, "maps_files", False)
        io = ThreadPoolExecutor(IO_THREADS, thread_name_prefix="lance-gpu-fetch") if remote else None
        inline = decode_inline(units, ahead)
        with (contextlib.nullcontext(_InlinePool()) if inline else
              ThreadPoolExecutor(_THREADS if pooled else 1, initializer=_serial_kernels if pooled else None)) as pool:
            queue: deque[tuple[ReadUnit, list[Future]]] = deque()
            it = iter(units)
            prefetched: dict[int, Future] = {}
            units_of = Counter(u.fragment.fragment_id for u in units)

            def next_unit() -> bool:
                unit = next(it, None)
                if unit is None:
                    return False
                frag = unit.fragment
                fetch = prefetched.get(frag.fragment_id)
                if io is not None and fetch is None and fields:
                    # a fragment read as one unit of selected rows fetches only their chunks
                    rows = unit.rows if units_of[frag.fragment_id] == 1 else None
                    fetch = prefetched[frag.fragment_id] = io.submit(frag.prefetch, fields, rows)
                queue.append((unit, submit(pool, unit, fetch)))
                return True

            for _ in range(in_flight):
                if not next_unit():
                    break
            current: FragmentSnapshot | None = None
            try:
                while queue:
                    unit, futs = queue.popleft()
                    if remote and current is not None and current is not unit.fragment:
                        current.drop_prefetched()
                        prefetched.pop(current.fragment_id, None)
                    current = unit.fragment
                    results = [fu.result() for fu in futs]
                    next_unit()
                    yield unit, results
            finally:
                for _unit, futs in queue:
                    for fu in futs:
                        fu.cancel()
                if io is not None:
                    io.shutdown(wait=True, cancel_futures=True)
                if remote and current is not None:
                    current.drop_prefetched()

    def decode(self, ds: TableSnapshot, units: Sequence[ReadUnit], fields: Sequence[LanceField], ahead: int | None,
               physical: bool = False) -> Iterator[pa.Table]:
        """``physical=True``: fields as stored (JSON columns as their JSONB large_binary).
        Units of a span (:func:`span_groups`) are decoded together and handed out as
        zero-copy slices of the span's table."""
        arrow_fields = _arrow_fields(ds, physical)
        names = [f.name for f in fields]
        spans = _use_spans(ds, units, ahead)
        if spans is not None:
            for group in spans:
                table = read_span(group, fields, arrow_fields)
                at = 0
                for unit in group:
                    yield table.slice(at, unit.num_rows) if len(group) > 1 else table
                    at += unit.num_rows
            return
        if ahead is None and all(u.rows is not None for u in units) and sum(u.num_rows for u in units) <= INLINE_DECODE_ROWS:
            fetched = _prefetch_rows(ds, units, fields)
            try:
                for unit in units:
                    arrays = [unit.fragment.read_field(f, arrow_fields[f.name], unit.rows) for f in fields]
                    yield pa.Table.from_arrays(arrays, names=names) if arrays else empty_table(unit.num_rows)
            finally:
                for frag in fetched:
                    frag.drop_prefetched()
            return

        def submit(pool: ThreadPoolExecutor, unit: ReadUnit, fetch: Future | None) -> list[Future]:
            if unit.num_rows * len(fields) <= SMALL_UNIT_VALUES:
                # one task for all fields of a small unit: each field decodes in well under a
                # millisecond, and every task is a hand-off between threads
                return [pool.submit(_read_unit, fetch, unit, fields, arrow_fields)]
            return [pool.submit(_read_after, fetch, unit.fragment, f, arrow_fields[f.name], unit.rows) for f in fields]

        small = all(u.num_rows * len(fields) <= SMALL_UNIT_VALUES for u in units[: max(1, ahead or len(units))])
        tasks_per_unit = 1 if small else len(fields)
        for unit, arrays in self._ordered(ds, units, fields, ahead, tasks_per_unit, submit):
            if len(arrays) == 1 and isinstance(arrays[0], list):
                arrays = arrays[0]
            yield pa.Table.from_arrays(arrays, names=names) if arrays else empty_table(unit.num_rows)

    def decode_groups(self, ds: TableSnapshot, units: Sequence[ReadUnit], fields: Sequence[LanceField], ahead: int | None,
                      physical: bool = False) -> Iterator[tuple[list[ReadUnit], pa.Table]]:
        """As :meth:`decode`, but one table per span of small units (:func:`span_groups`;
        each other unit alone), with the units it holds, their rows back to back."""
        spans = _use_spans(ds, units, ahead)
        if spans is None:
            for unit, table in zip(units, self.decode(ds, units, fields, ahead, physical), strict=True):
                yield [unit], table
            return
        arrow_fields = _arrow_fields(ds, physical)
        for group in spans:
            yield group, read_span(group, fields, arrow_fields)

    def run(self, ds: TableSnapshot, units: Sequence[ReadUnit], resolved: ResolvedScan, offsets: _Offsets | None,
            ahead: int | None, unit_edges: bool = False, want: int | None = None) -> Iterator[pa.Table]:
        """One finished table per unit; on a mapped store, one per span of small units
        (:func:`_finish_span`: one decode per field, one filter evaluation), or with
        ``unit_edges`` the span's table cut into one slice per unit (a consumer that ends
        batches where fragments end, as pylance's loose batches do).  ``want`` is not
        needed: tables come unit by unit (or span by span) already, decoded ``ahead``."""
        late = resolved.late_fields()
        early = [f for f in resolved.read_fields if f not in late]
        arrow_fields = {f.name: af for f, af in zip(ds.lance_schema.fields, ds.schema, strict=True)}
        spans = _use_spans(ds, units, ahead)
        if spans is not None:
            for group in spans:
                if len(group) == 1 and late:  # one larger unit: late fields decoded selectively
                    yield _filtered_group(resolved, group, early, late, arrow_fields, offsets)[0]
                    continue
                table, per_unit = _finish_span(resolved, group, early, late, arrow_fields, offsets)
                if unit_edges and len(group) > 1:
                    yield from _split_at_units(table, per_unit)
                else:
                    yield table
            return
        if not late:
            decoded = self.decode(ds, units, resolved.read_fields, ahead)
            try:
                for unit, table in zip(units, decoded, strict=True):
                    yield finish_table(resolved, table, unit, offsets)
            finally:
                decoded.close()  # type: ignore[attr-defined]
            return
        # Late materialization: each unit is one task (filter fields, filter, late fields for
        # the survivors), so units filter and materialize in parallel.

        def submit(pool: ThreadPoolExecutor, unit: ReadUnit, fetch: Future | None) -> list[Future]:
            return [pool.submit(_filtered_unit, fetch, resolved, unit, early, late, arrow_fields, offsets)]

        # Each unit task decodes its fields in turn: count them as tasks for the pool choice.
        finished = self._ordered(ds, units, early, ahead, _THREADS, submit)
        try:
            for _unit, (table,) in finished:
                yield table
        finally:
            finished.close()  # type: ignore[attr-defined]


class GpuExecutor:
    """Decodes on the GPU (:func:`lance_gpu.gpu.read.scan_device`); fields without a GPU
    decoder fall back to the CPU per ``on_cpu_fallback`` ("warn", "raise", "allow")."""

    name = "gpu"
    whole_fragments = True

    def __init__(self, on_cpu_fallback: str = "warn", whole_read: bool = False) -> None:
        from lance_gpu.gpu.read import check_fallback_mode

        check_fallback_mode(on_cpu_fallback)
        self.on_cpu_fallback = on_cpu_fallback
        #: every table is kept to the end of the read and combined (``to_cudf``): a read of
        #: several units decodes into the read's final fixed-width buffers
        #: (``scan_device(whole_read=True)``)
        self.whole_read = whole_read

    def decode_device(self, ds: TableSnapshot, units: Sequence[ReadUnit], fields: Sequence[LanceField]) -> Iterator[Any]:
        """Per unit, a :class:`~lance_gpu.gpu.device_table.DeviceTable` of ``fields``."""
        from lance_gpu.gpu.read import scan_device

        jobs = [(u.fragment, u.rows) for u in units]
        for _frag, dt in scan_device(ds, list(fields), jobs, on_cpu_fallback=self.on_cpu_fallback,
                                     whole_read=self.whole_read):
            yield dt

    def decode(self, ds: TableSnapshot, units: Sequence[ReadUnit], fields: Sequence[LanceField], ahead: int | None) -> Iterator[pa.Table]:
        for dt in self.decode_device(ds, units, fields):
            yield dt.to_arrow()

    def device_scope(self) -> contextlib.AbstractContextManager[Any]:
        """The context of the device work that follows a decode (filtering, combining,
        copying back): nothing here; the Spark task's executor selects its task's GPU."""
        return contextlib.nullcontext()

    def run_device(self, ds: TableSnapshot, units: Sequence[ReadUnit], resolved: ResolvedScan,
                   offsets: _Offsets | None = None) -> Iterator[Any]:
        """Per unit, the finished result as a device table: the filter's surviving rows are
        gathered on the device before anything is copied to the host.  With a filter, only
        its columns are decoded first, every unit's in one read, and the filter evaluated
        once over every unit (:func:`filter_devices`: their columns copied back together);
        the other fields (late materialization) are decoded for the surviving rows only --
        the mini-block chunks and full-zip rows holding them (:mod:`lance_gpu.gpu.rows`) --
        of every unit in one read, and none at all where no row survives.  SQL expressions
        of decoded columns are computed once over every unit too (:func:`project_devices`).
        (So with a filter or such an expression the first table comes once every unit is
        decoded; a read larger than the device memory budget goes unit by unit,
        :func:`_within_budget`.)"""

        late = resolved.late_fields()
        early = [f for f in resolved.read_fields if f not in late] if late else resolved.read_fields
        decoded = zip(units, self.decode_device(ds, units, early), strict=True)
        if resolved.filter is None and not _reads_columns(resolved):
            for unit, dt in decoded:
                yield from project_devices(resolved, [dt], [unit], offsets)
            return
        for group in _within_budget(decoded, lambda pair: pair[1].hold_sources):
            # a read held whole is decoded by now (the outer decode done); unit by unit, the
            # base decode: a subclass holding a resource across decode_device (the Spark
            # task's GPU slot) holds it here already, for the outer decode
            late_decode = self.decode_device if len(group) > 1 or group[0][1].hold_sources else functools.partial(GpuExecutor.decode_device, self)
            with self.device_scope():
                kept = filter_devices(resolved, [dt for _unit, dt in group], [unit for unit, _dt in group], offsets)
                if late:
                    rests = late_decode(ds, [unit for _dt, unit in kept], late)
                    kept = [(gpu.device_table.DeviceTable([*dt.names, *rest.names], [*dt.raw_columns, *rest.raw_columns], dt.num_rows, None,
                                                          dt.fragment_id, hold_sources=dt.hold_sources and rest.hold_sources), unit)
                            for (dt, unit), rest in zip(kept, rests, strict=True)]
                yield from project_devices(resolved, [dt for dt, _unit in kept], [unit for _dt, unit in kept], offsets)

    def run(self, ds: TableSnapshot, units: Sequence[ReadUnit], resolved: ResolvedScan, offsets: _Offsets | None,
            ahead: int | None, unit_edges: bool = False, want: int | None = None) -> Iterator[pa.Table]:
        """Finished host tables: the units' device tables (:meth:`run_device`) combined and
        copied back together (:func:`lance_gpu.gpu.device_table.read_to_arrow`), so that
        the export's launches and blocking copies do not grow with the fragments.  Every
        unit at once where ``ahead`` is None (``to_table``, takes, counts); else groups of
        units of at least ``ahead * STREAM_WINDOW_ROWS`` rows (``to_batches``: ``ahead``
        windows in flight, as on the CPU); a read larger than the device memory budget table
        by table (:func:`_within_budget`).  Where the consumer stops after ``want`` rows (a
        limit the plan could not push into row selections: after a filter), groups that
        grow (:func:`_growing_groups`: the first of at least ``want`` rows, each next twice
        the last), so a read whose limit the first units fill decodes only those; the
        consumer closing this generator stops the decode.  One table per group, or with ``unit_edges`` the
        group's table cut where its units end (zero-copy slices).  A group's tables are all
        kept until combined, so a read with no filter decodes into the read's final buffers
        (``whole_read``)."""

        executor = copy.copy(self)
        executor.whole_read = resolved.filter is None
        rows = None if ahead is None else ahead * STREAM_WINDOW_ROWS
        groups = _row_groups(units, rows) if want is None else _growing_groups(units, want, rows)
        for group in groups:
            for tables in _within_budget(executor.run_device(ds, group, resolved, offsets), lambda dt: dt.hold_sources):
                with executor.device_scope():
                    table = gpu.device_table.read_to_arrow(tables, resolved.schema)
                if not unit_edges or len(tables) < 2:
                    yield table
                    continue
                start = 0
                for dt in tables:
                    yield table.slice(start, dt.num_rows)
                    start += dt.num_rows


def _within_budget(tables: Iterator[Any], holds: Any) -> Iterator[list[Any]]:
    """A read's ``tables`` (device tables, or items holding one) as one list where the read
    fits the device memory budget (``holds(first)``: its tables hold the buffers they select
    from, ``DeviceTable.hold_sources``, decided once for the read), else one list per table:
    a read larger than the budget is decoded unit by unit, and so filtered and copied back
    table by table, never held whole on the device."""
    first = next(tables, None)
    if first is None:
        return
    if holds(first):
        yield [first, *tables]
        return
    yield [first]
    for table in tables:
        yield [table]


def _row_groups(units: Sequence[ReadUnit], rows: int | None) -> Iterator[list[ReadUnit]]:
    """``units`` in consecutive groups of at least ``rows`` rows (the last may hold fewer;
    None: one group of them all; no group where there is no unit)."""
    group: list[ReadUnit] = []
    have = 0
    for unit in units:
        group.append(unit)
        have += unit.num_rows
        if rows is not None and have >= rows:
            yield group
            group, have = [], 0
    if group:
        yield group


def _growing_groups(units: Sequence[ReadUnit], first: int, most: int | None) -> Iterator[list[ReadUnit]]:
    """``units`` in consecutive groups of growing size: the first of at least ``first`` rows
    (at least one row), each next of at least twice the rows the last held, none asking
    more than ``most`` (None: no bound); the last may hold fewer.  A read that stops after
    ``first`` rows decodes the few units that hold them, and one that goes on decodes in
    about log2(rows / first) groups, not unit by unit."""
    rows = max(int(first), 1)
    if most is not None:
        rows = min(rows, most)
    group: list[ReadUnit] = []
    have = 0
    for unit in units:
        group.append(unit)
        have += unit.num_rows
        if have >= rows:
            yield group
            rows = 2 * have if most is None else min(2 * have, most)
            group, have = [], 0
    if group:
        yield group


# -- the scan epilogue on device tables (the GPU executor's filter and projection) ----------


_DEVICE_ROW = "__lance_gpu_row__"


def _host_columns(resolved, tables: Sequence[DeviceTable], units: Sequence[Any], names: list[str],
                  offsets) -> tuple[pa.Table, np.ndarray]:
    """One host table of the columns ``names`` of every unit's table (``tables[k]`` of
    ``units[k]``, one after the other) and the plan's virtual columns, and where each
    unit's rows start in it (one more entry: the rows of all): the device columns combined
    and copied back together (:func:`lance_gpu.gpu.device_table.read_to_arrow`: not a copy
    per unit and column), the virtual columns made unit by unit on the host."""
    host = gpu.device_table.read_to_arrow(tables, pa.schema([pa.field(c, tables[0].raw_column(c).type) for c in names]))
    starts = np.concatenate([[0], np.cumsum([dt.num_rows for dt in tables])]).astype(np.int64)
    parts = [add_virtual(host.slice(int(starts[k]), int(starts[k + 1] - starts[k])), unit, resolved.virtual, offsets)
             for k, unit in enumerate(units)]
    return (pa.concat_tables(parts) if parts[0].num_columns else empty_table(int(starts[-1]))), starts  # (concat_tables loses the rows of no column)


def filter_devices(resolved, tables: Sequence[DeviceTable], units: Sequence[Any], offsets=None) -> list[tuple[DeviceTable, Any]]:
    """Per unit, the rows of its table (``tables[k]``, the decode of ``units[k]``) passing
    the plan's filter, as a selection of its device columns (written once, where the read is
    combined: :class:`lance_gpu.gpu.gathered.Gathered`), and the unit of those rows (its
    ``rows``: the surviving physical rows).  The filter is evaluated once, on one host table
    of the columns it reads over every unit (:func:`_host_columns`)."""
    if resolved.filter is None:
        return list(zip(tables, units, strict=True))
    if not tables:
        return []
    names = [c for c in dict.fromkeys(resolved.filter.columns) if c in tables[0].names]
    probe, starts = _host_columns(resolved, tables, units, names, offsets)
    probe = probe.append_column(_DEVICE_ROW, pa.array(np.arange(probe.num_rows, dtype=np.int64)))
    keep = apply_filter(resolved, probe).column(_DEVICE_ROW).to_numpy()
    cut = np.searchsorted(keep, starts)  # the filter's positions come in order
    out = []
    for k, (dt, unit) in enumerate(zip(tables, units, strict=True)):
        mine = keep[cut[k] : cut[k + 1]] - starts[k]
        rows = (np.arange(unit.fragment.physical_rows, dtype=np.int64) if unit.rows is None else unit.rows)[mine]
        out.append((dt.take(mine), type(unit)(unit.fragment, rows)))
    return out


def _reads_columns(resolved) -> bool:
    """Whether an output of the plan is an SQL expression of decoded columns (computed on a
    host copy of them: :func:`project_devices` takes every unit at once then)."""
    return any(out.expression is not None and out.expression.columns for out in resolved.outputs)


def project_devices(resolved, tables: Sequence[DeviceTable], units: Sequence[Any], offsets=None) -> list[DeviceTable]:
    """Per unit, its table's top-level and nested fields projected on the device; SQL
    expressions and virtual columns computed on the host as Arrow columns of the tables,
    once over every unit (:func:`_host_columns`: the columns the expressions read copied
    back together)."""

    computed = [out for out in resolved.outputs if out.expression is not None or out.virtual is not None]
    column_of = {id(out): j for j, out in enumerate(computed)}  # an output's column of ``done``
    done = None
    if computed and tables:
        needed = dict.fromkeys(c for out in computed if out.expression is not None for c in out.expression.columns)
        host, starts = _host_columns(resolved, tables, units, [c for c in needed if c in tables[0].names], offsets)
        done = project(type(resolved)([], {}, resolved.virtual, None, computed, pa.schema([out.field for out in computed])), host)
    result = []
    for k, dt in enumerate(tables):
        names, cols = [], []
        for out in resolved.outputs:
            if done is not None and id(out) in column_of:
                col = done.column(column_of[id(out)]).slice(int(starts[k]), dt.num_rows).combine_chunks()
            else:
                col = dt.raw_column(out.path[0])  # a selection stays one until written out (once)
                for child in out.path[1:]:
                    idx = col.type.get_field_index(child)
                    col = col.field(idx) if isinstance(col, (gpu.columns.DeviceColumn, gpu.gathered.Gathered)) else pc.struct_field(col, [idx])
            names.append(out.name)
            cols.append(col)
        result.append(gpu.device_table.DeviceTable(names, cols, dt.num_rows, None, dt.fragment_id, hold_sources=dt.hold_sources))
    return result


def executor_for(device: str, on_cpu_fallback: str = "warn") -> Executor:
    """The executor for ``device`` ("auto", "gpu", "cpu"; "auto" picks what is usable)."""

    if resolve_device(device) == "gpu":
        return GpuExecutor(on_cpu_fallback)
    return CpuExecutor()


# --------------------------------------------------------------------------------------------
# Planning the units, and the epilogue
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def open_snapshot(uri: str, version: int, storage_options: tuple[tuple[str, str], ...] = ()) -> TableSnapshot:
    """The table snapshot at a plan's pinned version, kept open across the plans a process
    runs (on an object store, this process fetches the bytes itself with ``storage_options``)."""
    options = dict(storage_options)
    store, root = resolve_uri(uri, options)
    return TableSnapshot.load(store, root, version, options)


def plan_units(plan: ScanPlan, ds: TableSnapshot, window: int | None) -> list[ReadUnit]:
    """The plan's read units: per fragment its selected rows (or live rows), cut into
    windows of ``window`` rows (None: one unit per fragment)."""
    units: list[ReadUnit] = []
    for fid, sel in zip(plan.fragment_ids, plan.selections, strict=True):
        frag = ds.get_fragment(fid)
        if frag is None:
            msg = f"fragment {fid} is not in version {ds.version} of {ds.uri}"
            raise KeyError(msg)
        rows = sel
        if rows is None and not plan.include_deleted_rows and frag.pb.HasField("deletion_file"):
            # (without deletions every row is live: the data file's footer is then checked
            # against the manifest when the unit's decode opens it, on a pool thread)
            rows = frag.live_rows
        if window is None or (rows is None and frag.physical_rows <= window):
            units.append(ReadUnit(frag, rows))
            continue
        if rows is None:
            rows = np.arange(frag.physical_rows, dtype=np.int64)
        for start in range(0, int(rows.size), window):
            units.append(ReadUnit(frag, rows[start : start + window]))
    return units


class _Offsets:
    """Dataset-level ``_rowoffset`` of physical rows: live rows before the fragment plus
    the row's position among the fragment's live rows."""

    def __init__(self, ds: TableSnapshot) -> None:
        counts = [f.live_count() for f in ds.fragments]
        self.base = dict(zip((f.fragment_id for f in ds.fragments), np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist() if counts else [], strict=True))

    def __call__(self, frag: FragmentSnapshot, rows: np.ndarray) -> np.ndarray:
        live = frag.live_rows
        pos = rows if live is None else np.searchsorted(live, rows)
        return np.asarray(pos, np.uint64) + np.uint64(self.base[frag.fragment_id])


def add_virtual(table: pa.Table, unit: ReadUnit, virtual: set[str], offsets: _Offsets | None) -> pa.Table:
    """Append the virtual columns ``virtual`` of ``unit``'s rows to ``table``."""
    if not virtual:
        return table
    frag = unit.fragment
    rows = np.arange(frag.physical_rows, dtype=np.int64) if unit.rows is None else unit.rows
    if ROW_ID in virtual:
        ids = frag.row_ids[rows]
        mask = None
        if frag.deleted_rows.size:
            mask = np.isin(rows, frag.deleted_rows)
            mask = mask if mask.any() else None
        table = table.append_column(ROW_ID, pa.array(ids, pa.uint64(), mask=mask))
    if ROW_ADDR in virtual:
        table = table.append_column(ROW_ADDR, pa.array(frag.row_addresses(rows), pa.uint64()))
    if ROW_OFFSET in virtual and offsets is not None:
        table = table.append_column(ROW_OFFSET, pa.array(offsets(frag, rows), pa.uint64()))
    return table


def apply_filter(resolved: ResolvedScan, table: pa.Table) -> pa.Table:
    """Keep the rows for which the plan's filter is true."""
    return table if resolved.filter is None else take_table_sorted(table, resolved.filter.positions(table))


def _evaluate(table: pa.Table, expression: pc.Expression) -> pa.ChunkedArray:
    import pyarrow.acero as acero

    decl = acero.Declaration.from_sequence([
        acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
        acero.Declaration("project", acero.ProjectNodeOptions([expression], ["v"])),
    ])
    return decl.to_table(use_threads=False).column(0)


def project(resolved: ResolvedScan, table: pa.Table) -> pa.Table:
    """Shape decoded top-level fields (and virtual columns) into the result schema."""
    arrays: list[pa.ChunkedArray | pa.Array] = []
    for out in resolved.outputs:
        if out.expression is not None:
            col = _evaluate(table, out.expression.expression) if table.num_rows else pa.chunked_array([], out.field.type)
            if col.type != out.field.type:
                col = col.cast(out.field.type)
        elif out.virtual is not None:
            col = table.column(out.virtual)
        else:
            col = table.column(out.path[0])
            for child in out.path[1:]:
                col = pc.struct_field(col, [col.type.get_field_index(child)])
        arrays.append(col)
    if not arrays:
        return empty_table(table.num_rows, resolved.schema.metadata)
    return pa.Table.from_arrays(arrays, schema=resolved.schema)


def finish_table(resolved: ResolvedScan, table: pa.Table, unit: ReadUnit, offsets: _Offsets | None) -> pa.Table:
    """The epilogue every Arrow read runs: virtual columns, filter, projection."""
    table = add_virtual(table, unit, resolved.virtual, offsets)
    if resolved.filter is not None and not resolved.outputs:  # counting: no row is built
        return empty_table(resolved.filter.count(table), resolved.schema.metadata)
    table = apply_filter(resolved, table)
    return project(resolved, table)


def run_plan(
    plan: ScanPlan,
    executor: Executor | None = None,
    ds: TableSnapshot | None = None,
    *,
    window: int | None = None,
    ahead: int | None = None,
    unit_edges: bool = False,
) -> Iterator[pa.Table]:
    """Run ``plan``: one finished Arrow table per read unit or span of small units (empty
    ones included), in scan order, with the plan's ``offset`` / ``limit`` applied over the
    filtered rows.  ``window``: rows per unit (None: whole fragments); ``ahead``: units
    decoding ahead of the consumer (None: all); ``unit_edges``: no table holds
    rows of two units (so batches cut from each table end where fragments end)."""
    if ds is None:
        ds = open_snapshot(plan.uri, plan.version, plan.storage_options)
    if executor is None:
        executor = executor_for(plan.device)
    resolved = resolve(plan, ds)
    units = plan_units(plan, ds, None if executor.whole_fragments else window)
    offsets = _Offsets(ds) if ROW_OFFSET in resolved.virtual else None
    skip = plan.offset
    left = plan.limit
    if left == 0:
        return
    want = None if left is None else skip + left
    finished = executor.run(ds, units, resolved, offsets, ahead, unit_edges, want=want)
    try:
        for table in finished:
            if skip:
                cut = min(skip, table.num_rows)
                table = table.slice(cut)
                skip -= cut
            if left is not None:
                table = table.slice(0, left)
                left -= table.num_rows
            yield table
            if left == 0:
                return
    finally:
        close = getattr(finished, "close", None)
        if close is not None:
            close()


def concat(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    """One table of ``tables`` (of ``schema``), keeping the row count without columns."""
    if not schema.names:
        return empty_table(sum(t.num_rows for t in tables), schema.metadata)
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def rebatch(tables: Iterator[pa.Table], batch_size: int, strict: bool) -> Iterator[pa.RecordBatch]:
    """Zero-copy batches of at most ``batch_size`` rows; with ``strict`` every batch but the
    last has exactly ``batch_size`` rows (slices of consecutive tables are joined)."""
    if not strict:
        for table in tables:
            for batch in table.to_batches(max_chunksize=batch_size):
                if batch.num_rows:
                    yield batch
        return
    pending: list[pa.RecordBatch] = []
    have = 0
    schema = None
    for table in tables:
        schema = table.schema
        for batch in table.to_batches(max_chunksize=batch_size):
            while batch.num_rows:
                take = min(batch_size - have, batch.num_rows)
                pending.append(batch.slice(0, take))
                have += take
                batch = batch.slice(take)
                if have == batch_size:
                    yield _join(pending, schema)
                    pending, have = [], 0
    if have and schema is not None:
        yield _join(pending, schema)


def _empty_batch(num_rows: int, schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_struct_array(pa.array([{}] * num_rows, pa.struct([]))).replace_schema_metadata(schema.metadata)


def _join(parts: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    if len(parts) == 1:
        return parts[0]
    if not schema.names:
        return _empty_batch(sum(p.num_rows for p in parts), schema)
    return pa.Table.from_batches(parts, schema=schema).combine_chunks().to_batches()[0]


# --------------------------------------------------------------------------------------------
# Takes
# --------------------------------------------------------------------------------------------


def take_indices(indices: Any) -> np.ndarray:
    """pylance's ``take`` indices as int64, refusing non-integers and negatives."""
    if isinstance(indices, (pa.Array, pa.ChunkedArray)):
        if not pa.types.is_integer(indices.type):
            raise ArgumentTypeError(f"argument 'row_indices': {indices.type} values cannot be interpreted as integers")
        values = indices.to_numpy(zero_copy_only=False)
    else:
        values = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices)
        if values.size and values.dtype.kind not in "iu":
            bad = next((v for v in values.ravel().tolist() if isinstance(v, bool) or not isinstance(v, int)), values.ravel()[0])
            raise ArgumentTypeError(f"argument 'row_indices': {type(bad).__name__!r} object cannot be interpreted as an integer")
    idx = np.asarray(values, dtype=np.int64).ravel()
    if idx.size and int(idx.min()) < 0:
        raise NegativeArgumentError(f"take index {int(idx.min())} is negative")
    return idx


def _take_nesting(ds: TableSnapshot, columns: Any) -> dict[str, list[tuple[str, ...]]] | None:
    """pylance's ``take`` returns a dotted name as its top-level struct pruned to the named
    fields (``"st.q"`` -> ``st: struct<q>``): top-level name -> requested sub-paths (empty:
    the whole field), in order of first mention; None when no dotted name is asked for."""
    if columns is None or isinstance(columns, (str, bytes, dict)) or not isinstance(columns, Sequence):
        return None
    top = set(ds.schema.names) | set(VIRTUAL_COLUMNS)  # "_rowid" etc. are columns a take may ask for
    if all(not isinstance(c, str) or c in top for c in columns):
        return None

    out: dict[str, list[tuple[str, ...]]] = {}
    for name in columns:
        if name in top:
            out.setdefault(name, []).append(())
        else:
            path = nested_path(ds, name)
            out.setdefault(path[0], []).append(path[1:])
    return out


def _prune(array: pa.Array, paths: list[tuple[str, ...]]) -> pa.Array:
    if any(not p for p in paths):
        return array
    children: dict[str, list[tuple[str, ...]]] = {}
    for p in paths:
        children.setdefault(p[0], []).append(p[1:])
    arrays = [_prune(array.field(name), sub) for name, sub in children.items()]
    fields = [array.type.field(name).with_type(a.type) for name, a in zip(children, arrays, strict=True)]
    return pa.StructArray.from_arrays(arrays, fields=fields, mask=array.is_null() if array.null_count else None)


def _prune_structs(table: pa.Table, nested: dict[str, list[tuple[str, ...]]]) -> pa.Table:
    names, arrays = [], []
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        if name in nested:
            col = _prune(col, nested[name])
        names.append(name)
        arrays.append(col)
    fields = [table.schema.field(n).with_type(a.type) for n, a in zip(names, arrays, strict=True)]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=table.schema.metadata))


def take_rows(
    ds: TableSnapshot,
    indices: Any,
    columns: Any = None,
    *,
    fragments: Sequence[FragmentSnapshot] | None = None,
    with_row_id: bool = False,
    with_row_address: bool = False,
    executor: Executor | None = None,
    device: str = "auto",
) -> pa.Table:
    """Rows at the given positions among the live rows of ``fragments`` (default: the
    dataset's), in the order given (repeats allowed): a plan whose row selections are the
    rows asked for, run by the dataset's executor, put back in the caller's order."""
    idx = take_indices(indices)
    chosen = None if fragments is None else list(fragments)
    # the manifest's counts (u64) summed as Python integers, the starts capped at int64's
    # largest value: a position (an int64) below the total lands where the uncapped starts put it;
    # over the whole version from the snapshot's arrays, fragment objects made only for the
    # fragments the rows lie in
    counts = ds.live_counts() if chosen is None else [f.live_count() for f in chosen]
    total = sum(counts)
    cap = int(np.iinfo(np.int64).max)
    starts = np.array([min(s, cap) for s in itertools.accumulate(counts, initial=0)], np.int64)
    if idx.size and int(idx.max()) >= total:
        bad = int(idx.max())
        raise RowIndexError(f"take index {bad} is out of range: there are {total} rows")
    order = np.argsort(idx, kind="stable")
    sorted_idx = idx[order]
    frag_of = np.searchsorted(starts, sorted_idx, side="right") - 1
    groups: list[tuple[int, np.ndarray]] = []
    for fi in np.unique(frag_of).tolist():
        frag = ds.fragment_at(fi) if chosen is None else chosen[fi]
        local = sorted_idx[frag_of == fi] - starts[fi]
        live = frag.live_rows
        groups.append((frag.fragment_id, local if live is None else live[local]))
    return _take_physical(ds, groups, order, columns, with_row_id, with_row_address, executor, device)


def take_addresses(
    ds: TableSnapshot,
    addresses: Any,
    columns: Any = None,
    *,
    with_row_id: bool = False,
    with_row_address: bool = False,
    executor: Executor | None = None,
    device: str = "auto",
) -> pa.Table:
    """Rows at row addresses (``fragment_id << 32 | offset``), in the order given (repeats
    kept), deleted rows left out: pylance's ``_take_rows`` on a dataset whose row ids are
    addresses.  An address in no fragment, or past its fragment's rows, raises
    :class:`RowIndexError` (an ``OSError``, as pylance's)."""
    addr = np.asarray(addresses.to_numpy(zero_copy_only=False) if isinstance(addresses, (pa.Array, pa.ChunkedArray))
                      else addresses, dtype=np.uint64).reshape(-1)
    frag_ids = (addr >> np.uint64(32)).astype(np.int64)
    offsets = (addr & np.uint64(0xFFFFFFFF)).astype(np.int64)
    by_id = {f.fragment_id: f for f in ds.fragments}
    keep = np.ones(addr.size, bool)
    for fid in np.unique(frag_ids):
        frag = by_id.get(int(fid))
        at = frag_ids == fid
        if frag is None:
            bad = int(addr[np.argmax(at)])
            raise RowIndexError(f"row address {bad} belongs to non-existent fragment {int(fid)}")
        if int(offsets[at].max()) >= frag.physical_rows:
            raise RowIndexError(f"row address {int(addr[at][np.argmax(offsets[at])])} is past the "
                                f"{frag.physical_rows} rows of fragment {int(fid)}")
        live = frag.live_rows
        if live is not None:
            keep[at] = np.isin(offsets[at], live)
    frag_ids, offsets = frag_ids[keep], offsets[keep]
    order = np.lexsort((offsets, frag_ids))
    sorted_frags, sorted_offsets = frag_ids[order], offsets[order]
    groups = [(int(fid), sorted_offsets[sorted_frags == fid]) for fid in np.unique(sorted_frags)]
    # fragments in manifest order, as a scan yields them
    rank = {f.fragment_id: k for k, f in enumerate(ds.fragments)}
    groups.sort(key=lambda g: rank[g[0]])
    by_frag = {fid: np.flatnonzero(sorted_frags == fid) for fid, _ in groups}
    order = order[np.concatenate([by_frag[fid] for fid, _ in groups])] if groups else order
    return _take_physical(ds, groups, order, columns, with_row_id, with_row_address, executor, device)


def _take_physical(ds: TableSnapshot, groups: list[tuple[int, np.ndarray]], order: np.ndarray, columns: Any,
                   with_row_id: bool, with_row_address: bool, executor: Executor | None, device: str) -> pa.Table:
    """Rows of ``groups`` (fragment id, sorted physical offsets, repeats allowed; fragments
    in scan order) put back in the caller's order: ``order[k]`` is the caller's position of
    the ``k``-th row of the concatenated groups."""
    selections: dict[int, np.ndarray] = {}
    inverse_parts: list[np.ndarray] = []
    base = 0
    for fragment_id, phys in groups:
        uniq, inverse = np.unique(phys, return_inverse=True)
        selections[fragment_id] = uniq.astype(np.int64)
        inverse_parts.append(inverse + base)
        base += uniq.size
    repeated: list[str] | None = None
    if isinstance(columns, (list, tuple)) and len(set(columns)) < len(columns):
        # pylance's take: a repeated column comes once, a repeated _rowid / _rowaddr as often as named
        repeated = [c for k, c in enumerate(columns) if c in (ROW_ID, ROW_ADDR) or c not in columns[:k]]
        columns = list(dict.fromkeys(columns))
    nested = _take_nesting(ds, columns)
    read_columns = list(nested) if nested is not None else columns
    plan = build_plan(ds, columns=read_columns, with_row_id=with_row_id, with_row_address=with_row_address, selections=selections,
                      device=device)
    table = concat(list(run_plan(plan, executor or executor_for(device), ds)), resolve(plan, ds).schema)
    if nested is not None:
        table = _prune_structs(table, nested)
    if repeated is not None:
        table = pa.Table.from_arrays([table.column(c) for c in repeated],
                                     schema=pa.schema([table.schema.field(c) for c in repeated], metadata=table.schema.metadata))
    if not order.size:
        return table
    positions = np.concatenate(inverse_parts)  # sorted order -> row of `table`
    back = np.empty_like(positions)
    back[order] = positions
    if back.size == table.num_rows and np.array_equal(back, np.arange(back.size)):
        return table
    if not table.schema.names:
        return empty_table(int(back.size), table.schema.metadata)
    return table.take(pa.array(back))


def read_rows(ds: TableSnapshot, fragment: FragmentSnapshot, rows: np.ndarray | None, columns: Any = None) -> pa.Table:
    """``columns`` (default: all) of the sorted physical ``rows`` (None: every live row) of
    one fragment, decoded on the CPU: the plan-and-run the write package reads with."""
    plan = build_plan(ds, columns=columns, selections={fragment.fragment_id: None if rows is None else np.asarray(rows, np.int64)})
    return concat(list(run_plan(plan, CpuExecutor(), ds)), resolve(plan, ds).schema)


def decode_fields(ds: TableSnapshot, units: Sequence[ReadUnit], fields: Sequence[LanceField],
                  physical: bool = False) -> Iterator[pa.Table]:
    """The raw top-level ``fields`` (no filter, no projection) of each unit, decoded on the
    CPU in threads, in unit order: for writers that rewrite whole fields (``physical=True``:
    as writers take them, JSON columns as JSONB, blob columns as their bytes, so a rewrite
    copies them byte for byte; without it blob columns are refused)."""
    if not physical:
        _refuse_blob_rewrite(fields)
        return CpuExecutor().decode(ds, units, fields, None)
    plain = [f for f in fields if not blob_kind(f)]
    if len(plain) == len(fields):
        return CpuExecutor().decode(ds, units, fields, None, physical=True)
    return _with_blob_bytes(CpuExecutor().decode(ds, units, plain, None, physical=True), units, fields)


def decode_spans(ds: TableSnapshot, units: Sequence[ReadUnit], fields: Sequence[LanceField], *,
                 physical: bool = False, ahead: int | None = None) -> Iterator[tuple[list[ReadUnit], pa.Table]]:
    """:func:`decode_fields` in spans: per span of small units (:func:`span_groups`, on a
    mapped store; else per unit) the units and one table of their rows back to back, at
    most ``ahead`` units decoding ahead (None: all).  For writers reading many small
    fragments at once (a delete's predicate, a compaction's rewrite): one decode per field
    and one table per span.  Blob fields are read unit by unit (:func:`decode_fields`)."""
    if any(blob_kind(f) for f in fields):
        for unit, table in zip(units, decode_fields(ds, units, fields, physical), strict=True):
            yield [unit], table
        return
    yield from CpuExecutor().decode_groups(ds, units, fields, ahead, physical)


def _with_blob_bytes(tables: Iterator[pa.Table], units: Sequence[ReadUnit], fields: Sequence[LanceField]) -> Iterator[pa.Table]:
    """Each unit's table with its blob fields' bytes added, in ``fields`` order."""

    for unit, table in zip(units, tables, strict=True):
        rows = unit.rows if unit.rows is not None else np.arange(unit.fragment.physical_rows, dtype=np.int64)
        columns = [read_blob_bytes(unit.fragment, f, rows) if blob_kind(f) else table.column(f.name) for f in fields]
        yield pa.Table.from_arrays(columns, names=[f.name for f in fields])


def _refuse_blob_rewrite(fields: Sequence[LanceField]) -> None:
    """Scans read a blob field as its descriptors, which a writer must not copy (nor a
    delete predicate judge) as the field's data: refused until the writers move blob bytes."""
    blobs = [f.name for f in fields if blob_kind(f)]
    if blobs:
        msg = (f"rewriting or deleting by blob column(s) {', '.join(map(repr, blobs))} is not supported yet "
               "(lance-gpu reads only their descriptors)")
        raise UnsupportedFeatureError(msg)
