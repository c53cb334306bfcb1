# SPDX-License-Identifier: Apache-2.0
"""Table operations (delete, restore, drop / alter / add columns, compaction) and their
conflicts, each checked against pylance 14: pylance reads what we did and sees exactly what
pylance's own operation gives on a copy, and we read what pylance did."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pytest

import lance_gpu
from lance_gpu._proto import table_pb2
from lance_gpu.errors import CommitConflictError, RetryableCommitConflictError, SchemaMismatchError
from lance_gpu.io import LOCAL, resolve
from lance_gpu.table.manifest import list_versions, read_manifest_file, read_transaction_file
from lance_gpu.txn import FragmentMetadata, LanceOperation
from lance_gpu.write import discard_fragments, write_fragments
from lance_gpu.write.compaction import CompactionMetrics

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def _tbl(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "id": pa.array(ids),
            "s": pa.array([f"row-{i}" for i in ids]),
            "st": pa.array([{"a": int(i), "b": float(i) / 2} for i in ids]),
        }
    )


def _pair(tmp_path, n=3000, rows_per_file=1000, writer="lance"):
    """The same dataset twice: ours to change with lance_gpu, ref to change with pylance."""
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    if writer == "lance":
        lance.write_dataset(_tbl(n), ours, max_rows_per_file=rows_per_file)
    else:
        lance_gpu.write_dataset(_tbl(n), ours, max_rows_per_file=rows_per_file)
    shutil.copytree(ours, ref)
    return ours, ref


def _latest(uri):
    return read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path)


def _shape(uri) -> dict:
    """What must agree between our and pylance's result of the same operation."""
    mf = _latest(uri)
    m = mf.manifest
    return {
        "version": m.version,
        "fields": [(f.name, f.id, f.parent_id, f.logical_type, f.nullable) for f in m.fields],
        "fragments": [
            (
                f.id,
                f.physical_rows,
                [list(df.fields) for df in f.files],
                (f.deletion_file.file_type, f.deletion_file.num_deleted_rows) if f.HasField("deletion_file") else None,
            )
            for f in m.fragments
        ],
        "flags": (m.reader_feature_flags, m.writer_feature_flags),
        "max_fragment_id": m.max_fragment_id if m.HasField("max_fragment_id") else None,
        "operation": mf.transaction.WhichOneof("operation"),
    }


def _same(ours, ref):
    """pylance reads ours as it reads its own; we read pylance's the same way."""
    expected = lance.dataset(ref).to_table()
    assert lance.dataset(ours).to_table().equals(expected)
    assert lance_gpu.dataset(ours, device="cpu").to_table().equals(expected)
    assert lance_gpu.dataset(ref, device="cpu").to_table().equals(expected)
    assert _shape(ours) == _shape(ref)


# --------------------------------------------------------------------------------------------
# delete


def test_delete_matches_pylance(tmp_path):
    ours, ref = _pair(tmp_path, n=24000, rows_per_file=8000)
    ds, rds = lance_gpu.dataset(ours, device="cpu"), lance.dataset(ref)
    # fragment 0: 2667 rows (.arrow); fragment 1: 5334 (.bin); fragment 2: all (removed)
    pred = "(id < 8000 and id % 3 = 0) or (id >= 8000 and id < 16000 and id % 3 != 0) or id >= 16000"
    assert ds.delete(pred) == rds.delete(pred) == {"num_deleted_rows": 2667 + 5333 + 8000}
    assert ds.version == 2  # the object moved to the new version, as pylance's does
    assert ds.count_rows() == lance.dataset(ref).count_rows()
    _same(ours, ref)
    mf = _latest(ours)
    m = mf.manifest
    assert (m.reader_feature_flags, m.writer_feature_flags) == (1, 1)
    assert m.max_fragment_id == 2 and [f.id for f in m.fragments] == [0, 1]
    d0, d1 = (f.deletion_file for f in m.fragments)
    assert d0.file_type == table_pb2.DeletionFile.ARROW_ARRAY and d1.file_type == table_pb2.DeletionFile.BITMAP
    assert d0.read_version == 1 and d0.id != 0
    names = sorted(os.listdir(os.path.join(ours, "_deletions")))
    assert names == sorted([f"0-1-{d0.id}.arrow", f"1-1-{d1.id}.bin"])
    f = ipc.open_file(os.path.join(ours, "_deletions", f"0-1-{d0.id}.arrow"))
    assert f.schema == pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
    assert f.read_all().column(0).to_pylist() == list(range(0, 8000, 3))
    with open(os.path.join(ours, "_deletions", f"1-1-{d1.id}.bin"), "rb") as fh:
        raw = fh.read()
    assert raw[:4] == b"\x3a\x30\x00\x00" or raw[:2] == b"\x3b\x30"  # portable roaring cookie
    from pyroaring import BitMap

    assert list(BitMap.deserialize(raw)) == [i - 8000 for i in range(8000, 16000) if i % 3]
    # the transaction: Delete{updated, deleted ids, predicate}, inline and as a .txn file
    txn = mf.transaction
    assert txn.read_version == 1
    assert [u.id for u in txn.delete.updated_fragments] == [0, 1]
    assert list(txn.delete.deleted_fragment_ids) == [2] and txn.delete.predicate == pred
    assert read_transaction_file(LOCAL, os.path.join(ours, "_transactions", m.transaction_file)) == txn

    # a second delete: the new file holds old and new rows and replaces the old one
    assert ds.delete("id = 1 or id = 8000") == rds.delete("id = 1 or id = 8000") == {"num_deleted_rows": 1}
    _same(ours, ref)
    assert _latest(ours).manifest.fragments[0].deletion_file.num_deleted_rows == 2668
    # we delete on top of pylance's deletions and pylance on top of ours
    lance.dataset(ours).delete("id < 100")
    lance_gpu.dataset(ref, device="cpu").delete("id < 100")
    _same(ours, ref)


def test_delete_written_by_us_and_edge_cases(tmp_path):
    ours, ref = _pair(tmp_path, n=2000, writer="ours")
    ds, rds = lance_gpu.dataset(ours, device="cpu"), lance.dataset(ref)
    # nothing matches: a new version all the same
    assert ds.delete("id > 99999") == rds.delete("id > 99999") == {"num_deleted_rows": 0}
    assert ds.version == 2
    _same(ours, ref)
    # a pyarrow expression; a nested field
    expr = pc.field("id") == 1500
    assert ds.delete(expr) == rds.delete(expr) == {"num_deleted_rows": 1}
    _same(ours, ref)
    assert ds.delete("st.a = 1499") == rds.delete("st.a = 1499") == {"num_deleted_rows": 1}
    _same(ours, ref)
    # everything: every fragment leaves the manifest
    assert ds.delete("true") == rds.delete("true") == {"num_deleted_rows": 1998}
    _same(ours, ref)
    assert ds.count_rows() == 0 and ds.fragments == []
    with pytest.raises(lance_gpu.FilterError):
        ds.delete("no_such_column = 1")


@pytest.mark.parametrize("stable", [False, True])
def test_delete_by_row_id_and_address_like_pylance(tmp_path, stable):
    """A delete's predicate may read ``_rowid`` and ``_rowaddr``, as pylance's (with stable
    row ids a row's id is not its address); the same rows go, and pylance reads ours."""
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    lance.write_dataset(_tbl(3000), ours, max_rows_per_file=1000, enable_stable_row_ids=stable)
    lance.dataset(ours).delete("id % 7 = 0")
    lance.write_dataset(_tbl(10, 5000), ours, mode="append")
    shutil.copytree(ours, ref)
    for pred in (f"_rowid = 5 OR _rowid = {(1 << 32) + 5}", f"_rowaddr >= {(1 << 32) + 990} AND _rowaddr < {2 << 32}",
                 "_rowid >= 3 AND _rowid < 9 AND id > 0"):
        got = lance_gpu.dataset(ours).delete(pred)
        assert got == lance.dataset(ref).delete(pred) and got["num_deleted_rows"] > 0, (pred, got)
        _same(ours, ref)


def test_pylance_reads_uncompressed_deletion_files(tmp_path):
    from lance_gpu.table.deletion_writer import encode_deletion_rows

    kind, data = encode_deletion_rows(np.array([1, 5], np.uint32))
    assert kind == table_pb2.DeletionFile.ARROW_ARRAY and data[:6] == b"ARROW1"
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(10), uri)
    lance_gpu.dataset(uri).delete("id = 3 or id = 4")
    d = _latest(uri).manifest.fragments[0].deletion_file
    path = os.path.join(uri, "_deletions", f"0-1-{d.id}.arrow")
    table = ipc.open_file(path).read_all()
    with ipc.new_file(path, table.schema) as w:  # rewritten without compression
        w.write_table(table)
    assert lance.dataset(uri).to_table()["id"].to_pylist() == [0, 1, 2, 5, 6, 7, 8, 9]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 9, 100, 1024, 1025, 4999])
def test_deletion_file_bytes_are_pyarrows(n):
    """A deletion file of up to PLAIN_IPC_ROWS rows is pyarrow's uncompressed IPC file of them,
    byte for byte (put together from a layout found once per row count); above, pyarrow
    writes it zstd-compressed.  Either way it reads back as the rows."""
    from lance_gpu.table.deletion_writer import PLAIN_IPC_ROWS, _ipc_file, encode_deletion_rows

    rows = np.sort(np.random.default_rng(n).choice(4 * n, n, replace=False)).astype(np.uint32)
    rows[-1] = 0xFFFFFFFF if n > 1 else rows[-1]  # the largest offset a file can hold
    kind, data = encode_deletion_rows(rows)
    assert kind == table_pb2.DeletionFile.ARROW_ARRAY
    assert ipc.open_file(pa.py_buffer(data)).read_all().column("row_id").to_numpy().tolist() == rows.tolist()
    if n <= PLAIN_IPC_ROWS:
        assert data == _ipc_file(rows, None)
    else:
        assert ipc.open_file(pa.py_buffer(data)).schema == ipc.open_file(pa.py_buffer(_ipc_file(rows, "zstd"))).schema
        assert len(data) < len(_ipc_file(rows, None))  # compressed


def test_pylance_reads_our_deletions_of_many_counts(tmp_path):
    """Deletes leaving 1, then 3, then 1,503 deleted rows in a fragment (uncompressed, then
    compressed deletion files), and one emptying a fragment: pylance reads ours as the rows
    its own deletes leave."""
    ours, ref = _pair(tmp_path, n=9000, rows_per_file=3000)
    for pred in ("id = 5", "id >= 3000 and id < 3003", "id >= 3100 and id < 4600", "id >= 6000"):
        assert lance_gpu.dataset(ours).delete(pred) == lance.dataset(ref).delete(pred)
        _same(ours, ref)
    frags = _latest(ours).manifest.fragments
    assert [(int(f.id), int(f.deletion_file.num_deleted_rows)) for f in frags] == [(0, 1), (1, 1503)]


# --------------------------------------------------------------------------------------------
# restore


def test_restore(tmp_path):
    ours, ref = _pair(tmp_path)
    for uri in (ours, ref):
        lance.dataset(uri).delete("id < 10")
        lance.write_dataset(_tbl(100, 5000), uri, mode="append")
    ds = lance_gpu.dataset(ours, version=2, device="cpu")
    assert ds.restore() is None and lance.dataset(ref, version=2).restore() is None
    assert ds.version == 4 and ds.count_rows() == 2990
    _same(ours, ref)
    txn = _latest(ours).transaction
    assert txn.restore.version == 2 and txn.read_version == 3
    # restore(version) from any object; pylance then appends on top
    lance_gpu.dataset(ours).restore(1)
    lance.dataset(ref, version=1).restore()
    _same(ours, ref)
    for uri in (ours, ref):
        lance.write_dataset(_tbl(7, 9000), uri, mode="append")
    _same(ours, ref)


# --------------------------------------------------------------------------------------------
# drop / alter columns


def test_drop_and_alter_columns(tmp_path):
    ours, ref = _pair(tmp_path)
    ds, rds = lance_gpu.dataset(ours, device="cpu"), lance.dataset(ref)
    for d in (ds, rds):
        d.delete("id % 10 = 0")
    ds.drop_columns(["st.a"])
    rds.drop_columns(["st.a"])
    _same(ours, ref)
    assert ds.schema.field("st").type == pa.struct([pa.field("b", pa.float64())])
    # data files are kept, with their field lists (pylance's way)
    assert list(_latest(ours).manifest.fragments[0].files[0].fields) == [0, 1, 3, 4]
    ds.alter_columns({"path": "id", "name": "ident"}, {"path": "st.b", "name": "half"})
    rds.alter_columns({"path": "id", "name": "ident"}, {"path": "st.b", "name": "half"})
    _same(ours, ref)
    assert _latest(ours).transaction.WhichOneof("operation") == "project"
    ds.alter_columns({"path": "ident", "nullable": False})
    rds.alter_columns({"path": "ident", "nullable": False})
    _same(ours, ref)
    ds.drop_columns(["s"])
    rds.drop_columns(["s"])
    _same(ours, ref)
    # pylance works on top of ours
    lance.dataset(ours).alter_columns({"path": "ident", "name": "id"})
    lance_gpu.dataset(ref).alter_columns({"path": "ident", "name": "id"})
    _same(ours, ref)
    ds = lance_gpu.dataset(ours)
    with pytest.raises(ValueError, match="all columns"):
        ds.drop_columns(["id", "st"])
    with pytest.raises(SchemaMismatchError):
        ds.drop_columns(["nope"])
    with pytest.raises(SchemaMismatchError):
        ds.alter_columns({"path": "nope", "name": "x"})
    with pytest.raises(ValueError, match="Duplicate"):
        ds.alter_columns({"path": "id", "name": "st"})
    assert lance.dataset(ours).version == ds.version  # nothing committed by the failures


def test_dropped_field_ids_are_not_reused(tmp_path):
    ours, ref = _pair(tmp_path, n=50)
    for mod in (lance_gpu, lance):
        d = mod.dataset(ours if mod is lance_gpu else ref)
        d.drop_columns(["s"])
        d.add_columns(pa.table({"c": pa.array(np.arange(50) * 7)}))
    _same(ours, ref)
    assert [(f.name, f.id) for f in _latest(ours).manifest.fields][-1] == ("c", 5)


# --------------------------------------------------------------------------------------------
# add columns


def _udf(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.record_batch([pc.multiply(batch["id"], 10), pc.utf8_upper(batch["s"])], names=["tenx", "up"])


@pytest.mark.parametrize("writer", ["lance", "ours"])
def test_add_columns(tmp_path, writer):
    """We add columns to a dataset (pylance's or ours) and pylance adds the same columns to a
    copy of it; each library reads both results."""
    ours, ref = _pair(tmp_path, writer=writer)
    ds, rds = lance_gpu.dataset(ours, device="cpu"), lance.dataset(ref)
    for d in (ds, rds):
        d.delete("id % 7 = 3 or (id >= 1000 and id < 1500)")
    n = ds.count_rows()
    new = pa.table({"new": pa.array(np.arange(n) * 2), "name": pa.array([f"n{i}" for i in range(n)])})
    ds.add_columns(new)
    rds.add_columns(new)
    _same(ours, ref)
    mf = _latest(ours)
    assert mf.transaction.WhichOneof("operation") == "merge"
    assert [list(df.fields) for df in mf.manifest.fragments[1].files] == [[0, 1, 3, 4], [5, 6]]
    # deleted rows are stored as nulls
    df = mf.manifest.fragments[1].files[1]
    stored = lance.file.LanceFileReader(os.path.join(ours, "data", df.path)).read_all().to_table()
    assert stored.num_rows == 1000 and stored["new"].null_count == 500 + 72
    # a reader in pieces
    reader = pa.RecordBatchReader.from_batches(
        pa.schema([("r", pa.int32())]), [pa.record_batch([pa.array(np.arange(a, b, dtype=np.int32))], names=["r"]) for a, b in ((0, 7), (7, n))]
    )
    ds.add_columns(reader)
    reader = pa.RecordBatchReader.from_batches(
        pa.schema([("r", pa.int32())]), [pa.record_batch([pa.array(np.arange(a, b, dtype=np.int32))], names=["r"]) for a, b in ((0, 7), (7, n))]
    )
    rds.add_columns(reader)
    _same(ours, ref)
    # a function of existing columns, SQL, all-null fields
    ds.add_columns(_udf, read_columns=["id", "s"])
    rds.add_columns(_udf, read_columns=["id", "s"])
    _same(ours, ref)
    ds.add_columns({"sq": "id * id", "flag": "id > 100"})
    rds.add_columns({"sq": "id * id", "flag": "id > 100"})
    _same(ours, ref)
    ds.add_columns([pa.field("nn", pa.float32()), pa.field("ns", pa.string())])
    rds.add_columns([pa.field("nn", pa.float32()), pa.field("ns", pa.string())])
    _same(ours, ref)
    # pylance compacts what we added
    lance.dataset(ours).optimize.compact_files()
    lance.dataset(ref).optimize.compact_files()
    _same(ours, ref)


def test_add_columns_errors(tmp_path):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(100), uri, max_rows_per_file=40)
    ds = lance_gpu.dataset(uri)
    before = sorted(os.listdir(os.path.join(uri, "data")))
    with pytest.raises(ValueError, match="Stream ended"):
        ds.add_columns(pa.table({"x": pa.array(range(99))}))
    with pytest.raises(ValueError, match="more values than expected"):
        ds.add_columns(pa.table({"x": pa.array(range(101))}))
    with pytest.raises(SchemaMismatchError, match="already exists"):
        ds.add_columns(pa.table({"id": pa.array(range(100))}))
    with pytest.raises(ValueError, match="rows"):
        ds.add_columns(lambda b: pa.record_batch([pa.array([1])], names=["one"]))
    assert sorted(os.listdir(os.path.join(uri, "data"))) == before  # partial files removed
    assert ds.version == 1 and lance.dataset(uri).version == 1


# --------------------------------------------------------------------------------------------
# compaction


def test_compact_files(tmp_path):
    ours, ref = _pair(tmp_path, n=5000, rows_per_file=500)
    for uri in (ours, ref):
        lance.dataset(uri).delete("id % 4 = 0 or (id >= 3000 and id < 3400)")
    ds, rds = lance_gpu.dataset(ours, device="cpu"), lance.dataset(ref)
    m = ds.optimize.compact_files(target_rows_per_fragment=1200)
    rm = rds.optimize.compact_files(target_rows_per_fragment=1200)
    assert isinstance(m, CompactionMetrics)
    assert (m.fragments_removed, m.fragments_added, m.files_removed, m.files_added) == (
        rm.fragments_removed, rm.fragments_added, rm.files_removed, rm.files_added)
    _same(ours, ref)  # same versions too: one ReserveFragments commit, then Rewrite
    mf = _latest(ours)
    assert mf.transaction.WhichOneof("operation") == "rewrite" and mf.transaction.read_version == 2
    assert (mf.manifest.reader_feature_flags, mf.manifest.writer_feature_flags) == (0, 0)
    assert all(not f.HasField("deletion_file") for f in mf.manifest.fragments)
    kinds = [read_manifest_file(LOCAL, v.path).transaction.WhichOneof("operation") for v in list_versions(*resolve(ours))]
    assert kinds == [read_manifest_file(LOCAL, v.path).transaction.WhichOneof("operation") for v in list_versions(*resolve(ref))]
    # nothing left to do: no commit
    again = ds.optimize.compact_files(target_rows_per_fragment=1200)
    assert again == CompactionMetrics() and ds.version == mf.manifest.version
    # pylance appends and deletes on top
    for uri in (ours, ref):
        lance.write_dataset(_tbl(10, 9000), uri, mode="append")
        lance.dataset(uri).delete("id % 5 = 1")
    _same(ours, ref)



def test_compaction_rewrite_builds_on_its_own_reservation(tmp_path, monkeypatch):
    """compact_files commits ReserveFragments, then the Rewrite rebased on it before its first
    attempt: no version is tried and lost (nothing asks which versions were committed since),
    one transaction file each, and both transactions name the version compacted as the one
    read, as pylance's do.  A writer that commits between the two is still built upon."""
    import importlib

    txn_commit = importlib.import_module("lance_gpu.txn.commit")  # (the package exports a function of that name)
    ours, ref = _pair(tmp_path, n=100, rows_per_file=10)
    calls = []
    real = txn_commit._committed_since
    monkeypatch.setattr(txn_commit, "_committed_since", lambda *a: calls.append(a[2]) or real(*a))
    ds = lance_gpu.dataset(ours)
    txns = set(os.listdir(os.path.join(ours, "_transactions")))
    ds.optimize.compact_files()
    lance.dataset(ref).optimize.compact_files()
    assert calls == []  # no lost attempt
    assert len(set(os.listdir(os.path.join(ours, "_transactions"))) - txns) == 2
    _same(ours, ref)

    def read_versions(uri):
        mfs = [read_manifest_file(LOCAL, v.path) for v in list_versions(*resolve(uri))[-2:]]
        return [(mf.transaction.WhichOneof("operation"), mf.transaction.read_version) for mf in mfs]

    assert read_versions(ours) == read_versions(ref) == [("reserve_fragments", 1), ("rewrite", 1)]
    assert ds.version == 3 and ds.count_rows() == 100

    # another writer commits between the reservation and the Rewrite: built upon
    from lance_gpu.write import compaction

    for uri in (ours, ref):
        lance.dataset(uri).delete("id = 3")
        lance.write_dataset(_tbl(10, 500), uri, mode="append")
    real_reserve = compaction.reserve_fragment_ids

    def reserve_then_append(*args, **kwargs):
        reserved = real_reserve(*args, **kwargs)
        lance.write_dataset(_tbl(7, 900), ours, mode="append")
        return reserved

    monkeypatch.setattr(compaction, "reserve_fragment_ids", reserve_then_append)
    ds = lance_gpu.dataset(ours)
    ds.optimize.compact_files()
    assert calls == [7]  # rebased on its reservation (6), the Rewrite lost 7 to the append, then committed 8
    got = lance.dataset(ours)
    assert got.version == 8 and read_versions(ours) == [("append", 6), ("rewrite", 5)]
    assert sorted(got.to_table()["id"].to_pylist()) == sorted([i for i in range(100) if i != 3] + list(range(500, 510))
                                                              + list(range(900, 907)))
    assert len(got.get_fragments()) == 2

def test_compact_default_target_and_threshold(tmp_path):
    ours, ref = _pair(tmp_path, n=3000, rows_per_file=1000)
    for uri in (ours, ref):
        lance.dataset(uri).delete("id >= 1000 and id < 1050")  # 5 %: below the 10 % threshold
    m = lance_gpu.dataset(ours).optimize.compact_files()
    rm = lance.dataset(ref).optimize.compact_files()
    assert (m.fragments_removed, m.fragments_added) == (rm.fragments_removed, rm.fragments_added) == (3, 1)
    _same(ours, ref)


def test_compact_with_stable_row_ids(tmp_path):
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    lance.write_dataset(_tbl(3000), ours, max_rows_per_file=500, enable_stable_row_ids=True)
    lance.write_dataset(_tbl(200, 3000), ours, mode="append")
    lance.dataset(ours).delete("id % 3 = 0 or (id > 1000 and id < 1400)")
    shutil.copytree(ours, ref)
    m = lance_gpu.dataset(ours).optimize.compact_files(target_rows_per_fragment=1000)
    rm = lance.dataset(ref).optimize.compact_files(target_rows_per_fragment=1000)
    assert (m.fragments_removed, m.fragments_added) == (rm.fragments_removed, rm.fragments_added)
    _same(ours, ref)
    expected = lance.dataset(ref).to_table(with_row_id=True)
    assert lance.dataset(ours).to_table(with_row_id=True).equals(expected)
    assert lance_gpu.dataset(ours).to_table(with_row_id=True).equals(expected)
    # pylance finds rows by their stable ids and keeps going on top
    assert lance.dataset(ours)._take_rows([1, 2, 1401, 3100]).to_pylist() == lance.dataset(ref)._take_rows([1, 2, 1401, 3100]).to_pylist()
    for uri in (ours, ref):
        lance.dataset(uri).delete("id = 5")
        lance.write_dataset(_tbl(1, 9999), uri, mode="append")
    assert lance.dataset(ours).to_table(with_row_id=True).equals(lance.dataset(ref).to_table(with_row_id=True))


@pytest.mark.parametrize(
    "ids",
    [
        np.arange(10, 1000),
        np.concatenate([np.arange(5, 100), np.arange(200, 300)]),
        np.arange(0, 30000, 3),
        np.array([7, 1 << 40, 3]),
        np.random.default_rng(1).choice(1 << 20, 5000, replace=False).astype(np.uint64),
        np.sort(np.random.default_rng(2).choice(1 << 20, 5000, replace=False)),
        np.zeros(0, np.uint64),
    ],
)
def test_row_id_and_version_encodings_roundtrip(ids):
    from lance_gpu.table.rowids import decode_row_id_sequence, decode_version_sequence, encode_row_ids, encode_versions

    ids = ids.astype(np.uint64)
    assert np.array_equal(decode_row_id_sequence(encode_row_ids(ids)), ids)
    versions = (np.arange(ids.size) // 7 % 3 + 1).astype(np.uint64)
    assert np.array_equal(decode_version_sequence(encode_versions(versions), ids.size or None), versions)


# --------------------------------------------------------------------------------------------
# conflicts: two dataset objects opened at the same version


def _ids(uri):
    return sorted(lance.dataset(uri).to_table(columns=["id"])["id"].to_pylist())


def test_concurrent_deletes_of_one_fragment_are_merged(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(100), uri)
    a, b = lance_gpu.dataset(uri), lance_gpu.dataset(uri)
    a.delete("id < 5")
    assert b.delete("id >= 95", conflict_retries=0) == {"num_deleted_rows": 5}  # rebased, not retried
    assert b.version == 3
    assert _ids(uri) == list(range(5, 95))
    mf = _latest(uri)
    assert mf.transaction.read_version == 2  # rebased onto the winner, like pylance
    assert mf.manifest.fragments[0].deletion_file.num_deleted_rows == 10
    assert read_transaction_file(LOCAL, os.path.join(uri, "_transactions", mf.manifest.transaction_file)) == mf.transaction
    assert len(os.listdir(os.path.join(uri, "_deletions"))) == 2  # b's first file was superseded
    # and against pylance as the winner
    c = lance_gpu.dataset(uri)
    lance.dataset(uri).delete("id = 50")
    c.delete("id = 51")
    assert _ids(uri) == [i for i in range(5, 95) if i not in (50, 51)]


def test_concurrent_deletes_of_the_same_rows(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(100), uri)
    a, b = lance_gpu.dataset(uri), lance_gpu.dataset(uri)
    a.delete("id < 10")
    files = sorted(os.listdir(os.path.join(uri, "_deletions")))
    with pytest.raises(RetryableCommitConflictError):
        b.delete("id < 20", conflict_retries=0)
    assert b.version == 1 and lance.dataset(uri).version == 2
    assert sorted(os.listdir(os.path.join(uri, "_deletions"))) == files  # b's file removed
    # with retries (the default, as pylance) the delete is re-run on the latest version
    assert b.delete("id < 20") == {"num_deleted_rows": 10}
    assert _ids(uri) == list(range(20, 100))


def test_delete_against_overwrite_is_incompatible(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(100), uri)
    a = lance_gpu.dataset(uri)
    lance.write_dataset(_tbl(10, 500), uri, mode="overwrite")
    with pytest.raises(CommitConflictError) as info:
        a.delete("id < 20")
    assert not isinstance(info.value, RetryableCommitConflictError)
    assert _ids(uri) == list(range(500, 510)) and not os.listdir(os.path.join(uri, "_deletions"))
    b = lance_gpu.dataset(uri, version=1)
    lance_gpu.dataset(uri).restore(1)
    with pytest.raises(CommitConflictError):
        b.delete("id < 20")


def test_delete_against_compaction(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(3000), uri, max_rows_per_file=500)
    lance.write_dataset(_tbl(5000, 3000), uri, mode="append")  # fragment 6: not compacted
    a, b, c = (lance_gpu.dataset(uri) for _ in range(3))
    a.optimize.compact_files(target_rows_per_fragment=3000)
    assert [f.fragment_id for f in lance.dataset(uri).get_fragments()] == [6, 7]
    # a delete of the compacted fragments must be re-run ...
    with pytest.raises(RetryableCommitConflictError):
        b.delete("id < 10", conflict_retries=0)
    assert b.delete("id < 10") == {"num_deleted_rows": 10}
    # ... one of other fragments goes through
    c.delete("id >= 7000", conflict_retries=0)
    assert _ids(uri) == list(range(10, 7000))
    # and a compaction that lost to a delete of its fragments
    d = lance_gpu.dataset(uri)
    lance.dataset(uri).delete("id >= 6990")
    lance.dataset(uri).delete("id < 1000")  # 1/3 of fragment 7: it compacts itself
    data = sorted(os.listdir(os.path.join(uri, "data")))
    with pytest.raises(RetryableCommitConflictError):
        d.optimize.compact_files(materialize_deletions_threshold=0.0, conflict_retries=0)
    assert _ids(uri) == list(range(1000, 6990))
    assert sorted(os.listdir(os.path.join(uri, "data"))) == data  # its new files were removed
    # by default the compaction re-plans itself on the latest version, as pylance's does
    e = lance_gpu.dataset(uri)
    lance.dataset(uri).delete("id >= 6980")
    e.optimize.compact_files(materialize_deletions_threshold=0.0)
    assert e.version == lance.dataset(uri).version and _ids(uri) == list(range(1000, 6980))
    assert _latest(uri).transaction.WhichOneof("operation") == "rewrite"


def test_operations_against_each_other(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(100), uri, max_rows_per_file=50)
    # project and delete commute
    a, b = lance_gpu.dataset(uri), lance_gpu.dataset(uri)
    a.drop_columns(["s"])
    b.delete("id < 3")
    assert lance.dataset(uri).schema.names == ["id", "st"] and _ids(uri) == list(range(3, 100))
    # a merge loses to a delete (its fragments would drop the deletion): re-planned by
    # itself on the latest version, nothing lost
    a, b = lance_gpu.dataset(uri), lance_gpu.dataset(uri)
    a.delete("id = 50")
    b.add_columns({"twice": "id * 2"})
    assert _ids(uri) == [i for i in range(3, 100) if i != 50]
    t = lance.dataset(uri).to_table()
    assert t["twice"].to_pylist() == [2 * i for i in t["id"].to_pylist()]
    b.drop_columns(["twice"])
    # two renames: the second is redone on the new schema
    a, b = lance_gpu.dataset(uri), lance_gpu.dataset(uri)
    a.alter_columns({"path": "id", "name": "x"})
    b.alter_columns({"path": "st", "name": "y"})
    assert lance.dataset(uri).schema.names == ["x", "y"]
    b.alter_columns({"path": "y", "name": "st"})
    # a delete against pylance's merge: retried and applied to the merged fragments
    a = lance_gpu.dataset(uri)
    lance.dataset(uri).add_columns({"z": "x + 1"})
    assert a.delete("x = 60") == {"num_deleted_rows": 1}
    t = lance.dataset(uri).to_table()
    assert t.schema.names == ["x", "st", "z"] and 60 not in t["x"].to_pylist()
    assert t["z"].to_pylist() == [v + 1 for v in t["x"].to_pylist()]


def test_spark_private_names_still_work():
    from lance_gpu.txn import publish as commit
    from lance_gpu.write import dataset_writer

    assert callable(dataset_writer._write_fragments) and dataset_writer._minor_of(None) == 2
    assert callable(dataset_writer._check_types)
    assert commit.serialize_manifest and commit.latest and commit.check_appendable


# --------------------------------------------------------------------------------------------
# the public fragment API (for distributed writers such as the Spark sink)


def test_write_and_commit_fragments(tmp_path):
    uri = str(tmp_path / "ds")
    # create: two "tasks" write, the driver commits once
    parts = [write_fragments(_tbl(300, k * 300), uri, mode="create", max_rows_per_file=200) for k in range(2)]
    assert all(f.physical_rows in (200, 100) and not f.id for p in parts for f in p)
    assert not os.path.exists(os.path.join(uri, "_versions"))  # nothing visible yet
    ds = lance_gpu.LanceDataset.commit(uri, LanceOperation.Overwrite(_tbl(1).schema, parts[0] + parts[1]))
    assert ds.version == 1 and lance.dataset(uri).to_table().equals(_tbl(600))
    # append at a read version, with a concurrent append in between: rebuilt on top
    read = ds.version
    frags = write_fragments(_tbl(50, 1000).select(["st", "id", "s"]), uri)  # any column order
    lance.write_dataset(_tbl(10, 5000), uri, mode="append")
    shipped = [FragmentMetadata.from_json(json.dumps(f.to_json())) for f in frags]  # across processes
    ds = lance_gpu.LanceDataset.commit(uri, LanceOperation.Append(shipped), read_version=read)
    assert ds.version == 3 and _ids(uri) == list(range(600)) + list(range(1000, 1050)) + list(range(5000, 5010))
    # a concurrent delete: the append goes on top of it
    frags = write_fragments(_tbl(5, 2000), uri)
    read = lance_gpu.dataset(uri).version
    lance.dataset(uri).delete("id < 100")
    ds = lance_gpu.LanceDataset.commit(uri, LanceOperation.Append(frags), read_version=read)
    assert ds.version == read + 2 and _ids(uri) == (
        list(range(100, 600)) + list(range(1000, 1050)) + list(range(2000, 2005)) + list(range(5000, 5010))
    )
    # a concurrent overwrite: refused, and the caller discards its files
    frags = write_fragments(_tbl(5, 3000), uri)
    read = lance_gpu.dataset(uri).version
    lance.write_dataset(_tbl(5, 4000), uri, mode="overwrite")
    with pytest.raises(CommitConflictError):
        lance_gpu.LanceDataset.commit(uri, LanceOperation.Append(frags), read_version=read)
    before = len(os.listdir(os.path.join(uri, "data")))
    discard_fragments(uri, frags)
    assert len(os.listdir(os.path.join(uri, "data"))) == before - 1
    with pytest.raises(SchemaMismatchError):  # a castable but other type, refused as pylance refuses it
        write_fragments(_tbl(1).set_column(0, "id", pa.array([1], pa.int32())), uri)
    # overwrite with a new schema and file version
    new = pa.table({"x": pa.array([1.5, 2.5])})
    frags = write_fragments(new, uri, mode="overwrite", data_storage_version="2.1")
    ds = lance_gpu.LanceDataset.commit(uri, LanceOperation.Overwrite(new.schema, frags))
    assert lance.dataset(uri).to_table().equals(new) and lance.dataset(uri).data_storage_version == "2.1"


def _same_object_reads(ds) -> dict:
    """Every read of one dataset object that must follow it to a new version."""
    frags = ds.get_fragments()
    return {
        "version": ds.version,
        "schema": ds.schema.names,
        "table": ds.to_table().sort_by("id").to_pydict(),
        "fragments": {f.fragment_id: ds.get_fragment(f.fragment_id).to_table().sort_by("id").to_pydict() for f in frags},
        "take": ds.take([0, 5, 1000]).to_pydict(),
        "count": ds.count_rows(),
        "filtered": ds.count_rows("id % 7 = 0"),
    }


def test_an_operation_moves_the_same_object_to_what_it_committed(tmp_path):
    """pylance moves the dataset object an operation ran on to the version it committed:
    every read of that object, fragment lookups by id included, must then see the new
    version (a fragment cached by id from before an add_columns read the new column as
    nulls)."""
    ours_uri, ref_uri = _pair(tmp_path, n=2000, rows_per_file=700)
    ours, ref = lance_gpu.dataset(ours_uri), lance.dataset(ref_uri)
    steps = [
        lambda d: d.add_columns({"double": "id * 2"}),
        lambda d: d.delete("id % 5 = 1"),
        lambda d: d.alter_columns({"path": "double", "name": "twice"}),
        lambda d: d.update({"twice": "twice + 1"}, where="id < 100"),
        lambda d: d.merge_insert("id").when_matched_update_all().execute(
            pa.table({"id": pa.array([0, 5, 1999]), "s": pa.array(["x", "y", "z"]),
                      "st": pa.array([{"a": 0, "b": 0.0}] * 3), "twice": pa.array([7, 7, 7])})),
        lambda d: d.drop_columns(["st"]),
        lambda d: d.optimize.compact_files(target_rows_per_fragment=5000),
    ]
    for i, step in enumerate(steps):
        assert _same_object_reads(ours) == _same_object_reads(ref), i  # caches filled before the step
        step(ours)
        step(ref)
        assert _same_object_reads(ours) == _same_object_reads(ref), i
