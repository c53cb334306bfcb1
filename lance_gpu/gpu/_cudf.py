# SPDX-License-Identifier: Apache-2.0
"""A read's combined columns to one ``cudf.DataFrame`` without copying them.

:mod:`lance_gpu.gpu.combine` has already written every column of the read into cuDF's
layout, each buffer allocated once for the read (:class:`~lance_gpu.gpu.combine.CudfColumn`);
here each becomes a ``pylibcudf.Column`` over those buffers (``gpumemoryview``): fixed width
as is, booleans as BOOL8, strings as chars plus an INT32 offsets child (INT64 past 2^31 - 1:
cuDF's large strings), lists / maps as LIST with INT32 offsets, fixed-size lists as LIST over
their items (cuDF has no fixed-size list; a host copy is cast the same way, see
:func:`cudf_arrow_type`), structs with the parent's nulls superimposed on the children (what
``cudf.DataFrame.from_arrow`` gives).  Null masks are the bitmask words, padded to 64 bytes,
with their null counts.  The cuDF dtype (struct field names, decimals, ...) is then set to
what ``cudf.Series.from_arrow`` gives for the Arrow type.  No frame per fragment, no
``cudf.concat``.

Types cuDF has no zero-copy form for here (time-of-day, float16, decimal256, binary,
time zones, extension types, Arrow dictionaries) go through ``cudf.Series.from_arrow`` of a
host copy, which is exactly what ``cudf.DataFrame.from_arrow(pylance_table)`` does for them
(and raises where it raises).
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa

from lance_gpu.errors import CpuDecodeWarning
from lance_gpu.gpu import _array
from lance_gpu.gpu.columns import _is_var
from lance_gpu.gpu.combine import CudfColumn

_INT = {
    (8, True): "INT8", (16, True): "INT16", (32, True): "INT32", (64, True): "INT64",
    (8, False): "UINT8", (16, False): "UINT16", (32, False): "UINT32", (64, False): "UINT64",
}
_UNIT = {"s": "SECONDS", "ms": "MILLISECONDS", "us": "MICROSECONDS", "ns": "NANOSECONDS"}


class _NoZeroCopy(Exception):
    pass


def _plc():
    import pylibcudf as plc

    return plc


def _type_id(s: pa.DataType):
    plc = _plc()
    T = plc.TypeId
    if pa.types.is_integer(s):
        return plc.DataType(getattr(T, _INT[(s.bit_width, pa.types.is_signed_integer(s))]))
    if pa.types.is_float32(s):
        return plc.DataType(T.FLOAT32)
    if pa.types.is_float64(s):
        return plc.DataType(T.FLOAT64)
    if pa.types.is_boolean(s):
        return plc.DataType(T.BOOL8)
    if pa.types.is_timestamp(s) and s.tz is None:
        return plc.DataType(getattr(T, "TIMESTAMP_" + _UNIT[s.unit]))
    if pa.types.is_duration(s):
        return plc.DataType(getattr(T, "DURATION_" + _UNIT[s.unit]))
    if pa.types.is_date32(s):
        return plc.DataType(T.TIMESTAMP_DAYS)
    if pa.types.is_date64(s):
        return plc.DataType(T.TIMESTAMP_MILLISECONDS)
    if pa.types.is_decimal128(s):
        return plc.DataType(T.DECIMAL128, -s.scale)
    raise _NoZeroCopy(str(s))


def _view(arr):
    cp = _array.cupy()
    a = cp.asarray(arr)
    if a.size == 0:
        a = cp.zeros(1, dtype=a.dtype)
    return _plc().gpumemoryview(a)


def cudf_arrow_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every fixed-size list made a list: cuDF has no fixed-size list type
    (``cudf.Series.from_arrow`` refuses one), and a LIST column is how it holds embeddings."""
    if isinstance(t, pa.BaseExtensionType):
        return t
    if pa.types.is_fixed_size_list(t) or pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(cudf_arrow_type(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(cudf_arrow_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(cudf_arrow_type(f.type)) for f in t])
    return t


def cudf_arrow_table(table: pa.Table) -> pa.Table:
    """``table`` cast to the types :func:`cudf_arrow_type` gives (a no-op without fixed-size lists)."""
    schema = pa.schema([f.with_type(cudf_arrow_type(f.type)) for f in table.schema], metadata=table.schema.metadata)
    return table if schema.equals(table.schema) else table.cast(schema)


def _expected_dtype(t: pa.DataType):
    import cudf

    return cudf.Series.from_arrow(pa.array([], type=cudf_arrow_type(t))).dtype


def _with_dtype(series, expected):
    """``series`` over the same device buffers, typed ``expected`` (the struct field names,
    decimal precision, ... that a pylibcudf column does not carry)."""
    import cudf

    if series.dtype == expected:
        return series
    from cudf.core.column.column import ColumnBase

    if hasattr(ColumnBase, "create"):  # cuDF 26: a column is made with its dtype
        return cudf.Series._from_column(ColumnBase.create(series._column.plc_column, expected))
    return cudf.Series._from_column(series._column._with_type_metadata(expected))


_warned: set[str] = set()


def _warn_once(msg: str) -> None:

    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(f"lance_gpu: {msg}", CpuDecodeWarning, stacklevel=4)


# --------------------------------------------------------------------------------------------
# A whole read, combined into cuDF's layout (lance_gpu.gpu.combine): wrapped as is


def _mask_view(col):
    return (_plc().gpumemoryview(col.mask), col.null_count) if col.mask is not None and col.null_count else (None, 0)


def combined_to_plc(col: CudfColumn):
    """A ``pylibcudf.Column`` over a :class:`~lance_gpu.gpu.combine.CudfColumn`'s buffers,
    with no copy and no launch (raises _NoZeroCopy for the types cuDF has no such form for)."""
    t = col.type
    if isinstance(t, pa.BaseExtensionType) or col.host is not None:
        raise _NoZeroCopy(str(t))
    plc = _plc()
    s = t
    n = col.length
    mask, nulls = _mask_view(col)

    def offsets_child(offsets):
        if np.dtype(offsets.dtype) == np.int64 and not (pa.types.is_string(s) or pa.types.is_large_string(s)):
            raise _NoZeroCopy("list offsets beyond 2^31 - 1")
        tid = plc.TypeId.INT64 if np.dtype(offsets.dtype) == np.int64 else plc.TypeId.INT32
        return plc.Column(plc.DataType(tid), n + 1, _view(offsets), None, 0, 0, [])

    if pa.types.is_struct(s):
        return plc.Column(plc.DataType(plc.TypeId.STRUCT), n, None, mask, nulls, 0, [combined_to_plc(c) for c in col.children])
    if pa.types.is_list(s) or pa.types.is_large_list(s) or pa.types.is_map(s) or pa.types.is_fixed_size_list(s):
        return plc.Column(plc.DataType(plc.TypeId.LIST), n, None, mask, nulls, 0, [offsets_child(col.offsets), combined_to_plc(col.children[0])])
    if pa.types.is_string(s) or pa.types.is_large_string(s):
        return plc.Column(plc.DataType(plc.TypeId.STRING), n, _view(col.data), mask, nulls, 0, [offsets_child(col.offsets)])
    if _is_var(s):
        raise _NoZeroCopy(str(s))
    return plc.Column(_type_id(s), n, _view(col.data), mask, nulls, 0, [])


def combined_to_cudf(names: list[str], cols: list, num_rows: int):
    """One ``cudf.DataFrame`` of a read's combined columns (zero copy where cuDF has the
    layout; a host copy through ``cudf.Series.from_arrow`` for the others, as
    ``cudf.DataFrame.from_arrow`` of pylance's table does)."""
    import cudf

    if not names:
        return cudf.DataFrame(index=cudf.RangeIndex(num_rows))
    series = {}
    for name, col in zip(names, cols, strict=True):
        try:
            series[name] = _with_dtype(cudf.Series.from_pylibcudf(combined_to_plc(col)), _expected_dtype(col.type)).rename(name)
            continue
        except _NoZeroCopy:
            pass
        except Exception as exc:  # a cuDF version whose API differs: still give the data
            _warn_once(f"column {name!r} ({col.type}) went through a host copy: zero-copy construction failed ({type(exc).__name__}: {exc})")
        arr = col.to_arrow()
        wanted = cudf_arrow_type(arr.type)
        series[name] = cudf.Series.from_arrow(arr if wanted.equals(arr.type) else arr.cast(wanted)).rename(name)
    return cudf.DataFrame(series)
