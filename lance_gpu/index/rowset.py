# SPDX-License-Identifier: Apache-2.0
"""Sets of row addresses, per fragment, and their serialized form in bitmap index files.

A row address is ``fragment_id << 32 | physical row offset``.  A row set is a dict from a
fragment id to a ``pyroaring.BitMap`` of row offsets, or to :data:`FULL` (every row of the
fragment).

Serialized (pylance's ``RowAddrTreeMap``, all integers little-endian)::

    u32 number of fragments
    per fragment, ascending id:
        u32 fragment id
        u32 n: 0 = every row of the fragment, else the size of what follows
        n bytes: the row offsets, a portable-format roaring bitmap
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

import numpy as np
from pyroaring import BitMap

from lance_gpu.errors import CorruptFileError

__all__ = ["FULL", "deserialize_rowset", "intersection", "rowset_from_addresses", "serialize_rowset", "union"]

#: The marker of a whole fragment.
FULL = None


def deserialize_rowset(data: bytes, path: str = "<index>") -> dict[int, BitMap | None]:
    """Parse a serialized ``RowAddrTreeMap`` (see the module docstring)."""
    view = memoryview(data)
    if len(view) < 4:
        raise CorruptFileError(path, "row address set shorter than its count")
    (count,) = struct.unpack_from("<I", view, 0)
    pos = 4
    out: dict[int, BitMap | None] = {}
    for _ in range(count):
        if pos + 8 > len(view):
            raise CorruptFileError(path, "row address set truncated")
        frag, size = struct.unpack_from("<II", view, pos)
        pos += 8
        if size == 0:
            out[frag] = FULL
            continue
        if pos + size > len(view):
            raise CorruptFileError(path, "row address set truncated")
        out[frag] = BitMap.deserialize(bytes(view[pos : pos + size]))
        pos += size
    return out


def serialize_rowset(rows: Mapping[int, BitMap | None]) -> bytes:
    """The serialized ``RowAddrTreeMap`` of ``rows`` (see the module docstring)."""
    parts = [struct.pack("<I", len(rows))]
    for frag in sorted(rows):
        bitmap = rows[frag]
        if bitmap is FULL:
            parts.append(struct.pack("<II", frag, 0))
        else:
            data = bitmap.serialize()
            parts.append(struct.pack("<II", frag, len(data)))
            parts.append(data)
    return b"".join(parts)


def rowset_from_addresses(addresses: np.ndarray) -> dict[int, BitMap | None]:
    """Group row addresses (uint64) by fragment."""
    addresses = np.asarray(addresses, np.uint64)
    if addresses.size == 0:
        return {}
    frags = (addresses >> np.uint64(32)).astype(np.int64)
    offsets = (addresses & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    order = np.argsort(frags, kind="stable")
    frags, offsets = frags[order], offsets[order]
    cuts = np.flatnonzero(np.diff(frags)) + 1
    out: dict[int, BitMap | None] = {}
    for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [frags.size]]), strict=False):
        bitmap = BitMap()
        bitmap.update(offsets[lo:hi])
        out[int(frags[lo])] = bitmap
    return out


def union(sets: Iterable[Mapping[int, BitMap | None]]) -> dict[int, BitMap | None]:
    """The union of row sets."""
    out: dict[int, BitMap | None] = {}
    for rows in sets:
        for frag, bitmap in rows.items():
            if frag in out:
                cur = out[frag]
                out[frag] = FULL if cur is FULL or bitmap is FULL else cur | bitmap
            else:
                out[frag] = bitmap if bitmap is FULL else BitMap(bitmap)
    return out


def intersection(a: Mapping[int, BitMap | None], b: Mapping[int, BitMap | None]) -> dict[int, BitMap | None]:
    """The intersection of two row sets."""
    out: dict[int, BitMap | None] = {}
    for frag in a.keys() & b.keys():
        x, y = a[frag], b[frag]
        out[frag] = y if x is FULL else x if y is FULL else x & y
    return out
