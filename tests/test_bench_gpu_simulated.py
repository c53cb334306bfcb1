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

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_gpu.py"


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600)


def test_kernel_cases_match_cpu_under_simulator() -> None:
    proc = _run(["--simulate", "--kernels-only", "--quick"], NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "FAILED" not in proc.stdout


def test_without_a_gpu_exits_2_with_a_reason() -> None:
    from lance_gpu._device import gpu_unusable_reason

    if gpu_unusable_reason() is None:
        pytest.skip("a usable GPU is present: the benchmark would run")
    proc = _run(["--quick"], NUMBA_ENABLE_CUDASIM="0")
    assert proc.returncode == 2
    assert "no usable GPU" in proc.stderr + proc.stdout
