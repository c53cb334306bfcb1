# SPDX-License-Identifier: Apache-2.0
"""Late materialization, differentially and counted: filtered reads of pylance-written data
equal pylance's at every survivor share, the fields the filter does not read are decoded for
the survivors only while that is the cheaper way for their encoding (and whole otherwise),
and a selective read of a mini-block page reads only the chunks holding its rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402
from lance_gpu.file.reader import SELECT_SHARE_CHUNKED, SELECT_SHARE_DIRECT, selective_share  # noqa: E402
from lance_gpu.file.v2_1 import miniblock  # noqa: E402
from lance_gpu.table.snapshot import FragmentSnapshot  # noqa: E402

N = 40_000  # two fragments of 20k rows


def _table() -> pa.Table:
    rng = np.random.default_rng(3)
    return pa.table({
        "id": pa.array(np.arange(N, dtype=np.int64)),  # bit-packed
        "x": pa.array(rng.random(N)),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(N * 8, dtype=np.float32)), 8),  # flat lists
        "embn": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(N * 4, dtype=np.float32)), 4,
                                                  mask=pa.array(rng.random(N) < 0.1)),
        "fsb": pa.array([bytes([i % 251, 7] * 8) for i in range(N)], pa.binary(16)),  # flat 128-bit
        "i8": pa.array(rng.integers(-100, 100, N).astype(np.int8)),
        "f64n": pa.array(rng.random(N), mask=rng.random(N) < 0.2),
        "flag": pa.array(rng.random(N) < 0.5),
        "s": pa.array([f"v{i % 97}" for i in range(N)]),
        "doc": pa.array([None if i % 13 == 0 else f"text {i} " * (i % 5) for i in range(N)]),
    })


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def pair(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("late") / "ds")
    lance.write_dataset(_table(), path, max_rows_per_file=N // 2, data_storage_version=request.param)
    return lance.dataset(path), lance_gpu.dataset(path, device="cpu")


@pytest.mark.parametrize("share", [0.0, 0.001, 0.03, 0.1, 0.3, 0.6, 1.0])
def test_filtered_reads_equal_pylance_at_every_share(pair, share) -> None:
    ref, ours = pair
    columns = ["id", "emb", "embn", "fsb", "i8", "f64n", "flag", "s", "doc"]
    kw = {"columns": columns, "filter": f"x < {share}"}
    got, want = ours.to_table(**kw), ref.to_table(**kw)
    assert got.equals(want)
    assert ours.count_rows(f"x < {share}") == ref.count_rows(f"x < {share}") == want.num_rows


def test_filtered_reads_with_deleted_rows(tmp_path) -> None:
    path = str(tmp_path / "ds")
    lance.write_dataset(_table(), path, max_rows_per_file=N // 2)
    lance.dataset(path).delete("id % 7 = 2 OR (id >= 5000 AND id < 9000)")
    ref, ours = lance.dataset(path), lance_gpu.dataset(path, device="cpu")
    for share in (0.01, 0.2, 0.7):
        kw = {"columns": ["id", "emb", "fsb", "s"], "filter": f"x < {share}", "with_row_id": True}
        assert ours.to_table(**kw).equals(ref.to_table(**kw))


def _spy_reads(monkeypatch) -> dict[str, list[int | None]]:
    """Field name -> rows asked of each ``read_field`` call (None: the whole fragment)."""
    reads: dict[str, list[int | None]] = {}
    real = FragmentSnapshot.read_field

    def spy(self, field, arrow_field, rows):
        reads.setdefault(field.name, []).append(None if rows is None else int(rows.size))
        return real(self, field, arrow_field, rows)

    monkeypatch.setattr(FragmentSnapshot, "read_field", spy)
    return reads


def test_late_fields_decoded_selectively_by_encoding(pair, monkeypatch) -> None:
    """Under a filter keeping ~10 % of rows, flat lists (read straight from their chunks)
    are decoded for the survivors only and bit-packed ints whole; under ~1 % both are
    selective, under ~60 % both whole.  The filter column is always decoded whole."""
    ref, ours = pair
    frag = ours.get_fragments()[0]
    shares = {}
    for name in ("id", "emb"):
        field = ours.snapshot.lance_schema.field(name)
        src = frag.snapshot.field_source(field)
        shares[name] = selective_share(frag.snapshot.file_reader(src.path), ours.schema.field(name), src.columns)
    assert shares == {"id": SELECT_SHARE_CHUNKED, "emb": SELECT_SHARE_DIRECT}
    for q, selective in ((0.01, {"id", "emb"}), (0.1, {"emb"}), (0.6, set())):
        reads = _spy_reads(monkeypatch)
        kw = {"columns": ["id", "emb"], "filter": f"x < {q}"}
        assert ours.to_table(**kw).equals(ref.to_table(**kw))
        assert reads["x"] == [None, None]
        survivors = sorted(frag.count_rows(f"x < {q}") for frag in ref.get_fragments())
        for name in ("id", "emb"):  # units decode in threads: compare the reads as sets
            got = sorted(reads[name], key=lambda r: -1 if r is None else r)
            assert got == (survivors if name in selective else [None, None]), (q, name, reads)
        monkeypatch.undo()


def test_selective_flat_lists_read_only_the_selected_values(pair, monkeypatch) -> None:
    """A selective read of flat fixed-size lists hands the value decoder the chunks holding
    the rows, reads their chunk headers only, and gathers the selected values' bytes
    (no chunk is copied whole)."""
    ref, ours = pair
    headers: list[tuple[int, int]] = []
    real_table = miniblock.chunk_table

    def spy_table(layout, buffers, ctx, chunks=None, keep=None):
        table = real_table(layout, buffers, ctx, chunks, keep)
        headers.append((int(table[6].size), int(miniblock.chunk_layout(layout, buffers[0], ctx).counts.size)))
        return table

    def no_whole_copy(*_a, **_k):
        raise AssertionError("a selective read copied whole chunks")

    monkeypatch.setattr(miniblock, "chunk_table", spy_table)
    monkeypatch.setattr("lance_gpu.cpu.native.gather_ranges", no_whole_copy)
    kw = {"columns": ["emb", "fsb"], "filter": "x < 0.002"}
    want = ref.to_table(**kw)
    assert ours.to_table(**kw).equals(want)
    late = [(read, total) for read, total in headers if total > 8]
    assert late and all(read <= want.num_rows for read, _ in late)


def test_count_rows_reads_only_the_filter_column(pair, monkeypatch) -> None:
    ref, ours = pair
    reads = _spy_reads(monkeypatch)
    for q in (0.01, 0.5):
        assert ours.count_rows(f"x < {q}") == ref.count_rows(f"x < {q}")
    assert set(reads) == {"x"} and all(r is None for r in reads["x"])
