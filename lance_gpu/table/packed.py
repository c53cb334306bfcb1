# SPDX-License-Identifier: Apache-2.0
"""Which struct fields are stored packed: field metadata ``lance-encoding:packed = true``
(or the older key ``packed``) on a struct field.

A packed struct owns **one** column in a data file, under the struct's own field id; its
children own none (a data file's ``fields`` / ``column_indices`` list only the parent).  The
rows' layout is in :mod:`lance_gpu.file.packed_fields`.  lance-gpu reads packed structs; its
writers store structs unpacked, so they drop the flag from a new schema and refuse to add
files to a schema that has it (:func:`lance_gpu.file.writer.blobs.column_field_ids`).
Blob v2 descriptor structs, packed too, are read as blobs and are not "packed structs" here.
"""

from __future__ import annotations

from collections.abc import Mapping

from lance_gpu.table.blob_descriptions import blob_kind
from lance_gpu.table.schema import LanceField

__all__ = ["PACKED_META_KEYS", "is_packed_metadata", "packed_struct"]

#: Field metadata keys that mark a struct packed (the second is the older spelling).
PACKED_META_KEYS = ("lance-encoding:packed", "packed")


def is_packed_metadata(metadata: Mapping | None) -> bool:
    """Whether field ``metadata`` (str or bytes keys and values) asks for a packed struct."""
    if not metadata:
        return False
    for key in PACKED_META_KEYS:
        for k in (key, key.encode()):
            v = metadata.get(k)
            if v is not None:
                return (v.decode() if isinstance(v, bytes) else str(v)).lower() == "true"
    return False


def packed_struct(field: LanceField) -> bool:
    """Whether ``field`` is a struct stored packed (its one column under its own id)."""
    return (field.logical_type == "struct" and bool(field.metadata) and is_packed_metadata(field.metadata)
            and not blob_kind(field))
