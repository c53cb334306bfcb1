# SPDX-License-Identifier: Apache-2.0
"""Scalar index readers: the rows a BTree, Bitmap or LabelList index selects for a term.

File layouts (pylance 14 writes them in ``_indices/<uuid>/`` as Lance files of the dataset's file
version, 2.0 to 2.2):

**BTree** (``index_version`` 0)

* ``page_data.lance``: ``values: <column type>``, ``ids: uint64 not null`` -- every indexed
  row's value and row address, sorted by value (nulls first, floats in IEEE total order:
  ``-0.0`` before ``0.0``, NaN last), ties by row address; read in pages of ``batch_size``
  rows (page ``p`` is rows ``[p * batch_size, (p + 1) * batch_size)``);
* ``page_lookup.lance``: one row per page: ``min`` / ``max`` (its first and last value, so
  ``min`` is null on a page that holds nulls), ``null_count: uint32``, ``page_idx: uint32``;
  schema metadata ``batch_size`` (4096) and ``range_partitioned`` (``false``).

**Bitmap** (``index_version`` 0) and **LabelList** (``index_version`` 1)

* ``bitmap_page_lookup.lance``: ``keys: <column type>`` (LabelList: the list's item type),
  ``bitmaps: binary`` -- one row per distinct value, sorted, the null key first; each bitmap
  the rows holding that value (LabelList: the rows whose list contains it; the null key: the
  rows whose list is null), serialized as in :mod:`lance_gpu.index.rowset`.  Schema metadata
  ``lance:index_stats`` = ``{"num_bitmaps":<rows>}``; LabelList also ``lance:label_list_nulls``
  = ``1``.

Answers are supersets the caller refines: the scan applies the whole filter to the rows an
index selects, so a term may select more rows than match (float comparisons are widened to
cover ``-0.0`` / ``0.0`` and NaN, which lance orders differently from IEEE), never fewer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError
from lance_gpu.index.files import IndexFile
from lance_gpu.index.metadata import BITMAP_DETAILS, BTREE_DETAILS, LABEL_LIST_DETAILS, index_dir
from lance_gpu.index.rowset import deserialize_rowset, intersection, rowset_from_addresses, union
from lance_gpu.io.store import ObjectStore, join

__all__ = [
    "BITMAP_LOOKUP",
    "BTREE_LOOKUP",
    "BTREE_PAGES",
    "Term",
    "Unusable",
    "open_scalar_index",
]

BTREE_PAGES = "page_data.lance"
BTREE_LOOKUP = "page_lookup.lance"
BITMAP_LOOKUP = "bitmap_page_lookup.lance"


class Unusable(Exception):
    """This index cannot answer this term (the scan reads every row instead)."""


@dataclass(frozen=True)
class Term:
    """One condition on one column an index may answer.

    ``kind``: ``eq`` / ``neq`` / ``in`` / ``not_in`` (``values``), ``range`` (``low`` / ``high``, None =
    unbounded, with inclusiveness), ``is_null`` / ``is_not_null``, ``has_any`` / ``has_all``
    (``values``: list items).
    ``text``: how pylance's ``explain_plan`` shows it (``i = 5``).
    """

    kind: str
    column: str
    text: str
    values: tuple[pa.Scalar, ...] = ()
    low: pa.Scalar | None = None
    low_inclusive: bool = True
    high: pa.Scalar | None = None
    high_inclusive: bool = True


def _cast(value: pa.Scalar, to: pa.DataType) -> pa.Scalar:
    if not value.is_valid:
        raise Unusable("a NULL literal")
    if value.type == to:
        return value
    try:
        return value.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise Unusable(f"{value} as {to}") from None


def _is_float(t: pa.DataType) -> bool:
    return pa.types.is_floating(t)


def _nan(value: pa.Scalar) -> bool:
    return _is_float(value.type) and value.as_py() != value.as_py()


def _true(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean mask as numpy, NULL read as false."""
    return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), np.bool_)


def _may(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean mask as numpy, NULL read as true (unknown: keep)."""
    return np.asarray(pc.fill_null(mask, True).to_numpy(zero_copy_only=False), np.bool_)


def value_mask(values: pa.Array, term: Term) -> np.ndarray:
    """Where ``values`` may satisfy ``term`` (eq / in / range / is_null): a superset for
    floats (bounds made inclusive, NaN always kept)."""
    t = values.type
    if term.kind == "is_null":
        return np.asarray(values.is_null().to_numpy(zero_copy_only=False), np.bool_)
    if term.kind == "is_not_null":
        return np.asarray(values.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    if term.kind == "not_in":
        vals = [_cast(v, t) for v in term.values]
        if any(_nan(v) for v in vals):
            raise Unusable("NaN")
        if not vals:
            return np.asarray(values.is_valid().to_numpy(zero_copy_only=False), np.bool_)
        return _true(pc.invert(pc.is_in(values, value_set=pa.array([v.as_py() for v in vals], t)))) & \
            np.asarray(values.is_valid().to_numpy(zero_copy_only=False), np.bool_)
    if term.kind == "neq":
        v = _cast(term.values[0], t)
        if _nan(v):
            raise Unusable("NaN")
        # (IEEE: NaN differs from every value, as in lance's order; -0.0 equals 0.0, as lance
        # compares with a zero constant)
        return _true(pc.not_equal(values, v))
    floating = _is_float(t)
    if term.kind in ("eq", "in"):
        vals = [_cast(v, t) for v in term.values]
        if any(_nan(v) for v in vals):
            raise Unusable("NaN")
        if not vals:
            return np.zeros(len(values), np.bool_)
        mask = _true(pc.is_in(values, value_set=pa.array([v.as_py() for v in vals], t))) if len(vals) > 1 or not floating \
            else _true(pc.equal(values, vals[0]))
        if floating:
            mask |= _true(pc.equal(values, pa.scalar(0.0, t))) if any(v.as_py() == 0 for v in vals) else False
            mask |= _true(pc.is_nan(values))
        return mask
    if term.kind == "range":
        mask = np.ones(len(values), np.bool_)
        for bound, inclusive, op, op_inc in (
            (term.low, term.low_inclusive, pc.greater, pc.greater_equal),
            (term.high, term.high_inclusive, pc.less, pc.less_equal),
        ):
            if bound is None:
                continue
            b = _cast(bound, t)
            if _nan(b):
                raise Unusable("NaN bound")
            fn = op_inc if (inclusive or floating) else op
            mask &= _true(fn(values, b))
        mask &= _true(values.is_valid())
        if floating:
            mask |= _true(pc.is_nan(values))
        return mask
    raise Unusable(term.kind)


def _range_of(term: Term, t: pa.DataType) -> list[tuple[pa.Scalar | None, pa.Scalar | None]]:
    """The closed value ranges a term can match (for page pruning)."""
    if term.kind in ("eq", "in"):
        return [(_cast(v, t), _cast(v, t)) for v in term.values]
    if term.kind == "range":
        lo = None if term.low is None else _cast(term.low, t)
        hi = None if term.high is None else _cast(term.high, t)
        return [(lo, hi)]
    raise Unusable(term.kind)


class ScalarIndex:
    """An open scalar index of one manifest entry."""

    #: The term kinds this type answers.
    kinds: frozenset[str] = frozenset()

    def search(self, term: Term) -> dict[int, BitMap | None]:
        """The rows (per fragment) that may satisfy ``term``; raises :class:`Unusable`."""
        raise NotImplementedError


class BTreeIndex(ScalarIndex):
    """A BTree index (see the module docstring); the lookup is read when opened, data pages
    when a term needs them."""

    kinds = frozenset({"eq", "in", "range", "is_null"})

    def __init__(self, store: ObjectStore, directory: str) -> None:
        self.pages = IndexFile(store, join(directory, BTREE_PAGES))
        lookup = IndexFile(store, join(directory, BTREE_LOOKUP))
        try:
            meta = lookup.metadata
            if meta.get("range_partitioned", "false").lower() != "false":
                raise Unusable("a range-partitioned btree")
            try:
                self.batch_size = int(meta["batch_size"])
            except (KeyError, ValueError):
                raise CorruptFileError(lookup.path, "btree lookup without a batch_size") from None
            self.min = lookup.read("min")
            self.max = lookup.read("max")
            self.null_count = np.asarray(lookup.read("null_count").to_numpy(zero_copy_only=False), np.int64)
            self.page_idx = np.asarray(lookup.read("page_idx").to_numpy(zero_copy_only=False), np.int64)
        finally:
            lookup.close()
        self.type = self.pages.schema.field("values").type
        #: rows read from page_data by the searches so far (what a test counts)
        self.rows_read = 0

    def _pages(self, term: Term) -> np.ndarray:
        if term.kind == "is_null":
            return self.page_idx[self.null_count > 0]
        may = np.zeros(self.page_idx.size, np.bool_)
        for lo, hi in _range_of(term, self.type):
            if (lo is not None and _nan(lo)) or (hi is not None and _nan(hi)):
                raise Unusable("NaN bound")
            ok = np.ones(self.page_idx.size, np.bool_)
            if lo is not None:
                ok &= ~_true(pc.less(self.max, lo))  # a NULL max (all-null page) is kept
            if hi is not None:
                ok &= ~_true(pc.greater(self.min, hi))  # NULL min: the page starts with nulls
            may |= ok
        return self.page_idx[may]

    def search(self, term: Term) -> dict[int, BitMap | None]:
        if term.kind not in self.kinds:
            raise Unusable(term.kind)
        pages = np.unique(self._pages(term))
        n = self.pages.num_rows
        found: list[np.ndarray] = []
        k = 0
        while k < pages.size:  # runs of adjacent pages, one read each
            j = k
            while j + 1 < pages.size and pages[j + 1] == pages[j] + 1:
                j += 1
            start, stop = int(pages[k]) * self.batch_size, min(n, (int(pages[j]) + 1) * self.batch_size)
            k = j + 1
            if start >= stop:
                continue
            # (a take of a run decodes only the mini-block chunks of the run, not the file page)
            values = self.pages.take("values", np.arange(start, stop, dtype=np.int64))
            mask = value_mask(values, term)
            self.rows_read += stop - start
            if mask.any():
                ids = self.pages.take("ids", start + np.flatnonzero(mask))
                found.append(np.asarray(ids.to_numpy(zero_copy_only=False), np.uint64))
        return rowset_from_addresses(np.concatenate(found) if found else np.zeros(0, np.uint64))


class BitmapIndex(ScalarIndex):
    """A Bitmap index: the keys are read when opened, a key's bitmap when a term needs it
    (``!=`` and ``IS NOT NULL`` too: the union of the other keys' bitmaps)."""

    kinds = frozenset({"eq", "in", "range", "is_null", "neq", "not_in", "is_not_null"})

    def __init__(self, store: ObjectStore, directory: str) -> None:
        self.file = IndexFile(store, join(directory, BITMAP_LOOKUP))
        self.keys = self.file.read("keys")
        self.bitmaps_read = 0

    def _bitmaps(self, positions: np.ndarray) -> list[dict[int, BitMap | None]]:
        if positions.size == 0:
            return []
        data = self.file.take("bitmaps", positions)
        self.bitmaps_read += int(positions.size)
        return [deserialize_rowset(b.as_py(), self.file.path) for b in data]

    def search(self, term: Term) -> dict[int, BitMap | None]:
        if term.kind not in self.kinds:
            raise Unusable(term.kind)
        return union(self._bitmaps(np.flatnonzero(value_mask(self.keys, term))))


class LabelListIndex(BitmapIndex):
    """A LabelList index: a bitmap index of list items (``array_has_any`` / ``array_has_all``)."""

    kinds = frozenset({"has_any", "has_all"})

    def search(self, term: Term) -> dict[int, BitMap | None]:
        if term.kind not in self.kinds:
            raise Unusable(term.kind)
        t = self.keys.type
        values = [_cast(v, t) for v in term.values]
        if any(_nan(v) for v in values):
            raise Unusable("NaN")
        if term.kind == "has_all" and not values:
            raise Unusable("array_has_all of no values")
        valid = self.keys.is_valid()
        positions = []
        for v in values:
            hit = np.flatnonzero(_true(pc.and_(pc.equal(self.keys, v), valid)))
            if hit.size == 0 and term.kind == "has_all":
                return {}
            positions.append(hit)
        if term.kind == "has_any":
            hits = np.unique(np.concatenate(positions)) if positions else np.zeros(0, np.int64)
            return union(self._bitmaps(hits))
        result: dict[int, BitMap | None] | None = None
        for hit in positions:
            rows = union(self._bitmaps(hit))
            result = rows if result is None else intersection(result, rows)
        return result or {}


_TYPES: dict[str, type[ScalarIndex]] = {
    BTREE_DETAILS: BTreeIndex,
    BITMAP_DETAILS: BitmapIndex,
    LABEL_LIST_DETAILS: LabelListIndex,
}

_cache: OrderedDict[str, ScalarIndex] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_SIZE = 32


def open_scalar_index(store: ObjectStore, root: str, index: table_pb2.IndexMetadata) -> ScalarIndex | None:
    """The reader of a BTree / Bitmap / LabelList index (kept open across scans, as pylance
    caches its indices), or None for another type (vector, inverted ...)."""
    cls = _TYPES.get(index.index_details.type_url)
    if cls is None or index.HasField("base_id"):
        return None
    directory = index_dir(root, index)
    key = store.uri(directory)  # an index directory never changes
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    opened = cls(store, directory)  # type: ignore[call-arg]
    with _cache_lock:
        _cache[key] = opened
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return opened

