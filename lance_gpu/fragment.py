# SPDX-License-Identifier: Apache-2.0
"""One fragment of a dataset version, with pylance's ``LanceFragment`` read API.

A fragment is a manifest ``DataFragment``: ``physical_rows`` rows stored column-wise in one
or more data files (each holding some of the schema's fields), an optional deletion file
(the physical offsets of deleted rows) and optional stable row ids.  Reads go through a
:class:`~lance_gpu.scan.ScanPlan` restricted to this fragment.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu import ops, txn, write
from lance_gpu._lazy import lazy_dir, lazy_names
from lance_gpu._proto import table_pb2
from lance_gpu.errors import ArgumentTypeError
from lance_gpu.scan import scanner_for, take_rows
from lance_gpu.table.snapshot import FragmentSnapshot

if TYPE_CHECKING:
    from lance_gpu.dataset import LanceDataset
    from lance_gpu.scan.scanner import LanceScanner
    from lance_gpu.txn.fragment import DataFile as DataFile
    from lance_gpu.txn.fragment import DeletionFile as DeletionFile
    from lance_gpu.txn.fragment import FragmentMetadata as FragmentMetadata

# The writes, the sorted scan and the metadata classes reach their modules through the
# packages (``write.fragment_ops``...), loaded at first use (lance_gpu._lazy): reading a
# fragment loads none of them.  pylance's ``lance.fragment`` names (``DataFile``...) load
# the same way.
_LAZY = {
    "DataFile": "lance_gpu.txn.fragment", "DeletionFile": "lance_gpu.txn.fragment",
    "FragmentMetadata": "lance_gpu.txn.fragment",
}
__getattr__ = lazy_names(__name__, _LAZY, submodules=False)
__dir__ = lazy_dir(__name__, _LAZY)


class LanceFragment:
    """One fragment of a dataset version (pylance's ``LanceFragment``): a facade over a
    :class:`~lance_gpu.table.snapshot.FragmentSnapshot`.  It reads the version it was taken
    from, also after its dataset object moved to another version."""

    def __init__(self, ds: LanceDataset, fragment: FragmentSnapshot) -> None:
        self.dataset = ds
        #: The fragment of the table snapshot this object reads.
        self.snapshot = fragment

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
        return write.fragments.create_fragment(dataset_uri, data, fragment_id, schema, *args, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_open_fragment, (self.dataset, self.snapshot.snapshot.version, self.fragment_id))

    # -- metadata (the manifest's: no data file is opened) ------------------------------------

    @property
    def fragment_id(self) -> int:
        return self.snapshot.fragment_id

    @property
    def physical_rows(self) -> int:
        """Rows stored in the fragment's data files, deleted rows included."""
        return self.snapshot.physical_rows

    @property
    def pb(self) -> table_pb2.DataFragment:
        """The manifest's ``DataFragment`` message (read only)."""
        return self.snapshot.pb

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
        return write.fragment_ops.create_from_file(filename, dataset.snapshot, fragment_id)

    @property
    def metadata(self) -> FragmentMetadata:
        """This fragment's :class:`~lance_gpu.txn.fragment.FragmentMetadata` (pylance's
        shape: JSON round trip, pickleable)."""
        return txn.fragment.FragmentMetadata.from_pb(self.snapshot.pb)

    @property
    def dataset_uri(self) -> str:
        return self.snapshot.uri

    @property
    def schema(self) -> pa.Schema:
        """The dataset schema of the fragment's version (every fragment of a version reads with it)."""
        return self.snapshot.snapshot.schema

    @property
    def num_deletions(self) -> int:
        """Rows deleted from this fragment."""
        return self.snapshot.num_deletions

    def data_files(self) -> list[DataFile]:
        """The fragment's data files, in manifest order."""
        return [txn.fragment.DataFile.from_pb(df) for df in self.snapshot.pb.files]

    def deletion_file(self) -> DeletionFile | None:
        """The fragment's deletion file, or None when no row is deleted."""
        pb = self.snapshot.pb
        return txn.fragment.DeletionFile.from_pb(pb.deletion_file) if pb.HasField("deletion_file") else None

    # -- reading (pylance's API) ---------------------------------------------------------------

    def scanner(self, *, columns: Sequence[str] | dict[str, str] | None = None, batch_size: int | None = None,
                filter: str | pc.Expression | None = None, limit: int | None = None,  # noqa: A002
                offset: int | None = None, with_row_id: bool = False, with_row_address: bool = False,
                batch_readahead: int = 16, **options: Any) -> LanceScanner:
        """A scanner over this fragment only; arguments as :meth:`LanceDataset.scanner`
        (but ``nearest``: pylance's fragments have no search)."""
        _refuse_search("scanner", options)
        order_by = options.pop("order_by", None)
        if order_by is not None:
            return ops.ordering.ordered_scanner(
                lambda **kw: self.scanner(**kw), order_by, columns=columns, limit=limit, offset=offset, filter=filter,
                batch_size=batch_size, with_row_id=with_row_id, with_row_address=with_row_address,
                batch_readahead=batch_readahead, **options,
            )
        options.setdefault("device", self.dataset.device)
        return scanner_for(
            self.snapshot.snapshot, columns=columns, filter=filter, limit=limit, offset=offset, batch_size=batch_size,
            with_row_id=with_row_id, with_row_address=with_row_address, batch_readahead=batch_readahead,
            fragments=[self.snapshot], **options,
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
            return self.snapshot.count_rows()
        return self.scanner(filter=filter).count_rows()

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array, columns: Sequence[str] | dict[str, str] | None = None) -> pa.Table:
        """Rows at the given offsets among this fragment's live rows, in the order given."""
        return take_rows(self.snapshot.snapshot, indices, columns, fragments=[self.snapshot], device=self.dataset.device)

    def open_session(self, columns: Sequence[str] | dict[str, str] | None = None,
                     with_row_address: bool | None = None) -> FragmentSession:
        """A :class:`FragmentSession`: repeated takes of the same columns of this fragment.

        Parameters
        ----------
        columns : list of str or dict of str to str, optional
            Columns, or output names to SQL expressions (default: every column).
        with_row_address : bool, optional
            Add ``_rowaddr`` to each take.
        """
        return FragmentSession(self, columns, bool(with_row_address))

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
        return write.fragment_ops.delete(self.snapshot, predicate)

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
        return write.fragment_ops.delete_rows(self.snapshot, offsets)

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
        return write.fragment_ops.merge_columns(self.snapshot, value_func, columns, batch_size, reader_schema, device=self.dataset.device)

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
        return write.fragment_ops.merge(self.snapshot, data_obj, left_on, right_on, schema, device=self.dataset.device)

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
        return write.fragment_ops.update_columns(self.snapshot, data_obj, left_on, right_on, schema, with_offsets=with_offsets,
                                           device=self.dataset.device)


def _open_fragment(ds: LanceDataset, version: int, fragment_id: int) -> LanceFragment:
    """Unpickle a fragment: the fragment of the pickled dataset object at the version it was taken from."""
    at = ds if ds.version == version else ds.checkout_version(version)
    frag = at.get_fragment(fragment_id)
    if frag is None:  # pragma: no cover - the version is pinned
        msg = f"fragment {fragment_id} is not in version {version} of {ds.uri}"
        raise KeyError(msg)
    return frag


def _refuse_search(method: str, options: dict[str, Any]) -> None:
    """pylance's fragment reads take no ``nearest`` (a ``TypeError``): a search runs on the dataset."""
    if "nearest" in options:
        raise ArgumentTypeError(f"LanceFragment.{method}() got an unexpected keyword argument 'nearest'")


class FragmentSession:
    """Takes of fixed columns from one fragment (pylance's ``FragmentSession``, from
    :meth:`LanceFragment.open_session`)."""

    def __init__(self, fragment: LanceFragment, columns: Sequence[str] | dict[str, str] | None,
                 with_row_address: bool) -> None:
        self._fragment = fragment
        self._columns = columns
        self._with_row_address = with_row_address

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array) -> pa.Table:
        """Rows at the given offsets among the fragment's live rows, in the order given.

        Parameters
        ----------
        indices : array-like of int
            Offsets of the rows to take.
        """
        frag = self._fragment
        table = take_rows(frag.snapshot.snapshot, np.asarray(list(indices) if isinstance(indices, range) else indices),
                          self._columns, fragments=[frag.snapshot], with_row_address=self._with_row_address,
                          device=frag.dataset.device)
        return table.combine_chunks()


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
    return write.fragments.write_fragments(data, dataset_uri, schema, **kwargs)
