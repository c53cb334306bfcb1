# SPDX-License-Identifier: Apache-2.0
"""The transaction model: pylance's ``LanceOperation`` types and their conflict rules.

Every operation is an :class:`Operation`, committed by the one commit function
(:func:`lance_gpu.txn.commit.commit`).  Each one

* fills its ``lance.table.Transaction`` oneof (:meth:`Operation.fill`);
* builds the manifest contents on top of a base version (:meth:`Operation.apply`; the commit
  stamps version, timestamp, writer, transaction file and feature flags);
* decides what to do when another writer committed first (:meth:`Operation.rebase`), with
  pylance's rules (``conflict_resolver.rs``, read, not copied):

  - compatible: the winner does not touch what we changed -- the manifest is rebuilt on top
    of the winner and the next version tried (this never uses up the retry budget);
  - rebased: two deletes of one fragment whose rows do not overlap -- the deletion vectors are
    merged into a new deletion file;
  - :class:`~lance_gpu.errors.RetryableCommitConflictError`: the winner rewrote, deleted or
    changed what we read (compaction, delete of the same rows, a schema change ...):
    re-planning the operation on the new version may succeed, and the row-level operations
    do that themselves (:func:`lance_gpu.txn.commit.run_with_retries`);
  - :class:`~lance_gpu.errors.CommitConflictError`: the winner overwrote or restored the
    table, or its transaction cannot be read.

The public shapes (constructor arguments and attribute names) are pylance 14's:
``LanceOperation.Overwrite(new_schema, fragments)``, ``Append(fragments)``,
``Delete(updated_fragments, deleted_fragment_ids, predicate)``, ``Update(removed_fragment_ids,
updated_fragments, new_fragments, fields_modified, ...)``, ``Merge(fragments, schema)``,
``Restore(version)``, ``Rewrite(groups, rewritten_indices)``, ``Project(schema)``,
``DataReplacement(replacements)``.  Fragments are :class:`~lance_gpu.txn.fragment.FragmentMetadata`
(protobufs are accepted too); schemas are a :class:`~lance_gpu.table.schema.LanceSchema` or a
``pyarrow.Schema``.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from lance_gpu._proto import rowids_pb2, table_pb2, transaction_pb2
from lance_gpu.errors import CommitConflictError, RetryableCommitConflictError
from lance_gpu.io.store import ObjectStore, remove_quietly
from lance_gpu.table import features
from lance_gpu.table.deletion import deletion_file_path, read_deletion_file
from lance_gpu.table.deletion_writer import fragment_with_deletions
from lance_gpu.table.indices import fragment_bitmap, recalculate_fragment_bitmap
from lance_gpu.table.manifest import ManifestFile, read_manifest_file, resolve_manifest
from lance_gpu.table.manifest_bytes import FragmentLayout, ManifestDraft
from lance_gpu.table.schema import LanceSchema
from lance_gpu.table.schema_view import LanceSchema as SchemaView
from lance_gpu.txn.fragment import DataFile, FragmentMetadata, as_pb

__all__ = [
    "Append",
    "CreateIndex",
    "DataReplacement",
    "DataReplacementGroup",
    "Delete",
    "LanceOperation",
    "Merge",
    "Operation",
    "Overwrite",
    "Project",
    "ReserveFragments",
    "Restore",
    "Rewrite",
    "RewriteGroup",
    "RewrittenIndex",
    "Update",
    "UpdateConfig",
    "UpdateMap",
]


# --------------------------------------------------------------------------------------------
# the protocol


class Operation:
    """One transaction the commit can commit and rebase (see the module docstring)."""

    #: ``Transaction.operation`` oneof name.
    name: ClassVar[str] = ""

    @property
    def written(self) -> list[str]:
        """Files this operation wrote (removed by :meth:`cleanup` if the commit fails)."""
        return self.__dict__.setdefault("_written", [])

    @property
    def kind(self) -> str:
        return self.name

    #: The entries of the manifest the last :meth:`apply` built that are new or replace a
    #: base fragment (every other entry is the base's, unchanged), or None where the
    #: operation does not say: the commit then compares the whole manifests to find the
    #: files to sync (:func:`lance_gpu.txn.commit.commit`).
    touched: list[table_pb2.DataFragment] | None = None

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        raise NotImplementedError

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        """``base``'s manifest (None: a new dataset) with this operation's changes as version
        ``version``: a new ``Manifest``, or a :class:`~lance_gpu.table.manifest_bytes.ManifestDraft`
        on ``base``'s fragment layout (its untouched fragments kept as their bytes; the
        operation then sets :attr:`touched`); version, timestamp, writer, transaction file
        and the deletion-file flags are set by the commit."""
        raise NotImplementedError

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        """Check the committed ``theirs`` (version ``winner``) against this operation.

        Returns True if this operation's transaction changed (it must be written again),
        False if it can be committed unchanged on top of ``winner``; raises
        :class:`CommitConflictError` / :class:`RetryableCommitConflictError` otherwise.
        """
        raise NotImplementedError

    def cleanup(self, store: ObjectStore) -> None:
        """Delete the objects this operation wrote (best effort: nothing references them)."""
        remove_quietly(store, self.written)
        self.written.clear()

    # -- helpers -------------------------------------------------------------------------

    def _incompatible(self, theirs_kind: str | None, version: int) -> CommitConflictError:
        return CommitConflictError(
            f"this {self.name} is incompatible with the concurrent {theirs_kind or 'unknown operation'} "
            "committed first",
            version,
        )

    def _retryable(self, theirs_kind: str | None, version: int) -> RetryableCommitConflictError:
        error = RetryableCommitConflictError(
            f"this {self.name} was preempted by the concurrent {theirs_kind} committed first; "
            "re-run it on the latest version",
            version,
        )
        error.winner_kind = theirs_kind  # the operation that won, for callers that retry selectively
        return error

    def _classify(
        self,
        theirs: transaction_pb2.Transaction | None,
        version: int,
        ok: Iterable[str],
        retry: Iterable[str],
    ) -> str:
        """The winner's operation name if it is in ``ok``; raise for ``retry`` (retryable)
        and everything else (incompatible)."""
        if theirs is None:
            raise CommitConflictError(
                f"version {version} was committed by another writer whose transaction cannot be "
                f"read; this {self.name} cannot tell whether it conflicts",
                version,
            )
        kind = theirs.WhichOneof("operation")
        if kind in retry:
            raise self._retryable(kind, version)
        if kind in ok:
            return str(kind)
        raise self._incompatible(kind, version)


def _copy_manifest(base: ManifestFile) -> table_pb2.Manifest:
    m = table_pb2.Manifest()
    m.CopyFrom(base.manifest)
    return m


def _head_copy(base: ManifestFile) -> table_pb2.Manifest:
    """A new Manifest of ``base``'s fields without its fragments (for operations that
    replace them all): no parse or copy of the fragments of a version a commit wrote."""
    m = table_pb2.Manifest()
    m.CopyFrom(base.head)
    del m.fragments[:]
    return m


def _copy_fragment(f: table_pb2.DataFragment) -> table_pb2.DataFragment:
    out = table_pb2.DataFragment()
    out.CopyFrom(f)
    return out


def _next_fragment_id(base: ManifestFile) -> int:
    """The id after every fragment id ``base`` names and its ``max_fragment_id``: from
    ``base.fragment_id_bound`` where known, else from its fragment layout."""
    if base.fragment_id_bound is not None:
        return base.fragment_id_bound + 1
    ids = base.fragment_layout().ids
    bound = int(ids.max()) if len(ids) else -1
    if base.head.HasField("max_fragment_id"):
        bound = max(bound, int(base.head.max_fragment_id))
    return bound + 1


def _draft(base: ManifestFile) -> tuple[FragmentLayout, table_pb2.Manifest]:
    """``base``'s fragment layout and a new head (its manifest but the fragments) to change:
    a new manifest is built as a :class:`~lance_gpu.table.manifest_bytes.ManifestDraft`,
    the base's untouched fragments kept as their bytes."""
    layout = base.fragment_layout()
    return layout, layout.head()


def _with_replaced(layout: FragmentLayout, positions: Mapping[int, int], removed: set[int],
                   updated: Mapping[int, table_pb2.DataFragment]) -> tuple[np.ndarray, list[table_pb2.DataFragment]]:
    """The sources (:class:`ManifestDraft`) of ``layout``'s fragments in order, without those
    of ids in ``removed`` and with ``updated`` (by id) in place of those of the same id
    (``positions``: where the ids are), and the new fragments they name."""
    sources = np.arange(len(layout), dtype=np.int64)
    new: list[table_pb2.DataFragment] = []
    for fid, frag in updated.items():
        if fid not in removed:
            sources[positions[fid]] = -1 - len(new)
            new.append(frag)
    if removed:
        keep = np.ones(len(sources), np.bool_)
        keep[[positions[fid] for fid in removed]] = False
        sources = sources[keep]
    return sources, new


def _appended(sources: np.ndarray, start: int, count: int) -> np.ndarray:
    """``sources`` followed by the new fragments ``start .. start + count - 1``."""
    return np.concatenate((sources, -1 - np.arange(start, start + count, dtype=np.int64)))


def _unwrap(schema: Any) -> Any:
    """The field tree of pylance's ``LanceSchema`` handle (other schemas as given)."""
    return schema.table_schema if isinstance(schema, SchemaView) else schema


def _as_lance_schema(schema: LanceSchema | SchemaView | pa.Schema, base: ManifestFile | None = None) -> LanceSchema:
    """A LanceSchema; a pyarrow schema takes the field ids of ``base``'s fields of the same
    name (new names get ids after every id in use), else ids 0.. in order."""
    schema = _unwrap(schema)
    if isinstance(schema, LanceSchema):
        return schema
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"schema must be a LanceSchema or pyarrow.Schema, not {type(schema).__name__}")
    if base is None:
        return LanceSchema.from_arrow(schema)
    old = LanceSchema.from_manifest(base.manifest, base.path)
    by_name = {f.name: f for f in old.fields}
    kept = [by_name[f.name] for f in schema if f.name in by_name]
    new = pa.schema([f for f in schema if f.name not in by_name])
    fields = list(kept)
    if len(new):
        fields += list(LanceSchema.from_arrow(new, start_id=old.max_field_id + 1).fields)
    order = {f.name: k for k, f in enumerate(schema)}
    fields.sort(key=lambda f: order[f.name])
    return LanceSchema(fields, {k.decode() if isinstance(k, bytes) else k: v for k, v in (schema.metadata or {}).items()} or old.metadata)


def _set_schema(m: table_pb2.Manifest, schema: LanceSchema) -> None:
    del m.fields[:]
    m.fields.extend(schema.to_protos())
    m.schema_metadata.clear()
    for k, v in schema.metadata.items():
        m.schema_metadata[k] = v


def _fill_schema(target: Any, schema: LanceSchema) -> None:
    target.schema.extend(schema.to_protos())
    if hasattr(target, "schema_metadata"):
        for k, v in schema.metadata.items():
            target.schema_metadata[k] = v


def _versions_run(n: int, version: int) -> bytes:
    return rowids_pb2.RowDatasetVersionSequence(
        runs=[
            rowids_pb2.RowDatasetVersionRun(
                span=rowids_pb2.U64Segment(range=rowids_pb2.U64Segment.Range(start=0, end=n)),
                version=version,
            )
        ]
    ).SerializeToString()


def _assign_row_ids(m: table_pb2.Manifest, fragments: Sequence[table_pb2.DataFragment], version: int) -> None:
    """On a dataset with stable row ids: new rows get ids from ``next_row_id`` and
    created / last-updated versions ``version``; fragments that carry row ids (rewritten
    rows) keep them and get ``version`` as their last-updated version."""
    if not int(m.writer_feature_flags) & features.FLAG_STABLE_ROW_IDS:
        return
    next_row_id = int(m.next_row_id)
    for frag in fragments:
        n = int(frag.physical_rows)
        if frag.WhichOneof("row_id_sequence") is None:
            seq = rowids_pb2.RowIdSequence(
                segments=[rowids_pb2.U64Segment(range=rowids_pb2.U64Segment.Range(start=next_row_id, end=next_row_id + n))]
            )
            frag.inline_row_ids = seq.SerializeToString()
            frag.inline_created_at_versions = _versions_run(n, version)
            next_row_id += n
        elif frag.WhichOneof("created_at_version_sequence") is None:
            frag.inline_created_at_versions = _versions_run(n, version)
        frag.inline_last_updated_at_versions = _versions_run(n, version)
    m.next_row_id = next_row_id


def _touched_ids(theirs: transaction_pb2.Transaction) -> set[int]:
    """Fragment ids a winner's delete / update / rewrite / data replacement modified or removed."""
    kind = theirs.WhichOneof("operation")
    if kind == "delete":
        return {int(f.id) for f in theirs.delete.updated_fragments} | {int(i) for i in theirs.delete.deleted_fragment_ids}
    if kind == "update":
        return {int(f.id) for f in theirs.update.updated_fragments} | {int(i) for i in theirs.update.removed_fragment_ids}
    if kind == "rewrite":
        ids = {int(f.id) for f in theirs.rewrite.old_fragments}
        for g in theirs.rewrite.groups:
            ids |= {int(f.id) for f in g.old_fragments}
        return ids
    if kind == "data_replacement":
        return {int(r.fragment_id) for r in theirs.data_replacement.replacements}
    return set()


def _index_fields(theirs: transaction_pb2.Transaction) -> set[int]:
    """The field ids a winner's CreateIndex indexes (its new indices)."""
    return {int(f) for i in theirs.create_index.new_indices for f in i.fields}


def _retain_indices(section: table_pb2.IndexSection | None, schema: LanceSchema) -> table_pb2.IndexSection | None:
    """Indices whose fields are all still in ``schema`` (as pylance's retain_relevant_indices)."""
    if section is None:
        return None
    ids = set(schema.by_id)
    out = table_pb2.IndexSection()
    for idx in section.indices:
        if all(int(f) in ids for f in idx.fields):
            out.indices.append(idx)
    return out


def _pbs(fragments: Iterable[Any] | None) -> list[table_pb2.DataFragment]:
    if fragments is None:
        return []
    if not isinstance(fragments, (list, tuple)):
        fragments = list(fragments)
    return [as_pb(f) for f in fragments]


# --------------------------------------------------------------------------------------------
# Append and Overwrite


#: Winners an append is rebuilt on top of.  An append only adds fragments, so whatever the
#: winner did to existing fragments still holds: the appended fragments get fresh ids above
#: the winner's ``max_fragment_id`` (and stable row ids from its ``next_row_id``).  pylance
#: also lets an append pass a project or merge (schema changes); we do not: the data files
#: were written for the schema we read.
_APPEND_COMPATIBLE = (
    "append", "delete", "update", "rewrite", "create_index", "reserve_fragments", "update_config",
    "data_replacement", "update_mem_wal_state", "update_bases", "clone",
)


class Append(Operation):
    """Add ``fragments`` (ids are assigned at commit, after the base's ``max_fragment_id``)."""

    name = "append"

    def __init__(self, fragments: Iterable[FragmentMetadata]) -> None:
        self._fragments = _pbs(fragments)

    @property
    def fragments(self) -> list[FragmentMetadata]:
        return [FragmentMetadata.from_pb(f) for f in self._fragments]

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.append.SetInParent()
        txn.append.fragments.extend(self._fragments)

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        if base is None:
            raise ValueError("Append needs an existing dataset; use Overwrite to create one")
        layout, head = _draft(base)
        start = _next_fragment_id(base)
        new = []
        for k, f in enumerate(self._fragments):
            frag = table_pb2.DataFragment()
            frag.CopyFrom(f)
            frag.id = start + k
            new.append(frag)
        _assign_row_ids(head, new, version)
        if new:
            head.max_fragment_id = start + len(new) - 1
        self.touched = new
        sources = _appended(np.arange(len(layout), dtype=np.int64), 0, len(new))
        return ManifestDraft(head, layout, sources, new), base.index_section

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        self._classify(theirs, int(winner.head.version), ok=_APPEND_COMPATIBLE, retry=())
        return False


class Overwrite(Operation):
    """Replace the whole table (or create it) with ``fragments`` under ``new_schema``.

    ``data_storage_version`` (``"0.1"``, ``"2.0"``, ``"2.1"``, ``"2.2"``) defaults to the
    fragments' file version (``"0.1"`` for legacy files); ``config`` upserts table config keys.
    """

    name = "overwrite"

    def __init__(
        self,
        new_schema: LanceSchema | SchemaView | pa.Schema,
        fragments: Iterable[FragmentMetadata],
        initial_bases: list[Any] | None = None,
        *,
        data_storage_version: str | None = None,
        config: Mapping[str, str] | None = None,
        writer_flags: int = 0,
    ) -> None:
        if initial_bases:
            raise ValueError("Overwrite: initial_bases are not supported by lance-gpu")
        self.new_schema = _as_lance_schema(new_schema)
        self._fragments = _pbs(fragments)
        if data_storage_version is None:
            versions = {(int(f.file_major_version), int(f.file_minor_version)) for frag in self._fragments for f in frag.files}
            if versions and all(major == 0 and minor <= 2 for major, minor in versions):
                data_storage_version = "0.1"  # legacy files
            else:
                minors = {minor for _major, minor in versions}
                data_storage_version = f"2.{minors.pop()}" if len(minors) == 1 else "2.2"
        self.data_storage_version = data_storage_version
        self.config = dict(config or {})
        self.writer_flags = int(writer_flags)
        self.initial_bases = None

    @property
    def fragments(self) -> list[FragmentMetadata]:
        return [FragmentMetadata.from_pb(f) for f in self._fragments]

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        o = txn.overwrite
        o.SetInParent()
        o.fragments.extend(self._fragments)
        _fill_schema(o, self.new_schema)
        for k, v in self.config.items():
            o.config_upsert_values[k] = v

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        m = table_pb2.Manifest() if base is None else _head_copy(base)
        start = 0 if base is None else _next_fragment_id(base)
        flags = int(m.writer_feature_flags) | self.writer_flags
        _set_schema(m, self.new_schema)
        m.data_format.file_format = "lance"
        m.data_format.version = self.data_storage_version
        for key, value in self.config.items():
            m.config[key] = value
        flags &= ~features.FLAG_DELETION_FILES
        m.reader_feature_flags = (int(m.reader_feature_flags) | (self.writer_flags & features.FLAG_STABLE_ROW_IDS)) & ~features.FLAG_DELETION_FILES
        if m.config:
            flags |= features.FLAG_TABLE_CONFIG
        m.writer_feature_flags = flags
        new = []
        for k, f in enumerate(self._fragments):
            piece = table_pb2.DataFragment()
            piece.CopyFrom(f)
            piece.id = start + k
            new.append(piece)
        _assign_row_ids(m, new, version)
        m.fragments.extend(new)
        if new:
            m.max_fragment_id = start + len(new) - 1
        return m, None

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        # Conservative (pylance lets an overwrite win over most writers): the table the
        # caller decided to replace is not the one now committed.
        raise self._incompatible(None if theirs is None else theirs.WhichOneof("operation"), int(winner.head.version))


# --------------------------------------------------------------------------------------------
# Delete


class Delete(Operation):
    """New deletion files for ``updated_fragments``, ``deleted_fragment_ids`` whose rows are
    now all deleted, and the predicate (text).

    When the planner knows which rows it deleted (:meth:`with_rows`), a concurrent delete of
    other rows of the same fragment is merged instead of retried.
    """

    name = "delete"

    def __init__(
        self,
        updated_fragments: Iterable[FragmentMetadata],
        deleted_fragment_ids: Iterable[int],
        predicate: str,
    ) -> None:
        self.updated = {int(f.id): f for f in _pbs(updated_fragments)}
        self.deleted_ids = [int(i) for i in deleted_fragment_ids]
        self.predicate = str(predicate)
        self.initial: dict[int, table_pb2.DataFragment] = {}  # the touched fragments as read
        self.affected: dict[int, np.ndarray] = {}  # fragment id -> newly deleted offsets (sorted)
        self.read_version: int | None = None  # set by a rebase

    def with_rows(self, initial: Mapping[int, table_pb2.DataFragment], affected: Mapping[int, np.ndarray]) -> Delete:
        self.initial = dict(initial)
        self.affected = dict(affected)
        return self

    @property
    def updated_fragments(self) -> list[FragmentMetadata]:
        return [FragmentMetadata.from_pb(self.updated[i]) for i in sorted(self.updated)]

    @property
    def deleted_fragment_ids(self) -> list[int]:
        return sorted(self.deleted_ids)

    @property
    def modified_ids(self) -> set[int]:
        return set(self.updated) | set(self.deleted_ids)

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        if self.read_version is not None:
            txn.read_version = self.read_version
        d = txn.delete
        d.SetInParent()
        d.updated_fragments.extend(self.updated[i] for i in sorted(self.updated))
        d.deleted_fragment_ids.extend(sorted(self.deleted_ids))
        d.predicate = self.predicate

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        assert base is not None
        layout, head = _draft(base)
        positions = layout.positions(sorted(self.modified_ids))
        missing = sorted(self.modified_ids - set(positions))
        if missing:
            raise RetryableCommitConflictError(f"fragments {missing} this delete changes are not in version {head.version}", int(head.version))
        sources, new = _with_replaced(layout, positions, set(self.deleted_ids), self.updated)
        self.touched = list(self.updated.values())
        return ManifestDraft(head, layout, sources, new), base.index_section

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        version = int(winner.head.version)
        kind = self._classify(
            theirs,
            version,
            ok=("append", "create_index", "reserve_fragments", "clone", "project", "update_config",
                "update_bases", "rewrite", "data_replacement", "delete", "update"),
            retry=("merge",),
        )
        assert theirs is not None
        touched = _touched_ids(theirs) & self.modified_ids
        if not touched:
            return False
        if kind in ("rewrite", "data_replacement") or not self.affected:
            raise self._retryable(kind, version)
        # A concurrent delete / update of the same fragments: merge the deletion vectors if
        # only deletion files changed and the rows do not overlap (pylance's rebase).
        op = getattr(theirs, kind)
        removed = {int(i) for i in (op.deleted_fragment_ids if kind == "delete" else op.removed_fragment_ids)}
        if removed & self.modified_ids:
            raise self._retryable(kind, version)
        current = {int(f.id): f for f in winner.manifest.fragments}
        changed = False
        for fid in sorted(touched):
            initial = self.initial[fid]
            now = current.get(fid)
            if now is None or list(now.files) != list(initial.files):
                raise self._retryable(kind, version)
            if now.deletion_file == initial.deletion_file:
                continue
            theirs_rows = (
                read_deletion_file(store, root, fid, now.deletion_file) if now.HasField("deletion_file") else np.zeros(0, np.uint32)
            )
            ours = self.affected[fid]
            if np.intersect1d(theirs_rows, ours, assume_unique=True).size:
                raise RetryableCommitConflictError(
                    f"this delete and the concurrent {kind} committed first both "
                    f"deleted rows of fragment {fid}; re-run it on the latest version",
                    version,
                )
            self._replace_deletions(store, root, fid, now, np.union1d(theirs_rows, ours).astype(np.uint32), version)
            changed = True
        if changed:
            self.read_version = version
        return changed

    def _replace_deletions(self, store: ObjectStore, root: str, fid: int, frag: table_pb2.DataFragment, rows: np.ndarray, read_version: int) -> None:
        old = self.updated.pop(fid, None)
        if fid in self.deleted_ids:
            self.deleted_ids.remove(fid)
        if old is not None and old.HasField("deletion_file") and old.deletion_file != frag.deletion_file:
            path = deletion_file_path(store, root, fid, old.deletion_file)  # superseded: nothing points at it
            if path in self.written:
                self.written.remove(path)
                try:
                    store.delete(path)
                except FileNotFoundError:
                    pass
        new = fragment_with_deletions(store, root, frag, read_version, rows, self.written)
        if new is None:
            self.deleted_ids.append(fid)
        else:
            self.updated[fid] = new


# --------------------------------------------------------------------------------------------
# Update


class Update(Operation):
    """Rows rewritten: ``removed_fragment_ids`` leave, ``updated_fragments`` (new deletion
    vectors, or new data files for ``fields_modified`` in a column rewrite) replace the
    fragments of the same id, and ``new_fragments`` (the rewritten rows; with stable row ids
    they carry the rows' ids in ``row_id_meta``) are added with fresh ids.

    Conflicts: rebuilt on a concurrent append (or index / config change); retryable against
    a winner that changed one of the same fragments or the schema; incompatible with an
    overwrite or restore.
    """

    name = "update"

    def __init__(
        self,
        removed_fragment_ids: Iterable[int] = (),
        updated_fragments: Iterable[FragmentMetadata] = (),
        new_fragments: Iterable[FragmentMetadata] = (),
        fields_modified: Iterable[int] = (),
        fields_for_preserving_frag_bitmap: Iterable[int] = (),
        update_mode: str = "",
        updated_fragment_offsets: dict[int, bytes] | None = None,
    ) -> None:
        self.removed_fragment_ids = [int(i) for i in removed_fragment_ids]
        self._updated = _pbs(updated_fragments)
        self._new = _pbs(new_fragments)
        self.fields_modified = [int(i) for i in fields_modified]
        self.fields_for_preserving_frag_bitmap = [int(i) for i in fields_for_preserving_frag_bitmap]
        if update_mode not in ("", "rewrite_rows", "rewrite_columns"):
            raise ValueError(f"update_mode must be 'rewrite_rows' or 'rewrite_columns', not {update_mode!r}")
        self.update_mode = update_mode
        self.updated_fragment_offsets = updated_fragment_offsets

    @property
    def updated_fragments(self) -> list[FragmentMetadata]:
        return [FragmentMetadata.from_pb(f) for f in self._updated]

    @property
    def new_fragments(self) -> list[FragmentMetadata]:
        return [FragmentMetadata.from_pb(f) for f in self._new]

    @property
    def modified_ids(self) -> set[int]:
        return set(self.removed_fragment_ids) | {int(f.id) for f in self._updated}

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        u = txn.update
        u.SetInParent()
        u.removed_fragment_ids.extend(self.removed_fragment_ids)
        u.updated_fragments.extend(self._updated)
        u.new_fragments.extend(self._new)
        u.fields_modified.extend(self.fields_modified)
        u.fields_for_preserving_frag_bitmap.extend(self.fields_for_preserving_frag_bitmap)
        u.update_mode = transaction_pb2.Transaction.REWRITE_COLUMNS if self.update_mode == "rewrite_columns" else transaction_pb2.Transaction.REWRITE_ROWS  # type: ignore[assignment]

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        assert base is not None
        layout, head = _draft(base)
        positions = layout.positions(sorted(self.modified_ids))
        missing = sorted(self.modified_ids - set(positions))
        if missing:
            raise RetryableCommitConflictError(f"fragments {missing} this update changes are not in version {head.version}", int(head.version))
        removed = set(self.removed_fragment_ids)
        updated = {int(f.id): f for f in self._updated}
        sources, frags = _with_replaced(layout, positions, removed, updated)
        start = _next_fragment_id(base)
        new = []
        for k, f in enumerate(self._new):
            frag = table_pb2.DataFragment()
            frag.CopyFrom(f)
            frag.id = start + k
            new.append(frag)
        _assign_row_ids(head, new, version)
        sources = _appended(sources, len(frags), len(new))
        if new:
            head.max_fragment_id = start + len(new) - 1
        self.touched = list(updated.values()) + new
        draft = ManifestDraft(head, layout, sources, frags + new)
        section = base.index_section
        if section is not None and (self.fields_modified or removed):
            # indices lose the fragments whose indexed values changed or that are gone
            out = table_pb2.IndexSection()
            out.CopyFrom(section)
            stale = removed | set(updated) if self.fields_modified else removed
            for idx in out.indices:
                bitmap = fragment_bitmap(idx)
                if bitmap is None:
                    continue
                if self.fields_modified and not {int(f) for f in idx.fields} & set(self.fields_modified):
                    hit = removed
                else:
                    hit = stale
                if hit & set(bitmap):
                    idx.fragment_bitmap = BitMap(sorted(set(bitmap) - hit)).serialize()
            section = out
        return draft, section

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        version = int(winner.head.version)
        kind = self._classify(
            theirs,
            version,
            ok=("append", "create_index", "reserve_fragments", "clone", "update_config", "update_bases",
                "delete", "update", "rewrite", "data_replacement", "update_mem_wal_state"),
            retry=("merge", "project"),
        )
        assert theirs is not None
        if _touched_ids(theirs) & self.modified_ids:
            raise self._retryable(kind, version)
        return False


# --------------------------------------------------------------------------------------------
# Merge, Project: schema changes


class Merge(Operation):
    """Every fragment (with its new data files) and the new schema (columns added)."""

    name = "merge"

    def __init__(self, fragments: Iterable[FragmentMetadata], schema: LanceSchema | SchemaView | pa.Schema, preserves_nullability: bool = False) -> None:
        if isinstance(schema, pa.Schema):
            warnings.warn("Passing a pyarrow.Schema to Merge is deprecated. Please use a LanceSchema instead.",
                          DeprecationWarning, stacklevel=2)
        self._fragments = _pbs(fragments)
        self.schema = _unwrap(schema)
        self.preserves_nullability = bool(preserves_nullability)

    @property
    def fragments(self) -> list[FragmentMetadata]:
        return [FragmentMetadata.from_pb(f) for f in self._fragments]

    @fragments.setter
    def fragments(self, fragments: Iterable[Any]) -> None:
        self._fragments = _pbs(fragments)

    def _schema(self) -> LanceSchema:
        if not isinstance(self.schema, LanceSchema):
            raise TypeError("Merge needs a LanceSchema once committed (resolve a pyarrow schema first)")
        return self.schema

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.merge.SetInParent()
        txn.merge.fragments.extend(self._fragments)
        _fill_schema(txn.merge, self._schema())

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        assert base is not None
        m = _head_copy(base)
        _set_schema(m, self._schema())
        m.fragments.extend(sorted(self._fragments, key=lambda f: int(f.id)))
        return m, _retain_indices(base.index_section, self._schema())

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        self._classify(
            theirs,
            int(winner.head.version),
            ok=("create_index", "reserve_fragments", "clone", "update_config", "update_bases"),
            retry=("update", "append", "delete", "rewrite", "merge", "data_replacement", "project"),
        )
        return False


class Project(Operation):
    """A new schema over the same data files (drop / rename columns, nullability)."""

    name = "project"

    def __init__(self, schema: LanceSchema | SchemaView | pa.Schema, preserves_nullability: bool = False) -> None:
        self.schema = _unwrap(schema)
        self.preserves_nullability = bool(preserves_nullability)

    def _schema(self) -> LanceSchema:
        if not isinstance(self.schema, LanceSchema):
            raise TypeError("Project needs a LanceSchema once committed")
        return self.schema

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.project.SetInParent()
        txn.project.schema.extend(self._schema().to_protos())

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        assert base is not None
        schema = self._schema()
        m = _copy_manifest(base)
        _set_schema(m, schema)
        keep = set(schema.by_id)
        for frag in m.fragments:
            # data files none of whose fields remain are no longer part of the fragment
            files = [f for f in frag.files if any(int(i) in keep for i in f.fields)]
            if len(files) != len(frag.files):
                del frag.files[:]
                frag.files.extend(files)
        return m, _retain_indices(base.index_section, schema)

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        self._classify(
            theirs,
            int(winner.head.version),
            ok=("append", "update", "delete", "update_config", "create_index", "data_replacement",
                "rewrite", "clone", "reserve_fragments", "update_bases"),
            retry=("merge", "project"),
        )
        return False


# --------------------------------------------------------------------------------------------
# Restore


class Restore(Operation):
    """A new version whose contents are those of ``version``."""

    name = "restore"

    def __init__(self, version: int) -> None:
        self.version = int(version)

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.restore.version = self.version

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        assert base is not None
        old = read_manifest_file(store, resolve_manifest(store, root, self.version).path)
        m = table_pb2.Manifest()
        m.CopyFrom(old.manifest)
        bm = base.manifest
        # Fragment and row ids handed out since must never be handed out again.
        ids = [int(x.max_fragment_id) for x in (bm, m) if x.HasField("max_fragment_id")]
        ids += [int(f.id) for x in (bm, m) for f in x.fragments]
        if ids:
            m.max_fragment_id = max(ids)
        if m.next_row_id or bm.next_row_id:
            m.next_row_id = max(int(m.next_row_id), int(bm.next_row_id))
        return m, old.index_section

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        if theirs is not None and theirs.WhichOneof("operation") == "update_mem_wal_state":
            raise self._incompatible("update_mem_wal_state", int(winner.head.version))
        return False


# --------------------------------------------------------------------------------------------
# ReserveFragments, Rewrite (compaction), DataReplacement


class ReserveFragments(Operation):
    """Raise ``max_fragment_id`` by ``num_fragments`` (ids for a later Rewrite)."""

    name = "reserve_fragments"

    def __init__(self, num_fragments: int) -> None:
        self.num_fragments = int(num_fragments)

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.reserve_fragments.num_fragments = self.num_fragments

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        assert base is not None
        layout, head = _draft(base)
        current = max(_next_fragment_id(base) - 1, 0)
        head.max_fragment_id = current + self.num_fragments
        self.touched = []
        return ManifestDraft.keeping(layout, head), base.index_section

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        if theirs is not None and theirs.WhichOneof("operation") in ("overwrite", "restore"):
            raise self._incompatible(theirs.WhichOneof("operation"), int(winner.head.version))
        return False


@dataclass
class RewriteGroup:
    """Old fragments replaced by new ones (pylance's ``LanceOperation.RewriteGroup``)."""

    old_fragments: list[Any]
    new_fragments: list[Any]


@dataclass
class RewrittenIndex:
    """An index rewritten by a compaction (pylance's ``LanceOperation.RewrittenIndex``)."""

    old_id: str
    new_id: str
    new_details_type_url: str
    new_details_value: bytes
    new_index_version: int


class Rewrite(Operation):
    """Groups of old fragments replaced by new ones (compaction).

    Indices (see :mod:`lance_gpu.table.indices`; the remapping is :mod:`lance_gpu.write.index_remap`): ``rewritten`` lists the indices whose
    remapped copies were written (old index, new uuid, new files); their manifest entries get
    the new uuid and files, and their fragment bitmaps swap each rewritten group's old
    fragment ids for its new ones.  ``moved`` lists the uuids of indices whose files stay
    valid (indices of stable row ids, which a compaction keeps) and whose fragment bitmaps
    move the same way.  Other indices cover none of the rewritten fragments.
    """

    name = "rewrite"

    def __init__(self, groups: Iterable[RewriteGroup | tuple[Any, Any]] = (), rewritten_indices: Iterable[RewrittenIndex] = ()) -> None:
        self.groups = groups  # type: ignore[assignment]
        self.rewritten_indices = list(rewritten_indices)
        if self.rewritten_indices:
            raise ValueError("Rewrite: rewritten_indices from outside lance-gpu's compaction are not supported")
        #: (old index, new uuid bytes, new files) per remapped index
        self.rewritten: list[tuple[table_pb2.IndexMetadata, bytes, list[table_pb2.IndexFile]]] = []
        #: uuids of indices kept as they are but for their fragment bitmaps
        self.moved: set[bytes] = set()

    @property
    def groups(self) -> list[RewriteGroup]:
        return [
            RewriteGroup([FragmentMetadata.from_pb(f) for f in o], [FragmentMetadata.from_pb(f) for f in n])
            for o, n in self._groups
        ]

    @groups.setter
    def groups(self, groups: Iterable[RewriteGroup | tuple[Any, Any]]) -> None:
        pairs = []
        for g in groups:
            old, new = (g.old_fragments, g.new_fragments) if isinstance(g, RewriteGroup) else g
            pairs.append((_pbs(old), _pbs(new)))
        self._groups = pairs

    @property
    def old_ids(self) -> set[int]:
        return {int(f.id) for old, _new in self._groups for f in old}

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.rewrite.SetInParent()
        for old, new in self._groups:
            g = txn.rewrite.groups.add()
            g.old_fragments.extend(old)
            g.new_fragments.extend(new)
        for index, new_uuid, _files in self.rewritten:
            r = txn.rewrite.rewritten_indices.add()
            r.old_id.CopyFrom(index.uuid)
            r.new_id.uuid = new_uuid
            r.new_index_details.CopyFrom(index.index_details)
            r.new_index_version = int(index.index_version)

    def _indices(self, section: table_pb2.IndexSection | None, version: int,
                 groups: list[tuple[list[Any], list[Any]]]) -> table_pb2.IndexSection | None:
        if section is None:
            if self.rewritten:
                raise RetryableCommitConflictError(f"the indices this compaction remapped are gone in version {version}", version)
            return None
        out = table_pb2.IndexSection()
        out.CopyFrom(section)
        remapped = {bytes(index.uuid.uuid): (new_uuid, files) for index, new_uuid, files in self.rewritten}
        found = set()
        for idx in out.indices:
            key = bytes(idx.uuid.uuid)
            if key in self.moved:
                bitmap = fragment_bitmap(idx)
                if bitmap is not None:
                    idx.fragment_bitmap = recalculate_fragment_bitmap(bitmap, groups).serialize()
                continue
            if key not in remapped:
                continue
            new_uuid, files = remapped[key]
            idx.uuid.uuid = new_uuid
            del idx.files[:]
            idx.files.extend(files)
            found.add(key)
            bitmap = fragment_bitmap(idx)
            if bitmap is not None:
                idx.fragment_bitmap = recalculate_fragment_bitmap(bitmap, groups).serialize()
        if found != set(remapped):
            raise RetryableCommitConflictError(f"an index this compaction remapped changed in version {version}", version)
        return out

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        assert base is not None
        layout, head = _draft(base)
        # a new fragment with id 0 is numbered after every id in use, as pylance
        # (LanceFragment.create_from_file gives the files of a distributed compaction id 0)
        next_id = _next_fragment_id(base)
        groups = []
        for old, fresh in self._groups:
            new = []
            for f in fresh:
                if int(f.id) == 0:
                    f = _copy_fragment(f)
                    f.id, next_id = next_id, next_id + 1
                new.append(f)
            groups.append((old, new))
        # the fragments as sources (ManifestDraft: base positions, -1 - k for added_frags[k]) and ids
        sources = np.arange(len(layout), dtype=np.int64)
        ids = layout.ids.copy()
        added_frags: list[table_pb2.DataFragment] = []
        for old, new in groups:
            wanted = np.array([int(f.id) for f in old], np.int64)
            pos = np.flatnonzero(np.isin(ids, wanted))
            for f in old:
                at = pos[ids[pos] == int(f.id)]
                now = None
                if len(at):
                    src = int(sources[at[0]])
                    now = layout.entry(src) if src >= 0 else added_frags[-1 - src]
                if now is None or now != f:
                    raise RetryableCommitConflictError(f"fragment {f.id} this compaction rewrote changed in version {head.version}", int(head.version))
            added = -1 - np.arange(len(added_frags), len(added_frags) + len(new), dtype=np.int64)
            added_ids = np.array([int(f.id) for f in new], np.int64)
            added_frags.extend(new)
            first = int(pos[0]) if len(pos) else 0
            if len(pos) and np.array_equal(pos, np.arange(first, first + len(pos))) and np.array_equal(ids[pos], wanted):
                # contiguous, in order: the new fragments take their place
                sources = np.concatenate((sources[:first], added, sources[first + len(pos):]))
                ids = np.concatenate((ids[:first], added_ids, ids[first + len(pos):]))
            else:
                keep = ~np.isin(ids, wanted)
                sources = np.concatenate((sources[keep], added))
                ids = np.concatenate((ids[keep], added_ids))
        order = np.argsort(ids, kind="stable")
        if next_id - 1 > (int(head.max_fragment_id) if head.HasField("max_fragment_id") else -1):
            head.max_fragment_id = next_id - 1
        self.touched = [f for _old, new in groups for f in new]
        return ManifestDraft(head, layout, sources[order], added_frags), self._indices(base.index_section, int(head.version), groups)

    def cleanup(self, store: ObjectStore) -> None:
        remove_quietly(store, self.written)  # data files, remapped index files
        self.written.clear()

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        version = int(winner.head.version)
        kind = self._classify(
            theirs,
            version,
            ok=("append", "reserve_fragments", "project", "clone", "update_config", "update_mem_wal_state",
                "update_bases", "delete", "update", "rewrite", "data_replacement"),
            retry=("merge", "create_index"),
        )
        assert theirs is not None
        if _touched_ids(theirs) & self.old_ids:
            raise self._retryable(kind, version)
        return False


@dataclass
class DataReplacementGroup:
    """The new data file for the fields of ``new_file`` in fragment ``fragment_id``."""

    fragment_id: int
    new_file: DataFile


class DataReplacement(Operation):
    """Replace data files: each group's ``new_file`` takes the place of the fragment's data
    file holding exactly the same fields (or is added where no file holds them)."""

    name = "data_replacement"

    def __init__(self, replacements: Iterable[DataReplacementGroup]) -> None:
        self.replacements = list(replacements)

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.data_replacement.SetInParent()
        for r in self.replacements:
            g = txn.data_replacement.replacements.add()
            g.fragment_id = int(r.fragment_id)
            g.new_file.CopyFrom(r.new_file.to_pb())

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        assert base is not None
        layout, head = _draft(base)
        positions = layout.positions([int(r.fragment_id) for r in self.replacements])
        frags = {fid: layout.entry(pos) for fid, pos in positions.items()}
        for r in self.replacements:
            frag = frags.get(int(r.fragment_id))
            if frag is None:
                raise RetryableCommitConflictError(f"fragment {r.fragment_id} is not in version {head.version}", int(head.version))
            new = r.new_file.to_pb()
            same = [k for k, f in enumerate(frag.files) if list(f.fields) == list(new.fields)]
            if same:
                frag.files[same[0]].CopyFrom(new)
            elif any(set(f.fields) & set(new.fields) for f in frag.files):
                raise ValueError(f"fragment {r.fragment_id}: the new file's fields {list(new.fields)} overlap a data file partly")
            else:
                frag.files.append(new)
        sources, new_frags = _with_replaced(layout, positions, set(), frags)
        self.touched = new_frags
        return ManifestDraft(head, layout, sources, new_frags), base.index_section

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        version = int(winner.head.version)
        kind = self._classify(
            theirs,
            version,
            ok=("append", "create_index", "reserve_fragments", "clone", "update_config", "update_bases",
                "delete", "update", "rewrite", "data_replacement", "project"),
            retry=("merge",),
        )
        assert theirs is not None
        mine = {int(r.fragment_id) for r in self.replacements}
        if kind in ("rewrite", "update") and _touched_ids(theirs) & mine:
            raise self._retryable(kind, version)
        if kind == "data_replacement":
            # as pylance: only a replacement of the same fields of the same fragment conflicts
            fields = {int(r.fragment_id): {int(f) for f in r.new_file.to_pb().fields} for r in self.replacements}
            for g in theirs.data_replacement.replacements:
                if fields.get(int(g.fragment_id), set()) & {int(f) for f in g.new_file.fields}:
                    raise self._retryable(kind, version)
        if kind == "create_index" and _index_fields(theirs) & self.field_ids:
            raise self._retryable(kind, version)  # the new index covers data this replaces
        return False

    @property
    def field_ids(self) -> set[int]:
        """The field ids whose data this replacement changes."""
        return {int(f) for r in self.replacements for f in r.new_file.to_pb().fields if int(f) >= 0}


# --------------------------------------------------------------------------------------------
# UpdateConfig: table config, schema and field metadata


@dataclass
class UpdateMap:
    """Keys to set (a value) or remove (None); ``replace``: the map becomes exactly the set
    keys.  The ``Transaction.UpdateMap`` protobuf."""

    updates: dict[str, str | None]
    replace: bool = False

    def apply(self, current: Mapping[str, str]) -> dict[str, str]:
        out = {} if self.replace else dict(current)
        for k, v in self.updates.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    def fill(self, pb: Any) -> None:
        pb.SetInParent()
        for k, v in self.updates.items():
            entry = pb.update_entries.add(key=k)
            if v is not None:
                entry.value = v
        pb.replace = self.replace


def _update_map(value: UpdateMap | Mapping[str, str | None] | None) -> UpdateMap | None:
    if value is None or isinstance(value, UpdateMap):
        return value
    return UpdateMap(dict(value))


class UpdateConfig(Operation):
    """Change the table config, the table metadata, the schema metadata or fields' metadata
    (pylance 14's ``UpdateConfig`` with ``UpdateMap`` s; ``field_metadata_updates`` is keyed by
    field id).  Metadata only: no data file changes."""

    name = "update_config"

    def __init__(
        self,
        config_updates: UpdateMap | Mapping[str, str | None] | None = None,
        table_metadata_updates: UpdateMap | Mapping[str, str | None] | None = None,
        schema_metadata_updates: UpdateMap | Mapping[str, str | None] | None = None,
        field_metadata_updates: Mapping[int, UpdateMap | Mapping[str, str | None]] | None = None,
    ) -> None:
        self.config_updates = _update_map(config_updates)
        self.table_metadata_updates = _update_map(table_metadata_updates)
        self.schema_metadata_updates = _update_map(schema_metadata_updates)
        self.field_metadata_updates = {int(k): _update_map(v) for k, v in (field_metadata_updates or {}).items()}

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        u = txn.update_config
        u.SetInParent()
        if self.config_updates is not None:
            self.config_updates.fill(u.config_updates)
        if self.table_metadata_updates is not None:
            self.table_metadata_updates.fill(u.table_metadata_updates)
        if self.schema_metadata_updates is not None:
            self.schema_metadata_updates.fill(u.schema_metadata_updates)
        for fid, upd in self.field_metadata_updates.items():
            assert upd is not None
            upd.fill(u.field_metadata_updates[fid])

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        assert base is not None
        layout, m = _draft(base)

        def put(target: Any, values: Mapping[str, Any], encode: bool) -> None:
            target.clear()
            for k, v in values.items():
                target[k] = v.encode() if encode else v

        if self.config_updates is not None:
            put(m.config, self.config_updates.apply(dict(m.config)), False)
        if self.table_metadata_updates is not None:
            put(m.table_metadata, self.table_metadata_updates.apply(dict(m.table_metadata)), False)
        if self.schema_metadata_updates is not None:
            current = {k: bytes(v).decode("utf-8", "surrogateescape") for k, v in m.schema_metadata.items()}
            put(m.schema_metadata, self.schema_metadata_updates.apply(current), True)
        by_id = {int(f.id): f for f in m.fields}
        for fid, upd in self.field_metadata_updates.items():
            assert upd is not None
            field = by_id.get(fid)
            if field is None:
                raise RetryableCommitConflictError(f"field {fid} is not in version {m.version}", int(m.version))
            current = {k: bytes(v).decode("utf-8", "surrogateescape") for k, v in field.metadata.items()}
            put(field.metadata, upd.apply(current), True)
        flags = int(m.writer_feature_flags)
        m.writer_feature_flags = (flags | features.FLAG_TABLE_CONFIG) if m.config else flags
        self.touched = []
        return ManifestDraft.keeping(layout, m), base.index_section

    def _keys(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for name in ("config_updates", "table_metadata_updates", "schema_metadata_updates"):
            upd = getattr(self, name)
            if upd is not None:
                out[name] = {"*"} if upd.replace else set(upd.updates)
        for fid, upd in self.field_metadata_updates.items():
            assert upd is not None
            out[f"field:{fid}"] = {"*"} if upd.replace else set(upd.updates)
        return out

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        version = int(winner.head.version)
        kind = self._classify(
            theirs,
            version,
            ok=("append", "delete", "update", "rewrite", "create_index", "reserve_fragments", "data_replacement",
                "clone", "update_bases", "update_config", "merge", "project"),
            retry=(),
        )
        if kind != "update_config" or theirs is None:
            return False
        u = theirs.update_config
        maps = {
            "config_updates": u.config_updates if u.HasField("config_updates") else None,
            "table_metadata_updates": u.table_metadata_updates if u.HasField("table_metadata_updates") else None,
            "schema_metadata_updates": u.schema_metadata_updates if u.HasField("schema_metadata_updates") else None,
        }
        theirs_keys: dict[str, set[str]] = {}
        for name, pb in maps.items():
            if pb is not None:
                theirs_keys[name] = {"*"} if pb.replace else {e.key for e in pb.update_entries}
        for fid, pb in u.field_metadata_updates.items():
            theirs_keys[f"field:{fid}"] = {"*"} if pb.replace else {e.key for e in pb.update_entries}
        if u.upsert_values or u.delete_keys:
            theirs_keys.setdefault("config_updates", set()).update(set(u.upsert_values) | set(u.delete_keys))
        for name, mine in self._keys().items():
            other = theirs_keys.get(name, set())
            if other and ("*" in mine or "*" in other or mine & other):
                raise self._retryable(kind, version)
        return False


# --------------------------------------------------------------------------------------------
# CreateIndex


def _index_pb(index: Any) -> table_pb2.IndexMetadata:
    """An index entry as a protobuf (see :class:`CreateIndex`)."""
    if isinstance(index, table_pb2.IndexMetadata):
        return index
    pb = table_pb2.IndexMetadata(
        uuid=table_pb2.UUID(uuid=uuid.UUID(str(index.uuid)).bytes), name=str(index.name),
        fields=[int(f) for f in index.fields], dataset_version=int(index.dataset_version),
        index_version=int(index.index_version),
    )
    frags = getattr(index, "fragment_ids", None)
    if frags is not None:
        pb.fragment_bitmap = BitMap(int(i) for i in frags).serialize()
    created = getattr(index, "created_at", None)
    if created is not None:
        pb.created_at = int(created.timestamp() * 1000)
    if getattr(index, "base_id", None) is not None:
        pb.base_id = int(index.base_id)
    for f in getattr(index, "files", None) or ():
        pb.files.append(table_pb2.IndexFile(path=str(f.path), size_bytes=int(f.size_bytes)))
    details = getattr(index, "index_details", None)
    if details is not None:
        pb.index_details.type_url, pb.index_details.value = str(details[0]), bytes(details[1])
    return pb


class CreateIndex(Operation):
    """Add ``new_indices`` and remove ``removed_indices`` (``lance.table.IndexMetadata``
    protobufs) from the manifest's index section, as pylance's ``LanceOperation.CreateIndex``.

    Applied as pylance applies it: the base's entries lose those whose uuid is removed (a
    replaced index is removed by uuid; a delta segment adds an entry of an existing name);
    the new entries are appended.  Builders: :mod:`lance_gpu.write.indices` (scalar), vector indices likewise.

    Conflicts: committed on top of a concurrent append, delete, config change or index change
    of other names (the new entries cover the fragments they were built from; later ones are
    scanned); a concurrent rewrite, update, merge, data replacement or schema change, or an
    index change of the same name, makes it retryable; overwrite and restore are incompatible.
    """

    name = "create_index"

    def __init__(self, new_indices: Iterable[Any] = (), removed_indices: Iterable[Any] = ()) -> None:
        """Entries are ``lance.table.IndexMetadata`` protobufs or objects shaped as pylance's
        ``lance.dataset.Index`` (``uuid``, ``name``, ``fields``, ``dataset_version``,
        ``fragment_ids``, ``index_version``, ``created_at``, ``base_id``, ``files``,
        ``index_details`` = (type_url, bytes))."""
        self.new_indices: list[table_pb2.IndexMetadata] = [_index_pb(i) for i in new_indices]
        self.removed_indices: list[table_pb2.IndexMetadata] = [_index_pb(i) for i in removed_indices]

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.create_index.SetInParent()
        txn.create_index.new_indices.extend(self.new_indices)
        txn.create_index.removed_indices.extend(self.removed_indices)

    def apply(self, store: ObjectStore, root: str, base: ManifestFile | None, version: int) -> tuple[table_pb2.Manifest | ManifestDraft, table_pb2.IndexSection | None]:
        if base is None:
            raise ValueError("CreateIndex needs an existing dataset")
        layout, head = _draft(base)
        removed = {bytes(i.uuid.uuid) for i in self.removed_indices}
        out = table_pb2.IndexSection()
        if base.index_section is not None:
            for idx in base.index_section.indices:
                if bytes(idx.uuid.uuid) not in removed:
                    out.indices.append(idx)
        out.indices.extend(self.new_indices)
        self.touched = []
        return ManifestDraft.keeping(layout, head), out

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        version = int(winner.head.version)
        kind = self._classify(
            theirs, version,
            ok=("append", "delete", "create_index", "reserve_fragments", "update_config", "update_bases", "clone",
                "update_mem_wal_state", "data_replacement"),
            retry=("rewrite", "update", "merge", "project"),
        )
        if kind == "data_replacement" and theirs is not None:
            # as pylance: a replacement conflicts only when it changes a field this index covers
            replaced = {int(f) for g in theirs.data_replacement.replacements for f in g.new_file.fields if int(f) >= 0}
            if replaced & {int(f) for i in self.new_indices for f in i.fields}:
                raise self._retryable(kind, version)
        if kind == "create_index" and theirs is not None:
            mine = {i.name for i in self.new_indices} | {i.name for i in self.removed_indices}
            ci = theirs.create_index
            if mine & ({i.name for i in ci.new_indices} | {i.name for i in ci.removed_indices}):
                raise self._retryable(kind, version)
        return False


class LanceOperation:
    """pylance's namespace of operations: ``LanceOperation.Append(fragments)`` etc."""

    BaseOperation = Operation
    Overwrite = Overwrite
    Append = Append
    Delete = Delete
    Update = Update
    Merge = Merge
    Restore = Restore
    RewriteGroup = RewriteGroup
    RewrittenIndex = RewrittenIndex
    Rewrite = Rewrite
    Project = Project
    DataReplacementGroup = DataReplacementGroup
    DataReplacement = DataReplacement
    ReserveFragments = ReserveFragments
    UpdateConfig = UpdateConfig
    UpdateMap = UpdateMap
    CreateIndex = CreateIndex

