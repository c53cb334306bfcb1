# SPDX-License-Identifier: Apache-2.0
"""Scalar-index filters and index builds: lance_gpu against pylance 14 on the CPU.

Writes a dataset with pylance (several fragments): ``id`` (int64, shuffled), ``cat``
(string, 100 values), ``tags`` (list<string>, 2 of 20 labels), ``payload`` (float64) and
``text`` (string).  Builds each index with both libraries (timed, on copies), then times
filtered reads on the pylance-built indices: each library with its index, and lance_gpu
without (``use_scalar_index=False``, a full scan), rounds interleaved after one untimed
warm-up each; checks the results agree; prints one JSON line per case with the medians and
the ratio (pylance time / lance_gpu time: above 1 means lance_gpu is faster) and with
``--markdown PATH`` writes the table.

    PYTHONPATH=$PWD python3 benchmarks/bench_scalar_index.py --rows 1000000 --markdown benchmarks/results/scalar_index_cpu.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import warnings
from typing import Any

import numpy as np
import pyarrow as pa

INDICES = [("id", "BTREE"), ("cat", "BITMAP"), ("tags", "LABEL_LIST")]


def _write(path: str, rows: int) -> None:
    import lance

    rng = np.random.default_rng(0)
    labels = np.array([f"t{k}" for k in range(20)])
    pick = rng.integers(0, 20, (rows, 2))
    tags = pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * rows + 1, 2, dtype=np.int32)), pa.array(labels[pick.ravel()]))
    table = pa.table({
        "id": pa.array(rng.permutation(rows).astype(np.int64)),
        "cat": pa.array(np.array([f"c{k}" for k in range(100)])[rng.integers(0, 100, rows)]),
        "tags": tags,
        "payload": pa.array(rng.random(rows)),
        "text": pa.array([f"row number {k} with some text" for k in range(rows)]),
    })
    lance.write_dataset(table, path, max_rows_per_file=max(1, rows // 8))


def _time(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--markdown", help="write the results as a markdown table here")
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    import lance

    import lance_gpu

    tmp = tempfile.mkdtemp(prefix="bench_scalar_index_")
    results = []
    try:
        base = os.path.join(tmp, "base")
        _write(base, args.rows)
        # warm-up: each library reads the dataset once (lance_gpu loads its decode kernels)
        lance.dataset(base).to_table()
        lance_gpu.dataset(base, device="cpu").to_table()
        # index builds, each library on its own copy
        for column, kind in INDICES:
            times = {}
            for lib in ("pylance", "lance_gpu"):  # (builds are not interleaved: one round each)
                uri = os.path.join(tmp, f"build_{lib}_{column}")
                shutil.copytree(base, uri)
                ds = lance.dataset(uri) if lib == "pylance" else lance_gpu.dataset(uri, device="cpu")
                times[lib], _ = _time(lambda ds=ds: ds.create_scalar_index(column, kind))
            row = {"case": f"build {kind} on {column}", "pylance_s": times["pylance"], "lance_gpu_s": times["lance_gpu"],
                   "ratio": times["pylance"] / times["lance_gpu"]}
            print(json.dumps(row))
            results.append(row)
        # filtered reads on pylance-built indices
        for column, kind in INDICES:
            lance.dataset(base).create_scalar_index(column, kind)
        theirs = lance.dataset(base)
        ours = lance_gpu.dataset(base, device="cpu")
        rng = np.random.default_rng(1)
        probes = [int(x) for x in rng.integers(0, args.rows, 20)]
        cases = [
            ("BTREE id = v", lambda k: f"id = {probes[k % len(probes)]}"),
            ("BTREE id IN (5 values)", lambda k: f"id IN ({', '.join(str(p) for p in probes[k % 10: k % 10 + 5])})"),
            ("BTREE id < 1000", lambda k: "id < 1000"),
            ("BITMAP cat = 'c7'", lambda k: "cat = 'c7'"),
            ("LABEL_LIST array_has_all(tags, ['t3', 't5'])", lambda k: "array_has_all(tags, ['t3', 't5'])"),
        ]
        flat = ["id", "cat", "payload", "text"]  # every column but the list one
        cases = [(f"{n}, all columns", m, None) for n, m in cases] + [(f"{n}, columns {flat}", m, flat) for n, m in cases[:4]]
        for name, make, cols in cases:
            flt = make(0)
            a = ours.to_table(filter=flt, columns=cols)
            b = theirs.to_table(filter=flt, columns=cols)
            assert a.sort_by("id").equals(b.sort_by("id")), name
            assert ours.scanner(filter=flt).plan.index_queries, name
            t_p, t_o, t_scan = [], [], []
            for k in range(args.rounds):
                flt = make(k)
                t_p.append(_time(lambda flt=flt: theirs.to_table(filter=flt, columns=cols))[0])
                t_o.append(_time(lambda flt=flt: ours.to_table(filter=flt, columns=cols))[0])
                t_scan.append(_time(lambda flt=flt: ours.to_table(filter=flt, columns=cols, use_scalar_index=False))[0])
            row = {"case": name, "rows_out": a.num_rows, "pylance_s": statistics.median(t_p),
                   "lance_gpu_s": statistics.median(t_o), "lance_gpu_scan_s": statistics.median(t_scan)}
            row["ratio"] = row["pylance_s"] / row["lance_gpu_s"]
            print(json.dumps(row))
            results.append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.markdown:
        lines = [
            "# Scalar indices on the CPU: lance_gpu vs pylance 14",
            "",
            f"{args.rows:,} rows (8 fragments), medians of {args.rounds} interleaved rounds after a warm-up; "
            f"{platform.machine()}, {os.cpu_count()} cores, a shared and loaded box (other jobs ran alongside). "
            "Reads use the pylance-built indices; ratio = pylance time / lance_gpu time (above 1: lance_gpu faster); "
            "`scan` = lance_gpu with `use_scalar_index=False`.",
            "",
            f"    PYTHONPATH=$PWD python3 benchmarks/bench_scalar_index.py --rows {args.rows} --markdown <path>",
            "",
            "| case | rows out | pylance s | lance_gpu s | lance_gpu scan s | ratio |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in results:
            lines.append(f"| {r['case']} | {r.get('rows_out', '')} | {r['pylance_s']:.4f} | {r['lance_gpu_s']:.4f} | "
                         f"{r['lance_gpu_scan_s']:.4f} | {r['ratio']:.2f} |" if "lance_gpu_scan_s" in r else
                         f"| {r['case']} | | {r['pylance_s']:.3f} | {r['lance_gpu_s']:.3f} | | {r['ratio']:.2f} |")
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
