# SPDX-License-Identifier: Apache-2.0
"""Summaries of an Nsight Systems SQLite export, for when ``nsys stats`` does not run (its
reports need the bundled Python and exporter that a machine may lack or break): CUDA kernels,
CUDA API calls and NVTX ranges (what ``nsys stats -r cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum``
prints), and memory copies by kind.

    nsys export --type sqlite -o prof.sqlite prof.nsys-rep
    python3 benchmarks/nsys_summary.py prof.sqlite [--top 25]

Tables read (as ``nsys export`` writes them; a table that is absent is reported so):
``StringIds(id, value)``; ``CUPTI_ACTIVITY_KIND_KERNEL(start, end, shortName | demangledName ->
StringIds)``; ``CUPTI_ACTIVITY_KIND_RUNTIME(start, end, nameId -> StringIds)``;
``CUPTI_ACTIVITY_KIND_MEMCPY(start, end, bytes, copyKind -> ENUM_CUDA_MEMCPY_OPER)``;
``NVTX_EVENTS(start, end, text | textId -> StringIds)``, ranges only (``end`` not null).
Times are nanoseconds in the export; printed as milliseconds (totals) and microseconds (means).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _name(db: sqlite3.Connection, table: str, *candidates: str) -> str | None:
    """SQL for a row's name: the first candidate column present (an id into StringIds, or
    text), or None."""
    cols = _columns(db, table)
    strings = bool(_columns(db, "StringIds"))
    parts = []
    for c in candidates:
        if c not in cols:
            continue
        if c == "text":
            parts.append(f"t.{c}")
        elif strings:
            parts.append(f"(SELECT value FROM StringIds WHERE id = t.{c})")
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else f"COALESCE({', '.join(parts)})"


def _summary(db: sqlite3.Connection, title: str, table: str, name_sql: str | None, top: int, where: str = "") -> list[str]:
    head = [f"== {title} ({table})"]
    if not _columns(db, table):
        return [*head, "   (absent from this export)"]
    if name_sql is None:
        return [*head, "   (no name column)"]
    rows = db.execute(
        f"SELECT {name_sql} AS name, COUNT(*), SUM(t.end - t.start), MIN(t.end - t.start), MAX(t.end - t.start) "
        f"FROM {table} AS t {where} GROUP BY name ORDER BY SUM(t.end - t.start) DESC").fetchall()
    total = sum(r[2] or 0 for r in rows) or 1
    out = [*head, f"   {'time %':>7s} {'total ms':>10s} {'count':>7s} {'mean us':>10s} {'min us':>9s} {'max us':>9s}  name"]
    for name, count, tot, lo, hi in rows[:top]:
        tot = tot or 0
        out.append(f"   {100 * tot / total:7.1f} {tot / 1e6:10.3f} {count:7d} {tot / count / 1e3:10.1f} {(lo or 0) / 1e3:9.1f} "
                   f"{(hi or 0) / 1e3:9.1f}  {name}")
    if len(rows) > top:
        out.append(f"   ... {len(rows) - top} more")
    out.append(f"   all: {sum(r[1] for r in rows)} in {total / 1e6:.3f} ms")
    return out


def _memcpy(db: sqlite3.Connection) -> list[str]:
    table = "CUPTI_ACTIVITY_KIND_MEMCPY"
    head = [f"== memory copies by kind ({table})"]
    if not _columns(db, table):
        return [*head, "   (absent from this export)"]
    kind = "(SELECT label FROM ENUM_CUDA_MEMCPY_OPER WHERE id = t.copyKind)" if _columns(db, "ENUM_CUDA_MEMCPY_OPER") else "t.copyKind"
    rows = db.execute(f"SELECT COALESCE({kind}, t.copyKind), COUNT(*), SUM(t.bytes), SUM(t.end - t.start) FROM {table} AS t "
                      "GROUP BY t.copyKind ORDER BY SUM(t.end - t.start) DESC").fetchall()
    out = [*head, f"   {'total ms':>10s} {'count':>7s} {'MB':>10s} {'GB/s':>8s}  kind"]
    for k, count, nbytes, tot in rows:
        tot, nbytes = tot or 0, nbytes or 0
        gbs = nbytes / tot if tot else 0.0  # bytes per ns = GB/s
        out.append(f"   {tot / 1e6:10.3f} {count:7d} {nbytes / 1e6:10.1f} {gbs:8.1f}  {k}")
    return out


def summarize(path: Path, top: int = 25) -> str:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        lines = _summary(db, "CUDA kernels", "CUPTI_ACTIVITY_KIND_KERNEL",
                         _name(db, "CUPTI_ACTIVITY_KIND_KERNEL", "shortName", "demangledName"), top)
        lines += _summary(db, "CUDA API calls", "CUPTI_ACTIVITY_KIND_RUNTIME", _name(db, "CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"), top)
        lines += _summary(db, "NVTX ranges", "NVTX_EVENTS", _name(db, "NVTX_EVENTS", "text", "textId"), top, "WHERE t.end IS NOT NULL")
        lines += _memcpy(db)
    finally:
        db.close()
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sqlite", type=Path)
    ap.add_argument("--top", type=int, default=25, help="rows per table")
    args = ap.parse_args(argv)
    if not args.sqlite.exists():
        print(f"nsys_summary: {args.sqlite} not found", file=sys.stderr)
        return 2
    print(summarize(args.sqlite, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
