# SPDX-License-Identifier: Apache-2.0
"""Removing old versions and the files only they reference (pylance's ``cleanup_old_versions``).

A version is removed when it is older than ``older_than`` (or beyond the newest
``retain_versions``), is not the latest and carries no tag.  Then every file under ``data/``,
``_deletions/``, ``_transactions/`` and ``_indices/`` that no kept version references is
deleted if a removed version referenced it, or -- a leftover of a failed or running write --
if it is at least seven days old or ``delete_unverified`` is set.  Manifests of removed
versions go last, so an interrupted cleanup leaves every kept version readable.
"""

from __future__ import annotations

import datetime as _dt
import os
import uuid as _uuid
from dataclasses import dataclass

from lance_gpu.errors import LanceGpuError
from lance_gpu.table.deletion import deletion_file_path
from lance_gpu.table.manifest import (
    _tag_version,
    dataset_path,
    list_versions,
    read_manifest_file,
)

UNVERIFIED_AGE = _dt.timedelta(days=7)
_DIRS = ("data", "_deletions", "_transactions", "_indices")


class TaggedVersionError(LanceGpuError, ValueError):
    """A version cleanup would remove carries a tag (``error_if_tagged_old_versions=True``)."""


@dataclass(frozen=True, slots=True)
class CleanupStats:
    """As pylance's: bytes of files removed and how many versions were removed."""

    bytes_removed: int = 0
    old_versions: int = 0


def list_tags(uri: str | os.PathLike[str]) -> dict[str, int]:
    """``{tag: version}`` from ``_refs/tags/*.json``."""
    tag_dir = dataset_path(uri) / "_refs" / "tags"
    if not tag_dir.is_dir():
        return {}
    names = sorted(p.name[: -len(".json")] for p in tag_dir.iterdir() if p.name.endswith(".json"))
    return {name: _tag_version(uri, name) for name in names}


def _referenced(root: str, manifest_path: str) -> set[str]:
    """Paths (relative to the dataset root) of every file or index directory a version uses."""
    mf = read_manifest_file(manifest_path)
    m = mf.manifest
    out: set[str] = set()
    for frag in m.fragments:
        out.update(os.path.join("data", df.path) for df in frag.files)
        if frag.HasField("deletion_file"):
            out.add(os.path.relpath(deletion_file_path(root, frag.id, frag.deletion_file), root))
        if frag.HasField("external_row_ids"):
            out.add(os.path.normpath(frag.external_row_ids.path))
    if m.transaction_file:
        out.add(os.path.join("_transactions", m.transaction_file))
    if mf.index_section is not None:
        out.update(os.path.join("_indices", str(_uuid.UUID(bytes=bytes(i.uuid.uuid)))) for i in mf.index_section.indices)
    return out


def _candidates(root: str) -> dict[str, tuple[int, float]]:
    """``{relative path: (bytes, mtime)}`` of the removable files; an index directory is one entry."""
    out: dict[str, tuple[int, float]] = {}
    for top in _DIRS:
        base = os.path.join(root, top)
        if not os.path.isdir(base):
            continue
        for entry in os.scandir(base):
            rel = os.path.join(top, entry.name)
            if entry.is_dir() and top == "_indices":
                files = [os.path.join(d, n) for d, _s, ns in os.walk(entry.path) for n in ns]
                size = sum(os.path.getsize(f) for f in files)
                mtime = max([os.path.getmtime(f) for f in files] or [entry.stat().st_mtime])
                out[rel] = (size, mtime)
            elif entry.is_file():
                st = entry.stat()
                out[rel] = (st.st_size, st.st_mtime)
    return out


def _remove(path: str) -> None:
    if os.path.isdir(path):
        for d, _subdirs, names in os.walk(path, topdown=False):
            for n in names:
                os.unlink(os.path.join(d, n))
            os.rmdir(d)
    else:
        os.unlink(path)


def cleanup_old_versions(
    uri: str | os.PathLike[str],
    older_than: _dt.timedelta | None = None,
    retain_versions: int | None = None,
    *,
    delete_unverified: bool = False,
    error_if_tagged_old_versions: bool = True,
) -> CleanupStats:
    """Remove old versions of the dataset at ``uri`` and the files only they reference.

    Parameters
    ----------
    uri : str or path
        The dataset (a local path).
    older_than : timedelta, optional
        Remove versions committed longer ago than this; default two weeks when
        ``retain_versions`` is not given either.
    retain_versions : int, optional
        Keep the newest N versions (positive).
    delete_unverified : bool, default False
        Also delete unreferenced files younger than seven days (only safe when no other
        process is writing).
    error_if_tagged_old_versions : bool, default True
        Raise :class:`TaggedVersionError` (nothing removed) when a version that would be
        removed is tagged; otherwise tagged versions are kept silently.
    """
    if retain_versions is not None and retain_versions < 1:
        raise ValueError("retain_versions must be positive")
    if older_than is None and retain_versions is None:
        older_than = _dt.timedelta(days=14)
    root = os.fspath(dataset_path(uri))
    versions = list_versions(root)
    now = _dt.datetime.now(_dt.UTC)
    old = versions[:-1]
    if older_than is not None:
        old = [v for v in old if now - v.timestamp > older_than]
    if retain_versions is not None:
        keep_from = max(len(versions) - retain_versions, 0)
        old = [v for v in old if versions.index(v) < keep_from]
    tags = list_tags(root)
    tagged = {v for v in tags.values()}
    hit = sorted(name for name, v in tags.items() if v in {o.version for o in old})
    if hit and error_if_tagged_old_versions:
        raise TaggedVersionError(f"{root}: versions to remove are tagged ({', '.join(hit)}); untag them or pass error_if_tagged_old_versions=False")
    old = [v for v in old if v.version not in tagged]
    removed_versions = {v.version for v in old}
    kept = [v for v in versions if v.version not in removed_versions]
    keep_refs: set[str] = set()
    for v in kept:
        keep_refs |= _referenced(root, v.path)
    old_refs: set[str] = set()
    for v in old:
        old_refs |= _referenced(root, v.path)
    cutoff = now.timestamp() - UNVERIFIED_AGE.total_seconds()
    removed_bytes = 0
    for rel, (size, mtime) in sorted(_candidates(root).items()):
        if rel in keep_refs:
            continue
        if rel in old_refs or delete_unverified or mtime < cutoff:
            _remove(os.path.join(root, rel))
            removed_bytes += size
    for v in old:
        removed_bytes += os.path.getsize(v.path)
        os.unlink(v.path)
    return CleanupStats(removed_bytes, len(old))
