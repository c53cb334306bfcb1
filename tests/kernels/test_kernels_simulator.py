"""Runs the GPU kernel tests (``sim_kernels_gpu.py``) under the CUDA simulator.

The simulator is selected by ``NUMBA_ENABLE_CUDASIM=1``, which numba reads when
``numba.cuda`` is first imported; it must therefore not leak into this pytest
process (other tests may use numba or a real GPU).  The GPU tests run in a
subprocess with the variable set.  Also checks that ``import cuda_kernels``
stays CUDA-free.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from background_runs import Command, finished, runs_in_background

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _simulated_kernel_tests() -> Command:
    cmd = [
        sys.executable, "-m", "pytest", str(HERE / "sim_kernels_gpu.py"), str(HERE / "sim_block_runner.py"),
        "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-W", "error::FutureWarning",
    ]
    return cmd, _env(NUMBA_ENABLE_CUDASIM="1"), str(ROOT)


@runs_in_background(_simulated_kernel_tests)  # beside the rest of the suite (tests/background_runs.py)
def test_gpu_kernels_under_cuda_simulator(request: pytest.FixtureRequest) -> None:
    """[CUDA simulator] every GPU kernel against its CPU twin, and the simulator's sequential
    block runner against numba's (``sim_block_runner.py``), in a subprocess."""
    proc = finished(request.node.nodeid, request.function)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], proc.stdout[-2000:]


def test_import_is_cuda_free():
    code = (
        "import sys, cuda_kernels\n"
        "bad = [m for m in ('numba.cuda', 'cupy') if m in sys.modules]\n"
        "assert not bad, bad\n"
        "import numpy as np\n"
        "cuda_kernels.unpack_blocks(np.zeros(32, np.uint32), [0], [1])\n"
        "assert 'numba.cuda' not in sys.modules\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
