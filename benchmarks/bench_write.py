# SPDX-License-Identifier: Apache-2.0
"""Write benchmark: lance_gpu.write_dataset against lance.write_dataset and
pyarrow.parquet.write_table, in one run.

Tables: the read benchmark's (bench_read.py) -- (a) "mixed", 5M rows of int64 ids, random
int64, float64, a 20-value string category, ~30-character text, timestamps, bool, a nullable
int32; (b) "embeddings", 500k rows of fixed_size_list<float32, 128>.  They are generated
once by bench_read.make_data (its Parquet copies under benchmarks/data/ are reused) and
loaded into memory before timing, so only the write is measured.

Each engine runs in a fresh subprocess: one warm-up write (numba compile caches, page
cache), then --repeat timed writes into a fresh directory each (deleted afterwards).
Reported: median seconds, input MB/s (Arrow bytes of the table / time), bytes on disk, and
ratio = other engine's time / lance_gpu's time (above 1: lance_gpu is faster).
Output: a table on stdout and benchmarks/results/write_cpu.{md,json}.

    python3 benchmarks/bench_write.py [--rows 5000000 --emb-rows 500000 --repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

# One engine's measurement, run in a child process: prints a JSON line.
CHILD = r"""
import json, os, shutil, sys, tempfile, time, warnings
warnings.simplefilter("ignore")
engine, src, repeat, workdir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
import pyarrow as pa, pyarrow.parquet as pq
table = pq.read_table(src)
if engine == "lance":
    import lance
    def write(path):
        lance.write_dataset(table, path)
elif engine == "lance_gpu":
    import lance_gpu
    def write(path):
        lance_gpu.write_dataset(table, path)
else:
    def write(path):
        pq.write_table(table, path)
def size(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
def once():
    path = tempfile.mkdtemp(dir=workdir) + "/out"
    t0 = time.perf_counter(); write(path); dt = time.perf_counter() - t0
    n = size(path)
    shutil.rmtree(os.path.dirname(path))
    return dt, n
once()  # warm-up
runs = [once() for _ in range(repeat)]
print(json.dumps({"times": [t for t, _ in runs], "bytes": runs[-1][1], "input_bytes": table.nbytes, "rows": table.num_rows}))
"""


def child(*args: object) -> dict:
    import bench_read

    return bench_read.child(CHILD, *args, timeout=7200)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--emb-rows", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data-dir", type=Path, default=None, help="where the source tables live (default: benchmarks/data)")
    ap.add_argument("--results-dir", type=Path, default=RESULTS)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    import bench_read

    if args.data_dir is not None:
        bench_read.DATA = args.data_dir
    bench_read.make_data(args.rows, args.emb_rows)
    data = bench_read.DATA
    workdir = data / "write_tmp"
    workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, n in (("mixed", args.rows), ("embeddings", args.emb_rows)):
        src = (data / f"{name}_{n}").with_suffix(".parquet")
        res = {engine: child(engine, src, args.repeat, workdir) for engine in ("lance_gpu", "lance", "parquet")}
        med = {k: sorted(v["times"])[len(v["times"]) // 2] for k, v in res.items()}
        mb = res["lance_gpu"]["input_bytes"] / 1e6
        rows.append({
            "dataset": name, "rows": n, "input_mb": mb,
            **{f"{k}_s": v for k, v in med.items()},
            **{f"{k}_mb_per_s": mb / v for k, v in med.items()},
            **{f"{k}_disk_mb": res[k]["bytes"] / 1e6 for k in res},
            "vs_pylance": med["lance"] / med["lance_gpu"], "vs_parquet": med["parquet"] / med["lance_gpu"],
        })
    try:
        workdir.rmdir()
    except OSError:
        pass
    meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d"), "rows": args.rows, "emb_rows": args.emb_rows, "repeat": args.repeat}
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / "write_cpu.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [f"# Write benchmark (CPU), {meta['date']}, {meta['cpus']} cores, {meta['machine']}, Python {meta['python']}", "",
             "Median seconds of one write of the in-memory table; MB/s of Arrow input; "
             "ratio = other engine's time / lance_gpu's time (above 1: lance_gpu is faster).", "",
             "| dataset | input MB | lance_gpu s | pylance s | parquet s | lance_gpu MB/s | pylance MB/s | parquet MB/s "
             "| vs pylance | vs parquet | disk MB (ours / pylance / parquet) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['input_mb']:.0f} | {r['lance_gpu_s']:.3f} | {r['lance_s']:.3f} | {r['parquet_s']:.3f} "
            f"| {r['lance_gpu_mb_per_s']:.0f} | {r['lance_mb_per_s']:.0f} | {r['parquet_mb_per_s']:.0f} "
            f"| {r['vs_pylance']:.2f}x | {r['vs_parquet']:.2f}x "
            f"| {r['lance_gpu_disk_mb']:.0f} / {r['lance_disk_mb']:.0f} / {r['parquet_disk_mb']:.0f} |"
        )
    (args.results_dir / "write_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
