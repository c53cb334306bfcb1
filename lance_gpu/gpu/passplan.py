# SPDX-License-Identifier: Apache-2.0
"""Placement of a read unit's leaves: the same column of many fragments as one table.

A unit (:mod:`lance_gpu.gpu.read`) holds the fields of many fragments, and each fragment's
leaf is planned on its own (:func:`plan.plan_leaf`: one file, one column).  On a dataset of
many small fragments every leaf is one page, so placing them leaf by leaf
(:func:`plan.place_leaf`) costs the Python of a leaf per page.  :func:`place_unit` instead
gathers the unit's leaves that read the same column alike (:func:`pass_key`: planned as a
table of its mini-block or full-zip pages, same value kind, width and type) and places each
such group as one *pass table* (:func:`pagetable.concat`: their tables' rows back to back):

* mini-block pages: one :class:`plan.DeviceBlock` over all their rows (a *pass block*:
  ``leaves``, ``leaf_rows``, each row's value ``base``, the chunk metadata words), so the
  device pre-pass's chunk table (:mod:`lance_gpu.gpu.headers`) has a block per column,
  not per leaf and fragment, and emits the work of all their pages with array operations;
  each row's value base, first value and first levels, and the level fills, by array
  operations over the pass table; list leaves whose level counts are in-band (their own
  groups) have their level regions settled after the pre-pass the same way
  (:func:`settle_pass`);
  dictionary pages (their own groups) with each row's first index item (``dictionary``),
  each leaf's dictionaries staged as leaf by leaf (``plan.stage_table_dictionaries``) and
  the dictionary work rows of the pages staged alone added once per pass;
* full-zip pages (long strings, embeddings): their per-page facts
  (:func:`plan.fullzip_facts`) made once over the pass table, the copies and walk rows of
  all of them added at once, one invisible-level table.

What stays per leaf is what differs per file, in unit order (so that the arena holds what
leaf-by-leaf placement puts there, where it puts it): its output regions (a few scalar
allocations), its FSST symbol tables, its dictionaries (decoded and staged), its pages'
checks (full-zip) and its buffers staged from its file's map (a file's neighbouring
buffers joined into one range, as leaf by leaf), its variable-width check entry (naming
its file).  Leaves no group takes (pages of several kinds, row selections that cut
chunks, object stores, constant pages; a column of fewer fragments than
:data:`PASS_MIN_LEAVES`) are placed by :func:`plan.place_leaf` where they come.
:data:`PASS_TABLES` turns this off.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lance_gpu.file.encodings.fsst import gpu_plan as fsst_plan
from lance_gpu.file.v2_1 import miniblock
from lance_gpu.file.validate import is_utf8_type
from lance_gpu.gpu import pagetable, plan
from lance_gpu.gpu.plan import DeviceBlock, LeafPlan, UnitPlan, place_leaf, table_level_fills

#: place the same column of a unit's fragments as one table (:func:`place_unit`); False:
#: leaf by leaf (the tests compare both)
PASS_TABLES = True
#: the least leaves a group is placed as a pass table with: below, a pass's fixed NumPy
#: cost (~0.1 ms: its concatenation and scans; for full-zip pages the per-page facts,
#: ``plan.fullzip_facts``, made anew per pass where a leaf's are kept per column) exceeds
#: what it saves (~6 us a one-page leaf); 16 fragments placed as passes were up to 10%
#: slower, 256 a third faster
PASS_MIN_LEAVES = 32


def pass_key(leaf: LeafPlan) -> tuple | None:
    """The group of ``leaf`` in a pass table, or None where it is placed on its own: a leaf
    planned as a table of mini-block pages whose chunk headers the device parses
    (``plan._place_table_leaf``'s case; list leaves whose level counts are in-band,
    ``LeafPlan.levels_pending``, and leaves of dictionary pages, groups of their own), or
    of full-zip pages (``plan._place_fullzip_table``'s); leaves of one group read values alike (kind, width,
    type); their levels and layers may differ (a fragment without nulls has no definition
    levels).  None too for a table leaf a pass cannot place: one whose pages are of several
    kinds (``LeafPlan.mixed``: its ``layouts[0]`` says nothing of the others), a row
    selection's table whose chunks it cuts (``memo["cut"]``, ``plan.ChunkCut``: the chunk
    table drops chunks per leaf, a pass's concatenated table would not) or whose full-zip
    pages it cuts to row runs (``memo["runs"]``, ``plan.RowRuns``), one whose pages are
    partly dictionary pages (``plan.dictionary_rows``) and a leaf not in
    a memory-mapped file (an object store's: :func:`_reserve` stages from the map)."""
    t = leaf.table
    if t is None or leaf.mixed is not None or "cut" in t.memo or "runs" in t.memo or leaf.reader.mapped is None:
        return None
    f = t.layouts[0]  # (a table's pages are of one kind)
    if f.kind == "full_zip_layout":
        return (f.kind, leaf.kind, leaf.width, leaf.arrow_type)
    if f.kind != "mini_block_layout":
        return None
    if f.dictionary != all(g.dictionary for g in t.layouts):  # (dictionary pages beside plain ones: placed alone)
        return None
    return (f.kind, leaf.kind, leaf.width, leaf.arrow_type, leaf.levels_pending, f.dictionary)


@dataclass(slots=True, eq=False)
class _Pass:
    """A group's leaves as they are placed (unit order) and each one's staged positions:
    a mini-block page's chunks; a full-zip page's data, then its repetition index (-1 where
    not read)."""

    leaves: list[LeafPlan] = field(default_factory=list)
    data_pos: list[list[int]] = field(default_factory=list)
    #: mini-block pages: their chunk metadata words (``plan.DeviceBlock.metas``)
    metas: list[np.ndarray] = field(default_factory=list)
    #: dictionary pages: each row's first index item and index bits (of the first row: the
    #: emission takes each page's from its layout), and the dictionary work rows of the
    #: pages staged alone, by index bits (``plan.stage_table_dictionaries``), added at once
    index: list[int] = field(default_factory=list)
    bits: int = 0
    dictionary_rows: dict[int, list[tuple[int, ...]]] = field(default_factory=dict)


def place_unit(unit: UnitPlan, leaves: Sequence[LeafPlan], values_placed: bool = False) -> None:
    """:func:`plan.place_leaf` of every leaf of a unit, in order, each group :func:`pass_key`
    makes (the same column of several fragments) placed as one pass table (the module
    docstring): the same regions, staged ranges and work as leaf by leaf (``values_placed``:
    the leaves' value regions are given already, :func:`plan.place_values`)."""
    # (leaves with item validity are placed leaf by leaf: their item regions, plan.place_item_validity)
    keys = [pass_key(leaf) if PASS_TABLES and not leaf.item_dim else None for leaf in leaves]
    sizes = Counter(keys)
    groups: dict[tuple, _Pass] = {}
    for leaf, key in zip(leaves, keys, strict=True):
        if key is None or sizes[key] < max(2, PASS_MIN_LEAVES):
            place_leaf(unit, leaf, values_placed)
            continue
        g = groups.get(key)
        if g is None:
            g = groups[key] = _Pass()
        _reserve(unit, leaf, g, key[0] == "full_zip_layout", values_placed)
    for key, g in groups.items():
        if key[0] == "full_zip_layout":
            _place_fullzip_pass(unit, g)
        else:
            _place_miniblock_pass(unit, g)


def _reserve(unit: UnitPlan, leaf: LeafPlan, g: _Pass, full_zip: bool, values_placed: bool = False) -> None:
    """What :func:`plan.place_leaf` does first for a leaf of a group: its output regions,
    its FSST symbol tables and its pages' buffers staged (from its file's map, where leaf by
    leaf would: neighbouring buffers of a file join one range): mini-block chunks, or
    ``full_zip`` pages' data and, where read, repetition index."""
    t = leaf.table
    whole = leaf.reader.mapped
    assert t is not None and whole is not None  # pass_key: a mapped file
    path = leaf.path
    unit.paths.add(path)
    if not values_placed:
        plan.place_values(unit, leaf)
    if not leaf.levels_pending:  # (else allocated once the pre-pass has read the counts: settle_pass)
        if leaf.has_rep:
            leaf.rep_pos = unit.alloc_levels(leaf.num_levels)
        if leaf.has_def:
            leaf.def_pos = unit.alloc_levels(leaf.num_levels)
    if leaf.kind == "var":
        fsst_plan.stage_tables(unit, leaf)
    g.leaves.append(leaf)
    if full_zip:
        g.data_pos.append(_stage_fullzip(unit, leaf, t, whole))
        return
    if t.layouts[0].dictionary:  # each page's dictionary staged before its chunks, or the leaf's together
        (bits, index), staged = plan.stage_table_dictionaries(unit, leaf, t, g.dictionary_rows)
        if not g.index:
            g.bits = bits
        g.index.extend(index)
        if staged is not None:
            g.data_pos.append(staged)
            g.metas.extend(plan._table_metas(leaf, t, whole))
            return
    if len(t) < plan.DEVICE_BLOCK_MIN_PAGES:
        d = t.derived()
        add = unit.stage.add_buffer
        g.data_pos.append([add(path, o, whole[o : o + z], whole) if z else 0 for o, z in zip(d.buf1_offsets, d.buf1_sizes, strict=True)])
    else:
        g.data_pos.append(unit.stage.add_file_buffers(path, whole, t.offsets[:, 1], t.sizes[:, 1]).tolist())
    g.metas.extend(plan._table_metas(leaf, t, whole))


def _stage_fullzip(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages, whole: np.ndarray) -> list[int]:
    """A full-zip leaf's pages staged as ``plan._place_fullzip_table`` stages them: per page
    its data (buffer 0) and, where read, its repetition index (buffer 1); their positions,
    two per page (-1: not read)."""
    z = plan.fullzip_facts(leaf, t)
    path = leaf.path
    npages = len(t)
    if npages < plan.DEVICE_BLOCK_MIN_PAGES:  # data, then the index where read, page by page
        add = unit.stage.add_buffer
        d = t.derived()
        got = []
        for o, s, o1, s1, ix in zip(d.buf0_offsets, d.buf0_sizes, d.buf1_offsets, d.buf1_sizes, z.indexed.tolist(), strict=True):
            got.append(add(path, o, whole[o : o + s], whole) if s else 0)
            got.append((add(path, o1, whole[o1 : o1 + s1], whole) if s1 else 0) if ix else -1)
        return got
    take = np.zeros((npages, 2), np.bool_)
    take[:, 0] = True
    take[:, 1] = z.indexed
    width = min(2, t.offsets.shape[1])
    pos = np.full((npages, 2), -1, np.int64)
    pos[:, :width][take[:, :width]] = unit.stage.add_file_buffers(path, whole, t.offsets[:, :width][take[:, :width]],
                                                                  t.sizes[:, :width][take[:, :width]])
    return pos.reshape(-1).tolist()


def _place_miniblock_pass(unit: UnitPlan, g: _Pass) -> None:
    """``plan._place_table_leaf`` of every leaf of a group (:func:`pass_key`; regions and
    staging already done by :func:`_reserve`), as one pass table: one pass
    :class:`plan.DeviceBlock` over all their rows, each row's value base, first value and
    first levels (-1 where its leaf has none) by array operations; the variable-width check
    entries per leaf (naming its file); the level fills of the leaves of levels or layers
    some row's layout lacks (``plan.table_level_fills``)."""
    leaves = g.leaves
    first = leaves[0]
    n = len(leaves)
    tables = [leaf.table for leaf in leaves]
    pt, edges = pagetable.concat(tables)  # type: ignore[arg-type]
    d = pt.derived()
    leaf_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(edges))
    var = first.kind == "var"
    attr = "slot_lo" if var else "value_pos"
    base = np.fromiter((getattr(leaf, attr) for leaf in leaves), np.int64, n)[leaf_of]
    vstart = miniblock.exclusive_scan(np.fromiter((leaf.num_values for leaf in leaves), np.int64, n))
    vpos = d.vpos - vstart[:-1][leaf_of]  # each row's first value within its leaf
    pending = first.levels_pending  # (every leaf's: pass_key)
    if pending:  # the level regions wait for the pre-pass (settle_pass)
        rep_dst = def_dst = np.full(len(pt), -1, np.int64)
    else:
        # without levels in-band one level per value: a row's first level is its first
        # value; -1: its leaf has no such levels
        rep_dst = _level_dst(np.fromiter((leaf.rep_pos if leaf.has_rep else -1 for leaf in leaves), np.int64, n)[leaf_of], vpos)
        def_dst = _level_dst(np.fromiter((leaf.def_pos if leaf.has_def else -1 for leaf in leaves), np.int64, n)[leaf_of], vpos)
    data_pos = np.fromiter(itertools.chain.from_iterable(g.data_pos), np.int64, len(pt))
    bounds = edges.tolist()
    if var:
        utf8 = is_utf8_type(first.arrow_type)
        slots = base + vpos
        for k, (leaf, t) in enumerate(zip(leaves, tables, strict=True)):
            assert t is not None
            unit.var_check_rows.append((slots[bounds[k] : bounds[k + 1]], t.num_values, utf8, leaf.path, leaf.column, t.ids))
    dictionary = (g.bits, g.index) if first.table.layouts[0].dictionary else None  # type: ignore[union-attr]
    for bits, rows in g.dictionary_rows.items():
        cols = np.asarray(rows, np.int64).T  # (a row per page: plan.DICTIONARY_COLUMNS)
        unit.dictionary_rows(bits).add(**{c: np.ascontiguousarray(v) for c, v in zip(plan.DICTIONARY_COLUMNS, cols, strict=True)})
    unit.device_blocks.append(DeviceBlock(first, pt, data_pos, np.ascontiguousarray(pt.sizes[:, 1]), vpos, rep_dst, def_dst,
                                          dictionary, leaves=leaves, leaf_rows=edges, base=base, metas=g.metas))
    if not pending:
        _level_fills(unit, leaves, tables, pt, bounds, rep_dst, def_dst)


def settle_pass(unit: UnitPlan, block: DeviceBlock, in_band: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``headers._settle_table_leaf`` of every leaf of a pass block of list leaves
    (:attr:`plan.LeafPlan.levels_pending`), from ``in_band``, each row's level count as the
    pre-pass read it (rows with repetition levels; the others keep theirs): the pass
    table's counts settled in a copy (``block.rows``), each leaf's count and regions
    allocated leaf after leaf (repetition, then definition), the level fills of the leaves
    that need them (with a copy of their table holding the settled counts); returns each
    row's first repetition / definition level (-1: none)."""
    pt = block.rows
    leaves = block.leaves
    assert pt is not None and leaves is not None and block.leaf_rows is not None
    n = len(leaves)
    edges = block.leaf_rows
    num_levels = np.where(pt.has_rep, in_band, pt.num_levels)
    block.rows = pt = dataclasses.replace(pt, num_levels=num_levels, memo={})
    scan = miniblock.exclusive_scan(num_levels)
    per_leaf = (scan[edges[1:]] - scan[edges[:-1]]).tolist()
    rep_at, def_at = [], []
    for leaf, nl in zip(leaves, per_leaf, strict=True):
        leaf.num_levels = nl
        leaf.rep_pos = unit.alloc_levels(nl) if leaf.has_rep else -1
        leaf.def_pos = unit.alloc_levels(nl) if leaf.has_def else -1
        rep_at.append(leaf.rep_pos)
        def_at.append(leaf.def_pos)
    leaf_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(edges))
    lpos = scan[:-1] - scan[edges[:-1]][leaf_of]  # each row's first level within its leaf
    r = _level_dst(np.asarray(rep_at, np.int64)[leaf_of], lpos)
    d = _level_dst(np.asarray(def_at, np.int64)[leaf_of], lpos)
    bounds = edges.tolist()
    tables = [leaf.table for leaf in leaves]
    _level_fills(unit, leaves, tables, pt, bounds, r, d, settled=num_levels)
    return r, d


def _place_fullzip_pass(unit: UnitPlan, g: _Pass) -> None:
    """``plan._place_fullzip_table`` of every leaf of a group of full-zip leaves (regions
    and staging done by :func:`_reserve`, which checked each leaf's pages), as one pass
    table: the per-page facts of :func:`plan.fullzip_facts` made once over all their rows,
    fixed values without control words copied and the other pages one full-zip walk row
    each, every row's destinations by array operations, one invisible-level table for the
    pass; FSST segments, variable-width checks and level fills per leaf."""
    leaves = g.leaves
    n = len(leaves)
    tables = [leaf.table for leaf in leaves]
    pt, edges = pagetable.concat(tables)  # type: ignore[arg-type]
    first = leaves[0]
    z = plan.fullzip_facts(first, pt)  # (every leaf's rows passed its checks when staged, _stage_fullzip)
    d = pt.derived()
    npages = len(pt)
    leaf_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(edges))
    vstart = miniblock.exclusive_scan(np.fromiter((leaf.num_values for leaf in leaves), np.int64, n))
    lstart = miniblock.exclusive_scan(np.fromiter((leaf.num_levels for leaf in leaves), np.int64, n))
    vpos = d.vpos - vstart[:-1][leaf_of]
    lpos = d.lpos - lstart[:-1][leaf_of]
    var = first.kind == "var"
    if var:
        dst = np.fromiter((leaf.slot_lo for leaf in leaves), np.int64, n)[leaf_of] + vpos
    else:
        dst = np.fromiter((leaf.value_pos for leaf in leaves), np.int64, n)[leaf_of] + vpos * first.width
    rep_at = _level_dst(np.fromiter((leaf.rep_pos if leaf.has_rep else -1 for leaf in leaves), np.int64, n)[leaf_of], lpos)
    def_at = _level_dst(np.fromiter((leaf.def_pos if leaf.has_def else -1 for leaf in leaves), np.int64, n)[leaf_of], lpos)
    pos = np.fromiter(itertools.chain.from_iterable(g.data_pos), np.int64, 2 * npages).reshape(npages, 2)
    if z.copy.size:
        unit.copy_fixed.add(src=pos[z.copy, 0], len=z.copy_len, dst=dst[z.copy])
    if z.walk.size:
        w = slice(None) if z.all_walk else z.walk
        unit.fullzip.add(
            **z.cols, data=pos[w, 0], index=pos[w, 1], inv=unit.invisible_size + z.inv_at,
            rep_dst=np.where(z.rep, rep_at[w], -1), def_dst=np.where(z.defs, def_at[w], -1), val_dst=dst[w],
            item_dst=-1, item_dst2=-1,  # (no item validity: its leaves are placed leaf by leaf, place_unit)
        )
        unit.invisible.append(z.inv)
        unit.invisible_size += z.inv.size
    bounds = edges.tolist()
    if var:
        utf8 = is_utf8_type(first.arrow_type)
        for k, (leaf, t) in enumerate(zip(leaves, tables, strict=True)):
            assert t is not None
            lo, hi = bounds[k], bounds[k + 1]
            unit.var_check_rows.append((dst[lo:hi], t.num_values, utf8, leaf.path, leaf.column, t.ids))
            rows = unit.fsst_rows.get(id(leaf))
            if rows is not None:
                key = id(leaf)
                for j, slot, count in zip(rows.tolist(), dst[lo + rows].tolist(), t.num_values[rows].tolist(), strict=True):
                    fsst_plan.add_segments(unit, (key, j), slot, count)
    _level_fills(unit, leaves, tables, pt, bounds, rep_at, def_at)


def _level_fills(unit: UnitPlan, leaves: list[LeafPlan], tables: list, pt: pagetable.LeafPages, bounds: list[int],
                 rep_dst: np.ndarray, def_dst: np.ndarray, settled: np.ndarray | None = None) -> None:
    """``plan.table_level_fills`` of the leaves of a pass whose levels or layers some row's
    layout lacks (decided once per kind of leaf over the pass's layouts); ``settled``: the
    rows' level counts the pre-pass read (such a leaf's table is then a copy holding them)."""
    needs: dict[tuple, bool] = {}
    for k, (leaf, t) in enumerate(zip(leaves, tables, strict=True)):
        if not (leaf.has_rep or leaf.has_def):
            continue
        key = (leaf.has_rep, leaf.has_def, leaf.layers)
        need = needs.get(key)
        if need is None:
            need = needs[key] = any((leaf.has_rep and not f.has_rep) or (leaf.has_def and (not f.has_def or f.layers != leaf.layers))
                                    for f in pt.layouts)
        if need:
            lo, hi = bounds[k], bounds[k + 1]
            if settled is not None:
                t = leaf.table = dataclasses.replace(t, num_levels=settled[lo:hi], memo={})
            table_level_fills(unit, leaf, t, rep_dst[lo:hi], def_dst[lo:hi])


def _level_dst(first: np.ndarray, vpos: np.ndarray) -> np.ndarray:
    """Each row's first level: its leaf's region ``first`` (-1: none) plus its first value."""
    return np.where(first >= 0, first + vpos, -1) if int(first.min(initial=0)) < 0 else first + vpos


__all__ = ["PASS_TABLES", "pass_key", "place_unit", "settle_pass"]
