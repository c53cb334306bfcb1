# SPDX-License-Identifier: Apache-2.0
"""IVF vector indices (pylance's ``IVF_FLAT`` / ``IVF_PQ`` / ``IVF_SQ`` / ``IVF_HNSW_*``): reading
them and answering ``nearest`` queries with them, as pylance 14 does.

Files (``_indices/<uuid>/``, Lance files; "gbuf n" is global buffer n, named by a schema
metadata value):

* ``index.idx`` -- schema metadata ``lance:index`` = ``{"type": "IVF_PQ", "distance_type":
  "l2"}``, ``lance:ivf`` = the gbuf holding an ``IVF`` protobuf whose ``centroids_tensor`` is
  the ``(partitions, dim)`` float32 centroids.  For the flat sub-index no rows (one column
  ``__flat_marker``); for HNSW the per-partition graphs (``__vector_id``, ``__neighbors``,
  ``_distance``; ``lance:hnsw`` JSON per partition) -- not used here: an HNSW partition is
  searched exhaustively, which finds every row the graph walk can find.
* ``auxiliary.idx`` -- the quantized storage, rows grouped by partition: ``_rowid: uint64``
  (the row id; a row address unless the dataset has stable row ids) and one code column;
  ``lance:ivf`` = the gbuf of an ``IVF`` protobuf whose ``offsets`` / ``lengths`` are each
  partition's first row and row count; ``distance_type``; ``storage_metadata`` = a JSON list
  holding one JSON string:

  - FLAT: column ``flat: fixed_size_list<float>[dim]`` (for ``cosine`` the vectors are
    normalized); ``{"dim": d}``.
  - PQ: column ``__pq_code: fixed_size_list<uint8>[m]``; ``{"codebook_position": g, "nbits":
    8, "num_sub_vectors": m, "dimension": d, "transposed": true}``; gbuf ``g`` is a
    ``Tensor`` whose float32 data is the codebook as ``(m, 256, d / m)`` (sub-vector major).
    With ``transposed`` the codes of one partition of ``n`` rows are stored as ``(m, n)``
    (all first sub-codes, then all second ...), not ``(n, m)``.  For ``l2`` and ``cosine``
    (normalized vectors, then l2) the codes quantize the residual ``x - centroid``.
  - SQ: column ``__sq_code: fixed_size_list<uint8>[dim]``; ``{"dim": d, "num_bits": 8,
    "bounds": {"start": lo, "end": hi}}``; ``code = u8_saturating((x - lo) * 255 / (hi - lo))``.

Search (one query; pylance 14's ANN plan): the partitions are ranked by the query's distance
to their centroids (``l2``; ``dot`` for dot indices; the query normalized for ``cosine``).
The first probes are searched (:func:`_probes`: ``nprobes`` exactly; ``minimum_nprobes`` with
``search_effort=0``; otherwise every partition up to ``maximum_nprobes``, a superset of
pylance's "Auto" budget), then more, one at a time, while fewer than ``min(k, allowed rows)``
rows were found; if no more than ``k`` rows are allowed and the first probes missed some, the
missed ones come back at +inf instead (pylance's shortcut).  In a partition every row the
pre-filter allows (live rows; with ``prefilter=True`` the rows matching the filter) is scored
with the storage's distance:

* FLAT: ``l2`` = squared distance, ``cosine`` = ``1 - x.q`` on normalized vectors, ``dot`` =
  ``1 - x.q``;
* PQ: the sum over sub-vectors of the query residual's table entry (``l2``: squared
  distance to the code's centroid; ``dot``: ``1 - q_i.c``, the sum less ``m - 1``);
* SQ: the squared distance of the codes (``dot``: ``1 - codes.codes``) times
  ``((hi - lo) / 255)^2`` (float32: the step, squared, times the code distance -- pylance's
  distances bit for bit);

and the ``k * refine_factor`` nearest are kept as pylance keeps them: one Rust ``BinaryHeap``
by distance fed every scored row, partition by partition in probe order, storage order
within (:mod:`lance_gpu.scan._heap`), so rows of equal distance at the k-th place are the ones
pylance keeps; then ordered by (distance, row id).  With ``refine_factor`` they are re-ranked
by exact distances from the data (the index's metric) and ``k`` kept.  Rows of fragments the
index does not cover are searched exactly (with the filter when pre-filtering) and merged with
the index's candidates by exact distances.  A metric other than the index's makes pylance (and
us) search exactly.
"""

from __future__ import annotations

import json
import threading
import uuid
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lance_gpu._proto import index_vector_pb2
from lance_gpu.errors import CorruptFileError, UnsupportedFeatureError
from lance_gpu.file.arrow import leaf_types
from lance_gpu.file.container import FileVersion, LanceFileReader
from lance_gpu.file.reader import read_field
from lance_gpu.io.store import join
from lance_gpu.scan._heap import heap_top_k
from lance_gpu.scan.execute import run_plan
from lance_gpu.scan.flat_search import TopK, read_rows, search_host
from lance_gpu.scan.nearest_query import column_type
from lance_gpu.scan.plan import ROW_ADDR
from lance_gpu.table.schema import LanceSchema

if TYPE_CHECKING:
    from lance_gpu._proto import table_pb2
    from lance_gpu.scan.execute import Executor
    from lance_gpu.scan.plan import ScanPlan
    from lance_gpu.table.snapshot import TableSnapshot

VECTOR_DETAILS = "/lance.index.pb.VectorIndexDetails"
INDEX_FILE = "index.idx"
AUX_FILE = "auxiliary.idx"
ROW_ID = "_rowid"
#: ``lance:index`` type -> (sub-index, quantizer)
INDEX_TYPES = {
    "IVF_FLAT": ("FLAT", "FLAT"),
    "IVF_PQ": ("FLAT", "PQ"),
    "IVF_SQ": ("FLAT", "SQ"),
    "IVF_HNSW_FLAT": ("HNSW", "FLAT"),
    "IVF_HNSW_PQ": ("HNSW", "PQ"),
    "IVF_HNSW_SQ": ("HNSW", "SQ"),
}


# --------------------------------------------------------------------------------------------
# Reading an index
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class IvfIndex:
    """One IVF index's centroids and storage, whole in memory (rows by partition).

    ``codes``: FLAT -- ``(rows, dim)`` float32 vectors; PQ -- ``(rows, m)`` uint8 codes (row
    major, un-transposed at load); SQ -- ``(rows, dim)`` uint8 codes."""

    index_type: str
    sub_index: str
    quantizer: str
    metric: str
    centroids: np.ndarray  # (partitions, dim) float32
    offsets: np.ndarray  # int64 per partition
    lengths: np.ndarray  # int64 per partition
    row_ids: np.ndarray  # uint64 per storage row
    codes: np.ndarray
    codebook: np.ndarray | None = None  # PQ: (m, 256, dim / m) float32
    bounds: tuple[float, float] = (0.0, 0.0)  # SQ
    #: PQ: ``code + sub-vector * 256`` per storage row and sub-vector (positions in a flat
    #: distance table), made on the first search
    pq_lookup: np.ndarray | None = field(default=None, repr=False)
    #: FLAT: ``|x|^2`` per storage row, made on the first l2 search
    flat_norms: np.ndarray | None = field(default=None, repr=False)
    #: SQ: the codes as float32 and ``|code|^2`` per storage row, made on the first search
    sq_values: np.ndarray | None = field(default=None, repr=False)
    sq_norms: np.ndarray | None = field(default=None, repr=False)
    #: (dataset URI, version) -> (row address, live?) per storage row, for the last version searched
    live: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def num_partitions(self) -> int:
        return int(self.centroids.shape[0])

    @property
    def uses_residual(self) -> bool:
        return self.quantizer == "PQ" and self.metric in ("l2", "cosine")


def _parse(msg: Any, raw: bytes, where: str) -> Any:
    try:
        msg.ParseFromString(raw)
    except Exception as exc:  # protobuf DecodeError
        raise CorruptFileError(where, f"bad {type(msg).__name__} protobuf ({exc})") from exc
    return msg


def _tensor(t: index_vector_pb2.Tensor, where: str) -> np.ndarray:
    dtypes = {index_vector_pb2.Tensor.FLOAT16: np.float16, index_vector_pb2.Tensor.FLOAT32: np.float32,
              index_vector_pb2.Tensor.FLOAT64: np.float64, index_vector_pb2.Tensor.UINT8: np.uint8}
    dt = dtypes.get(t.data_type)
    if dt is None:
        raise UnsupportedFeatureError(f"{where}: tensor of data type {t.data_type} is not supported")
    arr = np.frombuffer(t.data, dtype=np.dtype(dt).newbyteorder("<"))
    shape = tuple(int(s) for s in t.shape)
    if int(np.prod(shape)) != arr.size:
        raise CorruptFileError(where, f"tensor of shape {shape} holds {arr.size} values")
    return arr.reshape(shape).astype(np.float32)


def read_lance_file(reader: LanceFileReader) -> tuple[pa.Table, dict[str, str]]:
    """Every column of a standalone Lance file of top-level fields, and its schema metadata."""
    fd = reader.descriptor
    schema = LanceSchema.from_protos(fd.schema.fields, dict(fd.schema.metadata), reader.path)
    arrow = schema.to_arrow()
    meta = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in dict(fd.schema.metadata).items()}
    if reader.num_rows == 0:
        return arrow.empty_table(), meta
    cols = []
    col = 0
    if reader.version == FileVersion(2, 0):
        from lance_gpu.file.v2_0 import read_field as read_v20

        for f in arrow:
            cols.append(read_v20(reader, f, [col], None))
            col += 1
    else:

        for f in arrow:
            n = len(leaf_types(f.type))
            cols.append(read_field(reader, f, list(range(col, col + n))))
            col += n
    chunked = [c if isinstance(c, pa.ChunkedArray) else pa.chunked_array([c]) for c in cols]
    return pa.Table.from_arrays(chunked, schema=arrow), meta


def _fsl_values(col: pa.ChunkedArray, width: int, dtype: Any) -> np.ndarray:
    arr = col.combine_chunks()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0) if arr.num_chunks else pa.array([], col.type)
    values = arr.values.slice(arr.offset * width, len(arr) * width)
    return values.to_numpy(zero_copy_only=False).astype(dtype, copy=False).reshape(len(arr), width)


#: indices read, most recently used last (dataset URI, index uuid) -> index
_CACHE: OrderedDict[tuple[str, str], IvfIndex] = OrderedDict()
_CACHE_LOCK = threading.Lock()
#: indices kept in memory at most
CACHE_ENTRIES = 8


def load_index(ds: TableSnapshot, index: table_pb2.IndexMetadata) -> IvfIndex:
    """The IVF index of manifest entry ``index``, read whole (the last ``CACHE_ENTRIES`` read
    stay in memory: an index's files never change under its uuid)."""
    uid = str(uuid.UUID(bytes=bytes(index.uuid.uuid)))
    key = (ds.uri, uid)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
    if hit is not None:
        return hit
    base = join(ds.root, "_indices", uid)
    reader = LanceFileReader(join(base, INDEX_FILE), ds.store)
    try:
        imeta = _schema_meta(reader)
        where = reader.path
        try:
            info = json.loads(imeta["lance:index"])
            index_type = str(info["type"]).upper()
            metric = str(info["distance_type"]).lower()
            ivf = _parse(index_vector_pb2.IVF(), reader.global_buffer(int(imeta["lance:ivf"])), where)
        except (KeyError, ValueError, TypeError) as exc:
            raise CorruptFileError(where, f"not an IVF index file ({exc})") from None
    finally:
        reader.close()
    if index_type not in INDEX_TYPES:
        raise UnsupportedFeatureError(f"vector index {index.name!r} is of type {index_type}, which lance_gpu cannot search")
    sub_index, quantizer = INDEX_TYPES[index_type]
    centroids = _tensor(ivf.centroids_tensor, where)
    reader = LanceFileReader(join(base, AUX_FILE), ds.store)
    try:
        table, ameta = read_lance_file(reader)
        where = reader.path
        try:
            aivf = _parse(index_vector_pb2.IVF(), reader.global_buffer(int(ameta["lance:ivf"])), where)
            storage = json.loads(json.loads(ameta["storage_metadata"])[0])
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise CorruptFileError(where, f"not an IVF storage file ({exc})") from None
        codebook = None
        bounds = (0.0, 0.0)
        row_ids = table.column(ROW_ID).to_numpy().astype(np.uint64, copy=False)
        offsets = np.asarray(aivf.offsets, dtype=np.int64)
        lengths = np.asarray(aivf.lengths, dtype=np.int64)
        if quantizer == "FLAT":
            dim = int(storage["dim"])
            codes = _fsl_values(table.column("flat"), dim, np.float32)
        elif quantizer == "PQ":
            m = int(storage["num_sub_vectors"])
            dim = int(storage["dimension"])
            if int(storage.get("nbits", 8)) != 8:
                raise UnsupportedFeatureError(f"{where}: PQ with {storage.get('nbits')} bits per code is not supported")
            tensor = _parse(index_vector_pb2.Tensor(), reader.global_buffer(int(storage["codebook_position"])), where)
            codebook = _tensor(tensor, where).reshape(m, 256, dim // m)
            raw = _fsl_values(table.column("__pq_code"), m, np.uint8)
            if storage.get("transposed", False):
                codes = np.empty_like(raw)
                flat = raw.reshape(-1)
                for off, n in zip(offsets.tolist(), lengths.tolist(), strict=True):
                    codes[off:off + n] = flat[off * m:(off + n) * m].reshape(m, n).T
            else:
                codes = raw
        else:
            dim = int(storage["dim"])
            if int(storage.get("num_bits", 8)) != 8:
                raise UnsupportedFeatureError(f"{where}: SQ with {storage.get('num_bits')} bits is not supported")
            codes = _fsl_values(table.column("__sq_code"), dim, np.uint8)
            bounds = (float(storage["bounds"]["start"]), float(storage["bounds"]["end"]))
    finally:
        reader.close()
    if offsets.size != centroids.shape[0] or lengths.size != centroids.shape[0] or int(lengths.sum()) != row_ids.size:
        raise CorruptFileError(where, "IVF partitions do not match the centroids / the storage rows")
    out = IvfIndex(index_type, sub_index, quantizer, metric, centroids.astype(np.float32), offsets, lengths,
                   row_ids, codes, codebook, bounds)
    with _CACHE_LOCK:
        _CACHE[key] = out
        while len(_CACHE) > CACHE_ENTRIES:
            _CACHE.popitem(last=False)
    return out


def _schema_meta(reader: LanceFileReader) -> dict[str, str]:
    md = dict(reader.descriptor.schema.metadata)
    return {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in md.items()}


def vector_index_of(ds: TableSnapshot, column: str) -> table_pb2.IndexMetadata | None:
    """The first vector index (manifest order) over ``column``, as pylance picks it."""
    field_id = field_id_of(ds, column)
    if field_id is None:
        return None
    for index in ds.index_metadata:
        if field_id in list(index.fields) and index.index_details.type_url.endswith("VectorIndexDetails"):
            return index
    return None


def field_id_of(ds: TableSnapshot, column: str) -> int | None:
    """The field id of a top-level column or dotted struct field (None: absent)."""
    parts = column.split(".")
    fields = ds.lance_schema.fields
    node = None
    for part in parts:
        node = next((f for f in fields if f.name == part), None)
        if node is None:
            return None
        fields = node.children
    return None if node is None else int(node.id)


# --------------------------------------------------------------------------------------------
# Searching
# --------------------------------------------------------------------------------------------


def _normalize(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return v / n


def partition_order(index: IvfIndex, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Partitions by the query's centroid distance (ascending) and those distances."""
    c = index.centroids
    if index.metric == "dot":
        d = 1.0 - c @ q
    else:
        diff = c - q
        d = np.einsum("ij,ij->i", diff, diff)
    d = d.astype(np.float32)
    order = np.argsort(d, kind="stable")
    return order, d[order]


def _probes(index: IvfIndex, lo: int | None, hi: int | None, effort: float | None) -> tuple[int, int]:
    """(partitions searched first, most partitions searched).  ``hi`` (``maximum_nprobes``;
    default every partition) bounds both.  With ``search_effort=0`` the first probes are
    ``lo`` (``minimum_nprobes``, default 1); ``nprobes`` sets both bounds, so it is exact.
    Otherwise pylance 14's "Auto" budget starts higher than ``lo`` by a rule (of the query and
    the centroids) not reproduced here, so we start at every partition up to ``hi``: a superset
    of its probes, the same rows wherever its probes hold the true nearest ones, never fewer.

    What pylance 14.0.2 was seen to do (``analyze_plan``'s ``partitions_searched``, 64
    partitions of 20,000 x 32 clustered rows): Auto searched 5 / 6 / 11 partitions for
    k = 1 / 2..10 / 11..100 on most queries (12 / 14 / 17 on one), the buckets of its
    ``early_pruning`` factors (0.6, 7, 81), though not its formula on squared centroid
    distances; ``search_effort`` e interpolates geometrically with ceil: between the minimum
    and Auto for e < 0.5 (``ceil(sqrt(1 * 6)) = 3`` at 0.25) and between Auto and every
    partition above (``ceil(sqrt(6 * 64)) = 20`` at 0.75)."""
    total = index.num_partitions
    most = total if hi is None else min(hi, total)
    if lo is not None and (effort == 0.0 or lo == hi):
        return min(lo, most), most
    return most, most


def _flat_l2(index: IvfIndex, rows: np.ndarray | slice, q: np.ndarray, k: int | None) -> np.ndarray:
    """Squared l2 distances of flat rows: ranked by the expanded form ``|x|^2 - 2 x.q + |q|^2``
    (one matrix-vector product), then every row that may be among the ``k`` nearest -- within
    twice the expanded form's float32 error bound of the k-th -- recomputed from differences.
    Rows left with expanded values are farther than the k nearest, whose values are exact."""
    codes = index.codes[rows]
    n = codes.shape[0]
    if k is None or n <= 4 * k:
        diff = codes - q
        return np.einsum("ij,ij->i", diff, diff)
    if index.flat_norms is None:
        index.flat_norms = np.einsum("ij,ij->i", index.codes, index.codes)
    norms = index.flat_norms[rows]
    qq = np.float32(q @ q)
    dist = norms - np.float32(2) * (codes @ q) + qq
    bound = 4.0 * codes.shape[1] * float(np.finfo(np.float32).eps) * (float(norms.max()) + float(qq))
    kth = float(np.partition(dist, k - 1)[k - 1])
    near = np.flatnonzero(dist <= kth + 2 * bound)
    diff = codes[near] - q
    dist[near] = np.einsum("ij,ij->i", diff, diff)
    return dist


def _partition_distances(index: IvfIndex, part: int, rows: np.ndarray | slice, q: np.ndarray,
                         k: int | None = None) -> np.ndarray:
    """Storage distances of the query ``q`` (normalized for cosine) to ``rows`` (storage row
    numbers, or a slice: a view, no copy) of partition ``part``; with ``k``, only the ``k``
    nearest need exact values (see :func:`_flat_l2`)."""
    if index.quantizer == "FLAT":
        if index.metric == "l2":
            return _flat_l2(index, rows, q, k)
        return 1.0 - index.codes[rows] @ q
    if index.quantizer == "PQ":
        assert index.codebook is not None
        cb = index.codebook
        m, _, sub = cb.shape
        qq = q - index.centroids[part] if index.uses_residual else q
        qs = qq.reshape(m, 1, sub)
        if index.metric == "dot":
            table = 1.0 - np.einsum("mcs,mos->mc", cb, qs)
        else:
            diff = cb - qs
            table = np.einsum("mcs,mcs->mc", diff, diff)
        table = table.astype(np.float32)
        if index.pq_lookup is None:
            index.pq_lookup = (index.codes.astype(np.int32) + np.arange(m, dtype=np.int32) * table.shape[1])
        dist = table.ravel()[index.pq_lookup[rows]].sum(axis=1, dtype=np.float32)
        return dist - (m - 1) if index.metric == "dot" else dist
    lo, hi = index.bounds
    span = hi - lo
    if span == 0:
        qcode = np.zeros(q.shape, np.float64)
    else:
        qcode = np.clip(np.trunc((q.astype(np.float64) - lo) * 255.0 / span), 0, 255)
    if q.size * 255 * 255 < 2**24:
        # code products summed in float32 are exact integers below 2**24: one matrix-vector
        # product per partition, |c|^2 per row kept from the first search
        if index.sq_values is None:
            index.sq_values = index.codes.astype(np.float32)
            index.sq_norms = np.einsum("ij,ij->i", index.sq_values, index.sq_values, dtype=np.float64)
        assert index.sq_norms is not None
        dots = (index.sq_values[rows] @ qcode.astype(np.float32)).astype(np.float64)
        raw = 1.0 - dots if index.metric == "dot" else index.sq_norms[rows] - 2.0 * dots + float(qcode @ qcode)
    else:
        c = index.codes[rows].astype(np.float64)
        if index.metric == "dot":
            raw = 1.0 - c @ qcode
        else:
            diff = c - qcode
            raw = np.einsum("ij,ij->i", diff, diff)
    # as pylance 14: ``v * (range / 255).powi(2)``, all in float32 (this order reproduces its
    # distances bit for bit; other orders differ in the last place and re-order ties)
    step = np.float32(span) / np.float32(255.0)
    return raw.astype(np.float32) * (step * step)


def _ties_at_kth(kept: np.ndarray, k: int, searched: list[tuple[np.ndarray, np.ndarray | None, int]]) -> bool:
    """Whether, over every row of the searched partitions, rows of equal distance straddle the
    ``k``-th smallest distance (``kept``: the union of the partitions' own ``k`` best, which
    holds the ``k`` smallest overall)."""
    clean = np.where(np.isnan(kept), np.float32(np.inf), kept)
    kth = np.partition(clean, k - 1)[k - 1]
    at_or_below = sum(int(np.count_nonzero(np.where(np.isnan(dj), np.float32(np.inf), dj) <= kth))
                      for dj, _rows, _off in searched)
    return at_or_below != k


def ann_candidates(index: IvfIndex, q: np.ndarray, k: int, allowed: np.ndarray, lo: int | None, hi: int | None,
                   limit_total: int | None, k_query: int | None = None,
                   effort: float | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
    """The ``k`` best (distance, storage row) of one query over the probed partitions, as
    pylance 14's ``ANNSubIndex`` + ``SortExec: TopK(fetch=k)`` choose them, in (distance, row
    id) order; rows where ``allowed`` (a mask over the storage rows) is true.

    ``k`` is what each partition returns (``k_query * refine_factor``); ``k_query`` the
    query's own ``k`` (default ``k``), which drives the probing: the first probes
    (:func:`_probes`; ``effort``: ``search_effort``) are searched; then, while fewer than
    ``min(k_query, limit_total)`` rows were found (``limit_total``: rows the pre-filter
    allows, None without one), the next partitions one by one up to the most (pylance's late
    search, one partition at a time with its default ``query_parallelism``).  If instead the allowed rows are no more than
    ``k_query`` and the first probes missed some, pylance searches no further and returns the
    missed rows at +inf distance: the third value says so (the caller adds them).

    The rows kept are those of one heap of ``k`` fed every scored row, partition by partition
    in probe order (:mod:`lance_gpu.scan._heap`): each partition's own ``k`` best hold the
    ``k`` smallest overall, and only when rows of equal distance straddle the ``k``-th place is
    the heap replayed over every scored row (late partitions included: pylance merges those
    by its ``TopK``, which this does not model separately); then (distance, row id) order."""
    kq = k if k_query is None else k_query
    qv = q.astype(np.float32)
    if index.metric == "cosine":
        qv = _normalize(qv)
    order, _ = partition_order(index, qv)
    first, most = _probes(index, lo, hi, effort)
    # per probed partition: (its distances, storage rows (None: the whole partition), offset)
    searched: list[tuple[np.ndarray, np.ndarray | None, int]] = []
    kept: list[np.ndarray] = []  # per partition, positions into its distances the heap keeps

    def search(i: int) -> int:
        part = int(order[i])
        off, n = int(index.offsets[part]), int(index.lengths[part])
        ok = allowed[off:off + n]
        rows: np.ndarray | None = None
        if ok.all():
            d = _partition_distances(index, part, slice(off, off + n), qv, k).astype(np.float32, copy=False)
        else:
            rows = off + np.flatnonzero(ok)
            if not rows.size:
                return 0
            d = _partition_distances(index, part, rows, qv, k).astype(np.float32, copy=False)
        local = heap_top_k(d, k)
        searched.append((d, rows, off))
        kept.append(local)
        return int(local.size)

    found = min(kq, sum(search(i) for i in range(first)))
    shortcut = False
    if most > first and found < kq:
        if limit_total is not None and found < limit_total <= kq:
            shortcut = True
        else:
            want = kq if limit_total is None else min(kq, limit_total)
            for i in range(first, most):
                if found >= want:
                    break
                found += search(i)
    if not searched:
        return np.zeros(0, np.float32), np.zeros(0, np.int64), shortcut

    def storage_rows(j: int, pos: np.ndarray) -> np.ndarray:
        _d, rows, off = searched[j]
        return off + pos if rows is None else rows[pos]

    d = np.concatenate([searched[j][0][pos] for j, pos in enumerate(kept)])
    r = np.concatenate([storage_rows(j, pos) for j, pos in enumerate(kept)])
    if d.size > k and _ties_at_kth(d, k, searched):
        # rows of equal distance straddle the k-th place: replay one heap over every row of
        # the searched partitions, partition by partition in probe order, storage order within
        d = np.concatenate([dj for dj, _rows, _off in searched])
        r = np.concatenate([storage_rows(j, np.arange(dj.size)) for j, (dj, _rows, _off) in enumerate(searched)])
        pick = heap_top_k(d, k, ordered=True)
        d, r = d[pick], r[pick]
    keep = np.lexsort((index.row_ids[r], d))[:k]
    return d[keep], r[keep], shortcut


# --------------------------------------------------------------------------------------------
# The hook of ``run_search``
# --------------------------------------------------------------------------------------------


_GONE = np.uint64(2**64 - 1)


def _addresses(ds: TableSnapshot, ids: np.ndarray) -> np.ndarray:
    """Row addresses of row ids (the identity without stable row ids); ``2**64 - 1`` for ids
    no longer in the dataset."""
    if not ds.has_stable_row_ids:
        return ids
    all_ids, all_addr = [], []
    for frag in ds.fragments:
        rid = np.asarray(frag.row_ids, np.uint64)
        all_ids.append(rid)
        all_addr.append((np.uint64(frag.fragment_id) << np.uint64(32)) + np.arange(rid.size, dtype=np.uint64))
    if not all_ids:
        return np.full(ids.size, np.uint64(2**64 - 1))
    k = np.concatenate(all_ids)
    v = np.concatenate(all_addr)
    order = np.argsort(k, kind="stable")
    k, v = k[order], v[order]
    pos = np.minimum(np.searchsorted(k, ids), k.size - 1)
    return np.where(k[pos] == ids, v[pos], np.uint64(2**64 - 1))


def _live_mask(ds: TableSnapshot, addrs: np.ndarray, fragment_ids: set[int]) -> np.ndarray:
    """Which addresses point at a live row of one of ``fragment_ids``."""
    frag = (addrs >> np.uint64(32)).astype(np.int64)
    off = (addrs & np.uint64(0xFFFFFFFF)).astype(np.int64)
    live = np.zeros(addrs.size, dtype=bool)
    for f in ds.fragments:
        if f.fragment_id not in fragment_ids:
            continue
        sel = frag == f.fragment_id
        if not sel.any():
            continue
        ok = off[sel] < int(f.pb.physical_rows)
        deleted = np.asarray(f.deleted_rows, np.int64)
        if deleted.size:
            ok &= ~np.isin(off[sel], deleted)
        live[sel] = ok
    return live


def _exact_distances(x: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    x = x.astype(np.float32)
    q = q.astype(np.float32)
    if metric == "l2":
        diff = x - q
        return np.einsum("ij,ij->i", diff, diff)
    if metric == "cosine":
        with np.errstate(divide="ignore", invalid="ignore"):
            return 1.0 - (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
    return 1.0 - x @ q


def _vectors_of(plan: ScanPlan, ds: TableSnapshot, executor: Executor, addrs: np.ndarray, column: str, dim: int) -> np.ndarray:
    rows = read_rows(plan, ds, executor, addrs, ((column, None),))
    arr = rows.column(column).combine_chunks()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0)
    values = arr.values.slice(arr.offset * dim, len(arr) * dim)
    if values.null_count:
        values = values.fill_null(0)
    return values.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(arr), dim)


def indexed_search(plan: ScanPlan, ds: TableSnapshot, executor: Executor,
                   q: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per query, ``(distances, row addresses)`` of the ``k`` nearest rows from the column's
    vector index (see the module docstring), in (distance, address) order; None when no index
    applies (no index; another metric; multivectors or a ``distance_range``: searched exactly)."""
    nq = plan.nearest
    assert nq is not None
    if nq.multivector or nq.distance_range != (None, None):
        return None
    meta = vector_index_of(ds, nq.column)
    if meta is None:
        return None
    index = load_index(ds, meta)
    if nq.metric_given and nq.metric != index.metric:
        warnings.warn(f"Requested metric {nq.metric} is incompatible with index metric {index.metric}, "
                      "falling back to brute-force search", stacklevel=4)
        return None
    ftype = column_type(ds, nq.column)
    assert isinstance(ftype, pa.FixedSizeListType)
    dim = ftype.list_size
    if q.dtype == np.uint8:
        raise UnsupportedFeatureError("nearest: searching a vector index over uint8 vectors is not supported")
    covered = {int(f) for f in _bitmap(meta)}
    frag_ids = {f.fragment_id for f in ds.fragments}
    indexed = covered & frag_ids
    unindexed = [fid for fid in plan.fragment_ids if fid not in covered]

    # row addresses of the storage rows and which are live, per dataset version (kept for the last one)
    key = (ds.uri, int(ds.version))
    pair = index.live.get(key)
    if pair is None:
        addrs = _addresses(ds, index.row_ids)
        live = _live_mask(ds, addrs, indexed)
        if ds.has_stable_row_ids:
            # ids no fragment holds any more (rows deleted, then compacted away): pylance's
            # deletion mask does not know them, its search finds them and its read drops them
            live |= addrs == _GONE
        pair = (addrs, live)
        index.live = {key: pair}
    addrs, allowed = pair
    max_results = None
    if nq.prefilter and plan.filter is not None:
        scan = replace(plan, columns=(), filter=plan.filter, with_row_id=False, with_row_address=True,
                       limit=None, offset=0, nearest=None, window_pushed=False, late_materialization=None,
                       **_only_fragments(plan, indexed))
        hits = [t.column(ROW_ADDR).to_numpy().astype(np.uint64) for t in run_plan(scan, executor, ds) if t.num_rows]
        ok = np.sort(np.concatenate(hits)) if hits else np.zeros(0, np.uint64)
        if ok.size:
            pos = np.minimum(np.searchsorted(ok, addrs), ok.size - 1)
            allowed = allowed & (ok[pos] == addrs)
        else:
            allowed = np.zeros_like(allowed)
        max_results = int(allowed.sum())
    rf = nq.refine_factor
    kk = nq.k * (rf or 1)
    found = [ann_candidates(index, q[j], kk, allowed, nq.minimum_nprobes, nq.maximum_nprobes, max_results, nq.k,
                            nq.search_effort)
             for j in range(q.shape[0])]
    exact = rf is not None or bool(unindexed)
    vectors: dict[int, np.ndarray] = {}
    if exact and index.quantizer == "FLAT" and ftype.value_type == pa.float32():
        # the flat storage holds the column's float32 vectors (normalized for cosine, which
        # leaves cosine distances alone): no read of the data
        vectors = {j: index.codes[rows] for j, (_, rows, _) in enumerate(found)}
    elif exact:
        # one read of every candidate's vector, for all queries
        every = np.unique(np.concatenate([addrs[rows] for _, rows, _ in found])) if found else np.zeros(0, np.uint64)
        every = every[every != _GONE]
        if every.size:
            x_all = _vectors_of(plan, ds, executor, every, nq.column, dim)
            # (a row no fragment holds gets any vector: it is dropped below)
            vectors = {j: x_all[np.minimum(np.searchsorted(every, addrs[rows]), every.size - 1)]
                       for j, (_, rows, _) in enumerate(found)}
    tops: list[TopK] = []
    for j, (d, rows, shortcut) in enumerate(found):
        top = TopK(nq.k)
        cand_addr = addrs[rows]
        if ds.has_stable_row_ids and np.any(cand_addr == _GONE):
            there = cand_addr != _GONE
            d, rows, cand_addr = d[there], rows[there], cand_addr[there]
            if j in vectors:
                vectors[j] = vectors[j][there]
        if exact and cand_addr.size:
            d = _exact_distances(vectors[j], q[j], index.metric).astype(np.float32)
        if shortcut:
            # no more allowed rows than k, and the first probes missed some: pylance searches
            # no further and returns the missed ones at +inf
            missing = np.setdiff1d(addrs[allowed], cand_addr)
            cand_addr = np.concatenate([cand_addr, missing])
            d = np.concatenate([d, np.full(missing.size, np.inf, np.float32)])
        top.push(d.astype(np.float64), cand_addr)
        tops.append(top)
    if unindexed:
        sub = replace(plan, **_only_fragments(plan, set(unindexed)))
        flat = search_host(sub, ds, executor, replace(nq, metric=index.metric), q, q.dtype, dim)
        for top, (dist, addr) in zip(tops, flat, strict=True):
            top.push(np.asarray(dist, np.float64), addr)
    return [(t.dist, t.addr) for t in tops]


def describe_search(plan: ScanPlan, ds: TableSnapshot) -> list[str]:
    """The plan lines of a ``nearest`` search, named as pylance's operators are: the index
    probe (``ANNSubIndex``) when a vector index serves it, and ``KNNVectorDistance`` for the
    rows searched exactly (no index, or the fragments the index does not cover)."""
    nq = plan.nearest
    assert nq is not None
    meta = None
    if nq.use_index and not nq.multivector and nq.distance_range == (None, None):
        meta = vector_index_of(ds, nq.column)
    flat = f"  KNNVectorDistance: metric={nq.metric}"
    if meta is None:
        return [flat]
    covered = {int(f) for f in _bitmap(meta)}
    lines = [f"  ANNSubIndex: name={meta.name}, k={nq.k}, column={nq.column}"]
    unindexed = [fid for fid in plan.fragment_ids if fid not in covered]
    if unindexed:
        lines.append(f"{flat}, fragments={unindexed}")
    return lines


def _only_fragments(plan: ScanPlan, keep: set[int]) -> dict[str, Any]:
    pairs = [(fid, sel) for fid, sel in zip(plan.fragment_ids, plan.selections, strict=True) if fid in keep]
    return {"fragment_ids": tuple(p[0] for p in pairs), "selections": tuple(p[1] for p in pairs)}


def _bitmap(meta: table_pb2.IndexMetadata) -> list[int]:
    from pyroaring import BitMap

    if not meta.fragment_bitmap:
        return []
    return list(BitMap.deserialize(bytes(meta.fragment_bitmap)))
