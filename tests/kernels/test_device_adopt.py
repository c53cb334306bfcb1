"""How device arrays are wrapped: which wrappings synchronise a stream and which do not.

On a GPU every needless stream synchronisation stalls the host between launches; these
tests pin the rules with a stand-in for ``numba.cuda`` (no GPU needed):

* ``adopt`` (our own fresh CuPy arrays) drops the array's stream, waits once for a stream
  other than the legacy one our kernels use, and never asks numba to synchronise;
* ``to_device`` passes numba device arrays through untouched, and imports foreign arrays
  with numba's default synchronisation.
"""

from __future__ import annotations

import numpy as np
import pytest

from cuda_kernels import _device


class _Stream:
    def __init__(self, log, ptr):
        self.log, self.ptr = log, ptr

    def synchronize(self):
        self.log.append(("sync", self.ptr))


class _FakeCuda:
    def __init__(self):
        self.log = []

    def external_stream(self, ptr):
        return _Stream(self.log, ptr)

    def from_cuda_array_interface(self, desc, owner=None, sync=True):
        self.log.append(("wrap", dict(desc), sync))
        return ("view", owner)

    def is_cuda_array(self, x):
        return hasattr(x, "__cuda_array_interface__")

    def as_cuda_array(self, x, sync=True):
        self.log.append(("as_cuda_array", sync))
        return x


class _CaiArray:
    def __init__(self, stream):
        self.__cuda_array_interface__ = {
            "shape": (4,), "typestr": "<i8", "data": (1234, False), "version": 3, "strides": None,
        }
        if stream is not None:
            self.__cuda_array_interface__["stream"] = stream
        self.dtype = np.dtype(np.int64)


class _NumbaLike(_CaiArray):
    __cuda_ndarray__ = True

    def copy_to_host(self):
        return np.zeros(4, np.int64)


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = _FakeCuda()
    monkeypatch.setattr(_device, "cuda_module", lambda: fake)
    monkeypatch.setattr(_device, "is_simulator", lambda: False)
    return fake


@pytest.mark.parametrize("stream", [None, 1])
def test_adopt_on_the_legacy_stream_never_synchronises(fake_cuda, stream):
    arr = _CaiArray(stream)
    assert _device.adopt(arr) == ("view", arr)
    [(kind, desc, sync)] = fake_cuda.log
    assert kind == "wrap" and sync is False
    assert "stream" not in desc and desc["data"] == (1234, False)


@pytest.mark.parametrize("stream", [2, 0x7F00AB])
def test_adopt_waits_once_for_another_stream(fake_cuda, stream):
    _device.adopt(_CaiArray(stream))
    assert fake_cuda.log[0] == ("sync", stream)
    kind, desc, sync = fake_cuda.log[1]
    assert kind == "wrap" and sync is False and "stream" not in desc


def test_to_device_passes_numba_arrays_through(fake_cuda):
    arr = _NumbaLike(1)
    assert _device.to_device(arr) is arr
    assert fake_cuda.log == []


def test_to_device_imports_foreign_arrays_with_synchronisation(fake_cuda):
    arr = _CaiArray(0x7F00AB)
    assert _device.to_device(arr) is arr
    assert fake_cuda.log == [("as_cuda_array", True)]
