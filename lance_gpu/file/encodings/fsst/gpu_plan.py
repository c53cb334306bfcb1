# SPDX-License-Identifier: Apache-2.0
"""Device planning of FSST pages (host side): which pages' strings are FSST compressed and
their symbol tables packed as the device's segmented kernels read them.

Packed tables (the *arena layout*, :func:`arena_tables`): one uint8 array of shape
``(k, TABLE_BYTES)``, row ``j`` table ``j``'s bytes -- its 256 symbols as little-endian u64
(bytes ``[0, 2048)``, symbols past its ``n_symbols`` zero), then its 256 u8 symbol lengths
(bytes ``[2048, 2304)``).  Staged as one item, table ``j`` starts at byte ``TABLE_BYTES * j``
of it (``TABLE_BYTES`` is a multiple of 8: every table stays u64 aligned), the layout
``cuda_kernels.fsst``'s segmented kernels read in the staging arena.  Tables whose encoder
switch is off (strings stored uncompressed) are not packed.

The compressed strings themselves are a Variable block: their chunk buffers are planned as
Variable values (:func:`value_form`, :mod:`lance_gpu.file.encodings.variable.gpu_plan`),
decoded to spans of the compressed bytes, which the FSST kernels then expand.

Staging: :func:`stage_tables` packs and stages a leaf's tables as one item (once per column)
and records where each page's table lies; :func:`add_segments` then names a page's slots
as one FSST segment of its table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cuda_kernels.fsst import TABLE_BYTES
from lance_gpu.file.encodings import fsst as fsst_enc
from lance_gpu.file.encodings.base import DecodeContext, DeviceLeaf, DeviceUnit, one_chunk_buffer, refuse_values
from lance_gpu.file.encodings.variable import gpu_plan as variable_plan

#: bytes of the 256 u64 symbols of a packed table (its lengths follow)
_SYMBOL_BYTES = 256 * 8


def layout_fsst(kind: str, body: Any, nbuf: int) -> Any:
    """The ``Fsst`` message of a layout (``kind``; ``body``: its mini-block / full-zip
    message, with ``nbuf`` value buffers) whose values are FSST strings (a mini-block layout
    with values and without a dictionary, or a variable-width full-zip layout), else None."""
    if kind == "mini_block_layout":
        if not nbuf or body.HasField("dictionary"):
            return None
    elif kind != "full_zip_layout" or body.WhichOneof("details") != "bits_per_offset":
        return None
    enc = body.value_compression
    return enc.fsst if enc.WhichOneof("compression") == "fsst" else None


def value_form(enc: Any, leaf: DeviceLeaf, nbuf: int) -> tuple:
    """``("var", offset bytes)`` of a mini-block page's FSST strings (``enc``, ``nbuf`` chunk
    buffers): their Variable chunks (:func:`variable_plan.offset_bytes` of the ``values``)
    decoded as spans for a variable-width ``leaf``; raises ``DeviceUnsupported`` otherwise."""
    one_chunk_buffer(nbuf)
    if leaf.kind != "var":
        raise refuse_values("fsst", leaf)
    return "var", variable_plan.offset_bytes(enc.fsst.values)


def full_zip_form(enc: Any) -> tuple:
    """``("var",)``: full-zip FSST strings are walked like Variable ones, then expanded."""
    return ("var",)


def arena_tables(symbols: np.ndarray, lengths: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Tables ``keep`` (indices into the rows of ``symbols`` uint64[k, 256] and ``lengths``
    uint8[k, 256], as :func:`fsst.symbol_tables` gives them) in the arena layout: uint8
    ``(keep.size, TABLE_BYTES)``."""
    if keep.size != symbols.shape[0]:  # some stored uncompressed
        symbols, lengths = symbols[keep], lengths[keep]
    return np.concatenate((np.ascontiguousarray(symbols).view(np.uint8).reshape(-1, _SYMBOL_BYTES), lengths), axis=1)


def page_tables(encs: list[Any], layout: np.ndarray, num_values: np.ndarray,
                ctx: DecodeContext) -> tuple[np.ndarray, list[int], np.ndarray] | None:
    """The FSST symbol tables of a table of pages: ``encs[k]`` the ``Fsst`` message of
    distinct layout ``k`` (None: not FSST, :func:`layout_fsst`), ``layout[r]`` page ``r``'s
    layout, ``num_values[r]`` its values.  Parsed together (:func:`fsst.symbol_tables`,
    raising as the CPU reader does for a bad one); returns the pages whose strings are
    compressed (rows, increasing), their symbol counts and their tables in the arena layout,
    or None where no page has compressed strings."""
    if all(e is None for e in encs):
        return None
    is_fsst = np.array([e is not None for e in encs], np.bool_)
    rows = np.flatnonzero(is_fsst[layout] & (num_values > 0))
    if not rows.size:
        return None
    raws = [encs[int(k)].symbol_table for k in layout[rows].tolist()]
    symbols, lengths, nsym, compressed = fsst_enc.symbol_tables(raws, ctx)
    keep = np.flatnonzero(compressed)
    if not keep.size:
        return None
    return rows[keep], nsym[keep].tolist(), arena_tables(symbols, lengths, keep)


def add_segments(unit: DeviceUnit, key: object, slot: int, n: int) -> None:
    """Slots ``[slot, slot + n)`` decoded with the symbol table of page ``key`` (``(id(leaf),
    row)``: a row of its table), where its leaf's tables were staged (:func:`stage_tables`)
    and its strings are compressed."""
    table = unit.fsst_tables.get(key)
    if table is not None and n:
        unit.fsst.append((slot, slot + n, table[0], table[1]))


def stage_tables(unit: DeviceUnit, leaf: Any) -> None:
    """The symbol tables of a variable-width leaf's FSST pages placed at once: parsed
    together (:func:`page_tables`, which refuses a bad one as the CPU reader does), those
    whose strings are compressed staged as **one** item (table ``j`` at byte ``TABLE_BYTES
    * j``: the arena layout) and recorded in the unit's ``fsst_tables`` for
    :func:`add_segments` (the kernels index them by page: each FSST segment names its
    table's arena byte).  A leaf planned as a table (``leaf.table``, a
    ``lance_gpu.gpu.pagetable.LeafPages``) is looked at per distinct layout, once per
    column (its ``memo``); its pages' rows with a table are the unit's ``fsst_rows``."""
    if leaf.kind != "var":
        return
    t = leaf.table
    if t is None:
        return
    got = t.memo.get("fsst")
    if got is None:  # per column, once: its tables parsed and packed
        encs = [layout_fsst(f.kind, f.body, f.num_buffers) for f in t.layouts]
        got = t.memo["fsst"] = page_tables(encs, t.layout, t.num_values, leaf.ctx())
    if got is None:
        return
    rows, nsym, packed = got
    at = unit.stage.add_bytes(packed)
    key = id(leaf)
    for k, (j, ns) in enumerate(zip(rows.tolist(), nsym, strict=True)):
        unit.fsst_tables[(key, j)] = (at + TABLE_BYTES * k, ns)
    unit.fsst_rows[key] = rows


__all__ = ["TABLE_BYTES", "add_segments", "arena_tables", "full_zip_form", "layout_fsst", "page_tables", "stage_tables", "value_form"]
