# SPDX-License-Identifier: Apache-2.0
"""One fragment of a dataset version, with pylance's ``LanceFragment`` read API.

A fragment is a manifest ``DataFragment``: ``physical_rows`` rows stored column-wise in one
or more data files (each holding some of the schema's fields), an optional deletion file
(the physical offsets of deleted rows) and optional stable row ids.  Reads go through a
:class:`~lance_gpu.scan.ScanPlan` restricted to this fragment.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError
from lance_gpu.file.container import FileVersion, LanceFileReader
from lance_gpu.io import join
from lance_gpu.table.consistency import check_data_file, data_file_of
from lance_gpu.table.deletion import read_deletion_file
from lance_gpu.table.rowids import read_fragment_row_ids
from lance_gpu.table.schema import LanceField
from lance_gpu.txn.fragment import DataFile, DeletionFile, FragmentMetadata

if TYPE_CHECKING:
    from lance_gpu.dataset import LanceDataset
    from lance_gpu.scan.scanner import LanceScanner


@dataclass(slots=True)
class FieldSource:
    """Where one top-level field of a fragment lives."""

    path: str  # data file
    columns: list[int]  # 2.1+: leaf columns in order; 2.0: every node, depth-first
    version: FileVersion | None = None


def _single_leaf(ds: LanceDataset, field: LanceField) -> bool:
    """Whether a take decodes ``field`` chunk by chunk (one leaf, no lists or structs)."""
    from lance_gpu.file.arrow import leaf_types

    arrow_type = ds.schema.field(field.name).type
    return leaf_types(arrow_type) == [arrow_type]


@dataclass(frozen=True, slots=True)
class _Location:
    """Where a field lives in the data files of one layout: the data file's position in the
    fragment's list, its columns (as :class:`FieldSource`) and version (2.0 or None)."""

    file: int
    columns: list[int]
    version: FileVersion | None


#: :meth:`LanceFragment._locate` results: the field has no data in the fragment / no data
#: file holds it although its ids are listed (corrupt).
_NOWHERE = object()
_MISSING = object()


class LanceFragment:
    """One fragment of a dataset version: data files, deletions, row ids."""

    def __init__(self, ds: LanceDataset, pb: table_pb2.DataFragment) -> None:
        self.dataset = ds
        self.pb = pb
        self.fragment_id = int(pb.id)
        self.physical_rows = int(pb.physical_rows)
        self._readers: dict[str, LanceFileReader] = {}
        self._readers_lock = threading.Lock()  # one reader (one footer fetch) per file
        self._rows_checked = False
        self._sources: dict[int, FieldSource | None] = {}  # field id -> where it lives

    def __repr__(self) -> str:
        return f"LanceFragment(id={self.fragment_id}, physical_rows={self.physical_rows})"

    @classmethod
    def create(
        cls, dataset_uri: Any, data: object, fragment_id: int | None = None, schema: pa.Schema | None = None,
        *args: Any, **kwargs: Any,
    ) -> FragmentMetadata:
        """Write ``data`` as one uncommitted fragment of the dataset at ``dataset_uri`` and
        return its :class:`~lance_gpu.txn.fragment.FragmentMetadata` (pylance's
        ``LanceFragment.create``); see :func:`lance_gpu.write.fragments.create_fragment`."""
        from lance_gpu.write.fragments import create_fragment

        return create_fragment(dataset_uri, data, fragment_id, schema, *args, **kwargs)

    @staticmethod
    def create_from_file(filename: str, dataset: LanceDataset, fragment_id: int) -> FragmentMetadata:
        """The fragment of a data file already written under the dataset's ``data/``.

        Parameters
        ----------
        filename : str
            The file's name under ``data/``.
        dataset : LanceDataset
            The dataset whose fields the file's columns are (matched by name).
        fragment_id : int
            The id to give it (an ``Append`` commit numbers it afresh).
        """
        from lance_gpu.write import fragment_ops

        return fragment_ops.create_from_file(filename, dataset, fragment_id)

    @property
    def metadata(self) -> FragmentMetadata:
        """This fragment's :class:`~lance_gpu.txn.fragment.FragmentMetadata` (pylance's
        shape: JSON round trip, pickleable)."""
        return FragmentMetadata.from_pb(self.pb)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_open_fragment, (self.dataset, self.fragment_id))

    @property
    def dataset_uri(self) -> str:
        return self.dataset.uri

    # -- metadata ---------------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The dataset schema (every fragment of a version reads with it)."""
        return self.dataset.schema

    @property
    def num_deletions(self) -> int:
        """Rows deleted from this fragment."""
        if not self.pb.HasField("deletion_file"):
            return 0
        n = int(self.pb.deletion_file.num_deleted_rows)
        return n if n else int(self.deleted_rows.size)

    def data_files(self) -> list[DataFile]:
        """The fragment's data files, in manifest order."""
        return [DataFile.from_pb(df) for df in self.pb.files]

    def deletion_file(self) -> DeletionFile | None:
        """The fragment's deletion file, or None when no row is deleted."""
        if not self.pb.HasField("deletion_file"):
            return None
        return DeletionFile.from_pb(self.pb.deletion_file)

    @cached_property
    def deleted_rows(self) -> np.ndarray:
        """Sorted physical offsets of deleted rows (uint32)."""
        if not self.pb.HasField("deletion_file"):
            return np.zeros(0, np.uint32)
        return read_deletion_file(self.dataset.store, self.dataset.root, self.fragment_id, self.pb.deletion_file)

    @cached_property
    def live_rows(self) -> np.ndarray | None:
        """Physical offsets of the rows not deleted, or None when nothing is deleted."""
        self.check_row_count()  # before sizing anything by physical_rows
        deleted = self.deleted_rows
        if deleted.size == 0:
            return None
        keep = np.ones(self.physical_rows, np.bool_)
        if deleted.size and int(deleted[-1]) >= self.physical_rows:
            raise CorruptFileError(self.dataset.uri, f"fragment {self.fragment_id} deletes row {int(deleted[-1])} of {self.physical_rows}")
        keep[deleted] = False
        return np.flatnonzero(keep)

    def live_count(self) -> int:
        """Rows not deleted (no deletion file is read when the manifest says how many), after
        :meth:`check_row_count`: a take's row positions, a window's skipped fragments and a
        scan's ``count_rows`` stand on these counts (:meth:`count_rows` without a filter
        trusts the manifest, as pylance's does)."""
        self.check_row_count()
        return self.physical_rows - self.num_deletions

    def check_row_count(self) -> None:
        """Check the manifest's ``physical_rows`` against the row count of the fragment's
        first data file, from its footer (opening the reader runs
        :func:`~lance_gpu.table.consistency.check_data_file`, which raises
        :class:`~lance_gpu.errors.CorruptFileError` naming the file when they differ).

        Reads that decode open the files anyway; counting (and mapping row positions to
        fragments) needs this for a corrupted but parseable ``physical_rows``.  Once per
        fragment object (one per dataset version handle), and the reader is kept for later
        reads.  Legacy (v1) files, which this package does not read, are not opened.
        """
        if self._rows_checked:
            return
        data_dir = join(self.dataset.root, "data")
        for df in self.pb.files:
            if int(df.file_major_version) == 0 and int(df.file_minor_version) <= 2:
                continue
            self.file_reader(join(data_dir, df.path))
            break
        self._rows_checked = True

    @cached_property
    def row_ids(self) -> np.ndarray:
        """Row id of every physical row: stable ids if the dataset has them, else addresses."""
        ids = read_fragment_row_ids(self.dataset.store, self.dataset.root, self.pb)
        if ids is not None:
            return ids
        return self.row_addresses(None)

    def row_addresses(self, rows: np.ndarray | None) -> np.ndarray:
        """Row addresses ``fragment_id << 32 | offset`` of the given physical rows (None: all)."""
        base = np.uint64(self.fragment_id) << np.uint64(32)
        if rows is None:  # one pass: the addresses of a whole fragment are a range
            return np.arange(base, base + np.uint64(self.physical_rows), dtype=np.uint64)
        return base | np.asarray(rows, np.uint64)

    # -- where fields live (for the executors) -----------------------------------------------

    def file_reader(self, path: str) -> LanceFileReader:
        """The (cached) reader of one of this fragment's data files, checked against the
        fragment's manifest entry (``physical_rows`` rows, the columns and field ids it names)."""
        r = self._readers.get(path)
        if r is None:
            with self._readers_lock:
                r = self._readers.get(path)
                if r is None:
                    r = LanceFileReader(path, self.dataset.store)
                    # its row count, columns and field ids against this fragment's manifest entry
                    check_data_file(r, self.pb, data_file_of(self.pb, path, join(self.dataset.root, "data")))
                    self._readers[path] = r
        return r

    def field_source(self, field: LanceField) -> FieldSource | None:
        """Where ``field`` lives; None if no data file of the fragment holds any of its
        fields (a column added without data: read as nulls, as the table format says).
        Kept per field id on the fragment (a fragment object belongs to one dataset version,
        whose schema fixes the field ids): each streaming window of the fragment asks again."""
        key = field.id
        if key in self._sources:
            return self._sources[key]
        src = self._field_source(field)
        self._sources[key] = src
        return src

    @cached_property
    def layout_key(self) -> tuple[tuple[Any, ...], ...]:
        """What places fields in this fragment's data files, without their names: per data
        file its field ids, column indices and file version.  Fragments written together
        share it, and so share where each field lives (:meth:`field_source`)."""
        return tuple((tuple(df.fields), tuple(df.column_indices), int(df.file_major_version), int(df.file_minor_version))
                     for df in self.pb.files)

    def _field_source(self, field: LanceField) -> FieldSource | None:
        key = (self.layout_key, field.id)
        found = self.dataset.field_locations.get(key)
        if found is None:
            found = self.dataset.field_locations[key] = self._locate(field)
        if found is _NOWHERE:
            return None
        if found is _MISSING:
            raise CorruptFileError(self.dataset.uri, f"fragment {self.fragment_id} has no data file holding field {field.name!r}")
        assert isinstance(found, _Location)
        return FieldSource(join(self.dataset.root, "data", self.pb.files[found.file].path), found.columns, found.version)

    def _locate(self, field: LanceField) -> object:
        """Where ``field`` lives in data files laid out as this fragment's: a
        :class:`_Location`, :data:`_NOWHERE` (no data: nulls) or :data:`_MISSING` (corrupt)."""
        ids = [f.id for f in field.walk()]
        leaf_ids = [f.id for f in field.walk() if f.is_leaf]
        wanted = set(ids)
        if not any(int(i) in wanted for df in self.pb.files for i in df.fields):
            return _NOWHERE
        for index, df in enumerate(self.pb.files):
            cmap = self.dataset.column_map(df)
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
                chunked = (rows is not None and len(src.columns) == 1 and src.version is None
                           and _single_leaf(self.dataset, field))
                (by_rows if chunked else whole).setdefault(src.path, []).extend(src.columns)
            for path, cols in whole.items():
                self.file_reader(path).prefetch(cols)
            for path, cols in by_rows.items():
                from lance_gpu.file.reader import prefetch_take

                reader = self.file_reader(path)
                assert rows is not None
                if reader.version == FileVersion(2, 0):
                    reader.prefetch(cols)
                else:
                    prefetch_take(reader, cols, rows)
        except Exception:  # noqa: BLE001 - the real read raises it
            return

    def drop_prefetched(self) -> None:
        """Let go of the bytes :meth:`prefetch` fetched (the scan is done with this fragment)."""
        for reader in list(self._readers.values()):
            drop = getattr(reader.io, "drop_prefetched", None)
            if drop is not None:
                drop()

    def read_field(self, field: LanceField, arrow_field: pa.Field, rows: np.ndarray | None) -> pa.Array | pa.ChunkedArray:
        """Decode one top-level field on the CPU, for all physical rows or the sorted ``rows``.

        A blob field (:func:`~lance_gpu.table.blobs.blob_kind`) reads as its descriptors
        (``struct<position, size>`` for blob v1), typed by
        :func:`~lance_gpu.table.blobs.description_field`, as pylance's scans return it."""
        from lance_gpu.table.blobs import blob_kind, description_field, read_descriptions

        blob = blob_kind(field) != 0
        if blob:
            arrow_field = description_field(field, arrow_field)
        if rows is not None and rows.size == 0:  # nothing to decode (a filter kept no row)
            return pa.schema([arrow_field]).empty_table().column(0).combine_chunks()
        if blob:  # one descriptor column (for blob v2 the struct's own id), not the children
            if any(int(i) == field.id for df in self.pb.files for i in df.fields):
                return read_descriptions(self, field, rows)
            src = None
        else:
            src = self.field_source(field)
        if src is None:
            return pa.nulls(self.physical_rows if rows is None else len(rows), arrow_field.type)
        reader = self.file_reader(src.path)
        if reader.version == FileVersion(2, 0):
            from lance_gpu.file.v2_0 import read_field as read_v20

            if rows is None:
                return read_v20(reader, arrow_field, src.columns, None)
            if rows.size == 0:
                return read_v20(reader, arrow_field, src.columns, (0, 0))
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            return read_v20(reader, arrow_field, src.columns, (lo, hi)).take(pa.array(rows - lo))
        from lance_gpu.file.reader import read_field, take_field

        if rows is None:
            return read_field(reader, arrow_field, src.columns)
        return take_field(reader, arrow_field, src.columns, rows)

    # -- reading (pylance's API) ---------------------------------------------------------------

    def scanner(self, *, columns: Sequence[str] | dict[str, str] | None = None, batch_size: int | None = None,
                filter: str | pc.Expression | None = None, limit: int | None = None,  # noqa: A002
                offset: int | None = None, with_row_id: bool = False, with_row_address: bool = False,
                batch_readahead: int = 16, **options: Any) -> LanceScanner:
        """A scanner over this fragment only; arguments as :meth:`LanceDataset.scanner`
        (but ``nearest``: pylance's fragments have no search)."""
        _refuse_search("scanner", options)
        return self.dataset.scanner(
            columns=columns, filter=filter, limit=limit, offset=offset, batch_size=batch_size,
            with_row_id=with_row_id, with_row_address=with_row_address, batch_readahead=batch_readahead,
            fragments=[self], **options,
        )

    def to_table(self, columns: Sequence[str] | dict[str, str] | None = None,
                 filter: str | pc.Expression | None = None, limit: int | None = None,  # noqa: A002
                 offset: int | None = None, with_row_id: bool = False, with_row_address: bool = False,
                 **options: Any) -> pa.Table:
        """This fragment's rows (deleted rows never appear); arguments as :meth:`scanner`."""
        _refuse_search("to_table", options)
        return self.scanner(columns=columns, filter=filter, limit=limit, offset=offset, with_row_id=with_row_id,
                            with_row_address=with_row_address, **options).to_table()

    def to_batches(self, *, columns: Sequence[str] | dict[str, str] | None = None, batch_size: int | None = None,
                   filter: str | pc.Expression | None = None, limit: int | None = None,  # noqa: A002
                   offset: int | None = None, with_row_id: bool = False, with_row_address: bool = False,
                   batch_readahead: int = 16, **options: Any) -> Iterator[pa.RecordBatch]:
        """Stream this fragment's rows; arguments as :meth:`scanner`."""
        _refuse_search("to_batches", options)
        return self.scanner(columns=columns, batch_size=batch_size, filter=filter, limit=limit, offset=offset,
                            with_row_id=with_row_id, with_row_address=with_row_address,
                            batch_readahead=batch_readahead, **options).to_batches()

    def to_pandas(self, columns: Sequence[str] | dict[str, str] | None = None, filter: str | pc.Expression | None = None,  # noqa: A002
                  limit: int | None = None, offset: int | None = None, **options: Any):
        """This fragment's rows as a ``pandas.DataFrame``.

        Parameters
        ----------
        columns, filter, limit, offset, **options
            As :meth:`to_table`.
        """
        return self.to_table(columns=columns, filter=filter, limit=limit, offset=offset, **options).to_pandas()

    def head(self, num_rows: int) -> pa.Table:
        """The first ``num_rows`` live rows."""
        return self.scanner(limit=num_rows).to_table()

    def count_rows(self, filter: str | pc.Expression | None = None) -> int:  # noqa: A002
        """Live rows, or those matching ``filter``.

        Without a filter, as pylance: the manifest's ``physical_rows`` less the deleted rows
        (the deletion file is read only where the manifest does not say how many), no data
        file opened -- its row count is checked when it is read (:meth:`check_row_count`)."""
        if filter is None:
            return self.physical_rows - self.num_deletions
        return self.scanner(filter=filter).count_rows()

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array, columns: Sequence[str] | dict[str, str] | None = None) -> pa.Table:
        """Rows at the given offsets among this fragment's live rows, in the order given."""
        from lance_gpu.scan import take_rows

        return take_rows(self.dataset, indices, columns, fragments=[self])

    # -- fragment-level writes for distributed pipelines (lance_gpu.write.fragment_ops) --------

    def delete(self, predicate: str) -> FragmentMetadata | None:
        """Delete the rows matching ``predicate`` (not committed).

        Parameters
        ----------
        predicate : str
            A SQL predicate selecting the rows to delete.

        Returns
        -------
        FragmentMetadata or None
            The fragment with its new deletion file, or None when no row is left; commit
            with ``LanceOperation.Delete``.
        """
        from lance_gpu.write import fragment_ops

        return fragment_ops.delete(self, predicate)

    def delete_rows(self, offsets: Iterable[int]) -> FragmentMetadata | None:
        """Delete the rows at the given physical offsets within this fragment (not committed).

        Parameters
        ----------
        offsets : iterable of int
            0-based physical row offsets.

        Returns
        -------
        FragmentMetadata or None
            As :meth:`delete`.
        """
        from lance_gpu.write import fragment_ops

        return fragment_ops.delete_rows(self, offsets)

    def merge_columns(self, value_func: Any, columns: list[str] | None = None, batch_size: int | None = None,
                      reader_schema: pa.Schema | None = None) -> tuple[FragmentMetadata, Any]:
        """Write new columns for this fragment (not committed).

        Parameters
        ----------
        value_func : dict, callable, BatchUDF or reader-like
            As :meth:`LanceDataset.add_columns` takes it.
        columns : list of str, optional
            The columns a function reads (``_rowid`` / ``_rowaddr`` allowed).
        batch_size : int, optional
            Rows per batch handed to a function.
        reader_schema : pyarrow.Schema, optional
            The schema of a reader-like ``value_func``.

        Returns
        -------
        tuple of FragmentMetadata and LanceSchema
            The fragment with one more data file and the new schema; commit with
            ``LanceOperation.Merge``.
        """
        from lance_gpu.write import fragment_ops

        return fragment_ops.merge_columns(self, value_func, columns, batch_size, reader_schema)

    def merge(self, data_obj: Any, left_on: str, right_on: str | None = None,
              schema: pa.Schema | None = None) -> tuple[FragmentMetadata, Any]:
        """Add the columns of ``data_obj`` joined on ``left_on = right_on`` (not committed;
        rows without a match get nulls).

        Parameters
        ----------
        data_obj : reader-like
            The new columns and the join column ``right_on``.
        left_on : str
            This fragment's join column.
        right_on : str, optional
            The new data's join column (default ``left_on``).
        schema : pyarrow.Schema, optional
            The schema of ``data_obj``.

        Returns
        -------
        tuple of FragmentMetadata and LanceSchema
            Commit with ``LanceOperation.Merge``.
        """
        from lance_gpu.write import fragment_ops

        return fragment_ops.merge(self, data_obj, left_on, right_on, schema)

    def update_columns(self, data_obj: Any, left_on: str = "_rowid", right_on: str | None = None,
                       schema: pa.Schema | None = None, *, with_offsets: bool = False) -> tuple[Any, ...]:
        """Replace existing columns' values where the new data's key matches (not committed).

        Parameters
        ----------
        data_obj : reader-like
            The join column ``right_on`` and the columns to update.
        left_on : str, default "_rowid"
            This fragment's join column (``_rowid`` / ``_rowaddr`` allowed).
        right_on : str, optional
            The new data's join column (default ``left_on``).
        schema : pyarrow.Schema, optional
            The schema of ``data_obj``.
        with_offsets : bool, default False
            Also return the matched physical offsets as a portable roaring bitmap.

        Returns
        -------
        tuple
            ``(FragmentMetadata, fields_modified)`` (plus the offsets' bytes); commit with
            ``LanceOperation.Update(updated_fragments=..., fields_modified=...)``.
        """
        from lance_gpu.write import fragment_ops

        return fragment_ops.update_columns(self, data_obj, left_on, right_on, schema, with_offsets=with_offsets)


def _open_fragment(ds: LanceDataset, fragment_id: int) -> LanceFragment:
    frag = ds.get_fragment(fragment_id)
    if frag is None:  # pragma: no cover - the pickled dataset pins the version
        msg = f"fragment {fragment_id} is not in version {ds.version} of {ds.uri}"
        raise KeyError(msg)
    return frag


def _refuse_search(method: str, options: dict[str, Any]) -> None:
    """pylance's fragment reads take no ``nearest`` (a ``TypeError``): a search runs on the dataset."""
    if "nearest" in options:
        from lance_gpu.errors import ArgumentTypeError

        raise ArgumentTypeError(f"LanceFragment.{method}() got an unexpected keyword argument 'nearest'")


def write_fragments(data: object, dataset_uri: Any, schema: pa.Schema | None = None, **kwargs: Any) -> Any:
    """Write ``data`` as uncommitted fragments of the dataset at ``dataset_uri`` (pylance's
    ``lance.fragment.write_fragments``, the first half of the commit API): returns their
    :class:`~lance_gpu.txn.fragment.FragmentMetadata` (or a transaction with
    ``return_transaction=True``) for :meth:`LanceDataset.commit`.

    Parameters
    ----------
    data : ReaderLike
        Anything :func:`lance_gpu.write_dataset` takes.
    dataset_uri : str, Path or LanceDataset
        The dataset the fragments are for (it need not exist yet).
    schema : pyarrow.Schema, optional
        The schema of ``data``.
    **kwargs
        pylance's keyword options (``mode``, ``max_rows_per_file``, ``max_bytes_per_file``,
        ``data_storage_version``, ``storage_options``, ``enable_stable_row_ids``,
        ``return_transaction``...); see :func:`lance_gpu.write.fragments.write_fragments`.
    """
    from lance_gpu.write.fragments import write_fragments as write

    return write(data, dataset_uri, schema, **kwargs)
