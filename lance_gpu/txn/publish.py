# SPDX-License-Identifier: Apache-2.0
"""The bytes of a commit: manifest files, put-if-absent publishing, transaction files.

The transaction logic (operations, conflict rules, the commit loop) is
:mod:`lance_gpu.txn`; this module holds the I/O it uses:

* :func:`serialize_manifest`: ``[IndexSection] [Transaction] Manifest footer`` (Manifest
  field 23 = the transaction's offset);
* :func:`publish_manifest`: the store's *put-if-absent* (a hard link of a staging file
  locally, a conditional PUT on object stores); ``ObjectExistsError`` (a ``FileExistsError``)
  means another writer took the version, and an unknown outcome is settled by reading the
  manifest back.  A committed version is never replaced; :func:`check_commit_store` refuses
  stores without conditional writes unless the caller holds a commit lock (then the manifest
  is published by check-then-put under that lock);
* :func:`write_transaction_file` / :func:`winner_transaction`: ``_transactions/*.txn``
  (raw protobuf) and a committed version's transaction (inline section, else its file);
* :func:`write_version_hint`: ``_versions/latest_version_hint.json`` (only a hint).
"""

from __future__ import annotations

import datetime as _dt
import json
import struct
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from lance_gpu._proto import table_pb2, transaction_pb2
from lance_gpu.errors import (
    ConditionalPutUnsupportedError,
    DatasetNotFoundError,
    ObjectExistsError,
    StorageError,
    UnsupportedFeatureError,
)
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.table import features
from lance_gpu.table.manifest import (
    VERSION_HINT,
    ManifestFile,
    NamingScheme,
    latest_version,
    read_manifest_file,
    read_transaction_file,
)
from lance_gpu.table.manifest_bytes import FragmentLayout, ManifestDraft
from lance_gpu.table.versions import storage_version

__all__ = [
    "SUPPORTED_WRITER_FLAGS",
    "WRITER_LIBRARY",
    "WRITER_VERSION",
    "check_appendable",
    "check_commit_store",
    "latest",
    "publish_manifest",
    "put_unsynced",
    "serialize_draft",
    "serialize_manifest",
    "stamp_manifest",
    "winner_transaction",
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
    *,
    in_place: bool = False,
    prefix: bytes = b"",
) -> bytes:
    """A manifest file: ``[prefix] [u32 len | IndexSection] [u32 len | Transaction] u32 len |
    Manifest`` and the 16-byte footer; the Manifest's offsets are filled in here: in a copy,
    or with ``in_place`` in ``manifest`` itself (which then equals what a reader parses from
    the bytes; no copy of every fragment).  ``prefix``: a legacy dataset's dictionary values
    (:func:`lance_gpu.txn.legacy_dictionaries.dictionary_prefix`)."""
    if in_place:
        m = manifest
    else:
        m = table_pb2.Manifest()
        m.CopyFrom(manifest)
    parts = _sections(m, transaction, index_section, prefix)
    raw = m.SerializeToString()
    return _file(parts, raw)


def serialize_draft(
    draft: ManifestDraft,
    transaction: transaction_pb2.Transaction | None,
    index_section: table_pb2.IndexSection | None = None,
) -> tuple[bytes, FragmentLayout]:
    """The manifest file of ``draft`` (the layout of :func:`serialize_manifest`), its
    offsets set in ``draft.head``; the Manifest message is the draft's encoding
    (:meth:`~lance_gpu.table.manifest_bytes.ManifestDraft.encode`: the base's untouched
    fragment entries as their bytes).  Returns the file's bytes and the message's layout."""
    parts = _sections(draft.head, transaction, index_section, b"")
    raw, layout = draft.encode()
    return _file(parts, raw), layout


def _sections(m: table_pb2.Manifest, transaction: transaction_pb2.Transaction | None,
              index_section: table_pb2.IndexSection | None, prefix: bytes) -> list[bytes]:
    """The file's parts ahead of the Manifest (``m``'s offsets to them set)."""
    for name in ("index_section", "transaction_section", "transaction_section_deprecated"):
        m.ClearField(name)
    parts: list[bytes] = [prefix] if prefix else []
    pos = len(prefix)
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
    return parts


def _file(parts: list[bytes], manifest: bytes) -> bytes:
    """``parts`` then ``u32 len | manifest`` and the footer naming where that begins."""
    pos = sum(len(p) for p in parts)
    return b"".join([*parts, _LEN.pack(len(manifest)), manifest, _FOOTER.pack(pos, 0, 2, b"LANC")])


def publish_manifest(store: ObjectStore, key: str, data: bytes, *, locked: bool = False,
                     durable: Sequence[str] = (), staged: object = None,
                     landed: Sequence[Future[Any]] = ()) -> None:
    """Create the manifest ``key`` holding ``data`` with the store's ``put_if_absent`` (a hard
    link of a staging file locally, a conditional PUT ``If-None-Match: *`` on object stores).

    ``durable``: published objects the manifest names (data, deletion, transaction files),
    made durable (:meth:`~lance_gpu.io.store.ObjectStore.sync`) before the manifest appears.
    A local store syncs them and the manifest's staging file in one parallel round
    (``put_if_absent_after_sync``); other stores sync, then put.

    Raises :class:`~lance_gpu.errors.ObjectExistsError` (a ``FileExistsError``) if another
    writer took the version.  A committed manifest is never replaced.  An outcome the failure
    left unknown (a timeout, a lost response) is settled by reading the manifest back: our
    bytes there mean the commit landed, other bytes mean another writer took the version.

    ``landed``: background writes that must have ended before the manifest appears (the
    commit's transaction file): a local store waits for them after its fsync round, which
    they overlap; other stores before the put.  Their first failure is raised, nothing put.

    ``staged``: an empty staging file the store made beforehand (``LocalStore.stage``,
    see :func:`stage_manifest`), which this call consumes whatever the outcome.

    ``locked``: the caller holds the user's commit lock around this call.  On a store without
    conditional writes the manifest is then published by *check, then put* (safe only because
    every writer takes the same lock): an existing ``key`` raises ``ObjectExistsError``.
    """
    if locked and not store.supports_conditional_put:
        discard_staged(staged)
        store.sync(durable)
        for future in landed:
            future.result()
        if store.exists(key):
            raise ObjectExistsError(store.uri(key), "taken by another writer")
        store.put(key, data)
        return
    together = getattr(store, "put_if_absent_after_sync", None)
    try:
        if together is not None:
            together(key, data, durable, staged=staged, landed=landed)
        else:
            discard_staged(staged)
            store.sync(durable)
            for future in landed:
                future.result()
            store.put_if_absent(key, data)
    except ObjectExistsError:
        raise
    except StorageError as exc:
        try:
            there = store.get(key)
        except (FileNotFoundError, StorageError):
            raise exc from None
        if there == data:
            return  # our put landed; only its response was lost
        raise ObjectExistsError(store.uri(key), "taken by another writer") from exc


def stage_manifest(store: ObjectStore, key: str) -> object:
    """An empty staging file for the manifest ``key`` (or another version's, in the same
    directory) on a store that stages puts locally (``LocalStore.stage``: created now, in the
    background), else None.  Pass it to :func:`publish_manifest` or :func:`discard_staged`."""
    stage = getattr(store, "stage", None)
    if stage is None or getattr(store, "put_if_absent_after_sync", None) is None:
        return None
    return stage(key)


def discard_staged(staged: object) -> None:
    """Remove a staging file from :func:`stage_manifest` that no put will consume."""
    if staged is not None:
        staged.abort()  # type: ignore[attr-defined]


def check_commit_store(store: ObjectStore, root: str, *, locked: bool = False) -> None:
    """Refuse to commit on a store that cannot put-if-absent (two writers could both win),
    unless ``locked``: the user passed a commit lock, which then guards the manifest's
    check-then-put (:func:`publish_manifest`)."""
    if not store.supports_conditional_put and not locked:
        raise ConditionalPutUnsupportedError(
            store.uri(root),
            "this store cannot write a manifest only if it is absent (no conditional PUT), so "
            "concurrent commits could overwrite each other; use a store with conditional writes "
            "or pass commit_lock= (a lock every writer of this dataset takes)",
        )
    if not getattr(store, "writable", True):
        raise ConditionalPutUnsupportedError(store.uri(root), "the store is read-only")


def put_unsynced(store: ObjectStore, key: str, data: bytes) -> None:
    """Write the whole object ``key`` without making it durable (locally: no fsync).  The
    caller syncs it (:meth:`~lance_gpu.io.store.ObjectStore.sync`) before anything durable
    names it, or it is only a hint.  Published atomically all the same: readers see all of it
    or nothing."""
    writer = store.open_writer(key)
    try:
        writer.write(data)
    except BaseException:
        writer.abort()
        raise
    writer.close(sync=False)


def write_version_hint(store: ObjectStore, root: str, version: int) -> None:
    """Best effort: ``_versions/latest_version_hint.json`` = ``{"version": N}``, as pylance
    writes it (whatever it said before: a hint left too high by someone else is corrected).

    One request, not synced: a crash that loses it, or a slower writer of an older version that
    puts its hint last, leaves an older (or no) hint, which readers check and follow forward
    or replace by a listing (:func:`lance_gpu.table.manifest.latest_version`).

    Locally an existing hint is rewritten in place (``LocalStore.overwrite_in_place``: no new
    inode and no rename, which on ext4 cost two journal operations per commit); a reader
    racing that write may see a torn hint, which it checks like any wrong hint."""
    key = join(root, "_versions", VERSION_HINT)
    data = json.dumps({"version": version}, separators=(",", ":")).encode()
    in_place = getattr(store, "overwrite_in_place", None)
    try:
        if in_place is not None and in_place(key, data):
            return
        put_unsynced(store, key, data)
    except OSError:
        pass


def winner_transaction(store: ObjectStore, root: str, mf: ManifestFile) -> transaction_pb2.Transaction | None:
    """A committed version's transaction: its inline section, else its ``.txn`` file; None
    when neither can be read (the caller then assumes a conflict)."""
    if mf.transaction is not None:
        return mf.transaction
    name = mf.manifest.transaction_file
    if not name:
        return None
    try:
        return read_transaction_file(store, join(root, "_transactions", name))
    except Exception:
        return None


def write_transaction_file(store: ObjectStore, key: str, txn: transaction_pb2.Transaction, *, sync: bool = True) -> None:
    """``_transactions/{read_version}-{uuid}.txn``: the raw ``Transaction`` protobuf.

    ``sync=False``: published unsynced.  A commit writes it so: its manifest carries the
    same transaction inline, which readers (ours, pylance's) take first, so the file is
    never the only copy a crash could lose (:mod:`lance_gpu.txn.commit`)."""
    if sync:
        store.put(key, txn.SerializeToString())
    else:
        put_unsynced(store, key, txn.SerializeToString())


def latest(store: ObjectStore, root: str) -> tuple[ManifestFile | None, NamingScheme]:
    """The latest committed manifest of ``root`` (None if there is none) and its naming
    (found as :func:`lance_gpu.table.manifest.latest_version` finds it)."""
    try:
        info = latest_version(store, root)
    except DatasetNotFoundError:
        return None, "V2"
    return read_manifest_file(store, info.path), info.naming


def timestamp_of(manifest: table_pb2.Manifest) -> _dt.datetime:
    ts = manifest.timestamp
    return _dt.datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, _dt.UTC)


def check_appendable(base: ManifestFile) -> None:
    """Refuse appends to datasets whose writer flags or file format we cannot honour."""
    features.check_writer_flags(base.head.writer_feature_flags, base.path, SUPPORTED_WRITER_FLAGS)
    fmt = storage_version(base.head if base.head.data_format.version else base.manifest)
    if fmt not in ("0.1", "legacy", "2.0", "2.1", "2.2"):
        raise UnsupportedFeatureError(
            f"{base.path}: appending to a dataset of data storage version {fmt} is not supported "
            "(lance-gpu writes 0.1, 2.0, 2.1 and 2.2)"
        )
