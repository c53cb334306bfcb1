# SPDX-License-Identifier: Apache-2.0
"""Arrow compute kernels for the SQL functions of :mod:`lance_gpu.filter` that Arrow lacks.

Each kernel is registered with pyarrow as a scalar UDF so that a compiled filter or
projection stays one :class:`pyarrow.compute.Expression` (usable with ``Table.filter`` and
Acero projections). A UDF is registered under a name that encodes its argument types
(``lance_gpu.array_has(list<item: int32>,int32)->bool``), because pyarrow UDFs have fixed
signatures; :func:`ensure_registered` re-registers them in a fresh process (after an
expression was pickled to a worker).

Semantics follow pylance 14.0.2 (DataFusion and Lance's JSON functions):

* ``array_has(list, x)``: true when an element equals ``x``; NULL for a NULL list or ``x``.
* ``array_has_any(list, [..])`` / ``array_has_all(list, [..])``: any / every value present;
  ``array_has_all(list, [])`` is true even for a NULL list, as in pylance.
* ``regexp_match(s, pattern[, flags])``: the capture groups of the first match (the whole
  match without groups) as ``list<string>``, NULL without a match.
* JSON functions read JSON text (``arrow.json`` columns). Paths are JSONPath
  (``$.a.b``, ``$.c[1]``, ``$.c[*]``, ``$['k']``; a bare ``a`` means ``$.a``); the
  ``json_get_*`` functions take a plain key. Values are printed compactly (``{"a":[1,2]}``).
  A value that cannot be converted (``json_get_int`` of ``"abc"``) raises ``ArrowInvalid``
  when evaluated, as pylance fails the query.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import json
import math
import re
import struct
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu.errors import DecimalArithmeticError
from lance_gpu.file.jsonb import JsonbError, decode_jsonb
from lance_gpu.filter_types import parse_timestamp

__all__ = ["UdfSpec", "call", "ensure_registered", "evaluate"]


@dataclass(frozen=True)
class UdfSpec:
    """One registered kernel: its ``kind`` (which Python kernel), argument and result types."""

    kind: str
    in_types: tuple[pa.DataType, ...]
    out_type: pa.DataType

    @property
    def name(self) -> str:
        """The registered name: the kind with its argument and result types (``try_cast`` of
        one argument type has as many kernels as target types)."""
        return f"lance_gpu.{self.kind}({','.join(str(t) for t in self.in_types)})->{self.out_type}"


_LOCK = threading.Lock()
_REGISTERED: set[str] = set()


def ensure_registered(specs: tuple[UdfSpec, ...] | list[UdfSpec]) -> None:
    """Register every UDF of ``specs`` with pyarrow's function registry (idempotent)."""
    for spec in specs:
        if spec.name in _REGISTERED:
            continue
        with _LOCK:
            if spec.name in _REGISTERED:
                continue
            kernel = _kernel(spec)
            in_types = {f"a{i}": t for i, t in enumerate(spec.in_types)}
            doc = {"summary": f"lance-gpu SQL function {spec.kind}", "description": spec.name}
            try:
                pc.register_scalar_function(_wrap(kernel, spec.out_type), spec.name, doc, in_types, spec.out_type)
            except pa.ArrowKeyError:  # registered by another copy of this module
                pass
            _REGISTERED.add(spec.name)


def call(kind: str, args: list[pc.Expression], in_types: list[pa.DataType], out_type: pa.DataType) -> tuple[pc.Expression, UdfSpec]:
    """An expression calling the ``kind`` kernel on ``args``, and the spec it needs registered."""
    spec = UdfSpec(kind, tuple(in_types), out_type)
    ensure_registered([spec])
    return pc.Expression._call(spec.name, args), spec


def evaluate(spec: UdfSpec, args: list[pa.Scalar]) -> pa.Scalar:
    """The kernel of ``spec`` on constant arguments (one row), as a scalar of its type."""
    out = _kernel(spec)(1, *args)
    return (out if out.type == spec.out_type else out.cast(spec.out_type))[0]


def _kernel(spec: UdfSpec) -> Callable[..., pa.Array]:
    """The Python kernel of ``spec``; decimal kernels and ``try_cast`` are told their result type."""
    if spec.kind in _DECIMAL_KERNELS:
        return functools.partial(_DECIMAL_KERNELS[spec.kind], out_type=spec.out_type)
    if spec.kind == "try_cast":
        return functools.partial(_try_cast, out_type=spec.out_type)
    if spec.kind == "cast_text_time":
        return functools.partial(_cast_text_time, out_type=spec.out_type)
    return _KERNELS[spec.kind]


def _wrap(kernel: Callable[..., pa.Array], out_type: pa.DataType) -> Callable[..., pa.Array]:
    def udf(ctx: Any, *args: Any) -> pa.Array:
        n = next((len(a) for a in args if isinstance(a, pa.Array)), 1)
        out = kernel(n, *args)
        return out if out.type == out_type else out.cast(out_type)

    return udf


def _broadcast(value: pa.Array | pa.Scalar, n: int) -> pa.Array:
    if isinstance(value, pa.Array):
        return value
    return pa.repeat(value, n) if value.is_valid else pa.nulls(n, value.type)


# -- lists ---------------------------------------------------------------------------------


def _flat_parents(lists: pa.Array) -> np.ndarray:
    """Per element of ``pc.list_flatten(lists)``, the row it belongs to. Not
    ``pc.list_parent_indices``: that also counts the values a NULL list's offsets span
    (Arrow allows them), which ``list_flatten`` leaves out."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return np.repeat(np.arange(len(lists), dtype=np.int64), lengths)


def _row_hits(lists: pa.Array, matches: pa.Array, n: int) -> np.ndarray:
    """Per row, how many flattened elements matched (``matches``: bool per flat element)."""
    parents = _flat_parents(lists)
    hit = pc.fill_null(matches, False).to_numpy(zero_copy_only=False).astype(bool)
    return np.bincount(parents[hit], minlength=n)[:n]


def _array_has(n: int, lists: pa.Array | pa.Scalar, value: pa.Array | pa.Scalar) -> pa.Array:
    lists = _broadcast(lists, n)
    if isinstance(value, pa.Scalar):
        if not value.is_valid:
            return pa.nulls(n, pa.bool_())
        matches = pc.equal(pc.list_flatten(lists), value)
        valid = pc.is_valid(lists)
    else:
        flat = pc.list_flatten(lists)
        parents = _flat_parents(lists)
        matches = pc.equal(flat, pc.take(value, pa.array(parents)))
        valid = pc.and_(pc.is_valid(lists), pc.is_valid(value))
    hits = _row_hits(lists, matches, n) > 0
    return pc.if_else(valid, pa.array(hits), pa.scalar(None, pa.bool_()))


def _values(values: pa.Scalar | pa.Array) -> list[Any]:
    if isinstance(values, pa.Array):  # a constant list arrives broadcast to a list array
        values = values[0]
    return [v for v in (values.as_py() or []) if v is not None]


def _array_has_any(n: int, lists: pa.Array | pa.Scalar, values: pa.Scalar | pa.Array) -> pa.Array:
    lists = _broadcast(lists, n)
    wanted = _values(values)
    flat = pc.list_flatten(lists)
    matches = pc.is_in(flat, value_set=pa.array(wanted, flat.type))
    hits = _row_hits(lists, matches, n) > 0
    return pc.if_else(pc.is_valid(lists), pa.array(hits), pa.scalar(None, pa.bool_()))


def _array_has_all(n: int, lists: pa.Array | pa.Scalar, values: pa.Scalar | pa.Array) -> pa.Array:
    lists = _broadcast(lists, n)
    wanted = list(dict.fromkeys(_values(values)))
    if not wanted:
        return pa.array(np.ones(n, bool))
    flat = pc.list_flatten(lists)
    result = np.ones(n, bool)
    for v in wanted:
        result &= _row_hits(lists, pc.equal(flat, pa.scalar(v, flat.type)), n) > 0
    return pc.if_else(pc.is_valid(lists), pa.array(result), pa.scalar(None, pa.bool_()))


def _order_key(value: Any) -> tuple[Any, ...]:
    """A sort key giving DataFusion's order of nested values: NULL below every value, floats
    in Arrow's total order (-0.0 below 0.0, NaN above +inf and equal to NaN), lists
    element by element with a shorter prefix first, structs field by field."""
    if value is None:
        return (0,)
    if isinstance(value, float):
        if math.isnan(value):
            return (1, 1, 0.0, 0.0)
        return (1, 0, value, math.copysign(1.0, value))
    if isinstance(value, list):
        return (1, tuple(_order_key(v) for v in value))
    if isinstance(value, dict):
        return (1, tuple(_order_key(v) for v in value.values()))
    return (1, value)


_ORDER_TESTS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: a == b, "neq": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "lte": lambda a, b: a <= b, "gt": lambda a, b: a > b, "gte": lambda a, b: a >= b,
}


_SIGN_TESTS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "eq": lambda c: c == 0, "neq": lambda c: c != 0, "lt": lambda c: c < 0,
    "lte": lambda c: c <= 0, "gt": lambda c: c > 0, "gte": lambda c: c >= 0,
}


def _list_compare(op: str) -> Callable[..., pa.Array]:
    """``left <op> right`` of two lists per row (:func:`_order_key`); NULL where either is.
    A list column against a constant list of flat items is compared without a Python loop
    (:func:`_compare_with_constant`)."""
    test = _ORDER_TESTS[op]

    def kernel(n: int, left: Any, right: Any) -> pa.Array:
        for column, constant, flip in ((left, right, False), (right, left, True)):
            if isinstance(column, pa.Array) and isinstance(constant, pa.Scalar):
                signs = _compare_with_constant(column, constant)
                if signs is not None:
                    valid = column.is_valid().to_numpy(zero_copy_only=False) & constant.is_valid
                    result = _SIGN_TESTS[op](-signs if flip else signs)
                    return pa.array(result, pa.bool_(), mask=~valid)
        rows = zip(_broadcast(left, n).to_pylist(), _broadcast(right, n).to_pylist(), strict=True)
        return pa.array(
            [None if a is None or b is None else test(_order_key(a), _order_key(b)) for a, b in rows], pa.bool_()
        )

    return kernel


def _item_signs(values: pa.Array, expected: pa.Array) -> np.ndarray:
    """Per element, -1 / 0 / 1 comparing ``values`` with ``expected`` in :func:`_order_key`'s
    order (NULL first; floats: -0.0 below 0.0, NaN above everything and equal to NaN)."""
    a_valid = values.is_valid().to_numpy(zero_copy_only=False)
    b_valid = expected.is_valid().to_numpy(zero_copy_only=False)
    both = a_valid & b_valid
    if pa.types.is_floating(values.type):
        a = values.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
        b = expected.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
        a_nan, b_nan = np.isnan(a), np.isnan(b)
        with np.errstate(invalid="ignore"):
            signs = np.sign(a - b).astype(np.int8)
        zeros = (a == 0) & (b == 0)
        signs[zeros] = (np.signbit(b[zeros]).astype(np.int8) - np.signbit(a[zeros]).astype(np.int8))
        signs[a_nan | b_nan] = a_nan[a_nan | b_nan].astype(np.int8) - b_nan[a_nan | b_nan].astype(np.int8)
    else:
        lt = pc.fill_null(pc.less(values, expected), False).to_numpy(zero_copy_only=False)
        gt = pc.fill_null(pc.greater(values, expected), False).to_numpy(zero_copy_only=False)
        signs = gt.astype(np.int8) - lt.astype(np.int8)
    signs = np.where(both, signs, a_valid.astype(np.int8) - b_valid.astype(np.int8))
    return signs.astype(np.int8)


def _compare_with_constant(lists: pa.Array, constant: pa.Scalar) -> np.ndarray | None:
    """Per row, the sign of ``list <=> constant`` in lexicographic order (the first differing
    element decides; a shorter prefix is smaller), for lists of numbers, strings or booleans;
    None for other item types (the caller compares row by row). NULL rows give 0 (masked)."""
    item = lists.type.value_type
    if not (pa.types.is_integer(item) or pa.types.is_floating(item) or pa.types.is_boolean(item) or _is_text_type(item)):
        return None
    wanted = pa.array(constant.values.to_pylist() if constant.is_valid else [], item)
    k = len(wanted)
    n = len(lists)
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(lists)
    parents = _flat_parents(lists)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    positions = np.arange(len(flat), dtype=np.int64) - starts[parents] if len(flat) else np.zeros(0, np.int64)
    inside = positions < k
    signs = np.zeros(n, np.int8)
    decided = np.zeros(n, bool)
    if k and inside.any():
        idx = np.nonzero(inside)[0]
        item_signs = _item_signs(flat.take(pa.array(idx)), wanted.take(pa.array(positions[idx])))
        differ = idx[item_signs != 0]
        if len(differ):
            rows, first = np.unique(parents[differ], return_index=True)
            signs[rows] = item_signs[item_signs != 0][first]
            decided[rows] = True
    by_length = np.sign(lengths - k).astype(np.int8)
    return np.where(decided, signs, by_length)


def _is_text_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _list_element(n: int, lists: Any, index: Any) -> pa.Array:
    """``lists[index]`` per row (1-based, negative from the end; NULL out of range, for 0,
    or for a NULL list or index), taken from the flattened values without a Python loop."""
    lists = _broadcast(lists, n)
    index = _broadcast(index, n)
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    k = pc.fill_null(index, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    offset = np.where(k > 0, k - 1, lengths + k)
    valid = (k != 0) & (offset >= 0) & (offset < lengths)
    valid &= pc.is_valid(index).to_numpy(zero_copy_only=False)
    positions = pa.array(np.where(valid, starts + offset, 0), pa.int64(), mask=~valid)
    values = pc.list_flatten(lists)
    if len(values) == 0:
        return pa.nulls(n, lists.type.value_type)
    return values.take(positions)


def _cardinality(n: int, lists: Any) -> pa.Array:
    """``cardinality``: the product of DataFusion's ``array_dims`` (per level, the length of
    the first element one level down; an empty or NULL first element ends with 0); for a
    list of non-lists simply its length."""
    lists = _broadcast(lists, n)
    depth, t = 1, lists.type.value_type
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        depth, t = depth + 1, t.value_type
    if depth == 1:
        return pc.list_value_length(lists).cast(pa.uint64())
    out: list[int | None] = []
    for value in lists.to_pylist():
        if value is None:
            out.append(None)
            continue
        product, current = 1, value
        for level in range(depth):
            size = len(current) if current is not None else 0
            product *= size
            if size == 0 or level == depth - 1:
                break
            current = current[0]
        out.append(product)
    return pa.array(out, pa.uint64())


def _array_position(n: int, lists: Any, value: Any, start: Any) -> pa.Array:
    """``array_position(list, x, start)``: the 1-based position of the first element equal
    to ``x`` from ``start``; NULL where absent. A start outside the list fails, as in pylance."""
    out: list[int | None] = []
    for items, wanted, first in zip(*_rows(n, lists, value, start), strict=True):
        if items is None or first is None:
            out.append(None)
            continue
        if first < 1 or first - 1 > len(items):
            raise pa.ArrowInvalid(f"array_position: start_from out of bounds: {first}")
        key = _order_key(wanted)
        out.append(next((i + 1 for i in range(first - 1, len(items)) if _order_key(items[i]) == key), None))
    return pa.array(out, pa.uint64())


def _string_to_array(n: int, strings: Any, delimiter: Any, null: Any) -> pa.Array:
    delim = delimiter.as_py() if isinstance(delimiter, pa.Scalar) else None
    null_text = null.as_py() if isinstance(null, pa.Scalar) else None
    out: list[list[str | None] | None] = []
    for s in _broadcast(strings, n).to_pylist():
        if s is None:
            out.append(None)
            continue
        pieces = [] if s == "" else list(s) if delim is None else [s] if delim == "" else s.split(delim)
        out.append([None if null_text is not None and p == null_text else p for p in pieces])
    return pa.array(out, pa.list_(pa.string()))


def _element_text(value: Any, single: bool) -> str:
    """An element as ``array_to_string`` writes it: Rust's ``Display`` (``2``, ``-0``, ``1.5``,
    never an exponent, ``NaN``, ``inf``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return np.format_float_positional(np.float32(value) if single else value, trim="-")
    return str(value)


def _array_to_string(n: int, lists: Any, delimiter: Any, null: Any) -> pa.Array:
    lists = _broadcast(lists, n)
    single = pa.types.is_float32(lists.type.value_type)
    delim = delimiter.as_py()
    null_text = null.as_py() if isinstance(null, pa.Scalar) else None
    out: list[str | None] = []
    for items in lists.to_pylist():
        if items is None:
            out.append(None)
            continue
        texts = [null_text if v is None else _element_text(v, single) for v in items]
        out.append(delim.join(t for t in texts if t is not None))
    return pa.array(out, pa.string())


def _substr(s: str, start: int, count: int | None = None) -> str:
    if count is not None and count < 0:
        raise pa.ArrowInvalid(f"negative count not allowed: {count}")
    begin = start - 1  # 0-based; positions before the first character count toward ``count``
    if count is None:
        return s[max(begin, 0):]
    end = begin + count
    return s[max(begin, 0) : max(end, 0)] if end > max(begin, 0) else ""


def _cbrt(n: int, values: Any) -> pa.Array:
    """Cube roots computed in float64 (float32 input rounded back: pylance's float32 results)."""
    values = _broadcast(values, n)
    data = values.to_numpy(zero_copy_only=False).astype(np.float64)
    return pa.array(np.cbrt(data), pa.float64(), mask=~_valid_mask(values) if values.null_count else None).cast(values.type)


def _factorial(k: int) -> int:
    if k < 0:
        raise pa.ArrowInvalid("factorial of a negative number is undefined")
    if k > 20:
        raise pa.ArrowInvalid("Overflow happened on FACTORIAL")
    return math.factorial(k)


def _chr(code: int) -> str:
    if code == 0:
        raise pa.ArrowInvalid("null character not permitted.")
    try:
        return chr(code)
    except (ValueError, OverflowError):
        raise pa.ArrowInvalid(f"invalid Unicode scalar value: {code}") from None


def _concat_ws(n: int, separator: Any, *parts: Any) -> pa.Array:
    columns = _rows(n, separator, *parts)
    return pa.array(
        [None if row[0] is None else row[0].join(p for p in row[1:] if p is not None) for row in zip(*columns, strict=True)],
        pa.string(),
    )


def _chrono_to_python(fmt: str) -> str:
    """A chrono format (pylance's) as a ``strptime`` one: ``%.f`` / ``%f`` read a fraction."""
    return fmt.replace("%.f", ".%f").replace("%3f", "%f").replace("%6f", "%f").replace("%9f", "%f")


def _to_timestamp(unit: str) -> Callable[..., pa.Array]:
    """Text to ``timestamp[unit]``: RFC 3339 / ``YYYY-MM-DD[ HH:MM:SS[.f]]``, or the first of
    the chrono formats given that matches (text no format matches fails the query)."""
    per = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]

    def kernel(n: int, strings: Any, *formats: Any) -> pa.Array:
        patterns = [_chrono_to_python(f.as_py()) for f in formats]
        out: list[int | None] = []
        for text in _broadcast(strings, n).to_pylist():
            if text is None:
                out.append(None)
                continue
            if not patterns:
                try:
                    out.append(parse_timestamp(text, pa.timestamp("ns")).value // (10**9 // per))
                except (ValueError, pa.ArrowInvalid):
                    raise pa.ArrowInvalid(f"Error parsing timestamp from '{text}'") from None
                continue
            for pattern in patterns:
                try:
                    parsed = dt.datetime.strptime(text, pattern)
                except ValueError:
                    continue
                if parsed.tzinfo is not None:
                    parsed = parsed.astimezone(dt.UTC).replace(tzinfo=None)
                delta = parsed - dt.datetime(1970, 1, 1)
                micros = (delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds
                out.append(micros * per // 10**6)
                break
            else:
                raise pa.ArrowInvalid(f"Error parsing timestamp from '{text}' using the formats given")
        return pa.array(out, pa.int64()).cast(pa.timestamp(unit))

    return kernel


def _make_date(year: int, month: int, day: int) -> Any:
    try:
        return dt.date(year, month, day)
    except (ValueError, OverflowError):
        raise pa.ArrowInvalid(f"Unable to parse date from {year}, {month}, {day}") from None


def _list_kernel(fn: Callable[..., Any], out_type: Callable[[list[pa.DataType]], pa.DataType]) -> Callable[..., pa.Array]:
    """A kernel applying ``fn`` to each row's Python values (lists as Python lists; NULL as
    None: ``fn`` decides what a NULL gives); the result type from the argument types."""

    def kernel(n: int, *args: Any) -> pa.Array:
        columns = _rows(n, *args)
        return pa.array([fn(*row) for row in zip(*columns, strict=True)], out_type([a.type for a in args]))

    return kernel


def _same_list(types: list[pa.DataType]) -> pa.DataType:
    return pa.list_(types[0].value_type)


def _item(types: list[pa.DataType]) -> pa.DataType:
    return types[0].value_type


def _null_if_none(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(items: Any, *rest: Any) -> Any:
        return None if items is None else fn(items, *rest)

    return wrapped


def _sort(items: list[Any], flags: str) -> list[Any]:
    nulls = [v for v in items if v is None]
    values = sorted((v for v in items if v is not None), key=_order_key, reverse=flags.startswith("DESC"))
    return values + nulls if flags.endswith("NULLS LAST") else nulls + values


def _distinct(items: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for v in items:
        key = _order_key(v)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def _extreme(largest: bool) -> Callable[[list[Any]], Any]:
    def pick(items: list[Any]) -> Any:
        values = [v for v in items if v is not None]
        if not values:
            return None
        return (max if largest else min)(values, key=_order_key)

    return pick


def _list_extreme(largest: bool) -> Callable[..., pa.Array]:
    """``array_max`` / ``array_min``: the largest / smallest non-NULL element (NULL for a
    NULL, empty or all-NULL list). Integer and float lists are reduced without a Python loop
    (NaN above every number, -0.0 below 0.0); other items row by row (:func:`_order_key`)."""
    rowwise = _list_kernel(_null_if_none(_extreme(largest)), _item)

    def kernel(n: int, lists: Any) -> pa.Array:
        lists = _broadcast(lists, n)
        item = lists.type.value_type
        if not (pa.types.is_integer(item) or pa.types.is_floating(item)) or pa.types.is_float16(item):
            return rowwise(n, lists)
        flat = pc.list_flatten(lists)
        parents = _flat_parents(lists)
        valid = flat.is_valid().to_numpy(zero_copy_only=False)
        parents = parents[valid]
        values = flat.filter(pa.array(valid)).to_numpy(zero_copy_only=False)
        if pa.types.is_integer(item):
            order = np.lexsort((values, parents))  # by row, then value
        else:  # Arrow's total order: -0.0 before 0.0, NaN after +inf
            values = values.astype(np.float64)
            nan = np.isnan(values)
            order = np.lexsort((~np.signbit(values), nan, np.where(nan, np.inf, values), parents))
        rows = parents[order]
        pick = np.r_[rows[1:] != rows[:-1], True] if largest else np.r_[True, rows[1:] != rows[:-1]]
        out = np.zeros(n, values.dtype)
        if len(order):
            out[rows[pick]] = values[order][pick]
        present = np.zeros(n, bool)
        present[parents] = True
        return pa.array(out, mask=~present).cast(item)

    return kernel


def _slice(items: list[Any] | None, begin: int | None, end: int | None, stride: int | None = 1) -> list[Any] | None:
    """DataFusion's ``array_slice``: 1-based inclusive bounds, negative from the end, 0 the
    first element; a NULL bound or list gives NULL."""
    if items is None or begin is None or end is None or stride is None:
        return None
    if stride == 0:
        raise pa.ArrowInvalid("array_slice got invalid stride: 0, it cannot be 0")
    n = len(items)
    first = begin - 1 if begin > 0 else (0 if begin == 0 else n + begin)
    last = end - 1 if end > 0 else (-1 if end == 0 else n + end)
    first, last = max(first, 0), min(last, n - 1)
    if stride < 0:
        first, last = min(begin - 1 if begin > 0 else n + begin, n - 1), max(end - 1 if end > 0 else n + end, 0)
        return items[first : last - 1 if last > 0 else None : stride] if first >= last else []
    return items[first : last + 1 : stride] if last >= first else []


def _concat(*lists: Any) -> list[Any] | None:
    present = [x for x in lists if x is not None]
    return None if not present else [v for x in present for v in x]


def _remove(every: bool) -> Callable[[Any, Any], Any]:
    def remove(items: Any, value: Any) -> Any:
        if items is None:
            return None
        key = _order_key(value)
        if every:
            return [v for v in items if _order_key(v) != key]
        for i, v in enumerate(items):
            if _order_key(v) == key:
                return items[:i] + items[i + 1 :]
        return items

    return remove


def _positions(items: Any, value: Any) -> Any:
    if items is None:
        return None
    key = _order_key(value)
    return [i + 1 for i, v in enumerate(items) if _order_key(v) == key]


def _has_rows(every: bool) -> Callable[[Any, Any], Any]:
    def has(items: Any, wanted: Any) -> Any:
        if items is None or wanted is None:
            return None
        present = {_order_key(v) for v in items if v is not None}
        keys = [_order_key(v) for v in wanted if v is not None]
        return all(k in present for k in keys) if every else any(k in present for k in keys)

    return has


def _set_op(op: str) -> Callable[[Any, Any], Any]:
    """``array_union`` / ``array_intersect`` / ``array_except`` of two lists (distinct
    elements, in first-seen order); NULL where either list is."""

    def combine(a: Any, b: Any) -> Any:
        if a is None or b is None:
            return None
        if op == "union":
            return _distinct(a + b)
        keys = {_order_key(v) for v in b}
        return _distinct([v for v in a if (_order_key(v) in keys) == (op == "intersect")])

    return combine


def _replace_n(items: Any, old: Any, new: Any, limit: Any) -> Any:
    """The first ``limit`` elements equal to ``old`` replaced by ``new`` (every one for -1)."""
    if items is None:
        return None
    key, left, out = _order_key(old), -1 if limit is None else limit, []
    for v in items:
        if left != 0 and _order_key(v) == key:
            out.append(new)
            left -= 1
        else:
            out.append(v)
    return out


def _remove_n(items: Any, value: Any, limit: Any) -> Any:
    if items is None:
        return None
    key, left, out = _order_key(value), limit or 0, []
    for v in items:
        if left > 0 and _order_key(v) == key:
            left -= 1
        else:
            out.append(v)
    return out


def _dims(n: int, lists: Any) -> pa.Array:
    """DataFusion's ``array_dims``: per depth of the list type, the length through the first
    element (0 below a NULL or empty one); NULL for a NULL or empty list."""
    lists = _broadcast(lists, n)
    depth, t = 0, lists.type
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        depth, t = depth + 1, t.value_type
    out: list[list[int] | None] = []
    for items in lists.to_pylist():
        if not items:
            out.append(None)
            continue
        dims, current = [], items
        for _ in range(depth):
            dims.append(len(current) if current else 0)
            current = current[0] if current else None
        out.append(dims)
    return pa.array(out, pa.list_(pa.uint64()))


def _repeat_list(value: Any, count: Any) -> Any:
    return None if count is None else [value] * max(count, 0)


def _resize(items: Any, size: Any, fill: Any) -> Any:
    if items is None or size is None:
        return None
    if size < 0:
        raise pa.ArrowInvalid(f"array_resize: the size must not be negative, got {size}")
    return items[:size] + [fill] * (size - len(items))


def _regexp_instr(n: int, strings: Any, spec: Any) -> pa.Array:
    """``regexp_instr``: ``spec`` is ``"start,occurrence,group,pattern"``."""
    start, occurrence, group, pattern = spec.as_py().split(",", 3)
    compiled = re.compile(pattern)
    first, nth, index = int(start) - 1, int(occurrence), int(group)
    out: list[int | None] = []
    for text in _broadcast(strings, n).to_pylist():
        if text is None:
            out.append(None)
            continue
        found = 0
        for k, m in enumerate(compiled.finditer(text, first)):
            if k + 1 == nth:
                found = m.start(index) + 1 if m.start(index) >= 0 else 0
                break
        out.append(found)
    return pa.array(out, pa.int64())


def _make_list(n: int, *items: Any) -> pa.Array:
    """``make_array`` with a column among the items: one list per row."""
    columns = _rows(n, *items)
    out_type = pa.list_(items[0].type)
    return pa.array([list(row) for row in zip(*columns, strict=True)], out_type)


def _decode_text(how: str) -> Callable[[str], bytes]:
    def decode(text: str) -> bytes:
        try:
            if how == "hex":
                return bytes.fromhex(text)
            return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)  # pylance's encode leaves out '='
        except ValueError as e:
            raise pa.ArrowInvalid(f"Failed to decode value using {how}: {e}") from None

    return decode


def _series(inclusive: bool) -> Callable[[int, int, int], list[int]]:
    def series(start: int, stop: int, step: int) -> list[int]:
        if step == 0:
            raise pa.ArrowInvalid("step can't be 0 for function range(start [, stop, step])")
        if inclusive:
            stop = stop + (1 if step > 0 else -1)
        return list(range(start, stop, step))

    return series


def _distance(a: list[float | None], b: list[float | None]) -> float:
    if len(a) != len(b):
        raise pa.ArrowInvalid("Both arrays must have the same length")
    return math.sqrt(sum(((x or 0.0) - (y or 0.0)) ** 2 for x, y in zip(a, b, strict=True)))


def _sql_cast(values: pa.Array, out_type: pa.DataType) -> pa.Array:
    """CAST of an array as the compiler casts columns: floats to integers truncate, casts to
    floats and between timestamp units may lose precision, anything else must be exact."""
    if pa.types.is_floating(values.type) and pa.types.is_integer(out_type):
        return pc.cast(pc.trunc(values), out_type)
    lossy = pa.types.is_floating(out_type) or (pa.types.is_timestamp(values.type) and pa.types.is_timestamp(out_type))
    return pc.cast(values, out_type, safe=not lossy)


def _text_to_time(text: str, out_type: pa.DataType) -> Any:
    """Text as a timestamp or a date, read as CAST reads a literal (a date's text may carry a
    time); None where it is not one."""
    try:
        ticks = parse_timestamp(text, pa.timestamp("ns")).value
    except (ValueError, OverflowError):
        return None
    if pa.types.is_date(out_type):
        return pa.scalar(ticks // (86400 * 10**9), pa.int32()).cast(pa.date32()).cast(out_type).as_py()
    return pa.scalar(ticks, pa.timestamp("ns")).cast(out_type, safe=False).as_py()


def _cast_text_time(n: int, values: Any, out_type: pa.DataType) -> pa.Array:
    """CAST of text to a timestamp or a date (:func:`_text_to_time`); text that is not one
    fails the query, as in pylance. Arrow's ISO 8601 cast first (the common case, no Python
    loop); the row-by-row reader where Arrow refuses some text."""
    values = _broadcast(values, n)
    try:
        return pc.cast(values, out_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out = []
    for v in values.to_pylist():
        value = None if v is None else _text_to_time(v, out_type)
        if v is not None and value is None:
            raise pa.ArrowInvalid(f"Cannot cast string '{v}' to value of {out_type} type")
        out.append(value)
    return pa.array(out, out_type)


def _date_bin_months(n: int, values: Any, months: Any) -> pa.Array:
    """``date_bin`` by ``months``: midnight on the first of the bin's month, bins counted from
    1970-01."""
    values = _broadcast(values, n)
    step = months.as_py()
    out: list[dt.datetime | None] = []
    for v in values.to_pylist():
        if v is None:
            out.append(None)
            continue
        index = (v.year - 1970) * 12 + v.month - 1
        start = index - index % step  # Python's % floors: bins before 1970 too
        out.append(dt.datetime(1970 + start // 12, start % 12 + 1, 1))
    return pa.array(out, pa.timestamp("us")).cast(values.type)


def _try_cast(n: int, values: Any, out_type: pa.DataType) -> pa.Array:
    """``TRY_CAST``: the cast, NULL for each value that cannot be cast."""
    values = _broadcast(values, n)
    if _is_text_type(values.type) and (pa.types.is_timestamp(out_type) or pa.types.is_date(out_type)):
        return pa.array([None if v is None else _text_to_time(v, out_type) for v in values.to_pylist()], out_type)
    try:
        return _sql_cast(values, out_type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out: list[Any] = []
    for i in range(len(values)):
        try:
            out.append(_sql_cast(values.slice(i, 1), out_type)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            out.append(None)
    return pa.array(out, out_type)


def _like_regex(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """A SQL LIKE pattern (``%`` any text, ``_`` one character, backslash escapes) as a regex."""
    parts, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        parts.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(parts), re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _like_rows(ignore_case: bool) -> Callable[..., pa.Array]:
    """``s LIKE pattern`` with a pattern per row."""

    def kernel(n: int, strings: Any, patterns: Any) -> pa.Array:
        cache: dict[str, re.Pattern[str]] = {}
        out: list[bool | None] = []
        for s, p in zip(*_rows(n, strings, patterns), strict=True):
            if s is None or p is None:
                out.append(None)
                continue
            if p not in cache:
                cache[p] = _like_regex(p, ignore_case)
            out.append(cache[p].fullmatch(s) is not None)
        return pa.array(out, pa.bool_())

    return kernel


def _to_char(n: int, values: Any, fmt: Any) -> pa.Array:
    """A date or timestamp as text in a chrono format (``%.f``: a fraction with its dot)."""
    values = _broadcast(values, n)
    pattern = fmt.as_py().replace("%.f", ".%f")
    out: list[str | None] = []
    for v in values.to_pylist():
        out.append(None if v is None else v.strftime(pattern))
    return pa.array(out, pa.string())


def _overlay(s: str, replacement: str, position: int, count: int | None = None) -> str:
    if position < 1:
        raise pa.ArrowInvalid("negative substring length not allowed")
    count = len(replacement) if count is None else count
    start = max(position - 1, 0)
    return s[:start] + replacement + s[max(position - 1 + count, 0):]


# -- regular expressions -------------------------------------------------------------------


def _regexp_match(n: int, strings: pa.Array | pa.Scalar, pattern: pa.Scalar | pa.Array, flags: pa.Scalar | pa.Array | None = None) -> pa.Array:
    strings = _broadcast(strings, n)
    pat = pattern[0] if isinstance(pattern, pa.Array) else pattern
    flag_text = "" if flags is None else ((flags[0] if isinstance(flags, pa.Array) else flags).as_py() or "")
    regex = re.compile(f"(?{flag_text}){pat.as_py()}" if flag_text else pat.as_py())
    out: list[list[str | None] | None] = []
    for s in strings.to_pylist():
        m = None if s is None else regex.search(s)
        if m is None:
            out.append(None)
        else:
            out.append(list(m.groups()) if regex.groups else [m.group(0)])
    return pa.array(out, pa.list_(pa.string()))


def _regexp_match_flags(n: int, strings: Any, pattern: Any, flags: Any) -> pa.Array:
    return _regexp_match(n, strings, pattern, flags)


# -- JSON ----------------------------------------------------------------------------------

_MISSING = object()
_PATH_TOKEN = re.compile(r"\.([\w$]+)|\[(\d+|\*)\]|\[\s*'((?:[^']|'')*)'\s*\]|\[\s*\"((?:[^\"]|\"\")*)\"\s*\]|\.\*")


def _parse_path(path: str) -> list[str | int | None]:
    """``$.a[1].b`` → ``["a", 1, "b"]``; None stands for a wildcard (``[*]`` / ``.*``)."""
    text = path.strip()
    if not text.startswith("$"):
        text = "$." + text
    steps: list[str | int | None] = []
    pos = 1
    while pos < len(text):
        m = _PATH_TOKEN.match(text, pos)
        if m is None:
            raise pa.ArrowInvalid(f"Invalid JSONPath {path!r}")
        if m.group(1) is not None:
            steps.append(m.group(1))
        elif m.group(2) is not None:
            steps.append(None if m.group(2) == "*" else int(m.group(2)))
        elif m.group(3) is not None:
            steps.append(m.group(3).replace("''", "'"))
        elif m.group(4) is not None:
            steps.append(m.group(4).replace('""', '"'))
        else:
            steps.append(None)
        pos = m.end()
    return steps


def _select(doc: Any, steps: list[str | int | None]) -> list[Any]:
    """Every value the path selects (several only through wildcards)."""
    current = [doc]
    for step in steps:
        nxt: list[Any] = []
        for v in current:
            if step is None:
                if isinstance(v, list):
                    nxt.extend(v)
                elif isinstance(v, dict):
                    nxt.extend(v.values())
            elif isinstance(step, int):
                if isinstance(v, list) and step < len(v):
                    nxt.append(v[step])
            elif isinstance(v, dict) and step in v:
                nxt.append(v[step])
        current = nxt
    return current


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class _Walked(list):
    """Documents already parsed and walked down a ``json_get`` chain (:func:`_via`)."""


def _via(kernel: Callable[..., pa.Array]) -> Callable[..., pa.Array]:
    """``kernel`` applied to the members reached from each document by the JSON-encoded list
    of keys ``steps`` (what ``json_get(json_get(doc, k1), k2)`` would hand it as JSONB)."""

    def walked(n: int, column: Any, steps: Any, *rest: Any) -> pa.Array:
        keys = json.loads(steps.as_py())
        docs = _Walked()
        for doc in _docs(n, column):
            for key in keys:
                if doc is _MISSING:
                    break
                doc = _member(doc, key)
            docs.append(doc)
        return kernel(n, docs, *rest)

    return walked


def _docs(n: int, column: pa.Array | pa.Scalar | _Walked) -> list[Any]:
    """Per row, the JSON document as Python values (:data:`_MISSING` for NULL). JSON text
    (``arrow.json`` storage) is parsed; binary is Lance's JSONB (``json_get``'s result), and
    bytes that are not a JSONB document are NULL, as pylance reads them."""
    if isinstance(column, _Walked):
        return column
    column = _broadcast(column, n)
    if isinstance(column.type, pa.BaseExtensionType):
        column = column.storage
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return [_MISSING if b is None else _jsonb_doc(b) for b in column.to_pylist()]
    return [_MISSING if s is None else json.loads(s) for s in column.to_pylist()]


def _jsonb_doc(raw: bytes) -> Any:
    try:
        return decode_jsonb(raw)
    except (JsonbError, UnicodeDecodeError, struct.error):
        return _MISSING


def _texts(n: int, arg: pa.Scalar | pa.Array) -> list[str | None]:
    """Per row, the argument as text (a JSON path, key or value may be a column); None for NULL."""
    return [None if v is None else str(v) for v in _broadcast(arg, n).to_pylist()]


def _paths(n: int, path: Any) -> list[list[str | int | None] | None]:
    """Per row, the parsed JSONPath (None for a NULL path); each distinct path parsed once."""
    cache: dict[str, list[str | int | None]] = {}
    out: list[list[str | int | None] | None] = []
    for text in _texts(n, path):
        if text is None:
            out.append(None)
            continue
        steps = cache.get(text)
        if steps is None:
            steps = cache[text] = _parse_path(text)
        out.append(steps)
    return out


def _json_extract(n: int, column: Any, path: Any) -> pa.Array:
    out: list[str | None] = []
    for doc, steps in zip(_docs(n, column), _paths(n, path), strict=True):
        if doc is _MISSING or steps is None:
            out.append(None)
            continue
        found = _select(doc, steps)
        if not found:
            out.append(None)
        else:
            out.append(_dump(found[0]) if len(found) == 1 else _dump(found))
    return pa.array(out, pa.string())


def _json_exists(n: int, column: Any, path: Any) -> pa.Array:
    return pa.array(
        [
            None if d is _MISSING or steps is None else bool(_select(d, steps))
            for d, steps in zip(_docs(n, column), _paths(n, path), strict=True)
        ],
        pa.bool_(),
    )


def _json_array_length(n: int, column: Any, path: Any) -> pa.Array:
    out: list[int | None] = []
    for doc, steps in zip(_docs(n, column), _paths(n, path), strict=True):
        found = [] if doc is _MISSING or steps is None else _select(doc, steps)
        out.append(None if not found else (len(found[0]) if isinstance(found[0], list) else 0))
    return pa.array(out, pa.int64())


def _scalar_text(value: Any) -> str:
    """How pylance prints a JSON scalar as a string: strings bare, the rest as JSON."""
    return value if isinstance(value, str) else _dump(value)


def _json_array_contains(n: int, column: Any, path: Any, value: Any) -> pa.Array:
    out: list[bool | None] = []
    rows = zip(_docs(n, column), _paths(n, path), _texts(n, value), strict=True)
    for doc, steps, wanted in rows:
        if doc is _MISSING or steps is None or wanted is None:
            out.append(None)
            continue
        found = _select(doc, steps)
        items = found[0] if found and isinstance(found[0], list) else []
        out.append(any(_scalar_text(v) == wanted for v in items if v is not None))
    return pa.array(out, pa.bool_())


def _member(doc: Any, key: str | None) -> Any:
    """The member ``key`` of an object, or the element at index ``key`` (a non-negative
    decimal) of an array; ``_MISSING`` when absent or when the document or key is NULL."""
    if key is None:
        return _MISSING
    if isinstance(doc, dict):
        return doc.get(key, _MISSING)
    if isinstance(doc, list) and re.fullmatch(r"\d+", key) and int(key) < len(doc):
        return doc[int(key)]
    return _MISSING


def _get(n: int, column: Any, key: Any) -> list[Any]:
    members = (_member(d, k) for d, k in zip(_docs(n, column), _texts(n, key), strict=True))
    return [None if v is _MISSING else v for v in members]


def _cast_error(what: str, value: Any) -> pa.ArrowInvalid:
    return pa.ArrowInvalid(f"Failed to convert JSON value {_dump(value)} to {what}")


def _json_get_string(n: int, column: Any, key: Any) -> pa.Array:
    out: list[str | None] = []
    for v in _get(n, column, key):
        if isinstance(v, (list, dict)):
            raise _cast_error("string", v)
        out.append(None if v is None else _scalar_text(v))
    return pa.array(out, pa.string())


def _round_half_away(x: float) -> int:
    return math.floor(abs(x) + 0.5) * (1 if x >= 0 else -1)


def _json_get_int(n: int, column: Any, key: Any) -> pa.Array:
    out: list[int | None] = []
    for v in _get(n, column, key):
        if v is None:
            out.append(None)
        elif isinstance(v, bool):
            out.append(int(v))
        elif isinstance(v, int) and -(2**63) <= v < 2**63:
            out.append(v)
        elif isinstance(v, float) and math.isfinite(v) and abs(v) < 2**63:
            out.append(_round_half_away(v))
        elif isinstance(v, str) and re.fullmatch(r"[+-]?\d+", v) and -(2**63) <= int(v) < 2**63:
            out.append(int(v))
        else:
            raise _cast_error("an integer", v)
    return pa.array(out, pa.int64())


def _json_get_float(n: int, column: Any, key: Any) -> pa.Array:
    out: list[float | None] = []
    for v in _get(n, column, key):
        if v is None:
            out.append(None)
        elif isinstance(v, (bool, int, float)):
            out.append(float(v))
        else:
            try:
                out.append(float(v) if isinstance(v, str) and v.strip() == v and "_" not in v else float("x"))
            except ValueError:
                raise _cast_error("a float", v) from None
    return pa.array(out, pa.float64())


def _json_get_bool(n: int, column: Any, key: Any) -> pa.Array:
    out: list[bool | None] = []
    for v in _get(n, column, key):
        if v is None or isinstance(v, bool):
            out.append(v)
        elif v in ("true", "false"):
            out.append(v == "true")
        else:
            raise _cast_error("a boolean", v)
    return pa.array(out, pa.bool_())


_JSONB_U32 = struct.Struct(">I")
_JSONB_F64 = struct.Struct(">d")


def _jsonb_number(value: int | float) -> bytes:
    """A JSONB number: ``0x00`` for integer zero, ``0x50`` + the shortest of 1/2/4/8 unsigned
    big-endian bytes for a positive integer, ``0x40`` + the shortest two's complement for a
    negative one, ``0x60`` + a big-endian float64 for a float."""
    if isinstance(value, float):
        return b"\x60" + _JSONB_F64.pack(value)
    if value == 0:
        return b"\x00"
    signed = value < 0
    for width in (1, 2, 4, 8):
        try:
            return (b"\x40" if signed else b"\x50") + value.to_bytes(width, "big", signed=signed)
        except OverflowError:
            continue
    raise pa.ArrowInvalid(f"JSON number {value} does not fit in 64 bits")


def _jsonb_entry(value: Any) -> tuple[int, bytes]:
    """(entry type << 28, data) of one element inside a container."""
    if value is None:
        return 0x0 << 28, b""
    if value is True:
        return 0x4 << 28, b""
    if value is False:
        return 0x3 << 28, b""
    if isinstance(value, str):
        return 0x1 << 28, value.encode("utf-8")
    if isinstance(value, (int, float)):
        return 0x2 << 28, _jsonb_number(value)
    return 0x5 << 28, _jsonb(value)


def _jsonb(value: Any) -> bytes:
    """``value`` (parsed JSON) as a Lance JSONB document, the inverse of
    :func:`lance_gpu.file.jsonb.decode_jsonb`: a u32 header (kind << 28 | count), one u32
    entry (type << 28 | data length) per element (an object: its keys, then its values,
    keys sorted by their UTF-8 bytes), then the elements' data; a scalar is a header of kind
    0x2 with one entry."""
    if isinstance(value, list):
        header, items = 0x8 << 28 | len(value), [_jsonb_entry(v) for v in value]
    elif isinstance(value, dict):
        keys = sorted(value, key=lambda k: k.encode("utf-8"))
        header = 0x4 << 28 | len(keys)
        items = [_jsonb_entry(k) for k in keys] + [_jsonb_entry(value[k]) for k in keys]
    else:
        header, items = 0x2 << 28, [_jsonb_entry(value)]
    parts = [_JSONB_U32.pack(header)]
    parts += [_JSONB_U32.pack(kind | len(data)) for kind, data in items]
    parts += [data for _kind, data in items]
    return b"".join(parts)


def _json_get(n: int, column: Any, key: Any) -> pa.Array:
    """``json_get(doc, key)``: the member ``key`` of an object, or the element at index
    ``key`` (a non-negative decimal) of an array, as a JSONB document; NULL when absent."""
    members = (_member(d, k) for d, k in zip(_docs(n, column), _texts(n, key), strict=True))
    return pa.array([None if v is _MISSING else _jsonb(v) for v in members], pa.large_binary())


# -- strings and numbers with column arguments (row by row; DataFusion's semantics) ---------


def _rows(n: int, *args: Any) -> list[list[Any]]:
    return [_broadcast(a, n).to_pylist() for a in args]


def _rowwise(fn: Callable[..., Any], out_type: pa.DataType) -> Callable[..., pa.Array]:
    """A kernel applying ``fn`` to each row's values; NULL where any argument is NULL."""

    def kernel(n: int, *args: Any) -> pa.Array:
        columns = _rows(n, *args)
        return pa.array(
            [None if any(v is None for v in row) else fn(*row) for row in zip(*columns, strict=True)], out_type
        )

    return kernel


def _left(s: str, k: int) -> str:
    return s[:k] if k >= 0 else s[: max(0, len(s) + k)]


def _right(s: str, k: int) -> str:
    if k == 0:
        return ""
    return s[-k:] if k > 0 else s[min(len(s), -k) :]


def _pad(left: bool) -> Callable[..., str]:
    def pad(s: str, width: int, fill: str = " ") -> str:
        if width <= 0:
            return ""
        if len(s) >= width:
            return s[:width]
        if not fill:
            return s
        need = width - len(s)
        padding = (fill * (need // len(fill) + 1))[:need]
        return padding + s if left else s + padding

    return pad


def _row_matches(n: int, strings: Any, patterns: Any, flags: Any) -> list[re.Match[str] | bool | None]:
    """Per row, the first match of the row's pattern under the row's flags (NULL flags: none;
    empty flags fail, as pylance builds ``(?)``), None without one, False where the string or
    the pattern is NULL; a pattern that does not compile fails the query, as in pylance."""
    cache: dict[tuple[str, str | None], re.Pattern[str]] = {}
    out: list[re.Match[str] | bool | None] = []
    for s, p, f in zip(*_rows(n, strings, patterns, flags), strict=True):
        if s is None or p is None:
            out.append(False)
            continue
        regex = cache.get((p, f))
        if regex is None:
            try:
                regex = cache[(p, f)] = re.compile(p if f is None else f"(?{f}){p}")
            except re.error as e:
                raise pa.ArrowInvalid(f"Regular expression did not compile: {p!r} (flags {f!r}): {e}") from None
        out.append(regex.search(s))
    return out


def _regexp_like_rows(n: int, strings: Any, patterns: Any, flags: Any) -> pa.Array:
    """``regexp_like(s, pattern[, flags])`` with a pattern per row."""
    found = _row_matches(n, strings, patterns, flags)
    return pa.array([None if m is False else m is not None for m in found], pa.bool_())


def _regexp_match_rows(n: int, strings: Any, patterns: Any, flags: Any) -> pa.Array:
    """``regexp_match(s, pattern[, flags])`` with a pattern per row."""
    out: list[list[str | None] | None] = []
    for m in _row_matches(n, strings, patterns, flags):
        if m is False or m is None or m is True:
            out.append(None)
        else:
            out.append(list(m.groups()) if m.re.groups else [m.group(0)])
    return pa.array(out, pa.list_(pa.string()))


def _round_rows(n: int, values: Any, digits: Any) -> pa.Array:
    """``round(x, d)`` with ``d`` per row: ``round_half_away(x * 10^d) / 10^d`` in float64,
    as DataFusion computes it (an overflowing scale gives NaN)."""
    x = pc.cast(_broadcast(values, n), pa.float64())
    d = pc.cast(_broadcast(digits, n), pa.float64())
    valid = pc.and_(pc.is_valid(x), pc.is_valid(d)).to_numpy(zero_copy_only=False)
    xv = pc.fill_null(x, 0.0).to_numpy(zero_copy_only=False)
    dv = pc.fill_null(d, 0.0).to_numpy(zero_copy_only=False)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        scale = np.power(10.0, dv)
        y = xv * scale
        r = np.trunc(y)
        r = np.where(np.abs(y - r) >= 0.5, r + np.sign(y), r)
        out = r / scale
    return pa.array(out, pa.float64(), mask=~valid)


def _strpos(n: int, strings: Any, subs: Any) -> pa.Array:
    """``strpos(s, sub)``: the 1-based character position of the first ``sub`` in ``s`` (0:
    absent, 1 for an empty ``sub``); NULL where either is NULL. Byte positions from Arrow
    where every string is ASCII, else counted in characters row by row."""
    values = _broadcast(strings, n)
    if isinstance(subs, pa.Scalar) and subs.is_valid and pc.all(pc.string_is_ascii(values)).as_py() is not False:
        return pc.add(pc.find_substring(values, pattern=subs.as_py()), 1)
    return pa.array(
        [None if v is None or t is None else v.find(t) + 1 for v, t in zip(*_rows(n, values, subs), strict=True)],
        pa.int64(),
    )


def _levenshtein(a: str, b: str) -> int:
    """Edit distance in characters (insertions, deletions, substitutions of one each)."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def _translate(s: str, src: str, dst: str) -> str:
    """Each character of ``src`` in ``s`` becomes the one at its position in ``dst`` (deleted
    where ``dst`` is shorter); the first occurrence in ``src`` decides."""
    table: dict[str, str | None] = {}
    for k, ch in enumerate(src):
        table.setdefault(ch, dst[k] if k < len(dst) else None)
    return "".join(c if c not in table else (table[c] or "") for c in s)


def _substr_index(s: str, delim: str, count: int) -> str:
    """MySQL's / DataFusion's ``substr_index``: ``s`` up to the ``count``-th ``delim`` (from
    the end for a negative ``count``); '' for a zero count or an empty delimiter."""
    if count == 0 or delim == "":
        return ""
    parts = s.split(delim)
    return delim.join(parts[:count] if count > 0 else parts[count:])


def _find_in_set(item: str, items: str) -> int:
    """1-based position of ``item`` in the comma-separated ``items`` (0: absent)."""
    for k, part in enumerate(items.split(","), 1):
        if part == item:
            return k
    return 0


def _encode(s: str, how: str) -> str:
    data = s.encode()
    if how == "hex":
        return data.hex()
    return base64.b64encode(data).decode().rstrip("=")  # DataFusion's base64: no padding


def _initcap(text: str) -> str:
    """DataFusion's ``initcap``: each character upper-cased after a non-alphanumeric one (or
    first), lower-cased after an alphanumeric one, character by character."""
    out: list[str] = []
    after_alnum = False
    for ch in text:
        out.append(ch.lower() if after_alnum else ch.upper())
        after_alnum = ch.isalnum()
    return "".join(out)


def _case_kernel(arrow: Callable[[pa.Array], pa.Array], python: Callable[[str], str]) -> Callable[..., pa.Array]:
    """``upper`` / ``lower`` / ``initcap``: Arrow's kernel on ASCII text; otherwise Unicode's
    full case mappings row by row, as Rust's (``ß`` → ``SS``, a final ``Σ`` → ``ς``)."""

    def kernel(n: int, strings: Any) -> pa.Array:
        values = _broadcast(strings, n)
        if pc.all(pc.string_is_ascii(values)).as_py() is not False:
            return arrow(values)
        return pa.array([None if v is None else python(v) for v in values.to_pylist()], values.type)

    return kernel


def float_text(value: float, single: bool) -> str:
    """``value`` as DataFusion casts a float to a string (Rust's ``ryu`` layout): the
    shortest digits that read back as the same float32 / float64, written plainly while the
    decimal exponent is small (up to 16 integer digits for float64, 13 for float32; up to 4
    / 5 zeros after the point) and as ``1.5e20`` / ``1e-7`` beyond; ``NaN``, ``inf``, ``-0.0``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    text = np.format_float_scientific(np.float32(value) if single else np.float64(value), unique=True, trim="-")
    sign = "-" if text.startswith("-") else ""
    mantissa, exponent = text.lstrip("-").split("e")
    digits = mantissa.replace(".", "")
    length = len(digits)
    kk = int(exponent) + 1  # 10^(kk-1) <= |value| < 10^kk
    k = kk - length
    widest, smallest = (13, -6) if single else (16, -5)
    if 0 <= k and kk <= widest:
        body = digits + "0" * k + ".0"
    elif 0 < kk <= widest:
        body = digits[:kk] + "." + digits[kk:]
    elif smallest < kk <= 0:
        body = "0." + "0" * -kk + digits
    elif length == 1:
        body = f"{digits}e{kk - 1}"
    else:
        body = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return sign + body


def _float_text(n: int, values: Any) -> pa.Array:
    array = _broadcast(values, n)
    single = pa.types.is_float32(array.type)
    return pa.array([None if v is None else float_text(v, single) for v in array.to_pylist()], pa.string())


# -- decimal arithmetic --------------------------------------------------------------------
#
# DataFusion evaluates arithmetic on decimals (and on uint64 with a signed integer, which it
# coerces to Decimal128(20, 0)) with arrow-rs's decimal kernels: each operand is rescaled to
# the result's scale in 128-bit integers, ``/`` and ``%`` truncate toward zero, a zero
# divisor or a 128-bit overflow fails the query.  These kernels do the same on exact Python
# integers (the unscaled values), so no digit is lost; integer-only ``%`` stays in numpy.

_I128_MIN, _I128_MAX = -(2**127), 2**127 - 1
_LOW_64 = 2**64 - 1


def _valid_mask(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _unscaled(n: int, arg: pa.Array | pa.Scalar) -> tuple[np.ndarray, np.ndarray, int]:
    """The operand's unscaled values (Python ints in an object array; 0 where NULL), its
    validity and its scale (0 for integers)."""
    arr = _broadcast(arg, n)
    t = arr.type
    valid = _valid_mask(arr)
    if pa.types.is_decimal128(t):
        words = np.frombuffer(arr.buffers()[1], dtype=np.uint64, count=2 * (arr.offset + n))
        words = words[2 * arr.offset :].reshape(n, 2)
        low = words[:, 0].astype(object)
        high = np.ascontiguousarray(words[:, 1]).view(np.int64).astype(object)
        values = low + high * (1 << 64)
        return np.where(valid, values, 0), valid, t.scale
    if pa.types.is_integer(t):
        return arr.fill_null(0).to_numpy(zero_copy_only=False).astype(object), valid, 0
    raise TypeError(f"decimal arithmetic on {t}")  # pragma: no cover - the compiler checks types


def _decimal_array(values: np.ndarray, valid: np.ndarray, out_type: pa.DataType) -> pa.Array:
    """A decimal128 array of the unscaled Python ints ``values`` (NULL where not ``valid``)."""
    n = len(values)
    values = np.where(valid, values, 0)
    data = np.empty((n, 2), dtype=np.uint64)
    data[:, 0] = (values & _LOW_64).astype(np.uint64)
    data[:, 1] = (values >> 64).astype(np.int64).view(np.uint64)
    return _with_validity(pa.py_buffer(data.tobytes()), valid, out_type)


def _with_validity(data: pa.Buffer, valid: np.ndarray, out_type: pa.DataType) -> pa.Array:
    n = len(valid)
    if valid.all():
        return pa.Array.from_buffers(out_type, n, [None, data], null_count=0)
    mask = pa.array(valid, pa.bool_()).buffers()[1]
    return pa.Array.from_buffers(out_type, n, [mask, data], null_count=int(n - valid.sum()))


def _overflow_check(values: np.ndarray, what: str) -> None:
    if len(values) and bool(np.any((values > _I128_MAX) | (values < _I128_MIN))):
        raise DecimalArithmeticError(f"Arithmetic overflow: Overflow happened on: {what}")


def _zero_check(divisors: np.ndarray) -> None:
    if len(divisors) and bool(np.any(divisors == 0)):
        raise DecimalArithmeticError("Divide by zero error")


def _truncated(x: np.ndarray, y: np.ndarray, remainder: bool) -> np.ndarray:
    """``x / y`` or ``x % y`` on Python ints, truncated toward zero (Rust's semantics)."""
    ax, ay = np.abs(x), np.abs(y)
    if remainder:
        r = ax % ay
        return np.where(x < 0, -r, r)
    q = ax // ay
    return np.where((x < 0) != (y < 0), -q, q)


def _decimal_kernel(op: str) -> Callable[..., pa.Array]:
    """The arrow-rs decimal kernel of ``op`` (add, sub, mul, div, mod) for operands that
    are decimal128 or integers (integers are decimals of scale 0)."""

    def kernel(n: int, left: Any, right: Any, *, out_type: pa.DataType) -> pa.Array:
        if op == "mod" and _is_int_operand(left) and _is_int_operand(right):
            return _integer_mod(n, left, right, out_type)
        a, valid_a, sa = _unscaled(n, left)
        b, valid_b, sb = _unscaled(n, right)
        valid = valid_a & valid_b
        a, b = a[valid], b[valid]
        scale = out_type.scale
        if op in ("add", "sub", "mod"):
            a, b = a * 10 ** (scale - sa), b * 10 ** (scale - sb)
            _overflow_check(a, f"{op} rescale")
            _overflow_check(b, f"{op} rescale")
            if op == "mod":
                _zero_check(b)
                out = _truncated(a, b, remainder=True)
            else:
                out = a + b if op == "add" else a - b
        elif op == "mul":
            out = a * b
        else:  # div: the dividend is scaled up by 10 ** (scale - sa + sb), as arrow-rs
            shift = scale - sa + sb
            a, b = (a * 10**shift, b) if shift >= 0 else (a, b * 10**-shift)
            _overflow_check(a, "div rescale")
            _overflow_check(b, "div rescale")
            _zero_check(b)
            out = _truncated(a, b, remainder=False)
        _overflow_check(out, op)
        full = np.zeros(n, dtype=object)
        full[valid] = out
        return _decimal_array(full, valid, out_type)

    return kernel


def _is_int_operand(value: pa.Array | pa.Scalar) -> bool:
    return pa.types.is_integer(value.type)


def _sign_and_magnitude(n: int, arg: pa.Array | pa.Scalar) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An integer operand as (negative, |value| as uint64, valid) numpy arrays."""
    arr = _broadcast(arg, n)
    valid = _valid_mask(arr)
    values = arr.fill_null(0).to_numpy(zero_copy_only=False)
    if pa.types.is_signed_integer(arr.type):
        signed = values.astype(np.int64)
        # |int64 min| wraps to int64 min, whose uint64 view is 2**63: the right magnitude
        return signed < 0, np.abs(signed).view(np.uint64), valid
    return np.zeros(n, dtype=bool), values.astype(np.uint64), valid


def _integer_mod(n: int, left: Any, right: Any, out_type: pa.DataType) -> pa.Array:
    """``%`` of two integers as a scale-0 decimal, on uint64 magnitudes (no Python ints)."""
    neg_a, mag_a, valid_a = _sign_and_magnitude(n, left)
    _, mag_b, valid_b = _sign_and_magnitude(n, right)
    valid = valid_a & valid_b
    if bool(np.any(valid & (mag_b == 0))):
        raise DecimalArithmeticError("Divide by zero error")
    with np.errstate(divide="ignore"):
        rem = np.where(valid, mag_a % np.where(mag_b == 0, 1, mag_b), 0).astype(np.uint64)
    negative = neg_a & (rem != 0)
    data = np.empty((n, 2), dtype=np.uint64)
    data[:, 0] = np.where(negative, ~rem + np.uint64(1), rem)  # two's complement of -rem
    data[:, 1] = np.where(negative, np.uint64(_LOW_64), np.uint64(0))
    return _with_validity(pa.py_buffer(data.tobytes()), valid, out_type)


_DECIMAL_KERNELS = {f"decimal_{op}": _decimal_kernel(op) for op in ("add", "sub", "mul", "div", "mod")}


_KERNELS: dict[str, Callable[..., pa.Array]] = {
    **{f"list_{op}": _list_compare(op) for op in _ORDER_TESTS},
    "list_element": _list_element,
    "list_sort": _list_kernel(_null_if_none(_sort), _same_list),
    "list_distinct": _list_kernel(_null_if_none(_distinct), _same_list),
    "list_reverse": _list_kernel(_null_if_none(lambda v: v[::-1]), _same_list),
    "list_pop_back": _list_kernel(_null_if_none(lambda v: v[:-1]), _same_list),
    "list_pop_front": _list_kernel(_null_if_none(lambda v: v[1:]), _same_list),
    "list_flatten": _list_kernel(_null_if_none(lambda v: [x for inner in v if inner is not None for x in inner]),
                                 lambda ts: pa.list_(ts[0].value_type.value_type)),
    "list_max": _list_extreme(True),
    "list_min": _list_extreme(False),
    "list_any_value": _list_kernel(_null_if_none(lambda v: next((x for x in v if x is not None), None)), _item),
    "list_slice": _list_kernel(_slice, _same_list),
    "list_append": _list_kernel(lambda v, x: [*(v or []), x], _same_list),
    "list_prepend": _list_kernel(lambda v, x: [x, *(v or [])], _same_list),
    "list_concat": _list_kernel(_concat, _same_list),
    "list_remove": _list_kernel(_remove(False), _same_list),
    "list_remove_all": _list_kernel(_remove(True), _same_list),
    "list_positions": _list_kernel(_positions, lambda ts: pa.list_(pa.uint64())),
    "list_has_any_rows": _list_kernel(_has_rows(False), lambda ts: pa.bool_()),
    "list_has_all_rows": _list_kernel(_has_rows(True), lambda ts: pa.bool_()),
    "to_char": _to_char,
    "date_bin_months": _date_bin_months,
    "like_rows": _like_rows(False),
    "ilike_rows": _like_rows(True),
    "uuid": lambda n, draws: pa.array([str(uuid.uuid4()) for _ in range(len(_broadcast(draws, n)))], pa.string()),
    "make_list": _make_list,
    "decode_hex": _rowwise(_decode_text("hex"), pa.binary()),
    "decode_base64": _rowwise(_decode_text("base64"), pa.binary()),
    **{f"digest_{how}": _rowwise(lambda s, how=how: hashlib.new(how, s.encode()).digest(), pa.binary())
       for how in ("md5", "sha224", "sha256", "sha384", "sha512", "blake2s", "blake2b")},
    "range": _rowwise(_series(False), pa.list_(pa.int64())),
    "generate_series": _rowwise(_series(True), pa.list_(pa.int64())),
    "array_distance": _rowwise(_distance, pa.float64()),
    "list_union": _list_kernel(_set_op("union"), _same_list),
    "list_intersect": _list_kernel(_set_op("intersect"), _same_list),
    "list_except": _list_kernel(_set_op("except"), _same_list),
    "list_replace_n": _list_kernel(_replace_n, _same_list),
    "list_remove_n": _list_kernel(_remove_n, _same_list),
    "list_dims": _dims,
    "list_repeat": _list_kernel(_repeat_list, lambda ts: pa.list_(ts[0])),
    "list_resize": _list_kernel(_resize, _same_list),
    "regexp_instr": _regexp_instr,
    "overlay": _rowwise(_overlay, pa.string()),
    "cardinality": _cardinality,
    "array_position": _array_position,
    "string_to_array": _string_to_array,
    "array_to_string": _array_to_string,
    "substr": _rowwise(_substr, pa.string()),
    "cbrt": _cbrt,
    "gcd": _rowwise(math.gcd, pa.int64()),
    "lcm": _rowwise(math.lcm, pa.int64()),
    "factorial": _rowwise(_factorial, pa.int64()),
    "chr": _rowwise(_chr, pa.string()),
    "concat_ws": _concat_ws,
    **{f"to_timestamp_{unit}": _to_timestamp(unit) for unit in ("s", "ms", "us", "ns")},
    "make_date": _rowwise(_make_date, pa.date32()),
    "json_get": _json_get,
    "starts_with_rows": _rowwise(str.startswith, pa.bool_()),
    "ends_with_rows": _rowwise(str.endswith, pa.bool_()),
    "contains_rows": _rowwise(lambda s, p: p in s, pa.bool_()),
    "regexp_like_rows": _regexp_like_rows,
    "regexp_match_rows": _regexp_match_rows,
    "left": _rowwise(_left, pa.string()),
    "right": _rowwise(_right, pa.string()),
    "lpad": _rowwise(_pad(True), pa.string()),
    "rpad": _rowwise(_pad(False), pa.string()),
    "round_rows": _round_rows,
    "repeat_rows": _rowwise(lambda s, k: s * max(0, k), pa.string()),
    "strpos": _strpos,
    "ascii": _rowwise(lambda s: ord(s[0]) if s else 0, pa.int32()),
    "md5": _rowwise(lambda s: hashlib.md5(s.encode()).hexdigest(), pa.string_view()),
    "sha224": _rowwise(lambda s: hashlib.sha224(s.encode()).digest(), pa.binary()),
    "sha256": _rowwise(lambda s: hashlib.sha256(s.encode()).digest(), pa.binary()),
    "sha384": _rowwise(lambda s: hashlib.sha384(s.encode()).digest(), pa.binary()),
    "sha512": _rowwise(lambda s: hashlib.sha512(s.encode()).digest(), pa.binary()),
    "to_hex": _rowwise(lambda v: format(v & 0xFFFFFFFFFFFFFFFF, "x"), pa.string()),
    "translate": _rowwise(_translate, pa.string()),
    "levenshtein": _rowwise(_levenshtein, pa.int32()),
    "find_in_set": _rowwise(_find_in_set, pa.int32()),
    "substr_index": _rowwise(_substr_index, pa.string()),
    "encode": _rowwise(_encode, pa.string()),
    "upper": _case_kernel(pc.utf8_upper, str.upper),
    "lower": _case_kernel(pc.utf8_lower, str.lower),
    "initcap": _case_kernel(pc.utf8_title, _initcap),
    "float_text": _float_text,
    "array_has": _array_has,
    "array_has_any": _array_has_any,
    "array_has_all": _array_has_all,
    "regexp_match": _regexp_match,
    "regexp_match_flags": _regexp_match_flags,
    "json_extract": _json_extract,
    "json_exists": _json_exists,
    "json_array_length": _json_array_length,
    "json_array_contains": _json_array_contains,
    "json_get_string": _json_get_string,
    "json_get_int": _json_get_int,
    "json_get_float": _json_get_float,
    "json_get_bool": _json_get_bool,
}
_KERNELS.update({f"{kind}_via": _via(_KERNELS[kind]) for kind in [k for k in _KERNELS if k.startswith("json_")]})
