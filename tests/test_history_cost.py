# SPDX-License-Identifier: Apache-2.0
"""Costs that must not grow with a dataset's history (issue 24): a commit issues the same
requests and fsyncs at 10 versions as at 500 (locally and on the moto S3 server), finding the
latest version from the version hint without listing ``_versions/``; a hint that is missing,
stale or wrong still leads to the latest version."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.io import resolve
from lance_gpu.io.local import LocalStore
from lance_gpu.table.manifest import VERSION_HINT, latest_version, list_versions, manifest_file_name
from lance_gpu.txn import LanceOperation

pytestmark = pytest.mark.filterwarnings("ignore::lance_gpu._device.GpuFallbackWarning")

HISTORIES = (10, 500)


def _batch(start: int, n: int = 16) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "s": pa.array([f"s{i % 7}" for i in ids]), "x": ids * 0.5})


@pytest.fixture(scope="module")
def histories(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Datasets built by pylance from 10 and 500 appends of 16 rows (one version each)."""
    out = {}
    for n in HISTORIES:
        path = tmp_path_factory.mktemp("history") / f"h{n}.lance"
        for i in range(n):
            lance.write_dataset(_batch(16 * i), str(path), mode="create" if i == 0 else "append")
        out[n] = path
    return out


def _copy(src: Path, tmp_path: Path, name: str) -> str:
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return str(dst)


def _local_commit_cost(uri: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, int], list[str]]:
    """Store requests (by kind) and the files fsync'd (by kind: data, txn, manifest, hint) of
    one ``write_dataset(mode="append")`` at ``uri``."""
    store = LocalStore()
    fsyncs: list[str] = []
    real = os.fsync

    def counting(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        name = os.path.basename(path)
        fsyncs.append("hint" if VERSION_HINT in name else "manifest" if ".manifest" in name
                      else "txn" if name.endswith(".txn") else "data" if "/data/" in path else path)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    try:
        lance_gpu.write_dataset(_batch(1_000_000), uri, mode="append", store=store)
    finally:
        monkeypatch.setattr(os, "fsync", real)
    counts = store.stats.snapshot()
    for k in ("bytes_read", "bytes_written"):
        counts.pop(k)
    return counts, sorted(fsyncs)


def test_local_commit_requests_and_fsyncs_do_not_grow(histories: dict[int, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    costs = {}
    for n, src in histories.items():
        uri = _copy(src, tmp_path, f"c{n}")
        costs[n] = _local_commit_cost(uri, monkeypatch)
        assert lance.dataset(uri).version == n + 1
        assert lance.dataset(uri).count_rows() == 16 * (n + 1)
        assert lance_gpu.dataset(uri).to_table().equals(lance.dataset(uri).to_table())
    (small, small_syncs), (large, large_syncs) = costs[10], costs[500]
    assert small == large, costs
    assert small_syncs == large_syncs, costs
    assert large["lists"] == 0, large  # the latest version is found without listing _versions/
    # the data file (early, in the background, then by the commit: clean by then) and the
    # manifest's staging copy in one round; the transaction file (held by the manifest too)
    # and the hint are not synced
    assert set(large_syncs) == {"data", "manifest"}, costs
    assert large_syncs.count("manifest") == 1, costs


def test_s3_commit_requests_do_not_grow(histories: dict[int, Path], s3_server) -> None:
    opts = s3_server.storage_options
    raw = s3_server.raw_store()
    costs = {}
    for n, src in histories.items():
        uri = s3_server.uri(f"hist{n}")
        prefix = uri.split(f"s3://{s3_server.bucket}/", 1)[1]
        for dirpath, _dirs, files in os.walk(src):
            for name in files:
                full = os.path.join(dirpath, name)
                raw.put(f"{prefix}/{os.path.relpath(full, src)}", Path(full).read_bytes())
        store, root = resolve(uri, opts)
        before = store.stats.snapshot()
        lance_gpu.write_dataset(_batch(1_000_000), root, mode="append", store=store)
        after = store.stats.snapshot()
        costs[n] = {k: after[k] - before[k] for k in ("requests", "gets", "puts", "heads", "lists", "deletes")}
        assert lance.dataset(uri, storage_options=opts).version == n + 1
        assert lance.dataset(uri, storage_options=opts).count_rows() == 16 * (n + 1)
    assert costs[10] == costs[500], costs
    assert costs[500]["lists"] == 0, costs


def _hint(uri: str) -> Path:
    return Path(uri) / "_versions" / VERSION_HINT


@pytest.mark.parametrize("hint", ["missing", "stale_by_3", "stale_by_20", "too_high", "garbage", "not_an_int", "detached"])
def test_any_hint_leads_to_the_latest_version(histories: dict[int, Path], tmp_path: Path, hint: str) -> None:
    """The hint is checked (its version exists, the next does not), followed forward a few
    versions, and otherwise replaced by a listing: opening, appending and ``latest_version``
    agree with pylance whatever it says."""
    uri = _copy(histories[10], tmp_path, "h")
    for i in range(30):
        lance.write_dataset(_batch(10_000 + 16 * i), uri, mode="append")
    latest = lance.dataset(uri).version
    assert latest == 40
    text = {
        "missing": None, "stale_by_3": '{"version":37}', "stale_by_20": '{"version":20}',
        "too_high": '{"version":99}', "garbage": "{not json", "not_an_int": '{"version":"40"}',
        "detached": json.dumps({"version": (1 << 63) | 5}),
    }[hint]
    if text is None:
        _hint(uri).unlink()
    else:
        _hint(uri).write_text(text)
    store, root = resolve(uri)
    assert latest_version(store, root).version == latest
    assert lance_gpu.dataset(uri).version == latest
    assert lance_gpu.dataset(uri).latest_version == latest
    lance_gpu.write_dataset(_batch(90_000), uri, mode="append")
    assert lance.dataset(uri).version == latest + 1
    assert lance_gpu.dataset(uri).to_table().equals(lance.dataset(uri).to_table())
    assert json.loads(_hint(uri).read_text()) == {"version": latest + 1}


def test_a_version_is_opened_without_listing(histories: dict[int, Path]) -> None:
    store = LocalStore()
    uri = str(histories[500])
    for version in (None, 1, 250, 500):
        ds = lance_gpu.dataset(uri, version=version, store=store)
        ref = lance.dataset(uri, version=version)
        assert ds.version == ref.version
        assert ds.count_rows() == ref.count_rows()
    assert store.stats.lists == 0
    with pytest.raises(lance_gpu.errors.DatasetNotFoundError, match="no version 501"):
        lance_gpu.dataset(uri, version=501, store=store)
    # V1 names are found too (two existence checks instead of one)
    assert manifest_file_name(3, "V1") == "3.manifest"


def test_v1_named_history(tmp_path: Path) -> None:
    uri = str(tmp_path / "v1")
    for i in range(5):
        lance.write_dataset(_batch(16 * i), uri, mode="create" if i == 0 else "append", enable_v2_manifest_paths=False)
    store = LocalStore()
    assert latest_version(store, uri).naming == "V1"
    lance_gpu.write_dataset(_batch(500), uri, mode="append", store=store)
    assert store.stats.lists == 0
    assert [v.version for v in list_versions(store, uri)] == list(range(1, 7))
    assert {v.naming for v in list_versions(store, uri)} == {"V1"}
    assert lance.dataset(uri).to_table().equals(lance_gpu.dataset(uri).to_table())


def test_a_conflicting_commit_reads_the_winners_without_listing(tmp_path: Path) -> None:
    """A writer that lost its version reads the versions committed since one by one (until
    the first missing one) and commits after them: no listing either."""
    uri = str(tmp_path / "c")
    lance_gpu.write_dataset(_batch(0), uri)
    frags = lance_gpu.fragment.write_fragments(_batch(100), uri)
    for i in range(3):  # three winners since version 1
        lance.write_dataset(_batch(200 + 16 * i), uri, mode="append")
    store = LocalStore()
    before = store.stats.snapshot()
    lance_gpu.LanceDataset.commit(lance_gpu.dataset(uri, store=store), LanceOperation.Append(frags), read_version=1)
    assert store.stats.snapshot()["lists"] - before["lists"] == 0
    assert lance.dataset(uri).version == 5
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == sorted(
        list(range(16)) + list(range(100, 116)) + [200 + k for k in range(48)]
    )


class _RecordingStore(LocalStore):
    """The local store, recording the key of every object read (opened, fetched or sized)."""

    def __init__(self) -> None:
        super().__init__()
        self.touched: list[str] = []

    def open(self, path: str):  # type: ignore[no-untyped-def]
        self.touched.append(path)
        return super().open(path)

    def get(self, path: str) -> bytes:
        self.touched.append(path)
        return super().get(path)

    def head(self, path: str):  # type: ignore[no-untyped-def]
        self.touched.append(path)
        return super().head(path)

    def exists(self, path: str) -> bool:
        self.touched.append(path)
        return super().exists(path)

    def data_reads(self) -> list[str]:
        return [p for p in self.touched if "/data/" in p or "/_deletions/" in p]


def test_metadata_opens_no_data_file(histories: dict[int, Path], tmp_path: Path) -> None:
    """Opening a version, ``count_rows()``, ``versions()``, ``stats.dataset_stats()``,
    ``get_fragments()`` and fragments' ``count_rows()`` read manifests (and the hint) only:
    not one data or deletion file, and answer as pylance."""
    uri = _copy(histories[10], tmp_path, "m")
    lance.dataset(uri).delete("id % 5 = 0")  # deletion files that say how many rows they delete
    ref = lance.dataset(uri)
    store = _RecordingStore()
    ds = lance_gpu.dataset(uri, store=store)
    assert ds.count_rows() == ref.count_rows() == 16 * 10 - 32
    assert [(v["version"], v["metadata"]) for v in ds.versions()] == [(v["version"], v["metadata"]) for v in ref.versions()]
    assert ds.stats.dataset_stats() == ref.stats.dataset_stats()
    frags = ds.get_fragments()
    assert [f.count_rows() for f in frags] == [f.count_rows() for f in ref.get_fragments()]
    assert [f.fragment_id for f in frags] == [f.fragment_id for f in ref.get_fragments()]
    assert ds.get_fragment(3).count_rows() == ref.get_fragment(3).count_rows()
    old = ds.checkout_version(4)
    assert old.count_rows() == ref.checkout_version(4).count_rows()
    assert ds.latest_version == ref.latest_version and ds.schema == ref.schema
    assert ds.data_storage_version == ref.data_storage_version
    assert store.data_reads() == []
    assert store.touched  # the recorder saw the manifests
    # reading rows does open them (and checks their row counts then)
    assert ds.to_table().equals(ref.to_table())
    assert store.data_reads()


def test_an_append_visits_only_the_fragments_it_adds(histories: dict[int, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit of an append checks the new version's kinds of data files (legacy and V2
    never mixed) from its base's and the added fragment's: no loop over the 500 fragments
    the base holds (append latency stays flat with history)."""
    from lance_gpu.txn import legacy_dictionaries

    uri = _copy(histories[500], tmp_path, "kinds")
    ds = lance_gpu.dataset(uri)
    visited: list[int] = []
    file_kinds = legacy_dictionaries.file_kinds

    def counting(fragments):
        fragments = list(fragments)
        visited.append(len(fragments))
        return file_kinds(fragments)

    monkeypatch.setattr(legacy_dictionaries, "file_kinds", counting)
    for i in range(3):
        ds.insert(_batch(100_000 + 16 * i))
    assert visited == [1, 1, 1]
    assert lance.dataset(uri).count_rows() == 16 * 503
