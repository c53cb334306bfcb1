# SPDX-License-Identifier: Apache-2.0
"""[CUDA simulator] ``benchmarks/bench_gpu.py`` calls every kernel family the way the
kernels expect: each case runs once on tiny inputs under the simulator and is checked
against its CPU twin (a subprocess: the simulator must be on before ``numba.cuda`` loads).
Its end-to-end part runs on tiny copies of its three datasets (flat "mixed", "embeddings",
and "nested": lists and structs with nulls at every level), the rows that need neither CuPy
nor cuDF, with the phases and the check against pylance.
Without a GPU and without the simulator, the benchmark exits 2 with one clear line."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from background_runs import Command, finished, runs_in_background

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "bench_gpu.py"


def _command(args: list[str], **env: str) -> Command:
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return [sys.executable, str(BENCH), *args], full, str(ROOT)


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    argv, full, cwd = _command(args, **env)
    return subprocess.run(argv, cwd=cwd, env=full, capture_output=True, text=True, timeout=600)


@runs_in_background(lambda: _command(["--simulate", "--kernels-only", "--quick"], NUMBA_ENABLE_CUDASIM="1"))
def test_kernel_cases_match_cpu_under_simulator(request: pytest.FixtureRequest) -> None:
    """(Started when collection ends, beside the rest of the suite: tests/background_runs.py.)"""
    proc = finished(request.node.nodeid, request.function)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "FAILED" not in proc.stdout


#: where the end-to-end run writes its datasets and results (one per test process)
_E2E_ROOT = Path(tempfile.gettempdir()) / f"bench_gpu_e2e_{os.getpid()}"
_E2E_SIZES = {"mixed": 1000, "embeddings": 100, "nested": 400}
_E2E_ENGINES = ["scan_device", "to_table_gpu", "pylance_table", "pylance_upload", "cpu"]


def _e2e_command() -> Command | None:
    if importlib.util.find_spec("lance") is None:
        return None
    sizes = ["--rows", str(_E2E_SIZES["mixed"]), "--emb-rows", str(_E2E_SIZES["embeddings"]), "--nested-rows", str(_E2E_SIZES["nested"])]
    return _command(["--simulate", "--e2e-only", *sizes, "--engines", ",".join(_E2E_ENGINES), "--data", str(_E2E_ROOT / "data"),
                     "--results-dir", str(_E2E_ROOT / "res")], NUMBA_ENABLE_CUDASIM="1")


@runs_in_background(_e2e_command)
def test_end_to_end_rows_of_every_dataset_under_simulator(request: pytest.FixtureRequest) -> None:
    """Every dataset, the nested one included, read by each engine that runs without CuPy and
    cuDF (no CPU fallback on the device path), its phases, and ``to_table(device="gpu")``
    equal to pylance; the CuPy rows are listed as not run, with the reason."""
    pytest.importorskip("lance")
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        proc = finished(request.node.nodeid, request.function)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        res = json.loads((_E2E_ROOT / "res" / "gpu_simulator.json").read_text())
        nested = pq.read_table(_E2E_ROOT / "data" / f"nested_{_E2E_SIZES['nested']}.parquet")  # the rows of the Lance copy
    finally:
        shutil.rmtree(_E2E_ROOT, ignore_errors=True)
    rows = {(r["dataset"], r["engine"]): r for r in res["e2e"]}
    assert {d for d, _e in rows} == set(_E2E_SIZES)
    for (dataset, engine), row in rows.items():
        assert row["rows"] == _E2E_SIZES[dataset] and "error" not in row, row
        if engine == "pylance_upload":
            assert "simulator" in row["not_run"], row
        else:
            assert row["s"] > 0, row
        if engine in ("scan_device", "to_table_gpu"):
            assert "fallbacks" not in row, row  # lists and structs decode on the (simulated) device
    for dataset, n in _E2E_SIZES.items():
        ph = res["meta"]["phases"][dataset]
        assert ph["rows"] == n and ph["units"] >= 1 and ph["decode_s"] > 0, ph
        assert res["meta"]["checks"][dataset] == "yes"
    types = {f.name: f.type for f in nested.schema}
    assert types["li"].value_type == pa.int64() and types["ls"].value_type == pa.string()
    assert [(f.name, str(f.type.value_type) if pa.types.is_list(f.type) else str(f.type)) for f in types["st"]] == [
        ("a", "int32"), ("b", "string"), ("c", "float")]
    assert types["lli"].value_type.value_type == pa.int32()
    for name in ("li", "ls", "st", "lli"):  # nulls at every level
        col = nested.column(name).combine_chunks()
        assert col.null_count > 0, name
        inner = col.flatten() if name != "st" else col.field("c")
        assert inner.null_count > 0, name
    assert nested.column("lli").combine_chunks().flatten().flatten().null_count > 0
    assert nested.column("st").combine_chunks().field("c").flatten().null_count > 0


def test_without_a_gpu_exits_2_with_a_reason() -> None:
    from lance_gpu._device import gpu_unusable_reason

    if gpu_unusable_reason() is None:
        pytest.skip("a usable GPU is present: the benchmark would run")
    proc = _run(["--quick"], NUMBA_ENABLE_CUDASIM="0")
    assert proc.returncode == 2
    assert "no usable GPU" in proc.stderr + proc.stdout


_PHASES = r"""
import sys, tempfile
import numpy as np, pyarrow as pa, lance
sys.path.insert(0, "benchmarks")
import bench_gpu
import lance_gpu._device as device_mod
from numba import cuda
from lance_gpu.gpu import memory_limit

device_mod.gpu_unusable_reason = lambda: None  # the simulator stands in for the device
uri = tempfile.mkdtemp() + "/phases.lance"
n = 3000
lance.write_dataset(pa.table({"id": np.arange(n), "s": [f"v{i % 97}" for i in range(n)]}), uri, max_rows_per_file=1000)
with memory_limit(1):  # one (fragment, field) per unit
    ph = bench_gpu.phases(uri, cuda.synchronize)
assert ph["rows"] == n and ph["units"] == 6, ph
assert ph["staged_mb"] > 0 and ph["stage_s"] > 0 and ph["decode_s"] > 0 and ph["wall_s"] > 0, ph
assert 0 <= ph["overlap_s"] <= ph["stage_s"] + ph["decode_s"], ph
print("phases ok", ph)
"""


def test_phase_breakdown_under_simulator() -> None:
    pytest.importorskip("lance")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-c", _PHASES], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "phases ok" in proc.stdout
