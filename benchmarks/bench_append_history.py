# SPDX-License-Identifier: Apache-2.0
"""Append latency against history, in one process (issue 24: "append latency at 10,000
versions within 2x of that at 100").

Copies of datasets built by N appends of 16 rows (``benchmarks/data/scale/appends_N.lance``,
made by ``bench_scale.py``) get one more append of 16 rows per round, each engine on its own
copy, the shapes and engines interleaved round by round, so machine load falls on all of them
alike.  Reports, per shape and engine, the median and best wall time and the median CPU time
(``time.process_time``: every thread of the process; the fsync waits are not CPU), then the
ratios that matter: ours at the largest shape over ours at the smallest (wall and CPU) and
pylance's time over ours per shape.

Unlike ``bench_scale.py`` (a child process per shape, 5 rounds), the many interleaved rounds
make the ratio usable on a loaded machine.  Run from a checkout with ``PYTHONPATH=.`` to
measure that checkout (the ``lance_gpu`` measured is printed)::

    PYTHONPATH=. python3 benchmarks/bench_append_history.py --shapes 100,10000 --rounds 25
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

DATA = Path(__file__).resolve().parent / "data" / "scale"


def batch(start: int) -> pa.Table:
    """16 rows shaped as ``bench_scale.py``'s appends."""
    ids = np.arange(start, start + 16, dtype=np.int64)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(16 * 8, np.float32)), 8)
    return pa.table({"id": ids, "s": pa.array([f"s{i % 97}" for i in ids]), "x": ids * 0.5, "emb": emb})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="100,10000", help="comma-separated N of appends_N.lance (built by bench_scale.py)")
    ap.add_argument("--rounds", type=int, default=25)
    args = ap.parse_args()
    import lance

    import lance_gpu

    engines = {"lance_gpu": lance_gpu, "pylance": lance}
    shapes = [s for s in args.shapes.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="bench_append_history_"))
    try:
        copies = {}
        for shape in shapes:
            source = DATA / f"appends_{shape}.lance"
            if not source.exists():
                raise SystemExit(f"{source} is missing: build it with bench_scale.py --shapes {shape}")
            for engine in engines:
                copies[(shape, engine)] = str(work / f"{engine}_{shape}")
                shutil.copytree(source, copies[(shape, engine)])
        os.sync()
        for (_shape, engine), path in copies.items():  # warm-up: imports, caches
            engines[engine].write_dataset(batch(10**7), path, mode="append")
        wall: dict[tuple[str, str], list[float]] = {k: [] for k in copies}
        cpu: dict[tuple[str, str], list[float]] = {k: [] for k in copies}
        load_before = os.getloadavg()
        for r in range(args.rounds):
            for key, path in copies.items():
                table = batch(10**8 + 16 * r)
                t0, c0 = time.perf_counter(), time.process_time()
                engines[key[1]].write_dataset(table, path, mode="append")
                wall[key].append(time.perf_counter() - t0)
                cpu[key].append(time.process_time() - c0)
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"lance_gpu from {Path(lance_gpu.__file__).parent}, pylance {lance.__version__}, {args.rounds} rounds, "
          f"loadavg {' '.join(f'{x:.2f}' for x in load_before)} / {' '.join(f'{x:.2f}' for x in load_after)}")
    med = {k: statistics.median(v) for k, v in wall.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    for key in copies:
        print(f"{key[0]:>7} appends  {key[1]:9s}  wall median {med[key] * 1e3:7.2f} ms  best {min(wall[key]) * 1e3:7.2f} ms  "
              f"cpu median {med_cpu[key] * 1e3:7.2f} ms")
    small, big = shapes[0], shapes[-1]
    print(f"lance_gpu {big}/{small}: wall {med[(big, 'lance_gpu')] / med[(small, 'lance_gpu')]:.2f}x, "
          f"cpu {med_cpu[(big, 'lance_gpu')] / med_cpu[(small, 'lance_gpu')]:.2f}x")
    for shape in shapes:
        print(f"pylance / lance_gpu at {shape}: wall {med[(shape, 'pylance')] / med[(shape, 'lance_gpu')]:.2f}, "
              f"cpu {med_cpu[(shape, 'pylance')] / med_cpu[(shape, 'lance_gpu')]:.2f}")


if __name__ == "__main__":
    main()
