# SPDX-License-Identifier: Apache-2.0
"""Distributed compaction (issue 26 item 3) against pylance 14.0.2: ``Compaction.plan`` /
``CompactionTask.execute`` / ``Compaction.commit`` group, write and commit as pylance's do
(same groups, same fragments' rows, two versions); plans, tasks and results pickle and
JSON round-trip; pylance reads the result."""

from __future__ import annotations

import pickle
import shutil

import numpy as np
import pyarrow as pa
import pytest

lance = pytest.importorskip("lance")
from lance.lance import Compaction as RefCompaction  # noqa: E402

import lance_gpu  # noqa: E402
from lance_gpu.optimize import Compaction, CompactionPlan, CompactionTask, RewriteResult  # noqa: E402


@pytest.fixture(params=[False, True], ids=["plain-row-ids", "stable-row-ids"])
def uris(tmp_path, request) -> tuple[str, str]:
    ref = str(tmp_path / "ref.lance")
    table = pa.table({"a": pa.array(np.arange(800)), "b": pa.array([f"s{i}" for i in range(800)])})
    lance.write_dataset(table, ref, max_rows_per_file=200, enable_stable_row_ids=request.param)
    lance.dataset(ref).delete("a % 50 = 7")
    ours = str(tmp_path / "ours.lance")
    shutil.copytree(ref, ours)
    return ref, ours


@pytest.mark.parametrize("options", [{"target_rows_per_fragment": 400}, {"target_rows_per_fragment": 10_000},
                                     {"target_rows_per_fragment": 400, "num_threads": 1, "batch_size": 64}])
def test_plan_execute_commit_matches_pylance(uris, options) -> None:
    ref_uri, our_uri = uris
    ref_ds, our_ds = lance.dataset(ref_uri), lance_gpu.dataset(our_uri)
    ref_plan, our_plan = RefCompaction.plan(ref_ds, options=options), Compaction.plan(our_ds, options)
    assert our_plan.read_version == ref_plan.read_version
    assert [[f.id for f in t.fragments] for t in our_plan.tasks] == [[f.id for f in t.fragments] for t in ref_plan.tasks]
    ref_results = [t.execute(ref_ds) for t in ref_plan.tasks]
    our_results = [t.execute(our_ds) for t in our_plan.tasks]
    for a, b in zip(our_results, ref_results, strict=True):
        assert (a.metrics.fragments_removed, a.metrics.fragments_added) == (b.metrics.fragments_removed, b.metrics.fragments_added)
        assert [f.physical_rows for f in a.new_fragments] == [f.physical_rows for f in b.new_fragments]
    ref_metrics = RefCompaction.commit(ref_ds, ref_results)
    our_metrics = Compaction.commit(our_ds, our_results)
    assert vars(our_metrics) == {k: getattr(ref_metrics, k) for k in vars(our_metrics)}
    assert our_ds.version == ref_ds.version == 4
    expected = lance.dataset(ref_uri).to_table(with_row_id=True)
    assert lance.dataset(our_uri).to_table(with_row_id=True) == expected
    assert lance_gpu.dataset(our_uri).to_table(with_row_id=True) == expected


def test_plan_task_result_pickle_and_json(uris) -> None:
    _ref_uri, our_uri = uris
    ds = lance_gpu.dataset(our_uri)
    plan = Compaction.plan(ds, {"target_rows_per_fragment": 300})
    assert plan.num_tasks() == 2  # 196 live rows a fragment: two per task
    assert repr(plan) == f"CompactionPlan(read_version={ds.version}, tasks=<2 compaction tasks>)"
    assert pickle.loads(pickle.dumps(plan)) == plan == CompactionPlan.from_json(plan.json())
    assert CompactionTask.from_json(plan.tasks[0].json()) == plan.tasks[0]
    result = pickle.loads(pickle.dumps(plan.tasks[0])).execute(ds)
    assert RewriteResult.from_json(result.json()) == result == pickle.loads(pickle.dumps(result))
    assert repr(result).startswith(f"RewriteResult(read_version={ds.version}, new_fragments=[")
    metrics = Compaction.commit(ds, [result])
    assert (metrics.fragments_removed, metrics.fragments_added) == (2, 1)
    assert lance.dataset(our_uri).count_rows() == 800 - 16


def test_commit_after_a_concurrent_append(uris) -> None:
    _ref_uri, our_uri = uris
    ds = lance_gpu.dataset(our_uri)
    plan = Compaction.plan(ds, {"target_rows_per_fragment": 400})
    results = [t.execute(ds) for t in plan.tasks]
    lance.write_dataset(pa.table({"a": [1000], "b": ["new"]}), our_uri, mode="append")
    Compaction.commit(ds, results)
    assert lance.dataset(our_uri).count_rows() == 800 - 16 + 1


@pytest.mark.parametrize("index_type", ["BTREE", "BITMAP"])
def test_commit_remaps_scalar_indices(uris, index_type: str) -> None:
    """Indices covering the rewritten fragments are remapped (or moved, for row-id indices
    with stable row ids) as compact_files does; pylance's indexed queries see every row."""
    ref_uri, our_uri = uris
    lance.dataset(our_uri).create_scalar_index("a", index_type)
    ds = lance_gpu.dataset(our_uri)
    plan = Compaction.plan(ds, {"target_rows_per_fragment": 400})
    Compaction.commit(ds, [t.execute(ds) for t in plan.tasks])
    after = lance.dataset(our_uri)
    assert len(after.describe_indices()) == 1
    for value in (0, 6, 399, 799):
        expected = lance.dataset(ref_uri).to_table(filter=f"a = {value}")
        assert after.to_table(filter=f"a = {value}") == expected
        assert lance_gpu.dataset(our_uri).to_table(filter=f"a = {value}") == expected


@pytest.mark.parametrize(("batch_size", "expected_rows"), [(128, [1024] * 4), (2048, [2048, 2048]), (None, [2048, 2048])])
def test_max_bytes_per_file_cuts_as_pylance(tmp_path, batch_size, expected_rows) -> None:
    """``max_bytes_per_file`` counts the pages written (8 MiB each), checked between batches
    of ``batch_size`` rows: a tiny limit cuts a file after each batch that completed a page
    (pylance's cuts; upstream ``test_optimize_max_bytes``), local and distributed."""
    arr = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(4 * 1024 * 1024, dtype=np.int64)), 1024)
    data = pa.table({"a": arr})
    options = {"target_rows_per_fragment": 100 * 1024, "max_bytes_per_file": 1000}
    if batch_size is not None:
        options["batch_size"] = batch_size
    rows = {}
    for name, module in (("pylance", lance), ("ours", lance_gpu), ("ours-plan", lance_gpu)):
        ds = module.write_dataset(data, str(tmp_path / name), max_rows_per_file=2048, data_storage_version="stable")
        if name == "ours-plan":
            plan = lance_gpu.optimize.Compaction.plan(ds, options=options)
            lance_gpu.optimize.Compaction.commit(ds, [task.execute(ds) for task in plan.tasks])
        else:
            ds.optimize.compact_files(materialize_deletions=False, **options)
        rows[name] = [f.physical_rows for f in module.dataset(str(tmp_path / name)).get_fragments()]
    assert rows["ours"] == rows["ours-plan"] == rows["pylance"] == expected_rows
    assert lance.dataset(str(tmp_path / "ours")).to_table().equals(data)


@pytest.mark.parametrize("max_bytes_per_file", [None, 12 << 20, 4096])
def test_many_tiny_fragments_compact_into_pylance_files(tmp_path, max_bytes_per_file) -> None:
    """Spans of tiny fragments go to the writer as batches across fragment ends only while no
    file cut can fall inside them (``UNCUT_EXPANSION``): the files written, their rows and the
    data are pylance's whether the limit is far, crossed midway (12 MiB: the first spans go out
    whole, later ones fragment by fragment) or tiny.  29 MiB of rows: pages (8 MiB) complete
    inside spans, so a batch crossing fragment ends would move a cut (it does: 142,384 rows
    in the first file instead of pylance's 132,000 with every span sent whole)."""
    from lance_gpu.write import compaction

    rows = {}
    for name, module in (("pylance", lance), ("ours", lance_gpu)):
        path = str(tmp_path / name)
        for i in range(80):  # 3,000 rows: batches of 8,192 crossing fragment ends would move the cuts
            values = pa.array(np.arange(i * 3000 * 16, (i + 1) * 3000 * 16, dtype=np.int64))
            part = pa.table({"v": pa.FixedSizeListArray.from_arrays(values, 16)})
            lance.write_dataset(part, path, mode="append" if i else "create")
        ds = module.dataset(path)
        ds.optimize.compact_files(max_bytes_per_file=max_bytes_per_file)
        rows[name] = [f.physical_rows for f in lance.dataset(path).get_fragments()]
        assert lance.dataset(path).to_table().equals(lance.dataset(str(tmp_path / "pylance")).to_table())
    assert rows["ours"] == rows["pylance"]
    assert compaction.UNCUT_EXPANSION * 80 * 3000 * 128 > 12 << 20  # the midway case does cross the bound
