"""The batched range copy's shared core (``cuda_kernels.segments._copy_span`` / ``_copy_tile``)
on the CPU, against a plain numpy reference: spans cut at destination word boundaries, whole
words stored wide (one aligned source word, or two funnel-shifted), edge bytes alone.

The same core runs on the GPU (``copy_ranges_gpu``, ``gather_binary_gpu``):
``sim_kernels_gpu.py`` checks those under the CUDA simulator on the same kinds of input.
"""

import numpy as np
import pytest

import cuda_kernels as ck
from cuda_kernels import CorruptInputError
from cuda_kernels.segments import WORD, _copy_span, word_view


def reference(src, ss, ln, dst, dd):
    out = dst.copy()
    for s, n, d in zip(ss, ln, dd, strict=True):
        out[d : d + n] = src[s : s + n]
    return out


def _unaligned(rng, n, offset, fill=None):
    """A byte array of ``n`` bytes whose first byte sits ``offset`` bytes past an 8-byte boundary."""
    base = np.empty(n + 16, np.uint8)
    skip = (offset - base.ctypes.data) % 8
    a = base[skip : skip + n]
    a[:] = rng.integers(0, 256, n) if fill is None else fill
    assert n == 0 or a.ctypes.data % 8 == offset % 8
    return a


def test_word_view_covers_the_whole_aligned_words():
    rng = np.random.default_rng(0)
    for offset in range(8):
        for n in (0, 1, 7, 8, 9, 15, 16, 17, 64):
            a = _unaligned(rng, n, offset)
            words, w0 = word_view(a)
            assert words.dtype == np.uint64 and 0 <= w0 <= 7
            if words.size:  # every aligned word inside a: none left at either end
                assert (a.ctypes.data + w0) % 8 == 0 and n - (w0 + WORD * words.size) < WORD
            else:
                assert n < 2 * WORD - 1
            np.testing.assert_array_equal(words.view(np.uint8), a[w0 : w0 + WORD * words.size])


@pytest.mark.parametrize(("nlanes", "compiled"), [(1, True), (3, True), (32, True), (3, False)])
def test_copy_span_every_alignment_and_length(nlanes, compiled):
    """Every source / destination offset within a word, lengths 0..25, 31 and 40 (no whole
    word up to several), spans touching both ends of both arrays; lanes 0..nlanes-1 together copy the
    span once, nothing outside it is written.  The core compiled (numba's integer typing, as
    on the GPU) and as plain Python (NumPy's, as under the CUDA simulator)."""
    rng = np.random.default_rng(nlanes)
    copy_span = _copy_span.cpu if compiled else _copy_span
    for so in range(8):
        for do in range(8):
            src = _unaligned(rng, 64, so)
            sw, sw0 = word_view(src)
            for n in [*range(26), 31, 40]:
                for s in {0, 64 - n}:  # at both ends of src (its offset within a word: so)
                    for d in {0, 48 - n}:
                        dst = _unaligned(rng, 48, do, fill=0xEE)
                        want = reference(src, [s], [n], dst, [d])
                        dw, dw0 = word_view(dst)
                        for lane in range(nlanes):
                            copy_span(src, sw, sw0, dst, dw, dw0, np.int64(s), np.int64(d), np.int64(n), np.int64(lane), np.int64(nlanes))
                        np.testing.assert_array_equal(dst, want, err_msg=f"so={so} do={do} s={s} d={d} n={n}")


def test_copy_ranges_matches_reference():
    """Many ranges of mixed lengths (empty, one byte, across 16-byte boundaries, long), in
    order and permuted, into contiguous and gapped destinations, through the compiled driver."""
    rng = np.random.default_rng(3)
    for trial in range(40):
        nsrc = int(rng.integers(1, 5000))
        src = _unaligned(rng, nsrc, trial % 8)
        k = int(rng.integers(1, 300))
        ln = np.minimum(rng.integers(0, (2, 20, 70, 3000)[trial % 4], k), nsrc)
        ss = np.array([rng.integers(0, nsrc - n + 1) for n in ln], np.int64)
        order = rng.permutation(k) if trial % 2 else np.arange(k)
        gaps = rng.integers(0, 3, k) if trial % 3 == 0 else np.zeros(k, np.int64)
        dd = np.empty(k, np.int64)
        dd[order] = np.concatenate([[0], np.cumsum(ln[order] + gaps)[:-1]])
        dst = _unaligned(rng, int((ln + gaps).sum()) + 3, (trial // 8) % 8, fill=0xEE)
        want = reference(src, ss, ln, dst, dd)
        np.testing.assert_array_equal(ck.copy_ranges(src, ss, ln, dst, dd), want)


def test_copy_ranges_rejects_ranges_outside_either_array():
    src = np.arange(100, dtype=np.uint8)
    with pytest.raises(CorruptInputError):
        ck.copy_ranges(src, [95], [10], np.zeros(20, np.uint8), [0])
    with pytest.raises(CorruptInputError):
        ck.copy_ranges(src, [0], [10], np.zeros(20, np.uint8), [15])


def _fill_reference(dst, dd, nb, pats, ps, pl):
    out = dst.copy()
    for d, n, p0, k in zip(dd, nb, ps, pl, strict=True):
        out[d : d + n] = np.resize(pats[p0 : p0 + k], n)
    return out


def test_fill_patterns_matches_reference():
    """Segments of lengths 0..300 at every offset within a word, patterns of 1..16 bytes (those
    dividing 8 stored a word at a time, the others byte by byte), a segment's pattern running
    on across tiles of the compiled driver (4 KiB)."""
    rng = np.random.default_rng(5)
    pats = rng.integers(0, 256, 64).astype(np.uint8)
    for trial in range(30):
        k = int(rng.integers(1, 40))
        nb = rng.integers(0, (3, 20, 300, 9000)[trial % 4], k)
        pl = rng.choice([1, 2, 3, 4, 5, 7, 8, 16], k)
        ps = np.array([rng.integers(0, pats.size - n + 1) for n in pl], np.int64)
        dd = np.concatenate([[0], np.cumsum(nb)[:-1]]) + trial % 8
        dst = _unaligned(rng, int(nb.sum()) + 9, trial % 8, fill=0xEE)
        want = _fill_reference(dst, dd, nb, pats, ps, pl)
        np.testing.assert_array_equal(ck.fill_patterns(dst, dd, nb, pats, ps, pl), want, err_msg=f"trial {trial}")
    with pytest.raises(CorruptInputError):
        ck.fill_patterns(np.zeros(8, np.uint8), [4], [8], pats, [0], [2])
