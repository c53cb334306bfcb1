# SPDX-License-Identifier: Apache-2.0
"""IVF vector indices (issue 27 item 3), differential against pylance 14.

* ``nearest`` over pylance-built ``IVF_FLAT`` / ``IVF_PQ`` / ``IVF_SQ`` / ``IVF_HNSW_*``
  indices: at a fixed ``nprobes`` our rows and ``_distance`` equal pylance's (the same
  partitions probed, the same storage distances), with ``refine_factor``, deletions, rows
  appended after the index (searched exactly and merged), pre- and post-filters;
  ``use_index=False`` and a metric other than the index's search exactly.
* ``create_index`` of ours: pylance lists the index, its plan uses it, and its recall over our
  index at fixed ``nprobes`` is at least its recall over its own index.
* refused input: pylance's exception classes.
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu

lance = pytest.importorskip("lance")

DIM = 16
ROWS = 3000


def _table(values: np.ndarray, start: int = 0) -> pa.Table:
    n = values.shape[0]
    return pa.table({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(values.ravel(), pa.float32()), DIM),
        "cat": pa.array([f"c{i % 5}" for i in range(start, start + n)]),
    })


def _data(seed: int = 0, rows: int = ROWS, clusters: int = 12) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # clustered data, so IVF partitions mean something
    centres = rng.standard_normal((clusters, DIM)).astype(np.float32) * 3
    return (centres[rng.integers(0, clusters, rows)] + rng.standard_normal((rows, DIM))).astype(np.float32)


def _queries(n: int = 6, seed: int = 1) -> np.ndarray:
    return _data(seed, n) + np.random.default_rng(seed + 7).standard_normal((n, DIM)).astype(np.float32) * 0.3


def _build(path: str, index_type: str, metric: str = "l2", **params: object) -> None:
    ds = lance.write_dataset(_table(_data()), path, max_rows_per_file=1000)
    ds.create_index("vec", index_type, num_partitions=6, metric=metric, **params)


def _both(path: str, **kwargs: object) -> tuple[pa.Table, pa.Table]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = lance.dataset(path).to_table(**kwargs)
        ours = lance_gpu.dataset(path).to_table(**kwargs)
    return theirs, ours


def _same(theirs: pa.Table, ours: pa.Table, tol: float = 1e-4) -> None:
    assert ours.schema.names == theirs.schema.names
    for name in theirs.schema.names:
        if name == "_distance":
            np.testing.assert_allclose(ours[name].to_numpy(), theirs[name].to_numpy(), rtol=tol, atol=tol)
        else:
            assert ours[name].to_pylist() == theirs[name].to_pylist(), name


INDEXES = [
    ("IVF_FLAT", "l2", {}),
    ("IVF_FLAT", "cosine", {}),
    ("IVF_FLAT", "dot", {}),
    ("IVF_PQ", "l2", {"num_sub_vectors": 4}),
    ("IVF_PQ", "cosine", {"num_sub_vectors": 4}),
    ("IVF_PQ", "dot", {"num_sub_vectors": 8}),
    ("IVF_SQ", "l2", {}),
    ("IVF_HNSW_SQ", "l2", {}),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    out = {}
    for index_type, metric, params in INDEXES:
        path = str(tmp_path_factory.mktemp("vi") / f"{index_type}_{metric}")
        _build(path, index_type, metric, **params)
        out[(index_type, metric)] = path
    return out


@pytest.mark.parametrize(("index_type", "metric"), [(t, m) for t, m, _ in INDEXES])
@pytest.mark.parametrize("nprobes", [1, 3])
def test_search_equals_pylance(built: dict, index_type: str, metric: str, nprobes: int) -> None:
    path = built[(index_type, metric)]
    for q in _queries():
        nearest = {"column": "vec", "q": q, "k": 10, "nprobes": nprobes}
        theirs, ours = _both(path, nearest=nearest, columns=["id", "_distance"], with_row_id=True)
        if index_type.startswith("IVF_HNSW"):
            # the graph walk may miss rows our exhaustive partition scan finds: same or better
            exact = _exact_ids(path, q, 10, metric)
            assert len(set(ours["id"].to_pylist()) & exact) >= len(set(theirs["id"].to_pylist()) & exact)
            continue
        _same(theirs, ours)



@pytest.mark.parametrize(("index_type", "metric"), [("IVF_FLAT", "l2"), ("IVF_FLAT", "dot"), ("IVF_PQ", "l2"),
                                                    ("IVF_SQ", "l2")])
@pytest.mark.parametrize("probes", [{"minimum_nprobes": 1}, {"minimum_nprobes": 2, "maximum_nprobes": 4},
                                    {"minimum_nprobes": 1, "maximum_nprobes": 1}])
@pytest.mark.parametrize("k", [1, 10, 30])
def test_minimum_nprobes_equals_pylance(built: dict, index_type: str, metric: str, probes: dict, k: int) -> None:
    """``search_effort=0``: pylance starts at ``minimum_nprobes`` partitions (capped by
    ``maximum_nprobes``) and widens only while fewer than ``k`` rows were found: the same rows
    and distances."""
    path = built[(index_type, metric)]
    for q in _queries():
        nearest = {"column": "vec", "q": q, "k": k, "search_effort": 0.0, **probes}
        _same(*_both(path, nearest=nearest, columns=["id", "_distance"], with_row_id=True))


@pytest.mark.parametrize(("index_type", "metric"), [("IVF_FLAT", "l2"), ("IVF_PQ", "l2"), ("IVF_SQ", "l2")])
@pytest.mark.parametrize("probes", [{}, {"minimum_nprobes": 2}, {"maximum_nprobes": 3}])
@pytest.mark.parametrize("k", [1, 10, 30])
def test_auto_nprobes_at_least_pylance(built: dict, index_type: str, metric: str, probes: dict, k: int) -> None:
    """pylance 14's default ("Auto") initial probes follow a rule not reproduced here; we
    search every partition up to ``maximum_nprobes``: exactly pylance's rows and distances
    with ``nprobes`` set to that many partitions, and over exact distances (IVF_FLAT) per
    query a recall against the exact search at least that of pylance's default (a superset
    of its probes).  Over quantized distances (IVF_PQ, IVF_SQ) more partitions need not mean
    more recall -- an unprobed partition may hold a row whose quantized distance beats the
    true nearest one's -- so no such claim is made there."""
    path = built[(index_type, metric)]
    partitions = 6  # _build's num_partitions
    for q in _queries():
        nearest = {"column": "vec", "q": q, "k": k, **probes}
        theirs, ours = _both(path, nearest=nearest, columns=["id", "_distance"])
        probed = {"column": "vec", "q": q, "k": k, "nprobes": probes.get("maximum_nprobes", partitions)}
        ref = lance.dataset(path).to_table(nearest=probed, columns=["id", "_distance"])
        _same(ref, ours)
        if index_type == "IVF_FLAT":
            exact = _exact_ids(path, q, k, metric)
            assert len(set(ours["id"].to_pylist()) & exact) >= len(set(theirs["id"].to_pylist()) & exact)


@pytest.mark.parametrize(("flt", "k"), [("id < 60", 10), ("id < 6", 10), ("cat = 'c2' AND id < 400", 25)])
@pytest.mark.parametrize("probes", [{"minimum_nprobes": 1}, {"minimum_nprobes": 1, "maximum_nprobes": 3}])
def test_minimum_nprobes_with_prefilter(built: dict, flt: str, k: int, probes: dict) -> None:
    """A selective pre-filter: pylance widens the search partition by partition until ``k``
    allowed rows are found (or the most partitions are searched); when no more than ``k`` rows
    are allowed and the first probes missed some, it returns those at +inf distance instead."""
    path = built[("IVF_FLAT", "l2")]
    for q in _queries(3, seed=31):
        nearest = {"column": "vec", "q": q, "k": k, "search_effort": 0.0, **probes}
        theirs, ours = _both(path, nearest=nearest, filter=flt, prefilter=True, columns=["id", "_distance"])
        assert sorted(ours["id"].to_pylist()) == sorted(theirs["id"].to_pylist())
        np.testing.assert_allclose(np.sort(ours["_distance"].to_numpy()), np.sort(theirs["_distance"].to_numpy()),
                                   rtol=1e-4)


def test_sq_ties_kept_as_pylance(tmp_path: object) -> None:
    """Integer-valued vectors: IVF_SQ distances (the code distance times ``(range / 255)^2``,
    float32) tie at the k-th place all the time.  In one partition the rows pylance's heap
    keeps are ours, bit-equal distances; over several partitions the distances are the same
    (which of equally distant rows wins there is not pinned)."""
    path = str(tmp_path) + "/ties"  # type: ignore[operator]
    rng = np.random.default_rng(5)
    x = rng.integers(0, 6, (6000, DIM)).astype(np.float32)
    lance.write_dataset(pa.table({"id": np.arange(6000), "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), DIM)}),
                        path, max_rows_per_file=2000)
    lance.dataset(path).create_index("vec", "IVF_SQ", num_partitions=4)
    lance.dataset(path).delete("id % 11 = 3")
    for _ in range(12):
        q = x[rng.integers(6000)] + rng.standard_normal(DIM).astype(np.float32) * 0.3
        for flt in (None, "id % 3 = 0"):
            theirs, ours = _both(path, nearest={"column": "vec", "q": q, "k": 20, "nprobes": 1}, filter=flt,
                                 prefilter=True, columns=["id", "_distance"])
            assert ours["id"].to_pylist() == theirs["id"].to_pylist()
            assert ours["_distance"].to_pylist() == theirs["_distance"].to_pylist()
            theirs, ours = _both(path, nearest={"column": "vec", "q": q, "k": 20, "nprobes": 3}, filter=flt,
                                 prefilter=True, columns=["id", "_distance"])
            assert ours["_distance"].to_pylist() == theirs["_distance"].to_pylist()



def test_heap_replay_plain_python_equals_compiled() -> None:
    """The Rust-heap replay (:mod:`lance_gpu.scan._heap`): its loop run as plain Python (what
    runs while the numba loop compiles) and compiled keep the same rows in the same heap
    order, and the rows kept are always ``k`` smallest distances (only which of equal ones
    differs from a sort)."""
    from lance_gpu.scan import _heap

    compiled = _heap._heap_top_k.dispatcher
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, k = int(rng.integers(1, 120)), int(rng.integers(1, 25))
        d = rng.integers(0, 6, n).astype(np.float32)
        a, b = np.empty(k, np.int64), np.empty(k, np.int64)
        na = _heap._heap_top_k_loop(d, k, a)
        nb = compiled(d, np.int64(k), b)
        assert na == nb == min(n, k) and a[:na].tolist() == b[:nb].tolist()
        assert np.array_equal(np.sort(d[a[:na]]), np.sort(d)[:na])
        assert sorted(_heap.heap_top_k(d, k).tolist()) == sorted(a[:na].tolist())


def _exact_ids(path: str, q: np.ndarray, k: int, metric: str) -> set[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = lance.dataset(path).to_table(nearest={"column": "vec", "q": q, "k": k, "metric": metric, "use_index": False},
                                         columns=["id"])
    return set(t["id"].to_pylist())


@pytest.mark.parametrize(("index_type", "metric"), [("IVF_PQ", "l2"), ("IVF_SQ", "l2"), ("IVF_FLAT", "cosine")])
def test_refine_factor(built: dict, index_type: str, metric: str) -> None:
    path = built[(index_type, metric)]
    for q in _queries(3):
        nearest = {"column": "vec", "q": q, "k": 8, "nprobes": 2, "refine_factor": 4}
        _same(*_both(path, nearest=nearest, columns=["id", "_distance"]))


def test_default_nprobes_reaches_pylance_recall(built: dict) -> None:
    path = built[("IVF_PQ", "l2")]
    mine = theirs_hits = 0
    for q in _queries():
        exact = _exact_ids(path, q, 10, "l2")
        theirs, ours = _both(path, nearest={"column": "vec", "q": q, "k": 10}, columns=["id"])
        theirs_hits += len(set(theirs["id"].to_pylist()) & exact)
        mine += len(set(ours["id"].to_pylist()) & exact)
    assert mine >= theirs_hits


def test_use_index_false_and_other_metric_search_exactly(built: dict) -> None:
    path = built[("IVF_PQ", "l2")]
    q = _queries(1)[0]
    for nearest in ({"column": "vec", "q": q, "k": 10, "use_index": False},
                    {"column": "vec", "q": q, "k": 10, "metric": "cosine", "nprobes": 1}):
        theirs, ours = _both(path, nearest=nearest, columns=["id", "_distance"])
        _same(theirs, ours)
    _, ours = _both(path, nearest={"column": "vec", "q": q, "k": 10, "use_index": False}, columns=["id"])
    assert set(ours["id"].to_pylist()) == _exact_ids(path, q, 10, "l2")


@pytest.fixture()
def mutated(tmp_path: object) -> str:
    """An IVF_PQ index, then deleted rows and an appended (unindexed) fragment."""
    path = str(tmp_path) + "/mut"  # type: ignore[operator]
    _build(path, "IVF_PQ", "l2", num_sub_vectors=4)
    ds = lance.dataset(path)
    ds.delete("id % 7 = 0 OR id BETWEEN 1000 AND 1400")
    lance.write_dataset(_table(_data(3, 500), start=ROWS), path, mode="append")
    return path


@pytest.mark.parametrize("refine", [None, 2])
def test_deletions_and_unindexed_fragments(mutated: str, refine: int | None) -> None:
    for q in _queries(4, seed=3):
        nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 2, "refine_factor": refine}
        theirs, ours = _both(mutated, nearest=nearest, columns=["id", "_distance"], with_row_id=True)
        _same(theirs, ours)
        ids = ours["id"].to_numpy()
        assert not np.any((ids % 7 == 0) & (ids < ROWS))
        assert not np.any((ids >= 1000) & (ids <= 1400))


@pytest.mark.parametrize("prefilter", [True, False])
@pytest.mark.parametrize("flt", ["cat = 'c1'", "id < 2500 AND id > 300"])
def test_filters(mutated: str, prefilter: bool, flt: str) -> None:
    for q in _queries(3, seed=5):
        nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 2}
        theirs, ours = _both(mutated, nearest=nearest, filter=flt, prefilter=prefilter, columns=["id", "cat", "_distance"])
        _same(theirs, ours)


def test_prefilter_fewer_rows_than_k(built: dict) -> None:
    path = built[("IVF_FLAT", "l2")]
    q = _queries(1)[0]
    for nearest in ({"column": "vec", "q": q, "k": 10, "nprobes": 1},
                    {"column": "vec", "q": q, "k": 10, "minimum_nprobes": 1, "maximum_nprobes": 6}):
        theirs, ours = _both(path, nearest=nearest, filter="id < 4", prefilter=True, columns=["id", "_distance"])
        assert ours["id"].to_pylist() == theirs["id"].to_pylist()
        np.testing.assert_allclose(ours["_distance"].to_numpy(), theirs["_distance"].to_numpy(), rtol=1e-4)
    # without more partitions to probe, rows outside the probed partition are not found: the
    # same rows as pylance's (all four when the unseeded build put them in that partition)
    theirs, ours = _both(path, nearest={"column": "vec", "q": q, "k": 10, "nprobes": 1}, filter="id < 4",
                         prefilter=True, columns=["id"])
    assert ours["id"].to_pylist() == theirs["id"].to_pylist() and ours.num_rows <= 4


def test_several_queries(built: dict) -> None:
    path = built[("IVF_SQ", "l2")]
    nearest = {"column": "vec", "q": _queries(3), "k": 5, "nprobes": 2}
    _same(*_both(path, nearest=nearest, columns=["id", "_distance"]))


@pytest.mark.parametrize(("key", "value"), [("nprobes", 0), ("refine_factor", 0), ("minimum_nprobes", -1),
                                            ("minimum_nprobes", 0), ("maximum_nprobes", 0), ("search_effort", 1.5),
                                            ("query_parallelism", -2), ("approx_mode", "slow"), ("ef", 0)])
def test_bad_search_options(built: dict, key: str, value: int) -> None:
    path = built[("IVF_FLAT", "l2")]
    nearest = {"column": "vec", "q": _queries(1)[0], "k": 5, key: value}
    with pytest.raises(ValueError):
        lance.dataset(path).to_table(nearest=nearest)
    with pytest.raises(ValueError):
        lance_gpu.dataset(path).to_table(nearest=nearest)


def test_stable_row_ids(tmp_path: object) -> None:
    path = str(tmp_path) + "/stable"  # type: ignore[operator]
    ds = lance.write_dataset(_table(_data()), path, max_rows_per_file=1000, enable_stable_row_ids=True)
    ds.create_index("vec", "IVF_FLAT", num_partitions=4)
    ds = lance.dataset(path)
    ds.delete("id < 500")
    lance.write_dataset(_table(_data(4, 300), start=ROWS), path, mode="append")
    for q in _queries(3, seed=9):
        nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 2}
        _same(*_both(path, nearest=nearest, columns=["id", "_distance"], with_row_id=True))


# --------------------------------------------------------------------------------------------
# create_index of ours, used by pylance


def _recall(path: str, metric: str, nprobes: int, queries: np.ndarray) -> int:
    hits = 0
    for q in queries:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = lance.dataset(path).to_table(nearest={"column": "vec", "q": q, "k": 10, "nprobes": nprobes}, columns=["id"])
        hits += len(set(got["id"].to_pylist()) & _exact_ids(path, q, 10, metric))
    return hits


# pylance's k-means starts from random rows (one run); ours from greedy k-means++ seeds, best of
# three runs.  One pylance build's recall at few probes varies by several percent, so the recall
# is summed over three data sets (30 queries each, nprobes=1 and 2) and ours must be at least
# pylance's (benchmarks/results/vector_index_cpu.md has figures on other data)
@pytest.mark.parametrize(("index_type", "metric", "params"), [
    ("IVF_FLAT", "l2", {}),
    ("IVF_FLAT", "cosine", {}),
    ("IVF_FLAT", "dot", {}),
    ("IVF_PQ", "l2", {"num_sub_vectors": 4}),
    ("IVF_SQ", "l2", {}),
    ("IVF_SQ", "cosine", {}),
])
def test_create_index_used_by_pylance(tmp_path: object, index_type: str, metric: str, params: dict) -> None:
    ours_total = theirs_total = 0
    for data_seed in (0, 1, 2):
        theirs_path = f"{tmp_path}/theirs{data_seed}"
        ours_path = f"{tmp_path}/ours{data_seed}"
        values = _data(data_seed, clusters=6)
        for p in (theirs_path, ours_path):
            lance.write_dataset(_table(values), p, max_rows_per_file=1000)
        lance.dataset(theirs_path).create_index("vec", index_type, num_partitions=6, metric=metric, **params)
        ds = lance_gpu.dataset(ours_path)
        out = ds.create_index("vec", index_type, num_partitions=6, metric=metric, seed=data_seed, **params)
        assert out is ds and ds.version == 2
        queries = values[7::100] + np.random.default_rng(14 + data_seed).standard_normal((30, DIM)).astype(np.float32) * 0.3
        ours_total += _recall(ours_path, metric, 1, queries) + _recall(ours_path, metric, 2, queries)
        theirs_total += _recall(theirs_path, metric, 1, queries) + _recall(theirs_path, metric, 2, queries)
        if data_seed:
            continue
        pl = lance.dataset(ours_path)
        (info,) = pl.list_indices()
        assert (info["name"], info["type"], info["fields"]) == ("vec_idx", index_type, ["vec"])
        assert sorted(info["fragment_ids"]) == [0, 1, 2]
        q = _queries(1)[0]
        plan = pl.scanner(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 2}).explain_plan()
        assert f"ANNIvfPartition: uuid={info['uuid']}" in plan
        stats = pl.stats.index_stats("vec_idx")
        assert stats["num_indexed_rows"] == ROWS and stats["num_unindexed_rows"] == 0
        # our search over our index equals pylance's over it
        for q in _queries(3, seed=11):
            nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 2}
            _same(*_both(ours_path, nearest=nearest, columns=["id", "_distance"]))
    print(f"recall hits {index_type} {metric}: ours {ours_total}, pylance {theirs_total} of {3 * 20 * 30}")
    assert ours_total >= theirs_total, (ours_total, theirs_total)


def test_create_index_replace_and_name(tmp_path: object) -> None:
    path = str(tmp_path) + "/d"  # type: ignore[operator]
    lance.write_dataset(_table(_data()), path, max_rows_per_file=1000)
    ds = lance_gpu.dataset(path)
    ds.create_index("vec", "IVF_FLAT", num_partitions=4)
    first = ds.list_indices()[0]["uuid"]
    with pytest.raises(RuntimeError, match="already exists"):
        ds.create_index("vec", "IVF_FLAT", num_partitions=4)
    ds.create_index("vec", "IVF_PQ", num_partitions=4, num_sub_vectors=4, replace=True)
    ds.create_index("vec", "ivf_flat", num_partitions=2, name="second")
    pl = lance.dataset(path)
    assert sorted((i["name"], i["type"]) for i in pl.list_indices()) == [("second", "IVF_FLAT"), ("vec_idx", "IVF_PQ")]
    assert first not in {i["uuid"] for i in pl.list_indices()}
    # appended rows are searched exactly by both libraries and merged with the index's
    lance.write_dataset(_table(_data(6, 200), start=ROWS), path, mode="append")
    for q in _queries(3, seed=17):
        nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 2}
        _same(*_both(path, nearest=nearest, columns=["id", "_distance"]))


@pytest.mark.parametrize(("kwargs", "exc"), [
    ({"column": "vec", "index_type": "FOO", "num_partitions": 2}, NotImplementedError),
    ({"column": "id", "index_type": "IVF_PQ", "num_partitions": 2, "num_sub_vectors": 2}, TypeError),
    ({"column": "nope", "index_type": "IVF_FLAT", "num_partitions": 2}, KeyError),
    ({"column": "vec", "index_type": "IVF_PQ", "num_partitions": 2, "num_sub_vectors": 5}, ValueError),
    ({"column": "vec", "index_type": "IVF_PQ", "num_partitions": 2}, ValueError),
    ({"column": "vec", "index_type": "IVF_FLAT", "num_partitions": 2, "metric": "foo"}, ValueError),
    ({"column": "vec", "index_type": "IVF_FLAT", "num_partitions": 0}, ValueError),
    ({"column": "vec", "index_type": "IVF_FLAT", "num_partitions": -1}, OverflowError),
    ({"column": "vec", "index_type": "IVF_PQ", "num_partitions": 2, "num_sub_vectors": 0}, ZeroDivisionError),
    ({"column": "cat", "index_type": "IVF_FLAT", "num_partitions": 2}, TypeError),
    ({"column": "vec", "index_type": "IVF_FLAT", "num_partitions": 2, "metric": "hamming"}, ValueError),
])
def test_create_index_bad_input(tmp_path: object, kwargs: dict, exc: type) -> None:
    path = str(tmp_path) + "/bad"  # type: ignore[operator]
    lance.write_dataset(_table(_data(rows=600)), path)
    with pytest.raises(exc):
        lance.dataset(path).create_index(**kwargs)
    with pytest.raises(exc):
        lance_gpu.dataset(path).create_index(**kwargs)
    assert lance.dataset(path).version == 1 and lance.dataset(path).list_indices() == []


@pytest.mark.slow
def test_kmeans_on_the_device_under_cuda_simulator() -> None:
    """[CUDA simulator] ``tests/kernels/sim_kmeans_gpu.py`` in a subprocess (the simulator must
    be selected before ``numba.cuda`` is imported): GPU k-means steps equal the CPU's and
    ``create_index(accelerator="cuda")`` writes the index the CPU build writes."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "pytest", str(root / "tests/kernels/sim_kmeans_gpu.py"), "-q",
                           "-p", "no:cacheprovider", "-o", "addopts="], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "5 passed" in proc.stdout, proc.stdout[-2000:]



@pytest.mark.parametrize("index_type", ["IVF_HNSW_FLAT", "IVF_HNSW_SQ", "IVF_HNSW_PQ", "IVF_RQ"])
def test_create_index_types_not_built(tmp_path: object, index_type: str) -> None:
    """pylance builds these; we search pylance-built HNSW indices but do not build them: a typed
    refusal naming the type (NotImplementedError), and nothing committed."""
    path = str(tmp_path) + "/h"  # type: ignore[operator]
    lance.write_dataset(_table(_data(rows=600)), path)
    params = {"num_sub_vectors": 4} if index_type.endswith("PQ") else {}
    with pytest.raises(NotImplementedError, match=index_type) as ours:
        lance_gpu.dataset(path).create_index("vec", index_type, num_partitions=2, **params)
    assert isinstance(ours.value, lance_gpu.errors.UnsupportedFeatureError)
    assert lance.dataset(path).version == 1 and lance.dataset(path).list_indices() == []


BAD_OVER_INDEX = [
    ({"q": np.zeros(DIM - 1, np.float32)}, "dimension"),
    ({"q": np.zeros(DIM + 3, np.float32), "nprobes": 1}, "dimension, nprobes"),
    ({"k": 0}, "k = 0"),
    ({"k": -1}, "k < 0"),
    ({"metric": "manhattan"}, "metric"),
    ({"metric": "hamming"}, "hamming on floats"),
    ({"column": "id"}, "non-vector column"),
    ({"column": "cat"}, "string column"),
    ({"q": ["a"] * DIM}, "string query"),
    ({"nprobes": 2.5}, "nprobes float"),
]


@pytest.mark.parametrize(("change", "what"), BAD_OVER_INDEX, ids=[w for _c, w in BAD_OVER_INDEX])
def test_bad_nearest_over_an_index(built: dict, change: dict, what: str) -> None:
    """Refused input with a vector index on the column: pylance's exception classes."""
    path = built[("IVF_PQ", "l2")]
    nearest = {"column": "vec", "q": _queries(1)[0], "k": 5, **change}
    with pytest.raises(Exception) as theirs:  # noqa: PT011 - the class is what is compared
        lance.dataset(path).to_table(nearest=nearest)
    with pytest.raises(lance_gpu.errors.LanceGpuError) as ours:
        lance_gpu.dataset(path).to_table(nearest=nearest)
    assert isinstance(ours.value, type(theirs.value)), (what, type(theirs.value), ours.value)

def test_accelerator_refusals(tmp_path: object) -> None:
    path = str(tmp_path) + "/acc"  # type: ignore[operator]
    lance.write_dataset(_table(_data(rows=300)), path)
    with pytest.raises(ValueError, match="accelerator"):
        lance_gpu.dataset(path).create_index("vec", "IVF_FLAT", num_partitions=2, accelerator="tpu")


@pytest.mark.parametrize("typ", [pa.float16(), pa.float64()])
@pytest.mark.parametrize("index_type", ["IVF_FLAT", "IVF_PQ"])
def test_create_index_other_float_types(tmp_path: object, typ: pa.DataType, index_type: str) -> None:
    """Centroids, flat vectors and codebook are stored in the column's type (pylance refuses a
    float32 centroid tensor for a float64 column)."""
    path = str(tmp_path) + "/t"  # type: ignore[operator]
    x = _data(rows=600)
    lance.write_dataset(pa.table({"id": np.arange(600), "vec": pa.FixedSizeListArray.from_arrays(
        pa.array(x.ravel().astype(typ.to_pandas_dtype()), typ), DIM)}), path)
    params = {"num_sub_vectors": 4} if index_type == "IVF_PQ" else {}
    lance_gpu.dataset(path).create_index("vec", index_type, num_partitions=2, seed=0, **params)
    for q in _queries(2, seed=21):
        nearest = {"column": "vec", "q": q, "k": 5, "nprobes": 1}
        _same(*_both(path, nearest=nearest, columns=["id", "_distance"]), tol=1e-2)


@pytest.mark.parametrize(("index_type", "params"), [("IVF_PQ", {"num_sub_vectors": 4}), ("IVF_FLAT", {})])
def test_compaction_remaps_vector_index(tmp_path: object, index_type: str, params: dict) -> None:
    """Our compaction rewrites the index's storage with the moved rows' addresses (deleted
    rows dropped); pylance lists the remapped index, plans with it and both searches agree."""
    path = str(tmp_path) + "/c"  # type: ignore[operator]
    lance.write_dataset(_table(_data()), path, max_rows_per_file=500)
    lance.dataset(path).create_index("vec", index_type, num_partitions=6, **params)
    lance.dataset(path).delete("id % 3 = 0")
    ds = lance_gpu.dataset(path)
    old_uuid = ds.list_indices()[0]["uuid"]
    ds.optimize.compact_files(target_rows_per_fragment=1500)
    pl = lance.dataset(path)
    (info,) = pl.list_indices()
    assert info["uuid"] != old_uuid and info["type"] == index_type
    assert sorted(info["fragment_ids"]) == sorted(f.fragment_id for f in pl.get_fragments())
    q = _queries(1)[0]
    plan = pl.scanner(nearest={"column": "vec", "q": q, "k": 10, "nprobes": 2}).explain_plan()
    assert f"uuid={info['uuid']}" in plan
    assert pl.stats.index_stats("vec_idx")["num_indexed_rows"] == pl.count_rows()
    for q in _queries(4, seed=23):
        nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 2}
        theirs, ours = _both(path, nearest=nearest, columns=["id", "_distance"])
        _same(theirs, ours)
        assert not any(i % 3 == 0 for i in ours["id"].to_pylist())


def test_compaction_with_stable_row_ids_keeps_vector_index(tmp_path: object) -> None:
    """With stable row ids the stored ids stay valid: the index's files are kept, its fragment
    bitmap moves to the new fragments."""
    path = str(tmp_path) + "/s"  # type: ignore[operator]
    lance.write_dataset(_table(_data()), path, max_rows_per_file=500, enable_stable_row_ids=True)
    lance.dataset(path).create_index("vec", "IVF_PQ", num_partitions=6, num_sub_vectors=4)
    lance.dataset(path).delete("id % 4 = 1")
    ds = lance_gpu.dataset(path)
    old_uuid = ds.list_indices()[0]["uuid"]
    ds.optimize.compact_files(target_rows_per_fragment=1500)
    (info,) = lance.dataset(path).list_indices()
    assert info["uuid"] == old_uuid
    for q in _queries(3, seed=29):
        for refine in (None, 2):
            nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 2, "refine_factor": refine}
            _same(*_both(path, nearest=nearest, columns=["id", "_distance"]))


def test_explain_plan_names_the_exact_part_as_pylance(tmp_path: object) -> None:
    """``explain_plan`` of a search names pylance's ``KNNVectorDistance`` exactly when rows
    are searched without the index: no index, ``use_index=False``, or fragments appended
    after it was built."""
    from lance_gpu.vector import vec_to_table

    uri = str(tmp_path / "plan.lance")  # type: ignore[operator]
    v = np.random.default_rng(5).random((300, 16)).astype(np.float32)
    lance.write_dataset(vec_to_table(v), uri, max_rows_per_file=150)
    query = {"column": "vector", "q": v[3], "k": 5}

    def flat(mod, **extra) -> bool:
        return "KNNVectorDistance" in mod.dataset(uri).scanner(nearest={**query, **extra}).explain_plan()

    assert flat(lance_gpu) == flat(lance) is True
    lance.dataset(uri).create_index("vector", index_type="IVF_PQ", num_partitions=2, num_sub_vectors=2)
    assert flat(lance_gpu) == flat(lance) is False
    assert flat(lance_gpu, use_index=False) == flat(lance, use_index=False) is True
    lance.write_dataset(vec_to_table(v[:50]), uri, mode="append")
    assert flat(lance_gpu) == flat(lance) is True
