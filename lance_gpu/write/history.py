# SPDX-License-Identifier: Apache-2.0
"""The transactions behind a dataset's versions (pylance's ``read_transaction`` /
``get_transactions``).

Each committed version names its transaction: the manifest's inline transaction section,
or ``_transactions/{read_version}-{uuid}.txn`` (a ``lance.table.Transaction`` protobuf).
:func:`transaction_from_pb` turns one back into a :class:`~lance_gpu.txn.Transaction` whose
``operation`` is the :class:`~lance_gpu.txn.LanceOperation` that would commit it again
(``Append``, ``Overwrite``, ``Delete``, ``Update``, ``Merge``, ``Project``, ``Restore``,
``ReserveFragments``, ``Rewrite``, ``DataReplacement``, ``UpdateConfig``), with the
transaction's ``read_version``, ``uuid`` and ``transaction_properties`` (where a commit
message is kept as ``__lance_commit_message``).  Operations lance-gpu has no class for
(index creation, clones, base updates, MemWAL) raise
:class:`~lance_gpu.errors.UnsupportedFeatureError` naming the kind.
"""

from __future__ import annotations

from lance_gpu._proto import transaction_pb2
from lance_gpu.errors import DatasetNotFoundError, UnsupportedFeatureError
from lance_gpu.table.manifest import read_manifest_file, resolve_manifest
from lance_gpu.table.schema import LanceSchema
from lance_gpu.table.snapshot import TableSnapshot
from lance_gpu.txn.fragment import DataFile, FragmentMetadata
from lance_gpu.txn.operations import (
    Append,
    DataReplacement,
    DataReplacementGroup,
    Delete,
    Merge,
    Operation,
    Overwrite,
    Project,
    ReserveFragments,
    Restore,
    Rewrite,
    RewriteGroup,
    Update,
    UpdateConfig,
    UpdateMap,
)
from lance_gpu.txn.publish import winner_transaction
from lance_gpu.txn.transaction import Transaction

__all__ = ["get_transactions", "operation_from_pb", "read_transaction", "transaction_from_pb"]

#: The transaction property holding a commit message (pylance's ``LANCE_COMMIT_MESSAGE_KEY``).
LANCE_COMMIT_MESSAGE_KEY = "__lance_commit_message"


def _frags(pbs) -> list[FragmentMetadata]:
    return [FragmentMetadata.from_pb(f) for f in pbs]


def _schema(pb) -> LanceSchema:
    metadata = {k: bytes(v) for k, v in getattr(pb, "schema_metadata", {}).items()}
    return LanceSchema.from_protos(pb.schema, metadata)


def _field_map(pb) -> UpdateMap:
    return UpdateMap({e.key: (e.value if e.HasField("value") else None) for e in pb.update_entries}, bool(pb.replace))


def _update_map(pb, present: bool) -> UpdateMap | None:
    if not present:
        return None
    return UpdateMap({e.key: (e.value if e.HasField("value") else None) for e in pb.update_entries}, bool(pb.replace))


def operation_from_pb(txn: transaction_pb2.Transaction) -> Operation:
    """The operation of a transaction protobuf (see the module docstring)."""
    kind = txn.WhichOneof("operation")
    if kind == "append":
        return Append(_frags(txn.append.fragments))
    if kind == "overwrite":
        o = txn.overwrite
        return Overwrite(_schema(o), _frags(o.fragments), config=dict(o.config_upsert_values))
    if kind == "delete":
        d = txn.delete
        return Delete(_frags(d.updated_fragments), list(d.deleted_fragment_ids), d.predicate)
    if kind == "update":
        u = txn.update
        mode = "rewrite_columns" if u.update_mode == transaction_pb2.Transaction.REWRITE_COLUMNS else "rewrite_rows"
        return Update(list(u.removed_fragment_ids), _frags(u.updated_fragments), _frags(u.new_fragments),
                      list(u.fields_modified), list(u.fields_for_preserving_frag_bitmap), mode)
    if kind == "merge":
        return Merge(_frags(txn.merge.fragments), _schema(txn.merge))
    if kind == "project":
        return Project(_schema(txn.project))
    if kind == "restore":
        return Restore(int(txn.restore.version))
    if kind == "reserve_fragments":
        return ReserveFragments(int(txn.reserve_fragments.num_fragments))
    if kind == "rewrite":
        groups = [RewriteGroup(_frags(g.old_fragments), _frags(g.new_fragments)) for g in txn.rewrite.groups]
        return Rewrite(groups)
    if kind == "data_replacement":
        return DataReplacement([DataReplacementGroup(int(g.fragment_id), DataFile.from_pb(g.new_file))
                                for g in txn.data_replacement.replacements])
    if kind == "update_config":
        c = txn.update_config
        return UpdateConfig(
            _update_map(c.config_updates, c.HasField("config_updates")),
            _update_map(c.table_metadata_updates, c.HasField("table_metadata_updates")),
            _update_map(c.schema_metadata_updates, c.HasField("schema_metadata_updates")),
            {int(fid): _field_map(m) for fid, m in c.field_metadata_updates.items()},
        )
    raise UnsupportedFeatureError(f"lance-gpu cannot represent a {kind!r} transaction as a LanceOperation")


def transaction_from_pb(txn: transaction_pb2.Transaction) -> Transaction:
    """The :class:`~lance_gpu.txn.Transaction` of a transaction protobuf."""
    return Transaction(int(txn.read_version), operation_from_pb(txn), txn.uuid, dict(txn.transaction_properties))


def read_transaction(snapshot: TableSnapshot, version: int) -> Transaction | None:
    """The transaction that committed ``version`` of ``snapshot``'s dataset, or None when the
    version records none (written with transaction files disabled, or the file is gone).

    Raises :class:`~lance_gpu.errors.DatasetNotFoundError` (an ``OSError``, as pylance's)
    for a version that does not exist."""
    try:
        location = resolve_manifest(snapshot.store, snapshot.root, int(version))
    except (FileNotFoundError, KeyError, ValueError):
        raise DatasetNotFoundError(f"version {version} of {snapshot.uri} was not found") from None
    pb = winner_transaction(snapshot.store, snapshot.root, read_manifest_file(snapshot.store, location.path))
    return None if pb is None else transaction_from_pb(pb)


def get_transactions(snapshot: TableSnapshot, recent_transactions: int = 10) -> list[Transaction | None]:
    """The transactions of the ``recent_transactions`` versions up to ``snapshot.version``,
    newest first (None for a version without one), as pylance's ``get_transactions``."""
    out: list[Transaction | None] = []
    version = int(snapshot.version)
    while version >= 1 and len(out) < int(recent_transactions):
        try:
            out.append(read_transaction(snapshot, version))
        except DatasetNotFoundError:  # removed by cleanup: the history ends here
            break
        version -= 1
    return out
