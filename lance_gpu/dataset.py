# SPDX-License-Identifier: Apache-2.0
"""The user-facing dataset: pylance's read API over our table and file layers.

Every read is a :class:`~lance_gpu.scan.ScanPlan` run by the CPU or GPU executor
(:mod:`lance_gpu.scan`); this module only opens versions and forwards arguments.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu._device import DEVICES
from lance_gpu.errors import InvalidArgumentError, UnknownDeviceError
from lance_gpu.fragment import LanceFragment
from lance_gpu.scan import LanceScanner, build_plan, take_rows
from lance_gpu.scan.plan import ROW_ID
from lance_gpu.table.features import check_reader_flags
from lance_gpu.io import resolve
from lance_gpu.table.manifest import list_versions, read_manifest_file, resolve_manifest
from lance_gpu.table.schema import LanceSchema

__all__ = ["ROW_ID", "LanceDataset", "LanceFragment", "dataset"]

Columns = Sequence[str] | dict[str, str] | None


def dataset(
    uri: str | os.PathLike[str],
    version: int | str | None = None,
    *,
    device: str = "auto",
    storage_options: dict[str, str] | None = None,
    store: object = None,
) -> LanceDataset:
    """Open a Lance dataset at its latest version, or at ``version`` (a number or a tag).

    Parameters
    ----------
    uri : str or path
        Local path, ``file://``, ``s3://``, ``gs://``, ``az://``, ``memory://``,
        ``http(s)://`` (see :mod:`lance_gpu.io.resolve`).
    version : int or str, optional
        Version number or tag; the latest if None.
    device : str, default "auto"
        ``"auto"`` (the GPU when usable), ``"gpu"`` or ``"cpu"``; anything else raises
        :class:`~lance_gpu.errors.UnknownDeviceError` (a ``ValueError``) here.
    storage_options : dict, optional
        pylance's storage options (credentials, endpoint, ``allow_http``, timeouts, retries).
    store : optional
        An :class:`lance_gpu.io.ObjectStore`, obstore store or fsspec file system to read
        from; ``uri`` is then the dataset's path inside it.
    """
    return LanceDataset(uri, version, device=device, storage_options=storage_options, store=store)


def _reopen(uri: str, version: int, device: str, storage_options: dict[str, str]) -> LanceDataset:
    """Unpickle a dataset: open ``uri`` at the pinned ``version`` with the same options."""
    return LanceDataset(uri, version, device=device, storage_options=storage_options)


class LanceDataset:
    """A Lance dataset at one version, read with pylance's API."""

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
        #: The dataset's store (:class:`lance_gpu.io.ObjectStore`) and its root key there.
        self.store, self.root = resolve(uri, storage_options, store=store)
        self.storage_options = dict(storage_options or {})
        self.uri = self.store.uri(self.root)
        self._device = device
        info = resolve_manifest(self.store, self.root, version)
        mf = read_manifest_file(self.store, info.path)
        self._manifest_path = info.path
        self.manifest = mf.manifest
        self.manifest_file = mf
        check_reader_flags(self.manifest.reader_feature_flags, mf.path)
        self.lance_schema = LanceSchema.from_manifest(self.manifest, mf.path)
        self.fragments = [LanceFragment(self, f) for f in self.manifest.fragments]

    def __repr__(self) -> str:
        return f"LanceDataset(uri={self.uri!r}, version={self.version})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_reopen, (self.uri, self.version, self._device, self.storage_options))

    @property
    def device(self) -> str:
        """The decoder this dataset's reads use by default ("auto", "gpu" or "cpu")."""
        return self._device

    def reload(self, version: int) -> None:
        """Move this object to ``version`` (after a commit of ours), as pylance does."""
        self.__dict__.pop("schema", None)
        LanceDataset.__init__(self, self.root, version, device=self._device, storage_options=self.storage_options, store=self.store)

    # -- writing: each call commits one new version and moves this object to it ------------

    def delete(self, predicate: str | pc.Expression, *, conflict_retries: int = 10) -> dict[str, int]:
        """Delete the rows matching ``predicate`` (SQL or a pyarrow expression).

        Writes one deletion file per touched fragment (a fragment left without rows is
        removed) and commits a Delete transaction -- also when nothing matched, as pylance.
        Returns ``{"num_deleted_rows": n}``; see :func:`lance_gpu.write.operations.delete`
        for concurrent writers.
        """
        from lance_gpu.write.operations import delete

        return delete(self, predicate, conflict_retries=conflict_retries)

    def restore(self, version: int | str | None = None) -> None:
        """Commit a new latest version whose contents are those of ``version`` (default:
        the version this object is at -- pylance's ``checkout_version(v).restore()``)."""
        from lance_gpu.write.operations import restore

        restore(self, version)

    def drop_columns(self, columns: Sequence[str]) -> None:
        """Remove columns (or dotted struct fields) from the schema; metadata only."""
        from lance_gpu.write.operations import drop_columns

        drop_columns(self, columns)

    def alter_columns(self, *alterations: dict) -> None:
        """Rename (``{"path": "a.b", "name": "c"}``) or change nullability of columns."""
        from lance_gpu.write.operations import alter_columns

        alter_columns(self, *alterations)

    def add_columns(
        self,
        transforms,
        read_columns: Sequence[str] | None = None,
        reader_schema: pa.Schema | None = None,
        batch_size: int | None = None,
    ) -> None:
        """Add columns from aligned data, a batch function, SQL expressions or all-null
        fields; see :func:`lance_gpu.write.operations.add_columns`."""
        from lance_gpu.write.operations import add_columns

        add_columns(self, transforms, read_columns, reader_schema, batch_size)

    @property
    def optimize(self):
        """``ds.optimize.compact_files(...)``, as pylance."""
        from lance_gpu.write.compaction import DatasetOptimizer

        return DatasetOptimizer(self)

    # -- metadata ---------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return int(self.manifest.version)

    @property
    def latest_version(self) -> int:
        return list_versions(self.store, self.root)[-1].version

    @cached_property
    def schema(self) -> pa.Schema:
        return self.lance_schema.to_arrow()

    @property
    def data_storage_version(self) -> str:
        return self.manifest.data_format.version or "2.0"

    def versions(self) -> list[dict]:
        """Every committed version: ``version``, ``timestamp`` and ``metadata``, oldest first."""
        out = []
        for info in list_versions(self.store, self.root):
            ts = info.timestamp.replace(tzinfo=None)
            out.append({"version": info.version, "timestamp": ts, "metadata": {}})
        return out

    def checkout_version(self, version: int | str) -> LanceDataset:
        return LanceDataset(self.root, version, device=self._device, storage_options=self.storage_options, store=self.store)

    def get_fragments(self, filter: str | pc.Expression | None = None) -> list[LanceFragment]:  # noqa: A002
        """The fragments of this version, in manifest order (pylance refuses ``filter``)."""
        if filter is not None:
            raise InvalidArgumentError("get_fragments() does not support filter yet")
        return list(self.fragments)

    def get_fragment(self, fragment_id: int) -> LanceFragment | None:
        """The fragment with this id, or None."""
        by_id = self.__dict__.get("_fragments_by_id")
        if by_id is None:
            by_id = self.__dict__["_fragments_by_id"] = {f.fragment_id: f for f in self.fragments}
        return by_id.get(int(fragment_id))

    @property
    def index_metadata(self) -> list:
        """Index metadata of this version (kept, not used for reading)."""
        section = self.manifest_file.index_section
        return list(section.indices) if section is not None else []

    def list_indices(self) -> list[dict]:
        return [{"name": i.name, "uuid": i.uuid.uuid.hex() if i.HasField("uuid") else "", "fields": list(i.fields)} for i in self.index_metadata]

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
        """
        if device is not None and device not in DEVICES:
            raise UnknownDeviceError(f"device must be one of {DEVICES}, not {device!r}")
        plan = build_plan(
            self, columns=columns, filter=filter, limit=limit, offset=offset, batch_size=batch_size,
            batch_readahead=batch_readahead, fragment_readahead=fragment_readahead, scan_in_order=scan_in_order,
            fragments=fragments, with_row_id=with_row_id, with_row_address=with_row_address, use_stats=use_stats,
            io_buffer_size=io_buffer_size, late_materialization=late_materialization,
            include_deleted_rows=include_deleted_rows, strict_batch_size=strict_batch_size, device=device, **options,
        )
        return LanceScanner(plan, self, on_cpu_fallback=on_cpu_fallback)

    def to_table(self, columns: Columns = None, filter: str | pc.Expression | None = None, limit: int | None = None,  # noqa: A002
                 offset: int | None = None, **kwargs: Any) -> pa.Table:
        """Read into one Arrow table; arguments as :meth:`scanner`."""
        return self.scanner(columns, filter, limit, offset, **kwargs).to_table()

    def to_batches(self, columns: Columns = None, filter: str | pc.Expression | None = None, limit: int | None = None,  # noqa: A002
                   offset: int | None = None, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        """Stream record batches; arguments as :meth:`scanner`."""
        return self.scanner(columns, filter, limit, offset, **kwargs).to_batches()

    def count_rows(self, filter: str | pc.Expression | None = None, **kwargs: Any) -> int:  # noqa: A002
        """Live rows, or those matching ``filter``; other arguments as :meth:`scanner`."""
        return self.scanner(filter=filter, **kwargs).count_rows()

    def head(self, num_rows: int, **kwargs: Any) -> pa.Table:
        """The first ``num_rows`` rows; other arguments as :meth:`scanner`."""
        return self.scanner(**kwargs).head(num_rows)

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array, columns: Columns = None, *,
             with_row_id: bool = False, with_row_address: bool = False) -> pa.Table:
        """Rows at the given positions (0-based, counting live rows across fragments in
        order), in the order given; decoded by the dataset's device."""
        return take_rows(self, indices, columns, with_row_id=with_row_id, with_row_address=with_row_address)

    def to_cudf(self, columns: Columns = None, filter: str | pc.Expression | None = None, *,  # noqa: A002
                on_cpu_fallback: str = "warn", **kwargs: Any):
        """Read into one ``cudf.DataFrame`` decoded on the GPU; arguments as :meth:`scanner`.

        Needs a usable GPU and cuDF (``GpuUnavailableError`` otherwise).
        """
        return self.scanner(columns, filter, device="gpu" if self._device == "auto" else None,
                            on_cpu_fallback=on_cpu_fallback, **kwargs).to_cudf()

    def to_device_batches(self, columns: Columns = None, filter: str | pc.Expression | None = None, *,  # noqa: A002
                          on_cpu_fallback: str = "warn", **kwargs: Any):
        """Stream, one fragment at a time, ``lance_gpu.gpu.columns.DeviceTable``s whose columns
        stay in device memory: ``dt.to_cupy(name)``, ``dt.device_column(name)`` (DLPack),
        ``dt.to_cudf()``.  Needs a usable GPU (``GpuUnavailableError`` otherwise)."""
        return self.scanner(columns, filter, on_cpu_fallback=on_cpu_fallback, **kwargs).to_device_batches()
