# SPDX-License-Identifier: Apache-2.0
"""The GPU read path end to end: fragments -> plans -> units -> device columns -> results.

For every ``(fragment, rows)`` job of a scan plan (:mod:`lance_gpu.scan`, whose
:class:`~lance_gpu.scan.GpuExecutor` drives this module) and every requested field, the
fragment says where the field lives (as on the CPU).  Fields whose pages the GPU decodes are planned (:mod:`.plan`); the others are read
by the CPU reader in a thread pool meanwhile and kept as Arrow arrays (:class:`CpuDecodeWarning`
once per reason, or :class:`~lance_gpu.errors.UnsupportedEncodingError` with
``on_cpu_fallback="raise"``).  Planned fields are packed into *units* that fit the device
memory budget (:mod:`.memory`); each unit is staged and decoded with one launch per kernel
family (:mod:`.decode`), then cut into columns (:mod:`.assemble`).  Units are pipelined: a
staging thread plans the next unit and copies its file bytes to the device (pinned slabs,
non-blocking streams) while the current unit's kernels run, so when a read spans several
units each unit is at most half the budget, and a large read is cut into units of about
:data:`UNIT_TARGET_BYTES` so that there is something to overlap (a ``to_cudf`` read of
several units with no gather decodes every unit's fixed-width values, flat columns'
validity, string offsets and bytes, list offsets and list masks into arenas in cuDF's
final layout, :func:`_place_read_fixed`, :func:`_place_read_masks`, :class:`_ReadOffsets`,
:class:`_ReadBytes`, :class:`~lance_gpu.gpu.readlists.ReadLists`).  The job's selected rows
(live rows, a take, late-materialized rows) are selected on the host
(:class:`~lance_gpu.gpu.gathered.Gathered`: each field's positions among the rows it
decoded), and a filter (:func:`lance_gpu.scan.execute.filter_devices`, on a host copy of the
columns it reads only) narrows that selection; the rows are written once, where the read is
combined (``to_cudf``: into its final buffers, :mod:`.combine`) or first used.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import cuda_kernels as ck
from cuda_kernels import _device
from cuda_kernels.errors import CorruptInputError, deferred_errors
from lance_gpu.errors import CorruptFileError, CpuDecodeWarning, UnsupportedEncodingError
from lance_gpu.file.container import FileVersion
from lance_gpu.gpu import _array, headers, memory, passplan
from lance_gpu.gpu._array import DeviceArray
from lance_gpu.gpu.assemble import ReadMasks, build_fields
from lance_gpu.gpu.columns import DeviceColumn
from lance_gpu.gpu.decode import BytesInto, OffsetsInto, decode_unit
from lance_gpu.gpu.device_table import DeviceTable
from lance_gpu.gpu.gathered import Gathered
from lance_gpu.gpu.plan import FieldPlan, LeafPlan, UnitPlan, Unsupported, output_columns, place_values, plan_field_leaves
from lance_gpu.gpu.readlists import ReadLists
from lance_gpu.gpu.rows import plan_field_rows, positions
from lance_gpu.table.blob_descriptions import blob_kind
from lance_gpu.table.packed import packed_struct

FALLBACK_MODES = ("warn", "raise", "allow")
# Units of a multi-unit read: big enough that launches and syncs per unit do not matter,
# small enough that staging the next one overlaps decoding this one.
UNIT_TARGET_BYTES = 256 << 20
_THREADS = 4

_warned: set[str] = set()


@dataclass(slots=True)
class _Frag:
    frag: Any  # LanceFragment (the layer above: duck-typed here)
    rows: np.ndarray | None  # physical rows to keep (None: every physical row)
    gpu: dict[str, FieldPlan] = field(default_factory=dict)
    cpu: dict[str, Future] = field(default_factory=dict)
    done: dict[str, DeviceColumn] = field(default_factory=dict)


def check_fallback_mode(mode: str) -> None:
    """Refuse an ``on_cpu_fallback`` that is not one of :data:`FALLBACK_MODES`."""
    if mode not in FALLBACK_MODES:
        msg = f"on_cpu_fallback must be one of {FALLBACK_MODES}, not {mode!r}"
        raise ValueError(msg)


def _fallback(mode: str, path: str, name: str, reason: str, seen: dict[str, list[str]]) -> None:
    if mode == "raise":
        msg = f"{path}: field {name!r} has no GPU decoder ({reason}); on_cpu_fallback='raise'"
        raise UnsupportedEncodingError(msg)
    names = seen.setdefault(reason, [])
    if name not in names:
        names.append(name)


def _warn_fallbacks(mode: str, seen: dict[str, list[str]]) -> None:
    """One CpuDecodeWarning per reason (per process), naming the fields it sent to the CPU."""
    if mode != "warn":
        return
    for reason, names in seen.items():
        if reason in _warned:
            continue
        _warned.add(reason)
        fields = ", ".join(repr(n) for n in names)
        warnings.warn(
            f"lance_gpu: decoding field(s) {fields} on the CPU and uploading them: no GPU kernel for {reason}",
            CpuDecodeWarning, stacklevel=5,
        )


def _plan_fragment(frag, rows, fields, arrow_fields, mode: str, pool: ThreadPoolExecutor, seen: dict) -> _Frag:
    out = _Frag(frag, rows)
    if rows is not None and rows.size and (int(rows[0]) < 0 or int(rows[-1]) >= frag.physical_rows):
        raise CorruptFileError(frag.uri, f"fragment {frag.fragment_id}: row {int(rows[-1])} of {frag.physical_rows}")
    for f in fields:
        af = arrow_fields[f.name]
        if blob_kind(f) or (rows is not None and not rows.size):
            # blob descriptors (small, fixed-width rows), and empty selections (no filter
            # survivor: nothing to decode): the CPU reader gives the (empty) column
            out.cpu[f.name] = pool.submit(frag.read_field, f, af, rows)
            continue
        src = frag.field_source(f)
        reason = None
        if src is not None:
            reader = frag.file_reader(src.path)
            if packed_struct(f):
                reason = "packed struct columns (lance-encoding:packed)"
            elif reader.version.major == 0:
                reason = "legacy (0.1) file format pages"
            elif reader.version == FileVersion(2, 0):
                reason = "file format 2.0 pages"
            else:
                try:
                    if rows is None:
                        leaves, ranges = plan_field_leaves(reader, af, src.columns), None
                    else:  # only the pages / chunks / full-zip rows holding the selected rows
                        leaves, ranges = plan_field_rows(reader, af, src.columns, rows)
                except Unsupported as exc:
                    reason = str(exc)
                else:
                    n = frag.physical_rows if ranges is None else int((ranges[:, 1] - ranges[:, 0]).sum())
                    out.gpu[f.name] = FieldPlan(-1, f.name, af, leaves, n, ranges)
                    continue
            _fallback(mode, src.path, f.name, reason, seen)
        # CPU reader: fields without a GPU plan, and fields with no data in this fragment
        out.cpu[f.name] = pool.submit(frag.read_field, f, af, rows)
    return out


def _estimate(fp: FieldPlan, placed: bool = False) -> int:
    """Device bytes a field's decode needs, about: its pages' buffers (deferred ones too)
    and its outputs (no page is read: the leaves' totals); with ``placed`` its fixed-width
    leaves' values are not the unit's (they are written into the read's fixed arena,
    :func:`_place_read_fixed`, counted once for the read)."""
    return sum(leaf.page_bytes + leaf.num_values * max(leaf.width, 16) + 4 * leaf.num_levels
               - (leaf.num_values * leaf.width if placed and leaf.kind != "var" else 0) for leaf in fp.leaves)


def _unit_cap(frags: list[_Frag], budget: int, placed: bool = False) -> int:
    """The estimate a unit may reach: the whole budget when everything fits one unit; else
    half of it (the next unit is staged while one decodes), at most UNIT_TARGET_BYTES."""
    total = sum(_estimate(fp, placed) for fw in frags for fp in fw.gpu.values())
    if total <= min(budget, UNIT_TARGET_BYTES):
        return budget
    return max(min(budget // 2, UNIT_TARGET_BYTES), 1)


def _units(frags: list[_Frag], budget: int, placed: bool = False) -> Iterator[list[tuple[int, FieldPlan]]]:
    """Pack (fragment, field) plans into units whose estimate fits the budget (a plan
    larger than the budget is a unit of its own)."""
    unit: list[tuple[int, FieldPlan]] = []
    size = 0
    for k, fw in enumerate(frags):
        for fp in fw.gpu.values():
            est = _estimate(fp, placed)
            if unit and size + est > budget:
                yield unit
                unit, size = [], 0
            unit.append((k, fp))
            size += est
    if unit:
        yield unit


@dataclass(slots=True)
class _Staged:
    items: list[tuple[int, FieldPlan]]
    unit: UnitPlan
    arena: DeviceArray  # the unit's staged bytes on the device


def _columns(items: list[tuple[int, FieldPlan]]) -> list[list[LeafPlan]]:
    """The unit's leaves by output column (:func:`output_columns`), in fragment order."""
    fps = [fp for _k, fp in items]
    columns: list[list[LeafPlan]] = []
    for c, leaf in zip(output_columns(fps), (leaf for fp in fps for leaf in fp.leaves), strict=True):
        if c == len(columns):
            columns.append([])
        columns[c].append(leaf)
    return columns


def _place_read_fixed(frags: list[_Frag]) -> int:
    """Place the fixed-width values of every leaf of the read in one *read fixed arena*
    (what the decode of every unit writes into, instead of a fixed buffer of its own:
    :func:`lance_gpu.gpu.decode.decode_unit`'s ``fixed``), in cuDF's final layout: the same
    field's leaf ``j`` of every fragment one after the other in fragment order, from a
    64-byte aligned start (a new one where the width changes), so that a column's values
    over the whole read are one run, whichever unit decoded each fragment, and combining
    takes them as they are (:func:`lance_gpu.gpu.combine._one_run`).  Every leaf's value
    count is known on the host before any unit decodes (only list leaves' level counts may
    wait for the device pre-pass).  Sets each fixed-width leaf's ``value_pos`` (then
    :func:`_stage` leaves it), and the item validity region (``item_pos``: a byte per item,
    after every column's run) of each fixed-size list leaf with item validity; returns the
    arena's bytes."""
    groups: dict[tuple[str, int], list[LeafPlan]] = {}
    for fw in frags:
        for name, fp in fw.gpu.items():
            for j, leaf in enumerate(fp.leaves):
                if leaf.kind != "var":
                    groups.setdefault((name, j), []).append(leaf)
    size = 0
    for leaves in groups.values():
        at = size
        for i, leaf in enumerate(leaves):
            if i and leaf.width != leaves[i - 1].width:
                at = -(-at // 64) * 64
            leaf.value_pos = at
            at += leaf.num_values * leaf.width
        size = -(-at // 64) * 64
    for leaves in groups.values():  # item validity bytes (fixed-size lists), after every column's run
        for leaf in leaves:
            if leaf.item_dim:
                leaf.item_pos = size
                size = -(-(size + leaf.num_values * leaf.item_dim) // 64) * 64
    return size


def _place_read_masks(frags: list[_Frag]) -> tuple[int, dict[int, tuple[int, ...]]]:
    """Place the validity of every column of the read whose leaves have no repetition levels
    (flat columns, strings, structs' layers) in one zeroed *read mask arena*, in cuDF's
    final layout: each layer of the same field's leaf ``j`` a slot of whole 64-byte blocks,
    its fragments' bits one after the other in fragment order (a leaf's levels: its rows),
    which the level unravel of every unit writes (``unravel_segments_gpu(words_into=...)``,
    OR-ing the words two units share) and combining takes as the column's mask
    (:func:`lance_gpu.gpu.combine._mask_run`).  Columns without a null anywhere (no leaf
    with definition levels) get none.  Returns the arena's words and the first bit of each
    layer of each leaf placed, by ``id`` (:data:`lance_gpu.gpu.assemble.ReadMasks`)."""
    groups: dict[tuple[str, int], list[LeafPlan]] = {}
    for fw in frags:
        for name, fp in fw.gpu.items():
            for j, leaf in enumerate(fp.leaves):
                groups.setdefault((name, j), []).append(leaf)
    bits: dict[int, tuple[int, ...]] = {}
    words = 0
    for leaves in groups.values():
        nl = len(leaves[0].layers)
        if (any(leaf.has_rep or leaf.levels_pending or len(leaf.layers) != nl for leaf in leaves)
                or not any(leaf.has_def for leaf in leaves)):
            continue
        slot = -(-max(sum(leaf.num_levels for leaf in leaves), 1) // 512) * 16  # words: whole 64-byte blocks
        at = 0
        for leaf in leaves:
            bits[id(leaf)] = tuple(32 * (words + m * slot) + at for m in range(nl))
            at += leaf.num_levels
        words += nl * slot
    return words, bits


def _stage(items: list[tuple[int, FieldPlan]], placed: bool = False) -> _Staged:
    """Plan a unit's pages and copy its bytes to the device (runs in the staging thread):
    each column's value regions adjacent across the fragments (:func:`_columns`; with
    ``placed`` the fixed-width ones are the read fixed arena's already,
    :func:`_place_read_fixed`, and each variable-width column but the last is followed by an
    empty *end slot*, whose offset is the column's end when its bytes go to the read's bytes
    arena, :class:`_ReadBytes`), then the same column of its fragments placed as one table
    (:func:`passplan.place_unit`)."""
    with _array.nvtx_range("lance_gpu.plan_unit"):
        unit = UnitPlan()
        for column in _columns(items):
            if placed and unit.nslots and any(leaf.kind == "var" for leaf in column):
                unit.alloc_slots(1)  # the previous variable-width column's end slot (decode.BytesInto)
            for j, leaf in enumerate(column):
                if placed and leaf.kind != "var":
                    continue
                place_values(unit, leaf, follow=j > 0 and leaf.kind != "var" and leaf.width == column[j - 1].width)
        # the pages' work (and staged bytes) in fragment order
        passplan.place_unit(unit, [leaf for _k, fp in items for leaf in fp.leaves], values_placed=True)
        headers.stage(unit)  # the chunk table of the pages whose headers the device parses
    with _array.nvtx_range("lance_gpu.stage"):
        return _Staged(items, unit, unit.stage.upload())


def _var_columns(items: list[tuple[int, FieldPlan]]) -> list[tuple[int, int]]:
    """``(first slot, slots)`` of the unit's variable-width output columns whose leaves'
    value slots are one after the other (:func:`_stage` places them so): the decode writes
    their offsets in cuDF's layout too (:attr:`~lance_gpu.gpu.decode.UnitBuffers.cudf_offsets`)."""
    return [(lo, n) for lo, n, _leaves in _var_column_leaves(items)]


def _var_column_leaves(items: list[tuple[int, FieldPlan]]) -> list[tuple[int, int, list[LeafPlan]]]:
    """:func:`_var_columns` with each column's leaves."""
    out = []
    for column in _columns(items):
        if column[0].kind != "var":
            continue
        lo = end = column[0].slot_lo
        for leaf in column:
            if leaf.kind != "var" or leaf.slot_lo != end:
                break
            end += leaf.num_values
        else:
            out.append((lo, end - lo, column))
    return out


def _var_columns_over(frags: list[_Frag]) -> dict[tuple[str, int], list[LeafPlan]]:
    """The variable-width columns of a read, each a field's leaf ``j`` over every fragment:
    ``(field name, j)`` -> its leaves, in fragment order (what the read's offsets and bytes
    arenas give a region each)."""
    groups: dict[tuple[str, int], list[LeafPlan]] = {}
    for fw in frags:
        for name, fp in fw.gpu.items():
            for j, leaf in enumerate(fp.leaves):
                if leaf.kind == "var":
                    groups.setdefault((name, j), []).append(leaf)
    return groups


class _ReadOffsets:
    """The read's offsets arena of a ``to_cudf`` read of several units: the int32 cuDF
    offsets of every variable-width column over the whole read (the same field's leaf ``j``
    of every fragment one after the other, ``rows + 1`` entries), which the check launch of
    each unit writes at the unit's rows, shifted by the bytes of the column's earlier units
    (``decode_unit(offsets_into=...)``): known on the host when the unit launches, the spans
    of every variable-width leaf coming back with each unit's unravel."""

    def __init__(self, frags: list[_Frag]) -> None:
        groups = _var_columns_over(frags)
        #: id(leaf) -> (its column, first entry of the column, rows of the column, the leaf's first row)
        self.place: dict[int, tuple[tuple[str, int], int, int, int]] = {}
        #: per column: (rows, bytes) decoded so far, None where a unit left it out
        self.done: dict[tuple[str, int], tuple[int, int] | None] = {}
        self.entries = 0
        for key, leaves in groups.items():
            rows = sum(leaf.num_values for leaf in leaves)
            row = 0
            for leaf in leaves:
                self.place[id(leaf)] = (key, self.entries, rows, row)
                row += leaf.num_values
            self.done[key] = (0, 0)
            self.entries += rows + 1
        self.arena: DeviceArray | None = None

    def targets(self, items: list[tuple[int, FieldPlan]]) -> OffsetsInto | None:
        """``decode_unit``'s ``offsets_into`` for the unit ``items``: its variable-width
        columns (:func:`_var_columns`) whose leaves continue their column's rows."""
        if self.arena is None:
            return None
        out: list[tuple[int, int, int, int] | None] = []
        for _lo, _n, leaves in _var_column_leaves(items):
            first = self.place.get(id(leaves[0]))
            done = None if first is None else self.done[first[0]]
            row = -1 if first is None else first[3]
            ok = first is not None and done is not None and done[0] == row
            for leaf in leaves:
                p = self.place.get(id(leaf))
                ok = ok and p is not None and first is not None and p[0] == first[0] and p[3] == row
                row += leaf.num_values
            out.append((first[1], first[2], first[3], done[1]) if ok and first is not None and done is not None else None)
        return self.arena, out

    def decoded(self, items: list[tuple[int, FieldPlan]], cols: list[DeviceColumn]) -> None:
        """Count the rows and bytes of the unit's variable-width leaves (their columns'
        ``span``); a column whose leaves do not follow on is left out from then on."""
        for (_k, fp), col in zip(items, cols, strict=True):
            var = [leaf for leaf in fp.leaves if leaf.kind == "var"]
            got = list(_var_leaf_columns(col))
            for leaf, c in zip(var, got, strict=False):
                p = self.place.get(id(leaf))
                if p is None:
                    continue
                done = self.done[p[0]]
                if done is None or done[0] != p[3] or len(var) != len(got) or c.span is None or c.length != leaf.num_values:
                    self.done[p[0]] = None
                    continue
                self.done[p[0]] = (done[0] + leaf.num_values, done[1] + c.span[1] - c.span[0])


def _var_leaf_columns(col: DeviceColumn) -> Iterator[DeviceColumn]:
    """The variable-width leaf columns of ``col``, depth first (its leaves' order)."""
    if col.children:
        for c in col.children:
            yield from _var_leaf_columns(c)
    elif col.offsets is not None and col.data is not None:
        yield col


class _ReadBytes:
    """The read's bytes arena of a ``to_cudf`` read of several units: the string and binary
    bytes of every variable-width column over the whole read (the same field's leaf ``j`` of
    every fragment, lists' string items too), each column a region of its own from a 64-byte
    boundary, its units' bytes one after the other in fragment order, which the decode of
    each unit writes straight into (``decode_unit(bytes_into=...)``,
    :class:`~lance_gpu.gpu.decode.BytesInto`): its offsets are then bytes of the arena and
    a column's pieces one run of it, which combining takes as it is (its ``_one_run``).

    A region's size is a guess made before its bytes are known (a unit's byte total of a
    column comes back with the unit's scan, before its bytes are written): first the
    column's pages' buffer bytes (plain strings: at most that; FSST and dictionary strings
    may be more); the arena is allocated when the first unit reserves, every region it
    holds then sized from that unit's bytes per page byte where that is more (scaled to the
    column's pages, 1/16 spare).  A unit's column that does not fit its region grows the
    arena the same way: a new one, every region's bytes so far copied there (one batched
    copy), the earlier units' columns re-pointed at it (:attr:`grown` counts these).  A unit
    of plain strings only is given room for its pages' bytes instead (:meth:`_room`: no
    column end read back), its bytes counted from its columns' spans.  A
    column whose leaves of a unit do not continue its rows (or a unit whose columns do not
    tile its slots) keeps the unit's own bytes from then on (combining copies them)."""

    def __init__(self, frags: list[_Frag]) -> None:
        groups = _var_columns_over(frags)
        #: id(leaf) -> (its column, the leaf's first row in the column)
        self.place: dict[int, tuple[tuple[str, int], int]] = {}
        #: per column: rows decoded so far, None where a unit left it out
        self.rows: dict[tuple[str, int], int | None] = {}
        self.pages: dict[tuple[str, int], int] = {}  # the column's pages' buffer bytes
        self.pages_done: dict[tuple[str, int], int] = {}  # ... of its leaves reserved so far
        self.cap: dict[tuple[str, int], int] = {}  # region bytes
        self.start: dict[tuple[str, int], int] = {}  # region's first byte
        self.used: dict[tuple[str, int], int] = {}  # bytes written so far
        #: the leaf columns of earlier units viewing a region: [column, bytes the arena has moved]
        self.views: dict[tuple[str, int], list[list[Any]]] = {}
        for key, leaves in groups.items():
            row = 0
            for leaf in leaves:
                self.place[id(leaf)] = (key, row)
                row += leaf.num_values
            self.rows[key] = 0
            self.pages[key] = sum(leaf.page_bytes for leaf in leaves)
            self.pages_done[key] = 0
            self.cap[key] = _round64(self.pages[key])
            self.used[key] = 0
            self.views[key] = []
        self.arena: DeviceArray | None = None
        self.grown = 0  # reallocations after the first allocation
        #: the room :meth:`_room` made for the unit being decoded, by column
        self.bound: dict[tuple[str, int], int] = {}

    @property
    def size(self) -> int:
        """The arena's bytes (planned, before the first unit)."""
        return sum(self.cap.values())

    def targets(self, items: list[tuple[int, FieldPlan]]) -> BytesInto | None:
        """``decode_unit``'s ``bytes_into`` for the unit ``items``: None where a column of it
        does not continue its rows (that column and the unit's others then left out)."""
        cols = _var_column_leaves(items)
        keys: list[tuple[str, int]] = []
        pages: list[int] = []
        ok = bool(cols)
        for _lo, _n, leaves in cols:
            first = self.place.get(id(leaves[0]))
            key = None if first is None else first[0]
            row = None if key is None else self.rows[key]
            for leaf in leaves:
                p = self.place.get(id(leaf))
                ok = ok and p is not None and p[0] == key and p[1] == row
                row = None if row is None else row + leaf.num_values
            if key is None:
                ok = False
                continue
            keys.append(key)
            pages.append(sum(leaf.page_bytes for leaf in leaves))
        if not ok or len(set(keys)) != len(keys):
            for key in keys:
                self.rows[key] = None
            return None
        return BytesInto([(lo, n) for lo, n, _leaves in cols], lambda totals: self._reserve(keys, pages, totals),
                         lambda: self._room(keys, pages))

    def _room(self, keys: list[tuple[str, int]], pages: list[int]) -> tuple[DeviceArray, np.ndarray]:
        """Room for the unit's columns ``keys`` whose bytes are at most ``pages`` (their
        leaves' pages' bytes): the arena and each one's first byte in it; the bytes are
        counted once decoded (:meth:`decoded`, from the columns' spans)."""
        grow: dict[tuple[str, int], int] = {}
        self.bound = dict(zip(keys, pages, strict=True))
        for key, p in zip(keys, pages, strict=True):
            self.pages_done[key] += p
            need = self.used[key] + p
            if need > self.cap[key]:
                grow[key] = _round64(need + (self.pages[key] - self.pages_done[key]))  # the rest by the same bound
        if self.arena is None or grow:
            self._allocate(grow)
        assert self.arena is not None
        return self.arena, np.array([self.start[key] + self.used[key] for key in keys], np.int64)

    def _reserve(self, keys: list[tuple[str, int]], pages: list[int], totals: np.ndarray) -> tuple[DeviceArray, np.ndarray]:
        """Room for the unit's ``totals`` bytes of the columns ``keys`` (``pages``: their
        leaves' pages' bytes): the arena and each one's first byte in it."""
        grow: dict[tuple[str, int], int] = {}
        for key, p, t in zip(keys, pages, totals.tolist(), strict=True):
            need = self.used[key] + int(t)
            self.pages_done[key] += p
            if need > self.cap[key] or (self.arena is None and need):
                # scaled from the bytes per page byte so far, 1/16 spare
                scaled = need * max(self.pages[key], 1) // max(self.pages_done[key], 1)
                want = _round64(max(need, scaled + scaled // 16))
                if want > self.cap[key] or need > self.cap[key]:
                    grow[key] = max(want, _round64(need))
        if self.arena is None or grow:
            self._allocate(grow)
        assert self.arena is not None
        pos = np.array([self.start[key] + self.used[key] for key in keys], np.int64)
        for key, t in zip(keys, totals.tolist(), strict=True):
            self.used[key] += int(t)
        return self.arena, pos

    def _allocate(self, grow: dict[tuple[str, int], int]) -> None:
        """(Re)allocate the arena with the regions of ``grow`` resized, the bytes written so
        far copied over and the earlier units' columns re-pointed at it."""
        old, old_start = self.arena, dict(self.start)
        self.cap.update(grow)
        at = 0
        for key, cap in self.cap.items():
            self.start[key] = at
            at += cap
        self.arena = _array.empty(max(at, 64), np.uint8)
        if old is None:
            return
        self.grown += 1
        moved = [key for key in self.cap if self.used[key]]
        if moved:
            ck.copy_ranges_gpu(old, np.array([old_start[k] for k in moved], np.int64), np.array([self.used[k] for k in moved], np.int64),
                               self.arena, np.array([self.start[k] for k in moved], np.int64))
        for key, views in self.views.items():
            shift = self.start[key] - old_start[key]  # >= 0: regions only grow, in one order
            for view in views:
                view[1] += shift
                view[0].data = self.arena[view[1]:]

    def decoded(self, items: list[tuple[int, FieldPlan]], cols: list[DeviceColumn], into: BytesInto | None) -> None:
        """Count the rows of the unit's columns written into the arena and keep their leaf
        columns (re-pointed should the arena grow); a unit that wrote none leaves its
        columns out from then on.  A unit given room for a bound (:meth:`_room`) whose
        bytes of a column passed it (spans of a corrupt file reading bytes twice) raises
        ``CorruptFileError``: they ran into the next region."""
        wrote: dict[tuple[str, int], int] = {}
        for (_k, fp), col in zip(items, cols, strict=True):
            var = [leaf for leaf in fp.leaves if leaf.kind == "var"]
            got = list(_var_leaf_columns(col))
            for leaf, c in zip(var, got, strict=False):
                p = self.place.get(id(leaf))
                if p is None or self.rows[p[0]] is None:
                    continue
                if (into is None or not into.placed or len(var) != len(got) or c.data is not self.arena
                        or (not into.exact and c.span is None)):
                    self.rows[p[0]] = None
                    continue
                self.rows[p[0]] = p[1] + leaf.num_values
                self.views[p[0]].append([c, 0])
                if not into.exact:  # (room made for a bound: the bytes written are the spans')
                    assert c.span is not None
                    self.used[p[0]] += c.span[1] - c.span[0]
                    wrote[p[0]] = wrote.get(p[0], 0) + c.span[1] - c.span[0]
                    if wrote[p[0]] > self.bound.get(p[0], 0):
                        raise CorruptFileError(leaf.path, f"column {leaf.column}: variable-width bytes past its pages' buffers")


def _round64(n: int) -> int:
    return -(-int(n) // 64) * 64


def _decode(items: list[tuple[int, FieldPlan]], staged: _Staged | None = None, fixed: DeviceArray | None = None,
            masks: ReadMasks | None = None, offsets: OffsetsInto | None = None,
            chars: BytesInto | None = None, lists: ReadLists | None = None) -> list[DeviceColumn]:
    """Decode a unit (staged here where ``staged`` is None); ``fixed``: the read fixed
    arena its fixed-width leaves were placed in (:func:`_place_read_fixed`), else None;
    ``masks``: the read mask arena and its leaves' bits (:func:`_place_read_masks`);
    ``offsets``: where its columns' cuDF offsets go in the read's offsets arena
    (:class:`_ReadOffsets`); ``chars``: the read's bytes arena its string bytes go to
    (:class:`_ReadBytes`); ``lists``: the read lists arena (list offsets and the masks of
    leaves with repetition levels, :class:`~lance_gpu.gpu.readlists.ReadLists`)."""
    if staged is None:
        staged = _stage(items)
    # every launch's corruption flag is read back once, at the end of the unit
    with deferred_errors():
        with _array.nvtx_range("lance_gpu.decode"):
            var_leaves = [leaf for _k, fp in items for leaf in fp.leaves if leaf.kind == "var"]
            bufs = decode_unit(staged.unit, staged.arena, _var_columns(items), fixed, offsets, chars, var_leaves)
        with _array.nvtx_range("lance_gpu.assemble"):
            return build_fields([fp for _k, fp in items], bufs, masks, lists)


def _decode_located(items: list[tuple[int, FieldPlan]], staged: _Staged | None = None,
                    fixed: DeviceArray | None = None, masks: ReadMasks | None = None,
                    offsets: OffsetsInto | None = None, chars: BytesInto | None = None,
                    lists: ReadLists | None = None) -> list[DeviceColumn]:
    """Decode a unit; a kernel's corruption flag becomes a CorruptFileError naming the file
    (a unit spanning several files is decoded again file by file to find it, each in
    buffers of its own)."""
    try:
        return _decode(items, staged, fixed, masks, offsets, chars, lists)
    except CorruptInputError as exc:
        paths = sorted({leaf.path for _k, fp in items for leaf in fp.leaves})
        if len(paths) > 1:
            for path in paths:
                sub = [(k, fp) for k, fp in items if fp.leaves and fp.leaves[0].path == path]
                try:
                    _decode(sub)
                except CorruptInputError as inner:
                    raise CorruptFileError(path, f"device decode: {inner}") from inner
        raise CorruptFileError(", ".join(paths), f"device decode: {exc}") from exc


def _finish_fragment(fw: _Frag, names: list[str], hold: bool = True) -> DeviceTable:
    """The fragment's columns with only the selected rows: each field's selection of the
    rows it decoded (all of them, or the ranges of its row selection), kept on the host
    (:class:`~lance_gpu.gpu.gathered.Gathered`) until the rows are written out, once; without
    ``hold`` (a read larger than the memory budget) written out now, so that the unit's
    buffers can go (:class:`DeviceTable`'s ``hold_sources``)."""
    frag, rows = fw.frag, fw.rows
    cols: list[Any] = []
    for name in names:
        if name not in fw.done:
            cols.append(fw.cpu[name].result())
            continue
        col = fw.done[name]
        fp = fw.gpu.get(name)
        pos = None if rows is None or fp is None else positions(rows, fp.ranges)
        cols.append(col if pos is None or _identity(pos, col.length) else Gathered(col, pos))
    n = frag.physical_rows if rows is None else int(rows.size)
    return DeviceTable(names, cols, n, None, frag.fragment_id, hold_sources=hold)


def _identity(pos: np.ndarray, n: int) -> bool:
    """Whether the positions ``pos`` select every one of ``n`` rows, in order."""
    return pos.size == n and (not n or (int(pos[0]) == 0 and int(pos[-1]) == n - 1 and bool((np.diff(pos) == 1).all())))


def scan_device(
    ds,
    fields,
    jobs: Sequence[tuple[object, np.ndarray | None]],
    *,
    on_cpu_fallback: str = "warn",
    whole_read: bool = False,
) -> Iterator[tuple[object, DeviceTable]]:
    """Decode ``fields`` (``LanceField``s) of each ``(fragment, rows)`` job on the GPU, in
    job order: the fragment's pages are decoded, then the sorted physical ``rows`` (None:
    every row) are gathered on the device.  Yields ``(fragment, DeviceTable)``.

    ``whole_read``: the caller keeps every table until the read ends and combines them
    (``to_cudf``, :func:`lance_gpu.gpu.combine.combine_read`).  A read of several units
    with no gather (every job's ``rows`` None) then decodes the fixed-width values of every
    unit into one read fixed arena allocated before the first unit, each column's values
    over the whole read one run in cuDF's final layout (:func:`_place_read_fixed`), and
    writes the validity of its columns without repetition levels into one zeroed read mask
    arena (:func:`_place_read_masks`), its string columns' int32 offsets into one read
    offsets arena (:class:`_ReadOffsets`), their bytes into one read bytes arena
    (:class:`_ReadBytes`: its first guess counted), and its list and map layers' int32
    offsets and the validity of its leaves with repetition levels into one read lists arena
    (:class:`~lance_gpu.gpu.readlists.ReadLists`), which combining takes as they are.  The
    memory budget then counts the arenas for the whole read and, per unit, the rest of the unit's
    estimate: the units are cut from the budget less the arenas (at least a quarter of the
    budget: the arenas are the read's result, which combining the units' own buffers would
    have allocated beside them).
    """
    check_fallback_mode(on_cpu_fallback)
    memory.use_rmm_if_available()
    arrow_fields = {f.name: af for f, af in zip(ds.lance_schema.fields, ds.schema)}
    names = [f.name for f in fields]
    with ThreadPoolExecutor(_THREADS) as pool, ThreadPoolExecutor(1) as stager:
        seen: dict[str, list[str]] = {}
        with _array.nvtx_range("lance_gpu.plan"):
            frags = [_plan_fragment(frag, rows, fields, arrow_fields, on_cpu_fallback, pool, seen) for frag, rows in jobs]
        _warn_fallbacks(on_cpu_fallback, seen)
        budget = memory.memory_budget()
        # selections keep the decoded buffers they select from only where the whole read fits
        hold = sum(_estimate(fp) for fw in frags for fp in fw.gpu.values()) <= budget
        plan = list(_units(frags, _unit_cap(frags, budget)))
        placed = whole_read and len(plan) > 1 and all(fw.rows is None for fw in frags)
        read_fixed: DeviceArray | None = None
        read_masks: ReadMasks | None = None
        read_offsets: _ReadOffsets | None = None
        read_bytes: _ReadBytes | None = None
        read_lists: ReadLists | None = None
        if placed:
            size = _place_read_fixed(frags)
            words, mask_bits = _place_read_masks(frags)
            read_offsets = _ReadOffsets(frags)
            read_bytes = _ReadBytes(frags)
            read_lists = ReadLists([fw.gpu for fw in frags])
            room = max(budget - size - 4 * words - 4 * read_offsets.entries - read_bytes.size - read_lists.nbytes,
                       budget // 4)
            plan = list(_units(frags, _unit_cap(frags, room, placed=True), placed=True))
            with _array.legacy_stream():  # (zeroed on the stream the units' kernels use)
                read_fixed = _array.empty(max(size, 64), np.uint8)
                read_masks = (_array.zeros(max(words, 16), np.uint32), mask_bits) if words else None
                read_offsets.arena = _array.empty(read_offsets.entries, np.int32) if read_offsets.entries else None
                read_lists.allocate()
        stage = functools.partial(_stage, placed=True) if placed else _stage
        pending = 0  # next fragment to hand out
        remaining = [len(fw.gpu) for fw in frags]

        def finish(k: int) -> DeviceTable:
            with _array.legacy_stream(), _device.pinned_uploads(), _array.nvtx_range("lance_gpu.finish"):
                table = _finish_fragment(frags[k], names, hold)
                _array.sync_kernels()  # the caller may use it from any stream
            return table

        units = iter(plan)
        first = next(units, None)
        ahead: Future | None = stager.submit(stage, first) if first is not None else None
        while ahead is not None:
            staged = ahead.result()
            following = next(units, None)
            # the next unit's host gathering and copies overlap this unit's kernels
            ahead = stager.submit(stage, following) if following is not None else None
            # kernel arguments go up through pinned memory without waiting for the device
            with _array.legacy_stream(), _device.pinned_uploads():
                into = None if read_offsets is None else read_offsets.targets(staged.items)
                chars = None if read_bytes is None else read_bytes.targets(staged.items)
                cols = _decode_located(staged.items, staged, read_fixed, read_masks, into, chars, read_lists)
                if read_offsets is not None:
                    read_offsets.decoded(staged.items, cols)
                if read_bytes is not None:
                    read_bytes.decoded(staged.items, cols, chars)
                _array.sync_kernels()  # its arena is freed now: no kernel may still read it
            for (k, fp), col in zip(staged.items, cols):
                frags[k].done[fp.name] = col
                remaining[k] -= 1
            del staged
            if ahead is None:
                read_fixed = read_masks = read_offsets = read_bytes = read_lists = None  # (held by the columns' views only)
            while pending < len(frags) and remaining[pending] == 0:
                done = finish(pending)
                yield frags[pending].frag, done
                frags[pending] = _Frag(frags[pending].frag, None)  # let its columns go
                pending += 1
        while pending < len(frags):
            done = finish(pending)
            yield frags[pending].frag, done
            pending += 1
