# SPDX-License-Identifier: Apache-2.0
"""Table operations beyond append / overwrite, each one committed transaction.

Every operation here is an :class:`Operation`: it fills its ``lance.table.Transaction``
oneof, builds the manifest contents on top of a base version (:meth:`Operation.apply`;
:func:`lance_gpu.write.commit.commit` stamps version, timestamp, writer, flags), and decides
what to do when another writer committed first (:meth:`Operation.rebase`), with pylance's
rules (``rust/lance/src/io/commit/conflict_resolver.rs``):

* compatible: the winner does not touch what we changed -- the manifest is rebuilt on top of
  the winner and the next version tried;
* rebased: two deletes of the same fragment whose rows do not overlap -- the deletion
  vectors are merged into a new deletion file (pylance does the same);
* :class:`~lance_gpu.errors.RetryableCommitConflictError`: the winner rewrote, deleted or
  changed the fragments we read (compaction, delete of the same rows, merge ...): re-running
  the operation on the new version may succeed (``delete`` does, ``conflict_retries`` times);
* :class:`~lance_gpu.errors.CommitConflictError`: the winner overwrote or restored the table,
  or its transaction cannot be read.

Nothing is ever silently lost: every path either merges both changes or raises.

Dataset-level entry points (used by :class:`lance_gpu.dataset.LanceDataset` methods):
:func:`delete`, :func:`restore`, :func:`drop_columns`, :func:`alter_columns`,
:func:`add_columns`.  Compaction lives in :mod:`lance_gpu.write.compaction`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu._proto import table_pb2, transaction_pb2
from lance_gpu.errors import (
    CommitConflictError,
    RetryableCommitConflictError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.table.deletion import read_deletion_file
from lance_gpu.table.manifest import ManifestFile, list_versions, read_manifest_file, resolve_manifest
from lance_gpu.table.schema import LanceField, LanceSchema
from lance_gpu.scan import ReadUnit, decode_fields, read_rows

if TYPE_CHECKING:  # pragma: no cover
    from lance_gpu.dataset import LanceDataset

__all__ = [
    "Operation",
    "DeleteOp",
    "RestoreOp",
    "ProjectOp",
    "MergeOp",
    "RewriteOp",
    "ReserveFragmentsOp",
    "delete",
    "restore",
    "drop_columns",
    "alter_columns",
    "add_columns",
]

_OFFSET = "__lance_gpu_row_offset__"
#: Fragments whose filter columns are decoded at once by ``delete``.
_DELETE_CHUNK = 16


# --------------------------------------------------------------------------------------------
# the operation protocol


class Operation:
    """One transaction the commit layer can commit and rebase (see the module docstring)."""

    #: ``Transaction.operation`` oneof name.
    name = ""

    def __init__(self) -> None:
        #: Files this operation wrote (removed by :meth:`cleanup` if the commit fails).
        self.written: list[str] = []

    @property
    def kind(self) -> str:  # error messages of the commit layer use ``op.kind``
        return self.name

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        raise NotImplementedError

    def apply(self, base: ManifestFile) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
        """A copy of ``base``'s manifest with this operation's changes (fragments, schema,
        indices); version, timestamp, writer, transaction file and flags are set by the caller."""
        raise NotImplementedError

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        """Check the committed ``theirs`` (version ``winner``) against this operation.

        Returns True if this operation's transaction changed (it must be written again),
        False if it can be committed unchanged on top of ``winner``; raises
        :class:`CommitConflictError` / :class:`RetryableCommitConflictError` otherwise.
        """
        raise NotImplementedError

    def cleanup(self, store: ObjectStore) -> None:
        """Remove the files this operation wrote (it will not be committed)."""
        from lance_gpu.write.dataset_writer import remove_quietly

        remove_quietly(store, self.written)
        self.written = []

    # -- helpers -------------------------------------------------------------------------

    def _incompatible(self, theirs_kind: str | None, version: int) -> CommitConflictError:
        return CommitConflictError(
            f"this {self.name} is incompatible with the concurrent {theirs_kind or 'unknown operation'} "
            f"committed as version {version}"
        )

    def _retryable(self, theirs_kind: str | None, version: int) -> RetryableCommitConflictError:
        return RetryableCommitConflictError(
            f"this {self.name} was preempted by the concurrent {theirs_kind} committed as version "
            f"{version}; re-run it on the latest version"
        )

    def _classify(
        self,
        theirs: transaction_pb2.Transaction | None,
        version: int,
        ok: Iterable[str],
        retry: Iterable[str],
    ) -> str:
        """The winner's operation name, if it is in ``ok`` or needs a closer look; raise for
        ``retry`` (retryable) and everything else (incompatible)."""
        if theirs is None:
            raise CommitConflictError(
                f"version {version} was committed by another writer whose transaction cannot be "
                f"read; this {self.name} cannot tell whether it conflicts"
            )
        kind = theirs.WhichOneof("operation")
        if kind in retry:
            raise self._retryable(kind, version)
        if kind in ok:
            return kind
        raise self._incompatible(kind, version)


def _copy_manifest(base: ManifestFile) -> table_pb2.Manifest:
    m = table_pb2.Manifest()
    m.CopyFrom(base.manifest)
    return m


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


def _retain_indices(
    section: table_pb2.IndexSection | None, schema: LanceSchema
) -> table_pb2.IndexSection | None:
    """Indices whose fields are all still in ``schema`` (as pylance's retain_relevant_indices)."""
    if section is None:
        return None
    ids = set(schema.by_id)
    out = table_pb2.IndexSection()
    for idx in section.indices:
        if all(int(f) in ids for f in idx.fields):
            out.indices.append(idx)
    return out


def _naming(ds: LanceDataset):
    return list_versions(ds.store, ds.root)[-1].naming


def _commit(ds: LanceDataset, op: Operation, base: ManifestFile | None = None) -> table_pb2.Manifest:
    """Commit ``op`` on top of ``base`` (default: the version ``ds`` is at); files the
    operation wrote are removed if the commit fails."""
    from lance_gpu.write.commit import commit

    try:
        return commit(ds.store, ds.root, op, base if base is not None else ds.manifest_file, _naming(ds))
    except BaseException:
        op.cleanup(ds.store)
        raise


# --------------------------------------------------------------------------------------------
# Delete


class DeleteOp(Operation):
    """``Transaction.delete``: new deletion files for ``updated`` fragments, ``deleted_ids``
    fragments whose rows are now all deleted, and the predicate (text)."""

    name = "delete"

    def __init__(
        self,
        initial: Mapping[int, table_pb2.DataFragment],
        affected: Mapping[int, np.ndarray],
        updated: Sequence[table_pb2.DataFragment],
        deleted_ids: Sequence[int],
        predicate: str,
    ) -> None:
        super().__init__()
        self.initial = dict(initial)  # the touched fragments as read
        self.affected = dict(affected)  # fragment id -> newly deleted offsets (sorted)
        self.updated = {int(f.id): f for f in updated}
        self.deleted_ids = [int(i) for i in deleted_ids]
        self.predicate = predicate
        self.read_version: int | None = None  # set by a rebase

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

    def apply(self, base: ManifestFile) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
        m = _copy_manifest(base)
        present = {int(f.id) for f in m.fragments}
        missing = sorted(self.modified_ids - present)
        if missing:
            raise RetryableCommitConflictError(
                f"fragments {missing} this delete changes are not in version {m.version}"
            )
        dropped = set(self.deleted_ids)
        frags = []
        for f in m.fragments:
            fid = int(f.id)
            if fid in dropped:
                continue
            frags.append(self.updated.get(fid, f))
        del m.fragments[:]
        m.fragments.extend(frags)
        return m, base.index_section

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        version = int(winner.manifest.version)
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
        if kind in ("rewrite", "data_replacement"):
            raise self._retryable(kind, version)
        # A concurrent delete / update of the same fragments: merge the deletion vectors if
        # only deletion files changed and the rows do not overlap (pylance's rebase).
        op = getattr(theirs, kind)
        removed = set(int(i) for i in (op.deleted_fragment_ids if kind == "delete" else op.removed_fragment_ids))
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
            theirs_rows = read_deletion_file(store, root, fid, now.deletion_file) if now.HasField("deletion_file") else np.zeros(0, np.uint32)
            ours = self.affected[fid]
            if np.intersect1d(theirs_rows, ours, assume_unique=True).size:
                raise RetryableCommitConflictError(
                    f"this delete and the concurrent {kind} committed as version {version} both "
                    f"deleted rows of fragment {fid}; re-run it on the latest version"
                )
            merged = np.union1d(theirs_rows, ours).astype(np.uint32)
            self._replace_deletions(store, root, fid, now, merged, version)
            changed = True
        if changed:
            self.read_version = version
        return changed

    def _replace_deletions(
        self, store: ObjectStore, root: str, fid: int, frag: table_pb2.DataFragment, rows: np.ndarray, read_version: int
    ) -> None:
        from lance_gpu.write.deletion_writer import write_deletion_file

        old = self.updated.pop(fid, None)
        if fid in self.deleted_ids:
            self.deleted_ids.remove(fid)
        if old is not None and old.HasField("deletion_file") and old.deletion_file != frag.deletion_file:
            # the file we wrote for this fragment is superseded; nothing points at it
            from lance_gpu.table.deletion import deletion_file_path

            path = deletion_file_path(store, root, fid, old.deletion_file)
            if path in self.written:
                self.written.remove(path)
                store.delete(path)
        if rows.size >= int(frag.physical_rows):
            self.deleted_ids.append(fid)
            return
        pb, path = write_deletion_file(store, root, fid, read_version, rows)
        self.written.append(path)
        new = table_pb2.DataFragment()
        new.CopyFrom(frag)
        new.deletion_file.CopyFrom(pb)
        self.updated[fid] = new


def plan_delete(ds: LanceDataset, predicate: str | pc.Expression) -> tuple[DeleteOp, int]:
    """Evaluate ``predicate`` on every live row of ``ds`` and write the new deletion files;
    returns the operation (not committed) and the number of newly deleted rows."""
    from lance_gpu.filter import parse_filter
    from lance_gpu.write.deletion_writer import write_deletion_file

    compiled = parse_filter(predicate, ds.schema)
    text = compiled.source if compiled.source is not None else str(predicate)
    top = {f.name: f for f in ds.lance_schema.fields}
    fields = [top[n] for n in compiled.columns if n in top]
    initial: dict[int, table_pb2.DataFragment] = {}
    affected: dict[int, np.ndarray] = {}
    updated: list[table_pb2.DataFragment] = []
    deleted_ids: list[int] = []
    total = 0
    op = DeleteOp({}, {}, [], [], text)
    try:
        for start in range(0, len(ds.fragments), _DELETE_CHUNK):
            chunk = ds.fragments[start : start + _DELETE_CHUNK]
            units = [ReadUnit(frag, frag.live_rows) for frag in chunk]
            for unit, table in zip(units, decode_fields(ds, units, fields)):
                frag, rows = unit.fragment, unit.rows
                offsets = np.arange(frag.physical_rows, dtype=np.uint32) if rows is None else rows.astype(np.uint32)
                table = table.append_column(_OFFSET, pa.array(offsets, pa.uint32()))
                hit = table.filter(compiled.expression).column(_OFFSET).to_numpy()
                if hit.size == 0:
                    continue
                hit = np.unique(hit.astype(np.uint32))
                total += int(hit.size)
                fid = frag.fragment_id
                initial[fid] = frag.pb
                affected[fid] = hit
                all_rows = np.union1d(frag.deleted_rows, hit).astype(np.uint32)
                if all_rows.size >= frag.physical_rows:
                    deleted_ids.append(fid)
                    continue
                pb, path = write_deletion_file(ds.store, ds.root, fid, ds.version, all_rows)
                op.written.append(path)
                new = table_pb2.DataFragment()
                new.CopyFrom(frag.pb)
                new.deletion_file.CopyFrom(pb)
                updated.append(new)
    except BaseException:
        op.cleanup(ds.store)
        raise
    op.initial = initial
    op.affected = affected
    op.updated = {int(f.id): f for f in updated}
    op.deleted_ids = deleted_ids
    return op, total


def delete(ds: LanceDataset, predicate: str | pc.Expression, *, conflict_retries: int = 10) -> dict[str, int]:
    """Delete the rows matching ``predicate``; commits one Delete transaction (even when no
    row matches, as pylance does) and moves ``ds`` to the new version.

    On a :class:`RetryableCommitConflictError` (a concurrent writer deleted the same rows,
    compacted or merged the fragments) the delete is re-run on the latest version, at most
    ``conflict_retries`` times, like pylance.  Returns ``{"num_deleted_rows": n}``.
    """
    from lance_gpu.dataset import LanceDataset

    target = ds
    for attempt in range(max(0, int(conflict_retries)) + 1):
        op, n = plan_delete(target, predicate)
        try:
            manifest = _commit(target, op)
        except RetryableCommitConflictError:
            if attempt >= conflict_retries:
                raise
            target = LanceDataset(ds.root, device=ds.device, storage_options=ds.storage_options, store=ds.store)
            continue
        ds.reload(int(manifest.version))
        return {"num_deleted_rows": n}
    raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------------------------
# Restore


class RestoreOp(Operation):
    """``Transaction.restore``: a new version whose contents are those of ``old``."""

    name = "restore"

    def __init__(self, old: ManifestFile) -> None:
        super().__init__()
        self.old = old

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.restore.version = int(self.old.manifest.version)

    def apply(self, base: ManifestFile) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
        m = table_pb2.Manifest()
        m.CopyFrom(self.old.manifest)
        bm = base.manifest
        # Fragment and row ids handed out since must never be handed out again.
        ids = [int(x.max_fragment_id) for x in (bm, m) if x.HasField("max_fragment_id")]
        ids += [int(f.id) for x in (bm, m) for f in x.fragments]
        if ids:
            m.max_fragment_id = max(ids)
        if m.next_row_id or bm.next_row_id:
            m.next_row_id = max(int(m.next_row_id), int(bm.next_row_id))
        return m, self.old.index_section

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        if theirs is not None and theirs.WhichOneof("operation") == "update_mem_wal_state":
            raise self._incompatible("update_mem_wal_state", int(winner.manifest.version))
        return False


def restore(ds: LanceDataset, version: int | str | None = None) -> None:
    """Commit a new version equal to ``version`` (default: the version ``ds`` is at, as
    pylance's ``restore()``); ``ds`` moves to the new version."""
    if version is None or version == ds.version:
        old = ds.manifest_file
    else:
        old = read_manifest_file(ds.store, resolve_manifest(ds.store, ds.root, version).path)
    latest = read_manifest_file(ds.store, list_versions(ds.store, ds.root)[-1].path)
    manifest = _commit(ds, RestoreOp(old), latest)
    ds.reload(int(manifest.version))


# --------------------------------------------------------------------------------------------
# Project: drop / rename columns


class ProjectOp(Operation):
    """``Transaction.project``: a new schema over the same data files (metadata only)."""

    name = "project"

    def __init__(self, schema: LanceSchema) -> None:
        super().__init__()
        self.schema = schema

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.project.SetInParent()
        txn.project.schema.extend(self.schema.to_protos())

    def apply(self, base: ManifestFile) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
        m = _copy_manifest(base)
        del m.fields[:]
        m.fields.extend(self.schema.to_protos())
        m.schema_metadata.clear()
        for k, v in self.schema.metadata.items():
            m.schema_metadata[k] = v
        keep = set(self.schema.by_id)
        for frag in m.fragments:
            # data files none of whose fields remain are no longer part of the fragment
            files = [f for f in frag.files if any(int(i) in keep for i in f.fields)]
            if len(files) != len(frag.files):
                del frag.files[:]
                frag.files.extend(files)
        return m, _retain_indices(base.index_section, self.schema)

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        self._classify(
            theirs,
            int(winner.manifest.version),
            ok=("append", "update", "delete", "update_config", "create_index", "data_replacement",
                "rewrite", "clone", "reserve_fragments", "update_bases"),
            retry=("merge", "project"),
        )
        return False


def _schema_without(schema: LanceSchema, drop_ids: set[int]) -> LanceSchema:
    def prune(f: LanceField) -> LanceField | None:
        if f.id in drop_ids:
            return None
        kids = [k for k in (prune(c) for c in f.children) if k is not None]
        return replace(f, children=kids) if len(kids) != len(f.children) else f

    fields = [k for k in (prune(f) for f in schema.fields) if k is not None]
    return LanceSchema(fields, schema.metadata, schema.source)


def drop_columns(ds: LanceDataset, columns: Sequence[str]) -> None:
    """Remove ``columns`` (top-level names or dotted paths of struct fields) from the schema;
    data files are kept (a data file none of whose fields remain leaves the fragment)."""
    if isinstance(columns, str):
        columns = [columns]
    schema = ds.lance_schema
    drop: set[int] = set()
    for name in columns:
        try:
            field = schema.field(name)
        except SchemaMismatchError:
            raise SchemaMismatchError(f"Column {name} does not exist in the dataset") from None
        drop |= {f.id for f in field.walk()}
    new = _schema_without(schema, drop)
    if not new.fields:
        raise ValueError("Cannot drop all columns from a dataset")
    for f in list(new.walk()):
        if f.logical_type == "struct" and not f.children:
            raise ValueError(f"cannot drop every field of struct {f.dotted_path!r}")
    manifest = _commit(ds, ProjectOp(new))
    ds.reload(int(manifest.version))


def _rebuild(fields: list[LanceField], prefix: tuple[str, ...] = ()) -> list[LanceField]:
    out = []
    for f in fields:
        path = (*prefix, f.name)
        out.append(replace(f, path=path, children=_rebuild(f.children, path)))
    return out


def alter_columns(ds: LanceDataset, *alterations: Mapping[str, Any]) -> None:
    """Rename columns and relax / tighten nullability, as pylance's ``alter_columns``:
    each alteration is ``{"path": "a.b", "name": "new"}`` and/or ``"nullable": bool``.
    Changing ``data_type`` (a data rewrite) is not supported.  One Project transaction."""
    if len(alterations) == 1 and isinstance(alterations[0], (list, tuple)):
        alterations = tuple(alterations[0])
    schema = ds.lance_schema
    changes: dict[int, dict[str, Any]] = {}
    for alt in alterations:
        if not isinstance(alt, Mapping) or "path" not in alt:
            raise TypeError("each alteration must be a dict with a 'path' key")
        unknown = set(alt) - {"path", "name", "nullable", "data_type"}
        if unknown:
            raise ValueError(f"unknown alteration keys {sorted(unknown)}")
        if alt.get("data_type") is not None:
            raise UnsupportedFeatureError("alter_columns: changing a column's data_type is not supported")
        try:
            field = schema.field(alt["path"])
        except SchemaMismatchError:
            raise SchemaMismatchError(f'Column "{alt["path"]}" does not exist in the dataset') from None
        change = changes.setdefault(field.id, {})
        if alt.get("name") is not None:
            change["name"] = str(alt["name"])
        if alt.get("nullable") is not None:
            nullable = bool(alt["nullable"])
            if not nullable and field.nullable:
                nulls = ds.to_table(columns=[field.dotted_path]).column(0).null_count
                if nulls:
                    raise ValueError(f"column {field.dotted_path!r} holds {nulls} nulls and cannot be made non-nullable")
            change["nullable"] = nullable

    def edit(f: LanceField) -> LanceField:
        kids = [edit(c) for c in f.children]
        return replace(f, children=kids, **changes.get(f.id, {}))

    fields = _rebuild([edit(f) for f in schema.fields])
    for level in [fields] + [f.children for f in LanceSchema(fields).walk()]:
        names = [f.name for f in level]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"Duplicate field name {sorted(dup)[0]!r} in schema")
    new = LanceSchema(fields, schema.metadata, schema.source)
    manifest = _commit(ds, ProjectOp(new))
    ds.reload(int(manifest.version))


# --------------------------------------------------------------------------------------------
# Merge: add columns


class MergeOp(Operation):
    """``Transaction.merge``: every fragment (with its new data files) and the new schema."""

    name = "merge"

    def __init__(self, fragments: Sequence[table_pb2.DataFragment], schema: LanceSchema) -> None:
        super().__init__()
        self.fragments = list(fragments)
        self.schema = schema

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.merge.SetInParent()
        txn.merge.fragments.extend(self.fragments)
        txn.merge.schema.extend(self.schema.to_protos())
        for k, v in self.schema.metadata.items():
            txn.merge.schema_metadata[k] = v

    def apply(self, base: ManifestFile) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
        m = _copy_manifest(base)
        del m.fields[:]
        m.fields.extend(self.schema.to_protos())
        m.schema_metadata.clear()
        for k, v in self.schema.metadata.items():
            m.schema_metadata[k] = v
        del m.fragments[:]
        m.fragments.extend(sorted(self.fragments, key=lambda f: int(f.id)))
        return m, _retain_indices(base.index_section, self.schema)

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        self._classify(
            theirs,
            int(winner.manifest.version),
            ok=("create_index", "reserve_fragments", "clone", "update_config", "update_bases"),
            retry=("update", "append", "delete", "rewrite", "merge", "data_replacement"),
        )
        return False


def _next_field_id(ds: LanceDataset) -> int:
    """pylance's: one past the largest id in the schema or in any data file's field list
    (dropped fields keep their ids in data files, so they are never reused)."""
    ids = [ds.lance_schema.max_field_id]
    for frag in ds.manifest.fragments:
        for f in frag.files:
            ids.extend(int(i) for i in f.fields)
    return max(ids, default=-1) + 1


def _physical(values: pa.Table, live: np.ndarray | None, physical_rows: int, schema: pa.Schema) -> pa.Table:
    """``values`` (one row per live row) spread over all physical rows of a fragment;
    deleted rows get nulls (or, for non-nullable fields, a copy of a live row's value)."""
    if live is None:
        return values
    pos = np.full(physical_rows, -1, np.int64)
    pos[live] = np.arange(live.size)
    cols = []
    for f, col in zip(schema, values.columns):
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if f.nullable:
            idx = pa.array(pos, mask=pos < 0)
        else:
            idx = pa.array(np.where(pos < 0, 0, pos))
        cols.append(col.take(idx))
    return pa.Table.from_arrays(cols, schema=schema)


def _compile_sql_columns(ds: LanceDataset, exprs: Mapping[str, str]) -> tuple[list[str], Callable[[pa.RecordBatch], pa.Table]]:
    """Columns to read and a batch function for ``{"name": "sql expression"}``."""
    from lance_gpu import filter as lf

    compiled: dict[str, pc.Expression] = {}
    read: list[str] = []
    for name, text in exprs.items():
        if not isinstance(text, str):
            raise TypeError(f"add_columns: the expression of {name!r} must be a SQL string")
        ir = lf._resolve(lf._Builder(ds.schema, text).build(lf._parse_sql(text)), text)
        compiled[name] = lf._Compiler(text).compile(ir).expr
        read += [c for c in lf._collect_columns(ir, ds.schema) if c not in read]

    def run(batch: pa.RecordBatch) -> pa.Table:
        import pyarrow.dataset as pds

        return pds.dataset(pa.Table.from_batches([batch])).to_table(columns=compiled)

    return read, run


def _read_rows(ds: LanceDataset, frag: Any, rows: np.ndarray, columns: Sequence[str] | None) -> pa.Table:
    """``columns`` (default: all) of the given physical rows (sorted) of one fragment."""
    return read_rows(ds, frag, np.asarray(rows, np.int64), columns)


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    if table.num_columns == 0:
        return pa.RecordBatch.from_pydict({}).slice(0, 0) if table.num_rows == 0 else pa.record_batch(
            [pa.nulls(table.num_rows)], names=["_"]).drop_columns(["_"])
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


def _as_table(out: Any) -> pa.Table:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover
        pd = None
    if pd is not None and isinstance(out, pd.DataFrame):
        return pa.Table.from_pandas(out, preserve_index=False)
    if isinstance(out, pa.RecordBatch):
        return pa.Table.from_batches([out])
    if isinstance(out, pa.Table):
        return out
    raise TypeError(f"add_columns: the function must return a pyarrow RecordBatch or Table, not {type(out).__name__}")


def add_columns(
    ds: LanceDataset,
    transforms: Any,
    read_columns: Sequence[str] | None = None,
    reader_schema: pa.Schema | None = None,
    batch_size: int | None = None,
) -> None:
    """Add columns, as pylance's ``add_columns``; one Merge transaction.

    ``transforms``:

    * a pyarrow Table / RecordBatch / RecordBatchReader (or an iterable of batches, a pandas
      DataFrame): the new columns' values, one row per live row of the dataset, in the
      dataset's order (fragment by fragment);
    * a callable taking a RecordBatch of ``read_columns`` (default: every column) of live
      rows and returning a RecordBatch / Table / DataFrame of new columns, row for row;
    * ``{"name": "sql expression"}`` of existing columns;
    * a ``pyarrow.Field``, list of fields or ``Schema``: all-null columns, metadata only (no
      data file is written; readers see nulls where a fragment has no file for a field).

    Each fragment gets one new data file holding the new leaf fields (ids after every id in
    use); rows deleted in the fragment are stored as nulls.
    """
    from lance_gpu.write.commit import check_appendable
    from lance_gpu.write.dataset_writer import _as_batches, _check_types, _data_file

    if isinstance(transforms, pa.Field):
        transforms = [transforms]
    if isinstance(transforms, list) and transforms and all(isinstance(t, pa.Field) for t in transforms):
        transforms = pa.schema(transforms)
    base = ds.manifest_file
    check_appendable(base)
    minor = int(ds.manifest.data_format.version.split(".")[1])
    start_id = _next_field_id(ds)
    existing = set(ds.schema.names)

    def new_schema(arrow: pa.Schema) -> LanceSchema:
        dup = [n for n in arrow.names if n in existing]
        if dup:
            raise SchemaMismatchError(f"Column {dup[0]} already exists in the dataset")
        if len(set(arrow.names)) != len(arrow.names):
            raise SchemaMismatchError(f"duplicate new column names {arrow.names}")
        lance_new = LanceSchema.from_arrow(arrow, start_id=start_id)
        _check_types(lance_new, minor)
        return lance_new

    def merged_schema(lance_new: LanceSchema) -> LanceSchema:
        return LanceSchema(list(ds.lance_schema.fields) + list(lance_new.fields), ds.lance_schema.metadata)

    if isinstance(transforms, pa.Schema):
        lance_new = new_schema(transforms)
        op = MergeOp([f.pb for f in ds.fragments], merged_schema(lance_new))
        manifest = _commit(ds, op)
        ds.reload(int(manifest.version))
        return

    fn: Callable[[pa.RecordBatch], pa.Table] | None = None
    source = None
    if isinstance(transforms, Mapping):
        read_columns, fn = _compile_sql_columns(ds, transforms)
    elif callable(transforms) and not isinstance(transforms, (pa.RecordBatchReader, pa.Table, pa.RecordBatch)):
        udf = transforms

        def call_udf(batch: pa.RecordBatch) -> pa.Table:
            return _as_table(udf(batch))

        fn = call_udf
    else:
        _schema, source = _as_batches(transforms, reader_schema)
    batch_size = int(batch_size or 8192)

    frags_out: list[table_pb2.DataFragment] = []
    op = MergeOp([], LanceSchema([]))
    data_dir = join(ds.root, "data")
    lance_new: LanceSchema | None = None
    arrow_new: pa.Schema | None = None
    pending: list[pa.RecordBatch] = []  # rows of ``source`` not yet used

    def take_rows(n: int) -> pa.Table:
        got = sum(b.num_rows for b in pending)
        while got < n:
            try:
                b = next(source)
            except StopIteration:
                raise ValueError("Stream ended before producing values for all rows in dataset") from None
            if b.num_rows:
                pending.append(b)
                got += b.num_rows
        t = pa.Table.from_batches(pending) if pending else None
        head = t.slice(0, n)
        rest = t.slice(n)
        pending[:] = rest.to_batches() if rest.num_rows else []
        return head

    try:
        from lance_gpu.write.file_writer import LanceFileWriter

        for frag in ds.fragments:
            live = frag.live_rows
            n_live = frag.count_rows()
            if fn is not None:
                parts = []
                for start in range(0, n_live, batch_size):
                    rows = (np.arange(start, min(n_live, start + batch_size)) if live is None else live[start : start + batch_size])
                    cols = _read_rows(ds, frag, rows, read_columns)
                    out = fn(_one_batch(cols))
                    if out.num_rows != len(rows):
                        raise ValueError(f"add_columns: the function returned {out.num_rows} rows for a batch of {len(rows)}")
                    parts.append(out)
                values = pa.concat_tables(parts) if parts else None
            else:
                values = take_rows(n_live)
            if lance_new is None:
                assert values is not None
                arrow_new = values.schema
                lance_new = new_schema(arrow_new)
                arrow_new = lance_new.to_arrow(physical=True)
            assert arrow_new is not None
            if values is None:
                values = arrow_new.empty_table()
            try:
                values = values.select(arrow_new.names).cast(arrow_new)
            except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
                raise SchemaMismatchError(f"add_columns: new values do not match their first batch's schema: {exc}") from exc
            values = _physical(values, live, frag.physical_rows, arrow_new)
            name = f"{uuid.uuid4().hex}.lance"
            path = join(data_dir, name)
            op.written.append(path)
            writer = LanceFileWriter(path, lance_new, minor, store=ds.store)
            try:
                writer.write(values)
                size = writer.finish()
            except BaseException:
                writer.abort()
                raise
            new = table_pb2.DataFragment()
            new.CopyFrom(frag.pb)
            new.files.append(_data_file(name, lance_new, minor, size))
            frags_out.append(new)
        if source is not None and (pending or next(source, None) is not None):
            raise ValueError("add_columns: the new values have more rows than the dataset")
        if lance_new is None:  # a dataset without fragments
            if source is not None:
                lance_new = new_schema(_schema)
            else:
                raise ValueError("add_columns: cannot infer the new columns of an empty dataset from a function")
    except BaseException:
        op.cleanup(ds.store)
        raise
    op.fragments = frags_out
    op.schema = merged_schema(lance_new)
    manifest = _commit(ds, op)
    ds.reload(int(manifest.version))


# --------------------------------------------------------------------------------------------
# Rewrite and ReserveFragments (used by compaction)


class ReserveFragmentsOp(Operation):
    """``Transaction.reserve_fragments``: raise ``max_fragment_id`` by ``n``."""

    name = "reserve_fragments"

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = int(n)

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.reserve_fragments.num_fragments = self.n

    def apply(self, base: ManifestFile) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
        m = _copy_manifest(base)
        current = max([int(m.max_fragment_id)] + [int(f.id) for f in m.fragments]) if (
            m.HasField("max_fragment_id") or m.fragments) else 0
        m.max_fragment_id = current + self.n
        return m, base.index_section

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        if theirs is not None and theirs.WhichOneof("operation") in ("overwrite", "restore"):
            raise self._incompatible(theirs.WhichOneof("operation"), int(winner.manifest.version))
        return False


class RewriteOp(Operation):
    """``Transaction.rewrite``: groups of old fragments replaced by new ones (ids assigned).

    Indices (see :mod:`lance_gpu.write.index_remap`): ``rewritten`` lists the indices whose
    remapped copies were written (old index, new uuid, new files); their manifest entries get
    the new uuid and files, and their fragment bitmaps swap each rewritten group's old
    fragment ids for its new ones.  Other indices cover none of the rewritten fragments.
    """

    name = "rewrite"

    def __init__(self, groups: Sequence[tuple[list[table_pb2.DataFragment], list[table_pb2.DataFragment]]]) -> None:
        super().__init__()
        self.groups = [(list(o), list(n)) for o, n in groups]
        #: (old index, new uuid bytes, new files) per remapped index
        self.rewritten: list[tuple[table_pb2.IndexMetadata, bytes, list[table_pb2.IndexFile]]] = []

    @property
    def old_ids(self) -> set[int]:
        return {int(f.id) for old, _new in self.groups for f in old}

    def fill(self, txn: transaction_pb2.Transaction) -> None:
        txn.rewrite.SetInParent()
        for old, new in self.groups:
            g = txn.rewrite.groups.add()
            g.old_fragments.extend(old)
            g.new_fragments.extend(new)
        for index, new_uuid, _files in self.rewritten:
            r = txn.rewrite.rewritten_indices.add()
            r.old_id.CopyFrom(index.uuid)
            r.new_id.uuid = new_uuid
            r.new_index_details.CopyFrom(index.index_details)
            r.new_index_version = int(index.index_version)

    def _indices(self, section: table_pb2.IndexSection | None, version: int) -> table_pb2.IndexSection | None:
        from lance_gpu.write.index_remap import fragment_bitmap, recalculate_fragment_bitmap

        if section is None:
            if self.rewritten:
                raise RetryableCommitConflictError(f"the indices this compaction remapped are gone in version {version}")
            return None
        out = table_pb2.IndexSection()
        out.CopyFrom(section)
        remapped = {bytes(index.uuid.uuid): (new_uuid, files) for index, new_uuid, files in self.rewritten}
        found = set()
        for idx in out.indices:
            key = bytes(idx.uuid.uuid)
            if key not in remapped:
                continue
            new_uuid, files = remapped[key]
            idx.uuid.uuid = new_uuid
            del idx.files[:]
            idx.files.extend(files)
            found.add(key)
            bitmap = fragment_bitmap(idx)
            if bitmap is not None:
                idx.fragment_bitmap = recalculate_fragment_bitmap(bitmap, self.groups).serialize()
        if found != set(remapped):
            raise RetryableCommitConflictError(f"an index this compaction remapped changed in version {version}")
        return out

    def apply(self, base: ManifestFile) -> tuple[table_pb2.Manifest, table_pb2.IndexSection | None]:
        m = _copy_manifest(base)
        frags = list(m.fragments)
        for old, new in self.groups:
            current = {int(f.id): f for f in frags}
            for f in old:
                now = current.get(int(f.id))
                if now is None or now != f:
                    raise RetryableCommitConflictError(
                        f"fragment {f.id} this compaction rewrote changed in version {m.version}"
                    )
            ids = [int(f.id) for f in old]
            pos = [k for k, f in enumerate(frags) if int(f.id) in ids]
            contiguous = pos == list(range(pos[0], pos[0] + len(pos))) and [int(frags[k].id) for k in pos] == ids
            if contiguous:
                frags[pos[0] : pos[0] + len(pos)] = new
            else:
                frags = [f for f in frags if int(f.id) not in ids] + list(new)
        frags.sort(key=lambda f: int(f.id))
        del m.fragments[:]
        m.fragments.extend(frags)
        return m, self._indices(base.index_section, int(m.version))

    def cleanup(self, store: ObjectStore) -> None:
        from lance_gpu.write.dataset_writer import remove_quietly

        remove_quietly(store, self.written)  # data files, remapped index files
        self.written = []

    def rebase(self, store: ObjectStore, root: str, winner: ManifestFile, theirs: transaction_pb2.Transaction | None) -> bool:
        version = int(winner.manifest.version)
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
