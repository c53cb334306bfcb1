# SPDX-License-Identifier: Apache-2.0
"""Import hygiene: ``import lance_gpu`` needs no CUDA, no pylance, no Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

import lance_gpu
from lance_gpu._device import GpuFallbackWarning, gpu_unusable_reason, resolve_device
from lance_gpu.errors import GpuUnavailableError


def _modules_after_import(env_extra: dict[str, str]) -> set[str]:
    code = "import sys, json, lance_gpu; print(json.dumps(sorted(sys.modules)))"
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("env", [{}, {"CUDA_VISIBLE_DEVICES": "-1"}])
def test_import_loads_no_optional_heavyweights(env: dict[str, str]) -> None:
    mods = _modules_after_import(env)
    for banned in ("cupy", "cudf", "numba.cuda", "torch", "pyspark", "lance", "sqlglot"):
        assert banned not in mods, f"import lance_gpu imported {banned}"


def test_public_api() -> None:
    for name in lance_gpu.__all__:
        assert hasattr(lance_gpu, name)


def test_device_choice() -> None:
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="device must be one of"):
        resolve_device("tpu")
    reason = gpu_unusable_reason()
    if reason is None:
        pytest.skip("a GPU is usable here")
    with pytest.raises(GpuUnavailableError, match="device='gpu'"):
        resolve_device("gpu")
    import lance_gpu._device as dev

    dev._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve_device("auto") == "cpu"
    assert any(issubclass(w.category, GpuFallbackWarning) and reason in str(w.message) for w in caught)
