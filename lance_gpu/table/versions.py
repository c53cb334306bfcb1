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
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError, DatasetNotFoundError, VersionNotFoundError
from lance_gpu.io.store import ObjectStore
from lance_gpu.protobuf import parse_strict
from lance_gpu.table.manifest import VersionInfo, list_versions, parse_manifest_message
from lance_gpu.table.manifest_bytes import entry_of_fragment_bytes

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


# -- versions(): each manifest read once, its fragments kept as bytes ------------------------

#: Columns of :class:`_FragmentStats`: what one fragment adds to a version's summary.
_PHYSICAL, _FILES, _SIZE, _DELETION_FILES, _DELETED = range(5)
#: Sums at or above this are added as Python ints (no int64 overflow, whatever a manifest says).
_EXACT_ABOVE = 1 << 40
#: pylance adds the counts as u64s, wrapping around.
_U64 = 1 << 64
#: Manifests fetched at once from an object store (each is one GET).
_CONCURRENT_READS = 16

_OUTLINE_LOCK = threading.Lock()
_OUTLINE: Any = None


def _outline_class() -> Any:
    """A message of ``lance.table.Manifest``'s fields in which ``fragments`` is declared
    ``repeated bytes``: parsing it checks every field as strictly as the full message but
    leaves each fragment as its serialized bytes (no per-fragment Python object)."""
    global _OUTLINE
    with _OUTLINE_LOCK:
        if _OUTLINE is None:
            table = descriptor_pb2.FileDescriptorProto()
            table_pb2.DESCRIPTOR.CopyToProto(table)
            outline = descriptor_pb2.FileDescriptorProto(
                name="lance_gpu/manifest_outline.proto", package="lance_gpu.outline", syntax=table.syntax
            )
            outline.dependency.extend([table.name, *table.dependency])
            msg = outline.message_type.add()
            msg.CopyFrom(next(m for m in table.message_type if m.name == "Manifest"))
            own, ours = ".lance.table.Manifest.", ".lance_gpu.outline.Manifest."

            def retarget(m: descriptor_pb2.DescriptorProto) -> None:
                for fd in m.field:  # nested types (map entries) are this copy's own
                    if fd.type_name.startswith(own):
                        fd.type_name = ours + fd.type_name[len(own) :]
                for nested in m.nested_type:
                    retarget(nested)

            retarget(msg)
            frags = next(fd for fd in msg.field if fd.name == "fragments")
            frags.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
            frags.ClearField("type_name")
            pool = descriptor_pool.Default()
            try:
                pool.FindFileByName(outline.name)
            except KeyError:
                pool.Add(outline)
            _OUTLINE = message_factory.GetMessageClass(pool.FindMessageTypeByName("lance_gpu.outline.Manifest"))
        return _OUTLINE


#: New fragments of one version parsed together (:meth:`_FragmentStats._add_all`) from this many.
_BATCH_PARSE_MIN = 8


class _FragmentStats:
    """What each distinct fragment adds to a version's summary, by the fragment's exact
    serialized bytes: versions share most of their fragments, so each is parsed once however
    many manifests list it."""

    def __init__(self) -> None:
        self.index: dict[bytes, int] = {}
        self.values = np.zeros((64, 5), np.int64)
        self.exact: list[tuple[int, int, int, int, int]] = []

    def _add(self, raw: bytes, path: str) -> int:
        frag = parse_strict(table_pb2.DataFragment, raw, path, "manifest fragment")
        row = (
            int(frag.physical_rows),
            len(frag.files),
            sum(int(df.file_size_bytes) for df in frag.files),
            int(frag.HasField("deletion_file")),
            int(frag.deletion_file.num_deleted_rows) if frag.HasField("deletion_file") else 0,
        )
        i = len(self.exact)
        if i == len(self.values):
            self.values = np.concatenate([self.values, np.zeros_like(self.values)])
        self.values[i] = [min(v, _EXACT_ABOVE) for v in row]
        self.exact.append(row)
        self.index[raw] = i
        return i

    def _add_all(self, raws: list[bytes], path: str) -> None:
        """:meth:`_add` of many distinct new fragments with one parse: their entries joined as
        a ``Manifest``'s ``fragments`` (tag ``0x12``, varint length, the bytes), parsed and
        checked at once (C speed).  Bytes that do not parse so are left to :meth:`_add`,
        which names the fault as a single fragment's."""
        joined = b"".join(entry_of_fragment_bytes(raw) for raw in raws)
        try:
            holder = parse_strict(table_pb2.Manifest, joined, path, "manifest fragments")
        except CorruptFileError:
            return
        if len(holder.fragments) != len(raws):
            return
        rows = [
            (
                int(f.physical_rows),
                len(f.files),
                sum(int(df.file_size_bytes) for df in f.files),
                int(f.HasField("deletion_file")),
                int(f.deletion_file.num_deleted_rows) if f.HasField("deletion_file") else 0,
            )
            for f in holder.fragments
        ]
        start = len(self.exact)
        need = start + len(rows)
        if need > len(self.values):
            grown = np.zeros((max(need, 2 * len(self.values)), 5), np.int64)
            grown[:start] = self.values[:start]
            self.values = grown
        block = np.minimum(np.array(rows, np.uint64), np.uint64(_EXACT_ABOVE)).astype(np.int64)
        self.values[start:need] = block
        self.exact.extend(rows)
        for i, raw in enumerate(raws, start):
            self.index[raw] = i

    def summary(self, fragments: Sequence[bytes], path: str) -> dict[str, str]:
        """pylance's ``metadata`` dict of a version whose fragments are ``fragments``."""
        get = self.index.get
        idx = [get(raw, -1) for raw in fragments]
        if -1 in idx:
            unseen = list(dict.fromkeys(raw for i, raw in zip(idx, fragments, strict=True) if i < 0))
            if len(unseen) >= _BATCH_PARSE_MIN:
                self._add_all(unseen, path)
            idx = [i if i >= 0 else self.index.get(raw, -1) for i, raw in zip(idx, fragments, strict=True)]
            idx = [i if i >= 0 else self._add(raw, path) for i, raw in zip(idx, fragments, strict=True)]
        rows = self.values[idx]
        totals = [int(t) for t in rows.sum(axis=0)] if len(idx) else [0] * 5
        if len(idx) and int(rows.max()) >= _EXACT_ABOVE:  # a huge count: add as pylance's u64s
            totals = [sum(self.exact[i][c] for i in idx) % _U64 for c in range(5)]
        physical, deleted = totals[_PHYSICAL], totals[_DELETED]
        return {
            "total_data_file_rows": str(physical),
            "total_data_files": str(totals[_FILES]),
            "total_deletion_file_rows": str(deleted),
            "total_deletion_files": str(totals[_DELETION_FILES]),
            "total_files_size": str(totals[_SIZE]),
            "total_fragments": str(len(idx)),
            "total_rows": str((physical - deleted) % _U64),
        }


def _version_time(manifest: Any) -> _dt.datetime:
    """A version's commit time as pylance's ``versions()`` gives it: naive local time in
    microseconds, from pylance's own conversion (float arithmetic included)."""
    ts_nanos = int(manifest.timestamp.seconds) * 10**9 + int(manifest.timestamp.nanos)
    return _dt.datetime.fromtimestamp(ts_nanos // 1e9) + _dt.timedelta(microseconds=(ts_nanos % 1e9) // 1e3)


def _outlines(store: ObjectStore, infos: Sequence[VersionInfo]) -> Iterator[tuple[VersionInfo, Any]]:
    """Each version's manifest as an outline (:func:`_outline_class`), in order: read whole
    (one request each; from object stores several at once, a bounded number held)."""
    cls = _outline_class()

    def read(info: VersionInfo) -> Any:
        try:
            data = store.get(info.path)
        except FileNotFoundError as exc:
            raise DatasetNotFoundError(f"manifest {store.uri(info.path)} does not exist") from exc
        return parse_manifest_message(data, store.uri(info.path), cls)

    if getattr(store, "maps_files", False) or len(infos) <= 1:
        for info in infos:
            yield info, read(info)
        return
    with ThreadPoolExecutor(_CONCURRENT_READS, thread_name_prefix="lance-gpu-versions") as pool:
        for start in range(0, len(infos), 4 * _CONCURRENT_READS):
            chunk = infos[start : start + 4 * _CONCURRENT_READS]
            yield from zip(chunk, pool.map(read, chunk), strict=True)


def version_entry(info: VersionInfo) -> dict:
    """``{"version", "timestamp", "metadata"}`` of one version, as pylance's ``versions()``."""
    [(_info, outline)] = list(_outlines(info.store, [info]))
    return {
        "version": info.version,
        "timestamp": _version_time(outline),
        "metadata": _FragmentStats().summary(outline.fragments, info.store.uri(info.path)),
    }


def versions(store: ObjectStore, root: str) -> list[dict]:
    """Every committed version of the dataset at ``root`` of ``store``, oldest first.

    One listing of ``_versions/``, then each manifest read once and parsed as an outline:
    its fragments stay bytes, and each distinct fragment is parsed once for all the versions
    that share it (a history of N appends parses N fragments, not N²/2).
    """
    stats = _FragmentStats()
    return [
        {
            "version": info.version,
            "timestamp": _version_time(outline),
            "metadata": stats.summary(outline.fragments, store.uri(info.path)),
        }
        for info, outline in _outlines(store, list_versions(store, root))
    ]


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
    for info, outline in _outlines(store, list_versions(store, root)):
        # pylance keeps the versions whose versions() time is < asof
        if _version_time(outline).astimezone(_dt.UTC) < when:
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
    (``2.0`` for files of version 0.3, as 2.0 files were first numbered; ``0.1`` for legacy
    files, whose ``DataFile`` version is 0.0-0.2 or unset)."""
    if manifest.data_format.version:
        return manifest.data_format.version
    # a file version 0.3 is 2.0 (the version 2.0 files' footers carry); 0.0-0.2 are legacy
    majors = {(2, 0) if (int(df.file_major_version), int(df.file_minor_version)) == (0, 3)
              else (int(df.file_major_version), int(df.file_minor_version)) for f in manifest.fragments for df in f.files}
    if not majors or any(major == 0 for major, _minor in majors):
        return "0.1"
    major, minor = max(majors)
    return f"{major}.{minor}"

