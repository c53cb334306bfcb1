# SPDX-License-Identifier: Apache-2.0
"""The on-disk kernel cache (cuda_kernels._jitcache): behaviour, not time.

Each case runs reads in fresh interpreters with their own ``LANCE_GPU_CACHE_DIR`` and
inspects numba's per-dispatcher cache statistics (``_jitcache.cache_stats()``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cuda_kernels import _jitcache

lance = pytest.importorskip("lance")

ROOT = Path(__file__).resolve().parent.parent

# A read in a fresh process: prints the table's digest, the cache stats and the cache dir.
CHILD = r"""
import hashlib, json, sys
import lance_gpu
from cuda_kernels import _jitcache
path, cols = sys.argv[1], sys.argv[2].split(",")
t = lance_gpu.dataset(path, device="cpu").to_table(columns=cols)
digest = hashlib.sha256(str(t.to_pydict()).encode()).hexdigest()
twins = _jitcache.twin_stats()
context = "numba.np.arraymath" in sys.modules  # numba's target context was set up by the read
assert _jitcache.wait_for_worker(600)
print(json.dumps({"digest": digest, "stats": _jitcache.cache_stats(), "dir": str(_jitcache.cache_dir()), "twins": twins,
                  "context": context}))
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(3)
    n = 20_000
    words = np.array([f"word-{i:03d}-{'z' * (i % 9)}" for i in range(300)])
    tbl = pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "v": pa.array(rng.integers(0, 1000, n)),
            "s": pa.array(words[rng.integers(0, 300, n)]),
        }
    )
    path = str(tmp_path_factory.mktemp("jit") / "d.lance")
    lance.write_dataset(tbl, path)
    return path


def _expected(path: str, cols: list[str]) -> str:
    import hashlib

    t = lance.dataset(path).to_table(columns=cols)
    return hashlib.sha256(str(t.to_pydict()).encode()).hexdigest()


def _start(cache: str | Path, path: str, cols: str, twins: str = "0") -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LANCE_GPU_CACHE_DIR=str(cache), LANCE_GPU_JIT_TWINS=twins)
    env.pop("NUMBA_CACHE_DIR", None)
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, path, cols], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _finish(proc: subprocess.Popen[str]) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _read(cache: str | Path, path: str, cols: str, twins: str = "0") -> dict:
    return _finish(_start(cache, path, cols, twins))


def _totals(stats: dict) -> tuple[int, int]:
    return sum(s["hits"] for s in stats.values()), sum(s["misses"] for s in stats.values())


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory, data: str) -> tuple[Path, dict]:
    """One read in a fresh process with an empty cache: the cache it leaves and its result."""
    cache = tmp_path_factory.mktemp("cache")
    return cache, _read(cache, data, "id,v,s")


def test_second_process_loads_kernels_from_cache(cold: tuple[Path, dict], data: str) -> None:
    cache, first = cold
    assert first["digest"] == _expected(data, ["id", "v", "s"])
    hits, misses = _totals(first["stats"])
    assert misses > 0 and hits == 0
    assert Path(first["dir"]).is_relative_to(cache)
    second = _read(cache, data, "id,v,s")
    assert second["digest"] == first["digest"]
    hits, misses = _totals(second["stats"])
    assert hits > 0 and misses == 0, second["stats"]
    # Drivers load from the cache; the cores inlined into them are not even typed again.
    assert set(second["stats"]) <= set(first["stats"])


def test_int_columns_do_not_compile_string_kernels(cold: tuple[Path, dict], data: str) -> None:
    cache, first = cold
    res = _read(cache, data, "id,v")
    assert res["digest"] == _expected(data, ["id", "v"])
    used = set(res["stats"])  # loaded or compiled in this process
    assert used, "an int read needs its unpack kernels"
    string_kernels = {name for name in first["stats"] if "fsst" in name or "binary" in name or "gather_ranges" in name}
    assert string_kernels, "the string column of the cold read did use string kernels"
    assert not used & string_kernels, used & string_kernels


def test_unwritable_cache_location_still_reads(tmp_path: Path, data: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    res = _read(blocker / "cache", data, "id")  # cannot be created, even as root
    assert res["digest"] == _expected(data, ["id"])
    assert res["dir"] == "None"
    hits, misses = _totals(res["stats"])
    assert misses > 0 and hits == 0
    assert not (blocker / "cache").exists()


def test_corrupt_cache_entry_is_recompiled(cold: tuple[Path, dict], tmp_path: Path, data: str) -> None:
    import shutil

    cache = tmp_path / "c"
    shutil.copytree(cold[0], cache)
    victims = sorted(cache.rglob("*unpack_blocks_serial*.nbc"))
    assert victims
    victims[0].write_bytes(victims[0].read_bytes()[:10])  # a truncated data file
    healed = _read(cache, data, "id,v,s")
    assert healed["digest"] == cold[1]["digest"]
    assert healed["stats"]["cuda_kernels.bitunpack._unpack_blocks_serial"]["misses"] >= 1
    assert _totals(_read(cache, data, "id,v,s")["stats"])[1] == 0, "the entry was rewritten"


@pytest.mark.slow
def test_concurrent_writers_share_one_cache(tmp_path: Path, data: str) -> None:
    cache = tmp_path / "c"
    # Three processes compile and save the same and different kernels at once.
    procs = [_start(cache, data, cols) for cols in ("id,s", "v,s", "id,v,s")]
    results = [_finish(p) for p in procs]
    assert results[2]["digest"] == _expected(data, ["id", "v", "s"])
    after = _read(cache, data, "id,v,s")
    hits, misses = _totals(after["stats"])
    assert hits > 0 and misses == 0, after["stats"]
    assert after["digest"] == results[2]["digest"]
    assert not list(cache.rglob("*.tmp.*")), "temporary files are renamed into place"


def test_cache_dir_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numba

    monkeypatch.setattr(_jitcache, "_resolved", [])
    monkeypatch.delenv(_jitcache.CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "nb"))
    got = _jitcache.cache_dir()
    assert got is not None and got.parent == tmp_path / "nb" / "lance_gpu"
    assert got.name.startswith(f"numba-{numba.__version__}-py{sys.version_info[0]}{sys.version_info[1]}-")
    assert oct(got.stat().st_mode & 0o777) == oct(0o700)
    # An unusable NUMBA_CACHE_DIR falls through to the per-user location.
    monkeypatch.setattr(_jitcache, "_resolved", [])
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "f"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    got = _jitcache.cache_dir()
    assert got is not None and got.parent == tmp_path / "xdg" / "lance_gpu"
    # An explicit, unusable LANCE_GPU_CACHE_DIR means in-memory compilation, not another place.
    monkeypatch.setattr(_jitcache, "_resolved", [])
    monkeypatch.setenv(_jitcache.CACHE_DIR_ENV, str(tmp_path / "f" / "x"))
    assert _jitcache.cache_dir() is None


def test_fingerprint_follows_kernel_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "cuda_kernels"
    lib = tmp_path / "lance_gpu"
    pkg.mkdir()
    lib.mkdir()
    (pkg / "k.py").write_text("def core(x):\n    return x + 1\n")
    (lib / "loops.py").write_text("from numba import prange\n")
    (lib / "plain.py").write_text("x = 1\n")
    monkeypatch.setattr(_jitcache, "_ROOTS", (pkg, lib))
    base = _jitcache.source_fingerprint()
    (lib / "plain.py").write_text("x = 2\n")  # no kernels there: same cache
    assert _jitcache.source_fingerprint() == base
    (pkg / "k.py").write_text("def core(x):\n    return x + 2\n")  # a kernel changed: new cache
    changed = _jitcache.source_fingerprint()
    assert changed != base
    (lib / "loops.py").write_text("from numba import prange  # edited\n")
    assert _jitcache.source_fingerprint() != changed


def test_signatures_get_their_own_data_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jitcache, "_resolved", [])
    monkeypatch.setattr(_jitcache, "_checked_paths", set())
    monkeypatch.setenv(_jitcache.CACHE_DIR_ENV, str(tmp_path))

    def twice(x):  # compiled below for two signatures
        return x * 2

    first = _jitcache.njit(cache=True)(twice)
    assert first(3) == 6 and first(1.5) == 3.0
    data_files = sorted(p.name for p in tmp_path.rglob("*.nbc"))
    assert len(data_files) == 2, data_files  # named after each key's hash, never a shared counter
    # A dispatcher made afresh (as in another process) finds both in the index.
    again = _jitcache.njit(cache=True)(twice)
    assert again(4) == 8 and again(2.5) == 5.0
    assert sum(again.stats.cache_hits.values()) == 2
    assert sum(again.stats.cache_misses.values()) == 0


def test_cold_read_runs_twins_while_the_worker_fills_the_cache(cold_twins: tuple[Path, dict], data: str) -> None:
    cache, got = cold_twins
    first = {"digest": got["digest"], "twins": got["twins1"], "stats": got["stats1"]}  # the cold read
    assert first["digest"] == _expected(data, ["id", "v", "s"])
    assert first["twins"], "numpy twins stood in for kernels not compiled yet"
    compiled_here = {name for name, s in first["stats"].items() if s["misses"]}
    assert not compiled_here & set(first["twins"]), compiled_here
    # the worker (waited for by the child) compiled what the twins stood in for
    second = _read(cache, data, "id,v,s", twins="1")
    assert second["digest"] == first["digest"]
    # loaded from the cache (twins stand in only for small calls made before numba's
    # target context is up: see test_small_reads_do_not_set_up_numba)
    assert set(second["twins"]) <= set(first["twins"]), second["twins"]
    hits, misses = _totals(second["stats"])
    assert hits > 0 and misses == 0, second["stats"]
    assert second["context"]
    assert not list(cache.rglob("*.tmp.*"))


def test_small_reads_do_not_set_up_numba(tmp_path: Path) -> None:
    """On a warm cache, a fresh process reading a small table (every kernel call of at most
    SMALL_CALL_ELEMENTS elements) runs the twins instead of setting up numba's target context
    to load cached code (~0.4 s of CPU, more than the whole read): same table as pylance."""
    rng = np.random.default_rng(5)
    path = str(tmp_path / "small.lance")
    for i in range(3):
        ids = np.arange(16 * i, 16 * (i + 1), dtype=np.int64)
        part = pa.table({"id": ids, "v": pa.array(rng.integers(0, 1000, 16)), "s": pa.array([f"s{k % 7}" for k in ids])})
        lance.write_dataset(part, path, mode="create" if i == 0 else "append")
    cache = tmp_path / "c"
    cold = _read(cache, path, "id,v,s", twins="1")  # fills the cache (its worker is waited for)
    warm = _read(cache, path, "id,v,s", twins="1")
    assert cold["digest"] == warm["digest"] == _expected(path, ["id", "v", "s"])
    assert warm["twins"] and not warm["context"], warm
    assert _totals(warm["stats"]) == (0, 0)  # nothing loaded, nothing compiled


# Two reads in one fresh process with twins on and an empty cache: the first read (its digest,
# whether it set up numba's target context, the twins it ran, and the cache stats once the
# worker it started is done: what CHILD prints), then the second read after the worker finished
# (the process loads its compiled code in the background).
CHILD_SWITCH = r"""
import hashlib, json, sys
import lance_gpu
from cuda_kernels import _jitcache
path = sys.argv[1]
first = lance_gpu.dataset(path, device="cpu").to_table()
digest = hashlib.sha256(str(first.to_pydict()).encode()).hexdigest()
context = "numba.np.arraymath" in sys.modules  # imported when numba sets up its target context
twins1 = _jitcache.twin_stats()
assert _jitcache.wait_for_worker(600)
stats1 = _jitcache.cache_stats()
second = lance_gpu.dataset(path, device="cpu").to_table()
twins2 = sum(_jitcache.twin_stats().values()) - sum(twins1.values())
print(json.dumps({"digest": digest, "same": first.equals(second), "context": context, "twins1": twins1, "stats1": stats1,
                  "twins2": twins2, "stats": _jitcache.cache_stats()}))
"""


@pytest.fixture(scope="module")
def cold_twins(tmp_path_factory: pytest.TempPathFactory, data: str) -> tuple[Path, dict]:
    """CHILD_SWITCH's two reads with an empty cache (one cold compile by the worker serves
    the two tests of a cold process with twins): the cache it leaves and what it printed."""
    cache = tmp_path_factory.mktemp("twins-cache")
    env = dict(os.environ, PYTHONPATH=str(ROOT), LANCE_GPU_CACHE_DIR=str(cache), LANCE_GPU_JIT_TWINS="1")
    env.pop("NUMBA_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-c", CHILD_SWITCH, data], env=env, text=True, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cache, json.loads(proc.stdout.strip().splitlines()[-1])


def test_cold_process_switches_to_compiled_code_in_the_background(cold_twins: tuple[Path, dict]) -> None:
    got = cold_twins[1]
    assert got["same"]
    # the first read ran twins only: nothing compiled or loaded in the process, no target context
    assert sum(got["twins1"].values()) > 0 and not got["context"]
    # once the worker was done, the process had loaded its code: the second read ran no twin
    assert got["twins2"] == 0
    hits, misses = _totals(got["stats"])
    assert hits > 0 and misses == 0, got["stats"]
