# SPDX-License-Identifier: Apache-2.0
"""One scan plan, executed by every reader.

``build_plan(ds, **scanner_args) -> ScanPlan`` (picklable); ``run_plan(plan, executor)``
yields finished Arrow tables; :class:`CpuExecutor` / :class:`GpuExecutor` decode;
:class:`LanceScanner` is pylance's scanner over a plan; :func:`take_rows` and
:func:`read_rows` serve takes and the write package; :class:`RangeReader` reads live-row
ranges of single fragments (a training feed's batches).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lance_gpu._lazy import lazy_names
from lance_gpu.scan.execute import (
    CpuExecutor,
    Executor,
    GpuExecutor,
    ReadUnit,
    concat,
    decode_fields,
    decode_spans,
    executor_for,
    open_snapshot,
    plan_units,
    read_rows,
    rebatch,
    rows_where,
    run_plan,
    take_addresses,
    take_rows,
)
from lance_gpu.scan.plan import (
    ROW_ADDR,
    ROW_ID,
    ROW_OFFSET,
    ResolvedScan,
    ScanPlan,
    build_plan,
    default_batch_size,
    resolve,
)
from lance_gpu.scan.ranges import RangeReader
from lance_gpu.scan.scanner import LanceScanner, scanner_for

if TYPE_CHECKING:
    from lance_gpu.scan import flat_search as flat_search
    from lance_gpu.scan import nearest as nearest
    from lance_gpu.scan import nearest_device as nearest_device
    from lance_gpu.scan import nearest_query as nearest_query
    from lance_gpu.scan import vector_index as vector_index

# The search modules load on first use (``scan.nearest``...; :mod:`lance_gpu._lazy`): a scan
# without ``nearest`` loads none of them.
__getattr__ = lazy_names(__name__, {})

__all__ = [
    "ROW_ADDR",
    "ROW_ID",
    "ROW_OFFSET",
    "CpuExecutor",
    "Executor",
    "GpuExecutor",
    "LanceScanner",
    "RangeReader",
    "ReadUnit",
    "ResolvedScan",
    "ScanPlan",
    "build_plan",
    "concat",
    "decode_fields",
    "decode_spans",
    "default_batch_size",
    "executor_for",
    "open_snapshot",
    "plan_units",
    "read_rows",
    "rebatch",
    "resolve",
    "rows_where",
    "run_plan",
    "scanner_for",
    "take_addresses",
    "take_rows",
]
