# SPDX-License-Identifier: Apache-2.0
"""Training-feed benchmark: lance_gpu.torch.LanceDataset against pylance's
lance.torch.data.LanceDataset, samples per second, in one run.

Dataset (written once with pylance under benchmarks/data/): ``--rows`` (1M) rows of a
128-float32 embedding (fixed_size_list) and an int64 label, in fragments of 250k rows.
Batch size 1024.  Cases (each in a fresh process: one warm-up epoch, then the median of
``--repeat`` epochs; each batch is materialised):

* ``sequential``: ours (``device="cpu"``) / pylance's default loader;
* ``shuffled-fragments``: both ``ShardedFragmentSampler(0, 1, randomize=True)`` (whole
  fragments in a seeded order, the same sampler semantics on both sides);
* ``shuffled-batches``: both ``ShardedBatchSampler`` randomized (contiguous 1024-row ranges in a
  seeded order; ours ``shard_granularity="batch", shuffle=True, shuffle_buffer=0`` gives
  pylance's order at epoch 0);
* ``shuffled-rows``: ours ``shuffle=True`` (seeded read order + a 65,536-row shuffle buffer,
  so rows are mixed) / pylance's randomized ``ShardedBatchSampler``: *not* like with like,
  pylance's loader has no row-mixing shuffle, so ours does strictly more work here;
* on a usable GPU also ``gpu-sequential`` / ``gpu-shuffled``: ours ``device="cuda"`` against
  pylance plus ``.cuda()``, synchronised per batch.

With ``--interleaved``, a second table: per case both loaders in one process, their epochs
alternating, so each round sees about the same machine load.

Output: a table on stdout and ``benchmarks/results/torch_cpu.{md,json}`` (``torch_gpu`` on a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"
BATCH = 1024


def make_data(rows: int) -> Path:
    path = DATA / f"torch_emb_{rows}.lance"
    if path.exists():
        return path
    import lance
    import numpy as np
    import pyarrow as pa

    DATA.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((rows, 128), dtype=np.float32)
    table = pa.table(
        {
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), 128),
            "label": pa.array(rng.integers(0, 1000, rows), pa.int64()),
        }
    )
    lance.write_dataset(table, str(path), max_rows_per_file=250_000)
    return path


def _loader(engine: str, case: str, uri: str):
    cols = ["emb", "label"]
    if engine == "lance_gpu":
        import lance_gpu.torch as lt

        device = "cuda" if case.startswith("gpu") else "cpu"
        if case.endswith("sequential"):
            return lt.LanceDataset(uri, BATCH, columns=cols, device=device)
        if case == "shuffled-fragments":
            return lt.LanceDataset(uri, BATCH, columns=cols, device=device, sampler=lt.ShardedFragmentSampler(0, 1, randomize=True))
        if case == "shuffled-batches":
            return lt.LanceDataset(uri, BATCH, columns=cols, device=device, shard_granularity="batch", shuffle=True, shuffle_buffer=0)
        return lt.LanceDataset(uri, BATCH, columns=cols, device=device, shuffle=True)
    import lance
    from lance.sampler import ShardedBatchSampler, ShardedFragmentSampler
    from lance.torch.data import LanceDataset

    if case.endswith("sequential"):
        return LanceDataset(lance.dataset(uri), BATCH, columns=cols)
    if case == "shuffled-fragments":
        return LanceDataset(lance.dataset(uri), BATCH, columns=cols, sampler=ShardedFragmentSampler(0, 1, randomize=True))
    return LanceDataset(lance.dataset(uri), BATCH, columns=cols, sampler=ShardedBatchSampler(0, 1, randomize=True))


def _epoch(loader, to_cuda: bool) -> tuple[int, float]:
    import torch

    rows = 0
    t0 = time.perf_counter()
    for batch in loader:
        emb, label = batch["emb"], batch["label"]
        if to_cuda and not emb.is_cuda:
            emb, label = emb.cuda(non_blocking=True), label.cuda(non_blocking=True)
        if to_cuda:
            torch.cuda.synchronize()
        emb[-1, -1].item()  # the batch is materialised (as a training step would read it)
        rows += int(label.shape[0])
    return rows, time.perf_counter() - t0


def run_case(engine: str, case: str, uri: str, repeat: int) -> dict:
    import warnings

    warnings.simplefilter("ignore")
    loader = _loader(engine, case, uri)
    to_cuda = case.startswith("gpu")
    rows, _ = _epoch(loader, to_cuda)  # warm-up: compile kernels, fill the page cache
    times, cpu = [], []
    for epoch in range(repeat):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch + 1)
        c0 = time.process_time()
        n, dt = _epoch(loader, to_cuda)
        cpu.append(time.process_time() - c0)
        assert n == rows, (n, rows)
        times.append(dt)
    med = statistics.median(times)
    return {
        "engine": engine, "case": case, "rows": rows, "seconds": med, "samples_per_s": rows / med, "runs": times,
        "cpu_seconds": statistics.median(cpu), "loadavg": _loadavg(),
    }


def run_interleaved(case: str, uri: str, repeat: int) -> dict:
    """Both loaders of ``case`` in one process, their epochs alternating (one warm-up each,
    then ``repeat`` rounds): each round sees about the same load on both."""
    import warnings

    warnings.simplefilter("ignore")
    loaders = {engine: _loader(engine, case, uri) for engine in ("lance_gpu", "lance")}
    to_cuda = case.startswith("gpu")
    rows = {engine: _epoch(loader, to_cuda)[0] for engine, loader in loaders.items()}
    times: dict[str, list[float]] = {engine: [] for engine in loaders}
    cpu: dict[str, list[float]] = {engine: [] for engine in loaders}
    loads = []
    for epoch in range(repeat):
        for engine, loader in loaders.items():
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch + 1)
            c0 = time.process_time()
            n, dt = _epoch(loader, to_cuda)
            cpu[engine].append(time.process_time() - c0)
            assert n == rows[engine], (n, rows[engine])
            times[engine].append(dt)
        loads.append(_loadavg().split()[0])
    out = {"case": case, "loadavg": " ".join(loads)}
    for engine in loaders:
        out[engine] = {"rows": rows[engine], "median_s": statistics.median(times[engine]), "best_s": min(times[engine]),
                       "runs": times[engine], "cpu_seconds": statistics.median(cpu[engine])}
    return out


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _subprocess(engine: str, case: str, uri: str, repeat: int) -> dict:
    call = f"b.run_interleaved({case!r}, {uri!r}, {repeat})" if engine == "both" else f"b.run_case({engine!r}, {case!r}, {uri!r}, {repeat})"
    code = (
        f"import json, sys; sys.path.insert(0, {str(HERE.parent)!r}); sys.path.insert(0, {str(HERE)!r}); import bench_torch as b; "
        f"print(json.dumps({call}))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--interleaved", action="store_true", help="also run both loaders per case in one process, epochs alternating")
    args = ap.parse_args()
    uri = str(make_data(args.rows))
    from lance_gpu._device import gpu_unusable_reason

    cases = ["sequential", "shuffled-fragments", "shuffled-batches", "shuffled-rows"]
    gpu = gpu_unusable_reason() is None
    if gpu:
        cases += ["gpu-sequential", "gpu-shuffled"]
    results = []
    start_load = _loadavg()
    for case in cases:
        for engine in ("lance_gpu", "lance"):
            r = _subprocess(engine, case, uri, args.repeat)
            results.append(r)
            print(f"{case:18s} {engine:10s} {r['samples_per_s']:>12,.0f} samples/s  ({r['seconds']:.3f} s/epoch)", flush=True)
    by = {(r["case"], r["engine"]): r for r in results}
    host = f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"
    lines = [
        f"# Training-feed benchmark ({'GPU' if gpu else 'CPU'}), {time.strftime('%Y-%m-%d')}, {host}",
        "",
        f"{args.rows:,} rows x (128-float32 embedding + int64 label), batch {BATCH}; median of {args.repeat} epochs after a warm-up, each in a fresh process.",
        "ratio = our samples/s / pylance's (above 1: lance_gpu is faster). cpu s = process CPU seconds per epoch",
        "(all threads; on a loaded machine wall time also depends on how many runnable threads a loader has).",
        f"Load average at the start: {start_load}; after each case: see the last column.",
        "",
        "| case | lance_gpu samples/s | pylance samples/s | ratio | cpu s ours / pylance | loadavg |",
        "|---|---|---|---|---|---|",
    ]
    for case in cases:
        ours, ref = by[(case, "lance_gpu")], by[(case, "lance")]
        lines.append(
            f"| {case} | {ours['samples_per_s']:,.0f} | {ref['samples_per_s']:,.0f} | {ours['samples_per_s'] / ref['samples_per_s']:.2f}x "
            f"| {ours['cpu_seconds']:.3f} / {ref['cpu_seconds']:.3f} | {ref['loadavg']} |"
        )
    inter = []
    if args.interleaved:
        lines += [
            "",
            f"Interleaved: both loaders in one process per case, epochs alternating ({args.repeat} rounds after a warm-up each);",
            "ratio of medians (and of best epochs); loadavg (1 min) after each round.",
            "",
            "| case | lance_gpu samples/s (median) | pylance samples/s (median) | ratio median | ratio best | cpu s ours / pylance | loadavg per round |",
            "|---|---|---|---|---|---|---|",
        ]
        for case in cases:
            r = _subprocess("both", case, uri, args.repeat)
            inter.append(r)
            ours, ref = r["lance_gpu"], r["lance"]
            print(f"{case:18s} interleaved {ours['rows'] / ours['median_s']:>12,.0f} / {ref['rows'] / ref['median_s']:>12,.0f} samples/s", flush=True)
            lines.append(
                f"| {case} | {ours['rows'] / ours['median_s']:,.0f} | {ref['rows'] / ref['median_s']:,.0f} | {ref['median_s'] / ours['median_s']:.2f}x "
                f"| {ref['best_s'] / ours['best_s']:.2f}x | {ours['cpu_seconds']:.3f} / {ref['cpu_seconds']:.3f} | {r['loadavg']} |"
            )
    RESULTS.mkdir(exist_ok=True)
    name = "torch_gpu" if gpu else "torch_cpu"
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps({"host": host, "rows": args.rows, "batch": BATCH, "results": results, "interleaved": inter}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
