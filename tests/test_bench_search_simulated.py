# SPDX-License-Identifier: Apache-2.0
"""[CUDA simulator] ``benchmarks/bench_search.py --device gpu`` runs end to end at a tiny size
under the simulator (a subprocess: the simulator must be on before ``numba.cuda`` loads): the
GPU search gives pylance's exact ids and the IVF_PQ sweep reports a recall per point.  Without
a GPU and without the simulator, it exits 2 with one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_search.py"


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=900)


@pytest.mark.slow  # about half a minute: the simulator runs every GPU thread as a Python thread
def test_gpu_search_benchmark_under_simulator() -> None:
    pytest.importorskip("lance")
    proc = _run(["--device", "gpu", "--simulate", "--quick", "--rows", "600", "--dim", "8", "--rounds", "1",
                 "--partitions", "2", "--sub-vectors", "2", "--k", "5"], NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    exact = [r for r in rows if r.get("what") == "exact"]
    ivf = [r for r in rows if r.get("what") == "ivf_pq"]
    assert len(exact) == 2 and all(r["same_ids"] for r in exact), exact
    assert len(ivf) == 2 and all(0 <= p["recall"] <= 1 for r in ivf for p in r["sweep"]), ivf


def test_gpu_mode_without_a_gpu_exits_2() -> None:
    from lance_gpu._device import gpu_unusable_reason

    if gpu_unusable_reason() is None:
        pytest.skip("a usable GPU is present: the benchmark would run")
    proc = _run(["--device", "gpu", "--quick"], NUMBA_ENABLE_CUDASIM="0")
    assert proc.returncode == 2
    assert "no usable GPU" in proc.stderr
