# SPDX-License-Identifier: Apache-2.0
"""Exact nearest-neighbour search on the GPU (``nearest=`` with ``device="gpu"``).

The vector column is read by the GPU read path (:meth:`GpuExecutor.run_device
<lance_gpu.scan.execute.GpuExecutor.run_device>`: pages staged and decoded on the device,
deleted rows and -- with ``prefilter=True`` -- the filter's rejects dropped there) in
*windows* of rows, each window sized so that its decoded vectors plus its ``(queries, rows)``
distance tile and keys take at most a quarter of the device memory budget
(:func:`lance_gpu.gpu.memory.memory_budget`), while the decode stages its pages within half of
it: data larger than device memory streams through in passes, one window at a time.  Per window, :func:`cuda_kernels.distance.distance_tile_gpu`
computes the distances and :func:`cuda_kernels.distance.topk_merge_gpu` merges them into the
running top-k kept on the device; the vectors never come to the host.  At the end the
``queries x k`` keys and row addresses are copied back and handed to the CPU path's epilogue
(post-filter, ``limit`` / ``offset``, the projected columns of the winning rows).

A multivector column (a list of vectors per row) is scored vector by vector in the same tile
kernel, then :func:`cuda_kernels.distance.segment_min_sum_gpu` gives each row the sum, over the
query's vectors, of the distance to its nearest vector (one query, as pylance's flat search).

Ties break in row-address order as on the CPU: each window's rows get ``seq`` numbers that
follow row-address order across the whole scan (windows ranked by their first address), so
the device's unique ``(distance, seq)`` keys order rows as ``(distance, address)``.  A scan
of more than ``2**32`` rows (``seq`` no longer fits the key) is refused.

The distances are those of the CPU path (same formulas, float32 accumulation; float64 for
float64 vectors), so results agree with it and with pylance to float tolerance.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from cuda_kernels.distance import TopKState, distance_tile_gpu, keys_to_distances, segment_min_sum_gpu, topk_merge_gpu
from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.gpu import _array, memory
from lance_gpu.gpu.columns import DeviceColumn
from lance_gpu.gpu.device_table import DeviceTable
from lance_gpu.scan.execute import _Offsets, plan_units
from lance_gpu.scan.nearest_query import column_type
from lance_gpu.scan.plan import ROW_ADDR, ROW_OFFSET, resolve

if TYPE_CHECKING:
    from lance_gpu.scan.execute import Executor, ReadUnit
    from lance_gpu.scan.nearest_query import NearestQuery
    from lance_gpu.scan.plan import ScanPlan
    from lance_gpu.table.snapshot import TableSnapshot

#: fraction of the device memory budget one window (vectors + distances + keys) may take
WINDOW_SHARE = 4
#: fewest rows of a window (unless the scan has fewer)
MIN_WINDOW_ROWS = 1024
#: vectors per row assumed when sizing windows of a multivector column
MULTIVECTOR_ROW_VECTORS = 8


def window_rows(row_bytes: int, num_queries: int, k: int, budget: int) -> int:
    """Rows per window: decoded vectors (``row_bytes`` each), float32 distances and uint64
    keys of every query (plus the staging estimate of the decode, twice the values) within
    ``budget / WINDOW_SHARE`` bytes; at least :data:`MIN_WINDOW_ROWS`."""
    per_row = 3 * row_bytes + num_queries * (4 + 8) + 16
    fixed = num_queries * k * 8 * 4
    return max(MIN_WINDOW_ROWS, (budget // WINDOW_SHARE - fixed) // per_row)


def _seq_bases(units: list[ReadUnit]) -> list[int]:
    """Per unit, the ``seq`` of its first row: units ranked by their first row address, each
    taking as many numbers as it has rows (a filter keeps a subset, in order)."""
    def first_addr(u: ReadUnit) -> int:
        first = 0 if u.rows is None or not u.rows.size else int(u.rows[0])
        return (u.fragment.fragment_id << 32) | first

    order = sorted(range(len(units)), key=lambda i: first_addr(units[i]))
    bases = [0] * len(units)
    at = 0
    for i in order:
        bases[i] = at
        at += units[i].num_rows
    if at > 1 << 32:
        raise UnsupportedFeatureError(f"nearest on the GPU: {at} rows to search, over the 2**32 one search takes")
    return bases


def _device_vectors(col: Any, dim: int, dtype: np.dtype) -> tuple[Any, Any]:
    """``(rows, dim)`` device vectors of a decoded column and its device validity (None: no
    nulls); a column the CPU reader decoded (an Arrow array) is uploaded, nulls inside a
    vector as 0."""

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not isinstance(col, DeviceColumn):
        values = col.values.slice(col.offset * dim, len(col) * dim)
        if values.null_count:
            values = values.fill_null(0)
        col = DeviceColumn.from_arrow(pa.FixedSizeListArray.from_arrays(values, dim, mask=col.is_null() if col.null_count else None))
    n = col.length
    raw = col.data[: n * dim * dtype.itemsize]
    vectors = _array.as_device(raw).view(dtype).reshape(n, dim) if n else _array.empty(0, dtype).reshape(0, dim)
    validity = col.validity.bytes() if col.validity is not None and col.null_count else None
    return vectors, validity


def _device_multivectors(col: Any, dim: int, dtype: np.dtype) -> tuple[Any, Any, Any, Any]:
    """A multivector (list of fixed-size-list) column on the device: its ``(vectors, dim)``
    values, their validity (a null vector inside a row counts as a zero vector, as pylance),
    int64 row offsets into them and the rows' validity (None: no nulls); a column the CPU
    reader decoded is uploaded, nulls inside a vector as 0."""

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not isinstance(col, DeviceColumn):
        child = col.values
        if child.values.null_count:
            inner = child.values.slice(child.offset * dim, len(child) * dim).fill_null(0)
            child = pa.FixedSizeListArray.from_arrays(inner, dim, mask=child.is_null() if child.null_count else None)
        col = DeviceColumn.from_arrow(pa.ListArray.from_arrays(col.offsets, child, mask=col.is_null() if col.null_count else None))
    vectors, inner = _device_vectors(col.children[0], dim, dtype)
    validity = col.validity.bytes() if col.validity is not None and col.null_count else None
    return vectors, inner, col.offsets, validity


def search_device(plan: ScanPlan, ds: TableSnapshot, executor: Executor, nq: NearestQuery, q: np.ndarray,
                  distance_range: tuple[float | None, float | None] = (None, None)) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query, ``(distances float64, row addresses uint64)`` of its ``k`` nearest rows in
    ``(distance, address)`` order, searched on the GPU over the rows ``plan`` reads (its
    filter applied first when ``nq.prefilter``); ``q``: the queries in the element type the
    distances take (float32 for float16 vectors); ``distance_range``: ``lower <= d < upper``."""

    run_device = getattr(executor, "run_device", None)
    if run_device is None:
        raise TypeError(f"search_device needs the GPU executor, not {type(executor).__name__}")
    dim = int(q.shape[1])
    scan = replace(plan, columns=((nq.column, None),), filter=plan.filter if nq.prefilter else None,
                   with_row_id=False, with_row_address=True, limit=None, offset=0, nearest=None,
                   window_pushed=False, late_materialization=None)
    resolved = resolve(scan, ds)
    stored = _stored_dtype(ds, nq.column)
    budget = memory.memory_budget()
    # a multivector query is one query (its vectors are scored apart, then summed per row)
    queries = 1 if nq.multivector else q.shape[0]
    per_row = MULTIVECTOR_ROW_VECTORS * (dim * stored.itemsize + 4 * q.shape[0]) if nq.multivector else dim * stored.itemsize
    window = window_rows(per_row, queries, nq.k, budget)
    units = plan_units(scan, ds, window)
    bases = _seq_bases(units)
    offsets = _Offsets(ds) if ROW_OFFSET in resolved.virtual else None
    d_q = _array.upload(np.ascontiguousarray(q))
    state = TopKState(queries, nq.k)
    lower, upper = distance_range
    # units' distance tiles gather in one (queries, window) buffer, merged when it is full
    tile = _array.empty(queries * window, np.float32).reshape(queries, window)
    filled = 0
    addrs: list[np.ndarray] = []
    seqs: list[np.ndarray] = []

    def merge() -> None:
        nonlocal filled
        if filled:
            payload = _array.upload(np.concatenate(addrs).astype(np.uint64, copy=False))
            seq = _array.upload(np.concatenate(seqs).astype(np.uint32, copy=False))
            topk_merge_gpu(state, tile, payload, seq, lower, upper, rows=filled)
        filled = 0
        addrs.clear()
        seqs.clear()

    # the decode plans its staging within half the budget, the search's windows take a quarter
    with _array.legacy_stream(), memory.memory_limit(max(1, budget // 2)):
        for base, dt in zip(bases, run_device(ds, units, resolved, offsets), strict=True):
            n = dt.num_rows
            if not n:
                continue
            if filled + n > window:
                merge()
            if nq.multivector:
                vectors, inner, row_offsets, validity = _device_multivectors(dt.column(nq.column), dim, stored)
                per_vector = distance_tile_gpu(vectors, d_q, nq.metric, inner, null_as_zero=True)
                segment_min_sum_gpu(per_vector, row_offsets, tile[:, filled:filled + n], validity)
                del per_vector, row_offsets
            else:
                vectors, validity = _device_vectors(dt.column(nq.column), dim, stored)
                distance_tile_gpu(vectors, d_q, nq.metric, validity, out=tile[:, filled:filled + n])
            del vectors, validity
            addrs.append(dt.column(ROW_ADDR).to_numpy(zero_copy_only=False))  # a virtual column: host Arrow
            seqs.append(np.arange(base, base + n, dtype=np.int64))
            filled += n
        merge()
        _array.sync_kernels()
    out = []
    for keys, payload in state.to_host():
        out.append((keys_to_distances(keys).astype(np.float64), payload.astype(np.uint64)))
    return out


def _stored_dtype(ds: TableSnapshot, column: str) -> np.dtype:
    """The element type the vectors of ``column`` have in device memory (float16 vectors are
    searched as stored, accumulated in float32)."""

    ftype = column_type(ds, column)
    if isinstance(ftype, pa.ListType):  # multivectors
        ftype = ftype.value_type
    assert isinstance(ftype, pa.FixedSizeListType)
    return np.dtype(ftype.value_type.to_pandas_dtype())


def device_result(table: pa.Table) -> DeviceTable:
    """A search's result as one :class:`~lance_gpu.gpu.device_table.DeviceTable` (the
    ``to_device_batches`` / ``to_cudf`` / ``to_cupy`` way out): the search ran on the device
    (:func:`lance_gpu.scan.nearest.run_search` with the GPU executor), its ``queries x k``
    rows (``_distance``, ``query_index`` and the projected columns of the winning rows) are
    uploaded as device columns."""
    columns = [DeviceColumn.from_arrow(table.column(i)) for i in range(table.num_columns)]
    return DeviceTable(table.column_names, columns, table.num_rows)
