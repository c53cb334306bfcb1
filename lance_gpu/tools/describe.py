# SPDX-License-Identifier: Apache-2.0
"""What ``lance-gpu info`` shows, as data: :func:`describe`."""

from __future__ import annotations

import dataclasses
import os
import uuid as _uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lance_gpu.table.tags import list_tags
from lance_gpu.tools._open import StorageOptions, open_dataset


@dataclass(frozen=True, slots=True)
class FragmentInfo:
    """One fragment: ``rows`` live of ``physical_rows``, its data ``files`` and their ``bytes``."""

    id: int
    physical_rows: int
    rows: int
    deleted_rows: int
    files: list[str]
    bytes: int


@dataclass(slots=True)
class DatasetInfo:
    """One version of a dataset, summarised (see :func:`describe`)."""

    uri: str
    version: int
    latest_version: int
    num_versions: int
    data_storage_version: str
    schema: pa.Schema
    rows: int
    deleted_rows: int
    data_files: int
    data_bytes: int
    file_versions: list[str]
    tags: dict[str, int]
    indices: list[dict[str, Any]]
    fragments: list[FragmentInfo] = field(default_factory=list)

    def to_dict(self, fragments: bool = True) -> dict[str, Any]:
        """Plain data (JSON-ready but for nothing): the schema as name/type/nullable records."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("schema", "fragments")}
        out["schema"] = [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in self.schema]
        if fragments:
            out["fragments"] = [dataclasses.asdict(f) for f in self.fragments]
        return out


def _field_paths(fields: Any, prefix: str = "") -> dict[int, str]:
    """``{field id: dotted path}`` of a Lance schema's fields and their children."""
    out: dict[int, str] = {}
    for f in fields:
        path = f"{prefix}{f.name}"
        out[int(f.id)] = path
        out.update(_field_paths(f.children, f"{path}."))
    return out


def _indices(ds: Any) -> list[dict[str, Any]]:
    """Name, uuid, indexed field paths and dataset version of each index of this version."""
    paths = _field_paths(ds.snapshot.lance_schema.fields)
    return [
        {
            "name": i.name,
            "uuid": str(_uuid.UUID(bytes=bytes(i.uuid.uuid))) if i.HasField("uuid") else "",
            "fields": [paths.get(int(f), str(f)) for f in i.fields],
            "version": int(i.dataset_version),
        }
        for i in ds.index_metadata
    ]


def describe(
    uri: str | os.PathLike[str], version: int | str | None = None, *, storage_options: StorageOptions | None = None
) -> DatasetInfo:
    """Summarise one version (default: the latest) of the dataset at ``uri``.

    Sizes are the ``file_size_bytes`` the manifest records for each data file (0 where a
    writer left it unset); ``file_versions`` are the distinct ``major.minor`` of the data files.
    """

    ds = open_dataset(uri, version, storage_options)
    frags: list[FragmentInfo] = []
    file_versions: set[str] = set()
    for frag in ds.get_fragments():
        data_files = frag.data_files()
        files = [df.path for df in data_files]
        file_versions.update(f"{df.file_major_version}.{df.file_minor_version}" for df in data_files)
        live = frag.count_rows()
        frags.append(FragmentInfo(
            frag.fragment_id, frag.physical_rows, live, frag.physical_rows - live, files,
            sum(int(df.file_size_bytes or 0) for df in data_files),
        ))
    versions = ds.versions()
    return DatasetInfo(
        uri=ds.uri,
        version=ds.version,
        latest_version=int(versions[-1]["version"]),
        num_versions=len(versions),
        data_storage_version=ds.data_storage_version,
        schema=ds.schema,
        rows=sum(f.rows for f in frags),
        deleted_rows=sum(f.deleted_rows for f in frags),
        data_files=sum(len(f.files) for f in frags),
        data_bytes=sum(f.bytes for f in frags),
        file_versions=sorted(file_versions),
        tags={name: int(tag["version"]) for name, tag in list_tags(ds.store, ds.root).items()},
        indices=_indices(ds),
        fragments=frags,
    )
