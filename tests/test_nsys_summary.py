# SPDX-License-Identifier: Apache-2.0
"""``benchmarks/nsys_summary.py`` (the fallback when ``nsys stats`` fails) on a small SQLite file
laid out as ``nsys export --type sqlite`` writes one: kernels, API calls and NVTX ranges summed
by name (names through ``StringIds``), copies by kind, absent tables said so."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _export(path: Path, *, memcpy: bool = True) -> None:
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, shortName INTEGER, demangledName INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, nameId INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, textId INTEGER);
        INSERT INTO StringIds VALUES (1, 'unpack_kernel'), (2, 'gather_kernel'), (3, 'cudaLaunchKernel'), (4, 'cudaMemcpyAsync'),
                                     (5, 'lance_gpu.decode');
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (0, 3000000, 1, 1), (5000000, 6000000, 1, 1), (7000000, 8000000, 2, 2);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (0, 10000, 3), (20000, 30000, 3), (40000, 1040000, 4);
        INSERT INTO NVTX_EVENTS VALUES (0, 8000000, 59, NULL, 5), (100, 200, 59, 'read scan_device mixed 0', NULL),
                                       (300, NULL, 34, 'a mark', NULL);
    """)
    if memcpy:
        db.executescript("""
            CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
            INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (1, 'CUDA_MEMCPY_KIND_HTOD', 'Host-to-Device');
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, bytes INTEGER, copyKind INTEGER);
            INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (0, 1000000, 20000000, 1), (0, 1000000, 30000000, 1);
        """)
    db.commit()
    db.close()


def test_summaries_by_name(tmp_path: Path) -> None:
    path = tmp_path / "prof.sqlite"
    _export(path)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "nsys_summary.py"), str(path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()

    def row(name: str) -> list[str]:
        (line,) = [ln for ln in lines if ln.endswith(f"  {name}")]
        return line.split()

    unpack = row("unpack_kernel")  # 3 ms + 1 ms in 2 launches: 80% of 5 ms of kernels
    assert unpack[:3] == ["80.0", "4.000", "2"] and unpack[3] == "2000.0"
    assert row("gather_kernel")[:3] == ["20.0", "1.000", "1"]
    assert row("cudaMemcpyAsync")[1:3] == ["1.000", "1"] and row("cudaLaunchKernel")[1:3] == ["0.020", "2"]
    assert row("lance_gpu.decode")[1:3] == ["8.000", "1"] and row("read scan_device mixed 0")[2] == "1"
    assert not [ln for ln in lines if ln.endswith("a mark")]  # marks are not ranges
    assert row("Host-to-Device") == ["2.000", "2", "50.0", "25.0", "Host-to-Device"]  # 50 MB in 2 ms


def test_absent_tables_are_said_so(tmp_path: Path) -> None:
    path = tmp_path / "prof.sqlite"
    _export(path, memcpy=False)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "nsys_summary.py"), str(path), "--top", "1"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "== memory copies by kind (CUPTI_ACTIVITY_KIND_MEMCPY)\n   (absent from this export)" in proc.stdout
    assert "   ... 1 more" in proc.stdout  # --top 1 of the two kernels
