# SPDX-License-Identifier: Apache-2.0
"""The table layer: manifests, versions, schemas, feature flags, deletions and row ids, and
:class:`TableSnapshot` -- one immutable version, what the layers above work on."""

from __future__ import annotations

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
