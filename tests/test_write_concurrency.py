# SPDX-License-Identifier: Apache-2.0
"""Row-level changes racing other writers, from two processes: the outcome follows the
conflict rules (rebased or retried), no row is lost or duplicated, and pylance agrees."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from lance_gpu.errors import RetryableCommitConflictError

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.filterwarnings("ignore::Warning")


def _tbl(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({"id": pa.array(ids), "x": pa.array(ids * 1.0), "s": pa.array([f"r{i}" for i in ids])})


def _run(uri: str, job: str, retries: int, sync: Callable[[], None]) -> tuple[str, str]:  # in a worker
    """Run ``job`` (``"update-x"``, or ``"lance:update-x"`` to run it with pylance) once
    ``sync`` returns (every process of the race has opened the dataset)."""
    engine, _, what = job.rpartition(":")
    mod = lance if engine == "lance" else lance_gpu
    try:
        ds = mod.dataset(uri)
        sync()
        if what == "append":
            mod.write_dataset(_tbl(100, 10_000), uri, mode="append")
        elif what == "update-x":
            ds.update({"x": "x + 0.25"}, where="id < 1500", conflict_retries=retries)
        elif what == "update-s":
            ds.update({"s": "'b'"}, where="id < 1500", conflict_retries=retries)
        elif what == "upsert":
            src = _tbl(50, 950).set_column(1, "x", pa.array(np.full(50, -1.0)))
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)
        elif what == "compact":
            ds.optimize.compact_files(target_rows_per_fragment=4000)
        return job, "ok"
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        return job, f"{'OSError' if isinstance(exc, OSError) else 'other'}: {exc!r}"


def _serve(inbox, ready, go, out) -> None:  # a worker process of Workers
    """Run the tasks ``(function, args)`` of ``inbox`` until ``None``; each gets a ``sync``
    that reports ``ready`` and waits for ``go``, and its ``(key, outcome)`` goes to ``out``."""
    import warnings

    warnings.simplefilter("ignore")
    synced: list[bool] = []

    def sync() -> None:
        synced.append(True)
        ready.put(None)
        go.wait()

    while (task := inbox.get()) is not None:
        fn, args = task
        synced.clear()
        try:
            result = fn(*args, sync)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = (repr(fn), f"worker: {exc!r}")
        if not synced:  # failed before its sync: do not keep the others waiting
            ready.put(None)
        out.put(result)


class Workers:
    """Processes (spawned once per module: an interpreter start-up and the imports of this
    module, ~1 s each, instead of one per process per race) that run the sides of a race.

    :meth:`race` gives each task to its own worker; the workers call ``sync`` after opening
    the dataset, and go on together once all have (as a barrier of the race's processes
    would), so each race still has every side in a separate process, started together.
    A race that fails (a timeout) discards the workers; the next race spawns new ones."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list = []

    def _spawn(self) -> None:
        ctx = mp.get_context("spawn")  # a fork would copy the locks of threads earlier tests left (moto, decode pools)
        self.ready, self.out, self.go = ctx.Queue(), ctx.Queue(), ctx.Event()
        self.inboxes = [ctx.Queue() for _ in range(self.n)]
        self.procs = [ctx.Process(target=_serve, args=(q, self.ready, self.go, self.out), daemon=True) for q in self.inboxes]
        for p in self.procs:
            p.start()

    def race(self, tasks: list[tuple[Callable[..., tuple[str, str]], tuple]], timeout: float = 300) -> dict[str, str]:
        assert len(tasks) <= self.n
        if not self.procs:
            self._spawn()
        try:
            for inbox, task in zip(self.inboxes, tasks, strict=False):
                inbox.put(task)
            for _ in tasks:
                self.ready.get(timeout=timeout)
            self.go.set()
            results = dict(self.out.get(timeout=timeout) for _ in tasks)
            self.go.clear()
            return results
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the workers: killed, as they hold nothing to save (an orderly exit of the
        interpreters that ran pylance and lance-gpu takes seconds)."""
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.join()
        self.procs = []


@pytest.fixture(scope="module")
def workers():
    pool = Workers(6)
    yield pool
    if pool.procs:
        pool.close()


def _race(workers: Workers, uri: str, jobs: list[str], retries: int = 10) -> dict[str, str]:
    return workers.race([(_run, (uri, job, retries)) for job in jobs])


def _start(tmp_path) -> str:
    uri = str(tmp_path / "ds")
    lance.write_dataset(_tbl(3000), uri, max_rows_per_file=500)
    return uri


def _check(uri: str) -> pa.Table:
    a = lance.dataset(uri).to_table().sort_by("id")
    assert lance_gpu.dataset(uri).to_table().sort_by("id").equals(a)
    ids = a["id"].to_pylist()
    assert len(ids) == len(set(ids))
    return a


def test_update_vs_append(tmp_path, workers):
    uri = _start(tmp_path)
    assert _race(workers, uri, ["update-x", "append"]) == {"update-x": "ok", "append": "ok"}
    t = _check(uri)
    assert t["id"].to_pylist() == list(range(3000)) + list(range(10_000, 10_100))
    assert t["x"].to_pylist() == [i + (0.25 if i < 1500 else 0) for i in t["id"].to_pylist()]


def test_update_vs_update(tmp_path, workers):
    uri = _start(tmp_path)
    assert _race(workers, uri, ["update-x", "update-s"]) == {"update-x": "ok", "update-s": "ok"}
    t = _check(uri)
    assert t["id"].to_pylist() == list(range(3000))
    assert t["x"].to_pylist() == [i + (0.25 if i < 1500 else 0) for i in range(3000)]
    assert t["s"].to_pylist() == ["b" if i < 1500 else f"r{i}" for i in range(3000)]


def test_merge_insert_vs_compaction(tmp_path, workers):
    uri = _start(tmp_path)
    lance.dataset(uri).delete("id % 2 = 1 AND id >= 2000")  # something to compact
    assert _race(workers, uri, ["upsert", "compact"]) == {"upsert": "ok", "compact": "ok"}
    t = _check(uri)
    expected = [i for i in range(3000) if i < 2000 or i % 2 == 0]
    assert t["id"].to_pylist() == expected
    assert t["x"].to_pylist() == [-1.0 if 950 <= i < 1000 else float(i) for i in expected]


@pytest.mark.parametrize(
    "jobs",
    [
        ["update-x", "lance:append"],
        ["lance:update-x", "update-s"],
        ["upsert", "lance:compact"],
        pytest.param(["lance:upsert", "compact"], marks=pytest.mark.slow),
    ],
    ids=["ours-update-vs-pylance-append", "pylance-update-vs-ours-update", "ours-upsert-vs-pylance-compact",
         "pylance-upsert-vs-ours-compact"],
)
def test_race_with_pylance_matches_pylance_alone(tmp_path, jobs, workers):
    """One process runs pylance, the other lance-gpu: both commit (rebased or retried under
    each library's conflict rules, which must agree), and the table ends exactly as the
    same race run by pylance in both processes ends: no row lost or duplicated."""
    mixed = _start(tmp_path / "mixed")
    ref = _start(tmp_path / "ref")
    for uri in (mixed, ref):
        if "compact" in " ".join(jobs):
            lance.dataset(uri).delete("id % 2 = 1 AND id >= 2000")  # something to compact
    for uri, race in ((mixed, jobs), (ref, [f"lance:{j.rpartition(':')[2]}" for j in jobs])):
        got = _race(workers, uri, race)
        for job, outcome in got.items():
            # pylance's compact_files does not retry a Rewrite an Update of the same
            # fragments preempted ("Retryable commit conflict", pylance's own rule, timing
            # dependent); compaction changes no row, so the tables still compare
            pylance_refused = job == "lance:compact" and "Retryable commit conflict" in outcome
            assert outcome == "ok" or pylance_refused, got
    assert _check(mixed).equals(_check(ref))


def test_two_processes_update_without_retries(tmp_path, workers):
    """Two processes update the same rows with ``conflict_retries=0``: whichever commits
    second conflicts (an ``OSError``, as pylance's "Too many concurrent writers") unless the
    first had already committed before it read; each committed change is in the table
    whole, a refused one not at all."""
    uri = _start(tmp_path)
    got = _race(workers, uri, ["update-x", "update-s"], retries=0)
    assert "ok" in got.values()
    for outcome in got.values():
        assert outcome == "ok" or outcome.startswith("OSError: RetryableCommitConflictError"), got
    t = _check(uri)
    assert t["id"].to_pylist() == list(range(3000))
    bump = 0.25 if got["update-x"] == "ok" else 0.0
    assert t["x"].to_pylist() == [i + (bump if i < 1500 else 0) for i in range(3000)]
    new_s = got["update-s"] == "ok"
    assert t["s"].to_pylist() == ["b" if i < 1500 and new_s else f"r{i}" for i in range(3000)]


def test_conflict_rules_without_retries(tmp_path):
    """Deterministic: the second of two updates of the same fragments is retryable (and
    re-planned by default); an update and an append of other rows commute."""
    uri = _start(tmp_path)
    a, b = lance_gpu.dataset(uri), lance_gpu.dataset(uri)
    a.update({"x": "0"}, where="id < 10")
    with pytest.raises(RetryableCommitConflictError) as caught:
        b.update({"s": "'z'"}, where="id < 10", conflict_retries=0)
    assert isinstance(caught.value, OSError)  # pylance raises OSError here
    la, lb = lance.dataset(uri), lance.dataset(uri, version=a.version - 1)
    la.update({"x": "1"}, where="id < 10")
    with pytest.raises(OSError):  # pylance: the same rule, the same builtin type
        lb.update({"s": "'y'"}, where="id < 10", conflict_retries=0)
    lance.dataset(uri, version=a.version).restore()  # back to our first update's state (a new version)
    b = lance_gpu.dataset(uri, a.version)
    b.update({"s": "'z'"}, where="id < 10")
    c = lance_gpu.dataset(uri)
    lance.write_dataset(_tbl(5, 9000), uri, mode="append")
    c.update({"s": "'w'"}, where="id >= 2990", conflict_retries=0)  # rebased over the append
    t = _check(uri)
    assert t.filter(pa.compute.less(t["id"], 10))["s"].to_pylist() == ["z"] * 10
    assert t.filter(pa.compute.less(t["id"], 10))["x"].to_pylist() == [0.0] * 10
    assert t["id"].to_pylist()[-5:] == list(range(9000, 9005))


def _mixed(uri: str, role: str, k: int, sync: Callable[[], None]) -> tuple[str, str]:  # in a worker
    try:
        sync()
        for step in range(3):
            if role == "append":
                lance_gpu.write_dataset(_tbl(20, 100_000 + k * 1000 + step * 100), uri, mode="append")
            elif role == "delete":
                lance_gpu.dataset(uri).delete(f"id >= {step * 100} AND id < {step * 100 + 50}")
            else:
                lance_gpu.dataset(uri).optimize.compact_files(target_rows_per_fragment=2000)
        return f"{role}{k}", "ok"
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        return f"{role}{k}", repr(exc)


def test_appenders_deleter_and_compactor_all_complete(tmp_path, workers):
    """Issue 17: 4 appenders, a deleter and a compactor at once; every operation completes
    (rebased or retried), the table holds exactly the expected ids, and pylance agrees."""
    uri = _start(tmp_path)
    roles = [("append", k) for k in range(4)] + [("delete", 0), ("compact", 0)]
    results = workers.race([(_mixed, (uri, role, k)) for role, k in roles])
    assert len(results) == len(roles)
    assert all(v == "ok" for v in results.values()), results
    t = _check(uri)
    deleted = {i for step in range(3) for i in range(step * 100, step * 100 + 50)}
    appended = [100_000 + k * 1000 + step * 100 + j for k in range(4) for step in range(3) for j in range(20)]
    assert t["id"].to_pylist() == sorted([i for i in range(3000) if i not in deleted] + appended)
