# SPDX-License-Identifier: Apache-2.0
"""Fragment-level writes for distributed pipelines (issue 26 item 1), against pylance 14.0.2:
``LanceFragment.delete`` / ``delete_rows`` / ``merge_columns`` / ``update_columns`` and
committing their results with ``LanceOperation.Delete`` / ``Merge`` / ``Update``; the
per-fragment progress trackers of ``write_fragments`` / ``LanceFragment.create``.

Each case runs the same calls on two copies of one pylance-written dataset, one with
pylance and one with lance-gpu, and compares the fragments' layouts (files, field ids,
deletions) and the committed tables; pylance reads every version we commit.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")

import lance_gpu  # noqa: E402
from lance_gpu.fragment import LanceFragment, write_fragments  # noqa: E402
from lance_gpu.progress import FileSystemFragmentWriteProgress, FragmentWriteProgress  # noqa: E402


def _table(n: int = 12) -> pa.Table:
    return pa.table({
        "a": pa.array(np.arange(n, dtype=np.int64)),
        "b": pa.array([f"s{k}" for k in range(n)]),
        "st": pa.array([{"x": k, "y": float(k) / 2} for k in range(n)]),
    })


@pytest.fixture(params=[False, True], ids=["plain-row-ids", "stable-row-ids"])
def uris(tmp_path, request) -> tuple[str, str]:
    """(pylance's copy, our copy) of one dataset: 3 fragments of 4 rows, one row deleted."""
    ref = str(tmp_path / "ref.lance")
    lance.write_dataset(_table(), ref, max_rows_per_file=4, enable_stable_row_ids=request.param)
    lance.dataset(ref).delete("a = 5")
    ours = str(tmp_path / "ours.lance")
    shutil.copytree(ref, ours)
    return ref, ours


def _layout(meta) -> list[tuple]:
    """What a fragment's metadata says about its files, independent of file names."""
    files = [(list(f.fields), list(f.column_indices), f.file_major_version, f.file_minor_version) for f in meta.files]
    deleted = None if meta.deletion_file is None else meta.deletion_file.num_deleted_rows
    return [meta.id, meta.physical_rows, deleted, files]


def _both(uris, op):
    """``op(module, dataset)`` on pylance's copy and on ours."""
    ref_uri, our_uri = uris
    return op(lance, lance.dataset(ref_uri)), op(lance_gpu, lance_gpu.dataset(our_uri))


def _same_tables(uris) -> None:
    ref_uri, our_uri = uris
    expected = lance.dataset(ref_uri).to_table()
    assert lance_gpu.dataset(our_uri).to_table() == expected
    assert lance.dataset(our_uri).to_table() == expected  # pylance reads what we committed


@pytest.mark.parametrize("predicate", ["a > 6", "a >= 4 AND a < 8", "b = 's1'", "a > 100", "st.x % 2 = 0"])
def test_fragment_delete_matches_pylance(uris, predicate: str) -> None:
    def run(mod, ds):
        updated, removed = [], []
        for frag in ds.get_fragments():
            meta = frag.delete(predicate)
            if meta is None:
                removed.append(frag.fragment_id)
            else:
                updated.append(meta)
        layouts = [_layout(m) for m in updated]
        mod.LanceDataset.commit(ds.uri, mod.LanceOperation.Delete(updated, removed, predicate), read_version=ds.version)
        return layouts, removed

    ref, ours = _both(uris, run)
    assert ours == ref
    _same_tables(uris)


def test_fragment_delete_layout_and_none(uris) -> None:
    (ref, ours) = _both(uris, lambda mod, ds: [ds.get_fragment(1).delete(p) for p in ("a > 6", "a >= 0", "a > 99")])
    assert [None if m is None else _layout(m) for m in ours] == [None if m is None else _layout(m) for m in ref]
    assert ours[1] is None and ours[2].deletion_file is not None  # fragment 1 already had a deletion


def test_fragment_delete_rows_matches_pylance(uris) -> None:
    ref, ours = _both(uris, lambda mod, ds: [ds.get_fragment(0).delete_rows(o) for o in ([1, 3], [0, 1, 2, 3], [])])
    assert [None if m is None else _layout(m) for m in ours] == [None if m is None else _layout(m) for m in ref]


def test_fragment_delete_bad_predicate_is_a_value_error(uris) -> None:
    ref_uri, our_uri = uris
    with pytest.raises(Exception) as ref_exc:
        lance.dataset(ref_uri).get_fragment(0).delete("nope > 1")
    with pytest.raises(type(ref_exc.value)):
        lance_gpu.dataset(our_uri).get_fragment(0).delete("nope > 1")


@pytest.mark.parametrize("kind", ["sql", "udf", "reader"])
def test_merge_columns_committed_with_merge_matches_pylance(uris, kind: str) -> None:
    def value_func(frag):
        if kind == "sql":
            return {"c": "a * 2 + st.x"}, None
        if kind == "udf":
            return (lambda b: pa.record_batch([pa.compute.multiply(b.column("a"), 3)], names=["c"])), ["a"]
        n = frag.count_rows()
        return pa.table({"c": pa.array(np.arange(n, dtype=np.int32) + 100 * frag.fragment_id)}), None

    def run(mod, ds):
        metas, schema = [], None
        for frag in ds.get_fragments():
            func, cols = value_func(frag)
            meta, schema = frag.merge_columns(func, columns=cols)
            metas.append(meta)
        assert schema.to_pyarrow().names == ["a", "b", "st", "c"]
        mod.LanceDataset.commit(ds.uri, mod.LanceOperation.Merge(metas, schema), read_version=ds.version)
        return [_layout(m) for m in metas], schema.to_pyarrow()

    ref, ours = _both(uris, run)
    assert ours == ref
    _same_tables(uris)


def test_merge_columns_udf_reads_row_ids(uris) -> None:
    def run(mod, ds):
        frag = ds.get_fragment(2)
        meta, _schema = frag.merge_columns(lambda b: pa.record_batch([b.column("_rowid")], names=["rid"]),
                                          columns=["_rowid"])
        return _layout(meta)

    ref, ours = _both(uris, run)
    assert ours == ref


def test_merge_columns_refuses_an_existing_column(uris) -> None:
    ref_uri, our_uri = uris
    with pytest.raises(Exception) as ref_exc:
        lance.dataset(ref_uri).get_fragment(0).merge_columns({"a": "a + 1"})
    with pytest.raises(type(ref_exc.value)):
        lance_gpu.dataset(our_uri).get_fragment(0).merge_columns({"a": "a + 1"})


@pytest.mark.parametrize("on", ["a", "_rowid"])
def test_update_columns_committed_with_update_matches_pylance(uris, on: str) -> None:
    def run(mod, ds):
        if on == "a":
            new = pa.table({"a": [1, 3, 9, 10, 77], "b": ["x1", "x3", "x9", "x10", "none"]})
        else:
            ids = ds.to_table(columns=[], with_row_id=True).column("_rowid").to_pylist()
            new = pa.table({"_rowid": pa.array([ids[1], ids[7]], pa.uint64()), "b": ["r1", "r7"]})
        metas, modified = [], None
        for frag in ds.get_fragments():
            meta, modified = frag.update_columns(new, left_on=on)
            metas.append(meta)
        mod.LanceDataset.commit(ds.uri, mod.LanceOperation.Update(updated_fragments=metas, fields_modified=modified),
                                read_version=ds.version)
        return [_layout(m) for m in metas], modified

    ref, ours = _both(uris, run)
    assert ours == ref
    _same_tables(uris)


def test_update_columns_offsets_match_pylance(uris) -> None:
    def run(mod, ds):
        meta, modified, offsets = ds.get_fragment(1).update_columns(pa.table({"a": [4, 6, 7], "b": ["p", "q", "r"]}),
                                                                    left_on="a", with_offsets=True)
        return _layout(meta), modified, offsets

    ref, ours = _both(uris, run)
    assert ours == ref


def test_our_fragment_metadata_commits_through_pylance(uris) -> None:
    """A worker on lance-gpu, the driver on pylance: our FragmentMetadata travels as JSON."""
    _ref_uri, our_uri = uris
    ds = lance_gpu.dataset(our_uri)
    metas = [f.merge_columns({"c": "a + 1"})[0] for f in ds.get_fragments()]
    ref_metas = [lance.FragmentMetadata.from_json(json.dumps(m.to_json())) for m in metas]
    ref_schema = lance.schema.LanceSchema.from_pyarrow(pa.schema([*list(ds.schema), pa.field("c", pa.int64())]))
    lance.LanceDataset.commit(our_uri, lance.LanceOperation.Merge(ref_metas, ref_schema), read_version=ds.version)
    got = lance.dataset(our_uri).to_table(columns=["a", "c"])
    assert got.column("c").to_pylist() == [a + 1 for a in got.column("a").to_pylist()]


# --------------------------------------------------------------------------------------------
# progress trackers


class _Recorder:
    def __init__(self, base):
        class Recorder(base):
            def __init__(self):
                self.calls = []
                self.begun_files = []

            def begin(self, fragment, **kwargs):
                self.calls.append(("begin", fragment.id, fragment.physical_rows, kwargs))
                self.begun_files.append([(list(f.fields), f.file_size_bytes) for f in fragment.files])

            def complete(self, fragment, **kwargs):
                self.calls.append(("complete", fragment.id, fragment.physical_rows,
                                   [(list(f.fields), f.file_size_bytes) for f in fragment.files], kwargs))

        self.cls = Recorder


def test_write_fragments_progress_matches_pylance(tmp_path) -> None:
    table = pa.table({"a": np.arange(10, dtype=np.int64)})
    ref = _Recorder(lance.progress.FragmentWriteProgress).cls()
    lance.fragment.write_fragments(table, str(tmp_path / "ref"), max_rows_per_file=4, progress=ref)
    ours = _Recorder(FragmentWriteProgress).cls()
    write_fragments(table, str(tmp_path / "ours"), max_rows_per_file=4, progress=ours)
    # pylance 14.0.2 never reports its last fragment complete; we do (documented difference)
    assert ours.calls[: len(ref.calls)] == ref.calls
    assert ours.calls[len(ref.calls):] == [("complete", 0, 2, [([0], ours.calls[-1][3][0][1])], {})]


def test_create_progress_names_the_fragment_id(tmp_path) -> None:
    table = pa.table({"a": np.arange(10, dtype=np.int64)})
    ref = _Recorder(lance.progress.FragmentWriteProgress).cls()
    lance.LanceFragment.create(str(tmp_path / "ref"), table, fragment_id=7, progress=ref)
    ours = _Recorder(FragmentWriteProgress).cls()
    meta = LanceFragment.create(str(tmp_path / "ours"), table, fragment_id=7, progress=ours)
    assert meta.id == 7
    assert [c[:3] for c in ours.calls] == [c[:3] for c in ref.calls] == [("begin", 7, None), ("complete", 7, 10)]
    assert ours.begun_files == ref.begun_files == [[([], None)]]  # the file about to be written, as pylance
    assert ours.calls[1][3] == ref.calls[1][3]


def test_write_dataset_progress_calls(tmp_path) -> None:
    table = pa.table({"a": np.arange(9, dtype=np.int64)})
    ours = _Recorder(FragmentWriteProgress).cls()
    lance_gpu.write_dataset(table, str(tmp_path / "ours"), max_rows_per_file=3, progress=ours)
    assert [c[0] for c in ours.calls] == ["begin", "complete"] * 3


def test_file_system_progress_leaves_pylance_files(tmp_path) -> None:
    table = pa.table({"a": np.arange(6, dtype=np.int64)})
    tracker = FileSystemFragmentWriteProgress(str(tmp_path / "progress"), {"worker": "w1"})
    tracker.begin(lance_gpu.FragmentMetadata(id=3, files=[], physical_rows=None))  # type: ignore[arg-type]
    names = sorted(os.listdir(tmp_path / "progress"))
    assert names == ["fragment_3.in_progress", "fragment_3.json"]
    assert json.loads((tmp_path / "progress" / "fragment_3.in_progress").read_text()) == {"fragment_id": 3, "metadata": {"worker": "w1"}}
    restored = lance.FragmentMetadata.from_json((tmp_path / "progress" / "fragment_3.json").read_text())
    assert restored.id == 3 and restored.files == []
    write_fragments(table, str(tmp_path / "ds"), max_rows_per_file=4, progress=tracker)
    assert sorted(os.listdir(tmp_path / "progress")) == ["fragment_0.json", "fragment_3.in_progress", "fragment_3.json"]


def test_data_replacement_of_created_fragment_file(uris) -> None:
    """A column's file rewritten by a worker (``LanceFragment.create`` of the same columns)
    replaces fragment 0's file through ``LanceOperation.DataReplacement``."""
    new = pa.table({"a": pa.array(np.arange(100, 104, dtype=np.int64)), "b": [f"n{k}" for k in range(4)],
                    "st": pa.array([{"x": k, "y": 0.5} for k in range(4)])})

    def run(mod, ds):
        meta = mod.LanceFragment.create(ds.uri, new)
        group = mod.LanceOperation.DataReplacementGroup(0, meta.files[0])
        mod.LanceDataset.commit(ds.uri, mod.LanceOperation.DataReplacement([group]), read_version=ds.version)
        return _layout(mod.dataset(ds.uri).get_fragment(0).metadata)

    ref, ours = _both(uris, run)
    assert ours == ref
    _same_tables(uris)


def test_fragment_merge_committed_with_merge_matches_pylance(uris) -> None:
    extra = pa.table({"key": [0, 2, 4, 6, 8, 10, 99], "z": ["z0", "z2", "z4", "z6", "z8", "z10", "none"]})

    def run(mod, ds):
        metas, schema = [], None
        for frag in ds.get_fragments():
            meta, schema = frag.merge(extra, left_on="a", right_on="key")
            metas.append(meta)
        mod.LanceDataset.commit(ds.uri, mod.LanceOperation.Merge(metas, schema), read_version=ds.version)
        return [_layout(m) for m in metas], schema.to_pyarrow()

    ref, ours = _both(uris, run)
    assert ours == ref
    _same_tables(uris)


def test_create_from_file_appends_as_pylance(tmp_path) -> None:
    """A file written with LanceFileWriter under data/ becomes a fragment (its id renumbered
    by the Append), with either library on either side."""
    import uuid

    from lance_gpu.file import LanceFileWriter

    data = pa.table({"a": pa.array(np.arange(50)), "b": pa.array(np.arange(50) * 2)})
    for mod in (lance_gpu, lance):
        uri = tmp_path / mod.__name__
        ds = lance.write_dataset([], str(uri), schema=data.schema, data_storage_version="stable")
        for n in range(2):
            name = f"{uuid.uuid4()}.lance"
            with LanceFileWriter(str(uri / "data" / name)) as writer:
                writer.write_batch(data)
            frag = mod.LanceFragment.create_from_file(name, mod.dataset(str(uri)), 0)
            assert frag.physical_rows == 50 and frag.files[0].fields == [0, 1]
            if mod is lance_gpu:
                frag = lance.FragmentMetadata.from_json(json.dumps(frag.to_json()))
            ds = lance.LanceDataset.commit(str(uri), lance.LanceOperation.Append([frag]), read_version=ds.version)
            assert [f.fragment_id for f in ds.get_fragments()] == list(range(n + 1))
        assert lance.dataset(str(uri)).count_rows() == 100
        assert lance_gpu.dataset(str(uri)).to_table() == lance.dataset(str(uri)).to_table()


def test_rewrite_numbers_a_created_fragment_as_pylance(tmp_path) -> None:
    """A distributed compaction's file (``create_from_file(..., 0)``) committed by a Rewrite
    gets the next free fragment id, as pylance numbers it; a non-zero id is kept."""
    import uuid

    from lance_gpu.file import LanceFileWriter

    data = pa.table({"a": pa.array(np.arange(40))})
    ids = {}
    for mod in (lance_gpu, lance):
        uri = str(tmp_path / mod.__name__)
        lance.write_dataset(data, uri, max_rows_per_file=10)
        got = []
        for given in (0, 9):
            ds = mod.dataset(uri)
            name = f"{uuid.uuid4()}.lance"
            with LanceFileWriter(os.path.join(uri, "data", name)) as writer:
                writer.write_batch(ds.to_table())
            frag = mod.LanceFragment.create_from_file(name, ds, 0)
            frag.id = given
            group = mod.LanceOperation.RewriteGroup(old_fragments=[f.metadata for f in ds.get_fragments()],
                                                    new_fragments=[frag])
            ds = mod.LanceDataset.commit(uri, mod.LanceOperation.Rewrite(groups=[group], rewritten_indices=[]),
                                         read_version=ds.version)
            got.append([f.fragment_id for f in ds.get_fragments()])
            assert lance.dataset(uri).to_table() == data
        ids[mod.__name__] = got
    assert ids["lance_gpu"] == ids["lance"] == [[4], [9]]


def test_fragment_merge_on_row_id_matches_pylance(uris) -> None:
    def run(mod, ds):
        ids = ds.to_table(columns=[], with_row_id=True).column("_rowid")
        extra = pa.table({"_rowid": ids, "z": pa.array([f"r{k}" for k in range(len(ids))])})
        metas, schema = [], None
        for frag in ds.get_fragments():
            meta, schema = frag.merge(extra, left_on="_rowid")
            metas.append(meta)
        mod.LanceDataset.commit(ds.uri, mod.LanceOperation.Merge(metas, schema), read_version=ds.version)
        return [_layout(m) for m in metas]

    ref, ours = _both(uris, run)
    assert ours == ref
    _same_tables(uris)


def test_data_file_names_as_pylance(tmp_path) -> None:
    """50 characters: 24 bits in binary, 104 in hex (pylance 14's names)."""
    ref = lance.LanceFragment.create(str(tmp_path / "ref"), pa.table({"a": [1]})).files[0].path
    ours = LanceFragment.create(str(tmp_path / "ours"), pa.table({"a": [1]})).files[0].path
    for name in (ref, ours):
        stem = name[: -len(".lance")]
        assert name.endswith(".lance") and len(stem) == 50
        assert set(stem[:24]) <= set("01") and set(stem[24:]) <= set("0123456789abcdef")


def test_merge_with_a_pyarrow_schema_is_deprecated_as_in_pylance(tmp_path) -> None:
    """``LanceOperation.Merge(fragments, pyarrow_schema)`` still commits, with pylance's
    ``DeprecationWarning`` (a ``LanceSchema`` is the supported form)."""
    table = pa.table({"a": list(range(20)), "b": list(range(20))})
    expected = table.append_column("c", pa.array(list(range(20))))
    for mod in (lance, lance_gpu):
        uri = str(tmp_path / mod.__name__)
        mod.write_dataset(table, uri)
        merged = mod.dataset(uri).get_fragments()[0].merge_columns(lambda _: pa.RecordBatch.from_pydict({"c": range(20)}))[0]
        with pytest.deprecated_call(match="pyarrow.Schema to Merge is deprecated"):
            op = mod.LanceOperation.Merge([merged], expected.schema)
        assert mod.LanceDataset.commit(uri, op, read_version=1).to_table() == expected


def _standalone_file(mod, uri: str, fields: list[int], table: pa.Table):
    """A data file written on its own (LanceFileWriter numbers its fields from 0) and the
    DataFile naming the dataset fields it replaces, as pylance's test helpers build it."""
    import uuid

    from lance_gpu.file import LanceFileWriter

    name = f"{uuid.uuid4()}.lance"
    with LanceFileWriter(os.path.join(uri, "data", name)) as writer:
        writer.write_batch(table)
    return mod.fragment.DataFile(path=name, fields=fields, column_indices=list(range(len(fields))),
                                 file_major_version=2, file_minor_version=1)


def test_data_replacement_conflicts_as_pylance(tmp_path) -> None:
    """A standalone file replacing column ``b`` (its own field id 0 for the dataset's 1) is
    read by position, as pylance reads it; a replacement conflicts with an index only on
    the fields it replaces, and with another replacement only on the same fields."""
    outcomes = {}
    for mod in (lance, lance_gpu):
        uri = str(tmp_path / mod.__name__)
        ds = mod.write_dataset(pa.table({"a": list(range(100))}), uri, data_storage_version="2.1")
        ds.add_columns({"b": "a + 1"})
        ds2, ds3 = mod.dataset(uri), mod.dataset(uri)
        ds.create_scalar_index("a", "BTREE")
        new_b = _standalone_file(mod, uri, [1], pa.table({"b": pa.array(range(100, 200))}))
        op = mod.LanceOperation.DataReplacement([mod.LanceOperation.DataReplacementGroup(0, new_b)])
        mod.LanceDataset.commit(uri, op, read_version=ds2.version)  # b: the index on a is not touched
        assert mod.dataset(uri).to_table(columns=["b"]).column(0).to_pylist() == list(range(100, 200))
        new_a = _standalone_file(mod, uri, [0], pa.table({"a": pa.array(range(100, 200))}))
        op = mod.LanceOperation.DataReplacement([mod.LanceOperation.DataReplacementGroup(0, new_a)])
        with pytest.raises(OSError) as caught:
            mod.LanceDataset.commit(uri, op, read_version=ds3.version)  # a: the index at version 3 covers it
        outcomes[mod.__name__] = str(caught.value).split(":")[0]
    assert outcomes["lance_gpu"] == outcomes["lance"] == "Retryable commit conflict for version 3"
    assert lance.dataset(str(tmp_path / "lance_gpu")).to_table() == lance_gpu.dataset(str(tmp_path / "lance_gpu")).to_table()


def test_index_on_a_replaced_column_raises_as_pylance(tmp_path) -> None:
    """``create_scalar_index`` planned before a ``DataReplacement`` of its column raises
    pylance's retryable conflict instead of indexing again (an index of another column, or
    one planned after the replacement, commits)."""
    outcomes = {}
    for mod in (lance, lance_gpu):
        uri = str(tmp_path / mod.__name__)
        ds = mod.write_dataset(pa.table({"a": list(range(100))}), uri, data_storage_version="2.1")
        ds.add_columns({"b": "a + 1"})
        before_a, before_b = mod.dataset(uri), mod.dataset(uri)
        new_b = _standalone_file(mod, uri, [1], pa.table({"b": pa.array(range(100, 200))}))
        mod.LanceDataset.commit(uri, mod.LanceOperation.DataReplacement(
            [mod.LanceOperation.DataReplacementGroup(0, new_b)]), read_version=ds.version)
        before_a.create_scalar_index("a", "BTREE")
        with pytest.raises(OSError) as caught:
            before_b.create_scalar_index("b", "BTREE")
        mod.dataset(uri).create_scalar_index("b", "BTREE")
        outcomes[mod.__name__] = (str(caught.value).split(":")[0], sorted(i["name"] for i in mod.dataset(uri).list_indices()))
    assert outcomes["lance_gpu"] == outcomes["lance"] == ("Retryable commit conflict for version 3", ["a_idx", "b_idx"])
