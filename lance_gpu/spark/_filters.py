# SPDX-License-Identifier: Apache-2.0
"""Spark's pushed-down filters (``pyspark.sql.datasource.Filter``) -> pyarrow expressions.

Spark 4.1 hands a Python data source the top-level AND conjuncts of a WHERE clause that have
the shape ``column <op> literal`` (OR trees and expressions over several columns never
arrive; ``a <> 1`` arrives as ``Not(EqualTo(("a",), 1))``). We translate a filter when we can
evaluate it with exactly Spark's semantics, and hand every other one back to Spark.

The expressions are evaluated on the batches *after* their conversion to Spark's Arrow types
(:mod:`lance_gpu.spark._types`), so a literal is compared with the very value Spark would see
(an ``uint64`` column as ``decimal(20, 0)``, a nanosecond timestamp truncated to microseconds)
and only the Spark type of the column matters:

* comparisons, ``IN``, ``<=>`` on boolean, integral, decimal, string, binary, date and
  timestamp columns; on float/double columns too, following Spark's ordering (NaN equals NaN
  and is greater than every other value; ``-0.0 = 0.0``); a comparison with a NaN literal other
  than ``=`` is handed back;
* ``IS NULL`` / ``IS NOT NULL`` on any top-level column;
* ``LIKE 'abc%'`` / ``'%abc'`` / ``'%abc%'`` (``StringStartsWith/EndsWith/Contains``) on strings;
* ``Not`` of any of these (SQL three-valued logic is kept: pyarrow's ``~`` maps NULL to NULL).

Not translated: nested column paths (``a.b``), literals that do not convert exactly to the
column's type, ``IN`` lists holding NULL, columns whose Spark type is not listed above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import datasource as sds

__all__ = ["split_filters", "to_expression"]

_COMPARE = {
    sds.EqualTo: "==",
    sds.GreaterThan: ">",
    sds.GreaterThanOrEqual: ">=",
    sds.LessThan: "<",
    sds.LessThanOrEqual: "<=",
}
#: LIKE prefix / suffix / substring filters (each with a ``str`` ``value``) and their pyarrow
#: functions
_LIKE = (sds.StringStartsWith, sds.StringEndsWith, sds.StringContains)
_STRING_MATCH: dict[type[sds.Filter], Callable[..., pc.Expression]] = dict(
    zip(_LIKE, (pc.starts_with, pc.ends_with, pc.match_substring), strict=True)
)
# Spark types (as the Arrow types Spark reads them in) whose comparisons we evaluate.
_COMPARABLE = (
    pa.types.is_boolean,
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_decimal,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_date32,
    pa.types.is_timestamp,
)


class _NotPushable(Exception):
    pass


def _column(f: Any, schema: pa.Schema) -> tuple[pc.Expression, pa.DataType]:
    path = f.attribute
    if len(path) != 1:
        raise _NotPushable
    name = path[0]
    idx = schema.get_field_index(name)
    if idx < 0:
        raise _NotPushable
    return pc.field(name), schema.field(idx).type


def _literal(value: Any, t: pa.DataType) -> pa.Scalar:
    if value is None or isinstance(value, (list, tuple, dict)):
        raise _NotPushable
    if isinstance(value, bool) != pa.types.is_boolean(t):
        raise _NotPushable
    if isinstance(value, bytearray):
        value = bytes(value)
    try:
        scalar = pa.scalar(value, t)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        raise _NotPushable from None
    if pa.types.is_integer(t) and (not isinstance(value, int) or scalar.as_py() != value):
        raise _NotPushable
    if pa.types.is_floating(t) and not (isinstance(value, (int, float)) and (math.isnan(scalar.as_py()) or scalar.as_py() == value)):
        raise _NotPushable
    if pa.types.is_decimal(t) and scalar.as_py() != value:
        raise _NotPushable
    if pa.types.is_timestamp(t) and t.tz is not None and getattr(value, "tzinfo", None) is None:
        raise _NotPushable  # a naive datetime against an instant: ambiguous
    return scalar


def _is_nan(value: pa.Scalar) -> bool:
    v = value.as_py()
    return isinstance(v, float) and math.isnan(v)


def _compare(op: str, col: pc.Expression, t: pa.DataType, value: pa.Scalar) -> pc.Expression:
    if not pa.types.is_floating(t):
        return {"==": col == value, ">": col > value, ">=": col >= value, "<": col < value, "<=": col <= value}[op]
    nan = pc.is_nan(col)
    if _is_nan(value):
        if op != "==":
            raise _NotPushable
        return nan
    if op == "==":
        return col == value
    if op == ">":
        return (col > value) | nan
    if op == ">=":
        return (col >= value) | nan
    return col < value if op == "<" else col <= value  # NaN < x is false in pyarrow and in Spark


def to_expression(f: Any, schema: pa.Schema) -> pc.Expression | None:
    """The expression of one Spark filter over Spark-typed batches of ``schema``, or None."""
    try:
        return _translate(f, schema)
    except _NotPushable:
        return None


def _translate(f: Any, schema: pa.Schema) -> pc.Expression:  # noqa: C901 - one branch per filter class
    if isinstance(f, sds.Not):
        return ~_translate(f.child, schema)
    if isinstance(f, (sds.IsNull, sds.IsNotNull)):
        col, _t = _column(f, schema)
        return col.is_null() if isinstance(f, sds.IsNull) else col.is_valid()
    if isinstance(f, _LIKE):
        col, t = _column(f, schema)
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)) or not isinstance(f.value, str):
            raise _NotPushable
        return _STRING_MATCH[type(f)](col, f.value)
    col, t = _column(f, schema)
    if not any(check(t) for check in _COMPARABLE):
        raise _NotPushable
    if type(f) in _COMPARE:
        return _compare(_COMPARE[type(f)], col, t, _literal(f.value, t))
    if isinstance(f, sds.EqualNullSafe):
        if f.value is None:
            return col.is_null()
        eq = _compare("==", col, t, _literal(f.value, t))
        return pc.if_else(col.is_null(), pa.scalar(False), eq)
    if isinstance(f, sds.In):
        values = [_literal(v, t) for v in f.value]
        if not values:
            raise _NotPushable
        if pa.types.is_floating(t):
            # -0.0 must match 0.0 and NaN must match NaN: compare value by value.
            out = _compare("==", col, t, values[0])
            for v in values[1:]:
                out = out | _compare("==", col, t, v)
            return out
        found = pc.is_in(col, value_set=pa.array([v.as_py() for v in values], t))
        # is_in says false for a NULL input; SQL says NULL (it matters under NOT).
        return pc.if_else(col.is_null(), pa.scalar(None, pa.bool_()), found)
    raise _NotPushable


def split_filters(filters: Sequence[Any], schema: pa.Schema) -> tuple[list[Any], list[Any]]:
    """(filters we evaluate, filters Spark must evaluate), each in the given order."""
    pushed: list[Any] = []
    rest: list[Any] = []
    for f in filters:
        (pushed if to_expression(f, schema) is not None else rest).append(f)
    return pushed, rest


def combined_expression(filters: Sequence[Any], schema: pa.Schema) -> pc.Expression | None:
    """The AND of the expressions of ``filters`` (all of them translatable), or None."""
    out = None
    for f in filters:
        e = to_expression(f, schema)
        if e is None:
            msg = f"filter {f!r} cannot be evaluated by lance_gpu"
            raise ValueError(msg)
        out = e if out is None else out & e
    return out
