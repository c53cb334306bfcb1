# SPDX-License-Identifier: Apache-2.0
"""Row-level write benchmark: ``update`` and ``merge_insert`` touching 1% of the rows, and a
distributed ``write_fragments`` + ``commit``, lance_gpu against pylance in one run.

Data: ``--rows`` rows (default 5M; ``--quick``: 200k) of ``id`` (int64, 0..n-1), ``x``
(float64), ``s`` (~12-character string), written by pylance in files of 1M rows.  Each
timed operation starts from a fresh copy of that dataset (copying is not timed):

* ``update``: ``ds.update({"x": "x + 1", "s": "'u'"}, where="id % 100 = 7")`` (1% of rows);
* ``merge_insert``: upsert of a source of 1% of the rows (every 100th id, new values) plus
  1% new ids, keyed on ``id``;
* ``write_fragments+commit``: 4 "workers" each write 1/4 of ``--rows`` rows as fragments,
  then one ``Append`` commit.

Each engine runs in its own subprocess (one warm-up, then ``--repeat`` runs; median).
ratio = pylance's time / lance_gpu's time (above 1: lance_gpu is faster).
Output: a table on stdout and ``benchmarks/results/write_ops_cpu.{md,json}``.

    python3 benchmarks/bench_write_ops.py [--rows 5000000 --repeat 3] [--quick]
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
engine, base, op, repeat, workdir, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
import numpy as np, pyarrow as pa
if engine == "lance":
    import lance as lib
    from lance.fragment import write_fragments
    LanceOperation, LanceDataset = lib.LanceOperation, lib.LanceDataset
else:
    import lance_gpu as lib
    from lance_gpu.write import write_fragments
    LanceOperation, LanceDataset = lib.LanceOperation, lib.LanceDataset

def table(ids):
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table({"id": ids, "x": ids * -1.0, "s": pa.array(np.char.add("new-", ids.astype(str)))})

source = table(np.concatenate([np.arange(0, rows, 100), np.arange(rows, rows + rows // 100)]))
parts = [table(np.arange(k * rows // 4, (k + 1) * rows // 4) + 10 * rows) for k in range(4)]

def run(path):
    ds = lib.dataset(path)
    if op == "update":
        ds.update({"x": "x + 1", "s": "'u'"}, where="id % 100 = 7")
    elif op == "merge_insert":
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(source)
    else:
        read = ds.version
        frags = [f for p in parts for f in write_fragments(p, path)]
        LanceDataset.commit(path, LanceOperation.Append(frags), read_version=read)

def once():
    d = tempfile.mkdtemp(dir=workdir)
    path = d + "/ds"
    shutil.copytree(base, path)
    t0 = time.perf_counter(); run(path); dt = time.perf_counter() - t0
    shutil.rmtree(d)
    return dt

once()
times = sorted(once() for _ in range(repeat))
print(json.dumps({"engine": engine, "op": op, "seconds": times[len(times) // 2], "all": times}))
"""


def _make_base(path: str, rows: int) -> None:
    import lance
    import numpy as np
    import pyarrow as pa

    ids = np.arange(rows, dtype=np.int64)
    tbl = pa.table({"id": ids, "x": ids * 0.5, "s": pa.array(np.char.add("row-", ids.astype(str)))})
    lance.write_dataset(tbl, path, max_rows_per_file=1 << 20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200k rows, one repeat")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.repeat = 200_000, 1
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    results = []
    with tempfile.TemporaryDirectory(prefix="lance_gpu_bench_") as work:
        base = os.path.join(work, "base")
        _make_base(base, args.rows)
        for op in ("update", "merge_insert", "write_fragments+commit"):
            row = {"op": op}
            for engine in ("lance", "lance_gpu"):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, engine, base, op, str(args.repeat), work, str(args.rows)],
                    check=True, capture_output=True, text=True, env=env,
                )
                row[engine] = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
            row["ratio"] = row["lance"] / row["lance_gpu"]
            results.append(row)
            print(f"{op:24s} pylance {row['lance']:8.3f}s  lance_gpu {row['lance_gpu']:8.3f}s  ratio {row['ratio']:.2f}")
    RESULTS.mkdir(exist_ok=True)
    meta = {"rows": args.rows, "repeat": args.repeat, "machine": platform.platform(), "cpus": os.cpu_count()}
    suffix = "_quick" if args.quick else ""
    (RESULTS / f"write_ops_cpu{suffix}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    lines = [
        f"# Row-level writes, {args.rows:,} rows, touching 1% (median of {args.repeat})",
        "",
        f"{meta['machine']}, {meta['cpus']} CPUs. ratio = pylance time / lance_gpu time (>1: lance_gpu faster).",
        "",
        "| operation | pylance s | lance_gpu s | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [f"| {r['op']} | {r['lance']:.3f} | {r['lance_gpu']:.3f} | {r['ratio']:.2f} |" for r in results]
    (RESULTS / f"write_ops_cpu{suffix}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
