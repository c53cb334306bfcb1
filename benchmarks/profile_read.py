# SPDX-License-Identifier: Apache-2.0
"""Datasets read on the GPU a few times each, for a profiler (Nsight Systems): each read in an
NVTX range ``read <engine> <dataset> <k>``, inside which the read path marks its own phases
(``lance_gpu.plan``, ``.stage``, ``.decode``, ``.assemble``, ``.finish``).

    nsys profile -t cuda,nvtx -o prof python3 benchmarks/profile_read.py A.lance [B.lance ...] [--engine to_cudf] [--reads 3]
    nsys stats -r nvtx_sum,cuda_api_sum,cuda_gpu_kern_sum prof.nsys-rep
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("uris", nargs="+", metavar="uri")
    ap.add_argument("--engine", choices=("scan_device", "to_cudf"), default="scan_device")
    ap.add_argument("--reads", type=int, default=3, help="profiled reads after one warm-up")
    args = ap.parse_args(argv)
    import cupy as cp

    import lance_gpu

    def read(uri: str) -> int:
        ds = lance_gpu.dataset(uri, device="gpu")
        if args.engine == "to_cudf":
            return len(ds.to_cudf())
        return sum(dt.num_rows for dt in ds.to_device_batches())

    for uri in args.uris:
        name = Path(uri).name
        read(uri)  # compile and warm the caches
        cp.cuda.Device().synchronize()
        for k in range(args.reads):
            cp.cuda.nvtx.RangePush(f"read {args.engine} {name} {k}")
            t0 = time.perf_counter()
            rows = read(uri)
            cp.cuda.Device().synchronize()
            cp.cuda.nvtx.RangePop()
            print(f"{name} read {k}: {rows} rows in {time.perf_counter() - t0:.3f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
