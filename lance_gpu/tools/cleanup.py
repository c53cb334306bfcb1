# SPDX-License-Identifier: Apache-2.0
"""Removing old versions and the files only they reference (pylance's ``cleanup_old_versions``).

A version is removed when it is older than ``older_than`` (or beyond the newest
``retain_versions``), is not the latest and carries no tag.  Then every file under ``data/``,
``_deletions/``, ``_transactions/`` and ``_indices/`` that no kept version references is
deleted if a removed version referenced it, or -- a leftover of a failed or running write --
if ``delete_unverified`` is set.  Everything goes through the dataset's ObjectStore.  Manifests of removed
versions go last, so an interrupted cleanup leaves every kept version readable.
"""

from __future__ import annotations

import datetime as _dt
import os
import uuid as _uuid
from dataclasses import dataclass

from lance_gpu.errors import LanceGpuError
from lance_gpu.io import ObjectStore, join
from lance_gpu.table.manifest import _tag_version, list_versions, read_manifest_file
from lance_gpu.tools._open import StorageOptions, open_dataset

_DIRS = ("data", "_deletions", "_transactions", "_indices")


class TaggedVersionError(LanceGpuError, ValueError):
    """A version cleanup would remove carries a tag (``error_if_tagged_old_versions=True``)."""


@dataclass(frozen=True, slots=True)
class CleanupStats:
    """As pylance's: bytes of files removed and how many versions were removed."""

    bytes_removed: int = 0
    old_versions: int = 0


def list_tags(store: ObjectStore, root: str) -> dict[str, int]:
    """``{tag: version}`` from ``_refs/tags/*.json``."""
    tag_dir = join(root, "_refs", "tags")
    names = sorted(m.path[len(tag_dir) + 1 : -len(".json")] for m in store.list(tag_dir) if m.path.endswith(".json"))
    return {name: _tag_version(store, root, name) for name in names}


def _referenced(store: ObjectStore, manifest_path: str) -> set[str]:
    """Keys (relative to the dataset root) of every file or index directory a version uses."""
    mf = read_manifest_file(store, manifest_path)
    m = mf.manifest
    out: set[str] = set()
    for frag in m.fragments:
        out.update(f"data/{df.path}" for df in frag.files)
        if frag.HasField("deletion_file"):
            d = frag.deletion_file
            suffix = "arrow" if d.file_type == d.ARROW_ARRAY else "bin"
            out.add(f"_deletions/{frag.id}-{d.read_version}-{d.id}.{suffix}")
        if frag.HasField("external_row_ids"):
            out.add(frag.external_row_ids.path.lstrip("/"))
    if m.transaction_file:
        out.add(f"_transactions/{m.transaction_file}")
    if mf.index_section is not None:
        out.update(f"_indices/{_uuid.UUID(bytes=bytes(i.uuid.uuid))}" for i in mf.index_section.indices)
    return out


def _candidates(store: ObjectStore, root: str) -> dict[str, list[tuple[str, int]]]:
    """``{relative key: [(object key, bytes)...]}`` of the removable objects; an index
    directory is one entry holding all its objects."""
    out: dict[str, list[tuple[str, int]]] = {}
    for top in _DIRS:
        for meta in store.list(join(root, top)):
            rel = meta.path[len(root) :].lstrip("/")
            parts = rel.split("/")
            unit = "/".join(parts[:2])  # data/x.lance, _indices/<uuid>
            out.setdefault(unit, []).append((meta.path, meta.size))
    return out


def cleanup_old_versions(
    uri: str | os.PathLike[str],
    older_than: _dt.timedelta | None = None,
    retain_versions: int | None = None,
    *,
    delete_unverified: bool = False,
    error_if_tagged_old_versions: bool = True,
    storage_options: StorageOptions | None = None,
) -> CleanupStats:
    """Remove old versions of the dataset at ``uri`` and the files only they reference.

    Parameters
    ----------
    uri : str or path
        The dataset.
    older_than : timedelta, optional
        Remove versions committed longer ago than this; default two weeks when
        ``retain_versions`` is not given either.
    retain_versions : int, optional
        Keep the newest N versions (positive).
    delete_unverified : bool, default False
        Also delete files no version references (leftovers of failed writes -- or of a
        write still running: only safe when no other process writes).  Without it they
        are kept (the store layer lists no modification times, so pylance's "older than
        seven days" rule cannot be applied).
    error_if_tagged_old_versions : bool, default True
        Raise :class:`TaggedVersionError` (nothing removed) when a version that would be
        removed is tagged; otherwise tagged versions are kept silently.
    storage_options : dict, optional
        Passed to :func:`lance_gpu.dataset`.
    """
    if retain_versions is not None and retain_versions < 1:
        raise ValueError("retain_versions must be positive")
    if older_than is None and retain_versions is None:
        older_than = _dt.timedelta(days=14)
    ds = open_dataset(uri, None, storage_options)
    store, root = ds.store, ds.root
    versions = list_versions(store, root)
    now = _dt.datetime.now(_dt.UTC)
    old = versions[:-1]
    if older_than is not None:
        old = [v for v in old if now - v.timestamp > older_than]
    if retain_versions is not None:
        keep_from = max(len(versions) - retain_versions, 0)
        old = [v for v in old if versions.index(v) < keep_from]
    tags = list_tags(store, root)
    hit = sorted(name for name, v in tags.items() if v in {o.version for o in old})
    if hit and error_if_tagged_old_versions:
        raise TaggedVersionError(f"{ds.uri}: versions to remove are tagged ({', '.join(hit)}); untag them or pass error_if_tagged_old_versions=False")
    old = [v for v in old if v.version not in set(tags.values())]
    removed = {v.version for v in old}
    keep_refs: set[str] = set()
    for v in versions:
        if v.version not in removed:
            keep_refs |= _referenced(store, v.path)
    old_refs: set[str] = set()
    for v in old:
        old_refs |= _referenced(store, v.path)
    removed_bytes = 0
    for unit, objects in sorted(_candidates(store, root).items()):
        if unit in keep_refs or not (unit in old_refs or delete_unverified):
            continue
        for key, size in objects:
            store.delete(key)
            removed_bytes += size
    for v in old:  # manifests last: an interrupted cleanup leaves every kept version whole
        removed_bytes += store.size(v.path)
        store.delete(v.path)
    return CleanupStats(removed_bytes, len(old))
