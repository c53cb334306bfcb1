# SPDX-License-Identifier: Apache-2.0
"""[GPU / CUDA simulator] Exact nearest-neighbour search on the device (``nearest=`` with
``device="gpu"``): the vectors decoded into device memory, distances and the running top-k
computed there.  Each search is compared with pylance and with lance_gpu's CPU search over the
same pylance-written data (several fragments, deletions, null vectors): ids exactly, distances
to float tolerance.  Run under the simulator::

    NUMBA_ENABLE_CUDASIM=1 LANCE_GPU_TEST_SIM_DEVICE=1 python3 -m pytest -m gpu tests/test_search_gpu.py
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu

lance = pytest.importorskip("lance")
pytestmark = pytest.mark.gpu

DIM = 8
ROWS = 240


def _vectors(values: np.ndarray, typ: pa.DataType, null_rows: tuple[int, ...] = ()) -> pa.FixedSizeListArray:
    mask = np.zeros(values.shape[0], dtype=bool)
    mask[list(null_rows)] = True
    flat = pa.array(values.ravel(), type=typ)
    return pa.FixedSizeListArray.from_arrays(flat, values.shape[1], mask=pa.array(mask) if null_rows else None)


def _write(path: str, typ: pa.DataType, np_type: type, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np_type is np.uint8:
        values = rng.integers(0, 256, (ROWS, DIM)).astype(np.uint8)
    else:
        values = rng.standard_normal((ROWS, DIM)).astype(np_type)
    values[11] = values[10]  # an exact tie
    table = pa.table({
        "id": pa.array(np.arange(ROWS, dtype=np.int64)),
        "vec": _vectors(values, typ, null_rows=(5, 130)),
        "cat": pa.array([f"c{i % 5}" for i in range(ROWS)]),
    })
    ds = lance.write_dataset(table, path, max_rows_per_file=70)
    ds.delete("id IN (3, 71, 72, 200)")
    return values


@pytest.fixture(scope="module")
def f32(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    path = str(tmp_path_factory.mktemp("gsearch") / "f32")
    return path, _write(path, pa.float32(), np.float32)


def _three(path: str, **kwargs: object) -> tuple[pa.Table, pa.Table, pa.Table]:
    """pylance's, our CPU search's and our GPU search's result of one call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = lance.dataset(path).to_table(**kwargs)
        cpu = lance_gpu.dataset(path, device="cpu").to_table(**kwargs)
        gpu = lance_gpu.dataset(path, device="gpu").to_table(**kwargs)
    return theirs, cpu, gpu


def _same(expected: pa.Table, got: pa.Table, tol: float = 1e-4) -> None:
    assert got.schema == expected.schema
    assert got.num_rows == expected.num_rows
    assert got.drop_columns(["_distance"]).equals(expected.drop_columns(["_distance"]))
    np.testing.assert_allclose(got["_distance"].to_numpy(), expected["_distance"].to_numpy(), rtol=tol, atol=tol)


def _check(path: str, tol: float = 1e-4, **kwargs: object) -> pa.Table:
    theirs, cpu, gpu = _three(path, **kwargs)
    _same(theirs, gpu, tol)
    _same(cpu, gpu, tol)
    return gpu


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_metrics_one_and_several_queries(f32: tuple[str, np.ndarray], metric: str) -> None:
    path, values = f32
    _check(path, nearest={"column": "vec", "q": values[10], "k": 6, "metric": metric})
    q = np.stack([values[42], -values[7], values[100] * 0.3])
    got = _check(path, nearest={"column": "vec", "q": q, "k": 4, "metric": metric}, with_row_id=True)
    assert got["query_index"].to_pylist() == [0] * 4 + [1] * 4 + [2] * 4


@pytest.mark.parametrize("prefilter", [True, False])
def test_filters_limit_offset_projection(f32: tuple[str, np.ndarray], prefilter: bool) -> None:
    path, values = f32
    nearest = {"column": "vec", "q": values[60], "k": 9}
    _check(path, nearest=nearest, filter="cat = 'c2' OR id > 190", prefilter=prefilter, columns=["id", "cat"])
    _check(path, nearest=nearest, filter="id > 100", prefilter=prefilter, limit=4, offset=2, with_row_id=True)
    _check(path, nearest=nearest, filter="id < 0", prefilter=prefilter)


def test_k_past_the_rows_and_ties_across_windows(f32: tuple[str, np.ndarray], monkeypatch: pytest.MonkeyPatch) -> None:
    """k above the live rows returns every non-null vector; with windows of a few rows (many
    merges of the running top-k, as data larger than the memory budget streams) and k cutting
    through exact ties spread over fragments, the rows and their order are pylance's."""
    from lance_gpu.gpu import memory_limit
    from lance_gpu.scan import nearest_device

    path, values = f32
    got = _check(path, nearest={"column": "vec", "q": values[0], "k": 1000}, columns=["id"])
    assert got.num_rows == ROWS - 4 - 2
    monkeypatch.setattr(nearest_device, "MIN_WINDOW_ROWS", 1)
    with memory_limit(20_000):  # windows of ~33 rows: a fragment spans several
        assert nearest_device.window_rows(DIM * 4, 1, 25, 20_000) < 40
        _check(path, nearest={"column": "vec", "q": values[33], "k": 25, "metric": "cosine"}, filter="id > 20",
               prefilter=True)


def test_ties(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from lance_gpu.gpu import memory_limit
    from lance_gpu.scan import nearest_device

    path = str(tmp_path / "t")  # type: ignore[operator]
    values = np.random.default_rng(4).integers(0, 3, (300, 3)).astype(np.float32)
    lance.write_dataset(pa.table({"id": np.arange(300), "vec": _vectors(values, pa.float32())}), path,
                        max_rows_per_file=60)
    monkeypatch.setattr(nearest_device, "MIN_WINDOW_ROWS", 1)
    with memory_limit(30_000):
        for k in (5, 40):
            _check(path, nearest={"column": "vec", "q": values[0], "k": k}, columns=["id"])


@pytest.mark.parametrize(("typ", "np_type", "metric"), [
    (pa.float16(), np.float16, "l2"),
    (pa.float64(), np.float64, "cosine"),
    (pa.uint8(), np.uint8, "hamming"),
])
def test_element_types(tmp_path: object, typ: pa.DataType, np_type: type, metric: str) -> None:
    path = str(tmp_path / "v")  # type: ignore[operator]
    values = _write(path, typ, np_type, seed=3)
    theirs, cpu, gpu = _three(path, nearest={"column": "vec", "q": values[77], "k": 8, "metric": metric})
    _same(cpu, gpu)
    if np_type is np.float16:  # float16 sums round differently in pylance: its distances at float16 precision
        np.testing.assert_allclose(gpu["_distance"].to_numpy(), theirs["_distance"].to_numpy(), rtol=2e-2, atol=2e-2)
    else:
        _same(theirs, gpu)


def test_distance_range(f32: tuple[str, np.ndarray]) -> None:
    path, values = f32
    for rng in ((1.0, 6.0), (None, 4.0), (8.0, None)):
        _check(path, nearest={"column": "vec", "q": values[15], "k": 7, "distance_range": rng})


def test_nan_inf_and_zero_vectors(tmp_path: object) -> None:
    path = str(tmp_path / "nan")  # type: ignore[operator]
    values = np.array([[1, 1], [np.nan, 1], [2, 2], [np.inf, 0], [0, 0], [3, -1]], np.float32)
    lance.write_dataset(pa.table({"id": np.arange(6), "vec": _vectors(values, pa.float32())}), path)
    for metric in ("l2", "cosine", "dot"):
        theirs, cpu, gpu = _three(path, nearest={"column": "vec", "q": np.array([1, 1], np.float32), "k": 6, "metric": metric})
        assert gpu.equals(theirs), metric
        assert gpu.equals(cpu), metric


def test_struct_field_and_to_batches(tmp_path: object) -> None:
    path = str(tmp_path / "st")  # type: ignore[operator]
    values = np.random.default_rng(2).standard_normal((120, 4)).astype(np.float32)
    table = pa.table({"id": np.arange(120),
                      "st": pa.StructArray.from_arrays([_vectors(values, pa.float32()), pa.array(np.arange(120) % 3)], ["v", "g"])})
    lance.write_dataset(table, path, max_rows_per_file=50)
    _check(path, nearest={"column": "st.v", "q": values[17], "k": 5}, filter="st.g = 1", prefilter=True)
    nearest = {"column": "st.v", "q": values[3], "k": 5}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = pa.Table.from_batches(list(lance.dataset(path).to_batches(nearest=nearest)))
        ours = pa.Table.from_batches(list(lance_gpu.dataset(path).to_batches(nearest=nearest, device="gpu")))
    _same(theirs, ours)


BAD = [
    {"column": "vec", "q": np.zeros(DIM - 1, np.float32), "k": 3},
    {"column": "vec", "q": np.zeros(DIM, np.float32), "k": 0},
    {"column": "vec", "q": np.zeros(DIM, np.float32), "k": 3, "metric": "manhattan"},
    {"column": "vec", "q": np.zeros(DIM, np.float32), "k": 3, "metric": "hamming"},
    {"column": "id", "q": np.zeros(DIM, np.float32), "k": 3},
    {"column": "vec", "q": np.zeros(DIM, np.float32), "k": 3, "distance_range": [0.0, 1.0]},
]


@pytest.mark.parametrize("nearest", BAD)
def test_bad_input_on_the_device_path(f32: tuple[str, np.ndarray], nearest: dict) -> None:
    path, _ = f32
    with pytest.raises(Exception) as theirs:  # noqa: PT011 - the class is what is compared
        lance.dataset(path).to_table(nearest=nearest)
    with pytest.raises(lance_gpu.errors.LanceGpuError) as ours:
        lance_gpu.dataset(path, device="gpu").to_table(nearest=nearest)
    assert isinstance(ours.value, type(theirs.value)), (type(theirs.value), ours.value)


def test_vectors_stay_on_the_device(f32: tuple[str, np.ndarray], monkeypatch: pytest.MonkeyPatch) -> None:
    """No decoded vector column is copied to the host: the search never calls
    ``DeviceColumn.to_arrow`` on the vector column (the winning rows' columns are read apart)."""
    from lance_gpu.gpu.columns import DeviceColumn

    path, values = f32
    copied: list[pa.DataType] = []
    original = DeviceColumn.to_arrow

    def spy(self: DeviceColumn) -> pa.Array:
        copied.append(self.type)
        return original(self)

    monkeypatch.setattr(DeviceColumn, "to_arrow", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = lance_gpu.dataset(path, device="gpu").to_table(nearest={"column": "vec", "q": values[9], "k": 5}, columns=["id"])
    assert out.num_rows == 5
    assert not [t for t in copied if pa.types.is_fixed_size_list(t)], copied


# -- the kernels on their own ----------------------------------------------------------------


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot", "hamming"])
def test_distance_tile_kernel(metric: str) -> None:
    from cuda_kernels._device import to_host
    from cuda_kernels.distance import distance_tile_gpu

    rng = np.random.default_rng(1)
    if metric == "hamming":
        x = rng.integers(0, 256, (37, 5)).astype(np.uint8)
        q = rng.integers(0, 256, (3, 5)).astype(np.uint8)
        want = np.unpackbits(x[None, :, :] ^ q[:, None, :], axis=2).sum(axis=2).astype(np.float32)
    else:
        x = rng.standard_normal((37, 21)).astype(np.float32)
        q = rng.standard_normal((3, 21)).astype(np.float32)
        dot = q.astype(np.float64) @ x.T.astype(np.float64)
        if metric == "l2":
            want = ((x[None, :, :].astype(np.float64) - q[:, None, :]) ** 2).sum(axis=2)
        elif metric == "dot":
            want = 1 - dot
        else:
            want = 1 - dot / np.linalg.norm(q.astype(np.float64), axis=1)[:, None] / np.linalg.norm(x.astype(np.float64), axis=1)[None, :]
    valid = np.ones(37, np.uint8)
    valid[4] = 0
    got = to_host(distance_tile_gpu(x, q, metric, valid, dims_per_step=4))
    assert got.shape == (3, 37)
    assert np.isnan(got[:, 4]).all()
    keep = valid.astype(bool)
    np.testing.assert_allclose(got[:, keep], want[:, keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [9, 60])
def test_topk_merge_kernel(k: int) -> None:
    """Several windows merged (k below and above a window's rows): the k smallest
    (distance, seq) of all, NaN and out-of-range dropped, ties by seq; sortable keys round-trip
    the float32 distances (-0.0 as 0.0)."""
    from cuda_kernels.distance import TopKState, keys_to_distances, topk_merge_gpu

    rng = np.random.default_rng(7 + k)
    nq = 2
    dist = np.round(rng.standard_normal((nq, 150)), 1).astype(np.float32)  # many ties
    dist[:, 5] = np.nan
    dist[0, 6] = -0.0
    seq = rng.permutation(150).astype(np.uint32)
    addr = (seq.astype(np.uint64) + np.uint64(1 << 32))
    for lower, upper in ((None, None), (-0.5, 1.0)):
        state = TopKState(nq, k)
        for start in range(0, 150, 40):
            stop = min(150, start + 40)
            part = np.ascontiguousarray(dist[:, start:stop])
            topk_merge_gpu(state, part, addr[start:stop], seq[start:stop], lower, upper)
        for j, (keys, pay) in enumerate(state.to_host()):
            d = dist[j].astype(np.float64)
            ok = ~np.isnan(d)
            if lower is not None:
                ok &= (d >= np.float32(lower)) & (d < np.float32(upper))
            idx = np.flatnonzero(ok)
            order = idx[np.lexsort((seq[idx], d[idx] + 0.0))][:k]
            assert pay.tolist() == addr[order].tolist()
            np.testing.assert_array_equal(keys_to_distances(keys), dist[j, order] + np.float32(0))


def test_device_results(f32: tuple[str, np.ndarray]) -> None:
    """``to_device_batches(nearest=...)``: one device table of the search's rows (the way to
    ``to_cudf`` / ``to_cupy``), the same rows as ``to_table``."""
    from lance_gpu.gpu.columns import DeviceColumn

    path, values = f32
    ds = lance_gpu.dataset(path, device="gpu")
    nearest = {"column": "vec", "q": np.stack([values[1], values[2]]), "k": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (dt,) = list(ds.to_device_batches(columns=["id"], nearest=nearest, filter="id > 10", prefilter=True))
        want = ds.to_table(columns=["id"], nearest=nearest, filter="id > 10", prefilter=True)
    assert dt.names == want.column_names == ["query_index", "id", "_distance"]
    assert isinstance(dt.column("_distance"), DeviceColumn)
    assert pa.Table.from_arrays(dt.to_arrow().columns, schema=want.schema).equals(want)  # (DeviceTable keeps no nullability)


def test_multivector(tmp_path: object) -> None:
    """Multivector columns searched on the device (each row's vectors scored, the nearest per
    query vector summed): pylance's rows, with null and empty rows, filters and a range."""
    path = str(tmp_path / "mv")  # type: ignore[operator]
    rng = np.random.default_rng(5)
    rows: list = [[list(map(float, r)) for r in rng.standard_normal((int(rng.integers(1, 4)), 4)).astype(np.float32)]
                  for _ in range(90)]
    rows[3] = None
    rows[4] = []
    lance.write_dataset(pa.table({"id": np.arange(90), "mv": pa.array(rows, pa.list_(pa.list_(pa.float32(), 4)))}), path,
                        max_rows_per_file=40)
    q = np.array(rows[10], np.float32)
    for metric in ("l2", "cosine", "dot"):
        _check(path, tol=1e-3, nearest={"column": "mv", "q": q, "k": 5, "metric": metric})
    _check(path, tol=1e-3, nearest={"column": "mv", "q": q[0], "k": 4}, filter="id > 30", prefilter=True)
    _check(path, tol=1e-3, nearest={"column": "mv", "q": q, "k": 4, "metric": "cosine", "distance_range": (0.3, None)},
           filter="id < 60")


def test_nulls_inside_vectors(tmp_path: object) -> None:
    """Nulls inside a vector count as 0 (a column the GPU decoder leaves to the CPU reader is
    uploaded for the search)."""
    path = str(tmp_path / "z")  # type: ignore[operator]
    flat = pa.array([1, 1, 0, 0, 1, None, 2, 2, 3, -1], type=pa.float32())
    lance.write_dataset(pa.table({"id": np.arange(5), "vec": pa.FixedSizeListArray.from_arrays(flat, 2)}), path)
    for metric in ("l2", "cosine", "dot"):
        _check(path, nearest={"column": "vec", "q": np.ones(2, np.float32), "k": 5, "metric": metric})


def test_segment_min_sum_kernel() -> None:
    from cuda_kernels._device import to_host
    from cuda_kernels.distance import segment_min_sum_gpu

    dist = np.array([[3, 1, 2, 5, np.nan, 4], [0, 7, 1, 2, 2, 9]], np.float32)
    offsets = np.array([0, 3, 3, 4, 6], np.int64)  # rows: [0, 3), empty, [3, 4), [4, 6)
    out = to_host(segment_min_sum_gpu(dist, offsets, np.zeros((1, 4), np.float32), np.array([1, 1, 0, 1], np.uint8)))
    assert out[0, 0] == 1 + 0
    assert np.isnan(out[0, 1:]).all()  # empty, null, a NaN distance
    out = to_host(segment_min_sum_gpu(dist[:, :4], offsets[:4], np.zeros((1, 3), np.float32)))
    np.testing.assert_array_equal(out[0], [1.0, np.nan, 7.0])


def test_stable_row_ids_after_update(tmp_path: object) -> None:
    """Stable row ids with a row moved by an update: ``_rowid`` / ``_rowaddr`` and a pre-filter on
    ``_rowid`` as pylance's (ties order by address on the device too)."""
    path = str(tmp_path / "s")  # type: ignore[operator]
    values = np.random.default_rng(9).standard_normal((100, 8)).astype(np.float32)
    ds = lance.write_dataset(pa.table({"id": np.arange(100), "vec": _vectors(values, pa.float32())}), path,
                             max_rows_per_file=30, enable_stable_row_ids=True)
    ds.delete("id < 5")
    ds.update({"id": "id + 1000"}, where="id = 50")
    nearest = {"column": "vec", "q": values[50], "k": 6}
    _check(path, nearest=nearest, with_row_id=True, with_row_address=True)
    _check(path, nearest=nearest, with_row_id=True, filter="_rowid > 10", prefilter=True)


def test_multivector_hamming(tmp_path: object) -> None:
    path = str(tmp_path / "mvu8")  # type: ignore[operator]
    rng = np.random.default_rng(0)
    rows: list = [[list(map(int, r)) for r in rng.integers(0, 256, (int(rng.integers(1, 4)), 4))] for _ in range(60)]
    rows[9] = None
    lance.write_dataset(pa.table({"id": np.arange(60), "mv": pa.array(rows, pa.list_(pa.list_(pa.uint8(), 4)))}), path,
                        max_rows_per_file=25)
    _check(path, nearest={"column": "mv", "q": np.array(rows[2], np.uint8), "k": 6, "metric": "hamming"}, columns=["id"])


def test_multivector_null_vectors_inside_rows(tmp_path: object) -> None:
    path = str(tmp_path / "mvn")  # type: ignore[operator]
    rows = [[[1.0, 0, 0, 0], None, [0, 1.0, 0, 0]], [[0, 0, 1.0, 0]], [None], [[0.5, 0.5, 0, 0]],
            [[0, 0, 0, 1.0], [1.0, 1.0, 0, 0]], None]
    lance.write_dataset(pa.table({"id": np.arange(6), "mv": pa.array(rows, pa.list_(pa.list_(pa.float32(), 4)))}), path)
    q = np.array([[1, 0, 0, 0], [0, 0, 1, 0]], np.float32)
    for metric in ("l2", "cosine", "dot"):
        _check(path, nearest={"column": "mv", "q": q, "k": 6, "metric": metric})


def test_empty_and_fully_deleted(tmp_path: object) -> None:
    path = str(tmp_path / "e")  # type: ignore[operator]
    values = np.ones((20, 4), np.float32)
    ds = lance.write_dataset(pa.table({"id": np.arange(20), "vec": _vectors(values, pa.float32())}), path)
    ds.delete("id >= 0")
    _check(path, nearest={"column": "vec", "q": values[0], "k": 3})
    empty = str(tmp_path / "none")  # type: ignore[operator]
    lance.write_dataset(pa.table({"id": pa.array([], pa.int64()), "vec": _vectors(np.zeros((0, 4), np.float32), pa.float32())}),
                        empty)
    _check(empty, nearest={"column": "vec", "q": values[0], "k": 3})
