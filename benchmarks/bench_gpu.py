# SPDX-License-Identifier: Apache-2.0
"""GPU benchmark: copy bandwidth, per-kernel throughput and end-to-end reads, in one run.

1. Bandwidth: device-to-device copy (``cudaMemcpyAsync`` and CuPy ``a.copy()``) and
   host<->device copies from pinned (and pageable) memory; GB/s = bytes copied / time,
   median of several runs timed with CUDA events.  The D2D figure (the higher of the two) is
   the reference for the kernels.
2. Kernels (``cuda_kernels``): FastLanes unpack (32/64-bit lanes, several widths, plain and
   scattered), dictionary gather (fixed, binary), FSST decode (one table; per-segment tables
   as the read pipeline calls it), RLE expand, levels -> validity / offsets and bitmaps,
   deletion compaction and the segmented copies / fills / index kernels.  Inputs live on the
   device; time = wall time of the wrapper call between two device synchronisations
   (launches, output allocation, scans and the error-flag readback included), median of
   --repeat after one warm-up call (JIT compile excluded).  GB/s = bytes of decoded output
   (all arrays returned: values, offsets, validity) / time, unless the row says otherwise,
   and as a fraction of the D2D copy bandwidth (target >= 0.30).  Each kernel's warm-up
   output is checked against its CPU twin (skip with --no-check).
3. End to end on bench_read.py's datasets ("mixed": flat columns, "embeddings") and a table of
   lists and structs ("nested", :func:`nested_table`): ours -- ``scan_device``
   (device-resident columns, consumed fully), ``to_table(device="gpu")`` (Arrow on the host),
   ``to_cudf()`` -- against pylance ``to_table`` + upload of every buffer with CuPy,
   pylance + ``cudf.DataFrame.from_arrow``, ``cudf.read_parquet``, and our CPU path.  Median
   seconds of --repeat after one warm-up (dataset opened inside the timed call); ratios =
   their time / ours (above 1: we are faster).  Targets: >= 10x vs pylance + upload, > 1x vs
   cudf.read_parquet.  Rows whose library is missing are listed with the reason.  Then one
   ``scan_device`` read per dataset with its phases timed (units, bytes staged, staging and
   decoding seconds, and how much of them overlapped), and one check per dataset that
   ``to_table(device="gpu")`` equals pylance's ``to_table()``.

Output: stdout and benchmarks/results/gpu_<device>.{md,json}.  Without a usable GPU it exits
with status 2 and a one-line message.

    python3 benchmarks/bench_gpu.py [--rows 5000000 --emb-rows 500000 --nested-rows 1000000 --repeat 5]
    python3 benchmarks/bench_gpu.py --quick                  # small sizes (smoke run)
    python3 benchmarks/bench_gpu.py --kernels-only --data DIR
    NUMBA_ENABLE_CUDASIM=1 python3 benchmarks/bench_gpu.py --simulate --kernels-only --quick
    NUMBA_ENABLE_CUDASIM=1 python3 benchmarks/bench_gpu.py --simulate --e2e-only --rows 3000 --emb-rows 300 \
        --nested-rows 600 --data DIR --results-dir DIR    # the end-to-end path on tiny tables (no CuPy, no cuDF rows)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
sys.path[:0] = [str(ROOT), str(HERE)]
# --code DIR: time another checkout's lance_gpu / cuda_kernels with this script (a baseline
# in the same run); read before anything imports them
if "--code" in sys.argv[1:-1]:
    sys.path.insert(0, str(Path(sys.argv[sys.argv.index("--code") + 1]).resolve()))

KERNEL_TARGET = 0.30  # fraction of the D2D copy bandwidth
TARGET_VS_UPLOAD = 10.0
TARGET_VS_CUDF_PARQUET = 1.0
WORDS = np.array(["alpha", "beta", "gamma", "delta", "omega", "lorem", "ipsum", "dolor", "sit", "amet", "quick", "brown", "fox"])


# --------------------------------------------------------------------------------------------
# Device helpers: CuPy arrays on a GPU, numba arrays under the CUDA simulator


class Dev:
    """Uploads, allocation, synchronisation and pool release for one backend."""

    def __init__(self, simulate: bool) -> None:
        self.simulate = simulate
        if simulate:
            from numba import cuda

            self.cuda, self.cp = cuda, None
        else:
            import cupy

            self.cuda, self.cp = None, cupy

    def up(self, a: np.ndarray):
        a = np.ascontiguousarray(a)
        return self.cuda.to_device(a) if self.simulate else self.cp.asarray(a)

    def empty(self, n: int, dtype) -> object:
        return self.cuda.device_array(int(n), np.dtype(dtype)) if self.simulate else self.cp.empty(int(n), dtype)

    def sync(self) -> None:
        if self.simulate:
            self.cuda.synchronize()
        else:
            self.cp.cuda.Device().synchronize()

    def free(self) -> None:
        if self.cp is not None:
            self.cp.get_default_memory_pool().free_all_blocks()
            self.cp.get_default_pinned_memory_pool().free_all_blocks()


def timed(fn: Callable[[], object], sync: Callable[[], None], repeat: int) -> tuple[object, list[float]]:
    """(warm-up output, seconds of ``repeat`` further calls), each between synchronisations.
    With ``repeat == 0`` the warm-up call's time is the only one."""
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    warm = time.perf_counter() - t0
    # A cold kernel cache runs the CPU path on NumPy twins while a worker compiles: wait for
    # it (untimed), so the timed calls run compiled code.  (An H100 run with an empty cache
    # timed the CPU path at 1.8 s for the mixed table instead of 0.1 s.)
    from cuda_kernels import _jitcache

    _jitcache.wait_for_worker(900)
    times: list[float] = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return out, times or [warm]


def nbytes(obj: object) -> int:
    """Total bytes of the arrays in ``obj`` (arrays, tuples / named tuples / lists of them)."""
    if obj is None or isinstance(obj, (int, float, str)):
        return 0
    if isinstance(obj, (tuple, list)):
        return sum(nbytes(o) for o in obj)
    return int(np.prod(obj.shape)) * np.dtype(obj.dtype).itemsize


def same(got: object, want: object, where: str = "") -> None:
    """Assert that device output ``got`` equals the CPU result ``want`` (recursively)."""
    from cuda_kernels import _device

    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), f"{where}: {len(got)} parts, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{i}]")
    elif want is None or isinstance(want, (int, np.integer)):
        assert got == want, f"{where}: {got!r} != {want!r}"
    else:
        g = _device.to_host(got)
        w = np.asarray(want)
        assert g.shape == w.shape and np.array_equal(g, w), f"{where}: arrays differ ({g.shape} vs {w.shape})"


# --------------------------------------------------------------------------------------------
# 1. Bandwidth


def bandwidth(nbytes_: int, repeat: int) -> list[dict]:
    """D2D, H2D and D2H copy bandwidth (GB/s of bytes copied), timed with CUDA events."""
    import cupy as cp
    import cupyx

    rt = cp.cuda.runtime
    stream = cp.cuda.get_current_stream()
    a = cp.ones(nbytes_, np.uint8)
    b = cp.empty_like(a)
    pinned = cupyx.empty_pinned((nbytes_,), np.uint8)
    pinned[:] = 1
    pageable = np.ones(nbytes_, np.uint8)

    def ev(fn: Callable[[], object]) -> float:
        fn()
        times = []
        for _ in range(max(repeat, 5)):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            fn()
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return statistics.median(times)

    cases = [
        ("D2D cudaMemcpyAsync", lambda: rt.memcpyAsync(b.data.ptr, a.data.ptr, nbytes_, rt.memcpyDeviceToDevice, stream.ptr)),
        ("D2D cupy a.copy()", a.copy),
        ("H2D pinned", lambda: rt.memcpyAsync(b.data.ptr, pinned.ctypes.data, nbytes_, rt.memcpyHostToDevice, stream.ptr)),
        ("D2H pinned", lambda: rt.memcpyAsync(pinned.ctypes.data, a.data.ptr, nbytes_, rt.memcpyDeviceToHost, stream.ptr)),
        ("H2D pageable (cupy.asarray)", lambda: cp.asarray(pageable)),
    ]
    rows = []
    for name, fn in cases:
        sec = ev(fn)
        rows.append({"copy": name, "mb": nbytes_ / 1e6, "s": sec, "gb_s": nbytes_ / sec / 1e9})
        print(f"  {name:30s} {nbytes_ / sec / 1e9:8.1f} GB/s", flush=True)
    del a, b, pinned
    return rows


# --------------------------------------------------------------------------------------------
# 2. Kernels


@dataclass
class Case:
    family: str
    name: str
    fn: Callable[[], object]  # the GPU call; returns its output (device arrays)
    expect: Callable[[], object] | None = None  # the CPU twin's result
    basis: str = "output"  # what the GB/s counts
    nbytes: int | None = None  # bytes counted (default: nbytes of the output)


def _uints(rng: np.random.Generator, n: int, w: int, dt) -> np.ndarray:
    raw = rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
    return (raw >> np.uint64(64 - w)).astype(dt) if w else np.zeros(n, dt)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def unpack_cases(n: int, rng: np.random.Generator, dev: Dev) -> Iterator[Case]:
    import cuda_kernels as ck

    nb = max(n // 1024, 1)
    for dt, widths in ((np.uint32, (1, 7, 16, 31)), (np.uint64, (1, 13, 32, 63))):
        t = np.dtype(dt).itemsize * 8
        for w in widths:
            base = min(nb, 64)
            wpb = 1024 * w // t
            words = np.tile(ck.pack_blocks(_uints(rng, base * 1024, w, dt), w), -(-nb // base))[: nb * wpb]
            offs = np.arange(nb, dtype=np.int64) * wpb
            widths_ = np.full(nb, w, np.uint8)
            d_words, d_offs, d_w, out = dev.up(words), dev.up(offs), dev.up(widths_), dev.empty(nb * 1024, dt)
            yield Case("unpack", f"unpack_blocks u{t} W={w}", lambda: ck.unpack_blocks_gpu(d_words, d_offs, d_w, out=out),
                       lambda: ck.unpack_blocks(words, offs, widths_))
            if w == t // 2:  # scattered into place, 1000 of each block's 1024 values kept (page tails)
                dst, cnt = np.arange(nb, dtype=np.int64) * 1000, np.full(nb, 1000, np.int64)
                d_dst, d_cnt, sout = dev.up(dst), dev.up(cnt), dev.empty(nb * 1000, dt)
                yield Case("unpack", f"unpack_blocks_scatter u{t} W={w}",
                           lambda: ck.unpack_blocks_scatter_gpu(d_words, d_offs, d_w, d_dst, d_cnt, sout),
                           lambda: ck.unpack_blocks_scatter(words, offs, widths_, dst, cnt, np.empty(nb * 1000, dt)))


def gather_cases(n: int, rng: np.random.Generator, dev: Dev) -> Iterator[Case]:
    import cuda_kernels as ck

    for items, label in ((rng.random(1000), "f64, 1000 items"), (rng.integers(0, 2**31, 65536).astype(np.int32), "i32, 65536 items")):
        idx = rng.integers(0, items.size, n).astype(np.uint32)
        d_items, d_idx = dev.up(items), dev.up(idx)
        yield Case("gather", f"gather_fixed {label}", lambda: ck.gather_fixed_gpu(d_items, d_idx), lambda: ck.gather_fixed(items, idx))
    lens = rng.integers(4, 41, 1000)
    item_offs = _offsets(lens)
    item_bytes = rng.integers(32, 127, int(item_offs[-1])).astype(np.uint8)
    idx = rng.integers(0, 1000, max(n // 4, 1)).astype(np.uint32)
    d_offs, d_bytes, d_idx = dev.up(item_offs), dev.up(item_bytes), dev.up(idx)
    yield Case("gather", "gather_binary (1000 items of 4..40 B)", lambda: ck.gather_binary_gpu(d_offs, d_bytes, d_idx),
               lambda: ck.gather_binary(item_offs, item_bytes, idx), "offsets + bytes")
    # long items: one warp per item (lanes on consecutive bytes) against one thread per item
    long_lens = rng.integers(64, 513, 1000)
    long_offs = _offsets(long_lens)
    long_bytes = rng.integers(32, 127, int(long_offs[-1])).astype(np.uint8)
    long_idx = rng.integers(0, 1000, max(n // 64, 1)).astype(np.uint32)
    dl_offs, dl_bytes, dl_idx = dev.up(long_offs), dev.up(long_bytes), dev.up(long_idx)
    for label, warp in (("warp per item", True), ("thread per item", False)):
        yield Case("gather", f"gather_binary (1000 items of 64..512 B, {label})",
                   lambda warp=warp: ck.gather_binary_gpu(dl_offs, dl_bytes, dl_idx, warp_copy=warp),
                   lambda: ck.gather_binary(long_offs, long_bytes, long_idx), "offsets + bytes")


def fsst_cases(n: int, rng: np.random.Generator, dev: Dev) -> Iterator[Case]:
    import cuda_kernels as ck
    from cuda_kernels import _device
    from lance_gpu.file.encodings import fsst
    from lance_gpu.file.encodings.base import DecodeContext

    base = min(max(n // 8, 64), 65536)
    text = [" ".join(r).encode() for r in WORDS[rng.integers(0, WORDS.size, (base, 5))]]
    table, co, cd = fsst.compress_strings(_offsets(np.array([len(s) for s in text])), np.frombuffer(b"".join(text), np.uint8))
    st = fsst.SymbolTable(table, DecodeContext("bench_gpu"))
    reps = max(n // 8 // base, 1)  # tile the compressed strings (one table) to ~n / 8 strings
    comp = np.tile(cd, reps)
    offs = np.append((co[:-1][None, :] + np.arange(reps)[:, None] * int(co[-1])).ravel(), reps * int(co[-1])).astype(np.int64)
    nstr = offs.size - 1
    d_comp, d_offs = dev.up(comp), dev.up(offs)
    yield Case("fsst", f"fsst_decode ({nstr} strings, ~30 B)",
               lambda: ck.fsst_decode_gpu(st.symbols, st.lengths, d_comp, d_offs, n_symbols=st.n_symbols),
               lambda: ck.fsst_decode(st.symbols, st.lengths, comp, offs, n_symbols=st.n_symbols), "offsets + bytes")
    nseg = 16 if nstr >= 1024 else 2  # as the pipeline: spans, one table per segment (page)
    bounds = np.linspace(0, nstr, nseg + 1).astype(np.int64)
    sym2, len2 = np.tile(st.symbols, (nseg, 1)), np.tile(st.lengths, (nseg, 1))
    nsym = np.full(nseg, st.n_symbols, np.int64)
    starts, lens = offs[:-1].copy(), np.diff(offs)
    d_starts, d_lens, out_lens = dev.up(starts), dev.up(lens), dev.empty(nstr, np.int64)
    tables, table_pos, _n = ck.pack_tables(sym2, len2, nsym)
    d_tables = dev.up(tables)

    def segments() -> tuple:
        ck.fsst_lengths_segments_gpu(d_tables, table_pos, nsym, d_comp, d_starts, d_lens, bounds, out_lens)
        out_offs, total = _device.exclusive_scan(out_lens)
        data = dev.empty(max(total, 1), np.uint8)
        ck.fsst_decode_segments_gpu(d_tables, table_pos, d_comp, d_starts, d_lens, bounds, out_offs, data)
        return out_offs, data[:total]

    yield Case("fsst", f"fsst segments: lengths+scan+decode ({nseg} tables)", segments,
               lambda: ck.fsst_decode_segments(sym2, len2, nsym, comp, starts, lens, bounds), "offsets + bytes")


def rle_cases(n: int, rng: np.random.Generator, dev: Dev) -> Iterator[Case]:
    import cuda_kernels as ck

    for dt, lo, hi in ((np.int32, 1, 256), (np.int64, 1, 9)):
        runs = rng.integers(lo, hi, max(n // ((lo + hi) // 2), 1)).astype(np.uint8)
        vals = rng.integers(0, 2**30, runs.size).astype(dt)
        d_vals, d_runs, out = dev.up(vals), dev.up(runs), dev.empty(int(runs.astype(np.int64).sum()), dt)
        yield Case("rle", f"rle_expand {np.dtype(dt).name} (runs {lo}..{hi - 1})", lambda: ck.rle_expand_gpu(d_vals, d_runs, out=out),
                   lambda: ck.rle_expand(vals, runs))


def levels_cases(n: int, rng: np.random.Generator, dev: Dev) -> Iterator[Case]:
    import cuda_kernels as ck

    rows = min(max(n // 16, 16), 65536)  # list<int32?>: lists of 0..7 items, 5% null lists, 10% null items
    lengths = rng.integers(0, 8, rows)
    valid = rng.random(rows) > 0.05
    offsets = _offsets(np.where(valid, lengths, 0))
    rav = ck.ravel_levels([(rng.random(int(offsets[-1])) > 0.1, None), (valid, offsets)], rows)
    reps = max(n // rav.num_levels, 1)  # whole rows repeated: still valid levels
    rep, def_ = np.tile(rav.rep, reps), np.tile(rav.def_, reps)
    d_rep, d_def, kinds = dev.up(rep), dev.up(def_), rav.layer_kinds
    yield Case("levels", f"unravel list<int32?> ({rep.size} levels)", lambda: ck.unravel_levels_gpu(d_rep, d_def, kinds, num_levels=rep.size),
               lambda: ck.unravel_levels(rep, def_, kinds, num_levels=rep.size), "validity + offsets")
    d1 = (rng.random(n) < 0.1).astype(np.uint16)
    d_d1, k1 = dev.up(d1), [ck.NULLABLE_ITEM]
    yield Case("levels", "unravel int32? (def only)", lambda: ck.unravel_levels_gpu(None, d_d1, k1, num_levels=n),
               lambda: ck.unravel_levels(None, d1, k1, num_levels=n), "validity")
    # the read path's form: one segmented pass over many leaves (here 16 fragments of each
    # of the two columns above), their levels in one buffer
    parts = 16
    row_starts = np.flatnonzero(rep == rep.max())
    cuts = np.append(row_starts[np.linspace(0, row_starts.size, parts, endpoint=False).astype(np.int64)], rep.size)
    lv_flat = n // parts
    level_buf = np.concatenate([rep, def_, d1])
    segs = [ck.LevelSegment(int(a), rep.size + int(a), int(b - a), tuple(kinds)) for a, b in zip(cuts[:-1], cuts[1:])]
    segs += [ck.LevelSegment(-1, 2 * rep.size + k * lv_flat, lv_flat, tuple(k1)) for k in range(parts)]
    d_buf = dev.up(level_buf)

    def seg_expect():
        out = []
        for sg in segs:
            r = None if sg.rep_pos < 0 else level_buf[sg.rep_pos : sg.rep_pos + sg.num_levels]
            u = ck.unravel_levels(r, level_buf[sg.def_pos : sg.def_pos + sg.num_levels], list(sg.layer_kinds), num_levels=sg.num_levels)
            # the segmented unravel also counts null entries (the CPU one leaves -1), and gives
            # every layer's validity as uint32 bitmask words
            layers = [lr._replace(null_count=0 if lr.validity is None else int((~lr.validity).sum())) for lr in u.layers]
            layers = [lr if lr.validity is None else lr._replace(validity=_words(lr.validity), words=True) for lr in layers]
            out.append(u._replace(layers=layers))
        return out

    def _words(validity: np.ndarray) -> np.ndarray:
        bitmap = ck.validity_to_bitmap(validity)
        padded = np.zeros((validity.size + 31) // 32 * 4, np.uint8)
        padded[: bitmap.size] = bitmap
        return padded.view("<u4")

    yield Case("levels", f"unravel_segments ({parts} list<int32?> + {parts} int32? leaves)", lambda: ck.unravel_segments_gpu(d_buf, segs),
               seg_expect, "validity + offsets")
    bools = rng.random(n) < 0.9
    bitmap = ck.validity_to_bitmap(bools)
    d_bools, d_bitmap = dev.up(bools), dev.up(bitmap)
    yield Case("levels", "bitmap_to_validity", lambda: ck.bitmap_to_validity_gpu(d_bitmap, n), lambda: ck.bitmap_to_validity(bitmap, n))
    yield Case("levels", "validity_to_bitmap", lambda: ck.validity_to_bitmap_gpu(d_bools), lambda: bitmap, "input bools", n)


def compact_cases(n: int, rng: np.random.Generator, dev: Dev) -> Iterator[Case]:
    import cuda_kernels as ck

    deleted = rng.integers(0, n, max(n // 10, 1))
    d_del = dev.up(deleted)
    mask = ck.keep_mask_from_deleted(n, deleted)
    yield Case("compact", "keep_mask_from_deleted (10% deleted)", lambda: ck.keep_mask_from_deleted_gpu(n, d_del), lambda: mask)
    vals = rng.random(n)
    d_vals, d_mask = dev.up(vals), dev.up(mask)
    yield Case("compact", "compact_fixed f64", lambda: ck.compact_fixed_gpu(d_vals, d_mask), lambda: ck.compact_fixed(vals, mask))
    ns = max(n // 8, 1)
    offs = _offsets(rng.integers(0, 61, ns))
    data = rng.integers(0, 256, int(offs[-1])).astype(np.uint8)
    smask = mask[:ns].copy()
    d_offs, d_data, d_smask = dev.up(offs), dev.up(data), dev.up(smask)
    yield Case("compact", "compact_binary (0..60 B)", lambda: ck.compact_binary_gpu(d_offs, d_data, d_smask),
               lambda: ck.compact_binary(offs, data, smask), "offsets + bytes")


def segment_cases(n: int, rng: np.random.Generator, dev: Dev) -> Iterator[Case]:
    import cuda_kernels as ck

    for label, lo, hi in (("32 KiB..1 MiB ranges", 32768, 1 << 20), ("1..64 B ranges", 1, 65)):
        lens = rng.integers(lo, hi, max(4 * n // ((lo + hi) // 2), 1))
        src_starts = _offsets(lens)[:-1]
        perm = rng.permutation(lens.size)
        dst_starts = np.empty_like(src_starts)
        dst_starts[perm] = _offsets(lens[perm])[:-1]  # every byte of dst written once
        total = int(lens.sum())
        src = rng.integers(0, 256, total).astype(np.uint8)
        d_src, d_ss, d_len, d_ds, dst = dev.up(src), dev.up(src_starts), dev.up(lens), dev.up(dst_starts), dev.empty(total, np.uint8)
        yield Case("segments", f"copy_ranges ({label})", lambda: ck.copy_ranges_gpu(d_src, d_ss, d_len, dst, d_ds),
                   lambda: ck.copy_ranges(src, src_starts, lens, np.empty(total, np.uint8), dst_starts), "bytes copied")
    # the read's string bytes: each value's bytes to the next place of one buffer (the
    # destination in order, so neighbouring ranges share destination words)
    slens = rng.integers(4, 41, max(4 * n // 22, 1))
    s_starts = _offsets(slens)[:-1]
    s_total = int(slens.sum())
    s_src = rng.integers(0, 256, s_total + 3).astype(np.uint8)
    d_ssrc, d_sss, d_slen, d_sdst = dev.up(s_src), dev.up(s_starts + 3), dev.up(slens), dev.up(s_starts)
    sdst = dev.empty(s_total, np.uint8)
    yield Case("segments", "copy_ranges (strings: 4..40 B ranges in order, source 3 bytes off)",
               lambda: ck.copy_ranges_gpu(d_ssrc, d_sss, d_slen, sdst, d_sdst),
               lambda: ck.copy_ranges(s_src, s_starts + 3, slens, np.empty(s_total, np.uint8), s_starts), "bytes copied")
    # whole pages copied from an arena at offsets that share no alignment with the destination
    plens = np.full(max(4 * n // 65536, 1), 65536, np.int64)
    p_total = int(plens.sum())
    p_src = rng.integers(0, 256, p_total + 5).astype(np.uint8)
    d_psrc, d_pss, d_plen, d_pdd = dev.up(p_src), dev.up(_offsets(plens)[:-1] + 5), dev.up(plens), dev.up(_offsets(plens)[:-1])
    pdst = dev.empty(p_total, np.uint8)
    yield Case("segments", "copy_ranges (64 KiB pages, source 5 bytes off: funnel-shifted words)",
               lambda: ck.copy_ranges_gpu(d_psrc, d_pss, d_plen, pdst, d_pdd),
               lambda: ck.copy_ranges(p_src, _offsets(plens)[:-1] + 5, plens, np.empty(p_total, np.uint8), _offsets(plens)[:-1]),
               "bytes copied")
    k = max(n // 4096, 1)  # 16 KiB constant segments, 4 different 8-byte patterns
    pats = rng.integers(0, 256, 32).astype(np.uint8)
    fd, fn_, ps, pl = np.arange(k, dtype=np.int64) * 16384, np.full(k, 16384, np.int64), (np.arange(k) % 4 * 8).astype(np.int64), np.full(k, 8, np.int64)
    d_fd, d_fn, d_pats, d_ps, d_pl, fdst = dev.up(fd), dev.up(fn_), dev.up(pats), dev.up(ps), dev.up(pl), dev.empty(16384 * k, np.uint8)
    yield Case("segments", "fill_patterns (16 KiB segments)", lambda: ck.fill_patterns_gpu(fdst, d_fd, d_fn, d_pats, d_ps, d_pl),
               lambda: ck.fill_patterns(np.empty(16384 * k, np.uint8), fd, fn_, pats, ps, pl))
    counts = rng.integers(1000, 5000, max(n // 3000, 1))  # boolean pages at arbitrary bit offsets
    bstarts = _offsets(counts)[:-1]
    bits = rng.integers(0, 256, -(-int(counts.sum()) // 8)).astype(np.uint8)
    d_bits, d_bs, d_cnt, bdst = dev.up(bits), dev.up(bstarts), dev.up(counts), dev.empty(int(counts.sum()), np.uint8)
    yield Case("segments", "bits_to_bytes", lambda: ck.bits_to_bytes_gpu(d_bits, d_bs, d_cnt, bdst, d_bs),
               lambda: ck.bits_to_bytes(bits, bstarts, counts, np.empty(int(counts.sum()), np.uint8), bstarts))
    es, el = rng.integers(0, 1 << 20, max(n // 16, 1)), rng.integers(0, 32, max(n // 16, 1))
    d_es, d_el = dev.up(es), dev.up(el)
    yield Case("segments", "expand_ranges (0..31 each)", lambda: ck.expand_ranges_gpu(d_es, d_el), lambda: ck.expand_ranges(es, el), "indices + offsets")
    toffs = _offsets(rng.integers(0, 16, max(n // 4, 1)))
    tidx = rng.integers(0, toffs.size - 1, max(n // 4, 1))
    d_toffs, d_tidx = dev.up(toffs), dev.up(tidx)
    yield Case("segments", "take_ranges", lambda: ck.take_ranges_gpu(d_toffs, d_tidx), lambda: ck.take_ranges(toffs, tidx), "starts + lengths")
    nseg = 64
    bounds = np.linspace(0, n, nseg + 1).astype(np.int64)
    vals, bases = rng.integers(0, 2**32, n).astype(np.uint32), rng.integers(0, 2**40, nseg)
    d_vals, d_bounds, d_bases = dev.up(vals), dev.up(bounds), dev.up(bases)
    yield Case("segments", f"add_segment_base ({nseg} segments)", lambda: ck.add_segment_base_gpu(d_vals, d_bounds, d_bases),
               lambda: ck.add_segment_base(vals, bounds, bases))
    lv, tables = rng.integers(0, 4, n).astype(np.uint16), rng.integers(0, 8, (nseg, 4)).astype(np.uint16)
    d_lv, d_tables = dev.up(lv), dev.up(tables)
    yield Case("segments", f"remap_segments u16 ({nseg} tables)", lambda: ck.remap_segments_gpu(d_lv, d_bounds, d_tables),
               lambda: ck.remap_segments(lv, bounds, tables))


def pieces_cases(n: int, rng: np.random.Generator, dev: Dev) -> Iterator[Case]:
    """The read's combining primitives (``to_cudf``'s one set of buffers): offsets of many
    pieces rebased into int32, validity bytes of many pieces packed into bitmask words."""
    from cuda_kernels.pieces import pack_bitmask_segments, pack_bitmask_segments_gpu, rebase_offsets_segments, rebase_offsets_segments_gpu

    npieces = max(n // 4096, 1)
    counts = rng.integers(2048, 6144, npieces)
    src = np.cumsum(rng.integers(0, 40, int(counts.sum()) + npieces)).astype(np.int64)
    at = _offsets(counts + 1)[:-1]
    base = src[at]
    shift = _offsets(src[at + counts] - base)[:-1]
    dst = _offsets(counts)[:-1]
    total = int(counts.sum())
    zeros = np.zeros(npieces, np.int64)
    d_src, d_at, d_cnt, d_base, d_shift, d_zero, d_dst = (dev.up(x) for x in (src, at, counts, base, shift, zeros, dst))
    out32 = dev.empty(total, np.int32)
    yield Case("pieces", f"rebase_offsets_segments -> int32 ({npieces} pieces)",
               lambda: rebase_offsets_segments_gpu(d_src, d_at, counts, d_base, d_shift, d_zero, out32, d_dst),
               lambda: rebase_offsets_segments(src, at, counts, base, shift, zeros, np.empty(total, np.int32), dst),
               "source + destination offsets", total * 12)
    valid = (rng.random(total) < 0.9).astype(np.uint8)
    bit_dst = _offsets(counts)[:-1]
    column = np.zeros(npieces, np.int64)
    d_valid, d_vat, d_col = dev.up(valid), dev.up(dst), dev.up(column)
    words = -(-total // 32)

    def run_pack():
        out = dev.empty(words, np.uint32)
        out[:] = 0
        nulls = dev.empty(1, np.int64)
        nulls[:] = 0
        return pack_bitmask_segments_gpu(d_valid, d_vat, counts, bit_dst, d_col, out, nulls)  # counts, bit_dst: host (sized there)

    yield Case("pieces", f"pack_bitmask_segments ({npieces} pieces)", run_pack,
               lambda: pack_bitmask_segments(valid, dst, counts, bit_dst, column, np.zeros(words, np.uint32), np.zeros(1, np.int64)),
               "validity bytes read + words written", total + words * 4)


FAMILIES = (unpack_cases, gather_cases, fsst_cases, rle_cases, levels_cases, compact_cases, segment_cases, pieces_cases)


def run_kernels(n: int, dev: Dev, repeat: int, check: bool, ref_gb_s: float | None,
                checkpoint: Callable[[list[dict]], None] = lambda rows: None) -> list[dict]:
    """Time every case of every family; one row per case (``error`` set when it failed);
    ``checkpoint`` gets the rows so far after each family."""
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    for family in FAMILIES:
        checkpoint(rows)
        cases = family(n, rng, dev)
        while True:
            row: dict = {"family": family.__name__.removesuffix("_cases")}
            try:
                case = next(cases)
            except StopIteration:
                break
            except Exception as exc:  # preparing the input failed: the family's other cases are lost
                rows.append({**row, "kernel": "(input preparation)", "error": f"{type(exc).__name__}: {exc}"})
                print(f"  {row['family']}: input preparation failed: {exc}", flush=True)
                break
            row.update(kernel=case.name, basis=case.basis)
            try:
                out, times = timed(case.fn, dev.sync, repeat)
                size = case.nbytes if case.nbytes is not None else nbytes(out)
                sec = statistics.median(times)
                row.update(mb=size / 1e6, ms=sec * 1e3, gb_s=size / sec / 1e9)
                if ref_gb_s:
                    row["of_copy"] = row["gb_s"] / ref_gb_s
                if check and case.expect is not None:
                    same(out, case.expect(), case.name)
                    row["checked"] = True
                del out
            except Exception as exc:
                row["error"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
            print("  " + _kernel_line(row), flush=True)
            del case
            dev.free()
    return rows


def _kernel_line(r: dict) -> str:
    if "error" in r:
        return f"{r['kernel']:48s} FAILED {r['error'][:300]}"
    frac = f"{r['of_copy']:5.2f} of copy" if "of_copy" in r else ""
    return f"{r['kernel']:48s} {r['mb']:9.1f} MB {r['ms']:9.3f} ms {r['gb_s']:8.1f} GB/s {frac}"


# --------------------------------------------------------------------------------------------
# 3. End to end

ENGINES = (  # key, label, libraries needed (CuPy: a real GPU, not the simulator)
    ("scan_device", "ours: scan_device (device-resident)", ()),
    ("to_table_gpu", "ours: to_table(device='gpu') (Arrow on host)", ()),
    ("to_cudf", "ours: to_cudf()", ("cudf",)),
    ("pylance_table", "pylance to_table (host only)", ("lance",)),
    ("pylance_upload", "pylance to_table + CuPy upload", ("lance", "cupy")),
    ("pylance_cudf", "pylance to_table + cudf.from_arrow", ("lance", "cudf")),
    ("cudf_parquet", "cudf.read_parquet", ("cudf",)),
    ("cpu", "ours: to_table(device='cpu')", ()),
)
LABELS = {key: label for key, label, _needs in ENGINES}
COMPARISONS = (  # ours, theirs, target (ratio must reach it), strict
    ("scan_device", "pylance_upload", TARGET_VS_UPLOAD, False),
    ("to_cudf", "pylance_cudf", TARGET_VS_UPLOAD, False),
    ("to_cudf", "cudf_parquet", TARGET_VS_CUDF_PARQUET, True),
    ("to_table_gpu", "pylance_table", None, False),
    ("to_table_gpu", "cpu", None, False),
)


def _engine(key: str, lance_uri: str, parquet: str, mods: dict, sync: Callable[[], None]) -> Callable[[], int]:
    """A call reading one dataset fully with engine ``key``; returns the row count."""
    import lance_gpu

    cp, cudf, lance = mods.get("cupy"), mods.get("cudf"), mods.get("lance")
    if key == "scan_device":
        from lance_gpu.gpu.read import scan_device

        def run() -> int:
            snap = lance_gpu.dataset(lance_uri, device="gpu").snapshot
            tables = [dt for _frag, dt in scan_device(snap, list(snap.lance_schema.fields), [(f, f.live_rows) for f in snap.fragments])]
            sync()
            return sum(t.num_rows for t in tables)
        return run
    if key == "to_table_gpu":
        return lambda: lance_gpu.dataset(lance_uri, device="gpu").to_table(device="gpu").num_rows
    if key == "to_cudf":
        return lambda: len(lance_gpu.dataset(lance_uri, device="gpu").to_cudf())
    if key == "cpu":
        return lambda: lance_gpu.dataset(lance_uri, device="cpu").to_table(device="cpu").num_rows
    if key == "pylance_table":
        return lambda: lance.dataset(lance_uri).to_table().num_rows
    if key == "pylance_upload":
        def run() -> int:
            tbl = lance.dataset(lance_uri).to_table()
            bufs = [cp.asarray(np.frombuffer(b, np.uint8)) for col in tbl.columns for chunk in col.chunks
                    for b in chunk.buffers() if b is not None and b.size]
            cp.cuda.Device().synchronize()
            del bufs
            return tbl.num_rows
        return run
    if key == "pylance_cudf":
        from lance_gpu.gpu._cudf import cudf_arrow_table  # cuDF has no fixed-size list: embeddings become lists

        return lambda: len(cudf.DataFrame.from_arrow(cudf_arrow_table(lance.dataset(lance_uri).to_table())))
    if key == "cudf_parquet":
        return lambda: len(cudf.read_parquet(parquet))
    raise ValueError(key)


def phases(lance_uri: str, sync: Callable[[], None]) -> dict:
    """One ``scan_device`` read of the whole dataset with its phases timed: units, bytes
    staged, wall seconds of staging (host gathering + H2D copies issued, in the staging
    thread; its last copies drain while the decode's stream waits on their events) and of
    decoding (main thread, up to the end of each unit's kernels, the device pre-pass of
    chunk headers and its readback included), and the read's wall time; overlap = stage +
    decode - wall (0 when the phases ran one after the other)."""
    import lance_gpu
    from lance_gpu.gpu import read as gpu_read

    stage_s: list[float] = []
    decode_s: list[float] = []
    staged_bytes: list[int] = []
    real_stage, real_decode = gpu_read._stage, gpu_read.decode_unit

    def stage(items):
        t0 = time.perf_counter()
        out = real_stage(items)
        stage_s.append(time.perf_counter() - t0)
        staged_bytes.append(out.unit.stage.nbytes)
        return out

    def decode(unit, arena=None, *rest):
        t0 = time.perf_counter()
        out = real_decode(unit, arena, *rest)
        sync()
        decode_s.append(time.perf_counter() - t0)
        return out

    gpu_read._stage, gpu_read.decode_unit = stage, decode
    try:
        sync()
        t0 = time.perf_counter()
        snap = lance_gpu.dataset(lance_uri, device="gpu").snapshot
        nrows = sum(dt.num_rows for _frag, dt in gpu_read.scan_device(snap, list(snap.lance_schema.fields), [(f, f.live_rows) for f in snap.fragments]))
        sync()
        wall = time.perf_counter() - t0
    finally:
        gpu_read._stage, gpu_read.decode_unit = real_stage, real_decode
    stage_total, decode_total = sum(stage_s), sum(decode_s)
    return {"rows": nrows, "units": len(decode_s), "staged_mb": sum(staged_bytes) / 1e6, "stage_s": stage_total,
            "decode_s": decode_total, "wall_s": wall, "overlap_s": max(stage_total + decode_total - wall, 0.0),
            "stage_gb_s": sum(staged_bytes) / stage_total / 1e9 if stage_total else None}


def _import(name: str) -> tuple[object | None, str | None]:
    try:
        return __import__(name), None
    except Exception as exc:
        return None, f"{name} absent ({type(exc).__name__})" if isinstance(exc, ImportError) else f"{name} unusable ({exc})"


def nested_table(n: int, seed: int = 2) -> pa.Table:
    """The "nested" dataset: ``id``; ``li`` list<int64>; ``ls`` list<string>; ``st``
    struct<a: int32, b: string, c: list<float32>>; ``lli`` list<list<int32>>.  Nulls at every
    level: ~10% null lists / structs (with no items), ~10% null struct fields and inner lists,
    ~5% null items; lists of 0..6 items (0..3 for the inner ones), empty ones included.  No map:
    cuDF has no map type (``cudf.read_parquet`` gives a list of structs), so a map column would
    compare unlike things.  About 100 bytes a row in Arrow."""
    rng = np.random.default_rng(seed)
    vocab = pa.array([f"{WORDS[i % WORDS.size]}_{i}" + "x" * (i % 23) for i in range(1000)])

    def lists(count: int, most: int, items: Callable[[int], pa.Array], null_share: float = 0.1) -> pa.Array:
        nulls = rng.random(count) < null_share
        lengths = np.where(nulls, 0, rng.integers(0, most + 1, count))
        offsets = pa.array(_offsets(lengths).astype(np.int32))
        return pa.ListArray.from_arrays(offsets, items(int(lengths.sum())), mask=pa.array(nulls))

    def ints(k: int, dt) -> pa.Array:
        return pa.array(rng.integers(-(10**6), 10**6, k).astype(dt), mask=rng.random(k) < 0.05)

    def strs(k: int, null_share: float = 0.05) -> pa.Array:  # a null index takes a null
        return vocab.take(pa.array(rng.integers(0, len(vocab), k), mask=rng.random(k) < null_share))

    def floats(k: int) -> pa.Array:
        return pa.array(rng.random(k, dtype=np.float32), mask=rng.random(k) < 0.05)

    struct_nulls = rng.random(n) < 0.1
    st = pa.StructArray.from_arrays(
        [pa.array(rng.integers(0, 1000, n).astype(np.int32), mask=rng.random(n) < 0.1),
         strs(n, 0.1),
         lists(n, 4, floats)],
        names=["a", "b", "c"], mask=pa.array(struct_nulls))
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "li": lists(n, 6, lambda k: ints(k, np.int64)),
        "ls": lists(n, 4, strs),
        "st": st,
        "lli": lists(n, 3, lambda k: lists(k, 3, lambda j: ints(j, np.int32))),
    })


def make_data(data: Path, rows: int, emb_rows: int, nested_rows: int, pylance: object | None) -> str:
    """bench_read.make_data into ``data`` ("mixed", "embeddings"), and the "nested" table
    (:func:`nested_table`); each as Lance and Parquet (``pyarrow.parquet``, default options:
    what ``cudf.read_parquet`` reads).  Without pylance the Lance copies are written by
    ``lance_gpu.write_dataset`` instead.  Returns who wrote them."""
    import types

    import bench_read
    import pyarrow.parquet as pq

    import lance_gpu

    bench_read.DATA = data
    write = pylance.write_dataset if pylance is not None else lambda table, uri: lance_gpu.write_dataset(table, uri)  # type: ignore[attr-defined]
    saved = sys.modules.get("lance")
    if pylance is None:
        shim = types.ModuleType("lance")
        shim.write_dataset = write  # type: ignore[attr-defined]
        sys.modules["lance"] = shim
    try:
        bench_read.make_data(rows, emb_rows)
    finally:
        if pylance is None:
            if saved is None:
                sys.modules.pop("lance", None)
            else:
                sys.modules["lance"] = saved
    nested = data / f"nested_{nested_rows}"
    if not nested.with_suffix(".lance").exists() or not nested.with_suffix(".parquet").exists():
        tbl = nested_table(nested_rows)
        write(tbl, str(nested.with_suffix(".lance")))
        pq.write_table(tbl, str(nested.with_suffix(".parquet")))
    return "pylance" if pylance is not None else "lance_gpu.write_dataset (pylance absent)"


def same_as_pylance(lance_uri: str, pylance: object | None) -> str:
    """Whether ``to_table(device="gpu")`` equals pylance's ``to_table()`` of the dataset: "yes",
    "**no**: ..." (the first differing column) or why it was not checked."""
    import lance_gpu

    if pylance is None:
        return "not checked: pylance absent"
    got = lance_gpu.dataset(lance_uri, device="gpu").to_table(device="gpu")
    want = pylance.dataset(lance_uri).to_table()  # type: ignore[attr-defined]
    if got.schema != want.schema:
        return f"**no**: schema {got.schema} != {want.schema}"
    for name in want.column_names:
        if not got.column(name).equals(want.column(name)):
            return f"**no**: column {name!r} differs"
    return "yes"


def run_e2e(args: argparse.Namespace, dev: Dev, mods: dict, why: dict, info: dict,
            checkpoint: Callable[[list[dict], list[dict]], None] = lambda rows, ratios: None) -> tuple[list[dict], list[dict]]:
    """Every engine on every dataset, its phases and its check, then the ratio rows; ``info``
    gets where the data came from, the phases and the checks; ``checkpoint`` gets the rows
    and ratios so far after each dataset."""
    import bench_read

    data = Path(args.data) if args.data else bench_read.DATA
    sets = (("mixed", args.rows), ("embeddings", args.emb_rows), ("nested", args.nested_rows))
    paths = {name: data / f"{name}_{n}" for name, n in sets}
    missing = [p.with_suffix(s) for p in paths.values() for s in (".lance", ".parquet") if not p.with_suffix(s).exists()]
    info["data"] = str(data)
    info["data_writer"] = "found in place"
    if missing:
        print(f"writing datasets under {data} ...", flush=True)
        info["data_writer"] = make_data(data, args.rows, args.emb_rows, args.nested_rows, mods.get("lance"))
    rows: list[dict] = []
    from lance_gpu._device import GpuFallbackWarning
    from lance_gpu.gpu import read as gpu_read

    for name, n in sets:
        getattr(gpu_read, "_warned", set()).clear()  # CPU-fallback warnings: once per dataset
        for key, label, needs in ENGINES:
            if args.engines and key not in args.engines:
                continue
            row = {"dataset": name, "rows": n, "engine": key, "label": label}
            absent = [why[m] for m in needs if mods.get(m) is None]
            if absent:
                row["not_run"] = "; ".join(absent)
            else:
                _run_engine(row, paths[name], mods, dev, args.repeat, GpuFallbackWarning)
            rows.append(row)
            dev.free()
            print(f"  {name:10s} {label:46s} " + (f"{row['s']:8.3f} s" if "s" in row else row.get("error", f"not run: {row.get('not_run')}")), flush=True)
        lance_uri = str(paths[name].with_suffix(".lance"))
        try:
            ph = phases(lance_uri, dev.sync)
            info.setdefault("phases", {})[name] = ph
            print(f"  {name:10s} phases of scan_device: {ph['units']} unit(s), {ph['staged_mb']:.0f} MB staged in {ph['stage_s']:.3f} s, "
                  f"decode {ph['decode_s']:.3f} s, wall {ph['wall_s']:.3f} s, overlap {ph['overlap_s']:.3f} s", flush=True)
        except Exception as exc:
            info.setdefault("phases", {})[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        dev.free()
        try:
            check = same_as_pylance(lance_uri, mods.get("lance"))
        except Exception as exc:
            check = f"**no**: {type(exc).__name__}: {str(exc)[:300]}"
        info.setdefault("checks", {})[name] = check
        print(f"  {name:10s} to_table(device='gpu') equals pylance: {check}", flush=True)
        dev.free()
        checkpoint(rows, _ratios(rows, [name for name, _ in sets if name in info["checks"]]))
    return rows, _ratios(rows, [name for name, _ in sets])


def _run_engine(row: dict, path: Path, mods: dict, dev: Dev, repeat: int, fallback: type) -> None:
    """Time one engine on one dataset into ``row`` (seconds, CPU-fallback notes or the error)."""
    try:
        fn = _engine(row["engine"], str(path.with_suffix(".lance")), str(path.with_suffix(".parquet")), mods, dev.sync)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            nrows, times = timed(fn, dev.sync, repeat)
        if nrows != row["rows"]:
            row["error"] = f"read {nrows} rows, expected {row['rows']}"
            return
        notes = sorted({str(w.message) for w in caught if issubclass(w.category, fallback)})
        row.update(s=statistics.median(times), **({"fallbacks": notes} if notes else {}))
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"


def _ratios(rows: list[dict], datasets: list[str]) -> list[dict]:
    """Their time / ours for every comparison of every dataset."""
    ratios = []
    for name in datasets:
        got = {r["engine"]: r for r in rows if r["dataset"] == name}
        for ours, theirs, target, strict in COMPARISONS:
            o, t = got.get(ours, {}), got.get(theirs, {})
            r = {"dataset": name, "ours": ours, "theirs": theirs, "target": target}
            if "s" in o and "s" in t:
                r["ratio"] = t["s"] / o["s"]
                if target is not None:
                    r["met"] = r["ratio"] > target if strict else r["ratio"] >= target
            else:
                r["not_run"] = o.get("not_run") or t.get("not_run") or o.get("error") or t.get("error") or "not measured"
            ratios.append(r)
    return ratios


# --------------------------------------------------------------------------------------------
# Results


def meta(args: argparse.Namespace, simulate: bool) -> dict:
    """Device, driver / runtime and library versions, date and sizes."""
    from importlib import metadata

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except Exception:
            return "absent"

    m = {"date": time.strftime("%Y-%m-%d %H:%M"), "python": platform.python_version(), "machine": platform.machine(),
         "cpus": os.cpu_count(), "repeat": args.repeat, "kernel_values": args.kernel_n, "rows": args.rows, "emb_rows": args.emb_rows,
         "nested_rows": args.nested_rows,
         **{dist: version(dist) for dist in ("numpy", "pyarrow", "numba", "numba-cuda", "pylance")}}
    if simulate:
        return {**m, "device": "numba CUDA simulator (timings meaningless)", "slug": "simulator"}
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    drv, rt = cp.cuda.runtime.driverGetVersion(), cp.cuda.runtime.runtimeGetVersion()
    return {**m, "device": name, "slug": re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"),
            "compute_capability": f"{props['major']}.{props['minor']}", "memory_gb": props["totalGlobalMem"] / 1e9,
            "cuda_driver": f"{drv // 1000}.{drv % 1000 // 10}", "cuda_runtime": f"{rt // 1000}.{rt % 1000 // 10}", "cupy": cp.__version__}


def write_results(out_dir: Path, res: dict) -> Path:
    """benchmarks/results/gpu_<slug>.{json,md}; returns the .md path."""
    m = res["meta"]
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"gpu_{m['slug']}"
    stem.with_suffix(".json").write_text(json.dumps(res, indent=2, default=str))
    ver = ", ".join(f"{k} {m[k]}" for k in ("cuda_driver", "cuda_runtime", "cupy", "numba", "numba-cuda", "pyarrow", "pylance", "cudf") if k in m)
    lines = [f"# GPU benchmark: {m['device']}, {m['date']}", "",
             f"{ver}; Python {m['python']}, {m['cpus']} CPU cores; kernel inputs {m['kernel_values']} values; "
             f"datasets mixed {m['rows']} / embeddings {m['emb_rows']} / nested {m.get('nested_rows')} rows; "
             f"median of {m['repeat']} after one warm-up.", "",
             f"Code timed: `{m.get('code', '?')}`.", ""]
    if res["bandwidth"]:
        lines += ["## Copy bandwidth (GB/s of bytes copied)", "", "| copy | MB | GB/s |", "|---|---|---|"]
        lines += [f"| {r['copy']} | {r['mb']:.0f} | {r['gb_s']:.1f} |" for r in res["bandwidth"]]
        lines += ["", f"Reference for the kernels: {res['ref_gb_s']:.1f} GB/s (the faster D2D copy).", ""]
    if res["kernels"]:
        lines += ["## Kernels", "", f"Inputs on the device; GB/s of the bytes named in 'counted' / wall time of the wrapper call "
                  f"(launches, allocation, scans, error-flag readback). Target: >= {KERNEL_TARGET:.2f} of the D2D copy.", "",
                  "| family | kernel | counted | MB | ms | GB/s | of copy | target | checked |", "|---|---|---|---|---|---|---|---|---|"]
        for r in res["kernels"]:
            if "error" in r:
                lines.append(f"| {r['family']} | {r['kernel']} | | | | | | FAILED: {r['error'][:200]} | |")
                continue
            frac = f"{r['of_copy']:.2f}" if "of_copy" in r else "n/a"
            ok = "n/a" if "of_copy" not in r else ("yes" if r["of_copy"] >= KERNEL_TARGET else "**no**")
            lines.append(f"| {r['family']} | {r['kernel']} | {r['basis']} | {r['mb']:.1f} | {r['ms']:.3f} | {r['gb_s']:.1f} | {frac} | {ok} | "
                         f"{'yes' if r.get('checked') else 'no'} |")
        lines.append("")
    if res["e2e"]:
        lines += ["## End to end (median seconds, dataset opened inside the timed call)", "",
                  f"Data: {m.get('data')} (Lance copies: {m.get('data_writer')}).", "", "| dataset | engine | s | note |", "|---|---|---|---|"]
        for r in res["e2e"]:
            if "not_run" in r:
                note = f"not run: {r['not_run']}"
            elif "error" in r:
                note = f"FAILED: {r['error'][:200]}"
            else:
                note = "CPU fallback: " + "; ".join(r["fallbacks"])[:300] if r.get("fallbacks") else ""
            secs = f"{r['s']:.3f}" if "s" in r else ""
            lines.append(f"| {r['dataset']} | {r['label']} | {secs} | {note} |")
        lines += ["", "Ratios: their time / ours (above 1: we are faster).", "", "| dataset | ours | theirs | ratio | target | met |", "|---|---|---|---|---|---|"]
        for r in res["ratios"]:
            tgt = "" if r["target"] is None else (f"> {r['target']:g}x" if r["target"] == TARGET_VS_CUDF_PARQUET else f">= {r['target']:g}x")
            val = f"{r['ratio']:.2f}x" if "ratio" in r else f"not run: {r['not_run'][:150]}"
            met = "" if "met" not in r else ("yes" if r["met"] else "**no**")
            lines.append(f"| {r['dataset']} | {LABELS[r['ours']]} | {LABELS[r['theirs']]} | {val} | {tgt} | {met} |")
    if m.get("phases"):
        lines += ["", "Phases of one scan_device read (staging thread: host gathering + H2D; main thread: kernels; "
                  "overlap = stage + decode - wall):", "", "| dataset | units | MB staged | stage s | stage GB/s | decode s | wall s | overlap s |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, ph in m["phases"].items():
            if "error" in ph:
                lines.append(f"| {name} | FAILED: {ph['error'][:200]} | | | | | | |")
                continue
            gbs = f"{ph['stage_gb_s']:.1f}" if ph["stage_gb_s"] else ""
            lines.append(f"| {name} | {ph['units']} | {ph['staged_mb']:.0f} | {ph['stage_s']:.3f} | {gbs} | {ph['decode_s']:.3f} | "
                         f"{ph['wall_s']:.3f} | {ph['overlap_s']:.3f} |")
    if m.get("checks"):
        lines += ["", "`to_table(device='gpu')` equals pylance's `to_table()`: "
                  + "; ".join(f"{name} {check}" for name, check in m["checks"].items()) + "."]
    if res["not_run"]:
        lines += ["", "## Not run", ""] + [f"- {s}" for s in res["not_run"]]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return stem.with_suffix(".md")


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=None, help="rows of the 'mixed' dataset (default 5_000_000; --quick 100_000)")
    ap.add_argument("--emb-rows", type=int, default=None, help="rows of 'embeddings' (default 500_000; --quick 10_000)")
    ap.add_argument("--nested-rows", type=int, default=None, help="rows of 'nested', lists and structs (default 1_000_000; --quick 20_000)")
    ap.add_argument("--repeat", type=int, default=None, help="timed runs after one warm-up (default 5; --quick 3)")
    ap.add_argument("--kernel-n", type=int, default=None, help="values per kernel case (default 2**26; --quick 2**20)")
    ap.add_argument("--data", type=Path, default=None, help="directory holding (or to receive) bench_read's datasets")
    ap.add_argument("--results-dir", type=Path, default=None, help="default benchmarks/results (none written under --simulate)")
    ap.add_argument("--kernels-only", action="store_true", help="bandwidth and kernels, no end-to-end reads")
    ap.add_argument("--e2e-only", action="store_true", help="end-to-end reads and phases only (no bandwidth, no kernels)")
    ap.add_argument("--data-only", action="store_true", help="write the end-to-end datasets under --data (if absent), then stop")
    ap.add_argument("--code", type=Path, default=None, help="import lance_gpu / cuda_kernels from this checkout (a baseline)")
    ap.add_argument("--tag", default="", help="suffix of the results files (gpu_<device>_<tag>)")
    ap.add_argument("--engines", type=lambda v: [e for e in v.split(",") if e], default=None,
                    help=f"end-to-end engines to run (comma-separated; default all: {','.join(k for k, _l, _n in ENGINES)})")
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--no-check", action="store_true", help="skip comparing kernel outputs with their CPU twins")
    # under NUMBA_ENABLE_CUDASIM=1, tiny sizes: the kernels, or with --e2e-only the end-to-end rows
    # that need neither CuPy nor cuDF, the phases and the checks (the simulator stands in for the device)
    ap.add_argument("--simulate", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sim = args.simulate
    q = args.quick
    args.rows = args.rows or (100_000 if q else 5_000_000)
    args.emb_rows = args.emb_rows or (10_000 if q else 500_000)
    args.nested_rows = args.nested_rows or (20_000 if q else 1_000_000)
    if args.data_only:
        import bench_read

        data = Path(args.data) if args.data else bench_read.DATA
        pylance, _why = _import("lance")
        t0 = time.perf_counter()
        writer = make_data(data, args.rows, args.emb_rows, args.nested_rows, pylance)
        print(f"datasets under {data} ({writer}): {time.perf_counter() - t0:.0f} s", flush=True)
        return 0
    if sim and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        print("bench_gpu: --simulate needs NUMBA_ENABLE_CUDASIM=1 in the environment", file=sys.stderr)
        return 2
    if sim:
        import lance_gpu._device as device_mod

        device_mod.gpu_unusable_reason = lambda: None  # the simulator stands in for the device
    else:
        from lance_gpu._device import gpu_unusable_reason

        reason = gpu_unusable_reason()
        if reason is not None:
            print(f"bench_gpu: no usable GPU ({reason}); nothing measured", file=sys.stderr)
            return 2
    args.repeat = (0 if sim else 3 if q else 5) if args.repeat is None else args.repeat
    args.kernel_n = args.kernel_n or (2048 if sim else 1 << 20 if q else 1 << 26)
    warnings.filterwarnings("ignore", category=FutureWarning)
    dev = Dev(sim)
    res: dict = {"meta": meta(args, sim), "bandwidth": [], "ref_gb_s": None, "kernels": [], "e2e": [], "ratios": [], "not_run": []}
    print(f"device: {res['meta']['device']}", flush=True)
    writes = not sim or args.results_dir is not None

    def save(part: dict) -> None:  # the results so far, so that a run cut short by a timeout leaves them
        if writes:
            write_results(args.results_dir or RESULTS, {**res, **part})
    import lance_gpu

    res["meta"]["code"] = str(Path(lance_gpu.__file__).resolve().parents[1])
    if args.tag:
        res["meta"]["slug"] += f"_{re.sub(r'[^a-z0-9]+', '-', args.tag.lower())}"
    print(f"code: {res['meta']['code']}", flush=True)
    if sim:
        res["not_run"].append("bandwidth: CUDA simulator" + (
            "; end to end with CuPy or cuDF: simulator (timings meaningless)" if args.e2e_only
            else "; end to end: --simulate without --e2e-only (kernels called once on tiny inputs, checked against the CPU)"))
    elif args.e2e_only:
        res["not_run"].append("bandwidth and kernels: --e2e-only")
    else:
        print("copy bandwidth:", flush=True)
        try:
            res["bandwidth"] = bandwidth((32 if q else 512) << 20, args.repeat)
            res["ref_gb_s"] = max(r["gb_s"] for r in res["bandwidth"] if r["copy"].startswith("D2D"))
        except Exception as exc:  # kernels still run, without the fraction of copy bandwidth
            res["not_run"].append(f"copy bandwidth (so no kernel fractions): {type(exc).__name__}: {exc}")
            print(f"  FAILED {type(exc).__name__}: {exc}", flush=True)
        dev.free()
    if not args.e2e_only:
        t0 = time.perf_counter()
        print(f"kernels ({args.kernel_n} values per case):", flush=True)
        res["kernels"] = run_kernels(args.kernel_n, dev, args.repeat, not args.no_check, res["ref_gb_s"],
                                     lambda rows: save({"kernels": rows}))
        below = [r["kernel"] for r in res["kernels"] if r.get("of_copy", 1.0) < KERNEL_TARGET]
        print(f"kernels done in {time.perf_counter() - t0:.0f} s" + (f"; below {KERNEL_TARGET:.2f} of copy: {', '.join(below)}" if below else ""), flush=True)
    if args.kernels_only or (sim and not args.e2e_only):
        if not sim:
            res["not_run"].append("end to end: --kernels-only")
    else:
        mods: dict = {"cupy": dev.cp}
        why: dict = {"cupy": "CuPy: CUDA simulator"}
        for name in ("lance", "cudf"):
            if sim and name == "cudf":
                mods[name], why[name] = None, "cuDF: CUDA simulator"
            else:
                mods[name], why[name] = _import(name)
            res["meta"][name] = getattr(mods[name], "__version__", "?") if mods[name] else why[name]
            if why[name]:
                res["not_run"].append(f"rows needing {name}: {why[name]}")
        t0 = time.perf_counter()
        print("end to end:", flush=True)
        res["e2e"], res["ratios"] = run_e2e(args, dev, mods, why, res["meta"], lambda rows, ratios: save({"e2e": rows, "ratios": ratios}))
        print(f"end to end done in {time.perf_counter() - t0:.0f} s", flush=True)
        for r in res["ratios"]:
            if "ratio" in r:
                tgt = "" if r["target"] is None else f"  (target {'>' if r['target'] == TARGET_VS_CUDF_PARQUET else '>='} {r['target']:g}x: {'met' if r['met'] else 'NOT met'})"
                print(f"  {r['dataset']:10s} {r['theirs']} / {r['ours']}: {r['ratio']:.2f}x{tgt}", flush=True)
    if writes:
        print(f"results: {write_results(args.results_dir or RESULTS, res)}")
    failed = [r["kernel"] for r in res["kernels"] if "error" in r] + [f"{r['dataset']}/{r['engine']}" for r in res["e2e"] if "error" in r]
    failed += [f"{name}/phases" for name, ph in res["meta"].get("phases", {}).items() if "error" in ph]
    failed += [f"{name}/check" for name, check in res["meta"].get("checks", {}).items() if check.startswith("**no**")]
    if failed:
        print(f"bench_gpu: {len(failed)} case(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
