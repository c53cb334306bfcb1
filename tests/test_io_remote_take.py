# SPDX-License-Identifier: Apache-2.0
"""Takes and filtered reads on an object store fetch only the mini-block chunks holding
their rows (chunk metadata first, then the chunks), not whole pages: checked with the
store's byte and request counters on a pylance-written dataset on the moto S3 server, and
against pylance's results."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.file.container import TAIL_READ
from lance_gpu.io import ObstoreStore, resolve

pytestmark = pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning")

ROWS = 120_000


def _table() -> pa.Table:
    rng = np.random.default_rng(7)
    words = np.array([f"w{i:04d}-{'y' * (i % 11)}" for i in range(3000)])
    vec = rng.standard_normal(ROWS * 16).astype(np.float32)
    price = rng.random(ROWS)
    return pa.table({
        "id": np.arange(ROWS, dtype=np.int64),
        "price": pa.array(price, mask=price < 0.1),  # nullable: def levels in the chunks
        "name": pa.array(words[rng.integers(0, 3000, ROWS)]),
        "tag": pa.array(np.array(["red", "green", "blue"])[rng.integers(0, 3, ROWS)]),  # dictionary
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec), 16),
    })


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def remote_ds(request, s3_server):
    """One data file of several pages a column (``max_page_bytes``), written by pylance."""
    opts = s3_server.storage_options
    uri = s3_server.uri(f"take{request.param.replace('.', '')}")
    lance.write_dataset(_table(), uri, storage_options=opts, data_storage_version=request.param,
                        max_page_bytes=1 << 20)
    store, root = resolve(uri, opts)
    size = sum(m.size for m in store.list(root + "/data"))
    return uri, opts, store, root, size


def _fresh(store: ObstoreStore, root: str, **kwargs) -> tuple[ObstoreStore, lance_gpu.LanceDataset]:
    """A dataset on a new store over the same bucket (nothing cached; counters at zero
    once the dataset is open)."""
    ranged = ObstoreStore(store.store, store.base_uri, whole_object_below=0, **kwargs)
    ds = lance_gpu.dataset(root, store=ranged)
    ranged.stats.reset()
    return ranged, ds


def test_small_take_fetches_chunks_not_pages(remote_ds) -> None:
    uri, opts, store, root, size = remote_ds
    ref = lance.dataset(uri, storage_options=opts)
    idx = [5, 17_001, 60_000, 60_003, 119_999]
    expected = ref.take(idx)
    # Exact chunks (no coalescing across gaps): the tail read at open, each touched page's
    # chunk metadata, its chunks and the dictionary -- a few KiB a row.
    ranged, ds = _fresh(store, root, coalesce_gap=0)
    assert ds.take(idx).equals(expected)
    exact = ranged.stats.bytes_read - TAIL_READ
    assert exact < 64 * 1024 * len(idx), exact
    # The default store coalesces chunks up to its gap apart, still far less than the file.
    ranged, ds = _fresh(store, root)
    assert ds.take(idx).equals(expected)
    assert ranged.stats.bytes_read < size / 4, (ranged.stats.bytes_read, size)
    # repeated takes reuse the chunk tables of the open dataset: only chunks are fetched
    ranged.stats.reset()
    assert ds.take(idx[::-1]).equals(ref.take(idx[::-1]))
    assert ranged.stats.bytes_read < size / 4


def test_take_without_prefetch_reads_chunks(remote_ds) -> None:
    """``read_field`` on its own (no executor prefetch) takes the same chunk path."""
    uri, opts, store, root, _size = remote_ds
    ranged, ds = _fresh(store, root, coalesce_gap=0)
    frag = ds.snapshot.fragments[0]
    rows = np.array([3, 70_000, 70_001], np.int64)
    for name in ("vec", "name", "tag", "price"):
        field = next(f for f in ds.snapshot.lance_schema.fields if f.name == name)
        got = frag.read_field(field, ds.schema.field(name), rows)
        want = lance.dataset(uri, storage_options=opts).take(rows.tolist(), columns=[name]).column(name).combine_chunks()
        assert got.equals(want), name
    assert ranged.stats.bytes_read - TAIL_READ < 4 * 3 * 64 * 1024


def test_filtered_read_fetches_late_columns_by_chunk(remote_ds) -> None:
    uri, opts, store, root, _size = remote_ds
    flt = "id % 40000 = 11"
    expected = lance.dataset(uri, storage_options=opts).to_table(columns=["id", "vec", "name"], filter=flt)
    ranged, ds = _fresh(store, root, coalesce_gap=0)
    got = ds.to_table(columns=["id", "vec", "name"], filter=flt)
    assert got.equals(expected)
    id_bytes = ROWS * 8
    # the filter column whole (its pages), the late columns' chunks of 3 rows only
    assert ranged.stats.bytes_read - TAIL_READ < id_bytes + 3 * 2 * 64 * 1024, ranged.stats.bytes_read
    # no survivor: nothing of the late columns; a run of survivors: only the chunks holding it
    for flt, late_bytes in (("id < 0", 0), ("id >= 500 AND id < 600", 2 * 64 * 1024)):
        ranged, ds = _fresh(store, root, coalesce_gap=0)
        got = ds.to_table(columns=["id", "vec", "name"], filter=flt)
        assert got.equals(lance.dataset(uri, storage_options=opts).to_table(columns=["id", "vec", "name"], filter=flt))
        assert ranged.stats.bytes_read - TAIL_READ <= id_bytes + late_bytes, (flt, ranged.stats.bytes_read)


def test_dense_take_fetches_pages_in_one_round(remote_ds) -> None:
    """A take dense enough that its chunks would coalesce into whole pages fetches the
    pages at once (no chunk-metadata round): few requests, same rows as pylance."""
    uri, opts, store, root, size = remote_ds
    idx = np.arange(0, ROWS, 7)
    ranged, ds = _fresh(store, root)
    assert ds.take(idx).equals(lance.dataset(uri, storage_options=opts).take(idx))
    assert ranged.stats.gets <= 4, ranged.stats.snapshot()
    assert ranged.stats.bytes_read <= size + TAIL_READ  # the tail read at open, then the pages
