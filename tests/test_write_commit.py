# SPDX-License-Identifier: Apache-2.0
"""Commits: manifests, naming, feature flags, interop with pylance 14 in both directions,
conflicts, concurrent appends and crashed writers."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu._proto import table_pb2
from lance_gpu.errors import CommitConflictError, SchemaMismatchError, UnsupportedFeatureError
from lance_gpu.io import LOCAL, resolve
from lance_gpu.table.manifest import list_versions, read_manifest_file, read_transaction_file
from lance_gpu.txn import LanceOperation, commit
from lance_gpu.txn.publish import serialize_manifest

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def _tbl(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({"id": pa.array(ids), "s": pa.array([f"row-{i}" for i in ids]), "x": pa.array(ids * 0.5)})


def _snapshot(root) -> dict[str, int]:
    """Every file under ``root`` with its size."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = os.path.getsize(p)
    return out


def _ours(uri: str) -> pa.Table:
    return lance_gpu.dataset(uri, device="cpu").to_table()


# --------------------------------------------------------------------------------------------
# manifest contents


def test_manifest_and_transaction(tmp_path):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 3000), uri, max_rows_per_file=1000)
    lance_gpu.write_dataset(_tbl(3000, 500), uri, mode="append")
    versions = list_versions(*resolve(uri))
    assert [v.version for v in versions] == [1, 2]
    assert all(v.naming == "V2" for v in versions)
    assert os.path.basename(versions[0].path) == "18446744073709551614.manifest"
    mf = read_manifest_file(LOCAL, versions[1].path)
    m = mf.manifest
    assert m.version == 2
    assert [f.id for f in m.fragments] == [0, 1, 2, 3]
    assert m.max_fragment_id == 3
    assert m.writer_version.library == "lance-gpu"
    assert (m.data_format.file_format, m.data_format.version) == ("lance", "2.2")
    assert m.timestamp.seconds > 0
    assert m.reader_feature_flags == 0 and m.writer_feature_flags == 0
    assert [f.physical_rows for f in m.fragments] == [1000, 1000, 1000, 500]
    df = m.fragments[0].files[0]
    assert (df.file_major_version, df.file_minor_version) == (2, 2)
    assert list(df.fields) == [0, 1, 2] and list(df.column_indices) == [0, 1, 2]
    assert df.file_size_bytes == os.path.getsize(tmp_path / "ds" / "data" / df.path)
    # the inline transaction equals the .txn file; it names the version read
    assert mf.transaction is not None and mf.transaction.read_version == 1
    assert mf.transaction.WhichOneof("operation") == "append"
    assert m.transaction_file.startswith("1-")
    assert read_transaction_file(LOCAL, tmp_path / "ds" / "_transactions" / m.transaction_file) == mf.transaction
    first = read_manifest_file(LOCAL, versions[0].path)
    assert first.transaction.WhichOneof("operation") == "overwrite" and first.transaction.read_version == 0
    hint = (tmp_path / "ds" / "_versions" / "latest_version_hint.json").read_text()
    assert hint == '{"version":2}'
    # no staging files are left behind
    assert sorted(os.listdir(tmp_path / "ds" / "_versions")) == sorted(
        [os.path.basename(v.path) for v in versions] + ["latest_version_hint.json"]
    )


def test_serialize_manifest_layout():
    m = table_pb2.Manifest(version=3)
    txn = lance_gpu._proto.transaction_pb2.Transaction(read_version=2, uuid="u")
    idx = table_pb2.IndexSection()
    raw = serialize_manifest(m, txn, idx)
    from lance_gpu.table.manifest import parse_manifest_bytes

    mf = parse_manifest_bytes(raw)
    assert mf.manifest.version == 3 and mf.transaction == txn
    assert mf.manifest.index_section == 0 and mf.manifest.transaction_section == 4
    assert raw[-4:] == b"LANC" and raw[-8:-4] == b"\x00\x00\x02\x00"


# --------------------------------------------------------------------------------------------
# interop with pylance


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_pylance_appends_and_deletes_on_ours(tmp_path, version):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 2000), uri, data_storage_version=version, max_rows_per_file=1500)
    lance.write_dataset(_tbl(2000, 1000), uri, mode="append")
    lance.dataset(uri).delete("id % 3 = 0")
    keep = [i for i in range(3000) if i % 3]
    expected = _tbl(0, 3000).take(keep)
    assert lance.dataset(uri).to_table().equals(expected)
    assert _ours(uri).equals(expected)
    # and we append on top of pylance's delete (deletion flags carried)
    lance_gpu.write_dataset(_tbl(3000, 100), uri, mode="append")
    expected = pa.concat_tables([expected, _tbl(3000, 100)])
    ds = lance.dataset(uri)
    assert ds.version == 4 and ds.data_storage_version == version
    assert ds.to_table().equals(expected)
    assert _ours(uri).equals(expected)
    m = read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path).manifest
    assert m.writer_feature_flags & 1 and m.reader_feature_flags & 1


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_we_append_to_pylance(tmp_path, version):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(0, 1000), uri, data_storage_version=version)
    lance_gpu.write_dataset(_tbl(1000, 1000), uri, mode="append", data_storage_version="2.2")
    ds = lance.dataset(uri)
    assert ds.data_storage_version == version  # appends keep the dataset's version
    assert ds.to_table().equals(_tbl(0, 2000))
    assert _ours(uri).equals(_tbl(0, 2000))
    lance.write_dataset(_tbl(2000, 10), uri, mode="append")
    assert lance.dataset(uri).to_table().equals(_tbl(0, 2010))


def test_append_carries_index_config_and_metadata(tmp_path):
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(_tbl(0, 1000), uri)
    ds.create_scalar_index("id", "BTREE")
    lance.dataset(uri).update_config({"k": "v"})
    lance.dataset(uri).update_metadata({"owner": "me"})
    before = read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path)
    lance_gpu.write_dataset(_tbl(1000, 1000), uri, mode="append")
    after = read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path)
    assert after.index_section == before.index_section
    assert dict(after.manifest.config) == {"k": "v"}
    assert dict(after.manifest.table_metadata) == dict(before.manifest.table_metadata)
    assert after.manifest.writer_feature_flags == before.manifest.writer_feature_flags
    ds = lance.dataset(uri)
    assert [i["name"] for i in ds.list_indices()] == ["id_idx"]
    assert ds.config() == {"k": "v"}
    assert ds.to_table(filter="id = 5 or id = 1500").num_rows == 2
    assert ds.to_table().equals(_tbl(0, 2000))


def test_append_with_stable_row_ids(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(0, 1000), uri, enable_stable_row_ids=True)
    lance_gpu.write_dataset(_tbl(1000, 500), uri, mode="append")
    lance.write_dataset(_tbl(1500, 10), uri, mode="append")
    ds = lance.dataset(uri)
    got = ds.to_table(with_row_id=True)
    assert got["_rowid"].to_pylist() == list(range(1510))
    assert got.drop_columns(["_rowid"]).equals(_tbl(0, 1510))
    ours = lance_gpu.dataset(uri, device="cpu").to_table(with_row_id=True)
    assert ours["_rowid"].to_pylist() == list(range(1510))


def test_v1_manifest_names_are_kept(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(0, 100), uri, enable_v2_manifest_paths=False)
    lance_gpu.write_dataset(_tbl(100, 100), uri, mode="append")
    names = sorted(os.listdir(tmp_path / "ds" / "_versions"))
    assert "1.manifest" in names and "2.manifest" in names
    assert lance.dataset(uri).to_table().equals(_tbl(0, 200))


def test_overwrite(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(0, 100), uri)
    lance.dataset(uri).delete("id < 10")
    other = pa.table({"z": pa.array(["a", "b"])})
    lance_gpu.write_dataset(other, uri, mode="overwrite")
    ds = lance.dataset(uri)
    assert ds.version == 3 and ds.to_table().equals(other)
    m = read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path).manifest
    assert [f.id for f in m.fragments] == [1]  # fragment ids keep growing
    assert m.writer_feature_flags & 1 == 0  # no deletion files any more
    assert ds.checkout_version(2).to_table().equals(_tbl(10, 90))
    lance.write_dataset(other, uri, mode="append")
    assert lance.dataset(uri).count_rows() == 4


# --------------------------------------------------------------------------------------------
# refusals that write nothing


def test_create_over_existing_writes_nothing(tmp_path):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 100), uri)
    before = _snapshot(uri)
    with pytest.raises(lance_gpu.DatasetExistsError):
        lance_gpu.write_dataset(_tbl(0, 100), uri)
    with pytest.raises(FileExistsError):
        lance_gpu.write_dataset(_tbl(0, 100), uri, mode="create")
    assert _snapshot(uri) == before


def test_schema_mismatch_append_writes_nothing(tmp_path):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 100), uri)
    before = _snapshot(uri)
    bad = [
        _tbl(0, 3).set_column(0, "id", pa.array([1, 2, 3], pa.int32())),  # other type
        _tbl(0, 3).append_column("extra", pa.array([1, 2, 3])),  # extra column
    ]
    for tbl in bad:
        with pytest.raises(SchemaMismatchError):
            lance_gpu.write_dataset(tbl, uri, mode="append")
        with pytest.raises(OSError):  # pylance's type for these
            lance_gpu.write_dataset(tbl, uri, mode="append")
    assert _snapshot(uri) == before
    # columns in another order are fine
    reordered = _tbl(100, 5).select(["x", "id", "s"])
    lance_gpu.write_dataset(reordered, uri, mode="append")
    assert lance.dataset(uri).to_table().equals(_tbl(0, 105))


def test_unknown_writer_flags_refused(tmp_path):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 10), uri)
    mf = read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path)
    m = table_pb2.Manifest()
    m.CopyFrom(mf.manifest)
    m.version = 2
    m.writer_feature_flags = 1 << 12
    (tmp_path / "ds" / "_versions" / "18446744073709551613.manifest").write_bytes(serialize_manifest(m, None))
    before = _snapshot(uri)
    with pytest.raises(UnsupportedFeatureError):
        lance_gpu.write_dataset(_tbl(10, 10), uri, mode="append")
    with pytest.raises(UnsupportedFeatureError):
        lance_gpu.write_dataset(_tbl(10, 10), uri, mode="overwrite")
    assert _snapshot(uri) == before


# --------------------------------------------------------------------------------------------
# conflicts


def _append_op(uri, start, n):
    """Data files written for an append, not committed yet."""
    from lance_gpu.table.schema import LanceSchema
    from lance_gpu.write.dataset_writer import _write_fragments


    _store, root = resolve(uri)
    mf = read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path)
    schema = LanceSchema.from_manifest(mf.manifest)
    tbl = _tbl(start, n)
    frags, _ = _write_fragments(LOCAL, root, schema, tbl.schema, iter(tbl.to_batches()), None, 2, 10**6, 10**12)
    return root, mf, frags


def test_append_retries_after_concurrent_append(tmp_path):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 10), uri)
    root, base, frags = _append_op(uri, 10, 10)
    lance.write_dataset(_tbl(100, 5), uri, mode="append")  # someone else takes version 2
    m = commit(LOCAL, root, LanceOperation.Append(frags), base)
    assert m.version == 3
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == list(range(20)) + list(range(100, 105))
    assert [f.id for f in m.fragments] == [0, 1, 2]


@pytest.mark.parametrize("other", ["overwrite", "restore"])
def test_append_conflicts_with_other_operations(tmp_path, other):
    """An overwrite or restore replaced the table the append was written for: refused."""
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 10), uri)
    lance_gpu.write_dataset(_tbl(10, 5), uri, mode="append")
    root, base, frags = _append_op(uri, 20, 10)
    if other == "overwrite":
        lance.write_dataset(_tbl(50, 3), uri, mode="overwrite")
    else:
        lance.dataset(uri, version=1).restore()
    with pytest.raises(CommitConflictError, match=other):
        commit(LOCAL, root, LanceOperation.Append(frags), base)
    assert lance.dataset(uri).version == 3


@pytest.mark.parametrize("winner", ["pylance", "ours"])
@pytest.mark.parametrize("stable_row_ids", [False, True])
def test_append_rebased_over_delete_and_compaction(tmp_path, winner, stable_row_ids):
    """A delete and a compaction commit between an append's read and its commit: the
    append goes on top of both, with fresh fragment ids (and row ids), and every row is
    there exactly once with the deletions applied."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(0, 3000), uri, max_rows_per_file=500, enable_stable_row_ids=stable_row_ids)
    lance.write_dataset(_tbl(3000, 1000), uri, mode="append")  # fragment 6
    root, base, frags = _append_op(uri, 10_000, 700)  # read version 2
    other = lance if winner == "pylance" else lance_gpu
    other.dataset(uri).delete("id % 7 = 0 OR id >= 3900")
    if winner == "pylance":
        lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=2000)
    else:
        lance_gpu.dataset(uri).optimize.compact_files(target_rows_per_fragment=2000)
    # (pylance reserves the new fragment ids in a version of its own before the rewrite)
    compacted = read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path)
    assert compacted.transaction.WhichOneof("operation") == "rewrite"
    m = commit(LOCAL, root, LanceOperation.Append(frags), base)
    assert m.version == compacted.manifest.version + 1
    old_ids = [f.id for f in compacted.manifest.fragments]
    new_ids = [f.id for f in m.fragments[len(old_ids):]]
    assert [f.id for f in m.fragments[: len(old_ids)]] == old_ids  # the winner's fragments as they are
    assert new_ids == list(range(compacted.manifest.max_fragment_id + 1, compacted.manifest.max_fragment_id + 1 + len(frags)))
    assert m.max_fragment_id == new_ids[-1]
    mf = read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path)
    assert mf.transaction.WhichOneof("operation") == "append" and mf.transaction.read_version == 2
    expected = sorted([i for i in range(4000) if i % 7 and i < 3900] + list(range(10_000, 10_700)))
    ds = lance.dataset(uri)
    assert ds.version == m.version and ds.count_rows() == len(expected)
    got = ds.to_table(with_row_id=stable_row_ids)
    assert sorted(got["id"].to_pylist()) == expected
    ours = lance_gpu.dataset(uri, device="cpu").to_table()
    assert sorted(ours["id"].to_pylist()) == expected
    assert ours.sort_by("id").equals(got.select(ours.column_names).sort_by("id"))
    if stable_row_ids:
        rowids = got["_rowid"].to_pylist()
        assert len(set(rowids)) == len(rowids)
        new = [r for r, i in zip(rowids, got["id"].to_pylist(), strict=True) if i >= 10_000]
        assert sorted(new) == list(range(4000, 4700))  # fresh ids after the winner's next_row_id
        assert m.next_row_id == 4700
    # pylance can go on from here
    lance.write_dataset(_tbl(20_000, 5), uri, mode="append")
    assert lance.dataset(uri).count_rows() == len(expected) + 5


def test_fragment_commit_rebased_over_delete_and_update(tmp_path):
    """The distributed-write path (LanceDataset.commit at a read version) rebases the same way;
    a pylance update (rewrites rows into a new fragment) in between is no conflict either."""
    from lance_gpu.write import write_fragments

    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(0, 100), uri)
    read = lance.dataset(uri).version
    frags = write_fragments(_tbl(500, 50), uri)
    lance.dataset(uri).delete("id < 10")
    lance.dataset(uri).update({"x": "x + 1000"}, where="id >= 90")
    ds = lance_gpu.LanceDataset.commit(uri, LanceOperation.Append(frags), read_version=read)
    assert ds.version == read + 3
    got = lance.dataset(uri).to_table().sort_by("id")
    assert got["id"].to_pylist() == list(range(10, 100)) + list(range(500, 550))
    assert got["x"].to_pylist() == [i * 0.5 + (1000 if 90 <= i < 100 else 0) for i in got["id"].to_pylist()]
    ids = [f.id for f in read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path).manifest.fragments]
    assert len(set(ids)) == len(ids)


def test_overwrite_conflicts_with_append(tmp_path):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 10), uri)
    root, base, frags = _append_op(uri, 10, 10)
    lance_gpu.write_dataset(_tbl(100, 5), uri, mode="append")
    from lance_gpu.table.schema import LanceSchema

    op = LanceOperation.Overwrite(LanceSchema.from_manifest(base.manifest), frags)
    with pytest.raises(CommitConflictError):
        commit(LOCAL, root, op, base)


def test_missing_winner_transaction_is_a_conflict(tmp_path):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 10), uri)
    root, base, frags = _append_op(uri, 10, 10)
    # a version 2 without any transaction: be conservative
    m = table_pb2.Manifest()
    m.CopyFrom(base.manifest)
    m.version = 2
    m.ClearField("transaction_file")
    (Path(root) / "_versions" / "18446744073709551613.manifest").write_bytes(serialize_manifest(m, None))
    with pytest.raises(CommitConflictError):
        commit(LOCAL, root, LanceOperation.Append(frags), base)


def _writer(uri, writer, barrier):  # runs in a child process
    import warnings

    warnings.simplefilter("ignore")
    for k in range(3):
        start = writer * 1000 + k * 100
        tbl = _tbl(start, 100)
        barrier.wait()
        lance_gpu.write_dataset(tbl, uri, mode="append")


def test_concurrent_appends(tmp_path):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 10), uri)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_writer, args=(uri, w + 1, barrier)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    versions = [v.version for v in list_versions(*resolve(uri))]
    assert versions == list(range(1, 14))  # contiguous: 1 create + 12 appends
    expected = sorted(list(range(10)) + [w * 1000 + k * 100 + i for w in range(1, 5) for k in range(3) for i in range(100)])
    ds = lance.dataset(uri)
    got = ds.to_table()
    assert sorted(got["id"].to_pylist()) == expected  # nothing lost, nothing doubled
    assert got.sort_by("id").equals(pa.concat_tables([_tbl(0, 10)] + [_tbl(w * 1000 + k * 100, 100) for w in range(1, 5) for k in range(3)]).sort_by("id"))
    assert sorted(_ours(uri)["id"].to_pylist()) == expected
    m = read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path).manifest
    assert sorted(f.id for f in m.fragments) == list(range(13))
    txns = [read_manifest_file(LOCAL, v.path).transaction for v in list_versions(*resolve(uri))]
    assert [t.WhichOneof("operation") for t in txns] == ["overwrite"] + ["append"] * 12
    # the barrier makes writers race: some commits were retried on top of another's append
    assert any(t.read_version < v - 1 for v, t in enumerate(txns, start=1))


# --------------------------------------------------------------------------------------------
# crashed writers

_CRASH = textwrap.dedent(
    """
    import os, signal, sys, warnings
    warnings.simplefilter("ignore")
    import numpy as np, pyarrow as pa
    import lance_gpu
    import lance_gpu.txn.publish as commit_mod
    import lance_gpu.write.dataset_writer as dw

    where = sys.argv[2]
    die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    if where == "before_commit":
        dw.commit_file = die
    elif where == "before_link":
        import lance_gpu.io.local as local_io
        local_io.os.link = die
    elif where == "mid_file":
        import lance_gpu.write.file_writer as fw
        real = fw.LanceFileWriter._write_page
        calls = []
        def page(self, *a):
            calls.append(1)
            if len(calls) == 3:
                die()
            return real(self, *a)
        fw.LanceFileWriter._write_page = page
    ids = np.arange(1000, 3000)
    tbl = pa.table({"id": pa.array(ids), "s": pa.array([f"row-{i}" for i in ids]), "x": pa.array(ids * 0.5)})
    lance_gpu.write_dataset(tbl, sys.argv[1], mode="append", max_rows_per_file=700)
    """
)


@pytest.mark.parametrize("where", ["mid_file", "before_commit", "before_link"])
def test_killed_writer_leaves_last_version(tmp_path, where):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 1000), uri)
    proc = subprocess.run([sys.executable, "-c", _CRASH, uri, where], capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert len(os.listdir(tmp_path / "ds" / "data")) > 1  # the killed writer did write data
    ds = lance.dataset(uri)
    assert ds.version == 1 and ds.to_table().equals(_tbl(0, 1000))
    assert [v.version for v in list_versions(*resolve(uri))] == [1]
    assert _ours(uri).equals(_tbl(0, 1000))
    # and the dataset goes on
    lance_gpu.write_dataset(_tbl(1000, 10), uri, mode="append")
    lance.write_dataset(_tbl(1010, 10), uri, mode="append")
    assert lance.dataset(uri).to_table().equals(_tbl(0, 1020))
    assert _ours(uri).equals(_tbl(0, 1020))


# --------------------------------------------------------------------------------------------
# stores without conditional writes: refused, unless the user passes a commit lock


def test_store_without_conditional_put_needs_a_commit_lock(tmp_path):
    """An fsspec file system promises no atomic create: commits are refused, unless every
    writer passes the same commit lock; two appenders racing for one version then both land
    exactly once (the loser finds the manifest under the lock and rebases), and pylance
    reads the result."""
    import contextlib
    import threading

    import fsspec

    from lance_gpu.errors import ConditionalPutUnsupportedError
    from lance_gpu.write import write_fragments

    fs = fsspec.filesystem("file")
    uri = str(tmp_path / "ds")
    with pytest.raises(ConditionalPutUnsupportedError, match="commit_lock"):
        lance_gpu.write_dataset(_tbl(0, 10), uri, store=fs)
    assert not os.path.exists(uri)  # refused before anything was written

    mutex = threading.Lock()
    barrier = threading.Barrier(2, timeout=60)
    raced: set[str] = set()
    published: list[int] = []

    @contextlib.contextmanager
    def commit_lock(version):
        name = threading.current_thread().name
        if name.startswith("appender") and name not in raced:
            raced.add(name)
            barrier.wait()  # both appenders read version 1 and now want version 2
        with mutex:
            published.append(version)
            yield

    lance_gpu.write_dataset(_tbl(0, 10), uri, store=fs, commit_lock=commit_lock)
    errors: list[BaseException] = []

    def append(start):
        try:
            lance_gpu.write_dataset(_tbl(start, 5), uri, mode="append", store=fs, commit_lock=commit_lock)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(s,), name=f"appender{s}") for s in (100, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert published == [1, 2, 2, 3]  # the loser retried on top of the winner
    ref = lance.dataset(uri)
    assert ref.version == 3
    assert sorted(ref.to_table()["id"].to_pylist()) == list(range(10)) + list(range(100, 105)) + list(range(200, 205))

    # LanceDataset.commit takes the lock the same way (and refuses without it)
    ds = lance_gpu.dataset(uri, store=fs)
    frags = write_fragments(_tbl(300, 5), uri)
    with pytest.raises(ConditionalPutUnsupportedError):
        lance_gpu.LanceDataset.commit(ds, LanceOperation.Append(frags), read_version=3)
    out = lance_gpu.LanceDataset.commit(ds, LanceOperation.Append(frags), read_version=3, commit_lock=commit_lock)
    assert out.version == 4 and lance.dataset(uri).count_rows() == 25


def test_memory_store_without_conditional_put_with_lock():
    import threading

    import obstore.store

    from lance_gpu.errors import ConditionalPutUnsupportedError
    from lance_gpu.io import ObstoreStore

    unsafe = ObstoreStore(obstore.store.MemoryStore(), "memory://nocond", conditional_put=False)
    with pytest.raises(ConditionalPutUnsupportedError):
        lance_gpu.write_dataset(_tbl(0, 3), "ds", store=unsafe)
    assert unsafe.list("ds") == []
    mutex = threading.Lock()
    lance_gpu.write_dataset(_tbl(0, 3), "ds", store=unsafe, commit_lock=lambda version: mutex)
    lance_gpu.write_dataset(_tbl(3, 3), "ds", store=unsafe, mode="append", commit_lock=lambda version: mutex)
    ds = lance_gpu.dataset("ds", store=unsafe)
    assert ds.version == 2 and ds.to_table()["id"].to_pylist() == list(range(6))


def test_commit_syncs_the_files_it_adds_before_the_manifest(tmp_path, monkeypatch):
    """write_fragments publishes its data files unsynced (no task waits on a disk); the commit
    fsyncs every data and deletion file its manifest adds, and only those, before the
    manifest is put -- so a committed manifest never names a file a crash could truncate.
    The manifest's own staging copy (no reader sees it before it is linked) is synced in the
    same round; the transaction file it names is not (the manifest holds the transaction)."""
    import lance_gpu.fragment
    from lance_gpu.io.local import LocalStore

    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(pa.table({"a": np.arange(10)}), uri)
    calls: list[tuple[list[str], int]] = []
    real_sync = LocalStore.sync

    def recording_sync(self, paths):
        calls.append((list(paths), len(list_versions(LOCAL, uri))))
        real_sync(self, paths)

    monkeypatch.setattr(LocalStore, "sync", recording_sync)
    read = lance_gpu.dataset(uri).version
    frags = lance_gpu.fragment.write_fragments(pa.table({"a": np.arange(10, 30)}), uri, max_rows_per_file=8)
    data_keys = sorted(os.path.join(uri, "data", f.path) for frag in frags for f in frag.files)
    assert len(data_keys) == 3 and all(os.path.exists(k) for k in data_keys)  # published before commit
    from lance_gpu.write.dataset_writer import _sync_pool

    _sync_pool().submit(lambda: None).result()  # the background's early syncs are done (one FIFO thread)
    calls.clear()
    lance_gpu.LanceDataset.commit(uri, LanceOperation.Append(frags), read_version=read)
    [(keys, n)] = calls  # one round, while version 1 was still the latest
    assert n == 1
    assert not [k for k in keys if "/_transactions/" in k]
    assert lance_gpu.dataset(uri).manifest.transaction_file  # written, named, not synced
    staged = [k for k in keys if "/_versions/" in k]
    assert len(staged) == 1 and ".manifest" in staged[0] and not os.path.exists(staged[0])  # linked, then removed
    assert sorted(k for k in keys if k not in staged) == data_keys  # the new data files only
    assert lance.dataset(uri).to_table()["a"].to_pylist() == list(range(30))

    calls.clear()
    lance_gpu.dataset(uri).delete("a = 12")
    [(keys, _n)] = calls
    assert len(keys) == 2 and "/_versions/" in keys[0] and "/_deletions/" in keys[1]


def test_every_file_a_manifest_names_is_fsynced_before_the_manifest_appears(tmp_path, monkeypatch):
    """The commit's one round of fsyncs covers the files the new manifest adds (data,
    deletion) and the manifest's own staging copy, and ends before the staging copy is linked
    to its name: a crash at any moment leaves either no new version or one whose every byte
    is on disk.  The hint (only a hint) and the transaction file (the manifest holds the
    transaction) are not synced."""
    import threading

    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 20), uri)
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        real_fsync(fd)
        with lock:
            events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

    def link(src, dst, *args, **kwargs) -> None:
        with lock:
            events.append(("link", f"{src} -> {dst}"))
        real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    for mutate in (
        lambda: lance_gpu.write_dataset(_tbl(100, 5), uri, mode="append"),
        lambda: lance_gpu.dataset(uri).delete("id = 3"),
        lambda: lance_gpu.dataset(uri).update({"x": "x + 1"}, where="id = 101"),
    ):
        before = lance_gpu.dataset(uri).manifest_file
        events.clear()
        mutate()
        after = read_manifest_file(LOCAL, lance_gpu.dataset(uri).manifest_file.path)
        [link_at] = [i for i, (kind, _) in enumerate(events) if kind == "link"]
        staging, target = events[link_at][1].split(" -> ")
        assert target == after.path
        synced_first = {path for kind, path in events[:link_at] if kind == "fsync"}
        assert staging in synced_first  # the manifest's bytes are durable before its name exists
        old = {(f.id, df.path) for f in before.manifest.fragments for df in f.files}
        old_deletions = {(f.id, f.deletion_file.SerializeToString()) for f in before.manifest.fragments if f.HasField("deletion_file")}
        for frag in after.manifest.fragments:
            for df in frag.files:
                if (frag.id, df.path) not in old:
                    assert os.path.join(uri, "data", df.path) in synced_first
            if frag.HasField("deletion_file") and (frag.id, frag.deletion_file.SerializeToString()) not in old_deletions:
                from lance_gpu.table.deletion import deletion_file_path

                assert deletion_file_path(LOCAL, uri, int(frag.id), frag.deletion_file) in synced_first
        assert after.transaction is not None  # the manifest's own copy of its transaction
        assert not any("latest_version_hint" in path or "/_transactions/" in path for kind, path in events
                       if kind == "fsync")
    monkeypatch.undo()
    ref = lance.dataset(uri)
    assert ref.version == 4
    assert lance_gpu.dataset(uri).to_table().equals(ref.to_table())


def test_append_reads_the_hint_once_and_plans_only_other_schemas(tmp_path, monkeypatch):
    """``write_dataset(mode="append")`` reads the version hint once (finding the base: its
    commit does not read it again before publishing); data whose schema is the dataset's
    own is written as it is, other schemas (columns reordered, missing) are planned
    (``_append_plan``) -- and pylance reads every version as ours does."""
    import importlib

    from lance_gpu.io.local import LocalStore

    writer_module = importlib.import_module("lance_gpu.write.dataset_writer")
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 20), uri)
    hint_reads: list[str] = []
    plans: list[list[str]] = []
    real_get, real_plan = LocalStore.get, writer_module._append_plan

    def get(self, path):
        if path.endswith("latest_version_hint.json"):
            hint_reads.append(path)
        return real_get(self, path)

    def plan(target, incoming):
        plans.append(incoming.names)
        return real_plan(target, incoming)

    monkeypatch.setattr(LocalStore, "get", get)
    monkeypatch.setattr(writer_module, "_append_plan", plan)
    lance_gpu.write_dataset(_tbl(20, 5), uri, mode="append")
    assert len(hint_reads) == 1 and plans == []
    lance_gpu.write_dataset(_tbl(25, 5).select(["x", "id", "s"]), uri, mode="append")
    lance_gpu.write_dataset(_tbl(30, 5).select(["id", "s"]), uri, mode="append")
    assert plans == [["x", "id", "s"], ["id", "s"]]
    with pytest.raises(SchemaMismatchError):
        lance_gpu.write_dataset(_tbl(35, 5).append_column("extra", pa.array(np.arange(5))), uri, mode="append")
    monkeypatch.undo()
    ref = lance.dataset(uri)
    assert ref.version == 4 and ref.count_rows() == 35
    assert lance_gpu.dataset(uri).to_table().equals(ref.to_table())


def test_transaction_file_written_in_the_background_lands_before_the_manifest(tmp_path, monkeypatch):
    """The transaction file is written in the background while the manifest is built and
    staged: the manifest is linked only after it landed, and a transaction write that fails
    fails the commit with nothing published (no version, no staging file, no data file)."""
    import errno
    import sys as _sys

    from lance_gpu.io import background

    monkeypatch.setattr(background, "OVERLAP", "always")  # as with a spare core
    commit_module = _sys.modules["lance_gpu.txn.commit"]
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 10), uri)
    real_write = commit_module.write_transaction_file
    real_link = os.link
    seen: list[bool] = []

    def link(src, dst, *args, **kwargs):
        if dst.endswith(".manifest"):
            txn_dir = os.path.join(uri, "_transactions")
            seen.append(len(os.listdir(txn_dir)) == 2 and not [n for n in os.listdir(txn_dir) if n.startswith(".tmp_")])
        real_link(src, dst, *args, **kwargs)

    def slow_write(*args, **kwargs):
        import time

        time.sleep(0.05)  # still writing when the manifest is ready
        real_write(*args, **kwargs)

    monkeypatch.setattr(commit_module, "write_transaction_file", slow_write)
    monkeypatch.setattr(os, "link", link)
    lance_gpu.write_dataset(_tbl(10, 5), uri, mode="append")
    assert seen == [True]
    monkeypatch.setattr(commit_module, "write_transaction_file", real_write)
    monkeypatch.setattr(os, "link", real_link)

    def failing_write(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    before = sorted(os.listdir(os.path.join(uri, "data")))
    monkeypatch.setattr(commit_module, "write_transaction_file", failing_write)
    with pytest.raises(OSError) as info:
        lance_gpu.write_dataset(_tbl(15, 5), uri, mode="append")
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert lance.dataset(uri).version == 2 and lance_gpu.dataset(uri).count_rows() == 15
    assert sorted(os.listdir(os.path.join(uri, "data"))) == before
    assert [f for d, _, fs in os.walk(uri) for f in fs if f.startswith(".tmp_")] == []


def test_transaction_file_write_overlaps_the_fsync_round(tmp_path, monkeypatch):
    """The commit waits for its background transaction write only once its fsync round is
    over (the write runs while the committing thread waits on the disk), and still before
    the manifest is linked: a write that can only end after the manifest's staging copy was
    fsync'd ends, and the transaction file is there when the manifest appears."""
    import sys as _sys
    import threading

    from lance_gpu.io import background

    monkeypatch.setattr(background, "OVERLAP", "always")  # as with a spare core
    commit_module = _sys.modules["lance_gpu.txn.commit"]
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 10), uri)
    real_write, real_fsync, real_link = commit_module.write_transaction_file, os.fsync, os.link
    staged_synced = threading.Event()
    waited: list[bool] = []
    landed: list[bool] = []

    def fsync(fd: int) -> None:
        real_fsync(fd)
        if "/_versions/.tmp_" in os.readlink(f"/proc/self/fd/{fd}"):
            staged_synced.set()

    def write_after_the_round(*args, **kwargs):
        waited.append(staged_synced.wait(timeout=30))  # (False: the commit waited for us first)
        real_write(*args, **kwargs)

    def link(src, dst, *args, **kwargs):
        if dst.endswith(".manifest"):
            names = os.listdir(os.path.join(uri, "_transactions"))
            landed.append(len(names) == 2 and not [n for n in names if n.startswith(".tmp_")])
        real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(commit_module, "write_transaction_file", write_after_the_round)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    lance_gpu.write_dataset(_tbl(10, 5), uri, mode="append")
    monkeypatch.undo()
    assert waited == [True] and landed == [True]
    assert lance.dataset(uri).version == 2 and lance.dataset(uri).count_rows() == 15


def test_transactions_survive_lost_transaction_files(tmp_path):
    """What an OS crash could do to the unsynced transaction files -- leave them empty, or
    lose them -- loses nothing: pylance and we read every version's transaction from its
    manifest, and a pylance writer on an older version resolves its conflicts against
    ours."""
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 10), uri)
    stale = lance.dataset(uri)  # a writer that read version 1
    lance_gpu.dataset(uri).delete("id = 3")
    lance_gpu.dataset(uri).update({"x": "x + 1"}, where="id = 4")
    tdir = os.path.join(uri, "_transactions")
    names = sorted(os.listdir(tdir))
    assert len(names) == 3
    for name in names[:2]:
        open(os.path.join(tdir, name), "wb").close()  # emptied
    os.remove(os.path.join(tdir, names[2]))  # gone
    expected = [("Update", 2), ("Delete", 1), ("Overwrite", 0)]
    assert [(type(t.operation).__name__, t.read_version) for t in lance.dataset(uri).get_transactions(3)] == expected
    ours = lance_gpu.dataset(uri)
    assert [ours.checkout_version(v).manifest_file.transaction.WhichOneof("operation") for v in (2, 3)] == [
        "delete", "update"]
    # row 4 was moved by our Update: pylance's delete on version 1 conflicts with it (it reads
    # our transaction to know), is planned again on the latest version and deletes the moved row
    assert stale.delete("id = 4") == {"num_deleted_rows": 1}
    assert lance.dataset(uri).version == 4
    assert lance.dataset(uri).to_table()["id"].to_pylist() == [0, 1, 2, 5, 6, 7, 8, 9]
    assert lance_gpu.dataset(uri).to_table().equals(lance.dataset(uri).to_table())


_KILLED_LOCAL = textwrap.dedent(
    """
    import os, signal, sys, warnings
    warnings.simplefilter("ignore")
    import pyarrow as pa
    import lance_gpu
    where = sys.argv[2]
    if where == "link":  # after the round of fsyncs, before the manifest has its name
        os.link = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    else:  # after the manifest is published, before the hint is written
        import importlib
        importlib.import_module("lance_gpu.txn.commit").write_version_hint = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
    ds = lance_gpu.dataset(sys.argv[1])
    if sys.argv[3] == "append":
        lance_gpu.write_dataset(pa.table({"id": [7, 8, 9], "s": ["a", "b", "c"], "x": [1.0, 2.0, 3.0]}), sys.argv[1], mode="append")
    else:
        ds.delete("id = 2")
    """
)


@pytest.mark.parametrize("op", ["append", "delete"])
@pytest.mark.parametrize("where", ["link", "hint"])
def test_writer_killed_mid_commit_leaves_a_readable_version(tmp_path, where, op):
    """A writer killed after syncing but before linking its manifest leaves the previous
    version (its files unreferenced); one killed after linking but before the hint leaves
    the new version, found past the stale hint, by pylance and by us."""
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 10), uri)
    proc = subprocess.run([sys.executable, "-c", _KILLED_LOCAL, uri, where, op], capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    expected_version = 1 if where == "link" else 2
    ref = lance.dataset(uri)
    assert ref.version == expected_version
    ours = lance_gpu.dataset(uri)
    assert ours.version == expected_version
    assert ours.to_table().equals(ref.to_table())
    rows = ref.count_rows()
    assert rows == (10 if where == "link" else 13 if op == "append" else 9)
    assert not [p for p in os.listdir(os.path.join(uri, "_versions")) if p.startswith(".tmp")] or where == "link"
    lance_gpu.write_dataset(_tbl(50, 1), uri, mode="append")  # the next writer commits after it
    assert lance.dataset(uri).version == expected_version + 1
    assert lance.dataset(uri).count_rows() == rows + 1


def test_restore_commit_needs_no_read_version(tmp_path):
    """``LanceDataset.commit(uri, LanceOperation.Restore(v))`` without ``read_version``
    restores, as pylance's (a Restore, like an Overwrite, reads no version); other
    operations still need one (``ValueError``)."""
    table = pa.table({"a": list(range(10))})
    for mod in (lance, lance_gpu):
        uri = str(tmp_path / mod.__name__)
        mod.write_dataset(table, uri)
        mod.write_dataset(table, uri, mode="append")
        restored = mod.LanceDataset.commit(uri, mod.LanceOperation.Restore(1))
        assert restored.version == 3 and restored.to_table() == table
        with pytest.raises(ValueError):
            mod.LanceDataset.commit(uri, mod.LanceOperation.Delete([], [0], "a > 1"))


def test_version_hint_is_rewritten_in_place_and_read_by_pylance(tmp_path):
    """A commit rewrites the existing local hint in place (same inode, no staging file);
    where the new text is shorter (a hint left too high) it is padded with spaces, which
    pylance and we read as the version.  A hint that is a symbolic link or hard-linked
    elsewhere (a ``cp -al`` copy of the dataset) is replaced instead, leaving the other
    name's bytes alone."""
    uri = str(tmp_path / "ds")
    hint = tmp_path / "ds" / "_versions" / "latest_version_hint.json"
    lance_gpu.write_dataset(_tbl(0, 4), uri)
    inode = os.stat(hint).st_ino
    lance_gpu.write_dataset(_tbl(4, 4), uri, mode="append")
    assert os.stat(hint).st_ino == inode and hint.read_text() == '{"version":2}'
    # a hint too high (pylance writes whatever it committed): corrected, padded in place
    hint.write_text('{"version":123456}')
    inode = os.stat(hint).st_ino
    lance_gpu.dataset(uri).delete("id = 1")
    assert os.stat(hint).st_ino == inode
    assert hint.read_text() == '{"version":3}' + " " * 5
    assert lance.dataset(uri).version == lance_gpu.dataset(uri).version == 3
    lance.write_dataset(_tbl(8, 2), uri, mode="append")  # pylance replaces the padded hint
    lance_gpu.write_dataset(_tbl(10, 2), uri, mode="append")
    assert lance.dataset(uri).version == lance_gpu.dataset(uri).version == 5
    assert lance.dataset(uri).to_table().equals(lance_gpu.dataset(uri).to_table())
    # hard-linked elsewhere: replaced by a new file, the other name untouched
    other = tmp_path / "other_hint.json"
    os.link(hint, other)
    lance_gpu.write_dataset(_tbl(12, 2), uri, mode="append")
    assert other.read_text() == '{"version":5}' and hint.read_text() == '{"version":6}'
    assert os.stat(hint).st_ino != os.stat(other).st_ino
    # a symbolic link is replaced, its target untouched
    hint.unlink()
    target = tmp_path / "target.json"
    target.write_text('{"version":6}')
    hint.symlink_to(target)
    lance_gpu.write_dataset(_tbl(14, 2), uri, mode="append")
    assert target.read_text() == '{"version":6}' and not hint.is_symlink() and hint.read_text() == '{"version":7}'
    assert not [p for p in os.listdir(hint.parent) if p.startswith(".tmp")]
    assert lance.dataset(uri).version == 7 and lance.dataset(uri).count_rows() == 15


# --------------------------------------------------------------------------------------------
# a commit's manifest from its base's bytes (lance_gpu.table.manifest_bytes)


def _fresh_manifest_file(uri: str):
    """The latest version's manifest file parsed from its bytes (not the process's cache)."""
    from lance_gpu.table.manifest import latest_version, parse_manifest_bytes

    store, root = resolve(uri)
    info = latest_version(store, root)
    return parse_manifest_bytes(store.get(info.path), store.uri(info.path))


def _base_dataset(uri: str, stable_row_ids: bool) -> None:
    """Six fragments of 100 rows written by pylance, one with a deletion file, a btree index."""
    lance.write_dataset(_tbl(0, 600), uri, max_rows_per_file=100, enable_stable_row_ids=stable_row_ids)
    ds = lance.dataset(uri)
    ds.delete("id = 150")
    ds.create_scalar_index("id", "BTREE")


def _draft_reference(base, sources, new) -> table_pb2.Manifest:
    """The manifest a draft stands for, built the protobuf way: a copy of the base's manifest
    with the changes the test makes to the draft's head and the fragments the sources name."""
    ref = table_pb2.Manifest()
    ref.CopyFrom(base.manifest)
    del ref.fragments[:]
    ref.version = 99
    ref.config["k"] = "v"
    frags = list(base.manifest.fragments)
    ref.fragments.extend(frags[s] if s >= 0 else new[-1 - s] for s in sources)
    return ref


def test_draft_encodes_what_protobuf_encodes(tmp_path):
    from lance_gpu.table.manifest_bytes import FragmentLayout, ManifestDraft

    uri = str(tmp_path / "ds")
    _base_dataset(uri, stable_row_ids=True)
    base = _fresh_manifest_file(uri)
    layout = base.fragment_layout()
    frags = list(base.manifest.fragments)
    assert list(layout.ids) == [int(f.id) for f in frags]
    assert list(layout.has_deletion) == [f.HasField("deletion_file") for f in frags] and layout.has_deletion.any()
    assert [layout.entry(k) for k in range(len(frags))] == frags
    new = [table_pb2.DataFragment(id=100 + k, physical_rows=10 + k, files=[table_pb2.DataFile(path=f"n{k}.lance", fields=[0, 1, 2])])
           for k in range(3)]
    new[1].deletion_file.num_deleted_rows = 1
    n = len(frags)
    for sources in ([*range(n)], [], [0, 2, 4], [*range(n)][::-1], [-1, 0, 1, -2, 2, 3, 4, 5, -3], [-2], [5, -1, 0]):
        head = layout.head()
        assert not head.fragments and head.version == base.manifest.version
        head.version = 99
        head.config["k"] = "v"
        draft = ManifestDraft(head, layout, np.array(sources, np.int64), new)
        raw, out = draft.encode()
        ref = _draft_reference(base, sources, new)
        assert table_pb2.Manifest.FromString(raw) == ref
        assert raw == ref.SerializeToString()  # the same bytes: fields in number order
        assert list(out.ids) == [int(f.id) for f in ref.fragments]
        assert list(out.has_deletion) == [f.HasField("deletion_file") for f in ref.fragments]
        assert [out.entry(k) for k in range(len(sources))] == list(ref.fragments)
        assert draft.has_deletions() == any(f.HasField("deletion_file") for f in ref.fragments)
        assert draft.max_id() == max((int(f.id) for f in ref.fragments), default=-1)
    with pytest.raises(ValueError):
        ManifestDraft(layout.head(), layout, np.array([n]), [])
    # a writer that put the fragments in two runs: the layout is of the manifest's own encoding
    raw = bytes(layout.raw)
    entries = [raw[int(layout.starts[k]):int(layout.starts[k + 1])] for k in range(n)]
    rest = raw[: int(layout.starts[0])] + raw[int(layout.starts[-1]):]
    split = b"".join(entries[:2]) + rest + b"".join(entries[2:])
    assert table_pb2.Manifest.FromString(split) == base.manifest
    odd = FragmentLayout.of(split, base.manifest)
    assert odd.raw != split and [odd.entry(k) for k in range(n)] == frags


def _do(lib, uri: str, op: str) -> None:
    ds = lib.dataset(uri)
    if op == "append":
        lib.write_dataset(_tbl(1000, 10), uri, mode="append")
    elif op == "delete":
        ds.delete("id >= 210 and id < 215")
    elif op == "delete_fragment":
        ds.delete("id >= 300 and id < 400")
    elif op == "update":
        ds.update({"x": "x + 1"}, where="id >= 420 and id < 424")
    elif op == "merge_insert":
        src = pa.concat_tables([_tbl(510, 2), _tbl(5000, 2)])
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    elif op == "overwrite":
        lib.write_dataset(_tbl(0, 50), uri, mode="overwrite")
    elif op == "compact":
        ds.optimize.compact_files(target_rows_per_fragment=250)
    elif op == "update_config":
        ds.update_config({"some.key": "1"})
    else:
        raise ValueError(op)


@pytest.mark.parametrize("stable_row_ids", [False, True])
@pytest.mark.parametrize("op", ["append", "delete", "delete_fragment", "update", "merge_insert", "overwrite", "compact",
                                "update_config"])
def test_commit_builds_the_manifest_from_its_base_bytes(tmp_path, op, stable_row_ids):
    """Each operation's new manifest, kept as the base's bytes plus the change: a reader's
    parse of the file equals what the commit returned (lazily parsed), the bytes are the
    protobuf encoding of that manifest, the fragments it left alone are the base's, and
    pylance reads the version as it reads its own doing the same operation."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _base_dataset(ours, stable_row_ids)
    _base_dataset(theirs, stable_row_ids)
    base = _fresh_manifest_file(ours)
    _do(lance_gpu, ours, op)
    _do(lance, theirs, op)
    committed = lance_gpu.dataset(ours).manifest_file  # the commit's own (no parse of the file)
    fresh = _fresh_manifest_file(ours)
    assert committed == fresh
    from lance_gpu.table.manifest import manifest_message_bytes

    store, _root = resolve(ours)
    raw = manifest_message_bytes(store.get(fresh.path.removeprefix("file://")) if fresh.path.startswith("file://")
                                 else store.get(fresh.path))
    assert raw == fresh.manifest.SerializeToString()
    if op != "overwrite":
        before = {int(f.id): f for f in base.manifest.fragments}
        touched = {int(f.id) for f in fresh.transaction.delete.updated_fragments} | {
            int(f.id) for f in fresh.transaction.update.updated_fragments}
        kept = [f for f in fresh.manifest.fragments if int(f.id) in before and int(f.id) not in touched]
        assert all(f == before[int(f.id)] for f in kept) and (kept or op == "compact")
    got, want = lance.dataset(ours), lance.dataset(theirs)
    assert got.to_table().sort_by("id") == want.to_table().sort_by("id")
    assert got.count_rows() == want.count_rows() and got.version == want.version
    assert [f.fragment_id for f in got.get_fragments()] == [int(f.id) for f in fresh.manifest.fragments]
    assert sorted(i["name"] for i in got.list_indices()) == sorted(i["name"] for i in want.list_indices())
    if stable_row_ids:
        assert got.to_table(with_row_id=True).sort_by("id") == want.to_table(with_row_id=True).sort_by("id")
    assert got.to_table(filter="id = 5")["id"].to_pylist() == [5]  # through the index section
    assert _ours(ours).sort_by("id") == want.to_table().sort_by("id")


def test_commits_chain_on_their_own_bytes(tmp_path):
    """Operations one after another, each on the version the previous commit wrote (its
    manifest kept as bytes, never parsed whole): pylance reads every version as its own."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _base_dataset(ours, False)
    _base_dataset(theirs, False)
    for op in ("append", "append", "delete", "update", "merge_insert", "update_config", "delete_fragment", "append",
               "compact", "append"):
        _do(lance_gpu, ours, op)
        _do(lance, theirs, op)
        mf = lance_gpu.dataset(ours).manifest_file
        assert not mf.head.fragments and mf.fragment_count == len(_fresh_manifest_file(ours).manifest.fragments)
        assert mf == _fresh_manifest_file(ours)
        got, want = lance.dataset(ours), lance.dataset(theirs)
        assert got.to_table().sort_by("id") == want.to_table().sort_by("id"), op
        assert got.version == want.version


def test_appends_never_parse_the_manifests_they_build_on(tmp_path):
    """A run of appends in one process: each commits on the version the previous one wrote
    (read back from the process's cache of its own bytes), keeps that base's fragments as
    bytes, and neither the base's nor its own manifest is parsed whole."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(0, 300), uri, max_rows_per_file=10)  # 30 fragments, by pylance
    lance_gpu.write_dataset(_tbl(300, 5), uri, mode="append")  # its base read from the file
    files = []
    for k in range(5):
        lance_gpu.write_dataset(_tbl(305 + k, 1), uri, mode="append")
        files.append(lance_gpu.dataset(uri).manifest_file)
    for mf in files:
        assert mf._manifest is None  # (private: the whole manifest was never parsed)
    assert files[-1].fragment_count == 36
    assert lance.dataset(uri).count_rows() == 310
    assert files[-1] == _fresh_manifest_file(uri)
