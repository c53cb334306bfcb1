# SPDX-License-Identifier: Apache-2.0
"""Import hygiene: ``import lance_gpu`` needs no CUDA, no pylance, no Spark; it and a CPU read
load only the modules a read runs (issue 24), the rest loading on first use with the
post-commit auto cleanup still registered."""

from __future__ import annotations

import importlib
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


#: What opening and reading a dataset on the CPU never runs: the writers, the transaction
#: model, the operations, the index readers (a dataset without indices), the tools, the
#: vector search, the GPU decoder, the version history, tags and schema view (issue 24: load
#: only what a read needs).
_NOT_FOR_A_READ = (
    "lance_gpu.write.", "lance_gpu.txn.", "lance_gpu.ops.", "lance_gpu.index.", "lance_gpu.tools",
    "lance_gpu.file.writer", "lance_gpu.gpu.plan", "lance_gpu.gpu.columns", "lance_gpu.gpu.device_table",
    "lance_gpu.gpu.read", "lance_gpu.scan.nearest", "lance_gpu.scan.vector_index", "lance_gpu.scan.flat_search",
    "lance_gpu.table.versions", "lance_gpu.table.tags", "lance_gpu.table.schema_view",
)


def _loaded_by(code: str, *args: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code`` (which sees ``args``
    as ``sys.argv[1:]``)."""
    code += "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _read_only_modules_of(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m.startswith(_NOT_FOR_A_READ))


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    import pyarrow as pa

    path = str(tmp_path_factory.mktemp("startup") / "d.lance")
    table = pa.table({"id": range(1000), "s": [f"v{i % 7}" for i in range(1000)], "x": [i * 0.5 for i in range(1000)]})
    lance_gpu.write_dataset(table, path)
    return path


def test_import_and_count_load_no_write_txn_ops_index_or_gpu_plan(small_dataset: str) -> None:
    assert _read_only_modules_of(_loaded_by("import lance_gpu")) == []
    # dir() lists the names that load on first use, without loading them
    assert _read_only_modules_of(_loaded_by("import lance_gpu; assert set(lance_gpu.__all__) <= set(dir(lance_gpu))")) == []
    mods = _loaded_by("import sys, lance_gpu; assert lance_gpu.dataset(sys.argv[1]).count_rows() == 1000", small_dataset)
    assert _read_only_modules_of(mods) == []


def test_a_cpu_read_loads_only_the_read_path(small_dataset: str) -> None:
    mods = _loaded_by(
        "import sys, lance_gpu\nds = lance_gpu.dataset(sys.argv[1], device='cpu')\n"
        "assert ds.to_table().num_rows == 1000\nassert ds.to_table(filter='id < 10').num_rows == 10",
        small_dataset,
    )
    assert _read_only_modules_of(mods) == []
    # nor the encodings' device planning and decoding kernels, which their registry names but
    # imports on first use
    assert [m for m in mods if m.endswith((".gpu_plan", ".decode_kernels", ".fullzip_kernels"))] == []
    # the names the read did not use still load on first use
    mods = _loaded_by("import lance_gpu\nlance_gpu.LanceOperation.Append\nlance_gpu.write.operations.delete")
    assert {"lance_gpu.txn.operations", "lance_gpu.write.operations"} <= mods


def test_lazy_names_are_the_eager_ones() -> None:
    import lance_gpu.txn as txn

    assert lance_gpu.batch_udf is importlib.import_module("lance_gpu.write.udf").batch_udf
    assert lance_gpu.FragmentMetadata is importlib.import_module("lance_gpu.txn.fragment").FragmentMetadata
    importlib.import_module("lance_gpu.txn.commit")  # loading the submodule does not rebind the function's name
    assert txn.commit is sys.modules["lance_gpu.txn.commit"].commit and callable(txn.commit)
    assert lance_gpu.write.DatasetExistsError is lance_gpu.DatasetExistsError
    with pytest.raises(AttributeError):
        lance_gpu.write.no_such_thing  # noqa: B018
    with pytest.raises(AttributeError):
        lance_gpu.no_such_thing  # noqa: B018


_COMMITS = {
    "write_dataset": "lance_gpu.write_dataset(pa.table({'a': [1]}), path, mode='append')",
    "delete": "lance_gpu.dataset(path).delete('a = 0')",
    "commit": (
        "ds = lance_gpu.dataset(path)\n"
        "frags = lance_gpu.write.write_fragments(pa.table({'a': [1]}), path)\n"
        "lance_gpu.LanceDataset.commit(path, lance_gpu.LanceOperation.Append(frags), read_version=ds.version)"
    ),
}


@pytest.mark.parametrize("how", sorted(_COMMITS))
def test_auto_cleanup_runs_in_a_process_that_never_imported_the_cleanup(tmp_path, how: str) -> None:
    """The post-commit auto cleanup is registered by ``import lance_gpu`` alone (the cleanup
    code loads at the first commit), whichever API commits."""
    import time

    import pyarrow as pa

    path = str(tmp_path / "d.lance")
    ds = lance_gpu.write_dataset(pa.table({"a": range(10)}), path)
    ds.update_config({"lance.auto_cleanup.interval": "1", "lance.auto_cleanup.older_than": "1ms"})
    assert [v["version"] for v in ds.versions()] == [1, 2]
    time.sleep(0.01)
    code = (
        "import sys, pyarrow as pa, lance_gpu\npath = sys.argv[1]\n"
        "assert 'lance_gpu.ops.housekeeping' not in sys.modules and 'lance_gpu.ops.cleanup' not in sys.modules\n"
        + _COMMITS[how]
    )
    assert "lance_gpu.ops.housekeeping" in _loaded_by(code, path)
    # version 1 is gone (older than 1ms, before the version the commit was planned on)
    assert [v["version"] for v in lance_gpu.dataset(path).versions()] == [2, 3]


def test_pylance_module_names_load_on_first_use() -> None:
    """``lance_gpu.dataset`` / ``lance_gpu.fragment`` keep pylance's ``lance.dataset`` /
    ``lance.fragment`` names that live in the write, txn and ops packages."""
    ds_mod, frag_mod = sys.modules["lance_gpu.dataset"], sys.modules["lance_gpu.fragment"]
    for name, where in (("AutoCleanupConfig", "ops.housekeeping"), ("ColumnOrdering", "ops.ordering"),
                        ("SqlQueryBuilder", "ops.sql"), ("DatasetStats", "ops.stats"),
                        ("DatasetOptimizer", "write.compaction"), ("LANCE_COMMIT_MESSAGE_KEY", "write.history"),
                        ("MergeInsertBuilder", "write.rowlevel")):
        assert getattr(ds_mod, name) is getattr(importlib.import_module(f"lance_gpu.{where}"), name)
    for name in ("DataFile", "DeletionFile", "FragmentMetadata"):
        assert getattr(frag_mod, name) is getattr(importlib.import_module("lance_gpu.txn.fragment"), name)
    with pytest.raises(AttributeError):
        ds_mod.no_such_thing  # noqa: B018
