# SPDX-License-Identifier: Apache-2.0
"""Executor-side etiquette of the Spark integration, without a Spark job (or a GPU):
which device a task uses, the cap on concurrent GPU decodes, and the decoder switch."""

from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning")]

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'lance-gpu[spark]')")
lance = pytest.importorskip("lance")

from lance_gpu.spark import _gpu, _scan  # noqa: E402
from lance_gpu.spark._options import parse_read_options  # noqa: E402


@pytest.fixture
def lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(_gpu.LOCK_DIR_ENV, str(tmp_path))
    return tmp_path


def test_max_concurrent_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_gpu.MAX_DECODES_ENV, raising=False)
    assert _gpu.max_concurrent_decodes() == 1
    monkeypatch.setenv(_gpu.MAX_DECODES_ENV, "3")
    assert _gpu.max_concurrent_decodes() == 3
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv(_gpu.MAX_DECODES_ENV, bad)
        with pytest.raises(ValueError, match=_gpu.MAX_DECODES_ENV):
            _gpu.max_concurrent_decodes()


@pytest.mark.parametrize("cap", [1, 2])
def test_decode_slots_cap_concurrency(cap: int, lock_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_gpu.MAX_DECODES_ENV, str(cap))
    inside = []
    peak = []
    guard = threading.Lock()

    def work() -> None:
        with _gpu.decode_slot("gpu-a", poll_s=0.001):
            with guard:
                inside.append(1)
                peak.append(len(inside))
            time.sleep(0.05)
            with guard:
                inside.pop()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(peak) == cap
    # another device has its own slots
    with _gpu.decode_slot("gpu-a"), _gpu.decode_slot("gpu-b") as slot:
        assert slot == 0


def test_task_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    assert _gpu.task_gpu() == (0, "5")  # the first visible device is the executor's
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _gpu.task_gpu() == (0, "0")  # no task context, nothing assigned
    import pyspark

    gpu = types.SimpleNamespace(addresses=["2"])
    ctx = types.SimpleNamespace(resources=lambda: {"gpu": gpu})
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: ctx))
    assert _gpu.task_gpu() == (2, "2")  # Spark's GPU scheduling: an ordinal among all devices


@pytest.fixture(scope="module")
def small_ds(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("exec") / "small.lance")
    lance.write_dataset(pa.table({"id": np.arange(100), "s": [f"v{i}" for i in range(100)]}), uri, max_rows_per_file=60)
    return uri


def _read_all(uri: str, device: str) -> pa.Table:
    spec, ranges = _scan.plan_scan(parse_read_options({"path": uri, "device": device}))
    return pa.Table.from_batches([b for r in ranges for b in _scan.read_range(spec, *r)])


def test_cpu_decodes_take_no_slot(small_ds: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a, **_k):
        raise AssertionError("a CPU decode asked for a GPU decode slot")

    monkeypatch.setattr(_scan, "decode_slot", refuse)
    for device in ("cpu", "auto"):
        got = _read_all(small_ds, device)
        assert got.column("id").to_pylist() == list(range(100))


def test_gpu_decoder_holds_a_slot_on_the_task_device(small_ds: str, monkeypatch: pytest.MonkeyPatch, lock_dir: Path) -> None:
    used: list[int] = []
    slots: list[str] = []

    class Device:
        def __init__(self, ordinal: int) -> None:
            self.ordinal = ordinal

        def __enter__(self) -> None:
            used.append(self.ordinal)

        def __exit__(self, *exc: object) -> None:
            return None

    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(Device=Device)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(_scan, "resolve_device", lambda device: "gpu")
    real_slot = _gpu.decode_slot

    def recording_slot(key: str, **kw):
        slots.append(key)
        return real_slot(key, **kw)

    monkeypatch.setattr(_scan, "decode_slot", recording_slot)

    # No GPU here: the executor's device decode is stood in for by the CPU decoder (host
    # columns in a DeviceTable), so what is checked is the slot and the device around it.
    from lance_gpu.gpu.device_table import DeviceTable
    from lance_gpu.scan import CpuExecutor, GpuExecutor

    def cpu_decode_device(self, ds, units, fields):
        for unit, table in zip(units, CpuExecutor().decode(ds, units, fields, None), strict=True):
            cols = [c.combine_chunks() for c in table.columns]
            yield DeviceTable(table.column_names, cols, table.num_rows, None, unit.fragment.fragment_id)

    monkeypatch.setattr(GpuExecutor, "decode_device", cpu_decode_device)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    got = _read_all(small_ds, "gpu")
    assert got.column("id").to_pylist() == list(range(100))
    # one decode per fragment, holding a slot; each then combined and copied back on the
    # task's device too (GpuTaskExecutor.device_scope), holding none
    assert slots == ["3", "3"] and used == [0, 0, 0, 0]


@pytest.mark.parametrize(("conf", "name"), [("true", "lance_gpu"), ("false", "lance"), (None, "lance")])
def test_register_matches_the_pushdown_setting(small_ds: str, conf: str | None, name: str) -> None:
    """Spark refuses readers with pushFilters unless the session enables Python filter pushdown."""
    from pyspark import cloudpickle

    from lance_gpu.spark import LanceDataSource, register
    from lance_gpu.spark.datasource import LanceFilteringReader, LanceReader

    registered = []
    settings = {} if conf is None else {"spark.sql.python.filterPushdown.enabled": conf}
    fake = types.SimpleNamespace(
        conf=types.SimpleNamespace(get=lambda key, default=None: settings.get(key, default)),
        dataSource=types.SimpleNamespace(register=registered.append),
    )
    cls = register(fake, name=name)
    assert registered == [cls] and issubclass(cls, LanceDataSource) and cls.name() == name
    cls = cloudpickle.loads(cloudpickle.dumps(cls))  # how Spark ships the class to its Python workers
    source = cls({"path": small_ds})
    reader = source.reader(source.schema())
    assert type(reader) is (LanceFilteringReader if conf == "true" else LanceReader)
    forced = cls({"path": small_ds, "pushdown": "true"})
    assert type(forced.reader(forced.schema())) is LanceFilteringReader
