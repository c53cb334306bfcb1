# SPDX-License-Identifier: Apache-2.0
"""Writing JSON columns and the other Arrow extension types (fixed_shape_tensor,
lance.bfloat16, arrow.uuid), differentially: the same write through pylance 14 and through
lance-gpu, then pylance (and our reader) read both back; JSON documents are compared byte for
byte (pylance's JSONB) through pylance's own file reader."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.errors import InvalidJsonError, SchemaMismatchError

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")

JSON_TEXTS = [
    '{"b":1,"a":[1,2.5]}', None, '"x"', "0", "-0", "-1", "-128", "-129", "255", "256", "65536", "-32769",
    "4294967296", "18446744073709551615", "-9223372036854775808", "9223372036854775808",
    "12345678901234567890123", "-12345678901234567890", "1.0", "1E2", "1e20", "3.14", "-0.0", "1.5e300",
    "5e-324", "true", "false", "null", "[]", "{}", '{"a":{"c":null,"b":"\\u00e9"}}', "[1,[2,[3]]]",
    '{"aa":1,"b":2,"B":3,"\\u00e9":4,"a":5,"":6}', '"\\ud83d\\ude00"', '"a\\"b\\n\\u0001"', '"\t"',
    "", "  ", "NaN", "Infinity", "-1e400", "  [1 , 2 ]  ",
]


def _json_table(texts: list[str | None], start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + len(texts)), pa.int64()),
                     "j": pa.array(texts, type=pa.json_())})


def _stored(uri: str) -> list[pa.Table]:
    """Each data file of ``uri`` as stored (JSON columns as their JSONB bytes), pylance's reader."""
    from lance.file import LanceFileReader

    files = sorted(glob.glob(os.path.join(uri, "data", "*.lance")), key=os.path.getmtime)
    return [LanceFileReader(f).read_all().to_table() for f in files]


def test_json_bytes_and_schema_as_pylance_writes(tmp_path):
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    tbl = _json_table(JSON_TEXTS)
    lance.write_dataset(tbl, theirs)
    lance_gpu.write_dataset(tbl, ours)
    [a], [b] = _stored(theirs), _stored(ours)
    assert a.schema.equals(b.schema, check_metadata=True)
    assert b.schema.field("j").metadata == {b"ARROW:extension:name": b"lance.json", b"ARROW:extension:metadata": b""}
    assert a["j"].to_pylist() == b["j"].to_pylist()  # the JSONB documents, byte for byte
    A, B = lance.dataset(theirs), lance.dataset(ours)
    assert B.schema == A.schema and B.schema.field("j").type == pa.json_()
    assert B.to_table().equals(A.to_table())
    assert lance_gpu.dataset(ours).to_table().equals(A.to_table())
    # pylance's JSON functions work on what we wrote
    where = "json_get_int(j, 'aa') = 1"
    assert B.to_table(filter=where).to_pylist() == A.to_table(filter=where).to_pylist() != []


def test_json_appends_compaction_and_update(tmp_path):
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    first = _json_table(['{"k":NaN}', "[1e400]", '{"a":[1,2]}', None, '"s"'])
    lance.write_dataset(first, theirs, max_rows_per_file=2)
    lance.write_dataset(first, ours, max_rows_per_file=2)
    more = _json_table(['{"z":[true]}', None], start=10).select(["j", "id"])  # columns reordered
    lance.write_dataset(more, theirs, mode="append")
    lance_gpu.write_dataset(more, ours, mode="append")  # ours onto pylance's JSON dataset
    lance.dataset(theirs).optimize.compact_files()
    lance_gpu.dataset(ours).optimize.compact_files()
    assert len(lance.dataset(ours).get_fragments()) == 1
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    lance.dataset(theirs).update({"id": "id + 100"}, where="id > 2")
    lance_gpu.dataset(ours).update({"id": "id + 100"}, where="id > 2")
    src = _json_table(['{"new":1}', "[2]"], start=0).set_column(0, "id", pa.array([0, 99], pa.int64()))
    for ds in (lance.dataset(theirs), lance_gpu.dataset(ours)):
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    want = lance.dataset(theirs).to_table().sort_by("id")
    assert lance.dataset(ours).to_table().sort_by("id").equals(want)
    assert lance_gpu.dataset(ours).to_table().sort_by("id").equals(want)
    # pylance appends to ours
    lance.write_dataset(more, ours, mode="append")
    assert lance.dataset(ours).count_rows() == want.num_rows + 2


@pytest.mark.parametrize("text", ["{bad", '{"a":1,"a":2}', "[1]x"])
def test_invalid_json_refused_as_pylance_refuses(tmp_path, text):
    tbl = _json_table([text])
    with pytest.raises(OSError):
        lance.write_dataset(tbl, str(tmp_path / "theirs"))
    uri = str(tmp_path / "ours")
    lance_gpu.write_dataset(_json_table(['{"ok":1}']), uri)
    with pytest.raises(InvalidJsonError) as info:
        lance_gpu.write_dataset(tbl, uri, mode="append")
    assert isinstance(info.value, OSError)
    assert lance.dataset(uri).count_rows() == 1 and len(os.listdir(os.path.join(uri, "data"))) == 1


def test_json_column_takes_only_json(tmp_path):
    uri = str(tmp_path / "ours")
    lance_gpu.write_dataset(_json_table(['{"ok":1}']), uri)
    raw = pa.table({"id": pa.array([1], pa.int64()), "j": pa.array([b"xx"], pa.large_binary())})
    with pytest.raises(OSError):
        lance.write_dataset(raw, uri, mode="append")
    with pytest.raises(SchemaMismatchError):
        lance_gpu.write_dataset(raw, uri, mode="append")


def _extension_table(n: int) -> pa.Table:
    from lance.arrow import BFloat16Type  # registers lance.bfloat16

    rng = np.random.default_rng(0)
    tensor_type = pa.fixed_shape_tensor(pa.float32(), (2, 3))
    tensors = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 6).astype(np.float32)), 6)
    bf16 = pa.ExtensionArray.from_storage(BFloat16Type(), pa.array([rng.bytes(2) for _ in range(n)], pa.binary(2)))
    uuids = pa.array([rng.bytes(16) if i % 7 else None for i in range(n)], pa.binary(16))
    return pa.table({
        "tensor": pa.ExtensionArray.from_storage(tensor_type, tensors),
        "bf16": bf16,
        "uuid": pa.ExtensionArray.from_storage(pa.uuid(), uuids),
        "json": pa.array([None if i % 5 == 0 else f'{{"i":{i},"v":[{i}.5]}}' for i in range(n)], pa.json_()),
    })


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_extension_types_round_trip(tmp_path, version):
    tbl = _extension_table(3000)
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    lance.write_dataset(tbl, theirs, data_storage_version=version)
    lance_gpu.write_dataset(tbl, ours, data_storage_version=version, max_rows_per_file=1000)
    A, B = lance.dataset(theirs), lance.dataset(ours)
    assert B.schema == A.schema
    assert B.to_table().equals(A.to_table())
    assert lance_gpu.dataset(ours).to_table().equals(A.to_table())
    assert B.take([0, 999, 1000, 2999]).equals(A.take([0, 999, 1000, 2999]))


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_add_json_column(tmp_path, version):
    def udf(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch({"j": pa.array([f'{{"v":[{x}]}}' for x in batch["id"].to_pylist()], pa.json_())})

    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    for uri in (theirs, ours):
        lance.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri, data_storage_version=version)
    lance.dataset(theirs).add_columns(udf)
    lance_gpu.dataset(ours).add_columns(udf)
    want = lance.dataset(theirs).to_table()
    assert lance.dataset(ours).to_table().equals(want)
    assert lance_gpu.dataset(ours).to_table().equals(want)
    assert [t["j"].to_pylist() for t in _stored(ours) if "j" in t.column_names] == \
        [t["j"].to_pylist() for t in _stored(theirs) if "j" in t.column_names]
