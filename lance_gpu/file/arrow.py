# SPDX-License-Identifier: Apache-2.0
"""Decoded leaf pages to pyarrow arrays, and leaves to nested arrays.

A top-level field's leaves are visited depth-first; every schema node on the path from the
field to a leaf is one rep/def layer (inner-most first in the page's ``layers``): a struct
or the leaf itself an item layer, a list / large_list / map a list layer (a map's entries
struct an item layer).  Fixed-size lists are values of their leaf, not layers.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lance_gpu.cpu import memory
from lance_gpu.errors import CorruptFileError, UnsupportedEncodingError
from lance_gpu.file.blocks import Block, FixedWidthBlock, VariableWidthBlock
from lance_gpu.file.encodings.constant import repeat_value
from lance_gpu.file.jsonb import jsonb_to_text
from lance_gpu.file.page import LeafPage
from lance_gpu.file.v2_1.repdef import LayerSlots, unravel

_leaf_types_of: dict[pa.DataType, tuple[pa.DataType, ...]] = {}


def leaf_types(t: pa.DataType) -> list[pa.DataType]:
    """The leaf types of ``t`` in column order (an empty struct is a leaf: 2.1+ files give
    it a column of its own, holding only its rep/def levels); remembered per type (but for
    types that cannot be hashed: some Python extension types)."""
    try:
        found = _leaf_types_of.get(t)
    except TypeError:
        return _leaf_types(t)
    if found is None:
        found = _leaf_types_of[t] = tuple(_leaf_types(t))
    return list(found)


def _leaf_types(t: pa.DataType) -> list[pa.DataType]:
    if pa.types.is_struct(t) and t.num_fields:
        return [lt for i in range(t.num_fields) for lt in leaf_types(t.field(i).type)]
    if pa.types.is_map(t):
        return leaf_types(t.key_type) + leaf_types(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return leaf_types(t.value_type)
    return [t]


def _bitmap(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None:
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _primitive(values: np.ndarray, t: pa.DataType) -> pa.Array:
    """``values`` (a 1-D numpy array of ``t``'s width) as an Arrow array without nulls, over the
    same memory.  (``pa.array`` on a numpy array imports pandas, a quarter second or more of a
    process's first read.)"""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(t, values.size, [None, pa.py_buffer(values)])


def _mask(valid: np.ndarray | None) -> pa.Array | None:
    """The Arrow ``mask=`` (True: null) of a validity array (True: valid), or None."""
    if valid is None:
        return None
    return pa.Array.from_buffers(pa.bool_(), valid.size, [None, _bitmap(~valid)])


def _storage(t: pa.DataType) -> pa.DataType:
    # BaseExtensionType: Python-defined extension types and C++ ones (fixed_shape_tensor, json)
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def null_block_for(t: pa.DataType, n: int) -> Block:
    """Zero-filled values standing in for the slots of an all-null page.  A fixed-size
    list's items are null too, every layer of them (as pylance reads them: the items of a
    null list are null)."""
    t = _storage(t)
    if pa.types.is_dictionary(t):
        t = t.value_type
    if _is_variable(t):
        return VariableWidthBlock(np.zeros(n + 1, np.int64), np.zeros(0, np.uint8))
    if pa.types.is_struct(t):  # an empty struct's column: levels only, no values
        return FixedWidthBlock(np.zeros(0, np.uint8), 0, n)
    bits = fixed_bits_of(t)
    items_null: list[np.ndarray | None] = []
    layer, items = t, n
    while pa.types.is_fixed_size_list(layer):
        items *= layer.list_size
        items_null.append(np.zeros(items, np.bool_))
        layer = _storage(layer.value_type)
    return FixedWidthBlock(np.zeros((n * bits + 7) // 8, np.uint8), bits, n, tuple(items_null))


def _is_variable(t: pa.DataType) -> bool:
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary_view(t)
    )


def fixed_bits_of(t: pa.DataType) -> int:
    t = _storage(t)
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_fixed_size_list(t):
        return t.list_size * fixed_bits_of(t.value_type)
    if pa.types.is_null(t):
        return 8
    return t.bit_width


def constant_block(value: bytes, t: pa.DataType, n: int) -> Block:

    t = _storage(t)
    if pa.types.is_dictionary(t):
        t = t.value_type
    if _is_variable(t):
        raw = np.frombuffer(value, np.uint8)
        offsets = np.arange(n + 1, dtype=np.int64) * raw.size
        return VariableWidthBlock(offsets, np.tile(raw, n))
    bits = fixed_bits_of(t)
    if bits == 1:
        bit = value[0] & 1 if value else 0
        return FixedWidthBlock(np.packbits(np.full(n, bit, np.bool_), bitorder="little"), 1, n)
    block = repeat_value(value, n)
    if block.bits_per_value != bits:
        raise CorruptFileError("<page>", f"constant of {len(value)} bytes for a {bits}-bit type")
    return block


def values_to_arrow(block: Block, t: pa.DataType, n: int, valid: np.ndarray | None, path: str) -> pa.Array:
    """Wrap a decoded block as an array of type ``t`` with ``n`` slots."""
    if getattr(t, "extension_name", None) == "arrow.json":
        # Lance JSON: the stored values are JSONB documents (lance_gpu.file.jsonb)
        raw = values_to_arrow(block, pa.large_binary(), n, valid, path)
        return pa.ExtensionArray.from_storage(t, jsonb_to_text(raw, path).cast(t.storage_type))
    storage = _storage(t)
    if pa.types.is_dictionary(storage):
        plain = values_to_arrow(block, storage.value_type, n, valid, path)
        arr = plain.dictionary_encode()
        if arr.type != storage:
            arr = arr.cast(storage)
        return arr if storage is t else pa.ExtensionArray.from_storage(t, arr)
    validity = _bitmap(valid)
    if _is_variable(storage):
        if not isinstance(block, VariableWidthBlock) or block.num_values != n:
            raise CorruptFileError(path, f"expected {n} variable-width values, decoded {block.num_values}")
        offsets = block.offsets
        if pa.types.is_string(storage) or pa.types.is_binary(storage):
            if offsets.size and offsets[-1] > np.iinfo(np.int32).max:
                raise UnsupportedEncodingError(f"{path}: more than 2 GiB in one string column chunk")
            narrow = memory.empty(offsets.size, np.int32)
            np.copyto(narrow, offsets, casting="unsafe")
            offsets = narrow
        elif pa.types.is_string_view(storage) or pa.types.is_binary_view(storage):
            base = pa.large_string() if pa.types.is_string_view(storage) else pa.large_binary()
            arr = pa.Array.from_buffers(base, n, [validity, pa.py_buffer(offsets), pa.py_buffer(block.data)])
            return arr.cast(storage)
        memory.watch(block.data)
        arr = pa.Array.from_buffers(storage, n, [validity, pa.py_buffer(offsets), pa.py_buffer(block.data)])
    else:
        if not isinstance(block, FixedWidthBlock) or block.num_values != n:
            got = block.num_values
            raise CorruptFileError(path, f"expected {n} fixed-width values, decoded {got}")
        bits = fixed_bits_of(storage)
        if block.bits_per_value == 0 and block.fsl_validity:
            # items all null, no value bytes stored (full-zip ``FixedSizeList{Constant}``)
            block = FixedWidthBlock(np.zeros((n * bits + 7) // 8, np.uint8), bits, n, block.fsl_validity)
        if block.bits_per_value != bits:
            raise CorruptFileError(path, f"decoded {block.bits_per_value}-bit values for {storage}")
        if pa.types.is_fixed_size_list(storage):
            inner_t = storage.value_type
            dim = storage.list_size
            item_valid = block.fsl_validity[0] if block.fsl_validity else None
            inner_block = FixedWidthBlock(block.as_bytes(), bits // dim, n * dim, block.fsl_validity[1:])
            inner = values_to_arrow(inner_block, inner_t, n * dim, item_valid, path)
            arr = pa.FixedSizeListArray.from_arrays(inner, type=storage, mask=_mask(valid))
        elif pa.types.is_null(storage):
            arr = pa.nulls(n)
        else:
            data = block.as_bytes()
            memory.watch(data)
            arr = pa.Array.from_buffers(storage, n, [validity, pa.py_buffer(data)])
    if storage is not t:
        arr = pa.ExtensionArray.from_storage(t, arr)
    return arr


def dictionary_to_arrow(dictionary: tuple[Block, np.ndarray], t: pa.DataType, n: int, valid: np.ndarray | None, path: str) -> pa.Array:
    """A dictionary-typed array from a page's own dictionary and indices (as pylance returns it)."""
    storage = _storage(t)
    items, indices = dictionary
    if indices.size != n:
        raise CorruptFileError(path, f"expected {n} dictionary indices, decoded {indices.size}")
    index_dtype = storage.index_type.to_pandas_dtype()
    if n and int(indices.max()) > np.iinfo(index_dtype).max:
        raise CorruptFileError(path, f"dictionary index {int(indices.max())} does not fit {storage.index_type}")
    dict_values = values_to_arrow(items, storage.value_type, items.num_values, None, path)
    idx = pa.Array.from_buffers(storage.index_type, n, [_bitmap(valid), pa.py_buffer(np.ascontiguousarray(indices.astype(index_dtype)))])
    arr = pa.DictionaryArray.from_arrays(idx, dict_values, ordered=storage.ordered)
    return arr if storage is t else pa.ExtensionArray.from_storage(t, arr)


class _Leaf:
    """One leaf column's page, its values resolved to a block (an all-null or constant page's
    values built), and its levels unravelled into per-layer slots (outer layer first)."""

    __slots__ = ("page", "values", "slots", "k")

    def __init__(self, page: LeafPage, values: Block, slots: list[LayerSlots]) -> None:
        self.page = page
        self.values = values
        self.slots = slots
        self.k = len(slots)


def assemble(field: pa.Field, pages: list[LeafPage], path: str) -> pa.Array:
    """Build the array of one top-level field from its leaf columns' decoded pages."""
    leaves = []
    for page, t in zip(pages, leaf_types(field.type)):
        if page.values is None:
            values = null_block_for(t, page.num_values)
        elif isinstance(page.values, tuple):
            values = constant_block(page.values[1], t, page.num_values)
        else:
            values = page.values
        def_ = page.def_
        if page.values is None and def_ is None:
            # All-null page without levels: every item is null at the item layer.
            def_ = np.ones(page.num_levels, np.uint16) if page.layers and page.layers[0] == 3 else None
        page = LeafPage(values, page.num_values, page.rep, def_, page.num_levels, page.layers, page.num_rows, page.dictionary)
        slots: list[LayerSlots] | None
        if page.rep is None and page.def_ is None:
            slots = [LayerSlots(None, None, page.num_levels) for _ in page.layers]
        else:
            slots = unravel(page.rep, page.def_, page.num_levels, page.layers)
            if slots is None:
                raise CorruptFileError(path, "repetition / definition levels do not fit the column's layers")
        leaves.append(_Leaf(page, values, slots))
    cursor = [0]
    arr = _build(field.type, leaves, cursor, 0, path)
    return arr


def _build(
    t: pa.DataType, leaves: list[_Leaf], cursor: list[int], depth: int, path: str, count: int | None = None
) -> pa.Array:
    storage = _storage(t)
    if pa.types.is_struct(storage) and storage.num_fields == 0:
        # An empty struct (pylance writes only non-nullable ones): its column is a placeholder
        # (an all-null constant page of one layer); every row is a valid empty struct. Its
        # row count is its parent struct's (``count``), or the page's at the top level.
        leaf = leaves[cursor[0]]
        cursor[0] += 1
        if count is None:
            if depth:
                raise UnsupportedEncodingError(f"{path}: an empty struct inside a list")
            count = leaf.page.num_rows
        arr = pa.StructArray.from_buffers(storage, count, [None], children=[])
        return arr if storage is t else pa.ExtensionArray.from_storage(t, arr)
    if pa.types.is_struct(storage) or pa.types.is_map(storage) or pa.types.is_list(storage) or pa.types.is_large_list(storage):
        first = leaves[cursor[0]]
        li = first.k - 1 - depth
        if li < 0:
            raise CorruptFileError(path, "column has fewer rep/def layers than its type's nesting")
        slots = first.slots[li]
        mask = _mask(slots.validity)
        if pa.types.is_struct(storage):
            children = [
                _build(storage.field(i).type, leaves, cursor, depth + 1, path, slots.count)
                for i in range(storage.num_fields)
            ]
            if any(len(c) != len(children[0]) for c in children) or (mask is not None and children and len(mask) != len(children[0])):
                # pages of the fields disagree (damaged levels or chunk metadata in one of them)
                lengths = sorted({len(c) for c in children})
                raise CorruptFileError(path, f"the fields of struct {t} decode to {lengths} rows (validity: {None if mask is None else len(mask)})")
            arr = pa.StructArray.from_arrays(children, fields=list(storage), mask=mask)
        else:
            if slots.offsets is None:
                raise CorruptFileError(path, "list column without list levels")
            if pa.types.is_map(storage):
                entries = _build(pa.struct([storage.key_field, storage.item_field]), leaves, cursor, depth + 1, path)
                offsets = _primitive(slots.offsets.astype(np.int32), pa.int32())
                arr = pa.MapArray.from_arrays(offsets, entries.field(0), entries.field(1), type=storage, mask=mask)
            else:
                child = _build(storage.value_type, leaves, cursor, depth + 1, path)
                if pa.types.is_large_list(storage):
                    arr = pa.LargeListArray.from_arrays(_primitive(slots.offsets.astype(np.int64), pa.int64()), child, type=storage, mask=mask)
                else:
                    arr = pa.ListArray.from_arrays(_primitive(slots.offsets.astype(np.int32), pa.int32()), child, type=storage, mask=mask)
        return arr if storage is t else pa.ExtensionArray.from_storage(t, arr)
    leaf = leaves[cursor[0]]
    cursor[0] += 1
    li = leaf.k - 1 - depth
    if li != 0:
        raise CorruptFileError(path, "column's rep/def layers do not match its type's nesting")
    slots = leaf.slots[0]
    if leaf.page.dictionary is not None and pa.types.is_dictionary(_storage(t)):
        return dictionary_to_arrow(leaf.page.dictionary, t, slots.count, slots.validity, path)
    return values_to_arrow(leaf.values, t, slots.count, slots.validity, path)
