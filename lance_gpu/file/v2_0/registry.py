# SPDX-License-Identifier: Apache-2.0
"""Dispatch on the ``ArrayEncoding`` oneof of format 2.0 (package ``lance.encodings``).

Every decoder has the signature ``decode(msg, src, start, stop, arrow_type) -> block``:
``msg`` is the variant's message, ``src`` the :class:`~lance_gpu.file.v2_0.page.PageSource`,
``[start, stop)`` the values wanted (relative to the start of the page, counted in the
units of that node: rows for the top node, ``rows * dimension`` under a fixed-size list,
bytes under a binary), and ``arrow_type`` the Arrow type those values will become (or
``None`` for internal integers such as offsets and dictionary indices).

Variants 14 and up (``inline_bitpacking`` ... ``byte_stream_split``) were 2.1 experiments
that pylance never writes in a 2.0 page; they, and anything unknown, raise
:class:`~lance_gpu.errors.UnsupportedEncodingError` naming the variant.  ``list`` and
``struct`` describe whole columns and are handled by the field reader
(:mod:`lance_gpu.file.v2_0.reader`), not here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from lance_gpu._proto import encodings_v2_0_pb2 as pb
from lance_gpu.file.v2_0.blocks import AllNull, Fixed, split_validity
from lance_gpu.file.v2_0.page import PageSource

#: Variant name -> decoder, filled by :mod:`lance_gpu.file.v2_0` (the package imports every
#: variant module and registers it, so the variant modules import this one without a cycle;
#: importing this module imports its package first, so the table is full before any call).
_DECODERS: dict[str, Callable[..., Any]] = {}


def register(kind: str, decoder: Callable[..., Any]) -> None:
    """Register the decoder of the ``ArrayEncoding`` variant ``kind``."""
    _DECODERS[kind] = decoder


def variant(enc: pb.ArrayEncoding) -> str | None:
    return enc.WhichOneof("array_encoding")


def decode(enc: pb.ArrayEncoding, src: PageSource, start: int, stop: int, arrow_type: pa.DataType | None):
    kind = variant(enc)
    if kind is None:
        raise src.ctx.corrupt("empty ArrayEncoding (no variant set)")
    fn = _DECODERS.get(kind)
    if fn is None:
        raise src.ctx.unsupported(f"2.0 ArrayEncoding variant '{kind}'")
    if stop < start:
        raise src.ctx.corrupt(f"empty or reversed value range [{start}, {stop})")
    return fn(getattr(enc, kind), src, start, stop, arrow_type)


def decode_uint(enc: pb.ArrayEncoding, src: PageSource, start: int, stop: int, what: str) -> np.ndarray:
    """Decode integers (offsets, indices) as ``uint64``; the encoding's own nulls are ignored."""
    block, _ = split_validity(decode(enc, src, start, stop, None))
    if isinstance(block, AllNull):
        return np.zeros(block.n, np.uint64)
    if not isinstance(block, Fixed) or block.bits not in (8, 16, 32, 64):
        raise src.ctx.corrupt(f"{what} must be 8/16/32/64-bit integers")
    vals = block.as_uint()
    if vals.size != stop - start:
        raise src.ctx.corrupt(f"{what}: decoded {vals.size} values, expected {stop - start}")
    return vals.astype(np.uint64, copy=False)


def inner_flat_bits(enc: pb.ArrayEncoding) -> int | None:
    """``bits_per_value`` of the Flat under ``enc`` (through Nullable no-nulls), if any."""
    while True:
        kind = variant(enc)
        if kind == "flat":
            return int(enc.flat.bits_per_value)
        if kind == "nullable" and enc.nullable.WhichOneof("nullability") == "no_nulls":
            enc = enc.nullable.no_nulls.values
            continue
        return None
