"""CPU throughput of the primitives: ``python -m cuda_kernels._bench [--n 50_000_000]``.

Prints GB/s of *output* (and input where meaningful) with one thread and
with all numba threads.  Each case is run once to compile, then timed as
the best of a few runs.
"""

import argparse
import time

import numba
import numpy as np

from . import bitunpack, fsst, gather, levels, rle


def _best(fn, reps=3):
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _report(name, nbytes_out, fn):
    res = []
    nthreads = numba.get_num_threads()
    for threads in sorted({1, nthreads}):
        numba.set_num_threads(threads)
        sec = _best(fn)
        res.append(f"{threads} thr {nbytes_out / sec / 1e9:6.2f} GB/s ({sec * 1e3:7.1f} ms)")
    numba.set_num_threads(nthreads)
    print(f"{name:38s} " + " | ".join(res), flush=True)


def bench_unpack(n, rng):
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        t = np.dtype(dt).itemsize * 8
        for w in sorted({1, 3, t // 2, t - 1, t}):
            nb = n // 1024
            vals = (rng.integers(0, 2**63, 64 * 1024, dtype=np.uint64) >> np.uint64(64 - w)).astype(dt)
            block = bitunpack.pack_blocks(vals, w)
            words = np.tile(block, nb // 64 + 1)
            wpb = 1024 * w // t
            offs = np.arange(nb, dtype=np.int64) * wpb
            widths = np.full(nb, w, dtype=np.uint8)
            out = np.empty(nb * 1024, dtype=dt)
            _report(
                f"unpack_blocks u{t} W={w}",
                out.nbytes,
                lambda: bitunpack.unpack_blocks(words, offs, widths, out=out),  # noqa: B023 (called at once)
            )


def bench_fsst(n, rng):
    sl = rng.integers(1, 9, 256).astype(np.uint8)
    sym = rng.integers(0, 2**63, 256, dtype=np.uint64)
    nstr = n // 25
    codes_per = rng.integers(3, 12, nstr)
    offs = np.zeros(nstr + 1, np.int64)
    np.cumsum(codes_per, out=offs[1:])
    comp = rng.integers(0, 255, int(offs[-1])).astype(np.uint8)
    esc = rng.random(comp.size) < 0.03
    esc[offs[1:] - 1] = False
    comp[esc] = 255
    total = int(fsst.fsst_decoded_lengths(sym, sl, comp, offs).sum())
    _report(f"fsst_decode ({nstr} strings)", total, lambda: fsst.fsst_decode(sym, sl, comp, offs))


def bench_rle(n, rng):
    runs = rng.integers(1, 256, n // 128).astype(np.uint8)
    vals = rng.integers(0, 2**40, runs.size)
    total = int(runs.astype(np.int64).sum())
    out = np.empty(total, dtype=np.int64)
    _report("rle_expand i64 (runs 1..255)", out.nbytes, lambda: rle.rle_expand(vals, runs, out=out))


def bench_gather(n, rng):
    items = rng.random(1000)
    idx = rng.integers(0, 1000, n).astype(np.uint32)
    _report("gather_fixed f64 (1000 items)", n * 8, lambda: gather.gather_fixed(items, idx))
    words = [bytes(rng.integers(97, 123, rng.integers(1, 20)).astype(np.uint8)) for _ in range(1000)]
    item_offs = np.concatenate([[0], np.cumsum([len(w) for w in words])]).astype(np.int64)
    item_bytes = np.frombuffer(b"".join(words), np.uint8)
    idx2 = idx[: n // 5]
    total = int(np.diff(item_offs)[idx2].sum())
    _report("gather_binary (1000 items)", total, lambda: gather.gather_binary(item_offs, item_bytes, idx2))


def bench_levels(n, rng):
    lengths = rng.integers(0, 8, n // 4)
    valid = rng.random(lengths.size) > 0.05
    offsets = np.concatenate([[0], np.cumsum(np.where(valid, lengths, 0))])
    item_valid = rng.random(int(offsets[-1])) > 0.1
    layers = [(item_valid, None), (valid, offsets)]
    rav = levels.ravel_levels(layers, lengths.size)
    nlev = rav.num_levels
    _report(
        f"unravel list<int?> ({nlev} levels)",
        nlev * 4,
        lambda: levels.unravel_levels(rav.rep, rav.def_, rav.layer_kinds),
    )
    _report(f"ravel list<int?> ({nlev} levels)", nlev * 4, lambda: levels.ravel_levels(layers, lengths.size))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=50_000_000, help="values per case")
    ap.add_argument("--only", default="", help="comma list: unpack,fsst,rle,gather,levels")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    cases = {
        "unpack": bench_unpack,
        "fsst": bench_fsst,
        "rle": bench_rle,
        "gather": bench_gather,
        "levels": bench_levels,
    }
    only = [c for c in args.only.split(",") if c] or list(cases)
    print(f"numba threads: {numba.get_num_threads()}, n = {args.n}")
    for name in only:
        cases[name](args.n, rng)


if __name__ == "__main__":
    main()
