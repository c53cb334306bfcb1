# SPDX-License-Identifier: Apache-2.0
"""The device pre-pass of a read unit: mini-block chunk headers parsed where the chunks lie.

The planner places mini-block pages without repetition levels (:func:`plan.device_headers`)
from their protobuf alone (``num_items`` values, one definition level each), and so every
page of a list leaf whose pages are all mini-block pages (:func:`plan.device_lists`: their
level counts are in-band, the leaf's level regions wait for the pre-pass); it stages their
chunks (buffer 1) without reading them (:class:`plan.DevicePage`); their chunk metadata
(buffer 0: chunk starts, sizes and value counts) is decoded for every page of the pass at
once, every leaf and file (:func:`plan.fill_chunk_layouts`: NumPy over all the words).
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

import numpy as np

import cuda_kernels.chunkheaders as chk
from cuda_kernels import _device
from lance_gpu.errors import CorruptFileError
from lance_gpu.file.encodings.bitpacking.gpu_plan import InlineBlocks
from lance_gpu.file.v2_1 import miniblock
from lance_gpu.gpu import _array, worktable
from lance_gpu.gpu.plan import (
    DevicePage,
    UnitPlan,
    _add_fsst,
    _Chunks,
    _emit_chunk_work,
    _group_key,
    _index_encoding,
    _level_encoding,
    _level_key,
    _value_dst,
    fill_chunk_layouts,
    page_level_fills,
)

_NO_END = np.zeros(0, np.int64)
_EMPTY = np.zeros(0, np.uint8)
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


def _inline_word(mb) -> int:
    enc = mb.value_compression
    if enc.WhichOneof("compression") != "inline_bitpacking":
        return 0
    return int(enc.inline_bitpacking.uncompressed_bits_per_value) // 8


def _chunk_shape(mb) -> tuple[int, int]:
    """``(chunkheaders shape bits, inline value word bytes)`` of a mini-block layout ``mb``."""
    has_rep, has_def = mb.HasField("rep_compression"), mb.HasField("def_compression")
    word = _inline_word(mb)
    shape = chk.shape_bits(has_rep, has_def, bool(mb.has_large_chunk), has_def and not has_rep, int(mb.num_buffers), word,
                           _level_form(mb, "rep_compression"), _level_form(mb, "def_compression"))
    return shape, word


def _page_shape(dp: DevicePage) -> tuple[int, int]:
    """:func:`_chunk_shape` of a page, derived once per distinct layout (``LayoutFacts``)."""
    facts = dp.page.facts
    if facts is None:
        return _chunk_shape(dp.page.layout)
    if facts.chunk_shape is None:
        facts.chunk_shape = _chunk_shape(facts.body)
    return facts.chunk_shape


class ChunkTable:
    """The chunk table of a unit's device-parsed pages (host side), before and after the
    pre-pass: page ``j``'s chunks are rows ``bounds[j]:bounds[j + 1]``; chunk ``i``'s inline
    blocks are rows ``block_first[i]:block_first[i] + nblocks[i]`` of the block table."""

    def __init__(self, pages: list[DevicePage]) -> None:
        self.pages = pages
        npages = len(pages)
        fill_chunk_layouts([(dp.leaf, dp.page) for dp in pages])  # the pass's metadata words, together
        per_page = np.fromiter((dp.page.parsed["counts"].size for dp in pages), np.int64, npages)
        self.bounds = miniblock.exclusive_scan(per_page)
        parsed = [dp.page.parsed for dp in pages]
        pos = np.fromiter((dp.data_pos for dp in pages), np.int64, npages)
        size = np.fromiter((dp.size for dp in pages), np.int64, npages)
        self.counts = np.concatenate([p["counts"] for p in parsed]) if npages else np.zeros(0, np.int64)
        self.start = np.concatenate([p["starts"] for p in parsed]) + np.repeat(pos, per_page) if npages else np.zeros(0, np.int64)
        self.size = np.concatenate([p["sizes"] for p in parsed]) if npages else np.zeros(0, np.int64)
        self.limit = np.repeat(pos + size, per_page)
        shape_word = np.array([_page_shape(dp) for dp in pages], np.int64).reshape(npages, 2)
        shapes, words = shape_word[:, 0], shape_word[:, 1]
        self.shape = np.repeat(shapes, per_page)
        self.nblocks = np.where(np.repeat(words, per_page) > 0, -(-self.counts // 1024), 0)  # value blocks
        self.def_blocks_at, self.rep_blocks_at = chk.level_block_offsets(self.shape, self.counts, self.size)
        scan = miniblock.exclusive_scan(chk.block_rows(self.shape, self.counts, self.size))
        self.block_first = scan[:-1]
        self.total_blocks = int(scan[-1])
        self.out = np.zeros((0, chk.OUT_COLUMNS), np.int64)
        self.blocks = np.zeros((0, 2), np.int64)

    @property
    def nchunks(self) -> int:
        return int(self.bounds[-1])

    def columns(self) -> list[np.ndarray]:
        return [self.start, self.size, self.counts, self.limit, self.shape, self.block_first]


def stage(unit: UnitPlan) -> None:
    """Lay out the chunk table of the unit's device-parsed pages (step 1) and stage it with
    the unit's bytes (it goes up in the same copies, no upload of its own); call after the
    last page is placed, before :meth:`Stager.upload`."""
    if not unit.device_pages or unit.chunk_table is not None:
        return
    table = ChunkTable(unit.device_pages)
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
    dp = table.pages[int(np.searchsorted(table.bounds, first, side="right")) - 1]
    code = int(status[first])
    for bit, message in _MESSAGES:
        if code & bit:
            raise dp.leaf.ctx().corrupt(message)


def settle_levels(unit: UnitPlan, table: ChunkTable) -> None:
    """Allocate the level regions of the unit's list leaves whose level counts are in-band
    (:attr:`plan.LeafPlan.levels_pending`), from the level counts the pre-pass read back:
    every page's ``num_levels`` (the sum of its chunks' ``num_levels`` where it has
    repetition levels), its leaf's, the leaf's rep / def regions (after every region the
    planner allocated) and each page's first rep / def level; then the page's level fills
    and remaps (:func:`plan.page_level_fills`).  Call after :func:`check`."""
    pending: dict[int, list[int]] = {}
    for j, dp in enumerate(table.pages):
        if dp.leaf.levels_pending:
            pending.setdefault(id(dp.leaf), []).append(j)
    if not pending:
        return
    scan = miniblock.exclusive_scan(table.out[:, chk.OUT_LEVELS] if table.nchunks else _NO_END)
    in_band = scan[table.bounds[1:]] - scan[table.bounds[:-1]]
    for members in pending.values():
        leaf = table.pages[members[0]].leaf
        for j in members:
            page = table.pages[j].page
            if page.has_rep:
                page.num_levels = int(in_band[j])
        leaf.num_levels = sum(pp.num_levels for pp in leaf.pages)
        leaf.rep_pos = unit.alloc_levels(leaf.num_levels) if leaf.has_rep else -1
        leaf.def_pos = unit.alloc_levels(leaf.num_levels) if leaf.has_def else -1
        lpos = 0
        for j in members:  # every page of the leaf, in order (all planned for the pre-pass)
            dp = table.pages[j]
            dp.rep_dst = leaf.rep_pos + lpos if leaf.has_rep else -1
            dp.def_dst = leaf.def_pos + lpos if leaf.has_def else -1
            page_level_fills(unit, leaf, dp.page, dp.rep_dst, dp.def_dst)
            lpos += dp.page.num_levels


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


def _chunks(table: ChunkTable, members: list[int]) -> _Chunks:
    """The chunks of pages ``members`` (of one leaf, encoded alike) as :func:`plan._emit_chunk_work` takes them."""
    sel = np.asarray(members, np.int64)
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
    pages = [table.pages[j] for j in members]
    vpos = np.fromiter((dp.vpos for dp in pages), np.int64, sel.size)
    ddst = np.fromiter((dp.def_dst for dp in pages), np.int64, sel.size)
    rdst = np.fromiter((dp.rep_dst for dp in pages), np.int64, sel.size)
    value = np.repeat(vpos, per_page) + in_page
    def_dst = np.repeat(ddst, per_page) + level_in_page
    rep_dst = np.repeat(rdst, per_page) + level_in_page
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
    base = np.fromiter((dp.leaf.slot_lo if dp.leaf.kind == "var" else dp.leaf.value_pos for dp in pages), np.int64, sel.size)
    index_first = None
    if pages[0].dictionary is not None:
        ipos = np.fromiter((dp.dictionary[1] for dp in pages), np.int64, sel.size)  # type: ignore[index]
        index_first = np.repeat(ipos, per_page) + in_page
    return _Chunks(
        _EMPTY, 0, 8, False, _NO_END, counts, levels, np.ascontiguousarray(out[:, chk.OUT_REP : chk.OUT_REP + 2]),
        np.ascontiguousarray(out[:, chk.OUT_DEF : chk.OUT_DEF + 2]), out[:, chk.OUT_BUF0 : chk.OUT_BUF1 + 2].reshape(-1, 2, 2),
        value, rep_dst, def_dst, blocks, np.repeat(base, per_page), index_first,
        **found,  # type: ignore[arg-type]
    )


def _dictionary_key(mb) -> tuple:
    """What the work of a dictionary page's chunks depends on besides its index bits: the
    index encoding, the level encodings and the buffer count."""
    dfn = _level_key(mb.def_compression) if mb.HasField("def_compression") else None
    rep = _level_key(mb.rep_compression) if mb.HasField("rep_compression") else None
    return _index_encoding(mb.value_compression), dfn, rep, int(mb.num_buffers)


def _emit_group(unit: UnitPlan, table: ChunkTable, members: list[int]) -> None:
    first = table.pages[members[0]]
    leaf, mb = first.leaf, first.page.layout
    ch = _chunks(table, members)
    dictionary = None if first.dictionary is None else (first.dictionary[0], 0)  # positions in ch.index_first
    _emit_chunk_work(unit, leaf, mb, ch, sum(table.pages[j].page.num_values for j in members), dictionary, leaf.ctx())


def _page_group_key(dp: DevicePage) -> tuple:
    """:func:`plan._group_key` of a page, derived once per distinct layout and leaf kind."""
    facts = dp.page.facts
    if facts is None:
        return _group_key(dp.leaf, dp.page.layout)
    key = facts.group_keys.get(dp.leaf.kind)
    if key is None:
        key = facts.group_keys[dp.leaf.kind] = _group_key(dp.leaf, facts.body)
    return key


def emit(unit: UnitPlan, table: ChunkTable) -> None:
    """Step 4 of the module docstring: one group per kind of work over every leaf and file
    of the unit (pages whose leaves store values alike and whose encodings
    :func:`plan._group_key` does not tell apart; dictionary pages by index bits and
    :func:`_dictionary_key`, each page's indices to its own index scratch).  A corrupt
    group is emitted again leaf by leaf, so that the error names its file and column."""
    groups: dict[tuple, list[int]] = {}
    for j, dp in enumerate(table.pages):
        if dp.dictionary is not None:
            groups.setdefault(("dictionary", dp.dictionary[0], _dictionary_key(dp.page.layout)), []).append(j)
        else:
            groups.setdefault((dp.leaf.kind, dp.leaf.width, _page_group_key(dp)), []).append(j)
    for members in groups.values():
        try:
            _emit_group(unit, table, members)
        except CorruptFileError:
            by_leaf: dict[int, list[int]] = {}
            for j in members:
                by_leaf.setdefault(id(table.pages[j].leaf), []).append(j)
            for pages in by_leaf.values():
                _emit_group(UnitPlan(), table, pages)  # raises for the first corrupt leaf
            raise
    for dp in table.pages:  # FSST symbol tables, per page
        mb = dp.page.layout
        if dp.leaf.kind == "var" and dp.dictionary is None and dp.page.num_values and mb.value_compression.WhichOneof("compression") == "fsst":
            _add_fsst(unit, mb.value_compression.fsst.symbol_table, _value_dst(dp.leaf, dp.vpos), dp.page.num_values, dp.leaf.ctx())


def parse_and_emit(unit: UnitPlan, arena) -> None:
    """The unit's device pre-pass (the module docstring), before its work table is packed."""
    if not unit.device_pages:
        return
    table, staged_at = unit.chunk_table if unit.chunk_table is not None else (ChunkTable(unit.device_pages), None)
    with _array.nvtx_range("lance_gpu.chunk_headers"):
        parse_on_device(table, arena, staged_at)
    check(table)
    settle_levels(unit, table)
    emit(unit, table)
    unit.device_pages = []
    unit.chunk_table = None


def parse_and_emit_on_host(unit: UnitPlan) -> None:
    """:func:`parse_and_emit` with the CPU form of the pre-pass over the unit's staged bytes
    gathered on the host (no device): the reference the device path is tested against."""
    if not unit.device_pages:
        return
    table = ChunkTable(unit.device_pages)
    parse_on_host(table, unit.stage.host_bytes())
    check(table)
    settle_levels(unit, table)
    emit(unit, table)
    unit.device_pages = []


__all__ = [
    "ChunkTable", "check", "emit", "parse_and_emit", "parse_and_emit_on_host", "parse_on_device", "parse_on_host", "settle_levels",
    "stage",
]
