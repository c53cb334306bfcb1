# SPDX-License-Identifier: Apache-2.0
"""numba loops for the 2.0 decoders (compiled once, cached on disk)."""

from __future__ import annotations

import numpy as np
from cuda_kernels._jitcache import njit


@njit(cache=True, nogil=True)
def unpack_lsb_stream(data, first_bit, n, width, signed, out):  # pragma: no cover - compiled
    """Values ``i < n`` of ``width`` bits each at bit ``first_bit + i * width`` of an
    LSB-first bit stream, zero- or sign-extended into ``out`` (``uint64``).

    The caller guarantees ``first_bit + n * width <= 8 * data.size``.
    """
    w = np.uint64(width)
    if width == 64:
        mask = np.uint64(0xFFFFFFFFFFFFFFFF)
    else:
        mask = (np.uint64(1) << w) - np.uint64(1)
    sign = np.uint64(0)
    if width > 0:
        sign = np.uint64(1) << np.uint64(width - 1)
    for i in range(n):
        bit = first_bit + i * width
        byte = bit >> 3
        sh = bit & 7
        nbytes = (sh + width + 7) >> 3
        v = np.uint64(0)
        for k in range(min(nbytes, 8)):
            v |= np.uint64(data[byte + k]) << np.uint64(8 * k)
        v >>= np.uint64(sh)
        if nbytes > 8:
            v |= np.uint64(data[byte + 8]) << np.uint64(64 - sh)
        v &= mask
        if signed and width < 64 and width > 0 and (v & sign) != 0:
            v |= ~mask
        out[i] = v
