# SPDX-License-Identifier: Apache-2.0
"""The FSST compressor of the writer (``lance_gpu.file.encodings.fsst._encoder``).

``compress_fast`` (hash buckets, unchecked 8-byte loads and stores, four interleaved runs)
must give exactly the bytes of ``compress``, the plain greedy longest-match reference, and
both must decode back to the input with the reader's decoder.  The fast path reads and
writes near the ends of its buffers, so the cases put strings at every distance from the
end of the data, start the offsets mid-buffer, and include empty inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuda_kernels import fsst_decode
from lance_gpu.file.encodings.fsst import _encoder as _fsst


def _pack(strs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(strs) + 1, np.int64)
    np.cumsum([len(s) for s in strs], out=offsets[1:])
    data = np.frombuffer(b"".join(strs), np.uint8).copy() if strs else np.zeros(0, np.uint8)
    return data, offsets


def _check(data: np.ndarray, offsets: np.ndarray, vals=None, lens=None) -> tuple[np.ndarray, np.ndarray]:
    """compress_fast == compress, and the result decodes to the strings; returns it."""
    if vals is None:
        vals, lens = _fsst.build_table(data, offsets)
    pv, pl = _fsst._pad(vals), _fsst._pad(lens)
    fast_off, fast = _fsst.compress_fast(data, offsets, pv, pl, vals.size)
    ref_off, ref = _fsst.compress(data, offsets, pv, pl, vals.size)
    assert np.array_equal(fast_off, ref_off)
    assert np.array_equal(fast, ref)
    dec_off, dec = fsst_decode(pv, pl, fast, fast_off, n_symbols=vals.size)
    want = data[offsets[0] : offsets[-1]]
    assert np.array_equal(dec_off, offsets - offsets[0])
    assert np.array_equal(dec, want)
    return fast_off, fast


WORDS = [b"alpha", b"beta", b"gamma", b"delta", b"lorem", b"ipsum", b"quick", b"brown", b"fox", b""]


def _text(n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [b" ".join(rng.choice(WORDS, int(rng.integers(0, 9)))) for _ in range(n)]


def test_trained_table_compresses_text():
    data, offsets = _pack(_text(20_000, 1))
    vals, lens = _fsst.build_table(data, offsets)
    assert 0 < vals.size <= _fsst.MAX_SYMBOLS
    assert set(np.unique(lens).tolist()) <= set(range(1, 9))
    _off, comp = _check(data, offsets, vals, lens)
    assert comp.size < 0.5 * data.size


def test_empty_inputs():
    data, offsets = _pack([])
    vals = np.zeros(0, np.uint64)
    lens = np.zeros(0, np.uint8)
    off, comp = _fsst.compress_fast(data, offsets, _fsst._pad(vals), _fsst._pad(lens), 0)
    assert off.tolist() == [0] and comp.size == 0
    _check(*_pack([b""] * 5), vals, lens)
    _check(*_pack([b"", b"a", b""]), vals, lens)  # escapes only


@pytest.mark.parametrize("tail", range(0, 12))
def test_strings_at_every_distance_from_the_end(tail):
    """The last string ends 0..11 bytes after the last 8-byte window that fits."""
    strs = _text(400, 3) + [b"x" * tail, b"fox brown"[: tail % 9]]
    _check(*_pack(strs))


def test_offsets_start_mid_buffer():
    data, offsets = _pack(_text(3000, 4))
    vals, lens = _fsst.build_table(data, offsets)
    for lo, hi in ((1, 3000), (17, 2900), (2999, 3000), (1500, 1500)):
        sub = np.ascontiguousarray(offsets[lo : hi + 1])
        _check(data, sub, vals, lens)


def test_all_byte_values_and_long_strings():
    rng = np.random.default_rng(5)
    strs = [bytes(range(256)), rng.bytes(5000), b"\xff" * 300, b"\x00" * 17] + _text(200, 6)
    _check(*_pack(strs))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.lists(st.sampled_from(WORDS), max_size=8).map(b" ".join),
            st.text(max_size=20).map(lambda s: s.encode()),
        ),
        max_size=300,
    )
)
def test_fast_equals_reference_on_random_strings(strs):
    _check(*_pack(strs))
