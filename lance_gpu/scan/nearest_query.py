# SPDX-License-Identifier: Apache-2.0
"""A ``nearest`` request of pylance's scanner, checked: :func:`parse_nearest` returns the
:class:`NearestQuery` a :class:`~lance_gpu.scan.plan.ScanPlan` keeps (a plain, picklable
value).  This module depends on no other module of :mod:`lance_gpu.scan`: the plan imports it,
and so do the searches that run it (:mod:`lance_gpu.scan.nearest`, ``flat_search``,
``vector_index``, ``nearest_device``).

Checked as pylance 14 checks them: a ``TypeError`` for a missing / unexpected key, a
non-integer ``k`` or a non-vector column; a ``ValueError`` for ``k <= 0``, an unknown metric,
an absent column, a query of another dimension, an element type the metric does not take, or
``include_deleted_rows``; the index knobs (``nprobes``, ``refine_factor``, ...) by
:func:`parse_index_options`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
    from lance_gpu.table.snapshot import TableSnapshot

DISTANCE = "_distance"
QUERY_INDEX = "query_index"
DEFAULT_K = 10
#: metric names pylance accepts (lower-cased) -> ours
METRICS = {"l2": "l2", "euclidean": "l2", "cosine": "cosine", "dot": "dot", "hamming": "hamming"}
#: keys of pylance's ``nearest`` mapping that tune its index search only (no effect exact)
_INDEX_KEYS = frozenset({"nprobes", "minimum_nprobes", "maximum_nprobes", "refine_factor", "use_index", "ef",
                         "query_parallelism", "approx_mode", "search_effort"})
_FLOAT_TYPES = {pa.float16(): np.float32, pa.float32(): np.float32, pa.float64(): np.float64}


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
    search_effort: float | None = None

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
    return NearestQuery(column, q2, single, int(k), metric, bool(prefilter), distance_range, multivector,
                        metric_given=metric_arg is not None, **parse_index_options(nearest))


def _opt_int(nearest: Mapping[str, Any], key: str) -> int | None:
    value = nearest.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"nearest {key} must be an int, not {type(value).__name__}")
    return int(value)


def parse_index_options(nearest: Mapping[str, Any]) -> dict[str, Any]:
    """``use_index``, ``minimum_nprobes``, ``maximum_nprobes``, ``refine_factor``,
    ``search_effort`` of a ``nearest`` mapping, checked as pylance 14 checks them
    (``ValueError``s).  ``nprobes`` sets both bounds; an explicit ``minimum_nprobes`` /
    ``maximum_nprobes`` next to it wins on its side.  ``query_parallelism`` and
    ``approx_mode`` are checked and have no effect on the rows (nor in pylance, for the
    index types searched here)."""
    nprobes = _opt_int(nearest, "nprobes")
    lo = _opt_int(nearest, "minimum_nprobes")
    hi = _opt_int(nearest, "maximum_nprobes")
    refine = _opt_int(nearest, "refine_factor")
    effort_arg = nearest.get("search_effort")
    effort = None
    if effort_arg is not None:
        if isinstance(effort_arg, bool) or not isinstance(effort_arg, (int, float, np.integer, np.floating)):
            raise ArgumentTypeError(f"search_effort must be a float, not {type(effort_arg).__name__}")
        effort = float(effort_arg)
        if not 0.0 <= effort <= 1.0:
            raise InvalidArgumentError(f"search_effort must be a finite value in [0, 1], got {effort_arg}")
    if effort is None and nprobes is not None and nprobes <= 0:
        raise InvalidArgumentError(f"Nprobes must be > 0 but got {nprobes}")
    if lo is not None and lo < 0:
        raise InvalidArgumentError(f"Minimum nprobes must be >= 0 but got {lo}")
    if hi is not None and hi < 0:
        raise InvalidArgumentError(f"Maximum nprobes must be >= 0 but got {hi}")
    if lo is not None and hi is not None and lo > hi:
        raise InvalidArgumentError("minimum_nprobes must be <= maximum_nprobes")
    if refine is not None and refine < 1:
        raise InvalidArgumentError(f"Refine factor must be 1 or more got {refine}")
    ef = _opt_int(nearest, "ef")
    if ef is not None and ef <= 0:
        raise InvalidArgumentError(f"ef must be > 0 but got {ef}")
    parallelism = _opt_int(nearest, "query_parallelism")
    if parallelism is not None and parallelism < -1:
        raise InvalidArgumentError("query_parallelism must be >= -1")
    mode = nearest.get("approx_mode", "normal")
    if mode not in ("fast", "normal", "accurate"):
        raise InvalidArgumentError(f"approx_mode must be one of 'fast', 'normal', or 'accurate', got {mode!r}")
    if nprobes is not None and effort is None:
        lo = nprobes if lo is None else lo
        hi = nprobes if hi is None else hi
    if lo is not None and lo < 1:
        raise InvalidArgumentError("minimum_nprobes must be >= 1")
    if hi is not None and (1 if lo is None else lo) > hi:  # the default minimum is 1
        raise InvalidArgumentError("minimum_nprobes must be <= maximum_nprobes")
    use_index = nearest.get("use_index")
    return {"use_index": True if use_index is None else bool(use_index), "minimum_nprobes": lo,
            "maximum_nprobes": hi, "refine_factor": refine, "search_effort": effort}


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


def _query_array(value: Any) -> np.ndarray:
    if isinstance(value, pa.ExtensionScalar):  # e.g. one fixed_shape_tensor value
        value = value.value
    if isinstance(value, (pa.FixedSizeListScalar, pa.ListScalar, pa.LargeListScalar)):
        value = value.values
    if isinstance(value, pa.ExtensionArray):
        value = value.storage
    if isinstance(value, (pa.FixedSizeListArray, pa.ListArray, pa.LargeListArray)):
        value = np.stack([np.asarray(v.values.to_numpy(zero_copy_only=False)) for v in value])
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
    if q.dtype.kind in "US" and not isinstance(value, (str, bytes)):
        # a list of strings: pylance converts each to a float (a ValueError for a non-number)
        try:
            q = q.astype(np.float32)
        except ValueError as exc:
            raise InvalidArgumentError(f"nearest q must be numbers: {exc}") from None
    if not (np.issubdtype(q.dtype, np.number) or q.dtype == np.bool_):
        raise ArgumentTypeError(f"nearest q must be list-like numbers (a vector or a 2-D array of them), got dtype {q.dtype}")
    if q.size == 0:
        raise EmptyQueryError(f"nearest q is empty (shape {q.shape}): a query needs one value per dimension")
    if q.ndim not in (1, 2):
        raise QueryShapeError(f"nearest q must be a vector or a 2-D array of vectors, got shape {q.shape}")
    return q


def column_type(ds: TableSnapshot, column: str) -> pa.DataType | None:
    """The type of a top-level column or of a struct field named by a dotted path (None:
    absent), as a search sees it: an extension type stored as fixed-size lists (a
    ``fixed_shape_tensor``) is its storage vectors, as pylance searches it."""
    typ = _column_type(ds, column)
    if isinstance(typ, pa.BaseExtensionType) and pa.types.is_fixed_size_list(typ.storage_type):
        return typ.storage_type
    return typ


def _column_type(ds: TableSnapshot, column: str) -> pa.DataType | None:
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
