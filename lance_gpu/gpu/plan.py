# SPDX-License-Identifier: Apache-2.0
"""Decode plans: what the device must do for every page of the requested columns.

The file and table layers decide *which* pages and byte ranges a read needs, exactly as on
the CPU (``FragmentSnapshot.field_source``, ``LanceFileReader.column(...).pages``,
``reader.parse_layout``); this module turns each page into work items, grouped by *kernel
family* over all pages of all requested columns of a read unit, so that
:mod:`lance_gpu.gpu.decode` launches each family once:

==============================  ========================================================
family                          pages that feed it
==============================  ========================================================
``copy`` (batched memcpy)       Flat / FixedSizeList chunks, full-zip fixed width without
                                control words, level tails, constant-page levels
``unpack`` (per word size)      InlineBitpacking values and dictionary indices,
                                OutOfLineBitpacking rep/def levels (scatter unpack)
``bits``                        boolean Flat{1} chunks (to one byte per value), the item
                                validity bits of FixedSizeList{has_validity} chunks (to a
                                byte per item of their layer: :attr:`LeafPlan.item_pos`,
                                :func:`item_regions`)
``fill``                        constant and all-null pages (values, levels, spans; the
                                items of fixed-size list layers without item validity
                                beside pages with it: :func:`_fill_valid_items`)
``rle`` (per value size)        Rle{Flat, Flat8} chunks
``variable spans``              Variable chunk buffers (plain and FSST strings)
``full-zip walk``               full-zip pages with control words or lengths, or with
                                fixed-size list item validity (split to a byte per item)
``dictionary spans``            mini-block pages with a page dictionary
``remap``                       definition levels of pages whose layers differ
``fsst``                        FSST pages (lengths pass, scan, decode pass)
==============================  ========================================================

What an encoding's pages need -- its protobuf parsed, the byte layout of its buffers, the
checks that refuse a corrupt page, and the work rows of its page kinds -- is the encoding's
own planning module, ``lance_gpu.file.encodings.<name>.gpu_plan`` (functions over
protobufs, NumPy arrays and the unit's work lists, below this layer: they see a unit as
``encodings.base.DeviceUnit``), registered with the rest of the encoding in one place
(``lance_gpu.file.encodings.ENCODINGS``).  This module keeps the units (arenas, work lists,
allocation), the page tables, staging, the layout walks (mini-block chunks, full-zip rows,
constant and all-null pages, mixed leaves, row selections) and the generic dispatch: where
each chunk's values and levels go in its leaf, asked of the registry, which dispatches to
the encoding's planning and refuses, saying why, what no encoding's planning takes
(``DeviceUnsupported``, which is :class:`Unsupported`):

==============================  ========================================================
registry (``file.encodings.``)  asked here by
==============================  ========================================================
``device_value_form``           :func:`check_page`, :func:`_group_key`,
                                :func:`_emit_chunk_work` (the kernel family and its
                                argument of a page's values)
``device_value_emitter``        :func:`_emit_chunk_work`: the family's ``emit_values``
                                (``Registration.families``), given each chunk's
                                destination (value slot or fixed-arena byte)
``device_level_form`` /         :func:`_level_encoding`, :func:`_emit_levels`: a level
``device_level_emitter``        encoding's kind and its ``emit_levels``
``device_level_key``            :func:`_group_key`, :func:`_dictionary_key`: what a level
                                emission reads of its encoding (its kind; out-of-line
                                bit-packed levels: their width)
``device_full_zip_form``        :func:`check_page`, the full-zip table (copied or walked)
==============================  ========================================================

and what one encoding gives besides its forms is a direct call into its ``gpu_plan``:

==============================  ========================================================
module (``file.encodings.``)    planning and emission it holds (caller here)
==============================  ========================================================
``flat.gpu_plan``               Flat value forms and widths; ``emit_values`` (copy, or
                                spread to bytes), ``emit_levels`` (Flat16 copied)
``fixed_size_list.gpu_plan``    FixedSizeList(Flat) value forms: items per value (emitted
                                as Flat); layers with item validity (``fsl_valid``, a
                                chunk buffer per such layer, then the items;
                                ``emit_values``: each buffer's bits spread to its layer's
                                region from :attr:`_Chunks.item_base`, the items as
                                Flat's; or full-zip rows of each layer's validity bytes,
                                at most two, then items: :func:`_fullzip_layout_facts`)
``variable.gpu_plan``           Variable value forms (offset widths); ``emit_values``
                                (variable spans)
``fsst.gpu_plan``               FSST value forms (their Variable chunks, emitted as
                                ``var``); ``stage_tables`` (symbol tables packed in the
                                arena layout, :func:`place_leaf`, ``passplan``),
                                ``add_segments`` (FSST segments of a page's slots)
``bitpacking.gpu_plan``         inline value forms, blocks and words (``headers``);
                                ``emit_values``, ``emit_inline`` (unpack rows),
                                ``emit_levels`` (inline blocks; out-of-line blocks and raw
                                tails), ``level_key`` (out-of-line widths)
``rle.gpu_plan``                value forms and bits; ``emit_values``, ``emit_chunks``
                                (values, indices), ``emit_levels`` (block-form runs), through
                                :meth:`UnitPlan.add_rle`
``dictionary.gpu_plan``         index encodings (``index_form``), bits and chunk buffers,
                                index widths (``INDEX_BITS``: a unit's index scratch);
                                ``emit_indices`` (:func:`_emit_chunk_work`); dictionary
                                items decoded alone or together (:func:`check_page`,
                                :func:`_stage_one_dictionary`,
                                :func:`_dictionaries_together`, :func:`_dictionary_key`),
                                placed here (index scratch, item staging)
==============================  ========================================================

``constant``, ``byte_stream_split``, ``general`` and ``packed_struct`` have no device
planning (``Registration.cpu_only`` says why): a page whose values use them is read by the
CPU reader.  ConstantLayout pages (a layout, not the ``constant`` encoding) are planned
here: their values and levels decoded on the host (``file.v2_1.constant``) and filled or
copied at the leaf's positions (:func:`_emit_constant_page`).

Every leaf is planned as a *table of its pages* (:class:`pagetable.LeafPages`,
:attr:`LeafPlan.table`; :func:`_table_column`): no Python object per page.  Page layouts
are not parsed per page: each distinct ``PageLayout`` protobuf is parsed and classified
once per process, and a column's pages are read from its page selection
(:mod:`lance_gpu.gpu.pagetable`: layouts, buffer ranges and counts per column, made once per
parsed ``ColumnInfo``); a read unit places the same column of its many fragments as one
table of their pages (:mod:`lance_gpu.gpu.passplan`, :func:`pagetable.concat`).  A table is
counted, placed, staged, its work emitted with array operations and one step per
distinct layout; what it derives from its column (its totals and scans, layers, FSST
tables, full-zip facts and checks) is made once per column and shared by every file
reading it, so a one-page leaf (many small fragments) costs a few scalar steps.  By kind:

* mini-block pages (flat and list pages, with page dictionaries or not): planned from
  their protobuf alone and staged as one :class:`DeviceBlock` over the table's rows; their
  chunk metadata is decoded for every such page of the pass at once
  (:func:`table_chunk_layouts`) and their chunk headers, level sections and inline bit
  widths are parsed on the device, after staging, by :mod:`lance_gpu.gpu.headers` (one
  launch and one readback per unit), which emits their work for every leaf and file of
  the unit together.  Without repetition levels (:func:`device_headers`) a page's level
  and value counts follow from its chunk metadata; a list leaf's level counts are in-band
  (:func:`_device_lists`), so its level regions are allocated after that readback
  (:attr:`LeafPlan.levels_pending`, :func:`headers.settle_levels`).  Dictionaries are
  placed by table row (:func:`_dictionaries_together`; where only some pages have one,
  :func:`_some_dictionaries`: together, or each before its page's chunks, the block's
  other rows naming no index scratch);
* full-zip pages (long strings, embeddings: :func:`_place_fullzip_table`);
* constant / all-null pages (a step per row: their counts and levels are in their
  buffers, decoded per leaf into :attr:`LeafPlan.constant_pages` beside the column's
  shared table, :func:`_plan_constant_table`);
* a leaf whose pages are of several of these kinds (strings whose long pages go
  full-zip, lists or nullable columns with all-null or constant pages) has its rows split
  by kind once per column (:class:`_MixedColumn`, :func:`_plan_mixed_table`): staged in
  page order, each kind placed by what places a table of it at the leaf's value and level
  positions (with in-band list levels: after the pre-pass, :func:`settle_mixed_levels`).

In a memory-mapped file a table's buffers are views of the map (staged by
:meth:`Stager.add_file_buffers`); on an object store (:func:`_stage_rows`,
:func:`_read_rows`) its chunks, full-zip data and repetition indexes are not fetched while
planning but read from the store straight into the pinned staging slabs
(:meth:`Stager.add_range`; :attr:`UnitPlan.direct_pages` counts them), and what planning
reads (chunk metadata, dictionaries, constant pages) is read with
:meth:`LanceFileReader.read_buffers`.  A row selection's pages are a table of the selected
pages too: pages it does not cut whole, mini-block pages cut to their chunks
(:class:`ChunkCut`), full-zip pages cut to row runs (:class:`RowRuns`: each cut page's
spans and rebased repetition index staged in page order, a walk or copy row per run), or
both in a leaf of several page kinds.

Pages no table takes -- pages pylance does not write: mini-block pages without value
buffers or without their chunks, dictionary pages without values, list pages the device
pre-pass does not parse -- make their field raise :class:`Unsupported` (the field is read by
the CPU reader, which decodes or refuses them); a full-zip page without its data buffer is
corrupt (:func:`_refuse`).

Host work is limited to metadata: protobufs, mini-block chunk metadata words, page
dictionaries (small; decoded with the CPU decoders, LZ4 included), full-zip repetition
indexes a row selection reads and the levels of constant pages.  A field whose pages use anything
else (General/zstd or LZ4 chunks, byte-stream-split, 2.0 files, Arrow dictionary types, ...)
is read by the CPU reader instead (:class:`Unsupported` says why).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa

from lance_gpu.errors import CorruptFileError
from lance_gpu.file import encodings
from lance_gpu.file.arrow import leaf_types
from lance_gpu.file.container import LanceFileReader
from lance_gpu.file.encodings.base import DecodeContext, DeviceUnsupported
from lance_gpu.file.encodings.bitpacking import gpu_plan as bitpacking_plan
from lance_gpu.file.encodings.dictionary import gpu_plan as dictionary_plan
from lance_gpu.file.encodings.fixed_size_list import gpu_plan as fsl_plan
from lance_gpu.file.encodings.fsst import gpu_plan as fsst_plan
from lance_gpu.file.page import LIST_LAYERS
from lance_gpu.file.v2_1 import constant as constant_layout
from lance_gpu.file.v2_1 import miniblock
from lance_gpu.file.v2_1.fullzip import _ctrl_bytes
from lance_gpu.file.v2_1.levels import common_layers, def_meaning
from lance_gpu.file.v2_1.repdef import invisible_levels
from lance_gpu.file.validate import is_utf8_type
from lance_gpu.gpu import pagetable
from lance_gpu.gpu.staging import Stager

#: a table of mini-block pages (:func:`_place_table_leaf`, ``passplan``) is staged with array
#: operations from this many pages on; below, with a loop over scalars
DEVICE_BLOCK_MIN_PAGES = 8
#: A page (or type) the GPU decoder has no kernel for; the field is read on the CPU (raised
#: here and by the encodings' device planning, which says why).
Unsupported = DeviceUnsupported


# --------------------------------------------------------------------------------------------
# Leaf kinds


def _storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def leaf_kind(t: pa.DataType) -> tuple[str, int]:
    """(``"fixed"`` | ``"bool"`` | ``"var"``, bytes per value) of a leaf type.

    Booleans take one byte per item on the device (cuDF's BOOL8); a fixed-size list is a
    fixed-width value of its items (``dim`` bytes per value for booleans).
    """
    s = _storage(t)
    if pa.types.is_dictionary(s):
        raise Unsupported("Arrow dictionary-typed columns")
    if pa.types.is_null(s):
        raise Unsupported("null-typed columns")
    if (
        pa.types.is_string(s) or pa.types.is_large_string(s) or pa.types.is_binary(s)
        or pa.types.is_large_binary(s) or pa.types.is_string_view(s) or pa.types.is_binary_view(s)
    ):
        return "var", 0
    if pa.types.is_boolean(s):
        return "bool", 1
    if pa.types.is_fixed_size_list(s):
        kind, w = leaf_kind(s.value_type)
        if kind == "var":
            raise Unsupported("fixed-size lists of variable-width items")
        return kind, w * s.list_size
    try:
        bits = s.bit_width
    except ValueError as exc:
        raise Unsupported(f"type {s}") from exc
    if bits % 8:
        raise Unsupported(f"{bits}-bit values")
    return "fixed", bits // 8


def _level_encoding(enc) -> str:
    """Kind of a per-chunk level encoding the GPU decodes (u16 levels): Flat{16},
    OutOfLineBitpacking{16, Flat} or InlineBitpacking{16} or Rle{Flat16, Flat8} (the block
    forms of each), as its encoding's planning says (:func:`encodings.device_level_form`)."""
    return encodings.device_level_form(enc)


# --------------------------------------------------------------------------------------------
# Plans


@dataclass(slots=True)
class LeafPlan:
    reader: LanceFileReader
    column: int
    arrow_type: pa.DataType
    kind: str
    width: int
    layers: tuple[int, ...] = (1,)
    num_values: int = 0
    num_levels: int = 0
    num_rows: int = 0
    has_rep: bool = False
    has_def: bool = False
    value_pos: int = -1  # fixed / bool: byte position in the fixed arena
    slot_lo: int = -1  # var: first value slot
    #: fixed-size lists (one layer or nested) some of whose mini-block or full-zip pages carry
    #: item validity (``("fsl_valid", ...)`` forms, :mod:`lance_gpu.file.encodings.fixed_size_list.gpu_plan`),
    #: or some of whose pages are all null (their items are null): per layer, outer first, its
    #: items per value (``item_layers``: ``(2, 6)`` for lists of 2 lists of 3; empty: none),
    #: their sum (``item_dim``, 0: none), and the byte of the fixed arena where its
    #: ``num_values * item_dim`` item validity bytes go (``item_pos``,
    #: :func:`place_item_validity`): one 0 / 1 byte per item, layer after layer (layer ``k``
    #: from ``item_pos + num_values * sum(item_layers[:k])``, value-major: :func:`item_regions`);
    #: every page writes its own (:func:`_item_layers_of`)
    item_dim: int = 0
    item_pos: int = -1
    item_layers: tuple[int, ...] = ()
    rep_pos: int = -1  # first level in the level arena
    def_pos: int = -1
    #: the leaf's level counts are in-band (list pages whose chunk headers the device parses,
    #: :func:`_device_lists`): its pages' ``num_levels`` and its own are estimates, and its
    #: level regions are allocated once the pre-pass has read them (:mod:`lance_gpu.gpu.headers`)
    levels_pending: bool = False
    #: the bytes of its pages' buffers in the file (all of them, deferred ones too; a row
    #: selection's cut pages count whole): what a read unit's memory estimate starts from
    page_bytes: int = 0
    #: a leaf whose pages all go to the device pre-pass, or are all full-zip pages, or all
    #: constant pages, or a mix of these (:func:`_table_column`), is planned as a table of its
    #: pages: no per-page Python object (None: a leaf without pages)
    table: pagetable.LeafPages | None = None
    #: a leaf of constant / all-null pages planned as a table (its column's shared ``table``):
    #: each row's decoded page (:func:`constant_layout.decode`: counts, levels, value), row order
    #: (a leaf of several page kinds, :attr:`mixed`: its constant rows', in row order)
    constant_pages: list | None = None
    #: a leaf whose pages are of several kinds (mini-block pages beside full-zip or constant
    #: ones) planned as a table (its column's shared ``table``): its rows by kind and counts
    #: (:func:`_plan_mixed_table`)
    mixed: _MixedLeaf | None = None

    @property
    def path(self) -> str:
        return self.reader.path

    @property
    def num_pages(self) -> int:
        return len(self.table) if self.table is not None else 0

    def ctx(self) -> DecodeContext:
        return DecodeContext(self.reader.path, self.column)


@dataclass(slots=True)
class FieldPlan:
    """One top-level field of one fragment, decoded on the GPU."""

    key: int  # the fragment's position in the read unit
    name: str
    arrow_field: pa.Field
    leaves: list[LeafPlan]
    num_rows: int  # rows the leaves decode
    #: the physical rows decoded, as sorted disjoint ``[start, end)`` ranges (k x 2); None:
    #: every row of the fragment (:mod:`lance_gpu.gpu.rows`)
    ranges: np.ndarray | None = None


def output_columns(fps: list[FieldPlan]) -> list[int]:
    """The output column of every leaf of ``fps`` (in order, leaf by leaf): the ``j``-th leaf
    of a field is the same column in every fragment of a unit, numbered in order of first
    appearance.  A column's leaves get adjacent value regions (``read._stage``) and one run
    of validity bits (``assemble``), so that a one-unit read's columns are combined as they are."""
    columns: dict[tuple[str, int], int] = {}
    return [columns.setdefault((fp.name, j), len(columns)) for fp in fps for j in range(len(fp.leaves))]


class _Lists:
    """Append-only columns of int64 values (a work list), turned into arrays at the end."""

    def __init__(self, *names: str) -> None:
        self._names = names
        self._parts: dict[str, list[np.ndarray]] = {n: [] for n in names}

    def add(self, **cols) -> None:
        """Append entries: every column an array of ``n`` values or one value for all ``n``
        (``n``: the longest column).  Called per page or per group of pages, so int64
        vectors of the right length are taken as they are."""
        values = [cols[name] for name in self._names]
        sizes = [v.size if type(v) is np.ndarray else 1 for v in values]
        n = max(sizes)
        for name, v, size in zip(self._names, values, sizes, strict=True):
            if size == n and type(v) is np.ndarray and v.ndim == 1 and v.dtype == np.int64:
                a = v
            else:
                a = np.asarray(v, np.int64).reshape(-1)
                if a.size != n:
                    if a.size != 1:
                        msg = f"work list column {name} has {a.size} entries, expected {n}"
                        raise ValueError(msg)
                    a = np.full(n, a[0], np.int64)
            self._parts[name].append(a)

    def __len__(self) -> int:
        return sum(a.size for a in self._parts[self._names[0]])

    def arrays(self) -> dict[str, np.ndarray]:
        if self.bound is not None:
            return self.bound
        return {
            n: (np.concatenate(p).astype(np.int64) if p else np.zeros(0, np.int64)) for n, p in self._parts.items()
        }

    #: the columns as views of the pass's work table (:mod:`lance_gpu.gpu.worktable`), once packed
    bound: dict[str, np.ndarray] | None = None


def work_lists(unit: UnitPlan) -> list[_Lists]:
    """Every work list of a unit (each kernel family's page work items)."""
    out = [unit.copy_fixed, unit.copy_level, *unit.copy_index.values(), *unit.unpack.values(), unit.bits,
           *unit.rle.values(), unit.var_chunks, unit.fullzip, *unit.dictionary.values()]
    return [lst for lst in out if len(lst)]


def _ranges() -> _Lists:
    return _Lists("src", "len", "dst")


#: the level work of a full-zip or constant page placed before its leaf's level positions
#: are known: called with the page's first repetition / definition level
LevelWork = Callable[[int, int], None]


#: the columns of a unit's dictionary work rows (``UnitPlan.dictionary``, per index bits)
DICTIONARY_COLUMNS = ("start", "count", "items", "nitems", "width", "offsets", "dst")


class UnitPlan:
    """Every work item of one read unit, grouped by kernel family."""

    def __init__(self) -> None:
        self.stage = Stager()
        self.fields: list[FieldPlan] = []
        self.fixed_size = 0  # bytes of the fixed arena
        self.fixed_end = 0  # end of its last region (fixed_size is that, 64-byte aligned)
        self.level_size = 0  # u16 items of the level arena
        self.nslots = 0  # variable-width value slots
        self.index_size = {bits: 0 for bits in dictionary_plan.INDEX_BITS}  # dictionary index scratch, in items
        # copy family: (arena byte, bytes, destination byte) per destination array
        self.copy_fixed = _ranges()
        self.copy_level = _ranges()
        self.copy_index = {bits: _ranges() for bits in dictionary_plan.INDEX_BITS}
        # unpack family: per (destination, word bits)
        self.unpack: dict[tuple[str, int], _Lists] = {}
        # bits family (booleans): arena bit, count, fixed-arena byte
        self.bits = _Lists("src", "count", "dst")
        # fill family: destination byte, bytes, pattern
        self.fill_fixed: list[tuple[int, int, bytes]] = []
        self.fill_level: list[tuple[int, int, bytes]] = []
        self.fill_slots: list[tuple[int, int, int, int]] = []  # (slot, count, start, length)
        # rle family, per value bits: values/runs in the arena, and where the expansion goes
        self.rle: dict[int, _Lists] = {}
        # variable chunk spans
        self.var_chunks = _Lists("start", "size", "width", "count", "dst")
        # full-zip walk
        self.fullzip = _Lists(
            "rows", "data", "size", "index", "iwidth", "stride", "ctrl", "bits_def", "offb", "valb",
            "inv", "ninv", "rep_dst", "def_dst", "val_dst", "items", "visible", "idim", "item_dst", "idim2", "item_dst2",
        )
        self.invisible: list[np.ndarray] = []
        self.invisible_size = 0
        # dictionary spans, per index word bits
        self.dictionary: dict[int, _Lists] = {}
        #: the variable-width dictionary pages' values and an upper bound of their bytes
        #: (each page's values times its dictionary's longest item, known where the host
        #: decodes the dictionary): what the decode sizes their bytes from instead of reading
        #: the total back (``decode._var_bound``, which checks every such value was counted)
        self.var_dictionary_values = 0
        self.var_dictionary_bytes = 0
        # remap of definition levels: (level position, count, table)
        self.remap: list[tuple[int, int, np.ndarray]] = []
        # fsst segments: (first slot, end slot, arena byte of its symbol table, n_symbols)
        self.fsst: list[tuple[int, int, int, int]] = []
        #: the staged symbol tables of the FSST pages whose strings are compressed, by ``id``
        #: of the page (``(id(leaf), row)`` of a leaf planned as a table): (arena byte of its
        #: table, n_symbols) (``fsst.gpu_plan.stage_tables``)
        self.fsst_tables: dict[object, tuple[int, int]] = {}
        #: the rows of those pages, per ``id`` of a leaf planned as a table
        self.fsst_rows: dict[int, np.ndarray] = {}
        # validation of the decoded variable-width values, one entry per page of a var leaf:
        # (first slot, values, must be UTF-8, file, column, page)
        self.var_checks: list[tuple[int, int, bool, str, int, int]] = []
        # the same of the leaves planned as tables, per leaf: (first slots, values, must be
        # UTF-8, file, column, pages) (arrays over its pages)
        self.var_check_rows: list[tuple[np.ndarray, np.ndarray, bool, str, int, np.ndarray]] = []
        self.paths: set[str] = set()
        #: pages whose value bytes are read from the object store straight into the pinned
        #: slabs (mini-block chunks, full-zip data), by layout: {"mini_block_layout": n, ...}
        self.direct_pages: dict[str, int] = {}
        #: mini-block pages whose chunk headers the device parses (:mod:`lance_gpu.gpu.headers`)
        self.device_blocks: list[DeviceBlock] = []
        #: the level work of a list leaf of pages of several kinds whose levels wait for the
        #: pre-pass (its full-zip and constant rows' level work and every row's level
        #: fills), keyed by the leaf's id, called with every row's first levels
        #: (:func:`settle_mixed_levels`)
        self.mixed_work: dict[int, Callable[[np.ndarray, np.ndarray], None]] = {}
        #: their chunk table and its arena position, once staged (:func:`headers.stage`)
        self.chunk_table: tuple[Any, int] | None = None

    # -- allocation -----------------------------------------------------------------------

    def alloc_fixed(self, nbytes: int, follow: bool = False) -> int:
        """A region of the fixed arena: 64-byte aligned, or (``follow``) right after the last
        one, with no gap (a leaf continuing the previous leaf's column: :func:`place_values`)."""
        pos = self.fixed_end if follow else self.fixed_size
        self.fixed_end = pos + nbytes
        self.fixed_size = -(-self.fixed_end // 64) * 64
        return pos

    def alloc_levels(self, n: int) -> int:
        pos = self.level_size
        self.level_size = -(-(pos + n) // 32) * 32
        return pos

    def alloc_slots(self, n: int) -> int:
        pos = self.nslots
        self.nslots += n
        return pos

    def count_var_dictionary(self, values: int, offsets: np.ndarray) -> None:
        """Count ``values`` values of a variable-width dictionary page whose dictionary's
        items have the (host, int64) ``offsets`` (:attr:`var_dictionary_bytes`)."""
        longest = int(np.diff(offsets).max()) if offsets.size > 1 else 0
        self.var_dictionary_values += int(values)
        self.var_dictionary_bytes += int(values) * max(longest, 0)

    def dictionary_rows(self, bits: int) -> _Lists:
        """The dictionary work rows of ``bits``-bit indices (:data:`DICTIONARY_COLUMNS`)."""
        lst = self.dictionary.get(bits)
        if lst is None:
            lst = self.dictionary[bits] = _Lists(*DICTIONARY_COLUMNS)
        return lst

    def alloc_index(self, bits: int, n: int) -> int:
        pos = self.index_size[bits]
        self.index_size[bits] = -(-(pos + n) // 8) * 8
        return pos

    def unpack_list(self, dest: str, bits: int) -> _Lists:
        key = (dest, bits)
        if key not in self.unpack:
            self.unpack[key] = _Lists("words", "width", "dst", "count")
        return self.unpack[key]

    def add_rle(self, bits: int, dest: str, **cols) -> None:
        """RLE work rows of ``bits``-bit run values (``vals``, ``runs``: arena bytes of the
        run values and u8 run lengths; ``nruns``, ``count``: runs and values per chunk;
        ``dst``: byte of ``dest``, one of :data:`_DESTS`, the chunk expands to)."""
        lst = self.rle.setdefault(bits, _Lists("vals", "runs", "nruns", "count", "dest", "dst"))
        lst.add(dest=_DESTS.index(dest), **cols)

    def count_direct(self, kind: str, n: int = 1) -> None:
        """``n`` pages of layout ``kind`` staged straight from the store (their data deferred)."""
        if n:
            self.direct_pages[kind] = self.direct_pages.get(kind, 0) + n

    def add_invisible(self, table: np.ndarray) -> int:
        pos = self.invisible_size
        self.invisible.append(np.asarray(table, np.bool_))
        self.invisible_size += table.size
        return pos

    @property
    def scratch_estimate(self) -> int:
        """Device bytes this unit needs besides its outputs (a rough upper bound)."""
        return 2 * self.stage.nbytes + 16 * self.nslots


# --------------------------------------------------------------------------------------------
# Classification: can every page of a field be decoded on the GPU?


def check_page(layout, leaf: LeafPlan) -> None:
    """Raise :class:`Unsupported` unless the GPU decodes this page of ``leaf``."""
    kind = layout.WhichOneof("layout")
    if kind == "mini_block_layout":
        mb = layout.mini_block_layout
        if mb.HasField("rep_compression"):
            _level_encoding(mb.rep_compression)
        if mb.HasField("def_compression"):
            _level_encoding(mb.def_compression)
        enc = mb.value_compression
        nbuf = int(mb.num_buffers)
        if nbuf == 0:
            return
        if mb.HasField("dictionary"):
            if nbuf != dictionary_plan.index_buffers(enc):
                raise Unsupported(f"mini-block page with {nbuf} buffers")
            dictionary_plan.index_form(enc)
            return
        encodings.device_value_form(enc, leaf, nbuf)
        return
    if kind == "full_zip_layout":
        fz = layout.full_zip_layout
        det = fz.WhichOneof("details")
        enc = fz.value_compression
        form = encodings.device_full_zip_form(enc)
        if det == "bits_per_value":
            bits = int(fz.bits_per_value)
            if form is not None and form[0] == "fsl_valid":  # a row's item validity bytes (each layer's), then its items
                bits -= 8 * fsl_plan.row_validity_bytes(form[1][2])
            if (leaf.kind != "fixed" or form is None or form[0] not in ("flat", "fsl_valid") or form[1][0] * form[1][1] != bits
                    or bits != 8 * leaf.width):
                raise Unsupported("this full-zip fixed-width layout")
            if int(fz.bits_rep) == 0 and invisible_levels(tuple(int(x) for x in fz.layers)).any():
                raise Unsupported("full-zip items without values and without repetition")
            return
        if det == "bits_per_offset":
            if leaf.kind != "var" or int(fz.bits_per_offset) not in (32, 64):
                raise Unsupported("this full-zip variable-width layout")
            if form is None or form[0] != "var":
                raise Unsupported(f"full-zip {enc.WhichOneof('compression')} values (e.g. per-value zstd)")
            return
        raise Unsupported("full-zip layout without value details")
    if kind == "constant_layout":
        return
    raise Unsupported(f"page layout {kind}")


# --------------------------------------------------------------------------------------------
# Parsing (host metadata) and placement


def device_headers(layout) -> bool:
    """Whether a mini-block page (its ``MiniBlockLayout``) can have its chunk headers parsed
    by the device pre-pass (:mod:`lance_gpu.gpu.headers`): no repetition levels (its level
    and value counts, so its output regions, follow from the chunk metadata) and at most three
    value buffers (all :func:`check_page` lets through: nested fixed-size lists' two layers of
    item validity and their items); its definition levels, in any form
    the GPU decodes (Flat, OutOfLineBitpacking: spans; InlineBitpacking: block widths; Rle:
    run counts), are parsed there too."""
    return not layout.HasField("rep_compression") and int(layout.num_buffers) <= 3


def table_chunk_layouts(sources: Sequence[tuple[LeafPlan, pagetable.LeafPages] | DeviceBlock]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The chunk layouts of every page of ``sources``, in order: ``(leaf, its mini-block
    rows)`` (a leaf planned as a table, :attr:`LeafPlan.table`; the rows:
    :func:`miniblock_rows`), or device blocks of table rows (a leaf's, a mixed leaf's
    mini-block rows, or a pass block of several leaves, :attr:`DeviceBlock.leaves`), as
    :func:`miniblock.chunk_layouts` gives them: ``(bounds, starts, sizes, counts)``, decoded
    from the metadata words (buffer 0) read in each file's memory map or from its object
    store (no Python per page; the per-layout facts once per table; a pass block's words
    read as its leaves were staged, :attr:`DeviceBlock.metas`).  A page whose counts do not
    add up raises the host parser's ``CorruptFileError`` naming its file."""
    metas: list[np.ndarray] = []
    large, items, nbytes = [], [], []
    tables: list[pagetable.LeafPages] = []
    parts: list[tuple[LeafPlan, pagetable.LeafPages]] = []
    for src in sources:
        if isinstance(src, DeviceBlock):
            t = src.rows
            here = src.parts()
        else:
            t = src[1]
            here = [src]
        assert t is not None
        if isinstance(src, DeviceBlock) and src.metas is not None:  # read when its leaves were staged
            metas.extend(src.metas)
        else:
            for leaf, lt in here:
                metas.extend(_table_metas(leaf, lt))
        tables.append(t)
        parts.extend(here)
        got = t.memo.get("chunk_meta")
        if got is None:  # per column (a pass table: per pass), once
            got = t.memo["chunk_meta"] = (t.per_layout([bool(f.body.has_large_chunk) for f in t.layouts], np.bool_),
                                          np.ascontiguousarray(t.sizes[:, 0]))
        large.append(got[0])
        cut = t.memo.get("cut")
        items.append(t.num_values if cut is None else cut.num_values)
        nbytes.append(got[1])
    if not parts:
        return np.zeros(1, np.int64), *(np.zeros(0, np.int64),) * 3  # type: ignore[return-value]
    try:
        out = miniblock.chunk_layouts_packed(np.concatenate(large), np.concatenate(items), np.concatenate(metas),
                                             np.concatenate(nbytes), parts[0][0].ctx())
    except CorruptFileError:
        for leaf, lt in parts:  # name the file of the first bad page
            lt_large = lt.per_layout([bool(f.body.has_large_chunk) for f in lt.layouts], np.bool_)
            cut = lt.memo.get("cut")
            miniblock.chunk_layouts_packed(lt_large, lt.num_values if cut is None else cut.num_values,
                                           np.concatenate(_table_metas(leaf, lt)), np.ascontiguousarray(lt.sizes[:, 0]), leaf.ctx())
        raise
    if any("cut" in t.memo for t in tables):
        return _cut_chunks(tables, *out)
    return out


@dataclass(slots=True, frozen=True)
class ChunkCut:
    """A row selection's cut of a table of mini-block pages without repetition levels
    (``LeafPages.memo["cut"]``, made by ``rows._restrict_table``): which chunks of its pages
    are kept (``keep``: per chunk of their chunk layouts, in order; a page not cut keeps
    all), where each page's kept chunks start in its chunk buffer (``shift``: the table's
    buffer 1 starts there and ends at its last kept chunk's end; 0 for a page not cut) and
    the pages' full value counts (``num_values``: what their chunk metadata adds up to; the
    table's own are the kept values)."""

    keep: np.ndarray
    shift: np.ndarray
    num_values: np.ndarray


def _cut_chunks(tables: list[pagetable.LeafPages], bounds: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The chunk layouts of ``tables`` (:func:`table_chunk_layouts`) less the chunks their
    :class:`ChunkCut` drops, each kept chunk's start rebased to its page's cut buffer."""
    keep = np.ones(counts.size, np.bool_)
    shift = np.zeros(bounds.size - 1, np.int64)
    row = 0
    for t in tables:
        cut = t.memo.get("cut")
        if cut is not None:
            lo, hi = int(bounds[row]), int(bounds[row + len(t)])
            keep[lo:hi] = cut.keep
            shift[row : row + len(t)] = cut.shift
        row += len(t)
    per_page = np.diff(bounds)
    starts = starts - np.repeat(shift, per_page)
    kept = np.bincount(np.repeat(np.arange(per_page.size), per_page)[keep], minlength=per_page.size)
    return miniblock.exclusive_scan(kept), starts[keep], sizes[keep], counts[keep]


def miniblock_rows(leaf: LeafPlan) -> pagetable.LeafPages | None:
    """The table of a table leaf's mini-block pages (its own, or a mixed leaf's mini-block
    rows, :attr:`LeafPlan.mixed`); None where it has none or is not a table."""
    if leaf.mixed is not None:
        return leaf.mixed.column.mini
    t = leaf.table
    return t if t is not None and t.layouts[0].kind == "mini_block_layout" else None


def _table_metas(leaf: LeafPlan, t: pagetable.LeafPages, whole: np.ndarray | None = None) -> list[np.ndarray]:
    """The chunk metadata words (buffer 0) of mini-block pages ``t`` of a table leaf, read
    in its file's map (``whole``: the map, where the caller holds it; on an object store
    read from the store, :func:`_read_rows`): slices for a few pages, one gather for more."""
    if whole is None:
        whole = leaf.reader.mapped
    if whole is None or len(t) < DEVICE_BLOCK_MIN_PAGES:
        d = t.derived()
        return _read_rows(leaf, d.buf0_offsets, d.buf0_sizes)
    off, size = t.offsets[:, 0], t.sizes[:, 0]
    return [whole[miniblock.concat_ranges(off, off + size)]]


def _read_rows(leaf: LeafPlan, offsets: list[int], sizes: list[int]) -> list[np.ndarray]:
    """Buffers ``(offsets[k], sizes[k])`` of a table leaf's file on the host: views of its
    memory map, or read (one :meth:`LanceFileReader.read_buffers`: an object store's
    requests coalesced)."""
    whole = leaf.reader.mapped
    if whole is not None:
        return [whole[o : o + z] for o, z in zip(offsets, sizes, strict=True)]
    return leaf.reader.read_buffers(list(zip(offsets, sizes, strict=True)))


def _stage_rows(unit: UnitPlan, leaf: LeafPlan, offsets: np.ndarray, sizes: np.ndarray,
                ask: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Stage buffers ``(offsets[k], sizes[k])`` of a table leaf's file in order: a mapped
    file's by :meth:`Stager.add_file_buffers`; on an
    object store each buffer whose read would be a request is read from the store straight
    into the slab when it is filled (:meth:`Stager.add_range`), the others (bytes already
    held) are read now (``ask``: per buffer, the range whose read decides that, where not
    the buffer itself: a cut full-zip page's spans go as its data buffer would).  Returns
    each buffer's arena position (0: no bytes) and which were deferred to the slab fill
    (None: a mapped file, none)."""
    whole = leaf.reader.mapped
    if whole is not None:
        return unit.stage.add_file_buffers(leaf.path, whole, offsets, sizes), None
    reader = leaf.reader
    off, size = np.asarray(offsets, np.int64).tolist(), np.asarray(sizes, np.int64).tolist()
    ask_off, ask_size = (off, size) if ask is None else (np.asarray(ask[0], np.int64).tolist(), np.asarray(ask[1], np.int64).tolist())
    deferred = np.fromiter((z > 0 and reader.needs_request(o, a) for o, z, a in zip(ask_off, size, ask_size, strict=True)),
                           np.bool_, len(off))
    held = iter(reader.read_buffers([(o, z) for o, z, d in zip(off, size, deferred.tolist(), strict=True) if z and not d]))
    pos = np.zeros(len(off), np.int64)
    for k, (o, z, d) in enumerate(zip(off, size, deferred.tolist(), strict=True)):
        if d:
            pos[k] = unit.stage.add_range(reader.store, reader.key, o, z)
        elif z:
            pos[k] = unit.stage.add_buffer(leaf.path, o, next(held))
    return pos, deferred


def check_layout(facts: pagetable.LayoutFacts, leaf: LeafPlan) -> None:
    """:func:`check_page` of a distinct layout, once per kind of leaf it is read as."""
    key = (leaf.kind, leaf.width)
    if key not in facts.accepted:
        check_page(facts.message, leaf)
        facts.accepted.add(key)


def _device_lists(layouts: list[pagetable.LayoutFacts], cp: pagetable.ColumnPages, at: slice | np.ndarray) -> bool:
    """Whether a leaf's pages (``layouts``: their distinct layouts; the pages: ``at`` of the
    column's page arrays ``cp``, read only when the rest holds) are list pages whose
    mini-block chunk headers the device pre-pass parses: some have repetition levels, every
    mini-block page has at most two value buffers and its chunks, and the others are
    full-zip or constant pages.  The mini-block pages' level counts are in-band, so the
    leaf's level regions are allocated after the pre-pass reads them back
    (:attr:`LeafPlan.levels_pending`), and the level work of its full-zip and constant pages
    is emitted then (:attr:`UnitPlan.mixed_work`)."""
    for f in layouts:  # most leaves have no repetition levels: asked first
        if f.has_rep and f.kind == "mini_block_layout":
            break
    else:
        return False
    if not (
        all(f.kind in _LIST_PAGE_KINDS for f in layouts)
        and all(f.num_buffers <= 2 for f in layouts if f.kind == "mini_block_layout")
    ):
        return False
    ca = cp.arrays()
    mini = np.asarray([f.kind == "mini_block_layout" for f in cp.layouts], np.bool_).reshape(len(cp.layouts))
    return bool(np.all(ca.nbuf[at][mini[ca.layout[at]]] >= 2))


#: the page kinds of a list leaf whose mini-block pages the device pre-pass parses
_LIST_PAGE_KINDS = ("mini_block_layout", "full_zip_layout", "constant_layout")


def plan_leaf(reader: LanceFileReader, column: int, arrow_type: pa.DataType, page_ids: list[int] | None = None) -> LeafPlan:
    """Classify the pages of one leaf column (``page_ids``; None: all) and plan them as a
    table (no device work is registered yet; a row selection's pages are cut afterwards, whatever their
    kind: :mod:`lance_gpu.gpu.rows`).

    The pages' layouts, buffers and rows come from the column's page arrays
    (:func:`pagetable.column_pages`: each distinct layout parsed and classified once per
    process; a whole column's selection kept with them); the leaf is a table of them
    (:func:`_plan_table_leaf`), or its field raises :class:`Unsupported` (or
    ``CorruptFileError``) where no table takes its pages (:func:`_refuse`)."""
    kind, width = leaf_kind(arrow_type)
    leaf = LeafPlan(reader, column, arrow_type, kind, width)
    ctx = leaf.ctx()
    info = reader.column(column)
    cp = pagetable.column_pages(info, ctx)
    try:
        sel = cp.select(page_ids)
    except LookupError as exc:
        pagetable.layout_facts(info.pages[exc.args[0]], ctx)  # raises why, naming this file
        raise
    for facts in sel.distinct:  # in page order: the first refusal is reported
        check_layout(facts, leaf)
    fsl_layers = _fsl_layers(arrow_type)  # (other leaves: no layout looked at again)
    if fsl_layers:
        _set_item_layers(leaf, _item_layers_of(sel.distinct, fsl_layers))
        if len(leaf.item_layers) > 1 and any(f.has_rep for f in sel.distinct):
            raise Unsupported("nested fixed-size lists with item validity under a list")
    leaf.page_bytes = sel.nbytes
    if not sel.ids:  # no page (an empty column): nothing to place
        return leaf
    if page_ids is None:
        got = cp.memo.get("table")
        if got is None:  # the column's decisions, made once: its device lists, its table
            lists = _device_lists(sel.distinct, cp, slice(None))
            got = cp.memo["table"] = (lists, _table_column(cp, sel, lists))
        lists_on_device, table_column = got
    else:  # a row selection's pages
        lists_on_device = _device_lists(sel.distinct, cp, np.asarray(sel.ids, np.int64))
        table_column = _table_column(cp, sel, lists_on_device)
    if not table_column:
        _refuse(cp, sel, ctx)
    # (in any file: mapped, or on an object store, _stage_rows)
    _plan_table_leaf(leaf, cp.leaf_pages(None if page_ids is None else sel.ids), lists_on_device)
    if (fsl_layers and not leaf.item_layers and leaf.constant_pages is not None
            and any(lp.values is None for lp in leaf.constant_pages) and not (leaf.has_rep and len(fsl_layers) > 1)):
        _set_item_layers(leaf, fsl_layers)  # (the items of its other pages: valid, _fill_valid_items)
    if len(leaf.item_layers) > 1 and leaf.has_rep:
        _set_item_layers(leaf, ())  # (as before: all-null pages' items of nested lists under lists valid)
    return leaf


def _set_item_layers(leaf: LeafPlan, layers: tuple[int, ...]) -> None:
    leaf.item_layers = layers
    leaf.item_dim = sum(layers)


def _fsl_layers(t: pa.DataType) -> tuple[int, ...]:
    """Items per value of each fixed-size list layer of a leaf of type ``t``, outer first
    (``(2, 6)`` for lists of 2 lists of 3 items; empty: not a fixed-size list): the layers
    whose items' validity a leaf may carry (:attr:`LeafPlan.item_layers`); the items of an
    all-null page's lists are null in every layer, as pylance reads them
    (:func:`_constant_values` writes them)."""
    out: list[int] = []
    s = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
    n = 1
    while pa.types.is_fixed_size_list(s):
        n *= int(s.list_size)
        out.append(n)
        v = s.value_type
        s = v.storage_type if isinstance(v, pa.BaseExtensionType) else v
    return tuple(out)


def _layers_written(f: pagetable.LayoutFacts, nlayers: int) -> tuple[bool, ...]:
    """Per fixed-size list layer (``nlayers`` of them, outer first), whether pages of
    layout ``f`` carry its items' validity (FixedSizeList{has_validity} values of a
    mini-block page without a dictionary, or of a full-zip page)."""
    if f.kind == "mini_block_layout" and not f.dictionary and f.num_buffers:
        enc = f.body.value_compression
    elif f.kind == "full_zip_layout":
        enc = f.body.value_compression
    else:
        return (False,) * nlayers
    got = tuple(v for _n, v in fsl_plan.layers(enc))
    return (got + (False,) * nlayers)[:nlayers]


def _has_item_validity(f: pagetable.LayoutFacts) -> bool:
    """Whether pages of layout ``f`` carry fixed-size list item validity, in any layer."""
    return any(_layers_written(f, 8))


def _item_layers_of(layouts: Sequence[pagetable.LayoutFacts], layers: tuple[int, ...]) -> tuple[int, ...]:
    """The item layers (``layers``, :func:`_fsl_layers`) of a fixed-size list leaf some of
    whose pages (``layouts``: their distinct layouts, accepted by :func:`check_page`) carry
    item validity in some layer (empty: none do).  Every page of such a leaf writes every
    layer's item validity: mini-block and full-zip pages their bits where they carry them
    (``fsl_valid`` forms), constant pages null or valid items (:func:`_constant_values`),
    valid items for the layers they do not carry (:func:`_fill_valid_items`)."""
    if not any(_has_item_validity(f) for f in layouts):
        return ()
    return layers


def item_regions(leaf: LeafPlan, lo: int, n: int) -> list[tuple[int, int]]:
    """``(fixed arena byte, bytes)`` of the item validity of values ``[lo, lo + n)`` of
    ``leaf``, one per item layer (:attr:`LeafPlan.item_layers`)."""
    out, before = [], 0
    for per in leaf.item_layers:
        out.append((leaf.item_pos + leaf.num_values * before + lo * per, n * per))
        before += per
    return out


def _fill_valid_items(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages, vpos: np.ndarray | Sequence[int],
                      num_values: np.ndarray | None = None) -> None:
    """Item validity (:attr:`LeafPlan.item_layers`) of the rows of ``t`` whose pages write
    none of a layer's (mini-block and full-zip pages without item validity in that layer:
    its items are valid; a mixed leaf's constant rows write theirs, :func:`_constant_values`):
    per layer, one fill of 1 bytes per run of such rows whose values are adjacent (``vpos``:
    each row's first value in the leaf; ``num_values``: each row's values, None:
    ``t.num_values``)."""
    nlayers = len(leaf.item_layers)
    if not nlayers:
        return
    written = [_layers_written(f, nlayers) if f.kind != "constant_layout" else (True,) * nlayers for f in t.layouts]
    nv = t.num_values if num_values is None else num_values
    for k in range(nlayers):
        lack = ~t.per_layout([w[k] for w in written], np.bool_) & (nv > 0)
        if not lack.any():
            continue
        start = np.asarray(vpos, np.int64)[lack]
        count = nv[lack]
        new = np.ones(start.size, np.bool_)
        new[1:] = start[1:] != start[:-1] + count[:-1]
        first = np.flatnonzero(new)
        last = np.append(first[1:], start.size) - 1
        for lo, hi in zip(start[first].tolist(), (start[last] + count[last]).tolist(), strict=True):
            unit.fill_fixed.append((*item_regions(leaf, lo, hi - lo)[k], b"\x01"))


def place_item_validity(unit: UnitPlan, leaf: LeafPlan) -> None:
    """Give a leaf with item validity (:attr:`LeafPlan.item_dim`) its item validity region
    in the unit's fixed arena, once (a read that placed its fixed-width values in the read
    fixed arena placed these there too: ``read._place_read_fixed``)."""
    if leaf.item_dim and leaf.item_pos < 0:
        leaf.item_pos = unit.alloc_fixed(leaf.num_values * leaf.item_dim)


def _refuse(cp: pagetable.ColumnPages, sel: pagetable.PageSelection, ctx: DecodeContext) -> NoReturn:
    """Raise why the pages ``sel`` of a column that :func:`check_page` accepted are not
    planned as a table (:func:`_table_column`): a full-zip page without its data buffer is
    corrupt (``CorruptFileError`` naming the file); the others are pages pylance does not
    write -- mini-block pages without value buffers or chunks, dictionary pages without
    values, list pages the device pre-pass does not parse -- and raise :class:`Unsupported`:
    the field is read by the CPU reader, which decodes or refuses them."""
    ca = cp.arrays()
    at = slice(None) if len(sel.ids) == cp.num_pages else np.asarray(sel.ids, np.int64)
    fullzip = cp.kind_codes(at) == pagetable.KIND_CODES["full_zip_layout"]
    if np.any(ca.nbuf[at][fullzip] < 1):
        raise ctx.corrupt("full-zip page without a data buffer")
    raise Unsupported("mini-block pages without values or chunks, or with a dictionary without values")


def _table_column(cp: pagetable.ColumnPages, sel: pagetable.PageSelection, lists_on_device: bool) -> bool:
    """Whether a column's pages (``sel``: all, or a row selection's) are planned as a table: all full-zip pages
    with their data buffer (:func:`_place_fullzip_table`), or all going to the device
    pre-pass: mini-block pages with values and their chunks whose chunk headers the device
    parses (:func:`device_headers`, or list pages :func:`_device_lists` accepts), those
    with a dictionary with values and a dictionary buffer (:func:`_miniblock_buffers`); or
    all constant / all-null pages (:func:`_plan_constant_table`); or pages of several of
    these kinds (:func:`_mixed_column`).  Asked once per column (``ColumnPages.memo``) for
    all its pages."""
    if not sel.ids:
        return False
    nbuf = cp.arrays().nbuf if len(sel.ids) == cp.num_pages else cp.arrays().nbuf[np.asarray(sel.ids, np.int64)]
    if all(f.kind == "full_zip_layout" for f in sel.distinct):
        return int(nbuf.min()) >= 1
    if all(f.kind == "constant_layout" for f in sel.distinct):
        return True  # all-null or constant pages only (_plan_constant_table)
    if len({f.kind for f in sel.distinct}) > 1:
        return _mixed_column(cp, sel, lists_on_device)
    for facts in sel.distinct:
        if facts.kind != "mini_block_layout" or not facts.num_buffers:
            return False
        if not (lists_on_device or facts.device_headers):
            return False
    if not any(f.dictionary for f in sel.distinct):
        return int(nbuf.min()) >= 2  # every page: chunk metadata and chunks
    return _miniblock_buffers(cp, sel)


def _miniblock_buffers(cp: pagetable.ColumnPages, sel: pagetable.PageSelection) -> bool:
    """Whether the mini-block pages of ``sel`` (some with a page dictionary) hold what a
    table of them stages: chunk metadata and chunks, and a dictionary where they have one
    (a dictionary page with no values has no dictionary: no table takes it)."""
    if min((f.num_visible for f in sel.distinct if f.dictionary), default=1) <= 0:
        return False
    ca = cp.arrays()
    at = slice(None) if len(sel.ids) == cp.num_pages else np.asarray(sel.ids, np.int64)
    k = len(cp.layouts)
    lay = ca.layout[at]
    mini = np.asarray([f.kind == "mini_block_layout" for f in cp.layouts], np.bool_).reshape(k)[lay]
    need = np.where(np.asarray([f.dictionary for f in cp.layouts], np.bool_).reshape(k)[lay], 3, 2)
    return bool(np.all(ca.nbuf[at][mini] >= need[mini]))


def _plan_table_leaf(leaf: LeafPlan, table: pagetable.LeafPages, lists_on_device: bool) -> None:
    """:func:`plan_leaf` of a leaf :func:`_table_column` accepts: its pages as a table,
    counted and given their layers (the common layers of its pages; from the table's derived
    totals and layers, made once per column: no NumPy per leaf); their chunk layouts are
    decoded with the pass's others (:mod:`headers`)."""
    if len(table.layouts) > 1 and len({f.kind for f in table.layouts}) > 1:
        _plan_mixed_table(leaf, table, lists_on_device)
        return
    if table.layouts[0].kind == "constant_layout":  # (otherwise a table's pages are of one kind)
        _plan_constant_table(leaf, table)
        return
    leaf.table = table
    leaf.levels_pending = lists_on_device
    layers = table.memo.get("layers")
    if layers is None:
        distinct = table.layouts
        distinct_layers = list(dict.fromkeys(f.layers for f in distinct))
        try:
            common = common_layers(distinct_layers)
        except ValueError as exc:
            raise leaf.ctx().corrupt(str(exc)) from exc
        has_rep = any(f.has_rep for f in distinct)
        has_def = any(f.has_def for f in distinct) or (len(distinct_layers) > 1 and bool(def_meaning(common)))
        layers = table.memo["layers"] = (common, has_rep, has_def)
    leaf.layers, leaf.has_rep, leaf.has_def = layers
    d = table.derived()
    leaf.num_values, leaf.num_levels, leaf.num_rows = d.num_values, d.num_levels, d.num_rows


def _plan_constant_table(leaf: LeafPlan, shared: pagetable.LeafPages) -> None:
    """:func:`_plan_table_leaf` of a leaf of constant / all-null pages only: their counts
    and levels are in their buffers (:func:`constant_layout.decode`, read in the file's
    map), so the leaf keeps its column's shared table (``table``: rows, buffers; its counts
    for constant pages are -1, never read) and each row's decoded page in
    :attr:`LeafPlan.constant_pages` (counts, levels, value) for
    :func:`_place_constant_table`: no per-leaf table copy, array or :class:`pagetable.Derived`
    (a one-page leaf of a small fragment costs a few scalar steps); its layers and levels
    the common ones of its pages."""
    ctx = leaf.ctx()
    rows = shared.memo.get("constant_rows")
    if rows is None:  # per column, once: each row's layout, buffer ranges and top-level rows
        nbuf = shared.nbuf.tolist()
        rows = shared.memo["constant_rows"] = [
            (shared.layouts[k].body, list(zip(o[:nb], z[:nb], strict=True)), r)
            for k, o, z, nb, r in zip(shared.layout.tolist(), shared.offsets.tolist(), shared.sizes.tolist(), nbuf,
                                      shared.num_rows.tolist(), strict=True)
        ]
        shared.memo["constant_num_rows"] = sum(r for _b, _z, r in rows)
    pages = [constant_layout.decode(body, _read_rows(leaf, [o for o, _z in ranges], [z for _o, z in ranges]), r, ctx)
             for body, ranges, r in rows]
    leaf.table = shared
    leaf.constant_pages = pages
    leaf.num_rows = shared.memo["constant_num_rows"]
    if len(pages) == 1:  # (one page of a small fragment: scalars)
        lp = pages[0]
        leaf.layers = tuple(lp.layers)
        leaf.has_rep, leaf.has_def = lp.rep is not None, lp.def_ is not None
        leaf.num_values, leaf.num_levels = lp.num_values, lp.num_levels
        return
    distinct_layers = list(dict.fromkeys(lp.layers for lp in pages))
    try:
        leaf.layers = common_layers(distinct_layers)
    except ValueError as exc:
        raise ctx.corrupt(str(exc)) from exc
    leaf.has_rep = any(lp.rep is not None for lp in pages)
    leaf.has_def = any(lp.def_ is not None for lp in pages) or (len(distinct_layers) > 1 and bool(def_meaning(leaf.layers)))
    leaf.num_values = sum(lp.num_values for lp in pages)
    leaf.num_levels = sum(lp.num_levels for lp in pages)


def _place_constant_table(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages) -> None:
    """:func:`place_leaf` of a leaf planned by :func:`_plan_constant_table`: each row's
    levels and values (:func:`_emit_constant_page`), in page order (a step per
    row: their levels are staged bytes; a variable-width leaf's rows checked as pages,
    :attr:`UnitPlan.var_checks`)."""
    pages = leaf.constant_pages
    assert pages is not None  # _plan_constant_table
    utf8 = leaf.kind == "var" and is_utf8_type(leaf.arrow_type)
    ids = t.ids.tolist() if leaf.kind == "var" else ()
    v = lv = 0
    for j, lp in enumerate(pages):
        if leaf.kind == "var":
            unit.var_checks.append((leaf.slot_lo + v, lp.num_values, utf8, leaf.path, leaf.column, ids[j]))
        rep_dst = leaf.rep_pos + lv if leaf.has_rep else -1
        def_dst = leaf.def_pos + lv if leaf.has_def else -1
        _emit_constant_page(unit, leaf, lp, v, rep_dst, def_dst)
        _level_fills(unit, leaf, lp.rep is not None, lp.def_ is not None, lp.layers, lp.num_levels, rep_dst, def_dst)
        v += lp.num_values
        lv += lp.num_levels


def _mixed_column(cp: pagetable.ColumnPages, sel: pagetable.PageSelection, lists_on_device: bool) -> bool:
    """:func:`_table_column` of a column whose pages are of several kinds: mini-block pages
    beside full-zip or constant ones (strings whose long pages go full-zip, lists whose
    pages are partly all-null or constant).  Each kind as a table of it takes: mini-block
    pages with values and their chunks (and a dictionary, where they have one:
    :func:`_miniblock_buffers`), whose chunk headers the device parses
    (:func:`device_headers`, or list pages :func:`_device_lists` accepts); full-zip pages
    with their data buffer; constant pages."""
    for f in sel.distinct:
        if f.kind not in _LIST_PAGE_KINDS:
            return False
        if f.kind == "mini_block_layout" and (not f.num_buffers or not (lists_on_device or f.device_headers)):
            return False
    ca = cp.arrays()
    at = slice(None) if len(sel.ids) == cp.num_pages else np.asarray(sel.ids, np.int64)
    code = cp.kind_codes(at)
    nbuf = ca.nbuf[at]
    return bool(_miniblock_buffers(cp, sel) and np.all(nbuf[code == pagetable.KIND_CODES["full_zip_layout"]] >= 1))


@dataclass(slots=True, eq=False)
class _MixedColumn:
    """A column :func:`_mixed_column` accepts, split by page kind once (``memo["mixed"]`` of
    its shared table, :func:`_mixed_of`): the rows (increasing) of its mini-block, full-zip
    and constant pages (``mini_at``, ``full_zip_at``, ``constant_at``); the tables of the
    first two (:meth:`pagetable.LeafPages.take`: each placed by what places a table of its
    kind, at the leaf's value and level positions), None where there are none; each
    constant row's layout, buffer ranges and top-level rows (decoded per leaf: their counts
    and levels are in their buffers); the distinct layers and whether any non-constant page
    has repetition / definition levels; the column's top-level rows; ``memo``: what placing
    derives once (the buffers each row stages, :class:`_OrderedRanges`; a row selection's
    cut leaf has a split of its own, ``rows._restrict_mixed``)."""

    mini_at: np.ndarray
    full_zip_at: np.ndarray
    constant_at: np.ndarray
    mini: pagetable.LeafPages | None
    full_zip: pagetable.LeafPages | None
    constant_rows: list[tuple[Any, list[tuple[int, int]], int]]
    layers: list[tuple[int, ...]]
    has_rep: bool
    has_def: bool
    num_rows: int
    memo: dict = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class _MixedLeaf:
    """A leaf planned by :func:`_plan_mixed_table`: its column's split (``column``) and, per
    row of its table, its values and levels (constant rows: their decoded pages'; mini-block
    rows with repetition levels: the estimate until the device pre-pass reads them,
    :func:`settle_mixed_levels`)."""

    column: _MixedColumn
    num_values: np.ndarray
    num_levels: np.ndarray


def _mixed_of(shared: pagetable.LeafPages) -> _MixedColumn:
    """The :class:`_MixedColumn` of a column's shared table, made once."""
    got = shared.memo.get("mixed")
    if got is not None:
        return got
    code = shared.per_layout([pagetable.KIND_CODES[f.kind] for f in shared.layouts], np.int8)
    at = [np.flatnonzero(code == k) for k in range(3)]
    const = at[2].tolist()
    nbuf = shared.nbuf[at[2]].tolist()
    constant_rows = [
        (shared.layouts[int(shared.layout[j])].body, list(zip(shared.offsets[j, :nb].tolist(), shared.sizes[j, :nb].tolist(), strict=True)),
         int(shared.num_rows[j]))
        for j, nb in zip(const, nbuf, strict=True)
    ]
    others = [f for f in shared.layouts if f.kind != "constant_layout"]
    got = shared.memo["mixed"] = _MixedColumn(
        at[0], at[1], at[2], shared.take(at[0]) if at[0].size else None, shared.take(at[1]) if at[1].size else None,
        constant_rows, list(dict.fromkeys(f.layers for f in others)), any(f.has_rep for f in others),
        any(f.has_def for f in others), int(shared.num_rows.sum()),
    )
    return got


def _plan_mixed_table(leaf: LeafPlan, shared: pagetable.LeafPages, lists_on_device: bool) -> None:
    """:func:`_plan_table_leaf` of a leaf whose pages are of several kinds
    (:func:`_mixed_column`): it keeps its column's shared table, split by kind once
    (:class:`_MixedColumn`); its constant pages are decoded (:attr:`LeafPlan.constant_pages`)
    and its per-row counts made (:class:`_MixedLeaf`); its layers the common ones of its
    pages, its levels and counts their sums."""
    ctx = leaf.ctx()
    col = _mixed_of(shared)
    pages = [constant_layout.decode(body, _read_rows(leaf, [o for o, _z in ranges], [z for _o, z in ranges]), r, ctx)
             for body, ranges, r in col.constant_rows]
    nv, nl = shared.num_values, shared.num_levels
    if pages:
        nv, nl = nv.copy(), nl.copy()
        nv[col.constant_at] = [lp.num_values for lp in pages]
        nl[col.constant_at] = [lp.num_levels for lp in pages]
    leaf.table = shared
    leaf.constant_pages = pages
    leaf.mixed = _MixedLeaf(col, nv, nl)
    leaf.levels_pending = lists_on_device
    distinct_layers = list(dict.fromkeys([*col.layers, *(lp.layers for lp in pages)]))
    try:
        leaf.layers = common_layers(distinct_layers)
    except ValueError as exc:
        raise ctx.corrupt(str(exc)) from exc
    leaf.has_rep = col.has_rep or any(lp.rep is not None for lp in pages)
    leaf.has_def = col.has_def or any(lp.def_ is not None for lp in pages) or (len(distinct_layers) > 1 and bool(def_meaning(leaf.layers)))
    leaf.num_values = int(nv.sum())
    leaf.num_levels = int(nl.sum())
    leaf.num_rows = col.num_rows


def _place_mixed_table(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages) -> None:
    """:func:`place_leaf` of a leaf planned by :func:`_plan_mixed_table`, staging in page
    order (:func:`_stage_ordered` over the buffers each row
    stages, made once per column: each run of mini-block and full-zip rows between
    constant rows by one :meth:`Stager.add_file_buffers`: a mini-block page's chunks, a
    full-zip page's data and, where read, repetition index, or a cut one's spans and then
    its rebased index; a constant row's levels and value as :func:`_emit_constant_page`
    stages them; page dictionaries together first, or each before its page's chunks,
    :func:`_some_dictionaries`); its values placed by a scan of its rows' counts; the
    mini-block rows one :class:`DeviceBlock` (its sub-table's rows); the full-zip rows' work
    as :func:`_place_fullzip_table` gives it (cut rows: :func:`_fullzip_run_work`); FSST
    segments and variable-width checks of all rows.  Where the leaf's levels wait for the device pre-pass
    (:attr:`LeafPlan.levels_pending`), the full-zip and constant rows' level work and every
    row's level fills are emitted by :func:`settle_mixed_levels`; otherwise now."""
    m = leaf.mixed
    pages = leaf.constant_pages
    assert m is not None and pages is not None  # _plan_mixed_table
    col = m.column
    n = len(t)
    pending = leaf.levels_pending
    z = cut = None
    if col.full_zip is not None:
        z = fullzip_facts(leaf, col.full_zip)
        runs = col.full_zip.memo.get("runs")  # a row selection's cut pages (rows._restrict_table)
        if runs is not None:
            if pending:
                raise CorruptFileError(leaf.path, "row selection of a full-zip page with repetition")
            cut = _fullzip_cut(leaf, col.full_zip, z, runs)
    ranges = col.memo.get("ranges")
    if ranges is None:  # per column (a row selection's cut: per leaf), once: the buffers each row stages in order
        mi = col.mini_at
        parts = [_part(mi, t.offsets[mi, 1], t.sizes[mi, 1], 1)] if mi.size else []
        if z is not None:
            assert col.full_zip is not None
            parts += _fullzip_parts(col.full_zip, z, cut, col.full_zip_at)
        ranges = col.memo["ranges"] = _ordered_ranges(parts)
    vpos = miniblock.exclusive_scan(m.num_values)
    lpos = miniblock.exclusive_scan(m.num_levels)[:-1]
    vpos = vpos[:-1]
    rep_at = leaf.rep_pos + lpos if leaf.has_rep and not pending else np.full(n, -1, np.int64)
    def_at = leaf.def_pos + lpos if leaf.has_def and not pending else np.full(n, -1, np.int64)
    works: list[LevelWork] = []
    vlist, rlist, dlist = vpos[col.constant_at].tolist(), rep_at[col.constant_at].tolist(), def_at[col.constant_at].tolist()

    def constant(k: int) -> Callable[[], None]:
        def emit() -> None:  # a constant row's levels and value, staged between its neighbours' buffers
            lp = pages[k]
            emitted = _emit_constant_page(unit, leaf, lp, vlist[k], rlist[k], dlist[k], later=pending)
            if pending:
                assert emitted is not None  # later=True returns the work
                works.append(emitted)
            else:
                _level_fills(unit, leaf, lp.rep is not None, lp.def_ is not None, lp.layers, lp.num_levels, rlist[k], dlist[k])

        return emit

    after: list[tuple[int, Any]] = [(c, constant(k)) for k, c in enumerate(col.constant_at.tolist())]
    if cut is not None and cut.blobs:  # each cut variable-width page's rebased index, after its spans
        after += [(int(col.full_zip_at[j]), b) for j, b in cut.blobs]
    some = dictionary_rows(col.mini) if col.mini is not None else None
    index = None
    if some is not None:  # mini-block pages with a dictionary: staged first, or each before its chunks
        index, alone, bits = _some_dictionaries(unit, leaf, t, col.mini_at[some], vpos)
        after += alone
    after.sort(key=lambda a: a[0])  # (stable: a constant page or a blob before the next row's dictionary)
    pos, spans, blobs, deferred = _stage_ordered(unit, leaf, ranges, after, n)
    if deferred is not None:  # (a page counted by its first buffer: its chunks, data or first span)
        first = ranges.row[ranges.first]
        got = deferred[ranges.first]
        unit.count_direct("mini_block_layout", int(got[np.isin(first, col.mini_at)].sum()))
        unit.count_direct("full_zip_layout", int(got[np.isin(first, col.full_zip_at)].sum()))
    if col.mini is not None:
        mi = col.mini_at
        unit.device_blocks.append(DeviceBlock(leaf, col.mini, pos[mi, 1], np.ascontiguousarray(col.mini.sizes[:, 1]), vpos[mi],
                                              rep_at[mi], def_at[mi], None if index is None else (bits, index[mi].tolist())))
        if not pending:
            table_level_fills(unit, leaf, col.mini, rep_at[mi], def_at[mi])
    later = None
    if z is not None:
        assert col.full_zip is not None
        fi = col.full_zip_at
        dst = leaf.slot_lo + vpos[fi] if leaf.kind == "var" else leaf.value_pos + vpos[fi] * leaf.width
        items_at = vpos[fi] if leaf.item_dim else None
        later = _fullzip_table_work(unit, leaf, col.full_zip, z, pos[fi], dst, rep_at[fi], def_at[fi], later=pending,
                                    whole_rows=None if cut is None else ~cut.is_cut, items_at=items_at)
        if cut is not None:
            _fullzip_run_work(unit, leaf, cut, spans, blobs, dst, def_at[fi], items_at)
    _fill_valid_items(unit, leaf, t, vpos, m.num_values)
    if leaf.kind == "var":
        path = leaf.path
        unit.var_check_rows.append((leaf.slot_lo + vpos, m.num_values, is_utf8_type(leaf.arrow_type), path, leaf.column, t.ids))
        rows = unit.fsst_rows.pop(id(leaf), None)  # (keyed by the leaf's rows: emitted here, not by the pre-pass)
        if rows is not None:
            key = id(leaf)
            for j, slot, count in zip(rows.tolist(), (leaf.slot_lo + vpos[rows]).tolist(), m.num_values[rows].tolist(), strict=True):
                fsst_plan.add_segments(unit, (key, j), slot, count)
    if pending:
        def work(rep_dst: np.ndarray, def_dst: np.ndarray) -> None:
            if later is not None:
                fi = col.full_zip_at
                later(rep_dst[fi], def_dst[fi])
            c = col.constant_at
            for lp, emit, r, d in zip(pages, works, rep_dst[c].tolist(), def_dst[c].tolist(), strict=True):
                emit(r, d)
                _level_fills(unit, leaf, lp.rep is not None, lp.def_ is not None, lp.layers, lp.num_levels, r, d)

        unit.mixed_work[id(leaf)] = work


def settle_mixed_levels(unit: UnitPlan, leaf: LeafPlan, in_band: np.ndarray) -> tuple[np.ndarray, np.ndarray, pagetable.LeafPages]:
    """:func:`headers.settle_levels` of a leaf planned by :func:`_plan_mixed_table` whose
    levels waited for the device pre-pass: ``in_band``, its mini-block rows' level counts
    read by the pre-pass (those with repetition levels replace the estimates); allocates the
    leaf's level regions, emits its full-zip and constant rows' level work and every row's
    level fills; returns its mini-block rows' first repetition / definition levels and their
    table with the settled counts (a copy: the column's is shared)."""
    m = leaf.mixed
    assert m is not None
    col = m.column
    mini = col.mini
    assert mini is not None  # (pending levels: list pages the pre-pass parses)
    mi = col.mini_at
    nl = m.num_levels.copy()
    nl[mi] = np.where(mini.has_rep, in_band, mini.num_levels)
    m.num_levels = nl
    leaf.num_levels = int(nl.sum())
    leaf.rep_pos = unit.alloc_levels(leaf.num_levels) if leaf.has_rep else -1
    leaf.def_pos = unit.alloc_levels(leaf.num_levels) if leaf.has_def else -1
    lpos = miniblock.exclusive_scan(nl)[:-1]
    n = nl.size
    r = leaf.rep_pos + lpos if leaf.has_rep else np.full(n, -1, np.int64)
    d = leaf.def_pos + lpos if leaf.has_def else np.full(n, -1, np.int64)
    unit.mixed_work.pop(id(leaf))(r, d)
    settled = replace(mini, num_levels=nl[mi], memo={})
    table_level_fills(unit, leaf, settled, r[mi], d[mi])
    return r[mi], d[mi], settled


def _renumber_table(src: tuple[int, ...], target: tuple[int, ...]) -> np.ndarray:
    """Definition level d of a page with layers ``src`` in terms of ``target`` (levels.renumber)."""
    target_index = {m: d + 1 for d, m in enumerate(def_meaning(target))}
    meaning = def_meaning(src)
    table = np.zeros(len(meaning) + 1, np.uint16)
    for d, m in enumerate(meaning):
        table[d + 1] = target_index[m]
    return table


def place_values(unit: UnitPlan, leaf: LeafPlan, follow: bool = False) -> None:
    """Give the leaf its value region: variable-width value slots (consecutive leaves'
    slots, hence their bytes, are adjacent), or bytes of the fixed arena, 64-byte aligned
    or (``follow``: the leaf continues the column of the leaf placed just before, of the same
    width) right after the previous region, so that the column's values are one run."""
    if leaf.kind == "var":
        leaf.slot_lo = unit.alloc_slots(leaf.num_values)
    else:
        leaf.value_pos = unit.alloc_fixed(leaf.num_values * leaf.width, follow)


def place_leaf(unit: UnitPlan, leaf: LeafPlan, values_placed: bool = False) -> None:
    """Give the leaf its output regions (its value region already, with ``values_placed``:
    :func:`place_values`) and emit the work of its table of pages by kind (a leaf without
    pages: nothing)."""
    unit.paths.add(leaf.path)
    if not values_placed:
        place_values(unit, leaf)
    place_item_validity(unit, leaf)
    pending = leaf.levels_pending  # level regions allocated after the device pre-pass
    if leaf.has_rep and not pending:
        leaf.rep_pos = unit.alloc_levels(leaf.num_levels)
    if leaf.has_def and not pending:
        leaf.def_pos = unit.alloc_levels(leaf.num_levels)
    fsst_plan.stage_tables(unit, leaf)
    if leaf.mixed is not None:
        assert leaf.table is not None
        _place_mixed_table(unit, leaf, leaf.table)
        return
    t = leaf.table
    if t is None:  # no page
        return
    kind = t.layouts[0].kind  # (a table's pages are of one kind, but a mixed leaf's)
    if kind == "full_zip_layout":
        _place_fullzip_table(unit, leaf, t)
    elif kind == "constant_layout":
        _place_constant_table(unit, leaf, t)
    else:
        _place_table_leaf(unit, leaf, t)


def _place_table_leaf(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages) -> None:
    """:func:`place_leaf` of a leaf planned as a table (:func:`_table_column`): its pages'
    values and levels placed by the table's scan of its counts (made once per column,
    :meth:`pagetable.LeafPages.derived`), their chunks staged together
    (:meth:`Stager.add_file_buffers`; a table of fewer than :data:`DEVICE_BLOCK_MIN_PAGES`
    pages with scalars), one :class:`DeviceBlock` over the table's rows; the
    level fills and remaps of pages whose layout lacks the leaf's levels or layers
    (:func:`table_level_fills`) where the leaf's levels are known now."""
    whole = leaf.reader.mapped
    pending = leaf.levels_pending
    rep_at = leaf.rep_pos if leaf.has_rep and not pending else -1
    def_at = leaf.def_pos if leaf.has_def and not pending else -1
    # without pending levels a table leaf has no repetition levels (_table_column): one
    # level per value, so its pages' first levels are their first values
    d = t.derived()
    n = len(t)
    data_pos: np.ndarray | list[int]
    sizes: np.ndarray | list[int]
    vpos: np.ndarray | list[int]
    rep_dst: np.ndarray | list[int]
    def_dst: np.ndarray | list[int]
    dictionary: tuple[int, list[int]] | None = None
    staged: list[int] | None = None  # dictionary pages each staging their own dictionary before their chunks
    some = dictionary_rows(t)
    if some is not None and some.size == n:  # every page has one
        dictionary, staged = stage_table_dictionaries(unit, leaf, t)
    if some is not None and some.size < n:  # some pages have one: dictionaries and chunks in page order
        index, after, bits = _some_dictionaries(unit, leaf, t, some, d.vpos)
        vpos = d.vpos
        rep_dst = rep_at + vpos if rep_at >= 0 else np.full(n, -1, np.int64)
        def_dst = def_at + vpos if def_at >= 0 else np.full(n, -1, np.int64)
        sizes = np.ascontiguousarray(t.sizes[:, 1])
        rows = np.arange(n, dtype=np.int64)
        got, _spans, _blobs, deferred = _stage_ordered(unit, leaf, _ordered_ranges([_part(rows, t.offsets[:, 1], sizes, 1)]), after, n)
        data_pos = got[:, 1]
        if deferred is not None:
            unit.count_direct("mini_block_layout", int(deferred.sum()))
        dictionary = (bits, index.tolist())
    elif staged is not None:  # each page's dictionary, then its chunks
        sizes, vpos = d.buf1_sizes, d.vpos_list
        data_pos = staged
        rep_dst = [rep_at + v for v in vpos] if rep_at >= 0 else [-1] * n
        def_dst = [def_at + v for v in vpos] if def_at >= 0 else [-1] * n
    elif whole is not None and n < DEVICE_BLOCK_MIN_PAGES:  # a few pages: scalars (NumPy's per-call cost exceeds the loop's)
        path, add = leaf.path, unit.stage.add_buffer
        sizes, vpos = d.buf1_sizes, d.vpos_list
        data_pos = [add(path, o, whole[o : o + z], whole) if z else 0 for o, z in zip(d.buf1_offsets, sizes, strict=True)]
        rep_dst = [rep_at + v for v in vpos] if rep_at >= 0 else [-1] * n
        def_dst = [def_at + v for v in vpos] if def_at >= 0 else [-1] * n
    else:
        vpos = d.vpos
        rep_dst = rep_at + vpos if rep_at >= 0 else np.full(n, -1, np.int64)
        def_dst = def_at + vpos if def_at >= 0 else np.full(n, -1, np.int64)
        sizes = np.ascontiguousarray(t.sizes[:, 1])
        data_pos, deferred = _stage_rows(unit, leaf, t.offsets[:, 1], sizes)
        if deferred is not None:
            unit.count_direct("mini_block_layout", int(deferred.sum()))
    if leaf.kind == "var":
        unit.var_check_rows.append((leaf.slot_lo + d.vpos, t.num_values, is_utf8_type(leaf.arrow_type), leaf.path, leaf.column, t.ids))
    unit.device_blocks.append(DeviceBlock(leaf, t, data_pos, sizes, vpos, rep_dst, def_dst, dictionary))
    _fill_valid_items(unit, leaf, t, vpos)
    if not pending and (leaf.has_rep or leaf.has_def):
        table_level_fills(unit, leaf, t, rep_dst, def_dst)


def stage_table_dictionaries(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages,
                             rows: dict[int, list[tuple[int, ...]]] | None = None) -> tuple[tuple[int, list[int]], list[int] | None]:
    """The dictionaries of a table leaf of dictionary pages (:func:`_table_column`: every
    row has one) staged as :func:`_place_table_leaf` stages them: together
    (:func:`_dictionaries_together`), or, where that refuses (one page, say), each page's
    dictionary (:func:`_stage_one_dictionary`), then its chunks.
    Returns ``(index bits, each row's first index item)`` and, in the second case, each
    row's staged chunks (arena position, 0: no bytes; else None: the caller stages them).
    ``rows``: the dictionary work rows of pages staged alone are collected there by index
    bits (:func:`_stage_one_dictionary`) for the caller to add, not added."""
    whole = leaf.reader.mapped
    d = t.derived()
    bodies = [t.layouts[k].body for k in t.layout.tolist()]
    bufs = _read_rows(leaf, t.offsets[:, 2].tolist(), t.sizes[:, 2].tolist())
    together = _dictionaries_together(unit, leaf, bodies, bufs, d.values_list, d.vpos_list)
    if together is not None:
        return (together[0][0], [ipos for _bits, ipos in together]), None
    ctx = leaf.ctx()
    data_pos, index = [], []
    bits = 0
    for mb, buf, nv, v, o, z in zip(bodies, bufs, d.values_list, d.vpos_list, d.buf1_offsets, d.buf1_sizes, strict=True):
        bits, ipos = _stage_one_dictionary(unit, leaf, mb, buf, nv, v, ctx, rows)
        index.append(ipos)
        if whole is not None:  # (a mapped file: a view of its map; one-page leaves of many fragments: no NumPy)
            data_pos.append(unit.stage.add_buffer(leaf.path, o, whole[o : o + z], whole) if z else 0)
            continue
        got, deferred = _stage_rows(unit, leaf, np.asarray([o], np.int64), np.asarray([z], np.int64))
        data_pos.append(int(got[0]))
        unit.count_direct("mini_block_layout", int(deferred.sum()) if deferred is not None else 0)
    return (bits, index), data_pos


def dictionary_rows(t: pagetable.LeafPages) -> np.ndarray | None:
    """The rows of mini-block table ``t`` whose pages have a page dictionary (all of them
    in a leaf of dictionary pages; some where its column mixes dictionary and plain pages),
    made once per table; None: none."""
    if not any(f.dictionary for f in t.layouts):
        return None
    got = t.memo.get("dictionary_rows")
    if got is None:
        got = t.memo["dictionary_rows"] = np.flatnonzero(t.per_layout([f.dictionary for f in t.layouts], np.bool_))
    return got


def _some_dictionaries(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages, rows: np.ndarray,
                       vpos: np.ndarray) -> tuple[np.ndarray, list[tuple[int, Callable[[], None]]], int]:
    """The dictionaries of rows ``rows`` of ``leaf``'s table ``t`` (its pages with one, beside
    pages without: :func:`dictionary_rows`; ``vpos``: each row's first value of the leaf),
    staged together now (:func:`_dictionaries_together`), or,
    where that refuses (one page, say), each just before its page's chunks
    (:func:`_stage_one_dictionary`): returned as :func:`_stage_ordered` items (after the
    row before).  Returns each row's first index item (-1: no dictionary; filled as the
    items run), those items and the first dictionary row's index bits."""
    bodies = [t.layouts[k].body for k in t.layout[rows].tolist()]
    bufs = _read_rows(leaf, t.offsets[rows, 2].tolist(), t.sizes[rows, 2].tolist())
    nv, vp = t.num_values[rows].tolist(), vpos[rows].tolist()
    index = np.full(len(t), -1, np.int64)
    bits = dictionary_plan.index_form(bodies[0].value_compression)[0]
    together = _dictionaries_together(unit, leaf, bodies, bufs, nv, vp)
    if together is not None:
        index[rows] = [ipos for _bits, ipos in together]
        return index, [], bits
    ctx = leaf.ctx()

    def alone(k: int) -> Callable[[], None]:
        def stage() -> None:
            index[rows[k]] = _stage_one_dictionary(unit, leaf, bodies[k], bufs[k], nv[k], vp[k], ctx)[1]

        return stage

    return index, [(int(rows[k]) - 1, alone(k)) for k in range(rows.size)], bits


@dataclass(slots=True, eq=False)
class _FullZipTable:
    """What the work of a table of full-zip pages needs that does not depend on the file or
    the unit, made once per column (``LeafPages.memo``; the page facts of its distinct
    layouts broadcast to its rows): ``indexed``, per page: it reads its repetition index
    (buffer 1: repetition levels or variable-width values); ``copy``: the rows of fixed
    values without control words (a plain copy of ``copy_len`` bytes); ``walk``: the other
    rows (a full-zip walk each), with the walk's columns that do not depend on placement
    (``cols``), ``rep``, ``defs`` (the rows with repetition / definition levels), ``inv``
    (their invisible-level tables back to back) and ``inv_at`` (each one's first entry);
    ``all_walk``: ``walk`` is every row.  Rows of fixed-size lists with item validity
    (``cols["idim"]`` > 0; nested lists' second layer ``cols["idim2"]``) are walked, control
    words or not: the walk splits each value into its item validity bytes and its items;
    ``ibefore``: per walk row, each of its two layers' ``before`` (its region's start, in
    values of the leaf: :func:`item_regions`)."""

    indexed: np.ndarray
    copy: np.ndarray
    copy_len: np.ndarray
    walk: np.ndarray
    all_walk: bool
    cols: dict[str, np.ndarray]
    rep: np.ndarray
    defs: np.ndarray
    inv: np.ndarray
    inv_at: np.ndarray
    ibefore: np.ndarray


def _fullzip_layout_facts(t: pagetable.LeafPages) -> tuple[dict[str, list], list[np.ndarray]]:
    """Per distinct layout of a table of full-zip pages (``t.layouts``): its repetition /
    definition bits, control word bytes, whether its values are fixed-width, their bytes
    (fixed: ``valb``, a row's item validity bytes included) or offset word bytes (variable),
    its invisible levels' count, the items of a fixed-size list value with item validity
    (``idim``, 0: none; a second layer's: ``idim2``) and where their layers' regions start
    (``ib`` / ``ib2``: ``before``, :func:`item_regions`), and the bytes each value leaves in
    the output (``outb``: ``valb`` less the validity bytes) (lists, one entry per layout), and
    its invisible-level tables; made once per table (``memo``)."""
    got = t.memo.get("layout_facts")
    if got is not None:
        return got
    facts: dict[str, list] = {k: [] for k in ("bits_rep", "bits_def", "ctrl", "fixed", "valb", "offb", "ninv", "idim", "outb",
                                              "idim2", "ib", "ib2")}
    invs = []
    for f in t.layouts:
        fz = f.body
        fixed = fz.WhichOneof("details") == "bits_per_value"
        br, bd = int(fz.bits_rep), int(fz.bits_def)
        inv = np.asarray(invisible_levels(f.layers), np.bool_).reshape(-1)
        valb = int(fz.bits_per_value) // 8 if fixed else 0
        form = encodings.device_full_zip_form(fz.value_compression) if fixed else None
        valid = form[1][2] if form is not None and form[0] == "fsl_valid" else ()
        (ib, idim), (ib2, idim2) = (*valid, (0, 0), (0, 0))[:2]
        for k, v in (("bits_rep", br), ("bits_def", bd), ("ctrl", _ctrl_bytes(br + bd)), ("fixed", fixed),
                     ("valb", valb), ("offb", 0 if fixed else int(fz.bits_per_offset) // 8),
                     ("ninv", inv.size), ("idim", idim), ("outb", valb - fsl_plan.row_validity_bytes(valid)),
                     ("idim2", idim2), ("ib", ib), ("ib2", ib2)):
            facts[k].append(v)
        invs.append(inv)
    t.memo["layout_facts"] = (facts, invs)
    return facts, invs


def _fullzip_table(leaf: LeafPlan, t: pagetable.LeafPages) -> _FullZipTable:
    """:class:`_FullZipTable` of ``t``, after the checks of each page (a data buffer, one
    long enough for its values, a repetition index of a whole width per row; over the rows
    at once: the first bad page, in page order, raises ``CorruptFileError`` naming
    ``leaf``'s file)."""
    facts, invs = _fullzip_layout_facts(t)
    lay = t.layout
    per = {k: t.per_layout(v, np.bool_ if k == "fixed" else np.int64) for k, v in facts.items()}
    n, vis, rows, size0 = t.num_levels, t.num_values, t.num_rows, np.ascontiguousarray(t.sizes[:, 0])
    copy = per["fixed"] & (per["ctrl"] == 0) & (per["idim"] == 0)
    indexed = (per["bits_rep"] > 0) | ~per["fixed"]
    stride = per["ctrl"] + per["valb"]
    has_index = t.offsets.shape[1] > 1
    size1 = np.ascontiguousarray(t.sizes[:, 1]) if has_index else np.zeros(len(t), np.int64)
    iwidth, rem = np.divmod(size1, rows + 1)
    bad_index = indexed & ((rem != 0) | ~np.isin(iwidth, (1, 2, 4, 8)))
    bad = (copy & ((size0 < n * per["valb"]) | (vis != n))) | (~copy & bad_index) | \
        (~copy & ~indexed & ((rows != n) | (size0 < n * stride)))
    if bad.any():
        ctx = leaf.ctx()
        j = int(np.flatnonzero(bad)[0])
        if copy[j] and size0[j] >= n[j] * per["valb"][j]:
            raise ctx.corrupt(f"full-zip page has {int(n[j])} values, expected {int(vis[j])}")
        if bad_index[j] and not has_index:
            raise ctx.corrupt("full-zip page lacks its repetition index")
        raise ctx.corrupt("full-zip repetition index has an impossible width" if bad_index[j] else "full-zip buffer shorter than its values")
    walk = np.flatnonzero(~copy)
    w_ix = indexed[walk]
    cols = {
        "rows": rows[walk], "size": size0[walk], "iwidth": np.where(w_ix, iwidth[walk], 0), "stride": np.where(w_ix, 0, stride[walk]),
        "ctrl": per["ctrl"][walk], "bits_def": per["bits_def"][walk], "offb": per["offb"][walk], "valb": per["valb"][walk],
        "ninv": per["ninv"][walk], "items": n[walk], "visible": vis[walk], "idim": per["idim"][walk], "idim2": per["idim2"][walk],
    }
    inv_lo = miniblock.exclusive_scan(np.asarray(facts["ninv"], np.int64))[:-1][lay[walk]]
    inv = np.concatenate(invs)[miniblock.concat_ranges(inv_lo, inv_lo + cols["ninv"])] if invs else np.zeros(0, np.bool_)
    return _FullZipTable(indexed, np.flatnonzero(copy), (n * per["valb"])[copy], walk, bool(walk.size == len(t)), cols,
                         per["bits_rep"][walk] > 0, per["bits_def"][walk] > 0, inv, miniblock.exclusive_scan(cols["ninv"])[:-1],
                         np.stack([per["ib"][walk], per["ib2"][walk]], axis=1))


def fullzip_facts(leaf: LeafPlan, t: pagetable.LeafPages) -> _FullZipTable:
    """:func:`_fullzip_table` of ``t`` (a table of ``leaf``'s full-zip pages), made once per
    table (``LeafPages.memo``; a column's shared table: once per column)."""
    z = t.memo.get("fullzip")
    if z is None:
        cut = t.memo.get("runs")  # (a row selection's cut: the facts of the pages whole)
        whole = t if cut is None else replace(t, num_values=cut.num_values, num_levels=cut.num_levels, memo={})
        z = t.memo["fullzip"] = _fullzip_table(leaf, whole)
        if cut is not None:  # (its layouts' facts: the cut's too)
            t.memo["layout_facts"] = whole.memo["layout_facts"]
    return z


def _place_fullzip_table(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages) -> None:
    """:func:`place_leaf` of a leaf of full-zip pages planned as a table (:func:`_table_column`):
    each page's copy or walk work, from what is made once per column
    (:func:`_fullzip_table`) and a few array operations per leaf: each page's data (buffer
    0) and, where read, repetition index (buffer 1) staged in page order (scalars for fewer
    than :data:`DEVICE_BLOCK_MIN_PAGES` pages), fixed values without control words copied,
    the others one full-zip walk row each with their invisible-level tables registered;
    FSST segments of the pages with a symbol table; the level fills of pages whose layout
    lacks the leaf's levels.  Pages a row selection cuts to row runs (``memo["runs"]``,
    :class:`RowRuns`) decode only those, as :func:`_emit_fullzip_rows` gives them
    (:func:`_fullzip_cut`)."""
    whole = leaf.reader.mapped
    z = fullzip_facts(leaf, t)
    d = t.derived()
    npages = len(t)
    path = leaf.path
    dst = leaf.slot_lo + d.vpos if leaf.kind == "var" else leaf.value_pos + d.vpos * leaf.width
    items_at = d.vpos if leaf.item_dim else None
    _fill_valid_items(unit, leaf, t, d.vpos)
    rep_at = leaf.rep_pos + d.lpos if leaf.has_rep else np.full(npages, -1, np.int64)
    def_at = leaf.def_pos + d.lpos if leaf.has_def else np.full(npages, -1, np.int64)
    runs = t.memo.get("runs")
    if runs is not None:  # a row selection cuts some pages to row runs
        cut = _fullzip_cut(leaf, t, z, runs)
        ranges = _ordered_ranges(_fullzip_parts(t, z, cut))
        pos, spans, blobs, deferred = _stage_ordered(unit, leaf, ranges, cut.blobs, npages)
        if deferred is not None:  # (a page counted by its first buffer: its data, or its first span)
            unit.count_direct("full_zip_layout", int(deferred[ranges.first].sum()))
        _fullzip_table_work(unit, leaf, t, z, pos, dst, rep_at, def_at, whole_rows=~cut.is_cut, items_at=items_at)
        _fullzip_run_work(unit, leaf, cut, spans, blobs, dst, def_at, items_at)
    elif whole is not None and npages < DEVICE_BLOCK_MIN_PAGES:  # staging in page order: data, then the index where read
        add = unit.stage.add_buffer
        got = []
        for o, s, o1, s1, ix in zip(d.buf0_offsets, d.buf0_sizes, d.buf1_offsets, d.buf1_sizes, z.indexed.tolist(), strict=True):
            got.append(add(path, o, whole[o : o + s], whole) if s else 0)
            got.append((add(path, o1, whole[o1 : o1 + s1], whole) if s1 else 0) if ix else -1)
        pos = np.asarray(got, np.int64).reshape(npages, 2)
        _fullzip_table_work(unit, leaf, t, z, pos, dst, rep_at, def_at, items_at=items_at)
    else:
        take = np.zeros((npages, 2), np.bool_)
        take[:, 0] = True
        take[:, 1] = z.indexed
        width = min(2, t.offsets.shape[1])
        pos = np.full((npages, 2), -1, np.int64)
        tk = take[:, :width]
        pos[:, :width][tk], deferred = _stage_rows(unit, leaf, t.offsets[:, :width][tk], t.sizes[:, :width][tk])
        if deferred is not None:  # (a page counted by its data buffer, the first of its row)
            unit.count_direct("full_zip_layout", int(deferred[miniblock.exclusive_scan(tk.sum(axis=1))[:-1]].sum()))
        _fullzip_table_work(unit, leaf, t, z, pos, dst, rep_at, def_at, items_at=items_at)
    if leaf.kind == "var":
        unit.var_check_rows.append((dst, t.num_values, is_utf8_type(leaf.arrow_type), path, leaf.column, t.ids))
        rows = unit.fsst_rows.get(id(leaf))
        if rows is not None:
            key = id(leaf)
            for j, slot, count in zip(rows.tolist(), dst[rows].tolist(), t.num_values[rows].tolist(), strict=True):
                fsst_plan.add_segments(unit, (key, j), slot, count)


@dataclass(slots=True, frozen=True)
class RowRuns:
    """A row selection's cut of a table's full-zip pages without repetition levels
    (``LeafPages.memo["runs"]``, made by ``rows._restrict_table``): the rows each cut page
    decodes, as runs -- ``row[k]``, the table row of run ``k`` (non-decreasing), and
    ``runs[k]``, its page-local ``[start, end)`` rows (a page's runs sorted, disjoint, not
    empty); and the pages' whole counts (``num_values``, ``num_levels``: what their layouts
    say; the table's own are the rows decoded).  A page without a run decodes whole."""

    row: np.ndarray
    runs: np.ndarray
    num_values: np.ndarray
    num_levels: np.ndarray


@dataclass(slots=True, eq=False)
class _FullZipCut:
    """The staging and work of the row runs of a full-zip table's cut pages
    (:func:`_fullzip_cut`): per row
    of the table, whether it is cut (``is_cut``); per staging span (runs of one page less
    than :data:`FULLZIP_STAGE_GAP` bytes apart share one, in row order): its row and bytes
    within the page's data buffer (``span_row``, ``span_lo``, ``span_hi``); per run
    (:class:`RowRuns` order): its span, bytes within the page's data buffer (``byte_lo``,
    ``byte_hi``), its rows (``length``), the page's values before it (``before``), its
    layout's facts (:func:`_fullzip_layout_facts`: ``per``) and index width (``iwidth``:
    variable-width values; 0: fixed, stride ``ctrl + valb``), its first entry in its page's
    rebased index (``entry``: -1 for fixed values); ``blobs``: each cut variable-width
    page's row and its runs' index entries rebased to their spans (``(rows + 1) *
    iwidth`` bytes per run, staged after the page's spans); the tables' invisible levels
    per layout (``invs``)."""

    is_cut: np.ndarray
    span_row: np.ndarray
    span_lo: np.ndarray
    span_hi: np.ndarray
    row: np.ndarray
    span: np.ndarray
    byte_lo: np.ndarray
    byte_hi: np.ndarray
    length: np.ndarray
    before: np.ndarray
    per: dict[str, np.ndarray]
    iwidth: np.ndarray
    entry: np.ndarray
    blobs: list[tuple[int, np.ndarray]]
    layout: np.ndarray
    invs: list[np.ndarray]


def _fullzip_cut(leaf: LeafPlan, t: pagetable.LeafPages, z: _FullZipTable, runs: RowRuns) -> _FullZipCut:
    """:class:`_FullZipCut` of the cut pages of full-zip table ``t`` (``z``: its pages'
    facts, checked whole), refusing what :func:`_emit_fullzip_rows` refuses (the first bad
    page in row order): a fixed-width page's buffer shorter than its rows, a variable-width
    page's row runs pointing outside it (their index entries read in the file's map, or
    its repetition indexes read from the store at once)."""
    ctx = leaf.ctx()
    n = len(t)
    r = runs.row
    rr = runs.runs
    facts, invs = _fullzip_layout_facts(t)
    lay = t.layout[r]
    per = {k: np.asarray(v, np.bool_ if k == "fixed" else np.int64).reshape(len(t.layouts))[lay] for k, v in facts.items()}
    is_cut = np.zeros(n, np.bool_)
    is_cut[r] = True
    length = rr[:, 1] - rr[:, 0]
    first = np.ones(r.size, np.bool_)
    first[1:] = r[1:] != r[:-1]
    group = np.cumsum(first) - 1
    scan = miniblock.exclusive_scan(length)[:-1]
    starts = np.flatnonzero(first)
    before = scan - scan[starts][group]
    nth = np.arange(r.size, dtype=np.int64) - starts[group]  # the run's place among its page's
    fixed = per["fixed"]
    stride = per["ctrl"] + per["valb"]
    size0 = t.sizes[r, 0]
    byte_lo = rr[:, 0] * stride
    byte_hi = rr[:, 1] * stride
    bad = np.zeros(r.size, np.bool_)
    bad[fixed] = size0[fixed] < t.num_rows[r][fixed] * stride[fixed]
    iwidth = np.zeros(r.size, np.int64)
    entry = np.full(r.size, -1, np.int64)
    blobs: list[tuple[int, np.ndarray]] = []
    var = np.flatnonzero(~fixed)
    if var.size:
        vrows, vfirst = np.unique(r[var], return_index=True)  # (increasing: runs are in row order)
        iw = t.sizes[vrows, 1] // (t.num_rows[vrows] + 1)  # (widths checked with the pages whole: fullzip_facts)
        iwidth[var] = np.repeat(iw, np.diff(np.append(vfirst, var.size)))
        counts = length[var] + 1  # each run's row starts and its end
        entries = miniblock.concat_ranges(rr[var, 0], rr[var, 1] + 1)
        run_of = np.repeat(np.arange(var.size), counts)
        values = _index_entries(leaf, t, vrows, iw, np.searchsorted(vrows, r[var])[run_of], entries)
        at = miniblock.exclusive_scan(counts)
        byte_lo[var] = values[at[:-1]]
        byte_hi[var] = values[at[1:] - 1]
        prev = np.zeros(var.size, np.bool_)
        prev[1:] = ~first[var][1:] & (byte_lo[var][1:] < byte_hi[var][:-1])
        bad[var] |= (byte_hi[var] < byte_lo[var]) | (byte_hi[var] > size0[var]) | prev
        rebased = values - np.repeat(byte_lo[var], counts)
        entry[var] = before[var] + nth[var]
        page_at = miniblock.exclusive_scan(np.bincount(np.searchsorted(vrows, r[var]), weights=counts, minlength=vrows.size).astype(np.int64))
        for k, (j, w) in enumerate(zip(vrows.tolist(), iw.tolist(), strict=True)):
            blobs.append((j, rebased[page_at[k] : page_at[k + 1]].astype(f"<u{w}")))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ctx.corrupt("full-zip buffer shorter than its values" if fixed[k] else "full-zip rows point outside the page")
    new_span = first.copy()
    new_span[1:] |= byte_lo[1:] - byte_hi[:-1] > FULLZIP_STAGE_GAP
    span = np.cumsum(new_span) - 1
    firsts = np.flatnonzero(new_span)
    lasts = np.append(firsts[1:] - 1, r.size - 1)
    return _FullZipCut(is_cut, r[firsts], byte_lo[firsts], byte_hi[lasts], r, span, byte_lo, byte_hi, length, before, per,
                       iwidth, entry, blobs, lay, invs)


def _index_entries(leaf: LeafPlan, t: pagetable.LeafPages, rows: np.ndarray, width: np.ndarray, at: np.ndarray,
                   entries: np.ndarray) -> np.ndarray:
    """Entries ``entries`` of the repetition indexes (buffer 1: ``width[k]``-byte
    little-endian offsets) of full-zip pages ``rows`` of ``t`` (entry ``i`` of page
    ``rows[at[i]]``), as int64: gathered from the file's map, or from the indexes read at
    once from its store."""
    off, size = t.offsets[rows, 1], t.sizes[rows, 1]
    whole = leaf.reader.mapped
    if whole is not None:
        if int((off + size).max(initial=0)) > whole.size:
            raise leaf.ctx().corrupt("full-zip repetition index has an impossible width")
        buf, base = whole, off
    else:
        bufs = _read_rows(leaf, off.tolist(), size.tolist())
        if any(b.size != z for b, z in zip(bufs, size.tolist(), strict=True)):
            raise leaf.ctx().corrupt("full-zip repetition index has an impossible width")
        buf, base = np.concatenate(bufs), miniblock.exclusive_scan(size)[:-1]
    w = width[at]
    pos = base[at] + entries * w
    out = np.empty(entries.size, np.int64)
    for k in np.unique(w).tolist():
        m = w == k
        raw = np.ascontiguousarray(buf[pos[m][:, None] + np.arange(k)])
        out[m] = raw.view(f"<u{k}").reshape(-1).astype(np.int64)
    return out


@dataclass(slots=True, eq=False)
class _OrderedRanges:
    """File buffers to stage in order (:func:`_stage_ordered`): per buffer its table row
    (non-decreasing), ``(off, size)`` in the file, the range whose read decides whether it is
    deferred to the slab fill on an object store (``ask_off``, ``ask_size``: a cut page's
    spans are deferred where its whole data buffer would be),
    what it is (``kind``: 0 a full-zip page's data, 1 its repetition index or a mini-block
    page's chunks, 2 a span of a cut full-zip page) and which (``ref``: the row, or the
    span); ``first``: each row's first buffer (a page's data, chunks or first span)."""

    row: np.ndarray
    off: np.ndarray
    size: np.ndarray
    ask_off: np.ndarray
    ask_size: np.ndarray
    kind: np.ndarray
    ref: np.ndarray
    first: np.ndarray


#: columns of a part of :class:`_OrderedRanges`: row, off, size, ask_off, ask_size, kind, ref
_RangePart = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _ordered_ranges(parts: list[_RangePart]) -> _OrderedRanges:
    """The buffers of ``parts`` in row order (a row's buffers in the order of the parts
    given: its data before its index)."""
    if not parts:
        none = np.zeros(0, np.int64)
        return _OrderedRanges(none, none, none, none, none, np.zeros(0, np.int8), none, none)
    cols = [np.concatenate(c) for c in zip(*parts, strict=True)]
    order = np.argsort(cols[0], kind="stable")
    row, off, size, ask_off, ask_size, kind, ref = (c[order] for c in cols)
    first = np.flatnonzero(np.append(True, row[1:] != row[:-1])) if row.size else np.zeros(0, np.int64)
    return _OrderedRanges(row, off, size, ask_off, ask_size, kind, ref, first)


def _part(row: np.ndarray, off: np.ndarray, size: np.ndarray, kind: int, ref: np.ndarray | None = None,
          ask: tuple[np.ndarray, np.ndarray] | None = None) -> _RangePart:
    ask_off, ask_size = (off, size) if ask is None else ask
    return row, off, size, ask_off, ask_size, np.full(row.size, kind, np.int8), row if ref is None else ref


def _fullzip_parts(t: pagetable.LeafPages, z: _FullZipTable, cut: _FullZipCut | None, rows: np.ndarray | None = None) -> list[_RangePart]:
    """The buffers full-zip table ``t`` stages, as parts of :class:`_OrderedRanges`: a
    whole page's data, then its repetition index where read (:attr:`_FullZipTable.indexed`);
    a cut page's spans (``cut``; None: no page is cut); ``rows``: each of ``t``'s rows'
    row in the leaf's table (a mixed leaf's full-zip rows), None: the same."""
    n = len(t)
    whole = np.arange(n, dtype=np.int64) if cut is None else np.flatnonzero(~cut.is_cut)
    ix = whole[z.indexed[whole]]
    at = (lambda j: j) if rows is None else (lambda j: rows[j])  # noqa: E731
    data_off, data_size = t.offsets[:, 0], t.sizes[:, 0]
    parts = [_part(at(whole), data_off[whole], data_size[whole], 0)]
    if ix.size:  # (an indexed page has its index column: fullzip_facts)
        parts.append(_part(at(ix), t.offsets[ix, 1], t.sizes[ix, 1], 1))
    if cut is not None:
        sr = cut.span_row
        parts.append(_part(at(sr), data_off[sr] + cut.span_lo, cut.span_hi - cut.span_lo, 2,
                           np.arange(sr.size, dtype=np.int64), (data_off[sr], data_size[sr])))
    return parts


#: a run of at most this many buffers of a mapped file is staged by scalar
#: :meth:`Stager.add_buffer` calls (:func:`_stage_ordered`; the same positions and items)
_FEW_BUFFERS = 4


def _stage_ordered(unit: UnitPlan, leaf: LeafPlan, r: _OrderedRanges, after: Sequence[tuple[int, Any]],
                   nrows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Stage the buffers ``r`` in order as :func:`_stage_rows` does (deferral decided by
    each one's ``ask`` range), and ``after``'s items in page order:
    ``(row, item)`` (rows increasing) once every buffer of rows up to ``row`` is: a blob
    (host bytes: :meth:`Stager.add_bytes`) or a function to call (a constant page's
    staging).  Returns each of the ``nrows`` rows' data (or chunks) and repetition index
    positions (``[nrows, 2]``, -1 where none), each span's position, each blob's position
    and which buffers were deferred (None: a mapped file).  A Python step
    per item of ``after``: the blobs of cut variable-width pages, constant pages."""
    pos = np.zeros(r.off.size, np.int64)
    blobs: list[int] = []
    deferred = None if leaf.reader.mapped is not None else np.zeros(r.off.size, np.bool_)
    bounds = np.searchsorted(r.row, np.asarray([a for a, _i in after], np.int64), side="right").tolist() if after else []
    lo = 0
    whole = leaf.reader.mapped
    for hi, (_row, item) in zip([*bounds, r.off.size], [*after, (None, None)], strict=True):
        if whole is not None and 0 < hi - lo <= _FEW_BUFFERS:  # (a few: add_buffer's scalars cost less than NumPy's calls)
            add, path = unit.stage.add_buffer, leaf.path
            pos[lo:hi] = [add(path, o, whole[o : o + z], whole) if z else 0
                          for o, z in zip(r.off[lo:hi].tolist(), r.size[lo:hi].tolist(), strict=True)]
            lo = hi
        elif hi > lo:
            pos[lo:hi], got = _stage_rows(unit, leaf, r.off[lo:hi], r.size[lo:hi], (r.ask_off[lo:hi], r.ask_size[lo:hi]))
            if got is not None and deferred is not None:
                deferred[lo:hi] = got
            lo = hi
        if isinstance(item, np.ndarray):
            blobs.append(unit.stage.add_bytes(item))
        elif item is not None:
            item()
    rows = np.full((nrows, 2), -1, np.int64)
    spans = np.zeros(int((r.kind == 2).sum()), np.int64)
    for k in (0, 1):
        m = r.kind == k
        rows[r.ref[m], k] = pos[m]
    spans[r.ref[r.kind == 2]] = pos[r.kind == 2]
    return rows, spans, np.asarray(blobs, np.int64), deferred


def _fullzip_table_work(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages, z: _FullZipTable, pos: np.ndarray,
                        dst: np.ndarray, rep_at: np.ndarray, def_at: np.ndarray, later: bool = False,
                        whole_rows: np.ndarray | None = None,
                        items_at: np.ndarray | None = None) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """The work of full-zip rows ``t`` (:func:`_fullzip_table`'s ``z``) staged at ``pos``
    (``[rows, 2]``: data, repetition index or -1), their values to ``dst`` (slots or bytes),
    their first levels ``rep_at`` / ``def_at``: fixed values without control words copied,
    the others' invisible-level tables registered and their walk rows added, and the level
    fills of rows whose layout lacks the leaf's levels; ``later``: the leaf's levels wait for
    the device pre-pass: what depends on them (walk rows, fills) is returned as a function
    of every row's first levels; ``whole_rows``: the rows decoded whole (the others, cut
    by a row selection, have their runs' work from :func:`_fullzip_run_work`; their level
    fills are made here with the others'), None: all; ``items_at``: each row's first value in
    the leaf, for a leaf with item validity (each of its layers' bytes placed by
    :func:`_item_dst`), None: no item validity."""
    copy, copy_len = z.copy, z.copy_len
    if whole_rows is not None:
        keep = whole_rows[copy]
        copy, copy_len = copy[keep], copy_len[keep]
    if copy.size:
        unit.copy_fixed.add(src=pos[copy, 0], len=copy_len, dst=dst[copy])
    inv_at = None
    if z.walk.size:
        inv_at = unit.invisible_size + z.inv_at
        unit.invisible.append(z.inv)
        unit.invisible_size += z.inv.size
    if later:
        return lambda rep, dfn: _fullzip_walks(unit, leaf, t, z, pos, dst, inv_at, np.asarray(rep), np.asarray(dfn), whole_rows,
                                               items_at)
    _fullzip_walks(unit, leaf, t, z, pos, dst, inv_at, rep_at, def_at, whole_rows, items_at)
    return None


def _fullzip_walks(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages, z: _FullZipTable, pos: np.ndarray, dst: np.ndarray,
                   inv_at: np.ndarray | None, rep_at: np.ndarray, def_at: np.ndarray, whole_rows: np.ndarray | None = None,
                   items_at: np.ndarray | None = None) -> None:
    """:func:`_fullzip_table_work`'s walk rows and level fills (``inv_at``: each walk row's
    invisible-level table, registered; None: no walk row; ``whole_rows``, ``items_at``: as
    there)."""
    if inv_at is not None:
        if whole_rows is None:
            w = slice(None) if z.all_walk else z.walk
            cols, rep, defs = z.cols, z.rep, z.defs
        else:
            keep = whole_rows[z.walk]
            w, inv_at = z.walk[keep], inv_at[keep]
            cols, rep, defs = {k: v[keep] for k, v in z.cols.items()}, z.rep[keep], z.defs[keep]
        if inv_at.size:
            ibefore = z.ibefore if whole_rows is None else z.ibefore[keep]
            item_dst, item_dst2 = (-1, -1) if items_at is None else _item_dst(leaf, items_at[w], cols, ibefore)
            unit.fullzip.add(
                **cols, data=pos[w, 0], index=pos[w, 1], inv=inv_at,
                rep_dst=np.where(rep, rep_at[w], -1), def_dst=np.where(defs, def_at[w], -1), val_dst=dst[w], item_dst=item_dst,
                item_dst2=item_dst2,
            )
    if leaf.has_rep or leaf.has_def:
        table_level_fills(unit, leaf, t, rep_at, def_at)


def _item_dst(leaf: LeafPlan, vpos: np.ndarray, cols: dict[str, np.ndarray], ibefore: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where full-zip walk rows of ``leaf`` (their first values ``vpos``, their ``idim`` /
    ``idim2`` in ``cols``, their layers' ``before`` in ``ibefore``: ``[rows, 2]``) write
    the first item validity byte of each of their two layers (-1: the row has none):
    :func:`item_regions`."""
    out = []
    for j, key in enumerate(("idim", "idim2")):
        per = cols[key]
        out.append(np.where(per > 0, leaf.item_pos + leaf.num_values * ibefore[:, j] + vpos * per, -1))
    return out[0], out[1]


def _fullzip_run_work(unit: UnitPlan, leaf: LeafPlan, cut: _FullZipCut, spans: np.ndarray, blobs: np.ndarray, dst: np.ndarray,
                      def_at: np.ndarray, items_at: np.ndarray | None = None) -> None:
    """The work of the row runs of a full-zip table's cut pages (:class:`_FullZipCut`; their
    spans staged at ``spans``, their rebased indexes at ``blobs``; ``dst``, ``def_at``: each
    row's first value and definition level; ``items_at``: its first value in ``leaf``, for a
    leaf with item validity, None: none), as :func:`_emit_fullzip_rows` gives it: runs of fixed values
    without control words or item validity copied, the others one full-zip walk row each,
    the invisible-level table of each layout registered once."""
    per = cut.per
    r = cut.row
    run_pos = spans[cut.span] + cut.byte_lo - cut.span_lo[cut.span]
    nbytes = cut.byte_hi - cut.byte_lo
    fixed = per["fixed"]
    val_dst = dst[r] + np.where(fixed, cut.before * per["outb"], cut.before)
    copy = fixed & (per["ctrl"] == 0) & (per["idim"] == 0)
    if copy.any():
        unit.copy_fixed.add(src=run_pos[copy], len=nbytes[copy], dst=val_dst[copy])
    w = np.flatnonzero(~copy)
    if not w.size:
        return
    used = np.unique(cut.layout[w])
    inv_pos = np.zeros(len(cut.invs), np.int64)
    for k in used.tolist():
        inv_pos[k] = unit.add_invisible(cut.invs[k])
    ninv = np.asarray([inv.size for inv in cut.invs], np.int64)
    index = np.full(w.size, -1, np.int64)
    var = ~fixed[w]
    if var.any():  # each cut page's rebased index, its runs' entries in turn
        page = np.searchsorted(np.asarray([j for j, _b in cut.blobs], np.int64), r[w][var])
        index[var] = blobs[page] + cut.entry[w][var] * cut.iwidth[w][var]
    lay = cut.layout[w]
    item_dst: np.ndarray | int = -1
    item_dst2: np.ndarray | int = -1
    if items_at is not None:
        sub = {"idim": per["idim"][w], "idim2": per["idim2"][w]}
        item_dst, item_dst2 = _item_dst(leaf, items_at[r[w]] + cut.before[w], sub, np.stack([per["ib"][w], per["ib2"][w]], axis=1))
    unit.fullzip.add(
        rows=cut.length[w], data=run_pos[w], size=nbytes[w], index=index, iwidth=cut.iwidth[w],
        stride=np.where(fixed[w], per["ctrl"][w] + per["valb"][w], 0), ctrl=per["ctrl"][w], bits_def=per["bits_def"][w],
        offb=per["offb"][w], valb=per["valb"][w], inv=inv_pos[lay], ninv=ninv[lay], rep_dst=-1,
        def_dst=np.where(per["bits_def"][w] > 0, def_at[r[w]] + cut.before[w], -1), val_dst=val_dst[w], items=cut.length[w],
        visible=cut.length[w], idim=per["idim"][w], item_dst=item_dst, idim2=per["idim2"][w], item_dst2=item_dst2,
    )


def table_level_fills(unit: UnitPlan, leaf: LeafPlan, t: pagetable.LeafPages, rep_dst: np.ndarray | list[int],
                      def_dst: np.ndarray | list[int]) -> None:
    """:func:`_level_fills` of every page of a leaf planned as a table, decided per
    distinct layout: a loop only over the pages of layouts that need a fill or a remap."""
    if not (leaf.has_rep or leaf.has_def):
        return
    needs = [
        (leaf.has_rep and not f.has_rep) or (leaf.has_def and (not f.has_def or f.layers != leaf.layers))
        for f in t.layouts
    ]
    if not any(needs):
        return
    for j in np.flatnonzero(t.per_layout(needs, np.bool_)).tolist():
        f = t.layouts[int(t.layout[j])]
        n = int(t.num_levels[j])
        if leaf.has_rep and not f.has_rep:
            unit.fill_level.append((2 * int(rep_dst[j]), 2 * n, b"\x00\x00"))
        if leaf.has_def:
            if not f.has_def:
                unit.fill_level.append((2 * int(def_dst[j]), 2 * n, b"\x00\x00"))
            elif f.layers != leaf.layers:
                unit.remap.append((int(def_dst[j]), n, _renumber_table(f.layers, leaf.layers)))


def _level_fills(unit: UnitPlan, leaf: LeafPlan, has_rep: bool, has_def: bool, layers: tuple[int, ...], n: int,
                 rep_dst: int, def_dst: int) -> None:
    """The level work of a table row its encodings do not give, for a row with these
    levels, layers and ``n`` levels: zero levels where the leaf has repetition / definition
    levels and the row has none, definition levels renumbered where its layers differ from
    the leaf's."""
    if leaf.has_rep and not has_rep:
        unit.fill_level.append((2 * rep_dst, 2 * n, b"\x00\x00"))
    if leaf.has_def:
        if not has_def:
            unit.fill_level.append((2 * def_dst, 2 * n, b"\x00\x00"))
        elif layers != leaf.layers:
            unit.remap.append((def_dst, n, _renumber_table(layers, leaf.layers)))


def _value_dst(leaf: LeafPlan, vpos: int) -> int:
    """Fixed: byte position of value ``vpos``; var: its slot."""
    if leaf.kind == "var":
        return leaf.slot_lo + vpos
    return leaf.value_pos + vpos * leaf.width


# -- mini-block ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Chunks:
    """The chunks of mini-block pages whose work is emitted together (a group of the device
    pre-pass's chunk table, ``headers._chunks``): every span (``bufs``, ``rep``, ``dfn``:
    ``(start, size)`` per chunk) is an arena position, as the pre-pass found it (nothing is
    read on the host).  Per chunk: its first value is value ``value`` of the leaf; its first
    repetition / definition level goes to level ``rep_dst`` / ``def_dst``."""

    counts: np.ndarray
    levels: np.ndarray
    rep: np.ndarray
    dfn: np.ndarray
    bufs: np.ndarray
    value: np.ndarray
    rep_dst: np.ndarray
    def_dst: np.ndarray
    #: per chunk, where its leaf's item validity bytes start in the fixed arena
    #: (:attr:`LeafPlan.item_pos`, -1 for a leaf without): where the ``fsl_valid`` emission
    #: (``fixed_size_list.gpu_plan.emit_values``) spreads the chunk's validity bits
    item_base: np.ndarray
    #: per chunk, its leaf's values (:attr:`LeafPlan.num_values`): a layer's item validity
    #: region follows the regions of the layers above it (:attr:`LeafPlan.item_layers`)
    item_values: np.ndarray
    #: the inline bit-packed blocks of buffer 0, where the device found them (else they are
    #: read in ``data``)
    blocks: bitpacking_plan.InlineBlocks | None = None
    #: per chunk, where its leaf's values start (fixed: byte in the fixed arena; var: slot),
    #: for chunks of several leaves emitted together; None: the ``leaf`` passed along
    value_base: np.ndarray | None = None
    #: per chunk, the index item its dictionary indices go to (dictionary pages emitted
    #: together); None: from the page's ``dictionary`` position
    index_first: np.ndarray | None = None
    #: the inline bit-packed blocks of the rep / def level sections, and the run counts of
    #: their block-form RLE sections, where the device found them (else read in ``data``)
    rep_blocks: bitpacking_plan.InlineBlocks | None = None
    def_blocks: bitpacking_plan.InlineBlocks | None = None
    rep_runs: np.ndarray | None = None
    def_runs: np.ndarray | None = None


def _emit_levels(unit: UnitPlan, enc, ch: _Chunks, spans: np.ndarray, dst: np.ndarray, ctx,
                 blocks: bitpacking_plan.InlineBlocks | None = None, runs: np.ndarray | None = None) -> None:
    """The per-chunk level buffers ``spans`` of ``ch``, chunk ``i``'s to ``levels[dst[i]:]``
    (u16 items); ``blocks`` / ``runs``: their inline bit-packed blocks / RLE run counts as the
    device pre-pass found them (where the encoding has them)."""
    kind = _level_encoding(enc)
    nlevels = ch.levels
    starts = np.ascontiguousarray(spans[:, 0])
    sizes = np.ascontiguousarray(spans[:, 1])
    encodings.device_level_emitter(enc)(unit, kind, enc, starts, sizes, nlevels, dst, ctx, blocks, runs)


def _emit_chunk_work(unit: UnitPlan, leaf: LeafPlan, mb, ch: _Chunks, nvalues: int, dictionary, ctx) -> None:
    """The level and value work of the chunks ``ch`` (``nvalues`` values) of pages encoded
    as ``mb`` (one page, or pages whose :func:`_group_key` is the same); FSST tables are the
    caller's."""
    if mb.HasField("rep_compression"):
        _emit_levels(unit, mb.rep_compression, ch, ch.rep, ch.rep_dst, ctx, ch.rep_blocks, ch.rep_runs)
    if mb.HasField("def_compression"):
        _emit_levels(unit, mb.def_compression, ch, ch.dfn, ch.def_dst, ctx, ch.def_blocks, ch.def_runs)
    if int(mb.num_buffers) == 0 or not nvalues:
        return
    enc = mb.value_compression
    if dictionary is not None:
        dictionary_plan.emit_indices(unit, enc, dictionary, ch, np.ascontiguousarray(ch.bufs[:, 0, 0]), ctx)
        return
    family, arg = encodings.device_value_form(enc, leaf, int(mb.num_buffers))
    if family == "var":  # a slot per value
        dst = (leaf.slot_lo if ch.value_base is None else ch.value_base) + ch.value
    else:  # bytes of the fixed arena
        dst = (leaf.value_pos if ch.value_base is None else ch.value_base) + ch.value * leaf.width
    encodings.device_value_emitter(family)(unit, enc, arg, ch, dst, ctx)


_DESTS = ("fixed", "index8", "index16", "index32", "index64", "level")


def _fill_nulls(unit: UnitPlan, leaf: LeafPlan, vpos: int, n: int) -> None:
    if not n:
        return
    if leaf.kind == "var":
        unit.fill_slots.append((_value_dst(leaf, vpos), n, 0, 0))
    else:
        unit.fill_fixed.append((_value_dst(leaf, vpos), n * leaf.width, b"\x00"))


def _stage_one_dictionary(unit: UnitPlan, leaf: LeafPlan, mb, buf: np.ndarray, n: int, vpos: int, ctx,
                          rows: dict[int, list[tuple[int, ...]]] | None = None) -> tuple[int, int]:
    """The dictionary of a page encoded as ``mb`` (its ``MiniBlockLayout``) with
    dictionary buffer ``buf``, ``n`` values, its first value ``vpos`` of its leaf (a table
    row's), decoded alone (:func:`dictionary_plan.one`) and staged; its dictionary work row (:data:`DICTIONARY_COLUMNS`)
    added to the unit's, or, given ``rows``, appended to ``rows[index bits]`` (the caller adds
    them, many at once)."""
    items, offsets, nitems = dictionary_plan.one(mb, buf, leaf.kind, leaf.width, leaf.arrow_type, ctx)
    bits = dictionary_plan.index_form(mb.value_compression)[0]
    ipos = unit.alloc_index(bits, n)
    items_pos = unit.stage.add_bytes(items)
    if offsets is not None:
        unit.count_var_dictionary(n, offsets[: nitems + 1])
        row = (ipos, n, items_pos, nitems, 0, unit.stage.add_bytes(offsets), _value_dst(leaf, vpos))
    else:
        row = (ipos, n, items_pos, nitems, leaf.width, 0, _value_dst(leaf, vpos))
    if rows is not None:
        rows.setdefault(bits, []).append(row)
    else:
        unit.dictionary_rows(bits).add(**dict(zip(DICTIONARY_COLUMNS, row, strict=True)))
    return bits, ipos


def _dictionaries_together(unit: UnitPlan, leaf: LeafPlan, layouts: list, bufs: list[np.ndarray], nvalues: list[int],
                           vpos: list[int]) -> list[tuple[int, int]] | None:
    """The dictionaries of dictionary pages of one leaf placed at once: page ``k`` encoded
    as ``layouts[k]`` (``MiniBlockLayout``), its dictionary buffer ``bufs[k]``, ``nvalues[k]``
    values from value ``vpos[k]`` of its leaf (a table's rows).  One
    staged item per leaf and kind, not one per page, and one dictionary work row per page
    naming its items in it (the gather indexes them by page); returns each page's ``(index
    bits, first index item)``.  The items are decoded together by
    :func:`dictionary_plan.together` (variable width: the blocks staged as one buffer and
    their int64 offsets as another; fixed width and booleans: the items back to back).

    None (nothing placed: each page is staged alone, :func:`_stage_one_dictionary`) where
    that refuses: fewer than two pages, other variable-width dictionary encodings, or a
    Variable block that fails a check."""
    got = dictionary_plan.together(layouts, bufs, leaf.kind, leaf.width, leaf.arrow_type, leaf.ctx())
    if got is None:
        return None
    items_at = unit.stage.add_bytes(got.blob) + got.item_start
    if got.offsets is not None:
        offsets_at = unit.stage.add_bytes(got.offsets) + 8 * got.first_offset
        width = 0
    else:
        offsets_at = got.first_offset
        width = leaf.width
    nitems = got.nitems
    if got.offsets is not None:
        for k, first in enumerate(got.first_offset.tolist()):
            unit.count_var_dictionary(nvalues[k], got.offsets[first : first + int(nitems[k]) + 1])
    out = []
    for k, mb in enumerate(layouts):
        bits = dictionary_plan.index_form(mb.value_compression)[0]
        ipos = unit.alloc_index(bits, nvalues[k])
        lst = unit.dictionary_rows(bits)
        lst.add(start=ipos, count=nvalues[k], items=int(items_at[k]), nitems=int(nitems[k]), width=width,
                offsets=int(offsets_at[k]), dst=_value_dst(leaf, vpos[k]))
        out.append((bits, ipos))
    return out


# -- emission groups of mini-block pages -----------------------------------------------------


def _group_key(leaf: LeafPlan, mb) -> tuple:
    """What :func:`_emit_chunk_work` reads of a page's encodings: pages with the same key
    emit their chunks' work together."""
    rep = encodings.device_level_key(mb.rep_compression) if mb.HasField("rep_compression") else None
    dfn = encodings.device_level_key(mb.def_compression) if mb.HasField("def_compression") else None
    return rep, dfn, int(mb.num_buffers), encodings.device_value_form(mb.value_compression, leaf, int(mb.num_buffers))


def _dictionary_key(mb) -> tuple:
    """What the work of a dictionary page's chunks depends on besides its index bits: the
    index bits, the index encoding, the level encodings and the buffer count."""
    dfn = encodings.device_level_key(mb.def_compression) if mb.HasField("def_compression") else None
    rep = encodings.device_level_key(mb.rep_compression) if mb.HasField("rep_compression") else None
    return (*dictionary_plan.index_form(mb.value_compression), dfn, rep, int(mb.num_buffers))


@dataclass(slots=True, eq=False)
class DeviceBlock:
    """Mini-block pages, staged, whose chunk headers the device pre-pass parses
    (:func:`device_headers`, :func:`_device_lists`): the rows of a table (``rows``: a leaf's
    own, :func:`_place_table_leaf`; a mixed leaf's mini-block rows, :func:`_place_mixed_table`;
    or a pass block's, below), as arrays over them: row ``j`` has ``size[j]`` bytes of
    chunks at arena byte ``data_pos[j]``, its values go to value ``vpos[j]`` of its leaf,
    its repetition / definition levels to level ``rep_dst[j]`` / ``def_dst[j]`` (-1: none,
    or not known yet where the leaf's levels are in-band, :attr:`LeafPlan.levels_pending`);
    ``dictionary``: for a block of dictionary pages, ``(index bits, each row's first index
    item)`` (:func:`stage_table_dictionaries`; -1 for a row without a dictionary beside rows
    with one, :func:`_some_dictionaries`); the emission takes each row's index bits from its
    layout (:func:`_dictionary_key`)."""

    leaf: LeafPlan
    rows: pagetable.LeafPages
    #: per row (``int64`` arrays; lists of ints for blocks of a few rows)
    data_pos: np.ndarray | list[int]
    size: np.ndarray | list[int]
    vpos: np.ndarray | list[int]
    rep_dst: np.ndarray | list[int]
    def_dst: np.ndarray | list[int]
    dictionary: tuple[int, list[int]] | None = None
    #: a pass block (``passplan``: the same column of several fragments placed as one table):
    #: its leaves (``leaf`` is the first; they read values alike), ``rows`` their tables'
    #: rows back to back (:func:`pagetable.concat`), leaf ``k``'s rows ``leaf_rows[k]:leaf_rows[k + 1]``;
    #: ``vpos`` is then within each row's leaf, whose first value slot / byte is ``base[j]``
    leaves: list[LeafPlan] | None = None
    leaf_rows: np.ndarray | None = None
    base: np.ndarray | None = None
    #: a pass block's chunk metadata words (buffer 0 of its rows, in order: views of its
    #: files' maps), read as its leaves were staged (:func:`table_chunk_layouts` decodes them)
    metas: list[np.ndarray] | None = None

    def leaf_of(self, j: int) -> LeafPlan:
        """The leaf of the block's row ``j``."""
        if self.leaves is None:
            return self.leaf
        assert self.leaf_rows is not None
        return self.leaves[int(np.searchsorted(self.leaf_rows, j, side="right")) - 1]

    def parts(self) -> list[tuple[LeafPlan, pagetable.LeafPages]]:
        """``(leaf, its table)`` of each leaf of the block, in row order."""
        if self.leaves is None:
            return [(self.leaf, self.rows)]
        return [(leaf, leaf.table) for leaf in self.leaves]  # type: ignore[misc]

    @property
    def npages(self) -> int:
        return len(self.rows)


# -- full-zip ---------------------------------------------------------------------------------


#: rows of a selection whose bytes are at most this far apart are staged as one span
FULLZIP_STAGE_GAP = 1 << 16


# -- constant / all-null ---------------------------------------------------------------------


def _emit_constant_page(unit: UnitPlan, leaf: LeafPlan, lp, vpos: int, rep_dst: int, def_dst: int,
                        later: bool = False) -> LevelWork | None:
    """The work of a decoded constant page ``lp`` (``constant_layout.decode``: a table
    row's): its value and its levels at value ``vpos`` and levels ``rep_dst`` / ``def_dst``
    of ``leaf`` (``later``: the leaf's levels wait for the pre-pass: the level work is
    returned, to be called with them)."""
    staged = []
    for levels, which in ((lp.rep, 0), (lp.def_, 1)):
        if levels is not None and levels.size:
            staged.append((unit.stage.add_bytes(np.ascontiguousarray(levels, np.uint16)), levels.size, which))

    def work(rep_dst: int, def_dst: int) -> None:
        for pos, count, which in staged:
            unit.copy_level.add(src=pos, len=2 * count, dst=2 * (def_dst if which else rep_dst))

    if not later:
        work(rep_dst, def_dst)
    _constant_values(unit, leaf, lp, vpos)
    return work if later else None


def _constant_values(unit: UnitPlan, leaf: LeafPlan, lp, vpos: int) -> None:
    n = lp.num_values
    if not n:
        return
    for at, size in item_regions(leaf, vpos, n):  # fixed-size lists' items: null in an all-null page, valid under a constant
        unit.fill_fixed.append((at, size, b"\x00" if lp.values is None else b"\x01"))
    if lp.values is None:
        _fill_nulls(unit, leaf, vpos, n)
        return
    value = bytes(lp.values[1])
    dst = _value_dst(leaf, vpos)
    if leaf.kind == "var":
        pos = unit.stage.add_bytes(np.frombuffer(value, np.uint8)) if value else 0
        unit.fill_slots.append((dst, n, pos, len(value)))
        return
    if leaf.kind == "bool":
        if leaf.width != 1:
            raise Unsupported("constant pages of fixed-size boolean lists")
        pattern = bytes([value[0] & 1 if value else 0])
    else:
        if len(value) != leaf.width:
            raise CorruptFileError(leaf.path, f"constant of {len(value)} bytes for a {8 * leaf.width}-bit type")
        pattern = value
    unit.fill_fixed.append((dst, n * leaf.width, pattern))


# --------------------------------------------------------------------------------------------
# Fields


def plan_field_leaves(reader: LanceFileReader, arrow_field: pa.Field, columns: list[int]) -> list[LeafPlan]:
    """Plan every leaf of one top-level field over all its pages (2.1 / 2.2 files)."""
    types = leaf_types(arrow_field.type)
    if len(types) != len(columns):
        raise CorruptFileError(reader.path, f"field {arrow_field.name!r} has {len(types)} leaves but {len(columns)} columns")
    leaves = []
    for col, t in zip(columns, types, strict=True):
        leaves.append(plan_leaf(reader, col, t))
    check_field_leaves(reader, arrow_field, leaves)
    return leaves


def check_field_leaves(reader: LanceFileReader, arrow_field: pa.Field, leaves: list[LeafPlan]) -> None:
    """The leaves of one field decode the same rows; list leaves have repetition levels."""
    rows = {leaf.num_rows for leaf in leaves}
    if len(rows) > 1:
        raise CorruptFileError(reader.path, f"leaves of field {arrow_field.name!r} hold different row counts {sorted(rows)}")
    for leaf in leaves:
        if any(layer in LIST_LAYERS for layer in leaf.layers) and not leaf.has_rep:
            raise CorruptFileError(reader.path, f"list column {leaf.column} without repetition levels")
