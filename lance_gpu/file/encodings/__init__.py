# SPDX-License-Identifier: Apache-2.0
"""Compressive encodings of file versions 2.1 and 2.2 (``lance.encodings21``).

One home per encoding: a module, or a package holding the encoding's CPU decoder and CPU
encoder (``__init__``), its device encoder (``device.py``, numba-cuda kernels), its compiled
CPU loops (``_native.py`` / ``_encoder.py``) and the host side of its device decoding
(``gpu_plan.py``: where its blocks / runs lie in the staged chunk bytes, for
:mod:`lance_gpu.gpu.plan`; Flat, bit-packing and RLE so far).  This module registers them in one
place: the decoders (:func:`decode_miniblock`, :func:`decode_block`, the exhaustive dispatch
on the ``CompressiveEncoding`` oneof; anything not listed raises
:class:`~lance_gpu.errors.UnsupportedEncodingError` naming it) and the encoders
(:data:`ENCODERS`, CPU and device, used by ``lance_gpu.write.pages`` and
``lance_gpu.write.device_pages``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from lance_gpu.file.blocks import Block, select_block
from lance_gpu.file.encodings import (
    bitpacking,
    byte_stream_split,
    constant,
    dictionary,
    fixed_size_list,
    flat,
    fsst,
    general,
    packed_struct,
    rle,
    variable,
)
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext, which
from lance_gpu.file.encodings.bitpacking import device as bitpacking_device
from lance_gpu.file.encodings.dictionary import device as dictionary_device
from lance_gpu.file.encodings.fsst import device as fsst_device
from lance_gpu.file.encodings.rle import device as rle_device
from lance_gpu.file.encodings.variable import device as variable_device


class Encoder(NamedTuple):
    """An encoding's encoders: ``cpu`` takes host arrays, ``device`` device arrays; both
    give the same bytes (None: that side has none, the page encoder does the work)."""

    cpu: Callable[..., Any] | None
    device: Callable[..., Any] | None


#: Encoders by ``CompressiveEncoding`` name (levels: ``out_of_line_bitpacking``).
ENCODERS: dict[str, Encoder] = {
    # Flat chunks are slices of the values' bytes, host or device alike
    "flat": Encoder(flat.encode_miniblock, flat.encode_miniblock),
    "inline_bitpacking": Encoder(bitpacking.encode_miniblock, bitpacking_device.encode_miniblock),
    "out_of_line_bitpacking": Encoder(bitpacking.encode_level_chunks, bitpacking_device.encode_level_chunks),
    "rle": Encoder(rle.encode_miniblock, rle_device.encode_miniblock),
    "variable": Encoder(variable.variable_chunks, variable_device.variable_chunks),
    "fsst": Encoder(fsst.compress_strings, fsst_device.compress_strings),
    # the CPU page dictionary is built by lance_gpu.write.pages (Arrow's dictionary_encode)
    "dictionary": Encoder(None, dictionary_device.dictionary_of_sample),
    "dictionary_strings": Encoder(None, dictionary_device.string_dictionary_of_sample),
}

_MINIBLOCK = {
    "flat": flat.decode_miniblock,
    "variable": variable.decode_miniblock,
    "constant": constant.decode_miniblock,
    "inline_bitpacking": bitpacking.decode_miniblock,
    "fsst": fsst.decode_miniblock,
    "dictionary": dictionary.decode_miniblock,
    "rle": rle.decode_miniblock,
    "byte_stream_split": byte_stream_split.decode_miniblock,
    "general": general.decode_miniblock,
    "fixed_size_list": fixed_size_list.decode_miniblock,
    "packed_struct": packed_struct.decode_miniblock,
}

_BLOCK = {
    "flat": flat.decode_block,
    "variable": variable.decode_block,
    "constant": constant.decode_block,
    "out_of_line_bitpacking": bitpacking.decode_block,
    "inline_bitpacking": bitpacking.decode_inline_block,
    "fsst": fsst.decode_block,
    "dictionary": dictionary.decode_block,
    "rle": rle.decode_block,
    "byte_stream_split": byte_stream_split.decode_block,
    "general": general.decode_block,
    "fixed_size_list": fixed_size_list.decode_block,
}


# Decoders that can skip work for values that are not selected.
_MINIBLOCK_SELECTING = {
    "flat": flat.decode_miniblock,
    "fixed_size_list": fixed_size_list.decode_miniblock,
    "inline_bitpacking": bitpacking.decode_miniblock,
    "variable": variable.decode_miniblock,
    "fsst": fsst.decode_miniblock,
}


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
    if kind == "flat":
        return int(enc.flat.bits_per_value)
    if kind == "fixed_size_list":
        return fixed_size_list.item_bits(enc.fixed_size_list, ctx)
    raise ctx.unsupported(f"{kind} as a fixed-width per-value encoding")


__all__ = ["ENCODERS", "ChunkBuffers", "DecodeContext", "Encoder", "decode_block", "decode_miniblock", "fixed_bits"]
