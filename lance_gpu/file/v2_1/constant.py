# SPDX-License-Identifier: Apache-2.0
"""ConstantLayout (``AllNullLayout`` in older 2.1 protos): a page whose items are all null,
or all equal to one value: ``inline_value`` (fixed width, at most 32 bytes) or, for strings
and binary (2.2), a value buffer.  See :func:`decode` for where the levels are.
"""

from __future__ import annotations

import struct

import numpy as np

from lance_gpu.file import encodings
from lance_gpu.file.blocks import FixedWidthBlock
from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.page import LeafPage
from lance_gpu.file.v2_1.fullzip import invisible_table


def _levels(enc_present: bool, enc, buf: np.ndarray, n: int, ctx: DecodeContext) -> np.ndarray:
    if not enc_present:
        if buf.size < 2 * n:
            raise ctx.corrupt("constant page level buffer is truncated")
        return buf[: 2 * n].copy().view(np.uint16)
    block = encodings.decode_block(enc, buf, n, ctx)
    if not isinstance(block, FixedWidthBlock) or block.bits_per_value != 16:
        raise ctx.corrupt("levels must decode to 16-bit values")
    return block.as_uint()


def _value_buffer(buf: np.ndarray, ctx: DecodeContext) -> bytes:
    """The one value of a constant page too wide to be inline (2.2 strings, binary).

    ``u32 num_buffers | u32 size per buffer | buffers``: two buffers (offsets ``[0, n]``, u32
    or u64, then the bytes) for variable-width values, one (the bytes) otherwise.
    """
    raw = buf.tobytes()
    if len(raw) < 4:
        raise ctx.corrupt("constant page value buffer is truncated")
    (nbuf,) = struct.unpack_from("<I", raw, 0)
    if nbuf not in (1, 2) or len(raw) < 4 + 4 * nbuf:
        raise ctx.corrupt(f"constant page value buffer holds {nbuf} buffers")
    sizes = struct.unpack_from(f"<{nbuf}I", raw, 4)
    pos = 4 + 4 * nbuf
    if pos + sum(sizes) > len(raw):
        raise ctx.corrupt("constant page value buffer is truncated")
    if nbuf == 1:
        return raw[pos : pos + sizes[0]]
    width = sizes[0] // 2
    if width not in (4, 8) or sizes[0] != 2 * width:
        raise ctx.corrupt(f"constant page value has {sizes[0]} bytes of offsets")
    lo, hi = struct.unpack_from("<QQ" if width == 8 else "<II", raw, pos)
    if not lo <= hi <= sizes[1]:
        raise ctx.corrupt("constant page value offsets out of range")
    data = pos + sizes[0]
    return raw[data + lo : data + hi]


def decode(layout, buffers: list[np.ndarray], num_rows: int, ctx: DecodeContext) -> LeafPage:
    """Buffers, as pylance writes them:

    * all-null pages of 2.2: ``[rep, def]`` compressed (``rep_compression`` /
      ``def_compression``), with ``num_rep_values`` / ``num_def_values`` set; an empty buffer
      where a level is absent; no buffers at all for a plain all-null column;
    * constant pages of 2.2: ``[value]`` (only when there is no ``inline_value``) then, if the
      column has levels, ``[rep, def]`` as raw u16 with no counts (count = size / 2);
    * ``AllNullLayout`` of 2.1: ``[rep, def]`` raw u16 with no counts.
    """
    layers = tuple(int(x) for x in layout.layers) or (3,)
    nrep = int(getattr(layout, "num_rep_values", 0))
    ndef = int(getattr(layout, "num_def_values", 0))
    rep = def_ = None
    value: bytes | None = None
    if layout.HasField("inline_value"):
        value = bytes(layout.inline_value)
    bufs = list(buffers)
    if nrep or ndef:
        rep_buf: np.ndarray | None
        def_buf: np.ndarray | None
        if len(bufs) >= 2:
            rep_buf, def_buf = bufs[0], bufs[1]
        elif len(bufs) == 1 and not (nrep and ndef):
            rep_buf, def_buf = (bufs[0], None) if nrep else (None, bufs[0])
        else:
            raise ctx.corrupt("constant page lacks its level buffers")
        if nrep:
            if rep_buf is None:
                raise ctx.corrupt("constant page lacks its repetition buffer")
            rep = _levels(layout.HasField("rep_compression"), layout.rep_compression, rep_buf, nrep, ctx)
        if ndef:
            if def_buf is None:
                raise ctx.corrupt("constant page lacks its definition buffer")
            def_ = _levels(layout.HasField("def_compression"), layout.def_compression, def_buf, ndef, ctx)
        num_levels = max(nrep, ndef)
    else:
        if value is None and len(bufs) % 2 == 1:
            value = _value_buffer(bufs[0], ctx)
            bufs = bufs[1:]
        if len(bufs) not in (0, 2):
            raise ctx.corrupt(f"constant page has {len(buffers)} buffers")
        counts = []
        for k, buf in enumerate(bufs):
            if buf.size % 2:
                raise ctx.corrupt("constant page level buffer has an odd size")
            if buf.size:
                lv = buf.copy().view(np.uint16)
                counts.append(lv.size)
                if k == 0:
                    rep = lv
                else:
                    def_ = lv
        if len(set(counts)) > 1:
            raise ctx.corrupt("constant page repetition and definition levels differ in count")
        num_levels = counts[0] if counts else num_rows
    if rep is not None and def_ is not None and rep.size != def_.size:
        raise ctx.corrupt("constant page repetition and definition levels differ in count")
    if value is None and def_ is None and layers[0] == 3:
        # All-null page without levels: every item is null (NULLABLE_ITEM level 1), spelt out
        # so that the page stays null when joined with other pages of the column.
        def_ = np.ones(num_levels, np.uint16)
    if def_ is not None:
        table = invisible_table(layers)
        if def_.size and int(def_.max()) >= table.size:
            raise ctx.corrupt("constant page holds an impossible definition level")
        num_visible = int(np.count_nonzero(~table[def_]))
    else:
        num_visible = num_levels
    values = None if value is None else ("constant", value)
    return LeafPage(values, num_visible, rep, def_, num_levels, layers, num_rows)  # type: ignore[arg-type]
