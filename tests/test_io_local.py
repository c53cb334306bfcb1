# SPDX-License-Identifier: Apache-2.0
"""The storage layer on the local file system: LocalStore, the URI resolver, fault injection,
and the rule that nothing outside ``lance_gpu/io`` touches dataset bytes."""

from __future__ import annotations

import errno
import gc
import os
import re
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.errors import (
    ConditionalPutUnsupportedError,
    CorruptFileError,
    DatasetExistsError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageConnectionError,
    StorageError,
    StoragePermissionError,
    StorageTimeoutError,
    UnsupportedFeatureError,
)
from lance_gpu.io import LOCAL, FaultInjectingStore, LocalStore, ObstoreStore, resolve
from lance_gpu.io.store import coalesce, join

REPO = Path(__file__).resolve().parents[1]


def _tbl(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({"id": pa.array(ids), "s": pa.array([f"r{i}" for i in ids]), "x": pa.array(ids * 0.5)})


def _staging(root: Path) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.startswith(".tmp_")]


# -- LocalStore ----------------------------------------------------------------------------


def test_local_store_roundtrip_and_counters(tmp_path: Path) -> None:
    store = LocalStore()
    key = str(tmp_path / "a" / "b.bin")
    store.put(key, b"0123456789" * 10)
    assert store.exists(key) and store.size(key) == 100
    assert store.get(key) == b"0123456789" * 10
    store.stats.reset()
    parts = store.read_ranges(key, [(0, 3), (10, 2), (95, 5)])
    assert [p.tobytes() for p in parts] == [b"012", b"01", b"56789"]
    assert store.stats.gets == 1  # three near ranges: one coalesced read
    assert store.stats.bytes_read == 100
    tail, size = store.read_tail(key, 4)
    assert tail.tobytes() == b"6789" and size == 100
    with pytest.raises(CorruptFileError, match="outside the file"):
        store.read_range(key, 98, 5)
    assert [m.path for m in store.list(str(tmp_path))] == [key]
    store.delete(key)
    store.delete(key)  # missing: not an error
    assert not store.exists(key)


def test_small_files_are_read_whole_and_hold_no_descriptor(tmp_path: Path) -> None:
    """A file up to ``WHOLE_READ_BYTES`` is read at once when opened and its descriptor
    closed (a history of small appends keeps thousands of readers open); a larger one is
    memory-mapped, holding its map's descriptor.  Both serve the same bytes and ranges."""
    from lance_gpu.io import local as local_io

    store = LocalStore()
    small, large = str(tmp_path / "small.bin"), str(tmp_path / "large.bin")
    small_bytes = bytes(range(256)) * 16
    large_bytes = bytes(range(256)) * (local_io.WHOLE_READ_BYTES // 256 + 1)
    store.put(small, small_bytes)
    store.put(large, large_bytes)
    gc.collect()  # handles of earlier tests left in cycles close now, not while counting
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        _count_open_handles(store, small, large, small_bytes, large_bytes)
    finally:
        if was_enabled:
            gc.enable()


def _count_open_handles(store: LocalStore, small: str, large: str, small_bytes: bytes, large_bytes: bytes) -> None:
    from lance_gpu.io import local as local_io

    files_before, handles_before = local_io._open_files, local_io._open_handles
    whole = store.open(small)
    assert local_io._open_files == files_before  # no descriptor held
    assert local_io._open_handles == handles_before + 1
    mapped = store.open(large)
    assert local_io._open_files == files_before + 1
    assert local_io._open_handles == handles_before + 2
    for handle, data in ((whole, small_bytes), (mapped, large_bytes)):
        assert handle.size == len(data)
        assert handle.mapped is not None and handle.mapped.tobytes() == data
        assert handle.read(10, 7).tobytes() == data[10:17]
        assert [p.tobytes() for p in handle.read_ranges([(0, 3), (4000, 5)])] == [data[:3], data[4000:4005]]
        with pytest.raises(CorruptFileError, match="outside the file"):
            handle.read(len(data) - 2, 3)
        handle.release([(0, len(data))])  # a hint: nothing to drop for bytes read whole
    whole.close()
    mapped.close()
    whole.close()  # twice: counted once
    assert (local_io._open_files, local_io._open_handles) == (files_before, handles_before)


def test_read_scattered_reads_into_place_or_declines(tmp_path: Path) -> None:
    """``read_scattered`` copies consecutive file bytes into the given memory ranges; it
    declines (False) past the end of the file, for a file replaced since it was opened,
    and for a mapping whose pages stay (a later read of them is free)."""
    from lance_gpu.io import local

    if local._libc_preadv() is None:
        pytest.skip("preadv through ctypes is Linux only")
    data = np.random.default_rng(1).integers(0, 256, 3 << 20, dtype=np.uint8)
    path = tmp_path / "f.bin"
    path.write_bytes(data.tobytes())
    handle = LocalStore(release_pages=True).open(str(path))
    a, b, skip = np.zeros(1000, np.uint8), np.zeros(5000, np.uint8), np.zeros(24, np.uint8)
    targets = np.array([[a.ctypes.data, a.size], [skip.ctypes.data, skip.size], [b.ctypes.data, b.size]], np.uint64)
    assert handle.read_scattered(100, targets)
    assert a.tobytes() == data[100:1100].tobytes() and b.tobytes() == data[1124:6124].tobytes()
    assert not handle.read_scattered(data.size - 3000, targets)  # past the end
    kept = LocalStore(release_pages=False).open(str(path))
    assert not kept.read_scattered(100, targets)
    kept.close()
    other = tmp_path / "g.bin"
    other.write_bytes(bytes(data.size))
    os.replace(other, path)  # another file at the path now
    a[:] = 7
    assert not handle.read_scattered(100, targets)
    handle.close()


def test_coalesce_groups_near_ranges() -> None:
    groups = coalesce([(1_000_000, 10), (0, 10), (20, 10), (200_000, 5)])
    assert [(s, e, sorted(i)) for s, e, i in groups] == [(0, 30, [1, 2]), (200_000, 200_005, [3]), (1_000_000, 1_000_010, [0])]


@pytest.mark.parametrize(("root", "parts", "key"), [
    ("/d/ds", ("data", "f.lance"), "/d/ds/data/f.lance"),
    ("/d/ds/", ("/_versions/", "1.manifest"), "/d/ds/_versions/1.manifest"),
    ("/d/ds", (), "/d/ds"),
    ("/d/ds//", (), "/d/ds"),
    ("/d/ds", ("", "x", ""), "/d/ds/x"),
    ("/d/ds", ("/",), "/d/ds/"),
    ("/", ("x",), "/x"),
    ("//", (), "/"),
    ("/", (), "/"),
    ("", ("a", "b/"), "a/b"),
    ("", (), ""),
    ("", ("/",), ""),
    ("bucket/p", ("q",), "bucket/p/q"),
    ("bucket/p/", (), "bucket/p"),
])
def test_join_keys(root: str, parts: tuple[str, ...], key: str) -> None:
    """Store keys: parts stripped of slashes after the root without its trailing ones; an
    absolute root keeps its leading slash, the file system's top included; empty parts skipped."""
    assert join(root, *parts) == key


def test_put_if_absent_is_atomic_and_leaves_no_staging(tmp_path: Path) -> None:
    key = str(tmp_path / "v" / "1.manifest")
    LOCAL.put_if_absent(key, b"first")
    with pytest.raises(ObjectExistsError) as info:
        LOCAL.put_if_absent(key, b"second")
    assert isinstance(info.value, FileExistsError) and key in str(info.value)
    assert LOCAL.get(key) == b"first"
    assert _staging(tmp_path) == []


@pytest.fixture(params=["always", "never"])
def overlap(request, monkeypatch: pytest.MonkeyPatch) -> str:
    """Background I/O on (as on a machine with a spare core) and off (all cores busy)."""
    from lance_gpu.io import background

    monkeypatch.setattr(background, "OVERLAP", request.param)
    return request.param


def test_staged_put_if_absent_links_or_removes_its_staging_file(tmp_path: Path, overlap: str) -> None:
    """A manifest's staging file made beforehand (created in the background) is filled and
    linked by the put; a put that loses (the name is taken) or one never made removes it."""
    key = str(tmp_path / "v" / "1.manifest")
    staged = LOCAL.stage(key)
    LOCAL.put_if_absent_after_sync(key, b"first", [], staged=staged)
    assert LOCAL.get(key) == b"first" and _staging(tmp_path) == []
    with pytest.raises(ObjectExistsError):
        LOCAL.put_if_absent_after_sync(key, b"second", [], staged=LOCAL.stage(key))
    assert LOCAL.get(key) == b"first" and _staging(tmp_path) == []
    other = str(tmp_path / "v" / "2.manifest")  # staged under one name, put under another
    LOCAL.put_if_absent_after_sync(other, b"2", [], staged=LOCAL.stage(key))
    assert LOCAL.get(other) == b"2" and _staging(tmp_path) == []
    LOCAL.stage(key).abort()
    assert _staging(tmp_path) == []


def test_writer_creation_failure_is_typed_at_first_use_and_leaves_nothing(tmp_path: Path, overlap: str) -> None:
    """The staging file is created in the background: a creation that fails (its directory
    is a file) raises the translated error at the first write or close, and nothing stays."""
    (tmp_path / "plain").write_bytes(b"not a directory")
    for use in ("write", "close", "abort"):
        writer = LOCAL.open_writer(str(tmp_path / "plain" / f"{use}.lance"))
        if use == "abort":
            writer.abort()
            continue
        with pytest.raises(OSError) as info:
            writer.write(b"x") if use == "write" else writer.close()
        assert str(tmp_path / "plain") in str(info.value)
    assert _staging(tmp_path) == [] and os.listdir(tmp_path) == ["plain"]


def test_files_in_existing_directories_are_created_without_making_them(tmp_path: Path, overlap: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit's directories exist: its files are created straight away (no ``makedirs``:
    a stat, a failing mkdir and a stat per file); a missing directory is made on demand,
    nested ones included; ``get`` reads whole files, empty ones too, and refuses directories."""
    from lance_gpu.io import local

    made: list[str] = []
    real = os.makedirs

    def counted(path, *args, **kwargs):
        made.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(local.os, "makedirs", counted)
    existing = tmp_path / "data"
    existing.mkdir()
    writer = LOCAL.open_writer(str(existing / "a.lance"))
    writer.write(b"abc")
    writer.close(sync=False)
    LOCAL.put(str(existing / "b.bin"), b"")
    key = str(tmp_path / "_versions" / "1.manifest")
    (tmp_path / "_versions").mkdir()
    LOCAL.put_if_absent_after_sync(key, b"m", [str(existing / "a.lance")], staged=LOCAL.stage(key))
    assert made == []
    deep = tmp_path / "x" / "y" / "c.lance"
    writer = LOCAL.open_writer(str(deep))
    writer.write(b"z" * 70_000)
    writer.close()
    LOCAL.put(str(tmp_path / "p" / "q" / "d.bin"), b"d")
    # (os.makedirs makes the parents by calling itself: those calls are counted too)
    assert {str(tmp_path / "x" / "y"), str(tmp_path / "p" / "q")} <= set(made)
    assert LOCAL.get(str(deep)) == b"z" * 70_000 and LOCAL.get(str(existing / "b.bin")) == b""
    assert LOCAL.get(str(existing / "a.lance")) == b"abc" and LOCAL.get(key) == b"m"
    with pytest.raises(StorageError) as info:
        LOCAL.get(str(existing))
    assert info.value.errno == errno.EISDIR and not isinstance(info.value, FileNotFoundError)
    assert _staging(tmp_path) == []


def test_background_tasks_that_submit_tasks_never_wait_on_the_pool(overlap: str) -> None:
    """A task of the background I/O pool that submits another runs it at once: more nested
    waits than the pool has threads finish (with a shared pool they would all wait)."""
    from concurrent.futures import wait as wait_all

    from lance_gpu.io.background import IO_THREADS, in_background

    def outer(k: int) -> int:
        return in_background(lambda: k * 2).result(timeout=30)

    futures = [in_background(outer, k) for k in range(3 * IO_THREADS)]
    done, pending = wait_all(futures, timeout=60)
    assert not pending and sorted(f.result() for f in done) == [2 * k for k in range(3 * IO_THREADS)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_process_pools_start_afresh_in_a_forked_child() -> None:
    """A ``ProcessPool`` is started once and kept; a forked child, where the parent's pool
    threads do not exist, starts its own on first use and its tasks run (they would hang
    on the parent's pool), while the parent keeps its pool."""
    import threading

    from lance_gpu.io.background import ProcessPool

    started = []
    pool = ProcessPool(lambda: started.append(1) or 2, "test-pool")
    parent = pool.get()
    assert pool.get() is parent and started == [1]
    assert parent.submit(threading.get_ident).result(timeout=30) != threading.get_ident()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running the parent's cleanups
        try:
            child = pool.get()
            ok = child is not parent and child.submit(lambda: 41 + 1).result(timeout=30) == 42
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert pool.get() is parent and started == [1]


def test_spare_core_follows_the_load_average(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` overlaps only where the last minute's load leaves a core free (the answer is
    kept for a second); ``always`` / ``never`` override it."""
    import threading

    from lance_gpu.io import background

    monkeypatch.setattr(background, "OVERLAP", "auto")
    monkeypatch.setattr(background, "_usable_cpus", lambda: 4)
    for load, spare in ((0.5, True), (3.0, True), (3.5, False), (9.0, False)):
        monkeypatch.setattr(background, "_spare", (-background.SPARE_CORE_TTL, False))  # expired
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert background.spare_core() is spare
        ran_in = background.in_background(threading.get_ident).result()
        assert (ran_in != threading.get_ident()) is spare
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert background.spare_core() is False  # kept for SPARE_CORE_TTL seconds
    monkeypatch.setattr(background, "OVERLAP", "always")
    assert background.spare_core() is True


def test_done_now_futures_behave_as_finished_futures() -> None:
    """:func:`done_now`'s cheap :class:`Finished` futures answer every ``Future`` method and
    ``concurrent.futures.wait`` as a finished ``Future`` does, mixed with pending ones too."""
    import threading
    from concurrent.futures import FIRST_COMPLETED, Future, InvalidStateError, wait

    from lance_gpu.io.background import Finished, done_now, io_pool

    ok = done_now(lambda a, b=0: a + b, 2, b=3)
    failed = done_now(lambda: 1 // 0)
    assert isinstance(ok, Future) and isinstance(ok, Finished)
    assert ok.done() and not ok.running() and not ok.cancelled() and not ok.cancel()
    assert ok.result() == 5 and ok.result(timeout=0) == 5 and ok.exception() is None
    assert isinstance(failed.exception(), ZeroDivisionError)
    with pytest.raises(ZeroDivisionError):
        failed.result()
    with pytest.raises(ZeroDivisionError):
        failed.result()  # again: a finished future keeps its outcome
    seen: list[object] = []
    ok.add_done_callback(seen.append)  # a finished future runs the callback at once
    assert seen == [ok]
    with pytest.raises(InvalidStateError):
        ok.set_result(6)
    assert ok.result() == 5
    gate = threading.Event()
    pending = io_pool().submit(gate.wait, 30)
    try:
        done, not_done = wait([ok, failed, pending], timeout=0)
        assert done == {ok, failed} and not_done == {pending}
        done, _ = wait([ok, pending], return_when=FIRST_COMPLETED)
        assert done == {ok}
    finally:
        gate.set()
    done, not_done = wait([ok, failed, pending], timeout=30)
    assert done == {ok, failed, pending} and not not_done


def test_missing_object_and_permission_errors_are_typed(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(ObjectNotFoundError) as info:
        LOCAL.get(missing)
    assert isinstance(info.value, FileNotFoundError) and missing in str(info.value)
    if os.geteuid() == 0:
        return  # root ignores permissions
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(StoragePermissionError):
            LOCAL.put(str(locked / "x"), b"1")
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p, lambda p: str(p)),
        (lambda p: p.as_uri(), lambda p: str(p)),
        (lambda p: "file:" + str(p), lambda p: str(p)),
    ],
)
def test_resolve_local_forms(tmp_path: Path, make, expected) -> None:
    store, root = resolve(make(tmp_path / "ds"))
    assert store is LOCAL and root == expected(tmp_path / "ds")


def test_resolve_relative_and_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve("rel/ds") == (LOCAL, str(tmp_path / "rel" / "ds"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve("~/ds") == (LOCAL, str(tmp_path / "ds"))


def test_resolve_remote_schemes() -> None:
    store, root = resolve("memory://unit/some/ds")
    assert isinstance(store, ObstoreStore) and root == "some/ds" and store.uri(root) == "memory://unit/some/ds"
    s3, key = resolve("s3://bucket/pre/ds", {"aws_region": "us-east-1", "aws_access_key_id": "a", "aws_secret_access_key": "b"})
    assert isinstance(s3, ObstoreStore) and key == "pre/ds" and s3.supports_conditional_put
    http, _ = resolve("https://example.com/ds")
    assert not http.writable and not http.supports_conditional_put
    with pytest.raises(UnsupportedFeatureError):
        resolve("ftp://host/ds")
    with pytest.raises(ValueError, match="storage_options"):
        resolve("s3://bucket/ds", {"not_a_real_option": "1"})


def test_memory_roundtrip_with_pylance_semantics() -> None:
    uri = "memory://roundtrip/ds"
    ds = lance_gpu.write_dataset(_tbl(0, 100), uri, max_rows_per_file=40)
    assert ds.uri == uri and len(ds.fragments) == 3
    lance_gpu.write_dataset(_tbl(100, 10), uri, mode="append")
    ds = lance_gpu.dataset(uri)
    ds.delete("id % 2 = 0")
    ds = lance_gpu.dataset(uri)
    assert ds.version == 3
    assert ds.to_table().equals(_tbl(0, 110).filter(pa.compute.equal(pa.compute.bit_wise_and(_tbl(0, 110)["id"], 1), 1)))
    assert lance_gpu.dataset(uri, 1).count_rows() == 100


def test_memory_create_over_an_existing_dataset_starts_fresh_as_pylance() -> None:
    """pylance resolves every ``memory://`` URI to a new, empty store: a second create at
    the same URI is version 1 with only its rows, while a dataset object written before keeps
    its own store and commits there.  Ours renews the name's store for that create (other
    datasets of the name stay readable by URI)."""
    table = _tbl(0, 20)
    results = {}
    for name, module in (("pylance", lance), ("ours", lance_gpu)):
        first = module.write_dataset(table, "memory://percall/a")
        first.insert(_tbl(20, 5))
        second = module.write_dataset(_tbl(50, 3), "memory://percall/a")
        appended = module.LanceDataset.commit(first, module.LanceOperation.Append(
            module.fragment.write_fragments(_tbl(60, 4), first)), read_version=first.version)
        results[name] = (second.version, second.to_table(), first.version, first.count_rows(),
                         appended.version, appended.count_rows(), first.checkout_version(1).count_rows())
    assert results["ours"][0] == results["pylance"][0] == 1
    assert results["ours"][1].equals(results["pylance"][1])
    assert results["ours"][2:] == results["pylance"][2:]
    lance_gpu.write_dataset(table, "memory://percall/b")
    lance_gpu.write_dataset(table, "memory://percall/a")
    assert lance_gpu.dataset("memory://percall/b").to_table().equals(table)
    with pytest.raises(DatasetExistsError):  # into the same store object: no renewal
        lance_gpu.write_dataset(table, "a", store=resolve("memory://percall/a")[0])


def test_user_store_and_fsspec(tmp_path: Path) -> None:
    import fsspec
    import obstore.store

    mem = obstore.store.MemoryStore()
    ds = lance_gpu.write_dataset(_tbl(0, 5), "tbl", store=mem)
    assert lance_gpu.dataset("tbl", store=mem).to_table().equals(_tbl(0, 5))
    assert ds.root == "tbl"
    fs = fsspec.filesystem("file")
    lance.write_dataset(_tbl(0, 7), str(tmp_path / "f"))
    assert lance_gpu.dataset(str(tmp_path / "f"), store=fs).to_table().equals(_tbl(0, 7))
    # an fsspec file system promises no atomic create: commits are refused
    with pytest.raises(ConditionalPutUnsupportedError):
        lance_gpu.write_dataset(_tbl(0, 1), str(tmp_path / "g"), store=fs)


# -- fault injection -----------------------------------------------------------------------

FAULTS = [
    ("ENOSPC", StorageError, errno.ENOSPC),
    ("EACCES", StoragePermissionError, errno.EACCES),
    ("EIO", StorageError, errno.EIO),
    ("timeout", StorageTimeoutError, errno.ETIMEDOUT),
    ("refused", StorageConnectionError, errno.ECONNREFUSED),
]


def _data_and_deletions(root: Path) -> set[str]:
    out = set()
    for sub in ("data", "_deletions"):
        d = root / sub
        if d.exists():
            out |= {f"{sub}/{n}" for n in os.listdir(d)}
    return out


@pytest.mark.parametrize(("fault", "etype", "code"), FAULTS)
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_failed_append_is_clean(tmp_path: Path, fault: str, etype: type, code: int, nth: int) -> None:
    root = tmp_path / "ds"
    lance_gpu.write_dataset(_tbl(0, 100), str(root))
    before = _data_and_deletions(root)
    faulty = FaultInjectingStore(LOCAL, op="put", nth=nth, error=fault)
    # puts: data file 1, data file 2, transaction file, manifest, hint
    with pytest.raises(etype) as info:
        lance_gpu.write_dataset(_tbl(100, 60), str(root), mode="append", max_rows_per_file=30, store=faulty)
    err = info.value
    assert isinstance(err, OSError) and err.errno == code and str(root) in str(err)
    assert lance.dataset(str(root)).version == 1
    assert lance_gpu.dataset(str(root)).to_table().equals(_tbl(0, 100))
    assert _staging(root) == []
    assert _data_and_deletions(root) == before  # nothing uncommitted stays behind
    assert os.listdir(root / "_transactions") == [n for n in os.listdir(root / "_transactions") if n.startswith("0-")]


@pytest.mark.parametrize(("fault", "etype", "code"), FAULTS[:3])
def test_failed_manifest_put_is_clean(tmp_path: Path, fault: str, etype: type, code: int) -> None:
    root = tmp_path / "ds"
    lance_gpu.write_dataset(_tbl(0, 50), str(root))
    faulty = FaultInjectingStore(LOCAL, op="put", nth=1, error=fault, op_filter="_versions/")
    ds = lance_gpu.dataset(str(root), store=faulty)
    with pytest.raises(etype):
        ds.delete("id < 10")
    assert lance_gpu.dataset(str(root)).version == 1 and lance.dataset(str(root)).count_rows() == 50
    assert _staging(root) == []
    assert _data_and_deletions(root) == {f"data/{n}" for n in os.listdir(root / "data")}
    assert not (root / "_deletions").exists() or os.listdir(root / "_deletions") == []
    assert len(os.listdir(root / "_transactions")) == 1


def test_lost_manifest_response_is_read_back(tmp_path: Path) -> None:
    """The manifest put lands but its response is lost: the commit reads it back and succeeds."""
    root = tmp_path / "ds"
    lance_gpu.write_dataset(_tbl(0, 50), str(root))
    faulty = FaultInjectingStore(LOCAL, op="put", nth=1, error="timeout", after=True, op_filter=".manifest")
    ds = lance_gpu.write_dataset(_tbl(50, 5), str(root), mode="append", store=faulty)
    assert faulty.failures == 1 and ds.version == 2
    assert lance.dataset(str(root)).to_table().equals(_tbl(0, 55))


@pytest.mark.parametrize(("fault", "etype", "code"), FAULTS)
def test_failed_read_is_typed(tmp_path: Path, fault: str, etype: type, code: int) -> None:
    root = tmp_path / "ds"
    lance_gpu.write_dataset(_tbl(0, 50), str(root))
    # A lasting fault from the first read after opening on (a best-effort prefetch may absorb a single one).
    faulty = FaultInjectingStore(LOCAL, op="read", nth=10**9, error=fault, times=10**6)
    ds = lance_gpu.dataset(str(root), store=faulty)
    faulty.nth = faulty.calls + 1
    with pytest.raises(etype) as info:
        ds.to_table()
    assert info.value.errno == code and str(root) in str(info.value)


# -- only lance_gpu/io touches dataset bytes -----------------------------------------------

_FS_CALL = re.compile(
    r"os\.path|(?<![\w.])open\(|\bmmap\b|shutil|pathlib|"
    r"os\.(link|rename|replace|listdir|scandir|remove|unlink|makedirs|mkdir|rmdir|fsync|stat|walk|open)\b"
)
#: (file, reason): the only raw file-system uses outside lance_gpu/io, none of dataset bytes.
_ALLOWED = {
    "lance_gpu/spark/_gpu.py": "lock files in the temp directory that bound GPU decodes per executor",
    "lance_gpu/write/udf.py": "batch_udf's checkpoint: a local SQLite file the user names (as pylance's)",
}


def test_only_io_touches_the_file_system() -> None:
    offenders = []
    for path in sorted((REPO / "lance_gpu").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(("lance_gpu/io/", "lance_gpu/_proto/")) or rel in _ALLOWED:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _FS_CALL.search(code):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == [], "file-system calls outside lance_gpu/io:\n" + "\n".join(offenders)


def _sync_in_child(paths: list[str]) -> None:
    LocalStore().sync(paths)


def test_sync_of_several_files_works_in_a_forked_child(tmp_path: Path) -> None:
    """The fsync threads are kept per process: a child forked after the parent synced starts
    its own (the parent's threads do not exist there) instead of waiting on them forever."""
    import multiprocessing

    paths = []
    for i in range(3):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x" * (i + 1))
        paths.append(str(p))
    store = LocalStore()
    store.sync(paths)  # the parent's pool exists now
    child = multiprocessing.get_context("fork").Process(target=_sync_in_child, args=(paths,))
    child.start()
    child.join(60)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive and child.exitcode == 0
    store.sync(paths)


_DESCRIPTOR_CHILD = r"""
import gc, os, resource, sys
from lance_gpu.io.local import LocalStore

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if soft != resource.RLIM_INFINITY and soft < 4096:
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096 if hard == resource.RLIM_INFINITY else min(4096, hard), hard))
path = sys.argv[1]
held = [LocalStore().open(path) for _ in range(int(sys.argv[2]))]  # files really in use
store = LocalStore()
before = len(os.listdir("/proc/self/fd"))
gc.disable()  # only the opens may collect
peak = 0
for i in range(3000):
    cycle = [store.open(path)]
    cycle.append(cycle)  # unreachable once dropped: freed only by the collector
    if i % 50 == 0:
        peak = max(peak, len(os.listdir("/proc/self/fd")) - before)
print(peak)
"""


@pytest.mark.parametrize("held", [0, 700, 1500])
def test_unreachable_readers_give_their_descriptors_back(tmp_path, held: int) -> None:
    """Readers left in reference cycles close when the collector runs, and opening files runs
    it before the process runs out of descriptors (a mapped file holds one descriptor, its
    map's): in a fresh process holding ``held`` files in use, 3,000 readers dropped in
    cycles never hold more than 512 descriptors, or half those in use, at once.  (Past
    descriptor 1,024 ``select()`` fails: Spark's accumulator server.)"""
    import subprocess
    import sys

    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 4096)
    out = subprocess.run([sys.executable, "-c", _DESCRIPTOR_CHILD, str(path), str(held)], capture_output=True,
                         text=True, check=True, timeout=300)
    peak = int(out.stdout.strip())
    assert peak <= max(512, held // 2) + 60, peak


def test_overwrite_in_place_pads_and_leaves_links_alone(tmp_path):
    """Threads rewriting one hint in place with texts of different lengths leave one of
    them, padded with spaces to the longest; a missing file and one hard-linked elsewhere
    are left to the caller (False, nothing written)."""
    import json
    import threading

    store = LocalStore()
    path = str(tmp_path / "hint.json")
    assert not store.overwrite_in_place(path, b"{}")  # missing: the caller puts it
    (tmp_path / "hint.json").write_text('{"version":1}')
    texts = [json.dumps({"version": 10 ** k}, separators=(",", ":")).encode() for k in range(1, 9)]

    def rewrite(text: bytes) -> None:
        for _ in range(200):
            assert store.overwrite_in_place(path, text)

    threads = [threading.Thread(target=rewrite, args=(t,)) for t in texts[::-1]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    raw = (tmp_path / "hint.json").read_bytes()
    assert raw.rstrip(b" ") in texts and len(raw) == max(len(t) for t in texts), raw
    assert json.loads(raw)["version"] in {10 ** k for k in range(1, 9)}
    os.link(path, tmp_path / "other.json")
    assert not store.overwrite_in_place(path, b"{}")  # hard-linked elsewhere
    assert (tmp_path / "hint.json").read_bytes() == raw
