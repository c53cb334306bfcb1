# SPDX-License-Identifier: Apache-2.0
"""The page table of a pass: every page of every leaf column of every file, as arrays.

A page's ``PageLayout`` protobuf (``encoding.value`` of its ``PageInfo``) repeats across the
pages of a column and across the files of a dataset written alike (same encodings, same page
sizes: only the last page of a column usually differs).  The planner therefore parses each
*distinct* layout once per process (:func:`layout_facts`, keyed by the protobuf's bytes) into
a :class:`LayoutFacts`: the message, its kind, the scalars every page of it has (items,
visible items, layers, repetition / definition levels, value buffers) and the facts the
planner and the device pre-pass derive from it (whether the GPU decodes it for a leaf of a
given kind, its chunk-header shape bits, its emission group key), each derived once per
layout.

Per column of a file (:class:`ColumnPages`, one per parsed ``ColumnInfo``, which files
written alike share) each page's layout is found once; what the planner reads of a column
(:meth:`ColumnPages.select`: the pages' ``PageInfo``, layouts, buffer counts and buffer
ranges) is made in one Python pass over its pages, once per column and process; and the
pages as arrays (:class:`ColumnArrays`, ``int64`` unless noted), made when a leaf's table asks::

    offsets[p, b], sizes[p, b]   buffer b of page p (b < max buffers; padding: 0, 0)
    nbuf[p]                      buffers of page p
    num_rows[p]                  top-level rows of page p
    layout[p]   (int32)          its LayoutFacts: ``layouts[layout[p]]`` (-1: it does not
                                 parse; :func:`layout_facts` raises why, naming the file)

A leaf whose pages all go to the device pre-pass (dictionary pages too), or are all
full-zip pages, or all constant pages, is planned from its column's arrays as a
:class:`LeafPages` table (:meth:`ColumnPages.leaf_pages`; ``plan._table_column``): the planner, the pre-pass's chunk table (``headers.ChunkTable``),
the level settling and the work emission key its pages by row, with no per-page Python
object; a whole column's table, and what the planner derives from it, is made once and
shared by every file reading the column.  So is a leaf whose pages are of several of these
kinds (mini-block pages beside full-zip or constant ones): its table's rows split by kind
(:meth:`LeafPages.take`, ``plan._MixedColumn``), each kind placed by what places a table of
it (mini-block pages with dictionaries or not).  In any file, memory-mapped or on an object
store; a row selection's pages too (mini-block pages cut to chunks, ``plan.ChunkCut``;
full-zip pages to row runs, ``plan.RowRuns``).  Every leaf the planner takes is such a
table (pages no table takes make their field fall back to the CPU reader,
``plan._refuse``).  A read unit places the same column of its many fragments (files) as one *pass table*
(:func:`concat`: their leaves' tables back to back, each distinct layout once;
``passplan``), so that what costs per page is array work, not Python per leaf.
"""

from __future__ import annotations

import operator
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lance_gpu.file.container import ColumnInfo, PageInfo
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.reader import parse_layout

#: page kinds as codes (a mixed leaf's rows split by kind: ``plan._MixedColumn``; -1:
#: another layout, which the planner refuses)
KIND_CODES = {"mini_block_layout": 0, "full_zip_layout": 1, "constant_layout": 2}
#: layouts (protobuf bytes) larger than this are parsed per page, not kept (FSST symbol
#: tables make layouts that rarely repeat)
SHARED_LAYOUT_BYTES = 4096
#: distinct layouts kept per process (the cache is emptied when it is full)
SHARED_LAYOUTS_MAX = 1 << 12
#: pages of the columns whose page selections are kept per process (the cache holds their
#: ``ColumnInfo``; it is emptied when a column would pass this)
SHARED_COLUMN_PAGES_MAX = 1 << 18


@dataclass(slots=True, eq=False)
class LayoutFacts:
    """One distinct page layout, parsed once (see the module docstring).  ``message`` is the
    ``PageLayout``; ``body`` its ``mini_block_layout`` / ``full_zip_layout`` /
    ``constant_layout``; both are shared by every page of this layout and never mutated."""

    message: Any
    kind: str
    body: Any
    num_items: int  # mini-block / full-zip items; -1 for constant pages
    num_visible: int  # values: mini-block num_items, full-zip num_visible_items; -1 constant
    has_rep: bool
    has_def: bool
    layers: tuple[int, ...]
    num_buffers: int  # mini-block value buffers (0 otherwise)
    #: a mini-block page without repetition levels and at most three value buffers: its chunk
    #: headers are parsed on the device (``plan.device_headers``)
    device_headers: bool
    #: a mini-block page with a page dictionary
    dictionary: bool = False
    #: (leaf kind, bytes per value) of leaves ``plan.check_page`` accepted this layout for
    accepted: set[tuple[str, int]] = field(default_factory=set)
    #: the chunk-header shape bits and inline word of the device pre-pass (``headers``),
    #: once derived
    chunk_shape: tuple[int, int] | None = None
    #: ``plan._group_key`` per leaf kind, once derived
    group_keys: dict[str, tuple] = field(default_factory=dict)


def _facts(layout) -> LayoutFacts:
    kind = layout.WhichOneof("layout")
    body: Any = getattr(layout, kind) if kind else None
    if kind == "mini_block_layout":
        has_rep, has_def = body.HasField("rep_compression"), body.HasField("def_compression")
        n = int(body.num_items)
        nbuf = int(body.num_buffers)
        return LayoutFacts(layout, kind, body, n, n, has_rep, has_def, tuple(int(x) for x in body.layers), nbuf,
                           not has_rep and nbuf <= 3, body.HasField("dictionary"))
    if kind == "full_zip_layout":
        return LayoutFacts(layout, kind, body, int(body.num_items), int(body.num_visible_items), int(body.bits_rep) > 0,
                           int(body.bits_def) > 0, tuple(int(x) for x in body.layers), 0, False)
    # constant (counts in its buffers) and layouts the planner refuses (check_page says why)
    return LayoutFacts(layout, str(kind), body, -1, -1, False, False, (), 0, False)


_layouts: dict[tuple[str, bytes], LayoutFacts] = {}
_columns: dict[int, tuple[ColumnInfo, ColumnPages]] = {}
_column_pages_held = 0
_lock = threading.Lock()
#: distinct layouts parsed in this process (tests pin the sharing)
layout_parses = 0


def layout_facts(page: PageInfo, ctx: DecodeContext) -> LayoutFacts:
    """The :class:`LayoutFacts` of ``page``'s layout, parsed once per distinct protobuf
    (``parse_layout``'s errors, naming ``ctx``, for a bad one: never kept)."""
    global layout_parses
    enc = page.encoding
    value = enc.value
    key = (enc.type_url, value)
    got = _layouts.get(key)
    if got is not None:
        return got
    facts = _facts(parse_layout(page, ctx))
    with _lock:
        layout_parses += 1
        if len(value) <= SHARED_LAYOUT_BYTES:
            if len(_layouts) >= SHARED_LAYOUTS_MAX:
                _layouts.clear()
            _layouts[key] = facts
    return facts


@dataclass(slots=True, eq=False)
class PageSelection:
    """Some pages of a column (:meth:`ColumnPages.select`) as the planner takes them: their
    indices and ``PageInfo``, layouts (per page, and the distinct ones in order of first use),
    buffer counts, every buffer's ``(offset, size)`` in page order and their total size."""

    ids: list[int]
    pages: list[PageInfo]
    layouts: list[LayoutFacts]
    distinct: list[LayoutFacts]
    nbuf: list[int]
    ranges: list[tuple[int, int]]
    nbytes: int  # the pages' buffer bytes, all buffers (deferred ones too)


@dataclass(slots=True, eq=False)
class ColumnArrays:
    """A column's pages as arrays (the module docstring)."""

    offsets: np.ndarray
    sizes: np.ndarray
    nbuf: np.ndarray
    num_rows: np.ndarray
    layout: np.ndarray


@dataclass(slots=True, eq=False)
class ColumnPages:
    """The pages of one column of one file: each page's layout (``index``: into ``layouts``,
    -1 where it does not parse), the planner's selection of every page and the page arrays,
    each made once, when first asked for."""

    pages: list[PageInfo]
    index: list[int]
    layouts: list[LayoutFacts]
    _all: PageSelection | None = None
    _arrays: ColumnArrays | None = None
    _whole: LeafPages | None = None
    #: the planner's decisions about the whole column, made once (``plan.plan_leaf``)
    memo: dict = field(default_factory=dict)

    @property
    def num_pages(self) -> int:
        return len(self.pages)

    def select(self, ids: list[int] | None) -> PageSelection:
        """Pages ``ids`` (None: all, kept for the next read of this column); raises
        ``LookupError(page)`` for the first page whose layout does not parse."""
        if ids is None and self._all is not None:
            return self._all
        sel = list(range(len(self.pages))) if ids is None else [int(i) for i in ids]
        layouts = self.layouts
        per_page = []
        distinct: dict[int, LayoutFacts] = {}
        for i in sel:
            j = self.index[i]
            if j < 0:
                raise LookupError(i)
            facts = layouts[j]
            per_page.append(facts)
            distinct.setdefault(j, facts)
        pages = [self.pages[i] for i in sel]
        ranges = [(o, s) for p in pages for o, s in zip(p.buffer_offsets, p.buffer_sizes, strict=True)]
        out = PageSelection(
            sel, pages, per_page, list(distinct.values()), [len(p.buffer_offsets) for p in pages], ranges,
            sum(int(s) for _o, s in ranges),
        )
        if ids is None:
            self._all = out
        return out

    def leaf_pages(self, ids: list[int] | None) -> LeafPages:
        """Pages ``ids`` (None: all, made once and shared by every leaf reading the whole
        column: never mutated, see :class:`LeafPages`) as a :class:`LeafPages` table: array
        work over the column's arrays and one step per distinct layout."""
        if ids is None:
            if self._whole is None:
                self._whole = _leaf_pages(self, None)
            return self._whole
        return _leaf_pages(self, ids)

    def kind_codes(self, at: slice | np.ndarray) -> np.ndarray:
        """The page kind (:data:`KIND_CODES`, -1 for another layout) of pages ``at`` (a
        slice or indices into the column's pages), int8."""
        codes = np.asarray([KIND_CODES.get(f.kind, -1) for f in self.layouts], np.int8).reshape(len(self.layouts))
        return codes[self.arrays().layout[at]]

    def arrays(self) -> ColumnArrays:
        """The page arrays (:class:`ColumnArrays`), made once."""
        if self._arrays is not None:
            return self._arrays
        pages = self.pages
        n = len(pages)
        nbuf = np.fromiter((len(p.buffer_offsets) for p in pages), np.int64, n)
        width = int(nbuf.max()) if n else 0
        offsets = np.zeros((n, width), np.int64)
        sizes = np.zeros((n, width), np.int64)
        held = np.arange(width)[None, :] < nbuf[:, None]
        offsets[held] = np.fromiter((o for p in pages for o in p.buffer_offsets), np.int64, int(nbuf.sum()))
        sizes[held] = np.fromiter((s for p in pages for s in p.buffer_sizes), np.int64, int(nbuf.sum()))
        num_rows = np.fromiter((p.num_rows for p in pages), np.int64, n)
        self._arrays = ColumnArrays(offsets, sizes, nbuf, num_rows, np.asarray(self.index, np.int32).reshape(n))
        return self._arrays


@dataclass(slots=True, eq=False)
class LeafPages:
    """Some pages of one leaf column as a table (struct of arrays, ``int64`` unless noted;
    row ``j`` is the ``j``-th page the leaf decodes, :meth:`ColumnPages.leaf_pages`)::

        ids[j]                 the page's index in its column (error messages)
        layout[j]   (int32)    its LayoutFacts: ``layouts[layout[j]]`` (every one parses)
        offsets[j, b], sizes[j, b]   buffer b of the page (padding: 0, 0)
        num_rows[j]            top-level rows
        num_values[j]          values (mini-block ``num_items``, full-zip visible items)
        num_levels[j]          repetition / definition levels: a full-zip page's items; a
                               mini-block page's ``num_values``, or with repetition levels
                               the estimate ``num_values + num_rows`` until the device
                               pre-pass reads the in-band counts (then theirs)
        has_rep[j], has_def[j]  (bool)
        nbuf[j]                buffers of the page

    A constant page's counts and levels are in its buffers: a column's table holds -1 values
    and no levels for it: a leaf of constant pages keeps the column's table and its file's
    decoded pages beside it (``plan.LeafPlan.constant_pages``, ``plan._plan_constant_table``;
    nobody reads such a table's counts or :meth:`derived`).  A leaf planned as such a table has no per-page Python object (``plan.LeafPlan.table``).
    A whole column's table is shared by the leaves of every file reading that column
    (:meth:`ColumnPages.leaf_pages`): nobody mutates one; a leaf whose level counts are
    in-band gets a copy with its own ``num_levels`` (``headers.settle_levels``).  ``memo``
    holds what is derived from the table once (:meth:`derived`, the planner's per-column
    decisions); a copy starts with an empty one."""

    ids: np.ndarray
    layout: np.ndarray
    layouts: list[LayoutFacts]
    offsets: np.ndarray
    sizes: np.ndarray
    num_rows: np.ndarray
    num_values: np.ndarray
    num_levels: np.ndarray
    has_rep: np.ndarray
    has_def: np.ndarray
    nbuf: np.ndarray
    memo: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.ids.size)

    def derived(self) -> Derived:
        """The table's :class:`Derived` scalars and lists, made once."""
        got = self.memo.get("derived")
        if got is None:
            got = self.memo["derived"] = _derived(self)
        return got

    def per_layout(self, values: list, dtype) -> np.ndarray:
        """``values[k]`` (one per distinct layout) of every page."""
        return np.asarray(values, dtype).reshape(len(self.layouts))[self.layout]

    def take(self, rows: np.ndarray) -> LeafPages:
        """The table of rows ``rows`` (increasing) only, its ``layouts`` the ones they use (in
        the order of this table's) and an empty ``memo``: the pages of one kind of a leaf
        whose pages are of several (``plan._MixedColumn``)."""
        rows = np.asarray(rows, np.int64)
        used = np.unique(self.layout[rows])
        remap = np.full(len(self.layouts), -1, np.int32)
        remap[used] = np.arange(used.size, dtype=np.int32)
        return LeafPages(self.ids[rows], remap[self.layout[rows]], [self.layouts[int(k)] for k in used.tolist()],
                         self.offsets[rows], self.sizes[rows], self.num_rows[rows], self.num_values[rows],
                         self.num_levels[rows], self.has_rep[rows], self.has_def[rows], self.nbuf[rows])


@dataclass(slots=True, frozen=True)
class Derived:
    """What the planner reads of a :class:`LeafPages` table many times, made once: the
    totals of its values, levels and rows; each page's first value and level within the
    table (``vpos``, ``lpos``: exclusive scans of ``num_values``, ``num_levels``; and
    ``vpos_list``); and, for tables of a few pages, the values and the offsets and sizes of
    buffers 0 and 1 (mini-block: chunk metadata and chunks; full-zip: data and repetition
    index; 0 where a page has no such buffer) as lists (scalar placement: NumPy's per-call
    cost exceeds the loop's)."""

    num_values: int
    num_levels: int
    num_rows: int
    vpos: np.ndarray
    lpos: np.ndarray
    vpos_list: list[int]
    values_list: list[int]
    buf1_offsets: list[int]
    buf1_sizes: list[int]
    buf0_offsets: list[int]
    buf0_sizes: list[int]


def _derived(t: LeafPages) -> Derived:
    vpos = np.zeros(len(t), np.int64)
    np.cumsum(t.num_values[:-1], out=vpos[1:])
    lpos = np.zeros(len(t), np.int64)
    np.cumsum(t.num_levels[:-1], out=lpos[1:])
    width = t.offsets.shape[1]
    off = t.offsets[:, 1].tolist() if width > 1 else [0] * len(t)
    size = t.sizes[:, 1].tolist() if width > 1 else [0] * len(t)
    off0 = t.offsets[:, 0].tolist() if width else [0] * len(t)  # (pages without buffers: all-null columns)
    size0 = t.sizes[:, 0].tolist() if width else [0] * len(t)
    return Derived(int(t.num_values.sum()), int(t.num_levels.sum()), int(t.num_rows.sum()), vpos, lpos, vpos.tolist(),
                   t.num_values.tolist(), off, size, off0, size0)


def _leaf_pages(cp: ColumnPages, ids: list[int] | None) -> LeafPages:
    ca = cp.arrays()
    sel = np.arange(cp.num_pages, dtype=np.int64) if ids is None else np.asarray(ids, np.int64).reshape(-1)
    layout = ca.layout[sel]
    if layout.size and int(layout.min()) < 0:
        msg = "leaf pages of a page whose layout does not parse (layout_facts raises why)"
        raise ValueError(msg)
    layouts = cp.layouts
    num_rows = ca.num_rows[sel]
    k = len(layouts)
    n = np.asarray([f.num_visible for f in layouts], np.int64).reshape(k)[layout]
    rep = np.asarray([f.has_rep for f in layouts], np.bool_).reshape(k)[layout]
    dfn = np.asarray([f.has_def for f in layouts], np.bool_).reshape(k)[layout]
    # levels: a full-zip page's items; a mini-block page's values, or with repetition levels
    # the estimate values + rows
    items = np.asarray([f.num_items if f.kind == "full_zip_layout" else f.num_visible for f in layouts], np.int64).reshape(k)[layout]
    estimate = np.asarray([f.has_rep and f.kind == "mini_block_layout" for f in layouts], np.bool_).reshape(k)[layout]
    return LeafPages(sel, layout, layouts, ca.offsets[sel], ca.sizes[sel], num_rows, n, np.where(estimate, items + num_rows, items), rep, dfn,
                     ca.nbuf[sel])


def column_pages(column: ColumnInfo, ctx: DecodeContext) -> ColumnPages:
    """:class:`ColumnPages` of a parsed column, made once per ``ColumnInfo`` object (files
    written alike share theirs, ``file.container``); a page whose layout does not parse gets
    index -1 (:func:`layout_facts` raises why, naming the file that plans it)."""
    got = _columns.get(id(column))
    if got is not None and got[0] is column:
        return got[1]
    distinct: dict[int, int] = {}
    layouts: list[LayoutFacts] = []
    index = []
    for p in column.pages:
        try:
            facts = layout_facts(p, ctx)
        except Exception:  # noqa: BLE001  -- raised again by layout_facts (naming the file that reads it) if planned
            index.append(-1)
            continue
        j = distinct.get(id(facts))
        if j is None:
            j = distinct[id(facts)] = len(layouts)
            layouts.append(facts)
        index.append(j)
    out = ColumnPages(list(column.pages), index, layouts)
    global _column_pages_held
    with _lock:
        if _column_pages_held + len(index) > SHARED_COLUMN_PAGES_MAX:
            _columns.clear()
            _column_pages_held = 0
        _columns[id(column)] = (column, out)  # the ColumnInfo held: its id is not reused
        _column_pages_held += len(index)
    return out


def concat(tables: list[LeafPages]) -> tuple[LeafPages, np.ndarray]:
    """The rows of ``tables`` back to back as one :class:`LeafPages` (a *pass table*: the
    same column of several files, ``passplan``), and ``edges`` (``int64``, one more than
    ``tables``): table ``k``'s rows are ``edges[k]:edges[k + 1]``.  Each distinct layout is
    held once (by identity; ``layout`` renumbered with one take over all rows), buffer
    columns padded to the widest table; one concatenation per column, no Python per row.
    The result is new (its ``memo`` empty); the tables are not changed."""
    n = len(tables)
    distinct: dict[int, int] = {}
    layouts: list[LayoutFacts] = []
    remaps: dict[int, int] = {}  # id(a table's layouts) -> its first entry in ``renumber``
    renumber: list[int] = []
    first = np.empty(n, np.int64)
    for k, t in enumerate(tables):
        at = remaps.get(id(t.layouts))
        if at is None:
            at = remaps[id(t.layouts)] = len(renumber)
            for f in t.layouts:
                j = distinct.get(id(f))
                if j is None:
                    j = distinct[id(f)] = len(layouts)
                    layouts.append(f)
                renumber.append(j)
        first[k] = at
    # the tables' columns as one list each (one attribute fetch per table, not per column)
    ids, lay, offs, sizes_, rows, values, levels, rep, dfn, nbuf = zip(*map(_COLUMNS, tables), strict=True)
    counts = np.fromiter(map(len, ids), np.int64, n)
    edges = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=edges[1:])
    layout = np.asarray(renumber, np.int32)[np.concatenate(lay) + np.repeat(first, counts)]
    widths = {o.shape[1] for o in offs}
    if len(widths) == 1:
        offsets, sizes = np.concatenate(offs), np.concatenate(sizes_)
    else:  # files whose pages hold more buffers: padded (0, 0)
        w = max(widths)
        offsets = np.concatenate([np.pad(o, ((0, 0), (0, w - o.shape[1]))) for o in offs])
        sizes = np.concatenate([np.pad(z, ((0, 0), (0, w - z.shape[1]))) for z in sizes_])
    out = LeafPages(np.concatenate(ids), layout, layouts, offsets, sizes, np.concatenate(rows), np.concatenate(values),
                    np.concatenate(levels), np.concatenate(rep), np.concatenate(dfn), np.concatenate(nbuf))
    return out, edges


_COLUMNS = operator.attrgetter("ids", "layout", "offsets", "sizes", "num_rows", "num_values", "num_levels", "has_rep", "has_def", "nbuf")


def clear() -> None:
    """Forget the shared layouts and column page selections (tests, benchmarks)."""
    global _column_pages_held
    with _lock:
        _layouts.clear()
        _columns.clear()
        _column_pages_held = 0


__all__ = ["KIND_CODES", "ColumnArrays", "ColumnPages", "Derived", "LayoutFacts", "LeafPages", "PageSelection", "clear", "column_pages", "concat", "layout_facts"]
