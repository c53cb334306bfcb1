# SPDX-License-Identifier: Apache-2.0
"""Dataset housekeeping, as pylance: ``LanceDataset.drop(uri)``, ``ds.validate()`` and the
auto cleanup that runs after commits.

Auto cleanup (pylance's ``auto_cleanup_hook``): a dataset whose config holds
``lance.auto_cleanup.interval`` (written by ``write_dataset(auto_cleanup_options=
AutoCleanupConfig(interval=, older_than_seconds=))``, or set with ``update_config``) is
cleaned after every commit of a version that is a multiple of the interval: the versions
before the one the commit was planned on (pylance runs the cleanup on the dataset as it was
before the commit, so that version stays too) whose manifests are older than
``lance.auto_cleanup.older_than`` (a Rust ``humantime`` duration: ``"1s"``, ``"14days"``,
``"1h 30m"``) are removed with the files only they reference; tagged versions are kept
quietly.  A failure of the cleanup never fails the commit (pylance logs it).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import re
from typing import TYPE_CHECKING, TypedDict

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError, DatasetNotFoundError, NotADatasetError
from lance_gpu.io import ObjectStore, join, resolve
from lance_gpu.ops.cleanup import cleanup_old_versions
from lance_gpu.table.manifest import latest_version, list_versions
from lance_gpu.table.schema import column_index_map
from lance_gpu.table.snapshot import TableSnapshot

if TYPE_CHECKING:  # pragma: no cover
    pass

__all__ = ["AutoCleanupConfig", "auto_cleanup", "drop", "parse_humantime", "validate"]

_log = logging.getLogger(__name__)


class AutoCleanupConfig(TypedDict):
    """pylance's ``lance.dataset.AutoCleanupConfig``: clean every ``interval`` versions,
    removing versions older than ``older_than_seconds``."""

    interval: int
    older_than_seconds: int


_UNITS = {
    "nsec": 1e-9, "ns": 1e-9, "usec": 1e-6, "us": 1e-6, "msec": 1e-3, "ms": 1e-3,
    "seconds": 1, "second": 1, "sec": 1, "s": 1, "minutes": 60, "minute": 60, "min": 60, "m": 60,
    "hours": 3600, "hour": 3600, "hr": 3600, "h": 3600, "days": 86400, "day": 86400, "d": 86400,
    "weeks": 604800, "week": 604800, "w": 604800, "months": 2_630_016, "month": 2_630_016, "M": 2_630_016,
    "years": 31_557_600, "year": 31_557_600, "y": 31_557_600,
}


def parse_humantime(text: str) -> _dt.timedelta:
    """A Rust ``humantime`` duration (``"1ms"``, ``"1m 40s"``, ``"14days"``) as a timedelta;
    ValueError for anything else."""
    parts = re.findall(r"(\d+)\s*([A-Za-z]+)", text)
    if not parts or re.sub(r"(\d+)\s*([A-Za-z]+)|\s+", "", text):
        raise ValueError(f"not a duration: {text!r}")
    seconds = 0.0
    for number, unit in parts:
        if unit not in _UNITS:
            raise ValueError(f"unknown time unit {unit!r} in {text!r}")
        seconds += int(number) * _UNITS[unit]
    return _dt.timedelta(seconds=seconds)


def auto_cleanup(store: ObjectStore, root: str, manifest: table_pb2.Manifest, read_version: int) -> None:
    """After the commit of ``manifest`` (planned on ``read_version``): pylance's auto
    cleanup when the config asks for it (see the module docstring).  Errors are logged."""
    config = manifest.config
    interval = config.get("lance.auto_cleanup.interval")
    if interval is None:
        return
    try:
        every = int(interval)
        if every <= 0 or int(manifest.version) % every:
            return
        older = config.get("lance.auto_cleanup.older_than")
        older_than = parse_humantime(older) if older is not None else None
        keep = config.get("lance.auto_cleanup.retain_versions")
        candidates = [int(v.version) for v in list_versions(store, root) if int(v.version) < int(read_version)]
        if not candidates:
            return
        cleanup_old_versions(
            store, root, older_than, int(keep) if keep is not None else None,
            error_if_tagged_old_versions=False, versions=candidates,
        )
    except Exception as exc:  # noqa: BLE001 - pylance logs a failed auto cleanup, the commit stands
        _log.error("Error encountered during auto cleanup of %s: %s", store.uri(root), exc)


def drop(base_uri: str | os.PathLike[str], storage_options: dict[str, str] | None = None,
         ignore_not_found: bool | None = None) -> None:
    """Delete the whole dataset at ``base_uri`` (pylance's ``LanceDataset.drop``).

    A path where nothing exists raises :class:`DatasetNotFoundError` (an ``OSError``) unless
    ``ignore_not_found``; objects without a readable manifest under ``_versions/`` are not a
    dataset, and are refused with :class:`NotADatasetError` (a ``ValueError``, as pylance)."""
    store, root = resolve(base_uri, storage_options)
    objects = store.list(root)
    if not objects:
        if ignore_not_found:
            return
        raise DatasetNotFoundError(f"Not found: {store.uri(root)}")
    try:
        latest_version(store, root)
    except DatasetNotFoundError:
        raise NotADatasetError(
            f"Refusing to drop {store.uri(root)!r}: no readable Lance manifest was found under '_versions', "
            "so this is not a dataset root"
        ) from None
    for meta in objects:
        store.delete(meta.path)
    prune = getattr(store, "remove_empty_directories", None)
    if prune is not None:  # local files: the directories go too
        prune(root)


def validate(ds: TableSnapshot) -> None:
    """Check the version's metadata, as pylance's ``validate``: fragment ids unique and
    within ``max_fragment_id``; each data file's field and column lists consistent, no field
    in two data files of a fragment, every file's footer row count equal to the fragment's
    ``physical_rows``; deletion counts below the row counts.  Raises
    :class:`~lance_gpu.errors.CorruptFileError` naming what is wrong."""
    m = ds.manifest
    seen: set[int] = set()
    max_id = int(m.max_fragment_id) if m.HasField("max_fragment_id") else None
    for frag in ds.fragments:
        fid = frag.fragment_id
        if fid in seen:
            raise CorruptFileError(ds.uri, f"fragment id {fid} appears twice in version {ds.version}")
        seen.add(fid)
        if max_id is not None and fid > max_id:
            raise CorruptFileError(ds.uri, f"fragment id {fid} exceeds max_fragment_id {max_id}")
        owner: dict[int, str] = {}
        for df in frag.pb.files:
            for field_id in column_index_map(df, ds.lance_schema):
                if field_id in owner:
                    raise CorruptFileError(ds.uri, f"fragment {fid}: field {field_id} is in both {owner[field_id]} and {df.path}")
                owner[field_id] = df.path
        deleted = frag.num_deletions
        if deleted > frag.physical_rows:
            raise CorruptFileError(ds.uri, f"fragment {fid} deletes {deleted} of {frag.physical_rows} rows")
        for df in frag.pb.files:
            frag.file_reader(join(ds.root, "data", df.path))  # checks its rows and columns

