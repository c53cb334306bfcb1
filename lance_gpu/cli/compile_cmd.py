# SPDX-License-Identifier: Apache-2.0
"""``compile``: fill the per-user kernel cache once (after install) so that first reads load
compiled CPU kernels instead of compiling them or running numpy twins.

How: with twins off in this process (``LANCE_GPU_JIT_TWINS=0``, so every kernel call
compiles -- or loads -- its signature here and numba saves it in the kernel cache, see
:mod:`cuda_kernels._jitcache`), write small datasets covering the column types and
encodings the readers decode (bit-packed integers of every width, floats, bools,
dates/timestamps, nullable columns, strings and binary -- plain, FSST, dictionary, large
values -- lists, structs, fixed-size lists) with our writer at file versions 2.0, 2.1 and
2.2 into a temporary directory, then read them back the ways reads go (``to_table``,
projected and filtered reads, ``to_batches``, ``take``, ``count_rows``), and run the
kernels of layouts only pylance writes on tiny inputs (:func:`_pylance_only_layouts`).  Idempotent: a
second run finds every signature in the cache and only loads it.

Then it builds the ahead-of-time module of every signature the reads ran
(:mod:`cuda_kernels._aot`, needs a C compiler): a fresh process reading with kernels
of that module does not import numba.  Without it (no compiler, a build error) reads go
through numba's cache as before.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from typing import Any

import numpy as np
import pyarrow as pa

import lance_gpu
from cuda_kernels import _aot, _jitcache

FILE_VERSIONS = ("2.0", "2.1", "2.2")


def coverage_table(rows: int, version: str = "2.2", seed: int = 0) -> pa.Table:
    """Columns exercising every decoder path of the readers (types, widths, nulls, string
    encodings) that file ``version`` can hold (2.0: no struct validity; maps from 2.2)."""
    rng = np.random.default_rng(seed)
    nulls = rng.random(rows) < 0.15
    words = np.array([f"value-{i:04d}-{'x' * (i % 13)}" for i in range(1000)])
    cats = np.array([f"cat_{i}" for i in range(12)])
    syll = np.array(["lor", "em", "ip", "sum", "do", "lor", "sit", "am", "et", " "])
    text = ["".join(r) for r in syll[rng.integers(0, len(syll), size=(rows, 12))]]
    long_text = [t * 30 for t in text[: rows]]  # ~1 KiB values: full-zip pages in 2.1+
    list_lens = rng.integers(0, 5, rows)
    list_offsets = np.concatenate([[0], np.cumsum(list_lens)]).astype(np.int32)
    list_values = pa.array(rng.integers(-300, 300, int(list_offsets[-1])).astype(np.int16))
    str_values = pa.array(words[rng.integers(0, 1000, int(list_offsets[-1]))])
    list_mask = pa.array(rng.random(rows) < 0.1)
    cols: dict[str, Any] = {
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "i8": pa.array(rng.integers(-100, 100, rows).astype(np.int8)),
        "u8": pa.array(rng.integers(0, 200, rows).astype(np.uint8)),
        "i16": pa.array(rng.integers(-30000, 30000, rows).astype(np.int16)),
        "u16": pa.array(rng.integers(0, 60000, rows).astype(np.uint16)),
        "i32": pa.array(rng.integers(0, 5000, rows).astype(np.int32)),
        "u32": pa.array(rng.integers(0, 2**31, rows).astype(np.uint32)),
        "i64": pa.array(rng.integers(-(2**40), 2**40, rows)),
        "u64": pa.array(rng.integers(0, 2**62, rows).astype(np.uint64)),
        "small64": pa.array(rng.integers(0, 1000, rows)),
        "i32n": pa.array(rng.integers(0, 1000, rows).astype(np.int32), mask=nulls),
        "i64n": pa.array(rng.integers(0, 2**33, rows), mask=rng.random(rows) < 0.4),
        "f32": pa.array(rng.random(rows, dtype=np.float32)),
        "f64": pa.array(rng.random(rows)),
        "f64n": pa.array(rng.random(rows), mask=nulls),
        "b": pa.array(rng.random(rows) < 0.5),
        "bn": pa.array(rng.random(rows) < 0.5, mask=nulls),
        "d": pa.array((18_000 + rng.integers(0, 3000, rows)).astype(np.int32)).cast(pa.date32()),
        "ts": pa.array((1_600_000_000_000_000 + rng.integers(0, 10**12, rows)).astype("datetime64[us]")),
        "tsn": pa.array((1_600_000_000_000 + rng.integers(0, 10**9, rows)).astype("datetime64[ms]"), mask=nulls),
        "s": pa.array(words[rng.integers(0, 1000, rows)]),
        "sn": pa.array(words[rng.integers(0, 1000, rows)], mask=nulls),
        "cat": pa.array(cats[rng.integers(0, len(cats), rows)]),
        "catn": pa.array(cats[rng.integers(0, len(cats), rows)], mask=nulls),
        "dict": pa.array(cats[rng.integers(0, len(cats), rows)]).dictionary_encode(),
        "text": pa.array(text),
        "ltext": pa.array(text, pa.large_string()),
        "long": pa.array(long_text),
        "bin": pa.array([t.encode() for t in text], pa.binary()),
        "lbin": pa.array([w.encode() for w in words[rng.integers(0, 1000, rows)]], pa.large_binary()),
        "li16": pa.ListArray.from_arrays(pa.array(list_offsets), list_values),
        "li16n": pa.ListArray.from_arrays(pa.array(list_offsets), list_values, mask=list_mask),
        "lstr": pa.ListArray.from_arrays(pa.array(list_offsets), str_values),
        "lli64": pa.LargeListArray.from_arrays(pa.array(list_offsets.astype(np.int64)), list_values.cast(pa.int64())),
        "st": pa.StructArray.from_arrays(
            [pa.array(words[rng.integers(0, 1000, rows)]), pa.array(rng.random(rows, dtype=np.float32))], ["name", "score"]
        ),
        "stn": pa.StructArray.from_arrays(
            [pa.array(rng.integers(0, 100, rows).astype(np.int32)), pa.array(cats[rng.integers(0, 12, rows)])],
            ["k", "c"], mask=None if version == "2.0" else pa.array(nulls),
        ),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 32, dtype=np.float32)), 32),
        "emb16": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 16, dtype=np.float32)), 16),
        "emb64": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 8)), 8),
    }
    if version not in ("2.0", "2.1"):
        keys = pa.array(cats[rng.integers(0, 12, int(list_offsets[-1]))])
        cols["m"] = pa.MapArray.from_arrays(pa.array(list_offsets), keys, list_values.cast(pa.int32()))
    return pa.table(cols)


#: Filters of the kind reads push down (numeric, string, null tests), each as (columns, filter).
READS: tuple[tuple[list[str] | None, str | None], ...] = (
    (None, None),
    (["id", "s", "emb"], "f64 > 0.9"),
    (["id", "text", "li16", "st"], "i32n IS NULL"),
    (["id", "cat", "lstr"], "cat = 'cat_3' AND i32 < 2000"),
    (["s", "bin", "d", "ts"], "s IN ('value-0001-x', 'value-0500-xxxxxxxxxx')"),
)


def _read_all(ds: Any, rows: int, rng: np.random.Generator) -> int:
    """Read ``ds`` the ways reads go; returns the rows seen (so nothing is optimised away)."""
    seen = 0
    for columns, flt in READS:
        seen += ds.to_table(columns=columns, filter=flt).num_rows
    for batch in ds.to_batches(batch_size=max(1, rows // 3)):
        seen += batch.num_rows
    for batch in ds.to_batches(columns=["id", "s", "emb"], filter="f32 < 0.5", batch_size=1024):
        seen += batch.num_rows
    idx = np.sort(rng.choice(rows, size=min(rows, 97), replace=False))
    seen += ds.take(idx.tolist()).num_rows
    seen += ds.take([0, rows - 1], columns=["long", "sn", "lli64"]).num_rows
    seen += ds.count_rows()
    seen += ds.count_rows("sn IS NOT NULL AND f32 > 0.25")
    return seen


def _pylance_only_layouts() -> None:
    """Run, on tiny inputs of the flavours the readers pass, the kernels of layouts pylance
    writes and lance-gpu's writer does not, so that the coverage reads cannot reach them:
    boolean mini-block chunks whose value counts are not multiples of 8 (``bits_concat``;
    pylance cuts 2,500 booleans of a 2.1 / 2.2 file so)."""
    from lance_gpu.cpu import native

    out = np.zeros(1, np.uint8)
    native.bits_concat(np.array([0b10110101, 0b1], np.uint8), np.array([0, 1], np.int64), np.array([5, 3], np.int64), out)


def compile_kernels(rows: int = 6000, progress: Any = None) -> dict[str, int]:
    """Write and read the coverage datasets in this process with twins off; returns the
    numbers of signatures this process compiled (``compiled``) and loaded from the cache
    (``loaded``).  Twins must not have been decided yet in this process (they are
    decided at the first kernel call), else ``RuntimeError``."""
    os.environ[_jitcache.TWINS_ENV] = "0"
    os.environ[_aot.AOT_ENV] = "0"  # every signature must go through numba here, to be listed
    if _jitcache.twins_enabled():
        raise RuntimeError("kernel twins are already on in this process; run `lance-gpu compile` in a fresh process")
    if _jitcache.cache_dir() is None:
        raise OSError("no writable kernel cache directory (set LANCE_GPU_CACHE_DIR): nothing can be compiled ahead")
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for version in FILE_VERSIONS:
            if progress is not None:
                progress(version)
            table = coverage_table(rows, version)
            uri = f"{tmp}/v{version}.lance"
            lance_gpu.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=rows // 2)
            _read_all(lance_gpu.dataset(uri, device="cpu"), rows, rng)
    _pylance_only_layouts()
    stats = _jitcache.cache_stats()
    return {
        "compiled": sum(s["misses"] for s in stats.values()),
        "loaded": sum(s["hits"] for s in stats.values()),
    }


def compile_aot() -> tuple[int, bool, str | None]:
    """After :func:`compile_kernels` in this process: build the AOT module of every signature
    it ran (:mod:`cuda_kernels._aot`).  Returns (signatures exported, whether a module was
    built -- not when the published one has all of them --, None), or (0, False,
    why) when it cannot be built (no C compiler, a pycc failure): reads then run through
    numba as before."""
    exports = _jitcache.exportable()
    try:
        _, built = _jitcache.build_aot()
    except Exception as exc:  # noqa: BLE001 - any build failure leaves reads on numba
        return 0, False, f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    return len(exports), built, None


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "compile", parents=[common], help="compile the CPU kernels into the per-user cache (once, after install)",
        description=(
            "Compile every CPU kernel signature reads use into the per-user kernel cache "
            "($LANCE_GPU_CACHE_DIR, else ~/.cache/lance_gpu), so that the first read of each new "
            "process loads compiled code.  Reads work without it, slower at first.  A second run only "
            "loads what the first compiled.  Then (unless --no-aot, and if a C compiler is there) it links "
            "those kernels into one extension module for this CPU, which reads load without numba."
        ),
        epilog="examples:\n  lance-gpu compile\n  LANCE_GPU_CACHE_DIR=/opt/cache lance-gpu compile",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--no-aot", action="store_true",
                   help="do not build the ahead-of-time module (numba-free kernel loading for reads)")
    p.set_defaults(func=cmd_compile)


def cmd_compile(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()

    def step(version: str) -> None:
        if not args.quiet:
            print(f"compiling kernels: file version {version} ({time.perf_counter() - t0:.1f} s)", flush=True)

    got = compile_kernels(progress=step)
    print(
        f"kernel cache {_jitcache.cache_dir()}: {got['compiled']} signatures compiled, "
        f"{got['loaded']} already cached, in {time.perf_counter() - t0:.1f} s"
    )
    if args.no_aot:
        return 0
    if not args.quiet:
        print("building the ahead-of-time module (reads that load without numba)", flush=True)
    exported, built, why = compile_aot()
    if why is None:
        state = "built" if built else "already built"
        print(f"ahead-of-time module: {exported} signatures, {state}, in {time.perf_counter() - t0:.1f} s")
    else:
        print(f"no ahead-of-time module ({why}): reads load the kernels through numba")
    return 0
