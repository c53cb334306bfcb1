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
re-deriving: the pass over the documents (:func:`_documents`, one pass into a buffer grown
when a row might not fit) leaves each float out and records where its eight bytes are and
where its text goes; Arrow's cast to string (C++, correctly rounded) gives those floats'
shortest digits, :func:`_float_layout` lays them out as pylance prints them
(:func:`~lance_gpu.file.jsonb.float_text`), and :func:`_insert_floats` copies the text once
more with the floats put in.

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
def _put(out, pos, c):  # pragma: no cover - compiled
    out[pos] = c
    return pos + 1


@njit(**_JIT, inline="always")
def _put_word(out, pos, w0, w1, w2, w3, w4, n):  # pragma: no cover - compiled
    """Up to five ASCII bytes (``null``, ``true``, ``false``)."""
    out[pos] = w0
    out[pos + 1] = w1
    out[pos + 2] = w2
    out[pos + 3] = w3
    if n == 5:
        out[pos + 4] = w4
    return pos + n


@njit(**_JIT, inline="always")
def _put_string(data, s, n, out, pos, esc_len, esc_text):  # pragma: no cover - compiled
    pos = _put(out, pos, 34)
    for p in range(s, s + n):
        b = data[p]
        k = esc_len[b]
        if k == 1:
            out[pos] = b
        else:
            for q in range(k):
                out[pos + q] = esc_text[b, q]
        pos += k
    return _put(out, pos, 34)


@njit(**_JIT, inline="always")
def _put_unsigned(out, pos, mag):  # pragma: no cover - compiled
    """``mag`` (uint64) in decimal."""
    ten = np.uint64(10)
    digits = 1
    rest = mag // ten
    while rest > np.uint64(0):
        digits += 1
        rest //= ten
    v = mag
    for q in range(digits - 1, -1, -1):
        out[pos + q] = np.uint8(48 + np.int64(v % ten))
        v //= ten
    return pos + digits


@njit(**_JIT, inline="always")
def _push(data, s, e, stack, depth, out, pos):  # pragma: no cover - compiled
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
        pos = _put(out, pos, 91)
    elif kind == _OBJECT:
        pos = _put(out, pos, 123)
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
def _document(data, s, e, out, pos, stack, float_at, float_pos, float_row, nf, row, esc_len, esc_text):  # pragma: no cover - compiled
    """Print the document ``data[s:e]`` (row ``row``) at ``out[pos:]``, each float as
    nothing: its data position goes to ``float_at[nf]``, its place in ``out`` to
    ``float_pos[nf]``, its row to ``float_row[nf]``.  Returns ``(pos, nf, ok)``."""
    pos, ok = _push(data, s, e, stack, 0, out, pos)
    if not ok:
        return pos, nf, False
    depth = 1
    while depth > 0:
        d = depth - 1
        kind = stack[d, _F_KIND]
        j = stack[d, _F_NEXT]
        if j == stack[d, _F_COUNT]:
            if kind == _ARRAY:
                pos = _put(out, pos, 93)
            elif kind == _OBJECT:
                pos = _put(out, pos, 125)
            depth -= 1
            continue
        if j > 0:
            pos = _put(out, pos, 44)
        stack[d, _F_NEXT] = j + 1
        if kind == _OBJECT:
            entry = _u32(data, stack[d, _F_ENTRIES] + 4 * j)
            key_len = entry & 0x0FFFFFFF
            key = stack[d, _F_KEY_POS]
            if entry >> 28 != _STRING or not _key_after(data, stack[d, _F_PREV_KEY], stack[d, _F_PREV_LEN], key, key_len):
                return pos, nf, False
            pos = _put_string(data, key, key_len, out, pos, esc_len, esc_text)
            pos = _put(out, pos, 58)
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
            pos = _put_word(out, pos, 110, 117, 108, 108, 0, 4)
        elif kind == _TRUE:
            pos = _put_word(out, pos, 116, 114, 117, 101, 0, 4)
        elif kind == _FALSE:
            pos = _put_word(out, pos, 102, 97, 108, 115, 101, 5)
        elif kind == _STRING:
            pos = _put_string(data, at, length, out, pos, esc_len, esc_text)
        elif kind == _CONTAINER:
            pos, ok = _push(data, at, at + length, stack, depth, out, pos)
            if not ok:
                return pos, nf, False
            depth += 1
        elif kind == _NUMBER:
            if length == 0:
                return pos, nf, False
            tag = data[at]
            rest = length - 1
            if tag == 0x00 and rest == 0:
                pos = _put(out, pos, 48)
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
                    pos = _put(out, pos, 45)
                pos = _put_unsigned(out, pos, bits)
            elif tag == 0x60 and rest == 8:
                float_at[nf] = at + 1
                float_pos[nf] = pos
                float_row[nf] = row
                nf += 1
            elif (tag == 0x10 or tag == 0x20 or tag == 0x30) and rest == 0:
                pos = _put_word(out, pos, 110, 117, 108, 108, 0, 4)
            else:
                return pos, nf, False
        else:
            return pos, nf, False
    return pos, nf, True


@njit(**_JIT)
def _documents(data, offsets, valid, out, out_offsets, row, pos, stack, float_at, float_pos, float_row, nf, esc_len, esc_text):  # pragma: no cover - compiled
    """Print rows ``row..`` from ``out[pos:]`` while ``out`` has room for a row's longest
    text (six bytes per data byte: a control byte's ``\\u00XX``), floats left out
    (:func:`_document`); ``out_offsets[i + 1]`` becomes the end of row i.  Returns
    ``(status, row, pos, nf)``: status 0 when done, 2 when ``out`` must grow before ``row``
    (resume there), :data:`FALLBACK` at a row the kernel leaves to the reference."""
    cap = out.size
    for i in range(row, offsets.size - 1):
        if valid[i]:
            s = offsets[i]
            e = offsets[i + 1]
            if pos + 6 * (e - s) + 16 > cap:
                return 2, i, pos, nf
            pos, nf, ok = _document(data, s, e, out, pos, stack, float_at, float_pos, float_row, nf, i, esc_len, esc_text)
            if not ok:
                return FALLBACK, i, pos, nf
        out_offsets[i + 1] = pos
    return 0, -1, pos, nf


@njit(**_JIT)
def _insert_floats(text, offsets, float_pos, float_row, slots, lengths, out, out_offsets):  # pragma: no cover - compiled
    """``text`` (rows at ``offsets``) with float k's text ``slots[k, :lengths[k]]`` put in
    at ``float_pos[k]`` of row ``float_row[k]`` (both ascending), into ``out`` /
    ``out_offsets``."""
    k = 0
    shift = np.int64(0)
    src = np.int64(0)
    nf = float_pos.size
    for i in range(offsets.size - 1):
        while k < nf and float_row[k] == i:
            at = float_pos[k]
            for p in range(src, at):
                out[p + shift] = text[p]
            for q in range(lengths[k]):
                out[at + shift + q] = slots[k, q]
            shift += lengths[k]
            src = at
            k += 1
        end = offsets[i + 1]
        for p in range(src, end):
            out[p + shift] = text[p]
        src = end
        out_offsets[i + 1] = end + shift


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
    float_pos = np.empty(most_floats, np.int64)
    float_row = np.empty(most_floats, np.int64)
    out_offsets = np.zeros(n + 1, np.int64)
    # JSON text is rarely twice its JSONB; a row that might not fit grows the buffer first
    out = np.empty(2 * int(offsets[-1] - offsets[0]) + 4096, np.uint8)
    row, pos, nf = 0, 0, 0
    while True:
        status, row, pos, nf = _documents(data, offsets, valid, out, out_offsets, row, pos, stack,
                                          float_at, float_pos, float_row, nf, _ESC_LEN, _ESC_TEXT)
        if status != 2:
            break
        grown = np.empty(max(2 * out.size, pos + 6 * int(offsets[row + 1] - offsets[row]) + 16), np.uint8)
        grown[:pos] = out[:pos]
        out = grown
    if status != 0:
        return None
    if nf:
        at = float_at[:nf]
        raw = np.ascontiguousarray(data[at[:, None] + np.arange(8)]).view(">f8").reshape(-1).astype(np.float64)
        slots, flen = _float_texts(raw)
        with_floats = np.empty(pos + int(flen.sum()), np.uint8)
        final_offsets = np.zeros(n + 1, np.int64)
        _insert_floats(out, out_offsets, float_pos[:nf], float_row[:nf], slots, flen, with_floats, final_offsets)
        out, out_offsets, pos = with_floats, final_offsets, with_floats.size
    total = pos
    try:
        check_variable(out_offsets, out[:total], True)
    except CorruptInputError:
        return None  # a string that is not UTF-8: the reference names the value
    large = total >= 1 << 31
    kind = pa.large_string() if large else pa.string()
    offsets_out = pa.py_buffer(out_offsets if large else out_offsets.astype(np.int32))
    bitmap = None if values.null_count == 0 else pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(kind, n, [bitmap, offsets_out, pa.py_buffer(out[:total])], values.null_count)
