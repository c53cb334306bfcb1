# SPDX-License-Identifier: Apache-2.0
"""The transaction model and pylance's commit API: a distributed job written against
pylance's API runs unchanged on lance-gpu, fragment metadata crosses between the two
libraries, and commits retry as pylance's do."""

from __future__ import annotations

import json
import multiprocessing as mp
import pickle
import types

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.io import resolve
from lance_gpu.errors import DatasetExistsError
from lance_gpu.txn import FragmentMetadata, LanceOperation, commit
from lance_gpu.txn.fragment import DataFile, DeletionFile
from lance_gpu.write import write_fragments

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def _tbl(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({"id": pa.array(ids), "s": pa.array([f"r{i}" for i in ids])})


OURS = types.SimpleNamespace(
    write_fragments=write_fragments,
    LanceOperation=LanceOperation,
    LanceDataset=lance_gpu.LanceDataset,
    FragmentMetadata=FragmentMetadata,
    write_dataset=lance_gpu.write_dataset,
)


def _pylance():
    from lance.fragment import FragmentMetadata as PlFragmentMetadata
    from lance.fragment import write_fragments as pl_write_fragments

    return types.SimpleNamespace(
        write_fragments=pl_write_fragments,
        LanceOperation=lance.LanceOperation,
        LanceDataset=lance.LanceDataset,
        FragmentMetadata=PlFragmentMetadata,
        write_dataset=lance.write_dataset,
    )


def _job(api, uri: str) -> list[int]:
    """A Ray/Dask-style job, written once against pylance's API: "workers" write fragments
    and ship them as JSON (or pickles), the driver commits once per stage."""
    schema = _tbl(0, 1).schema
    # stage 1: create from two workers
    shipped = [json.dumps(f.to_json()) for k in range(2) for f in api.write_fragments(_tbl(k * 100, 100), uri, schema=schema, max_rows_per_file=60)]
    frags = [api.FragmentMetadata.from_json(s) for s in shipped]
    ds = api.LanceDataset.commit(uri, api.LanceOperation.Overwrite(schema, frags))
    versions = [ds.version]
    # stage 2: append from three workers, pickled
    read = ds.version
    frags = [pickle.loads(pickle.dumps(f)) for k in range(3) for f in api.write_fragments(_tbl(1000 + k * 10, 10), uri, schema=schema)]
    ds = api.LanceDataset.commit(uri, api.LanceOperation.Append(frags), read_version=read)
    versions.append(ds.version)
    # stage 3: a delete committed by hand from fragment metadata
    return versions


def test_distributed_job_runs_unchanged(tmp_path):
    ours, ref = str(tmp_path / "ours"), str(tmp_path / "ref")
    assert _job(OURS, ours) == _job(_pylance(), ref) == [1, 2]
    a, b = lance.dataset(ours), lance.dataset(ref)
    assert a.schema == b.schema
    assert a.to_table().sort_by("id") == b.to_table().sort_by("id")
    assert [f.count_rows() for f in a.get_fragments()] == [f.count_rows() for f in b.get_fragments()]
    assert [f.fragment_id for f in a.get_fragments()] == [f.fragment_id for f in b.get_fragments()]


def test_fragment_metadata_crosses_libraries(tmp_path):
    """pylance-written fragments (JSON) committed by lance-gpu, and ours by pylance."""
    from lance.fragment import FragmentMetadata as PlFragmentMetadata
    from lance.fragment import write_fragments as pl_write_fragments

    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(0, 10), uri)
    theirs = [json.dumps(f.to_json()) for f in pl_write_fragments(_tbl(100, 10), uri)]
    ds = lance_gpu.LanceDataset.commit(
        uri, LanceOperation.Append([FragmentMetadata.from_json(s) for s in theirs]), read_version=1
    )
    assert ds.version == 2
    mine = [json.dumps(f.to_json()) for f in write_fragments(_tbl(200, 10), uri)]
    pl = lance.LanceDataset.commit(
        uri, lance.LanceOperation.Append([PlFragmentMetadata.from_json(s) for s in mine]), read_version=2
    )
    assert pl.version == 3
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == list(range(10)) + list(range(100, 110)) + list(range(200, 210))
    assert lance_gpu.dataset(uri).to_table().sort_by("id") == lance.dataset(uri).to_table().sort_by("id")


def test_fragment_metadata_round_trips_with_deletions_and_row_ids(tmp_path):
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(_tbl(0, 30), uri, enable_stable_row_ids=True)
    ds.delete("id < 3")
    pl_meta = lance.dataset(uri).get_fragments()[0].metadata
    ours = lance_gpu.dataset(uri).get_fragments()[0].metadata
    assert ours.to_json() == pl_meta.to_json()
    back = FragmentMetadata.from_json(json.dumps(pl_meta.to_json()))
    assert back == ours and pickle.loads(pickle.dumps(back)) == back
    assert back.to_pb() == lance_gpu.dataset(uri).get_fragments()[0].pb
    assert isinstance(back.deletion_file, DeletionFile) and back.num_rows == 27
    assert isinstance(back.files[0], DataFile)


def test_fragment_create_and_commit_batch(tmp_path):
    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 5), uri)
    frag = lance_gpu.LanceFragment.create(uri, _tbl(5, 5))
    t1 = lance_gpu.Transaction(1, LanceOperation.Append([frag]))
    t2 = write_fragments(_tbl(10, 5), uri, return_transaction=True)
    out = lance_gpu.LanceDataset.commit_batch(uri, [t1, t2])
    assert out["dataset"].version == 2
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == list(range(15))


def test_commit_lock_is_held_while_publishing(tmp_path):
    import contextlib

    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 5), uri)
    seen = []

    @contextlib.contextmanager
    def lock(version):
        seen.append(version)
        yield

    frags = write_fragments(_tbl(5, 5), uri)
    lance_gpu.LanceDataset.commit(uri, LanceOperation.Append(frags), read_version=1, commit_lock=lock)
    assert seen == [2]


@pytest.mark.parametrize("behind", [150, pytest.param(1000, marks=pytest.mark.slow)])
def test_handle_far_behind_still_commits(tmp_path, behind):
    """The retry budget counts conflicts, not versions: a handle 1,000 versions behind
    deletes and appends when nothing conflicts (pylance does too)."""
    from lance_gpu.txn.publish import latest

    uri = str(tmp_path / "ds")
    lance_gpu.write_dataset(_tbl(0, 100), uri)
    old = lance_gpu.dataset(uri)
    store, root = resolve(uri)
    for k in range(behind):  # config-only versions committed by someone else
        commit(store, root, LanceOperation.UpdateConfig({f"k{k % 7}": str(k)}), latest(store, root)[0])
    assert old.delete("id < 10") == {"num_deleted_rows": 10}
    assert old.version == behind + 2
    frags = write_fragments(_tbl(500, 5), uri)
    ds = lance_gpu.LanceDataset.commit(uri, LanceOperation.Append(frags), read_version=1)
    assert ds.version == behind + 3
    assert sorted(lance.dataset(uri).to_table()["id"].to_pylist()) == list(range(10, 100)) + list(range(500, 505))


def _create(uri, start, barrier, out):  # runs in a child process
    import warnings

    warnings.simplefilter("ignore")
    barrier.wait()
    try:
        lance_gpu.write_dataset(_tbl(start, 10), uri, mode="create")
        out.put("ok")
    except DatasetExistsError:
        out.put("exists")
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out.put(repr(exc))


def test_losing_create_gets_dataset_exists(tmp_path):
    uri = str(tmp_path / "ds")
    # deterministic: the dataset appears between planning and publishing
    from lance_gpu.table.schema import LanceSchema

    frags = write_fragments(_tbl(0, 5), uri, mode="create")
    lance.write_dataset(_tbl(100, 5), uri)
    with pytest.raises(DatasetExistsError):
        commit(
            *resolve(uri),
            LanceOperation.Overwrite(LanceSchema.from_arrow(_tbl(0, 1).schema), frags),
            None,
            mode="create",
        )
    # racing processes
    ctx = mp.get_context("fork")
    uri2 = str(tmp_path / "race")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_create, args=(uri2, k * 100, barrier, out)) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    results = sorted(out.get(timeout=5) for _ in procs)
    assert results == ["exists", "ok"]
    assert lance.dataset(uri2).count_rows() == 10
