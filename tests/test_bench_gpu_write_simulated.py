# SPDX-License-Identifier: Apache-2.0
"""[CUDA simulator] ``benchmarks/bench_gpu_write.py`` runs end to end on tiny frames (a
subprocess: the simulator must be on before ``numba.cuda`` loads): the GPU-written datasets
read back as the frames, no page is left to the CPU encoder, sizes match pylance's within
5%.  Without a GPU and without ``--simulate`` it exits 2 with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_gpu_write.py"


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_benchmark_runs_under_the_simulator() -> None:
    pytest.importorskip("lance")
    proc = _run(["--simulate", "--rows", "300", "--emb-rows", "16", "--dim", "80", "--repeat", "1"], NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = {line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line[:1].isalpha()}
    assert set(rows) == {"mixed", "embeddings"}
    for row in rows.values():
        assert row["host_pages"] == {}
        assert row["gpu_bytes"] == row["cpu_bytes"]
        assert abs(row["size_vs_pylance"] - 1) < 0.05


def test_without_a_gpu_exits_2_with_a_reason() -> None:
    from lance_gpu._device import gpu_unusable_reason

    if gpu_unusable_reason() is None:
        pytest.skip("a usable GPU is present: the benchmark would run")
    proc = _run(["--rows", "10"], NUMBA_ENABLE_CUDASIM="0")
    assert proc.returncode == 2
    assert "no usable GPU" in proc.stderr
