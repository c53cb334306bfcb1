# SPDX-License-Identifier: Apache-2.0
"""The user-facing dataset: pylance's read API over our table and file layers."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu._device import resolve_device
from lance_gpu._proto import table_pb2
from lance_gpu.errors import CorruptFileError, RowIndexError, SchemaMismatchError
from lance_gpu.file.container import FileVersion, LanceFileReader
from lance_gpu.table.consistency import check_data_file, data_file_of
from lance_gpu.table.deletion import read_deletion_file
from lance_gpu.table.features import check_reader_flags
from lance_gpu.table.manifest import dataset_path, list_versions, read_manifest_file, resolve_manifest
from lance_gpu.table.rowids import read_fragment_row_ids
from lance_gpu.table.schema import LanceField, LanceSchema, column_index_map

ROW_ID = "_rowid"
DEFAULT_BATCH_SIZE = 1024
_THREADS = max(1, min(8, os.cpu_count() or 1))


def _serial_kernels() -> None:
    """Pool-thread initializer: this thread's numba kernels use one thread (thread-local)."""
    import numba

    numba.set_num_threads(1)


def dataset(uri: str | os.PathLike[str], version: int | str | None = None, *, device: str = "auto") -> LanceDataset:
    """Open a Lance dataset at its latest version, or at ``version`` (a number or a tag)."""
    return LanceDataset(uri, version, device=device)


@dataclass(slots=True)
class _FieldSource:
    """Where one top-level field of a fragment lives."""

    path: str  # data file
    columns: list[int]  # 2.1+: leaf columns in order; 2.0: every node, depth-first
    version: FileVersion | None = None


class LanceFragment:
    """One fragment of a dataset version: data files, deletions, row ids."""

    def __init__(self, ds: LanceDataset, pb: table_pb2.DataFragment) -> None:
        self._ds = ds
        self.pb = pb
        self.fragment_id = int(pb.id)
        self.physical_rows = int(pb.physical_rows)
        self._readers: dict[str, LanceFileReader] = {}

    def __repr__(self) -> str:
        return f"LanceFragment(id={self.fragment_id}, physical_rows={self.physical_rows})"

    @cached_property
    def deleted_rows(self) -> np.ndarray:
        """Sorted physical offsets of deleted rows (uint32)."""
        if not self.pb.HasField("deletion_file"):
            return np.zeros(0, np.uint32)
        return read_deletion_file(self._ds.uri, self.fragment_id, self.pb.deletion_file)

    @cached_property
    def live_rows(self) -> np.ndarray | None:
        """Physical offsets of the rows not deleted, or None when nothing is deleted."""
        deleted = self.deleted_rows
        if deleted.size == 0:
            return None
        keep = np.ones(self.physical_rows, np.bool_)
        if deleted.size and int(deleted[-1]) >= self.physical_rows:
            raise CorruptFileError(self._ds.uri, f"fragment {self.fragment_id} deletes row {int(deleted[-1])} of {self.physical_rows}")
        keep[deleted] = False
        return np.flatnonzero(keep)

    def count_rows(self) -> int:
        return self.physical_rows - int(self.deleted_rows.size)

    @cached_property
    def row_ids(self) -> np.ndarray:
        """Row id of every physical row: stable ids if the dataset has them, else addresses."""
        ids = read_fragment_row_ids(self._ds.uri, self.pb)
        if ids is not None:
            return ids
        return (np.uint64(self.fragment_id) << np.uint64(32)) | np.arange(self.physical_rows, dtype=np.uint64)

    def _reader(self, path: str) -> LanceFileReader:
        r = self._readers.get(path)
        if r is None:
            r = LanceFileReader(path)
            check_data_file(r, self.pb, data_file_of(self.pb, path, os.path.join(self._ds.uri, "data")))
            self._readers[path] = r
        return r

    def _source(self, field: LanceField) -> _FieldSource | None:
        """Where ``field`` lives; None if no data file of the fragment holds any of its
        fields (a column added without data: read as nulls, as the table format says)."""
        data_dir = os.path.join(self._ds.uri, "data")
        ids = [f.id for f in field.walk()]
        leaf_ids = [f.id for f in field.walk() if f.is_leaf]
        wanted = set(ids)
        if not any(int(i) in wanted for df in self.pb.files for i in df.fields):
            return None
        for df in self.pb.files:
            cmap = column_index_map(df, self._ds.lance_schema)
            path = os.path.join(data_dir, df.path)
            if df.file_major_version == 2 and df.file_minor_version == 0 and all(i in cmap for i in ids):
                return _FieldSource(path, [cmap[i] for i in ids], FileVersion(2, 0))
            if leaf_ids and all(i in cmap for i in leaf_ids):
                return _FieldSource(path, [cmap[i] for i in leaf_ids])
        raise CorruptFileError(self._ds.uri, f"fragment {self.fragment_id} has no data file holding field {field.name!r}")

    def read_field(self, field: LanceField, arrow_field: pa.Field, rows: np.ndarray | None) -> pa.Array:
        """Read one top-level field, for all physical rows or the sorted ``rows``."""
        src = self._source(field)
        if src is None:
            return pa.nulls(self.physical_rows if rows is None else len(rows), arrow_field.type)
        reader = self._reader(src.path)
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

    def rows_to_read(self, offsets: np.ndarray | None = None) -> np.ndarray | None:
        """Physical rows to read: all live rows (None = every row) or the given offsets."""
        if offsets is not None:
            return offsets
        return self.live_rows


class LanceDataset:
    """A Lance dataset at one version, read with pylance's API."""

    def __init__(self, uri: str | os.PathLike[str], version: int | str | None = None, *, device: str = "auto") -> None:
        self.uri = os.fspath(dataset_path(uri))
        self._device = device
        info = resolve_manifest(self.uri, version)
        mf = read_manifest_file(info.path)
        self._manifest_path = info.path
        self.manifest = mf.manifest
        self.manifest_file = mf
        check_reader_flags(self.manifest.reader_feature_flags, info.path)
        self.lance_schema = LanceSchema.from_manifest(self.manifest, info.path)
        self.fragments = [LanceFragment(self, f) for f in self.manifest.fragments]

    def __repr__(self) -> str:
        return f"LanceDataset(uri={self.uri!r}, version={self.version})"

    def _reload(self, version: int) -> None:
        """Move this object to ``version`` (after a commit of ours), as pylance does."""
        self.__dict__.pop("schema", None)
        LanceDataset.__init__(self, self.uri, version, device=self._device)

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
        return list_versions(self.uri)[-1].version

    @cached_property
    def schema(self) -> pa.Schema:
        return self.lance_schema.to_arrow()

    @property
    def data_storage_version(self) -> str:
        return self.manifest.data_format.version or "2.0"

    def versions(self) -> list[dict]:
        """Every committed version: ``version``, ``timestamp`` and ``metadata``, oldest first."""
        out = []
        for info in list_versions(self.uri):
            ts = info.timestamp.replace(tzinfo=None)
            out.append({"version": info.version, "timestamp": ts, "metadata": {}})
        return out

    def checkout_version(self, version: int | str) -> LanceDataset:
        return LanceDataset(self.uri, version, device=self._device)

    def get_fragments(self) -> list[LanceFragment]:
        return list(self.fragments)

    def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        if filter is None:
            return sum(f.count_rows() for f in self.fragments)
        return self.to_table(columns=[], filter=filter).num_rows

    @property
    def index_metadata(self) -> list:
        """Index metadata of this version (kept, not used for reading)."""
        section = self.manifest_file.index_section
        return list(section.indices) if section is not None else []

    def list_indices(self) -> list[dict]:
        return [{"name": i.name, "uuid": i.uuid.uuid.hex() if i.HasField("uuid") else "", "fields": list(i.fields)} for i in self.index_metadata]

    # -- reading ----------------------------------------------------------------------------

    def _read_plan(self, columns: Sequence[str] | None, filter) -> tuple[list[LanceField], pa.Schema, object, list[LanceField]]:
        """``(fields, result schema, compiled filter or None, fields to read)``: the projection
        plus the top-level fields the filter needs that the projection leaves out."""
        fields, projected = self._projection(columns)
        compiled = None
        read_fields = list(fields)
        if filter is not None:
            from lance_gpu.filter import parse_filter

            compiled = parse_filter(filter, self.schema)
            have = {f.name for f in read_fields}
            top = {f.name: f for f in self.lance_schema.fields}
            for name in compiled.columns:
                if name not in have and name in top:
                    read_fields.append(top[name])
                    have.add(name)
        return fields, projected, compiled, read_fields

    def _projection(self, columns: Sequence[str] | None) -> tuple[list[LanceField], pa.Schema]:
        """The top-level fields to read, and the result schema.

        As in pylance, a dotted name (``"st.a"``) is a top-level result column named by its
        path, holding the nested field (nullable, null where an enclosing struct is null).
        """
        if columns is None:
            fields = list(self.lance_schema.fields)
            return fields, self.schema
        names = list(columns)
        top = {f.name: f for f in self.lance_schema.fields}
        arrow_top = {f.name: f for f in self.schema}
        out: list[LanceField] = []
        result: list[pa.Field] = []
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise SchemaMismatchError(f"duplicate column name {name!r} in the projection")
            seen.add(name)
            if name in top:
                lf, af = top[name], arrow_top[name]
            else:
                chain = self._nested_chain(name)
                lf, af = chain[0], arrow_top[chain[0].name]
                for child in chain[1:]:
                    af = af.type.field(child.name)
                af = af.with_name(name).with_nullable(True)
            if all(f.name != lf.name for f in out):
                out.append(lf)
            result.append(af)
        return out, pa.schema(result, metadata=self.schema.metadata)

    def _nested_chain(self, name: str) -> list[LanceField]:
        """The fields from the top-level field down to the one a dotted ``name`` points at."""
        try:
            chain = self.lance_schema._resolve(name)
        except SchemaMismatchError:
            msg = f"column {name!r} is not in the dataset's schema {self.schema.names}"
            raise SchemaMismatchError(msg) from None
        if any(f.logical_type != "struct" for f in chain[:-1]):
            msg = f"column {name!r}: only fields of structs can be projected by a dotted name"
            raise SchemaMismatchError(msg)
        return chain

    def _finish(self, table: pa.Table, projected: pa.Schema, columns: Sequence[str] | None, with_row_id: bool) -> pa.Table:
        """Shape the read top-level fields into the projected schema (metadata included);
        keeps the row count when no column is projected."""
        arrays = []
        for f in projected:
            if f.name in table.column_names:
                col = table.column(f.name)
            else:
                chain = self._nested_chain(f.name)
                col = table.column(chain[0].name)
                for child in chain[1:]:
                    col = pc.struct_field(col, [col.type.get_field_index(child.name)])
            arrays.append(col)
        schema = projected
        if with_row_id:
            arrays.append(table.column(ROW_ID))
            schema = schema.append(pa.field(ROW_ID, pa.uint64(), nullable=True))
        if not arrays:
            return _empty_columns(table.num_rows, schema.metadata)
        return pa.Table.from_arrays(arrays, schema=schema)

    def to_table(
        self,
        columns: Sequence[str] | None = None,
        filter: str | pc.Expression | None = None,
        *,
        with_row_id: bool = False,
        limit: int | None = None,
        offset: int | None = None,
        device: str | None = None,
        on_cpu_fallback: str = "warn",
    ) -> pa.Table:
        """Read the dataset (or the given columns) into one Arrow table; deleted rows never appear.

        ``device`` ("auto", "gpu", "cpu"; default: the dataset's) picks the decoder.  On the
        GPU, a field whose encoding has no GPU kernel is decoded on the CPU with a
        ``CpuDecodeWarning`` (once per reason), or raises ``UnsupportedEncodingError`` with
        ``on_cpu_fallback="raise"`` (``"allow"``: silently).
        """
        if resolve_device(device or self._device) == "gpu":
            from lance_gpu.gpu.read import scan_tables

            batches = list(scan_tables(self, columns, filter, with_row_id=with_row_id, on_cpu_fallback=on_cpu_fallback))
        else:
            batches = list(self._scan(columns, filter, with_row_id))
        schema = self._result_schema(columns, with_row_id)
        if not batches:
            table = pa.Table.from_batches([], schema=schema)
        elif not schema.names:
            # concat_tables drops the row count of tables without columns
            table = _empty_columns(sum(b.num_rows for b in batches), schema.metadata)
        else:
            table = pa.concat_tables(batches)
        if offset or limit is not None:
            table = table.slice(offset or 0, limit)
        return table

    def _result_schema(self, columns: Sequence[str] | None, with_row_id: bool) -> pa.Schema:
        _fields, projected = self._projection(columns)
        if with_row_id:
            projected = projected.append(pa.field(ROW_ID, pa.uint64(), nullable=True))
        return projected

    def _scan(
        self,
        columns: Sequence[str] | None,
        filter: str | pc.Expression | None,
        with_row_id: bool,
    ) -> Iterator[pa.Table]:
        fields, projected, compiled, read_fields = self._read_plan(columns, filter)
        frags = [(frag, frag.rows_to_read()) for frag in self.fragments]
        for frag, table in self._read_fragments(frags, read_fields, with_row_id):
            if compiled is not None:
                table = compiled.apply(table)
            yield self._finish(table, projected, columns, with_row_id)

    def _read_fragments(
        self,
        frags: list[tuple[LanceFragment, np.ndarray | None]],
        fields: list[LanceField],
        with_row_id: bool,
    ) -> Iterator[tuple[LanceFragment, pa.Table]]:
        """Read ``fields`` of each (fragment, rows) pair, decoding (fragment, field) pairs in
        threads (the compiled decoders release the GIL); yields tables in fragment order."""
        arrow_fields = {f.name: af for f, af in zip(self.lance_schema.fields, self.schema)}
        names = [f.name for f in fields]
        # Enough (fragment, field) pairs to keep every core busy: decode them in a pool of
        # threads whose compiled kernels run serially (nested thread teams only contend);
        # otherwise decode in this thread and let the kernels use every core.
        pooled = len(frags) * len(fields) >= 2 * _THREADS and _THREADS > 1
        with ThreadPoolExecutor(_THREADS if pooled else 1, initializer=_serial_kernels if pooled else None) as pool:
            futures = [
                [pool.submit(frag.read_field, f, arrow_fields[f.name], rows) for f in fields]
                for frag, rows in frags
            ]
            for (frag, rows), futs in zip(frags, futures):
                arrays = [fu.result() for fu in futs]
                n = frag.physical_rows if rows is None else rows.size
                if arrays:
                    table = pa.Table.from_arrays(arrays, names=names)
                else:
                    table = pa.table({"_": pa.nulls(n)}).drop(["_"])
                if with_row_id:
                    ids = frag.row_ids if rows is None else frag.row_ids[rows]
                    table = table.append_column(ROW_ID, pa.array(ids, pa.uint64()))
                yield frag, table

    def to_batches(
        self,
        columns: Sequence[str] | None = None,
        filter: str | pc.Expression | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        with_row_id: bool = False,
        device: str | None = None,
        on_cpu_fallback: str = "warn",
    ) -> Iterator[pa.RecordBatch]:
        """Stream record batches of at most ``batch_size`` rows, fragment by fragment.

        With the GPU (see :meth:`to_table` for ``device`` and ``on_cpu_fallback``), fragments
        are decoded on the device as many at a time as the device memory budget allows, and
        each is copied to the host as it is handed out.
        """
        if resolve_device(device or self._device) == "gpu":
            from lance_gpu.gpu.read import scan_tables

            size = max(int(batch_size), 1)
            for table in scan_tables(self, columns, filter, with_row_id=with_row_id, on_cpu_fallback=on_cpu_fallback):
                yield from table.to_batches(max_chunksize=size)
            return
        fields, projected, compiled, read_fields = self._read_plan(columns, filter)
        batch_size = max(int(batch_size), 1)
        # Decode a few batches' worth of rows at a time (at least ~256k rows, to keep the
        # per-window overhead small), then hand out batch_size slices.
        window = batch_size * max(1, -(-262_144 // batch_size))
        for frag in self.fragments:
            live = frag.rows_to_read()
            if live is None:
                live = np.arange(frag.physical_rows, dtype=np.int64)
            for start in range(0, live.size, window):
                rows = live[start : start + window]
                _frag, table = next(self._read_fragments([(frag, rows)], read_fields, with_row_id))
                if compiled is not None:
                    table = compiled.apply(table)
                table = self._finish(table, projected, columns, with_row_id)
                yield from table.to_batches(max_chunksize=batch_size)

    def to_cudf(
        self,
        columns: Sequence[str] | None = None,
        filter: str | pc.Expression | None = None,
        *,
        on_cpu_fallback: str = "warn",
    ):
        """Read the dataset (or the given columns, filtered) into one ``cudf.DataFrame``.

        Pages are decoded on the GPU and the frame is built on the decoded device buffers
        without a copy.  Needs a usable GPU and cuDF (``GpuUnavailableError`` otherwise);
        ``on_cpu_fallback`` as in :meth:`to_table`.
        """
        from lance_gpu.gpu.read import to_cudf

        return to_cudf(self, columns, filter, on_cpu_fallback=on_cpu_fallback)

    def to_device_batches(
        self,
        columns: Sequence[str] | None = None,
        filter: str | pc.Expression | None = None,
        *,
        with_row_id: bool = False,
        on_cpu_fallback: str = "warn",
    ):
        """Stream the dataset, one fragment at a time, as ``lance_gpu.gpu.columns.DeviceTable``s
        whose columns stay in device memory: ``dt.to_cupy(name)`` (numeric and fixed-size
        list columns), ``dt.device_column(name)`` (DLPack: ``torch.from_dlpack(...)``),
        ``dt.to_cudf()``.  Needs a usable GPU (``GpuUnavailableError`` otherwise).
        """
        from lance_gpu.gpu.read import device_tables

        return device_tables(self, columns, filter, with_row_id=with_row_id, on_cpu_fallback=on_cpu_fallback)

    def take(self, indices: Sequence[int] | np.ndarray | pa.Array, columns: Sequence[str] | None = None, *, with_row_id: bool = False) -> pa.Table:
        """Rows at the given positions (0-based, counting live rows across fragments in order)."""
        idx = np.asarray(indices.to_numpy() if isinstance(indices, (pa.Array, pa.ChunkedArray)) else indices, dtype=np.int64)
        fields, projected = self._projection(columns)
        counts = np.array([f.count_rows() for f in self.fragments], np.int64)
        starts = np.zeros(counts.size + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        total = int(starts[-1])
        if idx.size and (idx.min() < 0 or idx.max() >= total):
            msg = f"take index out of range for a dataset of {total} rows"
            raise RowIndexError(msg)
        order = np.argsort(idx, kind="stable")
        sorted_idx = idx[order]
        frag_of = np.searchsorted(starts, sorted_idx, side="right") - 1
        jobs = []
        inverses = []
        for fi in np.unique(frag_of):
            frag = self.fragments[int(fi)]
            local = sorted_idx[frag_of == fi] - starts[fi]
            live = frag.live_rows
            phys = local if live is None else live[local]
            uniq, inverse = np.unique(phys, return_inverse=True)
            jobs.append((frag, uniq))
            inverses.append(inverse)
        parts = []
        for (_frag, t), inverse in zip(self._read_fragments(jobs, fields, with_row_id), inverses):
            parts.append(t if inverse.size == t.num_rows else t.take(pa.array(inverse)))
        schema_cols = [f.name for f in fields] + ([ROW_ID] if with_row_id else [])
        if not parts:
            return pa.Table.from_batches([], schema=self._result_schema(columns, with_row_id))
        table = pa.concat_tables(parts)
        # Back to the caller's order.
        inv = np.empty_like(order)
        inv[order] = np.arange(order.size)
        table = table.take(pa.array(inv)).select(schema_cols)
        return self._finish(table, projected, columns, with_row_id)


def _empty_columns(num_rows: int, metadata: dict | None) -> pa.Table:
    """A table of ``num_rows`` rows and no columns (pyarrow's replace_schema_metadata and
    concat_tables both lose the row count of such tables)."""
    return pa.table({"_": pa.nulls(num_rows)}, metadata=metadata).select([])
