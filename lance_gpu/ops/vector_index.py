# SPDX-License-Identifier: Apache-2.0
"""``create_index(column, "IVF_FLAT" | "IVF_PQ" | "IVF_SQ", ...)``: train, write and commit an
IVF vector index that pylance 14 lists and uses.

Build (numpy on the CPU; k-means steps on the GPU with ``accelerator="cuda"``):

1. the column's live, non-null vectors and their row ids are read (``cosine``: normalized);
2. IVF: k-means (:func:`kmeans`; ``dot`` indices assign by the largest ``x.c``, as searches
   rank partitions) of a sample of at most ``256 * num_partitions`` vectors, the best of
   ``IVF_REDOS`` runs; every vector goes to its nearest centroid;
3. PQ: per sub-vector a 256-centroid k-means (at most 50 iterations) of at most 65,536
   residuals (``x - centroid``; raw vectors for ``dot``), every vector encoded by its nearest
   sub-centroid; SQ: one range ``[min, max]`` of all values, codes ``trunc((x - min) * 255 /
   (max - min))``;
4. files (layout in :mod:`lance_gpu.scan.vector_index`), Lance 2.2 files as pylance writes
   them: ``auxiliary.idx`` (rows by partition, ascending row id within one; PQ codes
   transposed per partition) and ``index.idx`` (centroids), under ``_indices/<uuid>/``;
5. a ``CreateIndex`` transaction: a manifest ``IndexMetadata`` (name, field id, dataset
   version, fragment bitmap of the fragments read, ``/lance.index.pb.VectorIndexDetails`` with
   the metric and the quantizer's parameters, ``index_version`` 1, ``created_at``, the files)
   replacing an index of the same name when ``replace=True``.

The commit is :class:`lance_gpu.txn.operations.CreateIndex` (shared with the scalar indices).
"""

from __future__ import annotations

import json
import math
import time
import uuid as _uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from google.protobuf import any_pb2
from pyroaring import BitMap

from cuda_kernels.kmeans import assign_nearest
from lance_gpu._proto import index_vector_pb2, table_pb2
from lance_gpu.errors import (
    ArgumentTypeError,
    FieldNotFoundError,
    GpuUnavailableError,
    IndexExistsError,
    InvalidArgumentError,
    NegativeArgumentError,
    UnsupportedFeatureError,
    ZeroSubVectorsError,
)
from lance_gpu.io.store import ObjectStore, join, remove_quietly
from lance_gpu.scan import scanner_for
from lance_gpu.scan.nearest_query import column_type
from lance_gpu.scan.vector_index import field_id_of
from lance_gpu.table.manifest import latest_version
from lance_gpu.table.schema import LanceSchema
from lance_gpu.txn.commit import commit, run_with_retries
from lance_gpu.txn.operations import CreateIndex
from lance_gpu.write.file_writer import LanceFileWriter

if TYPE_CHECKING:
    from lance_gpu.table.snapshot import TableSnapshot

__all__ = ["create_index", "kmeans"]

VECTOR_TYPES = ("IVF_FLAT", "IVF_PQ", "IVF_SQ", "IVF_HNSW_FLAT", "IVF_HNSW_PQ", "IVF_HNSW_SQ", "IVF_RQ")
BUILT_TYPES = ("IVF_FLAT", "IVF_PQ", "IVF_SQ")
METRICS = {"l2": "l2", "euclidean": "l2", "cosine": "cosine", "dot": "dot"}
_METRIC_PB = {"l2": index_vector_pb2.L2, "cosine": index_vector_pb2.Cosine, "dot": index_vector_pb2.Dot}
MAX_ITERS = 50
IVF_SAMPLE_RATE = 256
PQ_SAMPLE_ROWS = 256 * 256
PQ_CENTROIDS = 256
#: widest rows assigned by the compiled loop (wider: matrix products)
NARROW_DIM = 16
#: IVF k-means runs (the centroids of the lowest loss are kept)
IVF_REDOS = 3
#: rows per partition aimed at when ``num_partitions`` is not given (rounded to a power of two)
TARGET_PARTITION_ROWS = 8192
_BLOCK = 32768


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def _nearest(x: np.ndarray, c: np.ndarray, metric: str = "l2") -> tuple[np.ndarray, np.ndarray]:
    """(index of the nearest centroid, its distance) per row of ``x``: narrow rows (PQ
    sub-vectors) by the compiled loop of :mod:`cuda_kernels.kmeans`, wide ones by blocks of
    matrix products."""
    if x.shape[1] <= NARROW_DIM:
        return assign_nearest(x, c, dot=metric == "dot")
    labels = np.empty(x.shape[0], np.int64)
    dist = np.empty(x.shape[0], np.float32)
    cn = np.einsum("ij,ij->i", c, c)
    for s in range(0, x.shape[0], _BLOCK):
        xb = x[s:s + _BLOCK]
        prod = xb @ c.T
        if metric == "dot":
            d = 1.0 - prod
        else:
            d = cn[None, :] - 2.0 * prod
        lab = np.argmin(d, axis=1)
        labels[s:s + _BLOCK] = lab
        if metric == "dot":
            dist[s:s + _BLOCK] = d[np.arange(lab.size), lab]
        else:
            diff = xb - c[lab]
            dist[s:s + _BLOCK] = np.einsum("ij,ij->i", diff, diff)
    return labels, dist


def _seed(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++ seeds: the first a random row; each next one the best of
    ``2 + ln(k)`` rows drawn with probability proportional to their squared distance to the
    nearest seed so far -- the one leaving the smallest total of those distances (the
    seeding of scikit-learn's ``KMeans``; its seeds start Lloyd's iterations lower than plain
    k-means++ or pylance's random rows)."""
    n = x.shape[0]
    trials = 2 + int(math.log(k))
    seeds = np.empty((k, x.shape[1]), np.float32)
    seeds[0] = x[rng.integers(n)]
    xx = np.einsum("ij,ij->i", x, x).astype(np.float64)
    best = np.maximum(xx - 2.0 * (x @ seeds[0]).astype(np.float64) + float(seeds[0] @ seeds[0]), 0.0)
    for i in range(1, k):
        total = best.sum()
        if total <= 0:
            seeds[i] = x[rng.integers(n)]
            continue
        cand = np.minimum(np.searchsorted(np.cumsum(best), rng.random(trials) * total), n - 1)
        cx = x[cand]
        # (trials, n) squared distances of every row to each candidate, by the expanded form
        d = (cx @ x.T).astype(np.float64)
        d *= -2.0
        d += xx[None, :]
        d += np.einsum("ij,ij->i", cx, cx).astype(np.float64)[:, None]
        np.maximum(d, 0.0, out=d)
        np.minimum(d, best[None, :], out=d)
        pick = int(np.argmin(d.sum(axis=1)))
        seeds[i] = x[cand[pick]]
        best = d[pick]
    return seeds


def kmeans(x: np.ndarray, k: int, rng: np.random.Generator, max_iters: int = MAX_ITERS,
           metric: str = "l2", tolerance: float = 1e-4, device: bool = False) -> tuple[np.ndarray, float]:
    """``k`` centroids of the rows of ``x`` (float32) by Lloyd's iterations -- rows assigned by
    squared l2 (``metric="dot"``: by the largest ``x.c``), centroids the means -- seeded by
    greedy k-means++ (:func:`_seed`; with no more rows than ``k``, the rows repeated); an
    emptied cluster is re-seeded by the row farthest from its centroid.  Stops after ``max_iters`` iterations,
    when no row moves, or when the loss improves by less than ``tolerance`` (relative).
    ``device=True``: the rows go to the GPU once; each iteration assigns and sums there
    (:mod:`cuda_kernels.kmeans`), only the ``k x d`` sums, counts and distances come back.
    Returns (centroids, loss)."""
    n = x.shape[0]
    c = _seed(x, k, rng) if n > k else x[rng.choice(n, size=k, replace=n < k)].astype(np.float32)
    labels = np.full(n, -1, np.int64)
    loss = math.inf
    dx = None
    if device:
        from cuda_kernels import _device
        from cuda_kernels.kmeans import assign_nearest_gpu, cluster_sums_gpu

        dx = _device.to_device(np.ascontiguousarray(x, np.float32))
    for _ in range(max_iters):
        if dx is not None:
            d_labels, d_dist = assign_nearest_gpu(dx, c, dot=metric == "dot")
            new, dist = _device.to_host(d_labels), _device.to_host(d_dist)
        else:
            new, dist = _nearest(x, c, metric)
        new_loss = float(dist.sum(dtype=np.float64))
        converged = np.array_equal(new, labels) or (
            math.isfinite(loss) and abs(loss - new_loss) <= tolerance * max(abs(loss), 1e-30))
        loss = new_loss
        if converged:
            break
        labels = new
        if dx is not None:
            d_sums, d_counts = cluster_sums_gpu(dx, d_labels, k)
            sums, counts = _device.to_host(d_sums), _device.to_host(d_counts)
        else:
            counts = np.bincount(labels, minlength=k)
            sums = np.stack([np.bincount(labels, weights=x[:, j], minlength=k) for j in range(x.shape[1])], axis=1)
        filled = counts > 0
        c[filled] = (sums[filled] / counts[filled, None]).astype(np.float32)
        empty = np.flatnonzero(~filled)
        if empty.size and n >= k:
            far = np.argsort(dist)[::-1][: empty.size]
            c[empty] = x[far]
    return c, loss



# --------------------------------------------------------------------------------------------
# create_index
# --------------------------------------------------------------------------------------------


def _check(ds: TableSnapshot, column: Any, index_type: Any, metric: Any, num_partitions: Any,
           num_sub_vectors: Any) -> tuple[str, str, pa.FixedSizeListType, int]:
    if isinstance(column, (list, tuple)):
        if len(column) != 1:
            raise InvalidArgumentError("Only one column is supported to build a vector index")
        column = column[0]
    if not isinstance(index_type, str):
        raise ArgumentTypeError(f"index_type must be a str, not {type(index_type).__name__}")
    kind = index_type.upper()
    if kind not in VECTOR_TYPES:
        raise UnsupportedFeatureError(f"Only {list(VECTOR_TYPES)} index types supported. Got {index_type}")
    if kind not in BUILT_TYPES:
        raise UnsupportedFeatureError(f"create_index: lance_gpu builds {list(BUILT_TYPES)} indices, not {kind} "
                                      "(pylance-built ones are searched)")
    ftype = column_type(ds, str(column))
    if ftype is None:
        raise FieldNotFoundError(f"{column} not found in schema")
    if isinstance(ftype, pa.ExtensionType):
        ftype = ftype.storage_type
    if not pa.types.is_fixed_size_list(ftype) or not (
            pa.types.is_floating(ftype.value_type)):
        raise ArgumentTypeError(f"Vector column {column} must be FixedSizeListArray 1-dimensional "
                                f"FixedShapeTensorArray, got {ftype}")
    metric_name = METRICS.get(str(metric).lower())
    if metric_name is None:
        raise InvalidArgumentError(f"Metric {metric} not supported.")
    if kind == "IVF_PQ" and (num_partitions is None or num_sub_vectors is None):
        raise InvalidArgumentError("num_partitions and num_sub_vectors are required for IVF_PQ")
    if num_partitions is not None and (isinstance(num_partitions, bool) or int(num_partitions) <= 0):
        # pylance: OverflowError converting a negative count to unsigned, ValueError for 0
        cls = NegativeArgumentError if not isinstance(num_partitions, bool) and int(num_partitions) < 0 else InvalidArgumentError
        raise cls(f"num_partitions must be set and positive, got {num_partitions}")
    if kind == "IVF_PQ":
        m = int(num_sub_vectors)
        if m == 0:
            raise ZeroSubVectorsError(f"num_sub_vectors must be positive (the dimension {ftype.list_size} is divided by it)")
        if m < 0 or ftype.list_size % m:
            raise InvalidArgumentError(f"dimension ({ftype.list_size}) must be divisible by num_sub_vectors ({num_sub_vectors})")
    return str(column), metric_name, ftype, ftype.list_size


def _training_data(ds: TableSnapshot, column: str, metric: str) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(vectors float32, row ids uint64, fragment ids read) of the live non-null rows."""
    table = scanner_for(ds, columns=[column], with_row_id=True).to_table()
    vec = table.column(column).combine_chunks()
    ids = table.column("_rowid").to_numpy().astype(np.uint64)
    if isinstance(vec, pa.ChunkedArray):
        vec = vec.chunk(0)
    dim = vec.type.list_size
    keep = vec.is_valid().to_numpy(zero_copy_only=False)
    values = vec.values.slice(vec.offset * dim, len(vec) * dim)
    if values.null_count:
        values = values.fill_null(0)
    x = values.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(vec), dim)
    keep &= np.isfinite(x).all(axis=1)
    x, ids = x[keep], ids[keep]
    if metric == "cosine":
        norms = np.linalg.norm(x, axis=1)
        ok = norms > 0
        x, ids = x[ok] / norms[ok, None], ids[ok]
    return np.ascontiguousarray(x), ids, [f.fragment_id for f in ds.fragments]


#: column element type -> (numpy dtype, Tensor data type) of what the index stores
_ELEMENT: dict[pa.DataType, tuple[np.dtype, Any]] = {
    pa.float16(): (np.dtype("<f2"), index_vector_pb2.Tensor.FLOAT16),
    pa.float32(): (np.dtype("<f4"), index_vector_pb2.Tensor.FLOAT32),
    pa.float64(): (np.dtype("<f8"), index_vector_pb2.Tensor.FLOAT64),
}


def _tensor(values: np.ndarray, shape: list[int], elem: pa.DataType) -> index_vector_pb2.Tensor:
    """A Tensor of the column's element type (pylance compares the centroids' and codebook's
    type with the query's, which has the column's)."""
    dtype, code = _ELEMENT[elem]
    return index_vector_pb2.Tensor(data_type=code, shape=shape, data=np.ascontiguousarray(values, dtype).tobytes())


def _ivf_pb(offsets: np.ndarray, lengths: np.ndarray, centroids: np.ndarray | None = None,
            loss: float | None = None, elem: pa.DataType | None = None) -> bytes:
    ivf = index_vector_pb2.IVF(offsets=[int(o) for o in offsets], lengths=[int(n) for n in lengths])
    if centroids is not None:
        ivf.centroids_tensor.CopyFrom(_tensor(centroids, list(centroids.shape), pa.float32() if elem is None else elem))
    if loss is not None:
        ivf.loss = loss
    return ivf.SerializeToString()


def _write(store: ObjectStore, key: str, schema: pa.Schema, table: pa.Table | None,
           buffers: list[bytes]) -> int:
    """A Lance 2.2 file of ``table`` whose global buffers 1.. are ``buffers`` (written first)."""
    writer = LanceFileWriter(key, LanceSchema.from_arrow(schema), 2, store=store)
    try:
        for buf in buffers:
            writer.add_global_buffer(buf)
        if table is not None and table.num_rows:
            writer.write(table)
        return writer.finish()
    except BaseException:
        writer.abort()
        raise


def create_index(
    ds: TableSnapshot,
    column: Any,
    index_type: str,
    name: str | None = None,
    metric: str = "L2",
    replace: bool = False,
    num_partitions: int | None = None,
    num_sub_vectors: int | None = None,
    accelerator: Any = None,
    *,
    seed: int | None = None,
    **kwargs: Any,
) -> TableSnapshot:
    """Build and commit an IVF_FLAT / IVF_PQ / IVF_SQ index (see the module docstring); returns
    the committed version's snapshot (the dataset object swaps it in and returns itself, as
    pylance's ``create_index``)."""
    col, metric_name, ftype, dim = _check(ds, column, index_type, metric, num_partitions, num_sub_vectors)
    kind = index_type.upper()
    elem = ftype.value_type
    device = _accelerator(accelerator)
    index_name = name if name is not None else f"{col}_idx"
    removed = [i for i in ds.index_metadata if i.name == index_name]
    if removed and not replace:
        raise IndexExistsError(f"Index name '{index_name}' already exists, please specify a different name or use replace=True")
    field_id = field_id_of(ds, col)
    if field_id is None:
        raise FieldNotFoundError(f"{col} not found in schema")
    rng = np.random.default_rng(seed)

    x, row_ids, fragment_ids = _training_data(ds, col, metric_name)
    n = x.shape[0]
    if n == 0:
        raise InvalidArgumentError(f"create_index: column {col} has no vectors to train on")
    parts = num_partitions if num_partitions is not None else 2 ** max(0, math.ceil(math.log2(max(1.0, n / TARGET_PARTITION_ROWS))))
    parts = max(1, min(int(parts), n))
    sample = x if n <= IVF_SAMPLE_RATE * parts else x[rng.choice(n, IVF_SAMPLE_RATE * parts, replace=False)]
    ivf_metric = "dot" if metric_name == "dot" else "l2"
    centroids, loss = min((kmeans(sample, parts, rng, metric=ivf_metric, device=device) for _ in range(IVF_REDOS)),
                          key=lambda r: r[1])
    labels, _ = _nearest(x, centroids, ivf_metric)
    order = np.lexsort((row_ids, labels))
    x, row_ids, labels = x[order], row_ids[order], labels[order]
    lengths = np.bincount(labels, minlength=parts).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)

    uid = _uuid.uuid4()
    base = join(ds.root, "_indices", str(uid))
    details = index_vector_pb2.VectorIndexDetails(metric_type=_METRIC_PB[metric_name])
    aux_meta: dict[str, str] = {"distance_type": metric_name, "lance:ivf": "1"}
    buffers = [_ivf_pb(offsets, lengths)]
    rowid_field = pa.field("_rowid", pa.uint64())
    if kind == "IVF_FLAT":
        details.flat.SetInParent()
        aux_meta["storage_metadata"] = json.dumps([json.dumps({"dim": dim}, separators=(",", ":"))], separators=(",", ":"))
        code_field = pa.field("flat", pa.list_(elem, dim), nullable=False)
        codes = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel().astype(_ELEMENT[elem][0]), elem), dim)
    elif kind == "IVF_SQ":
        # 8-bit scalar quantization of the (normalized for cosine) vectors over one range
        lo, hi = float(x.min()), float(x.max())
        span = hi - lo
        scaled = np.zeros_like(x, dtype=np.float64) if span == 0 else (x.astype(np.float64) - lo) * 255.0 / span
        sq = np.clip(np.trunc(scaled), 0, 255).astype(np.uint8)
        details.sq.num_bits = 8
        aux_meta["storage_metadata"] = json.dumps([json.dumps(
            {"dim": dim, "num_bits": 8, "bounds": {"start": lo, "end": hi}}, separators=(",", ":"))], separators=(",", ":"))
        code_field = pa.field("__sq_code", pa.list_(pa.uint8(), dim))
        codes = pa.FixedSizeListArray.from_arrays(pa.array(sq.ravel(), pa.uint8()), dim)
    else:
        m = int(num_sub_vectors)  # type: ignore[arg-type]
        sub = dim // m
        resid = x - centroids[labels] if metric_name in ("l2", "cosine") else x
        pick = np.arange(n) if n <= PQ_SAMPLE_ROWS else rng.choice(n, PQ_SAMPLE_ROWS, replace=False)
        book = np.empty((m, PQ_CENTROIDS, sub), np.float32)
        code = np.empty((n, m), np.uint8)
        for j in range(m):
            part = np.ascontiguousarray(resid[:, j * sub:(j + 1) * sub])
            book[j], _ = kmeans(part[pick], PQ_CENTROIDS, rng, device=device)
            code[:, j] = _nearest(part, book[j])[0].astype(np.uint8)
        flat = np.empty(n * m, np.uint8)
        for off, cnt in zip(offsets.tolist(), lengths.tolist(), strict=True):
            flat[off * m:(off + cnt) * m] = code[off:off + cnt].T.ravel()
        tensor = _tensor(book, [PQ_CENTROIDS, dim], elem)
        buffers.append(tensor.SerializeToString())
        details.pq.num_bits = 8
        details.pq.num_sub_vectors = m
        aux_meta["storage_metadata"] = json.dumps([json.dumps(
            {"codebook_position": 2, "nbits": 8, "num_sub_vectors": m, "dimension": dim, "codebook_tensor": [],
             "transposed": True}, separators=(",", ":"))], separators=(",", ":"))
        code_field = pa.field("__pq_code", pa.list_(pa.uint8(), m))
        codes = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.uint8()), m)
    aux_schema = pa.schema([rowid_field, code_field], metadata=aux_meta)
    aux_table = pa.Table.from_arrays([pa.array(row_ids, pa.uint64()), codes], schema=aux_schema)
    index_schema = pa.schema([pa.field("__flat_marker", pa.uint64(), nullable=False)], metadata={
        "lance:index": json.dumps({"type": kind, "distance_type": metric_name}, separators=(",", ":")),
        "lance:ivf": "1",
        "lance:flat": json.dumps([""] * parts),
    })

    written: list[str] = []
    try:
        files = []
        for fname, schema, table, bufs in (
            ("auxiliary.idx", aux_schema, aux_table, buffers),
            ("index.idx", index_schema, None, [_ivf_pb(np.zeros(parts), np.zeros(parts), centroids, loss, elem)]),
        ):
            key = join(base, fname)
            written.append(key)
            size = _write(ds.store, key, schema, table, bufs)
            files.append(table_pb2.IndexFile(path=fname, size_bytes=size))
        meta = table_pb2.IndexMetadata(
            fields=[field_id], name=index_name, dataset_version=int(ds.version),
            fragment_bitmap=BitMap(fragment_ids).serialize(),
            index_details=any_pb2.Any(type_url="/lance.index.pb.VectorIndexDetails", value=details.SerializeToString()),
            index_version=1, created_at=int(time.time() * 1000), files=files,
        )
        meta.uuid.uuid = uid.bytes
        op = CreateIndex([meta], removed)
        op.written.extend(written)
        naming = latest_version(ds.store, ds.root).naming
        manifest = run_with_retries(lambda: commit(ds.store, ds.root, op, ds.manifest_file, naming), 0)
    except BaseException:
        remove_quietly(ds.store, written)
        raise
    return ds.checkout(int(manifest.version))


def _accelerator(accelerator: Any) -> bool:
    """Whether to train on the GPU: ``accelerator="cuda"`` (or a ``torch.device`` of type
    cuda) needs a usable CUDA device (the numba simulator counts); None trains on the CPU."""
    if accelerator is None:
        return False
    kind = getattr(accelerator, "type", accelerator)
    if not isinstance(kind, str) or kind.split(":")[0].lower() not in ("cuda", "gpu"):
        raise InvalidArgumentError(f"accelerator must be 'cuda' (or None), got {accelerator!r}")
    try:
        from numba import cuda
    except ImportError as exc:
        raise GpuUnavailableError(f"accelerator={accelerator!r}: numba.cuda is not importable ({exc})") from None
    if not cuda.is_available():
        raise GpuUnavailableError(f"accelerator={accelerator!r}: no usable CUDA device")
    return True
