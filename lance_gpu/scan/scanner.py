# SPDX-License-Identifier: Apache-2.0
"""``LanceScanner``: pylance's scanner over a :class:`~lance_gpu.scan.plan.ScanPlan`.

A scanner holds a plan (built once by ``ds.scanner(...)``) and runs it with the executor of
the plan's device.  It pickles as its plan: a worker process reopens the pinned version.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lance_gpu import scan
from lance_gpu._device import DEVICES, gpu_unusable_reason, resolve_device
from lance_gpu.errors import GpuUnavailableError, InvalidArgumentError, UnknownDeviceError
from lance_gpu.scan.execute import (
    STREAM_WINDOW_ROWS,
    GpuExecutor,
    _Offsets,
    concat,
    executor_for,
    open_snapshot,
    plan_units,
    rebatch,
    run_plan,
)
from lance_gpu.scan.plan import ROW_OFFSET, ScanPlan, build_plan, resolve

if TYPE_CHECKING:
    from lance_gpu.gpu.device_table import DeviceTable
    from lance_gpu.table.snapshot import TableSnapshot


class LanceScanner:
    """A planned read: ``to_table``, ``to_batches``, ``to_reader``, ``count_rows``, ``head``,
    ``projected_schema``, ``dataset_schema``, ``explain_plan``; and on the GPU
    ``to_cudf`` / ``to_device_batches``."""

    def __init__(self, plan: ScanPlan, snapshot: TableSnapshot | None = None, *, on_cpu_fallback: str = "warn") -> None:
        self.plan = plan
        self._snapshot = snapshot
        self.on_cpu_fallback = on_cpu_fallback

    def __reduce__(self) -> tuple[Any, ...]:
        return (LanceScanner, (self.plan, None), {"on_cpu_fallback": self.on_cpu_fallback})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.on_cpu_fallback = state["on_cpu_fallback"]

    def __repr__(self) -> str:
        return f"LanceScanner({self.plan.uri!r}, version={self.plan.version})"

    @property
    def snapshot(self) -> TableSnapshot:
        """The table snapshot the plan reads (reopened from the plan after unpickling)."""
        if self._snapshot is None:
            self._snapshot = open_snapshot(self.plan.uri, self.plan.version, self.plan.storage_options)
        return self._snapshot

    @property
    def projected_schema(self) -> pa.Schema:
        """The schema of what the scan returns."""
        return resolve(self.plan, self.snapshot).schema

    @property
    def dataset_schema(self) -> pa.Schema:
        """The schema of the dataset version scanned."""
        return self.snapshot.schema

    def explain_plan(self, verbose: bool = False) -> str:
        """What the scan reads: fragments, rows, projection, filter, limits, batching."""
        text = self.plan.describe()
        if self.plan.nearest is not None:
            text += "\n" + "\n".join(scan.vector_index.describe_search(self.plan, self.snapshot))
        if verbose:
            resolved = resolve(self.plan, self.snapshot)
            # pylance's LanceRead names the fields it reads (filter columns included) "projection"
            text += f"\n  LanceRead: projection=[{', '.join(f.name for f in resolved.read_fields)}]"
            text += f", virtual={sorted(resolved.virtual)}, output={resolved.schema.names}"
        return text

    def analyze_plan(self) -> str:
        """Run the scan and report what it did (pylance's ``analyze_plan``): the plan's
        ``LanceRead`` line with ``metrics=[output_rows, elapsed_compute, fragments_scanned,
        ranges_scanned, rows_scanned, bytes_read, iops, requests]``.

        ``rows_scanned`` counts the rows the read decoded (after scalar indices narrowed
        them, before the filter); ``bytes_read`` / ``iops`` / ``requests`` are the store's
        read counters across the run (reads other threads make on the same store at the
        same time are counted too).  A nearest-neighbour search reports its result rows.
        """
        plan, ds = self.plan, self.snapshot
        resolved = resolve(plan, ds)
        units = plan_units(plan, ds, None)
        before = ds.store.stats.snapshot()
        start = time.perf_counter()
        output_rows = self.to_table().num_rows
        elapsed = time.perf_counter() - start
        after = ds.store.stats.snapshot()
        reads = after["gets"] - before["gets"]
        metrics = (
            f"output_rows={output_rows}, elapsed_compute={elapsed * 1e3:.3f}ms, "
            f"fragments_scanned={len({u.fragment.fragment_id for u in units})}, ranges_scanned={len(units)}, "
            f"rows_scanned={sum(u.num_rows for u in units)}, bytes_read={after['bytes_read'] - before['bytes_read']}, "
            f"iops={reads}, requests={after['requests'] - before['requests']}"
        )
        fields = ", ".join(f.name for f in resolved.read_fields)
        return (
            f"AnalyzeExec verbose=true, elapsed={elapsed * 1e3:.3f}ms, metrics=[]\n"
            f"  LanceRead: elapsed={elapsed * 1e3:.3f}ms, uri={plan.uri}, projection=[{fields}], "
            f"num_fragments={len(plan.fragment_ids)}, row_id={str(plan.with_row_id).lower()}, "
            f"row_addr={str(plan.with_row_address).lower()}, "
            f"full_filter={plan.filter if plan.filter is not None else '--'}, metrics=[{metrics}]"
        )

    def _executor(self):
        return executor_for(self.plan.device, self.on_cpu_fallback)

    def to_table(self) -> pa.Table:
        """Every row of the scan in one table."""
        if self.plan.nearest is not None:
            return scan.nearest.run_search(self.plan, self.snapshot, self._executor())
        tables = list(run_plan(self.plan, self._executor(), self.snapshot))
        return concat(tables, self.projected_schema)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Stream the scan in batches of at most ``batch_size`` rows (exactly, but for the
        last, with ``strict_batch_size``).  Windows of rows decode ahead of the consumer in
        threads: ``batch_readahead`` batches' worth and at least ``fragment_readahead``
        units (fragments, or windows of large ones); memory is bounded by that many windows.
        On the GPU, fragments go through the staging pipeline (next unit staged while one
        decodes)."""
        plan = self.plan
        if plan.nearest is not None:
            # a search's k rows come as one batch, as pylance gives them
            return iter(self.to_table().combine_chunks().to_batches())
        size = plan.batch_size
        window = size * max(1, -(-STREAM_WINDOW_ROWS // size))
        # units in flight: batch_readahead batches' worth of windows, and at least
        # fragment_readahead units (a unit is at most one window of one fragment)
        ahead = max(1, -(-plan.batch_readahead * size // window), plan.fragment_readahead)
        # loose batches end where fragments end, as pylance's do
        tables = run_plan(plan, self._executor(), self.snapshot, window=window, ahead=ahead,
                          unit_edges=not plan.strict_batch_size)
        return rebatch(tables, size, plan.strict_batch_size)

    def to_reader(self) -> pa.RecordBatchReader:
        """A ``pyarrow.RecordBatchReader`` over :meth:`to_batches`."""
        return pa.RecordBatchReader.from_batches(self.projected_schema, self.to_batches())

    def count_rows(self) -> int:
        """Rows the scan returns (pylance refuses a limit or offset here)."""

        if self.plan.limit is not None or self.plan.offset or self.plan.window_pushed:
            raise InvalidArgumentError("Cannot use limit/offset with aggregate. Apply limit to the result instead.")
        if self.plan.nearest is not None:
            return self.to_table().num_rows
        if self.plan.filter is None and all(s is None for s in self.plan.selections) and not self.plan.include_deleted_rows:
            snapshot = self.snapshot
            # the manifest's counts, each checked once against its data file's footer
            return sum(snapshot.fragment(i).live_count() for i in self.plan.fragment_ids)
        # Counting needs no output column: only the filter's columns are decoded.
        counting = replace(self.plan, columns=(), with_row_id=False, with_row_address=False)
        return sum(t.num_rows for t in run_plan(counting, self._executor(), self.snapshot))

    def head(self, num_rows: int) -> pa.Table:
        """The first ``num_rows`` rows of the scan."""
        plan = self.plan
        limit = num_rows if plan.limit is None else min(num_rows, plan.limit)
        if plan.filter is None and plan.nearest is None:
            # re-plan the window over the fragments / selections this plan reads
            ds = self.snapshot
            sel = dict(zip(plan.fragment_ids, plan.selections, strict=True))
            new = build_plan(ds, columns=_columns_arg(plan), selections=sel, limit=limit,
                             with_row_id=plan.with_row_id, with_row_address=plan.with_row_address,
                             include_deleted_rows=plan.include_deleted_rows, batch_size=plan.batch_size, device=plan.device)
        else:
            new = replace(plan, limit=limit)
        return LanceScanner(new, self._snapshot, on_cpu_fallback=self.on_cpu_fallback).to_table()

    # -- GPU outputs ---------------------------------------------------------------------------

    def to_device_batches(self, batch_size: int | None = None) -> Iterator[DeviceTable]:
        """The scan's columns as ``DeviceTable``s whose columns stay in device memory (needs
        a usable GPU: ``GpuUnavailableError`` otherwise): batches of exactly ``batch_size``
        rows across fragment ends (the last may be shorter), or, without ``batch_size``, one
        per fragment read.

        Parameters
        ----------
        batch_size : int, optional
            Rows per batch: a read that fits the device memory budget is combined once on
            the device and every batch is a view of the combined columns (so the first batch
            comes once the read is decoded); a larger read goes fragment by fragment, a batch
            spanning fragments combined on its own
            (:func:`lance_gpu.gpu.device_table.rebatch_device`).
        """
        tables = self._device_tables()
        if batch_size is None:
            yield from tables
            return
        from lance_gpu.gpu.device_table import rebatch_device

        yield from rebatch_device(tables, self.projected_schema, int(batch_size))

    def _device_tables(self, whole_read: bool = False) -> Iterator[DeviceTable]:
        """The read's device tables, one per fragment; ``whole_read``: the caller keeps them
        all and combines them (``to_cudf``), so a read with no filter decodes its units'
        fixed-width values into the read's final buffers (``GpuExecutor.whole_read``)."""

        resolve_device("gpu")
        ds = self.snapshot
        plan = self.plan
        if plan.nearest is not None:  # the search's k rows per query, as one device table
            yield scan.nearest_device.device_result(scan.nearest.run_search(plan, ds, GpuExecutor(self.on_cpu_fallback)))
            return
        resolved = resolve(plan, ds)
        executor = GpuExecutor(self.on_cpu_fallback, whole_read=whole_read and resolved.filter is None)
        units = plan_units(plan, ds, None)
        skip, left = plan.offset, plan.limit
        offsets = _Offsets(ds) if ROW_OFFSET in resolved.virtual else None
        for out in executor.run_device(ds, units, resolved, offsets):
            if skip or left is not None:
                start = min(skip, out.num_rows)
                skip -= start
                stop = out.num_rows if left is None else min(out.num_rows, start + left)
                out = out.slice(start, stop)
                if left is not None:
                    left -= stop - start
            yield out
            if left == 0:
                return

    def to_cudf(self):
        """The scan as one ``cudf.DataFrame`` decoded on the GPU (``GpuUnavailableError``
        without a usable GPU or cuDF): every column's buffers are allocated once for the
        whole read, in cuDF's layout (:func:`lance_gpu.gpu.combine.combine_read`), and
        wrapped without a copy: no frame per fragment, no ``cudf.concat``."""

        reason = gpu_unusable_reason()
        if reason is not None:
            raise GpuUnavailableError(f"to_cudf needs a usable GPU: {reason}")
        try:
            import cudf  # noqa: F401
        except ImportError as exc:
            raise GpuUnavailableError(f"to_cudf needs cuDF ({exc})") from exc
        from lance_gpu.gpu._cudf import combined_to_cudf

        schema = self.projected_schema
        cols, rows = self.to_cudf_columns()
        return combined_to_cudf(list(schema.names), cols, rows)

    def to_cudf_columns(self) -> tuple[list, int]:
        """The columns ``to_cudf`` wraps (``lance_gpu.gpu.combine.CudfColumn``s) and the row
        count: the whole read in cuDF's layout, without cuDF."""
        from lance_gpu.gpu.combine import combine_read

        tables = list(self._device_tables(whole_read=True))
        return combine_read(tables, self.projected_schema), sum(t.num_rows for t in tables)


def scanner_for(snapshot: TableSnapshot, *, device: str | None = None, on_cpu_fallback: str = "warn",
                **arguments: Any) -> LanceScanner:
    """A scanner over ``snapshot``: pylance's scanner ``arguments`` checked and planned
    (:func:`~lance_gpu.scan.plan.build_plan`); ``device`` "auto" (the default), "gpu" or
    "cpu", anything else :class:`~lance_gpu.errors.UnknownDeviceError`."""
    if device is not None and device not in DEVICES:
        raise UnknownDeviceError(f"device must be one of {DEVICES}, not {device!r}")
    return LanceScanner(build_plan(snapshot, device=device, **arguments), snapshot, on_cpu_fallback=on_cpu_fallback)


def _columns_arg(plan: ScanPlan) -> Any:
    if plan.columns is None:
        return None
    if all(e is None for _n, e in plan.columns):
        return [n for n, _e in plan.columns]
    return {n: (n if e is None else e) for n, e in plan.columns}
