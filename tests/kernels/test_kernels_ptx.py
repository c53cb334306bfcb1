"""Every GPU kernel compiles for a real GPU (sm_90 PTX), checked without a GPU.

Runs ``ptx_compile_check.py`` in a subprocess (it patches numba-cuda and must
not see the CUDA simulator), started when collection ends (``tests/background_runs.py``).  Skipped when libNVVM / NVRTC are not available.
"""

import os
import sys
from pathlib import Path

import pytest
from background_runs import Command, finished, runs_in_background

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _ptx_check() -> Command:
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return [sys.executable, str(HERE / "ptx_compile_check.py")], env, str(ROOT)


@runs_in_background(_ptx_check)  # ~30 s of one core: beside the rest of the suite (tests/background_runs.py)
def test_gpu_kernels_compile_to_ptx(request: pytest.FixtureRequest) -> None:
    proc = finished(request.node.nodeid, request.function)
    out = proc.stdout + proc.stderr
    if "PTX-SKIP" in proc.stdout:
        pytest.skip("libNVVM / NVRTC not available: " + proc.stdout.strip()[:200])
    assert proc.returncode == 0, out[-6000:]
    assert "kernels compiled" in proc.stdout, out[-2000:]
