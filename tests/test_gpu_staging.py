# SPDX-License-Identifier: Apache-2.0
"""Staging's host side (no GPU needed): byte ranges and blobs get 64-byte aligned arena
positions, a range registered twice is staged once, and filling a slab window, split
across threads or not, gives exactly the arena's bytes -- also for ranges read at fill time
straight into the slab from a local file, ``memory://`` or S3 (moto), fetching only the
registered bytes."""

from __future__ import annotations

import numpy as np
import pytest

from lance_gpu.gpu import staging


def _reference(st: staging.Stager, objects: dict[str, np.ndarray] | None = None) -> np.ndarray:
    arena = np.zeros(st.nbytes, np.uint8)
    for it in st.items:
        src = it.source if it.source is not None else objects[it.key][it.offset : it.offset + it.size]  # type: ignore[index]
        arena[it.pos : it.pos + it.size] = src
    return arena


def _fill_windows(st: staging.Stager, window: int) -> np.ndarray:
    """The arena as upload() fills it, slab window by slab window (host side only)."""
    got = np.full(st.nbytes, 0xAA, np.uint8)
    slab = np.empty(window, np.uint8)
    lo, k = 0, 0
    while lo < st.nbytes:
        hi = min(lo + window, st.nbytes)
        slab[:] = 0
        st._fill(slab, lo, hi, k)
        got[lo:hi] = slab[: hi - lo]
        while k < len(st.items) and st.items[k].pos + st.items[k].size <= hi:
            k += 1
        lo = hi
    return got


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
    got = _fill_windows(st, window)
    # padding between items is unspecified; every item's bytes must be exact
    for it in st.items:
        np.testing.assert_array_equal(got[it.pos : it.pos + it.size], ref[it.pos : it.pos + it.size])


def _ranged_stager(store, rng: np.random.Generator, objects: dict[str, np.ndarray]) -> tuple[staging.Stager, int]:
    """Ranges of ``objects`` (gaps above the coalescing gap), blobs between them, one range
    registered twice; returns the stager and the number of distinct range bytes."""
    st = staging.Stager()
    wanted = 0
    for key, data in objects.items():
        for off in range(1000, data.size - 300_000, 300_000):
            n = int(rng.integers(1, 200_000))
            a = st.add_range(store, key, off, n)
            assert st.add_range(store, key, off, n) == a  # staged once
            wanted += n
            st.add_bytes(rng.integers(0, 256, int(rng.integers(0, 100)), dtype=np.uint8))
    return st, wanted


def _check_ranged(store, keys: list[str], window: int, threads: int, monkeypatch) -> None:
    monkeypatch.setattr(staging, "FILL_THREADS", threads)
    monkeypatch.setattr(staging, "FILL_PART_MIN", 4096)
    monkeypatch.setattr(staging, "_fill_pool", [])
    rng = np.random.default_rng(window)
    objects = {k: rng.integers(0, 256, 1_500_000, dtype=np.uint8) for k in keys}
    for k, data in objects.items():
        store.put(k, data.tobytes())
    st, wanted = _ranged_stager(store, rng, objects)
    store.stats.reset()
    got = _fill_windows(st, window)
    ref = _reference(st, objects)
    for it in st.items:
        np.testing.assert_array_equal(got[it.pos : it.pos + it.size], ref[it.pos : it.pos + it.size])
    counters = store.stats.snapshot()
    # the registered bytes, plus at most the gaps an object store bridges to save requests
    # (ranges up to ``coalesce_gap`` apart are one GET); no whole-object reads, no lists (nor
    # size lookups on object stores; a local read opens the file, which counts as a head)
    gap = getattr(store, "coalesce_gap", 0)
    assert wanted <= counters["bytes_read"] <= wanted + gap * len(st.items)
    if gap == 0:
        assert counters["bytes_read"] == wanted
    assert counters["lists"] == counters["puts"] == 0
    assert counters["heads"] == 0 or getattr(store, "maps_files", False)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("window", [70_000, 1 << 20, 8 << 20])
def test_ranges_read_into_the_slab_from_memory(monkeypatch, threads: int, window: int) -> None:
    from lance_gpu.io import resolve

    store, root = resolve(f"memory://staging-{window}-{threads}/x")
    _check_ranged(store, [f"{root}/a.lance", f"{root}/b.lance"], window, threads, monkeypatch)


def test_ranges_read_into_the_slab_from_a_local_file(tmp_path, monkeypatch) -> None:
    from lance_gpu.io import LOCAL

    _check_ranged(LOCAL, [str(tmp_path / "a.lance")], 1 << 20, 2, monkeypatch)


def test_ranges_read_into_the_slab_from_s3(s3_server, monkeypatch) -> None:
    from lance_gpu.io import resolve

    store, root = resolve(s3_server.uri("staging"), s3_server.storage_options)
    _check_ranged(store, [f"{root}/a.lance", f"{root}/b.lance"], 300_000, 2, monkeypatch)


@pytest.mark.parametrize("window", [4096, 70_000, 1 << 20])
def test_a_range_lands_once_whole_and_may_refuse(window: int) -> None:
    """A range's ``land`` callback is called once with all its bytes, whether the range lies
    in one slab window (a view of the slab) or spans several (a host copy of the parts),
    after the window holding its last byte is filled; a callback that raises stops the
    upload before that window goes on."""
    from lance_gpu.io import resolve

    store, root = resolve(f"memory://staging-land-{window}/x")
    rng = np.random.default_rng(window)
    data = rng.integers(0, 256, 400_000, dtype=np.uint8)
    key = f"{root}/c.lance"
    store.put(key, data.tobytes())
    landed: list[tuple[int, bytes, bool]] = []
    st = staging.Stager()
    st.add_bytes(rng.integers(0, 256, 40, dtype=np.uint8))
    ranges = [(1_000, 250_000), (300_000, 3_000), (303_000, 17)]
    for off, n in ranges:
        st.add_range(store, key, off, n, land=lambda view, off=off: landed.append((off, view.tobytes(), False)))
    slab = np.empty(window, np.uint8)
    lo, k = 0, 0
    while lo < st.nbytes:
        hi = min(lo + window, st.nbytes)
        st._fill(slab, lo, hi, k)
        st._land(slab, lo, hi, k)
        while k < len(st.items) and st.items[k].pos + st.items[k].size <= hi:
            k += 1
        lo = hi
    assert [off for off, _, _ in landed] == [off for off, _ in ranges]  # each once, in arena order
    for (off, n), (_, got, _) in zip(ranges, landed, strict=True):
        assert got == data[off : off + n].tobytes()
    assert not st._partial  # no copy of a spanning range is kept

    def refuse(view: np.ndarray) -> None:
        raise ValueError(f"refused {view.size}")

    st2 = staging.Stager()
    st2.add_range(store, key, 10, 100, land=refuse)
    st2._fill(slab, 0, st2.nbytes, 0)
    with pytest.raises(ValueError, match="refused 100"):
        st2._land(slab, 0, st2.nbytes, 0)
    with pytest.raises(ValueError, match="no bytes"):
        st2.add_range(store, key, 10, 0, land=refuse)


def _file_buffers(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 'file map' and ``n`` buffers of it in file order, as a Lance file lays out page
    buffers (64-byte aligned, some empty), with gaps of 0 bytes, a few bytes (padding), up
    to and past STAGE_GAP, and some off the 64-byte grid."""
    offsets, sizes = [], []
    at = 0
    for _ in range(n):
        gap = int(rng.choice([0, 0, 64, 128, staging.STAGE_GAP, staging.STAGE_GAP + 64, 3 * staging.STAGE_GAP, 8]))
        size = int(rng.choice([0, 5, 64, 300, 1000]))
        at += gap
        offsets.append(at)
        sizes.append(size)
        at += -(-size // 64) * 64 if rng.random() < 0.9 else size  # padded to 64, or not
    whole = rng.integers(0, 256, at + 64, dtype=np.uint8)
    return whole, np.asarray(offsets, np.int64), np.asarray(sizes, np.int64)


@pytest.mark.parametrize("seed", range(8))
def test_neighbouring_file_buffers_are_one_range(seed: int) -> None:
    """Buffers of one mapped file registered in file order, one by one (``add_buffer`` with
    the map) or together (``add_file_buffers``): the same positions and items; a buffer
    starting at most STAGE_GAP bytes after the last item of its file, at the same offset
    modulo 64, extends it; every position is 64-byte aligned and the arena holds each
    buffer's bytes there."""
    rng = np.random.default_rng(seed)
    whole, offsets, sizes = _file_buffers(rng, 60)
    one_by_one = staging.Stager()
    one_by_one.add_bytes(np.arange(10, dtype=np.uint8))  # a blob first: not joined
    pos_one = [one_by_one.add_buffer("f", int(o), whole[o : o + s], whole) if s else 0 for o, s in zip(offsets, sizes, strict=True)]
    together = staging.Stager()
    together.add_bytes(np.arange(10, dtype=np.uint8))
    pos_all = together.add_file_buffers("f", whole, offsets[:30], sizes[:30])
    pos_all = np.concatenate([pos_all, together.add_file_buffers("f", whole, offsets[30:], sizes[30:])])
    assert pos_all.tolist() == pos_one
    assert [(it.pos, it.size) for it in together.items] == [(it.pos, it.size) for it in one_by_one.items]
    assert all(p % staging.ALIGN == 0 for p in pos_one)
    arena = _reference(together)
    for o, s, p in zip(offsets.tolist(), sizes.tolist(), pos_one, strict=True):
        assert np.array_equal(arena[p : p + s], whole[o : o + s])
    # joined exactly where the rule says
    held = sizes > 0
    o, e = offsets[held], offsets[held] + sizes[held]
    joins = (o[1:] >= e[:-1]) & (o[1:] - e[:-1] <= staging.STAGE_GAP) & ((o[1:] - o[:-1]) % staging.ALIGN == 0)
    assert len(together.items) == 1 + 1 + int((~joins).sum())
    # a range asked again keeps its position (one by one, and together)
    assert together.add_file_buffers("f", whole, offsets, sizes).tolist() == pos_one
    assert len(together.items) == len(one_by_one.items)


def test_buffers_of_other_files_and_blobs_are_not_joined() -> None:
    whole = np.arange(4096, dtype=np.int64).view(np.uint8)
    st = staging.Stager()
    a = st.add_buffer("a", 0, whole[:64], whole)
    b = st.add_buffer("b", 64, whole[64:128], whole)  # another file
    st.add_bytes(np.ones(3, np.uint8))
    c = st.add_buffer("b", 128, whole[128:192], whole)  # after a blob
    d = st.add_buffer("b", 192, whole[192:256], whole)  # joins c
    e = st.add_buffer("b", 260, whole[260:300], whole)  # off the 64-byte step: not joined
    assert (a, b) == (0, 64) and c == 192 and d == c + 64 and e % 64 == 0 and e > d
    assert len(st.items) == 5
    arena = _reference(st)
    assert np.array_equal(arena[d : d + 64], whole[192:256]) and np.array_equal(arena[e : e + 40], whole[260:300])
