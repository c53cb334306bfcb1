# SPDX-License-Identifier: Apache-2.0
"""Every input kind ``write_dataset`` takes, cast to the given schema as pylance casts it:
the same call on pylance and lance-gpu, pylance reading back what we wrote."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pds
import pytest

import lance_gpu
from lance_gpu.errors import SchemaMismatchError

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")

SCHEMA = pa.schema([("a", pa.int64()), ("s", pa.string()), ("f", pa.float32())])


def _batch(start: int, n: int = 5) -> pa.RecordBatch:
    ids = np.arange(start, start + n)
    return pa.record_batch(
        [pa.array(ids, pa.int32()), pa.array([f"v{i}" for i in ids]), pa.array(ids / 2, pa.float64())],
        names=["a", "s", "f"],
    )


def _both(tmp_path, data_factory, schema=SCHEMA):
    ours = lance_gpu.write_dataset(data_factory(), str(tmp_path / "ours"), schema=schema)
    ref = lance.write_dataset(data_factory(), str(tmp_path / "ref"), schema=schema)
    back = lance.dataset(str(tmp_path / "ours"))
    assert back.schema == ref.schema == ours.schema
    assert back.to_table() == ref.to_table() == ours.to_table()
    return back


def test_iterator_of_castable_batches_is_cast(tmp_path):
    """The defect: int32 / float64 batches under an int64 / float32 schema were written as
    int32 / float64 pages that neither library could read."""
    back = _both(tmp_path, lambda: iter([_batch(0), _batch(5)]))
    assert back.schema.field("a").type == pa.int64()
    assert back.to_table().column("a").to_pylist() == list(range(10))


def test_list_of_castable_batches_is_cast(tmp_path):
    _both(tmp_path, lambda: [_batch(0), _batch(5)])


def test_reader_and_table_inputs_are_cast(tmp_path):
    tbl = pa.Table.from_batches([_batch(0), _batch(5)])
    ours = lance_gpu.write_dataset(tbl, str(tmp_path / "t"), schema=SCHEMA)
    assert lance.dataset(str(tmp_path / "t")).schema == SCHEMA
    reader = pa.RecordBatchReader.from_batches(tbl.schema, tbl.to_batches())
    lance_gpu.write_dataset(reader, str(tmp_path / "r"), schema=SCHEMA)
    assert lance.dataset(str(tmp_path / "r")).to_table() == ours.to_table()


@pytest.mark.parametrize(
    "bad",
    [
        pa.record_batch([pa.array(["q", "r"]), pa.array(["x", "y"]), pa.array([1.0, 2.0])], names=["a", "s", "f"]),
        pa.record_batch(
            [pa.array([{"x": 1}, {"x": 2}]), pa.array(["x", "y"]), pa.array([1.0, 2.0])], names=["a", "s", "f"]
        ),
        pa.record_batch([pa.array([1, 2]), pa.array(["x", "y"])], names=["a", "s"]),
    ],
    ids=["unparsable", "no-cast-kernel", "missing-column"],
)
def test_impossible_cast_refused_before_writing(tmp_path, bad):
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    with pytest.raises((OSError, ValueError)):  # pylance: OSError (LanceError) or ValueError
        lance.write_dataset(iter([bad]), ref, schema=SCHEMA)
    with pytest.raises(SchemaMismatchError):
        lance_gpu.write_dataset(iter([bad]), ours, schema=SCHEMA)
    assert not os.path.exists(ref) and not os.path.exists(ours)


def test_bad_later_batch_leaves_nothing(tmp_path):
    """A batch that cannot be cast after files were written: the write fails typed and no
    data file or version is left behind."""
    bad = pa.record_batch([pa.array(["q"]), pa.array(["x"]), pa.array([1.0])], names=["a", "s", "f"])
    uri = tmp_path / "ours"
    with pytest.raises(SchemaMismatchError):
        lance_gpu.write_dataset(iter([_batch(0), bad]), str(uri), schema=SCHEMA, max_rows_per_file=2)
    assert not list((uri / "data").glob("*.lance")) if (uri / "data").exists() else True
    assert not (uri / "_versions").exists() or not list((uri / "_versions").glob("*.manifest"))


@pytest.mark.parametrize(
    "kind",
    ["dict", "pylist", "pandas", "polars", "record_batch", "pa_dataset", "pylance_dataset", "ours_dataset",
     "c_stream", "scanner"],
)
def test_input_kinds(tmp_path, kind):
    tbl = pa.Table.from_batches([_batch(0), _batch(5)]).cast(SCHEMA)
    src = str(tmp_path / "src")
    lance.write_dataset(tbl, src)
    pq_dir = tmp_path / "pq"
    pq_dir.mkdir()
    import pyarrow.parquet as pq

    pq.write_table(tbl, pq_dir / "x.parquet")

    class CStream:
        def __arrow_c_stream__(self, requested_schema=None):
            return tbl.__arrow_c_stream__(requested_schema)

    def make():
        if kind == "dict":
            return tbl.to_pydict()
        if kind == "pylist":
            return tbl.to_pylist()
        if kind == "pandas":
            return tbl.to_pandas()
        if kind == "polars":
            pl = pytest.importorskip("polars")
            return pl.from_arrow(tbl)
        if kind == "record_batch":
            return tbl.combine_chunks().to_batches()[0]
        if kind == "pa_dataset":
            return pds.dataset(pq_dir)
        if kind == "scanner":
            return pds.dataset(pq_dir).scanner()
        if kind == "pylance_dataset":
            return lance.dataset(src)
        if kind == "ours_dataset":
            return lance_gpu.dataset(src)
        return CStream()

    ours = lance_gpu.write_dataset(make(), str(tmp_path / "ours"), schema=SCHEMA)
    back = lance.dataset(str(tmp_path / "ours"))
    assert back.schema == SCHEMA
    assert back.to_table().sort_by("a") == tbl
    assert ours.count_rows() == 10


def test_write_options_like_pylance(tmp_path):
    tbl = pa.Table.from_batches([_batch(0), _batch(5)]).cast(SCHEMA)
    opts = dict(
        enable_stable_row_ids=True,
        enable_v2_manifest_paths=False,
        auto_cleanup_options={"interval": 5, "older_than_seconds": 100},
        commit_message="hello",
        transaction_properties={"p": "q"},
        max_rows_per_group=128,
        storage_options={},
        max_rows_per_file=4,
    )
    ours = lance_gpu.write_dataset(tbl, str(tmp_path / "ours"), **opts)
    ref = lance.write_dataset(tbl, str(tmp_path / "ref"), **opts)
    back = lance.dataset(str(tmp_path / "ours"))
    assert back.config() == ref.config() == ours.config()
    assert back.read_transaction(1).transaction_properties == ref.read_transaction(1).transaction_properties
    assert sorted(os.listdir(tmp_path / "ours" / "_versions")) == sorted(os.listdir(tmp_path / "ref" / "_versions"))
    assert back.to_table(with_row_id=True) == ref.to_table(with_row_id=True)
    assert [f.count_rows() for f in back.get_fragments()] == [f.count_rows() for f in ref.get_fragments()]
    more = pa.Table.from_batches([_batch(10)]).cast(SCHEMA)
    lance_gpu.write_dataset(more, str(tmp_path / "ours"), mode="append")
    lance.write_dataset(more, str(tmp_path / "ref"), mode="append")
    assert lance.dataset(str(tmp_path / "ours")).to_table(with_row_id=True) == lance.dataset(str(tmp_path / "ref")).to_table(with_row_id=True)


def test_progress_and_data_storage_version(tmp_path):
    seen = []

    class Progress:
        def begin(self, fragment):
            seen.append(("begin", fragment.physical_rows))

        def complete(self, fragment):
            seen.append(("complete", fragment.physical_rows))

    tbl = pa.Table.from_batches([_batch(0), _batch(5)]).cast(SCHEMA)
    lance_gpu.write_dataset(tbl, str(tmp_path / "a"), progress=Progress(), max_rows_per_file=6, data_storage_version="2.1")
    # as pylance: begin before the file is written (rows unknown), complete once it is
    assert seen == [("begin", None), ("complete", 6), ("begin", None), ("complete", 4)]
    assert lance.dataset(str(tmp_path / "a")).data_storage_version == "2.1"


def test_non_utf8_metadata_refused(tmp_path):
    bad = pa.table({"a": [1]}).replace_schema_metadata({b"k": b"\xff\xfe"})
    with pytest.raises(ValueError, match="utf8"):
        lance.write_dataset(bad, str(tmp_path / "ref"))
    with pytest.raises(SchemaMismatchError, match="utf8"):
        lance_gpu.write_dataset(bad, str(tmp_path / "ours"))
    assert not os.path.exists(tmp_path / "ours")
