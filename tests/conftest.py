# SPDX-License-Identifier: Apache-2.0
"""Shared test configuration: the ``gpu`` marker skips cleanly where no GPU is usable.

With ``NUMBA_ENABLE_CUDASIM=1`` and ``LANCE_GPU_TEST_SIM_DEVICE=1`` the numba CUDA simulator
stands in for the device instead: ``gpu`` tests run (slowly) through the GPU read path on
the host, e.g. the read matrix::

    NUMBA_ENABLE_CUDASIM=1 LANCE_GPU_TEST_SIM_DEVICE=1 python -m pytest -m gpu tests/test_read_matrix.py -k "types and 2.2"
"""

from __future__ import annotations

import os

import pytest
from background_runs import start, stop_all

SIM_DEVICE_ENV = "LANCE_GPU_TEST_SIM_DEVICE"


def simulated_device() -> bool:
    """Whether the CUDA simulator stands in for the device in this test process."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" and os.environ.get(SIM_DEVICE_ENV) == "1"


def pytest_configure(config: pytest.Config) -> None:
    if simulated_device():
        import lance_gpu._device as device_mod

        device_mod.gpu_unusable_reason = lambda: None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tests awaiting a background run go last: the rest of the suite runs while it does
    items.sort(key=lambda item: hasattr(getattr(item, "function", None), "background_command"))
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    from lance_gpu._device import gpu_unusable_reason

    reason = gpu_unusable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the subprocess of every selected (``-m`` / ``-k`` applied), unskipped test
    marked :func:`background_runs.runs_in_background`: it runs beside the rest of the suite."""
    if session.config.option.collectonly:
        return
    for item in session.items:
        test = getattr(item, "function", None)
        if test is None or not hasattr(test, "background_command") or item.get_closest_marker("skip") is not None:
            continue
        start(item.nodeid, test)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    stop_all()


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server on loopback with one bucket (see tests/s3_server.py)."""
    from s3_server import start_s3_server

    server = start_s3_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite():
    """Azurite (the Azure Storage emulator) on loopback with one container (see
    tests/azurite_server.py); skips, saying why, where it cannot be installed."""
    from azurite_server import azurite_binary, start_azurite

    binary, why = azurite_binary()
    if binary is None:
        pytest.skip(why)
    server = start_azurite(binary)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_server():
    """fake-gcs-server on loopback with one bucket, behind the XML-API front object_store
    needs (see tests/gcs_server.py); skips, saying why, where its binary cannot run."""
    from gcs_server import fake_gcs_binary, start_gcs_server

    binary, why = fake_gcs_binary()
    if binary is None:
        pytest.skip(why)
    try:
        server = start_gcs_server(binary)
    except (OSError, RuntimeError) as exc:
        pytest.skip(f"fake-gcs-server did not start: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def memory_store():
    """``memory://`` with the test servers' interface (see tests/stores.py)."""
    from stores import start_memory_store

    server = start_memory_store()
    yield server
    server.stop()


STORES = {"s3": "s3_server", "azure": "azurite", "gcs": "gcs_server", "memory": "memory_store"}


@pytest.fixture(params=list(STORES))
def any_store(request: pytest.FixtureRequest):
    """Each store in turn: S3 (moto), Azure (Azurite), GCS (fake-gcs-server), memory://."""
    return request.getfixturevalue(STORES[request.param])


@pytest.fixture(params=["s3", "azure", "gcs"])
def remote_store(request: pytest.FixtureRequest):
    """Each store served over HTTP that pylance can also write to: S3, Azure, GCS."""
    return request.getfixturevalue(STORES[request.param])


# The suite runs the compiled kernels (twins are tested against them in test_jit_twins.py and,
# in fresh processes, test_jit_cache.py) and starts no background compile workers.
os.environ.setdefault("LANCE_GPU_JIT_TWINS", "0")


@pytest.fixture
def field_reads(monkeypatch):
    """Every field read a CPU scan asks of a fragment, as ``(fragment id, field name, rows
    asked)`` (rows: the fragment's physical rows when it asks for all), whether through
    ``FragmentSnapshot.read_field`` or, for spans of small fragments, through
    ``read_field_span`` (each of its parts once)."""
    import threading

    from lance_gpu.scan import execute
    from lance_gpu.table.snapshot import FragmentSnapshot

    reads: list[tuple[int, str, int]] = []
    real, real_span = FragmentSnapshot.read_field, execute.read_field_span
    inside = threading.local()

    def spy(self, field, arrow_field, rows):
        if not getattr(inside, "span", False):
            reads.append((self.fragment_id, field.name, self.physical_rows if rows is None else len(rows)))
        return real(self, field, arrow_field, rows)

    def spy_span(parts, field, arrow_field):
        reads.extend((f.fragment_id, field.name, f.physical_rows if rows is None else len(rows)) for f, rows in parts)
        inside.span = True
        try:
            return real_span(parts, field, arrow_field)
        finally:
            inside.span = False

    monkeypatch.setattr(FragmentSnapshot, "read_field", spy)
    monkeypatch.setattr(execute, "read_field_span", spy_span)
    return reads
