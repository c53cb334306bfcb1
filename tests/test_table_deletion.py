# SPDX-License-Identifier: Apache-2.0
"""Deletion files (.arrow and .bin) against the rows pylance 14 still returns."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_gpu.io import LOCAL, resolve
from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError
from lance_gpu.table.deletion import deletion_file_path, read_deletion_file
from lance_gpu.table.manifest import load_manifest

lance = pytest.importorskip("lance")

ROWS = 6000


@pytest.fixture(scope="module")
def deleted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two fragments: fragment 0 loses ~860 rows (.arrow), fragment 1 loses 5400 (.bin)."""
    uri = tmp_path_factory.mktemp("del") / "ds"
    ids = np.arange(2 * ROWS, dtype=np.int64)
    ds = lance.write_dataset(pa.table({"id": ids}), str(uri), max_rows_per_file=ROWS)
    ds.delete(f"(id < {ROWS} AND id % 7 = 0) OR (id >= {ROWS} AND id % 10 <> 0)")
    return uri


def _live_addresses(uri: Path) -> np.ndarray:
    mf = load_manifest(*resolve(uri))
    out = []
    for frag in mf.manifest.fragments:
        offsets = np.arange(frag.physical_rows, dtype=np.uint64)
        if frag.HasField("deletion_file"):
            gone = read_deletion_file(*resolve(uri), frag.id, frag.deletion_file)
            offsets = np.setdiff1d(offsets, gone.astype(np.uint64), assume_unique=True)
        out.append((np.uint64(frag.id) << np.uint64(32)) | offsets)
    return np.concatenate(out)


def test_both_kinds_written(deleted: Path) -> None:
    frags = load_manifest(*resolve(deleted)).manifest.fragments
    kinds = [f.deletion_file.file_type for f in frags]
    assert kinds == [table_pb2.DeletionFile.ARROW_ARRAY, table_pb2.DeletionFile.BITMAP]
    for f in frags:
        path = Path(deletion_file_path(*resolve(deleted), f.id, f.deletion_file))
        assert path.exists() and path.suffix == (".arrow" if f.id == 0 else ".bin")


def test_deleted_rows_match_pylance(deleted: Path) -> None:
    mf = load_manifest(*resolve(deleted))
    for frag in mf.manifest.fragments:
        rows = read_deletion_file(*resolve(deleted), frag.id, frag.deletion_file)
        assert rows.dtype == np.uint32
        assert np.all(np.diff(rows.astype(np.int64)) > 0)  # sorted, unique
        assert len(rows) == frag.deletion_file.num_deleted_rows
    ref = lance.dataset(str(deleted)).to_table(with_row_id=True)
    np.testing.assert_array_equal(_live_addresses(deleted), ref.column("_rowid").to_numpy())


def test_expected_offsets(deleted: Path) -> None:
    f0, f1 = load_manifest(*resolve(deleted)).manifest.fragments
    np.testing.assert_array_equal(read_deletion_file(*resolve(deleted), 0, f0.deletion_file), np.arange(0, ROWS, 7))
    expect = np.array([i for i in range(ROWS) if (i + ROWS) % 10 != 0], dtype=np.uint32)
    np.testing.assert_array_equal(read_deletion_file(*resolve(deleted), 1, f1.deletion_file), expect)


def test_second_delete_replaces_file(tmp_path: Path) -> None:
    uri = tmp_path / "twice"
    ds = lance.write_dataset(pa.table({"id": np.arange(100)}), str(uri))
    ds.delete("id < 10")
    ds.delete("id >= 90")
    (frag,) = load_manifest(*resolve(uri)).manifest.fragments
    rows = read_deletion_file(*resolve(uri), frag.id, frag.deletion_file)
    np.testing.assert_array_equal(rows, np.r_[0:10, 90:100])


@pytest.mark.parametrize("frag_index", [0, 1], ids=["arrow", "bin"])
@pytest.mark.parametrize("damage", ["truncate", "garbage", "missing"])
def test_corrupt_deletion_files(deleted: Path, tmp_path: Path, frag_index: int, damage: str) -> None:
    uri = tmp_path / "ds"
    shutil.copytree(deleted, uri)
    frag = load_manifest(*resolve(uri)).manifest.fragments[frag_index]
    path = Path(deletion_file_path(*resolve(uri), frag.id, frag.deletion_file))
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x00garbage!" * 7)
    else:
        path.unlink()
    with pytest.raises(CorruptFileError) as info:
        read_deletion_file(*resolve(uri), frag.id, frag.deletion_file)
    assert str(path) in str(info.value)


def test_count_mismatch(deleted: Path) -> None:
    frag = load_manifest(*resolve(deleted)).manifest.fragments[0]
    wrong = table_pb2.DeletionFile()
    wrong.CopyFrom(frag.deletion_file)
    wrong.num_deleted_rows += 1
    with pytest.raises(CorruptFileError, match="manifest says"):
        read_deletion_file(*resolve(deleted), frag.id, wrong)
