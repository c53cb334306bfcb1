# SPDX-License-Identifier: Apache-2.0
"""Row selections on the GPU path: decode only what holds the selected rows.

A take, a pushed-down limit, a fragment's live rows or the survivors of a filter (late
materialization) select physical rows of a fragment.  Instead of decoding every page and
gathering, each leaf of a field decodes only its *units* that hold selected rows:

* a mini-block page without repetition: its chunks (a chunk holds ``counts[i]`` whole rows,
  one item per row; the page's data buffer is cut to the kept chunks' bytes);
* a full-zip page without repetition: single rows (fixed stride, or found through the
  repetition index), staged run by run;
* anything else (pages with repetition, constant / all-null pages): the whole page.

The rows a field decodes, ``U``, are the selected rows widened to unit boundaries: a sorted
list of disjoint half-open ``[start, end)`` row ranges (k x 2 int64).  Every leaf of a field
must decode the same rows to be assembled together, so ``U`` is widened for each leaf in turn
until no leaf widens it further (a fixpoint: one leaf's chunk can cross another's).  The
selected rows are then gathered from the decoded column at :func:`positions`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa

from lance_gpu.errors import CorruptFileError
from lance_gpu.file.arrow import leaf_types
from lance_gpu.file.container import LanceFileReader
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.v2_1 import miniblock
from lance_gpu.gpu import pagetable
from lance_gpu.gpu.plan import (
    ChunkCut,
    LeafPlan,
    RowRuns,
    check_field_leaves,
    miniblock_rows,
    plan_leaf,
    table_chunk_layouts,
)

__all__ = ["extent", "plan_field_rows", "positions", "ranges_of"]

_NO_RANGES = np.zeros((0, 2), np.int64)


def ranges_of(rows: np.ndarray) -> np.ndarray:
    """``rows`` (any order) as maximal ``[start, end)`` runs of consecutive ascending
    positions, in order (k x 2): ``rows == concat(arange(start, end))``."""
    rows = np.asarray(rows, np.int64)
    if not rows.size:
        return _NO_RANGES
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = rows[np.concatenate([[0], breaks])]
    ends = rows[np.concatenate([breaks - 1, [rows.size - 1]])] + 1
    return np.stack([starts, ends], axis=1)


def _merge(ranges: np.ndarray) -> np.ndarray:
    """Overlapping or touching ranges joined; sorted by start."""
    if not ranges.size:
        return _NO_RANGES
    r = ranges[np.argsort(ranges[:, 0], kind="stable")]
    reach = np.maximum.accumulate(r[:, 1])
    new = np.ones(r.shape[0], np.bool_)
    new[1:] = r[1:, 0] > reach[:-1]
    group = np.cumsum(new) - 1
    ends = np.zeros(int(new.sum()), np.int64)
    np.maximum.at(ends, group, r[:, 1])
    return np.stack([r[new, 0], ends], axis=1)


def _covered(points: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """Per point, whether it lies in one of the sorted disjoint ``ranges``."""
    if not ranges.size:
        return np.zeros(points.size, np.bool_)
    i = np.searchsorted(ranges[:, 0], points, side="right") - 1
    ok = i >= 0
    out = np.zeros(points.size, np.bool_)
    out[ok] = points[ok] < ranges[i[ok], 1]
    return out


class _LeafUnits:
    """The decodable units of one leaf column, found from page headers and chunk metadata
    (read only for the pages a selection's range ends fall in)."""

    def __init__(self, reader: LanceFileReader, column: int) -> None:
        self.reader = reader
        self.column = column
        self.pages = reader.column(column).pages
        self.page_start = np.zeros(len(self.pages) + 1, np.int64)
        np.cumsum([p.num_rows for p in self.pages], out=self.page_start[1:])
        self._units: dict[int, tuple[np.ndarray, np.ndarray, bool]] = {}

    def units(self, p: int) -> tuple[np.ndarray, np.ndarray, bool]:
        """``(starts, ends, fine)`` of page ``p``'s units in absolute rows; ``fine``: every row
        is a unit (the page is one entry then)."""
        got = self._units.get(p)
        if got is not None:
            return got
        page = self.pages[p]
        lo, hi = int(self.page_start[p]), int(self.page_start[p + 1])
        ctx = DecodeContext(self.reader.path, self.column)
        layout = pagetable.layout_facts(page, ctx).message
        kind = layout.WhichOneof("layout")
        whole = (np.array([lo], np.int64), np.array([hi], np.int64), False)
        got = whole
        if kind == "full_zip_layout" and not int(layout.full_zip_layout.bits_rep):
            got = (np.array([lo], np.int64), np.array([hi], np.int64), True)
        elif kind == "mini_block_layout" and not layout.mini_block_layout.HasField("rep_compression") and page.buffer_sizes:
            mb = layout.mini_block_layout
            (meta,) = self.reader.read_buffers([(page.buffer_offsets[0], page.buffer_sizes[0])])
            try:
                counts = miniblock.chunk_layout(mb, np.ascontiguousarray(meta), ctx).counts
            except CorruptFileError:
                counts = None  # the page is planned (and refused) whole
            if counts is not None and int(counts.sum()) == hi - lo and np.all(counts > 0):
                first = lo + np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
                got = (first[:-1], first[1:], False)
        self._units[p] = got
        return got

    def widen(self, ranges: np.ndarray) -> np.ndarray:
        """``ranges`` with each end moved out to the boundary of the unit it falls in."""
        if not ranges.size:
            return ranges
        a, b = ranges[:, 0], ranges[:, 1]
        pa_ = np.searchsorted(self.page_start, a, side="right") - 1
        pb = np.searchsorted(self.page_start, b - 1, side="right") - 1
        if int(pb.max()) >= len(self.pages) or int(pa_.min()) < 0:
            raise CorruptFileError(self.reader.path, f"column {self.column}: row {int(b.max()) - 1} past its {int(self.page_start[-1])} rows")
        parts = [self.units(int(p)) for p in np.unique(np.concatenate([pa_, pb]))]
        starts = np.concatenate([u[0] for u in parts])
        ends = np.concatenate([u[1] for u in parts])
        fine = np.concatenate([np.full(u[0].size, u[2]) for u in parts])
        i = np.searchsorted(starts, a, side="right") - 1
        j = np.searchsorted(starts, b - 1, side="right") - 1
        new_a = np.where(fine[i], a, starts[i])
        new_b = np.where(fine[j], b, ends[j])
        return _merge(np.stack([new_a, new_b], axis=1))


def _selected_before(ranges: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row ``r``, how many rows of the sorted disjoint ``ranges`` lie below it."""
    if not ranges.size:
        return np.zeros(rows.size, np.int64)
    lengths = ranges[:, 1] - ranges[:, 0]
    before = miniblock.exclusive_scan(lengths)
    i = np.searchsorted(ranges[:, 0], rows, side="right") - 1
    inside = np.minimum(rows - ranges[np.maximum(i, 0), 0], lengths[np.maximum(i, 0)])
    return np.where(i >= 0, before[np.maximum(i, 0)] + inside, 0)


def _cut_pages(units: _LeafUnits, page_ids: list[int], ranges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per page of ``page_ids``: the rows of ``ranges`` it holds, and whether that is fewer
    than all its rows (the selection cuts it)."""
    ids = np.asarray(page_ids, np.int64)
    lo, hi = units.page_start[ids], units.page_start[ids + 1]
    want = _selected_before(ranges, hi) - _selected_before(ranges, lo)
    return want, want < hi - lo


def _restrict_table(leaf: LeafPlan, units: _LeafUnits, page_ids: list[int], ranges: np.ndarray) -> None:
    """:func:`_restrict` of a leaf planned as a table of the selected pages: pages it does
    not cut stay whole (any kind); mini-block pages without repetition levels keep the
    chunks holding the rows of ``ranges`` (:func:`_cut_miniblock`), full-zip pages without
    them those rows (:func:`_cut_fullzip`), over all the table's pages at once; a leaf of
    several page kinds (:attr:`LeafPlan.mixed`) has its mini-block and full-zip rows cut so,
    its counts and buffers the kept ones.  Any other page cut is refused (``CorruptFileError``)."""
    t = leaf.table
    assert t is not None
    leaf.num_rows = int((ranges[:, 1] - ranges[:, 0]).sum())
    want, cut = _cut_pages(units, page_ids, ranges)
    if not cut.any():
        return
    ctx = leaf.ctx()
    whole_only = t.has_rep | ~t.per_layout([f.kind in _CUT_KINDS for f in t.layouts], np.bool_)
    if bool((cut & whole_only).any()):
        raise ctx.corrupt(f"row selection cuts page {page_ids[int(np.flatnonzero(cut & whole_only)[0])]}, which decodes only whole")
    if leaf.mixed is not None:
        _restrict_mixed(leaf, units, page_ids, ranges, want, cut)
        return
    if t.layouts[0].kind == "full_zip_layout":
        leaf.table = t = _cut_fullzip(t, units, page_ids, ranges, want, cut)
    else:
        leaf.table = t = _cut_miniblock(leaf, t, units, page_ids, ranges, want, cut)
    d = t.derived()
    leaf.num_values, leaf.num_levels = d.num_values, d.num_levels


def _cut_miniblock(leaf: LeafPlan, t: pagetable.LeafPages, units: _LeafUnits, page_ids: list[int], ranges: np.ndarray,
                   want: np.ndarray, cut: np.ndarray) -> pagetable.LeafPages:
    """A table of ``leaf``'s mini-block pages without repetition levels where ``cut``
    keeping the chunks that hold the rows of ``ranges`` (``want`` a page), over all its
    chunks at once (their first rows against the ranges; kept counts checked against
    ``want``): its chunk buffers cut to them (buffer 1 from the first kept chunk's start to
    the last one's end), its value and level counts the kept ones, and the cut
    (:class:`plan.ChunkCut`) kept for the chunk table (:func:`plan.table_chunk_layouts`)."""
    bounds, starts, sizes, counts = table_chunk_layouts([(leaf, t)])
    per_page = np.diff(bounds)
    page_of = np.repeat(np.arange(len(t)), per_page)
    scan = miniblock.exclusive_scan(counts)
    first = units.page_start[np.asarray(page_ids, np.int64)][page_of] + scan[:-1] - scan[bounds[:-1]][page_of]
    keep = _covered(first, ranges)
    kept = np.bincount(page_of[keep], weights=counts[keep], minlength=len(t)).astype(np.int64)
    if not np.array_equal(kept, want):
        raise leaf.ctx().corrupt("row selection does not fall on mini-block chunk boundaries")
    lo = np.full(len(t), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(lo, page_of[keep], starts[keep])
    hi = np.zeros(len(t), np.int64)
    np.maximum.at(hi, page_of[keep], (starts + sizes)[keep])
    shift = np.where(cut, lo, 0)
    offsets, nbytes = t.offsets.copy(), t.sizes.copy()
    offsets[:, 1] += shift
    nbytes[cut, 1] = (hi - lo)[cut]
    return replace(t, offsets=offsets, sizes=nbytes, num_values=kept, num_levels=np.where(cut, kept, t.num_levels),
                   memo={"cut": ChunkCut(np.where(np.repeat(cut, per_page), keep, True), shift, t.num_values)})


def _restrict_mixed(leaf: LeafPlan, units: _LeafUnits, page_ids: list[int], ranges: np.ndarray, want: np.ndarray,
                    cut: np.ndarray) -> None:
    """:func:`_restrict_table` of a leaf of several page kinds (:attr:`LeafPlan.mixed`;
    its cut pages are mini-block or full-zip pages without repetition levels): its
    mini-block rows' table cut by :func:`_cut_miniblock`, its full-zip rows' by
    :func:`_cut_fullzip`, its own table's buffers and counts and its per-row counts the
    kept ones (a new split of its own: the column's is shared)."""
    m = leaf.mixed
    t = leaf.table
    assert m is not None and t is not None
    col = m.column
    ids = np.asarray(page_ids, np.int64)
    nv, nl = m.num_values.copy(), m.num_levels.copy()
    offsets, sizes = t.offsets, t.sizes
    mini, full_zip = col.mini, col.full_zip
    mi, fi = col.mini_at, col.full_zip_at
    if mini is not None and cut[mi].any():
        mini = _cut_miniblock(leaf, mini, units, ids[mi].tolist(), ranges, want[mi], cut[mi])
        nv[mi], nl[mi] = mini.num_values, mini.num_levels
        offsets, sizes = offsets.copy(), sizes.copy()
        offsets[mi], sizes[mi] = mini.offsets, mini.sizes
    if full_zip is not None and cut[fi].any():
        full_zip = _cut_fullzip(full_zip, units, ids[fi].tolist(), ranges, want[fi], cut[fi])
        nv[fi], nl[fi] = full_zip.num_values, full_zip.num_levels
    leaf.table = replace(t, offsets=offsets, sizes=sizes, num_values=np.where(cut, want, t.num_values),
                         num_levels=np.where(cut, want, t.num_levels), memo={})
    leaf.mixed = replace(m, column=replace(col, mini=mini, full_zip=full_zip, memo={}), num_values=nv, num_levels=nl)
    leaf.num_values, leaf.num_levels = int(nv.sum()), int(nl.sum())


#: the page kinds a row selection cuts (without repetition levels): mini-block pages to
#: their chunks, full-zip pages to row runs
_CUT_KINDS = ("mini_block_layout", "full_zip_layout")


def _page_runs(ranges: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_clip` of ``ranges`` to each page ``[lo[j], hi[j])`` at once: each run's page
    ``j`` (non-decreasing) and its page-local ``[start, end)`` rows."""
    first = np.searchsorted(ranges[:, 1], lo, side="right")
    last = np.searchsorted(ranges[:, 0], hi, side="left")
    count = np.maximum(last - first, 0)
    at = miniblock.concat_ranges(first, first + count)
    page = np.repeat(np.arange(lo.size, dtype=np.int64), count)
    a = np.maximum(ranges[at, 0], lo[page])
    b = np.minimum(ranges[at, 1], hi[page])
    keep = b > a
    page = page[keep]
    return page, np.stack([a[keep] - lo[page], b[keep] - lo[page]], axis=1)


def _cut_fullzip(t: pagetable.LeafPages, units: _LeafUnits, page_ids: list[int], ranges: np.ndarray, want: np.ndarray,
                 cut: np.ndarray) -> pagetable.LeafPages:
    """A table of full-zip pages without repetition levels where ``cut``: its cut pages'
    row runs (:class:`plan.RowRuns`, ``memo["runs"]``) and their counts the rows they keep
    (``want``), as :func:`_restrict` cuts a page's ``row_runs``."""
    rows = np.flatnonzero(cut)
    ids = np.asarray(page_ids, np.int64)[rows]
    page, runs = _page_runs(ranges, units.page_start[ids], units.page_start[ids + 1])
    kept = np.where(cut, want, t.num_values)
    return replace(t, num_values=kept, num_levels=np.where(cut, want, t.num_levels),
                   memo={"runs": RowRuns(rows[page], runs, t.num_values, t.num_levels)})


def _restrict(leaf: LeafPlan, units: _LeafUnits, page_ids: list[int], ranges: np.ndarray) -> None:
    """Cut the planned pages of ``leaf`` (its table; a leaf without pages: none) to the rows of
    ``ranges`` (aligned to its units)."""
    if leaf.table is not None:
        _restrict_table(leaf, units, page_ids, ranges)


def plan_field_rows(
    reader: LanceFileReader, arrow_field: pa.Field, columns: list[int], rows: np.ndarray
) -> tuple[list[LeafPlan], np.ndarray]:
    """Plan the leaves of one field for the sorted physical ``rows`` of the file: only the
    pages, chunks and full-zip rows holding them.  Returns the leaves and the decoded rows
    (``[start, end)`` ranges, a superset of ``rows``)."""
    types = leaf_types(arrow_field.type)
    if len(types) != len(columns):
        raise CorruptFileError(reader.path, f"field {arrow_field.name!r} has {len(types)} leaves but {len(columns)} columns")
    units = [_LeafUnits(reader, c) for c in columns]
    ranges = ranges_of(rows)
    for _ in range(64):
        before = ranges
        for lu in units:
            ranges = lu.widen(ranges)
        if np.array_equal(before, ranges):
            break
    else:
        raise CorruptFileError(reader.path, f"field {arrow_field.name!r}: row selection does not settle on unit boundaries")
    leaves = []
    for lu, col, t in zip(units, columns, types, strict=True):
        starts, ends = lu.page_start[:-1], lu.page_start[1:]
        last = np.searchsorted(ranges[:, 0], ends, side="left") - 1
        hit = (last >= 0) & (ranges[np.maximum(last, 0), 1] > starts)
        page_ids = np.flatnonzero(hit).tolist()
        leaf = plan_leaf(reader, col, t, page_ids)
        _restrict(leaf, lu, page_ids, ranges)
        leaves.append(leaf)
    check_field_leaves(reader, arrow_field, leaves)
    return leaves, ranges


def positions(rows: np.ndarray, ranges: np.ndarray | None) -> np.ndarray | None:
    """Where the sorted physical ``rows`` are in a column decoded for ``ranges`` (None:
    decoded for every physical row); None when they are the whole column, in order."""
    rows = np.asarray(rows, np.int64)
    if ranges is None:
        return rows
    lengths = ranges[:, 1] - ranges[:, 0]
    if rows.size == int(lengths.sum()):
        return None  # every decoded row is selected (ranges are a superset)
    before = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=before[1:])
    i = np.searchsorted(ranges[:, 0], rows, side="right") - 1
    return before[i] + rows - ranges[i, 0]


def extent(leaves: list[LeafPlan]) -> dict[str, int]:
    """What a plan decodes: ``pages``, mini-block ``chunks``, full-zip ``fullzip_rows`` and
    all ``rows`` (summed over the leaves), for tests and explain output."""
    pages = chunks = fz_rows = 0
    tables = [(leaf, t) for leaf in leaves if (t := miniblock_rows(leaf)) is not None]
    if tables:  # mini-block pages of leaves planned as tables: their chunk layouts decoded together
        bounds = table_chunk_layouts(tables)[0]
        pages += int(bounds.size - 1)
        chunks += int(bounds[-1])
    for leaf in leaves:
        if leaf.table is None:  # no page
            continue
        mini = miniblock_rows(leaf)
        pages += len(leaf.table) - (len(mini) if mini is not None else 0)
        fz = leaf.mixed.column.full_zip if leaf.mixed is not None else leaf.table if leaf.table.layouts[0].kind == "full_zip_layout" else None
        if fz is not None:
            fz_rows += int(fz.num_levels.sum())
    return {"pages": pages, "chunks": chunks, "fullzip_rows": fz_rows, "rows": sum(leaf.num_rows for leaf in leaves)}
