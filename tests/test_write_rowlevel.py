# SPDX-License-Identifier: Apache-2.0
"""update / merge_insert / insert: the same operations on pylance and lance-gpu from the same
start, then every version compared; pylance reads back what we wrote."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.errors import MergeInsertError

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def _tbl(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table(
        {
            "id": pa.array(ids),
            "x": pa.array(ids * 0.5),
            "s": pa.array([f"row-{i}" for i in ids]),
        }
    )


def _pair(tmp_path, n=3000, rows_per_file=1000, **kw):
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    lance.write_dataset(_tbl(n), ours, max_rows_per_file=rows_per_file, **kw)
    shutil.copytree(ours, ref)
    return ours, ref


def _same(ours: str, ref: str, ordered: bool = True) -> None:
    """Every version: same rows in the same order (``ordered=False``: in any order), same
    fragment layout; and lance-gpu reads what pylance reads."""

    def rows(t: pa.Table) -> pa.Table:
        return t if ordered else t.sort_by([(n, "ascending") for n in t.schema.names])

    a, b = lance.dataset(ours), lance.dataset(ref)
    assert a.version == b.version
    for v in range(1, b.version + 1):
        ta, tb = rows(a.checkout_version(v).to_table()), rows(b.checkout_version(v).to_table())
        assert ta.schema == tb.schema
        assert ta.equals(tb), f"version {v} differs"
        assert rows(lance_gpu.dataset(ours, v).to_table()).equals(ta)
        fa = [(f.count_rows(), f.metadata.physical_rows) for f in a.checkout_version(v).get_fragments()]
        fb = [(f.count_rows(), f.metadata.physical_rows) for f in b.checkout_version(v).get_fragments()]
        assert fa == fb, f"version {v}: fragments {fa} != {fb}"
    ops_a = a.checkout_version(a.version)
    assert [f.fragment_id for f in ops_a.get_fragments()] == [f.fragment_id for f in b.get_fragments()]


@pytest.mark.parametrize("where", ["id % 100 = 7", "id >= 1500", None, "id < 0"])
def test_update_like_pylance(tmp_path, where):
    ours, ref = _pair(tmp_path)
    got = lance_gpu.dataset(ours).update({"x": "x * 2 + 1", "s": "'upd'"}, where=where)
    exp = lance.dataset(ref).update({"x": "x * 2 + 1", "s": "'upd'"}, where=where)
    assert got == exp
    _same(ours, ref)


def test_update_keeps_stable_row_ids(tmp_path):
    ours, ref = _pair(tmp_path, enable_stable_row_ids=True)
    lance_gpu.dataset(ours).update({"x": "0"}, where="id % 10 = 3")
    lance.dataset(ref).update({"x": "0"}, where="id % 10 = 3")
    _same(ours, ref)
    ra = lance.dataset(ours).to_table(columns=["id"], with_row_id=True).sort_by("id")
    rb = lance.dataset(ref).to_table(columns=["id"], with_row_id=True).sort_by("id")
    assert ra.column("_rowid").equals(rb.column("_rowid"))
    versions = ["id", "_row_created_at_version", "_row_last_updated_at_version"]
    assert lance.dataset(ours).to_table(columns=versions).equals(lance.dataset(ref).to_table(columns=versions))
    # a rewritten row keeps its id
    assert lance.dataset(ours).to_table(columns=["id"], filter="id = 13", with_row_id=True)["_rowid"].to_pylist() == [13]


def _source(keys, tag="new"):
    keys = np.asarray(keys)
    return pa.table({"id": pa.array(keys), "x": pa.array(keys * -1.0), "s": pa.array([f"{tag}-{k}" for k in keys])})


@pytest.mark.parametrize(
    "build",
    [
        lambda b: b.when_matched_update_all().when_not_matched_insert_all(),
        lambda b: b.when_matched_update_all(),
        lambda b: b.when_not_matched_insert_all(),
        lambda b: b.when_matched_update_all(condition="source.x < target.x").when_not_matched_insert_all(),
        lambda b: b.when_matched_update_all().when_not_matched_insert_all().when_not_matched_by_source_delete("id < 100"),
        lambda b: b.when_matched_delete(),
    ],
    ids=["upsert", "update-only", "insert-only", "conditional", "by-source-delete", "matched-delete"],
)
def test_merge_insert_like_pylance(tmp_path, build):
    ours, ref = _pair(tmp_path)
    src = _source(list(range(0, 3000, 97)) + list(range(5000, 5010)))
    got = build(lance_gpu.dataset(ours).merge_insert("id")).execute(src)
    exp = build(lance.dataset(ref).merge_insert("id")).execute(src)
    assert {k: got[k] for k in ("num_inserted_rows", "num_updated_rows", "num_deleted_rows")} == {
        k: exp[k] for k in ("num_inserted_rows", "num_updated_rows", "num_deleted_rows")
    }
    _same(ours, ref)


def test_update_reads_what_the_new_values_need(tmp_path):
    """A column set from another column's old value is read even when it is overwritten
    itself (``s`` from ``x``, ``x`` from a constant); deleted rows stay deleted.  Every
    expression sees the row's old values, as SQL's UPDATE says (pylance applies its
    expressions one after another in its hash map's order, so it may show either)."""
    ours, ref = _pair(tmp_path)
    for mod, uri in ((lance_gpu, ours), (lance, ref)):
        mod.dataset(uri).delete("id % 10 = 3")
    got = lance_gpu.dataset(ours).update({"x": "0", "s": "CAST(CAST(x * 2 AS BIGINT) AS STRING)"}, where="id % 7 = 3")
    assert got == lance.dataset(ref).update({"x": "0"}, where="id % 7 = 3") == {"num_rows_updated": 386}
    lance.dataset(ref).update({"s": "CAST(id AS STRING)"}, where="x = 0 AND id % 7 = 3")
    t = lance.dataset(ours).to_table()
    assert t.slice(t.num_rows - 386)["s"].to_pylist() == [str(i) for i in range(3000) if i % 7 == 3 and i % 10 != 3]
    b = lance.dataset(ref).to_table()
    assert t.sort_by("id").equals(b.sort_by("id"))
    assert lance_gpu.dataset(ours).to_table().equals(t)


def _keyed(n: int) -> pa.Table:
    ids = np.arange(n)
    name = pa.array([None if i % 50 == 49 else f"k{i}" for i in ids])
    return pa.table({"id": pa.array(ids), "part": pa.array(ids % 3, pa.int32()), "name": name,
                     "v": pa.array(ids * 0.5)})


@pytest.mark.parametrize("on", ["name", ["part", "id"], "part_nullable"], ids=["string", "compound", "int-nulls"])
def test_merge_insert_other_keys_like_pylance(tmp_path, on):
    """Keys the integer hash join does not take (strings, several columns) and integer keys
    with nulls on both sides (a null key never matches)."""
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    start = _keyed(600)
    if on == "part_nullable":
        start = start.set_column(1, "part", pa.array([None if i % 40 == 0 else i for i in range(600)], pa.int32()))
        on = "part"
    lance.write_dataset(start, ours, max_rows_per_file=200)
    shutil.copytree(ours, ref)
    src = start.take(pa.array(np.arange(1, 600, 13))).set_column(3, "v", pa.array(np.full(47, -1.0)))
    src = pa.concat_tables([src, pa.table({"id": pa.array([10_000, 10_001]), "part": pa.array([None, 7], pa.int32()),
                                           "name": pa.array([None, "new"]), "v": pa.array([1.0, 2.0])})])
    for mod, uri in ((lance_gpu, ours), (lance, ref)):
        mod.dataset(uri).delete("id % 11 = 5")
    got = lance_gpu.dataset(ours).merge_insert(on).when_matched_update_all().when_not_matched_insert_all().execute(src)
    exp = lance.dataset(ref).merge_insert(on).when_matched_update_all().when_not_matched_insert_all().execute(src)
    assert {k: got[k] for k in got} == {k: exp[k] for k in got}
    # pylance writes the new rows of string and compound keys in its hash join's order
    _same(ours, ref, ordered=on == "part")


def test_merge_insert_writes_updated_rows_in_target_order(tmp_path):
    """The source in any order: pylance writes the updated rows in target order, then the
    inserted ones in source order."""
    ours, ref = _pair(tmp_path)
    src = _source([9001, 2500, 17, 9000, 1200, 3, 9002])
    for mod, uri in ((lance_gpu, ours), (lance, ref)):
        mod.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    _same(ours, ref)
    assert lance.dataset(ours).to_table()["id"].to_pylist()[-7:] == [3, 17, 1200, 2500, 9001, 9000, 9002]


def test_merge_insert_condition_over_deleted_rows_like_pylance(tmp_path):
    """The conditional update reads the matched target rows whole, in target order, across
    fragments with deletions."""
    ours, ref = _pair(tmp_path)
    src = _source(list(range(2999, 0, -7)))
    src = src.set_column(1, "x", pa.array(np.where(np.arange(len(src)) % 2 == 0, -1.0, 1e9)))
    for mod, uri in ((lance_gpu, ours), (lance, ref)):
        mod.dataset(uri).delete("id % 5 = 1")
        mod.dataset(uri).merge_insert("id").when_matched_update_all(condition="source.x < target.x").execute(src)
    _same(ours, ref)


def test_merge_insert_stable_row_ids(tmp_path):
    ours, ref = _pair(tmp_path, enable_stable_row_ids=True)
    src = _source([5, 6, 2999, 7000])
    for uri, mod in ((ours, lance_gpu), (ref, lance)):
        mod.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
    a = lance.dataset(ours).to_table(with_row_id=True).sort_by("id")
    b = lance.dataset(ref).to_table(with_row_id=True).sort_by("id")
    assert a.drop_columns(["_rowid"]).equals(b.drop_columns(["_rowid"]))
    assert a.column("_rowid").to_pylist()[:3000] == b.column("_rowid").to_pylist()[:3000]
    assert len(set(a.column("_rowid").to_pylist())) == a.num_rows
    versions = ["id", "_row_created_at_version", "_row_last_updated_at_version"]
    va = lance.dataset(ours).to_table(columns=versions).sort_by("id")
    assert va.equals(lance.dataset(ref).to_table(columns=versions).sort_by("id"))


def test_merge_insert_duplicate_keys_refused(tmp_path):
    ours, ref = _pair(tmp_path)
    src = _source([5, 5, 9000])
    with pytest.raises(OSError, match="Ambiguous"):
        lance.dataset(ref).merge_insert("id").when_matched_update_all().execute(src)
    with pytest.raises(MergeInsertError, match="Ambiguous"):
        lance_gpu.dataset(ours).merge_insert("id").when_matched_update_all().execute(src)
    _same(ours, ref)


def test_insert(tmp_path):
    ours, ref = _pair(tmp_path)
    a, b = lance_gpu.dataset(ours), lance.dataset(ref)
    a.insert(_tbl(10, 9000))
    b.insert(_tbl(10, 9000))
    assert a.version == b.version == 2
    _same(ours, ref)


def test_config_and_metadata_like_pylance(tmp_path):
    ours, ref = _pair(tmp_path, n=100)
    a, b = lance_gpu.dataset(ours), lance.dataset(ref)
    for ds in (a, b):
        assert ds.update_config({"k": "v", "k2": "w"}) == {"k": "v", "k2": "w"}
        ds.delete_config_keys(["k"])
        assert ds.update_metadata({"m": "1"}) == {"m": "1"}
        ds.update_schema_metadata({"s": "2"})
        ds.update_schema_metadata({"t": "3"}, replace=True)
        ds.update_field_metadata({"x": {"f": "4"}})
        ds.replace_field_metadata("s", {"g": "5"})
    assert a.config() == b.config() == {"k2": "w"}
    pa_, pb_ = lance.dataset(ours), lance.dataset(ref)
    assert pa_.version == pb_.version
    assert pa_.schema == pb_.schema and pa_.schema.metadata == {b"t": b"3"}
    assert pa_.schema.field("x").metadata == {b"f": b"4"} and pa_.schema.field("s").metadata == {b"g": b"5"}
    assert pa_.config() == pb_.config() and pa_.metadata == pb_.metadata == {"m": "1"}
    assert lance_gpu.dataset(ours).schema == pa_.schema
    _same(ours, ref)


def test_alter_columns_data_type_like_pylance(tmp_path):
    ours, ref = _pair(tmp_path, n=300, rows_per_file=100)
    for mod, uri in ((lance_gpu, ours), (lance, ref)):
        mod.dataset(uri).delete("id % 7 = 0")
        mod.dataset(uri).alter_columns({"path": "x", "data_type": pa.float32()}, {"path": "id", "name": "key"})
    _same(ours, ref)
    a = lance.dataset(ours)
    assert a.schema.field("x").type == pa.float32() and a.schema.names == lance.dataset(ref).schema.names
    with pytest.raises(ValueError):
        lance_gpu.dataset(ours).alter_columns({"path": "s", "data_type": pa.struct([("q", pa.int8())])})


def test_merge_like_pylance(tmp_path):
    ours, ref = _pair(tmp_path, n=300, rows_per_file=100)
    right = pa.table({"key": pa.array(np.arange(0, 400, 3)), "extra": pa.array([f"e{i}" for i in range(0, 400, 3)]),
                      "w": pa.array(np.arange(0, 400, 3) * 2)})
    for mod, uri in ((lance_gpu, ours), (lance, ref)):
        mod.dataset(uri).delete("id % 10 = 1")
        mod.dataset(uri).merge(right, left_on="id", right_on="key")
    _same(ours, ref)


def test_add_columns_batch_udf_checkpoint(tmp_path):
    ours, ref = _pair(tmp_path, n=300, rows_per_file=100)
    calls = []
    fail = [True]

    def double(batch):
        calls.append(batch.num_rows)
        if fail[0] and len(calls) == 3:
            raise RuntimeError("worker died")
        return pa.record_batch([pa.compute.multiply(batch.column("x"), 2)], names=["x2"])

    ckpt = str(tmp_path / "ckpt.sqlite")
    udf = lance_gpu.batch_udf(output_schema=pa.schema([("x2", pa.float64())]), checkpoint_file=ckpt)(double)
    with pytest.raises(RuntimeError):
        lance_gpu.dataset(ours).add_columns(udf, read_columns=["x"], batch_size=50)
    assert lance.dataset(ours).version == 1  # nothing committed
    done = len(calls) - 1
    fail[0] = False
    calls.clear()
    lance_gpu.dataset(ours).add_columns(udf, read_columns=["x"], batch_size=50)
    assert len(calls) == 6 - done  # the checkpointed batches were not recomputed
    lance.dataset(ref).add_columns(
        lance.batch_udf(output_schema=pa.schema([("x2", pa.float64())]))(double), read_columns=["x"]
    )
    _same(ours, ref)
    assert not __import__("os").path.exists(ckpt)


@pytest.mark.parametrize("rows", [60_000, pytest.param(1_000_000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("every", [100, 2, 1], ids=["1%", "50%", "100%"])
def test_update_and_merge_insert_at_scale(tmp_path, rows, every):
    ours, ref = _pair(tmp_path, n=rows, rows_per_file=max(rows // 4, 1))
    where = f"id % {every} = 0"
    assert lance_gpu.dataset(ours).update({"x": "x + 1"}, where=where) == lance.dataset(ref).update(
        {"x": "x + 1"}, where=where
    )
    src = _source(np.arange(0, rows, every))
    for mod, uri in ((lance_gpu, ours), (lance, ref)):
        got = mod.dataset(uri).merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
        assert got["num_updated_rows"] == len(src) and got["num_inserted_rows"] == 0
    a = lance.dataset(ours).to_table().sort_by("id")
    assert a.equals(lance.dataset(ref).to_table().sort_by("id"))
    assert [f.count_rows() for f in lance.dataset(ours).get_fragments()] == [
        f.count_rows() for f in lance.dataset(ref).get_fragments()
    ]


def _metric(text: str, name: str) -> int:
    import re

    return int(re.search(rf"\b{name}=(\d+)", text).group(1))


def test_merge_insert_explain_and_analyze_like_pylance(tmp_path):
    """pylance's ``explain_plan`` / ``analyze_plan`` on a merge_insert builder: the plan
    names the actions; analyzing runs the merge (same row counts, data files and bytes as
    pylance's) without committing it; a scalar index on the key refuses the explanation
    unless ``use_index(False)`` (an ``OSError``, as pylance's)."""
    data = pa.table({"id": pa.array([1, 2, 3, 4]), "value": ["a", "b", "c", "d"]})
    source = pa.table({"id": pa.array([1, 5]), "value": ["updated_a", "e"]})
    results = {}
    for mod in (lance, lance_gpu):
        uri = str(tmp_path / mod.__name__)
        ds = mod.write_dataset(data, uri)
        builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
        plan = builder.explain_plan()
        assert "MergeInsert: on=[id], when_matched=UpdateAll, when_not_matched=InsertAll" in plan
        assert "Join" in plan and "MergeInsert" in builder.explain_plan(data.schema, verbose=True)
        text = builder.analyze_plan(source)
        results[mod.__name__] = {k: _metric(text, k) for k in ("num_inserted_rows", "num_updated_rows",
                                                                "num_deleted_rows", "num_files_written")}
        assert mod.dataset(uri).version == 1 and mod.dataset(uri).to_table() == data
        ds.create_scalar_index("id", "BTREE")
        with pytest.raises(OSError, match="does not support explain_plan"):
            mod.dataset(uri).merge_insert("id").when_matched_update_all().explain_plan()
        assert "MergeInsert" in mod.dataset(uri).merge_insert("id").when_matched_update_all().use_index(False).explain_plan()
    assert results["lance_gpu"] == results["lance"] == {"num_inserted_rows": 1, "num_updated_rows": 1,
                                                        "num_deleted_rows": 0, "num_files_written": 1}
    assert len(list((tmp_path / "lance_gpu" / "data").iterdir())) == 1  # the analyzed merge left no file


def test_merge_insert_without_actions_is_a_value_error_like_pylance(tmp_path):
    """A merge_insert that changes nothing is refused before reading (``ValueError``, as
    pylance's); ``when_matched_fail`` alone is a check and runs."""
    for mod in (lance, lance_gpu):
        ds = mod.write_dataset(pa.table({"a": [1, 2]}), str(tmp_path / mod.__name__))
        with pytest.raises(ValueError, match="not configured to change the data"):
            ds.merge_insert("a").execute(pa.table({"a": [1]}))
        assert ds.merge_insert("a").when_matched_fail().execute(pa.table({"a": [3]}))["num_inserted_rows"] == 0


@pytest.mark.parametrize("stable", [False, True], ids=["addresses", "stable-row-ids"])
def test_merge_insert_execute_uncommitted_as_pylance(tmp_path, stable: bool) -> None:
    """``execute_uncommitted`` writes the merge's files and returns ``(Transaction, stats)``
    without a new version; committing the transaction gives pylance's rows and row ids."""
    table = pa.table({"id": pa.array(range(10), pa.int64()), "updated": [False] * 10})
    updates = pa.table({"id": pa.array([1, 20], pa.int64()), "updated": [True, True]})
    results = {}
    for name, module in (("pylance", lance), ("ours", lance_gpu)):
        ds = module.write_dataset(table, str(tmp_path / name), enable_stable_row_ids=stable)
        txn, stats = (ds.merge_insert(on="id").when_matched_update_all().when_not_matched_insert_all()
                      .execute_uncommitted(updates))
        assert isinstance(txn, module.Transaction) and isinstance(txn.operation, module.LanceOperation.Update)
        assert txn.read_version == 1 and module.dataset(str(tmp_path / name)).version == 1
        committed = module.LanceDataset.commit(ds, txn)
        results[name] = (stats, committed.version, committed.to_table(with_row_id=True).sort_by("id"))
    assert results["ours"][:2] == results["pylance"][:2]
    assert results["ours"][2].equals(results["pylance"][2])
    assert lance.dataset(str(tmp_path / "ours")).to_table().sort_by("id").equals(results["pylance"][2].drop_columns(["_rowid"]))


def _nullable(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({
        "id": pa.array(ids),
        "x": pa.array([None if i % 5 == 0 else i * 0.5 for i in ids], pa.float64()),
        "s": pa.array([None if i % 7 == 0 else f"row-{i}" for i in ids]),
    })


@pytest.mark.parametrize(
    ("updates", "where"),
    [
        ({"x": "x + 1"}, "x > 10"),  # NULLs of the predicate's column: not matched
        ({"s": "'u'"}, "s = 'row-41'"),
        ({"x": "id * 2"}, "s IS NULL"),  # the predicate's column is not one the update reads
        ({"x": "0"}, "id < 0"),  # no match: an empty Update
        ({"s": "s || '!'"}, None),  # every row
        ({"x": "x * 2"}, "true"),
        ({"x": "-1"}, "id % 3 = 1 AND s IS NOT NULL AND x < 30"),
    ],
)
def test_small_update_reads_as_the_scan_and_pylance(tmp_path, monkeypatch, updates, where):
    """An update of a dataset of a few small fragments reads its rows without planning a scan
    (``_small_update_rows``): the same rows, version and fragments as pylance's update and as
    our planned scan, on NULLs, strings, no match and every row, with deleted rows."""
    from lance_gpu.write import rowlevel

    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    for i in range(6):
        lance.write_dataset(_nullable(16, 16 * i), ours, mode="append")
    lance.dataset(ours).delete("id % 11 = 4")
    shutil.copytree(ours, ref)
    planned = str(tmp_path / "planned")
    shutil.copytree(ours, planned)

    def no_scan(*args, **kwargs):
        raise AssertionError("a small update planned a scan")

    with monkeypatch.context() as m:
        m.setattr(rowlevel, "scanner_for", no_scan)
        got = lance_gpu.dataset(ours).update(updates, where=where)
    assert got == lance.dataset(ref).update(updates, where=where)
    _same(ours, ref)
    monkeypatch.setattr(rowlevel, "_SMALL_UPDATE_ROWS", -1)  # the planned scan
    assert lance_gpu.dataset(planned).update(updates, where=where) == got
    assert lance.dataset(planned).to_table().equals(lance.dataset(ours).to_table())


def test_small_update_errors_as_pylance(tmp_path):
    """A predicate naming no column, or a value the column cannot hold, raises the class
    pylance raises, and commits nothing."""
    ours = str(tmp_path / "ours")
    lance.write_dataset(_nullable(40), ours, max_rows_per_file=16)
    for updates, where in (({"x": "1"}, "nope = 1"), ({"x": "'abc'"}, "id = 3")):
        with pytest.raises(Exception) as theirs:
            lance.dataset(ours).update(updates, where=where)
        with pytest.raises(theirs.type):
            lance_gpu.dataset(ours).update(updates, where=where)
        assert lance.dataset(ours).version == 1
