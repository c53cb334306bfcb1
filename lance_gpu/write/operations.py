# SPDX-License-Identifier: Apache-2.0
"""Column and row operations on a dataset, each planned on one version and committed as one
transaction of :mod:`lance_gpu.txn` (operation types and conflict rules live there).

Dataset-level entry points (used by :class:`lance_gpu.dataset.LanceDataset` methods, which
pass their :class:`~lance_gpu.table.snapshot.TableSnapshot` and swap in the committed one
these return): :func:`delete`, :func:`restore`, :func:`drop_columns`, :func:`alter_columns`,
:func:`add_columns`, :func:`merge`, :func:`update_config`.  Each re-plans itself on the latest version after a
:class:`~lance_gpu.errors.RetryableCommitConflictError` (``conflict_retries`` times, as
pylance), so a concurrent compaction, delete or append does not make it fail.  Compaction
lives in :mod:`lance_gpu.write.compaction`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu._proto import table_pb2
from lance_gpu.errors import (
    ColumnCastError,
    ColumnExistsError,
    ColumnNotFoundError,
    IndexedColumnError,
    InvalidArgumentError,
    RowCountMismatchError,
    SchemaMismatchError,
    UnsupportedFeatureError,
    ValueCastError,
)
from lance_gpu.file.writer.blobs import blob_v2_schema
from lance_gpu.index.query import index_selections
from lance_gpu.io.store import join
from lance_gpu.scan import ROW_ADDR, ROW_ID, ReadUnit, decode_spans, read_rows, rows_where, scanner_for
from lance_gpu.scan.execute import add_virtual_span
from lance_gpu.table.deletion_writer import fragment_with_deletions
from lance_gpu.table.manifest import (
    ManifestFile,
    latest_version,
    read_manifest_file,
    resolve_manifest,
)
from lance_gpu.table.schema import LanceField, LanceSchema
from lance_gpu.txn.commit import DEFAULT_CONFLICT_RETRIES, commit_file, run_with_retries
from lance_gpu.txn.operations import Delete, Merge, Operation, Project, Restore, UpdateConfig, UpdateMap
from lance_gpu.txn.publish import check_appendable
from lance_gpu.write.dataset_writer import _check_types, _data_file, data_file_name, data_file_writer, dataset_file_minor
from lance_gpu.write.inputs import cast_to_stored, coerce_input
from lance_gpu.write.rowlevel import row_addresses
from lance_gpu.write.udf import BatchUDF, BatchUDFCheckpoint

if TYPE_CHECKING:  # pragma: no cover
    from lance_gpu.table.snapshot import TableSnapshot

__all__ = [
    "add_columns",
    "alter_columns",
    "delete",
    "drop_columns",
    "plan_delete",
    "restore",
]

_OFFSET = "__lance_gpu_row_offset__"
_UNIT = "__lance_gpu_unit__"  # a delete's row: its unit within the span decoded
#: ``CAST(NULL AS type)``: an add_columns expression that adds an all-null column.
_NULL_CAST = re.compile(r"^\s*CAST\s*\(\s*NULL\s+AS\s+[^()]+(\([^()]*\))?\s*\)\s*$", re.IGNORECASE)
#: Fragments whose filter columns are decoded at once by ``delete``.
_DELETE_CHUNK = 16
#: Rows of decoded filter columns a ``delete`` evaluates its predicate on at once.
_DELETE_EVAL_ROWS = 1 << 16


def _naming(ds: TableSnapshot):
    return ds.naming


def _commit(ds: TableSnapshot, op: Operation, base: ManifestFile | None = None) -> table_pb2.Manifest:
    """Commit ``op`` on top of ``base`` (default: the version ``ds`` is at); files the
    operation wrote are removed if the commit fails."""
    return _commit_file(ds, op, base).manifest


def _commit_file(ds: TableSnapshot, op: Operation, base: ManifestFile | None = None) -> ManifestFile:
    """:func:`_commit`, returning the committed manifest file (for ``ds.committed``)."""
    return commit_file(ds.store, ds.root, op, base if base is not None else ds.manifest_file, _naming(ds))


# --------------------------------------------------------------------------------------------
# Delete


def plan_delete(ds: TableSnapshot, predicate: str | pc.Expression) -> tuple[Delete, int]:
    """Evaluate ``predicate`` on every live row of ``ds`` and write the new deletion files;
    returns the operation (not committed) and the number of newly deleted rows."""
    from lance_gpu.filter import parse_filter

    compiled = parse_filter(predicate, ds.schema)
    text = compiled.source if compiled.source is not None else str(predicate)
    top = {f.name: f for f in ds.lance_schema.fields}
    fields = [top[n] for n in compiled.columns if n in top]
    # the row-identity columns a predicate may read (a scan's offsets are not a delete's)
    virtual = {c for c in compiled.virtual_columns if c in (ROW_ID, ROW_ADDR)}
    initial: dict[int, table_pb2.DataFragment] = {}
    affected: dict[int, np.ndarray] = {}
    updated: list[table_pb2.DataFragment] = []
    deleted_ids: list[int] = []
    total = 0
    op = Delete([], [], text)
    # rows a scalar index selects (the predicate is still evaluated on them), as pylance does
    selected = _index_rows(ds, predicate) if isinstance(predicate, str) else {}
    units_all = []
    for frag in ds.fragments:
        rows = selected.get(frag.fragment_id)
        if rows is None:
            units_all.append(ReadUnit(frag, frag.live_rows))
        elif rows.size:
            units_all.append(ReadUnit(frag, rows))
    pending: list[tuple[list[ReadUnit], pa.Table]] = []  # decoded, not yet evaluated
    pending_rows = 0

    def evaluate() -> None:
        """The predicate evaluated once over the pending spans' rows (one table of them all:
        a thousand tiny fragments are one filter, not a thousand), hits split by fragment."""
        nonlocal total, pending_rows
        group = [u for units, _t in pending for u in units]
        table = pending[0][1] if len(pending) == 1 else pa.concat_tables([t for _u, t in pending]).combine_chunks()
        pending.clear()
        pending_rows = 0
        # the rows where the predicate holds (one evaluation, no filtered copy of the table),
        # placed by numpy: each hit's unit and physical offset there
        for u, offsets in rows_where(group, compiled.positions(table)):
            frag = group[u].fragment
            hit = offsets.astype(np.uint32)
            total += int(hit.size)
            fid = frag.fragment_id
            initial[fid] = frag.pb
            affected[fid] = hit
            all_rows = np.union1d(frag.deleted_rows, hit).astype(np.uint32)
            new = fragment_with_deletions(ds.store, ds.root, frag.pb, ds.version, all_rows, op.written)
            if new is None:
                deleted_ids.append(fid)
            else:
                updated.append(new)

    try:
        # decoded per span of small fragments (per fragment otherwise); the predicate
        # evaluated once per _DELETE_EVAL_ROWS rows of them
        for group, table in decode_spans(ds, units_all, fields, ahead=_DELETE_CHUNK):
            if virtual:  # _rowid / _rowaddr of the rows, as a scan gives them
                table = add_virtual_span(table, group, virtual, None)
            pending.append((group, table))
            pending_rows += table.num_rows
            if pending_rows >= _DELETE_EVAL_ROWS:
                evaluate()
        if pending:
            evaluate()
    except BaseException:
        op.cleanup(ds.store)
        raise
    op.with_rows(initial, affected)
    op.updated = {int(f.id): f for f in updated}
    op.deleted_ids = deleted_ids
    return op, total


def _index_rows(ds: TableSnapshot, predicate: str) -> dict[int, np.ndarray | None]:
    """Per fragment a scalar index covers: the live rows it selects for ``predicate`` (None:
    all of them); fragments no index covers are absent (:mod:`lance_gpu.index.query`)."""
    mf = ds.manifest_file
    found = index_selections(ds.store, ds.root, mf.manifest, mf.index_section, ds.lance_schema, ds.schema,
                             predicate, ds.fragments)
    return {} if found is None else found.selections


def delete(
    ds: TableSnapshot, predicate: str | pc.Expression, *, conflict_retries: int = DEFAULT_CONFLICT_RETRIES
) -> tuple[TableSnapshot, dict[str, int]]:
    """Delete the rows matching ``predicate``; commits one Delete transaction (even when no
    row matches, as pylance does) and returns the committed version's snapshot.

    On a :class:`RetryableCommitConflictError` (a concurrent writer deleted the same rows,
    compacted or merged the fragments) the delete is re-planned on the latest version, at
    most ``conflict_retries`` times, like pylance.  Returns the new snapshot and
    ``{"num_deleted_rows": n}``.
    """
    first = [True]

    def attempt() -> tuple[ManifestFile, int]:
        target = ds if first[0] else ds.latest()
        first[0] = False
        op, n = plan_delete(target, predicate)
        return _commit_file(target, op), n

    committed, n = run_with_retries(attempt, conflict_retries)
    return ds.committed(committed), {"num_deleted_rows": n}


def restore(ds: TableSnapshot, version: int | str | None = None) -> TableSnapshot:
    """Commit a new version equal to ``version`` (default: the version ``ds`` is at, as
    pylance's ``restore()``); returns the committed version's snapshot."""
    number = ds.version if version is None else int(resolve_manifest(ds.store, ds.root, version).version)
    latest = read_manifest_file(ds.store, latest_version(ds.store, ds.root).path)
    manifest = _commit(ds, Restore(number), latest)
    return ds.checkout(int(manifest.version))


# --------------------------------------------------------------------------------------------
# Project: drop / rename columns


def _schema_without(schema: LanceSchema, drop_ids: set[int]) -> LanceSchema:
    def prune(f: LanceField) -> LanceField | None:
        if f.id in drop_ids:
            return None
        kids = [k for k in (prune(c) for c in f.children) if k is not None]
        return replace(f, children=kids) if len(kids) != len(f.children) else f

    fields = [k for k in (prune(f) for f in schema.fields) if k is not None]
    return LanceSchema(fields, schema.metadata, schema.source)


def drop_columns(ds: TableSnapshot, columns: Sequence[str]) -> TableSnapshot:
    """Remove ``columns`` (top-level names or dotted paths of struct fields) from the schema;
    data files are kept (a data file none of whose fields remain leaves the fragment).
    Re-planned on the latest version after a retryable conflict."""
    if isinstance(columns, str):
        columns = [columns]
    return _with_retries(ds, lambda target: Project(_dropped_schema(target, columns)))


def _with_retries(ds: TableSnapshot, plan: Callable[[TableSnapshot], Operation]) -> TableSnapshot:
    """Plan on ``ds`` (then on the latest version after each retryable conflict), commit,
    and return the committed version's snapshot."""
    first = [True]

    def attempt() -> ManifestFile:
        target = ds if first[0] else ds.latest()
        first[0] = False
        return _commit_file(target, plan(target))

    return ds.committed(run_with_retries(attempt))


def _dropped_schema(ds: TableSnapshot, columns: Sequence[str]) -> LanceSchema:
    schema = ds.lance_schema
    drop: set[int] = set()
    for name in columns:
        try:
            field = schema.field(name)
        except SchemaMismatchError:
            raise ColumnNotFoundError(f"Column {name} does not exist in the dataset") from None
        drop |= {f.id for f in field.walk()}
    new = _schema_without(schema, drop)
    if not new.fields:
        raise ValueError("Cannot drop all columns from a dataset")
    for f in list(new.walk()):
        if f.logical_type == "struct" and not f.children:
            raise ValueError(f"cannot drop every field of struct {f.dotted_path!r}")
    return new


def _rebuild(fields: list[LanceField], prefix: tuple[str, ...] = ()) -> list[LanceField]:
    out = []
    for f in fields:
        path = (*prefix, f.name)
        out.append(replace(f, path=path, children=_rebuild(f.children, path)))
    return out


def alter_columns(ds: TableSnapshot, *alterations: Mapping[str, Any]) -> TableSnapshot:
    """Rename columns, relax / tighten nullability and cast columns, as pylance's
    ``alter_columns``: each alteration is ``{"path": "a.b", "name": "new"}`` and/or
    ``"nullable": bool`` (one Project transaction, metadata only) and/or ``"data_type":
    pyarrow type`` for a top-level column (one Merge transaction: the column is rewritten
    under a new field id into one new data file per fragment, as pylance does; the old files
    keep the old field id's data, unreferenced)."""
    if len(alterations) == 1 and isinstance(alterations[0], (list, tuple)):
        alterations = tuple(alterations[0])
    casts = [a for a in alterations if isinstance(a, Mapping) and a.get("data_type") is not None]
    renames = [a for a in alterations if not (isinstance(a, Mapping) and a.get("data_type") is not None)]
    if casts:  # a data rewrite: one Merge carrying the renames too, as pylance
        _refuse_indexed_casts(ds, casts)
        return _with_retries(ds, lambda target: _cast_columns(target, casts, renames))
    return _with_retries(ds, lambda target: Project(_altered_schema(target, renames)))  # metadata only


def _refuse_indexed_casts(ds: TableSnapshot, casts: Sequence[Mapping[str, Any]]) -> None:
    """pylance refuses to cast a column an index is attached to (the rewrite invalidates it)."""
    section = ds.manifest_file.index_section
    if section is None:
        return
    names = []
    for alt in casts:
        try:
            fid = ds.lance_schema.field(alt["path"]).id
        except (SchemaMismatchError, KeyError):
            continue  # reported by the cast itself
        hit = sorted({i.name for i in section.indices if fid in i.fields})
        if hit:
            names.append((str(alt["path"]), hit))
    if names:
        cols = ", ".join(c for c, _ in names)
        idx = sorted({n for _, hit in names for n in hit})
        raise IndexedColumnError(
            f"Invalid user input: Cannot cast column(s) [{cols}] to a new type: they have {len(idx)} index(es) attached: "
            f"[{', '.join(idx)}]. Cast rewrites column data and invalidates any index on the affected column(s). "
            "Drop the index(es) with drop_index() before altering, then recreate them after the cast completes.")


def _altered_schema(
    ds: TableSnapshot, alterations: Sequence[Mapping[str, Any]], schema: LanceSchema | None = None
) -> LanceSchema:
    schema = ds.lance_schema if schema is None else schema
    changes: dict[int, dict[str, Any]] = {}
    for alt in alterations:
        if not isinstance(alt, Mapping) or "path" not in alt:
            raise TypeError("each alteration must be a dict with a 'path' key")
        unknown = [k for k in alt if k not in ("path", "name", "nullable", "data_type")]
        if unknown:  # pylance's messages
            raise InvalidArgumentError(f"Unknown key: {unknown[0]}. Valid keys are name, nullable, and data_type.")
        if all(alt.get(k) is None for k in ("name", "nullable", "data_type")):
            raise InvalidArgumentError("At least one of name, nullable, or data_type must be specified")
        try:
            field = schema.field(alt["path"])
        except SchemaMismatchError:
            raise ColumnNotFoundError(f'Column "{alt["path"]}" does not exist in the dataset') from None
        change = changes.setdefault(field.id, {})
        if alt.get("name") is not None:
            change["name"] = str(alt["name"])
        if alt.get("nullable") is not None:
            nullable = bool(alt["nullable"])
            if not nullable and field.nullable:
                nulls = scanner_for(ds, columns=[field.dotted_path]).to_table().column(0).null_count
                if nulls:
                    raise ValueError(f"column {field.dotted_path!r} holds {nulls} nulls and cannot be made non-nullable")
            change["nullable"] = nullable

    def edit(f: LanceField) -> LanceField:
        kids = [edit(c) for c in f.children]
        return replace(f, children=kids, **changes.get(f.id, {}))

    fields = _rebuild([edit(f) for f in schema.fields])
    for level in [fields] + [f.children for f in LanceSchema(fields).walk()]:
        names = [f.name for f in level]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"Duplicate field name {min(dup)!r} in schema")
    return LanceSchema(fields, schema.metadata, schema.source)


# --------------------------------------------------------------------------------------------
# Merge: add columns


def _next_field_id(ds: TableSnapshot) -> int:
    """pylance's: one past the largest id in the schema or in any data file's field list
    (dropped fields keep their ids in data files, so they are never reused)."""
    ids = [ds.lance_schema.max_field_id]
    for frag in ds.manifest.fragments:
        for f in frag.files:
            ids.extend(int(i) for i in f.fields)
    return max(ids, default=-1) + 1


def _physical(values: pa.Table, live: np.ndarray | None, physical_rows: int, schema: pa.Schema) -> pa.Table:
    """``values`` (one row per live row) spread over all physical rows of a fragment;
    deleted rows get nulls (or, for non-nullable fields, a copy of a live row's value)."""
    if live is None:
        return values
    pos = np.full(physical_rows, -1, np.int64)
    pos[live] = np.arange(live.size)
    cols = []
    for f, col in zip(schema, values.columns, strict=False):
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if f.nullable:
            idx = pa.array(pos, mask=pos < 0)
        else:
            idx = pa.array(np.where(pos < 0, 0, pos))
        cols.append(col.take(idx))
    return pa.Table.from_arrays(cols, schema=schema)


def _compile_sql_columns(ds: TableSnapshot, exprs: Mapping[str, str]) -> tuple[list[str], Callable[[pa.RecordBatch], pa.Table]]:
    """Columns to read and a batch function for ``{"name": "sql expression"}``."""
    from lance_gpu.filter import compile_expression

    compiled: dict[str, pc.Expression] = {}
    read: list[str] = []
    for name, text in exprs.items():
        if not isinstance(text, str):
            raise TypeError(f"add_columns: the expression of {name!r} must be a SQL string")
        expression = compile_expression(text, ds.schema, f"add_columns expression {name!r} =")
        compiled[name] = expression.expression
        read += [c for c in expression.columns if c not in read]

    def run(batch: pa.RecordBatch) -> pa.Table:
        import pyarrow.dataset as pds

        return pds.dataset(pa.Table.from_batches([batch])).to_table(columns=compiled)

    return read, run


def _read_rows(ds: TableSnapshot, frag: Any, rows: np.ndarray, columns: Sequence[str] | None) -> pa.Table:
    """``columns`` (default: all) of the given physical rows (sorted) of one fragment."""
    return read_rows(ds, frag, np.asarray(rows, np.int64), columns)


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    if table.num_columns == 0:
        return pa.RecordBatch.from_pydict({}).slice(0, 0) if table.num_rows == 0 else pa.record_batch(
            [pa.nulls(table.num_rows)], names=["_"]).drop_columns(["_"])
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


def _as_table(out: Any) -> pa.Table:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover
        pd = None
    if pd is not None and isinstance(out, pd.DataFrame):
        return pa.Table.from_pandas(out, preserve_index=False)
    if isinstance(out, pa.RecordBatch):
        return pa.Table.from_batches([out])
    if isinstance(out, pa.Table):
        return out
    raise TypeError(f"add_columns: the function must return a pyarrow RecordBatch or Table, not {type(out).__name__}")


def add_columns(
    ds: TableSnapshot,
    transforms: Any,
    read_columns: Sequence[str] | None = None,
    reader_schema: pa.Schema | None = None,
    batch_size: int | None = None,
) -> TableSnapshot:
    """Add columns, as pylance's ``add_columns``; one Merge transaction.

    ``transforms``:

    * a pyarrow Table / RecordBatch / RecordBatchReader (or an iterable of batches, a pandas
      DataFrame): the new columns' values, one row per live row of the dataset, in the
      dataset's order (fragment by fragment);
    * a callable taking a RecordBatch of ``read_columns`` (default: every column) of live
      rows and returning a RecordBatch / Table / DataFrame of new columns, row for row;
    * ``{"name": "sql expression"}`` of existing columns;
    * a ``pyarrow.Field``, list of fields or ``Schema``: all-null columns, metadata only (no
      data file is written; readers see nulls where a fragment has no file for a field).

    Each fragment gets one new data file holding the new leaf fields (ids after every id in
    use); rows deleted in the fragment are stored as nulls.
    """
    stream = not isinstance(transforms, (pa.Field, pa.Schema, list, Mapping)) and not (
        callable(transforms) and not isinstance(transforms, (pa.RecordBatchReader, pa.Table, pa.RecordBatch))
    )
    first = [True]

    def attempt() -> table_pb2.Manifest:
        target = ds if first[0] else ds.latest()
        first[0] = False
        return _add_columns_once(target, transforms, read_columns, reader_schema, batch_size)

    # a stream of values is consumed by the first attempt: it cannot be re-planned
    manifest = run_with_retries(attempt, 0 if stream else DEFAULT_CONFLICT_RETRIES)
    return ds.checkout(int(manifest.version))


def _add_columns_once(
    ds: TableSnapshot,
    transforms: Any,
    read_columns: Sequence[str] | None,
    reader_schema: pa.Schema | None,
    batch_size: int | None,
) -> table_pb2.Manifest:
    if isinstance(transforms, Mapping) and transforms and all(
            isinstance(v, str) and _NULL_CAST.match(v) for v in transforms.values()):
        # every expression is ``CAST(NULL AS type)``: all-null columns, metadata only (as pylance)
        from lance_gpu.filter import compile_expression  # loads sqlglot: only for SQL expressions

        transforms = pa.schema([pa.field(name, compile_expression(text, ds.schema).type)
                                for name, text in transforms.items()])
    if isinstance(transforms, pa.Field):
        transforms = [transforms]
    if isinstance(transforms, list) and transforms and all(isinstance(t, pa.Field) for t in transforms):
        transforms = pa.schema(transforms)
    base = ds.manifest_file
    check_appendable(base)
    minor = dataset_file_minor(ds.manifest)
    start_id = _next_field_id(ds)
    existing = set(ds.schema.names)

    def new_schema(arrow: pa.Schema) -> LanceSchema:
        dup = [n for n in arrow.names if n in existing]
        if dup:
            raise ColumnExistsError(f"Column {dup[0]} already exists in the dataset")
        if len(set(arrow.names)) != len(arrow.names):
            raise SchemaMismatchError(f"duplicate new column names {arrow.names}")
        lance_new = LanceSchema.from_arrow(blob_v2_schema(arrow, minor), start_id=start_id)
        _check_types(lance_new, minor)
        return lance_new

    def merged_schema(lance_new: LanceSchema) -> LanceSchema:
        return LanceSchema(list(ds.lance_schema.fields) + list(lance_new.fields), ds.lance_schema.metadata)

    if isinstance(transforms, pa.Schema):
        return _commit(ds, Merge([f.pb for f in ds.fragments], merged_schema(new_schema(transforms))))

    fn: Callable[[pa.RecordBatch], pa.Table] | None = None
    source = None
    checkpoint = None
    if isinstance(transforms, Mapping):
        read_columns, fn = _compile_sql_columns(ds, transforms)
    elif callable(transforms) and not isinstance(transforms, (pa.RecordBatchReader, pa.Table, pa.RecordBatch)):
        udf = transforms
        out_schema = udf.output_schema if isinstance(udf, BatchUDF) else None
        if isinstance(udf, BatchUDF) and udf.checkpoint_file is not None:
            checkpoint = BatchUDFCheckpoint(udf.checkpoint_file)

        first_names: list[list[str]] = []

        def call_udf(batch: pa.RecordBatch) -> pa.Table:
            out = _as_table(udf(batch))
            expected = out_schema.names if out_schema is not None else (first_names[0] if first_names else None)
            if expected is None:
                first_names.append(out.schema.names)
            elif sorted(out.schema.names) != sorted(expected):
                raise SchemaMismatchError(
                    f"Output schema of function does not match the expected schema: got columns {out.schema.names}, "
                    f"expected {expected}")
            return out if out_schema is None else out.select(out_schema.names).cast(out_schema)

        fn = call_udf
    else:
        _schema, source = coerce_input(transforms, reader_schema)
    batch_size = int(batch_size or 8192)

    frags_out: list[table_pb2.DataFragment] = []
    op = Merge([], LanceSchema([]))
    lance_new: LanceSchema | None = None
    arrow_new: pa.Schema | None = None
    pending: list[pa.RecordBatch] = []  # rows of ``source`` not yet used

    def take_rows(batches: Iterator[pa.RecordBatch], n: int) -> pa.Table:
        """The next ``n`` rows of ``batches`` (``pending`` first); what is left over stays in ``pending``."""
        got = sum(b.num_rows for b in pending)
        while got < n:
            try:
                b = next(batches)
            except StopIteration:
                raise RowCountMismatchError("Stream ended before producing values for all rows in dataset") from None
            if b.num_rows:
                pending.append(b)
                got += b.num_rows
        # nothing pending: n <= 0 rows asked for (a fragment without live rows), none taken
        t = pa.Table.from_batches(pending) if pending else _schema.empty_table()
        head = t.slice(0, n)
        rest = t.slice(n)
        pending[:] = rest.to_batches() if rest.num_rows else []
        return head

    try:

        for frag in ds.fragments:
            live = frag.live_rows
            n_live = frag.count_rows()
            if fn is not None:
                parts = []
                for start in range(0, n_live, batch_size):
                    rows = (np.arange(start, min(n_live, start + batch_size)) if live is None else live[start : start + batch_size])
                    out = checkpoint.get(frag.fragment_id, start) if checkpoint is not None else None
                    if out is None:
                        cols = _read_rows(ds, frag, rows, read_columns)
                        out = fn(_one_batch(cols))
                        if checkpoint is not None:
                            checkpoint.put(frag.fragment_id, start, out)
                    if out.num_rows != len(rows):
                        raise ValueError(f"add_columns: the function returned {out.num_rows} rows for a batch of {len(rows)}")
                    parts.append(out)
                values = pa.concat_tables(parts) if parts else None
            else:
                assert source is not None  # no function: the values come from ``source``
                values = take_rows(source, n_live)
            if lance_new is None:
                assert values is not None
                arrow_new = values.schema
                lance_new = new_schema(arrow_new)
                arrow_new = lance_new.to_arrow(physical=True)
            assert arrow_new is not None
            if values is None:
                values = arrow_new.empty_table()
            try:
                values = cast_to_stored(values, arrow_new)
            except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
                raise SchemaMismatchError(f"add_columns: new values do not match their first batch's schema: {exc}") from exc
            values = _physical(values, live, frag.physical_rows, arrow_new)
            frags_out.append(_with_new_data_file(ds, frag, values, lance_new, minor, op))
        if source is not None and (pending or next(source, None) is not None):
            raise RowCountMismatchError("Stream produced more values than expected for dataset")
        if lance_new is None:  # a dataset without fragments
            if source is not None:
                lance_new = new_schema(_schema)
            else:
                raise ValueError("add_columns: cannot infer the new columns of an empty dataset from a function")
    except BaseException:
        op.cleanup(ds.store)
        raise
    op.fragments = frags_out
    op.schema = merged_schema(lance_new)
    manifest = _commit(ds, op)
    if checkpoint is not None:
        checkpoint.close(remove=True)  # committed: nothing to resume
    return manifest


# --------------------------------------------------------------------------------------------
# Config and metadata (UpdateConfig transactions)


def update_config(
    ds: TableSnapshot,
    *,
    config: Mapping[str, str | None] | None = None,
    table_metadata: Mapping[str, str | None] | None = None,
    schema_metadata: Mapping[str, str | None] | None = None,
    field_metadata: Mapping[str, Mapping[str, str | None]] | None = None,
    replace: bool = False,
) -> TableSnapshot:
    """Commit one UpdateConfig: keys set (a value) or removed (None) in the table config,
    table metadata, schema metadata or the named fields' metadata (``replace``: each given
    map becomes exactly its set keys); ``ds`` moves to the new version."""
    @overload
    def checked(values: Mapping[str, str | None]) -> UpdateMap: ...
    @overload
    def checked(values: None) -> None: ...
    def checked(values: Mapping[str, str | None] | None) -> UpdateMap | None:
        if values is None:
            return None
        for k, v in values.items():
            if not isinstance(k, str) or not (v is None or isinstance(v, str)):
                raise TypeError(f"metadata keys and values must be str (or None to remove), got {k!r}: {v!r}")
        return UpdateMap(dict(values), replace)

    def plan(target: TableSnapshot) -> Operation:
        fields: dict[int, UpdateMap] = {}
        for name, values in (field_metadata or {}).items():
            try:
                fid = target.lance_schema.field(name).id
            except SchemaMismatchError:
                raise SchemaMismatchError(f"field {name!r} does not exist in the dataset") from None
            fields[fid] = checked(values)
        return UpdateConfig(checked(config), checked(table_metadata), checked(schema_metadata), fields)

    return _with_retries(ds, plan)


def _cast_columns(
    ds: TableSnapshot, casts: Sequence[Mapping[str, Any]], renames: Sequence[Mapping[str, Any]] = ()
) -> Operation:
    """The Merge of ``alter_columns`` with ``data_type``: each cast column gets a new field id
    and, in every fragment, a new data file of its values cast (deleted rows as nulls)."""
    check_appendable(ds.manifest_file)
    schema = ds.lance_schema
    minor = dataset_file_minor(ds.manifest)
    next_id = _next_field_id(ds)
    new_fields: dict[str, LanceField] = {}
    arrow_new = []
    for alt in casts:
        path = alt["path"]
        try:
            field = schema.field(path)
        except SchemaMismatchError:
            raise ColumnNotFoundError(f'Column "{path}" does not exist in the dataset') from None
        if len(field.path) != 1:
            raise UnsupportedFeatureError(f"alter_columns: data_type of nested field {path!r} cannot be changed")
        typ = alt["data_type"]
        if not isinstance(typ, pa.DataType):
            raise TypeError(f"data_type must be a pyarrow.DataType, not {type(typ).__name__}")
        old_type = ds.schema.field(field.name).type
        if not _convertible(old_type, typ):
            raise ColumnCastError(f'alter_columns: Cannot cast column "{path}" from {_rust_type_name(old_type)} '
                                  f"to {_rust_type_name(typ)}")
        try:
            pa.array([], old_type).cast(typ)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SchemaMismatchError(f"alter_columns: cannot cast {path!r} from {old_type} to {typ}: {exc}") from None
        nullable = field.nullable if alt.get("nullable") is None else bool(alt["nullable"])
        arrow_new.append(pa.field(alt.get("name") or field.name, typ, nullable))
        new_fields[field.name] = None  # type: ignore[assignment]
    lance_new = LanceSchema.from_arrow(pa.schema(arrow_new), start_id=next_id)
    _check_types(lance_new, minor)
    for old_name, f in zip(list(new_fields), lance_new.fields, strict=False):
        new_fields[old_name] = f
    physical_new = lance_new.to_arrow(physical=True)
    table = scanner_for(ds, columns=list(new_fields), with_row_id=True).to_table()
    frag_ids, offsets = row_addresses(ds, table.column("_rowid").to_numpy())
    try:
        values = cast_to_stored(pa.table([table.column(old) for old in new_fields], names=physical_new.names), physical_new)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        for old, target in zip(new_fields, physical_new, strict=True):
            bad = _first_uncastable(table.column(old), target.type)
            if bad is not None:
                raise ValueCastError(f"alter_columns: Cast error: Can't cast value {bad} to type "
                                     f"{_rust_type_name(target.type)} (column {old!r}: {exc})") from exc
        raise ValueCastError(f"alter_columns: a value cannot be cast: {exc}") from exc
    op = Merge([], LanceSchema([]))
    frags_out = _write_new_columns(ds, op, values, frag_ids, offsets, lance_new, minor)
    fields = [new_fields.get(f.name, f) for f in schema.fields]
    op.fragments = frags_out
    op.schema = LanceSchema(fields, schema.metadata, schema.source)
    if renames:
        op.schema = _altered_schema(ds, renames, op.schema)
    return op


def _write_new_columns(
    ds: TableSnapshot,
    op: Operation,
    values: pa.Table,
    frag_ids: np.ndarray,
    offsets: np.ndarray,
    lance_new: LanceSchema,
    minor: int,
) -> list[table_pb2.DataFragment]:
    """One new data file of ``lance_new``'s fields per fragment: ``values`` (one row per live
    row, located by ``frag_ids`` / ``offsets``) spread over the fragment's physical rows,
    deleted rows as nulls; returns the fragments with the file added (files go to
    ``op.written``)."""

    physical_new = lance_new.to_arrow(physical=True)
    frags_out = []
    try:
        for frag in ds.get_fragments():
            sel = np.flatnonzero(frag_ids == frag.fragment_id)
            part = values.take(pa.array(sel[np.argsort(offsets[sel], kind="stable")]))
            part = _physical(part, frag.live_rows, frag.physical_rows, physical_new)
            frags_out.append(_with_new_data_file(ds, frag, part, lance_new, minor, op))
    except BaseException:
        op.cleanup(ds.store)
        raise
    return frags_out


def merge(
    ds: TableSnapshot, data_obj: Any, left_on: str, right_on: str | None = None, schema: pa.Schema | None = None
) -> TableSnapshot:
    """Add the columns of ``data_obj`` by a left join of ``ds.left_on`` to
    ``data_obj.right_on`` (pylance's ``merge``): rows without a match get nulls; one Merge
    transaction, one new data file per fragment."""
    right_on = left_on if right_on is None else right_on
    arrow, batches = coerce_input(data_obj, schema)
    right = pa.Table.from_batches(list(batches), schema=arrow)
    if left_on not in ds.schema.names:
        raise SchemaMismatchError(f"merge: column {left_on!r} is not in the dataset")
    if right_on not in right.schema.names:
        raise SchemaMismatchError(f"merge: column {right_on!r} is not in the new data")
    added = [f for f in right.schema if f.name != right_on]
    dup = [f.name for f in added if f.name in ds.schema.names]
    if dup:
        raise ColumnExistsError(f"merge: column {dup[0]!r} already exists in the dataset")
    keys = right.column(right_on)
    if pc.count_distinct(keys).as_py() != len(keys) - keys.null_count + (1 if keys.null_count else 0):
        raise ValueError(f"merge: the new data has duplicate values of {right_on!r}")

    def plan(target: TableSnapshot) -> Operation:
        check_appendable(target.manifest_file)
        minor = dataset_file_minor(target.manifest)
        added_schema = pa.schema([pa.field(f.name, f.type, True, f.metadata) for f in added])
        lance_new = LanceSchema.from_arrow(blob_v2_schema(added_schema, minor), start_id=_next_field_id(target))
        _check_types(lance_new, minor)
        left = scanner_for(target, columns=[left_on], with_row_id=True).to_table()
        frag_ids, offsets = row_addresses(target, left.column("_rowid").to_numpy())
        pos = "__lance_gpu_left_row__"
        left = left.select([left_on]).append_column(pos, pa.array(np.arange(left.num_rows, dtype=np.int64)))
        right_renamed = right.rename_columns([left_on if n == right_on else n for n in right.schema.names])
        joined = left.join(right_renamed, keys=left_on, join_type="left outer", use_threads=False).sort_by(pos)
        physical_new = lance_new.to_arrow(physical=True)
        values = cast_to_stored(joined, physical_new)
        op = Merge([], LanceSchema([]))
        op.fragments = _write_new_columns(target, op, values, frag_ids, offsets, lance_new, minor)
        op.schema = LanceSchema(list(target.lance_schema.fields) + list(lance_new.fields), target.lance_schema.metadata)
        return op

    return _with_retries(ds, plan)


def _with_new_data_file(
    ds: TableSnapshot, frag: Any, values: pa.Table, lance_new: LanceSchema, minor: int, op: Operation
) -> table_pb2.DataFragment:
    """``frag``'s manifest entry with one more data file: ``values`` (one row per physical
    row of the fragment, in the physical schema of ``lance_new``) written under ``data/``.
    The file's key goes to ``op.written`` first, so a failed commit removes it."""

    name = data_file_name()
    path = join(ds.root, "data", name)
    op.written.append(path)
    writer = data_file_writer(path, lance_new, minor, ds.store)
    try:
        writer.write(values)
        size = writer.finish()
    except BaseException:
        writer.abort()
        raise
    new = table_pb2.DataFragment()
    new.CopyFrom(frag.pb)
    new.files.append(_data_file(name, lance_new, minor, size))
    return new


_RUST_TYPE_NAMES = {
    "int8": "Int8", "int16": "Int16", "int32": "Int32", "int64": "Int64", "uint8": "UInt8", "uint16": "UInt16",
    "uint32": "UInt32", "uint64": "UInt64", "halffloat": "Float16", "float": "Float32", "double": "Float64",
    "bool": "Boolean", "string": "Utf8", "large_string": "LargeUtf8", "binary": "Binary", "large_binary": "LargeBinary",
    "date32[day]": "Date32", "date64[ms]": "Date64",
}


def _convertible(old: pa.DataType, new: pa.DataType) -> bool:
    """The type changes ``alter_columns`` makes, as pylance: within integers, floats,
    strings, binaries, decimals, dates, timestamps, times or durations, and between list
    kinds whose items convert; any other type only to itself."""
    t = pa.types
    for kind in (t.is_integer, t.is_floating, lambda x: t.is_string(x) or t.is_large_string(x),
                 lambda x: t.is_binary(x) or t.is_large_binary(x), t.is_decimal, t.is_date, t.is_timestamp,
                 t.is_time, t.is_duration):
        if kind(old):
            return bool(kind(new))
    lists = (t.is_list, t.is_large_list, t.is_fixed_size_list)
    if any(k(old) for k in lists):
        return any(k(new) for k in lists) and _convertible(old.value_type, new.value_type)
    return old.equals(new)


def _rust_type_name(t: pa.DataType) -> str:
    """Arrow-rs's name of a type, as pylance's messages print it (``Int8``, ``Utf8``)."""
    return _RUST_TYPE_NAMES.get(str(t), str(t))


def _first_uncastable(column: pa.ChunkedArray, target: pa.DataType) -> Any:
    """The first value of ``column`` that a safe cast to ``target`` refuses (None if every
    value casts), found by halving the failing slice: O(log n) casts."""
    for chunk in column.chunks:
        lo, hi = 0, len(chunk)
        try:
            chunk.cast(target)
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
        while hi - lo > 1:  # invariant: chunk[lo:hi] fails to cast
            mid = (lo + hi) // 2
            try:
                chunk.slice(lo, mid - lo).cast(target)
                lo = mid
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                hi = mid
        return chunk[lo].as_py()
    return None
