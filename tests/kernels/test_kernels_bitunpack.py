"""FastLanes unpack/pack (CPU) against an independent bit-stream reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuda_kernels import CorruptInputError, pack_blocks, unpack_blocks
from cuda_kernels.bitunpack import FL_ORDER, packed_words_per_block

DTYPES = [np.uint8, np.uint16, np.uint32, np.uint64]


def _bits(dt):
    return np.dtype(dt).itemsize * 8


def ref_unpack_block(packed, w, dt):
    """Reference: every lane's W words form a little-endian bit stream; row r is bits [r*W, r*W+W).

    Written independently of the kernel's word/shift arithmetic: it goes through
    numpy's unpackbits on the byte representation of each lane's words.
    """
    t = _bits(dt)
    lanes = 1024 // t
    out = np.zeros(1024, dtype=dt)
    if w == 0:
        return out
    words = np.asarray(packed, dtype=dt).astype(np.dtype(dt).newbyteorder("<"))
    per_lane = words.reshape(w, lanes).T.copy()  # [lane, j]: word j of lane
    bits = np.unpackbits(per_lane.view(np.uint8).reshape(lanes, -1), axis=1, bitorder="little")
    bits = bits.reshape(lanes, t, w).astype(np.uint64)  # [lane, row, bit]
    weights = np.left_shift(np.uint64(1), np.arange(w, dtype=np.uint64))
    vals = (bits * weights).sum(axis=2, dtype=np.uint64)  # [lane, row]
    for r in range(t):
        pos = FL_ORDER[r // 8] * 16 + (r % 8) * 128 + np.arange(lanes)
        out[pos] = vals[:, r].astype(dt)
    return out


def ref_pack_block(values, w, dt):
    """Reference inverse of :func:`ref_unpack_block` (bit stream per lane, then packbits)."""
    t = _bits(dt)
    lanes = 1024 // t
    if w == 0:
        return np.zeros(0, dtype=dt)
    vals = np.zeros((lanes, t), dtype=np.uint64)
    for r in range(t):
        pos = FL_ORDER[r // 8] * 16 + (r % 8) * 128 + np.arange(lanes)
        vals[:, r] = values[pos]
    bits = (vals[:, :, None] >> np.arange(w, dtype=np.uint64)) & np.uint64(1)
    stream = np.packbits(bits.reshape(lanes, t * w).astype(np.uint8), axis=1, bitorder="little")
    per_lane = stream.view(np.dtype(dt).newbyteorder("<")).reshape(lanes, w)
    return per_lane.T.reshape(-1).astype(dt)


def random_values(rng, n, w, dt):
    if w == 0:
        return np.zeros(n, dtype=dt)
    raw = rng.integers(0, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
    return (raw >> np.uint64(64 - w)).astype(dt)


def random_words(rng, n, dt):
    return rng.integers(0, np.iinfo(dt).max, n, dtype=dt, endpoint=True)


@pytest.mark.parametrize("dt", DTYPES)
def test_unpack_every_width_matches_reference(dt):
    rng = np.random.default_rng(_bits(dt))
    t = _bits(dt)
    for w in range(t + 1):
        wpb = packed_words_per_block(w, t)
        words = random_words(rng, 2 * wpb, dt)
        got = unpack_blocks(words, np.array([0, wpb]), np.array([w, w]))
        assert got.dtype == dt
        assert got.shape == (2048,)
        np.testing.assert_array_equal(got[:1024], ref_unpack_block(words[:wpb], w, dt), err_msg=f"W={w}")
        np.testing.assert_array_equal(got[1024:], ref_unpack_block(words[wpb:], w, dt), err_msg=f"W={w}")


@pytest.mark.parametrize("dt", DTYPES)
def test_pack_every_width_matches_reference(dt):
    rng = np.random.default_rng(100 + _bits(dt))
    t = _bits(dt)
    for w in range(t + 1):
        values = random_values(rng, 3072, w, dt)
        packed = pack_blocks(values, w)
        wpb = packed_words_per_block(w, t)
        assert packed.shape == (3 * wpb,)
        for b in range(3):
            np.testing.assert_array_equal(
                packed[b * wpb : (b + 1) * wpb], ref_pack_block(values[b * 1024 : (b + 1) * 1024], w, dt)
            )
        np.testing.assert_array_equal(unpack_blocks(packed, np.arange(3) * wpb, np.full(3, w)), values)


def test_known_answer_u8_w3():
    # Docstring example: T=8, W=3, row 2 of lane 5 starts at bit 6 of packed[5]
    # and continues in bit 0 of packed[128 + 5]; it is value 0*16 + 2*128 + 5 = 261.
    packed = np.zeros(3 * 128, dtype=np.uint8)
    packed[5] = 0b1100_0000  # bits 6, 7 -> value bits 0, 1
    packed[128 + 5] = 0b0000_0001  # bit 0 -> value bit 2
    out = unpack_blocks(packed, np.array([0]), np.array([3], dtype=np.uint8))
    expected = np.zeros(1024, dtype=np.uint8)
    expected[261] = 0b111
    np.testing.assert_array_equal(out, expected)


def test_known_answer_u32_full_width_is_transpose():
    # With W = T the block is a pure permutation of the words.
    words = np.arange(1024, dtype=np.uint32)
    out = unpack_blocks(words, np.array([0]), np.array([32]))
    lanes = 32
    for r in range(32):
        for lane in (0, 7, 31):
            assert out[FL_ORDER[r // 8] * 16 + (r % 8) * 128 + lane] == words[lanes * r + lane]


@pytest.mark.parametrize("dt", DTYPES)
def test_mixed_widths_offsets_and_gaps(dt):
    """Blocks of many widths at arbitrary (gapped, out-of-order) offsets, as in a batch of pages."""
    rng = np.random.default_rng(7)
    t = _bits(dt)
    widths = rng.integers(0, t + 1, 40)
    chunks, offsets, expected = [], [], []
    pos = 0
    for w in widths:
        gap = int(rng.integers(0, 3))
        chunks.append(random_words(rng, gap, dt))
        pos += gap
        vals = random_values(rng, 1024, int(w), dt)
        p = pack_blocks(vals, int(w))
        chunks.append(p)
        offsets.append(pos)
        pos += p.size
        expected.append(vals)
    words = np.concatenate(chunks)
    perm = rng.permutation(len(widths))
    got = unpack_blocks(words, np.array(offsets)[perm], widths[perm].astype(np.uint8))
    np.testing.assert_array_equal(got, np.concatenate([expected[i] for i in perm]))


def test_parallel_path_matches_serial():
    rng = np.random.default_rng(3)
    nb = 600  # above the prange threshold
    widths = rng.integers(0, 33, nb)
    vals = [random_values(rng, 1024, int(w), np.uint32) for w in widths]
    packed = [pack_blocks(v, int(w)) for v, w in zip(vals, widths)]
    offsets = np.concatenate([[0], np.cumsum([p.size for p in packed])[:-1]])
    got = unpack_blocks(np.concatenate(packed), offsets, widths)
    np.testing.assert_array_equal(got, np.concatenate(vals))


def test_out_parameter_and_signed_words():
    vals = np.arange(1024, dtype=np.uint16) % 1000
    packed = pack_blocks(vals, 10)
    out = np.empty(1024, dtype=np.uint16)
    res = unpack_blocks(packed, np.array([0]), np.array([10]), out=out)
    assert res is out
    np.testing.assert_array_equal(out, vals)
    # signed words of the same size are reinterpreted
    np.testing.assert_array_equal(unpack_blocks(packed.view(np.int16), [0], [10]), vals)


def test_empty_inputs():
    for dt in DTYPES:
        out = unpack_blocks(np.zeros(0, dtype=dt), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        assert out.shape == (0,) and out.dtype == dt
        assert pack_blocks(np.zeros(0, dtype=dt), 3).shape == (0,)


def test_zero_width_needs_no_words():
    out = unpack_blocks(np.zeros(0, dtype=np.uint32), np.array([0, 0]), np.array([0, 0]))
    np.testing.assert_array_equal(out, np.zeros(2048, dtype=np.uint32))


@pytest.mark.parametrize(
    ("offsets", "widths", "nwords"),
    [
        ([0], [33], 2000),  # width above T
        ([0], [-1], 2000),  # negative width
        ([1], [32], 1024),  # runs past the end by one word
        ([-1], [1], 64),  # negative offset
        ([0, 40], [1, 1], 64),  # second block past the end
    ],
)
def test_corrupt_blocks_raise(offsets, widths, nwords):
    with pytest.raises(CorruptInputError):
        unpack_blocks(np.zeros(nwords, dtype=np.uint32), np.array(offsets), np.array(widths))


def test_pack_rejects_bad_arguments():
    with pytest.raises(ValueError, match="multiple"):
        pack_blocks(np.zeros(1000, dtype=np.uint8), 3)
    with pytest.raises(ValueError, match="fit"):
        pack_blocks(np.full(1024, 8, dtype=np.uint8), 3)
    with pytest.raises(ValueError, match="bit_width"):
        pack_blocks(np.zeros(1024, dtype=np.uint8), 9)
    with pytest.raises(TypeError):
        unpack_blocks(np.zeros(10, dtype=np.float32), [0], [1])


@settings(max_examples=40, deadline=None)
@given(
    dt=st.sampled_from(DTYPES),
    data=st.data(),
)
def test_roundtrip_hypothesis(dt, data):
    t = _bits(dt)
    widths = data.draw(st.lists(st.integers(0, t), min_size=1, max_size=4))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    vals = [random_values(rng, 1024, w, dt) for w in widths]
    packed = [pack_blocks(v, w) for v, w in zip(vals, widths)]
    offsets = np.concatenate([[0], np.cumsum([p.size for p in packed])[:-1]]).astype(np.int64)
    words = np.concatenate(packed) if packed else np.zeros(0, dtype=dt)
    np.testing.assert_array_equal(unpack_blocks(words, offsets, np.array(widths)), np.concatenate(vals))
    for p, w in zip(packed, widths):
        np.testing.assert_array_equal(ref_unpack_block(p, w, dt), unpack_blocks(p, [0], [w]))


@pytest.mark.parametrize("dt", DTYPES)
def test_misaligned_out_uses_generic_path(dt):
    """A misaligned ``out`` view cannot take the 64-bit SWAR path; results must not change."""
    rng = np.random.default_rng(21)
    t = _bits(dt)
    widths = [1, t // 2 + 1, t]
    vals = [random_values(rng, 1024, w, dt) for w in widths]
    packed = [pack_blocks(v, w) for v, w in zip(vals, widths)]
    offsets = np.concatenate([[0], np.cumsum([p.size for p in packed])[:-1]])
    itemsize = np.dtype(dt).itemsize
    raw = np.zeros(3 * 1024 * itemsize + itemsize, dtype=np.uint8)
    out = raw[itemsize:].view(dt)
    assert out.ctypes.data % 8 != 0 or itemsize == 8
    unpack_blocks(np.concatenate(packed), offsets, widths, out=out)
    np.testing.assert_array_equal(out, np.concatenate(vals))
