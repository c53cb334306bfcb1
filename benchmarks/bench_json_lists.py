# SPDX-License-Identifier: Apache-2.0
"""CPU reads of JSON and list columns against pylance, in one process, interleaved.

Cases (each: lance_gpu and pylance over the same pylance-written dataset, one after the other
per round; best wall time and median CPU seconds of ``--repeat`` rounds after a warm-up):

* ``json read``: ``to_table(columns=["j"])`` of a JSON column (JSONB on disk, JSON text out);
* ``json_get filter``: ``to_table(columns=["id"], filter="json_get_int(json_get(j, 'a'), 'b') = 3")``;
* ``list<int64>`` / ``list<string>`` / ``list<list<int64>>`` reads (0-5 items a row);
* with ``--scan``: the 5M-row mixed full scan and ``to_batches(65536)`` over four 1M-row
  fragments of ``bench_read.py`` (its data, made if missing).

Writes ``results/<out>.md`` / ``.json`` with the load average before and after: on the shared
machine only the ratios within one run mean anything.

    PYTHONPATH=$PWD python3 benchmarks/bench_json_lists.py --repeat 5 [--scan]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"


def make_json(rows: int) -> Path:
    import lance
    import numpy as np
    import pyarrow as pa

    path = DATA / f"json_{rows}.lance"
    if not path.exists():
        rng = np.random.default_rng(0)
        docs = [json.dumps({"a": {"b": int(k)}, "x": float(v), "s": "héllo", "t": [int(k), "x\n"]})
                for k, v in zip(rng.integers(0, 5, rows), rng.random(rows), strict=True)]
        table = pa.table({"id": pa.array(np.arange(rows)), "j": pa.array(docs, pa.json_(pa.utf8()))})
        lance.write_dataset(table, str(path), max_rows_per_file=rows // 4)
    return path


def make_lists(rows: int) -> Path:
    import lance
    import numpy as np
    import pyarrow as pa

    path = DATA / f"lists_{rows}.lance"
    if not path.exists():
        rng = np.random.default_rng(0)
        offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 6, rows))]).astype(np.int32)
        values = rng.integers(0, 100, int(offsets[-1]))
        words = np.array([f"t{i}" for i in range(50)])
        nums = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
        tags = pa.ListArray.from_arrays(pa.array(offsets), pa.array(words[values % 50]))
        nested = pa.ListArray.from_arrays(pa.array(np.arange(rows + 1, dtype=np.int32)), nums)
        table = pa.table({"id": np.arange(rows), "nums": nums, "tags": tags, "nested": nested})
        lance.write_dataset(table, str(path), max_rows_per_file=rows // 4)
    return path


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _consume(batches) -> int:
    return sum(b.num_rows for b in batches)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json-rows", type=int, default=200_000)
    ap.add_argument("--list-rows", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scan", action="store_true", help="also bench_read's mixed scan and to_batches(65536)")
    ap.add_argument("--out", default="read_json_lists_cpu")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    DATA.mkdir(parents=True, exist_ok=True)
    import lance

    import lance_gpu

    jpath, lpath = str(make_json(args.json_rows)), str(make_lists(args.list_rows))
    filt = "json_get_int(json_get(j, 'a'), 'b') = 3"
    cases = {
        "json read": (jpath, lambda ds: ds.to_table(columns=["j"])),
        "json_get filter": (jpath, lambda ds: ds.to_table(columns=["id"], filter=filt)),
        "list<int64> read": (lpath, lambda ds: ds.to_table(columns=["nums"])),
        "list<string> read": (lpath, lambda ds: ds.to_table(columns=["tags"])),
        "list<list<int64>> read": (lpath, lambda ds: ds.to_table(columns=["nested"])),
    }
    if args.scan:
        sys.path.insert(0, str(HERE))
        import bench_read

        bench_read.make_data(5_000_000, 10_000)
        issue, _ = bench_read.make_shape("issue", {"rows": 1_000_000, "frags": 4})
        cases["mixed scan (5M)"] = (str(DATA / "mixed_5000000.lance"), lambda ds: ds.to_table())
        cases["to_batches(65536), 4 x 1M"] = (str(issue), lambda ds: _consume(ds.to_batches(batch_size=65536)))
    openers = {"lance_gpu": lambda p: lance_gpu.dataset(p, device="cpu"), "pylance": lance.dataset}
    rows = []
    for label, (path, op) in cases.items():
        first = {name: op(opener(path)) for name, opener in openers.items()}  # warm-up, and the same result
        ours, theirs = first["lance_gpu"], first["pylance"]
        if not isinstance(ours, int):
            assert ours.equals(theirs), label
        walls: dict[str, list[float]] = {name: [] for name in openers}
        cpus: dict[str, list[float]] = {name: [] for name in openers}
        for _ in range(args.repeat):
            for name, opener in openers.items():
                c0, t0 = _cpu(), time.perf_counter()
                result = op(opener(path))
                walls[name].append(time.perf_counter() - t0)
                cpus[name].append(_cpu() - c0)
                del result
        row = {"case": label, **{f"{n}_s": min(v) for n, v in walls.items()},
               **{f"{n}_cpu_s": statistics.median(v) for n, v in cpus.items()}}
        row["vs_pylance"] = row["pylance_s"] / row["lance_gpu_s"]
        row["cpu_vs_pylance"] = row["pylance_cpu_s"] / row["lance_gpu_cpu_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    load_end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps({"load": [load_start, load_end], "rows": rows}, indent=1))
    lines = [
        f"# JSON and list reads (CPU), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"{platform.machine()}, Python {platform.python_version()}, pylance {lance.__version__}",
        "",
        f"`PYTHONPATH=$PWD python3 benchmarks/bench_json_lists.py --repeat {args.repeat}{' --scan' if args.scan else ''}`: "
        f"JSON {args.json_rows} rows, lists {args.list_rows} rows, 4 fragments each; best wall time of "
        f"{args.repeat} interleaved rounds after a warm-up, CPU = median user+system seconds of the process; "
        "ratio = pylance / lance_gpu (above 1: lance_gpu is faster). "
        f"Load average (1/5/15 min) {load_start} -> {load_end}: only the ratios within this run mean anything.",
        "",
        "| case | lance_gpu s | pylance s | vs pylance | lance_gpu CPU s | pylance CPU s | CPU vs pylance |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['case']} | {r['lance_gpu_s']:.4f} | {r['pylance_s']:.4f} | {r['vs_pylance']:.2f}x | "
                     f"{r['lance_gpu_cpu_s']:.3f} | {r['pylance_cpu_s']:.3f} | {r['cpu_vs_pylance']:.2f}x |")
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
