# SPDX-License-Identifier: Apache-2.0
"""GPU write benchmark (issue 28): Lance files written from device memory.

Two frames, built on the device:

* **mixed** -- ``--rows`` rows (default 5M): int64 ids, int32 with 10% nulls, float64,
  booleans with nulls, a low-precision timestamp, short strings (``user-<n>``), a
  decimal128(12, 2) with nulls and a list<int32> of 0-3 tags with null rows;
* **embeddings** -- ``--emb-rows`` x ``--dim`` float32 (default 1M x 768).

Per frame, median seconds of ``--repeat`` after one warm-up (JIT compile excluded), each
write to a fresh directory, with the device synchronised at the end:

* ``lance_gpu.write_dataset(frame)`` from cuDF (``cudf`` installed) or from a dict of device
  columns (otherwise) -- the GPU encoder;
* ``cudf.DataFrame.to_parquet`` of the same frame (cuDF's GPU Parquet writer), when cuDF is
  installed;
* ``lance_gpu.write_dataset`` of the frame as host Arrow (our CPU writer; the device-to-host
  copy is not timed) and ``lance.write_dataset`` (pylance) of the same table.

Ratios are their time / ours (above 1: the GPU writer is faster); targets >= 1x
``to_parquet`` and >= 5x our CPU writer.  File sizes (bytes under ``data/``) are compared
with pylance's (target within 5%).  The pages the GPU encoder left to the CPU encoder are
listed with their reasons.  Results: stdout and ``benchmarks/results/gpu_write_<device>.{md,json}``.

    python3 benchmarks/bench_gpu_write.py                        # on a GPU
    python3 benchmarks/bench_gpu_write.py --rows 200000 --emb-rows 20000 --repeat 1
    NUMBA_ENABLE_CUDASIM=1 python3 benchmarks/bench_gpu_write.py --simulate --rows 1100 --emb-rows 64 --dim 80 --repeat 1

Without a usable GPU (and without ``--simulate``) it exits 2 with one line saying why.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
sys.path[:0] = [str(ROOT)]


def mixed_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "qty": pa.array(rng.integers(0, 5000, rows).astype(np.int32), mask=rng.random(rows) < 0.1),
        "price": pa.array(rng.standard_normal(rows)),
        "flag": pa.array(rng.random(rows) < 0.5, mask=rng.random(rows) < 0.05),
        "ts": pa.array((1_700_000_000_000_000 + rng.integers(0, 10**12, rows)).astype("datetime64[us]")),
        "name": pa.array([f"user-{v}" for v in rng.integers(0, 10**9, rows)]),
        "amount": _amounts(rng, rows),
        "tags": _tags(rng, rows),
    })


def _amounts(rng: np.random.Generator, rows: int) -> pa.Array:
    """decimal128(12, 2) prices with 5% nulls (16-byte values, built from their int64 units)."""
    units = rng.integers(-(10**9), 10**9, rows).astype(np.int64)
    words = np.stack([units, units >> 63], axis=1).reshape(-1).view(np.uint8)  # low word, sign-extended high word
    valid = pa.array(rng.random(rows) >= 0.05)
    arr = pa.Array.from_buffers(pa.decimal128(12, 2), rows, [None, pa.py_buffer(words.tobytes())])
    return pa.compute.if_else(valid, arr, pa.scalar(None, arr.type))


def _tags(rng: np.random.Generator, rows: int) -> pa.Array:
    """list<int32> of 0 to 3 small tags a row, 5% null rows."""
    lengths = rng.integers(0, 4, rows)
    offsets = np.zeros(rows + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    items = pa.array(rng.integers(0, 100, int(offsets[-1])).astype(np.int32))
    return pa.ListArray.from_arrays(pa.array(offsets), items, mask=pa.array(rng.random(rows) < 0.05))


def embeddings_table(rows: int, dim: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    values = pa.array(rng.standard_normal(rows * dim).astype(np.float32))
    return pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)), "vec": pa.FixedSizeListArray.from_arrays(values, dim)})


def device_columns(table: pa.Table) -> dict:
    """The table's columns as lance-gpu device columns (uploaded once, outside the timing)."""
    from lance_gpu.write.device_input import upload_arrow

    return {name: upload_arrow(table.column(name), name) for name in table.column_names}


def data_bytes(uri: Path) -> int:
    return sum(f.stat().st_size for f in (uri / "data").iterdir()) if (uri / "data").exists() else sum(
        f.stat().st_size for f in uri.rglob("*") if f.is_file()
    )


def timed(fn: Callable[[Path], object], workdir: Path, repeat: int, sync: Callable[[], None]) -> tuple[float, Path]:
    """Median seconds of ``fn(fresh path)`` over ``repeat`` runs after one warm-up; the last
    output path is kept (for its size)."""
    times = []
    out = workdir
    for k in range(repeat + 1):
        out = workdir / f"run{k}"
        sync()
        t0 = time.perf_counter()
        fn(out)
        sync()
        dt = time.perf_counter() - t0
        if k:
            times.append(dt)
        if k < repeat:
            shutil.rmtree(out, ignore_errors=True)
    return statistics.median(times), out


def run(args: argparse.Namespace) -> dict:
    import lance_gpu
    from lance_gpu import _device
    from lance_gpu.write import device_pages

    if args.simulate:
        _device.gpu_unusable_reason = lambda: None  # the simulator stands in for the device
    from numba import cuda

    sync = cuda.synchronize
    try:
        import cudf  # type: ignore[import-not-found]
    except ImportError:
        cudf = None
    try:
        import lance
    except ImportError:
        lance = None
    frames = {
        "mixed": mixed_table(args.rows),
        "embeddings": embeddings_table(args.emb_rows, args.dim),
    }
    device_name = "CUDA simulator" if args.simulate else cuda.get_current_device().name.decode() if isinstance(
        cuda.get_current_device().name, bytes) else str(cuda.get_current_device().name)
    report: dict = {"device": device_name, "host": platform.node(), "args": vars(args), "frames": {}}
    root = Path(tempfile.mkdtemp(prefix="bench_gpu_write_"))
    try:
        for name, table in frames.items():
            row: dict = {"rows": table.num_rows}
            work = root / name
            work.mkdir()
            source = cudf.DataFrame.from_arrow(table) if cudf is not None else device_columns(table)
            row["source"] = "cudf.DataFrame" if cudf is not None else "device columns"
            before = dict(device_pages.host_fallbacks)
            row["gpu_s"], out = timed(lambda p, source=source: lance_gpu.write_dataset(source, p), work / "gpu", args.repeat, sync)
            row["gpu_bytes"] = data_bytes(out)
            row["host_pages"] = {k: v - before.get(k, 0) for k, v in device_pages.host_fallbacks.items() if v != before.get(k, 0)}
            check = lance.dataset(out).to_table() if lance is not None else lance_gpu.dataset(out).to_table()
            if not check.equals(table):
                raise AssertionError(f"{name}: the GPU-written dataset does not read back as the frame")
            row["cpu_s"], out = timed(lambda p, table=table: lance_gpu.write_dataset(table, p), work / "cpu", args.repeat, sync)
            row["cpu_bytes"] = data_bytes(out)
            if lance is not None:
                row["pylance_s"], out = timed(lambda p, table=table: lance.write_dataset(table, p), work / "pylance", args.repeat, sync)
                row["pylance_bytes"] = data_bytes(out)
                row["size_vs_pylance"] = row["gpu_bytes"] / row["pylance_bytes"]
            if cudf is not None:
                row["parquet_s"], out = timed(
                    lambda p, source=source: (p.mkdir(parents=True), source.to_parquet(p / "f.parquet")), work / "pq", args.repeat, sync
                )
                row["parquet_bytes"] = data_bytes(out)
                row["vs_to_parquet"] = row["parquet_s"] / row["gpu_s"]
            row["vs_cpu_writer"] = row["cpu_s"] / row["gpu_s"]
            report["frames"][name] = row
            print(name, json.dumps(row, default=str), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return report


def write_results(report: dict) -> None:
    slug = "".join(c if c.isalnum() else "-" for c in report["device"].lower()).strip("-")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"gpu_write_{slug}.json").write_text(json.dumps(report, indent=2, default=str))
    lines = [f"# GPU write benchmark on {report['device']}", "", "| frame | rows | GPU s | CPU writer s | x CPU | to_parquet s | x to_parquet | pylance s | size / pylance | pages left to the CPU |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in report["frames"].items():
        def f(key: str, fmt: str = "{:.3f}", r: dict = r) -> str:
            return fmt.format(r[key]) if key in r else "n/a"
        lines.append(
            f"| {name} | {r['rows']} | {f('gpu_s')} | {f('cpu_s')} | {f('vs_cpu_writer', '{:.2f}')} | {f('parquet_s')} | "
            f"{f('vs_to_parquet', '{:.2f}')} | {f('pylance_s')} | {f('size_vs_pylance', '{:.3f}')} | {r['host_pages'] or '-'} |"
        )
    (RESULTS / f"gpu_write_{slug}.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--emb-rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--simulate", action="store_true", help="run under the numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
    ap.add_argument("--no-save", action="store_true", help="print only; write nothing under benchmarks/results")
    args = ap.parse_args(argv)
    if args.simulate and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        print("--simulate needs NUMBA_ENABLE_CUDASIM=1 in the environment", file=sys.stderr)
        return 2
    if not args.simulate:
        from lance_gpu._device import gpu_unusable_reason

        reason = gpu_unusable_reason()
        if reason is not None:
            print(f"bench_gpu_write: no usable GPU ({reason})", file=sys.stderr)
            return 2
    report = run(args)
    if not args.no_save and not args.simulate:
        write_results(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
