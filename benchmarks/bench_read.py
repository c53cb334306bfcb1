# SPDX-License-Identifier: Apache-2.0
"""Read benchmark: lance-gpu (CPU path) against pylance and pyarrow-Parquet, in one run.

Datasets (written once under benchmarks/data/, reused):
  (a) "mixed": 5M rows: int64 ids, random int64, float64, a 20-value string category,
      ~30-character free text, timestamps, bool, a nullable int32;
  (b) "embeddings": 500k rows of fixed_size_list<float32, 128>.

Each measurement runs in a fresh subprocess (median of --repeat runs after one warm-up) and
reports its peak RSS growth.  Output: a table on stdout and benchmarks/results/read_cpu.{md,json}.
Ratios are pylance time / our time (above 1 = we are faster).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"


def make_data(rows: int, emb_rows: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import lance

    DATA.mkdir(parents=True, exist_ok=True)
    mixed = DATA / f"mixed_{rows}"
    if not (mixed.with_suffix(".lance")).exists():
        rng = np.random.default_rng(0)
        cats = np.array([f"category_{i:02d}" for i in range(20)])
        words = np.array(["alpha", "beta", "gamma", "delta", "omega", "lorem", "ipsum", "dolor", "sit", "amet", "quick", "brown", "fox"])
        text = [" ".join(r) for r in words[rng.integers(0, len(words), size=(rows, 5))]]
        tbl = pa.table(
            {
                "id": pa.array(np.arange(rows, dtype=np.int64)),
                "rand_int": pa.array(rng.integers(0, 1_000_000, rows)),
                "value": pa.array(rng.random(rows)),
                "category": pa.array(cats[rng.integers(0, 20, rows)]),
                "text": pa.array(text),
                "ts": pa.array((1_600_000_000_000_000 + rng.integers(0, 10**12, rows)).astype("datetime64[us]")),
                "flag": pa.array(rng.random(rows) < 0.5),
                "nullable_int": pa.array(rng.integers(0, 1000, rows).astype(np.int32), mask=rng.random(rows) < 0.1),
            }
        )
        lance.write_dataset(tbl, str(mixed.with_suffix(".lance")))
        pq.write_table(tbl, str(mixed.with_suffix(".parquet")))
    emb = DATA / f"embeddings_{emb_rows}"
    if not emb.with_suffix(".lance").exists():
        rng = np.random.default_rng(1)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(emb_rows * 128, dtype=np.float32)), 128)
        tbl = pa.table({"id": pa.array(np.arange(emb_rows, dtype=np.int64)), "vector": vec})
        lance.write_dataset(tbl, str(emb.with_suffix(".lance")))
        pq.write_table(tbl, str(emb.with_suffix(".parquet")))


# One measurement, run in a child process: prints a JSON line.
CHILD = r"""
import json, resource, sys, time, warnings
import numpy as np
warnings.simplefilter("ignore")
engine, op, path, repeat, nrows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
import pyarrow as pa, pyarrow.parquet as pq
if engine == "lance":
    import lance
    open_ds = lambda: lance.dataset(path)
elif engine == "lance_gpu":
    import lance_gpu
    open_ds = lambda: lance_gpu.dataset(path, device="cpu")
idx = np.random.default_rng(7).choice(nrows, 10_000, replace=False)
def run():
    if engine == "parquet":
        if op == "scan":
            return pq.read_table(path)
        if op == "take":
            return pq.read_table(path).take(pa.array(idx))
        if op == "batches":
            n = 0
            for b in pq.ParquetFile(path).iter_batches(batch_size=65536):
                n += b.num_rows
            return n
    ds = open_ds()
    if op == "scan":
        return ds.to_table()
    if op == "take":
        return ds.take(idx)
    if op == "batches":
        n = 0
        for b in ds.to_batches(batch_size=65536):
            n += b.num_rows
        return n
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out = run()  # warm-up: compile caches, page cache
base = rss()
times = []
for _ in range(repeat):
    t0 = time.perf_counter(); out = run(); times.append(time.perf_counter() - t0)
    del out
print(json.dumps({"times": times, "peak_rss": rss(), "base_rss": base}))
"""

CHILD_MEM = r"""
import json, resource, sys, warnings
warnings.simplefilter("ignore")
engine, op, path = sys.argv[1], sys.argv[2], sys.argv[3]
import numpy as np, pyarrow as pa
if engine == "lance":
    import lance as mod
    ds = mod.dataset(path)
else:
    import lance_gpu as mod
    ds = mod.dataset(path, device="cpu")
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
# compile / warm on a tiny read first so that JIT memory is not counted
next(iter(ds.to_batches(batch_size=1024))) if op == "batches" else ds.take([0])
base = rss()
if op == "scan":
    t = ds.to_table(); decoded = t.nbytes
else:
    decoded = 0
    for b in ds.to_batches(batch_size=65536):
        decoded = max(decoded, b.nbytes)
print(json.dumps({"peak_growth": rss() - base, "decoded": decoded}))
"""


def child(code: str, *args: object, timeout: int = 3600) -> dict:
    """Run ``code`` in a fresh interpreter with ``args``; return the JSON of its last line."""
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    res = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)
    if res.returncode:
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--emb-rows", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    make_data(args.rows, args.emb_rows)
    rows = []
    for name, n in (("mixed", args.rows), ("embeddings", args.emb_rows)):
        base = DATA / f"{name}_{n}"
        for op in ("scan", "take"):
            res = {}
            for engine, path in (("lance_gpu", base.with_suffix(".lance")), ("lance", base.with_suffix(".lance")), ("parquet", base.with_suffix(".parquet"))):
                r = child(CHILD, engine, op, path, args.repeat, n)
                res[engine] = sorted(r["times"])[len(r["times"]) // 2]
            rows.append({"dataset": name, "op": op, **{f"{k}_s": v for k, v in res.items()},
                         "vs_pylance": res["lance"] / res["lance_gpu"], "vs_parquet": res["parquet"] / res["lance_gpu"]})
        for engine in ("lance_gpu", "lance"):
            for op in ("scan", "batches"):
                m = child(CHILD_MEM, engine, op, base.with_suffix(".lance"))
                rows.append({"dataset": name, "op": f"memory:{op}", "engine": engine,
                             "peak_growth_mb": m["peak_growth"] / 1e6, "decoded_mb": m["decoded"] / 1e6,
                             "ratio": m["peak_growth"] / max(m["decoded"], 1)})
    meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d"), "rows": args.rows, "emb_rows": args.emb_rows, "repeat": args.repeat}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "read_cpu.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [f"# Read benchmark (CPU), {meta['date']}, {meta['cpus']} cores, {meta['machine']}, Python {meta['python']}", "",
             "Median seconds; ratio = other engine's time / lance_gpu's time (above 1: lance_gpu is faster).", "",
             "| dataset | op | lance_gpu s | pylance s | parquet s | vs pylance | vs parquet |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "vs_pylance" in r:
            lines.append(f"| {r['dataset']} | {r['op']} | {r['lance_gpu_s']:.3f} | {r['lance_s']:.3f} | {r['parquet_s']:.3f} | {r['vs_pylance']:.2f}x | {r['vs_parquet']:.2f}x |")
    lines += ["", "Peak memory growth (RSS) of one full scan / one pass of to_batches(65536), against the decoded table (scan) or the largest batch (batches).", "",
              "| dataset | op | engine | peak growth MB | decoded MB | ratio |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "peak_growth_mb" in r:
            lines.append(f"| {r['dataset']} | {r['op']} | {r['engine']} | {r['peak_growth_mb']:.0f} | {r['decoded_mb']:.1f} | {r['ratio']:.2f} |")
    (RESULTS / "read_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


TAKE_CHILD = r"""
import json, sys, time
import numpy as np
import lance, lance_gpu
path, ntakes, batch, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
engines = {"lance_gpu": lance_gpu.dataset(path, device="cpu"), "lance": lance.dataset(path)}
n = engines["lance"].count_rows()
rng = np.random.default_rng(3)
sets = [np.sort(rng.choice(n, batch, replace=False)) for _ in range(ntakes)]
for ds in engines.values():
    ds.take(sets[0])  # compile caches
assert engines["lance_gpu"].take(sets[1]).equals(engines["lance"].take(sets[1]))
best = {k: float("inf") for k in engines}
for _ in range(rounds):  # interleaved, so both engines see the same machine load
    for name, ds in engines.items():
        t0 = time.perf_counter()
        for s in sets:
            ds.take(s)
        best[name] = min(best[name], time.perf_counter() - t0)
print(json.dumps(best))
"""


def take_batches(rows: int = 1_000_000, takes: int = 200, batch: int = 1024, rounds: int = 3) -> None:
    """A training loop's shuffled batches: ``takes`` takes of ``batch`` sorted random rows of
    a pylance-written ``rows`` x (int64 label, 128-float32 embedding, string) dataset, both
    engines in one process; best of ``rounds``.  Writes benchmarks/results/take_cpu.md."""
    import numpy as np
    import pyarrow as pa

    import lance

    path = DATA / f"take_{rows}.lance"
    if not path.exists():
        rng = np.random.default_rng(0)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 128, dtype=np.float32)), 128)
        text = pa.array([f"item-{i}-{'x' * (i % 17)}" for i in range(rows)])
        lance.write_dataset(pa.table({"label": pa.array(rng.integers(0, 1000, rows)), "emb": vec, "s": text}), str(path))
    load = os.getloadavg()
    best = child(TAKE_CHILD, path, takes, batch, rounds)
    per = {k: 1000 * v / takes for k, v in best.items()}
    lines = [f"# Take benchmark (CPU), {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}", "",
             f"{rows} rows x (int64 label, fixed_size_list<float32, 128>, string), written by pylance; {takes} takes of {batch} sorted",
             f"random indices (all columns), best of {rounds} interleaved rounds, ms per take.", "",
             "| lance_gpu ms | pylance ms | vs pylance |", "|---|---|---|",
             f"| {per['lance_gpu']:.2f} | {per['lance']:.2f} | {per['lance'] / per['lance_gpu']:.2f}x |"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "take_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if "--take-batches" in sys.argv:
        take_batches()
    else:
        main()
