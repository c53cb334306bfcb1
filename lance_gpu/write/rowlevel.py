# SPDX-License-Identifier: Apache-2.0
"""Row-level changes: ``update``, ``merge_insert`` and ``insert``, each one ``Update`` (or
``Append``) transaction of :mod:`lance_gpu.txn`, as pylance writes them.

Rewrite-rows layout (pylance's): the changed rows are deleted from the fragments that held
them (a new deletion vector, or the fragment is removed when no row is left) and written,
with their new values, as new fragments at the end of the dataset.  Only the touched
fragments change; untouched fragments keep their files and deletion vectors.  With stable
row ids the rewritten rows keep their ids (the new fragments carry them); inserted rows get
fresh ids at commit.

Rows are read through the public read API (``to_table(filter=, with_row_id=True)``); a
row's place (fragment id, physical offset) comes from :func:`row_addresses`.

Both operations re-plan themselves on the latest version after a retryable conflict
(``conflict_retries``, default 10), as pylance's do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_gpu._proto import table_pb2
from lance_gpu.errors import MergeInsertError, SchemaMismatchError
from lance_gpu.table.blobs import with_blob_bytes
from lance_gpu.txn.commit import DEFAULT_CONFLICT_RETRIES, commit, run_with_retries
from lance_gpu.txn.operations import Update
from lance_gpu.write.inputs import cast_batch, coerce_input

if TYPE_CHECKING:  # pragma: no cover
    from lance_gpu.dataset import LanceDataset

__all__ = ["MergeInsertBuilder", "insert", "row_addresses", "update"]

_ROWID = "_rowid"
_SRC = "__lance_gpu_source_row__"
_TGT = "__lance_gpu_target_row__"


def _stable(ds: LanceDataset) -> bool:
    from lance_gpu.table.features import FLAG_STABLE_ROW_IDS

    return bool(int(ds.manifest.writer_feature_flags) & FLAG_STABLE_ROW_IDS)


def row_addresses(ds: LanceDataset, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fragment id, physical offset) of each ``_rowid`` that ``to_table(with_row_id=True)``
    gave: the address itself (``fragment_id << 32 | offset``), or, on a dataset with stable
    row ids, looked up in the fragments' row-id sequences."""
    ids = np.asarray(row_ids, dtype=np.uint64)
    if not _stable(ds):
        return (ids >> np.uint64(32)).astype(np.int64), (ids & np.uint64(0xFFFFFFFF)).astype(np.int64)
    all_ids, frag_of, off_of = [], [], []
    for frag in ds.get_fragments():
        rid = np.asarray(frag.row_ids, dtype=np.uint64)
        all_ids.append(rid)
        frag_of.append(np.full(rid.size, frag.fragment_id, np.int64))
        off_of.append(np.arange(rid.size, dtype=np.int64))
    if not all_ids:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cat = np.concatenate(all_ids)
    order = np.argsort(cat, kind="stable")
    pos = np.searchsorted(cat[order], ids)
    if ids.size and (pos.max(initial=0) >= cat.size or not np.array_equal(cat[order][pos], ids)):
        raise AssertionError("a row id read from the dataset is in none of its fragments")
    hit = order[pos]
    return np.concatenate(frag_of)[hit], np.concatenate(off_of)[hit]


def _created_at(ds: LanceDataset, frag_ids: np.ndarray, offsets: np.ndarray) -> np.ndarray | None:
    """The creation version of each row (by fragment id and physical offset), None when the
    dataset records none."""
    from lance_gpu.table.rowids import read_fragment_versions

    out = np.zeros(frag_ids.size, np.uint64)
    for frag in ds.get_fragments():
        sel = frag_ids == frag.fragment_id
        if not sel.any():
            continue
        versions = read_fragment_versions(ds.store, ds.root, frag.pb, "created_at")
        if versions is None:
            return None
        out[sel] = np.asarray(versions, np.uint64)[offsets[sel]]
    return out


def _eval_sql(table: pa.Table, exprs: Mapping[str, str]) -> dict[str, pa.ChunkedArray]:
    """Each SQL expression of ``exprs`` evaluated over ``table``."""
    import pyarrow.dataset as pds

    from lance_gpu import filter as lf

    compiled = {}
    for name, text in exprs.items():
        if not isinstance(text, str):
            raise TypeError(f"the expression of {name!r} must be a SQL string")
        ir = lf._resolve(lf._Builder(table.schema, text).build(lf._parse_sql(text)), text)
        compiled[name] = lf._Compiler(text).compile(ir).expr
    out = pds.dataset(table).to_table(columns=compiled)
    return {name: out.column(name) for name in compiled}


class _RowChange:
    """The rows one attempt deletes from existing fragments and the rows it writes."""

    def __init__(self, ds: LanceDataset) -> None:
        self.ds = ds
        self.store, self.root = ds.store, ds.root
        self.deleted: dict[int, list[np.ndarray]] = {}

    def delete_rows(self, frag_ids: np.ndarray, offsets: np.ndarray) -> None:
        for fid in np.unique(frag_ids):
            self.deleted.setdefault(int(fid), []).append(offsets[frag_ids == fid])

    def commit(
        self,
        new_rows: pa.Table | None,
        carried_ids: np.ndarray | None,
        created_at: np.ndarray | None = None,
    ) -> table_pb2.Manifest:
        """Write ``new_rows`` as new fragments (with ``carried_ids`` as their stable row ids
        and ``created_at`` as their rows' creation versions where given; u64::MAX marks an
        inserted row), the new deletion vectors, and commit one Update."""
        from lance_gpu.write.compaction import encode_row_ids, encode_versions
        from lance_gpu.write.dataset_writer import (
            DEFAULT_MAX_BYTES_PER_FILE,
            DEFAULT_MAX_ROWS_PER_FILE,
            _write_fragments,
        )
        from lance_gpu.write.deletion_writer import fragment_with_deletions

        ds = self.ds
        op = Update()
        try:
            new_frags: list[table_pb2.DataFragment] = []
            if new_rows is not None and new_rows.num_rows:
                schema = ds.lance_schema
                physical = schema.to_arrow(physical=True)
                minor = int(ds.manifest.data_format.version.split(".")[1])
                groups: list[tuple[pa.Table, np.ndarray | None, np.ndarray | None]] = [(new_rows, None, None)]
                if carried_ids is not None:
                    # rows with an id (rewritten) and without (inserted) go to separate
                    # fragments: a fragment's row ids are all carried or all assigned
                    fresh = carried_ids == np.iinfo(np.uint64).max
                    groups = [
                        (new_rows.filter(pa.array(~fresh)), carried_ids[~fresh],
                         None if created_at is None else created_at[~fresh]),
                        (new_rows.filter(pa.array(fresh)), None, None),
                    ]
                for rows, ids, created in groups:
                    if rows.num_rows == 0:
                        continue
                    batches = (cast_batch(b, physical) for b in rows.to_batches())
                    frags, written = _write_fragments(
                        self.store, self.root, schema, physical, batches, None, minor, DEFAULT_MAX_ROWS_PER_FILE,
                        DEFAULT_MAX_BYTES_PER_FILE,
                    )
                    op.written.extend(written)
                    if ids is not None:
                        start = 0
                        for frag in frags:
                            n = int(frag.physical_rows)
                            frag.inline_row_ids = encode_row_ids(ids[start : start + n])
                            if created is not None:  # a rewritten row keeps its creation version
                                frag.inline_created_at_versions = encode_versions(created[start : start + n])
                            start += n
                    new_frags.extend(frags)
            by_id = {f.fragment_id: f for f in ds.get_fragments()}
            removed, updated = [], []
            for fid, parts in sorted(self.deleted.items()):
                fragment = by_id[fid]
                rows = np.union1d(fragment.deleted_rows, np.concatenate(parts)).astype(np.uint32)
                new = fragment_with_deletions(self.store, self.root, fragment.pb, ds.version, rows, op.written)
                if new is None:
                    removed.append(fid)
                else:
                    updated.append(new)
            op.removed_fragment_ids = removed
            op._updated = updated
            op._new = new_frags
            from lance_gpu.table.manifest import list_versions

            return commit(self.store, self.root, op, ds.manifest_file, list_versions(self.store, self.root)[-1].naming)
        except BaseException:
            op.cleanup(self.store)
            raise


def _latest_of(ds: LanceDataset) -> LanceDataset:
    return ds.checkout_version(ds.latest_version)


def _run(ds: LanceDataset, attempt: Any, conflict_retries: int) -> Any:
    """``attempt(target)`` on ``ds``, then on the latest version after each retryable
    conflict; ``ds`` moves to the committed version.  ``attempt`` returns (manifest or None,
    result)."""
    first = [True]

    def once() -> Any:
        target = ds if first[0] else _latest_of(ds)
        first[0] = False
        return attempt(target)

    manifest, result = run_with_retries(once, conflict_retries)
    if manifest is not None:
        ds.reload(int(manifest.version))
    return result


# --------------------------------------------------------------------------------------------
# update


def update(
    ds: LanceDataset,
    updates: Mapping[str, str],
    where: str | pc.Expression | None = None,
    conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
    retry_timeout: Any = None,
    data_storage_version: str | None = None,
) -> dict[str, int]:
    """Set ``updates`` (column -> SQL expression over the row) on the rows matching
    ``where`` (all rows when None); returns ``{"num_rows_updated": n}`` (pylance's)."""
    if not isinstance(updates, Mapping) or not updates:
        raise ValueError("update: updates must be a non-empty dict of column name to SQL expression")
    names = set(ds.schema.names)
    for col in updates:
        if col not in names:
            raise SchemaMismatchError(f"update: column {col!r} does not exist in the dataset")

    def attempt(target: LanceDataset) -> tuple[table_pb2.Manifest | None, dict[str, int]]:
        rows = target.to_table(filter=where, with_row_id=True)
        if rows.num_rows == 0:  # pylance commits an empty Update too
            return _RowChange(target).commit(None, None), {"num_rows_updated": 0}
        frag_ids, offsets = row_addresses(target, rows.column(_ROWID).to_numpy())
        rowids = rows.column(_ROWID).to_numpy().astype(np.uint64)
        rows = rows.drop_columns([_ROWID])
        values = _eval_sql(rows, updates)
        for col, arr in values.items():
            typ = rows.schema.field(col).type
            try:
                arr = arr.cast(typ)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise SchemaMismatchError(f"update: the value of {col!r} cannot be stored as {typ}: {exc}") from exc
            rows = rows.set_column(rows.schema.get_field_index(col), rows.schema.field(col), arr)
        rows = with_blob_bytes(target, rows, frag_ids, offsets)  # blob columns are rewritten from their bytes
        change = _RowChange(target)
        change.delete_rows(frag_ids, offsets)
        stable = _stable(target)
        created = _created_at(target, frag_ids, offsets) if stable else None
        manifest = change.commit(rows, rowids if stable else None, created)
        return manifest, {"num_rows_updated": int(rows.num_rows)}

    return _run(ds, attempt, conflict_retries)


# --------------------------------------------------------------------------------------------
# merge_insert


class MergeInsertBuilder:
    """``ds.merge_insert(on)``: pylance's builder.

    ``when_matched_update_all(condition=)``, ``when_matched_delete()``,
    ``when_matched_fail()``, ``when_not_matched_insert_all()``,
    ``when_not_matched_by_source_delete(expr=)``, ``conflict_retries(n)``,
    ``retry_timeout(t)``, ``use_index(b)``, then ``execute(data, schema=)``.

    A target row matched by more than one source row is refused
    (:class:`~lance_gpu.errors.MergeInsertError`, an ``OSError`` like pylance's) before
    anything is written.  Null keys never match.
    """

    def __init__(self, ds: LanceDataset, on: str | Iterable[str] | None) -> None:
        self._ds = ds
        if on is None:
            raise ValueError("merge_insert: 'on' (the key columns) is required")
        self._on = [on] if isinstance(on, str) else list(on)
        if not self._on:
            raise ValueError("merge_insert: 'on' must name at least one column")
        for col in self._on:
            if col not in ds.schema.names:
                raise SchemaMismatchError(f"merge_insert: key column {col!r} is not in the dataset")
        self._matched: str | None = None  # "update" | "delete" | "fail"
        self._matched_condition: str | None = None
        self._insert = False
        self._by_source_delete = False
        self._by_source_expr: str | None = None
        self._retries = DEFAULT_CONFLICT_RETRIES

    def when_matched_update_all(self, condition: str | None = None) -> MergeInsertBuilder:
        self._matched, self._matched_condition = "update", condition
        return self

    def when_matched_delete(self) -> MergeInsertBuilder:
        self._matched, self._matched_condition = "delete", None
        return self

    def when_matched_fail(self) -> MergeInsertBuilder:
        self._matched, self._matched_condition = "fail", None
        return self

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        self._insert = True
        return self

    def when_not_matched_by_source_delete(self, expr: str | None = None) -> MergeInsertBuilder:
        self._by_source_delete, self._by_source_expr = True, expr
        return self

    def conflict_retries(self, max_retries: int) -> MergeInsertBuilder:
        self._retries = int(max_retries)
        return self

    def retry_timeout(self, timeout: Any) -> MergeInsertBuilder:
        return self

    def use_index(self, use_index: bool) -> MergeInsertBuilder:
        return self

    def execute(self, data_obj: Any, *, schema: pa.Schema | None = None) -> dict[str, int]:
        """Run the merge; returns ``{"num_inserted_rows", "num_updated_rows",
        "num_deleted_rows"}`` and moves the dataset to the committed version."""
        target_schema = self._ds.schema
        _s, batches = coerce_input(data_obj, schema)
        source = pa.Table.from_batches(list(batches), schema=_s)
        missing = [n for n in target_schema.names if n not in source.schema.names]
        extra = [n for n in source.schema.names if n not in target_schema.names]
        if missing or extra:
            raise SchemaMismatchError(
                f"merge_insert: the source has columns {source.schema.names}, the dataset {target_schema.names}"
            )
        try:
            source = source.select(target_schema.names).cast(target_schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise SchemaMismatchError(f"merge_insert: the source cannot be cast to the dataset's schema: {exc}") from exc
        source = source.combine_chunks()
        return _run(self._ds, lambda target: self._attempt(target, source), self._retries)

    def _attempt(self, ds: LanceDataset, source: pa.Table) -> tuple[table_pb2.Manifest | None, dict[str, int]]:
        on = self._on
        cond_cols = list(ds.schema.names) if self._matched_condition is not None else []
        read = list(dict.fromkeys(on + cond_cols))
        target = ds.to_table(columns=read, with_row_id=True)
        target = target.append_column(_TGT, pa.array(np.arange(target.num_rows, dtype=np.int64)))
        src_keys = source.select(on).append_column(_SRC, pa.array(np.arange(source.num_rows, dtype=np.int64)))
        # null keys never match (SQL equality)
        valid_src = src_keys.filter(pc.invert(_any_null(src_keys, on)))
        if len(on) == 1:
            # a hash probe keeps only the target rows whose key is in the source: the join
            # then runs over the touched rows only (null keys are in no value set)
            probe = pc.is_in(target.column(on[0]), value_set=valid_src.column(on[0]).combine_chunks())
            valid_tgt = target.select([*on, _TGT]).filter(probe)
        else:
            valid_tgt = target.select([*on, _TGT]).filter(pc.invert(_any_null(target, on)))
        pairs = valid_tgt.join(valid_src, keys=on, join_type="inner", use_threads=False)
        tgt_idx = pairs.column(_TGT).to_numpy()
        src_idx = pairs.column(_SRC).to_numpy()
        if tgt_idx.size and np.unique(tgt_idx).size != tgt_idx.size:
            dup = int(np.sort(tgt_idx)[np.flatnonzero(np.diff(np.sort(tgt_idx)) == 0)[0]])
            keys = {k: target.column(k)[dup].as_py() for k in on}
            raise MergeInsertError(
                "Ambiguous merge inserts are prohibited: multiple source rows match the same target row on "
                f"{keys}. Please ensure each target row is matched by at most one source row."
            )
        if self._matched == "fail" and tgt_idx.size:
            raise MergeInsertError("merge_insert: when_matched_fail and source rows match existing rows")
        matched_src = np.zeros(source.num_rows, np.bool_)
        matched_src[src_idx] = True
        act_tgt, act_src = tgt_idx, src_idx
        if self._matched == "update" and self._matched_condition is not None and tgt_idx.size:
            columns = list(ds.schema)
            joined = pa.table(
                {
                    "target": pa.StructArray.from_arrays(
                        [target.column(f.name).combine_chunks().take(pa.array(tgt_idx)) for f in columns], fields=columns
                    ),
                    "source": pa.StructArray.from_arrays(
                        [source.column(f.name).combine_chunks().take(pa.array(src_idx)) for f in columns], fields=columns
                    ),
                }
            )
            mask = _filter_mask(joined, self._matched_condition)
            act_tgt, act_src = tgt_idx[mask], src_idx[mask]
        if self._matched not in ("update", "delete"):
            act_tgt, act_src = act_tgt[:0], act_src[:0]
        insert_src = np.flatnonzero(~matched_src) if self._insert else np.zeros(0, np.int64)
        delete_tgt = np.zeros(0, np.int64)
        if self._by_source_delete:
            unmatched = np.ones(target.num_rows, np.bool_)
            unmatched[tgt_idx] = False
            if self._by_source_expr is not None:
                unmatched &= _expr_mask(ds, target, self._by_source_expr)
            delete_tgt = np.flatnonzero(unmatched)
        n_updated = int(act_tgt.size) if self._matched == "update" else 0
        n_deleted = int(delete_tgt.size) + (int(act_tgt.size) if self._matched == "delete" else 0)
        stats = {"num_inserted_rows": int(insert_src.size), "num_updated_rows": n_updated, "num_deleted_rows": n_deleted}
        rowids = target.column(_ROWID).to_numpy().astype(np.uint64)
        gone = np.concatenate([act_tgt, delete_tgt]).astype(np.int64)
        change = _RowChange(ds)
        if gone.size:
            frag_ids, offsets = row_addresses(ds, rowids[gone])
            change.delete_rows(frag_ids, offsets)
        if self._matched == "update":
            # updated and inserted rows in source order, as pylance writes them
            write_src = np.sort(np.concatenate([act_src, insert_src]))
        else:
            write_src = np.sort(insert_src)
        carried = created = None
        if _stable(ds) and write_src.size:
            # rewritten rows keep their stable ids and creation versions; inserted rows (no
            # id: u64::MAX marks them) get fresh ones at commit
            id_of_src = np.full(source.num_rows, np.iinfo(np.uint64).max, np.uint64)
            created_of_src: np.ndarray | None = np.zeros(source.num_rows, np.uint64)
            if self._matched == "update" and act_tgt.size:
                id_of_src[act_src] = rowids[act_tgt]
                versions = _created_at(ds, *row_addresses(ds, rowids[act_tgt]))
                if versions is None:
                    created_of_src = None
                else:
                    created_of_src[act_src] = versions  # type: ignore[index]
            carried = id_of_src[write_src]
            created = None if created_of_src is None else created_of_src[write_src]
        new_rows = source.take(pa.array(write_src)) if write_src.size else None
        return change.commit(new_rows, carried, created), stats


def _any_null(table: pa.Table, cols: Sequence[str]) -> pa.ChunkedArray | pa.Array:
    mask = pc.is_null(table.column(cols[0]))
    for c in cols[1:]:
        mask = pc.or_(mask, pc.is_null(table.column(c)))
    return mask


def _filter_mask(table: pa.Table, predicate: str) -> np.ndarray:
    """Which rows of ``table`` satisfy the SQL ``predicate`` (null counts as false)."""
    from lance_gpu.filter import parse_filter

    marked = table.append_column("__lance_gpu_pos__", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    kept = marked.filter(parse_filter(predicate, table.schema).expression).column("__lance_gpu_pos__").to_numpy()
    mask = np.zeros(table.num_rows, np.bool_)
    mask[kept] = True
    return mask


def _expr_mask(ds: LanceDataset, target: pa.Table, predicate: str) -> np.ndarray:
    """Which rows of ``target`` (read with ``_rowid``) satisfy ``predicate`` over the
    dataset's columns."""
    hit = ds.to_table(columns=[], filter=predicate, with_row_id=True).column(_ROWID)
    return pc.is_in(target.column(_ROWID), value_set=hit.combine_chunks()).to_numpy(zero_copy_only=False)


# --------------------------------------------------------------------------------------------
# insert


def insert(ds: LanceDataset, data: Any, *, mode: str = "append", **kwargs: Any) -> None:
    """``ds.insert(data, mode=)``: ``write_dataset(data, ds, mode=mode)``; ``ds`` moves to
    the committed version."""
    from lance_gpu.write.dataset_writer import write_version

    if mode not in ("append", "overwrite"):
        raise ValueError(f"insert: mode must be 'append' or 'overwrite', not {mode!r}")
    kwargs.setdefault("storage_options", ds.storage_options)
    ds.reload(write_version(data, ds.root, mode=mode, store=ds.store, **kwargs))
