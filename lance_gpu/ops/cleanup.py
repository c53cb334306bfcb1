# SPDX-License-Identifier: Apache-2.0
"""``cleanup_old_versions``: remove old versions and the files only they reference.

Which versions go (pylance's rules): a version is removed when it is older than
``older_than`` (manifest timestamp), not among the last ``retain_versions`` versions, in
``versions`` when that list is given, not the latest version and not tagged. A tagged version
that would otherwise go raises :class:`~lance_gpu.errors.TaggedVersionError` (nothing is
deleted) unless ``error_if_tagged_old_versions=False``, which keeps it silently.

Which files go (pylance's rules, applied to what the store lists under ``data/``,
``_deletions/``, ``_transactions/`` and ``_indices/``):

1. A file a kept version references stays.
2. A file that is not *maybe in progress* goes: its ``last_modified`` is at least
   :data:`UNVERIFIED_AFTER` (7 days) ago, or ``delete_unverified=True``.
3. A newer one goes only when *verified*: a removed version references it.  A newer file no
   version references (left by a failed or in-flight write) stays.

Not reproduced: pylance 14.0.2 also leaves alone some files written *after* the kept
manifests' commit times (a copy of a dataset whose files all carry fresh modification times
loses only its old manifests to pylance's cleanup, and with ``delete_unverified`` its data
files but not its transaction files).  In a dataset written in order every file predates the
manifest that references it, and there the two agree (the tests pin this, locally and on S3).

Only files of the layout pylance manages are candidates: ``data/*.lance`` (and blob
sidecars ``data/{key}/*.blob``, which follow their data file ``data/{key}.lance``),
``_deletions/*.arrow|*.bin``, ``_transactions/*.txn`` and files under
``_indices/{uuid}/`` (an index is referenced by its uuid).  A file whose store reports no
modification time counts as new (rule 2 then needs ``delete_unverified``).  Then the removed versions' manifests go.  A version references its fragments' data
files and deletion files, its transaction file and its indices' directories.

Beyond pylance, leftovers of killed writers go too (:func:`remove_leftovers`): our staging
files (``.tmp_{name}_{uuid}``: a temporary manifest, version hint, data, deletion,
transaction or tag file that was never published) and, on S3, incomplete multipart uploads
beneath the dataset (pylance leaves both; the uploads' parts are billed).  They go when
older than the retention ``older_than`` and, unless ``delete_unverified``, older than
:data:`UNVERIFIED_AFTER` (:func:`leftover_cutoff`), so a write in progress keeps them.
``CleanupStats`` counts them in ``staging_files_removed`` / ``multipart_uploads_aborted``
(staging bytes in ``bytes_removed``).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CleanupError, TaggedVersionError
from lance_gpu.io.store import ObjectStore, join
from lance_gpu.table.deletion import deletion_file_path
from lance_gpu.table.manifest import VersionInfo, list_versions, read_manifest_file
from lance_gpu.table.tags import tagged_versions

DEFAULT_OLDER_THAN = _dt.timedelta(days=14)
#: Files no removed version references are deleted only when at least this old (pylance's
#: "unverified" threshold), unless ``delete_unverified=True``.
UNVERIFIED_AFTER = _dt.timedelta(days=7)
_DIRS = ("data", "_deletions", "_transactions", "_indices")


@dataclass(frozen=True)
class CleanupStats:
    """What one cleanup removed (pylance's ``CleanupStats`` attributes)."""

    bytes_removed: int = 0
    old_versions: int = 0
    data_files_removed: int = 0
    transaction_files_removed: int = 0
    index_files_removed: int = 0
    deletion_files_removed: int = 0
    failed_deletes: int = 0
    #: Beyond pylance: staging files a killed writer left (:func:`remove_leftovers`).
    staging_files_removed: int = 0
    #: Beyond pylance: incomplete multipart uploads aborted (S3).
    multipart_uploads_aborted: int = 0


def _referenced(store: ObjectStore, root: str, manifest: table_pb2.Manifest, index_uuids: list[str]) -> set[str]:
    refs: set[str] = set()
    for frag in manifest.fragments:
        for df in frag.files:
            refs.add(join(root, "data", df.path))
        if frag.HasField("deletion_file"):
            refs.add(deletion_file_path(store, root, int(frag.id), frag.deletion_file))
    if manifest.transaction_file:
        refs.add(join(root, "_transactions", manifest.transaction_file))
    for uuid in index_uuids:
        refs.add(join(root, "_indices", uuid))
    return refs


def _references(store: ObjectStore, root: str, info: VersionInfo) -> set[str]:
    mf = read_manifest_file(store, info.path)
    uuids = []
    if mf.index_section is not None:
        for index in mf.index_section.indices:
            if index.HasField("uuid"):
                raw = index.uuid.uuid.hex()
                uuids.append(f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}")
    return _referenced(store, root, mf.manifest, uuids)


def _reference_key(root: str, key: str) -> str | None:
    """The key whose reference keeps ``key`` (a file listed beneath ``root``): itself for
    data, deletion and transaction files, the parent data file for a blob sidecar, the index
    directory ``_indices/{uuid}`` for index files; ``None`` for files outside the layout
    pylance manages (never deleted)."""
    rel = key[len(root) :].lstrip("/") if root else key.lstrip("/")
    parts = rel.split("/")
    top, name = parts[0], parts[-1]
    if top == "_indices":
        return join(root, "_indices", parts[1]) if len(parts) >= 3 else None
    if top == "data" and len(parts) == 2 and name.endswith(".lance"):
        return key
    if top == "data" and len(parts) == 3 and name.endswith(".blob"):
        return join(root, "data", parts[1] + ".lance")
    if top == "_deletions" and len(parts) == 2 and name.endswith((".arrow", ".bin")):
        return key
    if top == "_transactions" and len(parts) == 2 and name.endswith(".txn"):
        return key
    return None


def _validate(older_than: object, retain_versions: object, versions: object) -> None:
    if older_than is not None and not isinstance(older_than, _dt.timedelta):
        raise TypeError(f"older_than must be a datetime.timedelta, got {type(older_than).__name__}")
    if retain_versions is not None and (
        isinstance(retain_versions, bool) or not isinstance(retain_versions, int) or retain_versions < 1
    ):
        raise CleanupError(f"retain_versions must be a positive integer, got {retain_versions!r}")
    if versions is not None and not all(isinstance(v, int) and not isinstance(v, bool) for v in versions):  # type: ignore[attr-defined]
        raise TypeError("versions must be a list of version numbers")


def cleanup_old_versions(
    store: ObjectStore,
    root: str,
    older_than: _dt.timedelta | None = None,
    retain_versions: int | None = None,
    *,
    delete_unverified: bool = False,
    error_if_tagged_old_versions: bool = True,
    versions: list[int] | None = None,
) -> CleanupStats:
    """Remove old versions of the dataset at ``root`` of ``store`` and the files only they
    reference (see the module docstring for the rules); returns what was removed."""
    _validate(older_than, retain_versions, versions)
    if older_than is None and retain_versions is None and versions is None:
        older_than = DEFAULT_OLDER_THAN
    infos = list_versions(store, root)
    latest = infos[-1].version
    now = _dt.datetime.now(_dt.UTC)
    retained = {i.version for i in infos[-retain_versions:]} if retain_versions else set()
    wanted = set(versions) if versions is not None else None
    candidates = [
        info
        for info in infos
        if info.version != latest
        and info.version not in retained
        and (wanted is None or info.version in wanted)
        and (older_than is None or info.timestamp < now - older_than)
    ]
    tags = tagged_versions(store, root)
    tagged = [i for i in candidates if i.version in tags]
    if tagged and error_if_tagged_old_versions:
        named = ", ".join(f"{name} ({i.version})" for i in tagged for name in sorted(tags[i.version]))
        raise TaggedVersionError(
            f"{store.uri(root)}: {len(tagged)} tagged version(s) would be cleaned up: {named}; delete "
            "these tags or pass error_if_tagged_old_versions=False"
        )
    removed = [i for i in candidates if i.version not in tags]
    removed_versions = {i.version for i in removed}
    kept_refs: set[str] = set()
    removed_refs: set[str] = set()
    for info in infos:
        (removed_refs if info.version in removed_versions else kept_refs).update(_references(store, root, info))

    young_after = now - UNVERIFIED_AFTER
    counts = dict.fromkeys(_DIRS, 0)
    bytes_removed = failed = 0
    for top in _DIRS:
        for meta in store.list(join(root, top)):
            ref = _reference_key(root, meta.path)
            if ref is None or ref in kept_refs:
                continue
            modified = meta.last_modified
            maybe_in_progress = not delete_unverified and (modified is None or modified >= young_after)
            if maybe_in_progress and ref not in removed_refs:
                continue  # new and unreferenced: maybe a write in flight (see the module docstring)
            try:
                store.delete(meta.path)
            except OSError:
                failed += 1
                continue
            bytes_removed += meta.size
            counts[top] += 1
    for info in removed:
        try:
            size = store.size(info.path)
            store.delete(info.path)
        except OSError:
            failed += 1
            continue
        bytes_removed += size
    staged, staged_bytes, aborted, leftover_failures = remove_leftovers(
        store, root, leftover_cutoff(now, older_than, delete_unverified), delete_unverified
    )
    return CleanupStats(
        bytes_removed=bytes_removed + staged_bytes,
        old_versions=len(removed),
        data_files_removed=counts["data"],
        transaction_files_removed=counts["_transactions"],
        index_files_removed=counts["_indices"],
        deletion_files_removed=counts["_deletions"],
        failed_deletes=failed + leftover_failures,
        staging_files_removed=staged,
        multipart_uploads_aborted=aborted,
    )


def leftover_cutoff(now: _dt.datetime, older_than: _dt.timedelta | None, delete_unverified: bool) -> _dt.datetime:
    """Leftovers of writes (staging files, multipart uploads) started before this go: older
    than the retention ``older_than`` (none when only ``retain_versions`` / ``versions``
    is given) and, unless ``delete_unverified`` says no other writer runs, at least
    :data:`UNVERIFIED_AFTER` old, as pylance's rule for files no version references."""
    age = older_than if older_than is not None else _dt.timedelta(0)
    if not delete_unverified:
        age = max(age, UNVERIFIED_AFTER)
    return now - age


def remove_leftovers(
    store: ObjectStore, root: str, cutoff: _dt.datetime, delete_unverified: bool
) -> tuple[int, int, int, int]:
    """Remove what killed writers left beneath ``root`` before ``cutoff``: staging files
    (``.tmp_{name}_{uuid}`` next to a manifest, version hint, data, deletion, transaction,
    index or tag file: the store's ``list_staging``; only local files are staged) and incomplete multipart uploads (the
    store's ``list_uploads``, S3; pylance leaves them, and their parts are billed).  A
    leftover with no known time goes only with ``delete_unverified``.  Stores without these
    calls have none.  Returns ``(staging files removed, their bytes, uploads aborted,
    failures)``."""

    def old(when: _dt.datetime | None) -> bool:
        return delete_unverified if when is None else when < cutoff

    files = removed_bytes = aborted = failed = 0
    list_staging = getattr(store, "list_staging", None)
    for meta in list_staging(root) if list_staging is not None else []:
        if not old(meta.last_modified):
            continue
        try:
            store.delete(meta.path)
        except OSError:
            failed += 1
            continue
        files += 1
        removed_bytes += meta.size
    list_uploads = getattr(store, "list_uploads", None)
    for upload in list_uploads(root) if list_uploads is not None else []:
        if not old(upload.initiated):
            continue
        try:
            store.abort_upload(upload)  # type: ignore[attr-defined]
        except OSError:
            failed += 1
            continue
        aborted += 1
    return files, removed_bytes, aborted, failed
