# SPDX-License-Identifier: Apache-2.0
"""The GPU read path end to end (``tests/gpu/sim_pipeline.py``) in a subprocess: under the CUDA
simulator everywhere, and on the device where a GPU is usable (``gpu`` marker).

``NUMBA_ENABLE_CUDASIM=1`` must be set before ``numba.cuda`` is first imported, so the
pipeline tests cannot share this pytest process.  They decode small pylance-written datasets
with the GPU path (the simulator standing in for the device, numba device arrays for CuPy)
and compare with the CPU path and pylance; also the new segmented kernels against their CPU
twins, the CPU fallback, device-side corruption and the memory budget.  Each subprocess starts
when collection ends and runs beside the rest of the suite (``tests/background_runs.py``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from background_runs import Command, finished, runs_in_background

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "tests" / "gpu" / "sim_pipeline.py"


def _pipeline(*, simulator: bool, marks: str = "not slow") -> Command | None:
    """The pytest session of ``tests/gpu/sim_pipeline.py`` (None where pylance is missing)."""
    if importlib.util.find_spec("lance") is None:
        return None
    env = dict(os.environ)
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [
        sys.executable, "-m", "pytest", str(PIPELINE), "-q", "-rs", "-p", "no:cacheprovider", "-o", "addopts=", "--noconftest",
        "-m", marks, "-W", "error::FutureWarning", "--rootdir", str(ROOT),
    ]
    return cmd, env, str(ROOT)


@runs_in_background(lambda: _pipeline(simulator=True))
def test_gpu_pipeline_under_cuda_simulator(request: pytest.FixtureRequest) -> None:
    _check_pipeline(request)


@pytest.mark.slow
@runs_in_background(lambda: _pipeline(simulator=True, marks="slow"))
def test_gpu_pipeline_slow_cases_under_cuda_simulator(request: pytest.FixtureRequest) -> None:
    """The pipeline's property tests with more examples."""
    _check_pipeline(request)


@pytest.mark.gpu
@runs_in_background(lambda: _pipeline(simulator=False, marks="slow or not slow"))
def test_gpu_pipeline_on_the_device(request: pytest.FixtureRequest) -> None:
    """The same tests on a real GPU (CuPy, numba-cuda): skipped where no GPU is usable."""
    _check_pipeline(request)


def _check_pipeline(request: pytest.FixtureRequest) -> None:
    pytest.importorskip("lance")
    proc = finished(request.node.nodeid, request.function)
    tail = proc.stdout[-8000:] + proc.stderr[-4000:]
    assert proc.returncode == 0, tail
    lines = proc.stdout.strip().splitlines()
    last = lines[-1]
    assert " passed" in last and "failed" not in last, tail
    # Nothing may skip silently; the one allowed reason is an optional package this machine
    # lacks (pyspark, on a GPU machine that has no Spark).
    skips = [line for line in lines if line.startswith("SKIPPED")]
    assert all("pyspark" in line for line in skips), tail


# A slice of the read matrix through the GPU path (the simulator as the device, see
# tests/conftest.py): the 2.2 "stable" dataset, pylance-written over several versions with
# deletions, read whole, with row ids and in batches.  The rest of the GPU matrix takes
# minutes per case under the simulator; it runs on a GPU under the ``gpu`` marker.
MATRIX_SLICE = "stable-2.2 and (test_to_table or test_with_row_id or 4096)"


def _matrix_slice() -> Command | None:
    if importlib.util.find_spec("lance") is None:
        return None
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", LANCE_GPU_TEST_SIM_DEVICE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [
        sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_read_matrix.py"), "-q", "-p", "no:cacheprovider",
        "-o", "addopts=", "-m", "gpu", "-k", MATRIX_SLICE, "--rootdir", str(ROOT),
    ]
    return cmd, env, str(ROOT)


@runs_in_background(_matrix_slice)
def test_read_matrix_slice_on_the_simulated_device(request: pytest.FixtureRequest) -> None:
    pytest.importorskip("lance")
    proc = finished(request.node.nodeid, request.function)
    tail = proc.stdout[-8000:] + proc.stderr[-4000:]
    assert proc.returncode == 0, tail
    last = proc.stdout.strip().splitlines()[-1]
    assert "3 passed" in last and "skipped" not in last and "failed" not in last, tail
