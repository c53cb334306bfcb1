# SPDX-License-Identifier: Apache-2.0
"""First read in fresh processes (issue 14 item 3), rounds interleaved, on any pylance-written datasets.

Each round, per dataset: lance_gpu with an empty ``LANCE_GPU_CACHE_DIR`` ("cold"; the child then
waits, untimed, for its compile worker), lance_gpu again on the cache that run left ("warm"), and
pylance; the load average is taken beside each figure.  The child is ``bench_read.CHILD_FIRST``
(interpreter start to the returned table, imports included).  Prints one JSON line per run.

``--write-bytecode``: children run with ``PYTHONDONTWRITEBYTECODE`` empty, after one untimed ``import lance_gpu``
that writes the packages' ``__pycache__`` (as pip's install-time compile, or the README install command's demo
run, leave it).  Without it a machine-wide ``PYTHONDONTWRITEBYTECODE=1`` (as on the shared benchmark box) makes
every lance_gpu process compile its ~100 source files (0.3-0.6 s), which no installed package pays.

``--after-compile``: per round and dataset, ``python -m lance_gpu compile`` (untimed) fills the fresh cache
first, then lance_gpu ("compiled": the first read after the README's install command) and pylance are timed.

    PYTHONPATH=$PWD python3 benchmarks/bench_first_read.py --rounds 3 issue=PATH second=PATH
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_read import CHILD_FIRST, child  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write-bytecode", action="store_true", help="children use (and first write) __pycache__")
    ap.add_argument("--after-compile", action="store_true", help="time lance_gpu after `lance-gpu compile` (not cold/warm)")
    ap.add_argument("datasets", nargs="+", help="name=path of a pylance-written dataset")
    args = ap.parse_args()
    base_env: dict[str, str] = {}
    if args.write_bytecode:
        base_env["PYTHONDONTWRITEBYTECODE"] = ""
        child("import json, lance_gpu, lance; print(json.dumps({}))", env=base_env)
    for rnd in range(args.rounds):
        for spec in args.datasets:
            name, path = spec.split("=", 1)
            with tempfile.TemporaryDirectory() as cache:
                env = {**base_env, "LANCE_GPU_CACHE_DIR": cache}
                kinds = (("cold", "lance_gpu", env), ("warm", "lance_gpu", env), ("pylance", "lance", base_env))
                if args.after_compile:
                    subprocess.run([sys.executable, "-m", "lance_gpu", "compile", "--quiet"], check=True, stdout=subprocess.DEVNULL,
                                   env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent), **env))
                    kinds = (("compiled", "lance_gpu", env), ("pylance", "lance", base_env))
                for kind, engine, e in kinds:
                    load = os.getloadavg()[0]
                    got = child(CHILD_FIRST, engine, path, env=e)
                    print(json.dumps({"round": rnd, "shape": name, "kind": kind, "seconds": round(got["seconds"], 3),
                                      "twin_calls": got.get("twin_calls"), "load": round(load, 2),
                                      "load_after": round(os.getloadavg()[0], 2)}), flush=True)


if __name__ == "__main__":
    main()
