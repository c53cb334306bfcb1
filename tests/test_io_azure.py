# SPDX-License-Identifier: Apache-2.0
"""Datasets on Azure Blob Storage: Azurite (the official emulator) on loopback, read and
written by lance-gpu and pylance over HTTP with the same ``storage_options``."""

from __future__ import annotations

import threading

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.errors import ObjectExistsError, ObjectNotFoundError
from lance_gpu.io import ObstoreStore, resolve

pytestmark = pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning")


def _tbl(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "id": pa.array(ids),
            "s": pa.array([f"row-{i}" if i % 7 else None for i in ids]),
            "x": pa.array(ids * 0.25, pa.float32()),
            "v": pa.array([[int(i), int(i) + 1] for i in ids], pa.list_(pa.int32())),
            "st": pa.array([{"a": int(i), "b": f"b{i}"} for i in ids]),
        }
    )


def test_pylance_writes_we_read(azurite) -> None:
    opts = azurite.storage_options
    uri = azurite.uri("pl")
    lance.write_dataset(_tbl(0, 300), uri, max_rows_per_file=100, storage_options=opts, enable_stable_row_ids=True)
    lance.write_dataset(_tbl(300, 50), uri, mode="append", storage_options=opts)
    lance.dataset(uri, storage_options=opts).delete("id % 5 = 1")
    ref = lance.dataset(uri, storage_options=opts)
    ours = lance_gpu.dataset(uri, storage_options=opts)
    assert ours.version == ref.version == 3
    assert isinstance(ours.store, ObstoreStore) and ours.uri == uri
    assert ours.to_table().equals(ref.to_table())
    assert ours.to_table(with_row_id=True)["_rowid"].equals(ref.to_table(with_row_id=True)["_rowid"])
    idx = [0, 5, 77, 123, 250, 279]
    assert ours.take(idx).equals(ref.take(idx))
    assert ours.to_table(columns=["id", "s"], filter="x > 20").equals(ref.to_table(columns=["id", "s"], filter="x > 20"))
    assert lance_gpu.dataset(uri, 1, storage_options=opts).to_table().equals(lance.dataset(uri, 1, storage_options=opts).to_table())
    assert [v["version"] for v in ours.versions()] == [v["version"] for v in ref.versions()]
    assert ours.store.stats.requests > 0


def test_we_write_pylance_reads(azurite) -> None:
    opts = azurite.storage_options
    uri = azurite.uri("ours")

    def same() -> None:
        ref = lance.dataset(uri, storage_options=opts)
        ours = lance_gpu.dataset(uri, storage_options=opts)
        assert ref.version == ours.version
        assert ref.to_table().equals(ours.to_table())

    lance_gpu.write_dataset(_tbl(0, 200), uri, max_rows_per_file=60, storage_options=opts)
    same()
    lance_gpu.write_dataset(_tbl(200, 30), uri, mode="append", storage_options=opts)
    same()
    ds = lance_gpu.dataset(uri, storage_options=opts)
    ds.delete("id % 4 = 0")
    same()
    ds.add_columns({"y": "id * 2"})
    same()
    ds.optimize.compact_files(target_rows_per_fragment=1000)
    same()
    assert len(lance.dataset(uri, storage_options=opts).get_fragments()) == 1
    lance_gpu.write_dataset(_tbl(5, 5), uri, mode="overwrite", storage_options=opts)
    same()
    assert lance.dataset(uri, storage_options=opts).to_table().equals(_tbl(5, 5))


def test_put_if_absent_is_conditional(azurite) -> None:
    """Commits rest on Azure's conditional create (``If-None-Match: *``): a second create of
    one key is refused with our typed error, the first object stays."""
    store, root = resolve(azurite.uri("pia"), azurite.storage_options)
    assert store.supports_conditional_put
    key = f"{root}/_versions/1.manifest"
    store.put_if_absent(key, b"first")
    with pytest.raises(ObjectExistsError) as info:
        store.put_if_absent(key, b"second")
    assert isinstance(info.value, FileExistsError) and "az://" in str(info.value)
    assert store.get(key) == b"first"
    with pytest.raises(ObjectNotFoundError):
        store.get(f"{root}/missing")


def test_concurrent_appends_each_land_once(azurite) -> None:
    """Writers racing on one dataset: each commit lands exactly once (the losers rebase
    through put-if-absent on the manifest), and pylance reads every row."""
    opts = azurite.storage_options
    uri = azurite.uri("conc")
    lance_gpu.write_dataset(pa.table({"id": pa.array(np.arange(-10, 0))}), uri, storage_options=opts)
    errors: list[BaseException] = []

    def append(k: int) -> None:
        try:
            for j in range(2):
                start = 1000 * k + 100 * j
                tbl = pa.table({"id": pa.array(np.arange(start, start + 10))})
                lance_gpu.write_dataset(tbl, uri, mode="append", storage_options=opts)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ref = lance.dataset(uri, storage_options=opts)
    assert ref.version == 7
    ids = sorted(ref.to_table()["id"].to_pylist())
    want = sorted(list(range(-10, 0)) + [1000 * k + 100 * j + i for k in range(3) for j in range(2) for i in range(10)])
    assert ids == want
