# SPDX-License-Identifier: Apache-2.0
"""Dictionary: ``indices``, ``items``, ``num_dictionary_items``.

Each page carries its own dictionary (``items``, usually a Binary over page buffers 1 and 2)
and one index per row.  pylance writes two kinds, told apart by the field's Arrow type,
exactly as its reader does:

* The field is **not** a dictionary (a ``string`` column of low cardinality, dictionary-
  encoded by the writer): the indices are **1-based** (usually u8); 0 means null.  The
  values are materialised: ``items[index - 1]``.
* The field **is** an Arrow dictionary: the indices are the column's own 0-based keys and
  are returned as they are, with the page's dictionary.  A key that points at a null
  dictionary item is reported as a null key (the writer moves null keys into the
  dictionary that way).

Materialised values are validated once, as the dictionary (:mod:`lance_gpu.file.validate`),
before the gather: the gathered block then holds only whole dictionary values under
offsets the gather builds, and is marked so.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_gpu.file.v2_0 import registry
from lance_gpu.file.v2_0.blocks import (
    AllNull,
    Bits,
    Dict,
    Fixed,
    Nullable,
    Var,
    split_validity,
)
from lance_gpu.file.v2_0.page import PageSource
from lance_gpu.file.validate import check_values, is_utf8_type


def _take_var(block: Var, idx: np.ndarray) -> Var:
    """``block[idx]`` for a variable-width block (vectorised)."""
    starts = block.offsets[:-1][idx]
    lens = block.offsets[1:][idx] - starts
    offsets = np.zeros(idx.size + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return Var(offsets, np.zeros(0, np.uint8))
    # Byte j of value i comes from data[starts[i] + (j - offsets[i])].
    src_pos = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets[:-1], lens)
    # whole values of a checked dictionary (see decode) under offsets built here
    return Var(offsets, block.data[src_pos], True, block.utf8_valid)


def _take(block, idx: np.ndarray, src: PageSource):
    if isinstance(block, Var):
        return _take_var(block, idx)
    if isinstance(block, Fixed):
        width = block.bits // 8
        rows = np.ascontiguousarray(block.data).reshape(-1, width)
        return Fixed(rows[idx].reshape(-1), block.bits)
    if isinstance(block, Bits):
        return Bits(block.values[idx])
    if isinstance(block, AllNull):
        return AllNull(idx.size)
    raise src.ctx.unsupported(f"2.0 Dictionary items decoded as {type(block).__name__}")


def decode(msg, src: PageSource, start: int, stop: int, arrow_type):
    n = stop - start
    nitems = int(msg.num_dictionary_items)
    as_dict = arrow_type is not None and pa.types.is_dictionary(arrow_type)
    value_type = arrow_type.value_type if as_dict else arrow_type
    key_block, key_valid = split_validity(registry.decode(msg.indices, src, start, stop, None))
    if isinstance(key_block, AllNull):
        keys = np.zeros(n, np.int64)
        key_valid = np.zeros(n, bool)
    elif isinstance(key_block, Fixed) and key_block.bits in (8, 16, 32, 64):
        keys = key_block.as_uint().astype(np.int64)
        if key_block.bits == 64 and keys.size and int(keys.min()) < 0:
            raise src.ctx.corrupt("dictionary index out of range")
    else:
        raise src.ctx.corrupt("Dictionary indices must be 8/16/32/64-bit integers")
    if keys.size != n:
        raise src.ctx.corrupt(f"Dictionary indices: decoded {keys.size}, expected {n}")
    items = registry.decode(msg.items, src, 0, nitems, value_type)
    if items.n != nitems:
        raise src.ctx.corrupt(f"Dictionary items: decoded {items.n}, expected {nitems}")
    if as_dict:
        return Dict(keys, key_valid, items)
    # 1-based indices, 0 = null.
    valid = keys != 0
    if key_valid is not None:
        valid &= key_valid
    pos = keys - 1
    if valid.any() and int(pos[valid].max()) >= nitems:
        raise src.ctx.corrupt(f"dictionary index {int(pos[valid].max()) + 1} out of range ({nitems} items)")
    pos = np.where(valid, pos, 0)
    item_block, item_valid = split_validity(items)
    if nitems == 0:
        if valid.any():
            raise src.ctx.corrupt("dictionary index into an empty dictionary")
        return AllNull(n)
    if isinstance(item_block, Var):
        utf8 = value_type is not None and is_utf8_type(value_type)
        check_values(item_block.offsets, item_block.data, utf8, src.ctx, item_block.offsets_valid, item_block.utf8_valid)
        item_block.offsets_valid = True
        item_block.utf8_valid = utf8
    out = _take(item_block, pos, src)
    if item_valid is not None:
        valid &= item_valid[pos]
    if valid.all():
        return out
    if isinstance(out, AllNull):
        return out
    return Nullable(out, valid)
