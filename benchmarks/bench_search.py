# SPDX-License-Identifier: Apache-2.0
"""Exact nearest-neighbour search: lance_gpu against pylance's exact search (no index) and,
on the GPU, against pylance's IVF_PQ index at the same recall.

Writes float32 embeddings with pylance (several fragments), then per case times
``to_table(nearest=...)`` on each library, rounds interleaved (pylance, lance_gpu, pylance, ...),
after one untimed warm-up each; checks the ids agree; prints one JSON line per case with the
medians and the ratio (pylance time / lance_gpu time: above 1 means lance_gpu is faster), and
with ``--markdown PATH`` writes the table.

    PYTHONPATH=$PWD python3 benchmarks/bench_search.py --rows 200000 --dim 128 --markdown benchmarks/results/search_cpu.md

``--device gpu`` (issue 27): lance_gpu searches on the device (vectors decoded into device
memory, distances and top-k there).  Besides pylance's exact search, pylance builds an IVF_PQ
index on the same data (``--partitions``, ``--sub-vectors``, ``--index-accelerator cuda`` to
train it on the GPU through torch); its query is timed over a sweep of ``nprobes`` x
``refine_factor``, each point with its recall@k against the exact result, and the cheapest
point reaching ``--target-recall`` (default 1.0: the exact search's recall) is what lance_gpu's
exact search is compared with.  The one command for the GPU machine::

    PYTHONPATH=$PWD python3 benchmarks/bench_search.py --device gpu --rows 1000000 --dim 768 \
        --markdown benchmarks/results/search_gpu.md

(``--metrics l2 --rounds 3`` builds one IVF_PQ index only, where device time is short.)

Without a usable GPU it exits 2 with one line saying why.  ``--simulate`` (with
``NUMBA_ENABLE_CUDASIM=1``) runs the same code under the CUDA simulator at a tiny size (the
test ``tests/test_bench_search_simulated.py``); its timings mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any

import numpy as np
import pyarrow as pa


def _write(path: str, rows: int, dim: int, seed: int = 0, fragments: int = 4) -> np.ndarray:
    """pylance writes ``rows`` random float32 vectors (in ``fragments`` fragments, batches of
    at most 64k rows so a large dataset is not held twice); returns the first 64 vectors
    (the queries are drawn near them)."""
    import lance

    rng = np.random.default_rng(seed)
    head: list[np.ndarray] = []
    schema = pa.schema([("id", pa.int64()), ("cat", pa.int32()), ("vec", pa.list_(pa.float32(), dim))])

    def batches():
        for start in range(0, rows, 65536):
            n = min(65536, rows - start)
            values = rng.standard_normal((n, dim), dtype=np.float32)
            if not head:
                head.append(values[:64].copy())
            ids = np.arange(start, start + n, dtype=np.int64)
            yield pa.record_batch([pa.array(ids), pa.array((ids % 10).astype(np.int32)),
                                   pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), dim)], schema=schema)

    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, batches()), path,
                        max_rows_per_file=max(1, -(-rows // fragments)))
    return head[0]


def _write_multivector(path: str, rows: int, dim: int, per_row: int = 4, seed: int = 1) -> None:
    """pylance writes ``rows`` rows of ``per_row`` random float32 vectors (a multivector column)."""
    import lance

    rng = np.random.default_rng(seed)
    values = rng.standard_normal((rows * per_row, dim), dtype=np.float32)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), dim)
    offsets = pa.array(np.arange(0, rows * per_row + 1, per_row, dtype=np.int32))
    table = pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)), "mv": pa.ListArray.from_arrays(offsets, vectors)})
    lance.write_dataset(table, path, max_rows_per_file=max(1, -(-rows // 4)))


def _time(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=None, help="default 200,000 (cpu) / 1,000,000 (gpu)")
    ap.add_argument("--dim", type=int, default=None, help="default 128 (cpu) / 768 (gpu)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--markdown", help="write the results as a markdown table here")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--partitions", type=int, default=None, help="IVF_PQ partitions (default ~sqrt(rows))")
    ap.add_argument("--sub-vectors", type=int, default=None, help="IVF_PQ sub-vectors (default dim / 8)")
    ap.add_argument("--index-accelerator", default=None, help="pylance's create_index accelerator (e.g. cuda)")
    ap.add_argument("--target-recall", type=float, default=1.0)
    ap.add_argument("--metrics", default="l2,cosine,dot", help="gpu: metrics searched (one IVF_PQ index built per metric)")
    ap.add_argument("--batch", type=int, default=16, help="gpu: queries of the batched case (0: none)")
    ap.add_argument("--quick", action="store_true", help="fewer cases and IVF_PQ points")
    ap.add_argument("--simulate", action="store_true", help=argparse.SUPPRESS)  # CUDA simulator, tiny sizes
    args = ap.parse_args(argv)
    if args.device == "gpu":
        return main_gpu(args)
    args.rows = args.rows or 200_000
    args.dim = args.dim or 128

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
        ("l2, distance_range (1.5 dim, 2.5 dim)", {"range": (1.5 * args.dim, 2.5 * args.dim)}),
        ("cosine, multivector (rows / 8 rows of 4 vectors, 2-vector query)", {"multivector": True}),
    ]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "emb")
        values = _write(path, args.rows, args.dim)
        emb = lance.dataset(path), lance_gpu.dataset(path, device="cpu")
        q1 = values[45 % values.shape[0]] + 0.01  # (values: the first 64 vectors written)
        mv_path = os.path.join(tmp, "multi")
        for name, extra in cases:
            kwargs = dict(extra)
            nq = kwargs.pop("queries", 1)
            metric = name.split(",")[0]
            q = q1 if nq == 1 else values[:nq] + 0.01
            nearest = {"column": "vec", "q": q, "k": args.k, "metric": metric}
            pds, ds = emb
            rng_bounds = kwargs.pop("range", None)
            if rng_bounds is not None:
                nearest["distance_range"] = rng_bounds
            if kwargs.pop("multivector", False):
                if not os.path.exists(mv_path):
                    _write_multivector(mv_path, max(1, args.rows // 8), args.dim)
                pds, ds = lance.dataset(mv_path), lance_gpu.dataset(mv_path, device="cpu")
                nearest = {"column": "mv", "q": values[:2] + 0.01, "k": args.k, "metric": metric}
            theirs_t: list[float] = []
            ours_t: list[float] = []
            theirs = ds_out = None
            for _ in range(args.rounds + 1):
                t, theirs = _time(lambda d=pds, n=nearest, kw=kwargs: d.to_table(nearest=n, **kw))
                theirs_t.append(t)
                t, ds_out = _time(lambda d=ds, n=nearest, kw=kwargs: d.to_table(nearest=n, **kw))
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
    return 0


# --------------------------------------------------------------------------------------------
# --device gpu
# --------------------------------------------------------------------------------------------


def _recall(found: pa.Table, truth: pa.Table, k: int) -> float:
    """Mean recall@k of ``found`` against the exact ``truth`` (both with ``query_index`` when
    several queries, else one query)."""
    if "query_index" not in truth.column_names:
        return len(set(found["id"].to_pylist()) & set(truth["id"].to_pylist())) / max(1, min(k, truth.num_rows))
    hits = []
    fq, tq = found["query_index"].to_numpy(), truth["query_index"].to_numpy()
    fid, tid = found["id"].to_numpy(), truth["id"].to_numpy()
    for j in np.unique(tq):
        want = set(tid[tq == j].tolist())
        hits.append(len(set(fid[fq == j].tolist()) & want) / max(1, len(want)))
    return float(np.mean(hits))


def _gpu_ready(simulate: bool) -> str | None:
    """Why the GPU benchmark cannot run (None: it can)."""
    if simulate:
        if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
            return "--simulate needs NUMBA_ENABLE_CUDASIM=1 in the environment"
        import lance_gpu._device as device_mod

        device_mod.gpu_unusable_reason = lambda: None  # the simulator stands in for the device
        return None
    from lance_gpu._device import gpu_unusable_reason

    reason = gpu_unusable_reason()
    return None if reason is None else f"no usable GPU ({reason})"


def _median_time(fn: Any, rounds: int) -> tuple[float, Any]:
    fn()  # warm-up (kernel compilation, file cache)
    times, out = [], None
    for _ in range(rounds):
        t, out = _time(fn)
        times.append(t)
    return statistics.median(times), out


def main_gpu(args: argparse.Namespace) -> int:
    reason = _gpu_ready(args.simulate)
    if reason is not None:
        print(f"bench_search: {reason}; nothing measured", file=sys.stderr)
        return 2
    import lance

    import lance_gpu

    warnings.simplefilter("ignore")
    rows = args.rows or 1_000_000
    dim = args.dim or 768
    k = args.k
    partitions = args.partitions or max(2, round(rows ** 0.5))
    sub_vectors = args.sub_vectors or max(1, dim // 8)
    probes = [1, 4, 16, 64, 256, partitions] if not args.quick else [1, partitions]
    probes = sorted({min(p, partitions) for p in probes})
    refines = [None, 10, 50] if not args.quick else [None, 20]
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    cases = [(m, m, 1) for m in metrics]
    if args.batch:
        cases.append((f"{metrics[0]}, {args.batch} queries", metrics[0], args.batch))
    if args.quick:
        cases = [("l2", "l2", 1), ("cosine, 4 queries", "cosine", 4)]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "emb")
        t_write, head = _time(lambda: _write(path, rows, dim))
        print(json.dumps({"wrote_rows": rows, "dim": dim, "write_s": round(t_write, 1)}), flush=True)
        pds = lance.dataset(path)
        index_kwargs: dict[str, Any] = {"num_partitions": partitions, "num_sub_vectors": sub_vectors}
        if args.index_accelerator:
            index_kwargs["accelerator"] = args.index_accelerator
        built: dict[str, Any] = {}  # the metric of pylance's current IVF_PQ index, its build time
        for name, metric, nq in cases:
            q = head[0] + 0.01 if nq == 1 else head[:nq] + 0.01
            exact = {"column": "vec", "q": q, "k": k, "metric": metric, "use_index": False}
            ds = lance_gpu.dataset(path, device="gpu")
            t_gpu, ours = _median_time(lambda d=ds, n=exact: d.to_table(nearest=n, columns=["id"]), args.rounds)
            t_pyl, truth = _median_time(lambda d=pds, n=exact: d.to_table(nearest=n, columns=["id"]), args.rounds)
            same = ours["id"].equals(truth["id"])
            results.append({"case": name, "what": "exact", "rows": rows, "dim": dim, "k": k, "pylance_s": round(t_pyl, 4),
                            "lance_gpu_s": round(t_gpu, 4), "ratio": round(t_pyl / t_gpu, 2), "same_ids": same})
            print(json.dumps(results[-1]), flush=True)
            # pylance's IVF_PQ index of this metric: the cheapest sweep point at the target recall
            if built.get("metric") != metric:
                built["metric"] = metric
                built["s"], _ = _time(lambda d=pds, m=metric: d.create_index("vec", "IVF_PQ", metric=m, replace=True,
                                                                             **index_kwargs))
            ipds = lance.dataset(path)
            sweep = []
            for nprobes in probes:
                for refine in refines:
                    ann = {"column": "vec", "q": q, "k": k, "metric": metric, "nprobes": nprobes}
                    if refine is not None:
                        ann["refine_factor"] = refine
                    t_ann, got = _median_time(lambda d=ipds, n=ann: d.to_table(nearest=n, columns=["id"]), args.rounds)
                    sweep.append({"nprobes": nprobes, "refine_factor": refine, "s": round(t_ann, 4),
                                  "recall": round(_recall(got, truth, k), 4)})
            reached = [p for p in sweep if p["recall"] >= args.target_recall]
            best = min(reached, key=lambda p: p["s"]) if reached else max(sweep, key=lambda p: (p["recall"], -p["s"]))
            results.append({"case": name, "what": "ivf_pq", "rows": rows, "dim": dim, "k": k,
                            "index_build_s": round(float(built["s"]), 1), "pylance_ivf_pq_s": best["s"],
                            "ivf_pq_recall": best["recall"], "nprobes": best["nprobes"],
                            "refine_factor": best["refine_factor"], "target_reached": bool(reached),
                            "lance_gpu_s": round(t_gpu, 4), "ratio": round(best["s"] / t_gpu, 2), "sweep": sweep})
            print(json.dumps(results[-1]), flush=True)
    if args.markdown and not args.simulate:
        _gpu_markdown(args, rows, dim, partitions, sub_vectors, results)
    return 0


def _gpu_markdown(args: argparse.Namespace, rows: int, dim: int, partitions: int, sub_vectors: int,
                  results: list[dict[str, Any]]) -> None:
    from lance_gpu._device import gpu_unusable_reason  # noqa: F401 - a GPU was checked usable

    try:
        import cupy

        device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:  # pragma: no cover - a GPU without CuPy properties
        device = "GPU"
    lines = [
        "# Exact search on the GPU: lance_gpu vs pylance 14.0.2 (exact, and IVF_PQ at the same recall)",
        "",
        f"`PYTHONPATH=$PWD python3 benchmarks/bench_search.py --device gpu --rows {rows} --dim {dim} --k {args.k} "
        f"--rounds {args.rounds}`; {device}, {os.cpu_count()} CPUs, numpy {np.__version__}. float32 embeddings "
        f"written by pylance in 4 fragments; medians of {args.rounds} rounds after a warm-up (lance_gpu's warm-up "
        "compiles its kernels). ratio = pylance time / lance_gpu time. IVF_PQ: "
        f"{partitions} partitions, {sub_vectors} sub-vectors, the cheapest (nprobes, refine_factor) whose recall@k "
        f"reaches {args.target_recall} (else the best recall, marked).",
        "",
        "| case | pylance exact s | pylance IVF_PQ s (recall, nprobes, refine) | index build s | lance_gpu exact s "
        "| vs exact | vs IVF_PQ | same ids |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    exact = {r["case"]: r for r in results if r["what"] == "exact"}
    for r in results:
        if r["what"] != "ivf_pq":
            continue
        e = exact[r["case"]]
        mark = "" if r["target_reached"] else " (target not reached)"
        lines.append(f"| {r['case']} | {e['pylance_s']} | {r['pylance_ivf_pq_s']} ({r['ivf_pq_recall']}, {r['nprobes']}, "
                     f"{r['refine_factor']}){mark} | {r['index_build_s']} | {e['lance_gpu_s']} | {e['ratio']} | {r['ratio']} "
                     f"| {e['same_ids']} |")
    with open(args.markdown, "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
