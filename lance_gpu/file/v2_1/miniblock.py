# SPDX-License-Identifier: Apache-2.0
"""MiniBlockLayout: small values cut into chunks of at most a few KiB.

Page buffers: 0 chunk metadata, 1 chunk data, 2 dictionary (if ``dictionary`` is set), then
the repetition index (if ``repetition_index_depth > 0``).

* Chunk metadata: one word per chunk, u16 in 2.1 and u32 in 2.2 (``has_large_chunk``):
  ``((chunk_bytes / 8 - 1) << 4) | log2(values_in_chunk)``; the last chunk holds the rest.
* Chunk: ``u16 num_levels | [u16 rep_bytes] | [u16 def_bytes] | num_buffers sizes (u16, or
  u32 with large chunks) | pad to 8 with 0xFE``; then rep bytes, def bytes and each value
  buffer, each padded to 8.  Levels are compressed per chunk (OutOfLineBitpacking{16}).
* Values are decoded by the compressive ``value_compression`` over all chunks at once.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.cpu import native
from lance_gpu.file import encodings
from lance_gpu.file.blocks import FixedWidthBlock, slice_block
from lance_gpu.file.encodings import dictionary
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext
from lance_gpu.file.page import LeafPage


def _decode_levels(enc, data: np.ndarray, spans: np.ndarray, nlevels: np.ndarray, ctx: DecodeContext) -> np.ndarray:
    """Decode the per-chunk level buffers described by ``spans`` (start, size) into u16."""
    total = int(nlevels.sum())
    if enc.WhichOneof("compression") == "out_of_line_bitpacking":
        ool = enc.out_of_line_bitpacking
        bits = int(ool.uncompressed_bits_per_value)
        inner = ool.values
        if bits == 16 and inner.WhichOneof("compression") == "flat":
            from cuda_kernels.bitunpack import unpack_blocks

            width = int(inner.flat.bits_per_value)
            if not 0 <= width <= 16:
                raise ctx.corrupt(f"level bit width {width}")
            boff, bcount, tail_off, tail_len, ok = native.ool_chunk_plan(
                spans[:, 0].copy(), spans[:, 1].copy(), nlevels, width, 2
            )
            if not ok:
                raise ctx.corrupt("mini-block level buffers are truncated or misaligned")
            words = data[: data.size - data.size % 2].view(np.uint16)
            unpacked = unpack_blocks(words, boff, np.full(boff.size, width, np.int64))
            out = np.empty(total, np.uint16)
            native.ool_chunk_assemble(unpacked, bcount, words, nlevels, tail_off, tail_len, out)
            return out
    parts = []
    for (s, z), n in zip(spans.tolist(), nlevels.tolist(), strict=True):
        block = encodings.decode_block(enc, data[s : s + z], n, ctx)
        if not isinstance(block, FixedWidthBlock) or block.bits_per_value != 16:
            raise ctx.corrupt("levels must decode to 16-bit values")
        parts.append(block.as_uint())
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)


def chunk_layout(layout, meta: np.ndarray, ctx: DecodeContext) -> tuple[bool, int, np.ndarray, np.ndarray, np.ndarray]:
    """Parse a mini-block page's chunk metadata (buffer 0) alone: ``(large, num_items,
    starts, sizes, counts)``, each chunk's byte offset and size in the chunk data buffer and
    its item count.

    Buffer 0 holds one little-endian word per chunk (u16, or u32 with ``has_large_chunk``):
    ``((chunk_bytes / 8 - 1) << 4) | log2(items_in_chunk)``, the last chunk holding the rest
    of ``num_items``.  Raises ``ctx.corrupt`` on a partial word or counts that do not add up.
    """
    large = bool(layout.has_large_chunk)
    word = 4 if large else 2
    if meta.size % word:
        raise ctx.corrupt("mini-block chunk metadata has a partial word")
    words = meta if meta.ctypes.data % word == 0 else meta.copy()
    num_items = int(layout.num_items)
    starts, sizes, counts, ok = native.chunk_layout(words.view(np.uint32 if large else np.uint16), num_items, large)
    if not ok:
        raise ctx.corrupt("mini-block chunk metadata does not add up to num_items")
    return large, num_items, starts, sizes, counts


def chunk_headers(
    layout, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, ctx: DecodeContext
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Parse the in-band header of every chunk (``data[starts[i]:starts[i] + sizes[i]]``):
    ``u16 num_levels | [u16 rep_bytes] | [u16 def_bytes] | num_buffers sizes (u16 / u32) |
    pad to 8``.  Returns ``(levels, rep_spans, def_spans, value_spans)`` (spans: ``(start,
    size)`` in ``data``; value spans ``chunks x num_buffers x 2``); raises ``ctx.corrupt``
    where a header points past its chunk."""
    has_rep = layout.HasField("rep_compression")
    has_def = layout.HasField("def_compression")
    large = bool(layout.has_large_chunk)
    levels, rep_spans, def_spans, bufs, ok = native.chunk_headers(data, starts, sizes, has_rep, has_def, int(layout.num_buffers), large)
    if not ok:
        raise ctx.corrupt("mini-block chunk header points past its chunk")
    return levels, rep_spans, def_spans, bufs


def chunk_table(layout, buffers: list[np.ndarray], ctx: DecodeContext) -> tuple:
    """Parse a mini-block page's chunk metadata and chunk headers (:func:`chunk_layout`,
    :func:`chunk_headers`; host side, shared by the CPU decoder and the GPU planner).

    Returns ``(meta, data, large, num_items, starts, sizes, counts, levels, rep_spans,
    def_spans, value_spans)``; raises ``ctx.corrupt`` when they do not add up.
    """
    if len(buffers) < 2:
        raise ctx.corrupt("mini-block page needs chunk metadata and chunk data buffers")
    meta, data = buffers[0], buffers[1]
    large, num_items, starts, sizes, counts = chunk_layout(layout, meta, ctx)
    levels, rep_spans, def_spans, bufs = chunk_headers(layout, data, starts, sizes, ctx)
    return meta, data, large, num_items, starts, sizes, counts, levels, rep_spans, def_spans, bufs


def select_chunks(counts: np.ndarray, rows: np.ndarray, ctx: DecodeContext) -> tuple[np.ndarray, np.ndarray]:
    """The chunks holding the sorted page-local item numbers ``rows`` (ascending chunk
    indices) and ``rows`` renumbered among the items of those chunks only."""
    first_item = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=first_item[1:])
    if rows.size and (int(rows[0]) < 0 or int(rows[-1]) >= int(first_item[-1])):
        raise ctx.corrupt(f"mini-block page of {int(first_item[-1])} items asked for row {int(rows[-1])}")
    chunk_of = np.searchsorted(first_item, rows, side="right") - 1
    new_chunk = np.ones(chunk_of.size, bool)
    np.not_equal(chunk_of[1:], chunk_of[:-1], out=new_chunk[1:])
    keep = chunk_of[new_chunk]
    sel_first = np.zeros(keep.size + 1, np.int64)
    np.cumsum(counts[keep], out=sel_first[1:])
    local = sel_first[np.cumsum(new_chunk) - 1] + (rows - first_item[chunk_of])
    return keep, local


def sub_table(layout, data: np.ndarray, sizes: np.ndarray, counts: np.ndarray, ctx: DecodeContext) -> tuple:
    """:func:`chunk_table` of some chunks of a page, fetched back to back into ``data``
    (chunk ``i`` of ``sizes`` / ``counts`` at byte ``sum(sizes[:i])``): decoding with it and
    rows renumbered by :func:`select_chunks` reads nothing else of the page."""
    starts = np.zeros(sizes.size, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    if data.size != int(sizes.sum()):
        raise ctx.corrupt(f"mini-block chunks of {int(sizes.sum())} bytes read as {data.size}")
    levels, rep_spans, def_spans, bufs = chunk_headers(layout, data, starts, sizes, ctx)
    return None, data, bool(layout.has_large_chunk), int(counts.sum()), starts, sizes, counts, levels, rep_spans, def_spans, bufs


def decode(
    layout,
    buffers: list[np.ndarray],
    num_rows: int,
    ctx: DecodeContext,
    rows: np.ndarray | None = None,
    table: tuple | None = None,
    span: tuple[int, int] | None = None,
) -> LeafPage:
    """Decode a whole mini-block page, or only the chunks holding ``rows`` or ``span``.

    With ``rows`` (sorted page-local row numbers; only for pages without repetition, where
    rows are items) only the chunks holding them are decoded, and the result holds exactly
    those rows, in order.  With ``span`` (``(start, stop)``, page-local: a run of rows, as
    streaming reads) the chunks holding it are decoded whole and the run is sliced from
    them (selective decoders only pay off on scattered rows).  ``table``: this page's
    :func:`chunk_table`, when the caller keeps it between calls (repeated takes from one
    page parse its chunk headers once).
    """
    if table is None:
        table = chunk_table(layout, buffers, ctx)
    _meta, data, _large, num_items, _starts, _sizes, counts, levels, rep_spans, def_spans, bufs = table
    has_rep = layout.HasField("rep_compression")
    has_def = layout.HasField("def_compression")
    nbuf = int(layout.num_buffers)
    local = None
    cut: tuple[int, int] | None = None  # a run: (first item, items) sliced from the decoded chunks
    if rows is not None and rows.size and int(rows[-1]) - int(rows[0]) + 1 == rows.size:
        span, rows = (int(rows[0]), int(rows[-1]) + 1), None
    if rows is not None or span is not None:
        if has_rep:
            raise ValueError("row selection needs a page without repetition levels")
        first_item = np.zeros(counts.size + 1, np.int64)
        np.cumsum(counts, out=first_item[1:])
        if span is not None:
            lo, hi = span
        else:
            assert rows is not None
            lo, hi = (int(rows[0]), int(rows[-1]) + 1) if rows.size else (0, 0)
        if hi > lo and (hi > int(first_item[-1]) or lo < 0):
            raise ctx.corrupt(f"mini-block page of {int(first_item[-1])} items asked for row {hi - 1}")
        if span is not None:
            c0, c1 = (np.searchsorted(first_item, [lo, max(lo, hi - 1)], side="right") - 1).tolist()
            keep = np.arange(c0, c1 + 1)
            cut = (lo - int(first_item[c0]), hi - lo)
        else:
            assert rows is not None
            keep, local = select_chunks(counts, rows, ctx)
        counts = counts[keep]
        levels = levels[keep]
        rep_spans = rep_spans[keep]
        def_spans = def_spans[keep]
        bufs = bufs[keep]
        num_items = int(counts.sum())
        num_rows = num_items
    chunk_bufs = [
        ChunkBuffers(data, bufs[:, b, 0].copy(), bufs[:, b, 1].copy(), counts) for b in range(nbuf)
    ]
    layers = tuple(int(x) for x in layout.layers)
    has_dict = layout.HasField("dictionary")
    page_dictionary = None
    if nbuf == 0:
        values = None
    else:
        # A scattered selection is pushed into the value decoder, except through a dictionary,
        # whose indices are selected before the gather below; a run is sliced afterwards.
        values = encodings.decode_miniblock(layout.value_compression, chunk_bufs, ctx, select=None if has_dict else local)
        if cut is not None and not has_dict:
            values = slice_block(values, *cut)
    if has_dict:
        if len(buffers) < 3:
            raise ctx.corrupt("dictionary-encoded page lacks its dictionary buffer")
        items = encodings.decode_block(layout.dictionary, buffers[2], int(layout.num_dictionary_items), ctx)
        if not isinstance(values, FixedWidthBlock):
            raise ctx.corrupt("dictionary indices are not fixed-width")
        idx = dictionary.indices_of(values, ctx)
        if local is not None:
            idx = idx[local]
        elif cut is not None:
            idx = idx[cut[0] : cut[0] + cut[1]]
        values = dictionary.apply(items, idx, ctx)
        page_dictionary = (items, idx)
    rep = def_ = None
    num_levels = num_items
    if has_rep or has_def:
        num_levels = int(levels.sum())
        if has_rep:
            rep = _decode_levels(layout.rep_compression, data, rep_spans, levels, ctx)
        if has_def:
            def_ = _decode_levels(layout.def_compression, data, def_spans, levels, ctx)
    if local is not None:
        # Rows are items here (no repetition): keep the selected ones, in order.
        if def_ is not None:
            def_ = def_[local]
        num_items = num_levels = num_rows = int(local.size)
    elif cut is not None:
        if def_ is not None:
            def_ = def_[cut[0] : cut[0] + cut[1]]
        num_items = num_levels = num_rows = cut[1]
    return LeafPage(values, num_items, rep, def_, num_levels, layers, num_rows, page_dictionary)
