# SPDX-License-Identifier: Apache-2.0
"""Writing blob columns (``lance-encoding:blob``) differentially: the same writes, appends,
deletes, compactions and updates through pylance 14 and through lance-gpu; pylance's
``to_table`` / ``take_blobs`` read both alike, and the stored descriptors match pylance's
byte for byte (2.0 and 2.1 blob v1, 2.2 blob v2, inline blobs)."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.errors import SchemaMismatchError

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")

BLOB = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
SCHEMA = pa.schema([pa.field("id", pa.int64()), BLOB])
# under pylance's 64 KiB threshold: every blob stays in the data file (kind 0)
VALUES = [b"hello", None, b"", b"x" * 100, None, b"world", b"", None, bytes(range(256)) * 200]


def _table(values: list[bytes | None], start: int = 0) -> pa.Table:
    return pa.table({"id": range(start, start + len(values)), "b": values}, schema=SCHEMA)


def _blobs_by_id(uri: str) -> list[tuple[int, bytes | None]]:
    ds = lance.dataset(uri)
    ids = ds.to_table(columns=["id"], with_row_id=True)
    files = ds.take_blobs("b", ids=ids["_rowid"].to_pylist())
    return sorted(zip(ids["id"].to_pylist(), [None if f is None else f.read() for f in files], strict=True), key=lambda r: r[0])


def _descriptors(uri: str, version: str) -> list:
    """The stored descriptor rows of the one data file (16-byte v1 rows, v2 packed rows)."""
    from lance_gpu.file.container import LanceFileReader
    from lance_gpu.file.reader import read_field

    [path] = glob.glob(os.path.join(uri, "data", "*.lance"))
    stored = pa.field("b", pa.binary(16) if version == "2.1" else pa.large_binary())
    return read_field(LanceFileReader(path), stored, [1]).to_pylist()


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_blob_write_as_pylance_writes(tmp_path, version):
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    lance.write_dataset(_table(VALUES), theirs, data_storage_version=version)
    lance_gpu.write_dataset(_table(VALUES), ours, data_storage_version=version)
    A, B = lance.dataset(theirs), lance.dataset(ours)
    assert B.schema == A.schema
    assert B.to_table().equals(A.to_table())  # the descriptors: positions and sizes
    if version != "2.0":  # (2.0 descriptors are what to_table shows)
        assert _descriptors(ours, version) == _descriptors(theirs, version)
    rows = list(range(len(VALUES)))
    assert [None if f is None else f.read() for f in B.take_blobs("b", indices=rows)] == VALUES
    assert [None if f is None else f.read() for f in lance_gpu.dataset(ours).take_blobs("b", indices=rows)] == VALUES
    assert [(d.fields, d.column_indices) for f in B.get_fragments() for d in f.data_files()] == [([0, 1], [0, 1])]


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_blob_appends_compaction_and_update(tmp_path, version):
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    for uri in (theirs, ours):
        lance.write_dataset(_table(VALUES), uri, data_storage_version=version, max_rows_per_file=3)
    more = _table([b"app", None, b"end"], start=100).select(["b", "id"])  # columns reordered
    lance.write_dataset(more, theirs, mode="append")
    lance_gpu.write_dataset(more, ours, mode="append")  # ours onto pylance's blob dataset
    for uri in (theirs, ours):
        lance.dataset(uri).delete("id = 3")
    lance.dataset(theirs).optimize.compact_files()
    lance_gpu.dataset(ours).optimize.compact_files()
    assert len(lance.dataset(ours).get_fragments()) == len(lance.dataset(theirs).get_fragments()) == 1
    assert _blobs_by_id(ours) == _blobs_by_id(theirs)
    lance.dataset(theirs).update({"id": "id + 1000"}, where="id > 4")
    lance_gpu.dataset(ours).update({"id": "id + 1000"}, where="id > 4")
    want = _blobs_by_id(theirs)
    assert _blobs_by_id(ours) == want and [i for i, _b in want][-1] == 1102
    ds = lance_gpu.dataset(ours)
    ids = ds.to_table(columns=["id"], with_row_id=True)
    got = [None if f is None else f.read() for f in ds.take_blobs("b", ids=ids["_rowid"].to_pylist())]
    assert sorted(zip(ids["id"].to_pylist(), got, strict=True), key=lambda r: r[0]) == want
    lance.write_dataset(more, ours, mode="append")  # pylance appends to ours
    assert lance.dataset(ours).count_rows() == lance.dataset(theirs).count_rows() + 3


def test_blob_column_takes_only_blobs(tmp_path):
    uri = str(tmp_path / "ours")
    lance_gpu.write_dataset(_table(VALUES), uri)
    plain = pa.table({"id": [1], "b": pa.array([b"x"], pa.large_binary())})
    with pytest.raises(SchemaMismatchError):
        lance_gpu.write_dataset(plain, uri, mode="append")


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_blob_write_of_sliced_batches(tmp_path, version):
    """Files cut inside a batch hand the writer sliced arrays."""
    uri = str(tmp_path / "ours")
    lance_gpu.write_dataset(_table(VALUES * 3), uri, data_storage_version=version, max_rows_per_file=4)
    ds = lance.dataset(uri)
    assert len(ds.get_fragments()) == 7
    rows = list(range(3 * len(VALUES)))
    assert [None if f is None else f.read() for f in ds.take_blobs("b", indices=rows)] == VALUES * 3


def test_pylance_sidecar_blobs_read_compacted_and_updated(tmp_path):
    """pylance 14 packs 2.2 blobs of 64 KiB and more into sidecar files (kind 1) and gives
    the biggest their own (kind 2); take_blobs, compaction and update read them."""
    values = [b"a" * 70_000, b"b" * 80_000, b"c" * 10, b"d" * (9 * 1024 * 1024), None, b"e" * 70_000]
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    for uri in (theirs, ours):
        lance.write_dataset(_table(values), uri)
    kinds = {d["kind"] for d in lance.dataset(ours).to_table()["b"].to_pylist() if d}
    assert kinds == {0, 1, 2}
    rows = list(range(len(values)))
    assert [None if f is None else f.read() for f in lance_gpu.dataset(ours).take_blobs("b", indices=rows)] == values
    for uri in (theirs, ours):
        lance.dataset(uri).delete("id = 1")
    lance.dataset(theirs).optimize.compact_files()
    lance_gpu.dataset(ours).optimize.compact_files()
    lance.dataset(theirs).update({"id": "id + 10"}, where="id > 3")
    lance_gpu.dataset(ours).update({"id": "id + 10"}, where="id > 3")
    assert _blobs_by_id(ours) == _blobs_by_id(theirs)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_add_blob_column(tmp_path, version):
    """pylance 14 adds blob columns at 2.1 (and fails at 2.2); lance-gpu adds them at both."""
    schema = pa.schema([BLOB])

    def udf(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch([pa.array([b"x" * i if i % 3 else None for i in batch["id"].to_pylist()],
                                         pa.large_binary())], schema=schema)

    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    for uri in (theirs, ours):
        lance.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri, data_storage_version=version)
    lance_gpu.dataset(ours).add_columns(udf)
    if version == "2.1":
        lance.dataset(theirs).add_columns(udf)
        assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
        assert _blobs_by_id(ours) == _blobs_by_id(theirs)
    assert _blobs_by_id(ours) == [(i, b"x" * i if i % 3 else None) for i in range(10)]


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("condition", [None, "source.id > 2"])
def test_blob_merge_insert(tmp_path, version, condition):
    """merge_insert into a blob dataset from a source cast to its schema (bytes, 2.2: blob v2
    descriptors on disk): the same upsert on both libraries, read back alike by pylance."""
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    for uri in (theirs, ours):
        lance.write_dataset(_table(VALUES), uri, data_storage_version=version, max_rows_per_file=4)
    # the source in the dataset's write schema (blob bytes; pylance refuses other types)
    source = pa.table({"id": [1, 3, 8, 100], "b": [b"new1", b"y" * 70_000, None, b"ins"]}, schema=SCHEMA)
    stats = []
    for lib, uri in ((lance, theirs), (lance_gpu, ours)):
        stats.append(
            lib.dataset(uri).merge_insert("id").when_matched_update_all(condition=condition)
            .when_not_matched_insert_all().execute(source)
        )
    assert stats[0] == stats[1]
    A, B = lance.dataset(theirs), lance.dataset(ours)
    assert B.schema == A.schema
    assert B.to_table(columns=["id"]).sort_by("id").equals(A.to_table(columns=["id"]).sort_by("id"))
    assert _blobs_by_id(ours) == _blobs_by_id(theirs)
    assert dict(_blobs_by_id(ours))[3] == b"y" * 70_000
