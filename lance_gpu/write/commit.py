# SPDX-License-Identifier: Apache-2.0
"""Committing a new dataset version: transaction, manifest, atomic publish, conflicts.

Protocol (pylance's, for local file systems):

1. Data files are written first; nothing points at them yet.
2. The ``lance.table.Transaction`` is written to ``_transactions/{read_version}-{uuid}.txn``
   (raw protobuf) unless the dataset sets writer flag 32 (no transaction files).
3. The manifest of version ``read_version + 1`` is built on top of the version read, and the
   manifest file (``[IndexSection] [Transaction] Manifest footer``, Manifest field 23 = the
   transaction's offset) is published with the store's ``put_if_absent`` (a hard link of a
   staging file locally, a conditional PUT ``If-None-Match: *`` on object stores).
   :class:`~lance_gpu.errors.ObjectExistsError` means another writer took the version.  A
   committed manifest is never replaced.  Stores without conditional writes are refused
   (:class:`~lance_gpu.errors.ConditionalPutUnsupportedError`).  When the put fails in a way
   that leaves its outcome unknown (a timeout, a lost response), the manifest is read back:
   if it holds our bytes the commit succeeded, otherwise the error is raised (after
   removing our transaction file) or the version is treated as taken.
4. On a conflict the winner's transaction is read (inline section, else its ``.txn``).
   An append is compatible with a winning append, delete, update, rewrite (compaction),
   create-index, reserve-fragments, update-config or data-replacement: the manifest is
   rebuilt on top of the winner (fresh fragment ids and row ids) and the next version
   tried.  Anything else -- overwrite, restore, schema changes, or a winner whose
   transaction cannot be read -- raises :class:`~lance_gpu.errors.CommitConflictError`;
   an overwrite conflicts with any winner.  The other operations
   (:mod:`lance_gpu.write.operations`: delete, restore, project, merge, rewrite, reserve)
   decide themselves with pylance's rules (``Operation.rebase``): compatible, rebased
   (concurrent deletes of disjoint rows of one fragment: the deletion vectors are merged and
   the transaction is written again), retryable or incompatible.
5. ``_versions/latest_version_hint.json`` is updated (only a hint; readers list ``_versions``).
"""

from __future__ import annotations

import datetime as _dt
import json
import struct
import time
import uuid as _uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from lance_gpu._proto import rowids_pb2, table_pb2, transaction_pb2
from lance_gpu.errors import (
    CommitConflictError,
    ConditionalPutUnsupportedError,
    ObjectExistsError,
    StorageError,
    UnsupportedFeatureError,
)
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.table import features
from lance_gpu.table.manifest import (
    ManifestFile,
    NamingScheme,
    list_versions,
    manifest_file_name,
    read_manifest_file,
    read_transaction_file,
)
from lance_gpu.table.schema import LanceSchema

__all__ = [
    "WRITER_LIBRARY",
    "WRITER_VERSION",
    "SUPPORTED_WRITER_FLAGS",
    "PendingCommit",
    "commit",
    "serialize_manifest",
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
MAX_RETRIES = 100


@dataclass
class PendingCommit:
    """What one write wants to commit.

    ``fragments`` carry no ids yet (they are numbered at commit time, after the base
    version's ``max_fragment_id``).  ``schema`` / ``data_format`` are used by overwrites.
    """

    kind: str  # "append" or "overwrite"
    fragments: list[table_pb2.DataFragment]
    schema: LanceSchema | None = None
    data_format: str = "2.2"
    config: dict[str, str] = field(default_factory=dict)


def _now() -> tuple[int, int]:
    t = time.time_ns()
    return t // 1_000_000_000, t % 1_000_000_000


def _fragment_ids(fragments: Sequence[table_pb2.DataFragment], start: int) -> list[table_pb2.DataFragment]:
    out = []
    for k, frag in enumerate(fragments):
        f = table_pb2.DataFragment()
        f.CopyFrom(frag)
        f.id = start + k
        out.append(f)
    return out


def _assign_row_ids(fragments: list[table_pb2.DataFragment], next_row_id: int, version: int) -> int:
    """Give new fragments stable row ids ``next_row_id..`` and creation versions."""
    for frag in fragments:
        n = int(frag.physical_rows)
        seq = rowids_pb2.RowIdSequence(
            segments=[rowids_pb2.U64Segment(range=rowids_pb2.U64Segment.Range(start=next_row_id, end=next_row_id + n))]
        )
        frag.inline_row_ids = seq.SerializeToString()
        versions = rowids_pb2.RowDatasetVersionSequence(
            runs=[
                rowids_pb2.RowDatasetVersionRun(
                    span=rowids_pb2.U64Segment(range=rowids_pb2.U64Segment.Range(start=0, end=n)),
                    version=version,
                )
            ]
        )
        frag.inline_created_at_versions = versions.SerializeToString()
        frag.inline_last_updated_at_versions = versions.SerializeToString()
        next_row_id += n
    return next_row_id


def _transaction(op: PendingCommit, read_version: int, txn_uuid: str) -> transaction_pb2.Transaction:
    txn = transaction_pb2.Transaction(read_version=read_version, uuid=txn_uuid)
    if not isinstance(op, PendingCommit):  # an operations.Operation fills its own oneof
        op.fill(txn)
        return txn
    if op.kind == "append":
        txn.append.fragments.extend(op.fragments)
    elif op.kind == "overwrite":
        txn.overwrite.fragments.extend(op.fragments)
        assert op.schema is not None
        txn.overwrite.schema.extend(op.schema.to_protos())
        for k, v in op.schema.metadata.items():
            txn.overwrite.schema_metadata[k] = v
        for k, v in op.config.items():
            txn.overwrite.config_upsert_values[k] = v
    else:
        raise ValueError(f"unknown operation {op.kind!r}")
    return txn


def _build_manifest(
    base: ManifestFile | None,
    op: PendingCommit,
    version: int,
    txn_file: str,
) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
    """The manifest of ``version``: ``op`` applied on top of ``base`` (None: a new dataset)."""
    if not isinstance(op, PendingCommit):
        assert base is not None
        return _build_operation_manifest(base, op, version, txn_file)
    m = table_pb2.Manifest()
    index_section = None
    start_id = 0
    flags = 0
    if base is not None:
        bm = base.manifest
        m.CopyFrom(bm)
        start_id = (bm.max_fragment_id + 1) if bm.HasField("max_fragment_id") else (
            max((f.id for f in bm.fragments), default=-1) + 1
        )
        flags = int(bm.writer_feature_flags)
        for name in (
            "tag", "version_aux_data", "transaction_section_deprecated", "index_section",
            "transaction_section", "writer_version",
        ):
            m.ClearField(name)
    new = _fragment_ids(op.fragments, start_id)
    if op.kind == "append":
        assert base is not None
        if base.index_section is not None:
            index_section = base.index_section
    else:
        assert op.schema is not None
        del m.fields[:]
        m.fields.extend(op.schema.to_protos())
        m.schema_metadata.clear()
        for k, v in op.schema.metadata.items():
            m.schema_metadata[k] = v
        del m.fragments[:]
        m.data_format.file_format = "lance"
        m.data_format.version = op.data_format
        for k, v in op.config.items():
            m.config[k] = v
        # Old fragments (and their deletion files and indices) are gone.
        flags &= ~features.FLAG_DELETION_FILES
        rflags = int(m.reader_feature_flags) & ~features.FLAG_DELETION_FILES
        m.reader_feature_flags = rflags
    if flags & features.FLAG_STABLE_ROW_IDS:
        m.next_row_id = _assign_row_ids(new, int(m.next_row_id), version)
    m.fragments.extend(new)
    if m.config:
        flags |= features.FLAG_TABLE_CONFIG
    m.writer_feature_flags = flags
    if new:
        m.max_fragment_id = start_id + len(new) - 1
    _stamp(m, version, txn_file)
    if base is None:
        m.data_format.file_format = "lance"
        m.data_format.version = op.data_format
    return m, index_section


def _stamp(m: table_pb2.Manifest, version: int, txn_file: str) -> None:
    """What every commit writes into its manifest: version, time, writer, transaction file."""
    m.version = version
    secs, nanos = _now()
    m.timestamp.seconds = secs
    m.timestamp.nanos = nanos
    m.writer_version.library = WRITER_LIBRARY
    m.writer_version.version = WRITER_VERSION
    m.transaction_file = txn_file


def _build_operation_manifest(
    base: ManifestFile, op, version: int, txn_file: str
) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
    """The manifest of ``version`` for an :class:`lance_gpu.write.operations.Operation`: its
    contents from ``op.apply(base)``, then what every commit stamps.  The deletion-files flag
    (reader and writer) is set exactly when some fragment has a deletion file, as pylance's
    ``apply_feature_flags`` does; ``max_fragment_id`` never goes down."""
    m, index_section = op.apply(base)
    for name in (
        "tag", "version_aux_data", "transaction_section_deprecated", "index_section",
        "transaction_section", "writer_version",
    ):
        m.ClearField(name)
    has_deletions = any(f.HasField("deletion_file") for f in m.fragments)
    for name in ("reader_feature_flags", "writer_feature_flags"):
        flags = int(getattr(m, name)) & ~features.FLAG_DELETION_FILES
        setattr(m, name, flags | (features.FLAG_DELETION_FILES if has_deletions else 0))
    ids = [int(f.id) for f in m.fragments]
    if m.HasField("max_fragment_id"):
        ids.append(int(m.max_fragment_id))
    if base.manifest.HasField("max_fragment_id"):
        ids.append(int(base.manifest.max_fragment_id))
    if ids:
        m.max_fragment_id = max(ids)
    _stamp(m, version, txn_file)
    return m, index_section


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


def _publish_manifest(store: ObjectStore, key: str, data: bytes) -> None:
    """Create the manifest ``key`` holding ``data``; :class:`ObjectExistsError` if another
    writer took it.  An outcome left unknown by the failure is settled by reading it back."""
    try:
        store.put_if_absent(key, data)
    except ObjectExistsError:
        raise
    except StorageError as exc:
        try:
            landed = store.get(key)
        except FileNotFoundError:
            raise exc from None
        except StorageError:
            raise exc from None
        if landed == data:
            return  # our put landed; only its response was lost
        raise ObjectExistsError(store.uri(key), "taken by another writer") from exc


def write_version_hint(store: ObjectStore, root: str, version: int) -> None:
    """Best effort: ``_versions/latest_version_hint.json`` = ``{"version": N}`` (never lowered)."""
    hint = join(root, "_versions", "latest_version_hint.json")
    try:
        current = json.loads(store.get(hint)).get("version", 0)
        if isinstance(current, int) and current > version:
            return
    except (OSError, ValueError, AttributeError):
        pass
    try:
        store.put(hint, json.dumps({"version": version}, separators=(",", ":")).encode())
    except OSError:
        pass


def _winner_transaction(store: ObjectStore, root: str, mf: ManifestFile) -> transaction_pb2.Transaction | None:
    if mf.transaction is not None:
        return mf.transaction
    name = mf.manifest.transaction_file
    if not name:
        return None
    try:
        return read_transaction_file(store, join(root, "_transactions", name))
    except Exception:  # noqa: BLE001 - a missing or bad file means "assume conflict"
        return None


#: Winners an append is rebuilt on top of.  An append only adds fragments, so whatever
#: the winner did to existing fragments (deleted rows, rewrote them in a compaction, updated
#: them, indexed them, changed the config) still holds: the append's fragments get fresh
#: ids above the winner's ``max_fragment_id`` (and stable row ids from its ``next_row_id``)
#: and go on top of the winner's fragments, deletion files and index section.  Overwrite and
#: restore replace the table the append was written against and conflict, as in pylance.
#: pylance also lets an append pass a project or merge (schema changes); we do not: the
#: data files were written for the schema we read.
_APPEND_COMPATIBLE = frozenset(
    {"append", "delete", "update", "rewrite", "create_index", "reserve_fragments", "update_config", "data_replacement"}
)


def _compatible(ours: PendingCommit, theirs: transaction_pb2.Transaction | None) -> bool:
    if theirs is None:
        return False
    return ours.kind == "append" and theirs.WhichOneof("operation") in _APPEND_COMPATIBLE


def _write_txn_file(store: ObjectStore, key: str, txn: transaction_pb2.Transaction) -> None:
    store.put(key, txn.SerializeToString())


def check_commit_store(store: ObjectStore, root: str) -> None:
    """Refuse to commit on a store that cannot put-if-absent (two writers could both win)."""
    if not store.supports_conditional_put:
        raise ConditionalPutUnsupportedError(
            store.uri(root),
            "this store cannot write a manifest only if it is absent (no conditional PUT), so "
            "concurrent commits could overwrite each other; use a store with conditional writes",
        )
    if not getattr(store, "writable", True):
        raise ConditionalPutUnsupportedError(store.uri(root), "the store is read-only")


def commit(
    store: ObjectStore,
    root: str,
    op: PendingCommit,
    base: ManifestFile | None,
    naming: NamingScheme = "V2",
) -> table_pb2.Manifest:
    """Commit ``op`` on top of ``base`` (the version the writer read; None to create) in the
    dataset at ``root`` of ``store``.

    Returns the committed manifest.  Raises :class:`CommitConflictError` when another
    writer committed an incompatible change first; on any failure before the manifest
    landed, the transaction file written here is removed again.
    """
    check_commit_store(store, root)
    read_version = int(base.manifest.version) if base is not None else 0
    if base is not None:
        features.check_writer_flags(base.manifest.writer_feature_flags, base.path, SUPPORTED_WRITER_FLAGS)
    txn_uuid = str(_uuid.uuid4())
    txn_name = f"{read_version}-{txn_uuid}.txn"
    txn = _transaction(op, read_version, txn_uuid)
    skip_txn_file = base is not None and bool(base.manifest.writer_feature_flags & features.FLAG_DISABLE_TRANSACTION_FILE)
    committed = False
    try:
        if not skip_txn_file:
            _write_txn_file(store, join(root, "_transactions", txn_name), txn)
        current = base
        version = read_version + 1
        for _ in range(MAX_RETRIES):
            manifest, index_section = _build_manifest(current, op, version, "" if skip_txn_file else txn_name)
            if skip_txn_file:
                manifest.ClearField("transaction_file")
            data = serialize_manifest(manifest, txn, index_section)
            target = join(root, "_versions", manifest_file_name(version, naming))
            try:
                _publish_manifest(store, target, data)
            except ObjectExistsError:
                winner = read_manifest_file(store, target)
                theirs = _winner_transaction(store, root, winner)
                if not isinstance(op, PendingCommit):
                    # Raises CommitConflictError / RetryableCommitConflictError, or rebases.
                    if op.rebase(store, root, winner, theirs):
                        old_name, txn = txn_name, _transaction(op, read_version, txn_uuid)
                        txn_name = f"{txn.read_version}-{txn_uuid}.txn"
                        if not skip_txn_file:
                            _write_txn_file(store, join(root, "_transactions", txn_name), txn)
                            try:
                                store.delete(join(root, "_transactions", old_name))
                            except OSError:
                                pass
                elif not _compatible(op, theirs):
                    kind = None if winner.transaction is None else winner.transaction.WhichOneof("operation")
                    raise CommitConflictError(
                        f"{store.uri(root)}: version {version} was committed by another writer "
                        f"({kind or 'unknown operation'}), which conflicts with this {op.kind}"
                    ) from None
                features.check_writer_flags(winner.manifest.writer_feature_flags, winner.path, SUPPORTED_WRITER_FLAGS)
                current = winner
                version += 1
                continue
            committed = True
            write_version_hint(store, root, version)
            return manifest
        raise CommitConflictError(f"{store.uri(root)}: gave up after {MAX_RETRIES} concurrent commits")
    finally:
        if not committed and not skip_txn_file:
            try:
                store.delete(join(root, "_transactions", txn_name))
            except OSError:
                pass


def latest(store: ObjectStore, root: str) -> tuple[ManifestFile | None, NamingScheme]:
    """The latest committed manifest of ``root`` (None if there is none) and its naming."""
    from lance_gpu.errors import DatasetNotFoundError

    try:
        versions = list_versions(store, root)
    except DatasetNotFoundError:
        return None, "V2"
    info = versions[-1]
    return read_manifest_file(store, info.path), info.naming


def timestamp_of(manifest: table_pb2.Manifest) -> _dt.datetime:
    ts = manifest.timestamp
    return _dt.datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, _dt.timezone.utc)


def check_appendable(base: ManifestFile) -> None:
    """Refuse appends to datasets whose writer flags or file format we cannot honour."""
    features.check_writer_flags(base.manifest.writer_feature_flags, base.path, SUPPORTED_WRITER_FLAGS)
    fmt = base.manifest.data_format.version
    if fmt not in ("2.1", "2.2"):
        raise UnsupportedFeatureError(
            f"{base.path}: appending to a dataset of data storage version {fmt or 'legacy'} is not supported "
            "(lance-gpu writes 2.1 and 2.2)"
        )
