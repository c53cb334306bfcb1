# SPDX-License-Identifier: Apache-2.0
"""The same round trips on every object store: S3 (moto), Azure (Azurite), GCS
(fake-gcs-server) on loopback, read and written by lance-gpu and pylance over HTTP with the
same pylance-style ``storage_options``, and ``memory://`` (pylance reads a copy of its
objects).  Store-specific cases live in tests/test_io_s3.py and tests/test_io_gcs.py; the
servers in tests/stores.py and the fixtures in tests/conftest.py."""

from __future__ import annotations

import threading

import lance
import numpy as np
import pyarrow as pa
import pytest
from stores import mixed_table as _tbl

import lance_gpu
from lance_gpu.errors import ConditionalPutUnsupportedError, DatasetNotFoundError, ObjectExistsError, ObjectNotFoundError
from lance_gpu.io import ObstoreStore, resolve

pytestmark = pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning")


@pytest.fixture(params=["s3", "gcs"])
def suffix_range_server(request: pytest.FixtureRequest):
    """S3 and GCS: the stores that answer suffix-range GETs."""
    return request.getfixturevalue({"s3": "s3_server", "gcs": "gcs_server"}[request.param])


def _pylance(server, uri: str) -> lance.LanceDataset:
    """pylance's view of the dataset at ``uri`` (for ``memory://``: of a copy of its objects)."""
    where, opts = server.for_pylance(uri)
    return lance.dataset(where, storage_options=opts)


def test_pylance_writes_we_read(remote_store) -> None:
    opts = remote_store.storage_options
    uri = remote_store.uri("pl")
    lance.write_dataset(_tbl(0, 300), uri, max_rows_per_file=100, storage_options=opts, enable_stable_row_ids=True)
    lance.write_dataset(_tbl(300, 50), uri, mode="append", storage_options=opts)
    lance.dataset(uri, storage_options=opts).delete("id % 5 = 1")
    ref = lance.dataset(uri, storage_options=opts)
    ours = lance_gpu.dataset(uri, storage_options=opts)
    assert ours.version == ref.version == 3
    assert isinstance(ours.store, ObstoreStore) and ours.uri == uri
    assert ours.to_table().equals(ref.to_table())
    assert ours.to_table(with_row_id=True)["_rowid"].equals(ref.to_table(with_row_id=True)["_rowid"])
    assert ours.count_rows() == ref.count_rows()
    idx = [0, 5, 77, 123, 250, 279]
    assert ours.take(idx).equals(ref.take(idx))
    assert ours.to_table(columns=["id", "s"], filter="x > 20").equals(ref.to_table(columns=["id", "s"], filter="x > 20"))
    assert lance_gpu.dataset(uri, 1, storage_options=opts).to_table().equals(lance.dataset(uri, 1, storage_options=opts).to_table())
    assert ours.versions() == ref.versions()  # read several manifests at once from object stores
    assert ours.store.stats.requests > 0


def test_we_write_pylance_reads(any_store) -> None:
    opts = any_store.storage_options
    uri = any_store.uri("ours")

    def same() -> None:
        ref = _pylance(any_store, uri)
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
    assert len(_pylance(any_store, uri).get_fragments()) == 1
    lance_gpu.write_dataset(_tbl(5, 5), uri, mode="overwrite", storage_options=opts)
    same()
    assert _pylance(any_store, uri).to_table().equals(_tbl(5, 5))


def test_put_if_absent_is_conditional(any_store) -> None:
    """Commits rest on the store's conditional create (S3 ``If-None-Match: *``, Azure
    ``If-None-Match: *``, GCS ``x-goog-if-generation-match: 0``): a second create of one key
    is refused with our typed error, and the first object stays."""
    store, root = resolve(any_store.uri("pia"), any_store.storage_options)
    assert store.supports_conditional_put
    key = f"{root}/_versions/1.manifest"
    store.put_if_absent(key, b"first")
    with pytest.raises(ObjectExistsError) as info:
        store.put_if_absent(key, b"second")
    assert isinstance(info.value, FileExistsError) and f"{any_store.scheme}://" in str(info.value)
    assert store.get(key) == b"first"
    assert any_store.keys(root) == [key]


def test_store_without_conditional_put_is_refused(any_store) -> None:
    """A store that cannot create conditionally is refused for commits, before anything is
    written, with a clear typed error (never a silently unsafe commit)."""
    store, root = resolve(any_store.uri("nocond"), any_store.storage_options)
    unsafe = ObstoreStore(store.store, store.base_uri, conditional_put=False)
    with pytest.raises(ConditionalPutUnsupportedError, match="conditional") as info:
        lance_gpu.write_dataset(pa.table({"id": [1]}), root, store=unsafe)
    assert isinstance(info.value, OSError)
    assert any_store.keys(root) == []


def test_missing_dataset_and_object(any_store) -> None:
    """A missing dataset or object: our typed errors (FileNotFoundError), naming the URI.
    (pylance 14 refuses a missing dataset with a ValueError that says "not found".)"""
    uri = any_store.uri("missing")
    with pytest.raises(DatasetNotFoundError) as info:
        lance_gpu.dataset(uri, storage_options=any_store.storage_options)
    assert isinstance(info.value, FileNotFoundError) and uri in str(info.value)
    with pytest.raises((ValueError, OSError), match="not found"):
        _pylance(any_store, uri)
    store, root = resolve(uri, any_store.storage_options)
    with pytest.raises(ObjectNotFoundError) as info2:
        store.get(f"{root}/nothing")
    assert isinstance(info2.value, FileNotFoundError) and f"{uri}/nothing" in str(info2.value)
    with pytest.raises(ObjectNotFoundError):
        store.read_range(f"{root}/nothing", 0, 4)


def test_missing_bucket(remote_store) -> None:
    uri = f"{remote_store.scheme}://no-such-bucket-here/ds"
    store, root = resolve(uri, remote_store.storage_options)
    with pytest.raises(ObjectNotFoundError) as info:
        store.get(f"{root}/x")
    assert isinstance(info.value, FileNotFoundError) and f"{uri}/x" in str(info.value)
    with pytest.raises(DatasetNotFoundError, match="no-such-bucket-here"):
        lance_gpu.dataset(uri, storage_options=remote_store.storage_options)


def test_concurrent_appends_each_land_once(any_store) -> None:
    """Writers racing on one dataset (threads here; processes on S3 in test_io_s3.py): each
    commit lands exactly once (the losers rebase through put-if-absent on the manifest), and
    pylance reads every row."""
    opts = any_store.storage_options
    uri = any_store.uri("conc")
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
    ref = _pylance(any_store, uri)
    assert ref.version == 7
    ids = sorted(ref.to_table()["id"].to_pylist())
    want = sorted(list(range(-10, 0)) + [1000 * k + 100 * j + i for k in range(3) for j in range(2) for i in range(10)])
    assert ids == want


def test_large_objects_upload_in_parts(any_store) -> None:
    from lance_gpu.io.remote import MULTIPART_ABOVE

    store, root = resolve(any_store.uri("big"), any_store.storage_options)
    payload = np.random.default_rng(0).integers(0, 255, MULTIPART_ABOVE + 12345, dtype=np.uint8).tobytes()
    store.put(f"{root}/blob", payload)
    assert store.size(f"{root}/blob") == len(payload)
    assert store.read_range(f"{root}/blob", MULTIPART_ABOVE, 12345).tobytes() == payload[MULTIPART_ABOVE:]


@pytest.mark.parametrize("size", [1000, 13 << 20])
def test_streaming_writer_appears_only_on_close(any_store, size: int) -> None:
    """Data files stream to the store while they are written (parts go out as they fill);
    the object appears only when the writer closes, and an aborted writer leaves no object."""
    from lance_gpu.io.remote import PART_SIZE

    store, root = resolve(any_store.uri("stream"), any_store.storage_options)
    payload = np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8)
    for end, key in ((True, f"{root}/kept.lance"), (False, f"{root}/aborted.lance")):
        store.stats.reset()
        w = store.open_writer(key)
        for lo in range(0, size, 1 << 20):
            w.write(payload[lo : lo + (1 << 20)])
            assert not store.exists(key)
        assert w.tell() == size
        if end:
            w.close()
            assert store.get(key) == payload.tobytes()
            parts = -(-size // PART_SIZE)
            assert store.stats.snapshot()["puts"] == (1 if parts == 1 else parts + 2)
        else:
            w.abort()
            assert not store.exists(key)
    assert [m.path.rsplit("/", 1)[-1] for m in store.list(root)] == ["kept.lance"]
    assert any_store.keys(root) == [f"{root}/kept.lance"]


def test_request_counts_are_visible(suffix_range_server) -> None:
    """Request counts and bytes fetched are visible and minimal on stores that answer suffix
    ranges (Azure has none: a HEAD comes first there)."""
    server = suffix_range_server
    opts = server.storage_options
    uri = server.uri("counts")
    lance.write_dataset(_tbl(0, 20_000), uri, max_rows_per_file=10_000, storage_options=opts)
    store, root = resolve(uri, opts)
    store.stats.reset()
    ds = lance_gpu.dataset(uri, storage_options=opts)
    assert store.stats.lists == 1 and store.stats.gets == 1  # listing + the whole manifest
    store.stats.reset()
    ds.to_table()
    small = store.stats.snapshot()
    # small files: one tail read (footer, offset tables, column metadata, size), then the
    # rest of the object in one request -- for all six columns
    assert small["heads"] == 0 and small["gets"] <= 2 * 2, small
    store.stats.reset()
    ds.to_table()
    assert store.stats.gets == 0  # data-file metadata and bytes are cached on the open dataset

    # Larger files (or here: a store told to fetch nothing whole) are read by page ranges,
    # coalesced per column; a take fetches only the pages holding its rows.
    ranged = ObstoreStore(store.store, store.base_uri, whole_object_below=0)
    ds = lance_gpu.dataset(root, store=ranged)
    full = ds.to_table()
    assert full.equals(lance.dataset(uri, storage_options=opts).to_table())
    total = ranged.stats.bytes_read
    ranged.stats.reset()
    ds = lance_gpu.dataset(root, store=ranged)
    ranged.stats.reset()
    assert ds.take([3, 15_000], columns=["id"]).column("id").to_pylist() == [3, 15_000]
    assert ranged.stats.gets <= 2 * 2  # per file: tail + the one page
    from lance_gpu.file.container import TAIL_READ

    assert ranged.stats.bytes_read - 2 * TAIL_READ < 64 * 1024 < total  # only the pages of rows 3 and 15000
