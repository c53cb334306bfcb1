# SPDX-License-Identifier: Apache-2.0
"""Small operations on a fresh dataset of ten tiny fragments (issue 24 item 5), in one process,
wall and CPU time, both engines interleaved, many rounds; optionally where our time goes.

The dataset is ``bench_scale.py``'s shape ``10`` (ten appends of 16 rows).  Each round of an
operation copies it afresh (untimed, then ``os.sync()``), opens it and runs the operation on it
(timed: ``delete1``, ``update4``, ``merge_insert4``, ``compact``); ``append`` writes 16 rows to a
copy per engine that grows by one version per round.  A round alternates which engine goes first.
Between rounds the process waits on the copy, so every call starts "cold" (on the shared 2-core
machine a small call made after an idle pause costs several times what it costs in a tight loop):
that is the latency a user sees, and what ``bench_scale.py`` measures with 5 rounds.

Medians of wall time (``perf_counter``) and CPU time (``process_time``: every thread of the
process, which pylance's Rust threads also count in) and the ratios pylance / ours.  CPU time
moves less with the load of the machine than wall time; both are printed with the load average.

``--phases``: the median time of our main steps (functions wrapped with a timer: opening the
dataset, reading the rows, writing data and deletion files, the commit and, inside it, creating
files and the fsync round) over the rounds of each operation.

    PYTHONPATH=. python3 benchmarks/bench_fresh_ops.py [--rounds 30] [--ops append,delete1] [--phases]
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
OPS = ("append", "delete1", "update4", "merge_insert4", "compact")
#: (module, attribute) of the steps ``--phases`` times.
PHASES = (
    ("lance_gpu", "dataset"),
    ("lance_gpu.write.dataset_writer", "write_committed"),
    ("lance_gpu.write.dataset_writer", "_write_fragments"),
    ("lance_gpu.write.operations", "plan_delete"),
    ("lance_gpu.write.rowlevel", "_small_update_rows"),
    ("lance_gpu.scan.scanner", "LanceScanner.to_table"),
    ("lance_gpu.filter", "CompiledFilter.mask"),
    ("lance_gpu.write.rowlevel", "_RowChange._write_rows"),
    ("lance_gpu.table.deletion_writer", "write_deletion_file"),
    ("lance_gpu.write.compaction", "reserve_fragment_ids"),
    ("lance_gpu.txn.commit", "commit_file"),
    ("lance_gpu.txn.publish", "write_transaction_file"),
    ("lance_gpu.io.local", "LocalWriter.__init__"),
    ("lance_gpu.io.local", "LocalStore._stage"),
    ("lance_gpu.io.local", "LocalStore.sync"),
)


def _wrap_phases(times: dict[str, list[float]]) -> None:
    """Time each step of :data:`PHASES` (also where another module imported it by name)."""
    for modname, attr in PHASES:
        try:
            owner = importlib.import_module(modname)
            *path, name = attr.split(".")
            for part in path:
                owner = getattr(owner, part)
            original = getattr(owner, name)
        except (ImportError, AttributeError):
            continue  # not in this version of the code
        key = attr

        def timed(*args, __f=original, __key=key, **kwargs):
            t0 = time.perf_counter()
            try:
                return __f(*args, **kwargs)
            finally:
                times[__key].append(time.perf_counter() - t0)

        setattr(owner, name, timed)
        if not path:
            for module in list(sys.modules.values()):
                if module is not None and getattr(module, name, None) is original:
                    setattr(module, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--phases", action="store_true", help="also time our main steps")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import lance
    import numpy as np
    import pyarrow as pa

    import lance_gpu

    sys.path.insert(0, str(HERE))
    from bench_scale import build

    base = build("10")
    total = lance.dataset(base).count_rows()
    k = min(1234, total // 2)
    libs = {"lance": lance, "lance_gpu": lance_gpu}
    work = tempfile.mkdtemp(prefix="bench_fresh_ops_")
    phase_times: dict[str, list[float]] = collections.defaultdict(list)
    if args.phases:
        _wrap_phases(phase_times)

    def batch(start: int) -> pa.Table:
        ids = np.arange(start, start + 16, dtype=np.int64)
        emb = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(16 * 8, np.float32)), 8)
        return pa.table({"id": ids, "s": pa.array([f"s{i % 97}" for i in ids]), "x": ids * 0.5, "emb": emb})

    own = {e: os.path.join(work, f"append_{e}") for e in libs}
    for path in own.values():
        shutil.copytree(base, path)
    counter = [10_000_000]

    def run(engine: str, op: str) -> tuple[float, float]:
        lib = libs[engine]
        if op == "append":
            counter[0] += 16
            table = batch(counter[0])
            t0, c0 = time.perf_counter(), time.process_time()
            lib.write_dataset(table, own[engine], mode="append")
            return time.perf_counter() - t0, time.process_time() - c0
        d = tempfile.mkdtemp(dir=work)
        shutil.copytree(base, d + "/ds")
        os.sync()  # the copy's dirty pages are not the operation's to flush
        src = pa.concat_tables([batch(k).slice(0, 2), batch(10**8).slice(0, 2)])
        t0, c0 = time.perf_counter(), time.process_time()
        ds = lib.dataset(d + "/ds")
        if op == "delete1":
            ds.delete(f"id = {k}")
        elif op == "update4":
            ds.update({"x": "x + 1"}, where=f"id >= {k} and id < {k + 4}")
        elif op == "merge_insert4":
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
        else:
            ds.optimize.compact_files()
        out = time.perf_counter() - t0, time.process_time() - c0
        shutil.rmtree(d)
        return out

    print(f"{time.strftime('%H:%M:%S')} load {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {args.rounds} rounds")
    for op in args.ops.split(","):
        for engine in libs:  # warm-up: kernels loaded, caches filled
            run(engine, op)
            run(engine, op)
        phase_times.clear()
        got: dict[str, list[tuple[float, float]]] = {e: [] for e in libs}
        for r in range(args.rounds):
            for engine in (("lance", "lance_gpu") if r % 2 == 0 else ("lance_gpu", "lance")):
                got[engine].append(run(engine, op))
        wall = {e: statistics.median(t for t, _c in v) * 1e3 for e, v in got.items()}
        cpu = {e: statistics.median(c for _t, c in v) * 1e3 for e, v in got.items()}
        print(f"{op:14s} pylance {wall['lance']:6.2f} / {cpu['lance']:6.2f} ms  lance_gpu {wall['lance_gpu']:6.2f} / "
              f"{cpu['lance_gpu']:6.2f} ms (wall / cpu)  ratio wall {wall['lance'] / wall['lance_gpu']:.2f} "
              f"cpu {cpu['lance'] / cpu['lance_gpu']:.2f}", flush=True)
        for key in sorted(phase_times, key=lambda k: -statistics.median(phase_times[k]) * len(phase_times[k])):
            values = phase_times[key]
            print(f"    {key:32s} calls/op {len(values) / args.rounds:4.1f}  median {statistics.median(values) * 1e3:.3f} ms")
    print(f"{time.strftime('%H:%M:%S')} load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
