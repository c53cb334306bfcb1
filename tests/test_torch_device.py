# SPDX-License-Identifier: Apache-2.0
"""The GPU feed of lance_gpu.torch (``device="cuda"``): fragments decoded in device memory,
wrapped for torch by DLPack, batched on the device.

``gpu``-marked: on a GPU it runs as is; without one, ``tests/test_torch.py`` runs this file
in a subprocess with the numba CUDA simulator as the device (``NUMBA_ENABLE_CUDASIM=1
LANCE_GPU_TEST_SIM_DEVICE=1``), where torch is the CPU build and the device buffers are
copied out of the simulator instead of shared.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

torch = pytest.importorskip("torch")
lance = pytest.importorskip("lance")

import functools
import operator

import lance_gpu.torch as lt

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    n = 40
    table = pa.table(
        {
            "id": pa.array(np.arange(n), pa.int64()),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 3, dtype=np.float32)), 3),
            "flag": pa.array(np.arange(n) % 2 == 0),
            "score": pa.array([None if i % 5 == 0 else float(i) for i in range(n)]),
        }
    )
    path = str(tmp_path_factory.mktemp("torch_dev") / "dev.lance")
    ds = lance.write_dataset(table, path, max_rows_per_file=20, data_storage_version="2.1")
    ds.delete("id = 3")
    return path


def _batches(uri, device, **kw):
    return list(lt.LanceDataset(uri, 8, columns=["id", "emb", "flag"], device=device, **kw))


def test_device_batches_equal_host_batches(uri, monkeypatch) -> None:
    from lance_gpu.torch import _source, data

    assert data.resolve_torch_device("cuda") == "cuda"
    decoded = []
    real = _source.RowSource.device_tables

    def spy(self, selections, **kw):
        for dt in real(self, selections, **kw):
            decoded.append(dt.fragment_id)
            yield dt

    monkeypatch.setattr(_source.RowSource, "device_tables", spy)
    dev, host = _batches(uri, "cuda"), _batches(uri, "cpu")
    assert decoded == [0, 1]  # both fragments went through the GPU reader
    assert len(dev) == len(host)
    for d, h in zip(dev, host):
        for k in h:
            assert d[k].dtype == h[k].dtype and torch.equal(d[k].cpu(), h[k]), k
        if torch.cuda.is_available():
            assert d["emb"].is_cuda


def test_device_fragment_edge_batches_equal_host(uri) -> None:
    """``batch_edges="fragment"`` cuts device batches as the host feed (pylance's sizes): two
    fragments of 19 and 20 live rows in batches of 8 give runs 8, 8, 3 and 8, 8, 4, and the run
    of 3 cannot join the next 8."""
    host = _batches(uri, "cpu", batch_edges="fragment")
    dev = _batches(uri, "cuda", batch_edges="fragment")
    assert [len(b["id"]) for b in host] == [8, 8, 3, 8, 8, 4]
    assert [b["id"].cpu().tolist() for b in dev] == [b["id"].tolist() for b in host]


def test_device_sharding_and_seeded_shuffle(uri) -> None:
    live = [i for i in range(40) if i != 3]
    for world in (1, 2):
        seen = []
        for rank in range(world):
            seen += [int(i) for b in _batches(uri, "cuda", rank=rank, world_size=world, shuffle=True, seed=2) for i in b["id"].cpu()]
        assert sorted(seen) == live
    a = [b["id"].cpu().tolist() for b in _batches(uri, "cuda", shuffle=True, seed=2)]
    assert a == [b["id"].cpu().tolist() for b in _batches(uri, "cuda", shuffle=True, seed=2)]
    assert functools.reduce(operator.iadd, a, []) != live


def test_device_filter_nulls_and_row_ids(uri) -> None:
    kw = {"columns": ["id", "score"], "filter": "id > 10", "with_row_id": True}
    dev = list(lt.LanceDataset(uri, 8, device="cuda", nulls="mask", **kw))
    host = list(lt.LanceDataset(uri, 8, device="cpu", nulls="mask", **kw))
    for d, h in zip(dev, host, strict=True):
        for k in h:
            assert torch.equal(d[k].cpu().nan_to_num(-1.0), h[k].nan_to_num(-1.0)), k
    with pytest.raises(lt.NullValueError, match="score"):
        list(lt.LanceDataset(uri, 8, device="cuda", columns=["score"]))


def test_device_batch_sampler_equals_host(uri, monkeypatch) -> None:
    """A batch sampler's ranges read as row selections by the GPU executor: the same batches
    as the host path (sharded, shuffled as pylance's, a flush per range), never whole
    fragments."""
    from lance_gpu.torch import _source

    selected = []
    real = _source.RowSource.device_tables

    def spy(self, selections, **kw):
        selected.extend(rows is not None for _pos, rows in selections)
        yield from real(self, selections, **kw)

    monkeypatch.setattr(_source.RowSource, "device_tables", spy)
    for kw in ({}, {"rank": 1, "world_size": 2}, {"shuffle": True, "shuffle_buffer": 0, "seed": 3}):
        args = {"shard_granularity": "batch", "read_rows": 16, **kw}
        dev, host = _batches(uri, "cuda", **args), _batches(uri, "cpu", **args)
        assert len(dev) == len(host)
        for d, h in zip(dev, host, strict=True):
            for k in h:
                assert torch.equal(d[k].cpu(), h[k]), (kw, k)
    assert selected and all(selected)


def test_device_filtered_batch_sampler_equals_host(uri) -> None:
    kw = {"columns": ["id"], "filter": "id % 3 = 0", "shard_granularity": "batch", "rank": 1, "world_size": 2}
    dev = [b.cpu().tolist() for b in lt.LanceDataset(uri, 4, device="cuda", **kw)]
    host = [b.tolist() for b in lt.LanceDataset(uri, 4, device="cpu", **kw)]
    assert dev == host and dev


def test_device_custom_to_tensor_fn_gets_record_batches(uri) -> None:
    """A custom to_tensor_fn gets pylance's arguments (a RecordBatch); its tensors land on
    the device; to_tensor_fn=None yields the RecordBatches."""
    seen = []

    def fn(batch, hf_converter=None, use_blob_api=False):
        seen.append((type(batch), hf_converter, use_blob_api))
        return {"double": torch.from_numpy(batch.column("id").to_numpy()) * 2}

    dev = list(lt.LanceDataset(uri, 8, columns=["id"], device="cuda", to_tensor_fn=fn))
    host = list(lt.LanceDataset(uri, 8, columns=["id"], device="cpu", to_tensor_fn=fn))
    assert [d["double"].cpu().tolist() for d in dev] == [h["double"].tolist() for h in host]
    assert {s[0] for s in seen} == {pa.RecordBatch} and all(s[1:] == (None, False) for s in seen)
    if torch.cuda.is_available():
        assert dev[0]["double"].is_cuda
    raw = list(lt.LanceDataset(uri, 8, columns=["id", "emb"], device="cuda", to_tensor_fn=None))
    assert all(isinstance(b, pa.RecordBatch) for b in raw)
    assert pa.Table.from_batches(raw).equals(pa.Table.from_batches(list(lt.LanceDataset(uri, 8, columns=["id", "emb"], device="cpu", to_tensor_fn=None))))


def test_device_feed_plans_within_the_callers_memory_limit(uri, monkeypatch) -> None:
    """The GPU reader's budget rules apply to the feed: a ``memory_limit`` entered around the
    loop (thread-local) is the budget its prefetch thread plans with, for both conversions."""
    import threading

    from lance_gpu.gpu import memory, memory_limit

    seen: list[tuple[str, int]] = []
    real = memory.memory_budget

    def spy() -> int:
        budget = real()
        seen.append((threading.current_thread().name, budget))
        return budget

    monkeypatch.setattr(memory, "memory_budget", spy)
    with memory_limit(12_345_678):
        dev = _batches(uri, "cuda")
        custom = list(lt.LanceDataset(uri, 8, columns=["id"], device="cuda", to_tensor_fn=lambda b, **kw: b.num_rows))
    assert sum(custom) == 39 and sum(len(b["id"]) for b in dev) == 39
    prefetch = [budget for name, budget in seen if name.startswith("lance-gpu-torch-device-prefetch")]
    assert prefetch and set(prefetch) == {12_345_678}
    seen.clear()
    _batches(uri, "cuda")
    assert seen and 12_345_678 not in {budget for _name, budget in seen}


def test_device_filter_on_row_ids_equals_host(uri) -> None:
    kw = {"columns": ["id", "emb"], "filter": "_rowid % 3 = 0"}
    dev = list(lt.LanceDataset(uri, 8, device="cuda", **kw))
    host = list(lt.LanceDataset(uri, 8, device="cpu", **kw))
    assert len(dev) == len(host) > 0
    for d, h in zip(dev, host, strict=True):
        assert set(d) == set(h) == {"id", "emb"}
        assert all(torch.equal(d[k].cpu(), h[k]) for k in h)
