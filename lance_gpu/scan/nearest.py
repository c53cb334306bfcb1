# SPDX-License-Identifier: Apache-2.0
"""Exact nearest-neighbour search (``nearest=`` of pylance's scanner), on the CPU.

The ``nearest`` mapping is checked when the plan is built
(:func:`lance_gpu.scan.nearest_query.parse_nearest`: a plain ``NearestQuery`` kept in the
:class:`~lance_gpu.scan.plan.ScanPlan`).  :func:`run_search` runs a plan that has one: the k nearest rows of each query come from a
vector index on the column (:mod:`lance_gpu.scan.vector_index`) or from scoring every vector
(:mod:`lance_gpu.scan.flat_search` on the host, :mod:`lance_gpu.scan.nearest_device` on the
GPU: the vector column decoded in windows, with the plan's filter when ``prefilter=True``);
the other projected columns are then read for the winning rows only (with the filter, when it
is a post-filter, which may leave fewer than ``k`` rows).  Modules depend one way:
``nearest -> nearest_device / vector_index -> flat_search -> plan -> nearest_query``.

As pylance without an index: ``l2`` is the squared Euclidean distance, ``cosine`` is
``1 - cos``, ``dot`` is ``1 - x.q``, ``hamming`` (uint8 vectors only) counts differing bits;
``_distance`` is float32, ascending, ties in row-address order.
Several queries (a 2-D ``q``) give ``k`` rows each, tagged by a leading ``query_index``.

With a vector index on the column (and ``use_index`` not False) its knobs
(``nprobes`` / ``minimum_nprobes`` / ``maximum_nprobes``, ``refine_factor``) are checked in
:mod:`lance_gpu.scan.nearest_query` and used by :mod:`lance_gpu.scan.vector_index`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lance_gpu.scan.flat_search import read_rows, search_host
from lance_gpu.scan.nearest_device import search_device
from lance_gpu.scan.nearest_query import _FLOAT_TYPES, DISTANCE, QUERY_INDEX, column_type
from lance_gpu.scan.plan import resolve
from lance_gpu.scan.vector_index import indexed_search

if TYPE_CHECKING:
    from lance_gpu.scan.execute import Executor
    from lance_gpu.scan.plan import ScanPlan
    from lance_gpu.table.snapshot import TableSnapshot

# --------------------------------------------------------------------------------------------
# Running a plan with ``nearest``
# --------------------------------------------------------------------------------------------


def run_search(plan: ScanPlan, ds: TableSnapshot, executor: Executor) -> pa.Table:
    """The result of a plan with a ``nearest`` query (see the module docstring); with the
    GPU executor the search itself runs on the device (:mod:`lance_gpu.scan.nearest_device`)."""
    nq = plan.nearest
    assert nq is not None
    resolved = resolve(plan, ds)
    ftype = column_type(ds, nq.column)
    vtype = ftype.value_type if nq.multivector else ftype  # type: ignore[union-attr]
    assert isinstance(vtype, pa.FixedSizeListType)
    if vtype.value_type == pa.uint8():
        dtype: Any = np.uint8
        q = np.clip(np.rint(nq.q), 0, 255).astype(np.uint8) if nq.q.dtype != np.uint8 else nq.q
    else:
        dtype = _FLOAT_TYPES[vtype.value_type]
        q = nq.q.astype(dtype)

    # 1. the k nearest rows of each query: (distances, row addresses) in (distance, address) order,
    #    from a vector index on the column, else by scoring every vector
    found = indexed_search(plan, ds, executor, q) if nq.use_index else None
    if found is None and getattr(executor, "name", "") == "gpu":
        found = search_device(plan, ds, executor, nq, q, nq.distance_range)
    elif found is None:
        found = search_host(plan, ds, executor, nq, q, dtype, vtype.list_size)

    # 2. the (query, row, distance) results, in distance order per query
    qcol = np.concatenate([np.full(a.size, j, dtype=np.int32) for j, (_d, a) in enumerate(found)])
    addrs = np.concatenate([a for _d, a in found])
    dist = np.concatenate([d for d, _a in found]).astype(np.float32)
    if plan.filter is not None and not nq.prefilter and resolved.filter is not None:
        # post-filter: judge each result on its row's columns and its own _distance
        compiled = resolved.filter
        names = [c for c in compiled.columns if c != DISTANCE]
        names += [c for c in compiled.virtual_columns if c not in names]
        rows = read_rows(plan, ds, executor, addrs, tuple((c, None) for c in names))
        if DISTANCE in compiled.columns:
            rows = rows.append_column(pa.field(DISTANCE, pa.float32()), pa.array(dist, type=pa.float32()))
        keep = compiled.positions(rows)
        qcol, addrs, dist = qcol[keep], addrs[keep], dist[keep]
    stop = None if plan.limit is None else plan.offset + plan.limit
    qcol, addrs, dist = qcol[plan.offset:stop], addrs[plan.offset:stop], dist[plan.offset:stop]

    # 3. the projected columns of those rows only
    fetch_cols = None if plan.columns is None else tuple(
        (n, e) for n, e in plan.columns if not (e is None and n in (DISTANCE, QUERY_INDEX)))
    needs_rows = any(o.virtual not in (DISTANCE, QUERY_INDEX) for o in resolved.outputs)
    fetched = read_rows(plan, ds, executor, addrs, fetch_cols) if needs_rows else None
    columns: list[pa.Array | pa.ChunkedArray] = []
    for out in resolved.outputs:
        if out.virtual == DISTANCE:
            columns.append(pa.array(dist, type=pa.float32()))
        elif out.virtual == QUERY_INDEX:
            columns.append(pa.array(qcol, type=pa.int32()))
        else:
            assert fetched is not None
            columns.append(fetched.column(out.name))
    return pa.Table.from_arrays(columns, schema=resolved.schema)
