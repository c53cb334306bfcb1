# SPDX-License-Identifier: Apache-2.0
"""Staging's host side (no GPU needed): byte ranges and blobs get 64-byte aligned arena
positions, a range registered twice is staged once, and filling a slab window, split
across threads or not, gives exactly the arena's bytes."""

from __future__ import annotations

import numpy as np
import pytest

from lance_gpu.gpu import staging


def _reference(st: staging.Stager) -> np.ndarray:
    arena = np.zeros(st.nbytes, np.uint8)
    for it in st.items:
        arena[it.pos : it.pos + it.source.size] = it.source
    return arena


def _stager(rng: np.random.Generator, sizes: list[int]) -> staging.Stager:
    st = staging.Stager()
    for i, n in enumerate(sizes):
        data = rng.integers(0, 256, n, dtype=np.uint8)
        if i % 3 == 0:
            st.add_buffer(f"file{i % 2}", 100 * i, data)
        else:
            st.add_bytes(data.view(np.uint8) if n % 8 else data.view(np.uint64))
    return st


def test_positions_are_aligned_and_ranges_staged_once() -> None:
    st = staging.Stager()
    view = np.arange(10, dtype=np.uint8)
    a = st.add_buffer("f", 0, view)
    b = st.add_bytes(np.arange(3, dtype=np.int64))
    c = st.add_buffer("f", 0, view)
    assert (a, b, c) == (0, 64, 0) and st.nbytes == 128 and len(st.items) == 2


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("window", [97, 1000, 4096, 1 << 20])
def test_slab_fill_matches_the_arena(monkeypatch, threads: int, window: int) -> None:
    monkeypatch.setattr(staging, "FILL_THREADS", threads)
    monkeypatch.setattr(staging, "FILL_PART_MIN", 128)
    monkeypatch.setattr(staging, "_fill_pool", [])
    rng = np.random.default_rng(window + threads)
    st = _stager(rng, [0, 1, 63, 64, 65, 5000, 3, 777, 12000, 8, 129, 2048])
    ref = _reference(st)
    got = np.full(st.nbytes, 0xAA, np.uint8)
    slab = np.empty(window, np.uint8)
    lo, k = 0, 0
    while lo < st.nbytes:
        hi = min(lo + window, st.nbytes)
        slab[:] = 0
        st._fill(slab, lo, hi, k)
        got[lo:hi] = slab[: hi - lo]
        while k < len(st.items) and st.items[k].pos + st.items[k].source.size <= hi:
            k += 1
        lo = hi
    # padding between items is unspecified; every item's bytes must be exact
    for it in st.items:
        np.testing.assert_array_equal(got[it.pos : it.pos + it.source.size], ref[it.pos : it.pos + it.source.size])
