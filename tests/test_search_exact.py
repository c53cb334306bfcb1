# SPDX-License-Identifier: Apache-2.0
"""Exact nearest-neighbour search (``nearest=``), differential against pylance 14.

Each test runs the same call on pylance and lance_gpu over a pylance-written dataset of
embeddings (several fragments, deleted rows, null vectors) and compares the results: the
schema, every non-distance column exactly (ids in order), ``_distance`` to float tolerance;
and, for refused input, the exception class.
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu

lance = pytest.importorskip("lance")

DIM = 16
ROWS = 600


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
        "vec": _vectors(values, typ, null_rows=(5, 250)),
        "cat": pa.array([f"c{i % 7}" for i in range(ROWS)]),
    })
    ds = lance.write_dataset(table, path, max_rows_per_file=150)
    ds.delete("id IN (3, 160, 161, 400)")
    return values


@pytest.fixture(scope="module")
def f32(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    path = str(tmp_path_factory.mktemp("search") / "f32")
    return path, _write(path, pa.float32(), np.float32)


def _both(path: str, **kwargs: object) -> tuple[pa.Table, pa.Table]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = lance.dataset(path).to_table(**kwargs)
        ours = lance_gpu.dataset(path).to_table(**kwargs)
    return theirs, ours


def _same(theirs: pa.Table, ours: pa.Table, rtol: float = 1e-4, atol: float = 1e-4) -> None:
    assert ours.schema == theirs.schema
    assert ours.num_rows == theirs.num_rows
    assert ours.drop_columns(["_distance"]).equals(theirs.drop_columns(["_distance"]))
    np.testing.assert_allclose(ours["_distance"].to_numpy(), theirs["_distance"].to_numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot", "L2", "euclidean", None])
@pytest.mark.parametrize("k", [1, 7, 50])
def test_metrics(f32: tuple[str, np.ndarray], metric: str | None, k: int) -> None:
    path, values = f32
    for row in (10, 42, 599):
        theirs, ours = _both(path, nearest={"column": "vec", "q": values[row], "k": k, "metric": metric})
        _same(theirs, ours)


def test_query_not_in_data_and_other_dtype(f32: tuple[str, np.ndarray]) -> None:
    path, _ = f32
    q = np.random.default_rng(5).standard_normal(DIM)
    for query in (q, q.astype(np.float32), [float(x) for x in q], pa.array(q.astype(np.float32))):
        _same(*_both(path, nearest={"column": "vec", "q": query, "k": 9}))


def test_k_larger_than_rows(f32: tuple[str, np.ndarray]) -> None:
    path, values = f32
    theirs, ours = _both(path, nearest={"column": "vec", "q": values[0], "k": 5000})
    assert theirs.num_rows == ROWS - 4 - 2  # deletions and null vectors are not returned
    _same(theirs, ours)


def test_default_k_and_index_options(f32: tuple[str, np.ndarray]) -> None:
    path, values = f32
    _same(*_both(path, nearest={"column": "vec", "q": values[1]}))
    _same(*_both(path, nearest={"column": "vec", "q": values[1], "k": 4, "nprobes": 3, "refine_factor": 2,
                                "use_index": False}))


@pytest.mark.parametrize("columns", [["id"], ["cat", "_distance"], ["_distance", "cat"], ["_rowid", "id"], {"x": "id * 2"}])
def test_projection(f32: tuple[str, np.ndarray], columns: object) -> None:
    path, values = f32
    _same(*_both(path, nearest={"column": "vec", "q": values[200], "k": 6}, columns=columns))


def test_row_id_and_address(f32: tuple[str, np.ndarray]) -> None:
    path, values = f32
    _same(*_both(path, nearest={"column": "vec", "q": values[300], "k": 6}, with_row_id=True, with_row_address=True))


@pytest.mark.parametrize("prefilter", [True, False])
@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_filter(f32: tuple[str, np.ndarray], prefilter: bool, metric: str) -> None:
    path, values = f32
    for flt in ("cat = 'c3'", "id > 300", "id < 0"):
        theirs, ours = _both(path, nearest={"column": "vec", "q": values[301], "k": 12, "metric": metric},
                             filter=flt, prefilter=prefilter)
        _same(theirs, ours)


def test_postfilter_returns_fewer_than_k(f32: tuple[str, np.ndarray]) -> None:
    path, values = f32
    theirs, ours = _both(path, nearest={"column": "vec", "q": values[20], "k": 10}, filter="cat = 'c1'", prefilter=False)
    assert theirs.num_rows < 10
    _same(theirs, ours)


@pytest.mark.parametrize(("limit", "offset"), [(3, None), (None, 2), (2, 4), (0, 0), (5, 20)])
def test_limit_offset(f32: tuple[str, np.ndarray], limit: int | None, offset: int | None) -> None:
    path, values = f32
    _same(*_both(path, nearest={"column": "vec", "q": values[50], "k": 8}, limit=limit, offset=offset))
    _same(*_both(path, nearest={"column": "vec", "q": values[50], "k": 8}, limit=limit, offset=offset,
                 filter="id > 100"))


def test_several_queries(f32: tuple[str, np.ndarray]) -> None:
    path, values = f32
    q = np.stack([values[1], values[2], -values[3]])
    _same(*_both(path, nearest={"column": "vec", "q": q, "k": 4}, with_row_id=True))
    _same(*_both(path, nearest={"column": "vec", "q": q, "k": 4}, columns=["id"], limit=6))


def test_to_batches_scanner_and_fragments(f32: tuple[str, np.ndarray]) -> None:
    path, values = f32
    nearest = {"column": "vec", "q": values[99], "k": 9}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pds, ds = lance.dataset(path), lance_gpu.dataset(path)
        theirs = pa.Table.from_batches(list(pds.to_batches(nearest=nearest)))
        ours = pa.Table.from_batches(list(ds.to_batches(nearest=nearest)))
        _same(theirs, ours)
        assert ds.scanner(nearest=nearest).projected_schema == pds.scanner(nearest=nearest).projected_schema
        assert ds.scanner(nearest=nearest).count_rows() == pds.scanner(nearest=nearest).count_rows()
        # pylance refuses a search over chosen fragments (ValueError)
        with pytest.raises(ValueError) as their_err:
            pds.scanner(nearest=nearest, fragments=pds.get_fragments()[1:3]).to_table()
        with pytest.raises(lance_gpu.errors.LanceGpuError) as our_err:
            ds.scanner(nearest=nearest, fragments=ds.get_fragments()[1:3]).to_table()
        assert isinstance(our_err.value, type(their_err.value))


@pytest.mark.parametrize(("typ", "np_type", "metrics"), [
    (pa.float16(), np.float16, ["l2", "cosine", "dot"]),
    (pa.float64(), np.float64, ["l2", "cosine", "dot"]),
    (pa.uint8(), np.uint8, ["hamming"]),
])
def test_element_types(tmp_path: object, typ: pa.DataType, np_type: type, metrics: list[str]) -> None:
    path = str(tmp_path / "v")  # type: ignore[operator]
    values = _write(path, typ, np_type, seed=3)
    for metric in metrics:
        for row in (0, 10, 333):
            # float16 sums round differently: compare at its precision
            tol = 2e-2 if np_type is np.float16 else 1e-4
            theirs, ours = _both(path, nearest={"column": "vec", "q": values[row], "k": 10, "metric": metric})
            assert ours.schema == theirs.schema
            np.testing.assert_allclose(ours["_distance"].to_numpy(), theirs["_distance"].to_numpy(), rtol=tol, atol=tol)
            if np_type is not np.float16:
                _same(theirs, ours)


def test_nulls_inside_vectors_and_zero_vector(tmp_path: object) -> None:
    path = str(tmp_path / "z")  # type: ignore[operator]
    flat = pa.array([1, 1, 0, 0, 1, None, 2, 2, 3, -1], type=pa.float32())
    vec = pa.FixedSizeListArray.from_arrays(flat, 2)
    lance.write_dataset(pa.table({"id": np.arange(5), "vec": vec}), path)
    for metric in ("l2", "cosine", "dot"):
        _same(*_both(path, nearest={"column": "vec", "q": np.ones(2, np.float32), "k": 5, "metric": metric}))


BAD = [
    ({"column": "vec", "q": np.zeros(DIM - 1, np.float32), "k": 3}, "dimension"),
    ({"column": "vec", "q": np.zeros(DIM, np.float32), "k": 0}, "k = 0"),
    ({"column": "vec", "q": np.zeros(DIM, np.float32), "k": -2}, "k < 0"),
    ({"column": "vec", "q": np.zeros(DIM, np.float32), "k": 2.5}, "k float"),
    ({"column": "vec", "q": np.zeros(DIM, np.float32), "k": 3, "metric": "manhattan"}, "metric"),
    ({"column": "vec", "q": np.zeros(DIM, np.float32), "k": 3, "metric": "hamming"}, "hamming on floats"),
    ({"column": "id", "q": np.zeros(DIM, np.float32), "k": 3}, "non-vector"),
    ({"column": "cat", "q": np.zeros(DIM, np.float32), "k": 3}, "string column"),
    ({"column": "nope", "q": np.zeros(DIM, np.float32), "k": 3}, "missing column"),
    ({"q": np.zeros(DIM, np.float32), "k": 3}, "no column"),
    ({"column": "vec", "k": 3}, "no q"),
    ({"column": "vec", "q": np.zeros(DIM, np.float32), "bogus": 1}, "unknown key"),
    (7, "not a mapping"),
    ({"column": "vec", "q": "abc", "k": 3}, "string query"),
    ({"column": "vec", "q": np.zeros((2, 2, DIM), np.float32), "k": 3}, "3-d query"),
    ({"column": "vec", "q": [], "k": 3}, "empty query"),
    ({"column": "vec", "q": [[0.0] * DIM, [0.0] * (DIM - 1)], "k": 3}, "ragged queries"),
    ({"column": None, "q": np.zeros(DIM, np.float32), "k": 3}, "column None"),
    ({"column": "vec", "q": np.zeros(DIM, np.float32), "k": 3, "metric": 5}, "metric int"),
]


@pytest.mark.parametrize(("nearest", "what"), BAD, ids=[w for _n, w in BAD])
def test_bad_input(f32: tuple[str, np.ndarray], nearest: object, what: str) -> None:
    path, _ = f32
    with pytest.raises(Exception) as theirs:  # noqa: PT011 - the class is what is compared
        lance.dataset(path).to_table(nearest=nearest)
    with pytest.raises(lance_gpu.errors.LanceGpuError) as ours:
        lance_gpu.dataset(path).to_table(nearest=nearest)
    assert isinstance(ours.value, type(theirs.value)), (what, type(theirs.value), ours.value)


def test_bad_scan_arguments(f32: tuple[str, np.ndarray]) -> None:
    """include_deleted_rows, a non-bool prefilter, and fragments' reads (which take no nearest)."""
    path, values = f32
    nearest = {"column": "vec", "q": values[0], "k": 3}
    pds, ds = lance.dataset(path), lance_gpu.dataset(path)
    calls = [
        (lambda d: d.to_table(nearest=nearest, with_row_id=True, include_deleted_rows=True)),
        (lambda d: d.to_table(nearest=nearest, prefilter="yes")),
        (lambda d: d.get_fragments()[0].to_table(nearest=nearest)),
        (lambda d: d.get_fragments()[0].scanner(nearest=nearest)),
        (lambda d: list(d.get_fragments()[0].to_batches(nearest=nearest))),
    ]
    for call in calls:
        with pytest.raises(Exception) as theirs:  # noqa: PT011
            call(pds)
        with pytest.raises(lance_gpu.errors.LanceGpuError) as ours:
            call(ds)
        assert isinstance(ours.value, type(theirs.value)), (type(theirs.value), ours.value)


def test_bad_element_type(tmp_path: object) -> None:
    path = str(tmp_path / "i8")  # type: ignore[operator]
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(8, dtype=np.int8)), 2)
    lance.write_dataset(pa.table({"vec": vec}), path)
    for metric in ("l2", "hamming"):
        nearest = {"column": "vec", "q": np.zeros(2, np.float32), "k": 1, "metric": metric}
        with pytest.raises(Exception) as theirs:  # noqa: PT011
            lance.dataset(path).to_table(nearest=nearest)
        with pytest.raises(lance_gpu.errors.LanceGpuError) as ours:
            lance_gpu.dataset(path).to_table(nearest=nearest)
        assert isinstance(ours.value, type(theirs.value))


def test_streams_in_blocks(f32: tuple[str, np.ndarray], monkeypatch: pytest.MonkeyPatch) -> None:
    """Small scoring blocks (the running top-k merged across many of them) give the same rows."""
    from lance_gpu.scan import flat_search as nearest_mod

    monkeypatch.setattr(nearest_mod, "BLOCK_ROWS", 32)
    path, values = f32
    for metric in ("l2", "cosine", "dot"):
        _same(*_both(path, nearest={"column": "vec", "q": values[77], "k": 25, "metric": metric},
                     filter="id > 30", prefilter=True))


def test_stable_row_ids_after_update(tmp_path: object) -> None:
    """With stable row ids (and a row moved by an update) ``_rowid`` / ``_rowaddr`` come out as pylance's."""
    path = str(tmp_path / "s")  # type: ignore[operator]
    values = np.random.default_rng(9).standard_normal((100, 8)).astype(np.float32)
    table = pa.table({"id": np.arange(100), "vec": _vectors(values, pa.float32())})
    ds = lance.write_dataset(table, path, max_rows_per_file=30, enable_stable_row_ids=True)
    ds.delete("id < 5")
    ds.update({"id": "id + 1000"}, where="id = 50")
    nearest = {"column": "vec", "q": values[50], "k": 6}
    _same(*_both(path, nearest=nearest, with_row_id=True, with_row_address=True))
    _same(*_both(path, nearest=nearest, with_row_id=True, filter="_rowid > 10", prefilter=True))
    _same(*_both(path, nearest=nearest, filter="id > 900", prefilter=False))


@pytest.mark.gpu
def test_gpu_decoded_vectors(f32: tuple[str, np.ndarray]) -> None:
    """``device="gpu"``: the vectors decode and are searched on the device (more in
    tests/test_search_gpu.py), giving pylance's rows."""
    path, values = f32
    pds, ds = lance.dataset(path), lance_gpu.dataset(path, device="gpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kwargs in ({}, {"filter": "id > 100", "prefilter": True}, {"filter": "id > 100", "with_row_id": True}):
            nearest = {"column": "vec", "q": values[123], "k": 7}
            _same(pds.to_table(nearest=nearest, **kwargs), ds.to_table(nearest=nearest, **kwargs))


def test_many_queries(f32: tuple[str, np.ndarray]) -> None:
    path, values = f32
    _same(*_both(path, nearest={"column": "vec", "q": values[::7] * 0.5, "k": 3}, columns=["id"]))


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_ties_across_fragments(tmp_path: object, metric: str) -> None:
    """Many equal distances, across fragments, with k cutting through them: pylance's rows and order."""
    path = str(tmp_path / "t")  # type: ignore[operator]
    values = np.random.default_rng(4).integers(0, 3, (3000, 4)).astype(np.float32)
    lance.write_dataset(pa.table({"id": np.arange(3000), "vec": _vectors(values, pa.float32())}), path,
                        max_rows_per_file=500)
    for k in (5, 40, 200):
        _same(*_both(path, nearest={"column": "vec", "q": values[0], "k": k, "metric": metric}, columns=["id"]))


def test_l2_large_norms(tmp_path: object) -> None:
    """Vectors far from the origin and close together (the expanded l2 form loses the differences in
    float32 rounding): the exact re-scoring still gives pylance's neighbours."""
    path = str(tmp_path / "big")  # type: ignore[operator]
    values = (1000 + np.random.default_rng(0).standard_normal((20000, 32)) * 0.01).astype(np.float32)
    lance.write_dataset(pa.table({"id": np.arange(20000), "vec": _vectors(values, pa.float32())}), path,
                        max_rows_per_file=5000)
    for k in (1, 10, 50):
        _same(*_both(path, nearest={"column": "vec", "q": values[7] + 0.001, "k": k}, columns=["id"]), rtol=1e-3)


def test_scoring_autoprojection_and_counts(f32: tuple[str, np.ndarray]) -> None:
    """disable_scoring_autoprojection drops an unnamed _distance; ds.count_rows ignores nearest (as
    pylance); head / to_reader / several batches' worth of rows come as pylance's."""
    path, values = f32
    nearest = {"column": "vec", "q": values[8], "k": 5}
    pds, ds = lance.dataset(path), lance_gpu.dataset(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kwargs in ({"columns": ["id"]}, {}, {"columns": ["id", "_distance"]}):
            theirs = pds.to_table(nearest=nearest, disable_scoring_autoprojection=True, **kwargs)
            ours = ds.to_table(nearest=nearest, disable_scoring_autoprojection=True, **kwargs)
            assert ours.schema == theirs.schema
            assert ours["id"].equals(theirs["id"])
        assert ds.count_rows(nearest=nearest) == pds.count_rows(nearest=nearest)
        assert ds.count_rows("id > 100", nearest=nearest) == pds.count_rows("id > 100", nearest=nearest)
        _same(pds.scanner(nearest=nearest).head(3), ds.scanner(nearest=nearest).head(3))
        _same(pds.head(2, nearest=nearest), ds.head(2, nearest=nearest))
        _same(pds.scanner(nearest=nearest).to_reader().read_all(), ds.scanner(nearest=nearest).to_reader().read_all())
        big = {"column": "vec", "q": values[8], "k": 400}
        assert [b.num_rows for b in ds.to_batches(nearest=big, batch_size=100)] == \
            [b.num_rows for b in pds.to_batches(nearest=big, batch_size=100)]


@pytest.mark.parametrize("flt", ["_distance < 18", "_distance < 18 AND id > 100", "_distance > 9.5 OR cat = 'c2'",
                                 "_rowid > 200"])
def test_postfilter_reads_distance(f32: tuple[str, np.ndarray], flt: str) -> None:
    """A post-filter may read _distance (each result judged on its own distance, several queries too);
    a pre-filter may not (ValueError, as pylance)."""
    path, values = f32
    q = np.stack([values[4], values[300] * 0.5])
    for kwargs in ({}, {"columns": ["id"]}, {"columns": ["id"], "disable_scoring_autoprojection": True},
                   {"limit": 5, "offset": 2}):
        _check = _same if "disable_scoring_autoprojection" not in kwargs else _same_ids
        _check(*_both(path, nearest={"column": "vec", "q": values[4], "k": 30}, filter=flt, **kwargs))
        _check(*_both(path, nearest={"column": "vec", "q": q, "k": 30}, filter=flt, **kwargs))
    if "_distance" in flt:
        with pytest.raises(ValueError) as theirs:
            lance.dataset(path).to_table(nearest={"column": "vec", "q": values[4], "k": 3}, filter=flt, prefilter=True)
        with pytest.raises(lance_gpu.errors.LanceGpuError) as ours:
            lance_gpu.dataset(path).to_table(nearest={"column": "vec", "q": values[4], "k": 3}, filter=flt, prefilter=True)
        assert isinstance(ours.value, type(theirs.value))


def _same_ids(theirs: pa.Table, ours: pa.Table) -> None:
    assert ours.schema == theirs.schema
    assert ours.equals(theirs)


def test_struct_field_vectors_and_other_list_columns(tmp_path: object) -> None:
    """A vector in a struct (dotted name) searches as pylance; a variable-size list is refused as
    pylance refuses it (TypeError)."""
    path = str(tmp_path / "nested")  # type: ignore[operator]
    rng = np.random.default_rng(2)
    values = rng.standard_normal((300, 4)).astype(np.float32)
    table = pa.table({
        "id": np.arange(300),
        "st": pa.StructArray.from_arrays([_vectors(values, pa.float32()), pa.array(np.arange(300) % 3)], ["v", "g"]),
        "lv": pa.array([list(map(float, r)) for r in values], pa.list_(pa.float32())),
        "mv": pa.array([[list(map(float, r))] for r in values], pa.list_(pa.list_(pa.float32(), 4))),
    })
    lance.write_dataset(table, path, max_rows_per_file=100)
    for kwargs in ({}, {"columns": ["id", "st"]}, {"with_row_id": True, "filter": "st.g = 1", "prefilter": True}):
        _same(*_both(path, nearest={"column": "st.v", "q": values[17], "k": 8}, **kwargs))
    nearest = {"column": "lv", "q": values[0], "k": 3}
    with pytest.raises(TypeError) as theirs:
        lance.dataset(path).to_table(nearest=nearest)
    with pytest.raises(lance_gpu.errors.LanceGpuError) as ours:
        lance_gpu.dataset(path).to_table(nearest=nearest)
    assert isinstance(ours.value, type(theirs.value))


def test_nan_and_inf_values(tmp_path: object) -> None:
    """NaN in a vector or in the query drops the row / everything; inf gives an inf distance (l2, dot)
    or none (cosine): as pylance."""
    path = str(tmp_path / "nan")  # type: ignore[operator]
    values = np.array([[1, 1], [np.nan, 1], [2, 2], [np.inf, 0], [0, 0], [3, -1]], np.float32)
    lance.write_dataset(pa.table({"id": np.arange(6), "vec": _vectors(values, pa.float32())}), path)
    for metric in ("l2", "cosine", "dot"):
        for q in (np.array([1, 1], np.float32), np.array([np.nan, 1], np.float32)):
            theirs, ours = _both(path, nearest={"column": "vec", "q": q, "k": 6, "metric": metric})
            assert ours.equals(theirs), (metric, q)


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_distance_range(f32: tuple[str, np.ndarray], metric: str) -> None:
    """``distance_range=(lower, upper)`` keeps ``lower <= d < upper`` before the k nearest are
    taken (as pylance 14), with filters and several queries too."""
    path, values = f32
    theirs, _ = _both(path, nearest={"column": "vec", "q": values[42], "k": 40, "metric": metric})
    d = theirs["_distance"].to_numpy().astype(np.float64)
    mid = (d[:-1] + d[1:]) / 2  # bounds between pylance's distances: no rounding decides
    ranges = [(mid[3], mid[20]), (None, mid[9]), (mid[30], None), (0.0, 0.0), (5.0, 1.0), (None, None), (True, 1e9)]
    if metric == "l2":  # exact bounds: lower inclusive, upper exclusive (l2 distances round alike)
        ranges += [(d[3], d[20]), (None, d[9]), (d[30], None)]
    for rng in ranges:
        for kwargs in ({}, {"filter": "id > 200", "prefilter": True}, {"filter": "cat = 'c1'"}):
            _same(*_both(path, nearest={"column": "vec", "q": values[42], "k": 7, "metric": metric, "distance_range": rng},
                         **kwargs))
    q = np.stack([values[1], values[2]])
    _same(*_both(path, nearest={"column": "vec", "q": q, "k": 5, "metric": metric, "distance_range": (mid[5], None)}))


def test_distance_range_large_block(tmp_path: object) -> None:
    """A range that excludes the nearest rows of a block larger than k (l2's candidate ranking
    must not drop in-range rows)."""
    path = str(tmp_path / "r")  # type: ignore[operator]
    values = np.random.default_rng(8).standard_normal((5000, 8)).astype(np.float32)
    lance.write_dataset(pa.table({"id": np.arange(5000), "vec": _vectors(values, pa.float32())}), path,
                        max_rows_per_file=2000)
    for rng in ((10.0, 12.0), (20.0, None)):
        _same(*_both(path, nearest={"column": "vec", "q": values[0], "k": 15, "distance_range": rng}, columns=["id"]))


@pytest.mark.parametrize("bad", [[0.0, 1.0], (1.0,), "x", (1, 2, 3), ("a", 2.0), (None, "b")])
def test_bad_distance_range(f32: tuple[str, np.ndarray], bad: object) -> None:
    path, values = f32
    nearest = {"column": "vec", "q": values[0], "k": 3, "distance_range": bad}
    with pytest.raises(Exception) as theirs:  # noqa: PT011 - the class is what is compared
        lance.dataset(path).to_table(nearest=nearest)
    with pytest.raises(lance_gpu.errors.LanceGpuError) as ours:
        lance_gpu.dataset(path).to_table(nearest=nearest)
    assert isinstance(ours.value, type(theirs.value)), (type(theirs.value), ours.value)


@pytest.fixture(scope="module")
def multivectors(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list]:
    """A multivector column (list of 6-d float32 vectors, 1-4 per row; null rows, an empty
    list, nulls inside a vector), several fragments and deletions."""
    path = str(tmp_path_factory.mktemp("mv") / "mv")
    rng = np.random.default_rng(11)
    rows: list = []
    for _ in range(400):
        n = int(rng.integers(1, 5))
        rows.append([list(map(float, r)) for r in rng.standard_normal((n, 6)).astype(np.float32)])
    rows[7] = None
    rows[90] = None
    rows[8] = []
    rows[12][0][2] = None
    rows[21] = rows[20]  # a tie
    table = pa.table({"id": np.arange(400), "cat": [f"c{i % 3}" for i in range(400)],
                      "mv": pa.array(rows, pa.list_(pa.list_(pa.float32(), 6)))})
    ds = lance.write_dataset(table, path, max_rows_per_file=120)
    ds.delete("id IN (4, 150, 151)")
    return path, rows


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot", None])
def test_multivector(multivectors: tuple[str, list], metric: str | None) -> None:
    """Multivector search as pylance 14's (flat): a 2-D ``q`` is one query of several vectors
    (no query_index), a 1-D ``q`` one vector; the distance sums, over the query's vectors, the
    distance to the row's nearest vector."""
    path, rows = multivectors
    rng = np.random.default_rng(3)
    for q in (rng.standard_normal((3, 6)).astype(np.float32), np.array(rows[20], np.float32),
              rng.standard_normal(6).astype(np.float32)):
        for kwargs in ({}, {"columns": ["id"], "with_row_id": True}, {"filter": "cat = 'c1'", "prefilter": True},
                       {"filter": "cat = 'c1'"}, {"limit": 3, "offset": 2}):
            _same(*_both(path, nearest={"column": "mv", "q": q, "k": 9, "metric": metric}, **kwargs), rtol=1e-3, atol=1e-3)


def test_multivector_ranges_and_errors(multivectors: tuple[str, list]) -> None:
    path, rows = multivectors
    q = np.array(rows[30], np.float32)
    theirs, _ = _both(path, nearest={"column": "mv", "q": q, "k": 30, "metric": "cosine"})
    d = theirs["_distance"].to_numpy().astype(np.float64)
    _same(*_both(path, nearest={"column": "mv", "q": q, "k": 6, "metric": "cosine",
                                "distance_range": ((d[4] + d[5]) / 2, (d[25] + d[26]) / 2)}), rtol=1e-3, atol=1e-3)
    for nearest in ({"column": "mv", "q": np.zeros(5, np.float32), "k": 3},
                    {"column": "mv", "q": np.zeros((2, 5), np.float32), "k": 3},
                    {"column": "mv", "q": np.zeros(6, np.float32), "k": 3, "metric": "hamming"},
                    {"column": "mv", "q": np.zeros(6, np.float32), "k": 0}):
        with pytest.raises(Exception) as their_err:  # noqa: PT011
            lance.dataset(path).to_table(nearest=nearest)
        with pytest.raises(lance_gpu.errors.LanceGpuError) as our_err:
            lance_gpu.dataset(path).to_table(nearest=nearest)
        assert isinstance(our_err.value, type(their_err.value)), (nearest, type(their_err.value), our_err.value)


def test_multivector_hamming(tmp_path: object) -> None:
    """uint8 multivectors take hamming (the nearest vector's differing bits, summed), as pylance."""
    path = str(tmp_path / "mvu8")  # type: ignore[operator]
    rng = np.random.default_rng(0)
    rows: list = [[list(map(int, r)) for r in rng.integers(0, 256, (int(rng.integers(1, 4)), 4))] for _ in range(120)]
    rows[9] = None
    lance.write_dataset(pa.table({"id": np.arange(120), "mv": pa.array(rows, pa.list_(pa.list_(pa.uint8(), 4)))}), path,
                        max_rows_per_file=50)
    for q in (np.array(rows[2], np.uint8), np.array(rows[2][0], np.uint8)):
        _same(*_both(path, nearest={"column": "mv", "q": q, "k": 6, "metric": "hamming"}, columns=["id"]))
    nearest = {"column": "mv", "q": np.array(rows[2], np.uint8), "k": 6, "metric": "l2"}
    with pytest.raises(ValueError) as theirs:
        lance.dataset(path).to_table(nearest=nearest)
    with pytest.raises(lance_gpu.errors.LanceGpuError) as ours:
        lance_gpu.dataset(path).to_table(nearest=nearest)
    assert isinstance(ours.value, type(theirs.value))


def test_multivector_null_vectors_inside_rows(tmp_path: object) -> None:
    """A null vector inside a multivector row counts as a zero vector (no cosine distance: the
    row is skipped), as pylance."""
    path = str(tmp_path / "mvn")  # type: ignore[operator]
    rows = [[[1.0, 0, 0, 0], None, [0, 1.0, 0, 0]], [[0, 0, 1.0, 0]], [None], [[0.5, 0.5, 0, 0]],
            [[0, 0, 0, 1.0], [1.0, 1.0, 0, 0]], None]
    lance.write_dataset(pa.table({"id": np.arange(6), "mv": pa.array(rows, pa.list_(pa.list_(pa.float32(), 4)))}), path)
    q = np.array([[1, 0, 0, 0], [0, 0, 1, 0]], np.float32)
    for metric in ("l2", "cosine", "dot"):
        _same(*_both(path, nearest={"column": "mv", "q": q, "k": 6, "metric": metric}))


def test_fixed_shape_tensor_column_searched_as_pylance(tmp_path) -> None:
    """A ``fixed_shape_tensor`` column is searched as its storage vectors, with a tensor
    scalar, a vector or several vectors as the query; the column comes back as a tensor."""
    path = str(tmp_path / "tensor")
    tensor = pa.fixed_shape_tensor(pa.float32(), [DIM])
    values = np.random.default_rng(3).standard_normal((200, DIM)).astype(np.float32)
    storage = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), DIM)
    lance.write_dataset(pa.table({"id": pa.array(np.arange(200)),
                                  "t": pa.ExtensionArray.from_storage(tensor, storage)}), path)
    scalar = pa.ExtensionArray.from_storage(tensor, storage.slice(7, 1))[0]
    for q in (scalar, values[7], [values[7], values[30]]):
        for columns in (["id"], ["id", "t"]):
            _same(*_both(path, nearest={"column": "t", "k": 5, "q": q}, columns=columns))


def test_vec_to_table_as_pylance() -> None:
    """``lance.vector.vec_to_table``: the same tables and refusals."""
    from lance.vector import vec_to_table as ref

    from lance_gpu.vector import vec_to_table

    rng = np.random.default_rng(1)
    as_dict = {"a": rng.standard_normal(8), "b": rng.standard_normal(8)}
    cases = [((as_dict,), {}), ((as_dict,), {"names": ["key", "emb"]}), ((rng.standard_normal((5, 4)),), {}),
             (([[1, 2, 3], [4, 5, 6]],), {"names": "v"})]
    for args, kwargs in cases:
        assert vec_to_table(*args, **kwargs) == ref(*args, **kwargs)
    with pytest.raises(ValueError, match="Expected 3 dimensions but got 2"):
        ref([[1, 2, 3], [4, 5]])
    with pytest.raises(ValueError, match="Expected 3 dimensions but got 2"):
        vec_to_table([[1, 2, 3], [4, 5]])
    with pytest.raises(NotImplementedError):
        vec_to_table("no")  # type: ignore[arg-type]
