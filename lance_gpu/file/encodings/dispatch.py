# SPDX-License-Identifier: Apache-2.0
"""The decoder dispatch on the ``CompressiveEncoding`` oneof: tables and entry points.

The tables start empty; :mod:`lance_gpu.file.encodings` (the package, which imports every
encoding) fills them once through :func:`register`, so it is the one place that lists
the encodings.  This module imports no encoding: an encoding whose values nest another
compressive encoding (general compression, FSST, fixed-size lists, packed structs)
imports :func:`decode_miniblock` / :func:`decode_block` / :func:`fixed_bits` from here
at top level, without an import cycle through the package.  Importing this module
imports its package first (Python's rule), so the tables are full before any call.

A kind missing from a table raises :class:`~lance_gpu.errors.UnsupportedEncodingError`
naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lance_gpu.file.blocks import Block, select_block
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext, which

#: Mini-block decoders: ``fn(enc, bufs, ctx) -> Block`` for the chunks of a page.
_MINIBLOCK: dict[str, Callable[..., Block]] = {}
#: Mini-block decoders that can skip unselected values: ``fn(enc, bufs, ctx, select=...)``.
_MINIBLOCK_SELECTING: dict[str, Callable[..., Block]] = {}
#: Block decoders: ``fn(enc, buf, num_values, ctx) -> Block`` for one buffer.
_BLOCK: dict[str, Callable[..., Block]] = {}
#: Bits per value of fixed-width per-value (full-zip) encodings: ``fn(enc, ctx) -> int``.
_FIXED_BITS: dict[str, Callable[[Any, DecodeContext], int]] = {}


def register(
    kind: str,
    *,
    miniblock: Callable[..., Block] | None = None,
    selecting: bool = False,
    block: Callable[..., Block] | None = None,
    fixed_bits: Callable[[Any, DecodeContext], int] | None = None,
) -> None:
    """Register the decoders of the ``CompressiveEncoding`` field ``kind``.

    ``selecting``: ``miniblock`` takes ``select=`` (positions among the chunks' values) and
    decodes only those values.
    """
    if miniblock is not None:
        _MINIBLOCK[kind] = miniblock
        if selecting:
            _MINIBLOCK_SELECTING[kind] = miniblock
    if block is not None:
        _BLOCK[kind] = block
    if fixed_bits is not None:
        _FIXED_BITS[kind] = fixed_bits


def decode_miniblock(enc, bufs: list[ChunkBuffers], ctx: DecodeContext, select: np.ndarray | None = None) -> Block:
    """Decode the values of all chunks of a mini-block page.

    With ``select`` (positions among the chunks' values) only those values are returned,
    in that order; variable-width decoders then copy and decompress only them.
    """
    kind = which(enc, ctx)
    if select is not None and kind in _MINIBLOCK_SELECTING:
        return _MINIBLOCK_SELECTING[kind](getattr(enc, kind), bufs, ctx, select=select)
    fn = _MINIBLOCK.get(kind)
    if fn is None:
        raise ctx.unsupported(f"{kind} in a mini-block page")
    block = fn(getattr(enc, kind), bufs, ctx)
    return block if select is None else select_block(block, select)


def decode_block(enc, buf: np.ndarray, num_values: int, ctx: DecodeContext) -> Block:
    """Decode one buffer holding ``num_values`` values."""
    kind = which(enc, ctx)
    fn = _BLOCK.get(kind)
    if fn is None:
        raise ctx.unsupported(f"{kind} as a block encoding")
    return fn(getattr(enc, kind), buf, num_values, ctx)


def fixed_bits(enc, ctx: DecodeContext) -> int:
    """Bits per value of a fixed-width per-value encoding (full-zip)."""
    kind = which(enc, ctx)
    fn = _FIXED_BITS.get(kind)
    if fn is None:
        raise ctx.unsupported(f"{kind} as a fixed-width per-value encoding")
    return fn(getattr(enc, kind), ctx)


__all__ = ["decode_block", "decode_miniblock", "fixed_bits", "register"]
