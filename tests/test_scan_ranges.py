# SPDX-License-Identifier: Apache-2.0
"""lance_gpu.scan.ranges.RangeReader: live-row ranges of single fragments equal the same
slices of pylance's ``to_table()`` on pylance-written data, by the range path (page views of
plain columns, other fixed-width columns decoded once) and by the executor path."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

lance = pytest.importorskip("lance")

import lance_gpu
from lance_gpu.scan import build_plan, resolve
from lance_gpu.scan.ranges import RangeReader

COLUMNS = ["emb", "label", "score", "maybe", "id"]


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """Three fragments of 300 rows: a 64-float32 embedding stored full-zip in pages of 40 rows
    (20 at the cuts), a low-cardinality int64 label (not stored plain), a float64, a nullable
    int32, an int64 id, a bool and a string; every row with label 7 deleted in the first two
    fragments (the third has no deletion file)."""
    rng = np.random.default_rng(3)
    n, d = 900, 64
    ints = rng.integers(0, 1000, n).astype(np.int32)
    table = pa.table(
        {
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * d).astype(np.float32)), d),
            "label": pa.array(rng.integers(0, 50, n), pa.int64()),
            "score": pa.array(rng.standard_normal(n)),
            "maybe": pa.array(ints, pa.int32(), mask=np.arange(n) % 5 == 0),
            "id": pa.array(np.arange(n), pa.int64()),
            "flag": pa.array(np.arange(n) % 2 == 0),
            "name": pa.array([f"r{i}" for i in range(n)]),
        }
    )
    path = str(tmp_path_factory.mktemp("ranges") / "ranges.lance")
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=40))
    ds = lance.write_dataset(reader, path, max_rows_per_file=300, max_rows_per_group=40, data_cache_bytes=4 * 16384, max_page_bytes=16384)
    ds.delete("label = 7 AND id < 600")
    return path


def _reader(uri: str, columns: list[str], budget: int = 64 << 20, **plan_args) -> RangeReader:
    ds = lance_gpu.dataset(uri).snapshot
    return RangeReader(ds, resolve(build_plan(ds, columns=columns, **plan_args), ds), budget=budget)


def _expected(uri: str, columns: list[str], with_row_id: bool = False) -> tuple[pa.Table, list[int]]:
    ref = lance.dataset(uri)
    want = ref.to_table(columns=columns, with_row_id=with_row_id)
    starts = np.concatenate([[0], np.cumsum([f.count_rows() for f in ref.get_fragments()])]).tolist()
    return want, starts


def _spans(starts: list[int], seed: int = 0) -> list[tuple[int, int, int]]:
    """Whole fragments, empty ranges, ranges across page cuts and random ones."""
    rng = np.random.default_rng(seed)
    sizes = [b - a for a, b in pairwise(starts)]
    spans = [(pos, 0, n) for pos, n in enumerate(sizes)] + [(0, 5, 5), (2, 0, 0), (1, 35, 45), (2, 30, 130), (2, 299, 300)]
    for _ in range(60):
        pos = int(rng.integers(0, len(sizes)))
        a = int(rng.integers(0, sizes[pos]))
        spans.append((pos, a, int(rng.integers(a, min(sizes[pos], a + 90) + 1))))
    return spans


def _check(got: list[pa.Table], want: pa.Table, starts: list[int], spans: list[tuple[int, int, int]]) -> None:
    for span, table in zip(spans, got, strict=True):
        pos, a, b = span
        expect = want.slice(starts[pos] + a, b - a)
        assert table.schema.equals(want.schema), span
        assert table.combine_chunks().equals(expect.combine_chunks()), span


def test_range_path_equals_pylance(uri) -> None:
    reader = _reader(uri, COLUMNS)
    assert reader.ranged
    cols = reader.fragment_columns(1)
    assert cols is not None
    emb, label, _score, maybe, _id = cols.pages
    assert emb is not None and len(emb[0]) > 1  # the embedding: views of several pages
    assert label is None and maybe is None  # not stored plain / nullable: decoded once
    want, starts = _expected(uri, COLUMNS)
    spans = _spans(starts)
    _check(reader.read_many(spans), want, starts, spans)
    _check(reader.execute_many(spans), want, starts, spans)
    assert reader.read(0, 0, 0).num_rows == 0
    assert reader.read(2, 10, 20).equals(want.slice(starts[2] + 10, 10))


def test_plain_page_range_is_a_view_of_the_mapped_file(uri) -> None:
    reader = _reader(uri, ["emb", "id"])
    cols = reader.fragment_columns(1)
    assert cols is not None and cols.pages[0] is not None
    views, starts = cols.pages[0]
    live = cols.live
    assert live is not None
    # ten live rows in a row inside one page
    a = next(i for i in range(live.size - 9) if live[i + 9] - live[i] == 9 and np.searchsorted(starts, live[i], "right") == np.searchsorted(starts, live[i + 9], "right"))
    page = int(np.searchsorted(starts, live[a], "right")) - 1
    got = reader.read(1, a, a + 10).column("emb").chunk(0)
    assert got.values.buffers()[1].address == int(views[page][int(live[a] - starts[page]) :].ctypes.data)
    mapped = reader.fragments[1].file_reader(reader.fragments[1].field_source(reader.resolved.read_fields[0]).path).io.mapped
    base = int(mapped.ctypes.data)
    assert base <= got.values.buffers()[1].address < base + mapped.size


def test_budget_sends_fragments_to_the_executor(uri) -> None:
    whole = _reader(uri, COLUMNS)
    per_fragment = [whole.fragment_columns(pos).decoded_bytes for pos in range(3)]  # type: ignore[union-attr]
    kept = [f.name for f, paged in zip(whole.resolved.read_fields, whole.fragment_columns(0).pages, strict=True) if paged is None]  # type: ignore[union-attr]
    assert "emb" not in kept and {"label", "maybe"} <= set(kept)
    assert per_fragment[0] == 300 * sum(whole.resolved.arrow_fields[n].type.bit_width // 8 for n in kept)  # physical rows x row bytes
    reader = _reader(uri, COLUMNS, budget=per_fragment[0] + per_fragment[1])
    want, starts = _expected(uri, COLUMNS)
    spans = [(pos, 5, b - a - 3) for pos, (a, b) in enumerate(pairwise(starts))]
    _check(reader.read_many(spans), want, starts, spans)
    assert reader.ranged and reader.decoded_bytes == per_fragment[0] + per_fragment[1]
    assert [reader.fragment_columns(pos) is not None for pos in range(3)] == [True, True, False]
    assert _reader(uri, ["emb"], budget=0).fragment_columns(0) is not None  # nothing kept decoded


@pytest.mark.parametrize("columns", [["emb", "flag"], ["id", "name"]])
def test_not_fixed_width_takes_the_executor(uri, columns) -> None:
    reader = _reader(uri, columns)
    assert not reader.ranged and reader.fragment_columns(0) is None
    want, starts = _expected(uri, columns)
    spans = _spans(starts, 1)
    _check(reader.read_many(spans), want, starts, spans)


def test_row_ids_take_the_executor(uri) -> None:
    reader = _reader(uri, ["emb", "id"], with_row_id=True)
    assert not reader.ranged
    want, starts = _expected(uri, ["emb", "id"], with_row_id=True)
    spans = _spans(starts, 2)
    _check(reader.read_many(spans), want, starts, spans)


def test_filter_takes_the_executor(uri) -> None:
    reader = _reader(uri, ["emb", "id"], filter="id % 3 = 0")
    assert not reader.ranged
    want, starts = _expected(uri, ["emb", "id"])
    spans = _spans(starts, 3)
    for (pos, a, b), table in zip(spans, reader.read_many(spans), strict=True):
        part = want.slice(starts[pos] + a, b - a)
        expect = part.filter(pc.equal(pc.subtract(part.column("id"), pc.multiply(pc.divide(part.column("id"), 3), 3)), 0))
        assert table.combine_chunks().equals(expect.combine_chunks()), (pos, a, b)
