# SPDX-License-Identifier: Apache-2.0
"""Exact nearest-neighbour search (``nearest=`` of pylance's scanner), on the CPU.

:func:`parse_nearest` checks the ``nearest`` mapping the way pylance 14 does and returns a
:class:`NearestQuery` (a plain value kept in the :class:`~lance_gpu.scan.plan.ScanPlan`).
:func:`run_search` runs a plan that has one: the vector column is decoded (with the plan's
filter when ``prefilter=True``) in windows, distances of each window to the queries come from
one matrix product, and a running top-k per query is kept with ``np.argpartition``; the other
projected columns are then read for the winning rows only (with the filter, when it is a
post-filter, which may leave fewer than ``k`` rows).

As pylance without an index: ``l2`` is the squared Euclidean distance, ``cosine`` is
``1 - cos``, ``dot`` is ``1 - x.q``, ``hamming`` (uint8 vectors only) counts differing bits;
``_distance`` is float32, ascending, ties in row-address order; null vectors are skipped,
null values inside a vector count as 0, a zero vector has no cosine distance (skipped).
Several queries (a 2-D ``q``) give ``k`` rows each, tagged by a leading ``query_index``.

With a vector index on the column (and ``use_index`` not False), the candidates come from the
index instead: :mod:`lance_gpu.scan.vector_index` (``nprobes``, ``refine_factor``, rows the
index does not cover searched exactly here and merged).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lance_gpu.errors import (
    ArgumentTypeError,
    EmptyQueryError,
    InvalidArgumentError,
    QueryShapeError,
)

if TYPE_CHECKING:
    from lance_gpu.scan.execute import Executor
    from lance_gpu.scan.plan import ScanPlan
    from lance_gpu.table.snapshot import TableSnapshot

DISTANCE = "_distance"
QUERY_INDEX = "query_index"
DEFAULT_K = 10
#: metric names pylance accepts (lower-cased) -> ours
METRICS = {"l2": "l2", "euclidean": "l2", "cosine": "cosine", "dot": "dot", "hamming": "hamming"}
#: keys of pylance's ``nearest`` mapping that tune its index search only (no effect exact)
_INDEX_KEYS = frozenset({"nprobes", "minimum_nprobes", "maximum_nprobes", "refine_factor", "use_index", "ef"})
_FLOAT_TYPES = {pa.float16(): np.float32, pa.float32(): np.float32, pa.float64(): np.float64}
#: rows of vectors scored per matrix product
BLOCK_ROWS = 65536


@dataclass(frozen=True, eq=False)
class NearestQuery:
    """A checked ``nearest`` request: ``q`` is ``(queries, dim)``; ``single``: ``q`` was 1-D
    (no ``query_index`` column)."""

    column: str
    q: np.ndarray
    single: bool
    k: int
    metric: str
    prefilter: bool = False
    #: ``(lower, upper)``: only rows with ``lower <= distance < upper`` (None: unbounded)
    distance_range: tuple[float | None, float | None] = (None, None)
    #: the column holds multivectors (list of vectors); ``q`` is then one query's vectors
    multivector: bool = False
    #: a vector index on the column may answer (``use_index``); its knobs, see
    #: :mod:`lance_gpu.scan.vector_index`
    use_index: bool = True
    metric_given: bool = False
    minimum_nprobes: int | None = None
    maximum_nprobes: int | None = None
    refine_factor: int | None = None

    def describe(self) -> str:
        mode = "prefilter" if self.prefilter else "postfilter"
        extra = "" if self.distance_range == (None, None) else f", distance_range={self.distance_range}"
        kind = "multivector, " if self.multivector else ""
        return (f"  nearest: column={self.column}, queries={self.q.shape[0]}, dim={self.q.shape[1]}, "
                f"k={self.k}, metric={self.metric}, {kind}{'index if any' if self.use_index else 'exact (flat)'}, "
                f"{mode}{extra}")


def parse_nearest(ds: TableSnapshot, nearest: Any, prefilter: Any = None, include_deleted_rows: Any = None) -> NearestQuery:
    """Check pylance's ``nearest`` mapping against ``ds`` (the errors pylance raises: a
    ``TypeError`` for a missing / unexpected key, a non-integer ``k`` or a non-vector column;
    a ``ValueError`` for ``k <= 0``, an unknown metric, an absent column, a query of another
    dimension, an element type the metric does not take, or ``include_deleted_rows``)."""
    if not isinstance(nearest, Mapping):
        raise ArgumentTypeError(f"nearest must be a mapping, not {type(nearest).__name__}")
    for key in nearest:
        if key not in ("column", "q", "k", "metric", "distance_range") and key not in _INDEX_KEYS:
            raise ArgumentTypeError(f"nearest() got an unexpected keyword argument {key!r}")
    for key in ("column", "q"):
        if key not in nearest:
            raise ArgumentTypeError(f"nearest() missing 1 required positional argument: {key!r}")
    distance_range = _distance_range(nearest.get("distance_range"))
    column = nearest["column"]
    if not isinstance(column, str):
        raise ArgumentTypeError(f"nearest column must be a str, not {type(column).__name__}")
    k = nearest.get("k")
    if k is None:
        k = DEFAULT_K
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ArgumentTypeError(f"{type(k).__name__!r} object cannot be interpreted as an integer")
    if k <= 0:
        raise InvalidArgumentError(f"Nearest-K must be > 0 but got {int(k)}")
    metric_arg = nearest.get("metric")
    metric_name = "l2" if metric_arg is None else str(metric_arg)
    metric = METRICS.get(metric_name.lower())
    if metric is None:
        raise InvalidArgumentError(f"Metric type {metric_name!r} is not supported")
    ftype = column_type(ds, column)
    if ftype is None:
        raise InvalidArgumentError(f"Embedding column {column} is not in the dataset")
    multivector = pa.types.is_list(ftype) and pa.types.is_fixed_size_list(ftype.value_type)
    vtype = ftype.value_type if multivector else ftype
    if not pa.types.is_fixed_size_list(vtype):
        raise ArgumentTypeError(f"Query column {column} must be a vector. Got {ftype}.")
    dim = vtype.list_size
    elem = vtype.value_type
    q = _query_array(nearest["q"])
    if q.shape[-1] != dim:
        raise InvalidArgumentError(f"Query vector size {q.shape[-1]} does not match index column size {dim}")
    if elem == pa.uint8():
        if metric != "hamming":
            raise InvalidArgumentError(f"Distance type {metric} does not support UInt8 vectors (column {column})")
    elif elem in _FLOAT_TYPES:
        if metric == "hamming":
            raise InvalidArgumentError(f"Distance type hamming does not support {elem} vectors (column {column}); "
                                       "it needs uint8 vectors")
    else:
        raise InvalidArgumentError(f"Column {column} has element type {elem} and the query vector is float32: "
                                   "only float16/float32/float64 and uint8 vectors can be searched")
    if prefilter is not None and not isinstance(prefilter, (bool, np.bool_)):
        raise ArgumentTypeError(f"argument 'prefilter': {type(prefilter).__name__!r} object is not an instance of 'bool'")
    if include_deleted_rows:
        raise InvalidArgumentError("Cannot include deleted rows in a nearest neighbor search")
    # a multivector query is one query of several vectors (one result set, no query_index)
    single = q.ndim == 1 or multivector
    q2 = q.reshape(-1, dim)
    from lance_gpu.scan.vector_index import parse_index_options

    return NearestQuery(column, q2, single, int(k), metric, bool(prefilter), distance_range, multivector,
                        metric_given=metric_arg is not None, **parse_index_options(nearest))


def _distance_range(value: Any) -> tuple[float | None, float | None]:
    """pylance's ``distance_range``: a tuple ``(lower, upper)`` of numbers or None."""
    if value is None:
        return (None, None)
    if isinstance(value, list):
        raise InvalidArgumentError("'list' object is not an instance of 'tuple'")
    if not isinstance(value, tuple) or len(value) != 2:
        raise InvalidArgumentError("distance_range must be a tuple of (lower_bound, upper_bound)")
    bounds: list[float | None] = []
    for bound in value:
        if bound is None:
            bounds.append(None)
        elif isinstance(bound, (int, float, np.integer, np.floating)):
            bounds.append(float(np.float32(bound)))
        else:
            raise ArgumentTypeError(f"distance_range bounds must be real numbers or None, not {type(bound).__name__}")
    return (bounds[0], bounds[1])


def column_type(ds: TableSnapshot, column: str) -> pa.DataType | None:
    """The type of a top-level column or of a struct field named by a dotted path (None: absent)."""
    if column in ds.schema.names:
        return ds.schema.field(column).type
    parts = column.split(".")
    if parts[0] not in ds.schema.names:
        return None
    typ = ds.schema.field(parts[0]).type
    for part in parts[1:]:
        if not pa.types.is_struct(typ) or typ.get_field_index(part) < 0:
            return None
        typ = typ.field(part).type
    return typ


def _query_array(value: Any) -> np.ndarray:
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        value = value.to_numpy(zero_copy_only=False)
    if isinstance(value, (list, tuple)) and value and not np.isscalar(value[0]):
        sizes = [np.size(v) for v in value]
        if len(set(sizes)) > 1:
            other = next(n for n in sizes if n != sizes[0])
            raise InvalidArgumentError(f"All query vectors must have the same length, but got {sizes[0]} and {other}")
    try:
        if isinstance(value, (list, tuple)) and value and not np.isscalar(value[0]):
            q = np.stack([np.asarray(v) for v in value])
        else:
            q = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"nearest q must be a vector or a list of vectors: {exc}") from None
    if not (np.issubdtype(q.dtype, np.number) or q.dtype == np.bool_):
        raise ArgumentTypeError(f"nearest q must be list-like numbers (a vector or a 2-D array of them), got dtype {q.dtype}")
    if q.size == 0:
        raise EmptyQueryError(f"nearest q is empty (shape {q.shape}): a query needs one value per dimension")
    if q.ndim not in (1, 2):
        raise QueryShapeError(f"nearest q must be a vector or a 2-D array of vectors, got shape {q.shape}")
    return q


# --------------------------------------------------------------------------------------------
# Distances and the running top-k
# --------------------------------------------------------------------------------------------


def _vectors(arr: pa.Array | pa.ChunkedArray, dim: int, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, dim)`` values of the non-null vectors (nulls inside a vector as 0) and the
    mask of the rows kept."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
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


class _TopK:
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


def _score_block(x: np.ndarray, addr: np.ndarray, q: np.ndarray, metric: str, tops: list[_TopK]) -> None:
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


# --------------------------------------------------------------------------------------------
# Running a plan with ``nearest``
# --------------------------------------------------------------------------------------------


def run_search(plan: ScanPlan, ds: TableSnapshot, executor: Executor) -> pa.Table:
    """The result of a plan with a ``nearest`` query (see the module docstring); with the
    GPU executor the search itself runs on the device (:mod:`lance_gpu.scan.nearest_device`)."""
    from lance_gpu.scan.plan import resolve

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
    from lance_gpu.scan.vector_index import indexed_search

    found = indexed_search(plan, ds, executor, q) if nq.use_index else None
    if found is None and getattr(executor, "name", "") == "gpu":
        from lance_gpu.scan.nearest_device import search_device

        found = search_device(plan, ds, executor, nq, q, nq.distance_range)
    elif found is None:
        found = _search_host(plan, ds, executor, nq, q, dtype, vtype.list_size)

    # 2. the (query, row, distance) results, in distance order per query
    qcol = np.concatenate([np.full(a.size, j, dtype=np.int32) for j, (_d, a) in enumerate(found)])
    addrs = np.concatenate([a for _d, a in found])
    dist = np.concatenate([d for d, _a in found]).astype(np.float32)
    if plan.filter is not None and not nq.prefilter and resolved.filter is not None:
        # post-filter: judge each result on its row's columns and its own _distance
        compiled = resolved.filter
        names = [c for c in compiled.columns if c != DISTANCE]
        names += [c for c in compiled.virtual_columns if c not in names]
        rows = _read_rows(plan, ds, executor, addrs, tuple((c, None) for c in names))
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
    fetched = _read_rows(plan, ds, executor, addrs, fetch_cols) if needs_rows else None
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


def _search_host(plan: ScanPlan, ds: TableSnapshot, executor: Executor, nq: NearestQuery, q: np.ndarray,
                 dtype: Any, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query, ``(distances, row addresses)`` of its k nearest rows, scored on the host
    (the vectors decoded by ``executor``), window by window."""
    from lance_gpu.scan.execute import run_plan
    from lance_gpu.scan.plan import ROW_ADDR

    tops = [_TopK(nq.k) for _ in range(1 if nq.multivector else q.shape[0])]
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


def _push_in_range(top: _TopK, dist: np.ndarray, addr: np.ndarray, distance_range: tuple[float | None, float | None]) -> None:
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


def _score_block_exact(x: np.ndarray, addr: np.ndarray, q: np.ndarray, metric: str, tops: list[_TopK],
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


def _read_rows(plan: ScanPlan, ds: TableSnapshot, executor: Executor, addrs: np.ndarray,
               columns: tuple[tuple[str, str | None], ...] | None) -> pa.Table:
    """``columns`` of the rows at row addresses ``addrs`` (repeats allowed), in that order: one
    plan reading each row once, with ``plan``'s ``with_row_id`` / ``with_row_address``."""
    from lance_gpu.scan.execute import concat, run_plan
    from lance_gpu.scan.plan import ROW_ADDR, resolve

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
