# SPDX-License-Identifier: Apache-2.0
"""IVF vector indices on the CPU: lance_gpu against pylance 14 (issue 27 item 3).

Writes clustered float32 embeddings with pylance (4 fragments), then

* **build**: ``create_index`` of each library (IVF_FLAT, IVF_SQ, IVF_PQ) on copies of the dataset,
  timed once each; the recall@k of *pylance's* search over each index at several ``nprobes``
  (against pylance's exact search), so the two builds are judged by the same searcher;
* **query**: over pylance's own index, ``to_table(nearest=...)`` of each library, rounds
  interleaved after a warm-up (medians), with each library's recall@k.

Prints one JSON line per case; ``--markdown PATH`` writes the tables.

    PYTHONPATH=$PWD python3 benchmarks/bench_vector_index.py --rows 100000 --dim 128 \\
        --partitions 64 --sub-vectors 16 --markdown benchmarks/results/vector_index_cpu.md

On a GPU machine, index builds trained on the device by both libraries (pending)::

    PYTHONPATH=$PWD python3 benchmarks/bench_vector_index.py --rows 1000000 --dim 768 \\
        --partitions 1024 --sub-vectors 96 --accelerator cuda --markdown benchmarks/results/vector_index_gpu.md
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


def _data(rows: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(8, rows // 1000), dim)).astype(np.float32) * 0.7
    pick = rng.integers(0, centres.shape[0], rows)
    values = centres[pick] + rng.standard_normal((rows, dim), dtype=np.float32)
    queries = centres[rng.integers(0, centres.shape[0], 64)] + rng.standard_normal((64, dim), dtype=np.float32)
    return values.astype(np.float32), queries.astype(np.float32)


def _write(path: str, values: np.ndarray) -> None:
    import lance

    table = pa.table({
        "id": pa.array(np.arange(values.shape[0], dtype=np.int64)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), values.shape[1]),
    })
    lance.write_dataset(table, path, max_rows_per_file=max(1, values.shape[0] // 4))


def _ids(ds: Any, nearest: dict) -> list[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ds.to_table(nearest=nearest, columns=["id"])["id"].to_pylist()


def _recall(ds: Any, truth: list[set[int]], queries: np.ndarray, k: int, **opts: Any) -> float:
    hits = sum(len(set(_ids(ds, {"column": "vec", "q": q, "k": k, **opts})) & t) for q, t in zip(queries, truth, strict=True))
    return hits / (k * len(truth))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--sub-vectors", type=int, default=16)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--nprobes", default="1,4,16")
    ap.add_argument("--accelerator", default=None,
                    help="'cuda': both libraries train on the GPU (pylance through torch, lance_gpu through numba-cuda)")
    ap.add_argument("--markdown", help="write the results as a markdown table here")
    args = ap.parse_args()

    import lance

    import lance_gpu
    from lance_gpu.scan import vector_index

    nprobes = [int(n) for n in args.nprobes.split(",")]
    values, queries = _data(args.rows, args.dim)
    queries = queries[: args.queries]
    tmp = tempfile.mkdtemp(prefix="bench_vi_")
    base = os.path.join(tmp, "base")
    _write(base, values)
    truth = [set(_ids(lance.dataset(base), {"column": "vec", "q": q, "k": args.k, "use_index": False})) for q in queries]
    k = args.k
    build_rows, query_rows = [], []
    try:
        for index_type in ("IVF_FLAT", "IVF_SQ", "IVF_PQ"):
            params: dict[str, Any] = {"num_partitions": args.partitions, "accelerator": args.accelerator}
            if index_type == "IVF_PQ":
                params["num_sub_vectors"] = args.sub_vectors
            built = {}
            for who in ("pylance", "lance_gpu"):
                path = os.path.join(tmp, f"{index_type}_{who}")
                shutil.copytree(base, path)
                t0 = time.perf_counter()
                if who == "pylance":
                    lance.dataset(path).create_index("vec", index_type, **params)
                else:
                    lance_gpu.dataset(path).create_index("vec", index_type, seed=0, **params)
                built[who] = (time.perf_counter() - t0, path)
            row = {"case": f"build {index_type}", "pylance_s": round(built["pylance"][0], 3),
                   "lance_gpu_s": round(built["lance_gpu"][0], 3),
                   "ratio": round(built["pylance"][0] / built["lance_gpu"][0], 3)}
            for n in nprobes:
                for who in ("pylance", "lance_gpu"):
                    row[f"recall@{k} np={n} ({who} index)"] = round(
                        _recall(lance.dataset(built[who][1]), truth, queries, k, nprobes=n), 3)
            print(json.dumps(row))
            build_rows.append(row)

            # queries over pylance's own index
            path = built["pylance"][1]
            theirs, ours = lance.dataset(path), lance_gpu.dataset(path)
            for n in nprobes:
                for refine in (None, 4):
                    opts = {"nprobes": n} if refine is None else {"nprobes": n, "refine_factor": refine}
                    times: dict[str, list[float]] = {"pylance": [], "lance_gpu": []}
                    for ds in (theirs, ours):  # warm-up (index loaded and cached)
                        _ids(ds, {"column": "vec", "q": queries[0], "k": k, **opts})
                    for _ in range(args.rounds):
                        for who, ds in (("pylance", theirs), ("lance_gpu", ours)):
                            t0 = time.perf_counter()
                            for q in queries:
                                _ids(ds, {"column": "vec", "q": q, "k": k, **opts})
                            times[who].append((time.perf_counter() - t0) / len(queries))
                    tp, to = statistics.median(times["pylance"]), statistics.median(times["lance_gpu"])
                    row = {"case": f"query {index_type} nprobes={n}" + ("" if refine is None else f" refine={refine}"),
                           "pylance_ms": round(tp * 1e3, 3), "lance_gpu_ms": round(to * 1e3, 3), "ratio": round(tp / to, 3),
                           "recall_pylance": round(_recall(theirs, truth, queries, k, **opts), 3),
                           "recall_lance_gpu": round(_recall(ours, truth, queries, k, **opts), 3)}
                    print(json.dumps(row))
                    query_rows.append(row)
            vector_index._CACHE.clear()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    if args.markdown:
        cmd = (f"PYTHONPATH=$PWD python3 benchmarks/bench_vector_index.py --rows {args.rows} --dim {args.dim} "
               f"--partitions {args.partitions} --sub-vectors {args.sub_vectors} --k {k} --queries {args.queries} "
               f"--rounds {args.rounds} --nprobes {args.nprobes}"
               + (f" --accelerator {args.accelerator}" if args.accelerator else ""))
        env = (f"{os.cpu_count()} CPUs ({platform.machine()}), numpy {np.__version__}, pylance {lance.__version__}; "
               "a shared, loaded box (other jobs running), so times are indicative only")
        lines = [f"# IVF vector indices on the CPU: lance_gpu vs pylance ({args.rows:,} x {args.dim})", "",
                 f"`{cmd}`; {env}. Clustered float32 embeddings written by pylance in 4 fragments; "
                 f"{len(queries)} queries, recall@{k} against pylance's exact search.", "",
                 "## Build (one timed build each; recall of pylance's search over each index)", ""]
        keys = list(build_rows[0].keys())
        lines += ["| " + " | ".join(keys) + " |", "| " + " | ".join("---" for _ in keys) + " |"]
        lines += ["| " + " | ".join(str(r[c]) for c in keys) + " |" for r in build_rows]
        lines += ["", "## Query over pylance's index (per query, medians of interleaved rounds; ratio = pylance / lance_gpu)", ""]
        keys = list(query_rows[0].keys())
        lines += ["| " + " | ".join(keys) + " |", "| " + " | ".join("---" for _ in keys) + " |"]
        lines += ["| " + " | ".join(str(r[c]) for c in keys) + " |" for r in query_rows]
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
