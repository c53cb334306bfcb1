# SPDX-License-Identifier: Apache-2.0
"""Lance JSON columns: the JSONB values pylance stores, decoded to the JSON text it returns.

pylance stores an ``arrow.json`` column as ``lance.json``: each value a ``large_binary``
JSONB document. Layout (all integers big-endian):

* A container starts with a u32 header: the top 3 bits give its kind (``0x8`` << 28 array,
  ``0x4`` << 28 object, ``0x2`` << 28 scalar), the low 28 bits its element count (pairs for
  an object, 0 for a scalar).
* Then one u32 *entry* per element (an object lists its n key entries, then its n value
  entries; a scalar has one entry). An entry's top 4 bits give the type (``0x0`` null,
  ``0x1`` string, ``0x2`` number, ``0x3`` false, ``0x4`` true, ``0x5`` nested container), the
  low 28 bits the byte length of its data.
* Then the elements' data, in entry order (an object: all keys, then all values). Strings
  are UTF-8; a nested container is a complete document as above.
* A number's data starts with a tag byte: ``0x00`` zero (no more bytes), ``0x40`` a negative
  integer (two's complement, 1/2/4/8 bytes), ``0x50`` a non-negative integer (unsigned,
  1/2/4/8 bytes), ``0x60`` an IEEE 754 float64 (8 bytes); ``0x10`` NaN, ``0x20``
  +infinity, ``0x30`` -infinity (no more bytes; pylance prints them as ``null``).

Writing (:func:`encode_jsonb` of the parsed text, what pylance 14 stores for each text; the
writer's compiled encoder is :mod:`lance_gpu.file.writer._jsonb`): integers take the
fewest bytes that hold them (``0`` and ``-0`` the zero tag, ``255`` ``50 ff``, ``-129``
``40 ff 7f``); integers beyond u64 / i64 and every number with a fraction or exponent are
float64 (``1.0``, ``1E2``); ``NaN`` / ``Infinity`` / overflowing floats the special tags;
object keys sorted by their UTF-8 bytes, a repeated key refused; an empty or blank text is
the document ``null``.

Objects keep their keys sorted (pylance sorts them on write), so printing in stored order
gives pylance's text: compact (``{"a":[1,2]}``), strings JSON-escaped with non-ASCII kept,
floats in the shortest round-trip digits laid out as pylance lays them out
(:func:`float_text`: ``2.5``, ``1.0``, ``0.00001``, ``1e-7``, ``1e+20``).
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pyarrow as pa

from lance_gpu.errors import CorruptFileError

_ARRAY, _OBJECT, _SCALAR = 0x8, 0x4, 0x2
_NULL, _STRING, _NUMBER, _FALSE, _TRUE, _CONTAINER = 0x0, 0x1, 0x2, 0x3, 0x4, 0x5
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")
_NAN, _POS_INF, _NEG_INF = 0x10, 0x20, 0x30
_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)


class JsonbError(ValueError):
    """Bytes that are not a JSONB document (callers turn it into their own error or NULL)."""



def _number(data: bytes) -> int | float | None:
    if not data:
        raise JsonbError("empty number")
    tag, rest = data[0], data[1:]
    if tag == 0x00 and not rest:
        return 0
    if tag in (0x40, 0x50) and len(rest) in (1, 2, 4, 8):
        return int.from_bytes(rest, "big", signed=tag == 0x40)
    if tag == 0x60 and len(rest) == 8:
        return _F64.unpack(rest)[0]
    if tag in (_NAN, _POS_INF, _NEG_INF) and not rest:
        return None  # pylance prints NaN and the infinities as null
    raise JsonbError(f"number tag 0x{tag:02x} with {len(rest)} bytes")


def _value(kind: int, data: bytes) -> Any:
    if kind == _NULL:
        return None
    if kind == _STRING:
        return data.decode("utf-8")
    if kind == _NUMBER:
        return _number(data)
    if kind == _FALSE:
        return False
    if kind == _TRUE:
        return True
    if kind == _CONTAINER:
        return decode_jsonb(data)
    raise JsonbError(f"entry type {kind}")


def decode_jsonb(doc: bytes) -> Any:
    """One JSONB document as Python values (dict, list, str, int, float, bool, None).
    Raises :class:`JsonbError` for bytes that are not a document."""
    if len(doc) < 4:
        raise JsonbError("document shorter than its header")
    header = _U32.unpack_from(doc, 0)[0]
    kind, count = header >> 28, header & 0x0FFFFFFF
    entries = {_ARRAY: count, _OBJECT: 2 * count, _SCALAR: 1}.get(kind)
    if entries is None or (kind == _SCALAR and count != 0):
        raise JsonbError(f"container header 0x{header:08x}")
    pos = 4 + 4 * entries
    if pos > len(doc):
        raise JsonbError("entries run past the end")
    items = []
    for i in range(entries):
        entry = _U32.unpack_from(doc, 4 + 4 * i)[0]
        length = entry & 0x0FFFFFFF
        if pos + length > len(doc):
            raise JsonbError("value runs past the end")
        items.append(_value(entry >> 28, doc[pos : pos + length]))
        pos += length
    if pos != len(doc):
        raise JsonbError(f"{len(doc) - pos} trailing bytes")
    if kind == _SCALAR:
        return items[0]
    if kind == _ARRAY:
        return items
    keys, values = items[:count], items[count:]
    if not all(isinstance(k, str) for k in keys):
        raise JsonbError("object key that is not a string")
    return dict(zip(keys, values, strict=True))


def jsonb_to_text(values: pa.Array, path: str) -> pa.Array:
    """A ``large_binary`` array of JSONB documents as a ``string`` array of JSON text (nulls
    kept). Raises :class:`CorruptFileError` naming ``path`` for a malformed document.

    All documents are printed at once by the compiled decoder
    (:func:`lance_gpu.file._jsonb_text.jsonb_array_to_text`); what it leaves undecided
    (malformed bytes, repeated keys, deep nesting) goes through :func:`reference_jsonb_to_text`."""
    from lance_gpu.file._jsonb_text import jsonb_array_to_text  # numba, loaded by the first JSON read

    if pa.types.is_large_binary(values.type):
        fast = jsonb_array_to_text(values)
        if fast is not None:
            return fast
    return reference_jsonb_to_text(values, path)


def reference_jsonb_to_text(values: pa.Array, path: str) -> pa.Array:
    """:func:`jsonb_to_text` one document at a time in Python: :func:`decode_jsonb`, then
    :func:`value_text` -- the text the compiled decoder reproduces."""
    out: list[str | None] = []
    for i, raw in enumerate(values.to_pylist()):
        if raw is None:
            out.append(None)
            continue
        try:
            out.append(value_text(decode_jsonb(raw)))
        except (JsonbError, UnicodeDecodeError, struct.error) as exc:
            raise CorruptFileError(path, f"JSON value {i} is not valid JSONB: {exc}") from None
    return pa.array(out, pa.string())


def float_text(v: float) -> str:
    """A float64 as pylance prints it in JSON text: Python's shortest round-trip digits
    (``float.__repr__``), in positional form for decimal exponents -5 ... 15 (Python's repr
    turns to ``1e-05`` below 1e-4) and otherwise as ``<mantissa>e<sign><exponent>`` without
    a padded exponent (``1e-7``, ``1e+20``); NaN / infinities as ``json`` prints them (pylance
    stores those as tags and prints ``null``)."""
    if v != v or v in (_INF, -_INF):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    text = float.__repr__(v)
    mantissa, e, exponent = text.partition("e")
    if not e:
        return text
    x = int(exponent)
    if x == -5:
        sign, digits = ("-", mantissa[1:]) if mantissa[0] == "-" else ("", mantissa)
        return f"{sign}0.0000{digits.replace('.', '')}"
    return f"{mantissa}e{'+' if x > 0 else '-'}{abs(x)}"


_INF = float("inf")


def value_text(value: Any) -> str:
    """One decoded document (:func:`decode_jsonb`) as pylance's compact JSON text."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return float_text(value)
    if type(value) is str:
        return json.dumps(value, ensure_ascii=False)
    if type(value) is list:
        return "[" + ",".join(map(value_text, value)) + "]"
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + value_text(v) for k, v in value.items()) + "}"


# -- writing --------------------------------------------------------------------------------


def _encode_number(v: int | float) -> bytes:
    if isinstance(v, int):
        if 0 < v < 256:
            return _SMALL_UINTS[v]
        if v == 0:
            return b"\x00"
        if 0 < v <= _U64_MAX:
            size = 2 if v < 1 << 16 else 4 if v < 1 << 32 else 8
            return b"\x50" + v.to_bytes(size, "big")
        if _I64_MIN <= v < 0:
            size = 1 if v >= -(1 << 7) else 2 if v >= -(1 << 15) else 4 if v >= -(1 << 31) else 8
            return b"\x40" + v.to_bytes(size, "big", signed=True)
        try:
            v = float(v)
        except OverflowError:
            v = float("inf") if v > 0 else float("-inf")
    if v != v:
        return bytes([_NAN])
    if v in (float("inf"), float("-inf")):
        return bytes([_POS_INF if v > 0 else _NEG_INF])
    return b"\x60" + _F64.pack(v)


_SMALL_UINTS = [b""] + [b"\x50" + bytes([i]) for i in range(1, 256)]
_STR, _NUM, _BOX = _STRING << 28, _NUMBER << 28, _CONTAINER << 28
_ENTRY_NULL, _ENTRY_FALSE, _ENTRY_TRUE = _NULL << 28, _FALSE << 28, _TRUE << 28


def _encode_container(v: list | dict) -> bytes:
    """One array or object as a JSONB container (keys sorted: code point order is UTF-8
    byte order)."""
    if type(v) is list:
        header, items = (_ARRAY << 28) | len(v), v
    else:
        keys = sorted(v)
        header, items = (_OBJECT << 28) | len(keys), [*keys, *(v[k] for k in keys)]
    entries = [header]
    datas = []
    for item in items:
        t = type(item)
        if t is str:
            d = item.encode("utf-8")
            entries.append(_STR | len(d))
            datas.append(d)
        elif t is int or t is float:
            d = _encode_number(item)
            entries.append(_NUM | len(d))
            datas.append(d)
        elif item is None:
            entries.append(_ENTRY_NULL)
        elif item is True:
            entries.append(_ENTRY_TRUE)
        elif item is False:
            entries.append(_ENTRY_FALSE)
        else:
            d = _encode_container(item)
            entries.append(_BOX | len(d))
            datas.append(d)
    return struct.pack(f">{len(entries)}I", *entries) + b"".join(datas)


def encode_jsonb(value: Any) -> bytes:
    """One JSON value (as :func:`json.loads` gives it) as a JSONB document."""
    if type(value) is list or type(value) is dict:
        return _encode_container(value)
    # a scalar: a one-entry container of kind scalar
    return _SCALAR_HEADER + _encode_container([value])[4:]


_SCALAR_HEADER = _U32.pack(_SCALAR << 28)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _v in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate object attribute {dup!r}")
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, strict=False)
