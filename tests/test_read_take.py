# SPDX-License-Identifier: Apache-2.0
"""Scattered-row takes: results equal pylance's, and only the rows' data is decoded.

Datasets are written by pylance (2.0, 2.1, 2.2) with int64 (bit-packed mini-block),
nullable ints, short strings with nulls (mini-block Variable / FSST), long strings
(full-zip variable width) and fixed-size lists (full-zip fixed width); taken at random
index sets, at FastLanes block (1024) and chunk boundaries, across fragments and after
deletions.
"""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from cuda_kernels import bitunpack
from lance_gpu.file import encodings
from lance_gpu.file.v2_1 import miniblock

N = 20_000


def _table(n: int = N) -> pa.Table:
    rng = np.random.default_rng(11)
    ids = np.arange(n, dtype=np.int64)
    small = rng.integers(0, 1000, n)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon"])
    text = [f"{words[i % 5]}-{i}" for i in range(n)]
    long_text = ["x" * (200 + i % 50) + str(i) for i in range(n)]
    emb = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8)
    return pa.table({
        "id": pa.array(ids),
        "small": pa.array(small),
        "maybe": pa.array(small.astype(np.int32), mask=rng.random(n) < 0.2),
        "text": pa.array(text, mask=rng.random(n) < 0.1),
        "long": pa.array(long_text),
        "emb": emb,
    })


@pytest.fixture(scope="module", params=["2.0", "2.1", "2.2"])
def datasets(request, tmp_path_factory):
    path = str(tmp_path_factory.mktemp(f"take_{request.param}") / "ds.lance")
    lance.write_dataset(_table(), path, data_storage_version=request.param, max_rows_per_file=8_000)
    return lance.dataset(path), lance_gpu.dataset(path, device="cpu")


def _index_sets(total: int) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    edges = np.array([0, 1, 1023, 1024, 1025, 2047, 2048, 4095, 4096, 4097, 7999, 8000, 8001, total - 1])
    return [
        np.sort(rng.choice(total, 1024, replace=False)),
        rng.choice(total, 300, replace=True),  # unsorted, with repeats
        edges[edges < total],
        np.arange(3000, 3100),  # a contiguous run
        np.array([total - 1]),
    ]


def test_take_equals_pylance(datasets) -> None:
    ref, ours = datasets
    for idx in _index_sets(ref.count_rows()):
        assert ours.take(idx).equals(ref.take(idx)), idx[:10]
        assert ours.take(idx, columns=["text", "emb"]).equals(ref.take(idx, columns=["text", "emb"]))


def test_take_after_deletions_equals_pylance(tmp_path) -> None:
    path = str(tmp_path / "ds.lance")
    lance.write_dataset(_table(), path, max_rows_per_file=8_000)
    lance.dataset(path).delete("id % 7 = 0 OR (id >= 1000 AND id < 1100)")
    ref, ours = lance.dataset(path), lance_gpu.dataset(path, device="cpu")
    for idx in _index_sets(ref.count_rows()):
        assert ours.take(idx).equals(ref.take(idx))


def test_take_fixed_size_list_with_nulls(tmp_path) -> None:
    path = str(tmp_path / "ds.lance")
    rng = np.random.default_rng(2)
    n = 5000
    vals = pa.array(rng.random(n * 4, dtype=np.float32), mask=rng.random(n * 4) < 0.1)
    fsl = pa.FixedSizeListArray.from_arrays(vals, 4, mask=pa.array(rng.random(n) < 0.1))
    lance.write_dataset(pa.table({"v": fsl}), path, data_storage_version="2.2")
    ref, ours = lance.dataset(path), lance_gpu.dataset(path, device="cpu")
    for idx in _index_sets(n):
        assert ours.take(idx).equals(ref.take(idx))


def test_take_decodes_only_the_chunks_holding_the_rows(tmp_path, monkeypatch) -> None:
    """A take of k rows of a mini-block page hands the value decoder only the chunks that
    hold them, and no bit-packed block is unpacked whole."""
    path = str(tmp_path / "ds.lance")
    lance.write_dataset(_table(), path, data_storage_version="2.1")
    ours = lance_gpu.dataset(path, device="cpu")
    ref = lance.dataset(path)
    # Chunks per page, from the page's own chunk table.
    frag = ours.get_fragments()[0]
    field = next(f for f in ours.snapshot.lance_schema.fields if f.name == "small")
    src = frag.snapshot.field_source(field)
    reader = frag.snapshot.file_reader(src.path)
    from lance_gpu.file.encodings.base import DecodeContext
    from lance_gpu.file.reader import parse_layout

    ctx = DecodeContext(reader.path, src.columns[0])
    page = reader.column(src.columns[0]).pages[0]
    layout = parse_layout(page, ctx).mini_block_layout
    counts = miniblock.chunk_table(layout, reader.page_buffers(src.columns[0], 0), ctx)[6]
    assert counts.size > 4
    first = np.concatenate([[0], np.cumsum(counts)])
    rows = np.array([int(first[1]) - 1, int(first[1]), int(first[3]) + 5])  # chunks 0, 1, 3
    decoded: list[int] = []
    real = encodings.decode_miniblock

    def spy(enc, bufs, ctx, select=None):
        decoded.append(int(bufs[0].counts.size))
        return real(enc, bufs, ctx, select=select)

    def whole_blocks(*_a, **_k):
        raise AssertionError("a take unpacked whole FastLanes blocks")

    monkeypatch.setattr(encodings, "decode_miniblock", spy)
    monkeypatch.setattr(bitunpack, "unpack_blocks", whole_blocks)
    got = ours.take(rows, columns=["small"])
    assert decoded == [3]
    assert got.equals(ref.take(rows, columns=["small"]))


@pytest.mark.parametrize("t", [8, 16, 32, 64])
def test_unpack_selected_matches_unpack_blocks(t: int) -> None:
    rng = np.random.default_rng(t)
    dt = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[t]
    widths = np.array([0, 1, t // 2 + 1, t, 3], np.int64)
    parts, offsets, pos = [], [], 0
    for w in widths:
        vals = rng.integers(0, 1 << int(min(w, 62)), 1024, dtype=np.uint64).astype(dt) if w else np.zeros(1024, dt)
        packed = bitunpack.pack_blocks(vals, int(w))
        parts.append(packed)
        offsets.append(pos)
        pos += packed.size
    words = np.concatenate(parts)
    offsets_arr = np.array(offsets, np.int64)
    whole = bitunpack.unpack_blocks(words, offsets_arr, widths)
    block_of = rng.integers(0, widths.size, 500)
    index = rng.integers(0, 1024, 500)
    got = bitunpack.unpack_selected(words, offsets_arr, widths, block_of, index)
    np.testing.assert_array_equal(got, whole[block_of * 1024 + index])
    with pytest.raises(ValueError):
        bitunpack.unpack_selected(words, offsets_arr, widths, np.array([widths.size]), np.array([0]))


@pytest.mark.parametrize("layout", ["strided", "strided_short_last", "long", "short", "empty"])
def test_gather_ranges_paths_agree(layout: str) -> None:
    """native.gather_ranges gives the concatenated ranges whichever copy it picks: one
    strided view (evenly spaced chunks of one length), a memcpy per long range, or the
    compiled byte loop for many short ones."""
    from lance_gpu.cpu import native

    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, 1 << 20).astype(np.uint8)
    if layout.startswith("strided"):
        starts = np.arange(16, 1 << 19, 4104, dtype=np.int64)
        lengths = np.full(starts.size, 4096, np.int64)
        if layout == "strided_short_last":
            lengths[-1] = 100
    elif layout == "long":
        starts = np.sort(rng.integers(0, 1 << 19, 60)).astype(np.int64)
        lengths = rng.integers(4096, 20000, 60).astype(np.int64)
    elif layout == "short":
        starts = np.sort(rng.integers(0, 1 << 19, 1000)).astype(np.int64)
        lengths = rng.integers(0, 40, 1000).astype(np.int64)
    else:
        starts = lengths = np.zeros(0, np.int64)
    expected = np.concatenate([data[s : s + n] for s, n in zip(starts, lengths, strict=True)] or [np.zeros(0, np.uint8)])
    np.testing.assert_array_equal(native.gather_ranges(data, starts, lengths), expected)


def test_read_gather_mapped_and_coalesced_agree(tmp_path, monkeypatch) -> None:
    """LanceFileReader.read_gather gives the same bytes straight from a local map and
    through the store's coalesced range reads (remote stores), near and far ranges mixed."""
    from lance_gpu.file.container import LanceFileReader
    from lance_gpu.io.local import LocalFile

    path = str(tmp_path / "ds.lance")
    lance.write_dataset(_table(), path)
    data_file = next((tmp_path / "ds.lance" / "data").iterdir())
    reader = LanceFileReader(str(data_file))
    size = reader.io.size
    rng = np.random.default_rng(9)
    starts = np.sort(rng.integers(0, size - 300, 400))
    starts[10:20] = starts[10] + np.arange(10) * 7  # overlapping neighbours in one group
    starts = np.sort(starts)
    lengths = rng.integers(0, 300, starts.size)
    raw = np.fromfile(data_file, np.uint8)
    expected = np.concatenate([raw[s : s + n] for s, n in zip(starts, lengths, strict=True)])
    np.testing.assert_array_equal(reader.read_gather(starts, lengths), expected)
    monkeypatch.setattr(LocalFile, "mapped", property(lambda self: None))
    np.testing.assert_array_equal(reader.read_gather(starts, lengths), expected)
    with pytest.raises(ValueError):
        reader.read_gather(starts[::-1].copy(), lengths)


def test_read_gather_joins_abutting_ranges(tmp_path) -> None:
    """Consecutive rows (abutting ranges) are one range: a contiguous run of a mapped file
    comes back as a view of the map with one read counted, and mixed runs give the same
    bytes as range-by-range gathering."""
    from lance_gpu.file.container import LanceFileReader

    path = str(tmp_path / "ds.lance")
    lance.write_dataset(_table(), path)
    data_file = next((tmp_path / "ds.lance" / "data").iterdir())
    reader = LanceFileReader(str(data_file))
    raw = np.fromfile(data_file, np.uint8)
    starts = 100 + np.arange(64, dtype=np.int64) * 16
    lengths = np.full(64, 16, np.int64)
    before = reader.store.stats.snapshot()
    got = reader.read_gather(starts, lengths)
    after = reader.store.stats.snapshot()
    np.testing.assert_array_equal(got, raw[100 : 100 + 64 * 16])
    assert got.base is not None  # a view of the map, not a copy
    assert after.get("gets", 0) - before.get("gets", 0) == 1
    runs = np.array([0, 8, 16, 40, 48, 100], np.int64)  # [0, 24) joined, [40, 56), [100, 108)
    lens = np.full(runs.size, 8, np.int64)
    expected = np.concatenate([raw[s : s + 8] for s in runs])
    np.testing.assert_array_equal(reader.read_gather(runs, lens), expected)
    # few long ranges (blocks of rows) take the range-by-range copy
    blocks = np.array([0, 10_000, 30_000], np.int64)
    sizes = np.array([6000, 5000, 7000], np.int64)
    expected = np.concatenate([raw[s : s + n] for s, n in zip(blocks, sizes, strict=True)])
    np.testing.assert_array_equal(reader.read_gather(blocks, sizes), expected)


def test_repeated_takes_parse_each_page_once(tmp_path, monkeypatch) -> None:
    """A training loop's takes parse a mini-block page's chunk metadata once per reader,
    and read the chunk headers of the chunks holding the rows only."""
    path = str(tmp_path / "ds.lance")
    lance.write_dataset(_table(), path, data_storage_version="2.2")
    ref, ours = lance.dataset(path), lance_gpu.dataset(path, device="cpu")
    parsed: list[int] = []
    headers: list[tuple[int, int]] = []  # (chunks whose headers were read, chunks of the page)
    real_layout, real_table = miniblock.chunk_layout, miniblock.chunk_table

    def spy_layout(layout, meta, ctx):
        parsed.append(ctx.column)
        return real_layout(layout, meta, ctx)

    def spy_table(layout, buffers, ctx, chunks=None, keep=None):
        table = real_table(layout, buffers, ctx, chunks, keep)
        headers.append((int(table[6].size), int(chunks.counts.size)))
        return table

    monkeypatch.setattr(miniblock, "chunk_layout", spy_layout)
    monkeypatch.setattr(miniblock, "chunk_table", spy_table)
    rng = np.random.default_rng(1)
    for _ in range(5):
        idx = np.sort(rng.choice(N, 64, replace=False))
        assert ours.take(idx, columns=["small", "text"]).equals(ref.take(idx, columns=["small", "text"]))
    assert parsed and len(parsed) == len(set(parsed))
    assert headers and all(read <= 64 for read, _ in headers)
    assert any(read < total for read, total in headers)


@pytest.mark.parametrize("stable", [False, True])
def test_take_rows_by_row_id_matches_pylance(tmp_path, stable: bool) -> None:
    """pylance's ``_take_rows``: rows by row id in the order given, repeats kept, deleted
    rows left out, SQL projections; ``len(ds)`` counts live rows."""
    uri = str(tmp_path / "ids.lance")
    ref = lance.write_dataset(pa.table({"a": pa.array(np.arange(30)), "s": [f"v{i}" for i in range(30)]}), uri,
                              max_rows_per_file=10, enable_stable_row_ids=stable)
    ref.delete("a = 3 OR a = 14")
    ref = lance.dataset(uri)
    ours = lance_gpu.dataset(uri)
    live_ids = ref.to_table(with_row_id=True).column("_rowid").to_pylist()
    deleted = 3  # the deleted row a = 3: its row id (stable or not) and its address
    for ids in ([live_ids[12], live_ids[5], deleted, live_ids[5]], [], live_ids[::-1], [live_ids[0]]):
        for columns in (None, ["s"], {"x": "a * 2", "u": "upper(s)"}):
            assert ours._take_rows(ids, columns) == ref._take_rows(ids, columns), (ids, columns)
    assert len(ours) == len(ref) == 28
    assert bool(lance_gpu.dataset(uri, version=1)) is True


def test_take_rows_bad_address_is_an_os_error(tmp_path) -> None:
    uri = str(tmp_path / "bad.lance")
    lance.write_dataset(pa.table({"a": pa.array(np.arange(20))}), uri, max_rows_per_file=10)
    ours, ref = lance_gpu.dataset(uri), lance.dataset(uri)
    for address in ((5 << 32) + 2, (1 << 32) + 200):
        with pytest.raises(OSError):
            ref._take_rows([address])
        with pytest.raises(OSError, match="row address"):
            ours._take_rows([address])


def test_take_virtual_and_repeated_columns_match_pylance(tmp_path) -> None:
    """``take(columns=["_rowid"])`` / ``_rowaddr`` / ``_rowoffset``, and pylance's repeats:
    a repeated column comes once, a repeated ``_rowid`` as often as named."""
    uri = str(tmp_path / "v.lance")
    lance.write_dataset(pa.table({"a": pa.array(np.arange(100)), "b": pa.array(np.arange(100))}), uri,
                        max_rows_per_file=50)
    ref, ours = lance.dataset(uri), lance_gpu.dataset(uri)
    for cols in (["_rowid"], ["_rowid", "_rowid"], ["_rowaddr"], ["a", "_rowaddr"], ["a", "a"],
                 ["a", "_rowid", "a", "_rowid"]):
        assert ours.take([1, 60, 3], columns=cols) == ref.take([1, 60, 3], columns=cols), cols
    assert ours.take([1, 60, 3], columns=["_rowoffset"]).column(0).to_pylist() == [1, 60, 3]
