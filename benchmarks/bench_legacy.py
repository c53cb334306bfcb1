# SPDX-License-Identifier: Apache-2.0
"""Legacy (0.1) datasets: write, full scan, per-column scans and a take, lance_gpu against
pylance in one process.

Data: ``--rows`` rows (default 1M) of ``i`` (int64), ``f`` (float64), ``s`` (string, 1000
distinct ~4-character values), ``l`` (list<int32>, 2 items), ``v`` (fixed_size_list<float32, 8>),
in pylance's default batches of 1024 rows.  The read figures are over the dataset pylance
wrote; each library opens the dataset inside the timed call.  Both libraries alternate for
``--repeat`` rounds (order flipped each round), so both see the same machine load; the figure
is the best round.  ratio = pylance's time / lance_gpu's time (above 1: lance_gpu is faster).
The load average is recorded before and after.  Output: a table on stdout and
``benchmarks/results/legacy_cpu.md``.

    python3 benchmarks/bench_legacy.py [--rows 1000000 --repeat 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent


def _table(rows: int) -> pa.Table:
    rng = np.random.default_rng(0)
    return pa.table({
        "i": rng.integers(0, 1 << 40, rows),
        "f": rng.random(rows),
        "s": pa.array([f"s{i % 1000}" for i in range(rows)]),
        "l": pa.ListArray.from_arrays(np.arange(0, 2 * rows + 1, 2, dtype=np.int32),
                                      rng.integers(0, 100, 2 * rows).astype(np.int32)),
        "v": pa.FixedSizeListArray.from_arrays(rng.random(8 * rows, dtype=np.float32), 8),
    })


def _best(calls: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    best = {name: float("inf") for name in calls}
    names = list(calls)
    for r in range(repeat):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            calls[name]()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import lance

    import lance_gpu

    table = _table(args.rows)
    work = Path(tempfile.mkdtemp(prefix="bench_legacy_"))
    load_before = os.getloadavg()
    rows_out = []
    try:
        n = [0]

        def write(mod) -> Callable[[], object]:
            def run() -> object:
                n[0] += 1
                return mod.write_dataset(table, str(work / f"w{n[0]}"), data_storage_version="legacy")
            return run

        w = _best({"pylance": write(lance), "lance_gpu": write(lance_gpu)}, 3)
        rows_out.append(("write", w))
        uri = str(work / "read")
        lance.write_dataset(table, uri, data_storage_version="legacy")
        cases: list[tuple[str, dict]] = [("scan (all columns)", {}), *[(f"scan {c}", {"columns": [c]}) for c in table.column_names]]
        for label, kw in cases:
            rows_out.append((label, _best({"pylance": lambda kw=kw: lance.dataset(uri).to_table(**kw),
                                           "lance_gpu": lambda kw=kw: lance_gpu.dataset(uri).to_table(**kw)}, args.repeat)))
        idx = np.sort(np.random.default_rng(1).choice(args.rows, 1000, replace=False))
        rows_out.append(("take 1000 rows", _best({"pylance": lambda: lance.dataset(uri).take(idx),
                                                  "lance_gpu": lambda: lance_gpu.dataset(uri).take(idx)}, args.repeat)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    lines = [
        f"# Legacy (0.1) datasets, {args.rows:,} rows, best of {args.repeat} (write: 3)",
        "",
        f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} ({os.cpu_count()} cores)",
        "",
        "| operation | pylance s | lance_gpu s | ratio (pylance / lance_gpu) |",
        "| --- | --- | --- | --- |",
    ]
    for label, t in rows_out:
        lines.append(f"| {label} | {t['pylance']:.4f} | {t['lance_gpu']:.4f} | {t['pylance'] / t['lance_gpu']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / "legacy_cpu.md").write_text(text)


if __name__ == "__main__":
    main()
