# SPDX-License-Identifier: Apache-2.0
"""Decoded page data of format 2.0, before it becomes Arrow.

Every 2.0 ``ArrayEncoding`` decoder returns one of these for the rows it was asked for;
:func:`to_arrow` then builds the Arrow array of the field's type (the block says what the
bytes are, the Arrow type says how to present them: ``string`` vs ``large_string``,
``timestamp`` vs ``int64``, ...).

* :class:`Fixed`     -- ``n`` values of ``bits`` bits each (``bits`` a multiple of 8), as bytes.
* :class:`Bits`      -- ``n`` one-bit values (booleans), unpacked to ``np.bool_``.
* :class:`Var`       -- ``n`` variable-width values: ``int64`` offsets (``n + 1``, from 0) and bytes.
* :class:`Nullable`  -- another block plus a validity mask (``True`` = valid).
* :class:`AllNull`   -- ``n`` nulls.
* :class:`FSL`       -- fixed-size lists: ``n * dim`` child values.
* :class:`Struct`    -- packed struct rows: one child block per field.
* :class:`Dict`      -- dictionary indices (0-based keys) and the dictionary items, kept
  as a dictionary because the field's Arrow type is a dictionary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lance_gpu.file.encodings.base import DecodeContext
from lance_gpu.file.jsonb import jsonb_to_text
from lance_gpu.file.validate import check_values, is_utf8_type

_I32_MAX = 2**31 - 1


@dataclass(slots=True)
class Fixed:
    data: np.ndarray  # uint8
    bits: int

    @property
    def n(self) -> int:
        return self.data.size * 8 // self.bits if self.bits else 0

    def as_uint(self) -> np.ndarray:
        """The values as unsigned integers of their own width (a view)."""
        dt = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}.get(self.bits)
        if dt is None:
            raise ValueError(f"{self.bits}-bit values are not integers")
        return np.ascontiguousarray(self.data).view(dt)


@dataclass(slots=True)
class Bits:
    values: np.ndarray  # bool

    @property
    def n(self) -> int:
        return self.values.size


@dataclass(slots=True)
class Var:
    offsets: np.ndarray  # int64[n + 1], offsets[0] == 0
    data: np.ndarray  # uint8
    #: as :class:`lance_gpu.file.blocks.VariableWidthBlock`: offsets built by the decoder
    #: (from 0, non-decreasing, ending at ``len(data)``) and, with that, every value UTF-8
    offsets_valid: bool = False
    utf8_valid: bool = False

    @property
    def n(self) -> int:
        return self.offsets.size - 1


@dataclass(slots=True)
class Nullable:
    inner: object
    validity: np.ndarray  # bool[n]

    @property
    def n(self) -> int:
        return self.validity.size


@dataclass(slots=True)
class AllNull:
    n: int


@dataclass(slots=True)
class FSL:
    child: object
    dim: int
    n: int


@dataclass(slots=True)
class Struct:
    children: list
    n: int


@dataclass(slots=True)
class Dict:
    indices: np.ndarray  # int64 keys, 0-based
    validity: np.ndarray | None  # bool, or None when every key is valid
    items: object  # block of the dictionary values

    @property
    def n(self) -> int:
        return self.indices.size


def split_validity(block) -> tuple[object, np.ndarray | None]:
    """``(inner block, validity or None)``."""
    if isinstance(block, Nullable):
        inner, v = split_validity(block.inner)
        return inner, block.validity if v is None else (block.validity & v)
    return block, None


def validity_buffer(validity: np.ndarray | None) -> tuple[pa.Buffer | None, int]:
    if validity is None:
        return None, 0
    nulls = int(validity.size - np.count_nonzero(validity))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(validity, bitorder="little")), nulls


def _fixed_width_bits(t: pa.DataType) -> int | None:
    if pa.types.is_fixed_size_binary(t):
        return t.byte_width * 8
    if pa.types.is_boolean(t):
        return None
    try:
        bw = t.bit_width
    except ValueError:
        return None
    return bw if bw and bw % 8 == 0 else None


def to_arrow(block, t: pa.DataType, ctx: DecodeContext, validity: np.ndarray | None = None) -> pa.Array:
    """Build the Arrow array of type ``t`` from a decoded block."""
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == "arrow.json":  # Lance JSON: JSONB documents (lance_gpu.file.jsonb)
            raw = to_arrow(block, pa.large_binary(), ctx, validity)
            return pa.ExtensionArray.from_storage(t, jsonb_to_text(raw, ctx.path).cast(t.storage_type))
        return pa.ExtensionArray.from_storage(t, to_arrow(block, t.storage_type, ctx, validity))
    if isinstance(block, Nullable):
        v = block.validity if validity is None else (validity & block.validity)
        return to_arrow(block.inner, t, ctx, v)
    if isinstance(block, AllNull):
        return pa.nulls(block.n, t)
    if pa.types.is_null(t):
        return pa.nulls(block.n)
    if pa.types.is_dictionary(t):
        return _to_dictionary(block, t, ctx, validity)
    vbuf, nulls = validity_buffer(validity)
    if isinstance(block, Bits):
        if not pa.types.is_boolean(t):
            raise ctx.corrupt(f"1-bit values where the field type is {t}")
        data = pa.py_buffer(np.packbits(block.values, bitorder="little"))
        return pa.Array.from_buffers(t, block.n, [vbuf, data], null_count=nulls)
    if isinstance(block, Fixed):
        n = block.n
        if pa.types.is_fixed_size_list(t):
            dim = t.list_size
            if dim <= 0 or block.bits % dim or (block.bits // dim) % 8:
                raise ctx.corrupt(f"{block.bits}-bit values cannot hold rows of {t}")
            child = to_arrow(Fixed(block.data, block.bits // dim), t.value_type, ctx)
            return pa.Array.from_buffers(t, n, [vbuf], null_count=nulls, children=[child])
        width = _fixed_width_bits(t)
        if width is None or width != block.bits:
            raise ctx.corrupt(f"{block.bits}-bit values where the field type is {t}")
        data = pa.py_buffer(np.ascontiguousarray(block.data))
        return pa.Array.from_buffers(t, n, [vbuf, data], null_count=nulls)
    if isinstance(block, Var):
        n = block.n
        if pa.types.is_string(t) or pa.types.is_binary(t):
            if block.offsets[-1] > _I32_MAX:
                raise ctx.corrupt(f"{int(block.offsets[-1])} bytes of values do not fit the 32-bit offsets of {t}")
            offs = block.offsets.astype(np.int32)
        elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
            offs = block.offsets
        else:
            raise ctx.corrupt(f"variable-width values where the field type is {t}")
        check_values(offs, block.data, is_utf8_type(t), ctx, block.offsets_valid, block.utf8_valid)
        return pa.Array.from_buffers(
            t, n, [vbuf, pa.py_buffer(offs), pa.py_buffer(block.data)], null_count=nulls
        )
    if isinstance(block, FSL):
        if not pa.types.is_fixed_size_list(t) or t.list_size != block.dim:
            raise ctx.corrupt(f"fixed-size lists of {block.dim} values where the field type is {t}")
        child = to_arrow(block.child, t.value_type, ctx)
        if len(child) != block.n * block.dim:
            raise ctx.corrupt("fixed-size list items do not match the row count")
        return pa.Array.from_buffers(t, block.n, [vbuf], null_count=nulls, children=[child])
    if isinstance(block, Struct):
        if not pa.types.is_struct(t) or t.num_fields != len(block.children):
            raise ctx.corrupt(f"a packed struct of {len(block.children)} fields where the field type is {t}")
        children = [to_arrow(c, t.field(i).type, ctx) for i, c in enumerate(block.children)]
        return pa.Array.from_buffers(t, block.n, [vbuf], null_count=nulls, children=children)
    if isinstance(block, Dict):
        raise ctx.corrupt(f"dictionary-encoded values where the field type is {t}")
    raise ctx.corrupt(f"cannot present decoded {type(block).__name__} data as {t}")


def _to_dictionary(block, t: pa.DictionaryType, ctx: DecodeContext, validity: np.ndarray | None) -> pa.Array:
    if not isinstance(block, Dict):
        # Not stored as a dictionary: present the values as one.
        values = to_arrow(block, t.value_type, ctx, validity)
        enc = values.dictionary_encode()
        return pa.DictionaryArray.from_arrays(enc.indices.cast(t.index_type), enc.dictionary)
    items_arr = to_arrow(block.items, t.value_type, ctx)
    keys = block.indices
    valid = block.validity
    if validity is not None:
        valid = validity if valid is None else (valid & validity)
    nitems = len(items_arr)
    check = keys if valid is None else keys[valid]
    if check.size and (int(check.min()) < 0 or int(check.max()) >= nitems):
        raise ctx.corrupt(f"dictionary index out of range ({nitems} items)")
    if items_arr.null_count:
        # pylance marks a key null when it points at a null dictionary item.
        item_valid = np.asarray(items_arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        safe = np.where((keys >= 0) & (keys < nitems), keys, 0)
        kv = item_valid[safe]
        valid = kv if valid is None else (valid & kv)
    index_dtype = t.index_type.to_pandas_dtype()
    idx = keys.astype(index_dtype)
    vbuf, nulls = validity_buffer(valid)
    indices = pa.Array.from_buffers(t.index_type, idx.size, [vbuf, pa.py_buffer(idx)], null_count=nulls)
    return pa.DictionaryArray.from_arrays(indices, items_arr, ordered=t.ordered)
