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

    def spy(self, positions, **kw):
        for dt in real(self, positions, **kw):
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


def test_device_feed_refuses_batch_sampler(uri) -> None:
    with pytest.raises(NotImplementedError):
        list(lt.LanceDataset(uri, 8, device="cuda", shard_granularity="batch"))
