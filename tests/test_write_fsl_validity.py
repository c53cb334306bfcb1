# SPDX-License-Identifier: Apache-2.0
"""Fixed-size lists with null items (item validity inside the list), and nested fixed-size
lists: written at 2.1 and 2.2 with the layouts pylance 14 writes, read back by pylance."""

from __future__ import annotations

import glob
import os
import re

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.errors import UnsupportedEncodingError
from lance_gpu.file.container import LanceFileReader
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.reader import parse_layout

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def _fsl(rng, n, dim, item_null_p, list_null_p, t=pa.float32()):
    items = pa.array((rng.random(n * dim) * 100).astype(np.float32), mask=rng.random(n * dim) < item_null_p)
    items = items.cast(t, safe=False)
    mask = pa.array(rng.random(n) < list_null_p) if list_null_p else None
    return pa.FixedSizeListArray.from_arrays(items, dim, mask=mask)


def _table(n: int = 3000) -> pa.Table:
    rng = np.random.default_rng(0)
    vals = rng.random(n * 8).astype(np.float32)
    lnull = rng.random(n) < 0.2
    inner = pa.FixedSizeListArray.from_arrays(pa.array(vals, mask=rng.random(n * 8) < 0.1), 4)
    inner_nulls = pa.FixedSizeListArray.from_arrays(
        pa.array(vals, mask=rng.random(n * 8) < 0.1), 4, mask=pa.array(rng.random(n * 2) < 0.1)
    )
    return pa.table({
        "f8": _fsl(rng, n, 8, 0.1, 0),  # mini-block, validity chunk buffer
        "f8_null_lists": _fsl(rng, n, 8, 0.1, 0.1),  # + definition levels
        "f128": _fsl(rng, n, 128, 0.05, 0),  # full-zip: validity bytes zipped before each row
        "f128_null_lists": _fsl(rng, n, 128, 0.05, 0.1),
        "f63": _fsl(rng, n, 63, 0.1, 0.1),  # 252 value bytes: still mini-block
        "i8x3": _fsl(rng, n, 3, 0.1, 0, pa.int8()),
        "bool5": _fsl(rng, n, 5, 0.1, 0.1, pa.bool_()),
        "nested_inner_validity": pa.FixedSizeListArray.from_arrays(inner, 2),
        "nested_both_validity": pa.FixedSizeListArray.from_arrays(inner_nulls, 2),
        "nested_no_nulls": pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(pa.array(vals), 4), 2),
        "all_items_null": pa.FixedSizeListArray.from_arrays(pa.array(vals, mask=np.ones(n * 8, bool)), 8, mask=pa.array(lnull)),
        "list_of_fsl": pa.ListArray.from_arrays(
            np.arange(0, 2 * n + 1, 2).astype(np.int32), pa.concat_arrays([_fsl(rng, n, 8, 0.1, 0.1), _fsl(rng, n, 8, 0.1, 0.1)])
        ),
    })


def _layouts(uri):
    """Per column: the page layout's text (FSST tables elided) and the page buffer sizes."""
    path = sorted(glob.glob(os.path.join(uri, "data", "*.lance")))[0]
    reader = LanceFileReader(path)
    out = []
    for c in range(reader.num_columns):
        page = reader.column(c).pages[0]
        text = str(parse_layout(page, DecodeContext(path, c)))
        out.append((re.sub(r'symbol_table: "[^"]*"', "symbol_table: X", text), list(page.buffer_sizes)))
    return out


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return _table()


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_fsl_item_validity_like_pylance(tmp_path, table, version):
    """Same page layouts (encodings, has_validity flags, chunking, buffer sizes) as pylance,
    and pylance reads exactly what was written."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance_gpu.write_dataset(table, ours, data_storage_version=version)
    lance.write_dataset(table, theirs, data_storage_version=version)
    a, b = _layouts(ours), _layouts(theirs)
    diffs = {name: (x, y) for name, x, y in zip(table.column_names, a, b) if x != y}
    assert not diffs, diffs
    got = lance.dataset(ours).to_table()
    assert got.equals(table)
    for name in ("f8", "f128_null_lists", "nested_both_validity", "list_of_fsl"):
        assert got[name].to_pylist() == table[name].to_pylist()  # null items included
    # take goes through the full-zip / mini-block random access paths too
    rows = [0, 7, 1500, 2999]
    assert lance.dataset(ours).take(rows).equals(table.take(rows))


def test_fsl_item_validity_encodings(tmp_path, table):
    """What pylance writes (and so do we): mini-block ``FixedSizeList{has_validity}`` with
    two chunk buffers; full-zip rows of ``ceil(dim / 8)`` validity bytes plus the values;
    nested lists nest their encodings; items that are all null carry no values at all."""
    ours = str(tmp_path / "ours")
    lance_gpu.write_dataset(table, ours)
    got = dict(zip(table.column_names, (text for text, _sizes in _layouts(ours))))
    flat = lambda s: " ".join(s.split())  # noqa: E731
    f8 = flat(got["f8"])
    assert "mini_block_layout" in f8 and "has_validity: true" in f8 and "num_buffers: 2" in f8
    f128 = flat(got["f128_null_lists"])
    assert "full_zip_layout" in f128 and "bits_def: 1" in f128 and f"bits_per_value: {8 * (16 + 512)}" in f128
    nested = flat(got["nested_inner_validity"])
    assert "items_per_value: 2" in nested and "items_per_value: 4" in nested and nested.count("has_validity: true") == 1
    assert flat(got["nested_both_validity"]).count("has_validity: true") == 2
    assert "has_validity" not in got["nested_no_nulls"]
    all_null = flat(got["all_items_null"])
    assert "full_zip_layout" in all_null and "constant {" in all_null and "bits_per_value: 8" in all_null


def test_nested_fsl_without_nulls_is_readable_by_pylance(tmp_path):
    """A fixed-size list of fixed-size lists is one encoding per layer (pylance refuses a
    flattened ``FixedSizeList{outer, Flat{inner bits}}``)."""
    rng = np.random.default_rng(4)
    n = 500
    tbl = pa.table({
        "mb": pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8).astype(np.float32)), 4), 2),
        "fz": pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 128).astype(np.float32)), 64), 2),
    })
    for version in ("2.1", "2.2"):
        uri = str(tmp_path / version)
        lance_gpu.write_dataset(tbl, uri, data_storage_version=version)
        assert lance.dataset(uri).to_table().equals(tbl)
        assert lance_gpu.dataset(uri, device="cpu").to_table().equals(tbl)


@pytest.mark.parametrize("version", ["2.1", "2.2"])
def test_null_items_only_under_null_lists(tmp_path, version):
    """Items that are null only where their list is null (what ``pa.array`` builds for a
    null fixed-size list) are don't-care slots: no item validity is written for them (pylance
    writes it; both read the same), so our own reader reads the page too."""
    rng = np.random.default_rng(5)
    n = 2000
    lnull = rng.random(n) < 0.2
    under = np.repeat(lnull, 8) & (rng.random(n * 8) < 0.5)
    vals = rng.random(n * 8).astype(np.float32)
    tbl = pa.table({
        "under": pa.FixedSizeListArray.from_arrays(pa.array(vals, mask=under), 8, mask=pa.array(lnull)),
        "built": pa.array([None if k % 5 == 0 else [float(k)] * 3 for k in range(n)], pa.list_(pa.float64(), 3)),
        "nested": pa.array([None if k % 3 == 0 else [[k, k + 1], [k + 2, k + 3]] for k in range(n)], pa.list_(pa.list_(pa.int32(), 2), 2)),
    })
    assert tbl["built"].chunk(0).values.null_count  # pyarrow's own null slots
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(tbl, uri, data_storage_version=version)
    assert all("has_validity" not in text for text, _sizes in _layouts(uri))
    assert lance.dataset(uri).to_table().equals(tbl)
    assert lance_gpu.dataset(uri, device="cpu").to_table().equals(tbl)


@pytest.mark.parametrize("writer", ["ours", "pylance"])
def test_our_reader_reads_fsl_item_validity(tmp_path, table, writer):
    uri = str(tmp_path / writer)
    if writer == "ours":
        lance_gpu.write_dataset(table, uri)
    else:
        lance.write_dataset(table, uri)
    ds = lance_gpu.dataset(uri, device="cpu")
    got = ds.to_table()
    for name in table.column_names:
        assert got[name].to_pylist() == table[name].to_pylist(), name
    assert got.equals(table)
    rows = [0, 7, 1500, 2999]
    assert ds.take(rows).equals(table.take(rows))
