# SPDX-License-Identifier: Apache-2.0
"""lance_gpu.torch against pylance's lance.torch.data.LanceDataset on pylance-written data:
sharding across ranks x DataLoader workers, seeded shuffles, tensor rules, map-style takes."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from background_runs import Command, finished, runs_in_background

torch = pytest.importorskip("torch")
lance = pytest.importorskip("lance")

import lance_gpu
import lance_gpu.torch as lt
from lance_gpu.errors import UnsupportedFeatureError

ROOT = Path(__file__).resolve().parents[1]
N = 300
DIM = 4


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """Six fragments of 50 rows; rows 10..14 deleted (fragment 0 has 45 live rows)."""
    rng = np.random.default_rng(7)
    emb = rng.standard_normal((N, DIM)).astype(np.float32)
    table = pa.table(
        {
            "id": pa.array(np.arange(N), pa.int64()),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), DIM),
            "label": pa.array(rng.integers(0, 10, N), pa.int32()),
            "flag": pa.array(np.arange(N) % 3 == 0),
        }
    )
    path = str(tmp_path_factory.mktemp("torch") / "feed.lance")
    ds = lance.write_dataset(table, path, max_rows_per_file=50)
    ds.delete("id >= 10 AND id < 15")
    return path


@pytest.fixture(scope="module")
def live_ids(uri) -> np.ndarray:
    return lance.dataset(uri).to_table(columns=["id"]).column("id").to_numpy()


def _ids(dataset, num_workers: int = 0) -> list[int]:
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=num_workers)
    return [int(x) for b in loader for x in (b["id"] if isinstance(b, dict) else b)]


def test_import_lance_gpu_does_not_import_torch() -> None:
    code = "import sys, lance_gpu; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("granularity", ["fragment", "batch"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_row_once_across_ranks_and_workers(uri, live_ids, workers, granularity, shuffle) -> None:
    for world in (1, 2, 3, 4):
        seen: list[int] = []
        for rank in range(world):
            ds = lt.LanceDataset(
                uri, 16, columns=["id"], rank=rank, world_size=world, shard_granularity=granularity,
                shuffle=shuffle, seed=3, shuffle_buffer=40, read_rows=20, device="cpu",
            )
            seen += _ids(ds, workers)
        assert sorted(seen) == sorted(live_ids.tolist()), (world, workers)


def test_filtered_batch_sharding_covers_filtered_rows(uri, live_ids) -> None:
    want = sorted(i for i in live_ids.tolist() if i % 2 == 0)
    seen: list[int] = []
    for rank in range(3):
        ds = lt.LanceDataset(uri, 8, columns=["id"], filter="id % 2 = 0", rank=rank, world_size=3, shard_granularity="batch", device="cpu")
        seen += _ids(ds, 2)
    assert sorted(seen) == want


def test_shuffle_deterministic_per_seed_and_differs_per_epoch(uri, live_ids) -> None:
    def order(seed: int, epoch: int) -> list[int]:
        ds = lt.LanceDataset(uri, 16, columns=["id"], shuffle=True, seed=seed, shuffle_buffer=64, read_rows=32, device="cpu")
        ds.set_epoch(epoch)
        return _ids(ds)

    first = order(1, 0)
    assert first == order(1, 0)
    assert sorted(first) == sorted(live_ids.tolist())
    assert first != live_ids.tolist()
    assert order(1, 1) != first
    assert order(2, 0) != first
    assert order(1, 1) == order(1, 1)


def test_same_seed_same_order_under_workers(uri) -> None:
    ds = lt.LanceDataset(uri, 16, columns=["id"], shuffle=True, seed=5, shuffle_buffer=30, read_rows=20, device="cpu")
    assert _ids(ds, 2) == _ids(ds, 2)


def _pylance_rows(uri, **kwargs) -> pa.Table:
    from lance.torch.data import LanceDataset as PylanceDataset

    ds = PylanceDataset(lance.dataset(uri), to_tensor_fn=None, **kwargs)
    return pa.Table.from_batches(list(ds))


def _our_rows(uri, **kwargs) -> pa.Table:
    ds = lt.LanceDataset(uri, to_tensor_fn=None, device="cpu", **kwargs)
    return pa.Table.from_batches(list(ds))


@pytest.mark.parametrize("world", [1, 2, 3])
def test_rows_equal_pylance_fragment_sharding(uri, world) -> None:
    for rank in range(world):
        kw = {"batch_size": 32, "columns": ["id", "emb", "label"], "rank": rank, "world_size": world}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ref = _pylance_rows(uri, **kw)
        assert _our_rows(uri, **kw).equals(ref)


def test_rows_equal_pylance_full_scan_filter_and_row_ids(uri) -> None:
    kw = {"batch_size": 20, "columns": ["id", "label"], "filter": "label > 4 AND id < 200", "with_row_id": True, "auto_detect_rank": False}
    ours, ref = _our_rows(uri, **kw), _pylance_rows(uri, **kw)
    assert ours.equals(ref)
    assert ours.num_rows > 0


@pytest.mark.parametrize("with_row_id", [False, True])
def test_filters_on_row_identity_columns_equal_pylance(uri, with_row_id) -> None:
    """``_rowid % 4 = 0`` shards or samples rows by id: the feed reads the row ids the filter
    needs (and drops them unless asked for), as pylance's loader gives."""
    for flt in ("_rowid % 4 = 0", "_rowaddr % 3 = 1 AND id > 20"):
        kw = {"batch_size": 16, "columns": ["id", "label"], "filter": flt, "with_row_id": with_row_id, "auto_detect_rank": False}
        ours, ref = _our_rows(uri, **kw), _pylance_rows(uri, **kw)
        assert ours.num_rows > 0 and ours.equals(ref), flt


def test_batches_equal_pylance_randomized_batch_sampler(uri) -> None:
    from lance.sampler import ShardedBatchSampler as PylanceBatchSampler
    from lance.torch.data import LanceDataset as PylanceDataset

    for rank in range(2):
        ref = list(PylanceDataset(lance.dataset(uri), 32, columns=["id", "emb"], sampler=PylanceBatchSampler(rank, 2, randomize=True, seed=9)))
        ours = list(lt.LanceDataset(uri, 32, columns=["id", "emb"], sampler=lt.ShardedBatchSampler(rank, 2, randomize=True, seed=9), device="cpu"))
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref):
            assert torch.equal(a["id"], b["id"]) and torch.equal(a["emb"], b["emb"])


def test_shuffled_batch_granularity_matches_pylance_unit_order(uri) -> None:
    """shuffle=True with shuffle_buffer=0 shuffles only the units: pylance's randomize order."""
    from lance.sampler import ShardedBatchSampler as PylanceBatchSampler
    from lance.torch.data import LanceDataset as PylanceDataset

    ref = list(PylanceDataset(lance.dataset(uri), 25, columns=["id"], sampler=PylanceBatchSampler(1, 3, randomize=True, seed=4)))
    ours = list(lt.LanceDataset(uri, 25, columns=["id"], rank=1, world_size=3, shard_granularity="batch", shuffle=True, seed=4, shuffle_buffer=0, device="cpu"))
    assert [t.tolist() for t in ours] == [t.tolist() for t in ref]


def test_drop_last_and_batch_sizes(uri, live_ids) -> None:
    sizes = [len(b) for b in lt.LanceDataset(uri, 64, columns=["id"], device="cpu")]
    assert sizes[:-1] == [64] * (len(sizes) - 1) and sum(sizes) == live_ids.size
    dropped = [len(b) for b in lt.LanceDataset(uri, 64, columns=["id"], drop_last=True, device="cpu")]
    assert dropped == [64] * (live_ids.size // 64)
    shuffled = [len(b) for b in lt.LanceDataset(uri, 64, columns=["id"], drop_last=True, shuffle=True, shuffle_buffer=100, device="cpu")]
    assert shuffled == [64] * (live_ids.size // 64)


@pytest.fixture(scope="module")
def uneven_uri(tmp_path_factory) -> str:
    """Fragments of 100, 10, 10, 50, 7 and 33 rows; every third row deleted."""
    path = str(tmp_path_factory.mktemp("torch_edges") / "uneven.lance")
    start = 0
    for n in (100, 10, 10, 50, 7, 33):
        lance.write_dataset(pa.table({"x": np.arange(start, start + n, dtype=np.int64)}), path, mode="append")
        start += n
    return path


@pytest.mark.parametrize("deleted", [False, True])
@pytest.mark.parametrize("kw", [{}, {"rank": 0, "world_size": 2}, {"rank": 1, "world_size": 2}, {"batch_size": 7}])
def test_fragment_edge_batches_equal_pylance(tmp_path, uneven_uri, deleted, kw) -> None:
    """``batch_edges="fragment"``: the batch sizes and rows of pylance's loader, which ends a run
    at every fragment end and joins runs while they fit in a batch (the default cuts exact-size
    batches across fragment ends instead)."""
    from lance.torch.data import LanceDataset as PylanceDataset

    path = uneven_uri
    if deleted:
        path = str(tmp_path / "deleted.lance")
        lance.write_dataset(lance.dataset(uneven_uri).to_table(), path, max_rows_per_file=40)
        lance.dataset(path).delete("x % 3 = 0")
    kw = {"batch_size": 32, "auto_detect_rank": False, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = [b.tolist() for b in PylanceDataset(lance.dataset(path), **kw)]
    ours = [b.tolist() for b in lt.LanceDataset(path, batch_edges="fragment", device="cpu", **kw)]
    assert ours == ref
    exact = [len(b) for b in lt.LanceDataset(path, device="cpu", **kw)]
    assert exact[:-1] == [kw["batch_size"]] * (len(exact) - 1)


def test_fragment_edge_batches_options(uneven_uri) -> None:
    sizes = [len(b) for b in lt.LanceDataset(uneven_uri, 32, batch_edges="fragment", drop_last=True, device="cpu")]
    assert sizes == [32, 32, 32, 24, 32, 25, 32]  # only the short last batch (1 row) is dropped
    with pytest.raises(ValueError, match="batch_edges"):
        lt.LanceDataset(uneven_uri, 32, batch_edges="fragments")
    with pytest.raises(ValueError, match="shuffle"):
        lt.LanceDataset(uneven_uri, 32, batch_edges="fragment", shuffle=True)
    # a batch sampler's batches are its ranges either way
    by_range = [len(b) for b in lt.LanceDataset(uneven_uri, 32, batch_edges="fragment", shard_granularity="batch", rank=0, world_size=1, device="cpu")]
    assert by_range == [32] * 6 + [18]


def test_samples_are_distinct_live_rows(uri, live_ids) -> None:
    ids = _ids(lt.LanceDataset(uri, 16, columns=["id"], samples=50, seed=1, device="cpu"))
    assert len(ids) == len(set(ids)) == 50 and set(ids) <= set(live_ids.tolist())


def test_pickles_for_spawned_workers(uri) -> None:
    """Spawned DataLoader workers get a pickled copy: it reopens the same version."""
    import pickle

    ds = lt.LanceDataset(uri, 16, columns=["id"], filter="id > 100", shuffle=True, seed=2, device="cpu")
    first = _ids(ds)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.dataset.version == ds.dataset.version and _ids(copy) == first
    mds = pickle.loads(pickle.dumps(lt.LanceMapDataset(uri, columns=["id"])))
    assert int(mds[5]) == int(lance.dataset(uri).take([5]).column("id")[0].as_py())


def test_a_pylance_dataset_object_is_read_at_its_version(tmp_path) -> None:
    """pylance's loader takes a ``lance.LanceDataset``: so does ours (a script changes only its
    import), read by lance_gpu at that dataset's version."""
    from lance.torch.data import LanceDataset as PylanceDataset

    path = str(tmp_path / "v.lance")
    lance.write_dataset(pa.table({"id": np.arange(100, dtype=np.int64)}), path)
    lance.write_dataset(pa.table({"id": np.arange(100, 150, dtype=np.int64)}), path, mode="append")
    for version in (1, 2):
        old = lance.dataset(path, version=version)
        ours = lt.LanceDataset(old, 32, columns=["id"], device="cpu")
        assert ours.dataset.version == version
        # the same rows in the same order (pylance also cuts a short batch at each fragment's end)
        assert torch.cat(list(ours)).tolist() == torch.cat(list(PylanceDataset(old, 32, columns=["id"]))).tolist()
    with pytest.raises(TypeError, match="pylance dataset"):
        lt.LanceDataset(object(), 8)


def test_pickled_feed_over_s3_keeps_its_storage_options(s3_server) -> None:
    """A spawned DataLoader worker gets a pickled feed: over S3 it must reopen the dataset with
    the storage options it was opened with (endpoint, credentials), at the same version."""
    import pickle

    uri = s3_server.uri("torch")
    opts = s3_server.storage_options
    lance_gpu.write_dataset(pa.table({"id": np.arange(200, dtype=np.int64)}), uri, storage_options=opts, max_rows_per_file=64)
    ds = lt.LanceDataset(uri, 16, columns=["id"], filter="id % 3 = 0", dataset_options={"storage_options": opts},
                         shuffle=True, seed=1, shuffle_buffer=48, read_rows=32, device="cpu")
    first = _ids(ds)
    lance_gpu.write_dataset(pa.table({"id": np.arange(200, 210, dtype=np.int64)}), uri, mode="append", storage_options=opts)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.dataset.storage_options == opts and copy.dataset.version == ds.dataset.version
    assert _ids(copy) == first and sorted(first) == list(range(0, 200, 3))
    mds = pickle.loads(pickle.dumps(lt.LanceMapDataset(uri, columns=["id"], dataset_options={"storage_options": opts})))
    assert len(mds) == 210 and int(mds[205]) == 205


def test_pylance_style_call_of_a_sampler(uri, live_ids) -> None:
    ds = lance_gpu.dataset(uri)
    batches = list(lt.FullScanSampler()(ds, batch_size=50, columns=["id"]))
    assert pa.Table.from_batches(batches).column("id").to_numpy().tolist() == live_ids.tolist()


def test_unsupported_arguments_raise_our_errors(uri) -> None:
    with pytest.raises(UnsupportedFeatureError):
        lt.LanceDataset(uri, 8, cache=True)
    with pytest.raises(NotImplementedError):
        lt.LanceDataset(uri, 8, columns={"x": "id * 2"})
    with pytest.raises(ValueError):
        lt.LanceDataset(uri, 8, shard_granularity="row")
    with pytest.raises(ValueError):
        lt.LanceDataset(uri, 8, device="tpu")
    with pytest.raises(ValueError):
        lt.ShardedFragmentSampler(2, 2)


def test_pin_memory_without_cuda_warns(uri) -> None:
    if torch.cuda.is_available():
        pytest.skip("torch has CUDA here")
    with pytest.warns(UserWarning, match="pin_memory"):
        lt.LanceDataset(uri, 8, pin_memory=True, device="cpu")


# -- tensors ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def types_uri(tmp_path_factory) -> str:
    from lance.arrow import bfloat16_array

    n = 12
    fst = pa.FixedShapeTensorArray.from_numpy_ndarray(np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3))
    table = pa.table(
        {
            "i8": pa.array(np.arange(n) - 5, pa.int8()),
            "u64": pa.array(np.arange(n), pa.uint64()),
            "f16": pa.array(np.linspace(0, 1, n).astype(np.float16)),
            "f64": pa.array(np.linspace(0, 1, n)),
            "flag": pa.array(np.arange(n) % 2 == 0),
            "bf": bfloat16_array([float(x) / 4 for x in range(n)]),
            "bfl": pa.FixedSizeListArray.from_arrays(bfloat16_array([float(x) for x in range(n * 2)]), 2),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 3, dtype=np.int16)), 3),
            "fst": fst,
            "ts": pa.array(np.arange(n) * 1_000_000, pa.timestamp("us")),
            "text": pa.array([f"t{i}" for i in range(n)]),
            "blob": pa.array([bytes([i]) * i for i in range(n)], pa.binary()),
            "nullable": pa.array([None if i % 4 == 0 else float(i) for i in range(n)]),
            "ints": pa.array([[i] * (i % 3) for i in range(n)], pa.list_(pa.int32())),
        }
    )
    path = str(tmp_path_factory.mktemp("types") / "types.lance")
    lance.write_dataset(table, path)
    return path


def test_fixed_shape_tensor_reads_like_pylance(types_uri) -> None:
    ours = lance_gpu.dataset(types_uri).to_table(columns=["fst"], device="cpu")
    assert ours.equals(lance.dataset(types_uri).to_table(columns=["fst"]))


def _one(uri, columns, **kwargs):
    return next(iter(lt.LanceDataset(uri, 100, columns=columns, device="cpu", **kwargs)))


def test_numeric_tensors_equal_pylance(types_uri) -> None:
    from lance.torch.data import LanceDataset as PylanceDataset

    cols = ["i8", "u64", "f16", "f64", "flag", "bf", "bfl", "emb"]
    ours = _one(types_uri, cols)
    ref = next(iter(PylanceDataset(lance.dataset(types_uri), 100, columns=cols)))
    for c in cols:
        assert ours[c].dtype == ref[c].dtype, c
        assert ours[c].shape == ref[c].shape, c
        assert torch.equal(ours[c], ref[c]), c
    assert ours["flag"].dtype == torch.bool and ours["bf"].dtype == torch.bfloat16
    assert ours["bfl"].shape == (12, 2) and ours["emb"].shape == (12, 3)


def test_fixed_shape_tensor_is_n_dimensional(types_uri) -> None:
    t = _one(types_uri, ["fst"])
    assert t.shape == (12, 2, 3)
    assert torch.equal(t, torch.arange(72, dtype=torch.float32).reshape(12, 2, 3))


def test_temporal_strings_and_binary(types_uri) -> None:
    out = _one(types_uri, ["ts", "text", "blob"])
    assert out["ts"].dtype == torch.int64 and out["ts"].tolist() == [i * 1_000_000 for i in range(12)]
    assert out["text"] == [f"t{i}" for i in range(12)]
    assert out["blob"] == [bytes([i]) * i for i in range(12)]


def test_decode_hook_and_unsupported_type(types_uri) -> None:
    out = _one(types_uri, ["ints", "i8"], decode={"ints": lambda arr: [torch.tensor(v, dtype=torch.int32) for v in arr.to_pylist()]})
    assert [v.tolist() for v in out["ints"]] == [[i] * (i % 3) for i in range(12)]
    with pytest.raises(TypeError, match="ints"):
        _one(types_uri, ["ints"])
    # pylance's loader raises ValueError for a list column: an ``except ValueError`` catches ours too
    with pytest.raises(ValueError, match="ints") as caught:
        _one(types_uri, ["ints"])
    assert isinstance(caught.value, lt.NoTensorRuleError)
    from lance.torch.data import LanceDataset as PylanceDataset

    with pytest.raises(ValueError):
        list(PylanceDataset(types_uri, 4, columns=["ints"]))


def test_null_rule(types_uri) -> None:
    with pytest.raises(lt.NullValueError, match="nullable"):
        _one(types_uri, ["nullable"])
    out = _one(types_uri, ["nullable"], nulls="mask")
    valid = out["nullable_valid"]
    assert valid.tolist() == [i % 4 != 0 for i in range(12)]
    assert torch.isnan(out["nullable"][~valid]).all()
    assert out["nullable"][valid].tolist() == [float(i) for i in range(12) if i % 4]


def test_tensors_share_arrow_memory(types_uri) -> None:
    batch = next(iter(lt.LanceDataset(types_uri, 100, columns=["f64", "emb"], device="cpu", to_tensor_fn=None)))
    out = lt.to_tensor(batch)
    assert out["f64"].data_ptr() == batch.column("f64").buffers()[1].address
    assert out["emb"].data_ptr() == batch.column("emb").values.buffers()[1].address


def test_record_batches_of_changing_schemas_convert_by_their_own_types(types_uri) -> None:
    """to_tensor keeps the last schema's field plans: a batch of another schema (same names,
    other types, a slice with an offset, an extension type) must still convert by its own."""
    table = lance.dataset(types_uri).to_table(columns=["i8", "f64", "fst", "bf"])
    other = pa.table({"i8": pa.array(np.arange(12) * 1.5), "f64": pa.array(np.arange(12), pa.int32()),
                      "fst": table.column("fst"), "bf": pa.array(np.arange(12), pa.uint64())})
    for batch, want in [(table, (torch.int8, torch.float64, torch.bfloat16)), (other, (torch.float64, torch.int32, torch.int64)),
                        (table, (torch.int8, torch.float64, torch.bfloat16))]:
        rb = batch.combine_chunks().to_batches()[0].slice(3, 7)
        out = lt.to_tensor(rb)
        assert (out["i8"].dtype, out["f64"].dtype, out["bf"].dtype) == want
        assert out["fst"].shape == (7, 2, 3) and torch.equal(out["fst"], torch.arange(18, 60, dtype=torch.float32).reshape(7, 2, 3))
        assert out["i8"].tolist() == rb.column("i8").to_pylist()
        general = lt.to_tensor(pa.Table.from_batches([rb]))  # a table takes the per-column path
        assert all(torch.equal(out[k], general[k]) for k in out)


# -- range reads (lance_gpu.scan.ranges; tests/test_scan_ranges.py pins them) ------------------


@pytest.fixture(scope="module")
def paged_uri(tmp_path_factory) -> str:
    """Three fragments of 300 rows: a 64-float32 embedding stored full-zip in pages of 40 rows
    (20 at the cuts), a dictionary-encoded int64 label, a float64; every row with label 7
    deleted."""
    rng = np.random.default_rng(3)
    n, d = 900, 64
    table = pa.table(
        {
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * d).astype(np.float32)), d),
            "label": pa.array(rng.integers(0, 50, n), pa.int64()),
            "score": pa.array(rng.standard_normal(n)),
            "flag": pa.array(np.arange(n) % 2 == 0),
        }
    )
    path = str(tmp_path_factory.mktemp("paged") / "paged.lance")
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=40))
    ds = lance.write_dataset(reader, path, max_rows_per_file=300, max_rows_per_group=40, data_cache_bytes=4 * 16384, max_page_bytes=16384)
    ds.delete("label = 7")
    return path


def test_source_reads_by_the_scan_range_reader(paged_uri) -> None:
    """RowSource reads through one RangeReader: the range path without a filter or row ids
    (a filter is applied to each range read after it), the executor with row ids."""
    from lance_gpu.torch._source import RowSource

    ds = lance_gpu.dataset(paged_uri)
    ref = lance.dataset(paged_uri)
    plain = RowSource(ds, ["emb", "score"], None, False)
    assert plain.ranges().ranged
    assert plain.read(1, 3, 50).equals(ref.get_fragments()[1].to_table(columns=["emb", "score"]).slice(3, 47))
    filtered = RowSource(ds, ["emb"], "label > 20", False)
    assert filtered.ranges().ranged
    want = ref.get_fragments()[2].to_table(columns=["emb", "label"]).slice(10, 100)
    assert filtered.read(2, 10, 110).equals(want.filter(pa.compute.greater(want.column("label"), 20)).select(["emb"]))
    assert not RowSource(ds, ["emb"], None, True).ranges().ranged


def test_direct_feed_equals_pylance_batch_sampler(paged_uri) -> None:
    from lance.sampler import ShardedBatchSampler as PylanceBatchSampler
    from lance.torch.data import LanceDataset as PylanceDataset

    cols = ["emb", "label", "score"]
    for rank in range(2):
        ref = list(PylanceDataset(lance.dataset(paged_uri), 32, columns=cols, sampler=PylanceBatchSampler(rank, 2, randomize=True, seed=9)))
        ours = list(lt.LanceDataset(paged_uri, 32, columns=cols, rank=rank, world_size=2, shard_granularity="batch", shuffle=True, seed=9, shuffle_buffer=0, device="cpu"))
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref, strict=True):
            for c in cols:
                assert torch.equal(a[c], b[c]), c


# -- map-style ---------------------------------------------------------------------------------


def test_map_dataset_takes_equal_pylance(uri, live_ids) -> None:
    mds = lt.LanceMapDataset(uri, columns=["id", "emb"])
    ref = lance.dataset(uri)
    assert len(mds) == live_ids.size
    idx = [7, 200, 3, 3, 290]
    got = mds.__getitems__(idx)
    want = ref.take(idx, columns=["id", "emb"])
    assert got["id"].tolist() == want.column("id").to_pylist()
    assert torch.equal(got["emb"], torch.tensor(np.stack(want.column("emb").to_numpy(zero_copy_only=False))))
    row = mds[-1]
    assert int(row["id"]) == int(live_ids[-1])
    with pytest.raises(IndexError):
        mds[len(mds)]
    sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(mds, generator=torch.Generator().manual_seed(0)), 32, False)
    loader = torch.utils.data.DataLoader(mds, batch_sampler=sampler, collate_fn=lt.identity_collate, num_workers=1)
    seen = [int(i) for b in loader for i in b["id"]]
    assert sorted(seen) == live_ids.tolist()


# -- the GPU feed ------------------------------------------------------------------------------


def _device_feed_tests() -> Command:
    import os

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", LANCE_GPU_TEST_SIM_DEVICE="1", PYTHONPATH=str(ROOT))
    return [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/test_torch_device.py"], env, str(ROOT)


@runs_in_background(_device_feed_tests)  # beside the rest of the suite (tests/background_runs.py)
def test_device_feed_under_cuda_simulator(request: pytest.FixtureRequest) -> None:
    """tests/test_torch_device.py (gpu-marked) with the numba CUDA simulator as the device."""
    proc = finished(request.node.nodeid, request.function)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]


# -- the README ----------------------------------------------------------------------------------


def test_readme_training_example_runs(tmp_path) -> None:
    """The README's training example, as written, over a small dataset at its path, run as a
    fresh script (its DataLoader workers fork: a parent that has decoded already, as this
    test process has, must not fork them; see the README)."""
    import re

    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Training (PyTorch)") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "/data/train.lance" in code
    rng = np.random.default_rng(0)
    n = 6000
    table = pa.table(
        {
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 128, dtype=np.float32)), 128),
            "label": pa.array(rng.integers(0, 10, n), pa.int64()),
            "split": pa.array(np.where(np.arange(n) % 6 == 0, "test", "train")),
        }
    )
    path = tmp_path / "train.lance"
    lance.write_dataset(table, str(path), max_rows_per_file=1000)
    script = tmp_path / "train.py"
    script.write_text(
        code.replace("/data/train.lance", str(path))
        + "\nassert torch.isfinite(loss).item()  # the training loop ran\n"
        + "assert x.shape[1:] == (128,) and y.dtype == torch.int64\nprint('trained')\n"
    )
    import os

    proc = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0 and "trained" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]


def _ids_of_rows(rows: list[dict]) -> list[int]:
    return [r["id"] for r in rows]


def test_safe_dataset_and_loader_equal_pylance(uri) -> None:
    """``SafeLanceDataset`` / ``get_safe_loader`` as pylance's: rows as dicts by one take, the
    dataset pickled into spawned workers without an open dataset."""
    import pickle

    from lance.torch.data import SafeLanceDataset as PylanceSafe

    ours, ref = lt.SafeLanceDataset(uri), PylanceSafe(uri)
    assert len(ours) == len(ref) == lance.dataset(uri).count_rows()
    picks = [0, 9, 10, 44, 45, len(ref) - 1]
    mine = ours.__getitems__(picks)
    theirs = ref.__getitems__(picks)
    assert [r["id"] for r in mine] == [r["id"] for r in theirs]
    assert [r["emb"] for r in mine] == [pytest.approx(r["emb"]) for r in theirs]
    assert ours[3]["id"] == ref[3]["id"]
    assert pickle.loads(pickle.dumps(ours))._ds is None  # nothing open crosses a spawn
    loader = lt.get_safe_loader(ours, batch_size=50, num_workers=1, collate_fn=_ids_of_rows)
    assert loader.multiprocessing_context.get_start_method() == "spawn" and loader.persistent_workers
    got = [i for batch in loader for i in batch]
    assert got == [r["id"] for r in ref.__getitems__(list(range(len(ref))))]
