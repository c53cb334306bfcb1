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
from lance_gpu.protobuf import canonical_without_unknowns, parse_strict
from lance_gpu.table.manifest import VersionInfo, list_versions, parse_manifest_message
from lance_gpu.table.manifest_bytes import join_fragment_entries

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

_COLUMNS_LOCK = threading.Lock()
_COLUMNS: tuple[Any, Any, Any] | None = None


def _column_classes() -> tuple[Any, Any, Any]:
    """Messages that read the summary's fields of many concatenated messages at once.

    Protobuf appends every occurrence of a repeated field, so the bodies of N DataFragments
    joined end to end, parsed as ``FragmentColumns`` (``physical_rows`` declared repeated,
    ``files`` and ``deletion_file`` repeated bytes), give every fragment's row count and
    every data file and deletion file; the DataFiles joined, parsed as ``FileColumns``, every
    ``file_size_bytes``; the DeletionFiles as ``DeletionColumns``, every
    ``num_deleted_rows``.  Field numbers and types are the table protos' own; every other
    field of the bodies is skipped as unknown (their strictness is checked beforehand)."""
    global _COLUMNS
    with _COLUMNS_LOCK:
        if _COLUMNS is None:
            f = descriptor_pb2.FieldDescriptorProto
            proto = descriptor_pb2.FileDescriptorProto(name="lance_gpu/summary_columns.proto", package="lance_gpu.columns", syntax="proto3")

            def message(name: str, fields: list[tuple[Any, int]]) -> None:
                msg = proto.message_type.add(name=name)
                for fd, wire_type in fields:
                    msg.field.add(name=fd.name, number=fd.number, type=wire_type, label=f.LABEL_REPEATED)

            frag, data_file, deletion = (table_pb2.DataFragment.DESCRIPTOR, table_pb2.DataFile.DESCRIPTOR, table_pb2.DeletionFile.DESCRIPTOR)
            message("FragmentColumns", [
                (frag.fields_by_name["physical_rows"], f.TYPE_UINT64),
                (frag.fields_by_name["files"], f.TYPE_BYTES),
                (frag.fields_by_name["deletion_file"], f.TYPE_BYTES),
            ])
            message("FileColumns", [(data_file.fields_by_name["file_size_bytes"], f.TYPE_UINT64)])
            message("DeletionColumns", [(deletion.fields_by_name["num_deleted_rows"], f.TYPE_UINT64)])
            pool = descriptor_pool.Default()
            try:
                pool.FindFileByName(proto.name)
            except KeyError:
                pool.Add(proto)
            _COLUMNS = tuple(  # type: ignore[assignment]
                message_factory.GetMessageClass(pool.FindMessageTypeByName(f"lance_gpu.columns.{name}"))
                for name in ("FragmentColumns", "FileColumns", "DeletionColumns")
            )
        assert _COLUMNS is not None
        return _COLUMNS


def _column_totals(raws: list[bytes]) -> list[int] | None:
    """The summary columns (:class:`_FragmentStats`) summed over the serialized fragments
    ``raws`` (duplicates counted), without a Python object per fragment: ``None`` unless their
    bytes are exactly the encoding of their known fields (:func:`canonical_without_unknowns`,
    the strict check that lets every other field be skipped); then the caller parses them one
    by one, which also names a faulty fragment."""
    if not canonical_without_unknowns(table_pb2.Manifest, join_fragment_entries(raws)):
        return None
    fragment_columns, file_columns, deletion_columns = _column_classes()
    columns = fragment_columns.FromString(b"".join(raws))
    sizes = file_columns.FromString(b"".join(columns.files)).file_size_bytes
    deleted = deletion_columns.FromString(b"".join(columns.deletion_file)).num_deleted_rows
    return [sum(columns.physical_rows), len(columns.files), sum(sizes), len(columns.deletion_file), sum(deleted)]


def _fragment_row(fragment: table_pb2.DataFragment) -> tuple[int, int, int, int, int]:
    """What ``fragment`` adds to a summary, in the columns of :class:`_FragmentStats`."""
    files = fragment.files
    count = len(files)
    size = files[0].file_size_bytes if count == 1 else sum([df.file_size_bytes for df in files])
    if fragment.HasField("deletion_file"):
        return (fragment.physical_rows, count, size, 1, fragment.deletion_file.num_deleted_rows)
    return (fragment.physical_rows, count, size, 0, 0)


class _FragmentStats:
    """What each distinct fragment adds to a version's summary, by the fragment's exact
    serialized bytes: versions share most of their fragments, so each is parsed once however
    many manifests list it."""

    def __init__(self) -> None:
        self.index: dict[bytes, int] = {}
        self.values = np.zeros((64, 5), np.int64)
        self.exact: list[tuple[int, int, int, int, int]] = []
        # the last version summarised: its fragments, their rows, its exact totals
        self._previous: tuple[list[bytes], list[int], list[int]] | None = None

    def _add(self, raw: bytes, path: str) -> int:
        row = _fragment_row(parse_strict(table_pb2.DataFragment, raw, path, "manifest fragment"))
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
        try:
            holder = parse_strict(table_pb2.Manifest, join_fragment_entries(raws), path, "manifest fragments")
        except CorruptFileError:
            return
        if len(holder.fragments) != len(raws):
            return
        rows = [_fragment_row(f) for f in holder.fragments]
        start = len(self.exact)
        need = start + len(rows)
        if need > len(self.values):
            grown = np.zeros((max(need, 2 * len(self.values)), 5), np.int64)
            grown[:start] = self.values[:start]
            self.values = grown
        try:
            block = np.array(rows, np.int64)
        except OverflowError:  # a count past int64: clipped here, added exactly by summary()
            block = np.minimum(np.array(rows, np.uint64), np.uint64(_EXACT_ABOVE)).astype(np.int64)
        self.values[start:need] = np.minimum(block, _EXACT_ABOVE)
        self.exact.extend(rows)
        self.index.update(zip(raws, range(start, need), strict=True))

    def _tail(self, fragments: list[bytes], path: str, last: bool) -> tuple[list[int] | None, list[int]]:
        """The rows of ``fragments`` (parsing those not seen before) and their exact column
        totals; rows ``None`` when ``last`` let the new ones be summed without rows."""
        get = self.index.get
        idx = [get(raw, -1) for raw in fragments]
        new_totals = None
        if -1 in idx:
            new = [raw for i, raw in zip(idx, fragments, strict=True) if i < 0]
            if last and len(new) >= _BATCH_PARSE_MIN:
                new_totals = _column_totals(new)
            if new_totals is None:
                unseen = list(dict.fromkeys(new))
                if len(unseen) >= _BATCH_PARSE_MIN:
                    self._add_all(unseen, path)
                for raw in unseen:
                    if raw not in self.index:
                        self._add(raw, path)
                index = self.index
                idx = [index[raw] for raw in fragments]
            else:
                idx = [i for i in idx if i >= 0]
        totals = [0] * 5
        if idx:
            rows = self.values[idx]
            if int(rows.max()) >= _EXACT_ABOVE:  # a huge count: added exactly
                totals = [sum(self.exact[i][c] for i in idx) for c in range(5)]
            else:
                totals = [int(t) for t in rows.sum(axis=0)]
        if new_totals is not None:
            return None, [a + b for a, b in zip(totals, new_totals, strict=True)]
        return idx, totals

    def summary(self, fragments: Sequence[bytes], path: str, *, last: bool = False) -> dict[str, str]:
        """pylance's ``metadata`` dict of a version whose fragments are ``fragments``.

        A version that lists the previous one's fragments first, in order (an append), adds
        only its new ones to that version's totals: the comparison runs at C speed, so a
        history of appends costs no Python per old fragment.  ``last``: no later version will
        be summarised, so the fragments not seen before need not be remembered one by one:
        they are summed together (:func:`_column_totals`)."""
        listed = list(fragments)
        head: list[int] = []
        totals = [0] * 5
        previous = self._previous
        if previous is not None:
            before, before_idx, before_totals = previous
            if len(listed) >= len(before) and listed[: len(before)] == before:
                head, totals, listed_tail = before_idx, before_totals, listed[len(before) :]
            else:
                listed_tail = listed
        else:
            listed_tail = listed
        tail, tail_totals = self._tail(listed_tail, path, last)
        totals = [a + b for a, b in zip(totals, tail_totals, strict=True)]
        self._previous = None if tail is None else (listed, head + tail, totals)
        totals = [t % _U64 for t in totals]  # pylance adds the counts as u64s
        physical, deleted = totals[_PHYSICAL], totals[_DELETED]
        return {
            "total_data_file_rows": str(physical),
            "total_data_files": str(totals[_FILES]),
            "total_deletion_file_rows": str(deleted),
            "total_deletion_files": str(totals[_DELETION_FILES]),
            "total_files_size": str(totals[_SIZE]),
            "total_fragments": str(len(listed)),
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
        "metadata": _FragmentStats().summary(outline.fragments, info.store.uri(info.path), last=True),
    }


def versions(store: ObjectStore, root: str) -> list[dict]:
    """Every committed version of the dataset at ``root`` of ``store``, oldest first.

    One listing of ``_versions/``, then each manifest read once and parsed as an outline:
    its fragments stay bytes, and each distinct fragment is parsed once for all the versions
    that share it (a history of N appends parses N fragments, not N²/2).
    """
    stats = _FragmentStats()
    infos = list_versions(store, root)
    return [
        {
            "version": info.version,
            "timestamp": _version_time(outline),
            "metadata": stats.summary(outline.fragments, store.uri(info.path), last=info is infos[-1]),
        }
        for info, outline in _outlines(store, infos)
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

