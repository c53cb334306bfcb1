# SPDX-License-Identifier: Apache-2.0
"""A new manifest's bytes from its base manifest's bytes plus the change.

A ``lance.table.Manifest`` message is a sequence of top-level fields, each a tag
(``varint(field_number << 3 | wire_type)``) and a value; a length-delimited value (wire type
2: messages, strings, packed lists) is ``varint(length) | bytes``.  The fragments are field 2,
``repeated DataFragment``: one length-delimited entry per fragment, tag byte ``0x12``.  A
repeated field may be written in pieces and fields in any order (a parser, protobuf's or
pylance's ``prost``, joins them), but writers (upb, prost) write fields in number order, so the
fragments are one contiguous run between the schema and everything else::

    [field 1 entries: the schema] [0x12 len DataFragment]... [fields 3..23: version, flags, ...]

:class:`FragmentLayout` records where each entry of that run begins in a message's bytes, and
each fragment's id and whether it has a deletion file.  A :class:`ManifestDraft` is a new
manifest as its *head* (a ``Manifest`` without fragments: every other field) plus its
fragments as a sequence of sources: ranges of the base's entries, kept as the base's bytes,
and new ``DataFragment`` messages, encoded alone.  :meth:`ManifestDraft.encode` writes the
head's field 1 entries, the fragment entries, then the head's other fields: the message a
``Manifest`` holding all of it serializes to (number order), without copying, parsing or
encoding again the fragments it keeps.  An append to a manifest of 10,000 fragments costs the
few new entries and one join of bytes, not a copy and an encoding of the 10,000.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lance_gpu._proto import table_pb2

__all__ = ["FRAGMENTS_FIELD", "FragmentLayout", "ManifestDraft", "entry_of_fragment_bytes", "entry_prefix", "fragment_entry", "join_fragment_entries"]

#: ``Manifest.fragments``' field number.
FRAGMENTS_FIELD = 2
_FRAGMENT_TAG = FRAGMENTS_FIELD << 3 | 2  # 0x12: field 2, length-delimited


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _skip(data: bytes | memoryview, pos: int, wire: int) -> int:
    """The position after a value of wire type ``wire`` starting at ``pos``."""
    if wire == 0:
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    if wire == 1:
        return pos + 8
    if wire == 2:
        length, pos = _varint(data, pos)
        return pos + length
    if wire == 5:
        return pos + 4
    raise ValueError(f"wire type {wire} (groups) is not used by a Manifest")


def _fragment_starts(raw: bytes | memoryview) -> np.ndarray | None:
    """Where each fragment entry of the Manifest message ``raw`` begins, and one more: where
    the run ends (``int64``, one more than fragments).  Without fragments: one entry, where
    the run would be (before the first field numbered above 2).  None when the fragment
    entries are not one contiguous run (or ``raw`` does not walk to its end)."""
    starts: list[int] = []
    end = -1  # where the run ended (-1: not yet)
    insert = -1  # the first entry past field 2's number
    n = len(raw)
    pos = 0
    try:
        while pos < n:
            if raw[pos] == _FRAGMENT_TAG:
                if end >= 0:
                    return None  # fragments in two runs
                while pos < n and raw[pos] == _FRAGMENT_TAG:  # the run, in one tight loop
                    starts.append(pos)
                    length, pos = _varint(raw, pos + 1)
                    pos += length
                end = pos
                continue
            start = pos
            tag, pos = _varint(raw, pos)
            if tag >> 3 == FRAGMENTS_FIELD:
                return None  # field 2 not length-delimited: not a Manifest we can splice
            if insert < 0 and tag >> 3 > FRAGMENTS_FIELD:
                insert = start
            pos = _skip(raw, pos, tag & 7)
    except IndexError:
        return None
    if pos != n:
        return None
    if not starts:
        return np.array([insert if insert >= 0 else n], np.int64)
    starts.append(end)
    return np.array(starts, np.int64)


def fragment_entry(fragment: table_pb2.DataFragment) -> bytes:
    """One ``Manifest.fragments`` entry: tag ``0x12``, varint length, the DataFragment."""
    return entry_of_fragment_bytes(fragment.SerializeToString())


def entry_of_fragment_bytes(body: bytes) -> bytes:
    """One ``Manifest.fragments`` entry around a serialized DataFragment ``body``."""
    return entry_prefix(len(body)) + body


_ENTRY_PREFIXES: dict[int, bytes] = {}


def entry_prefix(length: int) -> bytes:
    """The head of a ``Manifest.fragments`` entry of a ``length``-byte DataFragment: tag
    ``0x12`` and the varint length (the common lengths remembered)."""
    prefix = _ENTRY_PREFIXES.get(length)
    if prefix is None:
        prefix = bytes((_FRAGMENT_TAG,)) + _encode_varint(length)
        if len(_ENTRY_PREFIXES) < 1 << 14:
            _ENTRY_PREFIXES[length] = prefix
    return prefix


def join_fragment_entries(bodies: Sequence[bytes]) -> bytes:
    """The ``Manifest.fragments`` entries of serialized DataFragments ``bodies``, in order,
    as one byte string (a Manifest message holding only those fragments)."""
    parts: list[bytes] = []
    add = parts.append
    for body in bodies:
        add(entry_prefix(len(body)))
        add(body)
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class FragmentLayout:
    """Where the fragments are in the bytes of one Manifest message (see the module docstring).

    ``raw``: the message (bytes, or a view of the file's bytes it was read from).  ``starts`` (``int64``, one more than fragments): fragment ``k``'s
    entry is ``raw[starts[k]:starts[k + 1]]``; ``raw[:starts[0]]`` and ``raw[starts[-1]:]``
    are every other field.  ``ids`` (``int64``) and ``has_deletion`` (``bool``): each
    fragment's ``id`` and whether it names a deletion file, in manifest order.
    """

    raw: bytes | memoryview
    starts: np.ndarray
    ids: np.ndarray
    has_deletion: np.ndarray

    @classmethod
    def of(cls, raw: bytes | memoryview, manifest: table_pb2.Manifest) -> FragmentLayout:
        """The layout of ``raw``, the bytes ``manifest`` was parsed from (its ids and deletion
        flags are read from ``manifest``).  Bytes whose fragments are not one run (a writer
        that interleaved fields) are replaced by ``manifest``'s own serialization."""
        starts = _fragment_starts(raw)
        if starts is None or len(starts) != len(manifest.fragments) + 1:
            raw = manifest.SerializeToString()
            starts = _fragment_starts(raw)
            assert starts is not None and len(starts) == len(manifest.fragments) + 1
        frags = manifest.fragments
        ids = np.fromiter((f.id for f in frags), np.int64, len(frags))
        has_deletion = np.fromiter((f.HasField("deletion_file") for f in frags), np.bool_, len(frags))
        return cls(raw, starts, ids, has_deletion)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def head(self) -> table_pb2.Manifest:
        """A new ``Manifest`` of every field but the fragments (parsed from the bytes around
        the run: the schema and scalars, not the fragments)."""
        first, last = int(self.starts[0]), int(self.starts[-1])
        return table_pb2.Manifest.FromString(b"".join((self.raw[:first], self.raw[last:])))

    def entry(self, position: int) -> table_pb2.DataFragment:
        """The fragment at ``position``, parsed from its entry alone."""
        piece = bytes(self.raw[int(self.starts[position]) : int(self.starts[position + 1])])
        return table_pb2.Manifest.FromString(piece).fragments[0]

    def positions(self, fragment_ids: Sequence[int]) -> dict[int, int]:
        """The positions of the fragments of ``fragment_ids`` that are here, by id."""
        wanted = np.asarray(sorted({int(i) for i in fragment_ids}), np.int64)
        if not len(wanted) or not len(self.ids):
            return {}
        hit = np.flatnonzero(np.isin(self.ids, wanted))
        return {int(self.ids[k]): int(k) for k in hit}


class ManifestDraft:
    """A new manifest: ``head`` (a ``Manifest`` without fragments, which the operation and
    the commit change: schema, version, flags, offsets ...) and its fragments, in order,
    as positions of ``base``'s fragments (kept as their bytes) and new ``DataFragment`` s.

    ``sources`` (``int64``): ``k >= 0`` is ``base``'s fragment at position ``k``, ``-1 - j``
    the new fragment ``new[j]``.
    """

    def __init__(self, head: table_pb2.Manifest, base: FragmentLayout | None, sources: np.ndarray,
                 new: Sequence[table_pb2.DataFragment] = ()) -> None:
        if head.fragments:
            raise ValueError("a draft's head holds no fragments")
        self.head = head
        self.base = base
        self.sources = np.asarray(sources, np.int64)
        self.new = list(new)
        if len(self.sources) and (int(self.sources.max()) >= (len(base) if base is not None else 0)
                                  or int(self.sources.min()) < -len(self.new)):
            raise ValueError("a draft's source is outside its base or new fragments")

    @classmethod
    def keeping(cls, base: FragmentLayout, head: table_pb2.Manifest | None = None) -> ManifestDraft:
        """Every fragment of ``base`` kept, in order (a change of other fields only)."""
        return cls(base.head() if head is None else head, base, np.arange(len(base), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.sources)

    def _named_new(self) -> list[table_pb2.DataFragment]:
        """The new fragments the sources name."""
        return [self.new[-1 - int(s)] for s in self.sources[self.sources < 0]]

    def has_deletions(self) -> bool:
        """Whether some fragment of the draft names a deletion file."""
        if any(f.HasField("deletion_file") for f in self._named_new()):
            return True
        kept = self.sources[self.sources >= 0]
        return self.base is not None and bool(self.base.has_deletion[kept].any())

    def replaced(self, fragment_ids: Sequence[int]) -> dict[int, table_pb2.DataFragment]:
        """The base's entries of the fragments of ``fragment_ids`` (the entries those of the
        same id in the draft take the place of), by id."""
        if self.base is None:
            return {}
        return {fid: self.base.entry(pos) for fid, pos in self.base.positions(fragment_ids).items()}

    def max_id(self) -> int:
        """The largest fragment id of the draft (-1: none)."""
        ids = [int(f.id) for f in self._named_new()]
        kept = self.sources[self.sources >= 0]
        if self.base is not None and len(kept):
            ids.append(int(self.base.ids[kept].max()))
        return max(ids, default=-1)

    def _runs(self) -> list[tuple[int, int]]:
        """The sources as runs ``(first, stop)``: base positions ``first..stop-1`` in order,
        or one new fragment ``(-1 - j, -1 - j)``."""
        src = self.sources
        if not len(src):
            return []
        breaks = np.flatnonzero((src[1:] != src[:-1] + 1) | (src[1:] < 0) | (src[:-1] < 0)) + 1
        firsts = np.concatenate(([0], breaks))
        stops = np.concatenate((breaks, [len(src)]))
        out = []
        for a, b in zip(firsts.tolist(), stops.tolist(), strict=True):
            first = int(src[a])
            out.append((first, first) if first < 0 else (first, int(src[b - 1]) + 1))
        return out

    def encode(self) -> tuple[bytes, FragmentLayout]:
        """The Manifest message's bytes (the head's field 1 entries, the fragment entries, the
        head's other fields: number order) and their layout."""
        head = self.head.SerializeToString()
        split = _fragment_starts(head)
        assert split is not None and len(split) == 1
        cut = int(split[0])
        parts: list[bytes | memoryview] = [head[:cut]]
        starts: list[np.ndarray] = []
        ids: list[np.ndarray] = []
        dels: list[np.ndarray] = []
        pos = cut
        base = self.base
        raw = memoryview(base.raw) if base is not None else None
        for first, stop in self._runs():
            if first < 0:
                frag = self.new[-1 - first]
                entry = fragment_entry(frag)
                parts.append(entry)
                starts.append(np.array([pos], np.int64))
                ids.append(np.array([int(frag.id)], np.int64))
                dels.append(np.array([frag.HasField("deletion_file")], np.bool_))
                pos += len(entry)
                continue
            assert base is not None and raw is not None
            a, b = int(base.starts[first]), int(base.starts[stop])
            parts.append(raw[a:b])
            starts.append(base.starts[first:stop] - a + pos)
            ids.append(base.ids[first:stop])
            dels.append(base.has_deletion[first:stop])
            pos += b - a
        parts.append(head[cut:])
        starts.append(np.array([pos], np.int64))
        data = b"".join(parts)
        layout = FragmentLayout(
            data, np.concatenate(starts),
            np.concatenate(ids) if ids else np.zeros(0, np.int64),
            np.concatenate(dels) if dels else np.zeros(0, np.bool_),
        )
        return data, layout

    def fragments(self) -> list[table_pb2.DataFragment]:
        """The draft's fragments as messages (parsed: for the rare paths that need all)."""
        return list(self.materialize().fragments)

    def materialize(self) -> table_pb2.Manifest:
        """The whole new ``Manifest`` (its bytes encoded and parsed)."""
        return table_pb2.Manifest.FromString(self.encode()[0])
