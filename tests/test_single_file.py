# SPDX-License-Identifier: Apache-2.0
"""pylance's single-file API (issue 26 item 2) against pylance 14.0.2: one ``.lance`` file of
each version written by one library and read by the other (``read_all``, ``read_range``,
``take_rows``, projection, schema metadata, ``metadata()``), and the errors pylance raises."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
import lance.file as ref_file  # noqa: E402, F811

from lance_gpu.file import LanceFileReader, LanceFileWriter  # noqa: E402

VERSIONS = ["2.0", "2.1", "2.2"]


def _table(n: int = 300) -> pa.Table:
    rng = np.random.default_rng(5)
    return pa.table({
        "i": pa.array(np.arange(n, dtype=np.int64)),
        "f": pa.array(rng.standard_normal(n), mask=rng.random(n) < 0.1),
        "s": pa.array([f"v{k % 13}" * (k % 4) for k in range(n)]),
        "st": pa.array([{"x": k, "l": [k, k + 1]} for k in range(n)]),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(4 * n).astype(np.float32)), 4),
    })


@pytest.mark.parametrize("version", VERSIONS)
def test_our_file_reads_in_pylance(tmp_path, version: str) -> None:
    table = _table()
    path = str(tmp_path / "ours.lance")
    with LanceFileWriter(path, version=version) as writer:
        for batch in table.to_batches(max_chunksize=77):
            writer.write_batch(batch)
        writer.add_schema_metadata("who", "lance-gpu")
    assert writer.size_bytes is not None and writer.size_bytes > 0
    reader = ref_file.LanceFileReader(path)
    assert reader.read_all().to_table() == table
    assert reader.metadata().schema.metadata == {b"who": b"lance-gpu"}
    assert reader.take_rows([0, 5, 299]).to_table() == table.take([0, 5, 299])


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_file_reads_in_ours(tmp_path, version: str) -> None:
    table = _table()
    path = str(tmp_path / "ref.lance")
    with ref_file.LanceFileWriter(path, version=version) as writer:
        writer.write_batch(table)
        writer.add_schema_metadata("who", "pylance")
    ours, ref = LanceFileReader(path), ref_file.LanceFileReader(path)
    assert ours.read_all(batch_size=50).to_table() == ref.read_all().to_table() == table
    assert ours.read_range(10, 40).to_table() == ref.read_range(10, 40).to_table()
    assert ours.take_rows([3, 7, 250]).to_table() == ref.take_rows([3, 7, 250]).to_table()
    assert LanceFileReader(path, columns=["s", "i"]).read_all().to_table() == \
        ref_file.LanceFileReader(path, columns=["s", "i"]).read_all().to_table()
    assert ours.num_rows() == ref.num_rows() == 300
    om, rm = ours.metadata(), ref.metadata()
    assert (om.schema, om.num_rows, om.major_version, om.minor_version) == (rm.schema, rm.num_rows, rm.major_version, rm.minor_version)
    assert len(om.columns) == len(rm.columns)
    assert [len(c.pages) for c in om.columns] == [len(c.pages) for c in rm.columns]
    assert ours.read_global_buffer(0) == ref.read_global_buffer(0)


def test_errors_match_pylance(tmp_path) -> None:
    path = str(tmp_path / "e.lance")
    for module in (ref_file, __import__("lance_gpu.file", fromlist=["x"])):
        with pytest.raises(ValueError, match="Schema is unknown and file cannot be created"):
            with module.LanceFileWriter(path):
                pass
    with LanceFileWriter(path, pa.schema([pa.field("a", pa.int64())])) as writer:
        writer.write_batch(pa.table({"a": list(range(10))}))
    for reader in (ref_file.LanceFileReader(path), LanceFileReader(path)):
        with pytest.raises(ValueError):
            reader.take_rows([0, 10]).to_table()


def test_unclosed_writer_leaves_no_file(tmp_path) -> None:
    path = tmp_path / "gone.lance"
    writer = LanceFileWriter(str(path), pa.schema([pa.field("a", pa.int64())]))
    writer.write_batch(pa.table({"a": [1, 2, 3]}))
    del writer
    assert not path.exists()
    with LanceFileWriter(str(path), pa.schema([pa.field("a", pa.int64())])):
        pass
    assert ref_file.LanceFileReader(str(path)).read_all().to_table().num_rows == 0


def test_unsorted_take_is_refused_as_pylance(tmp_path) -> None:
    path = str(tmp_path / "u.lance")
    with LanceFileWriter(path) as writer:
        writer.write_batch(pa.table({"a": list(range(10))}))
    for reader in (ref_file.LanceFileReader(path), LanceFileReader(path)):
        with pytest.raises(ValueError, match="Indices must be sorted in ascending order"):
            reader.take_rows([3, 1])
        with pytest.raises(ValueError, match="not strictly increasing"):
            reader.take_rows([1, 1]).to_table()


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_global_buffers_written_both_ways(tmp_path, version: str) -> None:
    """``LanceFileWriter.add_global_buffer``: the same indices as pylance's, and each
    library reads the other's buffers back."""
    RefReader, RefWriter = ref_file.LanceFileReader, ref_file.LanceFileWriter
    table = pa.table({"a": [1, 2, 3]})
    payloads = [b"hello", bytes(range(200))]
    for writer_cls, name in ((LanceFileWriter, "ours.lance"), (RefWriter, "ref.lance")):
        with writer_cls(str(tmp_path / name), version=version) as writer:
            writer.write_batch(table)
            assert [writer.add_global_buffer(p) for p in payloads] == [1, 2]
        for reader in (LanceFileReader(str(tmp_path / name)), RefReader(str(tmp_path / name))):
            assert reader.read_all().to_table() == table
            assert [bytes(reader.read_global_buffer(i)) for i in (1, 2)] == payloads
            assert [b.size for b in reader.metadata().global_buffers[1:]] == [5, 200]


def test_file_session_as_pylance(tmp_path) -> None:
    """``LanceFileSession``: writers and readers relative to one base path, and its object
    operations (contains, list, read_range, delete_file with pylance's ``OSError``s)."""
    from lance_gpu.file import LanceFileSession

    seen = []
    for cls, name in ((ref_file.LanceFileSession, "ref"), (LanceFileSession, "ours")):
        base = tmp_path / name
        base.mkdir()
        session = cls(str(base))
        with session.open_writer("foo.lance") as writer:
            writer.write_batch(pa.table({"a": [1, 2, 3]}))
        with session.open_writer("sub/bar.lance", version="2.1") as writer:
            writer.write_batch(pa.table({"a": [4]}))
        got = [session.contains("foo.lance"), session.contains("nope"), session.list(), session.list("sub"),
               session.read_range("foo.lance", 0, 4), session.open_reader("foo.lance", columns=["a"]).read_all().to_table()]
        for bad in (lambda s: s.delete_file("nope"), lambda s: s.read_range("nope", 0, 1)):
            with pytest.raises(OSError):
                bad(session)
        session.delete_file("sub/bar.lance")
        got.append(session.list())
        seen.append(got)
    assert seen[0] == seen[1]
    assert ref_file.LanceFileReader(str(tmp_path / "ours" / "foo.lance")).read_all().to_table() == pa.table({"a": [1, 2, 3]})


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_max_page_bytes_splits_2_0_pages_as_pylance(tmp_path, version: str) -> None:
    """``max_page_bytes`` cuts pages on write in 2.0 files (1 byte: a page per value), not in
    2.1+ (pylance splits those on read): the same page counts as pylance's, read both ways."""
    table = pa.table({"a": pa.array(np.arange(40), pa.int64())})
    counts = []
    for writer_cls, reader_cls in ((LanceFileWriter, ref_file.LanceFileReader), (ref_file.LanceFileWriter, LanceFileReader)):
        path = str(tmp_path / f"{writer_cls.__module__}.lance")
        with writer_cls(path, table.schema, max_page_bytes=64, version=version) as writer:
            writer.write_batch(table)
        assert reader_cls(path).read_all().to_table() == table
        counts.append(len(LanceFileReader(path).metadata().columns[0].pages))
    assert counts[0] == counts[1] == (5 if version == "2.0" else 1)


def test_threads_sharing_one_writer_write_whole_batches(tmp_path) -> None:
    """Threads writing to one LanceFileWriter (pylance's is thread-safe): every batch lands
    whole -- no row mixes one batch's columns with another's -- as pylance's own test asks
    (test_file.py::test_multithreaded_writer)."""
    import threading

    schema = pa.schema([("thread_id", pa.int64()), ("value", pa.int64()), ("data", pa.string())])
    path = str(tmp_path / "threads.lance")
    start = threading.Barrier(6)

    def write(writer, t: int) -> None:
        start.wait()
        for b in range(20):
            n = 50
            writer.write_batch(pa.table({"thread_id": [t] * n, "value": [t * 10_000 + b * n + i for i in range(n)],
                                         "data": [f"t{t}_{b * n + i}" for i in range(n)]}, schema=schema))

    with LanceFileWriter(path, schema) as writer:
        threads = [threading.Thread(target=write, args=(writer, t)) for t in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    rows = LanceFileReader(path).read_all().to_table().to_pylist()
    assert len(rows) == 6 * 20 * 50
    for r in rows:
        k = r["value"] - r["thread_id"] * 10_000
        assert r["data"] == f"t{r['thread_id']}_{k}", r
    assert sorted(r["value"] for r in rows) == sorted(t * 10_000 + i for t in range(6) for i in range(1000))
