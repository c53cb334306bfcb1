# SPDX-License-Identifier: Apache-2.0
"""``cleanup_old_versions``: remove old versions and the files only they reference.

Which versions go (pylance's rules): a version is removed when it is older than
``older_than`` (manifest timestamp), not among the last ``retain_versions`` versions, in
``versions`` when that list is given, not the latest version and not tagged. A tagged version
that would otherwise go raises :class:`~lance_gpu.errors.TaggedVersionError` (nothing is
deleted) unless ``error_if_tagged_old_versions=False``, which keeps it silently.

Which files go: under ``data/``, ``_deletions/``, ``_transactions/`` and ``_indices/``, a
file that no kept version references goes when a removed version references it, or -- for a
file no version references at all (left by a failed or in-flight write) -- when it is more
than 7 days old or ``delete_unverified=True``. Then the removed versions' manifests go. A
version references its fragments' data files and deletion files, its transaction file and
its indices' directories (``_indices/{uuid}/``).
"""

from __future__ import annotations

import datetime as _dt
import os
import time
from dataclasses import dataclass
from pathlib import Path

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CleanupError, TaggedVersionError
from lance_gpu.table.deletion import deletion_file_path
from lance_gpu.table.manifest import (
    VersionInfo,
    dataset_path,
    list_versions,
    read_manifest_file,
)
from lance_gpu.table.tags import tagged_versions

UNVERIFIED_GRACE = _dt.timedelta(days=7)
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


def _referenced(root: Path, manifest: table_pb2.Manifest, index_uuids: list[str]) -> set[Path]:
    refs: set[Path] = set()
    for frag in manifest.fragments:
        for df in frag.files:
            refs.add(root / "data" / df.path)
        if frag.HasField("deletion_file"):
            refs.add(deletion_file_path(root, int(frag.id), frag.deletion_file))
    if manifest.transaction_file:
        refs.add(root / "_transactions" / manifest.transaction_file)
    for uuid in index_uuids:
        refs.add(root / "_indices" / uuid)
    return refs


def _references(root: Path, info: VersionInfo) -> set[Path]:
    mf = read_manifest_file(info.path)
    uuids = []
    if mf.index_section is not None:
        for index in mf.index_section.indices:
            if index.HasField("uuid"):
                raw = index.uuid.uuid.hex()
                uuids.append(f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}")
    return _referenced(root, mf.manifest, uuids)


def _covered(path: Path, refs: set[Path]) -> bool:
    """``path`` is referenced itself or lies in a referenced (index) directory."""
    return path in refs or any(parent in refs for parent in path.parents)


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
    uri: str | os.PathLike[str],
    older_than: _dt.timedelta | None = None,
    retain_versions: int | None = None,
    *,
    delete_unverified: bool = False,
    error_if_tagged_old_versions: bool = True,
    versions: list[int] | None = None,
) -> CleanupStats:
    """Remove old versions of the dataset at ``uri`` and the files only they reference
    (see the module docstring for the rules); returns what was removed."""
    _validate(older_than, retain_versions, versions)
    if older_than is None and retain_versions is None and versions is None:
        older_than = DEFAULT_OLDER_THAN
    root = dataset_path(uri)
    infos = list_versions(root)
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
    tags = tagged_versions(root)
    tagged = [i for i in candidates if i.version in tags]
    if tagged and error_if_tagged_old_versions:
        names = sorted(name for i in tagged for name in tags[i.version])
        raise TaggedVersionError(
            f"{len(tagged)} tagged version(s) would be cleaned up (tags {names}); delete the tags "
            "or pass error_if_tagged_old_versions=False"
        )
    removed = [i for i in candidates if i.version not in tags]
    removed_versions = {i.version for i in removed}
    kept_refs: set[Path] = set()
    removed_refs: set[Path] = set()
    for info in infos:
        (removed_refs if info.version in removed_versions else kept_refs).update(_references(root, info))

    counts = dict.fromkeys(_DIRS, 0)
    bytes_removed = failed = 0
    grace_cutoff = time.time() - UNVERIFIED_GRACE.total_seconds()
    for top in _DIRS:
        base = root / top
        if not base.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(base):
            for name in files:
                path = Path(dirpath) / name
                if _covered(path, kept_refs):
                    continue
                stat = path.stat()
                if not _covered(path, removed_refs) and not delete_unverified and stat.st_mtime > grace_cutoff:
                    continue  # maybe part of a write in flight: keep it for now
                try:
                    path.unlink()
                except OSError:
                    failed += 1
                    continue
                bytes_removed += stat.st_size
                counts[top] += 1
    for info in removed:
        size = os.path.getsize(info.path)
        try:
            os.unlink(info.path)
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
