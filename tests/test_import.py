# SPDX-License-Identifier: Apache-2.0
"""Import hygiene: ``import lance_gpu`` needs no CUDA, no pylance, no Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

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


def test_import_loads_no_numba() -> None:
    """Kernels are made on first use (cuda_kernels._jitcache.LazyDispatcher): a process that
    only imports lance_gpu, or only reads metadata, never pays for numba's import."""
    mods = _modules_after_import({})
    assert not [m for m in mods if m == "numba" or m.startswith(("numba.", "llvmlite"))]


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


def _auto_warnings(monkeypatch: pytest.MonkeyPatch, installed: bool, reason: str) -> list[warnings.WarningMessage]:
    import lance_gpu._device as dev

    monkeypatch.setattr(dev, "gpu_stack_installed", lambda: installed)
    monkeypatch.setattr(dev, "gpu_unusable_reason", lambda: reason)
    monkeypatch.setattr(dev, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve_device("auto") == "cpu"
        assert resolve_device("auto") == "cpu"
    return [w for w in caught if issubclass(w.category, GpuFallbackWarning)]


def test_auto_is_silent_without_a_gpu_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _auto_warnings(monkeypatch, False, "CuPy is not usable (ModuleNotFoundError: no cupy)") == []
    assert _auto_warnings(monkeypatch, True, "CUDA_VISIBLE_DEVICES hides every GPU") == []


def test_auto_warns_once_when_an_installed_gpu_stack_is_unusable(monkeypatch: pytest.MonkeyPatch) -> None:
    caught = _auto_warnings(monkeypatch, True, "no CUDA device is visible")
    assert len(caught) == 1 and "no CUDA device is visible" in str(caught[0].message)


def test_auto_read_without_cupy_warns_nothing(tmp_path) -> None:
    code = (
        "import warnings, pyarrow as pa, lance_gpu; warnings.simplefilter('error');"
        f"lance_gpu.write_dataset(pa.table({{'a': [1, 2]}}), {str(tmp_path / 'd.lance')!r});"
        f"print(lance_gpu.dataset({str(tmp_path / 'd.lance')!r}).to_table().num_rows)"
    )
    if lance_gpu._device.gpu_stack_installed():
        pytest.skip("CuPy is installed here")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2" and "Warning" not in out.stderr


def test_warning_classes_are_public() -> None:
    from lance_gpu.errors import CpuDecodeWarning as C
    from lance_gpu.errors import GpuFallbackWarning as G

    assert lance_gpu.CpuDecodeWarning is C and lance_gpu.GpuFallbackWarning is G is GpuFallbackWarning
    assert issubclass(C, G) and issubclass(G, UserWarning)
    import importlib

    assert importlib.import_module("lance_gpu.gpu").CpuDecodeWarning is C


def test_ships_py_typed() -> None:
    assert (Path(lance_gpu.__file__).parent / "py.typed").is_file()
