# SPDX-License-Identifier: Apache-2.0
"""Filters with the constructs of issue 26 item 5 (list literals and indexing, DataFusion's
functions, JSON on JSONB): lance_gpu against pylance 14 on the CPU, in one process.

Writes a dataset with pylance (several fragments): ``id`` (int64), ``nums`` (list<int32>,
0-3 items), ``tags`` (list<string>), ``s`` (string), ``ts`` (timestamp[us]), ``j`` (JSON).
Each case runs ``to_table(columns=["id"], filter=...)`` with both libraries, rounds
interleaved after one untimed warm-up each, checks the rows agree, and prints one JSON line
with the best time of each and the ratio (pylance time / lance_gpu time: above 1 means
lance_gpu is faster); ``--markdown PATH`` writes the table with the machine's load.
Where pylance's planner refuses a keyword form (``substr``), pylance runs the backticked
name (`` `substr` ``), which is the same DataFusion function.

    PYTHONPATH=$PWD python3 benchmarks/bench_filter_functions.py --rows 1000000 --markdown benchmarks/results/filter_functions_cpu.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
import warnings

import numpy as np
import pyarrow as pa

#: (label, lance_gpu filter, pylance filter)
CASES = [
    ("list = constant", "nums = [1, 2]", "nums = [1, 2]"),
    ("list < constant", "nums < [1, 2]", "nums < [1, 2]"),
    ("list IN lists", "nums IN ([1, 2], [0])", "nums IN ([1, 2], [0])"),
    ("list index", "nums[1] = 1", "nums[1] = 1"),
    ("negative index", "tags[-1] = 't3'", "tags[-1] = 't3'"),
    ("array_has", "array_has(tags, 't1')", "array_has(tags, 't1')"),
    ("cardinality", "cardinality(nums) = 2", "cardinality(nums) = 2"),
    ("array_max", "array_max(nums) = 2", "array_max(nums) = 2"),
    ("substr", "substr(s, 5, 3) = '12 '", "`substr`(s, 5, 3) = '12 '"),
    ("date_part", "date_part('month', ts) = 3", "date_part('month', ts) = 3"),
    ("to_timestamp", "ts > to_timestamp('2024-02-01T00:00:00')", "ts > to_timestamp('2024-02-01T00:00:00')"),
    ("json_get nested", "json_get_int(json_get(j, 'a'), 'b') = 3", "json_get_int(json_get(j, 'a'), 'b') = 3"),
    ("arrow_cast", "arrow_cast(id, 'Int16') < 100", "arrow_cast(id, 'Int16') < 100"),
    ("IS DISTINCT FROM", "nums[1] IS DISTINCT FROM 0", "nums[1] IS DISTINCT FROM 0"),
]


def _write(path: str, rows: int) -> None:
    import lance

    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 4, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    nums = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 3, offsets[-1]).astype(np.int32)))
    labels = np.array([f"t{k}" for k in range(8)])
    tags = pa.ListArray.from_arrays(pa.array(offsets), pa.array(labels[rng.integers(0, 8, offsets[-1])]))
    start = np.datetime64("2024-01-01T00:00:00", "us").astype(np.int64)
    table = pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64) % 30000),
        "nums": nums,
        "tags": tags,
        "s": pa.array([f"row {k % 1000} text" for k in range(rows)]),
        "ts": pa.array(start + rng.integers(0, 180 * 86400 * 10**6, rows), pa.timestamp("us")),
        "j": pa.array([json.dumps({"a": {"b": int(k)}}) for k in rng.integers(0, 5, rows)], pa.json_()),
    })
    lance.write_dataset(table, path, max_rows_per_file=max(1, rows // 4))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--markdown", help="write the results table here")
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    import lance

    import lance_gpu

    load_start = os.getloadavg()
    work = tempfile.mkdtemp(prefix="bench_filter_fn_")
    try:
        uri = os.path.join(work, "data.lance")
        _write(uri, args.rows)
        ours, ref = lance_gpu.dataset(uri), lance.dataset(uri)
        results = []
        for label, ours_filter, ref_filter in CASES:
            runs = {"lance_gpu": (ours, ours_filter), "pylance": (ref, ref_filter)}
            tables = {name: ds.to_table(columns=["id"], filter=f) for name, (ds, f) in runs.items()}  # warm-up
            if tables["lance_gpu"].column("id").to_pylist() != tables["pylance"].column("id").to_pylist():
                raise SystemExit(f"{label}: the engines disagree")
            best = {name: float("inf") for name in runs}
            for _ in range(args.repeats):
                for name, (ds, f) in runs.items():
                    t0 = time.perf_counter()
                    ds.to_table(columns=["id"], filter=f)
                    best[name] = min(best[name], time.perf_counter() - t0)
            row = {"case": label, "filter": ours_filter, "rows_kept": tables["pylance"].num_rows,
                   "lance_gpu_s": round(best["lance_gpu"], 4), "pylance_s": round(best["pylance"], 4),
                   "vs_pylance": round(best["pylance"] / best["lance_gpu"], 2)}
            print(json.dumps(row), flush=True)
            results.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_end = os.getloadavg()
    if args.markdown:
        lines = [
            f"# Filter functions (issue 26 item 5), CPU, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
            f"pylance {lance.__version__}, pyarrow {pa.__version__}",
            "",
            f"{args.rows} rows, 4 fragments; best of {args.repeats} interleaved rounds after a warm-up; "
            "ratio = pylance time / lance_gpu time (above 1: lance_gpu is faster). Shared machine: load average "
            f"(1/5/15 min) {' '.join(f'{x:.2f}' for x in load_start)} -> {' '.join(f'{x:.2f}' for x in load_end)}; "
            "only the ratios within this run mean anything.",
            "",
            "| case | filter | rows kept | lance_gpu s | pylance s | vs pylance |",
            "|---|---|---|---|---|---|",
        ]
        lines += [f"| {r['case']} | `{r['filter']}` | {r['rows_kept']} | {r['lance_gpu_s']} | {r['pylance_s']} | "
                  f"{r['vs_pylance']}x |" for r in results]
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
