# SPDX-License-Identifier: Apache-2.0
"""Writing deletion files, as pylance 14 does.

``_deletions/{fragment_id}-{read_version}-{random u64}.{arrow|bin}`` holds *every* deleted
row offset of the fragment (a new file replaces the old one, it is not a delta):

* up to :data:`BITMAP_THRESHOLD` (5000) rows: ``.arrow``, an Arrow IPC file with one
  non-null ``row_id: uint32`` column, ZSTD-compressed like pylance's above
  :data:`PLAIN_IPC_ROWS` rows, uncompressed up to it (pylance 14 reads both).  A few
  deleted rows compress to nothing worth having, and a zstd writer costs ~0.2 ms per file
  when the process was idle before (a delete of one row); an uncompressed file of ``n``
  rows differs from another only in its ``4 * n`` value bytes, so it is the bytes pyarrow
  wrote once for ``n`` rows (:func:`_plain_layout`) with the values put in;
* above: ``.bin``, a portable 32-bit roaring bitmap (``pyroaring.BitMap.serialize``,
  the format of roaring-rs ``serialize_into``).

The manifest entry is ``DeletionFile{file_type, read_version, id, num_deleted_rows}``.
"""

from __future__ import annotations

import secrets
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from lance_gpu._proto import table_pb2
from lance_gpu.io.store import ObjectStore
from lance_gpu.table.deletion import deletion_file_path

__all__ = ["BITMAP_THRESHOLD", "PLAIN_IPC_ROWS", "encode_deletion_rows", "write_deletion_file"]

#: Above this many deleted rows a fragment's deletion file is a roaring bitmap.
BITMAP_THRESHOLD = 5000
#: Up to this many deleted rows (4 KiB of values) the Arrow IPC file is not compressed.
PLAIN_IPC_ROWS = 1024

_SCHEMA = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])


def _ipc_file(rows: np.ndarray, compression: str | None) -> bytes:
    """The Arrow IPC file pyarrow writes for ``rows`` (one record batch of ``row_id``)."""
    batch = pa.record_batch([pa.array(rows, pa.uint32())], schema=_SCHEMA)
    sink = pa.BufferOutputStream()
    try:
        options = ipc.IpcWriteOptions(compression=compression)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # pragma: no cover - pyarrow without zstd
        options = ipc.IpcWriteOptions()
    with ipc.new_file(sink, _SCHEMA, options=options) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


@lru_cache(maxsize=256)
def _plain_layout(n: int) -> tuple[bytes, int] | None:
    """The uncompressed IPC file of ``n`` rows as pyarrow writes it, and where its ``4 * n``
    little-endian value bytes start; None if pyarrow's bytes do not show that layout
    (two files of different values then differ elsewhere too: the writer is used).

    Found by writing ``n`` zeros and ``n`` times ``0xFFFFFFFF``: the schema message, the
    batch's metadata (lengths, buffer offsets) and the footer depend on ``n`` only, so
    the two files differ exactly in the value buffer."""
    zeros = _ipc_file(np.zeros(n, np.uint32), None)
    ones = _ipc_file(np.full(n, 0xFFFFFFFF, np.uint32), None)
    if len(zeros) != len(ones):
        return None
    differ = np.flatnonzero(np.frombuffer(zeros, np.uint8) != np.frombuffer(ones, np.uint8))
    if differ.size != 4 * n or int(differ[-1]) - int(differ[0]) + 1 != 4 * n:
        return None
    return zeros, int(differ[0])


def encode_deletion_rows(rows: np.ndarray) -> tuple[table_pb2.DeletionFile.DeletionFileType, bytes]:
    """``(file_type, bytes)`` of a deletion file holding the sorted unique ``rows``."""
    rows = np.asarray(rows, dtype=np.uint32)
    if 0 < rows.size <= PLAIN_IPC_ROWS:
        layout = _plain_layout(int(rows.size))
        if layout is not None:
            template, at = layout
            out = bytearray(template)
            out[at : at + 4 * rows.size] = rows.astype("<u4", copy=False).tobytes()
            return table_pb2.DeletionFile.ARROW_ARRAY, bytes(out)
    if rows.size <= BITMAP_THRESHOLD:
        return table_pb2.DeletionFile.ARROW_ARRAY, _ipc_file(rows, "zstd" if rows.size > PLAIN_IPC_ROWS else None)
    from pyroaring import BitMap

    return table_pb2.DeletionFile.BITMAP, BitMap(rows).serialize()


def write_deletion_file(
    store: ObjectStore, root: str, fragment_id: int, read_version: int, rows: np.ndarray
) -> tuple[table_pb2.DeletionFile, str]:
    """Write the deletion file of a fragment whose deleted offsets are ``rows`` (sorted,
    unique, non-empty) into the dataset at ``root`` of ``store``; returns its manifest
    entry and its key (a fresh random id: never an existing object).  The file is not
    synced here: a commit naming it makes it durable first."""
    file_type, data = encode_deletion_rows(rows)
    pb = table_pb2.DeletionFile(
        file_type=file_type,
        read_version=int(read_version),
        id=secrets.randbits(64),
        num_deleted_rows=len(rows),
    )
    key = deletion_file_path(store, root, fragment_id, pb)
    # published unsynced, as data files are: the commit whose manifest names it syncs every
    # file the manifest adds in one parallel round before publishing the manifest
    # (lance_gpu.txn.commit), so a synced staging copy here was a second, serial fsync
    writer = store.open_writer(key)
    try:
        writer.write(data)
        writer.close(sync=False)
    except BaseException:
        writer.abort()
        raise
    return pb, key


def fragment_with_deletions(
    store: ObjectStore, root: str, fragment: table_pb2.DataFragment, read_version: int, rows: np.ndarray,
    written: list[str],
) -> table_pb2.DataFragment | None:
    """``fragment``'s manifest entry with a new deletion file for ``rows`` (all its deleted
    offsets: sorted, unique, uint32), or None when every row is deleted (the fragment leaves
    the manifest, as pylance does).  The file's key is appended to ``written`` (removed if the
    commit fails)."""
    if rows.size >= int(fragment.physical_rows):
        return None
    pb, key = write_deletion_file(store, root, int(fragment.id), read_version, rows)
    written.append(key)
    new = table_pb2.DataFragment()
    new.CopyFrom(fragment)
    new.deletion_file.CopyFrom(pb)
    return new
