# SPDX-License-Identifier: Apache-2.0
"""The one commit: an :class:`~lance_gpu.txn.operations.Operation` becomes a new version.

Protocol (pylance's, on any store with put-if-absent; the byte-level steps live in
:mod:`lance_gpu.txn.publish`):

1. Data files are written first; nothing points at them yet.  Writers may publish them
   unsynced: every data and deletion file the new manifest adds is made durable with the
   store's ``sync`` (locally: fsync, several at once) before the manifest is put, so a
   committed manifest never names a file that a crash could leave incomplete.
2. The ``lance.table.Transaction`` is written to ``_transactions/{read_version}-{uuid}.txn``
   unless the dataset sets writer flag 32 (no transaction files), unsynced: the manifest
   carries the same transaction inline (its transaction section), which readers take
   first -- ours (:func:`~lance_gpu.txn.publish.winner_transaction`) and pylance's, which
   reads every version's transaction, and resolves conflicts against it, with the ``.txn``
   files emptied or gone.  So a crash that loses the file's bytes loses nothing a reader
   needs, and the file costs the commit no fsync.  It is written in the background
   (:func:`~lance_gpu.io.background.in_background`) while the manifest is built, staged and
   synced, and has landed before the manifest naming it is published.
3. The manifest of version ``read_version + 1`` is ``op.apply`` on top of the version read,
   published with the store's *put-if-absent* (a hard link locally, a conditional PUT on
   object stores; ``ObjectExistsError``, a ``FileExistsError``: another writer took the
   version).  Stores without conditional writes are refused before anything is written,
   unless ``lock`` is given: the manifest is then checked for and put under that lock.
4. On a conflict every version committed since is checked in order with ``op.rebase``:
   compatible winners are built upon, rebased transactions are written again; a retryable or
   incompatible winner raises.  Compatible winners never use up a retry budget, so a writer
   1,000 versions behind commits when nothing conflicts.
5. ``_versions/latest_version_hint.json`` is updated (only a hint, not synced, locally rewritten
   in place; readers check it: :func:`~lance_gpu.table.manifest.latest_version`).

A commit's requests and fsyncs do not grow with the history: the version read is found from
the hint (one read, two existence checks), nothing lists ``_versions/``, and the files the
manifest adds (data and deletion files) are synced in one parallel round with the manifest's
own staging copy, before it is linked to its name; the transaction file and the hint are not
synced.  Nor does its CPU
grow much: an operation returns a :class:`~lance_gpu.table.manifest_bytes.ManifestDraft`
(the base's fields, its untouched fragment entries kept as the base's bytes, the new ones
encoded alone), the new manifest is one join of bytes, and the version committed is the
bytes written (:class:`~lance_gpu.table.manifest.ManifestFile` parses its fragments only if
asked for them).

A new dataset (``base=None``) whose version 1 was taken by another writer raises
:class:`~lance_gpu.errors.DatasetExistsError` when ``mode="create"`` was asked for.

:func:`run_with_retries` re-plans an operation on the latest version after a
:class:`~lance_gpu.errors.RetryableCommitConflictError`, as pylance's row-level operations
do (``conflict_retries`` real conflicts, default 10).
"""

from __future__ import annotations

import secrets
import uuid as _uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, TypeVar

from lance_gpu._commit_hooks import POST_COMMIT_HOOKS
from lance_gpu._proto import table_pb2, transaction_pb2
from lance_gpu.errors import CommitLockError, DatasetExistsError, DatasetNotFoundError, RetryableCommitConflictError
from lance_gpu.io.background import in_background, settle
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.table import features
from lance_gpu.table.deletion import deletion_file_path
from lance_gpu.table.manifest import (
    DETACHED_VERSION_MASK,
    ManifestFile,
    NamingScheme,
    detached_manifest_name,
    list_versions,
    manifest_file_name,
    manifest_message_bytes,
    read_manifest_file,
    read_version_hint,
    remember_manifest,
)
from lance_gpu.table.manifest_bytes import ManifestDraft
from lance_gpu.txn.legacy_dictionaries import check_no_mixing, dictionary_prefix, needs_dictionaries
from lance_gpu.txn.operations import Operation
from lance_gpu.txn.publish import (
    SUPPORTED_WRITER_FLAGS,
    check_commit_store,
    discard_staged,
    publish_manifest,
    serialize_draft,
    serialize_manifest,
    stage_manifest,
    stamp_manifest,
    winner_transaction,
    write_transaction_file,
    write_version_hint,
)

__all__ = ["DEFAULT_CONFLICT_RETRIES", "commit", "commit_file", "run_with_retries"]

DEFAULT_CONFLICT_RETRIES = 10
T = TypeVar("T")




def _transaction(
    op: Operation, read_version: int, txn_uuid: str, properties: dict[str, str] | None
) -> transaction_pb2.Transaction:
    txn = transaction_pb2.Transaction(read_version=read_version, uuid=txn_uuid)
    for k, v in (properties or {}).items():
        txn.transaction_properties[str(k)] = str(v)
    op.fill(txn)
    return txn


def _finish_manifest(
    m: table_pb2.Manifest, base: ManifestFile | None, version: int, txn_file: str,
    touched: list[table_pb2.DataFragment] | None = None, draft: ManifestDraft | None = None,
) -> table_pb2.Manifest:
    """What every commit sets: derived sections cleared, the deletion-files flags exactly when
    some fragment has a deletion file (pylance's ``apply_feature_flags``), a
    ``max_fragment_id`` that never goes down, version, time, writer, transaction file.

    ``touched`` (:attr:`Operation.touched`): the entries of ``m`` that are not ``base``'s;
    where given, ``base``'s flags and ``max_fragment_id`` (vetted when it was read) stand
    for the untouched entries, so no loop runs over every fragment.
    (With a ``draft``, ``m`` is its head: the fragments are the draft's.)"""
    for name in (
        "tag", "version_aux_data", "transaction_section_deprecated", "index_section",
        "transaction_section", "writer_version",
    ):
        m.ClearField(name)
    base_has = base is not None and bool(base.head.writer_feature_flags & features.FLAG_DELETION_FILES)
    if touched is not None and base is not None and not base_has:
        # no base fragment has a deletion file: only the touched entries can
        has_deletions = any(f.HasField("deletion_file") for f in touched)
    elif draft is not None:
        has_deletions = draft.has_deletions()
    else:
        has_deletions = any(f.HasField("deletion_file") for f in m.fragments)
    for name in ("reader_feature_flags", "writer_feature_flags"):
        flags = int(getattr(m, name)) & ~features.FLAG_DELETION_FILES
        setattr(m, name, flags | (features.FLAG_DELETION_FILES if has_deletions else 0))
    if touched is not None and base is not None and base.fragment_id_bound is not None:
        # the untouched entries are the base's: at or below its (vetted) bound
        ids = [int(f.id) for f in touched] + [base.fragment_id_bound]
    elif draft is not None:
        ids = [draft.max_id()]
    else:
        ids = [int(f.id) for f in m.fragments]
    if m.HasField("max_fragment_id"):
        ids.append(int(m.max_fragment_id))
    if base is not None and base.head.HasField("max_fragment_id"):
        ids.append(int(base.head.max_fragment_id))
    if base is not None and base.fragment_id_bound is not None:
        ids.append(base.fragment_id_bound)
    if ids and max(ids) >= 0:
        m.max_fragment_id = max(ids)
    stamp_manifest(m, version, txn_file)
    return m


def _added_files(store: ObjectStore, root: str, manifest: table_pb2.Manifest,
                 base_file: ManifestFile | None,
                 touched: list[table_pb2.DataFragment] | None = None,
                 draft: ManifestDraft | None = None) -> list[str]:
    """Keys of the data and deletion files ``manifest`` names that ``base`` does not (files
    under another base path are left to their writer).  Compared by the names the manifests
    hold; keys are built for the new files only.  Where the operation says which entries it
    ``touched`` (:attr:`Operation.touched`: the others are ``base``'s), only those are
    looked at; a ``draft`` names the base entries they replace (``manifest`` is its head)."""
    def data_files(m: table_pb2.Manifest | None) -> set[str]:
        if m is None:
            return set()
        return {df.path for frag in m.fragments for df in frag.files if not df.HasField("base_id")}

    def deletion_files(m: table_pb2.Manifest | None) -> dict[tuple[int, bytes], table_pb2.DataFragment]:
        if m is None:
            return {}
        return {
            (frag.id, frag.deletion_file.SerializeToString()): frag
            for frag in m.fragments
            if frag.HasField("deletion_file") and not frag.deletion_file.HasField("base_id")
        }

    data_dir = join(root, "data")
    if touched is not None and base_file is not None:
        # the touched entries against the base entries they replace (same id), if any
        if draft is not None:
            # (ids above the base's bound are new: no base entry to look up)
            bound = base_file.fragment_id_bound
            replaced = draft.replaced([int(f.id) for f in touched if bound is None or int(f.id) <= bound])
        else:
            base_head = base_file.head
            ids = {int(f.id) for f in touched}
            if base_head.HasField("max_fragment_id"):
                ids = {i for i in ids if i <= int(base_head.max_fragment_id)}
            replaced = {int(f.id): f for f in base_file.manifest.fragments if int(f.id) in ids} if ids else {}
        keys: set[str] = set()
        for frag in touched:
            prev = replaced.get(int(frag.id))
            had = {df.path for df in prev.files} if prev is not None else set()
            keys.update(join(data_dir, df.path) for df in frag.files if not df.HasField("base_id") and df.path not in had)
            if frag.HasField("deletion_file") and not frag.deletion_file.HasField("base_id") and (
                prev is None or not prev.HasField("deletion_file") or prev.deletion_file != frag.deletion_file
            ):
                keys.add(deletion_file_path(store, root, int(frag.id), frag.deletion_file))
        return sorted(keys)
    base = base_file.manifest if base_file is not None else None
    out = [join(data_dir, name) for name in data_files(manifest) - data_files(base)]
    theirs = deletion_files(base)
    out.extend(
        deletion_file_path(store, root, int(frag.id), frag.deletion_file)
        for key, frag in deletion_files(manifest).items()
        if key not in theirs
    )
    return sorted(out)


def _committed_since(store: ObjectStore, root: str, version: int, naming: NamingScheme) -> Iterator[ManifestFile]:
    """The manifests of ``version``, ``version + 1``, ... up to the first that does not exist
    (one read each, no listing: a writer lost ``version`` to the first of them).  A missing
    ``version`` itself (a manifest named in the other scheme) lists ``_versions/``."""
    v = version
    while True:
        key = join(root, "_versions", manifest_file_name(v, naming))
        try:
            yield read_manifest_file(store, key)
        except DatasetNotFoundError:
            if v == version:  # someone else's naming: fall back to the listing
                for info in list_versions(store, root):
                    if info.version >= version:
                        yield read_manifest_file(store, info.path)
            return
        v += 1


def _hinted_past(store: ObjectStore, root: str, version: int) -> bool:
    """Whether the version hint names a version at or after ``version``: versions were
    committed since the base although ``version`` itself is free (cleaned up), so putting
    it would publish a manifest below the latest (pylance commits after the latest)."""
    hint = read_version_hint(store, root)
    return hint is not None and hint >= version


def _detached_version() -> int:
    return secrets.randbits(63) | DETACHED_VERSION_MASK


def commit(
    store: ObjectStore,
    root: str,
    op: Operation,
    base: ManifestFile | None,
    naming: NamingScheme = "V2",
    *,
    mode: str | None = None,
    transaction_properties: dict[str, str] | None = None,
    lock: Callable[[int], AbstractContextManager[Any]] | None = None,
    detached: bool = False,
) -> table_pb2.Manifest:
    """Commit ``op`` on top of ``base``; returns the committed manifest (see
    :func:`commit_file`, which returns the whole committed manifest file)."""
    return commit_file(store, root, op, base, naming, mode=mode, transaction_properties=transaction_properties,
                       lock=lock, detached=detached).manifest


def commit_file(
    store: ObjectStore,
    root: str,
    op: Operation,
    base: ManifestFile | None,
    naming: NamingScheme = "V2",
    *,
    mode: str | None = None,
    transaction_properties: dict[str, str] | None = None,
    lock: Callable[[int], AbstractContextManager[Any]] | None = None,
    detached: bool = False,
    known_since: Sequence[ManifestFile] = (),
    base_from_hint: bool = False,
) -> ManifestFile:
    """Commit ``op`` on top of ``base`` (the version the writer read; None: a new dataset)
    in the dataset at ``root`` of ``store``.

    Returns the committed manifest file (what reading it back would give: a snapshot of the
    new version is built from it without a request).  Raises :class:`CommitConflictError` (or its retryable
    subclass) when another writer committed a conflicting change first, and
    :class:`DatasetExistsError` when ``mode="create"`` lost the race to create the dataset.
    ``lock(version)`` (pylance's ``commit_lock``), when given, is entered around each attempt
    to publish a version; it also makes a store without conditional writes usable (the
    manifest is then checked for, and put, under the lock).
    Files ``op`` wrote are removed when the commit fails.

    ``detached=True`` (pylance's detached commit) publishes the new manifest as
    ``_versions/d{version}.manifest`` with a random version that has bit 63 set: it never
    becomes the latest version, conflicts with nothing (another random version is drawn if
    the name is taken) and leaves the version hint alone.

    ``known_since``: versions committed on top of ``base``, in order, that the caller knows
    of (its own: a compaction's ReserveFragments commit): ``op`` is rebased on them before
    the first attempt, as it would be after losing their versions, without trying those
    versions first (the transaction still names ``base`` as the version read, as pylance's).

    ``base_from_hint``: ``base`` was just found as the latest version through the version
    hint (:func:`~lance_gpu.txn.publish.latest`, by the caller, moments before): the first
    attempt does not read the hint again (:func:`_hinted_past`, which guards a base read
    long ago against publishing below versions committed since and cleaned up).
    """

    if lock is None:
        lock = DEFAULT_COMMIT_LOCK.get()
    txn_key: str | None = None  # the transaction file written, until a manifest names it
    # its write, in the background while the manifest is built, staged and synced; it
    # has landed before a manifest names it
    txn_writing: Future[None] | None = None
    staged: object = None  # the manifest's staging file, until a publish consumes it
    try:
        check_commit_store(store, root, locked=lock is not None)
        read_version = int(base.head.version) if base is not None else 0
        if base is not None:
            features.check_writer_flags(base.head.writer_feature_flags, base.path, SUPPORTED_WRITER_FLAGS)
        txn_uuid = str(_uuid.uuid4())
        txn_name = f"{read_version}-{txn_uuid}.txn"
        txn = _transaction(op, read_version, txn_uuid, transaction_properties)
        skip_txn_file = base is not None and bool(
            base.head.writer_feature_flags & features.FLAG_DISABLE_TRANSACTION_FILE
        )
        tdir = join(root, "_transactions")
        current = base
        version = read_version + 1 if not detached else _detached_version()

        def build_upon(winner: ManifestFile) -> None:
            """Rebase ``op`` on ``winner`` (raising if it conflicts); the next attempt
            publishes the version after it."""
            nonlocal txn, txn_name, txn_key, txn_writing, current, version
            theirs = winner_transaction(store, root, winner)
            if op.rebase(store, root, winner, theirs):
                old_name = txn_name
                txn = _transaction(op, read_version, txn_uuid, transaction_properties)
                txn_name = f"{txn.read_version}-{txn_uuid}.txn"
                if txn_key is not None:  # written already: written again
                    settle(txn_writing)  # (a failed write is written again)
                    txn_key = join(tdir, txn_name)
                    txn_writing = in_background(write_transaction_file, store, txn_key, txn, sync=False)
                    try:
                        store.delete(join(tdir, old_name))
                    except OSError:
                        pass
            features.check_writer_flags(winner.head.writer_feature_flags, winner.path, SUPPORTED_WRITER_FLAGS)
            current = winner
            version = int(winner.head.version) + 1

        if not detached:
            for winner in known_since:
                build_upon(winner)
        if not skip_txn_file:
            txn_key = join(tdir, txn_name)
            txn_writing = in_background(write_transaction_file, store, txn_key, txn, sync=False)
        if not detached:
            # the manifest's staging file, created while the manifest is built
            staged = stage_manifest(store, join(root, "_versions", manifest_file_name(version, naming)))
        trust_hint = True  # see _hinted_past
        hint_read = base_from_hint  # (by the caller, for the first attempt)
        synced: set[str] = set()
        while True:
            op.touched = None
            built, index_section = op.apply(store, root, current, version)
            touched = op.touched
            draft = built if isinstance(built, ManifestDraft) else None
            if draft is not None and (touched is None or needs_dictionaries(draft.head)):
                built, draft = draft.materialize(), None  # (rare: these paths look at every fragment)
            m = draft.head if draft is not None else built
            assert isinstance(m, table_pb2.Manifest)
            kinds = check_no_mixing(built, current, touched)
            added = _added_files(store, root, m, current, touched, draft)
            # (the transaction file is not among them: the manifest holds its transaction)
            unsynced = [k for k in added if k not in synced]
            manifest = _finish_manifest(m, current, version, "" if skip_txn_file else txn_name, touched, draft)
            if skip_txn_file:
                manifest.ClearField("transaction_file")
            name = detached_manifest_name(version) if detached else manifest_file_name(version, naming)
            target = join(root, "_versions", name)
            try:
                if not detached and current is not None and trust_hint and not hint_read and _hinted_past(store, root, version):
                    # later versions exist although ``version`` does not (a cleanup removed
                    # it): rebase on them instead of publishing below the latest
                    raise FileExistsError(version)
                if draft is not None:
                    data, layout = serialize_draft(draft, txn, index_section)
                else:
                    data = serialize_manifest(manifest, txn, index_section, in_place=True,
                                              prefix=dictionary_prefix(store, root, manifest))
                with _user_lock(lock, version) if lock is not None else nullcontext():
                    # the files it names and the manifest's own bytes are made durable in one
                    # round of fsyncs (in parallel), before the manifest is published
                    staged, staging = None, staged
                    # the transaction file has landed before the manifest naming it appears
                    # (its write overlaps the fsync round)
                    publish_manifest(store, target, data, locked=lock is not None, durable=unsynced, staged=staging,
                                     landed=[txn_writing] if txn_writing is not None else [])
                synced.update(unsynced)
            except FileExistsError:
                if txn_writing is not None and txn_writing.done() and txn_writing.exception() is not None:
                    raise  # the transaction file's write failed: not a version lost to another writer
            else:
                txn_key = None
                # the next read of this version (the dataset a write returns, the next
                # commit's base) reuses it: no parse, no O(fragments) vetting
                bound = int(manifest.max_fragment_id) if manifest.HasField("max_fragment_id") else -1
                if draft is not None:
                    # the new version as the bytes just written: its fragments are parsed
                    # only if someone asks for the whole manifest
                    committed = ManifestFile(store.uri(target), None, txn, index_section, bound, kinds,
                                             layout=layout, head=manifest)
                else:
                    committed = ManifestFile(store.uri(target), manifest, txn, index_section, bound, kinds,
                                             raw=manifest_message_bytes(data))
                remember_manifest(store.uri(target), data, committed)
                if not detached:
                    write_version_hint(store, root, version)
                    for hook in POST_COMMIT_HOOKS:  # lance_gpu._commit_hooks: e.g. auto cleanup (lance_gpu.ops)
                        hook(store, root, manifest, int(current.head.version) if current is not None else 0)
                return committed
            if detached:
                version = _detached_version()
                continue
            if current is None and mode == "create":
                raise DatasetExistsError(f"dataset {store.uri(root)} already exists: another writer created it first")
            # Check every version committed since, in order (read one by one until the first
            # that is not there: versions are consecutive), then try after the newest.
            # A hint naming versions that are not there (stale, or written by hand) is not
            # trusted again: the next attempt publishes ``version``.
            trust_hint = False
            hint_read = False
            for winner in _committed_since(store, root, version, naming):
                trust_hint = True
                build_upon(winner)
    except BaseException:
        discard_staged(staged)
        settle(txn_writing)
        op.cleanup(store)
        if txn_key is not None:  # the manifest never landed: nothing references it
            try:
                store.delete(txn_key)
            except OSError:
                pass
        raise


#: The commit lock of the dataset object whose method is committing (``dataset(uri,
#: commit_lock=)``, set by the facade around its mutations): the lock of every commit that
#: is given none.
DEFAULT_COMMIT_LOCK: ContextVar[Callable[[int], AbstractContextManager[Any]] | None] = ContextVar(
    "lance_gpu_commit_lock", default=None)


def _lock_failed(exc: Exception) -> CommitLockError:
    return CommitLockError(f"the commit lock raised {type(exc).__name__}: {exc}")


@contextmanager
def _user_lock(lock: Callable[[int], AbstractContextManager[Any]], version: int) -> Iterator[None]:
    """The user's ``commit_lock(version)`` held around the body; an exception the lock
    itself raises (entering or leaving) becomes :class:`CommitLockError` naming it, as
    pylance reports a failing commit handler; the body's own exceptions pass through."""
    try:
        held = lock(version)
        held.__enter__()
    except Exception as exc:
        raise _lock_failed(exc) from exc
    try:
        yield
    except BaseException as body:
        try:
            suppressed = held.__exit__(type(body), body, body.__traceback__)
        except Exception as exc:
            if exc is body:
                raise
            raise _lock_failed(exc) from exc
        if not suppressed:
            raise
    else:
        try:
            held.__exit__(None, None, None)
        except Exception as exc:
            raise _lock_failed(exc) from exc


def run_with_retries(attempt: Callable[[], T], conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
                     retry_if: Callable[[RetryableCommitConflictError], bool] | None = None) -> T:
    """``attempt()`` (which plans on the latest version and commits), run again after each
    :class:`RetryableCommitConflictError` (for which ``retry_if`` holds, when given), at most
    ``conflict_retries`` more times."""
    retries = max(0, int(conflict_retries))
    for n in range(retries + 1):
        try:
            return attempt()
        except RetryableCommitConflictError as error:
            if n >= retries or (retry_if is not None and not retry_if(error)):
                raise
    raise AssertionError("unreachable")  # pragma: no cover
