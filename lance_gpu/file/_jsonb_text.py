# SPDX-License-Identifier: Apache-2.0
"""JSONB documents -> the JSON text pylance returns, compiled: all values of a page at once.

The layout is :mod:`lance_gpu.file.jsonb`'s, and its Python decoder (``decode_jsonb`` then
``json.dumps(..., separators=(",", ":"), ensure_ascii=False)``) is the reference: this module
gives the same bytes.  :func:`_documents` (numba, no GIL) walks each document with an explicit
stack of containers (no recursion) and prints it in stored order:

* containers compact (``[1,2]``, ``{"a":null}``), an object's i-th key then its i-th value
  (the keys' entries come first in the container, then the values');
* strings quoted, with ``"`` ``\\`` and the control bytes below 0x20 escaped as ``json`` does
  (``\\n \\r \\t \\b \\f``, else ``\\u00XX`` in lower-case hex) and every other byte copied
  (non-ASCII kept);
* integers in decimal (the u64 / i64 range, big-endian 1/2/4/8 bytes), the NaN / infinity
  tags as ``null``, ``true`` / ``false`` / ``null``.

Floats need the shortest text that round-trips (``float.__repr__``), which is not worth
re-deriving: the first pass (``write=False``) sizes each row's text without its floats and
records where each float's eight bytes are; Python prints those floats
(:func:`_float_texts`, as ``json`` prints them), and the second pass (``write=True``) writes the
rows, copying each float's text in place.

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


@njit(**_JIT)
def _u32(data, p):  # pragma: no cover - compiled
    return (np.int64(data[p]) << 24) | (np.int64(data[p + 1]) << 16) | (np.int64(data[p + 2]) << 8) | np.int64(data[p + 3])


@njit(**_JIT)
def _put(out, pos, write, c):  # pragma: no cover - compiled
    if write:
        out[pos] = c
    return pos + 1


@njit(**_JIT)
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


@njit(**_JIT)
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


@njit(**_JIT)
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


@njit(**_JIT)
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
    f = stack[depth]
    f[_F_KIND] = kind
    f[_F_COUNT] = count if kind != _SCALAR else 1
    f[_F_ENTRIES] = s + 4
    f[_F_NEXT] = 0
    f[_F_KEY_POS] = data_start
    f[_F_VALUE_POS] = data_start + keys
    f[_F_PREV_KEY] = -1
    f[_F_PREV_LEN] = 0
    if kind == _ARRAY:
        pos = _put(out, pos, write, 91)
    elif kind == _OBJECT:
        pos = _put(out, pos, write, 123)
    return pos, True


@njit(**_JIT)
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


@njit(**_JIT)
def _document(data, s, e, out, pos, write, stack, float_at, float_row, nf, row, ftext, foff, esc_len, esc_text):  # pragma: no cover - compiled
    """Print the document ``data[s:e]`` at ``out[pos:]`` (``write=False``: only count).
    Returns ``(pos, nf, ok)``; ``nf`` counts the floats met so far (the first pass records
    their data position and row, the second copies their texts)."""
    pos, ok = _push(data, s, e, stack, 0, out, pos, write)
    if not ok:
        return pos, nf, False
    depth = 1
    while depth > 0:
        f = stack[depth - 1]
        kind = f[_F_KIND]
        j = f[_F_NEXT]
        if j == f[_F_COUNT]:
            if kind == _ARRAY:
                pos = _put(out, pos, write, 93)
            elif kind == _OBJECT:
                pos = _put(out, pos, write, 125)
            depth -= 1
            continue
        if j > 0:
            pos = _put(out, pos, write, 44)
        f[_F_NEXT] = j + 1
        if kind == _OBJECT:
            entry = _u32(data, f[_F_ENTRIES] + 4 * j)
            key_len = entry & 0x0FFFFFFF
            key = f[_F_KEY_POS]
            if entry >> 28 != _STRING or not _key_after(data, f[_F_PREV_KEY], f[_F_PREV_LEN], key, key_len):
                return pos, nf, False
            pos = _put_string(data, key, key_len, out, pos, write, esc_len, esc_text)
            pos = _put(out, pos, write, 58)
            f[_F_PREV_KEY] = key
            f[_F_PREV_LEN] = key_len
            f[_F_KEY_POS] = key + key_len
            entry = _u32(data, f[_F_ENTRIES] + 4 * (f[_F_COUNT] + j))
            length = entry & 0x0FFFFFFF
            at = f[_F_VALUE_POS]
            f[_F_VALUE_POS] = at + length
        else:
            entry = _u32(data, f[_F_ENTRIES] + 4 * j)
            length = entry & 0x0FFFFFFF
            at = f[_F_KEY_POS]
            f[_F_KEY_POS] = at + length
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
                    for q in range(foff[nf], foff[nf + 1]):
                        out[pos] = ftext[q]
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
def _documents(data, offsets, valid, out, out_offsets, write, stack, float_at, float_row, ftext, foff, esc_len, esc_text):  # pragma: no cover - compiled
    """Every valid row's document.  First pass (``write=False``): ``out_offsets[i + 1]``
    becomes row i's text length without its floats; returns ``(status, row, floats)``.
    Second pass: writes row i at ``out[out_offsets[i]:]``."""
    nf = 0
    for i in range(offsets.size - 1):
        if not valid[i]:
            if not write:
                out_offsets[i + 1] = 0
            continue
        s = offsets[i]
        e = offsets[i + 1]
        start = out_offsets[i] if write else 0
        pos, nf, ok = _document(data, s, e, out, start, write, stack, float_at, float_row, nf, i, ftext, foff, esc_len, esc_text)
        if not ok:
            return FALLBACK, i, nf
        if not write:
            out_offsets[i + 1] = pos
        elif pos != out_offsets[i + 1]:
            return FALLBACK, i, nf
    return 0, -1, nf


def _float_texts(values: np.ndarray) -> list[str]:
    """Each float64 as ``json.dumps`` prints it (``float.__repr__``; ``NaN``, ``Infinity``)."""
    texts = list(map(float.__repr__, values.tolist()))
    special = np.flatnonzero(~np.isfinite(values))
    for k in special.tolist():
        v = values[k]
        texts[k] = "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    return texts


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
    no_text = np.zeros(1, np.uint8)
    no_offsets = np.zeros(1, np.int64)
    status, _row, nf = _documents(data, offsets, valid, no_text, lengths, False, stack, float_at, float_row,
                                  no_text, no_offsets, _ESC_LEN, _ESC_TEXT)
    if status != 0:
        return None
    ftext = no_text
    foff = np.zeros(nf + 1, np.int64)
    if nf:
        at = float_at[:nf]
        raw = np.ascontiguousarray(data[at[:, None] + np.arange(8)]).view(">f8").reshape(-1).astype(np.float64)
        texts = _float_texts(raw)
        ftext = np.frombuffer("".join(texts).encode("ascii"), np.uint8)
        text_lengths = np.fromiter(map(len, texts), np.int64, nf)
        np.cumsum(text_lengths, out=foff[1:])
        lengths[1:] += np.bincount(float_row[:nf], weights=text_lengths, minlength=n).astype(np.int64)
    out_offsets = np.cumsum(lengths)
    total = int(out_offsets[-1])
    out = np.empty(max(total, 1), np.uint8)
    status, _row, _nf = _documents(data, offsets, valid, out, out_offsets, True, stack, float_at, float_row,
                                   ftext, foff, _ESC_LEN, _ESC_TEXT)
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
