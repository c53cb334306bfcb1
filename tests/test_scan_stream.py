# SPDX-License-Identifier: Apache-2.0
"""Streaming and late materialization on the CPU executor, pinned by what is decoded (never
by time): batches come in order with exact sizes, the rows decoded ahead of the consumer stay
within the readahead window however large the dataset, and a filtered read decodes only the
mini-block chunks of its late fields that hold matching rows (all of them once the filter
keeps most rows).  Results equal pylance's on the same pylance-written data."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402
from lance_gpu.file import encodings  # noqa: E402
from lance_gpu.file.encodings.base import DecodeContext  # noqa: E402
from lance_gpu.file.reader import page_starts, parse_layout  # noqa: E402
from lance_gpu.file.v2_1 import miniblock  # noqa: E402
from lance_gpu.table.snapshot import FragmentSnapshot  # noqa: E402

ROWS = 24_000


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("scan_stream") / "ds")
    rng = np.random.default_rng(3)
    table = pa.table({
        "key": pa.array(np.arange(ROWS, dtype=np.int64)),
        "payload": pa.array(rng.integers(0, 1 << 40, ROWS)),
        "s": pa.array([f"row-{i}-{'z' * (i % 13)}" for i in range(ROWS)]),
    })
    lance.write_dataset(table, path, max_rows_per_file=ROWS // 4, data_storage_version="2.1")
    return path


@pytest.fixture(scope="module")
def pair(uri: str):
    return lance.dataset(uri), lance_gpu.dataset(uri, device="cpu")


def test_batches_are_exact_and_in_order_across_windows(pair, monkeypatch) -> None:
    """With small decode windows, strict batches are exactly ``batch_size`` rows (but the
    last) across window and fragment edges, and the rows come in scan order."""
    monkeypatch.setattr("lance_gpu.scan.scanner.STREAM_WINDOW_ROWS", 1000)
    ref, ours = pair
    batches = list(ours.to_batches(columns=["key", "s"], batch_size=700, strict_batch_size=True, batch_readahead=2))
    sizes = [b.num_rows for b in batches]
    assert all(n == 700 for n in sizes[:-1]) and sizes[-1] == ROWS % 700
    got = pa.Table.from_batches(batches)
    assert got.equals(ref.to_table(columns=["key", "s"]))
    loose = [b.num_rows for b in ours.to_batches(columns=["key"], batch_size=700)]
    assert max(loose) <= 700 and sum(loose) == ROWS


def test_streaming_memory_is_bounded_by_the_readahead_window(pair, monkeypatch) -> None:
    """Rows decoded but not yet handed to the consumer never exceed the units in flight
    (readahead) plus the one being consumed, on a dataset many windows long."""
    window_rows = 512
    monkeypatch.setattr("lance_gpu.scan.scanner.STREAM_WINDOW_ROWS", window_rows)
    _ref, ours = pair
    decoded = [0]
    real = FragmentSnapshot.read_field

    def spy(self, field, arrow_field, rows):
        out = real(self, field, arrow_field, rows)
        decoded[0] += len(out)
        return out

    monkeypatch.setattr(FragmentSnapshot, "read_field", spy)
    batch_size, ahead_batches = 256, 2
    in_flight = max(1, -(-ahead_batches * batch_size // window_rows), 1)  # the scanner's rule
    assert ROWS > 10 * (in_flight + 1) * window_rows  # the dataset is far larger than the window
    consumed = 0
    worst = 0
    for batch in ours.to_batches(columns=["payload"], batch_size=batch_size, batch_readahead=ahead_batches,
                                 fragment_readahead=1):
        worst = max(worst, decoded[0] - consumed)
        consumed += batch.num_rows
    assert consumed == ROWS == decoded[0]
    assert worst <= (in_flight + 1) * window_rows, worst


def _chunk_of_rows(ours, column_name: str, fragment: Any, rows: np.ndarray) -> tuple[int, set[tuple[int, int]]]:
    """The leaf column of ``column_name`` in ``fragment`` and the (page, chunk) pairs holding
    ``rows`` (file-local)."""
    field = next(f for f in ours.snapshot.lance_schema.fields if f.name == column_name)
    src = fragment.snapshot.field_source(field)
    reader = fragment.snapshot.file_reader(src.path)
    col = src.columns[0]
    pages = reader.column(col).pages
    starts = page_starts(pages)
    held: set[tuple[int, int]] = set()
    for pi, page in enumerate(pages):
        ctx = DecodeContext(reader.path, col)
        layout = parse_layout(page, ctx).mini_block_layout
        counts = miniblock.chunk_table(layout, reader.page_buffers(col, pi), ctx)[6]
        first = np.concatenate([[0], np.cumsum(counts)]) + starts[pi]
        mine = rows[(rows >= starts[pi]) & (rows < starts[pi + 1])]
        held |= {(pi, int(c)) for c in np.searchsorted(first, mine, side="right") - 1}
    return col, held


def _spy_chunks(monkeypatch) -> dict[int, int]:
    """Mini-block chunks handed to the value decoders, per leaf column."""
    seen: dict[int, int] = {}
    real = encodings.decode_miniblock

    def spy(enc, bufs, ctx, select=None):
        seen[ctx.column] = seen.get(ctx.column, 0) + int(bufs[0].counts.size)
        return real(enc, bufs, ctx, select=select)

    monkeypatch.setattr(encodings, "decode_miniblock", spy)
    return seen


def test_selective_filter_decodes_only_the_chunks_holding_matches(pair, monkeypatch) -> None:
    ref, ours = pair
    frag = ours.get_fragments()[0]
    matches = np.array([3, 4, 2500])
    col, held = _chunk_of_rows(ours, "payload", frag, matches)
    total_chunks = len(_chunk_of_rows(ours, "payload", frag, np.arange(frag.count_rows()))[1])
    assert len(held) <= total_chunks / 2
    seen = _spy_chunks(monkeypatch)
    flt = "key IN (3, 4, 2500)"
    got = frag.to_table(columns=["payload", "s"], filter=flt)
    assert got.equals(ref.get_fragments()[0].to_table(columns=["payload", "s"], filter=flt))
    assert seen[col] == len(held), (seen, held)


def test_non_selective_filter_decodes_late_fields_whole(pair, monkeypatch) -> None:
    """A filter keeping most rows decodes the late fields' pages whole (one sequential decode
    and a take beats a selective decode), with the same result."""
    ref, ours = pair
    frag = ours.get_fragments()[0]
    col, every = _chunk_of_rows(ours, "payload", frag, np.arange(frag.count_rows()))
    seen = _spy_chunks(monkeypatch)
    flt = "key % 10 < 6"
    got = frag.to_table(columns=["payload", "s"], filter=flt)
    assert got.equals(ref.get_fragments()[0].to_table(columns=["payload", "s"], filter=flt))
    assert seen[col] == len(every)


def test_filtered_stream_equals_pylance(pair, monkeypatch) -> None:
    """Filtered streaming (late materialization per window, windows in parallel) keeps the
    scan order and pylance's rows."""
    monkeypatch.setattr("lance_gpu.scan.scanner.STREAM_WINDOW_ROWS", 1500)
    ref, ours = pair
    for flt in ("key % 97 = 5", "key % 3 != 0"):
        got = pa.Table.from_batches(list(ours.to_batches(columns=["s", "payload"], filter=flt, batch_size=400)))
        assert got.equals(ref.to_table(columns=["s", "payload"], filter=flt))


def test_long_values_are_decoded_selectively_even_when_most_rows_survive(tmp_path, monkeypatch) -> None:
    """Long variable-width values (hundreds of bytes a row) are decoded for the survivors
    only, whatever their share; short ones are decoded whole once most rows survive."""
    path = str(tmp_path / "long")
    rng = np.random.default_rng(9)
    n = 3000
    letters = np.frombuffer(b"abcdefghij klmnop", np.uint8)
    table = pa.table({
        "key": pa.array(np.arange(n, dtype=np.int64)),
        "short": pa.array([f"s{i % 50}" for i in range(n)]),
        "doc": pa.array([letters[rng.integers(0, letters.size, 600)].tobytes().decode() for _ in range(n)]),
    })
    lance.write_dataset(table, path)
    ref, ours = lance.dataset(path), lance_gpu.dataset(path, device="cpu")
    decoded: dict[str, int] = {}
    real = FragmentSnapshot.read_field

    def spy(self, field, arrow_field, rows):
        decoded[field.name] = decoded.get(field.name, 0) + (self.physical_rows if rows is None else len(rows))
        return real(self, field, arrow_field, rows)

    monkeypatch.setattr(FragmentSnapshot, "read_field", spy)
    flt = "key % 10 < 7"
    got = ours.to_table(columns=["short", "doc"], filter=flt)
    assert got.equals(ref.to_table(columns=["short", "doc"], filter=flt))
    assert decoded["doc"] == got.num_rows < n
    assert decoded["short"] == n


def test_many_small_fragments_stream_exactly(tmp_path) -> None:
    """Many fragments smaller than a batch: each decodes in one pool task, batches still
    come exact (``strict_batch_size``) and in order, across fragment edges, and a deleted
    row is skipped (its fragment's live rows are read)."""
    path = str(tmp_path / "small")
    n = 40 * 150
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "s": pa.array([f"v{i % 7}" for i in range(n)])})
    lance.write_dataset(table, path, max_rows_per_file=150)
    ref = lance.dataset(path)
    ref.delete("id = 301")
    ref = lance.dataset(path)
    ours = lance_gpu.dataset(path, device="cpu")
    batches = list(ours.to_batches(batch_size=512, strict_batch_size=True))
    assert [b.num_rows for b in batches[:-1]] == [512] * (len(batches) - 1)
    assert pa.Table.from_batches(batches).equals(ref.to_table())


def test_file_metadata_caches_belong_to_one_dataset_version(tmp_path) -> None:
    """The column maps (field id -> column of a data file layout) and the fragments' field
    sources are kept on the dataset object of one version: fragments written together share
    one map, a new version (a new column: new data files) starts its own, and an old
    version's object keeps reading what it read."""
    path = str(tmp_path / "meta")
    n = 4 * 100
    lance.write_dataset(pa.table({"a": pa.array(np.arange(n, dtype=np.int64))}), path, max_rows_per_file=100)
    v1 = lance_gpu.dataset(path, device="cpu")
    assert v1.to_table().equals(lance.dataset(path).to_table())
    assert len(v1.snapshot._column_maps) == 1  # four fragments, one layout
    # where fields live: per layout (spans of small fragments keep nothing per fragment)
    assert {key[1] for key in v1.snapshot.field_locations} == {v1.snapshot.lance_schema.fields[0].id}
    lance.dataset(path).add_columns({"b": "a * 2"})
    v2 = lance_gpu.dataset(path, device="cpu")
    assert v2.snapshot._column_maps == {} and v2.snapshot._column_maps is not v1.snapshot._column_maps
    assert v2.to_table().equals(lance.dataset(path).to_table())
    assert len(v2.snapshot._column_maps) == 2  # the old files' layout and the new column's files
    assert len(v2.snapshot.field_locations) == 2  # fields a and b of the one layout
    assert len(v1.snapshot._column_maps) == 1
    assert v1.to_table().equals(lance.dataset(path, version=1).to_table())
    again = lance_gpu.dataset(path, version=2, device="cpu")  # another object, its own caches
    assert again.snapshot._column_maps == {} and again.to_table().equals(v2.to_table())


def test_page_layouts_are_parsed_once_per_file(pair, monkeypatch) -> None:
    """A second scan of one dataset object parses no page layout again, nor does a scan of
    another object of the same version: layouts are kept with the file's metadata, for the
    process, keyed by the file's identity (:func:`lance_gpu.file.container.file_metadata`),
    and by their bytes (pages of files written alike share one parse)."""
    from lance_gpu.file import container, reader

    calls = [0]
    real = reader.parse_layout

    def spy(page, ctx):
        calls[0] += 1
        return real(page, ctx)

    monkeypatch.setattr(reader, "parse_layout", spy)
    container.clear_metadata_cache()
    reader.clear_shared_caches()
    ref, _ours = pair
    ds = lance_gpu.dataset(ref.uri, device="cpu")
    assert ds.to_table().equals(ref.to_table())
    first = calls[0]
    assert first > 0
    assert pa.Table.from_batches(list(ds.to_batches(batch_size=1000))).equals(ref.to_table())
    assert calls[0] == first
    other = lance_gpu.dataset(ref.uri, device="cpu")
    assert other.to_table().equals(ref.to_table())
    assert calls[0] == first
    container.clear_metadata_cache()
    assert lance_gpu.dataset(ref.uri, device="cpu").to_table().equals(ref.to_table())
    assert calls[0] == first  # the files are parsed again, their page layouts are known by bytes
    container.clear_metadata_cache()
    reader.clear_shared_caches()
    assert lance_gpu.dataset(ref.uri, device="cpu").to_table().equals(ref.to_table())
    assert calls[0] == 2 * first


@pytest.fixture(scope="module")
def mixed_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Bit-packed integers, floats, FSST and dictionary strings, nullable integers."""
    rows = 200_000
    rng = np.random.default_rng(11)
    words = np.array(["alpha", "beta", "gamma", "delta", "omega", "lorem", "ipsum"])
    table = pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "small": pa.array(rng.integers(0, 1000, rows)),
        "x": pa.array(rng.random(rows)),
        "cat": pa.array(words[rng.integers(0, words.size, rows)]),
        "text": pa.array([" ".join(r) for r in words[rng.integers(0, words.size, (rows, 4))]]),
        "maybe": pa.array(rng.integers(0, 100, rows).astype(np.int32), mask=rng.random(rows) < 0.1),
    })
    path = str(tmp_path_factory.mktemp("pool") / "ds")
    lance.write_dataset(table, path)
    return path


def test_decoded_buffers_come_from_arrows_pool_once_the_process_recycles(mixed_path, monkeypatch) -> None:
    """Until a decoded result has been freed, reads decode into numpy's memory (fresh pages
    cost less there); once one has, into Arrow's default pool, which keeps freed memory for
    the next read instead of faulting fresh pages in: while that table lives the pool holds
    about its bytes, and gets them back when it dies.  Values equal pylance's either way."""
    from lance_gpu.cpu import memory

    monkeypatch.setattr(memory, "recycles", [False])
    ours = lance_gpu.dataset(mixed_path, device="cpu")
    expected = lance.dataset(mixed_path).to_table()
    before = pa.total_allocated_bytes()
    first = ours.to_table()
    assert first.equals(expected)
    assert pa.total_allocated_bytes() - before < 0.1 * first.nbytes  # numpy's memory
    assert not memory.recycles[0]
    del first
    assert memory.recycles[0]  # a decoded result died
    before = pa.total_allocated_bytes()
    second = ours.to_table()
    held = pa.total_allocated_bytes() - before
    assert second.equals(expected)
    assert held >= 0.8 * second.nbytes, (held, second.nbytes)
    del second
    assert pa.total_allocated_bytes() - before < 0.1 * expected.nbytes


def test_large_decoded_buffers_are_recycled_when_their_last_view_dies(tmp_path, monkeypatch) -> None:
    """Buffers over RECYCLE_MIN_BYTES (which mimalloc would give back to the OS, and fault
    in afresh next time) go back to a bounded free list once every view of them, Arrow
    arrays included, has died; a request of about that size takes the block again, one
    much larger does not; a streamed pass over a wide fixed-size-list column equals pylance's."""
    from lance_gpu.cpu import memory

    monkeypatch.setattr(memory, "recycles", [True])
    monkeypatch.setattr(memory, "RECYCLE_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(memory, "RECYCLE_KEEP_BYTES", 8 << 20)
    monkeypatch.setattr(memory, "_free_blocks", {})
    first = memory.empty(300_000, np.float64)  # 2.4 MB
    assert first.flags.writeable and first.flags.c_contiguous and first.size == 300_000
    address = first.ctypes.data
    first[:] = 1.5
    arrow = pa.array(first[10:20])  # zero-copy views keep the block lent
    del first
    assert not memory._free_blocks
    other = memory.empty(300_000, np.float64)
    assert other.ctypes.data != address
    assert arrow.to_pylist() == [1.5] * 10
    del arrow
    assert [b.ctypes.data for b in memory._free_blocks.values()] == [address]
    bigger = memory.empty(600_000, np.float64)  # more than a quarter larger: a new block
    assert bigger.ctypes.data != address
    again = memory.empty(290_000, np.float64)
    assert again.ctypes.data == address and again.size == 290_000
    assert not memory._free_blocks
    del other
    del again, bigger
    assert sum(b.nbytes for b in memory._free_blocks.values()) <= 8 << 20
    for _ in range(5):  # never more than RECYCLE_KEEP_BYTES kept
        held = [memory.empty(300_000, np.float64) for _ in range(6)]
        del held
    assert sum(b.nbytes for b in memory._free_blocks.values()) <= 8 << 20

    rows = 40_000
    rng = np.random.default_rng(3)
    table = pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 16, dtype=np.float32)), 16),
                      "id": pa.array(np.arange(rows))})
    path = str(tmp_path / "emb")
    lance.write_dataset(table, path)
    monkeypatch.setattr("lance_gpu.scan.scanner.STREAM_WINDOW_ROWS", 8192)
    ours = lance_gpu.dataset(path, device="cpu")
    for _ in range(2):
        got = pa.Table.from_batches(list(ours.to_batches(batch_size=4096)))
        assert got.equals(lance.dataset(path).to_table())


@pytest.mark.parametrize("window_rows", [1024, 1003])
def test_streamed_booleans_equal_pylance(tmp_path, monkeypatch, window_rows) -> None:
    """Booleans streamed in windows that start on a byte of the decoded bitmap (shared, not
    copied) or inside one (copied bit by bit) read as pylance's, with and without nulls."""
    monkeypatch.setattr("lance_gpu.scan.scanner.STREAM_WINDOW_ROWS", window_rows)
    rows = 20_000
    rng = np.random.default_rng(5)
    table = pa.table({
        "flag": pa.array(rng.random(rows) < 0.3),
        "maybe": pa.array(rng.random(rows) < 0.6, mask=rng.random(rows) < 0.2),
    })
    path = str(tmp_path / "bools")
    lance.write_dataset(table, path)
    got = pa.Table.from_batches(list(lance_gpu.dataset(path, device="cpu").to_batches(batch_size=777)))
    assert got.equals(lance.dataset(path).to_table())


def _emb_dataset(tmp_path, rows: int = 60_000, dim: int = 32) -> tuple[str, pa.Table]:
    rng = np.random.default_rng(11)
    table = pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "emb": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * dim, dtype=np.float32)), dim),
        "f": pa.array(rng.random(rows)),
    })
    path = str(tmp_path / "emb")
    lance.write_dataset(table, path)
    return path, table


@pytest.mark.parametrize("window_rows", [16_384, 10_007])
def test_streamed_plain_values_are_read_into_place(tmp_path, monkeypatch, window_rows) -> None:
    """Streaming windows of a mini-block page of plain fixed-width values (embeddings) are
    read by ``preadv`` straight into the decoded buffer (no mapping), windows starting and
    ending inside chunks included, and equal pylance's batches (a full read's whole pages
    are read so too); with the path turned off
    (a store that keeps its pages mapped) the same rows come back."""
    from lance_gpu.file import reader
    from lance_gpu.io import local

    if local._libc_preadv() is None:
        pytest.skip("preadv through ctypes is Linux only")
    path, table = _emb_dataset(tmp_path)
    monkeypatch.setattr("lance_gpu.scan.scanner.STREAM_WINDOW_ROWS", window_rows)
    monkeypatch.setattr(reader, "SCATTER_MIN_BYTES", 1 << 16)
    calls = []
    real = miniblock.decode_plain_run

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(miniblock, "decode_plain_run", counted)
    expected = lance.dataset(path).to_table()
    got = pa.Table.from_batches(list(lance_gpu.dataset(path, device="cpu").to_batches(batch_size=4096)))
    assert got.equals(expected) and got.equals(table)
    assert calls and all(calls)  # every window of ``emb`` was read into place
    calls.clear()
    assert lance_gpu.dataset(path, device="cpu").to_table().equals(expected)  # whole pages so too
    assert calls and all(calls)
    calls.clear()
    kept = lance_gpu.dataset(path, device="cpu", store=local.LocalStore(release_pages=False))
    assert pa.Table.from_batches(list(kept.to_batches(batch_size=4096))).equals(expected)
    assert calls and not any(calls)  # mapped pages stay there: gathered from the map


def test_a_wrong_chunk_header_of_plain_values_is_corrupt(tmp_path, monkeypatch) -> None:
    """A chunk header naming another value-buffer size is not read into place: the window
    falls back to the mapped decode, which raises CorruptFileError (as pylance refuses it)."""
    import glob

    from lance_gpu.errors import CorruptFileError
    from lance_gpu.file import reader
    from lance_gpu.file.container import LanceFileReader

    path, _table = _emb_dataset(tmp_path)
    (data_file,) = glob.glob(f"{path}/data/*.lance")
    file = LanceFileReader(data_file)
    column = 1  # emb
    page = file.column(column).pages[0]
    layout = reader._page_layout(file, column, 0, DecodeContext(data_file, column).at_page(0))
    chunks = reader._chunk_layout(file, column, 0, layout.mini_block_layout, None, DecodeContext(data_file, column).at_page(0))
    del file
    at = int(page.buffer_offsets[1]) + int(chunks.starts[3]) + 2  # chunk 3's buffer size (u16)
    raw = bytearray(open(data_file, "rb").read())
    raw[at] ^= 0x40
    with open(data_file, "wb") as f:
        f.write(raw)
    monkeypatch.setattr("lance_gpu.scan.scanner.STREAM_WINDOW_ROWS", 16_384)
    monkeypatch.setattr(reader, "SCATTER_MIN_BYTES", 1 << 16)
    with pytest.raises(CorruptFileError):
        for _ in lance_gpu.dataset(path, device="cpu").to_batches(batch_size=4096, columns=["emb"]):
            pass
    with pytest.raises((OSError, ValueError)):  # pylance refuses the page too (a panic: ArrowInvalid)
        for _ in lance.dataset(path).to_batches(batch_size=4096, columns=["emb"]):
            pass


def test_plain_chunks_past_their_page_data_are_corrupt(tmp_path, monkeypatch) -> None:
    """Chunk metadata sizing the last chunk of a page past the page's chunk data is not
    read into place (the bytes there belong to other buffers): the mapped decode raises
    CorruptFileError, in a full read and in a stream."""
    import glob

    from lance_gpu.errors import CorruptFileError
    from lance_gpu.file import reader
    from lance_gpu.file.container import LanceFileReader

    path, _table = _emb_dataset(tmp_path)
    (data_file,) = glob.glob(f"{path}/data/*.lance")
    file = LanceFileReader(data_file)
    column = 1  # emb
    page = file.column(column).pages[0]
    mb = reader._page_layout(file, column, 0, DecodeContext(data_file, column).at_page(0)).mini_block_layout
    del file
    word = 4 if mb.has_large_chunk else 2
    at = int(page.buffer_offsets[0]) + int(page.buffer_sizes[0]) - word  # the last chunk's word
    raw = bytearray(open(data_file, "rb").read())
    value = int.from_bytes(raw[at : at + word], "little") + (64 << 4)  # 512 bytes larger
    raw[at : at + word] = value.to_bytes(word, "little")
    with open(data_file, "wb") as f:
        f.write(raw)
    monkeypatch.setattr(reader, "SCATTER_MIN_BYTES", 1 << 16)
    with pytest.raises(CorruptFileError):
        lance_gpu.dataset(path, device="cpu").to_table(columns=["emb"])
    monkeypatch.setattr("lance_gpu.scan.scanner.STREAM_WINDOW_ROWS", 16_384)
    with pytest.raises(CorruptFileError):
        for _ in lance_gpu.dataset(path, device="cpu").to_batches(batch_size=4096, columns=["emb"]):
            pass


def test_growing_groups_and_the_rows_a_limit_wants(tmp_path, monkeypatch):
    """A limit the plan cannot push into row selections (after a filter) reaches the executor
    as ``want = offset + limit``; the device executor's groups (``_growing_groups``) start at
    that many rows and double, bounded by ``most``; without a limit ``want`` is None.  The
    CPU path's rows equal pylance's either way."""
    from lance_gpu.scan import execute

    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"id": pa.array(range(100), pa.int64())}), uri, max_rows_per_file=10)
    snap = execute.open_snapshot(uri, 1)
    units = [execute.ReadUnit(snap.fragment_at(k), None) for k in range(10)]
    sizes = [len(g) for g in execute._growing_groups(units, 15, None)]
    assert sizes == [2, 4, 4], sizes  # asks 15 rows, then 40, then 80 (the rest)
    assert [len(g) for g in execute._growing_groups(units, 15, 20)] == [2, 2, 2, 2, 2]
    assert [len(g) for g in execute._growing_groups(units, 0, None)] == [1, 2, 4, 3]  # 1, 20, 60 rows

    wants = []
    real = execute.CpuExecutor.run

    def recorded(self, *args, **kwargs):
        wants.append(kwargs.get("want"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(execute.CpuExecutor, "run", recorded)
    ds = lance_gpu.dataset(uri, device="cpu")
    for kwargs, want in (({"filter": "id % 3 = 0", "limit": 5, "offset": 4}, 9), ({"filter": "id % 3 = 0"}, None)):
        wants.clear()
        got = ds.to_table(**kwargs)
        assert got.equals(lance.dataset(uri).to_table(**kwargs)), kwargs
        assert wants == [want], (kwargs, wants)
