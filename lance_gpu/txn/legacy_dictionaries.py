# SPDX-License-Identifier: Apache-2.0
"""Dictionary values in the manifest files of legacy (0.1) datasets, and the rule that
keeps legacy and V2 data files out of one version (:func:`check_no_mixing`).

A legacy dataset keeps the values of each dictionary field in every manifest file, ahead of
its sections: per dictionary field (by field id), a plain page of the values (numbers) or a
var-binary page (the value bytes, then ``n + 1`` int64 positions, which are positions in the
manifest file); ``Field.dictionary`` of the manifest's schema holds the page's position (for
var-binary: of the positions) and its value count.  pylance reads them from there, not from
the data files (which hold a copy each, :mod:`lance_gpu.file.legacy`).

lance-gpu takes the values from the data files of the version being committed (each legacy
data file holds its dictionaries) and writes them as pylance does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError, LegacyFormatError
from lance_gpu.file.legacy import LegacyFileReader, is_legacy_file_version
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.table.consistency import LEGACY_FILES, V2_FILES, file_kinds
from lance_gpu.table.manifest import ManifestFile
from lance_gpu.table.manifest_bytes import ManifestDraft
from lance_gpu.table.schema import LanceSchema

__all__ = ["check_no_mixing", "dataset_dictionaries", "dictionary_prefix"]


def check_no_mixing(manifest: table_pb2.Manifest | ManifestDraft, base: ManifestFile | None = None,
                    touched: Sequence[table_pb2.DataFragment] | None = None) -> int:
    """pylance refuses a version whose data files are both legacy (V1) and V2 files.

    Returns the kinds of data files ``manifest`` names (a superset, bits of
    :func:`~lance_gpu.table.consistency.file_kinds`).  Where the operation says which
    entries it ``touched`` (the others are ``base``'s) and ``base``'s kinds are known, they
    are joined with the touched fragments' (no loop over every fragment); only a join
    that mixes both kinds is checked against every fragment."""
    if touched is not None and base is not None and base.file_kinds is not None:
        kinds = base.file_kinds | file_kinds(touched)
        if kinds != LEGACY_FILES | V2_FILES:
            return kinds
    kinds = file_kinds(manifest.fragments() if isinstance(manifest, ManifestDraft) else manifest.fragments)
    if kinds == LEGACY_FILES | V2_FILES:
        raise LegacyFormatError("Invalid user input: Dataset snapshot mixes V1 and V2 data files")
    return kinds


def _is_var_binary(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t)


def _encode(values: pa.Array, pos: int) -> tuple[bytes, int]:
    """The page of ``values`` written at manifest position ``pos``, and the position the
    manifest names (var-binary: where the positions begin)."""
    if _is_var_binary(values.type):
        large = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
        bufs = values.buffers()
        offsets = np.frombuffer(bufs[1], np.int64 if large else np.int32, len(values) + 1, values.offset * (8 if large else 4))
        start, stop = int(offsets[0]), int(offsets[-1])
        data = bytes(memoryview(bufs[2])[start:stop]) if bufs[2] is not None else b""
        positions = (offsets.astype(np.int64) - start + pos).astype("<i8").tobytes()
        return data + positions, pos + len(data)
    width = values.type.bit_width // 8
    raw = memoryview(values.buffers()[1])[values.offset * width : (values.offset + len(values)) * width].tobytes()
    return raw, pos


def _values_of(store: ObjectStore, root: str, manifest: table_pb2.Manifest, fid: int, t: pa.DataType) -> pa.Array | None:
    """The dictionary values of field ``fid`` (type ``t``) from the first legacy data file
    holding it; None where none does."""
    if not isinstance(t, pa.DictionaryType):
        raise CorruptFileError(root, f"field {fid} has dictionary values but type {t}")
    for frag in manifest.fragments:
        for df in frag.files:
            if is_legacy_file_version(int(df.file_major_version), int(df.file_minor_version)) and fid in df.fields:
                reader = LegacyFileReader(join(join(root, "data"), df.path), store)
                try:
                    return reader.dictionary(fid, t.value_type)
                finally:
                    reader.close()
    return None


def dataset_dictionaries(store: ObjectStore, root: str, manifest: table_pb2.Manifest) -> dict[int, pa.Array]:
    """A legacy dataset's dictionary values by field id (fields no data file holds are left
    out): what data appended to it must be encoded with."""
    if manifest.data_format.version not in ("0.1", "legacy"):
        return {}
    schema = LanceSchema.from_manifest(manifest, root)
    out = {}
    for f in schema.walk():
        if f.has_dictionary:
            values = _values_of(store, root, manifest, f.id, f.to_arrow(physical=True).type)
            if values is not None:
                out[f.id] = values
    return out


def needs_dictionaries(manifest: table_pb2.Manifest) -> bool:
    """Whether ``manifest`` (its fields: a draft's head will do) is a legacy manifest with
    dictionary fields, whose values :func:`dictionary_prefix` writes ahead of it."""
    return manifest.data_format.version in ("0.1", "legacy") and any(f.HasField("dictionary") for f in manifest.fields)


def dictionary_prefix(store: ObjectStore, root: str, manifest: table_pb2.Manifest) -> bytes:
    """For a legacy manifest with dictionary fields: the bytes to write ahead of its
    sections, having set each such field's ``dictionary`` offset and length in ``manifest``
    (in place); ``b""`` for every other manifest."""
    if not needs_dictionaries(manifest):
        return b""
    wanted = [f for f in manifest.fields if f.HasField("dictionary")]
    schema = LanceSchema.from_manifest(manifest, root)
    types = {f.id: f.to_arrow(physical=True).type for f in schema.walk()}
    parts: list[bytes] = []
    pos = 0
    for pb in wanted:
        fid = int(pb.id)
        values = _values_of(store, root, manifest, fid, types[fid])
        if values is None:  # no data file holds it (no fragments): an empty dictionary
            pb.dictionary.offset, pb.dictionary.length = 0, 0
            continue
        raw, named = _encode(values, pos)
        parts.append(raw)
        pb.dictionary.offset, pb.dictionary.length = named, len(values)
        pos += len(raw)
    return b"".join(parts)
