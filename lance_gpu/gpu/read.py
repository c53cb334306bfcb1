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
:data:`UNIT_TARGET_BYTES` so that there is something to overlap.  The job's selected rows
(live rows, a take, late-materialized rows) are selected on the host
(:class:`~lance_gpu.gpu.gathered.Gathered`: each field's positions among the rows it
decoded), and a filter (:func:`lance_gpu.scan.execute.filter_device`, on a host copy of the
columns it reads only) narrows that selection; the rows are written once, where the read is
combined (``to_cudf``: into its final buffers, :mod:`.combine`) or first used.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cuda_kernels import _device
from cuda_kernels.errors import CorruptInputError, deferred_errors
from lance_gpu.errors import CorruptFileError, CpuDecodeWarning, UnsupportedEncodingError
from lance_gpu.file.container import FileVersion
from lance_gpu.gpu import _array, headers, memory, passplan
from lance_gpu.gpu._array import DeviceArray
from lance_gpu.gpu.assemble import build_fields
from lance_gpu.gpu.columns import DeviceColumn
from lance_gpu.gpu.decode import decode_unit
from lance_gpu.gpu.device_table import DeviceTable
from lance_gpu.gpu.gathered import Gathered
from lance_gpu.gpu.plan import FieldPlan, LeafPlan, UnitPlan, Unsupported, output_columns, place_values, plan_field_leaves
from lance_gpu.gpu.rows import plan_field_rows, positions
from lance_gpu.table.blob_descriptions import blob_kind

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
            if reader.version.major == 0:
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


def _estimate(fp: FieldPlan) -> int:
    """Device bytes a field's decode needs, about: its pages' buffers (deferred ones too)
    and its outputs (no page is read: the leaves' totals)."""
    return sum(leaf.page_bytes + leaf.num_values * max(leaf.width, 16) + 4 * leaf.num_levels for leaf in fp.leaves)


def _unit_cap(frags: list[_Frag], budget: int) -> int:
    """The estimate a unit may reach: the whole budget when everything fits one unit; else
    half of it (the next unit is staged while one decodes), at most UNIT_TARGET_BYTES."""
    total = sum(_estimate(fp) for fw in frags for fp in fw.gpu.values())
    if total <= min(budget, UNIT_TARGET_BYTES):
        return budget
    return max(min(budget // 2, UNIT_TARGET_BYTES), 1)


def _units(frags: list[_Frag], budget: int) -> Iterator[list[tuple[int, FieldPlan]]]:
    """Pack (fragment, field) plans into units whose estimate fits the budget (a plan
    larger than the budget is a unit of its own)."""
    unit: list[tuple[int, FieldPlan]] = []
    size = 0
    for k, fw in enumerate(frags):
        for fp in fw.gpu.values():
            est = _estimate(fp)
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


def _stage(items: list[tuple[int, FieldPlan]]) -> _Staged:
    """Plan a unit's pages and copy its bytes to the device (runs in the staging thread):
    each column's value regions adjacent across the fragments (:func:`_columns`), then the
    same column of its fragments placed as one table (:func:`passplan.place_unit`)."""
    with _array.nvtx_range("lance_gpu.plan_unit"):
        unit = UnitPlan()
        for column in _columns(items):
            for j, leaf in enumerate(column):
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
            out.append((lo, end - lo))
    return out


def _decode(items: list[tuple[int, FieldPlan]], staged: _Staged | None = None) -> list[DeviceColumn]:
    if staged is None:
        staged = _stage(items)
    # every launch's corruption flag is read back once, at the end of the unit
    with deferred_errors():
        with _array.nvtx_range("lance_gpu.decode"):
            bufs = decode_unit(staged.unit, staged.arena, _var_columns(items))
        with _array.nvtx_range("lance_gpu.assemble"):
            return build_fields([fp for _k, fp in items], bufs)


def _decode_located(items: list[tuple[int, FieldPlan]], staged: _Staged | None = None) -> list[DeviceColumn]:
    """Decode a unit; a kernel's corruption flag becomes a CorruptFileError naming the file
    (a unit spanning several files is decoded again file by file to find it)."""
    try:
        return _decode(items, staged)
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
) -> Iterator[tuple[object, DeviceTable]]:
    """Decode ``fields`` (``LanceField``s) of each ``(fragment, rows)`` job on the GPU, in
    job order: the fragment's pages are decoded, then the sorted physical ``rows`` (None:
    every row) are gathered on the device.  Yields ``(fragment, DeviceTable)``.
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
        pending = 0  # next fragment to hand out
        remaining = [len(fw.gpu) for fw in frags]

        def finish(k: int) -> DeviceTable:
            with _array.legacy_stream(), _device.pinned_uploads(), _array.nvtx_range("lance_gpu.finish"):
                table = _finish_fragment(frags[k], names, hold)
                _array.sync_kernels()  # the caller may use it from any stream
            return table

        units = _units(frags, _unit_cap(frags, budget))
        first = next(units, None)
        ahead: Future | None = stager.submit(_stage, first) if first is not None else None
        while ahead is not None:
            staged = ahead.result()
            following = next(units, None)
            # the next unit's host gathering and copies overlap this unit's kernels
            ahead = stager.submit(_stage, following) if following is not None else None
            # kernel arguments go up through pinned memory without waiting for the device
            with _array.legacy_stream(), _device.pinned_uploads():
                cols = _decode_located(staged.items, staged)
                _array.sync_kernels()  # its arena is freed now: no kernel may still read it
            for (k, fp), col in zip(staged.items, cols):
                frags[k].done[fp.name] = col
                remaining[k] -= 1
            del staged
            while pending < len(frags) and remaining[pending] == 0:
                done = finish(pending)
                yield frags[pending].frag, done
                frags[pending] = _Frag(frags[pending].frag, None)  # let its columns go
                pending += 1
        while pending < len(frags):
            done = finish(pending)
            yield frags[pending].frag, done
            pending += 1
