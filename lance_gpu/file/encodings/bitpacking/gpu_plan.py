# SPDX-License-Identifier: Apache-2.0
"""Device planning of bit-packed chunks (host side): where every FastLanes block lies.

The GPU planner (:mod:`lance_gpu.gpu.plan`) stages the chunk bytes and makes each block
found here one unpack work item (the device unpacks); this module knows the byte layouts:

* InlineBitpacking chunk buffer (values, dictionary indices, levels): ``ceil(count / 1024)``
  blocks, each one ``word``-byte word holding the bit width ``W`` then ``1024 * W / (8 *
  word)`` packed words; the last block's padding values are not decoded.
* OutOfLineBitpacking{16, Flat{W}} level buffer of a chunk: whole 1024-value blocks of ``W``
  bits (``128 * W`` bytes each), then the tail: one padded block, or raw u16 words.

Emission (the registered ``inline_bitpacking`` family, dictionary indices and both level
forms): one ``unpack`` row per block (:func:`emit_inline`, :func:`emit_values`), and for
out-of-line levels a level ``copy`` row per raw tail (:func:`emit_levels`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from lance_gpu.cpu import native
from lance_gpu.file.encodings.base import DecodeContext, DeviceLeaf, DeviceUnit, DeviceUnsupported, one_chunk_buffer, refuse_values


def _exclusive_scan(values: np.ndarray) -> np.ndarray:
    out = np.zeros(values.size + 1, np.int64)
    np.cumsum(values, out=out[1:])
    return out


class InlineBlocks(NamedTuple):
    """The blocks of InlineBitpacking chunk buffers: block ``k`` of chunk ``chunk[k]`` has
    its packed words at word ``word_off[k]`` of the data (viewed as words), bit width
    ``widths[k]``, and gives ``nvals[k]`` values, the first being value ``first[k]`` of its
    chunk."""

    word_off: np.ndarray
    widths: np.ndarray
    nvals: np.ndarray
    chunk: np.ndarray
    first: np.ndarray


class LevelBlocks(NamedTuple):
    """The OutOfLineBitpacking level buffers of some chunks: block ``k`` (``width`` bits)
    at u16 word ``words[k]`` of the data holds levels ``1024 * within[k]`` on of chunk
    ``chunk[k]`` (``counts[k]`` of them); chunk ``i``'s last ``tail_len[i]`` levels are raw
    u16 words at word ``tail_off[i]``, after its ``packed[i]`` block levels."""

    width: int
    words: np.ndarray
    counts: np.ndarray
    chunk: np.ndarray
    within: np.ndarray
    tail_off: np.ndarray
    tail_len: np.ndarray
    packed: np.ndarray


def value_form(enc: Any, leaf: DeviceLeaf, nbuf: int) -> tuple:
    """``("inline_bitpacking", bits)`` of a mini-block page's InlineBitpacking{bits} values
    (``enc``, ``nbuf`` chunk buffers, without a values encoding) unpacked for a fixed-width
    ``leaf`` of ``bits / 8`` bytes; raises :class:`DeviceUnsupported` otherwise."""
    one_chunk_buffer(nbuf)
    if leaf.kind == "var":
        raise refuse_values("inline_bitpacking", leaf)
    ib = enc.inline_bitpacking
    if leaf.kind == "fixed" and not ib.HasField("values") and int(ib.uncompressed_bits_per_value) == 8 * leaf.width:
        return "inline_bitpacking", int(ib.uncompressed_bits_per_value)
    raise DeviceUnsupported("this InlineBitpacking layout")


def inline_word(enc: Any) -> int:
    """Bytes of the words an InlineBitpacking encoding packs (its block headers' size, which
    the device pre-pass reads); 0 for another encoding."""
    if enc.WhichOneof("compression") != "inline_bitpacking":
        return 0
    return int(enc.inline_bitpacking.uncompressed_bits_per_value) // 8


def level_form(enc: Any) -> str | None:
    """:func:`level_kind` (the level encodings of both bit-packed forms are planned here)."""
    return level_kind(enc)


def level_kind(enc) -> str | None:
    """The kind of a bit-packed level encoding the device unpacks: OutOfLineBitpacking{16,
    Flat} or InlineBitpacking{16} without a values encoding (None: another)."""
    kind = enc.WhichOneof("compression")
    if kind == "out_of_line_bitpacking":
        ool = enc.out_of_line_bitpacking
        if int(ool.uncompressed_bits_per_value) == 16 and ool.values.WhichOneof("compression") == "flat":
            return kind
    elif kind == "inline_bitpacking":
        ib = enc.inline_bitpacking
        if int(ib.uncompressed_bits_per_value) == 16 and not ib.HasField("values"):
            return kind
    return None


def level_width(enc) -> int:
    """The packed bit width of an OutOfLineBitpacking{16, Flat{W}} level encoding (W)."""
    return int(enc.out_of_line_bitpacking.values.flat.bits_per_value)


def level_key(enc: Any) -> tuple:
    """What :func:`emit_levels` reads of a bit-packed level encoding besides its
    :func:`level_kind`: the packed width ``W`` of OutOfLineBitpacking{16, Flat{W}} levels
    (their whole blocks, :func:`level_blocks`); nothing of InlineBitpacking{16}'s (each block
    holds its own width)."""
    return (level_width(enc),) if level_kind(enc) == "out_of_line_bitpacking" else ()


def level_blocks(enc, starts: np.ndarray, sizes: np.ndarray, nlevels: np.ndarray, ctx: DecodeContext) -> LevelBlocks:
    """Plan the OutOfLineBitpacking{16, Flat} level buffers ``(starts, sizes)`` (bytes of
    the data) holding ``nlevels`` levels each; raises ``ctx.corrupt`` where they are
    truncated, misaligned or do not match their counts."""
    width = level_width(enc)
    if not 0 <= width <= 16:
        raise ctx.corrupt(f"level bit width {width}")
    boff, bcount, tail_off, tail_len, ok = native.ool_chunk_plan(starts, sizes, nlevels, width, 2)
    if not ok:
        raise ctx.corrupt("mini-block level buffers are truncated or misaligned")
    packed = nlevels - tail_len
    nblk = -(-packed // 1024)
    if int(nblk.sum()) != boff.size:
        raise ctx.corrupt("mini-block level blocks do not match their counts")
    chunk = np.repeat(np.arange(nlevels.size), nblk)
    within = np.arange(boff.size) - _exclusive_scan(nblk)[chunk]
    return LevelBlocks(width, boff, bcount, chunk, within, tail_off, tail_len, packed)


def emit_inline(unit: DeviceUnit, dest: str, bits: int, dst_item: Any, blocks: InlineBlocks | None) -> None:
    """InlineBitpacking chunks: chunk ``i``'s values go to item ``dst_item[i]`` (items of
    ``bits``) of the destination ``dest``; ``blocks``: theirs as the device pre-pass found
    them (one unpack row per block)."""
    assert blocks is not None
    chunk = blocks.chunk
    unit.unpack_list(dest, bits).add(
        words=blocks.word_off, width=blocks.widths,
        dst=np.asarray(dst_item, np.int64)[chunk] + blocks.first, count=blocks.nvals,
    )


def emit_values(unit: DeviceUnit, enc: Any, arg: int, ch: Any, dst: np.ndarray, ctx: DecodeContext) -> None:
    """The work of InlineBitpacking value chunks (``arg``: the value bits, :func:`value_form`):
    chunk ``i`` of ``ch`` (its ``blocks`` as the device pre-pass found them) unpacked to
    byte ``dst[i]`` of the fixed arena (:func:`emit_inline`)."""
    emit_inline(unit, "fixed", arg, dst // (arg // 8), ch.blocks)


def emit_levels(unit: DeviceUnit, form: str, enc: Any, starts: np.ndarray, sizes: np.ndarray, nlevels: np.ndarray,
                dst: np.ndarray, ctx: DecodeContext, blocks: InlineBlocks | None = None, runs: np.ndarray | None = None) -> None:
    """Bit-packed level buffers (``form``: :func:`level_kind`) at arena bytes ``starts`` of
    ``sizes`` bytes: chunk ``i``'s ``nlevels[i]`` u16 levels go to level ``dst[i]``.
    InlineBitpacking{16}: its blocks as the device pre-pass found them (``blocks``);
    OutOfLineBitpacking{16, Flat}: its whole blocks unpacked (:func:`level_blocks`), its raw
    tails copied."""
    if form == "inline_bitpacking":
        emit_inline(unit, "level", 16, dst, blocks)
        return
    ool = level_blocks(enc, starts, sizes, nlevels, ctx)
    if ool.words.size:
        chunk = ool.chunk
        unit.unpack_list("level", 16).add(
            words=ool.words, width=ool.width, dst=dst[chunk] + 1024 * ool.within,
            count=ool.counts,
        )
    tails = np.flatnonzero(ool.tail_len)
    if tails.size:
        unit.copy_level.add(
            src=2 * ool.tail_off[tails], len=2 * ool.tail_len[tails],
            dst=2 * (dst[tails] + ool.packed[tails]),
        )


__all__ = [
    "InlineBlocks", "LevelBlocks", "emit_inline", "emit_levels", "emit_values", "inline_word", "level_blocks", "level_form", "level_key", "level_kind",
    "level_width", "value_form",
]
