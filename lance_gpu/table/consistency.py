# SPDX-License-Identifier: Apache-2.0
"""Cross-checks of a manifest and of its data files: metadata that parses but cannot be right.

:func:`check_manifest` runs on every manifest that is loaded; :func:`check_data_file` on
every data file when a fragment first opens it.  Each failure is a
:class:`~lance_gpu.errors.CorruptFileError` naming the file at fault.

Invariants (pylance writes nothing else):

* ``data_format`` is ``lance`` (or unset, very old datasets) with a storage version we know
  (``0.1`` legacy, ``2.0`` .. ``2.3``; unset reads as 2.0); data files name a known file
  version: ``(0, 1|2)`` legacy, ``(0, 3)`` / ``(2, 0)`` .. ``(2, 3)``.
* fragment ids are unique; a data file path is a non-empty relative name without NUL bytes
  or ``..`` components; ``fields`` and ``column_indices`` agree in length; a deletion file
  deletes at most ``physical_rows`` rows.
* a data file holds exactly ``physical_rows`` rows, its column indices lie inside the file,
  and the field ids the manifest names for it are ids of the file's own schema (v2 files
  carry their schema, with field ids, in the ``FileDescriptor``) -- a corrupted id would
  otherwise move a column to the wrong field or make it read as nulls -- or, for a file
  written on its own and attached later (its fields numbered from 0), its fields have, in
  order, the types of the dataset fields the manifest names.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError
from lance_gpu.file.container import SharedParses
from lance_gpu.file.legacy import is_legacy_file_version

if TYPE_CHECKING:
    from lance_gpu.file.container import LanceFileReader
    from lance_gpu.file.legacy import LegacyFileReader
    from lance_gpu.table.schema import LanceSchema

__all__ = ["KNOWN_DATA_FORMATS", "KNOWN_FILE_VERSIONS", "check_data_file", "check_manifest"]

KNOWN_DATA_FORMATS = frozenset({"", "0.1", "legacy", "2.0", "2.1", "2.2", "2.3"})
KNOWN_FILE_VERSIONS = frozenset({(0, 0), (0, 1), (0, 2), (0, 3), (2, 0), (2, 1), (2, 2), (2, 3)})


def check_data_file_path(name: str, where: object) -> None:
    """A data file name from a manifest: non-empty, relative, no NUL, no ``..``."""
    if not name or "\x00" in name or name.startswith("/") or ".." in name.replace("\\", "/").split("/"):
        raise CorruptFileError(where, f"invalid data file path {name!r}")


#: Kinds of data files a manifest names (:func:`file_kinds`), as bits.
LEGACY_FILES = 1
V2_FILES = 2


def file_kinds(fragments: Iterable[table_pb2.DataFragment]) -> int:
    """Which kinds of data files ``fragments`` hold: :data:`LEGACY_FILES` (0.1, ``DataFile``
    versions 0.0-0.2) and / or :data:`V2_FILES` (2.x), as bits."""
    kinds = 0
    for frag in fragments:
        for df in frag.files:
            kinds |= LEGACY_FILES if is_legacy_file_version(df.file_major_version, df.file_minor_version) else V2_FILES
        if kinds == LEGACY_FILES | V2_FILES:
            break
    return kinds


def check_manifest(manifest: table_pb2.Manifest, path: object) -> tuple[int, int]:
    """Vet a parsed manifest's data format, fragments and data file entries; returns the
    largest fragment id it names (-1 for none), ``max_fragment_id`` included, and the
    kinds of data files it names (:func:`file_kinds`).

    Runs on every manifest loaded, so the loop over fragments and files reads each field
    once and calls nothing for a sound entry (a thousand fragments: about a millisecond).
    """
    fmt = manifest.data_format
    if fmt.file_format not in ("", "lance"):
        raise CorruptFileError(path, f"unknown data file format {fmt.file_format!r}")
    if fmt.version not in KNOWN_DATA_FORMATS:
        raise CorruptFileError(path, f"unknown data storage version {fmt.version!r}")
    seen: set[int] = set()
    add = seen.add
    known = KNOWN_FILE_VERSIONS
    versions: set[tuple[int, int]] = set()
    note_version = versions.add
    for frag in manifest.fragments:
        fid = frag.id
        if fid in seen:
            raise CorruptFileError(path, f"fragment id {fid} appears twice")
        add(fid)
        for df in frag.files:
            name = df.path
            if not name or name[0] == "/" or "\x00" in name or ".." in name:
                check_data_file_path(name, path)  # the exact rule (".." only as a component)
            version = (df.file_major_version, df.file_minor_version)
            if version not in known:
                raise CorruptFileError(path, f"data file {name!r} of fragment {fid} names unknown file version {version[0]}.{version[1]}")
            note_version(version)
            fields = df.fields
            columns = df.column_indices
            if columns and len(columns) != len(fields):
                raise CorruptFileError(path, f"data file {name!r} lists {len(fields)} fields but {len(columns)} column indices")
            if fields and min(fields) < -2:
                raise CorruptFileError(path, f"data file {name!r} names field ids below -2")
        if frag.HasField("deletion_file"):
            deleted = frag.deletion_file.num_deleted_rows
            if deleted > frag.physical_rows:
                raise CorruptFileError(path, f"fragment {fid} deletes {deleted} of its {frag.physical_rows} rows")
    top = max(seen, default=-1)
    if manifest.HasField("max_fragment_id"):
        top = max(top, int(manifest.max_fragment_id))
    kinds = 0
    for major, minor in versions:
        kinds |= LEGACY_FILES if is_legacy_file_version(major, minor) else V2_FILES
    return int(top), kinds


def check_data_file(reader: LanceFileReader | LegacyFileReader, fragment: table_pb2.DataFragment, data_file: table_pb2.DataFile | None,
                    schema: LanceSchema | None = None) -> None:
    """Check an opened data file against its fragment's manifest entry (and, given the
    dataset's ``schema``, a file whose own field ids are not the manifest's against it)."""
    path = reader.path
    physical = int(fragment.physical_rows)
    if reader.num_rows != physical:
        raise CorruptFileError(path, f"holds {reader.num_rows} rows but fragment {int(fragment.id)} has {physical}")
    if data_file is None:
        return
    # What follows is a function of the file's descriptor bytes, its column count and the
    # manifest's column indices and field ids: files written alike are checked once.
    descriptor_bytes = getattr(getattr(reader, "meta", None), "_descriptor_bytes", None)
    passed_key = None
    if descriptor_bytes is not None:
        passed_key = (descriptor_bytes, reader.num_columns, tuple(data_file.column_indices), tuple(data_file.fields))
        if _PASSED.get(passed_key):
            return
    cols = [int(c) for c in data_file.column_indices]
    if any(c >= reader.num_columns for c in cols):
        raise CorruptFileError(path, f"the manifest names column {max(cols)} of a file of {reader.num_columns} columns")
    own = [int(f.id) for f in reader.descriptor.schema.fields]
    if own:
        own_ids = set(own)
        foreign = [int(i) for i in data_file.fields if int(i) >= 0 and int(i) not in own_ids]
        if foreign and not _same_types(reader, data_file, schema):
            raise CorruptFileError(path, f"the manifest names field ids {foreign} that the file's schema does not hold "
                                         "(nor fields of the same types in the same order)")
        if foreign:
            return  # passed against this schema: not remembered (the key does not hold it)
    if passed_key is not None:
        _PASSED.put(passed_key, True)


#: The column and field checks of :func:`check_data_file` passed, by what they depend on.
_PASSED: SharedParses[tuple[bytes, int, tuple[int, ...], tuple[int, ...]], bool] = SharedParses()


def _same_types(reader: LanceFileReader | LegacyFileReader, data_file: table_pb2.DataFile, schema: LanceSchema | None) -> bool:
    """Whether the file's own fields, in order, have the logical types of the dataset fields
    the manifest names for it: a file written on its own (``LanceFileWriter``, numbering
    its fields from 0) and attached by a ``DataReplacement`` or ``create_from_file`` is read
    by position, as pylance reads it."""
    if schema is None:
        return False
    own = list(reader.descriptor.schema.fields)
    ids = [int(i) for i in data_file.fields]
    if len(own) != len(ids):
        return False
    for mine, fid in zip(own, ids, strict=True):
        if fid < 0:
            continue
        field = schema.by_id.get(fid)
        if field is None or field.logical_type != mine.logical_type:
            return False
    return True
