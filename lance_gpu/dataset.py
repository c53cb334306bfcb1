# SPDX-License-Identifier: Apache-2.0
"""The user-facing dataset: pylance's read API over our table and file layers.

Every read is a :class:`~lance_gpu.scan.ScanPlan` run by the CPU or GPU executor
(:mod:`lance_gpu.scan`); this module only opens versions and forwards arguments.
"""

from __future__ import annotations

import functools
import os
import random
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pa_dataset

from lance_gpu import index, ops, table, txn, write
from lance_gpu._device import DEVICES
from lance_gpu._lazy import lazy_dir, lazy_names
from lance_gpu.errors import CleanupError, InvalidArgumentError, UnknownDeviceError, UnsupportedFeatureError
from lance_gpu.fragment import LanceFragment
from lance_gpu.io import resolve
from lance_gpu.scan import LanceScanner, scanner_for, take_addresses, take_rows
from lance_gpu.scan.plan import ROW_ADDR, ROW_ID
from lance_gpu.table.blobs import take_blobs
from lance_gpu.table.manifest import DETACHED_VERSION_MASK, latest_version
from lance_gpu.table.snapshot import TableSnapshot

if TYPE_CHECKING:
    from lance_gpu.ops.housekeeping import AutoCleanupConfig as AutoCleanupConfig
    from lance_gpu.ops.ordering import ColumnOrdering as ColumnOrdering
    from lance_gpu.ops.sql import SqlQueryBuilder as SqlQueryBuilder
    from lance_gpu.ops.stats import DatasetStats as DatasetStats
    from lance_gpu.table.schema_view import LanceSchema as SchemaView
    from lance_gpu.write.compaction import DatasetOptimizer as DatasetOptimizer
    from lance_gpu.write.history import LANCE_COMMIT_MESSAGE_KEY as LANCE_COMMIT_MESSAGE_KEY
    from lance_gpu.write.rowlevel import MergeInsertBuilder as MergeInsertBuilder

# The mutation, history, index and housekeeping methods reach their modules through the
# packages above (``write.operations.delete``...), which load a submodule at its first use
# (lance_gpu._lazy): opening and reading a dataset loads none of them.  pylance's
# ``lance.dataset`` names (``AutoCleanupConfig``...) load the same way.
_LAZY = {
    "AutoCleanupConfig": "lance_gpu.ops.housekeeping", "ColumnOrdering": "lance_gpu.ops.ordering",
    "SqlQueryBuilder": "lance_gpu.ops.sql", "DatasetStats": "lance_gpu.ops.stats",
    "DatasetOptimizer": "lance_gpu.write.compaction", "LANCE_COMMIT_MESSAGE_KEY": "lance_gpu.write.history",
    "MergeInsertBuilder": "lance_gpu.write.rowlevel",
}
__getattr__ = lazy_names(__name__, _LAZY, submodules=False)
__dir__ = lazy_dir(__name__, _LAZY)

__all__ = ["ROW_ID", "LanceDataset", "LanceFragment", "dataset", "write_dataset"]

Columns = Sequence[str] | dict[str, str] | None


def dataset(
    uri: str | os.PathLike[str],
    version: int | str | None = None,
    asof: Any = None,
    *,
    device: str = "auto",
    storage_options: dict[str, str] | None = None,
    store: object = None,
    default_scan_options: dict[str, Any] | None = None,
    read_params: dict[str, Any] | None = None,
    **options: Any,
) -> LanceDataset:
    """Open a Lance dataset at its latest version, or at ``version`` (a number or a tag).

    Parameters
    ----------
    uri : str or path
        Local path, ``file://``, ``s3://``, ``gs://``, ``az://``, ``memory://``,
        ``http(s)://`` (see :mod:`lance_gpu.io.resolve`).
    version : int or str, optional
        Version number or tag; the latest if None.
    asof : datetime, optional
        Open the latest version committed at or before this time (a naive datetime is local
        time); ignored when ``version`` is given, as in pylance.
    device : str, default "auto"
        ``"auto"`` (the GPU when usable), ``"gpu"`` or ``"cpu"``; anything else raises
        :class:`~lance_gpu.errors.UnknownDeviceError` (a ``ValueError``) here.
    storage_options : dict, optional
        pylance's storage options (credentials, endpoint, ``allow_http``, timeouts, retries).
    store : optional
        An :class:`lance_gpu.io.ObjectStore`, obstore store or fsspec file system to read
        from; ``uri`` is then the dataset's path inside it.
    default_scan_options : dict, optional
        Scanner arguments every scan of this dataset gets unless it gives them
        (``{"with_row_id": True}``...).
    read_params : dict, optional
        pylance's file reader tuning (``cache_repetition_index``, ``validate_on_decode``);
        accepted, lance-gpu's reader needs neither.
    **options
        pylance's cache and session options (``block_size``, ``index_cache_size``,
        ``metadata_cache_size_bytes``, ``session``...), accepted and unused; ``commit_lock``
        (``commit_lock(version)`` -> context manager) is held around the commits of this
        object's mutations and of its ``merge_insert`` builders.
    """
    ds = _open(uri, version, asof, device, storage_options, store)
    if default_scan_options:
        ds._default_scan_options = dict(default_scan_options)
    ds._commit_lock = options.get("commit_lock")
    return ds


def _with_commit_lock(method: Any) -> Any:
    """A mutation of a dataset opened with ``commit_lock=``: its commits take that lock
    (unless given their own), as pylance's do."""

    @functools.wraps(method)
    def run(self: LanceDataset, *args: Any, **kwargs: Any) -> Any:
        if self._commit_lock is None:
            return method(self, *args, **kwargs)
        token = txn.DEFAULT_COMMIT_LOCK.set(self._commit_lock)
        try:
            return method(self, *args, **kwargs)
        finally:
            txn.DEFAULT_COMMIT_LOCK.reset(token)

    return run


def _open(uri: Any, version: int | str | None, asof: Any, device: str, storage_options: dict[str, str] | None,
          store: object) -> LanceDataset:
    if asof is not None and version is None:
        resolved_store, root = resolve(uri, storage_options, store=store)
        version = table.versions.version_asof(resolved_store, root, asof)
        return LanceDataset(root, version, device=device, storage_options=storage_options, store=resolved_store)
    return LanceDataset(uri, version, device=device, storage_options=storage_options, store=store)


def _committed(base_uri: Any, version: int, storage_options: dict[str, str] | None) -> LanceDataset:
    """The dataset at ``base_uri`` (a URI, or a dataset whose store is reused) at ``version``."""
    store, root = txn.transaction.resolve_target(base_uri, storage_options)
    options = getattr(base_uri, "storage_options", None) or storage_options
    return LanceDataset(root, version, storage_options=options, store=store)


def _decoded(metadata: Any) -> dict[str, str]:
    """A schema metadata map with its byte keys and values decoded."""
    return {bytes(k).decode() if isinstance(k, bytes) else k: bytes(v).decode() for k, v in metadata.items()}


def _in_memory(data: Any) -> Any:
    """``data`` as pyarrow's joins can take it: a :class:`LanceDataset` is read into an
    ``InMemoryDataset`` (Acero would reach for the C++ dataset it does not wrap)."""
    return pa_dataset.InMemoryDataset(data.to_table()) if isinstance(data, LanceDataset) else data


def _reopen(uri: str, version: int, device: str, storage_options: dict[str, str]) -> LanceDataset:
    """Unpickle a dataset: open ``uri`` at the pinned ``version`` with the same options."""
    return LanceDataset(uri, version, device=device, storage_options=storage_options)


class LanceDataset(pa_dataset.Dataset):
    """A Lance dataset at one version, read with pylance's API: a facade over one
    :class:`~lance_gpu.table.snapshot.TableSnapshot`.

    As pylance's, it subclasses :class:`pyarrow.dataset.Dataset`, so code that takes any
    Arrow dataset accepts it (Polars' ``scan_pyarrow_dataset`` calls :meth:`to_batches`,
    DuckDB's scan of a Python variable :meth:`scanner`, both with ``columns`` and a
    ``pyarrow.compute.Expression`` filter).  The Cython base is never initialised (it
    wraps no C++ dataset), so every method of the base is overridden here: see
    :meth:`filter`, :meth:`sort_by`, :meth:`join`, :meth:`join_asof`, :meth:`replace_schema`,
    :attr:`partition_expression`.  pyarrow functions that reach the C++ dataset directly
    (``Scanner.from_dataset(ds)``, a union ``pyarrow.dataset.dataset([ds, ...])``, an
    Acero declaration or join with ``ds`` as the *right* side) cannot be served and must
    not be given this object (pylance's crashes there too).

    Every call reads the snapshot once and works on it, so it sees one whole version.  A
    mutation commits a new version and swaps its snapshot in with one attribute assignment
    (never moving the object back to an older version than a concurrent mutation put it
    at), so threads sharing one dataset object each see a whole version, old or new."""

    #: Scanner arguments applied when a scan does not give them (``dataset(default_scan_options=)``).
    _default_scan_options: dict[str, Any] | None = None
    _commit_lock: Any = None  # dataset(commit_lock=): the lock of this object's mutations

    def __init__(
        self,
        uri: str | os.PathLike[str],
        version: int | str | None = None,
        *,
        device: str = "auto",
        storage_options: dict[str, str] | None = None,
        store: object = None,
    ) -> None:
        if device not in DEVICES:
            msg = f"device must be one of {DEVICES}, not {device!r}"
            raise UnknownDeviceError(msg)
        resolved, root = resolve(uri, storage_options, store=store)
        self._attach(TableSnapshot.load(resolved, root, version, storage_options), device)

    def _attach(self, snapshot: TableSnapshot, device: str) -> None:
        #: The dataset's store (:class:`lance_gpu.io.ObjectStore`) and its root key there:
        #: the same for every version this object moves to.
        self.store, self.root, self.uri = snapshot.store, snapshot.root, snapshot.uri
        self.storage_options = snapshot.storage_options
        self._device = device
        self._swap_lock = threading.Lock()
        self._snapshot = snapshot

    @classmethod
    def _of(cls, snapshot: TableSnapshot, device: str) -> LanceDataset:
        """A dataset object at ``snapshot`` (no manifest read)."""
        ds = cls.__new__(cls)
        ds._attach(snapshot, device)
        return ds

    @property
    def snapshot(self) -> TableSnapshot:
        """The :class:`~lance_gpu.table.snapshot.TableSnapshot` of the version this object is at."""
        return self._snapshot

    def _advance(self, snapshot: TableSnapshot) -> None:
        """Move to ``snapshot``, a version a mutation of this object committed, unless a
        concurrent mutation already moved it to a later one of the lineage."""
        with self._swap_lock:
            current = self._snapshot.version
            if current & DETACHED_VERSION_MASK or snapshot.version >= current:
                self._snapshot = snapshot

    @property
    def manifest(self) -> Any:
        """The version's manifest (a ``lance.table.Manifest`` protobuf; read only)."""
        return self._snapshot.manifest

    @property
    def manifest_file(self) -> Any:
        """The version's parsed manifest file (:class:`~lance_gpu.table.manifest.ManifestFile`)."""
        return self._snapshot.manifest_file

    @property
    def lance_schema(self) -> SchemaView:
        """The version's schema with field ids (pylance's ``LanceSchema``:
        :class:`~lance_gpu.table.schema_view.LanceSchema`)."""
        return table.schema_view.LanceSchema(self._snapshot.lance_schema)

    @property
    def fragments(self) -> list[LanceFragment]:
        """The fragments of this version, in manifest order (as :meth:`get_fragments`)."""
        return self.get_fragments()

    def __repr__(self) -> str:
        return f"LanceDataset(uri={self.uri!r}, version={self.version})"

    # -- the commit API (pylance's), delegating to lance_gpu.txn ----------------------------

    @staticmethod
    def commit(
        base_uri,
        operation,
        read_version: int | None = None,
        commit_lock=None,
        storage_options: dict[str, str] | None = None,
        enable_v2_manifest_paths: bool | None = None,
        detached: bool | None = False,
        max_retries: int = 20,
        *,
        commit_message: str | None = None,
        enable_stable_row_ids: bool | None = None,
    ) -> LanceDataset:
        """Commit a :class:`~lance_gpu.txn.operations.LanceOperation` (or a
        :class:`~lance_gpu.txn.transaction.Transaction`) as a new version of the dataset at
        ``base_uri``; returns the dataset at that version.

        Parameters
        ----------
        base_uri : str, Path or LanceDataset
            The dataset (it may not exist yet for an ``Overwrite``).
        operation : LanceOperation.BaseOperation or Transaction
            What to commit.
        read_version : int, optional
            The version the operation was planned on; required except for ``Overwrite``.
        commit_lock : callable, optional
            ``commit_lock(version)`` returns a context manager held while publishing; with
            one, a store without conditional writes is accepted (the lock guards the
            manifest's check-then-put).
        storage_options, enable_v2_manifest_paths, max_retries
            As pylance's.
        detached : bool, default False
            Commit a version outside the lineage (a random version with bit 63 set, stored as
            ``_versions/d{version}.manifest``): never the latest, found only by checking it
            out by number; ``read_version`` may itself be detached.
        commit_message : str, optional
            Stored in the transaction's properties (``__lance_commit_message``, as pylance).
        enable_stable_row_ids : bool, optional
            For a new dataset: assign stable row ids.
        """
        version = txn.commit_operation(
            base_uri, operation, read_version, commit_lock, storage_options, enable_v2_manifest_paths, detached,
            max_retries, commit_message=commit_message, enable_stable_row_ids=enable_stable_row_ids,
        )
        return _committed(base_uri, version, storage_options)

    @staticmethod
    def commit_batch(
        dest,
        transactions: Sequence,
        commit_lock=None,
        storage_options: dict[str, str] | None = None,
        enable_v2_manifest_paths: bool | None = None,
        detached: bool | None = False,
        max_retries: int = 20,
        **options,
    ) -> dict:
        """Merge append transactions into one commit (pylance's ``commit_batch``); returns
        ``{"dataset": LanceDataset, "merged": Transaction}``."""
        version, merged = txn.commit_transactions(
            dest, transactions, commit_lock, storage_options, enable_v2_manifest_paths, detached, max_retries, **options
        )
        return {"dataset": _committed(dest, version, storage_options), "merged": merged}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (self.uri, self.version, self._device, self.storage_options))

    @property
    def device(self) -> str:
        """The decoder this dataset's reads use by default ("auto", "gpu" or "cpu")."""
        return self._device

    def reload(self, version: int | str) -> None:
        """Move this object to ``version``: its snapshot is swapped for that version's, so
        nothing derived from the old version (the schema, fragments, caches of field
        locations) is seen after."""
        self._snapshot = self._snapshot.checkout(version)

    # -- writing: each call commits one new version and moves this object to it ------------

    @_with_commit_lock
    def delete(self, predicate: str | pc.Expression, *, conflict_retries: int = 10) -> dict[str, int]:
        """Delete the rows matching ``predicate`` (SQL or a pyarrow expression).

        Writes one deletion file per touched fragment (a fragment left without rows is
        removed) and commits a Delete transaction -- also when nothing matched, as pylance.
        Returns ``{"num_deleted_rows": n}``; see :func:`lance_gpu.write.operations.delete`
        for concurrent writers.
        """
        committed, result = write.operations.delete(self._snapshot, predicate, conflict_retries=conflict_retries)
        self._advance(committed)
        return result

    @_with_commit_lock
    def update(
        self,
        updates: dict[str, str],
        where: str | pc.Expression | None = None,
        conflict_retries: int = 10,
        retry_timeout=None,
        data_storage_version: str | None = None,
    ) -> dict[str, int]:
        """Set columns of the rows matching ``where`` to SQL expressions, as pylance.

        Parameters
        ----------
        updates : dict of str to str
            Column name to a SQL expression over the row (``{"x": "x + 1"}``).
        where : str or pyarrow.compute.Expression, optional
            The rows to update (default: all).
        conflict_retries : int, default 10
            Re-plans after this many retryable conflicts at most.
        retry_timeout, data_storage_version
            Accepted for pylance compatibility.

        Returns
        -------
        dict
            ``{"num_rows_updated": n}``.
        """
        committed, result = write.rowlevel.update(self._snapshot, updates, where, conflict_retries, retry_timeout,
                                                  data_storage_version, device=self._device)
        self._advance(committed)
        return result

    def merge_insert(self, on):
        """A :class:`~lance_gpu.write.rowlevel.MergeInsertBuilder` keyed on ``on`` (a column
        name or names), as pylance's ``merge_insert``."""
        return write.rowlevel.MergeInsertBuilder(self._snapshot, on, device=self._device, on_commit=self._advance,
                                                 commit_lock=self._commit_lock)

    @_with_commit_lock
    def insert(self, data, *, mode: str = "append", **kwargs) -> None:
        """Append (or overwrite with) ``data``; this object moves to the new version."""
        self._advance(write.rowlevel.insert(self._snapshot, data, mode=mode, **kwargs))

    # -- config and metadata (each one UpdateConfig transaction) ------------------------------

    def config(self) -> dict[str, str]:
        """The table config of this version."""
        return dict(self._snapshot.manifest.config)

    @_with_commit_lock
    def update_config(self, values: Mapping[str, str | None], *, replace: bool = False) -> dict[str, str]:
        """Set (a value) or remove (None) table config keys; returns the new config.

        Parameters
        ----------
        values : dict of str to str or None
            Keys to set or remove.
        replace : bool, default False
            Make the config exactly the keys set in ``values``.
        """
        self._advance(write.operations.update_config(self._snapshot, config=values, replace=replace))
        return self.config()

    def delete_config_keys(self, keys: list[str]) -> None:
        """Remove table config keys."""
        self.update_config(dict.fromkeys(keys))

    @property
    def metadata(self) -> dict[str, str]:
        """The table metadata of this version."""
        return dict(self._snapshot.manifest.table_metadata)

    @property
    def schema_metadata(self) -> dict[str, str]:
        """The schema's metadata of this version, decoded (``{}`` when there is none)."""
        return _decoded(self._snapshot.manifest.schema_metadata)

    @property
    def max_field_id(self) -> int:
        """The largest field id of this version's schema (nested fields included)."""
        return max((f.id for f in self._snapshot.lance_schema.by_id.values()), default=-1)

    @property
    def has_stable_row_ids(self) -> bool:
        """Whether row ids survive compaction and updates (the stable row id feature)."""
        return self._snapshot.has_stable_row_ids

    def to_pandas(self, columns: Columns = None, filter: str | pc.Expression | None = None, limit: int | None = None,  # noqa: A002
                  offset: int | None = None, **kwargs: Any):
        """Read into a ``pandas.DataFrame`` (:meth:`to_table`, then Arrow's conversion).

        Parameters
        ----------
        columns, filter, limit, offset, **kwargs
            As :meth:`scanner`.
        """
        return self.to_table(columns, filter, limit, offset, **kwargs).to_pandas()

    def sample(self, num_rows: int, columns: Columns = None, randomize_order: bool = True, **kwargs: Any) -> pa.Table:
        """``num_rows`` live rows drawn at random without replacement.

        Parameters
        ----------
        num_rows : int
            How many rows; more than the live rows raises ``ValueError``.
        columns : list of str or dict of str to str, optional
            Columns (or SQL expressions) to read; all when None.
        randomize_order : bool, default True
            Rows in random order; False returns them in dataset order (fewer, larger reads).
        **kwargs
            As :meth:`take`.
        """
        total = self.count_rows()
        if not isinstance(num_rows, int) or isinstance(num_rows, bool) or num_rows < 0:
            raise InvalidArgumentError(f"sample: num_rows must be a non-negative integer, not {num_rows!r}")
        if num_rows > total:
            raise InvalidArgumentError(f"sample: {num_rows} rows asked for, the dataset has {total}")
        indices = random.sample(range(total), num_rows)
        if not randomize_order:
            indices.sort()
        return self.take(indices, columns, **kwargs)

    @_with_commit_lock
    def update_metadata(self, values: Mapping[str, str | None], *, replace: bool = False) -> dict[str, str]:
        """Set (a value) or remove (None) table metadata keys; returns the new metadata."""
        self._advance(write.operations.update_config(self._snapshot, table_metadata=values, replace=replace))
        return self.metadata

    @_with_commit_lock
    def update_schema_metadata(self, values: Mapping[str, str | None], *, replace: bool = False) -> dict[str, str]:
        """Set (a value) or remove (None) schema metadata keys; returns the new metadata."""
        self._advance(write.operations.update_config(self._snapshot, schema_metadata=values, replace=replace))
        return self.schema_metadata

    @_with_commit_lock
    def update_field_metadata(self, field_updates: Mapping[str, Mapping[str, str | None]], replace: bool = False) -> None:
        """Set (a value) or remove (None) metadata keys of fields (by name or dotted path)."""
        self._advance(write.operations.update_config(self._snapshot, field_metadata=field_updates, replace=replace))

    def replace_schema_metadata(self, new_metadata: dict[str, str]) -> None:
        """The schema metadata becomes ``new_metadata`` (deprecated in pylance)."""
        self.update_schema_metadata(new_metadata, replace=True)

    def replace_field_metadata(self, field_name: str, new_metadata: dict[str, str]) -> None:
        """The field's metadata becomes ``new_metadata`` (deprecated in pylance)."""
        self.update_field_metadata({field_name: new_metadata}, replace=True)

    @_with_commit_lock
    def merge(self, data_obj, left_on: str, right_on: str | None = None, schema: pa.Schema | None = None) -> None:
        """Add the columns of ``data_obj`` joined on ``left_on`` = ``right_on`` (pylance's
        ``merge``); rows without a match get nulls.

        Parameters
        ----------
        data_obj : ReaderLike
            The new columns and the join key.
        left_on : str
            The key column of this dataset.
        right_on : str, optional
            The key column of ``data_obj`` (default: ``left_on``).
        schema : pyarrow.Schema, optional
            The schema of ``data_obj``.
        """
        self._advance(write.operations.merge(self._snapshot, data_obj, left_on, right_on, schema))

    @_with_commit_lock
    def restore(self, version: int | str | None = None) -> None:
        """Commit a new latest version whose contents are those of ``version`` (default:
        the version this object is at -- pylance's ``checkout_version(v).restore()``)."""
        self._advance(write.operations.restore(self._snapshot, version))

    @_with_commit_lock
    def drop_columns(self, columns: Sequence[str]) -> None:
        """Remove columns (or dotted struct fields) from the schema; metadata only."""
        self._advance(write.operations.drop_columns(self._snapshot, columns))

    @_with_commit_lock
    def alter_columns(self, *alterations: dict) -> None:
        """Rename (``{"path": "a.b", "name": "c"}``) or change nullability of columns."""
        self._advance(write.operations.alter_columns(self._snapshot, *alterations))

    @_with_commit_lock
    def add_columns(
        self,
        transforms,
        read_columns: Sequence[str] | None = None,
        reader_schema: pa.Schema | None = None,
        batch_size: int | None = None,
    ) -> None:
        """Add columns from aligned data, a batch function, SQL expressions or all-null
        fields; see :func:`lance_gpu.write.operations.add_columns`."""
        self._advance(write.operations.add_columns(self._snapshot, transforms, read_columns, reader_schema, batch_size))

    @property
    def optimize(self):
        """``ds.optimize.compact_files(...)``, as pylance."""
        return write.compaction.DatasetOptimizer(self._snapshot, self._advance, commit_lock=self._commit_lock)

    # -- metadata ---------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._snapshot.version

    @property
    def latest_version(self) -> int:
        return latest_version(self.store, self.root).version

    @property
    def schema(self) -> pa.Schema:
        """The version's Arrow schema; with ``dataset(default_scan_options={"with_row_id":
        True})`` (or ``with_row_address``) it lists ``_rowid`` / ``_rowaddr`` after the
        columns, as every default scan returns them (pylance's rule)."""
        schema = self._snapshot.schema
        defaults = self._default_scan_options or {}
        for flag, name in (("with_row_id", ROW_ID), ("with_row_address", ROW_ADDR)):
            if defaults.get(flag) and name not in schema.names:
                schema = schema.append(pa.field(name, pa.uint64()))
        return schema

    @property
    def data_storage_version(self) -> str:
        """The data storage (file format) version, as pylance reports it: ``"0.1"`` for
        legacy files, ``"2.0"``, ``"2.1"``, ...; see :func:`lance_gpu.table.versions.storage_version`."""
        return table.versions.storage_version(self._snapshot.manifest)

    def versions(self) -> list[dict]:
        """Every committed version, oldest first: ``version``, ``timestamp`` (naive, local) and
        ``metadata`` (pylance's summary: ``total_rows``, ``total_fragments``, ... as strings)."""
        return table.versions.versions(self.store, self.root)

    def checkout_version(self, version: int | str | tuple) -> LanceDataset:
        """A new dataset object at ``version``.

        Parameters
        ----------
        version : int, str or (branch, version)
            A version number, a tag name, or ``(None | "main", version)`` (other branches
            are not supported: ``UnsupportedFeatureError``; ``(branch, None)`` is the latest).
        """
        if isinstance(version, tuple):
            if len(version) != 2:
                raise TypeError("a version tuple is (branch, version)")
            branch, number = version
            if branch not in (None, "main"):
                raise UnsupportedFeatureError(f"branch {branch!r}: branches are not supported")
            version = self.latest_version if number is None else number
        return LanceDataset._of(self._snapshot.checkout(version), self._device)

    def checkout_latest(self) -> None:
        """Move this dataset object to the latest version, in place (as pylance)."""
        self._snapshot = self._snapshot.latest()

    @property
    def tags(self) -> Any:
        """``ds.tags.list() / list_ordered() / get_version() / create() / update() /
        replace_metadata() / delete()``: see :class:`lance_gpu.table.tags.Tags`."""
        return table.tags.Tags(self.store, self.root, self.version)

    @property
    def stats(self) -> Any:
        """``ds.stats.dataset_stats()`` / ``data_stats()``: see :class:`lance_gpu.ops.stats.DatasetStats`."""
        return ops.stats.DatasetStats(self._snapshot)

    def cleanup_old_versions(
        self,
        older_than: Any = None,
        retain_versions: int | None = None,
        *,
        delete_unverified: bool = False,
        error_if_tagged_old_versions: bool = True,
        delete_rate_limit: int | None = None,
        versions: list[int] | None = None,
        delete_concurrency: int | None = None,
    ) -> Any:
        """Remove old versions and the files only they reference; returns a ``CleanupStats``.

        Parameters
        ----------
        older_than : timedelta, optional
            Only versions older than this are removed (default: two weeks when neither
            ``retain_versions`` nor ``versions`` is given).
        retain_versions : int, optional
            Keep the last N versions.
        delete_unverified : bool, default False
            Also delete files no version references (left by failed writes).
        error_if_tagged_old_versions : bool, default True
            Raise ``TaggedVersionError`` (an ``OSError``, as pylance) if tagged versions
            match; otherwise keep them. Bad arguments raise ``CleanupError`` (``OSError``).
        delete_rate_limit, delete_concurrency : int, optional
            Accepted for pylance compatibility (deletes are not throttled).
        versions : list of int, optional
            Only consider these versions.

        Returns
        -------
        CleanupStats
            pylance's counts, plus ``staging_files_removed`` and ``multipart_uploads_aborted``:
            leftovers of killed writers older than the retention (and seven days, unless
            ``delete_unverified``), which pylance leaves.

        See :mod:`lance_gpu.ops.cleanup` for which files go.
        """
        for name, value in (("delete_rate_limit", delete_rate_limit), ("delete_concurrency", delete_concurrency)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise CleanupError(f"{name} must be a positive integer, got {value!r}")
        return ops.cleanup.cleanup_old_versions(
            self.store,
            self.root,
            older_than,
            retain_versions,
            delete_unverified=delete_unverified,
            error_if_tagged_old_versions=error_if_tagged_old_versions,
            versions=versions,
        )

    def take_blobs(
        self,
        blob_column: str,
        ids: Sequence[int] | pa.Array | None = None,
        addresses: Sequence[int] | pa.Array | None = None,
        indices: Sequence[int] | pa.Array | None = None,
        *,
        buffer_size: int = 524288,
    ) -> list:
        """File-like objects reading the blobs of the given rows lazily (None for a null blob).

        Parameters
        ----------
        blob_column : str
            A blob column (``lance-encoding:blob`` or a blob v2 struct).
        ids, addresses, indices : list of int or pyarrow.Array
            Exactly one: row ids, row addresses (``fragment_id << 32 | offset``) or positions
            among the live rows.
        buffer_size : int
            Accepted for pylance compatibility.

        See :mod:`lance_gpu.table.blobs`.
        """
        return take_blobs(self._snapshot, blob_column, ids, addresses, indices)

    def get_fragments(self, filter: str | pc.Expression | None = None) -> list[LanceFragment]:  # noqa: A002
        """The fragments of this version, in manifest order (pylance refuses ``filter``)."""
        if filter is not None:
            raise InvalidArgumentError("get_fragments() does not support filter yet")
        return [LanceFragment(self, f) for f in self._snapshot.fragments]

    def get_fragment(self, fragment_id: int) -> LanceFragment | None:
        """The fragment with this id, or None."""
        found = self._snapshot.get_fragment(fragment_id)
        return None if found is None else LanceFragment(self, found)

    @property
    def index_metadata(self) -> list:
        """The manifest's index entries of this version (``lance.table.IndexMetadata``; see
        :mod:`lance_gpu.index.metadata`)."""
        return self._snapshot.index_metadata

    def sql(self, sql: str) -> SqlQueryBuilder:
        """A SQL query over this dataset version (pylance's ``ds.sql``): single-table
        ``SELECT ... FROM dataset [WHERE] [ORDER BY] [LIMIT] [OFFSET]``, run as one scan;
        see :mod:`lance_gpu.ops.sql` for what is supported.

        Parameters
        ----------
        sql : str
            The query; ``.table_name(name)`` on the builder names the table (default ``dataset``).
        """
        return ops.sql.SqlQueryBuilder(self.scanner, sql)

    @property
    def has_index(self) -> bool:
        """Whether this version has any index (pylance's ``has_index``)."""
        return bool(self._snapshot.index_metadata)

    def list_indices(self) -> list[dict]:
        """The indices of this version, as pylance: one dict per entry, sorted by name
        (``name``, ``type``, ``uuid``, ``fields``, ``version``, ``fragment_ids``, ``base_id``)."""
        warnings.warn("The 'list_indices' method is deprecated. It may be removed in a future version. "
                      "Use describe_indices() instead.", DeprecationWarning, stacklevel=2)
        snapshot = self._snapshot
        return index.metadata.list_indices(snapshot.manifest, snapshot.manifest_file.index_section)

    def describe_indices(self) -> list:
        """One :class:`~lance_gpu.index.metadata.IndexDescription` per index, as pylance."""
        snapshot = self._snapshot
        return index.metadata.describe_indices(snapshot.manifest, snapshot.manifest_file.index_section,
                                               lambda i: snapshot.fragment(i).live_count())

    @_with_commit_lock
    def create_scalar_index(self, column: str, index_type: Any, name: str | None = None, *, replace: bool = True,
                            train: bool = True, fragment_ids: list[int] | None = None, index_uuid: str | None = None,
                            **kwargs: Any) -> None:
        """Build a scalar index and commit it; this object moves to the new version.

        Parameters
        ----------
        column : str
            The top-level column to index.
        index_type : str
            ``"BTREE"``, ``"BITMAP"`` or ``"LABEL_LIST"`` (a list column).
        name : str, optional
            The index name (default ``"<column>_idx"``).
        replace : bool
            Replace an index of that name (on the same column); refused when False.
        train : bool
            Must be True (empty indices are not supported).
        fragment_ids : list of int, optional
            Refused, as pylance refuses it here (``ValueError``).
        index_uuid : str, optional
            The new index's uuid.

        See :mod:`lance_gpu.write.indices`.
        """
        self._advance(write.indices.create_scalar_index(self._snapshot, column, index_type, name, replace=replace, train=train,
                                                        fragment_ids=fragment_ids, index_uuid=index_uuid, **kwargs))

    @_with_commit_lock
    def drop_index(self, name: str) -> None:
        """Remove the index ``name`` from a new version (its files stay for older ones).

        Parameters
        ----------
        name : str
            The index name.
        """
        self._advance(write.indices.drop_index(self._snapshot, name))

    # -- reading: every read is a scan plan run by an executor ---------------------------

    def scanner(
        self,
        columns: Columns = None,
        filter: str | pc.Expression | None = None,  # noqa: A002
        limit: int | None = None,
        offset: int | None = None,
        batch_size: int | None = None,
        batch_readahead: int | None = None,
        fragment_readahead: int | None = None,
        scan_in_order: bool | None = None,
        fragments: Sequence[LanceFragment] | None = None,
        *,
        with_row_id: bool | None = None,
        with_row_address: bool | None = None,
        use_stats: bool | None = None,
        io_buffer_size: int | None = None,
        late_materialization: bool | Sequence[str] | None = None,
        include_deleted_rows: bool | None = None,
        strict_batch_size: bool | None = None,
        device: str | None = None,
        on_cpu_fallback: str = "warn",
        **options: Any,
    ) -> LanceScanner:
        """Plan a read, as pylance's ``LanceDataset.scanner``.

        Parameters
        ----------
        columns : list of str or dict of str to str, optional
            Columns to return (dotted names reach struct fields; ``_rowid``, ``_rowaddr``,
            ``_rowoffset`` are virtual columns), or output name -> SQL expression.
        filter : str or pyarrow.compute.Expression, optional
            SQL predicate (may use ``_rowid`` / ``_rowaddr``); only matching rows return.
        limit, offset : int, optional
            At most ``limit`` rows after skipping ``offset`` (both >= 0), after the filter.
        batch_size : int, optional
            Rows per batch (default ``LANCE_DEFAULT_BATCH_SIZE`` or 8192).
        batch_readahead, fragment_readahead : int, optional
            Batches / fragments decoded ahead of the consumer when streaming.
        scan_in_order : bool, optional
            Accepted; results always come in fragment order.
        fragments : list of LanceFragment, optional
            Scan only these fragments, in this order.
        with_row_id, with_row_address : bool, optional
            Append ``_rowid`` / ``_rowaddr``.
        use_stats, io_buffer_size, late_materialization : optional
            Accepted (they tune pylance's engine).
        include_deleted_rows : bool, optional
            Return deleted rows too, with a null ``_rowid`` (needs ``with_row_id``).
        strict_batch_size : bool, optional
            Every batch but the last has exactly ``batch_size`` rows.
        device : str, optional
            "auto", "gpu" or "cpu" (default: the dataset's).
        on_cpu_fallback : str
            On the GPU, for a field without a GPU kernel: "warn", "raise" or "allow".
        nearest : dict, optional
            An exact nearest-neighbour search, as pylance's: ``{"column": name, "q": vector or
            2-D array of vectors, "k": 10, "metric": "l2" | "cosine" | "dot" | "hamming",
            "nprobes", "refine_factor", "use_index", "distance_range": (lower, upper)}`` (the
            index options are accepted; every search is exact; a multivector column takes a
            2-D ``q`` as one query).  Adds a float32 ``_distance`` column (and a leading
            ``query_index`` for several queries); see ``lance_gpu.scan.nearest``.  With
            ``device="gpu"`` the vectors are decoded and searched in device memory
            (``lance_gpu.scan.nearest_device``).
        prefilter : bool, optional
            With ``nearest`` and ``filter``: filter first, then search (True), or search then
            filter, which may leave fewer than ``k`` rows (False, the default).
        """
        args = dict(
            columns=columns, filter=filter, limit=limit, offset=offset, batch_size=batch_size,
            batch_readahead=batch_readahead, fragment_readahead=fragment_readahead, scan_in_order=scan_in_order,
            fragments=fragments, with_row_id=with_row_id, with_row_address=with_row_address, use_stats=use_stats,
            io_buffer_size=io_buffer_size, late_materialization=late_materialization,
            include_deleted_rows=include_deleted_rows, strict_batch_size=strict_batch_size, **options,
        )
        for key, value in (self._default_scan_options or {}).items():  # dataset(default_scan_options=)
            if args.get(key) is None:
                args[key] = value
        order_by = args.pop("order_by", None)
        if order_by is not None:
            return ops.ordering.ordered_scanner(
                lambda **kw: self.scanner(device=device, on_cpu_fallback=on_cpu_fallback, **kw), order_by, **args
            )
        return scanner_for(self._snapshot, device=device or self._device, on_cpu_fallback=on_cpu_fallback, **args)

    def to_table(self, columns: Columns = None, filter: str | pc.Expression | None = None, limit: int | None = None,  # noqa: A002
                 offset: int | None = None, **kwargs: Any) -> pa.Table:
        """Read into one Arrow table; arguments as :meth:`scanner`."""
        return self.scanner(columns, filter, limit, offset, **kwargs).to_table()

    def to_batches(self, columns: Columns = None, filter: str | pc.Expression | None = None, limit: int | None = None,  # noqa: A002
                   offset: int | None = None, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        """Stream record batches; arguments as :meth:`scanner`."""
        return self.scanner(columns, filter, limit, offset, **kwargs).to_batches()

    def count_rows(self, filter: str | pc.Expression | None = None, **kwargs: Any) -> int:  # noqa: A002
        """Live rows, or those matching ``filter``; other arguments as :meth:`scanner`
        (``nearest`` is ignored here, as pylance ignores it: the count is of the matching rows).

        Without a filter (or other arguments) the count comes from the manifest alone, as
        pylance's: no data file is opened, so a manifest whose ``physical_rows`` disagrees
        with a data file is not noticed here but when that file is read."""
        kwargs.pop("nearest", None)
        if filter is None and not kwargs:
            # as pylance: the manifest's counts, no data file opened (a fragment whose
            # deletion file does not say how many rows it deletes reads that file)
            return self._snapshot.count_rows()
        return self.scanner(filter=filter, **kwargs).count_rows()

    def head(self, num_rows: int, **kwargs: Any) -> pa.Table:
        """The first ``num_rows`` rows; other arguments as :meth:`scanner`."""
        return self.scanner(**kwargs).head(num_rows)

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array, columns: Columns = None, *,
             with_row_id: bool = False, with_row_address: bool = False) -> pa.Table:
        """Rows at the given positions (0-based, counting live rows across fragments in
        order), in the order given; decoded by the dataset's device."""
        return take_rows(self._snapshot, indices, columns, with_row_id=with_row_id, with_row_address=with_row_address,
                         device=self._device)

    def _take_rows(self, row_ids: Sequence[int] | np.ndarray | pa.Array, columns: Columns = None, *,
                   ignore_deletions: bool = False, with_row_id: bool = False, with_row_address: bool = False) -> pa.Table:
        """Rows by row id (pylance's unstable ``_take_rows``), in the order given, repeats
        kept and deleted rows left out; an id naming no row raises ``RowIndexError`` (an
        ``OSError``).

        Parameters
        ----------
        row_ids : list of int or pyarrow.Array
            Row ids (row addresses ``fragment_id << 32 | offset`` unless the dataset has
            stable row ids).
        columns : list of str or dict of str to str, optional
            Columns, or output names to SQL expressions, as :meth:`take`.
        ignore_deletions : bool, default False
            Accepted for pylance's signature: deleted rows are always left out (pylance
            may return them then).
        with_row_id, with_row_address : bool, default False
            Add ``_rowid`` / ``_rowaddr``.
        """
        ids = np.asarray(row_ids.to_numpy(zero_copy_only=False) if isinstance(row_ids, (pa.Array, pa.ChunkedArray))
                         else row_ids, dtype=np.uint64).reshape(-1)
        if self.has_stable_row_ids:
            frag_ids, offsets = write.rowlevel.row_addresses(self._snapshot, ids)
            ids = (frag_ids.astype(np.uint64) << np.uint64(32)) | offsets.astype(np.uint64)
        return take_addresses(self._snapshot, ids, columns, with_row_id=with_row_id, with_row_address=with_row_address,
                              device=self._device)

    def __len__(self) -> int:
        """The number of live rows (pylance's ``len(ds)``, :meth:`count_rows`)."""
        return self.count_rows()

    def __bool__(self) -> bool:
        """A dataset object is true even when it holds no rows (``if ds:`` does not count
        rows; pylance's is false when empty, through ``__len__``)."""
        return True

    # -- pyarrow.dataset.Dataset's methods: each base method is overridden, as the Cython
    # base wraps no C++ dataset here (calling one of its own would dereference NULL) --------

    @property
    def partition_expression(self) -> pc.Expression:
        """Always true: a Lance dataset has no partitioning (every row satisfies it; pylance
        raises ``NotImplementedError`` here, pyarrow's unpartitioned datasets give ``true``)."""
        return pc.scalar(True)

    @property
    def _scan_options(self) -> dict[str, Any]:
        """The base's options of a filtered dataset: none (:meth:`filter` materialises)."""
        return {}

    def _scanner_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The base's helper merging :attr:`_scan_options` into scanner options."""
        return dict(options)

    def _get_fragments(self, filter: str | pc.Expression | None = None) -> Iterator[LanceFragment]:  # noqa: A002
        """The base's fragment iterator: :meth:`get_fragments`."""
        return iter(self.get_fragments(filter))

    def filter(self, expression: str | pc.Expression) -> pa_dataset.InMemoryDataset:
        """The rows matching ``expression`` as an in-memory Arrow dataset (pyarrow's
        ``Dataset.filter``; the filter is pushed into the scan, then the matching rows are
        read once: later ``filter`` / ``to_table`` calls on the result run in pyarrow).

        Parameters
        ----------
        expression : pyarrow.compute.Expression or str
            The predicate (a SQL string as :meth:`scanner`'s ``filter`` is accepted too).
        """
        return pa_dataset.InMemoryDataset(self.to_table(filter=expression))

    def sort_by(self, sorting: str | list[tuple[str, str]], **kwargs: Any) -> pa_dataset.InMemoryDataset:
        """The dataset sorted, as an in-memory Arrow dataset (pyarrow's ``Dataset.sort_by``,
        which returns an ``InMemoryDataset`` too; pylance's crashes).

        Parameters
        ----------
        sorting : str or list of (name, "ascending" | "descending")
            As ``pyarrow.Table.sort_by``.
        **kwargs
            ``null_placement`` and the like, as ``pyarrow.Table.sort_by``.
        """
        return pa_dataset.InMemoryDataset(self.to_table().sort_by(sorting, **kwargs))

    def join(self, right_dataset: Any, keys: str | list[str], right_keys: str | list[str] | None = None,
             join_type: str = "left outer", left_suffix: str | None = None, right_suffix: str | None = None,
             coalesce_keys: bool = True, use_threads: bool = True) -> pa_dataset.InMemoryDataset:
        """pyarrow's ``Dataset.join`` (an ``InMemoryDataset``; pylance raises
        ``NotImplementedError``): both sides are read, then joined by Acero.

        Parameters
        ----------
        right_dataset : LanceDataset, pyarrow.dataset.Dataset or pyarrow.Table
            The right side.
        keys, right_keys, join_type, left_suffix, right_suffix, coalesce_keys, use_threads
            As pyarrow's ``Dataset.join``.
        """
        return pa_dataset.InMemoryDataset(self.to_table()).join(
            _in_memory(right_dataset), keys, right_keys=right_keys, join_type=join_type, left_suffix=left_suffix,
            right_suffix=right_suffix, coalesce_keys=coalesce_keys, use_threads=use_threads,
        )

    def join_asof(self, right_dataset: Any, on: str, by: str | list[str], tolerance: int,
                  right_on: str | None = None, right_by: str | list[str] | None = None) -> pa_dataset.InMemoryDataset:
        """pyarrow's ``Dataset.join_asof`` (an ``InMemoryDataset``; pylance's crashes): both
        sides are read, then joined by Acero.

        Parameters
        ----------
        right_dataset : LanceDataset, pyarrow.dataset.Dataset or pyarrow.Table
            The right side.
        on, by, tolerance, right_on, right_by
            As pyarrow's ``Dataset.join_asof``.
        """
        return pa_dataset.InMemoryDataset(self.to_table()).join_asof(
            _in_memory(right_dataset), on, by, tolerance, right_on=right_on, right_by=right_by,
        )

    def replace_schema(self, schema: pa.Schema) -> None:
        """Refused, as pylance refuses it: a Lance dataset's schema changes by committing
        (:meth:`replace_schema_metadata`, :meth:`replace_field_metadata`, :meth:`alter_columns`)."""
        raise UnsupportedFeatureError(
            "Cannot replace the schema of a dataset.  This method exists for backwards compatibility with pyarrow.  "
            "Use replace_schema_metadata or replace_field_metadata to change the metadata"
        )

    def __setstate__(self, state: Any) -> None:
        """Refused: a dataset unpickles through :meth:`__reduce__` (it reopens the URI)."""
        raise TypeError("a LanceDataset is restored by reopening its URI (pickle uses __reduce__)")

    def to_cudf(self, columns: Columns = None, filter: str | pc.Expression | None = None, *,  # noqa: A002
                on_cpu_fallback: str = "warn", **kwargs: Any):
        """Read into one ``cudf.DataFrame`` decoded on the GPU; arguments as :meth:`scanner`.

        Needs a usable GPU and cuDF (``GpuUnavailableError`` otherwise).
        """
        return self.scanner(columns, filter, device="gpu" if self._device == "auto" else None,
                            on_cpu_fallback=on_cpu_fallback, **kwargs).to_cudf()

    def to_device_batches(self, columns: Columns = None, filter: str | pc.Expression | None = None, *,  # noqa: A002
                          on_cpu_fallback: str = "warn", batch_size: int | None = None, **kwargs: Any):
        """Stream ``lance_gpu.gpu.device_table.DeviceTable``s whose columns stay in device memory:
        ``dt.to_cupy(name)``, ``dt.device_column(name)`` (DLPack), ``dt.to_cudf()``; batches of
        exactly ``batch_size`` rows across fragment ends (the last may be shorter), or one per
        fragment without it.  Needs a usable GPU (``GpuUnavailableError`` otherwise).

        Parameters
        ----------
        columns, filter, on_cpu_fallback, **kwargs
            As :meth:`scanner`.
        batch_size : int, optional
            Rows per device batch (see :meth:`LanceScanner.to_device_batches`).
        """
        return self.scanner(columns, filter, on_cpu_fallback=on_cpu_fallback, **kwargs).to_device_batches(batch_size)

    @_with_commit_lock
    def create_index(self, column: str | list[str], index_type: str, name: str | None = None, metric: str = "L2",
                     replace: bool = False, num_partitions: int | None = None, num_sub_vectors: int | None = None,
                     accelerator: Any = None, **kwargs: Any) -> LanceDataset:
        """Build an IVF_FLAT / IVF_PQ / IVF_SQ vector index that pylance uses; see
        :mod:`lance_gpu.ops.vector_index`.

        Parameters
        ----------
        column : str
            The vector column (fixed-size list of floats).
        index_type : str
            "IVF_FLAT", "IVF_PQ" or "IVF_SQ" (other vector types are refused); "BTREE",
            "BITMAP", "LABEL_LIST" build a scalar index (:meth:`create_scalar_index`).
        name : str, optional
            Index name (default ``{column}_idx``).
        metric : str
            "l2", "cosine" or "dot".
        replace : bool
            Replace an index of the same name (else that is an error).
        num_partitions : int, optional
            IVF partitions (required for IVF_PQ).
        num_sub_vectors : int, optional
            PQ sub-vectors (IVF_PQ; must divide the dimension).
        accelerator : optional
            ``"cuda"``: k-means and PQ training on the device (numba-cuda kernels).
        """
        if isinstance(index_type, str) and index_type.upper() in ("BTREE", "BITMAP", "LABEL_LIST"):
            self.create_scalar_index(column, index_type, name=name, replace=replace)  # type: ignore[arg-type]
            return self
        self._advance(ops.vector_index.create_index(self._snapshot, column, index_type, name, metric, replace, num_partitions,
                                                    num_sub_vectors, accelerator, **kwargs))
        return self


    # -- history, housekeeping (lance_gpu.write.history, lance_gpu.ops.housekeeping) ---------

    def read_transaction(self, version: int) -> Any:
        """The transaction that committed ``version`` (pylance's ``read_transaction``).

        Parameters
        ----------
        version : int
            A version of this dataset.

        Returns
        -------
        Transaction or None
            None when the version records no transaction.
        """
        return write.history.read_transaction(self.snapshot, version)

    def get_transactions(self, recent_transactions: int = 10) -> list:
        """The transactions of the latest ``recent_transactions`` versions up to this one,
        newest first (pylance's ``get_transactions``).

        Parameters
        ----------
        recent_transactions : int, default 10
            How many versions to go back.
        """
        return write.history.get_transactions(self.snapshot, recent_transactions)

    @staticmethod
    def drop(base_uri: str | os.PathLike[str], storage_options: dict[str, str] | None = None,
             ignore_not_found: bool | None = None) -> None:
        """Delete the whole dataset at ``base_uri`` (pylance's ``LanceDataset.drop``).

        Parameters
        ----------
        base_uri : str or Path
            The dataset's root.
        storage_options : dict, optional
            Object store options.
        ignore_not_found : bool, optional
            Return quietly when nothing is there (else ``OSError``).
        """
        ops.housekeeping.drop(base_uri, storage_options, ignore_not_found)

    def validate(self) -> None:
        """Check this version's metadata against its data files (pylance's ``validate``);
        raises :class:`~lance_gpu.errors.CorruptFileError` naming what is wrong."""
        ops.housekeeping.validate(self._snapshot)

def write_dataset(
    data_obj: Any,
    uri: Any,
    schema: pa.Schema | None = None,
    mode: str = "create",
    *,
    storage_options: dict[str, str] | None = None,
    store: object = None,
    **options: Any,
) -> LanceDataset:
    """Write ``data_obj`` as a new version of the dataset at ``uri`` and return the dataset at
    it (pylance's ``lance.write_dataset``, its parameter names); every parameter is described at
    :func:`lance_gpu.write.dataset_writer.write_version` (``storage_options=`` / ``store=``
    reach object stores)."""
    written_to, root, committed = write.dataset_writer.write_committed(data_obj, uri, schema, mode,
                                                                       storage_options=storage_options, store=store, **options)
    # the dataset at the version the commit wrote, from its manifest file: no read
    return LanceDataset._of(TableSnapshot(written_to, root, committed, storage_options), "auto")
