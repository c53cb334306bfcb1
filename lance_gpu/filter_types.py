# SPDX-License-Identifier: Apache-2.0
"""DataFusion's names of Arrow types, as ``arrow_cast(x, 'FixedSizeList(32, Float32)')`` takes
them and ``arrow_typeof(x)`` prints them in pylance 14.0.2 (DataFusion 50).

Grammar read by :func:`parse_type_name` (both DataFusion's older and newer spellings)::

    type   := NAME | NAME "(" args ")"
    NAME   := Int8 ... UInt64 | Float16/32/64 | Boolean | Null | Utf8 | LargeUtf8 | Utf8View
            | Binary | LargeBinary | BinaryView | Date32 | Date64
    Timestamp(unit[, tz])      unit: Second | Millisecond | Microsecond | Nanosecond | s | ms | us | µs | ns
                               tz:   None | Some("+00:00") | "UTC"
    Time32(unit) / Time64(unit) / Duration(unit)
    Decimal128(p, s) / Decimal256(p, s) / FixedSizeBinary(n)
    List([nullable] type) / LargeList(type) / FixedSizeList(n, type) / FixedSizeList(n x type)
    Dictionary(index type, value type) / Struct("a": type, ...) / Interval(MonthDayNano)

:func:`type_name` prints the newer spelling (``Timestamp(µs)``, ``FixedSizeList(2 x Float32)``,
``Struct("a": Int64)``) for the types it reads. Errors are :class:`ValueError` naming the text.
"""

from __future__ import annotations

import datetime as _dt
import re

import pyarrow as pa

__all__ = ["UNIT_PER_SECOND", "parse_date", "parse_timestamp", "parse_type_name", "type_name"]

_PRIMITIVES: dict[str, pa.DataType] = {
    "Int8": pa.int8(), "Int16": pa.int16(), "Int32": pa.int32(), "Int64": pa.int64(), "UInt8": pa.uint8(),
    "UInt16": pa.uint16(), "UInt32": pa.uint32(), "UInt64": pa.uint64(), "Float16": pa.float16(),
    "Float32": pa.float32(), "Float64": pa.float64(), "Boolean": pa.bool_(), "Utf8": pa.string(),
    "LargeUtf8": pa.large_string(), "Utf8View": pa.string_view(), "Binary": pa.binary(),
    "LargeBinary": pa.large_binary(), "BinaryView": pa.binary_view(), "Date32": pa.date32(), "Date64": pa.date64(),
    "Null": pa.null(),
}
_PRIMITIVE_NAMES = {t: name for name, t in _PRIMITIVES.items()}
_CONSTRUCTORS = frozenset([
    "Timestamp", "Time32", "Time64", "Duration", "Decimal128", "Decimal256", "FixedSizeBinary", "List",
    "LargeList", "FixedSizeList", "Dictionary", "Struct", "Interval",
])
_UNITS = {
    "Second": "s", "Millisecond": "ms", "Microsecond": "us", "Nanosecond": "ns",
    "s": "s", "ms": "ms", "us": "us", "µs": "us", "ns": "ns",
}
_UNIT_NAMES = {"s": "s", "ms": "ms", "us": "µs", "ns": "ns"}
_TOKEN = re.compile(r'\s*(?:(?P<num>\d+)|(?P<str>"(?:[^"\\]|\\.)*")|(?P<name>[A-Za-zµ_][A-Za-z0-9µ_]*)|(?P<punct>[(),:]))')


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None:
                raise self.error(f"unexpected {text[pos:].strip()[:10]!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def error(self, what: str) -> ValueError:
        return ValueError(f"unsupported Arrow type name {self.text!r}: {what}")

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, kind: str, value: str | None = None) -> str:
        tok = self.peek()
        if tok is None or tok[0] != kind or (value is not None and tok[1] != value):
            want = value or kind
            raise self.error(f"expected {want!r} at {' '.join(t[1] for t in self.tokens[self.i:]) or 'the end'!r}")
        self.i += 1
        return tok[1]

    def accept(self, kind: str, value: str | None = None) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == kind and (value is None or tok[1] == value):
            self.i += 1
            return True
        return False

    def number(self) -> int:
        return int(self.take("num"))

    def unit(self) -> str:
        name = self.take("name")
        if name not in _UNITS:
            raise self.error(f"unknown time unit {name!r}")
        return _UNITS[name]

    def time_zone(self) -> str | None:
        if self.accept("name", "None"):
            return None
        if self.accept("name", "Some"):
            self.take("punct", "(")
            tz = self.take("str")[1:-1]
            self.take("punct", ")")
            return tz
        return self.take("str")[1:-1]

    def type(self) -> pa.DataType:  # noqa: C901, PLR0911, PLR0912 - one branch per type constructor
        self.accept("name", "nullable")
        name = self.take("name")
        if name in _PRIMITIVES:
            return _PRIMITIVES[name]
        if name not in _CONSTRUCTORS:
            raise self.error(f"unknown type {name!r} (names are DataFusion's: Int64, Utf8, List(Int64), ...)")
        self.take("punct", "(")
        if name == "Timestamp":
            unit = self.unit()
            tz = self.time_zone() if self.accept("punct", ",") else None
            out: pa.DataType = pa.timestamp(unit, tz)
        elif name in ("Time32", "Time64"):
            unit = self.unit()
            try:
                out = pa.time32(unit) if name == "Time32" else pa.time64(unit)
            except ValueError:
                raise self.error(f"{name} does not take unit {unit!r}") from None
        elif name == "Duration":
            out = pa.duration(self.unit())
        elif name in ("Decimal128", "Decimal256"):
            precision = self.number()
            self.take("punct", ",")
            scale = self.number()
            try:
                out = pa.decimal128(precision, scale) if name == "Decimal128" else pa.decimal256(precision, scale)
            except (ValueError, pa.ArrowInvalid) as e:
                raise self.error(str(e)) from None
        elif name == "FixedSizeBinary":
            out = pa.binary(self.number())
        elif name in ("List", "LargeList"):
            item = self.type()
            out = pa.list_(item) if name == "List" else pa.large_list(item)
        elif name == "FixedSizeList":
            size = self.number()
            if not self.accept("punct", ","):
                self.take("name", "x")
            out = pa.list_(self.type(), size)
        elif name == "Dictionary":
            index = self.type()
            self.take("punct", ",")
            value = self.type()
            if not pa.types.is_integer(index):
                raise self.error("a dictionary's index type must be an integer")
            out = pa.dictionary(index, value)
        elif name == "Struct":
            fields: list[pa.Field] = []
            while not self.accept("punct", ")"):
                if fields:
                    self.take("punct", ",")
                field_name = self.take("str")[1:-1]
                self.take("punct", ":")
                fields.append(pa.field(field_name, self.type()))
            return pa.struct(fields)
        else:  # Interval
            kind = self.take("name")
            if kind != "MonthDayNano":
                raise self.error(f"Interval({kind}) has no pyarrow type (only MonthDayNano)")
            out = pa.month_day_nano_interval()
        self.take("punct", ")")
        return out


def parse_type_name(text: str) -> pa.DataType:
    """The Arrow type DataFusion names ``text`` (see the module docstring)."""
    reader = _Reader(text)
    t = reader.type()
    if reader.peek() is not None:
        raise reader.error(f"unexpected {reader.peek()[1]!r} after the type")  # type: ignore[index]
    return t


def type_name(t: pa.DataType) -> str:  # noqa: PLR0911 - one return per type kind
    """DataFusion's name of ``t``, as ``arrow_typeof`` prints it; ValueError for a type it
    does not name here (maps, unions, views of lists, extension types)."""
    if t in _PRIMITIVE_NAMES:
        return _PRIMITIVE_NAMES[t]
    if pa.types.is_timestamp(t):
        unit = _UNIT_NAMES[t.unit]
        return f'Timestamp({unit}, "{t.tz}")' if t.tz else f"Timestamp({unit})"
    if pa.types.is_time32(t) or pa.types.is_time64(t):
        return f"Time{t.bit_width}({_UNIT_NAMES[t.unit]})"
    if pa.types.is_duration(t):
        return f"Duration({_UNIT_NAMES[t.unit]})"
    if pa.types.is_decimal(t):
        return f"Decimal{t.bit_width}({t.precision}, {t.scale})"
    if pa.types.is_fixed_size_binary(t):
        return f"FixedSizeBinary({t.byte_width})"
    if pa.types.is_fixed_size_list(t):
        return f"FixedSizeList({t.list_size} x {type_name(t.value_type)})"
    if pa.types.is_list(t):
        return f"List({type_name(t.value_type)})"
    if pa.types.is_large_list(t):
        return f"LargeList({type_name(t.value_type)})"
    if pa.types.is_dictionary(t):
        return f"Dictionary({type_name(t.index_type)}, {type_name(t.value_type)})"
    if pa.types.is_struct(t):
        return "Struct(" + ", ".join(f'"{f.name}": {type_name(f.type)}' for f in t) + ")"
    if t == pa.month_day_nano_interval():
        return "Interval(MonthDayNano)"
    raise ValueError(f"no DataFusion name for {t} here")


# -- date and time text (CAST, to_timestamp) -------------------------------------------------

_TS_RE = re.compile(
    r"\s*(\d{4})-(\d{2})-(\d{2})"
    r"(?:[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?)?"
    r"\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?\s*"
)
_DATE_RE = re.compile(r"\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*")
_EPOCH = _dt.date(1970, 1, 1)
UNIT_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def parse_timestamp(text: str, t: pa.DataType) -> pa.Scalar:
    """``text`` (``YYYY-MM-DD[( |T)HH:MM:SS[.f]][Z|+hh[:mm]]``) as a scalar of timestamp type
    ``t``, as DataFusion casts text; ValueError otherwise."""
    m = _TS_RE.fullmatch(text)
    if not m:
        raise ValueError(f"error parsing timestamp from {text!r}")
    year, month, day = int(m[1]), int(m[2]), int(m[3])
    hour, minute, second = (int(m[i]) if m[i] else 0 for i in (4, 5, 6))
    nanos = int((m[7] or "").ljust(9, "0"))
    days = (_dt.date(year, month, day) - _EPOCH).days
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"error parsing time in {text!r}")
    seconds = days * 86400 + hour * 3600 + minute * 60 + second
    offset = m[8]
    if offset and offset not in ("Z", "z"):
        digits = offset[1:].replace(":", "")
        off = int(digits[:2]) * 3600 + (int(digits[2:4]) * 60 if len(digits) > 2 else 0)
        seconds -= off if offset[0] == "+" else -off
    per = UNIT_PER_SECOND[t.unit]
    ticks = seconds * per + nanos // (10**9 // per)
    return pa.scalar(ticks, t)


def parse_date(text: str, t: pa.DataType) -> pa.Scalar:
    """``text`` (``YYYY-MM-DD``) as a scalar of date type ``t``; ValueError otherwise."""
    m = _DATE_RE.fullmatch(text)
    if not m:
        raise ValueError(f"cannot cast string {text!r} to a date")
    day = _dt.date(int(m[1]), int(m[2]), int(m[3]))
    return pa.scalar(day, pa.date32()).cast(t)
