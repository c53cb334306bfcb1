# SPDX-License-Identifier: Apache-2.0
"""``lance-gpu compile`` (lance_gpu/cli/compile_cmd.py): after it, a fresh process reading
pylance-written data of every common type compiles nothing and runs no numpy twin.

Behaviour, not time: each step runs in a fresh interpreter on its own ``LANCE_GPU_CACHE_DIR``;
the reading child reports ``_jitcache.cache_stats()`` (compiled = misses) and
``_jitcache.twin_stats()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_gpu.cli import build_parser

lance = pytest.importorskip("lance")

ROOT = Path(__file__).resolve().parent.parent

# Reads a dataset the usual ways with twins on; prints the digest and what ran.
CHILD_READ = r"""
import hashlib, json, sys
import lance_gpu
from cuda_kernels import _jitcache
path = sys.argv[1]
ds = lance_gpu.dataset(path, device="cpu")
full = ds.to_table()
filtered = ds.to_table(columns=["id", "s", "emb"], filter="x > 0.5")
batches = sum(b.num_rows for b in ds.to_batches(batch_size=1000))
taken = ds.take([0, 7, 1234, 4999])
count = ds.count_rows("n32 IS NULL")
print(json.dumps({"full": full.to_pylist(), "filtered": filtered.to_pylist(), "batches": batches,
                  "taken": taken.to_pylist(), "count": count, "twins": _jitcache.twin_stats(),
                  "stats": _jitcache.cache_stats()}, default=str))
"""


def mixed_table(rows: int = 5000, seed: int = 5) -> pa.Table:
    """The issue's shapes and the second shape of bench_first_read, small."""
    rng = np.random.default_rng(seed)
    words = np.array([f"word-{i:04d}" for i in range(1000)])
    cats = np.array([f"c{i}" for i in range(10)])
    lens = rng.integers(0, 4, rows)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    nulls = rng.random(rows) < 0.2
    return pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "x": pa.array(rng.random(rows)),
        "s": pa.array(words[rng.integers(0, 1000, rows)]),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 32, dtype=np.float32)), 32),
        "n32": pa.array(rng.integers(0, 100, rows).astype(np.int32), mask=nulls),
        "l16": pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(-50, 50, int(offsets[-1])).astype(np.int16))),
        "st": pa.StructArray.from_arrays([pa.array(words[rng.integers(0, 1000, rows)]), pa.array(rng.random(rows, dtype=np.float32))], ["a", "b"]),
        "dict": pa.array(cats[rng.integers(0, 10, rows)]).dictionary_encode(),
        "d": pa.array((18_000 + rng.integers(0, 999, rows)).astype(np.int32)).cast(pa.date32()),
        "ts": pa.array((1_600_000_000_000_000 + rng.integers(0, 10**12, rows)).astype("datetime64[us]")),
        "flag": pa.array(rng.random(rows) < 0.5),
    })


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LANCE_GPU_CACHE_DIR=str(cache), LANCE_GPU_JIT_TWINS="1")
    env.pop("NUMBA_CACHE_DIR", None)
    return env


def test_compile_is_a_registered_subcommand() -> None:
    args = build_parser().parse_args(["compile", "--quiet"])
    assert args.cmd == "compile" and args.quiet


@pytest.fixture(scope="module")
def compiled_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    cache = tmp_path_factory.mktemp("kcache")
    proc = subprocess.run([sys.executable, "-m", "lance_gpu", "compile"], env=_env(cache), text=True,
                          capture_output=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cache, proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_after_compile_a_fresh_read_compiles_nothing_and_runs_no_twin(
    compiled_cache: tuple[Path, str], tmp_path: Path, version: str
) -> None:
    cache, _ = compiled_cache
    path = str(tmp_path / "mixed.lance")
    table = mixed_table()
    lance.write_dataset(table, path, data_storage_version=version, max_rows_per_file=2500)
    proc = subprocess.run([sys.executable, "-c", CHILD_READ, path], env=_env(cache), text=True,
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    compiled = {k: s["misses"] for k, s in got["stats"].items() if s["misses"]}
    assert not compiled, compiled  # everything loaded from the cache `compile` filled
    assert not got["twins"], got["twins"]
    ds = lance.dataset(path)
    expect = json.loads(json.dumps({
        "full": ds.to_table().to_pylist(),
        "filtered": ds.to_table(columns=["id", "s", "emb"], filter="x > 0.5").to_pylist(),
        "taken": ds.take([0, 7, 1234, 4999]).to_pylist(),
    }, default=str))
    for key in ("full", "filtered", "taken"):
        assert got[key] == expect[key], key
    assert got["batches"] == ds.count_rows()
    assert got["count"] == ds.count_rows("n32 IS NULL")


@pytest.mark.slow
def test_a_second_compile_only_loads(compiled_cache: tuple[Path, str]) -> None:
    cache, first = compiled_cache
    assert " 0 already cached" in first
    assert ", built," in first, first  # the ahead-of-time module (a C compiler is here)
    proc = subprocess.run([sys.executable, "-m", "lance_gpu", "compile", "--quiet"], env=_env(cache), text=True,
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ": 0 signatures compiled," in proc.stdout, proc.stdout
    assert ", already built," in proc.stdout, proc.stdout  # the ahead-of-time module is not rebuilt
