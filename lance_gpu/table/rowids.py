# SPDX-License-Identifier: Apache-2.0
"""Stable row ids: ``lance.table.RowIdSequence`` decoded into numpy arrays, and encoded
(:func:`encode_row_ids`, :func:`encode_versions`: the smallest segment form) by writers.

With stable row ids (reader flag 2) every fragment carries a serialized ``RowIdSequence``
(``DataFragment.inline_row_ids`` = 5, or ``external_row_ids`` = 6: an ``ExternalFile``
``{path relative to the dataset root, offset, size}``). The sequence lists the row id of
each physical row offset, deleted rows included, as segments:

* ``range {start, end}``: ``start .. end-1``
* ``range_with_holes {start, end, holes}``: the range minus the ``holes`` values
* ``range_with_bitmap {start, end, bitmap}``: ``start + i`` for every set bit i
  (LSB first within each byte)
* ``sorted_array`` / ``array``: an ``EncodedU64Array`` -- ``u16_array {base, offsets}``
  (``base`` + u16 LE), ``u32_array {base, offsets}`` (``base`` + u32 LE) or
  ``u64_array {values}`` (raw u64 LE).

``inline_created_at_versions`` (9) and ``inline_last_updated_at_versions`` (7) hold a
``RowDatasetVersionSequence``: runs ``{span: U64Segment, version}``, positional -- run k
covers the next ``len(span)`` row offsets (the span's values themselves do not matter).
"""

from __future__ import annotations

import os

import numpy as np
from google.protobuf.message import DecodeError

from lance_gpu._proto import rowids_pb2, table_pb2
from lance_gpu.errors import CorruptFileError
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.protobuf import check_strict

__all__ = [
    "decode_encoded_u64_array",
    "decode_row_id_sequence",
    "decode_segment",
    "decode_version_sequence",
    "encode_row_ids",
    "encode_versions",
    "read_fragment_row_ids",
    "read_fragment_versions",
    "segment_length",
]

_U64 = np.dtype("<u8")


def decode_encoded_u64_array(arr: rowids_pb2.EncodedU64Array, where: str = "<memory>") -> np.ndarray:
    """Values of an ``EncodedU64Array`` as uint64."""
    kind = arr.WhichOneof("array")
    dtype: np.dtype
    if kind == "u16_array":
        raw, dtype, base = arr.u16_array.offsets, np.dtype("<u2"), arr.u16_array.base
    elif kind == "u32_array":
        raw, dtype, base = arr.u32_array.offsets, np.dtype("<u4"), arr.u32_array.base
    elif kind == "u64_array":
        raw, dtype, base = arr.u64_array.values, _U64, 0
    else:
        raise CorruptFileError(where, "EncodedU64Array has no variant set")
    if len(raw) % dtype.itemsize:
        raise CorruptFileError(
            where, f"{kind} holds {len(raw)} bytes, not a multiple of {dtype.itemsize}"
        )
    values = np.frombuffer(raw, dtype=dtype).astype(np.uint64)
    if base:
        if len(values) and int(values.max()) + base > np.iinfo(np.uint64).max:
            raise CorruptFileError(where, f"{kind} base {base} + offset overflows u64")
        values += np.uint64(base)
    return values


def _check_range(start: int, end: int, kind: str, where: str) -> int:
    if end < start:
        raise CorruptFileError(where, f"{kind} has end {end} < start {start}")
    return end - start


def decode_segment(seg: rowids_pb2.U64Segment, where: str = "<memory>") -> np.ndarray:
    """Values of one ``U64Segment`` as uint64, in stored order."""
    kind = seg.WhichOneof("segment")
    if kind == "range":
        r = seg.range
        _check_range(r.start, r.end, kind, where)
        return np.arange(r.start, r.end, dtype=np.uint64)
    if kind == "range_with_holes":
        r = seg.range_with_holes
        n = _check_range(r.start, r.end, kind, where)
        holes = decode_encoded_u64_array(r.holes, where)
        if len(holes) and (holes.min() < r.start or holes.max() >= r.end):
            raise CorruptFileError(where, f"{kind} has holes outside [{r.start}, {r.end})")
        keep = np.ones(n, dtype=bool)
        keep[(holes - np.uint64(r.start)).astype(np.intp)] = False
        return np.flatnonzero(keep).astype(np.uint64) + np.uint64(r.start)
    if kind == "range_with_bitmap":
        r = seg.range_with_bitmap
        n = _check_range(r.start, r.end, kind, where)
        if len(r.bitmap) * 8 < n:
            raise CorruptFileError(
                where, f"{kind} bitmap has {len(r.bitmap)} bytes, too few for {n} positions"
            )
        bits = np.unpackbits(np.frombuffer(r.bitmap, dtype=np.uint8), count=n, bitorder="little")
        return np.flatnonzero(bits).astype(np.uint64) + np.uint64(r.start)
    if kind in ("sorted_array", "array"):
        values = decode_encoded_u64_array(getattr(seg, kind), where)
        if kind == "sorted_array" and len(values) > 1 and np.any(values[1:] < values[:-1]):
            raise CorruptFileError(where, "sorted_array segment is not sorted")
        return values
    raise CorruptFileError(where, "U64Segment has no variant set")


def decode_row_id_sequence(data: bytes, where: str | os.PathLike[str] = "<memory>") -> np.ndarray:
    """Row ids (uint64, one per physical row offset) from serialized ``RowIdSequence`` bytes."""
    where = os.fspath(where)
    seq = rowids_pb2.RowIdSequence()
    try:
        seq.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptFileError(where, f"row id sequence is not valid protobuf: {exc}") from exc
    check_strict(seq, where, "row id sequence")
    parts = [decode_segment(s, where) for s in seq.segments]
    if not parts:
        return np.empty(0, dtype=np.uint64)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def segment_length(seg: rowids_pb2.U64Segment, where: str = "<memory>") -> int:
    """Number of values in a ``U64Segment`` without materialising them (except bitmaps' bits)."""
    kind = seg.WhichOneof("segment")
    if kind == "range":
        return _check_range(seg.range.start, seg.range.end, kind, where)
    if kind == "range_with_bitmap":
        return len(decode_segment(seg, where))
    if kind == "range_with_holes":
        r = seg.range_with_holes
        return _check_range(r.start, r.end, kind, where) - len(decode_encoded_u64_array(r.holes, where))
    if kind in ("sorted_array", "array"):
        return len(decode_encoded_u64_array(getattr(seg, kind), where))
    raise CorruptFileError(where, "U64Segment has no variant set")


def decode_version_sequence(
    data: bytes, num_rows: int | None = None, where: str | os.PathLike[str] = "<memory>"
) -> np.ndarray:
    """Per-row dataset version (uint64, by row offset) from ``RowDatasetVersionSequence`` bytes.

    The runs are positional: run k covers the next ``len(span_k)`` row offsets. Only the
    span's *length* counts -- after compaction pylance 14 copies spans (bitmaps, ranges)
    from the source fragments, whose values are not offsets in the new fragment.
    """
    where = os.fspath(where)
    seq = rowids_pb2.RowDatasetVersionSequence()
    try:
        seq.ParseFromString(data)
    except DecodeError as exc:
        raise CorruptFileError(where, f"version sequence is not valid protobuf: {exc}") from exc
    check_strict(seq, where, "version sequence")
    lengths = np.array([segment_length(run.span, where) for run in seq.runs], dtype=np.int64)
    versions = np.array([run.version for run in seq.runs], dtype=np.uint64)
    total = int(lengths.sum())
    if num_rows is not None and total != num_rows:
        raise CorruptFileError(where, f"version runs cover {total} rows, expected {num_rows}")
    return np.repeat(versions, lengths)


def _external_bytes(store: ObjectStore, root: str, ext: table_pb2.ExternalFile) -> tuple[bytes, str]:
    key = join(root, ext.path)
    path = store.uri(key)
    if ext.size == 0:
        return b"", path
    try:
        f = store.open(key)
        data = f.read(int(ext.offset), int(ext.size)).tobytes()
        f.close()
    except FileNotFoundError as exc:
        raise CorruptFileError(path, "external row id / version file does not exist") from exc
    except CorruptFileError as exc:
        raise CorruptFileError(
            path, f"range [{ext.offset}, {ext.offset + ext.size}) runs past the end of the file"
        ) from exc
    return data, path


def read_fragment_row_ids(
    store: ObjectStore, root: str, fragment: table_pb2.DataFragment
) -> np.ndarray | None:
    """Row ids of a fragment (uint64, one per physical row), or None if it has none.

    Raises :class:`CorruptFileError` if the count differs from ``physical_rows``.
    """
    kind = fragment.WhichOneof("row_id_sequence")
    if kind is None:
        return None
    if kind == "inline_row_ids":
        where = f"{store.uri(root)} (fragment {fragment.id} inline row ids)"
        ids = decode_row_id_sequence(fragment.inline_row_ids, where)
    else:
        data, where = _external_bytes(store, root, fragment.external_row_ids)
        ids = decode_row_id_sequence(data, where)
    if fragment.physical_rows and len(ids) != fragment.physical_rows:
        raise CorruptFileError(
            where, f"{len(ids)} row ids for {fragment.physical_rows} physical rows"
        )
    return ids


def read_fragment_versions(
    store: ObjectStore, root: str, fragment: table_pb2.DataFragment, which: str = "created_at"
) -> np.ndarray | None:
    """Per-row ``created_at`` or ``last_updated_at`` versions of a fragment, or None."""
    if which not in ("created_at", "last_updated_at"):
        raise ValueError(f"which must be 'created_at' or 'last_updated_at', not {which!r}")
    kind = fragment.WhichOneof(f"{which}_version_sequence")
    if kind is None:
        return None
    if kind.startswith("inline_"):
        where = f"{store.uri(root)} (fragment {fragment.id} {which} versions)"
        data = getattr(fragment, kind)
    else:
        data, where = _external_bytes(store, root, getattr(fragment, kind))
    return decode_version_sequence(data, fragment.physical_rows or None, where)


def _encode_u64(values: np.ndarray) -> rowids_pb2.EncodedU64Array:
    values = values.astype(np.uint64, copy=False)
    base = int(values.min()) if values.size else 0
    span = int(values.max()) - base if values.size else 0
    if span < 1 << 16:
        return rowids_pb2.EncodedU64Array(u16_array=rowids_pb2.EncodedU64Array.U16Array(
            base=base, offsets=(values - np.uint64(base)).astype("<u2").tobytes()))
    if span < 1 << 32:
        return rowids_pb2.EncodedU64Array(u32_array=rowids_pb2.EncodedU64Array.U32Array(
            base=base, offsets=(values - np.uint64(base)).astype("<u4").tobytes()))
    return rowids_pb2.EncodedU64Array(u64_array=rowids_pb2.EncodedU64Array.U64Array(values=values.astype("<u8").tobytes()))


def encode_row_ids(ids: np.ndarray) -> bytes:
    """A ``RowIdSequence`` of ``ids``, the smallest of: one Range per contiguous run, a
    range with holes, a range with a bitmap, a sorted array (ids in increasing order) --
    or a plain array when they are not sorted."""
    ids = np.asarray(ids, dtype=np.uint64)
    if ids.size == 0:
        return rowids_pb2.RowIdSequence().SerializeToString()
    diffs = np.diff(ids.astype(np.int64))
    if not bool(np.all(diffs > 0)):
        return rowids_pb2.RowIdSequence(segments=[rowids_pb2.U64Segment(array=_encode_u64(ids))]).SerializeToString()
    candidates = [[rowids_pb2.U64Segment(sorted_array=_encode_u64(ids))]]
    breaks = np.flatnonzero(diffs != 1) + 1
    if breaks.size < 4096:
        starts = np.concatenate([[0], breaks]).astype(np.int64)
        ends = np.concatenate([breaks, [ids.size]]).astype(np.int64)
        candidates.append([
            rowids_pb2.U64Segment(range=rowids_pb2.U64Segment.Range(start=int(ids[a]), end=int(ids[b - 1]) + 1))
            for a, b in zip(starts, ends, strict=True)
        ])
    lo, hi = int(ids[0]), int(ids[-1]) + 1
    if hi - lo <= 64 * ids.size:
        present = np.zeros(hi - lo, np.bool_)
        present[(ids - np.uint64(lo)).astype(np.int64)] = True
        holes = np.flatnonzero(~present).astype(np.uint64) + np.uint64(lo)
        candidates.append([rowids_pb2.U64Segment(range_with_holes=rowids_pb2.U64Segment.RangeWithHoles(
            start=lo, end=hi, holes=_encode_u64(holes)))])
        candidates.append([rowids_pb2.U64Segment(range_with_bitmap=rowids_pb2.U64Segment.RangeWithBitmap(
            start=lo, end=hi, bitmap=np.packbits(present, bitorder="little").tobytes()))])
    encoded = [rowids_pb2.RowIdSequence(segments=c).SerializeToString() for c in candidates]
    return min(encoded, key=len)


def encode_versions(versions: np.ndarray) -> bytes:
    """A ``RowDatasetVersionSequence``: one run per stretch of equal versions."""
    versions = np.asarray(versions, dtype=np.uint64)
    seq = rowids_pb2.RowDatasetVersionSequence()
    if versions.size:
        breaks = np.flatnonzero(np.diff(versions) != 0) + 1
        starts = np.concatenate([[0], breaks]).astype(np.int64)
        ends = np.concatenate([breaks, [versions.size]]).astype(np.int64)
        for a, b in zip(starts, ends, strict=True):
            seq.runs.append(rowids_pb2.RowDatasetVersionRun(
                span=rowids_pb2.U64Segment(range=rowids_pb2.U64Segment.Range(start=int(a), end=int(b))),
                version=int(versions[a])))
    return seq.SerializeToString()
