# SPDX-License-Identifier: Apache-2.0
"""Run a read unit's plan on the device: one launch per kernel family over all its pages.

Order (each step one launch, or one per word size / destination, and skipped when empty):

1. staging: the unit's file bytes and blobs to the device arena (:mod:`.staging`), then
   the pre-pass parsing mini-block chunk headers on the device (:mod:`.headers`: one
   launch, one readback) and the work that depends on them;
2. ``copy``: Flat chunks, fixed-width full-zip pages, level tails and constant levels;
3. ``unpack``: FastLanes blocks of values, dictionary indices and levels, scattered into
   their columns (``cuda_kernels.unpack_blocks_scatter_gpu``, one launch per destination
   and word size);
4. ``bits`` (booleans), ``fill`` (constant and all-null pages, zero levels), ``rle``;
5. ``full-zip walk`` (count, scan, fill) and ``variable spans`` (mini-block strings);
6. ``dictionary spans`` then one ``copy`` of the fixed-width dictionary values;
7. ``remap`` of definition levels where a column's pages describe their layers differently;
8. variable width: lengths (span lengths, FSST lengths pass over every FSST page with its own
   symbol table), one scan, one ``copy`` of plain bytes, one FSST decode pass: into a buffer
   of the unit's own sized from a bound known on the host (:func:`_var_bound`: the scan's
   total not read back; past :data:`VAR_BOUND_SLACK`, read back), or into a read's bytes
   arena (each column's ends read back with the scan's total, one rebase of the offsets to
   the arena first, :class:`BytesInto`).

So a unit reads back twice: the pre-pass's chunk tables, and (:mod:`.assemble`) the level
unravel's counts with every launch's error flags and each string column's span.

The result is four device buffers shared by every column of the unit: fixed-width values,
levels, variable-width offsets and bytes; :mod:`.assemble` cuts columns out of them.  (A
read of several units may give the fixed-width values' and the bytes' buffers: arenas of
the whole read that each unit writes its part of.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

import cuda_kernels as ck
from cuda_kernels import _device
from cuda_kernels.errors import ERR_OUT_OF_BOUNDS, CorruptInputError
from cuda_kernels.pieces import rebase_offsets_segments_gpu
from lance_gpu.errors import CorruptFileError
from lance_gpu.file.encodings.dictionary import decode_kernels as dictionary_kernels
from lance_gpu.file.encodings.rle import decode_kernels as rle_kernels
from lance_gpu.file.encodings.variable import decode_kernels as variable_kernels
from lance_gpu.file.v2_1 import fullzip_kernels
from lance_gpu.gpu import _array, headers, worktable
from lance_gpu.gpu._array import DeviceArray
from lance_gpu.gpu.plan import _DESTS, LeafPlan, UnitPlan, work_lists

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


#: the bytes a unit's variable-width buffer may be given past its leaves' pages' bytes (FSST
#: strings: up to 8 bytes per compressed byte; dictionary strings: each value its
#: dictionary's longest item) where the decode sizes it from the host's bound instead of
#: reading the scan's total back (:func:`_var_bound`); a unit whose bound passes it reads
#: the total back and allocates that (a large unit's one more readback is amortised)
VAR_BOUND_SLACK = 32 << 20

#: the most bytes a variable-width column's offsets hold as int32 (cuDF's strings; beyond it
#: cuDF's large strings take int64); a unit whose variable-width bytes exceed it writes no
#: cuDF offsets (:attr:`UnitBuffers.cudf_offsets`: combining then sizes each column's own)
OFFSETS32_MAX = 2**31 - 1


@dataclass(slots=True)
class CudfOffsets:
    """A variable-width output column's offsets in cuDF's layout, written by the decode:
    ``offsets`` (int32, ``count + 1``, from 0) cover the unit's value slots ``[slot,
    slot + count)``, the column's leaves of every fragment of the unit one after the other."""

    slot: int
    count: int
    offsets: DeviceArray
    #: the entry of value ``slot`` in ``offsets`` (0 but in a read's offsets arena,
    #: :data:`OffsetsInto`, where ``offsets`` is the column's over the whole read)
    row: int = 0


@dataclass(slots=True)
class UnitBuffers:
    fixed: DeviceArray  # uint8: fixed-width values (booleans one byte per item)
    levels: DeviceArray  # uint16: repetition / definition levels
    var_offsets: DeviceArray  # int64[nslots + 1]: variable-width offsets into var_bytes
    var_bytes: DeviceArray  # uint8
    #: the variable-width columns' offsets in cuDF's layout (slot order; see
    #: :func:`_check_variable`); empty where the caller gave no columns
    cudf_offsets: list[CudfOffsets] = field(default_factory=list)

    def cudf_offsets_of(self, slot: int, count: int) -> tuple[DeviceArray, int] | None:
        """``(column's cuDF offsets, row of slot in them)`` of a leaf's slots ``[slot, slot +
        count)`` lying in a column of :attr:`cudf_offsets`, else None (an empty leaf too)."""
        for col in self.cudf_offsets:
            if count and col.slot <= slot and slot + count <= col.slot + col.count:
                return col.offsets, col.row + slot - col.slot
        return None


def _patterns(items: list[tuple[int, int, bytes]]) -> tuple[np.ndarray, ...]:
    """(dst, nbytes, pattern bytes, pattern starts, pattern lengths) of fill items."""
    dst = np.array([d for d, _n, _p in items], np.int64)
    nbytes = np.array([n for _d, n, _p in items], np.int64)
    uniq: dict[bytes, int] = {}
    blob = bytearray()
    starts = []
    for _d, _n, p in items:
        if p not in uniq:
            uniq[p] = len(blob)
            blob += p
        starts.append(uniq[p])
    lens = np.array([len(p) for _d, _n, p in items], np.int64)
    return dst, nbytes, np.frombuffer(bytes(blob), np.uint8), np.array(starts, np.int64), lens


def _copy(src, lst, dst) -> None:
    if len(lst):
        a = lst.arrays()
        ck.copy_ranges_gpu(src, a["src"], a["len"], dst, a["dst"])


def _fill(dst, items) -> None:
    if items:
        d, n, pats, ps, pl = _patterns(items)
        ck.fill_patterns_gpu(dst, d, n, pats, ps, pl)


#: where a read of several units wants the unit's variable-width columns' cuDF offsets
#: (``decode_unit``'s ``offsets_into``): the read's int32 offsets arena and, per column of
#: ``var_columns``, ``(first entry of the column's offsets over the read, its rows over the
#: read, the entry of the unit's first value, the bytes of the column's earlier rows)``, or
#: None (the unit's own buffer)
OffsetsInto = tuple[DeviceArray, Sequence[tuple[int, int, int, int] | None]]


@dataclass(slots=True)
class BytesInto:
    """Where a read of several units wants the unit's variable-width bytes (``decode_unit``'s
    ``bytes_into``): straight into the read's *bytes arena*, each column's bytes of every unit
    one after the other in a region of its own (:class:`lance_gpu.gpu.read._ReadBytes`).

    ``columns``: the ``(first slot, slots)`` of every variable-width output column of the
    unit, in slot order, each but the last followed by an *end slot* (one empty slot the unit
    plan gives it, :func:`lance_gpu.gpu.read._stage`), so that columns and end slots tile the
    unit's slots ``[0, nslots)``; the decode then zeroes the end slots' lengths, scans the
    lengths, reads back each column's byte total (the scan's ends at the end slots and
    ``nslots``, one copy: the total it read back anyway) and calls ``reserve(totals)``,
    which returns the arena and each column's first byte in it for this unit (room made:
    it may grow the arena first).  The unit's offsets are then rebased in place to bytes of
    the arena (one launch: each column's slots and its end slot, whose offset is the
    column's end) and the plain copy and the FSST decode write there: the unit has no byte
    buffer of its own.  ``placed``: whether the decode did (False where the columns do not
    tile the unit's slots: its bytes are then the unit's own).

    ``room()``: where the host bounds every column's bytes of the unit (``bound``: its
    pages' buffer bytes, which plain strings' spans lie in), the arena and each column's
    first byte with room for the bound, the bytes so far not advanced (``exact`` False: the
    caller counts them from the unit's spans).  A unit of such columns only (no FSST page,
    no dictionary, no constant value, no empty column: :meth:`bounded`) reads back no
    column end: the offsets rebased to the arena by the check kernel's rebase (from each
    column's first offset on the device, into a buffer of their own: one launch)."""

    columns: Sequence[tuple[int, int]]
    reserve: Callable[[np.ndarray], tuple[DeviceArray, np.ndarray]]
    room: Callable[[], tuple[DeviceArray, np.ndarray]] | None = None
    placed: bool = False
    exact: bool = True

    def bounded(self, unit: UnitPlan) -> bool:
        """Whether the host bounds the unit's bytes of every column (:attr:`room`)."""
        return (self.room is not None and not unit.fsst and not unit.dictionary
                and not any(ln for _s, _n, _st, ln in unit.fill_slots) and all(n for _lo, n in self.columns))

    def tiles(self, nslots: int) -> bool:
        """Whether the columns and their end slots tile ``[0, nslots)``."""
        at = 0
        for k, (lo, n) in enumerate(self.columns):
            if lo != at:
                return False
            at = lo + n + (k + 1 < len(self.columns))
        return bool(self.columns) and at == nslots

    def ends(self) -> list[int]:
        """The end slot of each column but the last (whose end is the unit's last slot)."""
        return [lo + n for lo, n in self.columns[:-1]]


def decode_unit(unit: UnitPlan, arena=None, var_columns: Sequence[tuple[int, int]] = (), fixed: DeviceArray | None = None,
                offsets_into: OffsetsInto | None = None, bytes_into: BytesInto | None = None,
                var_leaves: Sequence[LeafPlan] | None = None) -> UnitBuffers:
    """Decode every page of the unit (see the module docstring) from ``arena``, its staged
    bytes (staged here when None); raises ``cuda_kernels.CorruptInputError`` when a kernel
    flags corrupt input.  Every page work item of the unit goes up first, as one work table
    (:mod:`.worktable`) in one copy, which the launches index.  ``var_columns``: the
    ``(first slot, slots)`` of every variable-width output column of the unit (its leaves'
    slots one after the other), whose offsets are also written in cuDF's layout
    (:attr:`UnitBuffers.cudf_offsets`).  ``fixed``: the buffer the fixed-width values go
    to, where the leaves' ``value_pos`` are bytes of it (a multi-unit read's fixed arena,
    :func:`lance_gpu.gpu.read._place_read_fixed`); None: one of the unit's own
    (``unit.fixed_size``).  ``offsets_into``: the columns whose cuDF offsets go to the
    read's offsets arena at the unit's rows, shifted by the bytes of the earlier units
    (:data:`OffsetsInto`), where they fit int32.  ``bytes_into``: the read's bytes arena the
    unit's variable-width bytes go to (:class:`BytesInto`), where its columns tile its slots;
    then :attr:`UnitBuffers.var_offsets` are bytes of that arena, ``var_bytes`` the arena.
    ``var_leaves``: the unit's variable-width leaves, whose pages' buffers their plain
    values' spans and FSST strings lie in: the unit's own bytes buffer is then sized from
    the host's bound (:func:`_var_bound`) and the scan's total is not read back
    (``var_bytes`` may be longer than the values: each column's span says where they are);
    None: the total read back."""
    if arena is None:
        headers.stage(unit)
        arena = unit.stage.upload()
    unit.stage.wait_ready()  # the kernels' stream waits for the staging copies (events)
    headers.parse_and_emit(unit, arena)  # the chunk headers parsed on the device, their work emitted
    host, scans = worktable.pack(work_lists(unit))
    with _device.work_table(host, scans):
        return _decode_pages(unit, arena, var_columns, fixed, offsets_into, bytes_into,
                             None if var_leaves is None else _var_bound(unit, var_leaves))


def _var_bound(unit: UnitPlan, leaves: Sequence[LeafPlan]) -> int | None:
    """An upper bound of the unit's variable-width bytes known on the host, or None (read
    the total back): the buffer bytes of the pages of its variable-width ``leaves`` (plain
    values' spans lie in them without overlap, and so do FSST strings), 7 more bytes per
    buffer byte of its FSST pages (a code byte decodes to at most 8 bytes; the pages are
    the rows of each leaf's table keyed in ``unit.fsst_tables``: every FSST segment's), the
    constant pages' values (exact: values times the value's length) and the dictionary
    pages' (:attr:`UnitPlan.var_dictionary_bytes`).
    None where a variable-width dictionary page's values were not counted there, where the
    bound passes its pages' bytes by more than :data:`VAR_BOUND_SLACK`, or where it passes
    :data:`OFFSETS32_MAX` (cuDF's int32 offsets are decided from the bound)."""
    counted = 0
    for lst in unit.dictionary.values():
        a = lst.arrays()
        counted += int(a["count"][a["width"] == 0].sum())
    if counted != unit.var_dictionary_values:
        return None
    pages = sum(leaf.page_bytes for leaf in leaves)
    fsst_rows: dict[object, list[int]] = {}
    for key in unit.fsst_tables:  # (id(leaf), row of its table): every page with a symbol table staged
        if not isinstance(key, tuple):
            return None
        fsst_rows.setdefault(key[0], []).append(int(key[1]))
    fsst = 0
    for leaf in leaves:
        rows = fsst_rows.pop(id(leaf), None)
        if rows is not None:
            if leaf.table is None:
                return None
            fsst += int(leaf.table.sizes[rows].sum())
    if fsst_rows:  # (a page of a leaf not given: not bounded here)
        return None
    extra = 7 * fsst + unit.var_dictionary_bytes
    bound = pages + extra + sum(n * ln for _s, n, _st, ln in unit.fill_slots)
    if extra > VAR_BOUND_SLACK or bound > OFFSETS32_MAX:
        return None
    return int(bound)


def _decode_pages(unit: UnitPlan, arena, var_columns: Sequence[tuple[int, int]], fixed: DeviceArray | None,
                  offsets_into: OffsetsInto | None = None, bytes_into: BytesInto | None = None,
                  var_bound: int | None = None) -> UnitBuffers:
    if fixed is None:
        fixed = _array.empty(max(unit.fixed_size, 64), np.uint8)
    levels = _array.empty(max(unit.level_size, 32), np.uint16)
    index = {bits: _array.empty(max(n, 8), _UINT[bits]) for bits, n in unit.index_size.items()}
    nslots = unit.nslots
    src_start = _array.empty(max(nslots, 1), np.int64)
    src_len = _array.empty(max(nslots, 1), np.int64)

    def dest(name: str):
        if name == "fixed":
            return fixed
        if name == "level":
            return levels
        return index[int(name[5:])]

    # 2. batched copies
    _copy(arena, unit.copy_fixed, fixed)
    _copy(arena, unit.copy_level, levels)
    for bits, lst in unit.copy_index.items():
        _copy(arena, lst, index[bits])

    # 3. FastLanes unpack, scattered into place
    for (name, bits), lst in unit.unpack.items():
        if not len(lst):
            continue
        a = lst.arrays()
        out = dest(name)
        if np.dtype(out.dtype).itemsize != bits // 8:
            out = out.view(_UINT[bits])
        ck.unpack_blocks_scatter_gpu(arena.view(_UINT[bits]), a["words"], a["width"], a["dst"], a["count"], out)

    # 4. booleans, fills, runs
    if len(unit.bits):
        a = unit.bits.arrays()
        ck.bits_to_bytes_gpu(arena, a["src"], a["count"], fixed, a["dst"])
    _fill(fixed, unit.fill_fixed)
    _fill(levels.view(np.uint8), unit.fill_level)
    if bytes_into is not None and not bytes_into.tiles(nslots):
        bytes_into = None
    # end slots: empty, their lengths zeroed with the fills' (with FSST pages: in _variable)
    ends = bytes_into.ends() if bytes_into is not None and not unit.fsst else []
    if unit.fill_slots or ends:
        starts = [(8 * s, 8 * n, int(st).to_bytes(8, "little", signed=True)) for s, n, st, _ln in unit.fill_slots]
        lens = [(8 * s, 8 * n, int(ln).to_bytes(8, "little", signed=True)) for s, n, _st, ln in unit.fill_slots]
        _fill(src_start.view(np.uint8), starts)
        _fill(src_len.view(np.uint8), lens + [(8 * e, 8, bytes(8)) for e in ends])
    for vbits, lst in unit.rle.items():
        _run_rle(arena, vbits, lst, dest)

    # 5. full-zip pages and mini-block strings
    if len(unit.fullzip):
        inv = np.concatenate(unit.invisible) if unit.invisible else np.zeros(1, np.bool_)
        fullzip_kernels.fullzip_walk(arena, unit.fullzip.arrays(), inv, levels, fixed, src_start, src_len)
    if len(unit.var_chunks):
        variable_kernels.variable_spans(arena, unit.var_chunks.arrays(), src_start, src_len)

    # 6. page dictionaries
    for bits, lst in unit.dictionary.items():
        a = lst.arrays()
        n = int(a["count"].sum())
        fsrc = _array.empty(max(n, 1), np.int64)
        fdst = _array.empty(max(n, 1), np.int64)
        flen = _array.empty(max(n, 1), np.int64)
        widths = a["width"]
        _fill(flen.view(np.uint8), _width_fill(a["count"], widths))
        dictionary_kernels.dictionary_spans(index[bits], a, arena, fsrc, fdst, src_start, src_len)
        if np.any(widths > 0):  # (the copy's total known here: nothing read back)
            ck.copy_ranges_gpu(arena, fsrc[:n], flen[:n], fixed, fdst[:n], max_total=int((a["count"] * widths).sum()))

    # 7. definition levels re-numbered to the column's layers
    for pos, n, table in unit.remap:
        if n:
            out = ck.remap_segments_gpu(levels[pos : pos + n], np.array([0, n], np.int64), table.reshape(1, -1))
            ck.copy_ranges_gpu(out, [0], [2 * n], levels, [2 * pos])

    # 8. variable-width values, then their validation (offsets in order and in bounds,
    #    UTF-8 for string columns)
    var_offsets, var_bytes, n_bytes = _variable(arena, unit, src_start, src_len, bytes_into, var_bound)
    sized = bytes_into is not None or (var_bound is not None and unit.nslots > 0)  # (n_bytes a bound)
    cudf = _check_variable(unit, var_offsets, var_bytes, n_bytes, var_columns, offsets_into,
                           bound=int(var_bytes.shape[0]) if sized else None)
    return UnitBuffers(fixed, levels, var_offsets, var_bytes, cudf)


def _check_variable(unit: UnitPlan, offsets, data, n_bytes: int, columns: Sequence[tuple[int, int]] = (),
                    into: OffsetsInto | None = None, bound: int | None = None) -> list[CudfOffsets]:
    """One launch over every variable-width value of the unit (``n_bytes``: their total;
    ``bound``: the bytes of ``data`` the offsets may reach, ``n_bytes`` where None, else
    the read's bytes arena the unit wrote into, :class:`BytesInto`); a bad value raises
    ``CorruptFileError`` naming its file, column and page.  The pages are the per-page entries (:attr:`UnitPlan.var_checks`) then the
    leaves planned as tables (:attr:`UnitPlan.var_check_rows`, arrays per leaf).

    The same launch writes the offsets of each of ``columns`` (``(first slot, slots)``) in
    cuDF's layout, int32 from 0, into one buffer (each column's ``slots + 1`` after the
    previous one's): every value's offset less its column's first.  That is what
    ``to_cudf`` of a one-unit read hands out (combining neither rebases nor copies them).
    A column whose slots the checked pages do not cover exactly once is left out (as are
    empty ones, and every column of a unit of more than :data:`OFFSETS32_MAX` bytes: the
    width is then the column's own, which only combining knows).  ``into``: the columns
    whose offsets go to a read's offsets arena instead (:data:`OffsetsInto`; one whose
    earlier bytes and the unit's may pass :data:`OFFSETS32_MAX` is left out)."""
    checks = [c for c in unit.var_checks if c[1]]
    blocks = unit.var_check_rows
    slot = np.concatenate([np.array([c[0] for c in checks], np.int64), *(b[0] for b in blocks)])
    count = np.concatenate([np.array([c[1] for c in checks], np.int64), *(b[1] for b in blocks)])
    utf8 = np.concatenate([np.array([c[2] for c in checks], np.bool_), *(np.full(b[0].size, b[2], np.bool_) for b in blocks)])
    held = count > 0
    if not held.any():
        return []
    at = np.flatnonzero(held)  # the entries checked, in slot order: a bad one's index maps back through this
    at = at[np.argsort(slot[at], kind="stable")]
    if into is not None:
        into = (into[0], [t if t is not None and t[3] + n_bytes <= OFFSETS32_MAX else None for t in into[1]])
    rebased, cudf = _rebased(slot[at], count[at], columns if n_bytes <= OFFSETS32_MAX else (), into)
    edges = np.cumsum([len(checks)] + [b[0].size for b in blocks])

    def bad_value(bad: int) -> CorruptFileError:
        k = int(at[bad])
        if k < len(checks):
            _s, _n, is_utf8, path, column, page = checks[k]
        else:
            b = int(np.searchsorted(edges, k, side="right")) - 1
            _sl, _cn, is_utf8, path, column, pages = blocks[b]
            page = int(pages[k - int(edges[b])])
        what = "invalid utf-8 sequence" if is_utf8 else "variable-width offsets out of order or out of bounds"
        return CorruptFileError(path, f"column {column} page {page}: {what} (device decode)")

    # read back only if a value is bad (with the unit's other error flags)
    ck.check_variable_segments_gpu(offsets, data, n_bytes if bound is None else bound, slot[at], count[at], utf8[at],
                                   on_bad=bad_value, rebased=rebased)
    return cudf


def _rebased(slot: np.ndarray, count: np.ndarray, columns: Sequence[tuple[int, int]],
             into: OffsetsInto | None = None) -> tuple[tuple | None, list[CudfOffsets]]:
    """The ``rebased`` argument of ``check_variable_segments_gpu`` for the checked segments
    ``(slot, count)`` (ascending, non-empty) and the columns they cover exactly (each
    column's segments one after the other from its first slot to its last), with those
    columns' :class:`CudfOffsets` in one int32 buffer; with ``into``, in the read's offsets
    arena at the unit's rows, shifted (the columns it places; no other)."""
    base = np.full(slot.size, -1, np.int64)
    end = np.zeros(slot.size, np.int64)
    dst = np.zeros(slot.size, np.int64)
    shift = np.zeros(slot.size, np.int64)
    kept: list[tuple[int, int, int, int, int]] = []  # (first slot, slots, first entry, entries, row of the first slot)
    size = 0
    for c, (lo, n) in enumerate(columns):
        a, b = np.searchsorted(slot, [lo, lo + n])
        seg_end = slot[a:b] + count[a:b]
        if not n or b == a or slot[a] != lo or seg_end[-1] != lo + n or np.any(slot[a + 1 : b] != seg_end[:-1]):
            continue  # not covered exactly once
        if into is not None:
            target = into[1][c]
            if target is None:
                continue
            first, rows, row, earlier = target
            base[a:b] = lo
            end[a:b] = lo + n
            dst[a:b] = first + row + slot[a:b] - lo
            shift[a:b] = earlier
            kept.append((lo, n, first, rows + 1, row))
            continue
        base[a:b] = lo
        end[a:b] = lo + n
        dst[a:b] = size + slot[a:b] - lo
        kept.append((lo, n, size, n + 1, 0))
        size += n + 1
    if not kept:
        return None, []
    out = into[0] if into is not None else _array.empty(size, np.int32)
    return (out, base, end, dst, shift), [CudfOffsets(lo, n, out[at : at + m], row) for lo, n, at, m, row in kept]


def _width_fill(counts: np.ndarray, widths: np.ndarray) -> list[tuple[int, int, bytes]]:
    """Fill items setting ``len[i] = width`` of each dictionary page's indices."""
    out = []
    pos = 0
    for c, w in zip(counts.tolist(), widths.tolist()):
        if c:
            out.append((8 * pos, 8 * c, int(w).to_bytes(8, "little")))
        pos += c
    return out


def _run_rle(arena, vbits: int, lst, dest) -> None:
    """Gather the runs of every RLE chunk of one value width, expand them in one launch
    (which checks that each chunk's runs add up to its values), and copy each chunk's
    expansion to its column (one copy per destination array)."""
    a = lst.arrays()
    vb = vbits // 8
    nruns = a["nruns"]
    total_runs = int(nruns.sum())
    first_run = np.zeros(nruns.size + 1, np.int64)
    np.cumsum(nruns, out=first_run[1:])
    # the run values, then (8-byte aligned) the run lengths, gathered in one launch
    head = -(-max(total_runs, 1) * vb // 8) * 8
    both = _array.empty(head + max(total_runs, 1), np.uint8)
    vals = both[: max(total_runs, 1) * vb].view(_UINT[vbits])
    runs = both[head : head + max(total_runs, 1)]
    ck.copy_ranges_gpu(arena, np.concatenate([a["vals"], a["runs"]]), np.concatenate([nruns * vb, nruns]), both,
                       np.concatenate([first_run[:-1] * vb, head + first_run[:-1]]))
    first = np.zeros(a["count"].size + 1, np.int64)
    np.cumsum(a["count"], out=first[1:])
    # every chunk's runs must add up to its count (else its values would land in the next):
    # checked on the device, with the expansion
    expanded = _array.empty(max(int(first[-1]), 1), _UINT[vbits])
    rle_kernels.rle_chunks(vals, runs, first_run, first, expanded)
    for k, name in enumerate(_DESTS):
        sel = np.flatnonzero(a["dest"] == k)
        if sel.size:
            ck.copy_ranges_gpu(expanded, first[sel] * vb, a["count"][sel] * vb, dest(name), a["dst"][sel])


def _variable(arena, unit: UnitPlan, src_start, src_len, into: BytesInto | None = None, bound: int | None = None):
    """Lengths, one scan, then the plain bytes and the FSST strings of every slot: into a
    buffer of the unit's own, or with ``into`` into the read's bytes arena (the offsets then
    bytes of it: :class:`BytesInto`).  A buffer of the unit's own is ``bound`` bytes where
    the host bounds them (:func:`_var_bound`; the scan's total not read back: a total past
    the bound is corrupt input, flagged by the copy, the FSST decode and the offsets check
    and raised with the unit's other flags), else the total read back.  Returns ``(offsets,
    bytes, the unit's bytes or their bound)``."""
    n = unit.nslots
    if not n:
        if into is None:
            return _array.zeros(1, np.int64), _array.empty(1, np.uint8), 0
        data, _pos = into.reserve(np.zeros(len(into.columns), np.int64))  # empty columns: nothing to place
        into.placed = True
        return _array.zeros(1, np.int64), data, 0
    out_len = copy_len = src_len[:n]  # plain bytes: each slot's length is its span's
    if unit.fsst:
        both = _array.empty(2 * n, np.int64)  # decoded lengths, then the bytes to copy: one launch
        ck.copy_ranges_gpu(src_len, [0, 0], [8 * n, 8 * n], both, [0, 8 * n])
        out_len, copy_len = both[:n], both[n:]
        seg_bounds, table_pos, nsym = _fsst_segments(unit)
        ck.fsst_lengths_segments_gpu(arena, table_pos, nsym, arena, src_start[:n], src_len[:n], seg_bounds, out_len)
        # FSST slots are written by the decode pass, not copied; end slots (into) are empty
        ends = into.ends() if into is not None else []
        _fill(both.view(np.uint8), [(8 * (n + lo), 8 * (hi - lo), bytes(8)) for lo, hi, *_ in unit.fsst]
              + [(8 * (h + e), 8, bytes(8)) for e in ends for h in (0, n)])
    if into is None and bound is not None:
        offsets, total = _device.exclusive_scan_device(out_len), bound
        data = _array.empty(max(total, 1), np.uint8)
    elif into is None:
        offsets, total = _device.exclusive_scan(out_len)
        data = _array.empty(max(total, 1), np.uint8)
    elif into.bounded(unit):
        offsets, total, data = _into_room(out_len, n, into)
    else:
        offsets, total, data = _into_arena(out_len, n, into)
    if total:
        ck.copy_ranges_gpu(arena, src_start[:n], copy_len, data, offsets[:n], max_total=total)  # plain bytes <= all bytes
    if unit.fsst and total:
        ck.fsst_decode_segments_gpu(arena, table_pos, arena, src_start[:n], src_len[:n], seg_bounds, offsets, data)
    return offsets, data, int(total)


def _into_arena(out_len, n: int, into: BytesInto) -> tuple[DeviceArray, int, DeviceArray]:
    """Scan the unit's lengths; read back each column's end (the scan at its end slot, and at
    ``n`` for the last: one copy, gathered by one launch where there are several columns);
    reserve the columns' bytes in the read's arena (``into.reserve``); rebase the offsets in
    place to bytes of it, each column's slots and its end slot from the column's first byte
    (one launch).  Returns ``(offsets, the unit's bytes, the arena)``."""
    ends = np.array([*into.ends(), n], np.int64)
    if ends.size == 1:
        offsets, total = _device.exclusive_scan(out_len)
        at_end = np.array([total], np.int64)
    else:
        offsets = _device.exclusive_scan_device(out_len)
        got = _array.empty(ends.size, np.int64)
        ck.copy_ranges_gpu(offsets, 8 * ends, np.full(ends.size, 8, np.int64), got, 8 * np.arange(ends.size, dtype=np.int64))
        at_end = _array.to_host(got).astype(np.int64)
    first = np.concatenate([[0], at_end[:-1]]).astype(np.int64)
    data, pos = into.reserve(at_end - first)
    into.placed = True
    lo = np.array([c[0] for c in into.columns], np.int64)
    count = np.array([c[1] + 1 for c in into.columns], np.int64)  # its slots and the end (slot, or n)
    rebase_offsets_segments_gpu(offsets, lo, count, first, np.asarray(pos, np.int64), np.zeros(lo.size, np.int64), offsets, lo)
    return offsets, int(at_end[-1]), data


def _into_room(out_len, n: int, into: BytesInto) -> tuple[DeviceArray, int, DeviceArray]:
    """:func:`_into_arena` where the host bounds each column's bytes (``into.room``): the
    scan's total read back as ever, no column end; the offsets rebased from each column's
    first on the device (the check kernel's rebase, offsets validated on the way) into a
    buffer of their own.  Returns ``(offsets, the unit's bytes, the arena)``."""
    assert into.room is not None
    scanned, total = _device.exclusive_scan(out_len)
    data, pos = into.room()
    into.placed, into.exact = True, False
    lo = np.array([c[0] for c in into.columns], np.int64)
    count = np.array([c[1] for c in into.columns], np.int64)
    offsets = _array.empty(n + 1, np.int64)

    def bad(_k: int) -> CorruptInputError:
        return CorruptInputError("variable-width offsets out of order or out of bounds (device decode)", ERR_OUT_OF_BOUNDS)

    ck.check_variable_segments_gpu(scanned, data, total, lo, count, np.zeros(lo.size, np.bool_), on_bad=bad,
                                   rebased=(offsets, lo, lo + count, lo, np.asarray(pos, np.int64)))
    return offsets, int(total), data


def _fsst_segments(unit: UnitPlan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The FSST pages as ``[lo, hi)`` slot ranges, the arena byte of each one's symbol table
    (staged with its leaf's others, :func:`lance_gpu.file.encodings.fsst.gpu_plan.stage_tables`) and its symbol count."""
    segs = np.array(sorted(unit.fsst), np.int64).reshape(-1, 4)
    return segs[:, :2], segs[:, 2], segs[:, 3]
