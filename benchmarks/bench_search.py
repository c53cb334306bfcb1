# SPDX-License-Identifier: Apache-2.0
"""Exact nearest-neighbour search on the CPU: lance_gpu against pylance's exact search (no index).

Writes float32 embeddings with pylance (several fragments), then per case times
``to_table(nearest=...)`` on each library, rounds interleaved (pylance, lance_gpu, pylance, ...),
after one untimed warm-up each; checks the ids agree; prints one JSON line per case with the
medians and the ratio (pylance time / lance_gpu time: above 1 means lance_gpu is faster), and
with ``--markdown PATH`` writes the table.

    PYTHONPATH=$PWD python3 benchmarks/bench_search.py --rows 200000 --dim 128 --markdown benchmarks/results/search_cpu.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from typing import Any

import numpy as np
import pyarrow as pa


def _write(path: str, rows: int, dim: int, seed: int = 0) -> np.ndarray:
    import lance

    rng = np.random.default_rng(seed)
    values = rng.standard_normal((rows, dim), dtype=np.float32)
    table = pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "cat": pa.array((np.arange(rows) % 10).astype(np.int32)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), dim),
    })
    lance.write_dataset(table, path, max_rows_per_file=max(1, rows // 4))
    return values


def _time(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--markdown", help="write the results as a markdown table here")
    args = ap.parse_args()

    import lance

    import lance_gpu

    warnings.simplefilter("ignore")
    cases = [
        ("l2", {}),
        ("cosine", {}),
        ("dot", {}),
        ("l2, columns=[id]", {"columns": ["id"]}),
        ("l2, prefilter cat = 3", {"filter": "cat = 3", "prefilter": True}),
        ("l2, postfilter cat = 3", {"filter": "cat = 3", "prefilter": False}),
        ("l2, 8 queries", {"queries": 8}),
    ]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "emb")
        values = _write(path, args.rows, args.dim)
        pds, ds = lance.dataset(path), lance_gpu.dataset(path, device="cpu")
        q1 = values[12345 % args.rows] + 0.01
        for name, extra in cases:
            kwargs = dict(extra)
            nq = kwargs.pop("queries", 1)
            metric = name.split(",")[0]
            q = q1 if nq == 1 else values[:nq] + 0.01
            nearest = {"column": "vec", "q": q, "k": args.k, "metric": metric}
            theirs_t: list[float] = []
            ours_t: list[float] = []
            theirs = ds_out = None
            for _ in range(args.rounds + 1):
                t, theirs = _time(lambda n=nearest, kw=kwargs: pds.to_table(nearest=n, **kw))
                theirs_t.append(t)
                t, ds_out = _time(lambda n=nearest, kw=kwargs: ds.to_table(nearest=n, **kw))
                ours_t.append(t)
            assert theirs is not None and ds_out is not None
            same = theirs.column("id").equals(ds_out.column("id"))
            p, o = statistics.median(theirs_t[1:]), statistics.median(ours_t[1:])
            row = {"case": name, "rows": args.rows, "dim": args.dim, "k": args.k, "pylance_s": round(p, 4),
                   "lance_gpu_s": round(o, 4), "ratio": round(p / o, 2), "same_ids": same}
            print(json.dumps(row), flush=True)
            results.append(row)
    if args.markdown:
        lines = [
            "# Exact search on the CPU: lance_gpu vs pylance 14.0.2 (no index)",
            "",
            f"`PYTHONPATH=$PWD python3 benchmarks/bench_search.py --rows {args.rows} --dim {args.dim} --k {args.k} "
            f"--rounds {args.rounds}`; {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
            f"numpy {np.__version__}. float32 embeddings written by pylance in 4 fragments; medians of "
            f"{args.rounds} interleaved rounds after a warm-up; ratio = pylance time / lance_gpu time "
            "(above 1: lance_gpu faster). `same ids`: both returned the same ids in the same order.",
            "",
            "| case | pylance s | lance_gpu s | ratio | same ids |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        lines += [f"| {r['case']} | {r['pylance_s']} | {r['lance_gpu_s']} | {r['ratio']} | {r['same_ids']} |"
                  for r in results]
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
