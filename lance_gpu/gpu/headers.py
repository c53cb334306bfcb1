# SPDX-License-Identifier: Apache-2.0
"""The device pre-pass of a read unit: mini-block chunk headers parsed where the chunks lie.

The planner places every mini-block page from its protobuf alone: without repetition
levels (:func:`plan.device_headers`) ``num_items`` values, one definition level each; a
list leaf's pages (:func:`plan._device_lists`) with in-band level counts, its level regions
waiting for the pre-pass.  It stages their chunks (buffer 1) without reading them
(:class:`plan.DeviceBlock`: one per leaf, over the rows of its page table,
:attr:`plan.LeafPlan.table`, or a mixed leaf's mini-block rows); their chunk metadata
(buffer 0: chunk starts, sizes and value counts) is decoded for every page of the pass at
once, every leaf and file (:func:`plan.table_chunk_layouts`: NumPy over all the words, read
in the files' maps or from their stores).  Pages are keyed by their row in the chunk table
and in their leaf's page table, not by Python objects; the same
column of a unit's fragments is one *pass block* (:mod:`lance_gpu.gpu.passplan`: its leaves'
rows back to back, each row's leaf and value base kept), so the table is made from a block
per column, not per leaf and fragment.
Once the unit's bytes are on the device, :func:`parse_and_emit`

1. lays out one chunk table for every such page of the unit (struct of arrays, ``int64``:
   arena start, size, value count, page end, shape bits, first block row), staged in the
   unit's arena with its bytes (:func:`stage`: no upload of its own);
2. launches ``cuda_kernels.chunkheaders`` once: per chunk, its in-band header (level count,
   repetition / definition-level and value-buffer spans), the bit width and position of
   every inline bit-packed block of its values (or dictionary indices) and of its level
   sections, and the run counts of block-form RLE level sections, checked against the
   chunk and the page;
3. reads the chunk and block tables back in **one** copy, raises the host reader's
   ``CorruptFileError`` for the first bad chunk (a header past its chunk, a level count
   other than its value count, an impossible width, a truncated block, an RLE section out
   of range), and
4. allocates the level regions of list leaves from the in-band level counts
   (:func:`settle_levels`), then emits the pages' work (:func:`plan._emit_chunk_work`) with
   one set of NumPy calls per group of pages of a leaf encoded alike (dictionary pages by
   index bits and encodings): no Python per chunk, and no chunk byte read on the host.

Where the unit has no such pages nothing is launched or read back.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

import cuda_kernels.chunkheaders as chk
from cuda_kernels import _device
from lance_gpu.errors import CorruptFileError
from lance_gpu.file.encodings.bitpacking import gpu_plan as bitpacking_plan
from lance_gpu.file.encodings.bitpacking.gpu_plan import InlineBlocks
from lance_gpu.file.encodings.fsst import gpu_plan as fsst_plan
from lance_gpu.file.v2_1 import miniblock
from lance_gpu.gpu import _array, worktable
from lance_gpu.gpu.pagetable import LayoutFacts
from lance_gpu.gpu.passplan import settle_pass
from lance_gpu.gpu.plan import (
    DeviceBlock,
    LeafPlan,
    UnitPlan,
    _Chunks,
    _dictionary_key,
    _emit_chunk_work,
    _group_key,
    _level_encoding,
    _value_dst,
    settle_mixed_levels,
    table_chunk_layouts,
    table_level_fills,
)

_NO_END = np.zeros(0, np.int64)
_MESSAGES = (
    (chk.BAD_HEADER, "mini-block chunk header points past its chunk"),
    (chk.BAD_LEVELS, "mini-block chunk holds a level count other than its item count"),
    (chk.BAD_BLOCKS, "inline bit-packed chunk is malformed (bad width or truncated)"),
    (chk.BAD_RLE_SHORT, "RLE level buffer shorter than its header"),
    (chk.BAD_RLE_RANGE, "RLE level buffer sections out of range"),
)
#: the pre-pass's form of each level encoding (``chunkheaders`` shape bits)
_LEVEL_FORMS = {"inline_bitpacking": chk.LEVELS_INLINE, "rle": chk.LEVELS_RLE}


def _level_form(mb, name: str) -> int:
    if not mb.HasField(name):
        return chk.LEVELS_SPANS
    return _LEVEL_FORMS.get(_level_encoding(getattr(mb, name)), chk.LEVELS_SPANS)


def _chunk_shape(mb) -> tuple[int, int]:
    """``(chunkheaders shape bits, inline value word bytes)`` of a mini-block layout ``mb``."""
    has_rep, has_def = mb.HasField("rep_compression"), mb.HasField("def_compression")
    word = bitpacking_plan.inline_word(mb.value_compression)
    shape = chk.shape_bits(has_rep, has_def, bool(mb.has_large_chunk), has_def and not has_rep, int(mb.num_buffers), word,
                           _level_form(mb, "rep_compression"), _level_form(mb, "def_compression"))
    return shape, word


def _layout_shape(facts: LayoutFacts) -> tuple[int, int]:
    """:func:`_chunk_shape` of a distinct layout, derived once."""
    if facts.chunk_shape is None:
        facts.chunk_shape = _chunk_shape(facts.body)
    return facts.chunk_shape


def _chunk_layouts(blocks: list[DeviceBlock]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(chunks per page, starts, sizes, counts)`` of every row of ``blocks`` in order,
    decoded together (:func:`plan.table_chunk_layouts`, no Python per page)."""
    bounds, starts, sizes, counts = table_chunk_layouts(blocks)
    return np.diff(bounds), starts, sizes, counts


class ChunkTable:
    """The chunk table of a unit's device-parsed pages (host side), before and after the
    pre-pass.  Its pages are the device blocks' rows in order (block ``k``'s are rows
    ``edges[k]:edges[k + 1]``: the rows of its leaf's page table, or of a pass block's
    leaves'); per page, as arrays: ``page_block``, ``data_pos``, ``vpos``, ``rep_dst``,
    ``def_dst``, ``num_values``, ``base`` (its leaf's first value slot or byte),
    ``index_pos`` (a dictionary page's index scratch, else -1) and ``page_layout`` (its
    distinct layout: ``layout_body[k]``, ``layout_facts[k]``, each once); page ``j``'s
    chunks are rows ``bounds[j]:bounds[j + 1]``; chunk ``i``'s inline blocks are rows
    ``block_first[i]:block_first[i] + nblocks[i]`` of the block table."""

    def __init__(self, blocks: list[DeviceBlock]) -> None:
        self.device_blocks = blocks
        nblocks = len(blocks)
        per_block = np.fromiter((b.npages for b in blocks), np.int64, nblocks)
        self.edges = miniblock.exclusive_scan(per_block)
        self.page_block = np.repeat(np.arange(nblocks, dtype=np.int64), per_block)
        npages = int(self.edges[-1])

        def cat(name: str) -> np.ndarray:
            parts = [getattr(b, name) for b in blocks]
            if all(type(p) is list for p in parts):  # blocks of a few pages: one conversion
                return np.fromiter(itertools.chain.from_iterable(parts), np.int64, npages)
            return np.concatenate([np.asarray(p, np.int64) for p in parts]) if parts else _NO_END

        pos, size = cat("data_pos"), cat("size")
        self.vpos, self.rep_dst, self.def_dst = cat("vpos"), cat("rep_dst"), cat("def_dst")
        self.num_values = np.fromiter(itertools.chain.from_iterable(
            b.rows.derived().values_list for b in blocks
        ), np.int64, npages)
        base = np.fromiter((b.leaf.slot_lo if b.leaf.kind == "var" else b.leaf.value_pos for b in blocks), np.int64, nblocks)
        self.base = base[self.page_block]
        for k, b in enumerate(blocks):  # pass blocks: each row's leaf's
            if b.base is not None:
                self.base[self.edges[k] : self.edges[k + 1]] = b.base
        # each page's leaf's item validity region (-1: none; pass blocks hold no such leaf) and
        # the leaf's values (a layer's region follows those of the layers above it)
        self.item_base = np.fromiter((b.leaf.item_pos for b in blocks), np.int64, nblocks)[self.page_block]
        self.item_values = np.fromiter((b.leaf.num_values for b in blocks), np.int64, nblocks)[self.page_block]
        # each page's first index item (a dictionary page's index scratch), else -1
        self.index_pos = np.fromiter(itertools.chain.from_iterable(
            [-1] * b.npages if b.dictionary is None else b.dictionary[1] for b in blocks
        ), np.int64, npages)
        # each distinct layout once (most pages share a few)
        self.layout_facts: list[LayoutFacts] = []
        self.layout_body: list = []
        distinct: dict[int, int] = {}

        def index_of(facts: LayoutFacts) -> int:
            k = distinct.get(id(facts))
            if k is None:
                k = distinct[id(facts)] = len(self.layout_body)
                self.layout_facts.append(facts)
                self.layout_body.append(facts.body)
            return k

        which = np.empty(npages, np.int64)
        for k, b in enumerate(blocks):
            lo = int(self.edges[k])
            remap = np.fromiter((index_of(f) for f in b.rows.layouts), np.int64, len(b.rows.layouts))
            which[lo : lo + len(b.rows)] = remap[b.rows.layout]
        self.page_layout = which
        per_page, starts, sizes, counts = _chunk_layouts(blocks)
        self.bounds = miniblock.exclusive_scan(per_page)
        self.counts = counts
        self.start = starts + np.repeat(pos, per_page)
        self.size = sizes
        self.limit = np.repeat(pos + size, per_page)
        shape_rows = [_layout_shape(f) for f in self.layout_facts]
        shape_word = np.array(shape_rows, np.int64).reshape(-1, 2)[which] if npages else np.zeros((0, 2), np.int64)
        shapes, words = shape_word[:, 0], shape_word[:, 1]
        self.shape = np.repeat(shapes, per_page)
        self.nblocks = np.where(np.repeat(words, per_page) > 0, -(-self.counts // 1024), 0)  # value blocks
        self.def_blocks_at, self.rep_blocks_at = chk.level_block_offsets(self.shape, self.counts, self.size)
        scan = miniblock.exclusive_scan(chk.block_rows(self.shape, self.counts, self.size))
        self.block_first = scan[:-1]
        self.total_blocks = int(scan[-1])
        self.out = np.zeros((0, chk.OUT_COLUMNS), np.int64)
        self.blocks = np.zeros((0, 2), np.int64)

    def leaf(self, j: int) -> LeafPlan:
        """The leaf of page ``j`` (of a pass block: its row's)."""
        k = int(self.page_block[j])
        return self.device_blocks[k].leaf_of(j - int(self.edges[k]))

    def body(self, j: int):
        """The layout message (``MiniBlockLayout``) of page ``j``."""
        return self.layout_body[int(self.page_layout[j])]

    @property
    def nchunks(self) -> int:
        return int(self.bounds[-1])

    def columns(self) -> list[np.ndarray]:
        return [self.start, self.size, self.counts, self.limit, self.shape, self.block_first]


def stage(unit: UnitPlan) -> None:
    """Lay out the chunk table of the unit's device-parsed pages (step 1) and stage it with
    the unit's bytes (it goes up in the same copies, no upload of its own); call after the
    last page is placed, before :meth:`Stager.upload`."""
    if not unit.device_blocks or unit.chunk_table is not None:
        return
    table = ChunkTable(unit.device_blocks)
    host, _views, _scans = worktable.pack_columns(table.columns(), [False] * 6)
    unit.chunk_table = (table, unit.stage.add_bytes(host))


def parse_on_device(table: ChunkTable, arena, staged_at: int | None = None) -> None:
    """Steps 2-3 of the module docstring: ``table.out`` and ``table.blocks`` filled from one
    launch and one copy back (the table's columns read from the arena at byte ``staged_at``
    where :func:`stage` put them there, else uploaded)."""
    n = table.nchunks
    if not n:
        return
    head = n * chk.OUT_COLUMNS
    both = _array.empty(head + max(2 * table.total_blocks, 2), np.int64)
    out = both[:head].reshape(n, chk.OUT_COLUMNS)
    blocks = both[head : head + max(2 * table.total_blocks, 2)].reshape(-1, 2)

    def launch(c: list) -> None:
        chk.parse_chunk_headers_gpu(arena, c[0], c[1], c[2], c[3], c[4], c[5], out, blocks)

    if staged_at is not None:
        staged = arena[staged_at : staged_at + 6 * 8 * n].view(np.int64)
        launch([staged[k * n : (k + 1) * n] for k in range(6)])
    else:
        host, views, _scans = worktable.pack_columns(table.columns(), [False] * 6)
        with _device.work_table(host, {}):
            launch(views)
    back = _device.to_host(both)  # the pass's one readback of metadata
    table.out = back[:head].reshape(n, chk.OUT_COLUMNS)
    table.blocks = back[head : head + 2 * table.total_blocks].reshape(-1, 2)


def parse_on_host(table: ChunkTable, data: np.ndarray) -> None:
    """The same tables from the CPU form of the kernel over ``data`` (the arena's bytes on
    the host): the reference the device pre-pass is tested against."""
    c = table.columns()
    table.out, table.blocks = chk.parse_chunk_headers(data, c[0], c[1], c[2], c[3], c[4], c[5], table.total_blocks)


def check(table: ChunkTable) -> None:
    """Raise the host reader's ``CorruptFileError`` for the first bad chunk."""
    status = table.out[:, chk.OUT_STATUS] if table.nchunks else _NO_END
    bad = np.flatnonzero(status)
    if not bad.size:
        return
    first = int(bad[0])
    leaf = table.leaf(int(np.searchsorted(table.bounds, first, side="right")) - 1)
    code = int(status[first])
    for bit, message in _MESSAGES:
        if code & bit:
            raise leaf.ctx().corrupt(message)


def _rows(los: list[int], his: list[int]) -> np.ndarray:
    return miniblock.concat_ranges(np.asarray(los, np.int64), np.asarray(his, np.int64))


def settle_levels(unit: UnitPlan, table: ChunkTable) -> None:
    """Allocate the level regions of the unit's list leaves whose level counts are in-band
    (:attr:`plan.LeafPlan.levels_pending`), from the level counts the pre-pass read back:
    every mini-block page's ``num_levels`` (the sum of its chunks' ``num_levels`` where it
    has repetition levels), its leaf's, the leaf's rep / def regions (after every region the
    planner allocated) and each page's first rep / def level; then every page's level
    fills and remaps (:func:`plan.table_level_fills`: array work over the leaf's rows; a
    leaf of several page kinds: :func:`plan.settle_mixed_levels`, with the level work of
    its full-zip and constant pages).  The leaves of pass blocks first
    (:func:`passplan.settle_pass`: array work over the pass's rows, a few scalars per leaf),
    then the others in order of their first block.  Call after :func:`check`."""
    edges = table.edges.tolist()
    pending: dict[int, tuple[LeafPlan, int]] = {}
    table_blocks: dict[int, DeviceBlock] = {}
    passes: list[tuple[int, DeviceBlock]] = []
    for k, block in enumerate(table.device_blocks):
        if block.leaf.levels_pending:
            if block.leaves is not None:  # a pass block: its leaves' rows (passplan.settle_pass)
                passes.append((edges[k], block))
                continue
            pending[id(block.leaf)] = (block.leaf, edges[k])  # the leaf's one block: its rows
            table_blocks[id(block.leaf)] = block
    if not pending and not passes:
        return
    scan = miniblock.exclusive_scan(table.out[:, chk.OUT_LEVELS] if table.nchunks else _NO_END)
    in_band = scan[table.bounds[1:]] - scan[table.bounds[:-1]]
    for lo, block in passes:
        hi = lo + block.npages
        table.rep_dst[lo:hi], table.def_dst[lo:hi] = settle_pass(unit, block, in_band[lo:hi])
    for leaf, rows in pending.values():
        if leaf.mixed is not None:  # its block: its mini-block rows
            block = table_blocks[id(leaf)]
            hi = rows + block.npages
            table.rep_dst[rows:hi], table.def_dst[rows:hi], block.rows = settle_mixed_levels(unit, leaf, in_band[rows:hi])
            continue
        _settle_table_leaf(unit, table, leaf, rows, in_band)
        assert leaf.table is not None
        table_blocks[id(leaf)].rows = leaf.table


def _settle_table_leaf(unit: UnitPlan, table: ChunkTable, leaf: LeafPlan, lo: int, in_band: np.ndarray) -> None:
    """:func:`settle_levels` of a leaf planned as a table, whose rows are the chunk table's
    pages ``lo:lo + len(leaf.table)``: array work, no Python per page."""
    shared = leaf.table
    assert shared is not None
    hi = lo + len(shared)
    # the column's table is shared (pagetable.LeafPages): the leaf's in-band counts go to a copy
    t = leaf.table = dataclasses.replace(shared, num_levels=np.where(shared.has_rep, in_band[lo:hi], shared.num_levels), memo={})
    leaf.num_levels = int(t.num_levels.sum())
    leaf.rep_pos = unit.alloc_levels(leaf.num_levels) if leaf.has_rep else -1
    leaf.def_pos = unit.alloc_levels(leaf.num_levels) if leaf.has_def else -1
    lpos = miniblock.exclusive_scan(t.num_levels)[:-1]
    r = leaf.rep_pos + lpos if leaf.has_rep else np.full(len(t), -1, np.int64)
    d = leaf.def_pos + lpos if leaf.has_def else np.full(len(t), -1, np.int64)
    table.rep_dst[lo:hi] = r
    table.def_dst[lo:hi] = d
    table_level_fills(unit, leaf, t, r, d)


def _blocks(table: ChunkTable, rows: np.ndarray, at: np.ndarray, nitems: np.ndarray) -> InlineBlocks:
    """The inline blocks of chunks ``rows`` (of the group being emitted) holding ``nitems``
    items each, found from row ``block_first + at`` of the block table on."""
    nblk = -(-nitems // 1024)
    first = table.block_first[rows] + at
    brows = miniblock.concat_ranges(first, first + nblk)
    chunk = np.repeat(np.arange(rows.size), nblk)
    within = brows - np.repeat(first, nblk)
    nvals = np.minimum(nitems[chunk] - 1024 * within, 1024)
    return InlineBlocks(table.blocks[brows, 0], table.blocks[brows, 1], nvals, chunk, 1024 * within)


def _chunks(table: ChunkTable, members: np.ndarray) -> _Chunks:
    """The chunks of pages ``members`` (of one leaf, encoded alike) as :func:`plan._emit_chunk_work` takes them."""
    sel = members
    rows = miniblock.concat_ranges(table.bounds[sel], table.bounds[sel + 1])
    per_page = table.bounds[sel + 1] - table.bounds[sel]
    counts = table.counts[rows]
    out = table.out[rows]
    levels = out[:, chk.OUT_LEVELS]  # one per value without repetition levels (checked on the device)
    first_chunk = miniblock.exclusive_scan(per_page)[:-1]

    def within_page(v: np.ndarray) -> np.ndarray:
        scan = miniblock.exclusive_scan(v)
        return scan[:-1] - np.repeat(scan[first_chunk], per_page)

    in_page = within_page(counts)
    level_in_page = within_page(levels)
    value = np.repeat(table.vpos[sel], per_page) + in_page
    def_dst = np.repeat(table.def_dst[sel], per_page) + level_in_page
    rep_dst = np.repeat(table.rep_dst[sel], per_page) + level_in_page
    blocks = _blocks(table, rows, np.zeros(rows.size, np.int64), counts) if int(table.nblocks[rows].sum()) else None
    shape = int(table.shape[rows[0]]) if rows.size else 0
    found: dict[str, object] = {}
    # (name, repetition levels, its block rows, its RLE run column)
    sections = (("def", False, table.def_blocks_at, chk.OUT_DEF_RUNS), ("rep", True, table.rep_blocks_at, chk.OUT_REP_RUNS))
    for name, rep, at, runs in sections:
        form = chk.level_form(shape, rep)
        if form == chk.LEVELS_INLINE:
            found[f"{name}_blocks"] = _blocks(table, rows, at[rows], levels)
        elif form == chk.LEVELS_RLE:
            found[f"{name}_runs"] = out[:, runs]
    index_first = None
    if int(table.index_pos[sel[0]]) >= 0:  # dictionary pages
        index_first = np.repeat(table.index_pos[sel], per_page) + in_page
    return _Chunks(
        counts, levels, np.ascontiguousarray(out[:, chk.OUT_REP : chk.OUT_REP + 2]),
        np.ascontiguousarray(out[:, chk.OUT_DEF : chk.OUT_DEF + 2]), out[:, chk.OUT_BUF0 : chk.OUT_BUF2 + 2].reshape(-1, 3, 2),
        value, rep_dst, def_dst, np.repeat(table.item_base[sel], per_page), np.repeat(table.item_values[sel], per_page),
        blocks=blocks, value_base=np.repeat(table.base[sel], per_page), index_first=index_first,
        **found,  # type: ignore[arg-type]
    )


def _emit_group(unit: UnitPlan, table: ChunkTable, members: np.ndarray) -> None:
    j = int(members[0])
    block = table.device_blocks[int(table.page_block[j])]
    leaf = block.leaf
    ch = _chunks(table, members)
    # index bits: the layout's; index positions in ch.index_first
    dictionary = None if block.dictionary is None or int(table.index_pos[j]) < 0 else (_dictionary_key(table.body(j))[0], 0)
    _emit_chunk_work(unit, leaf, table.body(j), ch, int(table.num_values[members].sum()), dictionary, leaf.ctx())


def _layout_group_key(leaf: LeafPlan, facts: LayoutFacts) -> tuple:
    """:func:`plan._group_key` of a distinct layout, derived once per leaf kind."""
    key = facts.group_keys.get(leaf.kind)
    if key is None:
        key = facts.group_keys[leaf.kind] = _group_key(leaf, facts.body)
    return key


def _emit_key(table: ChunkTable, block: DeviceBlock, d: int) -> tuple:
    """The emission group of ``block``'s pages of distinct layout ``d``: dictionary pages by
    :func:`_dictionary_key` (their indices go to index scratch, whatever the leaf), the
    others by their leaf's value kind and :func:`_layout_group_key`."""
    facts = table.layout_facts[d]
    if block.dictionary is not None and facts.dictionary:
        key = facts.group_keys.get("dictionary")
        if key is None:
            key = facts.group_keys["dictionary"] = ("dictionary", _dictionary_key(facts.body))
        return key
    leaf = block.leaf
    return (leaf.kind, leaf.width, _layout_group_key(leaf, facts))


def emit(unit: UnitPlan, table: ChunkTable) -> None:
    """Step 4 of the module docstring: one group per kind of work over every leaf and file
    of the unit (pages whose leaves store values alike and whose encodings
    :func:`plan._group_key` does not tell apart; dictionary pages by index bits and
    :func:`_dictionary_key`, each page's indices to its own index scratch).  A corrupt
    group is emitted again leaf by leaf, so that the error names its file and column.
    Pages are grouped per device block and distinct layout (array work within a block)."""
    groups: dict[tuple, tuple[list[int], list[int]]] = {}  # key: page row ranges, in order
    edges = table.edges.tolist()
    layout_of = table.page_layout.tolist()
    for k, block in enumerate(table.device_blocks):
        leaf, lo, hi = block.leaf, edges[k], edges[k + 1]
        if hi - lo == 1:
            key = _emit_key(table, block, layout_of[lo])
        else:
            lay = table.page_layout[lo:hi]
            here = list(dict.fromkeys(layout_of[lo:hi]))
            keys = {d: _emit_key(table, block, d) for d in here}
            if len(set(keys.values())) > 1:  # pages encoded otherwise within the leaf: their rows in each group
                for d, key in keys.items():
                    rows = lo + np.flatnonzero(lay == d)
                    los, his = groups.setdefault(key, ([], []))
                    los.extend(rows.tolist())
                    his.extend((rows + 1).tolist())
                continue
            key = keys[here[0]]
        los, his = groups.setdefault(key, ([], []))
        los.append(lo)
        his.append(hi)
    for los, his in groups.values():
        members = _rows(los, his)
        try:
            _emit_group(unit, table, members)
        except CorruptFileError:
            by_leaf: dict[int, list[int]] = {}
            for j in members.tolist():
                by_leaf.setdefault(id(table.leaf(j)), []).append(j)
            for pages in by_leaf.values():
                _emit_group(UnitPlan(), table, np.asarray(pages, np.int64))  # raises for the first corrupt leaf
            raise
    for k, block in enumerate(table.device_blocks):  # FSST segments: the pages with a symbol table
        leaf = block.leaf
        if leaf.kind != "var":  # (dictionary pages have no symbol table: no FSST rows)
            continue
        lo = edges[k]
        if block.leaves is not None:  # a pass block: each leaf's rows
            assert block.leaf_rows is not None
            for m, first in zip(block.leaves, block.leaf_rows.tolist(), strict=False):
                at = lo + first
                for j in unit.fsst_rows.get(id(m), _NO_END).tolist():
                    fsst_plan.add_segments(unit, (id(m), j), _value_dst(m, int(table.vpos[at + j])), int(table.num_values[at + j]))
            continue
        for j in unit.fsst_rows.get(id(leaf), _NO_END).tolist():
            fsst_plan.add_segments(unit, (id(leaf), j), _value_dst(leaf, int(table.vpos[lo + j])), int(table.num_values[lo + j]))


def parse_and_emit(unit: UnitPlan, arena) -> None:
    """The unit's device pre-pass (the module docstring), before its work table is packed."""
    if not unit.device_blocks:
        return
    table, staged_at = unit.chunk_table if unit.chunk_table is not None else (ChunkTable(unit.device_blocks), None)
    with _array.nvtx_range("lance_gpu.chunk_headers"):
        parse_on_device(table, arena, staged_at)
    check(table)
    settle_levels(unit, table)
    emit(unit, table)
    unit.device_blocks = []
    unit.chunk_table = None


def parse_and_emit_on_host(unit: UnitPlan) -> None:
    """:func:`parse_and_emit` with the CPU form of the pre-pass over the unit's staged bytes
    gathered on the host (no device): the reference the device path is tested against."""
    if not unit.device_blocks:
        return
    table = ChunkTable(unit.device_blocks)
    parse_on_host(table, unit.stage.host_bytes())
    check(table)
    settle_levels(unit, table)
    emit(unit, table)
    unit.device_blocks = []


__all__ = [
    "ChunkTable", "check", "emit", "parse_and_emit", "parse_and_emit_on_host", "parse_on_device", "parse_on_host", "settle_levels",
    "stage",
]
