# SPDX-License-Identifier: Apache-2.0
"""The table snapshot: a dataset object is a facade over one immutable version (issue 24).

Threads sharing one dataset object insert, delete and read at once: every read sees one
whole committed version (its ids are exactly those of a version pylance reads back) and no
call fails.  Fragments and scanners keep reading the version they were taken from.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402
from lance_gpu.io import local as local_io  # noqa: E402
from lance_gpu.table.snapshot import TableSnapshot  # noqa: E402

BATCH = 10


def _batch(start: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(start, start + BATCH, dtype=np.int64))})


def test_threads_sharing_a_dataset_object_see_whole_versions(tmp_path: Path) -> None:
    uri = str(tmp_path / "shared")
    lance.write_dataset(_batch(0), uri)
    ds = lance_gpu.dataset(uri, device="cpu")
    errors: list[BaseException] = []
    scans: list[list[int]] = []  # the ids of each full read
    counts: list[int] = []  # each count_rows()
    writers_done = threading.Event()

    def guarded(work):  # noqa: ANN001, ANN202
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # noqa: BLE001 - every failure is reported
                errors.append(exc)
        return run

    def inserter(first: int) -> None:
        for k in range(4):
            ds.insert(_batch((first + k) * 1000))

    def deleter() -> None:
        for k in range(4):  # whole batches of the inserters (or nothing, when not yet there)
            ds.delete(f"id >= {(10 + k) * 1000} AND id < {(10 + k) * 1000 + BATCH // 2}")
            ds.delete(f"id >= {(10 + k) * 1000 + BATCH // 2} AND id < {(10 + k) * 1000 + BATCH}")

    def reader() -> None:
        while not writers_done.is_set():
            scans.append(ds.to_table(columns=["id"]).column("id").to_pylist())
            counts.append(ds.count_rows())

    writers = [threading.Thread(target=guarded(lambda f=f: inserter(f))) for f in (10, 20)]
    writers.append(threading.Thread(target=guarded(deleter)))
    readers = [threading.Thread(target=guarded(reader)) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join()
    writers_done.set()
    for t in readers:
        t.join()
    assert errors == []

    ref = lance.dataset(uri)
    contents = {}
    for v in ref.versions():
        ids = ref.checkout_version(v["version"]).to_table(columns=["id"]).column("id").to_pylist()
        contents[v["version"]] = frozenset(ids)
    assert len(contents) == 1 + 8 + 8
    whole = set(contents.values())
    assert scans, "the readers read nothing"
    for ids in scans:  # no row twice, and exactly the rows of one committed version
        assert len(ids) == len(set(ids)) and frozenset(ids) in whole
    assert set(counts) <= {len(c) for c in contents.values()}
    # the object never moves back: it ends at the latest version, which reads as pylance's
    assert ds.version == ref.version
    assert frozenset(ds.to_table().column("id").to_pylist()) == contents[ref.version]


def test_a_mutation_swaps_the_snapshot_and_keeps_the_old_one_whole(tmp_path: Path) -> None:
    uri = str(tmp_path / "swap")
    lance.write_dataset(_batch(0), uri, max_rows_per_file=5)
    ds = lance_gpu.dataset(uri, device="cpu")
    old = ds.snapshot
    old_fragment = ds.get_fragments()[0]
    scanner = ds.scanner(columns=["id"])
    ds.delete("id < 3")
    assert isinstance(ds.snapshot, TableSnapshot) and ds.snapshot is not old
    assert (old.version, ds.version) == (1, 2)
    assert ds.count_rows() == 7 and old.count_rows() == 10
    # what was taken from the old version still reads it
    assert old_fragment.to_table().column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert old_fragment.count_rows() == 5 and ds.get_fragments()[0].count_rows() == 2
    assert scanner.to_table().num_rows == 10
    ds.reload(1)
    assert ds.version == 1 and ds.count_rows() == 10
    ds.checkout_latest()
    assert ds.version == 2 and ds.to_table().equals(lance.dataset(uri).to_table())


def test_snapshot_fragments_are_columnar(tmp_path: Path) -> None:
    uri = str(tmp_path / "arrays")
    lance.write_dataset(_batch(0), uri, max_rows_per_file=4)
    lance.dataset(uri).delete("id = 1 OR id = 9")
    snap = lance_gpu.dataset(uri).snapshot
    ref = lance.dataset(uri).get_fragments()
    assert snap.fragment_ids.tolist() == [f.fragment_id for f in ref]
    assert snap.physical_rows.tolist() == [f.metadata.physical_rows for f in ref]
    assert snap.deletion_counts.tolist() == [f.metadata.deletion_file.num_deleted_rows if f.metadata.deletion_file else 0 for f in ref]
    assert snap.count_rows() == lance.dataset(uri).count_rows() == 8
    assert snap.get_fragment(2) is snap.fragments[2] and snap.get_fragment(7) is None


def test_reader_locks_are_made_once_on_first_use(tmp_path: Path) -> None:
    """A snapshot makes its fragments' reader locks when a fragment first needs one (a
    commit's new snapshot mostly never does), one tuple for all threads asking at once, from
    which each fragment takes the lock of its id."""
    uri = str(tmp_path / "locks")
    lance.write_dataset(_batch(0), uri, max_rows_per_file=1)  # ten fragments, ids 0..9
    snap = lance_gpu.dataset(uri).snapshot
    assert snap._reader_locks is None
    seen: list[object] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        seen.append(snap.reader_locks)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(locks is seen[0] for locks in seen) and len(seen[0]) == 16
    assert len({id(lock) for lock in seen[0]}) == 16
    frags = snap.fragments
    assert frags[3]._readers_lock is snap.reader_locks[3] and frags[9]._readers_lock is snap.reader_locks[9]


def _settled(value: Callable[[], object], expected: object, within: float = 60.0) -> object:
    """``value()`` once it equals ``expected``, or its last value after ``within`` seconds: a
    pool thread that ran a read's task drops that task (and what it refers to) just after
    handing its result over, so on a loaded machine the last reference can outlive the call
    by a moment.  A reference cycle never goes (the collector is off, and no file opened
    runs it: see :class:`_OpenReaders`), so this still fails; the bound only says how long
    a failure takes to show, a pass returns as soon as the value settles."""
    deadline = time.monotonic() + within
    while (got := value()) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return got


class _OpenReaders:
    """The :class:`~lance_gpu.io.local.LocalFile` handles open on files under ``root``
    (``ids``: opened and not yet closed), counted by wrapping the class's ``__init__`` and
    ``close`` (``__del__`` closes through ``close``).  The process-wide
    ``local_io._open_handles`` also counts readers of other tests, which a thread an
    earlier test left behind may open or close meanwhile; these are this test's alone.
    Also keeps the file count from running the cycle collector (``_file_opened`` collects
    every few hundred opens), which would free a version left in a cycle and hide it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: str) -> None:
        self.ids: set[int] = set()
        init, close = local_io.LocalFile.__init__, local_io.LocalFile.close

        def counted_init(f: local_io.LocalFile, path: str, *args: object) -> None:
            init(f, path, *args)  # type: ignore[arg-type]
            if path.startswith(root) and (f.mapped is not None or f._fd >= 0):  # what close() counts as a handle
                self.ids.add(id(f))

        def counted_close(f: local_io.LocalFile) -> None:
            self.ids.discard(id(f))
            close(f)

        monkeypatch.setattr(local_io.LocalFile, "__init__", counted_init)
        monkeypatch.setattr(local_io.LocalFile, "close", counted_close)
        monkeypatch.setattr(local_io, "_collect_at", 1 << 62)


def test_old_versions_die_by_reference_counting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A version nobody holds any more is freed at once, its data files closed, with the
    cycle collector off: a snapshot refers to its fragments only weakly, so no reference
    cycle (snapshot <-> fragments <-> readers) waits for a full collection (issue 24: those
    collections were the largest cost of a delete or a compaction on a long history).  A
    fragment taken from a version keeps that version alive, and reading."""
    uri = str(tmp_path / "refcount")
    lance.write_dataset(_batch(0), uri, max_rows_per_file=3)
    ops: list[tuple[str, Callable[[lance_gpu.LanceDataset], object]]] = [
        ("delete", lambda d: d.delete("id = 1")),
        ("update", lambda d: d.update({"id": "id + 100"}, where="id = 2")),
        ("merge_insert", lambda d: d.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(_batch(5))),
        ("insert", lambda d: d.insert(_batch(50))),
        ("compact", lambda d: d.optimize.compact_files()),
    ]
    for _name, op in ops:  # warm up: modules and kernels loaded once are not what is counted
        op(lance_gpu.dataset(uri, device="cpu"))
    gc.collect()
    readers = _OpenReaders(monkeypatch, uri)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        ds = lance_gpu.dataset(uri, device="cpu")
        old_versions: list[tuple[str, weakref.ref[TableSnapshot]]] = []
        for name, op in ops:
            snap = ds.snapshot
            ds.to_table()  # every data file of the version open
            ds.take([0, 3])
            assert readers.ids
            old_versions.append((name, weakref.ref(snap)))
            del snap
            op(ds)
        alive = _settled(lambda: [name for name, ref in old_versions if ref() is not None], [])
        assert alive == [], f"versions before {alive} are left to the cycle collector"
        # a fragment keeps its version (and what it reads) alive until it goes
        fragment = ds.get_fragments()[0]
        held = weakref.ref(ds.snapshot)
        ds.delete("id = 4")
        assert held() is not None
        assert fragment.to_table().num_rows == fragment.physical_rows
        del fragment
        assert _settled(lambda: held() is None, True)
        expected = lance.dataset(uri).to_table()
        assert ds.to_table().sort_by("id").equals(expected.sort_by("id"))
        del ds
        assert _settled(lambda: len(readers.ids), 0) == 0  # every reader closed, none collected
    finally:
        if was_enabled:
            gc.enable()


def test_a_commit_keeps_the_readers_of_the_files_it_left_alone(tmp_path: Path) -> None:
    """The snapshot a mutation commits takes over the open readers (and checked row counts,
    deleted rows, field locations) of the fragments it left unchanged: reading after a
    delete or an insert opens none of the old data files again, and reads what pylance
    reads; after a schema change they are read afresh."""
    uri = str(tmp_path / "adopt")
    lance.write_dataset(_batch(0), uri, max_rows_per_file=2)  # five fragments
    ds = lance_gpu.dataset(uri, device="cpu")
    store = ds.snapshot.store
    opened: list[str] = []
    plain_open = store.open

    def counting_open(path: str):  # noqa: ANN202
        opened.append(path)
        return plain_open(path)

    store.open = counting_open  # type: ignore[method-assign]
    assert ds.to_table().num_rows == BATCH
    old_files = {p for p in opened if "/data/" in p}
    assert len(old_files) == 5
    opened.clear()
    ds.delete("id = 3")  # a new deletion file for one fragment; the data files stay
    ds.insert(_batch(100))  # one new fragment
    assert ds.to_table().equals(lance.dataset(uri).to_table())
    assert old_files.isdisjoint(opened)
    ds.add_columns({"twice": "id * 2"})  # another schema: the fragments are read afresh
    opened.clear()
    assert ds.to_table().equals(lance.dataset(uri).to_table())
    assert old_files <= set(opened)


def test_snapshot_data_files_and_row_ids_are_columnar(tmp_path: Path) -> None:
    uri = str(tmp_path / "files")
    lance.write_dataset(_batch(0), uri, max_rows_per_file=4, enable_stable_row_ids=True)
    lance.dataset(uri).add_columns({"twice": "id * 2"})  # a second data file per fragment
    snap = lance_gpu.dataset(uri).snapshot
    ref = lance.dataset(uri).get_fragments()
    offsets = snap.data_file_offsets.tolist()
    assert offsets == [0, *np.cumsum([len(f.data_files()) for f in ref]).tolist()]
    assert snap.data_file_paths.to_pylist() == [df.path for f in ref for df in f.data_files()]
    assert snap.data_file_fields.to_pylist() == [list(df.fields) for f in ref for df in f.data_files()]
    sequences = snap.row_id_sequences.to_pylist()
    assert len(sequences) == len(ref) and all(s is not None for s in sequences)
    assert [f.row_ids.tolist() for f in snap.fragments] == [
        f.scanner(columns=["id"], with_row_id=True).to_table()["_rowid"].to_pylist() for f in ref
    ]


def test_a_mutation_builds_its_snapshot_from_the_manifest_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """delete, update, merge_insert and compact_files move the dataset to the version they
    committed without finding or reading its manifest again (TableSnapshot.committed), and
    that snapshot is what opening the version reads, as pylance reads it."""
    uri = str(tmp_path / "committed")
    lance.write_dataset(_batch(0), uri, max_rows_per_file=2)
    ds = lance_gpu.dataset(uri, device="cpu")
    store = ds.snapshot.store
    manifest_reads: list[str] = []
    cls = type(store)
    plain_get, plain_exists = cls.get, cls.exists

    def counting_get(self, path: str) -> bytes:
        path = str(path)
        if "/_versions/" in path and path.endswith(".manifest"):
            manifest_reads.append(path)
        return plain_get(self, path)

    def counting_exists(self, path: str) -> bool:
        path = str(path)
        if "/_versions/" in path and path.endswith(".manifest"):
            manifest_reads.append(path)
        return plain_exists(self, path)

    # patched on the class: the store may be the process-wide local store, and a patch of
    # the instance would be undone by setting the bound method on it, an instance attribute
    # that hides every later patch of the class's method (how monkeypatch restores instances)
    monkeypatch.setattr(cls, "get", counting_get)
    monkeypatch.setattr(cls, "exists", counting_exists)
    mutations: list[Callable[[], object]] = [
        lambda: ds.delete("id = 3"),
        lambda: ds.update({"id": "id + 100"}, where="id = 4"),
        lambda: ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(_batch(8)),
        lambda: ds.optimize.compact_files(),
    ]
    for mutate in mutations:
        before = ds.version
        mutate()
        seen_after = [p for p in manifest_reads if p.endswith(f"{(1 << 64) - 1 - ds.version:020d}.manifest")]
        assert ds.version > before and seen_after == [], seen_after
        fresh = TableSnapshot.load(store, ds.snapshot.root, ds.version)
        assert fresh.manifest == ds.snapshot.manifest
        assert ds.to_table().sort_by("id").equals(lance.dataset(uri).to_table().sort_by("id"))
