# SPDX-License-Identifier: Apache-2.0
"""[CUDA simulator] ``benchmarks/bench_gpu.py`` calls every kernel family the way the
kernels expect: each case runs once on tiny inputs under the simulator and is checked
against its CPU twin (a subprocess: the simulator must be on before ``numba.cuda`` loads).
Without a GPU and without the simulator, the benchmark exits 2 with one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from background_runs import Command, finished, runs_in_background

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_gpu.py"


def _command(args: list[str], **env: str) -> Command:
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return [sys.executable, str(BENCH), *args], full, str(ROOT)


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    argv, full, cwd = _command(args, **env)
    return subprocess.run(argv, cwd=cwd, env=full, capture_output=True, text=True, timeout=600)


@runs_in_background(lambda: _command(["--simulate", "--kernels-only", "--quick"], NUMBA_ENABLE_CUDASIM="1"))
def test_kernel_cases_match_cpu_under_simulator(request: pytest.FixtureRequest) -> None:
    """(Started when collection ends, beside the rest of the suite: tests/background_runs.py.)"""
    proc = finished(request.node.nodeid, request.function)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "FAILED" not in proc.stdout


def test_without_a_gpu_exits_2_with_a_reason() -> None:
    from lance_gpu._device import gpu_unusable_reason

    if gpu_unusable_reason() is None:
        pytest.skip("a usable GPU is present: the benchmark would run")
    proc = _run(["--quick"], NUMBA_ENABLE_CUDASIM="0")
    assert proc.returncode == 2
    assert "no usable GPU" in proc.stderr + proc.stdout


_PHASES = r"""
import sys, tempfile
import numpy as np, pyarrow as pa, lance
sys.path.insert(0, "benchmarks")
import bench_gpu
import lance_gpu._device as device_mod
from numba import cuda
from lance_gpu.gpu import memory_limit

device_mod.gpu_unusable_reason = lambda: None  # the simulator stands in for the device
uri = tempfile.mkdtemp() + "/phases.lance"
n = 3000
lance.write_dataset(pa.table({"id": np.arange(n), "s": [f"v{i % 97}" for i in range(n)]}), uri, max_rows_per_file=1000)
with memory_limit(1):  # one (fragment, field) per unit
    ph = bench_gpu.phases(uri, cuda.synchronize)
assert ph["rows"] == n and ph["units"] == 6, ph
assert ph["staged_mb"] > 0 and ph["stage_s"] > 0 and ph["decode_s"] > 0 and ph["wall_s"] > 0, ph
assert 0 <= ph["overlap_s"] <= ph["stage_s"] + ph["decode_s"], ph
print("phases ok", ph)
"""


def test_phase_breakdown_under_simulator() -> None:
    pytest.importorskip("lance")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-c", _PHASES], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "phases ok" in proc.stdout
