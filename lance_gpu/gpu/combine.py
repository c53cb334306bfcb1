# SPDX-License-Identifier: Apache-2.0
"""A read's pieces put into one set of buffers, allocated once for the whole read.

A GPU read decodes its fragments unit by unit; each fragment's columns are views into the
buffers of the unit that decoded it, and a deletion, take or filter selects rows of them on
the host (:class:`~lance_gpu.gpu.gathered.Gathered`: nothing gathered yet).
:func:`combine` takes, for every output column, the list of its *pieces* -- row ranges
``[lo, hi)`` of :class:`~lance_gpu.gpu.columns.DeviceColumn`s, or a selection's *runs* of
consecutive rows (``lo`` and ``hi`` arrays) -- in order, and writes them into final buffers
sized for the whole read, in one of two layouts:

``"cudf"`` (:class:`CudfColumn`, what :mod:`._cudf` wraps without a copy)
    fixed-width values as is (booleans one byte each: cuDF's BOOL8); string chars; offsets
    starting at 0, int32 where the column's total fits (int64 only beyond 2^31 - 1: cuDF's
    large strings); validity as uint32 bitmask words (Arrow's bit order), every column's
    mask padded to 64 bytes, with its null count; fixed-size lists as lists over their
    items (generated offsets ``i * dim``), the items' mask from the pieces' item validity
    (one layer of items: ``DeviceColumn.item_validity``); struct children with the parent's nulls
    superimposed (what ``cudf.DataFrame.from_arrow`` gives): what a decoded child's validity
    already is (Lance's definition levels: a struct's null is a null of every layer below
    it; ``DeviceColumn.children_hold_nulls``), else a child's mask is AND-ed with its
    parent's in the arena (``cuda_kernels.pieces.and_bitmask_segments_gpu``, one launch per
    struct depth, after the packs), its nulls counted there.
``"device"`` (:class:`DeviceColumn`, for :meth:`LanceScanner.to_device_batches` batches
    that straddle fragments)
    the device column layout: int64 offsets from 0; validity as the same bitmask words
    (a :class:`~lance_gpu.gpu.validity.Validity` of words from bit 0 of the column's own
    64-byte slot of the bitmask arena, or of the run the unravel wrote, as below; a
    fixed-size list's item validity the same way).

Validity pieces: a piece's rows land at any row of its output column (its row start need
not be a multiple of 32), so its bits are placed by shifting: every destination word of a
piece is OR-ed (atomically) into the zeroed arena from the source bits it covers, and words
shared by two pieces get both.  A piece's source is its column's validity as held
(:meth:`Validity.source`): bitmask words at a bit offset (read as the bitmap they are in
memory: at most five bytes per destination word) or bool bytes; a piece without validity
is an all-valid run; ``cuda_kernels.pieces.pack_bitmask_segments_gpu`` takes all three,
by segment, and adds the nulls to the column's counter.

Written once where it can be: a column whose pieces' values are one run of bytes of one
buffer (fixed width: from a 64-byte boundary) is that run, as the decode wrote it, and a
column whose pieces' validity is one run of bits from a 64-byte boundary of one buffer,
room for its padded mask, null counts known, is those words (a struct's child in the cudf
layout only where every piece's struct says its children hold its nulls; a struct's mask
so taken is packed into the arena too only where a child's mask is AND-ed with it).  That is what a
read decoded in one unit with no gather gives: the unit places each column's leaves of its
fragments one after the other (:func:`lance_gpu.gpu.read._columns`), the string bytes
follow their slots, and the level unravel writes the validity of a column's leaves without
repetition levels as consecutive bits of one slot (``cuda_kernels.LevelSegment.run``).  A
string, binary, list or map column whose pieces are the unit's column of every fragment,
whole and in order, takes the int32 offsets from 0 that the decode wrote for it
(``DeviceColumn.cudf_offsets``: strings' in the validation launch,
:class:`lance_gpu.gpu.decode.CudfOffsets`; lists' by the level unravel, which numbers a
column's entries over its fragments, ``unravel_segments_gpu(cudf=True)``).  So a one-unit
read with no gather packs no mask of a column the device decoded, structs' and their
children's included.  The
offsets of every column of a selection (deletions, filters, takes), and fixed-size lists'
generated ones, are written here, and a selection's masks are packed, as below; a read of
several units with no gather has its offsets and masks written once but for what the
next paragraph lists.

A read of several units with no gather, for ``to_cudf`` (``scan_device(whole_read=True)``),
has its fixed-width values written once too: every unit decodes them into one *read fixed
arena* allocated before the first unit, each column's leaves of every fragment one after
the other from a 64-byte aligned start (:func:`lance_gpu.gpu.read._place_read_fixed`: a
leaf's value count is known on the host before any unit decodes), so a fixed-width
column's pieces are one run of it (:func:`_one_run`): values, booleans, list items, struct
children and fixed-size lists' items, copied by no launch; and the unravel of every
unit writes the validity of the columns whose leaves have no repetition levels (flat
columns, strings, structs' layers and their children's) into one zeroed *read mask arena*
at the unit's rows (:func:`lance_gpu.gpu.read._place_read_masks`,
``unravel_segments_gpu(words_into=...)``: the words two units share OR-ed), so their
masks are one run of bits (:func:`_mask_run`) with null counts known: packed by no launch,
nor counted on the device; and the check launch of every unit writes the int32 offsets of
its string and binary columns (lists' string items included) into one *read offsets
arena* at the unit's rows, shifted by the bytes of the column's earlier units (known on the
host when the unit launches: each unit's unravel reads its spans back;
``lance_gpu.gpu.read._ReadOffsets``, ``decode_unit(offsets_into=...)``), so they are the
column's offsets from 0 (:func:`_offsets_run`), rebased by no launch; the decode of
every unit writes its string and binary bytes (lists' string items, FSST and dictionary
strings, large_string included) into one *read bytes arena*, each column a region of its
own from a 64-byte boundary at the column's bytes so far (``lance_gpu.gpu.read._ReadBytes``,
``decode_unit(bytes_into=...)``: a unit's byte total per column comes back with its scan,
before its bytes are written; a region short of it grows the arena, the bytes so far copied
over), so a column's chars are one run of it (:func:`_one_run` in :meth:`_Builder._place`),
copied by no launch; and the unravel of
every unit writes the int32 offsets of its list and map layers and the bits of every layer
of its leaves with repetition levels (lists', maps', their items', structs' inside lists
and holding lists) into one *read lists arena* at the layer's entries of the earlier units,
the offsets shifted by the inner layer's earlier entries (both known on the host when the
unit launches: each unit's unravel reads its entry counts back;
:class:`lance_gpu.gpu.readlists.ReadLists`, ``unravel_segments_gpu(lists_into=...)``), so
a list column's offsets are one run of it from 0 (:func:`_offsets_run`, a slot that may be
longer than the column) and its masks one run of bits (:func:`_mask_run`) with null counts
known: rebased and packed by no launch.  (A read with a gather -- a filter, deletions, a
take -- keeps each unit's own buffers, and its selections are written here, as below.)
What such a read still has written here, and why:

* the string and binary bytes of a column some unit left out of the bytes arena (its
  leaves there not continuing the column's rows, or the unit's variable-width columns not
  tiling its value slots: not seen on pylance's files; the unit's bytes are then its own
  buffer's), copied (one batched copy per source allocation) for every unit, the arena's
  earlier ones too (and the offsets of a string column whose bytes over the read pass
  2^31 - 1: int64, cuDF's large strings);
* the offsets and masks of a list layer nested in another list whose slot the planner's
  level estimate sized (list pages whose level counts are in-band,
  ``LeafPlan.levels_pending``) where a unit's levels could pass it, and of a column once a
  unit's leaves of it do not continue its rows (a fragment the CPU decoded, a leaf without
  repetition levels): rebased / packed as in a read with a gather (one launch per unit's
  buffer), each unit's unravel having written them in slots of its own; likewise a list
  layer's offsets where the inner layer's entries over the read could pass 2^31 - 1, and
  the mask of a list layer whose kind cannot be null under a struct that is null in a
  unit (that unit's layer has no validity: packed, the struct's mask AND-ed in);
* a list column of no entries: its one offset (a generated segment);
* fixed-size lists' generated offsets ``i * dim``, kept here (as in any read): one
  generated segment per column, all of a read's in one rebase launch (not one per unit),
  4 bytes a row written with nothing read; the decode has no launch writing them (Lance
  stores no offsets for a fixed-size list) and would need one per unit, or staged
  descriptors per leaf, for the same bytes; and their items' masks (the decode's item
  validity is a byte per item, packed).

Selections are written once too, here, straight from the decode's buffers: a selection's
runs are pieces like any (their bytes copied, offsets rebased, bits packed: a descriptor per
run), except where its runs are short (fewer than 16 rows each on average, :func:`_short`):
then its rows are written by position, the selection's row positions one column of the work
table, shared by its columns, and a descriptor per column piece (a fragment's rows of a
column), not per run:

* fixed-width values and validity bits gathered
  (``cuda_kernels.pieces.gather_rows_segments_gpu`` / ``gather_bits_segments_gpu``; a
  piece's choice its own);
* string, binary, list and map offsets and string / binary bytes (:class:`_ByPos`; the
  choice made per column over its gathered pieces, so a column's pieces take one way and
  an allocation gets one launch of a kind): each selected row's offset is its source offset
  plus a *delta*, the bytes / items of the runs before its run less that run's first source
  offset (one value per row in a second work-table column, 8 bytes a row), rebased in the
  same launch as the plain segments of its allocation
  (``rebase_offsets_segments_gpu(pos=...)``), and its bytes copied to where that offset
  says (``cuda_kernels.pieces.gather_var_segments_gpu``, one launch per pair of offsets and
  bytes allocations, a thread or a warp per row); a list's items are then the child's
  selection of the runs ``[offsets[lo], offsets[hi])`` of its runs, written as any runs
  (consecutive rows of one list are consecutive items; nested lists alike, depth by depth).

What is still per run: the deltas come from the byte / item bounds of every run, read back
in the per-depth readback below (gathered by position, 16 bytes a run), which a list's
child needs anyway; a selection of long runs (16 rows or more on average) is copied,
rebased and packed run by run, a descriptor per run; and a list's items, a selection of
runs of the child, go by position only where those runs are short in turn.

Buffers: one values arena (uint8: every copied column's data, 64-byte aligned slots), one
int32 and one int64 offsets arena, one zeroed bitmask arena, one array of null counters.  Work: per
*source allocation* (the pool block a piece's buffer lives in, found by
``cuda_kernels._device.allocation_of``) one batched byte copy, one offsets rebase
(``cuda_kernels.pieces.rebase_offsets_segments_gpu``) per offset width, one bitmask
pack (words and bytes alike) and, for selections of short runs, one row gather, one
bit gather and one string gather (by position; their offsets join the rebase of their
allocation), so the launches grow with the allocations the pieces come
from (a handful per read unit), not with fragments, columns, pages or selections.  Readbacks: the null
counts, once, only where a piece's count is not known on the host (a selection's never is);
and, per nesting depth, the offsets bounding pieces whose span the host does not know (row
ranges cut out of a column, a selection's runs), in one copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np
import pyarrow as pa

import cuda_kernels as ck
from cuda_kernels import _device
from cuda_kernels.errors import deferred_errors
from cuda_kernels.pieces import (
    and_bitmask_segments_gpu,
    gather_bits_segments_gpu,
    gather_rows_segments_gpu,
    gather_var_segments_gpu,
    pack_bitmask_segments_gpu,
    rebase_offsets_segments_gpu,
)
from lance_gpu.file.jsonb import jsonb_to_text
from lance_gpu.gpu import _array, decode
from lance_gpu.gpu._array import DeviceArray
from lance_gpu.gpu.columns import DeviceColumn, _is_var, _storage, fsl_layer_items
from lance_gpu.gpu.gathered import Gathered
from lance_gpu.gpu.plan import Unsupported, leaf_kind
from lance_gpu.gpu.validity import Validity
from lance_gpu.gpu.worktable import pack_columns

LAYOUTS = ("cudf", "device")
_ALIGN = 64  # bytes: every buffer of the values arena, every column's bitmask

#: a row range ``[lo, hi)`` of a column; or *runs* of its rows, ``lo`` and ``hi`` int64
#: arrays of equal length: the rows ``concat(arange(lo[k], hi[k]))`` (a gather whose positions
#: the host knows, :class:`lance_gpu.gpu.gathered.Gathered`: its rows written once, here)
Piece = tuple[DeviceColumn, Any, Any]


def _is_runs(lo: object) -> bool:
    """A piece's ``lo`` that is runs (arrays) rather than one row range."""
    return isinstance(lo, np.ndarray)


def _count(lo, hi) -> int:
    """The rows of a piece (a range or runs), the bytes of a bounds pair alike."""
    return int((hi - lo).sum()) if isinstance(lo, np.ndarray) else int(hi - lo)


def _before(k: np.ndarray) -> np.ndarray:
    """The exclusive prefix sums of ``k``: where each run lands after the ones before it."""
    out = np.zeros(k.size, np.int64)
    if k.size > 1:
        np.cumsum(k[:-1], out=out[1:])
    return out


def _short(runs: int, rows: int) -> bool:
    """Whether a selection's runs are short enough (fewer than 16 rows each, on average)
    that its rows are gathered by position (a position per row, shared by its columns, and
    a descriptor per column) rather than copied run by run (a descriptor per run and column)."""
    return rows < 16 * runs


class _ByPos(NamedTuple):
    """A gathered piece of a string, binary, list or map column whose runs are short
    (:func:`_short`), written by position: its ``n`` rows are rows ``first ..`` of the
    positions column (shared by the selection's columns), each moved by its own entry
    ``dfirst ..`` of the *delta* column (the piece's, 8 bytes a row): a row's source offset
    plus its delta is its offset among the piece's rows (the bytes / items of the runs before
    its run, :func:`_bounds`' per-run bounds).  ``total``: the piece's bytes / items;
    ``offsets``: the column's source offsets (int64); ``b0``, ``span``: its runs' first source
    offsets and bytes / items (for copying its bytes run by run after all, :func:`_merge_generated`)."""

    first: int
    dfirst: int
    n: int
    total: int
    offsets: Any
    b0: np.ndarray
    span: np.ndarray


def _flat(column: list) -> Any:
    """A work list column as one int64 array where some of its entries are arrays (runs)."""
    if not any(isinstance(v, np.ndarray) for v in column):
        return column
    return np.concatenate([np.asarray(v, np.int64).reshape(-1) for v in column]) if column else np.zeros(0, np.int64)


@dataclass(slots=True, eq=False)
class CudfColumn:
    """One column in cuDF's layout (see the module docstring); every buffer is a view of the
    read's arenas.  ``type`` is the Arrow type of the column (fixed-size lists included:
    their ``children[0]`` holds the items and ``offsets`` the generated ``i * dim``)."""

    type: pa.DataType
    length: int
    data: DeviceArray | None = None  # uint8 values / chars
    offsets: DeviceArray | None = None  # int32 (int64 beyond 2^31 - 1), length + 1, from 0
    mask: DeviceArray | None = None  # uint32 bitmask words, padded to 64 bytes; None: no nulls
    null_count: int = 0
    children: list[CudfColumn] = field(default_factory=list)
    #: a column of a type with no device layout (null-typed, Arrow dictionaries), kept as the
    #: CPU reader gave it (cuDF gets it through ``cudf.Series.from_arrow``); no buffers then
    host: pa.Array | None = None

    def to_arrow(self, fetch: Callable[[Any], np.ndarray] = _array.to_host) -> pa.Array:
        """A host copy in the Arrow type (the buffers as handed to cuDF, checked without it).

        ``fetch`` copies a device buffer (a view of one of the column's buffers) to the
        host: by default one copy each; :func:`lance_gpu.gpu.readback.result_to_arrow`
        passes views of the read's allocations, each read back once.  Booleans (cuDF's
        BOOL8, a byte each) are packed into Arrow's bits on the host: no launch."""
        if self.host is not None:
            return self.host
        t = self.type
        s = _storage(t)
        n = self.length
        mask = pa.py_buffer(fetch(self.mask).view(np.uint8)) if self.mask is not None else None
        if pa.types.is_struct(s):
            arr = pa.Array.from_buffers(s, n, [mask], children=[c.to_arrow(fetch) for c in self.children])
        elif pa.types.is_fixed_size_list(s):
            arr = pa.Array.from_buffers(s, n, [mask], children=[self.children[0].to_arrow(fetch)])
        elif pa.types.is_list(s) or pa.types.is_large_list(s) or pa.types.is_map(s):
            offs = fetch(self.offsets)
            offs = offs.astype(np.int64 if pa.types.is_large_list(s) else np.int32)
            arr = pa.Array.from_buffers(s, n, [mask, pa.py_buffer(offs)], children=[self.children[0].to_arrow(fetch)])
        elif _is_var(s):
            offs = fetch(self.offsets).astype(np.int64)
            data = fetch(self.data[: int(offs[-1])]) if self.data is not None and n and offs[-1] else np.zeros(0, np.uint8)
            big = pa.large_string() if pa.types.is_string(s) or pa.types.is_large_string(s) or pa.types.is_string_view(s) else pa.large_binary()
            arr = pa.Array.from_buffers(big, n, [mask, pa.py_buffer(offs), pa.py_buffer(data)]).cast(s)
        elif pa.types.is_boolean(s):
            raw = fetch(self.data[:n]) if n and self.data is not None else np.zeros(0, np.uint8)
            arr = pa.Array.from_buffers(s, n, [mask, pa.py_buffer(np.packbits(raw != 0, bitorder="little"))])
        else:
            w = s.bit_width // 8
            arr = pa.Array.from_buffers(s, n, [mask, pa.py_buffer(fetch(self.data[: n * w]) if n and self.data is not None else np.zeros(0, np.uint8))])
        if getattr(t, "extension_name", None) == "arrow.json":
            arr = jsonb_to_text(arr.cast(pa.large_binary()), "<device column>").cast(s)
        return arr if s is t else pa.ExtensionArray.from_storage(t, arr)


class _Out:
    """An output column being planned: where its buffers go in the arenas."""

    __slots__ = ("children", "counter", "data", "depth", "holds", "inner_items", "items", "length", "mask", "mask_view", "nulls",
                 "offsets", "offsets_view", "span", "type", "unknown", "vpieces")

    def __init__(self, t: pa.DataType, length: int) -> None:
        self.type = t
        self.length = length
        #: (buffer, byte position, bytes): the buffer None is the values arena; else the
        #: pieces' own buffer, which holds the column's values as one run (:func:`_one_run`)
        self.data: tuple[DeviceArray | None, int, int] | None = None
        self.offsets: tuple[int, int] | None = None  # (4 | 8 bytes, first item) in an offsets arena
        self.offsets_view: DeviceArray | None = None  # or the int32 offsets the decode wrote (:func:`_offsets_run`)
        self.mask: int | None = None  # first word of the validity in the bitmask arena
        self.mask_view: DeviceArray | None = None  # or its words as the unravel wrote them (:func:`_mask_run`)
        self.nulls = 0  # nulls known on the host
        self.counter = -1  # null counter on the device (-1: no validity)
        self.unknown = False  # the null count is not known on the host (cudf: counted on the device)
        self.span = 0  # offsets[length] (bytes or child items)
        self.children: list[_Out] = []
        self.depth = 0  # struct children of a column with a mask: their parent's + 1
        self.items: _Out | None = None  # a fixed-size list's items (their validity: cudf children[0], device item_validity)
        #: a nested fixed-size list's deeper layers' items (cudf: children[0].children[0] and
        #: down; device: inner_item_validity), None for a layer no piece has validity of
        self.inner_items: list[_Out | None] = []
        #: a struct's: every piece's children hold its nulls (``DeviceColumn.children_hold_nulls``)
        self.holds = False
        #: a struct's validity pieces where its mask is a view (``mask_view``): packed into the
        #: arena only if a child's mask is AND-ed with it (:meth:`_Builder._parent_mask`)
        self.vpieces: Sequence[tuple[_Slots, Any, Any]] = ()


class _Slots(Protocol):
    """What placing validity reads of a piece's column (a :class:`DeviceColumn`, or a
    fixed-size list's items: :class:`_ItemSlots`)."""

    validity: Validity | None
    length: int
    _nulls: int | None


def _layer_validity(col: DeviceColumn, k: int) -> Validity | None:
    """The validity of fixed-size list layer ``k``'s items of ``col`` (0: ``item_validity``)."""
    if k == 0:
        return col.item_validity
    return col.inner_item_validity[k - 1] if k - 1 < len(col.inner_item_validity) else None


class _ItemSlots:
    """What :meth:`_Builder._validity` reads of a fixed-size list's items of layer ``k``
    (0: the outer list's): their validity (:func:`_layer_validity`) over ``length * per``
    slots, nulls not known on the host."""

    __slots__ = ("_nulls", "length", "validity")

    def __init__(self, col: DeviceColumn, per: int, k: int = 0) -> None:
        self.validity: Validity | None = _layer_validity(col, k)
        self.length = col.length * per
        self._nulls: int | None = None


def _loc(arr) -> tuple[object, DeviceArray, int]:
    return _device.allocation_of(arr)


def _extent(arr) -> tuple[object, DeviceArray, int, int, int]:
    """``(key, whole, offset)`` of :func:`cuda_kernels._device.allocation_of` and the bytes
    ``[lo, hi)`` of ``whole`` that the buffer ``arr`` is a view of spans: on a GPU the
    allocation found may be a pool block holding other arrays, and a run viewed as one array
    must lie in one buffer (the view keeps that buffer alive, and only that one).  Under the
    simulator the allocation is the buffer."""
    key, whole, off = _loc(arr)
    size = int(whole.shape[0])
    owner = getattr(getattr(arr, "gpu_data", None), "owner", None)
    if owner is None or _device.is_simulator():  # the allocation itself (numba's, or the simulator's)
        return key, whole, off, 0, size
    cai = getattr(owner, "__cuda_array_interface__", None)
    if cai is None:  # not known: the array's own bytes only
        return key, whole, off, off, off + int(arr.nbytes)
    lo = int(cai["data"][0]) - int(whole.__cuda_array_interface__["data"][0])
    return key, whole, off, lo, lo + int(owner.nbytes)


def _one_run(runs: Sequence[tuple[DeviceArray, int, int]], aligned: bool) -> tuple[DeviceArray, int] | None:
    """``(whole, first byte)`` where the ``(array, first byte, bytes)`` ``runs`` are one run
    of bytes of one buffer (each starting where the one before ends; with ``aligned`` the
    run starts at a multiple of 64 bytes of the allocation), else None."""
    first: tuple[object, DeviceArray, int, int, int] | None = None
    start = end = 0
    for arr, lo, k in runs:
        if k <= 0:
            continue
        ext = _extent(arr)
        at = ext[2] + lo
        if first is None:
            first, start = ext, at
        elif ext[0] != first[0] or ext[3:] != first[3:] or at != end:
            return None
        end = at + k
    if first is None or end > first[4] or (aligned and start % _ALIGN):
        return None
    return first[1], start


def _mask_run(pieces: Sequence[tuple[_Slots, Any, Any]], n: int) -> DeviceArray | None:
    """A column's mask as it is (``_mask_words(n)`` words), where its pieces' validity is
    one run of bits of one buffer from bit 0 of a 64-byte block that holds the padded mask:
    what the unravel writes for a column's leaves of one unit (``LevelSegment.run``); else
    None (the pieces' bits are packed into the bitmask arena)."""
    first: tuple[object, DeviceArray, int, int, int] | None = None
    start = end = 0
    for col, lo, hi in pieces:
        if _is_runs(lo):
            return None
        if hi == lo:
            continue
        if col.validity is None:
            return None
        src, bit, words = col.validity.source()
        if not words:
            return None
        ext = _extent(src)
        at = 8 * ext[2] + bit + lo
        if first is None:
            first, start = ext, at
        elif ext[0] != first[0] or ext[3:] != first[3:] or at != end:
            return None
        end = at + hi - lo
    nbytes = 4 * _mask_words(n)
    if first is None or start % (8 * _ALIGN) or start // 8 < first[3] or start // 8 + nbytes > first[4]:
        return None
    return first[1][start // 8 : start // 8 + nbytes].view(np.uint32)


def _offsets_run(pieces: Sequence[Piece], n: int) -> DeviceArray | None:
    """A column's int32 offsets from 0 as the decode wrote them (``DeviceColumn.cudf_offsets``:
    strings' by the check launch, lists' by the level unravel), where its non-empty pieces
    are whole columns whose rows in one unit column's offsets follow one another from row 0
    to the last (a one-unit read with no gather: the unit's column of every fragment; a
    read of several units: the column's slot of a read arena, which may hold more entries
    than the column has, a list layer's slot being sized by a bound); else None (the
    offsets are rebased here)."""
    whole: DeviceArray | None = None
    where = None
    row = 0
    for col, lo, hi in pieces:
        if _is_runs(lo):
            return None
        if hi == lo:
            continue
        got = col.cudf_offsets
        if got is None or lo or hi != col.length or got[1] != row:
            return None
        at = (*_loc(got[0])[::2], int(got[0].shape[0]))  # (allocation, byte offset, entries): the same view
        if whole is not None and at != where:
            return None
        whole, where = got[0], at
        row += hi - lo
    if whole is None or row != n or int(whole.shape[0]) < n + 1 or np.dtype(whole.dtype) != np.int32:
        return None
    return whole[: n + 1]


def _loc64(arr) -> tuple[object, DeviceArray, int]:
    """(key, whole allocation as int64, item offset) of an int64 device array."""
    key, whole, off = _device.allocation_of(arr)
    if off % 8 or int(whole.shape[0]) % 8:
        dev = _device.to_device(arr)
        return ("own", id(dev)), dev, 0
    return key, whole.view(np.int64), off // 8


class _Builder:
    def __init__(self, layout: str) -> None:
        if layout not in LAYOUTS:
            msg = f"layout must be one of {LAYOUTS}, not {layout!r}"
            raise ValueError(msg)
        self.cudf = layout == "cudf"
        self.values = 0
        self.off = {4: 0, 8: 0}  # items of the int32 / int64 offsets arenas
        self.valid = 0  # words of the bitmask arena
        self.counters = 0
        self.unknown_nulls = False
        self.copies: dict[object, list] = {}  # key -> [whole, src, len, dst] (values arena)
        self.rebase: dict[tuple[object, int], list] = {}  # (key, width) -> [whole64, at, n, base, shift, stride, dst]
        # key -> [whole, at (a byte, or a bit where bits), n, dst bit, column, bits (1: the source
        # is words), destination words (scanned with the work table: the launch's threads)]
        self.masks: dict[object, list] = {}
        # cudf: depth -> [None, dst word, src word, words, column]: struct children's masks AND
        # their parent's (after the packs, a launch per depth, outer first)
        self.ands: dict[int, list] = {}
        # selections of short runs, gathered by their rows' positions (one column of the work
        # table, shared by the pieces of one selection: ``pos_at``, by the runs' bytes):
        # key -> [whole, at (a byte), first position, width, dst byte, bytes] (values arena)
        self.gathers: dict[object, list] = {}
        # key -> [whole, at (a byte, or a bit where bits), first position, n, dst bit, column, bits, words]
        self.gbits: dict[object, list] = {}
        self.pos: list[np.ndarray] = []
        self.npos = 0
        self.pos_at: dict[bytes, int] = {}
        # string / binary / list pieces of short runs written by position (:class:`_ByPos`):
        # the rows' deltas (one column of the work table, a piece's rows one after the other);
        # their offsets, (key, width) -> the rebase's columns and [first position, first delta]
        # (:meth:`_rebase_pos`); their bytes, (key of the offsets, of the bytes) ->
        # [whole offsets (int64), offsets' item, bytes' byte, first position, first delta, rows,
        # dst byte] and [whole bytes, bytes copied, the bytes' array, its (piece, dst byte)s] (:meth:`_gather_var`)
        self.delta: list[np.ndarray] = []
        self.ndelta = 0
        self.prebase: dict[tuple[object, int], list] = {}
        self.vgathers: dict[tuple[object, object], list] = {}
        self.vsrc: dict[tuple[object, object], list] = {}

    # -- slots ------------------------------------------------------------------------------

    def _positions(self, lo: np.ndarray, hi: np.ndarray) -> int:
        """The first item of the rows of the runs ``[lo, hi)`` in the positions column (added
        once per selection: its columns' pieces share them)."""
        key = lo.tobytes() + hi.tobytes()
        at = self.pos_at.get(key)
        if at is None:
            k = hi - lo
            rows = np.arange(int(k.sum()), dtype=np.int64) + np.repeat(lo - _before(k), k)
            at = self.pos_at[key] = self.npos
            self.pos.append(rows)
            self.npos += rows.size
        return at

    def _by_position(self, col: DeviceColumn, lo: np.ndarray, hi: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> _ByPos:
        """A gathered piece (runs ``[lo, hi)``, their offsets' bounds ``b0``, ``b1``) of a
        string / binary / list column, its rows by position: the positions of the selection
        (shared) and each row's delta, the bytes / items of the runs before its run less its
        run's first source offset (every row of a run moves alike)."""
        k = hi - lo
        span = b1 - b0
        delta = np.repeat(_before(span) - b0, k)
        at = self.ndelta
        self.delta.append(delta)
        self.ndelta += delta.size
        return _ByPos(self._positions(lo, hi), at, int(k.sum()), int(span.sum()), col.offsets, b0, span)

    def _rebase_pos(self, width: int, bp: _ByPos, shift: int, dst: int) -> None:
        """The offsets of a piece by position (:class:`_ByPos`) at ``dst`` of the ``width``
        arena: a row's source offset plus its delta plus ``shift`` (the column's bytes / items
        before the piece)."""
        key, whole, off = _loc64(bp.offsets)
        entry = self.prebase.setdefault((key, width), [whole, [], [], [], [], [], [], [], []])
        for k, v in enumerate((off, bp.n, 0, shift, 0, dst, bp.first, bp.dfirst), start=1):
            entry[k].append(v)

    def _gather_var(self, arr, bp: _ByPos, dst: int) -> None:
        """The bytes of a string / binary piece by position (:class:`_ByPos`, ``arr`` its
        column's bytes) to byte ``dst`` of the values arena (the piece's first byte)."""
        if not bp.total:
            return
        okey, owhole, ooff = _loc64(bp.offsets)
        key, whole, off = _loc(arr)
        entry = self.vgathers.setdefault((okey, key), [owhole, [], [], [], [], [], []])
        src = self.vsrc.setdefault((okey, key), [whole, 0, arr, []])
        src[1] += bp.total
        src[3].append((bp, dst))
        for k, v in enumerate((ooff, off, bp.first, bp.dfirst, bp.n, dst), start=1):
            entry[k].append(v)

    def _values(self, nbytes: int) -> int:
        at = self.values
        self.values = at + -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        return at

    def _offsets(self, width: int, n: int) -> int:
        at = self.off[width]
        self.off[width] = at + n + 1
        return at

    def _place(self, runs: list[tuple[DeviceArray, Any, Any]], nbytes: int, aligned: bool,
               width: int = 0) -> tuple[DeviceArray | None, int, int]:
        """Where a column's ``nbytes`` of values go (:attr:`_Out.data`), ``runs`` being its
        pieces' ``(array, first byte, bytes)`` in order: where they are one run of one buffer
        (starting 64 bytes into it when ``aligned``: fixed width), that run as it is (written
        once, by the decode: a one-unit read with no gather, whose unit placed each column's
        leaves one after the other, :func:`lance_gpu.gpu.read._columns`); else a slot of the
        values arena, each run copied there."""
        gathered = any(_is_runs(k) or isinstance(lo, _ByPos) for _arr, lo, k in runs)
        run = None if gathered else _one_run(runs, aligned)
        if run is not None:
            return run[0], run[1], nbytes
        at = self._values(nbytes)
        done = 0
        for arr, lo, k in runs:
            if isinstance(lo, _ByPos):  # a string piece's rows, by position
                self._gather_var(arr, lo, at + done)
                done += lo.total
                continue
            if _is_runs(k):  # a gathered piece's runs, one after the other
                if width and _short(lo.size, int(k.sum()) // width):  # rows of fixed width, by position
                    self._gather(arr, lo // width, (lo + k) // width, width, at + done)
                else:
                    self._copy(arr, lo, k, at + done + _before(k))
                done += int(k.sum())
                continue
            self._copy(arr, lo, k, at + done)
            done += k
        return None, at, nbytes

    def _copy(self, arr, lo_byte, nbytes, dst) -> None:
        """Copy ``nbytes`` from byte ``lo_byte`` of ``arr`` to byte ``dst`` of the values
        arena (scalars, or arrays: a gathered piece's runs)."""
        if _is_runs(nbytes):
            keep = nbytes > 0
            lo_byte, nbytes, dst = lo_byte[keep], nbytes[keep], dst[keep]
            if not nbytes.size:
                return
        elif nbytes <= 0:
            return
        key, whole, off = _loc(arr)
        entry = self.copies.setdefault(key, [whole, [], [], []])
        entry[1].append(off + lo_byte)
        entry[2].append(nbytes)
        entry[3].append(dst)

    def _gather(self, arr, lo: np.ndarray, hi: np.ndarray, width: int, dst: int) -> None:
        """The rows of the runs ``[lo, hi)`` of ``width`` bytes each of ``arr`` (from its first
        byte) gathered by position to byte ``dst`` of the values arena."""
        total = int((hi - lo).sum())
        if not total:
            return
        key, whole, off = _loc(arr)
        entry = self.gathers.setdefault(key, [whole, [], [], [], [], []])
        for k, v in enumerate((off, self._positions(lo, hi), width, dst, total * width), start=1):
            entry[k].append(v)

    def _rebase(self, width: int, offsets, lo, n, base, shift, dst) -> None:
        """Offsets ``lo ..`` of ``offsets`` (``n`` of them) less ``base`` plus ``shift`` at
        ``dst`` of the ``width`` arena (scalars, or arrays: a gathered piece's runs)."""
        stride: Any = 0
        if _is_runs(n):
            keep = n > 0
            lo, n, base, shift, dst = lo[keep], n[keep], base[keep], shift[keep], dst[keep]
            if not n.size:
                return
            stride = np.zeros(n.size, np.int64)
        elif n <= 0:
            return
        key, whole, off = _loc64(offsets)
        entry = self.rebase.setdefault((key, width), [whole, [], [], [], [], [], []])
        for k, v in enumerate((off + lo, n, base, shift, stride, dst), start=1):
            entry[k].append(v)

    def _arith(self, width: int, n: int, shift: int, stride: int, dst: int) -> None:
        """Offsets ``shift + i * stride`` for ``i < n`` at ``dst`` (no source)."""
        entry = self.rebase.setdefault(("generated", width), [None, [], [], [], [], [], []])
        for k, v in enumerate((-1, n, 0, shift, stride, dst), start=1):
            entry[k].append(v)

    # -- validity ---------------------------------------------------------------------------

    def _validity(self, out: _Out, pieces: Sequence[tuple[_Slots, Any, Any]], parent: _Out | None = None) -> None:
        """Place the column's validity (pieces' bits at their output rows) in the bitmask
        arena, or take it as it is where the pieces' bits already are the column's mask (a
        run the unravel wrote, :func:`_mask_run`; structs too).  In the cudf layout a
        struct's child whose parent has a mask gets one too, null where the parent is: as
        it is where the parent's pieces' children hold their nulls (``holds``: what the
        unravel writes, Lance's definition levels) and the child's bits are such a run;
        else AND-ed with the parent's after the packs (its nulls then counted on the
        device; a parent whose mask is a view is packed into the arena for it)."""
        known = 0
        unknown = False
        for col, lo, hi in pieces:
            if col.validity is None or not _count(lo, hi):
                continue
            if not _is_runs(lo) and lo == 0 and hi == col.length and col._nulls is not None:
                known += col._nulls
            else:
                unknown = True
        inherit = (self.cudf and parent is not None and pa.types.is_struct(_storage(parent.type))
                   and (parent.mask is not None or parent.mask_view is not None))
        if not unknown and not known and not inherit:
            return
        n = out.length
        if not unknown and (not inherit or (parent is not None and parent.holds)):
            out.mask_view = _mask_run(pieces, n)
            if out.mask_view is not None:
                out.nulls = known
                out.vpieces = pieces
                return
        if inherit:
            unknown = True
        self._pack(out, pieces, known, unknown)
        if inherit:
            assert parent is not None
            src = self._parent_mask(parent)
            out.depth = parent.depth + 1
            job = self.ands.setdefault(out.depth, [None, [], [], [], []])
            for j, v in enumerate((out.mask, src, _mask_words(n), out.counter), start=1):
                job[j].append(v)

    def _parent_mask(self, parent: _Out) -> int:
        """The first word of a struct's mask in the arena, its pieces packed there where its
        mask is a view (its nulls known: the view's)."""
        if parent.mask is None:
            self._pack(parent, parent.vpieces, parent.nulls, False)
        assert parent.mask is not None
        return parent.mask

    def _pack(self, out: _Out, pieces: Sequence[tuple[_Slots, Any, Any]], known: int, unknown: bool) -> None:
        """A slot of the bitmask arena and a null counter for the column, and its pieces'
        bits packed there (a piece without validity: an all-valid run)."""
        n = out.length
        out.nulls = 0
        out.counter = self.counters
        self.counters += 1
        if unknown:
            out.unknown = True
            self.unknown_nulls = self.unknown_nulls or self.cudf  # the device layout counts lazily
        else:
            out.nulls = known
        out.mask = self.valid
        self.valid += _mask_words(n)
        row = 0
        for col, lo, hi in pieces:
            if _is_runs(lo):
                row += self._pack_runs(out, col, lo, hi, row)
                continue
            k = hi - lo
            if not k:
                continue
            words = False
            if col.validity is None:
                entry = self.masks.setdefault("generated", [None, [], [], [], [], [], []])
                at = -1
            else:
                src, first, words = col.validity.source()
                key, whole, off = _loc(src)
                at = 8 * off + first + lo if words else off + lo  # a bit of the allocation, or a byte
                entry = self.masks.setdefault(key, [whole, [], [], [], [], [], []])
            d = 32 * out.mask + row
            for j, v in enumerate((at, k, d, out.counter, int(words), ((d + k - 1) >> 5) - (d >> 5) + 1), start=1):
                entry[j].append(v)
            row += k

    def _pack_runs(self, out: _Out, col: _Slots, lo: np.ndarray, hi: np.ndarray, row: int) -> int:
        """:meth:`_pack`'s segments of a gathered piece (runs ``[lo, hi)`` landing one after
        the other from output row ``row``); returns its rows.  Runs of a column without
        validity are one all-valid segment (their output rows are consecutive)."""
        k = hi - lo
        total = int(k.sum())
        if not total:
            return 0
        assert out.mask is not None
        if col.validity is None:
            entry = self.masks.setdefault("generated", [None, [], [], [], [], [], []])
            d0 = 32 * out.mask + row
            for j, v in enumerate((-1, total, d0, out.counter, 0, ((d0 + total - 1) >> 5) - (d0 >> 5) + 1), start=1):
                entry[j].append(v)
            return total
        src, first, words = col.validity.source()
        key, whole, off = _loc(src)
        if _short(lo.size, total):  # one segment, its rows' bits gathered by position
            d0 = 32 * out.mask + row
            g = self.gbits.setdefault(key, [whole, [], [], [], [], [], [], []])
            for j, v in enumerate((8 * off + first if words else off, self._positions(lo, hi), total, d0, out.counter, int(words),
                                   ((d0 + total - 1) >> 5) - (d0 >> 5) + 1), start=1):
                g[j].append(v)
            return total
        keep = k > 0
        d = (32 * out.mask + row + _before(k))[keep]
        lo, k = lo[keep], k[keep]
        at = 8 * off + first + lo if words else off + lo  # bits of the allocation, or bytes
        entry = self.masks.setdefault(key, [whole, [], [], [], [], [], []])
        m = k.size
        for j, v in enumerate((at, k, d, np.full(m, out.counter, np.int64), np.full(m, int(words), np.int64),
                               ((d + k - 1) >> 5) - (d >> 5) + 1), start=1):
            entry[j].append(v)
        return total

    # -- columns ----------------------------------------------------------------------------

    def plan(self, t: pa.DataType, pieces: Sequence[Piece], bounds: list[tuple[Any, Any]] | None,
             parent: _Out | None = None) -> tuple[_Out, list]:
        """Plan one column (a child of ``parent``); returns it and its children still to
        plan: ``(parent, type, pieces)`` triples (planned at the next depth, after their
        bounds)."""
        s = _storage(t)
        n = sum(_count(lo, hi) for _c, lo, hi in pieces)
        out = _Out(t, n)
        later: list = []
        if pa.types.is_struct(s):
            out.holds = all(getattr(col, "children_hold_nulls", False) for col, lo, hi in pieces if _count(lo, hi))
            self._validity(out, pieces, parent)
            for i in range(s.num_fields):
                child_pieces = [(col.children[i], lo, hi) for col, lo, hi in pieces]
                later.append((out, s.field(i).type, child_pieces))
            return out, later
        if pa.types.is_list(s) or pa.types.is_large_list(s) or pa.types.is_map(s) or _is_var(s):
            assert bounds is not None
            self._validity(out, pieces, parent)
            total = sum(_count(b0, b1) for b0, b1 in bounds)
            out.span = total
            width = 8 if not self.cudf or total > decode.OFFSETS32_MAX else 4
            # a column's gathered pieces go by position, or run by run, all alike: one launch of a kind per allocation
            gathered = [(lo.size, _count(lo, hi)) for _col, lo, hi in pieces if _is_runs(lo)]
            short = bool(gathered) and _short(sum(r for r, _n in gathered), sum(n for _r, n in gathered))
            bypos = [self._by_position(col, lo, hi, *bd) if short and _is_runs(lo) else None
                     for (col, lo, hi), bd in zip(pieces, bounds, strict=True)]
            out.offsets_view = _offsets_run(pieces, n) if self.cudf and width == 4 else None
            if out.offsets_view is None:
                first = self._offsets(width, n)
                out.offsets = (width, first)
                row = 0
                shift = 0
                for (col, lo, hi), (b0, b1), bp in zip(pieces, bounds, bypos, strict=True):
                    if bp is not None:  # short runs: the rows' offsets by position
                        self._rebase_pos(width, bp, shift, first + row)
                        row += bp.n
                        shift += bp.total
                        continue
                    if _is_runs(lo):  # a gathered piece: each run's offsets after the runs before it
                        k, span = hi - lo, b1 - b0
                        self._rebase(width, col.offsets, lo, k, b0, shift + _before(span), first + row + _before(k))
                        row += int(k.sum())
                        shift += int(span.sum())
                        continue
                    self._rebase(width, col.offsets, lo, hi - lo, b0, shift, first + row)
                    row += hi - lo
                    shift += b1 - b0
                self._arith(width, 1, total, 0, first + n)
            if _is_var(s):
                runs = [(col.data, b0, b1 - b0) if bp is None else (col.data, bp, None)
                        for (col, _lo, _hi), (b0, b1), bp in zip(pieces, bounds, bypos, strict=True)]
                out.data = self._place(runs, total, aligned=False)
            else:
                value_type = pa.struct([s.key_field, s.item_field]) if pa.types.is_map(s) else s.value_type
                child_pieces = [(col.children[0], b0, b1) for (col, _lo, _hi), (b0, b1) in zip(pieces, bounds, strict=True)]
                later.append((out, value_type, child_pieces))
            return out, later
        w = leaf_kind(t)[1]
        self._validity(out, pieces, parent)
        out.data = self._place([(col.data, lo * w, (hi - lo) * w) for col, lo, hi in pieces], n * w, aligned=True, width=w)
        if self.cudf and pa.types.is_fixed_size_list(s):
            self._fsl(out, s, n, out.data)
        if pa.types.is_fixed_size_list(s):
            self._item_validity(out, s, pieces)
        return out, later

    def _item_validity(self, out: _Out, s: pa.DataType, pieces: Sequence[Piece]) -> None:
        """A fixed-size list's item validity, layer by layer, each placed like a column's
        (a layer no piece has validity of: none): the items of rows ``[lo, hi)`` of a piece
        are its layer's item slots ``[lo * per, hi * per)`` (``per``: the layer's items per
        value).  In the cuDF layout each layer's is its list column's items' mask."""
        holder: _Out | None = out
        for k, per in enumerate(fsl_layer_items(s)):
            holder = holder.children[0] if holder is not None and holder.children else None
            if not any(_layer_validity(col, k) is not None for col, _lo, _hi in pieces):
                if k:
                    out.inner_items.append(None)
                continue
            items = holder if holder is not None else _Out(out.type, out.length * per)
            if k:
                out.inner_items.append(items)
            else:
                out.items = items
            self._validity(items, [(_ItemSlots(col, per, k), lo * per, hi * per) for col, lo, hi in pieces])

    def _fsl_items(self, s: pa.DataType, n: int, data: tuple[DeviceArray | None, int, int]) -> _Out:
        """The items of a fixed-size list in cuDF's list form (viewing the list's bytes,
        ``data``); the caller's column gets the generated offsets ``i * dim``."""
        dim = s.list_size
        if n * dim > decode.OFFSETS32_MAX:
            msg = "fixed-size list items beyond 2^31 - 1 do not fit cuDF's int32 list offsets"
            raise OverflowError(msg)
        items = _Out(s.value_type, n * dim)
        items.data = (data[0], data[1], n * dim * leaf_kind(s.value_type)[1])
        vs = _storage(s.value_type)
        if pa.types.is_fixed_size_list(vs):
            self._fsl(items, vs, n * dim, data)
        return items

    def _fsl(self, out: _Out, s: pa.DataType, n: int, data: tuple[DeviceArray | None, int, int]) -> None:
        first = self._offsets(4, n)
        out.offsets = (4, first)
        self._arith(4, n + 1, 0, s.list_size, first)
        out.children.append(self._fsl_items(s, n, data))



def _bounds(levels: list[tuple[pa.DataType, list[Piece]]]) -> list[list[tuple[Any, Any]] | None]:
    """The ``(offsets[lo], offsets[hi])`` of every piece of the variable-width and list
    columns of one depth (arrays for a gathered piece: each run's), from the spans the host
    knows, the rest in one readback."""
    out: list[list[tuple[Any, Any]] | None] = []
    wanted: list[tuple[DeviceColumn, np.ndarray]] = []  # (column, rows whose offsets are read back)
    nwanted = 0
    for t, pieces in levels:
        s = _storage(t)
        if not (pa.types.is_list(s) or pa.types.is_large_list(s) or pa.types.is_map(s) or _is_var(s)):
            out.append(None)
            continue
        got: list[tuple[Any, Any]] = []
        for col, lo, hi in pieces:
            if _is_runs(lo):
                got.append((-1 - nwanted, lo.size))  # placeholder: the runs' los, then their his
                rows = np.concatenate((lo, hi))
            elif lo == 0 and hi == col.length and col.span is not None:
                got.append(col.span)
                continue
            elif hi == lo and col.span is not None and lo in (0, col.length):
                edge = col.span[0] if lo == 0 else col.span[1]
                got.append((edge, edge))
                continue
            else:
                got.append((-1 - nwanted, None))  # placeholder: index into the readback
                rows = np.array([lo, hi], np.int64)
            wanted.append((col, rows))
            nwanted += rows.size
        out.append(got)
    if not nwanted:
        return out
    # one gather by position per allocation holding offsets (a handful per read), into one buffer
    groups: dict[object, list] = {}  # key -> [whole, byte of each column's offsets, their rows, first value]
    k = 0
    for col, rows in wanted:
        key, whole, off = _loc64(col.offsets)
        entry = groups.setdefault(key, [whole, [], [], []])
        entry[1].append(8 * off)
        entry[2].append(rows)
        entry[3].append(k)
        k += rows.size
    values = _array.empty(nwanted, np.int64)
    for whole, at, rows, dst in groups.values():
        sizes = np.array([r.size for r in rows], np.int64)
        gather_rows_segments_gpu(whole, np.concatenate(rows), at, _before(sizes), np.full(sizes.size, 8, np.int64), 8 * sizes,
                                 values.view(np.uint8), 8 * np.asarray(dst, np.int64))
    host = _array.to_host(values)
    for resolved in out:
        if resolved is None:
            continue
        for j, (first, m) in enumerate(resolved):
            if not (isinstance(first, (int, np.integer)) and first < 0):
                continue
            i = -1 - int(first)
            if m is None:
                resolved[j] = (int(host[i]), int(host[i + 1]))
            else:  # a gathered piece's runs
                resolved[j] = (host[i : i + m].astype(np.int64), host[i + m : i + 2 * m].astype(np.int64))
    return out


def combine(types: Sequence[pa.DataType], pieces: Sequence[Sequence[Piece]], layout: str = "cudf") -> list:
    """Every column ``i`` of type ``types[i]`` made of ``pieces[i]`` (row ranges of device
    columns, in order), written into buffers allocated once (see the module docstring).
    Returns :class:`CudfColumn`s (``layout="cudf"``) or :class:`DeviceColumn`s
    (``layout="device"``).  Call inside ``pinned_uploads()`` so the work lists go up
    asynchronously."""
    b = _Builder(layout)
    tops: list[_Out] = []
    level: list[tuple[_Out | None, pa.DataType, list[Piece]]] = [(None, t, list(p)) for t, p in zip(types, pieces, strict=True)]
    while level:
        bounds = _bounds([(t, p) for _parent, t, p in level])
        nxt: list = []
        for (parent, t, p), bd in zip(level, bounds, strict=True):
            out, later = b.plan(t, p, bd, parent)
            if parent is None:
                tops.append(out)
            else:
                parent.children.append(out)
            nxt.extend(later)
        level = nxt
    return _run(b, tops)


def _mask_words(n: int) -> int:
    """Words of a column's bitmask in the arena: ``n`` bits padded to 64 bytes."""
    return -(-max(n, 1) // 512) * 16


def _rebase_launch(src, entry: list, out) -> None:
    _at, n, base, shift, stride, dst = entry[1:7]
    rebase_offsets_segments_gpu(src, _at, n, base, shift, stride, out, dst)


def _run(b: _Builder, tops: list[_Out]) -> list:
    """Allocate the arenas and launch the combining work, whose descriptors go up as one
    work table (:func:`lance_gpu.gpu.worktable.pack_columns`) in one copy."""
    _merge_generated(b)
    positions = [np.concatenate(b.pos) if b.pos else np.zeros(0, np.int64)]
    deltas = [np.concatenate(b.delta) if b.delta else np.zeros(0, np.int64)]
    lists = [*b.copies.values(), *b.rebase.values(), *b.prebase.values(), *b.masks.values(), *b.ands.values(), *b.gathers.values(),
             *b.gbits.values(), *b.vgathers.values(), positions, deltas]
    whole = (positions, deltas)  # columns as they are (no source allocation first)
    cols = [(entry, k) for entry in lists for k in range(0 if any(entry is w for w in whole) else 1, len(entry))]
    for entry, k in cols:
        if not any(entry is w for w in whole):
            entry[k] = _flat(entry[k])
    scanned = [_is_length(entry, k, b) for entry, k in cols]
    host, views, scans = pack_columns([entry[k] for entry, k in cols], scanned)
    for (entry, k), v in zip(cols, views, strict=True):
        entry[k] = v
    b.pos = positions
    b.delta = deltas
    with _device.work_table(host, scans):
        return _launch(b, tops)


def _merge_generated(b: _Builder) -> None:
    """Sourceless offsets segments (the final offset of a column, fixed-size list offsets)
    and all-valid bitmask runs join a launch of their kind (or make one of their own), and
    the plain rebase of an allocation joins its rebase by position (one launch); string
    bytes by position whose allocation has a range copy anyway are copied run by run in it
    (a descriptor per run, no launch of their own; their offsets stay by position)."""
    for vkey in [k for k in b.vgathers if k[1] in b.copies]:  # (key of the offsets, key of the bytes)
        del b.vgathers[vkey]
        _whole, _n, arr, placed = b.vsrc.pop(vkey)
        for bp, dst in placed:
            b._copy(arr, bp.b0, bp.span, dst + _before(bp.span))
    for (key, w) in [k for k in b.rebase if k[0] == "generated"]:
        gen = b.rebase[(key, w)]
        other = next((e for (k2, w2), e in b.rebase.items() if k2 != "generated" and w2 == w), None)
        if other is not None:
            _extend_segments(other, gen)
            del b.rebase[(key, w)]
    for kw in [k for k in b.rebase if k in b.prebase]:  # one launch per allocation: plain segments join those by position
        plain = b.rebase.pop(kw)
        _join_plain(b.prebase[kw], plain)
    for (key, w) in [k for k in b.rebase if k[0] == "generated"]:  # else into a rebase by position
        other = next((e for (_k2, w2), e in b.prebase.items() if w2 == w), None)
        if other is not None:
            _join_plain(other, b.rebase.pop((key, w)))
    gen_mask = b.masks.get("generated")
    if gen_mask is not None:
        other = next((e for k2, e in b.masks.items() if k2 != "generated"), None)
        if other is not None:
            _extend_segments(other, gen_mask)
            del b.masks["generated"]


def _extend_segments(into: list, entry: list) -> None:
    """Append ``entry``'s segment columns (its items 1-6) to ``into``'s: one launch's work."""
    for k in range(1, 7):
        into[k].extend(entry[k])


def _join_plain(bypos: list, plain: list) -> None:
    """Append a rebase entry's segments to one by position (their ``first`` -1: not by position)."""
    _extend_segments(bypos, plain)
    m = sum(np.asarray(v).size for v in plain[2])  # a segment per count (a gathered piece's runs: arrays)
    bypos[7].append(np.full(m, -1, np.int64))
    bypos[8].append(np.zeros(m, np.int64))


def _is_length(entry: list, k: int, b: _Builder) -> bool:
    """Column ``k`` of a work entry is the lengths a wrapper scans (copies' byte counts,
    offsets segments' counts)."""
    if any(entry is e for e in b.copies.values()):
        return k == 2
    if any(entry is e for e in b.rebase.values()) or any(entry is e for e in b.prebase.values()):
        return k == 2
    if any(entry is e for e in b.ands.values()):
        return k == 3
    if any(entry is e for e in b.masks.values()):
        return k == 6
    if any(entry is e for e in b.gathers.values()):
        return k == 5
    if any(entry is e for e in b.gbits.values()):
        return k == 7
    if any(entry is e for e in b.vgathers.values()):
        return k == 5
    return False


def _launch(b: _Builder, tops: list[_Out]) -> list:
    values: DeviceArray = _array.empty(b.values, np.uint8) if b.values else None
    offsets = {w: _array.empty(n, np.int32 if w == 4 else np.int64) for w, n in b.off.items() if n}
    # the bitmask words and, after them, the null counters: one zeroed block (none where
    # every mask is a view and every null count known)
    valid: DeviceArray = None
    counters: DeviceArray = None
    if b.valid or b.counters:
        head = -(-max(b.valid, 1) * 4 // 8) * 8
        zeroed = _array.zeros(head + 8 * max(b.counters, 1), np.uint8)
        valid = zeroed[: max(b.valid, 1) * 4].view(np.uint32)
        counters = zeroed[head:].view(np.int64)
    for whole, src, nbytes, dst in b.copies.values():
        ck.copy_ranges_gpu(whole, src, nbytes, values, dst)
    for (key, w), entry in b.rebase.items():
        _rebase_launch(offsets[w] if key == "generated" else entry[0], entry, offsets[w])
    for (_key, w), entry in b.prebase.items():
        _at, n, base, shift, stride, dst, first, dfirst = entry[1:9]
        rebase_offsets_segments_gpu(entry[0], _at, n, base, shift, stride, offsets[w], dst, pos=b.pos[0], first=first, delta=b.delta[0],
                                    dfirst=dfirst)
    for key, (owhole, oat, dat, first, dfirst, n, dst) in b.vgathers.items():
        whole, nbytes = b.vsrc[key][:2]
        gather_var_segments_gpu(owhole, whole, b.pos[0], b.delta[0], oat, dat, first, dfirst, n, dst, values, nbytes=nbytes)
    for key, (whole, at, n, dst, column, bits, words) in b.masks.items():
        pack_bitmask_segments_gpu(valid.view(np.uint8) if key == "generated" else whole, at, n, dst, column, valid, counters, bits,
                                  words=words)
    for whole, at, first, width, dst, nbytes in b.gathers.values():
        gather_rows_segments_gpu(whole, b.pos[0], at, first, width, nbytes, values, dst)
    for whole, at, first, n, dst, column, bits, words in b.gbits.values():
        gather_bits_segments_gpu(whole, b.pos[0], at, first, n, dst, column, valid, counters, bits, words=words)
    for depth in sorted(b.ands):  # a child's parent is AND-ed with its own parent first
        _none, dst, src, n, column = b.ands[depth]
        and_bitmask_segments_gpu(valid, dst, src, n, column, counters)
    nulls = _array.to_host(counters) if b.unknown_nulls else None

    def make(o: _Out):
        if o.counter >= 0 and o.unknown and nulls is not None:
            o.nulls = int(nulls[o.counter])
        children = [make(c) for c in o.children]
        data = None
        if o.data is not None:
            buf, at, nbytes = o.data
            data = (values if buf is None else buf)[at : at + nbytes]
        offs = o.offsets_view if o.offsets is None else offsets[o.offsets[0]][o.offsets[1] : o.offsets[1] + o.length + 1]
        if b.cudf:
            mask = o.mask_view  # (a struct's view, packed too only as the source of its children's AND)
            if mask is None and o.mask is not None and o.nulls:
                mask = valid[o.mask : o.mask + _mask_words(o.length)]
            return CudfColumn(o.type, o.length, data, offs, mask, o.nulls if mask is not None else 0, children)
        known = o.counter < 0 or not o.unknown
        validity = None if o.mask_view is None else Validity.of_words(o.mask_view, 0, o.length)
        if validity is None and o.mask is not None and not (known and not o.nulls):
            validity = Validity.of_words(valid[o.mask : o.mask + _mask_words(o.length)], 0, o.length)
        span = None if o.offsets is None else (0, o.span)
        def words(items: _Out | None) -> Validity | None:
            if items is None or items.mask is None:
                return None
            return Validity.of_words(valid[items.mask : items.mask + _mask_words(items.length)], 0, items.length)

        inner = tuple(words(x) for x in o.inner_items)
        return DeviceColumn(o.type, o.length, validity, data, offs, children, _nulls=(o.nulls if known else None), span=span,
                            item_validity=words(o.items), inner_item_validity=inner if any(v is not None for v in inner) else ())

    return [make(o) for o in tops]


class ColumnsByName(Protocol):
    """What combining reads of a table of a read (``DeviceTable``): its columns by name, in
    order, as held (device columns, selections of them still to gather:
    :class:`~lance_gpu.gpu.gathered.Gathered`, or Arrow arrays the CPU reader decoded)."""

    names: list[str]
    raw_columns: list[Any]
    num_rows: int

    def raw_column(self, name: str) -> Any: ...


def combine_tables(tables: Sequence[ColumnsByName], schema: pa.Schema, layout: str = "cudf",
                   ranges: Sequence[tuple[int, int]] | None = None) -> list:
    """The columns of ``schema`` over the rows ``ranges[k]`` (default: all) of each of
    ``tables``, combined (:func:`combine`); columns the CPU reader decoded are uploaded."""
    if ranges is None:
        ranges = [(0, t.num_rows) for t in tables]
    device = [i for i, f in enumerate(schema) if _has_device_layout(f.type)]
    pieces: list[list[Piece]] = [[] for _ in device]
    for table, (lo, hi) in zip(tables, ranges, strict=True):
        for j, i in enumerate(device):
            col = _column(table, schema, i)
            if isinstance(col, Gathered):
                pieces[j].append(col.piece(lo, hi))
                continue
            if not isinstance(col, DeviceColumn):
                col = DeviceColumn.from_arrow(col)
            pieces[j].append((col, lo, hi))
    combined = dict(zip(device, combine([schema.field(i).type for i in device], pieces, layout), strict=True))
    out = []
    for i, f in enumerate(schema):
        if i in combined:
            out.append(combined[i])
            continue
        parts = [_column(table, schema, i) for table in tables]
        arr = pa.concat_arrays([p.slice(lo, hi - lo) for p, (lo, hi) in zip(parts, ranges, strict=True)]) if parts else pa.array([], f.type)
        out.append(CudfColumn(f.type, len(arr), null_count=arr.null_count, host=arr) if layout == "cudf" else arr)
    return out


def _column(table: ColumnsByName, schema: pa.Schema, i: int):
    name = schema.field(i).name
    return table.raw_column(name) if name in table.names else table.raw_columns[i]


def _has_device_layout(t: pa.DataType) -> bool:
    """Whether every leaf of ``t`` has a device column layout (null-typed columns and Arrow
    dictionaries do not: the CPU reader's arrays stay on the host)."""
    s = _storage(t)
    if pa.types.is_struct(s):
        return all(_has_device_layout(f.type) for f in s)
    if pa.types.is_list(s) or pa.types.is_large_list(s):
        return _has_device_layout(s.value_type)
    if pa.types.is_map(s):
        return _has_device_layout(s.key_type) and _has_device_layout(s.item_type)
    if _is_var(s):
        return True
    try:
        leaf_kind(t)
    except Unsupported:
        return False
    return True


__all__ = ["LAYOUTS", "CudfColumn", "Piece", "combine", "combine_tables"]


def combine_read(tables: Sequence[ColumnsByName], schema: pa.Schema) -> list[CudfColumn]:
    """Every column of a read (``tables``: its device tables in order) in cuDF's layout,
    each buffer allocated once for the whole read (what ``LanceScanner.to_cudf`` wraps)."""
    with _array.legacy_stream(), _device.pinned_uploads(), _array.nvtx_range("lance_gpu.combine"):
        with deferred_errors():  # every launch's flag read back once, with the null counts' copy
            cols = combine_tables(list(tables), schema, "cudf")
        _array.sync_kernels()
    return cols


__all__ += ["combine_read"]
