# SPDX-License-Identifier: Apache-2.0
"""Datasets of many small fragments, differentially and counted: every read API equals
pylance's on fragments of a few rows (one row, deletions, a fragment whose rows are all
deleted), whose units decode in the consumer's thread and are filtered in groups; re-opening
a dataset parses no data file's metadata again (the process-wide cache keyed by the file's
identity), and a file whose bytes change is parsed anew."""

from __future__ import annotations

import os
import struct

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402
from lance_gpu.errors import CorruptFileError  # noqa: E402
from lance_gpu.file import container  # noqa: E402
from lance_gpu.scan import execute  # noqa: E402

FRAGMENT_ROWS = [1, 7, 1, 300, 50, 1, 120, 9, 64, 1, 33, 200]


@pytest.fixture(autouse=True)
def _spans_on(monkeypatch):
    """These tests pin the span reads, whatever the default (``execute.SPANS``, on)."""
    monkeypatch.setattr(execute, "SPANS", True)


def _table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i:03d}_{'y' * (i % 5)}" for i in range(40)])
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64) + seed * 10_000),
        "x": pa.array(rng.random(n)),
        "s": pa.array(words[rng.integers(0, 40, n)]),
        "n": pa.array(rng.integers(0, 100, n).astype(np.int32), mask=rng.random(n) < 0.2),
    })


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Fragments of 1 to 300 rows, with deleted rows in several and one fully deleted."""
    path = str(tmp_path_factory.mktemp("small") / "ds")
    for i, n in enumerate(FRAGMENT_ROWS):
        lance.write_dataset(_table(n, i), path, mode="append" if i else "create")
    ds = lance.dataset(path)
    ds.delete("id % 5 = 3")  # rows of many fragments
    ds.delete("id >= 30000 AND id < 40000")  # fragment 3 (300 rows) entirely
    return lance.dataset(path), lance_gpu.dataset(path, device="cpu")


def test_every_read_equals_pylance(pair) -> None:
    ref, ours = pair
    assert len(ours.get_fragments()) == len(ref.get_fragments()) > 8
    assert ours.to_table().equals(ref.to_table())
    assert ours.count_rows() == ref.count_rows()
    assert pa.Table.from_batches(list(ours.to_batches(batch_size=17))).equals(ref.to_table())
    idx = np.random.default_rng(1).choice(ref.count_rows(), 60, replace=False)
    assert ours.take(idx, columns=["s", "id", "n"]).equals(ref.take(idx, columns=["s", "id", "n"]))
    assert ours.to_table(limit=25, offset=40).equals(ref.to_table(limit=25, offset=40))
    for frag_ours, frag_ref in zip(ours.get_fragments(), ref.get_fragments(), strict=True):
        assert frag_ours.to_table().equals(frag_ref.to_table())


@pytest.mark.parametrize("batch_size", [5, 40, 1000])
def test_batch_edges_equal_pylance(pair, batch_size) -> None:
    """Loose batches end where fragments end, strict ones only at ``batch_size``, as
    pylance's (fragments decoded together in one span are still cut at their edges)."""
    ref, ours = pair
    for strict in (False, True):
        got = list(ours.to_batches(batch_size=batch_size, strict_batch_size=strict))
        want = list(ref.to_batches(batch_size=batch_size, strict_batch_size=strict))
        assert [b.num_rows for b in got] == [b.num_rows for b in want], strict
        assert pa.Table.from_batches(got).equals(pa.Table.from_batches(want))


@pytest.mark.parametrize("group_rows", [1, 100, execute.SPAN_ROWS])
@pytest.mark.parametrize("where", ["x < 0.3", "n IS NULL OR s = 'w001_y'", "id % 7 = 0 AND x > 0.5", "x > 2", "_rowaddr >= 21474836480 AND x < 0.7"])
def test_filters_equal_pylance_in_any_grouping(pair, monkeypatch, group_rows, where) -> None:
    """Grouped filtering (one filter evaluation over many units) gives each unit the rows
    a filter of it alone keeps: groups of one unit, of a few, of all."""
    monkeypatch.setattr(execute, "SPAN_ROWS", group_rows)
    ref, ours = pair
    for columns, late in ((["id", "s", "n"], None), (None, False), (["s"], True)):
        kw = {"columns": columns, "filter": where}
        want = ref.to_table(**kw)
        assert ours.to_table(**kw, late_materialization=late).equals(want), (columns, late)
        assert ours.to_table(**kw, with_row_id=True).equals(ref.to_table(**kw, with_row_id=True))
    assert ours.count_rows(where) == ref.count_rows(where)
    got = pa.Table.from_batches(list(ours.to_batches(columns=["id", "x"], filter=where, batch_size=50)),
                                schema=ours.scanner(columns=["id", "x"]).projected_schema)
    assert got.equals(ref.to_table(columns=["id", "x"], filter=where))


def test_small_units_decode_in_the_consumers_thread(pair, monkeypatch) -> None:
    """Units under ``POOL_MIN_ROWS`` rows start no decode thread; the pool gives the same table."""
    import concurrent.futures

    _ref, ours = pair
    started: list[object] = []
    real = concurrent.futures.ThreadPoolExecutor

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            started.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(execute, "ThreadPoolExecutor", Counting)
    inline = ours.to_table(filter="x < 0.5")
    assert started == []
    monkeypatch.setattr(execute, "POOL_MIN_ROWS", 0)
    assert ours.to_table(filter="x < 0.5").equals(inline)
    assert started


def test_reopening_parses_no_file_metadata(pair) -> None:
    """A second dataset object of the same version (a fresh open) parses no data file's
    footer and column metadata: they are kept for the process by file identity."""
    ref, _ours = pair
    container.clear_metadata_cache()
    before = container.metadata_parses
    assert lance_gpu.dataset(ref.uri, device="cpu").to_table().equals(ref.to_table())
    files = sum(len(f.data_files()) for f in ref.get_fragments())
    assert container.metadata_parses - before == files
    again = lance_gpu.dataset(ref.uri, device="cpu")
    assert again.to_table(filter="x < 0.5").equals(ref.to_table(filter="x < 0.5"))
    assert again.count_rows("x < 0.5") == ref.count_rows("x < 0.5")
    assert container.metadata_parses - before == files


def test_a_changed_file_is_parsed_again(tmp_path) -> None:
    """The cache key is the file's identity (inode, size, change times): the same path
    with other bytes is parsed anew, and read correctly, in the same process."""
    path = str(tmp_path / "ds")
    lance.write_dataset(_table(50, 0), path)
    assert lance_gpu.dataset(path, device="cpu").to_table().equals(lance.dataset(path).to_table())
    data_file = os.path.join(path, "data", lance.dataset(path).get_fragments()[0].data_files()[0].path)
    other = str(tmp_path / "other")
    lance.write_dataset(_table(50, 1), other)  # same schema and rows, other values
    other_file = os.path.join(other, "data", lance.dataset(other).get_fragments()[0].data_files()[0].path)
    with open(other_file, "rb") as src, open(data_file, "wb") as dst:  # rewritten in place
        dst.write(src.read())
    before = container.metadata_parses
    assert lance_gpu.dataset(path, device="cpu").to_table().equals(lance.dataset(other).to_table())
    assert container.metadata_parses == before + 1


def test_files_written_alike_share_their_parsed_columns(tmp_path) -> None:
    """Many small files written alike carry the same ``ColumnMetadata`` bytes: each distinct
    (column, bytes, file size) is parsed and vetted once for the process, whatever the
    number of files (1,000 appends of 16 rows: 8 distinct of 4,000)."""
    path = str(tmp_path / "ds")
    for i in range(40):
        rng = np.random.default_rng(i)  # other values in every file, stored alike
        batch = pa.table({"id": rng.integers(1 << 40, 1 << 41, 16), "x": rng.random(16)})
        lance.write_dataset(batch, path, mode="append" if i else "create")
    container.clear_metadata_cache()
    before, footers_before = container.column_parses, container.footer_parses
    ours = lance_gpu.dataset(path, device="cpu")
    assert ours.to_table().equals(lance.dataset(path).to_table())
    assert container.column_parses - before <= 4  # id and x: two distinct shapes at most each
    sizes = {os.path.getsize(os.path.join(path, "data", f.data_files()[0].path)) for f in lance.dataset(path).get_fragments()}
    # files of one size written alike share their whole parsed tail (offset tables, metadata)
    assert container.footer_parses - footers_before <= len(sizes) < 40


def test_opening_files_never_read_before_costs_no_stat(tmp_path) -> None:
    """A fragment's row count is checked against its first data file when its rows are
    read; a file this process parsed before (same state) is known from one ``stat``, and a
    file it never parsed is opened at once, without that ``stat``.  Files written alike
    share their parsed ``FileDescriptor`` (one schema, one row count)."""
    path = str(tmp_path / "ds")
    for i in range(12):
        lance.write_dataset(pa.table({"id": np.arange(i * 16, i * 16 + 16)}), path, mode="append" if i else "create")
    container.clear_metadata_cache()
    ds = lance_gpu.dataset(path, device="cpu")
    stats = ds.snapshot.store.stats
    heads = stats.heads
    assert ds.to_table().equals(lance.dataset(path).to_table())
    assert stats.heads - heads == 12  # one per file opened (its fstat), no stat before it
    assert len(container._SHARED_DESCRIPTORS) == 1
    again = lance_gpu.dataset(path, device="cpu")
    heads = stats.heads
    parses = container.metadata_parses
    assert again.to_table().equals(lance.dataset(path).to_table())
    assert container.metadata_parses == parses  # every footer known from before
    assert stats.heads - heads >= 12  # ... by a stat of each file


def test_files_written_alike_decode_together_with_their_own_chunk_tables(tmp_path, monkeypatch) -> None:
    """Consecutive files written alike decode as one page with one parse of their shared
    chunk table; files of one parsed column (same sizes) whose chunk metadata differs (the
    same chunk sizes in another order) get their own, and every row lands where pylance
    puts it."""
    from lance_gpu.file import reader

    path = str(tmp_path / "ds")
    base = np.random.default_rng(5).integers(1 << 29, 1 << 30, 4096)
    small_chunks = [(), (), (), (), (), (), (0,), (1,), (2,), (3,), (0, 1), (2, 3)]  # of 1,024 values
    for i, small in enumerate(small_chunks):
        values = base.copy()
        for chunk in small:
            values[1024 * chunk : 1024 * (chunk + 1)] %= 256
        lance.write_dataset(pa.table({"v": values}), path, mode="append" if i else "create")
    container.clear_metadata_cache()
    reader.clear_shared_caches()
    parses = []
    chunk_layout = reader._chunk_layout

    def counted(file, column, page_index, *args):
        parses.append(file.path)
        return chunk_layout(file, column, page_index, *args)

    monkeypatch.setattr(reader, "_chunk_layout", counted)
    ours = lance_gpu.dataset(path, device="cpu")
    files = [f.snapshot.file_reader(f.snapshot.data_paths[0]) for f in ours.get_fragments()]
    pages = [f.column(0).pages[0] for f in files]
    metas = [f.mapped[p.buffer_offsets[0] : p.buffer_offsets[0] + p.buffer_sizes[0]].tobytes() for f, p in zip(files, pages)]
    assert len({id(p) for p in pages[6:10]}) == 1 and len(set(metas[6:10])) == 4  # one parsed page, 4 chunk tables
    assert ours.to_table().equals(lance.dataset(path).to_table())
    changes = 1 + sum(metas[i] != metas[i - 1] or pages[i] is not pages[i - 1] for i in range(1, len(files)))
    assert len(parses) == changes == 7  # files 0-5 alike: one parse; then one per file


def test_a_corrupt_column_is_refused_beside_a_shared_sound_one(tmp_path) -> None:
    """A file whose column metadata differs in one byte from a sound file's of the same size is
    parsed on its own (the key is the bytes) and refused as pylance refuses it."""
    path = str(tmp_path / "ds")
    for i in range(2):
        lance.write_dataset(pa.table({"id": pa.array([7] * 16, pa.int64())}), path, mode="append" if i else "create")
    frags = lance.dataset(path).get_fragments()
    files = [os.path.join(path, "data", f.data_files()[0].path) for f in frags]
    with open(files[0], "rb") as f:
        a = f.read()
    with open(files[1], "rb") as f:
        assert f.read() == a  # written alike: the same bytes
    container.clear_metadata_cache()
    assert lance_gpu.dataset(path, device="cpu").to_table().equals(lance.dataset(path).to_table())
    # file 1's first column metadata: its page's encoding names an unknown message type
    # (one letter of the type URL changed; same length, so the file keeps its layout)
    offsets_pos = struct.unpack_from("<QQ", a, len(a) - 40)[1]
    cm_pos, cm_size = struct.unpack_from("<QQ", a, offsets_pos)
    raw = a[cm_pos:cm_pos + cm_size]
    assert raw.count(b"PageLayout") == 1
    with open(files[1], "wb") as f:
        f.write(a[:cm_pos] + raw.replace(b"PageLayout", b"PageLayouX") + a[cm_pos + cm_size:])
    with pytest.raises(ValueError, match="unexpected type URL"):
        lance.dataset(path).to_table()
    with pytest.raises(CorruptFileError, match="unexpected type"):  # a ValueError too, as pylance's
        lance_gpu.dataset(path, device="cpu").to_table()


# -- hundreds of tiny fragments: spans (issue 24 item 4) -------------------------------------

TINY_FRAGMENTS = 300


def _tiny_table(n: int, seed: int) -> pa.Table:
    """1 to 3 rows of every shape a span joins: nullable ints, strings, lists, structs."""
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64) + seed * 10
    words = [f"w{int(v)}" if v % 4 else None for v in rng.integers(0, 12, n)]
    lists = [None if v == 0 else list(range(int(v))) for v in rng.integers(0, 4, n)]
    return pa.table({
        "id": pa.array(ids),
        "x": pa.array(rng.random(n)),
        "s": pa.array(words, pa.string()),
        "l": pa.array(lists, pa.list_(pa.int32())),
        "st": pa.StructArray.from_arrays([pa.array(ids * 2), pa.array([f"t{i % 3}" for i in ids])], names=["a", "b"]),
        "n": pa.array(rng.integers(0, 100, n).astype(np.int32), mask=rng.random(n) < 0.3),
    })


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """300 fragments of 1 to 3 rows, one version (as Spark tasks leave them), then deletes
    leaving holes in many fragments and emptying a few."""
    path = str(tmp_path_factory.mktemp("tiny") / "ds")
    sizes = np.random.default_rng(3).integers(1, 4, TINY_FRAGMENTS)
    frags = [f for i, n in enumerate(sizes) for f in lance.fragment.write_fragments(_tiny_table(int(n), i), path)]
    lance.LanceDataset.commit(path, lance.LanceOperation.Overwrite(_tiny_table(1, 0).schema, frags))
    ds = lance.dataset(path)
    ds.delete("id % 7 = 3")
    ds.delete("id >= 400 AND id < 460")  # fragments 40 to 45: every row
    return lance.dataset(path), lance_gpu.dataset(path, device="cpu")


def _spans_used(monkeypatch) -> list[int]:
    """Sizes (units) of the spans the CPU executor reads."""
    sizes: list[int] = []
    real = execute.read_span

    def spy(group, *args):
        sizes.append(len(group))
        return real(group, *args)

    monkeypatch.setattr(execute, "read_span", spy)
    return sizes


@pytest.mark.parametrize("span_fragment_rows", [execute.SPAN_FRAGMENT_ROWS, 2])
def test_tiny_fragments_read_as_pylance(tiny, monkeypatch, span_fragment_rows) -> None:
    """Scans, filters (late materialization or not), windows, virtual columns, nested
    fields, fragment subsets and streaming over 300 tiny fragments equal pylance's, read in
    spans of many fragments (and, with fragments of 3 rows kept out of spans, in spans
    broken by single units)."""
    monkeypatch.setattr(execute, "SPAN_FRAGMENT_ROWS", span_fragment_rows)
    spans = _spans_used(monkeypatch)
    ref, ours = tiny
    assert len(ours.get_fragments()) == len(ref.get_fragments()) > 250  # (emptied ones dropped)
    assert ours.to_table().equals(ref.to_table())
    if span_fragment_rows > 3:
        assert max(spans) > 50  # many fragments a span
    else:
        assert 1 in spans and max(spans) > 5  # spans of 1- and 2-row fragments between 3-row ones
    kw = {"with_row_id": True, "with_row_address": True}
    assert ours.to_table(**kw).equals(ref.to_table(**kw))
    kw = {"columns": ["id", "_rowoffset"], "with_row_id": True, "include_deleted_rows": True, "filter": "x < 0.5"}
    assert ours.to_table(**kw).equals(ref.to_table(**kw))
    cols = ["st.b", "id", "l"]
    assert ours.to_table(columns=cols).equals(ref.to_table(columns=cols))
    for where in ("x < 0.3", "s = 'w5' OR n IS NULL", "st.a % 3 = 0 AND n > 20", "x > 2", "_rowaddr % 2 = 0"):
        for late in (None, False):
            got = ours.to_table(columns=["id", "s", "l", "st"], filter=where, late_materialization=late)
            assert got.equals(ref.to_table(columns=["id", "s", "l", "st"], filter=where)), (where, late)
        assert ours.to_table(filter=where, with_row_id=True).equals(ref.to_table(filter=where, with_row_id=True))
        assert ours.count_rows(where) == ref.count_rows(where)
        assert ours.to_table(filter=where, limit=7, offset=3).equals(ref.to_table(filter=where, limit=7, offset=3))
    assert ours.to_table(limit=50, offset=211).equals(ref.to_table(limit=50, offset=211))
    assert ours.to_table(columns={"twice": "id * 2", "n": "n"}).equals(ref.to_table(columns={"twice": "id * 2", "n": "n"}))
    some = ref.get_fragments()[5:260:7]
    mine = [ours.get_fragment(f.fragment_id) for f in some]
    got = ours.scanner(fragments=mine, filter="x < 0.6").to_table()
    assert got.equals(ref.scanner(fragments=some, filter="x < 0.6").to_table())
    strict = list(ours.to_batches(batch_size=7, strict_batch_size=True))
    assert [b.num_rows for b in strict[:-1]] == [7] * (len(strict) - 1)
    assert pa.Table.from_batches(strict).equals(ref.to_table())
    loose = list(ours.to_batches(batch_size=11, filter="x < 0.5", columns=["id", "s"]))
    assert max(b.num_rows for b in loose) <= 11
    assert pa.Table.from_batches(loose).equals(ref.to_table(filter="x < 0.5", columns=["id", "s"]))


def test_tiny_fragments_take_as_pylance(tiny, monkeypatch) -> None:
    """Takes over 300 tiny fragments (scattered, repeated, unordered, nested columns, row
    ids) equal pylance's, the touched fragments read as one span."""
    spans = _spans_used(monkeypatch)
    ref, ours = tiny
    rng = np.random.default_rng(5)
    idx = rng.choice(ref.count_rows(), 80, replace=False)
    assert ours.take(idx).equals(ref.take(idx))
    idx = np.concatenate([idx[:10], idx[:10][::-1], [0, ref.count_rows() - 1]])
    for columns in (None, ["s", "st.a", "l"]):
        assert ours.take(idx, columns=columns).equals(ref.take(idx, columns=columns)), columns
    virtual = ["id", "_rowid", "_rowaddr"]
    assert ours.take(idx, columns=virtual).equals(ref.take(idx, columns=virtual))
    assert spans and max(spans) > 10


def test_take_checks_only_the_fragments_it_reads(tiny, monkeypatch) -> None:
    """A take over 300 tiny fragments maps positions by the manifest's live counts (as
    pylance's take) and opens and checks only the fragments holding a requested row: the
    footer check of every fragment made a take of 100 rows over 1,000 appends cost ~50 ms
    (issue 24).  Counted, not timed: the fragments :meth:`check_row_count` ran on."""
    from lance_gpu.table.snapshot import FragmentSnapshot

    checked: list[int] = []
    real = FragmentSnapshot.check_row_count

    def spy(self: FragmentSnapshot) -> None:
        checked.append(self.fragment_id)
        real(self)

    monkeypatch.setattr(FragmentSnapshot, "check_row_count", spy)
    ref, _ours = tiny
    idx = np.array([3, 250, 251, ref.count_rows() - 1, 3])
    touched = set((ref.take(idx, columns=["_rowaddr"]).column("_rowaddr").to_numpy() >> 32).tolist())
    assert len(touched) == 4  # of 300
    fresh = lance_gpu.dataset(ref.uri, device="cpu")  # nothing checked or cached on it yet
    assert fresh.take(idx).equals(ref.take(idx))
    assert set(checked) == touched, sorted(set(checked))
    # a window (offset / limit, no filter) skips fragments by the same counts
    checked.clear()
    window = lance_gpu.dataset(ref.uri, device="cpu").to_table(offset=400, limit=3, with_row_address=True)
    assert window.equals(ref.to_table(offset=400, limit=3, with_row_address=True))
    read = set((window.column("_rowaddr").to_numpy() >> 32).tolist())
    assert set(checked) <= read, sorted(set(checked))  # (a fragment read whole is checked as its readers open)


def test_take_makes_fragment_objects_only_for_the_fragments_it_reads(tiny, monkeypatch) -> None:
    """Positions are mapped from the snapshot's arrays (live counts of all 300 fragments,
    deletion files read only where the manifest does not count their rows): fragment objects
    are made for the fragments holding requested rows, not for the whole version."""
    from lance_gpu.table.snapshot import FragmentSnapshot

    made: list[int] = []
    real = FragmentSnapshot.__init__

    def spy(self: FragmentSnapshot, *args, **kwargs) -> None:
        real(self, *args, **kwargs)
        made.append(self.fragment_id)

    ref, _ours = tiny
    fresh = lance_gpu.dataset(ref.uri, device="cpu")
    monkeypatch.setattr(FragmentSnapshot, "__init__", spy)
    idx = np.array([3, 250, 251, ref.count_rows() - 1])
    assert fresh.take(idx).equals(ref.take(idx))
    assert 0 < len(set(made)) <= 4, sorted(set(made))


def test_live_counts_are_pylances_with_deletions(tmp_path) -> None:
    """``TableSnapshot.live_counts``: each fragment's rows less its deletions, as pylance counts."""
    path = str(tmp_path / "ds")
    for i in range(6):
        lance.write_dataset(_table(20, i), path, mode="append" if i else "create")
    lance.dataset(path).delete("x < 0.2")
    ref = lance.dataset(path)
    ours = lance_gpu.dataset(path, device="cpu")
    assert ours._snapshot.live_counts() == [f.count_rows() for f in ref.get_fragments()]
    idx = np.arange(0, ref.count_rows(), 7)
    assert ours.take(idx).equals(ref.take(idx))


@pytest.mark.parametrize("op", ["delete", "compact"])
def test_tiny_fragments_written_as_pylance(tiny, tmp_path, monkeypatch, op) -> None:
    """A delete (its predicate evaluated once a span) and a compaction (its fragments
    rewritten a span at a time) of 300 tiny fragments leave what pylance's leave, read by
    pylance."""
    import shutil

    spans = _spans_used(monkeypatch)
    ref, _ours = tiny
    theirs, mine = tmp_path / "theirs", tmp_path / "mine"
    shutil.copytree(ref.uri, theirs)
    shutil.copytree(ref.uri, mine)
    if op == "delete":
        where = "s = 'w3' OR (n IS NULL AND x < 0.5) OR id = 2905"
        got = lance_gpu.dataset(str(mine), device="cpu").delete(where)
        lance.dataset(str(theirs)).delete(where)
        assert got["num_deleted_rows"] == ref.count_rows(where) > 0
    else:
        got = lance_gpu.dataset(str(mine), device="cpu").optimize.compact_files()
        want = lance.dataset(str(theirs)).optimize.compact_files()
        assert (got.fragments_removed, got.fragments_added) == (want.fragments_removed, want.fragments_added)
    assert max(spans) > 50
    after = lance.dataset(str(mine))
    assert after.to_table().equals(lance.dataset(str(theirs)).to_table())
    assert after.count_rows() == lance.dataset(str(theirs)).count_rows()
    assert lance_gpu.dataset(str(mine), device="cpu").to_table(with_row_id=op == "delete").equals(
        lance.dataset(str(theirs)).to_table(with_row_id=op == "delete"))


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_tiny_fragments_of_every_file_version(tmp_path, version) -> None:
    """Spans over fragments of each file version (2.0 files are read one by one inside a
    span, 2.1+ ones decoded together) equal pylance's: scan, filter, take."""
    path = str(tmp_path / "ds")
    frags = [f for i in range(60) for f in lance.fragment.write_fragments(_tiny_table(1 + i % 3, i), path,
                                                                           data_storage_version=version)]
    lance.LanceDataset.commit(path, lance.LanceOperation.Overwrite(_tiny_table(1, 0).schema, frags))
    lance.dataset(path).delete("id % 5 = 1")
    ref, ours = lance.dataset(path), lance_gpu.dataset(path, device="cpu")
    assert ours.to_table().equals(ref.to_table())
    assert ours.to_table(filter="x < 0.4", with_row_id=True).equals(ref.to_table(filter="x < 0.4", with_row_id=True))
    idx = np.random.default_rng(2).choice(ref.count_rows(), 25, replace=False)
    assert ours.take(idx).equals(ref.take(idx))


def test_rows_where_places_hits_in_their_units() -> None:
    """A filter's hits over the rows of several units, back to back, go to the units that
    hold them as physical offsets: whole fragments, row selections, units without a hit
    skipped, none at all."""
    from types import SimpleNamespace

    from lance_gpu.scan import ReadUnit, rows_where

    def unit(physical: int, rows: list[int] | None = None) -> ReadUnit:
        return ReadUnit(SimpleNamespace(physical_rows=physical), None if rows is None else np.array(rows, np.int64))  # type: ignore[arg-type]

    units = [unit(3), unit(10, [2, 5, 9]), unit(4), unit(6, [0, 1, 4, 5])]  # rows 0-2 | 3-5 | 6-9 | 10-13
    got = rows_where(units, np.array([0, 2, 4, 5, 10, 13]))
    assert [(k, rows.tolist()) for k, rows in got] == [(0, [0, 2]), (1, [5, 9]), (3, [0, 5])]
    assert all(rows.dtype == np.int64 for _k, rows in got)
    assert rows_where(units, np.zeros(0, np.int64)) == []
    assert [(k, r.tolist()) for k, r in rows_where(units, np.arange(14))] == [
        (0, [0, 1, 2]), (1, [2, 5, 9]), (2, [0, 1, 2, 3]), (3, [0, 1, 4, 5])]


def test_files_read_together_hold_the_rows_their_first_columns_claim(tmp_path, monkeypatch) -> None:
    """Several files' pages decoded as one give every file's rows in order, and are refused
    (naming the field) where the rows decoded differ from those the files' first columns
    claim: here one file's column claims a row more than its pages hold."""
    import dataclasses

    from lance_gpu.file.arrow import leaf_types
    from lance_gpu.file.container import LanceFileReader
    from lance_gpu.file.reader import _read_files_together

    uri = str(tmp_path / "t")
    for k in range(3):
        table = pa.table({"id": pa.array(np.arange(4 * k, 4 * k + 4), pa.int64())})
        lance.write_dataset(table, uri, mode="append" if k else "create", data_storage_version="2.1")
    readers = [LanceFileReader(os.path.join(uri, "data", f.data_files()[0].path))
               for f in lance.dataset(uri).get_fragments()]
    field = pa.field("id", pa.int64())
    parts = [(r, [0]) for r in readers]
    assert _read_files_together(parts, field, leaf_types(field.type)).to_pylist() == list(range(12))
    real = LanceFileReader.column

    def column(self, index: int):
        info = real(self, index)
        return dataclasses.replace(info, num_rows=info.num_rows + 1) if self is readers[1] else info

    monkeypatch.setattr(LanceFileReader, "column", column)
    with pytest.raises(CorruptFileError, match="field 'id' decoded to 12 rows where its pages hold 13"):
        _read_files_together(parts, field, leaf_types(field.type))
