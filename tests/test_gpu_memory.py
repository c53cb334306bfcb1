# SPDX-License-Identifier: Apache-2.0
"""The GPU reader's device memory budget (``lance_gpu.gpu.memory``): its sources and their
order, the RAPIDS Accelerator's Python-worker pool as a bound, and bad settings.  Runs
anywhere: the device is hidden (CuPy reported absent), so the budget starts from the fixed
1 GiB used where no device can be asked."""

from __future__ import annotations

import pytest

from lance_gpu.gpu import memory

GIB = 1 << 30
RAPIDS_VARS = ("RAPIDS_POOLED_MEM_ENABLED", "RAPIDS_POOLED_MEM_SIZE", "RAPIDS_POOLED_MEM_MAX_SIZE")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in (memory.ENV_LIMIT, *RAPIDS_VARS):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("lance_gpu.gpu._array.cupy", lambda: None)
    memory.set_memory_limit(None)
    yield
    memory.set_memory_limit(None)


def test_default_and_environment(monkeypatch):
    assert memory.memory_budget() == GIB
    monkeypatch.setenv(memory.ENV_LIMIT, "512M")
    assert memory.memory_budget() == 512 << 20
    monkeypatch.setenv(memory.ENV_LIMIT, "2.5G")
    assert memory.memory_budget() == int(2.5 * GIB)
    monkeypatch.setenv(memory.ENV_LIMIT, "lots")
    with pytest.raises(ValueError, match=memory.ENV_LIMIT):
        memory.memory_budget()


def test_explicit_limits_take_precedence(monkeypatch):
    monkeypatch.setenv(memory.ENV_LIMIT, "4G")
    memory.set_memory_limit(3 * GIB)
    assert memory.memory_budget() == 3 * GIB
    with memory.memory_limit(100 << 20):
        assert memory.memory_budget() == 100 << 20
    assert memory.memory_budget() == 3 * GIB
    with pytest.raises(ValueError):
        memory.set_memory_limit(0)
    with pytest.raises(ValueError), memory.memory_limit(-1):
        pass


def test_rapids_python_worker_pool_bounds_the_budget(monkeypatch):
    monkeypatch.setenv("RAPIDS_POOLED_MEM_SIZE", str(500 << 20))
    assert memory.rapids_python_pool_bytes() is None  # pooling not enabled: not ours to honour
    assert memory.memory_budget() == GIB
    monkeypatch.setenv("RAPIDS_POOLED_MEM_ENABLED", "true")
    assert memory.rapids_python_pool_bytes() == 500 << 20
    assert memory.memory_budget() == int((500 << 20) * memory.DEFAULT_FRACTION)
    monkeypatch.setenv("RAPIDS_POOLED_MEM_MAX_SIZE", str(800 << 20))  # the max bounds it when set
    assert memory.rapids_python_pool_bytes() == 800 << 20
    monkeypatch.setenv("RAPIDS_POOLED_MEM_MAX_SIZE", "0")  # 0: unbounded, so the initial size
    assert memory.rapids_python_pool_bytes() == 500 << 20
    monkeypatch.setenv("RAPIDS_POOLED_MEM_SIZE", str(64 * GIB))  # a pool larger than the default
    assert memory.memory_budget() == GIB
    monkeypatch.setenv(memory.ENV_LIMIT, "3G")  # an explicit setting wins
    assert memory.memory_budget() == 3 * GIB
