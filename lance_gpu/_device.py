# SPDX-License-Identifier: Apache-2.0
"""Choosing where to decode: ``device="auto" | "gpu" | "cpu"``.

``auto`` decodes on the GPU when CuPy sees a usable CUDA device and the GPU decoder is
available, and on the CPU otherwise.  Falling back is silent when no GPU stack (CuPy) is
installed or ``CUDA_VISIBLE_DEVICES`` hides every GPU -- the CPU is then what the user
chose -- and warns (:class:`~lance_gpu.errors.GpuFallbackWarning`, once per reason and
process) when CuPy is installed but the GPU cannot be used.  ``gpu`` raises
:class:`~lance_gpu.errors.GpuUnavailableError` when that is not possible.  Nothing here
imports CUDA libraries at module import time.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings

from lance_gpu.errors import GpuFallbackWarning, GpuUnavailableError

DEVICES = ("auto", "gpu", "cpu")


_HIDDEN = "CUDA_VISIBLE_DEVICES hides every GPU"


@functools.lru_cache(maxsize=1)
def gpu_stack_installed() -> bool:
    """Whether CuPy is installed (whether or not a device or driver is usable)."""
    return importlib.util.find_spec("cupy") is not None


#: With ``NUMBA_ENABLE_CUDASIM=1``, ``LANCE_GPU_TEST_SIM_DEVICE=1`` makes the numba CUDA
#: simulator stand in for the device (tests; being an environment variable, it reaches the
#: processes a test does not start itself, such as Spark's Python workers)
SIM_DEVICE_ENV = "LANCE_GPU_TEST_SIM_DEVICE"


@functools.lru_cache(maxsize=1)
def gpu_unusable_reason() -> str | None:
    """Why the GPU path cannot run here, or None when it can."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and os.environ.get(SIM_DEVICE_ENV) == "1":
        return None
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return _HIDDEN
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a CUDA library load failure
        return f"CuPy is not usable ({type(exc).__name__}: {exc})"
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device is visible"
    except Exception as exc:
        return f"no usable CUDA device ({type(exc).__name__}: {exc})"
    try:
        import lance_gpu.gpu  # noqa: F401
    except ImportError:
        return "this build of lance-gpu has no GPU decoder yet"
    return _kernel_compiler_reason()


def _kernel_compiler_reason() -> str | None:
    """Why numba-cuda cannot compile and run our kernels here (no driver, no NVVM), or None."""
    try:
        from numba import cuda, types

        if not cuda.is_available():
            return "numba-cuda finds no usable CUDA driver and device"

        def _probe(out):
            out[0] = 1

        cuda.compile_ptx(_probe, (types.int32[:],))
    except Exception as exc:
        return f"numba-cuda cannot compile kernels ({type(exc).__name__}: {exc}); install lance-gpu[gpu]"
    return None


_warned: set[str] = set()


def resolve_device(device: str) -> str:
    """Return "gpu" or "cpu" for a user's ``device`` choice (see the module docstring)."""
    if device not in DEVICES:
        msg = f"device must be one of {DEVICES}, not {device!r}"
        raise ValueError(msg)
    if device == "cpu":
        return "cpu"
    reason = gpu_unusable_reason()
    if reason is None:
        return "gpu"
    if device == "gpu":
        msg = f"device='gpu' requested but the GPU cannot be used: {reason}"
        raise GpuUnavailableError(msg)
    if reason == _HIDDEN or not gpu_stack_installed():
        return "cpu"  # the CPU is the only choice the user set up: nothing to warn about
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"lance_gpu: decoding on the CPU because {reason}", GpuFallbackWarning, stacklevel=3)
    return "cpu"
