# SPDX-License-Identifier: Apache-2.0
"""The table layer: manifests, versions, schemas, feature flags, deletions and row ids, and
:class:`TableSnapshot` -- one immutable version, what the layers above work on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lance_gpu._lazy import lazy_names
from lance_gpu.table.deletion import deletion_file_path, read_deletion_file
from lance_gpu.table.features import check_reader_flags, check_writer_flags
from lance_gpu.table.manifest import (
    ManifestFile,
    VersionInfo,
    list_versions,
    load_manifest,
    read_manifest,
    read_manifest_file,
    read_transaction_file,
    resolve_manifest,
)
from lance_gpu.table.rowids import decode_row_id_sequence, read_fragment_row_ids
from lance_gpu.table.schema import LanceField, LanceSchema, column_index_map
from lance_gpu.table.snapshot import FragmentSnapshot, TableSnapshot

if TYPE_CHECKING:
    from lance_gpu.table import schema_view as schema_view
    from lance_gpu.table import tags as tags
    from lance_gpu.table import versions as versions

# Other submodules load on first use (``table.versions``...; :mod:`lance_gpu._lazy`): the
# dataset facade's version history, tags and schema view are not loaded by a read.
__getattr__ = lazy_names(__name__, {})

__all__ = [
    "FragmentSnapshot",
    "LanceField",
    "LanceSchema",
    "ManifestFile",
    "TableSnapshot",
    "VersionInfo",
    "check_reader_flags",
    "check_writer_flags",
    "column_index_map",
    "decode_row_id_sequence",
    "deletion_file_path",
    "list_versions",
    "load_manifest",
    "read_deletion_file",
    "read_fragment_row_ids",
    "read_manifest",
    "read_manifest_file",
    "read_transaction_file",
    "resolve_manifest",
]
