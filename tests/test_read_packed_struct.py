# SPDX-License-Identifier: Apache-2.0
"""Packed structs (field metadata ``lance-encoding:packed = true``) written by pylance 14.0.2
and read by both: one column under the struct's id, the children's fixed-width values row
by row (:mod:`lance_gpu.file.packed_fields`).  pylance writes them at 2.0 (no struct nulls),
2.1 and 2.2 (struct nulls in the definition levels); it refuses child nulls, booleans and
nested structs inside a packed struct, so those are not read here.  lance-gpu's writer
stores structs unpacked: it drops the flag from a new schema, and refuses to add files to
a dataset whose schema has a packed struct.  The GPU path (a CPU fallback for the column)
is checked in ``tests/gpu/sim_pipeline.py`` (``test_packed_struct_falls_back_to_the_cpu``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402
from lance_gpu.errors import UnsupportedFeatureError  # noqa: E402

PACKED = {"lance-encoding:packed": "true"}
STRUCT = pa.struct([
    pa.field("a", pa.int32()), pa.field("b", pa.float64()), pa.field("c", pa.uint8()),
    pa.field("t", pa.timestamp("us")), pa.field("v", pa.list_(pa.float32(), 2)),
])


def _table(n: int, nulls: bool, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(n + start)
    rows = [
        None if nulls and i % 5 == 2 else
        {"a": int(i), "b": float(rng.normal()), "c": i % 256, "t": i * 1000, "v": [float(i), -float(i)]}
        for i in range(start, start + n)
    ]
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("s", STRUCT, metadata=PACKED)])
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "s": pa.array(rows, STRUCT)}, schema=schema)


def _write(path: Path, version: str, table: pa.Table, **kw: object) -> str:
    uri = str(path / f"p{version}.lance")
    lance.write_dataset(_cast_for(version, table), uri, data_storage_version=version, **kw)
    return uri


def _flat() -> pa.StructType:
    return pa.struct([f for f in STRUCT if not pa.types.is_fixed_size_list(f.type)])


def _cast_for(version: str, table: pa.Table) -> pa.Table:
    """pylance 2.1 packs only flat children (a fixed-size list child needs 2.2 or 2.0)."""
    if version != "2.1":
        return table
    return table.cast(pa.schema([table.schema.field("id"), pa.field("s", _flat(), metadata=PACKED)]))


def _same(ours: pa.Table, ref: pa.Table) -> None:
    assert ours.schema.equals(ref.schema), (ours.schema, ref.schema)
    assert ours.to_pylist() == ref.to_pylist()


CASES = [("2.0", False), ("2.1", True), ("2.2", True)]


@pytest.mark.parametrize(("version", "nulls"), CASES)
def test_reads_equal_pylance(tmp_path: Path, version: str, nulls: bool) -> None:
    """Several fragments (and appended ones): whole scans, batches, filters on a child,
    projections of the struct and of a child, takes and counts."""
    uri = _write(tmp_path, version, _table(40, nulls), max_rows_per_file=15)
    lance.write_dataset(_cast_for(version, _table(7, nulls, start=40)), uri, mode="append")
    ref, ours = lance.dataset(uri), lance_gpu.dataset(uri)
    assert len(ref.get_fragments()) == 4
    _same(ours.to_table(), ref.to_table())
    _same(pa.Table.from_batches(list(ours.to_batches(batch_size=6))), ref.to_table())
    # pylance 14 reads a child of a packed struct alone wrongly (2.0: ``columns=["s.a"]``
    # gives other bytes, and ``count_rows`` and projections without ``s`` filter on them;
    # 2.1: it raises): those are checked against pylance's whole-struct scans instead
    for flt in ("s.a > 3", "s.b < 0 AND id > 10", "s IS NULL", "s.a = 41"):
        want = ref.to_table(filter=flt)
        _same(ours.to_table(filter=flt), want)
        assert ours.count_rows(filter=flt) == want.num_rows
        _same(ours.to_table(columns=["id"], filter=flt), want.select(["id"]))
    _same(ours.to_table(columns=["s"]), ref.to_table(columns=["s"]))
    whole = ref.to_table()
    child = pa.table({"s.a": pa.compute.struct_field(whole["s"], "a"), "id": whole["id"]})
    _same(ours.to_table(columns=["s.a", "id"]), child)
    idx = [0, 3, 14, 15, 16, 29, 30, 44, 46]
    _same(ours.take(idx), ref.take(idx))
    _same(ours.take([44, 2]), ref.take([44, 2]))
    assert ours.count_rows() == ref.count_rows() == 47


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_all_null_and_one_row(tmp_path: Path, version: str) -> None:
    for name, table in (("nulls", _table(5, True).filter(pa.compute.equal(pa.compute.field("id"), 2))),
                        ("one", _table(1, False)),
                        ("allnull", pa.table({"id": pa.array([0, 1, 2], pa.int64()), "s": pa.nulls(3, STRUCT)},
                                             schema=_table(1, False).schema))):
        uri = _write(tmp_path / name, version, table)
        ref, ours = lance.dataset(uri), lance_gpu.dataset(uri)
        _same(ours.to_table(), ref.to_table())
        _same(ours.to_table(filter="s.a >= 0"), ref.to_table(filter="s.a >= 0"))
        _same(ours.take([0]), ref.take([0]))


def test_deletions_and_single_child(tmp_path: Path) -> None:
    one = pa.struct([pa.field("x", pa.int64())])
    schema = pa.schema([pa.field("id", pa.int32()), pa.field("s", one, metadata=PACKED)])
    t = pa.table({"id": pa.array(range(30), pa.int32()), "s": pa.array([{"x": i * 7} for i in range(30)], one)}, schema=schema)
    uri = str(tmp_path / "d.lance")
    lance.write_dataset(t, uri, data_storage_version="2.1", max_rows_per_file=12)
    lance.dataset(uri).delete("id % 4 = 1")
    ref, ours = lance.dataset(uri), lance_gpu.dataset(uri)
    _same(ours.to_table(), ref.to_table())
    _same(ours.to_table(filter="s.x > 50"), ref.to_table(filter="s.x > 50"))
    _same(ours.take([1, 5, 20]), ref.take([1, 5, 20]))


def test_variable_width_children_are_refused_as_unsupported(tmp_path: Path) -> None:
    """2.2 packs structs with a string child as full-zip VariablePackedStruct rows, which
    lance-gpu does not read: an unsupported-encoding error, not a corrupt file."""
    st = pa.struct([pa.field("a", pa.string()), pa.field("b", pa.int32())])
    schema = pa.schema([pa.field("s", st, metadata=PACKED)])
    uri = str(tmp_path / "v.lance")
    lance.write_dataset(pa.table({"s": pa.array([{"a": "x", "b": 1}], st)}, schema=schema), uri, data_storage_version="2.2")
    with pytest.raises(lance_gpu.errors.UnsupportedEncodingError, match="packed struct"):
        lance_gpu.dataset(uri).to_table()


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_our_writer_stores_structs_unpacked(tmp_path: Path, version: str) -> None:
    """lance-gpu writes the struct's leaves (the packed flag dropped): pylance reads them back
    equal; appending to a pylance dataset with a packed struct is refused, not miswritten."""
    table = _cast_for(version, _table(20, True))
    uri = str(tmp_path / "ours.lance")
    lance_gpu.write_dataset(table, uri, data_storage_version=version)
    ref = lance.dataset(uri)
    assert ref.schema.field("s").metadata is None
    assert ref.to_table().to_pylist() == table.to_pylist()
    assert lance_gpu.dataset(uri).to_table().to_pylist() == table.to_pylist()
    packed = _write(tmp_path, version, table)
    with pytest.raises(UnsupportedFeatureError, match="packed struct"):
        lance_gpu.write_dataset(_cast_for(version, _table(3, False, start=50)), packed, mode="append")
    assert lance.dataset(packed).to_table().to_pylist() == table.to_pylist()



def test_full_zip_rows_of_a_sliced_array_keep_their_place() -> None:
    """Full-zip packed rows arrive as ``large_binary`` (perhaps a slice of a larger array):
    the rows and nulls are taken from the slice's own offsets."""
    from lance_gpu.file.packed_fields import _fixed_rows

    rows = pa.array([b"abcd", None, b"efgh", b"ijkl"], pa.large_binary()).slice(1)
    assert _fixed_rows(rows, 4, "x").to_pylist() == [None, b"efgh", b"ijkl"]
    with pytest.raises(lance_gpu.errors.CorruptFileError):
        _fixed_rows(pa.array([b"abc"], pa.large_binary()), 4, "x")
