# SPDX-License-Identifier: Apache-2.0
"""``to_cudf`` / ``read_cudf`` on a GPU with cuDF (``gpu`` marker; skipped where no GPU is usable
or cuDF is not installed): against ``cudf.DataFrame.from_arrow`` of pylance's table and
``cudf.read_parquet`` of the same rows, for every column kind (flat, strings, decimals,
embeddings, lists, structs, lists of lists, nulls at every level); the frame's buffers are the
read's own (:func:`lance_gpu.gpu._cudf.combined_to_plc` wraps them: same device pointers, no
copy); and under an RMM pool the read allocates from that pool."""

from __future__ import annotations

import gc
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pytest

from lance_gpu.errors import CpuDecodeWarning

pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))

COLUMNS = ["id", "i32n", "f64", "b", "s", "cat", "runs", "ts", "dec", "emb", "embn", "long", "li", "llong", "st", "const", "null_s"]
NESTED = ["id", "li", "ls", "st", "lli"]


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> str:
    lance = pytest.importorskip("lance")
    import gpu_datasets as gd

    return gd.write_rich(lance, tmp_path_factory.mktemp("cudf"), "2.2")


def test_to_cudf_equals_from_arrow_of_pylance(rich: str) -> None:
    cudf = pytest.importorskip("cudf")
    import lance

    import lance_gpu
    from lance_gpu.gpu._cudf import cudf_arrow_table

    ref = cudf.DataFrame.from_arrow(cudf_arrow_table(lance.dataset(rich).to_table(columns=COLUMNS)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CpuDecodeWarning)  # no column falls back after a failed zero-copy build
        got = lance_gpu.dataset(rich).to_cudf(columns=COLUMNS)
    _assert_same_frame(got, ref)
    filtered = lance_gpu.read_cudf(rich, columns=["id", "s", "emb"], filter="id % 4 = 1")
    ref = cudf.DataFrame.from_arrow(cudf_arrow_table(lance.dataset(rich).to_table(columns=["id", "s", "emb"], filter="id % 4 = 1")))
    _assert_same_frame(filtered, ref)


@pytest.fixture(scope="module")
def nested(tmp_path_factory: pytest.TempPathFactory) -> str:
    lance = pytest.importorskip("lance")
    import gpu_datasets as gd

    return gd.write_nested(lance, tmp_path_factory.mktemp("cudf_nested"))


@pytest.mark.parametrize("which", ["rich", "nested"])
def test_to_cudf_equals_read_parquet_of_the_same_rows(which: str, rich: str, nested: str, tmp_path: Path) -> None:
    """Every column kind: ``to_cudf`` equals ``cudf.read_parquet`` of pylance's rows written
    to Parquet by pyarrow (cuDF's own reader as the reference: names and values, nulls at
    every level; decimals compared as values, since cuDF's Parquet reader picks the narrowest
    decimal width for the precision)."""
    cudf = pytest.importorskip("cudf")
    import lance
    import pyarrow.parquet as pq

    import lance_gpu

    uri, columns = (rich, COLUMNS) if which == "rich" else (nested, NESTED)
    parquet = tmp_path / f"{which}.parquet"
    pq.write_table(lance.dataset(uri).to_table(columns=columns), parquet)
    ref = cudf.read_parquet(parquet)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CpuDecodeWarning)
        got = lance_gpu.dataset(uri).to_cudf(columns=columns)
    assert list(got.columns) == list(ref.columns) == columns
    assert len(got) == len(ref)
    for name in columns:
        g, r = got[name].to_arrow(), ref[name].to_arrow()
        if not g.type.equals(r.type):
            assert pa.types.is_decimal(g.type) and pa.types.is_decimal(r.type), (name, g.type, r.type)
            r = r.cast(g.type)
        assert g.equals(r), name


@pytest.mark.parametrize("which", ["rich", "nested"])
def test_to_cudf_wraps_the_reads_own_buffers(which: str, rich: str, nested: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The frame ``to_cudf`` returns holds the buffers the read decoded into (the same device
    pointers, down to every child, offsets and mask): nothing is copied on the way to cuDF."""
    pytest.importorskip("cudf")
    from cudf_buffers import assert_same_buffers, plc_column

    import lance_gpu
    from lance_gpu.scan.scanner import LanceScanner

    uri, columns = (rich, COLUMNS) if which == "rich" else (nested, NESTED)
    read: list = []
    real = LanceScanner.to_cudf_columns

    def capture(self):
        out = real(self)
        read.append(out)
        return out

    monkeypatch.setattr(LanceScanner, "to_cudf_columns", capture)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CpuDecodeWarning)
        frame = lance_gpu.dataset(uri).to_cudf(columns=columns)
    (cols, rows), = read
    assert len(frame) == rows
    compared = {name: assert_same_buffers(plc_column(frame[name]), col, name) for name, col in zip(columns, cols, strict=True)}
    assert all(n > 0 for name, n in compared.items() if name != "null_s"), compared


def test_to_cudf_allocates_from_an_rmm_pool(rich: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an RMM pool as the current device resource (as cuDF users set one), the read's
    memory comes from it (``lance_gpu.gpu.memory.use_rmm_if_available`` points CuPy at RMM):
    the pool's live bytes cover every buffer of the frame, and the frame is right."""
    cudf = pytest.importorskip("cudf")
    rmm = pytest.importorskip("rmm")
    import cupy as cp
    import lance
    from cudf_buffers import frame_bytes

    import lance_gpu
    from lance_gpu.gpu import _cudf, memory

    previous, allocator = rmm.mr.get_current_device_resource(), cp.cuda.get_allocator()
    tracked = rmm.mr.TrackingResourceAdaptor(rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=1 << 28))
    monkeypatch.setattr(memory, "_allocator_done", [False])  # decide again, under this resource
    cp.get_default_memory_pool().free_all_blocks()
    rmm.mr.set_current_device_resource(tracked)
    try:
        frame = lance_gpu.dataset(rich).to_cudf(columns=COLUMNS)
        assert memory.use_rmm_if_available()
        live, needed = tracked.get_allocated_bytes(), frame_bytes(frame)
        assert needed > 0 and live >= needed, (live, needed)
        ref = cudf.DataFrame.from_arrow(_cudf.cudf_arrow_table(lance.dataset(rich).to_table(columns=COLUMNS)))
        _assert_same_frame(frame, ref)
        del frame, ref
        gc.collect()
    finally:
        rmm.mr.set_current_device_resource(previous)
        cp.cuda.set_allocator(allocator)


def _assert_same_frame(got, ref) -> None:
    """Same names, cuDF dtypes and values (compared as Arrow: exact, nulls included, and free
    of ``cudf.testing``'s pandas round trip, which some cuDF / pandas pairs break for decimals)."""
    assert list(got.columns) == list(ref.columns)
    assert [str(t) for t in got.dtypes] == [str(t) for t in ref.dtypes]
    assert got.to_arrow().equals(ref.to_arrow())
