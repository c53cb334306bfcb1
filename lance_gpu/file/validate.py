# SPDX-License-Identifier: Apache-2.0
"""Decoded pages are valid Arrow: the checks between a page decoder and pyarrow.

Every variable-width block a decoder hands out -- ``offsets[n + 1]`` into ``data`` -- must
have offsets that start at or after 0, never decrease and end inside ``data``; a block
of a string type (``string``, ``large_string``, ``string_view``, or a dictionary whose
values are one) must hold well-formed UTF-8 in every value.  Otherwise the page is
corrupt: :class:`~lance_gpu.errors.CorruptFileError` names the file, column and page
(pylance refuses such a page with "invalid utf-8 sequence" too).

Most string bytes are validated where they are written: the FSST decoders run a UTF-8
automaton once per symbol in their decode loops (:mod:`cuda_kernels.utf8`) and mark the
block (``offsets_valid`` / ``utf8_valid``), so a valid block costs no second pass here.
A dictionary page is validated once, its dictionary, not its expansion (the expansion is
a gather of whole dictionary values under offsets the gather builds).  Anything else, and
every block a decoder could not vouch for, goes through :func:`cuda_kernels.check_variable`
(CPU; one vectorised pass over the bytes), which also finds the first bad value for the
error.  The device decode uses :func:`cuda_kernels.check_variable_segments_gpu`
(:mod:`lance_gpu.gpu.decode`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cuda_kernels import CorruptInputError, check_variable
from lance_gpu.file.blocks import VariableWidthBlock
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.page import LeafPage


def is_utf8_type(t: pa.DataType) -> bool:
    """Whether values of ``t`` (its storage; a dictionary's values) must be UTF-8."""
    if isinstance(t, pa.ExtensionType):
        t = t.storage_type
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def check_values(
    offsets: np.ndarray,
    data: np.ndarray,
    utf8: bool,
    ctx: DecodeContext,
    offsets_valid: bool = False,
    utf8_valid: bool = False,
) -> None:
    """Raise ``ctx.corrupt`` unless ``offsets`` / ``data`` are valid variable-width values.

    ``offsets_valid`` / ``utf8_valid``: what the decoder already established (see
    :class:`~lance_gpu.file.blocks.VariableWidthBlock`); nothing is read again then.
    """
    if offsets_valid and (utf8_valid or not utf8):
        return
    try:
        check_variable(offsets, data, utf8)
    except CorruptInputError as exc:
        raise ctx.corrupt(str(exc)) from exc


def check_block(block: object, utf8: bool, ctx: DecodeContext) -> None:
    """Check a decoded block if it is variable-width (fixed-width blocks have nothing to check)."""
    if isinstance(block, VariableWidthBlock):
        check_values(block.offsets, block.data, utf8, ctx, block.offsets_valid, block.utf8_valid)


def check_leaf_page(page: LeafPage, leaf_type: pa.DataType, ctx: DecodeContext, dictionary_checked: bool = False) -> None:
    """Check the values, dictionary items or constant value of one decoded 2.1 / 2.2 page
    (``dictionary_checked``: the page's dictionary passed this check before)."""
    utf8 = is_utf8_type(leaf_type)
    values = page.values
    if isinstance(values, tuple):  # a constant page: (kind, value bytes)
        if utf8:
            raw = np.frombuffer(values[1], np.uint8)
            check_values(np.array([0, raw.size], np.int64), raw, True, ctx)
    elif page.dictionary is None:
        check_block(values, utf8, ctx)
    if page.dictionary is not None and not dictionary_checked:
        # the values are the dictionary's gathered by index (offsets built by the gather)
        check_block(page.dictionary[0], utf8, ctx)
