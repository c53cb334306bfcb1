"""Run-length expansion, dictionary gather and compaction (CPU) against NumPy / Python references."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cuda_kernels import (
    CorruptInputError,
    compact_binary,
    compact_fixed,
    gather_binary,
    gather_fixed,
    keep_mask_from_deleted,
    rle_expand,
)

# ------------------------------------------------------------------------- RLE


def ref_rle(values, runs):
    out = []
    for v, n in zip(values.tolist(), runs.tolist()):
        out.extend([v] * n)
    return out


@pytest.mark.parametrize("run_dtype", [np.uint8, np.uint16, np.uint32, np.int64])
@pytest.mark.parametrize("val_dtype", [np.int8, np.uint16, np.int32, np.int64, np.float32, np.float64, np.bool_])
def test_rle_matches_reference(run_dtype, val_dtype):
    rng = np.random.default_rng(1)
    values = rng.integers(0, 100, 500).astype(val_dtype)
    runs = rng.integers(0, 256, 500).astype(run_dtype)  # includes zero-length runs
    got = rle_expand(values, runs)
    assert got.dtype == values.dtype
    assert got.tolist() == ref_rle(values, runs)


def test_rle_worked_example_and_out():
    out = np.empty(5, dtype=np.int64)
    assert rle_expand(np.array([7, 9]), np.array([2, 3], np.uint8), out=out) is out
    assert out.tolist() == [7, 7, 9, 9, 9]


def test_rle_exotic_dtypes():
    vals = np.array(["2020-01-01", "2021-05-06"], dtype="datetime64[us]")
    np.testing.assert_array_equal(rle_expand(vals, np.array([1, 2], np.uint8)), np.repeat(vals, [1, 2]))
    vals = np.array([1 + 2j, 3 - 1j], dtype=np.complex128)  # 16-byte items
    np.testing.assert_array_equal(rle_expand(vals, np.array([2, 1], np.uint8)), np.repeat(vals, [2, 1]))
    vals = np.array([1.5, 2.5], dtype=np.float16)
    np.testing.assert_array_equal(rle_expand(vals, np.array([2, 1], np.uint8)), np.repeat(vals, [2, 1]))


def test_rle_empty_and_zero_runs():
    assert rle_expand(np.zeros(0, np.int32), np.zeros(0, np.uint8)).shape == (0,)
    assert rle_expand(np.array([1, 2], np.int32), np.array([0, 0], np.uint8)).shape == (0,)


def test_rle_large_parallel():
    rng = np.random.default_rng(2)
    values = rng.integers(0, 2**40, 100_000)
    runs = rng.integers(0, 256, 100_000).astype(np.uint8)
    np.testing.assert_array_equal(rle_expand(values, runs), np.repeat(values, runs))


def test_rle_bad_input():
    with pytest.raises(CorruptInputError):
        rle_expand(np.array([1, 2]), np.array([3, -1]))
    with pytest.raises(ValueError):
        rle_expand(np.array([1, 2]), np.array([3], np.uint8))
    with pytest.raises(TypeError):
        rle_expand(np.array([1, 2]), np.array([3.0, 1.0]))


@settings(max_examples=50, deadline=None)
@given(
    values=hnp.arrays(np.int64, st.integers(0, 50)),
    data=st.data(),
)
def test_rle_hypothesis(values, data):
    runs = data.draw(hnp.arrays(np.uint16, values.shape[0], elements=st.integers(0, 300)))
    np.testing.assert_array_equal(rle_expand(values, runs), np.repeat(values, runs.astype(np.int64)))


# ---------------------------------------------------------------------- gather


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.int64, np.bool_, np.float16, "datetime64[ns]"])
@pytest.mark.parametrize("idx_dtype", [np.uint8, np.int32, np.uint32, np.int64])
def test_gather_fixed_matches_numpy(dtype, idx_dtype):
    rng = np.random.default_rng(3)
    items = rng.integers(0, 100, 200).astype(dtype)
    idx = rng.integers(0, 200, 1000).astype(idx_dtype)
    got = gather_fixed(items, idx)
    assert got.dtype == items.dtype
    np.testing.assert_array_equal(got, items[idx])


def test_gather_fixed_rows_and_wide_items():
    items = np.arange(60, dtype=np.uint8).reshape(5, 12)  # fixed_size_binary(12)
    idx = np.array([4, 0, 0, 2])
    np.testing.assert_array_equal(gather_fixed(items, idx), items[idx])
    dec = np.arange(10, dtype=np.complex128)  # 16-byte items
    np.testing.assert_array_equal(gather_fixed(dec, idx), dec[idx])
    fsl = np.arange(30, dtype=np.float32).reshape(5, 3, 2)
    np.testing.assert_array_equal(gather_fixed(fsl, idx), fsl[idx])


def test_gather_fixed_large_parallel():
    rng = np.random.default_rng(4)
    items = rng.random(1000)
    idx = rng.integers(0, 1000, 200_000)
    np.testing.assert_array_equal(gather_fixed(items, idx), items[idx])
    idx[150_000] = 1000
    with pytest.raises(CorruptInputError, match="150000"):
        gather_fixed(items, idx)


@pytest.mark.parametrize("bad", [5, -1, 2**40])
def test_gather_fixed_out_of_bounds(bad):
    with pytest.raises(CorruptInputError):
        gather_fixed(np.arange(5), np.array([0, bad, 1]))
    with pytest.raises(CorruptInputError):
        gather_fixed(np.arange(10, dtype=np.uint8).reshape(5, 2), np.array([0, bad]))


def test_gather_empty():
    assert gather_fixed(np.arange(5), np.zeros(0, np.int64)).shape == (0,)
    with pytest.raises(CorruptInputError):
        gather_fixed(np.zeros(0), np.array([0]))
    offs, data = gather_binary(np.array([0]), np.zeros(0, np.uint8), np.zeros(0, np.int64))
    assert offs.tolist() == [0] and data.size == 0


def _binary(items):
    offs = np.zeros(len(items) + 1, dtype=np.int64)
    offs[1:] = np.cumsum([len(x) for x in items])
    return offs, np.frombuffer(b"".join(items), dtype=np.uint8).copy()


def _strings(offs, data):
    b = data.tobytes()
    return [b[offs[i] : offs[i + 1]] for i in range(len(offs) - 1)]


@pytest.mark.parametrize("off_dtype", [np.int32, np.int64])
def test_gather_binary_matches_reference(off_dtype):
    items = [b"", b"a", b"hello", b"\x00\x01", b"x" * 100]
    offs, data = _binary(items)
    idx = np.array([4, 0, 2, 2, 1, 3, 0])
    out_offs, out = gather_binary(offs.astype(off_dtype), data, idx)
    assert out_offs.dtype == np.int64
    assert _strings(out_offs, out) == [items[i] for i in idx]


def test_gather_binary_large_parallel():
    rng = np.random.default_rng(6)
    items = [bytes(rng.integers(0, 256, rng.integers(0, 20)).astype(np.uint8)) for _ in range(500)]
    offs, data = _binary(items)
    idx = rng.integers(0, 500, 100_000)
    out_offs, out = gather_binary(offs, data, idx)
    assert _strings(out_offs, out) == [items[i] for i in idx]


def test_gather_binary_corrupt():
    offs, data = _binary([b"ab", b"c"])
    with pytest.raises(CorruptInputError):
        gather_binary(offs, data, np.array([2]))
    with pytest.raises(CorruptInputError):
        gather_binary(offs, data, np.array([-1]))
    with pytest.raises(CorruptInputError, match="outside"):
        gather_binary(np.array([0, 2, 9]), data, np.array([1]))
    with pytest.raises(CorruptInputError):
        gather_binary(np.array([0, 2, 1]), data, np.array([1]))


@settings(max_examples=50, deadline=None)
@given(items=st.lists(st.binary(max_size=12), min_size=1, max_size=30), data=st.data())
def test_gather_binary_hypothesis(items, data):
    idx = data.draw(st.lists(st.integers(0, len(items) - 1), max_size=50))
    offs, buf = _binary(items)
    out_offs, out = gather_binary(offs, buf, np.array(idx, dtype=np.int64))
    assert _strings(out_offs, out) == [items[i] for i in idx]


# ---------------------------------------------------------------------- compact


def test_keep_mask_from_deleted():
    mask = keep_mask_from_deleted(10, np.array([3, 0, 9, 3], dtype=np.uint32))
    assert mask.dtype == np.bool_
    assert np.flatnonzero(~mask).tolist() == [0, 3, 9]
    assert keep_mask_from_deleted(0, np.zeros(0, np.int64)).shape == (0,)
    assert keep_mask_from_deleted(3, []).all()


@pytest.mark.parametrize("bad", [[10], [-1], [2, 11]])
def test_keep_mask_out_of_range(bad):
    with pytest.raises(CorruptInputError):
        keep_mask_from_deleted(10, np.array(bad))


def test_compact_fixed_and_binary():
    rng = np.random.default_rng(8)
    vals = rng.random(50)
    mask = rng.random(50) < 0.5
    np.testing.assert_array_equal(compact_fixed(vals, mask), vals[mask])
    items = [bytes([i]) * (i % 4) for i in range(50)]
    offs, data = _binary(items)
    out_offs, out = compact_binary(offs.astype(np.int32), data, mask)
    assert _strings(out_offs, out) == [x for x, m in zip(items, mask) if m]
    with pytest.raises(ValueError):
        compact_fixed(vals, mask[:-1])
    empty = compact_binary(offs, data, np.zeros(50, bool))
    assert empty[0].tolist() == [0] and empty[1].size == 0
