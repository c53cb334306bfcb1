# SPDX-License-Identifier: Apache-2.0
"""JSON text -> the JSONB documents pylance stores for ``arrow.json`` columns, compiled.

The layout is :mod:`lance_gpu.file.jsonb`'s; its Python encoder (``json`` parse, then
:func:`~lance_gpu.file.jsonb.encode_jsonb`) is the reference, and this module gives the
same bytes.  :func:`_encode_rows` (numba, no GIL) parses each row into a node table in one
pass (an explicit stack, no recursion), sizes the containers bottom-up, then writes them
top-down: a container's header, its entries, then its children's data, object keys sorted
by their UTF-8 bytes.

What the kernel does not settle itself it leaves to the reference, row by row (``bad``):
strings holding a backslash escape, integers beyond u64 / i64, the literals ``NaN`` /
``Infinity``, a repeated object key, nesting deeper than :data:`MAX_DEPTH`, and anything that
is not JSON (the reference then raises :class:`~lance_gpu.errors.InvalidJsonError`).
Numbers with a fraction or an exponent are float64: the kernel writes the tag byte and
records the token; the tokens are converted together by Arrow's correctly rounded parser
and their big-endian bytes written in place (rows whose value overflows to an infinity go
to the reference, which writes the infinity tag instead).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuda_kernels._jitcache import njit
from lance_gpu.errors import InvalidJsonError
from lance_gpu.file.jsonb import _DECODER, encode_jsonb

__all__ = ["MAX_DEPTH", "text_to_jsonb"]

_JIT: dict[str, Any] = {"cache": True, "nogil": True}

#: Deeper documents go to the reference encoder.
MAX_DEPTH = 64

# node kinds
_K_NULL, _K_STRING, _K_INT, _K_FLOAT, _K_FALSE, _K_TRUE, _K_ARRAY, _K_OBJECT = 0, 1, 2, 3, 4, 5, 6, 7


@njit(**_JIT)
def _ws(c):  # pragma: no cover - compiled
    return c == 32 or c == 9 or c == 10 or c == 13


@njit(**_JIT)
def _skip(text, p, e):  # pragma: no cover - compiled
    while p < e and _ws(text[p]):
        p += 1
    return p


@njit(**_JIT)
def _int_bytes(neg, mag):  # pragma: no cover - compiled
    """Data bytes of an integer (sign, magnitude as u64) as the reference writes it."""
    if mag == 0:
        return 1
    if not neg:
        if mag < 256:
            return 2
        if mag < 65536:
            return 3
        if mag < 4294967296:
            return 5
        return 9
    if mag <= 128:
        return 2
    if mag <= 32768:
        return 3
    if mag <= 2147483648:
        return 5
    return 9


@njit(**_JIT)
def _parse(text, s, e, kind, a, b, parent, nxt, first, last, count, neg, mag, stack):  # pragma: no cover - compiled
    """Node table of the document ``text[s:e]`` (not blank); returns the node count, or -1
    when the row must go to the reference.  Node 0 is the top value; ``a``/``b`` a string's
    or number's span, children linked first -> last by ``nxt`` (an object's alternate key,
    value)."""
    p = _skip(text, s, e)
    n = 0
    depth = 0
    # expect: 0 a value, 1 a key or '}' (just after '{'), 2 ',' or close, 3 a key (after ',' in
    # an object), 4 ':' after a key
    expect = 0
    while True:
        p = _skip(text, p, e)
        if expect == 0 or expect == 1 or expect == 3:
            if p >= e:
                return -1
            c = text[p]
            top = stack[depth - 1] if depth > 0 else -1
            if expect == 1 and c == 125:  # '}' of an empty object
                depth -= 1
                p += 1
                expect = 2
                if depth == 0:
                    break
                continue
            if expect == 0 and c == 93 and top >= 0 and kind[top] == _K_ARRAY and count[top] == 0:
                depth -= 1  # ']' of an empty array (right after its '[')
                p += 1
                expect = 2
                if depth == 0:
                    break
                continue
            if (expect == 1 or expect == 3) and c != 34:
                return -1  # a key must be a string
            node = n
            n += 1
            parent[node] = top
            nxt[node] = -1
            first[node] = -1
            last[node] = -1
            count[node] = 0
            if top >= 0:
                if first[top] < 0:
                    first[top] = node
                else:
                    nxt[last[top]] = node
                last[top] = node
                count[top] += 1
            if c == 34:  # string
                q = p + 1
                while q < e and text[q] != 34:
                    if text[q] == 92:
                        return -1  # escapes: the reference
                    q += 1
                if q >= e:
                    return -1
                kind[node] = _K_STRING
                a[node] = p + 1
                b[node] = q
                p = q + 1
                expect = 4 if (expect == 1 or expect == 3) else 2
                continue
            if c == 123 or c == 91:  # '{' / '['
                if depth >= MAX_DEPTH:
                    return -1
                kind[node] = _K_OBJECT if c == 123 else _K_ARRAY
                stack[depth] = node
                depth += 1
                p += 1
                expect = 1 if c == 123 else 0
                continue
            if c == 116:  # true
                if p + 4 <= e and text[p + 1] == 114 and text[p + 2] == 117 and text[p + 3] == 101:
                    kind[node] = _K_TRUE
                    p += 4
                    expect = 2
                    continue
                return -1
            if c == 102:  # false
                if p + 5 <= e and text[p + 1] == 97 and text[p + 2] == 108 and text[p + 3] == 115 and text[p + 4] == 101:
                    kind[node] = _K_FALSE
                    p += 5
                    expect = 2
                    continue
                return -1
            if c == 110:  # null
                if p + 4 <= e and text[p + 1] == 117 and text[p + 2] == 108 and text[p + 3] == 108:
                    kind[node] = _K_NULL
                    p += 4
                    expect = 2
                    continue
                return -1
            # a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
            q = p
            negative = False
            if text[q] == 45:
                negative = True
                q += 1
            if q >= e or text[q] < 48 or text[q] > 57:
                return -1
            if text[q] == 48 and q + 1 < e and 48 <= text[q + 1] <= 57:
                return -1  # a leading zero
            digits = 0
            value = np.uint64(0)
            big = False
            while q < e and 48 <= text[q] <= 57:
                d = np.uint64(text[q] - 48)
                if value > np.uint64(1844674407370955161) or (
                    value == np.uint64(1844674407370955161) and d > np.uint64(5)
                ):
                    big = True
                else:
                    value = value * np.uint64(10) + d
                digits += 1
                q += 1
            is_float = False
            if q < e and text[q] == 46:
                is_float = True
                q += 1
                if q >= e or text[q] < 48 or text[q] > 57:
                    return -1
                while q < e and 48 <= text[q] <= 57:
                    q += 1
            if q < e and (text[q] == 101 or text[q] == 69):
                is_float = True
                q += 1
                if q < e and (text[q] == 43 or text[q] == 45):
                    q += 1
                if q >= e or text[q] < 48 or text[q] > 57:
                    return -1
                while q < e and 48 <= text[q] <= 57:
                    q += 1
            a[node] = p
            b[node] = q
            if is_float:
                kind[node] = _K_FLOAT
            else:
                if big or (negative and value > np.uint64(9223372036854775808)):
                    return -1  # beyond u64 / i64: a float in the reference
                kind[node] = _K_INT
                neg[node] = negative and value != np.uint64(0)
                mag[node] = value
            p = q
            expect = 2
            continue
        if expect == 4:
            if p >= e or text[p] != 58:
                return -1
            p += 1
            expect = 0
            continue
        # expect == 2: after a value
        if depth == 0:
            break
        if p >= e:
            return -1
        top = stack[depth - 1]
        c = text[p]
        if c == 44:
            p += 1
            expect = 3 if kind[top] == _K_OBJECT else 0
            continue
        if (c == 93 and kind[top] == _K_ARRAY) or (c == 125 and kind[top] == _K_OBJECT):
            depth -= 1
            p += 1
            if depth == 0:
                break
            continue
        return -1
    if _skip(text, p, e) != e:
        return -1
    return n


@njit(**_JIT)
def _key_less(text, a, b, i, j):  # pragma: no cover - compiled
    """-1 / 0 / 1: key node ``i`` sorts before / equals / after key node ``j`` (bytes)."""
    li = b[i] - a[i]
    lj = b[j] - a[j]
    m = min(li, lj)
    for k in range(m):
        ci = text[a[i] + k]
        cj = text[a[j] + k]
        if ci != cj:
            return -1 if ci < cj else 1
    if li == lj:
        return 0
    return -1 if li < lj else 1


@njit(**_JIT)
def _put_u32(out, o, v):  # pragma: no cover - compiled
    out[o] = (v >> 24) & 0xFF
    out[o + 1] = (v >> 16) & 0xFF
    out[o + 2] = (v >> 8) & 0xFF
    out[o + 3] = v & 0xFF


@njit(**_JIT)
def _encode_rows(text, offsets, valid):  # pragma: no cover - compiled
    """JSONB of each valid row of ``text`` / ``offsets``: ``(bytes, offsets, bad rows, float
    token starts, ends, output positions)``; bad rows (and invalid ones) are left empty."""
    m = offsets.size - 1
    longest = 1
    for r in range(m):
        longest = max(longest, offsets[r + 1] - offsets[r] + 1)
    kind = np.empty(longest, np.int8)
    a = np.empty(longest, np.int64)
    b = np.empty(longest, np.int64)
    parent = np.empty(longest, np.int64)
    nxt = np.empty(longest, np.int64)
    first = np.empty(longest, np.int64)
    last = np.empty(longest, np.int64)
    count = np.empty(longest, np.int64)
    neg = np.zeros(longest, np.bool_)
    mag = np.zeros(longest, np.uint64)
    size = np.empty(longest, np.int64)
    at = np.empty(longest, np.int64)
    stack = np.empty(MAX_DEPTH + 1, np.int64)
    order = np.empty(longest, np.int64)
    cap = 2 * (offsets[m] - offsets[0]) + 16 * m + 64
    out = np.empty(cap, np.uint8)
    out_off = np.zeros(m + 1, np.int64)
    bad = np.zeros(m, np.bool_)
    fcap = 1024
    fa = np.empty(fcap, np.int64)
    fb = np.empty(fcap, np.int64)
    fp = np.empty(fcap, np.int64)
    nf = 0
    o = 0
    for r in range(m):
        out_off[r] = o
        if not valid[r]:
            continue
        s = offsets[r]
        e = offsets[r + 1]
        if _skip(text, s, e) == e:  # blank: the document null
            need = 8
            n = 0
        else:
            n = _parse(text, s, e, kind, a, b, parent, nxt, first, last, count, neg, mag, stack)
            if n < 0:
                bad[r] = True
                continue
            # sizes bottom-up (children come after their parent)
            for i in range(n - 1, -1, -1):
                k = kind[i]
                if k == _K_STRING:
                    size[i] = b[i] - a[i]
                elif k == _K_INT:
                    size[i] = _int_bytes(neg[i], mag[i])
                elif k == _K_FLOAT:
                    size[i] = 9
                elif k == _K_ARRAY or k == _K_OBJECT:
                    tot = 4 + 4 * count[i]
                    c = first[i]
                    while c >= 0:
                        tot += size[c]
                        c = nxt[c]
                    size[i] = tot
                else:
                    size[i] = 0
            k0 = kind[0]
            need = size[0] if (k0 == _K_ARRAY or k0 == _K_OBJECT) else 8 + size[0]
        if o + need > out.size:
            grown = np.empty(max(2 * out.size, o + need), np.uint8)
            grown[:o] = out[:o]
            out = grown
        if n == 0:
            _put_u32(out, o, 0x2 << 28)
            _put_u32(out, o + 4, 0)
            o += 8
            continue
        start_o = o
        k0 = kind[0]
        if not (k0 == _K_ARRAY or k0 == _K_OBJECT):
            # a scalar document: header, then the value as its single element
            _put_u32(out, o, 0x2 << 28)
            at[0] = o + 4  # the entry; data follows at o + 8
            o += 4
        else:
            at[0] = o
        failed = False
        for i in range(n):
            k = kind[i]
            if i == 0 and not (k == _K_ARRAY or k == _K_OBJECT):
                # entry of the scalar
                dpos = at[0] + 4
                at[0] = dpos
                tag = 0
                if k == _K_STRING:
                    tag = 0x1
                elif k == _K_INT or k == _K_FLOAT:
                    tag = 0x2
                elif k == _K_FALSE:
                    tag = 0x3
                elif k == _K_TRUE:
                    tag = 0x4
                _put_u32(out, dpos - 4, (tag << 28) | size[0])
            if k == _K_ARRAY or k == _K_OBJECT:
                base = at[i]
                nch = count[i]
                c = first[i]
                j = 0
                while c >= 0:
                    order[j] = c
                    j += 1
                    c = nxt[c]
                items = nch
                if k == _K_OBJECT:
                    pairs = nch // 2
                    # insertion sort of the pairs by key bytes (order[0:pairs] keys, values after)
                    for q in range(pairs):
                        order[q] = order[2 * q]  # keys, in input order (values recovered below)
                    for q in range(1, pairs):
                        key = order[q]
                        z = q - 1
                        while z >= 0 and _key_less(text, a, b, key, order[z]) < 0:
                            order[z + 1] = order[z]
                            z -= 1
                        order[z + 1] = key
                    for q in range(1, pairs):
                        if _key_less(text, a, b, order[q - 1], order[q]) == 0:
                            failed = True
                    for q in range(pairs):
                        order[pairs + q] = nxt[order[q]]  # the value after its key
                    _put_u32(out, base, (0x4 << 28) | pairs)
                else:
                    _put_u32(out, base, (0x8 << 28) | nch)
                dpos = base + 4 + 4 * items
                for q in range(items):
                    c = order[q]
                    kc = kind[c]
                    tag = 0
                    if kc == _K_STRING:
                        tag = 0x1
                    elif kc == _K_INT or kc == _K_FLOAT:
                        tag = 0x2
                    elif kc == _K_FALSE:
                        tag = 0x3
                    elif kc == _K_TRUE:
                        tag = 0x4
                    elif kc == _K_ARRAY or kc == _K_OBJECT:
                        tag = 0x5
                    _put_u32(out, base + 4 + 4 * q, (tag << 28) | size[c])
                    at[c] = dpos
                    dpos += size[c]
            elif k == _K_STRING:
                ln = b[i] - a[i]
                out[at[i] : at[i] + ln] = text[a[i] : b[i]]
            elif k == _K_INT:
                d = at[i]
                if mag[i] == 0:
                    out[d] = 0
                else:
                    nb = size[i] - 1
                    v = mag[i]
                    if neg[i]:
                        v = np.uint64(0) - v  # two's complement
                        out[d] = 0x40
                    else:
                        out[d] = 0x50
                    for q in range(nb):
                        out[d + nb - q] = np.uint8(v & np.uint64(0xFF))
                        v >>= np.uint64(8)
            elif k == _K_FLOAT:
                out[at[i]] = 0x60
                if nf == fa.size:
                    fa = np.concatenate((fa, np.empty(fa.size, np.int64)))
                    fb = np.concatenate((fb, np.empty(fb.size, np.int64)))
                    fp = np.concatenate((fp, np.empty(fp.size, np.int64)))
                fa[nf] = a[i]
                fb[nf] = b[i]
                fp[nf] = at[i] + 1
                nf += 1
        if failed:
            # drop this row's floats and bytes: the reference encodes it
            while nf > 0 and fp[nf - 1] > start_o:
                nf -= 1
            bad[r] = True
            o = start_o
            continue
        o = start_o + need
    out_off[m] = o
    return out[:o], out_off, bad, fa[:nf], fb[:nf], fp[:nf]


def _reference(text: str | None, column: str, row: int) -> bytes | None:
    if text is None:
        return None
    try:
        value = _DECODER.decode(text) if text.strip(" \t\n\r") else None
        return encode_jsonb(value)
    except (ValueError, UnicodeEncodeError, RecursionError) as exc:
        raise InvalidJsonError(f"Failed to encode JSON of column {column!r}, row {row}: {exc}") from None


def text_to_jsonb(values: pa.Array, column: str) -> pa.Array:
    """A string / large_string array of JSON text (nulls kept) as the ``large_binary``
    JSONB documents pylance stores for an ``arrow.json`` column.  A value that is not JSON
    raises :class:`InvalidJsonError` naming ``column`` and the row."""
    n = len(values)
    if values.type != pa.large_string():
        values = values.cast(pa.large_string())
    bufs = values.buffers()
    if n == 0:
        return pa.array([], pa.large_binary())
    offsets = np.frombuffer(bufs[1], np.int64, count=n + 1, offset=values.offset * 8)
    text = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    valid = np.ones(n, np.bool_) if values.null_count == 0 else values.is_valid().to_numpy(zero_copy_only=False)
    data, out_off, bad, fa, fb, fp = _encode_rows(text, np.ascontiguousarray(offsets), valid)
    if fa.size:
        tokens = pa.Array.from_buffers(
            pa.large_string(), fa.size,
            [None, pa.py_buffer(np.concatenate([[0], np.cumsum(fb - fa)]).astype(np.int64)),
             pa.py_buffer(_gather(text, fa, fb))],
        )
        floats = pc.cast(tokens, pa.float64()).to_numpy(zero_copy_only=False)
        finite = np.isfinite(floats)
        if not finite.all():  # an overflow: the infinity tag, written by the reference
            rows = np.searchsorted(out_off, fp[~finite], side="right") - 1
            bad[rows] = True
        be = floats.astype(">f8").view(np.uint8).reshape(-1, 8)
        idx = fp[:, None] + np.arange(8)[None, :]
        data[idx.reshape(-1)] = be.reshape(-1)
    if bad.any():
        texts = values.to_pylist()
        docs: list[bytes | None] = []
        for i in range(n):
            if bad[i]:
                docs.append(_reference(texts[i], column, i))
            elif not valid[i]:
                docs.append(None)
            else:
                docs.append(data[out_off[i] : out_off[i + 1]].tobytes())
        return pa.array(docs, pa.large_binary())
    validity = None if values.null_count == 0 else values.buffers()[0]
    if validity is not None and values.offset:
        validity = values.is_valid().buffers()[1]
    return pa.Array.from_buffers(
        pa.large_binary(), n, [validity, pa.py_buffer(out_off - out_off[0]), pa.py_buffer(data)], values.null_count
    )


def _gather(text: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The bytes ``text[starts[i]:ends[i]]`` back to back."""
    lens = ends - starts
    pos = np.concatenate([[0], np.cumsum(lens)[:-1]])
    return text[np.repeat(starts - pos, lens) + np.arange(int(lens.sum()))]
