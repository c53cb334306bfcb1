# SPDX-License-Identifier: Apache-2.0
"""fsst_decode_spans equals fsst_decode on gathered spans, with gaps between them."""

from __future__ import annotations

import numpy as np
import pytest

from cuda_kernels.errors import CorruptInputError
from cuda_kernels.fsst import fsst_decode, fsst_decode_spans


def _table(rng: np.random.Generator, n_symbols: int = 40) -> tuple[np.ndarray, np.ndarray]:
    lengths = rng.integers(1, 9, 256).astype(np.uint8)
    symbols = rng.integers(0, 2**63, 256, dtype=np.uint64)
    return symbols, lengths


@pytest.mark.parametrize("n", [0, 1, 7, 5000])
def test_spans_match_contiguous_decode(n: int) -> None:
    rng = np.random.default_rng(n)
    symbols, lengths = _table(rng)
    pieces, gaps = [], []
    for _ in range(n):
        codes = list(rng.integers(0, 40, rng.integers(0, 12)))
        if rng.random() < 0.3:
            codes += [255, int(rng.integers(0, 256))]  # an escaped literal byte
        pieces.append(np.array(codes, np.uint8))
        gaps.append(rng.integers(0, 5, rng.integers(0, 4)).astype(np.uint8))  # bytes between spans
    buf, starts = [], []
    pos = 0
    for p, g in zip(pieces, gaps):
        starts.append(pos)
        buf += [p, g]
        pos += p.size + g.size
    data = np.concatenate(buf) if buf else np.zeros(0, np.uint8)
    lens = np.array([p.size for p in pieces], np.int64)
    got_off, got = fsst_decode_spans(symbols, lengths, data, np.array(starts, np.int64), lens, n_symbols=40)
    contiguous = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
    offs = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offs[1:])
    ref_off, ref = fsst_decode(symbols, lengths, contiguous, offs, n_symbols=40)
    np.testing.assert_array_equal(got_off, ref_off)
    np.testing.assert_array_equal(got, ref)


def test_spans_reject_truncated_escape() -> None:
    symbols, lengths = _table(np.random.default_rng(1))
    data = np.array([1, 2, 255], np.uint8)
    with pytest.raises(CorruptInputError):
        fsst_decode_spans(symbols, lengths, data, np.array([0], np.int64), np.array([3], np.int64), n_symbols=40)
