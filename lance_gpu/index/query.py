# SPDX-License-Identifier: Apache-2.0
"""Which rows of a scan a filter's indexed terms select (pylance's scalar index query).

The filter's resolved tree (:func:`lance_gpu.filter.predicate_tree`) is walked for terms
an index of the version answers on a top-level column: ``col = v``, ``<``, ``<=``, ``>``,
``>=`` (either side), ``BETWEEN``, ``IN (...)``, ``IS NULL`` (BTree, Bitmap), ``!=``,
``NOT IN``, ``IS NOT NULL`` and ``NOT`` of those (Bitmap), ``LIKE 'prefix%'`` and
``starts_with`` on strings (a range; BTree, Bitmap) and
``array_has_any`` / ``array_has_all`` / ``array_has`` / ``array_contains`` (LabelList),
joined by ``AND`` / ``OR``.  Each sub-tree gives a :class:`_Answer`: the fragments it
*covers* and, for those, the rows that may match; a fragment it does not cover may hold a
match anywhere.  ``AND`` covers what either side covers (intersecting where both do),
``OR`` what both cover (uniting); any other construct covers nothing.

A fragment an index entry's ``fragment_bitmap`` lists is covered by it; fragments appended
or rewritten later are not, and are scanned whole, as pylance does.  The scan still applies
the whole filter to the rows selected, so an index only narrows what is decoded.  Indices
on a dataset with stable row ids hold row ids (pylance 14: all but BTrees of ``index_version``
1, which hold addresses there): their row sets are mapped to addresses through the fragments'
row ids.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lance_gpu._proto import table_pb2
from lance_gpu.index.metadata import BTREE_DETAILS, fragment_bitmap, index_type_name
from lance_gpu.index.rowset import FULL, intersection, rowset_from_addresses, union
from lance_gpu.index.scalar import Term, Unusable, open_scalar_index
from lance_gpu.io.store import ObjectStore
from lance_gpu.table import features
from lance_gpu.table.schema import LanceSchema

__all__ = ["IndexSelection", "index_selections", "terms_of"]

_FLIP = {"lt": "gt", "lte": "gte", "gt": "lt", "gte": "lte", "eq": "eq", "neq": "neq"}
_SYMBOL = {"eq": "=", "neq": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}


@dataclass
class IndexSelection:
    """Rows to read per covered fragment (sorted live physical offsets, or None for every
    live row), and how each index was used (``explain_plan`` lines)."""

    selections: dict[int, np.ndarray | None]
    used: list[str] = field(default_factory=list)


@dataclass
class _Answer:
    covered: set[int]
    rows: dict[int, BitMap | None]
    used: list[str] = field(default_factory=list)


def _show(v: pa.Scalar) -> str:
    return str(v.as_py())


def _literal(node: Any) -> pa.Scalar | None:
    """A literal, or a CAST of one (``date '2024-01-05'``, ``timestamp '...'``) folded; None
    for anything else or a cast that fails."""
    from lance_gpu import filter as f

    if isinstance(node, f._Lit):
        return node.value
    if isinstance(node, f._Cast):
        inner = _literal(node.operand)
        if inner is not None:
            try:
                return inner.cast(node.to)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                return None
    return None


def _prefix_term(name: str, t: pa.DataType, prefix: str, text: str) -> Term | None:
    """Strings starting with ``prefix``: the range [prefix, the next string of its length)
    (UTF-8 orders as code points: the last code point is incremented, dropped when it is
    the largest)."""
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)) or not prefix:
        return None
    chars = list(prefix)
    while chars:
        cp = ord(chars[-1]) + 1
        if cp == 0xD800:
            cp = 0xE000
        if cp <= 0x10FFFF:
            chars[-1] = chr(cp)
            break
        chars.pop()
    high = pa.scalar("".join(chars), t) if chars else None
    return Term("range", name, text, low=pa.scalar(prefix, t), high=high, high_inclusive=False)


def _term(node: Any) -> Term | None:
    """The index term of one leaf of the tree, or None."""
    from lance_gpu import filter as f

    def column(n: Any) -> str | None:
        return n.path[0] if isinstance(n, f._Col) and len(n.path) == 1 else None

    if isinstance(node, f._Bin) and node.op in _SYMBOL:
        op, left, right = node.op, node.left, node.right
        if column(left) is None and column(right) is not None:
            op, left, right = _FLIP[op], right, left
        name = column(left)
        v = _literal(right)
        if name is None or v is None:
            return None
        text = f"{name} {_SYMBOL[op]} {_show(v)}"
        if op in ("eq", "neq"):
            return Term(op, name, text, (v,))
        if op in ("lt", "lte"):
            return Term("range", name, text, high=v, high_inclusive=op == "lte")
        return Term("range", name, text, low=v, low_inclusive=op == "gte")
    if isinstance(node, f._Between) and not node.negated:
        name = column(node.operand)
        low, high = _literal(node.low), _literal(node.high)
        if name is None or low is None or high is None:
            return None
        return Term("range", name, f"{name} BETWEEN {_show(low)} AND {_show(high)}", low=low, high=high)
    if isinstance(node, f._InList):
        name = column(node.operand)
        items = [_literal(i) for i in node.items]
        if name is None or any(v is None for v in items):
            return None
        values = tuple(v for v in items if v is not None)
        word = "NOT IN" if node.negated else "IN"
        return Term("not_in" if node.negated else "in", name, f"{name} {word} [{', '.join(_show(v) for v in values)}]", values)
    if isinstance(node, f._Unary) and node.op == "not":
        # NOT of a comparison keeps SQL's NULL (dropped): NOT (c = v) is c != v, NOT (c IN ...)
        # is c NOT IN ..., NOT (c IS NULL) is c IS NOT NULL
        inner = _term(node.operand)
        flip = {"eq": "neq", "neq": "eq", "in": "not_in", "not_in": "in", "is_null": "is_not_null", "is_not_null": "is_null"}
        if inner is None or inner.kind not in flip:
            return None
        return Term(flip[inner.kind], inner.column, f"NOT ({inner.text})", inner.values)
    if isinstance(node, f._Like) and not node.negated and not node.ignore_case:
        name = column(node.operand)
        pattern = _literal(node.pattern)
        like = pattern.as_py() if pattern is not None and pa.types.is_string(pattern.type) else None
        if name is None or not isinstance(node.operand, f._Col) or not isinstance(like, str) \
                or not like.endswith("%") or any(ch in like[:-1] for ch in "%_\\"):
            return None
        return _prefix_term(name, node.operand.type, like[:-1], f"{name} LIKE {like}")
    if isinstance(node, f._Func) and node.name == "starts_with" and len(node.args) == 2:
        name, operand = column(node.args[0]), node.args[0]
        prefix = _literal(node.args[1])
        if name is None or not isinstance(operand, f._Col) or prefix is None or not pa.types.is_string(prefix.type):
            return None
        return _prefix_term(name, operand.type, prefix.as_py(), f"starts_with({name}, {prefix.as_py()})")
    if isinstance(node, f._Unary) and node.op in ("is_null", "is_not_null"):
        name = column(node.operand)
        text = f"{name} IS NULL" if node.op == "is_null" else f"{name} IS NOT NULL"
        return None if name is None else Term(node.op, name, text)
    if isinstance(node, f._Func) and node.name in ("array_has_any", "array_has_all", "array_has") and len(node.args) == 2:
        name = column(node.args[0])
        arg = node.args[1]
        if name is None:
            return None
        if node.name == "array_has":
            if not isinstance(arg, f._Lit):
                return None
            return Term("has_any", name, f"array_has({name}, {_show(arg.value)})", (arg.value,))
        if not isinstance(arg, f._ArrayLit) or not all(isinstance(i, f._Lit) for i in arg.items):
            return None
        values = tuple(i.value for i in arg.items if isinstance(i, f._Lit))
        kind = "has_any" if node.name == "array_has_any" else "has_all"
        return Term(kind, name, f"{node.name}({name}, List([{', '.join(_show(v) for v in values)}]))", values)
    return None


def terms_of(node: Any) -> list[Term]:
    """Every index term in the tree (through AND / OR)."""
    from lance_gpu import filter as f

    if isinstance(node, f._Bin) and node.op in ("and", "or"):
        return terms_of(node.left) + terms_of(node.right)
    t = _term(node)
    return [] if t is None else [t]


class _Planner:
    def __init__(self, store: ObjectStore, root: str, section: table_pb2.IndexSection, schema: LanceSchema,
                 present: set[int], row_id_map: Callable[[], _RowIdMap] | None = None) -> None:
        """``row_id_map``: on a dataset with stable row ids, the map of its row ids to row
        addresses (built when an index of row ids is first used)."""
        self.store, self.root, self.present = store, root, present
        self.row_id_map = row_id_map
        self._map: _RowIdMap | None = None
        top = {fl.name: int(fl.id) for fl in schema.fields}
        #: column name -> index entries on it alone (grouped by index name, manifest order)
        self.by_column: dict[str, dict[str, list[table_pb2.IndexMetadata]]] = {}
        ids = {v: k for k, v in top.items()}
        for index in section.indices:
            if len(index.fields) != 1 or int(index.fields[0]) not in ids or fragment_bitmap(index) is None:
                continue
            self.by_column.setdefault(ids[int(index.fields[0])], {}).setdefault(index.name, []).append(index)

    def leaf(self, term: Term) -> _Answer:
        for name, entries in self.by_column.get(term.column, {}).items():
            try:
                readers = [open_scalar_index(self.store, self.root, e) for e in entries]
                if any(r is None or term.kind not in r.kinds for r in readers):
                    continue
                covered: set[int] = set()
                rows: dict[int, BitMap | None] = {}
                for entry, reader in zip(entries, readers, strict=True):
                    frags = set(fragment_bitmap(entry) or ()) & self.present
                    assert reader is not None
                    found = reader.search(term)
                    if self.row_id_map is not None and _holds_row_ids(entry):
                        if self._map is None:
                            self._map = self.row_id_map()
                        found = self._map.addresses(found)
                    rows = union([rows, {k: v for k, v in found.items() if k in frags}])
                    covered |= frags
            except Unusable:
                continue
            return _Answer(covered, rows, [f"[{term.text}]@{name}({index_type_name(entries[0])})"])
        return _Answer(set(), {})

    def walk(self, node: Any) -> _Answer:
        from lance_gpu import filter as f

        if isinstance(node, f._Bin) and node.op in ("and", "or"):
            a, b = self.walk(node.left), self.walk(node.right)
            if node.op == "and":
                rows = intersection(a.rows, b.rows)
                both = a.covered & b.covered
                rows = {k: v for k, v in rows.items() if k in both}
                rows.update({k: v for k, v in a.rows.items() if k in a.covered - b.covered})
                rows.update({k: v for k, v in b.rows.items() if k in b.covered - a.covered})
                used = [f"AND({','.join(a.used + b.used)})"] if a.used and b.used else a.used + b.used
                return _Answer(a.covered | b.covered, rows, used)
            covered = a.covered & b.covered
            if not covered:
                return _Answer(set(), {})
            rows = union([{k: v for k, v in a.rows.items() if k in covered}, {k: v for k, v in b.rows.items() if k in covered}])
            return _Answer(covered, rows, [f"OR({','.join(a.used + b.used)})"])
        term = _term(node)
        return _Answer(set(), {}) if term is None else self.leaf(term)


def _holds_row_ids(index: table_pb2.IndexMetadata) -> bool:
    """On a dataset with stable row ids: whether the index's rows are row ids (pylance 14:
    all but BTrees of ``index_version`` 1, which hold row addresses)."""
    return not (index.index_details.type_url == BTREE_DETAILS and int(index.index_version) >= 1)


class _RowIdMap:
    """Stable row id -> row address of every physical row of the scanned fragments."""

    def __init__(self, fragments: Sequence[Any]) -> None:
        ids = [np.asarray(fr.row_ids, np.uint64) for fr in fragments]
        addrs = [fr.row_addresses(None) for fr in fragments]
        all_ids = np.concatenate(ids) if ids else np.zeros(0, np.uint64)
        order = np.argsort(all_ids, kind="stable")
        self.ids = all_ids[order]
        self.addrs = (np.concatenate(addrs) if addrs else np.zeros(0, np.uint64))[order]

    def addresses(self, rows: dict[int, BitMap | None]) -> dict[int, BitMap | None]:
        """A row set of row ids (grouped by their high 32 bits) as one of row addresses;
        ids of rows no longer in the scanned fragments are dropped."""
        parts = []
        for hi, bitmap in rows.items():
            if bitmap is FULL:
                raise Unusable("a whole-range row id set")
            parts.append((np.uint64(hi) << np.uint64(32)) | np.frombuffer(bitmap.to_array(), np.uint32).astype(np.uint64))
        ids = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
        if self.ids.size == 0 or ids.size == 0:
            return {}
        pos = np.minimum(np.searchsorted(self.ids, ids), self.ids.size - 1)
        hit = self.ids[pos] == ids
        return rowset_from_addresses(self.addrs[pos[hit]])


_row_id_maps: OrderedDict[tuple, _RowIdMap] = OrderedDict()
_row_id_maps_lock = threading.Lock()


def _row_id_map(key: tuple, fragments: Sequence[Any]) -> _RowIdMap:
    """The :class:`_RowIdMap` of these fragments of a version, kept for the next scans (4)."""
    with _row_id_maps_lock:
        found = _row_id_maps.get(key)
        if found is not None:
            _row_id_maps.move_to_end(key)
            return found
    built = _RowIdMap(fragments)
    with _row_id_maps_lock:
        _row_id_maps[key] = built
        while len(_row_id_maps) > 4:
            _row_id_maps.popitem(last=False)
    return built


def index_selections(
    store: ObjectStore,
    root: str,
    manifest: table_pb2.Manifest,
    section: table_pb2.IndexSection | None,
    schema: LanceSchema,
    filter_schema: pa.Schema,
    filter_text: str,
    fragments: Sequence[Any],
) -> IndexSelection | None:
    """The rows the scalar indices of the version select for ``filter_text`` among
    ``fragments`` (objects with ``fragment_id``, ``physical_rows``, ``deleted_rows``,
    ``row_ids``, ``row_addresses``);
    None when no index answers any of its terms."""
    if section is None or not section.indices:
        return None
    stable = bool(int(manifest.writer_feature_flags) & features.FLAG_STABLE_ROW_IDS)
    from lance_gpu.filter import predicate_tree

    tree = predicate_tree(filter_text, filter_schema)
    if not terms_of(tree):
        return None
    present = {int(fr.fragment_id) for fr in fragments}
    key = (store.uri(root), int(manifest.version), tuple(sorted(present)))
    answer = _Planner(store, root, section, schema, present, (lambda: _row_id_map(key, fragments)) if stable else None).walk(tree)
    if not answer.covered:
        return None
    out: dict[int, np.ndarray | None] = {}
    for fr in fragments:
        fid = int(fr.fragment_id)
        if fid not in answer.covered:
            continue
        bitmap = answer.rows.get(fid, BitMap())
        if bitmap is FULL:
            out[fid] = None
            continue
        rows = np.frombuffer(bitmap.to_array(), np.uint32).astype(np.int64)
        rows = rows[rows < int(fr.physical_rows)]
        deleted = fr.deleted_rows
        if deleted.size:
            rows = rows[~np.isin(rows, deleted)]
        out[fid] = rows
    return IndexSelection(out, answer.used)
