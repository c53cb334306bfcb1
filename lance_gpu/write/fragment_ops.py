# SPDX-License-Identifier: Apache-2.0
"""Fragment-level column and row work for distributed pipelines (pylance's
``LanceFragment.delete`` / ``delete_rows`` / ``merge_columns`` / ``update_columns``).

Each function writes new files (a deletion file, or one data file) for *one* fragment and
returns its new :class:`~lance_gpu.txn.fragment.FragmentMetadata` without committing
anything: workers run them on their fragments and a driver commits all the results in one
transaction, as with pylance::

    frag_meta, schema = ds.get_fragment(i).merge_columns({"c": "a * 2"})    # each worker
    LanceDataset.commit(uri, LanceOperation.Merge(all_metas, schema), read_version=v)

    meta, fields = ds.get_fragment(i).update_columns(table, left_on="id")    # each worker
    LanceDataset.commit(uri, LanceOperation.Update(updated_fragments=metas,
                                                   fields_modified=fields), read_version=v)

    meta = ds.get_fragment(i).delete("x > 3")                                # each worker
    LanceDataset.commit(uri, LanceOperation.Delete(updated, deleted_ids, "x > 3"), ...)

Layouts written (the same as pylance's):

* ``delete``: a new deletion file holding every deleted offset of the fragment (old and
  new); the data files are untouched.  No row matched: the fragment unchanged; every row
  deleted: None (the caller lists its id in ``deleted_fragment_ids``).
* ``merge_columns``: one new data file with the new fields (ids after every id in use) for
  all physical rows (deleted rows as nulls), appended to the fragment's files.
* ``update_columns``: one new data file holding the updated fields' new values for all
  physical rows; in the older data files those fields' ids become ``-2`` (a tombstone:
  the column stays in the file but no field reads it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lance_gpu.errors import ColumnExistsError, RowCountMismatchError, SchemaMismatchError
from lance_gpu.file.container import LanceFileReader
from lance_gpu.file.writer.blobs import blob_v2_schema, column_field_ids
from lance_gpu.io import join
from lance_gpu.scan import LanceScanner, ReadUnit, decode_fields, rows_where, scanner_for
from lance_gpu.table.deletion_writer import fragment_with_deletions
from lance_gpu.table.schema import LanceSchema
from lance_gpu.table.schema_view import LanceSchema as SchemaView
from lance_gpu.table.snapshot import FragmentSnapshot, TableSnapshot
from lance_gpu.txn.fragment import DataFile, FragmentMetadata
from lance_gpu.txn.operations import Merge
from lance_gpu.txn.publish import check_appendable
from lance_gpu.write.dataset_writer import _check_types, dataset_file_minor
from lance_gpu.write.inputs import cast_to_stored, coerce_input
from lance_gpu.write.operations import (
    _as_table,
    _compile_sql_columns,
    _next_field_id,
    _physical,
    _with_new_data_file,
)
from lance_gpu.write.udf import BatchUDF

__all__ = ["create_from_file", "delete", "delete_rows", "merge", "merge_columns", "update_columns"]

#: A fragment's data file field id that no field reads (a column replaced by an update).
TOMBSTONE = -2


# --------------------------------------------------------------------------------------------
# Deletes


def delete(fragment: FragmentSnapshot, predicate: str) -> FragmentMetadata | None:
    """Delete the live rows of ``fragment`` matching the SQL ``predicate``: the fragment with a
    new deletion file (all its deleted offsets), unchanged when no row matches, or None when
    no row is left."""
    from lance_gpu.filter import parse_filter  # loads sqlglot: only when a predicate is parsed

    ds = fragment.snapshot
    compiled = parse_filter(predicate, ds.schema)
    top = {f.name: f for f in ds.lance_schema.fields}
    fields = [top[n] for n in compiled.columns if n in top]
    unit = ReadUnit(fragment, fragment.live_rows)
    table = next(iter(decode_fields(ds, [unit], fields)))
    hits = rows_where([unit], compiled.positions(table))
    return _with_deleted(fragment, hits[0][1] if hits else np.zeros(0, np.int64))


def delete_rows(fragment: FragmentSnapshot, offsets: Iterable[int]) -> FragmentMetadata | None:
    """Delete the rows at the given physical ``offsets`` of ``fragment`` (0-based within the
    fragment, deleted or not): as :func:`delete`, without evaluating a predicate."""
    rows = np.asarray(list(offsets), dtype=np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= fragment.physical_rows):
        bad = int(rows.max() if rows.max() >= fragment.physical_rows else rows.min())
        raise IndexError(f"row offset {bad} is out of range for fragment {fragment.fragment_id} of {fragment.physical_rows} rows")
    return _with_deleted(fragment, rows)


def _with_deleted(fragment: FragmentSnapshot, hit: np.ndarray) -> FragmentMetadata | None:
    if hit.size == 0:
        return FragmentMetadata.from_pb(fragment.pb)
    ds = fragment.snapshot
    rows = np.union1d(fragment.deleted_rows, hit.astype(np.uint32)).astype(np.uint32)
    written: list[str] = []
    new = fragment_with_deletions(ds.store, ds.root, fragment.pb, ds.version, rows, written)
    return None if new is None else FragmentMetadata.from_pb(new)


# --------------------------------------------------------------------------------------------
# New columns


def _scan(fragment: FragmentSnapshot, device: str | None, **arguments: Any) -> LanceScanner:
    """A scanner over ``fragment``'s live rows alone (pylance's scanner ``arguments``)."""
    return scanner_for(fragment.snapshot, device=device, fragments=[fragment], **arguments)


class _Written:
    """Collects the keys of files written (removed again if the work fails)."""

    def __init__(self) -> None:
        self.op = Merge([], LanceSchema([]))


def _udf_batches(fragment: FragmentSnapshot, udf: Any, read_columns: Sequence[str] | None, batch_size: int | None,
                 device: str | None) -> pa.Table:
    """``udf`` applied to batches of ``read_columns`` (``_rowid`` / ``_rowaddr`` allowed)
    of the fragment's live rows, concatenated."""

    if isinstance(udf, BatchUDF) and udf.checkpoint_file is not None:
        raise ValueError(
            "A checkpoint file cannot be used when applying a UDF with LanceFragment.merge_columns.  "
            "You must apply your own checkpointing for fragment-level operations."
        )
    columns = None
    with_row_id = with_row_address = False
    if read_columns is not None:
        columns = [c for c in read_columns if c not in ("_rowid", "_rowaddr")]
        with_row_id = "_rowid" in read_columns
        with_row_address = "_rowaddr" in read_columns
    if isinstance(udf, BatchUDF) and udf.output_schema is None:
        # inferred from the first row, as pylance does: every batch must then match it
        sample = next(iter(_scan(fragment, device, columns=columns, limit=1, with_row_id=with_row_id,
                                 with_row_address=with_row_address).to_batches()), None)
        if sample is not None:
            udf.output_schema = _as_table(udf(sample)).schema
    parts: list[pa.Table] = []
    for batch in _scan(fragment, device, columns=columns, batch_size=batch_size or 1024, with_row_id=with_row_id,
                       with_row_address=with_row_address).to_batches():
        out = _as_table(udf(batch))
        out_schema = udf.output_schema if isinstance(udf, BatchUDF) else (parts[0].schema if parts else None)
        if out_schema is not None:
            if sorted(out.schema.names) != sorted(out_schema.names):
                raise SchemaMismatchError(
                    f"Output schema of function does not match the expected schema: got columns {out.schema.names}, "
                    f"expected {out_schema.names}")
            out = out.select(out_schema.names).cast(out_schema)
        if out.num_rows != batch.num_rows:
            raise ValueError(f"merge_columns: the function returned {out.num_rows} rows for a batch of {batch.num_rows}")
        parts.append(out)
    if not parts:
        return pa.table({})
    return pa.concat_tables(parts)


def merge_columns(
    fragment: FragmentSnapshot,
    value_func: Mapping[str, str] | Any,
    columns: Sequence[str] | None = None,
    batch_size: int | None = None,
    reader_schema: pa.Schema | None = None,
    *,
    device: str | None = None,
) -> tuple[FragmentMetadata, SchemaView]:
    """New columns for ``fragment`` (as ``add_columns`` takes them: ``{"name": "sql"}``, a
    function or BatchUDF of batches of ``columns``, or a reader / table of values, one row
    per live row); returns the fragment with one more data file and the dataset's schema
    with the new fields, for a ``Merge`` commit."""

    ds = fragment.snapshot
    check_appendable(ds.manifest_file)
    if isinstance(value_func, Mapping):
        for k, v in value_func.items():
            if not isinstance(k, str):
                raise TypeError(f"Column names must be a string. Got {type(k)}")
            if not isinstance(v, str):
                raise TypeError(f"Column expressions must be a string. Got {type(v)}")
        read, run = _compile_sql_columns(ds, value_func)
        values = _udf_batches(fragment, run, read, batch_size, device)
    elif callable(value_func) and not isinstance(value_func, (pa.RecordBatchReader, pa.Table, pa.RecordBatch)):
        values = _udf_batches(fragment, value_func, columns, batch_size, device)
    else:
        arrow, batches = coerce_input(value_func, reader_schema)
        values = pa.Table.from_batches(list(batches), schema=arrow)
    n_live = fragment.count_rows()
    if values.num_rows != n_live:
        raise RowCountMismatchError(
            f"merge_columns: {values.num_rows} new values for the {n_live} rows of fragment {fragment.fragment_id}")
    minor = dataset_file_minor(ds.manifest)
    dup = [n for n in values.schema.names if n in ds.schema.names]
    if dup:
        raise ColumnExistsError(f"Column {dup[0]} already exists in the dataset")
    lance_new = LanceSchema.from_arrow(blob_v2_schema(values.schema, minor), start_id=_next_field_id(ds))
    _check_types(lance_new, minor)
    physical_new = lance_new.to_arrow(physical=True)
    values = _physical(cast_to_stored(values, physical_new), fragment.live_rows, fragment.physical_rows, physical_new)
    work = _Written()
    try:
        pb = _with_new_data_file(ds, fragment, values, lance_new, minor, work.op)
    except BaseException:
        work.op.cleanup(ds.store)
        raise
    schema = LanceSchema(list(ds.lance_schema.fields) + list(lance_new.fields), ds.lance_schema.metadata)
    return FragmentMetadata.from_pb(pb), SchemaView(schema)


def merge(fragment: FragmentSnapshot, data_obj: Any, left_on: str, right_on: str | None = None,
          schema: pa.Schema | None = None, *, device: str | None = None) -> tuple[FragmentMetadata, SchemaView]:
    """New columns for ``fragment`` from ``data_obj`` joined on ``fragment.left_on =
    data_obj.right_on`` (a left join: rows without a match get nulls); returns the fragment
    with one more data file and the new schema, as :func:`merge_columns`."""
    right_on = left_on if right_on is None else right_on
    arrow, batches = coerce_input(data_obj, schema)
    right = pa.Table.from_batches(list(batches), schema=arrow)
    if right_on not in right.schema.names:
        raise SchemaMismatchError(f"merge: column {right_on!r} is not in the new data")
    virtual = left_on in ("_rowid", "_rowaddr")
    if not virtual and left_on not in fragment.snapshot.schema.names:
        raise SchemaMismatchError(f"merge: column {left_on!r} is not in the dataset")
    current = _scan(fragment, device, columns=[] if virtual else [left_on], with_row_id=left_on == "_rowid",
                    with_row_address=left_on == "_rowaddr").to_table()
    key = current.column(left_on).combine_chunks()
    rkey = right.column(right_on).combine_chunks()
    if not rkey.type.equals(key.type):
        rkey = rkey.cast(key.type)
    lpos, rpos = _join_positions(key, rkey)
    added = right.drop_columns([right_on])
    pick = np.full(len(key), -1, np.int64)
    pick[lpos] = rpos
    values = added.take(pa.array(pick, mask=pick < 0))
    return merge_columns(fragment, values, device=device)


def create_from_file(filename: str, ds: TableSnapshot, fragment_id: int) -> FragmentMetadata:
    """The fragment of one data file already written under ``ds``'s ``data/`` (by a
    :class:`~lance_gpu.file.single_file.LanceFileWriter` with the dataset's columns):
    its columns matched to the dataset's fields by name, its rows from its footer; for an
    ``Append`` commit (which numbers it afresh)."""

    reader = LanceFileReader(join(ds.root, "data", filename), ds.store)
    desc = reader.descriptor
    names = [f.name for f in LanceSchema.from_protos(desc.schema.fields).fields]
    try:
        fields = [ds.lance_schema.field(n) for n in names]
    except SchemaMismatchError as exc:
        raise SchemaMismatchError(f"create_from_file: {filename} holds a column the dataset lacks: {exc}") from None
    minor = reader.version.minor
    ids = column_field_ids(LanceSchema(fields), minor)
    data_file = DataFile(filename, ids, list(range(len(ids))), 2, minor, reader.io.size)
    return FragmentMetadata(id=int(fragment_id), files=[data_file], physical_rows=int(desc.length))


# --------------------------------------------------------------------------------------------
# Updated columns


def _join_positions(left: pa.Array, right: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(left rows, right rows) of matching non-null keys; a left row matching several right
    rows takes one of them (the last)."""
    index = pa.table({"k": right, "r": pa.array(np.arange(len(right), dtype=np.int64))})
    probe = pa.table({"k": left, "l": pa.array(np.arange(len(left), dtype=np.int64))})
    joined = probe.join(index, keys="k", join_type="inner", use_threads=False)
    lpos = joined.column("l").to_numpy()
    rpos = joined.column("r").to_numpy()
    if lpos.size:
        order = np.lexsort((rpos, lpos))
        lpos, rpos = lpos[order], rpos[order]
        last = np.append(lpos[1:] != lpos[:-1], True)
        lpos, rpos = lpos[last], rpos[last]
    return lpos, rpos


def update_columns(
    fragment: FragmentSnapshot,
    data_obj: Any,
    left_on: str = "_rowid",
    right_on: str | None = None,
    schema: pa.Schema | None = None,
    *,
    with_offsets: bool = False,
    device: str | None = None,
) -> tuple[FragmentMetadata, list[int]] | tuple[FragmentMetadata, list[int], bytes]:
    """Existing columns of ``fragment`` replaced where ``data_obj.right_on`` matches
    ``fragment.left_on`` (a left outer join; unmatched rows keep their values; ``_rowid`` /
    ``_rowaddr`` join on the row id / address); returns the fragment with one new data
    file (the old files' copies of those fields tombstoned) and the modified field ids,
    plus with ``with_offsets`` the matched physical offsets as a portable roaring bitmap."""

    ds = fragment.snapshot
    check_appendable(ds.manifest_file)
    right_on = left_on if right_on is None else right_on
    arrow, batches = coerce_input(data_obj, schema)
    right = pa.Table.from_batches(list(batches), schema=arrow)
    if right_on not in right.schema.names:
        raise SchemaMismatchError(f"update_columns: column {right_on!r} is not in the new data")
    meta_cols = ("_rowid", "_rowaddr")
    if left_on not in meta_cols and left_on not in ds.schema.names:
        raise SchemaMismatchError(f"update_columns: column {left_on!r} is not in the dataset")
    updated = [n for n in right.schema.names if n != right_on]
    for name in updated:
        if name in meta_cols:
            raise SchemaMismatchError(f"update_columns: metadata column {name!r} cannot be updated")
        if name not in ds.schema.names:
            raise SchemaMismatchError(f"update_columns: column {name!r} does not exist in the dataset")
        if name == left_on:
            raise SchemaMismatchError(f"update_columns: the join column {name!r} cannot be updated")
    if not updated:
        raise ValueError("update_columns: the new data holds no column to update")
    minor = dataset_file_minor(ds.manifest)
    old_fields = [ds.lance_schema.field(n) for n in updated]
    lance_new = LanceSchema(list(old_fields), ds.lance_schema.metadata)
    _check_types(lance_new, minor)
    physical_new = lance_new.to_arrow(physical=True)

    live = fragment.live_rows
    current = _scan(fragment, device, columns=[c for c in [left_on, *updated] if c not in meta_cols],
                    with_row_id=left_on == "_rowid", with_row_address=left_on == "_rowaddr").to_table()
    key = current.column(left_on)
    rkey = right.column(right_on)
    if not key.type.equals(rkey.type):
        try:
            rkey = rkey.cast(key.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaMismatchError(f"update_columns: {right_on!r} ({rkey.type}) cannot join {left_on!r} ({key.type})") from exc
    lpos, rpos = _join_positions(key.combine_chunks(), rkey.combine_chunks())
    new_values = cast_to_stored(right.select(updated), physical_new)
    old_values = cast_to_stored(current.select(updated), physical_new)
    # each live row: its new value when matched (source index n_old + right row), else its old one
    pick = np.arange(current.num_rows, dtype=np.int64)
    pick[lpos] = current.num_rows + rpos
    both = pa.concat_tables([old_values, new_values.cast(old_values.schema)])
    values = both.take(pa.array(pick))
    values = _physical(values, live, fragment.physical_rows, physical_new)
    work = _Written()
    try:
        pb = _with_new_data_file(ds, fragment, values, lance_new, minor, work.op)
    except BaseException:
        work.op.cleanup(ds.store)
        raise
    new_file = pb.files[len(pb.files) - 1]
    modified = {int(i) for i in new_file.fields}
    for df in list(pb.files)[:-1]:
        df.fields[:] = [TOMBSTONE if int(i) in modified else int(i) for i in df.fields]
    fields_modified = [int(i) for i in new_file.fields]
    meta = FragmentMetadata.from_pb(pb)
    if not with_offsets:
        return meta, fields_modified
    from pyroaring import BitMap

    physical = np.arange(fragment.physical_rows, dtype=np.uint32) if live is None else live.astype(np.uint32)
    return meta, fields_modified, BitMap(physical[lpos]).serialize()

