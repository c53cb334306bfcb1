# SPDX-License-Identifier: Apache-2.0
"""Stable row ids and row version sequences against pylance 14's ``_rowid`` and friends."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from lance_gpu.io import LOCAL, resolve
from lance_gpu._proto import rowids_pb2, table_pb2
from lance_gpu.errors import CorruptFileError
from lance_gpu.table.deletion import read_deletion_file
from lance_gpu.table.manifest import load_manifest
from lance_gpu.table.rowids import (
    decode_row_id_sequence,
    decode_segment,
    decode_version_sequence,
    read_fragment_row_ids,
    read_fragment_versions,
)

lance = pytest.importorskip("lance")


@pytest.fixture(scope="module")
def stable(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uri = tmp_path_factory.mktemp("rowids") / "ds"
    tbl = pa.table({"id": np.arange(3000, dtype=np.int64), "x": np.arange(3000, dtype=np.int64)})
    ds = lance.write_dataset(tbl, str(uri), enable_stable_row_ids=True, max_rows_per_file=1200)
    ds.delete("id % 7 = 3")
    ds.update({"x": "x + 1"}, where="id < 40 OR (id > 1500 AND id % 5 = 0)")
    ds = lance.dataset(str(uri))
    ds.optimize.compact_files(target_rows_per_fragment=1500)  # rewrites ids as range_with_bitmap
    ds.delete("id % 11 = 0")
    lance.write_dataset(pa.table({"id": [9000, 9001], "x": [0, 0]}), str(uri), mode="append")
    return uri


def _live(uri: Path, which: str) -> np.ndarray:
    """Per live row, in scan order: row id, or a version sequence."""
    out = []
    for frag in load_manifest(*resolve(uri)).manifest.fragments:
        if which == "rowid":
            values = read_fragment_row_ids(*resolve(uri), frag)
        else:
            values = read_fragment_versions(*resolve(uri), frag, which)
        assert values is not None and len(values) == frag.physical_rows
        if frag.HasField("deletion_file"):
            keep = np.ones(frag.physical_rows, dtype=bool)
            keep[read_deletion_file(*resolve(uri), frag.id, frag.deletion_file)] = False
            values = values[keep]
        out.append(values)
    return np.concatenate(out)


def test_row_ids_match_pylance(stable: Path) -> None:
    mf = load_manifest(*resolve(stable))
    assert mf.manifest.reader_feature_flags & 2
    ref = lance.dataset(str(stable)).to_table(columns=["id"], with_row_id=True)
    np.testing.assert_array_equal(_live(stable, "rowid"), ref.column("_rowid").to_numpy())
    # compaction left non-contiguous ids; the append added a plain range
    kinds = {
        s.WhichOneof("segment")
        for f in mf.manifest.fragments
        for s in rowids_pb2.RowIdSequence.FromString(f.inline_row_ids).segments
    }
    assert {"range", "range_with_bitmap"} <= kinds, kinds


@pytest.mark.parametrize("which", ["created_at", "last_updated_at"])
def test_versions_match_pylance(stable: Path, which: str) -> None:
    col = f"_row_{which}_version"
    ref = lance.dataset(str(stable)).to_table(columns=["id", col])
    np.testing.assert_array_equal(_live(stable, which), ref.column(col).to_numpy())


def _u64(values: list[int]) -> bytes:
    return np.asarray(values, dtype="<u8").tobytes()


def test_every_segment_kind() -> None:
    enc = rowids_pb2.EncodedU64Array
    seg = rowids_pb2.U64Segment
    holes = enc(u16_array=enc.U16Array(base=100, offsets=np.array([1, 3], "<u2").tobytes()))
    seq = rowids_pb2.RowIdSequence(segments=[
        seg(range=seg.Range(start=5, end=8)),
        seg(range_with_holes=seg.RangeWithHoles(start=100, end=105, holes=holes)),
        seg(range_with_bitmap=seg.RangeWithBitmap(start=200, end=210, bitmap=b"\x7f\x03")),
        seg(sorted_array=enc(u32_array=enc.U32Array(base=1 << 40, offsets=np.array([0, 7, 70000], "<u4").tobytes()))),
        seg(array=enc(u64_array=enc.U64Array(values=_u64([2**64 - 1, 3, 0])))),
        seg(array=enc(u16_array=enc.U16Array(base=0, offsets=np.array([9, 1], "<u2").tobytes()))),
    ])
    got = decode_row_id_sequence(seq.SerializeToString())
    expect = [5, 6, 7, 100, 102, 104, *range(200, 207), 208, 209,
              1 << 40, (1 << 40) + 7, (1 << 40) + 70000, 2**64 - 1, 3, 0, 9, 1]
    assert got.dtype == np.uint64
    assert got.tolist() == expect
    assert decode_row_id_sequence(b"").tolist() == []


def test_version_sequence() -> None:
    seg = rowids_pb2.U64Segment
    seq = rowids_pb2.RowDatasetVersionSequence(runs=[
        rowids_pb2.RowDatasetVersionRun(span=seg(range=seg.Range(start=0, end=3)), version=1),
        rowids_pb2.RowDatasetVersionRun(span=seg(range=seg.Range(start=3, end=5)), version=4),
    ])
    assert decode_version_sequence(seq.SerializeToString()).tolist() == [1, 1, 1, 4, 4]
    assert decode_version_sequence(seq.SerializeToString(), 5).tolist() == [1, 1, 1, 4, 4]
    with pytest.raises(CorruptFileError, match="cover 5 rows"):
        decode_version_sequence(seq.SerializeToString(), 4)
    # runs are positional: only each span's length counts (as after a compaction)
    copied = rowids_pb2.RowDatasetVersionSequence(runs=[
        rowids_pb2.RowDatasetVersionRun(
            span=seg(range_with_bitmap=seg.RangeWithBitmap(start=4, end=12, bitmap=b"\xbf")), version=1),
        rowids_pb2.RowDatasetVersionRun(span=seg(range=seg.Range(start=2, end=4)), version=3),
    ])
    assert decode_version_sequence(copied.SerializeToString()).tolist() == [1] * 7 + [3, 3]


def test_external_row_ids(tmp_path: Path) -> None:
    seg = rowids_pb2.U64Segment
    payload = rowids_pb2.RowIdSequence(segments=[seg(range=seg.Range(start=10, end=15))]).SerializeToString()
    (tmp_path / "_rowids").mkdir()
    (tmp_path / "_rowids" / "x.bin").write_bytes(b"pad" + payload + b"tail")
    frag = table_pb2.DataFragment(id=3, physical_rows=5)
    frag.external_row_ids.CopyFrom(table_pb2.ExternalFile(path="_rowids/x.bin", offset=3, size=len(payload)))
    assert read_fragment_row_ids(*resolve(tmp_path), frag).tolist() == [10, 11, 12, 13, 14]
    frag.external_row_ids.size = 10_000
    with pytest.raises(CorruptFileError, match="past the end"):
        read_fragment_row_ids(*resolve(tmp_path), frag)
    frag.external_row_ids.path = "_rowids/missing.bin"
    with pytest.raises(CorruptFileError, match="missing.bin"):
        read_fragment_row_ids(*resolve(tmp_path), frag)
    assert read_fragment_row_ids(*resolve(tmp_path), table_pb2.DataFragment(id=1)) is None


def test_corrupt_sequences() -> None:
    seg = rowids_pb2.U64Segment
    enc = rowids_pb2.EncodedU64Array
    bad = [
        seg(range=seg.Range(start=9, end=3)),
        seg(range_with_bitmap=seg.RangeWithBitmap(start=0, end=20, bitmap=b"\xff")),
        seg(array=enc(u32_array=enc.U32Array(base=0, offsets=b"\x01\x02\x03"))),
        seg(sorted_array=enc(u64_array=enc.U64Array(values=_u64([5, 4])))),
        seg(range_with_holes=seg.RangeWithHoles(start=0, end=4, holes=enc(u64_array=enc.U64Array(values=_u64([9]))))),
        seg(),
    ]
    for s in bad:
        with pytest.raises(CorruptFileError, match="frag.bin"):
            decode_segment(s, "frag.bin")
    with pytest.raises(CorruptFileError, match="frag.bin"):
        decode_row_id_sequence(b"\xff\xff\xff", "frag.bin")
    frag = table_pb2.DataFragment(id=0, physical_rows=4)
    frag.inline_row_ids = rowids_pb2.RowIdSequence(segments=[seg(range=seg.Range(start=0, end=3))]).SerializeToString()
    with pytest.raises(CorruptFileError, match="3 row ids for 4"):
        read_fragment_row_ids(*resolve("ds"), frag)


def test_large_sequence_is_vectorised() -> None:
    seg = rowids_pb2.U64Segment
    n = 2_000_000
    bitmap = np.packbits(np.arange(n) % 3 != 0, bitorder="little").tobytes()
    seq = rowids_pb2.RowIdSequence(segments=[seg(range_with_bitmap=seg.RangeWithBitmap(start=7, end=7 + n, bitmap=bitmap))])
    got = decode_row_id_sequence(seq.SerializeToString())
    assert len(got) == n - (n + 2) // 3 and got[0] == 8 and got[-1] == 7 + n - 1
