# SPDX-License-Identifier: Apache-2.0
"""The pass's work table: every page work item of a read unit in one host buffer, uploaded
in one asynchronous copy from pinned memory.

A unit's plan (:class:`~lance_gpu.gpu.plan.UnitPlan`) holds, per kernel family, a work list:
columns of ``int64`` values, one entry per page, chunk or block (copy ranges, unpack blocks,
boolean runs, RLE chunks, full-zip pages, string chunks, dictionary pages).  :func:`pack`
lays all of them out as a struct of arrays in one ``int64`` buffer::

    [list 0 column 0][list 0 column 1]...[list 1 column 0]...[scans]

where each ``len`` / ``count`` column is followed, in ``[scans]``, by its exclusive scan
(``n + 1`` values: where each item's work starts in the launch's flat index space).  The
lists' ``arrays()`` then return views of the buffer.  Inside
``cuda_kernels._device.work_table(buffer, scans)`` the buffer goes up once, and every
kernel wrapper that uploads one of those views (or asks for the scan of one) gets the
matching view of the device copy instead: the kernels index the one table.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.errors import CorruptFileError
from lance_gpu.gpu.plan import _Lists

#: work-list columns that kernel wrappers scan (the lengths of copy ranges, boolean runs, ...)
SCANNED = ("len", "count")


def pack_columns(columns: list[np.ndarray], scanned: list[bool]) -> tuple[np.ndarray, list[np.ndarray], dict[tuple[int, int], np.ndarray]]:
    """``columns`` (``int64``) laid out in one buffer, followed by the exclusive scans of
    those ``scanned`` marks; returns the buffer, the columns' views of it and the scans
    keyed as ``cuda_kernels._device.work_table`` expects."""
    columns = [np.asarray(c, np.int64).reshape(-1) for c in columns]
    total = sum(c.size for c in columns) + sum(c.size + 1 for c, s in zip(columns, scanned, strict=True) if s and c.size)
    host = np.empty(max(total, 1), np.int64)
    at = 0
    views = []
    for c in columns:
        host[at : at + c.size] = c
        views.append(host[at : at + c.size])
        at += c.size
    scans: dict[tuple[int, int], np.ndarray] = {}
    for v, s in zip(views, scanned, strict=True):
        if not s or not v.size:
            continue
        if int(v.min()) < 0:
            raise CorruptFileError("<work table>", "a negative length in a work list")
        prefix = host[at : at + v.size + 1]
        prefix[0] = 0
        np.cumsum(v, out=prefix[1:])
        scans[(v.ctypes.data, v.size)] = prefix
        at += v.size + 1
    return host, views, scans


def pack(lists: list[_Lists]) -> tuple[np.ndarray, dict[tuple[int, int], np.ndarray]]:
    """Lay ``lists`` out in one buffer and bind them to its views (see the module
    docstring); returns the buffer and the scans keyed as ``work_table`` expects."""
    columns = [lst.arrays() for lst in lists]
    flat = [(k, name, a) for k, cols in enumerate(columns) for name, a in cols.items()]
    host, views, scans = pack_columns([a for _k, _n, a in flat], [name in SCANNED for _k, name, _a in flat])
    bound: list[dict[str, np.ndarray]] = [{} for _ in lists]
    for (k, name, _a), v in zip(flat, views, strict=True):
        bound[k][name] = v
    for lst, b in zip(lists, bound, strict=True):
        lst.bound = b
    return host, scans


__all__ = ["SCANNED", "pack", "pack_columns"]
