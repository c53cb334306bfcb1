# SPDX-License-Identifier: Apache-2.0
"""Read benchmark: lance-gpu (CPU path) against pylance and pyarrow-Parquet, in one run.

Shapes (written once under benchmarks/data/ by pylance and pyarrow-Parquet, reused):

* ``issue``: issue 14's table, 4 fragments: int64 ``id``, float64 ``x`` (uniform in [0, 1)), a string ``s``
  with 1000 distinct values, a 32-wide float32 ``emb``;
* ``small_frags``: the same columns without ``emb`` in many small fragments;
* ``wide``: 200 columns (int64 / float64 / short strings, alternating) plus a float64 ``x``;
* ``long_strings``: int64 ``id``, float64 ``x``, a ~2 KB random-text ``doc``;
* ``mixed`` and ``embeddings``: the earlier benchmark's tables (5M mixed rows, 500k x 128 float32;
  :func:`make_data`, which bench_write, bench_spark and bench_gpu also use).

Cases, each measured for every engine in the same run (best of ``--repeat`` after one warm-up per
engine; all engines in one fresh process per shape, interleaved repeat by repeat so that they share
the machine's load; ``--cases`` runs a subset of the timed cases only):

* ``scan``: ``to_table()``; ``take``: 10k random rows (Parquet: read + take);
* ``batches8k`` / ``batches64k``: ``to_batches(batch_size)`` consumed (Parquet: ``iter_batches``);
* ``filter_0.1%`` ... ``filter_50%``: ``to_table(columns=..., filter="x < q")`` keeping that share
  (``value`` on mixed, ``id < q * rows`` on embeddings; Parquet: ``read_table(columns, filters)``);
* ``count_1%`` / ``count_50%``: ``count_rows("x < q")`` (Parquet: the filtered read of the filter column);
* ``first_read``: seconds from interpreter start (imports included) to the end of the first
  ``to_table()`` in a fresh process: lance_gpu with an empty kernel cache (numpy twins stand in
  while the background worker compiles; the process waits for it, untimed, before exiting), then
  with the cache that run left, and pylance;
* ``memory:batches`` / ``memory:scan``: peak RSS growth of one streaming pass of
  ``to_batches(65536)`` (against the largest batch) and of one ``to_table()``.

``--quick`` shrinks every shape (a smoke run of a few minutes on 2 cores).  Output: a table on stdout
and ``benchmarks/results/read_cpu[_quick].{md,json}``.  Ratios are the other engine's time / ours
(above 1: lance_gpu is faster).  Timings are never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
RESULTS = HERE / "results"

KEEP = {"0.1%": 0.001, "1%": 0.01, "10%": 0.1, "50%": 0.5}


def shape_sizes(quick: bool, rows: int, emb_rows: int) -> dict[str, dict]:
    """Sizes of every shape (rows, fragments, ...), full or ``--quick``."""
    if quick:
        return {
            "issue": {"rows": 100_000, "frags": 4},
            "small_frags": {"rows": 2_000, "frags": 50},
            "wide": {"rows": 10_000, "cols": 100},
            "long_strings": {"rows": 5_000, "len": 2048},
            "mixed": {"rows": 200_000},
            "embeddings": {"rows": 20_000},
        }
    return {
        "issue": {"rows": 1_000_000, "frags": 4},
        "small_frags": {"rows": 5_000, "frags": 200},
        "wide": {"rows": 50_000, "cols": 200},
        "long_strings": {"rows": 100_000, "len": 2048},
        "mixed": {"rows": rows},
        "embeddings": {"rows": emb_rows},
    }


def _tag(name: str, size: dict) -> str:
    return name + "_" + "_".join(f"{k}{v}" for k, v in sorted(size.items()))


def make_table(name: str, size: dict):
    """The pyarrow table of one shape (deterministic)."""
    import numpy as np
    import pyarrow as pa

    n = size["rows"] * size.get("frags", 1)
    rng = np.random.default_rng(0)
    if name in ("issue", "small_frags"):
        vals = np.array([f"value_{i:04d}_{'x' * (i % 17)}" for i in range(1000)])
        cols = {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "x": pa.array(rng.random(n)),
            "s": pa.array(vals[rng.integers(0, 1000, n)]),
        }
        if name == "issue":
            cols["emb"] = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 32, dtype=np.float32)), 32)
        return pa.table(cols)
    if name == "wide":
        cols = {"x": pa.array(rng.random(n))}
        words = np.array([f"w{i:03d}" for i in range(500)])
        for c in range(size["cols"]):
            kind = c % 3
            if kind == 0:
                cols[f"i{c}"] = pa.array(rng.integers(0, 1 << 20, n))
            elif kind == 1:
                cols[f"f{c}"] = pa.array(rng.random(n))
            else:
                cols[f"s{c}"] = pa.array(words[rng.integers(0, 500, n)])
        return pa.table(cols)
    if name == "long_strings":
        alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     .,", dtype=np.uint8)
        ln = size["len"]
        lens = rng.integers(ln // 2, ln * 3 // 2, n)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        body = alphabet[rng.integers(0, alphabet.size, int(offsets[-1]))]
        doc = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(body.tobytes())).cast(pa.string())
        return pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "x": pa.array(rng.random(n)), "doc": doc})
    raise ValueError(name)


def make_data(rows: int, emb_rows: int) -> None:
    """The earlier benchmark's two tables (also used by bench_write, bench_spark and bench_gpu)."""
    import lance
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    DATA.mkdir(parents=True, exist_ok=True)
    mixed = DATA / f"mixed_{rows}"
    if not (mixed.with_suffix(".lance")).exists():
        rng = np.random.default_rng(0)
        cats = np.array([f"category_{i:02d}" for i in range(20)])
        words = np.array(["alpha", "beta", "gamma", "delta", "omega", "lorem", "ipsum", "dolor", "sit", "amet", "quick", "brown", "fox"])
        text = [" ".join(r) for r in words[rng.integers(0, len(words), size=(rows, 5))]]
        tbl = pa.table(
            {
                "id": pa.array(np.arange(rows, dtype=np.int64)),
                "rand_int": pa.array(rng.integers(0, 1_000_000, rows)),
                "value": pa.array(rng.random(rows)),
                "category": pa.array(cats[rng.integers(0, 20, rows)]),
                "text": pa.array(text),
                "ts": pa.array((1_600_000_000_000_000 + rng.integers(0, 10**12, rows)).astype("datetime64[us]")),
                "flag": pa.array(rng.random(rows) < 0.5),
                "nullable_int": pa.array(rng.integers(0, 1000, rows).astype(np.int32), mask=rng.random(rows) < 0.1),
            }
        )
        lance.write_dataset(tbl, str(mixed.with_suffix(".lance")))
        pq.write_table(tbl, str(mixed.with_suffix(".parquet")))
    emb = DATA / f"embeddings_{emb_rows}"
    if not emb.with_suffix(".lance").exists():
        rng = np.random.default_rng(1)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(emb_rows * 128, dtype=np.float32)), 128)
        tbl = pa.table({"id": pa.array(np.arange(emb_rows, dtype=np.int64)), "vector": vec})
        lance.write_dataset(tbl, str(emb.with_suffix(".lance")))
        pq.write_table(tbl, str(emb.with_suffix(".parquet")))


def make_shape(name: str, size: dict) -> tuple[Path, Path]:
    """Write one shape with pylance and pyarrow-Parquet (once); return both paths."""
    import lance
    import pyarrow.parquet as pq

    if name in ("mixed", "embeddings"):  # written by make_data (main calls it first)
        base = DATA / f"{name}_{size['rows']}"
        return base.with_suffix(".lance"), base.with_suffix(".parquet")
    DATA.mkdir(parents=True, exist_ok=True)
    base = DATA / _tag(name, size)
    lpath, ppath = base.with_suffix(".lance"), base.with_suffix(".parquet")
    if not lpath.exists() or not ppath.exists():
        tbl = make_table(name, size)
        per_file = size["rows"] if "frags" in size else 1024 * 1024
        lance.write_dataset(tbl, str(lpath), max_rows_per_file=per_file, mode="overwrite")
        pq.write_table(tbl, str(ppath), row_group_size=min(per_file, 131072))
    return lpath, ppath


def filter_column(name: str, nrows: int) -> tuple[str, float]:
    """The column filters test (``col < share * scale``) and its scale: uniform floats in [0, 1) or ids."""
    return {"mixed": ("value", 1.0), "embeddings": ("id", float(nrows))}.get(name, ("x", 1.0))


def projection(name: str) -> list[str] | None:
    """Columns a filtered read returns (the filter is always on ``x``)."""
    return {
        "issue": ["id", "s", "emb"],
        "small_frags": ["id", "s"],
        "wide": None,
        "long_strings": ["id", "doc"],
        "mixed": ["id", "category", "text"],
        "embeddings": ["id", "vector"],
    }[name]


# All timed cases of every engine on one shape, in one fresh process, engines interleaved
# (each repeat runs every engine in turn, so all see the same machine load): prints a JSON
# line {engine: {case: best seconds}}.
CHILD = r"""
import json, sys, time, warnings
import numpy as np
warnings.simplefilter("ignore")
engines, path, nrows, repeat, cases, cols = sys.argv[1].split(","), sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5]), json.loads(sys.argv[6])
fcol, fscale = sys.argv[7], float(sys.argv[8])
paths = dict(zip(engines, path))
def thr(arg):
    v = float(arg) * fscale
    return int(v) if fcol == "id" else v
import pyarrow as pa, pyarrow.parquet as pq, pyarrow.dataset as pads
opener = {}
if "lance" in engines:
    import lance
    opener["lance"] = lambda: lance.dataset(paths["lance"])
if "lance_gpu" in engines:
    import lance_gpu
    opener["lance_gpu"] = lambda: lance_gpu.dataset(paths["lance_gpu"], device="cpu")
idx = np.sort(np.random.default_rng(7).choice(nrows, min(10_000, nrows), replace=False))
def consume(it):
    n = 0
    for b in it:
        n += b.num_rows
    return n
def run(engine, case):
    kind, _, arg = case.partition(":")
    if engine == "parquet":
        path = paths["parquet"]
        if kind == "scan":
            return pq.read_table(path)
        if kind == "take":
            return pq.read_table(path).take(pa.array(idx))
        if kind == "batches":
            return consume(pq.ParquetFile(path).iter_batches(batch_size=int(arg)))
        if kind == "filter":
            return pq.read_table(path, columns=cols, filters=[(fcol, "<", thr(arg))])
        if kind == "count":
            return pq.read_table(path, columns=[fcol], filters=[(fcol, "<", thr(arg))]).num_rows
    ds = opener[engine]()
    if kind == "scan":
        return ds.to_table()
    if kind == "take":
        return ds.take(idx)
    if kind == "batches":
        return consume(ds.to_batches(batch_size=int(arg)))
    if kind == "filter":
        return ds.to_table(columns=cols, filter=f"{fcol} < {thr(arg)}")
    if kind == "count":
        return ds.count_rows(filter=f"{fcol} < {thr(arg)}")
    raise ValueError(case)
import resource
def cpu_seconds():  # user + system time of every thread of this process
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
out = {e: {} for e in engines}
for case in cases:
    for e in engines:
        run(e, case)  # warm-up: compile caches, page cache
    times = {e: [] for e in engines}
    cpu = {e: [] for e in engines}
    for _ in range(repeat):
        for e in engines:
            c0 = cpu_seconds(); t0 = time.perf_counter(); r = run(e, case)
            times[e].append(time.perf_counter() - t0); cpu[e].append(cpu_seconds() - c0)
            del r
    for e in engines:
        out[e][case] = min(times[e])
        out[e]["cpu:" + case] = min(cpu[e])
print(json.dumps(out))
"""

# The first read of a fresh process: time from interpreter start, imports included.
CHILD_FIRST = r"""
import time
t0 = time.perf_counter()
import json, sys, warnings
warnings.simplefilter("ignore")
engine, path = sys.argv[1], sys.argv[2]
if engine == "lance":
    import lance
    t = lance.dataset(path).to_table()
else:
    import lance_gpu
    t = lance_gpu.dataset(path, device="cpu").to_table()
t1 = time.perf_counter()
twins = {}
if engine != "lance":  # untimed: let the background compile worker finish before the next process
    from cuda_kernels import _jitcache
    twins = _jitcache.twin_stats()
    _jitcache.wait_for_worker(900)
print(json.dumps({"seconds": t1 - t0, "rows": t.num_rows, "twin_calls": sum(twins.values())}))
"""

CHILD_MEM = r"""
import json, os, sys, threading, time, warnings
warnings.simplefilter("ignore")
engine, op, path = sys.argv[1], sys.argv[2], sys.argv[3]
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
PAGE = os.sysconf("SC_PAGE_SIZE")
def rss():  # current resident set (the high-water mark would keep the warm-up's peak)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE
peak = [0]
stop = threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.001)
if engine == "parquet":
    f = pq.ParquetFile(path)
    next(f.iter_batches(batch_size=1024))
    batches = lambda: pq.ParquetFile(path).iter_batches(batch_size=65536)
    table = lambda: pq.read_table(path)
else:
    if engine == "lance":
        import lance as mod
        ds = mod.dataset(path)
    else:
        import lance_gpu as mod
        ds = mod.dataset(path, device="cpu")
    # compile / warm on a tiny read first so that JIT memory is not counted
    next(iter(ds.to_batches(batch_size=1024)))
    ds.take([0])
    batches = lambda: ds.to_batches(batch_size=65536)
    table = ds.to_table
import gc
gc.collect()
base = rss()
peak[0] = base
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
if op == "scan":
    t = table(); decoded = t.nbytes
else:
    decoded = 0
    for b in batches():
        decoded = max(decoded, b.nbytes)
        peak[0] = max(peak[0], rss())
stop.set(); sampler.join()
peak[0] = max(peak[0], rss())
print(json.dumps({"peak_growth": peak[0] - base, "decoded": decoded}))
"""


def child(code: str, *args: object, env: dict | None = None, timeout: int = 3600) -> dict:
    """Run ``code`` in a fresh interpreter with ``args``; return the JSON of its last line."""
    full_env = dict(os.environ, PYTHONPATH=str(HERE.parent), **(env or {}))
    res = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=full_env, timeout=timeout, check=False)
    if res.returncode:
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


ENGINES = ("lance_gpu", "lance", "parquet")


def timed_cases(name: str) -> list[str]:
    cases = ["scan", "take", "batches:8192", "batches:65536"]
    cases += [f"filter:{q}" for q in KEEP.values()]
    cases += ["count:0.01", "count:0.5"]
    return cases


def case_label(case: str) -> str:
    kind, _, arg = case.partition(":")
    if kind == "batches":
        return f"batches{int(arg) // 1024}k"
    if kind in ("filter", "count"):
        share = {v: k for k, v in KEEP.items()}[float(arg)]
        return f"{kind}_{share}"
    return kind
def make_strings(rows: int) -> dict[str, Path]:
    """String-heavy datasets (per file version): ~40-character text with some non-ASCII
    words, and URLs; written once by pylance."""
    import numpy as np
    import pyarrow as pa

    import lance

    out = {}
    for version in ("2.0", "2.1", "2.2"):
        path = DATA / f"strings_{rows}_{version}.lance"
        out[version] = path
        if path.exists():
            continue
        rng = np.random.default_rng(2)
        words = np.array(["alpha", "beta", "gamma", "delta", "omega", "lorem", "ipsum", "dolor", "quick", "brown",
                          "naïve", "café", "日本語", "straße"])
        text = [" ".join(r) for r in words[rng.integers(0, len(words), size=(rows, 6))]]
        urls = [f"https://example.com/{int(a)}/item/{int(b)}" for a, b in rng.integers(0, 10**9, size=(rows, 2))]
        tbl = pa.table({"text": pa.array(text), "url": pa.array(urls)})
        lance.write_dataset(tbl, str(path), data_storage_version=version)
    return out


# Full scans of a string-heavy dataset, validated and not.  Validation now runs partly inside the
# decode loops (FSST), so "off" cannot be had by switching a function off in this tree: it is
# the tree of BASELINE_REV (the decoders before they validated anything) with its separate
# validator replaced by a no-op; "old" is that tree with its validator on (the cost before
# fusion).  Each mode runs in its own processes, interleaved on, off, old, for ``rounds`` rounds
# of ``repeat`` scans after one warm-up; the figure is the median of every scan of a mode.
BASELINE_REV = "222682d"

CHILD_VALIDATION = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
path, repeat, off = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "off"
import lance_gpu
import lance_gpu.file.validate as validate
if off:
    validate.check_variable = lambda offsets, data, utf8: None
def scan():
    t0 = time.perf_counter(); tbl = lance_gpu.dataset(path, device="cpu").to_table(); dt = time.perf_counter() - t0
    return dt, tbl.nbytes
scan()
times = [scan()[0] for _ in range(repeat)]
print(json.dumps({"times": times, "bytes": scan()[1]}))
"""


def baseline_tree(rev: str) -> Path:
    """``lance_gpu`` and ``cuda_kernels`` as of ``rev``, exported once under benchmarks/data/."""
    out = DATA / f"ref_{rev}"
    if not (out / "lance_gpu").exists():
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", rev, "lance_gpu", "cuda_kernels"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def child_at(root: Path, code: str, *args: object, timeout: int = 3600) -> dict:
    """:func:`child` with ``root`` first on PYTHONPATH (another tree of the packages)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    # run in ``root``: ``-c`` puts the working directory first on the path, ahead of PYTHONPATH,
    # so run from a checkout it would measure that checkout's packages instead
    res = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env,
                         timeout=timeout, check=False, cwd=str(root))
    if res.returncode:
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def validation_main(rows: int, repeat: int, rounds: int = 4) -> None:
    """Cost of validating decoded strings (offsets and UTF-8) on a string-heavy scan."""
    paths = make_strings(rows)
    base = baseline_tree(BASELINE_REV)
    results = []
    loads = [Path("/proc/loadavg").read_text().split()[0]]
    for version, path in paths.items():
        times: dict[str, list[float]] = {"on": [], "off": [], "old": []}
        nbytes = 0
        for _ in range(rounds):
            r = child_at(HERE.parent, CHILD_VALIDATION, path, repeat, "on")
            times["on"] += r["times"]
            nbytes = r["bytes"]
            times["off"] += child_at(base, CHILD_VALIDATION, path, repeat, "off")["times"]
            times["old"] += child_at(base, CHILD_VALIDATION, path, repeat, "on")["times"]
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        best = {k: min(v) for k, v in times.items()}
        loads.append(Path("/proc/loadavg").read_text().split()[0])
        results.append({"version": version, "rows": rows, "decoded_mb": nbytes / 1e6, "validated_s": med["on"],
                        "unvalidated_s": med["off"], "old_validated_s": med["old"],
                        "overhead_pct": 100 * (med["on"] - med["off"]) / med["off"],
                        "old_overhead_pct": 100 * (med["old"] - med["off"]) / med["off"],
                        "best_s": best, "best_overhead_pct": 100 * (best["on"] - best["off"]) / best["off"],
                        "best_old_overhead_pct": 100 * (best["old"] - best["off"]) / best["off"], "times": times})
    meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d"), "rows": rows, "repeat": repeat, "rounds": rounds,
            "baseline": BASELINE_REV, "loadavg_1min": loads}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "read_validation.json").write_text(json.dumps({"meta": meta, "rows": results}, indent=2))
    lines = [f"# Cost of string validation on a full scan (CPU), {meta['date']}, {meta['cpus']} cores, {meta['machine']}", "",
             f"{rows} rows of ~45-character text (some non-ASCII words) and ~45-character URLs, written by pylance;",
             f"median of {rounds} x {repeat} scans per mode, modes in separate processes interleaved (on, off, old).",
             f"unvalidated: the decoders of {BASELINE_REV} (before any validation in them) with the validator off;",
             f"before fusion: {BASELINE_REV} with its separate validator on.  1-min loadavg at start and after each version: {', '.join(loads)}.", "",
             "| file version | decoded MB | validated s | unvalidated s | overhead | before fusion s | overhead before | best-of overhead (before) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['version']} | {r['decoded_mb']:.0f} | {r['validated_s']:.3f} | {r['unvalidated_s']:.3f} | "
                     f"{r['overhead_pct']:+.1f}% | {r['old_validated_s']:.3f} | {r['old_overhead_pct']:+.1f}% | "
                     f"{r['best_overhead_pct']:+.1f}% ({r['best_old_overhead_pct']:+.1f}%) |")
    (RESULTS / "read_validation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5_000_000, help="rows of the mixed shape")
    ap.add_argument("--emb-rows", type=int, default=500_000, help="rows of the embeddings shape")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run of a few minutes")
    ap.add_argument("--shapes", default="issue,small_frags,wide,long_strings,mixed,embeddings")
    ap.add_argument("--first-read-runs", type=int, default=3, help="fresh processes per first-read figure")
    ap.add_argument("--out", default=None, help="results file stem (default read_cpu, read_cpu_quick with --quick)")
    ap.add_argument("--validation", action="store_true", help="only the string-validation cost case (read_validation.md)")
    ap.add_argument("--no-parquet", action="store_true", help="time lance_gpu and pylance only")
    ap.add_argument("--cases", default=None,
                    help="only these timed cases, by label (e.g. scan,batches64k,filter_10%%); skips memory and first read")
    args = ap.parse_args()
    args.loadavg_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    if args.validation:
        validation_main(2_000_000 if args.rows == 5_000_000 else args.rows, max(args.repeat, 5))
        return
    sizes = shape_sizes(args.quick, args.rows, args.emb_rows)
    shapes = [s for s in args.shapes.split(",") if s]
    if "mixed" in shapes or "embeddings" in shapes:
        make_data(sizes["mixed"]["rows"], sizes["embeddings"]["rows"])
    rows = []
    for name in shapes:
        size = sizes[name]
        lpath, ppath = make_shape(name, size)
        nrows = size["rows"] * size.get("frags", 1)
        fcol, fscale = filter_column(name, nrows)
        cases = timed_cases(name)
        if args.cases:
            wanted = set(args.cases.split(","))
            cases = [c for c in cases if case_label(c) in wanted]
        cols = json.dumps(projection(name))
        engines = ENGINES if not args.no_parquet else ENGINES[:2]
        paths = ",".join(str(ppath if engine == "parquet" else lpath) for engine in engines)
        got = child(CHILD, ",".join(engines), paths, nrows, args.repeat, json.dumps(cases), cols, fcol, fscale)
        got.setdefault("parquet", {})
        print(f"  {name} timed cases: done", file=sys.stderr, flush=True)
        for case in cases:
            ours, pyl, par = (got[e].get(case, float("nan")) for e in ENGINES)
            cpu_ours, cpu_pyl = (got[e]["cpu:" + case] for e in ("lance_gpu", "lance"))
            rows.append({"shape": name, "case": case_label(case), "lance_gpu_s": ours, "lance_s": pyl, "parquet_s": par,
                         "vs_pylance": pyl / ours, "vs_parquet": par / ours, "lance_gpu_cpu_s": cpu_ours,
                         "lance_cpu_s": cpu_pyl, "cpu_vs_pylance": cpu_pyl / max(cpu_ours, 1e-9)})
        for engine in ENGINES if not args.cases else ():
            for op in ("batches", "scan"):
                m = child(CHILD_MEM, engine, op, ppath if engine == "parquet" else lpath)
                rows.append({"shape": name, "case": f"memory:{op}", "engine": engine,
                             "peak_growth_mb": m["peak_growth"] / 1e6, "decoded_mb": m["decoded"] / 1e6,
                             "ratio": m["peak_growth"] / max(m["decoded"], 1)})
        if name in ("issue", "wide") and not args.cases:
            rows.append(first_read_row(name, lpath, args.first_read_runs))
        print(f"{name}: done", file=sys.stderr, flush=True)
    write_results(rows, args, sizes, shapes)


def first_read_row(name: str, lpath: Path, runs: int) -> dict:
    """First ``to_table()`` in fresh processes: empty kernel cache, warm cache, pylance (medians)."""
    cold, warm, pyl = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache:
            env = {"LANCE_GPU_CACHE_DIR": cache}
            cold.append(child(CHILD_FIRST, "lance_gpu", lpath, env=env)["seconds"])
            warm.append(child(CHILD_FIRST, "lance_gpu", lpath, env=env)["seconds"])
        pyl.append(child(CHILD_FIRST, "lance", lpath)["seconds"])
    med = lambda xs: sorted(xs)[len(xs) // 2]
    return {"shape": name, "case": "first_read", "cold_s": med(cold), "warm_s": med(warm), "lance_s": med(pyl),
            "all_cold_s": cold, "all_warm_s": warm, "all_lance_s": pyl,
            "bound_s": max(1.5, 2 * med(pyl))}


def write_results(rows: list[dict], args: argparse.Namespace, sizes: dict, shapes: list[str]) -> None:
    import lance
    import numba
    import pyarrow

    meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "loadavg": args.loadavg_start + " -> " + " ".join(f"{x:.2f}" for x in os.getloadavg()), "host": platform.node(), "processor": platform.processor(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": args.quick, "repeat": args.repeat,
            "sizes": {s: sizes[s] for s in shapes}, "pylance": lance.__version__, "pyarrow": pyarrow.__version__,
            "numba": numba.__version__}
    stem = args.out or ("read_cpu_quick" if args.quick else "read_cpu")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    title = (f"# Read benchmark (CPU){' --quick' if args.quick else ''}, {meta['date']}, {meta['cpus']} cores, "
             f"{meta['machine']}, Python {meta['python']}, pylance {meta['pylance']}, pyarrow {meta['pyarrow']}, numba {meta['numba']}")
    lines = [title, "",
             "Shared machine: other jobs ran at the same time, so figures are noisy; ratios are within this one run.",
             f"Load average (1/5/15 min) at start -> end: {meta['loadavg']}.", "",
             "Sizes: " + "; ".join(f"{s} {sizes[s]}" for s in shapes), "",
             f"Best of {args.repeat} interleaved repeats (every engine in turn in one process), seconds; ratio = other "
             "engine's time / lance_gpu's time (above 1: lance_gpu is faster).", "",
             "CPU s: user + system seconds of the process (every thread) during the best run of each engine; on a loaded "
             "machine the CPU ratio shows the work each engine does, the wall ratio also how many threads it has to win "
             "cores from other jobs.", "",
             "| shape | case | lance_gpu s | pylance s | parquet s | vs pylance | vs parquet | lance_gpu CPU s | pylance CPU s | CPU vs pylance |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "vs_pylance" in r:
            par = "-" if r["parquet_s"] != r["parquet_s"] else f"{r['parquet_s']:.3f}"  # NaN: not timed
            vs_par = "-" if r["parquet_s"] != r["parquet_s"] else f"{r['vs_parquet']:.2f}x"
            lines.append(f"| {r['shape']} | {r['case']} | {r['lance_gpu_s']:.3f} | {r['lance_s']:.3f} | {par} | "
                         f"{r['vs_pylance']:.2f}x | {vs_par} | {r['lance_gpu_cpu_s']:.3f} | {r['lance_cpu_s']:.3f} | "
                         f"{r['cpu_vs_pylance']:.2f}x |")
    first_note = ("First `to_table()` in a fresh process, seconds from interpreter start (imports included); median of "
                  "fresh processes. Empty cache = a new `LANCE_GPU_CACHE_DIR`; warm = the next process on that cache. "
                  "Bound = max(1.5 s, 2 x pylance).")
    lines += ["", first_note, "",
              "| shape | lance_gpu empty cache | lance_gpu warm cache | pylance | bound |", "|---|---|---|---|---|"]
    for r in rows:
        if r["case"] == "first_read":
            lines.append(f"| {r['shape']} | {r['cold_s']:.2f} | {r['warm_s']:.2f} | {r['lance_s']:.2f} | {r['bound_s']:.2f} |")
    mem_note = ("Peak RSS growth (sampled every ms) of one streaming pass of to_batches(65536) (against the largest "
                "batch) and of one full read (against the decoded table).")
    lines += ["", mem_note, "",
              "| shape | case | engine | peak growth MB | decoded MB | ratio |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "peak_growth_mb" in r:
            lines.append(f"| {r['shape']} | {r['case']} | {r['engine']} | {r['peak_growth_mb']:.0f} | {r['decoded_mb']:.1f} | {r['ratio']:.2f} |")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


TAKE_CHILD = r"""
import json, sys, time
import numpy as np
import lance, lance_gpu
path, ntakes, batch, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
engines = {"lance_gpu": lance_gpu.dataset(path, device="cpu"), "lance": lance.dataset(path)}
n = engines["lance"].count_rows()
rng = np.random.default_rng(3)
sets = [np.sort(rng.choice(n, batch, replace=False)) for _ in range(ntakes)]
for ds in engines.values():
    ds.take(sets[0])  # compile caches
assert engines["lance_gpu"].take(sets[1]).equals(engines["lance"].take(sets[1]))
best = {k: float("inf") for k in engines}
for _ in range(rounds):  # interleaved, so both engines see the same machine load
    for name, ds in engines.items():
        t0 = time.perf_counter()
        for s in sets:
            ds.take(s)
        best[name] = min(best[name], time.perf_counter() - t0)
print(json.dumps(best))
"""


def take_batches(rows: int = 1_000_000, takes: int = 200, batch: int = 1024, rounds: int = 3) -> None:
    """A training loop's shuffled batches: ``takes`` takes of ``batch`` sorted random rows of
    a pylance-written ``rows`` x (int64 label, 128-float32 embedding, string) dataset, both
    engines in one process; best of ``rounds``.  Writes benchmarks/results/take_cpu.md."""
    import numpy as np
    import pyarrow as pa

    import lance

    path = DATA / f"take_{rows}.lance"
    if not path.exists():
        rng = np.random.default_rng(0)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 128, dtype=np.float32)), 128)
        text = pa.array([f"item-{i}-{'x' * (i % 17)}" for i in range(rows)])
        lance.write_dataset(pa.table({"label": pa.array(rng.integers(0, 1000, rows)), "emb": vec, "s": text}), str(path))
    load = os.getloadavg()
    best = child(TAKE_CHILD, path, takes, batch, rounds)
    per = {k: 1000 * v / takes for k, v in best.items()}
    lines = [f"# Take benchmark (CPU), {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}", "",
             f"{rows} rows x (int64 label, fixed_size_list<float32, 128>, string), written by pylance; {takes} takes of {batch} sorted",
             f"random indices (all columns), best of {rounds} interleaved rounds, ms per take.", "",
             "| lance_gpu ms | pylance ms | vs pylance |", "|---|---|---|",
             f"| {per['lance_gpu']:.2f} | {per['lance']:.2f} | {per['lance'] / per['lance_gpu']:.2f}x |"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "take_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if "--take-batches" in sys.argv:
        take_batches()
    else:
        main()
