# SPDX-License-Identifier: Apache-2.0
"""Version history as pylance reports it: ``versions()`` with each version's summary, the
version current at a point in time (``dataset(asof=...)``), and ``stats.dataset_stats()``.

A version's summary is derived from its manifest alone, as pylance derives it:

* ``total_fragments``: fragments; ``total_data_files``: data files over all fragments;
* ``total_data_file_rows``: the fragments' ``physical_rows``; ``total_rows``: those rows
  minus ``total_deletion_file_rows`` (each deletion file's ``num_deleted_rows``);
* ``total_deletion_files``: fragments with a deletion file;
* ``total_files_size``: the data files' ``file_size_bytes`` (0 where a writer left it unset).

Every value is a decimal string, and ``timestamp`` a naive datetime in local time, as in
pylance (which converts the manifest's nanoseconds through float arithmetic; so do we).
"""

from __future__ import annotations

import datetime as _dt

from lance_gpu._proto import table_pb2
from lance_gpu.errors import VersionNotFoundError
from lance_gpu.io.store import ObjectStore
from lance_gpu.table.manifest import VersionInfo, list_versions, read_manifest

# pylance counts a fragment with fewer physical rows than this as a small file.
SMALL_FRAGMENT_ROWS = 1024


def manifest_summary(manifest: table_pb2.Manifest) -> dict[str, str]:
    """pylance's per-version ``metadata`` dict of ``manifest`` (see the module docstring)."""
    frags = list(manifest.fragments)
    physical = sum(int(f.physical_rows) for f in frags)
    deleted = sum(int(f.deletion_file.num_deleted_rows) for f in frags if f.HasField("deletion_file"))
    return {
        "total_data_file_rows": str(physical),
        "total_data_files": str(sum(len(f.files) for f in frags)),
        "total_deletion_file_rows": str(deleted),
        "total_deletion_files": str(sum(1 for f in frags if f.HasField("deletion_file"))),
        "total_files_size": str(sum(int(df.file_size_bytes) for f in frags for df in f.files)),
        "total_fragments": str(len(frags)),
        "total_rows": str(physical - deleted),
    }


def _version_time(manifest: table_pb2.Manifest) -> _dt.datetime:
    """A version's commit time as pylance's ``versions()`` gives it: naive local time in
    microseconds, from pylance's own conversion (float arithmetic included)."""
    ts_nanos = int(manifest.timestamp.seconds) * 10**9 + int(manifest.timestamp.nanos)
    return _dt.datetime.fromtimestamp(ts_nanos // 1e9) + _dt.timedelta(microseconds=(ts_nanos % 1e9) // 1e3)


def version_entry(info: VersionInfo) -> dict:
    """``{"version", "timestamp", "metadata"}`` of one version, as pylance's ``versions()``."""
    manifest = read_manifest(info.store, info.path)
    return {
        "version": info.version,
        "timestamp": _version_time(manifest),
        "metadata": manifest_summary(manifest),
    }


def versions(store: ObjectStore, root: str) -> list[dict]:
    """Every committed version of the dataset at ``root`` of ``store``, oldest first."""
    return [version_entry(info) for info in list_versions(store, root)]


def version_asof(store: ObjectStore, root: str, asof: _dt.datetime | _dt.date | str | float) -> int:
    """The latest version committed before ``asof`` (as pylance: strictly before, comparing
    the commit times its ``versions()`` gives).

    ``asof``: a datetime (naive means local time, as in pylance), a date, an ISO 8601
    string, or seconds since the epoch. Raises :class:`VersionNotFoundError` (a
    ``ValueError``, as pylance) when ``asof`` precedes the first version, and ``TypeError`` for
    any other kind of value.
    """
    when = _as_utc(asof)
    chosen = None
    for info in list_versions(store, root):
        # pylance keeps the versions whose versions() time is < asof
        if _version_time(read_manifest(store, info.path)).astimezone(_dt.UTC) < when:
            chosen = info.version
    if chosen is None:
        raise VersionNotFoundError(f"{asof} is earlier than the first version of this dataset ({store.uri(root)})")
    return chosen


def _as_utc(value: _dt.datetime | _dt.date | str | float) -> _dt.datetime:
    if isinstance(value, str):
        value = _dt.datetime.fromisoformat(value)
    if isinstance(value, bool):
        raise TypeError("asof must be a datetime, a date, an ISO 8601 string or epoch seconds, not bool")
    if isinstance(value, (int, float)):
        return _dt.datetime.fromtimestamp(value, _dt.UTC)
    if isinstance(value, _dt.datetime):
        return value.astimezone(_dt.UTC)  # a naive datetime is local time
    if isinstance(value, _dt.date):
        return _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.UTC)
    raise TypeError(f"asof must be a datetime, a date, an ISO 8601 string or epoch seconds, not {type(value).__name__}")


def dataset_stats(manifest: table_pb2.Manifest) -> dict[str, int]:
    """pylance's ``ds.stats.dataset_stats()`` of one version."""
    frags = list(manifest.fragments)
    return {
        "num_deleted_rows": sum(int(f.deletion_file.num_deleted_rows) for f in frags if f.HasField("deletion_file")),
        "num_fragments": len(frags),
        "num_small_files": sum(1 for f in frags if int(f.physical_rows) < SMALL_FRAGMENT_ROWS),
    }


def storage_version(manifest: table_pb2.Manifest) -> str:
    """pylance's ``data_storage_version`` of a version: the manifest's ``data_format``, or --
    for manifests of early pylance versions that left it unset -- the data files' version
    (``0.1`` for legacy files, whose ``DataFile`` version is 0.x or unset)."""
    if manifest.data_format.version:
        return manifest.data_format.version
    majors = {(int(df.file_major_version), int(df.file_minor_version)) for f in manifest.fragments for df in f.files}
    if not majors or any(major == 0 for major, _minor in majors):
        return "0.1"
    major, minor = max(majors)
    return f"{major}.{minor}"

