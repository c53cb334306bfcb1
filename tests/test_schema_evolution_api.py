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
