# SPDX-License-Identifier: Apache-2.0
"""Decoded columns in device memory, and their ways out: cuDF (zero copy), Arrow (a host
copy), CuPy / DLPack (numeric columns).

A :class:`DeviceColumn` has the Arrow layout, with two device-friendly choices:

* validity is a :class:`~lance_gpu.gpu.validity.Validity` (None: no nulls): bitmask words
  with a bit offset (what the level unravel writes for every layer, what combining and
  Arrow uploads give) or one bool byte per slot (gathers of bytes), each made from the
  other once, on demand (see :mod:`lance_gpu.gpu.validity`); a device bool array given to
  the constructor is taken as the bytes; a fixed-size list's item validity
  (``item_validity``) is a Validity of ``length * list_size`` slots the same way, and a
  nested fixed-size list's deeper layers' (``inner_item_validity``) one per layer;
* booleans are one byte per value (cuDF's BOOL8); fixed-size lists are fixed-width values
  (``data`` holds ``length * width`` bytes, booleans one byte per item);
* ``offsets`` (strings, binary, lists, maps) are int64 and may start above 0: they index
  ``data`` (strings) or the child (lists) directly, so a column can be a window into
  buffers shared by every column of a read unit.

Tables of these columns (what a GPU read gives) are :class:`lance_gpu.gpu.device_table.DeviceTable`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

import cuda_kernels as ck
from lance_gpu.errors import GpuUnavailableError, UnsupportedEncodingError
from lance_gpu.file.jsonb import jsonb_to_text
from lance_gpu.gpu import _array
from lance_gpu.gpu._array import DeviceArray
from lance_gpu.gpu.plan import Unsupported, leaf_kind
from lance_gpu.gpu.validity import Validity, and_validity, as_validity


def _storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _is_var(s: pa.DataType) -> bool:
    return (
        pa.types.is_string(s) or pa.types.is_large_string(s) or pa.types.is_binary(s)
        or pa.types.is_large_binary(s) or pa.types.is_string_view(s) or pa.types.is_binary_view(s)
    )


def _is_nested(s: pa.DataType) -> bool:
    return pa.types.is_struct(s) or pa.types.is_list(s) or pa.types.is_large_list(s) or pa.types.is_map(s)


@dataclass(slots=True, eq=False)
class DeviceColumn:
    type: pa.DataType
    length: int
    #: None: no nulls (a device bool array given here is taken as the bytes of a Validity)
    validity: Validity | None = None
    data: DeviceArray = None  # device uint8 (None for struct and list columns)
    offsets: DeviceArray = None  # device int64[length + 1] (None for fixed-width and struct columns)
    children: list[DeviceColumn] = field(default_factory=list)
    _nulls: int | None = None
    #: ``(offsets[0], offsets[length])`` where known on the host (from the read's one
    #: readback), so that handing the column out reads nothing back; None: not known
    span: tuple[int, int] | None = None
    #: a fixed-size list's item validity, ``length * list_size`` slots (one layer of items;
    #: words from an Arrow upload, bytes from a gather; a device bool array given here is
    #: taken as the bytes), when an item is null; None: every item valid
    item_validity: Validity | None = None
    #: a nested fixed-size list's item validity below the first layer, one per layer (the
    #: items of the lists ``item_validity`` covers, and so on down): layer ``k`` over
    #: ``length * list_size * ...`` slots (the list sizes of the layers down to it), None where
    #: every item of that layer is valid; empty: none below the first (every item valid)
    inner_item_validity: tuple[Validity | None, ...] = ()
    #: ``(offsets, row)``: this column's offsets also written in cuDF's layout by the decode,
    #: as rows ``[row, row + length]`` of ``offsets`` (int32 from 0), the offsets of the unit's
    #: output column it is a fragment's part of (:class:`lance_gpu.gpu.decode.CudfOffsets`);
    #: what ``to_cudf`` of a one-unit read hands out.  None: not written (slices, gathers)
    cudf_offsets: tuple[DeviceArray, int] | None = None
    #: a struct's: every child with a validity is null where this struct is null (its mask is
    #: already AND-ed with the struct's: what ``to_cudf`` hands out).  Lance's definition
    #: levels give that -- a struct's null is a null of every layer below it, so the level
    #: unravel's child layers hold it (set by :func:`lance_gpu.gpu.assemble.build_fields`);
    #: slices and takes keep it.  False: not known (Arrow uploads), combining AND-s the masks
    children_hold_nulls: bool = False

    def __post_init__(self) -> None:
        self.validity = as_validity(self.validity, self.length)
        if self.item_validity is not None and not isinstance(self.item_validity, Validity):
            self.item_validity = as_validity(self.item_validity, self.length * _storage(self.type).list_size)

    # -- basics -----------------------------------------------------------------------------

    @property
    def null_count(self) -> int:
        if self._nulls is None:
            self._nulls = 0 if self.validity is None else self.validity.null_count()
        return self._nulls

    @property
    def width(self) -> int:
        """Bytes per value of a fixed-width (or boolean / fixed-size list) column."""
        return leaf_kind(self.type)[1]

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"DeviceColumn({self.type}, length={self.length}, nulls={self.null_count})"

    # -- row selection ----------------------------------------------------------------------

    def slice(self, lo: int, hi: int) -> DeviceColumn:
        """Rows ``[lo, hi)`` as views of the same buffers (no copy, no launch): offsets keep
        indexing the whole ``data`` / child, as a column's offsets may."""
        n = hi - lo
        if (lo, hi) == (0, self.length):
            return self
        s = _storage(self.type)
        validity = None if self.validity is None else self.validity.slice(lo, hi)
        nulls = 0 if validity is None else None
        if pa.types.is_struct(s):
            return DeviceColumn(self.type, n, validity, children=[c.slice(lo, hi) for c in self.children], _nulls=nulls,
                                children_hold_nulls=self.children_hold_nulls)
        if _is_var(s) or _is_nested(s):
            return DeviceColumn(self.type, n, validity, self.data, self.offsets[lo : hi + 1], self.children, _nulls=nulls)
        w = self.width
        items = None
        if self.item_validity is not None:
            items = self.item_validity.slice(lo * s.list_size, hi * s.list_size)
        inner = tuple(None if v is None else v.slice(lo * per, hi * per)
                      for v, per in zip(self.inner_item_validity, fsl_layer_items(s)[1:], strict=False))
        return DeviceColumn(self.type, n, validity, self.data[lo * w : hi * w], _nulls=nulls, item_validity=items,
                            inner_item_validity=inner)

    def field(self, index: int) -> DeviceColumn:
        """Child ``index`` of a struct column, null where the struct is null (as
        ``pyarrow.compute.struct_field``)."""
        child = self.children[index]
        validity = and_validity(self.validity, child.validity)
        return DeviceColumn(child.type, child.length, validity, child.data, child.offsets, child.children, span=child.span)

    # -- to the host --------------------------------------------------------------------------

    def to_arrow(self) -> pa.Array:
        """A host (pyarrow) copy; validity and booleans become bitmaps on the device first."""
        t = self.type
        s = _storage(t)
        n = self.length
        mask = self.validity.host_bitmap() if self.validity is not None and self.null_count else None
        if pa.types.is_struct(s):
            children = [c.to_arrow() for c in self.children]
            arr = pa.Array.from_buffers(s, n, [mask], children=children)
        elif pa.types.is_map(s) or pa.types.is_list(s) or pa.types.is_large_list(s):
            offs = _array.to_host(self.offsets).astype(np.int64)
            child = self.children[0].to_arrow()
            if pa.types.is_large_list(s):
                off_buf = pa.py_buffer(offs)
            else:
                if offs.size and offs[-1] > np.iinfo(np.int32).max:
                    raise UnsupportedEncodingError("a list column of more than 2^31 items needs large_list")
                off_buf = pa.py_buffer(offs.astype(np.int32))
            arr = pa.Array.from_buffers(s, n, [mask, off_buf], children=[child])
        elif _is_var(s):
            offs = _array.to_host(self.offsets).astype(np.int64)
            base, end = (int(offs[0]), int(offs[-1])) if offs.size else (0, 0)
            data = _array.to_host(self.data[base:end]) if end > base else np.zeros(0, np.uint8)
            offs = offs - base
            if pa.types.is_string_view(s) or pa.types.is_binary_view(s):
                big = pa.large_string() if pa.types.is_string_view(s) else pa.large_binary()
                arr = pa.Array.from_buffers(big, n, [mask, pa.py_buffer(offs), pa.py_buffer(data)]).cast(s)
            else:
                if pa.types.is_string(s) or pa.types.is_binary(s):
                    if offs.size and offs[-1] > np.iinfo(np.int32).max:
                        raise UnsupportedEncodingError("more than 2 GiB in one string column chunk")
                    offs = offs.astype(np.int32)
                arr = pa.Array.from_buffers(s, n, [mask, pa.py_buffer(offs), pa.py_buffer(data)])
        else:
            arr = _fixed_to_arrow(s, n, self.data, mask, (self.item_validity, *self.inner_item_validity))
        if getattr(t, "extension_name", None) == "arrow.json":
            # Lance JSON: the device holds the stored JSONB documents; the text is made here, as
            # the CPU reader makes it (lance_gpu.file.arrow.values_to_arrow)
            arr = jsonb_to_text(arr.cast(pa.large_binary()), "<device column>").cast(s)
        return arr if s is t else pa.ExtensionArray.from_storage(t, arr)

    def to_cupy(self, *, allow_nulls: bool = False):
        """The values of a numeric (fixed-width) column as a CuPy array, without a copy.

        Fixed-size lists give a ``[length, dim]`` array; booleans a bool array; temporal and
        decimal types their integer storage.  Null slots hold unspecified values, so columns
        with nulls are refused unless ``allow_nulls``.
        """
        s = _storage(self.type)
        if _is_var(s) or _is_nested(s):
            msg = f"to_cupy needs a fixed-width column, not {self.type}"
            raise TypeError(msg)
        if self.null_count and not allow_nulls:
            msg = f"column of {self.type} has {self.null_count} nulls (pass allow_nulls=True to get the raw values)"
            raise ValueError(msg)
        dtype, shape = _numpy_layout(s, self.length)
        raw = self.data[: int(np.prod(shape)) * dtype.itemsize]
        return _array.to_cupy(raw.view(dtype)).reshape(shape)

    def __dlpack__(self, *args, **kwargs):
        return self.to_cupy().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.to_cupy().__dlpack_device__()

    # -- from the host ------------------------------------------------------------------------

    @classmethod
    def from_arrow(cls, arr: pa.Array | pa.ChunkedArray) -> DeviceColumn:
        """Upload a pyarrow array (used for the fields the CPU reader decoded)."""
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
        t = arr.type
        s = _storage(t)
        if isinstance(arr, pa.ExtensionArray):
            arr = arr.storage
        n = len(arr)
        validity = Validity.of_arrow(arr)
        if pa.types.is_struct(s):
            children = [cls.from_arrow(arr.field(i)) for i in range(s.num_fields)]
            return cls(t, n, validity, children=children)
        if pa.types.is_list(s) or pa.types.is_large_list(s) or pa.types.is_map(s):
            offs = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), np.int64)
            child = cls.from_arrow(arr.values)
            return cls(t, n, validity, offsets=_array.upload(offs), children=[child])
        if pa.types.is_string_view(s) or pa.types.is_binary_view(s):
            big = pa.large_string() if pa.types.is_string_view(s) else pa.large_binary()
            col = cls.from_arrow(arr.cast(big))
            return cls(t, n, col.validity, col.data, col.offsets)
        if _is_var(s):
            # from the buffers: pyarrow 26's string and binary arrays have no ``.offsets``
            large = pa.types.is_large_string(s) or pa.types.is_large_binary(s)
            offset_buffer = arr.buffers()[1]
            if n and offset_buffer is not None:
                offs = np.frombuffer(offset_buffer, np.int64 if large else np.int32, count=n + 1, offset=arr.offset * (8 if large else 4)).astype(np.int64)
            else:
                offs = np.zeros(n + 1, np.int64)
            base, end = (int(offs[0]), int(offs[-1])) if offs.size else (0, 0)
            buf = arr.buffers()[2]
            data = np.frombuffer(buf, np.uint8)[base:end] if buf is not None else np.zeros(0, np.uint8)
            return cls(t, n, validity, _array.upload(data), _array.upload(offs - base))
        try:
            kind, w = leaf_kind(t)
        except Unsupported as exc:
            raise TypeError(f"cannot upload a column of {t}: {exc}") from exc
        layers: list[Validity | None] = []  # each fixed-size list layer's items' (words: no launch)
        inner, at, count = arr, arr.offset, n
        while pa.types.is_fixed_size_list(_storage(inner.type)):
            size = _storage(inner.type).list_size
            inner = inner.storage if isinstance(inner, pa.ExtensionArray) else inner
            inner, at, count = inner.values, at * size, count * size
            layers.append(Validity.of_arrow(inner.slice(at, count)))
        return cls(t, n, validity, _array.upload(_fixed_bytes(s, arr, kind, w)), item_validity=layers[0] if layers else None,
                   inner_item_validity=tuple(layers[1:]))


# --------------------------------------------------------------------------------------------
# Fixed width <-> Arrow


def _host_bitmap(validity) -> pa.Buffer:
    return pa.py_buffer(_array.to_host(ck.validity_to_bitmap_gpu(validity)))


def fsl_layer_items(s: pa.DataType) -> list[int]:
    """Items per value of each fixed-size list layer of ``s``, outer first (``[2, 6]`` for
    lists of 2 lists of 3)."""
    out, n = [], 1
    while pa.types.is_fixed_size_list(s):
        n *= s.list_size
        out.append(n)
        s = _storage(s.value_type)
    return out


def _fixed_to_arrow(s: pa.DataType, n: int, data, mask: pa.Buffer | None, items: tuple[Validity | None, ...] = ()) -> pa.Array:
    """An Arrow array of ``n`` fixed-width values of ``s`` (``data``, ``mask``); a
    fixed-size list's items' validity per layer in ``items``, outer first."""
    if pa.types.is_fixed_size_list(s):
        first = items[0] if items else None
        inner_mask = first.host_bitmap() if first is not None and n else None
        inner = _fixed_to_arrow(s.value_type, n * s.list_size, data, inner_mask, items[1:])
        return pa.Array.from_buffers(s, n, [mask], children=[inner])
    if pa.types.is_boolean(s):
        bits = _host_bitmap(data[:n].view(np.bool_)) if n else pa.py_buffer(b"")
        return pa.Array.from_buffers(s, n, [mask, bits])
    w = s.bit_width // 8
    raw = _array.to_host(data[: n * w]) if n else np.zeros(0, np.uint8)
    return pa.Array.from_buffers(s, n, [mask, pa.py_buffer(raw)])


def _fixed_bytes(s: pa.DataType, arr: pa.Array, kind: str, w: int) -> np.ndarray:
    """The ``len(arr) * w`` value bytes of a fixed-width (or bool / fixed-size list) array."""
    n = len(arr)
    if pa.types.is_fixed_size_list(s):
        flat = arr.values.slice(arr.offset * s.list_size, n * s.list_size)
        return _fixed_bytes(s.value_type, flat, kind, w // s.list_size if s.list_size else 0)
    if pa.types.is_boolean(s):
        buf = arr.buffers()[1]
        bits = np.unpackbits(np.frombuffer(buf, np.uint8), bitorder="little") if buf is not None else np.zeros(0, np.uint8)
        return np.ascontiguousarray(bits[arr.offset : arr.offset + n])
    buf = arr.buffers()[1]
    raw = np.frombuffer(buf, np.uint8) if buf is not None else np.zeros(0, np.uint8)
    return np.ascontiguousarray(raw[arr.offset * w : (arr.offset + n) * w])


def _numpy_layout(s: pa.DataType, n: int) -> tuple[np.dtype, tuple[int, ...]]:
    if pa.types.is_fixed_size_list(s):
        dt, shape = _numpy_layout(s.value_type, n * s.list_size)
        return dt, (n, s.list_size, *shape[1:])
    if pa.types.is_boolean(s):
        return np.dtype(np.bool_), (n,)
    if pa.types.is_floating(s):
        return np.dtype(s.to_pandas_dtype()), (n,)
    if pa.types.is_integer(s):
        return np.dtype(s.to_pandas_dtype()), (n,)
    w = s.bit_width // 8
    if w in (1, 2, 4, 8):
        return np.dtype(f"<i{w}"), (n,)
    return np.dtype(np.uint8), (n, w)


def require_cupy() -> None:
    if _array.cupy() is None:
        msg = "this needs CuPy and a CUDA device"
        raise GpuUnavailableError(msg)
