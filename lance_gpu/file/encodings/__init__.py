# SPDX-License-Identifier: Apache-2.0
"""Compressive encodings of file versions 2.1 and 2.2 (``lance.encodings21``).

One home per encoding: a module, or a package holding the encoding's CPU decoder and CPU
encoder (``__init__``), its device encoder (``device.py``, numba-cuda kernels), its compiled
CPU loops (``_native.py`` / ``_encoder.py``) and the host side of its device decoding
(``gpu_plan.py``: where its blocks / runs lie in the staged chunk bytes, for
:mod:`lance_gpu.gpu.plan`; Flat, bit-packing and RLE so far).  This module registers them in one
place: the decoders (into the tables of :mod:`~lance_gpu.file.encodings.dispatch`, whose
:func:`decode_miniblock`, :func:`decode_block` and :func:`fixed_bits` it hands on: the
exhaustive dispatch on the ``CompressiveEncoding`` oneof; anything not registered raises
:class:`~lance_gpu.errors.UnsupportedEncodingError` naming it) and the encoders
(:data:`ENCODERS`, CPU and device, used by ``lance_gpu.file.writer.pages`` and
``lance_gpu.write.device_pages``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

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
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext
from lance_gpu.file.encodings.bitpacking import device as bitpacking_device
from lance_gpu.file.encodings.dictionary import device as dictionary_device
from lance_gpu.file.encodings.dispatch import decode_block, decode_miniblock, fixed_bits, register
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
    # the CPU page dictionary is built by lance_gpu.file.writer.pages (Arrow's dictionary_encode)
    "dictionary": Encoder(None, dictionary_device.dictionary_of_sample),
    "dictionary_strings": Encoder(None, dictionary_device.string_dictionary_of_sample),
}

for _kind, _miniblock, _block in (
    ("flat", flat.decode_miniblock, flat.decode_block),
    ("variable", variable.decode_miniblock, variable.decode_block),
    ("constant", constant.decode_miniblock, constant.decode_block),
    ("inline_bitpacking", bitpacking.decode_miniblock, bitpacking.decode_inline_block),
    ("out_of_line_bitpacking", None, bitpacking.decode_block),
    ("fsst", fsst.decode_miniblock, fsst.decode_block),
    ("dictionary", dictionary.decode_miniblock, dictionary.decode_block),
    ("rle", rle.decode_miniblock, rle.decode_block),
    ("byte_stream_split", byte_stream_split.decode_miniblock, byte_stream_split.decode_block),
    ("general", general.decode_miniblock, general.decode_block),
    ("fixed_size_list", fixed_size_list.decode_miniblock, fixed_size_list.decode_block),
    ("packed_struct", packed_struct.decode_miniblock, None),
):
    # decoders that can skip work for values that are not selected take ``select=``
    register(_kind, miniblock=_miniblock, block=_block,
             selecting=_kind in ("flat", "fixed_size_list", "inline_bitpacking", "variable", "fsst"))
register("flat", fixed_bits=lambda enc, ctx: int(enc.bits_per_value))
register("fixed_size_list", fixed_bits=fixed_size_list.item_bits)


__all__ = ["ENCODERS", "ChunkBuffers", "DecodeContext", "Encoder", "decode_block", "decode_miniblock", "fixed_bits"]
