# SPDX-License-Identifier: Apache-2.0
"""Deletion files: which row offsets of a fragment are deleted.

Path: ``_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}`` (``DeletionFile`` fields
``read_version`` = 2, ``id`` = 3; ``file_type`` = 1 picks the suffix).

* ``.arrow`` (ARROW_ARRAY, used for up to 5000 deleted rows): an Arrow IPC *file*
  (``ARROW1`` magic) with one non-null ``row_id: uint32`` column, usually ZSTD-compressed,
  in no particular order.
* ``.bin`` (BITMAP, above that): a portable 32-bit RoaringBitmap; the first u32 LE is the
  cookie 12346 (no run containers) or 12347 in its low 16 bits (with run containers).

A deletion file holds every deleted row of the fragment, not a delta against older ones.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError, MissingFileError, UnsupportedFeatureError
from lance_gpu.io.store import ObjectStore, join

__all__ = ["deletion_file_path", "read_deletion_file", "parse_deletion_arrow", "parse_deletion_bitmap"]

_ROARING_COOKIE_NO_RUNS = 12346
_ROARING_COOKIE_RUNS = 12347


def deletion_file_path(
    store: ObjectStore, root: str, fragment_id: int, deletion_file: table_pb2.DeletionFile
) -> str:
    """The key ``{root}/_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}``."""
    dataset_uri = store.uri(root)
    if deletion_file.HasField("base_id"):
        raise UnsupportedFeatureError(
            f"{os.fspath(dataset_uri)}: deletion file of fragment {fragment_id} lives under "
            f"base path {deletion_file.base_id}; base paths are not supported"
        )
    suffix = {
        table_pb2.DeletionFile.ARROW_ARRAY: "arrow",
        table_pb2.DeletionFile.BITMAP: "bin",
    }.get(deletion_file.file_type)
    if suffix is None:
        raise UnsupportedFeatureError(
            f"{os.fspath(dataset_uri)}: fragment {fragment_id} has deletion file type "
            f"{deletion_file.file_type}"
        )
    name = f"{fragment_id}-{deletion_file.read_version}-{deletion_file.id}.{suffix}"
    return join(root, "_deletions", name)


def parse_deletion_arrow(data: bytes, path: str | os.PathLike[str] = "<memory>") -> np.ndarray:
    """Sorted uint32 row offsets from the bytes of an ``.arrow`` deletion file."""
    try:
        reader = ipc.open_file(pa.py_buffer(data))
        table = reader.read_all()
    except (pa.ArrowException, OSError, ValueError) as exc:
        # any Arrow failure on these bytes (ArrowInvalid, ArrowNotImplementedError for a
        # damaged type, ...) means the file is corrupt
        raise CorruptFileError(path, f"not a readable Arrow IPC file: {exc}") from exc
    if table.num_columns != 1 or not pa.types.is_uint32(table.schema.field(0).type):
        raise CorruptFileError(
            path, f"expected one uint32 column 'row_id', found schema {table.schema}"
        )
    try:
        col = table.column(0)  # decodes the field's name: damaged bytes there are not UTF-8
    except (pa.ArrowException, ValueError) as exc:
        raise CorruptFileError(path, f"damaged Arrow schema ({exc})") from exc
    if col.null_count:
        raise CorruptFileError(path, "row_id column holds nulls")
    values = col.to_numpy().astype(np.uint32, copy=False)
    return np.unique(values)  # sorted, and duplicates (never written) dropped


def parse_deletion_bitmap(data: bytes, path: str | os.PathLike[str] = "<memory>") -> np.ndarray:
    """Sorted uint32 row offsets from the bytes of a ``.bin`` (portable roaring) deletion file."""
    from pyroaring import BitMap

    if len(data) < 8:
        raise CorruptFileError(path, f"roaring bitmap of {len(data)} bytes is truncated")
    cookie = int.from_bytes(data[:4], "little")
    if cookie != _ROARING_COOKIE_NO_RUNS and cookie & 0xFFFF != _ROARING_COOKIE_RUNS:
        raise CorruptFileError(path, f"bad roaring bitmap cookie {cookie:#010x}")
    try:
        bitmap = BitMap.deserialize(data)
    except (ValueError, OSError, RuntimeError) as exc:
        raise CorruptFileError(path, f"not a valid portable roaring bitmap: {exc}") from exc
    return np.frombuffer(bitmap.to_array(), dtype=np.uint32).copy()


def read_deletion_file(
    store: ObjectStore,
    root: str,
    fragment_id: int,
    deletion_file_pb: table_pb2.DeletionFile,
) -> np.ndarray:
    """Deleted row offsets of a fragment, as a sorted ``numpy.ndarray[uint32]``.

    Raises :class:`~lance_gpu.errors.MissingFileError` (a ``FileNotFoundError`` and a
    :class:`CorruptFileError`) if it is missing, :class:`CorruptFileError` naming the file if
    it is truncated, not the expected format, or disagrees with ``num_deleted_rows`` (when
    that is set).
    """
    key = deletion_file_path(store, root, fragment_id, deletion_file_pb)
    path = store.uri(key)
    try:
        data = store.get(key)
    except FileNotFoundError as exc:
        raise MissingFileError(path, "deletion file referenced by the manifest does not exist") from exc
    if deletion_file_pb.file_type == table_pb2.DeletionFile.ARROW_ARRAY:
        rows = parse_deletion_arrow(data, path)
    else:
        rows = parse_deletion_bitmap(data, path)
    expected = deletion_file_pb.num_deleted_rows
    if expected and expected != len(rows):
        raise CorruptFileError(
            path, f"holds {len(rows)} deleted rows but the manifest says {expected}"
        )
    return rows
