# SPDX-License-Identifier: Apache-2.0
"""Writing file version 2.0 (``data_storage_version="2.0"``) differentially: the same table
through pylance 14 and lance-gpu gives the same page encodings and buffer sizes, every
column reads back alike on pylance and on our reader, and appends, compaction and updates
keep the dataset at 2.0."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu._proto import encodings_v2_0_pb2 as pb
from lance_gpu.file.container import LanceFileReader

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")

N = 3000


def _table(n: int = N) -> pa.Table:
    rng = np.random.default_rng(0)
    item = pa.struct([("x", pa.int64()), ("y", pa.string())])
    return pa.table({
        "i64": pa.array(rng.integers(-(10**12), 10**12, n)),
        "i32n": pa.array([None if i % 7 == 0 else i for i in range(n)], pa.int32()),
        "u8": pa.array(rng.integers(0, 255, n).astype(np.uint8)),
        "f64": pa.array(rng.standard_normal(n)),
        "f32n": pa.array([None if i % 5 == 0 else float(i) for i in range(n)], pa.float32()),
        "b": pa.array(rng.random(n) < 0.5),
        "bn": pa.array([None if i % 3 == 0 else i % 2 == 0 for i in range(n)]),
        "s": pa.array([f"str{i}" for i in range(n)]),
        "dict": pa.array([None if i % 4 == 0 else f"v{i % 10}" for i in range(n)]),
        "sall": pa.nulls(n, pa.string()),
        "ls": pa.array([f"v{i % 3}" for i in range(n)], pa.large_string()),
        "bin": pa.array([bytes([i % 256]) * (i % 5) for i in range(n)], pa.binary()),
        "lb": pa.array([b"x" if i % 2 else None for i in range(n)], pa.large_binary()),
        "list": pa.array([None if i % 6 == 0 else list(range(i % 4)) for i in range(n)], pa.list_(pa.int32())),
        "llist": pa.array([[[1, 2], [3]], None, [[4]]] * (n // 3), pa.large_list(pa.list_(pa.int64()))),
        "structs": pa.array([[{"x": i, "y": str(i)}] if i % 3 else ([] if i % 2 else None) for i in range(n)],
                            pa.list_(item)),
        "st": pa.array([{"x": i, "y": str(i)} for i in range(n)], item),
        "fsl": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 4).astype(np.float32)), 4),
        "fsln": pa.array([None, [1.0, 2.0], [3.0, None]] * (n // 3), pa.list_(pa.float32(), 2)),
        "nulls": pa.nulls(n, pa.int64()),
        "ts": pa.array(rng.integers(0, 10**15, n)).cast(pa.timestamp("us")),
        "fsb": pa.array([bytes([i % 256]) * 3 for i in range(n)], pa.binary(3)),
        "dec": pa.array([1, None] * (n // 2), pa.decimal128(10, 2)),
        "json": pa.array([None if i % 9 == 0 else f'{{"i":{i}}}' for i in range(n)], pa.json_()),
        "adict": pa.array([f"c{i % 7}" for i in range(n)]).dictionary_encode(),
        "adictn": pa.array([None if i % 5 == 0 else f"c{i % 300}" for i in range(n)]).dictionary_encode(),
    })


def _decoded(tbl: pa.Table) -> pa.Table:
    """Dictionary columns as their values (Arrow cannot sort chunks whose dictionaries hold nulls,
    as 2.0 files' do: a null key is stored as a key to a null item)."""
    return pa.table({n: c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
                     for n, c in zip(tbl.column_names, tbl.columns, strict=True)})


def _pages(uri: str) -> list[tuple]:
    ds = lance.dataset(uri)
    out = []
    for frag in ds.get_fragments():
        for df in frag.data_files():
            reader = LanceFileReader(f"{uri}/data/{df.path}")
            assert reader.version.major == 2 and reader.version.minor == 0
            for c in range(reader.num_columns):
                for page in reader.column(c).pages:
                    enc = pb.ArrayEncoding()
                    enc.ParseFromString(page.encoding.value)
                    out.append((c, page.num_rows, page.buffer_sizes, enc))
    return out


def test_v2_0_pages_as_pylance_writes(tmp_path):
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    tbl = _table()
    lance.write_dataset(tbl, theirs, data_storage_version="2.0", max_rows_per_file=1000)
    lance_gpu.write_dataset(tbl, ours, data_storage_version="2.0", max_rows_per_file=1000)
    A, B = lance.dataset(theirs), lance.dataset(ours)
    assert B.data_storage_version == "2.0"
    assert B.schema == A.schema
    assert _pages(ours) == _pages(theirs)
    assert [(d.fields, d.column_indices, d.file_major_version, d.file_minor_version)
            for f in B.get_fragments() for d in f.data_files()] == \
        [(d.fields, d.column_indices, 2, 0) for f in A.get_fragments() for d in f.data_files()]
    want = A.to_table()
    assert B.to_table().equals(want)
    assert lance_gpu.dataset(ours).to_table().equals(want)
    rows = [0, 999, 1000, 1500, 2999]
    assert B.take(rows).equals(A.take(rows))


def test_v2_0_refuses_what_pylance_refuses(tmp_path):
    nulls = pa.table({"s": pa.array([{"x": 1}, None], pa.struct([("x", pa.int64())]))})
    with pytest.raises(OSError):
        lance.write_dataset(nulls, str(tmp_path / "theirs"), data_storage_version="2.0")
    with pytest.raises(lance_gpu.SchemaMismatchError):
        lance_gpu.write_dataset(nulls, str(tmp_path / "ours"), data_storage_version="2.0")
    assert not (tmp_path / "ours" / "_versions").exists()


def test_v2_0_appends_compaction_and_update_stay_2_0(tmp_path):
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    tbl = _table(300).append_column("id", pa.array(range(300), pa.int64()))
    for uri in (theirs, ours):
        lance.write_dataset(tbl.slice(0, 100), uri, data_storage_version="2.0")
    more = tbl.slice(100)
    lance.write_dataset(more, theirs, mode="append", max_rows_per_file=70)
    lance_gpu.write_dataset(more, ours, mode="append", max_rows_per_file=70)  # ours onto pylance's 2.0
    for uri in (theirs, ours):
        lance.dataset(uri).delete("id % 10 = 3")
    lance.dataset(theirs).optimize.compact_files()
    lance_gpu.dataset(ours).optimize.compact_files()
    lance.dataset(theirs).update({"i64": "i64 + 1"}, where="id > 250")
    lance_gpu.dataset(ours).update({"i64": "i64 + 1"}, where="id > 250")
    A, B = lance.dataset(theirs), lance.dataset(ours)
    assert B.data_storage_version == "2.0"
    assert {(d.file_major_version, d.file_minor_version) for f in B.get_fragments() for d in f.data_files()} == {(2, 0)}
    want = _decoded(A.to_table()).sort_by("id")
    assert _decoded(B.to_table()).sort_by("id").equals(want)
    assert _decoded(lance_gpu.dataset(ours).to_table()).sort_by("id").equals(want)
    lance.write_dataset(more, ours, mode="append")  # pylance appends to ours
    assert lance.dataset(ours).count_rows() == want.num_rows + more.num_rows


def test_v2_0_nested_and_empty_pages(tmp_path):
    inner = pa.struct([("l", pa.list_(pa.int32())), ("f", pa.list_(pa.float64(), 2)), ("s", pa.string())])
    n = 500
    tbl = pa.table({
        "deep": pa.array([[{"l": [i, None], "f": [1.0, 2.0], "s": "a" if i % 2 else None}] * (i % 3) if i % 5 else None
                          for i in range(n)], pa.list_(inner)),
        "empty_lists": pa.array([[] for _ in range(n)], pa.list_(pa.int64())),
        "null_lists": pa.array([None] * n, pa.list_(pa.string())),
        "lfsl": pa.array([[[1, None]] if i % 2 else [] for i in range(n)], pa.list_(pa.list_(pa.int8(), 2))),
        "st_fsl": pa.array([{"v": [i, i], "w": i * 1.5} for i in range(n)],
                           pa.struct([("v", pa.list_(pa.int64(), 2)), ("w", pa.float32())])),
        "dates": pa.array(list(range(n)), pa.int32()).cast(pa.date32()),
        "bools_all_null": pa.nulls(n, pa.bool_()),
    }).slice(7)  # sliced input: offsets into every buffer
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    lance.write_dataset(tbl, theirs, data_storage_version="2.0", max_rows_per_file=200)
    lance_gpu.write_dataset(tbl, ours, data_storage_version="2.0", max_rows_per_file=200)
    assert _pages(ours) == _pages(theirs)
    want = lance.dataset(theirs).to_table()
    assert lance.dataset(ours).to_table().equals(want)
    assert lance_gpu.dataset(ours).to_table().equals(want)
