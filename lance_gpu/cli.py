# SPDX-License-Identifier: Apache-2.0
"""Command line: ``python -m lance_gpu {demo,info,scan}``.

``demo`` is the main job on an embedded default: it writes a sample dataset, reads it back
with lance-gpu (on the GPU where one is usable) and checks the result.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa


def sample_table(rows: int, seed: int = 0) -> pa.Table:
    """The embedded sample: the column mix of the read benchmark, small."""
    rng = np.random.default_rng(seed)
    cats = np.array([f"category_{i:02d}" for i in range(20)])
    words = np.array(["alpha", "beta", "gamma", "delta", "omega", "lorem", "ipsum", "dolor"])
    text = [" ".join(r) for r in words[rng.integers(0, len(words), size=(rows, 4))]]
    ints = rng.integers(0, 1000, rows).astype(np.int32)
    return pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "value": pa.array(rng.random(rows)),
            "category": pa.array(cats[rng.integers(0, len(cats), rows)]),
            "text": pa.array(text),
            "ts": pa.array((1_600_000_000_000_000 + rng.integers(0, 10**12, rows)).astype("datetime64[us]")),
            "flag": pa.array(rng.random(rows) < 0.5),
            "maybe": pa.array(ints, mask=rng.random(rows) < 0.1),
            "embedding": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.random(rows * 16, dtype=np.float32)), 16
            ),
        }
    )


def _write_sample(table: pa.Table, uri: str) -> str:
    from lance_gpu import write_dataset

    write_dataset(table, uri, max_rows_per_file=max(1, table.num_rows // 2))
    return "lance_gpu"


def cmd_demo(args: argparse.Namespace) -> int:
    import lance_gpu
    from lance_gpu._device import gpu_unusable_reason

    table = sample_table(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "sample.lance")
        writer = _write_sample(table, uri)
        reason = gpu_unusable_reason()
        device = "gpu" if reason is None else "cpu"
        print(f"wrote {table.num_rows} rows to {uri} with {writer}")
        print(f"decoding on: {device}" + (f" ({reason})" if reason else ""))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = lance_gpu.dataset(uri)
            t0 = time.perf_counter()
            back = ds.to_table()
            t1 = time.perf_counter()
            some = ds.take([0, args.rows // 2, args.rows - 1])
            filtered = ds.to_table(columns=["id", "category"], filter="maybe IS NULL AND value > 0.5")
        ok = back.equals(table) and some.column("id").to_pylist() == [0, args.rows // 2, args.rows - 1]
        expected = table.filter(pa.compute.and_(table["maybe"].is_null(), pa.compute.greater(table["value"], 0.5)))
        ok = ok and filtered.num_rows == expected.num_rows
        mb = table.nbytes / 1e6
        print(f"read back {back.num_rows} rows x {back.num_columns} columns ({mb:.1f} MB) in {t1 - t0:.3f} s")
        print(f"take -> {some.column('id').to_pylist()}; filter -> {filtered.num_rows} rows")
        print("round trip:", "OK" if ok else "MISMATCH")
        return 0 if ok else 1


def cmd_info(args: argparse.Namespace) -> int:
    import lance_gpu

    ds = lance_gpu.dataset(args.uri, version=args.version)
    print(f"{ds.uri}  version {ds.version}  (data storage {ds.data_storage_version})")
    print(f"rows: {ds.count_rows()}  fragments: {len(ds.fragments)}")
    print("versions:", ", ".join(str(v["version"]) for v in ds.versions()))
    print(ds.schema)
    return 0


def cmd_scan(args: argparse.Namespace) -> int:
    import lance_gpu

    ds = lance_gpu.dataset(args.uri, version=args.version)
    cols = args.columns.split(",") if args.columns else None
    t = ds.to_table(columns=cols, filter=args.filter, limit=args.limit)
    print(t.to_pandas().to_string() if _has_pandas() else t)
    return 0


def _has_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lance-gpu", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd")
    demo = sub.add_parser("demo", help="write a sample dataset and read it back (the default)")
    demo.add_argument("--rows", type=int, default=200_000)
    info = sub.add_parser("info", help="describe a dataset")
    info.add_argument("uri")
    info.add_argument("--version", type=int, default=None)
    scan = sub.add_parser("scan", help="print rows of a dataset")
    scan.add_argument("uri")
    scan.add_argument("--version", type=int, default=None)
    scan.add_argument("--columns", default=None)
    scan.add_argument("--filter", default=None)
    scan.add_argument("--limit", type=int, default=20)
    args = parser.parse_args(argv)
    if args.cmd is None:
        args = parser.parse_args(["demo", *(argv or [])])
    return {"demo": cmd_demo, "info": cmd_info, "scan": cmd_scan}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
