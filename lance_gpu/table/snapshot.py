# SPDX-License-Identifier: Apache-2.0
"""An immutable snapshot of one committed version of a table.

A :class:`TableSnapshot` is what every layer above works on: the store and root key of the
dataset, the version's manifest (and the manifest file's other sections), its schema, and its
fragments, both as columnar arrays (one entry per fragment, manifest order) and as
:class:`FragmentSnapshot` objects that read their data files.  Nothing in a snapshot changes
after it is built; the caches it keeps (file readers, where each field lives, column maps,
deletion vectors, row ids) are caches *of that version*, so they are valid for its lifetime
and die with it.

``LanceDataset`` and ``LanceFragment`` hold one snapshot and delegate to it.  A mutation
commits a new version, opens the new snapshot and swaps it into the dataset object with one
attribute assignment: threads sharing a dataset object always see one whole version.

Opening a snapshot reads the manifest only (and the version hint when no version is given):
no data or deletion file.  A data file is opened (and its footer's row count checked against
the manifest's ``physical_rows``, :func:`~lance_gpu.table.consistency.check_data_file`)
when a read first needs it.

Columnar arrays (one entry per fragment, manifest order):

* :attr:`TableSnapshot.fragment_ids` (``int64``) -- ``DataFragment.id``;
* :attr:`TableSnapshot.physical_rows` (``uint64``, the manifest's u64) -- rows stored in the
  fragment's data files, deleted rows included;
* :attr:`TableSnapshot.deletion_counts` (``int64``) -- rows its deletion file deletes: 0
  without one, -1 where the deletion file does not say (old writers): read it to know;
* :attr:`TableSnapshot.row_id_sequences` (``binary``) -- its inline stable row id sequence;
* :attr:`TableSnapshot.data_file_offsets` (``int64``, one more) -- where its data files are
  in the per-file arrays :attr:`TableSnapshot.data_file_paths` (``string``) and
  :attr:`TableSnapshot.data_file_fields` (``list<int32>``, field ids).

Fragment objects (:class:`FragmentSnapshot`) are views made on demand, referring to their
snapshot; the snapshot refers to them only weakly and keeps their reading caches itself, so
a version nobody holds is freed by reference counting, not by the cycle collector.  A
snapshot a commit opens takes over the caches of the fragments the commit left unchanged
(:meth:`TableSnapshot.adopt`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError, UnsupportedEncodingError
from lance_gpu.file.arrow import leaf_types
from lance_gpu.file.container import FileVersion, LanceFileReader, cached_metadata
from lance_gpu.file.legacy import LegacyFileReader, is_legacy_file_version
from lance_gpu.file.packed_fields import read_packed
from lance_gpu.file.reader import prefetch_take, read_field_files, take_field
from lance_gpu.file.reader import read_field as read_file_field
from lance_gpu.io import join
from lance_gpu.io.store import ObjectStore
from lance_gpu.table.blob_descriptions import blob_kind, description_field, read_descriptions
from lance_gpu.table.consistency import check_data_file
from lance_gpu.table.deletion import read_deletion_file
from lance_gpu.table.features import FLAG_STABLE_ROW_IDS, check_reader_flags
from lance_gpu.table.manifest import (
    ManifestFile,
    NamingScheme,
    latest_version,
    parse_version_file_name,
    read_manifest_file,
    resolve_manifest,
)
from lance_gpu.table.packed import packed_struct
from lance_gpu.table.rowids import read_fragment_row_ids
from lance_gpu.table.schema import LanceField, LanceSchema, column_index_map

__all__ = ["FieldSource", "FragmentSnapshot", "TableSnapshot", "read_field_span"]


@dataclass(slots=True)
class FieldSource:
    """Where one top-level field of a fragment lives."""

    path: str  # data file
    columns: list[int]  # 2.1+: leaf columns in order; 2.0: every node, depth-first; legacy: field ids so;
    # a packed struct (2.0 or 2.1+): its one column
    version: FileVersion | None = None  # 2.0, legacy (0.x) or None (2.1+)


@dataclass(frozen=True, slots=True)
class _Location:
    """Where a field lives in the data files of one layout: the data file's position in the
    fragment's list, its columns (as :class:`FieldSource`) and version (2.0 or None)."""

    file: int
    columns: list[int]
    version: FileVersion | None


#: The deleted rows of a fragment without a deletion file (shared, read only).
_NO_ROWS = np.zeros(0, np.uint32)
_NO_ROWS.flags.writeable = False

#: :meth:`FragmentSnapshot._locate` results: the field has no data in the fragment / no data
#: file holds it although its ids are listed (corrupt).
_NOWHERE = object()
_MISSING = object()

#: Held while a snapshot makes its :attr:`TableSnapshot.reader_locks` (once per snapshot).
_READER_LOCKS_MADE = threading.Lock()


class TableSnapshot:
    """One committed version of a table (see the module docstring); immutable.

    Parameters
    ----------
    store : ObjectStore
        The store holding the dataset.
    root : str
        The dataset's root key in ``store``.
    manifest_file : ManifestFile
        The version's parsed manifest file.
    storage_options : dict, optional
        The options ``store`` was built with (carried so a scan plan can reopen the version
        in another process).
    """

    def __init__(self, store: ObjectStore, root: str, manifest_file: ManifestFile,
                 storage_options: dict[str, str] | None = None) -> None:
        self.store = store
        self.root = root
        self.uri = store.uri(root)
        self.storage_options: dict[str, str] = dict(storage_options or {})
        self.manifest_file = manifest_file
        self.manifest_path = manifest_file.path
        head = manifest_file.head  # (a commit's new version: its fragments are parsed on first use)
        check_reader_flags(head.reader_feature_flags, manifest_file.path)
        self.lance_schema = LanceSchema.from_manifest(head, manifest_file.path)
        #: Field id -> column index maps of this version's data files, by the file's
        #: (field ids, column indices) lists: fragments written together share one.
        self._column_maps: dict[tuple[tuple[int, ...], tuple[int, ...]], dict[int, int]] = {}
        #: Where fields live in fragments of one data-file layout, by (the fragment's
        #: ``layout_key``, field id): computed once per layout, not per fragment.
        self.field_locations: dict[tuple[Any, int], object] = {}
        self._reader_locks: tuple[threading.Lock, ...] | None = None
        #: Caches of reading each fragment (:class:`_FragmentState`), by manifest position:
        #: they outlive the :class:`FragmentSnapshot` objects, which are views made on demand.
        self._states: dict[int, _FragmentState] = {}
        #: The fragment objects made so far, held weakly (see :attr:`fragments`).
        self._fragment_refs: list[weakref.ref[FragmentSnapshot] | None] = [None] * manifest_file.fragment_count

    @property
    def reader_locks(self) -> tuple[threading.Lock, ...]:
        """Locks the fragments share, by fragment id, for opening their file readers: 16,
        made on first use (a commit's new snapshot, one per commit, mostly opens no file),
        the same tuple for every caller even when several threads ask first at once."""
        locks = self._reader_locks
        if locks is None:
            with _READER_LOCKS_MADE:
                if self._reader_locks is None:
                    self._reader_locks = tuple([threading.Lock() for _ in range(16)])
                locks = self._reader_locks
        return locks

    @property
    def manifest(self) -> table_pb2.Manifest:
        """The version's whole manifest (read-only)."""
        return self.manifest_file.manifest

    @classmethod
    def load(cls, store: ObjectStore, root: str, version: int | str | None = None,
             storage_options: dict[str, str] | None = None) -> TableSnapshot:
        """The snapshot of ``version`` (a number or a tag; the latest if None): reads the
        manifest (and, for the latest, the version hint), nothing else."""
        info = resolve_manifest(store, root, version)
        return cls(store, root, read_manifest_file(store, info.path), storage_options)

    def checkout(self, version: int | str | None) -> TableSnapshot:
        """The snapshot of another version of the same dataset (None: the latest), with
        the caches of this one's fragments that it keeps unchanged (:meth:`adopt`)."""
        snapshot = TableSnapshot.load(self.store, self.root, version, self.storage_options)
        if snapshot is not self:
            snapshot.adopt(self)
        return snapshot

    def adopt(self, other: TableSnapshot) -> int:
        """Take over the reading caches (:class:`_FragmentState`) of ``other``'s fragments that
        this version keeps as they were, so a read after a commit does not open again the
        files the commit left alone: a commit's new snapshot is the old one plus what the
        transaction changed.  Per fragment id read in ``other``: its open readers of data
        files whose manifest entries (and the fragment's ``physical_rows``) are unchanged,
        and the schema unchanged, with the row-count check and where its fields live; its
        deleted rows when the deletion file is the same (and live rows, with the files);
        its row ids when the row id sequence is.  Returns how many fragments took
        something."""
        if other.store is not self.store or other.root != self.root or not other._states:
            return 0
        same_schema = list(other.manifest_file.head.fields) == list(self.manifest_file.head.fields)
        old = other.manifest.fragments
        taken = 0
        for position, state in list(other._states.items()):
            before = old[position]
            now_position = self._positions.get(int(before.id))
            if now_position is None:
                continue
            now = self.manifest.fragments[now_position]
            if now.physical_rows != before.physical_rows:
                continue
            fresh = _FragmentState()
            # (readers were checked against the fragment's entry and the schema: both the same)
            same_files = same_schema and list(now.files) == list(before.files)
            if same_files:
                fresh.readers = dict(state.readers)
                fresh.rows_checked = state.rows_checked
            same_deletions = now.HasField("deletion_file") == before.HasField("deletion_file") and (
                not now.HasField("deletion_file") or now.deletion_file == before.deletion_file)
            if same_deletions:
                fresh.deleted_rows = state.deleted_rows
                if same_files:
                    fresh.live_rows = state.live_rows
            if now.WhichOneof("row_id_sequence") == before.WhichOneof("row_id_sequence") and (
                    now.inline_row_ids == before.inline_row_ids and now.external_row_ids == before.external_row_ids):
                fresh.row_ids = state.row_ids
            if same_files:
                fresh.sources = dict(state.sources)
            if fresh.readers or fresh.deleted_rows is not None or fresh.row_ids is not None:
                self._states.setdefault(now_position, fresh)
                taken += 1
        return taken

    def latest(self) -> TableSnapshot:
        """The snapshot of the latest version (this one when nothing was committed since)."""
        newest = latest_version(self.store, self.root).version
        return self if newest == self.version else self.checkout(newest)

    def committed(self, manifest_file: ManifestFile) -> TableSnapshot:
        """The snapshot of the version a commit on this one just published, from the
        manifest file the commit wrote (:func:`lance_gpu.txn.commit.commit_file`): what
        :meth:`checkout` of it gives, without finding and reading it again."""
        snapshot = TableSnapshot(self.store, self.root, manifest_file, self.storage_options)
        snapshot.adopt(self)
        return snapshot

    def __repr__(self) -> str:
        return f"TableSnapshot(uri={self.uri!r}, version={self.version})"

    # -- metadata ---------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return int(self.manifest_file.head.version)

    @cached_property
    def naming(self) -> NamingScheme:
        """How the dataset names its manifests (what a commit on this version names the
        next one): from this version's manifest name, without a request; a detached
        version asks the latest version."""
        parsed = parse_version_file_name(self.manifest_path.rsplit("/", 1)[-1])
        return parsed[1] if parsed is not None else latest_version(self.store, self.root).naming

    @cached_property
    def schema(self) -> pa.Schema:
        """The version's Arrow schema."""
        return self.lance_schema.to_arrow()

    @property
    def has_stable_row_ids(self) -> bool:
        """Whether row ids survive compaction and updates (the stable row id feature)."""
        return bool(self.manifest_file.head.reader_feature_flags & FLAG_STABLE_ROW_IDS)

    @property
    def index_metadata(self) -> list[table_pb2.IndexMetadata]:
        """The manifest's index entries of this version."""
        section = self.manifest_file.index_section
        return list(section.indices) if section is not None else []

    @cached_property
    def fragment_ids(self) -> np.ndarray:
        return np.fromiter((f.id for f in self.manifest.fragments), np.int64, len(self.manifest.fragments))

    @cached_property
    def physical_rows(self) -> np.ndarray:
        return np.fromiter((f.physical_rows for f in self.manifest.fragments), np.uint64, len(self.manifest.fragments))

    @cached_property
    def deletion_counts(self) -> np.ndarray:
        return np.fromiter(
            ((f.deletion_file.num_deleted_rows or -1) if f.HasField("deletion_file") else 0 for f in self.manifest.fragments),
            np.int64, len(self.manifest.fragments),
        )

    @cached_property
    def data_dir(self) -> str:
        """The key prefix of the data files, ``{root}/data/``: a manifest's ``DataFile.path``
        (relative, no leading or trailing ``/``) appended gives the file's key."""
        return join(self.root, "data") + "/"

    @cached_property
    def data_file_offsets(self) -> np.ndarray:
        """Where each fragment's data files are in the per-file arrays (``int64``, one more
        than the fragments): fragment ``i``'s are entries ``[offsets[i], offsets[i + 1])``
        of :attr:`data_file_paths` and :attr:`data_file_fields`, in manifest order."""
        counts = np.fromiter((len(f.files) for f in self.manifest.fragments), np.int64, len(self.manifest.fragments))
        offsets = np.zeros(counts.size + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        return offsets

    @cached_property
    def data_file_paths(self) -> pa.StringArray:
        """Every data file's path relative to the dataset's ``data/`` (as the manifest's
        ``DataFile.path``), fragment after fragment (:attr:`data_file_offsets`)."""
        return pa.array([df.path for f in self.manifest.fragments for df in f.files], pa.string())

    @cached_property
    def data_file_fields(self) -> pa.ListArray:
        """Every data file's field ids (``DataFile.fields``, ``list<int32>``), aligned with
        :attr:`data_file_paths`."""
        return pa.array([list(df.fields) for f in self.manifest.fragments for df in f.files], pa.list_(pa.int32()))

    @cached_property
    def row_id_sequences(self) -> pa.BinaryArray:
        """Each fragment's inline serialized ``RowIdSequence`` (stable row ids), null where the
        fragment has none or keeps it in an external file (read through the fragment)."""
        return pa.array([f.inline_row_ids if f.WhichOneof("row_id_sequence") == "inline_row_ids" else None
                         for f in self.manifest.fragments], pa.binary())

    def count_rows(self) -> int:
        """Live rows, from the manifest (deletion files read only where it does not say how
        many rows they delete); no data file is opened."""
        deleted = self.deletion_counts
        unknown = np.flatnonzero(deleted < 0)
        # Python integers: the manifest's u64 counts add without wrapping, as pylance's
        total = sum(self.physical_rows.tolist()) - sum(deleted[deleted > 0].tolist())
        return total - sum(int(self.fragment_at(int(i)).deleted_rows.size) for i in unknown)

    def positions_of(self, fragment_ids: Sequence[int]) -> list[int]:
        """The manifest positions of fragments by id (a ``KeyError`` for an id not in
        this version)."""
        positions = self._positions
        return [positions[int(fid)] for fid in fragment_ids]

    def live_counts(self) -> list[int]:
        """Each fragment's live rows as the manifest says, in manifest order (Python
        integers, as :meth:`FragmentSnapshot.count_rows`): from the arrays, no fragment object
        made except where a deletion file does not record how many rows it deletes."""
        counts = self.physical_rows.tolist()
        deleted = self.deletion_counts
        for i in np.flatnonzero(deleted).tolist():
            n = int(deleted[i])
            counts[i] -= n if n > 0 else int(self.fragment_at(i).deleted_rows.size)
        return counts

    @property
    def fragments(self) -> tuple[FragmentSnapshot, ...]:
        """The fragments, in manifest order.

        A snapshot refers to its fragment objects only weakly (each fragment refers to its
        snapshot, strongly): a version nobody uses any more is freed by reference counting,
        its file readers closed at once, without waiting for the cycle collector.  A
        fragment object lives as long as someone holds it; one made again is equal to it
        (same snapshot, same position) and shares its caches (:class:`_FragmentState`)."""
        return tuple(self.fragment_at(i) for i in range(len(self._fragment_refs)))

    def fragment_at(self, position: int) -> FragmentSnapshot:
        """The fragment at ``position`` in manifest order."""
        ref = self._fragment_refs[position]
        frag = None if ref is None else ref()
        if frag is None:
            frag = FragmentSnapshot(self, position)
            self._fragment_refs[position] = weakref.ref(frag)
        return frag

    def fragment_state(self, position: int) -> _FragmentState:
        """The caches of reading the fragment at ``position`` (made on first use)."""
        state = self._states.get(position)
        if state is None:
            state = self._states.setdefault(position, _FragmentState())
        return state

    @cached_property
    def _positions(self) -> dict[int, int]:
        return {int(fid): i for i, fid in enumerate(self.fragment_ids)}

    def get_fragments(self) -> list[FragmentSnapshot]:
        return list(self.fragments)

    def get_fragment(self, fragment_id: int) -> FragmentSnapshot | None:
        """The fragment with this id, or None."""
        pos = self._positions.get(int(fragment_id))
        return None if pos is None else self.fragment_at(pos)

    def fragment(self, fragment_id: int) -> FragmentSnapshot:
        """The fragment with this id (a ``KeyError`` naming the version when there is none)."""
        found = self.get_fragment(fragment_id)
        if found is None:
            raise KeyError(f"fragment {fragment_id} is not in version {self.version} of {self.uri}")
        return found

    def column_map(self, data_file: Any) -> dict[int, int]:
        """:func:`~lance_gpu.table.schema.column_index_map` of one of this version's data
        files (a ``DataFile`` protobuf) against this version's schema, computed once per
        distinct layout."""
        key = (tuple(data_file.fields), tuple(data_file.column_indices))
        cmap = self._column_maps.get(key)
        if cmap is None:
            cmap = self._column_maps[key] = column_index_map(data_file, self.lance_schema)
        return cmap


def _single_leaf(snapshot: TableSnapshot, field: LanceField) -> bool:
    """Whether a take decodes ``field`` chunk by chunk (one leaf, no lists or structs)."""
    arrow_type = snapshot.schema.field(field.name).type
    return leaf_types(arrow_type) == [arrow_type]


class _FragmentState:
    """The caches of reading one fragment of a version, kept by its :class:`TableSnapshot`
    (by manifest position) for the version's lifetime: its open file readers (by store
    key), whether its row count was checked against a data file, where each field lives
    (by field id), its deleted rows, live rows and row ids.  Nothing here refers back to a
    snapshot or fragment object, so no reference cycle keeps a version alive."""

    __slots__ = ("deleted_rows", "live_rows", "readers", "row_ids", "rows_checked", "sources")

    def __init__(self) -> None:
        self.readers: dict[str, LanceFileReader | LegacyFileReader] = {}
        self.rows_checked = False
        self.sources: dict[int, FieldSource | None] = {}
        self.deleted_rows: np.ndarray | None = None
        self.live_rows: np.ndarray | bool | None = False  # False: not computed yet
        self.row_ids: np.ndarray | None = None


class FragmentSnapshot:
    """One fragment of a :class:`TableSnapshot`: its manifest entry, and the caches of reading
    it (file readers, where fields live, deleted rows, row ids) -- valid as long as the
    version, so kept by the snapshot (:class:`_FragmentState`).

    A view made on demand (:meth:`TableSnapshot.fragment_at`): it refers to its snapshot, the
    snapshot does not refer to it (but weakly), so versions die by reference counting.  Two
    views of the same position of the same snapshot are equal."""

    # slots: a read over a thousand fragments makes a thousand of these views, each one
    # object for the cycle collector to track (no ``__dict__``), weakly referable
    __slots__ = ("__weakref__", "_data_paths", "_layout_key", "_readers_lock", "_state", "fragment_id", "pb",
                 "physical_rows", "position", "snapshot")

    def __init__(self, snapshot: TableSnapshot, position: int) -> None:
        self._data_paths: tuple[str, ...] | None = None
        self._layout_key: tuple[tuple[Any, ...], ...] | None = None
        self.snapshot = snapshot
        #: The fragment's position in the manifest's fragment list.
        self.position = position
        self.pb: table_pb2.DataFragment = snapshot.manifest.fragments[position]
        self.fragment_id = int(self.pb.id)
        self.physical_rows = int(self.pb.physical_rows)
        self._state = snapshot.fragment_state(position)
        # one reader (one footer fetch) per file: locks shared by the snapshot's fragments
        # (a lock per fragment is a thousand objects for a thousand fragments)
        self._readers_lock = snapshot.reader_locks[self.fragment_id % len(snapshot.reader_locks)]

    def __repr__(self) -> str:
        return f"FragmentSnapshot(id={self.fragment_id}, physical_rows={self.physical_rows})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FragmentSnapshot):
            return NotImplemented
        return self.snapshot is other.snapshot and self.position == other.position

    def __hash__(self) -> int:
        return hash((id(self.snapshot), self.position))

    @property
    def uri(self) -> str:
        """The dataset's URI."""
        return self.snapshot.uri

    @property
    def num_deletions(self) -> int:
        """Rows deleted from this fragment."""
        if not self.pb.HasField("deletion_file"):
            return 0
        n = int(self.pb.deletion_file.num_deleted_rows)
        return n if n else int(self.deleted_rows.size)

    def count_rows(self) -> int:
        """Live rows as the manifest says (no data file opened)."""
        return self.physical_rows - self.num_deletions

    @property
    def deleted_rows(self) -> np.ndarray:
        """Sorted physical offsets of deleted rows (uint32)."""
        state = self._state
        if state.deleted_rows is None:
            if not self.pb.HasField("deletion_file"):
                state.deleted_rows = _NO_ROWS
            else:
                state.deleted_rows = read_deletion_file(self.snapshot.store, self.snapshot.root, self.fragment_id,
                                                        self.pb.deletion_file)
        return state.deleted_rows

    @property
    def live_rows(self) -> np.ndarray | None:
        """Physical offsets of the rows not deleted, or None when nothing is deleted."""
        state = self._state
        if state.live_rows is not False:
            return state.live_rows  # type: ignore[return-value]
        self.check_row_count()  # before sizing anything by physical_rows
        deleted = self.deleted_rows
        live: np.ndarray | None = None
        if deleted.size:
            if int(deleted[-1]) >= self.physical_rows:
                raise CorruptFileError(self.uri, f"fragment {self.fragment_id} deletes row {int(deleted[-1])} of {self.physical_rows}")
            keep = np.ones(self.physical_rows, np.bool_)
            keep[deleted] = False
            live = np.flatnonzero(keep)
        state.live_rows = live
        return live

    def live_count(self) -> int:
        """Rows not deleted, from the manifest, as pylance counts them: a take's row positions
        and a window's skipped fragments stand on these counts.  No data file is opened: the
        footer check (:meth:`check_row_count`) runs when a fragment's rows are read, so a
        fragment whose manifest count lies raises :class:`~lance_gpu.errors.CorruptFileError`
        before any of its rows is returned, and positions in other fragments are those
        pylance gives (a take over many small fragments opens only the files it reads)."""
        return self.count_rows()

    def check_row_count(self) -> None:
        """Check the manifest's ``physical_rows`` against the row count of the fragment's
        first data file, from its footer (opening the reader runs
        :func:`~lance_gpu.table.consistency.check_data_file`, which raises
        :class:`~lance_gpu.errors.CorruptFileError` naming the file when they differ).

        Called by reads that position rows before decoding them; once per fragment of a
        snapshot, and the reader is kept for the read -- unless this process read the same
        file state before (:func:`~lance_gpu.file.container.cached_metadata`: one ``stat``
        finds its row count; a take over many small fragments checks them all).  A fragment one of whose data files
        is open already is checked (every reader is checked when opened: all of a
        fragment's files hold ``physical_rows`` rows).
        """
        state = self._state
        if state.rows_checked or state.readers:
            return
        for path in self.data_paths[:1]:
            # a file this process opened and checked before, in the same state (a stat, no
            # open): its footer's row count is known; else (or when it differs) open it, the
            # reader's check raising the typed error
            meta = cached_metadata(self.snapshot.store, path)
            if meta is None or meta.known_rows != self.physical_rows:
                self.file_reader(path)
        state.rows_checked = True

    @property
    def row_ids(self) -> np.ndarray:
        """Row id of every physical row: stable ids if the dataset has them, else addresses."""
        state = self._state
        if state.row_ids is None:
            ids = read_fragment_row_ids(self.snapshot.store, self.snapshot.root, self.pb)
            state.row_ids = ids if ids is not None else self.row_addresses(None)
        return state.row_ids

    def row_addresses(self, rows: np.ndarray | None) -> np.ndarray:
        """Row addresses ``fragment_id << 32 | offset`` of the given physical rows (None: all)."""
        base = np.uint64(self.fragment_id) << np.uint64(32)
        if rows is None:  # one pass: the addresses of a whole fragment are a range
            return np.arange(base, base + np.uint64(self.physical_rows), dtype=np.uint64)
        return base | np.asarray(rows, np.uint64)

    # -- where fields live (for the executors) -----------------------------------------------

    @property
    def data_paths(self) -> tuple[str, ...]:
        """The store keys of the fragment's data files, in manifest order."""
        paths = self._data_paths
        if paths is None:
            data_dir = self.snapshot.data_dir
            paths = self._data_paths = tuple(
                data_dir + path if path and path[0] != "/" and path[-1] != "/" else join(data_dir, path)
                for path in (df.path for df in self.pb.files))
        return paths

    def file_reader(self, path: str) -> LanceFileReader | LegacyFileReader:
        """The (cached) reader of one of this fragment's data files, checked against the
        fragment's manifest entry (``physical_rows`` rows, the columns and field ids it names).
        A legacy (0.1) data file -- its ``DataFile`` version 0.0 to 0.2 -- gets a
        :class:`~lance_gpu.file.legacy.LegacyFileReader`."""
        readers = self._state.readers
        r = readers.get(path)
        if r is None:
            with self._readers_lock:
                r = readers.get(path)
                if r is None:
                    paths = self.data_paths  # one to a few: a scan, not a dict per fragment
                    index = paths.index(path) if path in paths else None
                    df = None if index is None else self.pb.files[index]
                    if df is not None and is_legacy_file_version(int(df.file_major_version), int(df.file_minor_version)):
                        r = LegacyFileReader(path, self.snapshot.store)
                    else:
                        r = LanceFileReader(path, self.snapshot.store)
                    # its row count, columns and field ids against this fragment's manifest entry
                    check_data_file(r, self.pb, None if index is None else self.pb.files[index],
                                    self.snapshot.lance_schema)
                    readers[path] = r
        return r

    def field_source(self, field: LanceField) -> FieldSource | None:
        """Where ``field`` lives; None if no data file of the fragment holds any of its
        fields (a column added without data: read as nulls, as the table format says).
        Kept per field id (the snapshot's schema fixes the field ids): each streaming window
        of the fragment asks again."""
        sources = self._state.sources
        key = field.id
        if key in sources:
            return sources[key]
        src = self._field_source(field)
        sources[key] = src
        return src

    @property
    def layout_key(self) -> tuple[tuple[Any, ...], ...]:
        """What places fields in this fragment's data files, without their names: per data
        file its field ids, column indices and file version.  Fragments written together
        share it, and so share where each field lives (:meth:`field_source`)."""
        key = self._layout_key
        if key is None:
            key = self._layout_key = tuple(
                (tuple(df.fields), tuple(df.column_indices), int(df.file_major_version), int(df.file_minor_version))
                for df in self.pb.files)
        return key

    def _field_source(self, field: LanceField) -> FieldSource | None:
        key = (self.layout_key, field.id)
        locations = self.snapshot.field_locations
        found = locations.get(key)
        if found is None:
            found = locations[key] = self._locate(field)
        if found is _NOWHERE:
            return None
        if found is _MISSING:
            raise CorruptFileError(self.uri, f"fragment {self.fragment_id} has no data file holding field {field.name!r}")
        assert isinstance(found, _Location)
        return FieldSource(self.data_paths[found.file], found.columns, found.version)

    def _locate(self, field: LanceField) -> object:
        """Where ``field`` lives in data files laid out as this fragment's: a
        :class:`_Location`, :data:`_NOWHERE` (no data: nulls) or :data:`_MISSING` (corrupt)."""
        ids = [f.id for f in field.walk()]
        leaf_ids = [f.id for f in field.walk() if f.is_leaf]
        wanted = set(ids)
        if not any(int(i) in wanted for df in self.pb.files for i in df.fields):
            return _NOWHERE
        if packed_struct(field):
            # one column under the struct's own id (its children have none): see
            # :mod:`lance_gpu.file.packed_fields`
            for index, df in enumerate(self.pb.files):
                major, minor = int(df.file_major_version), int(df.file_minor_version)
                if is_legacy_file_version(major, minor):
                    continue
                cmap = self.snapshot.column_map(df)
                if field.id in cmap:
                    return _Location(index, [cmap[field.id]], FileVersion(2, 0) if (major, minor) == (2, 0) else None)
            return _MISSING
        for index, df in enumerate(self.pb.files):
            major, minor = int(df.file_major_version), int(df.file_minor_version)
            if is_legacy_file_version(major, minor):
                if wanted <= {int(i) for i in df.fields}:
                    return _Location(index, ids, FileVersion(major, minor))
                continue
            cmap = self.snapshot.column_map(df)
            if df.file_major_version == 2 and df.file_minor_version == 0 and all(i in cmap for i in ids):
                return _Location(index, [cmap[i] for i in ids], FileVersion(2, 0))
            if leaf_ids and all(i in cmap for i in leaf_ids):
                return _Location(index, [cmap[i] for i in leaf_ids], None)
        return _MISSING

    def prefetch(self, fields: Sequence[LanceField], rows: np.ndarray | None = None) -> None:
        """Fetch the bytes of ``fields`` from an object store ahead of decoding (best effort:
        a failure here surfaces again, typed, when the fields are read).

        ``rows`` None: every buffer of the fields, one coalesced concurrent fetch per data
        file.  Sorted physical ``rows`` (a take, late materialization): for single-leaf
        fields of 2.1+ files only what a take of them reads
        (:func:`~lance_gpu.file.reader.prefetch_take`: the chunks holding scattered rows,
        the pages holding a run); other fields whole, as before; nothing for no rows."""
        if rows is not None and rows.size == 0:
            return
        try:
            whole: dict[str, list[int]] = {}
            by_rows: dict[str, list[int]] = {}
            for field in fields:
                src = self.field_source(field)
                if src is None:
                    continue
                if src.version is not None and src.version.major == 0:
                    continue  # legacy pages are read when decoded
                chunked = (rows is not None and len(src.columns) == 1 and src.version is None
                           and _single_leaf(self.snapshot, field))
                (by_rows if chunked else whole).setdefault(src.path, []).extend(src.columns)
            for path, cols in whole.items():
                self.file_reader(path).prefetch(cols)
            for path, cols in by_rows.items():
                reader = self.file_reader(path)
                assert rows is not None
                if not isinstance(reader, LanceFileReader) or reader.version == FileVersion(2, 0):
                    reader.prefetch(cols)
                else:
                    prefetch_take(reader, cols, rows)
        except Exception:  # noqa: BLE001 - the real read raises it
            return

    def drop_prefetched(self) -> None:
        """Let go of the bytes :meth:`prefetch` fetched (the scan is done with this fragment)."""
        for reader in list(self._state.readers.values()):
            drop = getattr(reader.io, "drop_prefetched", None)
            if drop is not None:
                drop()

    def blob_column(self, field: LanceField) -> tuple[str, int, LanceFileReader]:
        """Where blob ``field``'s descriptors are: ``(data file path, column, reader)``."""
        for df in self.pb.files:
            columns = column_index_map(df, self.snapshot.lance_schema)
            if field.id in columns:
                path = join(self.snapshot.root, "data", df.path)
                reader = self.file_reader(path)
                if not isinstance(reader, LanceFileReader):
                    raise UnsupportedEncodingError(f"{path}: blob field {field.name!r} in a legacy (0.1) data file")
                return path, columns[field.id], reader
        raise UnsupportedEncodingError(f"fragment {self.fragment_id}: no data file holds blob field {field.name!r}")

    def blob_descriptions(self, field: LanceField, rows: np.ndarray | None) -> pa.Array:
        """The descriptors of blob ``field`` for all physical rows or the sorted ``rows``
        (:func:`~lance_gpu.table.blob_descriptions.read_descriptions`)."""
        path, column, reader = self.blob_column(field)
        return read_descriptions(reader, path, column, field, rows)

    def read_field(self, field: LanceField, arrow_field: pa.Field, rows: np.ndarray | None) -> pa.Array | pa.ChunkedArray:
        """Decode one top-level field on the CPU, for all physical rows or the sorted ``rows``.

        A blob field (:func:`~lance_gpu.table.blob_descriptions.blob_kind`) reads as its descriptors
        (``struct<position, size>`` for blob v1), typed by
        :func:`~lance_gpu.table.blob_descriptions.description_field`, as pylance's scans return it."""
        blob = blob_kind(field) != 0
        if blob:
            arrow_field = description_field(field, arrow_field)
        if rows is not None and rows.size == 0:  # nothing to decode (a filter kept no row)
            return pa.schema([arrow_field]).empty_table().column(0).combine_chunks()
        if blob:  # one descriptor column (for blob v2 the struct's own id), not the children
            if any(int(i) == field.id for df in self.pb.files for i in df.fields):
                return self.blob_descriptions(field, rows)
            src = None
        else:
            src = self.field_source(field)
        if src is None:
            return pa.nulls(self.physical_rows if rows is None else len(rows), arrow_field.type)
        reader = self.file_reader(src.path)
        if packed_struct(field) and isinstance(reader, LanceFileReader):
            return read_packed(reader, arrow_field, src.columns[0], rows)
        if isinstance(reader, LegacyFileReader):
            return reader.read_field(arrow_field, src.columns, rows)
        if reader.version == FileVersion(2, 0):
            from lance_gpu.file.v2_0 import read_field as read_v20

            if rows is None:
                return read_v20(reader, arrow_field, src.columns, None)
            if rows.size == 0:
                return read_v20(reader, arrow_field, src.columns, (0, 0))
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            return read_v20(reader, arrow_field, src.columns, (lo, hi)).take(pa.array(rows - lo))
        if rows is None:
            return read_file_field(reader, arrow_field, src.columns)
        return take_field(reader, arrow_field, src.columns, rows)


def read_field_span(parts: Sequence[tuple[FragmentSnapshot, np.ndarray | None]], field: LanceField,
                    arrow_field: pa.Field) -> pa.Array | pa.ChunkedArray:
    """One top-level field of several fragments of one snapshot, in order, as one column:
    per ``(fragment, rows)`` part its sorted physical ``rows`` (None: every physical row).

    Consecutive fragments whose field lives in 2.1+ data files are decoded together, whole
    (:func:`~lance_gpu.file.reader.read_field_files`: one decode for the pages of all their
    files), and the selected rows taken from the result in one take; callers keep such
    fragments small (a whole fragment is decoded for any selection of it).  Other parts --
    2.0 files, blob descriptors, fields without data (nulls) -- are read one by one
    (:meth:`FragmentSnapshot.read_field`).  Parts selecting no row add nothing.
    """
    if len(parts) == 1:
        frag, rows = parts[0]
        return frag.read_field(field, arrow_field, rows)
    if blob_kind(field) or packed_struct(field):
        pieces = [frag.read_field(field, arrow_field, rows) for frag, rows in parts]
        return pa.chunked_array(pieces, type=pieces[0].type) if pieces else pa.chunked_array([], arrow_field.type)
    pieces = []
    run: list[tuple[LanceFileReader, list[int]]] = []
    run_rows: list[tuple[int, np.ndarray | None]] = []  # (physical rows, selection) per file of the run

    def flush() -> None:
        if not run:
            return
        arr = read_field_files(run, arrow_field)
        if any(rows is not None for _n, rows in run_rows):
            base = 0
            positions = []
            for n, rows in run_rows:
                positions.append(np.arange(base, base + n, dtype=np.int64) if rows is None else rows.astype(np.int64) + base)
                base += n
            arr = arr.take(pa.array(np.concatenate(positions)))
        pieces.append(arr)
        run.clear()
        run_rows.clear()

    for frag, rows in parts:
        if rows is not None and rows.size == 0:
            continue
        # (not kept per fragment, as field_source does: where a field lives is kept per
        # layout already, and a span's many fragments would each keep an entry per field)
        src = frag._field_source(field)
        reader = None if src is None else frag.file_reader(src.path)
        if reader is None or src is None or not isinstance(reader, LanceFileReader) or reader.version == FileVersion(2, 0):
            flush()
            pieces.append(frag.read_field(field, arrow_field, rows))
            continue
        for column in src.columns:
            # the file's pages must hold the fragment's rows, leaf by leaf: decoded together,
            # a file short of rows would shift the rows of the files after it
            held = reader.column(column).num_rows
            if held != frag.physical_rows:
                msg = f"column {column} (field {field.name!r}) holds {held} rows but fragment {frag.fragment_id} has {frag.physical_rows}"
                raise CorruptFileError(reader.path, msg)
        run.append((reader, src.columns))
        run_rows.append((frag.physical_rows, rows))
    flush()
    if len(pieces) == 1:
        return pieces[0]
    return pa.chunked_array(pieces, type=arrow_field.type)
