# SPDX-License-Identifier: Apache-2.0
"""JSONB documents -> the JSON text pylance returns, compiled: all values of a page at once.

The layout is :mod:`lance_gpu.file.jsonb`'s, and its Python decoder (``decode_jsonb`` then
``value_text``) is the reference: this module
gives the same bytes.  :func:`_documents` (numba, no GIL) walks each document with an explicit
stack of containers (no recursion) and prints it in stored order:

* containers compact (``[1,2]``, ``{"a":null}``), an object's i-th key then its i-th value
  (the keys' entries come first in the container, then the values');
* strings quoted, with ``"`` ``\\`` and the control bytes below 0x20 escaped as ``json`` does
  (``\\n \\r \\t \\b \\f``, else ``\\u00XX`` in lower-case hex) and every other byte copied
  (non-ASCII kept);
* integers in decimal (the u64 / i64 range, big-endian 1/2/4/8 bytes), the NaN / infinity
  tags as ``null``, ``true`` / ``false`` / ``null``.

Floats need the shortest digits that round-trip (``float.__repr__``'s), which are not worth
re-deriving: the first pass (``write=False``) sizes each row's text without its floats and
records where each float's eight bytes are; Arrow's cast to string (C++, correctly rounded)
gives those floats' shortest digits, :func:`_float_layout` lays them out as pylance prints
them (:func:`~lance_gpu.file.jsonb.float_text`), and the second pass (``write=True``) writes
the rows, copying each float's text in place.

What the kernel does not settle itself it leaves to the reference, for the whole array
(:data:`FALLBACK`): an object whose keys are not strictly increasing in byte order (a
repeated key collapses in the reference's dict), nesting deeper than :data:`MAX_DEPTH`, and
anything malformed (the reference then raises :class:`~lance_gpu.errors.CorruptFileError`
with the value's index).  Strings are not checked one by one: the output as a whole is
checked to be UTF-8 (each string sits between ASCII quotes, so a bad string leaves the
whole text bad), and a bad one goes to the reference too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuda_kernels import CorruptInputError, check_variable
from cuda_kernels._jitcache import njit

__all__ = ["FALLBACK", "MAX_DEPTH", "jsonb_array_to_text"]

_JIT: dict[str, Any] = {"cache": True, "nogil": True}

#: Deeper documents go to the reference decoder.
MAX_DEPTH = 256
#: Status of a kernel run that leaves the array to the reference decoder.
FALLBACK = 1

_ARRAY, _OBJECT, _SCALAR = 0x8, 0x4, 0x2
_NULL, _STRING, _NUMBER, _FALSE, _TRUE, _CONTAINER = 0x0, 0x1, 0x2, 0x3, 0x4, 0x5

# Frame of one open container on the stack (columns of ``stack``).
_F_KIND, _F_COUNT, _F_ENTRIES, _F_NEXT, _F_KEY_POS, _F_VALUE_POS, _F_PREV_KEY, _F_PREV_LEN = range(8)
_FRAME = 8


def _escape_table() -> tuple[np.ndarray, np.ndarray]:
    """Per byte, the length of its text inside a JSON string and up to 6 bytes of it."""
    lengths = np.ones(256, np.int64)
    texts = np.zeros((256, 6), np.uint8)
    texts[:, 0] = np.arange(256)
    short = {ord('"'): b'\\"', ord("\\"): b"\\\\", 8: b"\\b", 12: b"\\f", 10: b"\\n", 13: b"\\r", 9: b"\\t"}
    for b in range(0x20):
        text = short.get(b, f"\\u{b:04x}".encode())
        lengths[b] = len(text)
        texts[b, : len(text)] = np.frombuffer(text, np.uint8)
    for b in (ord('"'), ord("\\")):
        lengths[b] = 2
        texts[b, :2] = np.frombuffer(short[b], np.uint8)
    return lengths, texts


_ESC_LEN, _ESC_TEXT = _escape_table()


@njit(**_JIT, inline="always")
def _u32(data, p):  # pragma: no cover - compiled
    return (np.int64(data[p]) << 24) | (np.int64(data[p + 1]) << 16) | (np.int64(data[p + 2]) << 8) | np.int64(data[p + 3])


@njit(**_JIT, inline="always")
def _put(out, pos, write, c):  # pragma: no cover - compiled
    if write:
        out[pos] = c
    return pos + 1


@njit(**_JIT, inline="always")
def _put_word(out, pos, write, w0, w1, w2, w3, w4, n):  # pragma: no cover - compiled
    """Up to five ASCII bytes (``null``, ``true``, ``false``)."""
    if write:
        out[pos] = w0
        out[pos + 1] = w1
        out[pos + 2] = w2
        out[pos + 3] = w3
        if n == 5:
            out[pos + 4] = w4
    return pos + n


@njit(**_JIT, inline="always")
def _put_string(data, s, n, out, pos, write, esc_len, esc_text):  # pragma: no cover - compiled
    pos = _put(out, pos, write, 34)
    for p in range(s, s + n):
        b = data[p]
        k = esc_len[b]
        if write:
            if k == 1:
                out[pos] = b
            else:
                for q in range(k):
                    out[pos + q] = esc_text[b, q]
        pos += k
    return _put(out, pos, write, 34)


@njit(**_JIT, inline="always")
def _put_unsigned(out, pos, write, mag):  # pragma: no cover - compiled
    """``mag`` (uint64) in decimal."""
    ten = np.uint64(10)
    digits = 1
    rest = mag // ten
    while rest > np.uint64(0):
        digits += 1
        rest //= ten
    if write:
        v = mag
        for q in range(digits - 1, -1, -1):
            out[pos + q] = np.uint8(48 + np.int64(v % ten))
            v //= ten
    return pos + digits


@njit(**_JIT, inline="always")
def _push(data, s, e, stack, depth, out, pos, write):  # pragma: no cover - compiled
    """Open the container ``data[s:e]`` as frame ``depth``: check its header and entry
    lengths, write its opening bracket.  Returns ``(pos, ok)``."""
    if depth >= stack.shape[0] or e - s < 4:
        return pos, False
    header = _u32(data, s)
    kind = header >> 28
    count = header & 0x0FFFFFFF
    if kind == _ARRAY:
        entries = count
    elif kind == _OBJECT:
        entries = 2 * count
    elif kind == _SCALAR and count == 0:
        entries = 1
    else:
        return pos, False
    data_start = s + 4 + 4 * entries
    if data_start > e:
        return pos, False
    total = np.int64(0)
    keys = np.int64(0)
    for i in range(entries):
        length = _u32(data, s + 4 + 4 * i) & 0x0FFFFFFF
        total += length
        if kind == _OBJECT and i < count:
            keys += length
    if total != e - data_start:
        return pos, False
    d = depth
    stack[d, _F_KIND] = kind
    stack[d, _F_COUNT] = count if kind != _SCALAR else 1
    stack[d, _F_ENTRIES] = s + 4
    stack[d, _F_NEXT] = 0
    stack[d, _F_KEY_POS] = data_start
    stack[d, _F_VALUE_POS] = data_start + keys
    stack[d, _F_PREV_KEY] = -1
    stack[d, _F_PREV_LEN] = 0
    if kind == _ARRAY:
        pos = _put(out, pos, write, 91)
    elif kind == _OBJECT:
        pos = _put(out, pos, write, 123)
    return pos, True


@njit(**_JIT, inline="always")
def _key_after(data, prev, prev_len, key, key_len):  # pragma: no cover - compiled
    """Whether the key ``data[key:key+key_len]`` sorts strictly after the previous one."""
    if prev < 0:
        return True
    for q in range(min(prev_len, key_len)):
        a = data[prev + q]
        b = data[key + q]
        if a != b:
            return b > a
    return key_len > prev_len


@njit(**_JIT, inline="always")
def _document(data, s, e, out, pos, write, stack, float_at, float_row, nf, row, ftext, flen, esc_len, esc_text):  # pragma: no cover - compiled
    """Print the document ``data[s:e]`` at ``out[pos:]`` (``write=False``: only count).
    Returns ``(pos, nf, ok)``; ``nf`` counts the floats met so far (the first pass records
    their data position and row, the second copies their texts)."""
    pos, ok = _push(data, s, e, stack, 0, out, pos, write)
    if not ok:
        return pos, nf, False
    depth = 1
    while depth > 0:
        d = depth - 1
        kind = stack[d, _F_KIND]
        j = stack[d, _F_NEXT]
        if j == stack[d, _F_COUNT]:
            if kind == _ARRAY:
                pos = _put(out, pos, write, 93)
            elif kind == _OBJECT:
                pos = _put(out, pos, write, 125)
            depth -= 1
            continue
        if j > 0:
            pos = _put(out, pos, write, 44)
        stack[d, _F_NEXT] = j + 1
        if kind == _OBJECT:
            entry = _u32(data, stack[d, _F_ENTRIES] + 4 * j)
            key_len = entry & 0x0FFFFFFF
            key = stack[d, _F_KEY_POS]
            if entry >> 28 != _STRING or not _key_after(data, stack[d, _F_PREV_KEY], stack[d, _F_PREV_LEN], key, key_len):
                return pos, nf, False
            pos = _put_string(data, key, key_len, out, pos, write, esc_len, esc_text)
            pos = _put(out, pos, write, 58)
            stack[d, _F_PREV_KEY] = key
            stack[d, _F_PREV_LEN] = key_len
            stack[d, _F_KEY_POS] = key + key_len
            entry = _u32(data, stack[d, _F_ENTRIES] + 4 * (stack[d, _F_COUNT] + j))
            length = entry & 0x0FFFFFFF
            at = stack[d, _F_VALUE_POS]
            stack[d, _F_VALUE_POS] = at + length
        else:
            entry = _u32(data, stack[d, _F_ENTRIES] + 4 * j)
            length = entry & 0x0FFFFFFF
            at = stack[d, _F_KEY_POS]
            stack[d, _F_KEY_POS] = at + length
        kind = entry >> 28
        if kind == _NULL:
            pos = _put_word(out, pos, write, 110, 117, 108, 108, 0, 4)
        elif kind == _TRUE:
            pos = _put_word(out, pos, write, 116, 114, 117, 101, 0, 4)
        elif kind == _FALSE:
            pos = _put_word(out, pos, write, 102, 97, 108, 115, 101, 5)
        elif kind == _STRING:
            pos = _put_string(data, at, length, out, pos, write, esc_len, esc_text)
        elif kind == _CONTAINER:
            pos, ok = _push(data, at, at + length, stack, depth, out, pos, write)
            if not ok:
                return pos, nf, False
            depth += 1
        elif kind == _NUMBER:
            if length == 0:
                return pos, nf, False
            tag = data[at]
            rest = length - 1
            if tag == 0x00 and rest == 0:
                pos = _put(out, pos, write, 48)
            elif (tag == 0x40 or tag == 0x50) and (rest == 1 or rest == 2 or rest == 4 or rest == 8):
                bits = np.uint64(0)
                for q in range(1, length):
                    bits = (bits << np.uint64(8)) | np.uint64(data[at + q])
                negative = tag == 0x40 and (data[at + 1] & 0x80) != 0
                if negative:  # two's complement of ``rest`` bytes: magnitude = 2**(8 rest) - bits
                    if rest < 8:
                        bits = (np.uint64(1) << np.uint64(8 * rest)) - bits
                    else:
                        bits = ~bits + np.uint64(1)
                    pos = _put(out, pos, write, 45)
                pos = _put_unsigned(out, pos, write, bits)
            elif tag == 0x60 and rest == 8:
                if write:
                    for q in range(flen[nf]):
                        out[pos] = ftext[nf, q]
                        pos += 1
                else:
                    float_at[nf] = at + 1
                    float_row[nf] = row
                nf += 1
            elif (tag == 0x10 or tag == 0x20 or tag == 0x30) and rest == 0:
                pos = _put_word(out, pos, write, 110, 117, 108, 108, 0, 4)
            else:
                return pos, nf, False
        else:
            return pos, nf, False
    return pos, nf, True


@njit(**_JIT)
def _measure_documents(data, offsets, valid, out_offsets, stack, float_at, float_row, esc_len, esc_text):  # pragma: no cover - compiled
    """First pass: ``out_offsets[i + 1]`` becomes row i's text length without its floats,
    ``float_at`` / ``float_row`` where each float's bytes are and its row; returns
    ``(status, row, floats)``."""
    none = np.zeros(1, np.uint8)
    return _documents(data, offsets, valid, none, out_offsets, False, stack, float_at, float_row,
                      np.zeros((1, 1), np.uint8), np.zeros(1, np.int64), esc_len, esc_text)


@njit(**_JIT)
def _write_documents(data, offsets, valid, out, out_offsets, stack, ftext, flen, esc_len, esc_text):  # pragma: no cover - compiled
    """Second pass: row i's text at ``out[out_offsets[i]:]``, float k's text copied from
    ``ftext[k, :flen[k]]``; returns ``(status, row, floats)``."""
    none = np.zeros(1, np.int64)
    return _documents(data, offsets, valid, out, out_offsets, True, stack, none, none, ftext, flen, esc_len, esc_text)


@njit(**_JIT, inline="always")
def _documents(data, offsets, valid, out, out_offsets, write, stack, float_at, float_row, ftext, flen, esc_len, esc_text):  # pragma: no cover - compiled
    """Every valid row's document, counted (``write=False``, a constant once inlined into
    :func:`_measure_documents`) or written (:func:`_write_documents`)."""
    nf = 0
    for i in range(offsets.size - 1):
        if not valid[i]:
            if not write:
                out_offsets[i + 1] = 0
            continue
        s = offsets[i]
        e = offsets[i + 1]
        start = out_offsets[i] if write else 0
        pos, nf, ok = _document(data, s, e, out, start, write, stack, float_at, float_row, nf, i, ftext, flen, esc_len, esc_text)
        if not ok:
            return FALLBACK, i, nf
        if not write:
            out_offsets[i + 1] = pos
        elif pos != out_offsets[i + 1]:
            return FALLBACK, i, nf
    return 0, -1, nf


#: Bytes of the longest float text: sign, 17 digits, point, ``e-324`` (or ``0.0000`` + 17 digits).
_FLOAT_SLOT = 32


@njit(**_JIT, inline="always")
def _put_zeros(out, pos, k):  # pragma: no cover - compiled
    for q in range(k):
        out[pos + q] = 48
    return pos + k


@njit(**_JIT)
def _float_layout(offsets, text, slots, lengths):  # pragma: no cover - compiled
    """Re-lay out shortest round-trip float texts (Arrow's cast to string: ``0.1``, ``1``,
    ``1e+20``, ``0.00001``, ``-0``, ``nan``, ``inf``) as pylance prints them
    (:func:`~lance_gpu.file.jsonb.float_text`): float k's text into ``slots[k]``, its length
    into ``lengths[k]``.

    The digits and the decimal exponent are read back from the text: value =
    0.d1...dn x 10**kk with d1 != 0 and dn != 0.  Positional when the scientific exponent
    kk - 1 is in -5 ... 15 (``0.0000d...``, ``d.ddd``, ``ddd00.0``), else
    ``d[.ddd]e<sign><exponent>``; zero is ``0.0`` / ``-0.0``."""
    digits = np.empty(32, np.uint8)
    for k in range(offsets.size - 1):
        p = offsets[k]
        e = offsets[k + 1]
        out = slots[k]
        pos = 0
        if text[p] == 45:  # '-'
            out[0] = 45
            pos = 1
            p += 1
        c = text[p]
        if c == 110 or c == 78:  # nan
            pos = 0
            for b in (78, 97, 78):
                out[pos] = b
                pos += 1
            lengths[k] = pos
            continue
        if c == 105 or c == 73:  # inf
            for b in (73, 110, 102, 105, 110, 105, 116, 121):
                out[pos] = b
                pos += 1
            lengths[k] = pos
            continue
        n = 0
        before_point = -1
        while p < e and text[p] != 101 and text[p] != 69:  # up to 'e'
            if text[p] == 46:
                before_point = n
            else:
                digits[n] = text[p]
                n += 1
            p += 1
        if before_point < 0:
            before_point = n
        exponent = 0
        if p < e:  # exponent
            p += 1
            negative = text[p] == 45
            if text[p] == 45 or text[p] == 43:
                p += 1
            while p < e:
                exponent = 10 * exponent + (text[p] - 48)
                p += 1
            if negative:
                exponent = -exponent
        kk = before_point + exponent
        first = 0
        while first < n and digits[first] == 48:
            first += 1
            kk -= 1
        last = n
        while last > first and digits[last - 1] == 48:
            last -= 1
        if first == last:  # zero
            out[pos] = 48
            out[pos + 1] = 46
            out[pos + 2] = 48
            lengths[k] = pos + 3
            continue
        m = last - first
        sci = kk - 1
        if -5 <= sci < 16:
            if kk <= 0:
                out[pos] = 48
                out[pos + 1] = 46
                pos = _put_zeros(out, pos + 2, -kk)
                for q in range(first, last):
                    out[pos] = digits[q]
                    pos += 1
            elif kk >= m:
                for q in range(first, last):
                    out[pos] = digits[q]
                    pos += 1
                pos = _put_zeros(out, pos, kk - m)
                out[pos] = 46
                out[pos + 1] = 48
                pos += 2
            else:
                for q in range(first, last):
                    if q - first == kk:
                        out[pos] = 46
                        pos += 1
                    out[pos] = digits[q]
                    pos += 1
        else:
            out[pos] = digits[first]
            pos += 1
            if m > 1:
                out[pos] = 46
                pos += 1
                for q in range(first + 1, last):
                    out[pos] = digits[q]
                    pos += 1
            out[pos] = 101
            out[pos + 1] = 43 if sci > 0 else 45
            pos += 2
            mag = sci if sci > 0 else -sci
            width = 1 if mag < 10 else (2 if mag < 100 else 3)
            for q in range(width - 1, -1, -1):
                out[pos + q] = 48 + mag % 10
                mag //= 10
            pos += width
        lengths[k] = pos


def _float_texts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each float64 as pylance prints it (:func:`~lance_gpu.file.jsonb.float_text`), as
    ``(slots, lengths)``: the shortest round-trip digits come from Arrow's cast to string
    (C++, correctly rounded), their layout from :func:`_float_layout`."""
    texts = pc.cast(pa.array(values, pa.float64()), pa.string())
    _validity, offsets, data = texts.buffers()
    slots = np.empty((values.size, _FLOAT_SLOT), np.uint8)
    lengths = np.empty(values.size, np.int64)
    _float_layout(np.frombuffer(offsets, np.int32, values.size + 1), np.frombuffer(data, np.uint8), slots, lengths)
    return slots, lengths


def jsonb_array_to_text(values: pa.Array) -> pa.Array | None:
    """A ``large_binary`` array of JSONB documents as a ``string`` array (``large_string``
    past 2 GiB) of their JSON text, nulls kept; None where the reference decoder must
    decide (see the module docstring)."""
    n = len(values)
    _validity, offsets_buf, data_buf = values.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64, n + 1, values.offset * 8) if n else np.zeros(1, np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None and data_buf.size else np.zeros(1, np.uint8)
    valid = (np.ones(n, np.bool_) if values.null_count == 0 else
             values.is_valid().to_numpy(zero_copy_only=False))
    stack = np.zeros((MAX_DEPTH, _FRAME), np.int64)
    most_floats = max(1, int(offsets[-1] - offsets[0]) // 9 + 1)  # a float takes 9 bytes of data
    float_at = np.empty(most_floats, np.int64)
    float_row = np.empty(most_floats, np.int64)
    lengths = np.zeros(n + 1, np.int64)
    status, _row, nf = _measure_documents(data, offsets, valid, lengths, stack, float_at, float_row, _ESC_LEN, _ESC_TEXT)
    if status != 0:
        return None
    ftext = np.zeros((1, _FLOAT_SLOT), np.uint8)
    flen = np.zeros(1, np.int64)
    if nf:
        at = float_at[:nf]
        raw = np.ascontiguousarray(data[at[:, None] + np.arange(8)]).view(">f8").reshape(-1).astype(np.float64)
        ftext, flen = _float_texts(raw)
        lengths[1:] += np.bincount(float_row[:nf], weights=flen, minlength=n).astype(np.int64)
    out_offsets = np.cumsum(lengths)
    total = int(out_offsets[-1])
    out = np.empty(max(total, 1), np.uint8)
    status, _row, _nf = _write_documents(data, offsets, valid, out, out_offsets, stack, ftext, flen, _ESC_LEN, _ESC_TEXT)
    if status != 0:
        return None
    try:
        check_variable(out_offsets, out[:total], True)
    except CorruptInputError:
        return None  # a string that is not UTF-8: the reference names the value
    large = total >= 1 << 31
    kind = pa.large_string() if large else pa.string()
    offsets_out = pa.py_buffer(out_offsets if large else out_offsets.astype(np.int32))
    bitmap = None if values.null_count == 0 else pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(kind, n, [bitmap, offsets_out, pa.py_buffer(out[:total])], values.null_count)
