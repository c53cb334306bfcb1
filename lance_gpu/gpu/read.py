# SPDX-License-Identifier: Apache-2.0
"""The GPU read path end to end: fragments -> plans -> units -> device columns -> results.

For every fragment and requested field the table layer says where the field lives (as on
the CPU).  Fields whose pages the GPU decodes are planned (:mod:`.plan`); the others are read
by the CPU reader in a thread pool meanwhile and kept as Arrow arrays (:class:`CpuDecodeWarning`
once per reason, or :class:`~lance_gpu.errors.UnsupportedEncodingError` with
``on_cpu_fallback="raise"``).  Planned fields are packed into *units* that fit the device
memory budget (:mod:`.memory`); each unit is staged and decoded with one launch per kernel
family (:mod:`.decode`), then cut into columns (:mod:`.assemble`).  Units are pipelined: a
staging thread plans the next unit and copies its file bytes to the device (pinned slabs,
non-blocking streams) while the current unit's kernels run, so when a read spans several
units each unit is at most half the budget, and a large read is cut into units of about
:data:`UNIT_TARGET_BYTES` so that there is something to overlap.  Deleted rows are dropped
on the device (``cuda_kernels.compact``: keep mask, kept indices, gathers); a filter is
evaluated on a host copy of the columns it reads only, and the surviving rows are gathered
on the device.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import cuda_kernels as ck
from cuda_kernels.errors import CorruptInputError
from lance_gpu.errors import CorruptFileError, CpuDecodeWarning, GpuUnavailableError, UnsupportedEncodingError
from lance_gpu.file.container import FileVersion
from lance_gpu.gpu import _array, memory
from lance_gpu.gpu.assemble import build_field
from lance_gpu.gpu.columns import DeviceColumn, DeviceTable
from lance_gpu.gpu.decode import decode_unit
from lance_gpu.gpu.plan import FieldPlan, UnitPlan, Unsupported, place_leaf, plan_field_leaves

FALLBACK_MODES = ("warn", "raise", "allow")
# Units of a multi-unit read: big enough that launches and syncs per unit do not matter,
# small enough that staging the next one overlaps decoding this one.
UNIT_TARGET_BYTES = 256 << 20
_ROW = "__lance_gpu_row__"
_THREADS = 4

_warned: set[str] = set()


@dataclass(slots=True)
class _Frag:
    frag: object  # LanceFragment
    gpu: dict[str, FieldPlan] = field(default_factory=dict)
    cpu: dict[str, Future] = field(default_factory=dict)
    done: dict[str, DeviceColumn] = field(default_factory=dict)


def _check_mode(mode: str) -> None:
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


def _plan_fragment(ds, frag, fields, arrow_fields, mode: str, pool: ThreadPoolExecutor, seen: dict) -> _Frag:
    out = _Frag(frag)
    for f in fields:
        af = arrow_fields[f.name]
        src = frag._source(f)
        reason = None
        if src is not None:
            reader = frag._reader(src.path)
            if reader.version == FileVersion(2, 0):
                reason = "file format 2.0 pages"
            else:
                try:
                    leaves = plan_field_leaves(reader, af, src.columns)
                except Unsupported as exc:
                    reason = str(exc)
                else:
                    out.gpu[f.name] = FieldPlan(-1, f.name, af, leaves, frag.physical_rows)
                    continue
            _fallback(mode, src.path, f.name, reason, seen)
        # CPU reader: fields without a GPU plan, and fields with no data in this fragment
        out.cpu[f.name] = pool.submit(frag.read_field, f, af, frag.rows_to_read())
    return out


def _estimate(fp: FieldPlan) -> int:
    total = 0
    for leaf in fp.leaves:
        for page in leaf.pages:
            total += sum(b.size for b in page.buffers)
        total += leaf.num_values * max(leaf.width, 16) + 4 * leaf.num_levels
    return total


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
    arena: object  # the unit's staged bytes on the device


def _stage(items: list[tuple[int, FieldPlan]]) -> _Staged:
    """Plan a unit's pages and copy its bytes to the device (runs in the staging thread)."""
    unit = UnitPlan()
    for _k, fp in items:
        for leaf in fp.leaves:
            place_leaf(unit, leaf)
    return _Staged(items, unit, unit.stage.upload())


def _decode(items: list[tuple[int, FieldPlan]], staged: _Staged | None = None) -> list[DeviceColumn]:
    if staged is None:
        staged = _stage(items)
    bufs = decode_unit(staged.unit, staged.arena)
    return [build_field(fp, bufs) for _k, fp in items]


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


def _kept_indices(frag):
    """Device indices of the fragment's rows that are not deleted (None: nothing deleted)."""
    deleted = frag.deleted_rows
    if deleted.size == 0:
        return None
    try:
        mask = ck.keep_mask_from_deleted_gpu(frag.physical_rows, _array.upload(np.asarray(deleted, np.int64)))
    except CorruptInputError as exc:
        raise CorruptFileError(frag._ds.uri, f"fragment {frag.fragment_id}: deletion file ({exc})") from exc
    return _array.as_device(ck.compact.kept_indices_gpu(mask))


def _finish_fragment(fw: _Frag, names: list[str], with_row_id: bool, compiled) -> DeviceTable:
    frag = fw.frag
    live = frag.live_rows
    kept = _kept_indices(frag) if any(n in fw.done for n in names) else None
    cols = []
    for name in names:
        if name in fw.done:
            col = fw.done[name]
            cols.append(col.take(kept) if kept is not None else col)
        else:
            cols.append(fw.cpu[name].result())
    n = frag.physical_rows if live is None else live.size
    ids = None
    if with_row_id:
        ids = frag.row_ids if live is None else frag.row_ids[live]
    table = DeviceTable(names, cols, n, ids, frag.fragment_id)
    if compiled is not None:
        host = {c: table.column(c) for c in compiled.columns if c in names}
        arrays = [c.to_arrow() if isinstance(c, DeviceColumn) else c for c in host.values()]
        probe = pa.Table.from_arrays(arrays + [pa.array(np.arange(n, dtype=np.int64))], names=[*host, _ROW])
        rows = compiled.apply(probe).column(_ROW).to_numpy()
        table = table.take(rows)
    return table


def scan_device(
    ds,
    fields,
    *,
    with_row_id: bool = False,
    compiled=None,
    on_cpu_fallback: str = "warn",
    fragments=None,
) -> Iterator[tuple[object, DeviceTable]]:
    """Decode ``fields`` (``LanceField``s) of every fragment on the GPU, in fragment order.

    Yields ``(fragment, DeviceTable)`` with deleted rows dropped and ``compiled`` (a
    ``CompiledFilter``) applied.
    """
    _check_mode(on_cpu_fallback)
    memory.use_rmm_if_available()
    arrow_fields = {f.name: af for f, af in zip(ds.lance_schema.fields, ds.schema)}
    names = [f.name for f in fields]
    frag_list = list(ds.fragments if fragments is None else fragments)
    with ThreadPoolExecutor(_THREADS) as pool, ThreadPoolExecutor(1) as stager:
        seen: dict[str, list[str]] = {}
        frags = [_plan_fragment(ds, frag, fields, arrow_fields, on_cpu_fallback, pool, seen) for frag in frag_list]
        _warn_fallbacks(on_cpu_fallback, seen)
        budget = memory.memory_budget()
        pending = 0  # next fragment to hand out
        remaining = [len(fw.gpu) for fw in frags]

        def finish(k: int) -> DeviceTable:
            with _array.legacy_stream():
                table = _finish_fragment(frags[k], names, with_row_id, compiled)
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
            with _array.legacy_stream():
                cols = _decode_located(staged.items, staged)
                _array.sync_kernels()  # its arena is freed now: no kernel may still read it
            for (k, fp), col in zip(staged.items, cols):
                frags[k].done[fp.name] = col
                remaining[k] -= 1
            del staged
            while pending < len(frags) and remaining[pending] == 0:
                done = finish(pending)
                yield frags[pending].frag, done
                frags[pending] = _Frag(frags[pending].frag)  # let its columns go
                pending += 1
        while pending < len(frags):
            done = finish(pending)
            yield frags[pending].frag, done
            pending += 1


def scan_tables(
    ds,
    columns: Sequence[str] | None = None,
    filter=None,
    *,
    with_row_id: bool = False,
    on_cpu_fallback: str = "warn",
) -> Iterator[pa.Table]:
    """Per fragment, the Arrow table ``LanceDataset.to_table`` would give (decoded on the
    GPU, then copied to the host)."""
    from lance_gpu.dataset import ROW_ID

    fields, projected, compiled, read_fields = ds._read_plan(columns, filter)
    keep = [f.name for f in fields]
    for _frag, dt in scan_device(ds, read_fields, with_row_id=with_row_id, compiled=compiled, on_cpu_fallback=on_cpu_fallback):
        cols = [dt.column(n) for n in keep]
        arrays = [c.to_arrow() if isinstance(c, DeviceColumn) else c for c in cols]
        if arrays:
            table = pa.Table.from_arrays(arrays, names=keep)
        else:
            table = pa.table({"_": pa.nulls(dt.num_rows)}).select([])
        if with_row_id:
            table = table.append_column(ROW_ID, pa.array(dt.row_ids, pa.uint64()))
        yield ds._finish(table, projected, columns, with_row_id)


def _project_device(ds, dt: DeviceTable, projected: pa.Schema) -> DeviceTable:
    """Columns in ``projected`` order; dotted names are struct fields, null under null structs."""
    names, cols = [], []
    for f in projected:
        if f.name in dt.names:
            col = dt.column(f.name)
        else:
            chain = ds._nested_chain(f.name)
            col = dt.column(chain[0].name)
            for child in chain[1:]:
                t = col.type
                idx = t.get_field_index(child.name)
                col = col.field(idx) if isinstance(col, DeviceColumn) else pc.struct_field(col, [idx])
        names.append(f.name)
        cols.append(col)
    return DeviceTable(names, cols, dt.num_rows, dt.row_ids, dt.fragment_id)


def device_tables(
    ds,
    columns: Sequence[str] | None = None,
    filter=None,
    *,
    with_row_id: bool = False,
    on_cpu_fallback: str = "warn",
) -> Iterator[DeviceTable]:
    """Per fragment, the requested columns (``filter``-ed, deleted rows dropped) as a
    :class:`DeviceTable` whose columns stay in device memory."""
    from lance_gpu._device import resolve_device

    resolve_device("gpu")
    fields, projected, compiled, read_fields = ds._read_plan(columns, filter)
    for _frag, dt in scan_device(ds, read_fields, with_row_id=with_row_id, compiled=compiled, on_cpu_fallback=on_cpu_fallback):
        yield _project_device(ds, dt, projected)


def to_cudf(ds, columns: Sequence[str] | None = None, filter=None, *, on_cpu_fallback: str = "warn"):
    """The dataset (or ``columns``, ``filter``-ed) as one ``cudf.DataFrame``."""
    from lance_gpu._device import gpu_unusable_reason

    reason = gpu_unusable_reason()
    if reason is not None:
        msg = f"to_cudf needs a usable GPU: {reason}"
        raise GpuUnavailableError(msg)
    try:
        import cudf
    except ImportError as exc:
        msg = f"to_cudf needs cuDF ({exc})"
        raise GpuUnavailableError(msg) from exc
    fields, projected, compiled, read_fields = ds._read_plan(columns, filter)
    frames = []
    for _frag, dt in scan_device(ds, read_fields, compiled=compiled, on_cpu_fallback=on_cpu_fallback):
        with _array.legacy_stream():
            frames.append(_project_device(ds, dt, projected).to_cudf())
    if not frames:
        return cudf.DataFrame.from_arrow(projected.empty_table())
    if len(frames) == 1:
        return frames[0]
    return cudf.concat(frames, ignore_index=True)


def read_fragments_arrow(ds, frags: list[tuple[object, np.ndarray | None]], fields, with_row_id: bool):
    """GPU twin of ``LanceDataset._read_fragments`` for whole fragments (rows None or the
    fragment's live rows): yields ``(fragment, pa.Table)`` of the fields' arrays."""
    from lance_gpu.dataset import ROW_ID

    for frag, dt in scan_device(ds, fields, with_row_id=with_row_id, fragments=[f for f, _rows in frags]):
        table = dt.to_arrow()
        if with_row_id:
            table = table.append_column(ROW_ID, pa.array(dt.row_ids, pa.uint64()))
        yield frag, table
