# SPDX-License-Identifier: Apache-2.0
"""Cycle-collector work inside one small operation (issue 24): per operation, the collections
of each generation and the seconds spent in them (``gc.callbacks``), and how many full
collections the local store's file opens ran (``lance_gpu.io.local._file_opened``), on a
fresh copy of a ``bench_scale.py`` dataset.  Counts do not depend on the machine's load;
seconds do.

    python3 benchmarks/gc_per_op.py delete1 1000 5       # run from the checkout to measure
    NOCOLLECT=1 python3 benchmarks/gc_per_op.py ...      # no gc.collect() between operations
"""

from __future__ import annotations

import collections
import gc
import os
import shutil
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.getcwd())

import lance_gpu  # noqa: E402
from lance_gpu.io import local  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    op, shape, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    base = os.path.join(HERE, "data", "scale", f"appends_{shape}.lance")
    key = 1234 if shape == "1000" else 80
    stats: collections.Counter = collections.Counter()
    started: dict[str, object] = {}

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started["t"] = time.perf_counter()
            started["explicit"] = any("_file_opened" in str(f) for f in traceback.extract_stack(limit=6))
            return
        g = info["generation"]
        stats[f"gen{g}"] += 1
        stats[f"s{g}"] += time.perf_counter() - started["t"]  # type: ignore[operator]
        if g == 2 and started["explicit"]:
            stats["by_file_opens"] += 1

    for _ in range(rounds):
        work = tempfile.mkdtemp()
        shutil.copytree(base, work + "/ds")
        if not os.environ.get("NOCOLLECT"):
            gc.collect()
        stats.clear()
        gc.callbacks.append(on_gc)
        t0 = time.perf_counter()
        ds = lance_gpu.dataset(work + "/ds")
        if op == "delete1":
            ds.delete(f"id = {key}")
        elif op == "update4":
            ds.update({"x": "x + 1"}, where=f"id >= {key} and id < {key + 4}")
        elif op == "merge_insert4":
            src = ds.to_table(filter=f"id >= {key} and id < {key + 2}")
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
        elif op == "compact":
            ds.optimize.compact_files()
        else:
            raise SystemExit(f"unknown operation {op!r}")
        elapsed = time.perf_counter() - t0
        gc.callbacks.remove(on_gc)
        del ds
        shutil.rmtree(work)
        shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in sorted(stats.items())}
        print(f"{op} {elapsed * 1e3:.0f} ms {shown} open files after: {local._open_files}")


if __name__ == "__main__":
    main()
