# SPDX-License-Identifier: Apache-2.0
"""A fresh process's ``import`` alone, and ``import`` + ``dataset(path).count_rows()`` (metadata
only, no kernel), pylance against two lance_gpu checkouts, rounds interleaved: median wall and
CPU seconds, and whether numba got loaded (issue 24, startup).

    python3 benchmarks/bench_import.py PATH [CHECKOUT_A] [CHECKOUT_B]
"""
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
what, path = sys.argv[1], sys.argv[2]
lib = __import__("lance" if what.startswith("lance:") else "lance_gpu")
if what.endswith("count"):
    lib.dataset(path).count_rows()
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": ru.ru_utime + ru.ru_stime, "numba": "numba" in sys.modules}))
"""
path = sys.argv[1]
here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
a = sys.argv[2] if len(sys.argv) > 2 else here
b = sys.argv[3] if len(sys.argv) > 3 else here
cases = {"pylance": (here, "lance:"), "A " + os.path.basename(a): (a, "gpu:"), "B " + os.path.basename(b): (b, "gpu:")}
res = {}
for op in ("import", "count"):
    for _round in range(5):
        for name, (code, tag) in cases.items():
            env = dict(os.environ, PYTHONPATH=code)
            # (run in ``code``: ``python -c`` puts the working directory ahead of PYTHONPATH)
            out = subprocess.run([sys.executable, "-c", CHILD, tag + op, path], env=env, capture_output=True, text=True,
                                 check=True, cwd=code)
            res.setdefault((op, name), []).append(json.loads(out.stdout))
for (op, name), v in res.items():
    print(f"{op:6s} {name:8s} wall {statistics.median(x['wall'] for x in v):.2f} s cpu {statistics.median(x['cpu'] for x in v):.2f} s numba loaded {v[0]['numba']}")
print("load", os.getloadavg())
