# SPDX-License-Identifier: Apache-2.0
"""Fragment metadata in pylance's shape (``lance.fragment.FragmentMetadata``).

These plain dataclasses are what the commit API passes around: :func:`write_fragments`
returns them, the :class:`~lance_gpu.txn.operations.LanceOperation` types carry them, and a
distributed job ships them between processes (they pickle, and ``to_json`` /
``from_json`` give pylance's JSON, so a fragment written by pylance can be committed by
lance-gpu and the other way round).

Each converts losslessly to and from the ``lance.table.DataFragment`` protobuf the
manifest stores (:meth:`FragmentMetadata.to_pb` / :meth:`FragmentMetadata.from_pb`):

* ``DataFile``: ``path`` (relative to ``data/``), leaf ``fields``, their ``column_indices``
  in the file, the file format version, its size, an optional ``base_id``;
* ``DeletionFile``: ``_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}``,
  ``file_type`` ``"array"`` (Arrow IPC UInt32) or ``"bitmap"`` (portable roaring);
* ``RowIdMeta`` / ``RowDatasetVersionMeta``: serialized ``RowIdSequence`` /
  ``RowDatasetVersionSequence`` protobufs, inline bytes or an external file range.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from typing import Any

from lance_gpu._proto import table_pb2

__all__ = ["DataFile", "DeletionFile", "FragmentMetadata", "RowDatasetVersionMeta", "RowIdMeta"]

_DELETION_TYPES = {"array": table_pb2.DeletionFile.ARROW_ARRAY, "bitmap": table_pb2.DeletionFile.BITMAP}
_DELETION_NAMES: dict[int, str] = {int(v): k for k, v in _DELETION_TYPES.items()}


class _CallablePath(str):
    """A data file's path; calling it (pylance's old ``path()`` method) warns and returns it."""

    def __call__(self) -> str:
        warnings.warn("DataFile.path() is deprecated, use DataFile.path instead", DeprecationWarning, stacklevel=2)
        return str(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, (str(self),))


class DataFile:
    """One data file of a fragment (pylance's ``lance.fragment.DataFile``).

    Parameters
    ----------
    path : str
        The file's path relative to the dataset's ``data/`` directory.
    fields : list of int
        The field ids of the leaf columns stored in the file.
    column_indices : list of int
        The column index in the file of each field (same length as ``fields``).
    file_major_version, file_minor_version : int
        The data storage format version (2.0, 2.1, 2.2).
    file_size_bytes : int, optional
        The size of the file, if known.
    base_id : int, optional
        The id of the base path the file lives under (None: the dataset's own).
    """

    def __init__(
        self,
        path: str,
        fields: list[int],
        column_indices: list[int] | None = None,
        file_major_version: int = 0,
        file_minor_version: int = 0,
        file_size_bytes: int | None = None,
        base_id: int | None = None,
    ) -> None:
        self._path = str(path)
        self.fields = [int(f) for f in fields]
        self.column_indices = [int(c) for c in (column_indices or [])]
        self.file_major_version = int(file_major_version)
        self.file_minor_version = int(file_minor_version)
        self.file_size_bytes = None if file_size_bytes is None else int(file_size_bytes)
        self.base_id = None if base_id is None else int(base_id)

    @property
    def path(self) -> str:
        """The file's path under ``data/`` (a string that can still be called, as pylance's
        deprecated ``path()`` method, with a ``DeprecationWarning``)."""
        return _CallablePath(self._path)

    @path.setter
    def path(self, value: str) -> None:
        self._path = str(value)

    def field_ids(self) -> list[int]:
        """Deprecated (pylance's): the ``fields`` list."""
        warnings.warn("DataFile.field_ids is deprecated, use DataFile.fields instead", DeprecationWarning, stacklevel=2)
        return self.fields

    def __repr__(self) -> str:
        return (
            f"DataFile(path='{self._path}', fields={self.fields}, column_indices={self.column_indices}, "
            f"file_major_version={self.file_major_version}, file_minor_version={self.file_minor_version}, "
            f"file_size_bytes={self.file_size_bytes})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DataFile) and self.asdict() == other.asdict()

    def asdict(self) -> dict[str, Any]:
        """pylance's JSON object of a data file."""
        return {
            "fields": self.fields,
            "column_indices": self.column_indices,
            "file_major_version": self.file_major_version,
            "file_minor_version": self.file_minor_version,
            "file_size_bytes": self.file_size_bytes,
            "base_id": self.base_id,
            "path": self._path,
        }

    def to_pb(self) -> table_pb2.DataFile:
        pb = table_pb2.DataFile(
            path=self._path,
            fields=self.fields,
            column_indices=self.column_indices,
            file_major_version=self.file_major_version,
            file_minor_version=self.file_minor_version,
            file_size_bytes=self.file_size_bytes or 0,
        )
        if self.base_id is not None:
            pb.base_id = self.base_id
        return pb

    @classmethod
    def from_pb(cls, pb: table_pb2.DataFile) -> DataFile:
        return cls(
            pb.path,
            list(pb.fields),
            list(pb.column_indices),
            int(pb.file_major_version),
            int(pb.file_minor_version),
            int(pb.file_size_bytes) if pb.file_size_bytes else None,
            int(pb.base_id) if pb.HasField("base_id") else None,
        )


@dataclass
class DeletionFile:
    """A fragment's deletion file (pylance's ``lance.fragment.DeletionFile``)."""

    read_version: int
    id: int
    file_type: str  # "array" | "bitmap"
    num_deleted_rows: int
    base_id: int | None = None

    def __post_init__(self) -> None:
        if self.file_type not in _DELETION_TYPES:
            raise ValueError(f"deletion file_type must be 'array' or 'bitmap', not {self.file_type!r}")

    def asdict(self) -> dict[str, Any]:
        return {
            "read_version": self.read_version,
            "id": self.id,
            "file_type": self.file_type,
            "num_deleted_rows": self.num_deleted_rows,
            "base_id": self.base_id,
        }

    def json(self) -> str:
        return json.dumps(self.asdict())

    @staticmethod
    def from_json(text: str) -> DeletionFile:
        return DeletionFile(**json.loads(text))

    def path(self, fragment_id: int) -> str:
        """The file's path relative to the dataset root."""
        suffix = "arrow" if self.file_type == "array" else "bin"
        return f"_deletions/{fragment_id}-{self.read_version}-{self.id}.{suffix}"

    def to_pb(self) -> table_pb2.DeletionFile:
        pb = table_pb2.DeletionFile(
            file_type=_DELETION_TYPES[self.file_type],
            read_version=self.read_version,
            id=self.id,
            num_deleted_rows=self.num_deleted_rows,
        )
        if self.base_id is not None:
            pb.base_id = self.base_id
        return pb

    @classmethod
    def from_pb(cls, pb: table_pb2.DeletionFile) -> DeletionFile:
        return cls(
            int(pb.read_version),
            int(pb.id),
            _DELETION_NAMES[int(pb.file_type)],
            int(pb.num_deleted_rows),
            int(pb.base_id) if pb.HasField("base_id") else None,
        )


@dataclass
class _SequenceMeta:
    """A serialized row-id or row-version sequence: inline protobuf bytes, or a byte range
    ``[offset, offset + size)`` of an external file."""

    inline: bytes | None = None
    external: tuple[str, int, int] | None = None

    _INLINE_KEY = "inline"
    _EXTERNAL_KEY = "external"

    def asdict(self) -> dict[str, Any]:
        if self.inline is not None:
            return {self._INLINE_KEY: list(self.inline)}
        assert self.external is not None
        path, offset, size = self.external
        return {self._EXTERNAL_KEY: {"path": path, "offset": offset, "size": size}}

    def json(self) -> str:
        return json.dumps(self.asdict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        for key, value in d.items():
            if key.lower() == "inline":
                return cls(inline=bytes(value))
            if key.lower() == "external":
                return cls(external=(str(value["path"]), int(value["offset"]), int(value["size"])))
        raise ValueError(f"not a row sequence: {d!r}")

    @classmethod
    def from_json(cls, text: str) -> Any:
        return cls.from_dict(json.loads(text))


class RowIdMeta(_SequenceMeta):
    """The stable row ids of a fragment's rows (a serialized ``RowIdSequence``)."""

    _INLINE_KEY = "Inline"
    _EXTERNAL_KEY = "External"


class RowDatasetVersionMeta(_SequenceMeta):
    """The dataset version each row was created / last updated in (a serialized
    ``RowDatasetVersionSequence``)."""


def _seq_from_pb(pb: table_pb2.DataFragment, oneof: str, cls: type[_SequenceMeta]) -> Any:
    which = pb.WhichOneof(oneof)
    if which is None:
        return None
    value = getattr(pb, which)
    if which.startswith("inline"):
        return cls(inline=bytes(value))
    return cls(external=(value.path, int(value.offset), int(value.size)))


def _seq_to_pb(pb: table_pb2.DataFragment, meta: _SequenceMeta | None, inline: str, external: str) -> None:
    if meta is None:
        return
    if meta.inline is not None:
        setattr(pb, inline, meta.inline)
    else:
        assert meta.external is not None
        path, offset, size = meta.external
        getattr(pb, external).CopyFrom(table_pb2.ExternalFile(path=path, offset=offset, size=size))


@dataclass
class FragmentMetadata:
    """Metadata of one fragment (pylance's ``lance.fragment.FragmentMetadata``).

    Parameters
    ----------
    id : int
        The fragment id (0 for fragments not yet committed: the commit numbers them).
    files : list of DataFile
        The data files; each holds ``physical_rows`` rows of a subset of the columns.
    physical_rows : int
        Rows in the data files, deleted rows included.
    deletion_file : DeletionFile, optional
        The deletion vector, if any rows are deleted.
    row_id_meta : RowIdMeta, optional
        Stable row ids of the rows (datasets with stable row ids); None: assigned at commit.
    created_at_version_meta, last_updated_at_version_meta : RowDatasetVersionMeta, optional
        Row version metadata, derived during the commit.
    overlays : list
        Data overlay files (not written by lance-gpu; must be empty).
    """

    id: int
    files: list[DataFile]
    physical_rows: int
    deletion_file: DeletionFile | None = None
    row_id_meta: RowIdMeta | None = None
    created_at_version_meta: RowDatasetVersionMeta | None = None
    last_updated_at_version_meta: RowDatasetVersionMeta | None = None
    overlays: list[Any] = field(default_factory=list)

    @property
    def num_deletions(self) -> int:
        return 0 if self.deletion_file is None else int(self.deletion_file.num_deleted_rows)

    @property
    def num_rows(self) -> int:
        return int(self.physical_rows) - self.num_deletions

    def data_files(self) -> list[DataFile]:
        warnings.warn("FragmentMetadata.data_files is deprecated. Use .files instead.", DeprecationWarning, stacklevel=2)
        return self.files

    def to_json(self) -> dict[str, Any]:
        """A JSON-serializable dict, the same keys and values pylance's ``to_json`` gives."""
        if self.overlays:
            raise ValueError("fragments with data overlays cannot be serialized by lance-gpu")
        return {
            "id": self.id,
            "files": [f.asdict() for f in self.files],
            "overlays": [],
            "physical_rows": self.physical_rows,
            "deletion_file": None if self.deletion_file is None else self.deletion_file.asdict(),
            "row_id_meta": None if self.row_id_meta is None else self.row_id_meta.asdict(),
            "created_at_version_meta": None if self.created_at_version_meta is None else self.created_at_version_meta.asdict(),
            "last_updated_at_version_meta": (
                None if self.last_updated_at_version_meta is None else self.last_updated_at_version_meta.asdict()
            ),
        }

    @staticmethod
    def from_json(json_data: str) -> FragmentMetadata:
        """The fragment of a ``json.dumps(fragment.to_json())`` string (ours or pylance's)."""
        d = json.loads(json_data)
        if d.get("overlays"):
            raise ValueError("fragments with data overlays are not supported by lance-gpu")

        def seq(key: str, cls: type[_SequenceMeta]) -> Any:
            value = d.get(key)
            return None if value is None else cls.from_dict(value)

        deletion = d.get("deletion_file")
        return FragmentMetadata(
            id=int(d["id"]),
            files=[DataFile(**f) for f in d["files"]],
            physical_rows=None if d.get("physical_rows") is None else int(d["physical_rows"]),  # type: ignore[arg-type]
            deletion_file=None if deletion is None else DeletionFile(**deletion),
            row_id_meta=seq("row_id_meta", RowIdMeta),
            created_at_version_meta=seq("created_at_version_meta", RowDatasetVersionMeta),
            last_updated_at_version_meta=seq("last_updated_at_version_meta", RowDatasetVersionMeta),
        )

    def to_pb(self) -> table_pb2.DataFragment:
        """The manifest's ``DataFragment`` protobuf of this fragment."""
        if self.overlays:
            raise ValueError("fragments with data overlays cannot be committed by lance-gpu")
        pb = table_pb2.DataFragment(id=int(self.id), physical_rows=int(self.physical_rows))
        pb.files.extend(f.to_pb() for f in self.files)
        if self.deletion_file is not None:
            pb.deletion_file.CopyFrom(self.deletion_file.to_pb())
        _seq_to_pb(pb, self.row_id_meta, "inline_row_ids", "external_row_ids")
        _seq_to_pb(pb, self.created_at_version_meta, "inline_created_at_versions", "external_created_at_versions")
        _seq_to_pb(
            pb, self.last_updated_at_version_meta, "inline_last_updated_at_versions", "external_last_updated_at_versions"
        )
        return pb

    @classmethod
    def from_pb(cls, pb: table_pb2.DataFragment) -> FragmentMetadata:
        return cls(
            id=int(pb.id),
            files=[DataFile.from_pb(f) for f in pb.files],
            physical_rows=int(pb.physical_rows),
            deletion_file=DeletionFile.from_pb(pb.deletion_file) if pb.HasField("deletion_file") else None,
            row_id_meta=_seq_from_pb(pb, "row_id_sequence", RowIdMeta),
            created_at_version_meta=_seq_from_pb(pb, "created_at_version_sequence", RowDatasetVersionMeta),
            last_updated_at_version_meta=_seq_from_pb(pb, "last_updated_at_version_sequence", RowDatasetVersionMeta),
        )


def as_pb(fragment: FragmentMetadata | table_pb2.DataFragment | bytes) -> table_pb2.DataFragment:
    """A fragment given as metadata, protobuf or serialized protobuf, as a protobuf copy."""
    if isinstance(fragment, FragmentMetadata):
        return fragment.to_pb()
    if isinstance(fragment, (bytes, bytearray)):
        return table_pb2.DataFragment.FromString(bytes(fragment))
    if isinstance(fragment, table_pb2.DataFragment):
        out = table_pb2.DataFragment()
        out.CopyFrom(fragment)
        return out
    raise TypeError(f"fragments must be list[FragmentMetadata], got {type(fragment).__name__}")
