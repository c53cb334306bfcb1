# SPDX-License-Identifier: Apache-2.0
"""Data in device memory as writer input: cuDF frames, lance-gpu device tables and CUDA
arrays become :class:`DeviceBatch` es of :class:`~lance_gpu.gpu.columns.DeviceColumn` s.

Accepted (:func:`is_device_input`):

* a :class:`~lance_gpu.gpu.device_table.DeviceTable` (what the GPU reader gives; its host
  columns are uploaded);
* a ``dict`` of columns, each a :class:`DeviceColumn`, an array with
  ``__cuda_array_interface__`` (numba device arrays, CuPy, torch CUDA tensors ...) or a
  DLPack producer in CUDA memory (``__dlpack__`` / ``__dlpack_device__`` saying CUDA or
  CUDA managed memory: JAX, TensorFlow, ...; taken through ``cupy.from_dlpack``, no copy):
  1-d numeric or bool arrays are columns of that type, 2-d ``(n, dim)`` arrays fixed-size
  lists (embeddings).  DLPack producers in host memory are host data: the CPU writer takes
  them (see :func:`host_dlpack_column`);
* a ``cudf.DataFrame`` (recognised by its module, cuDF is never imported here), through a
  thin adapter onto device columns that uses only cuDF's public zero-copy view: per column
  ``frame[name]``, its ``.dtype`` (the Arrow type: ``to_arrow()`` of list / struct /
  decimal dtypes, else the NumPy dtype) and ``Series.to_pylibcudf()`` -- a
  ``pylibcudf.Column`` (``offset()``, ``size()``, ``null_count()``, ``data()``,
  ``null_mask()``, ``children()``, ``type().id()``), whose buffers are read through
  ``__cuda_array_interface__`` or the Span protocol (``.ptr``, ``.size``); see
  :func:`_plc_column` for the layouts.  Numbers, booleans, temporal types, decimals (32-
  and 64-bit ones widened to decimal128 on the device: Lance has no narrower decimals),
  strings, lists and structs, nested, sliced (a column's offset) or not, become device
  columns without a host copy; category and interval columns (and every column of a cuDF
  without ``Series.to_pylibcudf``, before 24.12) go through cuDF's ``to_arrow()``.

Columns keep the device layout of :class:`DeviceColumn`: validity a
:class:`~lance_gpu.gpu.validity.Validity` (a cuDF null mask's words as they are),
booleans one byte per value, int64 offsets that index ``data`` directly.  Nothing here
copies values to the host.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from cuda_kernels import _device as kernel_device
from lance_gpu import _device
from lance_gpu.errors import GpuUnavailableError, InvalidArgumentError, SchemaMismatchError, UnsupportedFeatureError
from lance_gpu.file.writer._jsonb import text_to_jsonb
from lance_gpu.gpu import _array
from lance_gpu.gpu.columns import DeviceColumn
from lance_gpu.gpu.device_table import DeviceTable
from lance_gpu.gpu.validity import Validity

__all__ = [
    "DLPACK_CPU",
    "DLPACK_CUDA",
    "DeviceBatch",
    "column_nbytes",
    "concat_columns",
    "device_batches",
    "device_stream",
    "dlpack_device_type",
    "host_dlpack_column",
    "is_device_input",
    "offset_ends",
    "slice_column",
    "upload_arrow",
]


def _has_cai(x: object) -> bool:
    """A CUDA array (the simulator's device arrays say so with ``__cuda_ndarray__``)."""
    return hasattr(x, "__cuda_array_interface__") or bool(getattr(x, "__cuda_ndarray__", False))


#: DLPack device types (``DLDeviceType``): host memory ...
DLPACK_CPU, DLPACK_CUDA_HOST = 1, 3
#: ... and device memory
DLPACK_CUDA, DLPACK_CUDA_MANAGED = 2, 13


def dlpack_device_type(x: object) -> int | None:
    """The DLPack device type ``x`` reports (``__dlpack_device__()[0]``), None when ``x`` is
    no DLPack producer or is a NumPy / Arrow array (host columns the writers take as they
    are)."""
    if isinstance(x, (np.ndarray, pa.Array, pa.ChunkedArray)) or not hasattr(x, "__dlpack__"):
        return None
    get = getattr(x, "__dlpack_device__", None)
    if get is None:
        return None
    return int(get()[0])


def _is_cuda_dlpack(x: object) -> bool:
    return not _has_cai(x) and dlpack_device_type(x) in (DLPACK_CUDA, DLPACK_CUDA_MANAGED)


class _HostTensor:
    """A DLPack producer seen as host memory: under the CUDA simulator, whose device memory
    is host memory, a CUDA producer's buffer is read as it is."""

    def __init__(self, tensor: object) -> None:
        self._tensor = tensor

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_CPU, 0)

    def __dlpack__(self, **_kwargs):
        return self._tensor.__dlpack__()  # type: ignore[attr-defined]


def _from_cuda_dlpack(name: str, x: object):
    """A CUDA DLPack producer as a device array (``cupy.from_dlpack``: no copy)."""
    cp = _array.cupy()
    if cp is not None:
        return cp.from_dlpack(x)
    if kernel_device.is_simulator():
        return _array.upload(np.ascontiguousarray(np.from_dlpack(_HostTensor(x))))
    raise GpuUnavailableError(f"column {name!r}: reading a CUDA DLPack tensor needs CuPy")


def host_dlpack_column(name: str, x: Any) -> Any:
    """A column of a host ``dict``: a DLPack producer in host memory (a CPU torch tensor,
    ...) as Arrow -- 1-d as its values, 2-d ``(n, dim)`` as fixed-size lists, as device
    arrays are taken -- anything else as it is.  A producer in device memory next to host
    columns raises :class:`InvalidArgumentError`."""
    kind = dlpack_device_type(x)
    if kind is None or _has_cai(x):
        return x
    if kind in (DLPACK_CUDA, DLPACK_CUDA_MANAGED):
        raise InvalidArgumentError(f"column {name!r} is in device memory, other columns in host memory: pass every column on one side")
    arr = np.from_dlpack(x)
    if arr.ndim == 1:
        return pa.array(arr)
    if arr.ndim == 2:
        flat = np.ascontiguousarray(arr).reshape(-1)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat), int(arr.shape[1]))
    raise UnsupportedFeatureError(f"column {name!r}: arrays of {arr.ndim} dimensions cannot be written")


def _is_cudf_frame(data: object) -> bool:
    return type(data).__module__.split(".", 1)[0] == "cudf" and type(data).__name__ == "DataFrame"


def is_device_input(data: object) -> bool:
    """Is ``data`` one of the device inputs this module takes?"""
    if isinstance(data, (DeviceTable, DeviceColumn)) or _is_cudf_frame(data):
        return True
    return isinstance(data, dict) and bool(data) and all(
        isinstance(v, DeviceColumn) or _has_cai(v) or _is_cuda_dlpack(v) for v in data.values()
    )


class DeviceBatch:
    """Rows of device columns with their Arrow schema: what the writer takes in place of a
    ``pyarrow.RecordBatch`` (``num_rows``, ``num_columns``, ``column(i)``, ``slice``)."""

    def __init__(self, schema: pa.Schema, columns: list[DeviceColumn | pa.Array], num_rows: int) -> None:
        self.schema = schema
        self.columns = columns
        self.num_rows = int(num_rows)

    @property
    def num_columns(self) -> int:
        return len(self.columns)

    def column(self, i: int) -> DeviceColumn | pa.Array:
        """Column ``i``: a device column, or a host Arrow array of a kind no device column
        holds (an Arrow dictionary column of a ``DeviceTable``: the CPU encoder writes it)."""
        return self.columns[i]

    def slice(self, offset: int = 0, length: int | None = None) -> DeviceBatch:
        offset = min(int(offset), self.num_rows)
        n = self.num_rows - offset if length is None else min(int(length), self.num_rows - offset)
        cols = [c.slice(offset, n) if isinstance(c, pa.Array) else slice_column(c, offset, n) for c in self.columns]
        return DeviceBatch(self.schema, cols, n)

    def select(self, order: list[int], target: pa.Schema) -> DeviceBatch:
        """The columns in ``order`` as the fields of ``target`` (an append whose columns
        come in another order); device columns are not cast, so the types must match."""
        cols = []
        for i, f in zip(order, target, strict=True):
            if i < 0:
                raise SchemaMismatchError(f"device data has no column {f.name!r} (device appends must give every column)")
            have = self.schema.field(i).type
            if not have.equals(f.type):
                raise SchemaMismatchError(f"column {f.name!r} is {have} in the device data, {f.type} in the dataset")
            cols.append(self.columns[i])
        return DeviceBatch(target, cols, self.num_rows)

    def to_arrow(self) -> pa.RecordBatch:
        """A host copy (for writers without a device encoder: 2.0 files, other operations)."""
        return pa.RecordBatch.from_arrays([c if isinstance(c, pa.Array) else c.to_arrow() for c in self.columns], schema=self.schema)


# --------------------------------------------------------------------------------------------
# adapters


def _column_of_array(name: str, arr: Any) -> DeviceColumn:
    if _is_cuda_dlpack(arr):
        arr = _from_cuda_dlpack(name, arr)
    dev = _array.as_device(arr)
    dt = np.dtype(dev.dtype)
    if dev.ndim not in (1, 2):
        raise UnsupportedFeatureError(f"column {name!r}: device arrays of {dev.ndim} dimensions cannot be written")
    try:
        item = pa.bool_() if dt == np.bool_ else pa.from_numpy_dtype(dt)
    except (pa.ArrowNotImplementedError, NotImplementedError, TypeError) as exc:
        raise UnsupportedFeatureError(f"column {name!r}: cannot write device arrays of dtype {dt}") from exc
    if not (pa.types.is_integer(item) or pa.types.is_floating(item) or pa.types.is_boolean(item) or pa.types.is_temporal(item)):
        raise UnsupportedFeatureError(f"column {name!r}: cannot write device arrays of dtype {dt}")
    n = int(dev.shape[0])
    flat = dev.reshape(dev.size) if dev.ndim == 2 else dev
    if not flat.is_c_contiguous():
        raise UnsupportedFeatureError(f"column {name!r}: device arrays must be C-contiguous")
    data = flat.view(np.uint8)
    t = pa.list_(item, int(dev.shape[1])) if dev.ndim == 2 else item
    return DeviceColumn(t, n, None, data)


def _cudf_arrow_type(dtype: Any) -> pa.DataType | None:
    """The Arrow type of a cuDF column's dtype (what ``Series.to_arrow()`` gives), None for
    the kinds taken through ``to_arrow()`` (categories: a dictionary column, kept on the
    host; intervals)."""
    arrow = getattr(dtype, "pyarrow_dtype", None)  # pandas.ArrowDtype
    if arrow is None:
        kind = str(getattr(dtype, "name", dtype))
        if kind in ("category", "interval") or kind.startswith("interval"):
            return None
        to_arrow = getattr(dtype, "to_arrow", None)  # cudf.ListDtype / StructDtype / Decimal*Dtype
        if to_arrow is not None:
            arrow = to_arrow()
        elif kind in ("object", "str", "string"):
            arrow = pa.string()
        else:
            try:
                npd = np.dtype(dtype)
                arrow = pa.bool_() if npd == np.bool_ else pa.from_numpy_dtype(npd)
            except (TypeError, pa.ArrowNotImplementedError, NotImplementedError):
                return None
    return None if pa.types.is_dictionary(arrow) else arrow


def _lance_type(t: pa.DataType) -> pa.DataType:
    """``t`` with cuDF's 32- and 64-bit decimals as decimal128 of the same precision and
    scale (Lance stores 128- and 256-bit decimals only; pylance refuses the narrow ones):
    the type the adapter's columns have."""
    if pa.types.is_decimal32(t) or pa.types.is_decimal64(t):
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_lance_type(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_lance_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_lance_type(t.field(i).type)) for i in range(t.num_fields)])
    return t


def _cudf_column(name: str, series: Any) -> DeviceColumn | pa.Array:
    """One cuDF column as a device column, from the zero-copy pylibcudf view of it
    (``Series.to_pylibcudf()``, see :func:`_plc_column`); its Arrow type from the cuDF dtype.
    Category and interval columns go through cuDF's ``to_arrow()`` (a category column is a
    dictionary column, which the CPU encoder writes)."""
    arrow = _cudf_arrow_type(series.dtype)
    to_pylibcudf = getattr(series, "to_pylibcudf", None)  # cuDF 24.12 on
    if arrow is None or to_pylibcudf is None:
        return upload_arrow(series.to_arrow(), name)
    col, _metadata = to_pylibcudf()
    return _plc_column(name, col, arrow, 0, int(col.size()))


class _CudaBytes:
    """Device memory given by pointer and size (the Span protocol of pylibcudf:
    ``.ptr`` / ``.size`` in bytes; cuDF buffers' ``get_ptr(mode=...)``) as
    ``__cuda_array_interface__`` bytes."""

    def __init__(self, ptr: int, size: int) -> None:
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (ptr, False), "version": 3}

    @staticmethod
    def of(buf: Any) -> Any:
        if _has_cai(buf):
            return buf
        get_ptr = getattr(buf, "get_ptr", None)
        ptr = get_ptr(mode="read") if get_ptr is not None else buf.ptr
        return _CudaBytes(int(ptr), int(buf.size))


def _span_bytes(span: Any):
    """A pylibcudf span (``gpumemoryview``, cuDF ``Buffer``, ``rmm.DeviceBuffer``) as a
    device ``uint8`` array over the same memory (no copy)."""
    dev = _array.as_device(_CudaBytes.of(span))
    if dev.ndim != 1:
        dev = dev.reshape(dev.size)
    return dev.view(np.uint8)


def _plc_validity(col: Any, first: int, length: int) -> Validity | None:
    """The validity of rows ``first : first + length`` of a pylibcudf column's null mask
    (libcudf's: Arrow's LSB-first bits in uint32 words, bit ``i`` for row ``i`` of the
    unsliced buffers), None when it has no mask: the mask's words themselves (no copy, no
    launch), or, for a mask whose size is not whole words, its bytes (one launch)."""
    from cuda_kernels.levels import bitmap_to_validity_gpu

    mask = col.null_mask()
    if mask is None:
        return None
    raw = _span_bytes(mask)
    if int(raw.shape[0]) % 4 == 0 and int(raw.shape[0]) * 8 >= first + length:
        return Validity.of_words(raw.view(np.uint32), first, length)
    return Validity.of_bytes(_array.as_device(bitmap_to_validity_gpu(raw, length, first)), length)


def _plc_offsets(child: Any, first: int, length: int):
    """Offsets ``first : first + length + 1`` of an offsets child (INT32, or INT64 for
    cuDF's large strings), as device int64 (int32 widened on the device)."""
    wide = getattr(child.type().id(), "name", "") == "INT64"
    start = int(child.offset()) + first
    raw = _span_bytes(child.data()).view(np.int64 if wide else np.int32)[start : start + length + 1]
    return raw if wide else _widen_offsets(raw)


def _plc_column(name: str, col: Any, t: pa.DataType, extra: int, length: int) -> DeviceColumn:
    """Rows ``extra : extra + length`` of a pylibcudf column (those of its view: libcudf
    columns carry an ``offset()`` into unsliced buffers) as a device column, sharing its
    buffers: libcudf's layout is Arrow's (the validity: the mask's words at the rows' bit
    offset) but for booleans (BOOL8: one byte a value, as device columns hold them).

    * fixed width: ``data()`` holds the values (decimal32 / decimal64 are widened to
      decimal128 on the device, see :func:`_lance_type`);
    * strings: ``data()`` holds the characters, child 0 the offsets (absolute into the
      characters, ``size + offset + 1`` of them; no child and no data when empty);
    * lists: child 0 the offsets, child 1 the items (their own view, which the offsets
      index);
    * structs: one child per field, whose rows are the parent's: the parent's offset adds
      to each child's.

    ``t`` is the cuDF column's Arrow type; a layout that does not match it raises
    :class:`UnsupportedFeatureError`."""
    first = int(col.offset()) + extra
    nulls = int(col.null_count()) if (extra == 0 and length == int(col.size())) else None
    valid = None if nulls == 0 else _plc_validity(col, first, length)  # cuDF keeps masks without nulls
    lance_t = _lance_type(t)
    kids = list(col.children()) if col.num_children() else []

    def column(**kwargs: Any) -> DeviceColumn:
        out = DeviceColumn(lance_t, length, valid, **kwargs)
        if nulls is not None:
            out._nulls = 0 if valid is None else nulls
        return out

    if pa.types.is_struct(t):
        if len(kids) != t.num_fields:
            raise UnsupportedFeatureError(f"column {name!r}: a struct of {t.num_fields} fields with {len(kids)} children")
        return column(children=[_plc_column(name, k, t.field(i).type, first, length) for i, k in enumerate(kids)])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if len(kids) != 2:
            raise UnsupportedFeatureError(f"column {name!r}: a list column with {len(kids)} children")
        items = _plc_column(name, kids[1], t.value_type, 0, int(kids[1].size()))
        return column(offsets=_plc_offsets(kids[0], first, length), children=[items])
    if _is_variable(t):
        if not kids:  # an empty (or all-null, all-empty) column: no offsets, no characters
            return column(data=_array.zeros(0, np.uint8), offsets=_array.zeros(length + 1, np.int64), span=(0, 0))
        data = col.data()
        chars = _span_bytes(data) if data is not None else _array.zeros(0, np.uint8)
        return column(data=chars, offsets=_plc_offsets(kids[0], first, length))
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t) or pa.types.is_decimal(t)):
        raise UnsupportedFeatureError(f"column {name!r}: cannot write cuDF columns of type {t}")
    width = 1 if pa.types.is_boolean(t) else t.bit_width // 8
    raw = col.data()
    values = _span_bytes(raw)[first * width : (first + length) * width] if raw is not None else _array.zeros(length * width, np.uint8)
    if pa.types.is_decimal32(t) or pa.types.is_decimal64(t):
        from cuda_kernels.encode import widen_decimal_to_128_gpu

        values = _array.as_device(widen_decimal_to_128_gpu(values.view(np.int32 if width == 4 else np.int64)))
    return column(data=values)


def upload_arrow(arr: pa.Array | pa.ChunkedArray, name: str = "<device column>") -> DeviceColumn | pa.Array:
    """A host Arrow array as a device column (for host columns of a ``DeviceTable`` and the
    cuDF types without a buffer adapter): strings, binaries, lists and structs here, the
    fixed-width rest through :meth:`DeviceColumn.from_arrow`.  ``arrow.json`` text becomes
    the JSONB documents Lance stores (what a device JSON column holds, as the GPU reader
    gives it; text that is not JSON raises :class:`~lance_gpu.errors.InvalidJsonError`
    naming ``name``).  An Arrow dictionary column stays on the host as it is (no device
    column holds one; the CPU encoder writes it: its pages are the dictionary's); one nested
    in a struct or list raises :class:`UnsupportedFeatureError`."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    if pa.types.is_dictionary(_storage(arr.type)):
        return arr
    return _upload(arr, name)


def _upload(arr: pa.Array, name: str) -> DeviceColumn:
    if pa.types.is_dictionary(_storage(arr.type)):
        raise UnsupportedFeatureError(f"column {name!r}: Arrow dictionary arrays inside structs or lists cannot be device data")
    t = arr.type
    if getattr(t, "extension_name", None) == "arrow.json" and isinstance(arr, pa.ExtensionArray):

        docs = _upload(text_to_jsonb(arr.storage, name), name)
        return DeviceColumn(t, docs.length, docs.validity, docs.data, docs.offsets, span=docs.span)
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    s = storage.type
    n = len(storage)
    valid = None
    if storage.null_count and not pa.types.is_null(s):
        valid = _array.upload(storage.is_valid().to_numpy(zero_copy_only=False))
    if _is_variable(s):
        large = pa.types.is_large_string(s) or pa.types.is_large_binary(s)
        odt = np.int64 if large else np.int32
        bufs = storage.buffers()
        offs = np.frombuffer(bufs[1], odt)[storage.offset : storage.offset + n + 1].astype(np.int64) if n else np.zeros(1, np.int64)
        data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
        return DeviceColumn(t, n, valid, _array.upload(data), _array.upload(offs), span=(int(offs[0]), int(offs[-1])))
    if pa.types.is_list(s) or pa.types.is_large_list(s):
        offs = np.asarray(storage.offsets.to_numpy(zero_copy_only=False), np.int64)
        return DeviceColumn(t, n, valid, offsets=_array.upload(offs), children=[_upload(storage.values, name)])
    if pa.types.is_struct(s):
        return DeviceColumn(t, n, valid, children=[_upload(storage.field(i), name) for i in range(s.num_fields)])
    if pa.types.is_fixed_size_list(s) and pa.types.is_fixed_size_list(s.value_type):
        inner = storage
        while pa.types.is_fixed_size_list(inner.type):
            inner = inner.flatten()  # the items of the valid lists
            if inner.null_count:
                raise UnsupportedFeatureError(
                    f"column {name!r}: device columns hold the item validity of one layer of fixed-size lists; "
                    "write nested fixed-size lists with null items from host Arrow"
                )
    return DeviceColumn.from_arrow(arr)


def _widen_offsets(offs):
    from cuda_kernels.encode import widen_to_int64_gpu

    return widen_to_int64_gpu(offs)


def _check_lengths(names: list[str], cols: list[DeviceColumn]) -> int:
    lengths = {len(c) for c in cols}
    if len(lengths) > 1:
        desc = ", ".join(f"{n!r}: {len(c)}" for n, c in zip(names, cols, strict=True))
        raise InvalidArgumentError(f"device columns of different lengths ({desc})")
    return lengths.pop() if lengths else 0


def device_batches(data: object, schema: pa.Schema | None) -> tuple[pa.Schema, Iterator[DeviceBatch]]:
    """The Arrow schema of the device input ``data`` and its rows as one :class:`DeviceBatch`
    (raises :class:`GpuUnavailableError` when no GPU is usable)."""
    reason = _device.gpu_unusable_reason()
    if reason is not None:
        raise GpuUnavailableError(f"writing data held in device memory needs a usable GPU: {reason}")
    if isinstance(data, DeviceTable):
        names = list(data.names)
        cols = [c if isinstance(c, DeviceColumn) else upload_arrow(c, nm) for nm, c in zip(names, data.columns, strict=True)]
    elif _is_cudf_frame(data):
        names = [str(c) for c in data.columns]  # type: ignore[attr-defined]
        cols = [_cudf_column(nm, data[nm]) for nm in names]  # type: ignore[index]
    elif isinstance(data, DeviceColumn):
        raise TypeError("a DeviceColumn is one column: pass {name: column} to write it")
    else:
        assert isinstance(data, dict)
        names = [str(k) for k in data]
        cols = [v if isinstance(v, DeviceColumn) else _column_of_array(str(k), v) for k, v in data.items()]
    n = _check_lengths(names, cols)
    own = pa.schema([pa.field(nm, c.type) for nm, c in zip(names, cols, strict=True)])
    if schema is not None:
        if not _same_types(schema, own):
            raise SchemaMismatchError(f"device data has schema {own}, not the given {schema} (device columns are not cast)")
        own = schema
    return own, iter([DeviceBatch(own, cols, n)])


def device_stream(first: object, rest: Iterator[Any], schema: pa.Schema | None) -> tuple[pa.Schema, Iterator[DeviceBatch]]:
    """A stream whose items are device data (:class:`DeviceBatch` es or anything
    :func:`device_batches` takes): its schema (``schema``, else the first item's) and its
    batches, each checked against it (device columns are not cast: another type raises
    :class:`SchemaMismatchError`)."""

    def batches_of(item: object) -> Iterator[DeviceBatch]:
        if isinstance(item, DeviceBatch):
            if schema_ is not None and not _same_types(item.schema, schema_):
                raise SchemaMismatchError(f"device batch has schema {item.schema}, not {schema_} (device columns are not cast)")
            yield item if schema_ is None else DeviceBatch(schema_, item.columns, item.num_rows)
            return
        if not is_device_input(item):
            raise TypeError(f"expected device data items (a stream that began with device data), got {type(item).__name__}")
        yield from device_batches(item, schema_)[1]

    schema_ = schema
    head = list(batches_of(first))
    if schema_ is None:
        schema_ = head[0].schema if head else pa.schema([])

    def stream() -> Iterator[DeviceBatch]:
        yield from head
        for item in rest:
            yield from batches_of(item)

    return schema_, stream()


def _same_types(a: pa.Schema, b: pa.Schema) -> bool:
    return a.names == b.names and all(f.type.equals(g.type) for f, g in zip(a, b, strict=True))


# --------------------------------------------------------------------------------------------
# slices, sizes and concatenation of device columns


def _storage(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.BaseExtensionType) else t


def _is_variable(t: pa.DataType) -> bool:
    s = t.storage_type if isinstance(t, pa.BaseExtensionType) else t
    return pa.types.is_string(s) or pa.types.is_large_string(s) or pa.types.is_binary(s) or pa.types.is_large_binary(s)


def _is_flat(col: DeviceColumn) -> bool:
    """A column without children (fixed width or variable width)."""
    return not col.children and col.data is not None


def slice_column(col: DeviceColumn, offset: int, length: int) -> DeviceColumn:
    """Rows ``offset : offset + length`` of a column, sharing its buffers."""
    if offset == 0 and length == col.length:
        return col
    a, b = offset, offset + length
    valid = None if col.validity is None else col.validity.slice(a, b)
    if col.children:
        if col.offsets is None:  # struct
            return DeviceColumn(col.type, length, valid, children=[slice_column(c, a, length) for c in col.children])
        return DeviceColumn(col.type, length, valid, offsets=col.offsets[a : b + 1], children=col.children)
    if col.offsets is not None:
        return DeviceColumn(col.type, length, valid, col.data, col.offsets[a : b + 1])
    w = col.width
    items = None
    if col.item_validity is not None:
        dim = _storage(col.type).list_size
        items = col.item_validity.slice(a * dim, b * dim)
    return DeviceColumn(col.type, length, valid, col.data[a * w : b * w], item_validity=items)


def offset_ends(offsets, n: int) -> tuple[int, int]:
    """``(offsets[0], offsets[n])`` of device offsets: two one-value copies (a strided view
    of the two would copy everything between them)."""
    first = int(_array.to_host(offsets[0:1])[0])
    return first, (first if n == 0 else int(_array.to_host(offsets[n : n + 1])[0]))


def column_nbytes(col: DeviceColumn) -> int:
    """Bytes the column's rows take in Arrow's layout, counted as ``pyarrow.Array.nbytes``
    counts them (what the writer cuts pages by): a validity byte per 8 rows when there is a
    validity, values, one offset word per row (not ``n + 1``) and the referenced bytes or
    child rows."""
    n = col.length
    valid = (n + 7) // 8 if col.validity is not None else 0
    s = col.type.storage_type if isinstance(col.type, pa.BaseExtensionType) else col.type
    if col.children:
        if col.offsets is None:  # struct: the fields' rows
            return valid + sum(column_nbytes(c) for c in col.children)
        lo, hi = offset_ends(col.offsets, n) if n else (0, 0)
        word = 8 if pa.types.is_large_list(s) else 4
        return valid + word * n + column_nbytes(slice_column(col.children[0], lo, hi - lo))
    if col.offsets is not None:
        if col.span is not None:
            lo, hi = col.span
        else:
            lo, hi = offset_ends(col.offsets, n) if n else (0, 0)
        word = 8 if (pa.types.is_large_string(s) or pa.types.is_large_binary(s)) else 4
        return valid + word * n + int(hi) - int(lo)
    if pa.types.is_boolean(s):
        return valid + (n + 7) // 8
    items = (n * s.list_size + 7) // 8 if col.item_validity is not None else 0
    if pa.types.is_fixed_size_list(s) and pa.types.is_boolean(s.value_type):
        return valid + items + (n * s.list_size + 7) // 8  # Arrow packs the items' bits
    return valid + items + n * col.width


def _concat_validity(cols: list[DeviceColumn], n: int):
    """The validity of the concatenated rows (None when no piece has one)."""
    from cuda_kernels.segments import copy_ranges_gpu

    if all(c.validity is None for c in cols):
        return None
    valid = _array.empty(n, np.bool_)
    pos = 0
    for c in cols:
        if c.length:
            src = c.validity.bytes() if c.validity is not None else _array.full(c.length, np.bool_, True)
            copy_ranges_gpu(src, [0], [c.length], valid, [pos])
        pos += c.length
    return valid


def _concat_item_validity(cols: list[DeviceColumn], n: int):
    """The item validity of concatenated fixed-size lists (None when no piece has one)."""
    from cuda_kernels.segments import copy_ranges_gpu

    if all(c.item_validity is None for c in cols):
        return None
    dim = _storage(cols[0].type).list_size
    items = _array.empty(n * dim, np.bool_)
    pos = 0
    for c in cols:
        m = c.length * dim
        if m:
            src = c.item_validity.bytes() if c.item_validity is not None else _array.full(m, np.bool_, True)
            copy_ranges_gpu(src, [0], [m], items, [pos])
        pos += m
    return items


def _concat_lists(cols: list[DeviceColumn]) -> DeviceColumn | None:
    """Lists (or maps) concatenated on the device: each piece's child rows (cut at its
    first and last offsets, two values read back a piece) joined, and its offsets moved by
    where its child rows now start (one kernel)."""
    from cuda_kernels.segments import add_segment_base_gpu, copy_ranges_gpu

    n = sum(c.length for c in cols)
    spans = [offset_ends(c.offsets, c.length) for c in cols]
    child = concat_columns([slice_column(c.children[0], a, b - a) for c, (a, b) in zip(cols, spans, strict=True)])
    if child is None:
        return None
    raw = _array.empty(n + 1, np.int64)
    bounds = np.zeros(len(cols) + 1, np.int64)
    bases = np.zeros(len(cols), np.int64)
    pos = row = 0
    last = len(cols) - 1
    for k, (c, (a, b)) in enumerate(zip(cols, spans, strict=True)):
        count = c.length + (1 if k == last else 0)  # the last piece brings the closing offset
        if count:
            copy_ranges_gpu(c.offsets.view(np.uint8), [0], [8 * count], raw.view(np.uint8), [8 * row])
        bases[k] = pos - a
        pos += b - a
        row += c.length
        bounds[k + 1] = row + (1 if k == last else 0)
    offsets = _array.as_device(add_segment_base_gpu(raw, bounds, bases))
    valid = _concat_validity(cols, n)
    return DeviceColumn(cols[0].type, n, valid, offsets=offsets, children=[child], span=(0, pos))


def concat_columns(cols: list[DeviceColumn]) -> DeviceColumn | None:
    """One device column of the rows of ``cols`` (same type): fixed and variable width,
    structs and lists field by field -- None where a piece's kind is not one of those."""
    from cuda_kernels.segments import copy_ranges_gpu

    if len(cols) == 1:
        return cols[0]
    if all(c.children and c.offsets is None for c in cols):  # structs: field by field
        fields = [concat_columns([c.children[k] for c in cols]) for k in range(len(cols[0].children))]
        if any(f is None for f in fields):
            return None
        n = sum(c.length for c in cols)
        valid = _concat_validity(cols, n)
        return DeviceColumn(cols[0].type, n, valid, children=fields)  # type: ignore[arg-type]
    if all(c.children and c.offsets is not None for c in cols):  # lists and maps
        return _concat_lists(cols)
    if not all(_is_flat(c) for c in cols):
        return None
    n = sum(c.length for c in cols)
    t = cols[0].type
    valid = _concat_validity(cols, n)
    if cols[0].offsets is None:
        w = cols[0].width
        data = _array.empty(n * w, np.uint8)
        pos = 0
        for c in cols:
            if c.length:
                copy_ranges_gpu(c.data, [0], [c.length * w], data, [pos])
            pos += c.length * w
        return DeviceColumn(t, n, valid, data, item_validity=_concat_item_validity(cols, n))
    host = [_array.to_host(c.offsets[: c.length + 1]).astype(np.int64) for c in cols]
    sizes = [int(h[-1] - h[0]) for h in host]
    data = _array.empty(sum(sizes), np.uint8)
    offsets = np.zeros(n + 1, np.int64)
    pos = row = 0
    for c, h, size in zip(cols, host, sizes, strict=True):
        if size:
            copy_ranges_gpu(c.data, [int(h[0])], [size], data, [pos])
        offsets[row + 1 : row + c.length + 1] = h[1:] - h[0] + pos
        pos += size
        row += c.length
    return DeviceColumn(t, n, valid, data, _array.upload(offsets), span=(0, pos))
