# SPDX-License-Identifier: Apache-2.0
"""Scalar indices (BTREE, BITMAP, LABEL_LIST) against pylance 14: files we write are the ones
pylance writes (read back with pylance's file reader) and pylance uses them; our scans use
pylance's and our own indices to read only the rows they select, with the scan's results;
list / describe / drop, refusals, and indices across append, delete, update, compaction and
optimize_indices as pylance keeps them."""

from __future__ import annotations

import os
import shutil
import struct

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.index.rowset import deserialize_rowset

lance = pytest.importorskip("lance")
from lance.file import LanceFileReader  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::Warning")

N = 6000
FILTERS = [
    "i = 4099", "i < 40", "i >= 5990", "i > 100 AND i <= 130", "i BETWEEN 2000 AND 2010", "i IN (3, 4096, 5999, 77777)",
    "i IS NULL", "s = 'v3'", "s IS NULL", "s IN ('v1', 'v5')", "s > 'v4'", "f = 0", "f > 45.5", "f < -49",
    "array_has_any(tags, ['t1'])", "array_has_all(tags, ['t1', 't2'])", "array_has(tags, 't3')",
    "array_contains(tags, 'zz')", "i < 100 OR s = 'v2'", "i < 3000 AND array_has_any(tags, ['t0', 't4'])",
    "s = 'v3' AND x > 0.5", "i = 5 OR x > 0.99", "s != 'v3'", "s IS NOT NULL", "s <> 'v1' AND i < 100",
    "s != 'v3' OR s IS NULL", "s NOT IN ('v3', 'v4')", "NOT (s = 'v2')", "NOT (s IS NULL) AND i < 300",
    "s LIKE 'v3%'", "starts_with(s, 'v') AND i < 200", "s LIKE 'v_'",
]
INDICES = [("i", "BTREE"), ("s", "BITMAP"), ("f", "BTREE"), ("tags", "LABEL_LIST")]


def _table(n: int = N, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(start)
    r = np.arange(start, start + n)
    return pa.table({
        "i": pa.array(r, pa.int64(), mask=r % 17 == 0),
        "s": pa.array([f"v{k % 7}" for k in r], mask=r % 13 == 0),
        "f": pa.array([-0.0 if k % 50 == 0 else float(k % 100) - 50 for k in r], pa.float64()),
        "tags": pa.array([None if k % 11 == 0 else [f"t{k % 5}", f"t{k % 3}"] + ([None] if k % 7 == 0 else []) for k in r]),
        "x": pa.array(rng.random(n)),
    })


def _make(uri: str, n: int = N, stable_row_ids: bool = False) -> None:
    lance.write_dataset(_table(n), uri, max_rows_per_file=2000, enable_stable_row_ids=stable_row_ids)


def _sort(t: pa.Table) -> pa.Table:
    return t.sort_by([("x", "ascending")])


def _check_filters(uri: str, filters=FILTERS) -> None:
    """Our results with indices = our scan without = pylance's (with its indices)."""
    ours, theirs = lance_gpu.dataset(uri, device="cpu"), lance.dataset(uri)
    for flt in filters:
        got = ours.to_table(filter=flt)
        assert got.equals(ours.to_table(filter=flt, use_scalar_index=False)), flt
        assert _sort(got).equals(_sort(theirs.to_table(filter=flt))), flt


def _selected(ds, flt: str) -> tuple[int, tuple[str, ...]]:
    plan = ds.scanner(filter=flt).plan
    rows = sum(ds.snapshot.fragment(f).live_count() if s is None else int(s.size) for f, s in zip(plan.fragment_ids, plan.selections, strict=False))
    return rows, plan.index_queries


def _index_files(uri: str) -> dict:
    """Every index's files, as pylance's file reader reads them (row sets decoded), with the
    label list's null-list global buffer."""
    out = {}
    for info in lance.dataset(uri).list_indices():
        d = os.path.join(uri, "_indices", info["uuid"])
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            reader = LanceFileReader(path)
            meta = reader.metadata()
            out[(info["name"], name, "version")] = (meta.major_version, meta.minor_version)
            t = reader.read_all().to_table()
            if "bitmaps" in t.column_names:
                value = (t.column("keys").to_pylist(), [deserialize_rowset(b) for b in t.column("bitmaps").to_pylist()],
                         t.schema.metadata, _global_buffers(path)[1:])
            elif name == "page_data.lance":
                # values in order; rows of equal values in any order (pylance's sort is unstable)
                cols = t.to_pydict()
                pairs = sorted(zip(cols["values"], cols["ids"], strict=False), key=lambda p: (p[0] is not None, p[0] if p[0] is not None else 0, p[1]))
                value = (cols["values"], pairs, t.schema)
            else:
                value = (t.to_pydict(), t.schema)
            out[(info["name"], name)] = value
        out[info["name"]] = (info["type"], info["fields"], sorted(info["fragment_ids"]))
    return out


def _global_buffers(path: str) -> list[dict | bytes]:
    data = open(path, "rb").read()
    _a, _b, c, count = struct.unpack_from("<QQQI", data, len(data) - 40)
    out: list[dict | bytes] = []
    for k in range(count):
        pos, size = struct.unpack_from("<QQ", data, c + 16 * k)
        out.append(data[pos:pos + size] if k == 0 else deserialize_rowset(data[pos:pos + size]))
    return out


# --------------------------------------------------------------------------------------------
# building: our files are pylance's, pylance uses them


@pytest.mark.parametrize("stable_row_ids, storage", [(False, "2.2"), (True, "2.2"), (False, "2.0"), (False, "2.1")])
def test_indices_we_build_are_pylances(tmp_path, stable_row_ids, storage):
    """(With stable row ids pylance's btree holds row addresses, its bitmaps row ids.  Index
    files are written in the dataset's file version.)"""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance.write_dataset(_table(), ours, max_rows_per_file=2000, enable_stable_row_ids=stable_row_ids,
                        data_storage_version=storage)
    shutil.copytree(ours, theirs)
    g, p = lance_gpu.dataset(ours), lance.dataset(theirs)
    for column, kind in INDICES:
        g.create_scalar_index(column, kind)
        p.create_scalar_index(column, kind)
    assert g.version == p.version == 5
    a, b = _index_files(ours), _index_files(theirs)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == b[key], key
    # the manifest entries and transactions as pylance's, bar uuids and times
    strip = [{k: v for k, v in d.items() if k != "uuid"} for d in lance.dataset(ours).list_indices()]
    assert strip == [{k: v for k, v in d.items() if k != "uuid"} for d in lance.dataset(theirs).list_indices()]
    assert lance.dataset(ours).list_indices() == lance_gpu.dataset(ours).list_indices()
    entries = [[(i.name, list(i.fields), i.dataset_version, i.index_version, i.fragment_bitmap, i.index_details)
                for i in lance_gpu.dataset(uri).index_metadata] for uri in (ours, theirs)]
    assert entries[0] == entries[1]
    txn = lance.dataset(ours).get_transactions(1)[0]
    assert type(txn.operation).__name__ == "CreateIndex" and [i.name for i in txn.operation.new_indices] == ["tags_idx"]
    # pylance plans index queries on them
    ds = lance.dataset(ours)
    for flt, name in [("i = 7", "i_idx(BTree)"), ("s = 'v1'", "s_idx(Bitmap)"), ("array_has_any(tags, ['t1'])", "tags_idx(LabelList)")]:
        assert f"@{name}" in ds.scanner(filter=flt).explain_plan(), flt
        # ours too (with stable row ids a bitmap's row ids are mapped to addresses)
        rows, used = _selected(lance_gpu.dataset(ours), flt)
        assert len(used) == 1 and used[0].endswith(f"@{name}"), (flt, used)
        assert rows == lance_gpu.dataset(ours).count_rows(flt), flt
    _check_filters(ours)


def test_pylance_built_indices_select_rows(tmp_path):
    uri = str(tmp_path / "ds")
    _make(uri)
    ds = lance.dataset(uri)
    for column, kind in INDICES:
        ds.create_scalar_index(column, kind)
    _check_filters(uri)
    g = lance_gpu.dataset(uri)
    rows, used = _selected(g, "i = 4099")
    assert rows == 1 and used == ("[i = 4099]@i_idx(BTree)",)
    rows, used = _selected(g, "s = 'v3'")
    assert rows == g.count_rows("s = 'v3'") and used[0].endswith("@s_idx(Bitmap)")
    rows, used = _selected(g, "array_has_all(tags, ['t1', 't2'])")
    assert rows == g.count_rows("array_has_all(tags, ['t1', 't2'])") and "LabelList" in used[0]
    # an unindexed conjunct is refined on the selected rows only; an unindexed disjunct reads all
    assert _selected(g, "s = 'v3' AND x > 0.5")[0] == g.count_rows("s = 'v3'")
    assert _selected(g, "i = 5 OR x > 0.99") == (N, ())
    # the btree reads only the pages the lookup says may hold the value
    from lance_gpu.index.scalar import open_scalar_index

    btree = open_scalar_index(g.store, g.root, next(i for i in g.index_metadata if i.name == "i_idx"))
    before = btree.rows_read
    g.to_table(filter="i = 5000")
    assert 0 < btree.rows_read - before <= 4096 < N  # one page of the two
    assert "ScalarIndexQuery: query=[i = 4099]@i_idx(BTree)" in g.scanner(filter="i = 4099").explain_plan()


def test_use_scalar_index_false_and_fragments(tmp_path):
    uri = str(tmp_path / "ds")
    _make(uri)
    lance.dataset(uri).create_scalar_index("i", "BTREE")
    g = lance_gpu.dataset(uri)
    assert g.scanner(filter="i = 3", use_scalar_index=False).plan.index_queries == ()
    frag = g.get_fragments()[1]
    assert frag.to_table(filter="i = 2500")["i"].to_pylist() == [2500]
    assert g.scanner(filter="i = 2500", fragments=[g.get_fragments()[0]]).to_table().num_rows == 0
    got = g.to_table(filter="i < 100", with_row_id=True, limit=5, offset=3)
    assert got.equals(g.to_table(filter="i < 100", with_row_id=True, limit=5, offset=3, use_scalar_index=False))


# --------------------------------------------------------------------------------------------
# list / describe / drop, refusals


def test_list_describe_drop_like_pylance(tmp_path):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _make(ours)
    lance.dataset(ours).delete("i < 10")
    shutil.copytree(ours, theirs)
    for ds in (lance_gpu.dataset(ours), lance.dataset(theirs)):
        ds.create_scalar_index("s", "BITMAP")
        ds.create_scalar_index("i", "BTREE", name="by_i")
        ds.create_scalar_index("i", "BITMAP", name="by_i", replace=True)
    g, p = lance_gpu.dataset(ours), lance.dataset(theirs)
    for a, b in zip(g.describe_indices(), p.describe_indices(), strict=True):
        assert (a.name, a.type_url, a.index_type, a.fields, a.field_names, a.num_rows_indexed) == \
            (b.name, b.type_url, b.index_type, b.fields, b.field_names, b.num_rows_indexed)
        sa, sb = a.segments[0], b.segments[0]
        assert (sa.fragment_ids, sa.dataset_version_at_last_update, sa.index_version) == \
            (sb.fragment_ids, sb.dataset_version_at_last_update, sb.index_version)
        # sizes: our files' (our encodings may differ from pylance's in size)
        d = os.path.join(ours, "_indices", sa.uuid)
        assert a.total_size_bytes == sa.size_bytes == sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    assert [(d["name"], d["type"], d["version"]) for d in g.list_indices()] == \
        [(d["name"], d["type"], d["version"]) for d in p.list_indices()] == [("by_i", "Bitmap", 4), ("s_idx", "Bitmap", 2)]
    g.drop_index("by_i")
    p.drop_index("by_i")
    assert [d["name"] for d in lance.dataset(ours).list_indices()] == [d["name"] for d in p.list_indices()] == ["s_idx"]
    for ds in (g, p):
        with pytest.raises(RuntimeError, match="not found"):
            ds.drop_index("by_i")


@pytest.mark.parametrize("args, exc, match", [
    (("nope", "BTREE"), KeyError, "nope not found in schema"),
    (("i", "FOO"), NotImplementedError, "Received FOO"),
    (("tags", "BTREE"), TypeError, "BTREE/BITMAP index column tags must be"),
    (("x", "LABEL_LIST"), TypeError, "LABEL_LIST index column x must be a list"),
    (("i", "BTREE", None, {"fragment_ids": [0]}), ValueError, "BTREE distributed indexing uses create_index_uncommitted"),
])
def test_bad_input_refused_as_pylance(tmp_path, args, exc, match):
    uri = str(tmp_path / "ds")
    _make(uri, 100)
    args, kwargs = (args[:3], args[3]) if len(args) == 4 else (args, {})
    for ds in (lance_gpu.dataset(uri), lance.dataset(uri)):
        with pytest.raises(exc, match=match):
            ds.create_scalar_index(*args, **kwargs)
    assert lance.dataset(uri).version == 1 and not os.path.exists(os.path.join(uri, "_indices"))


def test_existing_names_refused_as_pylance(tmp_path):
    uri = str(tmp_path / "ds")
    _make(uri, 100)
    lance.dataset(uri).create_scalar_index("i", "BTREE")
    for ds in (lance_gpu.dataset(uri), lance.dataset(uri)):
        with pytest.raises(RuntimeError, match="already exists, please specify a different name or use replace=True"):
            ds.create_scalar_index("i", "BTREE", replace=False)
        with pytest.raises(RuntimeError, match="already exists with different fields"):
            ds.create_scalar_index("s", "BTREE", name="i_idx")
    assert lance.dataset(uri).version == 2


# --------------------------------------------------------------------------------------------
# across append, delete, update, compaction, optimize_indices


@pytest.mark.parametrize("stable_row_ids", [False, True])
def test_append_delete_update_keep_indices_as_pylance(tmp_path, stable_row_ids):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _make(ours, stable_row_ids=stable_row_ids)
    for column, kind in INDICES:
        lance.dataset(ours).create_scalar_index(column, kind)
    shutil.copytree(ours, theirs)
    for uri, mod in ((ours, lance_gpu), (theirs, lance)):
        mod.write_dataset(_table(1000, start=N), uri, mode="append")
        mod.dataset(uri).delete("i % 10 = 3")
        mod.dataset(uri).update({"s": "'v3'"}, where="i = 4100 OR i = 6100")
    a, b = lance.dataset(ours).list_indices(), lance.dataset(theirs).list_indices()
    assert [(d["name"], sorted(d["fragment_ids"])) for d in a] == [(d["name"], sorted(d["fragment_ids"])) for d in b]
    _check_filters(ours, [*FILTERS, "s = 'v3' AND i > 4000", "i = 6100", "i = 4100"])
    g = lance_gpu.dataset(ours)
    plan = g.scanner(filter="i = 6002").plan
    # the appended fragment (and the update's new one) are not covered: read whole
    assert [f for f, s in zip(plan.fragment_ids, plan.selections, strict=False) if s is None] == [3, 4]
    assert g.to_table(filter="i = 6002")["i"].to_pylist() == [6002]


@pytest.mark.parametrize("merge", [None, 0])
def test_optimize_indices_like_pylance(tmp_path, merge):
    """Default: one entry over every fragment; ``num_indices_to_merge=0``: a delta segment."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _make(ours)
    for column, kind in INDICES:
        lance.dataset(ours).create_scalar_index(column, kind)
    lance.write_dataset(_table(1000, start=N), ours, mode="append")
    lance.dataset(ours).delete("i % 10 = 3")
    shutil.copytree(ours, theirs)
    kwargs = {} if merge is None else {"num_indices_to_merge": merge}
    lance_gpu.dataset(ours).optimize.optimize_indices(**kwargs)
    lance.dataset(theirs).optimize.optimize_indices(**kwargs)
    a, b = lance.dataset(ours), lance.dataset(theirs)
    assert len(a.list_indices()) == len(INDICES) * (2 if merge == 0 else 1)
    assert a.version == b.version
    strip = [{k: v for k, v in d.items() if k != "uuid"} for d in a.list_indices()]
    assert strip == [{k: v for k, v in d.items() if k != "uuid"} for d in b.list_indices()]
    assert [d.num_rows_indexed for d in a.describe_indices()] == [d.num_rows_indexed for d in b.describe_indices()]
    assert "ScalarIndexQuery" in a.scanner(filter="i = 6002").explain_plan()
    assert _selected(lance_gpu.dataset(ours), "i = 6002")[0] == 1
    _check_filters(ours)
    version = a.version
    lance_gpu.dataset(ours).optimize.optimize_indices(**kwargs)  # up to date: nothing committed
    assert lance.dataset(ours).version == version


@pytest.mark.parametrize("stable_row_ids, storage", [(False, "2.2"), (True, "2.2"), (False, "2.0")])
def test_compaction_remaps_bitmap_and_label_list_like_pylance(tmp_path, stable_row_ids, storage):
    """(With stable row ids bitmaps and label lists keep their files, their fragment bitmaps
    move to the new fragments; btrees are remapped.)"""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    lance.write_dataset(_table(), ours, max_rows_per_file=2000, enable_stable_row_ids=stable_row_ids,
                        data_storage_version=storage)
    for column, kind in INDICES:
        lance_gpu.dataset(ours).create_scalar_index(column, kind)
    lance.dataset(ours).delete("i % 5 = 2")
    shutil.copytree(ours, theirs)
    lance_gpu.dataset(ours).optimize.compact_files(target_rows_per_fragment=3000)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=3000)
    a, b = _index_files(ours), _index_files(theirs)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == b[key], key
    uuids = [[d["uuid"] for d in lance.dataset(uri).list_indices()] for uri in (ours, theirs)]
    assert [x == y for x, y in zip(*uuids, strict=True)] == [False, False, stable_row_ids, stable_row_ids]  # f, i, s, tags
    _check_filters(ours)


@pytest.mark.gpu
def test_gpu_scan_uses_the_index_selection(tmp_path):
    """``device="gpu"``: the rows an index selects decode on the device; results are the CPU's."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(600).drop_columns(["tags"]), uri, max_rows_per_file=200)
    lance.dataset(uri).create_scalar_index("i", "BTREE")
    lance.dataset(uri).create_scalar_index("s", "BITMAP")
    gpu, cpu = lance_gpu.dataset(uri, device="gpu"), lance_gpu.dataset(uri, device="cpu")
    for flt in ["i = 301", "i < 30 OR s = 'v2'", "s IS NULL"]:
        assert gpu.scanner(filter=flt).plan.index_queries, flt
        assert gpu.to_table(filter=flt, on_cpu_fallback="allow").equals(cpu.to_table(filter=flt)), flt


def test_index_built_while_another_writer_appends(tmp_path):
    """The CreateIndex commits on top of a concurrent append; the appended rows are scanned."""
    uri = str(tmp_path / "ds")
    _make(uri, 1000)
    g = lance_gpu.dataset(uri)
    lance.write_dataset(_table(500, start=1000), uri, mode="append")
    g.create_scalar_index("i", "BTREE")
    assert g.version == 3
    p = lance.dataset(uri)
    assert [sorted(d["fragment_ids"]) for d in p.list_indices()] == [[0]]
    assert [t.operation.__class__.__name__ for t in p.get_transactions(2)] == ["CreateIndex", "Append"]
    _check_filters(uri, ["i = 1200", "i < 20", "i > 1490"])


def test_index_stats_like_pylance(tmp_path):
    uri = str(tmp_path / "ds")
    _make(uri)
    for column, kind in INDICES:
        lance.dataset(uri).create_scalar_index(column, kind)
    lance.write_dataset(_table(500, start=N), uri, mode="append")
    lance.dataset(uri).delete("i % 9 = 4")
    ours, theirs = lance_gpu.dataset(uri), lance.dataset(uri)
    for column, _kind in INDICES:
        name = f"{column}_idx"
        assert ours.stats.index_stats(name) == theirs.stats.index_stats(name), name
    for ds in (ours, theirs):
        with pytest.raises(KeyError, match="not found"):
            ds.stats.index_stats("nope")


def test_delta_segments_of_one_index(tmp_path):
    """pylance's ``optimize_indices(num_indices_to_merge=0)`` adds a segment (a second entry of
    the name) over the new fragments: listed, described and used like pylance."""
    uri = str(tmp_path / "ds")
    _make(uri)
    for column, kind in INDICES:
        lance.dataset(uri).create_scalar_index(column, kind)
    lance.write_dataset(_table(1000, start=N), uri, mode="append")
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)
    ours, theirs = lance_gpu.dataset(uri), lance.dataset(uri)
    assert ours.list_indices() == theirs.list_indices() and len(ours.list_indices()) == 2 * len(INDICES)
    for a, b in zip(ours.describe_indices(), theirs.describe_indices(), strict=True):
        assert (a.name, a.num_rows_indexed, [s.fragment_ids for s in a.segments]) == \
            (b.name, b.num_rows_indexed, [s.fragment_ids for s in b.segments])
    rows, used = _selected(ours, "i = 6002")
    assert rows == 1 and used
    _check_filters(uri, ["i = 6002", "i > 6990", "s = 'v3'", "array_has_any(tags, ['t1'])"])


def test_column_types(tmp_path):
    """BTree / Bitmap indices on integer, unsigned, boolean, float32, date, timestamp,
    decimal, binary, fixed-size binary and large-string columns: ours are pylance's files,
    pylance's answer with the scan's rows."""
    import datetime as dt
    import decimal

    n = 300
    t = pa.table({
        "i8": pa.array([x % 50 - 25 if x % 7 else None for x in range(n)], pa.int8()),
        "u32": pa.array([x * 3 for x in range(n)], pa.uint32()),
        "b": pa.array([x % 3 == 0 if x % 5 else None for x in range(n)]),
        "f32": pa.array([float(x % 10) / 2 if x % 9 else None for x in range(n)], pa.float32()),
        "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=x % 40) for x in range(n)]),
        "ts": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(hours=x) for x in range(n)], pa.timestamp("us")),
        "dec": pa.array([decimal.Decimal(x % 20) / 4 for x in range(n)], pa.decimal128(10, 2)),
        "bin": pa.array([bytes([x % 9]) for x in range(n)]),
        "ls": pa.array([f"s{x % 11}" for x in range(n)], pa.large_string()),
        "ts_tz": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(hours=x) for x in range(n)], pa.timestamp("us", tz="UTC")),
        "fsb": pa.array([bytes([x % 7, 1]) for x in range(n)], pa.binary(2)),
        "u64": pa.array([x * 3 for x in range(n)], pa.uint64()),
    })
    uri, ours = str(tmp_path / "ds"), str(tmp_path / "ours")
    lance.write_dataset(t, uri, max_rows_per_file=100)
    shutil.copytree(uri, ours)
    ds, g = lance.dataset(uri), lance_gpu.dataset(ours)
    for k, c in enumerate(t.column_names):
        ds.create_scalar_index(c, "BTREE" if k % 2 else "BITMAP")
        g.create_scalar_index(c, "BTREE" if k % 2 else "BITMAP")
    assert _index_files(ours) == _index_files(uri)  # our files are pylance's, type by type
    filters = ["i8 = -3", "i8 < -20", "i8 IN (1, 2, 3)", "u32 BETWEEN 30 AND 60", "u32 > 800", "b = true", "b IS NULL",
               "f32 = 2.5", "f32 > 4", "d = date '2024-01-05'", "d BETWEEN date '2024-01-02' AND date '2024-01-09'",
               "ts >= timestamp '2024-01-10 00:00:00'", "dec > 4", "dec = CAST(2.25 AS DECIMAL(10,2))", "bin = X'03'",
               "ls = 's3'", "ls > 's8'"]
    g = lance_gpu.dataset(uri)
    for flt in filters:
        assert g.scanner(filter=flt).plan.index_queries, flt
    _check_filters_plain(uri, filters)


def _check_filters_plain(uri: str, filters) -> None:
    ours, theirs = lance_gpu.dataset(uri, device="cpu"), lance.dataset(uri)
    for flt in filters:
        got = ours.to_table(filter=flt)
        assert got.equals(ours.to_table(filter=flt, use_scalar_index=False)), flt
        assert got.equals(theirs.to_table(filter=flt)), flt


def test_create_index_operation_from_pylance_shapes(tmp_path):
    """``LanceOperation.CreateIndex`` committed through our commit takes pylance's ``Index``
    objects: pylance's drop of an index replayed by us."""
    uri = str(tmp_path / "ds")
    _make(uri, 500)
    lance.dataset(uri).create_scalar_index("i", "BTREE")
    lance.dataset(uri).create_scalar_index("s", "BITMAP")
    ds = lance.dataset(uri)
    ds.drop_index("s_idx")
    dropped = lance.dataset(uri).get_transactions(1)[0].operation
    lance.dataset(uri, version=3).restore()  # back to both indices
    before = lance.dataset(uri).version
    assert [d["name"] for d in lance.dataset(uri).list_indices()] == ["i_idx", "s_idx"]
    op = lance_gpu.LanceOperation.CreateIndex(new_indices=dropped.new_indices, removed_indices=dropped.removed_indices)
    lance_gpu.LanceDataset.commit(uri, op, read_version=before)
    assert [d["name"] for d in lance.dataset(uri).list_indices()] == ["i_idx"]
    assert lance.dataset(uri).version == before + 1


def test_delete_reads_the_rows_an_index_selects(tmp_path, monkeypatch):
    """A delete by an indexed predicate evaluates it on the index's rows only; the result is
    pylance's delete."""
    from lance_gpu.write import operations

    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _make(ours)
    lance.dataset(ours).create_scalar_index("i", "BTREE")
    shutil.copytree(ours, theirs)
    seen = []
    real = operations.decode_spans
    monkeypatch.setattr(operations, "decode_spans",
                        lambda ds, units, fields, **kw: (seen.extend(u.rows.size for u in units), real(ds, units, fields, **kw))[1])
    assert lance_gpu.dataset(ours).delete("i = 4099 OR i IN (10, 11)") == {"num_deleted_rows": 3}
    lance.dataset(theirs).delete("i = 4099 OR i IN (10, 11)")
    assert seen == [2, 1]  # two rows of fragment 0, one of fragment 2
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())


def test_schema_changes_keep_or_refuse_as_pylance(tmp_path):
    """A cast of an indexed column is refused (OSError) as pylance; a rename and added
    columns keep the index, which filters on the new name use."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _make(ours, 300)
    lance.dataset(ours).create_scalar_index("s", "BITMAP")
    shutil.copytree(ours, theirs)
    for mod, uri in ((lance_gpu, ours), (lance, theirs)):
        with pytest.raises(OSError, match=r"Cannot cast column\(s\) \[s\] to a new type: they have 1 index\(es\) attached: \[s_idx\]"):
            mod.dataset(uri).alter_columns({"path": "s", "data_type": pa.large_string()})
        mod.dataset(uri).alter_columns({"path": "s", "name": "s2"})
        mod.dataset(uri).add_columns({"z": "x * 2"})
    assert lance.dataset(ours).list_indices()[0]["fields"] == lance.dataset(theirs).list_indices()[0]["fields"] == ["s2"]
    assert lance_gpu.dataset(ours).scanner(filter="s2 = 'v1'").plan.index_queries
    _check_filters_plain(ours, ["s2 = 'v1'", "s2 IS NULL"])


def test_vector_indices_listed_and_described_as_pylance(tmp_path):
    uri = str(tmp_path / "ds")
    vectors = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
    lance.write_dataset(pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8), "i": pa.array(range(300))}), uri)
    ds = lance.dataset(uri)
    ds.create_index("v", "IVF_PQ", name="pq", num_partitions=2, num_sub_vectors=2)
    ds.create_index("v", "IVF_HNSW_SQ", name="hnsw", num_partitions=2)
    ds.create_scalar_index("i", "BTREE")
    ours, theirs = lance_gpu.dataset(uri), lance.dataset(uri)
    assert ours.list_indices() == theirs.list_indices()
    assert [(d.name, d.index_type, d.type_url, d.num_rows_indexed) for d in ours.describe_indices()] == \
        [(d.name, d.index_type, d.type_url, d.num_rows_indexed) for d in theirs.describe_indices()]
    assert ours.to_table(filter="i = 7")["i"].to_pylist() == [7]


def test_nearest_prefilter_uses_the_index(tmp_path):
    """An exact search with ``prefilter=True`` searches the rows the index selects (pylance's
    rows); a post-filter searches every row."""
    uri = str(tmp_path / "ds")
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((3000, 8)).astype(np.float32)
    lance.write_dataset(pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8),
                                  "c": pa.array([f"c{k % 30}" for k in range(3000)])}), uri, max_rows_per_file=1000)
    lance.dataset(uri).create_scalar_index("c", "BITMAP")
    ours, theirs = lance_gpu.dataset(uri), lance.dataset(uri)
    nearest = {"column": "v", "q": vectors[5], "k": 5, "use_index": False}
    for prefilter in (True, False):
        scanner = ours.scanner(nearest=nearest, filter="c = 'c5'", prefilter=prefilter)
        assert bool(scanner.plan.index_queries) == prefilter
        got = scanner.to_table()
        want = theirs.to_table(nearest=nearest, filter="c = 'c5'", prefilter=prefilter)
        assert got.column("c").to_pylist() == want.column("c").to_pylist()
        assert np.allclose(got.column("_distance").to_numpy(), want.column("_distance").to_numpy(), rtol=1e-5)


def test_index_rebuilt_after_a_concurrent_compaction(tmp_path, monkeypatch):
    """A compaction committed while the index is built makes it stale: it is built again on
    the latest version (as pylance's retries do) and answers with the compacted rows."""
    from lance_gpu.write import indices

    uri = str(tmp_path / "ds")
    _make(uri, 3000)
    lance.dataset(uri).delete("i % 4 = 1")
    real, calls = indices._build, []

    def build(ds, *args, **kwargs):
        calls.append(ds.version)
        out = real(ds, *args, **kwargs)
        if len(calls) == 1:
            lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=3000)
        return out

    monkeypatch.setattr(indices, "_build", build)
    lance_gpu.dataset(uri).create_scalar_index("i", "BTREE")
    p = lance.dataset(uri)
    assert calls == [2, p.version - 1]  # built again on the compacted version
    assert [sorted(d["fragment_ids"]) for d in p.list_indices()] == [[f.fragment_id for f in p.get_fragments()]]
    _check_filters(uri, ["i = 2002", "i < 30", "i = 5"])


@pytest.mark.parametrize(("nth", "op_filter"), [(1, "_indices/"), (2, "_indices/"), (1, "_versions/")])
def test_failed_index_build_is_clean(tmp_path, nth, op_filter):
    """A put that fails (the second index file, or the manifest) leaves the version and the
    index section as they were and no index files behind."""
    from lance_gpu.io import LOCAL
    from lance_gpu.io.faults import FaultInjectingStore

    uri = str(tmp_path / "ds")
    _make(uri, 500)
    faulty = FaultInjectingStore(LOCAL, op="put", nth=nth, error="ENOSPC", op_filter=op_filter)
    with pytest.raises(OSError):
        lance_gpu.dataset(uri, store=faulty).create_scalar_index("i", "BTREE")
    assert lance.dataset(uri).version == 1 and lance.dataset(uri).list_indices() == []
    left = [f for _r, _d, files in os.walk(os.path.join(uri, "_indices")) for f in files]
    assert left == []
    lance_gpu.dataset(uri).create_scalar_index("i", "BTREE")  # and a retry succeeds
    assert lance.dataset(uri).to_table(filter="i = 20")["i"].to_pylist() == [20]
