# SPDX-License-Identifier: Apache-2.0
"""Reads in processes forked from one that has decoded (DataLoader workers, multiprocessing pools).

numba's GNU OpenMP threading layer terminates a child forked from a process whose OpenMP pool
was started as soon as the child enters a parallel region ("fork() called from a process
already using GNU OpenMP, this is unsafe").  lance-gpu's ``parallel=True`` kernels run serial
compiles of themselves in such a child (``cuda_kernels._jitcache.ForkSafeKernel``).  Each test
decodes in the parent (parallel kernels), forks, decodes the same in the child and compares;
page sizes are above the thresholds of the parallel branches (a single-column read decodes
with every numba thread).
"""

from __future__ import annotations

import multiprocessing
import sys
import traceback
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import pyarrow as pa
import pytest

import lance_gpu
from cuda_kernels import _jitcache

lance = pytest.importorskip("lance")

pytestmark = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork() on this platform"
)

N = 270_000  # > 256 FastLanes blocks per page: the parallel bit-unpacking branch
COLUMNS = ("id", "s", "u", "opt")


def _omp_pool_started() -> bool:
    """Whether this process started numba's GNU OpenMP pool (what makes forks unsafe)."""
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    omppool = sys.modules.get("numba.np.ufunc.omppool")
    return bool(
        parallel is not None and parallel._is_initialized and parallel._threading_layer == "omp"
        and getattr(omppool, "openmp_vendor", "GNU") == "GNU"
    )


def _parallel_kernels() -> dict[str, _jitcache.ForkSafeKernel]:
    """The parallel kernels built so far in this process, by ``module.qualname``."""
    import gc

    return {f"{k.__module__}.{k.__qualname__}": k for k in gc.get_objects() if type(k) is _jitcache.ForkSafeKernel}  # type(): isinstance() reads __class__, which warns on some torch objects


def _ran(kernels: dict[str, _jitcache.ForkSafeKernel], serial: bool) -> set[str]:
    """Which of ``kernels`` have compiled code (of their serial variant when ``serial``)."""
    out = set()
    for name, k in kernels.items():
        d = k._serial if serial else k.dispatcher
        if d is not None and d.signatures:
            out.add(name)
    return out


def _in_fork(work: Callable[[], Any]) -> dict[str, Any]:
    """Run ``work()`` in a forked child; its result, the serial kernels it ran and whether
    it was marked serial-only (an assertion error if the child died or raised)."""
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)

    def child() -> None:
        receiver.close()
        try:
            result = work()
            sender.send({"result": result, "serial_only": _jitcache.serial_only(),
                         "serial_ran": _ran(_parallel_kernels(), serial=True)})
        except BaseException:  # noqa: BLE001 - reported to the parent
            sender.send({"error": traceback.format_exc()})
        sender.close()

    proc = ctx.Process(target=child)
    proc.start()
    sender.close()  # the child's end: EOF here once the child is gone
    try:
        # read before joining: a result larger than the pipe's buffer blocks the child until read
        out = receiver.recv() if receiver.poll(600) else {"error": "no result in 600 s"}
    except EOFError:
        out = None
    proc.join(60)
    assert proc.exitcode == 0, f"forked child ended with exit code {proc.exitcode} (-15: numba's OpenMP fork guard)"
    assert out is not None and "error" not in out, out
    return out


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """One fragment: bit-packed ints, dictionary strings, FSST strings, a nullable column."""
    table = pa.table(
        {
            "id": pa.array(np.arange(N), pa.int64()),
            "s": pa.array([f"tag-{i % 1000}-é" for i in range(N)]),
            "u": pa.array([f"user-{i * 7919 % 1_000_003}-name-é@example.com" for i in range(N)]),
            "opt": pa.array([None if i % 7 == 0 else i for i in range(N)], pa.int64()),
        }
    )
    path = str(tmp_path_factory.mktemp("fork") / "ds.lance")
    lance.write_dataset(table, path, data_storage_version="2.1")
    return path


def test_forked_child_reads_what_the_parent_read(uri) -> None:
    want = lance.dataset(uri).to_table()

    def read_columns() -> list[bool]:
        ds = lance_gpu.dataset(uri)
        return [ds.to_table(columns=[c]).equals(want.select([c])) for c in COLUMNS]

    assert read_columns() == [True] * len(COLUMNS)
    kernels = _parallel_kernels()
    ran = _ran(kernels, serial=False)
    # what this read runs (earlier tests of the same process may have run other kernels)
    # (the UTF-8 check of a one-chunk page runs on whichever variant is at hand, so it is not
    # required here; a parallel call in the child would end it with -15, which _in_fork catches)
    used: set[str] = set()
    if numba.get_num_threads() > 1:
        used |= {"lance_gpu.cpu.native._fsst_chunks_parallel", "cuda_kernels.bitunpack._unpack_blocks_parallel",
                 "cuda_kernels.gather._binary_copy_parallel"}
    assert used <= ran
    # a process that is no such fork never builds the serial variants
    assert not _jitcache.serial_only()
    assert all(k._serial is None for k in kernels.values())

    child = _in_fork(read_columns)
    assert child["result"] == [True] * len(COLUMNS)
    assert child["serial_only"] == _omp_pool_started()
    if child["serial_only"]:
        assert used <= child["serial_ran"]


def test_forked_child_runs_every_parallel_kernel_serially() -> None:
    """Kernel calls large enough for the parallel branches of levels, RLE, gather and FSST
    (reads split these into smaller pages) and merge_insert's key join, in the parent and in
    a forked child."""
    from cuda_kernels import NULL_AND_EMPTY_LIST, NULLABLE_ITEM, fsst_decode, gather_binary, gather_fixed, rle_expand
    from cuda_kernels.fsst import MAX_SYMBOLS
    from cuda_kernels.levels import unravel_levels
    from lance_gpu.cpu.keyjoin import KeyTable

    rng = np.random.default_rng(5)
    # list<int?> over more than two chunks of levels: rep 1 starts a row, 0 continues the
    # list; def 0 valid item, 1 null item, 2 null list, 3 empty list (row starts only)
    rep = (rng.random(200_000) < 0.3).astype(np.uint16)
    rep[0] = 1
    def_ = rng.integers(0, 2, rep.size).astype(np.uint16)
    def_[(rep == 1) & (rng.random(rep.size) < 0.2)] = 2
    def_[(rep == 1) & (rng.random(rep.size) < 0.1)] = 3
    values = rng.integers(0, 2**40, 100_000)
    runs = rng.integers(0, 256, values.size).astype(np.uint8)
    indices = rng.integers(0, values.size, 200_000)
    strings = pa.array([f"s{i % 977}-é" * (i % 5) for i in range(100_000)])
    offsets = np.frombuffer(strings.buffers()[1], np.int32)[: len(strings) + 1]
    data = np.frombuffer(strings.buffers()[2], np.uint8)
    symbols = np.zeros(MAX_SYMBOLS, np.uint64)
    symbols[:3] = [ord("s"), ord("-"), int.from_bytes("é".encode(), "little")]
    sym_lens = np.array([1, 1, 2] + [0] * (MAX_SYMBOLS - 3), np.uint8)
    comp = np.frombuffer(b"\x00\x01\x02" * 50_000, np.uint8)
    comp_offsets = np.arange(0, comp.size + 1, 3, dtype=np.int64)
    kinds = [NULLABLE_ITEM, NULL_AND_EMPTY_LIST]
    source_keys = rng.permutation(50_000).astype(np.int64)
    target_keys = rng.integers(-1000, 60_000, 100_000)

    def decode() -> list[np.ndarray]:
        un = unravel_levels(rep, def_, kinds)
        out = [un.layers[0].validity, un.layers[1].offsets, un.layers[1].validity]
        out.append(rle_expand(values, runs))
        out.append(gather_fixed(values, indices))
        g_off, g_bytes = gather_binary(offsets, data, indices[:150_000] % len(strings))
        out += [g_off, g_bytes]
        f_off, f_bytes = fsst_decode(symbols, sym_lens, comp, comp_offsets, 3)
        tgt, src, ambiguous = KeyTable((source_keys, np.ones(source_keys.size, np.bool_))).probe(
            (target_keys, target_keys % 11 != 0)
        )
        return [*out, f_off, f_bytes, tgt, src, np.int64(ambiguous)]

    want = decode()
    np.testing.assert_array_equal(want[3], np.repeat(values, runs))
    assert bytes(want[8]) == "s-é".encode() * 50_000
    hit = (target_keys >= 0) & (target_keys < 50_000) & (target_keys % 11 != 0)
    np.testing.assert_array_equal(want[9], np.flatnonzero(hit))
    np.testing.assert_array_equal(source_keys[want[10]], target_keys[hit])
    child = _in_fork(decode)
    for a, b in zip(child["result"], want, strict=True):
        np.testing.assert_array_equal(a, b)
    if child["serial_only"] and numba.get_num_threads() > 1:
        assert {"cuda_kernels.levels._unravel_count_parallel", "cuda_kernels.levels._unravel_fill_parallel",
                "cuda_kernels.rle._expand_parallel", "cuda_kernels.gather._gather_parallel",
                "cuda_kernels.gather._binary_copy_parallel", "cuda_kernels.fsst._lengths_parallel",
                "cuda_kernels.fsst._decode_parallel"} <= child["serial_ran"]
    # (the merge_insert key join runs serial kernels anyway: its result is compared above)


def test_serial_variant_is_built_only_in_forked_children() -> None:
    """The mechanism on a small kernel: same results, the serial dispatcher cached under its
    own name (numba's cache key does not include ``parallel``), none in the parent."""

    @_jitcache.njit(cache=False, nogil=True, parallel=True)
    def total(x):  # pragma: no cover - compiled
        acc = 0.0
        for i in numba.prange(x.size):
            acc += x[i]
        return acc

    assert isinstance(total, _jitcache.ForkSafeKernel)
    x = np.arange(100_000, dtype=np.float64)
    assert total(x) == x.sum()
    assert total._serial is None

    def run() -> tuple[float, str, bool]:
        got = total(x)
        return got, total.serial.py_func.__qualname__, total.serial.targetoptions.get("parallel", False)

    child = _in_fork(run)
    assert child["result"][0] == x.sum()
    if child["serial_only"]:
        assert child["result"][1].endswith("total__serial")
        assert not child["result"][2]
    assert total._serial is None


def test_dataloader_fork_workers_after_a_parent_read(uri) -> None:
    """A training script: the parent reads with lance-gpu, then torch's DataLoader forks its
    workers, which read (string pages always run a parallel kernel)."""
    torch = pytest.importorskip("torch")
    import lance_gpu.torch as lt

    def feed(workers: int) -> dict[int, tuple[int, str]]:
        ds = lt.LanceDataset(uri, 4096, columns=["id", "u", "opt"], device="cpu", nulls="mask", read_rows=65_536)
        loader = torch.utils.data.DataLoader(
            ds, batch_size=None, num_workers=workers, multiprocessing_context="fork" if workers else None
        )
        rows: dict[int, tuple[int, str]] = {}
        for batch in loader:
            ids = batch["id"].tolist()
            rows.update(zip(ids, zip(batch["opt"].tolist(), batch["u"], strict=True), strict=True))
        return rows

    parent = feed(0)
    want = lance.dataset(uri).to_table(columns=["id", "u"])
    assert sorted(parent) == want.column("id").to_pylist()
    assert [parent[i][1] for i in range(N)] == want.column("u").to_pylist()
    assert feed(2) == parent
