# SPDX-License-Identifier: Apache-2.0
"""Exact (flat) k-nearest search on the host: scoring decoded vectors against the queries and
keeping a running top-k, and reading the rows found.

Shared by :mod:`lance_gpu.scan.nearest` (a search without an index) and
:mod:`lance_gpu.scan.vector_index` (rows an index does not cover, refinement reads); it imports
neither of them, so the dependency goes one way: ``nearest -> vector_index -> flat_search``.

Distances as pylance's flat search: ``l2`` is the squared Euclidean distance, ``cosine`` is
``1 - cos``, ``dot`` is ``1 - x.q``, ``hamming`` (uint8 vectors only) counts differing bits;
kept as float32, ties in row-address order (:class:`TopK`); null vectors are skipped, null
values inside a vector count as 0, a zero vector has no cosine distance (skipped).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lance_gpu.scan.execute import concat, run_plan
from lance_gpu.scan.plan import ROW_ADDR, resolve

if TYPE_CHECKING:
    from lance_gpu.scan.execute import Executor
    from lance_gpu.scan.nearest_query import NearestQuery
    from lance_gpu.scan.plan import ScanPlan
    from lance_gpu.table.snapshot import TableSnapshot

#: rows of vectors scored per matrix product
BLOCK_ROWS = 65536


def _vectors(arr: pa.Array | pa.ChunkedArray, dim: int, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, dim)`` values of the non-null vectors (nulls inside a vector as 0) and the
    mask of the rows kept."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if isinstance(arr, pa.ExtensionArray):  # fixed_shape_tensor: its fixed-size-list storage
        arr = arr.storage
    n = len(arr)
    values = arr.values.slice(arr.offset * dim, n * dim)
    if values.null_count:
        values = values.fill_null(0)
    flat = values.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    mat = flat.reshape(n, dim)
    if arr.null_count:
        keep = arr.is_valid().to_numpy(zero_copy_only=False)
        return mat[keep], keep
    return mat, np.ones(n, dtype=bool)


def _scores(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """``(queries, rows)`` distances (l2 by the expanded form: a ranking, refined later)."""
    if metric == "hamming":
        out = np.empty((q.shape[0], x.shape[0]), dtype=np.float32)
        for j in range(q.shape[0]):
            out[j] = np.unpackbits(np.bitwise_xor(x, q[j]), axis=1).sum(axis=1, dtype=np.int64)
        return out
    prod = q @ x.T
    if metric == "dot":
        np.subtract(1, prod, out=prod)
        return prod
    if metric == "cosine":
        norms = np.sqrt(np.einsum("ij,ij->i", x, x))
        qn = np.sqrt(np.einsum("ij,ij->i", q, q))
        with np.errstate(divide="ignore", invalid="ignore"):
            prod /= qn[:, None]
            prod /= norms[None, :]
        np.subtract(1, prod, out=prod)
        return prod
    prod *= -2
    prod += np.einsum("ij,ij->i", x, x)[None, :]
    prod += np.einsum("ij,ij->i", q, q)[:, None]
    return prod


class TopK:
    """The ``k`` smallest distances seen for one query, ties in row-address order."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.dist = np.empty(0, dtype=np.float64)
        self.addr = np.empty(0, dtype=np.uint64)

    def push(self, dist: np.ndarray, addr: np.ndarray) -> None:
        dist = np.concatenate([self.dist, dist])
        addr = np.concatenate([self.addr, addr])
        order = np.lexsort((addr, dist))[: self.k]
        self.dist, self.addr = dist[order], addr[order]


def _l2_error_bound(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Per query, a bound on |expanded - exact| of the l2 ranking over the block ``x``: each of
    ``|x|^2``, ``2 x.q`` and ``|q|^2`` is a sum of ``dim`` products, so off by at most about
    ``dim * eps`` of ``(|x| + |q|)^2`` (doubled for safety)."""
    eps = float(np.finfo(x.dtype).eps)
    max_norm = float(np.sqrt(np.nanmax(np.einsum("ij,ij->i", x, x))))  # NaN rows are dropped anyway
    qn = np.sqrt(np.einsum("ij,ij->i", q, q).astype(np.float64))
    return 2.0 * x.shape[1] * eps * (max_norm + qn) ** 2


def _score_block(x: np.ndarray, addr: np.ndarray, q: np.ndarray, metric: str, tops: list[TopK]) -> None:
    scores = _scores(x, q, metric)
    bound = _l2_error_bound(x, q) if metric == "l2" else None
    for j, top in enumerate(tops):
        col = scores[j]
        ok = ~np.isnan(col)
        if metric == "l2" and not ok.all():
            # inf - inf in the expanded form: the exact distance may still be a number (inf)
            bad = np.flatnonzero(~ok)
            diff = x[bad] - q[j]
            col[bad] = np.einsum("ij,ij->i", diff, diff)
            ok = ~np.isnan(col)
        if not ok.all():
            idx_all = np.flatnonzero(ok)
            col = col[idx_all]
        else:
            idx_all = None
        # candidates by the fast ranking (with slack), then exact distances (l2: by differences)
        want = min(col.size, 2 * top.k + 8)
        if want == 0:
            continue
        cand = np.argpartition(col, want - 1)[:want] if want < col.size else np.arange(col.size)
        if bound is not None and want < col.size:
            # a row left out ranks at or above the want-th expanded distance; if that is not
            # clearly past the k-th exact distance of the candidates, take every row that
            # could still be among the k nearest
            rows = cand if idx_all is None else idx_all[cand]
            diff = x[rows] - q[j]
            exact = np.sort(np.einsum("ij,ij->i", diff, diff))
            kth = float(exact[min(top.k, exact.size) - 1])
            if float(col[cand].max()) - bound[j] <= kth:
                cand = np.flatnonzero(col <= kth + bound[j])
        rows = cand if idx_all is None else idx_all[cand]
        if metric == "l2":
            diff = x[rows] - q[j]
            dist = np.einsum("ij,ij->i", diff, diff)
        else:
            dist = col[cand]
        top.push(dist.astype(np.float32).astype(np.float64), addr[rows])


def search_host(plan: ScanPlan, ds: TableSnapshot, executor: Executor, nq: NearestQuery, q: np.ndarray,
                 dtype: Any, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query, ``(distances, row addresses)`` of its k nearest rows, scored on the host
    (the vectors decoded by ``executor``), window by window."""
    tops = [TopK(nq.k) for _ in range(1 if nq.multivector else q.shape[0])]
    # rows per matrix product: the (queries, rows) scores stay under 2**24 values
    block = min(BLOCK_ROWS, max(1024, 2**24 // q.shape[0]))
    scan = replace(plan, columns=((nq.column, None),), filter=plan.filter if nq.prefilter else None,
                   with_row_id=False, with_row_address=True, limit=None, offset=0, nearest=None,
                   window_pushed=False, late_materialization=None)
    for table in run_plan(scan, executor, ds, window=BLOCK_ROWS, ahead=plan.fragment_readahead or 1):
        if not table.num_rows:
            continue
        addr_all = table.column(ROW_ADDR).to_numpy().astype(np.uint64, copy=False)
        vec = table.column(nq.column)
        # blocks never cross a fragment (a table may be a span of many small ones): the
        # scores' rounding, and so the order of near-ties, stays that of a block of one fragment
        frag_of = addr_all >> np.uint64(32)
        edges = [0, *(np.flatnonzero(frag_of[1:] != frag_of[:-1]) + 1).tolist(), table.num_rows]
        starts = [(a, min(a + block, e)) for s_, e in itertools.pairwise(edges) for a in range(s_, e, block)]
        for start, stop in starts:
            if nq.multivector:
                dist, keep = _multivector_distances(vec.slice(start, stop - start), q, nq.metric, dim, dtype)
                _push_in_range(tops[0], dist, addr_all[start:stop][keep], nq.distance_range)
                continue
            x, keep = _vectors(vec.slice(start, stop - start), dim, dtype)
            if not x.shape[0]:
                continue
            if nq.distance_range != (None, None):
                _score_block_exact(x, addr_all[start:stop][keep], q, nq.metric, tops, nq.distance_range)
            else:
                _score_block(x, addr_all[start:stop][keep], q, nq.metric, tops)
    return [(t.dist, t.addr) for t in tops]


def _push_in_range(top: TopK, dist: np.ndarray, addr: np.ndarray, distance_range: tuple[float | None, float | None]) -> None:
    """Push the rows whose float32 distance is a number inside ``[lower, upper)`` (only those
    that can still be among the k nearest)."""
    d32 = dist.astype(np.float32)
    ok = ~np.isnan(d32)
    lower, upper = distance_range
    if lower is not None:
        ok &= d32 >= np.float32(lower)
    if upper is not None:
        ok &= d32 < np.float32(upper)
    d32, addr = d32[ok], addr[ok]
    if d32.size > top.k:
        kth = np.partition(d32, top.k - 1)[top.k - 1]
        near = d32 <= kth
        d32, addr = d32[near], addr[near]
    top.push(d32.astype(np.float64), addr)


def _score_block_exact(x: np.ndarray, addr: np.ndarray, q: np.ndarray, metric: str, tops: list[TopK],
                       distance_range: tuple[float | None, float | None]) -> None:
    """As :func:`_score_block` with a distance range: every row's exact distance is judged
    against the range before the k nearest are taken."""
    scores = _scores(x, q, metric)
    for j, top in enumerate(tops):
        if metric == "l2":
            diff = x - q[j]
            dist = np.einsum("ij,ij->i", diff, diff)
        else:
            dist = scores[j]
        _push_in_range(top, dist, addr, distance_range)


def _multivector_distances(arr: pa.Array | pa.ChunkedArray, q: np.ndarray, metric: str, dim: int,
                           dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Multivector distances of a window of rows (each a list of vectors) to one query of
    ``q.shape[0]`` vectors, as pylance's flat multivector search: for every query vector the
    distance to the row's nearest vector, summed over the query vectors (l2 squared, cosine
    ``1 - cos``, dot ``1 - x.q``, hamming; a null vector inside a row is a zero vector, as
    pylance).  Returns the distances of the rows kept (not null, not empty) and their mask."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    offsets = arr.offsets.to_numpy().astype(np.int64)
    lengths = np.diff(offsets)
    keep = lengths > 0
    if arr.null_count:
        keep &= arr.is_valid().to_numpy(zero_copy_only=False)
    flat = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    # every vector of the rows, a null vector (or null value) as zeros, as pylance
    values = flat.values.slice(flat.offset * dim, len(flat) * dim)
    if values.null_count:
        values = values.fill_null(0)
    x = values.to_numpy(zero_copy_only=False).astype(dtype, copy=False).reshape(len(flat), dim)
    if not keep.any():
        return np.empty(0, np.float64), keep
    if metric == "l2":  # float64 products: the expanded l2 form stays within float32 rounding
        x, q = x.astype(np.float64), q.astype(np.float64)
    per_vector = _scores(x, q, metric)  # (query vectors, row vectors)
    if metric == "l2":
        np.maximum(per_vector, 0, out=per_vector)
    starts = (offsets[:-1] - offsets[0])[keep]
    per_row = np.minimum.reduceat(per_vector, starts, axis=1)  # nearest vector of each row
    dist = per_row.sum(axis=0, dtype=np.float64)
    return dist, keep


def read_rows(plan: ScanPlan, ds: TableSnapshot, executor: Executor, addrs: np.ndarray,
               columns: tuple[tuple[str, str | None], ...] | None) -> pa.Table:
    """``columns`` of the rows at row addresses ``addrs`` (repeats allowed), in that order: one
    plan reading each row once, with ``plan``'s ``with_row_id`` / ``with_row_address``."""
    unique = np.unique(addrs)
    frag_of = (unique >> np.uint64(32)).astype(np.int64)
    offsets = (unique & np.uint64(0xFFFFFFFF)).astype(np.int64)
    ids = [fid for fid in plan.fragment_ids if np.any(frag_of == fid)]
    cols = columns
    if cols is not None and not plan.with_row_address and not any(n == ROW_ADDR for n, _e in cols):
        cols = (*cols, (ROW_ADDR, None))
    fetch = replace(plan, fragment_ids=tuple(ids), selections=tuple(offsets[frag_of == fid] for fid in ids),
                    columns=cols, filter=None, with_row_address=True, limit=None, offset=0, nearest=None,
                    window_pushed=False, options={})
    resolved = resolve(fetch, ds)
    table = concat(list(run_plan(fetch, executor, ds)), resolved.schema) if ids else resolved.schema.empty_table()
    got = table.column(ROW_ADDR).to_numpy().astype(np.uint64)
    order = np.argsort(got, kind="stable")
    pos = order[np.searchsorted(got[order], addrs)]
    return table.take(pa.array(pos, type=pa.int64()))
