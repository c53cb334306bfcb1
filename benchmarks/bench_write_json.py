# SPDX-License-Identifier: Apache-2.0
"""Writing an ``arrow.json`` column (JSONB encoding): lance_gpu against pylance in one run.

``write_dataset`` of ``--rows`` rows (default 100,000): an int64 id and a JSON document per
row (``{"user":{"id":i,"name":"u<i>"},"tags":["a","b",i%7],"score":i*0.5}``), file version
2.2; both libraries are warmed up once, then alternate for ``--repeat`` rounds (best of them
is reported).  The load average is printed before and after; the figures go to stdout (copy
them into ``benchmarks/results/write_json.md``).

    python3 benchmarks/bench_write_json.py [--rows 100000 --repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import warnings

from bench_write_ops import _loadavg  # sibling script (run as benchmarks/bench_write_json.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import lance
    import pyarrow as pa

    import lance_gpu

    docs = [
        json.dumps({"user": {"id": i, "name": f"u{i}"}, "tags": ["a", "b", i % 7], "score": i * 0.5}, separators=(",", ":"))
        for i in range(args.rows)
    ]
    table = pa.table({"id": pa.array(range(args.rows), pa.int64()), "j": pa.array(docs, pa.json_())})
    libs = {"pylance": lance, "lance_gpu": lance_gpu}
    times: dict[str, list[float]] = {name: [] for name in libs}
    work = tempfile.mkdtemp(prefix="bench_json_")
    try:
        def once(name: str) -> float:
            uri = f"{work}/{name}"
            shutil.rmtree(uri, ignore_errors=True)
            t0 = time.perf_counter()
            libs[name].write_dataset(table, uri)
            return time.perf_counter() - t0

        for name in libs:
            once(name)  # warm-up
        before = _loadavg()
        for r in range(args.repeat):
            for name in (("pylance", "lance_gpu") if r % 2 == 0 else ("lance_gpu", "pylance")):
                times[name].append(once(name))
        after = _loadavg()
        assert lance.dataset(f"{work}/lance_gpu").to_table().equals(lance.dataset(f"{work}/pylance").to_table())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = {name: min(t) for name, t in times.items()}
    print(f"rows {args.rows}: pylance {best['pylance']:.3f} s, lance_gpu {best['lance_gpu']:.3f} s, "
          f"pylance / lance_gpu {best['pylance'] / best['lance_gpu']:.2f} (loadavg {before} / {after})")


if __name__ == "__main__":
    main()
