# SPDX-License-Identifier: Apache-2.0
"""Edge types read from pylance-written datasets: fixed-size lists of booleans whose
dimension is not a whole number of bytes, across chunk boundaries, with take."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu

lance = pytest.importorskip("lance")


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
@pytest.mark.parametrize("dim", [1, 3, 8, 13])
def test_fixed_size_list_of_bools(tmp_path, version: str, dim: int) -> None:
    rng = np.random.default_rng(dim)
    n = 5000
    bits = pa.array(rng.random(n * dim) < 0.5)
    fsl = pa.FixedSizeListArray.from_arrays(bits, dim)
    mask = pa.array(rng.random(n) < 0.1)
    nullable = pa.FixedSizeListArray.from_arrays(bits, dim, mask=mask)
    table = pa.table({"id": np.arange(n), "fsl": fsl, "nfsl": nullable})
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=2000)
    ours = lance_gpu.dataset(uri)
    ref = lance.dataset(uri)
    assert ours.to_table().equals(ref.to_table())
    idx = [0, 1, 1023, 1024, 2047, 2048, 4999, 3]
    assert ours.take(idx).equals(ref.take(idx))
    got = pa.Table.from_batches(list(ours.to_batches(batch_size=700)))
    assert got.equals(ref.to_table())


def _items(table: pa.Table, name: str) -> pa.Array:
    """The items of a fixed-size-list column, those of its null rows included (what
    ``Table.equals`` does not look at)."""
    return table.column(name).combine_chunks().values


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_items_of_null_fixed_size_lists_are_null_as_in_pylance(tmp_path, version: str) -> None:
    """A fragment, a file or a page whose fixed-size lists are all null (an all-null page)
    reads with null items, as pylance reads it; beside fragments with values, nested, and
    through take and to_batches."""
    emb = pa.list_(pa.float32(), 2)
    nested = pa.list_(pa.list_(pa.int16(), 2), 3)
    tables = [
        pa.table({"id": [0, 1, 2], "emb": pa.array([[1.0, 2.0], None, [3.0, 4.0]], emb),
                  "nest": pa.array([None, [[1, 2], [3, 4], [5, 6]], None], nested)}),
        pa.table({"id": [3], "emb": pa.array([None], emb), "nest": pa.array([None], nested)}),
        pa.table({"id": [4, 5], "emb": pa.array([None, None], emb), "nest": pa.array([None, None], nested)}),
    ]
    uri = str(tmp_path / "ds.lance")
    for k, table in enumerate(tables):
        lance.write_dataset(table, uri, mode="create" if k == 0 else "append", data_storage_version=version)
    ours, ref = lance_gpu.dataset(uri), lance.dataset(uri)
    got, want = ours.to_table(), ref.to_table()
    assert got.equals(want)
    for name in ("emb", "nest"):
        assert _items(got, name).equals(_items(want, name)), (name, _items(got, name), _items(want, name))
    assert _items(got, "emb").null_count == 8  # the items of four null rows
    rows = [3, 1, 5]
    for name in ("emb", "nest"):
        assert _items(ours.take(rows), name).equals(_items(ref.take(rows), name)), name
    batches = pa.Table.from_batches(list(ours.to_batches(batch_size=2)))
    assert _items(batches, "emb").equals(_items(want, "emb"))
