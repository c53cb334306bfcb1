# SPDX-License-Identifier: Apache-2.0
"""Compaction of datasets with indices, against pylance 14 compacting the same dataset:
BTree indices are remapped to the new row addresses (new uuid, new files, fragment bitmap
moved to the new fragments), pylance lists, describes and uses them afterwards."""

from __future__ import annotations

import os
import shutil
import uuid

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

from lance_gpu.io import LOCAL, resolve
import lance_gpu
from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.table.manifest import list_versions, read_manifest_file

lance = pytest.importorskip("lance")
from lance.file import LanceFileReader  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::Warning")

N = 12_000


def _table(n: int = N) -> pa.Table:
    rng = np.random.default_rng(0)
    ids = rng.permutation(n)
    return pa.table({
        "id": pa.array(ids),
        "f": pa.array(rng.integers(0, 50, n).astype(np.float64), mask=rng.random(n) < 0.2),
        "name": pa.array([f"n{i % 70}" for i in ids], mask=rng.random(n) < 0.1),
    })


def _make(uri: str, stable_row_ids: bool = False) -> None:
    """Indexed fragments 0-11 (1000 rows each), an unindexed appended one, deletions."""
    lance.write_dataset(_table(), uri, max_rows_per_file=1000, enable_stable_row_ids=stable_row_ids)
    ds = lance.dataset(uri)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("name", "BTREE")
    extra = pa.table({"id": pa.array(np.arange(N, N + 600)), "f": pa.array(np.full(600, 7.0)), "name": pa.array(["x"] * 600)})
    lance.write_dataset(extra, uri, mode="append")
    lance.dataset(uri).delete("id % 4 = 1 OR id >= 12500")


def _latest(uri):
    return read_manifest_file(LOCAL, list_versions(*resolve(uri))[-1].path)


def _index_state(uri):
    mf = _latest(uri)
    out = {}
    for idx in mf.index_section.indices:
        d = os.path.join(uri, "_indices", str(uuid.UUID(bytes=bytes(idx.uuid.uuid))))
        tables = {f.path: LanceFileReader(os.path.join(d, f.path)).read_all().to_table() for f in idx.files}
        out[idx.name] = (sorted(BitMap.deserialize(idx.fragment_bitmap)), list(idx.fields), idx.dataset_version,
                         sorted(tables), tables)
    return out


FILTERS = ["id = 4096", "id >= 11990", "id < 40", "f IS NULL", "f = 3", "f > 45", "name = 'n5'",
           "name IS NULL", "name = 'x'", "f < 2 AND name = 'n1'"]


@pytest.mark.parametrize("stable_row_ids", [False, True])
def test_compaction_remaps_btree_indices_like_pylance(tmp_path, stable_row_ids):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _make(ours, stable_row_ids)
    shutil.copytree(ours, theirs)
    before = _latest(ours)
    old_uuids = {bytes(i.uuid.uuid) for i in before.index_section.indices}
    m_ours = lance_gpu.dataset(ours).optimize.compact_files(target_rows_per_fragment=5000)
    m_theirs = lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=5000)
    assert (m_ours.fragments_removed, m_ours.fragments_added) == (m_theirs.fragments_removed, m_theirs.fragments_added)

    a, b = _latest(ours), _latest(theirs)
    assert [(f.id, f.physical_rows) for f in a.manifest.fragments] == [(f.id, f.physical_rows) for f in b.manifest.fragments]
    # the transaction names each remapped index; the manifest entries have new uuids
    txn = a.transaction.rewrite
    assert len(txn.rewritten_indices) == len(b.transaction.rewrite.rewritten_indices) == 2
    assert {bytes(r.old_id.uuid) for r in txn.rewritten_indices} == old_uuids
    new_uuids = {bytes(i.uuid.uuid) for i in a.index_section.indices}
    assert new_uuids == {bytes(r.new_id.uuid) for r in txn.rewritten_indices} and not new_uuids & old_uuids
    # bitmaps, files, lookup pages and (value, row address) pairs are pylance's
    sa, sb = _index_state(ours), _index_state(theirs)
    assert sa.keys() == sb.keys() == {"id_idx", "name_idx"}
    for name in sa:
        assert sa[name][:4] == sb[name][:4]
        for f, t in sa[name][4].items():
            assert t.equals(sb[name][4][f]), (name, f)
    assert sa["id_idx"][0] == [13]  # the new fragment of the indexed ones (12, unindexed, became 14)

    ds = lance.dataset(ours)
    assert [i["name"] for i in ds.list_indices()] == ["id_idx", "name_idx"]
    desc = {d.name: d for d in ds.describe_indices()}
    assert desc["id_idx"].num_rows_indexed == {d.name: d for d in lance.dataset(theirs).describe_indices()}["id_idx"].num_rows_indexed
    assert "ScalarIndexQuery" in ds.scanner(filter="id = 7").explain_plan()
    for flt in FILTERS:
        got = ds.to_table(filter=flt).sort_by("id")
        assert got.equals(ds.to_table(filter=flt, use_scalar_index=False).sort_by("id")), flt
        assert got.equals(lance.dataset(theirs).to_table(filter=flt).sort_by("id")), flt
    expected = sorted(i for i in range(N + 600) if i % 4 != 1 and i < 12500)
    assert sorted(lance_gpu.dataset(ours, device="cpu").to_table()["id"].to_pylist()) == expected
    # pylance goes on from here: appends, brings the index up to date, queries
    lance.write_dataset(pa.table({"id": pa.array([50_000]), "f": pa.array([1.0]), "name": pa.array(["n5"])}), ours, mode="append")
    lance.dataset(ours).optimize.optimize_indices()
    assert lance.dataset(ours).to_table(filter="name = 'n5'").num_rows == ds.to_table(filter="name = 'n5'").num_rows + 1


def test_unindexed_fragments_compact_apart(tmp_path):
    """A bin never mixes fragments covered by different indices; an index that covers none
    of the rewritten fragments is left as it is."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(3000), uri, max_rows_per_file=500)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    for k in range(3):
        lance.write_dataset(pa.table({"id": pa.array(np.arange(5000 + 100 * k, 5100 + 100 * k)),
                                      "f": pa.array(np.zeros(100)), "name": pa.array(["y"] * 100)}), uri, mode="append")
    before = _latest(uri).index_section.indices[0]
    lance_gpu.dataset(uri).optimize.compact_files(target_rows_per_fragment=500)  # only the three small ones
    after = _latest(uri)
    assert [(f.id, f.physical_rows) for f in after.manifest.fragments] == [(k, 500) for k in range(6)] + [(9, 300)]
    assert after.index_section.indices[0] == before
    assert not after.transaction.rewrite.rewritten_indices
    ds = lance.dataset(uri)
    assert ds.to_table(filter="id = 5150")["id"].to_pylist() == [5150]
    assert ds.to_table(filter="id = 1234")["id"].to_pylist() == [1234]


def test_index_types_we_cannot_remap_are_refused(tmp_path):
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(4000), uri, max_rows_per_file=500)
    lance.dataset(uri).create_scalar_index("name", "INVERTED")
    snapshot = (sorted(os.listdir(os.path.join(uri, "data"))), sorted(os.listdir(os.path.join(uri, "_indices"))))
    with pytest.raises(UnsupportedFeatureError, match="name_idx"):
        lance_gpu.dataset(uri).optimize.compact_files(target_rows_per_fragment=2000)
    assert lance.dataset(uri).version == 2
    assert snapshot == (sorted(os.listdir(os.path.join(uri, "data"))), sorted(os.listdir(os.path.join(uri, "_indices"))))
