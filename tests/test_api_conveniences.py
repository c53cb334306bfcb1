# SPDX-License-Identifier: Apache-2.0
"""Conveniences of pylance's dataset API (issue 26 items 2 and 6), against pylance 14.0.2:
``to_pandas`` (dataset and fragment), ``sample``, ``schema_metadata``, ``max_field_id``,
``has_stable_row_ids``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
pd = pytest.importorskip("pandas")

import lance_gpu  # noqa: E402


def _table(n: int = 40) -> pa.Table:
    rng = np.random.default_rng(11)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "x": pa.array(rng.standard_normal(n), mask=rng.random(n) < 0.2),
        "s": pa.array([f"w{k % 7}" for k in range(n)]),
        "st": pa.array([{"a": k, "b": [k, k + 1]} for k in range(n)]),
        "li": pa.array([[k] * (k % 3) for k in range(n)], pa.list_(pa.int32())),
    })


@pytest.fixture(params=[False, True], ids=["plain-row-ids", "stable-row-ids"])
def uri(tmp_path, request) -> str:
    path = str(tmp_path / "api.lance")
    table = _table().replace_schema_metadata({"owner": "team-a", "k": "v"})
    lance.write_dataset(table, path, max_rows_per_file=15, enable_stable_row_ids=request.param)
    lance.dataset(path).delete("id % 9 = 4")
    return path


@pytest.mark.parametrize("kwargs", [{}, {"columns": ["id", "s"]}, {"filter": "x > 0", "columns": ["id", "x", "st"]},
                                    {"columns": {"twice": "id * 2"}, "limit": 5, "offset": 3}])
def test_to_pandas_matches_pylance(uri: str, kwargs: dict) -> None:
    ours = lance_gpu.dataset(uri).to_pandas(**kwargs)
    ref = lance.dataset(uri).to_pandas(**kwargs)
    pd.testing.assert_frame_equal(ours, ref)


def test_fragment_to_pandas_matches_pylance(uri: str) -> None:
    ours = lance_gpu.dataset(uri).get_fragments()
    ref = lance.dataset(uri).get_fragments()
    for a, b in zip(ours, ref, strict=True):
        pd.testing.assert_frame_equal(a.to_pandas(columns=["id", "li"], filter="id > 3"), b.to_pandas(columns=["id", "li"], filter="id > 3"))


def test_sample_draws_distinct_live_rows(uri: str) -> None:
    ds = lance_gpu.dataset(uri)
    live = set(ds.to_table(columns=["id"]).column("id").to_pylist())
    got = ds.sample(12, columns=["id", "s"])
    ids = got.column("id").to_pylist()
    assert got.schema == lance.dataset(uri).sample(12, columns=["id", "s"]).schema
    assert len(ids) == len(set(ids)) == 12 and set(ids) <= live
    ordered = ds.sample(20, randomize_order=False).column("id").to_pylist()
    assert ordered == sorted(ordered) and len(set(ordered)) == 20
    draws = {tuple(ds.sample(5, columns=["id"]).column("id").to_pylist()) for _ in range(8)}
    assert len(draws) > 1  # random, not a fixed choice
    assert ds.sample(len(live), columns=["id"]).num_rows == len(live)
    assert ds.sample(0).num_rows == lance.dataset(uri).sample(0).num_rows == 0


def test_sample_of_more_rows_than_live_is_refused_as_pylance(uri: str) -> None:
    n = lance.dataset(uri).count_rows() + 1
    with pytest.raises(ValueError):
        lance.dataset(uri).sample(n)
    with pytest.raises(ValueError, match="has"):
        lance_gpu.dataset(uri).sample(n)


def test_schema_facts_match_pylance(uri: str) -> None:
    ours, ref = lance_gpu.dataset(uri), lance.dataset(uri)
    assert ours.schema_metadata == ref.schema_metadata == {"owner": "team-a", "k": "v"}
    assert ours.max_field_id == ref.max_field_id
    assert ours.has_stable_row_ids == ref.has_stable_row_ids
    ref.add_columns({"y": "id + 1"})
    ref.update_schema_metadata({"owner": "team-b"}, replace=True)
    ours, ref = lance_gpu.dataset(uri), lance.dataset(uri)
    assert ours.max_field_id == ref.max_field_id
    assert ours.schema_metadata == ref.schema_metadata == {"owner": "team-b"}


def test_manifest_needs_migration_as_pylance(tmp_path) -> None:
    """``lance.lance.manifest_needs_migration``: a current manifest needs none (either
    library), one without a writer version or deleted-row counts does (pylance's rule)."""
    import struct
    from pathlib import Path

    from lance.lance import manifest_needs_migration as ref_needs

    from lance_gpu._proto import table_pb2
    from lance_gpu.lance import manifest_needs_migration

    uri = str(tmp_path / "m.lance")
    lance.write_dataset(pa.table({"x": [1, 2, 3]}), uri)
    lance_gpu.dataset(uri).delete("x = 2")
    for version in (1, 2):
        assert manifest_needs_migration(lance_gpu.dataset(uri, version=version)) is False
        assert ref_needs(lance.dataset(uri, version=version)) is False
    path = max(Path(uri, "_versions").glob("*.manifest"), key=lambda p: p.stat().st_mtime)
    raw = path.read_bytes()
    (pos,) = struct.unpack_from("<Q", raw, len(raw) - 16)
    (length,) = struct.unpack_from("<I", raw, pos)
    manifest = table_pb2.Manifest()
    manifest.ParseFromString(raw[pos + 4 : pos + 4 + length])
    manifest.fragments[0].deletion_file.num_deleted_rows = 0  # as manifests before the count existed
    body = manifest.SerializeToString()
    path.write_bytes(raw[:pos] + struct.pack("<I", len(body)) + body + raw[len(raw) - 16 :])
    assert manifest_needs_migration(lance_gpu.dataset(uri)) is True
    assert ref_needs(lance.dataset(uri)) is True


def test_iops_and_bytes_read_counters(tmp_path) -> None:
    """``lance_gpu.iops_counter()`` / ``bytes_read_counter()`` (pylance's names) count the
    reads of every store in the process: a scan moves them by its store's own counts."""
    uri = str(tmp_path / "c.lance")
    lance.write_dataset(pa.table({"x": list(range(1000))}), uri)
    ds = lance_gpu.dataset(uri)
    requests, nbytes = lance_gpu.iops_counter(), lance_gpu.bytes_read_counter()
    before = ds.snapshot.store.stats.snapshot()
    ds.to_table()
    after = ds.snapshot.store.stats.snapshot()
    assert lance_gpu.iops_counter() - requests == after["gets"] - before["gets"] > 0
    assert lance_gpu.bytes_read_counter() - nbytes == after["bytes_read"] - before["bytes_read"] > 0


@pytest.mark.parametrize(("query", "table"), [
    ("SELECT * FROM test WHERE id > 1", "test"),
    ("SELECT value FROM test WHERE id = 1", "test"),
    ("SELECT id as user_id, UPPER(value) as val FROM dataset WHERE id BETWEEN 1 AND 3", None),
    ("SELECT value, id FROM dataset ORDER BY id DESC LIMIT 2", None),
    ("SELECT * FROM dataset ORDER BY id", None),
    ("SELECT * FROM dataset ORDER BY value DESC NULLS LAST, id", None),
    ("SELECT dataset.id FROM dataset WHERE dataset.value <> 'b' LIMIT 2 OFFSET 1", None),
    ("SELECT id + 1 AS x, value FROM dataset", None),
])
def test_sql_queries_as_pylance(tmp_path, query: str, table: str | None) -> None:
    """``ds.sql(query)`` for single-table SELECTs: the same tables as pylance's, batch lists
    and stream readers alike."""
    uri = str(tmp_path / "sql.lance")
    lance.write_dataset(pa.table({"id": [1, 2, 3, None], "value": ["a", "b", "c", None]}), uri)
    results = []
    for mod in (lance, lance_gpu):
        builder = mod.dataset(uri).sql(query)
        if table:
            builder = builder.table_name(table)
        query_obj = builder.build()
        batches = query_obj.to_batch_records()
        assert pa.Table.from_batches(list(query_obj.to_stream_reader())) == pa.Table.from_batches(batches)
        results.append(pa.Table.from_batches(batches))
    assert results[0] == results[1]


def test_sql_refusals(tmp_path) -> None:
    """What a scan cannot answer is refused by name; another table name is a ValueError."""
    uri = str(tmp_path / "sqlr.lance")
    lance.write_dataset(pa.table({"id": [1, 2]}), uri)
    ds = lance_gpu.dataset(uri)
    for query, match in (("SELECT COUNT(*) FROM dataset", "aggregates"), ("SELECT id FROM dataset GROUP BY id", "GROUP BY"),
                         ("SELECT DISTINCT id FROM dataset", "DISTINCT"), ("SELECT a.id FROM dataset a JOIN dataset b ON a.id = b.id", "joins")):
        with pytest.raises(NotImplementedError, match=match):
            ds.sql(query).build()
    with pytest.raises(ValueError, match="not found"):
        ds.sql("SELECT * FROM other").build()
    assert ds.sql("SELECT id FROM dataset").with_row_id().build().to_batch_records()[0].schema.names == ["id", "_rowid"]


_FRAMES = {
    "range-index": lambda: pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}),
    "stepped-range-index": lambda: pd.DataFrame({"a": [1, 2]}, index=pd.RangeIndex(5, 9, 2, name="r")),
    "named-index": lambda: pd.DataFrame({"a": [1.5, 2.5, None]}, index=pd.Index([10, 20, 30], name="key")),
    "filtered-frame": lambda: pd.DataFrame({"a": [1, 2, 3, 4]}).query("a % 2 == 0"),
    "multi-index": lambda: pd.DataFrame({"v": [1, 2]}, index=pd.MultiIndex.from_tuples([("p", 1), ("q", 2)],
                                                                                        names=["k1", "k2"])),
}


@pytest.mark.parametrize("frame", sorted(_FRAMES))
@pytest.mark.parametrize("writer", ["pylance", "ours"])
def test_pandas_frame_round_trips_as_pylance(tmp_path, frame: str, writer: str) -> None:
    """A written DataFrame keeps pylance's ``pandas`` schema metadata (a RangeIndex stored
    there only, another index as a column), read back by either library to the same frame."""
    df = _FRAMES[frame]()
    (lance if writer == "pylance" else lance_gpu).write_dataset(df, str(tmp_path / "w"))
    lance.write_dataset(df, str(tmp_path / "ref"))
    reference = lance.dataset(str(tmp_path / "ref")).to_table()
    for reader in (lance, lance_gpu):
        table = reader.dataset(str(tmp_path / "w")).to_table()
        assert table.schema.equals(reference.schema, check_metadata=True)
        assert table.equals(reference)
        pd.testing.assert_frame_equal(table.to_pandas(), df)
    pd.testing.assert_frame_equal(lance_gpu.dataset(str(tmp_path / "w")).to_pandas(), df)


def test_pandas_append_keeps_the_datasets_columns_as_pylance(tmp_path) -> None:
    """Appending a filtered frame (its index is no RangeIndex) writes the dataset's columns only."""
    df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    for name, module in (("ref", lance), ("ours", lance_gpu)):
        module.write_dataset(df, str(tmp_path / name))
        module.write_dataset(df[df.a > 1], str(tmp_path / name), mode="append")
    expected = lance.dataset(str(tmp_path / "ref")).to_table()
    got = lance.dataset(str(tmp_path / "ours")).to_table()
    assert got.equals(expected) and got.schema.equals(expected.schema, check_metadata=True)
    pd.testing.assert_frame_equal(lance_gpu.dataset(str(tmp_path / "ours")).to_pandas(),
                                  lance.dataset(str(tmp_path / "ref")).to_pandas())
