# SPDX-License-Identifier: Apache-2.0
"""The bytes of a commit: manifest files, link-if-absent publishing, transaction files.

The transaction logic (operations, conflict rules, the commit loop) is
:mod:`lance_gpu.txn`; this module holds the I/O it uses:

* :func:`serialize_manifest`: ``[IndexSection] [Transaction] Manifest footer`` (Manifest
  field 23 = the transaction's offset);
* :func:`write_new`: *link-if-absent* -- written to a staging file in ``_versions/`` and
  hard-linked to its final name; ``FileExistsError`` means another writer took the version;
  the staging file is always unlinked.  ``os.rename`` is never used: it would replace a
  committed version;
* :func:`write_transaction_file` / :func:`winner_transaction`: ``_transactions/*.txn``
  (raw protobuf) and a committed version's transaction (inline section, else its file);
* :func:`write_version_hint`: ``_versions/latest_version_hint.json`` (only a hint).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import struct
import time
import uuid as _uuid
from pathlib import Path

from lance_gpu._proto import table_pb2, transaction_pb2
from lance_gpu.errors import UnsupportedFeatureError
from lance_gpu.table import features
from lance_gpu.table.manifest import (
    ManifestFile,
    NamingScheme,
    list_versions,
    read_manifest_file,
    read_transaction_file,
)

__all__ = [
    "SUPPORTED_WRITER_FLAGS",
    "WRITER_LIBRARY",
    "WRITER_VERSION",
    "check_appendable",
    "latest",
    "serialize_manifest",
    "stamp_manifest",
    "winner_transaction",
    "write_new",
    "write_transaction_file",
    "write_version_hint",
]

#: ``Manifest.writer_version`` of versions we write.
WRITER_LIBRARY = "lance-gpu"
WRITER_VERSION = "0.1.0"

#: Writer feature flags of an existing dataset that appends and overwrites handle:
#: deletion files and table config are carried unchanged, stable row ids are assigned
#: to new fragments, and transaction files are skipped when flag 32 asks for it.
SUPPORTED_WRITER_FLAGS = (
    features.FLAG_DELETION_FILES
    | features.FLAG_STABLE_ROW_IDS
    | features.FLAG_USE_V2_FORMAT_DEPRECATED
    | features.FLAG_TABLE_CONFIG
    | features.FLAG_DISABLE_TRANSACTION_FILE
    | features.FLAG_COVERING_INDEX_METADATA
)

_LEN = struct.Struct("<I")
_FOOTER = struct.Struct("<QHH4s")


def _now() -> tuple[int, int]:
    t = time.time_ns()
    return t // 1_000_000_000, t % 1_000_000_000


def stamp_manifest(m: table_pb2.Manifest, version: int, txn_file: str) -> None:
    """What every commit writes into its manifest: version, time, writer, transaction file."""
    m.version = version
    secs, nanos = _now()
    m.timestamp.seconds = secs
    m.timestamp.nanos = nanos
    m.writer_version.library = WRITER_LIBRARY
    m.writer_version.version = WRITER_VERSION
    m.transaction_file = txn_file


def serialize_manifest(
    manifest: table_pb2.Manifest,
    transaction: transaction_pb2.Transaction | None,
    index_section: table_pb2.IndexSection | None = None,
) -> bytes:
    """A manifest file: ``[u32 len | IndexSection] [u32 len | Transaction] u32 len | Manifest``
    and the 16-byte footer; the Manifest's offsets are filled in here."""
    m = table_pb2.Manifest()
    m.CopyFrom(manifest)
    for name in ("index_section", "transaction_section", "transaction_section_deprecated"):
        m.ClearField(name)
    parts: list[bytes] = []
    pos = 0
    if index_section is not None:
        raw = index_section.SerializeToString()
        m.index_section = pos
        parts.append(_LEN.pack(len(raw)) + raw)
        pos += _LEN.size + len(raw)
    if transaction is not None:
        raw = transaction.SerializeToString()
        m.transaction_section = pos
        parts.append(_LEN.pack(len(raw)) + raw)
        pos += _LEN.size + len(raw)
    raw = m.SerializeToString()
    parts.append(_LEN.pack(len(raw)) + raw)
    parts.append(_FOOTER.pack(pos, 0, 2, b"LANC"))
    return b"".join(parts)


def write_new(path: Path, data: bytes) -> None:
    """Create ``path`` holding ``data``; ``FileExistsError`` if it already exists."""
    staging = path.with_name(f".tmp_{path.name}_{_uuid.uuid4().hex}")
    with open(staging, "xb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(staging, path)
    finally:
        os.unlink(staging)


def write_version_hint(root: Path, version: int) -> None:
    """Best effort: ``_versions/latest_version_hint.json`` = ``{"version": N}`` (never lowered)."""
    hint = root / "_versions" / "latest_version_hint.json"
    try:
        current = json.loads(hint.read_text()).get("version", 0)
        if isinstance(current, int) and current > version:
            return
    except (OSError, ValueError, AttributeError):
        pass
    tmp = hint.with_name(f".tmp_hint_{_uuid.uuid4().hex}")
    try:
        tmp.write_text(json.dumps({"version": version}, separators=(",", ":")))
        os.replace(tmp, hint)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def winner_transaction(root: Path, mf: ManifestFile) -> transaction_pb2.Transaction | None:
    if mf.transaction is not None:
        return mf.transaction
    name = mf.manifest.transaction_file
    if not name:
        return None
    try:
        return read_transaction_file(root / "_transactions" / name)
    except Exception:  # noqa: BLE001 - a missing or bad file means "assume conflict"
        return None


def write_transaction_file(path: Path, txn: transaction_pb2.Transaction) -> None:
    with open(path, "xb") as fh:
        fh.write(txn.SerializeToString())
        fh.flush()
        os.fsync(fh.fileno())


def latest(root: Path) -> tuple[ManifestFile | None, NamingScheme]:
    """The latest committed manifest of ``root`` (None if there is none) and its naming."""
    try:
        versions = list_versions(root)
    except Exception as exc:  # DatasetNotFoundError
        from lance_gpu.errors import DatasetNotFoundError

        if isinstance(exc, DatasetNotFoundError):
            return None, "V2"
        raise
    info = versions[-1]
    return read_manifest_file(info.path), info.naming


def timestamp_of(manifest: table_pb2.Manifest) -> _dt.datetime:
    ts = manifest.timestamp
    return _dt.datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, _dt.UTC)


def check_appendable(base: ManifestFile) -> None:
    """Refuse appends to datasets whose writer flags or file format we cannot honour."""
    features.check_writer_flags(base.manifest.writer_feature_flags, base.path, SUPPORTED_WRITER_FLAGS)
    fmt = base.manifest.data_format.version
    if fmt not in ("2.1", "2.2"):
        raise UnsupportedFeatureError(
            f"{base.path}: appending to a dataset of data storage version {fmt or 'legacy'} is not supported "
            "(lance-gpu writes 2.1 and 2.2)"
        )
