# SPDX-License-Identifier: Apache-2.0
"""Schema evolution details of pylance 14.0.2 (issue 26): ``add_columns`` of
``CAST(NULL AS type)`` is metadata only; a batch UDF whose output columns change between
batches fails with pylance's message, at dataset and fragment level."""

from __future__ import annotations

import shutil
import uuid

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402


@pytest.fixture
def uris(tmp_path) -> tuple[str, str]:
    ref = str(tmp_path / "ref.lance")
    lance.write_dataset(pa.table({"a": range(100)}), ref, max_rows_per_file=25)
    ours = str(tmp_path / "ours.lance")
    shutil.copytree(ref, ours)
    return ref, ours


def test_add_null_cast_columns_is_metadata_only(uris) -> None:
    ref_uri, our_uri = uris
    exprs = {"b": "CAST(NULL AS INT)", "c": "cast(null as decimal(10, 2))", "d": "CAST(NULL AS STRING)"}
    lance.dataset(ref_uri).add_columns(exprs)
    before = [f.data_files() for f in lance_gpu.dataset(our_uri).get_fragments()]
    lance_gpu.dataset(our_uri).add_columns(exprs)
    after = lance_gpu.dataset(our_uri).get_fragments()
    assert [f.data_files() for f in after] == before  # no data file written
    assert lance_gpu.dataset(our_uri).schema == lance.dataset(ref_uri).schema
    assert lance.dataset(our_uri).to_table() == lance.dataset(ref_uri).to_table()


@pytest.mark.parametrize("use_fragments", [False, True])
def test_udf_changing_its_columns_fails_as_pylance(uris, use_fragments: bool) -> None:
    for mod, uri in zip((lance, lance_gpu), uris, strict=True):
        @mod.batch_udf()
        def make_new_col(batch):
            return pa.record_batch([batch["a"]], [str(uuid.uuid4())])

        ds = mod.dataset(uri)
        with pytest.raises(Exception, match="Output schema of function does not match the expected schema"):
            if use_fragments:
                ds.get_fragments()[0].merge_columns(make_new_col)
            else:
                ds.add_columns(make_new_col)


@pytest.mark.parametrize(("old", "new", "values"), [
    (pa.int32(), pa.float64(), [1]), (pa.int32(), pa.int64(), [1]), (pa.float64(), pa.float16(), [1.0]),
    (pa.string(), pa.large_string(), ["a"]), (pa.string(), pa.binary(), ["a"]), (pa.binary(), pa.large_binary(), [b"a"]),
    (pa.list_(pa.int32()), pa.large_list(pa.int64()), [[1]]), (pa.list_(pa.float32(), 2), pa.list_(pa.float16(), 2), [[1.0, 2.0]]),
    (pa.int32(), pa.bool_(), [1]), (pa.bool_(), pa.int8(), [True]), (pa.date32(), pa.date64(), [1]),
    (pa.decimal128(5, 2), pa.decimal128(7, 2), [1]), (pa.int32(), pa.string(), [1]),
])
def test_alter_columns_type_changes_as_pylance(tmp_path, old, new, values) -> None:
    """``alter_columns(data_type=)`` converts what pylance converts (same results) and
    refuses the rest with pylance's ``OSError`` 'Cannot cast column "x" from A to B'."""
    outcomes = []
    for mod in (lance, lance_gpu):
        uri = str(tmp_path / mod.__name__)
        ds = mod.write_dataset(pa.table({"x": pa.array(values, old)}), uri)
        try:
            ds.alter_columns({"path": "x", "data_type": new})
            outcomes.append(lance.dataset(uri).to_table())
        except OSError as exc:
            outcomes.append(str(exc).split("Cannot cast column ")[1].split(",")[0])
    assert outcomes[0] == outcomes[1]
