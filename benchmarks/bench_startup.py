# SPDX-License-Identifier: Apache-2.0
"""A fresh process's ``import`` plus first full read of a table (issue 24, startup), lance_gpu
against pylance, rounds interleaved: wall seconds from interpreter start to the table and the
process's CPU seconds (user + system, all threads), which the shared machine's load changes
far less than the wall time.

Children run with the bytecode cache on (``PYTHONDONTWRITEBYTECODE`` empty and a private
``PYTHONPYCACHEPREFIX``, written by one untimed import first), as an installed package runs,
and on the user's kernel cache as it is (``lance-gpu compile`` run before, as the README's
install does).

    python3 benchmarks/bench_startup.py [--rounds 5] [--out startup_cpu] [--code CHECKOUT] name=PATH ...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
engine, path = sys.argv[1], sys.argv[2]
if engine == "lance":
    import lance as lib
else:
    import lance_gpu as lib
rows = lib.dataset(path).to_table().num_rows
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
numba_context = "numba.np.arraymath" in sys.modules
print(json.dumps({"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rows": rows, "numba_context": numba_context,
                  "numba": "numba" in sys.modules}))
"""


def _child(engine: str, path: str, env: dict[str, str], cwd: str) -> dict:
    """One fresh process; ``cwd``: the measured checkout (``python -c`` puts the working
    directory first on the path, ahead of PYTHONPATH)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, engine, path], check=True, capture_output=True, text=True, env=env,
                         cwd=cwd)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    got["process_wall"] = time.perf_counter() - t0  # interpreter start included
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="startup_cpu")
    ap.add_argument("--code", default=str(HERE.parent), help="checkout whose lance_gpu is measured")
    ap.add_argument("datasets", nargs="+", help="name=path of a pylance-written dataset")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as pycache:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="", PYTHONPYCACHEPREFIX=pycache,
                   PYTHONPATH=os.pathsep.join([str(Path(args.code).resolve()), os.environ.get("PYTHONPATH", "")]))
        code = str(Path(args.code).resolve())
        subprocess.run([sys.executable, "-c", "import lance_gpu, lance"], check=True, env=env, capture_output=True, cwd=code)
        rows = []
        for spec in args.datasets:
            name, path = spec.split("=", 1)
            for engine in ("lance_gpu", "lance"):
                _child(engine, path, env, code)  # warm the page cache
            got: dict[str, list[dict]] = {"lance": [], "lance_gpu": []}
            for r in range(args.rounds):
                for engine in (("lance", "lance_gpu") if r % 2 == 0 else ("lance_gpu", "lance")):
                    load = os.getloadavg()[0]
                    res = _child(engine, path, env, code)
                    res["load"] = load
                    got[engine].append(res)
            assert got["lance"][0]["rows"] == got["lance_gpu"][0]["rows"]
            med = {e: {k: sorted(x[k] for x in v)[len(v) // 2] for k in ("process_wall", "cpu")} for e, v in got.items()}
            loads = [x["load"] for v in got.values() for x in v]
            row = {"shape": name, "median": med, "rounds": got, "load_min": min(loads), "load_max": max(loads),
                   "numba_context": any(x["numba_context"] for x in got["lance_gpu"]),
                   "numba": any(x["numba"] for x in got["lance_gpu"])}
            rows.append(row)
            print(f"{name:12s} wall ours {med['lance_gpu']['process_wall']:.2f} s pylance {med['lance']['process_wall']:.2f} s | "
                  f"cpu ours {med['lance_gpu']['cpu']:.2f} s pylance {med['lance']['cpu']:.2f} s | load {min(loads):.1f}-{max(loads):.1f}"
                  f" | numba imported: {row['numba']}, its context set up: {row['numba_context']}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "# Fresh process: import + first full read (median of interleaved rounds)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs (shared machine), lance_gpu from {args.code}. "
        "wall = interpreter start to table; cpu = the process's user + system time. "
        "Produced by `python3 benchmarks/bench_startup.py`; every round in the JSON.",
        "",
        "| table | ours wall s | pylance wall s | ours cpu s | pylance cpu s | cpu ratio | load | numba imported | numba context set up |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for r in rows:
        m = r["median"]
        lines.append(f"| {r['shape']} | {m['lance_gpu']['process_wall']:.2f} | {m['lance']['process_wall']:.2f} | "
                     f"{m['lance_gpu']['cpu']:.2f} | {m['lance']['cpu']:.2f} | {m['lance']['cpu'] / m['lance_gpu']['cpu']:.2f} | "
                     f"{r['load_min']:.1f}-{r['load_max']:.1f} | {r['numba']} | {r['numba_context']} |")
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
