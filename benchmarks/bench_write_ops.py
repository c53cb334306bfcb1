# SPDX-License-Identifier: Apache-2.0
"""Row-level write benchmark: ``update`` and ``merge_insert`` touching 1% (and 50%, 100%) of
the rows, and a distributed ``write_fragments`` + ``commit``, lance_gpu against pylance in
one run.

Data: ``--rows`` rows (default 5M; ``--quick``: 200k) of ``id`` (int64, 0..n-1), ``x``
(float64), ``s`` (~12-character string), written by pylance in files of 1M rows.  Each
timed operation starts from a fresh copy of that dataset (copying is not timed); the time
includes opening the dataset:

* ``update P%``: ``ds.update({"x": "x + 1", "s": "'u'"}, where="id % K = 7 % K")``;
* ``merge_insert P%``: upsert of a source holding P% of the rows (every K-th id, new
  values) plus 1% new ids, keyed on ``id``;
* ``write_fragments+commit``: 4 "workers" each write 1/4 of ``--rows`` new rows as
  fragments (``lance.fragment.write_fragments`` / ``lance_gpu.fragment.write_fragments``),
  then one ``LanceDataset.commit(uri, LanceOperation.Append(fragments), read_version=)``.

Each operation runs in one subprocess that imports both libraries, warms each up once, then
alternates them for ``--repeat`` rounds (the order flips every round), so both see the same
machine load; the figure is the best of the rounds (the median is kept in the JSON).
ratio = pylance's time / lance_gpu's time (above 1: lance_gpu is faster); cpu ratio the
same over the process's CPU time (all threads).  The load average is recorded before and
after each operation.
Output: a table on stdout and ``benchmarks/results/write_ops_cpu.{md,json}``.

    python3 benchmarks/bench_write_ops.py [--rows 5000000 --repeat 5] [--quick] [--ops update_1,merge_insert_1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

CHILD = r"""
import json, shutil, sys, tempfile, time, warnings
warnings.simplefilter("ignore")
base, op, repeat, workdir, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
import numpy as np, pyarrow as pa
import lance
import lance.fragment
import lance_gpu
import lance_gpu.fragment

LIBS = {
    "lance": (lance, lance.fragment.write_fragments),
    "lance_gpu": (lance_gpu, lance_gpu.fragment.write_fragments),
}

def table(ids):
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table({"id": ids, "x": ids * -1.0, "s": pa.array(np.char.add("new-", ids.astype(str)))})

kind, _, pct = op.rpartition("_")
every = {"1": 100, "50": 2, "100": 1}.get(pct, 100)
if kind == "merge_insert":
    source = table(np.concatenate([np.arange(0, rows, every), np.arange(rows, rows + rows // 100)]))
parts = [table(np.arange(k * rows // 4, (k + 1) * rows // 4) + 10 * rows) for k in range(4)]

def run(engine, path):
    lib, write_fragments = LIBS[engine]
    ds = lib.dataset(path)
    if kind == "update":
        return ds.update({"x": "x + 1", "s": "'u'"}, where=f"id % {every} = {7 % every}")
    if kind == "merge_insert":
        return ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)
    read = ds.version
    frags = [f for p in parts for f in write_fragments(p, path)]
    lib.LanceDataset.commit(path, lib.LanceOperation.Append(frags), read_version=read)

def once(engine):
    d = tempfile.mkdtemp(dir=workdir)
    path = d + "/ds"
    shutil.copytree(base, path)
    t0, c0 = time.perf_counter(), time.process_time()
    run(engine, path)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    rows_after = lance.dataset(path).count_rows()
    shutil.rmtree(d)
    return dt, cpu, rows_after

times = {"lance": [], "lance_gpu": []}
cpu_times = {"lance": [], "lance_gpu": []}
counts = {}
for engine in times:
    once(engine)  # warm-up: imports, kernel compilation, page cache
for r in range(repeat):
    for engine in (("lance", "lance_gpu") if r % 2 == 0 else ("lance_gpu", "lance")):
        dt, cpu, n = once(engine)
        times[engine].append(dt)
        cpu_times[engine].append(cpu)
        counts.setdefault(engine, n)
assert counts["lance"] == counts["lance_gpu"], counts
print(json.dumps({"op": op, "times": times, "cpu": cpu_times, "rows_after": counts["lance"]}))
"""

OPS = ("update_1", "merge_insert_1", "write_fragments+commit", "update_50", "merge_insert_50", "update_100",
       "merge_insert_100")


def _make_base(path: str, rows: int) -> None:
    import lance
    import numpy as np
    import pyarrow as pa

    ids = np.arange(rows, dtype=np.int64)
    tbl = pa.table({"id": ids, "x": ids * 0.5, "s": pa.array(np.char.add("row-", ids.astype(str)))})
    lance.write_dataset(tbl, path, max_rows_per_file=1 << 20)


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # pragma: no cover - not Linux
        return "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="200k rows, 2 rounds")
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {', '.join(OPS)}")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.repeat = 200_000, 2
    ops = [o for o in args.ops.split(",") if o]
    unknown = set(ops) - set(OPS)
    if unknown:
        ap.error(f"unknown ops {sorted(unknown)}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    results = []
    with tempfile.TemporaryDirectory(prefix="lance_gpu_bench_") as work:
        base = os.path.join(work, "base")
        _make_base(base, args.rows)
        for op in ops:
            load_before = _loadavg()
            out = subprocess.run(
                [sys.executable, "-c", CHILD, base, op, str(args.repeat), work, str(args.rows)],
                check=True, capture_output=True, text=True, env=env,
            )
            got = json.loads(out.stdout.strip().splitlines()[-1])
            row = {"op": op, "loadavg": f"{load_before} / {_loadavg()}", "rows_after": got["rows_after"]}
            for engine, times in got["times"].items():
                row[engine] = min(times)
                row[f"{engine}_median"] = sorted(times)[len(times) // 2]
                row[f"{engine}_all"] = times
            for engine, cpu in got["cpu"].items():
                row[f"{engine}_cpu"] = min(cpu)
            row["ratio"] = row["lance"] / row["lance_gpu"]
            row["cpu_ratio"] = row["lance_cpu"] / row["lance_gpu_cpu"]
            results.append(row)
            print(f"{op:24s} pylance {row['lance']:8.3f}s  lance_gpu {row['lance_gpu']:8.3f}s  "
                  f"ratio {row['ratio']:.2f}  cpu ratio {row['cpu_ratio']:.2f}  (load {row['loadavg']})", flush=True)
    RESULTS.mkdir(exist_ok=True)
    meta = {"rows": args.rows, "repeat": args.repeat, "machine": platform.platform(), "cpus": os.cpu_count()}
    suffix = "_quick" if args.quick else ""
    (RESULTS / f"write_ops_cpu{suffix}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    lines = [
        f"# Row-level writes and the commit API, {args.rows:,} rows (best of {args.repeat} interleaved rounds)",
        "",
        f"{meta['machine']}, {meta['cpus']} CPUs. ratio = pylance time / lance_gpu time (>1: lance_gpu faster).",
        "`update_P` / `merge_insert_P` touch P% of the rows; loadavg (1/5/15 min) before / after each operation.",
        "cpu = the process's CPU time over the operation (all threads; least of the rounds): the work done,",
        "which the machine's load hardly changes.",
        "Produced by `python3 benchmarks/bench_write_ops.py`; medians and every round are in the JSON.",
        "",
        "| operation | pylance s | lance_gpu s | ratio | pylance cpu s | lance_gpu cpu s | cpu ratio | loadavg before / after |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    lines += [f"| {r['op']} | {r['lance']:.3f} | {r['lance_gpu']:.3f} | {r['ratio']:.2f} | {r['lance_cpu']:.3f} | "
              f"{r['lance_gpu_cpu']:.3f} | {r['cpu_ratio']:.2f} | {r['loadavg']} |" for r in results]
    (RESULTS / f"write_ops_cpu{suffix}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
