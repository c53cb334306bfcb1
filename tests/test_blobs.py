# SPDX-License-Identifier: Apache-2.0
"""Blob columns against pylance 14.0.2: descriptors as pylance's to_table returns them, and
take_blobs file-like objects reading the same bytes."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu
from lance_gpu.errors import (
    RowOutOfRangeError,
    SchemaMismatchError,
)
from lance_gpu.table.blob_descriptions import description_field
from lance_gpu.table.blobs import BlobFile

BLOBS = [b"abc", None, b"x" * 100, b"", bytes(range(256)) * 40, None, b"tail"]


def _write(uri: str, storage: str, deletes: bool = False) -> None:
    field = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    schema = pa.schema([pa.field("id", pa.int64()), field])
    t = pa.table({"id": range(len(BLOBS)), "b": pa.array(BLOBS, pa.large_binary())}, schema=schema)
    lance.write_dataset(t, uri, data_storage_version=storage, max_rows_per_file=4)
    if deletes:
        lance.dataset(uri).delete("id = 2")


def _ours(uri: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lance_gpu.dataset(uri)


@pytest.mark.parametrize("storage", ["2.0", "2.1", "stable"])
def test_descriptions_match_pylance(tmp_path: Path, storage: str) -> None:
    uri = str(tmp_path / "b.lance")
    _write(uri, storage)
    ref = lance.dataset(uri).to_table().column("b")
    ds = _ours(uri)
    field = ds.snapshot.lance_schema.fields[1]
    ours = pa.chunked_array([f.blob_descriptions(field, None) for f in ds.snapshot.fragments])
    assert ours.to_pylist() == ref.to_pylist()
    assert description_field(field, ds.schema.field("b")).type == ref.type
    rows = np.array([1, 3])
    assert ds.snapshot.fragments[0].blob_descriptions(field, rows).to_pylist() == [ref[1].as_py(), ref[3].as_py()]


def _read_all(files) -> list:
    return [None if f is None else f.read() for f in files]


@pytest.mark.parametrize("storage", ["2.0", "2.1", "stable"])
@pytest.mark.parametrize(
    "request_",
    [
        {"indices": [0, 2, 1, 3, 4, 6]},
        {"indices": pa.array([5, 0, 0])},
        {"addresses": [0, (1 << 32) | 2, 2]},
        {"ids": [(1 << 32) | 2, 0]},  # without stable row ids a row id is its address
    ],
)
def test_take_blobs_matches_pylance(tmp_path: Path, storage: str, request_: dict) -> None:
    uri = str(tmp_path / "b.lance")
    _write(uri, storage)
    ref = lance.dataset(uri).take_blobs("b", **request_)
    ours = _ours(uri).take_blobs("b", **request_)
    assert [f is None for f in ours] == [f is None for f in ref]
    assert [None if f is None else f.size() for f in ours] == [None if f is None else f.size() for f in ref]
    assert _read_all(ours) == _read_all(ref)


def test_take_blobs_skips_deleted_rows(tmp_path: Path) -> None:
    """pylance 14.0.2 fails take_blobs on a dataset with deletions ("must not target deleted
    rows"); ours counts live rows as take does: index 2 is the row after the deleted id 2."""
    uri = str(tmp_path / "b.lance")
    _write(uri, "stable", deletes=True)
    ours = _ours(uri).take_blobs("b", indices=[1, 2, 5])
    assert _read_all(ours) == [None, BLOBS[3], BLOBS[6]]


def test_blob_file_is_lazy_and_seekable(tmp_path: Path) -> None:
    uri = str(tmp_path / "b.lance")
    _write(uri, "stable")
    (blob,) = _ours(uri).take_blobs("b", indices=[4])
    assert isinstance(blob, BlobFile) and isinstance(blob, io.RawIOBase)
    assert blob._reader is None  # nothing read yet
    expected = bytes(range(256)) * 40
    assert blob.read(10) == expected[:10]
    blob.seek(-5, io.SEEK_END)
    assert blob.read() == expected[-5:]
    blob.seek(1000)
    buf = bytearray(7)
    assert blob.readinto(buf) == 7 and bytes(buf) == expected[1000:1007]
    with blob:
        pass
    assert blob.closed
    with pytest.raises(ValueError):
        blob.read()


def test_blob_file_ranges_match_pylance(tmp_path: Path) -> None:
    """``read_range`` / ``read_ranges`` as pylance's: blob-local ranges, the cursor unmoved, a
    range past the end a ``ValueError``."""
    uri = str(tmp_path / "b.lance")
    _write(uri, "stable")
    (ours,) = _ours(uri).take_blobs("b", indices=[4])
    (ref,) = lance.dataset(uri).take_blobs("b", indices=[4])
    ours.read(3)
    ranges = [(0, 5), (1000, 7), (10239, 1), (17, 0)]
    assert ours.read_ranges(ranges) == ref.read_ranges(ranges)
    assert ours.read_range(250, 20) == ref.read_range(250, 20)
    assert ours.tell() == 3
    for bad in ([(10235, 6)], [(0, 3), (20000, 1)]):
        with pytest.raises(ValueError):
            ref.read_ranges(bad)
        with pytest.raises(ValueError, match="exceeds blob size"):
            ours.read_ranges(bad)


def test_blob_column_matches_pylance() -> None:
    column = pa.array([b"ab", None, b""], pa.binary())
    assert [f.read() for f in lance_gpu.BlobColumn(column)] == [f.read() for f in lance.BlobColumn(column)]
    chunked = pa.chunked_array([pa.array([b"x"], pa.large_binary()), pa.array([b"yz"], pa.large_binary())])
    assert [f.read() for f in lance_gpu.BlobColumn(chunked)] == [b"x", b"yz"]
    for bad in (pa.array([1]), [b"a"]):
        with pytest.raises(ValueError):
            lance.BlobColumn(bad)
        with pytest.raises(ValueError, match="Expected a"):
            lance_gpu.BlobColumn(bad)


@pytest.mark.parametrize(
    ("kwargs", "ours_error"),
    [
        ({"indices": [99]}, RowOutOfRangeError),
        ({"addresses": [(7 << 32) | 1]}, RowOutOfRangeError),
        ({"ids": [4]}, RowOutOfRangeError),
        ({}, ValueError),
        ({"indices": [0], "ids": [0]}, ValueError),
    ],
)
def test_take_blobs_bad_arguments(tmp_path: Path, kwargs: dict, ours_error: type) -> None:
    uri = str(tmp_path / "b.lance")
    _write(uri, "stable")
    with pytest.raises(Exception) as ref_info:
        lance.dataset(uri).take_blobs("b", **kwargs)
    with pytest.raises(ours_error) as our_info:
        _ours(uri).take_blobs("b", **kwargs)
    builtin = next(c for c in type(ref_info.value).__mro__ if c.__module__ == "builtins")
    assert isinstance(our_info.value, builtin), (ref_info.value, our_info.value)


def test_take_blobs_of_a_column_that_is_not_a_blob(tmp_path: Path) -> None:
    uri = str(tmp_path / "b.lance")
    _write(uri, "stable")
    with pytest.raises(ValueError, match="not a blob column"):
        lance.dataset(uri).take_blobs("id", indices=[0])
    with pytest.raises(SchemaMismatchError, match="not a blob column"):
        _ours(uri).take_blobs("id", indices=[0])
    # pylance raises RuntimeError for an unknown column; ours is a SchemaMismatchError (ValueError)
    with pytest.raises(RuntimeError):
        lance.dataset(uri).take_blobs("nope", indices=[0])
    with pytest.raises(SchemaMismatchError, match="nope"):
        _ours(uri).take_blobs("nope", indices=[0])


SCANS = {
    "to_table": lambda d: d.to_table(),
    "to_batches": lambda d: pa.Table.from_batches(list(d.to_batches(batch_size=3))),
    "scanner": lambda d: d.scanner(columns=["b", "id"]).to_table(),
    "filter_other_column": lambda d: d.to_table(filter="id >= 2"),
    "filter_late": lambda d: d.to_table(columns=["b"], filter="id % 2 = 0", late_materialization=True),
    "columns_dict": lambda d: d.to_table(columns={"desc": "b", "twice": "id * 2"}),
    "with_row_id": lambda d: d.to_table(columns=["b"], with_row_id=True),
    "take": lambda d: d.take([5, 0, 3]),
    "take_blob_only": lambda d: d.take([4, 1], columns=["b"]),
    "head": lambda d: d.head(2),
    "fragment": lambda d: d.get_fragments()[1].to_table(),
}


@pytest.mark.parametrize("storage", ["2.0", "2.1", "stable"])
@pytest.mark.parametrize("call", list(SCANS))
def test_scans_of_a_dataset_with_a_blob_column(tmp_path: Path, storage: str, call: str) -> None:
    """Scans return the blob column as its descriptors, typed as pylance types them."""
    uri = str(tmp_path / "b.lance")
    _write(uri, storage, deletes=True)
    ref = SCANS[call](lance.dataset(uri))
    ours = SCANS[call](_ours(uri))
    assert ours.schema == ref.schema
    assert ours.to_pylist() == ref.to_pylist()


@pytest.mark.parametrize("storage", ["2.0", "2.1", "stable"])
def test_scanner_schema_of_a_blob_column(tmp_path: Path, storage: str) -> None:
    uri = str(tmp_path / "b.lance")
    _write(uri, storage)
    ref = lance.dataset(uri).scanner()
    ours = _ours(uri).scanner()
    assert ours.projected_schema == ref.projected_schema
    assert ours.projected_schema.field("b").metadata == ref.projected_schema.field("b").metadata
    assert ours.to_reader().schema == ref.to_reader().schema


@pytest.mark.gpu
@pytest.mark.parametrize("storage", ["2.1", "stable"])
def test_gpu_scan_reads_blob_descriptors(tmp_path: Path, storage: str) -> None:
    """The GPU executor hands blob descriptors to the CPU reader; the result is pylance's."""
    uri = str(tmp_path / "b.lance")
    _write(uri, storage, deletes=True)
    ref = lance.dataset(uri).to_table(filter="id > 0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = lance_gpu.dataset(uri, device="gpu").to_table(filter="id > 0")
    assert ours.schema == ref.schema
    assert ours.to_pylist() == ref.to_pylist()


@pytest.mark.parametrize(("logical_type", "metadata", "extension_name", "kind"), [
    ("int64", {}, "", 0),
    ("large_binary", {}, "", 0),
    ("struct", {}, "lance.blob.v2", 2),
    ("struct", {"ARROW:extension:name": b"lance.blob.v2"}, "", 2),
    ("struct", {"ARROW:extension:name": "lance.blob.v2"}, "", 2),
    ("large_binary", {"lance-encoding:blob": b"true"}, "", 1),
    ("binary", {"lance-encoding:blob": "true"}, "", 1),
    ("large_binary", {"lance-encoding:blob": b"false"}, "", 0),
    ("string", {"lance-encoding:blob": b"true"}, "", 0),
    ("large_binary", {"other": b"x"}, "", 0),
    ("large_binary", {"other": b"x"}, "lance.blob.v2", 2),
])
def test_blob_kind_of_fields(logical_type: str, metadata: dict, extension_name: str, kind: int) -> None:
    """Blob v2 by extension name (the field's, or its metadata's), v1 by the blob flag on a
    binary field; any other field, with metadata or without, is no blob."""
    from lance_gpu.table.blob_descriptions import blob_kind
    from lance_gpu.table.schema import LanceField

    field = LanceField(id=0, parent_id=-1, name="b", logical_type=logical_type, metadata=metadata,
                       extension_name=extension_name)
    assert blob_kind(field) == kind
