# SPDX-License-Identifier: Apache-2.0
"""Arrow types of a Lance dataset -> Spark SQL types, and Arrow arrays -> the Arrow layout Spark reads.

Spark has no unsigned integers, half floats, nanosecond timestamps or fixed-size lists, so a
column is widened to the nearest Spark type that holds every value exactly:

===========================  ==========================================================
Arrow (Lance)                Spark
===========================  ==========================================================
``int8/16/32/64``            ``ByteType / ShortType / IntegerType / LongType``
``uint8/16/32``              ``ShortType / IntegerType / LongType``
``uint64``                   ``DecimalType(20, 0)``
``float16``, bfloat16        ``FloatType``
``float32 / float64``        ``FloatType / DoubleType``
``decimal128/256(p<=38, s)`` ``DecimalType(p, s)``
``string`` / ``large_*``     ``StringType``; ``arrow.json`` -> ``StringType``
``binary`` / ``large_*``     ``BinaryType`` (also ``fixed_size_binary``, ``arrow.uuid``)
``arrow.bool8``              ``BooleanType`` (non-zero bytes are true)
other extension types        their storage type (``arrow.fixed_shape_tensor`` ->
                             ``ArrayType``, ``arrow.opaque`` -> its storage), Python-defined
                             and C++ canonical ones alike
``date32 / date64``          ``DateType``
``timestamp(unit, tz)``      ``TimestampType`` (``TimestampNTZType`` without a zone); ns
                             values are truncated to microseconds, as Spark stores them
``time32 / time64``          ``TimeType(6)`` (ns truncated to microseconds)
``duration``                 ``DayTimeIntervalType(DAY, SECOND)`` (ns truncated)
``list`` / ``large_list`` /  ``ArrayType`` (element nullability kept)
``fixed_size_list``
``struct`` / ``map``         ``StructType`` / ``MapType``
``dictionary<V>``            the type of ``V``
``null``                     ``NullType``
===========================  ==========================================================

Anything else (``decimal256`` wider than 38 digits, month/day/nano intervals, unknown
extension types without a usable storage type) raises
:class:`~lance_gpu.errors.UnsupportedFeatureError` naming the column, so the schema fails on
the driver before a task runs; leave such columns out with the ``columns`` option.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from lance_gpu.errors import UnsupportedFeatureError

__all__ = ["spark_arrow_schema", "to_spark_arrays", "to_spark_schema", "to_spark_type"]

_BF16 = "lance.bfloat16"
_BOOL8 = "arrow.bool8"
_EXT_NAME = b"ARROW:extension:name"
_SIMPLE: dict[pa.DataType, T.DataType] = {
    pa.bool_(): T.BooleanType(),
    pa.int8(): T.ByteType(),
    pa.int16(): T.ShortType(),
    pa.int32(): T.IntegerType(),
    pa.int64(): T.LongType(),
    pa.uint8(): T.ShortType(),
    pa.uint16(): T.IntegerType(),
    pa.uint32(): T.LongType(),
    pa.uint64(): T.DecimalType(20, 0),
    pa.float16(): T.FloatType(),
    pa.float32(): T.FloatType(),
    pa.float64(): T.DoubleType(),
    pa.string(): T.StringType(),
    pa.large_string(): T.StringType(),
    pa.string_view(): T.StringType(),
    pa.binary(): T.BinaryType(),
    pa.large_binary(): T.BinaryType(),
    pa.binary_view(): T.BinaryType(),
    pa.date32(): T.DateType(),
    pa.date64(): T.DateType(),
    pa.null(): T.NullType(),
}


def _is_bf16(f: pa.Field) -> bool:
    """A ``lance.bfloat16`` field: the registered extension type, or (where pylance is not
    imported, as in Spark workers) its ``fixed_size_binary(2)`` storage with the marker."""
    t = f.type
    if isinstance(t, pa.BaseExtensionType):  # Python-defined and C++ canonical extension types
        return t.extension_name == _BF16
    return pa.types.is_fixed_size_binary(t) and t.byte_width == 2 and bool(f.metadata) and f.metadata.get(_EXT_NAME) == _BF16.encode()


def _field_type(f: pa.Field, column: str) -> T.DataType:  # noqa: C901 - one branch per type family
    if _is_bf16(f):
        return T.FloatType()
    t = f.type
    if isinstance(t, pa.BaseExtensionType):
        if t.extension_name == _BOOL8:
            return T.BooleanType()
        return _field_type(pa.field(f.name, t.storage_type, f.nullable), column)
    simple = _SIMPLE.get(t)
    if simple is not None:
        return simple
    if pa.types.is_decimal(t):
        if t.precision > 38:
            msg = f"column {column!r}: {t} has more digits than Spark's DecimalType (38); leave it out with the 'columns' option"
            raise UnsupportedFeatureError(msg)
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_fixed_size_binary(t):
        return T.BinaryType()
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pa.types.is_time(t):
        return T.TimeType(6)
    if pa.types.is_duration(t):
        return T.DayTimeIntervalType(T.DayTimeIntervalType.DAY, T.DayTimeIntervalType.SECOND)
    if pa.types.is_dictionary(t):
        return _field_type(pa.field(f.name, t.value_type, f.nullable), column)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        item = t.value_field
        return T.ArrayType(_field_type(item, column), containsNull=item.nullable)
    if pa.types.is_map(t):
        return T.MapType(_field_type(t.key_field, column), _field_type(t.item_field, column), valueContainsNull=t.item_field.nullable)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(c.name, _field_type(c, column), c.nullable) for c in t])
    msg = f"column {column!r}: Arrow type {t} has no Spark equivalent; leave it out with the 'columns' option"
    raise UnsupportedFeatureError(msg)


def to_spark_type(t: pa.DataType | pa.Field, column: str = "?") -> T.DataType:
    """The Spark type that holds every value of an Arrow type or field (see the module table)."""
    f = t if isinstance(t, pa.Field) else pa.field(column, t)
    return _field_type(f, column)


def to_spark_schema(schema: pa.Schema) -> T.StructType:
    """The Spark schema of an Arrow schema (field nullability kept)."""
    return T.StructType([T.StructField(f.name, _field_type(f, f.name), f.nullable) for f in schema])


def spark_arrow_schema(schema: T.StructType, *, large_types: bool = False) -> pa.Schema:
    """The Arrow schema in which Spark expects batches of ``schema``."""
    return to_arrow_schema(schema, prefers_large_types=large_types)


# --------------------------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------------------------

_LOSSY_UNITS = (pa.types.is_timestamp, pa.types.is_time, pa.types.is_duration)


def _bf16_to_float32(arr: pa.Array) -> pa.Array:
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr  # fixed_size_binary(2), little endian
    n = len(storage)
    raw = np.frombuffer(storage.buffers()[1], dtype="<u2", count=(storage.offset + n))[storage.offset :]
    bits = raw.astype(np.uint32) << np.uint32(16)
    return pa.array(bits.view(np.float32), pa.float32(), mask=storage.is_null().to_numpy(zero_copy_only=False) if storage.null_count else None)


def _list_parts(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(int64 offsets relative to the returned values, the values) of a list-like array."""
    t = arr.type
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        values = arr.values.slice(arr.offset * size, len(arr) * size)
        offsets = pa.array(np.arange(len(arr) + 1, dtype=np.int64) * size)
    else:
        if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
            arr = arr.cast(pa.large_list(t.value_field))
        offsets = arr.offsets
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        values = arr.values.slice(first, last - first)
        offsets = pa.array(offsets.to_numpy().astype(np.int64) - first)
    return offsets, values


def _offsets(offsets: pa.Array, target: pa.DataType) -> pa.Array:
    large = pa.types.is_large_list(target)
    return offsets.cast(pa.int64() if large else pa.int32())


def _mask(arr: pa.Array) -> pa.Array | None:
    return arr.is_null() if arr.null_count else None


def to_spark_array(arr: pa.Array, target: pa.DataType) -> pa.Array:  # noqa: C901 - one branch per layout
    """Convert one Arrow array to ``target``, the Arrow type Spark expects for its column."""
    t = arr.type
    if isinstance(t, pa.BaseExtensionType):
        arr = _bf16_to_float32(arr) if t.extension_name == _BF16 else arr.storage
        if t.extension_name == _BOOL8:
            arr = pc.not_equal(arr, 0)  # bool8 storage: int8, non-zero is true
        t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if t == target:
        return arr
    if pa.types.is_fixed_size_binary(t) and t.byte_width == 2 and pa.types.is_float32(target):
        return _bf16_to_float32(arr)  # bfloat16 storage (the schema said so: see _is_bf16)
    if pa.types.is_struct(target):
        children = arr.flatten()
        converted = [to_spark_array(c, f.type) for c, f in zip(children, target)]
        return pa.StructArray.from_arrays(converted, fields=list(target), mask=_mask(arr))
    if pa.types.is_map(target):
        offsets, entries = _list_parts(arr)
        raw_keys, raw_items = entries.flatten()
        keys = to_spark_array(raw_keys, target.key_type)
        items = to_spark_array(raw_items, target.item_type)
        return pa.MapArray.from_arrays(offsets.cast(pa.int32()), keys, items, type=target, mask=_mask(arr))
    if pa.types.is_list(target) or pa.types.is_large_list(target):
        offsets, values = _list_parts(arr)
        values = to_spark_array(values, target.value_type)
        cls = pa.LargeListArray if pa.types.is_large_list(target) else pa.ListArray
        return cls.from_arrays(_offsets(offsets, target), values, type=target, mask=_mask(arr))
    safe = not any(check(target) for check in _LOSSY_UNITS)
    return arr.cast(target, safe=safe)


def to_spark_arrays(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` (read by lance_gpu) converted column by column to Spark's Arrow ``schema``."""
    columns = []
    for f in schema:
        col = table.column(f.name)
        columns.append(pa.chunked_array([to_spark_array(c, f.type) for c in col.chunks], f.type))
    return pa.Table.from_arrays(columns, schema=schema)
