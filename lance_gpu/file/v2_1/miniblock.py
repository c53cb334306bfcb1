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

from typing import Any, NamedTuple

import numpy as np

from lance_gpu.cpu import memory, native
from lance_gpu.file import encodings
from lance_gpu.file.blocks import FixedWidthBlock, per_bucket, slice_block
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
            unpacked = unpack_blocks(words, boff, np.full(boff.size, width, np.int64), out=memory.empty(boff.size * 1024, np.uint16))
            out = memory.empty(total, np.uint16)
            native.ool_chunk_assemble(unpacked, bcount, words, nlevels, tail_off, tail_len, out)
            return out
    parts = []
    for (s, z), n in zip(spans.tolist(), nlevels.tolist(), strict=True):
        block = encodings.decode_block(enc, data[s : s + z], n, ctx)
        if not isinstance(block, FixedWidthBlock) or block.bits_per_value != 16:
            raise ctx.corrupt("levels must decode to 16-bit values")
        parts.append(block.as_uint())
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)


class ChunkLayout(NamedTuple):
    """Where every chunk of a mini-block page sits, from the chunk metadata alone: chunk
    ``i`` is ``sizes[i]`` bytes at ``starts[i]`` of the chunk data and holds ``counts[i]``
    values, the first of them value ``first[i]`` of the page (``first`` has one more entry:
    the page's value count)."""

    starts: np.ndarray
    sizes: np.ndarray
    counts: np.ndarray
    first: np.ndarray


def chunk_layout(layout, meta: np.ndarray, ctx: DecodeContext) -> ChunkLayout:
    """Parse a mini-block page's chunk metadata (buffer 0: one little-endian word per chunk,
    u16, or u32 with ``has_large_chunk``) without touching the chunks; raises
    ``ctx.corrupt`` when the counts do not add up to ``num_items``."""
    large = bool(layout.has_large_chunk)
    word = 4 if large else 2
    if meta.size % word:
        raise ctx.corrupt("mini-block chunk metadata has a partial word")
    words = meta if meta.ctypes.data % word == 0 else meta.copy()
    starts, sizes, counts, ok = native.chunk_layout(words.view(np.uint32 if large else np.uint16), int(layout.num_items), large)
    if not ok:
        raise ctx.corrupt("mini-block chunk metadata does not add up to num_items")
    first = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    return ChunkLayout(starts, sizes, counts, first)


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


def chunk_table(layout, buffers: list[np.ndarray], ctx: DecodeContext, chunks: ChunkLayout | None = None,
                keep: np.ndarray | None = None) -> tuple:
    """Parse a mini-block page's chunk metadata and chunk headers (host side, shared by the
    CPU decoder and the GPU planner).

    Buffer 0 holds one little-endian word per chunk (u16, or u32 with ``has_large_chunk``);
    buffer 1 the chunks.  Returns ``(meta, data, large, num_items, starts, sizes, counts,
    levels, rep_spans, def_spans, value_spans)``; raises ``ctx.corrupt`` when they do not add up.
    ``keep`` (chunk numbers, ascending): only those chunks' headers are read and described
    (a selective read touches the chunk data of the chunks holding its rows only);
    ``chunks``: the page's :func:`chunk_layout`, when the caller keeps it.
    """
    if len(buffers) < 2:
        raise ctx.corrupt("mini-block page needs chunk metadata and chunk data buffers")
    meta, data = buffers[0], buffers[1]
    large = bool(layout.has_large_chunk)
    if chunks is None:
        chunks = chunk_layout(layout, meta, ctx)
    starts, sizes, counts = chunks.starts, chunks.sizes, chunks.counts
    if keep is not None:
        starts, sizes, counts = starts[keep], sizes[keep], counts[keep]
    levels, rep_spans, def_spans, bufs = chunk_headers(layout, data, starts, sizes, ctx)
    return meta, data, large, int(layout.num_items), starts, sizes, counts, levels, rep_spans, def_spans, bufs


class PageChunkTables(NamedTuple):
    """The chunk tables of many mini-block pages of one column (:func:`chunk_tables_mapped`):
    page ``i``'s chunks are rows ``bounds[i]:bounds[i + 1]`` of every other array, each as
    :func:`chunk_table` gives them for the page alone (``starts`` and every span relative to
    the page's chunk data; ``bufs``: ``chunks x max(num_buffers, 1) x 2``, zero past a page's
    own buffer count)."""

    bounds: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray
    counts: np.ndarray
    levels: np.ndarray
    rep: np.ndarray
    dfn: np.ndarray
    bufs: np.ndarray


def exclusive_scan(values: np.ndarray) -> np.ndarray:
    """``[0, v0, v0 + v1, ...]`` (int64, one more entry than ``values``)."""
    out = np.zeros(values.size + 1, np.int64)
    np.cumsum(values, out=out[1:])
    return out


def chunk_layouts(layouts: list, metas: list[np.ndarray], ctx: DecodeContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`chunk_layout` of many mini-block pages at once (NumPy over all their metadata
    words, no Python per chunk): ``metas[i]`` is page ``i``'s buffer 0.  Returns ``(bounds,
    starts, sizes, counts)``: page ``i``'s chunks are rows ``bounds[i]:bounds[i + 1]``,
    ``starts`` relative to the page's chunk data.  Word ``w`` of a chunk: size ``((w >> 4) +
    1) * 8``, count ``1 << (w & 0xF)`` but the last of a page: ``num_items`` minus the others.
    Raises ``ctx.corrupt`` with :func:`chunk_layout`'s messages."""
    npages = len(layouts)
    large = np.fromiter((bool(mb.has_large_chunk) for mb in layouts), np.bool_, npages)
    nbytes = np.fromiter((m.size for m in metas), np.int64, npages)
    word = np.where(large, 4, 2)
    if np.any(nbytes % word):
        raise ctx.corrupt("mini-block chunk metadata has a partial word")
    per_page = nbytes // word
    if not npages:
        w = np.zeros(0, np.int64)
    elif not large.any() or large.all():  # one word size: all pages' words in one view
        w = np.concatenate(metas).view("<u4" if large[0] else "<u2").astype(np.int64)
    else:
        w = np.concatenate([m.view("<u4" if lg else "<u2") for m, lg in zip(metas, large.tolist(), strict=True)]).astype(np.int64)
    num_items = np.fromiter((int(mb.num_items) for mb in layouts), np.int64, npages)
    return _layouts_of_words(w, per_page, num_items, ctx)


def chunk_layouts_packed(large: np.ndarray, num_items: np.ndarray, meta: np.ndarray, meta_sizes: np.ndarray,
                         ctx: DecodeContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`chunk_layouts` of pages given as arrays (no Python per page): page ``i``'s
    metadata (buffer 0) is the next ``meta_sizes[i]`` bytes of ``meta`` (every page's back to
    back), its ``has_large_chunk`` is ``large[i]`` (u32 words, else u16) and its item count
    ``num_items[i]``."""
    large = np.asarray(large, np.bool_)
    nbytes = np.asarray(meta_sizes, np.int64)
    word = np.where(large, 4, 2)
    if np.any(nbytes % word):
        raise ctx.corrupt("mini-block chunk metadata has a partial word")
    per_page = nbytes // word
    first = exclusive_scan(per_page)
    page_of = np.repeat(np.arange(per_page.size), per_page)
    at = np.repeat(exclusive_scan(nbytes)[:-1], per_page) + (np.arange(int(first[-1])) - first[:-1][page_of]) * word[page_of]
    raw = np.concatenate([np.asarray(meta, np.uint8).reshape(-1), np.zeros(4, np.uint8)]).astype(np.int64)
    w = raw[at] | (raw[at + 1] << 8)
    wide = large[page_of]
    w[wide] |= (raw[at[wide] + 2] << 16) | (raw[at[wide] + 3] << 24)
    return _layouts_of_words(w, per_page, np.asarray(num_items, np.int64), ctx)


def _layouts_of_words(w: np.ndarray, per_page: np.ndarray, num_items: np.ndarray, ctx: DecodeContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`chunk_layouts` from every page's metadata words ``w`` (``per_page[i]`` of page ``i``)."""
    bounds = exclusive_scan(per_page)
    sizes = ((w >> 4) + 1) * 8
    in_file = exclusive_scan(sizes)
    starts = in_file[:-1] - np.repeat(in_file[bounds[:-1]], per_page)
    counts = np.left_shift(np.int64(1), w & 0xF)
    nonempty = per_page > 0
    if np.any(num_items[~nonempty] != 0):
        raise ctx.corrupt("mini-block chunk metadata does not add up to num_items")
    first, last = bounds[:-1][nonempty], bounds[1:][nonempty] - 1
    before = exclusive_scan(counts)
    counts[last] = num_items[nonempty] - (before[last] - before[first])
    if np.any(counts[last] < 0):
        raise ctx.corrupt("mini-block chunk metadata does not add up to num_items")
    return bounds, starts, sizes, counts


def chunk_tables_mapped(
    layouts: list, metas: list[np.ndarray], whole: np.ndarray, data_offsets: np.ndarray, data_sizes: np.ndarray,
    ctx: DecodeContext,
) -> PageChunkTables:
    """:func:`chunk_table` of many mini-block pages of one column at once, without Python per
    chunk and with a few NumPy calls per page: ``metas[i]`` is page ``i``'s chunk metadata
    (buffer 0) and its chunks (buffer 1) are ``whole[data_offsets[i] : data_offsets[i] +
    data_sizes[i]]`` (``whole``: the file's bytes, e.g. its memory map).

    The metadata words of all pages are decoded together (sizes ``((w >> 4) + 1) * 8``,
    starts their exclusive scan within each page, counts ``1 << (w & 0xF)`` but the last of
    a page: ``num_items`` minus the others); the in-band chunk headers are parsed with one
    :func:`native.chunk_headers` call per header shape ``(has_rep, has_def, num_buffers,
    large)`` over ``whole`` at the chunks' file positions, then rebased to their pages.
    Raises ``ctx.corrupt`` with :func:`chunk_table`'s messages."""
    npages = len(layouts)
    large = [bool(mb.has_large_chunk) for mb in layouts]
    bounds, starts, sizes, counts = chunk_layouts(layouts, metas, ctx)
    per_page = bounds[1:] - bounds[:-1]
    n = int(bounds[-1])
    page_data = np.repeat(np.asarray(data_sizes, np.int64), per_page)
    if np.any(starts + sizes > page_data):
        raise ctx.corrupt("mini-block chunk header points past its chunk")
    base = np.repeat(np.asarray(data_offsets, np.int64), per_page)
    shapes: dict[tuple[bool, bool, int, bool], list[int]] = {}
    for i, mb in enumerate(layouts):
        key = (mb.HasField("rep_compression"), mb.HasField("def_compression"), int(mb.num_buffers), large[i])
        shapes.setdefault(key, []).append(i)
    width = max([1, *(int(mb.num_buffers) for mb in layouts)])
    levels = np.zeros(n, np.int64)
    rep = np.zeros((n, 2), np.int64)
    dfn = np.zeros((n, 2), np.int64)
    bufs = np.zeros((n, width, 2), np.int64)
    for (has_rep, has_def, nbuf, lg), pages in shapes.items():
        sel = np.asarray(pages, np.int64)
        rows = concat_ranges(bounds[sel], bounds[sel + 1]) if len(pages) < npages else np.arange(n, dtype=np.int64)
        lv, rp, df, bf, ok = native.chunk_headers(whole, base[rows] + starts[rows], sizes[rows], has_rep, has_def, nbuf, lg)
        if not ok:
            raise ctx.corrupt("mini-block chunk header points past its chunk")
        at = base[rows]
        levels[rows] = lv
        if has_rep:
            rep[rows, 0] = rp[:, 0] - at
            rep[rows, 1] = rp[:, 1]
        if has_def:
            dfn[rows, 0] = df[:, 0] - at
            dfn[rows, 1] = df[:, 1]
        if nbuf:
            bufs[rows, :nbuf, 0] = bf[:, :nbuf, 0] - at[:, None]
            bufs[rows, :nbuf, 1] = bf[:, :nbuf, 1]
    return PageChunkTables(bounds, starts, sizes, counts, levels, rep, dfn, bufs)


def concat_ranges(starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """``concatenate([arange(a, b) for a, b in zip(starts, stops)])`` without a Python loop."""
    lengths = stops - starts
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, np.int64)
    before = exclusive_scan(lengths)[:-1]
    return np.arange(total, dtype=np.int64) - np.repeat(before - starts, lengths)


def select_chunks(chunks: ChunkLayout, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chunks holding the sorted page-local item numbers ``rows`` (ascending chunk
    numbers) and ``rows`` renumbered among those chunks' items (its row minus its chunk's
    first item, plus the kept items before its chunk).  ``rows`` must lie in the page."""
    per = per_bucket(rows, chunks.first)
    keep = np.flatnonzero(per)
    sel_first = np.zeros(keep.size + 1, np.int64)
    np.cumsum(chunks.counts[keep], out=sel_first[1:])
    return keep, rows + np.repeat(sel_first[:-1] - chunks.first[keep], per[keep])


def packed_layout(sizes: np.ndarray, counts: np.ndarray, data_size: int, ctx: DecodeContext) -> ChunkLayout:
    """The :class:`ChunkLayout` of some chunks of a page fetched back to back (chunk ``i`` of
    ``sizes`` / ``counts`` at byte ``sum(sizes[:i])`` of ``data_size`` bytes): decoding with
    it and rows renumbered by :func:`select_chunks` reads nothing else of the page."""
    if data_size != int(sizes.sum()):
        raise ctx.corrupt(f"mini-block chunks of {int(sizes.sum())} bytes read as {data_size}")
    starts = np.zeros(sizes.size, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    first = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    return ChunkLayout(starts, sizes, counts, first)


def decode(
    layout,
    buffers: list[np.ndarray],
    num_rows: int,
    ctx: DecodeContext,
    rows: np.ndarray | None = None,
    chunks: ChunkLayout | None = None,
    span: tuple[int, int] | None = None,
) -> LeafPage:
    """Decode a whole mini-block page, or only the chunks holding ``rows`` or ``span``.

    With ``rows`` (sorted page-local row numbers; only for pages without repetition, where
    rows are items) only the chunks holding them are read (their headers included) and
    decoded, and the result holds exactly those rows, in order.  With ``span`` (``(start,
    stop)``, page-local: a run of rows, as streaming reads) the chunks holding it are
    decoded whole and the run is sliced from them (selective decoders only pay off on
    scattered rows).  ``chunks``: this page's :func:`chunk_layout`, when the caller keeps it
    between calls (repeated takes from one page parse its chunk metadata once).
    """
    has_rep = layout.HasField("rep_compression")
    has_def = layout.HasField("def_compression")
    nbuf = int(layout.num_buffers)
    local = None
    cut: tuple[int, int] | None = None  # a run: (first item, items) sliced from the decoded chunks
    if rows is not None and rows.size and int(rows[-1]) - int(rows[0]) + 1 == rows.size:
        span, rows = (int(rows[0]), int(rows[-1]) + 1), None
    if rows is None and span is None:
        table = chunk_table(layout, buffers, ctx, chunks)
    else:
        if has_rep:
            raise ValueError("row selection needs a page without repetition levels")
        if len(buffers) < 2:
            raise ctx.corrupt("mini-block page needs chunk metadata and chunk data buffers")
        if chunks is None:
            chunks = chunk_layout(layout, buffers[0], ctx)
        first_item = chunks.first
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
            keep, local = select_chunks(chunks, rows)
        table = chunk_table(layout, buffers, ctx, chunks, keep)
    _meta, data, _large, num_items, _starts, _sizes, counts, levels, rep_spans, def_spans, bufs = table
    if local is not None or cut is not None:
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


#: Bytes of the in-band header of a chunk of one value buffer without levels: ``u16
#: num_levels | u16 (u32 with large chunks) buffer size``, padded to 8.
PLAIN_HEADER_BYTES = 8


def decode_plain_run(layout, chunks: ChunkLayout, span: tuple[int, int], width: int, data_offset: int, data_size: int,
                     read_scattered: Any, ctx: DecodeContext) -> LeafPage | None:
    """A run of rows (``span``, page-local) of a page of plain fixed-width values (one value
    buffer of ``width``-byte values: flat, or fixed-size lists of flat items without item
    validity; no levels, no dictionary), read by the kernel straight into the decoded
    buffer.  The chunks holding the run are read from the file offset ``data_offset`` of
    the page's chunk data (``data_size`` bytes: chunks past it are not read) in one pass,
    ``[header -> a scratch row | values -> their place in the output | the chunk's padding
    -> a scratch row]`` per chunk (``read_scattered(offset, targets)``, a ``preadv``).  No
    memory map is touched, and the values are copied once instead of being mapped, copied
    and unmapped.

    Returns None where the page is not stored so (a chunk too short for its values or
    past the chunk data, a header naming another buffer size) or the read could not be
    done: the caller then decodes the page the usual way, which raises what is wrong.
    """
    if layout.HasField("rep_compression") or layout.HasField("def_compression") or layout.HasField("dictionary"):
        return None
    if int(layout.num_buffers) != 1 or width <= 0:
        return None
    lo, hi = span
    first = chunks.first
    if not 0 <= lo < hi <= int(first[-1]):
        return None
    c0, c1 = (np.searchsorted(first, [lo, hi - 1], side="right") - 1).tolist()
    counts = chunks.counts[c0 : c1 + 1]
    sizes = chunks.sizes[c0 : c1 + 1]
    need = counts * width
    pad = sizes - PLAIN_HEADER_BYTES - need
    end = int(chunks.starts[c1]) + int(sizes[-1])
    if pad.size == 0 or int(pad.min()) < 0 or end - int(chunks.starts[c0]) != int(sizes.sum()) or end > data_size:
        return None
    n = pad.size
    out = memory.empty(int(need.sum()), np.uint8)
    headers = np.zeros(n * PLAIN_HEADER_BYTES, np.uint8)
    junk = np.empty(max(1, int(pad.max())), np.uint8)
    value_at = np.zeros(n, np.int64)
    np.cumsum(need[:-1], out=value_at[1:])
    targets = np.empty((n, 3, 2), np.uint64)
    targets[:, 0, 0] = np.uint64(headers.ctypes.data) + np.arange(n, dtype=np.uint64) * np.uint64(PLAIN_HEADER_BYTES)
    targets[:, 0, 1] = PLAIN_HEADER_BYTES
    targets[:, 1, 0] = np.uint64(out.ctypes.data) + value_at.astype(np.uint64)
    targets[:, 1, 1] = need.astype(np.uint64)
    targets[:, 2, 0] = np.uint64(junk.ctypes.data)
    targets[:, 2, 1] = pad.astype(np.uint64)
    if not read_scattered(data_offset + int(chunks.starts[c0]), targets.reshape(-1, 2)):
        return None
    rows = headers.reshape(n, PLAIN_HEADER_BYTES)
    if layout.has_large_chunk:
        sizes_read = rows[:, 2:6].copy().view("<u4").reshape(n).astype(np.int64)
    else:
        sizes_read = rows[:, 2:4].copy().view("<u2").reshape(n).astype(np.int64)
    if not np.array_equal(sizes_read, need):
        return None
    # the values lie back to back: the value decoder takes them as one view, no copy
    values = encodings.decode_miniblock(layout.value_compression, [ChunkBuffers(out, value_at, need, counts)], ctx)
    count = hi - lo
    values = slice_block(values, lo - int(first[c0]), count)
    layers = tuple(int(x) for x in layout.layers)
    return LeafPage(values, count, None, None, count, layers, count, None)
