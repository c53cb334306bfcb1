# SPDX-License-Identifier: Apache-2.0
"""Cost against a dataset's history (issue 24): datasets built by many small appends, lance_gpu
against pylance in one run.

Shapes: ``--shapes 100,1000,tasks1000`` (default; ``--big`` adds 10000): a dataset built by N
appends of 16 rows (N fragments, N versions), and ``tasksN``, the shape a Spark job leaves: N
write tasks of 16 rows each writing one fragment (``lance.fragment.write_fragments``), committed
once by the driver (N fragments, one version).  Columns ``id`` (int64), ``s`` (a string of 97
distinct values), ``x`` (float64) and ``emb`` (fixed_size_list<float32, 8>), written once by
pylance under ``benchmarks/data/scale/`` (git-ignored) and copied for each timed operation that
writes.

Operations (each opens the dataset inside the timed call, as a fresh process would):

* ``append``: one more append of 16 rows (each engine on its own copy, so its history grows by
  one version per round);
* ``open+count_rows``, ``open+scan`` (``to_table()``), ``open+filter`` (``s = 's7'``),
  ``open+take100`` (100 random row positions), ``open+to_batches`` (every batch consumed),
  ``open+versions`` (``versions()``);
* ``delete1`` (``delete("id = K")``, K = 1234 or, on smaller datasets, the middle row),
  ``update4`` (``update({"x": "x + 1"})`` of the 4 rows from K), ``merge_insert4`` (an upsert
  keyed on ``id`` of 4 rows: 2 of them from K, 2 new) and ``compact``
  (``optimize.compact_files()``), each on a fresh copy (the copy is not timed, and is
  written back by an untimed ``os.sync()``: lance_gpu's commit fsyncs the files it adds, and
  on ext4 that journal commit would otherwise also write back the whole copy just made --
  setup cost, not the operation's; pylance does not fsync at all).

Shape ``10`` (10 appends: ten tiny fragments) is the fresh dataset of issue 24's "small
operations at pylance's latency".

One child process per shape imports both libraries, warms each operation up once per engine,
then alternates the engines for ``--repeat`` rounds (the order flips every round), so both see
the same machine load; the figure is the median of the rounds (best and all rounds in the JSON).
ratio = pylance's time / lance_gpu's time (above 1: lance_gpu faster).  The load average is
recorded before and after each shape.  Results are checked equal between the engines (counts,
scanned rows, versions).

    python3 benchmarks/bench_scale.py [--shapes 100,1000] [--big] [--repeat 5] [--out scale_cpu]
    python3 benchmarks/bench_scale.py --code /path/to/other/checkout --out scale_cpu_before

``--code`` puts another checkout's ``lance_gpu`` on the child's path (to measure the code before
a change with this same script).  Output: a table on stdout and ``benchmarks/results/{out}.md``
and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DATA = HERE / "data" / "scale"
ROWS_PER_APPEND = 16

OPS = ("append", "open+count_rows", "open+scan", "open+filter", "open+take100", "open+to_batches",
       "open+versions", "delete1", "update4", "merge_insert4", "compact")

CHILD = r"""
import json, os, shutil, sys, tempfile, time, warnings
warnings.simplefilter("ignore")
base, repeat, workdir, ops = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
import numpy as np, pyarrow as pa
import lance
import lance_gpu

LIBS = {"lance": lance, "lance_gpu": lance_gpu}
TOTAL = lance.dataset(base).count_rows()
K = min(1234, TOTAL // 2)
rng = np.random.default_rng(7)
IDX = np.sort(rng.choice(TOTAL, 100, replace=False)).tolist()

def batch(start):
    ids = np.arange(start, start + 16, dtype=np.int64)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(16 * 8, np.float32)), 8)
    return pa.table({"id": ids, "s": pa.array([f"s{i % 97}" for i in ids]), "x": ids * 0.5, "emb": emb})

# per-engine copies for the appends (the history grows by one version per call)
own = {}
for engine in LIBS:
    own[engine] = os.path.join(workdir, f"append_{engine}")
    shutil.copytree(base, own[engine])
counter = {"n": 10_000_000}

def fresh():
    d = tempfile.mkdtemp(dir=workdir)
    shutil.copytree(base, d + "/ds")
    os.sync()  # untimed: the copy's dirty pages are not the operation's to flush (see the docstring)
    return d

def run(engine, op):
    lib = LIBS[engine]
    if op == "append":
        counter["n"] += 16
        tbl = batch(counter["n"])
        t0 = time.perf_counter()
        lib.write_dataset(tbl, own[engine], mode="append")
        return time.perf_counter() - t0, None
    if op in ("delete1", "update4", "merge_insert4", "compact"):
        d = fresh()
        if op == "merge_insert4":
            src = batch(K).slice(0, 2)
            src = pa.concat_tables([src, batch(10**8).slice(0, 2)])
        t0 = time.perf_counter()
        ds = lib.dataset(d + "/ds")
        if op == "delete1":
            ds.delete(f"id = {K}")
        elif op == "update4":
            ds.update({"x": "x + 1"}, where=f"id >= {K} and id < {K + 4}")
        elif op == "merge_insert4":
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
        else:
            ds.optimize.compact_files()
        dt = time.perf_counter() - t0
        after = lance.dataset(d + "/ds")
        out = (after.count_rows(), after.to_table(filter=f"id >= {K} and id < {K + 4}").sort_by("id").to_pylist())
        shutil.rmtree(d)
        return dt, out
    t0 = time.perf_counter()
    ds = lib.dataset(base)
    if op == "open+count_rows":
        out = ds.count_rows()
    elif op == "open+scan":
        out = ds.to_table().num_rows
    elif op == "open+filter":
        out = ds.to_table(filter="s = 's7'").num_rows
    elif op == "open+take100":
        out = ds.take(IDX).column("id").to_pylist()
    elif op == "open+to_batches":
        out = sum(b.num_rows for b in ds.to_batches())
    elif op == "open+versions":
        vs = ds.versions()
        out = [(v["version"], v["metadata"]) for v in vs]
    else:
        raise ValueError(op)
    return time.perf_counter() - t0, out

res = {}
for op in ops:
    times = {"lance": [], "lance_gpu": []}
    outs = {}
    for engine in times:
        outs[engine] = run(engine, op)[1]  # warm-up
    assert outs["lance"] == outs["lance_gpu"], (op, str(outs)[:2000])
    for r in range(repeat):
        for engine in (("lance", "lance_gpu") if r % 2 == 0 else ("lance_gpu", "lance")):
            times[engine].append(run(engine, op)[0])
    res[op] = times
print(json.dumps(res))
"""


def _rows(i: int):
    import numpy as np
    import pyarrow as pa

    ids = np.arange(i * ROWS_PER_APPEND, (i + 1) * ROWS_PER_APPEND, dtype=np.int64)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(ids.size * 8, dtype=np.float32)), 8)
    return pa.table({"id": ids, "s": pa.array([f"s{j % 97}" for j in ids]), "x": ids * 0.5, "emb": emb})


def build(shape: str) -> str:
    """The dataset of a shape (written once by pylance, then reused): ``"N"``, N appends of 16
    rows; ``"tasksN"``, N one-fragment write tasks committed in one version."""
    path = DATA / (f"{shape}.lance" if shape.startswith("tasks") else f"appends_{shape}.lance")
    done = path / ".complete"
    if done.exists():
        return str(path)
    import lance

    shutil.rmtree(path, ignore_errors=True)
    if shape.startswith("tasks"):
        n = int(shape[len("tasks"):])
        fragments = [f for i in range(n) for f in lance.fragment.write_fragments(_rows(i), str(path))]
        op = lance.LanceOperation.Overwrite(_rows(0).schema, fragments)
        lance.LanceDataset.commit(str(path), op)
    else:
        for i in range(int(shape)):
            lance.write_dataset(_rows(i), str(path), mode="create" if i == 0 else "append")
    done.write_text("ok\n")
    return str(path)


def _shape_label(shape: str) -> str:
    if shape.startswith("tasks"):
        return f"{int(shape[len('tasks'):]):,} tasks, 1 commit"
    return f"{int(shape):,} appends"


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # pragma: no cover - not Linux
        return "n/a"


def _git_rev(code: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="100,1000,tasks1000", help="comma-separated shapes: N appends, or tasksN (N write tasks, one commit)")
    ap.add_argument("--big", action="store_true", help="also the 10,000-append dataset (slow to build)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {', '.join(OPS)}")
    ap.add_argument("--code", default=str(HERE.parent), help="checkout whose lance_gpu is measured")
    ap.add_argument("--out", default="scale_cpu", help="results file stem under benchmarks/results/")
    args = ap.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    for s in shapes:
        if not (s.isdigit() or (s.startswith("tasks") and s[len("tasks"):].isdigit())):
            ap.error(f"unknown shape {s!r}: N or tasksN")
    if args.big and "10000" not in shapes:
        shapes.append("10000")
    ops = [o for o in args.ops.split(",") if o]
    unknown = set(ops) - set(OPS)
    if unknown:
        ap.error(f"unknown ops {sorted(unknown)}")
    code = Path(args.code).resolve()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")]))
    DATA.mkdir(parents=True, exist_ok=True)
    results = []
    for n in shapes:
        t0 = time.perf_counter()
        base = build(n)
        print(f"dataset {n} ready ({time.perf_counter() - t0:.1f} s)", flush=True)
        work = DATA / f"work_{os.getpid()}_{n}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        load_before = _loadavg()
        try:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, base, str(args.repeat), str(work), ",".join(ops)],
                # run in the measured checkout: ``-c`` puts the working directory first on the
                # path, ahead of PYTHONPATH, so run from another checkout it measured that one
                check=True, capture_output=True, text=True, env=env, cwd=str(code),
            )
        except subprocess.CalledProcessError as exc:
            sys.stderr.write(exc.stderr[-4000:])
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
        load = f"{load_before} / {_loadavg()}"
        got = json.loads(out.stdout.strip().splitlines()[-1])
        for op in ops:
            row: dict = {"shape": n, "op": op, "loadavg": load}
            for engine, times in got[op].items():
                row[engine] = sorted(times)[len(times) // 2]
                row[f"{engine}_best"] = min(times)
                row[f"{engine}_all"] = times
            row["ratio"] = row["lance"] / row["lance_gpu"]
            results.append(row)
            print(f"{n:>9s} {op:18s} pylance {row['lance'] * 1e3:9.1f} ms  lance_gpu {row['lance_gpu'] * 1e3:9.1f} ms  "
                  f"ratio {row['ratio']:.2f}  (load {load})", flush=True)
    RESULTS.mkdir(exist_ok=True)
    import lance

    meta = {"shapes": shapes, "repeat": args.repeat, "machine": platform.platform(), "cpus": os.cpu_count(),
            "code": str(code), "rev": _git_rev(code), "pylance": lance.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (RESULTS / f"{args.out}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    lines = [
        f"# Cost against history: datasets of many small writes of {ROWS_PER_APPEND} rows (median of {args.repeat} interleaved rounds)",
        "",
        f"{meta['date']}, {meta['machine']}, {meta['cpus']} CPUs (a shared machine), pylance {meta['pylance']}, "
        f"lance_gpu at {meta['rev']}.",
        "ratio = pylance time / lance_gpu time (>1: lance_gpu faster); loadavg (1/5/15 min) before / after each shape.",
        "Produced by `python3 benchmarks/bench_scale.py`; the best and every round are in the JSON.",
        "",
        "| shape | operation | pylance ms | lance_gpu ms | ratio | loadavg before / after |",
        "| ---: | --- | ---: | ---: | ---: | --- |",
    ]
    lines += [f"| {_shape_label(r['shape'])} | {r['op']} | {r['lance'] * 1e3:.1f} | {r['lance_gpu'] * 1e3:.1f} | {r['ratio']:.2f} | "
              f"{r['loadavg']} |" for r in results]
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
