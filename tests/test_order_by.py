# SPDX-License-Identifier: Apache-2.0
"""Sorted scans (issue 26 item 3) against pylance 14.0.2: ``scanner(order_by=)`` with
``ColumnOrdering`` (ascending / descending, nulls first / last, several keys, bare names),
through ``to_table`` / ``to_batches``, with filters, projections, limit and offset."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
from lance.dataset import ColumnOrdering as RefOrdering  # noqa: E402

import lance_gpu  # noqa: E402
from lance_gpu.dataset import ColumnOrdering  # noqa: E402


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    rng = np.random.default_rng(3)
    n = 200
    table = pa.table({
        "i": pa.array(rng.integers(0, 20, n), mask=rng.random(n) < 0.15),
        "s": pa.array([f"k{v}" for v in rng.integers(0, 9, n)], mask=rng.random(n) < 0.1),
        "f": pa.array(rng.standard_normal(n)),
        "id": pa.array(np.arange(n)),
    })
    path = str(tmp_path_factory.mktemp("ord") / "o.lance")
    lance.write_dataset(table, path, max_rows_per_file=70)
    return path


def _both(order):
    """(our orderings, pylance's); "id" breaks ties last (pylance's sort leaves ties in no set
    order, ours keeps scan order: comparing rows needs a total order)."""
    order = [*order, "id"]
    ours = [ColumnOrdering(*o) if isinstance(o, tuple) else o for o in order]
    ref = [RefOrdering(*o) if isinstance(o, tuple) else o for o in order]
    return ours, ref


@pytest.mark.parametrize("order", [
    [("i",)], [("i", False)], [("i", True, True)], [("i", False, True)],
    [("i",), ("s", False, True)], ["s", ("f", False)], [("s", True, True), ("i", False, False)],
])
@pytest.mark.parametrize("kwargs", [{}, {"filter": "f > 0"}, {"columns": ["id", "i"]}, {"limit": 17, "offset": 5},
                                    {"columns": ["id"], "limit": 9}])
def test_order_by_matches_pylance(uri: str, order, kwargs) -> None:
    ours, ref = _both(order)
    if "columns" in kwargs:
        kwargs = {**kwargs, "columns": kwargs["columns"] + [c for c in ("i", "s", "f", "id") if c not in kwargs["columns"]]}
    expected = lance.dataset(uri).scanner(order_by=ref, **kwargs).to_table()
    assert lance_gpu.dataset(uri).scanner(order_by=ours, **kwargs).to_table() == expected
    assert lance_gpu.dataset(uri).to_table(order_by=ours, **kwargs) == expected
    batches = list(lance_gpu.dataset(uri).to_batches(order_by=ours, batch_size=32, **kwargs))
    assert pa.Table.from_batches(batches, schema=expected.schema) == expected


def test_unknown_order_column_is_refused(uri: str) -> None:
    with pytest.raises(Exception) as ref_exc:
        lance.dataset(uri).to_table(order_by=["nope"])
    with pytest.raises(type(ref_exc.value)):
        lance_gpu.dataset(uri).to_table(order_by=["nope"])


def test_ties_keep_scan_order(uri: str) -> None:
    """Our sort is stable: rows with equal keys stay in scan order (pylance's order of ties
    is unspecified); the keys themselves match pylance's."""
    ours = lance_gpu.dataset(uri).to_table(order_by=[ColumnOrdering("i", False, True)])
    ref = lance.dataset(uri).to_table(order_by=[RefOrdering("i", False, True)])
    assert ours.column("i") == ref.column("i")
    keys, ids = ours.column("i").to_pylist(), ours.column("id").to_pylist()
    assert all(ids[k] < ids[k + 1] for k in range(len(ids) - 1) if keys[k] == keys[k + 1])


def test_sort_column_outside_the_projection(uri: str) -> None:
    """pylance 14.0.2 fails to plan this (TakeExec without a row id); we read the sort
    column, sort and drop it: the rows of pylance's sort with the column projected."""
    ours = lance_gpu.dataset(uri).to_table(columns=["id"], order_by=["f"])
    ref = lance.dataset(uri).to_table(columns=["id", "f"], order_by=["f"]).select(["id"])
    assert ours == ref


def test_fragment_order_by_matches_pylance(uri: str) -> None:
    """A fragment's ``to_table`` / ``scanner`` take ``order_by`` too, as pylance's."""
    ours = [ColumnOrdering("i", False, True), ColumnOrdering("id")]  # pylance's fragments take no bare names
    ref = [RefOrdering("i", False, True), RefOrdering("id")]
    for fid in (0, 2):
        expected = lance.dataset(uri).get_fragment(fid).to_table(order_by=ref, filter="f > -1")
        frag = lance_gpu.dataset(uri).get_fragment(fid)
        assert frag.to_table(order_by=ours, filter="f > -1") == expected
        assert frag.scanner(order_by=ours, filter="f > -1").to_table() == expected
