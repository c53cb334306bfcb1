# SPDX-License-Identifier: Apache-2.0
"""``demo`` (the default): write a sample dataset, read it back (on the GPU where one is
usable) and check the result."""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lance_gpu
from lance_gpu._device import gpu_unusable_reason
from lance_gpu.cli._common import Bars, UsageError


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
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 16, dtype=np.float32)), 16),
        }
    )


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo", parents=[common], help="write a sample dataset and read it back (the default)",
        description="Write a sample dataset to a temporary directory, read it back with lance-gpu (on the GPU where one is usable) and check the round trip.",
        epilog="examples:\n  lance-gpu demo\n  lance-gpu demo --rows 1000000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rows", type=int, default=200_000, help="rows in the sample (default 200000)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    if args.rows < 3:
        raise UsageError("--rows must be at least 3")
    table = sample_table(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"{tmp}/sample.lance"
        with Bars(args.quiet) as bars:
            lance_gpu.write_dataset(table, uri, max_rows_per_file=max(1, table.num_rows // 2), progress=bars)
        reason = gpu_unusable_reason()
        device = "gpu" if reason is None else "cpu"
        print(f"wrote {table.num_rows} rows to {uri} with lance_gpu")
        print(f"decoding on: {device}" + (f" ({reason})" if reason else ""))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = lance_gpu.dataset(uri, device=device)
            t0 = time.perf_counter()
            back = ds.to_table()
            t1 = time.perf_counter()
            some = ds.take([0, args.rows // 2, args.rows - 1])
            filtered = ds.to_table(columns=["id", "category"], filter="maybe IS NULL AND value > 0.5")
        ok = back.equals(table) and some.column("id").to_pylist() == [0, args.rows // 2, args.rows - 1]
        expected = table.filter(pc.and_(table["maybe"].is_null(), pc.greater(table["value"], 0.5)))
        ok = ok and filtered.num_rows == expected.num_rows
        mb = table.nbytes / 1e6
        print(f"read back {back.num_rows} rows x {back.num_columns} columns ({mb:.1f} MB) in {t1 - t0:.3f} s")
        print(f"take -> {some.column('id').to_pylist()}; filter -> {filtered.num_rows} rows")
        print("round trip:", "OK" if ok else "MISMATCH")
        return 0 if ok else 1
