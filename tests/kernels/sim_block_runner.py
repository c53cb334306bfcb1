"""The CUDA simulator's sequential block runner (``cuda_kernels._simulator``) against numba's.

Run under ``NUMBA_ENABLE_CUDASIM=1`` by ``test_kernels_simulator.py`` (with
``sim_kernels_gpu.py``).  A kernel whose threads never wait on each other runs its blocks
without starting a Python thread per CUDA thread and computes what numba's threaded runner
computes; a kernel with a barrier or shared memory (directly or through a device function)
keeps numba's runner; a failing thread raises what numba's runner raises.
"""

import re
import threading

import numpy as np
import pytest
from numba import config as numba_config
from numba import cuda

import cuda_kernels as ck
from cuda_kernels import _device, _simulator
from cuda_kernels._target import dual, gpu_kernel

if not numba_config.ENABLE_CUDASIM:
    pytest.skip("the block runner is the CUDA simulator's", allow_module_level=True)


@dual
def _scaled(x, k):
    return x * k + 1


@gpu_kernel
def _scale_kernel(x, out, k):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = _scaled(x[i], k)
    if i == 0:
        cuda.atomic.add(out, x.size, 7)


@gpu_kernel
def _reverse_in_block_kernel(x, out):
    sh = cuda.shared.array(32, np.int64)
    t = cuda.threadIdx.x
    base = cuda.blockIdx.x * 32
    sh[t] = x[base + t]
    cuda.syncthreads()
    out[base + t] = sh[31 - t]


@dual
def _barrier_then(x):
    cuda.syncthreads()
    return x


@gpu_kernel
def _calls_a_barrier_kernel(x, out):
    i = cuda.grid(1)
    out[i] = _barrier_then(x[i])


@gpu_kernel
def _bounds_kernel(x, out):
    i = cuda.grid(1)
    out[i] = x[i + 1000]


def _threads_started(fn):
    """``fn()``'s result and the Python threads it started."""
    started = []
    real = threading.Thread.start

    def start(self):
        started.append(self)
        return real(self)

    threading.Thread.start = start
    try:
        return fn(), len(started)
    finally:
        threading.Thread.start = real


def _numba_runner(monkeypatch):
    monkeypatch.setattr(_simulator, "sequential", lambda fn: False)


def _scale(n, tpb):
    x = np.arange(n, dtype=np.int64)
    out = cuda.to_device(np.zeros(n + 1, np.int64))
    blocks, tpb = _device.launch_dims(n, tpb)
    _scale_kernel.get()[blocks, tpb](cuda.to_device(x), out, np.int64(3))
    return out.copy_to_host()


def test_verdicts_follow_device_functions():
    assert _simulator.sequential(_scale_kernel.get().fn)
    assert not _simulator.sequential(_reverse_in_block_kernel.get().fn)
    assert not _simulator.sequential(_calls_a_barrier_kernel.get().fn)


@pytest.mark.parametrize(("n", "tpb"), [(1, 32), (100, 32), (257, 64)])
def test_sequential_blocks_start_no_thread_and_equal_numbas(monkeypatch, n, tpb):
    got, started = _threads_started(lambda: _scale(n, tpb))
    assert started == 0
    expected = np.append(np.arange(n, dtype=np.int64) * 3 + 1, 7)
    np.testing.assert_array_equal(got, expected)
    _numba_runner(monkeypatch)
    numba_got, numba_started = _threads_started(lambda: _scale(n, tpb))
    assert numba_started >= n
    np.testing.assert_array_equal(numba_got, got)


def test_blocks_with_a_barrier_keep_numbas_threads():
    x = np.arange(64, dtype=np.int64)
    out = cuda.to_device(np.zeros(64, np.int64))
    _none, started = _threads_started(lambda: _reverse_in_block_kernel.get()[2, 32](cuda.to_device(x), out))
    assert started == 64
    np.testing.assert_array_equal(out.copy_to_host(), np.concatenate([x[:32][::-1], x[32:][::-1]]))


def test_a_failing_thread_raises_as_under_numba(monkeypatch):
    x = cuda.to_device(np.arange(8, dtype=np.int64))
    out = cuda.to_device(np.zeros(8, np.int64))
    errors = []
    for runner in ("sequential", "numba"):
        if runner == "numba":
            _numba_runner(monkeypatch)
        with pytest.raises(IndexError) as info:
            _bounds_kernel.get()[1, 8](x, out)
        errors.append(str(info.value))
    # numba's runner reports whichever failed thread it polls first; ours the first in order
    assert errors[0] == "tid=[0, 0, 0] ctaid=[0, 0, 0]: index 1000 is out of bounds for axis 0 with size 8"
    assert re.fullmatch(r"tid=\[(\d), 0, 0\] ctaid=\[0, 0, 0\]: index 100\1 is out of bounds for axis 0 with size 8", errors[1])


def test_a_package_kernel_equals_numbas_runner(monkeypatch):
    """One of the package's kernels (bit unpacking into a scatter) on random blocks: the
    sequential runner's output is numba's."""
    rng = np.random.default_rng(5)
    widths = [0, 1, 5, 13, 32]
    packed, offsets, pos = [], [], 0
    for w in widths:
        values = (rng.integers(0, 2**32, 1024, dtype=np.uint64) >> np.uint64(32 - w)).astype(np.uint32) if w else np.zeros(1024, np.uint32)
        p = ck.pack_blocks(values, w)
        packed.append(p)
        offsets.append(pos)
        pos += p.size
    words = np.concatenate(packed)

    def run():
        return _device.to_host(ck.unpack_blocks_gpu(words, np.asarray(offsets, np.int64), np.asarray(widths, np.int64)))

    ours, started = _threads_started(run)
    assert started == 0
    _numba_runner(monkeypatch)
    np.testing.assert_array_equal(run(), ours)
