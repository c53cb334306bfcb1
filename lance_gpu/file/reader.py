# SPDX-License-Identifier: Apache-2.0
"""Plan and decode the pages of leaf columns of one data file (2.1 / 2.2 structural layer).

Pages are dispatched on their encoding's type URL: ``/lance.encodings21.PageLayout`` for
2.1 and 2.2 (mini-block, constant, full-zip), ``/lance.encodings.ArrayEncoding`` for 2.0
(handled in :mod:`lance_gpu.file.v2_0`).  Anything else is refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np
import pyarrow as pa

from lance_gpu._proto import encodings_v2_1_pb2
from lance_gpu.errors import CorruptFileError, LanceGpuError
from lance_gpu.file.arrow import assemble, constant_block, leaf_types, null_block_for
from lance_gpu.file.blocks import per_bucket
from lance_gpu.file.container import FileVersion, LanceFileReader, MappedHandle, PageInfo, ScatterHandle, SharedParses
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.page import LeafPage, concat_pages
from lance_gpu.file.v2_1 import constant, fullzip, miniblock
from lance_gpu.file.v2_1.levels import common_layers, renumber
from lance_gpu.file.validate import check_leaf_page
from lance_gpu.io.store import COALESCE_GAP, ReadHandle
from lance_gpu.protobuf import check_strict

PAGE_LAYOUT_URL = "/lance.encodings21.PageLayout"
ARRAY_ENCODING_URL = "/lance.encodings.ArrayEncoding"
#: Takes of fewer rows leave the pages they touched mapped (no release hint to the store).
RELEASE_MIN_ROWS = 1 << 16
#: Whole-page reads of fewer encoded bytes (all leaves' pages of one field) leave them mapped
#: too: a release is a system call per page, costing more than the memory it returns for
#: small pages (clean pages of the file, which the kernel reclaims under pressure).
RELEASE_MIN_BYTES = 1 << 16


def parse_layout(page: PageInfo, ctx: DecodeContext) -> encodings_v2_1_pb2.PageLayout:
    url = page.encoding.type_url
    if url.rsplit("/", 1)[-1] != PAGE_LAYOUT_URL[1:]:
        # pylance: "Invalid direct PageLayout encoding ... unexpected type URL" (invalid input)
        raise ctx.corrupt(f"page encoding of unexpected type {url!r} (a 2.1+ page holds a PageLayout)")
    layout = encodings_v2_1_pb2.PageLayout()
    try:
        layout.ParseFromString(page.encoding.value)
    except Exception as exc:  # protobuf DecodeError
        raise ctx.corrupt(f"bad PageLayout protobuf ({exc})") from exc
    check_strict(layout, ctx.path, ctx.where("PageLayout"))
    kind = layout.WhichOneof("layout")
    if kind is not None:
        bad = [int(x) for x in getattr(layout, kind).layers if not 1 <= int(x) <= 6]
        if bad:
            raise ctx.corrupt(f"{kind} names unknown rep/def layers {bad}")
    return layout


def decode_page(layout: encodings_v2_1_pb2.PageLayout, page: PageInfo, buffers: list[np.ndarray], ctx: DecodeContext) -> LeafPage:
    """Decode one whole page given its parsed ``layout`` (:func:`_page_layout`)."""
    kind = layout.WhichOneof("layout")
    if kind == "mini_block_layout":
        return miniblock.decode(layout.mini_block_layout, buffers, page.num_rows, ctx)
    if kind == "full_zip_layout":
        return fullzip.decode(layout.full_zip_layout, buffers, page.num_rows, ctx)
    if kind == "constant_layout":
        return constant.decode(layout.constant_layout, buffers, page.num_rows, ctx)
    if kind == "blob_layout":
        # blob descriptors (2.1): the inner layout holds them; nulls are marked inside the
        # descriptors themselves (lance_gpu.table.blobs reads them)
        inner = layout.blob_layout.inner_layout
        inner_kind = inner.WhichOneof("layout")
        if inner_kind == "mini_block_layout":
            return miniblock.decode(inner.mini_block_layout, buffers, page.num_rows, ctx)
        raise ctx.unsupported(f"blob layout over {inner_kind}")
    if kind is None:
        raise ctx.corrupt("PageLayout names no layout")
    raise ctx.unsupported(f"page layout {kind}")


def pages_in_range(pages: list[PageInfo], start: int, stop: int) -> list[int]:
    """Indices of the pages holding any row in [start, stop)."""
    out = []
    first = 0
    for i, p in enumerate(pages):
        lo = first
        hi = first + p.num_rows
        first = hi
        if hi > start and lo < stop:
            out.append(i)
    return out


def page_starts(pages: list[PageInfo]) -> np.ndarray:
    starts = np.zeros(len(pages) + 1, np.int64)
    # (an array's own cumsum: np.cumsum of a list goes through numpy's wrappers, ~8 calls)
    np.array([p.num_rows for p in pages], np.int64).cumsum(out=starts[1:])
    return starts


def read_leaf(file: LanceFileReader, column: int, page_ids: list[int], leaf_type: pa.DataType) -> LeafPage:
    """Decode and join the given pages of one leaf column."""
    ctx = DecodeContext(file.path, column)
    info = file.column(column)
    pages = [info.pages[i] for i in page_ids]
    # pages of plain fixed-width values read into place (a local file), the others mapped
    plain = [_plain_page(file, column, pi, p, leaf_type, ctx.at_page(pi)) for pi, p in zip(page_ids, pages, strict=True)]
    ranges = [(o, s) for p, leaf in zip(pages, plain, strict=True) if leaf is None
              for o, s in zip(p.buffer_offsets, p.buffer_sizes, strict=True)]
    raw = file.read_buffers(ranges)
    decoded = []
    k = 0
    for pi, p, leaf in zip(page_ids, pages, plain, strict=True):
        page_ctx = ctx.at_page(pi)
        if leaf is None:
            nb = len(p.buffer_offsets)
            leaf = decode_page(_page_layout(file, column, pi, page_ctx), p, raw[k : k + nb], page_ctx)
            k += nb
        _check_page(file, column, pi, leaf, leaf_type, page_ctx)
        decoded.append(leaf)
    return join_leaf_pages(decoded, leaf_type, ctx)


def _plain_page(file: LanceFileReader, column: int, page_index: int, page: PageInfo, leaf_type: pa.DataType,
                ctx: DecodeContext) -> LeafPage | None:
    """A whole mini-block page of plain fixed-width values read into place
    (:func:`_plain_run` over all its rows), or None where it is not read so."""
    if page.num_rows == 0 or _plain_width(file, leaf_type, page, None, page.num_rows) is None:
        return None
    layout = _page_layout(file, column, page_index, ctx)
    if layout.WhichOneof("layout") != "mini_block_layout":
        return None
    mb = layout.mini_block_layout
    if mb.HasField("rep_compression") or mb.HasField("def_compression") or mb.HasField("dictionary"):
        return None
    if int(mb.num_items) != page.num_rows:
        return None  # the mapped decode names what is wrong
    if _plain_width(file, leaf_type, page, mb, page.num_rows) is None:
        return None
    chunks = _chunk_layout(file, column, page_index, mb, None, ctx)
    return _plain_run(file, leaf_type, page, mb, chunks, (0, page.num_rows), ctx)


def join_leaf_pages(decoded: list[LeafPage], leaf_type: pa.DataType, ctx: DecodeContext) -> LeafPage:
    """Decoded pages of one leaf column (of one file or of several) as one page: their
    rep/def layers brought to a common list, constant pages spelled out, then concatenated."""
    if not decoded:
        return LeafPage(null_block_for(leaf_type, 0), 0, None, None, 0, (1,), 0)
    if len({d.layers for d in decoded}) > 1:
        try:
            target = common_layers([d.layers for d in decoded])
        except ValueError as exc:
            raise ctx.corrupt(str(exc)) from exc
        decoded = [renumber(d, target) for d in decoded]
    if len(decoded) > 1:
        # Constant pages carry their one value; spell it out before joining the pages.
        decoded = [
            replace(d, values=constant_block(d.values[1], leaf_type, d.num_values)) if isinstance(d.values, tuple) else d
            for d in decoded
        ]
    return concat_pages(decoded, lambda n: null_block_for(leaf_type, n))


def read_field(
    file: LanceFileReader,
    field: pa.Field,
    columns: list[int],
    row_range: tuple[int, int] | None = None,
) -> pa.Array | pa.ChunkedArray:
    """Read one top-level field from its leaf ``columns`` (2.1 / 2.2 files).

    Whole pages overlapping ``row_range`` are decoded, then sliced to the range.  A whole
    single-leaf field of several pages comes back as a ChunkedArray, a chunk per page.
    """
    types = leaf_types(field.type)
    if len(types) != len(columns):
        raise CorruptFileError(file.path, f"field {field.name!r} has {len(types)} leaves but {len(columns)} columns")
    page_lists = [file.column(col).pages for col in columns]
    if row_range is None and len(columns) == 1 and len(page_lists[0]) > 1:
        return _read_pages_chunked(file, field, columns[0], types[0])
    if row_range is None:
        ids_per_leaf = [list(range(len(pages))) for pages in page_lists]
        start = 0
    else:
        # Leaves of one field may cut pages at different rows: widen [start, stop) until every
        # leaf's pages in it begin at ``start`` and end at ``stop``, so their levels line up.
        start, stop = row_range
        while True:
            new_start, new_stop = start, stop
            for pages in page_lists:
                ids = pages_in_range(pages, start, stop)
                if ids:
                    bounds = page_starts(pages)
                    new_start = min(new_start, int(bounds[ids[0]]))
                    new_stop = max(new_stop, int(bounds[ids[-1] + 1]))
            if (new_start, new_stop) == (start, stop):
                break
            start, stop = new_start, new_stop
        ids_per_leaf = [pages_in_range(pages, start, stop) for pages in page_lists]
    leaves = [read_leaf(file, col, ids, t) for col, ids, t in zip(columns, ids_per_leaf, types)]
    arr = assemble(field, leaves, file.path)
    expected = sum(page_lists[0][i].num_rows for i in ids_per_leaf[0]) if page_lists else 0
    if len(arr) != expected:
        msg = f"field {field.name!r} decoded to {len(arr)} rows where its pages hold {expected}"
        raise CorruptFileError(file.path, msg)
    _release_pages(file, columns, ids_per_leaf, arr)
    if row_range is not None:
        arr = arr.slice(row_range[0] - start, row_range[1] - row_range[0])
    return arr


def _read_pages_chunked(file: LanceFileReader, field: pa.Field, column: int, leaf_type: pa.DataType) -> pa.ChunkedArray:
    """A single-leaf field read page by page: one chunk per page, nothing concatenated."""
    pages = file.column(column).pages
    chunks = []
    for i, page in enumerate(pages):
        arr = assemble(field, [read_leaf(file, column, [i], leaf_type)], file.path)
        if len(arr) != page.num_rows:
            msg = f"field {field.name!r} page {i} decoded to {len(arr)} rows where it holds {page.num_rows}"
            raise CorruptFileError(file.path, msg)
        _release_pages(file, [column], [[i]], arr)
        chunks.append(arr)
    return pa.chunked_array(chunks, type=chunks[0].type)


def read_field_files(parts: Sequence[tuple[LanceFileReader, list[int]]], field: pa.Field) -> pa.Array | pa.ChunkedArray:
    """Every row of one top-level field stored in several 2.1 / 2.2 data files, in file
    order, as one array (``parts``: each file with the field's leaf columns in it).

    Many small files (a dataset of many small appends) decode as one: per leaf column the
    pages of all the files are taken in order, and each run of consecutive mini-block pages
    sharing one layout but their item counts (:func:`_merge_key`) is decoded as one page --
    their chunk tables joined, their chunk data back to back (chunks are self-contained and
    8-byte multiples, so nothing moves inside them) -- then the leaves are assembled once.
    Pages of other layouts decode one by one (:func:`read_leaf`).  Where the joint decode
    fails, the files are read one by one (:func:`read_field`), so the error names the file
    at fault.
    """
    types = leaf_types(field.type)
    for file, columns in parts:
        if len(types) != len(columns):
            raise CorruptFileError(file.path, f"field {field.name!r} has {len(types)} leaves but {len(columns)} columns")
    if not parts:
        return pa.array([], field.type)
    if len(parts) > 1:
        try:
            return _read_files_together(parts, field, types)
        except (LanceGpuError, ValueError, IndexError):
            pass  # read file by file below: the error then names the file at fault
    pieces = [read_field(file, field, columns) for file, columns in parts]
    if len(pieces) == 1:
        return pieces[0]
    return pa.chunked_array([c for p in pieces for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])], type=field.type)


def _read_files_together(parts: Sequence[tuple[LanceFileReader, list[int]]], field: pa.Field,
                         types: list[pa.DataType]) -> pa.Array:
    leaves = []
    expected = 0  # the rows the files' first columns hold
    for leaf, leaf_type in enumerate(types):
        pages: list[_FilePage] = []
        for file, columns in parts:
            column = columns[leaf]
            info = file.column(column)
            if not leaf:
                expected += info.num_rows
            pages += [(file, column, pi, page) for pi, page in enumerate(info.pages)]
        leaves.append(_read_pages_of_files(pages, leaf_type))
    arr = assemble(field, leaves, parts[0][0].path)
    if len(arr) != expected:
        raise CorruptFileError(parts[0][0].path, f"field {field.name!r} decoded to {len(arr)} rows where its pages hold {expected}")
    return arr


_NO_KEY = object()


def _merge_key(file: LanceFileReader, column: int, page_index: int) -> bytes | None:
    """What a mini-block page must share with its neighbours (in its file or the next ones)
    to be decoded with them as one page: its serialized layout without ``num_items``
    (value compression, layers, buffer count, chunk word size all equal); None for pages
    that decode alone (other layouts; dictionary pages, each holding its own dictionary).
    Kept in ``file.page_meta``."""
    key = (column, page_index, "merge key")
    found = file.page_meta.get(key, _NO_KEY)
    if found is _NO_KEY:
        encoding = file.column(column).pages[page_index].encoding
        shared = (encoding.type_url, encoding.value)  # a function of the layout's bytes
        found = _MERGE_KEYS.get(shared, _NO_KEY)
        if found is _NO_KEY:
            layout = _page_layout(file, column, page_index, DecodeContext(file.path, column).at_page(page_index))
            found = None
            if layout.WhichOneof("layout") == "mini_block_layout" and not layout.mini_block_layout.HasField("dictionary"):
                mb = type(layout.mini_block_layout)()
                mb.CopyFrom(layout.mini_block_layout)
                mb.ClearField("num_items")
                found = mb.SerializeToString(deterministic=True)
            _MERGE_KEYS.put(shared, found)
        file.page_meta[key] = found
    return found  # type: ignore[return-value]


#: One page of a leaf column in one of several files: (file, column, page index, the page).
_FilePage = tuple[LanceFileReader, int, int, PageInfo]


def _read_pages_of_files(pages: list[_FilePage], leaf_type: pa.DataType) -> LeafPage:
    """Decode the pages of one leaf (in ``(file, column, page index, page)`` order) into
    one page: runs of pages with one :func:`_merge_key` together (:func:`_decode_together`),
    others alone.  Consecutive files written alike share their parsed columns, so their
    pages are one :class:`PageInfo` object: its key is looked up once for the run."""
    keys: list[bytes | None] = []
    last_info: PageInfo | None = None
    last_key: bytes | None = None
    for file, column, pi, info in pages:
        if info is not last_info:
            last_key, last_info = _merge_key(file, column, pi), info
        keys.append(last_key)
    decoded: list[LeafPage] = []
    i = 0
    while i < len(pages):
        key = keys[i]
        j = i + 1
        if key is not None:
            while j < len(pages) and keys[j] == key:
                j += 1
        if j - i > 1:
            decoded.append(_decode_together(pages[i:j], leaf_type))
        else:
            file, column, pi, _info = pages[i]
            decoded.append(read_leaf(file, column, [pi], leaf_type))
        i = j
    file0, column0 = (pages[0][0], pages[0][1]) if pages else (None, -1)
    return join_leaf_pages(decoded, leaf_type, DecodeContext(getattr(file0, "path", ""), column0))


def _decode_together(run: list[_FilePage], leaf_type: pa.DataType) -> LeafPage:
    """Mini-block pages of one :func:`_merge_key` decoded as one page: each page's chunk
    table (:func:`_chunk_layout`) shifted to where its chunk data lands in the joined data
    buffer; ``num_items`` the sum of theirs.

    Pages of files written alike are one :class:`PageInfo` (one layout, parsed once) and
    mostly carry the same chunk metadata bytes: the chunk table is parsed again only where
    a page's differ from the page before it."""
    datas: list[np.ndarray] = []
    placed: list[tuple[miniblock.ChunkLayout, int]] = []  # per page: its chunk table, where its data lands
    at = items = rows = 0
    first_ctx: DecodeContext | None = None
    mb = None
    last_info: PageInfo | None = None
    last_meta = b""
    chunks: miniblock.ChunkLayout | None = None
    counter: ReadHandle | None = None  # a mapped handle: its store counts the reads served from memory
    mapped_reads = mapped_bytes = 0
    for file, column, pi, page in run:
        io = file.io
        whole = getattr(io, "mapped", None)
        if page is not last_info:
            ctx = DecodeContext(file.path, column).at_page(pi)
            first_ctx = first_ctx or ctx
            if len(page.buffer_offsets) < 2:
                raise ctx.corrupt("mini-block page needs chunk metadata and chunk data buffers")
            mb = _page_layout(file, column, pi, ctx).mini_block_layout
            last_info, last_meta = page, b""
        meta_at, meta_size = page.buffer_offsets[0], page.buffer_sizes[0]
        if whole is None or meta_at + meta_size > whole.size or meta_size > SHARED_CHUNK_META_BYTES:
            # kept per file (fetched once from an object store)
            chunks = _chunk_layout(file, column, pi, mb, None, DecodeContext(file.path, column).at_page(pi))
            last_meta = b""
        else:
            meta = whole[meta_at : meta_at + meta_size]
            counter = io  # it has a map (whole is not None)
            mapped_reads += 1
            mapped_bytes += meta_size
            meta_bytes = meta.tobytes()
            if chunks is None or meta_bytes != last_meta:
                chunks = _chunk_layout(file, column, pi, mb, meta, DecodeContext(file.path, column).at_page(pi))
                last_meta = meta_bytes
        end = int(chunks.starts[-1] + chunks.sizes[-1]) if chunks.sizes.size else 0
        offset = page.buffer_offsets[1]
        if whole is not None and offset + end <= whole.size:
            datas.append(whole[offset : offset + end])  # a view of the file's bytes: no request
            counter = io  # it has a map (whole is not None)
            mapped_reads += 1
            mapped_bytes += end
        else:
            datas.append(io.read(offset, end))
        placed.append((chunks, at))
        at += end
        items += int(chunks.first[-1])
        rows += page.num_rows
    if counter is not None:
        cast(MappedHandle, counter).count_reads(mapped_reads, mapped_bytes)
    assert mb is not None and first_ctx is not None
    joined = type(mb)()
    joined.CopyFrom(mb)
    joined.num_items = items
    all_counts = np.concatenate([c.counts for c, _at in placed])
    first = np.zeros(all_counts.size + 1, np.int64)
    np.cumsum(all_counts, out=first[1:])
    joint = miniblock.ChunkLayout(np.concatenate([c.starts + a for c, a in placed]),
                                  np.concatenate([c.sizes for c, _at in placed]), all_counts, first)
    leaf = miniblock.decode(joined, [np.zeros(0, np.uint8), np.concatenate(datas)], rows, first_ctx, chunks=joint)
    check_leaf_page(leaf, leaf_type, first_ctx)
    return leaf


def _check_page(file: LanceFileReader, column: int, page_index: int, leaf: LeafPage, leaf_type: pa.DataType,
                ctx: DecodeContext) -> None:
    """:func:`check_leaf_page` of a whole decoded page; a page's dictionary is checked once
    per file state (decoding the same bytes gives the same dictionary), then marked in
    ``file.page_meta``."""
    key = (column, page_index, "dictionary checked")
    checked = leaf.dictionary is not None and key in file.page_meta
    check_leaf_page(leaf, leaf_type, ctx, dictionary_checked=checked)
    if leaf.dictionary is not None and not checked:
        file.page_meta[key] = True


def _buffers_of(arr: pa.Array | pa.ChunkedArray) -> list[tuple[int, int]]:
    arrays = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    return [(b.address, b.size) for a in arrays for b in a.buffers() if b is not None]


def _release_pages(file: LanceFileReader, columns: list[int], ids_per_leaf: list[list[int]], arr: pa.Array) -> None:
    """Let go of the decoded pages' mapped bytes that the result does not reference."""
    ranges = [
        (o, s)
        for col, ids in zip(columns, ids_per_leaf)
        for i in ids
        for o, s in zip(file.column(col).pages[i].buffer_offsets, file.column(col).pages[i].buffer_sizes)
    ]
    if sum(s for _o, s in ranges) < RELEASE_MIN_BYTES:
        return
    file.io.release(ranges, keep=_buffers_of(arr))


def _page_layout(file: LanceFileReader, column: int, page_index: int, ctx: DecodeContext) -> encodings_v2_1_pb2.PageLayout:
    """The page's parsed layout, kept in ``file.page_meta`` for repeated reads (the reader
    lives on its fragment: one dataset version)."""
    key = (column, page_index, "layout")
    layout = file.page_meta.get(key)
    if layout is None:
        encoding = file.column(column).pages[page_index].encoding
        shared = (encoding.type_url, encoding.value)
        layout = _SHARED_LAYOUTS.get(shared)
        if layout is None:
            layout = parse_layout(file.column(column).pages[page_index], ctx)
            _SHARED_LAYOUTS.put(shared, layout)
        file.page_meta[key] = layout
    return layout  # type: ignore[return-value]


#: Parsed page layouts (never modified) by their encoding's bytes, for the process: the pages
#: of many small files written alike carry the same bytes, parsed and vetted once.
_SHARED_LAYOUTS: SharedParses[tuple[str, bytes], encodings_v2_1_pb2.PageLayout] = SharedParses()
#: Chunk tables of small mini-block pages by (encoding bytes, chunk metadata bytes): the
#: table is a function of those alone.
_SHARED_CHUNKS: SharedParses[tuple[str, bytes, bytes], miniblock.ChunkLayout] = SharedParses()
#: :func:`_merge_key` by encoding bytes.
_MERGE_KEYS: SharedParses[tuple[str, bytes], bytes | None] = SharedParses()
#: Chunk metadata of at most this many bytes is shared.
SHARED_CHUNK_META_BYTES = 256


def clear_shared_caches() -> None:
    """Forget the page layouts, merge keys and chunk tables shared by encoding bytes (tests)."""
    _SHARED_LAYOUTS.clear()
    _SHARED_CHUNKS.clear()
    _MERGE_KEYS.clear()


def _chunk_layout(file: LanceFileReader, column: int, page_index: int, layout, meta: np.ndarray | None,
                  ctx: DecodeContext) -> miniblock.ChunkLayout:
    """The mini-block page's :func:`miniblock.chunk_layout`, parsed from its chunk metadata
    (``meta``, or read here: found prefetched, or fetched) once per reader and kept in
    ``file.page_meta``; the chunk headers are read per take, for the chunks holding the
    rows only.  Chunks reaching past the chunk data buffer are refused."""
    key = (column, page_index, "chunks")
    chunks = file.page_meta.get(key)
    if chunks is None:
        page = file.column(column).pages[page_index]
        if len(page.buffer_offsets) < 2:
            raise ctx.corrupt("mini-block page needs chunk metadata and chunk data buffers")
        if meta is None:
            meta = file.io.read(page.buffer_offsets[0], page.buffer_sizes[0])
        shared = None
        if meta.size <= SHARED_CHUNK_META_BYTES:
            shared = (page.encoding.type_url, page.encoding.value, meta.tobytes())
            chunks = _SHARED_CHUNKS.get(shared)
        if chunks is None:
            chunks = miniblock.chunk_layout(layout, meta, ctx)
            if shared is not None:
                _SHARED_CHUNKS.put(shared, chunks)
        assert isinstance(chunks, miniblock.ChunkLayout)
        if chunks.starts.size and int(chunks.starts[-1] + chunks.sizes[-1]) > page.buffer_sizes[1]:
            raise ctx.corrupt(f"mini-block chunks reach past their buffer of {page.buffer_sizes[1]} bytes")
        file.page_meta[key] = chunks
    return chunks  # type: ignore[return-value]


#: Late materialization (a filtered read decodes the other fields for the surviving rows
#: only): the survivor share up to which :func:`take_field` of a page beats decoding the
#: whole page and taking the rows from it, by how the page's values are stored (measured on
#: 1M-row pages with one thread: issue 14's table).
#: Values read straight from the page, row by row: flat (and fixed-size lists of flat)
#: mini-block chunks, full-zip rows; the whole page is one sequential copy, faster per byte.
SELECT_SHARE_DIRECT = 0.35
#: Variable-width and dictionary values: only the selected values (or indices) are copied,
#: decompressed or looked up, but every chunk holding one is read.
SELECT_SHARE_VARIABLE = 0.2
#: Bit-packed values, general-compressed chunks: whole chunks are decoded either way, and
#: value-by-value unpacking is slower per value than unpacking whole blocks.
SELECT_SHARE_CHUNKED = 0.04
#: Values of at least this many encoded bytes a row (long strings, blobs of bytes) are
#: always decoded selectively (measured: 2 KB strings decode selectively cheaper than
#: whole-and-take even when 80 % of rows survive).
LONG_VALUE_BYTES = 128


def _page_select_share(layout) -> float:
    kind = layout.WhichOneof("layout")
    if kind == "full_zip_layout":
        return SELECT_SHARE_DIRECT
    if kind == "constant_layout":
        return 1.0  # nothing is decoded per row
    if kind != "mini_block_layout":
        return SELECT_SHARE_CHUNKED
    mb = layout.mini_block_layout
    if mb.HasField("dictionary"):
        return SELECT_SHARE_VARIABLE
    enc = mb.value_compression
    value = enc.WhichOneof("compression")
    if value == "fixed_size_list" and not enc.fixed_size_list.has_validity:
        enc = enc.fixed_size_list.values
        value = enc.WhichOneof("compression")
    if value == "flat" and int(enc.flat.bits_per_value) % 8 == 0 and not enc.flat.HasField("data"):
        return SELECT_SHARE_DIRECT
    if value in ("variable", "fsst"):
        return SELECT_SHARE_VARIABLE
    return SELECT_SHARE_CHUNKED


def selective_share(file: LanceFileReader, field: pa.Field, columns: list[int]) -> float:
    """The survivor share up to which :func:`take_field` of ``field`` (its leaf
    ``columns``) is cheaper than :func:`read_field` of its pages and a take: the pages'
    shares (see :data:`SELECT_SHARE_DIRECT` and its siblings) weighted by their rows; 1.0
    for values of at least :data:`LONG_VALUE_BYTES` encoded bytes a row, and for fields
    whose takes decode the pages over the rows' range anyway (2.0 files, several leaves)."""
    if not columns or file.num_rows == 0:
        return 1.0
    pages = [p for c in columns for p in file.column(c).pages]
    if sum(sum(p.buffer_sizes) for p in pages) >= LONG_VALUE_BYTES * file.num_rows:
        return 1.0
    if file.version == FileVersion(2, 0) or not (len(columns) == 1 and leaf_types(field.type) == [field.type]):
        return 1.0  # a take decodes the pages over the rows' range and takes: never more work
    total = 0.0
    rows = 0
    for pi, page in enumerate(file.column(columns[0]).pages):
        layout = _page_layout(file, columns[0], pi, DecodeContext(file.path, columns[0]).at_page(pi))
        total += _page_select_share(layout) * page.num_rows
        rows += page.num_rows
    return total / rows if rows else 1.0


def _fetches_by_chunk(file: LanceFileReader, page: PageInfo, layout, num_rows: int, run: bool = False) -> bool:
    """Whether a take of ``num_rows`` rows from this page reads only the mini-block chunks
    holding them (chunk metadata first, then the chunks): pages of object stores whose
    chunk data is not held yet (a memory map, or bytes a scan prefetched, are decoded from
    the whole page as before), holding a ``run`` of less than half its rows (its chunks
    are one range; a longer run fetches the page in one round), or scattered rows sparse enough that their chunks would not coalesce into the whole page
    anyway (at least the store's coalescing gap of page bytes per row; denser takes fetch
    the page in one round)."""
    return (
        layout.WhichOneof("layout") == "mini_block_layout"
        and not layout.mini_block_layout.HasField("rep_compression")
        and len(page.buffer_offsets) >= 2
        and (2 * num_rows < page.num_rows if run
             else page.buffer_sizes[1] > num_rows * getattr(file.io, "coalesce_gap", COALESCE_GAP))
        and file.needs_request(page.buffer_offsets[1], page.buffer_sizes[1])
    )


def _chunk_ranges(file: LanceFileReader, column: int, page_index: int, layout, rows: np.ndarray,
                  ctx: DecodeContext) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For page-local ``rows`` of a mini-block page: the chunks holding them as file byte
    ranges (starts, sizes), their item counts, and the rows renumbered among their items."""
    page = file.column(column).pages[page_index]
    chunks = _chunk_layout(file, column, page_index, layout, None, ctx)
    if rows.size and (int(rows[0]) < 0 or int(rows[-1]) >= int(chunks.first[-1])):
        raise ctx.corrupt(f"mini-block page of {int(chunks.first[-1])} items asked for row {int(rows[-1])}")
    keep, local = miniblock.select_chunks(chunks, rows)
    return page.buffer_offsets[1] + chunks.starts[keep], chunks.sizes[keep], chunks.counts[keep], local


def _take_chunks(file: LanceFileReader, column: int, page_index: int, layout, rows: np.ndarray,
                 ctx: DecodeContext) -> LeafPage:
    """Page-local ``rows`` of a mini-block page read chunk by chunk: the chunk metadata, the
    chunks holding the rows (coalesced, fetched concurrently) and the dictionary, if any;
    never the rest of the page."""
    page = file.column(column).pages[page_index]
    mb = layout.mini_block_layout
    at, sizes, counts, local = _chunk_ranges(file, column, page_index, mb, rows, ctx)
    data = file.read_gather(at, sizes)
    chunks = miniblock.packed_layout(sizes, counts, data.size, ctx)
    buffers = [np.zeros(0, np.uint8), data]
    if mb.HasField("dictionary"):
        if len(page.buffer_offsets) < 3:
            raise ctx.corrupt("dictionary-encoded page lacks its dictionary buffer")
        buffers.append(file.io.read(page.buffer_offsets[2], page.buffer_sizes[2]))
    return miniblock.decode(mb, buffers, int(local.size), ctx, rows=local, chunks=chunks)


def prefetch_take(file: LanceFileReader, columns: list[int], rows: np.ndarray) -> None:
    """Fetch what :func:`take_field` of the sorted file rows ``rows`` from the single-leaf
    ``columns`` will read, in two rounds of concurrent coalesced requests: the chunk
    metadata of the mini-block pages holding a run of rows or scattered rows sparsely
    (:func:`_fetches_by_chunk`) with the whole buffers of the other pages holding rows,
    then the chunks holding the rows and their pages' dictionaries.  Only object stores
    fetch (a memory map needs nothing); full-zip pages read only their rows themselves when
    decoded."""
    fetch = getattr(file.io, "prefetch", None)
    if fetch is None or rows.size == 0:
        return
    picked: list[tuple[int, int, Any, np.ndarray]] = []  # (column, page, layout, local rows)
    first: list[tuple[int, int]] = []
    run = int(rows[-1]) - int(rows[0]) + 1 == rows.size
    for col in columns:
        pages = file.column(col).pages
        starts = page_starts(pages)
        if int(rows[-1]) >= int(starts[-1]):
            return  # the read itself raises
        page_of = np.searchsorted(starts, rows, side="right") - 1
        cuts = np.flatnonzero(np.diff(page_of)) + 1
        for g in np.split(np.arange(rows.size), cuts):
            pi = int(page_of[g[0]])
            page = pages[pi]
            ctx = DecodeContext(file.path, col).at_page(pi)
            layout = _page_layout(file, col, pi, ctx)
            if not _fetches_by_chunk(file, page, layout, int(g.size), run=run):
                # read whole when decoded (full-zip: only its rows, by itself)
                held = all(not file.needs_request(o, n) for o, n in zip(page.buffer_offsets, page.buffer_sizes, strict=True))
                if layout.WhichOneof("layout") != "full_zip_layout" and not held:
                    first.extend(zip(page.buffer_offsets, page.buffer_sizes, strict=True))
                continue
            picked.append((col, pi, layout.mini_block_layout, rows[g] - starts[pi]))
            if (col, pi, "chunks") not in file.page_meta:
                first.append((page.buffer_offsets[0], page.buffer_sizes[0]))
    if first:
        fetch(first)
    second: list[tuple[int, int]] = []
    for col, pi, mb, local_rows in picked:
        ctx = DecodeContext(file.path, col).at_page(pi)
        at, lengths, _counts, _local = _chunk_ranges(file, col, pi, mb, local_rows, ctx)
        second.extend(zip(at.tolist(), lengths.tolist(), strict=True))
        if mb.HasField("dictionary"):
            page = file.column(col).pages[pi]
            second.extend(zip(page.buffer_offsets[2:3], page.buffer_sizes[2:3], strict=True))
    if second:
        fetch(second)


def take_field(file: LanceFileReader, field: pa.Field, columns: list[int], rows: np.ndarray) -> pa.Array | pa.ChunkedArray:
    """Rows ``rows`` (sorted, unique, file-local) of one top-level field.

    Single-leaf fields without lists decode only the mini-block chunks that hold the rows;
    other fields decode the pages covering the rows and take from them.  A run of rows
    (a streaming window) that crosses pages comes back as a ChunkedArray, a chunk per page.
    """
    if rows.size == 0:
        return read_field(file, field, columns, (0, 0))
    if not (len(columns) == 1 and leaf_types(field.type) == [field.type]):
        start, stop = int(rows[0]), int(rows[-1]) + 1
        whole = read_field(file, field, columns, (start, stop))
        return whole if stop - start == rows.size else whole.take(pa.array(rows - start))
    col = columns[0]
    ctx = DecodeContext(file.path, col)
    pages = file.column(col).pages
    starts = page_starts(pages)
    if rows[-1] >= starts[-1]:
        raise CorruptFileError(file.path, f"row {int(rows[-1])} beyond the column's {int(starts[-1])} rows")
    lo, hi = int(rows[0]), int(rows[-1]) + 1
    run = hi - lo == rows.size
    spans: list[tuple[int, Any]]  # (page, slice of a run | positions in ``rows``)
    if run:
        # A run of rows (streaming): each page's share is a slice, no per-row search.
        first, last = np.searchsorted(starts, [lo, hi - 1], side="right") - 1
        cuts = np.minimum(np.maximum(starts[first : last + 2], lo), hi) - lo  # (np.clip: ~9 calls)
        spans = [(int(first) + k, slice(int(cuts[k]), int(cuts[k + 1]))) for k in range(int(last) - int(first) + 1)]
        touched = {pi for pi, _sl in spans}
    else:
        # the rows (sorted) of each page: a slice of ``rows``
        cuts = np.zeros(starts.size, np.int64)
        np.cumsum(per_bucket(rows, starts), out=cuts[1:])
        spans = [(pi, slice(int(cuts[pi]), int(cuts[pi + 1]))) for pi in range(len(pages)) if cuts[pi + 1] > cuts[pi]]
        touched = {pi for pi, _g in spans}
    parts = []
    for pi, g in spans:
        page = pages[pi]
        # a run's share of a page is a span of it; scattered rows are page-local row numbers
        span = (lo + g.start - int(starts[pi]), lo + g.stop - int(starts[pi])) if run else None
        local_rows = None if span is not None else rows[g] - starts[pi]
        page_ctx = ctx.at_page(pi)
        layout = _page_layout(file, col, pi, page_ctx)
        if layout.WhichOneof("layout") == "full_zip_layout" and layout.full_zip_layout.bits_rep == 0:
            wanted = np.arange(*span, dtype=np.int64) if span is not None else np.asarray(local_rows)
            leaf = fullzip.take_rows(layout.full_zip_layout, page, file, wanted, page_ctx)
            check_leaf_page(leaf, field.type, page_ctx)
            parts.append(assemble(field, [leaf], file.path))
            continue
        if span is not None:
            count = span[1] - span[0]
        else:
            assert local_rows is not None  # scattered rows: set exactly when there is no span
            count = len(local_rows)
        if _fetches_by_chunk(file, page, layout, count, run=span is not None):
            wanted = np.asarray(local_rows) if span is None else np.arange(*span, dtype=np.int64)
            leaf = _take_chunks(file, col, pi, layout, wanted, page_ctx)
            check_leaf_page(leaf, field.type, page_ctx)
            parts.append(assemble(field, [leaf], file.path))
            continue
        bufs = file.page_buffers(col, pi)
        if layout.WhichOneof("layout") == "mini_block_layout" and not layout.mini_block_layout.HasField("rep_compression"):
            mb = layout.mini_block_layout
            if len(bufs) < 2:
                raise page_ctx.corrupt("mini-block page needs chunk metadata and chunk data buffers")
            chunks = _chunk_layout(file, col, pi, mb, bufs[0], page_ctx)
            plain = _plain_run(file, field.type, page, mb, chunks, span, page_ctx) if span is not None else None
            if plain is not None:
                check_leaf_page(plain, field.type, page_ctx)
                parts.append(assemble(field, [plain], file.path))
                continue
            leaf = miniblock.decode(mb, bufs, page.num_rows, page_ctx, rows=local_rows, chunks=chunks, span=span)
            check_leaf_page(leaf, field.type, page_ctx)
            parts.append(assemble(field, [leaf], file.path))
        else:
            leaf = decode_page(layout, page, bufs, page_ctx)
            check_leaf_page(leaf, field.type, page_ctx)
            arr = assemble(field, [leaf], file.path)
            parts.append(arr.slice(span[0], span[1] - span[0]) if span is not None else arr.take(pa.array(local_rows)))
    if len(parts) == 1:
        out = parts[0]
    elif run:
        out = pa.chunked_array(parts, type=parts[0].type)  # a run across pages: a chunk per page, no copy
    else:
        out = pa.concat_arrays(parts)
    if rows.size < RELEASE_MIN_ROWS:
        # A small take touches a few OS pages per row; dropping the whole pages' mappings
        # would only make the next take fault them in again.
        return out
    # Streaming and large takes touch many pages: keep resident memory near the output size.
    ranges = [(o, s) for pi in touched for o, s in zip(pages[pi].buffer_offsets, pages[pi].buffer_sizes)]
    file.io.release(ranges, keep=_buffers_of(out))
    return out


#: Runs of plain fixed-width values of at least this many bytes are read into place
#: (:func:`_plain_run`); shorter ones are gathered from the map (the read's set-up costs more).
SCATTER_MIN_BYTES = 1 << 20


def _plain_width(file: LanceFileReader, leaf_type: pa.DataType, page: PageInfo, mb, rows: int) -> int | None:
    """The bytes per row of ``rows`` rows of a page read into place (:func:`_plain_run`), or
    None where they are not: the store cannot (not a local file), the type is not plain
    fixed-width, the page has no chunk data buffer, the run is short (under
    :data:`SCATTER_MIN_BYTES`), or (``mb``: the page's mini-block layout, when known) its
    values are not stored plain."""
    width = plain_row_bytes(leaf_type)
    if getattr(file.io, "read_scattered", None) is None or width is None or len(page.buffer_offsets) < 2:
        return None
    if rows * width < SCATTER_MIN_BYTES or (mb is not None and not _plain_values(mb.value_compression, leaf_type)):
        return None
    return width


def _plain_run(file: LanceFileReader, leaf_type: pa.DataType, page: PageInfo, mb, chunks: miniblock.ChunkLayout,
               span: tuple[int, int], ctx: DecodeContext) -> LeafPage | None:
    """Rows ``span`` of a mini-block page of plain fixed-width values (a streaming window's
    run, or a whole page) read by the kernel straight into the decoded buffer
    (:func:`miniblock.decode_plain_run`), where :func:`_plain_width` allows (a local file
    whose pages are released after decoding: mapping them costs more than the copy); None
    otherwise."""
    width = _plain_width(file, leaf_type, page, mb, span[1] - span[0])
    if width is None:
        return None
    return miniblock.decode_plain_run(mb, chunks, span, width, int(page.buffer_offsets[1]), int(page.buffer_sizes[1]),
                                      cast(ScatterHandle, file.io).read_scattered, ctx)  # _plain_width checked it


def plain_row_bytes(t: pa.DataType) -> int | None:
    """Bytes per row of a plain fixed-width Arrow type (integers, floats, fixed-size lists of
    them), None for anything else (booleans, extension types, variable width)."""
    if isinstance(t, pa.BaseExtensionType):
        return None
    if pa.types.is_fixed_size_list(t):
        inner = plain_row_bytes(t.value_type)
        return None if inner is None else inner * t.list_size
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return t.bit_width // 8
    return None


def _plain_values(enc, t: pa.DataType) -> bool:
    """The full-zip value encoding of Arrow type ``t`` is the values themselves: flat values
    of ``t``'s width, or fixed-size lists (``t``'s sizes, without item validity) of them."""
    kind = enc.WhichOneof("compression")
    if pa.types.is_fixed_size_list(t):
        if kind != "fixed_size_list":
            return False
        fsl = enc.fixed_size_list
        return not bool(fsl.has_validity) and int(fsl.items_per_value) == t.list_size and _plain_values(fsl.values, t.value_type)
    return kind == "flat" and int(enc.flat.bits_per_value) == t.bit_width


def plain_row_pages(file: LanceFileReader, field: pa.Field, columns: list[int]) -> list[np.ndarray] | None:
    """Per page, the rows of a plain fixed-width field as a ``[page rows, row bytes]`` uint8
    view of the memory-mapped data file, or None where the field is not stored so.

    A field qualifies when it is one leaf column of a plain type (integers, floats, fixed-size
    lists of them; no extension type) and every page is a full-zip page without control
    words (no repetition, no definition: no nulls) whose values are the row bytes themselves
    (flat, or a fixed-size list of flat values without item validity): row ``i`` of the page
    is then bytes ``[i * row_bytes, (i + 1) * row_bytes)`` of the page's buffer 0.  The
    views alias the file's map (no copy; valid while the reader is open); a file that is
    not mapped (object stores) gives None.
    """
    row_bytes = plain_row_bytes(field.type)
    whole = getattr(file.io, "mapped", None)
    if row_bytes is None or whole is None or len(columns) != 1 or leaf_types(field.type) != [field.type]:
        return None
    col = columns[0]
    ctx = DecodeContext(file.path, col)
    out = []
    for pi, page in enumerate(file.column(col).pages):
        layout = _page_layout(file, col, pi, ctx.at_page(pi))
        if layout.WhichOneof("layout") != "full_zip_layout":
            return None
        fz = layout.full_zip_layout
        if int(fz.bits_rep) or int(fz.bits_def) or fz.WhichOneof("details") != "bits_per_value":
            return None
        if int(fz.bits_per_value) != 8 * row_bytes or not _plain_values(fz.value_compression, field.type):
            return None
        if int(fz.num_items) != page.num_rows or not page.buffer_offsets:
            return None
        start, size = int(page.buffer_offsets[0]), int(page.buffer_sizes[0])
        need = page.num_rows * row_bytes
        if size < need or start + need > whole.size:
            raise CorruptFileError(file.path, f"column {col} page {pi}: full-zip buffer shorter than its {page.num_rows} values")
        out.append(whole[start : start + need].reshape(page.num_rows, row_bytes))
    return out
