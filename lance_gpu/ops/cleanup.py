# SPDX-License-Identifier: Apache-2.0
"""``cleanup_old_versions``: remove old versions and the files only they reference.

Which versions go (pylance's rules): a version is removed when it is older than
``older_than`` (manifest timestamp), not among the last ``retain_versions`` versions, in
``versions`` when that list is given, not the latest version and not tagged. A tagged version
that would otherwise go raises :class:`~lance_gpu.errors.TaggedVersionError` (nothing is
deleted) unless ``error_if_tagged_old_versions=False``, which keeps it silently.

Which files go: under ``data/``, ``_deletions/``, ``_transactions/`` and ``_indices/``, a
file that no kept version references goes when a removed version references it, or -- for a
file no version references at all (left by a failed or in-flight write) -- when
``delete_unverified=True``. (pylance also deletes such files once they are 7 days old; the
store protocol reports no modification times, so without ``delete_unverified`` they stay.) Then the removed versions' manifests go. A
version references its fragments' data files and deletion files, its transaction file and
its indices' directories (``_indices/{uuid}/``).
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


def _covered(key: str, refs: set[str]) -> bool:
    """``key`` is referenced itself or lies in a referenced (index) directory."""
    if key in refs:
        return True
    parts = key.split("/")
    return any("/".join(parts[:i]) in refs for i in range(1, len(parts)))


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
        names = sorted(name for i in tagged for name in tags[i.version])
        raise TaggedVersionError(
            f"{len(tagged)} tagged version(s) would be cleaned up (tags {names}); delete the tags "
            "or pass error_if_tagged_old_versions=False"
        )
    removed = [i for i in candidates if i.version not in tags]
    removed_versions = {i.version for i in removed}
    kept_refs: set[str] = set()
    removed_refs: set[str] = set()
    for info in infos:
        (removed_refs if info.version in removed_versions else kept_refs).update(_references(store, root, info))

    counts = dict.fromkeys(_DIRS, 0)
    bytes_removed = failed = 0
    for top in _DIRS:
        for meta in store.list(join(root, top)):
            if _covered(meta.path, kept_refs):
                continue
            if not _covered(meta.path, removed_refs) and not delete_unverified:
                continue  # no version references it: maybe a write in flight (see the module docstring)
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
    return CleanupStats(
        bytes_removed=bytes_removed,
        old_versions=len(removed),
        data_files_removed=counts["data"],
        transaction_files_removed=counts["_transactions"],
        index_files_removed=counts["_indices"],
        deletion_files_removed=counts["_deletions"],
        failed_deletes=failed,
    )
