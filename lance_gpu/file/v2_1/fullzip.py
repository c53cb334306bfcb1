# SPDX-License-Identifier: Apache-2.0
"""FullZipLayout: large values (embeddings, long strings) with levels zipped in.

Buffer 0 holds one entry per item: ``[control word] [value length] [value bytes]``.

* control word: present when ``bits_rep + bits_def > 0``; 1, 2 or 4 bytes LE holding
  ``(rep << bits_def) | def``;
* value length: variable width only (``bits_per_offset`` 32 or 64);
* value bytes: visible items only (null items included, null or empty lists not); fixed
  width values take ``bits_per_value / 8`` bytes.

Buffer 1 (variable width, or with repetition) is the repetition index: ``num_rows + 1``
byte offsets into buffer 0, each 1, 2, 4 or 8 bytes wide; needed only for random access.

This module is the CPU decode; the device walks full-zip pages with :mod:`.fullzip_kernels`.
"""

from __future__ import annotations

import numpy as np

from lance_gpu.cpu import native
from lance_gpu.file import encodings
from lance_gpu.file.blocks import FixedWidthBlock, VariableWidthBlock
from lance_gpu.file.encodings import fixed_size_list, fsst, general
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.page import LeafPage
from lance_gpu.file.v2_1.repdef import invisible_levels


def invisible_table(layers: tuple[int, ...]) -> np.ndarray:
    """invisible[d] is True where def level d leaves the item without a value."""

    return invisible_levels(layers)


def _ctrl_bytes(bits: int) -> int:
    if bits == 0:
        return 0
    if bits <= 8:
        return 1
    if bits <= 16:
        return 2
    return 4


def decode(layout, buffers: list[np.ndarray], num_rows: int, ctx: DecodeContext) -> LeafPage:
    if not buffers:
        raise ctx.corrupt("full-zip page without a data buffer")
    data = buffers[0]
    layers = tuple(int(x) for x in layout.layers)
    bits_rep = int(layout.bits_rep)
    bits_def = int(layout.bits_def)
    num_items = int(layout.num_items)
    num_visible = int(layout.num_visible_items)
    kind = layout.WhichOneof("details")
    enc = layout.value_compression
    ctrl = _ctrl_bytes(bits_rep + bits_def)
    if kind == "bits_per_value":
        value_bits = int(layout.bits_per_value)
        if value_bits % 8:
            raise ctx.unsupported(f"full-zip values of {value_bits} bits")
        value_bytes = value_bits // 8
        offset_bytes = 0
    elif kind == "bits_per_offset":
        value_bytes = 0
        offset_bytes = int(layout.bits_per_offset) // 8
        if offset_bytes not in (4, 8):
            raise ctx.corrupt(f"full-zip offsets of {layout.bits_per_offset} bits")
    else:
        raise ctx.corrupt("full-zip layout names neither bits_per_value nor bits_per_offset")

    rep = def_ = None
    if ctrl == 0 and offset_bytes == 0:
        # Plain fixed-width values back to back: no walk needed.
        need = num_items * value_bytes
        if data.size < need:
            raise ctx.corrupt("full-zip buffer shorter than its values")
        values = FixedWidthBlock(data[:need], value_bytes * 8, num_items)
        return LeafPage(_fixed_values(enc, values, ctx), num_items, None, None, num_items, layers, num_rows)

    invisible = invisible_table(layers)
    r, d, vstart, vlen, ok = native.fullzip_scan(
        data, num_items, ctrl, bits_def, offset_bytes, value_bytes, invisible
    )
    if not ok:
        raise ctx.corrupt("full-zip buffer is truncated or holds an impossible level")
    if vstart.size != num_visible:
        raise ctx.corrupt(f"full-zip page has {vstart.size} visible values, expected {num_visible}")
    if bits_rep:
        rep = r
    if bits_def:
        def_ = d
    if offset_bytes == 0:
        raw = native.gather_ranges(data, vstart, vlen)
        values = _fixed_values(enc, FixedWidthBlock(raw, value_bytes * 8, vstart.size), ctx)
    else:
        values = _variable_values(enc, data, vstart, vlen, ctx)
    return LeafPage(values, vstart.size, rep, def_, num_items, layers, num_rows)


def _fixed_values(enc, raw: FixedWidthBlock, ctx: DecodeContext) -> FixedWidthBlock:
    bits = encodings.fixed_bits(enc, ctx)
    if bits != raw.bits_per_value:
        raise ctx.corrupt(f"full-zip value width {raw.bits_per_value} disagrees with its encoding ({bits})")
    if enc.WhichOneof("compression") == "fixed_size_list" and fixed_size_list.has_validity(enc.fixed_size_list):
        return fixed_size_list.unzip_per_value(enc.fixed_size_list, raw, ctx)
    return raw


def _variable_values(enc, data: np.ndarray, vstart: np.ndarray, vlen: np.ndarray, ctx: DecodeContext):
    kind = enc.WhichOneof("compression")
    if kind in ("variable", "variable_packed_struct"):
        # a packed struct's rows stay whole (encodings.packed_struct splits the fields)
        offsets, out, utf8_valid = native.ranges_to_variable(data, vstart, vlen)
        return VariableWidthBlock(offsets, out, True, utf8_valid)
    if kind == "fsst":
        return fsst.decompress_spans(fsst.SymbolTable(enc.fsst.symbol_table, ctx), data, vstart, vlen, ctx)
    if kind == "general":
        inner = enc.general.values
        if inner.WhichOneof("compression") not in ("variable", "flat"):
            raise ctx.unsupported("full-zip General over anything but Variable")
        parts = [
            general.decompress(enc.general.compression, data[s : s + n], ctx) if n else np.zeros(0, np.uint8)
            for s, n in zip(vstart.tolist(), vlen.tolist())
        ]
        lengths = np.array([p.size for p in parts], np.int64)
        offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        out = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        return VariableWidthBlock(offsets, out)
    raise ctx.unsupported(f"{kind} as a full-zip variable-width encoding")


def take_rows(layout, page, file, rows: np.ndarray, ctx: DecodeContext) -> LeafPage:
    """Decode only ``rows`` (sorted, page-local) of a full-zip page without repetition.

    Without repetition every row is one item: fixed-width items have a fixed stride
    (control word + value) and variable-width ones are found through the repetition index
    (buffer 1).  Only the rows' bytes are read from the file.
    """
    layers = tuple(int(x) for x in layout.layers)
    bits_def = int(layout.bits_def)
    ctrl = _ctrl_bytes(bits_def)
    base = page.buffer_offsets[0]
    size0 = page.buffer_sizes[0]
    if layout.WhichOneof("details") == "bits_per_value":
        value_bytes = int(layout.bits_per_value) // 8
        offset_bytes = 0
        stride = ctrl + value_bytes
        starts = rows * stride
        lengths = np.full(rows.size, stride, np.int64)
    else:
        value_bytes = 0
        offset_bytes = int(layout.bits_per_offset) // 8
        if len(page.buffer_offsets) < 2:
            raise ctx.corrupt("variable-width full-zip page lacks its repetition index")
        n = page.num_rows
        width, rem = divmod(page.buffer_sizes[1], n + 1) if n + 1 else (0, 1)
        if rem or width not in (1, 2, 4, 8):
            raise ctx.corrupt("full-zip repetition index has an impossible width")
        idx_dt = np.dtype(f"<u{width}")
        got = file.read_gather(page.buffer_offsets[1] + rows * width, np.full(rows.size, 2 * width, np.int64))
        pairs = got.view(idx_dt).astype(np.int64).reshape(-1, 2)
        starts = pairs[:, 0]
        lengths = pairs[:, 1] - pairs[:, 0]
    if rows.size and (np.any(lengths < 0) or np.any(np.diff(starts) < 0) or int((starts + lengths).max()) > size0):
        raise ctx.corrupt("full-zip rows point outside the page")
    data = file.read_gather(base + starts, lengths)
    enc = layout.value_compression
    if ctrl == 0 and offset_bytes == 0:
        # Plain fixed-width values: the gathered rows are the values, back to back.
        values = _fixed_values(enc, FixedWidthBlock(data, value_bytes * 8, rows.size), ctx)
        return LeafPage(values, rows.size, None, None, rows.size, layers, rows.size)
    invisible = invisible_table(layers)
    _r, d, vstart, vlen, ok = native.fullzip_scan(data, rows.size, ctrl, bits_def, offset_bytes, value_bytes, invisible)
    if not ok:
        raise ctx.corrupt("full-zip rows are truncated or hold an impossible level")
    if offset_bytes == 0:
        raw = native.gather_ranges(data, vstart, vlen)
        values = _fixed_values(enc, FixedWidthBlock(raw, value_bytes * 8, vstart.size), ctx)
    else:
        values = _variable_values(enc, data, vstart, vlen, ctx)
    return LeafPage(values, vstart.size, None, d if bits_def else None, rows.size, layers, rows.size)

